/* select_out.h: the reports of `pipemem select` (select_out.c), each from
 * the sweep's session (pm_select.h). */
#ifndef PM_CLI_SELECT_OUT_H
#define PM_CLI_SELECT_OUT_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "curves.h"
#include "pipemem/pm_select.h"

/* --dry-run: every task's shards and the slab, then each policy's makespan
 * forecast (pm_select_session_forecast); --json: the same as one JSON
 * object on standard output (steps: the longest task's). */
void sel_print_plan(const pm_select_session *s);
void sel_print_policies(const pm_select_session *s, const pm_select_forecast *f);
void sel_print_dry_json(const pm_select_session *s, const pm_select_forecast *f);

/* A task's reason as the CLI says it: the library's (pm_select_result.why)
 * with its parameters turned into flags, which may lengthen it. */
#define SEL_WHY (2 * sizeof ((pm_select_result *)0)->why)

/* Progress lines on standard error (pm_select_opts.report). */
typedef struct {
    const pm_select_task *t;
    int n, done, stopped, failed, devices;
    int64_t steps_all, steps_done; /* every task's steps, and those run so far */
    double t0, last;               /* start, last status line */
    pm_cli_curves *curves;         /* --curves: the losses recorded (NULL: none) */
    char (*why)[SEL_WHY];          /* (n) with curves: each task's stop reason */
} sel_progress;
void sel_on_event(void *ctx, const pm_select_event *ev);

/* The results, ranked (pm_select_rank): the table (pm_select_rank_rule
 * above it), the makespan against the bound with each device's peak, busy
 * share and where its time went, the JSON object, the CSV rows, and the
 * run as an SVG timeline (trace 0) or a Chrome trace (trace 1). */
void sel_print_table(FILE *f, const pm_select_session *s);
void sel_print_summary(FILE *f, const pm_select_session *s);
void sel_print_json(const pm_select_session *s);
int sel_write_csv(const char *path, const pm_select_session *s);
int sel_write_timeline(const char *path, const pm_select_session *s, int trace);
/* --curves: every task's losses (pg's), the legend in the table's order. */
int sel_write_curves(const char *path, const pm_select_session *s, const sel_progress *pg);

#endif
