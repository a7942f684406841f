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

#include "pipemem/pm_gpt.h"

#define PM_ALIGN 64
#define PM_LN_EPS 1e-5f

/* Byte offsets into a layer's saved buffer and scratch for (B, T).
 * Block (N = B*T rows):
 *   W prefix: ln1o (N,C) | atty (N,C) | ln2o (N,C) | gelu (N,4C)
 *             | qkv (N,3C) F: q,k,v; after B: dqkv
 *             | x1 (N,C)   F: residual after attention; after B: dx1
 *             | fc (N,4C)  F: MLP pre-activation; after B: its gradient
 *             | xin (N,C)  F: the block's input; after B: dout
 *             | lnst (4C)  B: this microbatch's ln_1 dw, db, ln_2 dw, db
 *   released by B: att (B,H,T,T) probabilities | stats (4,N) mean1 rstd1 mean2 rstd2
 * Head part k with lm_head rows [r0, r1), R = r1 - r0, its groups ng:
 *   W prefix: lno (N,C), on a later part (N,C+3): its input message
 *             | probs (N,R): logits, exp(l - group max) after F, probabilities
 *               once the normaliser is known, logit gradients after B
 *             | lnst (2C) first part only
 *   released by B: xin (N,C) | stats (2,N) first part only | tgt (N) int32
 *             | lse (N) log-normaliser (last part) | run (3,N) running max,
 *               sum, target logit | gmax (N,ng) each group's row max
 * Embedding (nothing released by B):
 *   dout (N,C) written by B | tok (N) int32 */
typedef struct {
    size_t ln1o, atty, ln2o, gelu, qkv, x1, fc, xin, lnst; /* block W prefix */
    size_t att, stats;                                     /* block, released by B */
    size_t lno, probs, tgt, lse, run, gmax;                /* head (xin, stats, lnst shared) */
    size_t dout, tok;                                      /* embedding */
    size_t w_end; /* end of the W prefix = sizes.saved_w */
    size_t end;   /* whole buffer = sizes.saved */
    /* Scratch of B (byte offsets). Block: an (N,4C) MLP gradient at 0, later
     * reused for each (N,C) gradient; from s_att (after the first (N,C)) the
     * attention backward's per-(b,h) work: dQ, dK, dV (T,hs) and dP (T,T),
     * one such slot of att_slot bytes per compute thread (PM_MAX_THREADS
     * slots whatever the thread count, so sizes stay independent of it).
     * Head: one (N,C) gradient. F and W need no scratch. */
    size_t s_att;     /* start of the attention work area */
    size_t att_slot;  /* bytes of one thread's slot in it */
    size_t scratch_b; /* bytes */
} pm_layout;

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

/* One task of a parallel job; slot (0 .. PM_MAX_THREADS-1) names the thread
 * running it, for per-thread scratch. A task's results must not depend on
 * its slot. */
typedef void (*pm_task_fn)(const void *arg, size_t task, int slot);

/* Runs fn(arg, i, slot) for i in 0..ntasks-1 on the calling thread's pool
 * (set up by pm_blas_threads) and returns when all are done. Tasks may run
 * in any order and concurrently. Called from inside a task, it runs the
 * tasks serially on that thread. */
void pm_par_run(size_t ntasks, pm_task_fn fn, const void *arg);
/* Threads pm_par_run would use from here (1 inside a task). */
int pm_par_threads(void);

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
/* out = gelu(x), tanh approximation. */
void pm_k_gelu_f(float *out, const float *x, size_t n);
/* Elements [lo, hi) only, on the calling thread; lo a multiple of 4. */
void pm_k_gelu_f_range(float *out, const float *x, size_t lo, size_t hi);
void pm_k_gelu_b_range(float *out, const float *d, const float *x, size_t lo, size_t hi);
/* out = d * gelu'(x); out may alias d or x. */
void pm_k_gelu_b(float *out, const float *d, const float *x, size_t n);
/* Causal softmax in place of the rows of nmat stacked (T,T) score matrices
 * (entries j > i set to 0). */
void pm_k_causal_softmax(float *s, size_t nmat, int T);
/* dS = P * (dP - rowdot(P, dP)) in place over dp, causal rows. */
void pm_k_softmax_b(float *dp, const float *p, int T);
/* Softmax over the rows of logits (N,V) in place -> probabilities; returns
 * the sum over rows of -log p[target] (double) if tgt is not NULL. */
double pm_k_softmax_xent(float *logits, const int32_t *tgt, size_t N, int V);

/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major, one cblas_sgemm on
 * the calling thread. */
void pm_k_gemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
               size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc);

/* Work fused after a row block [r0, r1) of a pm_k_matmul product. */
typedef void (*pm_rows_fn)(const void *ctx, size_t r0, size_t r1);
/* pm_k_gemm cut into row blocks of pm_k_matmul_rows(M) rows, or column
 * blocks of pm_k_matmul_rows(N) columns when N > M and neither bias, res
 * nor post is given (a function of the shape only, so results do not
 * depend on the thread count), run as parallel tasks. If bias (N) is not NULL, each block's rows of C are first set to
 * bias, or res + bias when res (M,N rows, ld N) is not NULL (bias may then be
 * NULL), and the product is added (beta is ignored). post, if not NULL, runs
 * on each block right after its product (while it is in cache). */
void pm_k_matmul(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc,
                 const float *bias, const float *res, pm_rows_fn post, const void *post_ctx);
size_t pm_k_matmul_rows(size_t M); /* block size for a dimension of M */
/* Head, one vocabulary group of n columns starting at vocabulary row c0, in
 * g (ld ldg), rows [lo, hi): each row becomes exp(l - max) in place, its
 * max goes to gmax[r * ldm], the running max m[r] and sum s[r] take the
 * group's in, and tl[r] the target's logit if it is in the group. */
void pm_k_head_group_rows(float *g, size_t ldg, size_t n, int64_t c0, const int32_t *tgt,
                          float *gmax, size_t ldm, float *m, float *s, float *tl, size_t lo,
                          size_t hi);
/* Then, once lse is known: g *= exp(gmax - lse) (probabilities), and in the
 * backward g = (g - onehot) * f; rows [lo, hi). */
void pm_k_head_probs_rows(float *g, size_t ldg, size_t n, const float *gmax, size_t ldm,
                          const float *lse, size_t lo, size_t hi);
void pm_k_head_grad_rows(float *g, size_t ldg, size_t n, int64_t c0, const int32_t *tgt, float f,
                         size_t lo, size_t hi);

/* ---- layer passes (layers.c; the attention blocking is in shape.c) ---------- */

/* Causal attention's row blocks for sequence length T, and the number of
 * score entries computed per (sequence, head): sum over blocks of
 * rows * (block end). */
int pm_att_blocks(int T);
size_t pm_att_pairs(int T);

void pm_embed_f(const pm_gpt_config *c, int B, int T, const float *lp, const int32_t *tok,
                float *out, void *saved);
void pm_embed_b(const pm_gpt_config *c, int B, int T, const float *dout, void *saved);
void pm_embed_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved);

void pm_gpt_block_f(const pm_gpt_config *c, int B, int T, const float *lp, const float *in,
                float *out, void *saved);
void pm_gpt_block_b(const pm_gpt_config *c, int B, int T, const float *lp, const float *dout,
                float *din, void *saved, void *scratch);
void pm_gpt_block_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved);

float pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                const float *in, const int32_t *tgt, float *out, void *saved);
void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, void *saved, void *scratch);
void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, float *lg, const void *saved);

#endif
