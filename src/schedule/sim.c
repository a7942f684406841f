/* sim.c: the simulator ("squeezing" in the papers): replays a schedule with
 * per-stage costs and returns when every pass starts and ends, each device's
 * span and busy time, the makespan, the bubble rate and the activation
 * memory timeline.
 *
 * The rule (shared/reference/schedules.md): each device runs its passes in
 * list order; a pass starts at max(device free, end of its dependency, plus c
 * if the dependency ran on another device) and lasts its cost. Times depend
 * only on the lists, never on the order this code visits devices, so running
 * each device until its next pass waits on one not yet run, parking it on
 * that pass, and waking it when the pass runs, is exact and linear in the
 * passes. If every device is parked while passes remain, no device can
 * start its next pass: deadlock.
 *
 * Invariants: done[] of a (stage, mb) is written once, by the first pass that
 * completes it; times are never negative; mem[] is the running sum of
 * deltas in list order, independent of times. */
#include <math.h>
#include <string.h>

#include "pipemem/pm_sched.h"

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
    pm_free(sim->wait);
    *sim = (pm_sim){0};
}

pm_status pm_sim_init(pm_sim *sim, const pm_sched *s, pm_err *err) {
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
     * and running memory; cursor: per device, the next pass to run. */
    sim->scratch = pm_malloc((2 * nk + 2 * np) * sizeof(double));
    sim->cursor = pm_malloc(np * sizeof(int64_t));
    /* wait: per F / B end the first parked device, then per device the
     * next parked one and the run stack. */
    sim->wait = pm_malloc((2 * nk + 2 * np) * sizeof(int32_t));
    if (!sim->start || !sim->end || !sim->mem || !sim->span || !sim->busy || !sim->peak ||
        !sim->peak_at || !sim->scratch || !sim->cursor || !sim->wait) {
        pm_sim_free(sim);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory simulating %zu passes", n);
    }
    return PM_OK;
}

/* Checks the ranges the simulator indexes with, so a malformed schedule is
 * an error, never an out-of-bounds access. */
static pm_status check_ranges(const pm_sched *s, const pm_cost *c, pm_err *err) {
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
    double *fend;   /* (S, m) end of F, NAN until it ran; bend follows it */
    double *bend;   /* (S, m) end of B or BW, NAN until it ran */
    int32_t *whead; /* (2, S, m) first device parked on that F / B end, -1 if none */
    int32_t *wnext; /* (p) next device parked on the same end */
    int32_t *run;   /* (p) devices ready to run (a stack) */
    int nrun;
} deps;

/* Earliest time pass ps on device d may start as far as its dependency
 * goes; NAN if the dependency has not run yet, and then *key is the index
 * (into fend, whose table bend follows) of the end it waits for. */
static double ready_time(const deps *g, const pm_pass *ps, int d, double c, int64_t *key) {
    const pm_sched *s = g->s;
    int dep_stage;
    int64_t base;
    switch (ps->kind) {
    case PM_PASS_F:
        if (ps->stage == 0) return 0;
        dep_stage = ps->stage - 1, base = 0;
        break;
    case PM_PASS_W: dep_stage = ps->stage, base = 1; break;
    default: /* B, BW */
        if (ps->stage == s->S - 1) dep_stage = ps->stage, base = 0;
        else dep_stage = ps->stage + 1, base = 1;
    }
    *key = base * s->S * s->m + (int64_t)dep_stage * s->m + ps->mb;
    double t = g->fend[*key];
    if (isnan(t)) return NAN;
    return t + (pm_sched_stage_device(s, dep_stage) != d ? c : 0);
}

/* Records the end of a pass the first time it is known, and wakes the
 * devices parked on it. */
static void finish(deps *g, int64_t key, double end) {
    if (!isnan(g->fend[key])) return;
    g->fend[key] = end;
    for (int32_t w = g->whead[key]; w >= 0; w = g->wnext[w]) g->run[g->nrun++] = w;
    g->whead[key] = -1;
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

/* Runs the passes of device d until one waits on a pass not yet run (then
 * d parks on it) or the list ends. */
static void advance(pm_sim *sim, deps *g, const pm_cost *c, int d, int64_t *pos,
                    double *free_at, double *cur) {
    const pm_sched *s = g->s;
    const pm_pass *ps = pm_sched_dev(s, d);
    int64_t base = (int64_t)d * s->cap, nk = (int64_t)s->S * s->m;
    for (; pos[d] < s->len[d]; pos[d]++) {
        const pm_pass *x = &ps[pos[d]];
        int64_t wait;
        double t = ready_time(g, x, d, c->c, &wait);
        if (isnan(t)) {
            g->wnext[d] = g->whead[wait];
            g->whead[wait] = d;
            return;
        }
        double st = t > free_at[d] ? t : free_at[d], dur = pm_cost_time(c, x);
        int64_t k = base + pos[d], key = (int64_t)x->stage * s->m + x->mb;
        sim->start[k] = st;
        sim->end[k] = free_at[d] = st + dur;
        sim->busy[d] += dur;
        if (x->kind == PM_PASS_F) finish(g, key, st + dur);
        if (x->kind == PM_PASS_B || x->kind == PM_PASS_BW) finish(g, nk + key, st + dur);
        *cur += pm_cost_mem(c, x);
        sim->mem[k] = *cur;
        if (*cur > sim->peak[d]) sim->peak[d] = *cur, sim->peak_at[d] = pos[d];
    }
}

static void summarize(pm_sim *sim, const pm_sched *s) {
    double busy = 0;
    sim->makespan = 0;
    for (int d = 0; d < s->p; d++) {
        int64_t base = (int64_t)d * s->cap, n = s->len[d];
        sim->span[d] = n ? sim->end[base + n - 1] - sim->start[base] : 0;
        if (sim->span[d] > sim->makespan) sim->makespan = sim->span[d];
        busy += sim->busy[d];
    }
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
    deps g = {s, out->scratch, out->scratch + nk, out->wait, out->wait + 2 * nk,
              out->wait + 2 * nk + np, 0};
    double *free_at = out->scratch + 2 * nk, *cur = free_at + np;
    int64_t *pos = out->cursor;
    for (size_t i = 0; i < nk; i++) g.fend[i] = g.bend[i] = NAN;
    for (size_t i = 0; i < 2 * nk; i++) g.whead[i] = -1;
    for (size_t d = 0; d < np; d++) {
        free_at[d] = cur[d] = 0, pos[d] = 0;
        out->span[d] = out->busy[d] = out->peak[d] = 0, out->peak_at[d] = 0;
    }
    out->M = M;
    /* Times depend only on the lists, so any order of running devices is
     * exact; each device is on the stack at most once (pushed at the start or
     * when woken, and only a popped device parks), so this is linear. */
    for (int d = s->p - 1; d >= 0; d--) g.run[g.nrun++] = d;
    while (g.nrun > 0) {
        int d = g.run[--g.nrun];
        advance(out, &g, c, d, pos, free_at, &cur[d]);
    }
    if ((st = deadlock(s, pos, err))) return st;
    summarize(out, s);
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
