/* construct.c: the generic building-block constructor (the papers' four
 * steps, shared/reference/schedules.md "Construction"):
 *
 *   1. the block: one microbatch's passes with slot offsets;
 *   2. repeat it every T slots for m microbatches (microbatch k's pass at
 *      offset + k*T); each device's order is its passes sorted by slot;
 *   3. squeeze: that order replayed with real costs (pm_sim_run does the
 *      timing; a schedule is only the per-device order);
 *   4. move warm-up and cool-down passes earlier into idle slots when every
 *      device stays at or below its steady-state peak (the peak of the plain
 *      repetition), then keep the result only if the squeezed makespan does
 *      not grow (verified by simulating).
 *
 * Step 4 works in slot units, in two rounds, the way the papers' reference
 * generators do: round 1 visits every pass in slot order and moves a
 * warm-up or cool-down pass to the earliest free slot of its device after
 * its dependencies end (in slots), if adding its memory delta to the
 * device's memory profile over the skipped slots keeps the peak; round 2
 * then lifts the W passes out, moves cool-down F/B passes into the slots
 * they held (B is on the critical path, W is not), and puts every W back in
 * the first free slot after its B, in the order the B passes ran. Each
 * round's result is a candidate. A second sequence follows the authors'
 * generator more closely (issue 9): every W first moved to its earliest
 * slot (in the warm-up no earlier W holds it back, and a late W would let a
 * forward take its slot and leave memory one higher), round 1 on that, then
 * round 2 counting memory as the authors do, with the lifted W passes
 * refilled by the same rule for every tentative move (refill_peak), so a B
 * no longer takes a slot whose W the cap needed. Every candidate is kept
 * only under the caps of the plain repetition; the shortest squeezed
 * makespan wins, ties going to the plainer candidate, so no sequence can
 * make a kind worse. V-Half now equals the authors' bubble (p=4 m=12
 * 0.0649, p=8 m=24 0.1056, and 0.1456 with unequal costs).
 *
 * Invariants: slot[] holds each pass's start slot; occ[] and prof[] are
 * rebuilt from slot[] by layout() whenever a round starts; a pass occupies
 * dur consecutive slots of its device and no two passes share a slot; every
 * pass starts at or after its dependencies (same rule as pm_sched.h, plus
 * microbatch order within a (stage, kind)) end, so each candidate is
 * complete, ordered and deadlock-free. Cost: O(passes + p*L) per round plus
 * the slots scanned for the moved passes, which are only those of the
 * warm-up and cool-down; no pass is ever compared with all others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"

#define MAX_CELLS ((int64_t)1 << 25) /* p * L slot cells (12 bytes each) */

typedef struct {
    const pm_block *b;
    int p, m, v, S, T, nb; /* devices, microbatches, chunks, stages, interval, block passes */
    int64_t N;             /* passes = m * nb; pass id = k * nb + block index */
    int64_t L;             /* slots per device (room for W to trail at the end) */
    int64_t warm_end;      /* passes first placed before this slot are warm-up */
    int64_t cool_start;    /* ... after this slot, cool-down */
    int *tab;              /* (S * 4) block pass index by (stage, kind), -1 if none */
    int *bstage;           /* (nb) stage of each block pass */
    double *bdelta;        /* (nb) memory delta of each block pass */
    int64_t *slot;         /* (N) current start slot of each pass */
    int32_t *occ;          /* (p * L) pass id starting or running in each slot, -1 free */
    double *prof;          /* (p * L) memory after the passes started at or before a slot */
    double *cap;           /* (p) peak of the plain repetition, per device */
    double *smax;          /* (L) scratch: suffix maxima of a profile stretch */
    int64_t *wq;           /* (L) scratch: W passes waiting to be placed, in B order */
    double eps;            /* tolerance of memory comparisons */
} cons;

static inline const pm_block_pass *bp(const cons *c, int64_t id) { return &c->b->pass[id % c->nb]; }
static inline int64_t orig_slot(const cons *c, int64_t id) {
    return bp(c, id)->off + (id / c->nb) * (int64_t)c->T;
}
static inline int64_t pid(const cons *c, int stage, int kind, int64_t k) {
    int i = c->tab[stage * PM_PASS_COUNT + kind];
    return i < 0 ? -1 : k * c->nb + i;
}

static void cons_free(cons *c) {
    pm_free(c->tab);
    pm_free(c->bstage);
    pm_free(c->bdelta);
    pm_free(c->slot);
    pm_free(c->occ);
    pm_free(c->prof);
    pm_free(c->cap);
    pm_free(c->smax);
    pm_free(c->wq);
    *c = (cons){0};
}

static pm_status cons_init(cons *c, const pm_block *b, int m, pm_mem mem, pm_err *err) {
    *c = (cons){.b = b, .p = b->p, .m = m, .v = b->v, .S = b->p * b->v, .T = b->T, .nb = b->n};
    int64_t maxend = 0, maxoff = 0, minoff = INT64_MAX;
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->off + x->dur > maxend) maxend = x->off + x->dur;
        if (x->kind != PM_PASS_W && x->off > maxoff) maxoff = x->off;
        if (x->off < minoff) minoff = x->off;
    }
    c->N = (int64_t)m * b->n;
    c->L = (int64_t)(m - 1) * b->T + maxend + (int64_t)m * b->v + b->T;
    c->warm_end = maxoff;
    c->cool_start = (int64_t)(m - 1) * b->T + minoff;
    c->eps = 1e-9 * (fabs(mem.f) + fabs(mem.b) + fabs(mem.w));
    if ((int64_t)c->p * c->L > MAX_CELLS)
        return pm_errf(err, PM_ERR_ARG,
                       "block too long to repeat: %d devices x %lld slots; lower m or the interval",
                       c->p, (long long)c->L);
    c->tab = pm_malloc((size_t)c->S * PM_PASS_COUNT * sizeof *c->tab);
    c->bstage = pm_malloc((size_t)b->n * sizeof *c->bstage);
    c->bdelta = pm_malloc((size_t)b->n * sizeof *c->bdelta);
    c->slot = pm_malloc((size_t)c->N * sizeof *c->slot);
    c->occ = pm_malloc((size_t)(c->p * c->L) * sizeof *c->occ);
    c->prof = pm_malloc((size_t)(c->p * c->L) * sizeof *c->prof);
    c->cap = pm_calloc((size_t)c->p, sizeof *c->cap);
    c->smax = pm_malloc((size_t)c->L * sizeof *c->smax);
    c->wq = pm_malloc((size_t)c->L * sizeof *c->wq);
    if (!c->tab || !c->bstage || !c->bdelta || !c->slot || !c->occ || !c->prof || !c->cap ||
        !c->smax || !c->wq)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory repeating a block %d times", m);
    pm_block_index(b, c->tab);
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        double d = x->kind == PM_PASS_F   ? mem.f
                   : x->kind == PM_PASS_B ? mem.b
                   : x->kind == PM_PASS_W ? mem.w
                                          : mem.b + mem.w;
        c->bstage[i] = pm_block_stage(b, x->dev, x->chunk);
        c->bdelta[i] = d / b->v;
    }
    for (int64_t id = 0; id < c->N; id++) c->slot[id] = orig_slot(c, id);
    return PM_OK;
}

/* Rebuilds occ and prof from slot[]. */
static void layout(cons *c) {
    for (int64_t i = 0; i < c->p * c->L; i++) c->occ[i] = -1, c->prof[i] = 0;
    for (int64_t k = 0, id = 0; k < c->m; k++)
        for (int i = 0; i < c->nb; i++, id++) {
            const pm_block_pass *x = &c->b->pass[i];
            int64_t at = (int64_t)x->dev * c->L + c->slot[id];
            for (int j = 0; j < x->dur; j++) c->occ[at + j] = (int32_t)id;
            c->prof[at] += c->bdelta[i];
        }
    for (int d = 0; d < c->p; d++) {
        double *pr = c->prof + (int64_t)d * c->L;
        for (int64_t t = 1; t < c->L; t++) pr[t] += pr[t - 1];
    }
}

static double dev_peak(const cons *c, int d) {
    const double *pr = c->prof + (int64_t)d * c->L;
    double mx = 0;
    for (int64_t t = 0; t < c->L; t++)
        if (pr[t] > mx) mx = pr[t];
    return mx;
}

/* Earliest slot pass id may start at: after its dependencies end. */
static int64_t earliest(const cons *c, int64_t id) {
    const pm_block_pass *x = bp(c, id);
    int st = c->bstage[id % c->nb];
    int64_t k = id / c->nb, dep[3] = {-1, -1, -1}, e = 0;
    switch (x->kind) {
    case PM_PASS_F:
        if (st > 0) dep[0] = pid(c, st - 1, PM_PASS_F, k);
        break;
    case PM_PASS_W: dep[0] = pid(c, st, PM_PASS_B, k); break;
    default:
        dep[0] = pid(c, st, PM_PASS_F, k);
        if (st < c->S - 1) {
            dep[1] = pid(c, st + 1, PM_PASS_B, k);
            if (dep[1] < 0) dep[1] = pid(c, st + 1, PM_PASS_BW, k);
        }
    }
    if (k > 0) dep[2] = id - c->nb; /* same (stage, kind), previous microbatch */
    for (int j = 0; j < 3; j++)
        if (dep[j] >= 0) {
            int64_t end = c->slot[dep[j]] + bp(c, dep[j])->dur;
            if (end > e) e = end;
        }
    return e;
}

static int movable(const cons *c, int64_t id) {
    int64_t t = orig_slot(c, id);
    return t < c->warm_end || t > c->cool_start;
}

/* Tries to move pass id (at slot t on device d) to the earliest slot in
 * [earliest, t) that is free for its whole duration and where adding its
 * memory delta over the skipped slots keeps the device under its cap. */
static void try_move(cons *c, int64_t id) {
    const pm_block_pass *x = bp(c, id);
    int64_t t = c->slot[id], e = earliest(c, id), base = (int64_t)x->dev * c->L;
    if (e >= t) return;
    int32_t *o = c->occ + base;
    double *pr = c->prof + base, delta = c->bdelta[id % c->nb];
    if (delta > 0) { /* smax[j] = max(pr[j .. t-1]) */
        double mx = -INFINITY;
        for (int64_t j = t - 1; j >= e; j--) c->smax[j] = mx = pr[j] > mx ? pr[j] : mx;
    }
    for (int j = 0; j < x->dur; j++) o[t + j] = -1;
    for (int64_t s = e; s < t; s++) {
        int free_run = 1;
        for (int j = 0; j < x->dur && free_run; j++) free_run = o[s + j] < 0;
        if (!free_run) continue;
        if (delta > 0 && c->smax[s] + delta > c->cap[x->dev] + c->eps) continue;
        for (int64_t j = s; j < t; j++) pr[j] += delta;
        t = s;
        break;
    }
    for (int j = 0; j < x->dur; j++) o[t + j] = (int32_t)id;
    c->slot[id] = t;
}

/* Visits every pass in slot order (a pass only ever moves earlier, so no
 * pass is seen twice) and tries to move the movable ones; skip_w leaves W
 * passes alone, cool_only leaves the warm-up alone. */
static void reorder(cons *c, int skip_w, int cool_only) {
    /* Where the first movable pass sits now: the steady slots before it
     * hold nothing to visit. */
    int64_t from = c->L;
    for (int64_t id = 0; id < c->N; id++)
        if (movable(c, id) && (!cool_only || orig_slot(c, id) >= c->warm_end) &&
            c->slot[id] < from)
            from = c->slot[id];
    for (int64_t t = from; t < c->L; t++) {
        /* Round 1 runs first, when every pass still sits at its original
         * slot, so the steady slots hold only passes that never move. */
        if (!cool_only && t >= c->warm_end && t <= c->cool_start) continue;
        for (int d = 0; d < c->p; d++) {
            int32_t id = c->occ[(int64_t)d * c->L + t];
            if (id < 0 || c->slot[id] != t || !movable(c, id)) continue;
            if (skip_w && bp(c, id)->kind == PM_PASS_W) continue;
            if (cool_only && orig_slot(c, id) < c->warm_end) continue;
            try_move(c, id);
        }
    }
}

/* Round 2's W handling: lift every W out of the occupancy, then put each
 * back, in the order the B passes run on its device, at the first free
 * slot at or after both its B's end and the previous W's slot. */
static void lift_w(cons *c) {
    for (int64_t i = 0; i < c->p * c->L; i++)
        if (c->occ[i] >= 0 && bp(c, c->occ[i])->kind == PM_PASS_W) c->occ[i] = -1;
}

static void refill_w(cons *c) {
    for (int d = 0; d < c->p; d++) {
        int32_t *o = c->occ + (int64_t)d * c->L;
        int64_t fill = 0;
        for (int64_t t = 0; t < c->L; t++) {
            int32_t id = o[t];
            if (id < 0 || c->slot[id] != t || bp(c, id)->kind != PM_PASS_B) continue;
            int64_t w = pid(c, c->bstage[id % c->nb], PM_PASS_W, id / c->nb);
            int64_t at = t + bp(c, id)->dur;
            if (at < fill) at = fill;
            while (at < c->L && o[at] >= 0) at++;
            PM_ASSERT(at < c->L);
            o[at] = (int32_t)w;
            c->slot[w] = at;
            fill = at + 1;
        }
    }
}

/* Device d's peak with its W passes lifted out of occ and placed by
 * refill_w's rule (each at the first free slot at or after its B's end and
 * after the previous W, in the order the B passes run): the authors'
 * round-2 memory count, where each free slot with a W waiting frees it. */
static double refill_peak(cons *c, int d) {
    const int32_t *o = c->occ + (int64_t)d * c->L;
    int64_t head = 0, tail = 0, fill = 0;
    double mem = 0, peak = 0;
    for (int64_t t = 0; t < c->L; t++) {
        int32_t id = o[t];
        if (id >= 0 && c->slot[id] == t) {
            mem += c->bdelta[id % c->nb];
            if (bp(c, id)->kind == PM_PASS_B)
                c->wq[tail++] = pid(c, c->bstage[id % c->nb], PM_PASS_W, id / c->nb);
        } else if (id < 0 && head < tail && t >= fill) {
            int64_t w = c->wq[head], b = pid(c, c->bstage[w % c->nb], PM_PASS_B, w / c->nb);
            if (c->slot[b] + bp(c, b)->dur <= t) {
                mem += c->bdelta[w % c->nb];
                head++, fill = t + 1;
            }
        }
        if (mem > peak) peak = mem;
    }
    return peak;
}

/* Round 2 done as the authors count it: with the W passes lifted out, a
 * cool-down F or B moves to an earlier free slot only if its device, with
 * the W passes refilled, stays within its cap (a move into a slot a W
 * would have used delays that W's release). At most a few slots are tried
 * per pass, each check linear in the device's slots. */
static void round2_exact(cons *c) {
    lift_w(c);
    for (int64_t t = c->warm_end; t < c->L; t++)
        for (int d = 0; d < c->p; d++) {
            int32_t *o = c->occ + (int64_t)d * c->L;
            int32_t id = o[t];
            if (id < 0 || c->slot[id] != t || !movable(c, id) ||
                bp(c, id)->kind == PM_PASS_W || orig_slot(c, id) < c->warm_end)
                continue;
            const pm_block_pass *x = bp(c, id);
            int64_t e = earliest(c, id);
            for (int j = 0; j < x->dur; j++) o[t + j] = -1;
            int64_t at = t;
            for (int64_t s = e, tries = 0; s < t && tries < 16; s++) {
                int free_run = 1;
                for (int j = 0; j < x->dur && free_run; j++) free_run = o[s + j] < 0;
                if (!free_run) continue;
                tries++;
                for (int j = 0; j < x->dur; j++) o[s + j] = id;
                c->slot[id] = s;
                if (refill_peak(c, d) <= c->cap[d] + c->eps) {
                    at = s;
                    break;
                }
                for (int j = 0; j < x->dur; j++) o[s + j] = -1;
            }
            for (int j = 0; j < x->dur; j++) o[at + j] = id;
            c->slot[id] = at;
        }
    refill_w(c);
}

/* Back to the plain repetition, every W then moved to its earliest slot
 * (refill_w's rule): in the warm-up no earlier W holds it back. */
static void reset_w_early(cons *c) {
    for (int64_t id = 0; id < c->N; id++) c->slot[id] = orig_slot(c, id);
    layout(c);
    lift_w(c);
    refill_w(c);
    layout(c);
}

/* The per-device order of the current slots as a schedule. */
static pm_status to_sched(const cons *c, pm_sched *s, const char *kind, pm_err *err) {
    pm_status st = pm_sched_init(s, kind, c->b->place, c->p, c->m, c->v, err);
    if (st) return st;
    for (int d = 0; d < c->p; d++) {
        const int32_t *o = c->occ + (int64_t)d * c->L;
        for (int64_t t = 0; t < c->L; t++)
            if (o[t] >= 0 && c->slot[o[t]] == t)
                pm_sched_push(s, d, (pm_pass_kind)bp(c, o[t])->kind, c->bstage[o[t] % c->nb],
                              (int)(o[t] / c->nb));
    }
    return PM_OK;
}

typedef struct {
    pm_sched s;      /* candidate schedule */
    double makespan; /* squeezed with the real costs */
    int ok;          /* built, simulated and under the caps */
} cand;

/* Builds and squeezes the current slots as candidate x; a candidate that
 * breaks a cap is kept out of the choice. */
static pm_status make_cand(cons *c, cand *x, const char *kind, pm_costs t, pm_mem mem,
                           pm_err *err) {
    *x = (cand){0};
    layout(c);
    for (int d = 0; d < c->p; d++)
        if (dev_peak(c, d) > c->cap[d] + c->eps) return PM_OK;
    pm_status st = to_sched(c, &x->s, kind, err);
    if (st) return st;
    pm_cost cost;
    pm_sim sim;
    if ((st = pm_cost_init_uniform(&cost, &x->s, t, mem, err))) return st;
    st = pm_sim_run(&sim, &x->s, &cost, err);
    pm_cost_free(&cost);
    if (st) return st;
    x->makespan = sim.makespan;
    x->ok = 1;
    pm_sim_free(&sim);
    return PM_OK;
}

pm_status pm_sched_from_block(pm_sched *s, const pm_block *b, const pm_sched_req *req,
                              const char *kind, pm_err *err) {
    *s = (pm_sched){0};
    pm_block_info info;
    pm_mem mem = req->mem.f > 0 ? req->mem : PM_MEM_DEFAULT;
    pm_costs t = req->t.f > 0 ? req->t : PM_COSTS_DEFAULT;
    pm_sched_req q = *req;
    q.p = b->p, q.t = t;
    pm_status st = pm_sched_check_range(PM_TIER_FIXED, kind, b->p, req->m, b->v, err);
    if (!st) st = pm_sched_check_costs(&q, err);
    if (st) return st;
    st = pm_block_analyze(b, mem, &info, err);
    if (st) return st;
    int legal = info.legal, bd = info.bad_dev, br = info.bad_residue;
    pm_block_info_free(&info);
    if (!legal)
        return pm_errf(err, PM_ERR_INVALID,
                       "illegal block: device %d has two passes on residue %d mod %d", bd, br,
                       b->T);
    if (req->p && req->p != b->p)
        return pm_errf(err, PM_ERR_ARG, "the block is for %d devices, not %d", b->p, req->p);
    if (req->v && req->v != b->v)
        return pm_errf(err, PM_ERR_ARG, "the block has %d chunks per device, not %d", b->v,
                       req->v);
    if (req->m < 1 || req->m > (1 << 20))
        return pm_errf(err, PM_ERR_ARG, "m must be 1..%d (got %d)", 1 << 20, req->m);
    cons c;
    enum { NCAND = 6 };
    cand x[NCAND];
    memset(x, 0, sizeof x);
    if ((st = cons_init(&c, b, req->m, mem, err))) goto done;
    layout(&c);
    for (int d = 0; d < c.p; d++) c.cap[d] = dev_peak(&c, d);
    /* candidate 0: the plain repetition */
    if ((st = make_cand(&c, &x[0], kind, t, mem, err))) goto done;
    /* candidate 1: round 1, every kind, warm-up and cool-down */
    reorder(&c, 0, 0);
    if ((st = make_cand(&c, &x[1], kind, t, mem, err))) goto done;
    /* candidate 2: round 2, W lifted out, cool-down F/B first, W refilled */
    lift_w(&c);
    reorder(&c, 1, 1);
    refill_w(&c);
    if ((st = make_cand(&c, &x[2], kind, t, mem, err))) goto done;
    /* the authors' order of things: every W at its earliest slot first,
     * round 1 on that, then round 2 with the W passes counted as they will
     * be refilled (each candidate kept only under the caps, so none can
     * make the result worse) */
    reset_w_early(&c);
    if ((st = make_cand(&c, &x[3], kind, t, mem, err))) goto done;
    reorder(&c, 0, 0);
    if ((st = make_cand(&c, &x[4], kind, t, mem, err))) goto done;
    round2_exact(&c);
    if ((st = make_cand(&c, &x[5], kind, t, mem, err))) goto done;
    int best = 0;
    for (int i = 1; i < NCAND; i++)
        if (x[i].ok && x[i].makespan < x[best].makespan * (1 - 1e-12)) best = i;
    *s = x[best].s;
    x[best].s = (pm_sched){0};
done:
    for (int i = 0; i < NCAND; i++) pm_sched_free(&x[i].s);
    cons_free(&c);
    return st;
}
