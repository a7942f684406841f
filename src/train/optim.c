/* optim.c: the optimizer pieces on flat float slabs: learning-rate schedule
 * (linear warm-up, cosine decay to a floor), global gradient norm, clipping
 * factor and the AdamW update. Pure functions: no allocation, no model. Each
 * element is updated independently, in index order, so the result is the
 * same whatever range of a slab a device updates. */
#include "pipemem/pm_train.h"
#include "pipemem/pm_gpt.h"
#include "model/passes.h"
#include "optim.h"

#include <math.h>
#include <string.h>

/* No a * b + c contraction into FMA (GCC has it off at -std=c11, clang
 * needs the pragma): the norm's vector loop and its one-at-a-time readers
 * must round alike. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define PM_PI 3.14159265358979323846

void pm_optim_defaults(pm_optim_cfg *c, int steps) {
    *c = (pm_optim_cfg){
        .lr = 1e-3f,
        .lr_min_frac = 0.1f,
        .warmup = steps >= 10 ? steps / 10 : 0,
        .steps = steps,
        .beta1 = 0.9f,
        .beta2 = 0.95f,
        .eps = 1e-8f,
        .weight_decay = 0.1f,
        .grad_clip = 1.0f,
    };
}

double pm_optim_lr_at(const pm_optim_cfg *c, int64_t step) {
    double lr = c->lr, lo = (double)c->lr * (double)c->lr_min_frac;
    if (step < c->warmup) return lr * (double)(step + 1) / (double)c->warmup;
    int64_t span = (int64_t)c->steps - c->warmup;
    if (span <= 1) return lr;
    double prog = (double)(step - c->warmup) / (double)(span - 1);
    if (prog > 1.0) prog = 1.0;
    return lo + 0.5 * (lr - lo) * (1.0 + cos(PM_PI * prog));
}

/* One block (n <= PM_NORM_BLOCK floats): element i into lane i % 8, the
 * lanes added in a fixed tree. The eight lanes are four 2-double vectors
 * held in registers (an array of eight, GCC kept in memory, so every add
 * waited on a store); each lane does exactly the scalar arithmetic, so the
 * bits are those of pm_norm_stream_add's one-at-a-time loop. */
typedef float f2 __attribute__((vector_size(8)));
typedef double d2 __attribute__((vector_size(16)));

static inline d2 sq2(const float *g) {
    f2 a;
    memcpy(&a, g, sizeof a);
    d2 x = __builtin_convertvector(a, d2);
    return x * x;
}

/* A block's end: the tail g[i..n) (fewer than 8) into lanes 0.., then the
 * lanes added in the documented order (lanes_total). */
static double lanes_finish(double l[8], const float *g, size_t i, size_t n) {
    for (int k = 0; i < n; i++, k++) l[k] += (double)g[i] * (double)g[i];
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static double block_sumsq_plain(const float *g, size_t n) {
    d2 v0 = {0, 0}, v1 = {0, 0}, v2 = {0, 0}, v3 = {0, 0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        v0 += sq2(g + i), v1 += sq2(g + i + 2), v2 += sq2(g + i + 4), v3 += sq2(g + i + 6);
    double l[8] = {v0[0], v0[1], v1[0], v1[1], v2[0], v2[1], v3[0], v3[1]};
    return lanes_finish(l, g, i, n);
}

/* AVX-512, where the CPU has it: lane k of one vector of 8 doubles sums
 * g[i + k] as lane k of the four pairs does, in the same order, so the
 * bits agree; one instruction where the pairs take four (GPT-2 small's
 * 124M gradients on 2 threads of a Zen 5: 16 ms with the pairs, which
 * bounded it, 8.5 ms so). */
#ifdef PM_X86_GNU
#include <immintrin.h>

__attribute__((target("avx512f"))) static double block_sumsq_wide(const float *g, size_t n) {
    __m512d acc = _mm512_setzero_pd();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(g + i));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(x, x));
    }
    double l[8];
    _mm512_storeu_pd(l, acc);
    return lanes_finish(l, g, i, n);
}
#endif

static double block_sumsq(const float *g, size_t n) {
#ifdef PM_X86_GNU
    if (pm_k_v16()) return block_sumsq_wide(g, n);
#endif
    return block_sumsq_plain(g, n);
}

typedef struct {
    const float *g;
    size_t n;
    double *out; /* one per block */
} sumsq_job;

static void blocks_range(const void *arg, size_t lo, size_t hi) {
    const sumsq_job *j = arg;
    for (size_t b = lo; b < hi; b++) {
        size_t at = b * PM_NORM_BLOCK, n = j->n - at < PM_NORM_BLOCK ? j->n - at : PM_NORM_BLOCK;
        j->out[b] = block_sumsq(j->g + at, n);
    }
}

double pm_optim_sumsq(const float *g, size_t n) {
    enum { GROUP = 64 }; /* blocks computed at once (on the compute threads), then added */
    double sum = 0, part[GROUP];
    for (size_t at = 0; at < n; at += (size_t)GROUP * PM_NORM_BLOCK) {
        size_t rest = n - at, nb = (rest + PM_NORM_BLOCK - 1) / PM_NORM_BLOCK;
        nb = nb < GROUP ? nb : GROUP;
        sumsq_job j = {g + at, rest, part};
        pm_gpt_par_for(nb, 1, blocks_range, &j);
        for (size_t b = 0; b < nb; b++) sum += part[b]; /* in order: any thread count */
    }
    return sum;
}

/* Units of layer l: one for the embedding and each block; a head part has
 * one per group of PM_HEAD_GROUP rows of lm_head it holds, the first group
 * of all with ln_f's 2C floats. */
static int layer_units(const pm_gpt_config *c, int l) {
    if (pm_gpt_layer_kind(c, l) != PM_LAYER_HEAD) return 1;
    size_t r0, r1;
    pm_gpt_head_rows(c, l, &r0, &r1);
    return (int)((r1 - r0 + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP);
}

/* Floats of layer l's unit k. */
static size_t unit_floats(const pm_gpt_config *c, int l, int k) {
    if (pm_gpt_layer_kind(c, l) != PM_LAYER_HEAD) return pm_gpt_layer_params(c, l);
    size_t r0, r1;
    pm_gpt_head_rows(c, l, &r0, &r1);
    size_t r = r0 + (size_t)k * PM_HEAD_GROUP, rows = r1 - r < PM_HEAD_GROUP ? r1 - r : PM_HEAD_GROUP;
    return (rows + (r ? 0 : 2)) * (size_t)c->dim;
}

int pm_optim_units(const pm_gpt_config *c, int l0, int l1) {
    int u = 0;
    for (int l = l0; l < l1; l++) u += layer_units(c, l);
    return u;
}

int pm_optim_unit_sums(const pm_gpt_config *c, int l0, int l1, const float *g, double *sums) {
    size_t at = 0;
    int u = 0;
    for (int l = l0; l < l1; l++)
        for (int k = 0; k < layer_units(c, l); k++, u++) {
            size_t n = unit_floats(c, l, k);
            sums[u] = pm_optim_sumsq(g + at, n);
            at += n;
        }
    return u;
}

double pm_optim_norm(const pm_gpt_config *c, const float *g) {
    double s = 0;
    size_t at = 0;
    for (int l = 0; l < pm_gpt_num_layers(c); l++) /* unit by unit, in order */
        for (int k = 0; k < layer_units(c, l); k++) {
            size_t n = unit_floats(c, l, k);
            s += pm_optim_sumsq(g + at, n);
            at += n;
        }
    return sqrt(s);
}

/* ---- the same norm, read in pieces --------------------------------------------- */

static double lanes_total(const double *l) {
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/* Moves on to the next unit with floats (the total gets the unit's sum). */
static void stream_next_unit(pm_norm_stream *s) {
    int nl = pm_gpt_num_layers(s->c);
    while (!s->left && s->l < nl) {
        if (++s->k >= layer_units(s->c, s->l)) s->k = 0, s->l++;
        if (s->l < nl) s->left = unit_floats(s->c, s->l, s->k);
    }
}

void pm_norm_stream_init(pm_norm_stream *s, const pm_gpt_config *c) {
    *s = (pm_norm_stream){.c = c, .l = 0, .k = 0};
    s->left = unit_floats(c, 0, 0);
}

void pm_norm_stream_add(pm_norm_stream *s, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        PM_ASSERT(s->left > 0 && "more floats than the model has");
        s->lane[s->pos % 8] += (double)x[i] * (double)x[i];
        s->left--;
        if (++s->pos == PM_NORM_BLOCK || !s->left) { /* a block ends */
            s->unit += lanes_total(s->lane);
            memset(s->lane, 0, sizeof s->lane);
            s->pos = 0;
        }
        if (!s->left) { /* a unit ends */
            s->total += s->unit;
            s->unit = 0;
            stream_next_unit(s);
        }
    }
}

double pm_norm_stream_end(const pm_norm_stream *s) { return sqrt(s->total); }

float pm_optim_clip_scale(double norm, float clip) {
    if (clip <= 0.0f || !(norm > (double)clip)) return 1.0f;
    return (float)((double)clip / (norm + 1e-6));
}

const char *pm_optim_diverged_hint(const pm_optim_cfg *o, const char *whose, char *buf,
                                   size_t cap) {
    /* lr x decay >= 1 flips the decayed weights each step; with a decay up to
     * 1 that takes lr >= 1, which is the one to lower */
    if ((double)o->lr * o->weight_decay >= 1 && o->weight_decay > 1)
        snprintf(buf, cap, "%sopt.weight_decay %g x opt.lr %g >= 1 flips the weights; lower "
                 "it below %g", whose, (double)o->weight_decay, (double)o->lr,
                 1 / (double)o->lr);
    else snprintf(buf, cap, "lower %sopt.lr", whose);
    return buf;
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    float b1, b2, c1, c2, step, rs2, decay, eps, gs; /* per-step constants */
} adamw_job;

/* Vectorised (the Makefile builds this file with -fno-math-errno: sqrtf's
 * errno for v < 0, which never happens here, kept the loop scalar at 2.25
 * ns a parameter); vector square roots and divisions round exactly as the
 * scalar ones, so the bits do not change, at any vector width. */
static inline __attribute__((always_inline)) void adamw_loop(const adamw_job *j, size_t lo,
                                                             size_t hi) {
    float *restrict p = j->p, *restrict m = j->m, *restrict v = j->v;
    const float *restrict g = j->g;
    float b1 = j->b1, b2 = j->b2, c1 = j->c1, c2 = j->c2, step = j->step, rs2 = j->rs2;
    float decay = j->decay, eps = j->eps, gs = j->gs;
    for (size_t i = lo; i < hi; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rs2 + eps);
    }
}

/* The same loop compiled for AVX-512, where the CPU has it: with 4-float
 * vectors the square roots and divisions, not memory, bounded the update
 * (GPT-2 small's 124M parameters on 2 threads of a Zen 5: 43 ms, 81 GB/s;
 * 31 ms with 16-float vectors). */
#ifdef PM_X86_GNU
__attribute__((target("avx512f"))) static void adamw_wide(const adamw_job *j, size_t lo,
                                                         size_t hi) {
    adamw_loop(j, lo, hi);
}
#endif

static void adamw_range(const void *arg, size_t lo, size_t hi) {
    const adamw_job *j = arg;
#ifdef PM_X86_GNU
    if (pm_k_v16()) {
        adamw_wide(j, lo, hi);
        return;
    }
#endif
    adamw_loop(j, lo, hi);
}

void pm_optim_adamw_update(float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const pm_optim_adamw_args *a) {
    /* PyTorch's arrangement: p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),
     * with the per-step constants hoisted (restrict: the four slabs never
     * overlap). Elements are independent, so the slab is cut into pieces run
     * on the calling thread's compute threads (pm_blas_threads): the same
     * bits for any thread count. */
    float b1 = a->beta1, b2 = a->beta2;
    float bc1 = 1.0f - powf(b1, (float)a->t);
    float bc2 = 1.0f - powf(b2, (float)a->t);
    adamw_job j = {.p = p, .m = m, .v = v, .g = g, .b1 = b1, .b2 = b2, .c1 = 1.0f - b1,
                   .c2 = 1.0f - b2, .step = a->lr / bc1, .rs2 = 1.0f / sqrtf(bc2),
                   .decay = 1.0f - a->lr * a->wd, .eps = a->eps, .gs = a->gscale};
    pm_gpt_par_for(n, (size_t)1 << 16, adamw_range, &j);
}

void pm_optim_step_range(const pm_train_cfg *cfg, size_t a, size_t b, int64_t step, float gscale,
                         float *p, const float *g, float *m, float *v) {
    const pm_gpt_config *c = &cfg->model;
    const pm_optim_cfg *o = &cfg->opt;
    float lr = (float)pm_optim_lr_at(o, step);
    pm_gpt_tensor tens[PM_GPT_MAX_TENSORS];
    for (int l = 0; l < pm_gpt_num_layers(c) && a < b; l++) {
        size_t base = pm_gpt_layer_offset(c, l);
        if (base + pm_gpt_layer_params(c, l) <= a) continue;
        if (base >= b) break;
        int nt = pm_gpt_layer_tensors(c, l, tens);
        for (int i = 0; i < nt; i++) { /* the tensor's part inside [a, b) */
            size_t lo = base + tens[i].offset, hi = lo + tens[i].numel;
            lo = lo > a ? lo : a, hi = hi < b ? hi : b;
            if (lo >= hi) continue;
            pm_optim_adamw_args arg = {lr, tens[i].decay ? o->weight_decay : 0.0f, o->beta1,
                                       o->beta2, o->eps, step + 1, gscale};
            size_t at = lo - a;
            pm_optim_adamw_update(p + at, g + at, m + at, v + at, hi - lo, &arg);
        }
    }
}

void pm_optim_step_layers(const pm_train_cfg *cfg, int l0, int l1, int64_t step, float gscale,
                          float *p, const float *g, float *m, float *v) {
    const pm_gpt_config *c = &cfg->model;
    size_t a = pm_gpt_layer_offset(c, l0);
    size_t b = l1 < pm_gpt_num_layers(c) ? pm_gpt_layer_offset(c, l1) : pm_gpt_num_params(c);
    pm_optim_step_range(cfg, a, b, step, gscale, p, g, m, v);
}
