/* placement.h: the cut of a model's layers into stages (placement.c),
 * private to the library: pipemem's GPT as a table of layers, the cut on
 * any table, each device's share and the per-stage costs the simulator
 * consumes, for the planner (plan.c, plan_gpt.c) and its tests. The rule
 * itself is pm_plan.h's. */
#ifndef PM_PLAN_PLACEMENT_H
#define PM_PLAN_PLACEMENT_H

#include <stdint.h>

#include "pipemem/pm_plan.h"

/* FLOPs of each kind's passes (pm_gpt_layer_sizes). */
pm_status pm_place_flops(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                         pm_err *err);
/* Costs of each kind's passes at B x from_T carried to B x to_T: each
 * pass times its FLOPs at to_T over those at from_T, or times to_T /
 * from_T for a pass without products (the embedding's; a one-part head's
 * F). Exact for FLOPs; for times it assumes each pass keeps its FLOP rate,
 * which attention's share (quadratic in T) bends. */
pm_status pm_place_scale_costs(const pm_gpt_config *cfg, int B, int from_T, int to_T,
                               pm_layer_costs *lc, pm_err *err);
/* The rule (o NULL: time first, no cap) on cfg's layers; errors as
 * pm_place_cut. */
pm_status pm_place_layers(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const pm_cut_opts *o, int *first,
                          pm_err *err);

/* pipemem's GPT as a table of pm_gpt_num_layers(cfg) rows: times from lc
 * (NULL: FLOPs), a head part charged its rows' share; activations the
 * model's exact saved bytes; state 16 bytes per parameter (fp32
 * parameters, gradients and two AdamW moments). */
pm_status pm_place_table(const pm_gpt_config *cfg, int B, int T, const pm_layer_costs *lc,
                         pm_place_layer *l, pm_err *err);
/* The rule above on any table of n layers (o NULL: time first, no cap):
 * first[] as pm_place_layers; *least (may be NULL) the chosen cut's largest
 * device memory. When no cut fits o->cap: PM_ERR_MEMLIMIT naming the least
 * any cut needs, *least that figure and first[] the cut that reaches it. */
pm_status pm_place_cut(const pm_place_layer *l, int n, const pm_sched *s,
                       const pm_cut_opts *o, int *first, double *least, pm_err *err);
/* Test hook: the stage figures (a stage's time or memory) every cut has
 * evaluated since the process started, in every thread: tests bound a
 * cut's work with it. */
int64_t pm_place_evals(void);
/* Each device's share under a cut, as pm_place_shares. */
pm_status pm_place_cut_shares(const pm_place_layer *l, int n, const pm_sched *s,
                              const int *first, double *time, double *mem, pm_err *err);
/* Per-stage costs of a cut, what the simulator consumes: times the sums of
 * the layers', F keeps sum(act), B releases sum(act - act_w), W the rest;
 * with recompute, F keeps only the stage's first layer's input (mr). */
pm_status pm_place_stage_costs(const pm_place_layer *l, const int *first, int S, int recompute,
                               pm_cost *c, pm_err *err);

/* PM_ERR_ARG, naming the fix, when cfg's layers (the embedding, the blocks,
 * the head's parts) cannot fill S stages, each needing at least one
 * (placement.c). */
pm_status pm_place_room(const pm_gpt_config *cfg, int S, pm_err *err);
/* PM_ERR_ARG, naming the fix, when a table of n layers cannot fill S
 * stages (placement.c). */
pm_status pm_place_fill(int n, int64_t S, pm_err *err);

#endif
