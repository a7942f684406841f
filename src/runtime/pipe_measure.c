/* pipe_measure.c: what a step measured, and what the next one should take.
 * From the pass start/end times the executors record: per-stage mean F, B,
 * W times and the cross-device latency (fed to the simulator as a REPLAY of
 * the step), the measured makespan and bubble, and the profile of earlier
 * steps' costs that makes the FORECAST of a step before it runs. Nothing
 * here allocates: the simulations are sized in init. */
#include <math.h>

#include "runtime/internal.h"

/* The simulator's c: mean time from a dependency's end on another device
 * to the start of the pass waiting for it, over the passes whose device
 * was idle when the dependency ended (else the wait is the device's own). */
static double measured_latency(const pm_pipe *pp) {
    const pm_sched *s = &pp->sched;
    double *fend = pp->dep_end, *bend = pp->dep_end + (size_t)s->S * (size_t)s->m, sum = 0;
    int64_t n = 0;
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            int64_t k = (int64_t)d * s->cap + i, key = (int64_t)ps[i].stage * s->m + ps[i].mb;
            if (ps[i].kind == PM_PASS_F) fend[key] = pp->t1[k];
            else if (ps[i].kind != PM_PASS_W) bend[key] = pp->t1[k];
        }
    }
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            int st = ps[i].stage, dep = ps[i].kind == PM_PASS_F ? st - 1 : st + 1;
            if (ps[i].kind == PM_PASS_W || dep < 0 || dep >= s->S ||
                pm_sched_stage_device(s, dep) == d)
                continue;
            int64_t k = (int64_t)d * s->cap + i, key = (int64_t)dep * s->m + ps[i].mb;
            double ready = ps[i].kind == PM_PASS_F ? fend[key] : bend[key];
            if (i > 0 && pp->t1[k - 1] >= ready) continue; /* busy: not a latency */
            sum += pp->t0[k] - ready, n++;
        }
    }
    return n && sum > 0 ? sum / (double)n : 0;
}

/* Data parallel: each stage's gradient sum as the simulator's ar: the
 * shortest of its replicas' start-to-done times (the last replica's, once
 * the partial sum has come, is the sum's own cost; the others also wait). */
static void measured_sums(pm_pipe *pp) {
    for (int k = 0; pp->dp > 1 && k < pp->S; k++) {
        double best = INFINITY;
        for (int r = 0; r < pp->dp; r++) {
            size_t at = (size_t)(r * pp->p + pm_sched_stage_device(&pp->sched, k)) * pp->S + k;
            double t = pp->red1[at] - pp->red0[at];
            if (t < best) best = t;
        }
        pp->ar[k] = best > 0 ? best : 0;
    }
}

/* Per-stage mean F, B, W times (us) of the step just run, and the latency,
 * into pp->cost (its memory deltas stay the model's bytes). */
void pm_pipe_measure_costs(pm_pipe *pp) {
    int S = pp->S;
    for (int s = 0; s < S; s++) {
        double sum[3] = {0, 0, 0};
        int n[3] = {0, 0, 0};
        for (int d = 0; d < pp->p; d++) {
            const pm_pass *ps = pm_sched_dev(&pp->sched, d);
            for (int64_t i = 0; i < pp->sched.len[d]; i++) {
                if (ps[i].stage != s) continue;
                int64_t k = (int64_t)d * pp->sched.cap + i;
                double t0 = pp->t0[k], t1 = pp->t1[k], tm = pp->tmid[k];
                /* a BW pass's head layer does its B and W in one call, in the
                 * B part: on the head's stage its W time counts as B's */
                if (ps[i].kind == PM_PASS_BW) {
                    sum[1] += tm - t0, sum[2] += t1 - tm, n[1]++, n[2]++;
                } else {
                    sum[ps[i].kind] += t1 - t0, n[ps[i].kind]++;
                }
            }
        }
        pm_stage_cost *c = &pp->cost.st[s];
        c->tf = n[0] ? sum[0] / n[0] : 0;
        c->tb = n[1] ? sum[1] / n[1] : 0;
        c->tw = n[2] ? sum[2] / n[2] : 0;
        /* a recomputed B reran the forward first: tb is the rest (the
         * simulator adds tf back, pm_cost_time) */
        if (c->rec) c->tb = c->tb > c->tf ? c->tb - c->tf : 0;
    }
    pp->cost.c = measured_latency(pp);
    measured_sums(pp);
}

/* Folds the step just measured (pp->cost) into the profile the forecast
 * uses: the mean of the warm steps (every step after the first, whose
 * caches, pages and thread wake-ups make it slow). */
void pm_pipe_profile_add(pm_pipe *pp) {
    int64_t n = pp->nprof;
    double w = n <= 1 ? 0.0 : (double)(n - 1) / (double)n; /* weight of the old mean */
    for (int k = 0; k < pp->S; k++) {
        pm_stage_cost *a = &pp->prof.st[k];
        const pm_stage_cost *b = &pp->cost.st[k];
        a->tf = w * a->tf + (1 - w) * b->tf;
        a->tb = w * a->tb + (1 - w) * b->tb;
        a->tw = w * a->tw + (1 - w) * b->tw;
    }
    pp->prof.c = w * pp->prof.c + (1 - w) * pp->cost.c;
    for (int k = 0; pp->dp > 1 && k < pp->S; k++)
        pp->prof_ar[k] = w * pp->prof_ar[k] + (1 - w) * pp->ar[k];
    pp->nprof++;
}

/* The forecast of the step about to run, from the warm steps already run
 * (none before one has: NAN for steps 0 and 1). Allocates nothing. */
void pm_pipe_forecast(pm_pipe *pp, pm_pipe_info *in) {
    in->forecast_makespan_ms = in->forecast_bubble = NAN;
    pm_err e;
    if (pp->nprof > 1 && !pm_sim_replay(&pp->fcast, &pp->sched, &pp->prof, &e)) {
        in->forecast_makespan_ms = pp->fcast.makespan / 1e3;
        in->forecast_bubble = pp->fcast.bubble;
        if (pp->dp > 1 && !pm_sim_dp(&pp->fcast, &pp->sched, pp->prof_ar, &e))
            in->forecast_makespan_ms = pp->fcast.dp_step / 1e3;
    }
}

/* Measured makespan and bubble the simulator's way (span per device), over
 * every replica's devices; with replicas a device's span runs to the later
 * of its last pass and its stages' gradient sums. */
void pm_pipe_measure_span(const pm_pipe *pp, double *makespan, double *bubble) {
    double mk = 0, busy = 0;
    for (int g = 0; g < pp->nd; g++) {
        int d = g % pp->p;
        int64_t base = (int64_t)g * pp->sched.cap, n = pp->sched.len[d];
        if (!n) continue;
        double end = pp->t1[base + n - 1];
        for (int k = 0; pp->dp > 1 && k < pp->S; k++)
            if (pm_sched_stage_device(&pp->sched, k) == d && pp->red1[(size_t)g * pp->S + k] > end)
                end = pp->red1[(size_t)g * pp->S + k];
        if (end - pp->t0[base] > mk) mk = end - pp->t0[base];
        const pm_pass *ps = pm_sched_dev(&pp->sched, d);
        for (int64_t i = 0; i < n; i++) {
            double t = pp->t1[base + i] - pp->t0[base + i];
            busy += t;
            /* recomputed: a backward reruns its forward, which lasts what the
             * forward did; like the simulator, not the model's work */
            if (pp->sched.recompute && ps[i].kind == PM_PASS_F) busy -= t;
        }
    }
    *makespan = mk;
    *bubble = mk > 0 ? 1.0 - busy / (pp->nd * mk) : 0;
}
