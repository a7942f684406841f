/* forecast.c: the dry run's forecast of a sweep, before it runs: each
 * pass's compute (its FLOPs at the rate one device thread reaches on one
 * block, pm_select_rate) plus what moving the shard's state costs, at
 * rates measured here on this machine (pm_select_measure): copying it in
 * from the store (RAM, or the spill file), writing back what the pass
 * changed, and AdamW's update.
 *
 * What a pass moves, as pass.c does it: its shard's state (parameters,
 * gradients, m, v) comes in unless the device already holds it, taken
 * here as every pass of a task with several shards and none of a task
 * with one (it stays on its device); a shard's first pass of a step
 * applies the last step's AdamW update and writes all four back, every
 * later pass that is not a plain forward writes its gradients back (a
 * quarter). Copies are counted in series with the compute: on a machine
 * whose copy thread shares the devices' cores (as here) prefetching does
 * not hide them. An evaluation (every eval_every steps and after the last)
 * runs eval_batches microbatches forward through the whole model on the
 * device that ran the step's last pass, after bringing a spilled task's
 * state into RAM and writing it back. Checkpoints are not forecast.
 * pm_select_forecast_make costs every task's passes so and simulates each
 * policy over them: the one forecast the dry run and bench_select give. */
#define _XOPEN_SOURCE 700 /* pread, pwrite, mkstemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_select.h"

#define MEASURE_MAX ((size_t)64 << 20) /* bytes copied per measurement, at most */
#define ROUNDS 3                       /* the best of: others' load only slows */

/* Seconds of the fastest of ROUNDS memcpy of n bytes, dst from src. */
static double time_copy(unsigned char *dst, const unsigned char *src, size_t n) {
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = pm_now();
        memcpy(dst, src, n);
        double dt = pm_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

/* The spill store: n bytes written to and read back from an unlinked file
 * in dir, the fastest of ROUNDS each (the page cache holds it here, as it
 * holds a sweep's store that fits in RAM). */
static pm_status time_file(const char *dir, unsigned char *buf, unsigned char *back, size_t n,
                           double *wr, double *rd, pm_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/pipemem-measure-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return pm_errf(err, PM_ERR_IO, "spill_dir %s: cannot make a file in it", dir);
    unlink(path);
    *wr = *rd = 1e30;
    pm_status st = PM_OK;
    for (int r = 0; r < ROUNDS && !st; r++) {
        double t0 = pm_now();
        ssize_t w = pwrite(fd, buf, n, 0);
        double t1 = pm_now();
        ssize_t g = pread(fd, back, n, 0);
        double t2 = pm_now();
        if (w != (ssize_t)n || g != (ssize_t)n)
            st = pm_errf(err, PM_ERR_IO, "spill_dir %s: writing and reading %zu bytes failed",
                         dir, n);
        *wr = t1 - t0 < *wr ? t1 - t0 : *wr;
        *rd = t2 - t1 < *rd ? t2 - t1 : *rd;
    }
    close(fd);
    return st;
}

/* Seconds per parameter of AdamW's update over n parameters. */
static double time_adamw(float *p, size_t n) {
    float *g = p + n, *m = g + n, *v = m + n;
    pm_optim_adamw_args a = {1e-3f, 0.1f, 0.9f, 0.95f, 1e-8f, 2, 1.0f};
    double best = 1e30;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = pm_now();
        pm_optim_adamw_update(p, g, m, v, n, &a);
        double dt = pm_now() - t0;
        best = dt < best ? dt : best;
    }
    return best / (double)n;
}

pm_status pm_select_measure(const pm_select_task *t, int n, const pm_select_layout *lay,
                            const char *spill_dir, pm_select_rates *out, pm_err *err) {
    *out = (pm_select_rates){0};
    pm_status st = pm_select_rate(t, n, &out->flops, err);
    if (st) return st;
    size_t bytes = lay->state_slot < MEASURE_MAX ? lay->state_slot : MEASURE_MAX;
    bytes = (bytes < 4096 ? 4096 : bytes) / 16 * 16;
    unsigned char *a = pm_malloc(2 * bytes);
    if (!a) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu bytes to measure", 2 * bytes);
    memset(a, 0, 2 * bytes); /* touched: the copies measure copying, not page faults */
    double rd = time_copy(a + bytes, a, bytes), wr = time_copy(a, a + bytes, bytes);
    if (spill_dir) st = time_file(spill_dir, a, a + bytes, bytes, &wr, &rd, err);
    out->spilled = spill_dir != NULL;
    if (!st) {
        out->read_bps = (double)bytes / (rd > 0 ? rd : 1e-9);
        out->write_bps = (double)bytes / (wr > 0 ? wr : 1e-9);
        out->adamw_s = time_adamw((float *)a, bytes / 16);
    }
    pm_free(a);
    return st;
}

/* Seconds of one evaluation of t: its forward FLOPs, and a spilled
 * state's round trip through RAM. */
static double eval_cost(const pm_select_task *t, const pm_select_rates *r, int batches,
                        double *move) {
    double fl = 0, state = 0;
    for (int s = 0; s < t->nshard; s++)
        fl += t->shard[s].flops_f, state += (double)t->shard[s].state;
    *move = r->spilled ? state / r->read_bps + state / r->write_bps : 0;
    return batches * fl / r->flops;
}

/* Task t's passes of `steps` steps costed (pm_select_task_costs), the last
 * pass of a step adding an evaluation at every eval_every-th step and the
 * last (share < 0), or else `share` of one at every step (an extrapolated
 * forecast spreads a task's evaluations evenly over the steps it
 * simulates). */
static void costs_of(const pm_select_task *t, int64_t steps, int eval_every, double share,
                     int eval_batches, const pm_select_rates *r, int *shard, double *compute,
                     double *move, double *before, double *after) {
    int S = t->nshard, np = 2 * S - 1;
    double ev_move, ev = eval_cost(t, r, eval_batches, &ev_move);
    pm_select_task_passes(t, steps, r->flops, shard, compute);
    for (int64_t i = 0; i < steps * np; i++) {
        int k = (int)(i % np), s = shard[i];
        int64_t step = i / np + 1; /* steps done once this pass's step ends */
        double state = (double)t->shard[s].state;
        int first = k <= S - 1; /* the shard's first pass of the step */
        double in = S > 1 ? state / r->read_bps : 0;
        double back = first ? state / r->write_bps : k > S - 1 ? state / 4 / r->write_bps : 0;
        double update = first ? state / 16 * r->adamw_s : 0;
        move[i] = in + back + update;
        if (before) before[i] = in + update;
        if (after) after[i] = back;
        double w = k < np - 1 ? 0
                   : share >= 0 ? share
                   : (eval_every > 0 && step % eval_every == 0) || step == steps ? 1 : 0;
        compute[i] += w * ev, move[i] += w * ev_move;
        if (after) after[i] += w * (ev + ev_move); /* after the step's last pass, alone */
    }
}

void pm_select_task_costs(const pm_select_task *t, int64_t steps, int eval_every,
                          int eval_batches, const pm_select_rates *r, int *shard,
                          double *compute, double *move, double *before, double *after) {
    costs_of(t, steps, eval_every, -1, eval_batches, r, shard, compute, move, before, after);
}

/* Evaluations a task of `steps` steps runs: every eval_every-th step and
 * the last. */
static int64_t evals_of(int64_t steps, int eval_every) {
    return eval_every > 0 ? steps / eval_every + (steps % eval_every != 0) : 1;
}

/* ---- the forecast of a sweep ------------------------------------------------ */

void pm_select_forecast_free(pm_select_forecast *f) {
    if (!f) return;
    pm_free(f->compute);
    pm_free(f->move);
    f->compute = f->move = NULL;
}

/* Each task's passes, costed (pm_select_task_costs), as the simulator
 * takes them: a task's arrays (np passes) and its totals. */
typedef struct {
    int n;
    int64_t *np;
    int **sh, *per, *micro;
    double **co, **be, **af;
} costs;

static void costs_free(costs *c) {
    for (int i = 0; i < c->n && c->sh && c->co && c->be && c->af; i++)
        pm_free(c->sh[i]), pm_free(c->co[i]), pm_free(c->be[i]), pm_free(c->af[i]);
    pm_free(c->np), pm_free(c->sh), pm_free(c->per), pm_free(c->micro);
    pm_free(c->co), pm_free(c->be), pm_free(c->af);
}

/* Task i's pass list for `steps` of its steps, costed: co its compute and
 * moves, be and af their parts before and after its microbatches
 * (joining); its whole run's totals into f (exact: every step costs the
 * same but for its evaluation), what it simulates into *sim. */
static int task_costs(const pm_select_task *t, const pm_select_rates *r, int every, int batches,
                      int64_t steps, costs *c, int i, pm_select_forecast *f, double *sim) {
    int64_t np = c->np[i] = steps * c->per[i], all = t->cfg.opt.steps;
    c->sh[i] = pm_malloc((size_t)np * sizeof(int));
    c->co[i] = pm_malloc((size_t)np * sizeof(double));
    c->be[i] = pm_malloc((size_t)np * sizeof(double));
    c->af[i] = pm_malloc((size_t)np * sizeof(double));
    double *mv = pm_malloc((size_t)np * sizeof *mv);
    int bad = !c->sh[i] || !c->co[i] || !c->be[i] || !c->af[i] || !mv;
    if (bad) {
        pm_free(mv);
        return bad;
    }
    double ev_move, ev = eval_cost(t, r, batches, &ev_move), step_co = 0, step_mv = 0;
    int64_t evals = evals_of(all, every);
    /* one step without its evaluation, for the run's totals */
    costs_of(t, 1, every, 0, batches, r, c->sh[i], c->co[i], mv, NULL, NULL);
    for (int k = 0; k < c->per[i]; k++) step_co += c->co[i][k], step_mv += mv[k];
    f->compute[i] = (double)all * step_co + (double)evals * ev;
    f->move[i] = (double)all * step_mv + (double)evals * ev_move;
    costs_of(t, steps, every, steps < all ? (double)evals / (double)all : -1, batches, r,
             c->sh[i], c->co[i], mv, c->be[i], c->af[i]);
    for (int64_t k = 0; k < np; k++) c->co[i][k] += mv[k], *sim += c->co[i][k];
    pm_free(mv);
    return bad;
}

pm_status pm_select_forecast_make(pm_select_forecast *f, const pm_select_task *t, int n,
                                  int devices, const pm_select_rates *r, int eval_every,
                                  int eval_batches, int no_join, pm_err *err) {
    *f = (pm_select_forecast){.rates = *r, .compute = pm_calloc((size_t)n, sizeof(double)),
                              .move = pm_calloc((size_t)n, sizeof(double))};
    costs c = {n, pm_calloc((size_t)n, sizeof(int64_t)), pm_calloc((size_t)n, sizeof(int *)),
               pm_calloc((size_t)n, sizeof(int)), pm_calloc((size_t)n, sizeof(int)),
               pm_calloc((size_t)n, sizeof(double *)), pm_calloc((size_t)n, sizeof(double *)),
               pm_calloc((size_t)n, sizeof(double *))};
    int bad = !f->compute || !f->move || !c.np || !c.sh || !c.per || !c.micro || !c.co || !c.be ||
              !c.af;
    /* Past PM_SELECT_FORECAST_PASSES passes the policies are simulated over
     * the same fraction of every task's steps (at least one) and their
     * times scaled by the whole run's work over the simulated work: the
     * steps repeat, so the schedule of a fraction of them is that fraction
     * of the whole, but for where the tasks end. */
    double passes = 0, simulated = 0, whole = 0;
    for (int i = 0; i < n; i++) passes += (double)t[i].cfg.opt.steps * (2 * t[i].nshard - 1);
    double frac = passes > PM_SELECT_FORECAST_PASSES ? PM_SELECT_FORECAST_PASSES / passes : 1;
    for (int i = 0; i < n && !bad; i++) {
        int64_t all = t[i].cfg.opt.steps, steps = frac < 1 ? llround((double)all * frac) : all;
        steps = steps < 1 ? 1 : steps > all ? all : steps;
        c.per[i] = 2 * t[i].nshard - 1, c.micro[i] = t[i].cfg.micro;
        bad = task_costs(&t[i], r, eval_every, eval_batches, steps, &c, i, f, &simulated);
        whole += f->compute[i] + f->move[i];
        f->steps_simulated += steps, f->passes_simulated += c.np[i];
    }
    f->scale = frac < 1 && simulated > 0 ? whole / simulated : 1;
    pm_status st = bad ? pm_errf(err, PM_ERR_NOMEM, "out of memory for the simulation") : PM_OK;
    pm_select_work w = {n, c.np, (const int *const *)c.sh, (const double *const *)c.co, c.per,
                        c.micro, (const double *const *)c.be, (const double *const *)c.af};
    for (int p = 0; p < PM_POLICY_COUNT && !st; p++) {
        pm_select_sim sim;
        if ((st = pm_select_simulate(&w, devices, (pm_select_policy)p, no_join, &sim, err)))
            break;
        f->makespan[p] = sim.makespan * f->scale; /* the shard policy's bound (joined) */
        if (p == PM_POLICY_SHARD) f->lower_bound = sim.lower_bound * f->scale; /* holds for all */
        pm_select_sim_free(&sim);
    }
    costs_free(&c);
    if (st) pm_select_forecast_free(f);
    return st;
}
