/* select_out.c: what `pipemem select` prints and writes: the dry run's plan
 * and simulated policies, the progress lines, and the results (table, JSON,
 * CSV, timeline and trace). cmd_select.c parses and runs; this file only
 * reports. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipemem/pm_select_ranks.h"
#include "select_out.h"

void sel_print_plan(const pm_select_session *s) {
    const pm_select_task *t = s->tasks;
    const pm_select_layout *lay = &s->layout;
    int n = s->n;
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

void sel_print_policies(const pm_select_session *s, const pm_select_forecast *f) {
    double compute = 0, move = 0;
    for (int i = 0; i < s->n; i++) compute += f->compute[i], move += f->move[i];
    const pm_select_rates *r = &f->rates;
    printf("forecast, measured on this machine first: compute at %.1f GFLOP/s per device "
           "(one block), the shards' state in from %s at %.2f GB/s and back at %.2f GB/s, "
           "AdamW at %.0f M parameters/s; evaluations included; the moves are %.0f%% of the work "
           "(%.3f of %.3f s); shard %s\n",
           r->flops / 1e9, r->spilled ? "the spill files" : "RAM", r->read_bps / 1e9,
           r->write_bps / 1e9, 1e-6 / r->adamw_s, 100 * move / (compute + move), move,
           compute + move, s->set.run.no_join ? "joins no running task (--no-join)"
                                              : "with idle devices joining running tasks");
    if (f->scale != 1) {
        int64_t all = 0;
        for (int i = 0; i < s->n; i++) all += s->tasks[i].cfg.opt.steps;
        printf("extrapolated: the policies simulated over %lld of the tasks' %lld steps (the "
               "same share of each, evaluations spread evenly) and their times scaled by %.4g, "
               "the whole run's work over the simulated work\n", (long long)f->steps_simulated,
               (long long)all, f->scale);
    }
    printf("%-11s %12s %9s\n", "policy", "makespan s", "vs bound");
    for (int p = 0; p < PM_POLICY_COUNT; p++)
        printf("%-11s %12.3f %8.3fx\n", pm_select_policy_names[p], f->makespan[p],
               f->makespan[p] / f->lower_bound);
    printf("%-11s %12.3f\n", "lower bound", f->lower_bound);
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

void sel_print_dry_json(const pm_select_session *s, const pm_select_forecast *f) {
    const pm_select_layout *lay = &s->layout;
    const pm_select_task *t = s->tasks;
    const pm_select_rates *r = &f->rates;
    printf("{\"dry_run\": true, \"devices\": %d, \"device_mem\": %zu, \"slab\": {\"slots\": "
           "%d, \"state_slot\": %zu, \"act_slot\": %zu, \"bytes\": %zu}, \"tasks\": [",
           s->set.run.devices, lay->device_mem, lay->slots, lay->state_slot, lay->act_slot,
           pm_select_slab_bytes(lay));
    for (int i = 0; i < s->n; i++) {
        printf("%s{\"task\": ", i ? ", " : "");
        pm_json_str(stdout, t[i].name);
        printf(", \"config\": ");
        json_config(&t[i].cfg);
        printf(", \"shards\": [");
        for (int k = 0; k < t[i].nshard; k++)
            printf("%s{\"first_layer\": %d, \"last_layer\": %d, \"state\": %zu, \"act\": %zu}",
                   k ? ", " : "", t[i].shard[k].first, t[i].shard[k].last - 1,
                   t[i].shard[k].state, t[i].shard[k].act);
        printf("], \"compute_s\": %s, \"move_s\": %s}", PM_JSON_NUM(f->compute[i]),
               PM_JSON_NUM(f->move[i]));
    }
    printf("], \"steps\": %d, \"store\": \"%s\", \"flops_per_s\": %s, "
           "\"state_read_bytes_per_s\": %s, \"state_write_bytes_per_s\": %s, "
           "\"adamw_s_per_param\": %s, \"policies\": [", s->steps,
           r->spilled ? "spill" : "ram", PM_JSON_NUM(r->flops), PM_JSON_NUM(r->read_bps),
           PM_JSON_NUM(r->write_bps), PM_JSON_NUM(r->adamw_s));
    for (int p = 0; p < PM_POLICY_COUNT; p++)
        printf("%s{\"policy\": \"%s\", \"makespan_s\": %s}", p ? ", " : "",
               pm_select_policy_names[p], PM_JSON_NUM(f->makespan[p]));
    printf("], \"join\": %s, \"lower_bound_s\": %s, \"extrapolated\": %s, \"steps_simulated\": "
           "%lld, \"scale\": %s}\n", s->set.run.no_join ? "false" : "true",
           PM_JSON_NUM(f->lower_bound), f->scale != 1 ? "true" : "false",
           (long long)f->steps_simulated, PM_JSON_NUM(f->scale));
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
    char s[SEL_WHY];
} why_text;
static why_text why_flags(const char *why) {
    why_text w;
    pm_cli_flags(why ? why : "", w.s, sizeof w.s);
    return w;
}

/* --curves: the event's losses, and a task's stop. */
static void record(sel_progress *p, const pm_select_event *ev, const why_text *why) {
    if (!p->curves) return;
    if (ev->kind <= PM_SELECT_EV_DONE) pm_cli_curves_loss(p->curves, ev->task, ev->step, ev->loss);
    if (ev->kind == PM_SELECT_EV_EVAL || ev->kind == PM_SELECT_EV_DONE)
        pm_cli_curves_val(p->curves, ev->task, ev->step, ev->val_loss);
    if (ev->kind == PM_SELECT_EV_STOPPED || ev->kind == PM_SELECT_EV_FAILED) {
        snprintf(p->why[ev->task], sizeof p->why[0], "%s", why->s);
        pm_cli_curves_stop(p->curves, ev->task, ev->step, p->why[ev->task]);
    }
}

void sel_on_event(void *ctx, const pm_select_event *ev) {
    sel_progress *p = ctx;
    const char *name = p->t[ev->task].name;
    double el = ev->elapsed;
    why_text why = why_flags(ev->why);
    record(p, ev, &why);
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

void sel_print_table(FILE *f, const pm_select_session *s) {
    const pm_select_task *t = s->tasks;
    const pm_select_result *r = s->res;
    fprintf(f, "%s\n", pm_select_rank_rule);
    fprintf(f, "%-10s %-10s %6s %5s %5s %4s %5s %5s %6s %-6s %6s %11s %10s %10s %7s %8s %8s "
            "%6s  %s\n", "task", "lr", "layers", "dim", "heads", "ctx", "batch", "micro",
            "warmup", "wd", "seed", "steps", "loss", "val loss", "at step", "wall s", "busy s",
            "shards", "state");
    for (int k = 0; k < s->n; k++) {
        int i = s->order[k];
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

static void json_num(FILE *f, double x) { fputs(PM_JSON_NUM(x), f); }

/* Across ranks: each rank's host, devices, tasks run and CPU seconds. */
static void json_ranks(const pm_select_ranks *k) {
    printf(", \"ranks\": [");
    for (int g = 0; g < pm_select_ranks_size(k); g++) {
        pm_select_rank_info in;
        pm_err e;
        if (pm_select_ranks_info(k, g, &in, &e)) break;
        printf("%s{\"rank\": %d, \"host\": ", g ? ", " : "", g);
        pm_json_str(stdout, in.host);
        printf(", \"devices\": %d, \"tasks\": %d, \"cpu_s\": %s}", in.devices, in.tasks,
               PM_JSON_NUM(in.cpu_s));
    }
    printf("]");
}

void sel_print_json(const pm_select_session *s) {
    const pm_select_task *t = s->tasks;
    const pm_select_result *r = s->res;
    const pm_select_stats *st = &s->stats;
    int devices = s->set.run.devices;
    printf("{\"policy\": \"%s\", \"devices\": %d, \"device_mem\": %zu, \"makespan_s\": ",
           pm_select_policy_names[s->set.run.policy], devices, s->set.device_mem);
    json_num(stdout, st->makespan_s);
    printf(", \"lower_bound_s\": ");
    json_num(stdout, st->lower_bound_s);
    printf(", \"device_peak_bytes\": [");
    for (int d = 0; d < devices; d++) printf("%s%zu", d ? ", " : "", st->peak[d]);
    printf("], \"device_busy\": [");
    for (int d = 0; d < devices; d++) {
        printf("%s", d ? ", " : "");
        json_num(stdout, st->makespan_s > 0 ? st->busy[d] / st->makespan_s : 0);
    }
    printf("], \"joined_passes\": %lld, \"moved_bytes\": %s", (long long)st->joined,
           PM_JSON_NUM(st->moved_bytes));
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
    for (int k = 0; k < s->n; k++) {
        int i = s->order[k];
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
        printf(", \"steps_run\": %lld, \"wall_s\": %s, \"busy_s\": %s, \"shards\": %d, "
               "\"state\": \"%s\", \"why\": ", (long long)r[i].steps, PM_JSON_NUM(r[i].wall_s),
               PM_JSON_NUM(r[i].busy_s), t[i].nshard, state_names[r[i].state]);
        pm_json_str(stdout, why_flags(r[i].why).s);
        if (s->set.run.ranks) printf(", \"rank\": %d", r[i].rank); /* the one that ran it */
        printf("}");
    }
    printf("]");
    if (s->set.run.ranks) json_ranks(s->set.run.ranks);
    printf("}\n");
}

int sel_write_csv(const char *path, const pm_select_session *s) {
    const pm_select_task *t = s->tasks;
    const pm_select_result *r = s->res;
    pm_wfile w;
    pm_err e;
    if (pm_wfile_open(&w, path, &e)) return pm_cli_fail("%s", e.msg);
    fprintf(w.f, "task,lr,layers,dim,heads,ctx,batch,microbatches,warmup,seed,steps_run,"
                 "final_loss,val_loss,val_step,steps,weight_decay,wall_s,busy_s,shards,state,"
                 "rank,why\n");
    for (int k = 0; k < s->n; k++) {
        int i = s->order[k];
        const pm_train_cfg *c = &t[i].cfg;
        char lr[PM_FLOAT_TEXT], wd[PM_FLOAT_TEXT], at[24] = "";
        char fl[PM_DOUBLE_TEXT], vl[PM_DOUBLE_TEXT]; /* losses that read back exactly */
        if (r[i].val_step >= 0) snprintf(at, sizeof at, "%lld", (long long)r[i].val_step);
        fprintf(w.f, "%s,%s,%d,%d,%d,%d,%d,%d,%d,%llu,%lld,%s,%s,%s,%d,%s,%.6f,%.6f,%d,%s,%d,\"",
                t[i].name, pm_float_text(lr, c->opt.lr), c->model.layers, c->model.dim,
                c->model.heads, c->model.ctx, c->batch, c->micro, c->opt.warmup,
                (unsigned long long)c->seed, (long long)r[i].steps,
                pm_double_text(fl, r[i].final_loss), pm_double_text(vl, r[i].val_loss), at,
                c->opt.steps, pm_float_text(wd, c->opt.weight_decay), r[i].wall_s, r[i].busy_s,
                t[i].nshard, state_names[r[i].state], r[i].rank);
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

int sel_write_timeline(const char *path, const pm_select_session *s, int trace) {
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, path);
    if (!f) return 1;
    const pm_select_stats *st = &s->stats;
    pm_status bad = trace ? pm_select_write_trace(f, st, s->tasks, s->n)
                          : pm_select_write_svg(f, st, s->tasks, s->n, st->lower_bound_s);
    return pm_cli_out_close(&w, bad != PM_OK, path);
}

int sel_write_curves(const char *path, const pm_select_session *s, const sel_progress *pg) {
    const char **names = pm_malloc((size_t)s->n * sizeof *names);
    if (!names) return pm_cli_fail("--curves: out of memory");
    for (int i = 0; i < s->n; i++) names[i] = s->tasks[i].name;
    char title[200];
    snprintf(title, sizeof title, "pipemem select: %d task%s, the legend ranked (best first); "
             "x: stopped early", s->n, s->n > 1 ? "s" : "");
    int rc = pm_cli_curves_write(pg->curves, s->order, names, title, path);
    pm_free(names);
    return rc;
}

/* Across ranks: the devices above are rank 0's; what each rank ran. */
static void ranks_line(FILE *out, const pm_select_session *s) {
    int size = pm_select_ranks_size(s->set.run.ranks);
    fprintf(out, "across %d ranks (the bound over every rank's devices; the devices above are "
            "rank 0's):", size);
    for (int g = 0; g < size; g++) {
        pm_select_rank_info in;
        pm_err e;
        if (pm_select_ranks_info(s->set.run.ranks, g, &in, &e)) break;
        fprintf(out, "%s rank %d on %s, %d device%s, cpu %.2f s:", g ? ";" : "", g, in.host,
                in.devices, in.devices == 1 ? "" : "s", in.cpu_s);
        for (int i = 0; i < s->n; i++)
            if (s->res[i].rank == g) fprintf(out, " %s", s->tasks[i].name);
    }
    fprintf(out, "\n");
}

void sel_print_summary(FILE *out, const pm_select_session *s) {
    const pm_select_stats *st = &s->stats;
    int D = s->set.run.devices;
    fprintf(out, "makespan %.2f s, lower bound %.2f s (the tasks' measured work: passes, step "
            "ends, evaluations; max(total / D, longest task)); per device peak bytes / busy:",
            st->makespan_s, st->lower_bound_s);
    for (int d = 0; d < D; d++)
        fprintf(out, " %zu / %.0f%%", st->peak[d], 100 * st->busy[d] / st->makespan_s);
    for (int d = 0; d < D; d++) { /* where each device's time went */
        fprintf(out, "\ndevice %d:", d);
        for (int p = 0; p < PM_PART_COUNT; p++)
            fprintf(out, " %s %.0f%%", pm_select_part_names[p],
                    100 * st->part[(size_t)d * PM_PART_COUNT + p] / st->makespan_s);
    }
    fprintf(out, "\n");
    if (s->set.run.ranks) ranks_line(out, s);
}

