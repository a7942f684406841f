/* bench.h: what the benchmarks that run trainers as child processes share:
 * OpenBLAS's sgemm peak measured in this process, a child run with its
 * output and peak resident memory, a number from a JSON line, an llm.c
 * token file of pseudo-random ids, and the pipemem binary of another
 * revision of this tree (built in the same run). Header-only: every
 * benchmark is one program. */
#ifndef PM_BENCH_H
#define PM_BENCH_H

#define _DEFAULT_SOURCE /* wait4 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
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
#include "pipemem/pm_util.h"

/* OpenBLAS's own multi-threaded sgemm on 2048^3, best of 5 after a
 * warm-up, in GFLOP/s: the machine's peak as the benchmarks count it. */
static inline double bench_sgemm_peak(int threads) {
    pm_blas_threads(threads);
    /* pm_blas_threads keeps OpenBLAS single-threaded (the model splits work
     * itself); the peak is OpenBLAS's own multi-threaded sgemm. */
    openblas_set_num_threads(threads);
    const int n = 2048;
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4),
          *c = malloc((size_t)n * n * 4);
    double best = 1e30;
    for (size_t i = 0; a && b && i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.01f;
    for (int r = 0; a && b && c && r < 6; r++) {
        double t0 = pm_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        double dt = pm_now() - t0;
        if (r > 0 && dt < best) best = dt; /* r = 0 is the warm-up */
    }
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(1);
    return best < 1e30 ? 2.0 * n * n * (double)n / best / 1e9 : 0;
}

/* Runs argv as a child with stdout to a pipe and stderr to errpath;
 * returns its output (static; what passes 64 KiB is read and dropped) and
 * wait4's ru_maxrss in KiB (the largest of its processes, its reaped
 * descendants included), or NULL if it could not run or exited with a
 * failure (its stderr is then in errpath). */
static inline const char *bench_run_child(char *const argv[], const char *errpath, long *rss_kib) {
    static char out[65536];
    char sink[4096];
    int fd[2];
    if (pipe(fd)) return NULL;
    pid_t pid = fork();
    if (pid < 0) return NULL;
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
    while ((k = read(fd[0], n < sizeof out - 1 ? out + n : sink,
                     n < sizeof out - 1 ? sizeof out - 1 - n : sizeof sink)) > 0)
        n += n < sizeof out - 1 ? (size_t)k : 0;
    out[n] = 0;
    close(fd[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
        return NULL;
    *rss_kib = ru.ru_maxrss;
    return out;
}

/* The same for a shell command line (pipes, environment, mpirun). */
static inline const char *bench_run_sh(const char *cmd, const char *errpath, long *rss_kib) {
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    return bench_run_child(argv, errpath, rss_kib);
}

/* A failed child: its command and the last lines of its stderr, then 1 (a
 * benchmark whose peer fails fails). */
static inline int bench_child_failed(const char *bench, const char *who, char *const argv[],
                                     const char *errpath) {
    fprintf(stderr, "%s: %s failed (%s %s); its error output:\n", bench, who, argv[0], argv[1]);
    FILE *e = fopen(errpath, "r");
    char lines[8][256];
    int n = 0;
    while (e && fgets(lines[n % 8], sizeof lines[0], e)) n++;
    if (e) fclose(e);
    for (int i = n > 8 ? n - 8 : 0; i < n; i++) fprintf(stderr, "  %s", lines[i % 8]);
    return 1;
}

/* The machine's busy CPU seconds so far (/proc/stat: all but idle and
 * iowait; -1 unknown): less a run's own (bench_cpu_s) over the run, what
 * other processes took from the cores meanwhile. */
static inline double bench_machine_busy(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    int got = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                         &v[3], &v[4], &v[5], &v[6], &v[7]) : 0;
    if (f) fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    if (got != 8 || hz <= 0) return -1;
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

/* CPU seconds (user and system) of this process (RUSAGE_SELF) or of its
 * children waited for, theirs included (RUSAGE_CHILDREN). */
static inline double bench_cpu_s(int who) {
    struct rusage u;
    getrusage(who, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* The number after "key": in s (the first one), or NAN. */
static inline double bench_json_num(const char *s, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = s ? strstr(s, k) : NULL;
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* Writes an llm.c token file: 256 int32 of header (magic, version 1, the
 * token count), then n uint16 ids below PM_LLMC_VOCAB, pseudo-random from
 * *rng (xorshift64). 0, or 1 after saying why. */
static inline int bench_write_llmc(const char *path, size_t n, uint64_t *rng) {
    uint8_t head[PM_LLMC_HEADER] = {0};
    pm_put_u32(head, PM_LLMC_MAGIC);
    pm_put_u32(head + 4, 1);
    pm_put_u32(head + 8, (uint32_t)n);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(head, 1, sizeof head, f) == sizeof head;
    for (size_t i = 0; ok && i < n; i++) {
        uint64_t x = *rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *rng = x;
        uint32_t id = (uint32_t)((x >> 32) % PM_LLMC_VOCAB);
        uint8_t b[2] = {(uint8_t)id, (uint8_t)(id >> 8)};
        ok = fwrite(b, 1, 2, f) == 2;
    }
    if (f && fclose(f)) ok = 0;
    if (!ok) fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
    return !ok;
}

/* The pipemem binary of revision rev of the tree at repo, built into
 * out_dir (from `git archive`, with the same make) unless it is there
 * already; its path into bin. 0, or 1 after saying why (the benchmark then
 * fails: its peer is missing). */
static inline int bench_base_binary(const char *repo, const char *rev, const char *out_dir,
                                    char *bin, size_t cap) {
    snprintf(bin, cap, "%s/build/pipemem", out_dir);
    if (!access(bin, X_OK)) return 0;
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && git -C '%s' archive '%s' | tar -x -C '%s' && "
             "make -C '%s' -j\"$(nproc)\" build/pipemem > '%s.log' 2>&1",
             out_dir, out_dir, repo, rev, out_dir, out_dir, out_dir);
    fprintf(stderr, "bench: building revision %s of %s into %s (log: %s.log)\n", rev, repo,
            out_dir, out_dir);
    if (system(cmd) || access(bin, X_OK)) {
        fprintf(stderr, "bench: cannot build revision %s of %s (see %s.log): the benchmark "
                "needs it as its peer\n", rev, repo, out_dir);
        return 1;
    }
    return 0;
}

#endif
