/* pipe_timeline.c: the last step as measured, as a pm_sim (start and end
 * of every pass in us, arena bytes after each; with replicas, replica 0's
 * devices and their gradient sums), and its writers: a Chrome trace and an
 * SVG timeline in the schedule engine's formats. */
#include <string.h>

#include "runtime/internal.h"
#include "schedule/sched.h"
#include "pipe.h"

pm_status pm_pipe_timeline(const pm_pipe *pp, pm_sim *out, pm_err *err) {
    /* a pm_sim sized by the simulator's own init, filled with measurements */
    pm_sim *t = out;
    pm_status st = pm_sim_init(t, &pp->sched, err);
    if (st) return st;
    size_t n = (size_t)pp->p * (size_t)pp->sched.cap;
    memcpy(t->start, pp->t0, n * sizeof(double));
    memcpy(t->end, pp->t1, n * sizeof(double));
    memcpy(t->mem, pp->live_after, n * sizeof(double));
    for (int d = 0; d < pp->p; d++) {
        int64_t base = (int64_t)d * pp->sched.cap, len = pp->sched.len[d];
        for (int64_t i = 0; i < len; i++) {
            t->busy[d] += pp->t1[base + i] - pp->t0[base + i];
            if (pp->live_after[base + i] > pp->live_after[base + t->peak_at[d]]) t->peak_at[d] = i;
        }
        /* the arena's measured peak (a level inside a pass, not only after it:
         * a recomputed backward rebuilds its activations on top) */
        t->peak[d] = (double)pp->peak[d];
        if (len) t->span[d] = pp->t1[base + len - 1] - pp->t0[base];
    }
    t->unit = "us";
    pm_pipe_measure_span(pp, &t->makespan, &t->bubble);
    t->M = pm_cost_M(&pp->cost);
    if (pp->dp == 1) return PM_OK;
    /* replica 0's devices, with their stages' gradient sums as their own bars */
    t->red_start = pm_malloc((size_t)pp->S * sizeof(double));
    t->red_end = pm_malloc((size_t)pp->S * sizeof(double));
    if (!t->red_start || !t->red_end) {
        pm_sim_free(t);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for the timeline");
    }
    for (int k = 0; k < pp->S; k++) {
        size_t at = (size_t)pm_sched_stage_device(&pp->sched, k) * pp->S + k;
        t->red_start[k] = pp->red0[at], t->red_end[k] = pp->red1[at];
    }
    t->dp_step = t->makespan;
    return PM_OK;
}

pm_status pm_pipe_write_trace(const pm_pipe *pp, FILE *f, pm_err *err) {
    pm_sim t;
    pm_status st = pm_pipe_timeline(pp, &t, err);
    if (st) return st;
    st = pm_sched_write_trace(f, &pp->sched, &t);
    pm_sim_free(&t);
    return st ? pm_errf(err, st, "could not write the trace") : PM_OK;
}

pm_status pm_pipe_write_svg(const pm_pipe *pp, FILE *f, const char *title, pm_err *err) {
    pm_sim t;
    pm_status st = pm_pipe_timeline(pp, &t, err);
    if (st) return st;
    st = pm_sched_write_svg(f, &pp->sched, &t, title);
    pm_sim_free(&t);
    return st ? pm_errf(err, st, "could not write the timeline SVG") : PM_OK;
}
