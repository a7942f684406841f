/* pipe.c: the pipeline trainer around the executors: checks and placement,
 * the memory prediction and arena sizing, per-device allocation, one step
 * (run the device threads, collect results and figures), and gathering the
 * parameters back into one slab. The device threads are in pipe_threads.c,
 * the step's measurements and the forecast in pipe_measure.c, the measured
 * timeline and its writers in pipe_timeline.c.
 *
 * Sizing: the simulator is run with the model's exact per-stage byte deltas
 * (pm_place_costs); its per-device peak is the predicted peak. Each device's
 * arena is then sized by replaying its pass list on a dry arena with the
 * executor's own bookkeeping calls (pm_dev_mem_*): the dry run's peak of live
 * bytes must equal the prediction (checked: a mismatch is a bug). The dry
 * run also logs every block's life; the offline planner (pm_arena_plan)
 * places them, a second dry replay proves the plan, and the capacity is the
 * smaller of the plan's slab and first fit's highest end offset (live bytes
 * plus 64-byte rounding and fragmentation). The real step makes the same
 * calls in the same order, so it never needs more. Message buffers (two receive slots,
 * two send buffers, two between-layer gradient buffers, each one (B,T,C)
 * activation) and the scratch are allocated per device beside the arena and
 * are not activation memory.
 *
 * State: init -> (step)* -> free. A failed step sets `dead`; later steps
 * return the same error. The p device threads start in init and park
 * between steps (no thread is created in a step). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

static void dev_free(pm_pipe_dev *dv) {
    pm_arena_free(&dv->arena);
    pm_free(dv->off);
    pm_free(dv->koff);
    pm_free(dv->slab);
    pm_free(dv->sp);
    pm_free(dv->sg);
    pm_free(dv->sm);
    pm_free(dv->sv);
    pm_free(dv->work);
    pm_free(dv->nbuf);
    pm_free(dv->nreq);
    pm_free(dv->red);
    pm_free(dv->rreq);
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
    pm_sched_free(&pp->sched);
    pm_cost_free(&pp->cost);
    pm_cost_free(&pp->prof);
    pm_sim_free(&pp->pred);
    pm_sim_free(&pp->fcast);
    pm_free(pp->first);
    pm_free(pp->sz);
    pm_free(pp->peak);
    pm_free(pp->pred_peak);
    pm_free(pp->busy);
    pm_free(pp->arena_cap);
    pm_free(pp->arena_ff);
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
    *pp = (pm_pipe){0};
}

/* Weight passes of one stage are interchangeable: same cost, same bytes
 * released. So where a schedule lists a stage's W passes out of microbatch
 * order (zb-v's cool-down does), the runtime keeps their positions and hands
 * them the stage's microbatches in ascending order: timing and memory are
 * unchanged and gradients accumulate in the single-device order. Stages with
 * fused BW passes cannot be relabelled (B is not interchangeable). Returns
 * the number of passes relabelled; the caller validates the result. */
static int64_t normalize_w(pm_sched *s) {
    int64_t changed = 0;
    for (int d = 0; d < s->p; d++) {
        pm_pass *ps = pm_sched_dev(s, d);
        for (int st = 0; st < s->S; st++) {
            int next = 0, has_bw = 0;
            for (int64_t i = 0; i < s->len[d]; i++)
                has_bw |= ps[i].stage == st && ps[i].kind == PM_PASS_BW;
            if (has_bw) continue;
            /* the W microbatches of this stage, in list order, get 0, 1, ... in turn
             * only if the stage has exactly one W per microbatch (validated) */
            for (int64_t i = 0; i < s->len[d]; i++)
                if (ps[i].stage == st && ps[i].kind == PM_PASS_W) {
                    if (ps[i].mb != next) changed++;
                    ps[i].mb = next++;
                }
        }
    }
    return changed;
}

/* Every stage's weight passes must run in microbatch order, or gradient
 * accumulation order (and so the last bits) would differ from one device. */
static pm_status check_w_order(const pm_sched *s, pm_err *err) {
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            if (ps[i].kind != PM_PASS_W && ps[i].kind != PM_PASS_BW) continue;
            for (int64_t k = i + 1; k < s->len[d]; k++)
                if ((ps[k].kind == PM_PASS_W || ps[k].kind == PM_PASS_BW) &&
                    ps[k].stage == ps[i].stage && ps[k].mb < ps[i].mb)
                    return pm_errf(err, PM_ERR_INVALID,
                                   "schedule %s: device %d runs the weight pass of stage %d for "
                                   "microbatch %d (#%lld) after microbatch %d (#%lld); the "
                                   "runtime accumulates weight gradients in microbatch order "
                                   "(bitwise equal to one device), so reorder those passes",
                                   s->kind, d, ps[i].stage, ps[k].mb, (long long)k, ps[i].mb,
                                   (long long)i);
        }
    }
    return PM_OK;
}

static pm_status check_cfg(const pm_train_cfg *cfg, const pm_sched *s, int dp, pm_err *err) {
    pm_status st = pm_gpt_config_check(&cfg->model, err);
    if (st) return st;
    if (cfg->micro < 1 || cfg->batch < 1 || cfg->batch % cfg->micro)
        return pm_errf(err, PM_ERR_ARG, "--microbatches %d must divide --batch %d", cfg->micro,
                       cfg->batch);
    if (dp < 1 || dp > 4096) return pm_errf(err, PM_ERR_ARG, "--dp %d: must be 1..4096", dp);
    if (cfg->micro % dp)
        return pm_errf(err, PM_ERR_ARG, "--dp %d must divide --microbatches %d (each replica "
                       "runs an equal share)", dp, cfg->micro);
    if (s->m != cfg->micro / dp)
        return pm_errf(err, PM_ERR_ARG,
                       "the schedule has %d microbatches but each of the %d replicas runs %d; "
                       "make them equal (--microbatches)", s->m, dp, cfg->micro / dp);
    if (cfg->opt.steps < 1) return pm_errf(err, PM_ERR_ARG, "steps must be >= 1");
    return pm_sched_validate(s, NULL, 0, err);
}

static pm_status nomem(pm_err *err, const char *what) {
    return pm_errf(err, PM_ERR_NOMEM, "out of memory allocating %s", what);
}

/* Parameters, gradients and moments of the device's stages, initialised. */
static pm_status dev_slab(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    const pm_gpt_config *c = &pp->cfg.model;
    size_t S = (size_t)pp->S, n = 0;
    dv->sp = pm_calloc(S, sizeof(float *));
    dv->sg = pm_calloc(S, sizeof(float *));
    dv->sm = pm_calloc(S, sizeof(float *));
    dv->sv = pm_calloc(S, sizeof(float *));
    if (!dv->sp || !dv->sg || !dv->sm || !dv->sv) return nomem(err, "stage tables");
    for (int s = 0; s < pp->S; s++)
        if (pm_sched_stage_device(&pp->sched, s) == dv->d)
            for (int l = pp->first[s]; l < pp->first[s + 1]; l++) n += pm_gpt_layer_params(c, l);
    dv->n = n;
    dv->slab = pm_calloc(4 * (n ? n : 1), sizeof(float));
    if (!dv->slab) return nomem(err, "a device's parameters");
    size_t at = 0;
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        dv->sp[s] = dv->slab + at, dv->sg[s] = dv->slab + n + at;
        dv->sm[s] = dv->slab + 2 * n + at, dv->sv[s] = dv->slab + 3 * n + at;
        for (int l = pp->first[s]; l < pp->first[s + 1]; l++) {
            pm_gpt_init_layer(c, l, pp->cfg.seed, dv->slab + at);
            at += pm_gpt_layer_params(c, l);
        }
    }
    return PM_OK;
}

/* Replays the device's list on dv->arena (dry, first fit or a plan). */
static pm_status replay(pm_pipe *pp, pm_pipe_dev *dv) {
    const pm_pass *ps = pm_sched_dev(&pp->sched, dv->d);
    for (int64_t i = 0; i < pp->sched.len[dv->d]; i++) {
        int bad;
        for (int ph = PM_MEM_PRE; ph <= PM_MEM_WDONE; ph++)
            if (pm_dev_mem(dv, &ps[i], (pm_mem_phase)ph, &bad)) return PM_ERR_MEMLIMIT;
    }
    return PM_OK;
}

/* Sizes the device's arena: a dry first-fit replay logs every block's life
 * and must peak at the prediction; the planner places the same blocks
 * offline; a second dry replay proves the plan; the smaller slab wins. */
static pm_status dev_arena(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    size_t nl = (size_t)pm_gpt_num_layers(&pp->cfg.model), maxb = 0, nlog = 0, nkeep = 0;
    for (int s = 0; s < pp->S; s++)
        if (pm_sched_stage_device(&pp->sched, s) == dv->d) {
            maxb += (size_t)(pp->first[s + 1] - pp->first[s]) * (size_t)pp->m;
            nkeep += pm_dev_keep_bytes(pp, s) ? (size_t)pp->m : 0;
        }
    /* every (layer, mb) of the device is allocated once per step, twice when
     * recomputed, and each kept input once */
    nlog = maxb * (pp->sched.recompute ? 2 : 1) + nkeep;
    maxb += nkeep;
    dv->off = pm_calloc(nl * (size_t)pp->m, sizeof(size_t));
    dv->koff = pm_calloc((size_t)pp->S * (size_t)pp->m, sizeof(size_t));
    size_t *plan = pm_malloc((nlog ? nlog : 1) * sizeof *plan);
    pm_status st = PM_OK;
    if (!dv->off || !dv->koff || !plan) {
        pm_free(plan);
        return nomem(err, "arena offsets");
    }
    if ((st = pm_arena_init_dry(&dv->arena, maxb, nlog, err))) goto done;
    PM_ASSERT(!replay(pp, dv));
    size_t peak = dv->arena.peak, ff = dv->arena.high, live = dv->arena.live, cap = 0;
    if (peak != pp->pred_peak[dv->g] || live != 0) {
        st = pm_errf(err, PM_ERR_INVALID,
                     "device %d: replaying the schedule gives a peak of %zu activation bytes "
                     "(%zu left at the end) but the simulator predicts %zu (a runtime bug)",
                     dv->g, peak, live, pp->pred_peak[dv->g]);
        goto done;
    }
    if ((st = pm_arena_plan(dv->arena.log, dv->arena.nlog, plan, &cap, err))) goto done;
    size_t nplan = dv->arena.nlog;
    pm_arena_free(&dv->arena);
    int use_plan = cap < ff;
    if (use_plan) {
        if ((st = pm_arena_init_dry(&dv->arena, maxb, nlog, err)) ||
            (st = pm_arena_use_plan(&dv->arena, plan, nplan, err)))
            goto done;
        dv->arena.cap = cap;
        if (replay(pp, dv) || dv->arena.high > cap) {
            st = pm_errf(err, PM_ERR_INVALID, "device %d: the arena plan (%zu bytes, first fit "
                         "%zu) does not replay: stopped at allocation %zu (a runtime bug)", dv->g,
                         cap, ff, dv->arena.next);
            goto done;
        }
        pm_arena_free(&dv->arena);
    }
    pp->arena_cap[dv->g] = pp->opts.arena_cap ? pp->opts.arena_cap : use_plan ? cap : ff;
    pp->arena_ff[dv->g] = ff;
    if ((st = pm_arena_init(&dv->arena, pp->arena_cap[dv->g], maxb, err))) goto done;
    if (use_plan) st = pm_arena_use_plan(&dv->arena, plan, nplan, err);
done:
    pm_free(plan);
    return st;
}

size_t pm_stage_floats(const pm_pipe *pp, int s) {
    const pm_gpt_config *c = &pp->cfg.model;
    int b = pp->first[s + 1];
    size_t end = b < pm_gpt_num_layers(c) ? pm_gpt_layer_offset(c, b) : pm_gpt_num_params(c);
    return end - pm_gpt_layer_offset(c, pp->first[s]);
}

/* Floats of the buffer a partial gradient sum arrives in: one chunk, or
 * the largest stage if that is smaller. */
static size_t red_floats(const pm_pipe *pp) {
    size_t n = 1;
    for (int s = 0; s < pp->S; s++)
        if (pm_stage_floats(pp, s) > n) n = pm_stage_floats(pp, s);
    return n < pm_chunk(pp) ? n : pm_chunk(pp);
}

/* Scratch and message buffers in one allocation. */
static pm_status dev_work(pm_pipe *pp, pm_pipe_dev *dv, pm_err *err) {
    size_t scr = 0, act = pm_msg_bytes(pp);
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        for (int l = pp->first[s]; l < pp->first[s + 1]; l++) {
            const pm_gpt_sizes *z = &pp->sz[l];
            size_t m = z->scratch_f > z->scratch_b ? z->scratch_f : z->scratch_b;
            if (z->scratch_w > m) m = z->scratch_w;
            if (m > scr) scr = m;
        }
    }
    scr = (scr + 63) / 64 * 64;
    act = (act + 63) / 64 * 64;
    dv->work = pm_aligned_alloc(64, scr + 6 * act);
    dv->nbuf = pm_calloc((size_t)pp->S + 1, sizeof(double));
    dv->nreq = pm_calloc((size_t)(pp->S + pp->p), sizeof(pm_tp_req));
    if (!dv->work || !dv->nbuf || !dv->nreq) return nomem(err, "message buffers");
    memset(dv->work, 0, scr + 6 * act);
    dv->scratch = dv->work;
    for (int k = 0; k < 2; k++) {
        dv->rx[k] = (float *)(dv->work + scr + (size_t)k * act);
        dv->tx[k] = (float *)(dv->work + scr + (size_t)(2 + k) * act);
        dv->bb[k] = (float *)(dv->work + scr + (size_t)(4 + k) * act);
    }
    dv->rxpass[0] = dv->rxpass[1] = -1;
    if (pp->dp == 1) return PM_OK;
    dv->rreq = pm_calloc(pm_dev_sum_reqs(dv, pp->S), sizeof(pm_tp_req));
    if (!dv->rreq) return nomem(err, "reduction requests");
    if (dv->rep == 0) return PM_OK;
    dv->red = pm_malloc(red_floats(pp) * sizeof(float));
    return dv->red ? PM_OK : nomem(err, "a gradient reduction buffer");
}

/* Placement, sizes, the byte-delta cost table and the memory prediction. */
static pm_status plan(pm_pipe *pp, pm_err *err) {
    const pm_gpt_config *c = &pp->cfg.model;
    int nl = pm_gpt_num_layers(c);
    size_t np = (size_t)pp->nd, nt = np * (size_t)pp->sched.cap, nr = np * (size_t)pp->S;
    pp->first = pm_malloc(((size_t)pp->S + 1) * sizeof(int));
    pp->sz = pm_calloc((size_t)nl, sizeof(pm_gpt_sizes));
    pp->peak = pm_calloc(np, sizeof(size_t));
    pp->pred_peak = pm_calloc(np, sizeof(size_t));
    pp->busy = pm_calloc(np, sizeof(double));
    pp->arena_cap = pm_calloc(np, sizeof(size_t));
    pp->arena_ff = pm_calloc(np, sizeof(size_t));
    pp->t0 = pm_calloc(nt, sizeof(double));
    pp->t1 = pm_calloc(nt, sizeof(double));
    pp->tmid = pm_calloc(nt, sizeof(double));
    pp->live_after = pm_calloc(nt, sizeof(double));
    pp->red0 = pm_calloc(nr, sizeof(double));
    pp->red1 = pm_calloc(nr, sizeof(double));
    pp->loss_mb = pm_calloc((size_t)pp->m * (size_t)pp->dp, sizeof(float));
    pp->dep_end = pm_calloc(2 * (size_t)pp->S * (size_t)pp->m, sizeof(double));
    if (!pp->first || !pp->sz || !pp->peak || !pp->pred_peak || !pp->busy || !pp->arena_cap || !pp->arena_ff || !pp->t0 ||
        !pp->t1 || !pp->tmid || !pp->live_after || !pp->red0 || !pp->red1 || !pp->loss_mb ||
        !pp->dep_end)
        return nomem(err, "the pipeline's tables");
    const pm_layer_costs *lc = pp->opts.place.unit ? &pp->opts.place : NULL;
    pm_status st = pm_place_layers(c, pp->mbsz, pp->T, &pp->sched, lc, pp->first, err);
    for (int l = 0; l < nl && !st; l++) st = pm_gpt_layer_sizes(c, l, pp->mbsz, pp->T, &pp->sz[l], err);
    if (!st) st = pm_place_costs(c, pp->mbsz, pp->T, pp->first, pp->S, pp->sched.recompute, &pp->cost,
                                   err);
    /* Both simulations are sized once here; a step only replays them. */
    if (!st) st = pm_sim_run(&pp->pred, &pp->sched, &pp->cost, err);
    if (!st) st = pm_sim_init(&pp->fcast, &pp->sched, err);
    if (!st) st = pm_cost_init(&pp->prof, pp->S, err);
    if (st) return st;
    for (int k = 0; k < pp->S; k++) pp->prof.st[k] = pp->cost.st[k];
    if (pp->dp > 1) { /* the reductions' tables, sized here: a step allocates nothing */
        pp->ar = pm_calloc((size_t)pp->S, sizeof(double));
        pp->prof_ar = pm_calloc((size_t)pp->S, sizeof(double));
        pp->fcast.red_start = pm_malloc((size_t)pp->S * sizeof(double));
        pp->fcast.red_end = pm_malloc((size_t)pp->S * sizeof(double));
        if (!pp->ar || !pp->prof_ar || !pp->fcast.red_start || !pp->fcast.red_end)
            return nomem(err, "the reductions' tables");
        if ((st = pm_sim_dp(&pp->pred, &pp->sched, pp->ar, err))) return st;
    }
    for (int g = 0; g < pp->nd; g++) pp->pred_peak[g] = (size_t)pp->pred.peak[g % pp->p];
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
        if (!(st = dev_slab(pp, dv, err)) && !(st = dev_arena(pp, dv, err)))
            st = dev_work(pp, dv, err);
    }
    return st;
}

static pm_status pipe_init(pm_pipe *pp, const pm_train_cfg *cfg, const pm_sched *s,
                           const pm_pipe_opts *opts, pm_err *err) {
    *pp = (pm_pipe){0};
    if (opts) pp->opts = *opts;
    pp->dp = pp->opts.dp > 1 ? pp->opts.dp : 1;
    pm_status st = check_cfg(cfg, s, pp->dp, err);
    if (st) return st;
    pp->cfg = *cfg;
    pp->p = s->p, pp->S = s->S, pp->m = s->m, pp->nd = pp->dp * s->p;
    pp->mbsz = cfg->batch / cfg->micro, pp->T = cfg->model.ctx;
    if ((st = pm_sched_copy(&pp->sched, s, err))) return st;
    pp->w_relabeled = normalize_w(&pp->sched);
    pm_err why;
    if (pp->w_relabeled && (st = pm_sched_validate(&pp->sched, NULL, 0, &why))) {
        pm_errf(err, st, "schedule %s: running its weight passes in microbatch order breaks "
                "it (%s)", s->kind, why.msg);
        goto fail;
    }
    if ((st = check_w_order(&pp->sched, err))) goto fail;
    st = plan(pp, err);
    /* Under MPI the world's creation is collective: a rank whose plan failed
     * (out of memory) must not leave the others waiting in it for ever */
    int bad = pp->opts.transport == PM_TRANSPORT_MPI ? pm_mpi_agree(!st) : -1;
    if (!st && bad >= 0)
        st = pm_errf(err, PM_ERR_NOMEM, "rank %d could not plan its device's activation "
                     "memory (out of memory there?)", bad);
    if (st || (st = pm_pipe_world_create(pp, err))) goto fail;
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

pm_status pm_pipe_create(pm_pipe **out, const pm_train_cfg *cfg, const pm_sched *s,
                         const pm_pipe_opts *opts, pm_err *err) {
    *out = NULL;
    /* The device threads point at the pipe: it lives on the heap, never moved. */
    pm_pipe *pp = pm_malloc(sizeof *pp);
    if (!pp) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the pipeline");
    pm_status st = pipe_init(pp, cfg, s, opts, err);
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
int pm_pipe_is_root(const pm_pipe *pp) { return pp->lo == 0; }
const pm_train_cfg *pm_pipe_config(const pm_pipe *pp) { return &pp->cfg; }
int pm_pipe_stages(const pm_pipe *pp) { return pp->S; }
const pm_sched *pm_pipe_schedule(const pm_pipe *pp) { return &pp->sched; }
int64_t pm_pipe_w_relabeled(const pm_pipe *pp) { return pp->w_relabeled; }
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
            pm_errf(&pp->dead_err, PM_ERR_NUMERIC,
                    "step %lld: the gradient norm is %g (not finite); no update was made; lower "
                    "--lr", (long long)pp->step + 1, dv->norm);
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
    for (int g = pp->lo; g < pp->hi; g++) pp->peak[g] = pp->dev[g].arena.peak;
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
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
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
    if (pp->mpi) pm_dev_main(&pp->dev[pp->lo]);
    else pm_pipe_pool_run(pp);
    st = collect_error(pp, err);
    if (!st && (st = pm_pipe_report(pp, &pp->dead_err))) return step_fail(pp, st, err);
    if (st) return st;
    if (pm_pipe_is_root(pp)) step_figures(pp, t_start, &fc);
    pp->step++;
    if (info) *info = pp->info;
    return PM_OK;
}

/* ---- parameters in -------------------------------------------------------------- */

void pm_pipe_scatter(pm_pipe *pp, const float *params, const float *m, const float *v) {
    for (int g = pp->lo; g < pp->hi; g++) {
        pm_pipe_dev *dv = &pp->dev[g];
        for (int s = 0; s < pp->S; s++) {
            if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
            size_t off = pm_gpt_layer_offset(&pp->cfg.model, pp->first[s]), n = pm_stage_floats(pp, s);
            memcpy(dv->sp[s], params + off, n * sizeof(float));
            if (m) memcpy(dv->sm[s], m + off, n * sizeof(float));
            else memset(dv->sm[s], 0, n * sizeof(float));
            if (v) memcpy(dv->sv[s], v + off, n * sizeof(float));
            else memset(dv->sv[s], 0, n * sizeof(float));
        }
    }
}
