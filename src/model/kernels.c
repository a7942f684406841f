/* kernels.c: the arithmetic the layers are built from: the sgemm wrappers
 * (every matrix product but attention's tiles, tilemm.c, goes through
 * OpenBLAS cblas_sgemm; pm_k_matmul
 * splits big ones into row or column blocks run as parallel tasks, with
 * optional fused per-block work), LayerNorm forward/backward, tanh-GELU,
 * causal softmax and its backward, the fused softmax + cross-entropy, bias
 * and column-sum helpers. Parallel work runs on the calling thread's pool
 * (pool.c).
 *
 * Determinism: every element's value comes from a fixed sequence of
 * operations that does not depend on how work is split among threads:
 * row-wise kernels split rows, column sums split columns (each column still
 * summed over rows in order), products split at blocks fixed by the shape,
 * row reductions use fixed lanes, vector code handles tails with the same
 * arithmetic. So results are bitwise the same for any thread count. Nothing
 * here allocates. Kernels that work in place read a row (or vector) fully
 * before writing it. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* No a * b + c contraction into FMA: GCC has it off in ISO C mode (-std=c11,
 * the Makefile's), clang needs the pragma. Without it the 16-float code
 * (AVX-512 has FMA) and the 4-float code could round differently. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#include <cblas.h>

#include "model/internal.h"
#include "passes.h"

/* ---- threads -------------------------------------------------------------------
 * Every kernel below cuts its work into tasks whose boundaries depend only
 * on the problem shape (pool.c runs them on the calling thread's pool).
 * Row-wise kernels cut rows, column sums cut columns (each column still
 * summed over all rows in order); a one-thread caller runs the whole range
 * as one piece, which gives the same values since no element depends on
 * where a piece starts (vector tails use the same arithmetic, and pieces of
 * elementwise kernels are multiples of the vector width). Matrix products
 * are different: OpenBLAS's result for an element may depend on the shape
 * of the call, so pm_k_matmul always cuts the same row blocks, whatever the
 * thread count. */
#define ROW_CHUNK 32        /* rows per task of row-wise kernels */

typedef void (*range_fn)(const void *arg, size_t lo, size_t hi);

/* Row- and element-wise kernels run on pm_gpt_par_for: each item is
 * computed alone, so the pieces it cuts never change their bits. */

/* Column reductions (each column summed over all rows, in row order) give
 * the same bits however the columns are divided, so they take one wide
 * piece per thread: narrow pieces would make every thread stream all rows
 * for a few columns each. Piece edges fall on 16-column (64-byte) marks. */
typedef struct {
    range_fn fn;
    const void *arg;
    size_t n, parts;
} cols_job;

static void cols_task(const void *p, size_t i, int slot) {
    (void)slot;
    const cols_job *j = p;
    size_t lo = i == 0 ? 0 : j->n * i / j->parts / 16 * 16;
    size_t hi = i + 1 == j->parts ? j->n : j->n * (i + 1) / j->parts / 16 * 16;
    if (lo < hi) j->fn(j->arg, lo, hi);
}

static void par_cols(size_t n, range_fn fn, const void *arg) {
    size_t parts = (size_t)pm_par_threads();
    if (parts > n / 64) parts = n / 64;
    if (parts <= 1) {
        fn(arg, 0, n);
        return;
    }
    cols_job j = {fn, arg, n, parts};
    pm_par_run(parts, cols_task, &j);
}

void pm_k_gemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
               size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc) {
    PM_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
}

/* Block size of pm_k_matmul's split: an even number of blocks of at most
 * 1024 (a multiple of 16, at least 128), so 2 threads get equal shares:
 * 2048 -> 2 x 1024, 2304 -> 4 x 576, 3072 -> 4 x 768. Every block packs the
 * whole other operand again, so fewer, bigger blocks pay less packing: at
 * the bench shape (2048 tokens, 2 threads) two blocks of 1024 tokens beat
 * four of 512 by 4% a step (six interleaved pairs, each won by the two),
 * and OpenBLAS's packing fell from 10% of the time to 8.5%. Single-threaded
 * sgemm loses ~10% at 128 rows and more below (an earlier measurement).
 * The size depends on the dimension alone, never on the thread count, so
 * the bits do not either; a third thread or more finds only two blocks
 * below 2048 rows. */
size_t pm_k_matmul_rows(size_t M) {
    size_t nb = M > 2048 ? 2 * ((M + 2047) / 2048) : 2, r = ((M + nb - 1) / nb + 15) / 16 * 16;
    return r < 128 ? 128 : r;
}

typedef struct {
    int ta, tb, by_cols; /* by_cols: tasks are column blocks of C, else row blocks */
    size_t M, N, K, lda, ldb, ldc, blk;
    float alpha, beta;
    const float *A, *Bm, *bias, *res;
    float *C;
    pm_rows_fn post;
    const void *post_ctx;
} matmul_job;

/* C[r0, r1) x [c0, c1) = res + bias, before their product is added */
static void matmul_init(const matmul_job *j, size_t r0, size_t r1, size_t c0, size_t c1) {
    for (size_t r = r0; r < r1; r++) {
        float *cr = j->C + r * j->ldc;
        const float *rr = j->res ? j->res + r * j->N : NULL;
        if (!rr)
            memcpy(cr + c0, j->bias + c0, (c1 - c0) * sizeof(float));
        else if (!j->bias)
            memcpy(cr + c0, rr + c0, (c1 - c0) * sizeof(float));
        else
            for (size_t e = c0; e < c1; e++) cr[e] = rr[e] + j->bias[e];
    }
}

static void matmul_task(const void *p, size_t i, int slot) {
    (void)slot;
    const matmul_job *j = p;
    size_t lim = j->by_cols ? j->N : j->M;
    size_t b0 = i * j->blk, b1 = b0 + j->blk < lim ? b0 + j->blk : lim;
    float beta = j->beta;
    if (j->bias || j->res) {
        if (j->by_cols) matmul_init(j, 0, j->M, b0, b1);
        else matmul_init(j, b0, b1, 0, j->N);
        beta = 1.0f;
    }
    if (j->by_cols) {
        /* column c of op(B) is column c of B, or row c of B when transposed */
        const float *bm = j->tb ? j->Bm + b0 * j->ldb : j->Bm + b0;
        pm_k_gemm(j->ta, j->tb, j->M, b1 - b0, j->K, j->alpha, j->A, j->lda, bm, j->ldb, beta,
                  j->C + b0, j->ldc);
        return;
    }
    /* row r of op(A) is row r of A, or column r of A when transposed */
    const float *a = j->ta ? j->A + b0 : j->A + b0 * j->lda;
    pm_k_gemm(j->ta, j->tb, b1 - b0, j->N, j->K, j->alpha, a, j->lda, j->Bm, j->ldb, beta,
              j->C + b0 * j->ldc, j->ldc);
    if (j->post) j->post(j->post_ctx, b0, b1);
}

/* The rows' work after a product made by columns, in blocks this small. */
#define POST_ROWS 16

static void post_task(const void *p, size_t i, int slot) {
    (void)slot;
    const matmul_job *j = p;
    size_t r0 = i * POST_ROWS, r1 = r0 + POST_ROWS < j->M ? r0 + POST_ROWS : j->M;
    j->post(j->post_ctx, r0, r1);
}

/* Rows are split unless C is wider than tall and either no per-row work is
 * fused (W's products: 512 output features by 2048 inputs) or the rows make
 * one block, which would leave every thread but one idle (a short
 * sequence's projections, the head's tiles at batch 1): then the columns,
 * each block's columns set to res + bias first and the rows' work after
 * the whole product. */
void pm_k_matmul(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc,
                 const float *bias, const float *res, pm_rows_fn post, const void *post_ctx) {
    int by_cols = N > M && (M <= pm_k_matmul_rows(M) || (!bias && !res && !post));
    size_t lim = by_cols ? N : M;
    matmul_job j = {ta, tb, by_cols, M, N, K, lda, ldb, ldc, pm_k_matmul_rows(lim), alpha, beta,
                    A, Bm, bias, res, C, post, post_ctx};
    pm_par_run((lim + j.blk - 1) / j.blk, matmul_task, &j);
    if (by_cols && post) pm_par_run((M + POST_ROWS - 1) / POST_ROWS, post_task, &j);
}

/* 4-float vectors (SSE2, the x86-64 baseline) for elementwise loops GCC -O2
 * leaves scalar; lanes do exactly the scalar arithmetic. */
typedef float f4 __attribute__((vector_size(16)));
static inline f4 ld4(const float *p) {
    f4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void st4(float *p, f4 v) { memcpy(p, &v, sizeof v); }
/* 32 floats as one value: eight SSE registers, for sums kept over many rows */
typedef float f32 __attribute__((vector_size(128)));
static inline f32 ld32(const float *p) {
    f32 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Row reductions in 8 fixed lanes (two 4-float accumulators over i mod 8),
 * lanes then added in a fixed order, then the scalar tail: the order
 * depends only on n, so results are deterministic, and the dependency
 * chain is n/8 long instead of n (the sums are also no less accurate). */
static inline float lanes_total(f4 a, f4 b, float tail) {
    f4 c = a + b;
    return ((c[0] + c[1]) + (c[2] + c[3])) + tail;
}

static float vsum(const float *x, size_t n) {
    f4 a = {0}, b = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) a += ld4(x + i), b += ld4(x + i + 4);
    float t = 0;
    for (; i < n; i++) t += x[i];
    return lanes_total(a, b, t);
}

/* sum of (x - m)^2 */
static float vsumsq_c(const float *x, float m, size_t n) {
    f4 a = {0}, b = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        f4 d0 = ld4(x + i) - m, d1 = ld4(x + i + 4) - m;
        a += d0 * d0, b += d1 * d1;
    }
    float t = 0;
    for (; i < n; i++) t += (x[i] - m) * (x[i] - m);
    return lanes_total(a, b, t);
}

static float vdot(const float *x, const float *y, size_t n) {
    f4 a = {0}, b = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) a += ld4(x + i) * ld4(y + i), b += ld4(x + i + 4) * ld4(y + i + 4);
    float t = 0;
    for (; i < n; i++) t += x[i] * y[i];
    return lanes_total(a, b, t);
}

/* ---- LayerNorm --------------------------------------------------------------- */

typedef struct {
    float *out, *mean, *rstd;                 /* forward outputs */
    const float *cmean, *crstd;               /* backward inputs */
    const float *x, *w, *b, *res, *dout;
    float *dw, *db;
    size_t N;
    int C;
} ln_args;

static void ln_f_rows(const void *arg, size_t lo, size_t hi) {
    const ln_args *a = arg;
    size_t C = (size_t)a->C;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = a->x + r * C;
        float *o = a->out + r * C;
        float m = vsum(xr, C) / (float)C;
        /* two passes: the variance of centred values cannot cancel */
        float rs = 1.0f / sqrtf(vsumsq_c(xr, m, C) / (float)C + PM_LN_EPS);
        size_t i = 0;
        for (; i + 4 <= C; i += 4)
            st4(o + i, (ld4(xr + i) - m) * rs * ld4(a->w + i) + ld4(a->b + i));
        for (; i < C; i++) o[i] = (xr[i] - m) * rs * a->w[i] + a->b[i];
        a->mean[r] = m;
        a->rstd[r] = rs;
    }
}

void pm_k_layernorm_f(float *out, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, size_t N, int C) {
    ln_args a = {.out = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .N = N, .C = C};
    pm_gpt_par_for(N, ROW_CHUNK, ln_f_rows, &a);
}

void pm_k_layernorm_f_rows(float *out, float *mean, float *rstd, const float *x, const float *w,
                           const float *b, size_t r0, size_t r1, int C) {
    ln_args a = {.out = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .N = r1, .C = C};
    ln_f_rows(&a, r0, r1);
}

/* Forward: y = xhat * w + b with xhat = (x - mean) * rstd. Backward:
 *   dxhat = dy * w;  dw += sum over rows of dy * xhat;  db += sum of dy
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
static void ln_b_cols(const void *arg, size_t lo, size_t hi) {
    const ln_args *a = arg;
    size_t C = (size_t)a->C;
    /* 32 columns at a time with both sums in registers down the rows (the
     * same operations per element, in the same order) */
    for (; lo + 32 <= hi; lo += 32) {
        f32 dw = ld32(a->dw + lo), db = ld32(a->db + lo);
        for (size_t r = 0; r < a->N; r++) {
            f32 d = ld32(a->dout + r * C + lo);
            dw += d * ((ld32(a->x + r * C + lo) - a->cmean[r]) * a->crstd[r]);
            db += d;
        }
        memcpy(a->dw + lo, &dw, sizeof dw);
        memcpy(a->db + lo, &db, sizeof db);
    }
    for (size_t r = 0; r < a->N && lo < hi; r++) {
        const float *xr = a->x + r * C, *dy = a->dout + r * C;
        float m = a->cmean[r], rs = a->crstd[r];
        size_t i = lo;
        /* 4 columns at a time, the same arithmetic per element as the tail */
        for (; i + 4 <= hi; i += 4) {
            f4 d = ld4(dy + i);
            st4(a->dw + i, ld4(a->dw + i) + d * ((ld4(xr + i) - m) * rs));
            st4(a->db + i, ld4(a->db + i) + d);
        }
        for (; i < hi; i++) {
            a->dw[i] += dy[i] * ((xr[i] - m) * rs);
            a->db[i] += dy[i];
        }
    }
}

static void ln_b_rows(const void *arg, size_t lo, size_t hi) {
    const ln_args *a = arg;
    size_t C = (size_t)a->C;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = a->x + r * C, *dy = a->dout + r * C;
        const float *rr = a->res ? a->res + r * C : NULL;
        float *o = a->out + r * C;
        float m = a->cmean[r], rs = a->crstd[r];
        /* s1 = mean(dy w), s2 = mean(dy w xhat), in 8 lanes like vsum */
        f4 a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0};
        size_t i = 0;
        for (; i + 8 <= C; i += 8) {
            f4 d0 = ld4(dy + i) * ld4(a->w + i), d1 = ld4(dy + i + 4) * ld4(a->w + i + 4);
            a1 += d0, b1 += d1;
            a2 += d0 * ((ld4(xr + i) - m) * rs), b2 += d1 * ((ld4(xr + i + 4) - m) * rs);
        }
        float t1 = 0, t2 = 0;
        for (; i < C; i++) {
            float dxh = dy[i] * a->w[i];
            t1 += dxh;
            t2 += dxh * ((xr[i] - m) * rs);
        }
        float s1 = lanes_total(a1, b1, t1) / (float)C, s2 = lanes_total(a2, b2, t2) / (float)C;
        /* dx may alias x and res: each element is read before it is written */
        for (i = 0; i + 4 <= C; i += 4) {
            f4 xh = (ld4(xr + i) - m) * rs;
            f4 v = rs * (ld4(dy + i) * ld4(a->w + i) - s1 - xh * s2);
            st4(o + i, rr ? ld4(rr + i) + v : v);
        }
        for (; i < C; i++) {
            float xh = (xr[i] - m) * rs;
            float v = rs * (dy[i] * a->w[i] - s1 - xh * s2);
            o[i] = rr ? rr[i] + v : v;
        }
    }
}

/* dw, db first: dx may overwrite x. */
void pm_k_layernorm_b(float *dx, const float *res, const float *dout, const float *x,
                      const float *mean, const float *rstd, const float *w, float *dw, float *db,
                      size_t N, int C) {
    ln_args a = {.out = dx, .cmean = mean, .crstd = rstd, .x = x, .w = w,
                 .res = res, .dout = dout, .dw = dw, .db = db, .N = N, .C = C};
    par_cols((size_t)C, ln_b_cols, &a);
    pm_gpt_par_for(N, ROW_CHUNK, ln_b_rows, &a);
}

/* ---- column sums (bias gradients) --------------------------------------------- */

typedef struct {
    float *y;
    const float *x;
    size_t N;
    int n;
} rows_args;

/* columns lo..hi of g += sum over rows (in order) of d. 32 columns at a
 * time keep their sums in registers down all the rows (each still g + d_0
 * + d_1 + ..., so the same bits) instead of loading and storing g per row;
 * the last few columns go row by row. */
static void colsum_range(const void *arg, size_t lo, size_t hi) {
    const rows_args *a = arg;
    size_t n = (size_t)a->n, i = lo;
    for (; i + 32 <= hi; i += 32) {
        f32 s = ld32(a->y + i);
        for (size_t r = 0; r < a->N; r++) s += ld32(a->x + r * n + i);
        memcpy(a->y + i, &s, sizeof s);
    }
    for (size_t r = 0; r < a->N && i < hi; r++) {
        const float *dr = a->x + r * n;
        size_t j = i;
        for (; j + 4 <= hi; j += 4) st4(a->y + j, ld4(a->y + j) + ld4(dr + j));
        for (; j < hi; j++) a->y[j] += dr[j];
    }
}

void pm_k_colsum_cols(float *g, const float *d, size_t N, int n, size_t lo, size_t hi) {
    rows_args a = {g, d, N, n};
    colsum_range(&a, lo, hi);
}

void pm_k_colsum_add(float *g, const float *d, size_t N, int n) {
    rows_args a = {g, d, N, n};
    if (N < 256) /* not worth a thread */
        colsum_range(&a, 0, (size_t)n);
    else
        par_cols((size_t)n, colsum_range, &a);
}

/* ---- exp, tanh, GELU ----------------------------------------------------------
 * libm's tanhf is a call per element and dominated whole training steps, so
 * exp is straight-line arithmetic on float vectors (GCC/clang vector
 * extensions; vmath.h). The 4-float version is SSE2, the x86-64 baseline;
 * on CPUs with AVX-512, exp, GELU and the softmax rows of attention and the
 * head run a 16-float copy of the same code compiled for that ISA (chosen
 * at run time; the bits are the same: test_vmath_widths). */
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

#define VM(name) v4_##name
#define VM_W 4
#define VM_ATTR
#include "model/vmath.h"
#undef VM
#undef VM_W
#undef VM_ATTR
#undef VM_G

#ifdef PM_X86_GNU
#define PM_HAVE_V16 1
#define VM(name) v16_##name
#define VM_W 16
#define VM_ATTR __attribute__((target("avx512f")))
#define VM_MASKED 1
#include <immintrin.h>

#include "model/vmath.h"
#undef VM
#undef VM_W
#undef VM_ATTR
#undef VM_G
#undef VM_MASKED

static int use_v16(void) {
    static atomic_int have = -1; /* -1: not asked yet */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512f") ? 1 : 0;
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}
#endif

int pm_k_v16(void) {
#ifdef PM_HAVE_V16
    return use_v16();
#else
    return 0;
#endif
}

static atomic_int g_v4; /* a test's request for the 4-float copy */

void pm_k_vmath_v4(int on) { atomic_store(&g_v4, on); }

/* vmath.h's function `name` at the widest width this CPU runs (unless a
 * test asks for the 4-float copy); both copies give the same bits. */
#ifdef PM_HAVE_V16
#define BY_WIDTH(name, ...)                                                  \
    (use_v16() && !atomic_load_explicit(&g_v4, memory_order_relaxed)        \
         ? v16_##name(__VA_ARGS__)                                           \
         : v4_##name(__VA_ARGS__))
#else
#define BY_WIDTH(name, ...) v4_##name(__VA_ARGS__)
#endif

/* The largest of x[0..n), n >= 1 (exact in any order, so every width
 * gives the same value), and x[i] *= f: attention's and the head's rows. */
static float vmax(const float *x, size_t n) { return BY_WIDTH(max, x, n); }
static void vscale(float *x, float f, size_t n) { BY_WIDTH(scale, x, f, n); }


void pm_k_gelu_fg_range(float *out, float *g, const float *x, size_t lo, size_t hi) {
    BY_WIDTH(gelu_fg, out, g, x, lo, hi);
}

void pm_k_mul_range(float *out, const float *a, const float *b, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 4 <= hi; i += 4) st4(out + i, ld4(a + i) * ld4(b + i));
    for (; i < hi; i++) out[i] = a[i] * b[i];
}

/* ---- attention tiles (attention.c) -------------------------------------------- */

void pm_k_scale(float *x, float f, size_t n) { vscale(x, f, n); }
float pm_k_dot(const float *x, const float *y, size_t n) { return vdot(x, y, n); }
/* p[j] = exp(p[j] - mx): the scaled rows' code times 1, which is exact */
void pm_k_exp_sub(float *p, size_t n, float mx) { BY_WIDTH(exp_scale, p, n, mx, 1.0f); }

/* Valid keys of tile row r: diag = i0 - j0, key j0 + c is seen by query
 * i0 + r when c <= diag + r. */
static size_t tile_valid(size_t nk, size_t diag, size_t r) {
    return diag + r + 1 < nk ? diag + r + 1 : nk;
}

void pm_k_att_tile_f(float *s, size_t nq, size_t nk, size_t diag, float *m, float *l,
                     float *alpha, int first) {
    for (size_t r = 0; r < nq; r++) {
        float *row = s + r * nk;
        size_t n = tile_valid(nk, diag, r);
        float mx = vmax(row, n), mn = first || mx > m[r] ? mx : m[r];
        float sum = BY_WIDTH(exp_sum, row, n, nk, mn);
        if (first) {
            l[r] = sum;
        } else {
            alpha[r] = expf(m[r] - mn);
            l[r] = l[r] * alpha[r] + sum;
        }
        m[r] = mn;
    }
}

/* p = softmax(s) row-wise => ds_j = p_j (dp_j - sum_k p_k dp_k), and the
 * sum is rowsum(dO * O) = d (FlashAttention-2's D). */
void pm_k_att_tile_b(float *p, float *dp, size_t nq, size_t nk, size_t diag, const float *lse,
                     const float *d) {
    for (size_t r = 0; r < nq; r++) {
        BY_WIDTH(exp_ds, p + r * nk, dp + r * nk, tile_valid(nk, diag, r), nk, lse[r], d[r]);
    }
}

/* ---- the head's tiles (head.c) -------------------------------------------------- */

void pm_k_head_tile_stats(const float *t, size_t nr, size_t n, int64_t c0, const int32_t *tgt,
                          float *cm, float *cs, float *tl) {
    for (size_t r = 0; r < nr; r++) {
        const float *row = t + r * n;
        float mx = vmax(row, n);
        int64_t k = tgt[r] >= 0 ? (int64_t)tgt[r] - c0 : -1;
        if (k >= 0 && k < (int64_t)n) tl[r] = row[k];
        cm[r] = mx, cs[r] = BY_WIDTH(exp_total, row, n, mx);
    }
}

void pm_k_head_merge(float *m, float *s, const float *cm, const float *cs, size_t nr) {
    for (size_t r = 0; r < nr; r++) {
        float mo = m[r], mn = mo > cm[r] ? mo : cm[r];
        /* the running sum, rescaled to the new max (exp(-inf) = 0 at the start) */
        s[r] = s[r] * expf(mo - mn) + cs[r] * expf(cm[r] - mn);
        m[r] = mn;
    }
}

void pm_k_head_tile_grad(float *t, size_t nr, size_t n, int64_t c0, const int32_t *tgt,
                         const float *m, const float *s, float f) {
    for (size_t r = 0; r < nr; r++) {
        PM_ASSERT(tgt[r] >= 0); /* F ran without targets */
        float *row = t + r * n;
        int64_t k = (int64_t)tgt[r] - c0;
        BY_WIDTH(exp_scale, row, n, m[r], f / s[r]);
        if (k >= 0 && k < (int64_t)n) row[k] -= f;
    }
}
