/* query.c: what a made plan answers (pm_plan.h): a stage's floats and
 * where they start, a replica's ZeRO-1 slice, what a recomputed stage
 * keeps, the largest peak, and bytes for people. Below the planner and the
 * allocation sequence (devmem.c), which both ask. */
#include <stdio.h>

#include "pipemem/pm_plan.h"
#include "model/passes.h"
#include "query.h"

size_t pm_plan_stage_offset(const pm_plan *pl, int s) {
    return pm_gpt_layer_offset(&pl->cfg.model, pl->first[s]);
}

size_t pm_plan_stage_floats(const pm_plan *pl, int s) {
    const pm_gpt_config *c = &pl->cfg.model;
    int b = pl->first[s + 1];
    size_t end = b < pm_gpt_num_layers(c) ? pm_gpt_layer_offset(c, b) : pm_gpt_num_params(c);
    return end - pm_plan_stage_offset(pl, s);
}

void pm_plan_moment_slice(const pm_plan *pl, int s, int r, size_t *first, size_t *count) {
    size_t n = pm_plan_stage_floats(pl, s), D = (size_t)pl->dp;
    if (!pl->zero) {
        *first = 0, *count = n;
        return;
    }
    *first = n * (size_t)r / D;
    *count = n * (size_t)(r + 1) / D - *first;
}

size_t pm_plan_keep_bytes(const pm_plan *pl, int s) {
    return pl->sched.recompute && s > 0 ? pl->sz[pl->first[s]].in : 0;
}

double pm_plan_peak_x(const pm_plan *pl, int *dev) {
    double peak = 0;
    int at = 0;
    for (int d = 0; d < pl->p; d++)
        if (pl->sim.peak[d] > peak) peak = pl->sim.peak[d], at = d;
    if (dev) *dev = at;
    return pl->M > 0 ? peak / pl->M : 0;
}

/* ---- what a device's runtime allocates (plan.c counts the same) -------------- */

size_t pm_plan_scratch_bytes(const pm_plan *pl, int d) {
    size_t scr = 0;
    for (int s = 0; s < pl->S; s++) {
        if (pm_sched_stage_device(&pl->sched, s) != d) continue;
        for (int l = pl->first[s]; l < pl->first[s + 1]; l++) {
            const pm_gpt_sizes *z = &pl->sz[l];
            size_t need[3] = {z->scratch_f, z->scratch_b, z->scratch_w};
            for (int k = 0; k < 3; k++) scr = need[k] > scr ? need[k] : scr;
        }
    }
    return scr;
}

size_t pm_plan_red_floats(const pm_plan *pl) {
    size_t most = 1;
    for (int s = 0; s < pl->S; s++)
        if (pm_plan_stage_floats(pl, s) > most) most = pm_plan_stage_floats(pl, s);
    return most < PM_PLAN_CHUNK ? most : PM_PLAN_CHUNK;
}

size_t pm_plan_msg_buffer(const pm_plan *pl) { return pl->msg_bytes > 64 ? pl->msg_bytes : 64; }

int64_t pm_plan_mailbox_buffers(const pm_plan *pl, int d) {
    return pl->sched.len[d] + pl->S + pl->p + 2;
}

int64_t pm_plan_send_buffers(const pm_plan *pl) {
    int64_t maxlen = 0;
    for (int k = 0; k < pl->p; k++) maxlen = pl->sched.len[k] > maxlen ? pl->sched.len[k] : maxlen;
    return maxlen + 4 * (int64_t)pl->S + pl->p + 8;
}
