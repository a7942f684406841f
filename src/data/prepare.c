/* prepare.c: `prepare`: text files streamed into train.bin and val.bin,
 * as bytes or as a tokenizer's ids. Two passes over the inputs' sizes, one
 * over their bytes: the sizes fix where the 90/10 split falls, then each
 * chunk goes to the split it belongs to (a chunk crossing the split point is
 * cut there). With a tokenizer, a chunk is encoded up to its last newline
 * and the rest carried into the next one, so no word is cut. Memory: one
 * chunk and its ids. */
#include "pipemem/pm_data.h"
#include "pipemem/pm_tokenizer.h"
#include "util/file.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const pm_tokenizer *tok;
    pm_tokwriter out[2];     /* train, val */
    char *buf;               /* (cap) pending text of the current split */
    size_t len, cap;
    size_t ntok[2];
} prep;

/* Encodes buf[0..n) into split k (bytes pass straight through). */
static pm_status emit(prep *P, int k, size_t n, pm_err *err) {
    if (!P->tok) {
        P->ntok[k] += n;
        return pm_tokwriter_put_bytes(&P->out[k], (const uint8_t *)P->buf, n, err);
    }
    uint32_t *ids;
    size_t m;
    pm_status st = pm_tokenizer_encode(P->tok, P->buf, n, &ids, &m, err);
    if (!st) st = pm_tokwriter_put(&P->out[k], ids, m, err);
    if (!st) P->ntok[k] += m;
    pm_free(ids);
    return st;
}

/* Flushes what is pending up to its last newline (all of it if `all`). */
static pm_status flush(prep *P, int k, int all, pm_err *err) {
    size_t n = P->len;
    if (!all && P->tok) {
        while (n > 0 && P->buf[n - 1] != '\n') n--;
        if (n == 0 && P->len < P->cap) return PM_OK; /* no newline yet: room to wait */
        if (n == 0) n = P->len;                       /* a huge line: cut it */
    }
    pm_status st = n ? emit(P, k, n, err) : PM_OK;
    memmove(P->buf, P->buf + n, P->len - n);
    P->len -= n;
    return st;
}

/* Streams one file into the splits; *seen counts bytes over all files. */
static pm_status stream(prep *P, const char *path, size_t split_at, size_t *seen, pm_err *err) {
    FILE *f = NULL;
    pm_status st = pm_file_open_read(path, 1, &f, err);
    for (size_t got = 1; !st && got;) {
        int k = *seen >= split_at;
        size_t room = P->cap - P->len, want = k ? room : split_at - *seen;
        got = fread(P->buf + P->len, 1, want < room ? want : room, f);
        if (!got && ferror(f)) st = pm_errf(err, PM_ERR_IO, "%s: read failed", path);
        P->len += got, *seen += got;
        if (!st && (P->len == P->cap || *seen == split_at)) st = flush(P, k, *seen == split_at, err);
    }
    if (f) fclose(f);
    return st;
}

/* Bytes over all inputs (regular files: the split point must be known). */
static pm_status total_size(const char *const *files, int nfiles, size_t *total, pm_err *err) {
    *total = 0;
    for (int i = 0; i < nfiles; i++) {
        FILE *f;
        pm_status st = pm_file_open_read(files[i], 1, &f, err);
        if (st) return st;
        struct stat sb;
        int ok = fstat(fileno(f), &sb) == 0;
        fclose(f);
        if (!ok) return pm_errf(err, PM_ERR_IO, "%s: %s", files[i], strerror(errno));
        *total += (size_t)sb.st_size;
    }
    return PM_OK;
}

/* Opens both writers; on error neither is open and both are zeroed (run()
 * then finds no path to free: the writer keeps the strdup'd path). */
static pm_status open_outputs(prep *P, const char *dir, pm_err *err) {
    char path[2][4096];
    snprintf(path[0], sizeof path[0], "%s/train.bin", dir);
    snprintf(path[1], sizeof path[1], "%s/val.bin", dir);
    uint32_t vocab = P->tok ? pm_tokenizer_vocab(P->tok) : PM_TOK_VOCAB;
    uint64_t sum = P->tok ? pm_tokenizer_sum(P->tok) : 0;
    for (int k = 0; k < 2; k++) {
        char *keep = strdup(path[k]); /* the writer keeps the path for messages */
        if (!keep) return pm_errf(err, PM_ERR_NOMEM, "out of memory");
        pm_status st = pm_tokwriter_open(&P->out[k], keep, P->tok ? 2 : 1, vocab, sum, err);
        if (st) {
            free(keep);
            P->out[k] = (pm_tokwriter){0};
            if (k) {
                pm_tokwriter_abort(&P->out[0]);
                free((char *)P->out[0].path);
                P->out[0] = (pm_tokwriter){0};
            }
            return st;
        }
    }
    return PM_OK;
}

static pm_status write_model(const pm_tokenizer *tok, const char *dir, pm_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    size_t len;
    const void *m = pm_tokenizer_model(tok, &len);
    pm_wfile w;
    pm_status st = pm_wfile_open(&w, path, err);
    if (st) return st;
    if (fwrite(m, 1, len, w.f) != len) {
        pm_wfile_abort(&w);
        return pm_errf(err, PM_ERR_IO, "%s: write failed", path);
    }
    return pm_wfile_commit(&w, err);
}

static pm_status run(prep *P, const char *const *files, int nfiles, size_t total,
                     const char *dir, pm_err *err) {
    size_t split_at = total - total * PM_DATA_VAL_PERCENT / 100, seen = 0;
    pm_status st = open_outputs(P, dir, err);
    for (int i = 0; i < nfiles && !st; i++) st = stream(P, files[i], split_at, &seen, err);
    if (!st) st = flush(P, 1, 1, err);
    if (!st && (P->ntok[0] < 2 || P->ntok[1] < 2))
        st = pm_errf(err, PM_ERR_ARG, "the text gives only %zu train and %zu validation tokens; "
                     "need at least 2 each (more text)", P->ntok[0], P->ntok[1]);
    for (int k = 0; k < 2; k++) {
        if (!P->out[k].path) continue;
        if (!st) st = pm_tokwriter_close(&P->out[k], err);
        else pm_tokwriter_abort(&P->out[k]);
        free((char *)P->out[k].path);
    }
    if (!st && P->tok) st = write_model(P->tok, dir, err);
    return st;
}

pm_status pm_data_prepare(const char *const *files, int nfiles, const char *dir,
                          const pm_tokenizer *tok, size_t chunk, pm_prepare_stats *out,
                          pm_err *err) {
    if (out) *out = (pm_prepare_stats){0};
    if (nfiles < 1 || !files) return pm_errf(err, PM_ERR_ARG, "prepare: no input files given");
    if (!dir) return pm_errf(err, PM_ERR_ARG, "prepare: the output directory (dir) is NULL");
    for (int i = 0; i < nfiles; i++)
        if (!files[i]) return pm_errf(err, PM_ERR_ARG, "prepare: input file %d is NULL", i);
    size_t total;
    pm_status st = total_size(files, nfiles, &total, err);
    if (st) return st;
    if (total == 0)
        return pm_errf(err, PM_ERR_ARG, "%s%s: the text has no bytes; give a non-empty file",
                       files[0], nfiles > 1 ? " (and the other inputs)" : "");
    if (total < 20)
        return pm_errf(err, PM_ERR_ARG, "the text has only %zu bytes; need at least 20 for a "
                       "train and a validation split", total);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return pm_errf(err, PM_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return pm_errf(err, PM_ERR_IO, "%s: exists and is not a directory; give a directory "
                       "for the token files", dir);
    prep P = {.tok = tok, .cap = chunk ? chunk : (size_t)1 << 20};
    P.buf = pm_malloc(P.cap);
    if (!P.buf) return pm_errf(err, PM_ERR_NOMEM, "out of memory for a %zu-byte chunk", P.cap);
    st = run(&P, files, nfiles, total, dir, err);
    pm_free(P.buf);
    if (!st && out) *out = (pm_prepare_stats){total, P.ntok[0], P.ntok[1]};
    return st;
}
