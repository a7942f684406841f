/* cmd_train_pp.c: `pipemem train --pp P ...`: the same training as
 * `pipemem train` (same data, loader, optimizer, checkpoints, bitwise the
 * same losses), run by the pipeline runtime on P device threads under a
 * schedule: generated (--schedule KIND [--chunks V] [--mem-limit X]), read
 * from a file (--schedule-file FILE: text or CSV in PyTorch's action
 * grammar), or `--schedule auto --mem-limit X`: one profiling step of zb-h1
 * measures the F, B, W times, the model gives the exact memory deltas, and
 * pm_sched_search picks the fastest schedule under the limit.
 *
 * A host pm_trainer holds the loader, validation and checkpoint state: the
 * batches come from its loader, evaluation and --save gather the devices'
 * parameters and moments into it, --resume scatters them out.
 *
 * Per step the runtime reports measured makespan and bubble and the
 * simulator's prediction from the same step's per-stage pass times; the
 * --json summary gives their means over the steps after the first (cold)
 * one, and the peak activation bytes per device, measured and predicted.
 * --trace FILE and --timeline FILE.svg write the last step's measured
 * timeline. The options are parsed with the single-device ones, in
 * train_opts.c; pm_cmd_train hands pipeline runs here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_runtime.h"
#include "train_opts.h"

/* Where the devices run: pipe options shared by every pipe of the run
 * (transport, replicas, the data's identity), and this process's rank. */
typedef struct {
    pm_pipe_opts opts;
    int rank; /* 0 with threads */
} pp_world;

/* Device-share costs: one zb-h1 step on the real model, per-stage means.
 * Under MPI only rank 0 measured them: it sends them to every rank, so all
 * search the same way and pick the same schedule. */
static pm_status profile(const pp_world *w, const pm_train_cfg *cfg, int p, pm_trainer *host,
                         pm_costs *t, pm_err *err) {
    pm_sched_req req = {.p = p, .m = cfg->micro / w->opts.dp, .t = PM_COSTS_DEFAULT,
                        .mem = PM_MEM_DEFAULT};
    pm_sched s;
    pm_status st = pm_sched_generate(&s, "zb-h1", &req, err);
    if (st) return st;
    pm_pipe *pp;
    if (!(st = pm_pipe_create(&pp, cfg, &s, &w->opts, err))) {
        pm_loader ld = host->train; /* a copy: profiling does not consume data */
        pm_loader_next(&ld, cfg->batch, host->inp, host->tgt);
        if (!(st = pm_pipe_step(pp, host->inp, host->tgt, NULL, err))) {
            const pm_cost *c = pm_pipe_cost(pp);
            *t = (pm_costs){0, 0, 0, 0};
            for (int k = 0; k < c->S; k++) {
                t->f += c->st[k].tf / c->S;
                t->b += c->st[k].tb / c->S;
                t->w += c->st[k].tw / c->S;
            }
            if (w->opts.transport == PM_TRANSPORT_MPI) st = pm_mpi_bcast(t, sizeof *t, err);
        }
        pm_pipe_destroy(pp);
    }
    pm_sched_free(&s);
    return st;
}

/* The model's memory deltas as fractions of one device's share of one
 * microbatch's activation; recomputed, each of a device's v stages keeps one
 * block's input. */
static pm_mem model_mem(const pm_train_cfg *cfg, int p, int v) {
    double saved = 0, saved_w = 0, in = 0;
    int B = cfg->batch / cfg->micro;
    for (int l = 0; l < pm_gpt_num_layers(&cfg->model); l++) {
        pm_gpt_sizes z;
        if (pm_gpt_layer_sizes(&cfg->model, l, B, cfg->model.ctx, &z, NULL)) continue;
        saved += (double)z.saved, saved_w += (double)z.saved_w;
        if (l == 1) in = (double)z.in;
    }
    double keep = (double)v * p * in / saved;
    return (pm_mem){1.0, -(saved - saved_w) / saved, -saved_w / saved, keep < 1 ? keep : 1};
}

/* Peak activation of schedule s on the real model, the layers placed as
 * the runtime places them, each stage's exact byte deltas: the largest
 * device's (x M) and each device's in bytes, with its state's bytes (both
 * NULL: not wanted). */
static pm_status real_peak(const pp_world *w, const pm_train_cfg *cfg, const pm_sched *s,
                           double *peak, double *bytes, double *state, pm_err *err) {
    int mb = cfg->batch / cfg->micro, *first = pm_malloc((size_t)(s->S + 1) * sizeof *first);
    if (!first) return pm_errf(err, PM_ERR_NOMEM, "out of memory placing %d stages", s->S);
    pm_cost c = {0};
    pm_sim sim = {0};
    const pm_layer_costs *lc = w->opts.place.unit ? &w->opts.place : NULL;
    pm_status st = pm_place_layers(&cfg->model, mb, cfg->model.ctx, s, lc, first, err);
    if (!st) st = pm_place_costs(&cfg->model, mb, cfg->model.ctx, first, s->S, s->recompute,
                                   &c, err);
    if (!st) st = pm_sim_run(&sim, s, &c, err);
    if (!st) *peak = pm_sim_peak_max_x(&sim);
    for (int d = 0; !st && bytes && d < s->p; d++) bytes[d] = sim.peak[d], state[d] = 0;
    for (int k = 0; !st && bytes && k < s->S; k++) /* parameters, gradients, AdamW moments */
        for (int l = first[k]; l < first[k + 1]; l++)
            state[pm_sched_stage_device(s, k)] +=
                4.0 * sizeof(float) * (double)pm_gpt_layer_params(&cfg->model, l);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_free(first);
    return st;
}

/* Refuses, before anything big is allocated, a run this machine cannot
 * hold: the host's copy (pm_train_mem_bytes) plus the devices' parameters,
 * gradients and moments and their activation peaks (s NULL: before the
 * schedule is known, without the activations). With threads every device
 * is in this process; under MPI each rank holds a host copy and its
 * device, and the ranks mpirun put on this machine share its memory. */
static pm_status check_fits(const pp_world *w, const pm_train_cfg *cfg, const pm_sched *s,
                            pm_err *err) {
    double x, act = 0, state = 0, host = (double)pm_train_mem_bytes(cfg, NULL);
    if (!host) return PM_OK; /* a bad configuration: pm_trainer_init says what */
    int mpi = w->opts.transport == PM_TRANSPORT_MPI, dp = w->opts.dp > 1 ? w->opts.dp : 1;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    double local = mpi && ls && atoi(ls) > 0 ? atoi(ls) : 1; /* ranks on this machine */
    if (!s && !mpi) state = 4.0 * sizeof(float) * (double)pm_gpt_num_params(&cfg->model) * dp;
    if (s) {
        double *peaks = pm_malloc(2 * (size_t)s->p * sizeof *peaks), *st_b = peaks + s->p;
        if (!peaks) return pm_errf(err, PM_ERR_NOMEM, "out of memory");
        pm_status st = real_peak(w, cfg, s, &x, peaks, st_b, err);
        for (int d = 0; !st && d < s->p; d++) {
            if (!mpi) act += dp * peaks[d], state += dp * st_b[d];
            else if (peaks[d] + st_b[d] > act + state) act = peaks[d], state = st_b[d];
        }
        pm_free(peaks);
        if (st) return st;
    }
    host *= local, state *= local, act *= local;
    double need = host + state + act, have = (double)pm_mem_physical(), G = 1 << 30;
    if (have > 0 && need > have)
        return pm_errf(err, PM_ERR_MEMLIMIT, "train: the pipeline needs %s%.2f GiB%s (%.2f for "
                       "the host's copy of the model, %.2f for the devices' parameters, "
                       "gradients and AdamW moments, %s%.2f for their activations) but this "
                       "machine has %.2f GiB; use a smaller model, more --microbatches or a "
                       "schedule with less memory (--mem-limit)", s ? "" : "over ", need / G,
                       mpi ? " for the ranks on this machine" : "", host / G, state / G,
                       s ? "" : "more than ", act / G, have / G);
    return PM_OK;
}

/* The layer costs the placement balances: measured on rank 0 (one
 * microbatch of each layer kind) and sent to every rank, so all place
 * alike; with --placement flops none (the placement counts FLOPs). */
static pm_status place_costs(pp_world *w, const pm_cli_train_opts *o, const pm_train_cfg *cfg,
                             pm_err *err) {
    if (o->placement && !strcmp(o->placement, "flops")) return PM_OK;
    pm_layer_costs *lc = &w->opts.place;
    pm_status st = w->rank ? PM_OK
                           : pm_place_measure(&cfg->model, cfg->batch / cfg->micro,
                                              cfg->model.ctx, lc, err);
    if (w->opts.transport != PM_TRANSPORT_MPI) return st;
    if (pm_mpi_agree(!st) >= 0)
        return st ? st : pm_errf(err, PM_ERR_NOMEM, "rank 0 could not measure the layers");
    st = pm_mpi_bcast(lc->k, sizeof lc->k, err);
    lc->unit = "s";
    return st;
}

/* The head's parts (--head-parts, or the fewest that bring the busiest
 * device's time within 1% of the best any number of parts gives), set in
 * cfg. Any number computes the same training; this is placement only.
 * Under auto a pick whose real peak the parts push over --mem-limit keeps
 * the head whole. */
static pm_status choose_head_parts(const pp_world *w, const pm_cli_train_opts *o,
                                   pm_train_cfg *cfg, const pm_sched *s, pm_err *err) {
    pm_gpt_config *mc = &cfg->model;
    int G = pm_gpt_head_groups(mc), mb = cfg->batch / cfg->micro;
    if (o->head_parts) {
        mc->head_parts = o->head_parts;
        return pm_gpt_config_check(mc, err);
    }
    const pm_layer_costs *lc = w->opts.place.unit ? &w->opts.place : NULL;
    double *t = pm_malloc(2 * (size_t)s->p * sizeof *t), best[17] = {0};
    int *first = pm_malloc((size_t)(s->S + 1) * sizeof *first), pick = 1;
    pm_status st = t && first ? PM_OK : pm_errf(err, PM_ERR_NOMEM, "out of memory");
    for (int h = 1; h <= G && h <= 16 && !st; h++) {
        mc->head_parts = h;
        if (pm_gpt_num_layers(mc) < s->S) continue;
        if ((st = pm_place_layers(mc, mb, mc->ctx, s, lc, first, err)) ||
            (st = pm_place_shares(mc, mb, mc->ctx, s, lc, first, t, t + s->p, err)))
            break;
        for (int d = 0; d < s->p; d++) best[h] = t[d] > best[h] ? t[d] : best[h];
    }
    for (int h = 1; h <= G && h <= 16; h++)
        if (best[h] > 0 && (!best[pick] || best[h] < best[pick])) pick = h;
    for (int h = 1; h < pick; h++) /* fewer parts within 1% */
        if (best[h] > 0 && best[h] <= best[pick] * 1.01) {
            pick = h;
            break;
        }
    pm_free(t);
    pm_free(first);
    mc->head_parts = pick;
    double real;
    if (!st && pick > 1 && !o->sched_file && !strcmp(o->kind, "auto") &&
        !(st = real_peak(w, cfg, s, &real, NULL, NULL, err)) && real > o->mem_limit * (1 + 1e-9))
        mc->head_parts = 1;
    return st;
}

/* Each device's layers and its share of the time and memory the placement
 * balanced (rank 0). */
static void print_placement(const pp_world *w, const pm_train_cfg *cfg, const pm_pipe *pp) {
    const pm_sched *s = pm_pipe_schedule(pp);
    const int *first = pm_pipe_stage_first(pp);
    double *t = malloc(2 * (size_t)s->p * sizeof *t), *m = t + s->p, tt = 0;
    pm_err err;
    const pm_layer_costs *lc = w->opts.place.unit ? &w->opts.place : NULL;
    if (w->rank || !t ||
        pm_place_shares(&cfg->model, cfg->batch / cfg->micro, cfg->model.ctx, s, lc, first, t,
                        m, &err)) {
        free(t);
        return;
    }
    for (int d = 0; d < s->p; d++) tt += t[d];
    for (int d = 0; d < s->p; d++) {
        fprintf(stderr, "device %d: layers", d);
        for (int k = 0; k < s->S; k++)
            if (pm_sched_stage_device(s, k) == d)
                fprintf(stderr, " %d-%d", first[k], first[k + 1] - 1);
        fprintf(stderr, ", %.1f%% of the %s per microbatch (%.3g %s), %.1f MiB of state and "
                "activations\n", 100 * t[d] / tt, lc ? "measured time" : "FLOPs", t[d],
                lc ? "s" : "flop", m[d] / (1 << 20));
    }
    free(t);
}

static pm_status make_sched(const pp_world *w, const pm_cli_train_opts *o,
                            const pm_train_cfg *cfg, pm_trainer *host, pm_sched *s, pm_err *err) {
    if (o->sched_file) {
        pm_status st = pm_sched_load(s, o->sched_file, err);
        if (!st && o->recompute) s->recompute = 1;
        if (!st && o->have_pp && s->p != o->pp) {
            st = pm_errf(err, PM_ERR_ARG, "train: --pp %d but %s is a schedule for %d devices; "
                         "pass --pp %d or drop --pp", o->pp, o->sched_file, s->p, s->p);
            pm_sched_free(s);
        }
        return st;
    }
    const pm_sched_kind *k = pm_sched_kind_find(o->kind);
    int v = o->chunks ? o->chunks : k && k->place == PM_PLACE_SINGLE ? 1 : 2;
    pm_sched_req req = {.p = o->pp, .m = cfg->micro / o->dp, .v = o->chunks, .t = PM_COSTS_DEFAULT,
                        .mem = model_mem(cfg, o->pp, v), .mem_limit = o->mem_limit,
                        .recompute = o->recompute};
    if (strcmp(o->kind, "auto")) return pm_sched_generate(s, o->kind, &req, err);
    pm_status st = profile(w, cfg, o->pp, host, &req.t, err);
    if (st) return st;
    /* The search assumes equal stages; the real layers are not (embedding
     * and head differ), so a pick can peak above the limit. Search again
     * under a limit scaled by how far the real peak overshot. */
    pm_search_point pt;
    char why[256];
    double real = 0;
    for (int tries = 0;; tries++) {
        if ((st = pm_sched_search(s, &req, &pt, why, sizeof why, err))) {
            if (tries && st == PM_ERR_MEMLIMIT)
                st = pm_errf(err, st, "train: no schedule meets --mem-limit %.4g M on this "
                             "model: its stages are unequal, and the best pick peaked at %.4g "
                             "M; raise the limit", o->mem_limit, real);
            return st;
        }
        if ((st = real_peak(w, cfg, s, &real, NULL, NULL, err))) break;
        if (real <= o->mem_limit * (1 + 1e-9) || tries == 4) break;
        pm_sched_free(s);
        req.mem_limit *= o->mem_limit / real * (1 - 1e-6);
    }
    if (st) {
        pm_sched_free(s);
        return st;
    }
    if (!w->rank)
        fprintf(stderr, "train: --schedule auto under %.3g M picked %s (%s)\n", o->mem_limit,
                s->kind, why);
    return PM_OK;
}

/* Parameters and moments back into the host trainer (eval, checkpoints). */
static pm_status to_host(pm_pipe *pp, pm_trainer *t, pm_err *err) {
    pm_status st = pm_pipe_gather(pp, PM_SLAB_PARAMS, t->params, err);
    if (!st) st = pm_pipe_gather(pp, PM_SLAB_ADAM_M, t->m, err);
    if (!st) st = pm_pipe_gather(pp, PM_SLAB_ADAM_V, t->v, err);
    t->step = pm_pipe_steps_done(pp);
    return st;
}

/* x is NULL when no step ran (a resumed run that was already complete). */
static void json_sizes(const char *key, const size_t *x, int n) {
    if (!x) {
        printf(", \"%s\": null", key);
        return;
    }
    printf(", \"%s\": [", key);
    for (int d = 0; d < n; d++) printf("%s%zu", d ? ", " : "", x[d]);
    printf("]");
}

typedef struct {
    double mk, pmk, bub, pbub; /* sums over steps after the first */
    int n;
    double fmk, ferr;          /* forecast makespan and |forecast - measured| / measured,
                                * summed over the steps that had a forecast */
    int nf;
    pm_pipe_info last;         /* the last step's figures (arrays: the pipe's) */
    double *times;             /* wall time of each step (s) */
    double *busy;              /* (dp * p) each device's busy ms, summed like mk */
    int nt;
    double final_loss, val_loss;
} pp_stats;

static void print_json(const pm_cli_train_opts *o, const pm_pipe *pp, const pm_trainer *t,
                       pp_stats *ps) {
    double n = ps->n ? ps->n : 1;
    int p = pm_pipe_devices(pp), S = pm_pipe_stages(pp), nd = p * pm_pipe_replicas(pp);
    pm_cli_train_json_head(o, t, ps->times, ps->nt, ps->final_loss, ps->val_loss);
    printf(", \"schedule\": \"%s\", \"pp\": %d, \"dp\": %d, \"transport\": \"%s\", "
           "\"stages\": %d, \"measured_bubble\": %.4f, \"predicted_bubble\": %.4f, "
           "\"measured_step_ms\": %.3f, \"predicted_step_ms\": %.3f",
           pm_pipe_schedule(pp)->kind, p, pm_pipe_replicas(pp),
           o->transport && !strcmp(o->transport, "mpi") ? "mpi" : "threads", S, ps->bub / n,
           ps->pbub / n, ps->mk / n, ps->pmk / n);
    /* predicted_step_ms is the replay (kept for compatibility); the forecast
     * was made before each step from earlier steps' costs */
    printf(", \"replay_step_ms\": %.3f", ps->pmk / n);
    if (ps->nf)
        printf(", \"forecast_step_ms\": %.3f, \"forecast_error\": %.4f, \"forecast_steps\": %d",
               ps->fmk / ps->nf, ps->ferr / ps->nf, ps->nf);
    else
        printf(", \"forecast_step_ms\": null, \"forecast_error\": null, \"forecast_steps\": 0");
    json_sizes("peak_activation_bytes", ps->last.peak, nd);
    json_sizes("predicted_peak_activation_bytes", ps->last.pred_peak, nd);
    json_sizes("arena_bytes", ps->last.arena, nd);
    double bmax = 0, bsum = 0;
    printf(", \"placement\": \"%s\", \"head_parts\": %d, \"device_busy_ms\": [",
           o->placement ? o->placement : "measured", pm_gpt_head_parts(&pm_pipe_config(pp)->model));
    for (int g = 0; g < nd; g++) {
        double b = ps->busy[g] / n;
        printf("%s%.6f", g ? ", " : "", b); /* a tiny model's passes take well under 1 ms */
        bmax = b > bmax ? b : bmax, bsum += b;
    }
    printf("], \"busy_max_over_mean\": %.4f", bsum > 0 ? bmax * nd / bsum : 0);
    printf(", \"stage_layers\": [");
    const int *first = pm_pipe_stage_first(pp);
    for (int s = 0; s < S; s++) printf("%s%d", s ? ", " : "", first[s + 1] - first[s]);
    printf("]}\n");
}

static int write_outputs(const pm_cli_train_opts *o, const pm_pipe *pp, int ran) {
    pm_err err = {{0}};
    if (!ran && (o->trace || o->svg)) { /* resumed at its last step: nothing measured */
        fprintf(stderr, "train: no step ran, so no --trace or --timeline is written\n");
        return 0;
    }
    const char *paths[2] = {o->trace, o->svg};
    for (int k = 0; k < 2; k++) {
        if (!paths[k]) continue;
        pm_wfile w;
        if (pm_wfile_open(&w, paths[k], &err)) return pm_cli_fail("%s", err.msg);
        char title[128];
        const pm_sched *sc = pm_pipe_schedule(pp);
        if (pm_pipe_replicas(pp) > 1)
            snprintf(title, sizeof title, "%s p=%d m=%d, replica 0 of %d: measured", sc->kind,
                     sc->p, sc->m, pm_pipe_replicas(pp));
        else snprintf(title, sizeof title, "%s p=%d m=%d: measured", sc->kind, sc->p, sc->m);
        pm_status st = k ? pm_pipe_write_svg(pp, w.f, title, &err)
                         : pm_pipe_write_trace(pp, w.f, &err);
        if (st) {
            pm_wfile_abort(&w);
            return pm_cli_fail("%s: %s", paths[k], err.msg);
        }
        if (pm_wfile_commit(&w, &err)) return pm_cli_fail("%s", err.msg);
        fprintf(stderr, "wrote %s\n", paths[k]);
    }
    return 0;
}

/* The pipeline as a driver of the library's training loop (pm_train_loop):
 * its step is a pipe step, its sync gathers the devices' state into the
 * host, its reports print the pipeline's progress lines and keep the
 * statistics the JSON summary needs. */
typedef struct {
    const pm_cli_train_opts *o;
    pm_pipe *pp;
    pp_stats *ps;
    double spent;      /* seconds in steps so far (ETA) */
    int tty, every, steps;
    int quiet;         /* MPI ranks other than 0: no progress lines */
} pp_run;

static pm_status pp_step(void *ctx, const int32_t *inp, const int32_t *tgt, pm_step_info *info,
                         pm_err *err) {
    pp_run *r = ctx;
    pm_status st = pm_pipe_step(r->pp, inp, tgt, &r->ps->last, err);
    if (!st) *info = (pm_step_info){r->ps->last.loss, r->ps->last.grad_norm, r->ps->last.lr};
    return st;
}

static pm_status pp_sync(void *ctx, pm_trainer *host, pm_err *err) {
    return to_host(((pp_run *)ctx)->pp, host, err);
}

/* Sums over the steps after the first (cold) one, for the JSON means. */
static void pp_count(pp_run *r, const pm_loop_event *ev) {
    pp_stats *ps = r->ps;
    const pm_pipe_info *in = &r->ps->last;
    ps->times[ps->nt++] = ev->seconds;
    ps->final_loss = in->loss;
    int nd = pm_pipe_devices(r->pp) * pm_pipe_replicas(r->pp);
    for (int g = 0; (ps->nt > 1 || r->o->steps == 1) && g < nd; g++) ps->busy[g] += in->busy_ms[g];
    if (ps->nt > 1 || r->o->steps == 1)
        ps->mk += in->makespan_ms, ps->pmk += in->pred_makespan_ms, ps->bub += in->bubble,
            ps->pbub += in->pred_bubble, ps->n++;
    if (ps->nt > 1 && isfinite(in->forecast_makespan_ms) && in->makespan_ms > 0)
        ps->fmk += in->forecast_makespan_ms,
            ps->ferr += fabs(in->forecast_makespan_ms - in->makespan_ms) / in->makespan_ms,
            ps->nf++;
}

static void pp_report(void *ctx, const pm_loop_event *ev) {
    pp_run *r = ctx;
    if (r->quiet) return;
    if (ev->kind == PM_LOOP_STEP) {
        pp_count(r, ev);
        r->spent += ev->seconds;
        if (!(r->tty || ev->step % r->every == 0 || ev->step == r->steps)) return;
        double left = r->spent / r->ps->nt * (double)(r->steps - ev->step);
        fprintf(stderr, "%sstep %lld/%d  loss %.4f  lr %.2e  |g| %.3f  bubble %.3f "
                "(replay %.3f)  ETA %dm%02ds%s", r->tty ? "\r" : "", (long long)ev->step,
                r->steps, ev->info.loss, ev->info.lr, ev->info.grad_norm, r->ps->last.bubble,
                r->ps->last.pred_bubble, (int)(left / 60), (int)fmod(left, 60.0),
                r->tty ? "   " : "\n");
        return;
    }
    if (ev->kind == PM_LOOP_END && r->tty) fputc('\n', stderr);
    fprintf(stderr, "%sstep %lld  val loss %.4f\n", ev->kind == PM_LOOP_EVAL && r->tty ? "\n" : "",
            (long long)ev->step, ev->val_loss);
    r->ps->val_loss = ev->val_loss;
    if (ev->kind != PM_LOOP_END) return;
    int nd = pm_pipe_devices(r->pp) * pm_pipe_replicas(r->pp);
    for (int d = 0; r->ps->last.peak && d < nd; d++)
        fprintf(stderr, "device %d: peak activation %zu bytes (predicted %zu), arena %zu\n", d,
                r->ps->last.peak[d], r->ps->last.pred_peak[d], r->ps->last.arena[d]);
    if (ev->saved) fprintf(stderr, "saved %s (step %lld)\n", ev->saved, (long long)ev->step);
}

/* Under MPI only rank 0 holds the gathered parameters: it alone
 * evaluates, saves, reports and writes; the others run the same loop (the
 * gathers are collective) with evaluation and saving off. */
static int pp_train(const pm_cli_train_opts *o, pm_pipe *pp, pm_trainer *t, const pm_tokens *val,
                    pp_stats *ps) {
    int root = pm_pipe_is_root(pp);
    pp_run r = {.o = o, .pp = pp, .ps = ps, .tty = isatty(2), .steps = t->cfg.opt.steps,
                .every = o->steps >= 20 ? o->steps / 20 : 1, .quiet = !root};
    pm_train_driver drv = {.ctx = &r, .step = pp_step, .sync = pp_sync, .report = pp_report,
                           .report_ctx = &r};
    pm_loop_opts lo = {.stop_at = pm_cli_train_stop_at(o, &t->cfg), .eval_every = o->eval_every,
                       .eval_batches = root ? o->eval_batches : 0, .val = val,
                       .save = root ? o->save : NULL};
    pm_err err = {{0}};
    if (pm_train_loop(t, &drv, &lo, &err)) return pm_cli_fail("%s", err.msg);
    return root ? write_outputs(o, pp, ps->last.peak != NULL) : 0;
}

/* Refuses a schedule whose exact peak is over --mem-limit; prints the
 * prediction (rank 0). */
static int check_peak(const pm_cli_train_opts *o, const pm_sched *s, pm_pipe *pp, int rank) {
    double M = pm_cost_M(pm_pipe_cost(pp)), peak = 0;
    const size_t *pred = pm_pipe_predicted_peak(pp);
    int at = 0;
    for (int d = 0; d < pm_pipe_devices(pp); d++)
        if ((double)pred[d] > peak) peak = (double)pred[d], at = d;
    if (o->mem_limit > 0 && peak / M > o->mem_limit * (1 + 1e-9))
        /* The simulator's peak with the model's exact byte deltas is what the
         * arena will hold: a run over the limit is refused, not noted. */
        return pm_cli_fail("train: schedule %s peaks at %.4g M (%.0f bytes) on device %d, over "
                           "--mem-limit %.4g M; the smallest limit it meets is %.4g M (--schedule "
                           "auto searches every schedule under a limit)", s->kind, peak / M, peak,
                           at, o->mem_limit, ceil(peak / M * 1e4) / 1e4);
    if (!rank)
        fprintf(stderr, "train: predicted peak activation %.3f M (%.0f bytes; M = %.0f bytes)\n",
                peak / M, peak, M);
    return 0;
}

static int run(const pm_cli_train_opts *op, pp_world *w) {
    const pm_cli_train_opts o = *op;
    pm_tokens tr, va;
    pm_train_cfg cfg;
    pm_err err = {{0}};
    pm_trainer t;
    pm_sched s = {0};
    pm_pipe *pp = NULL;
    pp_stats ps = {.final_loss = NAN};
    /* under MPI the ranks other than 0 hold their lines back until they
     * know whether rank 0 failed as well (then its line says it) */
    if (w->opts.transport == PM_TRANSPORT_MPI) pm_cli_set_rank(w->rank, w->rank != 0);
    int rc = 1, failed = pm_cli_train_data(&o, &tr, &va);
    if (!failed) pm_cli_train_cfg(&o, &tr, &cfg);
    if (!failed && check_fits(w, &cfg, NULL, &err)) { /* before the host's copy is made */
        failed = pm_cli_fail("%s", err.msg);
        pm_tokens_free(&tr);
        pm_tokens_free(&va);
    }
    else if (!failed && (failed = pm_cli_train_start(&o, &cfg, &tr, &va, &t))) {
        pm_tokens_free(&tr);
        pm_tokens_free(&va);
    }
    /* under MPI every rank stops here if any failed to load (rank 0's line,
     * or those of the ranks that alone failed); later errors are shared and
     * rank 0 alone prints them */
    if (w->opts.transport == PM_TRANSPORT_MPI) {
        int first_bad = pm_mpi_agree(!failed);
        if (first_bad > 0 && failed) pm_cli_print_held(); /* rank 0 was fine: ours alone */
        if (first_bad >= 0) {
            if (!failed) pm_trainer_free(&t), pm_tokens_free(&tr), pm_tokens_free(&va);
            return 1;
        }
        pm_cli_set_rank(-1, w->rank != 0);
    }
    if (failed) return 1;
    w->opts.fingerprint = pm_tokens_identity(&tr);
    /* an explicit --head-parts counts from the start: auto's search checks the
     * real peak with it */
    if (o.head_parts) cfg.model.head_parts = o.head_parts;
    if (place_costs(w, &o, &cfg, &err) || make_sched(w, &o, &cfg, &t, &s, &err) ||
        choose_head_parts(w, &o, &cfg, &s, &err) || check_fits(w, &cfg, &s, &err) ||
        pm_pipe_create(&pp, &cfg, &s, &w->opts, &err)) {
        pm_cli_fail("%s", err.msg);
        goto out;
    }
    if (check_peak(&o, &s, pp, w->rank)) goto out;
    if (o.resume) {
        pm_pipe_scatter(pp, t.params, t.m, t.v);
        pm_pipe_set_steps_done(pp, t.step);
    }
    if (!w->rank)
        fprintf(stderr, "train: %zu parameters, %d layers, dim %d, %d heads, ctx %d, batch %d in "
                "%d microbatches; schedule %s on %d devices x %d replica%s (%s), %d stages, "
                "%s, head in %d part%s%s\n", t.n_params, o.layers, o.dim, o.heads, o.ctx,
                o.batch, o.micro, s.kind, pm_pipe_devices(pp), o.dp, o.dp > 1 ? "s" : "",
                w->opts.transport ? "mpi" : "threads", pm_pipe_stages(pp),
                pm_place_names[s.place], pm_gpt_head_parts(&cfg.model),
                pm_gpt_head_parts(&cfg.model) > 1 ? "s" : "", o.resume ? ", resumed" : "");
    print_placement(w, &cfg, pp);
    ps.times = malloc(((size_t)o.steps + 1) * sizeof *ps.times);
    ps.busy = calloc((size_t)pm_pipe_devices(pp) * (size_t)o.dp, sizeof *ps.busy);
    if (!ps.times || !ps.busy) {
        pm_cli_fail("out of memory");
        goto out;
    }
    rc = pp_train(&o, pp, &t, &va, &ps);
    if (!rc && o.json && !w->rank) print_json(&o, pp, &t, &ps);
out:
    free(ps.times);
    free(ps.busy);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
    pm_trainer_free(&t);
    pm_tokens_free(&tr);
    pm_tokens_free(&va);
    return rc;
}

/* Test hook: PM_FAULT=KIND,DEVICE,STEP,PASS injects a fault into one pass
 * (KIND fail, nan or kill), so the tests can check how every rank stops. */
static int fault_hook(pm_pipe_opts *po) {
    const char *f = getenv("PM_FAULT");
    if (!f) return 0;
    char kind[8];
    int dev, step;
    long long pass;
    if (sscanf(f, "%7[a-z],%d,%d,%lld", kind, &dev, &step, &pass) != 4)
        return pm_cli_fail("PM_FAULT=%s: expected KIND,DEVICE,STEP,PASS", f);
    po->fault_kind = !strcmp(kind, "fail") ? PM_FAULT_FAIL : !strcmp(kind, "nan") ? PM_FAULT_NAN
                     : !strcmp(kind, "kill") ? PM_FAULT_KILL : PM_FAULT_NONE;
    if (po->fault_kind == PM_FAULT_NONE) return pm_cli_fail("PM_FAULT: unknown kind '%s'", kind);
    po->fault_dev = dev, po->fault_step = step, po->fault_pass = pass;
    return 0;
}

int pm_cli_train_pp(const pm_cli_train_opts *o) {
    pm_blas_threads(1);
    pp_world w = {.opts = {.dp = o->dp}};
    int mpi = o->transport ? !strcmp(o->transport, "mpi") : pm_mpi_launched();
    if (fault_hook(&w.opts)) return 1;
    if (!mpi) return run(o, &w);
    pm_err err;
    int size;
    w.opts.transport = PM_TRANSPORT_MPI;
    if (pm_mpi_init(&w.rank, &size, &err)) return pm_cli_fail("%s", err.msg);
    pm_cli_set_rank(w.rank, 0);
    pm_cli_train_opts oo = *o;
    oo.transport = "mpi";
    int rc = run(&oo, &w);
    pm_mpi_finalize();
    return rc;
}
