/* pipe.h: what a pipe tells and takes beyond pm_runtime.h (pipe.c,
 * pipe_world.c, pipe_timeline.c), private to the library: its tests and
 * benchmarks read the predicted peaks and the measured timeline, and gather
 * or replace its slabs whole. */
#ifndef PM_RUNTIME_PIPE_H
#define PM_RUNTIME_PIPE_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_runtime.h"
#include "runtime/internal.h" /* pm_slab */

int64_t pm_pipe_w_relabeled(const pm_pipe *pp);     /* W passes that took another microbatch */
const size_t *pm_pipe_predicted_peak(const pm_pipe *pp); /* (p) bytes, known from init */
int64_t pm_pipe_steps_done(const pm_pipe *pp);
/* Resume: the steps a checkpoint had done (learning rate, bias correction). */
void pm_pipe_set_steps_done(pm_pipe *pp, int64_t steps);

/* Gathers every device's slab `which` (parameters or an AdamW moment) into
 * a whole slab of pm_gpt_num_params floats (replica 0's: all are equal).
 * Under MPI every rank calls it and only the root's `out` is filled. */
pm_status pm_pipe_gather(pm_pipe *pp, pm_slab which, float *out, pm_err *err);
/* Replaces this process's devices' parameters and moments from whole slabs
 * (resume from a checkpoint: also pm_pipe_set_steps_done); m or v may be
 * NULL for zeros. Under MPI every rank passes the same slabs. */
void pm_pipe_scatter(pm_pipe *pp, const float *params, const float *m, const float *v);

/* The measured timeline of the last step as a pm_sim (times in us, memory
 * in bytes), for pm_sched_write_svg / pm_sched_write_trace. Caller frees. */
pm_status pm_pipe_timeline(const pm_pipe *pp, pm_sim *out, pm_err *err);

#endif
