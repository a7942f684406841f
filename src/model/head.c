/* head.c: the vocabulary head (ln_f on the first part, lm_head rows
 * [r0, r1) of each part, the cross-entropy loss) without any (N, V)
 * matrix. Logits exist a row tile at a time: PM_HEAD_ROWS tokens by the
 * part's vocabulary in chunks of PM_HEAD_CHUNK words. B holds one row
 * tile's logits over the part (PM_HEAD_ROWS x R floats of scratch, whatever
 * the context); F and W hold one chunk's tile per compute slot.
 *
 * A head in one part (the common case) makes each tile once in training:
 *   F  ln_f only (given no loss pointer: a trainer's F, whose B follows);
 *   B  per row tile: every chunk's logits, kept, and each row's max and sum
 *      of exponentials in the chunk, merged per row in vocabulary order
 *      (the normaliser and the loss); then per chunk d logits = (exp(l -
 *      max) / sum - onehot) f with f = scale / N, BW also d W_chunk +=
 *      d logits^T lno; then d lno = sum of d logits W_chunk from the
 *      vocabulary's last chunk to its first;
 *   W  (after a separate B) per tile: the logits again, d logits, d W.
 * So BW makes 3 products of N x C x V, B;W 4. An F given a loss pointer (an
 * evaluation, sampling) makes the logits and the loss.
 * A head cut in parts (across pipeline stages) merges the normaliser part
 * after part in F, so there F makes every tile, the last part computes the
 * loss, and B and W make them again (B;W 5 products, BW 4).
 *
 * The chunks of a row tile are parallel tasks: each makes its logits with
 * one single-threaded product (a whole row tile by one chunk: OpenBLAS
 * packs each chunk of W once a row tile) and works on them while they are
 * in cache; d W_chunk belongs to its chunk. (A vocabulary of one chunk
 * would make one task: its tasks are the two halves of the row tile, and
 * d W one product after them.) d lno's tasks are its column
 * blocks, each summing the chunks in order. Every path makes tile (row
 * tile, chunk) with the same call, merges the normaliser in vocabulary
 * order, sums d lno from the last chunk and d W_chunk over the row tiles
 * in order. Chunks, row tiles and column blocks depend on the vocabulary,
 * N and C only, and part boundaries (multiples of PM_HEAD_GROUP) are chunk
 * boundaries, so any thread count, one part and any number of parts
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

_Static_assert(PM_HEAD_GROUP % PM_HEAD_CHUNK == 0, "part boundaries fall on chunk boundaries");

typedef struct {
    size_t N, C, R, r0, nch, RT; /* rows, width, part rows, first row, chunks, tile rows */
    int first, last;
    int kept;           /* the tiles are the row tile's over the part (B), not a slot's */
    int make;           /* grad_task makes the logits first */
    int halves;         /* row blocks a chunk's task takes: 2 when the vocabulary is one chunk */
    const float *lno;   /* (N, C): ln_f's output */
    const float *W;     /* (R, C): the part's lm_head rows */
    const int32_t *tgt; /* (N) */
    float *run;         /* (3, N) running max, sum, target logit */
    const float *nrm;   /* (2, N) each row's max and sum of exponentials */
    float f;            /* B, W: scale / N */
    float *tiles;       /* chunk q's tile at q (kept) or the slot's */
    float *cs;          /* (nch, 2, RT): each chunk's row maxima, then sums */
    float *gw;          /* d W (BW, W), else NULL */
    float *acc;         /* B: d lno */
    size_t r, nr;       /* the current row tile: its first row and rows */
} head_job;

static head_job head_job_of(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                            void *saved, void *scratch, const pm_layout *L) {
    size_t r1;
    head_job h = {.N = (size_t)B * (size_t)T, .C = (size_t)c->dim};
    int k = pm_gpt_head_rows(c, layer, &h.r0, &r1);
    h.R = r1 - h.r0, h.first = k == 0, h.last = k + 1 == pm_gpt_head_parts(c);
    h.nch = (h.R + PM_HEAD_CHUNK - 1) / PM_HEAD_CHUNK;
    h.halves = c->vocab <= PM_HEAD_CHUNK ? 2 : 1; /* the vocabulary's: the same for any parts */
    h.RT = h.N < PM_HEAD_ROWS ? h.N : PM_HEAD_ROWS;
    h.lno = CAT(saved, L->lno);
    h.W = lp + (h.first ? 2 * h.C : 0); /* after ln_f's weight and bias */
    h.tgt = (const int32_t *)((const char *)saved + L->tgt);
    h.run = AT(saved, L->run);
    h.nrm = CAT(saved, L->nrm);
    h.cs = scratch;
    h.tiles = AT(scratch, L->s_tiles);
    return h;
}

static size_t row_tiles(const head_job *h) { return (h->N + h->RT - 1) / h->RT; }

static void at_rows(head_job *h, size_t i) {
    h->r = i * h->RT;
    h->nr = h->N - h->r < h->RT ? h->N - h->r : h->RT;
}

/* Chunk q: its first part row *c0 and width. */
static size_t chunk(const head_job *h, size_t q, size_t *c0) {
    *c0 = q * PM_HEAD_CHUNK;
    return h->R - *c0 < PM_HEAD_CHUNK ? h->R - *c0 : PM_HEAD_CHUNK;
}

/* Chunk q's tile: the row tile's over the part (kept), or its task's. */
static float *tile_of(const head_job *h, size_t q, int slot) {
    size_t w = h->R < PM_HEAD_CHUNK ? h->R : PM_HEAD_CHUNK; /* (kept: q > 0 only if R > chunk) */
    size_t k = h->kept || h->halves > 1 ? q : (size_t)slot; /* (halves: one chunk, one tile) */
    return h->tiles + k * pm_slot_stride(h->RT * w);
}

/* Task i's chunk *q and rows [*lo, *hi) of the row tile: a vocabulary of
 * one chunk would leave one task, so it takes the rows in two halves. */
static size_t task_of(const head_job *h, size_t i, size_t *lo, size_t *hi) {
    size_t half = i % (size_t)h->halves, cut = h->nr / 2;
    *lo = h->halves > 1 && half ? cut : 0;
    *hi = h->halves > 1 && !half ? cut : h->nr;
    return i / (size_t)h->halves;
}

/* Rows [lo, hi) of tile (row tile, chunk q)'s logits: one single-threaded
 * product whose shape depends on the vocabulary and N alone, the one call
 * every path makes. */
static void make_logits(const head_job *h, size_t q, size_t lo, size_t hi, float *t) {
    size_t c0, n = chunk(h, q, &c0);
    pm_k_gemm(0, 1, hi - lo, n, h->C, 1, h->lno + (h->r + lo) * h->C, h->C, h->W + c0 * h->C,
              h->C, 0, t + lo * n, n);
}

/* A chunk's logits and their figures: each row's max and sum (merged in
 * vocabulary order afterwards) and the target's logit. */
static void stats_task(const void *p, size_t i, int slot) {
    const head_job *h = p;
    size_t lo, hi, q = task_of(h, i, &lo, &hi), c0, n = chunk(h, q, &c0), r = h->r + lo;
    float *t = tile_of(h, q, slot), *cs = h->cs + q * 2 * h->RT + lo;
    make_logits(h, q, lo, hi, t);
    pm_k_head_tile_stats(t + lo * n, hi - lo, n, (int64_t)(h->r0 + c0), h->tgt + r, cs,
                         cs + h->RT, h->run + 2 * h->N + r);
}

/* d W_q += d logits^T lno over the row tile: each chunk owns its rows of
 * d W, and the row tiles come in order. */
static void chunk_dw(const head_job *h, size_t q, const float *t) {
    size_t c0, n = chunk(h, q, &c0);
    pm_k_gemm(1, 0, n, h->C, h->nr, 1, t, n, h->lno + h->r * h->C, h->C, 1, h->gw + c0 * h->C,
              h->C);
}

/* A chunk's d logits (its logits made first when h->make), then d W_q
 * (halves: after every task, tile_grads). */
static void grad_task(const void *p, size_t i, int slot) {
    const head_job *h = p;
    size_t lo, hi, q = task_of(h, i, &lo, &hi), c0, n = chunk(h, q, &c0), r = h->r + lo;
    float *t = tile_of(h, q, slot);
    if (h->make) make_logits(h, q, lo, hi, t);
    pm_k_head_tile_grad(t + lo * n, hi - lo, n, (int64_t)(h->r0 + c0), h->tgt + r, h->nrm + r,
                        h->nrm + h->N + r, h->f);
    if (h->gw && h->halves == 1) chunk_dw(h, q, t);
}

/* Columns [i b, (i + 1) b) of d lno's rows += d logits W over the chunks,
 * from the vocabulary's last (the last part's last chunk starts the sum). */
static void dlno_task(const void *p, size_t i, int slot) {
    (void)slot;
    const head_job *h = p;
    size_t b = pm_k_matmul_rows(h->C), j0 = i * b, w = h->C - j0 < b ? h->C - j0 : b;
    for (size_t q = h->nch; q-- > 0;) {
        size_t c0, n = chunk(h, q, &c0);
        float beta = h->last && q + 1 == h->nch ? 0.0f : 1.0f;
        pm_k_gemm(0, 0, h->nr, w, n, 1, tile_of(h, q, 0), n, h->W + c0 * h->C + j0, h->C, beta,
                  h->acc + h->r * h->C + j0, h->C);
    }
}

static void merge_rows(const void *p, size_t lo, size_t hi) {
    const head_job *h = p;
    size_t N = h->N, r = h->r + lo;
    for (size_t q = 0; q < h->nch; q++) {
        const float *cs = h->cs + q * 2 * h->RT + lo;
        pm_k_head_merge(h->run + r, h->run + N + r, cs, cs + h->RT, hi - lo);
    }
}

/* The row tile's normaliser: every chunk's figures (in parallel), merged
 * into the running ones in vocabulary order. */
static void tile_stats(head_job *h) {
    pm_par_run(h->nch * (size_t)h->halves, stats_task, h);
    pm_gpt_par_for(h->nr, 16, merge_rows, h);
}

static void tile_grads(head_job *h) {
    pm_par_run(h->nch * (size_t)h->halves, grad_task, h);
    if (h->gw && h->halves > 1) /* the one chunk's d W by both halves' rows: one product */
        pm_k_matmul(1, 0, h->R, h->C, h->nr, 1, tile_of(h, 0, 0), h->R, h->lno + h->r * h->C,
                    h->C, 1, h->gw, h->C, NULL, NULL, NULL, NULL);
}

static void tile_dlno(head_job *h) {
    size_t b = pm_k_matmul_rows(h->C);
    pm_par_run((h->C + b - 1) / b, dlno_task, h);
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
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, &L);
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
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        tile_stats(&h);
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
static void b_begin(head_job *h, const pm_layout *L, const float *dout, float *din, float scale,
                    void *saved, void *scratch) {
    size_t N = h->N, C = h->C;
    float *nrm = AT(saved, L->nrm);
    h->f = (float)((double)scale / (double)N);
    *AT(saved, L->fscale) = h->f; /* for W */
    if (!h->last) memcpy(nrm, dout + N * C, 2 * N * sizeof(float)); /* the last part's, for W */
    h->acc = h->first ? AT(scratch, L->s_acc) : din;
    if (!h->last) memcpy(h->acc, dout, N * C * sizeof(float));
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

/* B's row tile, every chunk's tile kept (chunk q at q): a one-part head
 * makes the logits and the normaliser first (a later part got it from F);
 * then d logits and (BW) d W by chunk, then d lno. */
static void b_tile(head_job *h, float *nrm) {
    size_t N = h->N;
    if (h->first && h->last) {
        run_init(h->run, N, h->r, h->nr);
        tile_stats(h);
        memcpy(nrm + h->r, h->run + h->r, h->nr * sizeof(float));
        memcpy(nrm + N + h->r, h->run + N + h->r, h->nr * sizeof(float));
    }
    h->make = !(h->first && h->last);
    tile_grads(h);
    tile_dlno(h);
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
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, &L);
    b_begin(&h, &L, dout, din, scale, saved, scratch);
    h.gw = lg ? lg + (h.first ? 2 * h.C : 0) : NULL;
    h.kept = 1;
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        b_tile(&h, AT(saved, L.nrm));
    }
    if (h.first && h.last) AT(saved, L.fscale)[1] = mean_loss(h.run, h.N);
    if (h.last && loss) *loss = AT(saved, L.fscale)[1];
    b_end(&h, &L, lp, h.acc, din, saved);
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
    head_job h = head_job_of(c, layer, B, T, lp, saved, scratch, &L);
    h.f = *CAT(saved, L.fscale), h.make = 1;
    h.gw = lg + (h.first ? 2 * h.C : 0);
    for (size_t i = 0; i < row_tiles(&h); i++) {
        at_rows(&h, i);
        tile_grads(&h);
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
