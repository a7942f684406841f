/* bench_pp.c: the pipeline runtime against its own peers, one run each.
 *
 * (a) time: P = 2 device threads, m = 8, a GPT sized so a step takes about
 *     a second on this machine. A profiling step of zb-h1 (split B and W on
 *     the single placement) measures the device-share F, B, W times that the
 *     cost-aware generators (zb*, v-zb, auto-v) are given. Every kind gets
 *     its own pipe and the kinds take turns, one step each per round (so
 *     load from other processes hits all alike); round 0 warms up, and each
 *     kind keeps its fastest timed step. After every round all parameters
 *     must equal 1F1B's bitwise (checked before any time is printed). Each
 *     line prints the measured makespan (passes only) and step time as a
 *     ratio to 1F1B's, next to the simulator's REPLAY ratio (the simulator
 *     fed with the same step's per-stage mean pass times and latency: a
 *     check of the executor, not a prediction), and the FORECAST error: the
 *     runtime's forecast of each step after the first, made before the step
 *     ran from the costs of the steps before it, against what it measured
 *     (mean |forecast - measured| / measured).
 * (b) memory: P = 4 and 8, m = 16, a small GPT (16 blocks, so 2p stages
 *     fit): one step of every kind; the measured peak activation bytes
 *     (max over devices, which equals the prediction: checked) as a ratio to
 *     1F1B's, next to the papers' values (V-Half floor((p+2)/2)/p, V-Min
 *     floor((p+4)/3)/p, V-ZB 1; '-' where the papers give none). The papers
 *     assume identical layers; here the embedding and head differ from the
 *     blocks, so stages are not identical and ratios move a little. Beside
 *     it, the arena (slab) bytes as a ratio to 1F1B's: live bytes plus what
 *     a fixed placement loses to holes (see pm_runtime.h).
 *
 * Usage: bench_pp [--quick]   (--quick: a smaller model for (a))
 * Output lines:
 *   bench_pp time kind=v-half p=2 m=8 ... forecast_err_pct=3.1 ... makespan_ratio=0.93
 *       replay_ratio=0.91 ...
 *   bench_pp mem kind=v-half p=4 m=16 peak_ratio=0.75 paper=0.75 ... */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/reexec.h"
#include "pipemem/pm_runtime.h"
#include "data/loader.h"
#include "runtime/pipe.h"

typedef struct {
    double makespan, step, pred; /* ms: pred is the replay of the same step */
    double fmk, ferr;            /* forecast makespan and |error| / measured, summed */
    int nf;                      /* steps summed there */
    double peak_max;             /* bytes */
    double arena_max;            /* bytes of the largest arena */
    int ok;
} result;

static void batch(const pm_train_cfg *c, int step, int32_t *inp, int32_t *tgt) {
    size_t n = (size_t)c->batch * (size_t)c->model.ctx;
    for (size_t i = 0; i < n; i++) {
        uint64_t h = pm_splitmix64((uint64_t)step * 1000003u + i);
        inp[i] = (int32_t)(h % (uint64_t)c->model.vocab);
        tgt[i] = (int32_t)((h >> 8) % (uint64_t)c->model.vocab);
    }
}

static int generate(pm_sched *s, const char *kind, int p, int m, pm_costs t, pm_err *err) {
    pm_sched_req req = {.p = p, .m = m, .t = t, .mem = PM_MEM_DEFAULT};
    if (!strcmp(kind, "interleaved")) req.v = 2;
    if (!strcmp(kind, "auto-v")) req.mem_limit = 1.0;
    return pm_sched_generate(s, kind, &req, err) != PM_OK;
}

/* A pipe running s for c (planned with FLOP placement; the pipe keeps the plan). */
static pm_status make_pipe(pm_pipe **pp, const pm_train_cfg *c, const pm_sched *s, pm_err *err) {
    pm_plan pl;
    pm_plan_req rq = {.sched = s};
    *pp = NULL;
    pm_status st = pm_plan_make(&pl, c, &rq, err);
    if (!st) st = pm_pipe_create(pp, &pl, NULL, err);
    pm_plan_free(&pl);
    return st;
}

/* Runs `steps` steps (the first untimed); r gets timed means and the peak;
 * params (if not NULL) the parameters after the first step. */
static int run(const pm_train_cfg *c, const pm_sched *s, int steps, result *r, float *params,
               double *loss0, pm_pipe **keep) {
    pm_pipe *q;
    pm_err err;
    *r = (result){0};
    if (keep) *keep = NULL;
    if (make_pipe(&q, c, s, &err)) {
        fprintf(stderr, "bench_pp: %s: %s\n", s->kind, err.msg);
        return 1;
    }
    size_t n = (size_t)c->batch * (size_t)c->model.ctx;
    int32_t *inp = malloc(n * sizeof *inp), *tgt = malloc(n * sizeof *tgt);
    int rc = 0;
    for (int k = 0; k < steps && !rc; k++) {
        pm_pipe_info in;
        batch(c, k, inp, tgt);
        if (pm_pipe_step(q, inp, tgt, &in, &err)) {
            fprintf(stderr, "bench_pp: %s: %s\n", s->kind, err.msg);
            rc = 1;
            break;
        }
        for (int d = 0; d < pm_pipe_devices(q); d++) {
            if (in.peak[d] != in.pred_peak[d]) {
                fprintf(stderr, "bench_pp: %s device %d: peak %zu != predicted %zu\n", s->kind, d,
                        in.peak[d], in.pred_peak[d]);
                rc = 1;
            }
            if ((double)in.peak[d] > r->peak_max) r->peak_max = (double)in.peak[d];
            if ((double)in.arena[d] > r->arena_max) r->arena_max = (double)in.arena[d];
        }
        if (k == 0) {
            if (params) (void)pm_pipe_gather(q, PM_SLAB_PARAMS, params, NULL);
            if (loss0) *loss0 = in.loss;
            continue;
        }
        r->makespan += in.makespan_ms / (steps - 1);
        r->step += in.step_ms / (steps - 1);
        r->pred += in.pred_makespan_ms / (steps - 1);
    }
    free(inp);
    free(tgt);
    if (!keep || rc) pm_pipe_destroy(q);
    else *keep = q;
    r->ok = !rc;
    return rc;
}

/* Device-share costs from a zb-h1 profiling step (stage = device share). */
static int profile(const pm_train_cfg *c, int p, int m, pm_costs *t) {
    pm_sched s;
    pm_err err;
    if (generate(&s, "zb-h1", p, m, PM_COSTS_DEFAULT, &err)) return 1;
    result r;
    pm_pipe *pp;
    int rc = run(c, &s, 2, &r, NULL, NULL, &pp);
    pm_sched_free(&s);
    if (rc) return 1;
    const pm_cost *cost = pm_pipe_cost(pp);
    *t = (pm_costs){0, 0, 0, 0};
    for (int st = 0; st < cost->S; st++) {
        t->f += cost->st[st].tf / cost->S;
        t->b += cost->st[st].tb / cost->S;
        t->w += cost->st[st].tw / cost->S;
    }
    pm_pipe_destroy(pp);
    printf("bench_pp profile p=%d m=%d f_us=%.0f b_us=%.0f w_us=%.0f\n", p, m, t->f, t->b, t->w);
    return 0;
}

/* Every kind gets its own pipe; rounds run one step of each kind in turn,
 * so load from other processes hits every kind alike. Round 0 warms up; of
 * the timed rounds each kind keeps its fastest (makespan and the prediction
 * from that same step). After every round all parameters must equal
 * 1F1B's bitwise. */
#define TIME_ROUNDS 6
static int bench_time(int quick) {
    const int p = 2, m = 8;
    pm_train_cfg c = {.model = {256, 128, quick ? 128 : 512, quick ? 4 : 8, quick ? 4 : 8},
                      .batch = m, .micro = m, .seed = 3};
    pm_optim_defaults(&c.opt, 10);
    pm_costs t;
    if (profile(&c, p, m, &t)) return 1;
    int nk, base = -1, rc = 0;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    size_t np = pm_gpt_num_params(&c.model), n = (size_t)c.batch * (size_t)c.model.ctx;
    float *ref = malloc(np * sizeof(float)), *got = malloc(np * sizeof(float));
    pm_pipe **pp = calloc((size_t)nk, sizeof *pp);
    result *res = calloc((size_t)nk, sizeof *res);
    int32_t *inp = malloc(n * sizeof *inp), *tgt = malloc(n * sizeof *tgt);
    if (!ref || !got || !pp || !res || !inp || !tgt) return 1;
    for (int k = 0; k < nk; k++) {
        pm_sched s;
        pm_err err;
        if (!strcmp(kinds[k].name, "1f1b")) base = k;
        if (generate(&s, kinds[k].name, p, m, t, &err)) {
            printf("bench_pp time kind=%s p=%d m=%d skipped=\"%s\"\n", kinds[k].name, p, m,
                   err.msg);
            continue;
        }
        if (make_pipe(&pp[k], &c, &s, &err)) {
            fprintf(stderr, "bench_pp: %s: %s\n", kinds[k].name, err.msg);
            rc = 1;
        } else {
            res[k].ok = 1;
        }
        pm_sched_free(&s);
    }
    if (base < 0 || !res[base].ok) return 1;
    for (int r = 0; r < TIME_ROUNDS && !rc; r++) {
        batch(&c, r, inp, tgt);
        for (int k = 0; k < nk; k++) {
            if (!res[k].ok) continue;
            pm_pipe_info in;
            pm_err err;
            if (pm_pipe_step(pp[k], inp, tgt, &in, &err)) {
                fprintf(stderr, "bench_pp: %s: %s\n", kinds[k].name, err.msg);
                rc = 1;
                break;
            }
            if (r > 0 && (!res[k].makespan || in.makespan_ms < res[k].makespan))
                res[k].makespan = in.makespan_ms, res[k].pred = in.pred_makespan_ms,
                res[k].step = in.step_ms;
            if (isfinite(in.forecast_makespan_ms)) /* made before this step, from earlier ones */
                res[k].ferr += fabs(in.forecast_makespan_ms - in.makespan_ms) / in.makespan_ms,
                    res[k].fmk += in.forecast_makespan_ms, res[k].nf++;
        }
        /* exactness: everybody equals 1F1B after this round */
        (void)pm_pipe_gather(pp[base], PM_SLAB_PARAMS, ref, NULL);
        for (int k = 0; k < nk && !rc; k++) {
            if (!res[k].ok || k == base) continue;
            (void)pm_pipe_gather(pp[k], PM_SLAB_PARAMS, got, NULL);
            if (memcmp(ref, got, np * sizeof(float))) {
                fprintf(stderr, "bench_pp: %s: parameters differ from 1F1B's after round %d\n",
                        kinds[k].name, r);
                rc = 1;
            }
        }
    }
    const result *b = &res[base];
    for (int k = 0; k < nk && !rc; k++) {
        const result *r = &res[k];
        if (!r->ok) continue;
        printf("bench_pp time kind=%s p=%d m=%d step_ms=%.1f makespan_ms=%.1f "
               "replay_makespan_ms=%.1f forecast_makespan_ms=%.1f forecast_err_pct=%.1f "
               "peer=1f1b makespan_ratio=%.3f replay_ratio=%.3f step_ratio=%.3f "
               "replay_agree_pct=%.1f\n",
               kinds[k].name, p, m, r->step, r->makespan, r->pred, r->fmk / r->nf,
               100.0 * r->ferr / r->nf, r->makespan / b->makespan, r->pred / b->pred,
               r->step / b->step,
               100.0 * fabs(r->makespan / b->makespan - r->pred / b->pred) / (r->pred / b->pred));
    }
    for (int k = 0; k < nk; k++) pm_pipe_destroy(pp[k]);
    free(pp);
    free(inp);
    free(tgt);
    free(ref);
    free(got);
    free(res);
    return rc;
}

static double paper_ratio(const char *kind, int p) {
    if (!strcmp(kind, "v-half")) return floor((p + 2) / 2.0) / p;
    if (!strcmp(kind, "v-min")) return floor((p + 4) / 3.0) / p;
    if (!strcmp(kind, "v-zb") || !strcmp(kind, "zb-v") || !strcmp(kind, "zb-h1")) return 1;
    if (!strcmp(kind, "1f1b")) return 1;
    return NAN;
}

static int bench_mem(int p) {
    const int m = 16;
    pm_train_cfg c = {.model = {256, 16, 64, 4, 16}, .batch = m, .micro = m, .seed = 3};
    pm_optim_defaults(&c.opt, 10);
    int nk, rc = 0;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    double base = 0, base_arena = 0;
    for (int i = -1; i < nk; i++) {
        const char *kind = i < 0 ? "1f1b" : kinds[i].name;
        if (i >= 0 && !strcmp(kind, "1f1b")) continue;
        pm_sched s;
        pm_err err;
        result r;
        if (generate(&s, kind, p, m, PM_COSTS_DEFAULT, &err)) {
            printf("bench_pp mem kind=%s p=%d m=%d skipped=\"%s\"\n", kind, p, m, err.msg);
            continue;
        }
        if (run(&c, &s, 1, &r, NULL, NULL, NULL)) {
            rc = 1;
            pm_sched_free(&s);
            continue;
        }
        if (i < 0) base = r.peak_max, base_arena = r.arena_max;
        double pr = paper_ratio(kind, p);
        char paper[32];
        if (isnan(pr)) snprintf(paper, sizeof paper, "-");
        else snprintf(paper, sizeof paper, "%.3f", pr);
        printf("bench_pp mem kind=%s p=%d m=%d peak_bytes=%.0f peer=1f1b peak_ratio=%.3f "
               "paper=%s arena_bytes=%.0f arena_ratio=%.3f\n", kind, p, m, r.peak_max,
               r.peak_max / base, paper, r.arena_max, r.arena_max / base_arena);
        pm_sched_free(&s);
    }
    return rc;
}

int main(int argc, char **argv) {
    pm_cli_blas_reexec(argv); /* the CPU's fast sgemm kernels (pm_gpt.h) */
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    /* context for the times: device threads share the machine's cores */
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (!fgets(load, sizeof load, la)) snprintf(load, sizeof load, "?");
        fclose(la);
    }
    load[strcspn(load, " ")] = 0;
    printf("bench_pp context loadavg_1min=%s coretype=%s\n", load,
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "default");
    int rc = bench_time(quick);
    rc |= bench_mem(4);
    rc |= bench_mem(8);
    return rc;
}
