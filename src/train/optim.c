/* optim.c: the optimizer pieces on flat float slabs: learning-rate schedule
 * (linear warm-up, cosine decay to a floor), global gradient norm, clipping
 * factor and the AdamW update. Pure functions: no allocation, no model. Each
 * element is updated independently, in index order, so the result is the
 * same whatever range of a slab a device updates. */
#include "pipemem/pm_train.h"
#include "pipemem/pm_gpt.h"

#include <math.h>

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

double pm_optim_sumsq(const float *g, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * (double)g[i];
    return s;
}

float pm_optim_clip_scale(double norm, float clip) {
    if (clip <= 0.0f || !(norm > (double)clip)) return 1.0f;
    return (float)((double)clip / (norm + 1e-6));
}

typedef struct {
    float *p, *m, *v;
    const float *g;
    float b1, b2, c1, c2, step, rs2, decay, eps, gs; /* per-step constants */
} adamw_job;

/* Vectorised (the Makefile builds this file with -fno-math-errno: sqrtf's
 * errno for v < 0, which never happens here, kept the loop scalar at 2.25
 * ns a parameter); vector square roots and divisions round exactly as the
 * scalar ones, so the bits do not change. */
static void adamw_range(const void *arg, size_t lo, size_t hi) {
    const adamw_job *j = arg;
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
