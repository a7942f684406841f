/* arena.h: a device's activation arena (arena.c), private to the library:
 * the planner sizes it from a dry replay (devmem.h), the runtime allocates
 * each device's from the plan.
 *
 * One slab of `cap` bytes. Blocks start on 64-byte boundaries and occupy
 * their size rounded up to 64; `live` counts requested bytes exactly (what
 * the model's sizes say), `peak` is the largest `live` seen, `high` the
 * largest end offset (slab bytes actually touched: live plus rounding and
 * fragmentation). Blocks are found by offset, kept sorted by offset; at most
 * max_blocks at once; nothing is allocated after init.
 *
 * Placement: first fit over the gaps, or a plan. Because a device's
 * allocation sequence depends only on its pass list, the runtime replays
 * the list on a dry arena (base NULL, which logs every block's size, W-prefix
 * size and the event times of its alloc, shrink and release), then plans the
 * offsets offline (pm_arena_plan: greedy lowest offset over the blocks'
 * lifetimes, several orders, each block notched (prefix and released suffix
 * as two rectangles) or solid) and keeps whichever of plan and first fit
 * needs the smaller slab. A planned alloc takes the
 * next offset of the plan and still checks it against the live blocks and
 * the capacity, so a wrong plan is an error, never corruption. */
#ifndef PM_PLAN_ARENA_H
#define PM_PLAN_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_util.h"

typedef struct {
    size_t off;  /* start, multiple of 64 */
    size_t size; /* requested bytes (live) */
    size_t id;   /* dry arena: index of its life record */
} pm_arena_blk;

/* One block's life on a dry arena (event times count arena calls). */
typedef struct {
    size_t size, size_w;    /* bytes at alloc, after shrink (= size if never shrunk) */
    int64_t t_alloc;        /* alloc event */
    int64_t t_shrink;       /* shrink event (= t_free if never shrunk) */
    int64_t t_free;         /* release event */
} pm_arena_life;

typedef struct {
    unsigned char *base; /* (cap) slab, owned; NULL when dry */
    size_t cap;          /* capacity in bytes */
    pm_arena_blk *blk;   /* (max_blocks) live blocks sorted by offset; owned */
    size_t nblk;         /* live blocks */
    size_t max_blocks;   /* capacity of blk */
    size_t live;         /* requested bytes alive */
    size_t peak;         /* max live since the last pm_arena_begin */
    size_t high;         /* max end offset since init */
    size_t *plan;        /* (nplan) planned offsets in allocation order, or NULL; owned */
    size_t nplan, next;  /* plan length, next planned allocation */
    pm_arena_life *log;  /* dry: (max_log) lives in allocation order; owned */
    size_t nlog, max_log;
    int64_t clock;       /* dry: event counter */
} pm_arena;

#define PM_ARENA_ALIGN 64

pm_status pm_arena_init(pm_arena *a, size_t cap, size_t max_blocks, pm_err *err);
/* A dry arena logging up to max_log allocations. */
pm_status pm_arena_init_dry(pm_arena *a, size_t max_blocks, size_t max_log, pm_err *err);
void pm_arena_free(pm_arena *a);
/* Places `size` bytes (> 0); PM_ERR_MEMLIMIT if nothing fits (first fit),
 * the planned place is taken or past cap (plan), or max_blocks are live.
 * The caller names the pass. Never calls malloc. */
pm_status pm_arena_alloc(pm_arena *a, size_t size, size_t *off);
/* Shrinks the block at off to its prefix of `size` bytes (0 < size <= its size). */
void pm_arena_shrink(pm_arena *a, size_t off, size_t size);
void pm_arena_release(pm_arena *a, size_t off);
static inline void *pm_arena_ptr(const pm_arena *a, size_t off) { return a->base + off; }
/* Starts a step: peak = live, the plan restarts at its first offset. */
void pm_arena_begin(pm_arena *a);
/* Offsets for n logged lives (the best of several greedy placements, each
 * block at the lowest offset free of the blocks alive at the same time);
 * *cap receives the slab size needed. */
pm_status pm_arena_plan(const pm_arena_life *life, size_t n, size_t *off, size_t *cap,
                        pm_err *err);
/* Adopts a plan (copied) for the allocations of every later step. */
pm_status pm_arena_use_plan(pm_arena *a, const size_t *off, size_t n, pm_err *err);

#endif
