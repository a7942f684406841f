/* tokfile.c: token files: the streaming writer (versions 1 and 2), the
 * mapped reader (versions 1 and 2, llm.c's files) with every header check,
 * and the data's identity. Invariants: a pm_tokens that read successfully
 * has a verified checksum and only ids below its vocabulary. */
#include "pipemem/pm_data.h"
#include "util/file.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- writing ------------------------------------------------------------------- */

static int header_len(int version) { return version == 1 ? PM_TOK_HEADER : PM_TOK_HEADER2; }

pm_status pm_tokwriter_open(pm_tokwriter *tw, const char *path, int version, uint32_t vocab,
                            uint64_t tokenizer, pm_err *err) {
    *tw = (pm_tokwriter){.path = path, .version = version, .vocab = vocab,
                         .tokenizer = tokenizer, .sum = PM_FNV_OFFSET};
    if (!path) return pm_errf(err, PM_ERR_ARG, "a token file's path is NULL; give a file");
    if (version == 1 && vocab != PM_TOK_VOCAB)
        return pm_errf(err, PM_ERR_ARG, "%s: a version-1 token file holds bytes (vocab 256)", path);
    if (version != 1 && version != 2)
        return pm_errf(err, PM_ERR_ARG, "%s: token file version %d is not 1 or 2", path, version);
    tw->width = version == 1 ? 1 : vocab <= 65536 ? 2 : 4;
    pm_status st = pm_wfile_open(&tw->w, path, err);
    if (st) return st;
    uint8_t zero[PM_TOK_HEADER2] = {0}; /* the header is written last */
    if (fwrite(zero, 1, (size_t)header_len(version), tw->w.f) != (size_t)header_len(version)) {
        pm_wfile_abort(&tw->w);
        return pm_errf(err, PM_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return PM_OK;
}

static pm_status put_raw(pm_tokwriter *tw, const uint8_t *b, size_t bytes, size_t n, pm_err *err) {
    if (bytes && !b) return pm_errf(err, PM_ERR_ARG, "%s: %zu tokens at NULL", tw->path, n);
    if (fwrite(b, 1, bytes, tw->w.f) != bytes)
        return pm_errf(err, PM_ERR_IO, "%s: write failed: %s", tw->path, strerror(errno));
    tw->sum = pm_fnv1a64(tw->sum, b, bytes);
    tw->n += n;
    return PM_OK;
}

pm_status pm_tokwriter_put_bytes(pm_tokwriter *tw, const uint8_t *b, size_t n, pm_err *err) {
    PM_ASSERT(tw->width == 1);
    return put_raw(tw, b, n, n, err);
}

pm_status pm_tokwriter_put(pm_tokwriter *tw, const uint32_t *ids, size_t n, pm_err *err) {
    uint8_t buf[4096];
    if (n && !ids) return pm_errf(err, PM_ERR_ARG, "%s: %zu ids at NULL", tw->path, n);
    size_t per = sizeof buf / (size_t)tw->width;
    for (size_t at = 0; at < n; at += per) {
        size_t k = n - at < per ? n - at : per;
        for (size_t i = 0; i < k; i++) {
            uint32_t id = ids[at + i];
            if (id >= tw->vocab)
                return pm_errf(err, PM_ERR_ARG, "%s: token %u is outside the vocabulary 0..%u",
                               tw->path, id, tw->vocab - 1);
            for (int b = 0; b < tw->width; b++) buf[i * (size_t)tw->width + (size_t)b] =
                (uint8_t)(id >> (8 * b));
        }
        pm_status st = put_raw(tw, buf, k * (size_t)tw->width, k, err);
        if (st) return st;
    }
    return PM_OK;
}

pm_status pm_tokwriter_close(pm_tokwriter *tw, pm_err *err) {
    uint8_t h[PM_TOK_HEADER2] = {0};
    memcpy(h, PM_TOK_MAGIC, 8);
    pm_put_u32(h + 8, (uint32_t)tw->version);
    pm_put_u32(h + 12, tw->vocab);
    pm_put_u64(h + 16, tw->n);
    pm_put_u64(h + 24, tw->sum);
    if (tw->version == 2) {
        pm_put_u32(h + 32, (uint32_t)tw->width);
        pm_put_u64(h + 40, tw->tokenizer);
    }
    size_t hl = (size_t)header_len(tw->version);
    if (fseek(tw->w.f, 0, SEEK_SET) || fwrite(h, 1, hl, tw->w.f) != hl) {
        int e = errno;
        pm_wfile_abort(&tw->w);
        return pm_errf(err, PM_ERR_IO, "%s: write failed: %s", tw->path, strerror(e));
    }
    return pm_wfile_commit(&tw->w, err);
}

void pm_tokwriter_abort(pm_tokwriter *tw) { pm_wfile_abort(&tw->w); }

pm_status pm_tokens_write(const char *path, const uint8_t *tok, size_t n, pm_err *err) {
    pm_tokwriter tw;
    pm_status st = pm_tokwriter_open(&tw, path, 1, PM_TOK_VOCAB, 0, err);
    if (st) return st;
    if ((st = pm_tokwriter_put_bytes(&tw, tok, n, err))) {
        pm_tokwriter_abort(&tw);
        return st;
    }
    return pm_tokwriter_close(&tw, err);
}

pm_status pm_tokens_write_ids(const char *path, const uint32_t *ids, size_t n, uint32_t vocab,
                              uint64_t tokenizer, pm_err *err) {
    pm_tokwriter tw;
    pm_status st = pm_tokwriter_open(&tw, path, 2, vocab, tokenizer, err);
    if (st) return st;
    if ((st = pm_tokwriter_put(&tw, ids, n, err))) {
        pm_tokwriter_abort(&tw);
        return st;
    }
    return pm_tokwriter_close(&tw, err);
}

/* ---- reading ------------------------------------------------------------------- */

/* What a header says: where the tokens start, how many, how wide. */
typedef struct {
    size_t off, n;
    int width;
    uint32_t vocab;
    uint64_t sum, tokenizer;
    int has_sum;
} tok_layout;

static pm_status bad(pm_err *err, const char *path, const char *why) {
    return pm_errf(err, PM_ERR_FORMAT, "%s: %s; rerun 'pipemem prepare'", path, why);
}

static pm_status parse_pm(const uint8_t *h, size_t len, const char *path, tok_layout *L,
                          pm_err *err) {
    uint32_t ver = pm_get_u32(h + 8);
    if (ver != 1 && ver != 2) {
        char why[96];
        snprintf(why, sizeof why, "token file version %u, this pipemem reads 1 and 2", ver);
        return bad(err, path, why);
    }
    *L = (tok_layout){.off = ver == 1 ? PM_TOK_HEADER : PM_TOK_HEADER2, .width = 1,
                      .vocab = pm_get_u32(h + 12), .sum = pm_get_u64(h + 24), .has_sum = 1};
    if (len < L->off) return bad(err, path, "truncated header");
    if (ver == 1 && L->vocab != PM_TOK_VOCAB) return bad(err, path, "field vocab is not 256");
    if (ver == 2) {
        L->width = (int)pm_get_u32(h + 32), L->tokenizer = pm_get_u64(h + 40);
        if ((L->width != 2 && L->width != 4) || L->vocab < 2 ||
            (L->width == 2 && L->vocab > 65536))
            return bad(err, path, "bad vocab or token width");
    }
    uint64_t n = pm_get_u64(h + 16);
    if (n > (len - L->off) / (size_t)L->width || n * (size_t)L->width != len - L->off) {
        char why[160];
        snprintf(why, sizeof why, "header says %llu tokens but the file holds %zu bytes of "
                 "them (truncated?)", (unsigned long long)n, len - L->off);
        return bad(err, path, why);
    }
    L->n = (size_t)n;
    return PM_OK;
}

static pm_status parse_llmc(const uint8_t *h, size_t len, const char *path, tok_layout *L,
                            pm_err *err) {
    if (len < PM_LLMC_HEADER) return bad(err, path, "truncated llm.c header");
    uint32_t ver = pm_get_u32(h + 4), n = pm_get_u32(h + 8);
    if (ver != 1) return bad(err, path, "llm.c token file of an unknown version");
    if ((uint64_t)n * 2 != len - PM_LLMC_HEADER) {
        char why[128];
        snprintf(why, sizeof why, "llm.c header says %u tokens but the file holds %zu bytes "
                 "of them", n, len - PM_LLMC_HEADER);
        return bad(err, path, why);
    }
    *L = (tok_layout){.off = PM_LLMC_HEADER, .n = n, .width = 2, .vocab = PM_LLMC_VOCAB};
    return PM_OK;
}

/* The checksum, and every id below the vocabulary (one pass). */
static pm_status verify(const pm_tokens *t, const tok_layout *L, const char *path, pm_err *err) {
    if (L->has_sum && pm_fnv1a64(PM_FNV_OFFSET, t->tok, t->n * (size_t)t->width) != L->sum)
        return bad(err, path, "checksum mismatch at offset 24 (file corrupted)");
    for (size_t i = 0; t->width > 1 && i < t->n; i++)
        if (pm_tok_at(t, i) >= t->vocab) {
            char why[128];
            snprintf(why, sizeof why, "token %zu is %u, outside the vocabulary 0..%u", i,
                     pm_tok_at(t, i), t->vocab - 1);
            return bad(err, path, why);
        }
    return PM_OK;
}

static pm_status map_file(const char *path, void **map, size_t *len, pm_err *err) {
    FILE *f = NULL;
    pm_status st = pm_file_open_read(path, 1, &f, err);
    if (st) return st;
    struct stat sb;
    int fd = fileno(f);
    if (fstat(fd, &sb) != 0) {
        fclose(f);
        return pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
    }
    *len = (size_t)sb.st_size;
    *map = *len ? mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    fclose(f);
    if (*len && *map == MAP_FAILED)
        return pm_errf(err, PM_ERR_IO, "%s: cannot map %zu bytes: %s", path, *len, strerror(errno));
    return PM_OK;
}

pm_status pm_tokens_read(pm_tokens *t, const char *path, pm_err *err) {
    *t = (pm_tokens){0};
    void *map = NULL;
    size_t len = 0;
    pm_status st = map_file(path, &map, &len, err);
    if (st) return st;
    const uint8_t *h = map;
    tok_layout L = {0};
    if (len >= 8 && !memcmp(h, PM_TOK_MAGIC, 8)) st = parse_pm(h, len, path, &L, err);
    else if (len >= 4 && pm_get_u32(h) == PM_LLMC_MAGIC) st = parse_llmc(h, len, path, &L, err);
    else st = pm_errf(err, PM_ERR_FORMAT, "%s: not a token file (neither pipemem's PMTOKENS "
                      "nor llm.c's); make one with 'pipemem prepare'", path);
    if (!st) {
        *t = (pm_tokens){.tok = h + L.off, .n = L.n, .width = L.width, .vocab = L.vocab,
                         .tokenizer = L.tokenizer, .map = map, .map_len = len};
        st = verify(t, &L, path, err);
    }
    if (st) {
        if (map) munmap(map, len);
        *t = (pm_tokens){0};
    }
    return st;
}

uint64_t pm_tokens_identity(const pm_tokens *t) {
    uint8_t n[8];
    pm_put_u64(n, (uint64_t)t->n);
    uint64_t h = pm_fnv1a64(pm_fnv1a64(PM_FNV_OFFSET, n, 8), t->tok, t->n * (size_t)t->width);
    return h ? h : 1; /* 0 means "unknown" in a checkpoint */
}

void pm_tokens_free(pm_tokens *t) {
    if (!t) return;
    if (t->map) munmap(t->map, t->map_len);
    *t = (pm_tokens){0};
}
