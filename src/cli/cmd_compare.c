/* cmd_compare.c: `pipemem compare`: every named schedule for one (p, m,
 * costs, memory) side by side: makespan, bubble rate, peak memory. Kinds
 * that do not fit the request (m too small, m not a multiple of p for
 * interleaved) are listed with the reason instead of numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pipemem compare -p P -m M [--costs F,B,W[,C]] [--mem F,B,W[,R]] [--mem-limit X]\n"
    "                       [--chunks V] [--recompute] [--dp D --allreduce-cost C]\n"
    "                       [--overlap-fb X] [--format table|json|csv] [-o FILE]\n"
    "\n"
    "Every named schedule side by side: makespan, bubble rate, peak activation memory\n"
    "(max over devices and per device, as multiples of M, one microbatch's activation\n"
    "through the whole model). --chunks sets interleaved's chunks (default 2).\n"
    "--recompute compares every kind with recomputation (each stage keeps its input,\n"
    "R of --mem, and reruns its forward in the backward). --overlap-fb X runs the\n"
    "overlapped F&B pairs of DualPipeV as one pass of max(F, BW) + X min(F, BW) (then\n"
    "no gap: the lower bound runs passes one at a time).\n";

typedef struct {
    const pm_sched_kind *k;
    pm_cli_sched pl;
    pm_status st;
    pm_err err;
} row;

/* The lower bound over every schedule of this one's placement, p, m and
 * costs whose peak is at most this one's (pm_sched_lower_bound_at). */
static double bound(const pm_cli_sched *pl) {
    return pm_sched_lower_bound_at(&pl->s, &pl->c, pm_sim_peak_max_x(&pl->sim) * pl->sim.M);
}

/* makespan / lower bound - 1: how far the schedule could at most improve.
 * NAN for a schedule with overlapped pairs run as one: the bound runs
 * passes one at a time. */
static double gap(const pm_cli_sched *pl) {
    double lb = bound(pl);
    if (pl->c.fb_overlap && pl->s.pair) return NAN;
    return lb > 0 ? pl->sim.makespan / lb - 1 : 0;
}

static void print_table(FILE *f, const row *r, int n, const pm_cli_sched_opts *o) {
    const pm_sched_req *q = &o->req;
    int dp = o->dp > 1;
    fprintf(f, "p=%d m=%d costs F=%g B=%g W=%g C=%g  mem F=%g B=%g W=%g", q->p, q->m, q->t.f,
            q->t.b, q->t.w, q->t.c, q->mem.f, q->mem.b, q->mem.w);
    if (dp) fprintf(f, "  dp=%d sum per stage %g", o->dp, o->ar);
    if (o->have_overlap_fb) fprintf(f, "  F&B pairs max(F, BW) + %g min", o->overlap_fb);
    fprintf(f, "\n%-13s %12s %8s %8s %9s ", "schedule", "makespan", "bubble", "gap", "peak(xM)");
    if (dp) fprintf(f, "%12s %12s ", "dp step", "dp serial");
    fprintf(f, " %s\n", "peak per device (xM)");
    for (int i = 0; i < n; i++) {
        if (r[i].st) {
            fprintf(f, "%-13s %12s %8s %8s %9s  %s\n", r[i].k->name, "-", "-", "-", "-",
                    r[i].err.msg);
            continue;
        }
        const pm_sim *s = &r[i].pl.sim;
        fprintf(f, "%-13s %12.6g %7.2f%% ", r[i].pl.s.kind, s->makespan, 100 * s->bubble);
        if (isnan(gap(&r[i].pl))) fprintf(f, "%8s ", "-");
        else fprintf(f, "%7.2f%% ", 100 * gap(&r[i].pl));
        fprintf(f, "%9.3f ", pm_sim_peak_max_x(s));
        if (dp) fprintf(f, "%12.6g %12.6g ", s->dp_step, s->dp_step_serial);
        for (int d = 0; d < s->p; d++) fprintf(f, " %.3f", pm_sim_peak_x(s, d));
        fputc('\n', f);
    }
}

static void print_json(FILE *f, const row *r, int n, const pm_cli_sched_opts *o) {
    const pm_sched_req *q = &o->req;
    fprintf(f, "{\"p\": %d, \"m\": %d, \"costs\": [%.17g, %.17g, %.17g, %.17g], "
            "\"mem\": [%.17g, %.17g, %.17g], \"dp\": %d, \"allreduce_cost\": %.17g, ",
            q->p, q->m, q->t.f, q->t.b, q->t.w, q->t.c, q->mem.f, q->mem.b, q->mem.w, o->dp,
            o->ar);
    if (o->have_overlap_fb) fprintf(f, "\"overlap_fb\": %.17g, ", o->overlap_fb);
    fprintf(f, "\"schedules\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n  {\"kind\": ", i ? "," : "");
        pm_json_str(f, r[i].st ? r[i].k->name : r[i].pl.s.kind);
        if (r[i].st) {
            fprintf(f, ", \"error\": ");
            pm_json_str(f, r[i].err.msg);
            fputc('}', f);
            continue;
        }
        const pm_sim *s = &r[i].pl.sim;
        fprintf(f, ", \"placement\": \"%s\", \"stages\": %d, \"makespan\": %.17g, "
                "\"bubble\": %.17g, ", pm_place_names[r[i].k->place], r[i].pl.s.S,
                s->makespan, s->bubble);
        if (isnan(gap(&r[i].pl))) /* overlapped pairs: no bound */
            fprintf(f, "\"lower_bound\": null, \"gap\": null, ");
        else
            fprintf(f, "\"lower_bound\": %.17g, \"gap\": %.17g, ", bound(&r[i].pl),
                    gap(&r[i].pl));
        fprintf(f, "\"peak_max\": %.17g, \"peak\": [", pm_sim_peak_max_x(s));
        for (int d = 0; d < s->p; d++) fprintf(f, "%s%.17g", d ? ", " : "", pm_sim_peak_x(s, d));
        fprintf(f, "]");
        if (s->red_start)
            fprintf(f, ", \"dp_step\": %.17g, \"dp_step_serial\": %.17g", s->dp_step,
                    s->dp_step_serial);
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
}

static void print_csv(FILE *f, const row *r, int n, int dp) {
    fprintf(f, "kind,makespan,bubble,peak_max%s", dp ? ",dp_step,dp_step_serial" : "");
    int p = n ? r[0].pl.s.p : 0;
    for (int i = 0; i < n; i++) if (!r[i].st) p = r[i].pl.sim.p;
    for (int d = 0; d < p; d++) fprintf(f, ",peak_%d", d);
    fputc('\n', f);
    for (int i = 0; i < n; i++) {
        if (r[i].st) continue;
        const pm_sim *s = &r[i].pl.sim;
        fprintf(f, "%s,%.17g,%.17g,%.17g", r[i].pl.s.kind, s->makespan, s->bubble,
                pm_sim_peak_max_x(s));
        if (dp) fprintf(f, ",%.17g,%.17g", s->dp_step, s->dp_step_serial);
        for (int d = 0; d < s->p; d++) fprintf(f, ",%.17g", pm_sim_peak_x(s, d));
        fputc('\n', f);
    }
}

int pm_cmd_compare(int argc, char **argv) {
    pm_cli_sched_opts o;
    int rc = pm_cli_sched_parse(argc, argv, &o, usage, NULL);
    if (rc) return rc == 2 ? 0 : rc;
    if (o.kind || o.from) return pm_cli_fail("compare: --kind/--from belong to 'schedule'");
    if (pm_cli_no_polish(&o, "compare")) return 1;
    if (!o.have_p || !o.have_m) return pm_cli_fail("compare: needs -p P and -m M");
    const char *format = o.format ? o.format : "table";
    if (strcmp(format, "table") && strcmp(format, "json") && strcmp(format, "csv"))
        return pm_cli_fail("--format: '%s' is not one of table, json, csv", format);
    if (pm_cli_out_check(o.out)) return 1;
    pm_err cerr;
    if (pm_sched_check_costs(&o.req, &cerr)) return pm_cli_fail("compare: %s", cerr.msg);
    int n;
    const pm_sched_kind *kinds = pm_sched_kinds(&n);
    row *r = calloc((size_t)n, sizeof *r);
    if (!r) return pm_cli_fail("out of memory");
    for (int i = 0; i < n; i++) {
        pm_sched_req q = o.req;
        if (kinds[i].place != PM_PLACE_LOOP) q.v = 0;
        else if (!q.v) q.v = 2;
        r[i].k = &kinds[i];
        r[i].st = pm_cli_sched_make(&r[i].pl, kinds[i].name, &q, &r[i].err);
        if (!r[i].st) r[i].st = pm_cli_sched_overlap(&r[i].pl, &o, &r[i].err);
        if (!r[i].st) r[i].st = pm_cli_sched_dp(&r[i].pl, &o, &r[i].err);
        if (r[i].st) { /* in the table: the library's words with the flags */
            pm_err e = r[i].err;
            pm_cli_flags(e.msg, r[i].err.msg, sizeof r[i].err.msg);
        }
    }
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, o.out);
    if (!f) rc = 1;
    else {
        if (!strcmp(format, "table")) print_table(f, r, n, &o);
        else if (!strcmp(format, "json")) print_json(f, r, n, &o);
        else print_csv(f, r, n, o.dp > 1);
        rc = pm_cli_out_close(&w, 0, o.out);
    }
    for (int i = 0; i < n; i++) pm_cli_sched_free(&r[i].pl);
    free(r);
    return rc;
}
