/* cmd_train_pp.c: `pipemem train --pp P ...`: the same training as
 * `pipemem train` (same data, loader, optimizer, checkpoints, bitwise the
 * same losses), run by the pipeline runtime on P device threads under a
 * schedule: generated (--schedule KIND [--chunks V] [--mem-limit X]), read
 * from a file (--schedule-file FILE: text or CSV in PyTorch's action
 * grammar), or `--schedule auto --mem-limit X`: one profiling step of zb-h1
 * measures the F, B, W times, the model gives the exact memory deltas, and
 * pm_sched_search picks the fastest schedule under the limit.
 *
 * No process holds the model: the devices hold their stages, evaluate by
 * forward passes and write and read their own layers of the checkpoints;
 * this file holds the data, the plan and the training loop's state.
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

/* Where the devices run: the pipe's options (the data's identity, test
 * hooks), the layer costs the plan balances, the transport and this
 * process's rank. */
typedef struct {
    pm_pipe_opts opts;
    pm_layer_costs place; /* measured layer costs; unit NULL: the plan counts FLOPs */
    int transport;        /* pm_transport */
    int rank;             /* 0 with threads */
} pp_world;

/* What shrinks the pipeline's need, by where most of the plan's bytes go:
 * the state (parameters, gradients, moments) only with a smaller model or,
 * under MPI, ranks on other machines; the rest (activations, workspace,
 * messages) with a shorter context, a schedule with less memory, and more
 * microbatches while one holds more than a sequence. */
static const char *pp_advice(const pm_plan *pl) {
    double state = 0, all = 0;
    for (int g = 0; g < pl->nd; g++) {
        const size_t *b = pl->dev[g].bytes;
        state += (double)b[PM_BYTES_PARAMS] + (double)b[PM_BYTES_GRADS] +
                 (double)b[PM_BYTES_MOMENTS];
        all += (double)pl->dev[g].total;
    }
    if (state >= all / 2) /* each layer's state lives on one device: more threads do not help */
        return pl->transport == PM_TRANSPORT_MPI
                   ? "use a smaller model or more ranks on other machines"
                   : "use a smaller model (the device threads share this machine's memory)";
    return pl->cfg.batch / pl->cfg.micro > 1
               ? "use a shorter --ctx, more --microbatches or a schedule with less memory "
                 "(--mem-limit)"
               : "use a shorter --ctx or a schedule with less memory (--mem-limit)";
}

/* Refuses, before anything big is allocated, a run this machine cannot
 * hold: with threads every device is in this process; under MPI each rank
 * holds its device, and the ranks mpirun put on this machine share its
 * memory (counted as if each held the busiest device). */
static pm_status check_fits(const pm_plan *pl, pm_err *err) {
    double need = 0, G = 1 << 30;
    int mpi = pl->transport == PM_TRANSPORT_MPI;
    const char *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    double local = mpi && ls && atoi(ls) > 0 ? atoi(ls) : 1; /* ranks on this machine */
    for (int g = 0; g < pl->nd; g++) need += mpi ? 0 : (double)pl->dev[g].total;
    if (mpi) need = local * (double)pl->dev[pl->busiest].total;
    double have = (double)pm_mem_physical();
    if (have > 0 && need > have)
        return pm_errf(err, PM_ERR_MEMLIMIT, "train: the pipeline needs %.2f GiB%s (the "
                       "devices' plan) but this machine has %.2f GiB; %s", need / G,
                       mpi ? " for the ranks on this machine" : "", have / G, pp_advice(pl));
    return PM_OK;
}

/* The layer costs the placement balances: measured on rank 0 (one
 * microbatch of each layer kind) and sent to every rank, so all place
 * alike; with --placement flops none (the placement counts FLOPs). */
static pm_status place_costs(pp_world *w, const pm_cli_train_opts *o, const pm_train_cfg *cfg,
                             pm_err *err) {
    if (!o->placement || strcmp(o->placement, "measured")) return PM_OK;
    pm_layer_costs *lc = &w->place;
    pm_status st = w->rank ? PM_OK
                           : pm_place_measure(&cfg->model, cfg->batch / cfg->micro,
                                              cfg->model.ctx, lc, err);
    if (w->transport != PM_TRANSPORT_MPI) return st;
    int bad = pm_mpi_agree(!st, err);
    if (bad == -2) return PM_ERR_TRANSPORT; /* a silent rank, named in err */
    if (bad >= 0)
        return st ? st : pm_errf(err, PM_ERR_NOMEM, "rank 0 could not measure the layers");
    st = pm_mpi_bcast(lc->k, sizeof lc->k, err);
    lc->unit = "s";
    return st;
}

/* Why the placement is what it is, when --device-mem moved it or
 * --placement memory chose it. */
static void print_placed(const pm_cli_train_opts *o, const pm_plan *pl) {
    char bud[32], cap[32];
    pm_bytes_str(o->device_mem, bud, sizeof bud);
    pm_bytes_str((size_t)pl->cut.cap, cap, sizeof cap);
    int asked = o->placement && !strcmp(o->placement, "memory");
    if (pl->cut.cap > 0)
        fprintf(stderr, "placement: the fastest cut put a device over --device-mem %s; this is "
                "the fastest whose every device holds at most %s (its state, the activations "
                "it holds at once and its buffers)\n", bud, cap);
    else if (pl->cut.rule == PM_CUT_MEMORY && !asked)
        fprintf(stderr, "placement: no fast cut fits --device-mem %s; this is the cut of least "
                "memory\n", bud);
    else if (asked)
        fprintf(stderr, "placement: the least memory on the fullest device first, then the "
                "least time (--placement memory)\n");
}

/* Each device's layers, its share of the time per microbatch and its
 * planned bytes by kind (rank 0). */
static void print_plan(const pm_cli_train_opts *o, const pp_world *w, const pm_plan *pl) {
    if (w->rank) return;
    const pm_sched *s = &pl->sched;
    double *t = malloc(2 * (size_t)s->p * sizeof *t), tt = 0;
    pm_err err;
    const pm_train_cfg *c = &pl->cfg;
    if (!t || pm_place_shares(&c->model, c->batch / c->micro, c->model.ctx, s, &pl->place,
                              pl->first, t, t + s->p, &err)) {
        free(t);
        return;
    }
    for (int d = 0; d < s->p; d++) tt += t[d];
    int measured = pl->place.unit && !strcmp(pl->place.unit, "s");
    print_placed(o, pl);
    for (int g = 0; g < pl->nd; g++) {
        int d = g % pl->p;
        const pm_plan_dev *dv = &pl->dev[g];
        char b[PM_BYTES_COUNT + 2][32];
        for (int k = 0; k < PM_BYTES_COUNT; k++) pm_bytes_str(dv->bytes[k], b[k], 32);
        pm_bytes_str(dv->total, b[PM_BYTES_COUNT], 32);
        pm_bytes_str(dv->act_peak, b[PM_BYTES_COUNT + 1], 32);
        fprintf(stderr, "device %d: layers", g);
        for (int k = 0; k < s->S; k++)
            if (pm_sched_stage_device(s, k) == d)
                fprintf(stderr, " %d-%d", pl->first[k], pl->first[k + 1] - 1);
        fprintf(stderr, ", %.1f%% of the %s per microbatch; %s planned: %s %s, %s %s, %s %s, "
                "%s %s (peak %s live), %s %s, %s %s\n", 100 * t[d] / tt,
                measured ? "measured time (on this machine)" : "FLOPs", b[PM_BYTES_COUNT],
                pm_bytes_names[0], b[0], pm_bytes_names[1], b[1], pm_bytes_names[2], b[2],
                pm_bytes_names[3], b[3], b[PM_BYTES_COUNT + 1], pm_bytes_names[4], b[4],
                pm_bytes_names[5], b[5]);
    }
    free(t);
}

/* The plan of the run: the schedule (a file, a kind, or auto's search),
 * the head's parts, the placement and every device's bytes. */
static pm_status make_plan(const pp_world *w, const pm_cli_train_opts *o,
                           const pm_train_cfg *cfg, pm_plan *pl, pm_err *err) {
    pm_sched file = {0};
    pm_status st = o->sched_file ? pm_sched_load(&file, o->sched_file, err) : PM_OK;
    if (st) return st;
    if (o->sched_file && o->have_pp && file.p != o->pp) {
        st = pm_errf(err, PM_ERR_ARG, "--pp %d but %s is a schedule for %d devices; "
                     "pass --pp %d or drop --pp", o->pp, o->sched_file, file.p, file.p);
        pm_sched_free(&file);
        return st;
    }
    pm_plan_req rq = {.p = o->sched_file ? 0 : o->pp, .dp = o->dp, .transport = w->transport,
                      .sched = o->sched_file ? &file : NULL, .kind = o->kind,
                      .chunks = o->chunks, .recompute = o->recompute,
                      .mem_limit = o->mem_limit, .head_parts = o->head_parts,
                      .device_mem = o->device_mem, .zero = o->zero,
                      .costs = w->place.unit ? &w->place : NULL,
                      .cut = o->placement && !strcmp(o->placement, "memory")
                                       ? PM_CUT_MEMORY : PM_CUT_TIME};
    st = pm_plan_make(pl, cfg, &rq, err);
    pm_sched_free(&file);
    if (st) return st;
    if (!w->rank && !o->sched_file && !strcmp(o->kind, "auto"))
        fprintf(stderr, "train: --schedule auto picked %s (%s; the search's M is equal stages' "
                "activation, the model's own peak follows)\n", pl->sched.kind, pl->why);
    return PM_OK;
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
    double *fig;               /* (nd, 2) each process's allocated bytes and peak RSS (--json) */
    double *busy;              /* (dp * p) each device's busy ms, summed like mk */
    double *pass;              /* (S, 3) each stage's F, B, W time (us), summed like mk */
    double lat;                /* the replay's latency c (us), summed like mk */
    int nt;
    double final_loss, val_loss;
    pm_cli_curves curves;      /* --curves (rank 0) */
} pp_stats;

/* Each device's planned bytes by kind, what it allocated (the allocation
 * hook's count) and each process's peak resident memory (VmHWM): fig is
 * (nd, 2) from pm_pipe_gather_figures (allocated, peak RSS). */
static void json_memory(const pm_pipe *pp, const double *fig, int mpi) {
    const pm_plan *pl = pm_pipe_plan(pp);
    printf(", \"planned_bytes\": [");
    for (int g = 0; g < pl->nd; g++) {
        printf("%s{", g ? ", " : "");
        for (int k = 0; k < PM_BYTES_COUNT; k++)
            printf("\"%s\": %zu, ", pm_bytes_names[k], pl->dev[g].bytes[k]);
        printf("\"total\": %zu}", pl->dev[g].total);
    }
    printf("], \"allocated_bytes\": [");
    for (int g = 0; g < pl->nd; g++)
        printf("%s%s", g ? ", " : "",
               PM_JSON_NUM(mpi ? fig[2 * g] : (double)pm_pipe_allocated(pp)[g]));
    printf("], \"peak_rss_bytes\": [");
    for (int g = 0; g < (mpi ? pl->nd : 1); g++)
        printf("%s%s", g ? ", " : "", PM_JSON_NUM(fig[2 * g + 1]));
    printf("]");
}

/* Each stage's mean F, B, W times and the latency the replays use (the
 * costs `pipemem schedule --costs` takes), and each device's host. */
static void json_passes(const pm_pipe *pp, const pp_stats *ps) {
    double n = ps->n ? ps->n : 1;
    printf(", \"stage_pass_us\": [");
    for (int s = 0; s < pm_pipe_stages(pp); s++)
        printf("%s[%s, %s, %s]", s ? ", " : "", PM_JSON_NUM(ps->pass[3 * s] / n),
               PM_JSON_NUM(ps->pass[3 * s + 1] / n), PM_JSON_NUM(ps->pass[3 * s + 2] / n));
    printf("], \"latency_us\": %s, \"hosts\": [", PM_JSON_NUM(ps->lat / n));
    for (int g = 0; g < pm_pipe_devices(pp) * pm_pipe_replicas(pp); g++) {
        printf("%s", g ? ", " : "");
        pm_json_str(stdout, pm_pipe_host(pp, g));
    }
    printf("]");
}

static void print_json(const pm_cli_train_opts *o, const pm_pipe *pp, const pm_train_state *st,
                       pp_stats *ps, const double *fig) {
    double n = ps->n ? ps->n : 1;
    int p = pm_pipe_devices(pp), S = pm_pipe_stages(pp), nd = p * pm_pipe_replicas(pp);
    pm_cli_train_json_head(o, &st->cfg, st->step, ps->times, ps->nt, ps->final_loss,
                           ps->val_loss);
    printf(", \"schedule\": \"%s\", \"pp\": %d, \"dp\": %d, \"zero\": %d, \"transport\": \"%s\", "
           "\"stages\": %d, \"measured_bubble\": %s, \"predicted_bubble\": %s, "
           "\"measured_step_ms\": %s, \"predicted_step_ms\": %s",
           pm_pipe_schedule(pp)->kind, p, pm_pipe_replicas(pp), pm_pipe_plan(pp)->zero,
           o->transport && !strcmp(o->transport, "mpi") ? "mpi" : "threads", S,
           PM_JSON_NUM(ps->bub / n), PM_JSON_NUM(ps->pbub / n), PM_JSON_NUM(ps->mk / n),
           PM_JSON_NUM(ps->pmk / n));
    /* predicted_step_ms is the replay (kept for compatibility); the forecast
     * was made before each step from earlier steps' costs */
    printf(", \"replay_step_ms\": %s", PM_JSON_NUM(ps->pmk / n));
    if (ps->nf)
        printf(", \"forecast_step_ms\": %s, \"forecast_error\": %s, \"forecast_steps\": %d",
               PM_JSON_NUM(ps->fmk / ps->nf), PM_JSON_NUM(ps->ferr / ps->nf), ps->nf);
    else
        printf(", \"forecast_step_ms\": null, \"forecast_error\": null, \"forecast_steps\": 0");
    json_sizes("peak_activation_bytes", ps->last.peak, nd);
    json_sizes("predicted_peak_activation_bytes", ps->last.pred_peak, nd);
    json_sizes("arena_bytes", ps->last.arena, nd);
    double bmax = 0, bsum = 0;
    const pm_plan *pl = pm_pipe_plan(pp);
    printf(", \"placement\": \"%s\", \"placement_rule\": \"%s\", \"placement_cap_bytes\": %s",
           o->placement ? o->placement : "flops", pm_cut_rule_names[pl->cut.rule],
           PM_JSON_NUM(pl->cut.cap));
    printf(", \"head_parts\": %d, \"device_busy_ms\": [",
           pm_gpt_head_parts(&pm_pipe_config(pp)->model));
    for (int g = 0; g < nd; g++) {
        double b = ps->busy[g] / n;
        printf("%s%s", g ? ", " : "", PM_JSON_NUM(b));
        bmax = b > bmax ? b : bmax, bsum += b;
    }
    printf("], \"busy_max_over_mean\": %s", PM_JSON_NUM(bsum > 0 ? bmax * nd / bsum : 0));
    json_passes(pp, ps);
    json_memory(pp, fig, o->transport && !strcmp(o->transport, "mpi"));
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
 * its step is a pipe step, its evaluation forward passes on the devices,
 * its save every device writing its own stages, its reports print the
 * pipeline's progress lines and keep the statistics the JSON summary
 * needs. */
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

static pm_status pp_eval(void *ctx, const int32_t *inp, const int32_t *tgt, int n,
                         float *losses, pm_err *err) {
    return pm_pipe_eval(((pp_run *)ctx)->pp, inp, tgt, n, losses, err);
}

/* Collective: every device writes its own layers; rank 0 commits. */
static pm_status pp_save(void *ctx, const char *path, const pm_train_state *st, pm_err *err) {
    pm_ckpt_meta meta = pm_train_state_meta(st);
    return pm_pipe_save(((pp_run *)ctx)->pp, path, &meta, err);
}

/* Sums over the steps after the first (cold) one, for the JSON means. */
static void pp_count(pp_run *r, const pm_loop_event *ev) {
    pp_stats *ps = r->ps;
    const pm_pipe_info *in = &r->ps->last;
    ps->times[ps->nt++] = ev->seconds;
    ps->final_loss = in->loss;
    int nd = pm_pipe_devices(r->pp) * pm_pipe_replicas(r->pp), warm = ps->nt > 1 || r->steps == 1;
    for (int g = 0; warm && g < nd; g++) ps->busy[g] += in->busy_ms[g];
    const pm_cost *c = pm_pipe_cost(r->pp); /* this step's, measured */
    for (int s = 0; warm && s < c->S; s++)
        ps->pass[3 * s] += c->st[s].tf, ps->pass[3 * s + 1] += c->st[s].tb,
            ps->pass[3 * s + 2] += c->st[s].tw;
    if (warm) ps->lat += c->c;
    if (warm)
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
    pm_cli_train_curves_event(&r->ps->curves, ev);
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

/* Every rank runs the same loop (steps, evaluations and saves are
 * collective); rank 0 alone reports and writes. */
static int pp_train(const pm_cli_train_opts *o, pm_pipe *pp, pm_train_state *st,
                    const pm_tokens *val, pp_stats *ps) {
    int root = pm_pipe_is_root(pp);
    pp_run r = {.o = o, .pp = pp, .ps = ps, .tty = isatty(2),
                .steps = st->cfg.opt.steps,
                .every = st->cfg.opt.steps >= 20 ? st->cfg.opt.steps / 20 : 1,
                .quiet = !root};
    pm_train_driver drv = {.ctx = &r, .step = pp_step, .eval = pp_eval, .save = pp_save,
                           .report = pp_report, .report_ctx = &r};
    pm_loop_opts lo = {.stop_at = pm_cli_train_stop_at(o, &st->cfg), .eval_every = o->eval_every,
                       .eval_batches = o->eval_batches, .val = val, .save = o->save};
    pm_err err = {{0}};
    pm_status s = pm_train_loop(st, &drv, &lo, &err);
    if (s == PM_ERR_TRANSPORT && pm_pipe_plan(pp)->transport == PM_TRANSPORT_MPI)
        return pm_cli_lost_fail(root, err.msg); /* a rank lost, or silent: still armed */
    pm_cli_lost_disarm();
    return s ? pm_cli_fail("%s", err.msg) : 0;
}

/* The predicted peak activation (rank 0). */
static void print_peak(const pp_world *w, const pm_plan *pl) {
    int at;
    double x = pm_plan_peak_x(pl, &at);
    if (!w->rank)
        fprintf(stderr, "train: predicted peak activation %.3f M (%.0f bytes; M = %.0f bytes)\n",
                x, pl->sim.peak[at], pl->M);
}


/* What every rank must agree on besides the plan and the training data
 * (which the pipe checks itself): every option that decides what the ranks
 * do together (a rank resuming while another starts afresh, or evaluating
 * or saving at other steps, would wait for ever in a collective). */
static uint64_t options_fingerprint(const pm_cli_train_opts *o) {
    uint64_t h = PM_FNV_OFFSET;
    const char *s[] = {o->resume ? o->resume : "", o->save ? o->save : "",
                       o->trace ? o->trace : "", o->svg ? o->svg : ""};
    for (int k = 0; k < 4; k++) h = pm_fnv1a64(h, s[k], strlen(s[k]) + 1);
    int32_t v[6] = {o->eval_every, o->eval_batches, o->stop_after, o->json, o->zero, o->dp};
    return pm_fnv1a64(h, v, sizeof v);
}

/* Everything a pipeline run holds in this process: no model state (the
 * devices hold that), only the data, the plan and the loop's state. */
typedef struct {
    pm_tokens tr, va;     /* the data (mapped) */
    pm_train_cfg cfg;     /* from the options and the data */
    char *tok;            /* the data's tokenizer model, or NULL for bytes; owned */
    size_t tok_len;
    pm_plan plan;
    pm_pipe *pp;
    pm_train_state st;
} pp_job;

/* Data, configuration, tokenizer and the validation split's length; under
 * MPI every rank stops here if any failed (rank 0's line, or those of the
 * ranks that alone failed); later errors are shared and rank 0 alone
 * prints them. */
static int load(const pm_cli_train_opts *o, const pp_world *w, pp_job *j) {
    int mpi = w->transport == PM_TRANSPORT_MPI;
    /* under MPI the ranks other than 0 hold their lines back until they
     * know whether rank 0 failed as well (then its line says it) */
    if (mpi) pm_cli_set_rank(w->rank, w->rank != 0);
    int failed = pm_cli_train_data(o, &j->tr, &j->va);
    if (!failed) {
        pm_cli_train_cfg(o, &j->tr, &j->cfg);
        if (j->tr.tokenizer)
            failed = pm_cli_read_tokenizer(o->data ? o->data : o->train_file, &j->tr, &j->tok,
                                           &j->tok_len);
        if (!failed) failed = pm_cli_train_check_ctx(o, j->cfg.model.ctx, &j->tr, &j->va);
        if (!failed) failed = pm_cli_train_check_resume(o, &j->tr); /* before any line */
        if (failed) pm_tokens_free(&j->tr), pm_tokens_free(&j->va);
    }
    if (!mpi) return failed;
    if (pm_cli_agree(failed) != -1) {
        if (!failed) pm_tokens_free(&j->tr), pm_tokens_free(&j->va);
        pm_free(j->tok);
        return 1;
    }
    pm_cli_set_rank(w->rank ? w->rank : -1, w->rank != 0); /* a line a rank holds names it */
    return 0;
}

/* --resume: every device reads its own layers (any checkpoint: saved on
 * one device or any pipeline); the loop continues at its step and data
 * position. */
static int resume(const pm_cli_train_opts *o, pp_job *j) {
    pm_err err = {{0}};
    pm_ckpt_info info;
    if (pm_pipe_load(j->pp, o->resume, j->st.data_id, &info, &err))
        return pm_cli_fail("%s", err.msg);
    j->st.step = info.step, j->st.train.next = info.data_pos;
    return 0;
}

static void print_start(const pm_cli_train_opts *o, const pp_world *w, const pp_job *j) {
    const pm_plan *pl = &j->plan;
    int parts = pm_gpt_head_parts(&pl->cfg.model);
    if (w->rank) return;
    fprintf(stderr, "train: %zu parameters, %d layers, dim %d, %d heads, ctx %d, batch %d in %d "
            "microbatches; schedule %s on %d devices x %d replica%s%s (%s), %d stages, %s, head "
            "in %d part%s%s\n", pm_gpt_num_params(&pl->cfg.model), pl->cfg.model.layers,
            pl->cfg.model.dim, pl->cfg.model.heads, pl->cfg.model.ctx, pl->cfg.batch,
            pl->cfg.micro, pl->sched.kind, pl->p, pl->dp, pl->dp > 1 ? "s" : "",
            pl->zero ? " with ZeRO-1" : "",
            w->transport == PM_TRANSPORT_MPI ? "mpi" : "threads", pl->S,
            pm_place_names[pl->sched.place], parts, parts > 1 ? "s" : "",
            o->resume ? ", resumed" : "");
    print_plan(o, w, pl);
}

/* After the loop, for --json: what each process allocated and its peak
 * resident memory (collective under MPI); rank 0 prints. */
static int finish_json(const pm_cli_train_opts *o, const pp_world *w, pp_job *j, pp_stats *ps) {
    pm_err err = {{0}};
    double mine[2] = {(double)pm_pipe_allocated(j->pp)[w->rank], (double)pm_mem_peak_rss()};
    if (pm_pipe_gather_figures(j->pp, mine, 2, ps->fig, &err)) return pm_cli_fail("%s", err.msg);
    if (!w->rank) print_json(o, j->pp, &j->st, ps, ps->fig);
    return 0;
}

/* Under MPI: every rank learns whether any failed since the last
 * agreement, and all stop together (rank 0's line, or a rank's own when it
 * alone failed): a rank that stopped alone would leave the others waiting
 * in the next collective. */
static int agreed_failure(const pp_world *w, int failed) {
    if (w->transport != PM_TRANSPORT_MPI) return failed;
    return pm_cli_agree(failed) != -1;
}

static int run(const pm_cli_train_opts *o, pp_world *w) {
    pp_job j = {0};
    pm_err err = {{0}};
    pp_stats ps = {.final_loss = NAN};
    int rc = 1, failed = 0;
    if (load(o, w, &j)) return 1;
    w->opts.fingerprint = options_fingerprint(o);
    w->opts.data_identity = pm_tokens_identity(&j.tr);
    if (place_costs(w, o, &j.cfg, &err) || make_plan(w, o, &j.cfg, &j.plan, &err))
        failed = pm_cli_fail("train: %s", err.msg); /* its parameters as flags (pm_cli_flags) */
    else if (check_fits(&j.plan, &err) || pm_train_state_init(&j.st, &j.plan.cfg, &j.tr, &err))
        failed = pm_cli_fail("%s", err.msg);
    ps.times = malloc(((size_t)o->cfg.opt.steps + 1) * sizeof *ps.times);
    ps.busy = calloc(j.plan.nd > 0 ? (size_t)j.plan.nd : 1, sizeof *ps.busy);
    ps.pass = calloc(j.plan.S > 0 ? 3 * (size_t)j.plan.S : 1, sizeof *ps.pass);
    ps.fig = calloc(j.plan.nd > 0 ? 2 * (size_t)j.plan.nd : 1, sizeof *ps.fig);
    if (!failed && (!ps.times || !ps.busy || !ps.pass || !ps.fig))
        failed = pm_cli_fail("out of memory");
    if (agreed_failure(w, failed)) goto out;
    if (pm_pipe_create(&j.pp, &j.plan, &w->opts, &err)) { /* collective: all fail together */
        pm_cli_fail("%s", err.msg);
        goto out;
    }
    j.st.tok_model = j.tok, j.st.tok_model_len = j.tok_len;
    print_peak(w, &j.plan);
    if (o->resume && resume(o, &j)) goto out; /* a shared outcome */
    print_start(o, w, &j);
    if (w->transport == PM_TRANSPORT_MPI) pm_cli_lost_arm(w->rank, o->save, o->resume);
    /* --curves: rank 0 records (out of memory there: the run still runs, and
     * says at its end that it wrote no curves) */
    int curves_bad = pm_pipe_is_root(j.pp) &&
                     pm_cli_train_curves_init(o, j.st.step, j.st.cfg.opt.steps, &ps.curves);
    rc = pp_train(o, j.pp, &j.st, &j.va, &ps); /* the same on every rank */
    if (!rc && o->json) rc = finish_json(o, w, &j, &ps); /* collective, before any writing */
    if (!rc && pm_pipe_is_root(j.pp)) rc = write_outputs(o, j.pp, ps.last.peak != NULL);
    if (!rc && pm_pipe_is_root(j.pp)) rc = curves_bad || pm_cli_train_curves_write(o, &ps.curves);
out:
    pm_cli_curves_free(&ps.curves);
    free(ps.times);
    free(ps.busy);
    free(ps.pass);
    free(ps.fig);
    pm_pipe_destroy(j.pp);
    pm_train_state_free(&j.st);
    pm_plan_free(&j.plan);
    pm_free(j.tok);
    pm_tokens_free(&j.tr);
    pm_tokens_free(&j.va);
    return rc;
}

/* Test hooks: PM_FAULT=KIND,DEVICE,STEP,PASS injects a fault into one pass
 * (KIND fail, nan, kill or stall), so the tests can check how every rank stops;
 * PM_TEST_VERSION=V makes this rank state version V at the handshake.
 * (PM_TEST_COMMIT_HOLD holds a checkpoint's rename: lost.c.) */
static int fault_hook(pm_pipe_opts *po) {
    po->version = getenv("PM_TEST_VERSION");
    const char *f = getenv("PM_FAULT");
    if (!f) return 0;
    char kind[8];
    int dev, step;
    long long pass;
    if (sscanf(f, "%7[a-z],%d,%d,%lld", kind, &dev, &step, &pass) != 4)
        return pm_cli_fail("PM_FAULT=%s: expected KIND,DEVICE,STEP,PASS", f);
    po->fault_kind = !strcmp(kind, "fail") ? PM_FAULT_FAIL : !strcmp(kind, "nan") ? PM_FAULT_NAN
                     : !strcmp(kind, "kill") ? PM_FAULT_KILL
                     : !strcmp(kind, "stall") ? PM_FAULT_STALL : PM_FAULT_NONE;
    if (po->fault_kind == PM_FAULT_NONE) return pm_cli_fail("PM_FAULT: unknown kind '%s'", kind);
    po->fault_dev = dev, po->fault_step = step, po->fault_pass = pass;
    return 0;
}

int pm_cli_train_pp(const pm_cli_train_opts *o) {
    pm_blas_threads(1);
    pp_world w = {.opts.wait_timeout_s = o->comm_timeout};
    pm_mpi_set_timeout(o->comm_timeout); /* the agreements' waits, as the transport's */
    int mpi = o->transport ? !strcmp(o->transport, "mpi") : pm_mpi_launched();
    if (fault_hook(&w.opts)) return 1;
    if (!mpi) return run(o, &w);
    if (pm_mpi_built() && !pm_mpi_launched()) /* MPI_Init alone would start one rank (and
                                               * OpenMPI keeps memory it never frees) */
        return pm_cli_fail("train: --transport mpi runs one device per MPI rank and needs "
                           "mpirun: mpirun -np %d pipemem train ... (or --transport threads)",
                           (o->have_pp ? o->pp : 1) * (o->dp > 0 ? o->dp : 1));
    pm_err err;
    int size;
    w.transport = PM_TRANSPORT_MPI;
    if (pm_mpi_init(&w.rank, &size, &err)) return pm_cli_fail("%s", err.msg);
    pm_cli_set_rank(w.rank, 0);
    pm_cli_train_opts oo = *o;
    oo.transport = "mpi";
    int rc = run(&oo, &w);
    if (pm_mpi_await_root()) pm_cli_print_held(); /* rank 0 did not say it */
    pm_mpi_finalize();
    return rc;
}
