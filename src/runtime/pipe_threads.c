/* pipe_threads.c: the pipe's device threads, one per device. Started once
 * in init, parked between steps, so no thread is created in a step. A step
 * bumps `gen` and waits until every device has finished it; free sets `quit` and joins.
 *   parked --(gen changes: the body)--> running --(finished++)--> parked
 *   parked --(quit)--> exit */
#include <pthread.h>

#include "runtime/internal.h"
#include "util/alloc.h"

struct pm_pipe_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int64_t gen;     /* steps started */
    int finished;    /* devices done with the current step */
    int quit;        /* set by free */
    int started;     /* threads running */
    pthread_t *th;   /* (p) */
};

/* A device's run: the body the caller chose, its allocations counted as
 * the device's own (MPI's send buffers are made as needed). */
static void dev_run(pm_pipe_dev *dv) {
    dv->err.msg[0] = 0;
    int64_t *was = pm_alloc_account(&dv->pp->acct[dv->g]);
    dv->st = dv->pp->body(dv);
    pm_alloc_account(was);
}

static void *worker(void *arg) {
    pm_pipe_dev *dv = arg;
    struct pm_pipe_pool *pl = dv->pp->pool;
    int64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        while (pl->gen == seen && !pl->quit) pthread_cond_wait(&pl->go, &pl->mu);
        if (pl->quit) {
            pthread_mutex_unlock(&pl->mu);
            return NULL;
        }
        seen = pl->gen;
        pthread_mutex_unlock(&pl->mu);
        dev_run(dv);
        pthread_mutex_lock(&pl->mu);
        pl->finished++;
        pthread_cond_signal(&pl->done);
        pthread_mutex_unlock(&pl->mu);
    }
}

void pm_pipe_pool_free(pm_pipe *pp) {
    struct pm_pipe_pool *pl = pp->pool;
    if (!pl) return;
    pthread_mutex_lock(&pl->mu);
    pl->quit = 1;
    pthread_cond_broadcast(&pl->go);
    pthread_mutex_unlock(&pl->mu);
    for (int d = 0; d < pl->started; d++) pthread_join(pl->th[d], NULL);
    pthread_mutex_destroy(&pl->mu);
    pthread_cond_destroy(&pl->go);
    pthread_cond_destroy(&pl->done);
    pm_free(pl->th);
    pm_free(pl);
    pp->pool = NULL;
}

pm_status pm_pipe_pool_start(pm_pipe *pp, pm_err *err) {
    struct pm_pipe_pool *pl = pm_calloc(1, sizeof *pl);
    if (!pl) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the device threads");
    pl->th = pm_calloc((size_t)pp->nd, sizeof(pthread_t));
    if (!pl->th) {
        pm_free(pl);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for the device threads");
    }
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->go, NULL);
    pthread_cond_init(&pl->done, NULL);
    pp->pool = pl;
    for (; pl->started < pp->nd; pl->started++)
        if (pthread_create(&pl->th[pl->started], NULL, worker, &pp->dev[pl->started]))
            return pm_errf(err, PM_ERR_NOMEM, "could not start device thread %d of %d",
                           pl->started, pp->nd);
    return PM_OK;
}

void pm_pipe_run(pm_pipe *pp, pm_run_kind kind, pm_status (*body)(pm_pipe_dev *dv)) {
    pp->run = kind, pp->body = body;
    if (pp->mpi) { /* this rank's device, here */
        dev_run(&pp->dev[pp->lo]);
        return;
    }
    struct pm_pipe_pool *pl = pp->pool;
    pthread_mutex_lock(&pl->mu);
    pl->finished = 0;
    pl->gen++;
    pthread_cond_broadcast(&pl->go);
    while (pl->finished < pp->nd) pthread_cond_wait(&pl->done, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
}

