/* gen.h: the generators' shared declarations, private to src/schedule:
 * every generator as the registry (registry.c) builds a kind with it, and
 * the memory-limited greedies and the V family's candidates as the search
 * (search.c) and auto-v take them. Dependencies point one way: registry.c
 * and search.c -> the generators -> pool.h (the leaf candidate pool); a
 * generator includes this header, never the search's file. */
#ifndef PM_GEN_H
#define PM_GEN_H

#include "pipemem/pm_sched.h"

typedef struct pm_cand_pool pm_cand_pool; /* pool.h */

/* ---- the named kinds (pm_sched_generate finds them by name) ------------- */

pm_status pm_sched_build_gpipe(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_1f1b(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_interleaved(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_zb_h1(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_zb_h2(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_zb_v(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_v_min(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_v_half(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_1f1b_v(pm_sched *s, const pm_sched_req *req, pm_err *err);
/* DualPipeV (gen_dualpipev.c): DeepSeek's and PyTorch's per-device order,
 * overlapped F&B pairs as their two passes, F first; V placement, m >= 2p. */
pm_status pm_sched_build_dualpipev(pm_sched *s, const pm_sched_req *req, pm_err *err);
/* The exact optimum by a MILP (gen_optimal.c), single or V placement, under
 * req->mem_limit, for at most req->time_limit seconds; small cases only
 * (a few hundred passes). opt_status, opt_bound say what was proven. */
pm_status pm_sched_build_optimal(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_optimal_v(pm_sched *s, const pm_sched_req *req, pm_err *err);

/* ---- schedules searched under a memory limit -------------------------- */

/* Zero Bubble's adaptive heuristic on the single placement, real costs,
 * under req->mem_limit (x M): zb (no limit if 0), zb-1p (default 1.0),
 * zb-2p (default 2.0). */
pm_status pm_sched_build_zb_auto(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_zb_1p(pm_sched *s, const pm_sched_req *req, pm_err *err);
pm_status pm_sched_build_zb_2p(pm_sched *s, const pm_sched_req *req, pm_err *err);
/* V-ZB: the greedy on the V placement, real costs, limit default 1.0. */
pm_status pm_sched_build_v_zb(pm_sched *s, const pm_sched_req *req, pm_err *err);
/* auto-v: the adaptive V scheduler; req->mem_limit is required. The best V
 * schedule (searched building blocks, the fixed V blocks, V-ZB's greedy,
 * polished like the search's for p m <= 200) whose peak fits the limit.
 * Below the smallest feasible limit it fails
 * with PM_ERR_MEMLIMIT and a message naming that limit. */
pm_status pm_sched_build_auto_v(pm_sched *s, const pm_sched_req *req, pm_err *err);
/* The smallest limit (x M) auto-v accepts for req's p, m, costs, memory. */
pm_status pm_sched_auto_v_min_limit(const pm_sched_req *req, double *limit, pm_err *err);

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

/* gen_autov.c: the V family's candidates for every limit up to max_limit:
 * the fixed V kinds, the searched blocks, and the V-ZB greedy per level. */
pm_status pm_cand_pool_v(pm_cand_pool *pl, const pm_sched_req *req, double max_limit, pm_err *err);
/* Rebuilds a searched block from its parameters. */
pm_status pm_autov_block_build(pm_sched *s, const int *blk, const pm_sched_req *req,
                               pm_err *err);

#endif
