/* transport_mpi.c: the MPI transport (pm_runtime.h): one device per rank,
 * the same contract as the threads transport, so the executor cannot tell
 * them apart.
 *
 * Two communicators, both duplicates of MPI_COMM_WORLD with errors returned:
 *   data  the executor's messages, tag = the executor's tag;
 *   ctl   abort lines: one receive from any rank is always posted.
 *
 * Sends: isend copies the payload into a send buffer of the transport and
 * starts MPI_Isend from there; the caller's request is complete at once.
 * A buffer is free again when its MPI send completed (reaped on every
 * call). issend starts MPI_Issend straight from the caller's buffer (MPI's
 * synchronous mode: complete only once the matching receive has started),
 * so no buffer of the transport grows with the message. Receives and
 * rendezvous sends: a slot of `slot` holds the MPI request of each pending
 * one; the caller's pm_tp_req names the slot.
 *
 * Request state machine (receives and rendezvous sends):
 *   idle --irecv/issend--> pending (slot taken) --wait/test sees MPI
 *        complete--> done (slot freed)
 *   pending --destroy--> receive: cancelled (slot freed, buffer untouched);
 *        rendezvous send: cancelled if MPI can (OpenMPI's ob1 cannot cancel
 *        sends), else left pending and reported (pm_tp_mpi_destroy returns
 *        1: MPI may still read the caller's buffer, which must outlive it)
 * Invariants: a send buffer is touched by the caller's data only while its
 * request is MPI_REQUEST_NULL; a slot is MPI_REQUEST_NULL exactly when free;
 * the sticky error is set once, by the first local failure or the first
 * abort line received. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipemem/pm_runtime.h"
#include "transport.h"

#ifndef PM_HAVE_MPI

static pm_status no_mpi(pm_err *err) {
    return pm_errf(err, PM_ERR_ARG, "the MPI transport: this pipemem was built without MPI "
                   "(install libopenmpi-dev and rebuild without NO_MPI=1)");
}
int pm_mpi_built(void) { return 0; }
int pm_mpi_launched(void) { return getenv("OMPI_COMM_WORLD_SIZE") != NULL; }
void pm_mpi_set_timeout(double seconds) { (void)seconds; }
pm_status pm_mpi_init(int *rank, int *size, pm_err *err) {
    *rank = 0, *size = 1;
    return no_mpi(err);
}
void pm_mpi_finalize(void) {}
int pm_mpi_await_root(void) { return 0; }
int pm_mpi_agree(int ok, pm_err *err) {
    (void)err;
    return ok ? -1 : 0;
}
pm_status pm_mpi_same_word(const char *mine, int *first, char theirs[PM_MPI_WORD], pm_err *err) {
    (void)mine, (void)theirs;
    *first = -1;
    return no_mpi(err);
}
pm_status pm_mpi_bcast(void *buf, size_t bytes, pm_err *err) {
    (void)buf, (void)bytes;
    return no_mpi(err);
}
pm_status pm_tp_mpi_create(pm_tp_mpi **w, int nsend, size_t send_bytes, int nreq,
                           double timeout_s, pm_err *err) {
    (void)nsend, (void)send_bytes, (void)nreq, (void)timeout_s;
    *w = NULL;
    return no_mpi(err);
}
pm_tp *pm_tp_mpi_endpoint(pm_tp_mpi *w) {
    (void)w;
    return NULL;
}
pm_status pm_tp_mpi_barrier(pm_tp_mpi *w) {
    (void)w;
    return no_mpi(NULL);
}
int pm_tp_mpi_destroy(pm_tp_mpi *w) {
    (void)w;
    return 0;
}

#else

#include <mpi.h>

typedef struct {
    int32_t st, rank;
    int32_t silent; /* its sender waited out a silent rank (g_silent): so must we */
    char msg[sizeof(pm_err)];
} abort_line;

typedef struct {
    MPI_Request req; /* MPI_REQUEST_NULL when free */
    unsigned char *buf;
    int peer;        /* of the last send (error lines) */
} send_buf;

typedef struct {
    MPI_Request req; /* a pending receive or rendezvous send; MPI_REQUEST_NULL when free */
    int send;        /* 1: a rendezvous send (MPI_Issend), 0: a receive */
} req_slot;

struct pm_tp_mpi {
    MPI_Comm data, ctl;
    int rank, size, tag_ub;
    double timeout_s;
    pm_tp ep;
    send_buf *send;           /* (nsend) buffers; the first nbuf allocated */
    int nsend, nbuf;
    size_t send_bytes;
    req_slot *slot;           /* (nslot) pending receives and rendezvous sends */
    int nslot;
    abort_line in, out;       /* the posted abort receive's buffer; the line we sent */
    MPI_Request in_req, *out_req; /* (size) */
    int aborted;
    pm_status st;
    pm_err err;
};

/* The process's MPI: initialised once (pm_mpi_init, idempotent); the
 * agreements and broadcasts of pm_mpi_* go point to point through g_comm
 * (a duplicate of the world), each wait bounded by g_timeout; g_silent is
 * set when any wait of this process (there or in a transport) ran out, and
 * then pm_mpi_finalize aborts the job instead of finalizing, which would
 * wait for the silent rank for ever. */
static int g_inited, g_silent, g_rank, g_size = 1;
static int g_told_root, g_awaited; /* a silent rank's abort line went to rank 0; waited */
static MPI_Comm g_comm = MPI_COMM_NULL;
static double g_timeout = PM_COMM_TIMEOUT;

enum { TAG_GATHER = 1, TAG_BCAST = 2 };

int pm_mpi_built(void) { return 1; }
int pm_mpi_launched(void) { return getenv("OMPI_COMM_WORLD_SIZE") != NULL; }
void pm_mpi_set_timeout(double seconds) { g_timeout = seconds > 0 ? seconds : PM_COMM_TIMEOUT; }

static pm_status mpi_fail(pm_err *err, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", rc);
    return pm_errf(err, PM_ERR_TRANSPORT, "MPI: %s: %s", what, s);
}

/* Over TCP (ranks on other hosts), OpenMPI sends a message above 64 KiB in
 * two phases, the second when the sender next calls MPI; a rank computing
 * a pass calls none, so its activation waited for the pass to end (6 to
 * 11 ms measured on 256 KiB messages against 0.3 ms for the transfer).
 * OpenMPI's TCP progress thread moves it meanwhile (0.06 to 0.17 ms); it
 * waits in epoll, costing no measurable CPU. Set unless the user chose. */
static void tcp_progress(void) { setenv("OMPI_MCA_btl_tcp_progress_thread", "1", 0); }

pm_status pm_mpi_init(int *rank, int *size, pm_err *err) {
    int have = 0, rc;
    *rank = g_rank, *size = g_size;
    if (g_inited) return PM_OK;
    tcp_progress();
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &have)) != MPI_SUCCESS)
        return pm_errf(err, PM_ERR_TRANSPORT, "MPI_Init failed (code %d); start pipemem with "
                       "mpirun, or without the MPI transport", rc);
    g_inited = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    *rank = g_rank, *size = g_size;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &g_comm)) != MPI_SUCCESS)
        return mpi_fail(err, rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
    return PM_OK;
}

/* A rank other than 0 whose wait for a silent rank ran out, or that took
 * such a rank's abort line, ends the job only after rank 0 had the time
 * to: rank 0 says the line for every rank, having taken the abort line at
 * its next transport call (or waited out a silent peer of its own), then
 * aborts the job, and mpirun's stop ends this wait. Aborting at once had
 * mpirun stop rank 0 before it spoke, while it computed a pass: its line
 * then said only that mpirun stopped it (once in a clean clone's CI,
 * test_cli_hosts; every time in test_cli_mpi's test_stalled_root). The
 * wait is the timeout (a rank 0 that does not call the transport within
 * it hangs, by the user's measure) and 5 s for a loaded machine. Only
 * where the line went to rank 0: an agreement's silence sends none. */
int pm_mpi_await_root(void) {
    if (!g_inited || !g_silent || !g_rank || !g_told_root || g_awaited) return 0;
    g_awaited = 1;
    double s = g_timeout + 5 < 86400 ? g_timeout + 5 : 86400;
    struct timespec left = {(time_t)s, 0};
    while (nanosleep(&left, &left) && errno == EINTR) continue; /* a handler ran: on */
    return 1;
}

void pm_mpi_finalize(void) {
    if (!g_inited) return;
    pm_mpi_await_root();
    if (g_silent) MPI_Abort(MPI_COMM_WORLD, 1); /* ends every rank, the silent one too */
    if (g_comm != MPI_COMM_NULL) MPI_Comm_free(&g_comm);
    MPI_Finalize();
    g_inited = 0;
}

static void nap(double t, long *ns);

/* Polls r[0..n) until all complete or g_timeout passes: -1, or the index
 * of the first that did not (an MPI error counts as not completing); the
 * pending ones are then cancelled (or left to the abort the silence brings:
 * MPI cannot cancel every send). */
static int wait_bounded(MPI_Request *r, int n) {
    double t0 = pm_now();
    long ns = 0;
    int late = -1;
    for (int k = 0; k < n; k++) {
        int flag = 0;
        while (r[k] != MPI_REQUEST_NULL && !flag) {
            if (MPI_Test(&r[k], &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
                (!flag && pm_now() - t0 > g_timeout)) {
                late = k;
                break;
            }
            if (!flag) nap(pm_now() - t0, &ns);
        }
        if (late >= 0) break;
    }
    if (late < 0) return -1;
    for (int k = late; k < n; k++)
        if (r[k] != MPI_REQUEST_NULL) MPI_Cancel(&r[k]);
    g_silent = 1;
    return late;
}

static pm_status silent_rank(pm_err *err, int rank) {
    return pm_errf(err, PM_ERR_TRANSPORT, "rank %d did not answer rank %d within %g s (it "
                   "died, hangs, or runs another program); every rank ends", rank, g_rank,
                   g_timeout);
}

/* The agreements' exchanges through rank 0, each wait bounded: with
 * gather, every rank's len bytes at mine to rank 0's all (rank r's at r x
 * len); else rank 0's len bytes at all to every rank's all. */
static pm_status via_root(int gather, const void *mine, void *all, int len, pm_err *err) {
    if (!g_inited) return pm_errf(err, PM_ERR_ARG, "the MPI agreements need pm_mpi_init first");
    MPI_Request *r = pm_malloc((size_t)g_size * sizeof *r);
    if (!r) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d requests", g_size);
    int rc = MPI_SUCCESS, n = g_rank ? 1 : g_size - 1, tag = gather ? TAG_GATHER : TAG_BCAST;
    for (int k = 0; k < g_size; k++) r[k] = MPI_REQUEST_NULL;
    if (g_rank && gather) rc = MPI_Isend(mine, len, MPI_BYTE, 0, tag, g_comm, &r[0]);
    else if (g_rank) rc = MPI_Irecv(all, len, MPI_BYTE, 0, tag, g_comm, &r[0]);
    else if (gather) memcpy(all, mine, (size_t)len);
    for (int g = 1; !g_rank && g < g_size && rc == MPI_SUCCESS; g++)
        rc = gather ? MPI_Irecv((char *)all + (size_t)g * (size_t)len, len, MPI_BYTE, g, tag,
                                g_comm, &r[g - 1])
                    : MPI_Isend(all, len, MPI_BYTE, g, tag, g_comm, &r[g - 1]);
    int late = rc == MPI_SUCCESS ? wait_bounded(r, n) : -1;
    pm_free(r);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, gather ? "a gather to rank 0" : "a broadcast from rank 0");
    return late < 0 ? PM_OK : silent_rank(err, g_rank ? 0 : late + 1);
}

int pm_mpi_agree(int ok, pm_err *err) {
    int32_t mine = ok ? -1 : g_rank, lowest = -1, *all = NULL;
    if (!g_rank && !(all = pm_malloc((size_t)g_size * sizeof *all))) {
        pm_errf(err, PM_ERR_NOMEM, "out of memory for %d ranks' answers", g_size);
        return -2;
    }
    pm_status st = via_root(1, &mine, all, sizeof mine, err);
    for (int g = 0; !st && !g_rank && g < g_size && lowest < 0; g++) lowest = all[g];
    pm_free(all);
    if (!st) st = via_root(0, NULL, &lowest, sizeof lowest, err);
    return st ? -2 : lowest;
}

pm_status pm_mpi_same_word(const char *mine, int *first, char theirs[PM_MPI_WORD], pm_err *err) {
    char word[PM_MPI_WORD] = {0}, *all = NULL;
    struct { int32_t first; char word[PM_MPI_WORD]; } verdict = {-1, {0}};
    snprintf(word, sizeof word, "%s", mine);
    *first = -1;
    if (!g_rank && !(all = pm_malloc((size_t)g_size * PM_MPI_WORD)))
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d ranks' words", g_size);
    pm_status st = via_root(1, word, all, PM_MPI_WORD, err);
    for (int g = 1; !st && !g_rank && g < g_size && verdict.first < 0; g++)
        if (memcmp(all + (size_t)g * PM_MPI_WORD, word, PM_MPI_WORD))
            verdict.first = g, memcpy(verdict.word, all + (size_t)g * PM_MPI_WORD, PM_MPI_WORD);
    pm_free(all);
    if (!st) st = via_root(0, NULL, &verdict, sizeof verdict, err);
    if (st) return st;
    *first = verdict.first;
    memcpy(theirs, verdict.word, PM_MPI_WORD);
    theirs[PM_MPI_WORD - 1] = 0;
    return PM_OK;
}

pm_status pm_mpi_bcast(void *buf, size_t bytes, pm_err *err) {
    if (bytes > (size_t)INT32_MAX)
        return pm_errf(err, PM_ERR_ARG, "MPI broadcast of %zu bytes: too large", bytes);
    return via_root(0, NULL, buf, (int)bytes, err);
}

static pm_tp_mpi *world_of(const pm_tp *tp) { return tp->impl; }

/* The first error wins; it is sent to every other rank so they stop too. */
static void set_error(pm_tp_mpi *w, pm_status st, const char *msg, int tell) {
    if (w->aborted) return;
    w->aborted = 1;
    w->st = st ? st : PM_ERR_TRANSPORT;
    snprintf(w->err.msg, sizeof w->err.msg, "%s", msg);
    if (!tell) return;
    w->out = (abort_line){.st = (int32_t)w->st, .rank = w->rank, .silent = g_silent};
    snprintf(w->out.msg, sizeof w->out.msg, "%s", w->err.msg);
    /* best effort: a rank this cannot reach stops at its own timeout */
    for (int r = 0; r < w->size; r++)
        if (r != w->rank &&
            MPI_Isend(&w->out, (int)sizeof w->out, MPI_BYTE, r, 0, w->ctl, &w->out_req[r]) !=
                MPI_SUCCESS)
            w->out_req[r] = MPI_REQUEST_NULL;
    if (g_silent && w->rank && w->out_req[0] != MPI_REQUEST_NULL) g_told_root = 1;
}

/* Polls the abort receive: another rank's error becomes ours. */
static void poll_abort(pm_tp_mpi *w) {
    int flag = 0;
    if (w->aborted || w->in_req == MPI_REQUEST_NULL) return;
    if (MPI_Test(&w->in_req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag) return;
    w->in.msg[sizeof w->in.msg - 1] = 0;
    /* a rank that timed out aborts the job; finalizing here instead would
     * wait for the silent rank for ever (a host whose link went down) */
    if (w->in.silent) g_silent = 1, g_told_root = 1; /* its sender told rank 0 too */
    set_error(w, (pm_status)w->in.st, w->in.msg, 0);
}

static pm_status sticky(pm_tp_mpi *w) {
    poll_abort(w);
    return w->aborted ? w->st : PM_OK;
}

static pm_status mpi_call_failed(pm_tp_mpi *w, int rc, const char *what, int peer);

/* Frees the send buffers whose copies have left; a send that failed is the
 * transport's error. */
static void reap_sends(pm_tp_mpi *w) {
    for (int k = 0; k < w->nbuf; k++) {
        int flag = 0, rc;
        if (w->send[k].req == MPI_REQUEST_NULL) continue;
        /* a failed send keeps its request: its buffer is never handed out again */
        if ((rc = MPI_Test(&w->send[k].req, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            mpi_call_failed(w, rc, "MPI_Test of a send", w->send[k].peer);
    }
}

/* Waiting: spins for about 50 us, then sleeps 1 us growing to 200 us per
 * round, so a rank waiting leaves the core to a rank computing. t is the
 * time waited so far. */
static void nap(double t, long *ns) {
    if (t < 50e-6) return;
    *ns = *ns ? (*ns * 2 > 200000 ? 200000 : *ns * 2) : 1000;
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
}

static pm_status fail(pm_tp_mpi *w, pm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pm_status fail(pm_tp_mpi *w, pm_status st, const char *fmt, ...) {
    char buf[sizeof(pm_err)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    set_error(w, st, buf, 1);
    return w->st;
}

static pm_status mpi_call_failed(pm_tp_mpi *w, int rc, const char *what, int peer) {
    pm_err e;
    mpi_fail(&e, rc, what);
    return fail(w, PM_ERR_TRANSPORT, "rank %d, peer rank %d: %s", w->rank, peer, e.msg);
}

/* A free send buffer: a reaped one, else a new one while fewer than nsend
 * exist, else waits (progress) for one to free up, up to the timeout. */
static pm_status free_send(pm_tp_mpi *w, int peer, int tag, send_buf **out) {
    double t0 = pm_now();
    for (;;) {
        reap_sends(w);
        for (int k = 0; k < w->nbuf; k++)
            if (w->send[k].req == MPI_REQUEST_NULL) {
                *out = &w->send[k];
                return PM_OK;
            }
        if (w->nbuf < w->nsend) {
            send_buf *b = &w->send[w->nbuf];
            b->buf = pm_malloc(w->send_bytes ? w->send_bytes : 1);
            if (!b->buf)
                return fail(w, PM_ERR_NOMEM, "rank %d: out of memory for a send buffer of %zu "
                            "bytes", w->rank, w->send_bytes);
            b->req = MPI_REQUEST_NULL;
            w->nbuf++;
            *out = b;
            return PM_OK;
        }
        pm_status st = sticky(w);
        if (st) return st;
        if (pm_now() - t0 > w->timeout_s) {
            g_silent = 1; /* pm_mpi_finalize then aborts */
            return fail(w, PM_ERR_TRANSPORT, "rank %d: %d messages to other ranks were not "
                        "received within %.0f s (sending tag %d to rank %d)", w->rank, w->nsend,
                        w->timeout_s, tag, peer);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

static pm_status check_peer(pm_tp_mpi *w, int peer, int tag, size_t len) {
    if (peer < 0 || peer >= w->size)
        return fail(w, PM_ERR_TRANSPORT, "rank %d addressed rank %d (tag %d), which does not "
                    "exist (%d ranks)", w->rank, peer, tag, w->size);
    if (tag < 0 || tag > w->tag_ub)
        return fail(w, PM_ERR_TRANSPORT, "rank %d: tag %d is above this MPI's limit %d (fewer "
                    "stages or microbatches)", w->rank, tag, w->tag_ub);
    if (len > (size_t)INT32_MAX)
        return fail(w, PM_ERR_TRANSPORT, "rank %d: a message of %zu bytes is more than MPI "
                    "takes at once (2 GiB)", w->rank, len);
    return PM_OK;
}

static pm_status mp_isend(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                          pm_tp_req *r) {
    pm_tp_mpi *w = world_of(tp);
    pm_status st = sticky(w);
    if (st || (st = check_peer(w, peer, tag, len))) return st;
    if (len > w->send_bytes)
        return fail(w, PM_ERR_TRANSPORT, "rank %d: a message of %zu bytes (tag %d) is larger "
                    "than the transport's send buffers (%zu)", w->rank, len, tag, w->send_bytes);
    send_buf *b = NULL;
    if ((st = free_send(w, peer, tag, &b))) return st;
    if (len) memcpy(b->buf, buf, len);
    b->peer = peer;
    int rc = MPI_Isend(b->buf, (int)len, MPI_BYTE, peer, tag, w->data, &b->req);
    if (rc != MPI_SUCCESS) return mpi_call_failed(w, rc, "MPI_Isend", peer);
    *r = (pm_tp_req){.op = 1, .peer = peer, .tag = tag, .len = len, .done = 1, .slot = -1};
    return PM_OK;
}

/* A free request slot, or the error (more pending than the caller said). */
static pm_status free_slot(pm_tp_mpi *w, int *k) {
    for (*k = 0; *k < w->nslot; (*k)++)
        if (w->slot[*k].req == MPI_REQUEST_NULL) return PM_OK;
    return fail(w, PM_ERR_TRANSPORT, "rank %d: more than %d receives and rendezvous sends "
                "pending (a runtime bug)", w->rank, w->nslot);
}

static pm_status mp_issend(pm_tp *tp, int peer, int tag, const void *buf, size_t len,
                           pm_tp_req *r) {
    pm_tp_mpi *w = world_of(tp);
    int k;
    pm_status st = sticky(w);
    if (st || (st = check_peer(w, peer, tag, len)) || (st = free_slot(w, &k))) return st;
    int rc = MPI_Issend(buf, (int)len, MPI_BYTE, peer, tag, w->data, &w->slot[k].req);
    if (rc != MPI_SUCCESS) return mpi_call_failed(w, rc, "MPI_Issend", peer);
    w->slot[k].send = 1;
    *r = (pm_tp_req){.op = 3, .peer = peer, .tag = tag, .sbuf = buf, .len = len, .slot = k};
    return PM_OK;
}

static pm_status mp_irecv(pm_tp *tp, int peer, int tag, void *buf, size_t len, pm_tp_req *r) {
    pm_tp_mpi *w = world_of(tp);
    int k;
    pm_status st = sticky(w);
    if (st || (st = check_peer(w, peer, tag, len)) || (st = free_slot(w, &k))) return st;
    int rc = MPI_Irecv(buf, (int)len, MPI_BYTE, peer, tag, w->data, &w->slot[k].req);
    if (rc != MPI_SUCCESS) return mpi_call_failed(w, rc, "MPI_Irecv", peer);
    w->slot[k].send = 0;
    *r = (pm_tp_req){.op = 2, .peer = peer, .tag = tag, .buf = buf, .len = len, .slot = k};
    return PM_OK;
}

/* Tests a pending rendezvous send once. */
static pm_status test_ssend(pm_tp_mpi *w, pm_tp_req *r, int *done) {
    int flag = 0, rc = MPI_Test(&w->slot[r->slot].req, &flag, MPI_STATUS_IGNORE);
    *done = 0;
    if (rc != MPI_SUCCESS) return mpi_call_failed(w, rc, "MPI_Test of a rendezvous send", r->peer);
    if (!flag) return PM_OK;
    r->op = 0, r->done = 1, r->slot = -1;
    *done = 1;
    return PM_OK;
}

/* Tests a pending receive once; checks the length when it completed. */
static pm_status test_recv(pm_tp_mpi *w, pm_tp_req *r, int *done) {
    MPI_Status ms;
    int flag = 0, rc = MPI_Test(&w->slot[r->slot].req, &flag, &ms);
    *done = 0;
    if (rc != MPI_SUCCESS) {
        int cls = rc;
        MPI_Error_class(rc, &cls);
        if (cls == MPI_ERR_TRUNCATE)
            return fail(w, PM_ERR_TRANSPORT, "rank %d sent a message longer than the %zu bytes "
                        "rank %d posted for tag %d", r->peer, r->len, w->rank, r->tag);
        return mpi_call_failed(w, rc, "MPI_Test", r->peer);
    }
    if (!flag) return PM_OK;
    int n = -1;
    if ((rc = MPI_Get_count(&ms, MPI_BYTE, &n)) != MPI_SUCCESS)
        return mpi_call_failed(w, rc, "MPI_Get_count", r->peer);
    if ((size_t)n != r->len)
        return fail(w, PM_ERR_TRANSPORT, "rank %d sent %d bytes with tag %d to rank %d, which "
                    "posted a receive of %zu bytes", r->peer, n, r->tag, w->rank, r->len);
    r->op = 0, r->done = 1, r->slot = -1;
    *done = 1;
    return PM_OK;
}

static pm_status mp_test(pm_tp *tp, pm_tp_req *r, int *done) {
    pm_tp_mpi *w = world_of(tp);
    *done = 1;
    pm_status st = sticky(w);
    if (st || (r->op != 2 && r->op != 3)) return st;
    reap_sends(w);
    return r->op == 3 ? test_ssend(w, r, done) : test_recv(w, r, done);
}

static pm_status mp_wait(pm_tp *tp, pm_tp_req *r) {
    pm_tp_mpi *w = world_of(tp);
    double t0 = pm_now();
    long ns = 0;
    for (;;) {
        int done = 0;
        pm_status st = mp_test(tp, r, &done);
        if (st || done) return st;
        double t = pm_now() - t0;
        if (t > w->timeout_s) g_silent = 1; /* pm_mpi_finalize then aborts */
        if (t > w->timeout_s && r->op == 3)
            return fail(w, PM_ERR_TRANSPORT, "rank %d waited %.0f s for rank %d to receive its "
                        "message with tag %d (that rank died or hangs)", w->rank, w->timeout_s,
                        r->peer, r->tag);
        if (t > w->timeout_s)
            return fail(w, PM_ERR_TRANSPORT, "rank %d waited %.0f s for a message with tag %d "
                        "from rank %d that never came (that rank died or hangs)", w->rank,
                        w->timeout_s, r->tag, r->peer);
        nap(t, &ns);
    }
}

pm_status pm_tp_mpi_barrier(pm_tp_mpi *w) {
    MPI_Request rq;
    pm_status st = sticky(w);
    if (st) return st;
    int rc = MPI_Ibarrier(w->data, &rq), flag = 0;
    if (rc != MPI_SUCCESS) return mpi_call_failed(w, rc, "MPI_Ibarrier", w->rank);
    double t0 = pm_now();
    long ns = 0;
    while (!flag) {
        if ((rc = MPI_Test(&rq, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return mpi_call_failed(w, rc, "MPI_Test", w->rank);
        reap_sends(w);
        if (flag) break;
        /* a rank that never arrives: the barrier stays pending (MPI cannot
         * cancel it), but every rank leaves with the error */
        if ((st = sticky(w))) return st;
        if (pm_now() - t0 > w->timeout_s) {
            g_silent = 1;
            return fail(w, PM_ERR_TRANSPORT, "rank %d waited %.0f s at the step's start for "
                        "ranks that never came (one died or hangs)", w->rank, w->timeout_s);
        }
        nap(pm_now() - t0, &ns);
    }
    return PM_OK;
}

static void mp_abort(pm_tp *tp, pm_status st, const char *m) {
    pm_tp_mpi *w = world_of(tp);
    char buf[sizeof(pm_err)];
    snprintf(buf, sizeof buf, "rank %d: %s", w->rank, m ? m : "transport aborted");
    set_error(w, st, buf, 1);
}

static pm_status mp_status(const pm_tp *tp, pm_err *err) {
    pm_tp_mpi *w = world_of(tp);
    reap_sends(w);
    pm_status st = sticky(w);
    if (st && err) *err = w->err;
    return st;
}

static const pm_tp_ops mpi_ops = {"mpi",   mp_isend, mp_issend, mp_irecv,
                                  mp_wait, mp_test,  mp_abort,  mp_status};

pm_status pm_tp_mpi_create(pm_tp_mpi **out, int nsend, size_t send_bytes, int nreq,
                           double timeout_s, pm_err *err) {
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return pm_errf(err, PM_ERR_ARG, "the MPI transport needs pm_mpi_init first");
    pm_tp_mpi *w = pm_calloc(1, sizeof *w);
    if (!w) return pm_errf(err, PM_ERR_NOMEM, "out of memory creating the MPI transport");
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size);
    w->nsend = nsend > 0 ? nsend : 1, w->send_bytes = send_bytes;
    w->timeout_s = timeout_s > 0 ? timeout_s : PM_COMM_TIMEOUT;
    w->nslot = nreq > 0 ? nreq : 1;
    w->send = pm_calloc((size_t)w->nsend, sizeof *w->send);
    w->slot = pm_calloc((size_t)w->nslot, sizeof *w->slot);
    w->out_req = pm_calloc((size_t)w->size, sizeof *w->out_req);
    w->data = w->ctl = MPI_COMM_NULL;
    pm_status st = PM_OK;
    int rc = MPI_SUCCESS, *ub = NULL, flag = 0;
    if (!w->send || !w->slot || !w->out_req) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory creating the MPI transport");
        goto fail;
    }
    for (int k = 0; k < w->nslot; k++) w->slot[k].req = MPI_REQUEST_NULL;
    for (int r = 0; r < w->size; r++) w->out_req[r] = MPI_REQUEST_NULL;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->data)) != MPI_SUCCESS ||
        (rc = MPI_Comm_dup(MPI_COMM_WORLD, &w->ctl)) != MPI_SUCCESS) {
        st = mpi_fail(err, rc, "MPI_Comm_dup");
        goto fail;
    }
    if ((rc = MPI_Comm_set_errhandler(w->data, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
        (rc = MPI_Comm_set_errhandler(w->ctl, MPI_ERRORS_RETURN)) != MPI_SUCCESS) {
        st = mpi_fail(err, rc, "MPI_Comm_set_errhandler");
        goto fail;
    }
    if (MPI_Comm_get_attr(w->data, MPI_TAG_UB, &ub, &flag) != MPI_SUCCESS) flag = 0;
    w->tag_ub = flag && ub ? *ub : 32767;
    if ((rc = MPI_Irecv(&w->in, (int)sizeof w->in, MPI_BYTE, MPI_ANY_SOURCE, 0, w->ctl,
                        &w->in_req)) != MPI_SUCCESS) {
        st = mpi_fail(err, rc, "MPI_Irecv");
        goto fail;
    }
    w->ep = (pm_tp){&mpi_ops, w, w->rank, w->size};
    *out = w;
    return PM_OK;
fail:
    pm_tp_mpi_destroy(w);
    return st;
}

pm_tp *pm_tp_mpi_endpoint(pm_tp_mpi *w) { return &w->ep; }

static void cancel(MPI_Request *r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
}

/* Cancels *r and waits until `until` (pm_now) for it to complete; 0 if it
 * is still pending (its buffer must then outlive the process's MPI). */
static int settle(MPI_Request *r, double until) {
    if (*r == MPI_REQUEST_NULL) return 1;
    MPI_Cancel(r);
    double t0 = pm_now();
    long ns = 0;
    int flag = 0;
    while (MPI_Test(r, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag && pm_now() < until)
        nap(pm_now() - t0, &ns);
    return flag;
}

int pm_tp_mpi_destroy(pm_tp_mpi *w) {
    if (!w) return 0;
    /* after success every copy has a receiver: let them leave */
    double t0 = pm_now();
    long ns = 0;
    for (int k = 0; k < w->nbuf; k++) {
        while (!w->aborted && w->send[k].req != MPI_REQUEST_NULL && pm_now() - t0 < w->timeout_s) {
            reap_sends(w);
            poll_abort(w);
            nap(pm_now() - t0, &ns);
        }
        if (!w->aborted && w->send[k].req != MPI_REQUEST_NULL) g_silent = 1; /* never taken */
    }
    /* After an abort a peer may still be reading a send's buffer (large
     * messages go by rendezvous, read straight from it): a send that
     * neither completes nor cancels keeps its buffer, and so does the abort
     * line's, held in w. Leaked on purpose: the process is ending. */
    int keep = 0, caller_keep = 0;
    double until = pm_now() + 1; /* one second for all of them */
    for (int k = 0; k < w->nbuf; k++)
        if (settle(&w->send[k].req, until)) pm_free(w->send[k].buf);
        else keep = 1;
    for (int r = 0; w->out_req && r < w->size; r++) keep |= !settle(&w->out_req[r], until);
    /* a rendezvous send still pending (only after an abort: callers wait
     * for theirs) reads the caller's buffer: the caller keeps it */
    for (int k = 0; w->slot && k < w->nslot; k++) {
        if (w->slot[k].send) caller_keep |= !settle(&w->slot[k].req, until);
        else cancel(&w->slot[k].req);
    }
    cancel(&w->in_req);
    if (w->data != MPI_COMM_NULL) MPI_Comm_free(&w->data);
    if (w->ctl != MPI_COMM_NULL) MPI_Comm_free(&w->ctl);
    if (keep) return caller_keep;
    pm_free(w->send);
    pm_free(w->slot);
    pm_free(w->out_req);
    pm_free(w);
    return caller_keep;
}

#endif
