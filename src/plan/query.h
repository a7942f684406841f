/* query.h: what the runtime asks a plan (query.c; pm_plan_copy in
 * plan_gpt.c), private to the library: its copy, where each stage's floats
 * and moments are, and what a device's runtime allocates besides its state
 * and arena, counted as the plan counts it. */
#ifndef PM_PLAN_QUERY_H
#define PM_PLAN_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_plan.h"

/* A deep copy (a pipe keeps its own); on error *dst is zeroed. */
pm_status pm_plan_copy(pm_plan *dst, const pm_plan *src, pm_err *err);
/* Floats of stage s's parameters; the float offset of its first one. */
size_t pm_plan_stage_floats(const pm_plan *pl, int s);
size_t pm_plan_stage_offset(const pm_plan *pl, int s);
/* ZeRO-1: the part of stage s's floats replica r keeps moments for,
 * [*first, *first + *count); without ZeRO the whole stage. */
void pm_plan_moment_slice(const pm_plan *pl, int s, int r, size_t *first, size_t *count);
/* Bytes a recomputed stage s keeps per microbatch (0 on stage 0, whose
 * tokens stay in the batch, and without recomputation). */
size_t pm_plan_keep_bytes(const pm_plan *pl, int s);
/* What a device's runtime allocates besides its state and arena, as the
 * plan counts it (the runtime allocates from these, so the two cannot
 * drift): the largest scratch of device d's passes; the floats of the
 * buffer a partial gradient sum arrives in (replicas after the first); one
 * transport buffer (an activation message, at least 64 bytes); how many
 * the threads transport reserves for messages to device d (one a pass,
 * and the norm chain's); how many copy buffers MPI may hold at once. */
size_t pm_plan_scratch_bytes(const pm_plan *pl, int d);
size_t pm_plan_red_floats(const pm_plan *pl);
size_t pm_plan_msg_buffer(const pm_plan *pl);
int64_t pm_plan_mailbox_buffers(const pm_plan *pl, int d);
int64_t pm_plan_send_buffers(const pm_plan *pl);

#endif
