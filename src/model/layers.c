/* layers.c: F, B and W of the three layer kinds (embedding, block, head)
 * for one microbatch of B sequences of T tokens (N = B*T rows).
 *
 * Invariants (see internal.h for the saved layouts):
 *   - F writes only `saved` (within the layout's end) and `out`; B writes
 *     `saved`, `din` and scratch; W writes only the layer's gradient slice,
 *     adding to it, and reads only the W prefix of `saved`.
 *   - After B, every region W reads lies below w_end; F-only regions that W
 *     does not need are reused in place for the gradients W does need
 *     (qkv -> dqkv, x1 -> dx1, fc -> dfc, xin -> dout), so B releases the
 *     attention probabilities and LayerNorm statistics.
 *   - B computes this microbatch's LayerNorm weight gradients into `lnst`
 *     (they need x, which B overwrites); W adds them into the gradients.
 *   - Weights are (out, in) row-major like torch.nn.Linear, so y = x W^T is
 *     gemm(NoTrans, Trans) and dx = dy W is gemm(NoTrans, NoTrans).
 *   - Parallelism: products are pm_k_matmul (row blocks of tokens in F and
 *     B, of output features in W) with the cheap per-row work fused into
 *     each block while it is in cache (bias and residual before, LayerNorm,
 *     GELU or bias-gradient column sums after); attention is one task per
 *     (sequence, head) with single-threaded sgemms. */
#include <math.h>
#include <string.h>

#include "model/internal.h"

#define AT(base, off) ((float *)((char *)(base) + (off)))
#define CAT(base, off) ((const float *)((const char *)(base) + (off)))

enum { LN1W, LN1B, QKVW, QKVB, APW, APB, LN2W, LN2B, FCW, FCB, MPW, MPB }; /* block */
enum { WTE, WPE };                                                          /* embedding */

/* Float offsets of a layer kind's tensors, straight from the tensor table so
 * the passes and the checkpoint names can never disagree. */
static void offsets(const pm_gpt_config *c, pm_layer_kind k, size_t o[PM_GPT_MAX_TENSORS]) {
    pm_gpt_tensor t[PM_GPT_MAX_TENSORS];
    PM_ASSERT(k != PM_LAYER_HEAD); /* head parts: head_w */
    int layer = k == PM_LAYER_EMBED ? 0 : 1;
    int n = pm_gpt_layer_tensors(c, layer, t);
    for (int i = 0; i < n; i++) o[i] = t[i].offset;
}

/* Every block has the same layout (layer 1's); a head part its own. */
static pm_layout layout(const pm_gpt_config *c, int layer, int B, int T) {
    pm_layout lay;
    PM_ASSERT(pm_layout_get(c, layer, B, T, &lay));
    return lay;
}

/* Copies n bytes unless dst == src; partial overlap is a caller bug. */
static void copy_in(void *dst, const void *src, size_t n) {
    if (dst == src) return;
    const char *d = dst, *s = src;
    PM_ASSERT(d + n <= s || s + n <= d);
    memcpy(dst, src, n);
}

/* ---- embedding ------------------------------------------------------------------ */

/* out[b,t] = wte[tok[b,t]] + wpe[t] */
void pm_embed_f(const pm_gpt_config *c, int B, int T, const float *lp, const int32_t *tok,
                float *out, void *saved) {
    pm_layout L = layout(c, 0, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_EMBED, o);
    int32_t *ktok = (int32_t *)((char *)saved + L.tok);
    copy_in(ktok, tok, N * sizeof(int32_t));
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
    copy_in(AT(saved, L.dout), dout, N * C * sizeof(float));
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

/* ---- attention ------------------------------------------------------------------- */

/* Per (b, h): S = scale Q K^T (T,T), kept as probabilities after the causal
 * softmax; Y = P V written into head h's columns of atty (ld C). Q, K, V
 * are column slices of qkv (ld 3C). One task per (b, h): its sgemms are
 * small, and running B*H of them side by side scales where splitting each
 * one across threads does not. */
typedef struct {
    const pm_gpt_config *c;
    int T;
    float *qkv, *atty, *att, *work;
    const float *catt, *datty;
    size_t slot_floats; /* backward: floats per thread's work slot */
} att_args;

static void attention_f_task(const void *arg, size_t bh, int slot) {
    (void)slot;
    const att_args *a = arg;
    size_t C = (size_t)a->c->dim, H = (size_t)a->c->heads, hs = C / H, Tz = (size_t)a->T;
    size_t nb = (size_t)pm_att_blocks(a->T), b = bh / H, h = bh % H;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = a->qkv + b * Tz * 3 * C + h * hs, *kk = q + C, *v = q + 2 * C;
    float *p = a->att + bh * Tz * Tz;
    for (size_t k = 0; k < nb; k++) {
        size_t r0 = Tz * k / nb, r1 = Tz * (k + 1) / nb;
        pm_k_gemm(0, 1, r1 - r0, r1, hs, scale, q + r0 * 3 * C, 3 * C, kk, 3 * C, 0,
                  p + r0 * Tz, Tz);
    }
    pm_k_causal_softmax(p, 1, a->T); /* inside a task: this thread only */
    for (size_t k = 0; k < nb; k++) {
        size_t r0 = Tz * k / nb, r1 = Tz * (k + 1) / nb;
        pm_k_gemm(0, 0, r1 - r0, hs, r1, 1, p + r0 * Tz, Tz, v, 3 * C, 0,
                  a->atty + (b * Tz + r0) * C + h * hs, C);
    }
}

static void attention_f(const pm_gpt_config *c, int B, int T, float *qkv, float *att,
                        float *atty) {
    att_args a = {.c = c, .T = T, .qkv = qkv, .atty = atty, .att = att};
    pm_par_run((size_t)B * (size_t)c->heads, attention_f_task, &a);
}

/* Backward of attention_f, O(T^2) per head, by row blocks:
 *   dV = P^T dY;  dP = dY V^T;  dS = P * (dP - rowdot(P, dP))
 *   dQ = scale dS K;  dK = scale dS^T Q
 * dV and dK sum over row blocks: the last block (which spans every column)
 * goes first with beta = 0, the others add into the prefix they touch.
 * dq, dk, dv overwrite q, k, v in qkv once the head is done with them.
 * One task per (b, h), working in its thread's slot of the scratch. */
static void attention_b_task(const void *arg, size_t bh, int slot) {
    const att_args *a = arg;
    size_t C = (size_t)a->c->dim, H = (size_t)a->c->heads, hs = C / H, Tz = (size_t)a->T;
    size_t nb = (size_t)pm_att_blocks(a->T), b = bh / H, h = bh % H;
    float scale = 1.0f / sqrtf((float)hs);
    float *sq = a->work + (size_t)slot * a->slot_floats, *sk = sq + Tz * hs, *sv = sk + Tz * hs,
          *sp = sv + Tz * hs;
    float *q = a->qkv + b * Tz * 3 * C + h * hs, *k = q + C, *v = q + 2 * C;
    const float *p = a->catt + bh * Tz * Tz;
    const float *dy = a->datty + b * Tz * C + h * hs;
    for (size_t kb = nb; kb-- > 0;) {
        size_t r0 = Tz * kb / nb, r1 = Tz * (kb + 1) / nb;
        float beta = kb == nb - 1 ? 0.0f : 1.0f;
        pm_k_gemm(1, 0, r1, hs, r1 - r0, 1, p + r0 * Tz, Tz, dy + r0 * C, C, beta, sv, hs);
        pm_k_gemm(0, 1, r1 - r0, r1, hs, 1, dy + r0 * C, C, v, 3 * C, 0, sp + r0 * Tz, Tz);
    }
    pm_k_softmax_b(sp, p, a->T);
    for (size_t kb = nb; kb-- > 0;) {
        size_t r0 = Tz * kb / nb, r1 = Tz * (kb + 1) / nb;
        float beta = kb == nb - 1 ? 0.0f : 1.0f;
        pm_k_gemm(0, 0, r1 - r0, hs, r1, scale, sp + r0 * Tz, Tz, k, 3 * C, 0, sq + r0 * hs, hs);
        pm_k_gemm(1, 0, r1, hs, r1 - r0, scale, sp + r0 * Tz, Tz, q + r0 * 3 * C, 3 * C, beta,
                  sk, hs);
    }
    for (size_t t = 0; t < Tz; t++) {
        memcpy(q + t * 3 * C, sq + t * hs, hs * sizeof(float));
        memcpy(k + t * 3 * C, sk + t * hs, hs * sizeof(float));
        memcpy(v + t * 3 * C, sv + t * hs, hs * sizeof(float));
    }
}

static void attention_b(const pm_gpt_config *c, int B, int T, float *qkv, const float *att,
                        const float *datty, float *work, size_t slot_bytes) {
    att_args a = {.c = c, .T = T, .qkv = qkv, .catt = att, .datty = datty, .work = work,
                  .slot_floats = slot_bytes / sizeof(float)};
    pm_par_run((size_t)B * (size_t)c->heads, attention_b_task, &a);
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

static void gelu_f_post(const void *ctx, size_t r0, size_t r1) {
    const gelu_post *g = ctx;
    pm_k_gelu_f_range(g->out, g->x, r0 * g->width, r1 * g->width);
}

static void gelu_b_post(const void *ctx, size_t r0, size_t r1) {
    const gelu_post *g = ctx;
    pm_k_gelu_b_range(g->out, g->d, g->x, r0 * g->width, r1 * g->width);
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
                float *out, void *saved) {
    pm_layout L = layout(c, 1, B, T);
    size_t o[PM_GPT_MAX_TENSORS], N = (size_t)B * (size_t)T, C = (size_t)c->dim;
    offsets(c, PM_LAYER_BLOCK, o);
    float *ln1o = AT(saved, L.ln1o), *atty = AT(saved, L.atty), *ln2o = AT(saved, L.ln2o);
    float *gelu = AT(saved, L.gelu), *qkv = AT(saved, L.qkv), *x1 = AT(saved, L.x1);
    float *fc = AT(saved, L.fc), *xin = AT(saved, L.xin), *att = AT(saved, L.att);
    float *st = AT(saved, L.stats); /* mean1, rstd1, mean2, rstd2: (N) each */
    copy_in(xin, in, N * C * sizeof(float));
    pm_k_layernorm_f(ln1o, st, st + N, xin, lp + o[LN1W], lp + o[LN1B], N, (int)C);
    pm_k_matmul(0, 1, N, 3 * C, C, 1, ln1o, C, lp + o[QKVW], C, 1, qkv, 3 * C, lp + o[QKVB],
                NULL, NULL, NULL);
    attention_f(c, B, T, qkv, att, atty);
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
    float *xin = AT(saved, L.xin), *att = AT(saved, L.att), *st = AT(saved, L.stats);
    float *lnst = AT(saved, L.lnst), *a = scratch;
    PM_ASSERT((char *)din + N * C * sizeof(float) <= (char *)saved ||
              (char *)saved + L.end <= (char *)din);
    memset(lnst, 0, 4 * C * sizeof(float));
    /* out = x1 + gelu(fc) W_mp^T + b_mp: d gelu = dout W_mp; dfc = d gelu * gelu'(fc),
     * fused per row block */
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
    attention_b(c, B, T, qkv, att, a, AT(scratch, L.s_att), L.att_slot);
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

/* ---- head ------------------------------------------------------------------------ */

/* A head part's place in the vocabulary and its buffers (see internal.h). */
typedef struct {
    size_t N, C, R, r0, r1;
    int first, last;
    const pm_layout *L;
} head_part;

static head_part head_part_of(const pm_gpt_config *c, int layer, int B, int T, const pm_layout *L) {
    head_part h = {.N = (size_t)B * (size_t)T, .C = (size_t)c->dim, .L = L};
    int k = pm_gpt_head_rows(c, layer, &h.r0, &h.r1);
    h.R = h.r1 - h.r0, h.first = k == 0, h.last = k + 1 == pm_gpt_head_parts(c);
    return h;
}

/* lm_head rows [r0, ...) of the part: after ln_f's weight and bias on the first */
static size_t head_w(const head_part *h) { return h->first ? 2 * h->C : 0; }

typedef struct {
    float *g;           /* the group's first column in probs */
    size_t ldg, n;
    int64_t c0;
    const int32_t *tgt;
    float *gmax, *m, *s, *tl;
    size_t ldm;
} group_post;

static void group_stats_post(const void *p, size_t lo, size_t hi) {
    const group_post *a = p;
    pm_k_head_group_rows(a->g, a->ldg, a->n, a->c0, a->tgt, a->gmax, a->ldm, a->m, a->s, a->tl,
                         lo, hi);
}

typedef struct {
    float *g;
    size_t ldg;
    const head_part *h;
    const float *gmax, *lse;
    const int32_t *tgt;
    float f;
} group_rows;

/* Every group of the part: probabilities from lse (or, with tgt, those made
 * logit gradients too). */
static void probs_rows(const void *p, size_t lo, size_t hi) {
    const group_rows *a = p;
    size_t ng = (a->h->R + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP;
    for (size_t q = 0; q < ng; q++) {
        size_t c = q * PM_HEAD_GROUP, n = a->h->R - c < PM_HEAD_GROUP ? a->h->R - c : PM_HEAD_GROUP;
        if (a->lse) pm_k_head_probs_rows(a->g + c, a->ldg, n, a->gmax + q, ng, a->lse, lo, hi);
        if (a->tgt)
            pm_k_head_grad_rows(a->g + c, a->ldg, n, (int64_t)(a->h->r0 + c), a->tgt, a->f, lo, hi);
    }
}

/* F: ln_f on the first part, then per vocabulary group the logits, made
 * exp(l - group max) while the running (max, sum) and the target's logit
 * are updated; a part that is not the last passes lno and the running
 * figures on, the last one turns them into the loss and its logits into
 * probabilities. */
float pm_head_f(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
                const float *in, const int32_t *tgt, float *out, void *saved) {
    pm_layout L = layout(c, layer, B, T);
    head_part h = head_part_of(c, layer, B, T, &L);
    size_t N = h.N, C = h.C, ng = (h.R + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP;
    float *lno = AT(saved, L.lno), *probs = AT(saved, L.probs), *run = AT(saved, L.run);
    float *gmax = AT(saved, L.gmax), *lse = AT(saved, L.lse);
    int32_t *kt = (int32_t *)((char *)saved + L.tgt);
    for (size_t r = 0; r < N; r++) {
        PM_ASSERT(!tgt || (tgt[r] >= 0 && tgt[r] < c->vocab));
        kt[r] = tgt ? tgt[r] : -1; /* -1: no targets, B must not run */
    }
    if (h.first) {
        float *xin = AT(saved, L.xin), *st = AT(saved, L.stats);
        copy_in(xin, in, N * C * sizeof(float));
        pm_k_layernorm_f(lno, st, st + N, xin, lp, lp + C, N, (int)C);
        for (size_t r = 0; r < N; r++) run[r] = -INFINITY, run[N + r] = 0, run[2 * N + r] = 0;
    } else {
        copy_in(lno, in, N * (C + 3) * sizeof(float));
        memcpy(run, lno + N * C, 3 * N * sizeof(float));
    }
    const float *W = lp + head_w(&h);
    for (size_t q = 0; q < ng; q++) {
        size_t c0 = q * PM_HEAD_GROUP, n = h.R - c0 < PM_HEAD_GROUP ? h.R - c0 : PM_HEAD_GROUP;
        group_post g = {probs + c0, h.R, n, (int64_t)(h.r0 + c0), tgt ? kt : NULL, gmax + q,
                        run, run + N, run + 2 * N, ng};
        pm_k_matmul(0, 1, N, n, C, 1, lno, C, W + c0 * C, C, 0, probs + c0, h.R, NULL, NULL,
                    group_stats_post, &g);
    }
    if (!h.last) {
        memcpy(out, lno, N * C * sizeof(float));
        memcpy(out + N * C, run, 3 * N * sizeof(float));
        return 0.0f;
    }
    double sum = 0;
    for (size_t r = 0; r < N; r++) {
        lse[r] = run[r] + logf(run[N + r]);
        sum += (double)lse[r] - (double)run[2 * N + r]; /* -log p[t] = lse - l_t */
    }
    group_rows pr = {probs, h.R, &h, gmax, lse, NULL, 0};
    pm_gpt_par_for(N, 32, probs_rows, &pr);
    return tgt ? (float)(sum / (double)N) : 0.0f;
}

/* B: d logits = (probs - onehot(target)) * scale / N (a part before the
 * last first makes its probabilities with the lse the message brings);
 * d lno accumulates group by group from the vocabulary's last group to its
 * first (the dout of a later part holds the sum so far); the first part
 * ends with ln_f's backward into din, a later one passes d lno and lse on. */
void pm_head_b(const pm_gpt_config *c, int layer, int B, int T, const float *lp,
               const float *dout, float *din, float scale, void *saved, void *scratch) {
    pm_layout L = layout(c, layer, B, T);
    head_part h = head_part_of(c, layer, B, T, &L);
    size_t N = h.N, C = h.C, ng = (h.R + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP;
    float *probs = AT(saved, L.probs), *gmax = AT(saved, L.gmax);
    const int32_t *kt = (const int32_t *)((const char *)saved + L.tgt);
    const float *lse = h.last ? AT(saved, L.lse) : dout + N * C;
    float f = (float)((double)scale / (double)N);
    group_rows gr = {probs, h.R, &h, gmax, h.last ? NULL : lse, kt, f};
    pm_gpt_par_for(N, 32, probs_rows, &gr);
    float *acc = h.first ? (float *)scratch : din;
    if (!h.last) memcpy(acc, dout, N * C * sizeof(float));
    if (!h.first) { /* lse, then the two floats the message does not use */
        memcpy(din + N * C, lse, N * sizeof(float));
        memset(din + N * (C + 1), 0, 2 * N * sizeof(float));
    }
    const float *W = lp + head_w(&h);
    for (size_t q = ng; q-- > 0;) {
        size_t c0 = q * PM_HEAD_GROUP, n = h.R - c0 < PM_HEAD_GROUP ? h.R - c0 : PM_HEAD_GROUP;
        float beta = h.last && q == ng - 1 ? 0.0f : 1.0f;
        pm_k_matmul(0, 0, N, C, n, 1, probs + c0, h.R, W + c0 * C, C, beta, acc, C, NULL, NULL,
                    NULL, NULL);
    }
    if (!h.first) return;
    float *xin = AT(saved, L.xin), *st = AT(saved, L.stats), *lnst = AT(saved, L.lnst);
    memset(lnst, 0, 2 * C * sizeof(float));
    pm_k_layernorm_b(din, NULL, acc, xin, st, st + N, lp, lnst, lnst + C, N, (int)C);
}

void pm_head_w(const pm_gpt_config *c, int layer, int B, int T, float *lg, const void *saved) {
    pm_layout L = layout(c, layer, B, T);
    head_part h = head_part_of(c, layer, B, T, &L);
    size_t N = h.N, C = h.C, ng = (h.R + PM_HEAD_GROUP - 1) / PM_HEAD_GROUP;
    const float *dlog = CAT(saved, L.probs), *lno = CAT(saved, L.lno);
    float *gw = lg + head_w(&h);
    for (size_t q = 0; q < ng; q++) {
        size_t c0 = q * PM_HEAD_GROUP, n = h.R - c0 < PM_HEAD_GROUP ? h.R - c0 : PM_HEAD_GROUP;
        pm_k_matmul(1, 0, n, C, N, 1, dlog + c0, h.R, lno, C, 1, gw + c0 * C, C, NULL, NULL,
                    NULL, NULL);
    }
    if (!h.first) return;
    const float *lnst = CAT(saved, L.lnst);
    pm_k_colsum_add(lg, lnst, 1, (int)C);
    pm_k_colsum_add(lg + C, lnst + C, 1, (int)C);
}
