/* store.c: where a task's state lives between its passes (internal.h): in
 * RAM, its host trainer's slabs (parameters | gradients | m | v, n floats
 * each), or spilled to a file DIR/NAME.state with the same layout, read
 * and written with pread/pwrite a shard at a time, so a sweep can hold more
 * state than memory. A spilled task has no slabs in RAM between passes;
 * they are read whole only around an evaluation or a checkpoint (one task
 * at a time) and written out again. The caller's task records the spill
 * (pm_select_task.spilled; the trainer knows nothing of it), so a host
 * spilled as soon as it is made (the CLI does that) stays spilled after the
 * run until its caller loads it. */
#define _XOPEN_SOURCE 700 /* pread, pwrite */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipemem/pm_gpt.h"
#include "pipemem/pm_select.h"
#include "select/internal.h"
#include "parts.h"
#include "util/file.h"

/* Reads or writes n bytes at off, whole (both may return short). */
static int io_all(int fd, void *buf, size_t n, off_t off, int wr) {
    for (size_t done = 0; done < n;) {
        ssize_t k = wr ? pwrite(fd, (char *)buf + done, n - done, off + (off_t)done)
                       : pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = EIO; /* the file ends early (truncated): not a stale errno */
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static off_t slab_off(const sel_task *t, int slab, size_t at) {
    return (off_t)(((size_t)slab * t->host->n_params + at) * sizeof(float));
}

static float *host_slab(const sel_task *t, int slab) {
    pm_trainer *h = t->host;
    return slab == 0 ? h->params : slab == 1 ? h->grads : slab == 2 ? h->m : h->v;
}

int sel_store_io(sel_task *t, int slab, size_t at, size_t n, float *buf, int wr) {
    if (!t->task->spilled || t->host->params) { /* in RAM, or brought back around an evaluation */
        float *x = host_slab(t, slab) + at;
        if (wr) memcpy(x, buf, n * sizeof(float));
        else memcpy(buf, x, n * sizeof(float));
        return 0;
    }
    if (io_all(t->task->spill_fd, buf, n * sizeof(float), slab_off(t, slab, at), wr)) {
        int e = errno ? errno : EIO;
        if (t->why_mu) pthread_mutex_lock(t->why_mu);
        snprintf(t->why, sizeof t->why, "spill file: %s", strerror(e));
        if (t->why_mu) pthread_mutex_unlock(t->why_mu);
        return -1;
    }
    return 0;
}

/* The global gradient norm (pm_optim_norm), from the slab in RAM or read
 * from the spill file in pieces. */
/* The slabs, and the model workspace an evaluation needs (scratch: its
 * contents do not matter between uses, so it goes out with the slabs). */
pm_status pm_select_host_load(const pm_select_task *task, pm_trainer *h, pm_err *err) {
    if (!task->spilled || h->params) return PM_OK;
    size_t n = h->n_params, wb = pm_gpt_work_bytes(&h->cfg.model, h->cfg.batch / h->cfg.micro,
                                                   h->cfg.model.ctx);
    float *b = pm_malloc(4 * n * sizeof(float));
    void *w = pm_malloc(wb);
    if (!b || !w) {
        pm_free(b), pm_free(w);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory reading a spilled task's state");
    }
    if (io_all(task->spill_fd, b, 4 * n * sizeof(float), 0, 0)) {
        pm_free(b), pm_free(w);
        return pm_errf(err, PM_ERR_IO, "spill file: %s", strerror(errno ? errno : EIO));
    }
    h->params = b, h->grads = b + n, h->m = b + 2 * n, h->v = b + 3 * n, h->work = w;
    return PM_OK;
}

pm_status pm_select_host_unload(const pm_select_task *task, pm_trainer *h, pm_err *err) {
    if (!task->spilled || !h->params) return PM_OK;
    if (io_all(task->spill_fd, h->params, 4 * h->n_params * sizeof(float), 0, 1))
        return pm_errf(err, PM_ERR_IO, "spill file: %s", strerror(errno ? errno : EIO));
    pm_free(h->params);
    pm_free(h->work);
    h->params = h->grads = h->m = h->v = NULL;
    h->work = NULL;
    return PM_OK;
}

pm_status pm_select_spill(pm_select_task *task, pm_trainer *h, const char *dir, pm_err *err) {
    if (task->spilled) return PM_OK;
    const char *name = task->name;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.state", dir, name);
    /* a name of its own beside PATH (pm_tmp_open: created exclusively), so
     * two processes spilling the same task into one directory (ranks of a
     * sweep on one host) never share a file */
    char *tmp = NULL;
    int fd = pm_tmp_open(path, 1, &tmp);
    if (fd < 0)
        return pm_errf(err, PM_ERR_IO, "spill_dir %s: %s: %s", dir, path, strerror(errno));
    unlink(tmp); /* the state needs no name: it goes when the run ends */
    pm_free(tmp);
    if (fchmod(fd, 0600)) { /* as before any state is written: this user's alone */
        close(fd);
        return pm_errf(err, PM_ERR_IO, "spill_dir %s: %s: %s", dir, path, strerror(errno));
    }
    task->spilled = 1, task->spill_fd = fd;
    pm_err e;
    pm_status st = pm_select_host_unload(task, h, &e);
    if (st) {
        close(fd);
        task->spilled = 0;
        return pm_errf(err, st, "spill_dir %s: writing task %s's state: %s", dir, name, e.msg);
    }
    return PM_OK;
}

/* Around an evaluation or a checkpoint a spilled task's slabs come back
 * whole, and go out again after. */
int sel_store_materialize(sel_task *t) {
    pm_err e;
    if (!pm_select_host_load(t->task, t->host, &e)) return 0;
    snprintf(t->why, sizeof t->why, "%.150s", e.msg);
    return -1;
}

int sel_store_release(sel_task *t) {
    pm_err e;
    if (!pm_select_host_unload(t->task, t->host, &e)) return 0;
    snprintf(t->why, sizeof t->why, "%.150s", e.msg);
    return -1;
}

pm_status sel_store_open(sel_task *t, const char *dir, pm_err *err) {
    return dir ? pm_select_spill(t->task, t->host, dir, err) : PM_OK;
}

/* At the end: a spilled task's slabs written out (its host stays spilled). */
int sel_store_close(sel_task *t) { return t->host ? sel_store_release(t) : 0; }
