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

#include "pipemem/pm_sched.h"

/* Latency of the steps from stage a to stage b (a < b) that cross devices. */
static double lat(const pm_sched *s, double c, int a, int b) {
    double t = 0;
    for (int k = a; k < b; k++)
        if (pm_sched_stage_device(s, k) != pm_sched_stage_device(s, k + 1)) t += c;
    return t;
}

/* B's time: a recomputed B reruns the forward first (pm_cost_time). */
static double tb_of(const pm_stage_cost *x) { return x->tb + (x->rec ? x->tf : 0); }

/* The most forward work device d can do on `cap` of memory (the fractional
 * knapsack above); INFINITY when some F of d frees or keeps nothing. */
static double forward_work(const pm_sched *s, const pm_cost *c, int d, double cap) {
    double ratio = 0;
    for (int k = 0; k < s->S; k++) {
        if (pm_sched_stage_device(s, k) != d) continue;
        const pm_stage_cost *x = &c->st[k];
        double delta = x->rec ? x->mr : x->mf;
        if (!(delta > 0)) return INFINITY;
        if (x->tf / delta > ratio) ratio = x->tf / delta;
    }
    return cap * ratio;
}

static double device_bound(const pm_sched *s, const pm_cost *c, int d, double cap) {
    const pm_stage_cost *st = c->st;
    int S = s->S, lo = S, hi = -1;
    double f = 0, bw = 0;
    for (int k = 0; k < S; k++) {
        if (pm_sched_stage_device(s, k) != d) continue;
        lo = k < lo ? k : lo, hi = k > hi ? k : hi;
        f += st[k].tf, bw += tb_of(&st[k]) + st[k].tw;
    }
    if (hi < 0) return 0; /* a device without stages */
    double m = s->m, work = m * (f + bw);
    double R = 0, down = 0;
    for (int k = lo; k < S; k++) R += st[k].tf;
    for (int k = hi + 1; k < S; k++) R += tb_of(&st[k]);
    R += lat(s, c->c, lo, S - 1) + lat(s, c->c, hi, S - 1);
    double early = m * f; /* forward work possible before the first backward */
    if (cap > 0) {
        double fw = forward_work(s, c, d, cap);
        early = fw < early ? fw : early;
    }
    double head = R + work - (early < R ? early : R);
    double tail = -1;
    for (int k = lo; k <= hi; k++) {
        if (pm_sched_stage_device(s, k) != d) continue;
        down = 0;
        for (int u = k + 1; u < S; u++) down += st[u].tf + tb_of(&st[u]);
        down += 2 * lat(s, c->c, k, S - 1) + tb_of(&st[k]) + st[k].tw;
        if (tail < 0 || down < tail) tail = down;
    }
    tail += m * f;
    double b = work > head ? work : head;
    return b > tail ? b : tail;
}

double pm_sched_lower_bound(const pm_sched *s, const pm_cost *c) {
    return pm_sched_lower_bound_at(s, c, 0);
}

double pm_sched_lower_bound_at(const pm_sched *s, const pm_cost *c, double cap) {
    double b = 0;
    for (int d = 0; d < s->p; d++) {
        double x = device_bound(s, c, d, cap);
        if (x > b) b = x;
    }
    return b;
}
