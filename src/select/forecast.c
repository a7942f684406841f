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
 * with one (it stays on its device); a shard's first pass after a step
 * ended (the next step's forward, or the evaluation's) applies the step's
 * AdamW update and writes all four back, every other pass that computes
 * gradients writes them back (a quarter). An evaluation (every eval_every
 * steps and after the last) is a round of forward passes through the
 * shards on eval_batches microbatches, chunk by chunk, as the run makes
 * it. Copies are counted in series with the compute: on a machine whose
 * copy thread shares the devices' cores (as here) prefetching does not
 * hide them. Checkpoints are not forecast. pm_select_forecast_make costs
 * every task's passes so (pm_select_task_costs) and simulates each policy
 * over them, with the run's joining (a backward's recomputed forward and W
 * overlap the passes beside it): the one forecast the dry run and
 * bench_select give. */
#define _XOPEN_SOURCE 700 /* pread, pwrite, mkstemp */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "select/internal.h"
#include "train/optim.h"
#include "parts.h"

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

/* ---- a task's passes, costed ------------------------------------------------- */

void pm_select_costs_free(pm_select_costs *c) {
    if (!c) return;
    pm_free(c->shard), pm_free(c->mbs), pm_free(c->compute); /* pos, move ... are in them */
    *c = (pm_select_costs){0};
}

/* Evaluations a task of `steps` steps runs: every eval_every-th step and
 * the last. */
static int64_t evals_of(int64_t steps, int eval_every) {
    return eval_every > 0 ? steps / eval_every + (steps % eval_every != 0) : 1;
}

/* Whether step s (1-based) of `steps` evaluates: every eval_every-th and
 * the last; or, with evals >= 0, `evals` of them spread evenly, the last
 * at the end (an extrapolated forecast keeps a run's share of them). */
static int evaluates(int64_t s, int64_t steps, int eval_every, int64_t evals) {
    if (evals >= 0) return (s * evals) / steps > ((s - 1) * evals) / steps;
    return s == steps || (eval_every > 0 && s % eval_every == 0);
}

/* a's share of total; a pass that makes no FLOPs (the embedding alone in
 * its shard) has none before or after its wait */
static double share(double a, double total) { return total > 0 ? a / total : 0; }

/* Costs pass i of c: shard s, place pos in its round, m microbatches of f
 * FLOPs each, of which fractions lead and trail; first: the shard's first
 * pass since a step ended (AdamW's update, all of its state back), grads:
 * it writes its gradients back. */
static void put_pass(pm_select_costs *c, int64_t i, const pm_select_task *t,
                     const pm_select_rates *r, int s, int pos, int m, double f, double lead,
                     double trail, int first, int grads) {
    double state = (double)t->shard[s].state;
    double in = t->nshard > 1 ? state / r->read_bps : 0;
    double back = first ? state / r->write_bps : grads ? state / 4 / r->write_bps : 0;
    double update = first ? state / 16 * r->adamw_s : 0;
    c->shard[i] = s, c->pos[i] = pos, c->mbs[i] = m;
    c->compute[i] = m * f / r->flops, c->move[i] = in + back + update;
    c->before[i] = in + update, c->after[i] = back;
    c->lead[i] = lead, c->trail[i] = trail;
}

/* t's passes of `steps` steps into c (evals: see evaluates). 1 if out of
 * memory. */
static int costs_build(const pm_select_task *t, int64_t steps, int eval_every, int64_t evals,
                       int eval_batches, const pm_select_rates *r, pm_select_costs *c) {
    int S = t->nshard, K = t->cfg.micro, E = eval_batches > 0 ? eval_batches : 1;
    int ke = E < SEL_EVAL_CHUNK ? E : SEL_EVAL_CHUNK, chunks = (E + ke - 1) / ke;
    int64_t nev = 0;
    for (int64_t s = 1; s <= steps; s++) nev += evaluates(s, steps, eval_every, evals);
    *c = (pm_select_costs){.n = steps * (2 * S - 1) + nev * chunks * S};
    c->shard = pm_malloc((size_t)c->n * 2 * sizeof(int) + 1); /* and pos */
    c->mbs = pm_malloc((size_t)c->n * sizeof(int) + 1);
    c->compute = pm_malloc((size_t)c->n * 6 * sizeof(double) + 1);
    unsigned char *pending = pm_malloc((size_t)S);
    if (!c->shard || !c->mbs || !c->compute || !pending) {
        pm_free(pending);
        pm_select_costs_free(c);
        return 1;
    }
    c->pos = c->shard + c->n;
    c->move = c->compute + c->n, c->before = c->move + c->n, c->after = c->before + c->n;
    c->lead = c->after + c->n, c->trail = c->lead + c->n;
    /* at the start as after a step: a shard's first pass writes all of its
     * state back (it zeroes the gradients; the update it has none of costs
     * little) */
    memset(pending, 1, (size_t)S);
    int64_t i = 0;
    for (int64_t s = 1; s <= steps; s++) {
        for (int k = 0; k < 2 * S - 1; k++, i++) {
            int q = k < S ? k : 2 * S - 2 - k;
            const pm_shard *h = &t->shard[q];
            double w = h->flops_w;
            if (k < S - 1) put_pass(c, i, t, r, q, k, K, h->flops_f, 0, 0, pending[q], 0);
            else if (k == S - 1)
                put_pass(c, i, t, r, q, k, K, h->flops_f + h->flops_bw, 0,
                         share(w, h->flops_f + h->flops_bw), pending[q], 1);
            else
                put_pass(c, i, t, r, q, k, K, 2 * h->flops_f + h->flops_bw,
                         share(h->flops_f, 2 * h->flops_f + h->flops_bw),
                         share(w, 2 * h->flops_f + h->flops_bw), 0, 1);
            pending[q] = 0;
        }
        memset(pending, 1, (size_t)S); /* the step ended: every shard's update is due */
        if (!evaluates(s, steps, eval_every, evals)) continue;
        for (int ch = 0; ch < chunks; ch++)
            for (int q = 0; q < S; q++, i++) {
                int m = E - ch * ke < ke ? E - ch * ke : ke;
                put_pass(c, i, t, r, q, ch * S + q, m, t->shard[q].flops_eval, 0, 0, pending[q],
                         0);
                pending[q] = 0;
            }
    }
    pm_free(pending);
    return 0;
}

pm_status pm_select_task_costs(const pm_select_task *t, int64_t steps, int eval_every,
                               int eval_batches, const pm_select_rates *r, pm_select_costs *out,
                               pm_err *err) {
    if (costs_build(t, steps, eval_every, -1, eval_batches, r, out))
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for task %s's passes", t->name);
    return PM_OK;
}

/* ---- the forecast of a sweep ------------------------------------------------ */

void pm_select_forecast_free(pm_select_forecast *f) {
    if (!f) return;
    pm_free(f->compute);
    pm_free(f->move);
    f->compute = f->move = NULL;
}

/* Each task's passes as the simulator takes them. */
typedef struct {
    int n;
    pm_select_costs *c; /* (n) */
    int64_t *np;
    int **sh, **pos, **mbs, *per, *micro;
    double **co, **be, **af, **ld, **tr;
} costs;

static void costs_free(costs *c) {
    for (int i = 0; i < c->n && c->c; i++) pm_select_costs_free(&c->c[i]);
    pm_free(c->c), pm_free(c->np), pm_free(c->sh), pm_free(c->pos), pm_free(c->mbs);
    pm_free(c->per), pm_free(c->micro), pm_free(c->co), pm_free(c->be), pm_free(c->af);
    pm_free(c->ld), pm_free(c->tr);
}

/* Task i's passes for `steps` of its steps (its evaluations: the run's
 * share of them, evals, spread evenly; all its steps: as the run has
 * them), a pass's cost its compute and moves; the totals of its whole run
 * into f (exact: a step's passes cost the same but after an evaluation,
 * which took AdamW's update and the write-back of its shards), the
 * simulated work into *sim. 1 if out of memory. */
static int task_costs(const pm_select_task *t, const pm_select_rates *r, int every, int batches,
                      int64_t steps, costs *c, int i, pm_select_forecast *f, double *sim) {
    int64_t all = t->cfg.opt.steps, evals = evals_of(all, every);
    /* the whole run's totals from a short one: a step, its evaluation, a
     * step after an evaluation and its evaluation. A step after one costs
     * less (the evaluation applied its shards' updates and wrote them
     * back); the first step and those after a step that did not evaluate
     * are plain; every step but the last that evaluates has one after it */
    pm_select_costs x;
    if (costs_build(t, 2, 1, -1, batches, r, &x)) return 1;
    int64_t np = 2 * t->nshard - 1, ne = (x.n - 2 * np) / 2;
    double plain[2] = {0, 0}, after_ev[2] = {0, 0}, ev[2] = {0, 0}; /* compute, moves */
    for (int64_t k = 0; k < x.n; k++) {
        double *to = k < np ? plain : k < np + ne ? ev : k < 2 * np + ne ? after_ev : NULL;
        if (to) to[0] += x.compute[k], to[1] += x.move[k];
    }
    pm_select_costs_free(&x);
    double n_plain = (double)(all - evals + 1), n_after = (double)(evals - 1), n_ev = (double)evals;
    f->compute[i] = n_plain * plain[0] + n_after * after_ev[0] + n_ev * ev[0];
    f->move[i] = n_plain * plain[1] + n_after * after_ev[1] + n_ev * ev[1];
    pm_select_costs *p = &c->c[i];
    if (costs_build(t, steps, every, steps < all ? (evals * steps + all - 1) / all : -1, batches, r,
                    p))
        return 1;
    c->np[i] = p->n, c->sh[i] = p->shard, c->pos[i] = p->pos, c->mbs[i] = p->mbs;
    c->be[i] = p->before, c->af[i] = p->after, c->ld[i] = p->lead, c->tr[i] = p->trail;
    c->co[i] = p->compute; /* compute and moves, in place: the simulator's cost */
    for (int64_t k = 0; k < p->n; k++) p->compute[k] += p->move[k], *sim += p->compute[k];
    return 0;
}

pm_status pm_select_forecast_make(pm_select_forecast *f, const pm_select_task *t, int n,
                                  int devices, const pm_select_rates *r, int eval_every,
                                  int eval_batches, int no_join, pm_err *err) {
    *f = (pm_select_forecast){.rates = *r, .compute = pm_calloc((size_t)n, sizeof(double)),
                              .move = pm_calloc((size_t)n, sizeof(double))};
    size_t N = (size_t)n;
    costs c = {n,
               pm_calloc(N, sizeof(pm_select_costs)),
               pm_calloc(N, sizeof(int64_t)),
               pm_calloc(N, sizeof(int *)),
               pm_calloc(N, sizeof(int *)),
               pm_calloc(N, sizeof(int *)),
               pm_calloc(N, sizeof(int)),
               pm_calloc(N, sizeof(int)),
               pm_calloc(N, sizeof(double *)),
               pm_calloc(N, sizeof(double *)),
               pm_calloc(N, sizeof(double *)),
               pm_calloc(N, sizeof(double *)),
               pm_calloc(N, sizeof(double *))};
    int bad = !f->compute || !f->move || !c.c || !c.np || !c.sh || !c.pos || !c.mbs || !c.per ||
              !c.micro || !c.co || !c.be || !c.af || !c.ld || !c.tr;
    /* Past PM_SELECT_FORECAST_PASSES passes the policies are simulated over
     * the same fraction of every task's steps (at least one) and their
     * times scaled by the whole run's work over the simulated work: the
     * steps repeat, so the schedule of a fraction of them is that fraction
     * of the whole, but for where the tasks end. */
    double passes = 0, simulated = 0, whole = 0;
    int E = eval_batches > 0 ? eval_batches : 1;
    for (int i = 0; i < n; i++)
        passes += (double)t[i].cfg.opt.steps * (2 * t[i].nshard - 1) +
                  (double)evals_of(t[i].cfg.opt.steps, eval_every) *
                      ((E + SEL_EVAL_CHUNK - 1) / SEL_EVAL_CHUNK) * t[i].nshard;
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
    pm_select_work w = {n,
                        c.np,
                        (const int *const *)c.sh,
                        (const double *const *)c.co,
                        c.per,
                        c.micro,
                        (const double *const *)c.be,
                        (const double *const *)c.af,
                        (const int *const *)c.pos,
                        (const int *const *)c.mbs,
                        (const double *const *)c.ld,
                        (const double *const *)c.tr};
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
