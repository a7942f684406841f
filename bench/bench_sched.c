/* bench_sched.c: time to generate and simulate the V schedules
 * of the papers (v-min, v-half: building blocks; v-zb: the V-ZB greedy
 * search, the papers' V-ZB) at p = 64, m = 256 with unequal costs
 * (F,B,W,C = 4959,5217,3519,213: the papers' measured pass times), against
 * 1F1B as the peer, generated and simulated in the same process.
 *
 * Only what this run measured is printed: times (best of 5 after one
 * untimed warm-up, CLOCK_MONOTONIC via pm_now) and the simulated makespan
 * and peak. The papers' own Python generators are not run here, and their
 * timings, measured elsewhere, are not quoted (nothing here reproduces them).
 * Every schedule is validated before its time is taken.
 *
 * Output, one line:
 *   bench_sched p=64 m=256 peer=1f1b peer_ms=.. peer_makespan=.. peer_peak=..
 *     v-min_ms=.. v-min_time_x=.. v-min_makespan_x=.. v-min_peak_x=.. (and v-half, v-zb)
 * where *_x are ratios to the peer (time, makespan, peak memory); then the
 * JSON of v-min (unit costs, as `pipemem schedule --kind v-min -p 64 -m 256
 * --format json` writes it) against the text format of the same schedule
 * as the peer, both written to /dev/null, best of 5:
 *   json_bytes=.. json_mb_s=.. json_text_time_x=.. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"

typedef struct {
    double ms;       /* best time to generate and simulate */
    double makespan; /* simulated */
    double peak;     /* max device peak, x M */
} result;

/* Generates and simulates once; fills makespan and peak. */
static pm_status run_once(const char *kind, const pm_sched_req *req, result *r, pm_err *err) {
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_status st = pm_sched_generate(&s, kind, req, err);
    if (st) return st;
    if (!(st = pm_cost_init_uniform(&c, &s, req->t, req->mem, err))) {
        if (!(st = pm_sim_run(&sim, &s, &c, err))) {
            r->makespan = sim.makespan;
            r->peak = pm_sim_peak_max_x(&sim);
            pm_sim_free(&sim);
        }
        pm_cost_free(&c);
    }
    pm_sched_free(&s);
    return st;
}

static pm_status validate(const char *kind, const pm_sched_req *req, pm_err *err) {
    pm_sched s;
    pm_cost c;
    pm_status st = pm_sched_generate(&s, kind, req, err);
    if (!st && !(st = pm_cost_init_uniform(&c, &s, req->t, req->mem, err))) {
        st = pm_sched_validate(&s, &c, 0, err);
        pm_cost_free(&c);
    }
    pm_sched_free(&s);
    return st;
}

static int bench(const char *kind, const pm_sched_req *req, result *r) {
    pm_err err;
    pm_status st = validate(kind, req, &err);
    if (!st) st = run_once(kind, req, r, &err); /* warm-up */
    r->ms = 1e30;
    for (int k = 0; k < 5 && !st; k++) {
        double t0 = pm_now();
        st = run_once(kind, req, r, &err);
        double ms = (pm_now() - t0) * 1e3;
        if (ms < r->ms) r->ms = ms;
    }
    if (st) fprintf(stderr, "bench_sched: %s: %s\n", kind, err.msg);
    return st != PM_OK;
}

/* Best time (s) of 5 writes of s to /dev/null; its size in *bytes (a
 * sixth write, to memory: /dev/null keeps no position). */
static double write_time(int json, const pm_sched *s, const pm_cost *c, const pm_sim *sim,
                         size_t *bytes) {
    double best = 1e30;
    for (int k = 0; k < 6; k++) {
        char *mem = NULL;
        FILE *f = k < 5 ? fopen("/dev/null", "w") : open_memstream(&mem, bytes);
        if (!f) return -1;
        double t0 = pm_now();
        pm_status st = json ? pm_sched_write_json(f, s, c, sim) : pm_sched_write_text(f, s);
        if (st || fflush(f)) return -1;
        double t = pm_now() - t0;
        if (k < 5) best = t < best ? t : best;
        fclose(f);
        free(mem);
    }
    return best;
}

/* The JSON writer's throughput, and its time over the text writer's. */
static int bench_json(void) {
    pm_sched_req rq = {.p = 64, .m = 256, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    pm_err err;
    if (pm_sched_generate(&s, "v-min", &rq, &err) ||
        pm_cost_init_uniform(&c, &s, rq.t, rq.mem, &err) || pm_sim_run(&sim, &s, &c, &err)) {
        fprintf(stderr, "bench_sched: json: %s\n", err.msg);
        return 1;
    }
    size_t jb = 0, tb = 0;
    double tj = write_time(1, &s, &c, &sim, &jb), tt = write_time(0, &s, &c, &sim, &tb);
    pm_sim_free(&sim), pm_cost_free(&c), pm_sched_free(&s);
    if (tj < 0 || tt < 0) return 1;
    printf(" json_bytes=%zu json_mb_s=%.0f json_text_time_x=%.3f", jb, (double)jb / tj / 1e6,
           tj / tt);
    return 0;
}

int main(void) {
    static const char *const kinds[] = {"v-min", "v-half", "v-zb"};
    enum { NK = sizeof kinds / sizeof kinds[0] };
    pm_sched_req req = {.p = 64, .m = 256, .t = {4959, 5217, 3519, 213}, .mem = PM_MEM_DEFAULT};
    result peer, r[NK];
    if (bench("1f1b", &req, &peer)) return 1;
    for (int i = 0; i < NK; i++)
        if (bench(kinds[i], &req, &r[i])) return 1;
    printf("bench_sched p=%d m=%d peer=1f1b peer_ms=%.2f peer_makespan=%.0f peer_peak=%.4f", req.p,
           req.m, peer.ms, peer.makespan, peer.peak);
    for (int i = 0; i < NK; i++)
        printf(" %s_ms=%.2f %s_time_x=%.3f %s_makespan_x=%.4f %s_peak_x=%.4f", kinds[i], r[i].ms,
               kinds[i], r[i].ms / peer.ms, kinds[i], r[i].makespan / peer.makespan, kinds[i],
               r[i].peak / peer.peak);
    int bad = bench_json();
    putchar('\n');
    return bad;
}
