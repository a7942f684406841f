/* test_tiles.c: attention over tiles and the head without its (N, V)
 * matrix, against a straightforward double-precision reference written here
 * with naive loops (the full T x T and N x V matrices, no BLAS, no shared
 * code), and the memory they keep:
 *   - attention (the model's kernel, pm_att_f / pm_att_b): the output, each
 *     row's log-sum-exp and the gradients of q, k and v, at T = 1, 2, 17,
 *     64 and 257 (tiles of 64 queries by 256 keys that do not divide T),
 *     heads 1 and 12, batch 1 and 3;
 *   - the head (the public layer passes, parts chained as a pipeline would):
 *     the loss, the input gradient and every weight gradient (ln_f and
 *     lm_head), vocabularies of 300 and 9000 words (tiles of 256 that do not
 *     divide them), in 1, 2 and 3 parts, at the same T and batches;
 *   - every value within 1e-5 of the tensor's largest magnitude;
 *   - a pipeline of a 2-layer model of GPT-2's width (dim 768, 12 heads,
 *     vocabulary 50257) at ctx 1024: each device's measured activation peak
 *     equals the plan's prediction to the byte, and what the devices
 *     allocate besides their state grows at most 2.1 times from ctx 512 to
 *     1024 (linear in T; T x T or N x V buffers would quadruple or more).
 * The gradients are analytic in the reference (the derivation is in each
 * function), checked against finite differences by test_model.c on the
 * small shapes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/internal.h"
#include "pipemem/pm_plan.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_train.h"
#include "model/passes.h"

#define TOL 1e-5

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    assert_non_null(p);
    return p;
}

static void fill(float *x, size_t n, double std, uint64_t seed) {
    pm_gpt_rng r;
    pm_gpt_rng_seed(&r, seed, 9);
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * pm_gpt_rng_normal(&r));
}

/* Fails naming the first element over TOL * max(|want|, floor). */
static void close_to_floor(const char *what, const float *got, const double *want, size_t n,
                           double floor) {
    double mx = floor > 1e-30 ? floor : 1e-30;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= TOL * mx))
            fail_msg("%s: element %zu of %zu: %.8g, want %.8g (largest %.3g)", what, i, n,
                     (double)got[i], want[i], mx);
}

static void close_to(const char *what, const float *got, const double *want, size_t n) {
    close_to_floor(what, got, want, n, 0);
}

static double largest(const double *x, size_t n) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(x[i]));
    return mx;
}

/* ---- attention ------------------------------------------------------------------ */

/* Reference for one (sequence, head): q, k, v, dy (T, hs) with row strides;
 * S = s Q K^T causal, P = softmax(S), O = P V, lse_i = log sum_j exp S_ij;
 * backward: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(P * dP)),
 * dQ = s dS K, dK = s dS^T Q. */
typedef struct {
    size_t T, hs, ld, ldo;
    const float *q, *k, *v, *dy;
    double *o, *lse, *dq, *dk, *dv; /* (T, hs) each, lse (T) */
} att_ref;

static void ref_attention(const att_ref *a) {
    size_t T = a->T, hs = a->hs;
    double s = 1.0 / sqrt((double)hs);
    double *P = calloc(T * T, 8), *dP = calloc(T * T, 8);
    assert_non_null(P && dP);
    for (size_t i = 0; i < T; i++) {
        double mx = -1e300, z = 0;
        for (size_t j = 0; j <= i; j++) {
            double d = 0;
            for (size_t c = 0; c < hs; c++) d += (double)a->q[i * a->ld + c] * a->k[j * a->ld + c];
            P[i * T + j] = s * d;
            mx = fmax(mx, s * d);
        }
        for (size_t j = 0; j <= i; j++) z += exp(P[i * T + j] - mx);
        a->lse[i] = mx + log(z);
        for (size_t j = 0; j <= i; j++) P[i * T + j] = exp(P[i * T + j] - mx) / z;
        for (size_t c = 0; c < hs; c++) {
            double o = 0;
            for (size_t j = 0; j <= i; j++) o += P[i * T + j] * a->v[j * a->ld + c];
            a->o[i * hs + c] = o;
        }
    }
    memset(a->dq, 0, T * hs * 8), memset(a->dk, 0, T * hs * 8), memset(a->dv, 0, T * hs * 8);
    for (size_t i = 0; i < T; i++) {
        double rs = 0;
        for (size_t j = 0; j <= i; j++) {
            double d = 0;
            for (size_t c = 0; c < hs; c++) d += (double)a->dy[i * a->ldo + c] * a->v[j * a->ld + c];
            dP[i * T + j] = d;
            rs += P[i * T + j] * d;
        }
        for (size_t j = 0; j <= i; j++) {
            double ds = P[i * T + j] * (dP[i * T + j] - rs);
            for (size_t c = 0; c < hs; c++) {
                a->dv[j * hs + c] += P[i * T + j] * a->dy[i * a->ldo + c];
                a->dq[i * hs + c] += s * ds * a->k[j * a->ld + c];
                a->dk[j * hs + c] += s * ds * a->q[i * a->ld + c];
            }
        }
    }
    free(P), free(dP);
}

/* One shape: qkv (B,T,3C) random, F, then B with a random dO; every
 * (sequence, head) against the reference. */
static void check_attention(int B, int T, int H, int hs) {
    pm_gpt_config c = {.vocab = 8, .ctx = T, .dim = H * hs, .heads = H, .layers = 1};
    size_t C = (size_t)H * hs, N = (size_t)B * T;
    pm_layout L;
    assert_true(pm_layout_get(&c, 1, B, T, &L));
    float *qkv = xmalloc(N * 3 * C * 4), *q0 = xmalloc(N * 3 * C * 4);
    float *y = xmalloc(N * C * 4), *dy = xmalloc(N * C * 4), *lse = xmalloc(N * H * 4);
    void *sf = xmalloc(L.scratch_f), *sb = xmalloc(L.scratch_b - L.s_slots);
    fill(q0, N * 3 * C, 1.0, (uint64_t)(T * 131 + H * 7 + B));
    fill(dy, N * C, 1.0, (uint64_t)(T * 17 + H + B));
    memcpy(qkv, q0, N * 3 * C * 4);
    pm_att_f(&c, B, T, qkv, y, lse, sf);
    pm_att_b(&c, B, T, qkv, y, lse, dy, sb);
    double *o = xmalloc((size_t)T * hs * 8), *rl = xmalloc((size_t)T * 8);
    double *dq = xmalloc((size_t)T * hs * 8), *dk = xmalloc((size_t)T * hs * 8);
    double *dv = xmalloc((size_t)T * hs * 8);
    float *got = xmalloc((size_t)T * hs * 4);
    char what[96];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = q0 + (size_t)b * T * 3 * C + (size_t)h * hs;
            att_ref a = {(size_t)T, (size_t)hs, 3 * C, C, q, q + C, q + 2 * C,
                         dy + (size_t)b * T * C + (size_t)h * hs, o, rl, dq, dk, dv};
            ref_attention(&a);
            const double *want[4] = {o, dq, dk, dv};
            const char *name[4] = {"output", "dq", "dk", "dv"};
            for (int t = 0; t < 4; t++) {
                for (int i = 0; i < T; i++) /* the tensor's (T, hs) slice of its buffer */
                    memcpy(got + (size_t)i * hs,
                           t == 0 ? y + ((size_t)b * T + i) * C + (size_t)h * hs
                                  : qkv + ((size_t)b * T + i) * 3 * C + (size_t)(t - 1) * C +
                                        (size_t)h * hs,
                           (size_t)hs * 4);
                snprintf(what, sizeof what, "B=%d T=%d H=%d: sequence %d head %d: %s", B, T, H,
                         b, h, name[t]);
                /* at T = 1, dq and dk are 0 exactly (one key: dS = 0) and
                 * carry the rounding of dO's terms: measured against dv's
                 * scale (dv = dO there) */
                close_to_floor(what, got, want[t], (size_t)T * hs,
                               t ? largest(dv, (size_t)T * hs) : 0);
            }
            snprintf(what, sizeof what, "B=%d T=%d H=%d: sequence %d head %d: lse", B, T, H, b, h);
            close_to(what, lse + ((size_t)b * H + h) * T, rl, (size_t)T);
        }
    free(qkv), free(q0), free(y), free(dy), free(lse), free(sf), free(sb);
    free(o), free(rl), free(dq), free(dk), free(dv), free(got);
}

static const int TS[] = {1, 2, 17, 64, 257};

/* A failed check leaves the test midway: the tests after it must still
 * run the AVX-512 path. */
static int blas_path_off(void **s) {
    (void)s;
    pm_k_tile_mm_blas(0);
    return 0;
}

static void test_attention_against_reference(void **s) {
    (void)s;
    for (size_t i = 0; i < sizeof TS / sizeof TS[0]; i++)
        for (int H = 1; H <= 12; H += 11)
            for (int B = 1; B <= 3; B += 2) check_attention(B, TS[i], H, 8);
    check_attention(1, 257, 12, 64); /* GPT-2's head size */
    /* diagonal tiles whose last 64-key panel is ragged (T = 75: 11 keys,
     * T = 1000: 40) with the causal cut inside it: the cut must not store
     * past the panel's keys into the next query's row */
    check_attention(1, 75, 2, 8);
    check_attention(1, 1000, 1, 8);
    /* the tiles' products through OpenBLAS, as on a CPU without AVX-512 */
    pm_k_tile_mm_blas(1);
    check_attention(3, 257, 12, 8);
    check_attention(1, 257, 12, 64);
    pm_k_tile_mm_blas(0);
}

/* The same bits on 1 and 3 compute threads (each (sequence, head) is one
 * task; the slot a task works in must not change its result). */
static void test_attention_threads_bitwise(void **s) {
    (void)s;
    int B = 3, T = 257, H = 4, hs = 16;
    pm_gpt_config c = {.vocab = 8, .ctx = T, .dim = H * hs, .heads = H, .layers = 1};
    size_t C = (size_t)H * hs, N = (size_t)B * T;
    pm_layout L;
    assert_true(pm_layout_get(&c, 1, B, T, &L));
    float *out[2];
    for (int r = 0; r < 2; r++) {
        pm_blas_threads(r ? 3 : 1);
        float *qkv = xmalloc(N * 3 * C * 4), *y = xmalloc(N * C * 4), *dy = xmalloc(N * C * 4);
        float *lse = xmalloc(N * H * 4);
        void *sf = xmalloc(L.scratch_f), *sb = xmalloc(L.scratch_b - L.s_slots);
        fill(qkv, N * 3 * C, 1.0, 5), fill(dy, N * C, 1.0, 6);
        pm_att_f(&c, B, T, qkv, y, lse, sf);
        pm_att_b(&c, B, T, qkv, y, lse, dy, sb);
        out[r] = xmalloc((N * 4 * C + N * H) * 4);
        memcpy(out[r], qkv, N * 3 * C * 4);
        memcpy(out[r] + N * 3 * C, y, N * C * 4);
        memcpy(out[r] + N * 4 * C, lse, N * H * 4);
        free(qkv), free(y), free(dy), free(lse), free(sf), free(sb);
    }
    pm_blas_threads(1);
    assert_memory_equal(out[0], out[1], (N * 4 * C + N * (size_t)H) * 4);
    free(out[0]), free(out[1]);
}

/* ---- the head ------------------------------------------------------------------- */

/* Reference: lno = LN(x) w + b; l = lno W^T (N, V); loss = mean(lse - l_t);
 * d l = (softmax(l) - onehot) scale / N; dW = dl^T lno; d lno = dl W;
 * dx by LayerNorm's backward, dw = sum d lno * xhat, db = sum d lno. */
typedef struct {
    size_t N, C, V;
    const float *x, *lp; /* lp: ln_f weight, bias (C each), lm_head (V, C) */
    const int32_t *tgt;
    double scale;
    double loss, *dx, *dlp; /* dlp like lp */
} head_ref;

static void ref_head(head_ref *h) {
    size_t N = h->N, C = h->C, V = h->V;
    const float *w = h->lp, *bb = h->lp + C, *W = h->lp + 2 * C;
    double *lno = xmalloc(N * C * 8), *xh = xmalloc(N * C * 8), *rs = xmalloc(N * 8);
    double *l = xmalloc(V * 8), *dl = xmalloc(N * C * 8);
    memset(h->dlp, 0, (2 * C + V * C) * 8);
    memset(dl, 0, N * C * 8);
    h->loss = 0;
    for (size_t r = 0; r < N; r++) {
        double m = 0, var = 0;
        for (size_t i = 0; i < C; i++) m += h->x[r * C + i];
        m /= (double)C;
        for (size_t i = 0; i < C; i++) var += (h->x[r * C + i] - m) * (h->x[r * C + i] - m);
        rs[r] = 1.0 / sqrt(var / (double)C + 1e-5);
        for (size_t i = 0; i < C; i++) {
            xh[r * C + i] = (h->x[r * C + i] - m) * rs[r];
            lno[r * C + i] = xh[r * C + i] * w[i] + bb[i];
        }
        double mx = -1e300, z = 0;
        for (size_t v = 0; v < V; v++) {
            double d = 0;
            for (size_t i = 0; i < C; i++) d += lno[r * C + i] * W[v * C + i];
            l[v] = d;
            mx = fmax(mx, d);
        }
        for (size_t v = 0; v < V; v++) z += exp(l[v] - mx);
        h->loss += mx + log(z) - l[h->tgt[r]];
        for (size_t v = 0; v < V; v++) {
            double g = (exp(l[v] - mx) / z - (v == (size_t)h->tgt[r])) * h->scale / (double)N;
            for (size_t i = 0; i < C; i++) {
                h->dlp[2 * C + v * C + i] += g * lno[r * C + i];
                dl[r * C + i] += g * W[v * C + i];
            }
        }
    }
    h->loss /= (double)N;
    for (size_t r = 0; r < N; r++) { /* LayerNorm backward with dxhat = dl w */
        double s1 = 0, s2 = 0;
        for (size_t i = 0; i < C; i++) {
            double d = dl[r * C + i] * w[i];
            s1 += d, s2 += d * xh[r * C + i];
            h->dlp[i] += dl[r * C + i] * xh[r * C + i];
            h->dlp[C + i] += dl[r * C + i];
        }
        for (size_t i = 0; i < C; i++)
            h->dx[r * C + i] = rs[r] * (dl[r * C + i] * w[i] - s1 / (double)C -
                                        xh[r * C + i] * s2 / (double)C);
    }
    free(lno), free(xh), free(rs), free(l), free(dl);
}

/* The head's parts chained as a pipeline chains them: F part by part (each
 * the message of the one before), B from the last down, W of each. Three
 * ways: F given the loss pointer, then B and W (an evaluation's F, as
 * sampling runs it); F as a trainer runs it (no loss pointer: a one-part
 * head leaves its logits to B) and B giving the loss, then W; the same
 * with BW. The loss, dx and every weight gradient against the reference;
 * the caller compares ways and part counts bitwise. res: loss, dx (N C),
 * gradients (np). */
enum { HEAD_EVAL_F, HEAD_TRAIN_B_W, HEAD_TRAIN_BW };

static void check_head(int B, int T, int V, int parts, int way, const head_ref *ref, float *res) {
    pm_gpt_config c = {.vocab = V, .ctx = T, .dim = (int)ref->C, .heads = 1, .layers = 1,
                       .head_parts = parts};
    size_t N = (size_t)B * T, C = ref->C, np = 2 * C + (size_t)V * C;
    int first = c.layers + 1;
    float *msg[4], *g = res + 1 + N * C, loss = -1, loss_b = -2;
    void *saved[3], *scratch[3];
    memset(g, 0, np * 4);
    msg[0] = (float *)ref->x;
    for (int k = 0; k < parts; k++) {
        pm_gpt_sizes z;
        assert_int_equal(pm_gpt_layer_sizes(&c, first + k, B, T, &z, NULL), PM_OK);
        size_t sc = z.scratch_b > z.scratch_f ? z.scratch_b : z.scratch_f;
        saved[k] = xmalloc(z.saved), scratch[k] = xmalloc(sc > z.scratch_w ? sc : z.scratch_w);
        msg[k + 1] = xmalloc(N * (C + 3) * 4);
        size_t off = pm_gpt_layer_offset(&c, first + k) - pm_gpt_layer_offset(&c, first);
        pm_gpt_layer_f(&c, first + k, B, T, ref->lp + off, msg[k], ref->tgt,
                       k + 1 < parts ? msg[k + 1] : NULL, way == HEAD_EVAL_F ? &loss : NULL,
                       saved[k], scratch[k]);
    }
    char what[96];
    snprintf(what, sizeof what, "B=%d T=%d V=%d parts=%d way %d", B, T, V, parts, way);
    const float *dout = NULL;
    for (int k = parts - 1; k >= 0; k--) {
        size_t off = pm_gpt_layer_offset(&c, first + k) - pm_gpt_layer_offset(&c, first);
        float *din = msg[k + 1 == parts ? parts : k + 1]; /* reuse a spent message buffer */
        if (k == 0) din = res + 1;
        if (way == HEAD_TRAIN_BW) {
            pm_gpt_layer_bw(&c, first + k, B, T, ref->lp + off, g + off, dout, din,
                            (float)ref->scale, &loss_b, saved[k], scratch[k]);
        } else {
            pm_gpt_layer_b(&c, first + k, B, T, ref->lp + off, dout, din, (float)ref->scale,
                           &loss_b, saved[k], scratch[k]);
            pm_gpt_layer_w(&c, first + k, B, T, ref->lp + off, g + off, saved[k], scratch[k]);
        }
        dout = din;
    }
    /* B's loss is F's, bitwise, whichever pass made the logits */
    if (way == HEAD_EVAL_F && memcmp(&loss, &loss_b, 4))
        fail_msg("%s: F's loss %.9g, B's %.9g", what, (double)loss, (double)loss_b);
    if (!(fabs(loss_b - ref->loss) <= TOL * fabs(ref->loss)))
        fail_msg("%s: loss %.8g, want %.8g", what, (double)loss_b, ref->loss);
    res[0] = loss_b;
    char w2[128];
    snprintf(w2, sizeof w2, "%s: dx", what);
    close_to(w2, res + 1, ref->dx, N * C);
    snprintf(w2, sizeof w2, "%s: ln_f gradients", what);
    close_to(w2, g, ref->dlp, 2 * C);
    snprintf(w2, sizeof w2, "%s: lm_head gradient", what);
    close_to(w2, g + 2 * C, ref->dlp + 2 * C, (size_t)V * C);
    for (int k = 0; k < parts; k++) free(saved[k]), free(scratch[k]), free(msg[k + 1]);
}

static void test_head_against_reference(void **s) {
    (void)s;
    const int VS[] = {300, 9000}; /* 512-word chunks divide neither; 9000: three groups */
    const int BS[] = {1, 3, 3, 1, 3};
    for (size_t iv = 0; iv < 2; iv++)
        for (size_t i = 0; i < sizeof TS / sizeof TS[0]; i++) {
            int V = VS[iv], T = TS[i], B = BS[i], C = 8;
            size_t N = (size_t)B * T, np = 2 * (size_t)C + (size_t)V * C;
            float *x = xmalloc(N * C * 4), *lp = xmalloc(np * 4);
            int32_t *tgt = xmalloc(N * 4);
            fill(x, N * C, 1.0, (uint64_t)(V + T));
            fill(lp, np, 0.5, (uint64_t)(V * 3 + T));
            for (int j = 0; j < C; j++) lp[j] += 1.0f; /* LayerNorm weight near 1 */
            for (size_t r = 0; r < N; r++) tgt[r] = (int32_t)((r * 7919 + 13) % (size_t)V);
            tgt[N - 1] = V - 1; /* the last tile's last word */
            head_ref ref = {N, (size_t)C, (size_t)V, x, lp, tgt, 0.5, 0,
                            xmalloc(N * C * 8), xmalloc(np * 8)};
            ref_head(&ref);
            /* every way and part count bitwise the first (one part, F's loss) */
            size_t nres = 1 + N * C + np;
            float *res[2] = {xmalloc(nres * 4), xmalloc(nres * 4)};
            check_head(B, T, V, 1, HEAD_EVAL_F, &ref, res[0]);
            for (int parts = 1; parts <= (V > 8192 ? 3 : 1); parts++)
                for (int way = HEAD_EVAL_F; way <= HEAD_TRAIN_BW; way++) {
                    if (parts == 1 && way == HEAD_EVAL_F) continue;
                    check_head(B, T, V, parts, way, &ref, res[1]);
                    if (memcmp(res[0], res[1], nres * 4))
                        fail_msg("B=%d T=%d V=%d: %d parts, way %d differ from one part's F", B,
                                 T, V, parts, way);
                }
            free(res[0]), free(res[1]);
            free(x), free(lp), free(tgt), free(ref.dx), free(ref.dlp);
        }
}

/* ---- memory at ctx 1024 ------------------------------------------------------------ */

/* A pipeline of 2 devices (1F1B, 2 microbatches of one sequence) of a
 * 2-layer model of GPT-2's width: one step; returns what its devices
 * allocated besides their state. */
static double pipe_step(int ctx) {
    pm_train_cfg c = {.model = {50257, ctx, 768, 12, 2}, .batch = 2, .micro = 2, .seed = 3};
    pm_optim_defaults(&c.opt, 1);
    pm_plan_req rq = {.p = 2, .kind = "1f1b", .head_parts = 1};
    pm_plan pl;
    pm_pipe *pp;
    pm_err err = {{0}};
    if (pm_plan_make(&pl, &c, &rq, &err)) fail_msg("ctx %d: %s", ctx, err.msg);
    if (pm_pipe_create(&pp, &pl, NULL, &err)) fail_msg("ctx %d: %s", ctx, err.msg);
    size_t n = (size_t)c.batch * (size_t)ctx;
    int32_t *inp = xmalloc(n * 4), *tgt = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) inp[i] = (int32_t)(i * 2654435761u % 50257u), tgt[i] = inp[i] ^ 1;
    pm_pipe_info in;
    if (pm_pipe_step(pp, inp, tgt, &in, &err)) fail_msg("ctx %d: %s", ctx, err.msg);
    double rest = 0;
    for (int d = 0; d < 2; d++) {
        if (in.peak[d] != in.pred_peak[d] || in.peak[d] != pl.dev[d].act_peak)
            fail_msg("ctx %d device %d: measured peak %zu, predicted %zu, planned %zu", ctx, d,
                     in.peak[d], in.pred_peak[d], pl.dev[d].act_peak);
        const pm_plan_dev *v = &pl.dev[d];
        rest += (double)pm_pipe_allocated(pp)[d] - (double)(v->bytes[PM_BYTES_PARAMS] +
                                                            v->bytes[PM_BYTES_GRADS] +
                                                            v->bytes[PM_BYTES_MOMENTS]);
    }
    assert_true(isfinite(in.loss) && in.loss > 10 && in.loss < 11.5); /* ln 50257 = 10.8 */
    free(inp), free(tgt);
    pm_pipe_destroy(pp);
    pm_plan_free(&pl);
    return rest;
}

static void test_memory_linear_in_ctx(void **s) {
    (void)s;
    double a = pipe_step(512), b = pipe_step(1024);
    print_message("allocated besides the state: ctx 512 %.1f MiB, ctx 1024 %.1f MiB (%.2fx)\n",
                  a / 1048576, b / 1048576, b / a);
    assert_true(b > a && b <= 2.1 * a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_attention_against_reference, blas_path_off),
        cmocka_unit_test(test_attention_threads_bitwise),
        cmocka_unit_test(test_head_against_reference),
        cmocka_unit_test(test_memory_linear_in_ctx),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
