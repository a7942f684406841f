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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "select/internal.h"
#include "train/trainer.h"
#include "train/ckpt.h"
#include "parts.h"

/* The record's line: its fields, then " sum " and the FNV-1a of every
 * byte before it (pm_select.h). *len gets its length. */
static void record_text(const pm_select_record *r, char *buf, size_t cap, size_t *len) {
    int n = snprintf(buf, cap, "step %lld loss %.17g val_loss %.17g ckpt %016llx",
                     (long long)r->step, r->loss, r->val, (unsigned long long)r->ckpt);
    uint64_t h = pm_fnv1a64(PM_FNV_OFFSET, buf, (size_t)n);
    n += snprintf(buf + n, cap - (size_t)n, " sum %016llx\n", (unsigned long long)h);
    *len = (size_t)n;
}

uint64_t pm_select_record_ckpt(const pm_ckpt_info *in) {
    uint8_t b[8 * (PM_CKPT_SLABS + 1)];
    for (int s = 0; s < PM_CKPT_SLABS; s++) pm_put_u64(b + 8 * s, in->sums[s]);
    pm_put_u64(b + 8 * PM_CKPT_SLABS, (uint64_t)in->step);
    return pm_fnv1a64(PM_FNV_OFFSET, b, sizeof b);
}

pm_status pm_select_record_parse(const char *text, size_t len, pm_select_record *r, pm_err *err) {
    char canon[PM_SELECT_RECORD_MAX + 1], copy[PM_SELECT_RECORD_MAX + 1];
    long long step;
    unsigned long long ck, sum;
    size_t n;
    *r = (pm_select_record){0, NAN, NAN, 0};
    if (len > PM_SELECT_RECORD_MAX || memchr(text, 0, len))
        return pm_errf(err, PM_ERR_FORMAT, "not one line of a record");
    memcpy(copy, text, len);
    copy[len] = 0;
    char x[64], y[64];
    if (sscanf(copy, "step %lld loss %63s val_loss %63s ckpt %llx sum %llx", &step, x, y, &ck,
               &sum) != 5)
        return pm_errf(err, PM_ERR_FORMAT, "not a record (step K loss X val_loss Y ckpt C sum H)");
    pm_select_record got = {step, strtod(x, NULL), strtod(y, NULL), ck};
    /* its text must be the one its fields print (so no byte goes unsummed)
     * and its sum that text's */
    record_text(&got, canon, sizeof canon, &n);
    if (n != len || memcmp(canon, copy, len))
        return pm_errf(err, PM_ERR_FORMAT, "its text or its sum was changed");
    *r = got;
    return PM_OK;
}

/* Task t's record beside its checkpoint (identity ckpt): the validation
 * loss only if it was measured on this very state. */
static pm_status save_losses(const char *dir, const sel_task *t, uint64_t ckpt, pm_err *err) {
    char path[4096], line[PM_SELECT_RECORD_MAX + 1];
    size_t n;
    int64_t step = t->host->step;
    pm_select_record r = {step, t->last_loss, t->val_step == step ? t->val_loss : NAN, ckpt};
    snprintf(path, sizeof path, "%s/%s.loss", dir, t->task->name);
    record_text(&r, line, sizeof line, &n);
    pm_wfile w;
    pm_status st = pm_wfile_open(&w, path, err);
    if (st) return st;
    fwrite(line, 1, n, w.f);
    return pm_wfile_commit(&w, err);
}

int sel_record_save(const char *dir, sel_task *t) {
    char path[4096];
    pm_err e;
    snprintf(path, sizeof path, "%s/%s.ckpt", dir, t->task->name);
    sel_flush_updates(t);
    pm_ckpt_info in;
    if (!pm_ckpt_save(t->host, path, &e) && !pm_ckpt_info_read(path, &in, &e) &&
        !save_losses(dir, t, pm_select_record_ckpt(&in), &e))
        return 0;
    snprintf(t->why, sizeof t->why, "saving: %.140s", e.msg);
    return 1;
}

void sel_record_stop(const char *dir, const sel_task *t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.stopped", dir, t->task->name);
    FILE *f = fopen(path, "w");
    if (f) fprintf(f, "%s\n", t->why), fclose(f);
}

pm_status pm_select_saved_losses(const char *dir, const char *name, const pm_ckpt_info *ck,
                                 double *loss, double *val, pm_err *err) {
    char path[4096], *text = NULL;
    size_t len;
    pm_select_record r;
    pm_err e;
    *loss = *val = NAN;
    snprintf(path, sizeof path, "%s/%s.loss", dir, name);
    if (access(path, F_OK)) return PM_OK; /* none yet: killed before its first record */
    pm_status st = pm_read_file(path, PM_SELECT_RECORD_MAX, &text, &len, &e);
    if (!st) st = pm_select_record_parse(text, len, &r, &e);
    pm_free(text);
    if (st)
        return pm_errf(err, st, "%s: %s: the record was edited or damaged; delete it, and the "
                       "validation loss is measured again on %s/%s.ckpt", path, e.msg, dir, name);
    if (r.step != ck->step) return PM_OK; /* an earlier checkpoint's: killed between the two */
    if (r.ckpt != pm_select_record_ckpt(ck))
        return pm_errf(err, PM_ERR_FORMAT, "%s: the record is of another checkpoint than "
                       "%s/%s.ckpt at step %lld; delete it, and the validation loss is measured "
                       "again", path, dir, name, (long long)r.step);
    *loss = r.loss, *val = r.val;
    return PM_OK;
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
    if (!st) st = pm_select_saved_losses(dir, t->name, &in, loss, val_loss, &e);
    if (st) return pm_errf(err, st, "task %s: %s", t->name, e.msg);
    /* a validation loss not measured on this state is measured now (the
     * number the run would have: evaluation is deterministic), so a task
     * that runs no further step still ranks by it */
    if (!isfinite(*val_loss) && (st = pm_trainer_eval(host, val, eval_batches, val_loss, &e)))
        return pm_errf(err, st, "task %s: evaluating its checkpoint: %s", t->name, e.msg);
    *resumed = 1;
    return PM_OK;
}
