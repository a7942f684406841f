/* arena.c: the per-device activation arena: blocks kept in an array sorted
 * by offset, placed by first fit or by a plan made offline from a dry run.
 *
 * Invariants:
 *   - blk[0..nblk) are sorted by off, every off is a multiple of 64, and
 *     block i's footprint [off, off + round64(size)) ends at or before
 *     block i+1's off and at or before cap;
 *   - live == sum of blk[].size, peak >= live, high >= every footprint end;
 *   - nothing is allocated after init (blk has max_blocks slots, the plan
 *     and the log are sized at init).
 * Dry arena: base NULL, cap SIZE_MAX/2; first fit as usual, and every block
 * has a life record (log[id]) whose event times are set by alloc, shrink and
 * release.
 *
 * Planner (pm_arena_plan): blocks in decreasing order of a key (footprint,
 * footprint x lifetime, lifetime; ties by allocation order); each goes to
 * the lowest 64-aligned offset where none of its rectangles meets a
 * rectangle of a block already placed. A block is either notched (W prefix
 * over [alloc, release), released suffix over [alloc, shrink)) or solid (its
 * whole footprint until release). All six variants are tried and the
 * smallest slab kept. The
 * lowest offset is found by sweeping the forbidden offset intervals sorted
 * by their start. */
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_plan.h"
#include "util/alloc.h"
#include "arena.h"

_Static_assert(PM_ARENA_ALIGN <= 64, "pm_alloc_big aligns to 64 bytes");

static size_t round_up(size_t n) { return (n + PM_ARENA_ALIGN - 1) / PM_ARENA_ALIGN * PM_ARENA_ALIGN; }

static pm_status arena_blocks(pm_arena *a, size_t max_blocks, pm_err *err) {
    a->max_blocks = max_blocks ? max_blocks : 1;
    a->blk = pm_malloc(a->max_blocks * sizeof *a->blk);
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
        a->base = pm_alloc_big(a->cap); /* 64-byte aligned at least */
        if (!a->base) {
            pm_arena_free(a);
            return pm_errf(err, PM_ERR_NOMEM, "out of memory allocating a %.1f MiB activation arena",
                           (double)cap / (1 << 20));
        }
    }
    return PM_OK;
}

pm_status pm_arena_init_dry(pm_arena *a, size_t max_blocks, size_t max_log, pm_err *err) {
    *a = (pm_arena){0};
    pm_status st = arena_blocks(a, max_blocks, err);
    if (st) return st;
    a->cap = SIZE_MAX / 2;
    a->max_log = max_log ? max_log : 1;
    a->log = pm_malloc(a->max_log * sizeof *a->log);
    if (!a->log) {
        pm_arena_free(a);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for the arena log");
    }
    return PM_OK;
}

void pm_arena_free(pm_arena *a) {
    if (!a) return;
    pm_free(a->base);
    pm_free(a->blk);
    pm_free(a->plan);
    pm_free(a->log);
    *a = (pm_arena){0};
}

/* Index where a block at `at` goes (first block with off >= at). */
static size_t lower(const pm_arena *a, size_t at) {
    size_t lo = 0, hi = a->nblk;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a->blk[mid].off < at) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* First fit: the first gap, in offset order, that holds `need` bytes. */
static int first_fit(const pm_arena *a, size_t need, size_t *at, size_t *idx) {
    size_t i = 0, x = 0;
    for (; i < a->nblk; i++) {
        if (a->blk[i].off >= x + need) break;
        x = a->blk[i].off + round_up(a->blk[i].size);
    }
    if (x > a->cap || a->cap - x < need) return 0;
    *at = x, *idx = i;
    return 1;
}

/* The planned place, if free and inside the slab. */
static int planned(const pm_arena *a, size_t need, size_t *at, size_t *idx) {
    if (a->next >= a->nplan) return 0;
    size_t x = a->plan[a->next], i = lower(a, x);
    if (x > a->cap || a->cap - x < need) return 0;
    if (i < a->nblk && a->blk[i].off < x + need) return 0;
    if (i > 0 && a->blk[i - 1].off + round_up(a->blk[i - 1].size) > x) return 0;
    *at = x, *idx = i;
    return 1;
}

pm_status pm_arena_alloc(pm_arena *a, size_t size, size_t *off) {
    PM_ASSERT(size > 0);
    size_t need = round_up(size), at, i;
    if (a->nblk == a->max_blocks) return PM_ERR_MEMLIMIT;
    if (!(a->plan ? planned(a, need, &at, &i) : first_fit(a, need, &at, &i))) return PM_ERR_MEMLIMIT;
    if (a->plan) a->next++;
    size_t id = 0;
    if (a->log) {
        if (a->nlog == a->max_log) return PM_ERR_MEMLIMIT;
        id = a->nlog++;
        a->log[id] = (pm_arena_life){size, size, a->clock, -1, -1};
        a->clock++;
    }
    memmove(a->blk + i + 1, a->blk + i, (a->nblk - i) * sizeof *a->blk);
    a->blk[i] = (pm_arena_blk){at, size, id};
    a->nblk++;
    a->live += size;
    if (a->live > a->peak) a->peak = a->live;
    if (at + need > a->high) a->high = at + need;
    *off = at;
    return PM_OK;
}

static size_t find(const pm_arena *a, size_t off) {
    size_t i = lower(a, off);
    PM_ASSERT(i < a->nblk && a->blk[i].off == off);
    return i;
}

void pm_arena_shrink(pm_arena *a, size_t off, size_t size) {
    pm_arena_blk *b = &a->blk[find(a, off)];
    PM_ASSERT(size > 0 && size <= b->size);
    a->live -= b->size - size;
    b->size = size;
    if (a->log) {
        a->log[b->id].size_w = size;
        a->log[b->id].t_shrink = a->clock++;
    }
}

void pm_arena_release(pm_arena *a, size_t off) {
    size_t i = find(a, off);
    a->live -= a->blk[i].size;
    if (a->log) {
        pm_arena_life *l = &a->log[a->blk[i].id];
        l->t_free = a->clock++;
        if (l->t_shrink < 0) l->t_shrink = l->t_free;
    }
    memmove(a->blk + i, a->blk + i + 1, (a->nblk - i - 1) * sizeof *a->blk);
    a->nblk--;
}

void pm_arena_begin(pm_arena *a) {
    a->peak = a->live;
    a->next = 0;
}

pm_status pm_arena_use_plan(pm_arena *a, const size_t *off, size_t n, pm_err *err) {
    pm_free(a->plan);
    a->plan = pm_malloc((n ? n : 1) * sizeof *a->plan);
    if (!a->plan) return pm_errf(err, PM_ERR_NOMEM, "out of memory for an arena plan");
    memcpy(a->plan, off, n * sizeof *off);
    a->nplan = n, a->next = 0;
    return PM_OK;
}

/* ---- offline planner ------------------------------------------------------------ */

typedef struct {
    size_t lo, hi;  /* offsets relative to the block start */
    int64_t t0, t1; /* [t0, t1) */
} rect;

typedef struct {
    int64_t lo, hi; /* a forbidden open interval (lo, hi) of block offsets; lo may be < 0 */
} band;

/* notched: the W prefix over [alloc, free) and the suffix over [alloc,
 * shrink); solid: the whole footprint over [alloc, free), which wastes the
 * suffix after B but keeps equal blocks on equal slots (a suffix hole is
 * too small for anything but a neighbour's overflow, which misaligns every
 * later block). */
static int rects_of(const pm_arena_life *l, int solid, rect r[2]) {
    size_t w = round_up(l->size_w), f = round_up(l->size);
    int n = 0;
    if (solid) w = f;
    r[n++] = (rect){0, w, l->t_alloc, l->t_free};
    if (f > w && l->t_shrink > l->t_alloc) r[n++] = (rect){w, f, l->t_alloc, l->t_shrink};
    return n;
}

/* Orders tried by the planner (the best result is kept). */
typedef enum { ORDER_SIZE, ORDER_AREA, ORDER_LONGEST, ORDER_COUNT } plan_order;

static const pm_arena_life *g_life; /* qsort has no context argument */
static plan_order g_order;

static double key_of(const pm_arena_life *l) {
    double full = (double)round_up(l->size), w = (double)round_up(l->size_w);
    double span = (double)(l->t_free - l->t_alloc), head = (double)(l->t_shrink - l->t_alloc);
    switch (g_order) {
    case ORDER_SIZE: return full;
    case ORDER_AREA: return w * span + (full - w) * head;
    default: return span;
    }
}

static int by_key(const void *x, const void *y) {
    size_t i = *(const size_t *)x, j = *(const size_t *)y;
    double a = key_of(&g_life[i]), b = key_of(&g_life[j]);
    if (a != b) return a > b ? -1 : 1;
    return (i > j) - (i < j);
}
static int by_lo(const void *x, const void *y) {
    const band *a = x, *b = y;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* One greedy placement in the given order; returns the slab size. */
static size_t plan_once(const pm_arena_life *life, size_t n, int solid, size_t *order,
                        band *bd, size_t *off) {
    size_t cap = 0;
    for (size_t k = 0; k < n; k++) {
        size_t y = order[k], nb = 0;
        rect ry[2], rx[2];
        int ny = rects_of(&life[y], solid, ry);
        for (size_t q = 0; q < k; q++) {
            size_t x = order[q];
            int nx = rects_of(&life[x], solid, rx);
            for (int i = 0; i < nx; i++)
                for (int j = 0; j < ny; j++)
                    if (rx[i].t0 < ry[j].t1 && ry[j].t0 < rx[i].t1) {
                        /* o + ry.lo < off_x + rx.hi and o + ry.hi > off_x + rx.lo */
                        int64_t hi = (int64_t)(off[x] + rx[i].hi) - (int64_t)ry[j].lo;
                        int64_t lo = (int64_t)(off[x] + rx[i].lo) - (int64_t)ry[j].hi;
                        if (hi > 0) bd[nb++] = (band){lo, hi}; /* else it forbids no o >= 0 */
                    }
        }
        qsort(bd, nb, sizeof *bd, by_lo);
        int64_t o = 0; /* free of every band iff o <= lo or o >= hi */
        for (size_t i = 0; i < nb && o > bd[i].lo; i++)
            if (o < bd[i].hi) o = bd[i].hi;
        off[y] = (size_t)o;
        size_t end = (size_t)o + round_up(life[y].size);
        if (end > cap) cap = end;
    }
    return cap;
}

pm_status pm_arena_plan(const pm_arena_life *life, size_t n, size_t *off, size_t *cap,
                        pm_err *err) {
    size_t *order = pm_malloc((n ? n : 1) * sizeof *order);
    size_t *tmp = pm_malloc((n ? n : 1) * sizeof *tmp);
    band *bd = pm_malloc((n ? 4 * n : 1) * sizeof *bd);
    pm_status st = PM_OK;
    if (!order || !tmp || !bd) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory planning %zu arena blocks", n);
        goto done;
    }
    *cap = SIZE_MAX;
    g_life = life;
    for (int k = 0; k < 2 * ORDER_COUNT; k++) {
        for (size_t i = 0; i < n; i++) order[i] = i;
        g_order = (plan_order)(k % ORDER_COUNT);
        qsort(order, n, sizeof *order, by_key);
        size_t c = plan_once(life, n, k >= ORDER_COUNT, order, bd, tmp);
        if (c < *cap) {
            *cap = c;
            memcpy(off, tmp, n * sizeof *off);
        }
    }
    if (!n) *cap = 0;
done:
    pm_free(order);
    pm_free(tmp);
    pm_free(bd);
    return st;
}
