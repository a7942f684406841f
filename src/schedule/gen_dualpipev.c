/* gen_dualpipev.c: DualPipeV, DeepSeek's V-shaped ("cut in half") DualPipe,
 * as its reference (deepseek-ai/DualPipe, dualpipev.py) and PyTorch's
 * ScheduleDualPipeV order the passes. V placement: device r holds stage r
 * ("chunk 0") and stage 2p-1-r ("chunk 1"); m >= 2p, as both require.
 *
 * Both write a device's work as phases of F, B (input gradient, PyTorch's
 * I), W and full backwards (fused BW, PyTorch's B), plus overlapped pairs
 * "F of one chunk with BW of the other" meant to run concurrently and hide
 * MoE all-to-all communication. pipemem runs one pass at a time, so a pair
 * is its two passes, F first: the order PyTorch's runtime runs an
 * OVERLAP_F_B action's sub-actions in. Rank r, with q = p - r - 1:
 *
 *   1  2q x F0
 *   2  r+1 x (F0, F1)
 *   3  q x (B1, W, F1)                  zero bubble: W right after its B
 *   4  m-2p+r+1 x (F0, BW1, F1, BW0)    two overlapped pairs
 *   5  q x (BW1, F1, BW0)               BW1 alone, then a pair
 *   6  r+1 x (X1, X0)                   X is BW until half way, then B
 *   7  q x (W, B0)
 *   8  r+1 x W
 *
 * The pairs are marked (pm_sched.pair), as both implementations mark them,
 * but for phase 4's first (F0, BW1) on the last device, which they run
 * apart "to further reduce bubble size": its F0 feeds the device's own F1
 * and need not wait for BW1's gradient. Costs with fb_overlap run a marked
 * pair as one (sim.c); otherwise they are plain passes.
 *
 * In phase 6, iteration h = (r+1)/2 (integer division) switches to B: at
 * its X1 when r is odd, at its X0 when r is even. A W always takes the
 * oldest B on the device that has no W yet (both implementations queue the
 * B's weight work first in, first out); a BW needs no W. Every kind of pass
 * of a chunk runs its microbatches in increasing order, so a counter per
 * chunk and kind names them.
 *
 * Counting per device: F0 2q + (r+1) + (m-2p+r+1) = m; F1 and the
 * backwards of each chunk also m; phase 6 leaves r+1 B's without W, phase
 * 7 takes one and adds one q times, phase 8 takes the r+1. Memory (F +1,
 * B 0, W and BW -1 per chunk activation): phases 1-2 leave 2p chunk
 * activations alive, phase 3 keeps it at 2p, and phase 4's first F0 raises
 * it to 2p+1 on every device, the peak: (2p+1)/(2p) M, above ZB-V's M. */
#include "gen.h"
#include "pipemem/pm_sched.h"
#include "sched.h"

typedef struct {
    pm_sched *s;
    int r;           /* device */
    int f[2], b[2];  /* next microbatch of F and of the backward (B or BW), per chunk */
    int64_t wnext;   /* first pass of the device's list a W may still pair with */
} dpv_dev;

static int dpv_stage(const dpv_dev *d, int chunk) {
    return chunk == 0 ? d->r : 2 * d->s->p - 1 - d->r;
}

static void dpv_f(dpv_dev *d, int chunk) {
    pm_sched_push(d->s, d->r, PM_PASS_F, dpv_stage(d, chunk), d->f[chunk]++);
}

/* The backward of the chunk's next microbatch: split (B, its W later) or
 * fused (BW). */
static void dpv_b(dpv_dev *d, int chunk, int split) {
    pm_sched_push(d->s, d->r, split ? PM_PASS_B : PM_PASS_BW, dpv_stage(d, chunk),
                  d->b[chunk]++);
}

/* W of the oldest B on the device still without one: the B's are scanned
 * in list order once, so a device's W's cost O(its passes) in all. */
static void dpv_w(dpv_dev *d) {
    const pm_pass *ps = pm_sched_dev(d->s, d->r);
    int64_t n = d->s->len[d->r];
    while (d->wnext < n && ps[d->wnext].kind != PM_PASS_B) d->wnext++;
    PM_ASSERT(d->wnext < n); /* the counting above: a B is always pending */
    const pm_pass *b = &ps[d->wnext++];
    pm_sched_push(d->s, d->r, PM_PASS_W, b->stage, b->mb);
}

/* F of chunk fc and BW of the other chunk; an overlapped pair if pair. */
static void dpv_fb(dpv_dev *d, int fc, int pair) {
    if (pair) d->s->pair[(int64_t)d->r * d->s->cap + d->s->len[d->r]] = 1;
    dpv_f(d, fc);
    dpv_b(d, 1 - fc, 0);
}

static void dpv_rank(pm_sched *s, int r) {
    int p = s->p, m = s->m, q = p - r - 1;
    dpv_dev d = {.s = s, .r = r};
    for (int i = 0; i < 2 * q; i++) dpv_f(&d, 0);
    for (int i = 0; i <= r; i++) dpv_f(&d, 0), dpv_f(&d, 1);
    for (int i = 0; i < q; i++) dpv_b(&d, 1, 1), dpv_w(&d), dpv_f(&d, 1);
    for (int i = 0; i < m - 2 * p + r + 1; i++) dpv_fb(&d, 0, i > 0 || q > 0), dpv_fb(&d, 1, 1);
    for (int i = 0; i < q; i++) dpv_b(&d, 1, 0), dpv_fb(&d, 1, 1);
    int h = (r + 1) / 2, odd = r % 2;
    for (int i = 0; i <= r; i++) {
        dpv_b(&d, 1, i > h || (i == h && odd));
        dpv_b(&d, 0, i >= h);
    }
    for (int i = 0; i < q; i++) dpv_w(&d), dpv_b(&d, 0, 1);
    for (int i = 0; i <= r; i++) dpv_w(&d);
    PM_ASSERT(d.f[0] == m && d.f[1] == m && d.b[0] == m && d.b[1] == m);
}

pm_status pm_sched_build_dualpipev(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 2)
        return pm_errf(err, PM_ERR_ARG,
                       "dualpipev has 2 chunks per device (V placement); v=%d only fits "
                       "interleaved", req->v);
    if (req->p < 1 || req->m < 2 * req->p)
        return pm_errf(err, PM_ERR_ARG, "dualpipev needs p >= 1 and m >= 2p (got p=%d, m=%d)",
                       req->p, req->m);
    pm_status st = pm_sched_init(s, "dualpipev", PM_PLACE_V, req->p, req->m, 2, err);
    if (!st) st = pm_sched_pairs_init(s, err);
    if (st) {
        pm_sched_free(s);
        return st;
    }
    for (int r = 0; r < s->p; r++) dpv_rank(s, r);
    return PM_OK;
}
