/* resim.h: a replay that resumes (resim.c), for the polish (polish.c),
 * which replays one schedule after each of many small changes to a
 * device's order, and keeps or undoes each.
 *
 * Why it is exact: a pass's times depend only on the pass before it on its
 * device and on the one it waits for. Let device d's places lo..hi change
 * (their passes permuted), and t be the start, before the change, of the
 * pass at d's place lo. Every pass that started before t sits before lo if
 * on d (starts never fall along a device's list), so in the same place;
 * everything it waits for ended before it started, so started before t
 * too: these passes wait for the same passes in both schedules, and keep
 * their times. The replay restarts each device at its first pass that
 * started at or after t (pm_resim_cut), from the end of the pass before.
 *
 * And it stops early, when the change has died out: once every pass of d's
 * places lo..hi ran, no device's last replayed pass ends at another time
 * than before, and every pass that got other times, or was moved, has had
 * the passes that wait on it run, the passes not yet replayed wait for the
 * same ends as before and get the same times: they keep them. So a move
 * whose effect is absorbed by idle time nearby costs a few passes, not the
 * rest of the schedule. tests/test_polish.c checks the start and end of
 * every pass, the spans and the makespan against a full replay, bit for
 * bit, on random moves kept or undone.
 *
 * It needs every F, every B or BW, and every W of one (stage, microbatch)
 * to appear once (a valid schedule's do) and passes run one at a time (no
 * overlapped pairs). It keeps times only: after a run, sim's memory, busy,
 * peak and bubble figures are still those of the last full replay (a
 * device's memory depends on its order alone; the polish checks it so). */
#ifndef PM_RESIM_H
#define PM_RESIM_H

#include "pipemem/pm_sched.h"

typedef struct {
    pm_sim sim;       /* start, end, span, makespan of the schedule as it stands; owned */
    double ends;      /* the sum of every pass's end time (kept by differences) */
    int64_t *where;   /* (3, S, m) place (d cap + k) of each F, B or BW, W; -1: none */
    int64_t *stamp;   /* (p, cap) the run in which the pass got new times */
    int64_t *log_at;  /* (p, cap) the places the last run rewrote, ... */
    double *log_t;    /* (2, p, cap) ... and their start and end before */
    int64_t nlog;     /* entries in the log */
    int64_t *dev;     /* (4, p) per device: next pass, worklist, on-list flag, and 1
                         while its last replayed pass ends at another time than before */
    double *free_at;  /* (p) per device: when its last replayed pass ends */
    double *span_was; /* (p) the spans before the last run, for undo */
    double makespan_was, ends_was;
    int d;            /* the change of the last cut: device d's places lo..hi */
    int64_t lo, hi;
    int64_t run;      /* runs so far (stamps) */
    int64_t pending;  /* reads of changed ends still to come */
    int64_t unsettled; /* devices whose last replayed pass ends at another time */
    int64_t ran;      /* passes the last run replayed */
    int cut_short;    /* 1: the last run stopped at its `most` passes */
} pm_resim;

/* Allocates everything for schedules of s's shape (on error *r is zeroed). */
pm_status pm_resim_init(pm_resim *r, const pm_sched *s, pm_err *err);
void pm_resim_free(pm_resim *r);
/* A full replay of s (pm_sim_replay: every figure) that runs resume from.
 * PM_ERR_ARG if a pass appears twice, or with overlapped pairs. */
pm_status pm_resim_full(pm_resim *r, const pm_sched *s, const pm_cost *c, pm_err *err);
/* r holds the replay of a schedule that s differs from only in device d's
 * places lo..hi (the same passes in another order). Sets where the run
 * starts; returns the passes after that, the most the run replays. Call
 * pm_resim_run, or pm_resim_undo once s is put back. */
int64_t pm_resim_cut(pm_resim *r, const pm_sched *s, int d, int64_t lo, int64_t hi);
/* Replays s from the cut, until the change dies out or the end (r->ran:
 * the passes replayed), or stops after `most` passes (r->cut_short). On
 * deadlock or a stop the times are unspecified until pm_resim_undo. */
pm_status pm_resim_run(pm_resim *r, const pm_sched *s, const pm_cost *c, int64_t most,
                       pm_err *err);
/* Puts back the replay before the last cut, s being put back too. */
void pm_resim_undo(pm_resim *r, const pm_sched *s);

#endif
