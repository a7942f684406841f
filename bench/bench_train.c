/* bench_train.c: single-device training speed of pipemem against PyTorch
 * 1.13 on CPU (Debian's python3-torch), measured in the same run, on the
 * issue's shape: layers 6, dim 512, heads 8, ctx 256, batch 8, vocab 256,
 * AdamW, 2 threads each. Also measures OpenBLAS's cblas_sgemm peak in this
 * process (2048^3, 2 threads, best of 5 after a warm-up) so pipemem's
 * GFLOP/s is reported as a fraction of it.
 *
 * Each trainer runs as a child process (build/pipemem train ... --json and
 * /usr/bin/python3 bench/torch_train.py), so its peak RSS comes from
 * wait4()'s rusage. Both report the median step time over the steps; the
 * FLOPs per step are the model's count (pm_train_step_flops) for both.
 * Two rounds alternate pipemem and PyTorch and the best of each is kept; the
 * sgemm peak is the better of a measurement before and after them.
 * pipemem's result is checked (finite loss near ln 256 on random-ish text
 * after few steps) before any number is printed.
 *
 * Usage: bench_train [STEPS]   (default 6; env PM_BIN overrides the binary;
 *        env PM_BENCH_THREADS the thread count, default 2)
 * Output (last line, parseable):
 *   bench_train tokens_per_s=... torch_tokens_per_s=... ratio=... gflops=...
 *   sgemm_peak_gflops=... peak_fraction=... rss_mib=... torch_rss_mib=... */
#define _DEFAULT_SOURCE /* wait4 */
#include <cblas.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipemem/pm_data.h"
#include "pipemem/pm_gpt.h"
#include "cli/reexec.h"
#include "pipemem/pm_train.h"

enum { L = 6, C = 512, H = 8, T = 256, B = 8, ROUNDS = 2 };

static double sgemm_peak(int threads) {
    pm_blas_threads(threads);
    /* pm_blas_threads keeps OpenBLAS single-threaded (the model splits work
     * itself); the peak is OpenBLAS's own multi-threaded sgemm. */
    openblas_set_num_threads(threads);
    const int n = 2048;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4),
          *c = malloc((size_t)n * n * 4);
    if (!a || !b || !c) return 0;
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        double t0 = pm_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        double dt = pm_now() - t0;
        if (r > 0 && dt < best) best = dt; /* r = 0 is the warm-up */
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n / best / 1e9;
}

/* Runs argv as a child with stdout to a pipe and stderr to errpath;
 * returns its output (static) and its peak RSS in KiB, or NULL if it could
 * not run or exited with a failure (its stderr is then in errpath). */
static const char *run_child(char *const argv[], const char *errpath, long *rss_kib) {
    static char out[8192];
    int fd[2];
    if (pipe(fd)) return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        FILE *e = fopen(errpath, "w");
        if (e) dup2(fileno(e), 2);
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fd[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)k;
    out[n] = 0;
    close(fd[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) return NULL;
    *rss_kib = ru.ru_maxrss;
    return out;
}

/* A failed child: its command and the last lines of its stderr, then 1 (a
 * benchmark whose peer fails fails). */
static int child_failed(const char *who, char *const argv[], const char *errpath) {
    fprintf(stderr, "bench_train: %s failed (%s %s); its error output:\n", who, argv[0],
            argv[1]);
    FILE *e = fopen(errpath, "r");
    char lines[8][256];
    int n = 0;
    while (e && fgets(lines[n % 8], sizeof lines[0], e)) n++;
    if (e) fclose(e);
    for (int i = n > 8 ? n - 8 : 0; i < n; i++) fprintf(stderr, "  %s", lines[i % 8]);
    return 1;
}

static double json_num(const char *s, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = s ? strstr(s, k) : NULL;
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

int main(int argc, char **argv) {
    /* Both trainers and the sgemm peak use the same OpenBLAS kernels: the
     * children inherit OPENBLAS_CORETYPE if this sets it (src/cli/reexec.c). */
    pm_cli_blas_reexec(argv);
    int steps = argc > 1 ? atoi(argv[1]) : 6;
    const char *thr = getenv("PM_BENCH_THREADS");
    int threads = thr ? atoi(thr) : 2;
    char bin[4096], self[4096];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(bin, sizeof bin, "%s/../pipemem", dirname(self));
    if (getenv("PM_BIN")) snprintf(bin, sizeof bin, "%s", getenv("PM_BIN"));

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
    if (pm_data_prepare(files, 1, dir, NULL, &err)) {
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
    char script[4096], bdir[4096];
    snprintf(bdir, sizeof bdir, "%s", bin);
    snprintf(script, sizeof script, "%s/../bench/torch_train.py", dirname(dirname(bdir)));
    if (access(script, R_OK)) snprintf(script, sizeof script, "bench/torch_train.py");
    /* PM_BENCH_PYTHON: another interpreter (one without torch shows that a
     * failing peer fails the benchmark). */
    char *python = getenv("PM_BENCH_PYTHON") ? getenv("PM_BENCH_PYTHON") : "/usr/bin/python3";
    char errpath[128];
    snprintf(errpath, sizeof errpath, "%s.stderr", dir);
    char *py_argv[] = {python, script, "--layers", "6", "--dim", "512", "--heads",
                       "8", "--ctx", "256", "--batch", "8", "--steps", s_steps, "--threads",
                       s_thr, NULL};
    /* Rounds alternate the two trainers; the best of each is kept, so a
     * burst of load from elsewhere on the machine hurts neither unfairly. */
    double peak = sgemm_peak(threads), tok = 0, gf = 0, ttok = 0;
    long rss = 0, trss = 0;
    int rc = 0;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        long k_rss = 0;
        const char *o = run_child(pm_argv, errpath, &k_rss);
        if (!o) {
            rc = child_failed("pipemem", pm_argv, errpath);
            break;
        }
        double k_tok = json_num(o, "tokens_per_s"), loss = json_num(o, "final_loss");
        if (!isfinite(k_tok) || !isfinite(loss) || loss > 6.0) {
            fprintf(stderr, "bench_train: pipemem gave a bad loss or speed: %s\n", o);
            rc = 1;
            break;
        }
        if (k_tok > tok) tok = k_tok, gf = json_num(o, "gflops_per_s");
        if (k_rss > rss) rss = k_rss;
        const char *po = run_child(py_argv, errpath, &k_rss);
        if (!po) {
            rc = child_failed("the PyTorch peer", py_argv, errpath);
            break;
        }
        double k_ttok = json_num(po, "tokens_per_s");
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
    double peak2 = sgemm_peak(threads);
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
