/* test_place.c: the placement (pm_plan.h): which layers each stage runs.
 *   the time rule on pipemem's GPT against a brute force of the busiest
 *     device's time (single, loop and V placements), a hand case, GPT-2
 *     small's head, too few layers;
 *   the time rule under a cap, and the memory rule, on a hand-made table of
 *     layers against a second implementation: every cut enumerated, each
 *     device's time and memory counted here from the rule's definition
 *     (a stage's microbatches in flight by walking the schedule, for 1F1B
 *     also min(p - k, m) from its definition); every cap at and just below
 *     each cut's largest memory, so caps exclude the uncapped optimum and,
 *     below the least, exclude every cut (PM_ERR_MEMLIMIT naming the least);
 *   the planner under device_mem: a budget between the memory rule's
 *     busiest device and the time rule's is met by a placement no slower
 *     than the memory rule's; the memory rule's own total is always met;
 *     below it the plan is refused saying no placement fits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_plan.h"
#include "model/passes.h"
#include "plan/placement.h"

/* ---- the time rule on pipemem's GPT ------------------------------------------- */

/* A second implementation of the rule: every cut of n layers into S
 * ranges, each device's time the sum over its stages (dev[k] the device of
 * stage k); returns the least busiest-device time. */
static double brute(const double *c, int n, int S, const int *dev, int k, int from,
                    double *load, int p) {
    if (k == S) {
        double m = 0;
        for (int d = 0; d < p; d++) m = load[d] > m ? load[d] : m;
        return from == n ? m : INFINITY;
    }
    double best = INFINITY, here = 0;
    for (int to = from + 1; to <= n - (S - 1 - k); to++) {
        here += c[to - 1];
        if (k == S - 1 && to != n) continue;
        load[dev[k]] += here;
        double r = brute(c, n, S, dev, k + 1, to, load, p);
        load[dev[k]] -= here;
        if (r < best) best = r;
    }
    return best;
}

/* The placement against the brute force, for a model whose head costs as
 * much as several blocks (lc: embedding 1, block 3, head 14 per pass kind
 * in total), on the single, loop and V placements. */
static void test_placement(void **state) {
    (void)state;
    pm_gpt_config c = {.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 7};
    int n = pm_gpt_num_layers(&c);
    pm_layer_costs lc = {{{0.5, 0.25, 0.25}, {1, 1, 1}, {6, 4, 4}}, "s", 0};
    double cost[16];
    for (int l = 0; l < n; l++) {
        const pm_pass_times *t = &lc.k[pm_gpt_layer_kind(&c, l)];
        cost[l] = t->f + t->b + t->w;
    }
    const char *kinds[] = {"1f1b", "1f1b", "1f1b", "interleaved", "v-half", "v-half", "v-min"};
    int ps[] = {1, 2, 4, 2, 2, 3, 4};
    for (int i = 0; i < 7; i++) {
        pm_sched s;
        pm_err err;
        pm_sched_req req = {.p = ps[i], .m = 2 * ps[i], .t = PM_COSTS_DEFAULT,
                            .mem = PM_MEM_DEFAULT};
        assert_int_equal(pm_sched_generate(&s, kinds[i], &req, &err), PM_OK);
        int first[17], dev[16];
        double load[8] = {0}, t[8], m[8], mx = 0;
        assert_int_equal(pm_place_layers(&c, 1, 8, &s, &lc, NULL, first, &err), PM_OK);
        assert_int_equal(first[0], 0);
        assert_int_equal(first[s.S], n);
        for (int k = 0; k < s.S; k++) {
            assert_true(first[k + 1] > first[k]);
            dev[k] = pm_sched_stage_device(&s, k);
        }
        assert_int_equal(pm_place_shares(&c, 1, 8, &s, &lc, first, t, m, &err), PM_OK);
        for (int d = 0; d < s.p; d++) mx = t[d] > mx ? t[d] : mx;
        double want = brute(cost, n, s.S, dev, 0, 0, load, s.p);
        if (fabs(mx - want) > 1e-12)
            print_message("%s p=%d: %g, brute %g\n", kinds[i], ps[i], mx, want);
        assert_true(fabs(mx - want) < 1e-12);
        pm_sched_free(&s);
    }
    /* hand case: V on 2 devices, layers 1, 3 x 7, 14 (36 in all): device 0
     * holds stages 0 and 3, so the embedding and the head (15) plus x blocks
     * against 7 - x blocks on device 1: x = 1 gives 18 and 18 (a stage-
     * balanced cut, 9 per stage, would put 14 + 9 on device 0) */
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = 2, .m = 4, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "v-half", &req, &err), PM_OK);
    int first[5];
    double t[2], m[2];
    assert_int_equal(pm_place_layers(&c, 1, 8, &s, &lc, NULL, first, &err), PM_OK);
    assert_int_equal(pm_place_shares(&c, 1, 8, &s, &lc, first, t, m, &err), PM_OK);
    assert_true(fabs(t[0] - 18) < 1e-12 && fabs(t[1] - 18) < 1e-12);
    pm_sched_free(&s);
    /* GPT-2 small (12 x 768, vocab 50257, one sequence of 64 per microbatch),
     * FLOPs: the head is about 5 blocks. On 2 devices every schedule
     * balances within 15% of the mean; on 4 under 1F1B the head alone is
     * the busiest device (no cut can do better), 20% over the mean. */
    pm_gpt_config g2 = {.vocab = 50257, .ctx = 1024, .dim = 768, .heads = 12, .layers = 12};
    pm_layer_costs fl;
    assert_int_equal(pm_place_flops(&g2, 1, 64, &fl, &err), PM_OK);
    double head = fl.k[PM_LAYER_HEAD].f + fl.k[PM_LAYER_HEAD].b + fl.k[PM_LAYER_HEAD].w;
    const char *gk[] = {"1f1b", "v-half", "1f1b", "v-half"};
    int gp[] = {2, 2, 4, 4};
    for (int i = 0; i < 4; i++) {
        req = (pm_sched_req){.p = gp[i], .m = 2 * gp[i], .t = PM_COSTS_DEFAULT,
                             .mem = PM_MEM_DEFAULT};
        assert_int_equal(pm_sched_generate(&s, gk[i], &req, &err), PM_OK);
        int f3[9];
        double tt[4], mm[4], mx = 0, sum = 0;
        assert_int_equal(pm_place_layers(&g2, 1, 64, &s, NULL, NULL, f3, &err), PM_OK);
        assert_int_equal(pm_place_shares(&g2, 1, 64, &s, NULL, f3, tt, mm, &err), PM_OK);
        for (int d = 0; d < gp[i]; d++) mx = tt[d] > mx ? tt[d] : mx, sum += tt[d];
        if (gp[i] == 2) assert_true(mx <= 1.15 * sum / 2);
        if (gp[i] == 4 && i == 2) {
            assert_true(mx == head);               /* the head's device holds only the head */
            assert_true(mx > 1.15 * sum / 4);
        }
        pm_sched_free(&s);
    }
    /* too many stages for the layers */
    req = (pm_sched_req){.p = 8, .m = 8, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    pm_gpt_config small = {.vocab = 64, .ctx = 8, .dim = 16, .heads = 2, .layers = 5};
    int f2[9];
    assert_int_equal(pm_place_layers(&small, 1, 8, &s, NULL, NULL, f2, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "use model.layers >= 6"));
    pm_sched_free(&s);
}

/* ---- caps and the memory rule against every cut -------------------------------- */

/* Integer times and bytes, so sums are exact and a tie is a tie: a heavy
 * embedding and head, blocks of uneven cost and size. */
static const pm_place_layer hand[] = {
    {.weight = 2, .act = 3, .in = 0, .state = 40}, {.weight = 5, .act = 8, .in = 2, .state = 10},
    {.weight = 4, .act = 6, .in = 2, .state = 12}, {.weight = 6, .act = 9, .in = 3, .state = 10},
    {.weight = 3, .act = 5, .in = 2, .state = 14}, {.weight = 5, .act = 7, .in = 2, .state = 10},
    {.weight = 7, .act = 10, .in = 3, .state = 11}, {.weight = 4, .act = 6, .in = 2, .state = 10},
    {.weight = 6, .act = 8, .in = 3, .state = 9},  {.weight = 9, .act = 12, .in = 2, .state = 30},
};
enum { NH = sizeof hand / sizeof hand[0], MAXS = 16, MAXCAPS = 512 };

/* A schedule as the rule sees it. */
typedef struct {
    int S, p, rec;
    int dev[MAXS];  /* stage -> device */
    int hold[MAXS]; /* most microbatches a stage has run F and not yet W (or BW) of */
} shape;

static shape shape_of(const pm_sched *s) {
    shape h = {.S = s->S, .p = s->p, .rec = s->recompute != 0};
    int live[MAXS] = {0};
    for (int k = 0; k < s->S; k++) h.dev[k] = pm_sched_stage_device(s, k), h.hold[k] = 1;
    for (int d = 0; d < s->p; d++)
        for (int64_t i = 0; i < s->len[d]; i++) {
            pm_pass ps = pm_sched_dev((pm_sched *)s, d)[i];
            if (ps.kind == PM_PASS_F) live[ps.stage]++;
            if (ps.kind == PM_PASS_W || ps.kind == PM_PASS_BW) live[ps.stage]--;
            if (live[ps.stage] > h.hold[ps.stage]) h.hold[ps.stage] = live[ps.stage];
        }
    return h;
}

/* busiest time, largest memory, sum of squared times */
typedef struct {
    double t, m, q;
} figs;

/* What each device holds beyond the cut's count (pm_cut_opts.extra), or
 * NULL: none. */
static const double *excess;

/* A cut's figures from the rule's definition: a device's time the sum of
 * its stages' layers' weights; its memory its excess, and its stages' state
 * plus, per stage, the saved activations once per microbatch in flight
 * (recomputed: the stage's input per microbatch in flight and one
 * microbatch's activations). */
static figs figs_of(const shape *h, const int *first, double *t, double *m) {
    for (int d = 0; d < h->p; d++) t[d] = 0, m[d] = excess ? excess[d] : 0;
    for (int k = 0; k < h->S; k++) {
        double act = 0, state = 0;
        for (int i = first[k]; i < first[k + 1]; i++)
            t[h->dev[k]] += hand[i].weight, act += hand[i].act, state += hand[i].state;
        m[h->dev[k]] += state + (h->rec ? act + h->hold[k] * hand[first[k]].in : h->hold[k] * act);
    }
    figs f = {0, 0, 0};
    for (int d = 0; d < h->p; d++)
        f.t = fmax(f.t, t[d]), f.m = fmax(f.m, m[d]), f.q += t[d] * t[d];
    return f;
}

/* a ranks before b: the rule's first figure, then its second, then the squares */
static int before(figs a, figs b, pm_cut_rule r) {
    double a1 = r == PM_CUT_MEMORY ? a.m : a.t, b1 = r == PM_CUT_MEMORY ? b.m : b.t;
    double a2 = r == PM_CUT_MEMORY ? a.t : a.m, b2 = r == PM_CUT_MEMORY ? b.t : b.m;
    if (a1 != b1) return a1 < b1;
    if (a2 != b2) return a2 < b2;
    return a.q < b.q;
}

typedef struct {
    pm_cut_rule rule;
    double cap;          /* 0: none */
    int found;           /* some cut fits the cap */
    figs best;           /* the best that fits */
    double least;        /* the least largest memory of any cut */
    double caps[MAXCAPS]; /* each cut's largest memory, once each */
    int ncaps;
} brute_out;

/* Every cut: stage k starts after first[k-1]; the last ends at NH. */
static void every_cut(const shape *h, int *first, int k, brute_out *o) {
    if (k == h->S) {
        double t[MAXS], m[MAXS];
        first[k] = NH;
        figs f = figs_of(h, first, t, m);
        o->least = fmin(o->least, f.m);
        int seen = 0;
        for (int i = 0; i < o->ncaps; i++) seen |= o->caps[i] == f.m;
        if (!seen && o->ncaps < MAXCAPS) o->caps[o->ncaps++] = f.m;
        if ((o->cap == 0 || f.m <= o->cap) && (!o->found || before(f, o->best, o->rule)))
            o->best = f, o->found = 1;
        return;
    }
    for (int i = first[k - 1] + 1; i <= NH - (h->S - k); i++) {
        first[k] = i;
        every_cut(h, first, k + 1, o);
    }
}

static brute_out brute_cut(const shape *h, pm_cut_rule rule, double cap) {
    brute_out o = {.rule = rule, .cap = cap, .least = INFINITY};
    int first[MAXS + 1] = {0};
    every_cut(h, first, 1, &o);
    return o;
}

/* pm_place_cut under (rule, cap) against the brute force: the same figures
 * (the cut itself may differ where cuts tie), the least named when nothing
 * fits, the library's shares equal to the count here. Returns 1 if nothing
 * fit. */
static int check_cut(const pm_sched *s, const shape *h, pm_cut_rule rule, double cap) {
    brute_out want = brute_cut(h, rule, cap);
    pm_cut_opts o = {.rule = rule, .cap = cap, .extra = excess};
    int got[MAXS + 1];
    double least = -1, t[MAXS], m[MAXS], lt[MAXS], lm[MAXS];
    pm_err err;
    pm_status st = pm_place_cut(hand, NH, s, &o, got, &least, &err);
    const char *what = rule == PM_CUT_MEMORY ? "memory" : "time";
    if (!want.found) {
        if (st != PM_ERR_MEMLIMIT)
            fail_msg("%s p=%d %s cap %g: status %d, but no cut fits", s->kind, s->p, what, cap, st);
        char need[64];
        snprintf(need, sizeof need, "the least any cut needs is %.0f bytes", want.least);
        if (least != want.least || !strstr(err.msg, need))
            fail_msg("%s p=%d %s cap %g: least %g (%s), brute force %g", s->kind, s->p, what,
                     cap, least, err.msg, want.least);
        return 1;
    }
    if (st) fail_msg("%s p=%d %s cap %g: %s", s->kind, s->p, what, cap, err.msg);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[h->S], NH);
    for (int k = 0; k < h->S; k++) assert_true(got[k + 1] > got[k]);
    figs f = figs_of(h, got, t, m);
    if (f.t != want.best.t || f.m != want.best.m || f.q != want.best.q)
        fail_msg("%s p=%d %s cap %g: time %g memory %g squares %g; brute force %g %g %g",
                 s->kind, s->p, what, cap, f.t, f.m, f.q, want.best.t, want.best.m, want.best.q);
    assert_true(least == f.m);
    assert_int_equal(pm_place_cut_shares(hand, NH, s, got, lt, lm, &err), PM_OK);
    for (int d = 0; d < h->p; d++)
        assert_true(lt[d] == t[d] && lm[d] + (excess ? excess[d] : 0) == m[d]);
    return 0;
}

static void test_cut_capped_and_memory(void **state) {
    (void)state;
    struct {
        const char *kind;
        int p, m, rec;
    } cases[] = {{"1f1b", 2, 4, 0}, {"1f1b", 3, 6, 0}, {"1f1b", 4, 8, 0}, {"1f1b", 4, 2, 0},
                 {"1f1b", 3, 6, 1}, {"interleaved", 2, 4, 0}, {"v-half", 2, 4, 0},
                 {"v-min", 3, 6, 0}, {"zb-v", 2, 4, 0}};
    /* each device's excess (a head's workspace on one, buffers on all), so
     * the cap bites unevenly: a cap the largest excess would rule out for
     * every device is met by a cut that loads the others */
    static const double uneven[MAXS] = {2, 0, 31, 5, 1, 17, 0, 3, 8, 0, 4, 9, 0, 2, 6, 1};
    int excluded = 0, none = 0, ncase = sizeof cases / sizeof cases[0];
    for (int c = 0; c < 2 * ncase; c++) {
        excess = c < ncase ? NULL : uneven;
        pm_sched s;
        pm_err err;
        int ci = c % ncase;
        pm_sched_req req = {.p = cases[ci].p, .m = cases[ci].m, .t = PM_COSTS_DEFAULT,
                            .mem = PM_MEM_DEFAULT, .recompute = cases[ci].rec,
                            .v = !strcmp(cases[ci].kind, "interleaved") ? 2 : 0};
        if (pm_sched_generate(&s, cases[ci].kind, &req, &err)) fail_msg("%s", err.msg);
        shape h = shape_of(&s);
        assert_true(h.S <= MAXS && h.S <= NH);
        for (int k = 0; k < h.S && !strcmp(cases[ci].kind, "1f1b") && !h.rec; k++)
            assert_int_equal(h.hold[k], h.p - k < cases[ci].m ? h.p - k : cases[ci].m);
        brute_out all = brute_cut(&h, PM_CUT_TIME, 0);
        double fastest_m = all.best.m;
        for (int r = 0; r < PM_CUT_RULES; r++)
            for (int i = -1; i < 2 * all.ncaps; i++) {
                /* no cap, then each cut's largest memory and just below it */
                double cap = i < 0 ? 0 : all.caps[i / 2] - (i % 2 ? 0.5 : 0);
                int nothing = check_cut(&s, &h, (pm_cut_rule)r, cap);
                none += nothing;
                excluded += !nothing && r == PM_CUT_TIME && cap > 0 && cap < fastest_m;
            }
        /* NULL options: the time rule without a cap */
        int a[MAXS + 1], b[MAXS + 1];
        pm_cut_opts o = {.rule = PM_CUT_TIME};
        assert_int_equal(pm_place_cut(hand, NH, &s, NULL, a, NULL, &err), PM_OK);
        assert_int_equal(pm_place_cut(hand, NH, &s, &o, b, NULL, &err), PM_OK);
        assert_memory_equal(a, b, (size_t)(h.S + 1) * sizeof *a);
        pm_sched_free(&s);
    }
    excess = NULL;
    /* the cases reach both: a cap the fastest cut breaks yet another meets,
     * and caps nothing meets */
    assert_true(excluded > 0 && none > 0);
}

/* ---- many layers --------------------------------------------------------------- */

/* 65538 equal layers (time 1, state 3 bytes, activation 1 byte) cut into
 * the 16 stages of 1F1B on 16 devices, where stage k holds 16 - k
 * microbatches: the least busiest time is ceil(65538 / 16) = 4097; the
 * least largest memory M, stage k costing x (3 + 16 - k) for x layers, is
 * the least M at which the stages can take every layer, sum over k of
 * floor(M / (19 - k)) >= 65538 (counted here). The cut's seeds are dynamic
 * programs over (stage, last layer); trying every first layer of the last
 * stage, as they once did, is S n^2 / 2 = 34 billion stage figures a seed
 * and ran for minutes: the work must stay within 128 S n figures (a seed's
 * S n cells, a few bisections of log2 n each, and the depth-first search's
 * few million partial cuts); beyond 2^26 (stage, layer) cells it refuses. */
static void test_cut_many_layers(void **state) {
    (void)state;
    enum { N = 65538, P = 16 };
    pm_place_layer *l = calloc(N, sizeof *l);
    assert_non_null(l);
    for (int i = 0; i < N; i++)
        l[i] = (pm_place_layer){.weight = 1, .tf = 0.25, .tb = 0.5, .tw = 0.25, .act = 1,
                                .act_w = 0.5, .in = 1, .params = 1, .state = 3};
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = P, .m = 64, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    double least_m = 0;
    for (long long got = 0; got < N; ) {
        least_m++, got = 0;
        for (int k = 0; k < P; k++) got += (long long)(least_m / (3 + P - k));
    }
    int first[P + 1];
    double t[P], m[P], least;
    for (int r = 0; r < PM_CUT_RULES; r++) {
        pm_cut_opts o = {.rule = (pm_cut_rule)r};
        int64_t evals = pm_place_evals();
        assert_int_equal(pm_place_cut(l, N, &s, &o, first, &least, &err), PM_OK);
        evals = pm_place_evals() - evals;
        if (evals > 128LL * P * N)
            fail_msg("the %s rule's cut evaluated %lld stage figures, over 128 S n = %lld",
                     pm_cut_rule_names[r], (long long)evals, 128LL * P * N);
        assert_int_equal(pm_place_cut_shares(l, N, &s, first, t, m, &err), PM_OK);
        double mt = 0, mm = 0;
        for (int d = 0; d < P; d++) mt = fmax(mt, t[d]), mm = fmax(mm, m[d]);
        assert_true(mm == least);
        if (r == PM_CUT_TIME) assert_true(mt == (N + P - 1) / P);
        else assert_true(mm == least_m);
    }
    pm_sched_free(&s);
    /* 1025 stages of these layers are over the cut's 2^26 cells: one line,
     * before any figure */
    req.p = 1025, req.m = 1;
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    int *many = malloc(1026 * sizeof *many);
    assert_non_null(many);
    int64_t evals = pm_place_evals();
    assert_int_equal(pm_place_cut(l, N, &s, NULL, many, NULL, &err), PM_ERR_ARG);
    assert_true(pm_place_evals() == evals);
    assert_non_null(strstr(err.msg, "65538 layers into 1025 stages is beyond the cut"));
    free(many);
    pm_sched_free(&s);
    free(l);
}

/* ---- the planner under device_mem ---------------------------------------------- */

/* The largest device memory and busiest time (FLOPs) of a plan's cut, as the rule counts them. */
static void plan_figs(const pm_plan *pl, double *t, double *m) {
    double x[2 * MAXS];
    pm_err err;
    const pm_train_cfg *c = &pl->cfg;
    assert_int_equal(pm_place_shares(&c->model, c->batch / c->micro, c->model.ctx, &pl->sched,
                                     NULL, pl->first, x, x + pl->p, &err), PM_OK);
    *t = *m = 0;
    for (int d = 0; d < pl->p; d++) *t = fmax(*t, x[d]), *m = fmax(*m, x[pl->p + d]);
}

static size_t busiest(const pm_plan *pl) { return pl->dev[pl->busiest].total; }

static void test_plan_fits_device_mem(void **state) {
    (void)state;
    pm_train_cfg c = {.model = {.vocab = 256, .ctx = 32, .dim = 64, .heads = 4, .layers = 6},
                      .batch = 8, .micro = 8, .seed = 1};
    pm_optim_defaults(&c.opt, 2);
    pm_sched s;
    pm_err err;
    pm_sched_req req = {.p = 4, .m = 8, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    assert_int_equal(pm_sched_generate(&s, "1f1b", &req, &err), PM_OK);
    pm_plan fast, small, fit;
    pm_plan_req rq = {.sched = &s};
    assert_int_equal(pm_plan_make(&fast, &c, &rq, &err), PM_OK);
    rq.cut = PM_CUT_MEMORY;
    assert_int_equal(pm_plan_make(&small, &c, &rq, &err), PM_OK);
    double ft, fm, st, sm, gt, gm;
    plan_figs(&fast, &ft, &fm);
    plan_figs(&small, &st, &sm);
    /* the memory rule: no more memory on its fullest device, no less time */
    assert_true(sm <= fm && st >= ft);
    assert_true(busiest(&small) < busiest(&fast)); /* this shape: the two differ */
    /* a budget between the two: the time rule fits it, no slower than the
     * memory rule and no faster than without the budget */
    rq.cut = PM_CUT_TIME;
    rq.device_mem = (busiest(&small) + busiest(&fast)) / 2;
    if (pm_plan_make(&fit, &c, &rq, &err)) fail_msg("%s", err.msg);
    plan_figs(&fit, &gt, &gm);
    assert_true(busiest(&fit) <= rq.device_mem);
    assert_true(fit.cut.cap > 0 || fit.cut.rule == PM_CUT_MEMORY);
    assert_true(gt <= st && gt >= ft);
    pm_plan_free(&fit);
    /* the memory rule's own total is always met */
    rq.device_mem = busiest(&small);
    if (pm_plan_make(&fit, &c, &rq, &err)) fail_msg("%s", err.msg);
    assert_true(busiest(&fit) <= rq.device_mem);
    pm_plan_free(&fit);
    /* below it, no placement fits, under either rule */
    for (int r = 0; r < PM_CUT_RULES; r++) {
        rq.device_mem = busiest(&small) - 1, rq.cut = (pm_cut_rule)r;
        assert_int_equal(pm_plan_make(&fit, &c, &rq, &err), PM_ERR_MEMLIMIT);
        assert_non_null(strstr(err.msg, "no placement fits device_mem"));
    }
    /* a rule that does not exist */
    rq.device_mem = 0, rq.cut = PM_CUT_RULES;
    assert_int_equal(pm_plan_make(&fit, &c, &rq, &err), PM_ERR_ARG);
    pm_plan_free(&fast);
    pm_plan_free(&small);
    pm_sched_free(&s);
    /* A budget some plan met is met again: what a device holds beyond the
     * cut's count is its own (the head's workspace on the last device does
     * not shrink the first's room). With one excess for all, a budget of
     * 37 MiB was refused here though the cut found at 38 MiB, 34.7 and 33.0
     * MiB, fits it. */
    pm_train_cfg c2 = {.model = {.vocab = 9000, .ctx = 1024, .dim = 64, .heads = 4, .layers = 4},
                       .batch = 4, .micro = 4, .seed = 1};
    pm_optim_defaults(&c2.opt, 2);
    pm_plan_req r2 = {.p = 2, .kind = "1f1b", .device_mem = (size_t)38 << 20};
    pm_plan wide, tight;
    if (pm_plan_make(&wide, &c2, &r2, &err)) fail_msg("%s", err.msg);
    r2.device_mem = busiest(&wide);
    if (pm_plan_make(&tight, &c2, &r2, &err)) fail_msg("%zu bytes: %s", r2.device_mem, err.msg);
    assert_true(busiest(&tight) <= r2.device_mem);
    pm_plan_free(&wide);
    pm_plan_free(&tight);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_cut_capped_and_memory),
        cmocka_unit_test(test_cut_many_layers),
        cmocka_unit_test(test_plan_fits_device_mem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
