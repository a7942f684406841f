/* test_kernels.c: the model's kernels in isolation, against double-precision
 * formulas: GELU and its derivative over a wide range (the vectorised exp
 * behind them included), LayerNorm on rows with a large common offset
 * (where E[x^2] - E[x]^2 would lose every digit), the fused softmax +
 * cross-entropy on extreme logits, the causal softmax's mask, and the
 * attention tiles' products (tilemm.c, and their OpenBLAS path). Then the
 * compute threads (pool.c): every task of every job runs exactly once,
 * nested jobs run inline, and split products and GELU ranges give the same
 * bits whatever the thread count or where a range starts; column sums are
 * the plain row-order loop's, bit for bit. */
#include <math.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/internal.h"
#include "model/passes.h"

static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void **s) {
    (void)s;
    enum { n = 4003 }; /* odd: exercises the vector tail */
    float x[n], y[n], g[n], y2[n];
    for (int i = 0; i < n; i++) x[i] = -30.0f + 60.0f * (float)i / (n - 1); /* saturates both ways */
    pm_k_gelu_fg_range(y, g, x, 0, n);
    for (int i = 0; i < n; i++) {
        double want = gelu_d(x[i]);
        /* absolute 1e-6 plus 1e-6 relative: float rounding of x^3 and tanh */
        if (!(fabs(y[i] - want) <= 1e-6 + 1e-6 * fabs(want)))
            fail_msg("gelu(%g) = %.9g, want %.9g", (double)x[i], (double)y[i], want);
        double h = 1e-4, dwant = (gelu_d(x[i] + h) - gelu_d(x[i] - h)) / (2 * h);
        if (!(fabs(g[i] - dwant) <= 2e-6 + 1e-6 * fabs(dwant)))
            fail_msg("gelu'(%g) = %.9g, want %.9g", (double)x[i], (double)g[i], dwant);
    }
    /* the derivative in place over x, as the block's forward keeps it */
    pm_k_gelu_fg_range(y2, x, x, 0, n);
    assert_memory_equal(y2, y, sizeof y);
    assert_memory_equal(x, g, sizeof g);
}

static void test_layernorm_offset(void **s) {
    (void)s;
    enum { N = 3, C = 256 };
    float x[N * C], w[C], b[C], y[N * C], mean[N], rstd[N];
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, 5, 1);
    for (int i = 0; i < C; i++) w[i] = 1.0f + 0.1f * (float)i / C, b[i] = 0.01f * (float)i;
    const double offs[N] = {0, 1e3, -3e3};
    for (int k = 0; k < N; k++)
        for (int i = 0; i < C; i++) x[k * C + i] = (float)(offs[k] + pm_gpt_rng_normal(&r));
    pm_k_layernorm_f(y, mean, rstd, x, w, b, N, C);
    for (int k = 0; k < N; k++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[k * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[k * C + i] - m) * (x[k * C + i] - m);
        double rs = 1 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++) {
            double want = (x[k * C + i] - m) * rs * w[i] + b[i];
            /* the float mean of values near 3e3 carries ~1e-4 absolute error */
            if (!(fabs(y[k * C + i] - want) <= 1e-3))
                fail_msg("row %d (offset %g) col %d: %.7g want %.7g", k, offs[k], i,
                         (double)y[k * C + i], want);
        }
        assert_true(fabs(rstd[k] - rs) <= 1e-4 * rs);
    }
}

/* The head's online log-sum-exp over extreme logits, the vocabulary of 7 cut
 * into tiles of 3 and 4 words (the running max and sum carried from the
 * first into the second), then the gradient tile: probabilities minus the
 * target's one-hot. Expected values by hand. */
static void test_head_tiles_extremes(void **s) {
    (void)s;
    enum { N = 3, V = 7 };
    const float lg[N * V] = {
        1000, 0, 0, 0, 0, 0, 0,                         /* one huge logit */
        -1000, -1000, -1000, -1000, -1000, -1000, -999, /* all tiny */
        0, 0, 0, 0, 0, 0, 0,                            /* uniform */
    };
    int32_t tgt[N] = {1, 6, 3};
    float m[N] = {-INFINITY, -INFINITY, -INFINITY}, sm[N] = {0}, tl[N] = {0};
    float t[N * 4], cm[N], cs[N];
    for (int c0 = 0; c0 < V; c0 += 3 + !!c0) { /* tiles [0, 3) and [3, 7) */
        int n = c0 ? 4 : 3;
        for (int r = 0; r < N; r++) memcpy(t + r * n, lg + r * V + c0, (size_t)n * sizeof(float));
        pm_k_head_tile_stats(t, N, (size_t)n, c0, tgt, cm, cs, tl);
        pm_k_head_merge(m, sm, cm, cs, N);
        for (int r = 0; r < N; r++) /* the logits are left as they were (B keeps them) */
            assert_memory_equal(t + r * n, lg + r * V + c0, (size_t)n * sizeof(float));
    }
    double loss = 0;
    for (int r = 0; r < N; r++) loss += (double)m[r] + log((double)sm[r]) - tl[r];
    double want = 1000.0 /* -log softmax = 1000 + log(1 + 6 e^-1000) */
                  + (log(6 * exp(-1.0) + 1)) /* row 2: target is the largest */
                  + log(7.0);
    assert_true(fabs(loss - want) < 1e-4);
    for (int c0 = 0; c0 < V; c0 += 3 + !!c0) {
        int n = c0 ? 4 : 3;
        for (int r = 0; r < N; r++) memcpy(t + r * n, lg + r * V + c0, (size_t)n * sizeof(float));
        pm_k_head_tile_grad(t, N, (size_t)n, c0, tgt, m, sm, 0.5f);
        for (int r = 0; r < N; r++)
            for (int j = 0; j < n; j++) {
                double z = 0, mx = -1e30;
                for (int k = 0; k < V; k++) mx = fmax(mx, lg[r * V + k]);
                for (int k = 0; k < V; k++) z += exp(lg[r * V + k] - mx);
                double p = exp(lg[r * V + c0 + j] - mx) / z;
                double g = 0.5 * (p - (c0 + j == tgt[r]));
                if (!(fabs(t[r * n + j] - g) < 1e-6))
                    fail_msg("row %d word %d: %.8g want %.8g", r, c0 + j, (double)t[r * n + j], g);
            }
    }
}

/* Attention F's tile: with diag = i0 - j0, row r sees its first diag + r + 1
 * keys; they become exp(s - running max), the rest 0; the running max, sum
 * and the rescale factor follow two tiles in a row. By hand in double. */
static void test_att_tile_mask(void **s) {
    (void)s;
    enum { NQ = 5, NK = 8, DIAG = 2 };
    float a[NQ * NK], b[NQ * NK], m[NQ], l[NQ], alpha[NQ];
    for (int i = 0; i < NQ * NK; i++) a[i] = (float)((i * 37) % 11) - 5.0f;
    for (int i = 0; i < NQ * NK; i++) b[i] = (float)((i * 53) % 13) - 4.0f;
    float oa[NQ * NK], ob[NQ * NK];
    memcpy(oa, a, sizeof a), memcpy(ob, b, sizeof b);
    pm_k_att_tile_f(a, NQ, NK, NK + DIAG, m, l, alpha, 1); /* a full tile: every key valid */
    pm_k_att_tile_f(b, NQ, NK, DIAG, m, l, alpha, 0);      /* the diagonal tile */
    for (int r = 0; r < NQ; r++) {
        int nb = DIAG + r + 1 < NK ? DIAG + r + 1 : NK;
        double ma = -1e30, mb = -1e30, z = 0;
        for (int j = 0; j < NK; j++) ma = fmax(ma, oa[r * NK + j]);
        for (int j = 0; j < nb; j++) mb = fmax(mb, ob[r * NK + j]);
        double mx = fmax(ma, mb);
        for (int j = 0; j < NK; j++) z += exp(oa[r * NK + j] - mx);
        for (int j = 0; j < nb; j++) z += exp(ob[r * NK + j] - mx);
        assert_true(fabs(m[r] - mx) == 0);
        assert_true(fabs(l[r] - z) < 1e-5 * z);
        assert_true(fabs(alpha[r] - exp(ma - mx)) < 1e-6);
        for (int j = 0; j < NK; j++) {
            double want = j < nb ? exp(ob[r * NK + j] - mx) : 0;
            assert_true(fabs(b[r * NK + j] - want) < 1e-6);
        }
    }
}

/* Rows wider than a vector: the running max is exact wherever the largest
 * score lies (the first element, inside a vector, the tail past the last
 * whole vector), and pm_k_scale multiplies each element alone. */
static void test_att_tile_wide_rows(void **s) {
    (void)s;
    enum { NK = 37 };
    const int at[] = {0, 5, 16, 21, 33, 36};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
        float row[NK], m, l, alpha;
        for (int j = 0; j < NK; j++) row[j] = (float)((j * 29) % 17) * 0.25f - 3.0f;
        row[at[a]] = 9.5f;
        pm_k_att_tile_f(row, 1, NK, NK, &m, &l, &alpha, 1);
        assert_true(m == 9.5f);
        assert_true(row[at[a]] == 1.0f); /* exp(0) */
    }
    float x[NK];
    for (int j = 0; j < NK; j++) x[j] = (float)j - 7.25f;
    pm_k_scale(x, 0.375f, NK);
    for (int j = 0; j < NK; j++) assert_true(x[j] == ((float)j - 7.25f) * 0.375f);
}

/* F's row sum in the order the kernels document (vmath.h, total16): lane L
 * of 16 sums x[L], x[L + 16], ... in float, then lanes L and L + 8, L and
 * L + 4, and (0 + 2) + (1 + 3). Written here from that description. */
static float sum16(const float *x, int n) {
    float lane[16] = {0}, t[8];
    for (int j = 0; j < n; j++) lane[j % 16] += x[j];
    for (int k = 0; k < 8; k++) t[k] = lane[k] + lane[k + 8];
    for (int k = 0; k < 4; k++) t[k] = t[k] + t[k + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* Ragged rows wider than a vector (F: every row's valid length, 16 and 64
 * wide tiles and one not a multiple of a vector): the exponentials within
 * 1e-6 of libm's, every masked entry exactly 0, and each row's sum the
 * bits of sum16 over the row the kernel wrote, so any width gives them. */
static void att_tile_ragged_rows(void);

static void test_att_tile_ragged_rows(void **s) {
    (void)s;
    for (int v4 = 0; v4 < 2; v4++) { /* each of vmath.h's copies */
        pm_k_vmath_v4(v4);
        att_tile_ragged_rows();
    }
    pm_k_vmath_v4(0);
}

static void att_tile_ragged_rows(void) {
    enum { NQ = 20, MAXK = 70 };
    const size_t nks[] = {16, 37, 64, 70};
    float t[NQ * MAXK], o[NQ * MAXK], m[NQ], l[NQ], alpha[NQ];
    for (size_t c = 0; c < sizeof nks / sizeof nks[0]; c++) {
        size_t nk = nks[c], diag = nk > NQ ? nk - NQ : 0;
        for (size_t i = 0; i < NQ * nk; i++) o[i] = t[i] = (float)((i * 41) % 23) * 0.3f - 3.0f;
        pm_k_att_tile_f(t, NQ, nk, diag, m, l, alpha, 1);
        for (size_t r = 0; r < NQ; r++) {
            size_t n = diag + r + 1 < nk ? diag + r + 1 : nk;
            double mx = -1e30;
            for (size_t j = 0; j < n; j++) mx = fmax(mx, o[r * nk + j]);
            assert_true(m[r] == (float)mx);
            for (size_t j = 0; j < nk; j++) {
                double want = j < n ? exp(o[r * nk + j] - mx) : 0, got = t[r * nk + j];
                if (!(j < n ? fabs(got - want) < 1e-6 * want : got == 0.0))
                    fail_msg("nk %zu row %zu key %zu: %.9g want %.9g", nk, r, j, got, want);
            }
            assert_true(l[r] == sum16(t + r * nk, (int)n));
        }
    }
}

/* B's tile: P = exp(s - lse) and dS = P (dp - d) on the valid keys, 0 on
 * the masked ones, by hand in double, rows ragged across vector ends. */
static void att_tile_b_ragged(void);

static void test_att_tile_b_ragged(void **s) {
    (void)s;
    for (int v4 = 0; v4 < 2; v4++) {
        pm_k_vmath_v4(v4);
        att_tile_b_ragged();
    }
    pm_k_vmath_v4(0);
}

static void att_tile_b_ragged(void) {
    enum { NQ = 19, NK = 53, DIAG = 30 };
    float p[NQ * NK], dp[NQ * NK], op[NQ * NK], odp[NQ * NK], lse[NQ], d[NQ];
    for (int i = 0; i < NQ * NK; i++) {
        op[i] = p[i] = (float)((i * 31) % 19) * 0.25f - 2.0f;
        odp[i] = dp[i] = (float)((i * 7) % 13) * 0.1f - 0.6f;
    }
    for (int r = 0; r < NQ; r++) lse[r] = 1.5f + 0.125f * (float)r, d[r] = 0.05f * (float)r - 0.3f;
    pm_k_att_tile_b(p, dp, NQ, NK, DIAG, lse, d);
    for (int r = 0; r < NQ; r++)
        for (int j = 0; j < NK; j++) {
            int in = j < DIAG + r + 1;
            double e = in ? exp((double)op[r * NK + j] - lse[r]) : 0;
            double g = in ? e * ((double)odp[r * NK + j] - d[r]) : 0;
            if (!(in ? fabs(p[r * NK + j] - e) < 1e-6 * e : p[r * NK + j] == 0.0f))
                fail_msg("P row %d key %d: %.9g want %.9g", r, j, (double)p[r * NK + j], e);
            if (!(in ? fabs(dp[r * NK + j] - g) < 1e-6 * fabs(e) + 1e-7 : dp[r * NK + j] == 0.0f))
                fail_msg("dS row %d key %d: %.9g want %.9g", r, j, (double)dp[r * NK + j], g);
        }
}

/* vmath.h's two copies give the same bits (the AVX-512 one clamps with
 * max and min, rounds with roundscale and scales with scalef, the 4-float
 * one with selects, 1.5 2^23 and exponent bits): exp over a sweep of
 * inputs and the cases at the edges (the clamps and just inside them,
 * x log2 e exactly +-0.5 and 1.5, the ties of the rounding, +-0, +-inf,
 * NaN), GELU, and the softmax rows of attention and the head with their
 * sums. Skipped where the CPU has no AVX-512: there is one copy. */
static int same_bits(float a, float b) {
    return memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b);
}

/* Kernel `what` on a copy of in (out holds 2 n floats); returns how many
 * floats of out it made. */
static size_t run_widths(float *out, const float *in, size_t n, int what) {
    float m[64], l[64], al[64], lse[64], d[64], cm[64], cs[64], tl[64];
    int32_t tgt[64];
    memcpy(out, in, 2 * n * sizeof(float));
    switch (what) {
    case 0: pm_k_exp_sub(out, n, 0.0f); return n;
    case 1: pm_k_gelu_fg_range(out, out + n, in, 0, n); return 2 * n;
    case 2: /* a 64 x 64 diagonal tile: rows of 21 to 64 keys; their sums */
        pm_k_att_tile_f(out, 64, 64, 20, m, l, al, 1);
        memcpy(out + 64 * 64, l, sizeof l);
        return 64 * 64 + 64;
    case 3:
        for (int r = 0; r < 64; r++) lse[r] = 0.5f * (float)r - 9.0f, d[r] = 0.01f * (float)r;
        pm_k_att_tile_b(out, out + 64 * 64, 64, 64, 5, lse, d);
        return 2 * 64 * 64;
    default: /* the head: 64 rows of 61 words, their sums, then 63 rows' gradients */
        for (int r = 0; r < 64; r++) tgt[r] = r;
        pm_k_head_tile_stats(out, 64, 61, 3, tgt, cm, cs, tl);
        pm_k_head_tile_grad(out + 61, 63, 61, 3, tgt + 1, cm + 1, cs + 1, 0.25f);
        memcpy(out, cs, sizeof cs);
        return 64 * 61;
    }
}

static void test_vmath_widths(void **s) {
    (void)s;
    if (!pm_k_v16()) skip();
    enum { N = 5 * 64 * 64 };
    float *in = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float));
    float *b = malloc(N * sizeof(float));
    assert_true(in && a && b);
    const float edge[] = {0.0f, -0.0f, -87.0f, 88.0f, -87.5f, 88.5f, -86.99f, 87.99f, -100.0f,
                          200.0f, INFINITY, -INFINITY, NAN, -87.34f, -87.2f, -87.33654f,
                          0.3465736f, 0.3465736f * 3, -0.3465736f, 1e-8f, -1e-8f, 88.72f,
                          -103.0f};
    size_t ne = sizeof edge / sizeof *edge;
    for (size_t i = 0; i < N; i++)
        in[i] = i < ne ? edge[i] : (float)((i * 2654435761u) % 400001) / 1000.0f - 200.0f;
    for (size_t i = ne; i < ne + 512; i++) /* t = x log2 e near k / 4 + 1 / 8 */
        in[i] = ((float)((long)i - 256 - (long)ne) * 0.25f + 0.125f) / 1.44269504088896341f;
    for (int what = 0; what < 5; what++) {
        size_t n = 64 * 64;
        float *x = in;
        if (what >= 2) { /* scores of a realistic size */
            x = in + N - 2 * n;
            for (size_t i = 0; i < 2 * n; i++) x[i] = in[i] * 0.05f;
        }
        pm_k_vmath_v4(0);
        size_t made = run_widths(a, x, n, what);
        pm_k_vmath_v4(1);
        run_widths(b, x, n, what);
        pm_k_vmath_v4(0);
        for (size_t i = 0; i < made; i++)
            if (!same_bits(a[i], b[i]))
                fail_msg("kernel %d element %zu: 16-float %.9g, 4-float %.9g", what, i,
                         (double)a[i], (double)b[i]);
    }
    free(in), free(a), free(b);
}

/* ---- compute threads ------------------------------------------------------------ */

static atomic_int hits[64];
static atomic_int nested_threads_bad;

static void count_task(const void *arg, size_t i, int slot) {
    (void)arg;
    if (slot < 0 || slot >= PM_MAX_THREADS) atomic_fetch_add(&nested_threads_bad, 1);
    atomic_fetch_add(&hits[i], 1);
}

static void nesting_task(const void *arg, size_t i, int slot) {
    (void)arg, (void)slot;
    /* inside a task every kernel sees one thread, and a nested job runs here */
    if (pm_par_threads() != 1) atomic_fetch_add(&nested_threads_bad, 1);
    pm_par_run(3, count_task, NULL);
    atomic_fetch_add(&hits[32 + i], 1);
}

/* pm_k_tile_mm against the sum in double, at shapes that leave every kind
 * of edge (rows past a multiple of 6, columns past 16 and past a panel of
 * 64), A read as given and transposed, B row-major and in panels, with and
 * without adding to C; and the same through OpenBLAS (a CPU without
 * AVX-512). Columns of C past n keep what they held. */
static void tile_mm_case(size_t m, size_t n, size_t k, int ta, int panels, int acc) {
    size_t lda = ta ? m + 3 : k + 2, ldc = n + 5, np = (n + 63) / 64;
    size_t ldb = panels ? 64 : n + 7, bps = panels ? 64 * k : 64;
    size_t asz = ta ? (k ? (k - 1) * lda + m : 1) : (m ? (m - 1) * lda + k : 1);
    size_t bsz = panels ? np * 64 * k + 1 : k * ldb + 1;
    float *A = malloc(asz * sizeof(float)), *B = malloc(bsz * sizeof(float));
    float *C = malloc(m * ldc * sizeof(float) + 1), *C0 = malloc(m * ldc * sizeof(float) + 1);
    for (size_t i = 0; i < asz; i++) A[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
    for (size_t i = 0; i < bsz; i++) B[i] = (float)((i * 53) % 29) / 14.0f - 1.0f;
    for (size_t i = 0; i < m * ldc; i++) C0[i] = (float)((i * 17) % 13) / 6.0f - 1.0f;
    for (int blas = 0; blas < 2; blas++) {
        memcpy(C, C0, m * ldc * sizeof(float));
        pm_k_tile_mm_blas(blas);
        pm_k_tile_mm(m, n, k, 0.75f, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, bps, acc, C, ldc,
                     (pm_band){PM_BAND_ALL, 0});
        pm_k_tile_mm_blas(0);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < ldc; j++) {
                double want = acc || j >= n ? C0[i * ldc + j] : 0, mag = fabs(want);
                for (size_t p = 0; j < n && p < k; p++) {
                    double a = A[ta ? p * lda + i : i * lda + p];
                    double b = B[panels ? j / 64 * bps + p * 64 + j % 64 : p * ldb + j];
                    want += 0.75 * a * b, mag += fabs(0.75 * a * b);
                }
                double got = C[i * ldc + j];
                if (j >= n ? got != want : !(fabs(got - want) <= 1e-6 * mag + 1e-30))
                    fail_msg("%s m %zu n %zu k %zu ta %d panels %d acc %d: C[%zu][%zu] = %.9g, "
                             "want %.9g", blas ? "OpenBLAS" : "tile", m, n, k, ta, panels, acc, i,
                             j, got, want);
            }
    }
    free(A), free(B), free(C), free(C0);
}

static void test_tile_mm(void **s) {
    (void)s;
    static const size_t ms[] = {1, 5, 6, 7, 13}, ns[] = {1, 15, 16, 17, 64, 65, 130};
    static const size_t ks[] = {1, 3, 64};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++)
            for (size_t c = 0; c < sizeof ks / sizeof *ks; c++)
                for (int f = 0; f < 8; f++)
                    tile_mm_case(ms[a], ns[b], ks[c], f & 1, f >> 1 & 1, f >> 2 & 1);
}

/* A causal band (attention's diagonal tiles) against the sum in double:
 * for the K bands A's terms outside the band are zero, as P and dS are
 * there, and every entry of C must be the full sum, whichever terms the
 * kernel skipped (to the bit: skipped terms are exact zeros, so C equals
 * the dense product's bits); for PM_BAND_COLS every entry with j <= i +
 * diag. Bands that start before, at and past the tile, rows past a
 * multiple of 6 and columns past a panel, on the tile path and OpenBLAS's. */
static void band_case(pm_band_kind kind, size_t m, size_t n, size_t k, int64_t diag) {
    int ta = kind == PM_BAND_K_FROM; /* dV, dK: P^T and dS^T */
    size_t lda = ta ? m : k, bps = 64 * k, np = (n + 63) / 64;
    float *A = malloc(m * k * sizeof(float)), *B = malloc(np * bps * sizeof(float));
    float *C[3] = {malloc(m * n * sizeof(float)), malloc(m * n * sizeof(float)),
                   malloc(m * n * sizeof(float))};
    assert_true(A && B && C[0] && C[1] && C[2]);
    for (size_t i = 0; i < m; i++)
        for (size_t p = 0; p < k; p++) {
            int64_t lp = (int64_t)p, li = (int64_t)i;
            int out = kind == PM_BAND_K_TO ? lp > li + diag
                                           : kind == PM_BAND_K_FROM && lp < li - diag;
            A[ta ? p * lda + i : i * lda + p] =
                out ? 0.0f : (float)((i * 7 + p * 3) % 19) / 9.0f - 1.0f;
        }
    for (size_t i = 0; i < np * bps; i++) B[i] = (float)((i * 53) % 29) / 14.0f - 1.0f;
    for (int c = 0; c < 3; c++) { /* the band on the tiles, on OpenBLAS; no band on the tiles */
        for (size_t i = 0; i < m * n; i++) C[c][i] = 0.5f;
        pm_k_tile_mm_blas(c == 1);
        pm_k_tile_mm(m, n, k, 0.75f, A, ta ? 1 : lda, ta ? lda : 1, B, 64, bps, 1, C[c], n,
                     (pm_band){c == 2 ? PM_BAND_ALL : kind, diag});
        pm_k_tile_mm_blas(0);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            if (kind == PM_BAND_COLS && (int64_t)j > (int64_t)i + diag) continue;
            double want = 0.5, mag = 0.5;
            for (size_t p = 0; p < k; p++) {
                double a = A[ta ? p * lda + i : i * lda + p];
                double t = 0.75 * a * B[j / 64 * bps + p * 64 + j % 64];
                want += t, mag += fabs(t);
            }
            for (int c = 0; c < 2; c++)
                if (!(fabs(C[c][i * n + j] - want) <= 1e-6 * mag))
                    fail_msg("%s band %d m %zu n %zu k %zu diag %lld: C[%zu][%zu] = %.9g, "
                             "want %.9g", c ? "OpenBLAS" : "tile", (int)kind, m, n, k,
                             (long long)diag, i, j, (double)C[c][i * n + j], want);
            if (C[0][i * n + j] != C[2][i * n + j])
                fail_msg("band %d diag %lld: C[%zu][%zu] differs from the dense product's bits",
                         (int)kind, (long long)diag, i, j);
        }
    free(A), free(B), free(C[0]), free(C[1]), free(C[2]);
}

static void test_tile_band(void **s) {
    (void)s;
    static const int64_t diags[] = {-70, -3, 0, 1, 5, 63, 64, 116, 200};
    for (pm_band_kind kind = PM_BAND_COLS; kind <= PM_BAND_K_FROM; kind++) {
        for (size_t d = 0; d < sizeof diags / sizeof *diags; d++) {
            band_case(kind, 64, 64, 64, diags[d]);
            band_case(kind, 13, 130, 70, diags[d]); /* diag 116: cut in the 2-column panel */
            band_case(kind, 70, 64, 13, diags[d]);
        }
        /* attention's ragged last panels (T = 75, 1000): 11 and 40 keys, cut
         * by rows whose reach ends inside the panel's last vector */
        band_case(kind, 11, 75, 16, 64);
        band_case(kind, 40, 232, 16, 192);
    }
}

/* K^T into panels of 64 keys: every entry lands at the index the layout
 * formula gives (by hand: panel j / 64, row p, column j % 64), with and
 * without whole 16 x 16 blocks, and nothing past the last key is written,
 * on the AVX-512 path and the plain one. */
static void test_panels(void **s) {
    (void)s;
    static const size_t Ts[] = {1, 15, 16, 17, 64, 100, 257}, hss[] = {8, 16, 24, 64};
    for (int blas = 0; blas < 2; blas++) {
        pm_k_tile_mm_blas(blas);
        for (size_t a = 0; a < sizeof Ts / sizeof *Ts; a++)
            for (size_t b = 0; b < sizeof hss / sizeof *hss; b++) {
                size_t T = Ts[a], hs = hss[b], ld = hs + 5, np = (T + 63) / 64;
                float *x = malloc(T * ld * sizeof(float)), *d = malloc(np * 64 * hs * sizeof(float));
                assert_non_null(x), assert_non_null(d);
                for (size_t i = 0; i < T * ld; i++) x[i] = (float)i + 0.5f;
                for (size_t i = 0; i < np * 64 * hs; i++) d[i] = -1.0f;
                pm_k_panels(d, x, ld, T, hs);
                for (size_t j = 0; j < np * 64; j++)
                    for (size_t p = 0; p < hs; p++) {
                        float got = d[j / 64 * 64 * hs + p * 64 + j % 64];
                        float want = j < T ? (float)(j * ld + p) + 0.5f : -1.0f;
                        if (got != want)
                            fail_msg("blas %d T %zu hs %zu: key %zu dim %zu = %g, want %g", blas,
                                     T, hs, j, p, (double)got, (double)want);
                    }
                free(x), free(d);
            }
    }
    pm_k_tile_mm_blas(0);
}

/* A failed check leaves a test midway: the tests after it must still run
 * the AVX-512 paths (the tiles' and vmath.h's 16-float copy). */
static int blas_path_off(void **s) {
    (void)s;
    pm_k_tile_mm_blas(0);
    pm_k_vmath_v4(0);
    return 0;
}

static void test_pool_each_task_once(void **s) {
    (void)s;
    for (int threads = 1; threads <= 4; threads++) {
        pm_blas_threads(threads);
        assert_int_equal(pm_blas_threads_get(), threads);
        for (int job = 0; job < 3000; job++) {
            size_t n = 1 + (size_t)job % 31;
            for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
            pm_par_run(n, count_task, NULL);
            for (size_t i = 0; i < 64; i++) assert_int_equal(atomic_load(&hits[i]), i < n ? 1 : 0);
        }
        for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
        pm_par_run(8, nesting_task, NULL);
        for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&hits[i]), 8);
        for (int i = 32; i < 40; i++) assert_int_equal(atomic_load(&hits[i]), 1);
    }
    assert_int_equal(atomic_load(&nested_threads_bad), 0);
    pm_blas_threads(1);
}

typedef struct {
    atomic_int *marks; /* (1001): one count per item, then the piece count */
} mark_job;

static void mark_piece(const void *arg, size_t lo, size_t hi) {
    atomic_int *marks = ((const mark_job *)arg)->marks;
    for (size_t i = lo; i < hi; i++) atomic_fetch_add(&marks[i], 1);
    atomic_fetch_add(&marks[1000], 1); /* pieces */
}

/* pm_gpt_par_for covers [0, n) exactly once, in n/chunk pieces on several
 * threads and in one piece on one. */
static void test_par_for_pieces(void **s) {
    (void)s;
    static atomic_int marks[1001];
    for (int threads = 1; threads <= 3; threads++) {
        pm_blas_threads(threads);
        for (int i = 0; i < 1001; i++) atomic_store(&marks[i], 0);
        mark_job job = {marks};
        pm_gpt_par_for(999, 100, mark_piece, &job);
        for (int i = 0; i < 999; i++) assert_int_equal(atomic_load(&marks[i]), 1);
        assert_int_equal(atomic_load(&marks[999]), 0);
        assert_int_equal(atomic_load(&marks[1000]), threads == 1 ? 1 : 10);
    }
    pm_blas_threads(1);
}

typedef struct {
    float *y;
    size_t width;
} post_ctx;

static void scale_rows_post(const void *ctx, size_t r0, size_t r1) {
    const post_ctx *c = ctx;
    for (size_t i = r0 * c->width; i < r1 * c->width; i++) c->y[i] *= 0.5f;
}

/* One product per split kind: rows with bias + residual + post, columns
 * (wide, nothing fused), transposed A. */
static void matmuls(float *out, const float *a, const float *b, const float *bias,
                    const float *res, size_t M, size_t N, size_t K) {
    post_ctx pc = {out, N};
    pm_k_matmul(0, 1, M, N, K, 1, a, K, b, K, 0, out, N, bias, res, scale_rows_post, &pc);
    float *o2 = out + M * N, *o3 = o2 + N * M;
    pm_k_matmul(0, 0, N, M, K, 1, b, K, a, M, 0, o2, M, NULL, NULL, NULL, NULL);
    pm_k_matmul(1, 0, M, N, K, 1, a, M, b, N, 0, o3, N, NULL, NULL, NULL, NULL);
}

/* M rows against N = 1100 columns and K = 70 on 1, 2 and 3 threads: bitwise
 * alike, and the fused product right (post ran once on every row). */
static void matmuls_at(size_t M) {
    enum { N = 1100, K = 70 };
    float *a = malloc(sizeof(float) * M * K * 2), *b = malloc(sizeof(float) * N * K * 2);
    float *bias = malloc(sizeof(float) * N), *res = malloc(sizeof(float) * M * N);
    float *o[3];
    for (int t = 0; t < 3; t++) o[t] = malloc(sizeof(float) * 3 * M * N);
    assert_true(a && b && bias && res && o[0] && o[1] && o[2]);
    for (size_t i = 0; i < (size_t)M * K * 2; i++) a[i] = (float)((i * 7919) % 201) / 100.0f - 1;
    for (size_t i = 0; i < (size_t)N * K * 2; i++) b[i] = (float)((i * 104729) % 199) / 99.0f - 1;
    for (size_t i = 0; i < N; i++) bias[i] = (float)i / N;
    for (size_t i = 0; i < (size_t)M * N; i++) res[i] = (float)(i % 13);
    for (int t = 0; t < 3; t++) {
        pm_blas_threads(t + 1);
        matmuls(o[t], a, b, bias, res, M, N, K);
    }
    pm_blas_threads(1);
    assert_memory_equal(o[0], o[1], sizeof(float) * 3 * M * N);
    assert_memory_equal(o[0], o[2], sizeof(float) * 3 * M * N);
    /* and the first product is what it says: 0.5 (res + bias + a b^T) */
    for (size_t r = 0; r < M; r += 7)
        for (size_t c = 0; c < N; c += 53) {
            double want = (double)res[r * N + c] + bias[c];
            for (size_t k = 0; k < K; k++) want += (double)a[r * K + k] * b[c * K + k];
            assert_true(fabs(o[0][r * N + c] - 0.5 * want) < 1e-4 * (1 + fabs(want)));
        }
    free(a), free(b), free(bias), free(res), free(o[0]), free(o[1]), free(o[2]);
}

/* 300 rows: blocks of 160 rows / 560 columns, ragged ends; 100 rows, one
 * block: the fused product by columns, res + bias set per column block and
 * post after it, in blocks of 16 rows (the last ragged). */
static void test_matmul_threads_bitwise(void **s) {
    (void)s;
    matmuls_at(300);
    matmuls_at(100);
}

/* GELU over any sub-range gives the bits of the whole-array call: the
 * vector width and tails never change an element's arithmetic. */
static void test_gelu_ranges_bitwise(void **s) {
    (void)s;
    enum { n = 1000 };
    float x[n], d[n], whole[n], part[n], gw[n], gp[n];
    for (int i = 0; i < n; i++) x[i] = (float)(i - 500) / 61.0f, d[i] = 1.0f + (float)i / n;
    pm_k_gelu_fg_range(whole, gw, x, 0, n);
    pm_k_mul_range(gw, d, gw, 0, n);
    const size_t cuts[] = {0, 3, 4, 17, 33, 64, 65, 500, 999, n};
    for (size_t c = 0; c + 1 < sizeof cuts / sizeof cuts[0]; c++) {
        pm_k_gelu_fg_range(part, gp, x, cuts[c], cuts[c + 1]);
        pm_k_mul_range(gp, d, gp, cuts[c], cuts[c + 1]);
    }
    assert_memory_equal(whole, part, sizeof whole);
    assert_memory_equal(gw, gp, sizeof gw);
}

/* Column sums (bias gradients) and LayerNorm's weight and bias gradients
 * against the plain loop: each column's sum starts from the gradient
 * already there and adds the rows in order, in float, so the bits must be
 * the same whatever the kernels keep in registers, at widths with and
 * without a tail of columns and at 1 and 2 threads. */
static void test_column_sums_in_row_order(void **s) {
    (void)s;
    static const int widths[] = {1, 16, 31, 32, 33, 100, 176, 519}; /* 176: split at 80 */
    static const size_t rows[] = {1, 7, 300};
    for (int th = 1; th <= 2; th++) {
        pm_blas_threads(th);
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
            for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                int n = widths[wi];
                size_t N = rows[ri], nz = (size_t)n;
                float *d = malloc(N * nz * sizeof *d), *x = malloc(N * nz * sizeof *x);
                float *dx = malloc(N * nz * sizeof *dx), *mean = malloc(N * sizeof *mean);
                float *rstd = malloc(N * sizeof *rstd), *w = malloc(nz * sizeof *w);
                float *g[3], *want[3];
                for (int k = 0; k < 3; k++) g[k] = malloc(nz * sizeof(float)),
                                            want[k] = malloc(nz * sizeof(float));
                for (int k = 0; k < 3; k++) assert_non_null(g[k] && want[k]);
                assert_non_null(d && x && dx && mean && rstd && w);
                for (size_t i = 0; i < N * nz; i++)
                    d[i] = sinf(0.37f * (float)i) * 3.0f, x[i] = cosf(0.11f * (float)i) + 0.5f;
                for (size_t r = 0; r < N; r++) mean[r] = 0.01f * (float)r, rstd[r] = 1.3f;
                for (size_t c = 0; c < nz; c++) {
                    w[c] = 1.0f;
                    for (int k = 0; k < 3; k++) g[k][c] = want[k][c] = 0.25f * (float)c;
                }
                pm_k_colsum_add(g[0], d, N, n);
                pm_k_layernorm_b(dx, NULL, d, x, mean, rstd, w, g[1], g[2], N, n);
                for (size_t r = 0; r < N; r++)
                    for (size_t c = 0; c < nz; c++) {
                        float dy = d[r * nz + c], xh = (x[r * nz + c] - mean[r]) * rstd[r];
                        want[0][c] += dy;
                        want[1][c] += dy * xh;
                        want[2][c] += dy;
                    }
                for (int k = 0; k < 3; k++)
                    if (memcmp(g[k], want[k], nz * sizeof(float)))
                        fail_msg("sum %d, %zu rows x %d columns, %d threads: not the plain "
                                 "loop's bits", k, N, n, th);
                for (int k = 0; k < 3; k++) free(g[k]), free(want[k]);
                free(d), free(x), free(dx), free(mean), free(rstd), free(w);
            }
    }
    pm_blas_threads(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_layernorm_offset),
        cmocka_unit_test(test_head_tiles_extremes),
        cmocka_unit_test(test_att_tile_mask),
        cmocka_unit_test(test_att_tile_wide_rows),
        cmocka_unit_test(test_tile_band),
        cmocka_unit_test_teardown(test_vmath_widths, blas_path_off),
        cmocka_unit_test_teardown(test_att_tile_ragged_rows, blas_path_off),
        cmocka_unit_test_teardown(test_att_tile_b_ragged, blas_path_off),
        cmocka_unit_test(test_tile_mm),
        cmocka_unit_test_teardown(test_panels, blas_path_off),
        cmocka_unit_test(test_pool_each_task_once),
        cmocka_unit_test(test_par_for_pieces),
        cmocka_unit_test(test_matmul_threads_bitwise),
        cmocka_unit_test(test_gelu_ranges_bitwise),
        cmocka_unit_test(test_column_sums_in_row_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
