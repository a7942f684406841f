/* curves.h: `--curves FILE.svg` of train and select (curves.c): every
 * task's training loss and validation losses against the step, recorded
 * from the run's events as they come, drawn once the run is over. */
#ifndef PM_CLI_CURVES_H
#define PM_CLI_CURVES_H

#include <stdint.h>

/* Points a task's training curve holds at most: a long run's steps are
 * averaged in buckets of equal steps (so its memory is fixed up front). */
#define PM_CLI_CURVE_POINTS 1000

typedef struct {
    int64_t first, per; /* the first step recorded; steps a point averages */
    int np;             /* training points: buckets 0 .. np-1 */
    double *sum;        /* (PM_CLI_CURVE_POINTS) losses added in each bucket */
    int64_t *cnt;       /* (PM_CLI_CURVE_POINTS) and how many */
    int nv;             /* validation points: step and loss, one a bucket (the last) */
    double *vx, *vy;    /* (PM_CLI_CURVE_POINTS + 1) */
    int64_t stop;       /* > 0: stopped early after this step */
    const char *why;    /* and why (borrowed, for the mark's title) */
} pm_cli_curve;

typedef struct {
    pm_cli_curve *c; /* (n); owned */
    int n;
    void *block;     /* every curve's points, one allocation; owned */
} pm_cli_curves;

/* n curves, curve i for steps first[i] + 1 .. last[i] (its steps before this
 * run and its last). 0, or 1 after one line (out of memory). */
int pm_cli_curves_init(pm_cli_curves *cv, int n, const int64_t *first, const int64_t *last);
void pm_cli_curves_free(pm_cli_curves *cv);
/* Curve i: the training loss of step `step`; a validation loss after it;
 * stopped early after it (why names the reason). */
void pm_cli_curves_loss(pm_cli_curves *cv, int i, int64_t step, double loss);
void pm_cli_curves_val(pm_cli_curves *cv, int i, int64_t step, double loss);
void pm_cli_curves_stop(pm_cli_curves *cv, int i, int64_t step, const char *why);

/* The SVG at path, all or nothing (pm_wfile): one path per curve (its
 * training loss), its validation losses as dots on a dashed line, a
 * stopped curve's end crossed, a title, and a legend in `order` (n
 * indices: the best first) naming each curve (names[i]) in its colour.
 * 0, or 1 after one line. */
int pm_cli_curves_write(const pm_cli_curves *cv, const int *order, const char *const *names,
                        const char *title, const char *path);

#endif
