/* attention.c: causal multi-head attention over tiles, with an online
 * softmax (FlashAttention's algorithm on a CPU), so that nothing of size
 * T x T exists anywhere: F keeps only each row's log-sum-exp beside q, k, v
 * and the output, and B recomputes each tile's scores from them.
 *
 * Tiles: queries in blocks of PM_ATT_BQ rows, keys in blocks of PM_ATT_BK
 * columns (a multiple of PM_ATT_BQ), fixed sizes chosen for the cache, not
 * for T. A query block [i0, i1) meets the key blocks that start below i1,
 * each cut at i1: by causality no later key matters, so about T^2 / 2 + T
 * BQ / 2 score entries are computed (pm_att_pairs). Since key blocks start
 * at multiples of BK >= BQ, every row has at least one valid key in every
 * tile it meets.
 *
 * Per (sequence, head), with S = scale Q K^T and P = softmax(S) by rows:
 *   F  for each query block, over its key blocks in order:
 *        S_ij = scale Q_i K_j^T;  m' = max(m, rowmax S_ij);
 *        P~ = exp(S_ij - m');  l = l exp(m - m') + rowsum P~;
 *        O_i = O_i exp(m - m') + P~ V_j
 *      then O_i /= l and lse_i = m + log l (kept for B).
 *   B  D = rowsum(dO * O); for each key block j, over its query blocks:
 *        P = exp(S_ij - lse_i);  dV_j += P^T dO_i;  dP = dO_i V_j^T;
 *        dS = P * (dP - D_i);  dQ_i += scale dS K_j;  dK_j += scale dS^T Q_i
 *      dK_j, dV_j go to k, v's place in qkv once key block j is done (no
 *      later tile reads K_j or V_j); dQ, accumulated over every key block,
 *      goes to q's place at the end.
 * Every product is one pm_k_tile_mm on the task's thread (tilemm.c: no
 * packing; each element's sum in a fixed order), told the tile's causal
 * band so that a diagonal tile skips what the mask makes zero (S and dP
 * past the diagonal, P's and dS's zero terms; on AVX-512, where the tile
 * kernel runs); each (sequence, head) is
 * one task with its own outputs, so the bits do not depend on the thread
 * count. The products with K^T and V^T (S and dP) read them from panels of
 * 64 keys the task makes first. The other products' B operands (V in F;
 * Q_i, dO_i and K_j in B) are first copied into packed (rows, hs) blocks:
 * a head's rows lie 3C floats apart in qkv (C in dO), which at GPT-2
 * small's widths maps a block's rows to a few of L1's sets, and B ran 7%
 * faster packed (ctx 1024). Scratch is per compute thread (slot): F one score tile,
 * three row vectors, K^T and V; B two tiles, dK_j and dV_j, dQ (T, hs), D
 * (T), K^T, V^T, Q_i, dO_i and K_j: linear in T. */
#include <math.h>
#include <string.h>

#include "model/internal.h"

typedef struct {
    size_t T, C, H, hs;  /* sequence length, width, heads, head size */
    float *qkv;          /* (B,T,3C): q | k | v per row; B writes dq | dk | dv */
    float *atty;         /* (B,T,C): F writes the output O; B reads it */
    float *lse;          /* (B,H,T) */
    const float *datty;  /* (B,T,C): dO (B) */
    float *work;         /* the slots */
    size_t slot_floats;  /* floats of one slot */
} att_job;

size_t pm_att_pairs(int T) {
    size_t Tz = (size_t)T, sum = 0;
    for (size_t i0 = 0; i0 < Tz; i0 += PM_ATT_BQ) {
        size_t i1 = i0 + PM_ATT_BQ < Tz ? i0 + PM_ATT_BQ : Tz;
        sum += (i1 - i0) * i1; /* keys 0..i1-1, cut at i1 */
    }
    return sum;
}

/* A slot's pieces for length T: tiles of at most min(T, BQ) queries by
 * min(T, BK) keys, so a short sequence's slots are small. */
static size_t max_q(size_t T) { return T < PM_ATT_BQ ? T : PM_ATT_BQ; }
static size_t max_k(size_t T) { return T < PM_ATT_BK ? T : PM_ATT_BK; }

/* Floats of K^T (or V^T) for T keys in panels of 64 columns (tilemm.c). */
static size_t panels(size_t T, size_t hs) { return (T + 63) / 64 * 64 * hs; }

size_t pm_att_slot_floats_f(int T, int hs) {
    size_t Tz = (size_t)T;
    return max_q(Tz) * max_k(Tz) + 3 * max_q(Tz) + panels(Tz, (size_t)hs) + Tz * (size_t)hs;
}

size_t pm_att_slot_floats_b(int T, int hs) {
    size_t Tz = (size_t)T, h = (size_t)hs;
    return 2 * max_q(Tz) * max_k(Tz) + 2 * max_k(Tz) * h + Tz * h + Tz + 2 * panels(Tz, h) +
           (2 * max_q(Tz) + max_k(Tz)) * h;
}

/* The products of a tile: C = alpha op(A) B (+ C when acc), A (lda) read
 * transposed when ta, B row-major (ldb). A is a tile of P or dS, zero
 * past the causal diagonal (diag = i0 - j0), and the AVX-512 kernel skips
 * those terms a register tile (6 rows of C) at a time: most of the
 * triangle above each diagonal block, at ctx 256 a fifth of the pairs all
 * the tiles hold (8064 of 40960 a head). */
static void prod(int ta, size_t m, size_t n, size_t k, float alpha, const float *A, size_t lda,
                 const float *B, size_t ldb, int acc, float *C, size_t ldc, size_t diag) {
    pm_band band = {ta ? PM_BAND_K_FROM : PM_BAND_K_TO, (int64_t)diag};
    pm_k_tile_mm(m, n, k, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, 64, acc, C, ldc, band);
}

/* s (nq, nk) = scale X_i Y_j^T for rows x of X (ld) and keys j0.. of Y,
 * given as the panels yt of Y^T (j0 starts a panel); entries past the
 * causal diagonal (diag = i0 - j0) are left unspecified. */
_Static_assert(PM_ATT_BK % 64 == 0, "key blocks start on panel boundaries");
static void scores(size_t nq, size_t nk, size_t hs, float scale, const float *x, size_t ld,
                   const float *yt, size_t j0, size_t diag, float *s) {
    pm_band band = {PM_BAND_COLS, (int64_t)diag};
    pm_k_tile_mm(nq, nk, hs, scale, x, ld, 1, yt + j0 / 64 * 64 * hs, 64, 64 * hs, 0, s, nk,
                 band);
}

/* n rows of hs floats from src (rows lds apart) to dst (ldd apart): a
 * column slice of qkv or dO to a packed block (ld hs), or back. */
static void copy_rows(float *dst, size_t ldd, const float *src, size_t lds, size_t n,
                      size_t hs) {
    for (size_t r = 0; r < n; r++) memcpy(dst + r * ldd, src + r * lds, hs * sizeof(float));
}

static void att_f_task(const void *arg, size_t bh, int slot) {
    const att_job *a = arg;
    size_t T = a->T, C = a->C, hs = a->hs, b = bh / a->H, h = bh % a->H, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = a->qkv + b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
    float *o = a->atty + b * T * C + h * hs, *lse = a->lse + bh * T;
    float *s = a->work + (size_t)slot * a->slot_floats, *m = s + max_q(T) * max_k(T);
    float *l = m + max_q(T), *alpha = l + max_q(T), *kt = alpha + max_q(T);
    float *vc = kt + panels(T, hs);
    pm_k_panels(kt, k, ld, T, hs);
    copy_rows(vc, hs, v, ld, T, hs);
    for (size_t i0 = 0; i0 < T; i0 += PM_ATT_BQ) {
        size_t i1 = i0 + PM_ATT_BQ < T ? i0 + PM_ATT_BQ : T, nq = i1 - i0;
        for (size_t j0 = 0; j0 < i1; j0 += PM_ATT_BK) {
            size_t j1 = j0 + PM_ATT_BK < i1 ? j0 + PM_ATT_BK : i1, nk = j1 - j0;
            scores(nq, nk, hs, scale, q + i0 * ld, ld, kt, j0, i0 - j0, s);
            pm_k_att_tile_f(s, nq, nk, i0 - j0, m, l, alpha, j0 == 0);
            if (j0) /* earlier tiles' sums, rescaled to the new row maxima */
                for (size_t r = 0; r < nq; r++) pm_k_scale(o + (i0 + r) * C, alpha[r], hs);
            prod(0, nq, hs, nk, 1, s, nk, vc + j0 * hs, hs, j0 != 0, o + i0 * C, C, i0 - j0);
        }
        for (size_t r = 0; r < nq; r++) {
            pm_k_scale(o + (i0 + r) * C, 1.0f / l[r], hs);
            lse[i0 + r] = m[r] + logf(l[r]);
        }
    }
}

void pm_att_f(const pm_gpt_config *c, int B, int T, float *qkv, float *atty, float *lse,
              void *scratch) {
    att_job a = {.T = (size_t)T, .C = (size_t)c->dim, .H = (size_t)c->heads,
                 .hs = (size_t)(c->dim / c->heads), .qkv = qkv, .atty = atty, .lse = lse,
                 .work = scratch,
                 .slot_floats = pm_slot_stride(pm_att_slot_floats_f(T, c->dim / c->heads))};
    pm_par_run((size_t)B * a.H, att_f_task, &a);
}

/* B's slot (pm_att_slot_floats_b): two tiles, dK_j and dV_j of a key
 * block, dQ and D of the whole sequence, K^T and V^T in panels, and the
 * packed Q_i, dO_i (a query block) and K_j (a key block). */
typedef struct {
    float *p, *dp, *dk, *dv, *dq, *d, *kt, *vt, *qi, *oi, *kj;
} b_slot;

static b_slot b_slot_of(const att_job *a, int slot) {
    size_t T = a->T, hs = a->hs;
    b_slot w = {.p = a->work + (size_t)slot * a->slot_floats};
    w.dp = w.p + max_q(T) * max_k(T), w.dk = w.dp + max_q(T) * max_k(T);
    w.dv = w.dk + max_k(T) * hs, w.dq = w.dv + max_k(T) * hs, w.d = w.dq + T * hs;
    w.kt = w.d + T, w.vt = w.kt + panels(T, hs);
    w.qi = w.vt + panels(T, hs), w.oi = w.qi + max_q(T) * hs, w.kj = w.oi + max_q(T) * hs;
    return w;
}

/* Key block [j0, j1) against every query block that sees it. */
static void att_b_keys(const att_job *a, const float *q, const float *k, const float *dy,
                       const float *lse, const b_slot *w, size_t j0, size_t j1) {
    size_t T = a->T, C = a->C, hs = a->hs, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    float *p = w->p, *dp = w->dp, *dk = w->dk, *dv = w->dv, *dq = w->dq, *d = w->d;
    memset(dk, 0, max_k(T) * hs * sizeof(float));
    memset(dv, 0, max_k(T) * hs * sizeof(float));
    copy_rows(w->kj, hs, k + j0 * ld, ld, j1 - j0, hs);
    for (size_t i0 = j0 / PM_ATT_BQ * PM_ATT_BQ; i0 < T; i0 += PM_ATT_BQ) {
        size_t i1 = i0 + PM_ATT_BQ < T ? i0 + PM_ATT_BQ : T, nq = i1 - i0;
        size_t nk = (j1 < i1 ? j1 : i1) - j0; /* keys past i1 are masked for every row */
        copy_rows(w->qi, hs, q + i0 * ld, ld, nq, hs);
        copy_rows(w->oi, hs, dy + i0 * C, C, nq, hs);
        scores(nq, nk, hs, scale, w->qi, hs, w->kt, j0, i0 - j0, p);
        scores(nq, nk, hs, 1, w->oi, hs, w->vt, j0, i0 - j0, dp);
        pm_k_att_tile_b(p, dp, nq, nk, i0 - j0, lse + i0, d + i0);
        prod(1, nk, hs, nq, 1, p, nk, w->oi, hs, 1, dv, hs, i0 - j0);
        prod(0, nq, hs, nk, scale, dp, nk, w->kj, hs, j0 != 0, dq + i0 * hs, hs, i0 - j0);
        prod(1, nk, hs, nq, scale, dp, nk, w->qi, hs, 1, dk, hs, i0 - j0);
    }
}

static void att_b_task(const void *arg, size_t bh, int slot) {
    const att_job *a = arg;
    size_t T = a->T, C = a->C, hs = a->hs, b = bh / a->H, h = bh % a->H, ld = 3 * C;
    float *q = a->qkv + b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
    const float *o = a->atty + b * T * C + h * hs, *dy = a->datty + b * T * C + h * hs;
    const float *lse = a->lse + bh * T;
    b_slot w = b_slot_of(a, slot);
    for (size_t t = 0; t < T; t++) w.d[t] = pm_k_dot(dy + t * C, o + t * C, hs);
    pm_k_panels(w.kt, k, ld, T, hs);
    pm_k_panels(w.vt, v, ld, T, hs);
    for (size_t j0 = 0; j0 < T; j0 += PM_ATT_BK) {
        size_t j1 = j0 + PM_ATT_BK < T ? j0 + PM_ATT_BK : T;
        att_b_keys(a, q, k, dy, lse, &w, j0, j1);
        /* K_j and V_j are read by no later tile: their gradients take their place */
        copy_rows(k + j0 * ld, ld, w.dk, hs, j1 - j0, hs);
        copy_rows(v + j0 * ld, ld, w.dv, hs, j1 - j0, hs);
    }
    copy_rows(q, ld, w.dq, hs, T, hs);
}

void pm_att_b(const pm_gpt_config *c, int B, int T, float *qkv, const float *atty,
              const float *lse, const float *datty, void *scratch) {
    att_job a = {.T = (size_t)T, .C = (size_t)c->dim, .H = (size_t)c->heads,
                 .hs = (size_t)(c->dim / c->heads), .qkv = qkv, .atty = (float *)atty,
                 .lse = (float *)lse, .datty = datty, .work = scratch,
                 .slot_floats = pm_slot_stride(pm_att_slot_floats_b(T, c->dim / c->heads))};
    pm_par_run((size_t)B * a.H, att_b_task, &a);
}
