/* sim_dp.c: data parallelism on a simulated schedule (pm_sim_dp): when each
 * stage's gradient sum across the replicas runs, given when the stage's
 * last weight pass ended, and the step it makes. Linear in the passes plus
 * S^2 / p per device for the link's order (S is at most a few thousand). */
#include "pipemem/pm_sched.h"
#include "sched.h"

double pm_allreduce_cost(double n, int D, double bw, double a) {
    return D > 1 ? 2.0 * (D - 1) * (a + n / ((double)D * bw)) : 0.0;
}

/* ready[k]: end of stage k's last weight pass in its device's list. */
static void weights_done(const pm_sim *sim, const pm_sched *s, double *ready) {
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++)
            if (ps[i].kind == PM_PASS_W || ps[i].kind == PM_PASS_BW)
                ready[ps[i].stage] = sim->end[(int64_t)d * s->cap + i];
    }
}

/* Device d's link: its stages' sums one at a time in ready order; returns
 * when the last ends (or `from` if it holds no stage). serial: every sum
 * waits for `from` too. */
static double link(pm_sim *sim, const pm_sched *s, int d, const double *ar, double from,
                   int serial) {
    double free_at = from, *st = sim->red_start, *en = sim->red_end;
    int left = 0;
    for (int k = 0; k < s->S; k++) left += pm_sched_stage_device(s, k) == d;
    /* en[] holds ready times until a stage is placed; st[k] < 0 marks it open */
    for (int k = 0; k < s->S; k++)
        if (pm_sched_stage_device(s, k) == d) st[k] = -1;
    for (; left > 0; left--) {
        int best = -1;
        for (int k = 0; k < s->S; k++)
            if (pm_sched_stage_device(s, k) == d && st[k] < 0 && (best < 0 || en[k] < en[best]))
                best = k;
        double begin = !serial && en[best] > free_at ? en[best] : free_at;
        st[best] = begin, en[best] = begin + ar[best], free_at = en[best];
    }
    return free_at;
}

static double step_of(pm_sim *sim, const pm_sched *s, const double *ar, int serial) {
    double step = 0;
    weights_done(sim, s, sim->red_end);
    for (int d = 0; d < s->p; d++) {
        int64_t n = s->len[d], base = (int64_t)d * s->cap;
        if (!n) continue;
        double first = sim->start[base], last = sim->end[base + n - 1];
        /* overlapped: the link is free from the device's first pass on */
        double done = link(sim, s, d, ar, serial ? last : first, serial);
        double span = (done > last ? done : last) - first;
        if (span > step) step = span;
    }
    return step;
}

pm_status pm_sim_dp(pm_sim *sim, const pm_sched *s, const double *ar, pm_err *err) {
    if (sim->p != s->p || sim->S != s->S || sim->cap != s->cap)
        return pm_errf(err, PM_ERR_ARG, "pm_sim_dp: the simulation is of another schedule");
    for (int k = 0; k < s->S; k++)
        if (!(ar[k] >= 0 && ar[k] < 1e300))
            return pm_errf(err, PM_ERR_ARG, "reduction cost of stage %d is %g; it must be finite "
                           "and >= 0", k, ar[k]);
    if (!sim->red_start) {
        sim->red_start = pm_malloc((size_t)s->S * sizeof(double));
        sim->red_end = pm_malloc((size_t)s->S * sizeof(double));
        if (!sim->red_start || !sim->red_end) {
            pm_free(sim->red_start), pm_free(sim->red_end);
            sim->red_start = sim->red_end = NULL;
            return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d reductions", s->S);
        }
    }
    sim->dp_step_serial = step_of(sim, s, ar, 1);
    sim->dp_step = step_of(sim, s, ar, 0); /* last: its times stay in red_* */
    return PM_OK;
}
