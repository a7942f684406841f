/* gen_interleaved.c: Megatron's interleaved 1F1B (loop placement: v chunks
 * per device, stage s on device s mod p, S = v*p) with fused backward.
 *
 * Each device sees a sequence of m*v "virtual microbatches". The k-th one
 * in forward order is microbatch (k / (p*v)) * p + k % p on the device's
 * chunk (k % (p*v)) / p: microbatches go through the chunks in groups of p.
 * Backward order is the same with the chunks reversed (the last chunk's
 * backward comes first). Rank r warms up with 2(p-r-1) + (v-1)p forwards
 * (capped at m*v), then alternates forward k+warm and backward k, then
 * drains the backwards.
 *
 * Invariant: m % p == 0, so every group holds exactly p microbatches and
 * the index arithmetic above names each (chunk, microbatch) exactly once. */
#include "gen.h"
#include "pipemem/pm_sched.h"
#include "sched.h"

/* Stage and microbatch of the k-th virtual microbatch of rank r, forward
 * (bwd = 0) or backward (bwd = 1) order. */
static void virt(int p, int v, int r, int64_t k, int bwd, int *stage, int *mb) {
    int64_t group = (int64_t)p * v, in = k % group;
    int chunk = (int)(in / p);
    if (bwd) chunk = v - 1 - chunk;
    *stage = chunk * p + r;
    *mb = (int)((k / group) * p + in % p);
}

pm_status pm_sched_build_interleaved(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    *s = (pm_sched){0};
    int p = req->p, m = req->m, v = req->v ? req->v : 2;
    if (v < 2)
        return pm_errf(err, PM_ERR_ARG,
                       "interleaved needs 2 or more chunks per device (got v=%d); with 1 use 1f1b", v);
    if (p >= 1 && m >= 1 && m % p != 0)
        return pm_errf(err, PM_ERR_ARG,
                       "interleaved needs m to be a multiple of p = %d (got m = %d); try m = %d",
                       p, m, (m / p + 1) * p);
    pm_status st = pm_sched_init(s, "interleaved", PM_PLACE_LOOP, p, m, v, err);
    if (st) return st;
    int64_t total = (int64_t)m * v;
    for (int r = 0; r < p; r++) {
        int64_t warm = 2 * (int64_t)(p - r - 1) + (int64_t)(v - 1) * p;
        if (warm > total) warm = total;
        int stage, mb;
        for (int64_t k = 0; k < warm; k++) {
            virt(p, v, r, k, 0, &stage, &mb);
            pm_sched_push(s, r, PM_PASS_F, stage, mb);
        }
        for (int64_t k = 0; k < total - warm; k++) {
            virt(p, v, r, k + warm, 0, &stage, &mb);
            pm_sched_push(s, r, PM_PASS_F, stage, mb);
            virt(p, v, r, k, 1, &stage, &mb);
            pm_sched_push(s, r, PM_PASS_BW, stage, mb);
        }
        for (int64_t k = total - warm; k < total; k++) {
            virt(p, v, r, k, 1, &stage, &mb);
            pm_sched_push(s, r, PM_PASS_BW, stage, mb);
        }
    }
    return PM_OK;
}
