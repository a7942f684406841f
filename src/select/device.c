/* device.c: one model-selection device (internal.h): its slab of exactly
 * the bytes the layout needs (state slots, then the activation area; at
 * most the budget), allocated and touched once, and its copy thread, which
 * loads the next pass's shard state into the other slot while the device
 * computes (prefetch).
 * Copy thread states: job 0 idle, 1 a copy to do, 2 quit. */
#include <string.h>

#include "select/internal.h"
#include "util/alloc.h"

static void *copier_main(void *arg) {
    sel_dev *dv = arg;
    pthread_mutex_lock(&dv->cmu);
    for (;;) {
        while (dv->job == 0) pthread_cond_wait(&dv->ccv, &dv->cmu);
        if (dv->job == 2) break;
        sel_task *t = dv->jtask;
        int s = dv->jshard, slot = dv->jslot, whole = dv->jwhole;
        pthread_mutex_unlock(&dv->cmu);
        double t0 = pm_now(), bytes = 0;
        /* on an I/O error the pass loads (and fails) itself */
        sel_load_state(t, dv, s, slot, whole, &bytes);
        double t1 = pm_now();
        dv->jbytes += bytes; /* read by others only after the threads are joined */
        pthread_mutex_lock(&dv->cmu);
        dv->jt0 = t0, dv->jt1 = t1, dv->jcopied = 1;
        dv->job = 0;
        pthread_cond_broadcast(&dv->ccv);
    }
    pthread_mutex_unlock(&dv->cmu);
    return NULL;
}

void sel_copy_start(sel_dev *dv, sel_task *t, int s, int slot, int whole) {
    pthread_mutex_lock(&dv->cmu);
    dv->jtask = t, dv->jshard = s, dv->jslot = slot, dv->jwhole = whole, dv->job = 1;
    pthread_cond_broadcast(&dv->ccv);
    pthread_mutex_unlock(&dv->cmu);
}

void sel_copy_wait(sel_dev *dv, double *copy0, double *copy1) {
    pthread_mutex_lock(&dv->cmu);
    if (dv->job == 1) {
        double t0 = pm_now();
        while (dv->job == 1) pthread_cond_wait(&dv->ccv, &dv->cmu);
        dv->wait_s += pm_now() - t0;
    }
    *copy0 = dv->jcopied ? dv->jt0 : 0;
    *copy1 = dv->jcopied ? dv->jt1 : 0;
    dv->jcopied = 0;
    pthread_mutex_unlock(&dv->cmu);
}

pm_status sel_dev_init(sel_dev *dv, const pm_select_layout *L, int d, pm_err *err) {
    size_t bytes = pm_select_slab_bytes(L); /* the need, not the whole budget */
    dv->slab = pm_alloc_big(bytes);
    if (!dv->slab)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for device %d's %zu bytes", d, bytes);
    memset(dv->slab, 0, bytes); /* the slab is real: every page touched at the start */
    dv->slots = L->slots;
    dv->state_off[0] = 0, dv->state_off[1] = L->state_slot;
    dv->act_off = (size_t)L->slots * L->state_slot;
    dv->res_task[0] = dv->res_task[1] = -1;
    dv->res_whole[0] = dv->res_whole[1] = 0;
    dv->ran = -1;
    pthread_mutex_init(&dv->cmu, NULL);
    pthread_cond_init(&dv->ccv, NULL);
    if (pthread_create(&dv->copier, NULL, copier_main, dv)) {
        pthread_cond_destroy(&dv->ccv);
        pthread_mutex_destroy(&dv->cmu);
        return pm_errf(err, PM_ERR_NOMEM, "could not start device %d's copy thread", d);
    }
    dv->copier_up = 1;
    return PM_OK;
}

void sel_dev_free(sel_dev *dv) {
    if (dv->copier_up) {
        pthread_mutex_lock(&dv->cmu);
        dv->job = 2;
        pthread_cond_broadcast(&dv->ccv);
        pthread_mutex_unlock(&dv->cmu);
        pthread_join(dv->copier, NULL);
        pthread_cond_destroy(&dv->ccv);
        pthread_mutex_destroy(&dv->cmu);
        dv->copier_up = 0;
    }
    pm_free(dv->slab);
    dv->slab = NULL;
}
