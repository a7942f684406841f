/* test_sim.c: the simulator against schedules built by hand and timed by
 * hand, independent of the generators. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "pipemem/pm_sched.h"
#include "pipemem/pm_util.h"
#include "schedule/sched.h"
#include "util/alloc.h"
#include "schedule/work.h" /* the engine's steps, counted */

/* 1F1B, p = 2, m = 3, fused BW: warm-up 1 F on device 0. */
static void build_1f1b_p2m3(pm_sched *s) {
    assert_int_equal(pm_sched_init(s, "hand", PM_PLACE_SINGLE, 2, 3, 1, NULL), PM_OK);
    static const int d0[][2] = {{PM_PASS_F, 0}, {PM_PASS_F, 1}, {PM_PASS_BW, 0},
                                {PM_PASS_F, 2}, {PM_PASS_BW, 1}, {PM_PASS_BW, 2}};
    static const int d1[][2] = {{PM_PASS_F, 0}, {PM_PASS_BW, 0}, {PM_PASS_F, 1},
                                {PM_PASS_BW, 1}, {PM_PASS_F, 2}, {PM_PASS_BW, 2}};
    for (int i = 0; i < 6; i++) pm_sched_push(s, 0, d0[i][0], 0, d0[i][1]);
    for (int i = 0; i < 6; i++) pm_sched_push(s, 1, d1[i][0], 1, d1[i][1]);
}

static void test_1f1b_hand_timed(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err;
    build_1f1b_p2m3(&s);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    /* Device 0: F0 [0,1] F1 [1,2] BW0 [4,6] F2 [6,7] BW1 [7,9] BW2 [10,12]. */
    static const double st0[] = {0, 1, 4, 6, 7, 10}, en1[] = {2, 4, 5, 7, 8, 10};
    for (int i = 0; i < 6; i++) {
        assert_true(sim.start[i] == st0[i]);
        assert_true(sim.end[s.cap + i] == en1[i]);
    }
    assert_true(sim.makespan == 12); /* (m + p - 1)(F + B + W) */
    assert_true(sim.span[1] == 9);
    assert_true(fabs(sim.bubble - 0.25) < 1e-12); /* (p-1)/(m+p-1) */
    assert_true(sim.M == 2);
    assert_true(pm_sim_peak_x(&sim, 0) == 1.0);
    assert_true(pm_sim_peak_x(&sim, 1) == 0.5);
    assert_int_equal(sim.peak_at[0], 1);
    assert_true(sim.mem[5] == 0); /* everything released at the end */
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_latency_on_cross_device_edges_only(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_1f1b_p2m3(&s);
    pm_costs t = {1, 1, 1, 0.5};
    assert_int_equal(pm_cost_init_uniform(&c, &s, t, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    /* dev1 F0 waits 1 + 0.5; its BW0 follows on the same device at once. */
    assert_true(sim.start[s.cap + 0] == 1.5);
    assert_true(sim.start[s.cap + 1] == 2.5);
    /* dev0 BW0 waits for dev1's BW0 (ends 4.5) + 0.5. */
    assert_true(sim.start[2] == 5.0);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_split_backward_and_per_stage_costs(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    /* One device, two microbatches: F0 F1 B0 B1 W0 W1 with F=1, B=2, W=3. */
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 1, 2, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_B, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_B, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_W, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_W, 0, 1);
    assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){1, 2, 3, 0}, (pm_mem){4, -1, -3, 0},
                                          NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    assert_true(sim.makespan == 12);
    assert_true(sim.bubble == 0);
    assert_true(sim.peak[0] == 8 && pm_sim_peak_x(&sim, 0) == 2.0);
    assert_true(sim.mem[3] == 6 && sim.mem[4] == 3);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_deadlock_named(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err = {{0}};
    /* Device 1 wants BW of microbatch 1 before running its F: stuck. */
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 2, 1, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 0);
    pm_sched_push(&s, 1, PM_PASS_BW, 1, 0);
    pm_sched_push(&s, 1, PM_PASS_F, 1, 0);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_ERR_DEADLOCK);
    assert_non_null(strstr(err.msg, "device 0 is stuck at pass 1"));
    assert_null(sim.start);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_out_of_range_rejected(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err = {{0}};
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 1, 1, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 3);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "microbatch 3"));
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_placements(void **state) {
    (void)state;
    pm_sched s;
    assert_int_equal(pm_sched_init(&s, "v", PM_PLACE_V, 4, 1, 2, NULL), PM_OK);
    assert_int_equal(s.S, 8);
    assert_int_equal(pm_sched_stage_device(&s, 3), 3);
    assert_int_equal(pm_sched_stage_device(&s, 4), 3);
    assert_int_equal(pm_sched_stage_device(&s, 7), 0);
    assert_int_equal(pm_sched_stage_chunk(&s, 7), 1);
    pm_sched_free(&s);
    assert_int_equal(pm_sched_init(&s, "loop", PM_PLACE_LOOP, 4, 1, 3, NULL), PM_OK);
    assert_int_equal(pm_sched_stage_device(&s, 9), 1);
    assert_int_equal(pm_sched_stage_chunk(&s, 9), 2);
    pm_sched_free(&s);
    pm_err err;
    assert_int_equal(pm_sched_init(&s, "v", PM_PLACE_V, 4, 1, 3, &err), PM_ERR_ARG);
    assert_int_equal(pm_sched_init(&s, "x", PM_PLACE_SINGLE, 0, 1, 1, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "p must be at least 1"));
}

/* Validation, simulation and the lower bound are linear in the number of
 * passes: 1F1B on 100000 devices with m = 3 is n = 600000 passes; the old
 * sweep (every device revisited until nothing moved) took O(p^2) steps,
 * over 30 s, and so did the bound's first version (O(S^2)). The work is
 * counted, not timed (pm_sched_work): a replay tries each pass once when it
 * runs and once more each time its device, woken, finds its next pass
 * still waiting; a pass run wakes at most one device, so a replay tries at
 * most n + (p + n) passes; the bound visits every stage twice. In all at
 * most 2 (2n + p) + 2S; the old sweep alone tried about p^2 / 2. The
 * makespan is checked against the 1F1B formula with unit costs and no
 * latency: (m + p - 1) * (F + BW) = (3 + p - 1) * 3. */
static void test_linear_in_passes(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err;
    pm_sched_req req = {.p = 100000, .m = 3, .t = {1, 2, 0, 0}, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, req.t, req.mem, &err), PM_OK);
    int64_t w0 = pm_sched_work();
    assert_int_equal(pm_sched_validate(&s, &c, 0, &err), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    double lb = pm_sched_lower_bound_at(&s, &c, pm_sim_peak_max_x(&sim) * sim.M);
    int64_t work = pm_sched_work() - w0, n = 0;
    for (int d = 0; d < s.p; d++) n += s.len[d];
    assert_true(n == 600000); /* F and BW of 3 microbatches on each of 100000 stages */
    assert_true(fabs(sim.makespan - (3.0 + 100000 - 1) * 3.0) < 1e-6);
    /* the bound at its peak, by hand: device 0's span holds microbatch j's
     * F through stages 0..p-2 (p - 1), device p-1's whole work from its
     * first F to its last B (9: no W to defer, and its first B follows its
     * first F at once), then j's B back down (2 (p - 1)): 3p + 6, 1F1B's
     * own makespan (device 0's own terms are lower: its first B comes
     * 3p - 2 after its first F, with 3 F done meanwhile: 3p + 4) */
    assert_true(lb == 3.0 * 100000 + 6);
    if (work > 2 * (2 * n + req.p) + 2 * (int64_t)s.S)
        fail_msg("validate + simulate + bound of %lld passes took %lld steps", (long long)n,
                 (long long)work);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* The lower bound (bound.c) is never above any schedule's makespan: every
 * kind, p 1..6, several m, equal and unequal costs, with and without
 * latency. And it is tight where the makespan is known by hand. */
static void test_lower_bound_never_beaten(void **state) {
    (void)state;
    const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0.7}, {4959, 5217, 3519, 213}};
    int nk;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    int checked = 0;
    for (int rec = 0; rec < 2; rec++)
    for (int k = 0; k < nk; k++)
        for (int p = 1; p <= 6; p++)
            for (int mi = 0; mi < 5; mi++)
                for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++) {
                    int ms[] = {1, 2, p, 2 * p, 3 * p + 1};
                    pm_sched_req q = {.p = p, .m = ms[mi], .t = costs[ci], .mem = PM_MEM_DEFAULT,
                                      .mem_limit = kinds[k].place == PM_PLACE_V ? 1.0 : 2.0,
                                      .recompute = rec};
                    if (kinds[k].place == PM_PLACE_LOOP) q.v = 2, q.m = p * (mi + 1);
                    pm_sched s;
                    pm_err e;
                    if (pm_sched_generate(&s, kinds[k].name, &q, &e)) continue; /* not this size */
                    pm_cost c;
                    pm_sim sim;
                    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
                    assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
                    double lb = pm_sched_lower_bound(&s, &c);
                    if (!(lb > 0) || sim.makespan < lb * (1 - 1e-12))
                        fail_msg("%s p=%d m=%d costs %zu: makespan %.10g below the bound %.10g",
                                 s.kind, p, q.m, ci, sim.makespan, lb);
                    /* nor the bound for schedules with no more memory than it */
                    double at = pm_sched_lower_bound_at(&s, &c, pm_sim_peak_max_x(&sim) * sim.M);
                    if (at < lb || sim.makespan < at * (1 - 1e-12))
                        fail_msg("%s p=%d m=%d costs %zu: makespan %.10g, bound at its peak "
                                 "%.10g (without memory %.10g)", s.kind, p, q.m, ci,
                                 sim.makespan, at, lb);
                    checked++;
                    pm_sim_free(&sim);
                    pm_cost_free(&c);
                    pm_sched_free(&s);
                }
    assert_true(checked > 2000); /* plain and recomputed */
    /* tight by hand: ZB-H2 at equal costs, m >= 2p - 1, runs 3m with no
     * bubble; one device runs m (F + B + W) */
    pm_sched_req q = {.p = 4, .m = 8, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT};
    pm_sched s;
    pm_err e;
    pm_cost c;
    assert_int_equal(pm_sched_generate(&s, "zb-h2", &q, &e), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
    assert_true(pm_sched_lower_bound(&s, &c) == 24);
    pm_cost_free(&c), pm_sched_free(&s);
    /* 1F1B, p = 4, m = 2, equal costs: device 0 waits for microbatch j's
     * forward through 4 stages and backward through 3 (7), then runs its 2
     * B and 2 W (4): 11, above its work (6) and its tail (2 + 6 + 2) */
    q = (pm_sched_req){.p = 4, .m = 2, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "zb-h1", &q, &e), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
    assert_true(pm_sched_lower_bound(&s, &c) == 11);
    pm_cost_free(&c), pm_sched_free(&s);
    /* 1F1B's gap at equal costs, p = 4, m = 8: (m + p - 1) 3 = 33 against
     * 3m = 24, the 0.375 `compare` prints */
    q = (pm_sched_req){.p = 4, .m = 8, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT};
    pm_sim sim;
    assert_int_equal(pm_sched_generate(&s, "1f1b", &q, &e), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
    assert_true(sim.makespan == 33 && pm_sched_lower_bound(&s, &c) == 24);
    /* with 1F1B's own memory (M = 4 stage activations on device 0): its
     * first backward comes R = 4 F + 3 B = 7 after its first forward, and
     * 4 forwards (work 4) fit meanwhile: 7 + 24 - 4 = 27, which ZB-H1
     * (3m + p - 1 = 27 at M) reaches */
    assert_true(pm_sched_lower_bound_at(&s, &c, sim.M) == 27);
    pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
    /* V-Half, p = 4, m = 12, unit costs, 0.75 M: device 3 (stages 3 and 4)
     * holds 6 chunk activations (1/2 each of one device's 1), each chunk
     * pass takes 0.5, so 3 of forward work fit in the window before its
     * first B (stages 3..7 F and 7..5 B: 4), idle 1; and at its last B(3)
     * the W still to run hold at most 6 activations: 3 of work. Device 0's
     * span holds F(0..2) of that microbatch (1.5), device 3's work to its
     * last B(3), then B(2..0) and W(0) (2). Device 3's last F (stage 4's)
     * is 4 from the end of that microbatch's B(3) (F and B of stages 5..7: 3; B(4), B(3): 1),
     * and the live activations carry at most 6 of B and W, 3 of it the W
     * after the last B(3): idle 1 there too. 1.5 + 36 - 3 + 1 + 1 + 2 =
     * 38.5, V-Half's own makespan (its bubble 0.0649: 36 / 0.9351) */
    q = (pm_sched_req){.p = 4, .m = 12, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "v-half", &q, &e), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
    assert_true(pm_sched_lower_bound(&s, &c) == 36);
    assert_true(pm_sched_lower_bound_at(&s, &c, 0.75 * 4) == 38.5);
    pm_cost_free(&c), pm_sched_free(&s);
}

/* ---- the bound written out term by term, O(S) per device and O(S) per
 * stage of it (O(S^2) in all), kept as the independent reference for the
 * linear sweep of bound.c: each sum is computed the way the derivation at
 * the top of bound.c states it, from the stages, not from running sums. */
static double ref_lat(const pm_sched *s, double c, int a, int b) {
    double t = 0;
    for (int k = a; k < b; k++)
        if (pm_sched_stage_device(s, k) != pm_sched_stage_device(s, k + 1)) t += c;
    return t;
}

static double ref_tb(const pm_stage_cost *x) { return x->tb + (x->rec ? x->tf : 0); }

/* D_u: F and B of every stage above u, and the latency both ways. */
static double ref_D(const pm_sched *s, const pm_cost *c, int u) {
    double t = 2 * ref_lat(s, c->c, u, s->S - 1);
    for (int k = u + 1; k < s->S; k++) t += c->st[k].tf + ref_tb(&c->st[k]);
    return t;
}

/* The most work per unit of memory: value / weight, 0 without work. */
static double ref_ratio(double value, double weight) {
    if (value <= 0) return 0;
    return weight > 0 ? value / weight : INFINITY;
}

static double ref_device_bound(const pm_sched *s, const pm_cost *c, int d, double cap) {
    const pm_stage_cost *st = c->st;
    int S = s->S, lo = S, hi = -1, signed_mem = 0;
    double f = 0, bw = 0, w = 0, rf = 0, rt = 0, rw = 0, keep = 0, hold = 0;
    for (int k = 0; k < S; k++) {
        if (pm_sched_stage_device(s, k) != d) continue;
        const pm_stage_cost *x = &st[k];
        double pre = x->rec ? x->mr : x->mf, post = x->mf + x->mb;
        lo = k < lo ? k : lo, hi = k > hi ? k : hi;
        f += x->tf, bw += ref_tb(x) + x->tw, w += x->tw;
        rw = fmax(rw, ref_ratio(x->tw, post));
        rf = fmax(rf, ref_ratio(x->tf, pre));
        rt = fmax(rt, fmax(ref_ratio(ref_tb(x) + x->tw, pre), ref_ratio(x->tw, post)));
        if (pre < 0 || post < 0 || post + x->mw < 0) signed_mem = 1;
        if (x->mf < 0) cap = 0; /* a recomputed F may rise less than it keeps */
        keep += pre;
        hold += pre * (x->tf + ref_D(s, c, k) + ref_tb(x)) + fmin(pre, post) * x->tw;
    }
    if (hi < 0) return 0;
    double m = s->m, work = m * (f + bw), R = 0;
    for (int k = lo; k < S; k++) R += st[k].tf;
    for (int k = hi + 1; k < S; k++) R += ref_tb(&st[k]);
    R += ref_lat(s, c->c, lo, S - 1) + ref_lat(s, c->c, hi, S - 1);
    double down = st[lo].tw + ref_lat(s, c->c, lo, hi);
    for (int k = lo; k <= hi; k++) down += ref_tb(&st[k]);
    double chain = ref_D(s, c, hi) + fmax(ref_tb(&st[hi]) + st[hi].tw, down);
    double early = m * f, rem = m * bw;
    if (cap > 0) early = fmin(early, cap * rf);
    if (cap > 0 && !signed_mem) rem = fmin(rem, cap * rt);
    double idle_h = R - fmin(R, early), idle_t = chain - fmin(chain, rem);
    double b = work + fmax(idle_h, idle_t);
    int both = cap > 0 && m * keep > cap * (1 + 1e-9);
    if (both) b = work + idle_h + idle_t;
    if (cap > 0 && !signed_mem) b = fmax(b, m * hold / cap);
    if (lo == 0) return b; /* device 0 itself: a BW(0) last leaves no W(0) after */
    /* device 0's span holds F(0..lo-1), this device from its first pass to
     * its last B(lo), then B(lo-1..0) and W(0); after its last F, B(lo)
     * of that microbatch is D_hi + B(hi..lo) away, and at most y of W
     * (what the cap holds) runs after the last B(lo) */
    double to = ref_lat(s, c->c, 0, lo), from = to + st[0].tw, y = m * w;
    for (int k = 0; k < lo; k++) to += st[k].tf, from += ref_tb(&st[k]);
    if (cap > 0 && !signed_mem) y = fmin(y, cap * rw);
    double to_blo = ref_D(s, c, hi) + ref_lat(s, c->c, lo, hi);
    for (int k = lo; k <= hi; k++) to_blo += ref_tb(&st[k]);
    double idle_b = fmax(0, to_blo - fmax(0, rem - y));
    double own = work - y + (both ? idle_h + idle_b : fmax(idle_h, idle_b));
    return fmax(b, to + from + own);
}

static double ref_lower_bound_at(const pm_sched *s, const pm_cost *c, double cap) {
    double b = 0;
    for (int d = 0; d < s->p; d++) {
        double x = ref_device_bound(s, c, d, cap);
        if (x > b) b = x;
    }
    return b;
}

static uint64_t lcg_state = 12345;
static double lcg_unit(void) { /* [0, 1), a fixed sequence */
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}

/* The linear bound gives the term-by-term reference's values on every
 * placement, p 1..12 and 300 (above the devices one sweep gathers without
 * an allocation, and then without it), several m, per-stage costs that
 * differ (some F keeping nothing, some W freeing more than its F kept, a
 * few F deltas below 0, some stages recomputed), with and without latency
 * and a memory cap: exactly with small integer costs (every sum exact), to
 * 1e-12 with real ones (the sums are taken in another order). */
static void test_lower_bound_equals_reference(void **state) {
    (void)state;
    static const struct { pm_place place; int v; } shapes[] = {
        {PM_PLACE_SINGLE, 1}, {PM_PLACE_V, 2}, {PM_PLACE_LOOP, 2}, {PM_PLACE_LOOP, 3},
        {PM_PLACE_LOOP, 4}};
    static const int ms[] = {1, 2, 5, 17};
    static const int ps[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 300};
    int checked = 0;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
    for (int integer = 0; integer < 2; integer++)
    for (int trial = 0; trial < 4; trial++) {
        int p = ps[pi];
        if (p > 12 && mi > 0) continue; /* the reference is O(S^2): one m will do */
        pm_sched s;
        pm_cost c;
        assert_int_equal(pm_sched_init(&s, "shape", shapes[sh].place, p, ms[mi], shapes[sh].v,
                                       NULL), PM_OK);
        assert_int_equal(pm_cost_init(&c, s.S, NULL), PM_OK);
        double scale = integer ? 8 : 3;
        for (int k = 0; k < s.S; k++) {
            pm_stage_cost *x = &c.st[k];
            double *t[] = {&x->tf, &x->tb, &x->tw, &x->mf, &x->mr};
            for (int i = 0; i < 5; i++) {
                double u = lcg_unit() * scale;
                *t[i] = integer ? floor(u) : u;
            }
            if (lcg_unit() < 0.1) x->mf = 0; /* an F that keeps nothing */
            x->mb = -x->mf / 2, x->mw = -x->mf / 2;
            if (lcg_unit() < 0.1) x->mw = -x->mf; /* W frees more than F kept */
            if (trial == 3 && lcg_unit() < 0.1) x->mf = -x->mf - 1; /* no memory terms */
            x->rec = trial >= 2 && lcg_unit() < 0.5;
        }
        c.c = trial % 2 ? (integer ? 2 : 0.7) : 0;
        double caps[] = {0, 0.5, 3, 1000};
        for (int ci = 0; ci < 4; ci++) {
            double want = ref_lower_bound_at(&s, &c, caps[ci]);
            double got = pm_sched_lower_bound_at(&s, &c, caps[ci]);
            int same = integer ? got == want : fabs(got - want) <= 1e-12 * fabs(want);
            if (p > 256 && ci == 1) { /* no memory for p accumulators: the same bound */
                pm_alloc_fail_at(1, 0);
                double again = pm_sched_lower_bound_at(&s, &c, caps[ci]);
                int fired = pm_alloc_failed();
                pm_alloc_fail_at(0, 0);
                assert_true(fired && again == got);
            }
            if (!same)
                fail_msg("place %d v %d p %d m %d trial %d cap %g: bound %.17g, the "
                         "reference %.17g", shapes[sh].place, shapes[sh].v, p, ms[mi], trial,
                         caps[ci], got, want);
            checked++;
        }
        pm_cost_free(&c);
        pm_sched_free(&s);
    }
    assert_int_equal(checked, 5 * (12 * 4 + 1) * 2 * 4 * 4);
}

/* A random valid schedule of shape (place, p, m, v): passes are appended
 * one at a time to a random device, each one whose inputs are already
 * listed (so the global order of appends replays without deadlock); with
 * probability `back` a backward or weight pass is preferred to a forward,
 * which spreads the peaks from one activation to all of them; some
 * backwards are fused BW passes. Microbatches go in any order. */
static void random_schedule(pm_sched *s, pm_place place, int p, int m, int v, double back) {
    assert_int_equal(pm_sched_init(s, "random", place, p, m, v, NULL), PM_OK);
    int S = s->S, left = 0;
    uint8_t state[16][8] = {{0}}; /* 0 none, 1 F, 2 B, 3 W or BW listed */
    assert_true(S <= 16 && m <= 8);
    left = 3 * S * m;
    while (left > 0) {
        int d = (int)(lcg_unit() * p), nc = 0, nb = 0;
        int cand[48][2], bwd[48][2]; /* (stage, mb): ready forwards, ready B or W */
        for (int u = 0; u < S; u++) {
            if (pm_sched_stage_device(s, u) != d) continue;
            for (int j = 0; j < m; j++) {
                int st = state[u][j];
                if (st == 0 && (u == 0 || state[u - 1][j] >= 1))
                    cand[nc][0] = u, cand[nc][1] = j, nc++;
                else if ((st == 1 && (u == S - 1 || state[u + 1][j] >= 2)) || st == 2)
                    bwd[nb][0] = u, bwd[nb][1] = j, nb++;
            }
        }
        if (!nc && !nb) continue;
        int use_b = nb && (!nc || lcg_unit() < back);
        int (*from)[2] = use_b ? bwd : cand;
        int k = (int)(lcg_unit() * (use_b ? nb : nc)), u = from[k][0], j = from[k][1];
        if (!use_b) {
            pm_sched_push(s, d, PM_PASS_F, u, j), state[u][j] = 1, left--;
        } else if (state[u][j] == 2) {
            pm_sched_push(s, d, PM_PASS_W, u, j), state[u][j] = 3, left--;
        } else if (lcg_unit() < 0.2) {
            pm_sched_push(s, d, PM_PASS_BW, u, j), state[u][j] = 3, left -= 2;
        } else {
            pm_sched_push(s, d, PM_PASS_B, u, j), state[u][j] = 2, left--;
        }
    }
}

/* No schedule beats the bound at its own peak, however odd its order: 3000
 * random valid schedules (every placement, p 1..4, m 1..6, microbatches
 * out of order, fused BW, peaks from one activation to all of them), with
 * equal, unequal and random per-stage costs (latency, recomputed stages,
 * F that keep nothing, B that free part or allocate, W that free more than
 * F kept). */
static void test_lower_bound_random_orders(void **state) {
    (void)state;
    static const struct { pm_place place; int v; } shapes[] = {
        {PM_PLACE_SINGLE, 1}, {PM_PLACE_V, 2}, {PM_PLACE_LOOP, 2}};
    int checked = 0, capped_above = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int sh = trial % 3, p = 1 + (int)(lcg_unit() * 4), m = 1 + (int)(lcg_unit() * 6);
        pm_sched s;
        pm_cost c;
        pm_sim sim;
        pm_err e;
        random_schedule(&s, shapes[sh].place, p, m, shapes[sh].v, lcg_unit());
        s.recompute = trial % 7 == 3;
        const pm_costs fixed[] = {{1, 1, 1, 0}, {2, 3, 1, 0.7}, {9918, 10434, 7038, 213}};
        pm_costs t = fixed[trial % 3];
        assert_int_equal(pm_cost_init_uniform(&c, &s, t, PM_MEM_DEFAULT, &e), PM_OK);
        if (trial % 4 == 1) /* random per-stage costs and deltas */
            for (int k = 0; k < s.S; k++) {
                pm_stage_cost *x = &c.st[k];
                x->tf = 0.1 + 3 * lcg_unit(), x->tb = 0.1 + 3 * lcg_unit();
                x->tw = 3 * lcg_unit(), x->mf = k && lcg_unit() < 0.1 ? 0 : 0.05 + 2 * lcg_unit();
                x->mb = -x->mf * lcg_unit(), x->mw = -(x->mf + x->mb);
                if (lcg_unit() < 0.1) x->mw -= lcg_unit(); /* frees more than F kept */
                if (lcg_unit() < 0.2) /* B allocates: W frees it with F's */
                    x->mb = x->mf * lcg_unit(), x->mw = -(x->mf + x->mb);
                x->mr = x->mf * lcg_unit() / 4;
            }
        if (pm_sim_run(&sim, &s, &c, &e)) fail_msg("trial %d: %s", trial, e.msg);
        double peak = 0;
        for (int d = 0; d < p; d++) peak = sim.peak[d] > peak ? sim.peak[d] : peak;
        double lb = pm_sched_lower_bound_at(&s, &c, peak);
        if (!(sim.makespan >= lb * (1 - 1e-12)))
            fail_msg("trial %d place %s p %d m %d: makespan %.10g below the bound %.10g at "
                     "its peak %.10g", trial, pm_place_names[shapes[sh].place], p, m,
                     sim.makespan, lb, peak);
        capped_above += lb > pm_sched_lower_bound(&s, &c) * (1 + 1e-12);
        checked++;
        pm_sim_free(&sim);
        pm_cost_free(&c);
        pm_sched_free(&s);
    }
    assert_int_equal(checked, 3000);
    assert_true(capped_above > 300); /* the memory terms were at work */
}

/* The best schedule the search finds under a memory limit (every family,
 * recomputed ones, the polish) never beats the bound at that limit, nor at
 * its own peak: p 2..5, two m each, V-Min's peak, 0.75 and 1.0 M, three
 * cost sets. */
static void test_lower_bound_under_limits(void **state) {
    (void)state;
    const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0.7}, {9918, 10434, 7038, 213}};
    int checked = 0;
    for (int p = 2; p <= 5; p++)
        for (int mi = 0; mi < 2; mi++)
            for (int li = 0; li < 3; li++)
                for (int ci = 0; ci < 3; ci++) {
                    double lims[] = {(double)((p + 4) / 3) / p, 0.75, 1.0};
                    pm_sched_req q = {.p = p, .m = mi ? 2 * p + 2 : p + 1, .t = costs[ci],
                                      .mem = PM_MEM_DEFAULT, .mem_limit = lims[li]};
                    pm_sched s;
                    pm_search_point pt;
                    pm_err e;
                    char why[512];
                    if (pm_sched_search(&s, &q, &pt, why, sizeof why, &e)) continue;
                    pm_cost c;
                    pm_sim sim;
                    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
                    assert_int_equal(pm_sched_validate(&s, &c, q.mem_limit, &e), PM_OK);
                    assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
                    double at = pm_sched_lower_bound_at(&s, &c, q.mem_limit * sim.M);
                    double own = pm_sched_lower_bound_at(&s, &c, pm_sim_peak_max_x(&sim) * sim.M);
                    if (!(sim.makespan >= at * (1 - 1e-12)) || !(sim.makespan >= own * (1 - 1e-12)))
                        fail_msg("%s p=%d m=%d limit %g costs %d: makespan %.10g, bound %.10g at "
                                 "the limit, %.10g at its peak", s.kind, p, q.m, q.mem_limit, ci,
                                 sim.makespan, at, own);
                    checked++;
                    pm_sim_free(&sim);
                    pm_cost_free(&c);
                    pm_sched_free(&s);
                }
    assert_true(checked >= 60);
}

/* The memory terms by hand (unit costs unless said, M = p activations on
 * the single placement):
 *   - single, p = 4, m = 4, cap 2 activations: device 0's first B comes 7
 *     after its first F (4 F down, 3 B back) and 2 F fit before it
 *     (idle 5); its last F is followed by 6 + B + W = 8 while the live
 *     activations carry at most 2 (B + W) = 4 of work (idle 4); 4 forwards
 *     do not fit at once, so both idles add: 12 + 5 + 4 = 21, which
 *     F F _ B W F B W F _ B W _ B W reaches (F of j + 2 after W of j);
 *   - single, p = 4, m = 8, cap 1 activation: every microbatch holds it from
 *     its F's start to its W's end, at least 1 + 6 + 1 + 1 = 9, one at a
 *     time: 72 (which one microbatch after another reaches);
 *   - V, p = 2, m = 1, costs 1,3,1 (each chunk F 0.5, B 1.5, W 0.5), no
 *     cap: the one microbatch's chain F(0) F(1) F(2) F(3) B(3) B(2) B(1)
 *     B(0) W(0) (8.5) runs inside device 0's span, which only device 1's
 *     two W can leave: 8.5, what every order of it takes (device 0's own
 *     tail gives 7.5: its last forward is stage 3's, then the backward
 *     chain runs stages 3..0 (6) and W(0) (0.5), after both its forwards). */
static void test_lower_bound_memory_by_hand(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_err e;
    assert_int_equal(pm_sched_init(&s, "shape", PM_PLACE_SINGLE, 4, 4, 1, NULL), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){1, 1, 1, 0}, PM_MEM_DEFAULT, &e),
                     PM_OK);
    assert_true(pm_sched_lower_bound(&s, &c) == 15); /* no cap: 12 + 7 - 4, ZB-H1's 3m + p - 1 */
    assert_true(pm_sched_lower_bound_at(&s, &c, 2) == 21);
    pm_cost_free(&c), pm_sched_free(&s);
    assert_int_equal(pm_sched_init(&s, "shape", PM_PLACE_SINGLE, 4, 8, 1, NULL), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){1, 1, 1, 0}, PM_MEM_DEFAULT, &e),
                     PM_OK);
    assert_true(pm_sched_lower_bound_at(&s, &c, 1) == 72);
    pm_cost_free(&c), pm_sched_free(&s);
    assert_int_equal(pm_sched_init(&s, "shape", PM_PLACE_V, 2, 1, 2, NULL), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){1, 3, 1, 0}, PM_MEM_DEFAULT, &e),
                     PM_OK);
    assert_true(pm_sched_lower_bound(&s, &c) == 8.5);
    pm_cost_free(&c), pm_sched_free(&s);
}

/* A B that allocates (deltas 1, 0.5, -1.5) under a cap of one stage's
 * activation: a B alone would leave 1.5, so every backward is a fused BW
 * and no W follows the last B(0) on stage 0's device. One device, unit
 * costs: F BW takes its work, 3, and nothing takes less. Two devices,
 * stage 1's W free (0): device 0's span holds the one microbatch's chain
 * F(0) F(1) B(1) B(0) W(0), 5, and F BW on both takes 5. Of the 2 and 4
 * valid orders only these stay within the cap; the chain through device
 * 0, counted for device 0 itself with a W(0) after its last B(0), said
 * 3 + 1/3 and 5 + 1/3. */
static void test_lower_bound_fused_last_backward(void **state) {
    (void)state;
    for (int p = 1; p <= 2; p++) {
        pm_sched s;
        pm_cost c;
        pm_sim sim;
        pm_err e;
        assert_int_equal(pm_sched_init(&s, "shape", PM_PLACE_SINGLE, p, 1, 1, NULL), PM_OK);
        assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){1, 1, 1, 0},
                                              (pm_mem){1, 0.5, -1.5, 0}, &e), PM_OK);
        if (p == 2) c.st[1].tw = 0;
        for (int d = 0; d < p; d++) {
            pm_sched_push(&s, d, PM_PASS_F, d, 0);
            pm_sched_push(&s, d, PM_PASS_BW, d, 0);
        }
        assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
        double want = p == 1 ? 3 : 5;
        assert_true(sim.makespan == want && sim.peak[0] == 1 && sim.peak[p - 1] == 1);
        assert_true(pm_sched_lower_bound_at(&s, &c, 1) == want);
        pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
    }
}

/* 1F1B-R by hand: each device's BW reruns its forward, so at c = 0 the
 * pipeline runs (m + p - 1) slots of F + (F + B + W); device d holds p - d
 * kept inputs (r each) when a backward rebuilds one stage's activation f on
 * top: peak ((p - d) r + f) / (p f) of M = p f. */
static void test_recompute_1f1b(void **state) {
    (void)state;
    const double keeps[] = {0, 0.25}; /* 0: the default, f / 16 */
    for (int p = 1; p <= 6; p++)
        for (int ki = 0; ki < 2; ki++) {
            int m = 2 * p + 1;
            pm_sched_req q = {.p = p, .m = m, .t = {1, 1, 1, 0}, .mem = {1, 0, -1, keeps[ki]}};
            pm_sched s;
            pm_err e;
            pm_cost c;
            pm_sim sim;
            assert_int_equal(pm_sched_generate(&s, "1f1b-r", &q, &e), PM_OK);
            assert_true(s.recompute == 1 && !strcmp(s.kind, "1f1b-r"));
            assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
            assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
            assert_true(sim.makespan == (m + p - 1) * 4.0);
            double r = keeps[ki] > 0 ? keeps[ki] : 1.0 / 16;
            for (int d = 0; d < p; d++)
                assert_true(fabs(pm_sim_peak_x(&sim, d) - ((p - d) * r + 1) / p) < 1e-12);
            /* the validator counts the same rise: at the peak it passes,
             * a hair below it refuses */
            double pk = pm_sim_peak_max_x(&sim);
            assert_int_equal(pm_sched_validate(&s, &c, pk, &e), PM_OK);
            assert_int_equal(pm_sched_validate(&s, &c, pk * (1 - 1e-6), &e), PM_ERR_MEMLIMIT);
            /* --recompute is the same as the -r kind */
            pm_sched s2;
            q.recompute = 1;
            assert_int_equal(pm_sched_generate(&s2, "1f1b", &q, &e), PM_OK);
            assert_true(s2.recompute == 1 && s2.len[0] == s.len[0]);
            assert_memory_equal(s2.pass, s.pass, (size_t)s.p * (size_t)s.cap * sizeof *s.pass);
            pm_sched_free(&s2);
            pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
        }
}

/* The text format carries the property both ways. */
static void test_recompute_in_formats(void **state) {
    (void)state;
    pm_sched_req q = {.p = 3, .m = 4, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT};
    pm_sched s, back;
    pm_err e;
    assert_int_equal(pm_sched_generate(&s, "v-half-r", &q, &e), PM_OK);
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_int_equal(pm_sched_write_text(f, &s), PM_OK);
    long n = ftell(f);
    fclose(f);
    assert_true(n > 0 && !strncmp(buf, "# pipemem: recompute\n", 21));
    assert_int_equal(pm_sched_parse_text(&back, buf, (size_t)n, &e), PM_OK);
    assert_true(back.recompute == 1 && back.place == PM_PLACE_V);
    pm_sched_free(&back);
    /* the same comment with anything else on its line is only a comment */
    const char *other = "# pipemem: recompute please\n0F0 0B0\n";
    assert_int_equal(pm_sched_parse_text(&back, other, strlen(other), &e), PM_OK);
    assert_true(back.recompute == 0);
    pm_sched_free(&back);
    pm_sched_free(&s);
}

/* Data parallelism (pm_sim_dp), values by hand.
 * 1F1B p=2 m=2 unit costs (B here is the fused BW, 2 units): device 0 runs
 * F0 [0,1] F1 [1,2], device 1 F0 [1,2] BW0 [2,4] F1 [4,5] BW1 [5,7], then
 * device 0 BW0 [4,6] BW1 [7,9]. With sums of 1: stage 1 [7,8], stage 0
 * [9,10]; spans 10 and 8 - 1 = 7: step 10, serial also 10.
 * zb-v p=1 m=2: one device, 12 passes of 0.5 back to back (stage 1's last
 * W ends at 5, stage 0's at 6). Sums of 2 (stage 1) and 1 (stage 0):
 * stage 1 [5,7]; stage 0 is ready at 6 but the link is busy: [7,8]; step 8.
 * Serial: both after 6: stage 1 [6,8], stage 0 [8,9]: 9. */
static void test_data_parallel_sums(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err;
    pm_sched_req q = {.p = 2, .m = 2, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &q, &err), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &err), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    double one[2] = {1, 1};
    assert_int_equal(pm_sim_dp(&sim, &s, one, &err), PM_OK);
    assert_true(sim.red_start[1] == 7 && sim.red_end[1] == 8);
    assert_true(sim.red_start[0] == 9 && sim.red_end[0] == 10);
    assert_true(sim.dp_step == 10 && sim.dp_step_serial == 10);
    double zero[2] = {0, 0};
    assert_int_equal(pm_sim_dp(&sim, &s, zero, &err), PM_OK); /* replays in place */
    assert_true(sim.dp_step == sim.makespan);
    double bad[2] = {1, NAN};
    assert_int_equal(pm_sim_dp(&sim, &s, bad, &err), PM_ERR_ARG);
    pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
    q = (pm_sched_req){.p = 1, .m = 2, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "zb-v", &q, &err), PM_OK);
    assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &err), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    assert_true(sim.makespan == 6);
    double ar[2] = {1, 2};
    assert_int_equal(pm_sim_dp(&sim, &s, ar, &err), PM_OK);
    assert_true(sim.red_start[1] == 5 && sim.red_end[1] == 7);
    assert_true(sim.red_start[0] == 7 && sim.red_end[0] == 8);
    assert_true(sim.dp_step == 8 && sim.dp_step_serial == 9);
    pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
    /* ring all-reduce: 2 (D-1) (a + n / (D bw)) */
    assert_true(pm_allreduce_cost(4e6, 4, 1e3, 5) == 2.0 * 3 * (5 + 1e3));
    assert_true(pm_allreduce_cost(4e6, 1, 1e3, 5) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_hand_timed),
        cmocka_unit_test(test_latency_on_cross_device_edges_only),
        cmocka_unit_test(test_split_backward_and_per_stage_costs),
        cmocka_unit_test(test_deadlock_named),
        cmocka_unit_test(test_out_of_range_rejected),
        cmocka_unit_test(test_placements),
        cmocka_unit_test(test_linear_in_passes),
        cmocka_unit_test(test_lower_bound_never_beaten),
        cmocka_unit_test(test_lower_bound_equals_reference),
        cmocka_unit_test(test_lower_bound_random_orders),
        cmocka_unit_test(test_lower_bound_under_limits),
        cmocka_unit_test(test_lower_bound_memory_by_hand),
        cmocka_unit_test(test_lower_bound_fused_last_backward),
        cmocka_unit_test(test_recompute_1f1b),
        cmocka_unit_test(test_recompute_in_formats),
        cmocka_unit_test(test_data_parallel_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
