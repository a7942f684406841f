/* cluster.c: plans of a model on a cluster, and the search over them
 * (pm_cluster.h).
 *
 * One plan, in order (each step needs the ones before):
 *   schedule  pm_sched_generate with device-share costs: each device's
 *             1/pp of the model's pass times, the point-to-point time of
 *             one message, and the activation deltas as fractions of one
 *             microbatch (what the generators that squeeze or search weigh);
 *   cut       pm_place_cut of the model's layers over the schedule's stages;
 *   costs     pm_place_stage_costs: each stage's times and byte deltas;
 *   step      pm_sim_run; with replicas, every stage's gradients summed by a
 *             ring all-reduce overlapped with the passes (pm_sim_dp);
 *   bytes     each device's weights, gradients and optimizer state from its
 *             stages' parameters, its activation peak from the simulation
 *             (in bytes: the schedule's own peak, uneven stages, the head and
 *             the V placement counted), its message buffers.
 * auto-v searches V schedules under the memory the devices have left: a
 * first limit from an even split of the state, then (the stages are not
 * even) again under a limit scaled by the overshoot, a few times at most,
 * as the planner of pm_plan.h does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_cluster.h"

const char *const pm_cl_names[PM_CL_COUNT] = {"parameters", "gradients", "optimizer",
                                              "activations", "workspace"};
_Static_assert(sizeof pm_cl_names / sizeof pm_cl_names[0] == PM_CL_COUNT, "names");

enum { WORK_MSGS = 6, AUTO_TRIES = 6 };

static pm_status nomem(pm_err *err) { return pm_errf(err, PM_ERR_NOMEM, "plan: out of memory"); }

/* Bytes per second of the link; 0: free. */
static double link_bw(const pm_cluster *hw) {
    return hw->link_gbps > 0 ? hw->link_gbps * 1e9 / 8 : 0;
}

/* Seconds to move n bytes between two devices (0 when free, or when the
 * model's times are FLOPs and seconds cannot be added to them). */
static double p2p_time(const pm_cluster_model *m, const pm_cluster *hw, double n) {
    double bw = link_bw(hw);
    return bw > 0 && !strcmp(m->time_unit, "s") ? n / bw : 0;
}

/* Stages per device of a kind (KIND-r as KIND): what a recomputed stage
 * keeps is a fraction of one device's v stages. */
static int kind_chunks(const char *kind) {
    int rec;
    const pm_sched_kind *k = pm_sched_kind_find_r(kind, &rec);
    return k && k->place == PM_PLACE_SINGLE ? 1 : 2;
}

/* What a kind with recomputation must be given as its limit (x M): the
 * greedy kinds' own defaults (registry.c), which they take only unasked
 * without recomputation; 0 for every other kind. */
static double recompute_limit(const char *kind) {
    static const struct {
        const char *name;
        double limit;
    } own[] = {{"zb-1p-r", 1}, {"zb-2p-r", 2}, {"v-zb-r", 1}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(kind, own[i].name)) return own[i].limit;
    return 0;
}

/* The generators' request: device-share times (or the model's own
 * weights, gen) and deltas, as fractions of one microbatch's activation
 * (F keeps 1, B releases what W does not need, W the rest; a recomputed
 * stage keeps its input). */
static pm_sched_req sched_req(const pm_cluster_model *m, const pm_cluster *hw,
                              const pm_cluster_req *rq, double limit) {
    double tf = 0, tb = 0, tw = 0, act = 0, act_w = 0;
    for (int i = 0; i < m->n; i++) {
        tf += m->layer[i].tf, tb += m->layer[i].tb, tw += m->layer[i].tw;
        act += m->layer[i].act, act_w += m->layer[i].act_w;
    }
    if (m->gen[0] > 0) tf = m->gen[0], tb = m->gen[1], tw = m->gen[2];
    int v = kind_chunks(rq->kind);
    double keep = m->n > 1 && act > 0 ? v * rq->pp * m->layer[1].in / act : 1;
    return (pm_sched_req){.p = rq->pp, .m = rq->m,
                          .t = {tf / rq->pp, tb / rq->pp, tw / rq->pp, p2p_time(m, hw, m->msg)},
                          .mem = {1, act > 0 ? -(act - act_w) / act : -1,
                                  act > 0 ? -act_w / act : 0, keep < 1 ? keep : 1},
                          .mem_limit = limit > 0 ? limit : recompute_limit(rq->kind)};
}

/* The gradient sums across replicas, overlapped with the passes. */
static pm_status dp_step(const pm_cluster_model *m, const pm_cluster *hw,
                         const pm_cluster_plan *pl, const pm_sched *s, pm_sim *sim,
                         pm_err *err) {
    double *ar = pm_malloc((size_t)pl->S * sizeof *ar), bw = link_bw(hw);
    if (!ar) return nomem(err);
    for (int k = 0; k < pl->S; k++) {
        double params = 0;
        for (int i = pl->first[k]; i < pl->first[k + 1]; i++) params += m->layer[i].params;
        ar[k] = bw > 0 && !strcmp(m->time_unit, "s")
                    ? pm_allreduce_cost(params * m->bytes_grad, pl->req.dp, bw, 0) : 0;
    }
    pm_status st = pm_sim_dp(sim, s, ar, err);
    pm_free(ar);
    return st;
}

/* Each device's bytes by kind, the largest figures and whether they fit. */
static void device_bytes(const pm_cluster_model *m, const pm_cluster *hw, pm_cluster_plan *pl,
                         const pm_sim *sim) {
    int shards = pl->req.zero && pl->req.dp > 1 ? pl->req.dp : 1;
    pl->act_peak = pl->state = pl->total_max = 0, pl->busiest = 0;
    for (int d = 0; d < pl->req.pp; d++) {
        double params = 0, *b = pl->bytes + (size_t)d * PM_CL_COUNT;
        for (int k = 0; k < pl->S; k++) {
            if (pl->dev[k] != d) continue;
            for (int i = pl->first[k]; i < pl->first[k + 1]; i++) params += m->layer[i].params;
        }
        b[PM_CL_PARAMS] = params * m->bytes_param;
        b[PM_CL_GRADS] = params * m->bytes_grad;
        b[PM_CL_OPT] = params * m->bytes_opt / shards;
        b[PM_CL_ACT] = sim->peak[d];
        b[PM_CL_WORK] = WORK_MSGS * m->msg;
        pl->total[d] = 0;
        for (int k = 0; k < PM_CL_COUNT; k++) pl->total[d] += b[k];
        double state = b[PM_CL_PARAMS] + b[PM_CL_GRADS] + b[PM_CL_OPT];
        pl->act_peak = fmax(pl->act_peak, b[PM_CL_ACT]);
        pl->state = fmax(pl->state, state);
        if (pl->total[d] > pl->total_max) pl->total_max = pl->total[d], pl->busiest = d;
    }
    pl->fits = !(hw->mem > 0) || pl->total_max <= hw->mem;
}

/* PM_ERR_ARG naming hw.tflops when the devices are so slow that a step's
 * makespan could pass what a double holds with margin (the schedule
 * engine's limit on costs, pm_sched_check_costs), with the least rate that
 * would do. */
static pm_status slow_devices(const pm_cluster_model *m, const pm_cluster *hw,
                              const pm_sched_req *req, pm_err *err) {
    if (!(hw->tflops > 0) || !pm_sched_check_costs(req, NULL)) return PM_OK;
    const pm_costs *t = &req->t;
    double pass = t->f + t->b + t->w, most = 1e300 / (4.0 * req->p * req->m) - 2 * t->c;
    double eff = hw->efficiency > 0 ? hw->efficiency : PM_CLUSTER_EFFICIENCY;
    return pm_errf(err, PM_ERR_ARG, "hw.tflops=%g (x efficiency %g) makes one microbatch's "
                   "F, B and W through a device take %.3g %s, and a step of pp=%d, m=%d could "
                   "take longer than a double holds with margin; give hw.tflops=%.3g or more",
                   hw->tflops, eff, pass, m->time_unit, req->p, req->m,
                   hw->tflops * pass / (most > 0 ? most : 1e-300));
}

/* Schedule, cut, costs, simulation and bytes of rq's kind under limit (x M). */
static pm_status build(pm_cluster_plan *pl, const pm_cluster_model *m, const pm_cluster *hw,
                       const pm_cluster_req *rq, double limit, pm_err *err) {
    pm_sched s = {0};
    pm_cost c = {0};
    pm_sim sim = {0};
    pm_sched_req req = sched_req(m, hw, rq, limit);
    pm_status st = slow_devices(m, hw, &req, err);
    if (!st) st = pm_sched_generate(&s, rq->kind, &req, err);
    if (st) return st;
    if (m->n < s.S) { /* each stage holds a layer: say what the layers are */
        int v = s.S / rq->pp; /* stages a device */
        st = pm_errf(err, PM_ERR_ARG, "shape.layers is %d: with the embedding and the head %d "
                     "layers, fewer than the %d stages of %s on pp=%d; give shape.layers of %d "
                     "or more, pp=%d or less, or a kind of one stage a device", m->n - 2, m->n,
                     s.S, s.kind, rq->pp, s.S - 2, m->n / v > 0 ? m->n / v : 1);
        pm_sched_free(&s);
        return st;
    }
    pl->S = s.S;
    pl->first = pm_malloc(((size_t)s.S + 1) * sizeof *pl->first);
    pl->dev = pm_malloc((size_t)s.S * sizeof *pl->dev);
    pl->bytes = pm_malloc((size_t)rq->pp * PM_CL_COUNT * sizeof *pl->bytes);
    pl->total = pm_malloc((size_t)rq->pp * sizeof *pl->total);
    if (!pl->first || !pl->dev || !pl->bytes || !pl->total) st = nomem(err);
    for (int k = 0; !st && k < s.S; k++) pl->dev[k] = pm_sched_stage_device(&s, k);
    if (!st) st = pm_place_cut(m->layer, m->n, &s, NULL, pl->first, NULL, err);
    if (!st) st = pm_place_stage_costs(m->layer, pl->first, s.S, s.recompute, &c, err);
    if (!st) {
        c.c = req.t.c;
        st = pm_sim_run(&sim, &s, &c, err);
    }
    if (!st && rq->dp > 1) st = dp_step(m, hw, pl, &s, &sim, err);
    if (!st) {
        snprintf(pl->req.kind, sizeof pl->req.kind, "%s", s.kind);
        pl->M = pm_cost_M(&c), pl->limit = limit, pl->bubble = sim.bubble;
        pl->step = rq->dp > 1 ? sim.dp_step : sim.makespan;
        pl->samples = pl->step > 0 ? (double)rq->m * m->mbs * rq->dp / pl->step : 0;
        double peak = hw->tflops * 1e12 * rq->pp * rq->dp;
        pl->mfu = !strcmp(m->time_unit, "s") && peak > 0 && pl->step > 0
                      ? rq->m * rq->dp * m->flops / (pl->step * peak) : 0;
        device_bytes(m, hw, pl, &sim);
    }
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    return st;
}

/* auto-v: the fastest V schedule under the memory left. The first limit
 * splits the state evenly; each retry scales the limit by how far the
 * busiest device's activations overshot the room its state leaves. */
static pm_status build_auto(pm_cluster_plan *pl, const pm_cluster_model *m,
                            const pm_cluster *hw, const pm_cluster_req *rq, pm_err *err) {
    if (!(hw->mem > 0))
        return pm_errf(err, PM_ERR_ARG, "auto-v searches under the memory the devices have "
                       "left: give the devices' memory (hw.mem)");
    double state = 0, act = 0;
    int shards = rq->zero && rq->dp > 1 ? rq->dp : 1;
    for (int i = 0; i < m->n; i++)
        state += m->layer[i].params * (m->bytes_param + m->bytes_grad + m->bytes_opt / shards),
        act += m->layer[i].act;
    double room = hw->mem - state / rq->pp - WORK_MSGS * m->msg;
    if (!(room > 0) || !(act > 0))
        return pm_errf(err, PM_ERR_MEMLIMIT, "auto-v: the state alone (%.4g GB a device) "
                       "fills the devices' memory (%.4g GB)", state / rq->pp / 1e9, hw->mem / 1e9);
    double limit = room / act;
    pm_status st = PM_OK;
    for (int tries = 0; tries < AUTO_TRIES; tries++) {
        pm_cluster_plan_free(pl);
        pl->req = *rq, pl->mbs = m->mbs;
        if ((st = build(pl, m, hw, rq, limit, err)) || pl->fits) return st;
        const double *b = pl->bytes + (size_t)pl->busiest * PM_CL_COUNT;
        double other = pl->total_max - b[PM_CL_ACT], real = b[PM_CL_ACT] / pl->M;
        if (other >= hw->mem || !(b[PM_CL_ACT] > 0)) break;
        limit = fmin(limit, real) * (hw->mem - other) / b[PM_CL_ACT] * (1 - 1e-6);
    }
    return st; /* the last try, marked as not fitting */
}

pm_status pm_cluster_plan_make(pm_cluster_plan *pl, const pm_cluster_model *m,
                               const pm_cluster *hw, const pm_cluster_req *rq, pm_err *err) {
    if (!m || !rq) {
        *pl = (pm_cluster_plan){0};
        return pm_errf(err, PM_ERR_ARG, "the %s is NULL", m ? "request (rq)" : "model (m)");
    }
    *pl = (pm_cluster_plan){.req = *rq, .mbs = m->mbs};
    pm_status cst = pm_cluster_check(hw, err);
    if (cst) return cst;
    if (rq->pp < 1 || rq->dp < 1 || rq->m < 1)
        return pm_errf(err, PM_ERR_ARG, "pp=%d, dp=%d and m=%d must each be >= 1", rq->pp,
                       rq->dp, rq->m);
    if (hw->devices > 0 && (int64_t)rq->pp * rq->dp != hw->devices)
        return pm_errf(err, PM_ERR_ARG,
                       "pp=%d x dp=%d is %lld devices, not the hw.devices=%d there are",
                       rq->pp, rq->dp, (long long)rq->pp * rq->dp, hw->devices);
    if (rq->zero && rq->dp < 2)
        return pm_errf(err, PM_ERR_ARG, "ZeRO-1 shards the optimizer state across replicas: "
                       "it needs dp=2 or more (got dp=%d)", rq->dp);
    pm_status st = strcmp(rq->kind, "auto-v") ? build(pl, m, hw, rq, 0, err)
                                               : build_auto(pl, m, hw, rq, err);
    if (st) pm_cluster_plan_free(pl);
    return st;
}

void pm_cluster_plan_free(pm_cluster_plan *pl) {
    if (!pl) return;
    pm_free(pl->first);
    pm_free(pl->dev);
    pm_free(pl->bytes);
    pm_free(pl->total);
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
    int c = strcmp(a->req.kind, b->req.kind);
    if (c) return c;
    if (a->req.pp != b->req.pp) return a->req.pp - b->req.pp;
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

/* Every kind at one shape (pp, dp, m) of model m into l. */
static pm_status search_shape(plan_list *l, const pm_cluster_model *m, const pm_cluster *hw,
                              const pm_cluster_req *shape, char (*kinds)[40], int nk,
                              int *skipped, pm_err *why) {
    for (int k = 0; k < nk; k++) {
        pm_cluster_req rq = *shape;
        memcpy(rq.kind, kinds[k], sizeof rq.kind); /* both 40 bytes */
        pm_cluster_plan pl;
        pm_err err;
        pm_status st = pm_cluster_plan_make(&pl, m, hw, &rq, &err);
        if (st == PM_ERR_NOMEM) return pm_errf(why, st, "%s", err.msg);
        if (st) {
            ++*skipped;
            pm_errf(why, st, "%s (%s, pp=%d, dp=%d, mbs=%d, m=%d)", err.msg, rq.kind, rq.pp,
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

/* Every pp (dividing the devices) and kind at one microbatch size. */
static pm_status search_mbs(plan_list *l, const pm_gpt_shape *g, const pm_cluster *hw,
                            const pm_cluster_search_req *rq, int mbs, char (*kinds)[40],
                            int nk, int *skipped, pm_err *why) {
    pm_cluster_model m;
    pm_status st = pm_cluster_model_gpt(&m, g, mbs, hw, why);
    if (st) return st;
    for (int pp = 1; pp <= hw->devices && !st; pp++) {
        if ((rq->pp && pp != rq->pp) || hw->devices % pp) continue;
        int dp = hw->devices / pp;
        if (rq->dp && dp != rq->dp) continue;
        int64_t per = (int64_t)mbs * dp, mm = rq->m;
        if (!mm && (rq->global_batch % per || rq->global_batch < per)) {
            ++*skipped;
            pm_errf(why, PM_ERR_ARG, "the global batch %d is not a multiple of mbs=%d x "
                    "dp=%d", rq->global_batch, mbs, dp);
            continue;
        }
        if (!mm) mm = rq->global_batch / per;
        pm_cluster_req shape = {.pp = pp, .dp = dp, .m = (int)mm, .zero = rq->zero && dp > 1};
        st = search_shape(l, &m, hw, &shape, kinds, nk, skipped, why);
    }
    pm_cluster_model_free(&m);
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
    for (int mbs = rq->mbs ? rq->mbs : 1; mbs <= (rq->mbs ? rq->mbs : max) && !st; mbs *= 2)
        st = search_mbs(&l, g, hw, rq, mbs, kinds, nk, &skip, &why);
    if (!st && !l.n) st = pm_errf(err, PM_ERR_ARG, "no plan can be made: %s", why.msg);
    else if (st) *err = why;
    if (st) {
        pm_cluster_plans_free(l.p, l.n);
        return st;
    }
    qsort(l.p, (size_t)l.n, sizeof *l.p, by_speed);
    *plans = l.p, *n = l.n;
    if (skipped) *skipped = skip;
    return PM_OK;
}

void pm_cluster_plans_free(pm_cluster_plan *plans, int n) {
    for (int i = 0; plans && i < n; i++) pm_cluster_plan_free(&plans[i]);
    pm_free(plans);
}
