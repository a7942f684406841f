/* gpt.c: the model as a whole: seeded initialisation, the per-layer pass
 * dispatch (F, B, W, BW to the layer kind's compute in layers.c), and the
 * whole-model forward/backward used by single-device training. Shapes,
 * sizes and layouts come from shape.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/internal.h"
#include "util/alloc.h"
#include "passes.h"

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

/* Advances r by n draws (LCG jump-ahead: O(log n)), so a head part can
 * start lm_head's stream at its first row. */
static void rng_skip(pm_gpt_rng *r, uint64_t n) {
    uint64_t mul = 1, add = 0, cm = 6364136223846793005ULL, ca = r->inc;
    for (; n; n >>= 1) {
        if (n & 1) mul *= cm, add = add * cm + ca;
        ca = (cm + 1) * ca;
        cm *= cm;
    }
    r->state = r->state * mul + add;
}

/* A tensor's normal draws [lo, hi): the stream jumped to draw 2 (first + lo)
 * (two uniforms a normal), so any cut of the tensor gives the same values
 * as one pass from its start. */
typedef struct {
    float *p;
    double std;
    uint64_t seed, stream, first;
} init_job;

static void init_range(const void *arg, size_t lo, size_t hi) {
    const init_job *j = arg;
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, j->seed, j->stream);
    rng_skip(&r, 2 * (j->first + (uint64_t)lo));
    for (size_t k = lo; k < hi; k++) j->p[k] = (float)(j->std * pm_gpt_rng_normal(&r));
}

void pm_gpt_init_layer(const pm_gpt_config *cfg, int layer, uint64_t seed, float *lp) {
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    int n = pm_gpt_layer_tensors(cfg, layer, t), head = pm_gpt_layer_kind(cfg, layer) == PM_LAYER_HEAD;
    size_t r0 = 0, r1;
    if (head) pm_gpt_head_rows(cfg, layer, &r0, &r1);
    for (int i = 0; i < n; i++) {
        float *p = lp + t[i].offset;
        if (t[i].init_std == 0) {
            for (size_t j = 0; j < t[i].numel; j++) p[j] = t[i].init_value;
            continue;
        }
        /* lm_head: the one-part head's stream (tensor 2 of layer L+1), from
         * this part's first row on. Box-Muller's log and cos make this most
         * of a big model's start-up: pieces of 2^18 on the compute threads */
        init_job j = {.p = p, .std = t[i].init_std, .seed = seed,
                      .stream = head ? (uint64_t)(cfg->layers + 1) * 64 + 2
                                     : (uint64_t)layer * 64 + (uint64_t)i,
                      .first = head ? (uint64_t)r0 * (uint64_t)cfg->dim : 0};
        pm_gpt_par_for(t[i].numel, (size_t)1 << 18, init_range, &j);
    }
}

void pm_gpt_init(const pm_gpt_config *cfg, uint64_t seed, float *params) {
    for (int i = 0; i < pm_gpt_num_layers(cfg); i++)
        pm_gpt_init_layer(cfg, i, seed, params + pm_gpt_layer_offset(cfg, i));
}

/* ---- pass dispatch ---------------------------------------------------------- */

static void check_pass(const pm_gpt_config *cfg, int layer, int B, int T) {
    PM_ASSERT(pm_gpt_config_check(cfg, NULL) == PM_OK);
    PM_ASSERT(layer >= 0 && layer < pm_gpt_num_layers(cfg));
    PM_ASSERT(B >= 1 && T >= 1 && T <= cfg->ctx);
}

void pm_gpt_layer_f(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const void *in, const int32_t *targets, float *out, float *loss, void *saved,
                    void *scratch) {
    check_pass(cfg, layer, B, T);
    PM_ASSERT(lp && in && saved);
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED:
        PM_ASSERT(out && !targets);
        pm_embed_f(cfg, B, T, lp, in, out, saved);
        break;
    case PM_LAYER_BLOCK:
        PM_ASSERT(out && !targets && scratch);
        pm_gpt_block_f(cfg, B, T, lp, in, out, saved, scratch);
        break;
    default: {
        PM_ASSERT(!out == (layer + 1 == pm_gpt_num_layers(cfg)) && scratch);
        pm_head_f(cfg, layer, B, T, lp, in, targets, out, loss, saved, scratch);
        break;
    }
    }
}

void pm_gpt_layer_b(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const float *dout, float *din, float scale, float *loss, void *saved,
                    void *scratch) {
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
        PM_ASSERT(!dout == (layer + 1 == pm_gpt_num_layers(cfg)) && din && scratch);
        pm_head_b(cfg, layer, B, T, lp, dout, din, scale, loss, saved, scratch);
        break;
    }
}

void pm_gpt_layer_w(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    float *lg, void *saved, void *scratch) {
    check_pass(cfg, layer, B, T);
    PM_ASSERT(lg && saved);
    switch (pm_gpt_layer_kind(cfg, layer)) {
    case PM_LAYER_EMBED: pm_embed_w(cfg, B, T, lg, saved); break;
    case PM_LAYER_BLOCK: pm_gpt_block_w(cfg, B, T, lg, saved); break;
    default:
        PM_ASSERT(lp && scratch); /* the head makes its logits again */
        pm_head_w(cfg, layer, B, T, lp, lg, saved, scratch);
        break;
    }
}

/* BW is B then W: the same kernels in the same order, hence bitwise equal;
 * the head fuses them (each tile of logits made once, not twice), elsewhere
 * fusing would only save the pass boundary, not arithmetic. */
void pm_gpt_layer_bw(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp, float *lg,
                     const float *dout, float *din, float scale, float *loss, void *saved,
                     void *scratch) {
    if (pm_gpt_layer_kind(cfg, layer) == PM_LAYER_HEAD) {
        check_pass(cfg, layer, B, T);
        PM_ASSERT(lp && lg && saved && scratch && din);
        PM_ASSERT(!dout == (layer + 1 == pm_gpt_num_layers(cfg)));
        pm_head_bw(cfg, layer, B, T, lp, lg, dout, din, scale, loss, saved, scratch);
        return;
    }
    pm_gpt_layer_b(cfg, layer, B, T, lp, dout, din, scale, loss, saved, scratch);
    pm_gpt_layer_w(cfg, layer, B, T, lp, lg, saved, scratch);
}

/* ---- whole model on one device ---------------------------------------------- */

/* Workspace: the saved buffer of every layer in order, two messages (the
 * widest a layer passes: (N,C), or (N,C+3) between head parts), then
 * scratch. Every block has the same layout, so layer i's saved buffer
 * starts at embed + (i-1) * block; the head parts follow one another.
 * Offsets depend on (B, T), growing with T. */
typedef struct {
    size_t embed, block; /* aligned saved sizes */
    size_t heads;        /* offset of the first head part's saved */
    size_t a, b;         /* the two gradient messages */
    size_t scratch;      /* offset of the scratch area */
    size_t total;        /* bytes */
} work_layout;

static int work_get(const pm_gpt_config *cfg, int B, int T, work_layout *wl) {
    pm_layout le, lb, lh;
    if (!pm_layout_get(cfg, 0, B, T, &le) || !pm_layout_get(cfg, 1, B, T, &lb)) return 0;
    size_t cur = 0, blocks, sc = pm_layout_scratch(&lb);
    wl->embed = le.end; /* already multiples of PM_ALIGN */
    wl->block = lb.end;
    if (!pm_size_mul(lb.end, (size_t)cfg->layers, &blocks) || !pm_size_add(le.end, blocks, &cur))
        return 0;
    wl->heads = cur;
    for (int l = cfg->layers + 1; l < pm_gpt_num_layers(cfg); l++) {
        if (!pm_layout_get(cfg, l, B, T, &lh) || !pm_size_add(cur, lh.end, &cur)) return 0;
        sc = pm_layout_scratch(&lh) > sc ? pm_layout_scratch(&lh) : sc;
    }
    size_t nc = (size_t)B * (size_t)T * ((size_t)cfg->dim + (pm_gpt_head_parts(cfg) > 1 ? 3 : 0));
    if (!pm_layout_region(&cur, &wl->a, nc, sizeof(float)) || !pm_layout_region(&cur, &wl->b, nc, sizeof(float)) ||
        !pm_layout_region(&cur, &wl->scratch, sc, 1))
        return 0;
    wl->total = cur;
    return 1;
}

static char *work_saved(const pm_gpt_config *cfg, int B, int T, const work_layout *wl, char *w,
                        int layer) {
    if (layer <= cfg->layers) return layer == 0 ? w : w + wl->embed + (size_t)(layer - 1) * wl->block;
    size_t at = wl->heads;
    for (int l = cfg->layers + 1; l < layer; l++) {
        pm_layout lh;
        PM_ASSERT(pm_layout_get(cfg, l, B, T, &lh));
        at += lh.end;
    }
    return w + at;
}

size_t pm_gpt_work_bytes(const pm_gpt_config *cfg, int B, int T) {
    work_layout wl;
    if (pm_gpt_config_check(cfg, NULL) || B < 1 || T < 1 || T > cfg->ctx) return 0;
    return work_get(cfg, B, T, &wl) ? wl.total : 0;
}

/* Runs F of every layer, each writing straight into the next layer's input
 * slot so no message is copied; returns the loss, or in training (whose
 * head's B computes it) 0. */
static float forward_all(const pm_gpt_config *cfg, int B, int T, const float *params,
                         const int32_t *tokens, const int32_t *targets, char *w,
                         const work_layout *wl, int train) {
    int n = pm_gpt_num_layers(cfg);
    float loss = 0;
    for (int i = 0; i < n; i++) {
        const float *lp = params + pm_gpt_layer_offset(cfg, i);
        void *saved = work_saved(cfg, B, T, wl, w, i);
        const void *in = i == 0 ? (const void *)tokens : pm_gpt_layer_input_slot(cfg, i, B, T, saved);
        float *out =
            i + 1 < n ? pm_gpt_layer_input_slot(cfg, i + 1, B, T, work_saved(cfg, B, T, wl, w, i + 1))
                      : NULL;
        int head = pm_gpt_layer_kind(cfg, i) == PM_LAYER_HEAD;
        pm_gpt_layer_f(cfg, i, B, T, lp, in, head ? targets : NULL, out, train ? NULL : &loss,
                       saved, w + wl->scratch);
    }
    return loss;
}

float pm_gpt_forward(const pm_gpt_config *cfg, int B, int T, const float *params,
                     const int32_t *tokens, const int32_t *targets, void *work) {
    work_layout wl;
    PM_ASSERT(work_get(cfg, B, T, &wl));
    return forward_all(cfg, B, T, params, tokens, targets, work, &wl, 0);
}

void pm_gpt_head_probs_row(const pm_gpt_config *cfg, int B, int T, const float *lp,
                           const void *saved, size_t row, float *out) {
    check_pass(cfg, cfg->layers + 1, B, T);
    PM_ASSERT(lp && saved && out && pm_gpt_head_parts(cfg) == 1 && row < (size_t)B * (size_t)T);
    pm_head_probs_row(cfg, B, T, lp, saved, row, out);
}

void pm_gpt_work_probs_row(const pm_gpt_config *cfg, int B, int T, const float *params,
                           const void *work, size_t row, float *out) {
    work_layout wl;
    PM_ASSERT(work_get(cfg, B, T, &wl));
    int head = cfg->layers + 1;
    pm_gpt_head_probs_row(cfg, B, T, params + pm_gpt_layer_offset(cfg, head),
                          work_saved(cfg, B, T, &wl, (char *)work, head), row, out);
}

float pm_gpt_forward_backward(const pm_gpt_config *cfg, int B, int T, const float *params,
                              float *grads, const int32_t *tokens, const int32_t *targets,
                              float scale, void *work) {
    work_layout wl;
    PM_ASSERT(targets && work_get(cfg, B, T, &wl));
    char *w = work;
    float loss = 0; /* the head's B computes it */
    forward_all(cfg, B, T, params, tokens, targets, w, &wl, 1);
    float *dout = NULL, *din = (float *)(w + wl.a), *spare = (float *)(w + wl.b);
    for (int i = pm_gpt_num_layers(cfg) - 1; i >= 0; i--) {
        size_t po = pm_gpt_layer_offset(cfg, i);
        pm_gpt_layer_bw(cfg, i, B, T, params + po, grads + po, dout, i == 0 ? NULL : din, scale,
                        &loss, work_saved(cfg, B, T, &wl, w, i), w + wl.scratch);
        /* this layer's din is the next lower layer's dout */
        float *t = dout ? dout : spare;
        dout = din;
        din = t;
    }
    return loss;
}
