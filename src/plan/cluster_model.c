/* cluster_model.c: a GPT-shaped model sized by formulas for GPUs as the
 * planner's cost model (pm_cluster.h): a table of layers, one function a
 * layer kind (embedding, block, head) for its activation bytes, what W
 * keeps of them, its input, parameters and FLOPs. docs/plan.md derives
 * every formula here and gives its source; the comments say where each
 * term comes from.
 *
 * Units: bytes, FLOPs and (with a rate) seconds, all in double: a 100B
 * model's numbers stay far inside a double's exact integers (2^53). */
#include "pipemem/pm_cluster.h"
#include "internal.h"

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

/* A microbatch of the shape: b sequences of s tokens (T = b s), width h,
 * a heads, MLP width F, vocabulary V, e bytes a value. */
typedef struct {
    double b, s, T, h, a, F, V, e;
    int flash;
} dims;

/* Pass times from FLOPs at the devices' rate (or the FLOPs themselves). */
static void set_times(pm_place_layer *l, double ff, double fb, double fw, double rate) {
    l->tf = ff / rate, l->tb = fb / rate, l->tw = fw / rate;
    l->weight = l->tf + l->tb + l->tw;
}

/* The embedding: token and position tables; keeps its dropout mask (1
 * byte an element); a lookup, no matrix FLOPs. */
static pm_place_layer embedding(const dims *x) {
    return (pm_place_layer){.act = x->T * x->h, .act_w = 0, .in = 0,
                            .params = x->V * x->h + x->s * x->h};
}

/* A block: Korthikanti et al.'s breakdown, with the MLP F wide: 16-bit
 * values LN 2h, QKV in h, Q and K 2h, V h, proj in h, MLP in h, GELU in
 * and out 2F, plus softmax and its dropout 2as; 1-byte masks after
 * attention and MLP 2h, attention dropout as. W keeps the four matrices'
 * inputs (3h + F) and their outputs' gradients (5h + F). */
static pm_place_layer block(const dims *x, double rate) {
    double P = 4 * x->h * x->h + 2 * x->h * x->F; /* parameters of the matrices */
    double attn = x->flash ? 0 : x->b * x->a * x->s * x->s * (2 * x->e + 1);
    pm_place_layer l = {.act = x->T * (x->e * (8 * x->h + 2 * x->F) + 2 * x->h) + attn,
                        .act_w = x->T * x->e * (8 * x->h + 2 * x->F), .in = x->T * x->h * x->e,
                        .params = P + 9 * x->h + x->F};
    double T = x->T, s = x->s, h = x->h;
    set_times(&l, 2 * T * P + 4 * T * s * h, 2 * T * P + 8 * T * s * h, 2 * T * P, rate);
    return l;
}

/* The head: final LN and the vocabulary projection; keeps LN's and the
 * projection's inputs and fp32 logits for the cross-entropy; W the
 * projection's input and the logits' gradient. */
static pm_place_layer head(const dims *x, double rate) {
    pm_place_layer l = {.act = x->T * (2 * x->e * x->h + 4 * x->V),
                        .act_w = x->T * x->e * (x->h + x->V), .in = x->T * x->h * x->e,
                        .params = x->V * x->h + 2 * x->h};
    double f = 2 * x->T * x->h * x->V;
    set_times(&l, f, f, f, rate);
    return l;
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

/* pm_plan_model.room: each of S stages holds a layer; the count says that the
 * embedding and the head are layers too. */
static pm_status gpu_room(const pm_plan_model *m, int64_t S, pm_err *err) {
    if (m->n >= S) return PM_OK;
    return pm_errf(err, PM_ERR_ARG, "shape.layers is %d: with the embedding and the head %d "
                   "layers, fewer than the %lld stages the schedule needs (a layer each); give "
                   "shape.layers of %lld or more, or fewer stages (a smaller pp, or a kind of one "
                   "stage a device)", m->n - 2, m->n, (long long)S, (long long)S - 2);
}

pm_status pm_plan_model_gpu(pm_plan_model *m, const pm_gpt_shape *g, int mbs,
                            const pm_cluster *hw, pm_err *err) {
    *m = (pm_plan_model){0};
    pm_status st = hw ? pm_cluster_check(hw, err) : PM_OK;
    if (!st) st = shape_check(g, mbs, err);
    if (st) return st;
    int n = g->layers + 2;
    if (!(m->layer = pm_calloc((size_t)n, sizeof *m->layer)))
        return pm_errf(err, PM_ERR_NOMEM, "plan: out of memory for %d layers", n);
    m->n = n;
    double h = g->hidden, s = g->seq, b = mbs, e = g->precision == PM_PREC_FP32 ? 4 : 2;
    dims x = {.b = b, .s = s, .T = b * s, .h = h, .a = g->heads, .F = g->ffn ? g->ffn : 4 * h,
              .V = g->vocab, .e = e, .flash = g->flash};
    int timed = hw && hw->tflops > 0;
    double eff = hw && hw->efficiency > 0 ? hw->efficiency : PM_CLUSTER_EFFICIENCY;
    double rate = timed ? hw->tflops * 1e12 * eff : 1;
    double bw = hw && hw->link_gbps > 0 ? hw->link_gbps * 1e9 / 8 : 0;
    m->time_unit = timed ? "s" : "flop";
    m->mbs = mbs, m->msg = x.T * h * e;
    /* seconds cannot be added to FLOPs: without a rate, messages are free */
    m->link = timed ? bw : 0, m->msg_time = m->link > 0 ? m->msg / m->link : 0;
    m->peak_flops = timed ? hw->tflops * 1e12 : 0, m->efficiency = eff;
    m->room = gpu_room;
    /* mixed precision (16-bit weights and gradients, fp32 master, m and v),
     * or fp32 throughout (weights, gradients, m and v) */
    m->bytes_param = e, m->bytes_grad = e, m->bytes_opt = e == 2 ? 12 : 8;
    m->layer[0] = embedding(&x);
    for (int i = 1; i <= g->layers; i++) m->layer[i] = block(&x, rate);
    m->layer[n - 1] = head(&x, rate);
    for (int i = 0; i < n; i++)
        m->layer[i].state = m->layer[i].params * (m->bytes_param + m->bytes_grad + m->bytes_opt);
    double P = 4 * h * h + 2 * h * x.F;
    m->flops = g->layers * (6 * x.T * P + 12 * x.T * s * h) + 6 * x.T * h * x.V;
    return PM_OK;
}
