/* file.c: bounded whole-file reads and all-or-nothing file writes.
 * Guarantees: pm_read_file never holds more than max+1 bytes of a file, so
 * an endless input fails fast; a pm_wfile leaves its path either untouched
 * or holding the complete new content, durable (file and directory fsynced)
 * before the rename is reported done. */
#define _XOPEN_SOURCE 700 /* fileno, fsync */
#include "pipemem/pm_util.h"
#include "alloc.h"
#include "file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdatomic.h>
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

pm_status pm_file_open_read(const char *path, int regular_only, FILE **out, pm_err *err) {
    *out = NULL;
    if (!path) return pm_errf(err, PM_ERR_ARG, "an input path is NULL; give a file");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    const char *bad = NULL;
    if (fstat(fd, &sb) != 0) bad = strerror(errno);
    else if (S_ISDIR(sb.st_mode)) bad = "is a directory; give a file";
    else if (S_ISFIFO(sb.st_mode) || S_ISSOCK(sb.st_mode)) bad = "is a pipe or socket; give a file";
    else if (regular_only && !S_ISREG(sb.st_mode)) bad = "not a regular file; give a file";
    int flags = bad ? 0 : fcntl(fd, F_GETFL);
    if (!bad && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)) bad = strerror(errno);
    FILE *f = bad ? NULL : fdopen(fd, "rb");
    if (!f) {
        pm_status st = pm_errf(err, PM_ERR_IO, "%s: %s", path, bad ? bad : strerror(errno));
        close(fd);
        return st;
    }
    *out = f;
    return PM_OK;
}

pm_status pm_read_file(const char *path, size_t max, char **out, size_t *len, pm_err *err) {
    *out = NULL;
    *len = 0; /* a NULL path: pm_file_open_read says so */
    FILE *f;
    pm_status ost = pm_file_open_read(path, 0, &f, err);
    if (ost) return ost;
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

/* Temporaries are named PATH.tmp.PID.N.TAG: PID the writer's process, N a
 * counter, TAG 16 hex digits of an FNV-1a hash of a fixed key, the base
 * name, PID and N. A name no user picks by chance, so the cleanup below can
 * prove a file is a temporary of ours before it removes it: a user's
 * PATH.tmp or PATH.tmp.999.notes is never touched. */
static int tmp_name(char *out, size_t cap, const char *dir_part, size_t dl, const char *base,
                    long pid, unsigned long n) {
    char id[64];
    int il = snprintf(id, sizeof id, ".tmp.%ld.%lu", pid, n);
    uint64_t h = pm_fnv1a64(PM_FNV_OFFSET, "pipemem temporary", 17);
    h = pm_fnv1a64(h, base, strlen(base));
    h = pm_fnv1a64(h, id, (size_t)il);
    int len = snprintf(out, cap, "%.*s%s%s.%016llx", (int)dl, dir_part, base, id,
                       (unsigned long long)h);
    return len < 0 || (size_t)len >= cap ? -1 : 0;
}

int pm_tmp_open(const char *path, int rdwr, char **tmp) {
    *tmp = NULL;
    if (!path || !*path) {
        errno = EINVAL;
        return -1;
    }
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
    size_t n = strlen(path) + 64;
    *tmp = pm_malloc(n);
    if (!*tmp) {
        errno = ENOMEM;
        return -1;
    }
    static atomic_uint counter;
    int flags = (rdwr ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    for (int tries = 0; tries < 1000; tries++) {
        unsigned k = atomic_fetch_add(&counter, 1);
        if (tmp_name(*tmp, n, path, dl, path + dl, (long)getpid(), k)) break;
        int fd = open(*tmp, flags, 0666);
        if (fd >= 0) return fd;
        if (errno != EEXIST) break;
    }
    int e = errno == EEXIST || errno == 0 ? EEXIST : errno;
    pm_free(*tmp), *tmp = NULL;
    errno = e;
    return -1;
}

/* 1 if nm (a name in path's directory) is a temporary pm_tmp_open made
 * for base whose process is gone: its name must be exactly the one
 * tmp_name gives for its PID and N. */
static int stale_tmp(const char *nm, const char *base, size_t bl) {
    if (strncmp(nm, base, bl) || strncmp(nm + bl, ".tmp.", 5)) return 0;
    const char *p = nm + bl + 5;
    if (*p < '1' || *p > '9') return 0;
    char *end;
    errno = 0;
    long pid = strtol(p, &end, 10);
    if (errno || pid > INT_MAX || *end != '.' || end[1] < '0' || end[1] > '9') return 0;
    unsigned long k = strtoul(end + 1, &end, 10);
    char want[NAME_MAX + 64];
    if (errno || *end != '.' || tmp_name(want, sizeof want, "", 0, base, pid, k) ||
        strcmp(want, nm))
        return 0;
    return pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes the temporaries killed writers of path left (stale_tmp); links
 * are removed, never followed. */
static void clear_stale(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[4096];
    size_t dl = slash ? (size_t)(slash - path) : 1, bl = strlen(base);
    if (dl >= sizeof dir) return;
    memcpy(dir, slash ? path : ".", dl);
    dir[dl] = 0;
    if (slash && dl == 0) dir[0] = '/', dir[1] = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!stale_tmp(e->d_name, base, bl)) continue;
        char full[4096 + 256];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        unlink(full);
    }
    closedir(d);
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
    if (!w->path) return pm_errf(err, PM_ERR_NOMEM, "%s: out of memory", path);
    memcpy(w->path, path, n + 1);
    clear_stale(path);
    int fd = pm_tmp_open(path, 0, &w->tmp);
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        pm_status st = pm_errf(err, errno == ENOMEM ? PM_ERR_NOMEM : PM_ERR_IO,
                               "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
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
    clear_stale(path);
    char *tmp = NULL;
    int fd = pm_tmp_open(path, 0, &tmp); /* a probe, created and removed */
    if (fd < 0)
        return pm_errf(err, errno == ENOMEM ? PM_ERR_NOMEM : PM_ERR_IO,
                       "%s: cannot be written (%s); check the directory exists and is "
                       "writable", path, strerror(errno));
    close(fd);
    unlink(tmp);
    pm_free(tmp);
    return PM_OK;
}

/* A path not (yet) there as its resolved directory and its last component
 * ("a/b/" is "a/b"); -1 when the directory cannot be resolved either. */
static int resolved_name(const char *path, char out[PATH_MAX]) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* trailing slashes */
    size_t cut = n;
    while (cut > 0 && path[cut - 1] != '/') cut--;
    char dir[PATH_MAX], real[PATH_MAX];
    if (cut >= sizeof dir || n - cut >= sizeof dir) return -1;
    if (cut == 0) snprintf(dir, sizeof dir, ".");
    else memcpy(dir, path, cut), dir[cut] = 0; /* "d/", or "/" */
    if (!realpath(dir, real)) return -1;
    int len = snprintf(out, PATH_MAX, "%s/%.*s", strcmp(real, "/") ? real : "", (int)(n - cut),
                       path + cut);
    return len < 0 || len >= PATH_MAX ? -1 : 0;
}

int pm_same_file(const char *a, const char *b) {
    if (!a || !b || !*a || !*b) return 0;
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb) return 0;
    char na[PATH_MAX], nb[PATH_MAX];
    if (resolved_name(a, na) || resolved_name(b, nb)) return !strcmp(a, b);
    return !strcmp(na, nb);
}
