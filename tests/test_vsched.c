/* test_vsched.c: the V schedules built from blocks (v-min, v-half, 1f1b-v)
 * and the generic constructor: the papers' peak formulas for every p from
 * 2 to 32, bubbles below 1F1B's, validity, the memory theorem, and the
 * constructor's promise that moving warm-up and cool-down passes never
 * lengthens the plain repetition's makespan nor raises its peaks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pipemem/pm_sched.h"
#include "schedule/block_internal.h" /* pm_construct_reference */
#include "schedule/sched.h"
#include "schedule/gen.h"

typedef pm_status (*builder)(pm_sched *, const pm_sched_req *, pm_err *);

typedef struct {
    pm_sched s;
    pm_cost c;
    pm_sim sim;
} built;

/* Builds, validates and simulates; fails the test with the message. */
static void build(built *x, builder fn, int p, int m, pm_costs t, pm_mem mem) {
    pm_sched_req req = {.p = p, .m = m, .t = t, .mem = mem};
    pm_err err;
    if (fn(&x->s, &req, &err)) fail_msg("p=%d m=%d: %s", p, m, err.msg);
    assert_int_equal(pm_cost_init_uniform(&x->c, &x->s, t, mem, NULL), PM_OK);
    if (pm_sched_validate(&x->s, &x->c, 0, &err)) fail_msg("p=%d m=%d: %s", p, m, err.msg);
    if (pm_sim_run(&x->sim, &x->s, &x->c, &err)) fail_msg("p=%d m=%d: %s", p, m, err.msg);
}

static void unbuild(built *x) {
    pm_sim_free(&x->sim);
    pm_cost_free(&x->c);
    pm_sched_free(&x->s);
}

static double bubble_1f1b(int p, int m) { return (double)(p - 1) / (m + p - 1); }

/* V-Min: peak floor((p+4)/3) * M/p; V-Half: floor((p+2)/2) * M/p, on the
 * device that peaks highest, for every p from 2 to 32 at m = 3p, and at a
 * larger m for a few p (the steady state repeats, so the peak must not
 * grow with m). Bubbles below 1F1B's (p-1)/(m+p-1) at m = 3p. */
static void check_formula(builder fn, int add, int div) {
    for (int p = 2; p <= 32; p++) {
        built x;
        int m = 3 * p;
        build(&x, fn, p, m, PM_COSTS_DEFAULT, PM_MEM_DEFAULT);
        double want = (double)((p + add) / div) / p;
        if (fabs(pm_sim_peak_max_x(&x.sim) - want) > 1e-9)
            fail_msg("%s p=%d m=%d: peak %.6f M, formula %.6f M", x.s.kind, p, m,
                     pm_sim_peak_max_x(&x.sim), want);
        if (!(x.sim.bubble < bubble_1f1b(p, m)))
            fail_msg("%s p=%d m=%d: bubble %.4f not below 1F1B's %.4f", x.s.kind, p, m,
                     x.sim.bubble, bubble_1f1b(p, m));
        unbuild(&x);
    }
    static const int ps[] = {2, 5, 12, 16};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        built x;
        int p = ps[i], m = 8 * p;
        build(&x, fn, p, m, PM_COSTS_DEFAULT, PM_MEM_DEFAULT);
        double want = (double)((p + add) / div) / p;
        assert_true(fabs(pm_sim_peak_max_x(&x.sim) - want) < 1e-9);
        unbuild(&x);
    }
}

static void test_v_min_peak_formula(void **state) {
    (void)state;
    check_formula(pm_sched_build_v_min, 4, 3);
}

static void test_v_half_peak_formula(void **state) {
    (void)state;
    check_formula(pm_sched_build_v_half, 2, 2);
}

/* V-Half and 1F1B-V against the authors' own generators (the Controllable
 * Memory paper's code, bubble rates measured by running it, issue 9): the
 * same bubble to 4 decimals at the same peak (pipemem reaches the authors'
 * figure in every row, and beats it in none). Their chunk costs 4959,
 * 5217,3519,213 are a device share of 9918,10434,7038,213 here. Odd p
 * (9) needs the squeeze between the two rounds; 1F1B-V needs the chain
 * block, every phase moving and the caps raised to the largest device's. */
static void test_v_matches_the_authors(void **state) {
    (void)state;
    static const struct {
        builder fn;
        int p, m;
        pm_costs t;
        double bubble, peak;
    } rows[] = {
        {pm_sched_build_v_half, 4, 12, {1, 1, 1, 0}, 0.0649, 0.75},
        {pm_sched_build_v_half, 8, 24, {1, 1, 1, 0}, 0.1056, 0.625},
        {pm_sched_build_v_half, 8, 24, {9918, 10434, 7038, 213}, 0.1456, 0.625},
        {pm_sched_build_v_half, 9, 18, {1, 1, 1, 0}, 0.1756, 5.0 / 9},
        {pm_sched_build_1f1b_v, 8, 32, {1, 1, 1, 0}, 0.1467, 0.75},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        built x;
        build(&x, rows[i].fn, rows[i].p, rows[i].m, rows[i].t, PM_MEM_DEFAULT);
        if (fabs(x.sim.bubble - rows[i].bubble) >= 5e-5 ||
            fabs(pm_sim_peak_max_x(&x.sim) - rows[i].peak) > 1e-9)
            fail_msg("%s p=%d m=%d: bubble %.4f peak %.4f, the authors' %.4f at %.4f",
                     x.s.kind, rows[i].p, rows[i].m, x.sim.bubble, pm_sim_peak_max_x(&x.sim),
                     rows[i].bubble, rows[i].peak);
        unbuild(&x);
    }
}

/* Few microbatches (m = p up to 2p) against the authors' V-Half/V-Min
 * generator (zbv_greedy.py, class PipelineGraph, in
 * sail-sg/zero-bubble-pipeline-parallelism): its makespan, the max_time
 * that PipelineGraph(p, m, "half" or "min", f, b, w, c)
 * .schedule_from_pattern(pattern(p), m, [f, f, b, b, w, w]) returns, with
 * chunk costs f,b,w,c = 0.5,0.5,0.5,0 (pipemem's 1,1,1,0) or 4959,5217,
 * 3519,213 (9918,10434,7038,213), and the peak pipemem's simulator gives
 * the order it returns (the papers' formula in every row). pipemem's
 * makespan must be at most theirs at the same peak; where the rows say
 * "<", pipemem's is shorter. Before the constructor found round 2's
 * cool-down on the squeezed slots as the authors do, v-half p=8 m=8 was
 * 33, p=16 m=16 69, and with the measured costs p=12 m=14 570687 and
 * p=14 m=17 689337. */
static void test_v_small_m_against_the_authors(void **state) {
    (void)state;
    static const pm_costs unit = {1, 1, 1, 0}, meas = {9918, 10434, 7038, 213};
    static const struct {
        builder fn;
        int p, m;
        pm_costs t;
        double makespan, peak;
    } rows[] = {
        {pm_sched_build_v_half, 2, 2, unit, 7.5, 1.0},       /* < */
        {pm_sched_build_v_half, 4, 4, unit, 17, 0.75},       /* < */
        {pm_sched_build_v_half, 6, 6, unit, 24, 4.0 / 6},    /* < */
        {pm_sched_build_v_half, 8, 8, unit, 32.5, 0.625},
        {pm_sched_build_v_half, 9, 9, unit, 41, 5.0 / 9},    /* < */
        {pm_sched_build_v_half, 12, 14, unit, 56.5, 7.0 / 12},
        {pm_sched_build_v_half, 16, 16, unit, 68.5, 9.0 / 16},
        {pm_sched_build_v_half, 8, 8, meas, 338391, 0.625}, /* < */
        {pm_sched_build_v_half, 12, 14, meas, 570339, 7.0 / 12},
        {pm_sched_build_v_half, 14, 17, meas, 689247, 4.0 / 7},
        {pm_sched_build_v_half, 16, 16, meas, 718761, 9.0 / 16}, /* < */
        {pm_sched_build_v_min, 4, 4, unit, 17.5, 0.5},
        {pm_sched_build_v_min, 8, 8, unit, 37.5, 0.5},       /* < */
        {pm_sched_build_v_min, 14, 17, unit, 76.5, 3.0 / 7}, /* < */
        {pm_sched_build_v_min, 12, 12, meas, 603357, 5.0 / 12}, /* < */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        built x;
        build(&x, rows[i].fn, rows[i].p, rows[i].m, rows[i].t, PM_MEM_DEFAULT);
        if (x.sim.makespan > rows[i].makespan * (1 + 1e-12) ||
            fabs(pm_sim_peak_max_x(&x.sim) - rows[i].peak) > 1e-9)
            fail_msg("%s p=%d m=%d costs %g,%g,%g,%g: makespan %.17g peak %.4f, the authors' "
                     "%.17g at %.4f",
                     x.s.kind, rows[i].p, rows[i].m, rows[i].t.f, rows[i].t.b, rows[i].t.w,
                     rows[i].t.c, x.sim.makespan, pm_sim_peak_max_x(&x.sim), rows[i].makespan,
                     rows[i].peak);
        unbuild(&x);
    }
}

/* On a grid (p = 2..16, m = 2p, 3p, 4p, equal and the authors' unequal
 * costs) every V kind is valid (build() validates) and within its promise:
 * V-Min's and V-Half's largest peak is exactly the papers' formula and no
 * device is above it; 1F1B-V's devices stay within the largest memory
 * bound of its named block, below 1F1B's M from p = 3 and at most 0.75 M
 * from p = 8; at equal costs V-Min's and V-Half's bubbles are below 1F1B's
 * (1F1B-V promises memory, not bubble: at p = 3, m = 6 it ties 1F1B). */
static void test_v_grid_within_promise(void **state) {
    (void)state;
    pm_costs costs[] = {PM_COSTS_DEFAULT, {9918, 10434, 7038, 213}};
    for (int p = 2; p <= 16; p++) {
        pm_block b;
        pm_block_info in;
        assert_int_equal(pm_block_named(&b, "1f1b-v", p, NULL), PM_OK);
        assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, NULL), PM_OK);
        double bound = 0;
        for (int d = 0; d < p; d++) bound = in.bound[d] > bound ? in.bound[d] : bound;
        pm_block_info_free(&in);
        pm_block_free(&b);
        for (int mm = 2; mm <= 4; mm++)
            for (int q = 0; q < 2; q++) {
                int m = mm * p;
                const builder fns[] = {pm_sched_build_v_min, pm_sched_build_v_half,
                                       pm_sched_build_1f1b_v};
                const double want[] = {(double)((p + 4) / 3) / p, (double)((p + 2) / 2) / p};
                for (int k = 0; k < 3; k++) {
                    built x;
                    build(&x, fns[k], p, m, costs[q], PM_MEM_DEFAULT);
                    double pk = pm_sim_peak_max_x(&x.sim);
                    if (k < 2 && fabs(pk - want[k]) > 1e-9)
                        fail_msg("%s p=%d m=%d costs %d: peak %.6f M, formula %.6f M", x.s.kind,
                                 p, m, q, pk, want[k]);
                    if (k == 2 && (pk > bound + 1e-9 || (p >= 3 && !(pk < 1.0)) ||
                                   (p >= 8 && pk > 0.75 + 1e-9)))
                        fail_msg("1f1b-v p=%d m=%d costs %d: peak %.6f M (bound %.6f M)", p, m,
                                 q, pk, bound);
                    if (k < 2 && q == 0 && !(x.sim.bubble < bubble_1f1b(p, m)))
                        fail_msg("%s p=%d m=%d: bubble %.4f not below 1F1B's %.4f", x.s.kind, p,
                                 m, x.sim.bubble, bubble_1f1b(p, m));
                    unbuild(&x);
                }
            }
    }
}

/* 1F1B-V (fused BW on the V): valid, peak below 1F1B's M on every device
 * and at most about 2/3 of it for larger p. */
static void test_1f1b_v(void **state) {
    (void)state;
    for (int p = 2; p <= 24; p++) {
        built x;
        build(&x, pm_sched_build_1f1b_v, p, 3 * p, PM_COSTS_DEFAULT, PM_MEM_DEFAULT);
        double pk = pm_sim_peak_max_x(&x.sim);
        /* At p = 2 no legal block of interval 6 beats M: device 0's chunk 0
         * lives from slot 0 through the whole F and BW chain (4 + 4*2
         * slots), and fitting F0, F1, BW1, BW0 into 6 residues on both
         * devices delays the chain past slot 12, so 3 intervals plus 1 for
         * chunk 1: 4 activations of M/4. */
        if (!(p == 2 ? pk <= 1.0 : pk < 1.0))
            fail_msg("1f1b-v p=%d: peak %.4f M not below 1F1B's 1.0", p, pk);
        if (p >= 8 && !(pk <= 0.75)) fail_msg("1f1b-v p=%d: peak %.4f M, expected about 2/3", p, pk);
        for (int d = 0; d < p; d++)
            for (int64_t i = 0; i < x.s.len[d]; i++) {
                assert_true(pm_sched_dev(&x.s, d)[i].kind != PM_PASS_B);
                assert_true(pm_sched_dev(&x.s, d)[i].kind != PM_PASS_W);
            }
        unbuild(&x);
    }
}

/* The memory theorem: each device's simulated peak is at most the block's
 * bound sum ceil(l/T) m_s, for every named block, with default memory and
 * with a B that releases part of the activation. */
static void test_theorem_bound_holds(void **state) {
    (void)state;
    static const char *names[] = {"v-min", "v-half", "1f1b-v"};
    static const builder fns[] = {pm_sched_build_v_min, pm_sched_build_v_half,
                                  pm_sched_build_1f1b_v};
    pm_mem mems[] = {PM_MEM_DEFAULT, {2, -0.5, -1.5, 0}};
    for (int k = 0; k < 3; k++)
        for (int p = 2; p <= 20; p += 3)
            for (int q = 0; q < 2; q++) {
                pm_block b;
                pm_block_info in;
                assert_int_equal(pm_block_named(&b, names[k], p, NULL), PM_OK);
                assert_int_equal(pm_block_analyze(&b, mems[q], &in, NULL), PM_OK);
                built x;
                build(&x, fns[k], p, 4 * p, PM_COSTS_DEFAULT, mems[q]);
                for (int d = 0; d < p; d++)
                    if (pm_sim_peak_x(&x.sim, d) > in.bound[d] + 1e-9)
                        fail_msg("%s p=%d device %d: peak %.4f M over the bound %.4f M",
                                 names[k], p, d, pm_sim_peak_x(&x.sim, d), in.bound[d]);
                unbuild(&x);
                pm_block_info_free(&in);
                pm_block_free(&b);
            }
}

/* The plain repetition, built here independently of construct.c: each
 * device's passes of microbatch k at offset + k*T, sorted by slot. */
static void plain_repetition(pm_sched *s, const pm_block *b, int m) {
    assert_int_equal(pm_sched_init(s, "plain", b->place, b->p, m, b->v, NULL), PM_OK);
    for (int d = 0; d < b->p; d++) {
        int64_t last = -1;
        for (;;) { /* next smallest slot on device d after `last` */
            int64_t best = INT64_MAX;
            int bi = -1, bk = -1;
            for (int i = 0; i < b->n; i++) {
                if (b->pass[i].dev != d) continue;
                for (int k = 0; k < m; k++) {
                    int64_t t = b->pass[i].off + (int64_t)k * b->T;
                    if (t > last && t < best) best = t, bi = i, bk = k;
                }
            }
            if (bi < 0) break;
            const pm_block_pass *x = &b->pass[bi];
            int stage = b->place == PM_PLACE_V ? (x->chunk == 0 ? d : 2 * b->p - 1 - d)
                                               : x->chunk * b->p + d;
            pm_sched_push(s, d, (pm_pass_kind)x->kind, stage, bk);
            last = best;
        }
    }
}

/* Step 4 of the construction keeps only improvements: the built schedule's
 * makespan is at most the plain repetition's, at equal and at unequal
 * costs; the largest device's peak is at most the plain repetition's
 * largest, and every device stays at most at the larger of its own plain
 * peak and its memory-theorem bound (the authors cap every device at the
 * largest device's peak; pipemem caps it at that or at its bound, whichever
 * is lower). The schedule is built from the named block itself, so the
 * plain repetition below is of the same block. */
static void test_reorder_never_worse(void **state) {
    (void)state;
    static const char *names[] = {"v-min", "v-half", "1f1b-v"};
    pm_costs costs[] = {PM_COSTS_DEFAULT, {4959, 5217, 3519, 213}, {1, 2, 0.5, 0.1}};
    int strictly_better = 0;
    for (int k = 0; k < 3; k++)
        for (int p = 2; p <= 10; p += 4)
            for (int q = 0; q < 3; q++) {
                int m = 2 * p + 1;
                pm_block b;
                pm_block_info in;
                assert_int_equal(pm_block_named(&b, names[k], p, NULL), PM_OK);
                assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, NULL), PM_OK);
                pm_sched plain;
                plain_repetition(&plain, &b, m);
                pm_cost pc;
                pm_sim ps;
                pm_err err;
                assert_int_equal(pm_cost_init_uniform(&pc, &plain, costs[q], PM_MEM_DEFAULT, NULL), PM_OK);
                if (pm_sim_run(&ps, &plain, &pc, &err)) fail_msg("plain %s: %s", names[k], err.msg);
                pm_sched_req req = {.p = p, .m = m, .t = costs[q], .mem = PM_MEM_DEFAULT};
                built x;
                if (pm_sched_from_block(&x.s, &b, &req, names[k], &err)) fail_msg("%s", err.msg);
                assert_int_equal(pm_cost_init_uniform(&x.c, &x.s, costs[q], PM_MEM_DEFAULT, NULL), PM_OK);
                if (pm_sched_validate(&x.s, &x.c, 0, &err)) fail_msg("%s: %s", names[k], err.msg);
                assert_int_equal(pm_sim_run(&x.sim, &x.s, &x.c, &err), PM_OK);
                if (x.sim.makespan > ps.makespan * (1 + 1e-12))
                    fail_msg("%s p=%d costs %d: makespan %g over the plain repetition's %g",
                             names[k], p, q, x.sim.makespan, ps.makespan);
                strictly_better += x.sim.makespan < ps.makespan * (1 - 1e-9);
                double top = 0;
                for (int d = 0; d < p; d++) top = ps.peak[d] > top ? ps.peak[d] : top;
                for (int d = 0; d < p; d++) {
                    double bound = in.bound[d] * ps.M, own = ps.peak[d];
                    double lim = own > bound ? own : bound;
                    if (x.sim.peak[d] > lim + 1e-9 || x.sim.peak[d] > top + 1e-9)
                        fail_msg("%s p=%d costs %d device %d: peak %g, plain %g (largest %g), "
                                 "bound %g", names[k], p, q, d, x.sim.peak[d], own, top, bound);
                }
                unbuild(&x);
                pm_sim_free(&ps);
                pm_cost_free(&pc);
                pm_sched_free(&plain);
                pm_block_info_free(&in);
                pm_block_free(&b);
            }
    assert_true(strictly_better > 0); /* step 4 does something */
}

/* Unequal costs change the timing, never the order's peaks; every pass
 * kind of a stage runs its microbatches in increasing order (gradients
 * accumulate in microbatch order); a device is never busier than its work. */
static void test_unequal_costs(void **state) {
    (void)state;
    pm_costs t = {4959, 5217, 3519, 213};
    for (int p = 3; p <= 12; p += 3) {
        int m = 3 * p;
        built x;
        build(&x, pm_sched_build_v_half, p, m, t, PM_MEM_DEFAULT);
        assert_true(fabs(pm_sim_peak_max_x(&x.sim) - (double)((p + 2) / 2) / p) < 1e-9);
        assert_true(x.sim.makespan >= m * (t.f + t.b + t.w) - 1e-6);
        int *next = calloc((size_t)x.s.S * PM_PASS_COUNT, sizeof *next);
        for (int d = 0; d < p; d++)
            for (int64_t i = 0; i < x.s.len[d]; i++) {
                const pm_pass *ps = &pm_sched_dev(&x.s, d)[i];
                assert_int_equal(ps->mb, next[ps->stage * PM_PASS_COUNT + ps->kind]++);
            }
        free(next);
        unbuild(&x);
    }
}

/* Few microbatches (m < p) still give complete, valid schedules. */
static void test_small_m(void **state) {
    (void)state;
    static const builder fns[] = {pm_sched_build_v_min, pm_sched_build_v_half,
                                  pm_sched_build_1f1b_v};
    for (int k = 0; k < 3; k++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 3; m++) {
                built x;
                build(&x, fns[k], p, m, PM_COSTS_DEFAULT, PM_MEM_DEFAULT);
                unbuild(&x);
            }
}

static void test_from_block_rejects(void **state) {
    (void)state;
    pm_block b;
    pm_sched s;
    pm_err err;
    assert_int_equal(pm_block_named(&b, "v-min", 4, NULL), PM_OK);
    pm_sched_req req = {.p = 5, .m = 8};
    assert_int_equal(pm_sched_from_block(&s, &b, &req, "x", &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "4 devices"));
    req = (pm_sched_req){.p = 4, .m = 0};
    assert_int_equal(pm_sched_from_block(&s, &b, &req, "x", &err), PM_ERR_ARG);
    pm_block_free(&b);
    pm_sched_req bad = {.p = 3, .m = 4, .v = 3};
    assert_int_equal(pm_sched_build_v_half(&s, &bad, &err), PM_ERR_ARG);
}

/* 1F1B as a building block on the single placement, in the papers' units
 * (F = 2 slots, BW = 4, T = 6): device i's F at 2i, BW at 6p-4-4i. Its
 * residues are {2i, 2i+1} and {2i+2 .. 2i+5} mod 6, so it is legal for
 * every p; the lifespan is 6(p-i), so the bound is (p-i) stage
 * activations, 1F1B's peak; and repeated it is 1F1B's order (p-i F, then
 * BW and F alternating), so the constructor must reproduce 1F1B's
 * makespan (m+p-1)(F+B+W) at equal costs and c = 0, and match the 1F1B
 * generator's makespan at any costs. */
static void test_1f1b_as_a_block(void **state) {
    (void)state;
    for (int p = 1; p <= 8; p++) {
        pm_block b = {.place = PM_PLACE_SINGLE, .p = p, .v = 1, .T = 6, .n = 2 * p};
        b.pass = calloc((size_t)(2 * p), sizeof *b.pass);
        for (int i = 0; i < p; i++) {
            b.pass[2 * i] = (pm_block_pass){i, 0, PM_PASS_F, 2 * i, 2};
            b.pass[2 * i + 1] = (pm_block_pass){i, 0, PM_PASS_BW, 6 * p - 4 - 4 * i, 4};
        }
        pm_block_info in;
        pm_err err;
        assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
        assert_true(in.legal);
        for (int i = 0; i < p; i++) {
            assert_int_equal(in.lifespan[i], 6 * (p - i));
            assert_true(fabs(in.bound[i] - (double)(p - i) / p) < 1e-12);
        }
        pm_block_info_free(&in);
        pm_costs costs[] = {PM_COSTS_DEFAULT, {3, 5, 2, 0.5}};
        for (int q = 0; q < 2; q++)
            for (int m = 1; m <= 3 * p + 1; m += p + 1) {
                pm_sched_req req = {.p = p, .m = m, .t = costs[q], .mem = PM_MEM_DEFAULT};
                pm_sched s, ref;
                pm_cost c;
                pm_sim sim, rsim;
                if (pm_sched_from_block(&s, &b, &req, "1f1b-block", &err)) fail_msg("%s", err.msg);
                assert_int_equal(pm_sched_build_1f1b(&ref, &req, &err), PM_OK);
                assert_int_equal(pm_cost_init_uniform(&c, &s, costs[q], PM_MEM_DEFAULT, NULL), PM_OK);
                assert_int_equal(pm_sched_validate(&s, &c, 0, &err), PM_OK);
                assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
                assert_int_equal(pm_sim_run(&rsim, &ref, &c, &err), PM_OK);
                if (q == 0) assert_true(sim.makespan == (m + p - 1) * 3.0);
                if (fabs(sim.makespan - rsim.makespan) > 1e-9)
                    fail_msg("p=%d m=%d costs %d: block 1F1B %g, 1f1b generator %g", p, m, q,
                             sim.makespan, rsim.makespan);
                for (int d = 0; d < p; d++) {
                    int live = m < p - d ? m : p - d; /* 1F1B: min(m, p-r) activations */
                    assert_true(fabs(pm_sim_peak_x(&sim, d) - (double)live / p) < 1e-12);
                }
                pm_sim_free(&sim);
                pm_sim_free(&rsim);
                pm_cost_free(&c);
                pm_sched_free(&s);
                pm_sched_free(&ref);
            }
        pm_block_free(&b);
    }
}

/* The constructor replays its candidates in slot order instead of through
 * the simulator (construct.c, replay_slots); the simulator is the reference
 * (pm_construct_reference). Both must choose the same candidate, so every
 * kind built by the constructor gives the same schedule both ways, pass for
 * pass, over p, m, equal and unequal costs, a latency between devices, and
 * a memory model whose W frees more than B holds. */
static void gen_twice(const char *kind, const pm_sched_req *req) {
    pm_sched fast, ref;
    pm_err err;
    pm_construct_reference = 0;
    if (pm_sched_generate(&fast, kind, req, &err)) fail_msg("%s p=%d: %s", kind, req->p, err.msg);
    pm_construct_reference = 1;
    pm_status st = pm_sched_generate(&ref, kind, req, &err);
    pm_construct_reference = 0;
    if (st) fail_msg("%s p=%d reference: %s", kind, req->p, err.msg);
    for (int d = 0; d < fast.p; d++) {
        if (fast.len[d] != ref.len[d] ||
            memcmp(pm_sched_dev(&fast, d), pm_sched_dev(&ref, d),
                   (size_t)fast.len[d] * sizeof(pm_pass)))
            fail_msg("%s p=%d m=%d costs %g,%g,%g,%g: device %d's order differs from the "
                     "simulator-replayed choice", kind, req->p, req->m, req->t.f, req->t.b,
                     req->t.w, req->t.c, d);
    }
    pm_sched_free(&fast);
    pm_sched_free(&ref);
}

static void test_replay_matches_the_simulator(void **state) {
    (void)state;
    static const char *kinds[] = {"v-min", "v-half", "1f1b-v"};
    static const pm_costs costs[] = {{1, 1, 1, 0}, {3, 3, 2, 0}, {9918, 10434, 7038, 213},
                                     {1, 2, 0.5, 0.7}};
    static const pm_mem mems[] = {{1, 0, -1, 0}, {1, 0.5, -1.5, 0}};
    static const int ps[] = {2, 3, 4, 5, 7, 8, 9, 12, 16};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
            for (int m = ps[i]; m <= 3 * ps[i]; m += ps[i] + 1)
                for (size_t q = 0; q < sizeof costs / sizeof costs[0]; q++)
                    for (size_t r = 0; r < sizeof mems / sizeof mems[0]; r++) {
                        pm_sched_req req = {.p = ps[i], .m = m, .t = costs[q], .mem = mems[r]};
                        gen_twice(kinds[k], &req);
                    }
    for (int p = 3; p <= 8; p++) /* auto-v builds its block's schedule the same way */
        for (size_t q = 0; q < sizeof costs / sizeof costs[0]; q++) {
            pm_sched_req req = {.p = p, .m = 2 * p, .t = costs[q], .mem = PM_MEM_DEFAULT,
                                .mem_limit = 0.75};
            gen_twice("auto-v", &req);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_v_min_peak_formula),
        cmocka_unit_test(test_v_half_peak_formula),
        cmocka_unit_test(test_v_matches_the_authors),
        cmocka_unit_test(test_v_small_m_against_the_authors),
        cmocka_unit_test(test_v_grid_within_promise),
        cmocka_unit_test(test_1f1b_v),
        cmocka_unit_test(test_theorem_bound_holds),
        cmocka_unit_test(test_reorder_never_worse),
        cmocka_unit_test(test_unequal_costs),
        cmocka_unit_test(test_small_m),
        cmocka_unit_test(test_from_block_rejects),
        cmocka_unit_test(test_1f1b_as_a_block),
        cmocka_unit_test(test_replay_matches_the_simulator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
