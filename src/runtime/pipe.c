/* pipe.c: the pipeline trainer around the executors: it runs a plan
 * (pm_plan.h), which already holds the schedule, the placement, the
 * per-device arena (slab and offsets, proven by the planner's dry replay
 * against the simulator) and every device's bytes. Here: per-device
 * allocation of exactly those bytes, one step (run the device threads,
 * collect results and figures), and moving parameters in and out. The
 * device threads are in pipe_threads.c, the step's measurements and the
 * forecast in pipe_measure.c, the measured timeline and its writers in
 * pipe_timeline.c. The executor makes the planner's allocation sequence
 * (pm_devmem_pass) at the same points of the real passes, so the arena
 * never needs more than planned. Message buffers (two receive slots, two
 * send buffers, two between-layer gradient buffers, each one (B,T,C)
 * activation) and the scratch sit beside the arena and are not activation
 * memory.
 *
 * State: init -> (step)* -> free. A failed step sets `dead`; later steps
 * return the same error. The p device threads start in init and park
 * between steps (no thread is created in a step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "schedule/sched.h"
#include "util/alloc.h"
#include "model/passes.h"
#include "train/optim.h"
#include "plan/devmem.h"
#include "plan/query.h"
#include "transport.h"
#include "pipe.h"

static void dev_free(pm_pipe_dev *dv) {
    pm_devmem_free(&dv->mem);
    pm_free(dv->slab);
    pm_free(dv->sp);
    pm_free(dv->sg);
    pm_free(dv->sm);
    pm_free(dv->sv);
    pm_free(dv->work);
    pm_free(dv->nbuf);
    pm_free(dv->usum);
    pm_free(dv->ubase);
    pm_free(dv->nreq);
    pm_free(dv->red);
    pm_free(dv->rreq);
    pm_free(dv->greq);
    pm_free(dv->elist);
}


static void pipe_free(pm_pipe *pp) {
    if (!pp) return;
    pm_pipe_pool_free(pp); /* threads first: they use everything below */
    /* MPI next: it may still write into receive buffers; after an abort it
     * may still read a slab a rendezvous send left pending: those stay
     * (leaked on purpose: the process is ending) */
    int keep_slabs = pm_tp_mpi_destroy(pp->mpi);
    if (pp->dev)
        for (int g = 0; g < pp->nd; g++) {
            if (keep_slabs) pp->dev[g].slab = NULL;
            dev_free(&pp->dev[g]);
        }
    pm_free(pp->dev);
    pm_tp_threads_destroy(pp->world);
    pm_plan_free(&pp->plan);
    pm_cost_free(&pp->cost);
    pm_cost_free(&pp->prof);
    pm_sim_free(&pp->pred);
    pm_sim_free(&pp->fcast);
    pm_free(pp->peak);
    pm_free(pp->pred_peak);
    pm_free(pp->busy);
    pm_free(pp->arena_cap);
    pm_free(pp->acct);
    pm_free(pp->hosts);
    pm_free(pp->ck_sums);
    pm_free(pp->t0);
    pm_free(pp->t1);
    pm_free(pp->tmid);
    pm_free(pp->live_after);
    pm_free(pp->red0);
    pm_free(pp->red1);
    pm_free(pp->ar);
    pm_free(pp->prof_ar);
    pm_free(pp->report);
    pm_free(pp->loss_mb);
    pm_free(pp->dep_end);
    pm_free(pp->fwd);
    pm_free(pp->fwd_len);
    *pp = (pm_pipe){0};
}

static pm_status nomem(pm_err *err, const char *what) {
    return pm_errf(err, PM_ERR_NOMEM, "out of memory allocating %s", what);
}

/* Parameters, gradients and moments of the device's stages, initialised:
 * one allocation, params | grads | m | v; under ZeRO-1 m and v hold only
 * the replica's slice of each stage (sm[s], sv[s] point at its start), and
 * a forward-only plan holds the parameters alone. */
static pm_status dev_slab(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    const pm_gpt_config *c = &pp->cfg.model;
    size_t S = (size_t)pp->S, n = 0, nm = 0;
    int fwd = pp->pl->forward_only;
    dv->sp = pm_calloc(S, sizeof(float *));
    dv->sg = pm_calloc(S, sizeof(float *));
    dv->sm = pm_calloc(S, sizeof(float *));
    dv->sv = pm_calloc(S, sizeof(float *));
    if (!dv->sp || !dv->sg || !dv->sm || !dv->sv) return nomem(err, "stage tables");
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        size_t first, count;
        pm_plan_moment_slice(pp->pl, s, dv->rep, &first, &count);
        n += pm_stage_floats(pp, s), nm += count;
    }
    dv->n = n;
    size_t total = fwd ? n : 2 * n + 2 * nm, bytes;
    if (!pm_size_mul(total ? total : 1, sizeof(float), &bytes) || !(dv->slab = pm_alloc_big(bytes)))
        return nomem(err, "a device's parameters");
    memset(dv->slab, 0, bytes);
    size_t at = 0, mat = 0;
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        size_t first, count;
        pm_plan_moment_slice(pp->pl, s, dv->rep, &first, &count);
        dv->sp[s] = dv->slab + at;
        if (!fwd)
            dv->sg[s] = dv->slab + n + at, dv->sm[s] = dv->slab + 2 * n + mat,
            dv->sv[s] = dv->slab + 2 * n + nm + mat;
        for (int l = pp->first[s]; l < pp->first[s + 1]; l++) {
            pm_gpt_init_layer(c, l, pp->cfg.seed, dv->slab + at);
            at += pm_gpt_layer_params(c, l);
        }
        mat += count;
    }
    return PM_OK;
}

/* The device's arena: the plan's slab and offsets (or the test hook's
 * capacity). */
static pm_status dev_arena(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    size_t cap = pp->opts.arena_cap ? pp->opts.arena_cap : pp->pl->arena[dv->d].cap;
    pp->arena_cap[dv->g] = cap;
    return pm_devmem_init(&dv->mem, pp->pl, dv->d, cap ? cap : 1, err);
}

/* Floats of the buffer a partial gradient sum arrives in: one chunk, or
 * the largest stage if that is smaller. */

/* Scratch and message buffers in one allocation. */
static pm_status dev_work(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    size_t scr = pm_plan_scratch_bytes(pp->pl, dv->d), act = pp->pl->msg_bytes;
    scr = (scr + 63) / 64 * 64;
    act = (act + 63) / 64 * 64;
    dv->work = pm_alloc_big(scr + 6 * act);
    dv->nbuf = pm_calloc((size_t)pp->S + 1, sizeof(double));
    dv->ubase = pm_calloc((size_t)pp->S + 1, sizeof(int));
    if (!dv->ubase) return nomem(err, "the norm's tables");
    for (int s = 0; s < pp->S; s++) /* the units of the device's stages, in order */
        dv->ubase[s + 1] = dv->ubase[s] + (pm_sched_stage_device(&pp->sched, s) == dv->d
                                               ? pm_optim_units(&pp->cfg.model, pp->first[s],
                                                                pp->first[s + 1])
                                               : 0);
    dv->usum = pm_calloc((size_t)dv->ubase[pp->S] + 1, sizeof(double));
    dv->nreq = pm_calloc((size_t)(pp->S + pp->nd), sizeof(pm_tp_req));
    if (!dv->work || !dv->nbuf || !dv->nreq || !dv->usum) return nomem(err, "message buffers");
    memset(dv->work, 0, scr + 6 * act);
    dv->scratch = dv->work;
    for (int k = 0; k < 2; k++) {
        dv->rx[k] = (float *)(dv->work + scr + (size_t)k * act);
        dv->tx[k] = (float *)(dv->work + scr + (size_t)(2 + k) * act);
        dv->bb[k] = (float *)(dv->work + scr + (size_t)(4 + k) * act);
    }
    dv->rxpass[0] = dv->rxpass[1] = -1;
    dv->elist = pm_malloc((size_t)pp->fcap * sizeof *dv->elist);
    if (!dv->elist) return nomem(err, "an evaluation list");
    if (pp->dp == 1) return PM_OK;
    dv->rreq = pm_calloc(pm_dev_sum_reqs(dv, pp->S), sizeof(pm_tp_req));
    if (!dv->rreq) return nomem(err, "reduction requests");
    if (pp->pl->zero) { /* every other replica's slices in, its own out to each */
        dv->ngreq = pm_dev_gather_reqs(pp, dv->g);
        dv->greq = pm_calloc(dv->ngreq ? dv->ngreq : 1, sizeof(pm_tp_req));
        if (!dv->greq) return nomem(err, "the parameter slices' requests");
    }
    if (dv->rep == 0) return PM_OK;
    size_t red = pm_plan_red_floats(pp->pl); /* a test's smaller chunk needs less */
    dv->red = pm_malloc((red < pm_chunk(pp) ? red : pm_chunk(pp)) * sizeof(float));
    return dv->red ? PM_OK : nomem(err, "a gradient reduction buffer");
}

/* Each device's forward-only list for evaluation: F of its stages for
 * microbatches 0..m-1 ordered by (microbatch + stage, stage), a wavefront:
 * every pass's input comes from a pass earlier in that order, so no device
 * waits on one that waits on it, and a round of m microbatches leaves at
 * most as many messages unreceived as a training step. */
static pm_status fwd_lists(pm_pipe *pp, pm_err *err) {
    pp->fcap = (int64_t)pp->S * pp->m; /* enough for any device */
    pp->fwd = pm_malloc((size_t)pp->p * (size_t)pp->fcap * sizeof *pp->fwd);
    pp->fwd_len = pm_calloc((size_t)pp->p, sizeof *pp->fwd_len);
    if (!pp->fwd || !pp->fwd_len) return nomem(err, "the evaluation lists");
    for (int t = 0; t < pp->m + pp->S - 1; t++)
        for (int s = 0; s < pp->S; s++) {
            int j = t - s, d = pm_sched_stage_device(&pp->sched, s);
            if (j < 0 || j >= pp->m) continue;
            pp->fwd[(int64_t)d * pp->fcap + pp->fwd_len[d]++] =
                (pm_pass){.kind = PM_PASS_F, .stage = s, .mb = j};
        }
    return PM_OK;
}

/* The step's tables, the cost table (the plan's, whose times each step
 * replaces with its measurements) and both simulations, sized once here: a
 * step only replays them. */
static pm_status tables(pm_pipe *pp, pm_err *err) {
    size_t np = (size_t)pp->nd, nt = np * (size_t)pp->sched.cap, nr = np * (size_t)pp->S;
    pp->peak = pm_calloc(np, sizeof(size_t));
    pp->pred_peak = pm_calloc(np, sizeof(size_t));
    pp->busy = pm_calloc(np, sizeof(double));
    pp->arena_cap = pm_calloc(np, sizeof(size_t));
    pp->acct = pm_calloc(np, sizeof(int64_t));
    pp->hosts = pm_calloc(np, PM_HOST_NAME);
    pp->ck_sums = pm_calloc((size_t)pp->dp * PM_CKPT_SLABS, sizeof *pp->ck_sums);
    pp->t0 = pm_calloc(nt, sizeof(double));
    pp->t1 = pm_calloc(nt, sizeof(double));
    pp->tmid = pm_calloc(nt, sizeof(double));
    pp->live_after = pm_calloc(nt, sizeof(double));
    pp->red0 = pm_calloc(nr, sizeof(double));
    pp->red1 = pm_calloc(nr, sizeof(double));
    pp->loss_mb = pm_calloc((size_t)pp->m * (size_t)pp->dp, sizeof(float));
    pp->dep_end = pm_calloc(2 * (size_t)pp->S * (size_t)pp->m, sizeof(double));
    if (!pp->peak || !pp->pred_peak || !pp->busy || !pp->arena_cap || !pp->acct || !pp->hosts ||
        !pp->ck_sums || !pp->t0 || !pp->t1 ||
        !pp->tmid || !pp->live_after || !pp->red0 || !pp->red1 || !pp->loss_mb || !pp->dep_end)
        return nomem(err, "the pipeline's tables");
    pm_status st = fwd_lists(pp, err);
    if (!st) st = pm_cost_init(&pp->cost, pp->S, err);
    if (!st) st = pm_cost_init(&pp->prof, pp->S, err);
    if (st) return st;
    for (int k = 0; k < pp->S; k++) pp->cost.st[k] = pp->prof.st[k] = pp->pl->cost.st[k];
    if ((st = pm_sim_run(&pp->pred, &pp->sched, &pp->cost, err)) ||
        (st = pm_sim_init(&pp->fcast, &pp->sched, err)))
        return st;
    if (pp->dp > 1) { /* the reductions' tables */
        pp->ar = pm_calloc((size_t)pp->S, sizeof(double));
        pp->prof_ar = pm_calloc((size_t)pp->S, sizeof(double));
        pp->fcast.red_start = pm_malloc((size_t)pp->S * sizeof(double));
        pp->fcast.red_end = pm_malloc((size_t)pp->S * sizeof(double));
        if (!pp->ar || !pp->prof_ar || !pp->fcast.red_start || !pp->fcast.red_end)
            return nomem(err, "the reductions' tables");
        if ((st = pm_sim_dp(&pp->pred, &pp->sched, pp->ar, err))) return st;
    }
    for (int g = 0; g < pp->nd; g++) pp->pred_peak[g] = pp->pl->dev[g].act_peak;
    return PM_OK;
}

/* This process's devices: tables, parameters, arena, buffers. */
static pm_status devices_init(pm_pipe *pp, pm_err *err) {
    pp->dev = pm_calloc((size_t)pp->nd, sizeof *pp->dev);
    if (!pp->dev) return nomem(err, "devices");
    pm_status st = PM_OK;
    for (int g = pp->lo; g < pp->hi && !st; g++) {
        pm_pipe_dev *dv = &pp->dev[g];
        dv->pp = pp, dv->g = g, dv->d = g % pp->p, dv->rep = g / pp->p;
        dv->tp = pm_pipe_endpoint(pp, g);
        int64_t *was = pm_alloc_account(&pp->acct[g]); /* the device's own */
        if (!(st = dev_slab(pp, dv, err)) && !(st = dev_arena(pp, dv, err)))
            st = dev_work(pp, dv, err);
        pm_alloc_account(was);
    }
    return st;
}

/* Under MPI: whether any rank failed so far (every rank calls it at the
 * same point, so none is left waiting in the next collective). */
static pm_status agree(const pm_plan *plan, pm_status st, const char *what, pm_err *err) {
    pm_err silent;
    int bad = plan->transport == PM_TRANSPORT_MPI ? pm_mpi_agree(!st, &silent) : -1;
    if (bad == -2) { /* a rank did not answer: that is the error */
        if (err) *err = silent;
        return PM_ERR_TRANSPORT;
    }
    if (!st && bad >= 0)
        st = pm_errf(err, PM_ERR_NOMEM, "rank %d could not %s (out of memory there?)", bad, what);
    return st;
}

static pm_status pipe_init(pm_pipe *pp, const pm_plan *plan, const pm_pipe_opts *opts,
                           pm_err *err) {
    *pp = (pm_pipe){0};
    pm_status st = pm_plan_copy(&pp->plan, plan, err);
    if (!st) {
        const pm_plan *pl = pp->pl = &pp->plan;
        pp->cfg = pl->cfg, pp->sched = pl->sched, pp->first = pl->first, pp->sz = pl->sz;
        pp->p = pl->p, pp->S = pl->S, pp->m = pl->m, pp->dp = pl->dp, pp->nd = pl->nd;
        pp->mbsz = pl->cfg.batch / pl->cfg.micro, pp->T = pl->cfg.model.ctx;
        if (opts) pp->opts = *opts;
        st = tables(pp, err);
    }
    /* the world's creation is collective under MPI: no rank enters it, or
     * leaves it for the handshake, while another has failed */
    if ((st = agree(plan, st, "make its pipeline's tables", err))) goto fail;
    st = pm_pipe_world_create(pp, err);
    if ((st = agree(plan, st, "create its transport", err))) goto fail;
    /* under MPI a rank that fails here tells the others (the handshake) */
    st = devices_init(pp, err);
    if (!st && !pp->mpi) st = pm_pipe_pool_start(pp, err);
    if ((st = pm_pipe_handshake(pp, st, err))) goto fail;
    /* concurrent sgemm calls from the device threads, each single-threaded:
     * deterministic and independent of how many devices run at once */
    pm_blas_threads(1);
    return PM_OK;
fail:
    pipe_free(pp);
    return st;
}

pm_status pm_pipe_create(pm_pipe **out, const pm_plan *pl, const pm_pipe_opts *opts,
                         pm_err *err) {
    *out = NULL;
    if (!pl) return pm_errf(err, PM_ERR_ARG, "the plan (pl) is NULL; make one with pm_plan_make");
    /* The device threads point at the pipe: it lives on the heap, never moved. */
    pm_pipe *pp = pm_malloc(sizeof *pp);
    if (!pp) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the pipeline");
    pm_status st = pipe_init(pp, pl, opts, err);
    if (st) {
        pm_free(pp);
        return st;
    }
    *out = pp;
    return PM_OK;
}

void pm_pipe_destroy(pm_pipe *pp) {
    if (!pp) return;
    pipe_free(pp);
    pm_free(pp);
}

int pm_pipe_devices(const pm_pipe *pp) { return pp->p; }
int pm_pipe_replicas(const pm_pipe *pp) { return pp->dp; }
int pm_pipe_is_root(const pm_pipe *pp) { return pm_root(pp); }
const pm_train_cfg *pm_pipe_config(const pm_pipe *pp) { return &pp->cfg; }
int pm_pipe_stages(const pm_pipe *pp) { return pp->S; }
const pm_plan *pm_pipe_plan(const pm_pipe *pp) { return pp->pl; }
const int64_t *pm_pipe_allocated(const pm_pipe *pp) { return pp->acct; }
const pm_sched *pm_pipe_schedule(const pm_pipe *pp) { return &pp->sched; }
const char *pm_pipe_host(const pm_pipe *pp, int g) {
    return g >= 0 && g < pp->nd ? pp->hosts + (size_t)g * PM_HOST_NAME : "";
}
int64_t pm_pipe_w_relabeled(const pm_pipe *pp) { return pp->pl->w_relabeled; }
const int *pm_pipe_stage_first(const pm_pipe *pp) { return pp->first; }
const pm_cost *pm_pipe_cost(const pm_pipe *pp) { return &pp->cost; }
const size_t *pm_pipe_predicted_peak(const pm_pipe *pp) { return pp->pred_peak; }
int64_t pm_pipe_steps_done(const pm_pipe *pp) { return pp->step; }
void pm_pipe_set_steps_done(pm_pipe *pp, int64_t steps) { pp->step = steps; }

/* ---- one step -------------------------------------------------------------------- */

static pm_status step_fail(pm_pipe *pp, pm_status st, pm_err *err) {
    pp->dead = st;
    if (err) *err = pp->dead_err;
    return st;
}

static pm_status collect_error(pm_pipe *pp, pm_err *err) {
    pm_status st = pm_tp_status(pp->dev[pp->lo].tp, &pp->dead_err);
    if (st) return step_fail(pp, st, err);
    for (int g = pp->lo; g < pp->hi; g++) {
        const pm_pipe_dev *dv = &pp->dev[g];
        if (dv->st == PM_ERR_NUMERIC) {
            char hint[200];
            pm_errf(&pp->dead_err, PM_ERR_NUMERIC,
                    "step %lld: the gradient norm is %g (not finite); no update was made; %s",
                    (long long)pp->step + 1, dv->norm,
                    pm_optim_diverged_hint(&pp->cfg.opt, "", hint, sizeof hint));
            return step_fail(pp, PM_ERR_NUMERIC, err);
        }
        if (dv->st) {
            pm_errf(&pp->dead_err, dv->st, "device %d: %s", g,
                    dv->err.msg[0] ? dv->err.msg : pm_status_str(dv->st));
            return step_fail(pp, dv->st, err);
        }
    }
    return PM_OK;
}

/* The root's figures of the step just run (the devices' reports are in). */
static void step_figures(pm_pipe *pp, double t_start, const pm_pipe_info *fc) {
    double loss = 0;
    for (int j = 0; j < pp->m * pp->dp; j++) loss += pp->loss_mb[j];
    loss /= pp->m * pp->dp;
    pm_pipe_info *in = &pp->info;
    *in = (pm_pipe_info){.loss = loss, .grad_norm = pp->dev[pp->lo].norm,
                         .lr = pm_optim_lr_at(&pp->cfg.opt, pp->step)};
    in->step_ms = (pm_now() - t_start) * 1e3;
    for (int g = pp->lo; g < pp->hi; g++) pp->peak[g] = pp->dev[g].mem.arena.peak;
    in->peak = pp->peak, in->pred_peak = pp->pred_peak, in->arena = pp->arena_cap;
    for (int g = 0; g < pp->nd; g++) {
        int64_t base = (int64_t)g * pp->sched.cap;
        pp->busy[g] = 0;
        for (int64_t i = 0; i < pp->sched.len[g % pp->p]; i++)
            pp->busy[g] += (pp->t1[base + i] - pp->t0[base + i]) / 1e3;
    }
    in->busy_ms = pp->busy;
    double mk, bub;
    pm_pipe_measure_span(pp, &mk, &bub);
    in->makespan_ms = mk / 1e3, in->bubble = bub;
    in->forecast_makespan_ms = fc->forecast_makespan_ms;
    in->forecast_bubble = fc->forecast_bubble;
    pm_pipe_measure_costs(pp);
    pm_err e2;
    in->pred_makespan_ms = in->pred_bubble = NAN;
    if (!pm_sim_replay(&pp->pred, &pp->sched, &pp->cost, &e2)) { /* the replay */
        in->pred_makespan_ms = pp->pred.makespan / 1e3;
        in->pred_bubble = pp->pred.bubble;
        if (pp->dp > 1 && !pm_sim_dp(&pp->pred, &pp->sched, pp->ar, &e2))
            in->pred_makespan_ms = pp->pred.dp_step / 1e3;
    }
    pm_pipe_profile_add(pp);
}

pm_status pm_pipe_step(pm_pipe *pp, const int32_t *inp, const int32_t *tgt, pm_pipe_info *info,
                       pm_err *err) {
    if (!inp || !tgt)
        return pm_errf(err, PM_ERR_ARG, "the step's %s are NULL", inp ? "targets" : "inputs");
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    if (pp->pl->forward_only)
        return pm_errf(err, PM_ERR_ARG, "this pipeline was planned for forward passes only "
                       "(no gradients or moments): it cannot train");
    pp->T = pp->cfg.model.ctx;
    pm_pipe_info fc;
    pm_pipe_forecast(pp, &fc); /* made before the step runs */
    /* under MPI every rank's clock starts together, so the pass times the
     * root gathers line up as they do with threads */
    pm_status st = pp->mpi ? pm_tp_mpi_barrier(pp->mpi) : PM_OK;
    if (st) {
        pm_tp_status(pp->dev[pp->lo].tp, &pp->dead_err);
        return step_fail(pp, st, err);
    }
    double t_start = pm_now();
    size_t share = (size_t)pp->m * (size_t)pp->mbsz * (size_t)pp->T; /* a replica's tokens */
    for (int g = pp->lo; g < pp->hi; g++) {
        pm_pipe_dev *dv = &pp->dev[g];
        dv->inp = inp + (size_t)dv->rep * share, dv->tgt = tgt + (size_t)dv->rep * share;
        dv->t_base = t_start, dv->st = PM_OK, dv->norm = 0;
    }
    pm_pipe_run(pp, PM_RUN_STEP, pm_dev_step);
    st = collect_error(pp, err);
    if (!st && (st = pm_pipe_report(pp, &pp->dead_err))) return step_fail(pp, st, err);
    if (st) return st;
    if (pm_root(pp)) step_figures(pp, t_start, &fc);
    pp->step++;
    if (info) *info = pp->info;
    return PM_OK;
}

/* ---- evaluation ------------------------------------------------------------------ */

/* Forward passes of n microbatches of T tokens (evaluation, sampling). */
static pm_status run_forward(pm_pipe *pp, const int32_t *inp, const int32_t *tgt, int n, int T,
                             float *probs, pm_err *err) {
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    PM_ASSERT(n >= 0 && n <= pp->m * pp->dp && T >= 1 && T <= pp->cfg.model.ctx);
    pp->T = T; /* messages, layers and token offsets all follow it */
    size_t share = (size_t)pp->m * (size_t)pp->mbsz * (size_t)T;
    for (int g = pp->lo; g < pp->hi; g++) {
        pm_pipe_dev *dv = &pp->dev[g];
        dv->inp = inp + (size_t)dv->rep * share, dv->tgt = tgt ? tgt + (size_t)dv->rep * share : NULL;
        dv->st = PM_OK;
    }
    pp->eval_n = n, pp->probs = probs;
    pm_pipe_run(pp, PM_RUN_EVAL, pm_dev_eval);
    pp->probs = NULL;
    pm_status st = collect_error(pp, err);
    if (!st && (st = pm_pipe_share_losses(pp, n, &pp->dead_err))) return step_fail(pp, st, err);
    return st;
}

pm_status pm_pipe_eval(pm_pipe *pp, const int32_t *inp, const int32_t *tgt, int n,
                       float *losses, pm_err *err) {
    if (!inp || !tgt || !losses || n < 0)
        return pm_errf(err, PM_ERR_ARG, "pm_pipe_eval: inputs, targets and losses must be "
                       "given, n >= 0 (got %d)", n);
    pm_status st = run_forward(pp, inp, tgt, n, pp->cfg.model.ctx, NULL, err);
    if (!st) memcpy(losses, pp->loss_mb, (size_t)n * sizeof *losses);
    return st;
}

pm_status pm_pipe_forward(pm_pipe *pp, const int32_t *tok, int T, float *probs, pm_err *err) {
    if (pp->mbsz != 1 || pm_gpt_head_parts(&pp->cfg.model) != 1 || pp->mpi)
        return pm_errf(err, PM_ERR_ARG, "sampling through the pipeline needs one sequence per "
                       "microbatch, the head in one part and device threads (this pipeline "
                       "has %d sequences, %d head parts%s)", pp->mbsz,
                       pm_gpt_head_parts(&pp->cfg.model), pp->mpi ? ", MPI" : "");
    if (T < 1 || T > pp->cfg.model.ctx)
        return pm_errf(err, PM_ERR_ARG, "sampling: %d tokens, the model takes 1 to %d", T,
                       pp->cfg.model.ctx);
    return run_forward(pp, tok, NULL, 1, T, probs, err);
}

/* ---- parameters in -------------------------------------------------------------- */

void pm_pipe_scatter(pm_pipe *pp, const float *params, const float *m, const float *v) {
    for (int g = pp->lo; g < pp->hi; g++) {
        pm_pipe_dev *dv = &pp->dev[g];
        for (int s = 0; s < pp->S; s++) {
            if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
            size_t off = pm_gpt_layer_offset(&pp->cfg.model, pp->first[s]), n = pm_stage_floats(pp, s);
            memcpy(dv->sp[s], params + off, n * sizeof(float));
            if (!dv->sm[s]) continue; /* forward only: no moments */
            size_t first, count; /* ZeRO-1: the replica's slice */
            pm_plan_moment_slice(pp->pl, s, dv->rep, &first, &count);
            if (m) memcpy(dv->sm[s], m + off + first, count * sizeof(float));
            else memset(dv->sm[s], 0, count * sizeof(float));
            if (v) memcpy(dv->sv[s], v + off + first, count * sizeof(float));
            else memset(dv->sv[s], 0, count * sizeof(float));
        }
    }
}
