/* timeline.c: a model-selection run drawn: SVG and Chrome trace
 * (pm_select.h). Boxes are placed by measured time. Every part of a
 * device's time (pm_select_part) is drawn: a pass's load, AdamW update,
 * microbatches and write-back, the step's norm and evaluation after it, the
 * wait for a prefetch copy; what is left is idle (the gaps). Each device's
 * copy thread has a strip (a track) of its own, and the SVG's legend gives
 * each device's seconds per part, which add up to the makespan. */
#include <math.h>
#include <stdio.h>

#include "pipemem/pm_select.h"

const char *const pm_select_part_names[PM_PART_COUNT] = {
    "compute", "load", "adamw", "store", "step", "eval", "wait", "idle"};
/* Fill of each part (compute is the task's own colour; idle is not drawn;
 * the rest are drawn half height, so their colours may meet a task's). */
static const char *const part_fill[PM_PART_COUNT] = {
    "", "#2f6db5", "#e08a1e", "#3a9a5b", "#000", "#555", "#bbb", "#fff"};
static const char *const kind_names[4] = {"F", "FBW", "B", "E"}; /* E: an evaluation's */
#define PART_MIN 1e-5 /* s: shorter parts are not drawn */

/* Task i's colour: hues spread round the wheel; backwards darker, an
 * evaluation's forwards lightest. */
static void colour(char out[32], int task, int n, int kind) {
    int hue = n > 0 ? (int)(360.0 * task / n) : 0;
    snprintf(out, 32, "hsl(%d,65%%,%d%%)", hue, kind == 0 ? 62 : kind == 1 ? 50 : kind == 2 ? 38
                                                                                             : 80);
}

/* The parts of one log entry in time order: part[k] runs from at[k] to
 * at[k + 1]. */
enum { NSEG = 7 };
static void segments(const pm_select_pass *p, double at[NSEG + 1], int part[NSEG]) {
    static const int order[NSEG] = {PM_PART_LOAD, PM_PART_ADAMW, PM_PART_COMPUTE, PM_PART_STORE,
                                    PM_PART_STEP, PM_PART_EVAL, PM_PART_WAIT};
    double t[NSEG + 1] = {p->start, p->loaded, p->updated, p->computed, p->end, p->step_end,
                          p->eval_end, p->wait1};
    for (int k = 0; k <= NSEG; k++) at[k] = t[k];
    for (int k = 0; k < NSEG; k++) part[k] = order[k];
}

typedef struct {
    FILE *f;
    double left, W, span, top, row;
} svg_ctx;

static void svg_box(const svg_ctx *c, double t0, double t1, double y, double h,
                    const char *fill, const char *cls, const char *what) {
    double w = c->W * (t1 - t0) / c->span;
    fprintf(c->f, "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                  "fill=\"%s\"><title>%s, %.4f-%.4f s</title></rect>\n",
            cls, c->left + c->W * t0 / c->span, y, w > 0.5 ? w : 0.5, h, fill, what, t0, t1);
}

static void svg_pass(const svg_ctx *c, const pm_select_pass *p, const pm_select_task *tasks,
                     int n) {
    double at[NSEG + 1], y = c->top + p->dev * c->row, h = c->row - 4;
    int part[NSEG];
    char col[32], what[160];
    const char *name = p->task >= 0 && p->task < n ? tasks[p->task].name : "?";
    colour(col, p->task, n, p->kind);
    segments(p, at, part);
    for (int k = 0; k < NSEG; k++) {
        if (at[k + 1] - at[k] < PART_MIN && part[k] != PM_PART_COMPUTE) continue;
        int pt = part[k];
        snprintf(what, sizeof what, "%s shard %d %s: %s", name, p->shard, kind_names[p->kind],
                 pm_select_part_names[pt]);
        /* the microbatches full height in the task's colour; every other
         * part the lower half (whatever the task colours, it stands out) */
        double yy = pt == PM_PART_COMPUTE ? y : y + h / 2, hh = pt == PM_PART_COMPUTE ? h : h / 2;
        svg_box(c, at[k], at[k + 1], yy, hh, pt == PM_PART_COMPUTE ? col : part_fill[pt],
                pt != PM_PART_COMPUTE ? pm_select_part_names[pt]
                : p->kind == 3        ? "evalpass" /* its microbatches are the evaluation */
                                      : "pass",
                what);
    }
    if (p->copy1 - p->copy0 >= PART_MIN) { /* the copy thread, under the device's row */
        snprintf(what, sizeof what, "copy thread: prefetching for after %s shard %d %s", name,
                 p->shard, kind_names[p->kind]);
        svg_box(c, p->copy0, p->copy1, y + h, 3, part_fill[PM_PART_LOAD], "copy", what);
    }
}

pm_status pm_select_write_svg(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                              int n, double lower_bound) {
    if (!f || !st || st->devices < 1) return PM_ERR_ARG;
    svg_ctx c = {f, 80, 1200, st->makespan_s > 0 ? st->makespan_s : 1, 50, 30};
    double legend = c.top + c.row * st->devices + 20, parts = legend + 18 * ((n + 5) / 6) + 10;
    double H = parts + 18 * (st->devices + 1) + 10;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", c.left + c.W + 20, H);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">pipemem select: %d tasks on %d "
               "devices, makespan %.3f s, lower bound %.3f s, busy", c.left, n, st->devices,
            st->makespan_s, lower_bound);
    for (int d = 0; d < st->devices; d++) fprintf(f, " %.0f%%", 100 * st->busy[d] / c.span);
    fprintf(f, "</text>\n");
    for (int d = 0; d < st->devices; d++)
        fprintf(f, "<text x=\"8\" y=\"%.0f\">device %d</text>\n", c.top + d * c.row + c.row / 2,
                d);
    for (int64_t k = 0; k < st->nlog; k++) svg_pass(&c, &st->log[k], tasks, n);
    for (int i = 0; i < n; i++) {
        char col[32];
        colour(col, i, n, 0);
        double x = c.left + (i % 6) * 190, y = legend + (i / 6) * 18;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%.0f\">%s (%d shards)</text>\n",
                x, y - 10, col, x + 16, y, tasks[i].name, tasks[i].nshard);
    }
    for (int p = 0; p < PM_PART_COUNT; p++) /* the parts' key */
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\" "
                   "stroke=\"#999\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                c.left + p * 110, parts - 10, p ? part_fill[p] : "hsl(0,65%,50%)",
                c.left + p * 110 + 16, parts, pm_select_part_names[p]);
    for (int d = 0; st->part && d < st->devices; d++) { /* each device's seconds per part */
        fprintf(f, "<text x=\"8\" y=\"%.0f\">device %d: ", parts + 18 * (d + 1), d);
        for (int p = 0; p < PM_PART_COUNT; p++) {
            double s = st->part[(size_t)d * PM_PART_COUNT + p];
            fprintf(f, "%s%s %.3f s (%.0f%%)", p ? ", " : "", pm_select_part_names[p], s,
                    100 * s / c.span);
        }
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

/* One complete event ("X") on track tid. */
static void trace_event(FILE *f, const char *name, const char *cat, int tid, double t0,
                        double t1) {
    fputs(",\n{\"name\": ", f);
    pm_json_str(f, name);
    fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %s, "
               "\"dur\": %s}", cat, tid, PM_JSON_NUM(t0 * 1e6), PM_JSON_NUM((t1 - t0) * 1e6));
}

/* The pass as one event ("t1 F0", category its kind) with its load, update
 * and write-back nested inside, then the step's norm, evaluation and the
 * wait as events of their own, and the copy on the copy thread's track. */
static void trace_pass(FILE *f, const pm_select_pass *p, const pm_select_task *tasks, int n,
                       int devices) {
    char name[sizeof tasks->name + 32]; /* a caller's task name: escaped */
    double at[NSEG + 1];
    int part[NSEG];
    snprintf(name, sizeof name, "%s %s%d",
             p->task >= 0 && p->task < n ? tasks[p->task].name : "?", kind_names[p->kind],
             p->shard);
    trace_event(f, name, kind_names[p->kind], p->dev, p->start, p->end);
    segments(p, at, part);
    for (int k = 0; k < NSEG; k++)
        if (part[k] != PM_PART_COMPUTE && at[k + 1] - at[k] >= PART_MIN)
            trace_event(f, pm_select_part_names[part[k]], pm_select_part_names[part[k]], p->dev,
                        at[k], at[k + 1]);
    if (p->copy1 - p->copy0 >= PART_MIN)
        trace_event(f, name, "copy", devices + p->dev, p->copy0, p->copy1);
}

pm_status pm_select_write_trace(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                                int n) {
    if (!f || !st) return PM_ERR_ARG;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    for (int d = 0; d < 2 * st->devices; d++)
        fprintf(f, "%s\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                   "\"args\": {\"name\": \"device %d%s\"}}", d ? "," : "", d,
                d % st->devices, d < st->devices ? "" : " copy thread");
    for (int64_t k = 0; k < st->nlog; k++) trace_pass(f, &st->log[k], tasks, n, st->devices);
    fprintf(f, "\n]}\n");
    return ferror(f) ? PM_ERR_IO : PM_OK;
}
