/* block_internal.h: what block.c shares with construct.c and nothing else:
 * the stage a block pass stands for, a (stage, kind) -> pass index table and
 * the dependency rule in slot units. */
#ifndef PM_BLOCK_INTERNAL_H
#define PM_BLOCK_INTERNAL_H

#include "pipemem/pm_sched.h"

/* Limits that keep every slot computation inside int64 and every table
 * small enough to allocate (a fuzzer will try the corners). */
#define PM_BLOCK_MAX_DEVICES 4096
#define PM_BLOCK_MAX_CHUNKS 64
#define PM_BLOCK_MAX_STAGES 65536 /* devices * chunks */
#define PM_BLOCK_MAX_INTERVAL 65536
#define PM_BLOCK_MAX_OFFSET (1 << 20)
#define PM_BLOCK_MAX_DEV_X_T (1 << 22) /* p * T: bounds the per-device residue work */

/* Stage held by chunk `chunk` of device `dev` under the block's placement
 * (the same mapping as pm_sched_stage_device / _chunk, inverted). */
int pm_block_stage(const pm_block *b, int dev, int chunk);

/* Fills tab (S*PM_PASS_COUNT ints, caller-allocated) with the index of each
 * (stage, kind) pass in b->pass, -1 where the block has none. Returns 0 if
 * two passes claim the same (stage, kind) or a pass is out of range. */
int pm_block_index(const pm_block *b, int *tab);

/* Index of the pass that frees stage s (BW, or W), and the one that
 * produces its input gradient (B or BW); -1 if absent. */
static inline int pm_block_tab(const int *tab, int stage, int kind) {
    return tab[stage * PM_PASS_COUNT + kind];
}

/* Checks the block's shape: ranges, one F per stage, B and W or one BW,
 * and that every pass starts no earlier than its dependencies end (the
 * rule of pm_sched.h in slot units). On failure err names the pass; line
 * (may be NULL) gives each pass's text line for the message,
 * allow_missing_w accepts stages whose W is still to be filled. */
pm_status pm_block_check_lines(const pm_block *b, const int *line, int allow_missing_w,
                               pm_err *err);
/* Zeroed block with room for cap passes. */
pm_status pm_block_alloc(pm_block *b, pm_place place, int p, int v, int T, int cap,
                         pm_err *err);
/* Gives every stage without a W one, at the first slot free on its device
 * after its B (the papers' rule, in the repeated steady state). */
pm_status pm_block_fill_w(pm_block *b, pm_err *err);
/* *peak: the largest device's peak of b repeated m times (the plain
 * repetition, before any move; absolute units, mem / v per stage). The
 * constructor never exceeds it. Fails like the constructor's setup. */
/* Test-only switch, 0 by default: 1 makes the constructor turn every
 * candidate into a schedule and replay it with pm_sim_replay, the
 * reference its own slot-order replay must match, so a test can check both
 * choose the same schedule. Not for use while generators run in threads. */
extern int pm_construct_reference;

pm_status pm_block_repeat_peak(const pm_block *b, int m, pm_mem mem, double *peak,
                               pm_err *err);
/* The 1F1B-V block for p devices and m microbatches: the chain block
 * (block_named.c) unless, repeated m times, it peaks above the searched
 * block; m = 0 compares the memory theorem's bounds instead (what
 * pm_block_named gives). */
pm_status pm_block_1f1b_v(pm_block *b, int p, int m, pm_mem mem, pm_err *err);
/* Order of passes in written blocks: device, offset, chunk, kind. */
int pm_block_pass_cmp(const void *a, const void *b);
/* Slots a pass of this kind takes unless the text says otherwise. */
static inline int pm_block_default_dur(int kind) { return kind == PM_PASS_BW ? 2 : 1; }

#endif
