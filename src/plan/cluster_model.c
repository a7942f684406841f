/* cluster_model.c: a model as the planner's table of layers (pm_cluster.h):
 * a GPT-shaped model sized by formulas for GPUs, or pipemem's own GPT by
 * its exact bytes. docs/plan.md derives every formula here and gives its
 * source; the comments say where each term comes from.
 *
 * Units: bytes, FLOPs and (with a rate) seconds, all in double: a 100B
 * model's numbers stay far inside a double's exact integers (2^53). */
#include <math.h>
#include <string.h>

#include "pipemem/pm_cluster.h"

const char *const pm_precision_names[PM_PREC_COUNT] = {"bf16", "fp32"};
_Static_assert(sizeof pm_precision_names / sizeof pm_precision_names[0] == PM_PREC_COUNT,
               "names");

static pm_status shape_check(const pm_gpt_shape *g, int mbs, pm_err *err) {
    if (!g) return pm_errf(err, PM_ERR_ARG, "the shape is NULL: give the model's (pm_gpt_shape)");
    const struct {
        const char *name;
        int v, max;
    } f[] = {{"shape.layers", g->layers, 1 << 16}, {"shape.hidden", g->hidden, 1 << 20},
             {"shape.heads", g->heads, 1 << 16},   {"shape.seq", g->seq, 1 << 24},
             {"shape.vocab", g->vocab, 1 << 28},   {"mbs", mbs, 1 << 20}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1 || f[i].v > f[i].max)
            return pm_errf(err, PM_ERR_ARG, "%s=%d: must be 1..%d", f[i].name, f[i].v, f[i].max);
    if (g->hidden % g->heads)
        return pm_errf(err, PM_ERR_ARG, "shape.heads=%d must divide shape.hidden=%d", g->heads,
                       g->hidden);
    if (g->ffn < 0 || g->ffn > 1 << 22)
        return pm_errf(err, PM_ERR_ARG, "shape.ffn=%d: must be 0 (4 x shape.hidden) or 1..%d",
                       g->ffn, 1 << 22);
    if (g->precision < 0 || g->precision >= PM_PREC_COUNT)
        return pm_errf(err, PM_ERR_ARG, "shape.precision=%d: bf16 or fp32", g->precision);
    return PM_OK;
}

static pm_status alloc_layers(pm_cluster_model *m, int n, pm_err *err) {
    m->layer = pm_calloc((size_t)n, sizeof *m->layer);
    if (!m->layer) return pm_errf(err, PM_ERR_NOMEM, "plan: out of memory for %d layers", n);
    m->n = n;
    return PM_OK;
}

/* Pass times from FLOPs at the devices' rate (or the FLOPs themselves). */
static void set_times(pm_place_layer *l, double ff, double fb, double fw, double rate) {
    l->tf = ff / rate, l->tb = fb / rate, l->tw = fw / rate;
    l->weight = l->tf + l->tb + l->tw;
}

pm_status pm_cluster_check(const pm_cluster *hw, pm_err *err) {
    if (!hw) return pm_errf(err, PM_ERR_ARG, "hw is NULL: give the devices (a pm_cluster)");
    /* !(x >= 0) also catches NaN, which would otherwise "fit" any test */
    const struct {
        const char *name, *zero; /* the field, what 0 means */
        double x, hi;
    } f[] = {{"hw.mem", "no limit", hw->mem, 1e18},
             {"hw.tflops", "times in FLOPs", hw->tflops, 1e9},
             {"hw.efficiency", "the default 0.65", hw->efficiency, 1},
             {"hw.link_gbps", "free", hw->link_gbps, 1e12}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!(f[i].x >= 0 && f[i].x <= f[i].hi))
            return pm_errf(err, PM_ERR_ARG, "%s is %g: it must be a number from 0 (%s) up to "
                           "%g", f[i].name, f[i].x, f[i].zero, f[i].hi);
    if (hw->devices < 0)
        return pm_errf(err, PM_ERR_ARG, "hw.devices=%d: must be >= 0", hw->devices);
    return PM_OK;
}

pm_status pm_cluster_model_gpt(pm_cluster_model *m, const pm_gpt_shape *g, int mbs,
                               const pm_cluster *hw, pm_err *err) {
    *m = (pm_cluster_model){0};
    pm_status st = hw ? pm_cluster_check(hw, err) : PM_OK;
    if (!st) st = shape_check(g, mbs, err);
    if (st || (st = alloc_layers(m, g->layers + 2, err))) return st;
    double h = g->hidden, a = g->heads, s = g->seq, V = g->vocab, b = mbs;
    double F = g->ffn ? g->ffn : 4 * h, T = b * s; /* tokens of a microbatch */
    double e = g->precision == PM_PREC_FP32 ? 4 : 2;
    double eff = hw && hw->efficiency > 0 ? hw->efficiency : PM_CLUSTER_EFFICIENCY;
    double rate = hw && hw->tflops > 0 ? hw->tflops * 1e12 * eff : 1;
    m->time_unit = hw && hw->tflops > 0 ? "s" : "flop";
    m->mbs = mbs, m->msg = T * h * e;
    /* mixed precision (16-bit weights and gradients, fp32 master, m and v),
     * or fp32 throughout (weights, gradients, m and v) */
    m->bytes_param = e, m->bytes_grad = e, m->bytes_opt = e == 2 ? 12 : 8;

    /* embedding: token and position tables; keeps its dropout mask (1 byte
     * an element); a lookup, no matrix FLOPs */
    pm_place_layer *l = m->layer;
    l[0] = (pm_place_layer){.act = T * h, .act_w = 0, .in = 0, .params = V * h + s * h};

    /* blocks: Korthikanti et al.'s breakdown, with the MLP F wide:
     * 16-bit values LN 2h, QKV in h, Q and K 2h, V h, proj in h, MLP in
     * h, GELU in and out 2F, plus softmax and its dropout 2as; 1-byte masks
     * after attention and MLP 2h, attention dropout as */
    double P = 4 * h * h + 2 * h * F; /* parameters of the matrices */
    double attn = g->flash ? 0 : b * a * s * s * (2 * e + 1);
    pm_place_layer blk = {.act = T * (e * (8 * h + 2 * F) + 2 * h) + attn,
                          /* W: the four matrices' inputs (3h + F) and their outputs'
                           * gradients (5h + F) */
                          .act_w = T * e * (8 * h + 2 * F), .in = T * h * e,
                          .params = P + 9 * h + F};
    set_times(&blk, 2 * T * P + 4 * T * s * h, 2 * T * P + 8 * T * s * h, 2 * T * P, rate);
    for (int i = 1; i <= g->layers; i++) l[i] = blk;

    /* head: final LN and the vocabulary projection; keeps LN's and the
     * projection's inputs and fp32 logits for the cross-entropy; W the
     * projection's input and the logits' gradient */
    pm_place_layer *hd = &l[g->layers + 1];
    *hd = (pm_place_layer){.act = T * (2 * e * h + 4 * V), .act_w = T * e * (h + V),
                           .in = T * h * e, .params = V * h + 2 * h};
    set_times(hd, 2 * T * h * V, 2 * T * h * V, 2 * T * h * V, rate);

    for (int i = 0; i < m->n; i++)
        l[i].state = l[i].params * (m->bytes_param + m->bytes_grad + m->bytes_opt);
    m->flops = g->layers * (6 * T * P + 12 * T * s * h) + 6 * T * h * V;
    return PM_OK;
}

pm_status pm_cluster_model_pipemem(pm_cluster_model *m, const pm_gpt_config *cfg, int mbs,
                                   const pm_layer_costs *lc, pm_err *err) {
    *m = (pm_cluster_model){0};
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st) return st;
    if (mbs < 1) return pm_errf(err, PM_ERR_ARG, "mbs=%d: must be >= 1", mbs);
    int n = pm_gpt_num_layers(cfg);
    pm_place_layer *timed = NULL;
    if ((st = alloc_layers(m, n, err))) return st;
    /* bytes and the cut's weights by FLOPs; times from lc when given */
    st = pm_place_table(cfg, mbs, cfg->ctx, NULL, m->layer, err);
    for (int i = 0; !st && i < n; i++) {
        const pm_place_layer *l = &m->layer[i];
        m->flops += l->weight, m->gen[0] += l->tf, m->gen[1] += l->tb, m->gen[2] += l->tw;
    }
    if (!st && lc) {
        if (!(timed = pm_malloc((size_t)n * sizeof *timed)))
            st = pm_errf(err, PM_ERR_NOMEM, "plan: out of memory for %d layers", n);
        else st = pm_place_table(cfg, mbs, cfg->ctx, lc, timed, err);
        for (int i = 0; !st && i < n; i++)
            m->layer[i].tf = timed[i].tf, m->layer[i].tb = timed[i].tb,
            m->layer[i].tw = timed[i].tw;
    }
    pm_free(timed);
    if (st) {
        pm_cluster_model_free(m);
        return st;
    }
    m->mbs = mbs, m->time_unit = lc ? lc->unit : "flop";
    m->msg = (double)mbs * cfg->ctx * cfg->dim * sizeof(float);
    m->bytes_param = m->bytes_grad = sizeof(float), m->bytes_opt = 2 * sizeof(float);
    return PM_OK;
}

void pm_cluster_model_free(pm_cluster_model *m) {
    if (!m) return;
    pm_free(m->layer);
    *m = (pm_cluster_model){0};
}
