/* curves.c: loss curves as SVG (curves.h): recorded in fixed buckets as the
 * run's events arrive, so a run of a million steps takes the same memory
 * as one of a thousand, and written whole once the run is over. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "curves.h"

enum { P = PM_CLI_CURVE_POINTS };

int pm_cli_curves_init(pm_cli_curves *cv, int n, const int64_t *first, const int64_t *last) {
    *cv = (pm_cli_curves){0};
    /* per curve: sum, vx, vy doubles and cnt (the buckets and one point more) */
    size_t each = (size_t)(P + 1) * (3 * sizeof(double) + sizeof(int64_t));
    cv->c = pm_calloc((size_t)(n > 0 ? n : 1), sizeof *cv->c);
    cv->block = pm_malloc((size_t)(n > 0 ? n : 1) * each);
    if (!cv->c || !cv->block) {
        pm_cli_curves_free(cv);
        return pm_cli_fail("--curves: out of memory for %d curves", n);
    }
    cv->n = n;
    memset(cv->block, 0, (size_t)(n > 0 ? n : 1) * each);
    double *d = cv->block;
    for (int i = 0; i < n; i++, d += 3 * (P + 1)) {
        int64_t steps = last[i] > first[i] ? last[i] - first[i] : 1;
        cv->c[i] = (pm_cli_curve){.first = first[i], .per = (steps + P - 1) / P, .sum = d,
                                  .vx = d + (P + 1), .vy = d + 2 * (P + 1)};
    }
    int64_t *k = (int64_t *)d; /* after every curve's doubles */
    for (int i = 0; i < n; i++, k += P + 1) cv->c[i].cnt = k;
    return 0;
}

void pm_cli_curves_free(pm_cli_curves *cv) {
    pm_free(cv->c);
    pm_free(cv->block);
    *cv = (pm_cli_curves){0};
}

/* The bucket of step on curve c (-1: before its first). */
static int64_t bucket(const pm_cli_curve *c, int64_t step) {
    return step <= c->first ? -1 : (step - c->first - 1) / c->per;
}

void pm_cli_curves_loss(pm_cli_curves *cv, int i, int64_t step, double loss) {
    pm_cli_curve *c = &cv->c[i];
    int64_t b = bucket(c, step);
    if (b < 0 || b >= P) return;
    c->sum[b] += loss, c->cnt[b]++;
    if (b + 1 > c->np) c->np = (int)b + 1;
}

void pm_cli_curves_val(pm_cli_curves *cv, int i, int64_t step, double loss) {
    pm_cli_curve *c = &cv->c[i];
    int64_t b = bucket(c, step);
    /* one point a bucket, the bucket's last (a run evaluating at every step
     * of a million draws a thousand points); a resumed task's starting one
     * (step first) before them */
    int same = c->nv > 0 && bucket(c, (int64_t)c->vx[c->nv - 1]) == b;
    if (!same && c->nv == P + 1) return;
    int at = same ? c->nv - 1 : c->nv++;
    c->vx[at] = (double)step, c->vy[at] = loss;
}

void pm_cli_curves_stop(pm_cli_curves *cv, int i, int64_t step, const char *why) {
    cv->c[i].stop = step, cv->c[i].why = why;
}

/* ---- drawing ----------------------------------------------------------- */

#define W 960.0
#define H 540.0
#define LEFT 70.0
#define RIGHT 230.0 /* the legend's room */
#define TOP 50.0
#define BOTTOM 50.0

typedef struct {
    FILE *f;
    double x0, x1, y0, y1; /* the data's ranges */
} plot;

static double px(const plot *p, double x) {
    return LEFT + (W - LEFT - RIGHT) * (x - p->x0) / (p->x1 - p->x0);
}

static double py(const plot *p, double y) {
    return H - BOTTOM - (H - TOP - BOTTOM) * (y - p->y0) / (p->y1 - p->y0);
}

/* Text with the five XML specials escaped. */
static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        const char *e = *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '&' ? "&amp;"
                        : *s == '"' ? "&quot;" : *s == '\'' ? "&apos;" : NULL;
        if (e) fputs(e, f);
        else if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

/* A training point: bucket b's mean step and loss (0 if it has none). */
static int point(const pm_cli_curve *c, int b, double *x, double *y) {
    if (!c->cnt[b]) return 0;
    *x = (double)(c->first + 1 + (int64_t)b * c->per) + (double)(c->per - 1) / 2;
    *y = c->sum[b] / (double)c->cnt[b];
    return isfinite(*y);
}

/* The ranges of every finite point, padded; 0 if there is none. */
static int ranges(const pm_cli_curves *cv, plot *p) {
    p->x0 = p->y0 = INFINITY, p->x1 = p->y1 = -INFINITY;
    for (int i = 0; i < cv->n; i++) {
        const pm_cli_curve *c = &cv->c[i];
        double x, y;
        for (int b = 0; b < c->np; b++)
            if (point(c, b, &x, &y))
                p->x0 = fmin(p->x0, x), p->x1 = fmax(p->x1, x), p->y0 = fmin(p->y0, y),
                p->y1 = fmax(p->y1, y);
        for (int v = 0; v < c->nv; v++)
            if (isfinite(c->vy[v]))
                p->x0 = fmin(p->x0, c->vx[v]), p->x1 = fmax(p->x1, c->vx[v]),
                p->y0 = fmin(p->y0, c->vy[v]), p->y1 = fmax(p->y1, c->vy[v]);
    }
    if (!(p->x0 <= p->x1)) return 0;
    if (p->x1 - p->x0 < 1) p->x0 -= 0.5, p->x1 += 0.5;
    double pad = (p->y1 - p->y0) * 0.05;
    if (!(pad > 0)) pad = 0.5;
    p->y0 -= pad, p->y1 += pad;
    return 1;
}

static void axes(const plot *p, const char *title) {
    FILE *f = p->f;
    fprintf(f, "<text class=\"title\" x=\"%.0f\" y=\"28\" font-size=\"16\">", LEFT);
    xml_text(f, title);
    fprintf(f, "</text>\n<g class=\"axes\" stroke=\"#444\" font-size=\"11\">\n");
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/>\n", LEFT, H - BOTTOM,
            W - RIGHT, H - BOTTOM);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/>\n", LEFT, TOP, LEFT,
            H - BOTTOM);
    for (int k = 0; k <= 4; k++) {
        double x = p->x0 + (p->x1 - p->x0) * k / 4, y = p->y0 + (p->y1 - p->y0) * k / 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" stroke=\"none\">%.6g"
                "</text>\n", px(p, x), H - BOTTOM + 16, x);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" stroke=\"none\">%.4g"
                "</text>\n", LEFT - 6, py(p, y) + 4, y);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" stroke=\"none\">step</text>\n",
            (LEFT + W - RIGHT) / 2, H - 12);
    fprintf(f, "<text x=\"16\" y=\"%.0f\" transform=\"rotate(-90 16 %.0f)\" text-anchor=\"middle\" "
            "stroke=\"none\">loss (line: training, dots: validation)</text>\n</g>\n",
            (TOP + H - BOTTOM) / 2, (TOP + H - BOTTOM) / 2);
}

/* Curve i in colour col: its training path, validation dots, stop mark. */
static void curve(const plot *p, const pm_cli_curve *c, const char *name, const char *col) {
    FILE *f = p->f;
    double x, y, lx = NAN, ly = NAN;
    fprintf(f, "<path class=\"train\" data-task=\"");
    xml_text(f, name);
    fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", col);
    for (int b = 0, pen = 0; b < c->np; b++) {
        if (!point(c, b, &x, &y)) {
            pen = 0; /* a gap: a step not recorded or not finite */
            continue;
        }
        fprintf(f, "%s%.2f %.2f", pen ? " L" : " M", px(p, x), py(p, y));
        pen = 1, lx = x, ly = y;
    }
    fprintf(f, "\"/>\n<g class=\"val\" fill=\"%s\" stroke=\"%s\">", col, col);
    for (int v = 0; v < c->nv; v++)
        if (isfinite(c->vy[v])) {
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>", px(p, c->vx[v]),
                    py(p, c->vy[v]));
            lx = isfinite(lx) ? lx : c->vx[v], ly = isfinite(ly) ? ly : c->vy[v];
        }
    fprintf(f, "</g>\n");
    if (c->stop > 0 && isfinite(lx)) { /* a cross where it stopped */
        double sx = px(p, (double)c->stop), sy = py(p, ly);
        fprintf(f, "<g class=\"stop\" stroke=\"%s\" stroke-width=\"2\"><title>", col);
        xml_text(f, name);
        fprintf(f, " stopped after step %lld: ", (long long)c->stop);
        xml_text(f, c->why);
        fprintf(f, "</title><line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>"
                "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/></g>\n", sx - 5, sy - 5,
                sx + 5, sy + 5, sx - 5, sy + 5, sx + 5, sy - 5);
    }
}

/* The colour of the curve ranked r of n: hues round the wheel. */
static void colour(char out[40], int r, int n) {
    snprintf(out, 40, "hsl(%d,70%%,42%%)", n > 1 ? 360 * r / n : 220);
}

int pm_cli_curves_write(const pm_cli_curves *cv, const int *order, const char *const *names,
                        const char *title, const char *path) {
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, path);
    if (!f) return 1;
    plot p = {.f = f};
    if (!ranges(cv, &p)) p = (plot){f, 0, 1, 0, 1}; /* nothing recorded: empty axes */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/"
            "svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    axes(&p, title);
    fprintf(f, "<g class=\"legend\" font-size=\"12\">\n");
    for (int r = 0; r < cv->n; r++) { /* the legend in order, the best first */
        char col[40];
        int i = order[r];
        colour(col, r, cv->n);
        double y = TOP + 16.0 * r;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"10\" fill=\"%s\"/><text "
                "x=\"%.0f\" y=\"%.0f\">", W - RIGHT + 20, y, col, W - RIGHT + 38, y + 9);
        xml_text(f, names[i]);
        fprintf(f, "%s</text>\n", cv->c[i].stop > 0 ? " (stopped)" : "");
    }
    fprintf(f, "</g>\n<g class=\"curves\">\n");
    for (int r = cv->n - 1; r >= 0; r--) { /* the best drawn last, on top */
        char col[40];
        colour(col, r, cv->n);
        curve(&p, &cv->c[order[r]], names[order[r]], col);
    }
    fprintf(f, "</g>\n</svg>\n");
    return pm_cli_out_close(&w, 0, path);
}
