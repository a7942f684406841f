/* select_out.h: the reports of `pipemem select` (select_out.c). */
#ifndef PM_CLI_SELECT_OUT_H
#define PM_CLI_SELECT_OUT_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "pipemem/pm_select.h"

/* --dry-run: every task's shards and the slab, then each policy's makespan
 * forecast from the passes' FLOPs and their shards' state moves, at rates
 * measured first (pm_select_measure; spill: the spill directory, or NULL
 * for RAM). */
typedef struct {
    int every, batches; /* --eval-every (0: only at the end), --eval-batches */
    int no_join;        /* --no-join: the forecast's shard policy joins no running task */
} sel_eval;
void sel_print_plan(const pm_select_task *t, int n, const pm_select_layout *lay);
int sel_print_policies(const pm_select_task *t, int n, int D, const pm_select_layout *lay,
                       const char *spill, const sel_eval *ev);
/* --dry-run --json: the same as one JSON object on standard output (steps:
 * the longest task's). */
int sel_print_dry_json(const pm_select_task *t, int n, const pm_select_layout *lay, int D,
                       int steps, const char *spill, const sel_eval *ev);

/* Progress lines on standard error (pm_select_opts.report). */
typedef struct {
    const pm_select_task *t;
    int n, done, stopped, failed, devices;
    int64_t steps_all, steps_done; /* every task's steps, and those run so far */
    double t0, last;               /* start, last status line */
} sel_progress;
void sel_on_event(void *ctx, const pm_select_event *ev);

/* The results: order[] ranks the tasks that ran every step by validation
 * loss, then those stopped early (halving, ASHA, an interruption) by the
 * step of their last validation loss, later first, then by that loss, then
 * failed tasks and those without a validation loss (ties: index order);
 * sel_rank_rule says so in one line, above the table. */
void sel_rank(const pm_select_result *res, int n, int *order);
extern const char sel_rank_rule[];
void sel_print_table(FILE *f, const pm_select_task *t, const pm_select_result *r,
                     const int *order, int n);
void sel_print_json(pm_select_policy policy, int devices, size_t device_mem,
                    const pm_select_task *t, const pm_select_result *r, const int *order, int n,
                    const pm_select_stats *st, double bound);
int sel_write_csv(const char *path, const pm_select_task *t, const pm_select_result *r,
                  const int *order, int n);
/* The run as an SVG timeline (trace 0) or a Chrome trace (trace 1). */
int sel_write_timeline(const char *path, const pm_select_stats *st, const pm_select_task *t,
                       int n, double bound, int trace);

#endif
