/* test_select.c: model selection's partitioner and policy simulator
 * (issue 10), against facts from shared/reference/hydra.md and brute
 * force:
 *   - Sharded-LRTF's choice rule on hand-made ties (most work left, then
 *     the shard the device holds, then the lower index);
 *   - the paper's toy case: 3 tasks of 2 shards, 4 unit passes each, 2
 *     devices: sequential 12, task 8, shard 6;
 *   - on random instances no policy beats max(total / D, longest task), the
 *     shard policy stays within total / D + (1 - 1/D) longest (Graham), and
 *     sequential takes exactly the total;
 *   - the partitioner's shards fit the budget, cover every layer in order,
 *     and no cut with fewer shards fits (every cut set enumerated);
 *   - a layer too big for the budget is refused naming task, layer, bytes;
 *   - the RAM check and what a sweep needs, by hand; ASHA's rungs and its
 *     promotions on a case worked by hand (the command: test_cli_select.c,
 *     test_cli_sweep.c). */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipemem/pm_select.h"
#include "select/internal.h"
#include "model/passes.h"
#include "train/trainer.h"
#include "select/parts.h"

static double simulate(int n, const int64_t *np, const int *const *sh, const double *const *c,
                       int D, pm_select_policy pol, pm_select_sim *out) {
    pm_select_work w = {n, np, sh, c, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    pm_err e;
    if (pm_select_simulate(&w, D, pol, 0, out, &e)) fail_msg("%s", e.msg);
    return out->makespan;
}

/* The shard policy on w with joining (no_join 0) or without. */
static double simulate_w(const pm_select_work *w, int D, int no_join, pm_select_sim *out) {
    pm_err e;
    if (pm_select_simulate(w, D, PM_POLICY_SHARD, no_join, out, &e)) fail_msg("%s", e.msg);
    return out->makespan;
}

/* Sharded-LRTF's one choice rule (sel_lrtf_pick, used by the simulator and
 * the executor) on hand-made tasks: most work left; within a relative
 * 1e-12 the task whose shard the device holds, then the lower index. */
typedef struct {
    const int *ready, *here;
    const double *left;
} lrtf_case;
static int lc_ready(const void *c, int t) { return ((const lrtf_case *)c)->ready[t]; }
static double lc_left(const void *c, int t) { return ((const lrtf_case *)c)->left[t]; }
static int lc_here(const void *c, int t) { return ((const lrtf_case *)c)->here[t]; }

static int lrtf(const int *ready, const double *left, const int *here, int n) {
    lrtf_case c = {ready, here, left};
    sel_lrtf q = {lc_ready, lc_left, lc_here, NULL, &c};
    return sel_lrtf_pick(&q, n);
}

static void lrtf_choice(void **state) {
    (void)state;
    static const int all[] = {1, 1, 1, 1}, none[] = {0, 0, 0, 0}, not1[] = {1, 0, 1, 1};
    static const int here2[] = {0, 0, 1, 0}, here13[] = {0, 1, 0, 1};
    const double tie[] = {1, 3, 3 * (1 + 1e-13), 2}, apart[] = {1, 3, 3 * (1 + 1e-11), 2};
    assert_int_equal(lrtf(all, tie, none, 4), 1);     /* equal: the lower index */
    assert_int_equal(lrtf(all, tie, here2, 4), 2);    /* equal: the one held */
    assert_int_equal(lrtf(all, apart, none, 4), 2);   /* more left wins */
    assert_int_equal(lrtf(all, apart, here13, 4), 2); /* ... over being held */
    assert_int_equal(lrtf(not1, tie, none, 4), 2);    /* only ready tasks */
    assert_int_equal(lrtf(none, tie, here2, 4), -1);
}

/* The executor's estimate of a task's time left (sel_est_left), by hand:
 * passes at their measured means, the unmeasured one at FLOPs x spf, the
 * work after each step, the evaluations left. */
static void lrtf_estimate(void **state) {
    (void)state;
    const double fl[3] = {1, 2, 3}, sec[3] = {10, 0, 60};
    const int64_t cnt[3] = {2, 0, 3};
    /* passes 5, 2 x 0.5 = 1, 20: a step 26; from pass 1: 21; the step's
     * end 2; two more steps 2 x (26 + 2); one evaluation of 8 FLOPs: 4 */
    sel_est e = {3, 1, fl, sec, cnt, 0.5, 2, -1, 8, 2, 1};
    assert_true(sel_est_left(&e) == 21 + 2 + 2 * 28 + 4);
    e.eval = 7; /* measured: 7 s */
    assert_true(sel_est_left(&e) == 21 + 2 + 2 * 28 + 7);
    e.cnt = NULL; /* nothing measured: FLOPs x spf, 3 a step */
    assert_true(sel_est_left(&e) == 2.5 + 2 + 2 * 5 + 7);
}

/* Deep and narrow against wide and shallow: the wide task has more FLOPs
 * left, but the deep one's passes measured slower (small matrices, many
 * layers). On FLOPs at one rate (the old rule) the wide one goes first; on
 * each task's measured times, the deep one. And a task not measured over a
 * whole step yet goes before both (first()), whatever its FLOPs. */
typedef struct {
    sel_est e[3];
    int measured[3];
} est_case;
static int ec_ready(const void *c, int t) { (void)c, (void)t; return 1; }
static double ec_left(const void *c, int t) { return sel_est_left(&((const est_case *)c)->e[t]); }
static int ec_here(const void *c, int t) { (void)c, (void)t; return 0; }
static int ec_first(const void *c, int t) { return !((const est_case *)c)->measured[t]; }

static void lrtf_measured_times(void **state) {
    (void)state;
    /* deep: 12 layers of dim 32, 3 passes a step of 1 MFLOP each, measured
     * 4 ms each; wide: 2 layers of dim 512, 3 passes of 8 MFLOP, 2 ms each;
     * 10 steps left each, nothing after steps, no evaluation */
    const double fd[3] = {1e6, 1e6, 1e6}, fw[3] = {8e6, 8e6, 8e6};
    const double sd[3] = {8e-3, 8e-3, 8e-3}, sw[3] = {4e-3, 4e-3, 4e-3};
    const int64_t c2[3] = {2, 2, 2};
    est_case c = {{{3, 0, fd, sd, c2, 1e-9, 0, 0, 0, 9, 0},
                   {3, 0, fw, sw, c2, 1e-9, 0, 0, 0, 9, 0}},
                  {1, 1, 1}};
    sel_lrtf q = {ec_ready, ec_left, ec_here, ec_first, &c};
    assert_true(ec_left(&c, 0) > ec_left(&c, 1)); /* 0.12 s against 0.06 s */
    assert_int_equal(sel_lrtf_pick(&q, 2), 0);    /* measured: the deep one */
    c.e[0].cnt = c.e[1].cnt = NULL;               /* FLOPs at one rate */
    assert_int_equal(sel_lrtf_pick(&q, 2), 1);    /* the wide one */
    c.e[2] = (sel_est){3, 0, fd, sd, NULL, 1e-12, 0, 0, 0, 0, 0}; /* tiny, never measured */
    c.measured[2] = 0;
    assert_int_equal(sel_lrtf_pick(&q, 3), 2);
}

static void toy_case(void **state) {
    (void)state;
    static const int s[] = {0, 1, 1, 0};
    static const double c[] = {1, 1, 1, 1};
    const int *sh[3] = {s, s, s};
    const double *co[3] = {c, c, c};
    int64_t np[3] = {4, 4, 4};
    const double want[PM_POLICY_COUNT] = {6, 8, 12};
    for (int p = 0; p < PM_POLICY_COUNT; p++) {
        pm_select_sim r;
        double mk = simulate(3, np, sh, co, 2, (pm_select_policy)p, &r);
        if (mk != want[p]) fail_msg("%s: %g, want %g", pm_select_policy_names[p], mk, want[p]);
        assert_true(r.lower_bound == 6 && r.total == 12);
        assert_true(r.busy[0] + r.busy[1] == 12);
        pm_select_sim_free(&r);
    }
    /* the same with steps and microbatches given: no_join the paper's
     * numbers; joining, shard still 6 (= total / D) and the bound 6 */
    static const int per[3] = {4, 4, 4}, micro[3] = {2, 2, 2};
    for (int nj = 0; nj < 2; nj++)
        for (int p = 0; p < PM_POLICY_COUNT; p++) {
            pm_select_work w = {3, np, sh, co, per, micro, NULL, NULL, NULL, NULL, NULL, NULL};
            pm_select_sim r;
            pm_err e;
            assert_int_equal(pm_select_simulate(&w, 2, (pm_select_policy)p, nj, &r, &e), PM_OK);
            if (r.makespan != want[p])
                fail_msg("%s no_join %d: %g, want %g", pm_select_policy_names[p], nj,
                         r.makespan, want[p]);
            assert_true(r.lower_bound == 6);
            pm_select_sim_free(&r);
        }
}


/* xorshift: the test's own random numbers */
static uint64_t rng = 88172645463325252ull;
static double uni(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void random_instances(void **state) {
    (void)state;
    for (int it = 0; it < 300; it++) {
        int n = 1 + (int)(uni() * 8), D = 1 + (int)(uni() * 5);
        int64_t np[8];
        int *sh[8];
        double *co[8], longest = 0, total = 0;
        for (int t = 0; t < n; t++) {
            int S = 1 + (int)(uni() * 4), steps = 1 + (int)(uni() * 3);
            np[t] = (int64_t)steps * (2 * S - 1);
            sh[t] = malloc((size_t)np[t] * sizeof(int));
            co[t] = malloc((size_t)np[t] * sizeof(double));
            double own = 0;
            for (int64_t k = 0; k < np[t]; k++) {
                int j = (int)(k % (2 * S - 1));
                sh[t][k] = j < S ? j : 2 * S - 2 - j;
                co[t][k] = 0.1 + uni() * (uni() < 0.2 ? 10 : 1);
                own += co[t][k];
            }
            total += own, longest = own > longest ? own : longest;
        }
        double lb = total / D > longest ? total / D : longest;
        for (int p = 0; p < PM_POLICY_COUNT; p++) {
            pm_select_sim r;
            double mk = simulate(n, np, (const int *const *)sh, (const double *const *)co, D,
                                 (pm_select_policy)p, &r);
            assert_true(fabs(r.lower_bound - lb) <= 1e-9 * lb);
            if (mk < lb * (1 - 1e-12)) fail_msg("%s beat the lower bound", pm_select_policy_names[p]);
            if (p == PM_POLICY_SHARD && mk > (total / D + (1 - 1.0 / D) * longest) * (1 + 1e-12))
                fail_msg("shard: %g above Graham's bound (total %g, D %d, longest %g)", mk,
                         total, D, longest);
            if (p == PM_POLICY_SEQUENTIAL) assert_true(fabs(mk - total) <= 1e-9 * total);
            /* no device runs two passes at once, and a task's passes follow
             * one another */
            int64_t g = 0;
            for (int t = 0; t < n; t++)
                for (int64_t k = 0; k < np[t]; k++, g++) {
                    if (k) assert_true(r.start[g] >= r.start[g - 1] + co[t][k - 1] - 1e-9);
                }
            pm_select_sim_free(&r);
        }
        for (int t = 0; t < n; t++) free(sh[t]), free(co[t]);
    }
}

/* One task's step list: `steps` steps of S shards (2S - 1 passes: F of
 * 0..S-2, the fused last, B of S-2..0), each pass costing c. */
static void chain(int S, int steps, double c, int *sh, double *co) {
    for (int i = 0, P = 2 * S - 1; i < steps * P; i++) {
        int k = i % P;
        sh[i] = k < S ? k : 2 * S - 2 - k;
        co[i] = c;
    }
}

/* Joining in the simulator against hand derivations (pm_select.h).
 * One task of S shards, unit passes, K = 2 microbatches (a half each), D
 * = 2, one step: device 0 takes pass 0 at 0 (microbatches end 0.5, 1),
 * device 1 joins pass 1 at 0 (its first microbatch waits for 0.5: 1, 1.5);
 * device 0 free at 1 joins pass 2 (its shard free: pass 0 ended at 1),
 * and so on: pass k taken at k / 2, ending at k / 2 + 1, the last at
 * (2S - 2) / 2 + 1 = S, against 2S - 1 one pass at a time. Two steps:
 * the second starts after the first's last pass (the barrier): 2S. With
 * K = 1 a joined pass can only follow the one before: 2S - 1. */
static void join_by_hand(void **state) {
    (void)state;
    int sh[2 * 11], per[1], micro[1];
    double co[2 * 11];
    const int *shp[1] = {sh};
    const double *cop[1] = {co};
    for (int S = 1; S <= 6; S++)
        for (int steps = 1; steps <= 2; steps++)
            for (int K = 1; K <= 2; K++) {
                int64_t np[1] = {(int64_t)steps * (2 * S - 1)};
                per[0] = 2 * S - 1, micro[0] = K;
                chain(S, steps, 1, sh, co);
                pm_select_work w = {1,    np,   shp,  cop,  per,  micro,
                                    NULL, NULL, NULL, NULL, NULL, NULL};
                pm_select_sim r;
                double alone = steps * (2 * S - 1);
                double want = K == 2 && S > 1 ? steps * S : alone;
                double mk = simulate_w(&w, 2, 0, &r);
                if (mk != want) fail_msg("S %d steps %d K %d: %g, want %g", S, steps, K, mk, want);
                /* the bound: max(total / 2, cost / min(2, S), compute / min(2, S, K)) */
                double lb = S > 1 ? fmax(alone / 2, alone / (K < 2 ? K : 2)) : alone;
                if (r.lower_bound != lb) fail_msg("bound %g, want %g", r.lower_bound, lb);
                pm_select_sim_free(&r);
                assert_true(simulate_w(&w, 2, 1, &r) == alone); /* no_join: one at a time */
                assert_true(r.lower_bound == alone);
                pm_select_sim_free(&r);
                assert_true(simulate_w(&w, 1, 0, &r) == alone); /* one device: none joins */
                pm_select_sim_free(&r);
            }
}

/* The parts before and after the microbatches (pm_select_work.before,
 * after), by hand: S = 2, K = 2, D = 2, one step. (a) Every pass costs 1:
 * 0.25 before, 0.25 after, microbatches 0.25 each. Pass 0 on device 0:
 * before until 0.25, microbatches end 0.5, 0.75, after: ends 1. Pass 1
 * joined by device 1 at 0: before until 0.25, microbatch 0 waits for 0.5
 * (ends 0.75), microbatch 1 for 0.75 (ends 1), ends 1.25. Pass 2 on
 * device 0 at 1 (shard 0 free then): before until 1.25, microbatches end
 * 1.5 and 1.75, the barrier (pass 1 ended at 1.25) holds nothing, ends 2.
 * (b) Pass 0 costs 1 (all compute), pass 1 2 of which 1.5 after (its
 * store), pass 2 2 of which 1 after (the step end and an evaluation).
 * Pass 0: microbatches end 0.5, 1. Pass 1 at 0: 0.25 each, ends 0.75 and
 * 1.25, then 1.5 after: 2.75. Pass 2 at 1: microbatches end 1.5 and 2,
 * then waits for pass 1's end (2.75, the barrier) and its after: 3.75 (not
 * 3). Bound (b): max(5 / 2, 5 / 2, compute 2.5 / 2) = 2.5. */
static void join_parts_by_hand(void **state) {
    (void)state;
    static const int sh[3] = {0, 1, 0}, per[1] = {3}, micro[1] = {2};
    static const double ca[3] = {1, 1, 1}, ba[3] = {0.25, 0.25, 0.25}, aa[3] = {0.25, 0.25, 0.25};
    static const double cb[3] = {1, 2, 2}, bb[3] = {0, 0, 0}, ab[3] = {0, 1.5, 1};
    int64_t np[1] = {3};
    const int *shp[1] = {sh};
    const double *c[2][1] = {{ca}, {cb}}, *b[2][1] = {{ba}, {bb}}, *a[2][1] = {{aa}, {ab}};
    const double want[2][3][2] = {{{0, 1}, {0, 1.25}, {1, 2}}, {{0, 1}, {0, 2.75}, {1, 3.75}}};
    for (int x = 0; x < 2; x++) {
        pm_select_work w = {1, np, shp, c[x], per, micro, b[x], a[x], NULL, NULL, NULL, NULL};
        pm_select_sim r;
        simulate_w(&w, 2, 0, &r);
        for (int k = 0; k < 3; k++)
            if (r.start[k] != want[x][k][0] || r.end[k] != want[x][k][1])
                fail_msg("case %d pass %d: %g..%g, want %g..%g", x, k, r.start[k], r.end[k],
                         want[x][k][0], want[x][k][1]);
        assert_true(r.dev[0] == 0 && r.dev[1] == 1 && r.dev[2] == 0);
        assert_true(r.lower_bound == (x ? 2.5 : 1.5));
        pm_select_sim_free(&r);
        assert_true(simulate_w(&w, 2, 1, &r) == (x ? 5 : 3)); /* no_join: the sum */
        pm_select_sim_free(&r);
    }
}

/* The run's overlaps (issue 31) in the simulator, by hand: one task of 2
 * shards, 1 microbatch, unit passes: a step is F0 (cost 1), the fused
 * last shard (3: F, B, then W, a third, after it puts out its input
 * gradient) and B0 (3: its recomputed forward, a third, before it waits,
 * then B, then W after); between two steps an evaluation's round of 2
 * passes of 2 microbatches (cost 2 each). On 2 devices: F0 on device 0,
 * 0..1; the fused pass joined by device 1 at 0 waits for F0 (1), puts out
 * at 3, ends 4; B0 on device 0 at 1 recomputes until 2, waits for 3, puts
 * out at 4, W until 5 (the round's end). The evaluation: E0 at 5, its
 * microbatches end 6 and 7; E1 joined at 5, after E0's: 7 and 8. The next
 * step as the first, from 8: 13. Without the lead and trail B0 waits for
 * the fused pass's end (4) and ends 7. Bound: the cost over 2 devices (the
 * compute can overlap: no microbatch bound), 9. */
static void join_overlap_by_hand(void **state) {
    (void)state;
    static const int sh[8] = {0, 1, 0, 0, 1, 0, 1, 0}, pos[8] = {0, 1, 2, 0, 1, 0, 1, 2};
    static const int mbs[8] = {1, 1, 1, 2, 2, 1, 1, 1}, per[1] = {3}, micro[1] = {1};
    static const double c[8] = {1, 3, 3, 2, 2, 1, 3, 3};
    static const double lead[8] = {0, 0, 1.0 / 3, 0, 0, 0, 0, 1.0 / 3};
    static const double trail[8] = {0, 1.0 / 3, 1.0 / 3, 0, 0, 0, 1.0 / 3, 1.0 / 3};
    static const double want[8][2] = {{0, 1}, {0, 4}, {1, 5}, {5, 7}, {5, 8}, {8, 9}, {8, 12},
                                      {9, 13}};
    int64_t np[1] = {8};
    const int *shp[1] = {sh}, *posp[1] = {pos}, *mbsp[1] = {mbs};
    const double *cp[1] = {c}, *lp[1] = {lead}, *tp[1] = {trail};
    pm_select_work w = {1, np, shp, cp, per, micro, NULL, NULL, posp, mbsp, lp, tp};
    pm_select_sim r;
    simulate_w(&w, 2, 0, &r);
    for (int k = 0; k < 8; k++)
        if (fabs(r.start[k] - want[k][0]) > 1e-12 || fabs(r.end[k] - want[k][1]) > 1e-12)
            fail_msg("pass %d: %g..%g, want %g..%g", k, r.start[k], r.end[k], want[k][0],
                     want[k][1]);
    assert_true(fabs(r.lower_bound - 9) < 1e-12);
    pm_select_sim_free(&r);
    assert_true(simulate_w(&w, 2, 1, &r) == 18); /* no joining: one pass at a time */
    pm_select_sim_free(&r);
    w.lead = w.trail = NULL;
    simulate_w(&w, 2, 0, &r);
    assert_true(fabs(r.end[2] - 7) < 1e-12);
    pm_select_sim_free(&r);
}

/* Joining on random instances: never below the (joined) lower bound; no
 * device runs two passes at once, no shard of a task is on two devices at
 * once, a step's passes start only after the step before ended, each
 * pass's busy time is its cost; one task (where no other task competes
 * for the devices) never ends later joined than not. */
static void join_random(void **state) {
    (void)state;
    enum { MAXP = 3 * 7 };
    for (int it = 0; it < 400; it++) {
        int n = 1 + (int)(uni() * 3), D = 2 + (int)(uni() * 4);
        if (it % 2) n = 1;
        int64_t np[3];
        int sh[3][MAXP], per[3], micro[3];
        double co[3][MAXP], be[3][MAXP], af[3][MAXP];
        const int *shp[3];
        const double *cop[3], *bep[3], *afp[3];
        for (int t = 0; t < n; t++) {
            int S = 1 + (int)(uni() * 4), steps = 1 + (int)(uni() * 3);
            per[t] = 2 * S - 1, micro[t] = 1 + (int)(uni() * 4);
            np[t] = (int64_t)steps * per[t];
            chain(S, steps, 0, sh[t], co[t]);
            for (int64_t k = 0; k < np[t]; k++) {
                be[t][k] = uni() * 0.3, af[t][k] = uni() * 0.3;
                co[t][k] = be[t][k] + af[t][k] + 0.1 + uni();
            }
            shp[t] = sh[t], cop[t] = co[t], bep[t] = be[t], afp[t] = af[t];
        }
        pm_select_work w = {n, np, shp, cop, per, micro, bep, afp, NULL, NULL, NULL, NULL};
        pm_select_sim r, q;
        double mk = simulate_w(&w, D, 0, &r), alone = simulate_w(&w, D, 1, &q);
        if (mk < r.lower_bound * (1 - 1e-12))
            fail_msg("it %d: %g below the bound %g", it, mk, r.lower_bound);
        assert_true(r.lower_bound <= q.lower_bound);
        if (n == 1 && mk > alone * (1 + 1e-12))
            fail_msg("it %d: one task joined %g, alone %g", it, mk, alone);
        int64_t N = 0;
        for (int t = 0; t < n; t++) N += np[t];
        for (int64_t g = 0; g < N; g++)
            for (int64_t h = 0; h < N; h++) {
                if (g == h) continue;
                int overlap = r.start[g] < r.end[h] - 1e-12 && r.start[h] < r.end[g] - 1e-12;
                if (overlap && r.dev[g] == r.dev[h]) fail_msg("it %d: a device runs two", it);
            }
        for (int t = 0, g0 = 0; t < n; g0 += (int)np[t], t++)
            for (int64_t k = 0; k < np[t]; k++)
                for (int64_t m = 0; m < k; m++) {
                    int same = sh[t][k] == sh[t][m] && k / per[t] == m / per[t];
                    if (same || k / per[t] > m / per[t])
                        assert_true(r.start[g0 + k] >= r.end[g0 + m] - 1e-12);
                    if (k % per[t] == per[t] - 1 && k / per[t] == m / per[t])
                        assert_true(r.end[g0 + k] >= r.end[g0 + m]);
                }
        double busy = 0;
        for (int d = 0; d < D; d++) busy += r.busy[d];
        assert_true(fabs(busy - r.total) <= 1e-9 * r.total);
        pm_select_sim_free(&r), pm_select_sim_free(&q);
    }
}

static pm_train_cfg small_cfg(int layers, int dim) {
    pm_train_cfg c = {.model = {256, 16, dim, 2, layers}, .batch = 4, .micro = 2, .seed = 1};
    pm_optim_defaults(&c.opt, 10);
    return c;
}

static size_t up64(size_t x) { return (x + 63) / 64 * 64; }

/* A shard's bytes from the layout pm_select.h documents, computed here
 * from the model's sizes: state 4 floats per parameter; activation area
 * the first layer's input, every layer's saved, three (B, T, C) float
 * buffers and the largest scratch, each region rounded to 64 bytes. */
static void shard_bytes(const pm_train_cfg *c, int a, int b, size_t *state, size_t *act) {
    size_t saved = 0, sc = 0, in = 0;
    *state = 0;
    for (int l = a; l < b; l++) {
        pm_gpt_sizes z;
        assert_int_equal(pm_gpt_layer_sizes(&c->model, l, c->batch / c->micro, c->model.ctx, &z,
                                            NULL), PM_OK);
        *state += up64(16 * pm_gpt_layer_params(&c->model, l));
        saved += up64(z.saved);
        size_t x = z.scratch_f > z.scratch_b ? z.scratch_f : z.scratch_b;
        x = z.scratch_w > x ? z.scratch_w : x;
        sc = up64(x) > sc ? up64(x) : sc;
        if (l == a) in = up64(z.in);
    }
    size_t btc = (size_t)(c->batch / c->micro) * (size_t)c->model.ctx * (size_t)c->model.dim * 4;
    *act = in + saved + 3 * up64(btc) + sc;
}

/* Fewest shards of one task over every cut set that fits slots * largest
 * state + largest act <= mem (0 if none does). */
static int brute_min_shards(const pm_train_cfg *c, size_t mem, int slots) {
    int L = c->model.layers + 2, best = 0;
    for (unsigned mask = 0; mask < 1u << (L - 1); mask++) { /* bit l: cut after layer l */
        int ns = 0, a = 0;
        size_t smax = 0, amax = 0;
        for (int l = 0; l < L; l++)
            if (l == L - 1 || (mask >> l & 1)) {
                size_t s, x;
                shard_bytes(c, a, l + 1, &s, &x);
                smax = s > smax ? s : smax, amax = x > amax ? x : amax;
                ns++, a = l + 1;
            }
        if ((size_t)slots * smax + amax <= mem && (!best || ns < best)) best = ns;
    }
    return best;
}

static void partition_fits_and_is_minimal(void **state) {
    (void)state;
    pm_train_cfg c = small_cfg(5, 32);
    size_t whole_s, whole_a;
    shard_bytes(&c, 0, 7, &whole_s, &whole_a);
    int checked = 0;
    for (int slots = 1; slots <= 2; slots++)
        for (int k = 1; k <= 40; k++) {
            size_t mem = (size_t)((slots * whole_s + whole_a) * (0.05 + 0.03 * k));
            int want = brute_min_shards(&c, mem, slots);
            pm_select_task t = {.cfg = c, .name = "t0"};
            pm_select_layout lay;
            pm_err e;
            pm_status st = pm_select_partition(&t, 1, mem, slots, &lay, &e);
            if (!want) {
                assert_int_equal(st, PM_ERR_MEMLIMIT);
                continue;
            }
            if (st) fail_msg("mem %zu slots %d: %s (brute force cuts %d)", mem, slots, e.msg, want);
            if (t.nshard != want)
                fail_msg("mem %zu slots %d: %d shards, fewest possible %d", mem, slots, t.nshard, want);
            size_t smax = 0, amax = 0;
            for (int i = 0; i < t.nshard; i++) {
                size_t s, x;
                assert_int_equal(t.shard[i].first, i ? t.shard[i - 1].last : 0);
                shard_bytes(&c, t.shard[i].first, t.shard[i].last, &s, &x);
                assert_true(s == t.shard[i].state && x == t.shard[i].act);
                smax = s > smax ? s : smax, amax = x > amax ? x : amax;
            }
            assert_int_equal(t.shard[t.nshard - 1].last, 7);
            assert_true(lay.state_slot == smax && lay.act_slot == amax);
            assert_true((size_t)slots * smax + amax <= mem);
            pm_select_task_free(&t);
            checked++;
        }
    assert_true(checked > 40);
}

/* A budget that holds one layer at a time puts the embedding, which makes
 * no FLOPs, in a shard of its own. Its passes still cost: the fractions of
 * a pass before and after its wait are 0 (not 0 / 0), every pass's are in
 * [0, 1] and sum to at most 1, and the simulator takes them. */
static void costs_of_a_pass_without_flops(void **state) {
    (void)state;
    pm_select_task t = {.cfg = small_cfg(2, 64), .name = "alone"};
    size_t mx = 0;
    for (int l = 0; l < 4; l++) {
        size_t s, a;
        assert_int_equal(pm_select_layer_bytes(&t.cfg, l, &s, &a, NULL), PM_OK);
        mx = 2 * s + a > mx ? 2 * s + a : mx;
    }
    pm_select_layout lay;
    pm_err e;
    if (pm_select_partition(&t, 1, mx, 2, &lay, &e)) fail_msg("%s", e.msg);
    assert_int_equal(t.nshard, 4); /* the embedding, two blocks, the head */
    assert_true(t.shard[0].flops_f == 0 && t.shard[0].flops_bw == 0);
    pm_select_rates r = {.flops = 1e9, .read_bps = 1e9, .write_bps = 1e9, .adamw_s = 1e-9};
    pm_select_costs c;
    assert_int_equal(pm_select_task_costs(&t, 2, 0, 1, &r, &c, &e), PM_OK);
    int zero = 0;
    for (int64_t i = 0; i < c.n; i++) {
        if (!(c.lead[i] >= 0 && c.trail[i] >= 0 && c.lead[i] + c.trail[i] <= 1))
            fail_msg("pass %lld: lead %g, trail %g", (long long)i, c.lead[i], c.trail[i]);
        zero += c.shard[i] == 0 && c.compute[i] == 0;
    }
    assert_true(zero >= 4); /* F and B of the embedding's shard, two steps */
    int64_t n = c.n;
    const double *cost = c.compute;
    const int *shard = c.shard;
    pm_select_work w = {.ntask = 1, .npass = &n, .cost = &cost, .shard = &shard,
                        .lead = (const double *const *)&c.lead,
                        .trail = (const double *const *)&c.trail};
    pm_select_sim out;
    assert_int_equal(pm_select_simulate(&w, 1, PM_POLICY_SHARD, 0, &out, &e), PM_OK);
    pm_select_sim_free(&out);
    pm_select_costs_free(&c);
    pm_select_task_free(&t);
}

static void partition_refuses_a_layer_too_big(void **state) {
    (void)state;
    pm_train_cfg c = small_cfg(2, 64);
    size_t need[4], mx = 0;
    for (int l = 0; l < 4; l++) {
        size_t s, a;
        assert_int_equal(pm_select_layer_bytes(&c, l, &s, &a, NULL), PM_OK);
        need[l] = 2 * s + a;
        mx = need[l] > mx ? need[l] : mx;
    }
    pm_select_task t[2] = {{.cfg = small_cfg(2, 16), .name = "small"}, {.cfg = c, .name = "wide"}};
    pm_err e;
    assert_int_equal(pm_select_partition(t, 2, mx - 1, 2, NULL, &e), PM_ERR_MEMLIMIT);
    /* the message names the wide task, a layer over the budget and its bytes */
    const char *at = strstr(e.msg, "task wide: layer ");
    if (!at) fail_msg("'%s'", e.msg);
    int l = atoi(at + strlen("task wide: layer "));
    assert_true(l >= 0 && l < 4 && need[l] > mx - 1);
    char want[64];
    snprintf(want, sizeof want, "needs %zu bytes", need[l]);
    if (!strstr(e.msg, want)) fail_msg("'%s' does not say '%s'", e.msg, want);
    /* with room, the two tasks share one layout */
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(t, 2, 4 * mx, 2, &lay, &e), PM_OK);
    assert_true(lay.slots * lay.state_slot + lay.act_slot <= 4 * mx);
    /* a head cut in parts: shards hold whole layers and pass (B, T, C) */
    pm_select_task h = {.cfg = small_cfg(2, 16), .name = "parts"};
    h.cfg.model.vocab = 8200, h.cfg.model.head_parts = 2;
    assert_int_equal(pm_gpt_config_check(&h.cfg.model, NULL), PM_OK);
    assert_int_equal(pm_select_partition(&h, 1, 4 * mx, 2, &lay, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "task parts: a head cut into 2 parts"));
    pm_select_task_free(&t[0]), pm_select_task_free(&t[1]), pm_select_task_free(&h);
}

/* ---- training: bitwise the single-device trainer ------------------------ */

#define NT 3
#define MAXSTEPS 6
static uint8_t corpus[4000];

static pm_train_cfg task_cfg(int i) {
    static const int32_t layers[NT] = {2, 3, 4}, dim[NT] = {16, 16, 16}, heads[NT] = {2, 2, 4};
    static const int micro[NT] = {2, 4, 1}, steps[NT] = {5, 4, 6};
    static const float lr[NT] = {1e-2f, 3e-3f, 5e-3f};
    pm_train_cfg c = {.model = {256, 8, dim[i], heads[i], layers[i]}, .batch = 4,
                      .micro = micro[i], .seed = (uint64_t)(7 + i)};
    pm_optim_defaults(&c.opt, steps[i]);
    c.opt.lr = lr[i];
    c.opt.grad_clip = 0.5f; /* small, so clipping is exercised */
    return c;
}

/* The NT tasks t0.. of task_cfg. */
static void tasks_of(pm_select_task *tasks) {
    for (int i = 0; i < NT; i++) {
        tasks[i] = (pm_select_task){.cfg = task_cfg(i)};
        snprintf(tasks[i].name, sizeof tasks[i].name, "t%d", i);
    }
}

typedef struct {
    double loss[NT][MAXSTEPS], val[NT];
    float *params[NT];
} sel_ref;

static void reference_runs(const pm_tokens *tok, sel_ref *r) {
    pm_blas_threads(1);
    for (int i = 0; i < NT; i++) {
        pm_train_cfg c = task_cfg(i);
        pm_trainer t;
        pm_err e;
        assert_int_equal(pm_trainer_init(&t, &c, tok, 0, &e), PM_OK);
        for (int s = 0; s < c.opt.steps; s++) {
            pm_step_info info;
            assert_int_equal(pm_trainer_step(&t, &info, &e), PM_OK);
            r->loss[i][s] = info.loss;
        }
        assert_int_equal(pm_trainer_eval(&t, tok, 2, &r->val[i], &e), PM_OK);
        r->params[i] = malloc(t.n_params * sizeof(float));
        memcpy(r->params[i], t.params, t.n_params * sizeof(float));
        pm_trainer_free(&t);
    }
}

typedef struct {
    double loss[NT][MAXSTEPS];
    int seen[NT];
} sel_log;

static void log_event(void *ctx, const pm_select_event *ev) {
    sel_log *lg = ctx;
    if (ev->kind == PM_SELECT_EV_FAILED) return;
    lg->loss[ev->task][ev->step - 1] = ev->loss;
    lg->seen[ev->task]++;
}

/* The test text: letters from the test's own generator (filled once). */
static void corpus_init(void) {
    if (corpus[0]) return;
    for (size_t i = 0; i < sizeof corpus; i++) corpus[i] = (uint8_t)('a' + (int)(uni() * 26));
}

/* The pass log: every pass of every task once, and no device ever in two
 * passes at once, nor a shard (a task in two passes at once only if one
 * joined it, on two shards); a pass's waits for other devices within its
 * microbatches; each entry's parts in
 * order, a device's entries (with the work after each pass) never
 * overlapping, and each device's parts adding up to the makespan. */
static void check_log(const pm_select_stats *st, const pm_select_task *t, int n, int every) {
    int64_t want = 0;
    for (int i = 0; i < n; i++) { /* and an evaluation's S passes (one chunk) every `every`
                                     steps and at the end (every 0: at the end; -1: none) */
        int64_t steps = t[i].cfg.opt.steps;
        int64_t evals = every < 0 ? 0 : every == 0 ? 1 : steps / every + (steps % every != 0);
        want += steps * (2 * t[i].nshard - 1) + evals * t[i].nshard;
    }
    assert_int_equal(st->nlog, want);
    for (int64_t a = 0; a < st->nlog; a++) {
        const pm_select_pass *x = &st->log[a];
        const double at[] = {0,           x->start,    x->loaded,   x->updated, x->computed,
                             x->end,      x->step_end, x->eval_end, x->wait0,   x->wait1,
                             st->makespan_s};
        for (size_t k = 1; k < sizeof at / sizeof at[0]; k++)
            if (at[k] < at[k - 1] - 1e-9) fail_msg("pass %lld: its parts out of order", (long long)a);
        assert_true(x->copy1 >= x->copy0);
        assert_true(x->flow >= 0 && x->flow <= x->computed - x->updated + 1e-9);
        for (int64_t b = a + 1; b < st->nlog; b++) {
            const pm_select_pass *y = &st->log[b];
            int same = x->dev == y->dev || (x->task == y->task &&
                                            (x->shard == y->shard || (!x->joined && !y->joined)));
            if (same && x->start < y->end - 1e-9 && y->start < x->end - 1e-9)
                fail_msg("passes %lld and %lld overlap on device %d / task %d", (long long)a,
                         (long long)b, x->dev, x->task);
            if (x->dev == y->dev && x->start < y->wait1 - 1e-9 && y->start < x->wait1 - 1e-9)
                fail_msg("passes %lld and %lld: their device's work overlaps", (long long)a,
                         (long long)b);
        }
    }
    for (int d = 0; d < st->devices; d++) {
        double sum = 0;
        for (int p = 0; p < PM_PART_COUNT; p++) {
            double s = st->part[(size_t)d * PM_PART_COUNT + p];
            if (s < -1e-9) fail_msg("device %d: %s %g s", d, pm_select_part_names[p], s);
            sum += s;
        }
        assert_true(fabs(sum - st->makespan_s) <= 1e-9 * st->makespan_s);
    }
}

/* Every policy at D = 1, 2, 3, with one state slot, two (prefetch) and two
 * with the state spilled to disk: each task's losses, validation loss and
 * parameters bitwise those of training it alone. */
static void train_exact(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    sel_ref ref;
    reference_runs(&tok, &ref);
    int runs = 0;
    char sdir[128];
    snprintf(sdir, sizeof sdir, "/tmp/pm_test_spill_all_%d", (int)getpid());
    assert_int_equal(mkdir(sdir, 0777), 0);
    /* variants: one state slot, two (prefetch), two with the state spilled */
    for (int var = 0; var < 3; var++)
        for (int D = 1; D <= 3; D++)
            for (int pol = 0; pol < PM_POLICY_COUNT; pol++) {
                int slots = var ? 2 : 1;
                pm_select_task tasks[NT];
                pm_trainer hosts[NT];
                pm_err e;
                size_t whole = SIZE_MAX; /* the smallest task's own whole size */
                tasks_of(tasks);
                for (int i = 0; i < NT; i++) {
                    size_t s, a, st = 0, mx = 0;
                    for (int l = 0; l < pm_gpt_num_layers(&tasks[i].cfg.model); l++) {
                        assert_int_equal(pm_select_layer_bytes(&tasks[i].cfg, l, &s, &a, NULL), PM_OK);
                        st += s, mx = a > mx ? a : mx;
                    }
                    whole = slots * st + mx < whole ? slots * st + mx : whole;
                }
                pm_select_layout lay;
                /* a budget that cuts every task into at least two shards */
                if (pm_select_partition(tasks, NT, whole * 9 / 10, slots, &lay, &e))
                    fail_msg("slots %d: %s", slots, e.msg);
                for (int i = 0; i < NT; i++) {
                    if (tasks[i].nshard < 2) fail_msg("task %d: %d shard", i, tasks[i].nshard);
                    assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
                }
                sel_log lg = {{{0}}, {0}};
                pm_select_opts o = {.devices = D, .policy = (pm_select_policy)pol,
                                    .prefetch = slots == 2, .eval_every = 2,
                                    .eval_batches = 2, .val = &tok, .report = log_event,
                                    .report_ctx = &lg, .spill_dir = var == 2 ? sdir : NULL};
                pm_select_result res[NT];
                pm_select_stats stats;
                if (pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e))
                    fail_msg("D=%d %s: %s", D, pm_select_policy_names[pol], e.msg);
                check_log(&stats, tasks, NT, 2);
                for (int i = 0; i < NT; i++) {
                    int steps = tasks[i].cfg.opt.steps;
                    assert_int_equal(res[i].state, PM_SELECT_DONE);
                    assert_int_equal(lg.seen[i], steps);
                    for (int k = 0; k < steps; k++)
                        if (memcmp(&lg.loss[i][k], &ref.loss[i][k], sizeof(double)))
                            fail_msg("slots %d D=%d %s task %d step %d: loss %.17g, alone %.17g",
                                     slots, D, pm_select_policy_names[pol], i, k, lg.loss[i][k],
                                     ref.loss[i][k]);
                    if (memcmp(&res[i].val_loss, &ref.val[i], sizeof(double)))
                        fail_msg("task %d: val %.17g, alone %.17g", i, res[i].val_loss, ref.val[i]);
                    assert_int_equal(pm_select_host_load(&tasks[i], &hosts[i], &e), PM_OK);
                    if (memcmp(hosts[i].params, ref.params[i], hosts[i].n_params * sizeof(float)))
                        fail_msg("slots %d D=%d %s task %d: parameters differ", slots, D,
                                 pm_select_policy_names[pol], i);
                    pm_trainer_free(&hosts[i]);
                    pm_select_task_free(&tasks[i]);
                }
                for (int d = 0; d < D; d++) assert_true(stats.peak[d] <= lay.device_mem);
                pm_select_stats_free(&stats);
                runs++;
            }
    for (int i = 0; i < NT; i++) free(ref.params[i]);
    assert_int_equal(runs, 27);
    assert_int_equal(rmdir(sdir), 0); /* the spill files went with their tasks */
}

/* ---- one task on several devices: the others join it --------------------- */

/* Task partitioned into 4 shards or more: the largest device budget, from
 * 4 MiB down by eighths, that cuts it so. */
static void four_shards(pm_select_task *task, pm_select_layout *lay) {
    pm_err e;
    size_t mem = 1 << 22;
    do {
        if (pm_select_partition(task, 1, mem, 2, lay, &e)) fail_msg("%s", e.msg);
        mem = mem * 7 / 8;
    } while (task->nshard < 4);
}

/* One task of 6 blocks in 4 or more shards, on 2 and 4 devices, its state
 * in RAM (prefetch on) or spilled: bitwise as trained alone (every step's
 * loss, the validation loss, the parameters), with joining on and off.
 * On: the devices start together (the start gate), so the first to choose
 * takes the first pass and each of the others joins the next pass of the
 * same step at once (passes 0..D-1 are on shards 0..D-1, all different):
 * at least D - 1 joined passes, in a run where no other task could keep a
 * device busy. Off: none, and the task never on two devices at once. */
static void join_one_task(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    pm_train_cfg c = {.model = {256, 8, 16, 2, 6}, .batch = 4, .micro = 4, .seed = 11};
    pm_optim_defaults(&c.opt, 4);
    c.opt.lr = 5e-3f;
    c.opt.grad_clip = 0.5f;
    pm_err e;
    pm_trainer ref;
    double loss[4], val;
    assert_int_equal(pm_trainer_init(&ref, &c, &tok, 0, &e), PM_OK);
    for (int s = 0; s < 4; s++) {
        pm_step_info info;
        assert_int_equal(pm_trainer_step(&ref, &info, &e), PM_OK);
        loss[s] = info.loss;
    }
    assert_int_equal(pm_trainer_eval(&ref, &tok, 2, &val, &e), PM_OK);
    char sdir[128];
    snprintf(sdir, sizeof sdir, "/tmp/pm_test_join_%d", (int)getpid());
    assert_int_equal(mkdir(sdir, 0777), 0);
    for (int D = 2; D <= 4; D += 2)
        for (int join = 0; join < 2; join++)
            for (int spill = 0; spill < 2; spill++) {
                pm_select_task task = {.cfg = c, .name = "one"};
                pm_select_layout lay;
                four_shards(&task, &lay);
                pm_trainer h;
                assert_int_equal(pm_trainer_init(&h, &c, &tok, 0, &e), PM_OK);
                sel_log lg = {{{0}}, {0}};
                pm_select_opts o = {.devices = D, .policy = PM_POLICY_SHARD, .prefetch = 1,
                                    .no_join = !join, .eval_every = 0, .eval_batches = 2,
                                    .val = &tok, .report = log_event, .report_ctx = &lg,
                                    .spill_dir = spill ? sdir : NULL};
                pm_select_result res;
                pm_select_stats st;
                if (pm_select_run(&task, &h, 1, &lay, &o, &res, &st, &e))
                    fail_msg("D=%d join %d: %s", D, join, e.msg);
                check_log(&st, &task, 1, 0);
                assert_int_equal(res.state, PM_SELECT_DONE);
                assert_int_equal(lg.seen[0], 4);
                for (int s = 0; s < 4; s++)
                    if (memcmp(&lg.loss[0][s], &loss[s], sizeof(double)))
                        fail_msg("D=%d join %d spill %d step %d: loss %.17g, alone %.17g", D,
                                 join, spill, s, lg.loss[0][s], loss[s]);
                assert_memory_equal(&res.val_loss, &val, sizeof(double));
                assert_int_equal(pm_select_host_load(&task, &h, &e), PM_OK);
                if (memcmp(h.params, ref.params, ref.n_params * sizeof(float)))
                    fail_msg("D=%d join %d spill %d: parameters differ", D, join, spill);
                int64_t joined = 0, overlap = 0;
                for (int64_t a = 0; a < st.nlog; a++) {
                    joined += st.log[a].joined;
                    for (int64_t b = a + 1; b < st.nlog; b++)
                        overlap += st.log[a].start < st.log[b].end &&
                                   st.log[b].start < st.log[a].end;
                }
                assert_int_equal(joined, st.joined);
                if (join && st.joined < D - 1)
                    fail_msg("D=%d: %lld joined passes, not at least %d", D,
                             (long long)st.joined, D - 1);
                if (!join) assert_int_equal(st.joined, 0), assert_int_equal(overlap, 0);
                /* the bound holds (joined, the task's passes are counted over
                 * min(D, shards) devices, else a joined run could beat it);
                 * not joined, one task's bound is all of its work */
                if (st.lower_bound_s > st.makespan_s * (1 + 1e-9))
                    fail_msg("D=%d join %d: lower bound %.6f s above the makespan %.6f s", D,
                             join, st.lower_bound_s, st.makespan_s);
                if (!join) assert_true(fabs(st.lower_bound_s - res.work_s) <= 1e-12 * res.work_s);
                pm_select_stats_free(&st);
                pm_trainer_free(&h);
                pm_select_task_free(&task);
            }
    pm_trainer_free(&ref);
    assert_int_equal(rmdir(sdir), 0);
}

/* Each evaluation's validation loss, by step (issue 31). */
typedef struct {
    double val[8];
    int n;
} ev_log;

static void log_eval(void *ctx, const pm_select_event *ev) {
    ev_log *lg = ctx;
    if ((ev->kind == PM_SELECT_EV_EVAL || ev->kind == PM_SELECT_EV_DONE) && ev->step <= 8)
        lg->val[ev->step - 1] = ev->val_loss, lg->n++;
}

/* Evaluation through the shards (issue 31, "select for daily use" 1): one
 * task of 6 blocks in 4 or more shards, one microbatch a step (the issue's
 * case), evaluated after every step on 4 batches (one chunk) and on 11
 * (chunks of 8 and 3), on 1, 2 and 3 devices joining: each evaluation's
 * loss bitwise pm_trainer_eval's on the task trained alone to that step;
 * each evaluation is a round of passes of kind 3, one per shard and
 * chunk; the device time of those passes (less their waits) is counted
 * as evaluation. */
static void eval_through_shards(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    pm_train_cfg c = {.model = {256, 8, 16, 2, 6}, .batch = 4, .micro = 1, .seed = 12};
    pm_optim_defaults(&c.opt, 3);
    c.opt.lr = 5e-3f;
    pm_err e;
    const int batches[2] = {4, 11};
    for (int b = 0; b < 2; b++) {
        pm_trainer ref;
        double val[3];
        assert_int_equal(pm_trainer_init(&ref, &c, &tok, 0, &e), PM_OK);
        for (int s = 0; s < 3; s++) {
            pm_step_info info;
            assert_int_equal(pm_trainer_step(&ref, &info, &e), PM_OK);
            assert_int_equal(pm_trainer_eval(&ref, &tok, batches[b], &val[s], &e), PM_OK);
        }
        pm_trainer_free(&ref);
        for (int D = 1; D <= 3; D++) {
            pm_select_task task = {.cfg = c, .name = "one"};
            pm_select_layout lay;
            four_shards(&task, &lay);
            int S = task.nshard, chunks = (batches[b] + 7) / 8;
            pm_trainer h;
            assert_int_equal(pm_trainer_init(&h, &c, &tok, 0, &e), PM_OK);
            ev_log lg = {{0}, 0};
            pm_select_opts o = {.devices = D, .policy = PM_POLICY_SHARD, .prefetch = 1,
                                .eval_every = 1, .eval_batches = batches[b], .val = &tok,
                                .report = log_eval, .report_ctx = &lg};
            pm_select_result res;
            pm_select_stats st;
            if (pm_select_run(&task, &h, 1, &lay, &o, &res, &st, &e))
                fail_msg("D=%d: %s", D, e.msg);
            assert_int_equal(lg.n, 3);
            for (int s = 0; s < 3; s++)
                if (memcmp(&lg.val[s], &val[s], sizeof(double)))
                    fail_msg("%d batches, D=%d, step %d: val %.17g, alone %.17g", batches[b], D,
                             s + 1, lg.val[s], val[s]);
            int64_t per_shard[16] = {0};
            double ev_s = 0, part = 0;
            assert_true(S <= 16);
            for (int64_t a = 0; a < st.nlog; a++) {
                const pm_select_pass *p = &st.log[a];
                if (p->kind != 3) continue;
                per_shard[p->shard]++;
                ev_s += p->end - p->start - p->flow;
            }
            for (int q = 0; q < S; q++) /* each shard once a chunk, every evaluation */
                assert_int_equal(per_shard[q], 3 * chunks);
            for (int d = 0; d < D; d++) part += st.part[(size_t)d * PM_PART_COUNT + PM_PART_EVAL];
            assert_true(part >= ev_s * (1 - 1e-9));
            pm_select_stats_free(&st);
            pm_trainer_free(&h);
            pm_select_task_free(&task);
        }
    }
}

/* A joined task whose spill file stops taking writes in the middle of a
 * run: after step 1 the report swaps the file's descriptor for a read-only
 * one on the same file, so the passes of step 2 that write back fail, on
 * whichever devices joined it, possibly at once. The run returns (no pass
 * waits forever for a microbatch of a failed one), the task fails once
 * (one FAILED event) after step 1, with the store's reason. */
static int swap_fd;
static int swap_failed, swap_steps;
static void swap_event(void *ctx, const pm_select_event *ev) {
    const pm_select_task *task = ctx;
    if (ev->kind == PM_SELECT_EV_FAILED) swap_failed++;
    if (ev->kind != PM_SELECT_EV_STEP || ++swap_steps != 1) return;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", task->spill_fd);
    swap_fd = open(path, O_RDONLY);
    assert_true(swap_fd >= 0);
    assert_int_equal(dup2(swap_fd, task->spill_fd), task->spill_fd);
    close(swap_fd);
}

static void join_store_fails(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    pm_train_cfg c = {.model = {256, 8, 16, 2, 6}, .batch = 4, .micro = 4, .seed = 11};
    pm_optim_defaults(&c.opt, 4);
    char sdir[128];
    snprintf(sdir, sizeof sdir, "/tmp/pm_test_join_fail_%d", (int)getpid());
    assert_int_equal(mkdir(sdir, 0777), 0);
    pm_err e;
    for (int D = 2; D <= 4; D += 2) {
        pm_select_task task = {.cfg = c, .name = "one"};
        pm_select_layout lay;
        four_shards(&task, &lay);
        pm_trainer h;
        assert_int_equal(pm_trainer_init(&h, &c, &tok, 0, &e), PM_OK);
        swap_failed = swap_steps = 0;
        pm_select_opts o = {.devices = D, .policy = PM_POLICY_SHARD, .prefetch = 1,
                            .eval_every = 0, .eval_batches = 2, .val = &tok,
                            .report = swap_event, .report_ctx = &task, .spill_dir = sdir};
        pm_select_result res;
        pm_select_stats st;
        if (pm_select_run(&task, &h, 1, &lay, &o, &res, &st, &e))
            fail_msg("D=%d: %s", D, e.msg);
        assert_int_equal(res.state, PM_SELECT_FAILED);
        assert_int_equal(swap_failed, 1);
        assert_int_equal(res.steps, 1);
        if (strncmp(res.why, "spill file: ", 12)) fail_msg("D=%d: why '%s'", D, res.why);
        assert_true(st.joined >= 1);
        pm_select_stats_free(&st);
        pm_trainer_free(&h);
        pm_select_task_free(&task);
        char f[200];
        snprintf(f, sizeof f, "%s/one.state", sdir);
        unlink(f);
    }
    assert_int_equal(rmdir(sdir), 0);
}

/* --spill DIR: the same training bitwise, with no task's slabs in RAM
 * between its passes (checked at every event), and nothing left in DIR. */
static pm_trainer *spill_hosts;
static int spill_seen;
static void spill_event(void *ctx, const pm_select_event *ev) {
    (void)ctx;
    if (ev->kind == PM_SELECT_EV_FAILED) fail_msg("task %d failed", ev->task);
    if (spill_hosts[ev->task].params) fail_msg("task %d's state is in RAM at an event", ev->task);
    spill_seen++;
}

/* In the executor, on one device with prefetch (the choice of what follows
 * a pass is made as it starts): given step times (est_step_s) that reverse
 * the FLOP order, the deep, narrow task (8 layers of dim 32, cut into
 * shards) goes first and continues, pass after pass, until it ends; then
 * the wide, shallow one (4 layers of dim 64, more FLOPs a step) runs. Its
 * old rule claimed another task at every pass. Both train bitwise as alone.
 * One device: the order depends on nothing measured. */
static void lrtf_run_order(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    pm_select_task t[2];
    pm_trainer h[2];
    const int layers[2] = {8, 4}, dim[2] = {32, 64}, steps[2] = {2, 1};
    for (int i = 0; i < 2; i++) {
        pm_train_cfg c = {.model = {256, 8, dim[i], 2, layers[i]}, .batch = 4, .micro = 2,
                          .seed = 3};
        pm_optim_defaults(&c.opt, steps[i]);
        t[i] = (pm_select_task){.cfg = c};
        snprintf(t[i].name, sizeof t[i].name, "%s", i ? "wide" : "deep");
    }
    pm_select_layout lay;
    pm_err e;
    if (pm_select_partition(t, 2, 2500000, 2, &lay, &e)) fail_msg("%s", e.msg);
    assert_true(t[0].nshard >= 2);
    double fl[2] = {0, 0}; /* a step's FLOPs: the wide task has more */
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < t[i].nshard; s++)
            fl[i] += t[i].shard[s].flops_f + t[i].shard[s].flops_bw;
    assert_true(fl[1] > fl[0]);
    for (int i = 0; i < 2; i++) assert_int_equal(pm_trainer_init(&h[i], &t[i].cfg, &tok, 0, &e), PM_OK);
    const double est[2] = {10, 1e-3};
    pm_select_opts o = {.devices = 1, .policy = PM_POLICY_SHARD, .prefetch = 1,
                        .eval_every = 0, .eval_batches = 1, .est_step_s = est};
    pm_select_result res[2];
    pm_select_stats st;
    if (pm_select_run(t, h, 2, &lay, &o, res, &st, &e)) fail_msg("%s", e.msg);
    check_log(&st, t, 2, -1);
    int64_t deep = (int64_t)steps[0] * (2 * t[0].nshard - 1);
    for (int64_t k = 0; k < st.nlog; k++)
        if (st.log[k].task != (k < deep ? 0 : 1))
            fail_msg("pass %lld ran task %d: the deep task should run all its %lld passes first",
                     (long long)k, st.log[k].task, (long long)deep);
    for (int i = 0; i < 2; i++) { /* and each as alone */
        pm_trainer a;
        pm_step_info info;
        assert_int_equal(res[i].state, PM_SELECT_DONE);
        assert_int_equal(pm_trainer_init(&a, &t[i].cfg, &tok, 0, &e), PM_OK);
        for (int k = 0; k < steps[i]; k++) assert_int_equal(pm_trainer_step(&a, &info, &e), PM_OK);
        if (memcmp(&info.loss, &res[i].final_loss, sizeof(double)) ||
            memcmp(a.params, h[i].params, a.n_params * sizeof(float)))
            fail_msg("task %s differs from training it alone", t[i].name);
        pm_trainer_free(&a);
        pm_trainer_free(&h[i]);
        pm_select_task_free(&t[i]);
    }
    pm_select_stats_free(&st);
}

static void spill_exact(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    sel_ref ref;
    reference_runs(&tok, &ref);
    char sdir[128];
    snprintf(sdir, sizeof sdir, "/tmp/pm_test_spill_%d", (int)getpid());
    assert_int_equal(mkdir(sdir, 0777), 0);
    pm_select_task tasks[NT];
    pm_trainer hosts[NT];
    pm_err e;
    tasks_of(tasks);
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(tasks, NT, 1 << 21, 2, &lay, &e), PM_OK);
    for (int i = 0; i < NT; i++) {
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
        /* half spilled as soon as made (as the CLI does), half by the run */
        if (i % 2) assert_int_equal(pm_select_spill(&tasks[i], &hosts[i], sdir, &e), PM_OK);
        if (i % 2) assert_null(hosts[i].params);
    }
    spill_hosts = hosts, spill_seen = 0;
    pm_select_opts o = {.devices = 2, .policy = PM_POLICY_SHARD, .prefetch = 1, .eval_every = 2,
                        .eval_batches = 2, .val = &tok, .spill_dir = sdir,
                        .report = spill_event};
    pm_select_result res[NT];
    pm_select_stats stats;
    assert_int_equal(pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e), PM_OK);
    assert_true(spill_seen > NT);
    for (int i = 0; i < NT; i++) {
        assert_int_equal(res[i].state, PM_SELECT_DONE);
        assert_true(tasks[i].spilled && !hosts[i].params); /* still spilled after the run */
        assert_int_equal(pm_select_host_load(&tasks[i], &hosts[i], &e), PM_OK);
        assert_memory_equal(hosts[i].params, ref.params[i], hosts[i].n_params * sizeof(float));
        assert_memory_equal(&res[i].val_loss, &ref.val[i], sizeof(double));
        pm_trainer_free(&hosts[i]), pm_select_task_free(&tasks[i]), free(ref.params[i]);
    }
    pm_select_stats_free(&stats);
    assert_int_equal(rmdir(sdir), 0); /* nothing left behind */
    /* a directory that cannot hold the files: one clear error */
    tasks_of(tasks);
    assert_int_equal(pm_select_partition(tasks, NT, 1 << 21, 2, &lay, &e), PM_OK);
    for (int i = 0; i < NT; i++)
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
    o.spill_dir = "/nonexistent-dir";
    o.report = NULL;
    assert_int_equal(pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e), PM_ERR_IO);
    assert_non_null(strstr(e.msg, "spill_dir /nonexistent-dir"));
    for (int i = 0; i < NT; i++) {
        assert_non_null(hosts[i].params); /* nothing lost */
        pm_trainer_free(&hosts[i]), pm_select_task_free(&tasks[i]);
    }
}

/* A task whose loss blows up fails alone, with the step and the reason;
 * the others finish exactly as alone. */
static void nan_task_fails_alone(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    sel_ref ref;
    reference_runs(&tok, &ref);
    pm_select_task tasks[NT];
    pm_trainer hosts[NT];
    pm_err e;
    tasks_of(tasks);
    tasks[1].cfg.opt.lr = 1e30f; /* the first update makes the parameters overflow */
    tasks[1].cfg.opt.grad_clip = 0;
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(tasks, NT, 1 << 22, 2, &lay, &e), PM_OK);
    for (int i = 0; i < NT; i++)
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
    sel_log lg = {{{0}}, {0}};
    pm_select_opts o = {.devices = 2, .policy = PM_POLICY_SHARD, .prefetch = 1, .eval_every = 2,
                        .eval_batches = 2, .val = &tok, .report = log_event, .report_ctx = &lg};
    pm_select_result res[NT];
    pm_select_stats stats;
    assert_int_equal(pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e), PM_OK);
    assert_int_equal(res[1].state, PM_SELECT_FAILED);
    assert_true(res[1].steps >= 1 && res[1].steps < tasks[1].cfg.opt.steps);
    assert_non_null(strstr(res[1].why, "not finite; lower its opt.lr"));
    for (int i = 0; i < NT; i += 2) {
        assert_int_equal(res[i].state, PM_SELECT_DONE);
        assert_memory_equal(hosts[i].params, ref.params[i], hosts[i].n_params * sizeof(float));
        assert_memory_equal(&res[i].val_loss, &ref.val[i], sizeof(double));
    }
    for (int i = 0; i < NT; i++) pm_trainer_free(&hosts[i]), pm_select_task_free(&tasks[i]);
    for (int i = 0; i < NT; i++) free(ref.params[i]);
    pm_select_stats_free(&stats);
}

/* A save directory records each task's last loss and validation loss
 * beside its checkpoint (NAME.loss), and a sweep resumed from there
 * reports them for the tasks that run no further step: done tasks keep
 * their losses instead of NAN (they ranked last, issue 19). Expected values
 * are each configuration's own run, alone. */
static void saved_losses_resume(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    sel_ref ref;
    reference_runs(&tok, &ref);
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "/tmp/pm_test_select_saved_%d", (int)getpid());
    assert_int_equal(mkdir(dir, 0777), 0);
    pm_select_task tasks[NT];
    pm_trainer hosts[NT];
    pm_err e;
    tasks_of(tasks);
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(tasks, NT, 1 << 22, 2, &lay, &e), PM_OK);
    for (int i = 0; i < NT; i++)
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
    pm_select_opts o = {.devices = 2, .policy = PM_POLICY_SHARD, .prefetch = 1, .eval_every = 2,
                        .eval_batches = 2, .val = &tok, .save_dir = dir};
    pm_select_result res[NT];
    pm_select_stats stats;
    assert_int_equal(pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e), PM_OK);
    pm_select_stats_free(&stats);
    double loss[NT], val[NT];
    for (int i = 0; i < NT; i++) {
        int steps = tasks[i].cfg.opt.steps;
        pm_ckpt_info in, other;
        snprintf(path, sizeof path, "%s/%s.ckpt", dir, tasks[i].name);
        assert_int_equal(pm_ckpt_info_read(path, &in, &e), PM_OK);
        assert_int_equal(in.step, steps);
        other = in, other.step = steps - 1;
        assert_int_equal(pm_select_saved_losses(dir, tasks[i].name, &other, &loss[i], &val[i], &e),
                         PM_OK);
        assert_true(isnan(loss[i]) && isnan(val[i])); /* another step's: not these */
        assert_int_equal(pm_select_saved_losses(dir, tasks[i].name, &in, &loss[i], &val[i], &e),
                         PM_OK);
        assert_true(loss[i] == ref.loss[i][steps - 1] && val[i] == ref.val[i]);
        pm_trainer_free(&hosts[i]);
    }
    /* resumed: every task is done from the start and reports what it ended with */
    for (int i = 0; i < NT; i++) {
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
        snprintf(path, sizeof path, "%s/%s.ckpt", dir, tasks[i].name);
        assert_int_equal(pm_ckpt_load(&hosts[i], path, &e), PM_OK);
    }
    o.prior_loss = loss, o.prior_val = val;
    assert_int_equal(pm_select_run(tasks, hosts, NT, &lay, &o, res, &stats, &e), PM_OK);
    for (int i = 0; i < NT; i++) {
        int steps = tasks[i].cfg.opt.steps;
        assert_int_equal(res[i].state, PM_SELECT_DONE);
        assert_int_equal(res[i].steps, steps);
        assert_true(res[i].final_loss == ref.loss[i][steps - 1] && res[i].val_loss == ref.val[i]);
    }
    assert_int_equal(stats.nlog, 0);
    pm_select_stats_free(&stats);
    for (int i = 0; i < NT; i++) pm_trainer_free(&hosts[i]), pm_select_task_free(&tasks[i]);
    for (int i = 0; i < NT; i++) free(ref.params[i]);
    snprintf(path, sizeof path, "rm -rf %s", dir);
    assert_int_equal(system(path), 0);
}

/* Successive halving with ETA 2 over 4 learning rates, evaluating every 2
 * of 6 steps: after step 2 the two best by validation loss go on, after
 * step 4 the best one, which finishes as if alone. The ranking comes from
 * each configuration trained alone and evaluated at steps 2 and 4. */
static void halving_keeps_the_best(void **state) {
    (void)state;
    corpus_init();
    pm_tokens tok = PM_TOKENS_BYTES(corpus, sizeof corpus);
    enum { H = 4 };
    static const float lrs[H] = {1e-3f, 2e-2f, 5e-3f, 2e-4f};
    double val2[H], val4[H];
    float *final[H];
    pm_select_task tasks[H];
    pm_trainer hosts[H];
    pm_err e;
    pm_blas_threads(1);
    for (int i = 0; i < H; i++) {
        tasks[i] = (pm_select_task){.cfg = task_cfg(0)};
        pm_optim_defaults(&tasks[i].cfg.opt, 6);
        tasks[i].cfg.opt.lr = lrs[i];
        snprintf(tasks[i].name, sizeof tasks[i].name, "h%d", i);
        pm_trainer t;
        assert_int_equal(pm_trainer_init(&t, &tasks[i].cfg, &tok, 0, &e), PM_OK);
        for (int s = 0; s < 6; s++) {
            assert_int_equal(pm_trainer_step(&t, NULL, &e), PM_OK);
            if (s == 1) assert_int_equal(pm_trainer_eval(&t, &tok, 2, &val2[i], &e), PM_OK);
            if (s == 3) assert_int_equal(pm_trainer_eval(&t, &tok, 2, &val4[i], &e), PM_OK);
        }
        final[i] = malloc(t.n_params * sizeof(float));
        memcpy(final[i], t.params, t.n_params * sizeof(float));
        pm_trainer_free(&t);
    }
    /* the expected survivors, from the alone runs */
    int order[H] = {0, 1, 2, 3};
    for (int a2 = 1; a2 < H; a2++)
        for (int b = a2; b > 0 && val2[order[b]] < val2[order[b - 1]]; b--) {
            int z = order[b];
            order[b] = order[b - 1], order[b - 1] = z;
        }
    int win = val4[order[0]] <= val4[order[1]] ? order[0] : order[1];
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(tasks, H, 1 << 22, 2, &lay, &e), PM_OK);
    for (int i = 0; i < H; i++)
        assert_int_equal(pm_trainer_init(&hosts[i], &tasks[i].cfg, &tok, 0, &e), PM_OK);
    pm_select_opts o = {.devices = 2, .policy = PM_POLICY_SHARD, .prefetch = 1, .eval_every = 2,
                        .halving = 2, .eval_batches = 2, .val = &tok};
    pm_select_result res[H];
    pm_select_stats stats;
    assert_int_equal(pm_select_run(tasks, hosts, H, &lay, &o, res, &stats, &e), PM_OK);
    for (int i = 0; i < H; i++) {
        int want_steps = i == win ? 6 : i == order[0] || i == order[1] ? 4 : 2;
        if (res[i].steps != want_steps)
            fail_msg("task %d: %lld steps, want %d (val at 2: %g %g %g %g)", i,
                     (long long)res[i].steps, want_steps, val2[0], val2[1], val2[2], val2[3]);
        assert_int_equal(res[i].state, i == win ? PM_SELECT_DONE : PM_SELECT_STOPPED);
    }
    assert_memory_equal(hosts[win].params, final[win], hosts[win].n_params * sizeof(float));
    for (int i = 0; i < H; i++) pm_trainer_free(&hosts[i]), pm_select_task_free(&tasks[i]), free(final[i]);
    pm_select_stats_free(&stats);
}

/* The memory check, a pure function given numbers: 64 devices of 1 GiB and
 * 2 GiB of state need 66 GiB: refused against 16 GiB, naming both and the
 * fixes; exactly 66 GiB passes, a byte less does not; unknown (0) passes.
 * What a sweep needs: each task's trainer bytes, and spilled, its state
 * (16 bytes a parameter) only for as many tasks as devices. */
static void memory_check(void **state) {
    (void)state;
    const double G = 1 << 30;
    pm_select_ram need = {64, 1 * G, 2 * G, 0};
    pm_err e;
    assert_int_equal(pm_select_ram_check(&need, 16 * G, &e), PM_ERR_MEMLIMIT);
    static const char *const said[] = {"64 devices' slabs of 1.000 GiB (64.00 GiB)",
                                       "state in RAM (2.00 GiB)", "need 66.00 GiB",
                                       "has 16.00 GiB available", "device_mem", "spill_dir"};
    for (size_t k = 0; k < sizeof said / sizeof said[0]; k++)
        if (!strstr(e.msg, said[k])) fail_msg("'%s' does not say '%s'", e.msg, said[k]);
    assert_int_equal(pm_select_ram_check(&need, 66 * G, &e), PM_OK);
    assert_int_equal(pm_select_ram_check(&need, 66 * G - 1, &e), PM_ERR_MEMLIMIT);
    assert_int_equal(pm_select_ram_check(&need, 0, &e), PM_OK);
    need.spilled = 1;
    assert_int_equal(pm_select_ram_check(&need, 16 * G, &e), PM_ERR_MEMLIMIT);
    assert_null(strstr(e.msg, "spill_dir")); /* already spilled */
    /* the need of three tasks on 2 devices */
    pm_select_task t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = (pm_select_task){.cfg = {.model = {256, 16, 32 * (i + 1), 2, 2}, .batch = 4,
                                        .micro = 1, .seed = 1}};
        pm_optim_defaults(&t[i].cfg.opt, 10);
    }
    pm_select_layout lay;
    assert_int_equal(pm_select_partition(t, 3, 64 << 20, 2, &lay, &e), PM_OK);
    double all = 0, states = 0, biggest = 0;
    for (int i = 0; i < 3; i++) {
        double st = 16.0 * (double)pm_gpt_num_params(&t[i].cfg.model);
        all += (double)pm_train_mem_bytes(&t[i].cfg, &e), states += st;
        biggest = st > biggest ? st : biggest;
    }
    pm_select_ram r;
    assert_int_equal(pm_select_ram_need(t, 3, &lay, 2, 0, &r, &e), PM_OK);
    assert_int_equal(r.devices, 2);
    assert_true(r.slab == (double)(2 * lay.state_slot + lay.act_slot) && r.store == all);
    assert_int_equal(pm_select_ram_need(t, 3, &lay, 2, 1, &r, &e), PM_OK);
    assert_true(r.store == all - states + 2 * biggest);
    for (int i = 0; i < 3; i++) pm_select_task_free(&t[i]);
}

/* ASHA's rungs: steps / ETA^k while at least the minimum (default steps /
 * ETA^2), ascending, the last the steps. */
static void asha_rungs(void **state) {
    (void)state;
    int64_t r[8];
    assert_int_equal(pm_select_asha_rungs(100, 3, 0, r, 8), 3);
    assert_true(r[0] == 11 && r[1] == 33 && r[2] == 100);
    assert_int_equal(pm_select_asha_rungs(12, 3, 0, r, 8), 3);
    assert_true(r[0] == 1 && r[1] == 4 && r[2] == 12);
    assert_int_equal(pm_select_asha_rungs(9, 3, 3, r, 8), 2);
    assert_true(r[0] == 3 && r[1] == 9);
    assert_int_equal(pm_select_asha_rungs(10, 2, 3, r, 8), 2);
    assert_true(r[0] == 5 && r[1] == 10);
    assert_int_equal(pm_select_asha_rungs(8, 2, 1, r, 8), 4);
    assert_true(r[0] == 1 && r[1] == 2 && r[2] == 4 && r[3] == 8);
    assert_int_equal(pm_select_asha_rungs(10, 1, 0, r, 8), 0);
}

/* One step of a hand-worked ASHA case: n reporters with these losses and
 * states (W waiting, P went on, O out); want[j] 1 for those that go on now. */
static void promote_case(int eta, int entrants, int closed, int n, const double *loss,
                         const char *states, const char *want) {
    unsigned char st[16] = {0}, up[16] = {0};
    int order[16], expect = 0;
    for (int j = 0; j < n; j++)
        st[j] = states[j] == 'W' ? PM_ASHA_WAITING : states[j] == 'P' ? PM_ASHA_PROMOTED
                                                                      : PM_ASHA_OUT;
    int got = pm_select_asha_promote(eta, entrants, closed, n, loss, st, up, order);
    for (int j = 0; j < n; j++) {
        expect += want[j] == '1';
        if (up[j] != (want[j] == '1'))
            fail_msg("eta %d, %d reported (%s), closed %d: task %d %s, want %s", eta, n, states,
                     closed, j, up[j] ? "goes on" : "stays", want[j] == '1' ? "on" : "staying");
    }
    assert_int_equal(got, expect);
}

/* ASHA's promotions on a case worked by hand: ETA 3, 9 tasks, so at most
 * ceil(9/3) = 3 ever leave the rung. Reports arrive one at a time; a task
 * goes on once it is among the best floor(m/3) of the m reported:
 *   m 1, 2: floor = 0, nobody;  m 3 (5, 4, 6): the best, task 1 (4);
 *   m 4 (+3): the best is now task 3, which goes on too (task 1, gone on,
 *   is no longer the best: a mispromotion, the price of not waiting);
 *   m 5 (+4.5): the best 1 is task 3, gone already: nobody;
 *   m 6 (+2): the best 2 are tasks 5 and 3: task 5 goes on, the third;
 *   m 7 (+1): task 6 is the best, but the quota of 3 is spent: it stays;
 *   closed at m 9 (+nan, +7): ceil(9/3) = 3, quota spent: nobody (the
 *   caller then stops those still waiting).
 * Then: a rung closed with every task waiting sends its best ceil(m/ETA);
 * failures leave 4 of 9 reporting, closed: the best ceil(4/3) = 2 go on;
 * a task out (stopped) still takes its place among the best; a loss that
 * is not a number never goes on. */
static void asha_promotions(void **state) {
    (void)state;
    const double L[9] = {5, 4, 6, 3, 4.5, 2, 1, NAN, 7};
    promote_case(3, 9, 0, 1, L, "W", "0");
    promote_case(3, 9, 0, 2, L, "WW", "00");
    promote_case(3, 9, 0, 3, L, "WWW", "010");
    promote_case(3, 9, 0, 4, L, "WPWW", "0001");
    promote_case(3, 9, 0, 5, L, "WPWPW", "00000");
    promote_case(3, 9, 0, 6, L, "WPWPWW", "000001");
    promote_case(3, 9, 0, 7, L, "WPWPWPW", "0000000");
    promote_case(3, 9, 1, 9, L, "WPWPWPWWW", "000000000");
    const double D[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    promote_case(3, 9, 1, 9, D, "WWWWWWWWW", "000000111");
    promote_case(3, 9, 0, 9, D, "WWWWWWWWW", "000000111");
    promote_case(3, 9, 1, 4, D, "WWWW", "0011");
    const double O[4] = {1, 2, 3, 4};
    promote_case(2, 4, 1, 4, O, "OWWW", "0100");
    const double N[2] = {NAN, NAN};
    promote_case(2, 2, 1, 2, N, "WW", "00");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lrtf_choice),
        cmocka_unit_test(lrtf_estimate),
        cmocka_unit_test(lrtf_measured_times),
        cmocka_unit_test(toy_case),
        cmocka_unit_test(random_instances),
        cmocka_unit_test(join_by_hand),
        cmocka_unit_test(join_parts_by_hand),
        cmocka_unit_test(join_overlap_by_hand),
        cmocka_unit_test(join_random),
        cmocka_unit_test(partition_fits_and_is_minimal),
        cmocka_unit_test(partition_refuses_a_layer_too_big),
        cmocka_unit_test(costs_of_a_pass_without_flops),
        cmocka_unit_test(train_exact),
        cmocka_unit_test(join_one_task),
        cmocka_unit_test(eval_through_shards),
        cmocka_unit_test(join_store_fails),
        cmocka_unit_test(lrtf_run_order),
        cmocka_unit_test(spill_exact),
        cmocka_unit_test(nan_task_fails_alone),
        cmocka_unit_test(saved_losses_resume),
        cmocka_unit_test(halving_keeps_the_best),
        cmocka_unit_test(memory_check),
        cmocka_unit_test(asha_rungs),
        cmocka_unit_test(asha_promotions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
