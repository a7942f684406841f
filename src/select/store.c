/* store.c: where a task's state lives between its passes (internal.h): in
 * RAM, its host trainer's slabs (parameters | gradients | m | v, n floats
 * each), or spilled to a file DIR/NAME.state with the same layout, read
 * and written with pread/pwrite a shard at a time, so a sweep can hold more
 * state than memory. A spilled task has no slabs in RAM between passes;
 * they are materialized (read whole) only around an evaluation, a
 * checkpoint or the end, and released again. */
#define _XOPEN_SOURCE 700 /* pread, pwrite */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "select/internal.h"

/* Reads or writes n bytes at off, whole (both may return short). */
static int io_all(int fd, void *buf, size_t n, off_t off, int wr) {
    for (size_t done = 0; done < n;) {
        ssize_t k = wr ? pwrite(fd, (char *)buf + done, n - done, off + (off_t)done)
                       : pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (k < 0 && errno == EINTR) continue;
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
    if (t->fd < 0) {
        float *h = host_slab(t, slab) + at;
        if (wr) memcpy(h, buf, n * sizeof(float));
        else memcpy(buf, h, n * sizeof(float));
        return 0;
    }
    if (io_all(t->fd, buf, n * sizeof(float), slab_off(t, slab, at), wr)) {
        snprintf(t->why, sizeof t->why, "spill file: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    return 0;
}

/* The global gradient norm's sum of squares in index order: what
 * pm_optim_sumsq computes over the whole slab, read in pieces. */
int sel_store_sumsq(sel_task *t, double *out) {
    if (t->fd < 0) {
        *out = pm_optim_sumsq(t->host->grads, t->host->n_params);
        return 0;
    }
    float buf[4096];
    double s = 0;
    for (size_t at = 0, n = t->host->n_params; at < n;) {
        size_t k = n - at < 4096 ? n - at : 4096;
        if (sel_store_io(t, 1, at, k, buf, 0)) return -1;
        for (size_t i = 0; i < k; i++) s += (double)buf[i] * (double)buf[i];
        at += k;
    }
    *out = s;
    return 0;
}

/* Spilled: the slabs back in RAM (one block, as pm_trainer_init made). */
int sel_store_materialize(sel_task *t) {
    pm_trainer *h = t->host;
    if (t->fd < 0 || h->params) return 0;
    size_t n = h->n_params;
    float *b = pm_malloc(4 * n * sizeof(float));
    if (!b) {
        snprintf(t->why, sizeof t->why, "out of memory reading its spilled state");
        return -1;
    }
    if (io_all(t->fd, b, 4 * n * sizeof(float), 0, 0)) {
        pm_free(b);
        snprintf(t->why, sizeof t->why, "spill file: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    h->params = b, h->grads = b + n, h->m = b + 2 * n, h->v = b + 3 * n;
    return 0;
}

/* Spilled: the slabs written to the file and released from RAM. */
int sel_store_release(sel_task *t) {
    pm_trainer *h = t->host;
    if (t->fd < 0 || !h->params) return 0;
    if (io_all(t->fd, h->params, 4 * h->n_params * sizeof(float), 0, 1)) {
        snprintf(t->why, sizeof t->why, "spill file: %s", strerror(errno ? errno : EIO));
        return -1;
    }
    pm_free(h->params);
    h->params = h->grads = h->m = h->v = NULL;
    return 0;
}

pm_status sel_store_open(sel_task *t, const char *dir, pm_err *err) {
    t->fd = -1;
    if (!dir) return PM_OK;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.state", dir, t->task->name);
    t->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (t->fd < 0)
        return pm_errf(err, PM_ERR_IO, "--spill %s: %s: %s", dir, path, strerror(errno));
    unlink(path); /* the state needs no name: it goes when the run ends */
    if (sel_store_release(t))
        return pm_errf(err, PM_ERR_IO, "--spill %s: writing task %s's state: %s", dir,
                       t->task->name, t->why);
    return PM_OK;
}

/* At the end: the state back in RAM (the caller's trainer is whole again). */
int sel_store_close(sel_task *t) {
    if (!t->host || t->fd < 0) return 0; /* (never initialised, or in RAM) */
    int rc = sel_store_materialize(t);
    close(t->fd);
    t->fd = -1;
    return rc;
}
