/* config.c: the one place a training configuration is built, checked and
 * compared (pm_train.h): the defaults, the rule each field's value follows,
 * a configuration made from the defaults and some settings, the check of a
 * whole configuration, and the first field two configurations differ in.
 * `pipemem train`'s options, a sweep's tasks (src/select/space.c) and a
 * checkpoint's run (ckpt.c) all come here, so a task trains what train
 * with the same settings trains, and every mismatch names its field.
 *
 * Every field is one row of FIELDS (where it sits, its type, its rule) and
 * one of each table of words (its name, its rule), so adding a field to
 * pm_train_cfg is adding those rows. */
#include "pipemem/pm_train.h"
#include "model/passes.h"
#include "config.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum { T_I32, T_INT, T_U64, T_F32 }; /* how a field is stored */

/* A field: where it sits, how it is stored, and its value's rule: an
 * integer (or any number) in [lo, hi], the ends open where said
 * (pm_train_value_rules says it in words). */
typedef struct {
    size_t off; /* in pm_train_cfg */
    int type;
    int integer, lo_open, hi_open;
    double lo, hi;
} field;

#define OFF(x) offsetof(pm_train_cfg, x)
#define COUNT(lo) 1, 0, 0, lo, 16777216 /* an integer lo..2^24 */
static const field FIELDS[PM_CFG_FIELDS] = {
    [PM_CFG_VOCAB] = {OFF(model.vocab), T_I32, COUNT(1)},
    [PM_CFG_CTX] = {OFF(model.ctx), T_I32, COUNT(1)},
    [PM_CFG_DIM] = {OFF(model.dim), T_I32, COUNT(1)},
    [PM_CFG_HEADS] = {OFF(model.heads), T_I32, COUNT(1)},
    [PM_CFG_LAYERS] = {OFF(model.layers), T_I32, COUNT(1)},
    [PM_CFG_BATCH] = {OFF(batch), T_INT, COUNT(1)},
    [PM_CFG_MICRO] = {OFF(micro), T_INT, COUNT(1)},
    [PM_CFG_SEED] = {OFF(seed), T_U64, 1, 0, 0, 0, 1073741824},
    [PM_CFG_LR] = {OFF(opt.lr), T_F32, 0, 1, 0, 0, FLT_MAX},
    [PM_CFG_WEIGHT_DECAY] = {OFF(opt.weight_decay), T_F32, 0, 0, 0, 0, FLT_MAX},
    [PM_CFG_STEPS] = {OFF(opt.steps), T_INT, COUNT(1)},
    [PM_CFG_WARMUP] = {OFF(opt.warmup), T_INT, COUNT(0)},
    [PM_CFG_LR_MIN_FRAC] = {OFF(opt.lr_min_frac), T_F32, 0, 0, 0, 0, 1},
    [PM_CFG_BETA1] = {OFF(opt.beta1), T_F32, 0, 0, 1, 0, 1},
    [PM_CFG_BETA2] = {OFF(opt.beta2), T_F32, 0, 0, 1, 0, 1},
    [PM_CFG_EPS] = {OFF(opt.eps), T_F32, 0, 1, 0, 0, FLT_MAX},
    [PM_CFG_GRAD_CLIP] = {OFF(opt.grad_clip), T_F32, 0, 0, 0, -FLT_MAX, FLT_MAX},
    [PM_CFG_HEAD_PARTS] = {OFF(model.head_parts), T_I32, COUNT(0)},
};
#undef COUNT
#undef OFF

const char *const pm_train_field_names[PM_CFG_FIELDS] = {
    "model.vocab", "model.ctx",     "model.dim",        "model.heads",     "model.layers",
    "batch",       "micro",         "seed",             "opt.lr",          "opt.weight_decay",
    "opt.steps",   "opt.warmup",    "opt.lr_min_frac",  "opt.beta1",       "opt.beta2",
    "opt.eps",     "opt.grad_clip", "model.head_parts"};
const char *const pm_train_value_rules[PM_CFG_FIELDS] = {
    "an integer 1..16777216", "an integer 1..16777216", "an integer 1..16777216",
    "an integer 1..16777216", "an integer 1..16777216", "an integer 1..16777216",
    "an integer 1..16777216", "an integer 0..1073741824",
    "a positive number up to 3.4e38 (a float)", "a number from 0 up to 3.4e38 (a float)",
    "an integer 1..16777216", "an integer 0..16777216", "a number from 0 to 1",
    "a number from 0 up to (not) 1", "a number from 0 up to (not) 1",
    "a positive number up to 3.4e38 (a float)",
    "a number a float holds (0 or below: no clipping)", "an integer 0..16777216"};

int pm_train_value_ok(pm_train_field f, double x) {
    if ((unsigned)f >= PM_CFG_FIELDS || !isfinite(x)) return 0;
    const field *d = &FIELDS[f];
    if (d->integer && x != floor(x)) return 0;
    return (d->lo_open ? x > d->lo : x >= d->lo) && (d->hi_open ? x < d->hi : x <= d->hi);
}

int pm_train_field_integer(pm_train_field f) {
    return (unsigned)f < PM_CFG_FIELDS && FIELDS[f].integer;
}

/* ---- reading and writing a field ---------------------------------------- */

static void put(pm_train_cfg *c, pm_train_field f, double x) {
    char *p = (char *)c + FIELDS[f].off;
    switch (FIELDS[f].type) {
    case T_I32: *(int32_t *)p = (int32_t)x; break;
    case T_INT: *(int *)p = (int)x; break;
    case T_U64: *(uint64_t *)p = (uint64_t)x; break;
    default: *(float *)p = (float)x; break;
    }
}

/* 1 if field f is the same in a and b (floats compared as values: the
 * checkpoint stores them as they are). */
static int same(const pm_train_cfg *a, const pm_train_cfg *b, pm_train_field f) {
    const char *p = (const char *)a + FIELDS[f].off, *q = (const char *)b + FIELDS[f].off;
    switch (FIELDS[f].type) {
    case T_I32: return *(const int32_t *)p == *(const int32_t *)q;
    case T_INT: return *(const int *)p == *(const int *)q;
    case T_U64: return *(const uint64_t *)p == *(const uint64_t *)q;
    default: return *(const float *)p == *(const float *)q;
    }
}

void pm_train_cfg_value(const pm_train_cfg *c, pm_train_field f, char *buf, size_t cap) {
    const char *p = (const char *)c + FIELDS[f].off;
    char fl[PM_FLOAT_TEXT];
    switch (FIELDS[f].type) {
    case T_I32: snprintf(buf, cap, "%d", (int)*(const int32_t *)p); break;
    case T_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case T_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    default: snprintf(buf, cap, "%s", pm_float_text(fl, *(const float *)p)); break;
    }
}

/* The field's value as a double, for its rule (a seed beyond 2^53 rounds,
 * far outside its rule either way). */
static double get(const pm_train_cfg *c, pm_train_field f) {
    const char *p = (const char *)c + FIELDS[f].off;
    switch (FIELDS[f].type) {
    case T_I32: return *(const int32_t *)p;
    case T_INT: return *(const int *)p;
    case T_U64: return (double)*(const uint64_t *)p;
    default: return *(const float *)p;
    }
}

/* ---- building, checking, comparing --------------------------------------- */

void pm_train_cfg_defaults(pm_train_cfg *c) {
    *c = (pm_train_cfg){.model = {.vocab = 256, .ctx = 64, .dim = 128, .heads = 4, .layers = 4},
                        .batch = 8, .micro = 1, .seed = 1};
    pm_optim_defaults(&c->opt, 100);
}

void pm_train_settings_clear(pm_train_settings *s) {
    for (int f = 0; f < PM_CFG_FIELDS; f++) s->v[f] = NAN;
}

/* Value x of field f refused by its rule: a number a float cannot hold
 * says so (it would be inf). */
static pm_status bad_value(pm_train_field f, double x, pm_err *err) {
    const char *name = pm_train_field_names[f], *rule = pm_train_value_rules[f];
    if (FIELDS[f].type == T_F32 && isfinite(x) && fabs(x) > FLT_MAX)
        return pm_errf(err, PM_ERR_ARG, "%s %g is beyond a float; give %s", name, x, rule);
    return pm_errf(err, PM_ERR_ARG, "%s=%.10g: must be %s", name, x, rule);
}

pm_status pm_train_cfg_make(pm_train_cfg *c, const pm_train_settings *s, pm_err *err) {
    pm_train_cfg out;
    pm_train_cfg_defaults(&out);
    for (int f = 0; f < PM_CFG_FIELDS; f++)
        if (!isnan(s->v[f]) && !pm_train_value_ok(f, s->v[f])) return bad_value(f, s->v[f], err);
    /* the steps first: the warm-up's default (and every AdamW default) is
     * pm_optim_defaults' for them */
    if (!isnan(s->v[PM_CFG_STEPS])) pm_optim_defaults(&out.opt, (int)s->v[PM_CFG_STEPS]);
    for (int f = 0; f < PM_CFG_FIELDS; f++)
        if (!isnan(s->v[f]) && f != PM_CFG_STEPS) put(&out, f, s->v[f]);
    if (out.opt.warmup > out.opt.steps) out.opt.warmup = out.opt.steps; /* it is the run */
    pm_status st = pm_train_cfg_check(&out, err);
    if (!st) *c = out;
    return st;
}

pm_status pm_train_cfg_check(const pm_train_cfg *c, pm_err *err) {
    if (!c) return pm_errf(err, PM_ERR_ARG, "cfg is NULL: give a training configuration");
    pm_status st = pm_gpt_config_check(&c->model, err);
    if (st) return st;
    /* the model's fields are its check's; the seed takes any 64 bits here */
    for (int f = PM_CFG_BATCH; f < PM_CFG_HEAD_PARTS; f++) {
        if (f == PM_CFG_SEED || pm_train_value_ok(f, get(c, f))) continue;
        char v[PM_FLOAT_TEXT + 8];
        pm_train_cfg_value(c, f, v, sizeof v);
        return pm_errf(err, PM_ERR_ARG, "%s=%s: must be %s", pm_train_field_names[f], v,
                       pm_train_value_rules[f]);
    }
    if (c->batch % c->micro)
        return pm_errf(err, PM_ERR_ARG,
                       "micro=%d must divide batch=%d (the microbatches share the batch's "
                       "sequences equally)", c->micro, c->batch);
    if (c->opt.warmup > c->opt.steps)
        return pm_errf(err, PM_ERR_ARG, "opt.warmup=%d: must be at most opt.steps=%d",
                       c->opt.warmup, c->opt.steps);
    return PM_OK;
}

int pm_train_cfg_diff(const pm_train_cfg *a, const pm_train_cfg *b, unsigned mask) {
    for (int f = 0; f < PM_CFG_FIELDS; f++)
        if ((mask & PM_CFG_BIT(f)) && !same(a, b, f)) return f;
    return -1;
}
