/* sim.c: the simulator ("squeezing" in the papers): replays a schedule with
 * per-stage costs and returns when every pass starts and ends, each device's
 * span and busy time, the makespan, the bubble rate and the activation
 * memory timeline.
 *
 * The rule (shared/reference/schedules.md): each device runs its passes in
 * list order; a pass starts at max(device free, end of its dependency, plus c
 * if the dependency ran on another device) and lasts its cost. Times depend
 * only on the lists, never on the order this code visits devices, so a
 * worklist is exact: a device runs as far as it can, and is revisited only
 * when a pass it may wait on completes on another device (F(s) wakes the
 * device of stage s+1, B or BW(s) the device of stage s-1). Each pass runs
 * once and wakes at most one device, so a replay is linear in the number of
 * passes. If the worklist empties while passes remain, no device can start
 * its next pass: deadlock.
 *
 * With costs that overlap F and B (pm_cost.fb_overlap), a marked pair (an F
 * then a BW of another microbatch, pm_sched_paired) starts when both its
 * passes may, and both end max(tF, tBW) + fb_frac min(tF, tBW) later; the
 * device's busy time counts that once, so the bubble is then the share of
 * device time spent idle. Memory still moves as the two passes in order.
 *
 * Invariants: done[] of a (stage, mb) is written once, by the first pass that
 * completes it; times are never negative; mem[] is the running sum of
 * deltas in list order, independent of times. */
#include <math.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "sim.h"
#include "sched.h"
#include "work.h"

void pm_sim_free(pm_sim *sim) {
    if (!sim) return;
    pm_free(sim->start);
    pm_free(sim->end);
    pm_free(sim->mem);
    pm_free(sim->span);
    pm_free(sim->busy);
    pm_free(sim->peak);
    pm_free(sim->peak_at);
    pm_free(sim->scratch);
    pm_free(sim->cursor);
    pm_free(sim->red_start);
    pm_free(sim->red_end);
    *sim = (pm_sim){0};
}

pm_status pm_sim_init(pm_sim *sim, const pm_sched *s, pm_err *err) {
    *sim = (pm_sim){0};
    if (!s) return pm_errf(err, PM_ERR_ARG, "the schedule (s) is NULL");
    size_t n = (size_t)s->p * (size_t)s->cap, np = (size_t)s->p;
    size_t nk = (size_t)s->S * (size_t)s->m;
    *sim = (pm_sim){.p = s->p, .cap = s->cap, .S = s->S, .m = s->m};
    sim->start = pm_malloc(n * sizeof(double));
    sim->end = pm_malloc(n * sizeof(double));
    sim->mem = pm_malloc(n * sizeof(double));
    sim->span = pm_calloc(np, sizeof(double));
    sim->busy = pm_calloc(np, sizeof(double));
    sim->peak = pm_calloc(np, sizeof(double));
    sim->peak_at = pm_calloc(np, sizeof(int64_t));
    /* scratch: F and B ends per (stage, mb), then per device its free time
     * and running memory; cursor: per device, the next pass to run, then the
     * worklist of devices, then each device's on-list flag. */
    sim->scratch = pm_malloc((2 * nk + 2 * np) * sizeof(double));
    sim->cursor = pm_malloc(3 * np * sizeof(int64_t));
    if (!sim->start || !sim->end || !sim->mem || !sim->span || !sim->busy || !sim->peak ||
        !sim->peak_at || !sim->scratch || !sim->cursor) {
        pm_sim_free(sim);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory simulating %zu passes", n);
    }
    return PM_OK;
}

/* Checks the ranges the simulator indexes with, so a malformed schedule is
 * an error, never an out-of-bounds access. */
static pm_status check_ranges(const pm_sched *s, const pm_cost *c, pm_err *err) {
    if (!c) return pm_errf(err, PM_ERR_ARG, "the costs (c) are NULL");
    if (c->S != s->S)
        return pm_errf(err, PM_ERR_ARG, "cost table has %d stages, schedule has %d", c->S, s->S);
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            if (ps[i].kind < 0 || ps[i].kind >= PM_PASS_COUNT || ps[i].stage < 0 ||
                ps[i].stage >= s->S || ps[i].mb < 0 || ps[i].mb >= s->m)
                return pm_errf(err, PM_ERR_INVALID,
                               "device %d, pass %lld: stage %d / microbatch %d / kind %d out of "
                               "range (S = %d, m = %d)",
                               d, (long long)i, ps[i].stage, ps[i].mb, ps[i].kind, s->S, s->m);
        }
    }
    return PM_OK;
}

typedef struct {
    const pm_sched *s;
    double *fend; /* (S, m) end of F, NAN until it ran */
    double *bend; /* (S, m) end of B or BW, NAN until it ran */
    int64_t *stack;  /* (p) devices to revisit */
    int64_t *queued; /* (p) 1 while the device is on the stack */
    int64_t top;     /* entries on the stack */
    int64_t tried;   /* passes tried (pm_sched_work) */
} deps;

static void wake(deps *g, int d) {
    if (d < 0 || g->queued[d]) return;
    g->queued[d] = 1;
    g->stack[g->top++] = d;
}

/* The device whose next pass may wait on x, which just ran on d; -1 if
 * none other than d (sim.h: the resumed replay wakes the same one). */
int pm_sim_woken_device(const pm_sched *s, const pm_pass *x, int d) {
    int t = x->kind == PM_PASS_F ? x->stage + 1 : x->kind == PM_PASS_W ? -1 : x->stage - 1;
    int o = t >= 0 && t < s->S ? pm_sched_stage_device(s, t) : -1;
    return o == d ? -1 : o;
}

/* Earliest time pass ps on device d may start as far as its dependency
 * goes; NAN if the dependency has not run yet. */
static double ready_time(const deps *g, const pm_pass *ps, int d, double c) {
    const pm_sched *s = g->s;
    pm_pass_kind k;
    int dep_stage = pm_sim_dep(s->S, ps->kind, ps->stage, &k);
    if (dep_stage < 0) return 0;
    const double *done = k == PM_PASS_F ? g->fend : g->bend;
    double t = done[(int64_t)dep_stage * s->m + ps->mb];
    if (isnan(t)) return NAN;
    return t + (pm_sched_stage_device(s, dep_stage) != d ? c : 0);
}

static const char *waits_for(const pm_pass *ps, int S) {
    switch (ps->kind) {
    case PM_PASS_F: return "the forward of the stage before";
    case PM_PASS_W: return "its own B";
    default: return ps->stage == S - 1 ? "its own forward" : "the backward of the stage after";
    }
}

static pm_status deadlock(const pm_sched *s, const int64_t *pos, pm_err *err) {
    for (int d = 0; d < s->p; d++) {
        if (pos[d] >= s->len[d]) continue;
        const pm_pass *ps = pm_sched_dev(s, d) + pos[d];
        return pm_errf(err, PM_ERR_DEADLOCK,
                       "deadlock: device %d is stuck at pass %lld (%d%s%d: stage %d, microbatch "
                       "%d), waiting for %s, which never runs first",
                       d, (long long)pos[d], ps->stage, pm_pass_names[ps->kind], ps->mb,
                       ps->stage, ps->mb, waits_for(ps, s->S));
    }
    return PM_OK;
}

/* Records that pass i of device d ran from st to end: its times, the end
 * its dependents wait for, the device's memory, and wakes the device that
 * may wait on it. */
static void record(pm_sim *sim, deps *g, const pm_cost *c, int d, int64_t i, double st,
                   double end, double *cur) {
    const pm_sched *s = g->s;
    const pm_pass *x = pm_sched_dev(s, d) + i;
    int64_t k = (int64_t)d * s->cap + i, key = (int64_t)x->stage * s->m + x->mb;
    sim->start[k] = st;
    sim->end[k] = end;
    if (x->kind == PM_PASS_F && isnan(g->fend[key])) g->fend[key] = end;
    if ((x->kind == PM_PASS_B || x->kind == PM_PASS_BW) && isnan(g->bend[key])) g->bend[key] = end;
    double hi = *cur + pm_cost_rise(c, x); /* the most it holds while running */
    *cur += pm_cost_mem(c, x);
    sim->mem[k] = *cur;
    if (hi > sim->peak[d]) sim->peak[d] = hi, sim->peak_at[d] = i;
    wake(g, pm_sim_woken_device(s, x, d));
}

/* Runs as many passes of device d as are ready, waking the devices that
 * may wait on them. */
static void advance(pm_sim *sim, deps *g, const pm_cost *c, int d, int64_t *pos,
                    double *free_at, double *cur) {
    const pm_sched *s = g->s;
    const pm_pass *ps = pm_sched_dev(s, d);
    for (; pos[d] < s->len[d]; pos[d]++) {
        const pm_pass *x = &ps[pos[d]];
        g->tried++;
        double t = ready_time(g, x, d, c->c), dur = pm_cost_time(c, x);
        if (isnan(t)) break;
        int pair = c->fb_overlap && pm_sched_paired(s, d, pos[d]);
        if (pair) { /* x and the BW after it run as one, when both may start */
            double ty = ready_time(g, x + 1, d, c->c), dy = pm_cost_time(c, x + 1);
            if (isnan(ty)) break;
            t = ty > t ? ty : t;
            dur = (dur > dy ? dur : dy) + c->fb_frac * (dur < dy ? dur : dy);
        }
        double st = t > free_at[d] ? t : free_at[d];
        free_at[d] = st + dur;
        sim->busy[d] += dur;
        record(sim, g, c, d, pos[d], st, st + dur, cur);
        if (pair) record(sim, g, c, d, ++pos[d], st, st + dur, cur);
    }
}

/* The bubble is the share of device time not spent on the model's own
 * work: a recomputed backward's rerun of its forward is overhead, not work,
 * so every schedule of one shape (with or without recomputation) compares
 * on one scale. */
static void summarize(pm_sim *sim, const pm_sched *s, const pm_cost *c) {
    double busy = 0;
    sim->makespan = 0;
    for (int d = 0; d < s->p; d++) {
        int64_t base = (int64_t)d * s->cap, n = s->len[d];
        sim->span[d] = n ? sim->end[base + n - 1] - sim->start[base] : 0;
        if (sim->span[d] > sim->makespan) sim->makespan = sim->span[d];
        busy += sim->busy[d];
    }
    for (int k = 0; k < c->S; k++)
        if (c->st[k].rec) busy -= s->m * c->st[k].tf; /* each microbatch's rerun */
    sim->bubble = sim->makespan > 0 ? 1.0 - busy / (s->p * sim->makespan) : 0;
}

pm_status pm_sim_replay(pm_sim *out, const pm_sched *s, const pm_cost *c, pm_err *err) {
    PM_ASSERT(out->p == s->p && out->cap == s->cap && out->S == s->S && out->m == s->m);
    pm_status st = check_ranges(s, c, err);
    if (st) return st;
    double M = pm_cost_M(c);
    if (!(M > 0))
        return pm_errf(err, PM_ERR_ARG, "the forward memory deltas sum to %g; they must be > 0", M);
    size_t nk = (size_t)s->S * (size_t)s->m, np = (size_t)s->p;
    int64_t *pos = out->cursor;
    deps g = {s, out->scratch, out->scratch + nk, pos + np, pos + 2 * np, 0, 0};
    double *free_at = out->scratch + 2 * nk, *cur = free_at + np;
    for (size_t i = 0; i < nk; i++) g.fend[i] = g.bend[i] = NAN;
    for (size_t d = 0; d < np; d++) {
        free_at[d] = cur[d] = 0, pos[d] = 0, g.queued[d] = 0;
        out->span[d] = out->busy[d] = out->peak[d] = 0, out->peak_at[d] = 0;
    }
    out->M = M;
    for (int d = s->p - 1; d >= 0; d--) wake(&g, d);
    while (g.top > 0) {
        int d = (int)g.stack[--g.top];
        g.queued[d] = 0;
        advance(out, &g, c, d, pos, free_at, &cur[d]);
    }
    pm_sched_work_add(g.tried);
    if ((st = deadlock(s, pos, err))) return st;
    summarize(out, s, c);
    return PM_OK;
}

pm_status pm_sim_run(pm_sim *out, const pm_sched *s, const pm_cost *c, pm_err *err) {
    pm_status st = pm_sim_init(out, s, err);
    if (!st && (st = pm_sim_replay(out, s, c, err))) pm_sim_free(out);
    return st;
}

double pm_sim_peak_max_x(const pm_sim *sim) {
    double mx = 0;
    for (int d = 0; d < sim->p; d++)
        if (sim->peak[d] > mx) mx = sim->peak[d];
    return mx / sim->M;
}
