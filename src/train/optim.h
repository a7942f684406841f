/* optim.h: the optimizer as every trainer runs it (optim.c), private to
 * the library: the learning rate of a step, the global gradient norm in
 * the one order every trainer shares, clipping, AdamW's update over a range
 * of layers or of floats, and what to change when a run diverged.
 * pm_train.h gives the formulas. */
#ifndef PM_TRAIN_OPTIM_H
#define PM_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_train.h"

/* Learning rate of step `step` (0-based). */
double pm_optim_lr_at(const pm_optim_cfg *c, int64_t step);

/* The global gradient norm, defined so that every trainer (one device, any
 * pipeline, model selection) computes the same bits and each device can
 * compute its own part early and in parallel:
 *   - the slab is cut into units: the embedding, each block, and the
 *     head's groups of PM_HEAD_GROUP rows of lm_head (ln_f's 2C floats with
 *     the first), so every stage boundary of every placement and head-part
 *     count is a unit boundary;
 *   - a unit's sum of squares is pm_optim_sumsq over its floats;
 *   - norm = sqrt of the units' sums added in unit order (a double).
 * pm_optim_sumsq: blocks of PM_NORM_BLOCK floats from the start, each in 8
 * double lanes (element i into lane i % 8, lanes added
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))), the blocks' sums added in order;
 * the blocks run on the calling thread's compute threads, the result does
 * not depend on how many. */
#define PM_NORM_BLOCK ((size_t)1 << 16)
double pm_optim_sumsq(const float *g, size_t n);
/* Units in layers l0 .. l1-1. */
int pm_optim_units(const pm_gpt_config *c, int l0, int l1);
/* The units' sums of squares of layers l0 .. l1-1 (g starts at layer l0's
 * first parameter) into sums, in order; returns how many. */
int pm_optim_unit_sums(const pm_gpt_config *c, int l0, int l1, const float *g, double *sums);
/* The norm of a whole slab of c's parameters. */
double pm_optim_norm(const pm_gpt_config *c, const float *g);
/* The same norm from the slab read in pieces, in order (a slab spilled to
 * a file): init, add every float once, end. Bitwise pm_optim_norm. */
typedef struct {
    const pm_gpt_config *c;
    int l, k;          /* the current unit: layer l's k-th */
    size_t left;       /* its floats still to come */
    size_t pos;        /* position in the current block */
    double lane[8];    /* the block's lanes so far */
    double unit, total;
} pm_norm_stream;
void pm_norm_stream_init(pm_norm_stream *s, const pm_gpt_config *c);
void pm_norm_stream_add(pm_norm_stream *s, const float *x, size_t n);
double pm_norm_stream_end(const pm_norm_stream *s);

/* Factor to scale gradients by for global norm `norm` under limit `clip`. */
float pm_optim_clip_scale(double norm, float clip);

/* What to change when a run under o diverged (its loss or gradient norm not
 * finite), as one clause into buf (cap bytes; returns buf): "lower
 * opt.lr", or, when opt.weight_decay is above 1 and opt.lr x
 * opt.weight_decay is 1 or more (each step then scales the decayed weights
 * by 1 - lr x decay, at most 0: they flip and grow), the decay and its
 * limit (1 / lr). whose ("" or "its ") stands
 * before the parameter's name. */
const char *pm_optim_diverged_hint(const pm_optim_cfg *o, const char *whose, char *buf,
                                   size_t cap);

typedef struct {
    float lr;     /* this step's learning rate */
    float wd;     /* weight decay of this tensor (0 for no decay) */
    float beta1, beta2, eps;
    int64_t t;    /* step number, from 1 */
    float gscale; /* multiplies every gradient before use */
} pm_optim_adamw_args;

/* One AdamW update of n parameters in place (p, m, v updated; g read). */
void pm_optim_adamw_update(float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const pm_optim_adamw_args *a);

/* One AdamW step over layers l0 .. l1-1 of cfg->model (embedding 0, blocks,
 * head L+1), whose parameters, gradients and moments are slabs that start
 * at layer l0's first parameter (so a pipeline stage or a model-selection
 * shard passes its own slabs, the single-device trainer the whole model).
 * step = optimizer steps completed before this one (learning rate from
 * pm_optim_lr_at, bias correction t = step + 1); gscale folds in clipping.
 * Decay per tensor as pm_gpt_layer_tensors says. Every trainer calls this
 * one loop, so they stay bitwise alike. */
void pm_optim_step_layers(const pm_train_cfg *cfg, int l0, int l1, int64_t step, float gscale,
                          float *p, const float *g, float *m, float *v);

/* The same update for parameters a .. b-1 of the whole slab (any range,
 * cutting layers and tensors anywhere: each element's update is its own,
 * so a ZeRO-1 slice gets exactly the bits the whole update gives it);
 * p, g, m, v start at element a. */
void pm_optim_step_range(const pm_train_cfg *cfg, size_t a, size_t b, int64_t step, float gscale,
                         float *p, const float *g, float *m, float *v);

#endif
