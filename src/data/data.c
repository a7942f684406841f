/* data.c: token files (write, read with every header check), `prepare`
 * (text files -> train.bin + val.bin) and the seeded batch loader.
 * Invariants: a pm_tokens that read successfully has a verified checksum;
 * a loader's window always lies inside the data (n >= ctx + 1). */
#include "pipemem/pm_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

uint64_t pm_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t pm_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}


pm_status pm_tokens_write(const char *path, const uint8_t *tok, size_t n, pm_err *err) {
    uint8_t h[PM_TOK_HEADER];
    memcpy(h, PM_TOK_MAGIC, 8);
    pm_put_u32(h + 8, PM_TOK_VERSION);
    pm_put_u32(h + 12, PM_TOK_VOCAB);
    pm_put_u64(h + 16, (uint64_t)n);
    pm_put_u64(h + 24, pm_fnv1a64(PM_FNV_OFFSET, tok, n));
    pm_wfile w;
    pm_status st = pm_wfile_open(&w, path, err);
    if (st) return st;
    if (fwrite(h, 1, sizeof h, w.f) != sizeof h || fwrite(tok, 1, n, w.f) != n) {
        int e = errno;
        pm_wfile_abort(&w);
        return pm_errf(err, PM_ERR_IO, "%s: write failed: %s", path, strerror(e));
    }
    return pm_wfile_commit(&w, err);
}

pm_status pm_tokens_read(pm_tokens *t, const char *path, pm_err *err) {
    *t = (pm_tokens){0};
    char *buf;
    size_t len;
    pm_status st = pm_read_file(path, PM_CORPUS_MAX + PM_TOK_HEADER, &buf, &len, err);
    if (st) return st;
    const uint8_t *h = (const uint8_t *)buf;
    if (len < PM_TOK_HEADER || memcmp(h, PM_TOK_MAGIC, 8)) {
        st = pm_errf(err, PM_ERR_FORMAT,
                     "%s: not a pipemem token file (no PMTOKENS header); make one with "
                     "'pipemem prepare'", path);
        goto done;
    }
    uint32_t ver = pm_get_u32(h + 8), vocab = pm_get_u32(h + 12);
    uint64_t n = pm_get_u64(h + 16), sum = pm_get_u64(h + 24);
    if (ver != PM_TOK_VERSION) {
        st = pm_errf(err, PM_ERR_FORMAT,
                     "%s: token file version %u, this pipemem reads version %u; rerun "
                     "'pipemem prepare'", path, ver, PM_TOK_VERSION);
        goto done;
    }
    if (vocab != PM_TOK_VOCAB) {
        st = pm_errf(err, PM_ERR_FORMAT, "%s: field vocab is %u, expected %d", path, vocab,
                     PM_TOK_VOCAB);
        goto done;
    }
    if (n != (uint64_t)(len - PM_TOK_HEADER)) {
        st = pm_errf(err, PM_ERR_FORMAT,
                     "%s: header says %llu tokens but the file holds %zu (truncated?); rerun "
                     "'pipemem prepare'", path, (unsigned long long)n, len - PM_TOK_HEADER);
        goto done;
    }
    if (pm_fnv1a64(PM_FNV_OFFSET, h + PM_TOK_HEADER, (size_t)n) != sum) {
        st = pm_errf(err, PM_ERR_FORMAT,
                     "%s: checksum mismatch at offset 24 (file corrupted); rerun "
                     "'pipemem prepare'", path);
        goto done;
    }
    t->tok = pm_malloc(n ? (size_t)n : 1);
    if (!t->tok) {
        st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for %llu tokens", path,
                     (unsigned long long)n);
        goto done;
    }
    memcpy(t->tok, h + PM_TOK_HEADER, (size_t)n);
    t->n = (size_t)n;
done:
    pm_free(buf);
    return st;
}

uint64_t pm_tokens_identity(const pm_tokens *t) {
    uint8_t n[8];
    pm_put_u64(n, (uint64_t)t->n);
    uint64_t h = pm_fnv1a64(pm_fnv1a64(PM_FNV_OFFSET, n, 8), t->tok, t->n);
    return h ? h : 1; /* 0 means "unknown" in a checkpoint */
}

void pm_tokens_free(pm_tokens *t) {
    if (!t) return;
    pm_free(t->tok);
    *t = (pm_tokens){0};
}

/* Appends every input file to one buffer (grown by doubling). */
static pm_status read_all(const char *const *files, int nfiles, uint8_t **out, size_t *len,
                          pm_err *err) {
    *out = NULL;
    *len = 0;
    uint8_t *all = NULL;
    size_t n = 0;
    for (int i = 0; i < nfiles; i++) {
        char *b;
        size_t l;
        pm_status st = pm_read_file(files[i], PM_CORPUS_MAX - n, &b, &l, err);
        if (st) {
            pm_free(all);
            return st;
        }
        uint8_t *na = pm_realloc(all, n + l + 1);
        if (!na) {
            pm_free(b);
            pm_free(all);
            return pm_errf(err, PM_ERR_NOMEM, "%s: out of memory", files[i]);
        }
        all = na;
        memcpy(all + n, b, l);
        n += l;
        pm_free(b);
    }
    *out = all;
    *len = n;
    return PM_OK;
}

pm_status pm_data_prepare(const char *const *files, int nfiles, const char *dir,
                          pm_prepare_stats *st, pm_err *err) {
    if (st) *st = (pm_prepare_stats){0};
    if (nfiles < 1) return pm_errf(err, PM_ERR_ARG, "prepare: no input files given");
    uint8_t *all;
    size_t n;
    pm_status s = read_all(files, nfiles, &all, &n, err);
    if (s) return s;
    if (n == 0) {
        pm_free(all);
        return pm_errf(err, PM_ERR_ARG, "%s%s: the text has no bytes; give a non-empty file",
                       files[0], nfiles > 1 ? " (and the other inputs)" : "");
    }
    size_t n_val = n * PM_DATA_VAL_PERCENT / 100;
    size_t n_train = n - n_val;
    if (n_val < 2 || n_train < 2) {
        pm_free(all);
        return pm_errf(err, PM_ERR_ARG,
                       "the text has only %zu bytes; need at least 20 for a train and a "
                       "validation split", n);
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        pm_free(all);
        return pm_errf(err, PM_ERR_IO, "%s: cannot create directory: %s", dir,
                       strerror(errno));
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", dir);
    s = pm_tokens_write(path, all, n_train, err);
    if (!s) {
        snprintf(path, sizeof path, "%s/val.bin", dir);
        s = pm_tokens_write(path, all + n_train, n_val, err);
    }
    pm_free(all);
    if (!s && st) *st = (pm_prepare_stats){n, n_train, n_val};
    return s;
}

pm_status pm_loader_init(pm_loader *ld, const pm_tokens *t, int ctx, uint64_t seed,
                         const char *what, pm_err *err) {
    *ld = (pm_loader){0};
    if (ctx < 1) return pm_errf(err, PM_ERR_ARG, "context must be >= 1 (got %d)", ctx);
    if (t->n < (size_t)ctx + 1)
        return pm_errf(err, PM_ERR_ARG,
                       "%s holds %zu tokens, fewer than context+1 = %d; use a smaller --ctx "
                       "or more text", what ? what : "token data", t->n, ctx + 1);
    *ld = (pm_loader){t->tok, t->n, ctx, seed, 0};
    return PM_OK;
}

size_t pm_loader_pos(const pm_loader *ld, uint64_t i) {
    /* n - ctx possible starts: 0 .. n-ctx-1, each leaving ctx+1 tokens. */
    uint64_t span = (uint64_t)(ld->n - (size_t)ld->ctx);
    return (size_t)(pm_splitmix64(ld->seed ^ pm_splitmix64(i)) % span);
}

void pm_loader_next(pm_loader *ld, int B, int32_t *inputs, int32_t *targets) {
    size_t T = (size_t)ld->ctx;
    for (int b = 0; b < B; b++) {
        const uint8_t *w = ld->tok + pm_loader_pos(ld, ld->next++);
        for (size_t t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = w[t];
            targets[(size_t)b * T + t] = w[t + 1];
        }
    }
}
