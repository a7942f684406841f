/* layers.c: F, B and W of the embedding and of a transformer block for one
 * microbatch of B sequences of T tokens (N = B*T rows); the block's
 * attention is in attention.c, the head in head.c.
 *
 * Invariants (see internal.h for the saved layouts):
 *   - F writes only `saved` (within the layout's end) and `out`; B writes
 *     `saved`, `din` and scratch; W writes only the layer's gradient slice,
 *     adding to it, and reads only the W prefix of `saved`.
 *   - After B, every region W reads lies below w_end; F-only regions that W
 *     does not need are reused in place for the gradients W does need
 *     (qkv -> dqkv, x1 -> dx1, fc -> dfc, xin -> dout), so B releases
 *     attention's log-sum-exp and the LayerNorm statistics.
 *   - B computes this microbatch's LayerNorm weight gradients into `lnst`
 *     (they need x, which B overwrites); W adds them into the gradients.
 *   - Weights are (out, in) row-major like torch.nn.Linear, so y = x W^T is
 *     gemm(NoTrans, Trans) and dx = dy W is gemm(NoTrans, NoTrans).
 *   - Parallelism: products are pm_k_matmul (row blocks of tokens in F and
 *     B, of output features in W) with the cheap per-row work fused into
 *     each block while it is in cache (bias and residual before, LayerNorm,
 *     GELU or bias-gradient column sums after); attention is one task per
 *     (sequence, head) over tiles, with pm_k_tile_mm's products (tilemm.c). */
#include <math.h>
#include <string.h>

#include "model/internal.h"
#include "passes.h"

#define AT(base, off) ((float *)((char *)(base) + (off)))
#define CAT(base, off) ((const float *)((const char *)(base) + (off)))

enum { LN1W, LN1B, QKVW, QKVB, APW, APB, LN2W, LN2B, FCW, FCB, MPW, MPB }; /* block */
enum { WTE, WPE };                                                          /* embedding */

/* Float offsets of a layer kind's tensors, straight from the tensor table so
 * the passes and the checkpoint names can never disagree. */
static void offsets(const pm_gpt_config *c, pm_layer_kind k, size_t o[PM_GPT_MAX_TENSORS]) {
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    PM_ASSERT(k != PM_LAYER_HEAD); /* head parts: head.c */
    int layer = k == PM_LAYER_EMBED ? 0 : 1;
    int n = pm_gpt_layer_tensors(c, layer, t);
    for (int i = 0; i < n; i++) o[i] = t[i].offset;
}

/* Every block has the same layout (layer 1's). */
static pm_layout layout(const pm_gpt_config *c, int layer, int B, int T) {
    pm_layout lay;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &lay));
    return lay;
}

/* ---- embedding ------------------------------------------------------------------ */

/* out[b,t] = wte[tok[b,t]] + wpe[t] */
void pm_embed_f(const pm_gpt_config *c, int B, int T, const float *lp, const int32_t *tok,
                float *out, void *saved) {
    pm_layout L = layout(c, 0, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_EMBED, o);
    int32_t *ktok = (int32_t *)((char *)saved + L.tok);
    pm_copy_in(ktok, tok, N * sizeof(int32_t));
    for (size_t r = 0; r < N; r++) {
        int32_t id = ktok[r];
        PM_ASSERT(id >= 0 && id < c->vocab);
        const float *te = lp + o[WTE] + (size_t)id * C;
        const float *pe = lp + o[WPE] + (r % (size_t)T) * C;
        float *y = out + r * C;
        for (size_t i = 0; i < C; i++) y[i] = te[i] + pe[i];
    }
}

/* No input gradient: keep dout for W. */
void pm_embed_b(const pm_gpt_config *c, int B, int T, const float *dout, void *saved) {
    pm_layout L = layout(c, 0, B, T);
    size_t N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    pm_copy_in(AT(saved, L.dout), dout, N * C * sizeof(float));
}

/* dwte[tok[b,t]] += dout[b,t]; dwpe[t] += dout[b,t], rows in order */
void pm_embed_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved) {
    pm_layout L = layout(c, 0, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_EMBED, o);
    const int32_t *tok = (const int32_t *)((const char *)saved + L.tok);
    const float *d = CAT(saved, L.dout);
    for (size_t r = 0; r < N; r++) {
        float *gt = lg + o[WTE] + (size_t)tok[r] * C;
        float *gp = lg + o[WPE] + (r % (size_t)T) * C;
        const float *dr = d + r * C;
        for (size_t i = 0; i < C; i++) {
            gt[i] += dr[i];
            gp[i] += dr[i];
        }
    }
}

/* ---- block ----------------------------------------------------------------------- */

/* Work fused after a row block of a product (pm_k_matmul's post). */
typedef struct {
    float *out, *mean, *rstd;
    const float *x, *w, *b;
    int C;
} ln_post;

static void ln_rows_post(const void *ctx, size_t r0, size_t r1) {
    const ln_post *l = ctx;
    pm_k_layernorm_f_rows(l->out, l->mean, l->rstd, l->x, l->w, l->b, r0, r1, l->C);
}

typedef struct {
    float *out;
    const float *d, *x;
    size_t width; /* floats per row */
} gelu_post;

/* F: gelu and its derivative (over the pre-activation, which B needs only
 * through it); B: d gelu times that derivative. */
static void gelu_f_post(const void *ctx, size_t r0, size_t r1) {
    const gelu_post *g = ctx;
    pm_k_gelu_fg_range(g->out, (float *)g->x, g->x, r0 * g->width, r1 * g->width);
}

static void gelu_b_post(const void *ctx, size_t r0, size_t r1) {
    const gelu_post *g = ctx;
    pm_k_mul_range(g->out, g->d, g->x, r0 * g->width, r1 * g->width);
}

/* W products' rows are output features: their bias gradients are the
 * column sums of dY over the same features, done while dY's columns are
 * warm. */
typedef struct {
    float *g;
    const float *d;
    size_t N;
    int n;
} colsum_post;

static void colsum_rows_post(const void *ctx, size_t r0, size_t r1) {
    const colsum_post *s = ctx;
    pm_k_colsum_cols(s->g, s->d, s->N, s->n, r0, r1);
}

/* x1 = x + attn(ln_1(x)) W_ap^T + b_ap;  out = x1 + gelu(ln_2(x1) W_fc^T + b_fc) W_mp^T + b_mp */
void pm_gpt_block_f(const pm_gpt_config *c, int B, int T, const float *lp, const float *in,
                    float *out, void *saved, void *scratch) {
    pm_layout L = layout(c, 1, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_BLOCK, o);
    float *ln1o = AT(saved, L.ln1o), *atty = AT(saved, L.atty), *ln2o = AT(saved, L.ln2o);
    float *gelu = AT(saved, L.gelu), *qkv = AT(saved, L.qkv), *x1 = AT(saved, L.x1);
    float *fc = AT(saved, L.fc), *xin = AT(saved, L.xin), *lse = AT(saved, L.lse);
    float *st = AT(saved, L.stats); /* mean1, rstd1, mean2, rstd2: (N) each */
    pm_copy_in(xin, in, N * C * sizeof(float));
    pm_k_layernorm_f(ln1o, st, st + N, xin, lp + o[LN1W], lp + o[LN1B], N, (int)C);
    pm_k_matmul(0, 1, N, 3 * C, C, 1, ln1o, C, lp + o[QKVW], C, 1, qkv, 3 * C, lp + o[QKVB],
                NULL, NULL, NULL);
    pm_att_f(c, B, T, qkv, atty, lse, scratch);
    ln_post ln2 = {ln2o, st + 2 * N, st + 3 * N, x1, lp + o[LN2W], lp + o[LN2B], (int)C};
    pm_k_matmul(0, 1, N, C, C, 1, atty, C, lp + o[APW], C, 1, x1, C, lp + o[APB], xin,
                ln_rows_post, &ln2);
    gelu_post gp = {gelu, NULL, fc, 4 * C};
    pm_k_matmul(0, 1, N, 4 * C, C, 1, ln2o, C, lp + o[FCW], C, 1, fc, 4 * C, lp + o[FCB], NULL,
                gelu_f_post, &gp);
    pm_k_matmul(0, 1, N, C, 4 * C, 1, gelu, 4 * C, lp + o[MPW], 4 * C, 1, out, C, lp + o[MPB],
                x1, NULL, NULL);
}

void pm_gpt_block_b(const pm_gpt_config *c, int B, int T, const float *lp, const float *dout,
                    float *din, void *saved, void *scratch) {
    pm_layout L = layout(c, 1, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_BLOCK, o);
    float *qkv = AT(saved, L.qkv), *x1 = AT(saved, L.x1), *fc = AT(saved, L.fc);
    float *xin = AT(saved, L.xin), *st = AT(saved, L.stats), *atty = AT(saved, L.atty);
    float *lnst = AT(saved, L.lnst), *a = scratch;
    PM_ASSERT((char *)din + N * C * sizeof(float) <= (char *)saved ||
              (char *)saved + L.end <= (char *)din);
    memset(lnst, 0, 4 * C * sizeof(float));
    /* out = x1 + gelu(fc) W_mp^T + b_mp: d gelu = dout W_mp; dfc = d gelu * gelu'(fc)
     * (F left gelu'(fc) in fc's place), fused per row block */
    gelu_post gp = {fc, a, fc, 4 * C};
    pm_k_matmul(0, 0, N, 4 * C, C, 1, dout, C, lp + o[MPW], 4 * C, 0, a, 4 * C, NULL, NULL,
                gelu_b_post, &gp);
    /* fc = ln2o W_fc^T + b_fc: d ln2o = dfc W_fc; x1 feeds ln_2 and the residual */
    pm_k_matmul(0, 0, N, C, 4 * C, 1, fc, 4 * C, lp + o[FCW], C, 0, a, C, NULL, NULL, NULL,
                NULL);
    pm_k_layernorm_b(x1, dout, a, x1, st + 2 * N, st + 3 * N, lp + o[LN2W], lnst + 2 * C,
                     lnst + 3 * C, N, (int)C);
    /* x1 = x + atty W_ap^T + b_ap: d atty = dx1 W_ap */
    pm_k_matmul(0, 0, N, C, C, 1, x1, C, lp + o[APW], C, 0, a, C, NULL, NULL, NULL, NULL);
    pm_att_b(c, B, T, qkv, atty, AT(saved, L.lse), a, AT(scratch, L.s_slots));
    /* qkv = ln1o W_qkv^T + b_qkv: d ln1o = dqkv W_qkv; x feeds ln_1 and the residual */
    pm_k_matmul(0, 0, N, C, 3 * C, 1, qkv, 3 * C, lp + o[QKVW], C, 0, a, C, NULL, NULL, NULL,
                NULL);
    pm_k_layernorm_b(din, x1, a, xin, st, st + N, lp + o[LN1W], lnst, lnst + C, N, (int)C);
    memcpy(xin, dout, N * C * sizeof(float)); /* x is no longer needed; W needs dout */
}

/* dW = dY^T X for each linear (gemm(Trans, NoTrans), beta = 1); db += column
 * sums of dY (fused per block of output features); LayerNorm gradients from
 * B's lnst. */
void pm_gpt_block_w(const pm_gpt_config *c, int B, int T, float *lg, const void *saved) {
    pm_layout L = layout(c, 1, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_BLOCK, o);
    const float *ln1o = CAT(saved, L.ln1o), *atty = CAT(saved, L.atty);
    const float *ln2o = CAT(saved, L.ln2o), *gelu = CAT(saved, L.gelu);
    const float *dqkv = CAT(saved, L.qkv), *dx1 = CAT(saved, L.x1), *dfc = CAT(saved, L.fc);
    const float *dy = CAT(saved, L.xin), *lnst = CAT(saved, L.lnst);
    colsum_post s1 = {lg + o[QKVB], dqkv, N, (int)(3 * C)};
    pm_k_matmul(1, 0, 3 * C, C, N, 1, dqkv, 3 * C, ln1o, C, 1, lg + o[QKVW], C, NULL, NULL,
                colsum_rows_post, &s1);
    colsum_post s2 = {lg + o[APB], dx1, N, (int)C};
    pm_k_matmul(1, 0, C, C, N, 1, dx1, C, atty, C, 1, lg + o[APW], C, NULL, NULL,
                colsum_rows_post, &s2);
    colsum_post s3 = {lg + o[FCB], dfc, N, (int)(4 * C)};
    pm_k_matmul(1, 0, 4 * C, C, N, 1, dfc, 4 * C, ln2o, C, 1, lg + o[FCW], C, NULL, NULL,
                colsum_rows_post, &s3);
    /* 4C columns by C rows: split by columns, so the bias sum runs apart */
    pm_k_matmul(1, 0, C, 4 * C, N, 1, dy, C, gelu, 4 * C, 1, lg + o[MPW], 4 * C, NULL, NULL,
                NULL, NULL);
    pm_k_colsum_add(lg + o[MPB], dy, N, (int)C);
    const int ln[4] = {LN1W, LN1B, LN2W, LN2B};
    for (int j = 0; j < 4; j++) pm_k_colsum_add(lg + o[ln[j]], lnst + (size_t)j * C, 1, (int)C);
}
