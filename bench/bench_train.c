/* bench_train.c: single-device training speed of pipemem against PyTorch
 * 1.13 on CPU (Debian's python3-torch), measured in the same run, on the
 * issue's shape: layers 6, dim 512, heads 8, ctx 256, batch 8, vocab 256,
 * AdamW, 2 threads each. Also measures OpenBLAS's cblas_sgemm peak in this
 * process (2048^3, 2 threads, best of 5 after a warm-up) so pipemem's
 * GFLOP/s is reported as a fraction of it.
 *
 * Each trainer runs as a child process (build/pipemem train ... --json and
 * /usr/bin/python3 bench/torch_train.py, whose idle OpenMP threads sleep
 * rather than spin against OpenBLAS's: see there), so its peak RSS comes
 * from wait4()'s rusage. Both report the median step time over the steps; the
 * FLOPs per step are the model's count (pm_train_step_flops) for both.
 * Two rounds alternate pipemem and PyTorch and the best of each is kept; the
 * sgemm peak is the better of a measurement before and after them.
 * pipemem's result is checked (finite loss near ln 256 on random-ish text
 * after few steps) before any number is printed.
 *
 * --gpt2: GPT-2 small's shape instead, the one llm.c's CPU reference
 * reports: layers 12, dim 768, heads 12, ctx 64, batch 4, vocab 50257, on
 * llm.c-format token files of pseudo-random ids written here. pipemem on
 * one device (--threads) and PyTorch with --vocab 50257, once each (a step
 * takes seconds), then pipemem on P = 2 device threads (one core each, 4
 * microbatches of 1 sequence) under 1f1b, zb-v and v-half, two rounds of
 * the three, whose best speeds are also given as ratios against 1f1b and
 * against the one-device run. Each layer kind's F, B and W on one core are
 * measured in this process (where the one-device step's time goes). Every
 * pipemem loss must be finite and below 12 (ln 50257 = 10.8 at the start),
 * and the three schedules' losses equal (they train bitwise alike).
 *
 * Usage: bench_train [--gpt2] [STEPS]   (default 6, with --gpt2 4; env
 *        PM_BIN overrides the binary; env PM_BENCH_THREADS the thread
 *        count, default 2)
 * Output (last line, parseable):
 *   bench_train tokens_per_s=... torch_tokens_per_s=... ratio=... gflops=...
 *   sgemm_peak_gflops=... peak_fraction=... rss_mib=... torch_rss_mib=...
 * with --gpt2:
 *   bench_train shape=gpt2 tokens_per_s=... torch_tokens_per_s=... ratio=...
 *   gflops=... sgemm_peak_gflops=... peak_fraction=... rss_mib=...
 *   torch_rss_mib=... pp2_1f1b_tokens_per_s=... pp2_zbv_tokens_per_s=...
 *   pp2_vhalf_tokens_per_s=... zbv_vs_1f1b=... vhalf_vs_1f1b=...
 *   pp2_1f1b_vs_single=... zbv_vs_single=... vhalf_vs_single=... */
#include "bench.h"

#include <cblas.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipemem/pm_data.h"
#include "pipemem/pm_gpt.h"
#include "pipemem/pm_runtime.h"
#include "cli/reexec.h"
#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"
#include "model/passes.h"
#include "plan/placement.h"

enum { L = 6, C = 512, H = 8, T = 256, B = 8, ROUNDS = 2 };

/* One pipemem run's numbers, from its JSON line. */
typedef struct {
    double tok;    /* tokens_per_s: B T over the median step time */
    double gf;     /* gflops_per_s */
    double loss;   /* final_loss */
    double bubble; /* measured_bubble (pipelines only, else NAN) */
    double step_s; /* median_step_ms, in seconds */
    double pass_s; /* measured_step_ms (pipelines: the mean makespan of the passes), s */
    long rss_kib;  /* the child's peak RSS */
} bench_run;

/* Runs pipemem with argv and checks its result: a positive speed and a
 * finite loss below max_loss. 0, or 1 after saying why. */
static int run_pipemem(char *const argv[], const char *errpath, double max_loss, bench_run *r) {
    *r = (bench_run){0};
    const char *o = bench_run_child(argv, errpath, &r->rss_kib);
    if (!o) return bench_child_failed("bench_train", "pipemem", argv, errpath);
    r->tok = bench_json_num(o, "tokens_per_s");
    r->gf = bench_json_num(o, "gflops_per_s");
    r->loss = bench_json_num(o, "final_loss");
    r->bubble = bench_json_num(o, "measured_bubble");
    r->step_s = bench_json_num(o, "median_step_ms") / 1e3;
    r->pass_s = bench_json_num(o, "measured_step_ms") / 1e3;
    if (!(isfinite(r->tok) && r->tok > 0) || !isfinite(r->loss) || r->loss > max_loss) {
        fprintf(stderr, "bench_train: pipemem gave a bad loss or speed: %s\n", o);
        return 1;
    }
    return 0;
}

/* Where the one-device step's time goes: each layer kind's F, B and W on the
 * whole batch, on one compute thread (pm_place_measure, as a device thread
 * runs them), its FLOP rate and share of the model's F+B+W, then that sum
 * against the measured step on `threads` threads (which also holds AdamW). */
static void print_kinds(const pm_gpt_config *m, int batch, int ctx, double step_s,
                        int threads) {
    pm_layer_costs t, f;
    pm_err err = {{0}};
    if (pm_place_measure(m, batch, ctx, &t, &err) || pm_place_flops(m, batch, ctx, &f, &err)) {
        printf("  (layer kinds not measured: %s)\n", err.msg);
        return;
    }
    double sec[PM_LAYER_KIND_COUNT], total = 0;
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++) {
        sec[k] = (k == PM_LAYER_BLOCK ? m->layers : 1) * (t.k[k].f + t.k[k].b + t.k[k].w);
        total += sec[k];
    }
    printf("  layer kinds on one core, batch %d x %d (F, B, W of one layer; the kind's "
           "rate and share):\n", batch, ctx);
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++) {
        const pm_pass_times *s = &t.k[k], *c = &f.k[k];
        printf("    %-5s x%-2d: F %6.1f  B %6.1f  W %6.1f ms  %6.1f GFLOP/s  %4.1f%%\n",
               pm_layer_kind_names[k], k == PM_LAYER_BLOCK ? m->layers : 1, s->f * 1e3,
               s->b * 1e3, s->w * 1e3, (c->f + c->b + c->w) / (s->f + s->b + s->w) / 1e9,
               100 * sec[k] / total);
    }
    printf("    all layers: %.2f s on one core; the %d-thread step (AdamW too) %.2f s, "
           "x%.2f of it\n", total, threads, step_s, total / step_s);
}

/* --gpt2: see the top of the file. One round of the one-device run and
 * PyTorch (at seconds a step, with model set-up, the eight runs take about
 * two and a half minutes on two cores), two of the schedules. */
static int bench_gpt2(char *bin, char *script, char *python, int steps, int threads) {
    enum { GL = 12, GC = 768, GH = 12, GT = 64, GB = 4, GK = 4, NKIND = 3 };
    char dir[64], train[96], val[96], errpath[96];
    snprintf(dir, sizeof dir, "/tmp/pm_bench_gpt2_%d", (int)getpid());
    snprintf(train, sizeof train, "%s/train.bin", dir);
    snprintf(val, sizeof val, "%s/val.bin", dir);
    snprintf(errpath, sizeof errpath, "%s/stderr", dir);
    if (mkdir(dir, 0700)) {
        fprintf(stderr, "bench_train: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int rc = bench_write_llmc(train, (size_t)1 << 18, &rng) || bench_write_llmc(val, (size_t)1 << 15, &rng);

    char s_steps[16], s_thr[16];
    snprintf(s_steps, sizeof s_steps, "%d", steps);
    snprintf(s_thr, sizeof s_thr, "%d", threads);
    char *one_argv[] = {bin, "train", "--train", train, "--val", val, "--layers", "12", "--dim",
                        "768", "--heads", "12", "--ctx", "64", "--batch", "4", "--microbatches",
                        "1", "--threads", s_thr, "--steps", s_steps, "--eval-every", "0",
                        "--eval-batches", "1", "--json", NULL};
    /* --pp runs BLAS on one thread per device: two device threads, two cores. */
    char *pp_argv[] = {bin, "train", "--train", train, "--val", val, "--layers", "12", "--dim",
                       "768", "--heads", "12", "--ctx", "64", "--batch", "4", "--microbatches",
                       "4", "--pp", "2", "--schedule", "1f1b", "--steps", s_steps,
                       "--eval-every", "0", "--eval-batches", "1", "--json", NULL};
    char *py_argv[] = {python, script, "--layers", "12", "--dim", "768", "--heads", "12",
                       "--ctx", "64", "--batch", "4", "--steps", s_steps, "--threads", s_thr,
                       "--vocab", "50257", NULL};
    char *kinds[NKIND] = {"1f1b", "zb-v", "v-half"};
    size_t ks = 0;
    while (strcmp(pp_argv[ks], "--schedule")) ks++;

    double peak = bench_sgemm_peak(threads), ttok = 0, loss_1f1b = NAN;
    long trss = 0;
    bench_run one = {0}, pp[NKIND] = {{0}};
    if (!rc) rc = run_pipemem(one_argv, errpath, 12.0, &one);
    if (!rc) {
        const char *po = bench_run_child(py_argv, errpath, &trss);
        ttok = po ? bench_json_num(po, "tokens_per_s") : NAN;
        if (!po)
            rc = bench_child_failed("bench_train", "the PyTorch peer", py_argv, errpath);
        else if (!(isfinite(ttok) && ttok > 0)) {
            fprintf(stderr, "bench_train: the PyTorch peer printed no tokens_per_s: %s\n", po);
            rc = 1;
        }
    }
    /* The schedules' ratios are the closest to 1: two rounds of the three,
     * the best speed of each kept (as the default shape's rounds). */
    for (int r = 0; r < 2 && !rc; r++)
        for (int k = 0; k < NKIND && !rc; k++) {
            bench_run x;
            pp_argv[ks + 1] = kinds[k];
            if ((rc = run_pipemem(pp_argv, errpath, 12.0, &x))) break;
            if (r == 0 && k == 0) loss_1f1b = x.loss;
            /* Every schedule trains the same model bitwise alike. */
            if (x.loss != loss_1f1b) {
                fprintf(stderr, "bench_train: --pp 2 --schedule %s ended at loss %.6f, "
                        "1f1b at %.6f (schedules train bitwise alike)\n", kinds[k], x.loss,
                        loss_1f1b);
                rc = 1;
            }
            long rss_kib = x.rss_kib > pp[k].rss_kib ? x.rss_kib : pp[k].rss_kib;
            if (x.tok > pp[k].tok) pp[k] = x;
            pp[k].rss_kib = rss_kib;
        }
    unlink(train);
    unlink(val);
    unlink(errpath);
    rmdir(dir);
    if (rc) return 1;
    double peak2 = bench_sgemm_peak(threads);
    if (peak2 > peak) peak = peak2;

    pm_train_cfg cfg = {.model = {PM_LLMC_VOCAB, GT, GC, GH, GL}, .batch = GB, .micro = 1};
    double flops = pm_train_step_flops(&cfg);
    printf("bench_train shape (GPT-2 small, as llm.c's CPU reference): layers %d dim %d "
           "heads %d ctx %d batch %d vocab %d, %.1f GFLOP/step, %d steps, %d threads, "
           "OpenBLAS kernels %s\n", GL, GC, GH, GT, GB, PM_LLMC_VOCAB, flops / 1e9, steps,
           threads, openblas_get_corename());
    printf("  pipemem : %8.1f tokens/s  %6.1f GFLOP/s  peak RSS %6.0f MiB  loss %.4f\n",
           one.tok, one.gf, one.rss_kib / 1024.0, one.loss);
    printf("  pytorch : %8.1f tokens/s  %6.1f GFLOP/s  peak RSS %6.0f MiB\n", ttok,
           flops * ttok / (GB * GT) / 1e9, trss / 1024.0);
    printf("  sgemm   : %6.1f GFLOP/s peak (2048^3); pipemem at %.0f%% of it\n", peak,
           100.0 * one.gf / peak);
    print_kinds(&cfg.model, GB, GT, one.step_s, threads);
    printf("  P = 2 device threads (one core each), %d microbatches of %d sequence:\n", GK,
           GB / GK);
    for (int k = 0; k < NKIND; k++)
        printf("  %-7s : %8.1f tokens/s  %6.1f GFLOP/s  peak RSS %6.0f MiB  x%.3f vs 1f1b  "
               "x%.3f vs 1 device; step %.0f ms (median), passes %.0f ms (mean), "
               "bubble %.3f\n", kinds[k], pp[k].tok, pp[k].gf, pp[k].rss_kib / 1024.0,
               pp[k].tok / pp[0].tok, pp[k].tok / one.tok, pp[k].step_s * 1e3,
               pp[k].pass_s * 1e3, pp[k].bubble);
    printf("bench_train shape=gpt2 tokens_per_s=%.1f torch_tokens_per_s=%.1f ratio=%.3f "
           "gflops=%.1f sgemm_peak_gflops=%.1f peak_fraction=%.3f rss_mib=%.0f "
           "torch_rss_mib=%.0f pp2_1f1b_tokens_per_s=%.1f pp2_zbv_tokens_per_s=%.1f "
           "pp2_vhalf_tokens_per_s=%.1f zbv_vs_1f1b=%.3f vhalf_vs_1f1b=%.3f "
           "pp2_1f1b_vs_single=%.3f zbv_vs_single=%.3f vhalf_vs_single=%.3f\n",
           one.tok, ttok, one.tok / ttok, one.gf, peak, one.gf / peak, one.rss_kib / 1024.0,
           trss / 1024.0, pp[0].tok, pp[1].tok, pp[2].tok, pp[1].tok / pp[0].tok,
           pp[2].tok / pp[0].tok, pp[0].tok / one.tok, pp[1].tok / one.tok, pp[2].tok / one.tok);
    return 0;
}

int main(int argc, char **argv) {
    /* Both trainers and the sgemm peak use the same OpenBLAS kernels: the
     * children inherit OPENBLAS_CORETYPE if this sets it (src/cli/reexec.c). */
    pm_cli_blas_reexec(argv);
    int gpt2 = 0, steps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpt2") && !gpt2)
            gpt2 = 1;
        else if (!steps && atoi(argv[i]) >= 1)
            steps = atoi(argv[i]);
        else {
            fprintf(stderr, "usage: bench_train [--gpt2] [STEPS]   (STEPS >= 1; default 6, "
                    "with --gpt2 4)\n");
            return 2;
        }
    }
    if (!steps) steps = gpt2 ? 4 : 6;
    const char *thr = getenv("PM_BENCH_THREADS");
    int threads = thr ? atoi(thr) : 2;
    char bin[4096], self[4096];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(bin, sizeof bin, "%s/../pipemem", dirname(self));
    if (getenv("PM_BIN")) snprintf(bin, sizeof bin, "%s", getenv("PM_BIN"));
    char script[4096], bdir[4096];
    snprintf(bdir, sizeof bdir, "%s", bin);
    snprintf(script, sizeof script, "%s/../bench/torch_train.py", dirname(dirname(bdir)));
    if (access(script, R_OK)) snprintf(script, sizeof script, "bench/torch_train.py");
    /* PM_BENCH_PYTHON: another interpreter (one without torch shows that a
     * failing peer fails the benchmark). */
    char *python = getenv("PM_BENCH_PYTHON") ? getenv("PM_BENCH_PYTHON") : "/usr/bin/python3";
    if (gpt2) return bench_gpt2(bin, script, python, steps, threads);

    /* Data: the fortunes corpus if installed, else generated text. */
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/pm_bench_train_%d", (int)getpid());
    const char *corpus = "/usr/share/games/fortunes/fortunes";
    char gen[128];
    if (access(corpus, R_OK)) {
        snprintf(gen, sizeof gen, "%s.txt", dir);
        FILE *f = fopen(gen, "w");
        for (int i = 0; f && i < 20000; i++) fprintf(f, "line %d of the generated corpus\n", i);
        if (f) fclose(f);
        corpus = gen;
    }
    pm_err err = {{0}};
    const char *files[] = {corpus};
    if (pm_data_prepare(files, 1, dir, NULL, 0, NULL, &err)) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 1;
    }

    char s_steps[16], s_thr[16];
    snprintf(s_steps, sizeof s_steps, "%d", steps);
    snprintf(s_thr, sizeof s_thr, "%d", threads);
    char *pm_argv[] = {bin, "train", "--data", dir, "--layers", "6", "--dim", "512", "--heads",
                       "8", "--ctx", "256", "--batch", "8", "--microbatches", "1", "--steps",
                       s_steps, "--threads", s_thr, "--eval-every", "0", "--eval-batches", "1",
                       "--json", NULL};
    char errpath[128];
    snprintf(errpath, sizeof errpath, "%s.stderr", dir);
    char *py_argv[] = {python, script, "--layers", "6", "--dim", "512", "--heads",
                       "8", "--ctx", "256", "--batch", "8", "--steps", s_steps, "--threads",
                       s_thr, NULL};
    /* Rounds alternate the two trainers; the best of each is kept, so a
     * burst of load from elsewhere on the machine hurts neither unfairly. */
    double peak = bench_sgemm_peak(threads), tok = 0, gf = 0, ttok = 0;
    long rss = 0, trss = 0;
    int rc = 0;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        long k_rss = 0;
        const char *o = bench_run_child(pm_argv, errpath, &k_rss);
        if (!o) {
            rc = bench_child_failed("bench_train", "pipemem", pm_argv, errpath);
            break;
        }
        double k_tok = bench_json_num(o, "tokens_per_s"), loss = bench_json_num(o, "final_loss");
        if (!isfinite(k_tok) || !isfinite(loss) || loss > 6.0) {
            fprintf(stderr, "bench_train: pipemem gave a bad loss or speed: %s\n", o);
            rc = 1;
            break;
        }
        if (k_tok > tok) tok = k_tok, gf = bench_json_num(o, "gflops_per_s");
        if (k_rss > rss) rss = k_rss;
        const char *po = bench_run_child(py_argv, errpath, &k_rss);
        if (!po) {
            rc = bench_child_failed("bench_train", "the PyTorch peer", py_argv, errpath);
            break;
        }
        double k_ttok = bench_json_num(po, "tokens_per_s");
        if (!(isfinite(k_ttok) && k_ttok > 0)) {
            fprintf(stderr, "bench_train: the PyTorch peer printed no tokens_per_s: %s\n", po);
            rc = 1;
            break;
        }
        if (k_ttok > ttok) ttok = k_ttok;
        if (k_rss > trss) trss = k_rss;
    }
    char cmd[256];
    unlink(errpath);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) || rc) return 1;
    double peak2 = bench_sgemm_peak(threads);
    if (peak2 > peak) peak = peak2;
    pm_train_cfg cfg = {.model = {256, T, C, H, L}, .batch = B, .micro = 1};
    double flops = pm_train_step_flops(&cfg);
    printf("bench_train shape: layers %d dim %d heads %d ctx %d batch %d, %.1f GFLOP/step, "
           "%d steps, %d threads, OpenBLAS kernels %s\n", L, C, H, T, B, flops / 1e9, steps,
           threads, openblas_get_corename());
    printf("  pipemem : %8.0f tokens/s  %6.1f GFLOP/s  peak RSS %6.0f MiB\n", tok, gf,
           rss / 1024.0);
    printf("  pytorch : %8.0f tokens/s  %6.1f GFLOP/s  peak RSS %6.0f MiB\n", ttok,
           flops * ttok / (B * T) / 1e9, trss / 1024.0);
    printf("  sgemm   : %6.1f GFLOP/s peak (2048^3); pipemem at %.0f%% of it\n", peak,
           100.0 * gf / peak);
    printf("bench_train tokens_per_s=%.0f torch_tokens_per_s=%.0f ratio=%.3f gflops=%.1f "
           "sgemm_peak_gflops=%.1f peak_fraction=%.3f rss_mib=%.0f torch_rss_mib=%.0f\n",
           tok, ttok, tok / ttok, gf, peak, gf / peak, rss / 1024.0, trss / 1024.0);
    return 0;
}
