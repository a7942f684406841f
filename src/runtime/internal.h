/* internal.h: private to src/runtime: one device's state and the pieces the
 * executor (exec.c) and the pipeline (pipe.c) share. */
#ifndef PM_RUNTIME_INTERNAL_H
#define PM_RUNTIME_INTERNAL_H

#include "pipemem/pm_runtime.h"


typedef struct pm_pipe_dev pm_pipe_dev;
struct pm_pipe_pool; /* the parked device threads (pipe_threads.c) */

struct pm_pipe {
    pm_train_cfg cfg;     /* copy of the training configuration */
    pm_sched sched;       /* owned copy of the schedule, W passes in microbatch order */
    int64_t w_relabeled;  /* W passes that took another microbatch of their stage */
    pm_pipe_opts opts;    /* copy */
    int p, S, m;          /* devices, stages, microbatches */
    int mbsz, T;          /* sequences per microbatch, tokens per sequence */
    int *first;           /* (S+1) stage s holds layers first[s] .. first[s+1]-1 */
    pm_gpt_sizes *sz;     /* (L+2) per-layer sizes for one microbatch */
    pm_cost cost;         /* per stage: model byte deltas; times of the last step (us) */
    pm_sim pred;          /* simulation with cost (after a step: measured times) */
    pm_cost prof;         /* per stage: times profiled over the steps so far (forecast) */
    pm_sim fcast;         /* the forecast's simulation, sized at init */
    int64_t nprof;        /* steps folded into prof */
    size_t *peak;         /* (p) measured peak bytes of the last step */
    size_t *pred_peak;    /* (p) predicted peak bytes */
    size_t *arena_cap;    /* (p) arena capacities (plan or first fit, the smaller) */
    size_t *arena_ff;     /* (p) what first fit alone would need (for comparison) */
    double *t0, *t1;      /* (p, cap) measured pass start / end, us from step start */
    double *tmid;         /* (p, cap) BW: end of its B part */
    double *live_after;   /* (p, cap) arena live bytes after each pass */
    float *loss_mb;       /* (m) last step's microbatch losses */
    double *dep_end;      /* (2, S, m) scratch: F and B ends, for the latency estimate */
    pm_pipe_dev *dev;     /* (p) per-device state; owned */
    pm_tp_threads *world; /* threads transport */
    struct pm_pipe_pool *pool; /* device threads, started in init; owned */
    int64_t step;         /* optimizer steps done */
    pm_status dead;       /* sticky: a failed step leaves the pipe unusable */
    pm_err dead_err;
    pm_pipe_info info;    /* last step */
};

/* Message tags: activation into stage s for microbatch j, its gradient back
 * out of stage s+1 into stage s, the gradient-norm chain into stage s, and
 * the norm broadcast. Unique per step, so matching never depends on timing. */
static inline int pm_tag_f(const pm_pipe *pp, int s, int j) { return (s * pp->m + j) * 2; }
static inline int pm_tag_b(const pm_pipe *pp, int s, int j) { return (s * pp->m + j) * 2 + 1; }
static inline int pm_tag_norm(const pm_pipe *pp, int s) { return 2 * pp->S * pp->m + s; }
static inline int pm_tag_bcast(const pm_pipe *pp) { return 2 * pp->S * pp->m + pp->S; }

struct pm_pipe_dev {
    pm_pipe *pp;          /* the pipeline (config, schedule, tables); borrowed */
    int d;                /* this device */
    pm_tp *tp;            /* its transport endpoint; borrowed from the world */
    pm_arena arena;       /* activations (the saved buffers) */
    size_t *off;          /* (L+2, m) arena offset of layer l's saved for mb j */
    size_t *koff;         /* (S, m) recompute: arena offset of stage s's kept input */
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
    pm_tp_req rxreq[2];   /* receive of each slot */
    int64_t rxpass[2];    /* pass index a slot serves, -1 if free */
    int64_t scan;         /* next pass whose receive is not posted yet */
    pm_tp_req txreq[2];   /* send of each tx buffer */
    int txnext;           /* tx buffer the next send uses */
    pm_tp_req *nreq;      /* (S + p) norm chain sends, then the broadcast */
    /* per step */
    const int32_t *inp, *tgt; /* the step's batch (input data, read only) */
    double t_base;        /* step start (pm_now) */
    double norm;          /* global gradient norm, as received */
    pm_status st;         /* this device's result */
    pm_err err;
};

/* Arena bookkeeping of a pass, shared by the dry replay (sizing) and the
 * executor so both make the same sequence of calls: the executor calls each
 * phase at its point in the pass, the replay calls all four in order, and a
 * phase that does not concern the pass's kind does nothing.
 *   PRE     before the compute: F allocates its layers' saved (recomputed:
 *           first the kept input); a recomputed B or BW allocates the saved
 *           it is about to rebuild;
 *   REDONE  a recomputed B or BW has rebuilt them: the kept input goes;
 *   POST    F recomputed drops its saved (the input stays kept); B and BW
 *           shrink each saved to its W prefix;
 *   WDONE   W and BW release the prefixes.
 * An allocation that does not fit returns PM_ERR_MEMLIMIT with the layer in
 * *bad (-1: the kept input). */
typedef enum { PM_MEM_PRE, PM_MEM_REDONE, PM_MEM_POST, PM_MEM_WDONE } pm_mem_phase;
pm_status pm_dev_mem(pm_pipe_dev *dv, const pm_pass *ps, pm_mem_phase ph, int *bad);
/* Bytes a recomputed stage s keeps per microbatch (0 on stage 0: its
 * tokens stay in the batch; 0 without recomputation). */
size_t pm_dev_keep_bytes(const pm_pipe *pp, int s);

/* The device thread's body: passes, norm, AdamW. Sets dv->st / dv->err. */
void *pm_dev_main(void *arg);

/* Device threads (pipe_threads.c): start p parked threads; run one step on
 * all and wait; stop and join them (safe on a pipe whose start failed). */
pm_status pm_pipe_pool_start(pm_pipe *pp, pm_err *err);
void pm_pipe_pool_run(pm_pipe *pp);
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
