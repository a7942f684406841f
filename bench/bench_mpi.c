/* bench_mpi.c: the MPI transport and data parallelism (issue 11 benchmarks),
 * every figure a ratio against a peer measured in the same run.
 *   (a) step time of P = 2 under MPI (mpirun -np 2) against threads, same
 *       model and schedule;
 *   (b) the transport's ping-pong (pm_tp_mpi: copy on send, polled wait)
 *       against a raw MPI_Send/MPI_Recv ping-pong in the same program and
 *       the same mpirun, message sizes 1 KiB .. 64 MiB: half round trip and
 *       bandwidth;
 *   (c) tokens per second of DP = 2 x PP = 1 and of PP = 2 x DP = 1 (both on
 *       2 device threads) against one device with 2 BLAS threads;
 *   (d) the forecast of a DP = 2 x PP = 2 step (made before it ran) against
 *       its measurement.
 * The training runs go through the CLI (PM_BIN, default build/pipemem) on a
 * corpus prepared here; (b) re-runs this program under mpirun. A failing
 * run fails the benchmark. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipemem/pm_runtime.h"
#include "runtime/transport.h"

#ifdef PM_HAVE_MPI
#include <mpi.h>
#endif

static const char *bin;
static char dir[128];

#define MODEL "--layers 4 --dim 256 --heads 4 --ctx 128 --batch 16 --microbatches 8 " \
              "--steps 12 --eval-every 12 --eval-batches 1 --json"
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe " \
               "--quiet -np"

static char out[8192];

/* Runs a training command (fmt with bin, data, args); its JSON line is in
 * `out`. 0, or 1 after printing the command's output. */
static int run(const char *fmt, const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, bin, dir, args);
    FILE *f = popen(cmd, "r");
    if (!f) return 1;
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    if (!pclose(f) && strstr(out, "\"final_loss\"")) return 0;
    fprintf(stderr, "bench_mpi: failed: %s\n%s\n", cmd, out);
    return 1;
}

/* A number of the last JSON line (NAN if missing or null). */
static double field(const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\": ", name);
    const char *p = strstr(out, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static double train(const char *name, const char *fmt, const char *args) {
    return run(fmt, args) ? NAN : field(name);
}

#define THREADS "%s train --data %s " MODEL " %s 2>/dev/null"
#define UNDER_MPI(np) MPIRUN " " #np " %s train --data %s " MODEL " %s 2>/dev/null"

static int step_times(void) {
    printf("(a) step time (median ms), P = 2, MPI against threads\n");
    const char *kinds[] = {"1f1b", "zb-h1", "v-half"};
    for (int k = 0; k < 3; k++) {
        char a[64];
        snprintf(a, sizeof a, "--pp 2 --schedule %s", kinds[k]);
        double t = train("median_step_ms", THREADS, a), m = train("median_step_ms", UNDER_MPI(2), a);
        if (!isfinite(t) || !isfinite(m)) return 1;
        printf("  %-7s threads %8.2f   mpi %8.2f   mpi/threads %.3f\n", kinds[k], t, m, m / t);
    }
    return 0;
}

static int throughput(void) {
    printf("(c) tokens/s against one device with 2 BLAS threads\n");
    double one = train("tokens_per_s", THREADS, "--threads 2");
    double dp = train("tokens_per_s", THREADS, "--pp 1 --dp 2");
    double pp = train("tokens_per_s", THREADS, "--pp 2 --schedule zb-h1");
    double dpm = train("tokens_per_s", UNDER_MPI(2), "--pp 1 --dp 2");
    if (!isfinite(one) || !isfinite(dp) || !isfinite(pp) || !isfinite(dpm)) return 1;
    printf("  one device   %9.0f\n  DP2 x PP1    %9.0f   x%.3f (threads)\n"
           "  DP2 x PP1    %9.0f   x%.3f (mpi)\n  PP2 x DP1    %9.0f   x%.3f (zb-h1, threads)\n",
           one, dp, dp / one, dpm, dpm / one, pp, pp / one);
    printf("(d) forecast against measurement, DP2 x PP2 (zb-h1, 4 device threads)\n");
    if (run(THREADS, "--pp 2 --dp 2 --schedule zb-h1")) return 1;
    double fm = field("forecast_step_ms"), ms = field("measured_step_ms");
    double fe = field("forecast_error");
    if (!isfinite(fm) || !isfinite(ms) || !isfinite(fe)) return 1;
    printf("  forecast %.2f ms, measured %.2f ms (means over the steps); mean |error| %.1f%%\n",
           fm, ms, 100 * fe);
    return 0;
}

/* ---- (b), under mpirun ------------------------------------------------------ */

#ifdef PM_HAVE_MPI
static double raw_pingpong(int rank, unsigned char *buf, size_t n, int iters) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t0) / iters / 2;
}

static double tp_pingpong(pm_tp *tp, unsigned char *buf, size_t n, int iters, int *bad) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    pm_tp_req r;
    for (int i = 0; i < iters && !*bad; i++) {
        int peer = 1 - tp->dev;
        for (int k = 0; k < 2; k++) {
            int send = (k == 0) == (tp->dev == 0);
            *bad |= send ? pm_tp_isend(tp, peer, 2, buf, n, &r) || pm_tp_wait(tp, &r)
                         : pm_tp_irecv(tp, peer, 2, buf, n, &r) || pm_tp_wait(tp, &r);
        }
    }
    return (MPI_Wtime() - t0) / iters / 2;
}

static int pingpong_main(void) {
    int rank, size, bad = 0;
    pm_err err;
    if (pm_mpi_init(&rank, &size, &err) || size != 2) return 1;
    size_t maxn = (size_t)64 << 20;
    unsigned char *buf = calloc(1, maxn);
    pm_tp_mpi *w;
    if (!buf || pm_tp_mpi_create(&w, 2, maxn, 8, 60, &err)) return 1;
    if (!rank)
        printf("(b) ping-pong, half round trip: pm_tp_mpi against raw MPI_Send/MPI_Recv\n"
               "  %9s %12s %12s %8s %12s %12s\n", "bytes", "raw us", "pm us", "pm/raw",
               "raw MB/s", "pm MB/s");
    for (size_t n = 1024; n <= maxn && !bad; n *= 4) {
        int iters = n <= 65536 ? 2000 : n <= (1 << 22) ? 100 : 10;
        raw_pingpong(rank, buf, n, iters / 10 + 1); /* warm both paths */
        tp_pingpong(pm_tp_mpi_endpoint(w), buf, n, iters / 10 + 1, &bad);
        double raw = raw_pingpong(rank, buf, n, iters);
        double pm = tp_pingpong(pm_tp_mpi_endpoint(w), buf, n, iters, &bad);
        if (!rank)
            printf("  %9zu %12.2f %12.2f %8.3f %12.0f %12.0f\n", n, raw * 1e6, pm * 1e6,
                   pm / raw, n / raw / 1e6, n / pm / 1e6);
    }
    pm_tp_mpi_destroy(w);
    free(buf);
    pm_mpi_finalize();
    return bad;
}
#endif

int main(int argc, char **argv) {
#ifdef PM_HAVE_MPI
    if (pm_mpi_launched()) return pingpong_main();
#endif
    (void)argc, (void)argv;
    if (!pm_mpi_built()) {
        fprintf(stderr, "bench_mpi: built without MPI (libopenmpi-dev missing or NO_MPI=1)\n");
        return 1;
    }
    bin = getenv("PM_BIN") ? getenv("PM_BIN") : "build/pipemem";
    snprintf(dir, sizeof dir, "/tmp/pm_bench_mpi_%d", (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s prepare /usr/share/games/fortunes/fortunes -o %s >/dev/null "
             "2>&1", bin, dir);
    if (system(cmd)) {
        fprintf(stderr, "bench_mpi: could not prepare a corpus (%s)\n", cmd);
        return 1;
    }
    int rc = step_times() || throughput();
    fflush(stdout);
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (!rc && n > 0) {
        self[n] = 0;
        snprintf(cmd, sizeof cmd, MPIRUN " 2 %s", self);
        rc = system(cmd) != 0;
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = 1;
    return rc;
}
