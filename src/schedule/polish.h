/* polish.h: the settings of the local search (pm_sched_polish, polish.c)
 * that the searches run on their candidates. */
#ifndef PM_POLISH_H
#define PM_POLISH_H

#include "pipemem/pm_sched.h"

/* The searches polish when p m is at most PM_POLISH_MAX_PM (12288 passes
 * on the V placement, 6144 on the single one), each schedule with a budget
 * of PM_POLISH_BUDGET simulated passes (a few ms here). A budget 3 times
 * larger found nothing more at p = 2 and 3, where the polish gains most
 * (up to 5%), and under 0.7% more at p = 4 to 8. A move's replay resumes
 * where the move can first change anything and stops when its effect dies
 * out (resim.h), but in a schedule without idle time it rarely dies out,
 * so a round still costs about the passes squared: at p = 16, m = 64 the
 * budget buys about 150 moves of a round's 49,000. */
#define PM_POLISH_MAX_PM 2048
#define PM_POLISH_BUDGET ((int64_t)300000)
/* Kicks in a row without a gain that end the searches' polish: with 100
 * it reached the optimum at p = 4, m = 4, 0.75 M, costs 3,3,2 (43 -> 42);
 * spending the whole budget instead gained nothing more on bench_gap's
 * grid and tripled the time of the tests that search. */
#define PM_POLISH_PATIENCE 100

#endif
