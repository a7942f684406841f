/* devmem.h: a device's activation memory, pass by pass (devmem.c), private
 * to the library. Arena bookkeeping of a pass, shared by the planner's dry
 * replay (sizing) and the executor, so both make the same sequence of
 * calls: the executor calls each phase at its point in the pass, the replay
 * calls all four in order, and a phase that does not concern the pass's
 * kind does nothing.
 *   PRE     before the compute: F allocates its layers' saved (recomputed:
 *           first the kept input); a recomputed B or BW allocates the saved
 *           it is about to rebuild;
 *   REDONE  a recomputed B or BW has rebuilt them: the kept input goes;
 *   POST    F recomputed drops its saved (the input stays kept); B and BW
 *           shrink each saved to its W prefix;
 *   WDONE   W and BW release the prefixes.
 * An allocation that does not fit returns PM_ERR_MEMLIMIT with the layer in
 * *bad (-1: the kept input). */
#ifndef PM_PLAN_DEVMEM_H
#define PM_PLAN_DEVMEM_H

#include <stddef.h>

#include "arena.h"
#include "pipemem/pm_plan.h"

typedef enum { PM_MEM_PRE, PM_MEM_REDONE, PM_MEM_POST, PM_MEM_WDONE } pm_mem_phase;

typedef struct {
    pm_arena arena;            /* the device's activations */
    size_t *off;               /* (L+2, m) arena offset of layer l's saved for microbatch j */
    size_t *koff;              /* (S, m) recomputed: offset of stage s's kept input */
    const struct pm_plan *pl;  /* sizes, placement, schedule; borrowed */
} pm_devmem;

/* The offset tables of device d under pl, and an arena: with cap > 0 a
 * real slab of cap bytes following the plan's offsets (pl->arena[d]) when
 * it has them; with cap 0 a dry arena that logs first-fit placements (the
 * planner's). */
pm_status pm_devmem_init(pm_devmem *dm, const struct pm_plan *pl, int d, size_t cap, pm_err *err);
void pm_devmem_free(pm_devmem *dm);
pm_status pm_devmem_pass(pm_devmem *dm, const pm_pass *ps, pm_mem_phase ph, int *bad);
/* Replays device d's whole pass list (every phase of every pass). */
pm_status pm_devmem_replay(pm_devmem *dm, int d);
/* Forward only (evaluation): stage s's saved for one microbatch laid out
 * from offset 0 of an empty arena (they fit: a step holds them all at
 * once after F); offsets in off[.., slot]. */
void pm_devmem_forward_layout(pm_devmem *dm, int s, int slot);
/* Where layer l's saved for microbatch j lives. */
static inline void *pm_devmem_saved(const pm_devmem *dm, int l, int j, int m) {
    return pm_arena_ptr(&dm->arena, dm->off[(size_t)l * (size_t)m + (size_t)j]);
}

#endif
