/* internal.h: private to src/model: the byte layout of every layer kind's
 * saved buffer and scratch, and the kernels the layers are built from.
 *
 * Layout invariant: in every saved buffer, the regions W reads come first
 * (offsets below `w_end`), the regions only F and B use come after, so B can
 * release the suffix. Every region starts on a 64-byte boundary; the sizes
 * pm_gpt_layer_sizes reports are exactly the ends of these layouts. */
#ifndef PM_MODEL_INTERNAL_H
#define PM_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/passes.h"
#include "pipemem/pm_gpt.h"

#define PM_ALIGN 64
#define PM_LN_EPS 1e-5f

/* Attention's tiles (attention.c): query rows and key columns per tile. */
#define PM_ATT_BQ 64
#define PM_ATT_BK 256
_Static_assert(PM_ATT_BK % PM_ATT_BQ == 0, "key blocks start on query block boundaries");
/* The head's tiles (head.c): vocabulary rows (a chunk) by token rows. */
#define PM_HEAD_CHUNK 512
#define PM_HEAD_ROWS 256

/* Byte offsets into a layer's saved buffer and scratch for (B, T).
 * Block (N = B*T rows):
 *   W prefix: ln1o (N,C) | atty (N,C) | ln2o (N,C) | gelu (N,4C)
 *             | qkv (N,3C) F: q,k,v; after B: dqkv
 *             | x1 (N,C)   F: residual after attention; after B: dx1
 *             | fc (N,4C)  F: gelu' at the MLP's pre-activation; after B: the
 *                          pre-activation's gradient
 *             | xin (N,C)  F: the block's input; after B: dout
 *             | lnst (4C)  B: this microbatch's ln_1 dw, db, ln_2 dw, db
 *   released by B: lse (B,H,T) attention's row log-sum-exp
 *             | stats (4,N) mean1 rstd1 mean2 rstd2
 * Head part k with lm_head rows [r0, r1):
 *   W prefix: lno (N,C), on a later part (N,C+3): its input message
 *             | nrm (2,N) each row's max and sum of exponentials
 *             | tgt (N) int32 | fscale (2) B's scale / N, the loss
 *             | lnst (2C) first part only
 *   released by B: xin (N,C) | stats (2,N) first part only
 *             | run (3,N) running max, sum, target logit
 * Embedding (nothing released by B):
 *   dout (N,C) written by B | tok (N) int32
 * Scratch: per-thread slots for attention's and the head's tiles, as many
 * as the job has tasks up to PM_MAX_THREADS whatever the thread count, so
 * sizes stay independent of it (pm_par_run's slots). Block F: the slots of attention F. Block B: an (N,4C) MLP
 * gradient at 0, later reused for each (N,C) gradient; from s_slots (after
 * the first (N,C)) attention B's slots. Head: at 0 each chunk's row
 * figures (max, sum), from s_tiles the (rows, chunk) tiles of logits, one
 * per slot in F and W, in B the row tile's over the part's vocabulary
 * (PM_HEAD_ROWS, R); B on the first part an (N,C) gradient after them. */
typedef struct {
    size_t ln1o, atty, ln2o, gelu, qkv, x1, fc, xin, lnst; /* block W prefix */
    size_t lse, stats;                                     /* block and head */
    size_t lno, nrm, tgt, fscale, run;                     /* head */
    size_t dout, tok;                                      /* embedding */
    size_t w_end; /* end of the W prefix = sizes.saved_w */
    size_t end;   /* whole buffer = sizes.saved */
    size_t s_slots; /* block B: offset of attention's per-thread slots */
    size_t s_tiles; /* head: offset of the logits tiles, after each chunk's row figures */
    size_t s_acc;   /* head B: offset of d lno (first part), after the tiles */
    size_t scratch_f, scratch_b, scratch_w; /* bytes */
} pm_layout;

/* The largest of a layout's three scratch sizes (BW needs B's and W's). */
static inline size_t pm_layout_scratch(const pm_layout *l) {
    size_t m = l->scratch_f > l->scratch_b ? l->scratch_f : l->scratch_b;
    return m > l->scratch_w ? m : l->scratch_w;
}

/* Appends a region of n elements of el bytes at *cur (64-byte aligned),
 * its offset in *off (if not NULL); returns 0 on overflow. (shape.c) */
int pm_layout_region(size_t *cur, size_t *off, size_t n, size_t el);
/* Vocabulary groups of a head layer (shape.c). */
int pm_head_part_groups(const pm_gpt_config *cfg, int layer);
/* Fills *lay for the layer (every block has the same); returns 0 on size
 * overflow. (shape.c) */
int pm_layout_get(const pm_gpt_config *cfg, int layer, int B, int T, pm_layout *lay);

/* ---- compute threads (pool.c) ----------------------------------------------- */

#define PM_MAX_THREADS 16 /* pm_blas_threads caps n here; scratch has this many slots */

/* One task of a parallel job; slot, below min(ntasks, PM_MAX_THREADS), is
 * one no other task of the job holds while this one runs, for per-thread
 * scratch (pm_par_slots slots cover a job). A task's results must not
 * depend on its slot. */
typedef void (*pm_task_fn)(const void *arg, size_t task, int slot);

/* Runs fn(arg, i, slot) for i in 0..ntasks-1 on the calling thread's pool
 * (set up by pm_blas_threads) and returns when all are done. Tasks may run
 * in any order and concurrently. Called from inside a task, it runs the
 * tasks serially on that thread. */
void pm_par_run(size_t ntasks, pm_task_fn fn, const void *arg);
/* Threads pm_par_run would use from here (1 inside a task). */
int pm_par_threads(void);
/* Slots a job of ntasks tasks may use: a function of the shape only. */
static inline size_t pm_par_slots(size_t ntasks) {
    return ntasks < PM_MAX_THREADS ? ntasks : PM_MAX_THREADS;
}

/* ---- kernels (kernels.c) ---------------------------------------------------- */

/* out (N,C) = LN(x) * w + b; mean, rstd (N). Two-pass mean and variance. */
void pm_k_layernorm_f(float *out, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, size_t N, int C);
/* The same on rows [r0, r1) only, on the calling thread (for fusing). */
void pm_k_layernorm_f_rows(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, size_t r0, size_t r1, int C);
/* LayerNorm backward of rows: dx = res + d/dx given dout (N,C); x, mean,
 * rstd from F; dw, db (C) accumulated. dx may alias x (read before write per
 * row); res may be NULL (no residual) or alias dx. */
void pm_k_layernorm_b(float *dx, const float *res, const float *dout, const float *x,
                      const float *mean, const float *rstd, const float *w, float *dw, float *db,
                      size_t N, int C);
/* g (n) += column sums of d (N,n), rows in order. */
void pm_k_colsum_add(float *g, const float *d, size_t N, int n);
/* The same for columns [lo, hi) only, on the calling thread. */
void pm_k_colsum_cols(float *g, const float *d, size_t N, int n, size_t lo, size_t hi);
/* out = gelu(x), tanh approximation, and g = gelu'(x) from the same tanh
 * (F keeps the derivative for B), elements [lo, hi) on the calling thread;
 * g may alias x. */
void pm_k_gelu_fg_range(float *out, float *g, const float *x, size_t lo, size_t hi);
/* out = a * b elementwise, [lo, hi); out may alias either. */
void pm_k_mul_range(float *out, const float *a, const float *b, size_t lo, size_t hi);
/* x *= f; the dot product (8 fixed lanes); p[j] = exp(p[j] - mx), j < n. */
void pm_k_scale(float *x, float f, size_t n);
float pm_k_dot(const float *x, const float *y, size_t n);
void pm_k_exp_sub(float *p, size_t n, float mx);
/* on: exp, GELU and the softmax rows use vmath.h's 4-float copy on any CPU,
 * so tests can compare the two copies' bits. */
void pm_k_vmath_v4(int on);
/* The causal band of a tile product (attention's diagonal tiles), which
 * lets the kernel skip work: PM_BAND_ALL none; PM_BAND_COLS C(i, j) is
 * wanted for j <= i + diag only (the rest of C is left unspecified);
 * PM_BAND_K_TO and PM_BAND_K_FROM the terms A(i, p) B(p, j) with p > i +
 * diag, or p < i - diag, are zero in the operands (the sum may leave them
 * out, which changes no bit of a finite sum but, after an underflow, the
 * sign of a zero). Only the AVX-512 path skips; OpenBLAS's computes all. */
typedef enum { PM_BAND_ALL, PM_BAND_COLS, PM_BAND_K_TO, PM_BAND_K_FROM } pm_band_kind;
typedef struct {
    pm_band_kind kind;
    int64_t diag;
} pm_band;

/* C (m, n) = alpha A B, plus C when acc, for attention's tiles (tilemm.c):
 * A(i, p) = A[i ars + p aks], B(p, j) = B[(j / 64) bps + p ldb + j % 64]
 * (bps 64: B row-major; else B in panels of 64 columns), within band. The
 * bits depend on the operands only. pm_k_tile_mm_blas(1) makes it use
 * OpenBLAS, as on a CPU without AVX-512 (tests compare the two; it
 * computes every entry and term), and pm_k_panels copy element by element. */
void pm_k_tile_mm(size_t m, size_t n, size_t k, float alpha, const float *A, size_t ars,
                  size_t aks, const float *B, size_t ldb, size_t bps, int acc, float *C,
                  size_t ldc, pm_band band);
void pm_k_tile_mm_blas(int on);
/* x^T for the T rows of x (ld apart, hs columns) into panels of 64 rows,
 * as pm_k_tile_mm reads a B in panels: dst[(j / 64) 64 hs + p 64 + j % 64]
 * = x[j ld + p]; the last panel's columns past T are left as they were. */
void pm_k_panels(float *dst, const float *x, size_t ld, size_t T, size_t hs);
/* Attention F's tile s (nq, nk) of scaled scores, keys j0.. for queries
 * i0.. with diag = i0 - j0 (row r sees its first diag + r + 1 keys; the
 * rest become 0): s becomes exp(s - m') with m' the running row max, m and
 * the running sums l are updated (first: set), alpha[r] = exp(m - m') by
 * which the row's earlier output must be scaled (not set when first). */
void pm_k_att_tile_f(float *s, size_t nq, size_t nk, size_t diag, float *m, float *l,
                     float *alpha, int first);
/* Attention B's tile: p (scores in) becomes P = exp(p - lse), dp (dO V^T
 * in) becomes dS = P * (dp - d); masked entries 0 in both. */
void pm_k_att_tile_b(float *p, float *dp, size_t nq, size_t nk, size_t diag, const float *lse,
                     const float *d);

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, one cblas_sgemm on
 * the calling thread. */
void pm_k_gemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
               size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc);

/* Work fused after a row block [r0, r1) of a pm_k_matmul product. */
typedef void (*pm_rows_fn)(const void *ctx, size_t r0, size_t r1);
/* pm_k_gemm cut into row blocks of pm_k_matmul_rows(M) rows, or column
 * blocks of pm_k_matmul_rows(N) columns when N > M and either neither bias,
 * res nor post is given or M rows make one block (a function of the shape
 * and of which are given only, so results do not depend on the thread
 * count), run as parallel tasks. If bias (N) is not NULL, each block of C is
 * first set to bias, or res + bias when res (M,N rows, ld N) is not NULL
 * (bias may then be NULL), and the product is added (beta is ignored). post,
 * if not NULL, runs on each row block right after its product (while it is
 * in cache), or, by columns, on blocks of 16 rows after the whole product. */
void pm_k_matmul(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc,
                 const float *bias, const float *res, pm_rows_fn post, const void *post_ctx);
size_t pm_k_matmul_rows(size_t M); /* block size for a dimension of M */
/* The head's tile t (nr, n <= PM_HEAD_CHUNK) of logits for vocabulary rows
 * c0..c0+n-1, left as it is: each row's max cm and sum of exponentials cs
 * (of l - cm, in vmath.h's total16 order), the target's logit into tl when
 * it lies in the tile. */
void pm_k_head_tile_stats(const float *t, size_t nr, size_t n, int64_t c0, const int32_t *tgt,
                          float *cm, float *cs, float *tl);
/* A tile's figures (cm, cs) merged into the running max m and sum s. */
void pm_k_head_merge(float *m, float *s, const float *cm, const float *cs, size_t nr);
/* t (logits) becomes d logits = (exp(t - m) / s - onehot(tgt)) * f, with
 * each row's max m and sum of exponentials s. */
void pm_k_head_tile_grad(float *t, size_t nr, size_t n, int64_t c0, const int32_t *tgt,
                         const float *m, const float *s, float f);

/* ---- layer passes (layers.c, attention.c, head.c) -------------------------- */

/* Copies n bytes unless dst == src; partial overlap is a caller bug. */
static inline void pm_copy_in(void *dst, const void *src, size_t n) {
    if (dst == src) return;
    const char *d = dst, *s = src;
    PM_ASSERT(d + n <= s || s + n <= d);
    memcpy(dst, src, n);
}

/* A thread's slot of n floats takes whole 64-byte lines (as the layout's
 * regions do), so every slot starts aligned. */
static inline size_t pm_slot_stride(size_t n) { return (n + 15) / 16 * 16; }

/* Score entries attention computes per (sequence, head) for length T. */
size_t pm_att_pairs(int T);
/* Floats of one thread's slot: attention F, attention B, the head. */
size_t pm_att_slot_floats_f(int T, int hs);
size_t pm_att_slot_floats_b(int T, int hs);

/* Attention of a block: F from q, k, v in qkv (B,T,3C) into atty (B,T,C)
 * and lse (B,H,T); B from datty (B,T,C) with atty and lse, writing dq, dk,
 * dv over q, k, v. scratch: the layout's slots. */
void pm_att_f(const pm_gpt_config *c, int B, int T, float *qkv, float *atty, float *lse,
              void *scratch);
void pm_att_b(const pm_gpt_config *c, int B, int T, float *qkv, const float *atty,
              const float *lse, const float *datty, void *scratch);

void pm_embed_f(const pm_gpt_config *c, int B, int T, const float *lp, const int32_t *tok,
                float *out, void *saved);
void pm_embed_b(const pm_gpt_config *c, int B, int T, const float *dout, void *saved);
void pm_embed_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved);

void pm_gpt_block_f(const pm_gpt_config *c, int B, int T, const float *lp, const float *in,
                    float *out, void *saved, void *scratch);
void pm_gpt_block_b(const pm_gpt_config *c, int B, int T, const float *lp, const float *dout,
                    float *din, void *saved, void *scratch);
void pm_gpt_block_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved);

void pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp, const float *in,
               const int32_t *tgt, float *out, float *loss, void *saved, void *scratch);
void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, float *loss, void *saved,
               void *scratch);
void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
               void *saved, void *scratch);
/* B and W in one sweep, each tile made once: bitwise B then W. */
void pm_head_bw(const pm_gpt_config *c, int layer, int B, int T, const float *lp, float *lg,
                const float *dout, float *din, float scale, float *loss, void *saved,
                void *scratch);
/* Probabilities of token row `row` (V floats into out) after a one-part
 * head's F: its logits again, from the kept ln_f output and normaliser. */
void pm_head_probs_row(const pm_gpt_config *c, int B, int T, const float *lp, const void *saved,
                       size_t row, float *out);

#endif
