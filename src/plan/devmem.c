/* devmem.c: a device's activation memory, pass by pass: which of its
 * layers' saved buffers (and recomputed stages' kept inputs) each phase of a
 * pass allocates, shrinks and releases. The planner replays a device's
 * whole pass list on a dry arena to size it and to plan its offsets; the
 * executor makes the same calls at the same points of the real passes, so
 * the real arena sees exactly the sequence that was planned.
 *
 * Invariants: off[l][j] is valid from the PRE of (l's stage, j)'s F (or
 * recomputed B) until its WDONE; koff[s][j] from F's PRE until the
 * recomputed B's REDONE. The calls never allocate (the arena was sized at
 * init). */
#include <string.h>

#include "pipemem/pm_plan.h"
#include "arena.h"
#include "devmem.h"
#include "query.h"

static size_t *off_at(pm_devmem *dm, int l, int j) {
    return &dm->off[(size_t)l * (size_t)dm->pl->m + (size_t)j];
}

static size_t *keep_at(pm_devmem *dm, int s, int j) {
    return &dm->koff[(size_t)s * (size_t)dm->pl->m + (size_t)j];
}

/* Blocks alive at once at most on device d (every saved of every
 * microbatch of its stages, and their kept inputs), and the allocations of
 * one step (twice the saved when recomputed: F and B each allocate them). */
static void counts(const pm_plan *pl, int d, size_t *max_blocks, size_t *allocs) {
    size_t saved = 0, keep = 0;
    for (int s = 0; s < pl->S; s++) {
        if (pm_sched_stage_device(&pl->sched, s) != d) continue;
        saved += (size_t)(pl->first[s + 1] - pl->first[s]) * (size_t)pl->m;
        keep += pm_plan_keep_bytes(pl, s) ? (size_t)pl->m : 0;
    }
    *max_blocks = saved + keep;
    *allocs = saved * (pl->sched.recompute ? 2 : 1) + keep;
}

pm_status pm_devmem_init(pm_devmem *dm, const pm_plan *pl, int d, size_t cap, pm_err *err) {
    *dm = (pm_devmem){.pl = pl};
    size_t nl = (size_t)pm_gpt_num_layers(&pl->cfg.model), maxb, allocs;
    counts(pl, d, &maxb, &allocs);
    dm->off = pm_calloc(nl * (size_t)pl->m, sizeof *dm->off);
    dm->koff = pm_calloc((size_t)pl->S * (size_t)pl->m, sizeof *dm->koff);
    if (!dm->off || !dm->koff) {
        pm_devmem_free(dm);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for device %d's arena offsets", d);
    }
    const pm_plan_arena *pa = pl->arena ? &pl->arena[d] : NULL;
    pm_status st = cap ? pm_arena_init(&dm->arena, cap, maxb, err)
                       : pm_arena_init_dry(&dm->arena, maxb, allocs, err);
    if (!st && cap && pa && pa->off) st = pm_arena_use_plan(&dm->arena, pa->off, pa->n, err);
    if (st) pm_devmem_free(dm);
    return st;
}

void pm_devmem_free(pm_devmem *dm) {
    if (!dm) return;
    pm_arena_free(&dm->arena);
    pm_free(dm->off);
    pm_free(dm->koff);
    *dm = (pm_devmem){0};
}

static pm_status alloc_saved(pm_devmem *dm, int s, int j, int *bad) {
    const pm_plan *pl = dm->pl;
    for (int l = pl->first[s]; l < pl->first[s + 1]; l++)
        if (pm_arena_alloc(&dm->arena, pl->sz[l].saved, off_at(dm, l, j))) {
            *bad = l;
            return PM_ERR_MEMLIMIT;
        }
    return PM_OK;
}

/* keep_w: shrink each saved to its W prefix (B); else release it whole. */
static void release_saved(pm_devmem *dm, int s, int j, int keep_w) {
    const pm_plan *pl = dm->pl;
    for (int l = pl->first[s]; l < pl->first[s + 1]; l++) {
        size_t o = *off_at(dm, l, j);
        if (keep_w && pl->sz[l].saved_w) pm_arena_shrink(&dm->arena, o, pl->sz[l].saved_w);
        else pm_arena_release(&dm->arena, o);
    }
}

static void release_w(pm_devmem *dm, int s, int j) {
    const pm_plan *pl = dm->pl;
    for (int l = pl->first[s]; l < pl->first[s + 1]; l++)
        if (pl->sz[l].saved_w) pm_arena_release(&dm->arena, *off_at(dm, l, j));
}

pm_status pm_devmem_pass(pm_devmem *dm, const pm_pass *ps, pm_mem_phase ph, int *bad) {
    int s = ps->stage, j = ps->mb, rec = dm->pl->sched.recompute;
    int k = ps->kind, back = k == PM_PASS_B || k == PM_PASS_BW;
    size_t keep = pm_plan_keep_bytes(dm->pl, s);
    switch (ph) {
    case PM_MEM_PRE:
        if (k == PM_PASS_F && keep && pm_arena_alloc(&dm->arena, keep, keep_at(dm, s, j))) {
            *bad = -1;
            return PM_ERR_MEMLIMIT;
        }
        return k == PM_PASS_F || (back && rec) ? alloc_saved(dm, s, j, bad) : PM_OK;
    case PM_MEM_REDONE:
        if (back && keep) pm_arena_release(&dm->arena, *keep_at(dm, s, j));
        return PM_OK;
    case PM_MEM_POST:
        if (k == PM_PASS_F && rec) release_saved(dm, s, j, 0);
        if (back) release_saved(dm, s, j, 1);
        return PM_OK;
    default:
        if (k == PM_PASS_W || k == PM_PASS_BW) release_w(dm, s, j);
        return PM_OK;
    }
}

pm_status pm_devmem_replay(pm_devmem *dm, int d) {
    const pm_sched *sc = &dm->pl->sched;
    const pm_pass *ps = pm_sched_dev(sc, d);
    for (int64_t i = 0; i < sc->len[d]; i++) {
        int bad;
        for (int ph = PM_MEM_PRE; ph <= PM_MEM_WDONE; ph++)
            if (pm_devmem_pass(dm, &ps[i], (pm_mem_phase)ph, &bad)) return PM_ERR_MEMLIMIT;
    }
    return PM_OK;
}

void pm_devmem_forward_layout(pm_devmem *dm, int s, int slot) {
    const pm_plan *pl = dm->pl;
    size_t at = 0;
    for (int l = pl->first[s]; l < pl->first[s + 1]; l++) {
        *off_at(dm, l, slot) = at;
        at += (pl->sz[l].saved + PM_ARENA_ALIGN - 1) / PM_ARENA_ALIGN * PM_ARENA_ALIGN;
    }
    PM_ASSERT(dm->arena.live == 0 && at <= dm->arena.cap);
}
