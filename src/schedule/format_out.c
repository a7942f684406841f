/* format_out.c: a simulated schedule as JSON, as an SVG timeline and as a
 * Chrome trace.
 *
 * JSON (one object; numbers are null where not finite or not known):
 *   kind, placement ("single" | "loop" | "v"), p, m, v, stages, recompute,
 *   costs: {uniform, c, tf, tb, tw, mf, mb, mw, mr}: the per-stage time and
 *          memory delta of F, B, W (mr: what a recomputed F keeps), scalars if every stage is the same
 *          (uniform true), else arrays of S values; null without a cost table,
 *   makespan, bubble (0..1), peak (array, one per device, multiples of M),
 *   peak_max (x M), M (activation of one microbatch through the model),
 *   devices: [{device, span, busy, peak (x M),
 *              passes: [{kind ("F"|"B"|"W"|"BW"), stage, mb, start, end}]}].
 *   Without a simulation the timing keys are null and passes lack start/end.
 *
 * SVG: one row (<g class="dev">) per device, time on x; passes coloured by
 * kind (F blue, B red, W green, BW orange), lighter for a device's first
 * chunk and darker for later ones (the two legs of a V), microbatch numbers
 * inside boxes wide enough to hold them; a title with kind, p, m, bubble
 * rate and peak; a legend; a time axis. The width adapts to the shortest pass
 * and is clamped, so p=64, m=256 stays a few thousand pixels wide; per-pass
 * tooltips are dropped above SVG_MAX_TIPS passes to keep files small.
 *
 * Chrome trace: {"traceEvents": [...]} with metadata naming the process and
 * one thread (tid) per device, then one complete ("X") event per pass;
 * ts and dur are in microseconds, one cost unit = 1 us.
 *
 * Writers only read their inputs and report PM_ERR_IO if the stream failed,
 * PM_ERR_ARG if a needed input is missing or does not match the schedule. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "sched.h"

#define SVG_MAX_TIPS 20000

/* ---- shared helpers -------------------------------------------------------- */

/* x as JSON writes it, into buf (NUM_TEXT bytes): text that reads back as
 * the same double; its length. Most numbers of a schedule (times, peaks)
 * are integers and short binary fractions (0.5, 0.34375), whose decimal
 * digits are exact: when there are at most 12 of them and x is from 1e-4
 * to below 1e12, they are written here, several times faster than the
 * general shortest form (the JSON of p = 64, m = 256 holds a quarter of a
 * million); the rest go to pm_double_text (the sign of -0 dropped). */
enum { NUM_TEXT = PM_DOUBLE_TEXT, FRAC_BITS = 19 }; /* 2^-19: f 5^k below 10^19 fits 64 bits */
static int num_text(char *buf, double x) {
    double ax = fabs(x), scaled = ax * (double)(1u << FRAC_BITS);
    if (!(ax >= 1e-4 && ax < 1e12 && scaled < 9007199254740992.0 && scaled == floor(scaled)))
        return (int)strlen(pm_double_text(buf, x == 0 ? 0.0 : x)); /* no "-0" */
    uint64_t q = (uint64_t)scaled, ip = q >> FRAC_BITS, f = q & ((1u << FRAC_BITS) - 1);
    int k = f ? FRAC_BITS : 0; /* fraction digits: f / 2^k = f 5^k / 10^k */
    while (f && !(f & 1)) f >>= 1, k--;
    for (int i = 0; i < k; i++) f *= 5;
    char ib[16], fb[24];
    int il = 0, lead = 0;
    do ib[il++] = (char)('0' + ip % 10), ip /= 10;
    while (ip);
    for (int i = k - 1; i >= 0; i--) fb[i] = (char)('0' + f % 10), f /= 10;
    while (lead < k && fb[lead] == '0') lead++;
    int sig = (il > 1 || ib[0] != '0' ? il : 0) + k - (il == 1 && ib[0] == '0' ? lead : 0);
    if (sig > 12) return (int)strlen(pm_double_text(buf, x));
    int n = 0;
    if (x < 0) buf[n++] = '-';
    while (il) buf[n++] = ib[--il];
    if (k) buf[n++] = '.', memcpy(buf + n, fb, (size_t)k), n += k;
    buf[n] = 0;
    return n;
}

/* Copies s to b (no terminator); its length. */
static size_t put(char *b, const char *s) {
    size_t n = strlen(s);
    memcpy(b, s, n);
    return n;
}

/* JSON number; null for NaN and infinities, which JSON cannot hold. */
static void out_num(FILE *f, double x) {
    char buf[NUM_TEXT];
    if (!isfinite(x)) fputs("null", f);
    else fwrite(buf, 1, (size_t)num_text(buf, x), f);
}

static void out_xml_str(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

/* Chunk of a pass's stage on its device, 0 if the stage is out of range. */
static int out_chunk(const pm_sched *s, int stage) {
    if (stage < 0 || stage >= s->S) return 0;
    return pm_sched_stage_chunk(s, stage);
}

static int out_sim_fits(const pm_sched *s, const pm_sim *sim) {
    return sim && sim->p == s->p && sim->cap == s->cap;
}

/* ---- JSON ---------------------------------------------------------------- */

static int out_costs_uniform(const pm_cost *c) {
    for (int i = 1; i < c->S; i++)
        if (memcmp(&c->st[i], &c->st[0], sizeof c->st[0])) return 0;
    return 1;
}

static void out_json_costs(FILE *f, const pm_cost *c) {
    if (!c || c->S < 1) {
        fputs("null", f);
        return;
    }
    int uni = out_costs_uniform(c);
    static const char *const key[7] = {"tf", "tb", "tw", "mf", "mb", "mw", "mr"};
    fprintf(f, "{\"uniform\": %s, \"c\": ", uni ? "true" : "false");
    out_num(f, c->c);
    for (int k = 0; k < 7; k++) {
        fprintf(f, ", \"%s\": ", key[k]);
        if (!uni) fputc('[', f);
        for (int i = 0; i < (uni ? 1 : c->S); i++) {
            const pm_stage_cost *x = &c->st[i];
            double v[7] = {x->tf, x->tb, x->tw, x->mf, x->mb, x->mw, x->mr};
            if (i) fputs(", ", f);
            out_num(f, v[k]);
        }
        if (!uni) fputc(']', f);
    }
    fputc('}', f);
}

static void out_json_device(FILE *f, const pm_sched *s, const pm_sim *sim, int d) {
    fprintf(f, "    {\"device\": %d, \"span\": ", d);
    out_num(f, sim ? sim->span[d] : NAN);
    fputs(", \"busy\": ", f);
    out_num(f, sim ? sim->busy[d] : NAN);
    fputs(", \"peak\": ", f);
    out_num(f, sim ? pm_sim_peak_x(sim, d) : NAN);
    fputs(", \"passes\": [", f);
    const pm_pass *ps = pm_sched_dev(s, d);
    /* the lines are made here and written in chunks: printf's parsing of a
     * format per field was most of the writer's time */
    char buf[1 << 14];
    size_t n = 0;
    for (int64_t i = 0; i < s->len[d]; i++) {
        int k = ps[i].kind >= 0 && ps[i].kind < PM_PASS_COUNT ? ps[i].kind : PM_PASS_F;
        if (n > sizeof buf - 256) fwrite(buf, 1, n, f), n = 0;
        n += put(buf + n, i ? ",\n      {\"kind\": \"" : "\n      {\"kind\": \"");
        n += put(buf + n, pm_pass_names[k]);
        n += put(buf + n, "\", \"stage\": ");
        n += (size_t)num_text(buf + n, ps[i].stage);
        n += put(buf + n, ", \"mb\": ");
        n += (size_t)num_text(buf + n, ps[i].mb);
        int64_t at = (int64_t)d * s->cap + i;
        for (int j = 0; sim && j < 2; j++) {
            double t = j ? sim->end[at] : sim->start[at];
            n += put(buf + n, j ? ", \"end\": " : ", \"start\": ");
            n += isfinite(t) ? (size_t)num_text(buf + n, t) : put(buf + n, "null");
        }
        buf[n++] = '}';
    }
    fwrite(buf, 1, n, f);
    fprintf(f, "%s]}", s->len[d] ? "\n    " : "");
}

pm_status pm_sched_write_json(FILE *f, const pm_sched *s, const pm_cost *c, const pm_sim *sim) {
    if (!f || !s || (sim && !out_sim_fits(s, sim)) || (c && c->S != s->S)) return PM_ERR_ARG;
    fputs("{\n  \"kind\": ", f);
    pm_json_str(f, s->kind);
    fprintf(f, ",\n  \"placement\": \"%s\",\n  \"p\": %d,\n  \"m\": %d,\n  \"v\": %d,\n"
               "  \"stages\": %d,\n  \"recompute\": %s,\n  \"costs\": ",
            (unsigned)s->place < PM_PLACE_COUNT ? pm_place_names[s->place] : "unknown", s->p,
            s->m, s->v, s->S, s->recompute ? "true" : "false");
    out_json_costs(f, c);
    fputs(",\n  \"makespan\": ", f);
    out_num(f, sim ? sim->makespan : NAN);
    fputs(",\n  \"bubble\": ", f);
    out_num(f, sim ? sim->bubble : NAN);
    /* how far any schedule of this shape and no more memory could improve
     * (bound.c) */
    double lb = NAN;
    if (c) {
        double cap = 0;
        for (int d = 0; sim && d < s->p; d++) cap = sim->peak[d] > cap ? sim->peak[d] : cap;
        lb = pm_sched_lower_bound_at(s, c, cap);
    }
    fputs(",\n  \"lower_bound\": ", f);
    out_num(f, lb);
    fputs(",\n  \"gap\": ", f);
    out_num(f, sim && lb > 0 ? sim->makespan / lb - 1 : NAN);
    if (s->opt_status > 0 && s->opt_status <= PM_OPT_FAILED) {
        static const char *const how[] = {"", "proven", "time_limit", "open", "failed"};
        fprintf(f, ",\n  \"solver\": {\"status\": \"%s\", \"bound\": ", how[s->opt_status]);
        out_num(f, s->opt_bound);
        fputs(", \"gap\": ", f);
        out_num(f, sim && s->opt_bound > 0 ? sim->makespan / s->opt_bound - 1 : NAN);
        fputs(", \"seconds\": ", f);
        out_num(f, s->opt_seconds);
        fputc('}', f);
    }
    fputs(",\n  \"peak\": ", f);
    if (sim) {
        fputc('[', f);
        for (int d = 0; d < s->p; d++) {
            if (d) fputs(", ", f);
            out_num(f, pm_sim_peak_x(sim, d));
        }
        fputc(']', f);
    } else {
        fputs("null", f);
    }
    fputs(",\n  \"peak_max\": ", f);
    out_num(f, sim ? pm_sim_peak_max_x(sim) : NAN);
    fputs(",\n  \"M\": ", f);
    out_num(f, sim ? sim->M : c ? pm_cost_M(c) : NAN);
    if (sim && sim->red_start) {
        fputs(",\n  \"dp\": {\"step\": ", f);
        out_num(f, sim->dp_step);
        fputs(", \"step_serial\": ", f);
        out_num(f, sim->dp_step_serial);
        fputs(", \"reduce\": [", f);
        for (int k = 0; k < s->S; k++) {
            fprintf(f, "%s{\"stage\": %d, \"device\": %d, \"start\": ", k ? ", " : "", k,
                    pm_sched_stage_device(s, k));
            out_num(f, sim->red_start[k]);
            fputs(", \"end\": ", f);
            out_num(f, sim->red_end[k]);
            fputc('}', f);
        }
        fputs("]}", f);
    }
    fputs(",\n  \"devices\": [", f);
    for (int d = 0; d < s->p; d++) {
        fputs(d ? ",\n" : "\n", f);
        out_json_device(f, s, sim, d);
    }
    fputs("\n  ]\n}\n", f);
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

/* ---- SVG ----------------------------------------------------------------- */

#define SVG_REDUCE "#7a3fb8"

/* Light (first chunk) and dark (last chunk) RGB per kind: F, B, W, BW. */
static const unsigned char svg_light[PM_PASS_COUNT][3] = {
    {0xa9, 0xc8, 0xef}, {0xf5, 0xb0, 0xaa}, {0xb5, 0xe0, 0xb0}, {0xf8, 0xd0, 0x90}};
static const unsigned char svg_dark[PM_PASS_COUNT][3] = {
    {0x2f, 0x6b, 0xc0}, {0xc6, 0x3b, 0x32}, {0x3a, 0x9a, 0x44}, {0xd0, 0x80, 0x1c}};
static const char *const svg_kind_label[PM_PASS_COUNT] = {
    "F forward", "B input grad", "W weight grad", "BW fused backward"};

/* Fill colour of kind k on chunk ch of v: light to dark in equal steps. */
static void svg_colour(char out[8], int k, int ch, int v) {
    double t = v > 1 ? (double)ch / (v - 1) : 0;
    int c[3];
    for (int i = 0; i < 3; i++)
        c[i] = (int)lround(svg_light[k][i] + t * (svg_dark[k][i] - svg_light[k][i]));
    snprintf(out, 8, "#%02x%02x%02x", c[0] & 255, c[1] & 255, c[2] & 255);
}

/* Geometry of the drawing. */
typedef struct {
    double left, top, row_h, gap, k; /* margins, row pitch, px per time unit */
    double plot_w, width, height;
    double font;                     /* microbatch label size */
    double t_end;                    /* time at the right edge */
} svg_geo;

static svg_geo svg_layout(const pm_sched *s, const pm_sim *sim) {
    svg_geo g = {.left = 72, .top = 62, .gap = 2};
    g.row_h = s->p <= 16 ? 24 : s->p <= 32 ? 18 : 12;
    g.font = g.row_h >= 18 ? 11 : 8;
    double dmin = INFINITY, span = 0;
    for (int d = 0; d < s->p; d++)
        for (int64_t i = 0; i < s->len[d]; i++) {
            int64_t at = (int64_t)d * s->cap + i;
            double dur = sim->end[at] - sim->start[at];
            if (dur > 0 && dur < dmin) dmin = dur;
            if (sim->end[at] > span) span = sim->end[at];
        }
    for (int k = 0; sim->red_end && k < s->S; k++)
        if (sim->red_end[k] > span) span = sim->red_end[k];
    /* Time runs from 0 to the last end (a device's span may start late).
     * Aim for the shortest pass to fit two digits, within 600..1600 px (a
     * screen's width: passes too short for their number keep it in their
     * tooltip). */
    if (!(span > 0) || !isfinite(span)) span = 1;
    g.t_end = span;
    double want = isfinite(dmin) ? 2.2 * g.font / dmin * span : 600;
    g.plot_w = want < 600 ? 600 : want > 1600 ? 1600 : want;
    g.k = g.plot_w / span;
    g.width = g.left + g.plot_w + 20;
    g.height = g.top + s->p * g.row_h + 36;
    return g;
}

static void svg_head(FILE *f, const pm_sched *s, const pm_sim *sim, const char *title,
                     const svg_geo *g) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n",
            g->width, g->height, g->width, g->height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fputs("<text class=\"title\" x=\"12\" y=\"20\" font-size=\"15\" font-weight=\"bold\">", f);
    out_xml_str(f, title ? title : s->kind);
    fprintf(f, ": p=%d m=%d, %s placement, bubble %.1f%%, peak %.2f M</text>\n", s->p, s->m,
            (unsigned)s->place < PM_PLACE_COUNT ? pm_place_names[s->place] : "unknown",
            100 * sim->bubble, pm_sim_peak_max_x(sim));
    /* Legend: one swatch per kind in its two shades when there are chunks. */
    double x = 12;
    fputs("<g class=\"legend\" font-size=\"11\">\n", f);
    for (int k = 0; k < PM_PASS_COUNT; k++) {
        char c0[8], c1[8];
        svg_colour(c0, k, 0, 2);
        svg_colour(c1, k, 1, 2);
        fprintf(f, "<rect x=\"%.0f\" y=\"32\" width=\"14\" height=\"12\" fill=\"%s\"/>", x, c0);
        if (s->v > 1)
            fprintf(f, "<rect x=\"%.0f\" y=\"32\" width=\"14\" height=\"12\" fill=\"%s\"/>",
                    x + 14, c1);
        x += s->v > 1 ? 32 : 18;
        fprintf(f, "<text x=\"%.0f\" y=\"42\">%s</text>\n", x, svg_kind_label[k]);
        x += 7.0 * strlen(svg_kind_label[k]) + 16;
    }
    if (s->v > 1)
        fprintf(f, "<text x=\"%.0f\" y=\"42\">light: chunk 0, dark: chunk %d%s</text>\n", x,
                s->v - 1, s->place == PM_PLACE_V ? " (V return leg)" : "");
    if (sim->red_start)
        fprintf(f, "<rect x=\"%.0f\" y=\"38\" width=\"14\" height=\"6\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"42\">gradient sum across replicas</text>\n",
                x + (s->v > 1 ? 300 : 0), SVG_REDUCE, x + (s->v > 1 ? 318 : 18));
    fputs("</g>\n", f);
}

/* Data parallelism: each stage's gradient sum, a thin bar along the bottom
 * of its device's row (the link works while the device computes). */
static void svg_reductions(FILE *f, const pm_sched *s, const pm_sim *sim, const svg_geo *g) {
    if (!sim->red_start) return;
    fputs("<g class=\"reduce\">\n", f);
    for (int k = 0; k < s->S; k++) {
        int d = pm_sched_stage_device(s, k);
        double x = g->left + sim->red_start[k] * g->k;
        double w = (sim->red_end[k] - sim->red_start[k]) * g->k, h = (g->row_h - g->gap) / 4;
        if (!isfinite(x) || !isfinite(w)) continue;
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\">"
                   "<title>device %d: gradient sum of stage %d, %g to %g</title></rect>\n",
                x, g->top + d * g->row_h + (g->row_h - g->gap) - h, w > 0.3 ? w : 0.3, h,
                SVG_REDUCE, d, k, sim->red_start[k], sim->red_end[k]);
    }
    fputs("</g>\n", f);
}

static void svg_pass(FILE *f, const pm_sched *s, const pm_sim *sim, const svg_geo *g, int d,
                     int64_t i, int tips) {
    const pm_pass *ps = &pm_sched_dev(s, d)[i];
    int64_t at = (int64_t)d * s->cap + i;
    int k = ps->kind >= 0 && ps->kind < PM_PASS_COUNT ? ps->kind : PM_PASS_F;
    int ch = out_chunk(s, ps->stage);
    double x = g->left + sim->start[at] * g->k, w = (sim->end[at] - sim->start[at]) * g->k;
    double y = g->top + d * g->row_h, h = g->row_h - g->gap;
    if (!isfinite(x) || !isfinite(w)) return;
    /* an overlapped pair run as one shares its interval: F above, BW below */
    if (pm_sched_paired(s, d, i) && sim->start[at + 1] == sim->start[at]) h /= 2;
    else if (i > 0 && pm_sched_paired(s, d, i - 1) && sim->start[at - 1] == sim->start[at])
        h /= 2, y += h;
    char col[8];
    svg_colour(col, k, ch, s->v);
    fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s>", x, y,
            w > 0.3 ? w : 0.3, h, col, w >= 8 ? " stroke=\"white\" stroke-width=\"0.6\"" : "");
    if (tips)
        fprintf(f, "<title>device %d: %s stage %d mb %d, %g to %g</title>", d, pm_pass_names[k],
                (int)ps->stage, (int)ps->mb, sim->start[at], sim->end[at]);
    fputs("</rect>", f);
    char num[16];
    int n = snprintf(num, sizeof num, "%d", (int)ps->mb);
    if (w >= n * g->font * 0.62 + 2)
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"middle\" "
                   "fill=\"%s\">%s</text>",
                x + w / 2, y + h / 2 + g->font * 0.36, g->font,
                ch > 0 && s->v > 1 ? "white" : "black", num);
    fputc('\n', f);
}

static void svg_axis(FILE *f, const svg_geo *g, double span, const char *unit) {
    double y = g->height - 30, raw = span / 10, step = 1;
    while (step * 10 <= raw) step *= 10;
    while (step > raw && step > 1e-9) step /= 10;
    if (step * 5 <= raw) step *= 5;
    else if (step * 2 <= raw) step *= 2;
    fprintf(f, "<g class=\"axis\" font-size=\"10\" fill=\"#444\">\n"
               "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#444\"/>\n",
            g->left, y, g->left + g->plot_w, y);
    for (int i = 0; i <= 40 && step > 0; i++) {
        double t = i * step;
        if (t > span * (1 + 1e-9)) break;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%g</text>\n",
                g->left + t * g->k, y + 13, t);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">time (%s)</text>\n</g>\n",
            g->left + g->plot_w, y + 26, unit ? unit : "cost units");
}

pm_status pm_sched_write_svg(FILE *f, const pm_sched *s, const pm_sim *sim, const char *title) {
    if (!f || !s || !out_sim_fits(s, sim)) return PM_ERR_ARG;
    svg_geo g = svg_layout(s, sim);
    svg_head(f, s, sim, title, &g);
    int64_t total = 0;
    for (int d = 0; d < s->p; d++) total += s->len[d];
    int tips = total <= SVG_MAX_TIPS;
    for (int d = 0; d < s->p; d++) {
        double y = g.top + d * g.row_h;
        fprintf(f, "<g class=\"dev\" id=\"dev%d\">\n", d);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"end\">"
                   "device %d</text>\n",
                g.left - 6, y + (g.row_h - g.gap) / 2 + 4, g.row_h >= 18 ? 11.0 : 9.0, d);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.1f\" fill=\"#f2f2f2\"/>\n",
                g.left, y, g.plot_w, g.row_h - g.gap);
        for (int64_t i = 0; i < s->len[d]; i++) svg_pass(f, s, sim, &g, d, i, tips);
        fputs("</g>\n", f);
    }
    svg_reductions(f, s, sim, &g);
    svg_axis(f, &g, g.t_end, sim->unit);
    fputs("</svg>\n", f);
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

/* ---- Chrome trace ---------------------------------------------------------- */

pm_status pm_sched_write_trace(FILE *f, const pm_sched *s, const pm_sim *sim) {
    if (!f || !s || !out_sim_fits(s, sim)) return PM_ERR_ARG;
    fputs("{\"otherData\": {\"time_unit\": "
          "\"1 cost unit = 1 us\", \"kind\": ", f);
    pm_json_str(f, s->kind);
    fprintf(f, ", \"p\": %d, \"m\": %d, \"bubble\": ", s->p, s->m);
    out_num(f, sim->bubble);
    fputs("},\n \"traceEvents\": [\n  {\"ph\": \"M\", \"pid\": 0, \"tid\": 0, "
          "\"name\": \"process_name\", \"args\": {\"name\": ", f);
    char pname[64];
    snprintf(pname, sizeof pname, "pipemem %s p=%d m=%d", s->kind, s->p, s->m);
    pm_json_str(f, pname);
    fputs("}}", f);
    for (int d = 0; d < s->p; d++)
        fprintf(f, ",\n  {\"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"name\": \"thread_name\", "
                   "\"args\": {\"name\": \"device %d\"}},\n  {\"ph\": \"M\", \"pid\": 0, "
                   "\"tid\": %d, \"name\": \"thread_sort_index\", \"args\": {\"sort_index\": %d}}",
                d, d, d, d);
    for (int d = 0; sim->red_start && d < s->p; d++)
        fprintf(f, ",\n  {\"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"name\": \"thread_name\", "
                   "\"args\": {\"name\": \"device %d: gradient sums\"}}", s->p + d, d);
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            int64_t at = (int64_t)d * s->cap + i;
            int k = ps[i].kind >= 0 && ps[i].kind < PM_PASS_COUNT ? ps[i].kind : PM_PASS_F;
            fprintf(f, ",\n  {\"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"name\": \"%s mb%d\", "
                       "\"cat\": \"%s\", \"ts\": ",
                    d, pm_pass_names[k], (int)ps[i].mb, pm_pass_names[k]);
            out_num(f, sim->start[at]);
            fputs(", \"dur\": ", f);
            out_num(f, sim->end[at] - sim->start[at]);
            fprintf(f, ", \"args\": {\"stage\": %d, \"mb\": %d, \"chunk\": %d}}", (int)ps[i].stage,
                    (int)ps[i].mb, out_chunk(s, ps[i].stage));
        }
    }
    /* data parallelism: each device's link on its own track (tid p + d) */
    for (int k = 0; sim->red_start && k < s->S; k++) {
        int d = pm_sched_stage_device(s, k);
        fprintf(f, ",\n  {\"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"name\": \"sum stage %d\", "
                   "\"cat\": \"reduce\", \"ts\": ", s->p + d, k);
        out_num(f, sim->red_start[k]);
        fputs(", \"dur\": ", f);
        out_num(f, sim->red_end[k] - sim->red_start[k]);
        fprintf(f, ", \"args\": {\"stage\": %d}}", k);
    }
    fputs("\n ]\n}\n", f);
    return ferror(f) ? PM_ERR_IO : PM_OK;
}
