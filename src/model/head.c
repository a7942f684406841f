/* head.c: the vocabulary head (ln_f on the first part, lm_head rows
 * [r0, r1) of each part, the cross-entropy loss) without any (N, V)
 * matrix: logits exist only as tiles of rb token rows (pm_head_block_rows)
 * by PM_HEAD_CHUNK vocabulary rows in a compute thread's slot of the
 * scratch.
 *
 *   F  per row block, per chunk in vocabulary order: the tile's logits, its
 *      row max, the target's logit if it lies in the chunk, and its sum of
 *      exponentials merged into the running (max, sum). The last part turns
 *      them into each row's normaliser (max, sum) and the loss; a part before
 *      it passes ln_f's output and the running figures on.
 *   B  per row block, per chunk from the vocabulary's last to its first:
 *      the tile's logits again, d logits = (exp(l - max) / sum - onehot) f with
 *      f = scale / N, and d lno += d logits W_chunk; a part that is not the
 *      last starts from the sum the later parts made (its dout) and passes
 *      it and the normaliser on; the first ends with ln_f's backward.
 *   W  per chunk, per row block in order: the same tile of d logits again,
 *      d W_chunk += d logits^T lno. W recomputes the logits rather than
 *      keeping them: kept, they are the (N, V) matrix this file avoids.
 *
 * The three passes compute a tile with the same sgemm call (shape, operands
 * and leading dimensions), so its logits are bitwise the same in F, B and
 * W, and B;W is bitwise BW. Row blocks depend on N only, chunks on the
 * vocabulary only; part boundaries (multiples of PM_HEAD_GROUP) are chunk
 * boundaries, so any number of parts merges the same tiles in the same
 * order: bitwise the same as one part. Kept per token beyond the input: the
 * target, the normaliser and, until B, the target's logit. The normaliser
 * is kept as (max, sum), not as max + log(sum): a float log-sum-exp near
 * 1000 is off by 3e-5, and so would every probability be. */
#include <math.h>
#include <string.h>

#include "model/internal.h"

#define AT(base, off) ((float *)((char *)(base) + (off)))
#define CAT(base, off) ((const float *)((const char *)(base) + (off)))

_Static_assert(PM_HEAD_GROUP % PM_HEAD_CHUNK == 0, "part boundaries fall on chunk boundaries");

typedef struct {
    size_t N, C, R, r0, rb, nch; /* rows, width, part rows, first row, row block, chunks */
    size_t slot;                 /* floats of a thread's tile: rb by the widest chunk */
    int first, last;
    const float *lno; /* (N, C): ln_f's output */
    const float *W;   /* (R, C): the part's lm_head rows */
    const int32_t *tgt;
    float *run;       /* F: (3, N) running max, sum, target logit */
    const float *nrm; /* B, W: (2, N) each row's max and sum of exponentials */
    float f;          /* B, W: scale / N */
    float *acc;       /* B: (N, C) d lno */
    float *gw;        /* W: (R, C) the part's lm_head gradient */
    float *work;      /* the threads' slots */
} head_job;

static head_job head_job_of(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                            const void *saved, void *scratch, size_t s_tile) {
    pm_layout L;
    size_t r1;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = {.N = (size_t)B * (size_t)T, .C = (size_t)c->dim};
    int k = pm_gpt_head_rows(c, layer, &h.r0, &r1);
    h.R = r1 - h.r0, h.first = k == 0, h.last = k + 1 == pm_gpt_head_parts(c);
    h.rb = pm_head_block_rows(h.N), h.nch = (h.R + PM_HEAD_CHUNK - 1) / PM_HEAD_CHUNK;
    h.slot = pm_slot_stride(h.rb * (h.R < PM_HEAD_CHUNK ? h.R : PM_HEAD_CHUNK));
    h.lno = CAT(saved, L.lno);
    h.W = lp ? lp + (h.first ? 2 * h.C : 0) : NULL; /* after ln_f's weight and bias */
    h.tgt = (const int32_t *)((const char *)saved + L.tgt);
    h.nrm = CAT(saved, L.nrm);
    h.work = scratch ? AT(scratch, s_tile) : NULL;
    return h;
}

/* The logits of row block [r0, r0 + nr) and chunk q into t (nr, n): the one
 * call every pass makes for this tile. */
static size_t tile(const head_job *h, size_t r0, size_t nr, size_t q, float *t) {
    size_t c0 = q * PM_HEAD_CHUNK, n = h->R - c0 < PM_HEAD_CHUNK ? h->R - c0 : PM_HEAD_CHUNK;
    pm_k_gemm(0, 1, nr, n, h->C, 1, h->lno + r0 * h->C, h->C, h->W + c0 * h->C, h->C, 0, t, n);
    return n;
}

static void rows_of(const head_job *h, size_t i, size_t *r0, size_t *nr) {
    *r0 = i * h->rb;
    *nr = h->N - *r0 < h->rb ? h->N - *r0 : h->rb;
}

static void f_task(const void *arg, size_t i, int slot) {
    const head_job *h = arg;
    size_t r0, nr, N = h->N;
    rows_of(h, i, &r0, &nr);
    float *t = h->work + (size_t)slot * h->slot;
    for (size_t q = 0; q < h->nch; q++) {
        size_t n = tile(h, r0, nr, q, t);
        pm_k_head_tile_stats(t, nr, n, (int64_t)(h->r0 + q * PM_HEAD_CHUNK), h->tgt + r0,
                             h->run + r0, h->run + N + r0, h->run + 2 * N + r0);
    }
}

float pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                const float *in, const int32_t *tgt, float *out, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, 0);
    size_t N = h.N, C = h.C;
    float *lno = AT(saved, L.lno), *run = AT(saved, L.run), *nrm = AT(saved, L.nrm);
    int32_t *kt = (int32_t *)((char *)saved + L.tgt);
    for (size_t r = 0; r < N; r++) {
        PM_ASSERT(!tgt || (tgt[r] >= 0 && tgt[r] < c->vocab));
        kt[r] = tgt ? tgt[r] : -1; /* -1: no targets, B must not run */
    }
    if (h.first) {
        float *xin = AT(saved, L.xin), *st = AT(saved, L.stats);
        pm_copy_in(xin, in, N * C * sizeof(float));
        pm_k_layernorm_f(lno, st, st + N, xin, lp, lp + C, N, (int)C);
        for (size_t r = 0; r < N; r++) run[r] = -INFINITY, run[N + r] = 0, run[2 * N + r] = 0;
    } else {
        pm_copy_in(lno, in, N * (C + 3) * sizeof(float));
        memcpy(run, lno + N * C, 3 * N * sizeof(float));
    }
    h.run = run;
    pm_par_run((N + h.rb - 1) / h.rb, f_task, &h);
    if (!h.last) {
        memcpy(out, lno, N * C * sizeof(float));
        memcpy(out + N * C, run, 3 * N * sizeof(float));
        return 0.0f;
    }
    memcpy(nrm, run, 2 * N * sizeof(float));
    double sum = 0; /* -log p[t] = max + log(sum) - l_t */
    for (size_t r = 0; r < N; r++)
        sum += (double)run[r] + log((double)run[N + r]) - (double)run[2 * N + r];
    return tgt ? (float)(sum / (double)N) : 0.0f;
}

static void b_task(const void *arg, size_t i, int slot) {
    const head_job *h = arg;
    size_t r0, nr;
    rows_of(h, i, &r0, &nr);
    float *t = h->work + (size_t)slot * h->slot;
    for (size_t q = h->nch; q-- > 0;) {
        size_t n = tile(h, r0, nr, q, t), c0 = q * PM_HEAD_CHUNK;
        pm_k_head_tile_grad(t, nr, n, (int64_t)(h->r0 + c0), h->tgt + r0, h->nrm + r0,
                            h->nrm + h->N + r0, h->f);
        float beta = h->last && q + 1 == h->nch ? 0.0f : 1.0f; /* the vocabulary's last chunk */
        pm_k_gemm(0, 0, nr, h->C, n, 1, t, n, h->W + c0 * h->C, h->C, beta, h->acc + r0 * h->C,
                  h->C);
    }
}

void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, L.s_slots);
    size_t N = h.N, C = h.C;
    float *nrm = AT(saved, L.nrm);
    h.f = (float)((double)scale / (double)N);
    *AT(saved, L.fscale) = h.f; /* for W */
    if (!h.last) memcpy(nrm, dout + N * C, 2 * N * sizeof(float)); /* the last part's, for W */
    h.acc = h.first ? (float *)scratch : din;
    if (!h.last) memcpy(h.acc, dout, N * C * sizeof(float));
    if (!h.first) { /* the normaliser, then the float the message does not use */
        memcpy(din + N * C, nrm, 2 * N * sizeof(float));
        memset(din + N * (C + 2), 0, N * sizeof(float));
    }
    pm_par_run((N + h.rb - 1) / h.rb, b_task, &h);
    if (!h.first) return;
    float *xin = AT(saved, L.xin), *st = AT(saved, L.stats), *lnst = AT(saved, L.lnst);
    memset(lnst, 0, 2 * C * sizeof(float));
    pm_k_layernorm_b(din, NULL, h.acc, xin, st, st + N, lp, lnst, lnst + C, N, (int)C);
}

static void w_task(const void *arg, size_t q, int slot) {
    const head_job *h = arg;
    float *t = h->work + (size_t)slot * h->slot;
    size_t c0 = q * PM_HEAD_CHUNK, nb = (h->N + h->rb - 1) / h->rb;
    for (size_t i = 0; i < nb; i++) {
        size_t r0, nr;
        rows_of(h, i, &r0, &nr);
        size_t n = tile(h, r0, nr, q, t);
        pm_k_head_tile_grad(t, nr, n, (int64_t)(h->r0 + c0), h->tgt + r0, h->nrm + r0,
                            h->nrm + h->N + r0, h->f);
        pm_k_gemm(1, 0, n, h->C, nr, 1, t, n, h->lno + r0 * h->C, h->C, 1, h->gw + c0 * h->C,
                  h->C);
    }
}

void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
               const void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, 0);
    h.f = *CAT(saved, L.fscale);
    h.gw = lg + (h.first ? 2 * h.C : 0);
    pm_par_run(h.nch, w_task, &h);
    if (!h.first) return;
    const float *lnst = CAT(saved, L.lnst);
    pm_k_colsum_add(lg, lnst, 1, (int)h.C);
    pm_k_colsum_add(lg + h.C, lnst + h.C, 1, (int)h.C);
}

void pm_head_probs_row(const pm_gpt_config *c, int B, int T, const float *lp, const void *saved,
                       size_t row, float *out) {
    pm_layout L;
    PM_ASSERT(pm_gpt_head_parts(c) == 1 && row < (size_t)B * (size_t)T);
    PM_ASSERT(pm_layout_get(c, c->layers + 1, B, T, &L));
    size_t C = (size_t)c->dim, V = (size_t)c->vocab;
    pm_k_gemm(0, 1, 1, V, C, 1, CAT(saved, L.lno) + row * C, C, lp + 2 * C, C, 0, out, V);
    const float *nrm = CAT(saved, L.nrm);
    pm_k_exp_sub(out, V, nrm[row]);
    pm_k_scale(out, 1.0f / nrm[(size_t)B * (size_t)T + row], V);
}
