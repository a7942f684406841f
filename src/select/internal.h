/* internal.h: private to src/select: a task's run state and a device's
 * slab, shared by the pass executor (pass.c) and the scheduler (run.c). */
#ifndef PM_SELECT_INTERNAL_H
#define PM_SELECT_INTERNAL_H

#include <pthread.h>

#include "pipemem/pm_select.h"

/* A task while it runs. The host trainer is the task's store: parameters,
 * gradients, moments (in RAM, or spilled to the file the caller's task
 * records), loader, step count. Between shards the boundary activations
 * live here too. */
typedef struct {
    pm_select_task *task; /* the caller's; records the spill (store.c) */
    int index;            /* in the caller's task array */
    pm_trainer *host;     /* borrowed: the caller's trainer for this task */
    int S, K;             /* shards, microbatches */
    size_t nc;            /* floats of one (B/K, T, C) boundary tensor */
    float *act;           /* (S-1, K, nc) outputs of shards 0..S-2 this step; owned */
    float *grad;          /* (S-1, K, nc) gradients at those outputs; owned */
    int64_t stop_at;      /* steps to run */
    int64_t done;         /* steps completed as the scheduler sees them: host->step,
                             copied under the lock after each pass (the running device
                             writes host->step outside it) */
    int pass;             /* first pass of the current step not yet ended, 0 .. 2S-2 */
    int next;             /* first pass of the step no device has taken (== pass unless
                             passes are in flight; up to 2S-1: every pass taken) */
    int running;          /* devices holding it: each running one of its passes, or
                             having claimed it for its next pass (prefetch) */
    /* joining (run.c): idle devices take the step's later passes while the
     * earlier ones still run, each waiting per microbatch for its input */
    pthread_mutex_t *mu;  /* the run's lock, borrowed; NULL: no joining (nothing waits) */
    pthread_cond_t *flow; /* the run's, borrowed: broadcast when a microbatch or pass ends */
    int *mb;              /* (2S - 1) microbatches of each pass of this step whose output
                             is on the host (under mu) */
    unsigned char *fin;   /* (2S - 1) passes of this step that ended (under mu) */
    unsigned char *inuse; /* (S) a device runs a pass on the shard (under the lock) */
    int pf_pass, pf_dev;  /* pass pf_pass is kept for device pf_dev, whose copy thread
                             prefetches its shard (-1 none): no other device joins it */
    int broken;           /* a pass failed: passes waiting for its microbatches give up */
    /* evaluation: after a step that evaluates, a round of forward passes
     * through the shards on the validation batches, chunk by chunk (pass k
     * of the round runs shard k % S on chunk k / S), taken and joined as a
     * step's passes are, so idle devices share it */
    int ev;               /* 1: the current round is an evaluation's (under the lock;
                             it changes only when no pass of the task runs) */
    int ev_batches;       /* microbatches of an evaluation (opts.eval_batches) */
    int ev_micro;         /* microbatches of a chunk: at most SEL_EVAL_CHUNK */
    int ev_chunks;        /* chunks of a round */
    int32_t *ev_inp, *ev_tgt; /* (ev_batches, B/K, T) the round's tokens; owned */
    float *ev_act;        /* (S-1, ev_micro, nc) a chunk's outputs of shards 0..S-2; owned */
    double ev_sum;        /* the round's microbatch losses, in order (the last shard's) */
    double ev_busy;       /* seconds of the round's passes so far */
    int at_rung;          /* halving: evaluated, waiting for the others' evaluations;
                             ASHA: reported at its rung, waiting for a promotion */
    int rung;             /* ASHA: the rung it runs toward or waits at */
    int reached;          /* ASHA: rungs it reported at (0 .. nrung - 1) */
    int state;            /* pm_select_state */
    int away;             /* across ranks: not this process's (yet): no device here
                             takes it (ranks.c hands it over) */
    double loss_sum;      /* this step's microbatch losses, in order */
    double last_loss;     /* the last completed step's mean loss */
    double val_loss;      /* the last evaluation's loss (NAN before one) */
    int64_t val_step;     /* the step val_loss was measured after (-1: none) */
    float gscale;         /* clipping factor of the last step (pending updates) */
    int64_t *updated;     /* (S) AdamW updates applied to each shard */
    int64_t *zeroed;      /* (S) steps whose gradients each shard has zeroed */
    uint64_t *version;    /* (S) bumped at each write-back of a shard's state */
    double *usum;         /* (units) this step's sum of squares of each gradient unit
                             (pm_optim_unit_sums), from the pass that computed it */
    int *ufirst;          /* (S + 1) shard s's first unit; ufirst[S]: all of them */
    double busy;          /* seconds of passes run (less their waits for other devices) */
    double work;          /* busy and the work after its steps (norm, evaluation) */
    /* what Sharded-LRTF knows of its times (sel_est) */
    double *fl;           /* (2S - 1) FLOPs of each pass of a step */
    double *sec;          /* (2S - 1) seconds measured for each pass, over cnt runs */
    int64_t *cnt;         /* (2S - 1) */
    double fl_eval;       /* FLOPs of one evaluation */
    double after_s, eval_s; /* seconds measured after steps (norm) and in evaluations */
    int64_t after_n, eval_n;
    double first_start, last_end; /* its first pass's start (-1: none yet), last's end */
    int64_t passes_done;  /* over the run */
    char why[160];        /* failure reason */
    pthread_mutex_t *why_mu; /* the run's, borrowed, while devices run: joined passes of
                                the task and a copy thread can fail at once (store.c) */
} sel_task;

/* The task's state store (store.c): slab 0..3 = parameters, gradients, m,
 * v; n floats from float `at`, read (wr 0) or written. -1 on an I/O error
 * (t->why says). */
int sel_store_io(sel_task *t, int slab, size_t at, size_t n, float *buf, int wr);
int sel_store_materialize(sel_task *t);
int sel_store_release(sel_task *t);
pm_status sel_store_open(sel_task *t, const char *dir, pm_err *err);
int sel_store_close(sel_task *t);

/* A task's record in the save directory (record.c): its checkpoint and
 * losses (its pending updates flushed first; 1 on failure, t->why says),
 * the marker of a task stopped early (t->why in it), and a task resumed
 * from them: *stopped if marked, else from its checkpoint when there is
 * one (*resumed 1; the schedule must be the task's), with the losses
 * saved beside it and the validation loss measured if they lack it. */
int sel_record_save(const char *dir, sel_task *t);
void sel_record_stop(const char *dir, const sel_task *t);
pm_status sel_record_resume(const char *dir, const pm_select_task *t, pm_trainer *host,
                            const pm_tokens *val, int eval_batches, unsigned char *stopped,
                            double *loss, double *val_loss, int *resumed, pm_err *err);

/* Where each pass's pieces sit in a device's slab. */
typedef struct {
    unsigned char *slab; /* device_mem bytes, 64-aligned; owned */
    size_t state_off[2]; /* state slots */
    size_t act_off;      /* activation area */
    int slots;
    int res_task[2], res_shard[2]; /* resident state per slot (-1 none) */
    uint64_t res_version[2];
    int res_whole[2];    /* the slot holds the gradients and moments too (a pass that
                            applies AdamW's update needs them; one that only computes
                            needs the parameters, its gradients starting at zero) */
    double bytes;        /* bytes this device's passes copied in and wrote back */
    int last_slot;       /* slot of the last pass (the other one is loaded next) */
    int ran;             /* task of the last pass (-1 none) */
    size_t peak;         /* largest bytes in use seen */
    /* prefetch: a copy thread loads the next pass's state into the other
     * slot while the device computes; job 0 idle, 1 a copy, 2 quit */
    pthread_t copier;
    int copier_up;
    pthread_mutex_t cmu;
    pthread_cond_t ccv;
    int job, jshard, jslot, jwhole;
    void *jtask;         /* sel_task * */
    int jcopied;         /* a copy ran since the last sel_copy_wait */
    double jt0, jt1;     /* when the copy thread ran it (pm_now) */
    double wait_s;       /* time the device waited for a copy */
    double jbytes;       /* bytes the copy thread copied in */
} sel_dev;

/* A device (device.c): its slab laid out for L, its copy thread started;
 * and stopped and freed. sel_copy_start has the copy thread load shard s of
 * t into slot (whole: as sel_load_state); sel_copy_wait waits until it is
 * done (the time waited is added to dv->wait_s) and gives when the copy
 * thread ran the copy started since the last wait (pm_now times; both 0:
 * none). */
pm_status sel_dev_init(sel_dev *dv, const pm_select_layout *L, int d, pm_err *err);
void sel_dev_free(sel_dev *dv);
void sel_copy_start(sel_dev *dv, sel_task *t, int s, int slot, int whole);
void sel_copy_wait(sel_dev *dv, double *copy0, double *copy1);

/* Pass k of a step of a task with S shards: its shard and kind. */
typedef enum { SEL_F, SEL_FUSED, SEL_B, SEL_EVAL } sel_kind;
static inline int sel_pass_shard(int S, int k) { return k < S ? k : 2 * S - 2 - k; }
static inline sel_kind sel_pass_kind(int S, int k) {
    return k < S - 1 ? SEL_F : k == S - 1 ? SEL_FUSED : SEL_B;
}
/* A chunk of an evaluation holds at most this many microbatches (its
 * boundary outputs are kept per microbatch: memory, against pipelining
 * the chunk over the devices). */
#define SEL_EVAL_CHUNK 8
/* The task's current round (a step's 2S - 1 passes, or an evaluation's):
 * how many passes, pass k's shard, kind and microbatches. */
static inline int sel_round_passes(const sel_task *t) {
    return t->ev ? t->ev_chunks * t->S : 2 * t->S - 1;
}
static inline int sel_round_shard(const sel_task *t, int k) {
    return t->ev ? k % t->S : sel_pass_shard(t->S, k);
}
static inline sel_kind sel_round_kind(const sel_task *t, int k) {
    return t->ev ? SEL_EVAL : sel_pass_kind(t->S, k);
}
static inline int sel_round_micro(const sel_task *t, int k) {
    int left = t->ev_batches - k / t->S * t->ev_micro;
    return !t->ev ? t->K : left < t->ev_micro ? left : t->ev_micro;
}

/* Runs pass `k` of the current round of t (a step's, or an evaluation's)
 * on device dv in state slot `slot` (pass.c): loads the shard's state
 * there unless it is resident and current, applies a pending AdamW update
 * and zeroes the gradients at a shard's first pass of a step (or of an
 * evaluation), runs the pass's microbatches, writes back what changed.
 * t->loss_sum receives the fused pass's microbatch losses, t->ev_sum an
 * evaluation's last shard's. mark
 * gets when each of the first three ended (pm_now): the load, the update,
 * the microbatches (pm_select_pass.loaded, updated, computed).
 * With joining (t->mu set): before microbatch j it waits until pass k - 1
 * has put out microbatch j (t->mb), after it publishes its own; the step's
 * last pass then waits until every other pass of the step has ended (its
 * state written back: the global norm reads it). *waited gets the seconds
 * spent waiting, all within the microbatches (mark[1] .. mark[2]). -1 if
 * the store failed (t->why says) or a pass it waited for failed. */
int sel_run_pass(sel_task *t, sel_dev *dv, const pm_select_layout *lay, int k, int slot,
                 double mark[3], double *waited);
/* The slot holding shard s of t at its current version, or -1. */
int sel_resident(const sel_dev *dv, const sel_task *t, int s);
/* The slot shard s of t should run in: where it is resident, else an empty
 * one, else the one not used last. */
int sel_pick_slot(const sel_dev *dv, const sel_task *t, int s);
/* Copies shard s's state from the host into `slot` and records it there
 * (the prefetch thread runs this while the device computes in the other):
 * whole, its parameters, gradients and moments (a pass that applies the
 * shard's pending AdamW update), else its parameters, the gradients set
 * to zero (every pass after the update starts from zero gradients: the
 * host's are not read, nor the moments). *bytes gets what it copied. */
int sel_load_state(sel_task *t, sel_dev *dv, int s, int slot, int whole, double *bytes);

/* Sharded-LRTF's choice (simulate.c), one rule for the simulator and the
 * executor: among tasks 0..n-1 that ready() accepts, those first() marks
 * (if given: tasks whose times are not known yet, so they are measured
 * before anything is decided by them), then the one with the most work
 * left (left(); values within a relative 1e-12 are equal, so rounding
 * cannot reorder them); a tie goes to a task already on the device (here():
 * its next shard is there, or it is the task the device is running), then
 * to the lower index. -1: none is ready. left() and first() are asked once
 * per ready task, here() only to break a tie. */
typedef struct {
    int (*ready)(const void *ctx, int t);
    double (*left)(const void *ctx, int t);
    int (*here)(const void *ctx, int t);
    int (*first)(const void *ctx, int t); /* may be NULL */
    const void *ctx; /* the caller's state and the choosing device */
} sel_lrtf;
int sel_lrtf_pick(const sel_lrtf *q, int n);

/* ASHA's bookkeeping (asha.c), under the scheduler's lock. */
typedef struct {
    int eta, nrung, n;     /* off unless eta >= 2 */
    const int64_t *rungs;  /* (nrung) the caller's */
    int *entrants;         /* (nrung) N_k: at most ceil(N_k / eta) leave rung k */
    double *loss;          /* (n, nrung) each task's validation loss at each rung it reported */
    double *key;           /* (n) scratch: the losses at one rung */
    int *idx;              /* (2n) scratch: the reporters, their order */
    unsigned char *state;  /* (2n) scratch: their pm_select_asha_state, the promotions */
} sel_asha;
/* Where each task stands from its step (a resumed sweep's too); after the
 * tasks' run state is made. Refuses tasks whose steps are not the last rung. */
pm_status sel_asha_init(sel_asha *a, const pm_select_opts *o, sel_task *t, int n, pm_err *err);
void sel_asha_free(sel_asha *a);
/* 1 if t's step is the rung it runs toward (its evaluation there is due). */
int sel_asha_due(const sel_asha *a, const sel_task *t);
/* t reported val at its rung and waits there. */
void sel_asha_report(sel_asha *a, sel_task *t, double val);
/* Promotes what ASHA promotes now (rung by rung, upward); the tasks that
 * must stop (waiting at a rung no task can still reach) are set stopped and
 * listed in stop (n); returns how many. */
int sel_asha_decide(sel_asha *a, sel_task *t, int *stop);
/* The run (run.c): its tasks and devices and what they share, guarded by
 * mu; across ranks, ranks.c's link to the other processes too. */
typedef struct sel_link sel_link; /* below: across ranks */
typedef struct sel_run {
    const pm_select_opts *o;
    const pm_select_layout *lay;
    sel_task *t;
    int n;
    sel_dev *dev;
    pm_select_stats *stats;
    pthread_mutex_t mu;
    pthread_mutex_t why_mu; /* a task's why while devices run (internal.h) */
    pthread_cond_t cv;
    pthread_cond_t flow;  /* joining: a microbatch or a pass ended (pass.c waits on it) */
    int join;             /* devices join running tasks (shard policy, not opts.no_join) */
    int gated, gate_n;    /* joining: devices that made their first choice, of gate_n
                             started (the start gate, next_task) */
    int busy_global;      /* sequential: a pass is running somewhere */
    int active;           /* devices working (not waiting for a ready pass) */
    int cores;            /* online CPUs (prefetch auto) */
    int *owner;           /* (n) task policy: the device a task is pinned to, -1 none */
    int *rank;            /* (n) halving: scratch for the ranking; ASHA: the stopped */
    sel_asha asha;        /* ASHA's rungs (off unless o->asha >= 2) */
    int64_t log_cap;      /* passes the run can make: stats->log's size */
    double fl_done, sec_done; /* FLOPs and seconds of every pass run (the rate) */
    double t0;
    pm_status st;         /* first infrastructure error (none expected) */
    sel_link *link;       /* across ranks (o->ranks, which starts with it), else NULL */
    int live;             /* device threads not yet ended (across ranks: the main
                             thread serves the link until they have) */
} sel_run;

/* What run.c offers ranks.c, under the run's lock: a task's time left as
 * Sharded-LRTF estimates it (after `adv` more passes), a task stopped
 * early (its state flushed, the marker written, the event emitted), and
 * the least time a task can take (the lower bound's). */
double sel_time_left(const sel_run *r, const sel_task *t, int adv);
void sel_stop_early(sel_run *r, int i, const char *by);
double sel_task_bound(const sel_run *r, const sel_task *t);

/* Across ranks (ranks.c; r->link set): every process runs pm_select_run on
 * the same sweep, each task away until rank 0 hands it to this process;
 * the main thread serves the link while the devices run.
 *   start   before the devices start: every task away, the coordinator's
 *           state on rank 0 (its ASHA's first say)
 *   pump    the main thread, under the lock: messages both ways
 *   open    more tasks may still come here (the run goes on)
 *   done    the main thread may stop serving (its devices ended; rank 0:
 *           every other rank said goodbye)
 *   event   an event, forwarded to rank 0, which reports it
 *   rung    t reported val at its ASHA rung: rank 0 decides
 *   finish  after the run: each rank's results to rank 0, whose res and
 *           stats then cover the sweep */
typedef struct sel_link_ops {
    pm_status (*start)(sel_run *r, pm_err *err);
    void (*pump)(sel_run *r);
    int (*open)(const sel_run *r);
    int (*done)(const sel_run *r);
    void (*event)(sel_run *r, const pm_select_event *ev);
    void (*rung)(sel_run *r, const sel_task *t, double val);
    pm_status (*finish)(sel_run *r, pm_select_result *res, pm_err *err);
} sel_link_ops;
/* The link's calls come through the table its object starts with, so the
 * run does not depend on ranks.c, which depends on the run (it stops tasks
 * and reads their time left): one arrow, downward. */
struct sel_link {
    const sel_link_ops *ops;
};

/* A task's time left as the executor's Sharded-LRTF estimates it
 * (simulate.c, sel_est_left): each pass of a step at the mean of its own
 * measured times (Hydra's measured minibatch time, by pass), a pass not yet
 * measured at its FLOPs times spf; the work after each step and each
 * evaluation at their measured means (else eval_fl times spf). So a task
 * whose passes are slow for their FLOPs (narrow and deep) ranks by what it
 * takes, not by what its FLOPs say. */
typedef struct {
    int np;              /* passes per step, 2S - 1 */
    int pass;            /* next pass of the current step (0: a step starts next) */
    const double *fl;    /* (np) FLOPs of each pass */
    const double *sec;   /* (np) seconds measured for each pass, summed over cnt[k] runs */
    const int64_t *cnt;  /* (np); NULL: nothing measured */
    double spf;          /* seconds per FLOP of what is not measured */
    double after;        /* seconds of the work after a step, 0 if none measured */
    double eval;         /* seconds of one evaluation (-1: not measured, eval_fl * spf) */
    double eval_fl;      /* FLOPs of one evaluation */
    int64_t steps_after; /* whole steps after the current one */
    int64_t evals;       /* evaluations still to run */
} sel_est;
double sel_est_left(const sel_est *e);

/* Applies every shard's pending update to the host slabs (before an
 * evaluation, a save or the end), as the device would have on next load.
 * A spilled task's slabs must be materialized. */
void sel_flush_updates(sel_task *t);

#endif
