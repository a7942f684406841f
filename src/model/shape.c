/* shape.c: the model's shapes, computed without touching any tensor:
 * configuration checks, the layer list and its kinds, the parameter slab
 * layout and tensor table, the byte layout of every layer's saved buffer
 * and scratch (pm_layout_get) with the sizes and FLOPs reported from it,
 * and causal attention's row blocking. gpt.c (pass dispatch, whole-model
 * passes) and layers.c (the layers' compute) both build on this file, and
 * it calls neither, so the model's files have no call circle.
 *
 * Invariants: layer i's parameters start at the sum of the sizes of layers
 * 0..i-1 (no padding); a layer's tensors tile its slice in table order; the
 * sizes reported by pm_gpt_layer_sizes are the ends of pm_layout_get's
 * layouts, which are the only offsets the passes use. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/internal.h"
#include "util/alloc.h"
#include "passes.h"

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
    if (cfg->head_parts < 0 || cfg->head_parts > pm_gpt_head_groups(cfg))
        return pm_errf(err, PM_ERR_ARG,
                       "model config: head_parts=%d, but a vocabulary of %d has %d group(s) "
                       "of %d rows, so 1..%d parts", (int)cfg->head_parts, (int)cfg->vocab,
                       pm_gpt_head_groups(cfg), PM_HEAD_GROUP, pm_gpt_head_groups(cfg));
    return PM_OK;
}

int pm_gpt_head_groups(const pm_gpt_config *cfg) {
    return (int)(((int64_t)cfg->vocab + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP);
}

int pm_gpt_head_parts(const pm_gpt_config *cfg) { return cfg->head_parts > 1 ? cfg->head_parts : 1; }

int pm_gpt_num_layers(const pm_gpt_config *cfg) { return cfg->layers + 1 + pm_gpt_head_parts(cfg); }

int pm_head_part_groups(const pm_gpt_config *cfg, int layer) {
    size_t r0, r1;
    pm_gpt_head_rows(cfg, layer, &r0, &r1);
    return (int)((r1 - r0 + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP);
}

pm_layer_kind pm_gpt_layer_kind(const pm_gpt_config *cfg, int layer) {
    PM_ASSERT(layer >= 0 && layer < pm_gpt_num_layers(cfg));
    if (layer == 0) return PM_LAYER_EMBED;
    return layer > cfg->layers ? PM_LAYER_HEAD : PM_LAYER_BLOCK;
}

int pm_gpt_head_rows(const pm_gpt_config *cfg, int layer, size_t *r0, size_t *r1) {
    PM_ASSERT(pm_gpt_layer_kind(cfg, layer) == PM_LAYER_HEAD);
    int k = layer - cfg->layers - 1;
    size_t G = (size_t)pm_gpt_head_groups(cfg), P = (size_t)pm_gpt_head_parts(cfg);
    size_t V = (size_t)cfg->vocab, e = ((size_t)k + 1) * G / P * PM_HEAD_GROUP;
    *r0 = (size_t)k * G / P * PM_HEAD_GROUP;
    *r1 = e < V ? e : V;
    return k;
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

/* A head part: ln_f's weight and bias on the first, then its lm_head rows. */
static size_t head_part_params(const pm_gpt_config *cfg, int layer) {
    size_t r0, r1, C = (size_t)cfg->dim;
    return (pm_gpt_head_rows(cfg, layer, &r0, &r1) ? 0 : 2 * C) + (r1 - r0) * C;
}

size_t pm_gpt_layer_params(const pm_gpt_config *cfg, int layer) {
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    return k == PM_LAYER_HEAD ? head_part_params(cfg, layer) : kind_params(cfg, k);
}

size_t pm_gpt_layer_offset(const pm_gpt_config *cfg, int layer) {
    PM_ASSERT(layer >= 0 && layer < pm_gpt_num_layers(cfg));
    if (layer == 0) return 0;
    int l = layer <= cfg->layers + 1 ? layer : cfg->layers + 1;
    size_t at = kind_params(cfg, PM_LAYER_EMBED) + (size_t)(l - 1) * kind_params(cfg, PM_LAYER_BLOCK);
    if (l == layer) return at;
    size_t r0, r1; /* a later head part: after ln_f and the rows before it */
    pm_gpt_head_rows(cfg, layer, &r0, &r1);
    return at + 2 * (size_t)cfg->dim + r0 * (size_t)cfg->dim;
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
    default: {
        size_t r0, r1;
        if (!pm_gpt_head_rows(cfg, layer, &r0, &r1)) {
            add_tensor(&l, "", "ln_f.weight", C, 0, 0, 0, 1);
            add_tensor(&l, "", "ln_f.bias", C, 0, 0, 0, 0);
        }
        add_tensor(&l, "", "lm_head.weight", (int64_t)(r1 - r0), C, 1, std, 0);
        break;
    }
    }
    PM_ASSERT(l.off == pm_gpt_layer_params(cfg, layer));
    return l.n;
}

/* ---- layouts and sizes ------------------------------------------------------ */

/* Appends a region of n elements of el bytes at *cur (64-byte aligned);
 * returns 0 on overflow. */
int pm_layout_region(size_t *cur, size_t *off, size_t n, size_t el) {
    size_t bytes, end;
    if (!pm_size_mul(n, el, &bytes) || !pm_size_add(bytes, PM_ALIGN - 1, &bytes)) return 0;
    bytes &= ~(size_t)(PM_ALIGN - 1);
    if (!pm_size_add(*cur, bytes, &end)) return 0;
    if (off) *off = *cur;
    *cur = end;
    return 1;
}

/* The slots of `slot` floats a job of ntasks tasks uses, from *cur; 0 on
 * overflow. */
static int slots(size_t *cur, size_t slot, size_t ntasks) {
    size_t one = 0;
    if (!pm_layout_region(&one, NULL, slot, sizeof(float))) return 0;
    for (size_t i = 0; i < pm_par_slots(ntasks); i++)
        if (!pm_layout_region(cur, NULL, one, 1)) return 0;
    return 1;
}

static int block_layout(size_t N, size_t C, size_t H, int T, pm_layout *lay) {
    size_t cur = 0, f = sizeof(float), mlp = 0, heads = N / (size_t)T * H; /* its tasks */
    int ok = pm_layout_region(&cur, &lay->ln1o, N * C, f) &&
             pm_layout_region(&cur, &lay->atty, N * C, f) &&
             pm_layout_region(&cur, &lay->ln2o, N * C, f) &&
             pm_layout_region(&cur, &lay->gelu, N * 4 * C, f) &&
             pm_layout_region(&cur, &lay->qkv, N * 3 * C, f) &&
             pm_layout_region(&cur, &lay->x1, N * C, f) &&
             pm_layout_region(&cur, &lay->fc, N * 4 * C, f) &&
             pm_layout_region(&cur, &lay->xin, N * C, f) &&
             pm_layout_region(&cur, &lay->lnst, 4 * C, f);
    lay->w_end = cur;
    ok = ok && pm_layout_region(&cur, &lay->lse, N * H, f) &&
         pm_layout_region(&cur, &lay->stats, 4 * N, f);
    lay->end = cur;
    /* B: the (N,4C) MLP gradient overlaps the (N,C) one and attention's slots */
    ok = ok && pm_layout_region(&lay->s_slots, NULL, N * C, f) &&
         (lay->scratch_b = lay->s_slots,
          slots(&lay->scratch_b, pm_att_slot_floats_b(T, (int)(C / H)), heads)) &&
         pm_layout_region(&mlp, NULL, N * 4 * C, f) &&
         slots(&lay->scratch_f, pm_att_slot_floats_f(T, (int)(C / H)), heads);
    if (mlp > lay->scratch_b) lay->scratch_b = mlp;
    return ok;
}

static int head_layout(const pm_gpt_config *cfg, int layer, size_t N, pm_layout *lay) {
    size_t r0, r1, cur = 0, f = sizeof(float), C = (size_t)cfg->dim;
    int first = pm_gpt_head_rows(cfg, layer, &r0, &r1) == 0;
    /* a later part's lno is the start of its (N, C+3) input message */
    int ok = pm_layout_region(&cur, &lay->lno, N * (first ? C : C + 3), f) &&
             pm_layout_region(&cur, &lay->nrm, 2 * N, f) &&
             pm_layout_region(&cur, &lay->tgt, N, sizeof(int32_t)) &&
             pm_layout_region(&cur, &lay->fscale, 2, f) &&
             pm_layout_region(&cur, &lay->lnst, first ? 2 * C : 0, f);
    lay->w_end = cur;
    ok = ok && pm_layout_region(&cur, &lay->xin, first ? N * C : 0, f) &&
         pm_layout_region(&cur, &lay->stats, first ? 2 * N : 0, f) &&
         pm_layout_region(&cur, &lay->run, 3 * N, f);
    lay->end = cur;
    /* each chunk's row figures (max, sum) at 0, then the tiles of rows x
     * chunk: one per compute slot in F and W, in B the row tile's over the
     * part (head.c); B's d lno after them (first part) */
    size_t R = r1 - r0, rows = N < PM_HEAD_ROWS ? N : PM_HEAD_ROWS, w = R < PM_HEAD_CHUNK ? R : PM_HEAD_CHUNK;
    size_t nch = (R + PM_HEAD_CHUNK - 1) / PM_HEAD_CHUNK, tiles = 0;
    ok = ok && pm_layout_region(&lay->s_tiles, NULL, nch * 2 * rows, f);
    ok = ok && slots(&tiles, rows * w, nch);
    lay->scratch_f = lay->scratch_w = lay->s_tiles + tiles;
    lay->s_acc = lay->s_tiles;
    ok = ok && pm_layout_region(&lay->s_acc, NULL, rows * R, f);
    lay->scratch_b = lay->s_acc;
    ok = ok && pm_layout_region(&lay->scratch_b, NULL, first ? N * C : 0, f);
    return ok;
}

int pm_layout_get(const pm_gpt_config *cfg, int layer, int B, int T, pm_layout *lay) {
    memset(lay, 0, sizeof *lay);
    size_t N = (size_t)B * (size_t)T, C = (size_t)cfg->dim, big;
    size_t H = (size_t)cfg->heads, V = (size_t)cfg->vocab;
    /* every element count below is at most 16 N max(C, H) + 64 T max(C, V):
     * refuse shapes where that is near overflow before adding anything */
    size_t widest = C > V ? C : V;
    if (!pm_size_mul(N, widest > H ? widest : H, &big) || !pm_size_mul(big, 64, &big)) return 0;
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED: {
        size_t cur = 0;
        int ok = pm_layout_region(&cur, &lay->dout, N * C, sizeof(float)) &&
                 pm_layout_region(&cur, &lay->tok, N, sizeof(int32_t));
        lay->w_end = lay->end = cur;
        return ok;
    }
    case PM_LAYER_BLOCK: return block_layout(N, C, H, T, lay);
    default: return head_layout(cfg, layer, N, lay);
    }
}

pm_status pm_gpt_layer_sizes(const pm_gpt_config *cfg, int layer, int B, int T, pm_gpt_sizes *out,
                             pm_err *err) {
    memset(out, 0, sizeof *out);
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st) return st;
    if (layer < 0 || layer >= pm_gpt_num_layers(cfg))
        return pm_errf(err, PM_ERR_ARG, "layer %d: out of range 0..%d (embed, blocks, head)",
                       layer, pm_gpt_num_layers(cfg) - 1);
    if (B < 1) return pm_errf(err, PM_ERR_ARG, "microbatch size %d: must be at least 1", B);
    if (T < 1 || T > cfg->ctx)
        return pm_errf(err, PM_ERR_ARG, "sequence length %d: must be in 1..ctx (%d)", T,
                       (int)cfg->ctx);
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    pm_layout lay;
    if (!pm_layout_get(cfg, layer, B, T, &lay))
        return pm_errf(err, PM_ERR_ARG,
                       "layer %d: activation size overflows for B=%d, T=%d; use a smaller "
                       "microbatch",
                       layer, B, T);
    double N = (double)B * T, C = cfg->dim, P = (double)pm_att_pairs(T), f = sizeof(float);
    PM_ASSERT(lay.w_end <= lay.end); /* B releases end - w_end >= 0, W the rest */
    out->saved = lay.end;
    out->saved_w = lay.w_end;
    out->scratch_f = lay.scratch_f;
    out->scratch_b = lay.scratch_b;
    out->scratch_w = lay.scratch_w;
    out->in = (size_t)(N * (k == PM_LAYER_EMBED ? sizeof(int32_t) : C * f));
    out->out = (size_t)(N * C * f);
    if (k == PM_LAYER_BLOCK) {
        /* attention: products of P score entries by C/H columns per head,
         * over B * H heads: 2 in F, 5 in B (the scores again, dV, dP, dQ,
         * dK), of which 1 recomputes */
        out->flops_f = 24 * N * C * C + 4 * B * P * C;
        out->flops_b = 24 * N * C * C + 10 * B * P * C;
        out->flops_w = 24 * N * C * C;
        out->flops_bw = out->flops_b + out->flops_w;
        out->flops_eval = out->flops_f;
        /* the model's: each of the three linear passes once, attention's 6
         * products over the T (T + 1) / 2 pairs causality needs */
        out->flops_model = 72 * N * C * C + 12 * B * C * ((double)T * (T + 1) / 2);
    } else if (k == PM_LAYER_HEAD) {
        size_t r0, r1;
        int part = pm_gpt_head_rows(cfg, layer, &r0, &r1);
        double one = 2 * N * C * (double)(r1 - r0); /* one product by the part's rows */
        if (part) out->in = (size_t)(N * (C + 3) * f);
        out->out = part + 1 < pm_gpt_head_parts(cfg) ? (size_t)(N * (C + 3) * f) : 0;
        /* a one-part head makes its logits in B (F keeps ln_f's output), a
         * head in parts in F; B and W each make them again (head.c) */
        out->flops_f = pm_gpt_head_parts(cfg) == 1 ? 0 : one;
        out->flops_b = out->flops_w = 2 * one;
        out->flops_bw = 3 * one; /* logits, d lno, d W */
        out->flops_eval = one;
        out->flops_model = 3 * one;
    }
    return PM_OK;
}

void *pm_gpt_layer_input_slot(const pm_gpt_config *cfg, int layer, int B, int T, void *saved) {
    pm_layout lay;
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    PM_ASSERT(pm_layout_get(cfg, layer, B, T, &lay));
    size_t r0, r1;
    if (k == PM_LAYER_HEAD && pm_gpt_head_rows(cfg, layer, &r0, &r1))
        return (char *)saved + lay.lno; /* a later head part: the message is its lno */
    return (char *)saved + (k == PM_LAYER_EMBED ? lay.tok : lay.xin);
}

double pm_gpt_flops(const pm_gpt_config *cfg, int B, int T) {
    double sum = 0;
    for (int i = 0; i < pm_gpt_num_layers(cfg); i++) {
        pm_gpt_sizes sz;
        if (pm_gpt_layer_sizes(cfg, i, B, T, &sz, NULL)) return 0;
        sum += sz.flops_model;
    }
    return sum;
}
