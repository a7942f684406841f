/* bench_mem.c: memory per process and throughput of the divided pipeline
 * (issue 18), every figure a ratio against one device measured in the same
 * run. For each of two shapes, (a) 12 x 768, 12 heads, ctx 128, batch 8 in
 * 8 microbatches, vocabulary 256 (the data's bytes) and (b) GPT-2 small's,
 * ctx 1024, vocabulary 50257 (--pad-vocab), batch 4 in 4 microbatches, it
 * trains 3 steps of:
 *   one       one device, 2 BLAS threads (the peer);
 *   pp2       --pp 2 on threads (1f1b), and pp2-zbv the same with zb-v (a
 *             zero-bubble schedule: 1f1b's bubble at m = 4 is 20%);
 *   pp4       --pp 4 on threads;
 *   mpi4      mpirun -np 4 --pp 4 --transport mpi;
 *   mpi4-mem  the same with --placement memory (the least memory on the
 *             fullest device first): its worst rank against mpi4's;
 *   dp2pp2    mpirun -np 4 --pp 2 --dp 2, with --zero 0 and --zero 1.
 * Checked before any figure is printed: every run succeeds; a pipeline
 * without DP prints the one device's final and validation losses exactly
 * (the CLI prints 6 decimals: the tests check the bits); DP, which only
 * reorders the gradient sum, the same losses to 4 decimals. Then one line
 * per run: peak resident memory (VmHWM) of each process and its ratio to
 * one device's, tokens/s (median step) over one device's (with the step,
 * and for a pipeline its busiest device's time in passes and its measured
 * and predicted bubble: where a shortfall goes), the planned bytes
 * over the peak (how much of the process the plan accounts for), for ZeRO
 * each rank's cut against --zero 0; a line per process with the plan by
 * kind; the goals, met or not (reported, not enforced). First, the
 * same plan lines for one device and mpi4 on a model of a few KiB (the
 * floor: code and libraries, and OpenMPI's own under MPI).
 * One device's peak comes from wait4's ru_maxrss (train without --pp prints
 * no VmHWM); the thread runs print both, so the two can be compared. Its
 * plan is pm_train_mem_bytes. The load average is printed at start and end:
 * the machine is shared, so one, pp2 and pp2-zbv run a second round after
 * the others and keep their faster one (both printed). A failing run or peer
 * fails the benchmark.
 *
 *   bench_mem [SHAPE [RUN...]]   only shape a or b, and only the runs named
 *                                (one, the peer, always runs; no floor) */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipemem/pm_runtime.h"
#include "pipemem/pm_train.h"

#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe " \
               "--quiet -np 4 "
#define MAXP 4  /* processes or devices of a run */
#define NKIND 6 /* planned_bytes kinds, in the CLI's order */
static const char *const kinds[NKIND] = {"parameters", "gradients", "moments",
                                         "activations", "workspace", "transport"};

typedef struct {
    const char *name;
    const char *args; /* after the shape's options */
    int mpi;          /* 4 ranks under mpirun */
    int dp;           /* replicas (losses compared to 4 decimals when > 1) */
} run_kind;

static const run_kind runs[] = {
    {"one", "--threads 2", 0, 1},
    {"pp2", "--pp 2", 0, 1},
    {"pp2-zbv", "--pp 2 --schedule zb-v", 0, 1},
    {"pp4", "--pp 4", 0, 1},
    {"mpi4", "--pp 4 --transport mpi", 1, 1},
    {"mpi4-mem", "--pp 4 --transport mpi --placement memory", 1, 1},
    {"dp2pp2", "--pp 2 --dp 2 --zero 0 --transport mpi", 1, 2},
    {"dp2pp2-z1", "--pp 2 --dp 2 --zero 1 --transport mpi", 1, 2},
};
#define NRUN ((int)(sizeof runs / sizeof runs[0]))
enum { ONE, PP2, PP2ZBV, PP4, MPI4, MPI4M, DP2, DP2Z };
static int want[NRUN]; /* the runs to make (all unless named on the command line) */

typedef struct {
    const char *name;
    int layers, dim, heads, ctx, batch, micro;
    int vocab; /* 256: the data's bytes; else --pad-vocab */
} shape;

static const shape shapes[] = {
    {"a", 12, 768, 12, 128, 8, 8, 256},
    {"b", 12, 768, 12, 1024, 4, 4, 50257},
};
/* A model of a few KiB: its peaks are the code, the libraries and, under
 * MPI, OpenMPI's own (what no plan counts). */
static const shape floor_shape = {"floor", 2, 8, 1, 8, 4, 4, 256};

typedef struct {
    char loss[32], val[32]; /* final and validation loss as printed */
    double tok;             /* tokens/s: the best round's */
    double round_tok[2];    /* each round's tokens/s (round 2: one, pp2, pp2-zbv only) */
    double step_ms;         /* the median step (the best round's, like all below) */
    double busy_ms;         /* the busiest device's time in passes, a step's mean (pipelines) */
    double bubble[2];       /* measured and predicted bubble (pipelines) */
    double secs;            /* wall time of the whole command */
    double wait_rss;        /* wait4's ru_maxrss: the largest process, bytes */
    int np;                 /* processes with a peak (1 on threads, 4 ranks) */
    double rss[MAXP];       /* each process's VmHWM, bytes */
    int nd;                 /* devices with a plan (0: the one device) */
    double plan[MAXP][NKIND + 1]; /* each device's planned bytes by kind, total */
} result;

static const char *bin;
static char dir[128];
static char out[16384];

/* Runs cmd under /bin/sh, its stdout into `out`, its stderr into errpath;
 * *maxrss gets wait4's ru_maxrss in bytes (the largest of the command's
 * processes, its reaped descendants included). 0, or 1 if it failed. */
static int run_cmd(const char *cmd, const char *errpath, double *maxrss) {
    long kib;
    const char *o = bench_run_sh(cmd, errpath, &kib);
    if (!o) return 1;
    size_t n = strnlen(o, sizeof out - 1); /* a JSON line: the first 16 KiB suffice */
    memcpy(out, o, n);
    out[n] = 0;
    *maxrss = (double)kib * 1024;
    return 0;
}

/* The text of a JSON field of `out` up to the next ',' or '}' (empty if
 * missing). */
static void text_field(const char *name, char *buf, size_t cap) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\": ", name);
    const char *p = strstr(out, key);
    size_t n = p ? strcspn(p += strlen(key), ",}") : 0;
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p ? p : "");
}

/* A numeric array field of `out` into v[0..max); how many it held. */
static int array_field(const char *name, double *v, int max) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\": [", name);
    const char *p = strstr(out, key);
    if (!p) return 0;
    p += strlen(key);
    int n = 0;
    for (char *e; n < max && *p != ']'; p = e + strspn(e, ", ")) {
        v[n++] = strtod(p, &e);
        if (e == p) return 0;
    }
    return *p == ']' ? n : 0;
}

/* planned_bytes of `out`: each device's bytes by kind and its total. */
static int plan_field(result *r) {
    const char *p = strstr(out, "\"planned_bytes\": [");
    const char *end = p ? strstr(p, "]") : NULL;
    r->nd = 0;
    for (p = p ? strchr(p, '{') : NULL; p && p < end && r->nd < MAXP; p = strchr(p + 1, '{')) {
        for (int k = 0; k <= NKIND; k++) {
            char key[64];
            snprintf(key, sizeof key, "\"%s\": ", k < NKIND ? kinds[k] : "total");
            const char *q = strstr(p, key);
            if (!q || q > end) return 1;
            r->plan[r->nd][k] = strtod(q + strlen(key), NULL);
        }
        r->nd++;
    }
    return r->nd == 0;
}

/* One device's plan: pm_train_mem_bytes (parameters, gradients, the two
 * moments; its workspace holds one microbatch's activations and the
 * step's tokens, so it is counted as workspace). */
static int one_plan(const shape *sh, result *r) {
    pm_train_cfg c = {.model = {.vocab = sh->vocab, .ctx = sh->ctx, .dim = sh->dim,
                                .heads = sh->heads, .layers = sh->layers},
                      .batch = sh->batch, .micro = sh->micro, .seed = 1};
    pm_optim_defaults(&c.opt, 3);
    double n = (double)pm_gpt_num_params(&c.model), total = (double)pm_train_mem_bytes(&c, NULL);
    double part[NKIND + 1] = {4 * n, 4 * n, 8 * n, 0, total - 16 * n, 0, total};
    if (!(total > 16 * n)) return 1;
    memcpy(r->plan[0], part, sizeof part);
    r->nd = 1;
    return 0;
}

/* The step's timings of `out` (run k) into r. */
static void timings(result *r, int k) {
    char x[32];
    double busy[MAXP];
    text_field("median_step_ms", x, sizeof x);
    r->step_ms = atof(x);
    int n = k == ONE ? 0 : array_field("device_busy_ms", busy, MAXP);
    for (int d = 0; d < n; d++) r->busy_ms = fmax(r->busy_ms, busy[d]);
    text_field("measured_bubble", x, sizeof x);
    r->bubble[0] = k == ONE ? 0 : atof(x);
    text_field("predicted_bubble", x, sizeof x);
    r->bubble[1] = k == ONE ? 0 : atof(x);
}

/* Trains shape sh under run k; fills r. 0, or 1 after printing the command
 * and the end of its stderr. */
static int train(const shape *sh, int k, result *r) {
    char cmd[1024], err[192], pad[32] = "";
    snprintf(err, sizeof err, "%s/err", dir);
    if (sh->vocab != 256) snprintf(pad, sizeof pad, " --pad-vocab %d", sh->vocab);
    snprintf(cmd, sizeof cmd, "exec %s%s train --data %s --layers %d --dim %d --heads %d --ctx %d "
             "--batch %d --microbatches %d%s --steps 3 --eval-batches 1 --json %s",
             runs[k].mpi ? "env " MPIRUN : "", bin, dir, sh->layers, sh->dim, sh->heads, sh->ctx,
             sh->batch, sh->micro, pad, runs[k].args);
    *r = (result){0};
    double t0 = pm_now();
    int bad = run_cmd(cmd, err, &r->wait_rss);
    r->secs = pm_now() - t0;
    text_field("final_loss", r->loss, sizeof r->loss);
    text_field("val_loss", r->val, sizeof r->val);
    char tok[32];
    text_field("tokens_per_s", tok, sizeof tok);
    r->tok = r->round_tok[0] = atof(tok);
    timings(r, k);
    r->np = k == ONE ? 1 : array_field("peak_rss_bytes", r->rss, MAXP);
    if (k == ONE) r->rss[0] = r->wait_rss;
    bad = bad || !r->loss[0] || !strcmp(r->loss, "null") || !(r->tok > 0) ||
          r->np != (runs[k].mpi ? 4 : 1) || (k == ONE ? one_plan(sh, r) : plan_field(r)) ||
          (runs[k].mpi && r->nd != 4);
    if (!bad) return 0;
    fprintf(stderr, "bench_mem: failed: %s\n%s\n", cmd, out);
    snprintf(cmd, sizeof cmd, "tail -n 20 %s >&2", err);
    if (system(cmd)) fprintf(stderr, "bench_mem: no stderr in %s\n", err);
    return 1;
}

/* The losses every run must share with one device's: exactly as printed
 * without DP, to 4 decimals with it. 0, or 1 after naming the run. */
static int check(const shape *sh, const result *res) {
    for (int k = 1; k < NRUN; k++) {
        if (!want[k]) continue;
        const result *a = &res[ONE], *b = &res[k];
        int ok = !strcmp(a->loss, b->loss) && !strcmp(a->val, b->val);
        if (runs[k].dp > 1) {
            char x[4][32];
            snprintf(x[0], 32, "%.4f", atof(a->loss));
            snprintf(x[1], 32, "%.4f", atof(b->loss));
            snprintf(x[2], 32, "%.4f", atof(a->val));
            snprintf(x[3], 32, "%.4f", atof(b->val));
            ok = !strcmp(x[0], x[1]) && !strcmp(x[2], x[3]);
        }
        printf("check shape=%s run=%s final_loss=%s val_loss=%s one=%s,%s %s\n", sh->name,
               runs[k].name, b->loss, b->val, a->loss, a->val,
               ok ? (runs[k].dp > 1 ? "equal_4_decimals" : "equal") : "DIFFERENT");
        if (!ok) return 1;
    }
    return 0;
}

/* Process g's planned bytes of kind j (j = NKIND: total): its device's
 * under MPI, the sum of the process's devices on threads. */
static double proc_plan(const result *r, int g, int j) {
    if (r->np > 1) return r->plan[g][j];
    double s = 0;
    for (int d = 0; d < r->nd; d++) s += r->plan[d][j];
    return s;
}

static void print_list(const char *key, const double *v, int n, const char *fmt) {
    printf(" %s=", key);
    for (int g = 0; g < n; g++) {
        printf(g ? "," : "");
        printf(fmt, v[g]);
    }
}

#define MIB(x) ((x) / 1048576.0)

static void print_run(const shape *sh, const result *res, int k) {
    const result *r = &res[k];
    double mx = 0, vs[MAXP], pl[MAXP], cut[MAXP];
    for (int g = 0; g < r->np; g++) {
        mx = fmax(mx, r->rss[g]);
        vs[g] = r->rss[g] / res[ONE].rss[0];
        pl[g] = proc_plan(r, g, NKIND) / r->rss[g];
        cut[g] = want[DP2] ? 1 - r->rss[g] / res[DP2].rss[g] : 0;
    }
    printf("mem shape=%s run=%s procs=%d peak_rss_mib=%.1f rss_vs_one=%.3f", sh->name,
           runs[k].name, r->np, MIB(mx), mx / res[ONE].rss[0]);
    print_list("each_vs_one", vs, r->np, "%.3f");
    printf(" tokens_per_s=%.1f tokens_vs_one=%.3f", r->tok, r->tok / res[ONE].tok);
    print_list("rounds", r->round_tok, k <= PP2ZBV && (want[PP2] || want[PP2ZBV]) ? 2 : 1, "%.1f");
    printf(" step_ms=%.0f", r->step_ms);
    if (k != ONE)
        printf(" busiest_device_ms=%.0f bubble=%.3f predicted_bubble=%.3f", r->busy_ms,
               r->bubble[0], r->bubble[1]);
    print_list("plan_vs_rss", pl, r->np, "%.3f");
    if (k == DP2Z) print_list("zero_cut", cut, r->np, "%.3f");
    printf(" wait4_rss_mib=%.1f secs=%.0f\n", MIB(r->wait_rss), r->secs);
}

/* Where each process's peak goes: the plan by kind, and what it leaves. */
static void print_plan(const shape *sh, const result *r, int k) {
    for (int g = 0; g < r->np; g++) {
        printf("plan shape=%s run=%s proc=%d", sh->name, runs[k].name, g);
        for (int j = 0; j < NKIND; j++) printf(" %s_mib=%.1f", kinds[j], MIB(proc_plan(r, g, j)));
        double t = proc_plan(r, g, NKIND);
        printf(" planned_mib=%.1f peak_rss_mib=%.1f unplanned_mib=%.1f\n", MIB(t),
               MIB(r->rss[g]), MIB(r->rss[g] - t));
    }
}

static const char *met(int ok) { return ok ? "met" : "NOT_MET"; }

/* The goals, reported (a load-bound figure is no reason to fail),
 * each when its runs ran. */
static void print_goals(const shape *sh, const result *res) {
    double worst = 0, least = 1;
    for (int g = 0; g < 4; g++) {
        if (want[MPI4]) worst = fmax(worst, res[MPI4].rss[g] / res[ONE].rss[0]);
        if (want[DP2] && want[DP2Z]) least = fmin(least, 1 - res[DP2Z].rss[g] / res[DP2].rss[g]);
    }
    if (want[MPI4])
        printf("goal shape=%s mpi4_each_rank_vs_one<=0.35 worst=%.3f %s\n", sh->name, worst,
               met(worst <= 0.35));
    if (want[DP2] && want[DP2Z])
        printf("goal shape=%s zero1_cut_each_rank>=0.20 least=%.3f %s\n", sh->name, least,
               met(least >= 0.20));
    for (int k = PP2; k <= PP2ZBV; k++) {
        double x = res[k].tok / res[ONE].tok;
        if (want[k])
            printf("goal shape=%s %s_tokens_vs_one>=0.97 ratio=%.3f %s\n", sh->name,
                   runs[k].name, x, met(x >= 0.97));
    }
}

/* The memory placement against the FLOPs one, both 4 ranks in this run:
 * the worst rank's peak, the busiest device's plan, tokens/s. */
static void print_placement(const shape *sh, const result *res) {
    if (!want[MPI4] || !want[MPI4M]) return;
    double w[2] = {0, 0}, pl[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        for (int g = 0; g < 4; g++) {
            const result *r = &res[i ? MPI4M : MPI4];
            w[i] = fmax(w[i], r->rss[g]), pl[i] = fmax(pl[i], r->plan[g][NKIND]);
        }
    printf("placement shape=%s worst_rank_mib flops=%.1f memory=%.1f memory_vs_flops=%.3f "
           "vs_one flops=%.3f memory=%.3f busiest_plan_mib flops=%.1f memory=%.1f "
           "memory_vs_flops=%.3f tokens_memory_vs_flops=%.3f\n", sh->name, MIB(w[0]), MIB(w[1]),
           w[1] / w[0], w[0] / res[ONE].rss[0], w[1] / res[ONE].rss[0], MIB(pl[0]), MIB(pl[1]),
           pl[1] / pl[0], res[MPI4M].tok / res[MPI4].tok);
}

static void print_load(const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fgets(buf, sizeof buf, f)) buf[strcspn(buf, "\n")] = 0;
    if (f) fclose(f);
    printf("load %s: %s\n", when, buf);
    fflush(stdout);
}

/* A second round of the throughput goal's runs, after the others (the
 * machine's other load comes and goes): each keeps its faster round, and
 * must repeat its own losses. */
static int second_round(const shape *sh, result *res) {
    if (!want[PP2] && !want[PP2ZBV]) return 0; /* no throughput goal to measure */
    for (int k = ONE; k <= PP2ZBV; k++) {
        if (!want[k]) continue;
        result r;
        if (train(sh, k, &r)) return 1;
        if (strcmp(r.loss, res[k].loss) || strcmp(r.val, res[k].val)) {
            fprintf(stderr, "bench_mem: shape %s, %s: round 2 losses %s, %s differ from round "
                    "1's %s, %s\n", sh->name, runs[k].name, r.loss, r.val, res[k].loss,
                    res[k].val);
            return 1;
        }
        double first = res[k].round_tok[0];
        if (r.tok > res[k].tok) res[k] = r;
        res[k].round_tok[0] = first;
        res[k].round_tok[1] = r.tok;
    }
    return 0;
}

static int bench_shape(const shape *sh) {
    result res[NRUN];
    for (int k = 0; k < NRUN; k++)
        if (want[k] && train(sh, k, &res[k])) return 1;
    if (second_round(sh, res) || check(sh, res)) return 1;
    for (int k = 0; k < NRUN; k++)
        if (want[k]) print_run(sh, res, k);
    for (int k = 0; k < NRUN; k++)
        if (want[k]) print_plan(sh, &res[k], k);
    print_goals(sh, res);
    print_placement(sh, res);
    fflush(stdout);
    return 0;
}

/* The floor: one device and 4 ranks on floor_shape. */
static int bench_floor(void) {
    result one, mpi;
    if (train(&floor_shape, ONE, &one) || train(&floor_shape, MPI4, &mpi)) return 1;
    print_plan(&floor_shape, &one, ONE);
    print_plan(&floor_shape, &mpi, MPI4);
    fflush(stdout);
    return 0;
}

/* argv: [SHAPE [RUN...]] into *only (NULL: every shape) and want[]. */
static int parse_args(int argc, char **argv, const char **only) {
    *only = argc > 1 ? argv[1] : NULL;
    for (int k = 0; k < NRUN; k++) want[k] = argc <= 2 || k == ONE;
    for (int i = 2; i < argc; i++) {
        int k = 0;
        while (k < NRUN && strcmp(argv[i], runs[k].name)) k++;
        if (k == NRUN) {
            fprintf(stderr, "bench_mem: no run '%s'; the runs:", argv[i]);
            for (k = 0; k < NRUN; k++) fprintf(stderr, " %s", runs[k].name);
            fprintf(stderr, "\n");
            return 1;
        }
        want[k] = 1;
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        if (*only && !strcmp(*only, shapes[s].name)) return 0;
    if (*only) fprintf(stderr, "usage: bench_mem [a|b [RUN...]]\n");
    return *only != NULL;
}

int main(int argc, char **argv) {
    const char *only;
    if (parse_args(argc, argv, &only)) return 1;
    if (!pm_mpi_built()) {
        fprintf(stderr, "bench_mem: built without MPI (libopenmpi-dev missing or NO_MPI=1)\n");
        return 1;
    }
    bin = getenv("PM_BIN") ? getenv("PM_BIN") : "build/pipemem";
    snprintf(dir, sizeof dir, "/tmp/pm_bench_mem_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s prepare /usr/share/games/fortunes/fortunes -o %s >/dev/null "
             "2>&1", bin, dir);
    if (system(cmd)) {
        fprintf(stderr, "bench_mem: could not prepare a corpus (%s)\n", cmd);
        return 1;
    }
    print_load("at start");
    int rc = only ? 0 : bench_floor();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && !rc; s++)
        if (!only || !strcmp(only, shapes[s].name)) rc = bench_shape(&shapes[s]);
    print_load("at end");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) rc = 1;
    return rc;
}
