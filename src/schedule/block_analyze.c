/* block_analyze.c: what a block does once repeated: legality (the first
 * two passes of a device on one residue mod T), each stage's lifespan and
 * the memory theorem's bound per device. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"

/* ---- analysis ---------------------------------------------------------- */

void pm_block_info_free(pm_block_info *info) {
    if (!info) return;
    pm_free(info->lifespan);
    pm_free(info->bound);
    *info = (pm_block_info){0};
}

/* First collision: devices in order, each device's passes in offset order,
 * the first residue a later pass finds taken. stamp[r] holds 1 + the pass
 * that took residue r on the current device (reset by device). */
static void find_collision(const pm_block *b, const int *order, int *stamp, int *stamp_dev,
                           pm_block_info *info) {
    info->legal = 1;
    info->bad_dev = info->bad_residue = info->bad_pass[0] = info->bad_pass[1] = -1;
    for (int k = 0; k < b->n; k++) {
        const pm_block_pass *x = &b->pass[order[k]];
        for (int j = 0; j < x->dur; j++) {
            int r = (int)(((int64_t)x->off + j) % b->T);
            if (stamp_dev[r] == x->dev) {
                info->legal = 0;
                info->bad_dev = x->dev;
                info->bad_residue = r;
                info->bad_pass[0] = stamp[r];
                info->bad_pass[1] = order[k];
                return;
            }
            stamp_dev[r] = x->dev;
            stamp[r] = order[k];
        }
    }
}

typedef struct {
    pm_block_pass x; /* copy of the pass */
    int i;           /* its index in the block */
} indexed_pass;

static int cmp_indexed(const void *a, const void *b) {
    const indexed_pass *x = a, *y = b;
    int c = pm_block_pass_cmp(&x->x, &y->x);
    return c ? c : x->i - y->i;
}

/* Pass indices sorted by (device, offset, chunk, kind). */
static int sort_order(const pm_block *b, int *order) {
    indexed_pass *v = pm_malloc((size_t)(b->n ? b->n : 1) * sizeof *v);
    if (!v) return 0;
    for (int i = 0; i < b->n; i++) v[i] = (indexed_pass){b->pass[i], i};
    qsort(v, (size_t)b->n, sizeof *v, cmp_indexed);
    for (int i = 0; i < b->n; i++) order[i] = v[i].i;
    pm_free(v);
    return 1;
}

pm_status pm_block_analyze(const pm_block *b, pm_mem mem, pm_block_info *info, pm_err *err) {
    *info = (pm_block_info){0};
    pm_status st = pm_block_check_lines(b, NULL, 0, err);
    if (st) return st;
    if (!(mem.f > 0))
        return pm_errf(err, PM_ERR_ARG, "the F memory delta must be > 0 (got %g)", mem.f);
    int S = b->p * b->v;
    int *order = pm_malloc((size_t)(b->n ? b->n : 1) * sizeof *order);
    int *stamp = pm_malloc((size_t)b->T * sizeof *stamp);
    int *stamp_dev = pm_malloc((size_t)b->T * sizeof *stamp_dev);
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    info->lifespan = pm_calloc((size_t)S, sizeof *info->lifespan);
    info->bound = pm_calloc((size_t)b->p, sizeof *info->bound);
    if (!order || !stamp || !stamp_dev || !tab || !info->lifespan || !info->bound) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory analysing a block");
        goto done;
    }
    if (!sort_order(b, order)) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory analysing a block");
        goto done;
    }
    for (int r = 0; r < b->T; r++) stamp_dev[r] = -1;
    find_collision(b, order, stamp, stamp_dev, info);
    pm_block_index(b, tab);
    /* Lifespan: start of F to end of the pass that frees the activation;
     * bound: sum of ceil(l/T) microbatches' activations (mem.f / v each)
     * over the device's stages, over M = p * mem.f. */
    for (int d = 0; d < b->p; d++)
        for (int c = 0; c < b->v; c++) {
            int s = pm_block_stage(b, d, c);
            int f = pm_block_tab(tab, s, PM_PASS_F), w = pm_block_tab(tab, s, PM_PASS_W);
            if (w < 0) w = pm_block_tab(tab, s, PM_PASS_BW);
            int l = b->pass[w].off + b->pass[w].dur - b->pass[f].off;
            info->lifespan[d * b->v + c] = l;
            info->bound[d] += (double)((l + b->T - 1) / b->T) / ((double)b->v * b->p);
        }
done:
    pm_free(order);
    pm_free(stamp);
    pm_free(stamp_dev);
    pm_free(tab);
    if (st) pm_block_info_free(info);
    return st;
}
