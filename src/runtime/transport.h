/* transport.h: the pipeline's transport (transport.c: threads;
 * transport_mpi.c: MPI), private to the library: non-blocking send and
 * receive of byte buffers between devices, addressed by (peer, tag): a
 * copying send (isend) for the small messages and a rendezvous one (issend,
 * no copy) for the large; threads and MPI implement the same operations
 * table, so the executor cannot tell them apart. pm_runtime.h has the MPI
 * process's own calls (init, the collectives).
 *
 * One endpoint per device. Semantics (the contract an MPI transport keeps):
 *   - isend/issend/irecv return at once; the request completes later
 *     (wait/test). The send buffer must stay unchanged until the send
 *     completes; the receive buffer is written only before the receive
 *     completes.
 *   - isend copies the payload (into a matching posted receive or a buffer
 *     of the transport) and is complete when it returns: the sender never
 *     waits for its receiver. For messages of a bounded size (activations,
 *     norms, reports), whose buffers the transport reserves.
 *   - issend (rendezvous) takes no copy: the data moves straight from the
 *     sender's buffer to the receiver's (threads: the matching irecv copies
 *     it; MPI: MPI_Issend), and the send completes only once the receiver
 *     has it. So buf must stay unchanged (and alive) until wait or test
 *     says done, or the transport is aborted (the sticky error): only then
 *     may the caller reuse it or return. A sender waits for its receiver:
 *     the caller must know the matching receive gets posted without
 *     waiting on the sender (no cycle of rendezvous sends). For stage-sized
 *     arrays (gradient sums, parameter gathers): no transport buffer grows
 *     with them.
 *   - Messages between one (sender, receiver) pair with one tag are matched
 *     in the order sent and posted (non-overtaking), isend and issend
 *     alike; lengths must match exactly (a mismatch is PM_ERR_TRANSPORT
 *     naming both).
 *   - A device may send to itself; that goes through the same path (an
 *     issend to itself completes when the same device's irecv takes it).
 *   - Errors are sticky: after pm_tp_abort (by any device) or any failure,
 *     every call on every endpoint returns the first error, and every device
 *     blocked in wait (on a receive or a rendezvous send) wakes up with it. */
#ifndef PM_RUNTIME_TRANSPORT_H
#define PM_RUNTIME_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_runtime.h"


typedef struct pm_tp pm_tp;

typedef struct pm_tp_req {
    int op;                 /* 0 idle, 1 send (copied), 2 receive, 3 rendezvous send */
    int peer, tag;          /* the other device and the tag */
    void *buf;              /* receive buffer (borrowed) */
    const void *sbuf;       /* rendezvous send buffer (borrowed) */
    size_t len;             /* bytes */
    int done;               /* 1 once complete (written under the transport's lock) */
    int slot;               /* MPI: the transport's request slot while pending */
    int src;                /* threads: the sending device of a queued rendezvous send */
    uint64_t seq;           /* threads: its place among the messages queued for the receiver */
    struct pm_tp_req *next; /* transport-owned link while a receive or rendezvous send is
                             * pending */
} pm_tp_req;

typedef struct {
    const char *name; /* "threads", "mpi" */
    pm_status (*isend)(pm_tp *tp, int peer, int tag, const void *buf, size_t len, pm_tp_req *r);
    pm_status (*issend)(pm_tp *tp, int peer, int tag, const void *buf, size_t len, pm_tp_req *r);
    pm_status (*irecv)(pm_tp *tp, int peer, int tag, void *buf, size_t len, pm_tp_req *r);
    pm_status (*wait)(pm_tp *tp, pm_tp_req *r);
    pm_status (*test)(pm_tp *tp, pm_tp_req *r, int *done);
    void (*abort)(pm_tp *tp, pm_status st, const char *msg);
    pm_status (*status)(const pm_tp *tp, pm_err *err); /* the sticky error, PM_OK if none */
} pm_tp_ops;

struct pm_tp {
    const pm_tp_ops *ops; /* implementation */
    void *impl;           /* implementation state (shared world for threads) */
    int dev;              /* this endpoint's device */
    int ndev;             /* devices */
};

pm_status pm_tp_isend(pm_tp *tp, int peer, int tag, const void *buf, size_t len, pm_tp_req *r);
/* Rendezvous send: no copy; done once the receiver has the data (above). */
pm_status pm_tp_issend(pm_tp *tp, int peer, int tag, const void *buf, size_t len, pm_tp_req *r);
pm_status pm_tp_irecv(pm_tp *tp, int peer, int tag, void *buf, size_t len, pm_tp_req *r);
pm_status pm_tp_wait(pm_tp *tp, pm_tp_req *r);
pm_status pm_tp_test(pm_tp *tp, pm_tp_req *r, int *done);
/* Stops every device: st and msg become the sticky error (the first abort wins). */
void pm_tp_abort(pm_tp *tp, pm_status st, const char *msg);
pm_status pm_tp_status(const pm_tp *tp, pm_err *err);

/* Threads transport: ndev endpoints in one process. isend copies the
 * payload: straight into a matching posted receive, else into a mailbox
 * buffer the receive copies out of later. Mailbox buffers are kept for reuse
 * (a free list), so after the first step nothing is allocated. issend copies
 * straight into a matching posted receive (done at once), else queues its
 * own request, pointing at the sender's buffer, for the receive to copy
 * from: no buffer and no allocation. A wait longer than timeout_s seconds
 * (0: PM_COMM_TIMEOUT) fails with PM_ERR_TRANSPORT naming the device, peer
 * and tag instead of hanging. */
typedef struct pm_tp_threads pm_tp_threads;
pm_status pm_tp_threads_create(pm_tp_threads **w, int ndev, double timeout_s, pm_err *err);
pm_tp *pm_tp_threads_endpoint(pm_tp_threads *w, int dev);
/* Puts count spare buffers of `bytes` in device dev's mailbox, so that
 * up to count messages of at most that size can wait for their receives
 * without an allocation (call before any device runs). */
pm_status pm_tp_threads_reserve(pm_tp_threads *w, int dev, int count, size_t bytes,
                                pm_err *err);
/* Clears a sticky error and drops unmatched messages, copies and queued
 * rendezvous sends alike (between steps only, when no device is inside the
 * transport). */
void pm_tp_threads_reset(pm_tp_threads *w);
void pm_tp_threads_destroy(pm_tp_threads *w);

/* MPI transport: one endpoint per process, device = rank in MPI_COMM_WORLD
 * (a duplicate of it, so pipemem's messages never meet a caller's). Send
 * buffers are allocated when more copies are in flight than ever before (at
 * most nsend, each of send_bytes), so after the first step nothing is. Built
 * when OpenMPI's headers were found (pm_mpi_built), else every call below
 * fails with a line saying so (pm_runtime.h).
 *   - isend copies the payload into one of the transport's own buffers
 *     (at most nsend of send_bytes; a longer message is an error) and
 *     completes at once, so a sender never waits on the receiver's
 *     compute, as with threads; the copies leave under MPI's progress,
 *     driven by every later call.
 *   - issend starts MPI_Issend straight from the caller's buffer; wait and
 *     test poll it like a receive.
 *   - irecv posts MPI_Irecv straight into the caller's buffer; wait polls
 *     it (spinning briefly, then sleeping in growing steps up to 0.2 ms, so
 *     ranks sharing a core leave it to the one computing) and checks the
 *     exact length. Receives and rendezvous sends pending at once: at most
 *     nreq (each holds a request slot).
 *   - abort sends the error line to every rank on a second communicator;
 *     every wait and status call polls for one, so all ranks stop with the
 *     first error. A wait longer than timeout_s fails naming the peer rank.
 * Errors of MPI itself are returned (MPI_ERRORS_RETURN), never fatal. */
typedef struct pm_tp_mpi pm_tp_mpi;
pm_status pm_tp_mpi_create(pm_tp_mpi **w, int nsend, size_t send_bytes, int nreq,
                           double timeout_s, pm_err *err);
pm_tp *pm_tp_mpi_endpoint(pm_tp_mpi *w);
/* Every rank arrives before any leaves (polled like a wait: an abort or the
 * timeout ends it with the error). */
pm_status pm_tp_mpi_barrier(pm_tp_mpi *w);
/* Lets the copies still in flight leave (up to the timeout; after an abort
 * they are cancelled), then frees. NULL is a no-op. Returns 1 if a
 * rendezvous send was still pending (after an abort) and MPI could not
 * cancel it within a second (OpenMPI 4 cannot cancel sends): MPI may still
 * read its buffer, so the caller must never free that buffer (the process
 * is ending); else 0. */
int pm_tp_mpi_destroy(pm_tp_mpi *w);

#endif
