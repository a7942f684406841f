/* head.c: the vocabulary head (ln_f on the first part, lm_head rows
 * [r0, r1) of each part, the cross-entropy loss) without any (N, V)
 * matrix. Logits exist one tile at a time: a row tile of PM_HEAD_ROWS
 * tokens by a chunk of PM_HEAD_CHUNK words; a one-part head's B holds one
 * row tile's logits over the whole vocabulary (PM_HEAD_ROWS x V floats of
 * scratch, whatever the context).
 *
 * A head in one part (the common case) makes each tile once in training:
 *   F  ln_f only (given no loss pointer: a trainer's F, whose B follows);
 *   B  per row tile: every chunk's logits, kept, their max and sum of
 *      exponentials merged per row in vocabulary order (the normaliser and
 *      the loss); then per chunk from the vocabulary's last to its first,
 *      d logits = (exp(l - max) / sum - onehot) f with f = scale / N, and
 *      d lno += d logits W_chunk; BW also d W_chunk += d logits^T lno;
 *   W  (after a separate B) per tile: the logits again, d logits, d W.
 * So BW makes 3 products of N x C x V, B;W 4. An F given a loss pointer (an
 * evaluation, sampling) makes the logits and the loss.
 * A head cut in parts (across pipeline stages) merges the normaliser part
 * after part in F, so there F makes every tile, the last part computes the
 * loss, and B and W make them again (B;W 5 products, BW 4).
 *
 * Every path makes tile (row tile, chunk) with the same pm_k_matmul call and
 * a row-wise post, and d lno and d W with the same calls: per row, the
 * normaliser merges the chunks in vocabulary order and d lno sums them from
 * the last; d W_chunk sums the row tiles in order. Chunks and row tiles
 * depend on the vocabulary and N only, and part boundaries (multiples of
 * PM_HEAD_GROUP) are chunk boundaries, so one part and any number of parts
 * compute bitwise the same, in F, B, W or BW. Kept per token beyond the
 * input: the target, the normaliser (max and sum, not max + log(sum): a
 * float log-sum-exp near 1000 is off by 3e-5, and so would every
 * probability be) and, until B, the running figures. */
#include <math.h>
#include <string.h>

#include "model/internal.h"
#include "passes.h"

#define AT(base, off) ((float *)((char *)(base) + (off)))
#define CAT(base, off) ((const float *)((const char *)(base) + (off)))
#define GRAD_ROWS 16 /* rows per piece of a standalone d logits (row-wise: any cut) */

_Static_assert(PM_HEAD_GROUP % PM_HEAD_CHUNK == 0, "part boundaries fall on chunk boundaries");

typedef struct {
    size_t N, C, R, r0, nch, RT; /* rows, width, part rows, first row, chunks, tile rows */
    int first, last, keep;       /* keep: the stats leave the logits (one-part B) */
    const float *lno;   /* (N, C): ln_f's output */
    const float *W;     /* (R, C): the part's lm_head rows */
    const int32_t *tgt; /* (N) */
    float *run;         /* (3, N) running max, sum, target logit */
    const float *nrm;   /* (2, N) each row's max and sum of exponentials */
    float f;            /* B, W: scale / N */
    float *t;           /* the current tile (nr, n) */
    size_t r, nr;       /* the current row tile: its first row and rows */
    size_t c0, n;       /* the current chunk: its first part row and width */
} head_job;

static head_job head_job_of(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                            void *saved, const pm_layout *L) {
    size_t r1;
    head_job h = {.N = (size_t)B * (size_t)T, .C = (size_t)c->dim};
    int k = pm_gpt_head_rows(c, layer, &h.r0, &r1);
    h.R = r1 - h.r0, h.first = k == 0, h.last = k + 1 == pm_gpt_head_parts(c);
    h.nch = (h.R + PM_HEAD_CHUNK - 1) / PM_HEAD_CHUNK;
    h.RT = h.N < PM_HEAD_ROWS ? h.N : PM_HEAD_ROWS;
    h.lno = CAT(saved, L->lno);
    h.W = lp + (h.first ? 2 * h.C : 0); /* after ln_f's weight and bias */
    h.tgt = (const int32_t *)((const char *)saved + L->tgt);
    h.run = AT(saved, L->run);
    h.nrm = CAT(saved, L->nrm);
    return h;
}

static size_t row_tiles(const head_job *h) { return (h->N + h->RT - 1) / h->RT; }

static void at_rows(head_job *h, size_t i) {
    h->r = i * h->RT;
    h->nr = h->N - h->r < h->RT ? h->N - h->r : h->RT;
}

static void at_chunk(head_job *h, size_t q) {
    h->c0 = q * PM_HEAD_CHUNK;
    h->n = h->R - h->c0 < PM_HEAD_CHUNK ? h->R - h->c0 : PM_HEAD_CHUNK;
}

static void stats_post(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    size_t N = h->N, r = h->r + lo;
    pm_k_head_tile_stats(h->t + lo * h->n, hi - lo, h->n, (int64_t)(h->r0 + h->c0), h->tgt + r,
                         h->run + r, h->run + N + r, h->run + 2 * N + r, h->keep);
}

static void grad_post(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    size_t r = h->r + lo;
    pm_k_head_tile_grad(h->t + lo * h->n, hi - lo, h->n, (int64_t)(h->r0 + h->c0), h->tgt + r,
                        h->nrm + r, h->nrm + h->N + r, h->f);
}

/* Tile (row tile, chunk q)'s logits into h->t, then `post` on each row
 * block while it is warm. The one call every path makes for this tile. */
static void logits(head_job *h, size_t q, pm_rows_fn post) {
    at_chunk(h, q);
    pm_k_matmul(0, 1, h->nr, h->n, h->C, 1, h->lno + h->r * h->C, h->C, h->W + h->c0 * h->C,
                h->C, 0, h->t, h->n, NULL, NULL, post, h);
}

/* d lno's rows of the tile += d logits W_chunk (beta 0 starts the sum). */
static void dlno(const head_job *h, float *acc, float beta) {
    pm_k_matmul(0, 0, h->nr, h->C, h->n, 1, h->t, h->n, h->W + h->c0 * h->C, h->C, beta,
                acc + h->r * h->C, h->C, NULL, NULL, NULL, NULL);
}

/* d W_chunk += d logits^T lno over the tile's rows. */
static void dw(const head_job *h, float *gw) {
    pm_k_matmul(1, 0, h->n, h->C, h->nr, 1, h->t, h->n, h->lno + h->r * h->C, h->C, 1,
                gw + h->c0 * h->C, h->C, NULL, NULL, NULL, NULL);
}

static void run_init(float *run, size_t N, size_t r, size_t nr) {
    for (size_t i = r; i < r + nr; i++) run[i] = -INFINITY, run[N + i] = 0, run[2 * N + i] = 0;
}

/* The mean over the rows, in order, of -log p[t] = max + log(sum) - l_t. */
static float mean_loss(const float *run, size_t N) {
    double sum = 0;
    for (size_t r = 0; r < N; r++)
        sum += (double)run[r] + log((double)run[N + r]) - (double)run[2 * N + r];
    return (float)(sum / (double)N);
}

void pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp, const float *in,
               const int32_t *tgt, float *out, float *loss, void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    size_t N = h.N, C = h.C;
    float *lno = AT(saved, L.lno), *run = h.run;
    int32_t *kt = (int32_t *)((char *)saved + L.tgt);
    for (size_t r = 0; r < N; r++) {
        PM_ASSERT(!tgt || (tgt[r] >= 0 && tgt[r] < c->vocab));
        kt[r] = tgt ? tgt[r] : -1; /* -1: no targets, B must not run */
    }
    if (h.first) {
        float *xin = AT(saved, L.xin), *st = AT(saved, L.stats);
        pm_copy_in(xin, in, N * C * sizeof(float));
        pm_k_layernorm_f(lno, st, st + N, xin, lp, lp + C, N, (int)C);
        run_init(run, N, 0, N);
    } else {
        pm_copy_in(lno, in, N * (C + 3) * sizeof(float));
        memcpy(run, lno + N * C, 3 * N * sizeof(float));
    }
    if (h.first && h.last && !loss) return; /* a trainer's: B makes the logits once */
    h.t = scratch;
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        for (size_t q = 0; q < h.nch; q++) logits(&h, q, stats_post);
    }
    if (!h.last) {
        memcpy(out, lno, N * C * sizeof(float));
        memcpy(out + N * C, run, 3 * N * sizeof(float));
        return;
    }
    memcpy(AT(saved, L.nrm), run, 2 * N * sizeof(float));
    float l = tgt ? mean_loss(run, N) : 0.0f;
    AT(saved, L.fscale)[1] = l; /* for B to report */
    if (loss) *loss = l;
}

/* B's start: the scale for W, the running d lno (acc) set up, the
 * message's tail for the part before. */
static float *b_begin(head_job *h, const pm_layout *L, const float *dout, float *din, float scale,
                      void *saved, void *scratch) {
    size_t N = h->N, C = h->C;
    float *nrm = AT(saved, L->nrm);
    h->f = (float)((double)scale / (double)N);
    *AT(saved, L->fscale) = h->f; /* for W */
    if (!h->last) memcpy(nrm, dout + N * C, 2 * N * sizeof(float)); /* the last part's, for W */
    float *acc = h->first ? AT(scratch, L->s_acc) : din;
    if (!h->last) memcpy(acc, dout, N * C * sizeof(float));
    return acc;
}

/* B's end: the normaliser on to the part before, or on the first part
 * ln_f's backward into din. */
static void b_end(head_job *h, const pm_layout *L, const float *lp, const float *acc, float *din,
                  void *saved) {
    size_t N = h->N, C = h->C;
    if (!h->first) { /* the normaliser, then the float the message does not use */
        memcpy(din + N * C, h->nrm, 2 * N * sizeof(float));
        memset(din + N * (C + 2), 0, N * sizeof(float));
        return;
    }
    float *xin = AT(saved, L->xin), *st = AT(saved, L->stats), *lnst = AT(saved, L->lnst);
    memset(lnst, 0, 2 * C * sizeof(float));
    pm_k_layernorm_b(din, NULL, acc, xin, st, st + N, lp, lnst, lnst + C, N, (int)C);
}

/* A one-part head's row tile: every chunk's logits kept in the scratch
 * (chunk q at q RT PM_HEAD_CHUNK), the normaliser, then per chunk from the
 * last d logits, d lno and (gw) d W. */
static void one_part_tile(head_job *h, float *acc, float *gw, float *scratch, float *nrm) {
    size_t N = h->N;
    run_init(h->run, N, h->r, h->nr);
    h->keep = 1;
    for (size_t q = 0; q < h->nch; q++) {
        h->t = scratch + q * h->RT * PM_HEAD_CHUNK;
        logits(h, q, stats_post);
    }
    h->keep = 0;
    memcpy(nrm + h->r, h->run + h->r, h->nr * sizeof(float));
    memcpy(nrm + N + h->r, h->run + N + h->r, h->nr * sizeof(float));
    for (size_t q = h->nch; q-- > 0;) {
        at_chunk(h, q);
        h->t = scratch + q * h->RT * PM_HEAD_CHUNK;
        pm_gpt_par_for(h->nr, GRAD_ROWS, grad_post, h);
        dlno(h, acc, q + 1 == h->nch ? 0.0f : 1.0f);
        if (gw) dw(h, gw);
    }
}

/* W's last step on the first part: ln_f's gradients that B kept. */
static void w_end(const head_job *h, const pm_layout *L, float *lg, const void *saved) {
    if (!h->first) return;
    const float *lnst = CAT(saved, L->lnst);
    pm_k_colsum_add(lg, lnst, 1, (int)h->C);
    pm_k_colsum_add(lg + h->C, lnst + h->C, 1, (int)h->C);
}

/* B, and W in the same sweep when lg is not NULL (BW); *loss on the last
 * part. */
static void head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
                   const float *dout, float *din, float scale, float *loss, void *saved,
                   void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    float *acc = b_begin(&h, &L, dout, din, scale, saved, scratch);
    float *gw = lg ? lg + (h.first ? 2 * h.C : 0) : NULL;
    int one = h.first && h.last;
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        if (one) {
            one_part_tile(&h, acc, gw, scratch, AT(saved, L.nrm));
            continue;
        }
        h.t = scratch;
        for (size_t q = h.nch; q-- > 0;) {
            logits(&h, q, grad_post);
            dlno(&h, acc, h.last && q + 1 == h.nch ? 0.0f : 1.0f);
            if (gw) dw(&h, gw);
        }
    }
    if (one) AT(saved, L.fscale)[1] = mean_loss(h.run, h.N);
    if (h.last && loss) *loss = AT(saved, L.fscale)[1];
    b_end(&h, &L, lp, acc, din, saved);
    if (lg) w_end(&h, &L, lg, saved);
}

void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, float *loss, void *saved,
               void *scratch) {
    head_b(c, layer, B, T, lp, NULL, dout, din, scale, loss, saved, scratch);
}

void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
               void *saved, void *scratch) {
    pm_layout L;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &L));
    head_job h = head_job_of(c, layer, B, T, lp, saved, &L);
    h.f = *CAT(saved, L.fscale), h.t = scratch;
    float *gw = lg + (h.first ? 2 * h.C : 0);
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        for (size_t q = 0; q < h.nch; q++) {
            logits(&h, q, grad_post);
            dw(&h, gw);
        }
    }
    w_end(&h, &L, lg, saved);
}

void pm_head_bw(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
                const float *dout, float *din, float scale, float *loss, void *saved,
                void *scratch) {
    head_b(c, layer, B, T, lp, lg, dout, din, scale, loss, saved, scratch);
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
