/* pm_runtime.h: the pipeline runtime. Runs any schedule from the engine for
 * real: one executor thread per device walks that device's pass list and
 * runs the model's F / B / W passes of its stages, activations live in a
 * per-device arena sized before the step, devices talk only through a
 * transport, and every pass's start and end is measured.
 *
 * The pipeline trainer (pm_pipe) runs a plan (pm_plan.h: the placement,
 * the schedule, the activation arena and every device's bytes): the
 * executors, the optimizer step per device, evaluation, sampling,
 * checkpoints by stage and the timeline. Its devices are threads of one
 * process or MPI ranks (below); both transports carry the same messages, so
 * the executor cannot tell them apart.
 *
 * Exactness contract: weight passes of one stage are interchangeable (same
 * cost, same bytes), so the plan runs each stage's W passes in microbatch
 * order at the positions the schedule lists them (zb-v lists a few out of
 * order; timing and memory are unchanged). Stages with fused BW passes must
 * already be in order (checked by the planner). Then pm_pipe_step gives
 * bitwise the same loss, gradient norm and parameters as the single-device
 * trainer's step (pm_trainer) on the same tokens and configuration,
 * provided OpenBLAS runs one thread per call (pm_pipe_create sets
 * pm_blas_threads(1), a process-wide setting: run the single-device
 * reference the same way). */
#ifndef PM_RUNTIME_H
#define PM_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pipemem/pm_gpt.h"
#include "pipemem/pm_plan.h"
#include "pipemem/pm_sched.h"
#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"

/* ---- MPI --------------------------------------------------------------------
 * Under mpirun every rank runs one device (pm_plan_req.transport
 * PM_TRANSPORT_MPI). Built when OpenMPI's headers were found
 * (pm_mpi_built), else every call below fails with a line saying so. Errors
 * of MPI itself are returned (MPI_ERRORS_RETURN), never fatal. */
#define PM_COMM_TIMEOUT 120.0 /* seconds a device or rank waits for another */
int pm_mpi_built(void);
/* Whether this process was started by mpirun (OMPI_COMM_WORLD_SIZE set). */
int pm_mpi_launched(void);
/* How long (s) this process waits for another rank in pm_mpi_agree,
 * pm_mpi_same_word and pm_mpi_bcast (0: PM_COMM_TIMEOUT). */
void pm_mpi_set_timeout(double seconds);
/* MPI_Init_thread (funneled: only the thread that calls the transport
 * talks to MPI); rank and size of the world. Later calls only return them. */
pm_status pm_mpi_init(int *rank, int *size, pm_err *err);
/* MPI_Finalize, if pm_mpi_init succeeded; but MPI_Abort of the whole job
 * once a wait of this process for another rank ran out (here or in an MPI
 * transport): finalizing would wait for that silent rank for ever. */
void pm_mpi_finalize(void);
/* On a rank other than 0 whose wait for a silent rank ran out, or that
 * took such a rank's abort line, the line having gone to rank 0: waits
 * for rank 0 to say it and end the job (mpirun then stops this process),
 * at most the timeout and 5 s; 1 if the wait ran out (this rank should
 * then say its line itself), else 0 at once. pm_mpi_finalize waits so too
 * unless this ran. */
int pm_mpi_await_root(void);
/* The collectives below go point to point through rank 0, each wait
 * bounded by the timeout: a rank that does not answer (stopped, dead,
 * running another program) is named in err (PM_ERR_TRANSPORT). */
/* Collective over every rank: -1 if every rank passed ok != 0, else the
 * lowest rank that did not (so ranks stop together after a local failure
 * such as a missing data file, instead of hanging in the next collective);
 * -2 if a rank did not answer (err says which). */
int pm_mpi_agree(int ok, pm_err *err);
/* Collective: whether every rank passed the word rank 0 did (at most
 * PM_MPI_WORD - 1 bytes: a command's name): *first is the first rank that
 * did not, its word in theirs, or -1. */
#define PM_MPI_WORD 32
pm_status pm_mpi_same_word(const char *mine, int *first, char theirs[PM_MPI_WORD], pm_err *err);
/* Collective: rank 0's `bytes` at buf to every rank. */
pm_status pm_mpi_bcast(void *buf, size_t bytes, pm_err *err);

/* ---- the pipeline trainer ---------------------------------------------------- */

/* FAIL errors out, NAN poisons the pass's output, KILL ends the process
 * with SIGKILL (a lost MPI rank), STALL holds the pass until another
 * device's error reaches it (at most the wait timeout and a minute), then
 * 2 s more (a rank that hangs while its peers time out waiting for it, and
 * still computes when their error comes). */
typedef enum {
    PM_FAULT_NONE, PM_FAULT_FAIL, PM_FAULT_NAN, PM_FAULT_KILL, PM_FAULT_STALL, PM_FAULT_COUNT
} pm_fault_kind;

typedef struct {
    double wait_timeout_s;  /* transport wait limit (0: PM_COMM_TIMEOUT) */
    uint64_t fingerprint;   /* MPI: what must agree across ranks besides the plan
                             * (the CLI: the options the ranks act on together); a
                             * rank that differs stops every rank */
    uint64_t data_identity; /* MPI: the training data's (pm_tokens_identity), which
                             * must agree too; a rank that differs is told it reads
                             * other data */
    /* test hooks: fault injection */
    int fault_kind;         /* pm_fault_kind */
    int fault_dev;          /* device of the failing pass */
    int64_t fault_pass;     /* index in that device's pass list */
    int64_t fault_step;     /* step (0-based) the fault fires in */
    size_t arena_cap;       /* > 0: every device's arena capacity in bytes (overflow tests) */
    size_t chunk_floats;    /* > 0: floats per message of the gradient sums and gathers
                             * (default 1 Mi; tests make stages span several) */
    const char *version;    /* MPI: the version this rank states at the handshake
                             * (NULL: pm_version(); tests of ranks that differ) */
} pm_pipe_opts;

/* What one step measured and predicted. Arrays are owned by the pipe, one
 * value per device, valid until the next step. */
typedef struct {
    double loss;             /* mean microbatch loss (double, microbatch order) */
    double grad_norm;        /* global norm before clipping */
    double lr;               /* learning rate used */
    double step_ms;          /* wall time of the whole step (passes + norm + AdamW) */
    double makespan_ms;      /* measured: max over devices of last pass end - first start
                              * (with replicas: of every replica's devices, up to the end of
                              * their stages' gradient sums) */
    double bubble;           /* measured: 1 - busy / (p * makespan) */
    double pred_makespan_ms; /* REPLAY: the simulator fed with this step's own per-stage
                              * mean pass times and latency (checks the executor against
                              * the simulator; not a prediction) */
    double pred_bubble;      /* ... */
    double forecast_makespan_ms; /* FORECAST, made before the step ran: the simulator fed
                                  * with the mean per-stage costs of the earlier warm steps
                                  * (all but the first); NAN for the first two steps */
    double forecast_bubble;  /* ... */
    const size_t *peak;      /* (dp * p) measured peak activation bytes (arena live) */
    const size_t *pred_peak; /* (dp * p) simulator's peak with the model's byte deltas */
    const size_t *arena;     /* (dp * p) arena capacity (bytes of slab) */
    const double *busy_ms;   /* (dp * p) measured time each device spent in passes */
} pm_pipe_info;

/* The pipeline trainer. Opaque: callers hold a pointer from
 * pm_pipe_create and read it through the functions below. */
typedef struct pm_pipe pm_pipe;

/* Runs plan pl (pm_plan.h; the pipe keeps a copy): allocates
 * exactly what the plan says for this process's devices (all of them with
 * threads, this rank's under MPI, pl->transport): parameters (initialised
 * from cfg.seed, like pm_trainer_init: each device its own layers),
 * gradients, AdamW moments, arena, workspace and transport buffers, and
 * starts the device threads. Under MPI every rank passes the same plan
 * (checked: a rank that differs stops every rank). opts may be NULL. On
 * error *out is NULL. */
pm_status pm_pipe_create(pm_pipe **out, const pm_plan *pl, const pm_pipe_opts *opts,
                         pm_err *err);
/* Stops the device threads and frees everything; NULL is a no-op. */
void pm_pipe_destroy(pm_pipe *pp);

/* What a pipe was made of, and its state. The arrays are the pipe's. */
int pm_pipe_devices(const pm_pipe *pp);             /* p (one replica) */
int pm_pipe_replicas(const pm_pipe *pp);            /* dp (1 without data parallelism) */
/* Whether this process holds device 0: under MPI only it has the step's
 * figures, the gathered parameters and the timeline (and so prints and
 * writes); with threads always. */
int pm_pipe_is_root(const pm_pipe *pp);
int pm_pipe_stages(const pm_pipe *pp);              /* S */
const pm_plan *pm_pipe_plan(const pm_pipe *pp);     /* the plan it runs */
/* Every process's n figures (its peak resident memory, say) at the root:
 * all is (dp * p, n), row g from device g's process (with threads every
 * row is this process's). Under MPI a collective; only the root's all is
 * filled. */
pm_status pm_pipe_gather_figures(pm_pipe *pp, const double *mine, int n, double *all,
                                 pm_err *err);
/* (dp * p) bytes each of this process's devices has allocated so far
 * (counted by the library's allocator: its state, arena, workspace,
 * transport buffers and small tables); 0 for devices of other ranks. */
const int64_t *pm_pipe_allocated(const pm_pipe *pp);
const pm_train_cfg *pm_pipe_config(const pm_pipe *pp); /* its copy (the head's parts) */
const pm_sched *pm_pipe_schedule(const pm_pipe *pp); /* its copy (W in microbatch order) */
const int *pm_pipe_stage_first(const pm_pipe *pp);  /* (S+1): stage s = layers first[s].. */
/* The host device g's process runs on (gethostname), as the root learnt it
 * at the handshake; "" where this process does not know it (under MPI,
 * another rank's device on a rank other than the root). */
const char *pm_pipe_host(const pm_pipe *pp, int g);
const pm_cost *pm_pipe_cost(const pm_pipe *pp); /* byte deltas; times of the last step */
/* One optimizer step on inp, tgt (batch, ctx) int32: microbatch j is rows
 * j*B/K .. (j+1)*B/K (as in the single-device trainer's step). Runs the
 * device threads (started by init, parked between steps), or this rank's
 * device.
 * With dp replicas, replica r takes microbatches r*m .. (r+1)*m-1 (m the
 * schedule's), each stage's gradients are summed over the replicas in
 * replica order as soon as the stage's last weight pass is done, and every
 * replica steps AdamW on the same sums (under ZeRO-1 each replica updates
 * only its slice of every stage and the slices are all-gathered after):
 * bitwise the same whatever the
 * schedule or transport; against dp = 1 only the summation order differs.
 * A failing pass stops every device; the error names device, stage,
 * microbatch and pass, and the pipe is dead afterwards (sticky). */
pm_status pm_pipe_step(pm_pipe *pp, const int32_t *inp, const int32_t *tgt, pm_pipe_info *info,
                       pm_err *err);

/* Evaluation through the pipeline: the loss of each of n microbatches
 * (0 <= n <= dp * m; microbatch i is rows i*B/K .. (i+1)*B/K of inp and
 * tgt, as in a step) by forward passes only, on the devices that hold the
 * layers: each device runs its stages' F in wavefront order (microbatch +
 * stage), replica r takes microbatches r*m .. (r+1)*m-1, and nothing is
 * kept for a backward. Each loss is bitwise the one pm_gpt_forward gives
 * on one device. Under MPI every rank calls it with the same tokens and
 * every rank gets the losses. A non-finite loss is returned, not an error.
 * A failing pass kills the pipe as a step's does. */
pm_status pm_pipe_eval(pm_pipe *pp, const int32_t *inp, const int32_t *tgt, int n,
                       float *losses, pm_err *err);

/* Sampling through the pipeline: one sequence of T (1..ctx) tokens
 * forward, and the head's softmax probabilities for the token after the
 * last (vocab floats) into probs: bitwise what pm_gpt_forward and
 * pm_gpt_work_probs give on one device for the same T. Needs a plan with
 * one sequence per microbatch and the head in one part, on device threads
 * (a forward-only plan holds parameters alone). */
pm_status pm_pipe_forward(pm_pipe *pp, const int32_t *tok, int T, float *probs, pm_err *err);

/* Checkpoints by stage (pm_train.h, format version 4): replica 0's devices
 * write their own stages' parameters and AdamW moments (under ZeRO-1 each
 * replica writes its slices of the moments) into one temporary, in
 * parallel, every float once; the root commits it only if every device
 * succeeded, so PATH holds the old checkpoint or the whole new one,
 * whatever fails or is killed. No process holds the whole model. meta is
 * the run's (step, data position, identity, tokenizer) and must describe
 * this pipe (its model, batch, microbatches and step: else PM_ERR_ARG); a
 * forward-only pipe holds no moments and cannot save. Under MPI every rank
 * calls it (the same meta) and every rank returns the same status; PATH
 * must be on a file system every rank sees.
 * A device's failed write (or read, in pm_pipe_load) is named in the error
 * line: "device D, stage S: ..." ("rank R: device D, ..." under MPI). */
pm_status pm_pipe_save(pm_pipe *pp, const char *path, const pm_ckpt_meta *meta, pm_err *err);
/* Loads a checkpoint saved under any plan (any P, placement, schedule,
 * transport, replicas, ZeRO, or one device; versions 1 to 4): every process
 * checks the header (and the root that all read the same file), each
 * device reads only its own ranges, and the slab checksums are checked
 * over every replica's reads, and the run's configuration and data identity must match (named
 * on a mismatch; a forward-only pipe needs only the same model). Sets the pipe's step count; *info (may be NULL) gets the
 * header (step, data position). A failure after the devices read leaves
 * their state unspecified. Collective under MPI. */
pm_status pm_pipe_load(pm_pipe *pp, const char *path, uint64_t data_id, pm_ckpt_info *info,
                       pm_err *err);

pm_status pm_pipe_write_trace(const pm_pipe *pp, FILE *f, pm_err *err);
pm_status pm_pipe_write_svg(const pm_pipe *pp, FILE *f, const char *title, pm_err *err);

#endif
