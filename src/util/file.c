/* file.c: bounded whole-file reads and all-or-nothing file writes.
 * Guarantees: pm_read_file never holds more than max+1 bytes of a file, so
 * an endless input fails fast; a pm_wfile leaves its path either untouched
 * or holding the complete new content, durable (file and directory fsynced)
 * before the rename is reported done. */
#define _XOPEN_SOURCE 700 /* fileno, fsync */
#include "pipemem/pm_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pm_status not_a_dir(const char *path, pm_err *err) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return pm_errf(err, PM_ERR_IO, "%s: is a directory; give a file", path);
    return PM_OK;
}

pm_status pm_read_file(const char *path, size_t max, char **out, size_t *len, pm_err *err) {
    *out = NULL;
    *len = 0;
    if (not_a_dir(path, err)) return PM_ERR_IO;
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t cap = 0, n = 0;
    pm_status st = PM_OK;
    for (;;) {
        if (n + 1 >= cap) { /* cap never passes max + 2: n > max stops first */
            size_t ncap = cap ? cap * 2 : 4096;
            if (ncap > max + 2) ncap = max + 2;
            char *nb = pm_realloc(buf, ncap);
            if (!nb) {
                st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory reading the file", path);
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (n > max) {
            st = pm_errf(err, PM_ERR_IO,
                         "%s: larger than the %zu-byte limit for this input; give a regular "
                         "file under the limit", path, max);
            break;
        }
        if (got == 0) {
            if (ferror(f)) st = pm_errf(err, PM_ERR_IO, "%s: read error: %s", path,
                                        strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st) {
        pm_free(buf);
        return st;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return PM_OK;
}

static char *tmp_name(const char *path) {
    size_t n = strlen(path);
    char *t = pm_malloc(n + 5);
    if (t) {
        memcpy(t, path, n);
        memcpy(t + n, ".tmp", 5);
    }
    return t;
}

pm_status pm_wfile_open(pm_wfile *w, const char *path, pm_err *err) {
    *w = (pm_wfile){0};
    w->name = path ? path : "standard output";
    if (!path) {
        w->f = stdout;
        return PM_OK;
    }
    if (not_a_dir(path, err)) return PM_ERR_IO;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        /* A device or pipe (/dev/stdout, /dev/null, a FIFO) is written in
         * place: there is no old content to protect, and renaming a tmp file
         * over a device node would replace the node. */
        w->f = fopen(path, "wb");
        if (!w->f) return pm_errf(err, PM_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        w->direct = 1;
        return PM_OK;
    }
    size_t n = strlen(path);
    w->path = pm_malloc(n + 1);
    w->tmp = tmp_name(path);
    if (!w->path || !w->tmp) {
        pm_wfile_abort(w);
        return pm_errf(err, PM_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->path, path, n + 1);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        pm_status st = pm_errf(err, PM_ERR_IO, "%s: cannot write: %s", w->tmp, strerror(errno));
        pm_wfile_abort(w);
        return st;
    }
    return PM_OK;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) {
        dir[0] = '.', dir[1] = '\0';
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) return -1;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    /* Some file systems refuse fsync on a directory; the rename still
     * happened, so only a real I/O error counts. */
    return rc == 0 || errno == EINVAL || errno == EROFS ? 0 : -1;
}

pm_status pm_wfile_commit(pm_wfile *w, pm_err *err) {
    FILE *f = w->f;
    if (!w->path) { /* stdout or a device written in place */
        int bad = f && (fflush(f) != 0 || ferror(f));
        int e = errno;
        if (w->direct && fclose(f) != 0) bad = 1, e = errno;
        const char *name = w->name;
        *w = (pm_wfile){0};
        if (bad) return pm_errf(err, PM_ERR_IO, "%s: write failed: %s", name, strerror(e));
        return PM_OK;
    }
    const char *why = NULL;
    int e = 0;
    if (fflush(f) != 0 || ferror(f)) why = "write failed", e = errno;
    else if (fsync(fileno(f)) != 0) why = "fsync failed", e = errno;
    if (fclose(f) != 0 && !why) why = "close failed", e = errno;
    w->f = NULL;
    if (!why && rename(w->tmp, w->path) != 0) why = "rename failed", e = errno;
    if (why) {
        pm_status st = pm_errf(err, PM_ERR_IO, "%s: %s: %s; the previous file is unchanged",
                               w->path, why, e ? strerror(e) : "unknown error");
        pm_wfile_abort(w);
        return st;
    }
    int dir_bad = sync_dir(w->path);
    pm_status st = PM_OK;
    if (dir_bad)
        st = pm_errf(err, PM_ERR_IO, "%s: written, but its directory could not be synced: %s",
                     w->path, strerror(errno));
    pm_free(w->path);
    pm_free(w->tmp);
    *w = (pm_wfile){0};
    return st;
}

void pm_wfile_abort(pm_wfile *w) {
    if (!w) return;
    if (w->direct && w->f) fclose(w->f);
    if (w->path) {
        if (w->f) fclose(w->f);
        if (w->tmp) unlink(w->tmp);
    }
    pm_free(w->path);
    pm_free(w->tmp);
    *w = (pm_wfile){0};
}

pm_status pm_path_check_writable(const char *path, pm_err *err) {
    if (!path || !*path) return pm_errf(err, PM_ERR_ARG, "an output path is empty");
    if (not_a_dir(path, err)) return PM_ERR_IO;
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* a device: written in place */
        if (access(path, W_OK) != 0)
            return pm_errf(err, PM_ERR_IO, "%s: cannot be written (%s)", path, strerror(errno));
        return PM_OK;
    }
    char *tmp = tmp_name(path);
    if (!tmp) return pm_errf(err, PM_ERR_NOMEM, "%s: out of memory", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    pm_status st = PM_OK;
    if (fd < 0)
        st = pm_errf(err, PM_ERR_IO, "%s: cannot be written (%s); check the directory exists "
                     "and is writable", path, strerror(errno));
    else {
        close(fd);
        unlink(tmp);
    }
    pm_free(tmp);
    return st;
}
