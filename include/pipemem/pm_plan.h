/* pm_plan.h: planning a pipeline run before anything large is allocated.
 * From a model, a device count, data-parallel replicas, a schedule request
 * and a per-device memory budget, the planner decides where the layers go
 * (placement), which schedule runs (given, generated, or searched under a
 * memory limit), how many parts the head is cut into, and what every device
 * will hold, by kind, in bytes: parameters, gradients, AdamW moments, the
 * activation arena, the workspace its passes need and its transport
 * buffers. The runtime (pm_runtime.h) runs a plan and allocates exactly
 * what it says; `pipemem train --pp` prints it and refuses a plan over
 * --device-mem before allocating anything. Implemented in src/plan/:
 * placement.c (the cut), arena.c (the activation arena and its offline
 * offsets), devmem.c (the allocation sequence of each pass, shared by the
 * planner's dry replay and the executor), plan.c (the planner), query.c
 * (what a plan answers).
 *
 * Reproducible: given the same inputs (the layer costs included) the plan
 * is the same on every machine; only measured layer costs
 * (pm_place_measure) depend on the machine. */
#ifndef PM_PLAN_H
#define PM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_gpt.h"
#include "pipemem/pm_sched.h"
#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"

/* ---- placement --------------------------------------------------------------
 * Rule: the L+2 layers (embedding, L blocks, head) are cut into S contiguous
 * non-empty ranges, in order, minimising the busiest device's time for one
 * microbatch (the sum over the stages the schedule puts on it: under V,
 * device 0 holds the embedding's stage and the head's), then the largest
 * device memory (each stage's parameters, gradients and AdamW moments, plus
 * its saved activations times the most microbatches the schedule holds on
 * it at once), then the sum of the devices' squared times. The memory rule
 * (PM_PLACE_MEMORY) minimises the largest device memory first, then the
 * busiest time, then the squared times. Under a cap (bytes, as counted
 * here) only cuts whose every device fits compete; when none does, the
 * cut is PM_ERR_MEMLIMIT naming the least any cut needs. A layer's time is
 * its kind's F + B + W from lc: measured (pm_place_measure) or, with lc
 * NULL, FLOPs. Exact (branch and bound over the cut points, pruned by the
 * best cut's first figure and by the cap) up to millions of partial cuts,
 * far beyond any real pipeline; then the best found.
 * first[s] .. first[s+1]-1 are stage s's layers (first has S+1 entries).
 * Fewer layers than stages is PM_ERR_ARG with the fix. */
typedef enum {
    PM_PLACE_TIME,   /* the busiest time first, then the largest memory */
    PM_PLACE_MEMORY, /* the largest memory first, then the busiest time */
    PM_PLACE_RULES
} pm_place_rule;
extern const char *const pm_place_rule_names[PM_PLACE_RULES]; /* "time", "memory" */

typedef struct {
    pm_place_rule rule; /* what ranks first */
    double cap;         /* bytes each device may hold as the rule counts them; 0: no cap */
} pm_place_opts;

typedef struct {
    double f, b, w;
} pm_pass_times;
typedef struct {
    pm_pass_times k[PM_LAYER_KIND_COUNT]; /* one microbatch's passes of each layer kind */
    const char *unit;                     /* "s" measured, "flop" counted */
} pm_layer_costs;

/* FLOPs of each kind's passes (pm_gpt_layer_sizes). */
pm_status pm_place_flops(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                         pm_err *err);
/* Measures each kind's F, B and W on one microbatch of B x T on the calling
 * thread with one compute thread, as a device thread runs (best of two).
 * Takes about two microbatches' worth of one embedding, block and head. */
pm_status pm_place_measure(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                           pm_err *err);
/* The same on `threads` threads at once (the caller and threads - 1 more),
 * each pass's mean over them: what each of a pipeline's device threads
 * sees while the others compute on the same cores. */
pm_status pm_place_measure_threads(const pm_gpt_config *cfg, int B, int T, int threads,
                                   pm_layer_costs *lc, pm_err *err);
/* The rule (o NULL: time first, no cap) on cfg's layers; errors as
 * pm_place_cut. */
pm_status pm_place_layers(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const pm_place_opts *o, int *first,
                          pm_err *err);
/* Each device's share under a placement: time[d] (lc's unit, NULL: FLOPs)
 * and mem[d] (bytes), as the rule above counts them; arrays of s->p. */
pm_status pm_place_shares(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const int *first, double *time,
                          double *mem, pm_err *err);

/* One layer as the cut and the simulator see it, whatever the model:
 * pipemem's GPT (pm_place_table) or a GPT sized by formulas for GPUs
 * (pm_cluster.h). Times are in one unit across a table (seconds or FLOPs). */
typedef struct {
    double weight;     /* what the cut balances: its F + B + W time (or FLOPs) */
    double tf, tb, tw; /* time of its F, B and W on one microbatch */
    double act;        /* activation bytes its F keeps for one microbatch */
    double act_w;      /* of them, the bytes its W still needs after B */
    double in;         /* bytes of its input: what a recomputed stage starting here
                        * keeps per microbatch (0 for the embedding: tokens) */
    double params;     /* parameters */
    double state;      /* bytes of its parameters, gradients and optimizer state */
} pm_place_layer;

/* pipemem's GPT as a table of pm_gpt_num_layers(cfg) rows: times from lc
 * (NULL: FLOPs), a head part charged its rows' share; activations the
 * model's exact saved bytes; state 16 bytes per parameter (fp32
 * parameters, gradients and two AdamW moments). */
pm_status pm_place_table(const pm_gpt_config *cfg, int B, int T, const pm_layer_costs *lc,
                         pm_place_layer *l, pm_err *err);
/* The rule above on any table of n layers (o NULL: time first, no cap):
 * first[] as pm_place_layers; *least (may be NULL) the chosen cut's largest
 * device memory. When no cut fits o->cap: PM_ERR_MEMLIMIT naming the least
 * any cut needs, *least that figure and first[] the cut that reaches it. */
pm_status pm_place_cut(const pm_place_layer *l, int n, const pm_sched *s,
                       const pm_place_opts *o, int *first, double *least, pm_err *err);
/* Each device's share under a cut, as pm_place_shares. */
pm_status pm_place_cut_shares(const pm_place_layer *l, int n, const pm_sched *s,
                              const int *first, double *time, double *mem, pm_err *err);
/* Per-stage costs of a cut, what the simulator consumes: times the sums of
 * the layers', F keeps sum(act), B releases sum(act - act_w), W the rest;
 * with recompute, F keeps only the stage's first layer's input (mr). */
pm_status pm_place_stage_costs(const pm_place_layer *l, const int *first, int S, int recompute,
                               pm_cost *c, pm_err *err);

/* ---- activation arena -----------------------------------------------------
 * One slab of `cap` bytes. Blocks start on 64-byte boundaries and occupy
 * their size rounded up to 64; `live` counts requested bytes exactly (what
 * the model's sizes say), `peak` is the largest `live` seen, `high` the
 * largest end offset (slab bytes actually touched: live plus rounding and
 * fragmentation). Blocks are found by offset, kept sorted by offset; at most
 * max_blocks at once; nothing is allocated after init.
 *
 * Placement: first fit over the gaps, or a plan. Because a device's
 * allocation sequence depends only on its pass list, the runtime replays
 * the list on a dry arena (base NULL, which logs every block's size, W-prefix
 * size and the event times of its alloc, shrink and release), then plans the
 * offsets offline (pm_arena_plan: greedy lowest offset over the blocks'
 * lifetimes, several orders, each block notched (prefix and released suffix
 * as two rectangles) or solid) and keeps whichever of plan and first fit
 * needs the smaller slab. A planned alloc takes the
 * next offset of the plan and still checks it against the live blocks and
 * the capacity, so a wrong plan is an error, never corruption. */
typedef struct {
    size_t off;  /* start, multiple of 64 */
    size_t size; /* requested bytes (live) */
    size_t id;   /* dry arena: index of its life record */
} pm_arena_blk;

/* One block's life on a dry arena (event times count arena calls). */
typedef struct {
    size_t size, size_w;    /* bytes at alloc, after shrink (= size if never shrunk) */
    int64_t t_alloc;        /* alloc event */
    int64_t t_shrink;       /* shrink event (= t_free if never shrunk) */
    int64_t t_free;         /* release event */
} pm_arena_life;

typedef struct {
    unsigned char *base; /* (cap) slab, owned; NULL when dry */
    size_t cap;          /* capacity in bytes */
    pm_arena_blk *blk;   /* (max_blocks) live blocks sorted by offset; owned */
    size_t nblk;         /* live blocks */
    size_t max_blocks;   /* capacity of blk */
    size_t live;         /* requested bytes alive */
    size_t peak;         /* max live since the last pm_arena_begin */
    size_t high;         /* max end offset since init */
    size_t *plan;        /* (nplan) planned offsets in allocation order, or NULL; owned */
    size_t nplan, next;  /* plan length, next planned allocation */
    pm_arena_life *log;  /* dry: (max_log) lives in allocation order; owned */
    size_t nlog, max_log;
    int64_t clock;       /* dry: event counter */
} pm_arena;

#define PM_ARENA_ALIGN 64

pm_status pm_arena_init(pm_arena *a, size_t cap, size_t max_blocks, pm_err *err);
/* A dry arena logging up to max_log allocations. */
pm_status pm_arena_init_dry(pm_arena *a, size_t max_blocks, size_t max_log, pm_err *err);
void pm_arena_free(pm_arena *a);
/* Places `size` bytes (> 0); PM_ERR_MEMLIMIT if nothing fits (first fit),
 * the planned place is taken or past cap (plan), or max_blocks are live.
 * The caller names the pass. Never calls malloc. */
pm_status pm_arena_alloc(pm_arena *a, size_t size, size_t *off);
/* Shrinks the block at off to its prefix of `size` bytes (0 < size <= its size). */
void pm_arena_shrink(pm_arena *a, size_t off, size_t size);
void pm_arena_release(pm_arena *a, size_t off);
static inline void *pm_arena_ptr(const pm_arena *a, size_t off) { return a->base + off; }
/* Starts a step: peak = live, the plan restarts at its first offset. */
void pm_arena_begin(pm_arena *a);
/* Offsets for n logged lives (the best of several greedy placements, each
 * block at the lowest offset free of the blocks alive at the same time);
 * *cap receives the slab size needed. */
pm_status pm_arena_plan(const pm_arena_life *life, size_t n, size_t *off, size_t *cap,
                        pm_err *err);
/* Adopts a plan (copied) for the allocations of every later step. */
pm_status pm_arena_use_plan(pm_arena *a, const size_t *off, size_t n, pm_err *err);

/* ---- a device's activation memory, pass by pass --------------------------
 * Arena bookkeeping of a pass, shared by the planner's dry replay (sizing)
 * and the executor, so both make the same sequence of calls: the executor
 * calls each phase at its point in the pass, the replay calls all four in
 * order, and a phase that does not concern the pass's kind does nothing.
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

struct pm_plan;

typedef struct {
    pm_arena arena;            /* the device's activations */
    size_t *off;               /* (L+2, m) arena offset of layer l's saved for microbatch j */
    size_t *koff;              /* (S, m) recomputed: offset of stage s's kept input */
    const struct pm_plan *pl;  /* sizes, placement, schedule; borrowed */
} pm_devmem;

/* The offset tables of device d under pl, and an arena: with cap > 0 a
 * real slab of cap bytes following the plan's offsets (pl->arena[d]) when
 * it has them; with cap 0 a dry arena that logs first-fit placements (the
 * planner's). */
pm_status pm_devmem_init(pm_devmem *dm, const struct pm_plan *pl, int d, size_t cap, pm_err *err);
void pm_devmem_free(pm_devmem *dm);
pm_status pm_devmem_pass(pm_devmem *dm, const pm_pass *ps, pm_mem_phase ph, int *bad);
/* Replays device d's whole pass list (every phase of every pass). */
pm_status pm_devmem_replay(pm_devmem *dm, int d);
/* Forward only (evaluation): stage s's saved for one microbatch laid out
 * from offset 0 of an empty arena (they fit: a step holds them all at
 * once after F); offsets in off[.., slot]. */
void pm_devmem_forward_layout(pm_devmem *dm, int s, int slot);
/* Where layer l's saved for microbatch j lives. */
static inline void *pm_devmem_saved(const pm_devmem *dm, int l, int j, int m) {
    return pm_arena_ptr(&dm->arena, dm->off[(size_t)l * (size_t)m + (size_t)j]);
}

/* ---- the plan --------------------------------------------------------------- */

typedef enum { PM_TRANSPORT_THREADS, PM_TRANSPORT_MPI } pm_transport;

/* Floats per message of the data-parallel gradient sums: the one buffer a
 * replica's partial sum arrives in is this long (or the largest stage). */
#define PM_PLAN_CHUNK ((size_t)1 << 20)

/* What a device holds, by kind. */
typedef enum {
    PM_BYTES_PARAMS,      /* its stages' parameters */
    PM_BYTES_GRADS,       /* their gradients */
    PM_BYTES_MOMENTS,     /* AdamW m and v (its slice of them under ZeRO-1) */
    PM_BYTES_ACTIVATIONS, /* the activation arena's slab */
    PM_BYTES_WORKSPACE,   /* scratch of its passes, message and reduction buffers */
    PM_BYTES_TRANSPORT,   /* the transport's buffers for messages not yet received */
    PM_BYTES_COUNT
} pm_bytes_kind;
extern const char *const pm_bytes_names[PM_BYTES_COUNT];

typedef struct {
    size_t bytes[PM_BYTES_COUNT]; /* what the device allocates, by kind */
    size_t total;                 /* their sum */
    size_t act_peak;              /* predicted peak of live activation bytes (<= the arena) */
} pm_plan_dev;

/* A device's arena: its slab and, when the offline plan beat first fit,
 * the planned offset of every allocation of a step in order. */
typedef struct {
    size_t cap;     /* slab bytes */
    size_t ff;      /* what first fit alone would need */
    size_t *off;    /* (n) planned offsets, or NULL: first fit; owned */
    size_t n;
    size_t max_blocks; /* blocks alive at once at most (every saved and kept input) */
} pm_plan_arena;

typedef struct {
    int p;                  /* devices per replica; 0: the given schedule's */
    int dp;                 /* data-parallel replicas (0 or 1: none) */
    int zero;               /* 1: ZeRO stage 1 (moments sharded across the replicas) */
    int transport;          /* pm_transport: whose buffers count */
    const pm_sched *sched;  /* a schedule to run (copied), or NULL: made from `kind` */
    const char *kind;       /* a pm_sched_generate kind, or "auto" (searched); NULL: 1f1b */
    int chunks;             /* stages per device for kinds that take it; 0: the kind's */
    int recompute;          /* 1: every stage recomputes its forward in the backward */
    double mem_limit;       /* in units of M: "auto" searches under it; any other plan
                             * over it is refused; 0: none */
    size_t device_mem;      /* bytes a device may hold: a plan over it is refused, and
                             * "auto" searches under what the state leaves; 0: none */
    int head_parts;         /* 0: the configuration's (cfg.model.head_parts), and when that
                             * is 0 too, the fewest parts that balance the devices best */
    const pm_layer_costs *costs; /* what the placement balances (and auto's search costs);
                             * NULL: FLOPs, the same on every machine */
    pm_place_rule placement; /* what the cut ranks first (PM_PLACE_TIME: 0) */
    double time_limit;      /* seconds the exact (optimal) kinds may search; 0: theirs */
    int forward_only;       /* 1: only forward passes will run (evaluation, sampling): the
                             * devices hold parameters, no gradients or moments */
} pm_plan_req;

typedef struct pm_plan {
    pm_train_cfg cfg;       /* the run, with the head's parts decided */
    int p, S, m;            /* devices, stages and microbatches of one replica */
    int dp, nd;             /* replicas, devices in all (dp * p) */
    int zero, transport;    /* as requested */
    int forward_only;       /* as requested: no gradients or moments */
    pm_sched sched;         /* owned: the schedule, weight passes in microbatch order */
    int64_t w_relabeled;    /* weight passes that took another microbatch of their stage */
    int *first;             /* (S+1) owned: stage s holds layers first[s] .. first[s+1]-1 */
    pm_gpt_sizes *sz;       /* (L+2) owned: each layer's sizes for one microbatch */
    pm_layer_costs place;   /* the layer costs placed by (unit "flop" or "s") */
    pm_place_opts placed;   /* the rule and cap the cut ran under: the request's rule and
                             * no cap, unless the busiest device was over device_mem: then
                             * the cap that fits it, or (no cut fits) the memory rule */
    pm_cost cost;           /* owned: per stage byte deltas and times (place's unit) */
    pm_sim sim;             /* owned: the schedule simulated with cost */
    double M;               /* bytes of one microbatch's activation through the model */
    size_t msg_bytes;       /* bytes of one activation or gradient message */
    pm_plan_arena *arena;   /* (p) owned: each device's arena (the same in every replica) */
    pm_plan_dev *dev;       /* (nd) owned: what each device holds */
    int busiest;            /* the device with the largest total */
    char why[256];          /* auto: why this schedule won; else empty */
} pm_plan;

/* Plans cfg on req->p devices x req->dp replicas. When the placement of
 * the request's rule puts a device over device_mem, the fastest placement
 * that fits replaces it (the time rule under a cap; pl->placed says which).
 * Fails with one line when the request is inconsistent (naming the
 * parameter), when no schedule meets mem_limit, or when even the placement
 * of least memory leaves the busiest device over device_mem
 * (PM_ERR_MEMLIMIT, naming the device and its bytes by kind). Allocates
 * only small tables (the schedule, offsets, sizes): never a slab. On error
 * *pl is zeroed. */
pm_status pm_plan_make(pm_plan *pl, const pm_train_cfg *cfg, const pm_plan_req *req,
                       pm_err *err);
void pm_plan_free(pm_plan *pl);
/* A deep copy (a pipe keeps its own); on error *dst is zeroed. */
pm_status pm_plan_copy(pm_plan *dst, const pm_plan *src, pm_err *err);

/* Floats of stage s's parameters; the float offset of its first one. */
size_t pm_plan_stage_floats(const pm_plan *pl, int s);
size_t pm_plan_stage_offset(const pm_plan *pl, int s);
/* ZeRO-1: the part of stage s's floats replica r keeps moments for,
 * [*first, *first + *count); without ZeRO the whole stage. */
void pm_plan_moment_slice(const pm_plan *pl, int s, int r, size_t *first, size_t *count);
/* Bytes a recomputed stage s keeps per microbatch (0 on stage 0, whose
 * tokens stay in the batch, and without recomputation). */
size_t pm_plan_keep_bytes(const pm_plan *pl, int s);
/* The largest device peak in units of M, and the device it is on. */
double pm_plan_peak_x(const pm_plan *pl, int *dev);
/* What a device's runtime allocates besides its state and arena, as the
 * plan counts it (the runtime allocates from these, so the two cannot
 * drift): the largest scratch of device d's passes; the floats of the
 * buffer a partial gradient sum arrives in (replicas after the first); one
 * transport buffer (an activation message, at least 64 bytes); how many
 * the threads transport reserves for messages to device d (one a pass,
 * and the norm chain's); how many copy buffers MPI may hold at once. */
size_t pm_plan_scratch_bytes(const pm_plan *pl, int d);
size_t pm_plan_red_floats(const pm_plan *pl);
size_t pm_plan_msg_buffer(const pm_plan *pl);
int64_t pm_plan_mailbox_buffers(const pm_plan *pl, int d);
int64_t pm_plan_send_buffers(const pm_plan *pl);
/* n bytes for people: "123 bytes", "1.50 KiB", "12.3 MiB", "1.23 GiB". */
void pm_plan_bytes_str(size_t n, char *buf, size_t cap);

#endif
