/* loader.h: the batch loader as the trainers draw from it (loader.c),
 * private to the library; pm_data.h has the loader and its positions. */
#ifndef PM_DATA_LOADER_H
#define PM_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_data.h"

/* SplitMix64: one step of a counter-based generator (deterministic, tiny). */
uint64_t pm_splitmix64(uint64_t x);
/* Fills inputs (B, T) and targets (B, T) with the next B windows. */
void pm_loader_next(pm_loader *ld, int B, int32_t *inputs, int32_t *targets);
/* Offset of window i. */
size_t pm_loader_pos(const pm_loader *ld, uint64_t i);

#endif
