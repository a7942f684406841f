/* bench_hosts.c: two hosts over TCP against one host's shared memory, in
 * one run (issue 30). The hosts are scripts/hosts.sh's (network namespaces
 * on this machine joined by a bridge: the same cores, another transport),
 * so every ratio isolates what crossing hosts costs.
 *   (a) train step time at P = 2, one rank a host, TCP against the same
 *       run with both ranks on one host (OpenMPI's shared memory), for
 *       1F1B, ZB-V and V-Half: medians of 3 runs each, taken in turn so the
 *       machine's other load falls on both alike; and the largest peak
 *       resident memory of a rank, TCP against shared memory;
 *   (b) bench_mpi's ping-pong (pm_tp_mpi: copy on send, polled wait) across
 *       the hosts against one host: half round trip and bandwidth, 1 KiB to
 *       64 MiB; the latency (1 KiB) and bandwidth (64 MiB) over TCP;
 *   (c) the schedule's cost model fed with them: `pipemem schedule --costs
 *       F,B,W,C`, F, B, W the run's mean pass times per device share (the
 *       JSON's stage_pass_us) and C = latency + one activation / bandwidth;
 *       its makespan against the step measured across hosts (the JSON's
 *       measured_step_ms, passes only) in the same run, median and range
 *       over the runs, beside the runtime's own replay (per-stage costs and
 *       the latency it measured in the step);
 *   (d) select's makespan for 8 equal tasks (seeds 1..8), one device a host:
 *       `mpirun -np 2 pipemem select` over both hosts against select on one,
 *       in turn, medians of 3 (issue 30's goal: two hosts at most 0.55x);
 *       beside them the share of a core each rank's process got (CPU
 *       seconds over wall seconds) and the share of the machine's cores
 *       other processes took meanwhile: the hosts share this machine's
 *       cores, so two hosts halve a sweep's time only when its two ranks
 *       find a core each.
 * Needs root (namespaces): elsewhere it says so in one line and exits 0.
 * Started plainly it re-runs itself inside `hosts.sh with 2`. */
#include "bench.h" /* first: its feature macro */

#include <libgen.h>
#include <stdarg.h>

#include "pipemem/pm_runtime.h"

#define HOSTS_SH "scripts/hosts.sh"
#define MODEL "--layers 4 --dim 256 --heads 4 --ctx 128 --batch 16 --microbatches 8 --steps 8 " \
              "--eval-every 8 --eval-batches 1 --json"
#define MSG_BYTES (2.0 * 128 * 256 * 4) /* one activation: (batch / micro, ctx, dim) floats */
#define ROOT_OK "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "

static const char *bin, *hosts, *out = ""; /* out: the last command's stdout */
static char dir[128], self[512], errpath[160] = "/dev/null";

/* Runs cmd (printf-style) through bench.h's runner; its stdout in out. 0,
 * or 1 after saying so with the end of its stderr. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[2048];
    long kib;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    const char *o = bench_run_sh(cmd, errpath, &kib);
    out = o ? o : "";
    if (o) return 0;
    char *argv[] = {"/bin/sh", cmd, NULL};
    return bench_child_failed("bench_hosts", "a command", argv, errpath);
}

/* The numbers after "key": in out, flattened ([[1, 2], [3]] gives 1 2 3),
 * at most max; how many. */
static int numbers(const char *key, double *v, int max) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(out, k);
    int n = 0;
    if (!p) return 0;
    p += strlen(k);
    for (int depth = 0; n < max;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == '[') depth++, p++;
        else if (*p == ']') {
            if (--depth <= 0) break;
            p++;
        } else {
            char *e;
            v[n] = strtod(p, &e);
            if (e == p) break;
            n++, p = e;
            if (!depth) break;
        }
    }
    return n;
}

/* One training run at P = 2 (kind), across the hosts or on one; its JSON
 * summary in out. */
static int train(const char *kind, int across) {
    if (across)
        return run(ROOT_OK HOSTS_SH " mpirun %s --quiet -np 2 --npernode 1 %s train --data %s "
                   MODEL " --pp 2 --schedule %s", hosts, bin, dir, kind);
    return run(ROOT_OK "mpirun --oversubscribe --quiet -np 2 %s train --data %s " MODEL " --pp 2 "
               "--schedule %s", bin, dir, kind);
}

#define ROUNDS 3 /* every run of (a) this often, shared memory and TCP in turn */

typedef struct {
    double step[2], span[2]; /* median step, mean makespan (ms): shared memory, TCP */
    double rss[2];           /* the largest peak resident memory of a rank (bytes) */
    double pass[12];         /* stage_pass_us across hosts (S, 3) */
    int S;
    double replay;           /* the runtime's replay across hosts (ms) */
} kind_run;

static const char *kinds[3] = {"1f1b", "zb-v", "v-half"};

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of n values (sorted in place). */
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

/* One run of kind at P = 2, across hosts or not, into r. */
static int one_run(const char *kind, int a, kind_run *r) {
    double rss[2];
    if (train(kind, a) || numbers("median_step_ms", &r->step[a], 1) != 1 ||
        numbers("measured_step_ms", &r->span[a], 1) != 1 || numbers("peak_rss_bytes", rss, 2) != 2)
        return 1;
    r->rss[a] = rss[0] > rss[1] ? rss[0] : rss[1];
    if (!a) return 0;
    r->S = numbers("stage_pass_us", r->pass, 12) / 3;
    return r->S < 2 || numbers("replay_step_ms", &r->replay, 1) != 1;
}

/* ROUNDS rounds, every kind on shared memory and on TCP in each (in turn
 * first), so the machine's other load falls on both alike; medians. */
static int step_times(kind_run kr[3][ROUNDS]) {
    printf("(a) step at P = 2 (one rank a host), TCP across hosts against shared memory on one "
           "(medians of %d runs each, in turn)\n  %-7s %10s %10s %8s %12s %12s %8s %12s\n",
           ROUNDS, "kind", "shm ms", "tcp ms", "tcp/shm", "shm span ms", "tcp span ms", "tcp/shm",
           "rss tcp/shm");
    for (int round = 0; round < ROUNDS; round++)
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 2; i++)
                if (one_run(kinds[k], (i + round) % 2, &kr[k][round])) return 1;
    for (int k = 0; k < 3; k++) {
        double x[6][ROUNDS];
        for (int round = 0; round < ROUNDS; round++)
            for (int a = 0; a < 2; a++)
                x[a][round] = kr[k][round].step[a], x[2 + a][round] = kr[k][round].span[a],
                x[4 + a][round] = kr[k][round].rss[a];
        double m[6];
        for (int j = 0; j < 6; j++) m[j] = median(x[j], ROUNDS);
        printf("  %-7s %10.2f %10.2f %8.3f %12.2f %12.2f %8.3f %12.3f\n", kinds[k], m[0], m[1],
               m[1] / m[0], m[2], m[3], m[3] / m[2], m[5] / m[4]);
    }
    return 0;
}

/* bench_mpi's ping-pong rows under mpirun (across the hosts or on one):
 * bytes and the pm_tp_mpi half round trip (us) of each. */
static int pingpong(int across, double *bytes, double *us, int max) {
    char mpi[600], here[512];
    snprintf(here, sizeof here, "%s", self);
    snprintf(mpi, sizeof mpi, "%s/bench_mpi", dirname(here));
    int rc = across ? run(ROOT_OK HOSTS_SH " mpirun %s --quiet -np 2 --npernode 1 %s", hosts, mpi)
                    : run(ROOT_OK "mpirun --oversubscribe --quiet -np 2 %s", mpi);
    if (rc) return -1;
    int n = 0;
    for (const char *l = out; *l && n < max;) {
        double b, raw, pm;
        if (sscanf(l, " %lf %lf %lf", &b, &raw, &pm) == 3) bytes[n] = b, us[n++] = pm;
        l += strcspn(l, "\n");
        l += *l != 0;
    }
    return n;
}

static int links(double *lat, double *bw) {
    double b[2][16], t[2][16];
    int n[2];
    for (int a = 0; a < 2; a++)
        if ((n[a] = pingpong(a, b[a], t[a], 16)) < 2) return 1;
    if (n[0] != n[1]) return 1;
    printf("(b) ping-pong, half round trip (bench_mpi, pm_tp_mpi), TCP across hosts against "
           "shared memory\n  %10s %10s %10s %8s %12s %12s\n", "bytes", "shm us", "tcp us",
           "tcp/shm", "shm MB/s", "tcp MB/s");
    for (int i = 0; i < n[0]; i++)
        printf("  %10.0f %10.2f %10.2f %8.3f %12.0f %12.0f\n", b[0][i], t[0][i], t[1][i],
               t[1][i] / t[0][i], b[0][i] / t[0][i], b[1][i] / t[1][i]);
    *lat = t[1][0], *bw = b[1][n[1] - 1] / t[1][n[1] - 1]; /* us, bytes per us */
    printf("  over TCP: latency %.1f us (%.0f bytes), bandwidth %.0f MB/s (%.0f bytes)\n", *lat,
           b[1][0], *bw, b[1][n[1] - 1]);
    return 0;
}

/* The device shares of stage costs: V schedules at P = 2 put stages 0 and
 * 3 on device 0, 1 and 2 on device 1; single ones stage d on device d. */
static void shares(const kind_run *r, double fbw[3]) {
    for (int k = 0; k < 3; k++) {
        double sum = 0;
        for (int s = 0; s < r->S; s++) sum += r->pass[3 * s + k];
        fbw[k] = sum / 2; /* the mean over the 2 devices */
    }
}

/* (c) per kind: each TCP run's model makespan against its own measured
 * step; the median over the rounds, and the range. */
static int replays(kind_run kr[3][ROUNDS], double lat, double bw) {
    double c = lat + MSG_BYTES / bw;
    printf("(c) the cost model (schedule --costs F,B,W,C) against the step measured across "
           "hosts, each run's own F, B, W\n  C = %.1f us latency + %.0f bytes / %.0f MB/s = "
           "%.1f us\n  %-7s %26s %10s %11s %13s %18s %10s\n", lat, MSG_BYTES, bw, c, "kind",
           "F,B,W (us, device share)", "model ms", "measured ms", "model/meas.", "(runs' range)",
           "replay/ms");
    for (int k = 0; k < 3; k++) {
        double ratio[ROUNDS], fbw[3] = {0, 0, 0}, model = 0, meas = 0, rep[ROUNDS];
        for (int round = 0; round < ROUNDS; round++) {
            const kind_run *r = &kr[k][round];
            double f[3], mk;
            shares(r, f);
            if (run("%s schedule --kind %s -p 2 -m 8 --costs %.3f,%.3f,%.3f,%.3f --format json",
                    bin, kinds[k], f[0], f[1], f[2], c) ||
                numbers("makespan", &mk, 1) != 1)
                return 1;
            ratio[round] = mk / 1e3 / r->span[1], rep[round] = r->replay / r->span[1];
            for (int j = 0; j < 3; j++) fbw[j] += f[j] / ROUNDS;
            model += mk / 1e3 / ROUNDS, meas += r->span[1] / ROUNDS;
        }
        double lo = ratio[0], hi = ratio[0];
        for (int round = 1; round < ROUNDS; round++)
            lo = ratio[round] < lo ? ratio[round] : lo, hi = ratio[round] > hi ? ratio[round] : hi;
        printf("  %-7s %8.0f,%8.0f,%8.0f %10.2f %11.2f %13.3f %8.3f .. %6.3f %10.3f\n", kinds[k],
               fbw[0], fbw[1], fbw[2], model, meas, median(ratio, ROUNDS), lo, hi,
               median(rep, ROUNDS));
    }
    return 0;
}

/* (d): the sweep on one host (select alone) or over both (a rank a host),
 * one device each: v[0] its makespan (the run's, from the JSON), v[1] the
 * whole command's wall time (process starts, the trainers' set-up), v[2]
 * the share of a core a rank got: one host, the command's CPU seconds over
 * its wall time; two, each rank's over the run's (the JSON's ranks: the
 * ranks on node2 are no descendants this process waits for), the mean;
 * v[3] the share of the machine's cores the others took meanwhile. */
#define SWEEP8 "--layers 2 --dim 128 --heads 4 --ctx 64 --batch 8 --steps 16 " \
               "--seed 1,2,3,4,5,6,7,8 --devices 1 --device-mem 64M --eval-batches 1 --json"
static int sweep(int across, double v[4]) {
    double m0 = bench_machine_busy(), c0 = bench_cpu_s(RUSAGE_CHILDREN), t0 = pm_now();
    int rc = across ? run(ROOT_OK HOSTS_SH " mpirun %s --quiet -np 2 --npernode 1 %s select "
                          "--data %s " SWEEP8 " 2>/dev/null", hosts, bin, dir)
                    : run("%s select --data %s " SWEEP8 " 2>/dev/null", bin, dir);
    double m1 = bench_machine_busy(), cpu = bench_cpu_s(RUSAGE_CHILDREN) - c0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    v[1] = pm_now() - t0, v[2] = cpu / v[1];
    if (rc || numbers("makespan_s", &v[0], 1) != 1) return 1;
    if (across) { /* "cpu_s": each rank's, in the JSON's ranks */
        int k = 0;
        cpu = 0;
        for (const char *p = strstr(out, "\"cpu_s\": "); p; p = strstr(p + 1, "\"cpu_s\": "))
            cpu += strtod(p + 9, NULL), k++;
        if (k != 2) return 1;
        v[2] = cpu / 2 / v[0];
    }
    v[3] = m0 < 0 || cores < 1 ? NAN : fmax(0, m1 - m0 - v[2] * v[1]) / ((double)cores * v[1]);
    return 0;
}

static int select_hosts(void) {
    double x[2][4][ROUNDS], m[2][4], v[4];
    printf("(d) select: 8 equal tasks (seeds 1..8), one device a host, one host against two "
           "(medians of %d runs each, in turn)\n  %-6s %11s %10s %12s %7s\n", ROUNDS, "hosts",
           "makespan s", "command s", "core a rank", "others");
    for (int round = 0; round < ROUNDS; round++)
        for (int i = 0; i < 2; i++) {
            int a = (i + round) % 2;
            if (sweep(a, v)) return 1;
            for (int j = 0; j < 4; j++) x[a][j][round] = v[j];
        }
    for (int a = 0; a < 2; a++) {
        for (int j = 0; j < 4; j++) m[a][j] = median(x[a][j], ROUNDS);
        printf("  %-6d %11.3f %10.3f %11.0f%% %6.0f%%\n", a + 1, m[a][0], m[a][1],
               100 * m[a][2], 100 * m[a][3]);
    }
    printf("  two hosts / one: makespan %.3fx (goal <= 0.55: %s), command %.3fx\n",
           m[1][0] / m[0][0], m[1][0] / m[0][0] <= 0.55 ? "met" : "not met", m[1][1] / m[0][1]);
    return 0;
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    bin = getenv("PM_BIN") ? getenv("PM_BIN") : "build/pipemem";
    hosts = getenv("PM_HOSTS");
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || !pm_mpi_built()) {
        printf("bench_hosts: skipped: built without MPI\n");
        return 0;
    }
    self[n] = 0;
    if (!hosts) {
        if (run(HOSTS_SH " can || true")) return 1; /* says why not, or nothing */
        if (*out) {
            printf("bench_hosts: skipped: %s", out);
            return 0;
        }
        execl(HOSTS_SH, HOSTS_SH, "with", "2", self, (char *)NULL);
        return 1;
    }
    snprintf(dir, sizeof dir, "%.100s/data", hosts);
    snprintf(errpath, sizeof errpath, "%.100s/stderr", hosts);
    if (run("%s prepare /usr/share/games/fortunes/fortunes -o %s", bin, dir))
        return 1;
    static kind_run kr[3][ROUNDS];
    double lat, bw;
    if (step_times(kr) || links(&lat, &bw) || replays(kr, lat, bw) || select_hosts()) return 1;
    return 0;
}
