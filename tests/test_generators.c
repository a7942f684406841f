/* test_generators.c: every named generator against the facts of
 * shared/reference/schedules.md. Each expected value is computed here from
 * the reference's formula (or from counting the outstanding forwards a
 * schedule's definition allows), never copied from the code's output.
 *
 * Units: costs are per device share (PM_COSTS_DEFAULT = 1,1,1,0), memory F
 * = +1, B = 0, W = -1 per device share, so one stage of a single-placement
 * schedule holds M/p and peaks read directly as multiples of M. */
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
#include "schedule/sched.h"
#include "util/alloc.h"
#include "schedule/work.h" /* the engine's steps, counted */

#define EPS 1e-9

static int imin(int a, int b) { return a < b ? a : b; }

/* The fixed-pattern and building-block kinds of issue 2, in registry order.
 * The searched kinds (zb-1p, v-zb, auto-v, ...) take a memory limit and are
 * tested with their generators. */
static const char *const named[] = {"gpipe", "1f1b",   "interleaved", "zb-h1", "zb-h2",
                                    "zb-v",  "v-min", "v-half",      "1f1b-v"};
#define N_NAMED (sizeof named / sizeof named[0])

/* Builds kind through the registry and fails the test with its message. */
static void gen(pm_sched *s, const char *kind, int p, int m, int v) {
    pm_err err = {{0}};
    pm_sched_req req = {.p = p, .m = m, .v = v};
    pm_status st = pm_sched_generate(s, kind, &req, &err);
    if (st) fail_msg("%s p=%d m=%d v=%d: %s", kind, p, m, v, err.msg);
}

/* Validates (no memory limit) and simulates with device-share costs t. */
static void gen_sim(pm_sched *s, pm_sim *sim, const char *kind, int p, int m, int v,
                    pm_costs t) {
    pm_err err = {{0}};
    pm_cost c;
    gen(s, kind, p, m, v);
    pm_status st = pm_sched_validate(s, NULL, 0, &err);
    if (st) fail_msg("%s p=%d m=%d v=%d invalid: %s", kind, p, m, v, err.msg);
    assert_int_equal(pm_cost_init_uniform(&c, s, t, PM_MEM_DEFAULT, NULL), PM_OK);
    st = pm_sim_run(sim, s, &c, &err);
    if (st) fail_msg("%s p=%d m=%d v=%d: %s", kind, p, m, v, err.msg);
    pm_cost_free(&c);
}

static void expect_near(double got, double want, const char *what, const char *kind, int p,
                        int m) {
    if (fabs(got - want) > EPS * (1 + fabs(want)))
        fail_msg("%s p=%d m=%d: %s is %.12g, expected %.12g", kind, p, m, what, got, want);
}

/* The nine kinds of issue 2 appear in this order (other kinds may sit
 * between or after them); names are unique and each entry is complete. */
static void test_registry_order_and_lookup(void **state) {
    (void)state;
    int n = 0;
    const pm_sched_kind *k = pm_sched_kinds(&n);
    assert_true(n >= 9);
    for (int i = 0; i < n; i++) {
        assert_non_null(k[i].about);
        assert_true(strlen(k[i].about) > 10);
        assert_non_null(k[i].min_m);
        assert_non_null(k[i].build);
        assert_ptr_equal(pm_sched_kind_find(k[i].name), &k[i]); /* first match is itself */
    }
    const pm_sched_kind *prev = NULL;
    for (size_t i = 0; i < N_NAMED; i++) {
        const pm_sched_kind *e = pm_sched_kind_find(named[i]);
        if (!e) fail_msg("kind %s missing from the registry", named[i]);
        assert_true(prev == NULL || e > prev);
        prev = e;
    }
    assert_null(pm_sched_kind_find("2f2b"));
    assert_null(pm_sched_kind_find(NULL));
    assert_int_equal(pm_sched_kind_find("interleaved")->place, PM_PLACE_LOOP);
    assert_int_equal(pm_sched_kind_find("zb-v")->place, PM_PLACE_V);
    assert_int_equal(pm_sched_kind_find("zb-h2")->place, PM_PLACE_SINGLE);
}

/* 1F1B: makespan (m+p-1)(T_F+T_B+T_W) at c = 0, bubble (p-1)/(m+p-1) and
 * rank r holding min(p-r, m) stage activations (p-r once m >= p), for m
 * below, at and above p and for unequal costs. */
static void test_1f1b_facts(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0}, {1, 0.5, 2, 0}};
    static const int ps[] = {1, 2, 3, 4, 8};
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t pi = 0; pi < 5; pi++) {
            int p = ps[pi];
            int ms[] = {1, p > 1 ? p - 1 : 1, p, p + 1, 2 * p, 3 * p + 2};
            for (size_t mi = 0; mi < 6; mi++) {
                int m = ms[mi];
                pm_costs t = costs[ci];
                pm_sched s;
                pm_sim sim;
                gen_sim(&s, &sim, "1f1b", p, m, 0, t);
                expect_near(sim.makespan, (m + p - 1) * (t.f + t.b + t.w), "makespan", "1f1b",
                            p, m);
                expect_near(sim.bubble, (double)(p - 1) / (m + p - 1), "bubble", "1f1b", p, m);
                for (int r = 0; r < p; r++)
                    expect_near(pm_sim_peak_x(&sim, r), (double)imin(p - r, m) / p, "peak",
                                "1f1b", p, m);
                if (m >= p) expect_near(pm_sim_peak_x(&sim, 0), 1.0, "device 0 peak", "1f1b", p, m);
                pm_sim_free(&sim);
                pm_sched_free(&s);
            }
        }
}

/* GPipe: every device holds all m stage activations (m/p M); makespan
 * (m+p-1)(T_F+T_B+T_W) at c = 0, like 1F1B, since only memory differs. */
static void test_gpipe_facts(void **state) {
    (void)state;
    pm_costs t = {2, 3, 1, 0};
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 2 * p + 1; m++) {
            pm_sched s;
            pm_sim sim;
            gen_sim(&s, &sim, "gpipe", p, m, 0, t);
            for (int r = 0; r < p; r++)
                expect_near(pm_sim_peak_x(&sim, r), (double)m / p, "peak", "gpipe", p, m);
            expect_near(sim.makespan, (m + p - 1) * (t.f + t.b + t.w), "makespan", "gpipe", p, m);
            pm_sim_free(&sim);
            pm_sched_free(&s);
        }
}

/* ZB-H1: makespan m(T_F+T_B+T_W) + (p-1)(T_F+T_B-T_W) at c = 0.
 * The schedule's assumptions: T_W <= T_F (a deferred W fits in the slot of
 * the forward it trails, so it never delays a B coming back) and m >= p
 * (the warm-up is not truncated). The cost sets all satisfy them, one at the
 * edge T_W = T_F. Peak: every rank holds at most p stages (p-r-1 warm-up,
 * then r steps whose W is deferred), so M on every device once m >= p and
 * 1F1B's max, min(p, m)/p M, for any m. */
static void test_zb_h1_facts(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0}, {3, 2, 1, 0}, {1, 3, 0.5, 0},
                                     {2, 1, 1.5, 0}};
    for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++)
        for (int p = 2; p <= 8; p += 2)
            for (int m = p; m <= 3 * p + 1; m += p / 2 + 1) {
                pm_costs t = costs[ci];
                pm_sched s;
                pm_sim sim;
                gen_sim(&s, &sim, "zb-h1", p, m, 0, t);
                double want = m * (t.f + t.b + t.w) + (p - 1) * (t.f + t.b - t.w);
                expect_near(sim.makespan, want, "makespan", "zb-h1", p, m);
                for (int r = 0; r < p; r++)
                    expect_near(pm_sim_peak_x(&sim, r), 1.0, "peak", "zb-h1", p, m);
                pm_sim_free(&sim);
                pm_sched_free(&s);
            }
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m < 2 * p; m++) {
            pm_sched s;
            pm_sim sim;
            gen_sim(&s, &sim, "zb-h1", p, m, 0, PM_COSTS_DEFAULT);
            expect_near(pm_sim_peak_max_x(&sim), (double)imin(p, m) / p, "peak max", "zb-h1", p,
                        m);
            pm_sim_free(&sim);
            pm_sched_free(&s);
        }
}

/* ZB-H2: makespan m(T_F+T_B+T_W) + (p-1)(T_F+T_B+2c-2T_W), zero bubble at
 * equal costs and c = 0. Assumptions: T_W <= T_F (as ZB-H1), 2c <= T_F+T_B
 * (the steady state absorbs a round trip between neighbours) and
 * m >= 2p-1 (rank 0's warm-up of 2(p-1) forwards plus one is complete).
 * The sets include c > 0, and both edges T_W = T_F and 2c = T_F+T_B. Peak on
 * device 0: min(2(p-1)+1, m) stages, i.e. (2p-1)/p M once m >= 2p-1. */
static void test_zb_h2_facts(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0},   {2, 3, 1, 0},   {1, 1, 1, 0.5},
                                     {1, 1, 1, 1},   {2, 3, 1, 2.5}, {1, 2, 1, 1.5},
                                     {3, 1, 1, 0.3}, {2, 1, 1.5, 0.25}};
    for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++)
        for (int p = 2; p <= 8; p += 3)
            for (int m = 2 * p - 1; m <= 4 * p; m += p) {
                pm_costs t = costs[ci];
                pm_sched s;
                pm_sim sim;
                gen_sim(&s, &sim, "zb-h2", p, m, 0, t);
                double want = m * (t.f + t.b + t.w) + (p - 1) * (t.f + t.b + 2 * t.c - 2 * t.w);
                expect_near(sim.makespan, want, "makespan", "zb-h2", p, m);
                if (t.f == t.b && t.b == t.w && t.c == 0)
                    expect_near(sim.bubble, 0, "bubble", "zb-h2", p, m);
                pm_sim_free(&sim);
                pm_sched_free(&s);
            }
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 3 * p; m++) {
            pm_sched s;
            pm_sim sim;
            gen_sim(&s, &sim, "zb-h2", p, m, 0, PM_COSTS_DEFAULT);
            expect_near(pm_sim_peak_x(&sim, 0), (double)imin(2 * p - 1, m) / p, "device 0 peak",
                        "zb-h2", p, m);
            pm_sim_free(&sim);
            pm_sched_free(&s);
        }
}

/* ZB-V: zero bubble for m >= 2p at equal costs and c = 0, and every device
 * peaks at exactly M (2p chunk activations of M/(2p) each). */
static void test_zb_v_facts(void **state) {
    (void)state;
    for (int p = 2; p <= 8; p++) {
        int ms[] = {2 * p, 2 * p + 1, 3 * p, 4 * p + 3};
        for (size_t mi = 0; mi < 4; mi++) {
            int m = ms[mi];
            pm_sched s;
            pm_sim sim;
            gen_sim(&s, &sim, "zb-v", p, m, 0, PM_COSTS_DEFAULT);
            assert_int_equal(s.place, PM_PLACE_V);
            expect_near(sim.bubble, 0, "bubble", "zb-v", p, m);
            /* Zero bubble means each device's span is its own work. */
            expect_near(sim.makespan, m * 3.0, "makespan", "zb-v", p, m);
            for (int r = 0; r < p; r++)
                expect_near(pm_sim_peak_x(&sim, r), 1.0, "peak", "zb-v", p, m);
            pm_sim_free(&sim);
            pm_sched_free(&s);
        }
    }
}

/* ZB-V's pattern as first written: every rank runs n = max(2p-1, m)
 * microbatches through the pattern and drops the passes of those >= m
 * (O(p) per rank). The generator now skips what cannot emit; it must give
 * these lists pass for pass. */
typedef struct {
    pm_sched *s;
    int r, f[2], b[2];
} ref_zbv;

static void ref_emit(ref_zbv *d, pm_pass_kind kind, int chunk, int mb) {
    int stage = chunk == 0 ? d->r : 2 * d->s->p - 1 - d->r;
    if (mb < d->s->m) pm_sched_push(d->s, d->r, kind, stage, mb);
}
static void ref_f(ref_zbv *d, int chunk) { ref_emit(d, PM_PASS_F, chunk, d->f[chunk]++); }
static int ref_b(ref_zbv *d, int chunk) {
    int mb = d->b[chunk]++;
    ref_emit(d, PM_PASS_B, chunk, mb);
    return mb;
}
static void ref_w(ref_zbv *d, int chunk, int mb) { ref_emit(d, PM_PASS_W, chunk, mb); }

static void ref_zbv_rank(pm_sched *s, int r, int n) {
    int p = s->p;
    ref_zbv d = {.s = s, .r = r};
    for (int i = 0; i < 2 * (p - r) - 1; i++) ref_f(&d, 0);
    for (int i = 0; i < r; i++) ref_f(&d, 1), ref_f(&d, 0);
    for (int i = 0; i < p - r; i++) ref_f(&d, 1), ref_w(&d, 1, ref_b(&d, 1));
    while (d.f[1] < d.f[0] || d.f[0] < n) {
        if (d.f[0] < n) ref_f(&d, 0);
        ref_w(&d, 0, ref_b(&d, 0));
        ref_f(&d, 1);
        ref_w(&d, 1, ref_b(&d, 1));
    }
    int held0 = d.b[0], held1 = d.b[1];
    for (int i = 0; i < r; i++) ref_b(&d, 0), ref_b(&d, 1);
    for (int i = 0; i < p - r; i++) ref_w(&d, 0, ref_b(&d, 0));
    for (int i = 0; i < r; i++) ref_w(&d, 1, held1 + i);
    for (int i = 0; i < r; i++) ref_w(&d, 0, held0 + i);
}

static void test_zb_v_equals_first_version(void **state) {
    (void)state;
    for (int p = 1; p <= 24; p++)
        for (int m = 1; m <= 3 * p + 3; m++) {
            pm_sched s, want;
            gen(&s, "zb-v", p, m, 0);
            assert_int_equal(pm_sched_init(&want, "zb-v", PM_PLACE_V, p, m, 2, NULL), PM_OK);
            for (int r = 0; r < p; r++) ref_zbv_rank(&want, r, m > 2 * p - 1 ? m : 2 * p - 1);
            for (int r = 0; r < p; r++) {
                if (s.len[r] != want.len[r])
                    fail_msg("zb-v p=%d m=%d rank %d: %lld passes, the first version %lld", p,
                             m, r, (long long)s.len[r], (long long)want.len[r]);
                for (int64_t i = 0; i < s.len[r]; i++) {
                    const pm_pass *a = &s.pass[r * s.cap + i], *b = &want.pass[r * s.cap + i];
                    if (a->kind != b->kind || a->stage != b->stage || a->mb != b->mb)
                        fail_msg("zb-v p=%d m=%d rank %d pass %lld differs", p, m, r,
                                 (long long)i);
                }
            }
            pm_sched_free(&want);
            pm_sched_free(&s);
        }
}

/* zb-v's pattern is O(p m) passes of work, not O(p^2) (issue 19, 2.2):
 * with m < 2p - 1 the first version stepped its counters through 2p - 1
 * microbatches on every rank, emitting nothing for most (minutes at p =
 * 131072). Counted, not timed (pm_sched_work: every pass the pattern emits
 * or drops for a microbatch >= m): each of its rounds emits a pass of the
 * schedule (the one of its lowest counter) beside at most 5 others, so n
 * passes take at most 6 n; the first version tried 12 p^2 here. */
static void test_zb_v_linear(void **state) {
    (void)state;
    pm_sched s;
    int64_t w0 = pm_sched_work();
    gen(&s, "zb-v", 65536, 1, 0);
    int64_t work = pm_sched_work() - w0, n = 0;
    for (int d = 0; d < s.p; d++) n += s.len[d];
    assert_true(n == 3 * 2 * 65536); /* F, B and W of one microbatch on each of 2p stages */
    if (work > 6 * n) fail_msg("zb-v p=65536 m=1: %lld steps for %lld passes", (long long)work,
                               (long long)n);
    pm_sched_free(&s);
}

/* DualPipeV against PyTorch's own builder. tests/data/dualpipev/pP_mM.csv
 * is what ScheduleDualPipeV._calculate_single_rank_operations (PyTorch's
 * main branch, torch/distributed/pipelining/schedules.py) gives for p ranks
 * and m microbatches, written as its _dump_csv(format="compute_only") writes
 * pipeline_order: one row per rank, CRLF, overlapped pairs as
 * "(0F3;3B1)OVERLAP_F_B". The files were made by a throwaway transcription
 * of that method run without torch (Debian's PyTorch 1.13 predates it), not
 * by pipemem; p = 2, m = 4 was also derived by hand from the method and
 * agrees. The reader expands a pair into its sub-actions in order, F first,
 * as PyTorch's runtime runs them: pass for pass, the generator's order. The
 * pairs stay marked, and the generator marks the same ones: its CSV is the
 * file byte for byte (but for PyTorch's CRLF line ends). */
static void test_dualpipev_matches_pytorch(void **state) {
    (void)state;
    static const int pm[][2] = {{1, 2}, {1, 5}, {2, 4}, {2, 7}, {3, 6},
                                {3, 9}, {4, 8}, {4, 13}, {5, 10}, {8, 16}};
    for (size_t i = 0; i < sizeof pm / sizeof pm[0]; i++) {
        int p = pm[i][0], m = pm[i][1];
        char path[64];
        snprintf(path, sizeof path, "tests/data/dualpipev/p%d_m%d.csv", p, m);
        pm_sched want, s;
        pm_err err;
        if (pm_sched_load(&want, path, &err)) fail_msg("%s", err.msg);
        assert_int_equal(want.p, p);
        assert_int_equal(want.m, m);
        assert_int_equal(want.place, PM_PLACE_V);
        gen(&s, "dualpipev", p, m, 0);
        for (int r = 0; r < p; r++) {
            if (s.len[r] != want.len[r])
                fail_msg("dualpipev p=%d m=%d rank %d: %lld passes, PyTorch's %lld", p, m, r,
                         (long long)s.len[r], (long long)want.len[r]);
            for (int64_t k = 0; k < s.len[r]; k++) {
                const pm_pass *a = pm_sched_dev(&s, r) + k, *b = pm_sched_dev(&want, r) + k;
                if (a->kind != b->kind || a->stage != b->stage || a->mb != b->mb)
                    fail_msg("dualpipev p=%d m=%d rank %d pass %lld: %s%d.%d, PyTorch's %s%d.%d",
                             p, m, r, (long long)k, pm_pass_names[a->kind], a->stage, a->mb,
                             pm_pass_names[b->kind], b->stage, b->mb);
            }
        }
        char *file, *ours;
        size_t nf, no;
        pm_err e;
        assert_int_equal(pm_read_file(path, 1 << 20, &file, &nf, &e), PM_OK);
        size_t k = 0;
        for (size_t j = 0; j < nf; j++)
            if (file[j] != '\r') file[k++] = file[j];
        FILE *f = open_memstream(&ours, &no);
        assert_non_null(f);
        assert_int_equal(pm_sched_write_csv(f, &s), PM_OK);
        fclose(f);
        if (no != k || memcmp(ours, file, k))
            fail_msg("dualpipev p=%d m=%d: our CSV differs from PyTorch's:\n%s", p, m, ours);
        free(ours);
        pm_free(file);
        pm_sched_free(&want);
        pm_sched_free(&s);
    }
}

static void expect_gen_error(const char *kind, int p, int m, int v, const char *needle);

/* DualPipeV's facts. Peak: DeepSeek's table (DualPipe's README) gives PP+1
 * chunk activations per device for PP = 2p stages, (2p+1)/(2p) M, on every
 * device (each runs 2p forwards before its first backward frees one, then
 * one more). Makespan at unit costs, p = 2, m = 4, derived by hand from the
 * order (docs/schedules.md): 12.5, bubble 1 - 24/25. Its steady phase has
 * no bubble, so from m = 2p on each further microbatch adds exactly one
 * microbatch's work, F + B + W, to the makespan, whatever the costs. It
 * refuses m < 2p, as DeepSeek's and PyTorch's do. */
static void test_dualpipev_facts(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0}, {3, 1, 2, 0}, {1, 2, 1, 0}};
    for (int p = 1; p <= 8; p++)
        for (size_t ci = 0; ci < sizeof costs / sizeof costs[0]; ci++) {
            pm_costs t = costs[ci];
            double prev = 0;
            for (int m = 2 * p; m <= 2 * p + 3; m++) {
                pm_sched s;
                pm_sim sim;
                gen_sim(&s, &sim, "dualpipev", p, m, 0, t);
                assert_int_equal(s.place, PM_PLACE_V);
                for (int r = 0; r < p; r++)
                    expect_near(pm_sim_peak_x(&sim, r), (2.0 * p + 1) / (2 * p), "peak",
                                "dualpipev", p, m);
                if (m > 2 * p)
                    expect_near(sim.makespan - prev, t.f + t.b + t.w, "makespan step",
                                "dualpipev", p, m);
                prev = sim.makespan;
                pm_sim_free(&sim);
                pm_sched_free(&s);
            }
        }
    pm_sched s;
    pm_sim sim;
    gen_sim(&s, &sim, "dualpipev", 2, 4, 0, PM_COSTS_DEFAULT);
    expect_near(sim.makespan, 12.5, "makespan", "dualpipev", 2, 4);
    expect_near(sim.bubble, 1 - 24.0 / 25, "bubble", "dualpipev", 2, 4);
    pm_sim_free(&sim);
    pm_sched_free(&s);
    expect_gen_error("dualpipev", 4, 7, 0, "needs m >= 8 for p = 4");
    expect_gen_error("dualpipev", 4, 8, 1, "single-placement");
}

/* Overlapped F&B pairs (pm_cost.fb_overlap). Device r's pairs, by the
 * rules of both implementations: two per steady round, m-2p+r+1 rounds,
 * less the last device's first (run apart), and one per phase-5 round,
 * p-r-1 of them. At p = 1 nothing waits, so by hand at unit costs (F, B, W
 * 0.5 a chunk, BW 1): 3m, less (1 - X) 0.5 for each of the 2m - 3 pairs
 * run as one pass of 1 + 0.5 X. Costs without fb_overlap ignore the
 * marks; a schedule without marks ignores fb_overlap; polishing drops
 * them. */
static void test_dualpipev_overlap(void **state) {
    (void)state;
    for (int p = 1; p <= 6; p++) {
        pm_sched s;
        gen(&s, "dualpipev", p, 2 * p + 3, 0);
        assert_non_null(s.pair);
        for (int r = 0; r < p; r++) {
            int n = 0;
            for (int64_t i = 0; i < s.len[r]; i++) n += pm_sched_paired(&s, r, i);
            int want = 2 * (s.m - 2 * p + r + 1) - (r == p - 1) + (p - r - 1);
            if (n != want) fail_msg("p=%d device %d: %d pairs, expected %d", p, r, n, want);
        }
        pm_sched_free(&s);
    }
    static const double xs[] = {0, 0.3, 1};
    for (int m = 2; m <= 6; m++)
        for (size_t k = 0; k < 3; k++) {
            pm_sched s;
            pm_cost c;
            pm_sim sim;
            pm_err e;
            gen(&s, "dualpipev", 1, m, 0);
            assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, &e),
                             PM_OK);
            c.fb_overlap = 1, c.fb_frac = xs[k];
            assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
            expect_near(sim.makespan, 3.0 * m - (2 * m - 3) * 0.5 * (1 - xs[k]), "makespan",
                        "dualpipev overlapped", 1, m);
            expect_near(pm_sim_peak_x(&sim, 0), 1.5, "peak", "dualpipev overlapped", 1, m);
            pm_sim_free(&sim);
            c.fb_overlap = 0;
            assert_int_equal(pm_sim_run(&sim, &s, &c, &e), PM_OK);
            expect_near(sim.makespan, 3.0 * m, "makespan", "dualpipev", 1, m);
            pm_sim_free(&sim);
            pm_polish_cfg cfg = {0, 1000, 1};
            assert_int_equal(pm_sched_polish(&s, &c, &cfg, NULL, &e), PM_OK);
            assert_null(s.pair);
            pm_cost_free(&c);
            pm_sched_free(&s);
        }
    pm_sched s;
    pm_cost c;
    pm_sim a, b;
    pm_err e;
    gen(&s, "zb-v", 4, 8, 0);
    assert_null(s.pair);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, &e), PM_OK);
    assert_int_equal(pm_sim_run(&a, &s, &c, &e), PM_OK);
    c.fb_overlap = 1, c.fb_frac = 0;
    assert_int_equal(pm_sim_run(&b, &s, &c, &e), PM_OK);
    assert_true(a.makespan == b.makespan);
    pm_sim_free(&a);
    pm_sim_free(&b);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* Interleaved 1F1B: Megatron's (Narayanan et al. 2021) bubble time is
 * (p-1)(T_F+T_B+T_W)/v at c = 0, so makespan m(T_F+T_B+T_W) + that, which
 * is below 1F1B's. Rank r holds min(2(p-r-1) + (v-1)p + 1, m v) chunk
 * activations of M/(p v): its warm-up plus the one forward before each
 * backward, so device 0 is above 1F1B's M once m > p (at m = p the cap
 * makes both hold every forward, M). */
static void test_interleaved_facts(void **state) {
    (void)state;
    static const pm_costs costs[] = {{1, 1, 1, 0}, {2, 3, 1, 0}};
    for (size_t ci = 0; ci < 2; ci++)
        for (int p = 1; p <= 6; p++)
            for (int v = 2; v <= 4; v++)
                for (int m = p; m <= 4 * p; m += p) {
                    pm_costs t = costs[ci];
                    pm_sched s, s1;
                    pm_sim sim, sim1;
                    gen_sim(&s, &sim, "interleaved", p, m, v, t);
                    gen_sim(&s1, &sim1, "1f1b", p, m, 0, t);
                    assert_int_equal(s.S, p * v);
                    double work = t.f + t.b + t.w;
                    expect_near(sim.makespan, m * work + (p - 1) * work / v, "makespan",
                                "interleaved", p, m);
                    if (p > 1) assert_true(sim.bubble < sim1.bubble);
                    for (int r = 0; r < p; r++) {
                        int live = imin(2 * (p - r - 1) + (v - 1) * p + 1, m * v);
                        expect_near(pm_sim_peak_x(&sim, r), (double)live / (p * v), "peak",
                                    "interleaved", p, m);
                    }
                    /* Above 1F1B's unless m = p caps the warm-up at every forward. */
                    if (p > 1 && m > p)
                        assert_true(pm_sim_peak_x(&sim, 0) > pm_sim_peak_x(&sim1, 0) + EPS);
                    pm_sim_free(&sim);
                    pm_sim_free(&sim1);
                    pm_sched_free(&s);
                    pm_sched_free(&s1);
                }
}

/* Every kind, p = 1..8, m from its minimum up: the output validates (the
 * validator is independent of the simulator), holds F and a backward for
 * every (stage, mb), and simulates with unequal costs and latency. */
static void test_every_kind_validates(void **state) {
    (void)state;
    pm_costs t = {2, 3, 1, 0.5};
    for (size_t i = 0; i < N_NAMED; i++)
        for (int p = 1; p <= 8; p++) {
            const pm_sched_kind *k = pm_sched_kind_find(named[i]);
            int v = k->place == PM_PLACE_LOOP ? 2 + p % 2 : 0;
            int lo = k->min_m(p, v ? v : (k->place == PM_PLACE_SINGLE ? 1 : 2));
            if (lo < 1) lo = 1;
            int step = k->place == PM_PLACE_LOOP ? p : 1;
            for (int m = lo; m <= lo + 2 * p + 2; m += step) {
                pm_sched s;
                pm_sim sim;
                gen_sim(&s, &sim, k->name, p, m, v, t);
                assert_int_equal(s.p, p);
                assert_int_equal(s.m, m);
                assert_int_equal(s.place, k->place);
                assert_string_equal(s.kind, k->name);
                pm_sim_free(&sim);
                pm_sched_free(&s);
            }
        }
}

/* One device: nothing to wait for, so every kind (interleaved with all its
 * chunks on device 0) runs back to back: makespan m(T_F+T_B+T_W), bubble 0. */
static void test_one_device(void **state) {
    (void)state;
    pm_costs t = {2, 3, 1, 0.7};
    for (size_t i = 0; i < N_NAMED; i++)
        for (int m = 1; m <= 5; m++) {
            pm_sched s;
            pm_sim sim;
            gen_sim(&s, &sim, named[i], 1, m, 0, t);
            expect_near(sim.makespan, m * (t.f + t.b + t.w), "makespan", named[i], 1, m);
            expect_near(sim.bubble, 0, "bubble", named[i], 1, m);
            pm_sim_free(&sim);
            pm_sched_free(&s);
        }
}

/* Requests that do not fit get one line naming the value and the fix. */
static void expect_gen_error(const char *kind, int p, int m, int v, const char *needle) {
    pm_sched s;
    pm_err err = {{0}};
    pm_sched_req req = {.p = p, .m = m, .v = v};
    pm_status st = pm_sched_generate(&s, kind, &req, &err);
    if (st != PM_ERR_ARG) fail_msg("%s p=%d m=%d v=%d: status %d, expected PM_ERR_ARG", kind, p, m, v, st);
    if (!strstr(err.msg, needle)) fail_msg("message '%s' lacks '%s'", err.msg, needle);
    assert_null(strchr(err.msg, '\n'));
    assert_null(s.pass);
    assert_null(s.len);
}

/* zb-1p's greedy keeps k microbatches in flight per device and peaks at
 * (k - 1) F + (F + B) over p F: with F 1, B 0.2 on 5 devices, 0.24, 0.44,
 * ..., 0.84, 1.04 M. A limit between two levels (1.0) fails, and the
 * message said the smallest feasible limit was 0.24 M; it names the levels
 * nearest below and above, and each one named works. */
static void test_zb_limit_hint_names_working_limits(void **state) {
    (void)state;
    static const struct { double limit, below, above; } cases[] = {
        {1.0, 0.84, 1.04}, {0.6, 0.44, 0.64}, {0.2, 0, 0.24}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pm_sched s;
        pm_err err = {{0}};
        pm_sched_req req = {.p = 5, .m = 7, .t = {1, 1, 1, 0}, .mem = {1, 0.2, -1.2, 0},
                            .mem_limit = cases[k].limit};
        assert_int_equal(pm_sched_generate(&s, "zb-1p", &req, &err), PM_ERR_MEMLIMIT);
        char want[128];
        if (cases[k].below > 0)
            snprintf(want, sizeof want, "it meets %.4g M and %.4g M", cases[k].below,
                     cases[k].above);
        else
            snprintf(want, sizeof want, "it meets %.4g M (none fits under 0.24 M", cases[k].above);
        if (!strstr(err.msg, want)) fail_msg("'%s' lacks '%s'", err.msg, want);
        double told[2] = {cases[k].below, cases[k].above};
        for (int i = 0; i < 2; i++) {
            if (!told[i]) continue;
            req.mem_limit = told[i];
            pm_status st = pm_sched_generate(&s, "zb-1p", &req, &err);
            if (st) fail_msg("zb-1p at the named %.4g M: %s", told[i], err.msg);
            pm_cost c;
            pm_sim sim;
            assert_int_equal(pm_cost_init_uniform(&c, &s, req.t, req.mem, &err), PM_OK);
            assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
            assert_true(pm_sim_peak_max_x(&sim) <= told[i] + 1e-9);
            pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
        }
    }
}

static void test_generate_errors(void **state) {
    (void)state;
    expect_gen_error("2f2b", 4, 8, 0, "unknown schedule kind '2f2b'");
    expect_gen_error("2f2b", 4, 8, 0, "1f1b-v");
    expect_gen_error("1f1b", 0, 8, 0, "p must be at least 1 (got 0)");
    expect_gen_error("zb-v", -3, 8, 0, "got -3");
    expect_gen_error("1f1b", 4, 0, 0, "1f1b needs m >= 1 for p = 4 (got 0)");
    /* the library names its parameters (req's fields), the CLI their flags */
    expect_gen_error("1f1b", 4, 8, 3, "1f1b has 1 chunk per device; v=3 only fits interleaved");
    expect_gen_error("zb-h2", 4, 8, 2, "zb-h2 has 1 chunk per device");
    expect_gen_error("zb-v", 4, 8, 3, "v=3 only fits interleaved");
    expect_gen_error("zb-v", 4, 8, 1, "single-placement");
    expect_gen_error("interleaved", 4, 8, 1, "interleaved needs 2 or more chunks per device (got v=1)");
    expect_gen_error("interleaved", 4, 2, 2, "interleaved needs m >= 4 for p = 4 (got 2)");
    expect_gen_error("interleaved", 4, 6, 2, "multiple of p = 4 (got m = 6); try m = 4 or 8");
    expect_gen_error("gpipe", 2, 4, -1, "v=-1: chunks per device must be at least 1");
    /* Defaults: 0 chunks is the kind's own count. */
    pm_sched s;
    gen(&s, "interleaved", 2, 4, 0);
    assert_int_equal(s.v, 2);
    pm_sched_free(&s);
    gen(&s, "zb-v", 2, 4, 2);
    assert_int_equal(s.v, 2);
    pm_sched_free(&s);
    gen(&s, "1f1b", 2, 4, 1);
    assert_int_equal(s.v, 1);
    pm_sched_free(&s);
}

/* ---- supported range and costs (library) ------------------------------ */

/* Requests beyond the documented range are refused before allocating:
 * the allocation counter does not move, and the message names the limit
 * (the numbers are pm_sched.h's constants, written out here). */
static void test_range_refused_before_allocating(void **state) {
    (void)state;
    static const struct {
        const char *kind;
        int p, m;
        const char *want;
    } cases[] = {
        {"1f1b", 1048577, 1, "1..1048576"},
        {"1f1b", 4, 1048577, "1..1048576"},
        {"1f1b", 100000, 1000, "over the limit 16777216"},
        {"v-min", 1025, 4, "p <= 1024"},
        {"1f1b-v", 1025, 4, "p <= 1024"},
        {"zb", 1025, 4, "p <= 1024"},
        {"v-zb", 1024, 2049, "p * m <= 2097152"},
        {"auto-v", 129, 1, "p <= 128"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pm_sched s;
        pm_err err;
        pm_sched_req req = {.p = cases[k].p, .m = cases[k].m, .t = PM_COSTS_DEFAULT,
                            .mem = PM_MEM_DEFAULT, .mem_limit = 1};
        int64_t before = pm_alloc_calls();
        assert_int_equal(pm_sched_generate(&s, cases[k].kind, &req, &err), PM_ERR_ARG);
        assert_true(pm_alloc_calls() == before);
        if (!strstr(err.msg, cases[k].want))
            fail_msg("%s p=%d m=%d: '%s' lacks '%s'", cases[k].kind, cases[k].p, cases[k].m,
                     err.msg, cases[k].want);
    }
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = 4096, .m = 1, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT,
                        .mem_limit = 1};
    int64_t before = pm_alloc_calls();
    assert_int_equal(pm_sched_search(&s, &req, NULL, NULL, 0, &err), PM_ERR_ARG);
    assert_true(pm_alloc_calls() == before);
    assert_non_null(strstr(err.msg, "p <= 128"));
    req.p = 16777216;
    assert_int_equal(pm_sched_search(&s, &req, NULL, NULL, 0, &err), PM_ERR_ARG);
    assert_true(pm_alloc_calls() == before);
}

/* Costs whose makespan could overflow a double are refused, naming
 * req.t (--costs on the command line); the largest accepted costs give a
 * finite makespan. */
static void test_costs_overflow_refused(void **state) {
    (void)state;
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = 4, .m = 8, .t = {1e308, 1e308, 1e308, 0}, .mem = PM_MEM_DEFAULT,
                        .mem_limit = 1};
    int64_t before = pm_alloc_calls();
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "t=1e+308,1e+308,1e+308,0: a makespan"));
    assert_int_equal(pm_sched_search(&s, &req, NULL, NULL, 0, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "t=1e+308,1e+308,1e+308,0: a makespan"));
    assert_true(pm_alloc_calls() == before); /* refused before anything is made */
    req.t = (pm_costs){1e290, 1e290, 1e290, 0};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    pm_cost c;
    pm_sim sim;
    assert_int_equal(pm_cost_init_uniform(&c, &s, req.t, req.mem, &err), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    assert_true(isfinite(sim.makespan) && isfinite(sim.bubble));
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* ---- allocation failure (pm_alloc_fail_at) ---------------------------- */

typedef pm_status (*alloc_op)(const void *ctx, pm_err *err);

/* Makes the n-th allocation of op fail, for n = 1, 2, ... until op
 * succeeds with the hook never firing. Each failing run must return
 * PM_ERR_NOMEM with a message (leaks show under `make asan`). Returns how
 * many allocations op makes. */
static int64_t walk_allocs(const char *what, alloc_op op, const void *ctx) {
    for (int64_t n = 1;; n++) {
        pm_err err;
        err.msg[0] = 0;
        pm_alloc_fail_at(n, 0);
        pm_status st = op(ctx, &err);
        int fired = pm_alloc_failed();
        pm_alloc_fail_at(0, 0);
        if (!fired) {
            if (st != PM_OK) fail_msg("%s: without failures: %s", what, err.msg);
            return n - 1;
        }
        if (st != PM_ERR_NOMEM || !err.msg[0])
            fail_msg("%s: allocation %lld failed: status %d, message '%s'", what, (long long)n,
                     (int)st, err.msg);
        if (n > 200000) fail_msg("%s: more than 200000 allocations", what);
    }
}

/* The searches polish each schedule of their front, and the walk reruns a
 * whole search once per allocation: p = m = 3 keeps it to seconds and
 * still takes every path (the polish's too). */
static pm_status op_generate(const void *ctx, pm_err *err) {
    const char *kind = ctx;
    int searched = pm_sched_kind_find(kind)->tier == PM_TIER_SEARCH;
    pm_sched_req req = {.p = searched ? 3 : 4, .m = searched ? 3 : 8, .t = {1, 1.5, 0.75, 0.1},
                        .mem = PM_MEM_DEFAULT, .mem_limit = 1};
    pm_sched s;
    pm_status st = pm_sched_generate(&s, kind, &req, err);
    if (st && (s.pass || s.len)) fail_msg("%s: output not left zeroed on error", kind);
    pm_sched_free(&s);
    return st;
}

static pm_status op_search(const void *ctx, pm_err *err) {
    (void)ctx;
    pm_sched_req req = {.p = 3, .m = 3, .t = {1, 1.5, 0.75, 0.1}, .mem = PM_MEM_DEFAULT,
                        .mem_limit = 0.75};
    pm_sched s;
    char reason[256];
    pm_status st = pm_sched_search(&s, &req, NULL, reason, sizeof reason, err);
    if (st && (s.pass || s.len)) fail_msg("search: output not left zeroed on error");
    pm_sched_free(&s);
    return st;
}

static pm_status op_load(const void *ctx, pm_err *err) {
    pm_sched s;
    pm_status st = pm_sched_load(&s, ctx, err);
    if (st && (s.pass || s.len)) fail_msg("load: output not left zeroed on error");
    pm_sched_free(&s);
    return st;
}

static pm_status op_block(const void *ctx, pm_err *err) {
    pm_block b;
    pm_block_info in;
    pm_status st = pm_block_named(&b, ctx, 6, err);
    if (!st) {
        st = pm_block_analyze(&b, PM_MEM_DEFAULT, &in, err);
        if (!st) pm_block_info_free(&in);
    }
    pm_block_free(&b);
    return st;
}

static void test_alloc_failure_walk(void **state) {
    (void)state;
    int nk;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    for (int k = 0; k < nk; k++) {
        int64_t n = walk_allocs(kinds[k].name, op_generate, kinds[k].name);
        assert_true(n > 0);
    }
    assert_true(walk_allocs("search", op_search, NULL) > 0);
    static const char *const blocks[] = {"v-min", "v-half", "1f1b-v"};
    for (int k = 0; k < 3; k++) assert_true(walk_allocs(blocks[k], op_block, blocks[k]) > 0);
    char path[] = "/tmp/pm_test_load_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = 4, .m = 8, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "zb-h1", &req, &err), PM_OK);
    assert_int_equal(pm_sched_write_text(f, &s), PM_OK);
    pm_sched_free(&s);
    fclose(f);
    assert_true(walk_allocs("load", op_load, path) > 0);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry_order_and_lookup),
        cmocka_unit_test(test_1f1b_facts),
        cmocka_unit_test(test_gpipe_facts),
        cmocka_unit_test(test_zb_h1_facts),
        cmocka_unit_test(test_zb_h2_facts),
        cmocka_unit_test(test_zb_v_facts),
        cmocka_unit_test(test_zb_v_equals_first_version),
        cmocka_unit_test(test_zb_v_linear),
        cmocka_unit_test(test_dualpipev_matches_pytorch),
        cmocka_unit_test(test_dualpipev_facts),
        cmocka_unit_test(test_dualpipev_overlap),
        cmocka_unit_test(test_interleaved_facts),
        cmocka_unit_test(test_every_kind_validates),
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_generate_errors),
        cmocka_unit_test(test_zb_limit_hint_names_working_limits),
        cmocka_unit_test(test_range_refused_before_allocating),
        cmocka_unit_test(test_costs_overflow_refused),
        cmocka_unit_test(test_alloc_failure_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
