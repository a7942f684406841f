/* sched.h: the schedule engine's interface beyond pm_sched.h, private to
 * the library: what its own files and the library's other modules (the
 * planner, the runtime) use, and a user of the engine does not need.
 * Building a schedule pass by pass and its per-stage costs (sched.c), the
 * registry's checks and look-ups (registry.c), the parsers of text in
 * memory (format_text.c), the simulator's buffers for a caller that replays
 * many times (sim.c), the plain lower bound (bound.c) and a ring
 * all-reduce's cost (sim_dp.c). */
#ifndef PM_SCHED_PRIVATE_H
#define PM_SCHED_PRIVATE_H

#include "pipemem/pm_sched.h"

/* ---- the schedule (sched.c) ---------------------------------------------- */

/* Allocates an empty schedule (every device's list empty). On error *s is
 * zeroed and nothing is allocated. */
pm_status pm_sched_init(pm_sched *s, const char *kind, pm_place place, int p, int m, int v,
                        pm_err *err);
/* Deep copy into an uninitialised dst. */
pm_status pm_sched_copy(pm_sched *dst, const pm_sched *src, pm_err *err);
/* Appends a pass to device d's list; the capacity is exact by construction,
 * so overflowing it is a bug (asserted). */
void pm_sched_push(pm_sched *s, int d, pm_pass_kind kind, int stage, int mb);
/* Allocates s->pair, every mark 0, if it is not there yet. */
pm_status pm_sched_pairs_init(pm_sched *s, pm_err *err);
/* Stage s's chunk index on the device that holds it (0 .. v-1: for V,
 * chunk 0 is stage i and chunk 1 is stage 2p-1-i). */
int pm_sched_stage_chunk(const pm_sched *s, int stage);

/* ---- costs (sched.c) ----------------------------------------------------- */

/* S stages' costs, all zero. */
pm_status pm_cost_init(pm_cost *c, int S, pm_err *err);
/* M: one microbatch's activation through the whole model (sum of mf). */
double pm_cost_M(const pm_cost *c);
/* Time and memory delta of one pass (with recomputation: F keeps mr, B
 * costs tf + tb and turns mr into what plain B leaves, mf - mr + mb). */
double pm_cost_time(const pm_cost *c, const pm_pass *ps);
double pm_cost_mem(const pm_cost *c, const pm_pass *ps);
/* How far the device's memory rises above its level before the pass while
 * the pass runs (>= its delta): F mf, recomputed F mr + mf, recomputed B mf,
 * else max(0, delta). A device's peak is the largest level-before + rise. */
double pm_cost_rise(const pm_cost *c, const pm_pass *ps);
/* What a recomputed stage keeps when mem.r is 0: f * PM_KEEP_DEFAULT. */
double pm_mem_keep(pm_mem mem);

/* ---- the registry (registry.c) ------------------------------------------- */

const pm_sched_kind *pm_sched_kind_find(const char *name);
/* The same, and "KIND-r" as KIND with *recompute set (else 0). */
const pm_sched_kind *pm_sched_kind_find_r(const char *name, int *recompute);
/* PM_OK if req's every number is one the generators can take: the costs
 * (pm_sched_check_costs), finite memory deltas, mem_limit and time_limit
 * from 0 (their defaults) up (a NaN or negative limit is refused, not read
 * as the default); else PM_ERR_ARG naming the field. req NULL is refused.
 * Every generator, the search and the block constructor check it. */
pm_status pm_sched_check_req(const pm_sched_req *req, pm_err *err);
/* PM_OK if (p, m, v) is inside the range of tier (pm_sched.h's supported
 * range); else PM_ERR_ARG with one line naming what (a kind or command),
 * the value and the limit. */
pm_status pm_sched_check_range(pm_sched_tier tier, const char *what, int p, int m, int v,
                               pm_err *err);
/* The plain request equivalent to req with recomputation: times (f, b + f,
 * w), memory (keep, f - keep + b, w) and the limit less one stage's whole
 * activation (the most a recomputing pass holds above the levels a
 * generator tracks), in units of the new M = p * keep. A generator that
 * meets the new limit meets req's with recomputation. */
void pm_sched_req_recompute(const pm_sched_req *req, int v, pm_sched_req *out);

/* ---- text in memory (format_text.c; pm_sched_load reads a file) --------- */

pm_status pm_sched_parse_text(pm_sched *s, const char *text, size_t len, pm_err *err);
pm_status pm_sched_parse_csv(pm_sched *s, const char *text, size_t len, pm_err *err);

/* ---- the simulator (sim.c, bound.c, sim_dp.c) ---------------------------- */

/* pm_sim_run in two phases, for a caller that replays one schedule many
 * times (the runtime, every step): init allocates every buffer once (on
 * error *sim is zeroed); pm_sim_replay allocates nothing. */
pm_status pm_sim_init(pm_sim *sim, const pm_sched *s, pm_err *err);
/* pm_sched_lower_bound_at without a memory cap. */
double pm_sched_lower_bound(const pm_sched *s, const pm_cost *c);
/* A ring all-reduce of n bytes over D replicas, at bw bytes and latency a
 * per time unit: 2 (D - 1) (a + n / (D bw)); 0 for D = 1. */
double pm_allreduce_cost(double n, int D, double bw, double a);

/* Called on each schedule a search offers, with its figures (on equal
 * stages); set *stop to end the search; a status other than PM_OK ends it
 * with that status (err filled). */
typedef pm_status (*pm_sched_visit_fn)(void *ctx, const pm_sched *s, const pm_search_point *pt,
                                       int *stop, pm_err *err);
/* Every candidate pm_sched_search weighs within req->mem_limit, built,
 * validated and offered to visit fastest first (its answer first), then
 * those of the lowest memory levels below them: for a planner that places
 * each on a real model (unequal stages, the state, its buffers) and keeps
 * the fastest that fits the devices. PM_ERR_MEMLIMIT, naming the smallest
 * feasible limit, when none is within it. */
pm_status pm_sched_search_each(const pm_sched_req *req, pm_sched_visit_fn visit, void *ctx,
                               pm_err *err);

#endif
