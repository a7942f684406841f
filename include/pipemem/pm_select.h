/* pm_select.h: model selection with shard parallelism (Hydra's idea,
 * shared/reference/hydra.md), in C with AdamW and an exact memory count.
 *
 * A task is one model configuration trained on its own (pm_train_cfg). Its
 * layers (embedding, blocks, head) are cut into contiguous shards small
 * enough for one device's memory; one optimizer step of a task with S
 * shards is 2S - 1 shard passes: the forwards of shards 0..S-2 (each keeps
 * only its output, the boundary activation), the last shard's forward,
 * loss and backward fused, then the backwards of shards S-2..0, each of
 * which first recomputes its shard's forward from the saved boundary input.
 * Every pass runs the step's K microbatches in order, so gradients
 * accumulate exactly as in `pipemem train`.
 *
 * Device memory (what the executor allocates, and what the partitioner
 * counts): one slab per device holding `slots` state slots (2 with
 * prefetch: the running shard's and the next one's, copied in while the
 * current pass computes; 1 without) and one activation area. A state slot
 * holds a shard's parameters, gradients and AdamW moments (4 floats per
 * parameter); the activation area holds one microbatch's pass through a
 * shard: its input, every layer's saved tensors, three (B, T, C) buffers
 * (the output or incoming gradient and two gradients between layers) and
 * the largest layer scratch. So the slab is slots * state_slot + act_slot
 * bytes, each the largest over every task's shards.
 *
 * Scheduling policies, simulated here and run by the executor:
 *   shard       sharded-LRTF: a free device takes the next ready pass of the
 *               unfinished task with the longest remaining time that is not
 *               running elsewhere (its own task among them: it continues it
 *               when that is the choice); on a tie, the task already on the
 *               device, then the lower task index. The simulator knows each
 *               pass's cost; the executor estimates a task's time left from
 *               its own measured pass, step-end and evaluation times, and
 *               runs every task's first step before it trusts the estimates;
 *   task        a whole task per device: a free device takes the unstarted
 *               task with the longest total time and runs all of it;
 *   sequential  plain model parallelism: tasks one after another, every pass
 *               strictly after the previous one, shard k on device k mod D.
 * Lower bound of any schedule: max(total work / D, the longest task); in a
 * run, the work is everything a task's device does for it (its passes, and
 * after its steps the gradient norm, evaluations and checkpoints). Where
 * devices join a task (shard policy), the task's passes count over min(D,
 * its shards) devices (their compute may overlap whatever the
 * microbatches: a backward recomputes its forward, and does its W, beside
 * the passes next to it). */
#ifndef PM_SELECT_H
#define PM_SELECT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"

/* ---- shards ---------------------------------------------------------------- */

typedef struct {
    int first, last; /* layers first .. last-1 (0 embedding, 1..L blocks, L+1 head) */
    size_t state;    /* bytes of parameters, gradients, m and v */
    size_t act;      /* bytes of the activation area one of its passes needs */
    double flops_f;  /* one microbatch's forward through it, a trainer's */
    double flops_bw; /* one microbatch's B and W (the backward pass adds a forward) */
    double flops_w;  /* of which W after the input gradient is out (the head's is
                        not: its B and W run as one, making its logits once) */
    double flops_eval; /* one microbatch's forward in an evaluation (the head makes
                          its logits) */
} pm_shard;

typedef struct {
    pm_train_cfg cfg; /* the configuration it trains */
    char name[64];    /* "t0", "t1", ... or as the caller names it */
    int nshard;       /* shards after the session's partition */
    pm_shard *shard;  /* (nshard); owned */
    int spilled;      /* 1: its trainer's parameters, gradients and moments live in
                         spill_fd's (unlinked) file (the session's spill
                         directory), and the trainer's slabs are NULL unless
                         brought back */
    int spill_fd;     /* owned while spilled: freeing the task closes it */
} pm_select_task;

typedef struct {
    size_t device_mem; /* the budget asked for */
    int slots;         /* state slots: 2 with prefetch, 1 without */
    size_t state_slot; /* bytes of one state slot: the largest shard state */
    size_t act_slot;   /* bytes of the activation area: the largest shard act */
} pm_select_layout;

/* Bytes each device allocates and touches: slots * state_slot + act_slot,
 * what the largest shards need (at most device_mem, which is a cap: a
 * sweep of small tasks under a large budget does not take the budget). */
size_t pm_select_slab_bytes(const pm_select_layout *L);

/* ---- a sweep's space ------------------------------------------------------
 * The tasks of a sweep (space.c): per key a list of values, the lists'
 * cartesian product being the tasks (a grid), or a range lo..hi (uniform)
 * or log:lo..hi (log-uniform), from which `sample` distinct tasks are drawn
 * at random (a list's value alike, integers as integers; the same seed,
 * the same tasks); or one task per line of a tasks file, as key=value
 * pairs with the keys' names and name=NAME ('#' starts a comment), a key
 * the sweep gives one value being the default of the lines that do not
 * set it (a list, a range or a sample beside the file is refused). A value
 * follows its field's rule (as pm_train_cfg_make's) and a task's configuration
 * is pm_train_cfg_make's from its keys' values, the rest the defaults, so
 * each task trains bitwise as `pipemem train` with those settings. A
 * zeroed pm_sweep sweeps nothing: one task of the defaults. */
/* The keys in the order a grid runs them (the first slowest); each sets
 * the field of pm_train_cfg it names. */
typedef enum {
    PM_SWEEP_LR, PM_SWEEP_LAYERS, PM_SWEEP_DIM, PM_SWEEP_HEADS, PM_SWEEP_CTX, PM_SWEEP_BATCH,
    PM_SWEEP_MICRO, PM_SWEEP_WARMUP, PM_SWEEP_SEED, PM_SWEEP_STEPS, PM_SWEEP_WEIGHT_DECAY,
    PM_SWEEP_KEYS
} pm_sweep_key;
/* As a tasks file names them: "lr", "layers", "dim", "heads", "ctx",
 * "batch", "microbatches", "warmup", "seed", "steps", "weight_decay". */
#define PM_SWEEP_MAX_VALUES 64  /* values in one key's list */
#define PM_SWEEP_MAX_TASKS 4096 /* tasks in a sweep */
typedef enum { PM_SWEEP_LIST, PM_SWEEP_UNIFORM, PM_SWEEP_LOG } pm_sweep_kind;

typedef struct {
    double v[PM_SWEEP_KEYS][PM_SWEEP_MAX_VALUES]; /* each key's listed values */
    int n[PM_SWEEP_KEYS];                 /* how many (0: the key is not listed) */
    int kind[PM_SWEEP_KEYS];              /* pm_sweep_kind: a list, or a range */
    double lo[PM_SWEEP_KEYS], hi[PM_SWEEP_KEYS]; /* a range's ends (both drawable) */
    const char *label[PM_SWEEP_KEYS];     /* how messages name the key (the caller's
                                             word, "--lr"; borrowed); NULL: its name */
    int sample;                           /* > 0: that many tasks drawn, not the grid */
    uint64_t sample_seed;                 /* the draw's seed */
    const char *tasks_file;               /* NULL, or the tasks one a line (borrowed) */
} pm_sweep;

/* Key k's values from text: v1,v2,... (a list), lo..hi or log:lo..hi (a
 * range); label names the key in messages (kept in sw->label[k]). */
pm_status pm_sweep_set(pm_sweep *sw, pm_sweep_key k, const char *text, const char *label,
                       pm_err *err);
/* The first task before t[i] with t[i]'s configuration (every field the
 * same: the two train alike), or -1. */
int pm_select_task_repeats(const pm_select_task *t, int i);

/* ---- policies and the forecast -------------------------------------------- */

typedef enum {
    PM_POLICY_SHARD,
    PM_POLICY_TASK,
    PM_POLICY_SEQUENTIAL,
    PM_POLICY_COUNT
} pm_select_policy;
extern const char *const pm_select_policy_names[PM_POLICY_COUNT]; /* "shard", "task", "sequential" */

/* What moving shard state costs on this machine, measured before running
 * (forecast.c): the FLOP rate one device thread reaches (F, B and W of one
 * microbatch through one block of the widest task), the bytes per second a
 * shard's state comes into a slot from the store and goes back (RAM: a
 * memcpy; with spill_dir: pread and pwrite of a file there), and AdamW's
 * seconds per parameter, each the best of 3 on up to 64 MiB. */
typedef struct {
    double flops;     /* FLOP/s of one device thread */
    double read_bps;  /* bytes/s from the store into a slot */
    double write_bps; /* bytes/s from a slot back to the store */
    double adamw_s;   /* seconds per parameter of AdamW's update */
    int spilled;      /* the store is spill_dir's files (evaluations move the state) */
} pm_select_rates;
/* The forecast of a sweep on its devices at the rates measured here
 * (measured once, forecast as often as wanted): every task's steps costed
 * pass by pass (its cfg.opt.steps, evaluations every eval_every steps and
 * at its end on eval_batches microbatches, each pass's FLOPs at the rate
 * and its state's moves), and each policy simulated over them (the rules
 * above; the shard policy joining unless no_join). What the dry run prints
 * and bench_select sets beside its runs. */
typedef struct {
    pm_select_rates rates;            /* the rates it was made at */
    double makespan[PM_POLICY_COUNT]; /* each policy's simulated makespan */
    double lower_bound;               /* the shard policy's lower bound (above), which
                                         holds for every policy */
    double *compute, *move;           /* (n) each task's seconds of compute and of moving
                                         its state, all its steps (exact); owned */
    double scale;                     /* 1: every step simulated; else the run's work over
                                         the simulated work, which the makespans and the
                                         bound were scaled by (extrapolated) */
    int64_t steps_simulated;          /* the tasks' steps simulated, all tasks */
    int64_t passes_simulated;         /* and their passes */
} pm_select_forecast;
void pm_select_forecast_free(pm_select_forecast *f);

/* ---- running the tasks ---------------------------------------------------- */

typedef enum {
    PM_SELECT_RUNNING, /* not finished yet */
    PM_SELECT_DONE,    /* ran every step */
    PM_SELECT_FAILED,  /* stopped by a non-finite loss or gradient norm (why says) */
    PM_SELECT_STOPPED, /* stopped by successive halving */
} pm_select_state;

typedef struct {
    int state;         /* pm_select_state */
    int64_t steps;     /* optimizer steps completed */
    double final_loss; /* mean microbatch loss of the last step */
    double val_loss;   /* the last evaluation (NAN if none) */
    double busy_s;     /* seconds its passes ran */
    double work_s;     /* busy_s and the work after its steps (PM_PART_STEP, _EVAL):
                          the device time the task needs */
    double wall_s;     /* from its first pass's start to its last pass's end (this run) */
    char why[160];     /* why it failed or stopped ("" when done) */
    int64_t val_step;  /* the step val_loss was taken after (-1: none) */
    int rank;          /* across ranks (pm_select_ranks.h): the rank that ran it (0 on
                          one process, and for a task no rank ran) */
} pm_select_result;

typedef struct {
    int task;          /* index */
    int64_t step;      /* steps completed */
    double loss;       /* the step's mean loss */
    double val_loss;   /* kind EVAL */
    double elapsed;    /* seconds since the run started */
    const double *busy; /* (devices) each device's seconds of passes so far */
    const char *why;   /* kinds FAILED and STOPPED: the reason */
    enum {
        PM_SELECT_EV_STEP,
        PM_SELECT_EV_EVAL,
        PM_SELECT_EV_DONE,
        PM_SELECT_EV_FAILED,
        PM_SELECT_EV_STOPPED
    } kind;
} pm_select_event;

/* When a device prefetches (pm_select_opts.prefetch). A copy thread that
 * has no core of its own takes its copy's time from a device instead of
 * overlapping it, and its hand-offs cost more: worth it only where it
 * shortens the run (bench/bench_select measures all three). */
typedef enum {
    PM_PREFETCH_OFF,  /* never: a pass loads what it does not find resident */
    PM_PREFETCH_ON,   /* at every pass */
    PM_PREFETCH_AUTO, /* when the copy thread has a core no working device uses, or the
                         device runs the task that bounds the makespan (its time left is
                         the most, and at least every task's over D: the copy's cost then
                         falls on devices with time to spare) */
} pm_select_prefetch;

typedef struct {
    int devices;              /* D device threads */
    pm_select_policy policy;
    int prefetch;             /* pm_select_prefetch: when a device's copy thread loads
                                 the next pass's state into its other slot while the
                                 device computes (2 slots) */
    int no_join;              /* 1: a device with no ready pass waits. 0 (the default,
                                 shard policy): it joins a running task instead, taking
                                 the step's next pass while the earlier ones still run and
                                 waiting per microbatch for its input, so one task's
                                 passes run as a pipeline over several devices (bitwise
                                 the same: each pass computes what it computes alone) */
    int eval_every;           /* evaluate every N steps of a task (0: only at its end) */
    int halving;              /* successive halving: at each evaluation round (every
                                 eval_every steps) the best ceil(k / halving) of the k
                                 tasks still running, by validation loss, go on; 0 off */
    int asha;                 /* asynchronous successive halving (asha.c): a task goes on
                                 to the next rung as soon as it is in the top 1/asha of
                                 those that reported at its rung; 0 off (not with halving) */
    const int64_t *rungs;     /* asha: (nrung) step budgets, ascending, the last every
                                 task's opt.steps (the session's: pm_select_setup) */
    int nrung;
    int eval_batches;         /* microbatches per evaluation */
    const pm_tokens *val;     /* validation tokens */
    const char *spill_dir;    /* NULL: task state in RAM; else in an (unlinked) file in this
                                 directory, read and written a shard at a time */
    const char *save_dir;     /* NULL, or a directory: each task's checkpoint DIR/NAME.ckpt
                                 at every evaluation and at its end (NAME.stopped marks
                                 a task halving stopped), what --resume reads */
    int64_t stop_after;       /* > 0: every task stops after this step, as if killed
                                 (tests and interrupted sweeps) */
    const unsigned char *skip; /* NULL, or (n) 1 for tasks halving stopped earlier */
    const double *prior_loss;  /* NULL, or (n) each task's last step's loss before this run
                                  (a resumed task's, from its record in the save
                                  directory; NAN unknown) */
    const double *prior_val;   /* NULL, or (n) the validation loss of each task's state as
                                  it starts (NAN unknown): what a task that runs no step
                                  (done, or stopped before the resume) reports */
    const double *est_step_s; /* NULL, or (n) the seconds one step of each task takes
                                 (a profile from an earlier run, or a constructed case):
                                 Sharded-LRTF ranks tasks by these instead of the times
                                 it measures, so its order depends on nothing measured */
    const _Atomic int *interrupt; /* NULL, or a flag (a SIGINT handler's): once set, no
                                      pass starts; the running ones finish and every
                                      unfinished task stops where its last step ended */
    /* Called for every event, one at a time (under the scheduler's lock);
     * may be NULL. */
    void (*report)(void *ctx, const pm_select_event *ev);
    void *report_ctx;
    /* NULL: this process runs every task. Else the sweep is spread over the
     * ranks of an MPI world (pm_select_ranks.h): whole tasks handed to this
     * process as its devices free up, and rank 0 reports every rank's
     * events, decides ASHA for all and gets every task's result. */
    struct pm_select_ranks *ranks;
} pm_select_opts;

/* Where a device's time goes: every moment of a run on a device is one of
 * these, so they add up to the makespan. A step's pass is LOAD, ADAMW,
 * COMPUTE and STORE in that order, an evaluation's pass EVAL; STEP follows a
 * step's last pass and EVAL (the checkpoint) an evaluation's last, on the
 * device that ran it; WAIT then; IDLE is the gaps between. */
typedef enum {
    PM_PART_COMPUTE, /* a step's pass's K microbatches */
    PM_PART_LOAD,    /* a pass copying its shard's state in (it was not resident or
                        prefetched; at a step's first pass, the step's batch too) */
    PM_PART_ADAMW,   /* a pass applying its shard's deferred AdamW update and zeroing its
                        gradients (a shard's first pass of a step) */
    PM_PART_STORE,   /* a pass writing what it changed back to the task's store */
    PM_PART_STEP,    /* after a step's last pass: the loss and the global gradient norm */
    PM_PART_EVAL,    /* at intervals and at the end: an evaluation's passes (forward
                        through each shard on the validation batches, taken and joined
                        as a step's passes are; all of such a pass but its waits for
                        other devices), then the checkpoint */
    PM_PART_WAIT,    /* waiting for the prefetch copy of the next pass's shard, and a
                        joined pass waiting for its input microbatches or for the
                        step's other passes (pm_select_pass.flow) */
    PM_PART_IDLE,    /* no pass ready for it (or taking the scheduler's lock) */
    PM_PART_COUNT
} pm_select_part;
extern const char *const pm_select_part_names[PM_PART_COUNT]; /* "compute", "load", ... */

/* One pass as it ran, with what its device did up to its next pass. */
typedef struct {
    int dev, task, shard, kind; /* kind: 0 forward, 1 last shard fused, 2 backward,
                                 * 3 an evaluation's forward */
    double start, end;          /* seconds from the run's start */
    double loaded, updated, computed; /* within it: LOAD until loaded, ADAMW until updated,
                                 * COMPUTE until computed, STORE until end */
    double step_end, eval_end;  /* after it: STEP until step_end, EVAL until eval_end
                                 * (both end when the pass ends no step) */
    double wait0, wait1;        /* then the device waited for its prefetch copy from
                                 * wait0 to wait1 (equal: it did not wait) */
    double copy0, copy1;        /* the copy thread's prefetch copy started beside this
                                 * pass (equal: none) */
    double flow;                /* seconds within updated .. computed the pass waited for
                                 * other devices' passes of its task (joining): WAIT, not
                                 * COMPUTE */
    int joined;                 /* 1: the device joined the task (another of its passes
                                 * was running when it took this one) */
} pm_select_pass;

typedef struct {
    int devices;
    double makespan_s;  /* wall time of the run */
    double lower_bound_s; /* max(total work / D, the longest task's work), from the work
                             measured: every task's passes, step ends and evaluations
                             (pm_select_result.work_s); when devices join a task
                             (shard policy, D > 1, no_join 0), its passes counted over
                             min(D, its shards) devices */
    size_t *peak;       /* (devices) highest slab byte used; owned */
    double *busy;       /* (devices) seconds of passes run, less a joined pass's waits
                           for other devices; owned */
    double *wait;       /* (devices) seconds spent waiting for a prefetch copy (part's
                           PM_PART_WAIT adds the joined passes' waits); owned */
    double *part;       /* (devices, PM_PART_COUNT) seconds of each part (they add up
                           to makespan_s); owned */
    pm_select_pass *log; /* (nlog) every pass run, in the order they ended; owned */
    int64_t nlog;
    int64_t joined;     /* passes a device ran by joining a running task */
    double moved_bytes; /* shard state copied into the devices' slots (prefetch copies
                           too) and written back to the tasks' store */
} pm_select_stats;

/* The run as a timeline: SVG (one row per device, each pass a box coloured
 * by task, darker for backwards, with a legend and a title giving the
 * makespan, the lower bound and each device's busy fraction) or a Chrome
 * trace (one track per device; opens in Perfetto). tasks names them. Time
 * a device spent waiting for a prefetch copy is a grey box of its own. */
pm_status pm_select_write_svg(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                              int n, double lower_bound);
pm_status pm_select_write_trace(FILE *f, const pm_select_stats *st, const pm_select_task *tasks,
                                int n);

/* How a session ranks its tasks (pm_select_session.order): those that ran
 * every step by validation loss, then those stopped early (halving, ASHA,
 * an interruption) by the step of their last validation loss, later first,
 * then by that loss, then failed tasks and those without a validation loss
 * (ties: index order). This line says so, for above a table. */
extern const char pm_select_rank_rule[];

/* ---- a sweep's session ------------------------------------------------------
 * A sweep as one object (session.c): its tasks (the sweep's space), their
 * layout on the devices, each task's trainer (resumed from the save
 * directory, spilled), the run and the table of results. Which task runs
 * where, running a task's steps and recording and resuming
 * its results (the save directory's files, the table) are kept apart, so
 * the tasks could be spread over processes with one table.
 *   pm_select_session_init       the tasks, their longest steps, the
 *                                evaluation interval, ASHA's rungs
 *   pm_select_session_partition  the tasks cut into shards, the layout
 *   pm_select_session_fits       the RAM it takes against what there is
 *   pm_select_session_forecast   the dry run's forecast
 *   pm_select_session_start      a trainer per task, resumed, spilled
 *   pm_select_session_run        the run, then the table ranked
 *   pm_select_session_best/save  the best task and its checkpoint
 * Free with pm_select_session_free after any of them, failed or not. */
typedef struct {
    pm_select_opts run;  /* the run's options (above); eval_every -1: every
                            steps / 5 of the longest task, but no more often than
                            every 10 eval_batches / (3 K) steps (K the fewest
                            microbatches of a task: evaluation at most a tenth of the
                            training), 0 (only at the end) where that is the steps;
                            under halving every steps / 5;
                            the session sets rungs, nrung, skip, prior_loss, prior_val
                            and val */
    size_t device_mem;   /* one device's budget (pm_select_session_partition) */
    int slots;           /* state slots a device holds; 0: 2, the running shard's and
                            the one prefetched */
    int asha_min;        /* with run.asha: the lowest rung; the rungs are steps /
                            asha^k for k = 0, 1, ... while at least asha_min (below 1:
                            steps / asha^2, at least 1), the longest task's steps */
} pm_select_setup;

typedef struct {
    pm_select_setup set;      /* the caller's, completed (eval_every, nrung) */
    pm_select_task *tasks;    /* (n) owned */
    int n;
    int steps;                /* the longest task's steps */
    int64_t rungs[64];        /* ASHA's, in steps */
    pm_select_layout layout;  /* after partition */
    const pm_tokens *val;     /* the validation tokens (borrowed, from start) */
    pm_trainer *hosts;        /* (n) each task's trainer: its store; owned */
    int nhost;                /* hosts initialised */
    unsigned char *stopped;   /* (n) stopped early before this run (the save directory
                                 marks it) */
    double *prior;            /* (2, n) each task's last loss and validation loss as it
                                 starts (a resumed task's; NAN unknown) */
    int resumed;              /* tasks continued from the save directory's checkpoints */
    pm_select_result *res;    /* (n) after run */
    int *order;               /* (n) the tasks ranked (pm_select_rank_rule), after run */
    pm_select_stats stats;    /* the devices', after run */
} pm_select_session;

/* The sweep's tasks (t0, t1, ...; a tasks file's may have names of their
 * own: the tasks file's, a sample's or the grid's, a range without a
 * sample refused), the longest's steps and what
 * follows from them. On error the tasks made so far stay in s (a caller
 * may still warn of repeated ones). */
pm_status pm_select_session_init(pm_select_session *s, const pm_sweep *sw,
                                 const pm_select_setup *set, pm_err *err);
/* Every task's vocabulary set to vocab (the data's; 0: as they are), then
 * every task cut into the fewest shards such that slots * state_slot +
 * act_slot <= set.device_mem, where the two slot sizes are the largest
 * over every task (so any device can run any shard). Among the state-slot
 * sizes that fit, the one giving the fewest passes in all wins (ties: the
 * smaller slab). A task with a layer that cannot fit whatever the others
 * do is refused, naming the task, the layer and the bytes it needs. */
pm_status pm_select_session_partition(pm_select_session *s, int32_t vocab, pm_err *err);
/* What the sweep takes in RAM beyond the program, the devices' slabs and
 * the tasks' store (each task's trainer, pm_train_mem_bytes; spilled,
 * without its parameters, gradients and moments, but for one task's per
 * device, brought back around an evaluation or a checkpoint), against
 * `available` bytes (pm_mem_available; 0: unknown, passes): PM_ERR_MEMLIMIT,
 * one line naming both numbers, when it is over. */
pm_status pm_select_session_fits(const pm_select_session *s, double available, pm_err *err);
/* The rates measured on this machine (pm_select_rates), then the
 * forecast at them (pm_select_forecast). */
pm_status pm_select_session_forecast(const pm_select_session *s, pm_select_forecast *f,
                                     pm_err *err);
/* A trainer per task on the train tokens (borrowed, as val, for the
 * session's life), each given the tokenizer model (tok_len 0: bytes);
 * with a save directory (made if missing) each resumes from its record
 * there (its checkpoint, which must continue the task's learning-rate
 * schedule; its losses; a task stopped early stays stopped); with a spill
 * directory each is spilled at once. */
pm_status pm_select_session_start(pm_select_session *s, const pm_tokens *train,
                                  const pm_tokens *val, const void *tok, size_t tok_len,
                                  pm_err *err);
/* Runs every task on set.run.devices device threads, each allocating one
 * slab of pm_select_slab_bytes(layout) at start, until its trainer's step
 * reaches its cfg.opt.steps unless halving, ASHA or an interruption stops
 * it first (a task whose loss or norm is not finite fails alone), and
 * ranks the results (order). Losses and parameters end bitwise equal to
 * the task trained alone by `pipemem train`. */
pm_status pm_select_session_run(pm_select_session *s, pm_err *err);
/* The best-ranked task that did not fail and has a validation loss, or -1. */
int pm_select_session_best(const pm_select_session *s);
/* Task i's checkpoint at path, as `pipemem train --save` writes it. Across
 * ranks (on rank 0, after the run), a task another rank ran: its record's
 * checkpoint under save_dir, copied (none without save_dir: an error). */
pm_status pm_select_session_save(pm_select_session *s, int i, const char *path, pm_err *err);
void pm_select_session_free(pm_select_session *s);

#endif
