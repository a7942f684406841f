/* test_search.c: schedules searched under a memory limit (issue 3): the Zero
 * Bubble heuristic (zb, zb-1p, zb-2p), V-ZB, auto-v, the search and the
 * curve.
 *
 * The facts and where they come from (shared/reference/schedules.md):
 *   - at unit costs ZB-1p and ZB-2p equal ZB-H1 and ZB-H2 (makespans
 *     3m + p - 1 and, once the warm-up is full, 3m);
 *   - with unequal costs and c > 0 the heuristic beats the handcrafted ones;
 *   - V-ZB has no bubble for m >= 2p at unit costs, at 1F1B's memory (M);
 *   - auto-v never does worse than V-Min, V-Half or V-ZB at their own peaks
 *     and never slows down as the limit grows; below V-Min's peak
 *     floor((p+4)/3)/p it refuses, naming that limit;
 *   - every schedule these generators return stays within its limit on
 *     every device and passes the validator;
 *   - the V pool (search, curve, auto-v) holds DualPipeV from m = 2p, with
 *     the figures of the kind built alone. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_sched.h"
#include "schedule/gen.h"   /* the V pool, to see what it holds */
#include "schedule/sched.h" /* pm_sched_search_each */
#include "schedule/pool.h"

static const pm_costs UNIT = {1, 1, 1, 0};
static const pm_costs REAL = {4959, 5217, 3519, 213}; /* measured, unequal, c > 0 */
static const pm_costs SKEW = {1, 2, 1, 0.3};

static pm_sched_req req_of(int p, int m, pm_costs t, double limit) {
    return (pm_sched_req){.p = p, .m = m, .t = t, .mem = PM_MEM_DEFAULT, .mem_limit = limit};
}

typedef struct {
    double makespan, bubble, peak; /* peak: max over devices, x M */
} figs;

/* Generates kind, validates it under q->mem_limit (when > 0) and simulates
 * it. Returns the generator's status; a broken schedule fails the test. */
static pm_status gen(const char *kind, const pm_sched_req *q, figs *f, pm_err *err) {
    pm_sched s;
    pm_status st = pm_sched_generate(&s, kind, q, err);
    if (st) return st;
    pm_cost c;
    pm_sim sim;
    pm_err e2;
    assert_int_equal(pm_cost_init_uniform(&c, &s, q->t, q->mem, &e2), PM_OK);
    st = pm_sched_validate(&s, &c, q->mem_limit, &e2);
    if (st) fail_msg("%s p=%d m=%d limit %g: %s", kind, q->p, q->m, q->mem_limit, e2.msg);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &e2), PM_OK);
    *f = (figs){sim.makespan, sim.bubble, pm_sim_peak_max_x(&sim)};
    if (q->mem_limit > 0)
        for (int d = 0; d < s.p; d++)
            if (sim.peak[d] > q->mem_limit * sim.M * (1 + 1e-9))
                fail_msg("%s p=%d m=%d: device %d peaks at %g M over the limit %g", kind, q->p,
                         q->m, d, pm_sim_peak_x(&sim, d), q->mem_limit);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    return PM_OK;
}

static figs must(const char *kind, pm_sched_req q) {
    figs f;
    pm_err e;
    if (gen(kind, &q, &f, &e)) fail_msg("%s p=%d m=%d limit %g: %s", kind, q.p, q.m, q.mem_limit, e.msg);
    return f;
}

static void zb_equals_h_at_unit_costs(void **state) {
    (void)state;
    static const int ps[] = {2, 3, 4, 6, 8};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        int p = ps[i];
        for (int m = 1; m <= 3 * p; m += (m < p ? p - 1 : p)) {
            pm_sched_req q = req_of(p, m, UNIT, 0);
            figs h1 = must("zb-h1", q), z1 = must("zb-1p", q);
            figs h2 = must("zb-h2", q), z2 = must("zb-2p", q);
            assert_float_equal(z1.makespan, h1.makespan, 1e-9);
            assert_float_equal(z2.makespan, h2.makespan, 1e-9);
            assert_true(z1.peak <= 1.0 + 1e-9 && z2.peak <= 2.0 + 1e-9);
            if (m >= p) assert_float_equal(z1.makespan, 3.0 * m + p - 1, 1e-9);
            if (m >= 2 * p - 1) assert_float_equal(z2.makespan, 3.0 * m, 1e-9);
        }
    }
}

static void zb_beats_h_with_real_costs(void **state) {
    (void)state;
    const pm_costs *cs[] = {&SKEW, &REAL};
    for (int ci = 0; ci < 2; ci++)
        for (int p = 4; p <= 8; p += 4) {
            /* ZB-1p: strictly better where the warm-up is the bottleneck
             * (m = p), never worse anywhere */
            for (int m = p; m <= 3 * p; m += p) {
                pm_sched_req q = req_of(p, m, *cs[ci], 0);
                figs h1 = must("zb-h1", q), z1 = must("zb-1p", q);
                figs h2 = must("zb-h2", q), z2 = must("zb-2p", q);
                assert_true(z1.makespan <= h1.makespan * (1 + 1e-12));
                assert_true(z2.makespan <= h2.makespan * (1 + 1e-12));
                if (m == p) assert_true(z1.makespan < h1.makespan * (1 - 1e-6));
                if (m >= 2 * p) assert_true(z2.makespan < h2.makespan * (1 - 1e-6));
            }
        }
}

static void vzb_zero_bubble_at_unit_costs(void **state) {
    (void)state;
    for (int p = 2; p <= 8; p++)
        for (int m = 2 * p; m <= 3 * p; m += p) {
            figs f = must("v-zb", req_of(p, m, UNIT, 0));
            if (!(f.bubble < 1e-9)) fail_msg("v-zb p=%d m=%d: bubble %g", p, m, f.bubble);
            assert_true(f.peak <= 1.0 + 1e-9);
            /* and with real costs it is at least as good as the fixed ZB-V */
            pm_sched_req q = req_of(p, m, REAL, 0);
            assert_true(must("v-zb", q).makespan <= must("zb-v", q).makespan * (1 + 1e-12));
        }
}

static void autov_monotone_in_limit(void **state) {
    (void)state;
    for (int p = 4; p <= 6; p += 2) {
        double prev = INFINITY;
        for (double lim = 0.4; lim <= 2.0 + 1e-9; lim += 0.2) {
            figs f;
            pm_err e;
            pm_sched_req q = req_of(p, 2 * p, REAL, lim);
            pm_status st = gen("auto-v", &q, &f, &e);
            if (st == PM_ERR_MEMLIMIT) {
                assert_true(isinf(prev)); /* only below the floor, never above a success */
                continue;
            }
            assert_int_equal(st, PM_OK);
            if (f.makespan > prev * (1 + 1e-12))
                fail_msg("auto-v p=%d: makespan %g at %g M > %g at a smaller limit", p,
                         f.makespan, lim, prev);
            prev = f.makespan;
        }
        assert_false(isinf(prev));
    }
}

static void autov_never_worse_than_fixed_blocks(void **state) {
    (void)state;
    static const char *const fixed[] = {"v-min", "v-half", "v-zb", "dualpipev"};
    for (int p = 3; p <= 7; p += 2)
        for (size_t k = 0; k < 4; k++) {
            pm_sched_req q = req_of(p, 3 * p, REAL, 0);
            figs a = must(fixed[k], q);
            q.mem_limit = a.peak;
            figs b = must("auto-v", q);
            if (b.makespan > a.makespan * (1 + 1e-12))
                fail_msg("auto-v p=%d at %s's peak %g: %g > %g", p, fixed[k], a.peak,
                         b.makespan, a.makespan);
        }
}

/* DualPipeV is a V candidate when it builds (m >= 2p), once, with the
 * makespan and peak it has built alone; below 2p it is not there. */
static void v_pool_holds_dualpipev(void **state) {
    (void)state;
    for (int p = 2; p <= 4; p++)
        for (int m = 2 * p - 1; m <= 2 * p + 1; m++) {
            pm_sched_req q = req_of(p, m, REAL, 0);
            pm_cand_pool pl = {0};
            pm_err e;
            assert_int_equal(pm_cand_pool_v(&pl, &q, 2.0, &e), PM_OK);
            int n = 0;
            for (int i = 0; i < pl.n; i++) {
                if (strcmp(pl.c[i].pt.kind, "dualpipev")) continue;
                figs f = must("dualpipev", q);
                assert_int_equal(pl.c[i].fam, PM_PLACE_V);
                assert_true(fabs(pl.c[i].pt.makespan - f.makespan) <= 1e-12 * f.makespan);
                assert_true(fabs(pl.c[i].pt.peak - f.peak) <= 1e-12);
                n++;
            }
            if (n != (m >= 2 * p)) fail_msg("p=%d m=%d: %d dualpipev candidates", p, m, n);
            pm_cand_pool_free(&pl);
        }
}

/* Every limit-taking kind, over (p, m, limit, memory model): either a
 * schedule within the limit on every device (gen checks), or a refusal
 * that says the limit is the problem. */
static void limit_respected_everywhere(void **state) {
    (void)state;
    static const char *const kinds[] = {"zb", "zb-1p", "zb-2p", "v-zb", "auto-v"};
    static const double limits[] = {0.3, 0.55, 0.8, 1.0, 1.35, 2.0};
    const pm_mem mems[] = {PM_MEM_DEFAULT, {2, -0.5, -1.5, 0}};
    static const int ps[] = {2, 3, 5};
    int built = 0;
    for (size_t pi = 0; pi < 3; pi++)
        for (int mi = 0; mi < 2; mi++)
            for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++)
                for (int mm = 0; mm < 2; mm++)
                    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                        int p = ps[pi], m = mi ? 2 * p + 1 : p;
                        pm_sched_req q = req_of(p, m, SKEW, limits[li]);
                        q.mem = mems[mm];
                        figs f;
                        pm_err e;
                        pm_status st = gen(kinds[k], &q, &f, &e);
                        if (st && st != PM_ERR_MEMLIMIT)
                            fail_msg("%s p=%d m=%d limit %g: %s", kinds[k], p, m, limits[li],
                                     e.msg);
                        built += st == PM_OK;
                    }
    assert_true(built > 250); /* most combinations must succeed */
}

static void search_within_limit_and_best(void **state) {
    (void)state;
    int n;
    const pm_sched_kind *k = pm_sched_kinds(&n);
    for (double lim = 0.5; lim <= 2.0; lim += 0.5) {
        pm_sched_req q = req_of(6, 12, REAL, lim);
        pm_sched s;
        pm_search_point pt;
        pm_err e;
        char why[512];
        assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
        assert_non_null(strstr(why, "within"));
        pm_cost c;
        assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
        assert_int_equal(pm_sched_validate(&s, &c, lim, &e), PM_OK);
        pm_cost_free(&c);
        pm_sched_free(&s);
        /* no named kind that fits the limit is faster */
        for (int i = 0; i < n; i++) {
            pm_sched_req r = q;
            r.mem_limit = 0;
            if (k[i].place == PM_PLACE_LOOP) r.v = 2;
            if (!strcmp(k[i].name, "auto-v") || !strcmp(k[i].name, "zb")) r.mem_limit = lim;
            figs f;
            if (gen(k[i].name, &r, &f, &e)) continue;
            if (f.peak <= lim * (1 + 1e-9) && f.makespan < pt.makespan * (1 - 1e-12))
                fail_msg("search at %g M: %s (%g) beats the answer %s (%g)", lim, k[i].name,
                         f.makespan, pt.kind, pt.makespan);
        }
    }
}

/* A model cut into at most p + 2 pieces: the search answers with a
 * schedule of at most that many stages, the fastest single-placement one
 * (as a search on that family alone, the curve's, finds), and says why the
 * V and loop families are out; where V would win without the cap. */
static void search_within_max_stages(void **state) {
    (void)state;
    for (double lim = 1.0; lim <= 2.0; lim += 0.5) {
        pm_sched_req q = req_of(4, 8, UNIT, lim);
        pm_sched s;
        pm_search_point pt, single;
        pm_err e;
        char why[512];
        assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
        assert_int_equal(s.place, PM_PLACE_V); /* uncapped, V wins here */
        pm_sched_free(&s);
        q.max_stages = 6;
        assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
        assert_true(s.S <= 6);
        assert_non_null(strstr(why, "v: 8 stages, more than the 6 the model can be cut into"));
        assert_non_null(strstr(why, "loop: 8 stages"));
        pm_sched_free(&s);
        pm_search_point pts[PM_PLACE_COUNT];
        pm_sched_req c = q;
        c.max_stages = 0;
        assert_int_equal(pm_sched_curve(&c, &lim, 1, pts, &e), PM_OK);
        single = pts[PM_PLACE_SINGLE];
        assert_true(single.ok);
        assert_float_equal(pt.makespan, single.makespan, 1e-9 * single.makespan);
    }
    pm_sched_req q = req_of(4, 8, UNIT, 1.0);
    pm_sched s;
    pm_err e;
    q.max_stages = 3; /* fewer than the devices */
    assert_int_equal(pm_sched_search(&s, &q, NULL, NULL, 0, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "max_stages=3 is fewer than the 4 devices"));
}

/* What search_each offers, as the visitor saw it. */
typedef struct {
    int n, stop_at;
    double last, limit;
    char first[32];
    pm_sched_req q;
    int bad;
} offered;

static pm_status see(void *ctx, const pm_sched *s, const pm_search_point *pt, int *stop,
                     pm_err *err) {
    offered *o = ctx;
    pm_cost c;
    pm_sim sim;
    if (!o->n) snprintf(o->first, sizeof o->first, "%s", s->kind);
    /* fastest first, each within the limit, its figures its own */
    o->bad += pt->makespan < o->last * (1 - 1e-12) || pt->peak > o->limit * (1 + 1e-9);
    assert_int_equal(pm_cost_init_uniform(&c, s, o->q.t, o->q.mem, err), PM_OK);
    assert_int_equal(pm_sched_validate(s, &c, o->limit, err), PM_OK);
    assert_int_equal(pm_sim_run(&sim, s, &c, err), PM_OK);
    o->bad += fabs(sim.makespan - pt->makespan) > 1e-9 * pt->makespan;
    pm_sim_free(&sim);
    pm_cost_free(&c);
    o->last = pt->makespan;
    *stop = ++o->n == o->stop_at;
    return PM_OK;
}

/* search_each offers every candidate within the limit, fastest first,
 * the search's own answer first, each valid under the limit with its own
 * figures; the visitor can stop it; below the floor it names the floor. */
static void search_each_offers_all_fastest_first(void **state) {
    (void)state;
    pm_sched_req q = req_of(4, 8, REAL, 1.5);
    pm_sched best;
    pm_search_point pt;
    pm_err e;
    assert_int_equal(pm_sched_search(&best, &q, &pt, NULL, 0, &e), PM_OK);
    offered o = {.limit = 1.5, .q = q};
    assert_int_equal(pm_sched_search_each(&q, see, &o, &e), PM_OK);
    assert_int_equal(o.bad, 0);
    assert_true(o.n > 10);
    assert_string_equal(o.first, best.kind);
    pm_sched_free(&best);
    offered two = {.limit = 1.5, .q = q, .stop_at = 2};
    assert_int_equal(pm_sched_search_each(&q, see, &two, &e), PM_OK);
    assert_int_equal(two.n, 2);
    q.mem_limit = 0.01;
    offered none = {.limit = 0.01, .q = q};
    assert_int_equal(pm_sched_search_each(&q, see, &none, &e), PM_ERR_MEMLIMIT);
    assert_int_equal(none.n, 0);
    assert_non_null(strstr(e.msg, "the smallest feasible limit is"));
}

static void infeasible_limits_name_the_minimum(void **state) {
    (void)state;
    for (int p = 3; p <= 9; p += 3) {
        /* the named minimum is at most V-Min's peak floor((p+4)/3)/p (the
         * V-ZB greedy can go below it), auto-v works at it and refuses just
         * below it, and the refusal names it */
        pm_sched_req q = req_of(p, 2 * p, REAL, 0.1);
        double vmin = (double)((p + 4) / 3) / p, got;
        pm_err e;
        assert_int_equal(pm_sched_auto_v_min_limit(&q, &got, &e), PM_OK);
        assert_true(got <= vmin + 1e-9 && got > 0.1);
        pm_sched s;
        assert_int_equal(pm_sched_generate(&s, "auto-v", &q, &e), PM_ERR_MEMLIMIT);
        char num[32];
        snprintf(num, sizeof num, "%.4g M", got);
        if (!strstr(e.msg, num)) fail_msg("'%s' does not name %s", e.msg, num);
        q.mem_limit = got;
        assert_true(must("auto-v", q).peak <= got + 1e-9);
        q.mem_limit = got * (1 - 1e-3);
        assert_int_equal(pm_sched_generate(&s, "auto-v", &q, &e), PM_ERR_MEMLIMIT);
    }
    /* the search: nothing below one V stage's activation (1/(2p) M), which
     * even a recomputing pass holds while it runs; the limit it names works */
    pm_sched_req q = req_of(8, 16, REAL, 0.05);
    pm_sched s;
    pm_err e;
    char why[256];
    assert_int_equal(pm_sched_search(&s, &q, NULL, why, sizeof why, &e), PM_ERR_MEMLIMIT);
    const char *at = strstr(e.msg, "smallest feasible limit is ");
    assert_non_null(at);
    double named = atof(at + strlen("smallest feasible limit is "));
    assert_true(named >= 1.0 / 16 && named < 1.0 / 8); /* below 1/p: recomputation */
    q.mem_limit = named * (1 + 1e-3); /* printed to 4 digits */
    assert_int_equal(pm_sched_search(&s, &q, NULL, why, sizeof why, &e), PM_OK);
    assert_true(s.recompute == 1);
    pm_sched_free(&s);
    q.mem_limit = 0;
    assert_int_equal(pm_sched_generate(&s, "auto-v", &q, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "auto-v needs mem_limit=X"));
}

/* The search's V pool holds every V schedule the V-ZB greedy finds: at
 * p = 2, 0.75 M is below V-Min's peak (1.0 M) yet the greedy fits there,
 * far faster than the single placement (the search once said "v: none
 * fits" and returned zb at 192672). */
static void search_sees_vzb_below_vmin(void **state) {
    (void)state;
    pm_sched_req q = {.p = 2, .m = 4, .t = {9918, 10434, 7038, 213}, .mem = PM_MEM_DEFAULT,
                      .mem_limit = 0.75};
    pm_err e;
    pm_sched direct, best;
    assert_int_equal(pm_sched_generate(&direct, "v-zb", &q, &e), PM_OK);
    pm_cost c;
    pm_sim sd, sb;
    assert_int_equal(pm_cost_init_uniform(&c, &direct, q.t, q.mem, &e), PM_OK);
    assert_int_equal(pm_sim_run(&sd, &direct, &c, &e), PM_OK);
    pm_search_point pt;
    char why[256];
    assert_int_equal(pm_sched_search(&best, &q, &pt, why, sizeof why, &e), PM_OK);
    assert_int_equal(best.place, PM_PLACE_V);
    assert_int_equal(pm_sim_run(&sb, &best, &c, &e), PM_OK);
    assert_true(sb.makespan <= sd.makespan + 1e-9);
    assert_true(pm_sim_peak_max_x(&sb) <= 0.75 + 1e-9);
    pm_sim_free(&sd), pm_sim_free(&sb), pm_cost_free(&c);
    pm_sched_free(&direct), pm_sched_free(&best);
}

static void curve_per_family_monotone(void **state) {
    (void)state;
    enum { N = 36 };
    double lim[N];
    pm_search_point pt[PM_PLACE_COUNT * N];
    for (int k = 0; k < N; k++) lim[k] = 0.25 + 0.05 * k;
    pm_sched_req q = req_of(6, 18, REAL, 0);
    pm_err e;
    assert_int_equal(pm_sched_curve(&q, lim, N, pt, &e), PM_OK);
    for (int f = 0; f < PM_PLACE_COUNT; f++) {
        double prev = INFINITY;
        for (int k = 0; k < N; k++) {
            const pm_search_point *x = &pt[f * N + k];
            if (!x->ok) {
                assert_true(isinf(prev)); /* a family never stops fitting */
                continue;
            }
            assert_true(x->peak <= lim[k] + 1e-9);
            assert_true(x->bubble <= prev + 1e-12);
            prev = x->bubble;
        }
    }
    /* the V family reaches below V-Min's peak (floor((6+4)/3)/6 = 0.5 M):
     * the V-ZB greedy runs under any limit from a quarter of M, and there
     * it beats the single placement */
    assert_true(pt[PM_PLACE_V * N + 2].ok); /* 0.35 */
    assert_true(pt[PM_PLACE_V * N + 2].bubble < pt[PM_PLACE_SINGLE * N + 2].bubble);
    assert_true(pt[PM_PLACE_V * N + 5].ok); /* 0.50 */
    /* memory buys speed: at 1F1B's memory the V family beats V-Min's point */
    assert_true(pt[PM_PLACE_V * N + 15].bubble < pt[PM_PLACE_V * N + 5].bubble);
}

/* Between V-Half's memory and 1F1B's, memory must keep buying speed: at
 * unit costs, p = 4..8, m = 3p, auto-v's bubble falls strictly from 0.625 M
 * to 0.75 M to 0.875 M, and at 0.875 M it is strictly below V-Half's (whose
 * peak is at most 0.75 M here, so auto-v may use it). Before the
 * lane-capped list variant of the V greedy the curve was flat there (p = 5
 * and 6 gave the same bubble at 0.75 and 0.875 M). */
static void autov_steep_between_half_and_1f1b(void **state) {
    (void)state;
    for (int p = 4; p <= 8; p++) {
        int m = 3 * p;
        figs half = must("v-half", req_of(p, m, UNIT, 0));
        assert_true(half.peak <= 0.75 + 1e-9);
        figs a = must("auto-v", req_of(p, m, UNIT, 0.625));
        figs b = must("auto-v", req_of(p, m, UNIT, 0.75));
        figs c = must("auto-v", req_of(p, m, UNIT, 0.875));
        if (!(b.bubble < a.bubble - 1e-9 && c.bubble < b.bubble - 1e-9))
            fail_msg("p=%d m=%d: auto-v bubble %g, %g, %g at 0.625, 0.75, 0.875 M is not "
                     "strictly falling", p, m, a.bubble, b.bubble, c.bubble);
        if (!(c.bubble < half.bubble - 1e-9))
            fail_msg("p=%d m=%d: auto-v at 0.875 M (bubble %g) not below v-half (%g)", p, m,
                     c.bubble, half.bubble);
    }
}

/* Recomputation extends the search below every plain schedule's memory and
 * is picked only when nothing faster fits. At p = 4, m = 8, unit costs and
 * the default keep f/16: 1F1B-R peaks at (4/16 + 1)/4 = 0.3125 M (by hand,
 * as test_sim); the plain kinds' lowest peak is the zb greedy's quarter M
 * level. */
static void search_recomputes_only_when_needed(void **state) {
    (void)state;
    pm_sched_req q = req_of(4, 8, UNIT, 0.32);
    pm_sched s;
    pm_search_point pt;
    char why[512];
    pm_err e;
    assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
    /* whatever wins: within the limit, and no plain schedule that fits
     * (the zb greedy at this limit) is faster */
    assert_true(pt.peak <= 0.32 + 1e-9);
    figs zb = must("zb", q);
    assert_true(pt.makespan <= zb.makespan);
    figs r = must("1f1b-r", req_of(4, 8, UNIT, 0.32));
    assert_true(fabs(r.peak - 0.3125) < 1e-12 && r.makespan == 44); /* (m + p - 1) 4 */
    assert_true(pt.makespan <= r.makespan);
    assert_true(s.recompute == 1); /* here only recomputation is fast */
    pm_sched_free(&s);
    /* at 1F1B's memory, plain schedules fit and are faster: no recomputation */
    q.mem_limit = 1.0;
    assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
    assert_true(s.recompute == 0);
    pm_sched_free(&s);
    /* --recompute: only recomputed candidates */
    q.recompute = 1;
    assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_OK);
    assert_true(s.recompute == 1);
    pm_sched_free(&s);
    /* below anything (one stage's rebuilt activation alone is 1/8 M on the
     * V placement): refused, naming the smallest feasible limit */
    q = req_of(4, 8, UNIT, 0.05);
    assert_int_equal(pm_sched_search(&s, &q, &pt, why, sizeof why, &e), PM_ERR_MEMLIMIT);
    assert_non_null(strstr(e.msg, "smallest feasible limit"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(zb_equals_h_at_unit_costs),
        cmocka_unit_test(zb_beats_h_with_real_costs),
        cmocka_unit_test(vzb_zero_bubble_at_unit_costs),
        cmocka_unit_test(autov_monotone_in_limit),
        cmocka_unit_test(autov_never_worse_than_fixed_blocks),
        cmocka_unit_test(v_pool_holds_dualpipev),
        cmocka_unit_test(autov_steep_between_half_and_1f1b),
        cmocka_unit_test(limit_respected_everywhere),
        cmocka_unit_test(search_within_limit_and_best),
        cmocka_unit_test(search_within_max_stages),
        cmocka_unit_test(search_each_offers_all_fastest_first),
        cmocka_unit_test(infeasible_limits_name_the_minimum),
        cmocka_unit_test(curve_per_family_monotone),
        cmocka_unit_test(search_sees_vzb_below_vmin),
        cmocka_unit_test(search_recomputes_only_when_needed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
