/* transport.c: the transport interface (dispatch through pm_tp_ops) and the
 * threads transport: ndev devices in one process, one mailbox per receiving
 * device.
 *
 * Mailbox of device d (guarded by its mutex, its condvar signalled on every
 * completion addressed to d and on every rendezvous send d copies out):
 *   posted:  receives d posted that no message matched yet, in post order;
 *   pending: messages sent to d (isend) before a matching receive was
 *            posted, in send order, each a copy of the payload;
 *   rdv:     rendezvous sends (issend) to d before a matching receive was
 *            posted, in send order: the senders' own requests, pointing at
 *            the senders' buffers (nothing copied, nothing allocated);
 *   spare:   emptied message buffers kept for reuse;
 *   seq:     stamps pending messages and rdv requests as they are queued.
 * A message from s with tag t matches the first posted receive with
 * (peer s, tag t); a receive matches, of the pending messages and rdv
 * requests from s with tag t, the one queued first (lowest seq), so order
 * per (sender, receiver, tag) is kept both ways, isend and issend alike.
 *
 * Request state machine:
 *   isend:  idle --> done (the payload was copied before isend returned)
 *   issend: idle --> done (a posted receive matched: copied in)
 *                  | queued on rdv --(the matching irecv copies out of the
 *                    sender's buffer, sets done, signals the mailbox)--> done
 *                  | queued on rdv --(abort: unlinked)--> left; wait returns
 *                    the sticky error
 *   irecv:  idle --> done (a pending message or rdv request matched: copied)
 *                  | posted --(a matching isend/issend copies in)--> done
 * wait: blocks until done or the world is aborted (the sticky error). A
 * sender waits on the receiver's mailbox, whose condvar the copy signals.
 *
 * Invariants: a request is on at most one list (posted or rdv); `done` and
 * the lists change only under the receiving mailbox's lock; a queued
 * rendezvous buffer is read only under that lock and only while its request
 * is on rdv. The abort flag is set before any mailbox is signalled, each
 * mailbox is then locked, emptied of posted receives and rdv requests and
 * signalled; every send and receive re-checks the flag under the lock. So no
 * waiter misses the abort, no send writes into a receive whose owner already
 * gave up, and no receive reads a sender's buffer after the abort: a sender
 * may let its buffer go once its wait returned, done or not. A sender must
 * not abandon a queued issend (return, reuse the request or the buffer)
 * before one of those two. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipemem/pm_runtime.h"
#include "transport.h"

/* ---- interface ---------------------------------------------------------------- */

pm_status pm_tp_isend(pm_tp *tp, int peer, int tag, const void *buf, size_t len, pm_tp_req *r) {
    return tp->ops->isend(tp, peer, tag, buf, len, r);
}
pm_status pm_tp_issend(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                       pm_tp_req *r) {
    return tp->ops->issend(tp, peer, tag, buf, len, r);
}
pm_status pm_tp_irecv(pm_tp *tp, int peer, int tag, void *buf, size_t len, pm_tp_req *r) {
    return tp->ops->irecv(tp, peer, tag, buf, len, r);
}
pm_status pm_tp_wait(pm_tp *tp, pm_tp_req *r) { return tp->ops->wait(tp, r); }
pm_status pm_tp_test(pm_tp *tp, pm_tp_req *r, int *done) { return tp->ops->test(tp, r, done); }
void pm_tp_abort(pm_tp *tp, pm_status st, const char *msg) { tp->ops->abort(tp, st, msg); }
pm_status pm_tp_status(const pm_tp *tp, pm_err *err) { return tp->ops->status(tp, err); }

/* ---- threads transport -------------------------------------------------------- */

typedef struct msg {
    struct msg *next;
    int src, tag;
    uint64_t seq;      /* queue stamp (mailbox seq) */
    size_t len, cap;   /* payload bytes, buffer capacity */
    unsigned char *data; /* (cap) owned */
} msg;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pm_tp_req *posted, *posted_tail;
    msg *pending, *pending_tail;
    pm_tp_req *rdv, *rdv_tail; /* queued rendezvous sends (the senders' requests) */
    msg *spare;
    uint64_t seq;              /* next queue stamp */
} mailbox;

struct pm_tp_threads {
    int ndev;
    double timeout_s;
    mailbox *box; /* (ndev) */
    pm_tp *ep;    /* (ndev) endpoints */
    atomic_int aborted;
    pthread_mutex_t err_mu; /* guards st, err */
    pm_status st;
    pm_err err;
};

static pm_tp_threads *world_of(const pm_tp *tp) { return tp->impl; }

static pm_status sticky(const pm_tp_threads *w) {
    return atomic_load(&w->aborted) ? w->st : PM_OK;
}

static void th_abort(pm_tp *tp, pm_status st, const char *m) {
    pm_tp_threads *w = world_of(tp);
    pthread_mutex_lock(&w->err_mu);
    if (!atomic_load(&w->aborted)) {
        w->st = st ? st : PM_ERR_TRANSPORT;
        snprintf(w->err.msg, sizeof w->err.msg, "%s", m ? m : "transport aborted");
        atomic_store(&w->aborted, 1);
    }
    pthread_mutex_unlock(&w->err_mu);
    /* Unlink every posted receive: a waiter may return (and its request
     * go out of scope) as soon as it sees the flag, so no later send may
     * match it. Senders re-check the flag under the mailbox lock. */
    for (int d = 0; d < w->ndev; d++) {
        pthread_mutex_lock(&w->box[d].mu);
        w->box[d].posted = w->box[d].posted_tail = NULL;
        /* likewise every queued rendezvous send: its sender may return and
         * its buffer go out of scope, so no later receive may read it */
        w->box[d].rdv = w->box[d].rdv_tail = NULL;
        pthread_cond_broadcast(&w->box[d].cv);
        pthread_mutex_unlock(&w->box[d].mu);
    }
}

static pm_status th_status(const pm_tp *tp, pm_err *err) {
    pm_tp_threads *w = world_of(tp);
    pthread_mutex_lock(&w->err_mu);
    pm_status st = atomic_load(&w->aborted) ? w->st : PM_OK;
    if (st && err) *err = w->err;
    pthread_mutex_unlock(&w->err_mu);
    return st;
}

/* Fails the whole world with a message (the first failure wins). */
static pm_status fail(pm_tp *tp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pm_status fail(pm_tp *tp, const char *fmt, ...) {
    char buf[sizeof(pm_err)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    th_abort(tp, PM_ERR_TRANSPORT, buf);
    return sticky(world_of(tp));
}

/* Under mb's lock: copies len bytes of buf into the first receive posted
 * for (src, tag) and completes it. 1 if done, 0 if none is posted, -1 if
 * its length differs (*want: the receive's; nothing changed). */
static int deliver(mailbox *mb, int src, int tag, const void *buf, size_t len, size_t *want) {
    pm_tp_req *q = mb->posted, *prev = NULL;
    while (q && !(q->peer == src && q->tag == tag)) prev = q, q = q->next;
    if (!q) return 0;
    if (q->len != len) {
        *want = q->len;
        return -1;
    }
    if (len) memcpy(q->buf, buf, len);
    if (prev) prev->next = q->next;
    else mb->posted = q->next;
    if (mb->posted_tail == q) mb->posted_tail = prev;
    q->next = NULL;
    q->done = 1;
    pthread_cond_broadcast(&mb->cv);
    return 1;
}

/* Under mb's lock: queues a copy of the message, in a spare buffer when one
 * fits. 0 if out of memory. */
static int queue_copy(mailbox *mb, int src, int tag, const void *buf, size_t len) {
    msg *x = mb->spare, *xp = NULL;
    while (x && x->cap < len) xp = x, x = x->next;
    if (x) {
        if (xp) xp->next = x->next;
        else mb->spare = x->next;
    } else {
        x = pm_calloc(1, sizeof *x);
        if (x) x->data = pm_malloc(len ? len : 1), x->cap = len;
        if (!x || !x->data) {
            if (x) pm_free(x);
            return 0;
        }
    }
    *x = (msg){.src = src, .tag = tag, .seq = mb->seq++, .len = len, .cap = x->cap,
               .data = x->data};
    if (len) memcpy(x->data, buf, len);
    if (mb->pending_tail) mb->pending_tail->next = x;
    else mb->pending = x;
    mb->pending_tail = x;
    return 1;
}

/* Under mb's lock: queues the rendezvous send r itself (no copy). */
static void queue_rdv(mailbox *mb, pm_tp_req *r) {
    r->seq = mb->seq++;
    r->next = NULL;
    if (mb->rdv_tail) mb->rdv_tail->next = r;
    else mb->rdv = r;
    mb->rdv_tail = r;
}

/* isend (rdv 0) and issend (rdv 1): the same matching, then a copy or the
 * request itself waits for the receive. */
static pm_status th_send(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                         pm_tp_req *r, int rdv) {
    pm_tp_threads *w = world_of(tp);
    pm_status st = sticky(w);
    if (st) return st;
    if (peer < 0 || peer >= w->ndev)
        return fail(tp, "device %d sent tag %d to device %d, which does not exist",
                    tp->dev, tag, peer);
    *r = (pm_tp_req){.op = rdv ? 3 : 1, .peer = peer, .tag = tag, .sbuf = rdv ? buf : NULL,
                     .len = len, .src = tp->dev};
    mailbox *mb = &w->box[peer];
    pthread_mutex_lock(&mb->mu);
    if (atomic_load(&w->aborted)) {
        pthread_mutex_unlock(&mb->mu);
        return sticky(w);
    }
    size_t want = 0;
    int got = deliver(mb, tp->dev, tag, buf, len, &want);
    if (got < 0) {
        pthread_mutex_unlock(&mb->mu);
        return fail(tp, "device %d sent %zu bytes with tag %d to device %d, which posted a "
                        "receive of %zu bytes", tp->dev, len, tag, peer, want);
    }
    if (!got && !rdv && !queue_copy(mb, tp->dev, tag, buf, len)) {
        pthread_mutex_unlock(&mb->mu);
        return fail(tp, "device %d: out of memory buffering %zu bytes (tag %d) for device %d",
                    tp->dev, len, tag, peer);
    }
    if (!got && rdv) queue_rdv(mb, r);
    else r->done = 1; /* copied: the caller's buffer is free again */
    pthread_mutex_unlock(&mb->mu);
    return PM_OK;
}

static pm_status th_isend(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                          pm_tp_req *r) {
    return th_send(tp, peer, tag, buf, len, r, 0);
}

static pm_status th_issend(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                           pm_tp_req *r) {
    return th_send(tp, peer, tag, buf, len, r, 1);
}

/* Under mb's lock: copies the queued rendezvous send q out of its sender's
 * buffer, unlinks it and wakes its sender (waiting on this mailbox). */
static void take_rdv(mailbox *mb, pm_tp_req *q, pm_tp_req *prev, void *buf) {
    if (q->len) memcpy(buf, q->sbuf, q->len);
    if (prev) prev->next = q->next;
    else mb->rdv = q->next;
    if (mb->rdv_tail == q) mb->rdv_tail = prev;
    q->next = NULL;
    q->done = 1;
    pthread_cond_broadcast(&mb->cv);
}

static pm_status th_irecv(pm_tp *tp, int peer, int tag, void *buf, size_t len, pm_tp_req *r) {
    pm_tp_threads *w = world_of(tp);
    pm_status st = sticky(w);
    if (st) return st;
    if (peer < 0 || peer >= w->ndev)
        return fail(tp, "device %d posted a receive (tag %d) from device %d, which does not "
                        "exist", tp->dev, tag, peer);
    *r = (pm_tp_req){.op = 2, .peer = peer, .tag = tag, .buf = buf, .len = len};
    mailbox *mb = &w->box[tp->dev];
    pthread_mutex_lock(&mb->mu);
    if (atomic_load(&w->aborted)) {
        pthread_mutex_unlock(&mb->mu);
        return sticky(w);
    }
    msg *x = mb->pending, *prev = NULL;
    while (x && !(x->src == peer && x->tag == tag)) prev = x, x = x->next;
    pm_tp_req *q = mb->rdv, *qprev = NULL;
    while (q && !(q->src == peer && q->tag == tag)) qprev = q, q = q->next;
    if (x && q) { /* both kinds wait: the one sent first */
        if (x->seq < q->seq) q = NULL;
        else x = NULL;
    }
    size_t sent = x ? x->len : q ? q->len : len;
    if (sent != len) {
        pthread_mutex_unlock(&mb->mu);
        return fail(tp, "device %d sent %zu bytes with tag %d to device %d, which posted a "
                        "receive of %zu bytes", peer, sent, tag, tp->dev, len);
    }
    if (x) {
        if (len) memcpy(buf, x->data, len);
        if (prev) prev->next = x->next;
        else mb->pending = x->next;
        if (mb->pending_tail == x) mb->pending_tail = prev;
        x->next = mb->spare;
        mb->spare = x;
        r->done = 1;
    } else if (q) {
        take_rdv(mb, q, qprev, buf);
        r->done = 1;
    } else {
        if (mb->posted_tail) mb->posted_tail->next = r;
        else mb->posted = r;
        mb->posted_tail = r;
    }
    pthread_mutex_unlock(&mb->mu);
    return PM_OK;
}

static pm_status th_wait(pm_tp *tp, pm_tp_req *r) {
    pm_tp_threads *w = world_of(tp);
    if (r->op == 0) return sticky(w);
    mailbox *mb = &w->box[r->op == 2 ? tp->dev : r->peer];
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)w->timeout_s;
    int timed_out = 0;
    pthread_mutex_lock(&mb->mu);
    while (!r->done && !atomic_load(&w->aborted) && !timed_out)
        timed_out = pthread_cond_timedwait(&mb->cv, &mb->mu, &dl) == ETIMEDOUT;
    int done = r->done;
    pthread_mutex_unlock(&mb->mu);
    if (done) {
        r->op = 0;
        return PM_OK;
    }
    if (timed_out && !atomic_load(&w->aborted) && r->op == 3)
        return fail(tp, "device %d waited %.0f s for device %d to receive its message with "
                        "tag %d (a schedule or executor bug)",
                    tp->dev, w->timeout_s, r->peer, r->tag);
    if (timed_out && !atomic_load(&w->aborted))
        return fail(tp, "device %d waited %.0f s for a message with tag %d from device %d "
                        "that never came (a schedule or executor bug)",
                    tp->dev, w->timeout_s, r->tag, r->peer);
    return sticky(w);
}

static pm_status th_test(pm_tp *tp, pm_tp_req *r, int *done) {
    pm_tp_threads *w = world_of(tp);
    if (r->op == 0) {
        *done = 1;
        return sticky(w);
    }
    mailbox *mb = &w->box[r->op == 2 ? tp->dev : r->peer];
    pthread_mutex_lock(&mb->mu);
    *done = r->done;
    pthread_mutex_unlock(&mb->mu);
    if (*done) r->op = 0;
    return sticky(w);
}

static const pm_tp_ops threads_ops = {"threads", th_isend, th_issend, th_irecv,
                                      th_wait,   th_test,  th_abort,  th_status};

static void free_msgs(msg *x) {
    while (x) {
        msg *n = x->next;
        pm_free(x->data);
        pm_free(x);
        x = n;
    }
}

pm_status pm_tp_threads_create(pm_tp_threads **out, int ndev, double timeout_s, pm_err *err) {
    *out = NULL;
    if (ndev < 1) return pm_errf(err, PM_ERR_ARG, "transport: devices must be >= 1 (got %d)", ndev);
    pm_tp_threads *w = pm_calloc(1, sizeof *w);
    if (!w) return pm_errf(err, PM_ERR_NOMEM, "out of memory creating the transport");
    w->ndev = ndev;
    w->timeout_s = timeout_s > 0 ? timeout_s : PM_COMM_TIMEOUT;
    w->box = pm_calloc((size_t)ndev, sizeof *w->box);
    w->ep = pm_calloc((size_t)ndev, sizeof *w->ep);
    if (!w->box || !w->ep) {
        pm_free(w->box);
        pm_free(w->ep);
        pm_free(w);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory creating the transport");
    }
    pthread_mutex_init(&w->err_mu, NULL);
    atomic_init(&w->aborted, 0);
    for (int d = 0; d < ndev; d++) {
        pthread_mutex_init(&w->box[d].mu, NULL);
        pthread_cond_init(&w->box[d].cv, NULL);
        w->ep[d] = (pm_tp){&threads_ops, w, d, ndev};
    }
    *out = w;
    return PM_OK;
}

pm_status pm_tp_threads_reserve(pm_tp_threads *w, int dev, int count, size_t bytes,
                                pm_err *err) {
    PM_ASSERT(w && dev >= 0 && dev < w->ndev && count >= 0);
    mailbox *mb = &w->box[dev];
    for (int k = 0; k < count; k++) {
        msg *x = pm_calloc(1, sizeof *x);
        if (x) x->data = pm_malloc(bytes ? bytes : 1), x->cap = bytes;
        if (!x || !x->data) {
            pm_free(x);
            return pm_errf(err, PM_ERR_NOMEM, "out of memory reserving %d message buffers of "
                           "%zu bytes for device %d", count, bytes, dev);
        }
        x->next = mb->spare; /* not yet shared: no lock needed before the threads start */
        mb->spare = x;
    }
    return PM_OK;
}

pm_tp *pm_tp_threads_endpoint(pm_tp_threads *w, int dev) {
    PM_ASSERT(w && dev >= 0 && dev < w->ndev);
    return &w->ep[dev];
}

void pm_tp_threads_reset(pm_tp_threads *w) {
    if (!w) return;
    for (int d = 0; d < w->ndev; d++) {
        mailbox *mb = &w->box[d];
        pthread_mutex_lock(&mb->mu);
        mb->posted = mb->posted_tail = NULL;
        mb->rdv = mb->rdv_tail = NULL;
        if (mb->pending_tail) {
            mb->pending_tail->next = mb->spare;
            mb->spare = mb->pending;
        }
        mb->pending = mb->pending_tail = NULL;
        pthread_mutex_unlock(&mb->mu);
    }
    pthread_mutex_lock(&w->err_mu);
    atomic_store(&w->aborted, 0);
    w->st = PM_OK;
    w->err.msg[0] = 0;
    pthread_mutex_unlock(&w->err_mu);
}

void pm_tp_threads_destroy(pm_tp_threads *w) {
    if (!w) return;
    for (int d = 0; d < w->ndev; d++) {
        free_msgs(w->box[d].pending);
        free_msgs(w->box[d].spare);
        pthread_mutex_destroy(&w->box[d].mu);
        pthread_cond_destroy(&w->box[d].cv);
    }
    pthread_mutex_destroy(&w->err_mu);
    pm_free(w->box);
    pm_free(w->ep);
    pm_free(w);
}
