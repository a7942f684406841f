/* pm_plan.h: planning a pipeline run before anything large is allocated.
 * One planner serves every model: a request (pm_plan_req: devices,
 * data-parallel replicas, microbatches, the schedule, memory limits) and a
 * cost model (pm_plan_model: the model's layers as a table, what a device
 * holds a parameter, its messages, and what its runtime allocates) become
 * a plan (pm_plan): where the layers go (placement), which schedule runs
 * (given, generated, or searched under a memory limit) and what every
 * device will hold, by kind, in bytes. Two cost models are built in:
 * pipemem's own GPT (pm_plan_model_pipemem: its exact bytes, its pass times
 * counted or measured here, its arena, scratch and transport buffers) and
 * a GPT sized by formulas for a GPU cluster (pm_plan_model_gpu,
 * pm_cluster.h). The runtime (pm_runtime.h) runs a plan of pipemem's GPT
 * (pm_plan_make) and allocates exactly what it says; `pipemem train --pp`
 * prints it and refuses a plan over --device-mem before allocating
 * anything; `pipemem plan` lists plans of either model. Implemented in
 * src/plan/: placement.c (the cut), arena.c (the activation arena and its
 * offline offsets), devmem.c (the allocation sequence of each pass, shared
 * by the planner's dry replay and the executor), plan.c (the planner),
 * plan_gpt.c (pipemem's GPT as a cost model), query.c (what a plan
 * answers).
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
 * (PM_CUT_MEMORY) minimises the largest device memory first, then the
 * busiest time, then the squared times. Under a cap (bytes, as counted
 * here) only cuts whose every device fits compete; when none does, the
 * cut is PM_ERR_MEMLIMIT naming the least any cut needs. A layer's time is
 * its kind's F + B + W from lc: measured (pm_place_measure) or, with lc
 * NULL, FLOPs. Exact (branch and bound over the cut points, pruned by the
 * best cut's first figure and by the cap) up to millions of partial cuts,
 * then the best found: equal layers tie on time in many cuts, so a loop
 * placement of 32 layers into 16 stages already reaches that.
 * first[s] .. first[s+1]-1 are stage s's layers (first has S+1 entries).
 * Fewer layers than stages is PM_ERR_ARG with the fix. */
typedef enum {
    PM_CUT_TIME,   /* the busiest time first, then the largest memory */
    PM_CUT_MEMORY, /* the largest memory first, then the busiest time */
    PM_CUT_RULES
} pm_cut_rule;
extern const char *const pm_cut_rule_names[PM_CUT_RULES]; /* "time", "memory" */

typedef struct {
    pm_cut_rule rule; /* what ranks first */
    double cap;       /* bytes each device may hold as the rule counts them; 0: no cap */
    const double *extra; /* (p) bytes device d holds beyond the count (its workspace and
                          * buffers), counted with it against the cap and in the memory
                          * rule's ranking; NULL: none. Read during the cut only */
} pm_cut_opts;

typedef struct {
    double f, b, w;
} pm_pass_times;
typedef struct {
    pm_pass_times k[PM_LAYER_KIND_COUNT]; /* one microbatch's passes of each layer kind */
    const char *unit;                     /* "s" measured, "flop" counted */
    int timed_ctx; /* measured at this sequence length and scaled by FLOPs (0: as asked) */
} pm_layer_costs;

/* Longest sequence the measurements below time; a longer one is timed at
 * this length and each pass scaled by its FLOPs (tokens for a pass without
 * products), lc->timed_ctx saying so, so that a long context's costs take
 * seconds and little memory to measure (docs/plan.md). */
#define PM_PLACE_MEASURE_CTX 2048

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
/* Each device's share under a placement: time[d] (lc's unit, NULL: FLOPs)
 * and mem[d] (bytes), as the rule above counts them; arrays of s->p. */
pm_status pm_place_shares(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const int *first, double *time,
                          double *mem, pm_err *err);

/* One layer as the cut and the simulator see it, whatever the model:
 * pipemem's GPT (its exact bytes) or a GPT sized by formulas for GPUs
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

/* ---- the cost model -----------------------------------------------------------
 * What the planner knows of a model: its layers as the cut and the
 * simulator see them, the state a device holds per parameter, its messages
 * between stages, and two hooks for a model whose runtime allocates by its
 * own rules. Everything else (the schedule, the cut, the simulation, each
 * device's bytes, the limits and the searches under them) is the planner's,
 * the same for every model. */
struct pm_plan; /* the plan, below */
typedef struct pm_plan_model pm_plan_model;
struct pm_plan_model {
    int n;                  /* layers */
    pm_place_layer *layer;  /* (n) owned: the embedding, the blocks, the head (its parts) */
    double gen[3];          /* the whole model's F, B and W as the schedule generators weigh
                             * them (0: the sums of the table's pass times) */
    double msg;             /* bytes of one activation or gradient message between stages */
    double msg_time;        /* its time between two devices, in the table's unit (0: free) */
    double link;            /* bytes per second of the gradient sums across replicas (0:
                             * free, or times not in seconds) */
    double bytes_param;     /* state a device holds per parameter: the weights it computes
                             * with, */
    double bytes_grad;      /* ... their gradients, */
    double bytes_opt;       /* ... the optimizer's state (ZeRO-1 shards it) */
    double flops;           /* model FLOPs of one microbatch's F, B and W, every layer (a
                             * recomputed forward's rerun is not counted) */
    double peak_flops;      /* one device's peak FLOP/s, for MFU; 0: unknown */
    double efficiency;      /* the fraction of it a pass reaches (pass times from FLOPs) */
    int mbs;                /* sequences per microbatch */
    const char *time_unit;  /* of the pass times: "s", or "flop" */
    /* Once the schedule is known, and again when the cut's rule changes
     * (pl->sched and pl->cut set): the model's own choices for them
     * (pipemem's GPT: how many parts its head is cut into) and its table.
     * NULL: the table is fixed. */
    pm_status (*shape)(pm_plan_model *m, struct pm_plan *pl, pm_err *err);
    /* Before any schedule is made: PM_ERR_ARG, naming the fix, when the
     * model's layers, however its shape hook may cut them, cannot fill S
     * stages (one layer each at least). NULL: the table's n must. */
    pm_status (*room)(const pm_plan_model *m, int64_t S, pm_err *err);
    /* After each simulation (pl->first and pl->sim set): every device's
     * activation, workspace and transport bytes and act_peak, as its runtime
     * allocates them (pipemem's GPT: the arena's slab, planned from a dry
     * replay of its allocations; its passes' scratch and message buffers;
     * the transport's buffers). NULL: the simulated peak, six messages (two
     * receive slots, two sends, two gradients between a stage's layers) and
     * none. */
    pm_status (*devices)(const pm_plan_model *m, struct pm_plan *pl, pm_err *err);
    void *ctx;              /* the hooks' own; owned */
};
void pm_plan_model_free(pm_plan_model *m);

/* ---- the plan --------------------------------------------------------------- */

typedef enum { PM_TRANSPORT_THREADS, PM_TRANSPORT_MPI } pm_transport;

/* Floats per message of the data-parallel gradient sums: the one buffer a
 * replica's partial sum arrives in is this long (or the largest stage). */
#define PM_PLAN_CHUNK ((size_t)1 << 20)

/* What a device holds, by kind, whatever the model (what a model without
 * hooks counts in brackets). */
typedef enum {
    PM_BYTES_PARAMS,      /* its stages' parameters */
    PM_BYTES_GRADS,       /* their gradients */
    PM_BYTES_MOMENTS,     /* the optimizer's state: AdamW m and v (with the fp32 master
                           * weights in mixed precision); its slice under ZeRO-1 */
    PM_BYTES_ACTIVATIONS, /* the activation arena's slab (the simulated peak) */
    PM_BYTES_WORKSPACE,   /* scratch of its passes, message and reduction buffers (six
                           * messages) */
    PM_BYTES_TRANSPORT,   /* the transport's buffers for messages not yet received (none) */
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
    int m;                  /* microbatches per replica and step (pm_plan_make: the
                             * configuration's micro / dp) */
    int zero;               /* 1: ZeRO stage 1 (optimizer state sharded across the replicas) */
    const pm_sched *sched;  /* a schedule to run (copied), or NULL: made from `kind` */
    const char *kind;       /* a pm_sched_generate kind (KIND-r recomputes), or a search:
                             * "auto" (every family) or "auto-v" (V schedules); NULL: 1f1b */
    int chunks;             /* stages per device for kinds that take it; 0: the kind's */
    int recompute;          /* 1: every stage recomputes its forward in the backward */
    double time_limit;      /* seconds the exact (optimal) kinds may search; 0: theirs */
    double mem_limit;       /* in units of M: the searches search under it; any other plan
                             * over it is refused; 0: none */
    size_t device_mem;      /* bytes a device may hold: a plan over it is placed again (the
                             * fastest cut that fits) or refused, and the searches search
                             * under what the state leaves; 0: none */
    int mark_over;          /* 1: a plan over device_mem is kept as it is and marked
                             * (pm_plan.fits 0), neither placed again nor refused: what a
                             * search that lists every plan wants */
    pm_cut_rule cut;        /* what the cut ranks first (PM_CUT_TIME: 0) */
    int forward_only;       /* 1: only forward passes will run (evaluation, sampling): the
                             * devices hold parameters, no gradients or moments */
    /* pipemem's GPT (pm_plan_model_pipemem, pm_plan_make) only: */
    int transport;          /* pm_transport: whose buffers count */
    int head_parts;         /* 0: the configuration's (cfg.model.head_parts), and when that
                             * is 0 too, the fewest parts that balance the devices best */
    const pm_layer_costs *costs; /* what the placement and the schedule's generators weigh;
                             * NULL: FLOPs, the same on every machine */
} pm_plan_req;

typedef struct pm_plan {
    int p, S, m;            /* devices, stages and microbatches of one replica */
    int dp, nd;             /* replicas, devices in all (dp * p) */
    int zero, transport;    /* as requested */
    int forward_only;       /* as requested: no gradients or moments */
    pm_sched sched;         /* owned: the schedule, weight passes in microbatch order */
    int64_t w_relabeled;    /* weight passes that took another microbatch of their stage */
    int *first;             /* (S+1) owned: stage s holds layers first[s] .. first[s+1]-1 */
    pm_cut_opts cut;        /* the rule and cap the cut ran under: the request's rule and
                             * no cap, unless the busiest device was over device_mem: then
                             * the cap that fits it, or (no cut fits) the memory rule */
    pm_cost cost;           /* owned: per stage byte deltas and times (the model's unit) */
    pm_sim sim;             /* owned: the schedule simulated with cost */
    double M;               /* bytes of one microbatch's activation through the model */
    pm_plan_dev *dev;       /* (nd) owned: what each device holds */
    int busiest;            /* the device with the largest total */
    int fits;               /* 1: the busiest device within device_mem (or none given) */
    double limit;           /* a search: auto-v's last limit, auto's answer's own peak on
                             * equal stages (x M); else 0 */
    char why[256];          /* "auto": why this schedule won; else empty */
    /* pipemem's GPT only (empty for other models): */
    pm_train_cfg cfg;       /* the run, with the head's parts decided */
    pm_gpt_sizes *sz;       /* (L+2) owned: each layer's sizes for one microbatch */
    pm_layer_costs place;   /* the layer costs placed by (unit "flop" or "s") */
    size_t msg_bytes;       /* bytes of one activation or gradient message */
    pm_plan_arena *arena;   /* (p) owned: each device's arena (the same in every replica) */
} pm_plan;

/* The planner: rq on model m, rq->p devices x rq->dp replicas. When the
 * placement of the request's rule puts a device over device_mem, the
 * fastest placement that fits replaces it (the time rule under a cap;
 * pl->cut says which). Fails with one line when the request is
 * inconsistent (naming the parameter), when the fewest stages its
 * schedule can have outnumber the model's layers (checked before any
 * schedule is made), when no schedule meets mem_limit, or when even the
 * placement of least memory leaves the busiest device
 * over device_mem (PM_ERR_MEMLIMIT, naming the device and its bytes by
 * kind; with rq->mark_over the plan is kept and marked instead). A search
 * assumes equal stages and knows nothing of the state: "auto" plans every
 * schedule its search weighs (of as many stages as the layers can fill)
 * and keeps the fastest whose plan meets mem_limit and fits device_mem, or
 * names the one of least memory; "auto-v" starts from the room an even
 * split of the state leaves and moves its limit by the overshoot, down
 * until a plan fits, then back up by halving (a dozen plans at most).
 * Allocates only small tables (the schedule, offsets, sizes): never a
 * slab. m's table is left as the plan's (its hooks may reshape it). On
 * error *pl is zeroed. */
pm_status pm_plan_build(pm_plan *pl, pm_plan_model *m, const pm_plan_req *rq, pm_err *err);
/* pipemem's own fp32 GPT of cfg as a cost model for rq (its transport, head
 * parts and costs; rq->m must be cfg->micro / rq->dp): a layer's
 * activations the model's exact saved bytes, 4 + 4 + 8 bytes per
 * parameter (weights, gradients, AdamW's m and v), pass times from times
 * (NULL: rq->costs, or FLOPs) while the cut and the generators weigh
 * rq->costs (NULL: FLOPs), and the hooks that choose the head's parts and
 * size what its runtime allocates. PM_ERR_ARG naming the field when cfg
 * does not fit rq. */
pm_status pm_plan_model_pipemem(pm_plan_model *m, const pm_train_cfg *cfg, const pm_plan_req *rq,
                                const pm_layer_costs *times, pm_err *err);
/* Plans cfg: pm_plan_model_pipemem, then pm_plan_build (rq->m is set from
 * cfg). What the runtime (pm_pipe_create) runs. */
pm_status pm_plan_make(pm_plan *pl, const pm_train_cfg *cfg, const pm_plan_req *req,
                       pm_err *err);
void pm_plan_free(pm_plan *pl);
/* The largest device peak in units of M, and the device it is on. */
double pm_plan_peak_x(const pm_plan *pl, int *dev);
#endif
