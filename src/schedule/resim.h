/* resim.h: a replay that resumes (sim.c), for the polish (polish.c), which
 * replays one schedule after each of many small changes to its orders.
 *
 * Why it is exact: a pass's times depend only on the passes before it on
 * its device and on the one it waits for. Take a time t such that, on every
 * device, the passes that started before t in the last replay are the
 * same passes, in the same places, in the changed schedule. Everything such
 * a pass waits for ended before it started, so also started before t: the
 * set of them is closed under "waits for" in both schedules, and their
 * times are the same. The replay restarts each device at its first pass
 * that started at or after t (pm_resim_cut), with the device's free time,
 * memory, busy time and peak as they were after the pass before, and gives
 * the same start and end times, memory, spans, makespan, bubble and peaks
 * as a full replay (tests/test_polish.c checks every field on random moves).
 * A move of device d's pass i to j (lo = min(i, j)) changes no place before
 * lo, so t = the start of the pass at lo, before the move, will do.
 *
 * It needs every F and every B or BW of one (stage, microbatch) to appear
 * once (a valid schedule's do; otherwise which one another pass waits for
 * is decided by time) and passes run one at a time (no overlapped pairs). */
#ifndef PM_RESIM_H
#define PM_RESIM_H

#include "pipemem/pm_sched.h"

typedef struct {
    pm_sim sim;    /* the last replay, as pm_sim_replay leaves it; owned */
    int64_t *from; /* (p) each device's first pass the last cut replays */
    double *acc;   /* (4, p, cap) after each pass: the device's busy time, its peak,
                      where that peak was first reached, the sum of its end times */
    double *save;  /* (7, p, cap) and (4, p): what the last run overwrote, for undo */
    double saved_makespan, saved_bubble; /* likewise */
} pm_resim;

/* Allocates everything for schedules of s's shape (on error *r is zeroed). */
pm_status pm_resim_init(pm_resim *r, const pm_sched *s, pm_err *err);
void pm_resim_free(pm_resim *r);
/* A full replay of s (pm_sim_replay) that later runs resume from.
 * PM_ERR_ARG if a pass's F or B/BW appears twice, or with overlapped pairs. */
pm_status pm_resim_full(pm_resim *r, const pm_sched *s, const pm_cost *c, pm_err *err);
/* After a replay that succeeded, of a schedule s differs from only in
 * passes that started at or after t in it: sets each device's first pass
 * to replay, and returns how many passes the run will replay. */
int64_t pm_resim_cut(pm_resim *r, const pm_sched *s, double t);
/* Replays s from the cut: the result is a full replay's. On error
 * (deadlock) the figures are unspecified until pm_resim_undo. */
pm_status pm_resim_run(pm_resim *r, const pm_sched *s, const pm_cost *c, pm_err *err);
/* Puts back the replay before the last run, s being the schedule it was of
 * (the changes undone). */
void pm_resim_undo(pm_resim *r, const pm_sched *s);
/* The sum of every pass's end time (device by device). */
double pm_resim_ends(const pm_resim *r, const pm_sched *s);

#endif
