/* head.c: the vocabulary head (ln_f on the first part, lm_head rows
 * [r0, r1) of each part, the cross-entropy loss) without any (N, V)
 * matrix: logits exist only for one chunk of PM_HEAD_CHUNK words at a time,
 * an (N, chunk) tile in the scratch.
 *
 *   F  per chunk in vocabulary order: the tile's logits, and per row its
 *      max, the target's logit if it lies in the chunk, and its sum of
 *      exponentials merged into the running (max, sum). The last part keeps
 *      them as each row's normaliser and makes the loss; a part before it
 *      passes ln_f's output and the running figures on.
 *   B  per chunk from the vocabulary's last to its first: the tile's logits
 *      again, d logits = (exp(l - max) / sum - onehot) f with f = scale / N,
 *      and d lno += d logits W_chunk; a part that is not the last starts
 *      from the sum the later parts made (its dout) and passes it and the
 *      normaliser on; the first ends with ln_f's backward.
 *   W  per chunk: the same tile of d logits again, d W_chunk += d logits^T
 *      lno. W makes the logits again rather than keeping them: kept, they
 *      are the (N, V) matrix this file avoids.
 *   BW both in one sweep, each tile made once (B;W makes it twice).
 *
 * The passes make a tile with the same pm_k_matmul call (shape, operands,
 * leading dimensions), so its logits are bitwise the same in F, B and W,
 * and BW is bitwise B;W (W's chunks are independent, so its order does not
 * matter). Chunks depend on the vocabulary only and part boundaries
 * (multiples of PM_HEAD_GROUP) are chunk boundaries, so any number of parts
 * merges the same tiles in the same order: bitwise one part. Kept per token
 * beyond the input: the target, the normaliser (max and sum, not max +
 * log(sum): a float log-sum-exp near 1000 is off by 3e-5, and so would every
 * probability be) and, until B, the target's logit. */
#include <math.h>
#include <string.h>

#include "model/internal.h"
#include "passes.h"

#define AT(base, off) ((float *)((char *)(base) + (off)))
#define CAT(base, off) ((const float *)((const char *)(base) + (off)))

_Static_assert(PM_HEAD_GROUP % PM_HEAD_CHUNK == 0, "part boundaries fall on chunk boundaries");

typedef struct {
    size_t N, C, R, r0, nch; /* rows, width, part rows, first row, chunks */
    int first, last;
    const float *lno;   /* (N, C): ln_f's output */
    const float *W;     /* (R, C): the part's lm_head rows */
    const int32_t *tgt; /* (N) */
    float *run;         /* F: (3, N) running max, sum, target logit */
    const float *nrm;   /* B, W: (2, N) each row's max and sum of exponentials */
    float f;            /* B, W: scale / N */
    float *t;           /* (N, chunk) the tile */
    size_t c0, n;       /* the current chunk: its first part row and width */
    float *acc;         /* B: (N, C) d lno */
    float beta;         /* B: 0 for the chunk that starts d lno's sum, else 1 */
} head_job;

static head_job head_job_of(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                            const void *saved, const pm_layout *L) {
    size_t r1;
    head_job h = {.N = (size_t)B * (size_t)T, .C = (size_t)c->dim};
    int k = pm_gpt_head_rows(c, layer, &h.r0, &r1);
    h.R = r1 - h.r0, h.first = k == 0, h.last = k + 1 == pm_gpt_head_parts(c);
    h.nch = (h.R + PM_HEAD_CHUNK - 1) / PM_HEAD_CHUNK;
    h.lno = CAT(saved, L->lno);
    h.W = lp + (h.first ? 2 * h.C : 0); /* after ln_f's weight and bias */
    h.tgt = (const int32_t *)((const char *)saved + L->tgt);
    h.nrm = CAT(saved, L->nrm);
    return h;
}

static void stats_post(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    size_t N = h->N;
    pm_k_head_tile_stats(h->t + lo * h->n, hi - lo, h->n, (int64_t)(h->r0 + h->c0), h->tgt + lo,
                         h->run + lo, h->run + N + lo, h->run + 2 * N + lo);
}

static void grad_post(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    pm_k_head_tile_grad(h->t + lo * h->n, hi - lo, h->n, (int64_t)(h->r0 + h->c0), h->tgt + lo,
                        h->nrm + lo, h->nrm + h->N + lo, h->f);
}

/* B: the logits' gradient of a row block, then its rows of d lno += d
 * logits W_chunk while the block is warm (one job per chunk, not two). */
static void dlno_post(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    grad_post(p, lo, hi);
    pm_k_gemm(0, 0, hi - lo, h->C, h->n, 1, h->t + lo * h->n, h->n, h->W + h->c0 * h->C, h->C,
              h->beta, h->acc + lo * h->C, h->C);
}

/* Chunk q's tile: its logits, then `post` on each row block while it is
 * warm (the running figures in F, the logits' gradient in B and W, and B's
 * d lno). The one call every pass makes for this tile. */
static void tile(head_job *h, size_t q, pm_rows_fn post) {
    h->c0 = q * PM_HEAD_CHUNK;
    h->n = h->R - h->c0 < PM_HEAD_CHUNK ? h->R - h->c0 : PM_HEAD_CHUNK;
    pm_k_matmul(0, 1, h->N, h->n, h->C, 1, h->lno, h->C, h->W + h->c0 * h->C, h->C, 0, h->t, h->n,
                NULL, NULL, post, h);
}

float pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                const float *in, const int32_t *tgt, float *out, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
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
    h.run = run, h.t = scratch;
    for (size_t q = 0; q < h.nch; q++) tile(&h, q, stats_post);
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

/* B's first half (and BW's): the normaliser and scale for W, the running
 * d lno (acc) set up, the message's tail for the part before. */
static float *b_begin(head_job *h, const pm_layout *L, const float *dout, float *din, float scale,
                      void *saved, void *scratch) {
    size_t N = h->N, C = h->C;
    float *nrm = AT(saved, L->nrm);
    h->f = (float)((double)scale / (double)N);
    *AT(saved, L->fscale) = h->f; /* for W */
    if (!h->last) memcpy(nrm, dout + N * C, 2 * N * sizeof(float)); /* the last part's, for W */
    float *acc = h->first ? AT(scratch, L->s_acc) : din;
    if (!h->last) memcpy(acc, dout, N * C * sizeof(float));
    if (!h->first) { /* the normaliser, then the float the message does not use */
        memcpy(din + N * C, nrm, 2 * N * sizeof(float));
        memset(din + N * (C + 2), 0, N * sizeof(float));
    }
    h->t = scratch, h->acc = acc;
    return acc;
}

/* Chunk q's tile and its d lno; the vocabulary's last chunk starts the
 * sum. */
static void b_chunk(head_job *h, size_t q) {
    h->beta = h->last && q + 1 == h->nch ? 0.0f : 1.0f;
    tile(h, q, dlno_post);
}

/* d W_chunk += d logits^T lno for the current tile. */
static void w_chunk(head_job *h, float *gw) {
    pm_k_matmul(1, 0, h->n, h->C, h->N, 1, h->t, h->n, h->lno, h->C, 1, gw + h->c0 * h->C, h->C,
                NULL, NULL, NULL, NULL);
}

/* B's last step on the first part: ln_f's backward into din. */
static void b_end(head_job *h, const pm_layout *L, const float *lp, const float *acc, float *din,
                  void *saved) {
    if (!h->first) return;
    size_t N = h->N, C = h->C;
    float *xin = AT(saved, L->xin), *st = AT(saved, L->stats), *lnst = AT(saved, L->lnst);
    memset(lnst, 0, 2 * C * sizeof(float));
    pm_k_layernorm_b(din, NULL, acc, xin, st, st + N, lp, lnst, lnst + C, N, (int)C);
}

/* W's last step on the first part: ln_f's gradients that B kept. */
static void w_end(const head_job *h, const pm_layout *L, float *lg, const void *saved) {
    if (!h->first) return;
    const float *lnst = CAT(saved, L->lnst);
    pm_k_colsum_add(lg, lnst, 1, (int)h->C);
    pm_k_colsum_add(lg + h->C, lnst + h->C, 1, (int)h->C);
}

void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    float *acc = b_begin(&h, &L, dout, din, scale, saved, scratch);
    for (size_t q = h.nch; q-- > 0;) b_chunk(&h, q);
    b_end(&h, &L, lp, acc, din, saved);
}

void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
               const void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    h.f = *CAT(saved, L.fscale), h.t = scratch;
    float *gw = lg + (h.first ? 2 * h.C : 0);
    for (size_t q = 0; q < h.nch; q++) {
        tile(&h, q, grad_post);
        w_chunk(&h, gw);
    }
    w_end(&h, &L, lg, saved);
}

void pm_head_bw(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
                const float *dout, float *din, float scale, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    float *acc = b_begin(&h, &L, dout, din, scale, saved, scratch);
    float *gw = lg + (h.first ? 2 * h.C : 0);
    for (size_t q = h.nch; q-- > 0;) {
        b_chunk(&h, q);
        w_chunk(&h, gw);
    }
    b_end(&h, &L, lp, acc, din, saved);
    w_end(&h, &L, lg, saved);
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
