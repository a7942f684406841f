/* loop.c: the training loop every driver shares (pm_train.h): the batch
 * from the loop state's loader, a step through the driver, a report,
 * evaluation and checkpoint at intervals, evaluation and checkpoint at the
 * end; and the single-device driver.
 *
 * The state's step count is the loop's: after a driver's step it is one
 * more than before, whatever the driver keeps itself. The model's state
 * stays with the driver: evaluation and saving are the driver's calls. */
#include "pipemem/pm_train.h"
#include "data/loader.h"
#include "optim.h"
#include "config.h"
#include "trainer.h"
#include "ckpt.h"

#include <math.h>
#include <string.h>

pm_status pm_train_state_init(pm_train_state *st, const pm_train_cfg *cfg,
                              const pm_tokens *train, pm_err *err) {
    *st = (pm_train_state){0};
    if (!cfg) return pm_errf(err, PM_ERR_ARG, "cfg is NULL: give a training configuration");
    pm_status s = pm_train_cfg_check(cfg, err);
    if (s) return s;
    if ((s = pm_loader_init(&st->train, train, cfg->model.ctx, cfg->seed, "train.bin", err)))
        return s;
    size_t n = (size_t)cfg->batch * (size_t)cfg->model.ctx;
    st->inp = pm_malloc(n * sizeof *st->inp);
    st->tgt = pm_malloc(n * sizeof *st->tgt);
    if (!st->inp || !st->tgt) {
        pm_train_state_free(st);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for one step's tokens");
    }
    st->cfg = *cfg;
    st->data_id = pm_tokens_identity(train);
    return PM_OK;
}

pm_ckpt_meta pm_train_state_meta(const pm_train_state *st) {
    return (pm_ckpt_meta){.cfg = st->cfg, .step = st->step, .data_pos = st->train.next,
                          .data_seed = st->train.seed, .data_id = st->data_id,
                          .tok_model = st->tok_model, .tok_len = st->tok_model_len};
}

void pm_train_state_free(pm_train_state *st) {
    if (!st) return;
    pm_free(st->inp);
    pm_free(st->tgt);
    *st = (pm_train_state){0};
}

static void report(const pm_train_driver *drv, const pm_loop_event *ev) {
    if (drv->report) drv->report(drv->report_ctx, ev);
}

/* Mean loss over `batches` microbatches of B/K windows of `val`, drawn from
 * a loader seeded with cfg.seed ^ PM_VAL_SEED and restarted every call (so
 * each evaluation sees the same text), K at a time through drv->eval,
 * summed in double in microbatch order (so any driver gives the same bits
 * as pm_trainer_eval). */
static pm_status eval(pm_train_state *st, const pm_train_driver *drv, const pm_tokens *val,
                      int batches, double *loss, pm_err *err) {
    const pm_train_cfg *c = &st->cfg;
    pm_loader ld;
    pm_status s = pm_loader_init(&ld, val, c->model.ctx, c->seed ^ PM_VAL_SEED, "val.bin", err);
    if (s) return s;
    int mb = c->batch / c->micro;
    float losses[64];
    double sum = 0.0;
    for (int done = 0; done < batches;) {
        int n = batches - done, most = c->micro < 64 ? c->micro : 64;
        n = n < most ? n : most;
        pm_loader_next(&ld, n * mb, st->inp, st->tgt); /* n microbatches, in order */
        if ((s = drv->eval(drv->ctx, st->inp, st->tgt, n, losses, err))) return s;
        for (int i = 0; i < n; i++) sum += losses[i];
        done += n;
    }
    *loss = batches > 0 ? sum / batches : 0.0;
    return PM_OK;
}

/* Validation loss, then the checkpoint (if any). A diverged model is not
 * saved: the previous checkpoint is the one to go back to. */
static pm_status eval_save(pm_train_state *st, const pm_train_driver *drv, const pm_loop_opts *o,
                           pm_loop_event *ev, pm_err *err) {
    pm_status s = eval(st, drv, o->val, o->eval_batches, &ev->val_loss, err);
    if (s) return s;
    char hint[200];
    if (!isfinite(ev->val_loss))
        return pm_errf(err, PM_ERR_NUMERIC, "step %lld: the validation loss is %g: the "
                       "parameters are no longer finite%s; %s", (long long)st->step,
                       ev->val_loss, o->save ? ", so the checkpoint was not saved" : "",
                       pm_optim_diverged_hint(&st->cfg.opt, "", hint, sizeof hint));
    if (o->save) {
        if ((s = drv->save(drv->ctx, o->save, st, err))) return s;
        ev->saved = o->save;
    }
    return PM_OK;
}

pm_status pm_train_loop(pm_train_state *st, const pm_train_driver *drv, const pm_loop_opts *o,
                        pm_err *err) {
    const pm_train_cfg *c = &st->cfg;
    pm_status s = PM_OK;
    while (st->step < o->stop_at) {
        pm_loop_event ev = {.kind = PM_LOOP_STEP};
        int64_t before = st->step;
        pm_loader_next(&st->train, c->batch, st->inp, st->tgt);
        double t0 = pm_now();
        if ((s = drv->step(drv->ctx, st->inp, st->tgt, &ev.info, err))) return s;
        ev.seconds = pm_now() - t0;
        st->step = ev.step = before + 1;
        report(drv, &ev);
        /* the last step's evaluation and save are the end's (not twice) */
        if (o->eval_every > 0 && st->step % o->eval_every == 0 && st->step < o->stop_at) {
            pm_loop_event ee = {.kind = PM_LOOP_EVAL, .step = st->step};
            if ((s = eval_save(st, drv, o, &ee, err))) return s;
            report(drv, &ee);
        }
    }
    pm_loop_event end = {.kind = PM_LOOP_END, .step = st->step};
    if ((s = eval_save(st, drv, o, &end, err))) return s;
    report(drv, &end);
    return PM_OK;
}

/* ---- the single-device driver -------------------------------------------------- */

static pm_status trainer_step(void *ctx, const int32_t *inp, const int32_t *tgt,
                              pm_step_info *info, pm_err *err) {
    return pm_trainer_step_batch(ctx, inp, tgt, info, err);
}

static pm_status trainer_eval(void *ctx, const int32_t *inp, const int32_t *tgt, int n,
                              float *losses, pm_err *err) {
    pm_trainer *t = ctx;
    const pm_train_cfg *c = &t->cfg;
    int mb = c->batch / c->micro, T = c->model.ctx;
    size_t mtok = (size_t)mb * (size_t)T;
    (void)err;
    for (int i = 0; i < n; i++)
        losses[i] = pm_gpt_forward(&c->model, mb, T, t->params, inp + (size_t)i * mtok,
                                   tgt + (size_t)i * mtok, t->work);
    return PM_OK;
}

static pm_status trainer_save(void *ctx, const char *path, const pm_train_state *st,
                              pm_err *err) {
    pm_trainer *t = ctx;
    t->step = st->step; /* the loop's count and data position are the run's */
    t->train.next = st->train.next;
    return pm_ckpt_save(t, path, err);
}

pm_train_driver pm_trainer_driver(pm_trainer *t,
                                  void (*report_fn)(void *ctx, const pm_loop_event *ev),
                                  void *report_ctx) {
    return (pm_train_driver){.ctx = t, .step = trainer_step, .eval = trainer_eval,
                             .save = trainer_save, .report = report_fn,
                             .report_ctx = report_ctx};
}
