/* search_internal.h: the memory-limited generators (gen_zbauto.c,
 * gen_vzb.c, gen_autov.c) as search.c calls them. Dependencies point one
 * way: search.c -> generators -> pool.h (the leaf candidate pool); no
 * generator calls into search.c. */
#ifndef PM_SEARCH_INTERNAL_H
#define PM_SEARCH_INTERNAL_H

#include "pipemem/pm_sched.h"

/* The V-ZB greedy at `limit` (x M, > 0) into s, named `kind`. *binding
 * (may be NULL) is set to 0 when the limit never decided anything, in which
 * case every larger limit gives the same schedule. PM_ERR_MEMLIMIT if no
 * variant fits. On error *s is zeroed. */
pm_status pm_sched_vzb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                              const char *kind, int *binding, pm_err *err);

/* The Zero Bubble heuristic at `limit` (x M; <= 0 no limit), likewise;
 * with_h adds ZB-H1 and ZB-H2 as two more variants where they fit. */
pm_status pm_sched_zb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                             const char *kind, int with_h, int *binding, pm_err *err);

#include "pool.h"

/* gen_autov.c: the V family's candidates for every limit up to max_limit:
 * the fixed V kinds, the searched blocks, and the V-ZB greedy per level. */
pm_status pm_cand_pool_v(pm_cand_pool *pl, const pm_sched_req *req, double max_limit, pm_err *err);
/* Rebuilds a searched block from its parameters. */
pm_status pm_autov_block_build(pm_sched *s, const int *blk, const pm_sched_req *req,
                               pm_err *err);

#endif
