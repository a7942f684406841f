/* internal.h: private to src/plan: what more than one of its files asks
 * beyond placement.h, arena.h, devmem.h and query.h. */
#ifndef PM_PLAN_INTERNAL_H
#define PM_PLAN_INTERNAL_H

#include "pipemem/pm_cluster.h"

/* PM_ERR_ARG naming the field unless every field of hw is a number in its
 * range: mem 0 .. 1e18, tflops 0 .. 1e9, efficiency 0 .. 1, link_gbps 0 ..
 * 1e12, devices >= 0 (NaN and negatives refused: a NaN memory would fit
 * anything). Every function of pm_cluster.h that takes a pm_cluster checks
 * it (cluster_model.c). */
pm_status pm_cluster_check(const pm_cluster *hw, pm_err *err);

#endif
