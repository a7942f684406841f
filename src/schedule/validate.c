/* validate.c: proves a schedule complete, ordered and deadlock-free, and
 * optionally under a memory limit, or names the first pass that breaks it.
 *
 * The checks run in this order, each assuming the ones before passed:
 *   1. shape: every pass has a known kind, a stage in 0..S-1, a microbatch
 *      in 0..m-1, and a stage its device holds;
 *   2. completeness: each (stage, mb) has F once and either B and W once
 *      each or BW once (duplicates are named at their second occurrence);
 *   3. local order: a pass's dependencies that sit on its own device are
 *      listed before it (F(s-1) before F(s), F before B before W of a
 *      (stage, mb), B(s+1) before B(s));
 *   4. deadlock: devices advance through their lists in order, a pass
 *      running once its dependency under the simulation rule has run; if
 *      every device that has passes left is waiting, the schedule is stuck.
 *      Times do not matter for this, so no costs are needed. A worklist
 *      revisits a device only when a pass it may wait on completes, so the
 *      check is linear in the number of passes;
 *   5. memory: with costs and a limit, each device's running sum of memory
 *      deltas in list order stays at or below limit * M.
 *
 * Working memory: one table of pass positions indexed by (kind, stage, mb),
 * allocated once, sized 4*S*m, and O(p) worklist state. */
#include "pipemem/pm_sched.h"
#include "sched.h"
#include "util/alloc.h"
#include "work.h"

typedef struct {
    const pm_sched *s;
    int32_t *pos;  /* (4, S, m) index of the pass in its device's list, -1 if absent */
    uint8_t *done; /* (4, S, m) 1 once the pass has run in the deadlock replay */
    int64_t *next; /* (p) next pass of each device in the deadlock replay */
    int *stack;    /* (p) devices to revisit in the deadlock replay */
    uint8_t *queued; /* (p) 1 while the device is on the stack */
    int top;       /* entries on the stack */
} vstate;

static size_t slot(const pm_sched *s, int kind, int stage, int mb) {
    return ((size_t)kind * (size_t)s->S + (size_t)stage) * (size_t)s->m + (size_t)mb;
}

/* "2B3": stage, kind, microbatch (pm_pass_names, so BW prints as "2BW3"). */
static const char *pname(const pm_pass *ps, char buf[48]) {
    snprintf(buf, 48, "%d%s%d", ps->stage, pm_pass_names[ps->kind], ps->mb);
    return buf;
}

static pm_status check_shape(const pm_sched *s, pm_err *err) {
    char nb[48];
    for (int d = 0; d < s->p; d++) {
        const pm_pass *l = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            const pm_pass *ps = &l[i];
            if (ps->kind < 0 || ps->kind >= PM_PASS_COUNT)
                return pm_errf(err, PM_ERR_INVALID, "device %d, pass %lld: unknown pass kind %d",
                               d, (long long)i, (int)ps->kind);
            if (ps->stage < 0 || ps->stage >= s->S || ps->mb < 0 || ps->mb >= s->m)
                return pm_errf(err, PM_ERR_INVALID,
                               "device %d, pass %lld (%s): stage must be in 0..%d and "
                               "microbatch in 0..%d",
                               d, (long long)i, pname(ps, nb), s->S - 1, s->m - 1);
            int h = pm_sched_stage_device(s, ps->stage);
            if (h != d)
                return pm_errf(err, PM_ERR_INVALID,
                               "device %d, pass %lld (%s): stage %d is held by device %d, not "
                               "device %d",
                               d, (long long)i, pname(ps, nb), ps->stage, h, d);
        }
    }
    return PM_OK;
}

/* Fills pos; names duplicates and B/W mixed with BW at the later pass. */
static pm_status record(vstate *v, pm_err *err) {
    const pm_sched *s = v->s;
    char nb[48];
    for (int d = 0; d < s->p; d++) {
        const pm_pass *l = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            const pm_pass *ps = &l[i];
            int32_t *at = &v->pos[slot(s, ps->kind, ps->stage, ps->mb)];
            if (*at >= 0)
                return pm_errf(err, PM_ERR_INVALID,
                               "device %d, pass %lld (%s): duplicate, the same pass already ran "
                               "at pass %d",
                               d, (long long)i, pname(ps, nb), *at);
            int other = -1; /* a fused BW conflicts with a split B or W */
            if (ps->kind == PM_PASS_BW) {
                if (v->pos[slot(s, PM_PASS_B, ps->stage, ps->mb)] >= 0) other = PM_PASS_B;
                else if (v->pos[slot(s, PM_PASS_W, ps->stage, ps->mb)] >= 0) other = PM_PASS_W;
            } else if (ps->kind != PM_PASS_F &&
                       v->pos[slot(s, PM_PASS_BW, ps->stage, ps->mb)] >= 0) {
                other = PM_PASS_BW;
            }
            if (other >= 0)
                return pm_errf(err, PM_ERR_INVALID,
                               "device %d, pass %lld (%s): stage %d microbatch %d already has a "
                               "%s pass at pass %d; use either B and W or one fused BW",
                               d, (long long)i, pname(ps, nb), ps->stage, ps->mb,
                               pm_pass_names[other],
                               v->pos[slot(s, other, ps->stage, ps->mb)]);
            *at = (int32_t)i;
        }
    }
    return PM_OK;
}

static pm_status check_complete(const vstate *v, pm_err *err) {
    const pm_sched *s = v->s;
    for (int st = 0; st < s->S; st++)
        for (int j = 0; j < s->m; j++) {
            int32_t f = v->pos[slot(s, PM_PASS_F, st, j)];
            int32_t b = v->pos[slot(s, PM_PASS_B, st, j)];
            int32_t w = v->pos[slot(s, PM_PASS_W, st, j)];
            int32_t bw = v->pos[slot(s, PM_PASS_BW, st, j)];
            const char *miss = f < 0              ? "F"
                               : bw >= 0          ? NULL
                               : b < 0 && w < 0   ? "B or BW"
                               : b < 0            ? "B"
                               : w < 0            ? "W"
                                                  : NULL;
            if (miss)
                return pm_errf(err, PM_ERR_INVALID,
                               "stage %d microbatch %d has no %s pass (device %d)", st, j, miss,
                               pm_sched_stage_device(s, st));
        }
    return PM_OK;
}

/* The backward pass of (stage, mb) that exists: B or fused BW. */
static int back_kind(const vstate *v, int stage, int mb) {
    return v->pos[slot(v->s, PM_PASS_B, stage, mb)] >= 0 ? PM_PASS_B : PM_PASS_BW;
}

/* The one pass that ps waits for under the simulation rule; 0 if none. */
static int sim_dep(const vstate *v, const pm_pass *ps, pm_pass *dep) {
    const pm_sched *s = v->s;
    switch (ps->kind) {
    case PM_PASS_F:
        if (ps->stage == 0) return 0;
        *dep = (pm_pass){PM_PASS_F, ps->stage - 1, ps->mb};
        return 1;
    case PM_PASS_W: *dep = (pm_pass){PM_PASS_B, ps->stage, ps->mb}; return 1;
    default:
        if (ps->stage == s->S - 1) *dep = (pm_pass){PM_PASS_F, ps->stage, ps->mb};
        else *dep = (pm_pass){back_kind(v, ps->stage + 1, ps->mb), ps->stage + 1, ps->mb};
        return 1;
    }
}

/* Passes on device d that must come before ps in d's list. */
static int local_deps(const vstate *v, int d, const pm_pass *ps, pm_pass out[2]) {
    const pm_sched *s = v->s;
    int n = 0;
    if (ps->kind == PM_PASS_F) {
        if (ps->stage > 0 && pm_sched_stage_device(s, ps->stage - 1) == d)
            out[n++] = (pm_pass){PM_PASS_F, ps->stage - 1, ps->mb};
    } else if (ps->kind == PM_PASS_W) {
        out[n++] = (pm_pass){PM_PASS_B, ps->stage, ps->mb};
    } else {
        out[n++] = (pm_pass){PM_PASS_F, ps->stage, ps->mb};
        if (ps->stage + 1 < s->S && pm_sched_stage_device(s, ps->stage + 1) == d)
            out[n++] = (pm_pass){back_kind(v, ps->stage + 1, ps->mb), ps->stage + 1, ps->mb};
    }
    return n;
}

static pm_status check_order(const vstate *v, pm_err *err) {
    const pm_sched *s = v->s;
    char nb[48], db[48];
    for (int d = 0; d < s->p; d++) {
        const pm_pass *l = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            pm_pass deps[2];
            int n = local_deps(v, d, &l[i], deps);
            for (int k = 0; k < n; k++) {
                int32_t at = v->pos[slot(s, deps[k].kind, deps[k].stage, deps[k].mb)];
                if (at > i)
                    return pm_errf(err, PM_ERR_INVALID,
                                   "device %d, pass %lld (%s): runs before %s, which it needs "
                                   "and which comes later at pass %d on the same device",
                                   d, (long long)i, pname(&l[i], nb), pname(&deps[k], db), at);
            }
        }
    }
    return PM_OK;
}

/* The device whose next pass may wait on the pass just run (F(s) frees
 * F(s+1), B or BW(s) frees B or BW(s-1)); -1 if none. Dependencies on the
 * pass's own device are met by the device's own loop. */
static int woken_device(const pm_sched *s, const pm_pass *ps) {
    int t = ps->kind == PM_PASS_F ? ps->stage + 1 : ps->kind == PM_PASS_W ? -1 : ps->stage - 1;
    return t >= 0 && t < s->S ? pm_sched_stage_device(s, t) : -1;
}

static void wake(vstate *v, int d) {
    if (d < 0 || v->queued[d]) return;
    v->queued[d] = 1;
    v->stack[v->top++] = d;
}

/* Replays the lists in dependency order with a worklist: a device runs
 * until its next pass waits, and is revisited only when a pass it may wait
 * on completes. Each pass runs once and wakes at most one device, so the
 * replay is linear in the number of passes. Names the first stuck device
 * and the device it waits on. */
static pm_status check_deadlock(vstate *v, pm_err *err) {
    const pm_sched *s = v->s;
    int64_t tried = 0; /* passes tried (pm_sched_work) */
    for (int d = s->p - 1; d >= 0; d--) wake(v, d);
    while (v->top > 0) {
        int d = v->stack[--v->top];
        v->queued[d] = 0;
        const pm_pass *l = pm_sched_dev(s, d);
        while (v->next[d] < s->len[d]) {
            const pm_pass *ps = &l[v->next[d]];
            pm_pass dep;
            tried++;
            if (sim_dep(v, ps, &dep) && !v->done[slot(s, dep.kind, dep.stage, dep.mb)]) break;
            v->done[slot(s, ps->kind, ps->stage, ps->mb)] = 1;
            v->next[d]++;
            int o = woken_device(s, ps);
            if (o != d) wake(v, o);
        }
    }
    pm_sched_work_add(tried);
    for (int d = 0; d < s->p; d++) {
        if (v->next[d] >= s->len[d]) continue;
        char nb[48], db[48], ob[48], wb[48];
        const pm_pass *ps = &pm_sched_dev(s, d)[v->next[d]];
        pm_pass dep, odep;
        sim_dep(v, ps, &dep);
        int o = pm_sched_stage_device(s, dep.stage);
        const pm_pass *ops = &pm_sched_dev(s, o)[v->next[o]];
        PM_ASSERT(v->next[o] < s->len[o]); /* complete: the dep is still ahead on o */
        const char *owait = sim_dep(v, ops, &odep) ? pname(&odep, wb) : "nothing";
        return pm_errf(err, PM_ERR_DEADLOCK,
                       "deadlock: device %d is stuck at pass %lld (%s) waiting for %s on device "
                       "%d, which is stuck at pass %lld (%s) waiting for %s",
                       d, (long long)v->next[d], pname(ps, nb), pname(&dep, db), o,
                       (long long)v->next[o], pname(ops, ob), owait);
    }
    return PM_OK;
}

static pm_status check_memory(const pm_sched *s, const pm_cost *c, double limit, pm_err *err) {
    double M = pm_cost_M(c);
    if (!(M > 0))
        return pm_errf(err, PM_ERR_ARG,
                       "a memory limit needs a positive forward memory delta (M = %g)", M);
    double cap = limit * M * (1 + PM_PEAK_TOL);
    char nb[48];
    for (int d = 0; d < s->p; d++) {
        const pm_pass *l = pm_sched_dev(s, d);
        double cur = 0;
        for (int64_t i = 0; i < s->len[d]; i++) {
            double hi = cur + pm_cost_rise(c, &l[i]);
            cur += pm_cost_mem(c, &l[i]);
            if (hi > cap)
                return pm_errf(err, PM_ERR_MEMLIMIT,
                               "device %d reaches %.2f M at pass %lld (%s), over the limit %.2f M",
                               d, hi / M, (long long)i, pname(&l[i], nb), limit);
        }
    }
    return PM_OK;
}

static pm_status check_header(const pm_sched *s, const pm_cost *c, pm_err *err) {
    if (!s || s->p < 1 || s->m < 1 || s->v < 1 || s->S != s->p * s->v || !s->len ||
        (!s->pass && s->cap > 0))
        return pm_errf(err, PM_ERR_ARG, "not an initialised schedule (p, m, chunks or lists)");
    for (int d = 0; d < s->p; d++)
        if (s->len[d] < 0 || s->len[d] > s->cap)
            return pm_errf(err, PM_ERR_INVALID, "device %d lists %lld passes, capacity %lld", d,
                           (long long)s->len[d], (long long)s->cap);
    if (c && c->S != s->S)
        return pm_errf(err, PM_ERR_ARG, "costs cover %d stages but the schedule has %d", c->S,
                       s->S);
    return PM_OK;
}

pm_status pm_sched_validate(const pm_sched *s, const pm_cost *c, double mem_limit,
                            pm_err *err) {
    pm_status st = check_header(s, c, err);
    if (st) return st;
    if ((st = check_shape(s, err))) return st;
    size_t n;
    if (!pm_size_mul((size_t)4 * (size_t)s->S, (size_t)s->m, &n))
        return pm_errf(err, PM_ERR_NOMEM, "schedule too large to validate");
    vstate v = {.s = s};
    v.pos = pm_malloc(n * sizeof *v.pos);
    v.done = pm_calloc(n, 1);
    v.next = pm_calloc((size_t)s->p, sizeof *v.next);
    v.stack = pm_malloc((size_t)s->p * sizeof *v.stack);
    v.queued = pm_calloc((size_t)s->p, 1);
    if (!v.pos || !v.done || !v.next || !v.stack || !v.queued) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory validating %zu passes", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) v.pos[i] = -1;
    if ((st = record(&v, err))) goto done;
    if ((st = check_complete(&v, err))) goto done;
    if ((st = check_order(&v, err))) goto done;
    if ((st = check_deadlock(&v, err))) goto done;
    if (mem_limit > 0 && c) st = check_memory(s, c, mem_limit, err);
done:
    pm_free(v.pos);
    pm_free(v.done);
    pm_free(v.next);
    pm_free(v.stack);
    pm_free(v.queued);
    return st;
}
