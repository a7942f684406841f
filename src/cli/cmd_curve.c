/* cmd_curve.c: `pipemem curve`: bubble rate of the best schedule of each
 * family (single placement, V placement, interleaved) against the memory
 * limit, as a table, JSON or an SVG plot, so a user sees where memory buys
 * speed. The numbers come from pm_sched_curve (src/schedule/search.c). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pipemem curve -p P -m M [--costs F,B,W[,C]] [--mem F,B,W[,R]] [--recompute]\n"
    "                     [--from 0.25] [--to 2] [--step 0.05]\n"
    "                     [--format table|json|svg] [-o FILE]\n"
    "\n"
    "Bubble rate of the fastest schedule of each family (single placement, V placement,\n"
    "interleaved) for every memory limit from --from to --to (multiples of M, 1F1B's\n"
    "peak) in steps of --step. A dash marks limits no schedule of the family fits.\n"
    "Recomputed schedules take part (below V-Min's memory only they fit);\n"
    "--recompute draws the curve of recomputed schedules alone.\n"
    "Supported range: p <= 128 and p m <= 2^15 (as `pipemem search`).\n";

#define MAX_LIMITS 4096

typedef struct {
    double from, to, step;
} range;

/* --from/--to/--step: numbers here (not the --from FILE of `schedule`),
 * parsed before the schedule commands' options. */
static const pm_cli_opt RANGE_OPTS[] = {
    {"--from", 'd', 0, 0, offsetof(range, from), NULL, NULL, 0},
    {"--to", 'd', 0, 0, offsetof(range, to), NULL, NULL, 0},
    {"--step", 'd', 0, 0, offsetof(range, step), NULL, NULL, 0},
};

static int check_range(const range *r) {
    if (!(r->from > 0) || !(r->to >= r->from) || !(r->step > 0))
        return pm_cli_fail("curve: need 0 < --from <= --to and --step > 0 (got %g, %g, %g)",
                           r->from, r->to, r->step);
    if ((r->to - r->from) / r->step + 1 > MAX_LIMITS)
        return pm_cli_fail("curve: more than %d limits; raise --step", MAX_LIMITS);
    return 0;
}

static void print_table(FILE *f, const pm_sched_req *q, const double *lim, int n,
                        const pm_search_point *pt) {
    fprintf(f, "p=%d m=%d costs F=%g B=%g W=%g C=%g  (bubble %% of the fastest schedule per "
            "family; limit and peak in M)\n", q->p, q->m, q->t.f, q->t.b, q->t.w, q->t.c);
    fprintf(f, "%7s", "limit");
    for (int fam = 0; fam < PM_PLACE_COUNT; fam++)
        fprintf(f, "  %-8s %-14s %6s", pm_place_names[fam], "(kind)", "peak");
    fputc('\n', f);
    for (int k = 0; k < n; k++) {
        fprintf(f, "%7.3f", lim[k]);
        for (int fam = 0; fam < PM_PLACE_COUNT; fam++) {
            const pm_search_point *x = &pt[fam * n + k];
            if (!x->ok) fprintf(f, "  %-8s %-14s %6s", "-", "", "");
            else fprintf(f, "  %7.2f%% %-14s %6.3f", 100 * x->bubble, x->kind, x->peak);
        }
        fputc('\n', f);
    }
}

static void print_json(FILE *f, const pm_sched_req *q, const double *lim, int n,
                       const pm_search_point *pt) {
    fprintf(f, "{\"p\": %d, \"m\": %d, \"costs\": [%.17g, %.17g, %.17g, %.17g], "
            "\"mem\": [%.17g, %.17g, %.17g], \"limits\": [", q->p, q->m, q->t.f, q->t.b, q->t.w,
            q->t.c, q->mem.f, q->mem.b, q->mem.w);
    for (int k = 0; k < n; k++) fprintf(f, "%s%.17g", k ? ", " : "", lim[k]);
    fprintf(f, "], \"families\": [");
    for (int fam = 0; fam < PM_PLACE_COUNT; fam++) {
        fprintf(f, "%s\n  {\"family\": \"%s\", \"points\": [", fam ? "," : "",
                pm_place_names[fam]);
        for (int k = 0; k < n; k++) {
            const pm_search_point *x = &pt[fam * n + k];
            fprintf(f, "%s\n    {\"limit\": %.17g, ", k ? "," : "", lim[k]);
            if (!x->ok) fprintf(f, "\"ok\": false}");
            else
                fprintf(f, "\"ok\": true, \"kind\": \"%s\", \"bubble\": %.17g, \"makespan\": "
                        "%.17g, \"peak\": %.17g}", x->kind, x->bubble, x->makespan, x->peak);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
}

/* SVG plot: bubble (%) against the limit (x M), one line per family with
 * its points marked; gaps where a family has no schedule. */
static void print_svg(FILE *f, const pm_sched_req *q, const double *lim, int n,
                      const pm_search_point *pt) {
    static const char *const colour[PM_PLACE_COUNT] = {"#d62728", "#1f77b4", "#2ca02c"};
    static const char *const label[PM_PLACE_COUNT] = {
        "single placement (1F1B, ZB-H1/H2, ZB heuristic)",
        "V placement (V-Min, V-Half, ZB-V, V-ZB, DualPipeV, auto-v)",
        "interleaved (loop placement)"};
    const double W = 760, H = 480, L = 70, R = 20, Tp = 50, B = 60;
    double x0 = lim[0], x1 = lim[n - 1] > lim[0] ? lim[n - 1] : lim[0] + 1, ymax = 0;
    for (int i = 0; i < PM_PLACE_COUNT * n; i++)
        if (pt[i].ok && pt[i].bubble > ymax) ymax = pt[i].bubble;
    /* a round y step (1, 2, 5, 10 or 20 %) giving at most 8 ticks */
    static const double ysteps[] = {0.01, 0.02, 0.05, 0.10, 0.20};
    double ystep = 0.20;
    for (int i = 0; i < 5; i++)
        if (ymax / ysteps[i] <= 8) {
            ystep = ysteps[i];
            break;
        }
    int ny = ymax > 0 ? (int)ceil(ymax / ystep - 1e-9) : 1;
    ymax = ny * ystep;
    /* x ticks on multiples of 0.25 (or 0.05 for a narrow range) */
    double xstep = x1 - x0 > 1 ? 0.25 : x1 - x0 > 0.3 ? 0.1 : 0.05;
#define PX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define PY(y) (Tp + (1 - (y) / ymax) * (H - Tp - B))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
            "height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">bubble rate "
            "against activation memory limit  p=%d m=%d costs %g,%g,%g,%g</text>\n", W / 2,
            q->p, q->m, q->t.f, q->t.b, q->t.w, q->t.c);
    for (int i = 0; i <= ny; i++) { /* y grid and ticks */
        double y = ystep * i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n", L, PY(y),
                W - R, PY(y), L - 6, PY(y) + 4, 100 * y);
    }
    for (double x = ceil(x0 / xstep - 1e-9) * xstep; x <= x1 + 1e-9; x += xstep) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.2f</text>\n", PX(x), Tp,
                PX(x), H - B, PX(x), H - B + 16, x);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L,
            H - B, W - R, H - B, L, Tp, L, H - B);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">activation memory limit "
            "(multiples of M, 1F1B's peak)</text>\n", (L + W - R) / 2, H - 18);
    fprintf(f, "<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">"
            "bubble rate of the fastest schedule</text>\n", (Tp + H - B) / 2);
    for (int fam = 0, row = 0; fam < PM_PLACE_COUNT; fam++) {
        const pm_search_point *x = pt + fam * n;
        int any = 0, open = 0;
        for (int k = 0; k < n; k++) {
            if (!x[k].ok) {
                if (open) fprintf(f, "\"/>\n");
                open = 0;
                continue;
            }
            if (!open) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                               "points=\"", colour[fam]);
            fprintf(f, "%.1f,%.1f ", PX(lim[k]), PY(x[k].bubble));
            open = any = 1;
        }
        if (open) fprintf(f, "\"/>\n");
        for (int k = 0; k < n; k++)
            if (x[k].ok)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s at "
                        "%.3g M: %.2f%% (peak %.3f M)</title></circle>\n", PX(lim[k]),
                        PY(x[k].bubble), colour[fam], x[k].kind, lim[k], 100 * x[k].bubble,
                        x[k].peak);
        if (!any) continue;
        double ly = Tp + 14 + 18 * row++;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", W - R - 330, ly, W - R - 300, ly,
                colour[fam], W - R - 315, ly, colour[fam], W - R - 292, ly + 4, label[fam]);
    }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
}

int pm_cmd_curve(int argc, char **argv) {
    range r = {0.25, 2.0, 0.05};
    pm_cli_opts extra = {RANGE_OPTS, sizeof RANGE_OPTS / sizeof RANGE_OPTS[0], &r, NULL};
    pm_cli_sched_opts o;
    int rc = pm_cli_sched_parse(argc, argv, &o, usage, &extra);
    if (rc) return rc == 2 ? 0 : rc;
    if (check_range(&r)) return 1;
    if (o.kind) return pm_cli_fail("curve: --kind belongs to 'schedule'");
    if (pm_cli_no_dp(&o, "curve")) return 1;
    if (pm_cli_no_polish(&o, "curve")) return 1;
    if (!o.have_p || !o.have_m) return pm_cli_fail("curve: needs -p P and -m M");
    if (o.req.mem_limit > 0) return pm_cli_fail("curve: give --from/--to/--step, not --mem-limit");
    const char *format = o.format ? o.format : "table";
    if (strcmp(format, "table") && strcmp(format, "json") && strcmp(format, "svg"))
        return pm_cli_fail("--format: '%s' is not one of table, json, svg", format);
    if (pm_cli_out_check(o.out)) return 1;
    int n = (int)floor((r.to - r.from) / r.step + 1e-9) + 1;
    double *lim = malloc((size_t)n * sizeof *lim);
    pm_search_point *pt = malloc((size_t)n * PM_PLACE_COUNT * sizeof *pt);
    if (!lim || !pt) {
        free(lim), free(pt);
        return pm_cli_fail("out of memory for %d limits", n);
    }
    for (int k = 0; k < n; k++) lim[k] = r.from + k * r.step;
    pm_err err;
    if (pm_sched_curve(&o.req, lim, n, pt, &err)) rc = pm_cli_fail("curve: %s", err.msg);
    pm_wfile w;
    FILE *f = rc ? NULL : pm_cli_out_open(&w, o.out);
    if (!rc && !f) rc = 1;
    if (f) {
        if (!strcmp(format, "table")) print_table(f, &o.req, lim, n, pt);
        else if (!strcmp(format, "json")) print_json(f, &o.req, lim, n, pt);
        else print_svg(f, &o.req, lim, n, pt);
        rc = pm_cli_out_close(&w, 0, o.out);
        if (!rc && o.out)
            fprintf(stderr, "pipemem: wrote %s (%d limits, %g to %g M)\n", o.out, n, lim[0],
                    lim[n - 1]);
    }
    free(lim);
    free(pt);
    return rc;
}
