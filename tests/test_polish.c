/* test_polish.c: the local search over per-device orders (polish.c) and
 * the searches that polish their fronts. Facts, from outside the code
 * under test:
 *   - p = 2, m = 2, unit costs: device 1 running F0 F1 B0 W0 B1 W1 gives 8
 *     and F0 B0 F1 B1 W0 W1 gives 7, the optimum (by hand, below);
 *   - on every kind, shape and cost tried, up to p m = 2048, the result
 *     validates under the cap it was given, is no slower than what it
 *     started from, is the same on a second run (the searches rebuild a
 *     winner that way) and spent at most its budget of simulated passes;
 *   - the search's schedule at p = 2, 0.75 M, costs 3,3,2 is within 5% of
 *     the optimum the slot search (SAT, test_optimal.c) proves for the same
 *     case; unpolished, v-zb is 6.7 to 7.7% above it;
 *   - `search` for a limit and `curve` over many give the same makespan at
 *     every limit (two pools of different tops);
 *   - the replay that resumes after a move and stops when it dies out
 *     (resim.h) gives the times a full replay of the moved schedule gives
 *     (pm_sim_run: the second implementation), bit for bit, on random
 *     moves, kept or undone, of many kinds, shapes, costs and limits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_sched.h"
#include "schedule/polish.h" /* the searches' budget */
#include "schedule/resim.h"  /* the replay that resumes */
#include "schedule/slots.h"
#include "schedule/sched.h"

static double makespan(const pm_sched *s, const pm_cost *c) {
    pm_sim sim;
    pm_err e;
    if (pm_sim_run(&sim, s, c, &e)) fail_msg("%s", e.msg);
    double x = sim.makespan;
    pm_sim_free(&sim);
    return x;
}

static void parse(pm_sched *s, const char *text) {
    pm_err e;
    if (pm_sched_parse_text(s, text, strlen(text), &e)) fail_msg("%s", e.msg);
}

/* Device 0 runs stage 0: F0 [0,1], F1 [1,2]. With device 1 holding F1
 * before B0 and both W before B1, device 0's B1 waits for 6 and its W1
 * ends at 8. Device 1 running F0 B0 F1 B1 W0 W1 (B0 ends at 3, B1 at 5)
 * lets device 0 run B0 [3,4], W0 [4,5], B1 [5,6], W1 [6,7]: 7, which
 * test_optimal.c's hand case shows no order beats. */
static void hand_case(void **state) {
    (void)state;
    pm_sched s;
    parse(&s, "0F0 0F1 0I0 0W0 0I1 0W1\n1F0 1F1 1I0 1W0 1I1 1W1\n");
    pm_cost c;
    pm_err e;
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, &e), PM_OK);
    assert_true(fabs(makespan(&s, &c) - 8) < 1e-12);
    pm_polish_stats ps;
    pm_polish_cfg cfg = {0, 1000000, 10};
    assert_int_equal(pm_sched_polish(&s, &c, &cfg, &ps, &e), PM_OK);
    assert_true(ps.moves > 0 && ps.converged && ps.rounds >= 2 && ps.spent <= 1000000);
    assert_true(ps.optimal && ps.kicks == 0); /* 7 meets bound.c's lower bound: no kick needed */
    assert_true(fabs(makespan(&s, &c) - 7) < 1e-12);
    assert_int_equal(pm_sched_validate(&s, &c, 0, &e), PM_OK);
    /* no budget, or a cap the schedule is over: left as it is */
    pm_sched t;
    parse(&t, "0F0 0F1 0I0 0W0 0I1 0W1\n1F0 1F1 1I0 1W0 1I1 1W1\n");
    cfg.budget = 0;
    assert_int_equal(pm_sched_polish(&t, &c, &cfg, &ps, &e), PM_OK);
    assert_true(ps.moves == 0 && !ps.converged && ps.spent == 0);
    cfg = (pm_polish_cfg){0.5 * pm_cost_M(&c), 1000000, 10};
    assert_int_equal(pm_sched_polish(&t, &c, &cfg, &ps, &e), PM_OK);
    assert_int_equal(ps.moves, 0);
    assert_true(fabs(makespan(&t, &c) - 8) < 1e-12);
    pm_sched_free(&t);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static int same_orders(const pm_sched *a, const pm_sched *b) {
    for (int d = 0; d < a->p; d++) {
        if (a->len[d] != b->len[d]) return 0;
        if (memcmp(pm_sched_dev(a, d), pm_sched_dev(b, d), (size_t)a->len[d] * sizeof(pm_pass)))
            return 0;
    }
    return 1;
}

/* Polishes kind's schedule within its own peak; 1 if it got faster. */
static int check_kind(const char *kind, const pm_sched_req *q) {
    pm_sched s, t;
    pm_err e;
    if (pm_sched_generate(&s, kind, q, &e)) return 0; /* not for this shape */
    pm_cost c;
    pm_sim sim;
    assert_int_equal(pm_cost_init_uniform(&c, &s, q->t, q->mem, &e), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
    double before = sim.makespan, peak = pm_sim_peak_max_x(&sim);
    assert_int_equal(pm_sched_copy(&t, &s, &e), PM_OK);
    /* odd shapes: a small budget and no patience (kicks until it is spent) */
    int odd = (q->p + q->m) % 2;
    pm_polish_cfg cfg = {peak * sim.M, odd ? 20000 : PM_POLISH_BUDGET, odd ? 0 : 10};
    pm_polish_stats ps;
    assert_int_equal(pm_sched_polish(&s, &c, &cfg, &ps, &e), PM_OK);
    assert_int_equal(pm_sched_polish(&t, &c, &cfg, NULL, &e), PM_OK);
    if (ps.spent > cfg.budget) fail_msg("%s: spent %lld of %lld", kind, (long long)ps.spent,
                                        (long long)cfg.budget);
    if (!same_orders(&s, &t)) fail_msg("%s p=%d m=%d: two polishes differ", kind, q->p, q->m);
    if (pm_sched_validate(&s, &c, peak, &e))
        fail_msg("%s p=%d m=%d: %s", kind, q->p, q->m, e.msg);
    double after = makespan(&s, &c);
    if (after > before * (1 + 1e-12))
        fail_msg("%s p=%d m=%d: %g after, %g before", kind, q->p, q->m, after, before);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    pm_sched_free(&t);
    return after < before * (1 - 1e-12);
}

static void never_worse_never_over(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {3, 3, 2, 0}, {9918, 10434, 7038, 213}};
    int nk, faster = 0, tried = 0;
    const pm_sched_kind *k = pm_sched_kinds(&nk);
    for (int i = 0; i < nk; i++)
        for (int ci = 0; ci < 4; ci++) /* the last: measured costs, recomputed */
            for (int p = 2; p <= 4; p++)
                for (int m = p; m <= 2 * p; m += p) {
                    pm_sched_req q = {.p = p, .m = m, .t = costs[ci % 3], .mem = PM_MEM_DEFAULT,
                                      .mem_limit = 0.75, .recompute = ci == 3};
                    faster += check_kind(k[i].name, &q);
                    tried++;
                }
    assert_true(tried > 100);
    assert_true(faster > 10); /* it does something */
}

static uint64_t rand_next(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static void move_pass(pm_pass *list, int64_t i, int64_t j) {
    pm_pass x = list[i];
    if (i < j) memmove(list + i, list + i + 1, (size_t)(j - i) * sizeof *list);
    else memmove(list + j + 1, list + j, (size_t)(i - j) * sizeof *list);
    list[j] = x;
}

/* The times of r's replay equal a full replay of s's (every pass's start
 * and end, the spans, the makespan: bit for bit; the sum of the ends, kept
 * by differences, to rounding), or both deadlock; 1 if they replayed. */
static int same_as_full(const pm_resim *r, pm_status got, const pm_sched *s, const pm_cost *c,
                        const char *what) {
    pm_sim f;
    pm_err e;
    pm_status want = pm_sim_run(&f, s, c, &e);
    if (want != got) fail_msg("%s: full replay %d, resumed %d", what, want, got);
    if (want) return 0;
    const pm_sim *a = &r->sim;
    double ends = 0;
    for (int d = 0; d < s->p; d++) {
        int64_t base = (int64_t)d * s->cap;
        for (int64_t k = 0; k < s->len[d]; k++) {
            if (a->start[base + k] != f.start[base + k] || a->end[base + k] != f.end[base + k])
                fail_msg("%s: device %d pass %lld: start %.17g/%.17g end %.17g/%.17g", what, d,
                         (long long)k, a->start[base + k], f.start[base + k], a->end[base + k],
                         f.end[base + k]);
            ends += f.end[base + k];
        }
        if (a->span[d] != f.span[d])
            fail_msg("%s: device %d: span %.17g/%.17g", what, d, a->span[d], f.span[d]);
    }
    if (a->makespan != f.makespan)
        fail_msg("%s: makespan %.17g/%.17g", what, a->makespan, f.makespan);
    if (fabs(r->ends - ends) > 1e-12 * ends) fail_msg("%s: ends %.17g/%.17g", what, r->ends, ends);
    pm_sim_free(&f);
    return 1;
}

/* Random moves of one pass up to 6 places (dependencies within the device
 * and memory unchecked: some deadlock), each replayed from its cut until it
 * dies out; kept when it replays and a coin says so, else undone. Every
 * 5th is cut without a run, or stopped after 3 passes, then undone.
 * Returns the moves that replayed; *saved counts the passes not replayed. */
static int resume_moves(pm_sched *s, const pm_cost *c, uint64_t *rng, int n, int64_t *saved) {
    pm_resim r;
    pm_err e;
    char what[128];
    assert_int_equal(pm_resim_init(&r, s, &e), PM_OK);
    assert_int_equal(pm_resim_full(&r, s, c, &e), PM_OK);
    int ok = 0;
    for (int k = 0; k < n; k++) {
        int d = (int)(rand_next(rng) % (uint64_t)s->p);
        int64_t len = s->len[d];
        int64_t i = (int64_t)(rand_next(rng) % (uint64_t)len);
        int64_t j = i + (int64_t)(rand_next(rng) % 13) - 6;
        if (j < 0 || j >= len || j == i) continue;
        snprintf(what, sizeof what, "%s p=%d m=%d move %d: device %d, %lld -> %lld", s->kind,
                 s->p, s->m, k, d, (long long)i, (long long)j);
        move_pass(pm_sched_dev(s, d), i, j);
        int64_t most = pm_resim_cut(&r, s, d, i < j ? i : j, i < j ? j : i), total = 0;
        for (int x = 0; x < s->p; x++) total += s->len[x];
        assert_true(most >= 1 && most <= total);
        int odd = k % 5 == 0;
        if (!odd || k % 2) {
            pm_status st = pm_resim_run(&r, s, c, odd ? 3 : INT64_MAX, &e);
            assert_true(r.ran <= most && (!odd || r.ran <= 3));
            if (!odd || !r.cut_short) {
                assert_false(r.cut_short);
                int ran = same_as_full(&r, st, s, c, what);
                ok += ran;
                *saved += most - r.ran;
                if (ran && rand_next(rng) % 2) continue; /* kept */
            }
        }
        move_pass(pm_sched_dev(s, d), j, i);
        pm_resim_undo(&r, s);
        strncat(what, ", undone", sizeof what - strlen(what) - 1);
        assert_true(same_as_full(&r, PM_OK, s, c, what));
    }
    pm_resim_free(&r);
    return ok;
}

static void resume_equals_full_replay(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {3, 3, 2, 1}, {9918, 10434, 7038, 213}};
    static const struct {
        const char *kind;
        double limit; /* x M, 0: none */
        int v, recompute;
    } kinds[] = {{"1f1b", 0, 0, 0},   {"zb-h1", 0, 0, 0},    {"zb", 0.5, 0, 0},
                 {"zb", 0, 0, 0},     {"v-zb", 0.75, 0, 0}, {"v-zb", 0.5, 0, 0},
                 {"v-min", 0, 0, 0},  {"v-half", 0, 0, 0},  {"interleaved", 0, 2, 0},
                 {"1f1b-r", 0, 0, 1}};
    static const int shapes[][2] = {{2, 2}, {2, 5}, {3, 7}, {4, 4}, {4, 9}, {8, 16}};
    uint64_t rng = 0x2545f4914f6cdd1dull;
    int ran = 0, tried = 0;
    int64_t saved = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (int ci = 0; ci < 3; ci++)
            for (int si = 0; si < 6; si++) {
                pm_sched_req q = {.p = shapes[si][0], .m = shapes[si][1], .t = costs[ci],
                                  .mem = PM_MEM_DEFAULT, .mem_limit = kinds[ki].limit,
                                  .v = kinds[ki].v, .recompute = kinds[ki].recompute};
                pm_sched s;
                pm_cost c;
                pm_err e;
                if (pm_sched_generate(&s, kinds[ki].kind, &q, &e)) continue; /* not this shape */
                assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
                ran += resume_moves(&s, &c, &rng, 150, &saved);
                tried++;
                pm_cost_free(&c);
                pm_sched_free(&s);
            }
    if (tried < 120 || ran < 5000) fail_msg("%d schedules, %d moves replayed", tried, ran);
    assert_true(saved > 0); /* some runs stopped before the end */
}

/* At p m = 2048, the most the searches polish: never worse, within the
 * cap, the same twice, and within its budget of simulated passes. */
static void at_scale(void **state) {
    (void)state;
    static const struct {
        const char *kind;
        int p, m;
        double limit;
        pm_costs t;
    } cases[] = {{"v-zb", 16, 128, 0.75, {9918, 10434, 7038, 213}},
                 {"zb", 32, 64, 0.5, {1, 1, 1, 0}},
                 {"v-half", 8, 256, 0, {3, 3, 2, 1}}};
    for (int i = 0; i < 3; i++) {
        pm_sched_req q = {.p = cases[i].p, .m = cases[i].m, .t = cases[i].t,
                          .mem = PM_MEM_DEFAULT, .mem_limit = cases[i].limit};
        assert_int_equal((int64_t)q.p * q.m, PM_POLISH_MAX_PM);
        pm_sched s, t;
        pm_cost c;
        pm_err e;
        assert_int_equal(pm_sched_generate(&s, cases[i].kind, &q, &e), PM_OK);
        assert_int_equal(pm_cost_init_uniform(&c, &s, q.t, q.mem, &e), PM_OK);
        assert_int_equal(pm_sched_copy(&t, &s, &e), PM_OK);
        pm_sim sim;
        assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
        double before = sim.makespan, peak = pm_sim_peak_max_x(&sim);
        pm_polish_cfg cfg = {peak * sim.M, 4 * PM_POLISH_BUDGET, PM_POLISH_PATIENCE};
        pm_polish_stats ps, pt;
        assert_int_equal(pm_sched_polish(&s, &c, &cfg, &ps, &e), PM_OK);
        assert_int_equal(pm_sched_polish(&t, &c, &cfg, &pt, &e), PM_OK);
        if (ps.spent > cfg.budget || ps.spent <= 0)
            fail_msg("%s: spent %lld of %lld", cases[i].kind, (long long)ps.spent,
                     (long long)cfg.budget);
        if (!same_orders(&s, &t) || ps.spent != pt.spent || ps.moves != pt.moves)
            fail_msg("%s p=%d m=%d: two polishes differ", cases[i].kind, q.p, q.m);
        if (pm_sched_validate(&s, &c, peak, &e)) fail_msg("%s: %s", cases[i].kind, e.msg);
        double after = makespan(&s, &c);
        if (after > before * (1 + 1e-12))
            fail_msg("%s p=%d m=%d: %g after, %g before", cases[i].kind, q.p, q.m, after, before);
        pm_sim_free(&sim);
        pm_cost_free(&c);
        pm_sched_free(&s);
        pm_sched_free(&t);
    }
}

static void search_near_the_optimum(void **state) {
    (void)state;
    if (!pm_slots_available()) skip(); /* built with NO_SAT=1: no optimum to compare */
    for (int m = 4; m <= 8; m += 2) {
        pm_sched_req q = {.p = 2, .m = m, .t = {3, 3, 2, 0}, .mem = PM_MEM_DEFAULT,
                          .mem_limit = 0.75, .time_limit = 60};
        pm_sched best, opt;
        pm_search_point pt;
        pm_err e;
        char why[512];
        assert_int_equal(pm_sched_search(&best, &q, &pt, why, sizeof why, &e), PM_OK);
        assert_int_equal(pm_sched_generate(&opt, "optimal-v", &q, &e), PM_OK);
        assert_int_equal(opt.opt_status, PM_OPT_PROVEN);
        pm_cost c;
        assert_int_equal(pm_cost_init_uniform(&c, &best, q.t, q.mem, &e), PM_OK);
        double got = makespan(&best, &c), o = makespan(&opt, &c);
        assert_true(fabs(got - pt.makespan) < 1e-9 * got); /* the winner rebuilt as ranked */
        assert_int_equal(pm_sched_validate(&best, &c, q.mem_limit, &e), PM_OK);
        if (got > 1.05 * o) fail_msg("m=%d: search %g, optimum %g", m, got, o);
        assert_non_null(strstr(best.kind, "+polish"));
        pm_cost_free(&c);
        pm_sched_free(&best);
        pm_sched_free(&opt);
    }
}

/* Issue 21: at p = 8, m = 16, unit costs, the search within 1% of the V
 * placement's optimum at 0.75, 0.8125 and 0.875 M, and never below it. The
 * optima, 53.5, 52 and 50.5, are the slot search's proofs (`schedule
 * --kind optimal-v -p 8 -m 16 --mem-limit L --time-limit 900`: 219, 376
 * and 484 s when first run, before the lower bound met them; 11, 0.5 and
 * 33 s now, still too slow to prove here).
 * Before the slot-model step of the polish the search gave 54.5, 52.5 and
 * 52.5. */
static void search_near_the_optimum_p8(void **state) {
    (void)state;
    if (!pm_slots_available()) skip(); /* built with NO_SAT=1: no slot-model step */
    static const double lim[3] = {0.75, 0.8125, 0.875}, opt[3] = {53.5, 52, 50.5};
    for (int k = 0; k < 3; k++) {
        pm_sched_req q = {.p = 8, .m = 16, .t = {1, 1, 1, 0}, .mem = PM_MEM_DEFAULT,
                          .mem_limit = lim[k]};
        pm_sched best;
        pm_search_point pt;
        pm_err e;
        char why[512];
        assert_int_equal(pm_sched_search(&best, &q, &pt, why, sizeof why, &e), PM_OK);
        pm_cost c;
        assert_int_equal(pm_cost_init_uniform(&c, &best, q.t, q.mem, &e), PM_OK);
        assert_int_equal(pm_sched_validate(&best, &c, q.mem_limit, &e), PM_OK);
        double got = makespan(&best, &c);
        assert_true(fabs(got - pt.makespan) < 1e-9 * got); /* the winner rebuilt as ranked */
        if (got > 1.01 * opt[k] || got < opt[k])
            fail_msg("limit %g: search %g, proven optimum %g", lim[k], got, opt[k]);
        pm_cost_free(&c);
        pm_sched_free(&best);
    }
}

/* A pool holds what every smaller pool holds, so `search` (a pool built for
 * l) and `curve` (one pool for the largest limit) agree at every l, polish
 * and all. Before admission counted the level a candidate was built for,
 * p = 6, m = 7, costs 2,3,1,0.5 at 0.7 M gave 82 from search and 80 from
 * curve. */
static void search_agrees_with_curve(void **state) {
    (void)state;
    enum { N = 11 };
    static const pm_costs costs[] = {{2, 3, 1, 0.5}, {1, 1, 2, 0.25}};
    static const int shapes[][2] = {{3, 3}, {3, 7}, {5, 5}, {6, 7}};
    static const double lim[N] = {0.3, 0.45, 0.6, 0.7, 0.75, 0.85, 0.9, 1, 1.2, 1.5, 2};
    for (int si = 0; si < 4; si++)
        for (int ci = 0; ci < 2; ci++) {
            pm_sched_req q = {.p = shapes[si][0], .m = shapes[si][1], .t = costs[ci],
                              .mem = PM_MEM_DEFAULT};
            pm_search_point pt[PM_PLACE_COUNT * N];
            pm_err e;
            assert_int_equal(pm_sched_curve(&q, lim, N, pt, &e), PM_OK);
            for (int k = 0; k < N; k++) {
                double best = INFINITY;
                for (int f = 0; f < PM_PLACE_COUNT; f++)
                    if (pt[f * N + k].ok && pt[f * N + k].makespan < best)
                        best = pt[f * N + k].makespan;
                q.mem_limit = lim[k];
                pm_sched s;
                pm_search_point x;
                char why[512];
                pm_status st = pm_sched_search(&s, &q, &x, why, sizeof why, &e);
                if (isinf(best)) {
                    assert_int_equal(st, PM_ERR_MEMLIMIT);
                    continue;
                }
                assert_int_equal(st, PM_OK);
                if (fabs(x.makespan - best) > 1e-12 * best)
                    fail_msg("p=%d m=%d costs %d limit %g: search %g, curve %g", q.p, q.m, ci,
                             lim[k], x.makespan, best);
                pm_sched_free(&s);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hand_case),
        cmocka_unit_test(resume_equals_full_replay),
        cmocka_unit_test(never_worse_never_over),
        cmocka_unit_test(at_scale),
        cmocka_unit_test(search_near_the_optimum),
        cmocka_unit_test(search_near_the_optimum_p8),
        cmocka_unit_test(search_agrees_with_curve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
