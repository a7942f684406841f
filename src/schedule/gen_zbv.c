/* gen_zbv.c: ZB-V, the fixed zero-bubble pattern on the V placement (S = 2p;
 * device r holds stage r, "chunk 0", and stage 2p-1-r, "chunk 1").
 *
 * Rank r's list, for n = max(2p-1, m) microbatches (the pattern needs at
 * least 2p-1 to fill rank 0's warm-up; passes of microbatches >= m are then
 * dropped, which keeps the schedule deadlock-free because a pass only ever
 * waits on passes of its own microbatch):
 *   warm-up   2(p-r)-1 x F0;  r x (F1, F0);  p-r x (F1, B1, W1)
 *   steady    while F1 lags F0 or F0 remain: F0 (if any remain), B0, W0, F1, B1, W1
 *   cool-down r x (B0, B1), their W held back;  p-r x (B0, W0);
 *             the held W1, then the held W0.
 * Every pass kind of a chunk runs its microbatches in increasing order. At
 * most 2p chunk activations are ever live on a device (2(p-r)-1 + 2r + 1),
 * i.e. M, and at equal costs every device is busy from its first pass to
 * its last once m >= 2p. */
#include "gen.h"
#include "pipemem/pm_sched.h"
#include "sched.h"
#include "work.h"

typedef struct {
    pm_sched *s;
    int r;           /* device */
    int f[2], b[2];  /* next microbatch of F and B per chunk */
    int64_t emits;   /* passes emitted or dropped (pm_sched_work) */
} zbv_dev;

static int chunk_stage(const zbv_dev *d, int chunk) {
    return chunk == 0 ? d->r : 2 * d->s->p - 1 - d->r;
}

static void emit(zbv_dev *d, pm_pass_kind kind, int chunk, int mb) {
    d->emits++;
    if (mb < d->s->m) pm_sched_push(d->s, d->r, kind, chunk_stage(d, chunk), mb);
}

static void fwd(zbv_dev *d, int chunk) { emit(d, PM_PASS_F, chunk, d->f[chunk]++); }
/* B of the next microbatch, returning it so its W can follow now or later. */
static int bwd(zbv_dev *d, int chunk) {
    int mb = d->b[chunk]++;
    emit(d, PM_PASS_B, chunk, mb);
    return mb;
}
static void wgt(zbv_dev *d, int chunk, int mb) { emit(d, PM_PASS_W, chunk, mb); }

/* Of `count` iterations that each step counters starting at `lowest` (the
 * smallest of them) by one, how many can still emit a pass: the rest only
 * step the counters, which the caller does at once. This keeps a rank's
 * work O(m) when m < 2p - 1 (it was O(p) per rank, O(p^2) in all). */
static int live(const zbv_dev *d, int count, int lowest) {
    int k = d->s->m - lowest;
    return k < 0 ? 0 : k < count ? k : count;
}

static int min2(int a, int b) { return a < b ? a : b; }

static void build_rank(pm_sched *s, int r, int n) {
    int p = s->p, k;
    zbv_dev d = {.s = s, .r = r};
    k = live(&d, 2 * (p - r) - 1, d.f[0]);
    for (int i = 0; i < k; i++) fwd(&d, 0);
    d.f[0] += 2 * (p - r) - 1 - k;
    k = live(&d, r, min2(d.f[0], d.f[1]));
    for (int i = 0; i < k; i++) {
        fwd(&d, 1);
        fwd(&d, 0);
    }
    d.f[0] += r - k, d.f[1] += r - k;
    k = live(&d, p - r, min2(d.f[1], d.b[1]));
    for (int i = 0; i < k; i++) {
        fwd(&d, 1);
        wgt(&d, 1, bwd(&d, 1));
    }
    d.f[1] += p - r - k, d.b[1] += p - r - k;
    /* f[1] <= f[0] <= n here; each steady round steps f[1], b[0], b[1]
     * (and f[0] until n), so it ends after n - f[1] rounds */
    while (d.f[1] < d.f[0] || d.f[0] < n) {
        if (min2(min2(d.f[0], d.f[1]), min2(d.b[0], d.b[1])) >= s->m) {
            k = n - d.f[1];
            d.f[0] = d.f[1] = n, d.b[0] += k, d.b[1] += k;
            break;
        }
        if (d.f[0] < n) fwd(&d, 0);
        wgt(&d, 0, bwd(&d, 0));
        fwd(&d, 1);
        wgt(&d, 1, bwd(&d, 1));
    }
    /* The r held (B0, B1) pairs are the next r microbatches of each chunk. */
    int held0 = d.b[0], held1 = d.b[1];
    k = live(&d, r, min2(d.b[0], d.b[1]));
    for (int i = 0; i < k; i++) {
        bwd(&d, 0);
        bwd(&d, 1);
    }
    d.b[0] += r - k, d.b[1] += r - k;
    k = live(&d, p - r, d.b[0]);
    for (int i = 0; i < k; i++) wgt(&d, 0, bwd(&d, 0));
    d.b[0] += p - r - k;
    k = live(&d, r, held1);
    for (int i = 0; i < k; i++) wgt(&d, 1, held1 + i);
    k = live(&d, r, held0);
    for (int i = 0; i < k; i++) wgt(&d, 0, held0 + i);
    PM_ASSERT(d.f[0] == n && d.f[1] == n && d.b[0] == n && d.b[1] == n);
    pm_sched_work_add(d.emits);
}

pm_status pm_sched_build_zb_v(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 2)
        return pm_errf(err, PM_ERR_ARG,
                       "zb-v has 2 chunks per device (V placement); v=%d only fits "
                       "interleaved",
                       req->v);
    pm_status st = pm_sched_init(s, "zb-v", PM_PLACE_V, req->p, req->m, 2, err);
    if (st) return st;
    int n = s->m > 2 * s->p - 1 ? s->m : 2 * s->p - 1;
    for (int r = 0; r < s->p; r++) build_rank(s, r, n);
    return PM_OK;
}
