/* record.c: a task's record in a sweep's save directory (pm_select.h,
 * pm_select_opts.save_dir): its checkpoint DIR/NAME.ckpt, its losses
 * DIR/NAME.loss beside it (written after it), and DIR/NAME.stopped once
 * halving or ASHA stopped it. The executor writes them as the run goes
 * (run.c); a session resuming reads them back, each task on its own
 * (session.c). Recording and resuming are kept apart from running a
 * task's steps and from choosing where a task runs, so the one table of
 * records can live with one process while the tasks run elsewhere. */
#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "select/internal.h"

/* Task t's losses beside its checkpoint (pm_select_saved_losses): the
 * validation loss only if it was measured on this very state. */
static pm_status save_losses(const char *dir, const sel_task *t, pm_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.loss", dir, t->task->name);
    int64_t step = t->host->step;
    pm_wfile w;
    pm_status st = pm_wfile_open(&w, path, err);
    if (st) return st;
    fprintf(w.f, "step %lld loss %.17g val_loss %.17g\n", (long long)step, t->last_loss,
            t->val_step == step ? t->val_loss : NAN);
    return pm_wfile_commit(&w, err);
}

int sel_record_save(const char *dir, sel_task *t) {
    char path[4096];
    pm_err e;
    snprintf(path, sizeof path, "%s/%s.ckpt", dir, t->task->name);
    sel_flush_updates(t);
    if (!pm_ckpt_save(t->host, path, &e) && !save_losses(dir, t, &e)) return 0;
    snprintf(t->why, sizeof t->why, "saving: %.140s", e.msg);
    return 1;
}

void sel_record_stop(const char *dir, const sel_task *t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.stopped", dir, t->task->name);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "%s\n", t->why), fclose(f);
}

int pm_select_saved_losses(const char *dir, const char *name, int64_t step, double *loss,
                           double *val) {
    char path[4096], *text = NULL;
    size_t len;
    long long k;
    double x, y;
    pm_err e;
    *loss = *val = NAN;
    snprintf(path, sizeof path, "%s/%s.loss", dir, name);
    if (pm_read_file(path, 256, &text, &len, &e)) return 0;
    int ok = sscanf(text, "step %lld loss %lf val_loss %lf", &k, &x, &y) == 3 && k == step;
    pm_free(text);
    if (ok) *loss = x, *val = y;
    return ok;
}

pm_status sel_record_resume(const char *dir, const pm_select_task *t, pm_trainer *host,
                            const pm_tokens *val, int eval_batches, unsigned char *stopped,
                            double *loss, double *val_loss, int *resumed, pm_err *err) {
    char path[4096];
    pm_err e;
    *loss = *val_loss = NAN;
    *resumed = 0;
    snprintf(path, sizeof path, "%s/%s.stopped", dir, t->name);
    *stopped = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/%s.ckpt", dir, t->name);
    if (access(path, F_OK)) return PM_OK;
    /* the checkpoint must continue the task's learning-rate schedule: a run
     * resumed with other steps (another cosine and warm-up) would train
     * neither sweep (pm_ckpt_load checks the model, data, lr and decay) */
    pm_ckpt_info in;
    pm_status st = pm_ckpt_info_read(path, &in, &e);
    if (!st) st = pm_ckpt_check_schedule(path, &in, &t->cfg, &e);
    if (!st) st = pm_ckpt_load(host, path, &e);
    if (st) return pm_errf(err, st, "task %s: %s", t->name, e.msg);
    pm_select_saved_losses(dir, t->name, host->step, loss, val_loss);
    /* a validation loss not measured on this state is measured now (the
     * number the run would have: evaluation is deterministic), so a task
     * that runs no further step still ranks by it */
    if (!isfinite(*val_loss) && (st = pm_trainer_eval(host, val, eval_batches, val_loss, &e)))
        return pm_errf(err, st, "task %s: evaluating its checkpoint: %s", t->name, e.msg);
    *resumed = 1;
    return PM_OK;
}
