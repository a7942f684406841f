/* trainer.h: the single-device trainer's step and evaluation (trainer.c),
 * private to the library: pm_train_loop drives them (pm_trainer_driver),
 * model selection evaluates its tasks' hosts with them, and the tests hold
 * every other trainer to their bits. */
#ifndef PM_TRAIN_TRAINER_H
#define PM_TRAIN_TRAINER_H

#include <stdint.h>

#include "pipemem/pm_train.h"

/* One optimizer step. PM_ERR_NUMERIC (and no update) if the loss or the
 * gradient norm is not finite. */
pm_status pm_trainer_step(pm_trainer *t, pm_step_info *info, pm_err *err);

/* The same step on given tokens: inp and tgt are (B, ctx); microbatch k is
 * rows k*B/K .. (k+1)*B/K. pm_trainer_step = the loader's next B windows
 * followed by this. */
pm_status pm_trainer_step_batch(pm_trainer *t, const int32_t *inp, const int32_t *tgt,
                                pm_step_info *info, pm_err *err);

/* Mean loss over `batches` microbatches of B/K windows of `val`, drawn from
 * a loader seeded with cfg.seed ^ PM_VAL_SEED and restarted every call, so
 * each evaluation sees the same text. */
pm_status pm_trainer_eval(pm_trainer *t, const pm_tokens *val, int batches, double *loss,
                          pm_err *err);

#endif
