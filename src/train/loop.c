/* loop.c: the training loop every driver shares (pm_train.h): the batch
 * from the host's loader, a step through the driver, a report, evaluation
 * and checkpoint at intervals, evaluation and checkpoint at the end.
 *
 * The host trainer's step count is the loop's: after a driver's step it is
 * one more than before, whether the driver advanced it itself (the
 * single-device trainer) or not (a pipeline keeps its own). */
#include "pipemem/pm_train.h"

static void report(const pm_train_driver *drv, const pm_loop_event *ev) {
    if (drv->report) drv->report(drv->report_ctx, ev);
}

/* Validation loss, then the checkpoint (if any), with the driver's state
 * in the host first. */
static pm_status eval_save(pm_trainer *host, const pm_train_driver *drv, const pm_loop_opts *o,
                           pm_loop_event *ev, pm_err *err) {
    pm_status st = drv->sync ? drv->sync(drv->ctx, host, err) : PM_OK;
    if (!st) st = pm_trainer_eval(host, o->val, o->eval_batches, &ev->val_loss, err);
    if (!st && o->save) {
        st = pm_ckpt_save(host, o->save, err);
        if (!st) ev->saved = o->save;
    }
    return st;
}

pm_status pm_train_loop(pm_trainer *host, const pm_train_driver *drv, const pm_loop_opts *o,
                        pm_err *err) {
    const pm_train_cfg *c = &host->cfg;
    pm_status st = PM_OK;
    while (host->step < o->stop_at) {
        pm_loop_event ev = {.kind = PM_LOOP_STEP};
        int64_t before = host->step;
        pm_loader_next(&host->train, c->batch, host->inp, host->tgt);
        double t0 = pm_now();
        if ((st = drv->step(drv->ctx, host->inp, host->tgt, &ev.info, err))) return st;
        ev.seconds = pm_now() - t0;
        host->step = ev.step = before + 1;
        report(drv, &ev);
        /* the last step's evaluation and save are the end's (not twice) */
        if (o->eval_every > 0 && host->step % o->eval_every == 0 && host->step < o->stop_at) {
            pm_loop_event ee = {.kind = PM_LOOP_EVAL, .step = host->step};
            if ((st = eval_save(host, drv, o, &ee, err))) return st;
            report(drv, &ee);
        }
    }
    pm_loop_event end = {.kind = PM_LOOP_END, .step = host->step};
    if ((st = eval_save(host, drv, o, &end, err))) return st;
    report(drv, &end);
    return PM_OK;
}

static pm_status trainer_step(void *ctx, const int32_t *inp, const int32_t *tgt,
                              pm_step_info *info, pm_err *err) {
    return pm_trainer_step_batch(ctx, inp, tgt, info, err);
}

pm_train_driver pm_trainer_driver(pm_trainer *t,
                                  void (*report_fn)(void *ctx, const pm_loop_event *ev),
                                  void *report_ctx) {
    return (pm_train_driver){.ctx = t, .step = trainer_step, .sync = NULL, .report = report_fn,
                             .report_ctx = report_ctx};
}
