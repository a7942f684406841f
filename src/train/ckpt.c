/* ckpt.c: checkpoint save and load (format in pm_train.h).
 *
 * Saving writes header, slabs and checksum through a pm_wfile (a temporary,
 * fsync, rename, directory fsync), so the path holds the old checkpoint or
 * the whole new one. Reading verifies before it interprets: magic and
 * version, the size a header needs, then the checksum over the whole file,
 * and only then the header's fields (consistency, then the run's config and
 * data). So a corrupted field is reported as corruption, never as a config
 * mismatch, and a load that fails leaves the trainer exactly as it was: the
 * slabs are read into it only after everything passed, in a second pass
 * that hashes again (a file changed in between is reported).
 * Assumes a little-endian host for the float slabs (x86-64, arm64). */
#define _XOPEN_SOURCE 700 /* fileno */
#include "pipemem/pm_train.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void put_f32(uint8_t *p, float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    pm_put_u32(p, x);
}
static float get_f32(const uint8_t *p) {
    uint32_t x = pm_get_u32(p);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void encode_header(uint8_t h[PM_CKPT_HEADER], const pm_trainer *t) {
    const pm_train_cfg *c = &t->cfg;
    memset(h, 0, PM_CKPT_HEADER);
    memcpy(h, PM_CKPT_MAGIC, 8);
    pm_put_u32(h + 8, PM_CKPT_VERSION);
    pm_put_u32(h + 12, PM_CKPT_HEADER);
    const int32_t cf[9] = {c->model.vocab, c->model.ctx, c->model.dim, c->model.heads,
                           c->model.layers, c->batch, c->micro, c->opt.steps, c->opt.warmup};
    for (int i = 0; i < 9; i++) pm_put_u32(h + 16 + 4 * i, (uint32_t)cf[i]);
    const float of[7] = {c->opt.lr, c->opt.lr_min_frac, c->opt.beta1, c->opt.beta2,
                         c->opt.eps, c->opt.weight_decay, c->opt.grad_clip};
    for (int i = 0; i < 7; i++) put_f32(h + 52 + 4 * i, of[i]);
    pm_put_u64(h + 80, (uint64_t)t->step);
    pm_put_u64(h + 88, c->seed);
    pm_put_u64(h + 96, t->train.next);
    pm_put_u64(h + 104, t->train.seed);
    pm_put_u64(h + 112, (uint64_t)t->n_params);
    pm_put_u64(h + 120, t->data_id);
}

static void decode_header(const uint8_t *h, pm_ckpt_info *info) {
    pm_train_cfg *c = &info->cfg;
    int32_t cf[9];
    for (int i = 0; i < 9; i++) cf[i] = (int32_t)pm_get_u32(h + 16 + 4 * i);
    c->model = (pm_gpt_config){.vocab = cf[0], .ctx = cf[1], .dim = cf[2], .heads = cf[3], .layers = cf[4]};
    c->batch = cf[5];
    c->micro = cf[6];
    c->opt.steps = cf[7];
    c->opt.warmup = cf[8];
    float *of[7] = {&c->opt.lr, &c->opt.lr_min_frac, &c->opt.beta1, &c->opt.beta2,
                    &c->opt.eps, &c->opt.weight_decay, &c->opt.grad_clip};
    for (int i = 0; i < 7; i++) *of[i] = get_f32(h + 52 + 4 * i);
    info->step = (int64_t)pm_get_u64(h + 80);
    c->seed = pm_get_u64(h + 88);
    info->data_pos = pm_get_u64(h + 96);
    info->n_params = (size_t)pm_get_u64(h + 112);
    info->version = pm_get_u32(h + 8);
    info->data_id = info->version >= 2 ? pm_get_u64(h + 120) : 0;
}

pm_status pm_ckpt_save(const pm_trainer *t, const char *path, pm_err *err) {
    uint8_t h[PM_CKPT_HEADER];
    encode_header(h, t);
    pm_wfile w;
    pm_status st = pm_wfile_open(&w, path, err);
    if (st) return st;
    uint64_t sum = pm_fnv1a64(PM_FNV_OFFSET, h, sizeof h);
    int ok = fwrite(h, 1, sizeof h, w.f) == sizeof h;
    const float *slab[3] = {t->params, t->m, t->v};
    for (int s = 0; s < 3 && ok; s++) {
        ok = fwrite(slab[s], sizeof(float), t->n_params, w.f) == t->n_params;
        sum = pm_fnv1a64(sum, slab[s], t->n_params * sizeof(float));
    }
    /* version 3: the tokenizer the data was made with (length 0: bytes) */
    uint8_t tl[8];
    pm_put_u64(tl, (uint64_t)t->tok_model_len);
    ok = ok && fwrite(tl, 1, 8, w.f) == 8 &&
         (!t->tok_model_len || fwrite(t->tok_model, 1, t->tok_model_len, w.f) == t->tok_model_len);
    sum = pm_fnv1a64(pm_fnv1a64(sum, tl, 8), t->tok_model, t->tok_model_len);
    uint8_t tail[8];
    pm_put_u64(tail, sum);
    ok = ok && fwrite(tail, 1, 8, w.f) == 8;
    if (!ok) {
        int e = errno;
        pm_wfile_abort(&w);
        return pm_errf(err, PM_ERR_IO, "%s: write failed: %s; the previous file is unchanged",
                       path, strerror(e));
    }
    return pm_wfile_commit(&w, err);
}

/* Hashes n bytes from f into *sum (into dst too, unless dst is NULL). */
static int read_hash(FILE *f, void *dst, size_t n, uint64_t *sum) {
    unsigned char buf[1 << 15];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < sizeof buf ? n - i : sizeof buf;
        unsigned char *p = dst ? (unsigned char *)dst + i : buf;
        if (fread(p, 1, k, f) != k) return 0;
        *sum = pm_fnv1a64(*sum, p, k);
        i += k;
    }
    return 1;
}

/* Magic, version and the least size, from the first bytes and the size. */
static pm_status check_start(const char *path, const uint8_t *h, size_t got, size_t size,
                             pm_err *err) {
    size_t magic_n = got < 8 ? got : 8;
    if (memcmp(h, PM_CKPT_MAGIC, magic_n))
        return pm_errf(err, PM_ERR_FORMAT, "%s: not a pipemem checkpoint (bad magic at offset 0)",
                       path);
    size_t least = PM_CKPT_HEADER + 8;
    if (got < 16)
        return pm_errf(err, PM_ERR_FORMAT,
                       "%s: truncated: %zu bytes, a checkpoint has at least %zu", path, size,
                       least);
    uint32_t ver = pm_get_u32(h + 8);
    if (ver < 1 || ver > PM_CKPT_VERSION)
        return pm_errf(err, PM_ERR_FORMAT, "%s: checkpoint version %u at offset 8, this pipemem "
                       "reads versions 1 to %u", path, ver, PM_CKPT_VERSION);
    if (size < least)
        return pm_errf(err, PM_ERR_FORMAT,
                       "%s: truncated: %zu bytes, a checkpoint has at least %zu", path, size,
                       least);
    if (pm_get_u32(h + 12) != PM_CKPT_HEADER)
        return pm_errf(err, PM_ERR_FORMAT, "%s: header size %u at offset 12, expected %d (the "
                       "file is corrupted)", path, pm_get_u32(h + 12), PM_CKPT_HEADER);
    return PM_OK;
}

/* The header's fields agree with each other and with the file's size (from
 * version 3 on, the tokenizer section's length at the end of the slabs,
 * read from f, must fill the rest). */
static pm_status check_header(const char *path, pm_ckpt_info *info, size_t size, FILE *f,
                              pm_err *err) {
    size_t expect = 0;
    int ok = pm_gpt_config_check(&info->cfg.model, NULL) == PM_OK &&
             info->n_params == pm_gpt_num_params(&info->cfg.model) &&
             pm_size_mul(info->n_params, 12, &expect) &&
             pm_size_add(expect, PM_CKPT_HEADER + 8, &expect);
    if (ok && info->version >= 3) {
        uint8_t tl[8];
        ok = size >= expect + 8 && !fseek(f, (long)(expect - 8), SEEK_SET) &&
             fread(tl, 1, 8, f) == 8;
        info->tok_len = ok ? (size_t)pm_get_u64(tl) : 0;
        ok = ok && info->tok_len <= size - expect - 8;
        if (ok) expect += 8 + info->tok_len;
    }
    if (!ok || expect != size)
        return pm_errf(err, PM_ERR_FORMAT,
                       "%s: header says %zu parameters (offset 112) for a file of %zu bytes; "
                       "the file is inconsistent", path, info->n_params, size);
    return PM_OK;
}

/* Opens and verifies path (magic, version, size, checksum, header). On
 * success *fp is open and positioned at the first slab. */
static pm_status open_verified(const char *path, FILE **fp, pm_ckpt_info *info,
                               uint8_t h[PM_CKPT_HEADER], pm_err *err) {
    *fp = NULL;
    *info = (pm_ckpt_info){0};
    FILE *f;
    pm_status st = pm_file_open_read(path, 1, &f, err);
    if (st) return st;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    size_t size = (size_t)sb.st_size;
    size_t got = fread(h, 1, PM_CKPT_HEADER, f);
    if ((st = check_start(path, h, got, size, err))) goto fail;
    uint64_t sum = pm_fnv1a64(PM_FNV_OFFSET, h, PM_CKPT_HEADER);
    uint8_t tail[8];
    if (!read_hash(f, NULL, size - PM_CKPT_HEADER - 8, &sum) || fread(tail, 1, 8, f) != 8) {
        st = pm_errf(err, PM_ERR_IO, "%s: read failed (file shrank while reading?)", path);
        goto fail;
    }
    if (pm_get_u64(tail) != sum) {
        /* The header is not trusted yet, but a size that disagrees with it
         * is the likelier story: a copy or write cut short. */
        size_t claimed = 0, n = (size_t)pm_get_u64(h + 112);
        if (pm_size_mul(n, 12, &claimed) && pm_size_add(claimed, PM_CKPT_HEADER + 8, &claimed) &&
            claimed > size)
            st = pm_errf(err, PM_ERR_FORMAT,
                         "%s: truncated: %zu bytes, its header describes %zu (checksum "
                         "mismatch); use another checkpoint", path, size, claimed);
        else
            st = pm_errf(err, PM_ERR_FORMAT,
                         "%s: checksum mismatch (the file is corrupted); use another checkpoint",
                         path);
        goto fail;
    }
    decode_header(h, info);
    if ((st = check_header(path, info, size, f, err))) goto fail;
    fseek(f, PM_CKPT_HEADER, SEEK_SET);
    *fp = f;
    return PM_OK;
fail:
    fclose(f);
    return st;
}

pm_status pm_ckpt_info_read(const char *path, pm_ckpt_info *info, pm_err *err) {
    FILE *f;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, info, h, err);
    if (!st) fclose(f);
    return st;
}

static pm_status mismatch(pm_err *err, const char *path, const char *field, const char *opt,
                          long long file, long long run) {
    return pm_errf(err, PM_ERR_ARG,
                   "%s: checkpoint has %s = %lld but this run asks for %lld; pass %s %lld "
                   "or start without --resume", path, field, file, run, opt, file);
}

/* The checkpoint's run against the trainer's: model, batch, seed, lr, data. */
static pm_status check_run(const char *path, const pm_ckpt_info *in, const pm_trainer *t,
                           pm_err *err) {
    const pm_train_cfg *a = &in->cfg, *b = &t->cfg;
    const char *name[] = {"vocab", "ctx", "dim", "heads", "layers", "batch", "microbatches"};
    const char *opt[] = {"--vocab", "--ctx", "--dim", "--heads", "--layers", "--batch",
                         "--microbatches"};
    const int va[] = {a->model.vocab, a->model.ctx, a->model.dim, a->model.heads,
                      a->model.layers, a->batch, a->micro};
    const int vb[] = {b->model.vocab, b->model.ctx, b->model.dim, b->model.heads,
                      b->model.layers, b->batch, b->micro};
    for (int i = 0; i < 7; i++)
        if (va[i] != vb[i]) return mismatch(err, path, name[i], opt[i], va[i], vb[i]);
    if (a->seed != b->seed)
        return mismatch(err, path, "seed", "--seed", (long long)a->seed, (long long)b->seed);
    if (a->opt.lr != b->opt.lr)
        return pm_errf(err, PM_ERR_ARG, "%s: checkpoint has lr = %g but this run asks for "
                       "%g; pass --lr %g", path, a->opt.lr, b->opt.lr, a->opt.lr);
    if (in->data_id && t->data_id && in->data_id != t->data_id)
        return pm_errf(err, PM_ERR_ARG,
                       "%s: checkpoint was trained on other data (train tokens identity "
                       "%016llx, this run's %016llx); pass the --data it was made with",
                       path, (unsigned long long)in->data_id, (unsigned long long)t->data_id);
    return PM_OK;
}

pm_status pm_ckpt_load(pm_trainer *t, const char *path, pm_err *err) {
    FILE *f;
    pm_ckpt_info in;
    uint8_t first[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, &in, first, err);
    if (st) return st;
    if ((st = check_run(path, &in, t, err))) {
        fclose(f);
        return st;
    }
    /* Everything checked: now the trainer changes. */
    uint8_t h[PM_CKPT_HEADER];
    fseek(f, 0, SEEK_SET);
    uint64_t sum = PM_FNV_OFFSET;
    float *slab[3] = {t->params, t->m, t->v};
    int ok = read_hash(f, h, sizeof h, &sum);
    for (int s = 0; s < 3 && ok; s++) ok = read_hash(f, slab[s], t->n_params * 4, &sum);
    if (in.version >= 3) ok = ok && read_hash(f, NULL, 8 + in.tok_len, &sum);
    uint8_t tail[8];
    ok = ok && fread(tail, 1, 8, f) == 8 && pm_get_u64(tail) == sum;
    ok = ok && !memcmp(h, first, sizeof h); /* the header checked is the one loaded */
    fclose(f);
    if (!ok)
        return pm_errf(err, PM_ERR_IO, "%s: the file changed while it was loaded; the trainer's "
                       "parameters are unspecified", path);
    t->step = in.step;
    t->train.next = in.data_pos;
    return PM_OK;
}

pm_status pm_ckpt_load_params(const char *path, pm_ckpt_info *info, float **params,
                              pm_err *err) {
    *params = NULL;
    FILE *f;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, info, h, err);
    if (st) return st;
    float *p = pm_malloc(info->n_params * sizeof(float));
    uint64_t unused = 0;
    if (!p) st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for %zu parameters", path,
                         info->n_params);
    else if (!read_hash(f, p, info->n_params * sizeof(float), &unused))
        st = pm_errf(err, PM_ERR_IO, "%s: read failed (file shrank while reading?)", path);
    fclose(f);
    if (st) {
        pm_free(p);
        return st;
    }
    *params = p;
    return PM_OK;
}

pm_status pm_ckpt_load_tokenizer(const char *path, void **model, size_t *len, pm_err *err) {
    *model = NULL, *len = 0;
    FILE *f;
    pm_ckpt_info info;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, &info, h, err);
    if (st || !info.tok_len) {
        if (!st) fclose(f);
        return st;
    }
    void *m = pm_malloc(info.tok_len);
    uint64_t unused = 0;
    if (!m) st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for the tokenizer", path);
    else if (fseek(f, (long)(PM_CKPT_HEADER + info.n_params * 12 + 8), SEEK_SET) ||
             !read_hash(f, m, info.tok_len, &unused))
        st = pm_errf(err, PM_ERR_IO, "%s: read failed (file shrank while reading?)", path);
    fclose(f);
    if (st) {
        pm_free(m);
        return st;
    }
    *model = m, *len = info.tok_len;
    return PM_OK;
}
