/* test_plan_gpu.c: the library of `pipemem plan` (pm_cluster.h; the
 * command itself: test_cli_plan.c).
 *
 * Where each expected value comes from:
 *   - a block's activation bytes: Korthikanti et al. 2022 (34 s b h +
 *     5 a s^2 b in 16-bit; without the second term under flash
 *     attention); what W keeps: Zero Bubble's 32 h bytes a token; the head:
 *     Korthikanti's 4 s b h (1 + V/h); FLOPs: Korthikanti's model FLOPs
 *     72 B s L h^2 (1 + s/(6h) + V/(12 h L)) for the whole model; GPT-2's
 *     12 h^2 + 13 h parameters a block; by hand below;
 *   - a step at one device is the work itself (MFU = the pass efficiency),
 *     a replica pair adds one ring all-reduce, two devices add the
 *     point-to-point times on the critical path: by hand;
 *   - the search: every plan made one by one, and the fit recomputed from
 *     each device's bytes;
 *   - pipemem's own GPT: the simulation is linear in the pass times
 *     (doubling every time doubles the step, exactly in floating point)
 *     while the cut and the schedule follow the FLOPs;
 *   - the 9.6B model: the paper's Figure 7 as the issue reads it off. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_cluster.h"
#include "util/alloc.h"
#include "plan/placement.h"

static int close_to(double a, double b, double rel) { return fabs(a - b) <= rel * fabs(b); }

/* ---- formulas on a hand case ------------------------------------------------- */

/* L = 2 blocks, h = 8, a = 2 heads, s = 4, V = 16, one sequence a
 * microbatch (T = 4 tokens), bf16. */
static const pm_gpt_shape hand = {.layers = 2, .hidden = 8, .heads = 2, .seq = 4, .vocab = 16};

static void test_formulas(void **state) {
    (void)state;
    pm_plan_model m;
    pm_err err;
    pm_cluster hw = {.devices = 1, .tflops = 1, .efficiency = 0.5};
    assert_int_equal(pm_plan_model_gpu(&m, &hand, 1, &hw, &err), PM_OK);
    assert_int_equal(m.n, 4);
    double s = 4, b = 1, h = 8, a = 2, V = 16, L = 2;
    /* Korthikanti: 34 s b h + 5 a s^2 b = 1088 + 160 */
    assert_true(m.layer[1].act == 34 * s * b * h + 5 * a * s * s * b);
    assert_true(m.layer[1].act == 1248);
    /* Zero Bubble: W keeps 32 h bytes a token */
    assert_true(m.layer[1].act_w == 32 * h * s * b);
    /* the embedding's dropout mask s b h; the head 4 s b h (1 + V/h) */
    assert_true(m.layer[0].act == s * b * h);
    assert_true(m.layer[3].act == 4 * s * b * h * (1 + V / h));
    /* a recomputed stage keeps its input: s b h values of 2 bytes */
    assert_true(m.layer[2].in == 2 * s * b * h && m.layer[0].in == 0);
    /* parameters: GPT-2's 12 h^2 + 13 h a block, V h + s h and V h + 2 h */
    assert_true(m.layer[1].params == 12 * h * h + 13 * h);
    assert_true(m.layer[0].params == V * h + s * h && m.layer[3].params == V * h + 2 * h);
    assert_true(m.layer[1].state == 16 * m.layer[1].params);
    /* FLOPs of the model: 72 B s L h^2 (1 + s/6h + V/12hL) = 43008 */
    double want = 72 * b * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    assert_true(close_to(m.flops, want, 1e-12));
    assert_true(close_to(m.flops, 43008, 1e-12));
    /* times at 1 TFLOP/s x 0.5: a block's F + B + W is 72 s b h^2 (1 + s/6h) */
    double blk = 72 * s * b * h * h * (1 + s / (6 * h));
    assert_true(close_to(m.layer[1].weight, blk / 0.5e12, 1e-12));
    assert_true(close_to(m.layer[3].tf, 2 * s * b * h * V / 0.5e12, 1e-12));
    pm_plan_model_free(&m);

    /* flash attention drops the s^2 term; fp32 doubles the values but not
     * the 1-byte masks (2 h + a s of the 34 h + 5 a s): 66 h + 9 a s */
    pm_gpt_shape g = hand;
    g.flash = 1;
    assert_int_equal(pm_plan_model_gpu(&m, &g, 1, NULL, &err), PM_OK);
    assert_true(m.layer[1].act == 34 * s * b * h);
    assert_string_equal(m.time_unit, "flop");
    pm_plan_model_free(&m);
    g = hand;
    g.precision = PM_PREC_FP32;
    assert_int_equal(pm_plan_model_gpu(&m, &g, 1, NULL, &err), PM_OK);
    assert_true(m.layer[1].act == (66 * h + 9 * a * s) * s * b);
    assert_true(m.layer[1].state == 16 * m.layer[1].params);
    assert_true(m.bytes_opt == 8 && m.bytes_param == 4);
    pm_plan_model_free(&m);
    /* a bad shape names its field */
    g = hand;
    g.heads = 3;
    assert_int_equal(pm_plan_model_gpu(&m, &g, 1, NULL, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "shape.heads=3 must divide shape.hidden=8"));
}

/* ---- plans on hand cases ------------------------------------------------------ */

/* A plan as the search makes it: over the devices' memory marked. */
static pm_plan_req req_of(const pm_cluster *hw, const char *kind, int pp, int dp, int mm,
                          int zero) {
    return (pm_plan_req){.p = pp, .dp = dp, .m = mm, .zero = zero, .kind = kind,
                         .device_mem = (size_t)hw->mem, .mark_over = 1};
}

static pm_cluster_plan plan_of(pm_plan_model *m, const pm_cluster *hw, const char *kind, int pp,
                               int dp, int mm, int zero) {
    pm_plan_req rq = req_of(hw, kind, pp, dp, mm, zero);
    pm_cluster_plan pl;
    pm_err err;
    if (pm_cluster_plan_make(&pl, m, &rq, &err)) fail_msg("%s: %s", kind, err.msg);
    return pl;
}

static void test_plan_hand(void **state) {
    (void)state;
    pm_cluster hw = {.devices = 1, .tflops = 1, .efficiency = 0.5, .link_gbps = 8};
    pm_plan_model m;
    pm_err err;
    assert_int_equal(pm_plan_model_gpu(&m, &hand, 1, &hw, &err), PM_OK);
    double work = 0, ff = 0, params = 0;
    for (int i = 0; i < m.n; i++)
        work += m.layer[i].tf + m.layer[i].tb + m.layer[i].tw, ff += m.layer[i].tf,
            params += m.layer[i].params;

    /* one device: the step is the work, MFU the pass efficiency; recomputed,
     * every forward runs twice and MFU drops by the rerun's share */
    pm_cluster_plan pl = plan_of(&m, &hw, "1f1b", 1, 1, 3, 0);
    assert_true(close_to(pl.step, 3 * work, 1e-12));
    assert_true(close_to(pl.mfu, 0.5, 1e-12));
    const size_t *b = pl.dev[0].bytes;
    assert_true(b[PM_BYTES_PARAMS] == 2 * params && b[PM_BYTES_MOMENTS] == 12 * params);
    assert_true(b[PM_BYTES_WORKSPACE] == 6 * 2 * 4 * 8); /* six messages of s b h x 2 bytes */
    assert_true(b[PM_BYTES_TRANSPORT] == 0);
    pm_cluster_plan_free(&pl);
    pl = plan_of(&m, &hw, "1f1b-r", 1, 1, 3, 0);
    assert_true(close_to(pl.mfu, 0.5 * work / (work + ff), 1e-12));
    pm_cluster_plan_free(&pl);

    /* two replicas: a ring all-reduce of 2 bytes of gradient a parameter,
     * 2 (D - 1) / D x n / bw = n / bw at D = 2, after the last pass; ZeRO-1
     * halves the optimizer state */
    hw.devices = 2;
    pl = plan_of(&m, &hw, "1f1b", 1, 2, 3, 1);
    assert_true(close_to(pl.step, 3 * work + 2 * params / 1e9, 1e-12));
    assert_true(pl.dev[0].bytes[PM_BYTES_MOMENTS] == 6 * params); /* 2048 parameters: even */
    assert_true(close_to(pl.samples, 3 * 1 * 2 / pl.step, 1e-12));
    pm_cluster_plan_free(&pl);

    /* two stages, one microbatch: 1F1B's chain F0 F1 BW1 BW0 with a message
     * (s b h x 2 = 64 bytes at 1 GB/s) each way; the cut balances E + B | B + H */
    pl = plan_of(&m, &hw, "1f1b", 2, 1, 1, 0);
    assert_true(pl.S == 2 && pl.first[1] == 2);
    double c = 64 / 1e9;
    assert_true(close_to(pl.step, work + 2 * c, 1e-12));
    pm_cluster_plan_free(&pl);

    /* 1F1B on 2 devices and 4 microbatches: device 0 holds 2 microbatches of
     * its stage (the mask and a block: 2 x (32 + 1248)), device 1 one of its
     * block and the head (1248 + 384) */
    pl = plan_of(&m, &hw, "1f1b", 2, 1, 4, 0);
    assert_true(pl.dev[0].bytes[PM_BYTES_ACTIVATIONS] == 2 * (32 + 1248));
    assert_true(pl.dev[1].bytes[PM_BYTES_ACTIVATIONS] == 1248 + 384);
    assert_true(pl.act_peak == 2560 && pl.busiest == 0);
    pm_cluster_plan_free(&pl);
    pm_plan_model_free(&m);
}

/* ---- the search ----------------------------------------------------------------- */

/* Every plan of the search, made one by one: the best that fits is first
 * whenever one fits, every plan's fit is its busiest device's bytes against
 * the memory, and no plan made alone that fits is faster than the first. */
static void check_search(const pm_gpt_shape *g, const pm_cluster *hw,
                         const pm_cluster_search_req *rq) {
    pm_cluster_plan *p;
    int n, skipped;
    pm_err err;
    assert_int_equal(pm_cluster_search(g, hw, rq, &p, &n, &skipped, &err), PM_OK);
    int any = 0;
    for (int i = 0; i < n; i++) {
        double mx = 0;
        for (int d = 0; d < p[i].pp; d++) {
            double t = 0;
            for (int k = 0; k < PM_BYTES_COUNT; k++) t += (double)p[i].dev[d].bytes[k];
            mx = fmax(mx, t);
        }
        assert_int_equal(p[i].fits, mx <= hw->mem);
        any |= p[i].fits;
        if (i && p[i].fits) assert_true(p[i - 1].fits && p[i - 1].samples >= p[i].samples);
    }
    if (any) assert_true(p[0].fits);
    /* alone: every pp dividing the devices, every mbs, every kind */
    int nk;
    const pm_sched_kind *k = pm_sched_kinds(&nk);
    double best = 0;
    for (int mbs = 1; mbs <= rq->max_mbs; mbs *= 2) {
        pm_plan_model m;
        assert_int_equal(pm_plan_model_gpu(&m, g, mbs, hw, &err), PM_OK);
        for (int pp = 1; pp <= hw->devices; pp++) {
            int dp = hw->devices / pp;
            if (hw->devices % pp || rq->global_batch % (mbs * dp)) continue;
            for (int i = 0; i < 2 * nk + 1; i++) {
                char kind[40];
                snprintf(kind, sizeof kind, "%s%s", i < 2 * nk ? k[i % nk].name : "auto-v",
                         i >= nk && i < 2 * nk ? "-r" : "");
                pm_plan_req r = req_of(hw, kind, pp, dp, rq->global_batch / (mbs * dp), 0);
                pm_cluster_plan pl;
                if (pm_cluster_plan_make(&pl, &m, &r, &err)) continue;
                if (pl.fits) best = fmax(best, pl.samples);
                pm_cluster_plan_free(&pl);
            }
        }
        pm_plan_model_free(&m);
    }
    if (any) assert_true(close_to(p[0].samples, best, 1e-12));
    else assert_true(best == 0);
    pm_cluster_plans_free(p, n);
}

static void test_search_fits_first(void **state) {
    (void)state;
    pm_gpt_shape g = {.layers = 6, .hidden = 256, .heads = 8, .seq = 256, .vocab = 1000};
    pm_cluster hw = {.devices = 4, .tflops = 100, .link_gbps = 100};
    pm_cluster_search_req rq = {.global_batch = 16, .max_mbs = 4};
    /* from nothing fitting (the smallest plan needs 31.7 MB a device) through a
     * few recomputed ones (35 MB) to everything fitting */
    const double mem[] = {1e6, 3.2e7, 3.5e7, 5e7, 8e7, 1.2e8, 1e12};
    for (size_t i = 0; i < sizeof mem / sizeof mem[0]; i++) {
        hw.mem = mem[i];
        check_search(&g, &hw, &rq);
    }
}

/* ---- pipelines longer than the model ---------------------------------------------- */

/* Bytes a call allocates (pm_alloc_bytes); a schedule of p devices
 * allocates at least a pass count a device, 8p bytes: 800 KB at p = 100000. */
static int64_t bytes_since(int64_t b0) { return pm_alloc_bytes() - b0; }

/* Every stage needs a layer, and that is checked before any schedule is
 * made: 100000 devices on 4 layers were refused after the schedule's
 * generation and placement tables (a minute). The largest pipeline each
 * kind can fill is accepted: the GPU model's 30 blocks are 32 layers (the
 * embedding and the head besides), so 32 devices of one stage, 16 of V's
 * two, 10 of three interleaved chunks. */
static void test_refused_before_any_schedule(void **state) {
    (void)state;
    pm_train_cfg c = {.model = {.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 2},
                      .batch = 8, .micro = 4, .seed = 1};
    pm_optim_defaults(&c.opt, 2);
    const struct {
        const char *kind;
        int chunks, stages; /* a device's */
        const char *want;
    } k[] = {{"1f1b", 0, 1, "the schedule has 100000 stages"},
             {"zb-h1-r", 0, 1, "the schedule has 100000 stages"},
             {"v-half", 0, 2, "the schedule has 200000 stages"},
             {"auto", 0, 1, "the schedule has 100000 stages"},
             {"interleaved", 3, 3, "the schedule has 300000 stages"}};
    pm_plan pl;
    pm_err err;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        pm_plan_req rq = {.p = 100000, .kind = k[i].kind, .chunks = k[i].chunks,
                          .mem_limit = 1};
        int64_t b0 = pm_alloc_bytes();
        assert_int_equal(pm_plan_make(&pl, &c, &rq, &err), PM_ERR_ARG);
        assert_true(pl.p == 0 && pl.dev == NULL); /* zeroed, as on every error */
        if (!strstr(err.msg, k[i].want) || !strstr(err.msg, "head in 1 part"))
            fail_msg("%s: '%s'", k[i].kind, err.msg);
        if (bytes_since(b0) > 64 << 10)
            fail_msg("%s: %lld bytes allocated before the refusal", k[i].kind,
                     (long long)bytes_since(b0));
    }
    pm_plan_model m;
    pm_gpt_shape g = {.layers = 30, .hidden = 512, .heads = 8, .seq = 64, .vocab = 512};
    assert_int_equal(pm_plan_model_gpu(&m, &g, 1, NULL, &err), PM_OK);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        pm_cluster_plan row;
        int fill = 32 / k[i].stages, m_ok = fill * 2;
        pm_plan_req rq = {.p = 100000, .m = 1, .kind = k[i].kind, .chunks = k[i].chunks,
                          .mem_limit = 1e6};
        int64_t b0 = pm_alloc_bytes();
        assert_int_equal(pm_cluster_plan_make(&row, &m, &rq, &err), PM_ERR_ARG);
        assert_true(bytes_since(b0) <= 64 << 10);
        if (!strstr(err.msg, "with the embedding and the head 32 layers, fewer than"))
            fail_msg("%s: '%s'", k[i].kind, err.msg);
        rq.p = fill + 1, rq.m = m_ok;
        assert_int_equal(pm_cluster_plan_make(&row, &m, &rq, &err), PM_ERR_ARG);
        assert_non_null(strstr(err.msg, "with the embedding and the head 32 layers, fewer than"));
        rq.p = fill; /* auto too: its search weighs only what the layers can fill */
        if (pm_cluster_plan_make(&row, &m, &rq, &err)) fail_msg("%s: %s", k[i].kind, err.msg);
        assert_int_equal(row.S, fill * k[i].stages);
        pm_cluster_plan_free(&row);
    }
    pm_plan_model_free(&m);
}

/* auto under a budget plans the search's candidates on the real model:
 * what it returns fits, and no named kind (or its recomputed variant) that
 * fits the same devices is faster, by the planner's own figures for each
 * (9.6B on 8 devices; at 80 GiB auto returned V-ZB at 54% MFU beside
 * ZB-2P's 62%, at 30 GiB none of the 25 faster ones it had tried). */
static void test_auto_fastest_that_fits(void **state) {
    (void)state;
    pm_gpt_shape g = {.layers = 30, .hidden = 5120, .heads = 40, .seq = 1024, .vocab = 51200};
    const double gib[2] = {80, 30};
    int n;
    const pm_sched_kind *k = pm_sched_kinds(&n);
    for (int b = 0; b < 2; b++) {
        pm_cluster hw = {.devices = 8, .mem = gib[b] * (1 << 30), .tflops = 312,
                         .link_gbps = 200};
        pm_plan_model m;
        pm_err err;
        assert_int_equal(pm_plan_model_gpu(&m, &g, 2, &hw, &err), PM_OK);
        pm_cluster_plan a = plan_of(&m, &hw, "auto", 8, 1, 32, 0);
        if (!a.fits) fail_msg("%g GiB: auto's %s does not fit", gib[b], a.kind);
        for (int i = 0; i < 2 * n; i++) {
            char kind[48];
            const char *name = k[i / 2].name;
            if (strstr(name, "auto") || strstr(name, "optimal")) continue; /* searches */
            snprintf(kind, sizeof kind, "%s%s", name, i % 2 ? "-r" : "");
            pm_plan_req rq = req_of(&hw, kind, 8, 1, 32, 0);
            pm_cluster_plan pl;
            if (pm_cluster_plan_make(&pl, &m, &rq, &err)) continue; /* not for this shape */
            if (pl.fits && pl.step < a.step * (1 - 1e-9))
                fail_msg("%g GiB: %s fits and takes %g, auto's %s %g", gib[b], kind, pl.step,
                         a.kind, a.step);
            pm_cluster_plan_free(&pl);
        }
        pm_cluster_plan_free(&a);
        pm_plan_model_free(&m);
    }
}

/* The search's progress callback: each call one more plan, to the total. */
typedef struct {
    int calls, last, total, wrong;
} progress_seen;

static void seen(void *ctx, int done, int total) {
    progress_seen *p = ctx;
    p->calls++;
    p->wrong += done != p->last + 1 || (p->total && total != p->total) || done > total;
    p->last = done, p->total = total;
}

/* The paper's 9.6B model (32 layers) on 4096 devices, 2 sequences a device
 * and step, one kind: only pp <= 32 can give each stage a layer. Shapes by
 * hand: pp a power of two dividing 4096, mbs a power of two up to 64 with
 * mbs dp dividing 8192, i.e. mbs <= 2 pp: pp 1..32 make 2 + 3 + 4 + 5 + 6 +
 * 7 = 27 plans, pp 64..4096 seven shapes each, 49 refused, 76 tried; the
 * skipped count adds the 5 + 4 + 3 + 2 + 1 shapes of pp 1..16 whose mbs
 * does not divide 2 pp (64 in all). It made the schedule of every shape
 * first (at every kind and N = 4096, no answer in 300 s); 1F1B's of 1024
 * devices and 2048 microbatches alone is 4 million passes of 12 bytes, 50
 * MB: the search must stay under 32 MB. */
static void test_search_many_devices(void **state) {
    (void)state;
    pm_gpt_shape g = {.layers = 30, .hidden = 5120, .heads = 40, .seq = 1024, .vocab = 51200};
    pm_cluster hw = {.devices = 4096, .mem = 80.0 * (1 << 30), .tflops = 312};
    progress_seen pg = {0};
    pm_cluster_search_req rq = {.global_batch = 8192, .kind = "1f1b", .progress = seen,
                                .progress_ctx = &pg};
    pm_cluster_plan *p;
    int n, skipped;
    pm_err err;
    int64_t b0 = pm_alloc_bytes();
    if (pm_cluster_search(&g, &hw, &rq, &p, &n, &skipped, &err)) fail_msg("%s", err.msg);
    if (bytes_since(b0) > 32 << 20)
        fail_msg("the search allocated %lld bytes", (long long)bytes_since(b0));
    assert_int_equal(n, 27);
    assert_int_equal(skipped, 64);
    for (int i = 0; i < n; i++) assert_true(p[i].pp <= 32 && p[i].mbs <= 2 * p[i].pp);
    assert_int_equal(pg.wrong, 0);
    assert_int_equal(pg.calls, 76);
    assert_int_equal(pg.total, 76);
    pm_cluster_plans_free(p, n);
}

/* ---- the paper's 9.6B model ----------------------------------------------------- */

/* 30 blocks of 5120, 40 heads, sequence 1024, vocabulary 51200, 16 A100s of
 * 80 GB, pure pipeline parallelism, 64 microbatches of 2. The paper's
 * Figure 7 (MFU %, activation GB a GPU) as the issue reads it off. The
 * planner's activation GB must be within 25% of it and its MFU relative to
 * 1F1B's within 8% of the paper's ratio; 1F1B-R's 4 GB is out of reach
 * (docs/plan.md: the model keeps one input a stage and rebuilds one stage,
 * 1.87 GB), so for it the test asserts only that the planner is below. */
static void test_paper_9_6b(void **state) {
    (void)state;
    static const struct {
        const char *kind;
        double mfu, act;
    } fig7[] = {{"1f1b", 43.5, 23},   {"1f1b-r", 32, 4},       {"v-min", 40.5, 10},
                {"v-half", 46.5, 14}, {"v-zb", 51, 23},        {"zb-2p", 52.5, 48},
                {"zb-1p", 48.5, 25},  {"interleaved", 48.5, 36}};
    pm_gpt_shape g = {.layers = 30, .hidden = 5120, .heads = 40, .seq = 1024, .vocab = 51200};
    pm_cluster hw = {.devices = 16, .mem = 80.0 * (1 << 30), .tflops = 312, .link_gbps = 200};
    pm_plan_model m;
    pm_err err;
    assert_int_equal(pm_plan_model_gpu(&m, &g, 2, &hw, &err), PM_OK);
    double base = 0;
    for (size_t i = 0; i < sizeof fig7 / sizeof fig7[0]; i++) {
        pm_cluster_plan pl = plan_of(&m, &hw, fig7[i].kind, 16, 1, 64, 0);
        if (i == 0) base = pl.mfu;
        double act = pl.act_peak / 1e9, ratio = pl.mfu / base, want = fig7[i].mfu / 43.5;
        print_message("%-12s activation %6.2f GB (paper %4.0f: %+6.1f%%), MFU %5.1f%%, "
                      "ratio to 1F1B %.3f (paper %.3f: %+5.1f%%)\n", fig7[i].kind, act,
                      fig7[i].act, 100 * (act / fig7[i].act - 1), 100 * pl.mfu, ratio, want,
                      100 * (ratio / want - 1));
        if (strcmp(fig7[i].kind, "1f1b-r")) assert_true(fabs(act / fig7[i].act - 1) <= 0.25);
        else assert_true(act < fig7[i].act);
        assert_true(fabs(ratio / want - 1) <= 0.08);
        assert_true(pl.fits);
        pm_cluster_plan_free(&pl);
    }
    pm_plan_model_free(&m);
}

/* ---- pipemem's own GPT: train's plan as a row ----------------------------------- */

static pm_train_cfg gpt_cfg(int layers) {
    pm_train_cfg c = {.model = {.vocab = 256, .ctx = 32, .dim = 64, .heads = 4, .layers = layers},
                      .batch = 8, .micro = 8, .seed = 1};
    pm_optim_defaults(&c.opt, 1);
    return c;
}

/* The row of pipemem's GPT (what plan --pipemem-gpt prints) with the
 * simulation's pass times `times`. */
static pm_cluster_plan pipemem_row(const pm_train_cfg *cfg, const pm_plan_req *rq,
                                   const pm_layer_costs *times) {
    pm_plan_model m;
    pm_cluster_plan pl;
    pm_err err;
    if (pm_plan_model_pipemem(&m, cfg, rq, times, &err) || pm_cluster_plan_make(&pl, &m, rq, &err))
        fail_msg("%s p=%d: %s", rq->kind, rq->p, err.msg);
    pm_plan_model_free(&m);
    return pl;
}

/* plan --pipemem-gpt's row is pm_plan_make's plan (train --pp's) whatever
 * the pass times it simulates: with a head 100 times slower than its FLOPs
 * say, the same cut and every device's bytes of every kind (the cut and
 * the schedule follow the FLOPs); with every time twice its FLOPs, a step
 * exactly twice pm_plan_make's makespan (the simulation only adds and
 * compares times, and doubling is exact in binary). */
static void test_pipemem_row(void **state) {
    (void)state;
    const char *kinds[] = {"1f1b", "zb-h1", "v-half", "zb-v", "1f1b-r", "zb-1p", "v-zb",
                           "interleaved"};
    for (int p = 2; p <= 4; p += 2)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            pm_train_cfg cfg = gpt_cfg(6);
            pm_plan ref;
            pm_err err;
            pm_plan_req rq = {.p = p, .kind = kinds[k]};
            if (pm_plan_make(&ref, &cfg, &rq, &err)) fail_msg("%s p=%d: %s", kinds[k], p, err.msg);
            pm_layer_costs slow, twice;
            assert_int_equal(pm_place_flops(&cfg.model, 1, 32, &slow, &err), PM_OK);
            twice = slow;
            slow.k[PM_LAYER_HEAD].f *= 100, slow.k[PM_LAYER_HEAD].b *= 100;
            slow.k[PM_LAYER_HEAD].w *= 100, slow.unit = twice.unit = "s";
            for (int i = 0; i < PM_LAYER_KIND_COUNT; i++)
                twice.k[i].f *= 2, twice.k[i].b *= 2, twice.k[i].w *= 2;
            rq.m = 8;
            pm_cluster_plan pl = pipemem_row(&cfg, &rq, &slow);
            assert_string_equal(pl.kind, ref.sched.kind);
            assert_int_equal(pl.S, ref.S);
            for (int s = 0; s <= pl.S; s++) assert_int_equal(pl.first[s], ref.first[s]);
            for (int d = 0; d < p; d++) {
                for (int b = 0; b < PM_BYTES_COUNT; b++)
                    if (pl.dev[d].bytes[b] != ref.dev[d].bytes[b])
                        fail_msg("%s p=%d device %d %s: %zu, train's %zu", kinds[k], p, d,
                                 pm_bytes_names[b], pl.dev[d].bytes[b], ref.dev[d].bytes[b]);
                assert_true(pl.dev[d].act_peak == ref.dev[d].act_peak);
            }
            pm_cluster_plan_free(&pl);
            pl = pipemem_row(&cfg, &rq, &twice);
            assert_true(pl.step == 2 * ref.sim.makespan);
            pm_cluster_plan_free(&pl);
            pm_plan_free(&ref);
        }
}

/* Pass times measured by several threads at once: a time for every pass of
 * every kind (what the measurement is worth depends on the machine, so
 * only that it is a time is asserted), and a thread count out of range named. */
static void test_measure_threads(void **state) {
    (void)state;
    pm_gpt_config c = {.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 1};
    pm_layer_costs lc;
    pm_err err;
    assert_int_equal(pm_place_measure_threads(&c, 1, 8, 3, &lc, &err), PM_OK);
    assert_string_equal(lc.unit, "s");
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++)
        assert_true(lc.k[k].f > 0 && lc.k[k].f < 10 && lc.k[k].b >= 0 && lc.k[k].w >= 0);
    assert_int_equal(lc.timed_ctx, 0);
    assert_int_equal(pm_place_measure_threads(&c, 1, 8, 0, &lc, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "threads=0"));
    /* a context over the cap: timed at the cap, every pass still a time, on
     * one thread (train --placement measured) as on several */
    c.ctx = 2 * PM_PLACE_MEASURE_CTX;
    assert_int_equal(pm_place_measure(&c, 1, c.ctx, &lc, &err), PM_OK);
    assert_int_equal(lc.timed_ctx, PM_PLACE_MEASURE_CTX);
    assert_int_equal(pm_place_measure(&c, 1, 8, &lc, &err), PM_OK);
    assert_int_equal(lc.timed_ctx, 0);
    assert_int_equal(pm_place_measure_threads(&c, 1, c.ctx, 2, &lc, &err), PM_OK);
    assert_int_equal(lc.timed_ctx, PM_PLACE_MEASURE_CTX);
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++)
        assert_true(lc.k[k].f > 0 && lc.k[k].b >= 0 && lc.k[k].w >= 0);
}

/* Costs carried from T = 64 to 128 (one-part head, B = 3): passes without
 * products (the embedding's, the head's F, which leaves its logits to B)
 * scale by the tokens, 2; the head's B and W are products over the tokens,
 * 2 again; a block's passes, linear products plus causal attention, by
 * their FLOPs: F by hand, 24 N C^2 + 4 C pairs(T) with pairs(T) the score
 * entries of 64-query tiles, 64 * 64 at T = 64 and 64 * 64 + 64 * 128 at
 * 128, so (24 * 128 * 256 + 4 * 16 * 12288) / (24 * 64 * 256 + 4 * 16 *
 * 4096) = 2.4 for C = 16 a sequence. */
static void test_scale_costs(void **state) {
    (void)state;
    pm_gpt_config c = {.vocab = 64, .ctx = 128, .dim = 16, .heads = 2, .layers = 2};
    pm_layer_costs lc = {.unit = "s"};
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++) lc.k[k] = (pm_pass_times){1, 1, 1};
    pm_err err;
    assert_int_equal(pm_place_scale_costs(&c, 3, 64, 128, &lc, &err), PM_OK);
    const pm_pass_times *e = &lc.k[PM_LAYER_EMBED], *b = &lc.k[PM_LAYER_BLOCK];
    const pm_pass_times *h = &lc.k[PM_LAYER_HEAD];
    assert_true(e->f == 2 && e->b == 2 && e->w == 2);
    assert_true(h->f == 2 && h->b == 2 && h->w == 2);
    assert_true(fabs(b->f - 2.4) < 1e-12);
    assert_true(b->b > 2 && b->b < 4 && b->w == 2); /* W: the weight products alone */
    assert_int_equal(pm_place_scale_costs(&c, 3, 64, 256, &lc, &err), PM_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formulas),
        cmocka_unit_test(test_scale_costs),
        cmocka_unit_test(test_plan_hand),
        cmocka_unit_test(test_search_fits_first),
        cmocka_unit_test(test_refused_before_any_schedule),
        cmocka_unit_test(test_auto_fastest_that_fits),
        cmocka_unit_test(test_search_many_devices),
        cmocka_unit_test(test_paper_9_6b),
        cmocka_unit_test(test_pipemem_row),
        cmocka_unit_test(test_measure_threads),
    };
    /* make tsan runs the threaded test alone (PM_PLAN_GPU_ONLY=test_measure_threads):
     * the rest is single-threaded and takes minutes under ThreadSanitizer */
    const char *only = getenv("PM_PLAN_GPU_ONLY");
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
