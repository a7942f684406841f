/* arena.c: the per-device activation arena: first-fit placement over one
 * slab, blocks kept in an array sorted by offset.
 *
 * Invariants:
 *   - blk[0..nblk) are sorted by off, every off is a multiple of 64, and
 *     block i's footprint [off, off + round64(size)) ends at or before
 *     block i+1's off and at or before cap;
 *   - live == sum of blk[].size, peak >= live, high >= every footprint end;
 *   - nothing is allocated after init (blk has max_blocks slots).
 * A dry arena (base NULL, cap SIZE_MAX/2) runs the same placement and only
 * records where blocks would go: replaying a pass list on it gives the
 * capacity the real arena needs (its `high`). */
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_runtime.h"

static size_t round_up(size_t n) { return (n + PM_ARENA_ALIGN - 1) / PM_ARENA_ALIGN * PM_ARENA_ALIGN; }

static pm_status arena_blocks(pm_arena *a, size_t max_blocks, pm_err *err) {
    a->max_blocks = max_blocks ? max_blocks : 1;
    a->blk = malloc(a->max_blocks * sizeof *a->blk);
    if (!a->blk)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu arena blocks", a->max_blocks);
    return PM_OK;
}

pm_status pm_arena_init(pm_arena *a, size_t cap, size_t max_blocks, pm_err *err) {
    *a = (pm_arena){0};
    pm_status st = arena_blocks(a, max_blocks, err);
    if (st) return st;
    a->cap = round_up(cap);
    if (a->cap) {
        a->base = aligned_alloc(PM_ARENA_ALIGN, a->cap);
        if (!a->base) {
            pm_arena_free(a);
            return pm_errf(err, PM_ERR_NOMEM, "out of memory allocating a %.1f MiB activation arena",
                           (double)cap / (1 << 20));
        }
    }
    return PM_OK;
}

pm_status pm_arena_init_dry(pm_arena *a, size_t max_blocks, pm_err *err) {
    *a = (pm_arena){0};
    pm_status st = arena_blocks(a, max_blocks, err);
    a->cap = SIZE_MAX / 2;
    return st;
}

void pm_arena_free(pm_arena *a) {
    if (!a) return;
    free(a->base);
    free(a->blk);
    *a = (pm_arena){0};
}

pm_status pm_arena_alloc(pm_arena *a, size_t size, size_t *off) {
    PM_ASSERT(size > 0);
    if (a->nblk == a->max_blocks) return PM_ERR_MEMLIMIT;
    size_t need = round_up(size), at = 0, i = 0;
    /* first gap, in offset order, that holds the footprint */
    for (; i < a->nblk; i++) {
        if (a->blk[i].off >= at + need) break;
        at = a->blk[i].off + round_up(a->blk[i].size);
    }
    if (at > a->cap || a->cap - at < need) return PM_ERR_MEMLIMIT;
    memmove(a->blk + i + 1, a->blk + i, (a->nblk - i) * sizeof *a->blk);
    a->blk[i] = (pm_arena_blk){at, size};
    a->nblk++;
    a->live += size;
    if (a->live > a->peak) a->peak = a->live;
    if (at + need > a->high) a->high = at + need;
    *off = at;
    return PM_OK;
}

static size_t find(const pm_arena *a, size_t off) {
    size_t lo = 0, hi = a->nblk;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->blk[mid].off < off) lo = mid + 1;
        else hi = mid;
    }
    PM_ASSERT(lo < a->nblk && a->blk[lo].off == off);
    return lo;
}

void pm_arena_shrink(pm_arena *a, size_t off, size_t size) {
    pm_arena_blk *b = &a->blk[find(a, off)];
    PM_ASSERT(size <= b->size);
    a->live -= b->size - size;
    b->size = size;
}

void pm_arena_release(pm_arena *a, size_t off) {
    size_t i = find(a, off);
    a->live -= a->blk[i].size;
    memmove(a->blk + i, a->blk + i + 1, (a->nblk - i - 1) * sizeof *a->blk);
    a->nblk--;
}

void pm_arena_reset_peak(pm_arena *a) { a->peak = a->live; }
