/* pipe_world.c: the pipe's transport world. With threads every device is
 * in this process and shares its tables; under MPI each rank holds one
 * device, and what the root needs from the others travels as messages:
 *   at create  a handshake: each rank's setup status and fingerprint (the
 *              configuration, the schedule, the caller's data identity);
 *   per step   a report: the device's pass times, arena peak, reduction
 *              times and its replica's losses (if it holds the head);
 *   on demand  the parameters and moments of each stage (pm_pipe_gather),
 *              by rendezvous from the stage's slab, in chunks.
 *   checkpoints  the temporary's name, every process's status and checksum
 *              parts, the outcome (pipe_ckpt.c).
 * Every rank makes the same calls in the same order, failures included (a
 * rank that failed still makes the next call, with its status, and every
 * rank leaves on the shared outcome), so these exchanges need no extra
 * synchronisation; their tags (pm_tag_ctl) never meet a step's. */
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_data.h"
#include "runtime/internal.h"
#include "util/alloc.h"
#include "model/passes.h"
#include "plan/query.h"
#include "transport.h"
#include "pipe.h"

enum { CTL_REPORT, CTL_GATHER, CTL_PRINT, CTL_OK, CTL_LOSSES, CTL_FIGURES, CTL_NAME, CTL_PARTS,
       CTL_OUTCOME };

/* Doubles in device g's report: peak, arena, 4 rows of pass figures, the
 * reduction times, its replica's losses. */
static size_t report_len(const pm_pipe *pp, int g) {
    return 2 + 4 * (size_t)pp->sched.len[g % pp->p] + 2 * (size_t)pp->S + (size_t)pp->m;
}

static pm_status threads_create(pm_pipe *pp, pm_err *err) {
    pm_status st = pm_tp_threads_create(&pp->world, pp->nd, pp->opts.wait_timeout_s, err);
    /* Every copied message a device can receive in a step may arrive before
     * its receive is posted; buffers for all of them up front keep the step
     * free of allocations whatever the timing: one activation per pass and
     * the norm chain's doubles. The gradient sums go by rendezvous and
     * need none. */
    for (int g = 0; g < pp->nd && !st; g++) { /* the plan's count and size */
        int64_t *was = pm_alloc_account(&pp->acct[g]); /* messages to g are g's */
        st = pm_tp_threads_reserve(pp->world, g, (int)pm_plan_mailbox_buffers(pp->pl, g % pp->p),
                                   pm_plan_msg_buffer(pp->pl), err);
        pm_alloc_account(was);
    }
    pp->lo = 0, pp->hi = pp->nd;
    return st;
}

static pm_status mpi_create(pm_pipe *pp, pm_err *err) {
    int rank, size;
    if (!pm_mpi_built()) {
        pm_tp_mpi *none;
        return pm_tp_mpi_create(&none, 0, 0, 0, 0, err); /* says it was built without */
    }
    pm_tp_mpi *w;
    /* Copied sends carry an activation, a norm or a handshake word; the
     * step reports, losses and stage-sized arrays go by rendezvous from
     * their own buffers (no send buffer: pm_plan counts these). Pending at
     * once: two activation receives, the norm chain's and the broadcast's,
     * a partial sum's receive and its rendezvous send, a handshake or
     * gather message, and with replicas the totals of every chunk of the
     * device's stages (at most every stage's): a receive, or on the last
     * replica a send to each other replica. */
    size_t slots = 0; /* every device's most requests at once, with room for the rest */
    for (int g = 0; g < pp->nd; g++) {
        size_t n = pm_dev_gather_reqs(pp, g);
        for (int s = 0; s < pp->S && pp->dp > 1; s++)
            if (pm_sched_stage_device(&pp->sched, s) == g % pp->p)
                n += pm_chunks(pp, pm_stage_floats(pp, s)) * (size_t)(pp->dp - 1);
        slots = n > slots ? n : slots;
    }
    int64_t made = 0, *was = pm_alloc_account(&made);
    pm_status st = pm_tp_mpi_create(&w, (int)pm_plan_send_buffers(pp->pl),
                                    pm_plan_msg_buffer(pp->pl), (int)slots + 16,
                                    pp->opts.wait_timeout_s, err);
    pm_alloc_account(was);
    if (st) return st;
    pp->mpi = w;
    rank = pm_tp_mpi_endpoint(w)->dev, size = pm_tp_mpi_endpoint(w)->ndev;
    if (rank < pp->nd) pp->acct[rank] += made;
    if (size != pp->nd)
        return pm_errf(err, PM_ERR_ARG, "mpirun started %d ranks, but %d replicas x %d devices "
                       "need %d: start it with mpirun -np %d", size, pp->dp, pp->p, pp->nd,
                       pp->nd);
    pp->lo = rank, pp->hi = rank + 1;
    pp->report_len = 0;
    for (int g = 0; g < pp->nd; g++)
        if (report_len(pp, g) > pp->report_len) pp->report_len = report_len(pp, g);
    pp->report = pm_malloc(pp->report_len * sizeof(double));
    return pp->report ? PM_OK
                      : pm_errf(err, PM_ERR_NOMEM, "out of memory for the step reports");
}

/* This process's host name at its devices' rows of pp->hosts. */
static void own_hosts(pm_pipe *pp) {
    char me[PM_HOST_NAME] = "";
    if (gethostname(me, sizeof me - 1)) snprintf(me, sizeof me, "?");
    for (int g = pp->lo; g < pp->hi; g++)
        memcpy(pp->hosts + (size_t)g * PM_HOST_NAME, me, sizeof me);
}

pm_status pm_pipe_world_create(pm_pipe *pp, pm_err *err) {
    pm_status st = pp->pl->transport == PM_TRANSPORT_MPI ? mpi_create(pp, err)
                                                          : threads_create(pp, err);
    if (!st) own_hosts(pp);
    return st;
}

pm_tp *pm_pipe_endpoint(pm_pipe *pp, int g) {
    return pp->mpi ? pm_tp_mpi_endpoint(pp->mpi) : pm_tp_threads_endpoint(pp->world, g);
}

/* What every rank must agree on: configuration, replicas, schedule, and
 * the caller's fingerprint. Field by field (no struct padding). The data's
 * identity is compared apart (hello.data), to say which differs. */
static uint64_t fingerprint(const pm_pipe *pp) {
    const pm_train_cfg *c = &pp->cfg;
    uint64_t h = pm_fnv1a64(PM_FNV_OFFSET, &c->model, sizeof c->model);
    int32_t v[5] = {c->batch, c->micro, pp->dp, pp->pl->zero, pp->pl->forward_only};
    h = pm_fnv1a64(h, v, sizeof v);
    h = pm_fnv1a64(h, &c->seed, sizeof c->seed);
    h = pm_fnv1a64(h, &c->opt, sizeof c->opt);
    h = pm_fnv1a64(h, &pp->opts.fingerprint, sizeof pp->opts.fingerprint);
    /* the placement too: it comes from rank 0's measured layer times, and
     * ranks that cut the layers differently would exchange the wrong tensors */
    h = pm_fnv1a64(h, pp->first, (size_t)(pp->S + 1) * sizeof *pp->first);
    for (int d = 0; d < pp->p; d++)
        h = pm_fnv1a64(h, pm_sched_dev(&pp->sched, d), (size_t)pp->sched.len[d] * sizeof(pm_pass));
    return h;
}

/* What each rank tells the root at the handshake. The version comes first
 * and the layout stays, so a rank running another pipemem is named as such
 * rather than tripping over a message of another shape. */
typedef struct {
    char version[24];        /* "pipemem " PM_VERSION */
    char host[PM_HOST_NAME]; /* where it runs (gethostname) */
    uint64_t setup, data;    /* fingerprint(); the caller's data identity */
} hello;

static void hello_init(const pm_pipe *pp, hello *h) {
    memset(h, 0, sizeof *h);
    snprintf(h->version, sizeof h->version, "pipemem %s",
             pp->opts.version ? pp->opts.version : pm_version());
    memcpy(h->host, pp->hosts + (size_t)pp->lo * PM_HOST_NAME, PM_HOST_NAME);
    h->setup = fingerprint(pp), h->data = pp->opts.data_identity;
}

/* Rank g's hello against the root's: 0, or the line saying what differs
 * (naming both hosts when they differ). */
static int differs(int g, const hello *a, const hello *b, char *msg, size_t cap) {
    char where[2 * PM_HOST_NAME + 40] = "";
    if (strcmp(a->host, b->host))
        snprintf(where, sizeof where, " (rank %d runs on %s, rank 0 on %s)", g, b->host, a->host);
    if (strcmp(a->version, b->version))
        snprintf(msg, cap, "rank %d runs %s, rank 0 %s%s: every host needs the same pipemem", g,
                 b->version, a->version, where);
    else if (a->data != b->data)
        snprintf(msg, cap, "rank %d reads other training data than rank 0%s: every host needs "
                 "the same data directory, byte for byte", g, where);
    else if (a->setup != b->setup)
        snprintf(msg, cap, "rank %d was started with other options or another schedule than "
                 "rank 0%s: every rank needs the same command line", g, where);
    return msg[0] != 0;
}

static pm_status wait_msg(pm_tp *tp, int peer, int tag, void *buf, size_t len) {
    pm_tp_req r;
    pm_status st = pm_tp_irecv(tp, peer, tag, buf, len, &r);
    return st ? st : pm_tp_wait(tp, &r);
}

static pm_status send_msg(pm_tp *tp, int peer, int tag, const void *buf, size_t len) {
    pm_tp_req r;
    pm_status st = pm_tp_isend(tp, peer, tag, buf, len, &r); /* copies: done at once */
    return st ? st : pm_tp_wait(tp, &r);
}

/* Rendezvous: returns once the receiver has the bytes (none copied). */
static pm_status ssend_msg(pm_tp *tp, int peer, int tag, const void *buf, size_t len) {
    pm_tp_req r;
    pm_status st = pm_tp_issend(tp, peer, tag, buf, len, &r);
    return st ? st : pm_tp_wait(tp, &r);
}

/* Every rank's hello to the root, which keeps their hosts and stops every
 * rank with one line at the first that differs from its own. */
static pm_status agree(pm_pipe *pp, pm_tp *tp) {
    hello mine, theirs;
    hello_init(pp, &mine);
    pm_status st;
    unsigned char ok = 1;
    if (pp->lo) {
        if ((st = ssend_msg(tp, 0, pm_tag_ctl(pp, CTL_PRINT), &mine, sizeof mine))) return st;
        return wait_msg(tp, 0, pm_tag_ctl(pp, CTL_OK), &ok, 1);
    }
    for (int g = 1; g < pp->nd; g++) {
        if ((st = wait_msg(tp, g, pm_tag_ctl(pp, CTL_PRINT), &theirs, sizeof theirs))) return st;
        theirs.version[sizeof theirs.version - 1] = theirs.host[PM_HOST_NAME - 1] = 0;
        memcpy(pp->hosts + (size_t)g * PM_HOST_NAME, theirs.host, PM_HOST_NAME);
        char msg[sizeof(pm_err)] = "";
        if (!differs(g, &mine, &theirs, msg, sizeof msg)) continue;
        pm_tp_abort(tp, PM_ERR_ARG, msg);
        return pm_tp_status(tp, NULL);
    }
    for (int g = 1; g < pp->nd; g++)
        if ((st = send_msg(tp, g, pm_tag_ctl(pp, CTL_OK), &ok, 1))) return st;
    return PM_OK;
}

pm_status pm_pipe_handshake(pm_pipe *pp, pm_status local_st, pm_err *err) {
    if (!pp->mpi) return local_st;
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    if (local_st) {
        pm_tp_abort(tp, local_st, err->msg);
        pm_tp_status(tp, err);
        return local_st;
    }
    pm_status st = agree(pp, tp);
    if (st) pm_tp_status(tp, err);
    return st;
}

/* ---- after a step ---------------------------------------------------------- */

static void pack(const pm_pipe *pp, int g, double *x) {
    int64_t len = pp->sched.len[g % pp->p], base = (int64_t)g * pp->sched.cap;
    const double *rows[4] = {pp->t0, pp->t1, pp->tmid, pp->live_after};
    *x++ = (double)pp->dev[g].mem.arena.peak;
    *x++ = (double)pp->arena_cap[g];
    for (int k = 0; k < 4; k++, x += len) memcpy(x, rows[k] + base, (size_t)len * sizeof *x);
    memcpy(x, pp->red0 + (size_t)g * pp->S, (size_t)pp->S * sizeof *x), x += pp->S;
    memcpy(x, pp->red1 + (size_t)g * pp->S, (size_t)pp->S * sizeof *x), x += pp->S;
    for (int j = 0; j < pp->m; j++) x[j] = pp->loss_mb[(size_t)(g / pp->p) * pp->m + j];
}

static void unpack(pm_pipe *pp, int g, const double *x) {
    int64_t len = pp->sched.len[g % pp->p], base = (int64_t)g * pp->sched.cap;
    double *rows[4] = {pp->t0, pp->t1, pp->tmid, pp->live_after};
    pp->peak[g] = (size_t)*x++;
    pp->arena_cap[g] = (size_t)*x++;
    for (int k = 0; k < 4; k++, x += len) memcpy(rows[k] + base, x, (size_t)len * sizeof *x);
    memcpy(pp->red0 + (size_t)g * pp->S, x, (size_t)pp->S * sizeof *x), x += pp->S;
    memcpy(pp->red1 + (size_t)g * pp->S, x, (size_t)pp->S * sizeof *x), x += pp->S;
    /* the replica's losses come from the device holding the head */
    if (g % pp->p != pm_sched_stage_device(&pp->sched, pp->S - 1)) return;
    for (int j = 0; j < pp->m; j++) pp->loss_mb[(size_t)(g / pp->p) * pp->m + j] = (float)x[j];
}

pm_status pm_pipe_report(pm_pipe *pp, pm_err *err) {
    if (!pp->mpi) return PM_OK;
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    pm_status st = PM_OK;
    if (pp->lo) {
        pack(pp, pp->lo, pp->report);
        st = ssend_msg(tp, 0, pm_tag_ctl(pp, CTL_REPORT), pp->report,
                       report_len(pp, pp->lo) * sizeof(double));
    }
    for (int g = 1; g < pp->nd && !pp->lo && !st; g++) {
        st = wait_msg(tp, g, pm_tag_ctl(pp, CTL_REPORT), pp->report,
                      report_len(pp, g) * sizeof(double));
        if (!st) unpack(pp, g, pp->report);
    }
    if (st) pm_tp_status(tp, err);
    return st;
}

/* ---- after an evaluation ---------------------------------------------------- */

pm_status pm_pipe_share_losses(pm_pipe *pp, int n, pm_err *err) {
    if (!pp->mpi) return PM_OK;
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    int head = pm_sched_stage_device(&pp->sched, pp->S - 1);
    pm_status st = PM_OK;
    for (int r = 0; r < pp->dp && !st; r++) {
        int from = r * pp->p + head, k = n - r * pp->m;
        size_t bytes = (size_t)(k < 0 ? 0 : k > pp->m ? pp->m : k) * sizeof(float);
        float *x = pp->loss_mb + (size_t)r * pp->m;
        if (!bytes) continue;
        if (pp->lo == from)
            for (int g = 0; g < pp->nd && !st; g++)
                st = g == from ? PM_OK : ssend_msg(tp, g, pm_tag_ctl(pp, CTL_LOSSES), x, bytes);
        else st = wait_msg(tp, from, pm_tag_ctl(pp, CTL_LOSSES), x, bytes);
    }
    if (st) pm_tp_status(tp, err);
    return st;
}

pm_status pm_pipe_gather_figures(pm_pipe *pp, const double *mine, int n, double *all,
                                 pm_err *err) {
    if (!pp->mpi) {
        for (int g = 0; g < pp->nd; g++) memcpy(all + (size_t)g * n, mine, (size_t)n * sizeof *all);
        return PM_OK;
    }
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    size_t bytes = (size_t)n * sizeof *all;
    pm_status st = PM_OK;
    if (pp->lo) st = ssend_msg(tp, 0, pm_tag_ctl(pp, CTL_FIGURES), mine, bytes);
    else memcpy(all, mine, bytes);
    for (int g = 1; g < pp->nd && !pp->lo && !st; g++)
        st = wait_msg(tp, g, pm_tag_ctl(pp, CTL_FIGURES), all + (size_t)g * n, bytes);
    if (st) pm_tp_status(tp, err);
    return st;
}

/* ---- checkpoints --------------------------------------------------------------- */

/* A status and its line (or, from the root before a save, the temporary's
 * name), an identity to compare, and a device's checksum parts. */
typedef struct {
    int32_t st, rep;
    uint64_t id;
    uint64_t sums[PM_CKPT_SLABS];
    char text[PM_CKPT_NAME + sizeof(pm_err)];
} ctl_record;

/* The root's record to every other process; the others receive it. */
static pm_status bcast_record(pm_pipe *pp, int tag, ctl_record *r) {
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    if (pp->lo) return wait_msg(tp, 0, tag, r, sizeof *r);
    pm_status st = PM_OK;
    for (int g = 1; g < pp->nd && !st; g++) st = ssend_msg(tp, g, tag, r, sizeof *r);
    return st;
}

static pm_status transport_failed(pm_pipe *pp, pm_status st, pm_err *err) {
    pm_tp_status(pm_tp_mpi_endpoint(pp->mpi), err);
    return st;
}

pm_status pm_pipe_share_name(pm_pipe *pp, pm_status st, pm_err *err) {
    if (!pp->mpi) return st;
    ctl_record r = {.st = (int32_t)st};
    if (!pp->lo) snprintf(r.text, sizeof r.text, "%s", st ? err->msg : pp->ck_name);
    pm_status ts = bcast_record(pp, pm_tag_ctl(pp, CTL_NAME), &r);
    if (ts) return transport_failed(pp, ts, err);
    if (r.st) {
        snprintf(err->msg, sizeof err->msg, "%.*s", 500, r.text);
        return (pm_status)r.st;
    }
    if (pp->lo) snprintf(pp->ck_name, sizeof pp->ck_name, "%.*s", PM_CKPT_NAME - 1, r.text);
    return PM_OK;
}

/* The root takes a record in: its status (the first failure wins, by rank)
 * and its identity (one unlike the root's is a failure naming the rank). */
static void take_record(pm_pipe *pp, const ctl_record *r, int g, uint64_t id, pm_status *st,
                        pm_err *err) {
    if (r->st && !*st) {
        *st = (pm_status)r->st;
        snprintf(err->msg, sizeof err->msg, "%.*s", 500, r->text);
    } else if (!*st && r->id != id) {
        *st = pm_errf(err, PM_ERR_ARG, "rank %d reads another checkpoint (another file, or "
                      "one that changed) than rank 0 at the same path: every rank needs the "
                      "same file", g);
    }
    for (int k = 0; k < PM_CKPT_SLABS; k++) pp->ck_sums[(size_t)r->rep * PM_CKPT_SLABS + k] += r->sums[k];
}

pm_status pm_pipe_gather_parts(pm_pipe *pp, pm_status st, uint64_t id, pm_err *err) {
    memset(pp->ck_sums, 0, (size_t)pp->dp * PM_CKPT_SLABS * sizeof *pp->ck_sums);
    for (int g = pp->lo; g < pp->hi; g++) { /* this process's devices */
        const pm_pipe_dev *dv = &pp->dev[g];
        ctl_record r = {.st = (int32_t)dv->st, .rep = dv->rep, .id = id};
        memcpy(r.sums, dv->sums, sizeof r.sums);
        if (dv->st) snprintf(r.text, sizeof r.text, "%s", dv->err.msg);
        take_record(pp, &r, g, id, &st, err);
    }
    if (!pp->mpi) return st;
    pm_tp *tp = pm_tp_mpi_endpoint(pp->mpi);
    pm_status ts = PM_OK;
    if (pp->lo) {
        ctl_record r = {.st = (int32_t)st, .rep = pp->dev[pp->lo].rep, .id = id};
        memcpy(r.sums, pp->dev[pp->lo].sums, sizeof r.sums);
        snprintf(r.text, sizeof r.text, "%s", st ? err->msg : "");
        ts = ssend_msg(tp, 0, pm_tag_ctl(pp, CTL_PARTS), &r, sizeof r);
    }
    for (int g = 1; g < pp->nd && !pp->lo && !ts; g++) {
        ctl_record r;
        if ((ts = wait_msg(tp, g, pm_tag_ctl(pp, CTL_PARTS), &r, sizeof r))) break;
        take_record(pp, &r, g, id, &st, err);
    }
    return ts ? transport_failed(pp, ts, err) : st;
}

pm_status pm_pipe_share_outcome(pm_pipe *pp, pm_status st, pm_err *err) {
    if (!pp->mpi) return st;
    ctl_record r = {.st = (int32_t)st};
    if (!pp->lo && st) snprintf(r.text, sizeof r.text, "%s", err->msg);
    pm_status ts = bcast_record(pp, pm_tag_ctl(pp, CTL_OUTCOME), &r);
    if (ts) return transport_failed(pp, ts, err);
    if (r.st) snprintf(err->msg, sizeof err->msg, "%.*s", 500, r.text);
    return (pm_status)r.st;
}

/* ---- parameters out ----------------------------------------------------------- */

static const float *slab_of(const pm_pipe_dev *dv, pm_slab which, int s) {
    return which == PM_SLAB_PARAMS ? dv->sp[s] : which == PM_SLAB_ADAM_M ? dv->sm[s] : dv->sv[s];
}

/* Stage s's slab from device g to the root, straight from the slab into
 * `out` (rendezvous), in chunks. */
/* Device g's part of stage s's slab `which` into out (the stage's start):
 * the whole stage, or under ZeRO-1 a moment's slice of g's replica. */
static pm_status gather_stage(pm_pipe *pp, pm_slab which, int s, int g, float *out) {
    size_t first = 0, n = pm_stage_floats(pp, s), c = pm_chunk(pp);
    if (which != PM_SLAB_PARAMS) pm_plan_moment_slice(pp->pl, s, g / pp->p, &first, &n);
    int local = g >= pp->lo && g < pp->hi, tag = pm_tag_ctl(pp, CTL_GATHER);
    const float *x = local ? slab_of(&pp->dev[g], which, s) : NULL;
    if (out) out += first;
    if (local && pm_root(pp)) {
        memcpy(out, x, n * sizeof(float));
        return PM_OK;
    }
    pm_status st = PM_OK;
    for (size_t lo = 0; lo < n && !st; lo += c) {
        size_t bytes = (n - lo < c ? n - lo : c) * sizeof(float);
        if (local) st = ssend_msg(pp->dev[g].tp, 0, tag, x + lo, bytes);
        else if (pm_root(pp)) st = wait_msg(pp->dev[0].tp, g, tag, out + lo, bytes);
    }
    return st;
}

pm_status pm_pipe_gather(pm_pipe *pp, pm_slab which, float *out, pm_err *err) {
    PM_ASSERT(which >= 0 && which < PM_SLAB_COUNT);
    if (which != PM_SLAB_PARAMS && pp->pl->forward_only)
        return pm_errf(err, PM_ERR_ARG, "a forward-only pipeline holds no AdamW moments");
    /* replica 0's devices; under ZeRO-1 a moment's slices from every replica */
    int reps = which != PM_SLAB_PARAMS && pp->pl->zero ? pp->dp : 1;
    for (int s = 0; s < pp->S; s++)
        for (int r = 0; r < reps; r++) {
            int g = r * pp->p + pm_sched_stage_device(&pp->sched, s);
            size_t off = pm_gpt_layer_offset(&pp->cfg.model, pp->first[s]);
            pm_status st = gather_stage(pp, which, s, g, out ? out + off : NULL);
            if (st) {
                pm_tp_status(pp->dev[pp->lo].tp, err);
                return st;
            }
        }
    return PM_OK;
}
