/* sched.c: what the schedule commands share: their options, and the
 * generate -> validate -> simulate -> write pipeline. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* --allreduce-cost, --time-limit, --mem-limit: a number with its own range. */
static int parse_ranged(const pm_cli_opt *d, const char *val, void *dst) {
    double *x = dst;
    if (pm_cli_double(d->name, val, x)) return 1;
    if (d->tag == 'a' && !(*x >= 0 && *x < 1e300))
        return pm_cli_fail("--allreduce-cost %s: must be >= 0 and below 1e300 (a time in the "
                           "units of --costs)", val);
    if (d->tag == 't' && !(*x > 0)) return pm_cli_fail("--time-limit must be > 0 seconds");
    if (d->tag == 'm' && *x <= 0) return pm_cli_fail("--mem-limit must be > 0 (a multiple of M)");
    if (d->tag == 'o' && !(*x >= 0 && *x <= 1))
        return pm_cli_fail("--overlap-fb %s: must be between 0 (a pair costs the longer of F "
                           "and BW) and 1 (their sum)", val);
    return 0;
}

#define F(x) offsetof(pm_cli_sched_opts, x)
static const pm_cli_opt SCHED_OPTS[] = {
    {"--recompute", 'f', 1, 0, F(req.recompute), NULL, NULL, 0},
    {"--polish", 'f', 1, 0, F(polish), NULL, NULL, 0},
    {"--kind", 's', 0, 0, F(kind), NULL, NULL, 0},
    {"--from", 'r', 0, 0, F(from), NULL, NULL, 0},
    {"--format", 's', 0, 0, F(format), NULL, NULL, 0},
    {"-o", 'w', 0, 0, F(out), NULL, NULL, 0},
    {"-p", 'i', 1, PM_SCHED_MAX_P, F(req.p), NULL, NULL, 0},
    {"-m", 'i', 1, PM_SCHED_MAX_M, F(req.m), NULL, NULL, 0},
    {"--chunks", 'i', 1, 0, F(req.v), NULL, NULL, 0},
    {"--dp", 'i', 1, 1024, F(dp), NULL, NULL, 0},
    {"--allreduce-cost", 'x', 0, 0, F(ar), parse_ranged, NULL, 'a'},
    {"--costs", 'x', 0, 0, F(req.t), pm_cli_costs, NULL, 0},
    {"--mem", 'x', 0, 0, F(req.mem), pm_cli_mem, NULL, 0},
    {"--time-limit", 'x', 0, 0, F(req.time_limit), parse_ranged, NULL, 't'},
    {"--mem-limit", 'x', 0, 0, F(req.mem_limit), parse_ranged, NULL, 'm'},
    {"--overlap-fb", 'x', 0, 0, F(overlap_fb), parse_ranged, NULL, 'o'},
};
#undef F
enum { N_SCHED_OPTS = sizeof SCHED_OPTS / sizeof SCHED_OPTS[0] };

int pm_cli_sched_parse(int argc, char **argv, pm_cli_sched_opts *o, const char *usage,
                       const pm_cli_opts *extra) {
    *o = (pm_cli_sched_opts){.req = {.t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT}, .dp = 1};
    int at[N_SCHED_OPTS];
    pm_cli_opts sets[2] = {{SCHED_OPTS, N_SCHED_OPTS, o, at}};
    if (extra) sets[1] = sets[0], sets[0] = *extra;
    int rc = pm_cli_parse(argv[0], argc, argv, 1, sets, extra ? 2 : 1, NULL, NULL);
    if (rc == 2) fputs(usage, stdout);
    if (rc) return rc;
    o->have_p = pm_cli_given(&sets[extra ? 1 : 0], "-p") > 0;
    o->have_m = pm_cli_given(&sets[extra ? 1 : 0], "-m") > 0;
    o->have_overlap_fb = pm_cli_given(&sets[extra ? 1 : 0], "--overlap-fb") > 0;
    if (o->have_overlap_fb && o->polish)
        return pm_cli_fail("--polish with --overlap-fb: the polish moves passes one at a time "
                           "and would break the pairs; drop one");
    if (o->dp <= 1 && o->ar > 0)
        return pm_cli_fail("--allreduce-cost needs --dp D > 1 (one replica sums nothing)");
    return 0;
}

pm_status pm_cli_sched_dp(pm_cli_sched *pl, const pm_cli_sched_opts *o, pm_err *err) {
    if (o->dp <= 1 && o->ar > 0)
        return pm_errf(err, PM_ERR_ARG, "--allreduce-cost needs --dp D > 1 (one replica sums "
                       "nothing)");
    if (o->dp <= 1) return PM_OK;
    double *ar = malloc((size_t)pl->s.S * sizeof *ar);
    if (!ar) return pm_errf(err, PM_ERR_NOMEM, "out of memory");
    for (int k = 0; k < pl->s.S; k++) ar[k] = o->ar;
    pm_status st = pm_sim_dp(&pl->sim, &pl->s, ar, err);
    free(ar);
    return st;
}

int pm_cli_no_polish(const pm_cli_sched_opts *o, const char *cmd) {
    if (o->polish)
        return pm_cli_fail("%s: --polish belongs to 'schedule'%s", cmd,
                           strcmp(cmd, "compare") ? " (search and curve polish their candidates "
                           "themselves)" : "");
    return 0;
}

int pm_cli_no_dp(const pm_cli_sched_opts *o, const char *cmd) {
    if (o->dp > 1 || o->ar > 0)
        return pm_cli_fail("%s: --dp and --allreduce-cost belong to 'schedule' and 'compare'",
                           cmd);
    if (o->have_overlap_fb)
        return pm_cli_fail("%s: --overlap-fb belongs to 'schedule' and 'compare' (the searches "
                           "and their lower bound run passes one at a time)", cmd);
    return 0;
}

pm_status pm_cli_sched_overlap(pm_cli_sched *pl, const pm_cli_sched_opts *o, pm_err *err) {
    if (!o->have_overlap_fb) return PM_OK;
    pl->c.fb_overlap = 1;
    pl->c.fb_frac = o->overlap_fb;
    return pm_sim_replay(&pl->sim, &pl->s, &pl->c, err);
}

void pm_cli_sched_free(pm_cli_sched *pl) {
    pm_sim_free(&pl->sim);
    pm_cost_free(&pl->c);
    pm_sched_free(&pl->s);
}

pm_status pm_cli_sched_adopt(pm_cli_sched *pl, const pm_sched_req *req, pm_err *err) {
    pm_status st = pm_cost_init_uniform(&pl->c, &pl->s, req->t, req->mem, err);
    if (!st) st = pm_sched_validate(&pl->s, &pl->c, req->mem_limit, err);
    if (!st) st = pm_sim_run(&pl->sim, &pl->s, &pl->c, err);
    return st;
}

pm_status pm_cli_sched_make(pm_cli_sched *pl, const char *kind, const pm_sched_req *req,
                           pm_err *err) {
    *pl = (pm_cli_sched){0};
    pm_status st = pm_sched_generate(&pl->s, kind, req, err);
    if (!st) st = pm_cli_sched_adopt(pl, req, err);
    if (st) pm_cli_sched_free(pl);
    return st;
}

int pm_cli_sched_format_ok(const char *format) {
    static const char *const ok[] = {"text", "csv", "json", "svg", "trace"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(format, ok[i])) return 0;
    return pm_cli_fail("--format: '%s' is not one of text, csv, json, svg, trace", format);
}

int pm_cli_out_check(const char *path) {
    pm_err err;
    if (path && pm_path_check_writable(path, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

FILE *pm_cli_out_open(pm_wfile *w, const char *path) {
    pm_err err;
    if (pm_wfile_open(w, path, &err)) {
        pm_cli_fail("%s", err.msg);
        return NULL;
    }
    return w->f;
}

int pm_cli_out_close(pm_wfile *w, int bad, const char *path) {
    pm_err err;
    if (bad || ferror((FILE *)w->f)) {
        pm_wfile_abort(w);
        return pm_cli_fail("writing %s failed", path ? path : "standard output");
    }
    if (pm_wfile_commit(w, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

void pm_cli_sched_summary(FILE *f, const pm_cli_sched *pl) {
    fprintf(f, "# %s: p=%d m=%d placement=%s stages=%d\n", pl->s.kind, pl->s.p, pl->s.m,
            pm_place_names[pl->s.place], pl->s.S);
    fprintf(f, "# makespan %.6g  bubble %.4f  peak %.4f M (per device:", pl->sim.makespan,
            pl->sim.bubble, pm_sim_peak_max_x(&pl->sim));
    for (int d = 0; d < pl->s.p; d++) fprintf(f, " %.4f", pm_sim_peak_x(&pl->sim, d));
    fprintf(f, ")\n");
    if (pl->c.fb_overlap)
        fprintf(f, "# overlapped F&B pairs run as one: max(F, BW) + %g min(F, BW)\n",
                pl->c.fb_frac);
    if (pl->sim.red_start)
        fprintf(f, "# data parallel: step %.6g with the gradient sums overlapped, %.6g with each "
                "device's sums after its passes\n", pl->sim.dp_step, pl->sim.dp_step_serial);
}

int pm_cli_sched_write(const pm_cli_sched *pl, const char *format, const char *path, int summary) {
    if (pm_cli_sched_format_ok(format)) return 1;
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, path);
    if (!f) return 1;
    pm_status st = PM_OK;
    if (!strcmp(format, "text")) {
        if (summary) pm_cli_sched_summary(f, pl);
        st = pm_sched_write_text(f, &pl->s);
    }
    else if (!strcmp(format, "csv")) {
        st = pm_sched_write_csv(f, &pl->s);
        if (pl->s.recompute) /* PyTorch's layout has no place for it (format_text.c) */
            fprintf(stderr, "pipemem: note: the CSV holds the actions only; this schedule "
                    "recomputes: read it with --recompute (--format text keeps the mark)\n");
    }
    else if (!strcmp(format, "json")) st = pm_sched_write_json(f, &pl->s, &pl->c, &pl->sim);
    else if (!strcmp(format, "trace")) st = pm_sched_write_trace(f, &pl->s, &pl->sim);
    else st = pm_sched_write_svg(f, &pl->s, &pl->sim, NULL);
    return pm_cli_out_close(&w, st != PM_OK, path);
}
