/* gpt.c: the model's bookkeeping: configuration checks, the parameter slab
 * layout and tensor table, seeded initialisation, the byte layout and sizes
 * of every layer's passes, the per-layer pass dispatch, and the whole-model
 * forward/backward used by single-device training.
 *
 * Invariants: layer i's parameters start at the sum of the sizes of layers
 * 0..i-1 (no padding); a layer's tensors tile its slice in table order; the
 * sizes reported by pm_gpt_layer_sizes are the ends of pm_layout_get's
 * layouts, which are the only offsets the passes use. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/internal.h"

const char *const pm_layer_kind_names[PM_LAYER_KIND_COUNT] = {"embed", "block", "head"};
_Static_assert(sizeof(pm_layer_kind_names) / sizeof(pm_layer_kind_names[0]) == PM_LAYER_KIND_COUNT,
               "one name per layer kind");

/* ---- configuration --------------------------------------------------------- */

pm_status pm_gpt_config_check(const pm_gpt_config *cfg, pm_err *err) {
    if (!cfg) return pm_errf(err, PM_ERR_ARG, "model config: missing");
    const struct {
        const char *name;
        int32_t v;
    } f[] = {{"vocab", cfg->vocab}, {"ctx", cfg->ctx}, {"dim", cfg->dim},
             {"heads", cfg->heads}, {"layers", cfg->layers}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1)
            return pm_errf(err, PM_ERR_ARG, "model config: %s is %d; it must be at least 1",
                           f[i].name, (int)f[i].v);
    if (cfg->dim % cfg->heads != 0)
        return pm_errf(err, PM_ERR_ARG,
                       "model config: heads (%d) must divide dim (%d); pick heads from the "
                       "divisors of dim",
                       (int)cfg->heads, (int)cfg->dim);
    /* 4C and 3C columns and B*T*V products are size_t; keep dims sane for int
     * BLAS arguments. */
    if (cfg->dim > (1 << 20) || cfg->vocab > (1 << 24) || cfg->ctx > (1 << 20) ||
        cfg->layers > (1 << 16))
        return pm_errf(err, PM_ERR_ARG,
                       "model config: too large (dim <= 2^20, vocab <= 2^24, ctx <= 2^20, "
                       "layers <= 65536)");
    /* size_t parameter arithmetic stays far from overflow below 2^40 floats */
    double C = cfg->dim, n = (cfg->vocab + cfg->ctx) * C + cfg->layers * (12 * C * C + 13 * C) +
                            2 * C + cfg->vocab * C;
    if (n > 1099511627776.0)
        return pm_errf(err, PM_ERR_ARG,
                       "model config: %.3g parameters (%.3g GiB as floats) is beyond 2^40; use "
                       "a smaller dim or fewer layers",
                       n, n * 4 / 1073741824.0);
    return PM_OK;
}

int pm_gpt_num_layers(const pm_gpt_config *cfg) { return cfg->layers + 2; }

pm_layer_kind pm_gpt_layer_kind(const pm_gpt_config *cfg, int layer) {
    PM_ASSERT(layer >= 0 && layer <= cfg->layers + 1);
    if (layer == 0) return PM_LAYER_EMBED;
    return layer == cfg->layers + 1 ? PM_LAYER_HEAD : PM_LAYER_BLOCK;
}

/* ---- parameters ------------------------------------------------------------ */

static size_t kind_params(const pm_gpt_config *cfg, pm_layer_kind k) {
    size_t C = (size_t)cfg->dim, V = (size_t)cfg->vocab;
    switch (k) {
    case PM_LAYER_EMBED: return V * C + (size_t)cfg->ctx * C;
    case PM_LAYER_BLOCK: return 12 * C * C + 13 * C;
    default: return 2 * C + V * C;
    }
}

size_t pm_gpt_layer_params(const pm_gpt_config *cfg, int layer) {
    return kind_params(cfg, pm_gpt_layer_kind(cfg, layer));
}

size_t pm_gpt_layer_offset(const pm_gpt_config *cfg, int layer) {
    PM_ASSERT(layer >= 0 && layer <= cfg->layers + 1);
    if (layer == 0) return 0;
    return kind_params(cfg, PM_LAYER_EMBED) +
           (size_t)(layer - 1) * kind_params(cfg, PM_LAYER_BLOCK);
}

size_t pm_gpt_num_params(const pm_gpt_config *cfg) {
    return pm_gpt_layer_offset(cfg, cfg->layers + 1) + kind_params(cfg, PM_LAYER_HEAD);
}

typedef struct {
    pm_gpt_tensor *t;
    int n;
    size_t off;
} tensor_list;

static void add_tensor(tensor_list *l, const char *prefix, const char *name, int64_t rows,
                       int64_t cols, int decay, float std, float value) {
    pm_gpt_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s%s", prefix, name);
    t->ndim = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 1;
    t->numel = (size_t)rows * (size_t)t->shape[1];
    t->offset = l->off;
    t->decay = decay;
    t->init_std = std;
    t->init_value = value;
    l->off += t->numel;
}

int pm_gpt_layer_tensors(const pm_gpt_config *cfg, int layer, pm_gpt_tensor out[PM_GPT_MAX_TENSORS]) {
    tensor_list l = {out, 0, 0};
    int64_t C = cfg->dim, V = cfg->vocab;
    const float std = 0.02f;
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED:
        add_tensor(&l, "", "wte.weight", V, C, 0, std, 0);
        add_tensor(&l, "", "wpe.weight", cfg->ctx, C, 0, std, 0);
        break;
    case PM_LAYER_BLOCK: {
        char p[32];
        snprintf(p, sizeof p, "h.%d.", layer - 1);
        float rstd = (float)(0.02 / sqrt(2.0 * cfg->layers));
        add_tensor(&l, p, "ln_1.weight", C, 0, 0, 0, 1);
        add_tensor(&l, p, "ln_1.bias", C, 0, 0, 0, 0);
        add_tensor(&l, p, "attn.c_attn.weight", 3 * C, C, 1, std, 0);
        add_tensor(&l, p, "attn.c_attn.bias", 3 * C, 0, 0, 0, 0);
        add_tensor(&l, p, "attn.c_proj.weight", C, C, 1, rstd, 0);
        add_tensor(&l, p, "attn.c_proj.bias", C, 0, 0, 0, 0);
        add_tensor(&l, p, "ln_2.weight", C, 0, 0, 0, 1);
        add_tensor(&l, p, "ln_2.bias", C, 0, 0, 0, 0);
        add_tensor(&l, p, "mlp.c_fc.weight", 4 * C, C, 1, std, 0);
        add_tensor(&l, p, "mlp.c_fc.bias", 4 * C, 0, 0, 0, 0);
        add_tensor(&l, p, "mlp.c_proj.weight", C, 4 * C, 1, rstd, 0);
        add_tensor(&l, p, "mlp.c_proj.bias", C, 0, 0, 0, 0);
        break;
    }
    default:
        add_tensor(&l, "", "ln_f.weight", C, 0, 0, 0, 1);
        add_tensor(&l, "", "ln_f.bias", C, 0, 0, 0, 0);
        add_tensor(&l, "", "lm_head.weight", V, C, 1, std, 0);
        break;
    }
    PM_ASSERT(l.off == pm_gpt_layer_params(cfg, layer));
    return l.n;
}

/* ---- random numbers and init ------------------------------------------------ */

void pm_gpt_rng_seed(pm_gpt_rng *r, uint64_t seed, uint64_t stream) {
    /* PCG32 reference seeding (pcg32_srandom_r). */
    r->state = 0;
    r->inc = (stream << 1) | 1u;
    (void)pm_gpt_rng_u32(r);
    r->state += seed;
    (void)pm_gpt_rng_u32(r);
}

uint32_t pm_gpt_rng_u32(pm_gpt_rng *r) {
    uint64_t old = r->state;
    r->state = old * 6364136223846793005ULL + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
    uint32_t rot = (uint32_t)(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

double pm_gpt_rng_uniform(pm_gpt_rng *r) { return pm_gpt_rng_u32(r) * (1.0 / 4294967296.0); }

double pm_gpt_rng_normal(pm_gpt_rng *r) {
    const double two_pi = 6.283185307179586476925286766559;
    double u1 = ((double)pm_gpt_rng_u32(r) + 1.0) * (1.0 / 4294967296.0); /* (0, 1] */
    double u2 = pm_gpt_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(two_pi * u2);
}

void pm_gpt_init_layer(const pm_gpt_config *cfg, int layer, uint64_t seed, float *lp) {
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    int n = pm_gpt_layer_tensors(cfg, layer, t);
    for (int i = 0; i < n; i++) {
        float *p = lp + t[i].offset;
        if (t[i].init_std == 0) {
            for (size_t j = 0; j < t[i].numel; j++) p[j] = t[i].init_value;
            continue;
        }
        pm_gpt_rng r;
        pm_gpt_rng_seed(&r, seed, (uint64_t)layer * 64 + (uint64_t)i);
        for (size_t j = 0; j < t[i].numel; j++)
            p[j] = (float)(t[i].init_std * pm_gpt_rng_normal(&r));
    }
}

void pm_gpt_init(const pm_gpt_config *cfg, uint64_t seed, float *params) {
    for (int i = 0; i < pm_gpt_num_layers(cfg); i++)
        pm_gpt_init_layer(cfg, i, seed, params + pm_gpt_layer_offset(cfg, i));
}

/* ---- layouts and sizes ------------------------------------------------------ */

/* Appends a region of n elements of el bytes at *cur (64-byte aligned);
 * returns 0 on overflow. */
static int region(size_t *cur, size_t *off, size_t n, size_t el) {
    size_t bytes, end;
    if (!pm_size_mul(n, el, &bytes) || !pm_size_add(bytes, PM_ALIGN - 1, &bytes)) return 0;
    bytes &= ~(size_t)(PM_ALIGN - 1);
    if (!pm_size_add(*cur, bytes, &end)) return 0;
    if (off) *off = *cur;
    *cur = end;
    return 1;
}

int pm_layout_get(const pm_gpt_config *cfg, pm_layer_kind kind, int B, int T, pm_layout *lay) {
    memset(lay, 0, sizeof *lay);
    size_t N = (size_t)B * (size_t)T, C = (size_t)cfg->dim, V = (size_t)cfg->vocab;
    size_t H = (size_t)cfg->heads, hs = C / H, Tz = (size_t)T, f = sizeof(float);
    size_t cur = 0, sc = 0, big;
    /* every element count below is at most 16 * N * max(C, V, H*T) */
    size_t widest = C > V ? C : V;
    widest = widest > H * Tz ? widest : H * Tz;
    if (!pm_size_mul(N, widest, &big) || !pm_size_mul(big, 64, &big)) return 0;
    int ok = 1;
    switch (kind) {
    case PM_LAYER_EMBED:
        ok = region(&cur, &lay->dout, N * C, f) && region(&cur, &lay->tok, N, sizeof(int32_t));
        lay->w_end = cur;
        break;
    case PM_LAYER_BLOCK:
        ok = region(&cur, &lay->ln1o, N * C, f) && region(&cur, &lay->atty, N * C, f) &&
             region(&cur, &lay->ln2o, N * C, f) && region(&cur, &lay->gelu, N * 4 * C, f) &&
             region(&cur, &lay->qkv, N * 3 * C, f) && region(&cur, &lay->x1, N * C, f) &&
             region(&cur, &lay->fc, N * 4 * C, f) && region(&cur, &lay->xin, N * C, f) &&
             region(&cur, &lay->lnst, 4 * C, f);
        lay->w_end = cur;
        ok = ok && region(&cur, &lay->att, (size_t)B * H * Tz * Tz, f) &&
             region(&cur, &lay->stats, 4 * N, f);
        /* scratch: (N,C) at 0 reused by each (N,C) gradient, attention work
         * after it; the (N,4C) MLP gradient overlaps both. */
        ok = ok && region(&sc, NULL, N * C, f);
        lay->s_att = sc;
        ok = ok && region(&lay->att_slot, NULL, 3 * Tz * hs + Tz * Tz, f);
        for (int slot = 0; ok && slot < PM_MAX_THREADS; slot++)
            ok = region(&sc, NULL, lay->att_slot, 1);
        big = 0;
        ok = ok && region(&big, NULL, N * 4 * C, f);
        lay->scratch_b = big > sc ? big : sc;
        break;
    default:
        ok = region(&cur, &lay->lno, N * C, f) && region(&cur, &lay->probs, N * V, f) &&
             region(&cur, &lay->lnst, 2 * C, f);
        lay->w_end = cur;
        ok = ok && region(&cur, &lay->xin, N * C, f) && region(&cur, &lay->stats, 2 * N, f) &&
             region(&cur, &lay->tgt, N, sizeof(int32_t));
        ok = ok && region(&sc, NULL, N * C, f);
        lay->scratch_b = sc;
        break;
    }
    lay->end = cur;
    return ok;
}

pm_status pm_gpt_layer_sizes(const pm_gpt_config *cfg, int layer, int B, int T, pm_gpt_sizes *out,
                             pm_err *err) {
    memset(out, 0, sizeof *out);
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st) return st;
    if (layer < 0 || layer > cfg->layers + 1)
        return pm_errf(err, PM_ERR_ARG, "layer %d: out of range 0..%d (embed, blocks, head)",
                       layer, cfg->layers + 1);
    if (B < 1) return pm_errf(err, PM_ERR_ARG, "microbatch size %d: must be at least 1", B);
    if (T < 1 || T > cfg->ctx)
        return pm_errf(err, PM_ERR_ARG, "sequence length %d: must be in 1..ctx (%d)", T,
                       (int)cfg->ctx);
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    pm_layout lay;
    if (!pm_layout_get(cfg, k, B, T, &lay))
        return pm_errf(err, PM_ERR_ARG,
                       "layer %d: activation size overflows for B=%d, T=%d; use a smaller "
                       "microbatch",
                       layer, B, T);
    double N = (double)B * T, C = cfg->dim, V = cfg->vocab, P = (double)pm_att_pairs(T);
    PM_ASSERT(lay.w_end <= lay.end); /* B releases end - w_end >= 0, W the rest */
    out->saved = lay.end;
    out->saved_w = lay.w_end;
    out->scratch_b = lay.scratch_b;
    out->in = (size_t)(N * (k == PM_LAYER_EMBED ? sizeof(int32_t) : C * sizeof(float)));
    out->out = k == PM_LAYER_HEAD ? 0 : (size_t)(N * C * sizeof(float));
    if (k == PM_LAYER_BLOCK) {
        /* attention: 2 (F) or 4 (B) products of P score entries by C/H
         * columns per head, over B * H heads */
        out->flops_f = 24 * N * C * C + 4 * B * P * C;
        out->flops_b = 24 * N * C * C + 8 * B * P * C;
        out->flops_w = 24 * N * C * C;
    } else if (k == PM_LAYER_HEAD) {
        out->flops_f = out->flops_b = out->flops_w = 2 * N * C * V;
    }
    return PM_OK;
}

void *pm_gpt_layer_input_slot(const pm_gpt_config *cfg, int layer, int B, int T, void *saved) {
    pm_layout lay;
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    PM_ASSERT(pm_layout_get(cfg, k, B, T, &lay));
    return (char *)saved + (k == PM_LAYER_EMBED ? lay.tok : lay.xin);
}

const float *pm_gpt_head_probs(const pm_gpt_config *cfg, int B, int T, const void *saved) {
    pm_layout lay;
    PM_ASSERT(pm_layout_get(cfg, PM_LAYER_HEAD, B, T, &lay));
    return (const float *)((const char *)saved + lay.probs);
}

/* ---- pass dispatch ---------------------------------------------------------- */

static void check_pass(const pm_gpt_config *cfg, int layer, int B, int T) {
    PM_ASSERT(pm_gpt_config_check(cfg, NULL) == PM_OK);
    PM_ASSERT(layer >= 0 && layer <= cfg->layers + 1);
    PM_ASSERT(B >= 1 && T >= 1 && T <= cfg->ctx);
}

void pm_gpt_layer_f(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const void *in, const int32_t *targets, float *out, float *loss, void *saved,
                    void *scratch) {
    (void)scratch; /* F needs none: every intermediate it makes is kept */
    check_pass(cfg, layer, B, T);
    PM_ASSERT(lp && in && saved);
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED:
        PM_ASSERT(out && !targets);
        pm_embed_f(cfg, B, T, lp, in, out, saved);
        break;
    case PM_LAYER_BLOCK:
        PM_ASSERT(out && !targets);
        pm_gpt_block_f(cfg, B, T, lp, in, out, saved);
        break;
    default: {
        PM_ASSERT(!out);
        float l = pm_head_f(cfg, B, T, lp, in, targets, saved);
        if (loss) *loss = l;
        break;
    }
    }
}

void pm_gpt_layer_b(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const float *dout, float *din, float scale, void *saved, void *scratch) {
    check_pass(cfg, layer, B, T);
    PM_ASSERT(lp && saved);
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED:
        PM_ASSERT(dout && !din);
        pm_embed_b(cfg, B, T, dout, saved);
        break;
    case PM_LAYER_BLOCK:
        PM_ASSERT(dout && din && scratch);
        pm_gpt_block_b(cfg, B, T, lp, dout, din, saved, scratch);
        break;
    default:
        PM_ASSERT(!dout && din && scratch);
        pm_head_b(cfg, B, T, lp, din, scale, saved, scratch);
        break;
    }
}

void pm_gpt_layer_w(const pm_gpt_config *cfg, int layer, int B, int T, float *lg, void *saved,
                    void *scratch) {
    (void)scratch; /* W needs none: it reads saved and adds into lg */
    check_pass(cfg, layer, B, T);
    PM_ASSERT(lg && saved);
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED: pm_embed_w(cfg, B, T, lg, saved); break;
    case PM_LAYER_BLOCK: pm_gpt_block_w(cfg, B, T, lg, saved); break;
    default: pm_head_w(cfg, B, T, lg, saved); break;
    }
}

/* BW is B then W: the same kernels in the same order, hence bitwise equal;
 * fusing would only save the pass boundary, not arithmetic. */
void pm_gpt_layer_bw(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp, float *lg,
                     const float *dout, float *din, float scale, void *saved, void *scratch) {
    pm_gpt_layer_b(cfg, layer, B, T, lp, dout, din, scale, saved, scratch);
    pm_gpt_layer_w(cfg, layer, B, T, lg, saved, scratch);
}

/* ---- whole model on one device ---------------------------------------------- */

/* Workspace: the saved buffer of every layer in order, two (N,C) messages,
 * then scratch. Every block has the same layout, so layer i's saved buffer
 * starts at embed + (i-1) * block. Offsets depend on (B, T), growing with T. */
typedef struct {
    size_t embed, block; /* aligned saved sizes */
    size_t a, b;         /* the two (N,C) gradient messages */
    size_t scratch;      /* offset of the scratch area */
    size_t total;        /* bytes */
} work_layout;

static int work_get(const pm_gpt_config *cfg, int B, int T, work_layout *wl) {
    pm_layout le, lb, lh;
    if (!pm_layout_get(cfg, PM_LAYER_EMBED, B, T, &le) ||
        !pm_layout_get(cfg, PM_LAYER_BLOCK, B, T, &lb) ||
        !pm_layout_get(cfg, PM_LAYER_HEAD, B, T, &lh))
        return 0;
    size_t cur = 0, blocks;
    wl->embed = le.end; /* already multiples of PM_ALIGN */
    wl->block = lb.end;
    if (!pm_size_mul(lb.end, (size_t)cfg->layers, &blocks) || !pm_size_add(le.end, blocks, &cur) ||
        !pm_size_add(cur, lh.end, &cur))
        return 0;
    size_t nc = (size_t)B * (size_t)T * (size_t)cfg->dim;
    size_t sc = lb.scratch_b > lh.scratch_b ? lb.scratch_b : lh.scratch_b;
    if (!region(&cur, &wl->a, nc, sizeof(float)) || !region(&cur, &wl->b, nc, sizeof(float)) ||
        !region(&cur, &wl->scratch, sc, 1))
        return 0;
    wl->total = cur;
    return 1;
}

static char *work_saved(const work_layout *wl, char *w, int layer) {
    return layer == 0 ? w : w + wl->embed + (size_t)(layer - 1) * wl->block;
}

size_t pm_gpt_work_bytes(const pm_gpt_config *cfg, int B, int T) {
    work_layout wl;
    if (pm_gpt_config_check(cfg, NULL) || B < 1 || T < 1 || T > cfg->ctx) return 0;
    return work_get(cfg, B, T, &wl) ? wl.total : 0;
}

/* Runs F of every layer, each writing straight into the next layer's input
 * slot so no message is copied. */
static float forward_all(const pm_gpt_config *cfg, int B, int T, const float *params,
                         const int32_t *tokens, const int32_t *targets, char *w,
                         const work_layout *wl) {
    int n = pm_gpt_num_layers(cfg);
    float loss = 0;
    for (int i = 0; i < n; i++) {
        const float *lp = params + pm_gpt_layer_offset(cfg, i);
        void *saved = work_saved(wl, w, i);
        const void *in = i == 0 ? (const void *)tokens : pm_gpt_layer_input_slot(cfg, i, B, T, saved);
        float *out =
            i + 1 < n ? pm_gpt_layer_input_slot(cfg, i + 1, B, T, work_saved(wl, w, i + 1))
                      : NULL;
        pm_gpt_layer_f(cfg, i, B, T, lp, in, i == n - 1 ? targets : NULL, out, &loss, saved,
                       w + wl->scratch);
    }
    return loss;
}

float pm_gpt_forward(const pm_gpt_config *cfg, int B, int T, const float *params,
                     const int32_t *tokens, const int32_t *targets, void *work) {
    work_layout wl;
    PM_ASSERT(work_get(cfg, B, T, &wl));
    return forward_all(cfg, B, T, params, tokens, targets, work, &wl);
}

const float *pm_gpt_work_probs(const pm_gpt_config *cfg, int B, int T, const void *work) {
    work_layout wl;
    PM_ASSERT(work_get(cfg, B, T, &wl));
    return pm_gpt_head_probs(cfg, B, T, work_saved(&wl, (char *)work, cfg->layers + 1));
}

float pm_gpt_forward_backward(const pm_gpt_config *cfg, int B, int T, const float *params,
                              float *grads, const int32_t *tokens, const int32_t *targets,
                              float scale, void *work) {
    work_layout wl;
    PM_ASSERT(targets && work_get(cfg, B, T, &wl));
    char *w = work;
    float loss = forward_all(cfg, B, T, params, tokens, targets, w, &wl);
    float *dout = NULL, *din = (float *)(w + wl.a), *spare = (float *)(w + wl.b);
    for (int i = pm_gpt_num_layers(cfg) - 1; i >= 0; i--) {
        size_t po = pm_gpt_layer_offset(cfg, i);
        pm_gpt_layer_bw(cfg, i, B, T, params + po, grads + po, dout, i == 0 ? NULL : din, scale,
                        work_saved(&wl, w, i), w + wl.scratch);
        /* this layer's din is the next lower layer's dout */
        float *t = dout ? dout : spare;
        dout = din;
        din = t;
    }
    return loss;
}

double pm_gpt_flops(const pm_gpt_config *cfg, int B, int T) {
    double sum = 0;
    for (int i = 0; i < pm_gpt_num_layers(cfg); i++) {
        pm_gpt_sizes sz;
        if (pm_gpt_layer_sizes(cfg, i, B, T, &sz, NULL)) return 0;
        sum += sz.flops_f + sz.flops_b + sz.flops_w;
    }
    return sum;
}
