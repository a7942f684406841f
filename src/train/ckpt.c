/* ckpt.c: checkpoint save and load (format in pm_train.h). Saving streams
 * header, slabs and checksum to FILE.tmp, then renames. Loading checks, in
 * order, magic, version, header size, file size (truncation), config
 * against the run, then streams the slabs while hashing and compares the
 * checksum last; every failure is one line naming the file and the field.
 * Assumes a little-endian host for the float slabs (x86-64, arm64). */
#include "pipemem/pm_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
}

static void decode_header(const uint8_t *h, pm_ckpt_info *info) {
    pm_train_cfg *c = &info->cfg;
    int32_t cf[9];
    for (int i = 0; i < 9; i++) cf[i] = (int32_t)pm_get_u32(h + 16 + 4 * i);
    c->model = (pm_gpt_config){cf[0], cf[1], cf[2], cf[3], cf[4]};
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
}

pm_status pm_ckpt_save(const pm_trainer *t, const char *path, pm_err *err) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return pm_errf(err, PM_ERR_ARG, "checkpoint path too long: %s", path);
    uint8_t h[PM_CKPT_HEADER];
    encode_header(h, t);
    FILE *f = fopen(tmp, "wb");
    if (!f) return pm_errf(err, PM_ERR_IO, "%s: %s", tmp, strerror(errno));
    uint64_t sum = pm_fnv1a64(PM_FNV_OFFSET, h, sizeof h);
    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    const float *slab[3] = {t->params, t->m, t->v};
    for (int s = 0; s < 3 && ok; s++) {
        ok = fwrite(slab[s], sizeof(float), t->n_params, f) == t->n_params;
        sum = pm_fnv1a64(sum, slab[s], t->n_params * sizeof(float));
    }
    uint8_t tail[8];
    pm_put_u64(tail, sum);
    ok = ok && fwrite(tail, 1, 8, f) == 8;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return pm_errf(err, PM_ERR_IO, "%s: write failed (disk full?)", path);
    }
    return PM_OK;
}

/* Opens path, checks magic, version, header size and file size, fills info.
 * On success *fp is positioned after the header; its hash so far in *sum. */
static pm_status open_ckpt(const char *path, FILE **fp, pm_ckpt_info *info, uint64_t *sum,
                           pm_err *err) {
    *fp = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
    uint8_t h[PM_CKPT_HEADER];
    size_t got = fread(h, 1, sizeof h, f);
    pm_status st = PM_ERR_FORMAT;
    if (got < 16 || memcmp(h, PM_CKPT_MAGIC, 8)) {
        pm_errf(err, st, "%s: not a pipemem checkpoint (bad magic at offset 0)", path);
        goto fail;
    }
    if (pm_get_u32(h + 8) != PM_CKPT_VERSION) {
        pm_errf(err, st, "%s: checkpoint version %u at offset 8, this pipemem reads version "
                "%u", path, pm_get_u32(h + 8), PM_CKPT_VERSION);
        goto fail;
    }
    if (got < sizeof h || pm_get_u32(h + 12) != PM_CKPT_HEADER) {
        pm_errf(err, st, "%s: truncated or bad header (%zu of %d bytes)", path, got,
                PM_CKPT_HEADER);
        goto fail;
    }
    decode_header(h, info);
    size_t expect = 0;
    int ok = info->n_params == pm_gpt_num_params(&info->cfg.model) &&
             pm_size_mul(info->n_params, 12, &expect) &&
             pm_size_add(expect, PM_CKPT_HEADER + 8, &expect);
    if (!ok || pm_gpt_config_check(&info->cfg.model, NULL)) {
        pm_errf(err, st, "%s: header config is inconsistent (field parameter count at offset "
                "112); the file is corrupted", path);
        goto fail;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        pm_errf(err, PM_ERR_IO, "%s: cannot seek: %s", path, strerror(errno));
        goto fail;
    }
    long size = ftell(f);
    if (size < 0 || (size_t)size != expect) {
        pm_errf(err, st, "%s: file is %ld bytes but its header needs %zu (%s)", path, size,
                expect, (size_t)size < expect ? "truncated" : "trailing bytes");
        goto fail;
    }
    fseek(f, PM_CKPT_HEADER, SEEK_SET);
    *sum = pm_fnv1a64(PM_FNV_OFFSET, h, sizeof h);
    *fp = f;
    return PM_OK;
fail:
    fclose(f);
    return st;
}

/* Reads n floats into dst (or skips them if dst is NULL), hashing. */
static int read_slab(FILE *f, float *dst, size_t n, uint64_t *sum) {
    float buf[4096];
    for (size_t i = 0; i < n;) {
        size_t k = n - i < 4096 ? n - i : 4096;
        float *p = dst ? dst + i : buf;
        if (fread(p, sizeof(float), k, f) != k) return 0;
        *sum = pm_fnv1a64(*sum, p, k * sizeof(float));
        i += k;
    }
    return 1;
}

static pm_status finish(FILE *f, uint64_t sum, const char *path, pm_err *err) {
    uint8_t tail[8];
    int ok = fread(tail, 1, 8, f) == 8;
    fclose(f);
    if (!ok) return pm_errf(err, PM_ERR_FORMAT, "%s: truncated before its checksum", path);
    if (pm_get_u64(tail) != sum)
        return pm_errf(err, PM_ERR_FORMAT,
                       "%s: checksum mismatch (the file is corrupted); use another checkpoint",
                       path);
    return PM_OK;
}

pm_status pm_ckpt_info_read(const char *path, pm_ckpt_info *info, pm_err *err) {
    FILE *f;
    uint64_t sum;
    pm_status st = open_ckpt(path, &f, info, &sum, err);
    if (st) return st;
    if (!read_slab(f, NULL, 3 * info->n_params, &sum)) {
        fclose(f);
        return pm_errf(err, PM_ERR_IO, "%s: read failed", path);
    }
    return finish(f, sum, path, err);
}

static pm_status mismatch(pm_err *err, const char *path, const char *field, const char *opt,
                          long long file, long long run) {
    return pm_errf(err, PM_ERR_ARG,
                   "%s: checkpoint has %s = %lld but this run asks for %lld; pass %s %lld "
                   "or start without --resume", path, field, file, run, opt, file);
}

pm_status pm_ckpt_load(pm_trainer *t, const char *path, pm_err *err) {
    FILE *f;
    uint64_t sum;
    pm_ckpt_info in;
    pm_status st = open_ckpt(path, &f, &in, &sum, err);
    if (st) return st;
    const pm_train_cfg *a = &in.cfg, *b = &t->cfg;
    const char *name[] = {"vocab", "ctx", "dim", "heads", "layers", "batch", "microbatches"};
    const char *opt[] = {"--vocab", "--ctx", "--dim", "--heads", "--layers", "--batch",
                         "--microbatches"};
    const int va[] = {a->model.vocab, a->model.ctx, a->model.dim, a->model.heads,
                      a->model.layers, a->batch, a->micro};
    const int vb[] = {b->model.vocab, b->model.ctx, b->model.dim, b->model.heads,
                      b->model.layers, b->batch, b->micro};
    for (int i = 0; i < 7; i++)
        if (va[i] != vb[i]) {
            fclose(f);
            return mismatch(err, path, name[i], opt[i], va[i], vb[i]);
        }
    if (a->seed != b->seed) {
        fclose(f);
        return mismatch(err, path, "seed", "--seed", (long long)a->seed, (long long)b->seed);
    }
    if (a->opt.lr != b->opt.lr) {
        fclose(f);
        return pm_errf(err, PM_ERR_ARG, "%s: checkpoint has lr = %g but this run asks for "
                       "%g; pass --lr %g", path, a->opt.lr, b->opt.lr, a->opt.lr);
    }
    float *slab[3] = {t->params, t->m, t->v};
    for (int s = 0; s < 3; s++)
        if (!read_slab(f, slab[s], t->n_params, &sum)) {
            fclose(f);
            return pm_errf(err, PM_ERR_IO, "%s: read failed", path);
        }
    st = finish(f, sum, path, err);
    if (st) return st;
    t->step = in.step;
    t->train.next = in.data_pos;
    return PM_OK;
}

pm_status pm_ckpt_load_params(const char *path, pm_ckpt_info *info, float **params,
                              pm_err *err) {
    *params = NULL;
    FILE *f;
    uint64_t sum;
    pm_status st = open_ckpt(path, &f, info, &sum, err);
    if (st) return st;
    float *p = malloc(info->n_params * sizeof(float));
    if (!p) {
        fclose(f);
        return pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for %zu parameters", path,
                       info->n_params);
    }
    if (!read_slab(f, p, info->n_params, &sum) ||
        !read_slab(f, NULL, 2 * info->n_params, &sum)) {
        fclose(f);
        free(p);
        return pm_errf(err, PM_ERR_IO, "%s: read failed", path);
    }
    st = finish(f, sum, path, err);
    if (st) {
        free(p);
        return st;
    }
    *params = p;
    return PM_OK;
}
