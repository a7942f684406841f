/* slots.h: the exact optimum on a time grid, by SAT (slots.c). Private to
 * src/schedule; used by the optimal kinds (gen_optimal.c) in place of the
 * MILP when every cost is a whole number of one time unit. */
#ifndef PM_SLOTS_H
#define PM_SLOTS_H

#include "milp.h"
#include "pipemem/pm_sched.h"

#define PM_SLOTS_MAX_UNITS 1024 /* largest pass time or latency, in units */

/* 1 if this build has the SAT solver (CaDiCaL). */
int pm_slots_available(void);

/* The time unit of c's costs if the slot model applies to schedules like
 * s0 (makespan mk0), else 0: every F, B, W time and the latency a small
 * whole multiple of the unit, F the only pass that adds memory and W frees
 * what F added (the default accounting), no recomputation, the single or V
 * placement, and a model small enough to build. */
double pm_slots_unit(const pm_sched *s0, const pm_cost *c, double mk0);

/* The schedule of s0's placement with the smallest simulated makespan under
 * cap, searched slot by slot upwards from lb; s0 (makespan mk0) is the
 * best known and is returned when nothing shorter exists. res gets the
 * makespan found, the proven bound and whether the time limit stopped the
 * search. The result is named kind. */
pm_status pm_slots_solve(pm_sched *out, const pm_sched *s0, const pm_cost *c, double cap,
                         double unit, double mk0, double lb, double seconds, const char *kind,
                         pm_milp_result *res, pm_err *err);

/* A large-neighbourhood step for the searches' polish: ask the slot model
 * for a schedule one slot shorter than s whose every pass starts within
 * `window` slots of where it starts in s, and repeat from each answer, at
 * most `steps` times, while the makespan asked for is under `below`. Each
 * question stops after `conflicts` conflicts of the solver, never after a
 * time, so every machine gets the same answer. */
typedef struct {
    int window;    /* slots a pass may move */
    int conflicts; /* the solver's budget per question */
    int steps;     /* questions asked at most */
    double below;  /* a question is asked only for a makespan under this */
} pm_slots_lns;

/* s replaced by the shortest schedule found that way under cap (absolute,
 * > 0; 0 none), or left as it is when the slot model does not apply (costs
 * off a grid, other placements, no SAT solver). *steps: shorter schedules
 * found. Errors only on running out of memory. */
pm_status pm_slots_improve(pm_sched *s, const pm_cost *c, double cap, const pm_slots_lns *cfg,
                           int *steps, pm_err *err);

#endif
