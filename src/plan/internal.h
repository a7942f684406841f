/* internal.h: private to src/plan: what more than one of its files asks. */
#ifndef PM_PLAN_INTERNAL_H
#define PM_PLAN_INTERNAL_H

#include "pipemem/pm_plan.h"

/* PM_ERR_ARG, naming the fix, when cfg's layers (the embedding, the blocks,
 * the head's parts) cannot fill S stages, each needing at least one
 * (placement.c). */
pm_status pm_place_room(const pm_gpt_config *cfg, int S, pm_err *err);
/* PM_ERR_ARG, naming the fix, when a table of n layers cannot fill S
 * stages (placement.c). */
pm_status pm_place_fill(int n, int64_t S, pm_err *err);

#endif
