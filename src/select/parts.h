/* parts.h: what a sweep's session (session.c) puts together, private to
 * the library (and to its tests, benchmarks and fuzz targets): the sweep's
 * space as tasks, the tasks cut into shards and the RAM they take, the
 * policies' simulator and the forecast, ASHA's rungs and promotions, each
 * task's record in the save directory, the spill store and the run.
 * pm_select.h has the session a user drives. */
#ifndef PM_SELECT_PARTS_H
#define PM_SELECT_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_select.h"

/* ---- the sweep's space (space.c) ----------------------------------------- */

/* As a tasks file names them: "lr", "layers", "dim", "heads", "ctx",
 * "batch", "microbatches", "warmup", "seed", "steps", "weight_decay". */
extern const char *const pm_sweep_key_names[PM_SWEEP_KEYS];
/* 1 if any key is listed or ranged. */
int pm_sweep_swept(const pm_sweep *sw);
/* The sweep's tasks t0, t1, ... (a tasks file's may have names of their
 * own): the tasks file's, a sample's or the grid's (a range without
 * sample is refused). *tasks is pm_malloc'd (free each task, then the
 * array); on error NULL, *n 0, and err says which key, line or task. */
pm_status pm_sweep_tasks(const pm_sweep *sw, pm_select_task **tasks, int *n, pm_err *err);

/* ---- shards and RAM (partition.c, ram.c) ---------------------------------- */

/* Bytes of one layer: its state and its activation area (as above) for one
 * microbatch of cfg (B / K sequences of ctx tokens). */
pm_status pm_select_layer_bytes(const pm_train_cfg *cfg, int layer, size_t *state, size_t *act,
                                pm_err *err);

/* Cuts every task into the fewest shards such that slots * state_slot +
 * act_slot <= device_mem, where the two slot sizes are the largest over
 * every task (so any device can run any shard). Among the state-slot sizes
 * that fit, the one giving the fewest passes in all wins (ties: the
 * smaller slab). A task with a layer that cannot fit whatever the others do
 * is refused, naming the task, the layer and the bytes it needs. Frees and
 * replaces each task's shards. */
pm_status pm_select_partition(pm_select_task *tasks, int n, size_t device_mem, int slots,
                              pm_select_layout *out, pm_err *err);

/* What a sweep takes in RAM beyond the program: `devices` slabs of the
 * layout and the tasks' store (each task's trainer, pm_train_mem_bytes;
 * spilled, without its parameters, gradients and moments, but for one
 * task's per device, brought back around an evaluation or a checkpoint). */
typedef struct {
    int devices;
    double slab;  /* bytes of one device's slab (pm_select_slab_bytes) */
    double store; /* bytes of the tasks' state and trainers in RAM */
    int spilled;  /* the state spilled (the message then suggests no spill) */
} pm_select_ram;
pm_status pm_select_ram_need(const pm_select_task *t, int n, const pm_select_layout *lay,
                             int devices, int spilled, pm_select_ram *out, pm_err *err);
/* PM_ERR_MEMLIMIT, one line naming both numbers, if devices * slab + store
 * exceeds `available` bytes (pm_mem_available; 0: unknown, passes). */
pm_status pm_select_ram_check(const pm_select_ram *need, double available, pm_err *err);

/* Frees the shards and closes the spill file (safe twice). */
void pm_select_task_free(pm_select_task *t);

/* ---- the policies' simulator (simulate.c) and the forecast (forecast.c) ---- */

/* The passes each task runs, in its own order: task t has npass[t] passes,
 * pass k on shard shard[t][k] (0-based, task-local) lasting cost[t][k].
 * For joining (below) the rounds and microbatches too: per_step[t] passes
 * make a step of task t (2S - 1), each runs micro[t] microbatches; of
 * cost[t][k], before[t][k] comes before its microbatches (the state in,
 * AdamW) and after[t][k] after them (the store; after a step's last pass,
 * the step end and evaluation), the rest is the microbatches' compute, a
 * K-th each (before, after NULL: 0; per_step or micro NULL: no joining).
 * Rounds of other lengths (an evaluation's passes between steps, as the
 * run has them): pos[t][k], pass k's place in its round (0 its first; a
 * round ends where the next begins), and mbs[t][k] its microbatches (NULL:
 * k % per_step and micro). Of each microbatch's compute, lead[t][k] (a
 * fraction) runs before it waits for the round's previous pass (a
 * backward's recomputed forward) and trail[t][k] after it has put its
 * output out (W), so those parts overlap the passes beside it (NULL: 0). */
typedef struct {
    int ntask;
    const int64_t *npass;
    const int *const *shard;
    const double *const *cost;
    const int *per_step;
    const int *micro;
    const double *const *before;
    const double *const *after;
    const int *const *pos;
    const int *const *mbs;
    const double *const *lead;
    const double *const *trail;
} pm_select_work;

typedef struct {
    double makespan;    /* last pass end */
    double lower_bound; /* max(total / D, longest task's bound): a task's cost, or
                           joining, its cost over min(D, its shards), and without leads
                           and trails at least its compute over min(D, shards, the most
                           microbatches of a pass) (pm_select_stats.lower_bound_s) */
    double total;       /* sum of every cost */
    double *busy;       /* (D) busy time of each device; owned */
    int *dev;           /* (sum npass) device of each pass, tasks in order; owned */
    double *start;      /* (sum npass) start of each pass; owned */
    double *end;        /* (sum npass) end of each pass (joined, its waits included);
                           owned */
} pm_select_sim;

/* Simulates policy pol on D devices (the rules above). Joining (shard
 * policy, D > 1, no_join 0, w->per_step and w->micro given), by the run's
 * rules (run.c): a device that finds no ready task takes the next pass of
 * the step of a running task (the one with the most cost left) unless a
 * pass on its shard still runs; pass k's microbatch j starts after pass
 * k - 1's microbatch j; a step's last pass ends its microbatches only after
 * every other pass of the step ended, and the next step starts after it.
 * Prefetch is not modelled (a device never keeps a pass for itself). */
pm_status pm_select_simulate(const pm_select_work *w, int D, pm_select_policy pol, int no_join,
                             pm_select_sim *out, pm_err *err);
void pm_select_sim_free(pm_select_sim *s);

/* The FLOP rate one device thread reaches on these tasks, measured before
 * running: F, B and W of one microbatch through one block of the widest
 * task, on the calling thread with one compute thread (pm_gpt_time_layer).
 * The dry run's forecast divides the passes' FLOPs by it. */
pm_status pm_select_rate(const pm_select_task *t, int n, double *rate, pm_err *err);

/* The rates (pm_select_rates, forecast.c) measured on these tasks and
 * layout; with spill_dir the store's reads and writes of files there. */
pm_status pm_select_measure(const pm_select_task *t, int n, const pm_select_layout *lay,
                            const char *spill_dir, pm_select_rates *out, pm_err *err);

/* A task's passes as the run makes them (run.c, pass.c), costed at rates r
 * (pm_select_task_costs): each step's 2S - 1 (F of shards 0..S-2, the
 * fused last shard, B of shards S-2..0), and after a step that evaluates
 * (every eval_every steps, 0 none, and the last) an evaluation's round:
 * eval_batches microbatches in chunks of at most 8, each chunk a forward
 * through every shard. compute[i] is pass i's FLOPs at r->flops; move[i]
 * what its shard's state costs: coming in (every pass of a task with
 * several shards; none with one, whose shard stays on its device), and for
 * the first pass on each shard after a step ended (a step's forward, or
 * its evaluation's first chunk) AdamW's update and all of the state back,
 * for any other pass that computes gradients (the fused pass, a backward)
 * the gradients back, a quarter; before[i] and after[i] split the moves
 * around its microbatches (the state in and AdamW; the write-back). For
 * joining, as pm_select_work takes them: each pass's place in its round
 * (pos), microbatches (mbs), and the fractions of a microbatch's compute
 * that run before it waits for the previous pass (lead: a backward's
 * recomputed forward) and after it puts its output out (trail: W). */
typedef struct {
    int64_t n;                          /* passes */
    int *shard, *pos, *mbs;             /* (n) each; shard owns pos's memory */
    double *compute, *move, *before, *after, *lead, *trail; /* (n) each; compute owns them */
} pm_select_costs;
pm_status pm_select_task_costs(const pm_select_task *t, int64_t steps, int eval_every,
                               int eval_batches, const pm_select_rates *r, pm_select_costs *out,
                               pm_err *err);
void pm_select_costs_free(pm_select_costs *c);

/* Past this many passes in all, a forecast simulates the same fraction of
 * every task's steps (at least one each; evaluations spread evenly over
 * them) and scales its times to the whole run (pm_select_forecast.scale):
 * 64 tasks of 1000000 steps forecast in milliseconds and little memory. */
#define PM_SELECT_FORECAST_PASSES 20000.0
pm_status pm_select_forecast_make(pm_select_forecast *f, const pm_select_task *t, int n,
                                  int devices, const pm_select_rates *r, int eval_every,
                                  int eval_batches, int no_join, pm_err *err);

/* ---- ASHA (asha.c) and the save directory's records (record.c) ------------- */

/* ASHA's rungs: steps / eta^k for k = 0, 1, ... while at least min (min
 * < 1: steps / eta^2, at least 1), ascending into rungs (cap of them);
 * returns how many (the last is steps; 0 if eta < 2). */
int pm_select_asha_rungs(int64_t steps, int eta, int64_t min, int64_t *rungs, int cap);

/* ASHA's promotions at one rung, a pure function: n tasks have reported
 * there, loss[j] the validation loss of the j-th (NAN ranks last and never
 * goes on), state[j] whether it waits there, went on already, or is out
 * (stopped or failed: it ranks, but stays). Of the best floor(n / eta)
 * (ceil(n / eta) once the rung is closed: no task can still report there;
 * ties to the lower j), those waiting go on (promote[j] = 1) while fewer
 * than ceil(entrants / eta) have gone on in all, entrants the tasks that
 * could ever reach the rung. order is n ints of scratch. Returns how many
 * it promoted; -1 (none) when eta < 1 or n < 0. */
typedef enum { PM_ASHA_WAITING, PM_ASHA_PROMOTED, PM_ASHA_OUT } pm_select_asha_state;
int pm_select_asha_promote(int eta, int entrants, int closed, int n, const double *loss,
                           const unsigned char *state, unsigned char *promote, int *order);

/* What a save directory holds beside each checkpoint DIR/NAME.ckpt:
 * DIR/NAME.loss, its record, written after it: one line
 *   step K loss X val_loss Y ckpt C sum H
 * the losses at step K (%.17g: read back, the same doubles; val_loss nan
 * when the save followed no evaluation), C the checkpoint's identity
 * (pm_select_record_ckpt, hex) and H the FNV-1a-64 (pm_fnv1a64) of every
 * byte before " sum " (hex), so an edited or damaged record is refused
 * rather than ranked. */
#define PM_SELECT_RECORD_MAX 256 /* bytes of a record, at most */
typedef struct {
    int64_t step;
    double loss, val;
    uint64_t ckpt;
} pm_select_record;
/* A record's text (len bytes): PM_ERR_FORMAT unless it is exactly the line
 * its fields print, its sum included. */
pm_status pm_select_record_parse(const char *text, size_t len, pm_select_record *r, pm_err *err);
/* A checkpoint's identity as its record names it: FNV-1a-64 of its slab
 * checksums and its step (pm_ckpt_info, as pm_ckpt_info_read gives it). */
uint64_t pm_select_record_ckpt(const pm_ckpt_info *in);
/* Task name's losses for its checkpoint ck from DIR/NAME.loss: NAN both
 * when there is no record or it is of an earlier step (a save killed
 * between the checkpoint and its record); PM_ERR_FORMAT, naming the file,
 * when it is edited or damaged or names another checkpoint at ck's step. */
pm_status pm_select_saved_losses(const char *dir, const char *name, const pm_ckpt_info *ck,
                                 double *loss, double *val, pm_err *err);

/* ---- the spill store (store.c) and the run (run.c) ------------------------ */

/* The spill store: moves the parameters, gradients and AdamW moments of
 * task's trainer host into an unlinked file DIR/NAME.state (NAME the
 * task's) and frees them from RAM; the task records the file
 * (task->spilled), the trainer knows nothing of it. pm_select_run then
 * reads and writes them a shard at a time. Spill each host as soon as it
 * is made and a sweep holds one task's state in RAM at a time, not all. A
 * spilled task stays spilled after the run: pm_select_host_load reads its
 * host's slabs back (for a checkpoint, say), pm_select_host_unload writes
 * them out and frees them again; pm_select_task_free closes the file. */
pm_status pm_select_spill(pm_select_task *task, pm_trainer *host, const char *dir, pm_err *err);
pm_status pm_select_host_load(const pm_select_task *task, pm_trainer *host, pm_err *err);
pm_status pm_select_host_unload(const pm_select_task *task, pm_trainer *host, pm_err *err);

/* Trains every task on o->devices device threads under the layout from
 * pm_select_partition: hosts[i] is task i's store (a pm_trainer
 * initialised on its configuration and the train tokens, or loaded from a
 * checkpoint; with o->spill_dir spilled there, if not already: tasks[i]
 * then records the spill), and runs
 * until hosts[i].step reaches its cfg.opt.steps. Each
 * device allocates one slab of pm_select_slab_bytes(layout) at start.
 * Losses and parameters end bitwise equal to pm_trainer_step on each task
 * alone; a task whose loss or norm is not finite fails alone. res (n) gets
 * each task's outcome, stats the devices'. */
pm_status pm_select_run(pm_select_task *tasks, pm_trainer *hosts, int n,
                        const pm_select_layout *layout, const pm_select_opts *o,
                        pm_select_result *res, pm_select_stats *stats, pm_err *err);

void pm_select_stats_free(pm_select_stats *s);

#endif
