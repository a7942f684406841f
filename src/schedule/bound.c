/* bound.c: a lower bound on the makespan of ANY schedule with a given
 * placement, microbatch count and per-stage costs, under the simulation
 * rule (pm_sched.h), so that every schedule's makespan can be shown next to
 * how far it could possibly improve.
 *
 * For each device d, with H_d its stages, lo and hi the lowest and highest
 * of them, W_d its total work and lat(a, b) the latency c for each step of
 * a chain between stages a and b that crosses devices, span(d) is at least:
 *   work:  W_d = m * sum over H_d of (tf + tb + tw): the device runs all of
 *          it, one pass at a time;
 *   head:  device d's first backward is B(hi, j) for some j (any earlier B
 *          of a lower stage on d would need B(hi, j) first). From the start
 *          of F(lo, j) it waits for F(lo..S-1, j) and B(S-1..hi+1, j), then
 *          still runs every B and W it has: sum_{lo..S-1} tf +
 *          sum_{hi+1..S-1} tb + lat + m * sum over H_d of (tb + tw);
 *   tail:  all m * sum tf of its forwards end by its last forward F(s, j);
 *          after it, B(s, j) waits for F(s+1..S-1, j) and B(S-1..s+1, j),
 *          then B(s, j) and W(s, j) run: m * sum tf + the smallest, over
 *          s in H_d, of sum_{s+1..S-1} (tf + tb) + lat + tb_s + tw_s.
 *   memory: with a cap on every device's activation memory (pm_sched_
 *          lower_bound_at), the head tightens. Until that first backward
 *          can start, R = sum_{lo..S-1} tf + sum_{hi+1..S-1} tb + lat after
 *          the device's first pass, only forwards run there, and nothing
 *          frees memory: the forwards started meanwhile have F deltas
 *          summing to at most the cap, so they do at most
 *          cap * max over H_d of (tf / F delta) of work (a fractional
 *          knapsack). The device does less than R of work in that window
 *          whenever this is below R, and then W_d - that work after it:
 *          span(d) >= R + W_d - min(R, that work, m * sum tf).
 * The makespan (the largest span) is at least the largest of these. It is
 * exact for ZB-H2 at equal costs with m >= 2p - 1 (3m: no bubble) and for
 * one device. A recomputed stage's B counts its rerun forward, and its F
 * delta is what it keeps. */
#include <math.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "pipemem/pm_util.h"

/* B's time: a recomputed B reruns the forward first (pm_cost_time). */
static double tb_of(const pm_stage_cost *x) { return x->tb + (x->rec ? x->tf : 0); }

/* What one sweep over the stages, from the last down, gathers per device;
 * the suffix sums it needs (sum_{k..S-1} tf, tb, and the latency of the
 * steps k..S-1 that cross devices) are running totals of that sweep, so the
 * bound costs O(S + p) however the stages are placed (it was O(S^2)); if
 * the p accumulators cannot be allocated, one sweep per BOUND_BLOCK devices
 * gives the same values. */
typedef struct {
    int seen;      /* 1 once a stage of the device was met */
    double f, bw;  /* sum over H_d of tf, and of tb + tw */
    double r_lo;   /* sum_{lo..S-1} tf + lat(lo, S-1): the lowest stage's share of R */
    double r_hi;   /* sum_{hi+1..S-1} tb + lat(hi, S-1): the highest stage's */
    double tail;   /* the smallest down(k) over H_d (the tail's second term) */
    double ratio;  /* the largest tf / F delta over H_d (INFINITY: a delta <= 0) */
} dev_acc;

/* One sweep gathering devices d0 .. d0 + nd - 1 into acc[0 .. nd). */
static void sweep(const pm_sched *s, const pm_cost *c, dev_acc *acc, int d0, int nd) {
    const pm_stage_cost *st = c->st;
    double suf_f = 0, suf_b = 0, suf_l = 0; /* over the stages after k */
    for (int k = s->S - 1; k >= 0; k--) {
        int d = pm_sched_stage_device(s, k);
        if (k + 1 < s->S && pm_sched_stage_device(s, k + 1) != d) suf_l += c->c;
        const pm_stage_cost *x = &st[k];
        if (d >= d0 && d < d0 + nd) {
            dev_acc *a = &acc[d - d0];
            double down = suf_f + suf_b + 2 * suf_l + tb_of(x) + x->tw;
            double delta = x->rec ? x->mr : x->mf;
            double ratio = delta > 0 ? x->tf / delta : INFINITY;
            if (!a->seen) { /* k is the device's highest stage */
                a->seen = 1;
                a->r_hi = suf_b + suf_l;
                a->tail = down;
                a->ratio = ratio;
            }
            a->f += x->tf, a->bw += tb_of(x) + x->tw;
            a->r_lo = suf_f + x->tf + suf_l; /* k is the lowest so far */
            if (down < a->tail) a->tail = down;
            if (ratio > a->ratio) a->ratio = ratio;
        }
        suf_f += x->tf, suf_b += tb_of(x);
    }
}

static double device_bound(const pm_sched *s, const dev_acc *a, double cap) {
    if (!a->seen) return 0; /* a device without stages */
    double m = s->m, work = m * (a->f + a->bw);
    double R = a->r_lo + a->r_hi;
    double early = m * a->f; /* forward work possible before the first backward */
    if (cap > 0) {
        double fw = cap * a->ratio; /* the fractional knapsack above */
        early = fw < early ? fw : early;
    }
    double head = R + work - (early < R ? early : R);
    double tail = m * a->f + a->tail;
    double b = work > head ? work : head;
    return b > tail ? b : tail;
}

double pm_sched_lower_bound(const pm_sched *s, const pm_cost *c) {
    return pm_sched_lower_bound_at(s, c, 0);
}

/* Devices gathered per sweep on the stack; more take one allocation. */
enum { BOUND_BLOCK = 256 };

double pm_sched_lower_bound_at(const pm_sched *s, const pm_cost *c, double cap) {
    dev_acc local[BOUND_BLOCK];
    int block = s->p;
    dev_acc *acc = s->p <= BOUND_BLOCK ? local : pm_malloc((size_t)s->p * sizeof *acc);
    if (!acc) /* out of memory: a sweep per block of devices, the same values */
        acc = local, block = BOUND_BLOCK;
    double b = 0;
    for (int d0 = 0; d0 < s->p; d0 += block) {
        int nd = s->p - d0 < block ? s->p - d0 : block;
        memset(acc, 0, (size_t)nd * sizeof *acc);
        sweep(s, c, acc, d0, nd);
        for (int d = 0; d < nd; d++) {
            double x = device_bound(s, &acc[d], cap);
            if (x > b) b = x;
        }
    }
    if (acc != local) pm_free(acc);
    return b;
}
