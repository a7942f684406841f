/* timeline.c: a model-selection run drawn: SVG and Chrome trace
 * (pm_select.h). Boxes are placed by measured time; a wait for a prefetch
 * copy is a grey box, other idle time the gaps between boxes. */
#include <math.h>
#include <stdio.h>

#include "pipemem/pm_select.h"

static const char *const kind_names[3] = {"F", "FBW", "B"};
#define WAIT_MIN 1e-5 /* s: shorter waits are not drawn */

/* Task i's colour: hues spread round the wheel; backwards darker. */
static void colour(char out[32], int task, int n, int kind) {
    int hue = n > 0 ? (int)(360.0 * task / n) : 0;
    snprintf(out, 32, "hsl(%d,65%%,%d%%)", hue, kind == 0 ? 62 : kind == 1 ? 50 : 38);
}

pm_status pm_select_write_svg(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                              int n, double lower_bound) {
    if (!f || !st || st->devices < 1) return PM_ERR_ARG;
    double W = 1200, left = 80, row = 28, top = 50, span = st->makespan_s > 0 ? st->makespan_s : 1;
    double H = top + row * st->devices + 30 + 18 * ((n + 5) / 6);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", left + W + 20, H);
    fprintf(f, "<text x=\"%.0f\" y=\"20\" font-size=\"14\">pipemem select: %d tasks on %d "
               "devices, makespan %.3f s, lower bound %.3f s, busy", left, n, st->devices,
            st->makespan_s, lower_bound);
    for (int d = 0; d < st->devices; d++) fprintf(f, " %.0f%%", 100 * st->busy[d] / span);
    fprintf(f, "</text>\n");
    for (int d = 0; d < st->devices; d++)
        fprintf(f, "<text x=\"8\" y=\"%.0f\">device %d</text>\n", top + d * row + row / 2 + 4, d);
    for (int64_t k = 0; k < st->nlog; k++) {
        const pm_select_pass *p = &st->log[k];
        char c[32];
        colour(c, p->task, n, p->kind);
        double x = left + W * p->start / span, w = W * (p->end - p->start) / span;
        fprintf(f, "<rect class=\"pass\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                   "fill=\"%s\"><title>%s shard %d %s, %.3f-%.3f s</title></rect>\n",
                x, top + p->dev * row, w > 0.5 ? w : 0.5, row - 4, c,
                p->task >= 0 && p->task < n ? tasks[p->task].name : "?", p->shard,
                kind_names[p->kind], p->start, p->end);
        if (p->wait1 - p->wait0 >= WAIT_MIN)
            fprintf(f, "<rect class=\"wait\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                       "height=\"%.1f\" fill=\"#bbb\"><title>waiting for a prefetch copy, "
                       "%.3f-%.3f s</title></rect>\n", left + W * p->wait0 / span,
                    top + p->dev * row + (row - 4) / 3, fmax(W * (p->wait1 - p->wait0) / span, 0.5),
                    (row - 4) / 3, p->wait0, p->wait1);
    }
    double ly = top + st->devices * row + 20;
    for (int i = 0; i < n; i++) {
        char c[32];
        colour(c, i, n, 0);
        double x = left + (i % 6) * 190, y = ly + (i / 6) * 18;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%.0f\">%s (%d shards)</text>\n",
                x, y - 10, c, x + 16, y, tasks[i].name, tasks[i].nshard);
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

pm_status pm_select_write_trace(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                                int n) {
    if (!f || !st) return PM_ERR_ARG;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    for (int d = 0; d < st->devices; d++)
        fprintf(f, "%s\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                   "\"args\": {\"name\": \"device %d\"}}", d ? "," : "", d, d);
    for (int64_t k = 0; k < st->nlog; k++) {
        const pm_select_pass *p = &st->log[k];
        char name[sizeof tasks->name + 32]; /* a caller's task name: escaped */
        snprintf(name, sizeof name, "%s %s%d",
                 p->task >= 0 && p->task < n ? tasks[p->task].name : "?", kind_names[p->kind],
                 p->shard);
        fputs(",\n{\"name\": ", f);
        pm_json_str(f, name);
        fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                   "\"dur\": %.3f}", kind_names[p->kind], p->dev, p->start * 1e6,
                (p->end - p->start) * 1e6);
        if (p->wait1 - p->wait0 >= WAIT_MIN)
            fprintf(f, ",\n{\"name\": \"wait\", \"cat\": \"wait\", \"ph\": \"X\", \"pid\": 0, "
                       "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}", p->dev, p->wait0 * 1e6,
                    (p->wait1 - p->wait0) * 1e6);
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? PM_ERR_IO : PM_OK;
}
