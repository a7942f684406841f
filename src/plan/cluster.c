/* cluster.c: plans as rows of `pipemem plan`, and the search over them
 * (pm_cluster.h).
 *
 * A row is one plan of the planner (pm_plan_build, plan.c) on a cost
 * model, kept small: the cut, the busiest replica's devices by kind, and
 * the step, with the gradient sums across replicas (pm_sim_dp: every
 * stage's gradients summed by a ring all-reduce overlapped with the
 * passes), samples per time unit and MFU. The search makes a row for every
 * shape (pp, dp, mbs, m) and kind, over the devices' memory marked rather
 * than refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_cluster.h"
#include "schedule/sched.h"
#include "util/alloc.h"
#include "internal.h"

static pm_status nomem(pm_err *err) { return pm_errf(err, PM_ERR_NOMEM, "plan: out of memory"); }

/* Parameters of stage k of pl. */
static double stage_params(const pm_plan_model *m, const pm_plan *pl, int k) {
    double n = 0;
    for (int i = pl->first[k]; i < pl->first[k + 1]; i++) n += m->layer[i].params;
    return n;
}

/* The step: the replica's makespan, or with replicas the gradient sums
 * across them, overlapped with the passes. */
static pm_status step_of(pm_plan *pl, const pm_plan_model *m, double *step, pm_err *err) {
    *step = pl->sim.makespan;
    if (pl->dp < 2) return PM_OK;
    double *ar = pm_malloc((size_t)pl->S * sizeof *ar);
    if (!ar) return nomem(err);
    for (int k = 0; k < pl->S; k++)
        ar[k] = m->link > 0
                    ? pm_allreduce_cost(stage_params(m, pl, k) * m->bytes_grad, pl->dp, m->link, 0)
                    : 0;
    pm_status st = pm_sim_dp(&pl->sim, &pl->sched, ar, err);
    pm_free(ar);
    *step = pl->sim.dp_step;
    return st;
}

/* The row of plan pl on model m. */
static pm_status row_of(pm_cluster_plan *r, pm_plan *pl, const pm_plan_model *m, pm_err *err) {
    int p = pl->p, rep = pl->busiest / p;
    snprintf(r->kind, sizeof r->kind, "%s", pl->sched.kind);
    r->pp = p, r->dp = pl->dp, r->m = pl->m, r->zero = pl->zero, r->mbs = m->mbs, r->S = pl->S;
    r->first = pm_malloc(((size_t)pl->S + 1) * sizeof *r->first);
    r->stage_device = pm_malloc((size_t)pl->S * sizeof *r->stage_device);
    r->dev = pm_malloc((size_t)p * sizeof *r->dev);
    if (!r->first || !r->stage_device || !r->dev) return nomem(err);
    memcpy(r->first, pl->first, ((size_t)pl->S + 1) * sizeof *r->first);
    for (int k = 0; k < pl->S; k++) r->stage_device[k] = pm_sched_stage_device(&pl->sched, k);
    memcpy(r->dev, pl->dev + (size_t)rep * (size_t)p, (size_t)p * sizeof *r->dev);
    for (int d = 0; d < p; d++) {
        const size_t *b = r->dev[d].bytes;
        double state = (double)(b[PM_BYTES_PARAMS] + b[PM_BYTES_GRADS] + b[PM_BYTES_MOMENTS]);
        r->act_peak = fmax(r->act_peak, (double)r->dev[d].act_peak);
        r->state = fmax(r->state, state);
    }
    r->busiest = pl->busiest % p, r->total_max = (double)r->dev[r->busiest].total;
    r->fits = pl->fits, r->M = pl->M, r->limit = pl->limit, r->bubble = pl->sim.bubble;
    pm_status st = step_of(pl, m, &r->step, err);
    if (st) return st;
    r->samples = r->step > 0 ? (double)r->m * r->mbs * r->dp / r->step : 0;
    double peak = m->peak_flops * r->pp * r->dp;
    r->mfu = !strcmp(m->time_unit, "s") && peak > 0 && r->step > 0
                 ? r->m * r->dp * m->flops / (r->step * peak) : 0;
    return PM_OK;
}

pm_status pm_cluster_plan_make(pm_cluster_plan *r, pm_plan_model *m, const pm_plan_req *rq,
                               pm_err *err) {
    *r = (pm_cluster_plan){0};
    pm_plan pl;
    pm_status st = pm_plan_build(&pl, m, rq, err);
    if (st) return st;
    st = row_of(r, &pl, m, err);
    pm_plan_free(&pl);
    if (st) pm_cluster_plan_free(r);
    return st;
}

void pm_cluster_plan_free(pm_cluster_plan *pl) {
    if (!pl) return;
    pm_free(pl->first);
    pm_free(pl->stage_device);
    pm_free(pl->dev);
    *pl = (pm_cluster_plan){0};
}

/* ---- the search ----------------------------------------------------------------- */

/* A growing list of plans. */
typedef struct {
    pm_cluster_plan *p;
    int n, cap;
} plan_list;

static int list_push(plan_list *l, const pm_cluster_plan *pl) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        pm_cluster_plan *p = pm_realloc(l->p, (size_t)cap * sizeof *p);
        if (!p) return 0;
        l->p = p, l->cap = cap;
    }
    l->p[l->n++] = *pl;
    return 1;
}

/* Those that fit first, then by samples per second (fastest first), then
 * the smaller total; the rest only makes the order the same everywhere. */
static int by_speed(const void *x, const void *y) {
    const pm_cluster_plan *a = x, *b = y;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (a->samples != b->samples) return a->samples > b->samples ? -1 : 1;
    if (a->total_max != b->total_max) return a->total_max < b->total_max ? -1 : 1;
    int c = strcmp(a->kind, b->kind);
    if (c) return c;
    if (a->pp != b->pp) return a->pp - b->pp;
    return a->mbs - b->mbs;
}

/* The kinds a search tries: one, or every registered kind plain and
 * recomputed, and auto-v when the devices' memory is known. */
static int search_kinds(const pm_cluster_search_req *rq, const pm_cluster *hw,
                        char (*kinds)[40], int cap) {
    if (rq->kind) {
        snprintf(kinds[0], 40, "%s", rq->kind);
        return 1;
    }
    int nk, n = 0;
    const pm_sched_kind *k = pm_sched_kinds(&nk);
    for (int rec = 0; rec < 2; rec++)
        for (int i = 0; i < nk && n < cap; i++)
            if (strcmp(k[i].name, "auto-v"))
                snprintf(kinds[n++], 40, "%s%s", k[i].name, rec ? "-r" : "");
    if (hw->mem > 0 && n < cap) snprintf(kinds[n++], 40, "auto-v");
    return n;
}

/* The search's progress: plans tried of all it will try. */
typedef struct {
    const pm_cluster_search_req *rq;
    int done, total;
} progress;

/* Every kind at one shape (pp, dp, m) of model m into l. */
static pm_status search_shape(plan_list *l, pm_plan_model *m, const pm_plan_req *shape,
                              char (*kinds)[40], int nk, int *skipped, progress *pg,
                              pm_err *why) {
    for (int k = 0; k < nk; k++) {
        pm_plan_req rq = *shape;
        rq.kind = kinds[k];
        pm_cluster_plan pl;
        pm_err err;
        pm_status st = pm_cluster_plan_make(&pl, m, &rq, &err);
        if (pg->rq->progress) pg->rq->progress(pg->rq->progress_ctx, ++pg->done, pg->total);
        if (st == PM_ERR_NOMEM) return pm_errf(why, st, "%s", err.msg);
        if (st) {
            ++*skipped;
            pm_errf(why, st, "%s (%s, pp=%d, dp=%d, mbs=%d, m=%d)", err.msg, rq.kind, rq.p,
                    rq.dp, m->mbs, rq.m);
            continue;
        }
        if (!list_push(l, &pl)) {
            pm_cluster_plan_free(&pl);
            return nomem(why);
        }
    }
    return PM_OK;
}

/* Shape (pp, mbs) of the search: 1 with its dp and m; 0 when the request
 * fixes another pp or dp or pp does not divide the devices; -1 when the
 * global batch is not a whole number of microbatches of mbs x dp. */
static int shape_of(const pm_cluster *hw, const pm_cluster_search_req *rq, int pp, int mbs,
                    int *dp, int *m) {
    if ((rq->pp && pp != rq->pp) || hw->devices % pp) return 0;
    *dp = hw->devices / pp;
    if (rq->dp && *dp != rq->dp) return 0;
    int64_t per = (int64_t)mbs * *dp;
    if (!rq->m && (rq->global_batch % per || rq->global_batch < per)) return -1;
    *m = rq->m ? rq->m : (int)(rq->global_batch / per);
    return 1;
}

/* Every pp (dividing the devices) and kind at one microbatch size. */
static pm_status search_mbs(plan_list *l, const pm_gpt_shape *g, const pm_cluster *hw,
                            const pm_cluster_search_req *rq, int mbs, char (*kinds)[40],
                            int nk, int *skipped, progress *pg, pm_err *why) {
    pm_plan_model m;
    pm_status st = pm_plan_model_gpu(&m, g, mbs, hw, why);
    if (st) return st;
    for (int pp = 1; pp <= hw->devices && !st; pp++) {
        int dp, mm, ok = shape_of(hw, rq, pp, mbs, &dp, &mm);
        if (ok < 0) {
            ++*skipped;
            pm_errf(why, PM_ERR_ARG, "the global batch %d is not a multiple of mbs=%d x "
                    "dp=%d", rq->global_batch, mbs, dp);
        }
        if (ok <= 0) continue;
        /* over the memory: marked, so the list shows what does not fit */
        pm_plan_req shape = {.p = pp, .dp = dp, .m = mm, .zero = rq->zero && dp > 1,
                             .device_mem = hw->mem > 0 ? (size_t)hw->mem : 0, .mark_over = 1};
        st = search_shape(l, &m, &shape, kinds, nk, skipped, pg, why);
    }
    pm_plan_model_free(&m);
    return st;
}

pm_status pm_cluster_search(const pm_gpt_shape *g, const pm_cluster *hw,
                            const pm_cluster_search_req *rq, pm_cluster_plan **plans, int *n,
                            int *skipped, pm_err *err) {
    *plans = NULL, *n = 0;
    int skip = 0;
    pm_status cst = pm_cluster_check(hw, err);
    if (cst) return cst;
    if (!g || !rq)
        return pm_errf(err, PM_ERR_ARG, "the %s is NULL", g ? "request (rq)" : "shape (g)");
    const struct {
        const char *name;
        int v;
    } f[] = {{"pp", rq->pp}, {"dp", rq->dp}, {"mbs", rq->mbs}, {"m", rq->m},
             {"global_batch", rq->global_batch}, {"max_mbs", rq->max_mbs}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) /* 0: searched, or the default */
        if (f[i].v < 0)
            return pm_errf(err, PM_ERR_ARG, "%s=%d: must be >= 0 (0: %s)", f[i].name, f[i].v,
                           i == 5 ? "64" : i == 3 ? "from global_batch" : "searched");
    if (hw->devices < 1)
        return pm_errf(err, PM_ERR_ARG, "hw.devices=%d: must be >= 1", hw->devices);
    if (!rq->m && rq->global_batch < 1)
        return pm_errf(err, PM_ERR_ARG, "give the microbatches per replica (m) or global_batch");
    if (rq->pp && hw->devices % rq->pp)
        return pm_errf(err, PM_ERR_ARG, "pp=%d does not divide hw.devices=%d", rq->pp,
                       hw->devices);
    if (rq->dp && hw->devices % rq->dp)
        return pm_errf(err, PM_ERR_ARG, "dp=%d does not divide hw.devices=%d", rq->dp,
                       hw->devices);
    if (rq->pp && rq->dp && (int64_t)rq->pp * rq->dp != hw->devices)
        return pm_errf(err, PM_ERR_ARG, "pp=%d x dp=%d is not the hw.devices=%d", rq->pp, rq->dp,
                       hw->devices);
    char kinds[64][40];
    int nk = search_kinds(rq, hw, kinds, 64), max = rq->max_mbs > 0 ? rq->max_mbs : 64;
    plan_list l = {0};
    pm_err why = {{0}};
    pm_status st = PM_OK;
    progress pg = {.rq = rq};
    int lo = rq->mbs ? rq->mbs : 1, hi = rq->mbs ? rq->mbs : max, dp, mm;
    for (int mbs = lo; mbs <= hi; mbs *= 2)
        for (int pp = 1; pp <= hw->devices; pp++)
            pg.total += shape_of(hw, rq, pp, mbs, &dp, &mm) > 0 ? nk : 0;
    for (int mbs = lo; mbs <= hi && !st; mbs *= 2)
        st = search_mbs(&l, g, hw, rq, mbs, kinds, nk, &skip, &pg, &why);
    if (!st && !l.n) st = pm_errf(err, PM_ERR_ARG, "no plan can be made: %s", why.msg);
    else if (st) *err = why;
    if (st) {
        pm_cluster_plans_free(l.p, l.n);
        return st;
    }
    qsort(l.p, (size_t)l.n, sizeof *l.p, by_speed);
    *plans = l.p, *n = l.n;
    if (skipped) *skipped = skip;
    if (skip) *err = why; /* the last one skipped: why */
    return PM_OK;
}

void pm_cluster_plans_free(pm_cluster_plan *plans, int n) {
    for (int i = 0; plans && i < n; i++) pm_cluster_plan_free(&plans[i]);
    pm_free(plans);
}
