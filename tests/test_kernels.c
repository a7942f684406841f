/* test_kernels.c: the model's kernels in isolation, against double-precision
 * formulas: GELU and its derivative over a wide range (the vectorised exp
 * behind them included), LayerNorm on rows with a large common offset
 * (where E[x^2] - E[x]^2 would lose every digit), the fused softmax +
 * cross-entropy on extreme logits, and the causal softmax's mask. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/internal.h"

static double gelu_d(double x) {
    return 0.5 * x * (1 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void **s) {
    (void)s;
    enum { n = 4003 }; /* odd: exercises the vector tail */
    float x[n], y[n], g[n], one[n];
    for (int i = 0; i < n; i++) {
        x[i] = -30.0f + 60.0f * (float)i / (n - 1); /* saturates both ways */
        one[i] = 1.0f;
    }
    pm_k_gelu_f(y, x, n);
    pm_k_gelu_b(g, one, x, n);
    for (int i = 0; i < n; i++) {
        double want = gelu_d(x[i]);
        /* absolute 1e-6 plus 1e-6 relative: float rounding of x^3 and tanh */
        if (!(fabs(y[i] - want) <= 1e-6 + 1e-6 * fabs(want)))
            fail_msg("gelu(%g) = %.9g, want %.9g", (double)x[i], (double)y[i], want);
        double h = 1e-4, dwant = (gelu_d(x[i] + h) - gelu_d(x[i] - h)) / (2 * h);
        if (!(fabs(g[i] - dwant) <= 2e-6 + 1e-6 * fabs(dwant)))
            fail_msg("gelu'(%g) = %.9g, want %.9g", (double)x[i], (double)g[i], dwant);
    }
    /* in place over x, as the block's backward uses it */
    memcpy(y, x, sizeof x);
    pm_k_gelu_b(y, one, y, n);
    assert_memory_equal(y, g, sizeof g);
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

static void test_softmax_xent_extremes(void **s) {
    (void)s;
    enum { N = 3, V = 7 };
    float lg[N * V] = {
        1000, 0, 0, 0, 0, 0, 0,                   /* one huge logit */
        -1000, -1000, -1000, -1000, -1000, -1000, -999, /* all tiny */
        0, 0, 0, 0, 0, 0, 0,                      /* uniform */
    };
    int32_t t[N] = {1, 6, 3};
    double loss = pm_k_softmax_xent(lg, t, N, V);
    double want = 1000.0 /* -log softmax = 1000 + log(1 + 6 e^-1000) */
                  + (log(6 * exp(-1.0) + 1)) /* row 2: target is the largest */
                  + log(7.0);
    assert_true(fabs(loss - want) < 1e-4);
    for (int k = 0; k < N; k++) {
        double sum = 0;
        for (int j = 0; j < V; j++) {
            assert_true(isfinite(lg[k * V + j]) && lg[k * V + j] >= 0);
            sum += lg[k * V + j];
        }
        assert_true(fabs(sum - 1) < 1e-6);
    }
    assert_true(fabs(lg[2 * V + 3] - 1.0 / 7) < 1e-7);
}

static void test_causal_softmax_mask(void **s) {
    (void)s;
    enum { T = 9, M = 2 };
    float p[M * T * T];
    for (int i = 0; i < M * T * T; i++) p[i] = (float)((i * 37) % 11) - 5.0f;
    float orig[M * T * T];
    memcpy(orig, p, sizeof p);
    pm_k_causal_softmax(p, M, T);
    for (int m = 0; m < M; m++)
        for (int i = 0; i < T; i++) {
            const float *row = p + (m * T + i) * T, *o = orig + (m * T + i) * T;
            double mx = -1e30, z = 0;
            for (int j = 0; j <= i; j++) mx = fmax(mx, o[j]);
            for (int j = 0; j <= i; j++) z += exp(o[j] - mx);
            for (int j = 0; j < T; j++) {
                double want = j <= i ? exp(o[j] - mx) / z : 0;
                assert_true(fabs(row[j] - want) < 1e-6);
            }
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_layernorm_offset),
        cmocka_unit_test(test_softmax_xent_extremes),
        cmocka_unit_test(test_causal_softmax_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
