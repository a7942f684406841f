/* plan.c: what the schedule commands share: their options, and the
 * generate -> validate -> simulate -> write pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Every option of the schedule commands; each takes a value. */
static const char *const KNOWN[] = {"--kind", "--from", "--format", "-o", "-p",
                                    "-m", "--chunks", "--costs", "--mem", "--mem-limit"};

static int known(const char *a) {
    for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++)
        if (!strcmp(a, KNOWN[k])) return 1;
    return 0;
}

int pm_cli_sched_parse(int argc, char **argv, pm_cli_sched_opts *o, const char *usage) {
    *o = (pm_cli_sched_opts){.req = {.t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 2;
        }
        if (!known(a))
            return pm_cli_fail("unknown option '%s' (see pipemem %s --help)", a, argv[0]);
        if (!val) return pm_cli_fail("%s needs a value", a);
        if (!strcmp(a, "--kind")) o->kind = val;
        else if (!strcmp(a, "--from")) o->from = val;
        else if (!strcmp(a, "--format")) o->format = val;
        else if (!strcmp(a, "-o")) o->out = val;
        else if (!strcmp(a, "-p")) bad = pm_cli_int(a, val, 1, PM_CLI_INT_MAX, &o->req.p);
        else if (!strcmp(a, "-m")) bad = pm_cli_int(a, val, 1, PM_CLI_INT_MAX, &o->req.m);
        else if (!strcmp(a, "--chunks")) bad = pm_cli_int(a, val, 1, 1 << 20, &o->req.v);
        else if (!strcmp(a, "--costs")) bad = pm_cli_costs(val, &o->req.t);
        else if (!strcmp(a, "--mem")) bad = pm_cli_mem(val, &o->req.mem);
        else if (!strcmp(a, "--mem-limit")) {
            bad = pm_cli_double(a, val, &o->req.mem_limit);
            if (!bad && o->req.mem_limit <= 0)
                bad = pm_cli_fail("--mem-limit must be > 0 (a multiple of M)");
        }
        if (bad) return 1;
        o->have_p |= !strcmp(a, "-p");
        o->have_m |= !strcmp(a, "-m");
        i++; /* every option but --help takes a value */
    }
    return 0;
}

void pm_cli_plan_free(pm_cli_plan *pl) {
    pm_sim_free(&pl->sim);
    pm_cost_free(&pl->c);
    pm_sched_free(&pl->s);
}

pm_status pm_cli_plan_adopt(pm_cli_plan *pl, const pm_sched_req *req, pm_err *err) {
    pm_status st = pm_cost_init_uniform(&pl->c, &pl->s, req->t, req->mem, err);
    if (!st) st = pm_sched_validate(&pl->s, &pl->c, req->mem_limit, err);
    if (!st) st = pm_sim_run(&pl->sim, &pl->s, &pl->c, err);
    return st;
}

pm_status pm_cli_plan_make(pm_cli_plan *pl, const char *kind, const pm_sched_req *req,
                           pm_err *err) {
    *pl = (pm_cli_plan){0};
    pm_status st = pm_sched_generate(&pl->s, kind, req, err);
    if (!st) st = pm_cli_plan_adopt(pl, req, err);
    if (st) pm_cli_plan_free(pl);
    return st;
}

void pm_cli_plan_summary(FILE *f, const pm_cli_plan *pl) {
    fprintf(f, "# %s: p=%d m=%d placement=%s stages=%d\n", pl->s.kind, pl->s.p, pl->s.m,
            pm_place_names[pl->s.place], pl->s.S);
    fprintf(f, "# makespan %.6g  bubble %.4f  peak %.4f M (per device:", pl->sim.makespan,
            pl->sim.bubble, pm_sim_peak_max_x(&pl->sim));
    for (int d = 0; d < pl->s.p; d++) fprintf(f, " %.4f", pm_sim_peak_x(&pl->sim, d));
    fprintf(f, ")\n");
}

int pm_cli_format_check(const char *format, const char *const *allowed) {
    for (int k = 0; allowed[k]; k++)
        if (!strcmp(format, allowed[k])) return 0;
    char list[128] = "";
    for (int k = 0, at = 0; allowed[k] && at < (int)sizeof list; k++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%s", k ? ", " : "", allowed[k]);
    return pm_cli_fail("--format: '%s' is not one of %s", format, list);
}

const char *const pm_cli_plan_formats[] = {"text", "csv", "json", "svg", "trace", NULL};

int pm_cli_open_out(pm_wfile *w, const char *path) {
    pm_err err;
    if (pm_wfile_open(w, path, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

int pm_cli_close_out(pm_wfile *w, int failed) {
    pm_err err;
    if (failed || ferror(w->f)) {
        const char *name = w->name;
        pm_wfile_abort(w);
        return pm_cli_fail("writing %s failed", name);
    }
    if (pm_wfile_commit(w, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

int pm_cli_plan_write(const pm_cli_plan *pl, const char *format, const char *path) {
    if (pm_cli_format_check(format, pm_cli_plan_formats)) return 1;
    pm_wfile w;
    if (pm_cli_open_out(&w, path)) return 1;
    FILE *f = w.f;
    pm_status st = PM_OK;
    if (!strcmp(format, "text")) {
        pm_cli_plan_summary(f, pl);
        st = pm_sched_write_text(f, &pl->s);
    } else if (!strcmp(format, "csv")) st = pm_sched_write_csv(f, &pl->s);
    else if (!strcmp(format, "json")) st = pm_sched_write_json(f, &pl->s, &pl->c, &pl->sim);
    else if (!strcmp(format, "trace")) st = pm_sched_write_trace(f, &pl->s, &pl->sim);
    else st = pm_sched_write_svg(f, &pl->s, &pl->sim, NULL);
    return pm_cli_close_out(&w, st != PM_OK);
}
