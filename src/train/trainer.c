/* trainer.c: single-device training: exact memory need, one allocation,
 * steps of K accumulated microbatches with clipping and AdamW, and
 * validation loss. Invariant: after init every buffer a step touches exists;
 * a step allocates nothing and its result depends only on (params, m, v,
 * loader position, step), which is what a checkpoint stores. */
#include "pipemem/pm_train.h"
#include "util/alloc.h"
#include "model/passes.h"
#include "data/loader.h"
#include "optim.h"
#include "config.h"
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int micro_size(const pm_train_cfg *c) { return c->batch / c->micro; }

/* The trainer's bytes by part: the slabs (parameters, gradients, two
 * AdamW moments), one microbatch's workspace and the batch's input and
 * target tokens; 0 on overflow. */
typedef struct {
    size_t state, work, tok, total;
} mem_parts;

static int mem_parts_of(const pm_train_cfg *cfg, mem_parts *m) {
    size_t n = pm_gpt_num_params(&cfg->model);
    m->work = pm_gpt_work_bytes(&cfg->model, micro_size(cfg), cfg->model.ctx);
    return m->work && pm_size_mul(n, 4 * sizeof(float), &m->state) &&
           pm_size_mul((size_t)cfg->batch * 2, (size_t)cfg->model.ctx * sizeof(int32_t),
                       &m->tok) &&
           pm_size_add(m->state, m->work, &m->total) && pm_size_add(m->total, m->tok, &m->total);
}

size_t pm_train_mem_bytes(const pm_train_cfg *cfg, pm_err *err) {
    if (pm_train_cfg_check(cfg, err)) return 0;
    mem_parts m;
    if (!mem_parts_of(cfg, &m)) {
        pm_errf(err, PM_ERR_MEMLIMIT, "model size overflows size_t; use a smaller model");
        return 0;
    }
    return m.total;
}

/* What shrinks the need, by its largest part: the state only with a
 * smaller model; the batch's tokens with a smaller batch; one microbatch's
 * activations with the context and the layers, and with a smaller batch or
 * more microbatches while a microbatch holds more than one sequence. */
static const char *memory_advice(const pm_train_cfg *cfg, const mem_parts *m) {
    if (m->state >= m->work && m->state >= m->tok)
        return "use fewer model.layers or a smaller model.dim";
    if (m->tok >= m->work) return "use a smaller batch";
    return micro_size(cfg) > 1 ? "use a shorter model.ctx, a smaller batch or more micro"
                               : "use a shorter model.ctx or fewer model.layers";
}

/* The model's need against a device's budget or this machine's memory:
 * PM_ERR_MEMLIMIT naming both figures, and what to change. */
static pm_status over_memory(const pm_train_cfg *cfg, size_t need, size_t have, int device,
                             pm_err *err) {
    char a[32], b[32], c[32];
    mem_parts m;
    (void)mem_parts_of(cfg, &m); /* need was counted: no overflow */
    pm_bytes_str(need, a, sizeof a);
    pm_bytes_str(m.state, b, sizeof b);
    pm_bytes_str(have, c, sizeof c);
    if (device)
        return pm_errf(err, PM_ERR_MEMLIMIT, "one device needs %s (%s of parameters, gradients "
                       "and AdamW moments, the rest one microbatch's activations and workspace) "
                       "but device_mem is %s; split it across devices with pp=P (each holds "
                       "only its stages; a P too few is refused with what its busiest device "
                       "needs) or use a smaller model", a, b, c);
    return pm_errf(err, PM_ERR_MEMLIMIT, "the model needs %s (%s of parameters, gradients and "
                   "AdamW moments, the rest one microbatch's activations and workspace) but this "
                   "machine has %s; %s", a, b, c, memory_advice(cfg, &m));
}

pm_status pm_trainer_init(pm_trainer *t, const pm_train_cfg *cfg, const pm_tokens *train,
                          size_t device_mem, pm_err *err) {
    *t = (pm_trainer){0};
    size_t need = pm_train_mem_bytes(cfg, err), phys = pm_mem_physical();
    if (!need) return PM_ERR_ARG;
    if (device_mem && need > device_mem) return over_memory(cfg, need, device_mem, 1, err);
    if (phys && need > phys) return over_memory(cfg, need, phys, 0, err);
    pm_status st = pm_loader_init(&t->train, train, cfg->model.ctx, cfg->seed, "train.bin", err);
    if (st) return st;
    uint64_t data_id = pm_tokens_identity(train);
    pm_loader ld = t->train;
    t->cfg = *cfg;
    t->n_params = pm_gpt_num_params(&cfg->model);
    size_t mb = (size_t)micro_size(cfg), T = (size_t)cfg->model.ctx, B = (size_t)cfg->batch;
    t->params = pm_alloc_big(t->n_params * 4 * sizeof(float));
    t->work = pm_alloc_big(pm_gpt_work_bytes(&cfg->model, (int)mb, (int)T));
    t->inp = pm_malloc(B * T * sizeof(int32_t));
    t->tgt = pm_malloc(B * T * sizeof(int32_t));
    if (!t->params || !t->work || !t->inp || !t->tgt) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory allocating %.2f GiB for training",
                     (double)need / (1 << 30));
        goto fail;
    }
    t->grads = t->params + t->n_params;
    t->m = t->grads + t->n_params;
    t->v = t->m + t->n_params;
    pm_gpt_init(&cfg->model, cfg->seed, t->params);
    memset(t->m, 0, 2 * t->n_params * sizeof(float));
    t->train = ld;
    t->data_id = data_id;
    return PM_OK;
fail:
    pm_trainer_free(t);
    return st;
}

pm_status pm_trainer_set_tokenizer(pm_trainer *t, const void *model, size_t len, pm_err *err) {
    void *copy = len ? pm_malloc(len) : NULL;
    if (len && !copy) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the tokenizer");
    if (len) memcpy(copy, model, len);
    pm_free((void *)t->tok_model);
    t->tok_model = copy, t->tok_model_len = len;
    return PM_OK;
}

void pm_trainer_free(pm_trainer *t) {
    if (!t) return;
    pm_free((void *)t->tok_model);
    pm_free(t->params);
    pm_free(t->work);
    pm_free(t->inp);
    pm_free(t->tgt);
    *t = (pm_trainer){0};
}

/* The gradients zeroed on the compute threads: one thread's memset of
 * GPT-2 small's 652 MB took 21 ms, 0.8% of a step at ctx 1024. */
static void zero_range(const void *arg, size_t lo, size_t hi) {
    memset((float *)arg + lo, 0, (hi - lo) * sizeof(float));
}

pm_status pm_trainer_step_batch(pm_trainer *t, const int32_t *inp, const int32_t *tgt,
                                pm_step_info *info, pm_err *err) {
    if (!inp || !tgt)
        return pm_errf(err, PM_ERR_ARG, "the step's %s are NULL", inp ? "targets" : "inputs");
    const pm_train_cfg *c = &t->cfg;
    int mb = micro_size(c), T = c->model.ctx, K = c->micro;
    size_t mtok = (size_t)mb * (size_t)T;
    pm_gpt_par_for(t->n_params, (size_t)1 << 20, zero_range, t->grads);
    double loss = 0.0;
    for (int k = 0; k < K; k++)
        loss += pm_gpt_forward_backward(&c->model, mb, T, t->params, t->grads,
                                        inp + (size_t)k * mtok, tgt + (size_t)k * mtok,
                                        1.0f / (float)K, t->work);
    loss /= K;
    double norm = pm_optim_norm(&c->model, t->grads);
    char hint[200];
    if (!isfinite(loss) || !isfinite(norm))
        return pm_errf(err, PM_ERR_NUMERIC, "step %lld: loss %g, gradient norm %g is not "
                       "finite; %s", (long long)t->step + 1, loss, norm,
                       pm_optim_diverged_hint(&c->opt, "", hint, sizeof hint));
    double lr = pm_optim_lr_at(&c->opt, t->step);
    pm_optim_step_layers(c, 0, pm_gpt_num_layers(&c->model), t->step,
                         pm_optim_clip_scale(norm, c->opt.grad_clip), t->params, t->grads, t->m, t->v);
    t->step++;
    if (info) *info = (pm_step_info){loss, norm, lr};
    return PM_OK;
}

pm_status pm_trainer_step(pm_trainer *t, pm_step_info *info, pm_err *err) {
    pm_loader_next(&t->train, t->cfg.batch, t->inp, t->tgt);
    return pm_trainer_step_batch(t, t->inp, t->tgt, info, err);
}

pm_status pm_trainer_eval(pm_trainer *t, const pm_tokens *val, int batches, double *loss,
                          pm_err *err) {
    const pm_train_cfg *c = &t->cfg;
    pm_loader ld;
    pm_status st = pm_loader_init(&ld, val, c->model.ctx, c->seed ^ PM_VAL_SEED, "val.bin", err);
    if (st) return st;
    int mb = micro_size(c);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) {
        pm_loader_next(&ld, mb, t->inp, t->tgt);
        sum += pm_gpt_forward(&c->model, mb, c->model.ctx, t->params, t->inp, t->tgt, t->work);
    }
    *loss = batches > 0 ? sum / batches : 0.0;
    return PM_OK;
}

double pm_train_step_flops(const pm_train_cfg *cfg) {
    return (double)cfg->micro * pm_gpt_flops(&cfg->model, micro_size(cfg), cfg->model.ctx);
}
