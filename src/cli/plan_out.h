/* plan_out.h: the reports of `pipemem plan` (plan_out.c): a table, CSV,
 * JSON and the memory-throughput plane as SVG. */
#ifndef PM_CLI_PLAN_OUT_H
#define PM_CLI_PLAN_OUT_H

#include <stdio.h>

#include "pipemem/pm_cluster.h"

typedef struct {
    const pm_cluster_plan *plan; /* (n) best first (pm_cluster_search's order) */
    int n;
    char model[160];             /* the model in one line, for titles */
    int devices;
    double device_mem;           /* bytes, 0: no limit */
    const char *time_unit;       /* "s", or "flop" without a rate */
    int mfu;                     /* 1: MFU is known (a device rate was given) */
    int kinds;                   /* the kinds of bytes shown (pm_bytes_kind): 5, or 6 with
                                  * the transport's (pipemem's GPT counts them) */
    int top;                     /* table: at most this many rows (0: all) */
    int timed_seq;               /* pass times measured at this length, scaled by FLOPs to
                                  * the model's (pm_layer_costs.timed_ctx); 0: not scaled */
} plan_report;

/* Each writes the whole report to f; 0, or 1 if a write failed. */
int plan_write_table(FILE *f, const plan_report *r);
int plan_write_csv(FILE *f, const plan_report *r);
int plan_write_json(FILE *f, const plan_report *r);
/* MFU (or samples per time unit without a rate) against the largest
 * device's activation peak: one point per plan, hollow when it does not
 * fit, the Pareto front of those that fit (no other fitting plan is
 * faster with less activation memory) joined by a line and labelled. */
int plan_write_svg(FILE *f, const plan_report *r);

#endif
