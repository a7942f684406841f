/* bench_search.c: speed of the memory-limited search (issue 3, point 8):
 * `search` at p = 32, m = 128 under several limits (budget 1 s each) and
 * the curve at p = 16, m = 64 over 36 limits (budget 5 s), with the
 * measured costs of a real model (F, B, W, C = 4959, 5217, 3519, 213).
 *
 * Each line: the time (best of 3 after a warm-up run), its ratio to the
 * budget, and its ratio to a peer measured in the same process: generating
 * and simulating 1F1B at the same size (the simplest schedule there is).
 * Results are verified (validated under the limit) before timing.
 *
 * Then issue 21's quality line: `search` at p = 16, m = 64, 0.75 M with
 * unit costs and with the measured ones (per device share 9918, 10434,
 * 7038, 213), the makespan against the lower bound of any schedule of the
 * winner's placement under that limit (pm_sched_lower_bound_at), and the
 * time against the 3 s budget; and part 4's: V-Min and V-Half generated at
 * p = 64, m = 256 (best of 5) against 1F1B's generation in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipemem/pm_sched.h"

static const pm_costs REAL = {4959, 5217, 3519, 213};
static const pm_costs MEASURED = {9918, 10434, 7038, 213};

static double best_of(int n, double (*fn)(void *), void *arg) {
    double best = INFINITY;
    for (int i = 0; i < n; i++) {
        double t0 = pm_now();
        if (fn(arg) < 0) return -1;
        double dt = pm_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    const char *kind;
    pm_sched_req q;
} gen_arg;

/* A kind generated and simulated; with 1F1B, the peer. */
static double run_gen(void *arg) {
    const gen_arg *a = arg;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    if (pm_sched_generate(&s, a->kind, &a->q, NULL)) return -1;
    if (pm_cost_init_uniform(&c, &s, a->q.t, a->q.mem, NULL) || pm_sim_run(&sim, &s, &c, NULL))
        return -1;
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    return 0;
}

static double run_search(void *arg) {
    const pm_sched_req *q = arg;
    pm_sched s;
    pm_search_point pt;
    char why[512];
    pm_err e;
    if (pm_sched_search(&s, q, &pt, why, sizeof why, &e)) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        return -1;
    }
    pm_sched_free(&s);
    return pt.bubble;
}

typedef struct {
    pm_sched_req q;
    double lim[64];
    int n;
    pm_search_point pt[64 * PM_PLACE_COUNT];
} curve_arg;

static double run_curve(void *arg) {
    curve_arg *a = arg;
    pm_err e;
    if (pm_sched_curve(&a->q, a->lim, a->n, a->pt, &e)) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        return -1;
    }
    return 0;
}

/* The search's answer passes the validator under its limit. */
static int verify_search(const pm_sched_req *q, pm_search_point *pt) {
    pm_sched s;
    pm_cost c;
    pm_err e;
    char why[512];
    int ok = !pm_sched_search(&s, q, pt, why, sizeof why, &e) &&
             !pm_cost_init_uniform(&c, &s, q->t, q->mem, &e);
    if (ok) {
        ok = !pm_sched_validate(&s, &c, q->mem_limit, &e);
        pm_cost_free(&c);
    }
    pm_sched_free(&s);
    if (!ok) fprintf(stderr, "bench_search: search at %g M failed: %s\n", q->mem_limit, e.msg);
    return ok;
}

/* The gap of the search's winner to the lower bound under its limit;
 * negative on failure (after a message). */
static double gap_to_bound(const pm_sched_req *q, double *makespan, double *bound) {
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_search_point pt;
    pm_err e;
    char why[512];
    if (pm_sched_search(&s, q, &pt, why, sizeof why, &e)) {
        fprintf(stderr, "bench_search: %s\n", e.msg);
        return -1;
    }
    double gap = -1;
    if (!pm_cost_init_uniform(&c, &s, q->t, q->mem, &e)) {
        if (!pm_sched_validate(&s, &c, q->mem_limit, &e) && !pm_sim_run(&sim, &s, &c, &e)) {
            *makespan = sim.makespan;
            *bound = pm_sched_lower_bound_at(&s, &c, q->mem_limit * sim.M);
            gap = *makespan / *bound - 1;
            pm_sim_free(&sim);
        }
        pm_cost_free(&c);
    }
    if (gap < 0) fprintf(stderr, "bench_search: p=16 m=64: %s\n", e.msg);
    pm_sched_free(&s);
    return gap;
}

/* Issue 21: the search at p = 16, m = 64, 0.75 M against its lower bound. */
static int gap_lines(void) {
    static const pm_costs costs[] = {{1, 1, 1, 0}, MEASURED};
    for (int i = 0; i < 2; i++) {
        pm_sched_req q = {.p = 16, .m = 64, .t = costs[i], .mem = PM_MEM_DEFAULT,
                          .mem_limit = 0.75};
        double makespan = 0, bound = 0, gap = gap_to_bound(&q, &makespan, &bound);
        if (gap < 0) return 1;
        double t = best_of(3, run_search, &q);
        if (t < 0) return 1;
        printf("search p=16 m=64 limit 0.75 M costs %g,%g,%g,%g: makespan %.6g, %.2f%% above the "
               "lower bound %.6g (goal 3%%); %.3f s (%.2fx the 3 s budget)\n",
               q.t.f, q.t.b, q.t.w, q.t.c, makespan, 100 * gap, bound, t, t / 3.0);
    }
    return 0;
}

/* Issue 21, part 4: V-Min and V-Half generated (and simulated) at p = 64,
 * m = 256 against the same for 1F1B (bench_sched has every V kind). */
static int generation_lines(void) {
    gen_arg a = {"1f1b", {.p = 64, .m = 256, .t = REAL, .mem = PM_MEM_DEFAULT}};
    double peer = best_of(5, run_gen, &a);
    if (peer < 0) return 1;
    static const char *const kinds[] = {"v-min", "v-half"};
    for (int i = 0; i < 2; i++) {
        a.kind = kinds[i];
        double t = best_of(5, run_gen, &a);
        if (t < 0) return 1;
        printf("generate %s p=64 m=256: %.1f ms (%.2fx the 100 ms goal; %.0fx 1f1b's %.2f ms)\n",
               kinds[i], t * 1e3, t / 0.1, t / peer, peer * 1e3);
    }
    return 0;
}

int main(void) {
    static const double limits[] = {0.5, 0.75, 1.0, 1.5, 2.0};
    pm_sched_req q = {.p = 32, .m = 128, .t = REAL, .mem = PM_MEM_DEFAULT};
    double peer = best_of(3, run_gen, &(gen_arg){"1f1b", q});
    if (peer < 0) return 1;
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        q.mem_limit = limits[i];
        pm_search_point pt;
        if (!verify_search(&q, &pt)) return 1;
        double t = best_of(3, run_search, &q);
        if (t < 0) return 1;
        printf("search p=32 m=128 limit %.2f M: %.3f s (%.2fx the 1 s budget; %.0fx 1f1b's "
               "%.2f ms) -> %s bubble %.2f%% peak %.3f M\n",
               limits[i], t, t / 1.0, t / peer, peer * 1e3, pt.kind, 100 * pt.bubble, pt.peak);
    }
    static curve_arg a;
    a.q = (pm_sched_req){.p = 16, .m = 64, .t = REAL, .mem = PM_MEM_DEFAULT};
    a.n = 36;
    for (int k = 0; k < a.n; k++) a.lim[k] = 0.25 + 0.05 * k;
    double peer16 = best_of(3, run_gen, &(gen_arg){"1f1b", a.q});
    if (peer16 < 0 || run_curve(&a) < 0) return 1;
    for (int k = 0; k < a.n; k++) /* verified: every point within its limit */
        for (int f = 0; f < PM_PLACE_COUNT; f++)
            if (a.pt[f * a.n + k].ok && a.pt[f * a.n + k].peak > a.lim[k] + 1e-9) return 1;
    double t = best_of(3, run_curve, &a);
    if (t < 0) return 1;
    printf("curve p=16 m=64 36 limits 0.25..2.00 M: %.3f s (%.2fx the 5 s budget; %.0fx 1f1b's "
           "%.2f ms)\n", t, t / 5.0, t / peer16, peer16 * 1e3);
    return gap_lines() || generation_lines();
}
