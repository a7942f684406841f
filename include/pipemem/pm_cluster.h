/* pm_cluster.h: sizing a pipeline run of any GPT-shaped model on a GPU
 * cluster before paying for it (`pipemem plan`): for each schedule kind and
 * each pipeline depth P, data-parallel width D, microbatch size B and count
 * m, what every device holds, by kind, and how fast a step runs.
 *
 * It is the planner of pm_plan.h on another model: a model is a table of
 * layers (pm_place_layer: pass times, activation and state bytes), which
 * pm_cluster_model_gpt fills from formulas (docs/plan.md gives each with its
 * source) and pm_cluster_model_pipemem from pipemem's own fp32 GPT (its
 * exact bytes); then the same schedule generators (pm_sched_generate), the
 * same cut of layers into stages (pm_place_cut), the same per-stage costs
 * (pm_place_stage_costs) and the same simulator (pm_sim_run, pm_sim_dp for
 * the gradient sums) give each device's activation peak, in bytes, and the
 * step. Implemented in src/plan/cluster_model.c (the tables) and
 * src/plan/cluster.c (plans and the search).
 *
 * Reproducible: the same inputs give the same plans on every machine; only
 * pass times measured here (pm_place_measure_threads, given to
 * pm_cluster_model_pipemem) depend on the machine. */
#ifndef PM_CLUSTER_H
#define PM_CLUSTER_H

#include "pipemem/pm_plan.h"

/* ---- the model --------------------------------------------------------------- */

typedef enum { PM_PREC_BF16, PM_PREC_FP32, PM_PREC_COUNT } pm_precision;
extern const char *const pm_precision_names[PM_PREC_COUNT]; /* "bf16", "fp32" */

/* A GPT-shaped decoder (GPT-2/Megatron layout: learned positions, pre-LN
 * blocks with biases, an untied output layer) as a user describes it. */
typedef struct {
    int layers;    /* transformer blocks L */
    int hidden;    /* width h */
    int heads;     /* attention heads a (divides h) */
    int seq;       /* sequence length s */
    int vocab;     /* vocabulary V */
    int ffn;       /* MLP width; 0: 4h */
    int precision; /* pm_precision: bf16 is mixed precision with fp32 master weights */
    int flash;     /* 1: flash attention (no s^2 activation is kept) */
} pm_gpt_shape;

/* The devices. */
typedef struct {
    int devices;       /* N in all */
    double mem;        /* bytes one device may hold; 0: no limit */
    double tflops;     /* one device's peak dense TFLOP/s in the model's precision */
    double efficiency; /* fraction of the peak one pass reaches (0: 0.65) */
    double link_gbps;  /* point-to-point and all-reduce bandwidth, Gbit/s; 0: free
                        * (device threads in one process) */
} pm_cluster;

#define PM_CLUSTER_EFFICIENCY 0.65 /* the paper's measured single-pass MFU (Table 5) */

/* PM_ERR_ARG naming the field unless every field of hw is a number in its
 * range: mem 0 .. 1e18, tflops 0 .. 1e9, efficiency 0 .. 1, link_gbps 0 ..
 * 1e12, devices >= 0 (NaN and negatives refused: a NaN memory would fit
 * anything). Every function below that takes a pm_cluster checks it. */
pm_status pm_cluster_check(const pm_cluster *hw, pm_err *err);

/* A model on one microbatch size: its layers (embedding, blocks, head) as
 * the cut and the simulator see them, and what the plan needs besides. */
typedef struct {
    int n;                  /* layers */
    pm_place_layer *layer;  /* (n) owned; times in seconds (or FLOPs: time_unit) */
    double flops;           /* model FLOPs of one microbatch's F, B and W, every layer
                             * (a recomputed forward's rerun is not counted) */
    double gen[3];          /* the model's F, B and W as the schedule generators weigh
                             * them (0: the pass times); pipemem's GPT: FLOPs, as train
                             * generates and places by default */
    double msg;             /* bytes of one activation or gradient between stages */
    double bytes_param;     /* bytes per parameter of the weights a device computes with, */
    double bytes_grad;      /* ... of their gradients, */
    double bytes_opt;       /* ... of the optimizer's state (ZeRO-1 shards it) */
    int mbs;                /* sequences per microbatch */
    const char *time_unit;  /* "s", or "flop" when no rate was given */
} pm_cluster_model;

/* The table of shape on microbatches of mbs sequences, pass times from FLOPs at
 * hw's tflops x efficiency (hw NULL or tflops 0: times in FLOPs). Per
 * block and microbatch (b = mbs, e = 2 bytes in bf16, 4 in fp32, F the
 * MLP width): activations b s [e (8h + 2F) + 2h] + b a s^2 (2e + 1)
 * without flash attention (Korthikanti et al. 2022: 34 s b h + 5 a s^2 b
 * at e = 2, F = 4h), of which W keeps b s e (8h + 2F) (Zero Bubble's 32h
 * per token); FLOPs F 2 b s P + 4 b s^2 h, B 2 b s P + 8 b s^2 h, W 2 b s P
 * (P its matrices' parameters). The embedding keeps its dropout mask (b s
 * h bytes); the head its norm's and projection's inputs and fp32 logits
 * (b s (2 e h + 4 V)), of which W keeps b s e (h + V). State: bf16 2 + 2 +
 * 12 bytes per parameter (weights, gradients, fp32 master, m, v), fp32
 * 4 + 4 + 8. PM_ERR_ARG naming the field for a bad shape. */
pm_status pm_cluster_model_gpt(pm_cluster_model *m, const pm_gpt_shape *shape, int mbs,
                               const pm_cluster *hw, pm_err *err);
/* pipemem's own fp32 GPT (one-part head) on microbatches of mbs sequences of
 * cfg->ctx tokens: pm_place_table's exact bytes and 4 + 4 + 8 bytes per
 * parameter, cut and schedules generated by FLOPs (as `train --pp` does by
 * default), pass times from lc (measured: pm_place_measure_threads; NULL:
 * FLOPs). */
pm_status pm_cluster_model_pipemem(pm_cluster_model *m, const pm_gpt_config *cfg, int mbs,
                                   const pm_layer_costs *lc, pm_err *err);
void pm_cluster_model_free(pm_cluster_model *m);

/* ---- one plan ------------------------------------------------------------------ */

/* What each device holds, by kind. */
typedef enum {
    PM_CL_PARAMS,    /* its stages' weights */
    PM_CL_GRADS,     /* their gradients */
    PM_CL_OPT,       /* optimizer state (its 1/D under ZeRO-1) */
    PM_CL_ACT,       /* the schedule's activation peak */
    PM_CL_WORK,      /* message buffers: two receive slots, two sends, two gradients
                      * between a stage's layers (pipemem's runtime's six) */
    PM_CL_COUNT
} pm_cl_kind;
extern const char *const pm_cl_names[PM_CL_COUNT]; /* "parameters", ..., "workspace" */

typedef struct {
    char kind[40];  /* a pm_sched_generate kind (KIND-r recomputes) or "auto-v": the
                     * fastest V schedule under the memory the devices have left */
    int pp, dp;     /* pipeline depth and data-parallel width (devices pp x dp) */
    int m;          /* microbatches per replica and step */
    int zero;       /* 1: ZeRO-1 (optimizer state sharded across the dp replicas) */
} pm_cluster_req;

typedef struct {
    pm_cluster_req req; /* as asked (kind: as built, e.g. "auto-v") */
    int mbs;            /* sequences per microbatch */
    int S;              /* stages */
    int *first;         /* (S+1) owned: stage s holds layers first[s] .. first[s+1]-1 */
    int *dev;           /* (S) owned: the device that holds stage s */
    double *bytes;      /* (pp, PM_CL_COUNT) owned: device d's bytes by kind */
    double *total;      /* (pp) owned: their sums */
    double act_peak;    /* the largest activation peak (bytes) */
    double state;       /* the largest weights + gradients + optimizer state */
    double total_max;   /* the largest total */
    int busiest;        /* the device with total_max */
    int fits;           /* 1: total_max <= the devices' memory (or no limit) */
    double M;           /* bytes of one microbatch's activation through the model */
    double limit;       /* auto-v: the limit it was built under (x M); else 0 */
    double bubble;      /* the simulator's: 1 - model work / (pp x makespan) */
    double step;        /* one step (time unit of the model): the replica's makespan,
                         * with the gradient sums across replicas (pm_sim_dp) */
    double samples;     /* sequences per time unit: m mbs dp / step */
    double mfu;         /* model FLOPs per step / (step x devices x peak); 0 without a rate */
} pm_cluster_plan;

/* One plan of model m on hw. PM_ERR_ARG when the request does not fit the
 * model (too few layers for the stages, m below the kind's minimum, a kind
 * that needs a limit), PM_ERR_MEMLIMIT when auto-v finds no V schedule in
 * the memory left (naming it); a plan over the memory is made and marked
 * fits = 0. On error *pl is zeroed. */
pm_status pm_cluster_plan_make(pm_cluster_plan *pl, const pm_cluster_model *m,
                               const pm_cluster *hw, const pm_cluster_req *rq, pm_err *err);
void pm_cluster_plan_free(pm_cluster_plan *pl);

/* ---- the search ------------------------------------------------------------------ */

typedef struct {
    int pp, dp, mbs;   /* 0: searched (pp divides the devices, dp = devices / pp, mbs a
                        * power of two up to max_mbs) */
    int m;             /* microbatches per replica; 0: global_batch / (mbs dp) */
    int global_batch;  /* sequences per step, when m is 0 */
    int max_mbs;       /* largest mbs searched (0: 64) */
    const char *kind;  /* one kind, or NULL: every kind, each also recomputed, and auto-v
                        * (needs hw->mem) */
    int zero;          /* ZeRO-1 where dp > 1 */
} pm_cluster_search_req;

/* Every plan of the request that can be built, in *plans (*n of them;
 * free with pm_cluster_plans_free): those that fit first, each group by
 * samples per second, fastest first (ties: the smaller total). Shapes or
 * kinds that cannot be built are skipped (*skipped counts them; may be
 * NULL). PM_ERR_ARG when nothing can be built, naming the last reason. */
pm_status pm_cluster_search(const pm_gpt_shape *shape, const pm_cluster *hw,
                            const pm_cluster_search_req *rq, pm_cluster_plan **plans, int *n,
                            int *skipped, pm_err *err);
void pm_cluster_plans_free(pm_cluster_plan *plans, int n);

#endif
