/* placement.c: which layers each pipeline stage runs, and the per-stage
 * costs and memory deltas the simulator needs for that placement.
 *
 * Rule (pm_runtime.h): contiguous ranges in layer order, every stage non-
 * empty, minimising the largest stage cost, a layer's cost being its FLOPs
 * for one microbatch (F + B + W). Solved exactly by dynamic programming over
 * (stages, layers): best[k][i] = the smallest max-cost of cutting the first i
 * layers into k stages. Ties keep the smallest cut point found for the last
 * stage, i.e. later stages take the extra layers: deterministic, and kind to
 * memory, since early stages hold the most microbatches in flight. */
#include <stdlib.h>

#include "pipemem/pm_runtime.h"

static double layer_cost(const pm_gpt_sizes *s) { return s->flops_f + s->flops_b + s->flops_w; }

pm_status pm_place_layers(const pm_gpt_config *cfg, int B, int T, int S, int *first,
                          pm_err *err) {
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st) return st;
    int n = pm_gpt_num_layers(cfg);
    if (S < 1) return pm_errf(err, PM_ERR_ARG, "placement: stages must be >= 1 (got %d)", S);
    if (n < S)
        return pm_errf(err, PM_ERR_ARG,
                       "placement: the model has %d layers (embedding, %d blocks, head) but the "
                       "schedule has %d stages, each needing at least one layer; use --layers "
                       ">= %d, fewer devices or fewer chunks", n, cfg->layers, S, S - 2);
    size_t nn = (size_t)n + 1, ns = (size_t)S + 1;
    double *pre = pm_malloc(nn * sizeof *pre), *best = pm_malloc(ns * nn * sizeof *best);
    int *cut = pm_malloc(ns * nn * sizeof *cut);
    if (!pre || !best || !cut) {
        st = pm_errf(err, PM_ERR_NOMEM, "placement: out of memory");
        goto done;
    }
    pre[0] = 0;
    for (int i = 0; i < n; i++) {
        pm_gpt_sizes sz;
        if ((st = pm_gpt_layer_sizes(cfg, i, B, T, &sz, err))) goto done;
        pre[i + 1] = pre[i] + layer_cost(&sz);
    }
    /* best[k*nn + i]: first i layers in k stages (i >= k) */
    for (int i = 1; i <= n; i++) best[nn + (size_t)i] = pre[i], cut[nn + (size_t)i] = 0;
    for (int k = 2; k <= S; k++)
        for (int i = k; i <= n; i++) {
            double b = -1;
            int bc = k - 1;
            for (int j = k - 1; j < i; j++) {
                double prev = best[(size_t)(k - 1) * nn + (size_t)j], here = pre[i] - pre[j];
                double c = prev > here ? prev : here;
                if (b < 0 || c < b) b = c, bc = j;
            }
            best[(size_t)k * nn + (size_t)i] = b;
            cut[(size_t)k * nn + (size_t)i] = bc;
        }
    first[S] = n;
    for (int k = S, i = n; k >= 1; k--) {
        i = cut[(size_t)k * nn + (size_t)i];
        first[k - 1] = i;
    }
    PM_ASSERT(first[0] == 0);
done:
    pm_free(pre);
    pm_free(best);
    pm_free(cut);
    return st;
}

pm_status pm_place_costs(const pm_gpt_config *cfg, int B, int T, const int *first, int S,
                         int recompute, pm_cost *c, pm_err *err) {
    pm_status st = pm_cost_init(c, S, err);
    if (st) return st;
    for (int s = 0; s < S; s++) {
        double saved = 0, saved_w = 0, ff = 0, fb = 0, fw = 0, keep = 0;
        for (int l = first[s]; l < first[s + 1]; l++) {
            pm_gpt_sizes sz;
            if ((st = pm_gpt_layer_sizes(cfg, l, B, T, &sz, err))) {
                pm_cost_free(c);
                return st;
            }
            saved += (double)sz.saved, saved_w += (double)sz.saved_w;
            if (l == first[s] && l > 0) keep = (double)sz.in; /* tokens stay in the batch */
            ff += sz.flops_f, fb += sz.flops_b, fw += sz.flops_w;
        }
        c->st[s] = (pm_stage_cost){ff, fb, fw, saved, -(saved - saved_w), -saved_w, keep,
                                   recompute != 0};
    }
    c->c = 0;
    return PM_OK;
}
