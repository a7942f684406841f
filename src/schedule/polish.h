/* polish.h: the local search that improves a finished schedule by moving
 * single passes within each device's order (polish.c). A leaf: it needs
 * only the simulator. */
#ifndef PM_POLISH_H
#define PM_POLISH_H

#include "pipemem/pm_sched.h"

#define PM_POLISH_TOL 1e-9 /* the validator's tolerance on the cap */

/* The searches polish when p m is at most PM_POLISH_MAX_PM (1200 passes
 * on the V placement, 600 on the single one), each schedule with a budget of
 * PM_POLISH_BUDGET simulated passes (a few ms here). A budget 3 times
 * larger found nothing more at p = 2 and 3, where the polish gains most
 * (up to 5%), and under 0.7% more at p = 4 to 8; a round costs the passes
 * squared. */
#define PM_POLISH_MAX_PM 200
#define PM_POLISH_BUDGET ((int64_t)300000)

/* Improves s in place: the result replays under c, keeps every device's
 * peak within cap (absolute units, like pm_cost_M; <= 0: no cap) and its
 * makespan is at most s's. Spends at most `budget` simulated passes, so the
 * result depends on nothing else. A schedule that does not replay or is
 * over cap to start with is left as it is. *moves (may be NULL) counts the
 * moves kept. Fails only when out of memory. */
pm_status pm_sched_polish(pm_sched *s, const pm_cost *c, double cap, int64_t budget, int *moves,
                          pm_err *err);

#endif
