/* select_out.c: what `pipemem select` prints and writes: the dry run's plan
 * and simulated policies, the progress lines, and the results (table, JSON,
 * CSV, timeline and trace). cmd_select.c parses and runs; this file only
 * reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "select_out.h"

void sel_print_plan(const pm_select_task *t, int n, const pm_select_layout *lay) {
    printf("device slab: %d state slot%s of %zu bytes + activations %zu bytes = %zu of %zu\n",
           lay->slots, lay->slots > 1 ? "s" : "", lay->state_slot, lay->act_slot,
           (size_t)lay->slots * lay->state_slot + lay->act_slot, lay->device_mem);
    printf("%-10s %-10s %6s %5s %5s %4s %5s %5s %6s %5s  %s\n", "task", "lr", "layers", "dim",
           "heads", "ctx", "batch", "micro", "steps", "shards",
           "layers: state bytes / activation bytes");
    for (int i = 0; i < n; i++) {
        const pm_train_cfg *c = &t[i].cfg;
        char lr[PM_FLOAT_TEXT];
        printf("%-10s %-10s %6d %5d %5d %4d %5d %5d %6d %5d ", t[i].name,
               pm_float_text(lr, c->opt.lr), c->model.layers, c->model.dim, c->model.heads,
               c->model.ctx, c->batch, c->micro, c->opt.steps, t[i].nshard);
        for (int k = 0; k < t[i].nshard; k++)
            printf(" %d-%d: %zu/%zu", t[i].shard[k].first, t[i].shard[k].last - 1,
                   t[i].shard[k].state, t[i].shard[k].act);
        printf("\n");
    }
}

/* The forecast (forecast.c): every task's steps pass by pass, compute
 * and the state's moves at rates measured first, each policy simulated
 * over them. */
typedef struct {
    pm_select_rates r;
    double mk[PM_POLICY_COUNT], bound;
    double *compute, *move; /* (n) each task's seconds of compute and moves, all its steps */
} sel_forecast;

static void forecast_free(sel_forecast *f) { pm_free(f->compute), pm_free(f->move); }

/* Task i's pass list, costed, into sh/co, its parts before and after the
 * microbatches into be/af (joining), and its totals into compute, move. */
static int task_costs(const pm_select_task *t, const sel_eval *ev, const pm_select_rates *r,
                      int64_t np, int *sh, double *co, double *be, double *af, double *compute,
                      double *move) {
    double *mv = pm_malloc((size_t)np * sizeof *mv);
    *compute = *move = 0;
    if (!mv) return 1;
    pm_select_task_costs(t, t->cfg.opt.steps, ev->every, ev->batches, r, sh, co, mv, be, af);
    for (int64_t k = 0; k < np; k++) *compute += co[k], *move += mv[k], co[k] += mv[k];
    pm_free(mv);
    return 0;
}

static int forecast(const pm_select_task *t, int n, int D, const pm_select_layout *lay,
                    const char *spill, const sel_eval *ev, sel_forecast *f) {
    pm_err e0;
    *f = (sel_forecast){.compute = pm_calloc((size_t)n, sizeof(double)),
                        .move = pm_calloc((size_t)n, sizeof(double))};
    if (pm_select_measure(t, n, lay, spill, &f->r, &e0)) {
        forecast_free(f);
        return pm_cli_fail("select: %s", e0.msg);
    }
    int64_t *np = pm_calloc((size_t)n, sizeof *np);
    int **sh = pm_calloc((size_t)n, sizeof *sh), *per = pm_calloc((size_t)n, sizeof *per);
    int *micro = pm_calloc((size_t)n, sizeof *micro);
    double **co = pm_calloc((size_t)n, sizeof *co), **be = pm_calloc((size_t)n, sizeof *be);
    double **af = pm_calloc((size_t)n, sizeof *af);
    int rc = !np || !sh || !co || !be || !af || !per || !micro || !f->compute || !f->move;
    for (int i = 0; i < n && !rc; i++) {
        per[i] = 2 * t[i].nshard - 1, micro[i] = t[i].cfg.micro;
        np[i] = (int64_t)t[i].cfg.opt.steps * per[i];
        sh[i] = pm_malloc((size_t)np[i] * sizeof(int));
        co[i] = pm_malloc((size_t)np[i] * sizeof(double));
        be[i] = pm_malloc((size_t)np[i] * sizeof(double));
        af[i] = pm_malloc((size_t)np[i] * sizeof(double));
        rc = !sh[i] || !co[i] || !be[i] || !af[i] ||
             task_costs(&t[i], ev, &f->r, np[i], sh[i], co[i], be[i], af[i], &f->compute[i],
                        &f->move[i]);
    }
    if (rc) rc = pm_cli_fail("select: out of memory for the simulation");
    pm_select_work w = {n, np, (const int *const *)sh, (const double *const *)co, per, micro,
                        (const double *const *)be, (const double *const *)af};
    for (int p = 0; p < PM_POLICY_COUNT && !rc; p++) {
        pm_select_sim r;
        pm_err e;
        if (pm_select_simulate(&w, D, (pm_select_policy)p, ev->no_join, &r, &e)) {
            rc = pm_cli_fail("%s", e.msg);
            break;
        }
        f->mk[p] = r.makespan; /* the shard policy's bound (joined) holds for every one */
        if (p == PM_POLICY_SHARD) f->bound = r.lower_bound;
        pm_select_sim_free(&r);
    }
    for (int i = 0; i < n && sh && co && be && af; i++)
        pm_free(sh[i]), pm_free(co[i]), pm_free(be[i]), pm_free(af[i]);
    pm_free(np), pm_free(sh), pm_free(co), pm_free(be), pm_free(af), pm_free(per),
        pm_free(micro);
    if (rc) forecast_free(f);
    return rc;
}

int sel_print_policies(const pm_select_task *t, int n, int D, const pm_select_layout *lay,
                       const char *spill, const sel_eval *ev) {
    sel_forecast f;
    if (forecast(t, n, D, lay, spill, ev, &f)) return 1;
    double compute = 0, move = 0;
    for (int i = 0; i < n; i++) compute += f.compute[i], move += f.move[i];
    printf("forecast, measured on this machine first: compute at %.1f GFLOP/s per device "
           "(one block), the shards' state in from %s at %.2f GB/s and back at %.2f GB/s, "
           "AdamW at %.0f M parameters/s; evaluations included; the moves are %.0f%% of the work "
           "(%.3f of %.3f s); shard %s\n",
           f.r.flops / 1e9, spill ? "the spill files" : "RAM", f.r.read_bps / 1e9,
           f.r.write_bps / 1e9, 1e-6 / f.r.adamw_s, 100 * move / (compute + move), move,
           compute + move, ev->no_join ? "joins no running task (--no-join)"
                                       : "with idle devices joining running tasks");
    printf("%-11s %12s %9s\n", "policy", "makespan s", "vs bound");
    for (int p = 0; p < PM_POLICY_COUNT; p++)
        printf("%-11s %12.3f %8.3fx\n", pm_select_policy_names[p], f.mk[p], f.mk[p] / f.bound);
    printf("%-11s %12.3f\n", "lower bound", f.bound);
    forecast_free(&f);
    return 0;
}

static void json_config(const pm_train_cfg *c) {
    char lr[PM_FLOAT_TEXT];
    char wd[PM_FLOAT_TEXT];
    printf("{\"lr\": %s, \"layers\": %d, \"dim\": %d, \"heads\": %d, \"ctx\": %d, "
           "\"batch\": %d, \"microbatches\": %d, \"warmup\": %d, \"seed\": %llu, "
           "\"steps\": %d, \"weight_decay\": %s}",
           pm_float_text(lr, c->opt.lr), c->model.layers, c->model.dim, c->model.heads,
           c->model.ctx, c->batch, c->micro, c->opt.warmup, (unsigned long long)c->seed,
           c->opt.steps, pm_float_text(wd, c->opt.weight_decay));
}

int sel_print_dry_json(const pm_select_task *t, int n, const pm_select_layout *lay, int D,
                       int steps, const char *spill, const sel_eval *ev) {
    sel_forecast f;
    if (forecast(t, n, D, lay, spill, ev, &f)) return 1;
    printf("{\"dry_run\": true, \"devices\": %d, \"device_mem\": %zu, \"slab\": {\"slots\": "
           "%d, \"state_slot\": %zu, \"act_slot\": %zu, \"bytes\": %zu}, \"tasks\": [", D,
           lay->device_mem, lay->slots, lay->state_slot, lay->act_slot,
           pm_select_slab_bytes(lay));
    for (int i = 0; i < n; i++) {
        printf("%s{\"task\": ", i ? ", " : "");
        pm_json_str(stdout, t[i].name);
        printf(", \"config\": ");
        json_config(&t[i].cfg);
        printf(", \"shards\": [");
        for (int k = 0; k < t[i].nshard; k++)
            printf("%s{\"first_layer\": %d, \"last_layer\": %d, \"state\": %zu, \"act\": %zu}",
                   k ? ", " : "", t[i].shard[k].first, t[i].shard[k].last - 1,
                   t[i].shard[k].state, t[i].shard[k].act);
        printf("], \"compute_s\": %.9g, \"move_s\": %.9g}", f.compute[i], f.move[i]);
    }
    printf("], \"steps\": %d, \"store\": \"%s\", \"flops_per_s\": %.9g, "
           "\"state_read_bytes_per_s\": %.9g, \"state_write_bytes_per_s\": %.9g, "
           "\"adamw_s_per_param\": %.9g, \"policies\": [", steps, spill ? "spill" : "ram",
           f.r.flops, f.r.read_bps, f.r.write_bps, f.r.adamw_s);
    for (int p = 0; p < PM_POLICY_COUNT; p++)
        printf("%s{\"policy\": \"%s\", \"makespan_s\": %.9g}", p ? ", " : "",
               pm_select_policy_names[p], f.mk[p]);
    printf("], \"join\": %s, \"lower_bound_s\": %.9g}\n", ev->no_join ? "false" : "true",
           f.bound);
    forecast_free(&f);
    return 0;
}

/* One status line: tasks done, stopped, failed and running, steps, each
 * device's busy fraction and the time left at the pace so far. */
static void status_line(sel_progress *p, const pm_select_event *ev) {
    int running = p->n - p->done - p->stopped - p->failed;
    fprintf(stderr, "select: tasks %d done, %d stopped, %d failed, %d running; %lld of %lld "
            "steps; busy", p->done, p->stopped, p->failed, running, (long long)p->steps_done,
            (long long)p->steps_all);
    for (int d = 0; d < p->devices; d++)
        fprintf(stderr, " %.0f%%", ev->elapsed > 0 ? 100 * ev->busy[d] / ev->elapsed : 0);
    double left = p->steps_done ? ev->elapsed * (double)(p->steps_all - p->steps_done) /
                                      (double)p->steps_done
                                : 0;
    fprintf(stderr, "; ETA %.0f s\n", left);
    p->last = ev->elapsed;
}

/* A task's reason (the library's words) with the flags the user knows. */
typedef struct {
    char s[2 * sizeof ((pm_select_result *)0)->why];
} why_text;
static why_text why_flags(const char *why) {
    why_text w;
    pm_cli_flags(why ? why : "", w.s, sizeof w.s);
    return w;
}

void sel_on_event(void *ctx, const pm_select_event *ev) {
    sel_progress *p = ctx;
    const char *name = p->t[ev->task].name;
    double el = ev->elapsed;
    why_text why = why_flags(ev->why);
    p->done += ev->kind == PM_SELECT_EV_DONE;
    p->stopped += ev->kind == PM_SELECT_EV_STOPPED;
    p->failed += ev->kind == PM_SELECT_EV_FAILED;
    if (ev->kind <= PM_SELECT_EV_DONE) p->steps_done++;
    if (ev->kind >= PM_SELECT_EV_DONE) /* a finished task's steps are all accounted for */
        p->steps_all -= p->t[ev->task].cfg.opt.steps - ev->step;
    if (ev->kind == PM_SELECT_EV_STEP) {
        if (el - p->last >= 2) status_line(p, ev);
        return;
    }
    if (ev->kind == PM_SELECT_EV_STOPPED && isfinite(ev->val_loss))
        fprintf(stderr, "select: %s stopped: %s (val loss %.4f, %.1f s)\n", name, why.s,
                ev->val_loss, el);
    else if (ev->kind == PM_SELECT_EV_STOPPED)
        fprintf(stderr, "select: %s stopped: %s (%.1f s)\n", name, why.s, el);
    else if (ev->kind == PM_SELECT_EV_FAILED)
        fprintf(stderr, "select: %s failed: %s (%.1f s)\n", name, ev->why ? why.s : "?", el);
    else if (ev->kind == PM_SELECT_EV_DONE)
        fprintf(stderr, "select: %s done: %lld steps, loss %.4f, val loss %.4f (%.1f s)\n", name,
                (long long)ev->step, ev->loss, ev->val_loss, el);
    else if (ev->kind == PM_SELECT_EV_EVAL)
        fprintf(stderr, "select: %s step %lld/%d  loss %.4f  val loss %.4f  (%.1f s)\n", name,
                (long long)ev->step, p->t[ev->task].cfg.opt.steps, ev->loss, ev->val_loss, el);
    if (ev->kind >= PM_SELECT_EV_DONE || el - p->last >= 2) status_line(p, ev);
}

static const char *const state_names[] = {"running", "done", "failed", "stopped"};

/* A task's place in the ranking: 0 finished (every step run) with a
 * validation loss, 1 stopped early with one (halving, ASHA, an
 * interruption), 2 failed or without one. */
static int rank_group(const pm_select_result *r) {
    if (r->state == PM_SELECT_FAILED || isnan(r->val_loss)) return 2;
    return r->state == PM_SELECT_DONE ? 0 : 1;
}

/* 1 if task b ranks above task a (sel_rank's order). */
static int ranks_above(const pm_select_result *a, const pm_select_result *b) {
    int ga = rank_group(a), gb = rank_group(b);
    if (ga != gb) return gb < ga;
    if (ga == 1 && a->val_step != b->val_step) return b->val_step > a->val_step;
    return ga < 2 && b->val_loss < a->val_loss;
}

/* Insertion sort: stable, so ties keep the index order. */
void sel_rank(const pm_select_result *res, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ranks_above(&res[order[j - 1]], &res[order[j]]); j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
}

const char sel_rank_rule[] =
    "ranked: tasks that ran every step by validation loss, then tasks stopped early by the "
    "step of their last validation loss (later first) and that loss, then the rest";

void sel_print_table(FILE *f, const pm_select_task *t, const pm_select_result *r,
                     const int *order, int n) {
    fprintf(f, "%s\n", sel_rank_rule);
    fprintf(f, "%-10s %-10s %6s %5s %5s %4s %5s %5s %6s %-6s %6s %11s %10s %10s %7s %8s %8s "
            "%6s  %s\n", "task", "lr", "layers", "dim", "heads", "ctx", "batch", "micro",
            "warmup", "wd", "seed", "steps", "loss", "val loss", "at step", "wall s", "busy s",
            "shards", "state");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        const pm_train_cfg *c = &t[i].cfg;
        char lr[PM_FLOAT_TEXT], wd[PM_FLOAT_TEXT], steps[40], at[24] = "-";
        snprintf(steps, sizeof steps, "%lld/%d", (long long)r[i].steps, c->opt.steps);
        if (r[i].val_step >= 0) snprintf(at, sizeof at, "%lld", (long long)r[i].val_step);
        fprintf(f, "%-10s %-10s %6d %5d %5d %4d %5d %5d %6d %-6s %6llu %11s %10.4f %10.4f %7s "
                "%8.2f %8.2f %6d  %s%s%s\n", t[i].name, pm_float_text(lr, c->opt.lr),
                c->model.layers, c->model.dim, c->model.heads, c->model.ctx, c->batch, c->micro,
                c->opt.warmup, pm_float_text(wd, c->opt.weight_decay),
                (unsigned long long)c->seed, steps, r[i].final_loss, r[i].val_loss, at,
                r[i].wall_s, r[i].busy_s, t[i].nshard, state_names[r[i].state],
                r[i].why[0] ? ": " : "", why_flags(r[i].why).s);
    }
}

static void json_num(FILE *f, double x) {
    if (isfinite(x)) fprintf(f, "%.9g", x);
    else fputs("null", f);
}

void sel_print_json(pm_select_policy policy, int devices, size_t device_mem,
                    const pm_select_task *t, const pm_select_result *r, const int *order, int n,
                    const pm_select_stats *st, double bound) {
    printf("{\"policy\": \"%s\", \"devices\": %d, \"device_mem\": %zu, \"makespan_s\": ",
           pm_select_policy_names[policy], devices, device_mem);
    json_num(stdout, st->makespan_s);
    printf(", \"lower_bound_s\": ");
    json_num(stdout, bound);
    printf(", \"device_peak_bytes\": [");
    for (int d = 0; d < devices; d++) printf("%s%zu", d ? ", " : "", st->peak[d]);
    printf("], \"device_busy\": [");
    for (int d = 0; d < devices; d++) {
        printf("%s", d ? ", " : "");
        json_num(stdout, st->makespan_s > 0 ? st->busy[d] / st->makespan_s : 0);
    }
    printf("], \"joined_passes\": %lld", (long long)st->joined);
    printf(", \"device_seconds\": ["); /* by part (pm_select_part): they add up to makespan_s */
    for (int d = 0; d < devices; d++) {
        printf("%s{", d ? ", " : "");
        for (int p = 0; p < PM_PART_COUNT; p++) {
            printf("%s\"%s\": ", p ? ", " : "", pm_select_part_names[p]);
            json_num(stdout, st->part[(size_t)d * PM_PART_COUNT + p]);
        }
        printf("}");
    }
    printf("], \"tasks\": [");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        printf("%s{\"task\": ", k ? ", " : "");
        pm_json_str(stdout, t[i].name);
        printf(", \"config\": ");
        json_config(&t[i].cfg);
        printf(", \"final_loss\": ");
        json_num(stdout, r[i].final_loss);
        printf(", \"val_loss\": ");
        json_num(stdout, r[i].val_loss);
        if (r[i].val_step >= 0) printf(", \"val_step\": %lld", (long long)r[i].val_step);
        else printf(", \"val_step\": null");
        printf(", \"steps_run\": %lld, \"wall_s\": %.6f, \"busy_s\": %.6f, \"shards\": %d, "
               "\"state\": \"%s\", \"why\": ", (long long)r[i].steps, r[i].wall_s, r[i].busy_s,
               t[i].nshard, state_names[r[i].state]);
        pm_json_str(stdout, why_flags(r[i].why).s);
        printf("}");
    }
    printf("]}\n");
}

int sel_write_csv(const char *path, const pm_select_task *t, const pm_select_result *r,
                     const int *order, int n) {
    pm_wfile w;
    pm_err e;
    if (pm_wfile_open(&w, path, &e)) return pm_cli_fail("%s", e.msg);
    fprintf(w.f, "task,lr,layers,dim,heads,ctx,batch,microbatches,warmup,seed,steps_run,"
                 "final_loss,val_loss,val_step,steps,weight_decay,wall_s,busy_s,shards,state,"
                 "why\n");
    for (int k = 0; k < n; k++) {
        int i = order[k];
        const pm_train_cfg *c = &t[i].cfg;
        char lr[PM_FLOAT_TEXT], wd[PM_FLOAT_TEXT], at[24] = "";
        if (r[i].val_step >= 0) snprintf(at, sizeof at, "%lld", (long long)r[i].val_step);
        fprintf(w.f, "%s,%s,%d,%d,%d,%d,%d,%d,%d,%llu,%lld,%.9g,%.9g,%s,%d,%s,%.6f,%.6f,%d,%s,\"",
                t[i].name, pm_float_text(lr, c->opt.lr), c->model.layers, c->model.dim,
                c->model.heads, c->model.ctx, c->batch, c->micro, c->opt.warmup,
                (unsigned long long)c->seed, (long long)r[i].steps, r[i].final_loss,
                r[i].val_loss, at, c->opt.steps, pm_float_text(wd, c->opt.weight_decay),
                r[i].wall_s, r[i].busy_s, t[i].nshard, state_names[r[i].state]);
        why_text why = why_flags(r[i].why);
        for (const char *q = why.s; *q; q++) { /* CSV quoting: a quote doubled */
            if (*q == '"') fputc('"', w.f);
            fputc(*q, w.f);
        }
        fputs("\"\n", w.f);
    }
    if (pm_wfile_commit(&w, &e)) return pm_cli_fail("%s", e.msg);
    return 0;
}

int sel_write_timeline(const char *path, const pm_select_stats *st, const pm_select_task *t,
                          int n, double bound, int trace) {
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, path);
    if (!f) return 1;
    pm_status s = trace ? pm_select_write_trace(f, st, t, n) : pm_select_write_svg(f, st, t, n, bound);
    return pm_cli_out_close(&w, s != PM_OK, path);
}

