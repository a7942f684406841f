/* plan_out.c: the reports of `pipemem plan` (plan_out.h). GB is 10^9
 * bytes everywhere; a plan's figures are its busiest device's (the one
 * with the largest total), the per-device lists every device's. */
#include <math.h>
#include <string.h>

#include "plan_out.h"

static double gb(double bytes) { return bytes / 1e9; }

/* Device d's bytes of kind k (k < 0: its total). */
static double dev_bytes(const pm_cluster_plan *p, int d, int k) {
    return (double)(k < 0 ? p->dev[d].total : p->dev[d].bytes[k]);
}

/* The kinds' names in this report's JSON and CSV, and their columns. */
static const char *const kind_key[PM_BYTES_COUNT] = {"parameters",  "gradients", "optimizer",
                                                     "activations", "workspace", "transport"};
static const char *const column[PM_BYTES_COUNT] = {"params", "grads", "optim",
                                                   "act",    "work",  "trans"};

/* The bytes of every kind a report shows, " %7.3g" GB each. */
static void kind_cells(FILE *f, const plan_report *r, const pm_cluster_plan *p, int d) {
    for (int k = 0; k < r->kinds; k++) fprintf(f, " %7.3g", gb(dev_bytes(p, d, k)));
}

static void kind_heads(FILE *f, const plan_report *r) {
    for (int k = 0; k < r->kinds; k++) fprintf(f, " %7s", column[k]);
}

/* ---- table ------------------------------------------------------------------- */

static void table_row(FILE *f, const plan_report *r, const pm_cluster_plan *p) {
    fprintf(f, "%-14s %3d %3d %4d %5d  %-4s", p->kind, p->pp, p->dp, p->mbs, p->m,
            p->fits ? "yes" : "NO");
    kind_cells(f, r, p, p->busiest);
    fprintf(f, " %8.4g %6.1f%% ", gb(p->total_max), 100 * p->bubble);
    fprintf(f, "%9.4g %10.4g ", p->step, p->samples);
    if (r->mfu) fprintf(f, "%5.1f%%\n", 100 * p->mfu);
    else fprintf(f, "%6s\n", "-");
}

/* The best plan's devices one by one. */
static void table_devices(FILE *f, const plan_report *r, const pm_cluster_plan *p) {
    fprintf(f, "\n%s, pp=%d dp=%d mbs=%d m=%d: each device (GB; layers: embedding 0, blocks, "
            "head last)\n%6s %-14s", p->kind, p->pp, p->dp, p->mbs, p->m, "device", "layers");
    kind_heads(f, r);
    fprintf(f, " %8s\n", "total");
    for (int d = 0; d < p->pp; d++) {
        char layers[64] = "";
        size_t at = 0;
        for (int k = 0; k < p->S && at < sizeof layers; k++) {
            if (p->stage_device[k] != d) continue;
            int a = p->first[k], b = p->first[k + 1] - 1;
            at += (size_t)(a == b ? snprintf(layers + at, sizeof layers - at, "%s%d",
                                             at ? "," : "", a)
                                  : snprintf(layers + at, sizeof layers - at, "%s%d-%d",
                                             at ? "," : "", a, b));
        }
        fprintf(f, "%6d %-14s", d, layers);
        kind_cells(f, r, p, d);
        fprintf(f, " %8.4g\n", gb(dev_bytes(p, d, -1)));
    }
}

/* The report's scaling, after the model in titles: what its times rest on. */
static void timed_note(FILE *f, const plan_report *r) {
    if (r->timed_seq) fprintf(f, " (passes timed at seq %d, scaled by FLOPs)", r->timed_seq);
}

int plan_write_table(FILE *f, const plan_report *r) {
    fputs(r->model, f);
    timed_note(f, r);
    fprintf(f, " on %d devices", r->devices);
    if (r->device_mem > 0) fprintf(f, " of %.2f GB", gb(r->device_mem));
    fprintf(f, ": %d plan%s, those that fit first, fastest first; the busiest device's GB\n",
            r->n, r->n == 1 ? "" : "s");
    fprintf(f, "%-14s %3s %3s %4s %5s  %-4s", "kind", "pp", "dp", "mbs", "m", "fits");
    kind_heads(f, r);
    fprintf(f, " %8s %7s %9s %10s %6s\n", "total", "bubble",
            strcmp(r->time_unit, "s") ? "step(flop)" : "step(s)",
            strcmp(r->time_unit, "s") ? "samples/fl" : "samples/s", "MFU");
    int rows = r->top > 0 && r->top < r->n ? r->top : r->n;
    for (int i = 0; i < rows; i++) table_row(f, r, &r->plan[i]);
    if (rows < r->n) fprintf(f, "... %d more (--top 0, or --format csv, lists all)\n", r->n - rows);
    if (r->n) table_devices(f, r, &r->plan[0]);
    return ferror(f) != 0;
}

/* ---- CSV: one row per device of each plan -------------------------------------- */

int plan_write_csv(FILE *f, const plan_report *r) {
    fprintf(f, "plan,kind,pp,dp,mbs,microbatches,device");
    for (int k = 0; k < r->kinds; k++) fprintf(f, ",%s_gb", kind_key[k]);
    fprintf(f, ",total_gb,fits,bubble,step_s,samples_per_s,mfu,timed_seq\n");
    for (int i = 0; i < r->n; i++) {
        const pm_cluster_plan *p = &r->plan[i];
        for (int d = 0; d < p->pp; d++) {
            fprintf(f, "%d,%s,%d,%d,%d,%d,%d", i, p->kind, p->pp, p->dp, p->mbs, p->m, d);
            for (int k = 0; k < r->kinds; k++) fprintf(f, ",%.6f", gb(dev_bytes(p, d, k)));
            fprintf(f, ",%.6f,%d,%.6f,%.9g,%.9g,", gb(dev_bytes(p, d, -1)), p->fits, p->bubble,
                    p->step, p->samples);
            if (r->mfu) fprintf(f, "%.6f", p->mfu);
            fprintf(f, ",%d\n", r->timed_seq); /* 0: the passes were timed whole */
        }
    }
    return ferror(f) != 0;
}

/* ---- JSON ------------------------------------------------------------------------ */

static void json_list(FILE *f, const char *name, const pm_cluster_plan *p, int k) {
    fprintf(f, "\"%s\": [", name);
    for (int d = 0; d < p->pp; d++)
        fprintf(f, "%s%s", d ? ", " : "", PM_JSON_NUM(gb(dev_bytes(p, d, k))));
    fputc(']', f);
}

static void json_plan(FILE *f, const plan_report *r, const pm_cluster_plan *p) {
    fprintf(f, "{\"kind\": ");
    pm_json_str(f, p->kind);
    fprintf(f, ", \"pp\": %d, \"dp\": %d, \"mbs\": %d, \"microbatches\": %d, \"zero\": %d, "
            "\"activation_gb\": %s, \"state_gb\": %s, \"total_gb\": %s, \"fits\": %s, "
            "\"bubble\": %s, \"step_s\": %s, \"samples_per_s\": %s, \"mfu\": %s",
            p->pp, p->dp, p->mbs, p->m, p->zero, PM_JSON_NUM(gb(p->act_peak)),
            PM_JSON_NUM(gb(p->state)), PM_JSON_NUM(gb(p->total_max)), p->fits ? "true" : "false",
            PM_JSON_NUM(p->bubble), PM_JSON_NUM(p->step), PM_JSON_NUM(p->samples),
            r->mfu ? PM_JSON_NUM(p->mfu) : "null");
    fprintf(f, ", \"busiest\": %d, \"m_bytes\": %s, \"auto_limit_m\": %s, \"stage_layers\": [",
            p->busiest, PM_JSON_NUM(p->M), PM_JSON_NUM(p->limit));
    for (int s = 0; s < p->S; s++) fprintf(f, "%s%d", s ? ", " : "", p->first[s + 1] - p->first[s]);
    fprintf(f, "], \"stage_device\": [");
    for (int s = 0; s < p->S; s++) fprintf(f, "%s%d", s ? ", " : "", p->stage_device[s]);
    fprintf(f, "],\n   \"per_device_gb\": {");
    for (int k = 0; k < r->kinds; k++) {
        json_list(f, kind_key[k], p, k);
        fputs(", ", f);
    }
    json_list(f, "total", p, -1);
    fputs("}}", f);
}

int plan_write_json(FILE *f, const plan_report *r) {
    fprintf(f, "{\"model\": ");
    pm_json_str(f, r->model);
    fprintf(f, ", \"devices\": %d, \"device_mem_gb\": %s, \"time_unit\": ", r->devices,
            PM_JSON_NUM(gb(r->device_mem)));
    pm_json_str(f, r->time_unit);
    fprintf(f, ", \"timed_seq\": %d, \"plans\": [", r->timed_seq);
    for (int i = 0; i < r->n; i++) {
        fputs(i ? ",\n  " : "\n  ", f);
        json_plan(f, r, &r->plan[i]);
    }
    fputs("],\n \"best\": ", f);
    if (r->n && r->plan[0].fits) json_plan(f, r, &r->plan[0]);
    else fputs("null", f);
    fputs("}\n", f);
    return ferror(f) != 0;
}

/* ---- SVG: the memory-throughput plane ------------------------------------------- */

enum { SVG_W = 780, SVG_H = 520, SVG_L = 72, SVG_R = 170, SVG_T = 56, SVG_B = 56 };

/* One colour per kind in the registry's order (distinct for 14 kinds),
 * the recomputed variant sharing its kind's (and drawn as a square). */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                      "#393b79", "#637939", "#8c6d31", "#843c39"};

static int recomputed(const char *kind) {
    size_t n = strlen(kind);
    return n > 2 && !strcmp(kind + n - 2, "-r");
}

static const char *kind_colour(const char *kind) {
    int nk;
    const pm_sched_kind *k = pm_sched_kinds(&nk);
    size_t n = strlen(kind) - (recomputed(kind) ? 2 : 0);
    for (int i = 0; i < nk; i++)
        if (strlen(k[i].name) == n && !strncmp(k[i].name, kind, n))
            return palette[i % (sizeof palette / sizeof palette[0])];
    return "#000000";
}

/* A round step for about n ticks over span (1, 2 or 5 times a power of 10). */
static double nice_step(double span, int n) {
    double raw = span / n, mag = pow(10, floor(log10(raw))), x = raw / mag;
    return (x <= 1 ? 1 : x <= 2 ? 2 : x <= 5 ? 5 : 10) * mag;
}

typedef struct {
    double x0, x1, y0, y1; /* data ranges */
} svg_axes;

static double px(const svg_axes *a, double x) {
    return SVG_L + (x - a->x0) / (a->x1 - a->x0) * (SVG_W - SVG_L - SVG_R);
}
static double py(const svg_axes *a, double y) {
    return SVG_H - SVG_B - (y - a->y0) / (a->y1 - a->y0) * (SVG_H - SVG_T - SVG_B);
}

/* Text for an SVG element: the markup characters escaped. */
static void xml_str(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

static double plan_y(const plan_report *r, const pm_cluster_plan *p) {
    return r->mfu ? 100 * p->mfu : p->samples;
}

static void svg_grid(FILE *f, const plan_report *r, const svg_axes *a) {
    double sx = nice_step(a->x1 - a->x0, 8), sy = nice_step(a->y1 - a->y0, 6);
    fputs("<g class=\"axes\" font-size=\"11\" stroke-width=\"1\">\n", f);
    for (double x = ceil(a->x0 / sx) * sx; x <= a->x1 + 1e-9; x += sx)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e6e6e6\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", px(a, x), SVG_T,
                px(a, x), SVG_H - SVG_B, px(a, x), SVG_H - SVG_B + 16, x);
    for (double y = ceil(a->y0 / sy) * sy; y <= a->y1 + 1e-9; y += sy)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", SVG_L, py(a, y),
                SVG_W - SVG_R, py(a, y), SVG_L - 6, py(a, y) + 4, y);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#444\"/>\n", SVG_L, SVG_T, SVG_W - SVG_L - SVG_R, SVG_H - SVG_T - SVG_B);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">activation memory of the "
            "device with the most (GB)</text>\n", (SVG_W - SVG_R + SVG_L) / 2, SVG_H - 16);
    fprintf(f, "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\">%s"
            "</text>\n</g>\n", (SVG_H - SVG_B + SVG_T) / 2,
            r->mfu ? "MFU (%)" : "samples per time unit");
}

/* Marks the Pareto front: fitting plans that no other fitting plan beats
 * with at most their activation memory. */
static void pareto(const plan_report *r, char *front) {
    for (int i = 0; i < r->n; i++) {
        const pm_cluster_plan *p = &r->plan[i];
        front[i] = p->fits;
        for (int j = 0; j < r->n && front[i]; j++) {
            const pm_cluster_plan *q = &r->plan[j];
            if (j != i && q->fits && q->act_peak <= p->act_peak &&
                plan_y(r, q) >= plan_y(r, p) &&
                (q->act_peak < p->act_peak || plan_y(r, q) > plan_y(r, p) || j < i))
                front[i] = 0;
        }
    }
}

static void svg_front(FILE *f, const plan_report *r, const svg_axes *a, const char *front) {
    fputs("<polyline class=\"front\" fill=\"none\" stroke=\"#333\" stroke-dasharray=\"5 3\" "
          "points=\"", f);
    double last = -1;
    for (int k = 0; k < r->n; k++) { /* by activation, ascending */
        int best = -1;
        for (int i = 0; i < r->n; i++)
            if (front[i] && r->plan[i].act_peak > last &&
                (best < 0 || r->plan[i].act_peak < r->plan[best].act_peak))
                best = i;
        if (best < 0) break;
        last = r->plan[best].act_peak;
        fprintf(f, "%.1f,%.1f ", px(a, gb(last)), py(a, plan_y(r, &r->plan[best])));
    }
    fputs("\"/>\n", f);
}

/* Label boxes already drawn, so the next one can step aside. */
typedef struct {
    double x, y, w; /* left, baseline, width (11 px high) */
} label_box;

static int overlaps(const label_box *b, int n, double x, double y, double w) {
    for (int i = 0; i < n; i++)
        if (x < b[i].x + b[i].w && b[i].x < x + w && y - 11 < b[i].y && b[i].y - 11 < y) return 1;
    return 0;
}

/* The plan's point and, when label is set, its kind beside it: right of
 * the point, else above, below or left, where no earlier label is (a
 * Pareto point's label goes right regardless). */
static void svg_point(FILE *f, const plan_report *r, const svg_axes *a, int i, int label,
                      int must, label_box *boxes, int *nb) {
    const pm_cluster_plan *p = &r->plan[i];
    double x = px(a, gb(p->act_peak)), y = py(a, plan_y(r, p));
    const char *c = kind_colour(p->kind);
    if (recomputed(p->kind))
        fprintf(f, "<rect class=\"plan\" x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\"", x - 4.5,
                y - 4.5);
    else fprintf(f, "<circle class=\"plan\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\"", x, y);
    fprintf(f, " fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"><title>%s pp=%d dp=%d mbs=%d "
            "m=%d: activations %.2f GB, total %.2f GB (%s), %.4g samples/%s", p->fits ? c : "white",
            c, p->kind, p->pp, p->dp, p->mbs, p->m, gb(p->act_peak),
            gb(p->total_max), p->fits ? "fits" : "does not fit", p->samples, r->time_unit);
    if (r->mfu) fprintf(f, ", MFU %.1f%%", 100 * p->mfu);
    fprintf(f, "</title></%s>\n", recomputed(p->kind) ? "rect" : "circle");
    if (!label) return;
    double w = 6.2 * (double)strlen(p->kind);
    const double dx[] = {8, -w / 2, -w / 2, -8 - w}, dy[] = {4, -9, 17, 4};
    int k = 0;
    while (k < 4 && overlaps(boxes, *nb, x + dx[k], y + dy[k], w)) k++;
    if (k == 4 && !must) return;
    k %= 4;
    boxes[(*nb)++] = (label_box){x + dx[k], y + dy[k], w};
    fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">%s"
            "</text>\n", x + dx[k], y + dy[k], c, p->kind);
}

int plan_write_svg(FILE *f, const plan_report *r) {
    svg_axes a = {0, 1, 1e300, -1e300};
    for (int i = 0; i < r->n; i++) {
        double y = plan_y(r, &r->plan[i]);
        a.x1 = fmax(a.x1, gb(r->plan[i].act_peak));
        a.y0 = fmin(a.y0, y), a.y1 = fmax(a.y1, y);
    }
    if (!r->n) a.y0 = 0, a.y1 = 1;
    double pad = fmax((a.y1 - a.y0) * 0.08, a.y1 > 0 ? a.y1 * 0.02 : 1);
    a.x1 *= 1.08, a.y0 = fmax(0, a.y0 - pad), a.y1 += pad;
    char *front = pm_calloc((size_t)r->n + 1, 1);
    if (!front) return 1;
    pareto(r, front);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text class=\"title\" x=\"12\" y=\"22\" font-size=\"14\" font-weight=\"bold\">",
            SVG_W, SVG_H, SVG_W, SVG_H);
    xml_str(f, r->model);
    timed_note(f, r);
    fprintf(f, ", %d devices</text>\n<text x=\"12\" y=\"40\" font-size=\"11\">%s against "
            "activation memory; filled: fits%s; dashed: the Pareto front of those that fit"
            "</text>\n", r->devices, r->mfu ? "MFU" : "throughput",
            r->device_mem > 0 ? "" : " (no memory limit)");
    svg_grid(f, r, &a);
    svg_front(f, r, &a, front);
    label_box *boxes = pm_calloc((size_t)r->n + 1, sizeof *boxes);
    int nb = 0;
    for (int pass = 0; boxes && pass < 2; pass++) /* the front's labels first */
        for (int i = 0; i < r->n; i++)
            if (front[i] == !pass)
                svg_point(f, r, &a, i, front[i] || r->n <= 40, front[i], boxes, &nb);
    fputs("</svg>\n", f);
    pm_free(boxes);
    pm_free(front);
    if (!boxes) return 1;
    return ferror(f) != 0;
}
