/* work.h: a count of the schedule engine's steps where their number is the
 * claim (linear in the passes, not quadratic), so that a test bounds the
 * work instead of timing it: the passes a replay tries (validate.c, sim.c),
 * the stages the bound visits (bound.c), the passes zb-v's pattern emits or
 * drops (gen_zbv.c). Each call adds its count once, at its end. Private to
 * src/schedule (and the tests). */
#ifndef PM_SCHED_WORK_H
#define PM_SCHED_WORK_H

#include <stdint.h>

/* Adds n steps to the count. */
void pm_sched_work_add(int64_t n);

/* Test hook: the steps counted since the process started, in every thread. */
int64_t pm_sched_work(void);

#endif
