/* construct.c: the generic building-block constructor (the papers' four
 * steps, shared/reference/schedules.md "Construction"):
 *
 *   1. the block: one microbatch's passes with slot offsets;
 *   2. repeat it every T slots for m microbatches (microbatch k's pass at
 *      offset + k*T); each device's order is its passes sorted by slot;
 *   3. squeeze: that order replayed with real costs (the simulator's
 *      timing, pm_sim_replay; a schedule is only the per-device order);
 *   4. move warm-up and cool-down passes earlier into idle slots when every
 *      device stays at or below its steady-state peak (the peak of the plain
 *      repetition), then keep the result only if the squeezed makespan does
 *      not grow (verified by simulating).
 *
 * Step 4 works in slot units, in two rounds, the way the papers' reference
 * generators do: round 1 visits every pass in slot order and moves a
 * warm-up or cool-down pass to the earliest free slot of its device after
 * its dependencies end (in slots), if adding its memory delta to the
 * device's memory profile over the skipped slots keeps the cap; round 2
 * then lifts the W passes out, moves cool-down F/B passes into the slots
 * they held (B is on the critical path, W is not), and puts every W back in
 * the first free slot after its B, in the order the B passes ran. That
 * sequence gives three candidates (plain, round 1, round 2). Then the
 * authors' sequence (issue 9), twice: every W first at its earliest slot,
 * round 1, a squeeze in slot units (no pass moves later; round 2 then sees
 * the cool-down's real free slots: odd p), round 2 counting memory as the
 * authors do, with the lifted W passes refilled for every tentative move
 * (refill_peak), and once more from round 1's result with round 2's
 * cool-down found as the authors' round 2 finds it, on the squeezed slots
 * (held_end: at m close to p it also moves passes whose original slot
 * is before the warm-up's end); the second time round 1 may move passes of every phase
 * (the authors' 1F1B-V: moving the warm-up frees slots the first steady
 * passes can take). The caps are each device's peak in the plain
 * repetition; then, if that changes any cap, both authors' sequences run
 * again with every device capped at the largest device's peak (what the
 * authors do) but never above the device's own memory-theorem bound, so
 * the largest peak never rises and every device keeps its bound. The
 * shortest squeezed makespan wins, ties going to the earlier (plainer,
 * less memory) candidate, so no sequence can make a kind worse. On a grid
 * (v-min, v-half, 1f1b-v; p = 2..16, 20, 24, 32; m = p..6p; three cost
 * sets) these candidates reach the best of a wider set that also took
 * candidates after each step and placed the final W passes by chunk on
 * squeezed slots (the authors' last step, which changed nothing there).
 *
 * Invariants: slot[] holds each pass's start slot; occ[] and prof[] are
 * rebuilt from slot[] by layout() whenever a round starts; a pass occupies
 * dur consecutive slots of its device and no two passes share a slot; every
 * pass starts at or after its dependencies (same rule as pm_sched.h, plus
 * microbatch order within a (stage, kind)) end, so each candidate is
 * complete, ordered and deadlock-free. Since every pass also starts in a
 * later slot than its dependencies end, a candidate's squeezed makespan is
 * computed in one sweep in slot order (replay_slots: the simulator's rule
 * and arithmetic, so the same double; pm_construct_reference replays each
 * candidate with pm_sim_replay instead, for tests), and only a candidate
 * that wins becomes a schedule. Cost: O(passes + p*L) per round and
 * candidate, plus, per pass tried in round 1, about BK + (slots it could
 * skip) / BK (block bounds and free counts), and per pass tried in round
 * 2, the slots from a saved state to its device's last pass; no pass is
 * ever compared with all others. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"
#include "sim.h"
#include "sched.h"

#define MAX_CELLS ((int64_t)1 << 25) /* p * L slot cells (12 bytes each) */

#define BK 64       /* slots per block of round 1's search structures */
#define CK_EVERY 64 /* slots between the saved states of round 2's memory count */

/* Round 2's count on one device, at some slot: its memory, the largest
 * so far, the W queue (head and tail into the device's wq row) and the
 * first slot the next W may take. */
typedef struct {
    double mem, peak;
    int64_t head, tail, fill;
} rstate;

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
    int32_t *slot1;        /* (N) the authors' sequence: slot[] after round 1's squeeze */
    int32_t *occ;          /* (p * L) pass id starting or running in each slot, -1 free */
    double *prof;          /* (p * L) memory after the passes started at or before a slot */
    double *cap;           /* (p) per device: its peak in the plain repetition, or relaxed */
    int64_t nblk;          /* blocks of BK slots per device */
    double *bmax;          /* (p * nblk) round 1: upper bound of prof in the block */
    double *badd;          /* (p * nblk) round 1: add pending on the whole block */
    int32_t *bfree;        /* (p * nblk) round 1: free slots in the block */
    int64_t *free_at;      /* (p) scratch: slot each device becomes free (squeeze) */
    double eps;            /* tolerance of memory comparisons */
    int all_phases;        /* 1: round 1 may move every pass, not only warm-up and cool-down */
    int64_t held_end;      /* round 2: -1, or it moves only passes after this key (held_key) */
    /* Round 2's memory count (refill_peak), resumable: */
    int32_t *wq;           /* (p * wcap) per device, W passes (block index) in their B order */
    int64_t *wq_at;        /* (p * wcap) ... and the slot each one's B ends */
    int64_t wcap;          /* B passes a device runs (m times its B passes in the block) */
    rstate *ck;            /* (p * nck) per device, the count's state before slot j * CK_EVERY */
    int64_t nck;           /* states per device */
    int64_t *ck_n;         /* (p) states still valid: those before any change since */
    int64_t *last;         /* (p) no pass of the device starts or runs after this slot */
    int w_frees;           /* every W delta <= 0: past a device's last pass nothing can rise */
} cons;

/* A pass id's block index and microbatch. Every pass holds its own slot
 * cell, so ids are below p * L <= MAX_CELLS and 32-bit division (several
 * times cheaper than 64-bit, and these run once per cell visited) is exact. */
static inline int bix(const cons *c, int64_t id) { return (int)((uint32_t)id % (uint32_t)c->nb); }
static inline int64_t mbk(const cons *c, int64_t id) { return (uint32_t)id / (uint32_t)c->nb; }
static inline const pm_block_pass *bp(const cons *c, int64_t id) { return &c->b->pass[bix(c, id)]; }
static inline int64_t orig_slot(const cons *c, int64_t id) {
    return bp(c, id)->off + mbk(c, id) * (int64_t)c->T;
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
    pm_free(c->slot1);
    pm_free(c->occ);
    pm_free(c->prof);
    pm_free(c->cap);
    pm_free(c->bmax);
    pm_free(c->badd);
    pm_free(c->bfree);
    pm_free(c->wq);
    pm_free(c->wq_at);
    pm_free(c->free_at);
    pm_free(c->ck);
    pm_free(c->ck_n);
    pm_free(c->last);
    *c = (cons){0};
}

static pm_status cons_init(cons *c, const pm_block *b, int m, pm_mem mem, pm_err *err) {
    *c = (cons){.b = b, .p = b->p, .m = m, .v = b->v, .S = b->p * b->v, .T = b->T, .nb = b->n,
                .held_end = -1};
    int64_t maxend = 0, maxoff = 0, minoff = INT64_MAX, wdur = 1;
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->off + x->dur > maxend) maxend = x->off + x->dur;
        if (x->kind == PM_PASS_W && x->dur > wdur) wdur = x->dur;
        if (x->kind != PM_PASS_W && x->off > maxoff) maxoff = x->off;
        if (x->off < minoff) minoff = x->off;
    }
    c->N = (int64_t)m * b->n;
    /* room for every W to trail the last other pass when refilled */
    c->L = (int64_t)(m - 1) * b->T + maxend + (int64_t)m * b->v * wdur + b->T;
    c->warm_end = maxoff;
    c->cool_start = (int64_t)(m - 1) * b->T + minoff;
    c->eps = 1e-9 * (fabs(mem.f) + fabs(mem.b) + fabs(mem.w));
    if ((int64_t)c->p * c->L > MAX_CELLS || c->N > MAX_CELLS)
        return pm_errf(err, PM_ERR_ARG,
                       "block too long to repeat: %d devices x %lld slots; lower m or the interval",
                       c->p, (long long)c->L);
    c->tab = pm_malloc((size_t)c->S * PM_PASS_COUNT * sizeof *c->tab);
    c->bstage = pm_malloc((size_t)b->n * sizeof *c->bstage);
    c->bdelta = pm_malloc((size_t)b->n * sizeof *c->bdelta);
    c->slot = pm_malloc((size_t)c->N * sizeof *c->slot);
    c->slot1 = pm_malloc((size_t)c->N * sizeof *c->slot1);
    c->occ = pm_malloc((size_t)(c->p * c->L) * sizeof *c->occ);
    c->prof = pm_malloc((size_t)(c->p * c->L) * sizeof *c->prof);
    c->cap = pm_calloc((size_t)c->p, sizeof *c->cap);
    c->nblk = (c->L + BK - 1) / BK;
    c->bmax = pm_malloc((size_t)(c->p * c->nblk) * sizeof *c->bmax);
    c->badd = pm_malloc((size_t)(c->p * c->nblk) * sizeof *c->badd);
    c->bfree = pm_malloc((size_t)(c->p * c->nblk) * sizeof *c->bfree);
    int64_t nbd = 1; /* most B passes a device has in the block */
    for (int d = 0; d < c->p; d++) {
        int64_t n = 0;
        for (int i = 0; i < b->n; i++) n += b->pass[i].dev == d && b->pass[i].kind == PM_PASS_B;
        if (n > nbd) nbd = n;
    }
    c->wcap = nbd * m;
    c->nck = c->L / CK_EVERY + 1;
    c->wq = pm_malloc((size_t)(c->p * c->wcap) * sizeof *c->wq);
    c->wq_at = pm_malloc((size_t)(c->p * c->wcap) * sizeof *c->wq_at);
    c->free_at = pm_malloc((size_t)c->p * sizeof *c->free_at);
    c->ck = pm_malloc((size_t)(c->p * c->nck) * sizeof *c->ck);
    c->ck_n = pm_malloc((size_t)c->p * sizeof *c->ck_n);
    c->last = pm_malloc((size_t)c->p * sizeof *c->last);
    if (!c->tab || !c->bstage || !c->bdelta || !c->slot || !c->slot1 || !c->occ || !c->prof ||
        !c->cap || !c->bmax || !c->badd || !c->bfree || !c->wq || !c->wq_at || !c->free_at ||
        !c->ck || !c->ck_n || !c->last)
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
    c->w_frees = mem.w <= 0;
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
    /* dependencies by block index (dep) and microbatch (dk): no division */
    int i = bix(c, id), st = c->bstage[i], dep[3] = {-1, -1, -1};
    int64_t k = mbk(c, id), dk[3] = {k, k, k - 1}, e = 0;
    const int *tb = c->tab;
    switch (c->b->pass[i].kind) {
    case PM_PASS_F:
        if (st > 0) dep[0] = tb[(st - 1) * PM_PASS_COUNT + PM_PASS_F];
        break;
    case PM_PASS_W: dep[0] = tb[st * PM_PASS_COUNT + PM_PASS_B]; break;
    default:
        dep[0] = tb[st * PM_PASS_COUNT + PM_PASS_F];
        if (st < c->S - 1) {
            dep[1] = tb[(st + 1) * PM_PASS_COUNT + PM_PASS_B];
            if (dep[1] < 0) dep[1] = tb[(st + 1) * PM_PASS_COUNT + PM_PASS_BW];
        }
    }
    if (k > 0) dep[2] = i; /* same (stage, kind), previous microbatch */
    for (int j = 0; j < 3; j++)
        if (dep[j] >= 0) {
            int64_t end = c->slot[dk[j] * c->nb + dep[j]] + c->b->pass[dep[j]].dur;
            if (end > e) e = end;
        }
    return e;
}

/* A pass's place in the authors' visiting order: by slot, then device. */
static inline int64_t held_key(const cons *c, int64_t id) {
    return c->slot[id] * c->p + bp(c, id)->dev;
}

/* The key that ends the phase the authors' rounds hold in place, on the
 * current slots: visiting passes in (slot, device) order, the phase starts
 * at the first B (or BW) of stage 0 and ends at the first F of chunk 0 of
 * the last microbatch visited after it; INT64_MAX if there is none (the
 * phase then lasts to the end). Their round 2 runs on round 1's squeezed
 * slots and moves what it visits after this key there; when m is close to
 * p that is many more passes than those whose original slot was in the
 * cool-down (the last F of chunk 0 comes before stage 0's first B in the
 * plain repetition, and the cool-down starts where the warm-up ends). */
static int64_t held_end(const cons *c) {
    int64_t lo = INT64_MAX, hi = INT64_MAX;
    for (int64_t id = 0; id < c->N; id++) {
        const pm_block_pass *x = bp(c, id);
        if (c->bstage[bix(c, id)] == 0 && (x->kind == PM_PASS_B || x->kind == PM_PASS_BW) &&
            held_key(c, id) < lo)
            lo = held_key(c, id);
    }
    for (int64_t id = 0; id < c->N; id++) {
        const pm_block_pass *x = bp(c, id);
        int64_t k = held_key(c, id);
        if (x->kind == PM_PASS_F && x->chunk == 0 && mbk(c, id) == c->m - 1 && k > lo && k < hi)
            hi = k;
    }
    return hi;
}

static int movable(const cons *c, int64_t id) {
    int64_t t = orig_slot(c, id);
    return c->all_phases || t < c->warm_end || t > c->cool_start;
}

/* Are the n slots from t on free? (occ rows have room past every pass.) */
static int run_free(const int32_t *o, int64_t t, int n, int64_t L) {
    if (t + n > L) return 0;
    for (int j = 0; j < n; j++)
        if (o[t + j] >= 0) return 0;
    return 1;
}

/* Round 1's search structures, per device, over blocks of BK slots: an
 * upper bound of the profile in each block (without the block's pending
 * add), the add pending on the whole block, and the free slots in it. With
 * them a move costs about BK + (slots skipped) / BK instead of the slots
 * skipped; reorder() builds them from prof and occ and folds the pending
 * adds back into prof when it ends. */
static void blocks_build(cons *c) {
    for (int d = 0; d < c->p; d++)
        for (int64_t k = 0; k < c->nblk; k++) {
            int64_t at = (int64_t)d * c->L, lo = k * BK, hi = lo + BK < c->L ? lo + BK : c->L;
            double mx = -INFINITY;
            int32_t nf = 0;
            for (int64_t t = lo; t < hi; t++) {
                if (c->prof[at + t] > mx) mx = c->prof[at + t];
                nf += c->occ[at + t] < 0;
            }
            c->bmax[d * c->nblk + k] = mx;
            c->badd[d * c->nblk + k] = 0;
            c->bfree[d * c->nblk + k] = nf;
        }
}

static void blocks_fold(cons *c) {
    for (int d = 0; d < c->p; d++)
        for (int64_t t = 0; t < c->L; t++)
            c->prof[(int64_t)d * c->L + t] += c->badd[d * c->nblk + t / BK];
}

/* The last slot j in [lo, hi) of device d whose memory exceeds lim, or -1. */
static int64_t last_above(cons *c, int d, int64_t lo, int64_t hi, double lim) {
    const double *pr = c->prof + (int64_t)d * c->L;
    double *bm = c->bmax + d * c->nblk;
    const double *ba = c->badd + d * c->nblk;
    for (int64_t j = hi - 1; j >= lo;) {
        int64_t k = j / BK, start = k * BK;
        if (start >= lo && bm[k] + ba[k] <= lim) { /* nothing in the block */
            j = start - 1;
            continue;
        }
        int64_t stop = start > lo ? start : lo;
        for (; j >= stop; j--)
            if (pr[j] + ba[k] > lim) return j;
        if (stop == start && start + BK <= hi) { /* the whole block: tighten its bound */
            double mx = -INFINITY;
            for (int64_t i = start; i < start + BK; i++) mx = pr[i] > mx ? pr[i] : mx;
            bm[k] = mx;
        }
    }
    return -1;
}

/* The first slot s in [lo, hi) where dur slots of device d are free, or -1. */
static int64_t first_free(const cons *c, int d, int64_t lo, int64_t hi, int dur) {
    const int32_t *o = c->occ + (int64_t)d * c->L, *bf = c->bfree + d * c->nblk;
    for (int64_t s = lo; s < hi;) {
        if (s % BK == 0 && bf[s / BK] == 0) {
            s += BK;
            continue;
        }
        if (run_free(o, s, dur, c->L)) return s;
        s++;
    }
    return -1;
}

/* Adds delta to device d's memory over [lo, hi): whole blocks through
 * their pending add, the slots of a partial block one by one. A block's
 * bound only has to stay above its slots (last_above skips by it and
 * tightens it when it scans), so a partial block's bound rises by delta
 * (rounding is monotonic: a slot at or below it stays at or below it)
 * rather than to the largest slot, and a delta below zero leaves it. */
static void add_range(cons *c, int d, int64_t lo, int64_t hi, double delta) {
    double *pr = c->prof + (int64_t)d * c->L, *bm = c->bmax + d * c->nblk;
    double *ba = c->badd + d * c->nblk;
    for (int64_t t = lo; t < hi;) {
        int64_t k = t / BK, next = (k + 1) * BK;
        if (t == k * BK && next <= hi) {
            ba[k] += delta;
            t = next;
            continue;
        }
        int64_t stop = next < hi ? next : hi;
        for (int64_t j = t; j < stop; j++) pr[j] += delta;
        if (delta > 0) bm[k] += delta;
        t = stop;
    }
}

static void set_occ(cons *c, int d, int64_t t, int dur, int32_t id) {
    for (int j = 0; j < dur; j++) {
        c->occ[(int64_t)d * c->L + t + j] = id;
        c->bfree[d * c->nblk + (t + j) / BK] += id < 0 ? 1 : -1;
    }
}

/* Tries to move pass id (at slot t on device d) to the earliest slot in
 * [earliest, t) that is free for its whole duration and where adding its
 * memory delta over the skipped slots keeps the device under its cap. */
static void try_move(cons *c, int64_t id) {
    const pm_block_pass *x = bp(c, id);
    int64_t t = c->slot[id], e = earliest(c, id);
    if (e >= t) return;
    int d = x->dev;
    double delta = c->bdelta[bix(c, id)];
    set_occ(c, d, t, x->dur, -1);
    if (delta > 0) { /* not before the last slot the delta would lift over the cap */
        int64_t j = last_above(c, d, e, t, c->cap[d] + c->eps - delta);
        if (j >= 0) e = j + 1;
    }
    int64_t s = first_free(c, d, e, t, x->dur);
    if (s >= 0) {
        if (delta != 0) add_range(c, d, s, t, delta); /* a zero add changes no bound */
        t = s;
    }
    set_occ(c, d, t, x->dur, (int32_t)id);
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
    blocks_build(c);
    for (int64_t t = from; t < c->L; t++) {
        /* Round 1 runs first, when every pass still sits at its original
         * slot, so the steady slots hold only passes that never move. */
        if (!cool_only && !c->all_phases && t >= c->warm_end && t <= c->cool_start) continue;
        for (int d = 0; d < c->p; d++) {
            int32_t id = c->occ[(int64_t)d * c->L + t];
            if (id < 0 || c->slot[id] != t || !movable(c, id)) continue;
            if (skip_w && bp(c, id)->kind == PM_PASS_W) continue;
            if (cool_only && orig_slot(c, id) < c->warm_end) continue;
            try_move(c, id);
        }
    }
    blocks_fold(c);
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
            int64_t w = pid(c, c->bstage[bix(c, id)], PM_PASS_W, mbk(c, id));
            int64_t at = t + bp(c, id)->dur;
            int wd = bp(c, w)->dur;
            if (at < fill) at = fill;
            while (at < c->L && !run_free(o, at, wd, c->L)) at++;
            PM_ASSERT(at < c->L);
            for (int j = 0; j < wd; j++) o[at + j] = (int32_t)w;
            c->slot[w] = at;
            fill = at + 1;
        }
    }
}

/* Device d's peak with its W passes lifted out of occ and placed by
 * refill_w's rule (each at the first free slot at or after its B's end and
 * after the previous W, in the order the B passes run): the authors'
 * round-2 memory count, where each free slot with a W waiting frees it.
 * The slots before `from` must not have changed since the count's saved
 * states were last made valid (ck_n): it resumes from the last state at or
 * before `from`, saves the states it passes on the way to `from`, and stops
 * after the device's last pass (only W passes follow, and they free).
 * A queued B's end is taken when it is queued: the saved states hold only
 * passes before `from`, and those do not move while the states are valid. */
static double refill_peak(cons *c, int d, int64_t from) {
    const int32_t *o = c->occ + (int64_t)d * c->L;
    int32_t *q = c->wq + (int64_t)d * c->wcap;
    int64_t *at = c->wq_at + (int64_t)d * c->wcap;
    rstate *ck = c->ck + (int64_t)d * c->nck;
    int64_t j = from / CK_EVERY;
    if (j > c->ck_n[d] - 1) j = c->ck_n[d] - 1;
    rstate r = ck[j];
    int64_t end = c->w_frees ? c->last[d] + 1 : c->L;
    for (int64_t t = j * CK_EVERY; t < end; t++) {
        if (t % CK_EVERY == 0 && t <= from && t / CK_EVERY == c->ck_n[d])
            ck[c->ck_n[d]++] = r;
        int32_t id = o[t];
        if (id >= 0 && c->slot[id] == t) {
            int i = bix(c, id);
            r.mem += c->bdelta[i];
            if (c->b->pass[i].kind == PM_PASS_B) { /* its W waits for slot t + dur */
                q[r.tail] = c->tab[c->bstage[i] * PM_PASS_COUNT + PM_PASS_W];
                at[r.tail++] = t + c->b->pass[i].dur;
            }
        } else if (id < 0 && r.head < r.tail && t >= r.fill && at[r.head] <= t) {
            r.mem += c->bdelta[q[r.head]];
            r.head++, r.fill = t + 1;
        }
        if (r.mem > r.peak) r.peak = r.mem;
    }
    return r.peak;
}

/* Round 2 done as the authors count it: with the W passes lifted out, a
 * cool-down F or B moves to an earlier free slot only if its device, with
 * the W passes refilled, stays within its cap (a move into a slot a W
 * would have used delays that W's release). The cool-down: the passes
 * whose original slot was in it, or, with held_end set (>= 0), the passes
 * after that key on the current slots. At most a few slots are tried
 * per pass; each check resumes from a saved state at most CK_EVERY slots
 * before the tried slot, so it costs the slots from there to the device's
 * last pass (the cool-down), not the whole device. */
static void round2_exact(cons *c) {
    lift_w(c);
    for (int d = 0; d < c->p; d++) {
        const int32_t *o = c->occ + (int64_t)d * c->L;
        c->last[d] = 0;
        for (int64_t t = 0; t < c->L; t++)
            if (o[t] >= 0) c->last[d] = t;
        c->ck_n[d] = 1;
        c->ck[(int64_t)d * c->nck] = (rstate){0};
    }
    int held = c->held_end >= 0;
    for (int64_t t = held ? c->held_end / c->p : c->warm_end; t < c->L; t++)
        for (int d = 0; d < c->p; d++) {
            int32_t *o = c->occ + (int64_t)d * c->L;
            int32_t id = o[t];
            if (id < 0 || c->slot[id] != t || bp(c, id)->kind == PM_PASS_W) continue;
            if (held ? held_key(c, id) <= c->held_end
                     : !movable(c, id) || orig_slot(c, id) < c->warm_end)
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
                if (refill_peak(c, d, s) <= c->cap[d] + c->eps) {
                    at = s;
                    break;
                }
                for (int j = 0; j < x->dur; j++) o[s + j] = -1;
            }
            for (int j = 0; j < x->dur; j++) o[at + j] = id;
            c->slot[id] = at;
            /* the states before `at` still hold; later ones may not */
            if (at < t && c->ck_n[d] > at / CK_EVERY + 1) c->ck_n[d] = at / CK_EVERY + 1;
        }
    refill_w(c);
}

/* Back to the plain repetition; w_early: every W then moved to its
 * earliest slot (refill_w's rule). */
static void restart(cons *c, int w_early) {
    for (int64_t id = 0; id < c->N; id++) c->slot[id] = orig_slot(c, id);
    layout(c);
    if (!w_early) return;
    lift_w(c);
    refill_w(c);
    layout(c);
}

/* Squeeze in slot units (every pass lasts its dur slots, no latency): each
 * pass, in slot order, starts at the later of its device's previous pass's
 * end and its dependencies' ends. Slot order is a topological order (a
 * dependency ends at or before its dependant's slot), so one sweep does it,
 * and no pass moves later. occ and prof are rebuilt. */
static void squeeze_slots(cons *c) {
    for (int d = 0; d < c->p; d++) c->free_at[d] = 0;
    for (int64_t t = 0; t < c->L; t++)
        for (int d = 0; d < c->p; d++) {
            const int32_t *o = c->occ + (int64_t)d * c->L;
            int32_t id = o[t];
            if (id < 0 || (t > 0 && o[t - 1] == id)) continue; /* free, or not its first slot */
            int64_t e = earliest(c, id);
            if (e < c->free_at[d]) e = c->free_at[d];
            PM_ASSERT(e <= t);
            c->slot[id] = e;
            c->free_at[d] = e + bp(c, id)->dur;
        }
    layout(c);
}

pm_status pm_block_repeat_peak(const pm_block *b, int m, pm_mem mem, double *peak,
                               pm_err *err) {
    cons c;
    *peak = 0;
    pm_status st = cons_init(&c, b, m, mem, err);
    if (!st) {
        layout(&c);
        for (int d = 0; d < c.p; d++) {
            double pk = dev_peak(&c, d);
            if (pk > *peak) *peak = pk;
        }
    }
    cons_free(&c);
    return st;
}

/* The per-device order of the current slots, written over s's lists
 * (every candidate holds every pass, so nothing of an earlier one stays). */
static void to_sched(const cons *c, pm_sched *s) {
    for (int d = 0; d < c->p; d++) {
        const int32_t *o = c->occ + (int64_t)d * c->L;
        s->len[d] = 0;
        for (int64_t t = 0; t < c->L; t++)
            if (o[t] >= 0 && c->slot[o[t]] == t)
                pm_sched_push(s, d, (pm_pass_kind)bp(c, o[t])->kind, c->bstage[bix(c, o[t])],
                              (int)mbk(c, o[t]));
    }
}

int pm_construct_reference = 0;

/* The choice among candidates: the best so far, and what replaying a
 * candidate needs, made once for all of them (one shape, one set of
 * costs). All owned. */
typedef struct {
    pm_sched best;    /* the best candidate so far */
    double makespan;  /* its squeezed makespan */
    int ok;           /* a candidate under the caps was found */
    pm_cost cost;     /* the real costs, as pm_cost_init_uniform gives them */
    double *bdur;     /* (nb) each block pass's time, pm_cost_time of the cost table */
    int *sdev;        /* (S) device of each stage, pm_sched_stage_device */
    double *end;      /* (N) replay: end of each pass */
    double *free_at;  /* (p) replay: end of the device's latest pass */
    double *first;    /* (p) replay: start of the device's first pass */
    double *mem;      /* (p) replay: the device's memory after its latest pass */
    double *peak;     /* (p) replay: the device's peak so far (from 0, as dev_peak) */
    /* pm_construct_reference only: every candidate as a schedule, replayed
     * by pm_sim_replay */
    pm_sched x;
    pm_sim sim;
} choice;

static void choice_free(choice *ch) {
    pm_sched_free(&ch->best);
    pm_cost_free(&ch->cost);
    pm_free(ch->bdur);
    pm_free(ch->sdev);
    pm_free(ch->end);
    pm_free(ch->free_at);
    pm_free(ch->first);
    pm_free(ch->mem);
    pm_free(ch->peak);
    pm_sched_free(&ch->x);
    pm_sim_free(&ch->sim);
    *ch = (choice){0};
}

/* On error, everything is freed. */
static pm_status choice_init(choice *ch, const cons *c, const char *kind, pm_costs t, pm_mem mem,
                             pm_err *err) {
    *ch = (choice){0};
    pm_status st = pm_sched_init(&ch->best, kind, c->b->place, c->p, c->m, c->v, err);
    if (!st) st = pm_cost_init_uniform(&ch->cost, &ch->best, t, mem, err);
    if (!st && pm_construct_reference) {
        st = pm_sched_init(&ch->x, kind, c->b->place, c->p, c->m, c->v, err);
        if (!st) st = pm_sim_init(&ch->sim, &ch->x, err);
    }
    if (st) goto fail;
    ch->bdur = pm_malloc((size_t)c->nb * sizeof *ch->bdur);
    ch->sdev = pm_malloc((size_t)c->S * sizeof *ch->sdev);
    ch->end = pm_malloc((size_t)c->N * sizeof *ch->end);
    ch->free_at = pm_malloc((size_t)c->p * sizeof *ch->free_at);
    ch->first = pm_malloc((size_t)c->p * sizeof *ch->first);
    ch->mem = pm_malloc((size_t)c->p * sizeof *ch->mem);
    ch->peak = pm_malloc((size_t)c->p * sizeof *ch->peak);
    if (!ch->bdur || !ch->sdev || !ch->end || !ch->free_at || !ch->first || !ch->mem ||
        !ch->peak) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory replaying %lld passes", (long long)c->N);
        goto fail;
    }
    for (int i = 0; i < c->nb; i++) {
        const pm_block_pass *x = &c->b->pass[i];
        pm_pass ps = {x->kind, c->bstage[i], 0};
        ch->bdur[i] = pm_cost_time(&ch->cost, &ps);
    }
    for (int k = 0; k < c->S; k++) ch->sdev[k] = pm_sched_stage_device(&ch->best, k);
    return PM_OK;
fail:
    choice_free(ch);
    return st;
}

/* The block pass whose end block pass i waits for in the simulator, in
 * the same microbatch (pm_sim_dep), or -1. */
static int sim_dep(const cons *c, int i) {
    pm_pass_kind k;
    int st = pm_sim_dep(c->S, c->b->pass[i].kind, c->bstage[i], &k);
    const int *tb = c->tab;
    if (st < 0) return -1;
    if (k == PM_PASS_F) return tb[st * PM_PASS_COUNT + PM_PASS_F];
    int dep = tb[st * PM_PASS_COUNT + PM_PASS_B];
    return dep >= 0 ? dep : tb[st * PM_PASS_COUNT + PM_PASS_BW];
}

/* The makespan pm_sim_replay gives the current slots' per-device order,
 * without building the schedule: the same arithmetic on the same values
 * (a pass starts at the later of its device's free time and its
 * dependency's end, plus the latency across devices; a device's span is
 * its last end minus its first start), so the same double. The simulator
 * is exact in any visiting order and every pass starts in a later slot
 * than its dependency ends, so one sweep in slot order replaces its
 * worklist, and per-device lists, its start/end/memory records and its
 * allocations are not needed. */
static double replay_slots(const cons *c, choice *ch) {
    for (int d = 0; d < c->p; d++) {
        ch->free_at[d] = ch->mem[d] = ch->peak[d] = 0;
        ch->first[d] = -1;
    }
    for (int64_t t = 0; t < c->L; t++)
        for (int d = 0; d < c->p; d++) {
            int32_t id = c->occ[(int64_t)d * c->L + t];
            if (id < 0 || c->slot[id] != t) continue;
            int i = bix(c, id), di = sim_dep(c, i);
            double r = 0;
            if (di >= 0)
                r = ch->end[mbk(c, id) * c->nb + di] +
                    (ch->sdev[c->bstage[di]] != d ? ch->cost.c : 0);
            double st = r > ch->free_at[d] ? r : ch->free_at[d];
            if (ch->first[d] < 0) ch->first[d] = st;
            ch->end[id] = ch->free_at[d] = st + ch->bdur[i];
            ch->mem[d] += c->bdelta[i];
            if (ch->mem[d] > ch->peak[d]) ch->peak[d] = ch->mem[d];
        }
    double makespan = 0;
    for (int d = 0; d < c->p; d++) {
        double span = ch->first[d] >= 0 ? ch->free_at[d] - ch->first[d] : 0;
        if (span > makespan) makespan = span;
    }
    return makespan;
}

/* Offers the current slots (occ and slot[]; prof is neither read nor
 * rebuilt): kept if under the caps and strictly shorter than the best so
 * far (ties go to the earlier, plainer candidate); a candidate that breaks
 * a cap is kept out of the choice. The replay's running memory adds the
 * same deltas in the same order as layout()'s prefix sums, so its peaks
 * are dev_peak's. Only a candidate that wins becomes a schedule. */
static pm_status offer(cons *c, choice *ch, pm_err *err) {
    double makespan = replay_slots(c, ch);
    for (int d = 0; d < c->p; d++)
        if (ch->peak[d] > c->cap[d] + c->eps) return PM_OK;
    if (pm_construct_reference) {
        to_sched(c, &ch->x);
        pm_status st = pm_sim_replay(&ch->sim, &ch->x, &ch->cost, err);
        if (st) return st;
        makespan = ch->sim.makespan;
    }
    if (!ch->ok || makespan < ch->makespan * (1 - 1e-12)) {
        to_sched(c, &ch->best);
        ch->makespan = makespan;
        ch->ok = 1;
    }
    return PM_OK;
}

/* The authors' sequence (their V-Half/V-Min generator; issue 9): round 1
 * with every W first at its earliest slot (in the warm-up no earlier W
 * holds it back, and a late W lets a forward take its slot and leaves
 * memory one higher), a squeeze in slot units, then round 2 counting
 * memory with the lifted W passes refilled for every tentative move. The
 * squeeze between the rounds packs round 1's result, so round 2 sees the
 * real free slots of the cool-down (odd p: v-half p=9 m=18 0.1818 without
 * it, the authors' 0.1756 with it). every_phase: round 1 may move any pass,
 * not only warm-up and cool-down ones (the authors' 1F1B-V generator:
 * moving the warm-up frees slots the first steady passes can then take).
 * Without every_phase, round 2 runs twice on round 1's squeezed result,
 * each offered: with the cool-down of the original slots, then with what
 * follows the held phase on the squeezed slots (held_end: the authors'
 * round 2). Neither wins everywhere. The second reaches the authors'
 * figures at m close to p (v-half p=8 m=8 32.5 against 33; with costs
 * 9918,10434,7038,213, p=12 m=14 570339 against 570687); in place of the
 * first in both sequences it made V-Half worse on 117 of 690 cases with
 * those costs (p = 2..16, m = p..6p). Round 1 is not redone for it. */
static pm_status authors_sequence(cons *c, choice *ch, int every_phase, pm_err *err) {
    restart(c, !every_phase);
    c->all_phases = every_phase;
    reorder(c, 0, 0);
    c->all_phases = 0;
    squeeze_slots(c);
    for (int64_t id = 0; id < c->N; id++) c->slot1[id] = (int32_t)c->slot[id]; /* < L */
    round2_exact(c);
    pm_status st = offer(c, ch, err);
    if (st || every_phase) return st;
    for (int64_t id = 0; id < c->N; id++) c->slot[id] = c->slot1[id];
    layout(c);
    c->held_end = held_end(c);
    round2_exact(c);
    c->held_end = -1;
    return offer(c, ch, err);
}

pm_status pm_sched_from_block(pm_sched *s, const pm_block *b, const pm_sched_req *req,
                              const char *kind, pm_err *err) {
    *s = (pm_sched){0};
    if (!b || !req)
        return pm_errf(err, PM_ERR_ARG, "the %s is NULL", b ? "request (req)" : "block");
    pm_block_info info;
    pm_mem mem = req->mem.f > 0 ? req->mem : PM_MEM_DEFAULT;
    pm_costs t = req->t.f > 0 ? req->t : PM_COSTS_DEFAULT;
    pm_sched_req q = *req;
    q.p = b->p, q.t = t;
    pm_status st = pm_sched_check_range(PM_TIER_FIXED, kind, b->p, req->m, b->v, err);
    if (!st) st = pm_sched_check_req(&q, err);
    if (st) return st;
    st = pm_block_analyze(b, mem, &info, err);
    if (st) return st;
    int legal = info.legal, bd = info.bad_dev, br = info.bad_residue;
    double *info_bound = info.bound; /* theorem bound per device, x M, then absolute */
    info.bound = NULL;
    pm_block_info_free(&info);
    for (int d = 0; d < b->p; d++) info_bound[d] *= b->p * mem.f; /* M = p * mem.f */
    if (!legal)
        st = pm_errf(err, PM_ERR_INVALID,
                     "illegal block: device %d has two passes on residue %d mod %d", bd, br,
                     b->T);
    else if (req->p && req->p != b->p)
        st = pm_errf(err, PM_ERR_ARG, "the block is for %d devices, not %d", b->p, req->p);
    else if (req->v && req->v != b->v)
        st = pm_errf(err, PM_ERR_ARG, "the block has %d chunks per device, not %d", b->v,
                     req->v);
    else if (req->m < 1 || req->m > (1 << 20))
        st = pm_errf(err, PM_ERR_ARG, "m must be 1..%d (got %d)", 1 << 20, req->m);
    if (st) {
        pm_free(info_bound);
        return st;
    }
    cons c;
    choice ch = {0};
    if ((st = cons_init(&c, b, req->m, mem, err))) goto done;
    if ((st = choice_init(&ch, &c, kind, t, mem, err))) goto done;
    restart(&c, 0);
    double top = 0; /* the largest device's peak */
    for (int d = 0; d < c.p; d++) {
        c.cap[d] = dev_peak(&c, d);
        if (c.cap[d] > top) top = c.cap[d];
    }
    /* the papers' rounds as first written: round 1 on the warm-up and
     * cool-down, then round 2 with the W passes lifted out */
    if ((st = offer(&c, &ch, err))) goto done;
    reorder(&c, 0, 0);
    if ((st = offer(&c, &ch, err))) goto done;
    layout(&c); /* round 2 starts from round 1's profile, rebuilt */
    lift_w(&c);
    reorder(&c, 1, 1);
    refill_w(&c);
    if ((st = offer(&c, &ch, err))) goto done;
    /* then the authors' sequences, first under each device's own peak,
     * then (if that changes any cap) under the relaxed caps */
    int relax = 0;
    for (int d = 0; d < c.p; d++) {
        double rc = top < info_bound[d] ? top : info_bound[d];
        relax |= rc > c.cap[d] + c.eps;
    }
    for (int pass = 0; pass < 1 + relax; pass++) {
        if (pass == 1)
            for (int d = 0; d < c.p; d++) {
                double rc = top < info_bound[d] ? top : info_bound[d];
                if (rc > c.cap[d]) c.cap[d] = rc;
            }
        if ((st = authors_sequence(&c, &ch, 0, err))) goto done;
        if ((st = authors_sequence(&c, &ch, 1, err))) goto done;
    }
    if (ch.ok) { /* always: the plain repetition meets its own caps */
        *s = ch.best;
        ch.best = (pm_sched){0};
    }
done:
    choice_free(&ch);
    pm_free(info_bound);
    cons_free(&c);
    return st;
}
