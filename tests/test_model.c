/* test_model.c: the GPT layers against an independent double-precision
 * reference written here with naive loops (no BLAS, no shared code):
 *   - forward outputs of every layer kind match the reference;
 *   - every input and weight gradient from B and W matches central finite
 *     differences of the double reference (eps 1e-4 in double, so the
 *     difference quotient is exact to ~1e-8 and the tolerance only has to
 *     cover float rounding in the C code: 1e-4 of the tensor's largest
 *     gradient (measured errors are ~3e-7 of it on these shapes, while the
 *     smallest deliberate bug tried, a 0.1% change in one LayerNorm term,
 *     shows 1e-2), reported as max diff and first bad index on failure);
 *   - B then W is bitwise BW, also when adding into non-zero gradients;
 *   - byte accounting: saved_w <= saved, the released parts sum to saved,
 *     the sizes match an independent count, guard bytes past every declared
 *     size stay untouched, W never reads the part B released, F and B do not
 *     depend on what saved/scratch held before (exact-size buffers, so ASan
 *     sees any overrun);
 *   - determinism, loss at init near ln(vocab), config errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_gpt.h"
#include "model/passes.h"

/* small model: T < ctx, heads > 1, vocab not a power of two */
static const pm_gpt_config SMALL = {.vocab = 11, .ctx = 6, .dim = 8, .heads = 2, .layers = 2};
/* the shape the layer helpers use: SMALL with B = 2, T = 5, except in
 * test_gradcheck_long, which restores it */
static pm_gpt_config CFG = SMALL;
static int BB = 2, TT = 5;

/* ---- helpers ----------------------------------------------------------------- */

static void fill_normal(float *x, size_t n, float std, uint64_t seed) {
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, seed, 7);
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * pm_gpt_rng_normal(&r));
}

/* Random parameters with every tensor non-trivial (LN weights around 1,
 * non-zero biases) so every gradient path carries signal. */
static void random_params(const pm_gpt_config *c, float *p, uint64_t seed) {
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, seed, 3);
    for (int l = 0; l < pm_gpt_num_layers(c); l++) {
        pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
        int n = pm_gpt_layer_tensors(c, l, t);
        float *lp = p + pm_gpt_layer_offset(c, l);
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < t[i].numel; j++)
                lp[t[i].offset + j] =
                    t[i].init_value + (float)((t[i].ndim == 2 ? 0.3 : 0.2) * pm_gpt_rng_normal(&r));
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

/* Fails with the max difference and first index over tol * max(|ref|, floor). */
static void check_close(const char *what, const float *got, const double *ref, size_t n,
                        double tol, double floor) {
    double mx = floor;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    double md = 0;
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (!(d <= tol * mx) && bad == n) bad = i;
        if (!(d <= md)) md = d;
    }
    if (bad != n)
        fail_msg("%s: max diff %.3g > %.3g (= %.0e of max %.3g); first bad index %zu: got %.8g "
                 "want %.8g",
                 what, md, tol * mx, tol, mx, bad, (double)got[bad], ref[bad]);
}

/* ---- the double-precision reference ------------------------------------------ */

typedef struct {
    const pm_gpt_config *c;
    int B, T;
} ref_ctx;

static void ref_ln(const double *x, const double *w, const double *b, double *y, int N, int C) {
    for (int r = 0; r < N; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[r * C + i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[r * C + i] - m) * (x[r * C + i] - m);
        v /= C;
        double rs = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < C; i++) y[r * C + i] = (x[r * C + i] - m) * rs * w[i] + b[i];
    }
}

/* y (N,out) = x (N,in) W^T + b; W is (out, in) like torch.nn.Linear */
static void ref_linear(const double *x, const double *W, const double *b, double *y, int N,
                       int in, int out) {
    for (int r = 0; r < N; r++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < in; i++) s += x[r * in + i] * W[o * in + i];
            y[r * out + o] = s;
        }
}

static double ref_gelu(double x) {
    return 0.5 * x * (1 + tanh(0.79788456080286535588 /* sqrt(2/pi) */ * (x + 0.044715 * x * x * x)));
}

/* Tensors of the layer `layer` in the reference's double parameters. */
static const double *T_(const pm_gpt_config *c, int layer, const double *lp, int idx) {
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    pm_gpt_layer_tensors(c, layer, t);
    return lp + t[idx].offset;
}

static void ref_block(ref_ctx r, const double *lp, const double *x, double *out) {
    int C = r.c->dim, H = r.c->heads, hs = C / H, T = r.T, N = r.B * r.T;
    double *ln1 = calloc((size_t)N * C, 8), *qkv = calloc((size_t)N * 3 * C, 8);
    double *y = calloc((size_t)N * C, 8), *x1 = calloc((size_t)N * C, 8);
    double *ln2 = calloc((size_t)N * C, 8), *fc = calloc((size_t)N * 4 * C, 8);
    double *tmp = calloc((size_t)N * C, 8), *s = calloc((size_t)T, 8);
    ref_ln(x, T_(r.c, 1, lp, 0), T_(r.c, 1, lp, 1), ln1, N, C);
    ref_linear(ln1, T_(r.c, 1, lp, 2), T_(r.c, 1, lp, 3), qkv, N, C, 3 * C);
    for (int b = 0; b < r.B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (size_t)(b * T + t) * 3 * C + h * hs;
                double mx = -1e300, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + (size_t)(b * T + u) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i];
                    s[u] = d / sqrt((double)hs);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) sum += (s[u] = exp(s[u] - mx));
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++)
                        acc += s[u] / sum * qkv[(size_t)(b * T + u) * 3 * C + 2 * C + h * hs + i];
                    y[(size_t)(b * T + t) * C + h * hs + i] = acc;
                }
            }
    ref_linear(y, T_(r.c, 1, lp, 4), T_(r.c, 1, lp, 5), tmp, N, C, C);
    for (int i = 0; i < N * C; i++) x1[i] = x[i] + tmp[i];
    ref_ln(x1, T_(r.c, 1, lp, 6), T_(r.c, 1, lp, 7), ln2, N, C);
    ref_linear(ln2, T_(r.c, 1, lp, 8), T_(r.c, 1, lp, 9), fc, N, C, 4 * C);
    for (int i = 0; i < N * 4 * C; i++) fc[i] = ref_gelu(fc[i]);
    ref_linear(fc, T_(r.c, 1, lp, 10), T_(r.c, 1, lp, 11), tmp, N, 4 * C, C);
    for (int i = 0; i < N * C; i++) out[i] = x1[i] + tmp[i];
    free(ln1), free(qkv), free(y), free(x1), free(ln2), free(fc), free(tmp), free(s);
}

static void ref_embed(ref_ctx r, const double *lp, const int32_t *tok, double *out) {
    int C = r.c->dim;
    const double *wte = T_(r.c, 0, lp, 0), *wpe = T_(r.c, 0, lp, 1);
    for (int i = 0; i < r.B * r.T; i++)
        for (int j = 0; j < C; j++) out[i * C + j] = wte[tok[i] * C + j] + wpe[(i % r.T) * C + j];
}

/* mean cross-entropy; probs (N,V) if not NULL */
static double ref_head(ref_ctx r, const double *lp, const double *x, const int32_t *tgt,
                       double *probs) {
    int C = r.c->dim, V = r.c->vocab, N = r.B * r.T, L = r.c->layers + 1;
    double *ln = calloc((size_t)N * C, 8), *lg = calloc((size_t)N * V, 8), loss = 0;
    ref_ln(x, T_(r.c, L, lp, 0), T_(r.c, L, lp, 1), ln, N, C);
    ref_linear(ln, T_(r.c, L, lp, 2), NULL, lg, N, C, V);
    for (int i = 0; i < N; i++) {
        double mx = -1e300, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, lg[i * V + j]);
        for (int j = 0; j < V; j++) s += exp(lg[i * V + j] - mx);
        if (tgt) loss += log(s) + mx - lg[i * V + tgt[i]];
        if (probs)
            for (int j = 0; j < V; j++) probs[i * V + j] = exp(lg[i * V + j] - mx) / s;
    }
    free(ln), free(lg);
    return loss / N;
}

/* ---- one layer under test ------------------------------------------------------ */

typedef struct {
    int layer;
    pm_gpt_sizes sz;
    float *lp, *x, *dout, *out, *din, *lg;
    int32_t *tok, *tgt;
    void *saved, *scratch;
    size_t np, nx;
} lt;

static void lt_init(lt *t, int layer, uint64_t seed) {
    memset(t, 0, sizeof *t);
    t->layer = layer;
    pm_err err;
    assert_int_equal(pm_gpt_layer_sizes(&CFG, layer, BB, TT, &t->sz, &err), PM_OK);
    size_t N = BB * TT, C = (size_t)CFG.dim;
    t->np = pm_gpt_layer_params(&CFG, layer);
    t->nx = N * C;
    float *all = xmalloc(pm_gpt_num_params(&CFG) * sizeof(float));
    random_params(&CFG, all, seed);
    t->lp = xmalloc(t->np * sizeof(float));
    memcpy(t->lp, all + pm_gpt_layer_offset(&CFG, layer), t->np * sizeof(float));
    free(all);
    t->lg = calloc(t->np, sizeof(float));
    t->x = xmalloc(t->nx * sizeof(float));
    t->dout = xmalloc(t->nx * sizeof(float));
    t->out = xmalloc(t->nx * sizeof(float));
    t->din = xmalloc(t->nx * sizeof(float));
    fill_normal(t->x, t->nx, 1.0f, seed + 1);
    fill_normal(t->dout, t->nx, 1.0f, seed + 2);
    t->tok = xmalloc(N * sizeof(int32_t));
    t->tgt = xmalloc(N * sizeof(int32_t));
    for (size_t i = 0; i < N; i++) {
        t->tok[i] = (int32_t)((i * 7 + seed) % 4); /* repeats: embedding rows accumulate */
        t->tgt[i] = (int32_t)((i * 5 + seed) % (size_t)CFG.vocab);
    }
    t->saved = xmalloc(t->sz.saved); /* exact: ASan catches any overrun */
    size_t sc = t->sz.scratch_b > t->sz.scratch_w ? t->sz.scratch_b : t->sz.scratch_w;
    sc = sc > t->sz.scratch_f ? sc : t->sz.scratch_f;
    t->scratch = sc ? xmalloc(sc) : NULL;
}

static void lt_free(lt *t) {
    free(t->lp), free(t->lg), free(t->x), free(t->dout), free(t->out), free(t->din);
    free(t->tok), free(t->tgt), free(t->saved), free(t->scratch);
}

static pm_layer_kind lt_kind(const lt *t) { return pm_gpt_layer_kind(&CFG, t->layer); }

/* F with this layer's natural arguments; returns the loss for the head. */
static float lt_f(lt *t) {
    float loss = -1;
    switch (lt_kind(t)) {
    case PM_LAYER_EMBED:
        pm_gpt_layer_f(&CFG, t->layer, BB, TT, t->lp, t->tok, NULL, t->out, NULL, t->saved, NULL);
        break;
    case PM_LAYER_BLOCK:
        pm_gpt_layer_f(&CFG, t->layer, BB, TT, t->lp, t->x, NULL, t->out, NULL, t->saved,
                       t->scratch);
        break;
    default:
        pm_gpt_layer_f(&CFG, t->layer, BB, TT, t->lp, t->x, t->tgt, NULL, &loss, t->saved,
                       t->scratch);
        break;
    }
    return loss;
}

#define HEAD_SCALE 0.5f
static void lt_b(lt *t) {
    pm_layer_kind k = lt_kind(t);
    pm_gpt_layer_b(&CFG, t->layer, BB, TT, t->lp, k == PM_LAYER_HEAD ? NULL : t->dout,
                   k == PM_LAYER_EMBED ? NULL : t->din, HEAD_SCALE, NULL, t->saved, t->scratch);
}
static void lt_w(lt *t) {
    pm_gpt_layer_w(&CFG, t->layer, BB, TT, t->lp, t->lg, t->saved, t->scratch);
}
static void lt_bw(lt *t) {
    pm_layer_kind k = lt_kind(t);
    pm_gpt_layer_bw(&CFG, t->layer, BB, TT, t->lp, t->lg, k == PM_LAYER_HEAD ? NULL : t->dout,
                    k == PM_LAYER_EMBED ? NULL : t->din, HEAD_SCALE, NULL, t->saved, t->scratch);
}

/* The scalar the gradients are of: sum(out * dout) for embed/block, scale *
 * loss for the head, evaluated by the reference on double copies. */
static double ref_objective(const lt *t, const double *lp, const double *x) {
    ref_ctx r = {&CFG, BB, TT};
    if (lt_kind(t) == PM_LAYER_HEAD) return HEAD_SCALE * ref_head(r, lp, x, t->tgt, NULL);
    double *out = calloc(t->nx, 8), j = 0;
    if (lt_kind(t) == PM_LAYER_EMBED)
        ref_embed(r, lp, t->tok, out);
    else
        ref_block(r, lp, x, out);
    for (size_t i = 0; i < t->nx; i++) j += out[i] * t->dout[i];
    free(out);
    return j;
}

/* The reference indexes head tensors through layer L+1's table, block
 * tensors through layer 1's: offsets inside a layer do not depend on i. */

/* Checks every `stride`-th parameter and input element. */
static void grad_check_stride(int layer, size_t stride) {
    lt t;
    lt_init(&t, layer, 11 + (uint64_t)layer);
    lt_f(&t);
    lt_bw(&t);
    double *lp = xmalloc(t.np * 8), *x = xmalloc(t.nx * 8);
    for (size_t i = 0; i < t.np; i++) lp[i] = t.lp[i];
    for (size_t i = 0; i < t.nx; i++) x[i] = t.x[i];
    const double eps = 1e-4;
    double *num = xmalloc(t.np * 8);
    for (size_t i = 0; i < t.np; i++) {
        if (i % stride) {
            num[i] = t.lg[i]; /* not checked */
            continue;
        }
        double v = lp[i];
        lp[i] = v + eps;
        double jp = ref_objective(&t, lp, x);
        lp[i] = v - eps;
        double jm = ref_objective(&t, lp, x);
        lp[i] = v;
        num[i] = (jp - jm) / (2 * eps);
    }
    pm_gpt_tensor tens[PM_GPT_MAX_TENSORS];
    int n = pm_gpt_layer_tensors(&CFG, layer, tens);
    for (int k = 0; k < n; k++) {
        char what[128];
        snprintf(what, sizeof what, "layer %d d%.47s", layer, tens[k].name);
        check_close(what, t.lg + tens[k].offset, num + tens[k].offset, tens[k].numel, 1e-4, 1e-3);
    }
    if (lt_kind(&t) != PM_LAYER_EMBED) {
        double *dx = xmalloc(t.nx * 8);
        for (size_t i = 0; i < t.nx; i++) {
            if (i % stride) {
                dx[i] = t.din[i];
                continue;
            }
            double v = x[i];
            x[i] = v + eps;
            double jp = ref_objective(&t, lp, x);
            x[i] = v - eps;
            double jm = ref_objective(&t, lp, x);
            x[i] = v;
            dx[i] = (jp - jm) / (2 * eps);
        }
        char what[64];
        snprintf(what, sizeof what, "layer %d dinput", layer);
        check_close(what, t.din, dx, t.nx, 1e-4, 1e-3);
        free(dx);
    }
    free(lp), free(x), free(num);
    lt_free(&t);
}

static void grad_check(int layer) { grad_check_stride(layer, 1); }

static void test_gradcheck_embed(void **s) { (void)s; grad_check(0); }
static void test_gradcheck_block(void **s) { (void)s; grad_check(1); }
static void test_gradcheck_block_last(void **s) { (void)s; grad_check(CFG.layers); }
static void test_gradcheck_head(void **s) { (void)s; grad_check(CFG.layers + 1); }

/* T >= 128 takes attention's row-blocked path (causal work skipped): check
 * a block's forward and a sample of its gradients there, T odd-sized so the
 * blocks are unequal. */
static void test_gradcheck_long(void **s) {
    (void)s;
    CFG = (pm_gpt_config){.vocab = 11, .ctx = 131, .dim = 8, .heads = 2, .layers = 1};
    BB = 1;
    TT = 131;
    lt t;
    lt_init(&t, 1, 3);
    lt_f(&t);
    double *lp = xmalloc(t.np * 8), *x = xmalloc(t.nx * 8), *out = xmalloc(t.nx * 8);
    for (size_t i = 0; i < t.np; i++) lp[i] = t.lp[i];
    for (size_t i = 0; i < t.nx; i++) x[i] = t.x[i];
    ref_block((ref_ctx){&CFG, BB, TT}, lp, x, out);
    check_close("long block out", t.out, out, t.nx, 1e-5, 0);
    free(lp), free(x), free(out);
    lt_free(&t);
    grad_check_stride(1, 7);
}

static int restore_small(void **s) {
    (void)s;
    CFG = SMALL;
    BB = 2;
    TT = 5;
    return 0;
}

/* ---- forward against the reference ---------------------------------------------- */

static void test_forward_matches_reference(void **s) {
    (void)s;
    ref_ctx r = {&CFG, BB, TT};
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt t;
        lt_init(&t, layer, 5);
        float loss = lt_f(&t);
        double *lp = xmalloc(t.np * 8), *x = xmalloc(t.nx * 8);
        for (size_t i = 0; i < t.np; i++) lp[i] = t.lp[i];
        for (size_t i = 0; i < t.nx; i++) x[i] = t.x[i];
        if (lt_kind(&t) == PM_LAYER_HEAD) {
            size_t nv = (size_t)BB * TT * CFG.vocab;
            double *pr = xmalloc(nv * 8);
            double want = ref_head(r, lp, x, t.tgt, pr);
            assert_true(fabs(loss - want) <= 1e-5 * fabs(want));
            float *got = xmalloc(nv * sizeof(float));
            for (size_t row = 0; row < (size_t)BB * TT; row++)
                pm_gpt_head_probs_row(&CFG, BB, TT, t.lp, t.saved, row, got + row * CFG.vocab);
            check_close("head probs", got, pr, nv, 1e-5, 0);
            free(got);
            free(pr);
        } else {
            double *out = xmalloc(t.nx * 8);
            if (layer == 0)
                ref_embed(r, lp, t.tok, out);
            else
                ref_block(r, lp, x, out);
            check_close(layer ? "block out" : "embed out", t.out, out, t.nx, 1e-5, 0);
            free(out);
        }
        free(lp), free(x);
        lt_free(&t);
    }
}

/* ---- B;W == BW ------------------------------------------------------------------- */

static void test_b_then_w_equals_bw(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt a, b;
        lt_init(&a, layer, 21);
        lt_init(&b, layer, 21);
        /* non-zero gradients already there: accumulation must match too */
        fill_normal(a.lg, a.np, 0.1f, 99);
        memcpy(b.lg, a.lg, a.np * sizeof(float));
        lt_f(&a);
        lt_f(&b);
        lt_b(&a);
        lt_w(&a);
        lt_bw(&b);
        assert_memory_equal(a.lg, b.lg, a.np * sizeof(float));
        if (lt_kind(&a) != PM_LAYER_EMBED)
            assert_memory_equal(a.din, b.din, a.nx * sizeof(float));
        lt_free(&a);
        lt_free(&b);
    }
}

/* Accumulation: W adds to what is there. A second W of the same microbatch
 * gives g + g up to the rounding of adding in blocks (sgemm with beta = 1 and
 * row-by-row bias sums add partial sums into the gradient as they go). */
static void test_w_accumulates(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt t;
        lt_init(&t, layer, 23);
        lt_f(&t);
        lt_b(&t);
        lt_w(&t); /* grads were zero: lg = d */
        float *d = xmalloc(t.np * sizeof(float));
        double *twice = xmalloc(t.np * sizeof(double));
        memcpy(d, t.lg, t.np * sizeof(float));
        for (size_t i = 0; i < t.np; i++) twice[i] = 2.0 * d[i];
        lt_w(&t); /* W reads only saved, which W leaves alone */
        check_close("second W", t.lg, twice, t.np, 1e-6, 1e-6);
        free(d);
        free(twice);
        lt_free(&t);
    }
}

/* ---- byte accounting ------------------------------------------------------------- */

#define GUARD 256
static void fill_pattern(void *p, size_t n, unsigned char v) { memset(p, v, n); }
static int untouched(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void test_sizes_accounting(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        pm_gpt_sizes z;
        assert_int_equal(pm_gpt_layer_sizes(&CFG, layer, BB, TT, &z, NULL), PM_OK);
        assert_true(z.saved > 0);
        /* The embedding's W reads everything F kept (its B only copies
         * dout for W), so B releases nothing there; every other layer's B
         * releases what only B reads (attention scores, the head's
         * normalised input), so saved_w < saved: the split-backward memory
         * saving the schedules count on. */
        if (layer == 0) assert_int_equal(z.saved_w, z.saved);
        else if (z.saved_w >= z.saved)
            fail_msg("layer %d: B releases nothing (saved %zu, saved_w %zu)", layer, z.saved,
                     z.saved_w);
        /* only the embedding needs no scratch; the block's F and the
         * head's every pass work in tiles */
        if (layer == 0) assert_true(!z.scratch_f && !z.scratch_b && !z.scratch_w);
        else assert_true(z.scratch_f > 0 && z.scratch_b > 0);
        if (pm_gpt_layer_kind(&CFG, layer) == PM_LAYER_BLOCK) assert_int_equal(z.scratch_w, 0);
    }
}

/* Independent count on a shape where every region is a multiple of 64
 * bytes (N*C, 4C, N and B*H*T all multiples of 16 floats), from the
 * formulas in docs/memory.md, with attention's tiles of min(T, 64) queries by
 * min(T, 256) keys and the head's of every token by min(V, 512) words:
 *   block F keeps 16 N C + 4 C + B H T + 4 N floats (its log-sum-exp per
 *   head and row, no T x T), after B 16 N C + 4 C; its F's scratch is a
 *   slot of q k + 3 q floats (q by k the tile) per task, (sequence, head), up
 *   to 16, its B's the larger of (N, 4C) and (N, C) + as many slots of
 *   2 q k + 2 k hs + T hs + T floats;
 *   head F keeps N C (ln_f's output) + 2N (normaliser) + 1 (B's scale) + 2C floats
 *   + N int32 (targets) for W, and its input N C, LayerNorm statistics 2N
 *   and running max, sum, target logit 3N until B: no (N, V); its scratch
 *   the tile, and in B an (N, C) gradient after it on the first part;
 *   embedding keeps N C floats + N int32 throughout.
 * A head in 2 parts over a vocabulary of 8200 (groups of 4096, 4096 and 8:
 * the first part one group, the second two): the second part's input is
 * (N, C+3); it keeps that, the normaliser, its scale and the targets for W, and the
 * running figures until B. */
/* The head cut into 1, 2 or 3 parts (a vocabulary of 9000: groups of
 * 4096, 4096, 808) is the same model to the bit: the same initial
 * parameters, loss and gradients, here through the whole-model passes and
 * with the targets of the last group's rows among them. */
static void test_head_parts_bitwise(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 9000, .ctx = 8, .dim = 16, .heads = 2, .layers = 1};
    int B = 2, T = 8;
    size_t n = pm_gpt_num_params(&c);
    int32_t tok[16], tgt[16];
    for (int i = 0; i < 16; i++) tok[i] = (i * 977) % 9000, tgt[i] = (i * 2311 + 8500) % 9000;
    float *p[3], *g[3], loss[3];
    for (int h = 0; h < 3; h++) {
        c.head_parts = h + 1;
        assert_int_equal(pm_gpt_num_layers(&c), 3 + h);
        assert_int_equal(pm_gpt_num_params(&c), n);
        p[h] = malloc(n * sizeof(float));
        g[h] = calloc(n, sizeof(float));
        void *w = malloc(pm_gpt_work_bytes(&c, B, T));
        assert_non_null(p[h] && g[h] && w);
        pm_gpt_init(&c, 7, p[h]);
        loss[h] = pm_gpt_forward_backward(&c, B, T, p[h], g[h], tok, tgt, 1.0f, w);
        free(w);
    }
    assert_true(fabsf(loss[0] - logf(9000.0f)) < 0.1f); /* near uniform at init */
    for (int h = 1; h < 3; h++) {
        assert_memory_equal(p[0], p[h], n * sizeof(float));
        assert_memory_equal(&loss[0], &loss[h], sizeof(float));
        assert_memory_equal(g[0], g[h], n * sizeof(float));
    }
    for (int h = 0; h < 3; h++) free(p[h]), free(g[h]);
}

/* A block's attention scratch past one tile and one panel (T = 300, hs =
 * 64: query tiles of 64, key blocks of 256, 5 panels of 64 keys), by
 * memory.md's formulas, each slot rounded to 64 bytes, one per (sequence,
 * head) task: F a q x k tile, 3 rows, K^T's panels and V packed; B, above
 * the (N, C) gradient, two q x k tiles, dK_j and dV_j, dQ, D, K^T's
 * and V^T's panels, and Q_i, dO_i, K_j packed. */
static void test_sizes_attention_slots(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 32, .ctx = 300, .dim = 128, .heads = 2, .layers = 1};
    size_t T = 300, C = 128, hs = 64, q = 64, k = 256, kt = 5 * 64 * hs, f = 4;
    pm_gpt_sizes b;
    assert_int_equal(pm_gpt_layer_sizes(&c, 1, 1, (int)T, &b, NULL), PM_OK);
    size_t slot_f = q * k + 3 * q + kt + T * hs;
    size_t slot_b = 2 * q * k + 2 * k * hs + T * hs + T + 2 * kt + (2 * q + k) * hs;
    assert_int_equal(b.scratch_f, 2 * ((slot_f * f + 63) / 64 * 64));
    assert_int_equal(b.scratch_b, T * C * f + 2 * ((slot_b * f + 63) / 64 * 64));
}

static void test_sizes_independent_count(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 32, .ctx = 16, .dim = 16, .heads = 4, .layers = 3};
    size_t B = 2, T = 16, N = B * T, C = 16, V = 32, H = 4, f = 4;
    pm_gpt_sizes e, b, h;
    assert_int_equal(pm_gpt_layer_sizes(&c, 0, (int)B, (int)T, &e, NULL), PM_OK);
    assert_int_equal(pm_gpt_layer_sizes(&c, 2, (int)B, (int)T, &b, NULL), PM_OK);
    assert_int_equal(pm_gpt_layer_sizes(&c, 4, (int)B, (int)T, &h, NULL), PM_OK);
    assert_int_equal(e.saved, N * C * f + N * 4);
    assert_int_equal(e.saved_w, e.saved);
    /* T = 16: tiles of 16 x 16; K^T (and in B V^T) in one panel of 64
     * columns (tilemm.c), 16 of them used; F's V (T hs) and B's Q_i, dO_i
     * and K_j (3 T hs) packed */
    size_t hs = C / H, kt = 64 * hs;
    size_t slot_b = 2 * T * T + 2 * T * hs + T * hs + T + 2 * kt + 3 * T * hs;
    assert_int_equal(b.saved, (16 * N * C + 4 * C + B * H * T + 4 * N) * f);
    assert_int_equal(b.saved_w, (16 * N * C + 4 * C) * f);
    /* a slot per task, up to 16: B H = 8 attention tasks */
    assert_int_equal(b.scratch_f, 8 * (T * T + 3 * T + kt + T * hs) * f);
    assert_int_equal(b.scratch_b, N * C * f + 8 * slot_b * f); /* above the MLP's 4 N C */
    assert_true(N * C * f + 8 * slot_b * f > 4 * N * C * f);
    assert_int_equal(b.scratch_w, 0);
    assert_int_equal(h.saved_w, (N * C + 2 * N + 2 * C) * f + 64 + N * 4); /* the scale: a line */
    assert_int_equal(h.saved, h.saved_w + (N * C + 2 * N + 3 * N) * f);
    /* one chunk's row figures (max, sum: 2 N), then its tile: every token
     * row by min(V, 512) words (one slot: one chunk); B's d lno after it */
    assert_int_equal(h.scratch_f, (2 * N + N * V) * f);
    assert_int_equal(h.scratch_w, h.scratch_f);
    assert_int_equal(h.scratch_b, N * C * f + h.scratch_f);
    assert_int_equal(e.in, N * 4);
    assert_int_equal(b.in, N * C * f);
    assert_int_equal(h.out, 0);
    /* block matmul flops: 12 C^2 weights, 2 flops per multiply-add, 3 passes */
    assert_true(b.flops_w == 2.0 * N * 12 * C * C);
    assert_true(b.flops_bw == b.flops_b + b.flops_w && b.flops_eval == b.flops_f);
    /* a one-part head: the trainer's F none; an evaluation's the logits; B and W the
     * logits and one product each, BW the logits once */
    assert_true(h.flops_f == 0 && h.flops_eval == 2.0 * N * C * V);
    assert_true(h.flops_b == 4.0 * N * C * V && h.flops_w == 4.0 * N * C * V);
    assert_true(h.flops_bw == 6.0 * N * C * V);
    pm_gpt_config c2 = {.vocab = 8200, .ctx = 16, .dim = 16, .heads = 4, .layers = 3,
                        .head_parts = 2};
    pm_gpt_sizes h0, h1;
    assert_int_equal(pm_gpt_num_layers(&c2), 6);
    assert_int_equal(pm_gpt_layer_sizes(&c2, 4, (int)B, (int)T, &h0, NULL), PM_OK);
    assert_int_equal(pm_gpt_layer_sizes(&c2, 5, (int)B, (int)T, &h1, NULL), PM_OK);
    assert_int_equal(h0.in, N * C * f);
    assert_int_equal(h0.out, N * (C + 3) * f);
    assert_int_equal(h1.in, N * (C + 3) * f);
    assert_int_equal(h1.out, 0);
    assert_int_equal(h1.saved_w, (N * (C + 3) + 2 * N) * f + 64 + N * 4);
    assert_int_equal(h1.saved, h1.saved_w + 3 * N * f);
    /* rows 4096..8199: 9 chunks (8 of 512, one of 8), 2 N figures each; F
     * and W a 512-word tile per chunk's slot (9 tasks, 9 slots), B the
     * part's 4104 words of the row tile (a later part's d lno is its din) */
    assert_int_equal(h1.scratch_f, (9 * 2 * N + 9 * N * 512) * f);
    assert_int_equal(h1.scratch_b, (9 * 2 * N + N * 4104) * f);
    assert_int_equal(h1.scratch_w, h1.scratch_f);
    /* F one product by the part's rows; B and W two each (the logits again) */
    assert_true(h0.flops_f == 2.0 * N * C * 4096 && h1.flops_f == 2.0 * N * C * 4104);
    assert_true(h1.flops_b == 2 * h1.flops_f && h1.flops_w == 2 * h1.flops_f);
    assert_true(h1.flops_model == 3 * h1.flops_f);
    assert_true(h1.flops_bw == 3 * h1.flops_f && h1.flops_eval == h1.flops_f);
    assert_int_equal(pm_gpt_layer_params(&c2, 4), 2 * C + 4096 * C);
    assert_int_equal(pm_gpt_layer_params(&c2, 5), 4104 * C);
    assert_int_equal(pm_gpt_layer_offset(&c2, 5), pm_gpt_layer_offset(&c2, 4) + 2 * C + 4096 * C);
    assert_int_equal(pm_gpt_num_params(&c2), pm_gpt_layer_offset(&c2, 4) + 2 * C + 8200 * C);
    c2.head_parts = 4; /* 3 groups */
    assert_int_equal(pm_gpt_config_check(&c2, NULL), PM_ERR_ARG);
}

/* Guards past saved and scratch stay untouched by F, B and W; W's result
 * does not depend on saved[saved_w..saved) after B; F and B give the same
 * results whatever saved and scratch held before. */
static void test_guards_and_release(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt ref, t;
        lt_init(&ref, layer, 31);
        lt_f(&ref);
        lt_bw(&ref);

        lt_init(&t, layer, 31);
        size_t sv = t.sz.saved, sc = t.sz.scratch_b > t.sz.scratch_f ? t.sz.scratch_b : t.sz.scratch_f;
        sc = sc > t.sz.scratch_w ? sc : t.sz.scratch_w;
        unsigned char *saved = xmalloc(sv + GUARD), *scratch = xmalloc(sc + GUARD);
        fill_pattern(saved, sv + GUARD, 0xFF); /* NaN floats everywhere */
        fill_pattern(scratch, sc + GUARD, 0xFF);
        free(t.saved);
        free(t.scratch);
        t.saved = saved;
        t.scratch = scratch;
        float loss = lt_f(&t);
        assert_true(untouched(saved + sv, GUARD, 0xFF));
        assert_true(untouched(scratch + t.sz.scratch_f, sc - t.sz.scratch_f + GUARD, 0xFF));
        if (lt_kind(&t) == PM_LAYER_HEAD) assert_true(isfinite(loss));
        else assert_memory_equal(t.out, ref.out, t.nx * sizeof(float));
        fill_pattern(scratch, sc, 0xFF);
        lt_b(&t);
        assert_true(untouched(saved + sv, GUARD, 0xFF));
        assert_true(untouched(scratch + t.sz.scratch_b, sc - t.sz.scratch_b + GUARD, 0xFF));
        /* release: scribble over what B gave back and over scratch */
        fill_pattern(saved + t.sz.saved_w, sv - t.sz.saved_w, 0xFF);
        fill_pattern(scratch, sc, 0xFF);
        lt_w(&t);
        assert_true(untouched(saved + sv, GUARD, 0xFF));
        assert_true(untouched(scratch + t.sz.scratch_w, sc - t.sz.scratch_w + GUARD, 0xFF));
        assert_memory_equal(t.lg, ref.lg, t.np * sizeof(float));
        if (lt_kind(&t) != PM_LAYER_EMBED)
            assert_memory_equal(t.din, ref.din, t.nx * sizeof(float));
        lt_free(&t);
        lt_free(&ref);
    }
}

/* F with `in` already in the input slot skips the copy and gives the same. */
static void test_input_slot_alias(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt a, b;
        lt_init(&a, layer, 41);
        lt_init(&b, layer, 41);
        memset(a.saved, 0, a.sz.saved); /* regions F leaves alone compare equal */
        memset(b.saved, 0, b.sz.saved);
        float la = lt_f(&a);
        void *slot = pm_gpt_layer_input_slot(&CFG, layer, BB, TT, b.saved);
        if (layer == 0) {
            memcpy(slot, b.tok, (size_t)BB * TT * sizeof(int32_t));
            pm_gpt_layer_f(&CFG, 0, BB, TT, b.lp, slot, NULL, b.out, NULL, b.saved, b.scratch);
        } else {
            memcpy(slot, b.x, b.nx * sizeof(float));
            int head = lt_kind(&b) == PM_LAYER_HEAD;
            float lb = -1;
            pm_gpt_layer_f(&CFG, layer, BB, TT, b.lp, slot, head ? b.tgt : NULL,
                           head ? NULL : b.out, head ? &lb : NULL, b.saved, b.scratch);
            if (head) assert_true(la == lb);
        }
        if (lt_kind(&a) != PM_LAYER_HEAD) assert_memory_equal(a.out, b.out, a.nx * sizeof(float));
        assert_memory_equal(a.saved, b.saved, a.sz.saved);
        lt_free(&a);
        lt_free(&b);
    }
}

/* ---- determinism, init, whole model ----------------------------------------------- */

static void test_deterministic(void **s) {
    (void)s;
    for (int layer = 0; layer < pm_gpt_num_layers(&CFG); layer++) {
        lt a, b;
        lt_init(&a, layer, 51);
        lt_init(&b, layer, 51);
        float la = lt_f(&a), lb = lt_f(&b);
        assert_true(la == lb);
        lt_bw(&a);
        lt_bw(&b);
        assert_memory_equal(a.lg, b.lg, a.np * sizeof(float));
        if (lt_kind(&a) != PM_LAYER_HEAD) assert_memory_equal(a.out, b.out, a.nx * sizeof(float));
        lt_free(&a);
        lt_free(&b);
    }
}

/* Tensors of more than 2^18 floats are drawn in pieces on the compute
 * threads, each piece's stream jumped ahead to it: on 1, 2 and 3 threads,
 * and with the head in 2 parts, the model is bitwise the same, and wte
 * (layer 0's tensor 0, stream 0) is exactly its stream drawn one normal
 * after another from the start. */
static void test_init_pieces(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 9000, .ctx = 16, .dim = 64, .heads = 4, .layers = 1};
    size_t np = pm_gpt_num_params(&c), nw = (size_t)c.vocab * (size_t)c.dim;
    assert_true(nw > 2 * ((size_t)1 << 18)); /* three pieces, the last ragged */
    float *p[3];
    for (int t = 0; t < 3; t++) {
        p[t] = xmalloc(np * 4);
        pm_blas_threads(t + 1);
        pm_gpt_init(&c, 5, p[t]);
    }
    pm_blas_threads(1);
    assert_memory_equal(p[0], p[1], np * 4);
    assert_memory_equal(p[0], p[2], np * 4);
    /* the head in 2 parts: the second's lm_head rows 4096..8999 (4904 x 64
     * floats) start their stream past the first's and come in 2 pieces */
    pm_gpt_config c2 = c;
    c2.head_parts = 2;
    size_t hr0, hr1;
    pm_gpt_head_rows(&c2, c2.layers + 2, &hr0, &hr1);
    assert_true(hr0 > 0 && (hr1 - hr0) * (size_t)c.dim > ((size_t)1 << 18));
    pm_blas_threads(2);
    pm_gpt_init(&c2, 5, p[1]);
    pm_blas_threads(1);
    assert_memory_equal(p[0], p[1], np * 4);
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    pm_gpt_layer_tensors(&c, 0, t);
    assert_int_equal(t[0].numel, nw);
    const float *wte = p[0] + pm_gpt_layer_offset(&c, 0) + t[0].offset;
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, 5, 0);
    for (size_t j = 0; j < nw; j++) {
        float want = (float)(t[0].init_std * pm_gpt_rng_normal(&r));
        if (memcmp(&want, wte + j, 4))
            fail_msg("wte[%zu]: %.9g, drawn in order %.9g", j, (double)wte[j], (double)want);
    }
    for (int k = 0; k < 3; k++) free(p[k]);
}

static void test_init(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 64, .ctx = 32, .dim = 64, .heads = 4, .layers = 8};
    size_t np = pm_gpt_num_params(&c);
    float *p = xmalloc(np * 4), *q = xmalloc(np * 4), *r = xmalloc(np * 4);
    pm_gpt_init(&c, 7, p);
    pm_gpt_init(&c, 7, q);
    pm_gpt_init(&c, 8, r);
    assert_memory_equal(p, q, np * 4);
    assert_memory_not_equal(p, r, np * 4);
    /* a stage initialising only its layer gets the same numbers */
    float *one = xmalloc(pm_gpt_layer_params(&c, 3) * 4);
    pm_gpt_init_layer(&c, 3, 7, one);
    assert_memory_equal(one, p + pm_gpt_layer_offset(&c, 3), pm_gpt_layer_params(&c, 3) * 4);
    for (int l = 0; l < pm_gpt_num_layers(&c); l++) {
        pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
        int n = pm_gpt_layer_tensors(&c, l, t);
        for (int i = 0; i < n; i++) {
            const float *x = p + pm_gpt_layer_offset(&c, l) + t[i].offset;
            double m = 0, v = 0;
            for (size_t j = 0; j < t[i].numel; j++) m += x[j];
            m /= (double)t[i].numel;
            for (size_t j = 0; j < t[i].numel; j++) v += (x[j] - m) * (x[j] - m);
            double sd = sqrt(v / (double)t[i].numel);
            int proj = strstr(t[i].name, "c_proj.weight") != NULL;
            double want = strstr(t[i].name, "weight") && t[i].ndim == 2
                              ? (proj ? 0.02 / sqrt(2.0 * c.layers) : 0.02)
                              : 0;
            if (want == 0) {
                double val = strstr(t[i].name, "ln_") && strstr(t[i].name, "weight") ? 1 : 0;
                for (size_t j = 0; j < t[i].numel; j++) assert_true(x[j] == val);
            } else {
                /* >= 4096 samples: the sample sd is within a few % of sigma */
                assert_true(fabs(sd - want) < 0.06 * want);
                assert_true(fabs(m) < 0.06 * want);
            }
        }
    }
    free(p), free(q), free(r), free(one);
}

static void test_param_layout(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 50, .ctx = 9, .dim = 12, .heads = 3, .layers = 4};
    size_t C = 12, total = 0;
    assert_int_equal(pm_gpt_num_layers(&c), 6);
    assert_int_equal(pm_gpt_layer_params(&c, 0), 50 * C + 9 * C);
    assert_int_equal(pm_gpt_layer_params(&c, 2), 12 * C * C + 13 * C);
    assert_int_equal(pm_gpt_layer_params(&c, 5), 2 * C + 50 * C);
    for (int l = 0; l < 6; l++) {
        assert_int_equal(pm_gpt_layer_offset(&c, l), total);
        pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
        int n = pm_gpt_layer_tensors(&c, l, t);
        size_t off = 0;
        for (int i = 0; i < n; i++) {
            assert_int_equal(t[i].offset, off);
            assert_int_equal(t[i].numel, (size_t)(t[i].shape[0] * t[i].shape[1]));
            off += t[i].numel;
        }
        assert_int_equal(off, pm_gpt_layer_params(&c, l));
        total += off;
    }
    assert_int_equal(total, pm_gpt_num_params(&c));
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    assert_int_equal(pm_gpt_layer_tensors(&c, 3, t), 12);
    assert_string_equal(t[2].name, "h.2.attn.c_attn.weight");
    assert_int_equal(t[2].shape[0], 3 * C);
    assert_int_equal(t[10].shape[1], 4 * C);
    assert_int_equal(t[2].decay, 1);
    assert_int_equal(t[3].decay, 0);
    assert_int_equal(pm_gpt_layer_tensors(&c, 5, t), 3);
    assert_string_equal(t[2].name, "lm_head.weight");
    assert_int_equal(pm_gpt_layer_tensors(&c, 0, t), 2);
    assert_string_equal(t[1].name, "wpe.weight");
}

static void test_loss_at_init(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 64, .ctx = 16, .dim = 32, .heads = 4, .layers = 2};
    int B = 2, T = 16;
    float *p = xmalloc(pm_gpt_num_params(&c) * 4), *g = calloc(pm_gpt_num_params(&c), 4);
    pm_gpt_init(&c, 1, p);
    void *w = xmalloc(pm_gpt_work_bytes(&c, B, T));
    int32_t tok[32], tgt[32];
    for (int i = 0; i < 32; i++) tok[i] = (i * 11) % 64, tgt[i] = (i * 3 + 1) % 64;
    float l = pm_gpt_forward_backward(&c, B, T, p, g, tok, tgt, 1.0f, w);
    /* init logits have std ~ 0.02 sqrt(C) = 0.11: loss ~ ln V + 0.006 */
    assert_true(fabs(l - log(64.0)) < 0.05);
    float l2 = pm_gpt_forward(&c, B, T, p, tok, tgt, w);
    assert_true(l == l2);
    float pr[64];
    pm_gpt_work_probs_row(&c, B, T, p, w, 5, pr);
    double sum = 0;
    for (int j = 0; j < 64; j++) sum += pr[j];
    assert_true(fabs(sum - 1) < 1e-5);
    free(p), free(g), free(w);
}

/* The whole-model convenience = the per-layer passes composed by hand,
 * bitwise, and its gradient matches finite differences of the reference
 * model on a sample of parameters. */
static double ref_model(const pm_gpt_config *c, int B, int T, const double *p,
                        const int32_t *tok, const int32_t *tgt) {
    ref_ctx r = {c, B, T};
    size_t nx = (size_t)B * T * c->dim;
    double *x = xmalloc(nx * 8), *y = xmalloc(nx * 8);
    ref_embed(r, p, tok, x);
    for (int l = 1; l <= c->layers; l++) {
        ref_block(r, p + pm_gpt_layer_offset(c, l), x, y);
        memcpy(x, y, nx * 8);
    }
    double loss = ref_head(r, p + pm_gpt_layer_offset(c, c->layers + 1), x, tgt, NULL);
    free(x), free(y);
    return loss;
}

static void test_whole_model(void **s) {
    (void)s;
    const pm_gpt_config *c = &CFG;
    size_t np = pm_gpt_num_params(c), nx = (size_t)BB * TT * c->dim;
    float *p = xmalloc(np * 4), *g = calloc(np, 4), *g2 = calloc(np, 4);
    random_params(c, p, 61);
    int32_t tok[64], tgt[64];
    PM_ASSERT(BB * TT <= 64);
    for (int i = 0; i < BB * TT; i++) tok[i] = (i * 5) % 11, tgt[i] = (i * 7 + 2) % 11;
    void *w = xmalloc(pm_gpt_work_bytes(c, BB, TT));
    float loss = pm_gpt_forward_backward(c, BB, TT, p, g, tok, tgt, 0.25f, w);
    /* by hand */
    int n = pm_gpt_num_layers(c);
    void **saved = calloc((size_t)n, sizeof *saved);
    float *x = xmalloc(nx * 4), *y = xmalloc(nx * 4), *d = xmalloc(nx * 4), *e = xmalloc(nx * 4);
    size_t sc = 0;
    for (int l = 0; l < n; l++) {
        pm_gpt_sizes z;
        pm_gpt_layer_sizes(c, l, BB, TT, &z, NULL);
        saved[l] = xmalloc(z.saved);
        sc = z.scratch_b > sc ? z.scratch_b : sc;
        sc = z.scratch_f > sc ? z.scratch_f : sc;
        sc = z.scratch_w > sc ? z.scratch_w : sc;
    }
    void *scratch = xmalloc(sc);
    float l2 = -1;
    pm_gpt_layer_f(c, 0, BB, TT, p, tok, NULL, x, NULL, saved[0], NULL);
    for (int l = 1; l <= c->layers; l++) {
        pm_gpt_layer_f(c, l, BB, TT, p + pm_gpt_layer_offset(c, l), x, NULL, y, NULL, saved[l],
                       scratch);
        float *t = x; x = y; y = t;
    }
    pm_gpt_layer_f(c, n - 1, BB, TT, p + pm_gpt_layer_offset(c, n - 1), x, tgt, NULL, &l2,
                   saved[n - 1], scratch);
    assert_true(loss == l2);
    for (int l = n - 1; l >= 0; l--) {
        size_t o = pm_gpt_layer_offset(c, l);
        pm_gpt_layer_b(c, l, BB, TT, p + o, l == n - 1 ? NULL : d, l ? e : NULL, 0.25f, NULL,
                       saved[l], scratch);
        pm_gpt_layer_w(c, l, BB, TT, p + o, g2 + o, saved[l], scratch);
        float *t = d; d = e; e = t;
    }
    assert_memory_equal(g, g2, np * 4);
    /* finite differences on every 5th parameter */
    double *pd = xmalloc(np * 8);
    for (size_t i = 0; i < np; i++) pd[i] = p[i];
    double want = ref_model(c, BB, TT, pd, tok, tgt);
    assert_true(fabs(loss - want) < 1e-5 * fabs(want));
    size_t m = 0;
    float *gs = xmalloc(np * 4);
    double *ns = xmalloc(np * 8);
    for (size_t i = 0; i < np; i += 5, m++) {
        double v = pd[i], eps = 1e-4;
        pd[i] = v + eps;
        double jp = ref_model(c, BB, TT, pd, tok, tgt);
        pd[i] = v - eps;
        double jm = ref_model(c, BB, TT, pd, tok, tgt);
        pd[i] = v;
        ns[m] = 0.25 * (jp - jm) / (2 * eps);
        gs[m] = g[i];
    }
    check_close("whole-model gradient sample", gs, ns, m, 1e-4, 1e-4);
    for (int l = 0; l < n; l++) free(saved[l]);
    free(saved), free(scratch), free(x), free(y), free(d), free(e), free(gs), free(ns), free(pd);
    free(p), free(g), free(g2), free(w);
}

/* Kernel threads split rows or columns, never a sum: any thread count gives
 * bitwise the same loss and gradients. The shape is large enough that every
 * threaded kernel really splits (>= 2 * 16 rows, >= 2 * 16384 elements). */
static void test_threads_bitwise(void **s) {
    (void)s;
    pm_gpt_config c = {.vocab = 64, .ctx = 64, .dim = 64, .heads = 4, .layers = 1};
    int B = 4, T = 64;
    size_t np = pm_gpt_num_params(&c);
    float *p = xmalloc(np * 4), *g1 = calloc(np, 4), *g2 = calloc(np, 4);
    random_params(&c, p, 71);
    int32_t tok[256], tgt[256];
    for (int i = 0; i < 256; i++) tok[i] = (i * 13) % 64, tgt[i] = (i * 29 + 3) % 64;
    void *w = xmalloc(pm_gpt_work_bytes(&c, B, T));
    pm_blas_threads(1);
    float l1 = pm_gpt_forward_backward(&c, B, T, p, g1, tok, tgt, 1.0f, w);
    pm_blas_threads(2);
    float l2 = pm_gpt_forward_backward(&c, B, T, p, g2, tok, tgt, 1.0f, w);
    pm_blas_threads(1);
    assert_true(l1 == l2);
    assert_memory_equal(g1, g2, np * 4);
    free(p), free(g1), free(g2), free(w);
}

/* ---- config errors ----------------------------------------------------------------- */

static void test_config_errors(void **s) {
    (void)s;
    pm_err err;
    pm_gpt_config c = {.vocab = 256, .ctx = 64, .dim = 100, .heads = 8, .layers = 2};
    assert_int_equal(pm_gpt_config_check(&c, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "heads (8) must divide dim (100)"));
    assert_null(strchr(err.msg, '\n'));
    const char *fields[] = {"vocab", "ctx", "dim", "heads", "layers"};
    for (int i = 0; i < 5; i++) {
        pm_gpt_config z = {.vocab = 256, .ctx = 64, .dim = 64, .heads = 8, .layers = 2};
        int32_t *f[] = {&z.vocab, &z.ctx, &z.dim, &z.heads, &z.layers};
        *f[i] = 0;
        assert_int_equal(pm_gpt_config_check(&z, &err), PM_ERR_ARG);
        assert_non_null(strstr(err.msg, fields[i]));
        assert_non_null(strstr(err.msg, "at least 1"));
    }
    c.dim = 64;
    assert_int_equal(pm_gpt_config_check(&c, &err), PM_OK);
    pm_gpt_sizes z;
    assert_int_equal(pm_gpt_layer_sizes(&c, 1, 2, 65, &z, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "ctx (64)"));
    assert_int_equal(z.saved, 0);
    assert_int_equal(pm_gpt_layer_sizes(&c, 4, 2, 8, &z, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "layer 4"));
    assert_int_equal(pm_gpt_layer_sizes(&c, 1, 0, 8, &z, &err), PM_ERR_ARG);
    assert_int_equal(pm_gpt_work_bytes(&c, 1, 65), 0);
    /* sizes that would overflow size_t are refused, not wrapped */
    pm_gpt_config huge = {.vocab = 1 << 24, .ctx = 1 << 20, .dim = 1 << 20, .heads = 1, .layers = 1};
    assert_int_equal(pm_gpt_config_check(&huge, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "parameters"));
    pm_gpt_config wide = {.vocab = 256, .ctx = 1 << 20, .dim = 1024, .heads = 1, .layers = 1};
    assert_int_equal(pm_gpt_layer_sizes(&wide, 1, 1 << 30, 1 << 20, &z, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "overflows"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_param_layout),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_init_pieces),
        cmocka_unit_test(test_forward_matches_reference),
        cmocka_unit_test(test_gradcheck_embed),
        cmocka_unit_test(test_gradcheck_block),
        cmocka_unit_test(test_gradcheck_block_last),
        cmocka_unit_test(test_gradcheck_head),
        cmocka_unit_test_teardown(test_gradcheck_long, restore_small),
        cmocka_unit_test(test_b_then_w_equals_bw),
        cmocka_unit_test(test_w_accumulates),
        cmocka_unit_test(test_sizes_accounting),
        cmocka_unit_test(test_sizes_independent_count),
        cmocka_unit_test(test_sizes_attention_slots),
        cmocka_unit_test(test_head_parts_bitwise),
        cmocka_unit_test(test_guards_and_release),
        cmocka_unit_test(test_input_slot_alias),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_loss_at_init),
        cmocka_unit_test(test_whole_model),
        cmocka_unit_test(test_threads_bitwise),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
