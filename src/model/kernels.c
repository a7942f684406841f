/* kernels.c: the arithmetic the layers are built from: the sgemm wrapper
 * (every matrix product goes through OpenBLAS cblas_sgemm), LayerNorm
 * forward/backward, tanh-GELU, causal softmax and its backward, the fused
 * softmax + cross-entropy, bias and column-sum helpers, and the threads.
 *
 * Determinism: every element's value comes from a fixed sequence of
 * operations that does not depend on how work is split among threads:
 * row-wise kernels split rows, column sums split columns (each column still
 * summed over rows in order), vector code handles tails with the same vector
 * arithmetic. So results are bitwise the same for any thread count. Nothing
 * here allocates. Kernels that work in place read a row (or vector) fully
 * before writing it. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include <cblas.h>

#include "model/internal.h"

/* ---- threads -------------------------------------------------------------------
 * Elementwise work runs on k_threads threads of the calling (device) thread:
 * a fork-join per kernel call with plain pthreads. A call costs tens of
 * microseconds, against milliseconds of work at training sizes; below a
 * grain of work it stays on the calling thread. */
#define MAX_KTHREADS 16
#define ROW_GRAIN 16       /* rows per thread at least */
#define ELEM_GRAIN 16384   /* elements per thread at least */
static _Thread_local int k_threads = 1;

void pm_blas_threads(int n) {
    n = n < 1 ? 1 : n;
    openblas_set_num_threads(n);
    k_threads = n > MAX_KTHREADS ? MAX_KTHREADS : n;
}

int pm_blas_threads_get(void) { return openblas_get_num_threads(); }

const char *pm_blas_core(void) { return openblas_get_corename(); }

typedef void (*range_fn)(const void *arg, size_t lo, size_t hi);
typedef struct {
    range_fn fn;
    const void *arg;
    size_t lo, hi;
} range_job;

static void *range_run(void *p) {
    range_job *j = p;
    j->fn(j->arg, j->lo, j->hi);
    return NULL;
}

/* fn over [0, n) in up to k_threads contiguous parts of at least `grain`;
 * the caller runs the first part. If a thread cannot start, its part runs
 * here: same results, only slower. */
static void par_for(size_t n, size_t grain, range_fn fn, const void *arg) {
    size_t parts = (size_t)k_threads;
    if (parts > n / grain) parts = n / grain;
    if (parts <= 1) {
        fn(arg, 0, n);
        return;
    }
    pthread_t th[MAX_KTHREADS];
    range_job job[MAX_KTHREADS];
    int started[MAX_KTHREADS] = {0};
    for (size_t p = 0; p < parts; p++) job[p] = (range_job){fn, arg, n * p / parts, n * (p + 1) / parts};
    for (size_t p = 1; p < parts; p++) started[p] = pthread_create(&th[p], NULL, range_run, &job[p]) == 0;
    range_run(&job[0]);
    for (size_t p = 1; p < parts; p++) {
        if (started[p])
            pthread_join(th[p], NULL);
        else
            range_run(&job[p]);
    }
}

void pm_k_gemm(int ta, int tb, size_t M, size_t N, size_t K, float alpha, const float *A,
               size_t lda, const float *Bm, size_t ldb, float beta, float *C, size_t ldc) {
    PM_ASSERT(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
              ldb <= INT32_MAX && ldc <= INT32_MAX);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)M, (int)N, (int)K, alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
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
        float s = 0;
        for (size_t i = 0; i < C; i++) s += xr[i];
        float m = s / (float)C;
        /* two passes: the variance of centred values cannot cancel */
        float v = 0;
        for (size_t i = 0; i < C; i++) {
            float d = xr[i] - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / (float)C + PM_LN_EPS);
        for (size_t i = 0; i < C; i++) o[i] = (xr[i] - m) * rs * a->w[i] + a->b[i];
        a->mean[r] = m;
        a->rstd[r] = rs;
    }
}

void pm_k_layernorm_f(float *out, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, size_t N, int C) {
    ln_args a = {.out = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .N = N, .C = C};
    par_for(N, ROW_GRAIN, ln_f_rows, &a);
}

/* Forward: y = xhat * w + b with xhat = (x - mean) * rstd. Backward:
 *   dxhat = dy * w;  dw += sum over rows of dy * xhat;  db += sum of dy
 *   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
static void ln_b_cols(const void *arg, size_t lo, size_t hi) {
    const ln_args *a = arg;
    size_t C = (size_t)a->C;
    for (size_t r = 0; r < a->N; r++) {
        const float *xr = a->x + r * C, *dy = a->dout + r * C;
        float m = a->cmean[r], rs = a->crstd[r];
        for (size_t i = lo; i < hi; i++) {
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
        float s1 = 0, s2 = 0;
        for (size_t i = 0; i < C; i++) {
            float dxh = dy[i] * a->w[i];
            s1 += dxh;
            s2 += dxh * ((xr[i] - m) * rs);
        }
        s1 /= (float)C;
        s2 /= (float)C;
        for (size_t i = 0; i < C; i++) {
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
    par_for((size_t)C, 64, ln_b_cols, &a);
    par_for(N, ROW_GRAIN, ln_b_rows, &a);
}

/* ---- bias and sums ------------------------------------------------------------ */

typedef struct {
    float *y;
    const float *x, *bias;
    size_t N;
    int n;
} rows_args;

static void fill_rows_range(const void *arg, size_t lo, size_t hi) {
    const rows_args *a = arg;
    size_t n = (size_t)a->n;
    for (size_t r = lo; r < hi; r++) {
        if (a->bias)
            memcpy(a->y + r * n, a->bias, n * sizeof(float));
        else
            memset(a->y + r * n, 0, n * sizeof(float));
    }
}

void pm_k_fill_rows(float *y, const float *bias, size_t N, int n) {
    rows_args a = {y, NULL, bias, N, n};
    par_for(N, ROW_GRAIN, fill_rows_range, &a);
}

static void add_bias_range(const void *arg, size_t lo, size_t hi) {
    const rows_args *a = arg;
    size_t n = (size_t)a->n;
    for (size_t r = lo; r < hi; r++) {
        const float *xr = a->x + r * n;
        float *yr = a->y + r * n;
        for (size_t i = 0; i < n; i++) yr[i] = xr[i] + a->bias[i];
    }
}

void pm_k_add_bias_rows(float *y, const float *x, const float *bias, size_t N, int n) {
    rows_args a = {y, x, bias, N, n};
    par_for(N, ROW_GRAIN, add_bias_range, &a);
}

/* columns lo..hi of g += sum over rows (in order) of d */
static void colsum_range(const void *arg, size_t lo, size_t hi) {
    const rows_args *a = arg;
    size_t n = (size_t)a->n;
    for (size_t r = 0; r < a->N; r++) {
        const float *dr = a->x + r * n;
        for (size_t i = lo; i < hi; i++) a->y[i] += dr[i];
    }
}

void pm_k_colsum_add(float *g, const float *d, size_t N, int n) {
    rows_args a = {g, d, NULL, N, n};
    /* split only when there are enough rows to pay for a thread */
    par_for((size_t)n, N >= 256 ? 64 : (size_t)n + 1, colsum_range, &a);
}

/* ---- exp, tanh, GELU ----------------------------------------------------------
 * libm's tanhf is a call per element and dominated whole training steps, so
 * exp is straight-line arithmetic on 4-float vectors (GCC/clang vector
 * extensions; 16 bytes is SSE2, the x86-64 baseline, so no ABI or target
 * flags are involved). Cephes' expf:
 * x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial (relative
 * error ~1e-7), times 2^n built in the exponent bits. Inputs are clamped to
 * [-87, 88] so 2^n stays a normal float (exp(-87) = 1.6e-38, not 0). Tails
 * shorter than 4 go through the same vector code on a padded copy, so every
 * element gets the same arithmetic wherever it sits. */
typedef float vf __attribute__((vector_size(16)));
typedef int32_t vi __attribute__((vector_size(16)));
#define VW 4 /* floats per vector */

static inline vf sel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

static inline vf vexp(vf x) {
    const vf zero = {0};
    vf lo = zero - 87.0f, hi = zero + 88.0f;
    x = sel(x < lo, lo, x);
    x = sel(x > hi, hi, x);
    vf n = x * 1.44269504088896341f + 12582912.0f; /* round to nearest */
    n = n - 12582912.0f;
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf z = r * r;
    vf p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    return p * (vf)bits;
}

/* tanh u = 1 - 2 / (exp(2u) + 1): absolute error ~1e-7, which is all GELU
 * needs (it uses 1 + tanh and 1 - tanh^2); saturates to +-1 cleanly. */
static inline vf vtanh(vf u) { return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f); }

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

static inline vf vgelu(vf v) {
    vf th = vtanh(GELU_K * (v + GELU_A * v * v * v));
    return 0.5f * v * (1.0f + th);
}

/* d/dx 0.5 x (1 + tanh u), u = k (x + a x^3):
 *   0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 a x^2) */
static inline vf vgelu_grad(vf v) {
    vf th = vtanh(GELU_K * (v + GELU_A * v * v * v));
    return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
}

static inline vf loadv(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void storev(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* tail helpers: n < VW elements through a zero-padded vector */
static inline vf load_tail(const float *p, size_t n) {
    float t[VW] = {0};
    memcpy(t, p, n * sizeof(float));
    return loadv(t);
}
static inline void store_tail(float *p, vf v, size_t n) {
    float t[VW];
    storev(t, v);
    memcpy(p, t, n * sizeof(float));
}

typedef struct {
    float *out;
    const float *d, *x;
} gelu_args;

static void gelu_f_range(const void *arg, size_t lo, size_t hi) {
    const gelu_args *a = arg;
    size_t i = lo;
    for (; i + VW <= hi; i += VW) storev(a->out + i, vgelu(loadv(a->x + i)));
    if (i < hi) store_tail(a->out + i, vgelu(load_tail(a->x + i, hi - i)), hi - i);
}

void pm_k_gelu_f(float *out, const float *x, size_t n) {
    gelu_args a = {out, NULL, x};
    par_for(n, ELEM_GRAIN, gelu_f_range, &a);
}

/* out = d * gelu'(x); out may alias d or x (a vector is read, then written). */
static void gelu_b_range(const void *arg, size_t lo, size_t hi) {
    const gelu_args *a = arg;
    size_t i = lo;
    for (; i + VW <= hi; i += VW)
        storev(a->out + i, loadv(a->d + i) * vgelu_grad(loadv(a->x + i)));
    if (i < hi)
        store_tail(a->out + i, load_tail(a->d + i, hi - i) * vgelu_grad(load_tail(a->x + i, hi - i)),
                   hi - i);
}

void pm_k_gelu_b(float *out, const float *d, const float *x, size_t n) {
    gelu_args a = {out, d, x};
    par_for(n, ELEM_GRAIN, gelu_b_range, &a);
}

/* p[j] = exp(p[j] - mx) for j < n */
static void exp_sub(float *p, size_t n, float mx) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) storev(p + i, vexp(loadv(p + i) - mx));
    if (i < n) store_tail(p + i, vexp(load_tail(p + i, n - i) - mx), n - i);
}

/* ---- softmax ------------------------------------------------------------------ */

typedef struct {
    float *s;
    int T;
} softmax_args;

/* rows lo..hi of nmat stacked (T,T) matrices; row r is row r % T of its matrix */
static void causal_softmax_rows(const void *arg, size_t lo, size_t hi) {
    const softmax_args *a = arg;
    size_t T = (size_t)a->T;
    for (size_t r = lo; r < hi; r++) {
        int i = (int)(r % T);
        float *row = a->s + r * T;
        float mx = row[0];
        for (int j = 1; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
        exp_sub(row, (size_t)i + 1, mx);
        float sum = 0;
        for (int j = 0; j <= i; j++) sum += row[j];
        float inv = 1.0f / sum;
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (size_t j = (size_t)i + 1; j < T; j++) row[j] = 0;
    }
}

void pm_k_causal_softmax(float *s, size_t nmat, int T) {
    softmax_args a = {s, T};
    par_for(nmat * (size_t)T, ROW_GRAIN, causal_softmax_rows, &a);
}

/* p = softmax(s) => ds_j = p_j (dp_j - sum_k p_k dp_k) */
void pm_k_softmax_b(float *dp, const float *p, int T) {
    for (int i = 0; i < T; i++) {
        float *d = dp + (size_t)i * (size_t)T;
        const float *pr = p + (size_t)i * (size_t)T;
        float dot = 0;
        for (int j = 0; j <= i; j++) dot += pr[j] * d[j];
        for (int j = 0; j <= i; j++) d[j] = pr[j] * (d[j] - dot);
        for (int j = i + 1; j < T; j++) d[j] = 0;
    }
}

double pm_k_softmax_xent(float *logits, const int32_t *tgt, size_t N, int V) {
    double loss = 0;
    for (size_t r = 0; r < N; r++) {
        float *row = logits + r * (size_t)V;
        float mx = row[0];
        for (int j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
        float picked = tgt ? row[tgt[r]] - mx : 0;
        exp_sub(row, (size_t)V, mx);
        float sum = 0;
        for (int j = 0; j < V; j++) sum += row[j];
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++) row[j] *= inv;
        /* -log p[t] = log(sum) - (x_t - max) */
        if (tgt) loss += (double)logf(sum) - (double)picked;
    }
    return loss;
}
