/* bound.c: a lower bound on the makespan of ANY schedule with a given
 * placement, microbatch count and per-stage costs, under the simulation
 * rule (pm_sched.h), so that every schedule's makespan can be shown next to
 * how far it could possibly improve.
 *
 * For each device d, with H_d its stages, lo and hi the lowest and highest
 * of them, W_d = m * sum over H_d of (tf + tb + tw) its work (it runs it all,
 * one pass at a time), t0 the start of its first pass and E the end of its
 * last (span(d) = E - t0), and lat(a, b) the latency c for each step of a
 * chain between stages a and b that crosses devices:
 *   head:  the first pass is F(lo, j0) (an F of a higher stage needs F(lo)
 *          of its microbatch first), the first backward is B(hi, j) for
 *          some j (a lower stage's B needs B(hi, j) first), and it cannot
 *          start before R = sum_{lo..S-1} tf + sum_{hi+1..S-1} tb +
 *          lat(lo, S-1) + lat(hi, S-1) after t0. In [t0, t0 + R] the device
 *          runs forwards only, at most `early` of work (m * sum tf, or less
 *          under a cap, below), so it idles there at least
 *          idle_h = R - min(R, early): span(d) >= W_d + idle_h.
 *   tail:  the last forward is F(hi, j*) (a lower stage's F would be followed
 *          by F(hi) of its microbatch), ending at t_e. After it, B(hi, j*)
 *          waits for F(hi+1..S-1, j*) and B(S-1..hi+1, j*) (D_hi, with their
 *          latency), then the backward chain runs down to B(lo, j*) and
 *          W(lo, j*) follows: E - t_e >= chain = D_hi + max(tb_hi + tw_hi,
 *          sum_{lo..hi} tb + lat(lo, hi) + tw_lo). The device ran every
 *          forward by t_e, and what it runs after t_e (rem) is B and W work:
 *          t_e - t0 >= W_d - rem and E - t_e >= max(chain, rem), so
 *          span(d) >= W_d + idle_t with idle_t = chain - min(chain, remmax),
 *          remmax = m * sum (tb + tw), or less under a cap (below).
 *   memory, with a cap on every device's level (pm_sched_lower_bound_at;
 *          a level is the sum of the deltas of the passes run so far, and
 *          the peak is at least every level since a pass rises at least by
 *          its delta; a recomputed F rises by mr + mf, so with an mf < 0 no
 *          memory term applies). Let w_pre = what F keeps (mf, recomputed mr),
 *          w_post = mf + mb (what B leaves) and tot = mf + mb + mw.
 *      head: the forwards started in [t0, t0 + R] precede every backward,
 *          so their deltas sum to at most cap and they do at most
 *          early = cap * max over H_d of tf / w_pre of work (a fractional
 *          knapsack; unbounded if a w_pre <= 0).
 *      tail: at t_e no pass runs on d; every (stage, microbatch) with work
 *          left has its F done and its W not: it holds w_pre with tb + tw
 *          left, or w_post with tw left, and the finished ones hold tot.
 *          If w_pre, w_post and tot are all >= 0 the level at t_e
 *          (<= cap) bounds the work left: remmax = cap * max over H_d of
 *          (tb + tw) / w_pre and tw / w_post (unbounded if a weight <= 0
 *          carries work).
 *      both: if t_e >= t0 + R the two idle windows are disjoint:
 *          t_e - t0 >= W_d - rem + idle_h, so span(d) >= W_d + idle_h +
 *          idle_t. Else every pass before t_e is a forward, and all m |H_d|
 *          forwards run before the first backward, so their deltas,
 *          m * sum w_pre, fit the cap: when they do not, the sum holds.
 *      holding: let L(t) be the level while no pass runs on d, and the
 *          level before the running pass plus its rise while one does
 *          (L <= cap). With mf, w_pre, w_post, tot >= 0, L(t) is at least
 *          the sum over (stage u, microbatch) of w_pre from its F's start
 *          until its B ends (an F rises by at least what it keeps) and
 *          w_post from then until its W ends (a fused BW holds w_pre until
 *          it ends). B(u) ends at least tf_u + D_u + tb_u after F(u) starts
 *          (D_u as D_hi), W tw_u later, so integrating L over the span:
 *          cap * span(d) >= m * sum over H_d of (w_pre (tf_u + D_u + tb_u)
 *          + min(w_pre, w_post) tw_u). This is Little's law: with room for
 *          k activations, at most k microbatches start per round trip.
 *   through stage 0's device: the span of the device holding stage 0
 *      starts no later than every F(0, j) and ends no earlier than every
 *      W(0, j). For each device d other than that one (lo > 0), let E' be
 *      the end of d's last B(lo).
 *      F(lo) of d's first pass needs F(0..lo-1) of its microbatch before
 *      it (to_lo = sum tf + lat(0, lo)), and the B(lo) ending at E' needs
 *      B(lo-1..0) and W(0) after it (from_lo = sum tb + lat(0, lo) +
 *      tw_0): that span >= to_lo + (E' - t0) + from_lo, t0 d's own. After
 *      E' device d runs only W (every F and B of its stages comes before
 *      B(lo) of its microbatch), y of
 *      them, each held since its B: with the cap, y <= ymax = cap * max
 *      over H_d of tw / w_post (else m * sum tw). Its last F ends at t_e
 *      (the tail above) and B(lo, j*) is D_hi + sum_{lo..hi} tb +
 *      lat(lo, hi) (to_blo) after it; of the at most rem of B and W work
 *      left at t_e, y runs after E', so (t_e, E'] idles at least idle_b =
 *      to_blo - min(to_blo, rem - ymax) (less y leaves more idle there
 *      than it saves). The head's idle comes before the first B, so
 *      E' - t0 >= W_d - ymax + idle_h + idle_b when the two windows are
 *      disjoint (the forwards cannot all be live, as in "both"), with the
 *      larger of the two otherwise. This is what a device far from stage
 *      0 costs the device that holds it: at p = 8, m = 16, unit costs on
 *      the V placement it gives 53.5, 52 and 50.5 at 0.75, 0.8125 and
 *      0.875 M, the proven optima. Not for stage 0's own device: there
 *      from_lo = tw_0 is a W(0) after the last B(0) on that device itself,
 *      and a fused BW(0) leaves none (F BW on one device, costs 1, 1, 1,
 *      deltas 1, 0.5, -1.5: span 3 at cap 1, where a B that allocates
 *      leaves room for no W, ymax = 2/3 < tw_0, and the term said 3 + 1/3);
 *      with ymax >= tw_0 the term is at most the tail's (its chain to W(0)
 *      is the tail's to W(lo), against less work left), so nothing is lost.
 * The makespan (the largest span) is at least the largest of these. It is
 * exact for ZB-H2 at equal costs with m >= 2p - 1 (3m: no bubble) and for
 * one device. A recomputed stage's B counts its rerun forward (tb above is
 * tb + tf there). Costs that overlap F and B (fb_overlap) are outside it. */
#include <math.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "pipemem/pm_util.h"
#include "sched.h"
#include "work.h"

/* B's time: a recomputed B reruns the forward first (pm_cost_time). */
static double tb_of(const pm_stage_cost *x) { return x->tb + (x->rec ? x->tf : 0); }

/* How much work per unit of memory a pass can carry: value / weight, 0 for
 * no work, unbounded when a weight <= 0 carries work. */
static double per_unit(double value, double weight) {
    if (!(value > 0)) return 0;
    return weight > 0 ? value / weight : INFINITY;
}

/* What one sweep over the stages, from the last down, gathers per device;
 * the suffix sums it needs (sum_{k..S-1} tf, tb, and the latency of the
 * steps k..S-1 that cross devices) are running totals of that sweep, so the
 * bound costs O(S + p) however the stages are placed; if the p accumulators
 * cannot be allocated, one sweep per BOUND_BLOCK devices gives the same
 * values. */
typedef struct {
    int seen;        /* 1 once a stage of the device was met */
    int signed_mem;  /* 1 if a stage's w_pre, w_post or tot < 0 (no drain or holding term) */
    int no_mem;      /* 1 if a stage's mf < 0: a recomputed F may rise less than it keeps */
    int holds0;      /* 1 if stage 0 is the device's: no chain through stage 0's device */
    double f, bw;    /* sum over H_d of tf, and of tb + tw */
    double r_lo;     /* sum_{lo..S-1} tf + lat(lo, S-1): the lowest stage's share of R */
    double r_hi;     /* sum_{hi+1..S-1} tb + lat(hi, S-1): the highest stage's */
    double d_hi;     /* D_hi: F and B of the stages above hi, with latency */
    double bw_hi;    /* tb_hi + tw_hi */
    double b_hi;     /* sum_{hi+1..S-1} tb, to take from the running sum */
    double l_hi;     /* lat(hi, S-1), likewise */
    double down_lo;  /* sum_{lo..hi} tb + lat(lo, hi) + tw_lo (lo: the last stage met) */
    double tw_lo;    /* tw_lo */
    double ratio_f;  /* the largest tf / w_pre over H_d (the head's knapsack) */
    double ratio_t;  /* the largest (tb + tw) / w_pre and tw / w_post (the tail's) */
    double to_lo;    /* sum_{0..lo-1} tf + lat(0, lo): F(0) to F(lo) of one microbatch */
    double from_lo;  /* sum_{0..lo-1} tb + lat(0, lo) + tw_0: B(lo)'s end to W(0)'s */
    double w;        /* sum over H_d of tw */
    double ratio_w;  /* the largest tw / w_post over H_d (the last W's) */
    double keep;     /* sum over H_d of w_pre: one microbatch's forwards' deltas */
    double hold;     /* sum over H_d of w_pre (tf_u + D_u + tb_u) + min(w_pre, w_post) tw_u */
} dev_acc;

/* Gathers stage k (cost x, on the device of a) into a; suf_* are the sums
 * over the stages after k, suf_l the latency of the steps k..S-1; to_k and
 * from_k are the chains between stage 0 and k (to_lo, from_lo). */
static void gather(dev_acc *a, const pm_stage_cost *x, double suf_f, double suf_b,
                   double suf_l, double to_k, double from_k) {
    double tb = tb_of(x), du = suf_f + suf_b + 2 * suf_l; /* D_k */
    double pre = x->rec ? x->mr : x->mf, post = x->mf + x->mb, tot = post + x->mw;
    double rf = per_unit(x->tf, pre);
    double rt = per_unit(tb + x->tw, pre), rw = per_unit(x->tw, post);
    rt = rw > rt ? rw : rt;
    if (!a->seen) { /* k is the device's highest stage */
        a->seen = 1;
        a->r_hi = suf_b + suf_l;
        a->d_hi = du, a->bw_hi = tb + x->tw;
        a->b_hi = suf_b, a->l_hi = suf_l;
        a->ratio_f = rf, a->ratio_t = rt;
    }
    a->f += x->tf, a->bw += tb + x->tw, a->w += x->tw;
    a->r_lo = suf_f + x->tf + suf_l; /* k is the lowest so far */
    a->to_lo = to_k, a->from_lo = from_k, a->tw_lo = x->tw;
    a->ratio_w = fmax(a->ratio_w, rw);
    a->down_lo = suf_b + tb - a->b_hi + suf_l - a->l_hi + x->tw;
    if (rf > a->ratio_f) a->ratio_f = rf;
    if (rt > a->ratio_t) a->ratio_t = rt;
    if (pre < 0 || post < 0 || tot < 0) a->signed_mem = 1;
    if (x->mf < 0) a->no_mem = 1;
    a->keep += pre;
    a->hold += pre * (x->tf + du + tb) + (pre < post ? pre : post) * x->tw;
}

/* One sweep gathering devices d0 .. d0 + nd - 1 into acc[0 .. nd); the
 * sums over the stages before k are the totals less the suffixes. */
static void sweep(const pm_sched *s, const pm_cost *c, dev_acc *acc, int d0, int nd) {
    double all_f = 0, all_b = 0, all_l = 0;
    int64_t visits = 0; /* stages visited (pm_sched_work) */
    for (int k = 0; k < s->S; k++) {
        visits++;
        all_f += c->st[k].tf, all_b += tb_of(&c->st[k]);
        if (k > 0 && pm_sched_stage_device(s, k - 1) != pm_sched_stage_device(s, k))
            all_l += c->c;
    }
    double suf_f = 0, suf_b = 0, suf_l = 0; /* over the stages after k */
    for (int k = s->S - 1; k >= 0; k--) {
        int d = pm_sched_stage_device(s, k);
        visits++;
        if (k + 1 < s->S && pm_sched_stage_device(s, k + 1) != d) suf_l += c->c;
        const pm_stage_cost *x = &c->st[k];
        double lat0 = all_l - suf_l; /* lat(0, k) */
        double to_k = all_f - suf_f - x->tf + lat0;
        double from_k = all_b - suf_b - tb_of(x) + lat0 + c->st[0].tw;
        if (d >= d0 && d < d0 + nd) {
            gather(&acc[d - d0], x, suf_f, suf_b, suf_l, to_k, from_k);
            if (k == 0) acc[d - d0].holds0 = 1;
        }
        suf_f += x->tf, suf_b += tb_of(x);
    }
    pm_sched_work_add(visits);
}


/* The largest of the terms at the top of this file for one device. */
static double device_bound(const pm_sched *s, const dev_acc *a, double cap) {
    if (!a->seen) return 0; /* a device without stages */
    double m = s->m, work = m * (a->f + a->bw);
    double R = a->r_lo + a->r_hi, chain = a->d_hi + fmax(a->bw_hi, a->down_lo);
    double early = m * a->f, rem = m * a->bw; /* no cap: all of it */
    int capped = cap > 0 && !a->no_mem;
    if (capped) early = fmin(early, cap * a->ratio_f);
    if (capped && !a->signed_mem) rem = fmin(rem, cap * a->ratio_t);
    double idle_h = R - fmin(R, early), idle_t = chain - fmin(chain, rem);
    double b = work + fmax(idle_h, idle_t);
    /* t_e >= t0 + R when the forwards cannot all be live at once; a margin
     * keeps a cap that holds them exactly (a peak, summed in another
     * order) from looking too small by a rounding */
    int both = capped && m * a->keep > cap * (1 + 1e-9);
    if (both) b = work + idle_h + idle_t;
    if (capped && !a->signed_mem) b = fmax(b, m * a->hold / cap);
    if (a->holds0) return b; /* its last B(0) may be a BW: no W(0) after it */
    /* through stage 0's device: what is left after the last B(lo) */
    double ymax = m * a->w;
    if (capped && !a->signed_mem) ymax = fmin(ymax, cap * a->ratio_w);
    double to_blo = a->d_hi + a->down_lo - a->tw_lo;
    double idle_b = to_blo - fmin(to_blo, fmax(0, rem - ymax));
    double own = work - ymax + (both ? idle_h + idle_b : fmax(idle_h, idle_b));
    return fmax(b, a->to_lo + a->from_lo + own);
}

double pm_sched_lower_bound(const pm_sched *s, const pm_cost *c) {
    return pm_sched_lower_bound_at(s, c, 0);
}

/* Devices gathered per sweep on the stack; more take one allocation. */
enum { BOUND_BLOCK = 256 };

double pm_sched_lower_bound_at(const pm_sched *s, const pm_cost *c, double cap) {
    PM_ASSERT(s && c); /* pm_sched.h: neither may be NULL */
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
