/* internal.h: private to src/runtime: one device's state and the pieces the
 * executor (exec.c) and the pipeline (pipe.c) share. */
#ifndef PM_RUNTIME_INTERNAL_H
#define PM_RUNTIME_INTERNAL_H

#include "pipemem/pm_runtime.h"
#include "plan/devmem.h"
#include "plan/query.h"
#include "transport.h"


typedef struct pm_pipe_dev pm_pipe_dev;

/* What the devices run when woken: a training step, or forward passes
 * only (evaluation). */
/* The per-parameter slabs a pipe keeps on its devices. */
typedef enum { PM_SLAB_PARAMS, PM_SLAB_ADAM_M, PM_SLAB_ADAM_V, PM_SLAB_COUNT } pm_slab;

typedef enum { PM_RUN_STEP, PM_RUN_EVAL, PM_RUN_SAVE, PM_RUN_LOAD } pm_run_kind;
struct pm_pipe_pool; /* the parked device threads (pipe_threads.c) */

#define PM_CKPT_NAME 4096 /* bytes of a checkpoint temporary's name */
#define PM_HOST_NAME 64   /* bytes of a host's name, cut to fit */

struct pm_pipe {
    const pm_plan *pl;    /* the plan it runs: &plan */
    pm_plan plan;         /* owned copy of the caller's */
    pm_train_cfg cfg;     /* the plan's configuration (a copy) */
    pm_sched sched;       /* the plan's schedule (a shallow copy: the arrays are the plan's) */
    pm_pipe_opts opts;    /* copy */
    int p, S, m;          /* devices, stages, microbatches of one replica's schedule */
    int dp, nd;           /* replicas (data parallel), devices in all (dp * p) */
    int lo, hi;           /* this process's devices: lo .. hi-1 (all with threads,
                           * its rank's one under MPI) */
    int mbsz, T;          /* sequences per microbatch, tokens per sequence */
    const int *first;     /* (S+1) the plan's: stage s holds layers first[s] .. first[s+1]-1 */
    const pm_gpt_sizes *sz; /* (L+2) the plan's per-layer sizes for one microbatch */
    pm_cost cost;         /* per stage: model byte deltas; times of the last step (us) */
    pm_sim pred;          /* simulation with cost (after a step: measured times) */
    pm_cost prof;         /* per stage: times profiled over the steps so far (forecast) */
    pm_sim fcast;         /* the forecast's simulation, sized at init */
    int64_t nprof;        /* steps folded into prof */
    double *ar, *prof_ar; /* (S) data parallel: each stage's gradient sum, last step's
                           * (the fastest replica's wait to done) and the profile's */
    size_t *peak;         /* (nd) measured peak bytes of the last step */
    size_t *pred_peak;    /* (nd) predicted peak bytes */
    double *busy;         /* (nd) ms each device spent in passes, last step */
    size_t *arena_cap;    /* (nd) arena capacities (the plan's, or opts.arena_cap) */
    int64_t *acct;        /* (nd) bytes each of this process's devices allocated (pm_alloc_account) */
    double *t0, *t1;      /* (nd, cap) measured pass start / end, us from step start;
                           * the figures use replica 0's rows */
    double *tmid;         /* (nd, cap) BW: end of its B part */
    double *live_after;   /* (nd, cap) arena live bytes after each pass */
    double *red0, *red1;  /* (nd, S) gradient reduction of stage s: start, end (us) */
    float *loss_mb;       /* (dp * m) last step's microbatch losses, global order */
    double *report;       /* MPI: one device's step report (report_len doubles) */
    size_t report_len;
    double *dep_end;      /* (2, S, m) scratch: F and B ends, for the latency estimate */
    char *hosts;          /* (nd, PM_HOST_NAME) each device's host: this process's
                           * devices, and at the root every device (handshake) */
    pm_pipe_dev *dev;     /* (p) per-device state; owned */
    pm_tp_threads *world; /* threads transport, or */
    pm_tp_mpi *mpi;       /* the MPI transport */
    struct pm_pipe_pool *pool; /* device threads, started in init; owned */
    pm_pass *fwd;         /* (p, fcap) each device's forward-only list: its stages' F for
                           * microbatches 0..m-1, in wavefront order (microbatch + stage) */
    int64_t *fwd_len;     /* (p) */
    int64_t fcap;         /* row length of fwd */
    pm_run_kind run;      /* what the devices run next */
    pm_status (*body)(pm_pipe_dev *dv); /* ... and the function that runs it */
    int eval_n;           /* evaluation: microbatches in this round (of dp * m) */
    char ck_name[PM_CKPT_NAME]; /* save: the temporary every device writes into */
    const char *ck_path;  /* load: the checkpoint every device reads from */
    pm_ckpt_info ck_info; /* load: its header, checked by every process */
    uint64_t *ck_sums;    /* (dp, 3) the checksum parts summed by replica, at the root */
    float *probs;         /* sampling: the head's device writes the next-token
                           * probabilities after the last position here (vocab) */
    int64_t step;         /* optimizer steps done */
    pm_status dead;       /* sticky: a failed step leaves the pipe unusable */
    pm_err dead_err;
    pm_pipe_info info;    /* last step */
};

/* Bytes of every activation and gradient message: (mbsz, T, C) floats, or
 * (mbsz, T, C+3) when the head is in parts (their messages carry the
 * softmax's running figures); each message is sent whole. */
static inline size_t pm_msg_bytes(const pm_pipe *pp) {
    size_t w = (size_t)pp->cfg.model.dim + (pm_gpt_head_parts(&pp->cfg.model) > 1 ? 3 : 0);
    return (size_t)pp->mbsz * (size_t)pp->T * w * sizeof(float);
}

/* Stage-sized arrays (a stage's gradients in the data-parallel sum, its
 * parameters in a gather) travel by rendezvous (pm_tp_issend: read from
 * the sender's slab, nothing copied into a buffer of the transport) in
 * messages of at most PM_CHUNK floats, so the one buffer the sum needs (a
 * partial sum arriving to be added) is a chunk, not a stage, and no
 * message nears MPI's 2 GiB. 1 Mi floats (4 MiB): large enough that a
 * message's fixed cost (a wake-up, MPI's handshake) is small against its
 * copy. pm_pipe_opts.chunk_floats replaces it (tests). */
#define PM_CHUNK PM_PLAN_CHUNK

static inline size_t pm_chunk(const pm_pipe *pp) {
    return pp->opts.chunk_floats ? pp->opts.chunk_floats : PM_CHUNK;
}

/* Messages that carry n floats. */
static inline size_t pm_chunks(const pm_pipe *pp, size_t n) {
    return (n + pm_chunk(pp) - 1) / pm_chunk(pp);
}

/* Message tags: activation into stage s for microbatch j, its gradient back
 * out of stage s+1 into stage s, the gradient-norm chain into stage s, and
 * the norm broadcast. Unique per step, so matching never depends on timing. */
static inline int pm_tag_f(const pm_pipe *pp, int s, int j) { return (s * pp->m + j) * 2; }
static inline int pm_tag_b(const pm_pipe *pp, int s, int j) { return (s * pp->m + j) * 2 + 1; }
static inline int pm_tag_norm(const pm_pipe *pp, int s) { return 2 * pp->S * pp->m + s; }
static inline int pm_tag_bcast(const pm_pipe *pp) { return 2 * pp->S * pp->m + pp->S; }
/* Data parallelism: stage s's partial gradient sum along the replicas, and
 * the full sum back from the last replica. */
static inline int pm_tag_red(const pm_pipe *pp, int s) { return pm_tag_bcast(pp) + 1 + s; }
static inline int pm_tag_sum(const pm_pipe *pp, int s) { return pm_tag_red(pp, pp->S) + s; }
/* ZeRO-1: a replica's updated slice of stage s's parameters to the others. */
static inline int pm_tag_gath(const pm_pipe *pp, int s) { return pm_tag_sum(pp, pp->S) + s; }
/* Between steps (MPI): reports, parameter gathers, the handshake. */
static inline int pm_tag_ctl(const pm_pipe *pp, int k) { return pm_tag_gath(pp, pp->S) + k; }

struct pm_pipe_dev {
    pm_pipe *pp;          /* the pipeline (config, schedule, tables); borrowed */
    int d;                /* this device in its replica's schedule */
    int g, rep;           /* this device in all (rep * p + d), its replica */
    pm_tp *tp;            /* its transport endpoint; borrowed from the world */
    pm_devmem mem;        /* activations: the arena and where each saved lives */
    float *slab;          /* params | grads | m | v of this device's stages; owned */
    size_t n;             /* floats in each of the four parts */
    float **sp, **sg;     /* (S) stage s's params / grads (NULL if not held); owned arrays */
    float **sm, **sv;     /* (S) stage s's AdamW moments */
    unsigned char *work;  /* scratch and message buffers, one allocation; owned */
    void *scratch;        /* largest scratch of this device's layers */
    float *rx[2];         /* (mbsz, T, C) receive slots */
    float *tx[2];         /* (mbsz, T, C) send buffers, alternating */
    float *bb[2];         /* (mbsz, T, C) gradients between a stage's layers in B */
    double *nbuf;         /* (S + 1) gradient-norm messages */
    double *usum;         /* the norm's unit sums of its stages (pm_optim_unit_sums) */
    int *ubase;           /* (S + 1) where stage s's unit sums start in usum */
    pm_tp_req rxreq[2];   /* receive of each slot */
    int64_t rxpass[2];    /* pass index a slot serves, -1 if free */
    int64_t scan;         /* next pass whose receive is not posted yet */
    const pm_pass *list;  /* the passes this run walks: the schedule's, or eval's */
    int64_t len;
    pm_pass *elist;       /* (fcap) this device's evaluation passes of the round; owned */
    pm_tp_req txreq[2];   /* send of each tx buffer */
    int txnext;           /* tx buffer the next send uses */
    pm_tp_req *nreq;      /* (S + nd) norm chain sends, then the broadcast */
    float *red;           /* data parallel, replicas after the first: a chunk of a
                           * partial sum arrives here (min(chunk, largest stage) floats) */
    pm_tp_req *rreq;      /* data parallel, per chunk of each of the device's stages:
                           * the totals' receive, or (the last replica) their send to
                           * every other replica (pm_dev_sum_reqs) */
    pm_tp_req *greq;      /* (ngreq) ZeRO-1: receives of the other replicas' slices of
                           * the updated parameters, and sends of its own */
    size_t ngreq;
    uint64_t sums[PM_CKPT_SLABS]; /* save, load: its parts of the slab checksums */
    /* per step */
    const int32_t *inp, *tgt; /* the step's batch (input data, read only) */
    double t_base;        /* step start (pm_now) */
    double norm;          /* global gradient norm, as received */
    pm_status st;         /* this device's result */
    pm_err err;
};

/* Floats of stage s's parameters. */
static inline size_t pm_stage_floats(const pm_pipe *pp, int s) {
    return pm_plan_stage_floats(pp->pl, s);
}

/* Transport peer of stage s's device in dv's replica. */
static inline int pm_dev_peer(const pm_pipe_dev *dv, int s) {
    return dv->rep * dv->pp->p + pm_sched_stage_device(&dv->pp->sched, s);
}

/* What a device runs (exec.c): a step's passes, norm and AdamW, or an
 * evaluation's forward passes. */
pm_status pm_dev_step(pm_pipe_dev *dv);
pm_status pm_dev_eval(pm_pipe_dev *dv);

/* Whether this process holds device 0 (prints, writes, commits). */
static inline int pm_root(const pm_pipe *pp) { return pp->lo == 0; }

/* Data parallelism: chunks of the device's stages before stage s (s = S:
 * all of them). */
static inline size_t pm_dev_chunk_base(const pm_pipe_dev *dv, int s) {
    size_t k = 0;
    for (int t = 0; t < s; t++)
        if (pm_sched_stage_device(&dv->pp->sched, t) == dv->d)
            k += pm_chunks(dv->pp, pm_stage_floats(dv->pp, t));
    return k;
}

/* Requests for the totals per chunk: one receive (replicas before the
 * last) or one send to every other replica (the last). */
static inline size_t pm_dev_sum_per(const pm_pipe_dev *dv) {
    int last = dv->pp->dp - 1;
    return dv->rep == last && last > 0 ? (size_t)last : 1;
}

/* Where stage s's requests for the totals start in dv->rreq (s = S: their
 * count). */
static inline size_t pm_dev_sum_reqs(const pm_pipe_dev *dv, int s) {
    return pm_dev_chunk_base(dv, s) * pm_dev_sum_per(dv);
}

/* ZeRO-1: device g's requests of the updated parameters' all-gather: a
 * receive per chunk of every other replica's slice of its stages, and its
 * own slices' chunks sent to each other replica. */
static inline size_t pm_dev_gather_reqs(const pm_pipe *pp, int g) {
    size_t n = 0;
    for (int s = 0; pp->pl->zero && s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != g % pp->p) continue;
        for (int r = 0; r < pp->dp; r++) {
            size_t first, count;
            pm_plan_moment_slice(pp->pl, s, r, &first, &count);
            n += pm_chunks(pp, count) * (r == g / pp->p ? (size_t)(pp->dp - 1) : 1);
        }
    }
    return n;
}

/* The transport world (pipe_world.c): threads or MPI.
 *   world_create  the transport, this process's devices (lo, hi), buffers
 *                 for every message a step can leave unreceived;
 *   handshake     MPI: every rank's setup status and fingerprint meet at the
 *                 root; a failure or a mismatch stops every rank with one
 *                 line (threads: returns local_st);
 *   report        MPI, after a step: every other device's pass times, peak
 *                 and losses go to the root (threads: nothing to do). */
pm_status pm_pipe_world_create(pm_pipe *pp, pm_err *err);
pm_tp *pm_pipe_endpoint(pm_pipe *pp, int g);
pm_status pm_pipe_handshake(pm_pipe *pp, pm_status local_st, pm_err *err);
pm_status pm_pipe_report(pm_pipe *pp, pm_err *err);
/* MPI, after an evaluation: each replica's losses from its head's rank to
 * every rank (threads: already shared). */
pm_status pm_pipe_share_losses(pm_pipe *pp, int n, pm_err *err);
/* Checkpoints, collective (threads: within the process); every process
 * makes each call whatever happened before, so none waits on one that left:
 *   share_name     the root's status and the temporary's name (pp->ck_name)
 *                  to every process;
 *   gather_parts   every process's status (st) and identity (id: 0, or what
 *                  it read, which must be the root's) and every device's
 *                  status and checksum parts to the root: the first failure's
 *                  line in err, the parts summed by replica into pp->ck_sums;
 *   share_outcome  the root's status and line to every process, which all
 *                  return. */
pm_status pm_pipe_share_name(pm_pipe *pp, pm_status st, pm_err *err);
pm_status pm_pipe_gather_parts(pm_pipe *pp, pm_status st, uint64_t id, pm_err *err);
pm_status pm_pipe_share_outcome(pm_pipe *pp, pm_status st, pm_err *err);

/* Device threads (pipe_threads.c): start p parked threads; stop and join
 * them (safe on a pipe whose start failed). pm_pipe_run runs kind with
 * body on every device of this process (its threads, or this rank's device
 * on the calling thread), each setting dv->st / dv->err, and waits. */
pm_status pm_pipe_pool_start(pm_pipe *pp, pm_err *err);
void pm_pipe_run(pm_pipe *pp, pm_run_kind kind, pm_status (*body)(pm_pipe_dev *dv));
void pm_pipe_pool_free(pm_pipe *pp);

/* Measurements (pipe_measure.c), from the last step's pass times:
 * per-stage mean costs and latency into pp->cost; makespan and bubble the
 * simulator's way; the profile for forecasts; the forecast of the next step
 * (NAN before any step). */
void pm_pipe_measure_costs(pm_pipe *pp);
void pm_pipe_measure_span(const pm_pipe *pp, double *makespan, double *bubble);
void pm_pipe_profile_add(pm_pipe *pp);
void pm_pipe_forecast(pm_pipe *pp, pm_pipe_info *in);

#endif
