/* timing.c: one layer's F, B and W timed on its own buffers (the
 * placement balances measured times, model selection forecasts with
 * them). Runs on the calling thread with one compute thread, as a device
 * thread does; best of two runs (the first also pays the page faults). */
#include <string.h>

#include "model/internal.h"
#include "passes.h"

pm_status pm_gpt_time_layer(const pm_gpt_config *cfg, int layer, int B, int T, double t[3],
                            pm_err *err) {
    pm_gpt_sizes z;
    pm_status st = pm_gpt_layer_sizes(cfg, layer, B, T, &z, err);
    if (st) return st;
    size_t np = pm_gpt_layer_params(cfg, layer), N = (size_t)B * (size_t)T;
    size_t sc = z.scratch_b > z.scratch_w ? z.scratch_b : z.scratch_w;
    sc = sc > z.scratch_f ? sc : z.scratch_f;
    size_t msg = z.in > z.out ? z.in : z.out;
    float *lp = pm_malloc(np * sizeof *lp), *lg = pm_calloc(np, sizeof *lg);
    void *saved = pm_malloc(z.saved ? z.saved : 1), *scratch = pm_malloc(sc ? sc : 1);
    float *in = pm_calloc(msg / sizeof(float) + 1, sizeof(float));
    float *out = pm_calloc(msg / sizeof(float) + 1, sizeof(float));
    int32_t *tgt = pm_malloc(N * sizeof *tgt);
    if (!lp || !lg || !saved || !scratch || !in || !out || !tgt) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory timing layer %d (%s)",
                     layer, pm_layer_kind_names[pm_gpt_layer_kind(cfg, layer)]);
        goto done;
    }
    pm_layer_kind k = pm_gpt_layer_kind(cfg, layer);
    int last = layer + 1 == pm_gpt_num_layers(cfg), keep = pm_blas_threads_get();
    pm_blas_threads(1);
    pm_gpt_init_layer(cfg, layer, 1, lp);
    for (size_t r = 0; r < N; r++) tgt[r] = (int32_t)(r * 2654435761u % (uint32_t)cfg->vocab);
    if (k == PM_LAYER_EMBED) memcpy(in, tgt, N * sizeof *tgt);
    else
        for (size_t i = 0; i < z.in / sizeof(float); i++) in[i] = (float)(i % 17) * 0.05f - 0.4f;
    for (size_t i = 0; i < z.out / sizeof(float); i++) out[i] = 1e-3f;
    t[0] = t[1] = t[2] = 1e300;
    for (int rep = 0; rep < 2; rep++) {
        double t0 = pm_now(); /* as a trainer runs them: the loss comes from B */
        pm_gpt_layer_f(cfg, layer, B, T, lp, in, k == PM_LAYER_HEAD ? tgt : NULL,
                       last ? NULL : out, NULL, saved, scratch);
        double t1 = pm_now();
        pm_gpt_layer_b(cfg, layer, B, T, lp, last ? NULL : out, k == PM_LAYER_EMBED ? NULL : in,
                       1.0f, NULL, saved, scratch);
        double t2 = pm_now();
        pm_gpt_layer_w(cfg, layer, B, T, lp, lg, saved, scratch);
        double t3 = pm_now();
        if (t1 - t0 < t[0]) t[0] = t1 - t0;
        if (t2 - t1 < t[1]) t[1] = t2 - t1;
        if (t3 - t2 < t[2]) t[2] = t3 - t2;
    }
    pm_blas_threads(keep);
done:
    pm_free(lp);
    pm_free(lg);
    pm_free(saved);
    pm_free(scratch);
    pm_free(in);
    pm_free(out);
    pm_free(tgt);
    return st;
}

