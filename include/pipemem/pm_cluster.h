/* pm_cluster.h: sizing a pipeline run of any GPT-shaped model on a GPU
 * cluster before paying for it (`pipemem plan`): for each schedule kind and
 * each pipeline depth P, data-parallel width D, microbatch size B and count
 * m, what every device holds, by kind, and how fast a step runs.
 *
 * It is the planner of pm_plan.h (pm_plan_build) with another cost model:
 * pm_plan_model_gpu fills the model's table of layers from formulas
 * (docs/plan.md gives each with its source) and the devices' rate; the
 * same request (pm_plan_req), the same schedule generators, cut, per-stage
 * costs and simulator, the same sum of each device's bytes and the same
 * search under the memory left give each plan, and pm_sim_dp adds the
 * gradient sums across replicas to the step. A plan of pipemem's own GPT
 * (pm_plan_model_pipemem) is listed the same way (`plan --pipemem-gpt`).
 * Implemented in src/plan/cluster_model.c (the formulas) and
 * src/plan/cluster.c (plans as rows, and the search).
 *
 * Reproducible: the same inputs give the same plans on every machine; only
 * pass times measured here (pm_place_measure_threads, given to
 * pm_plan_model_pipemem) depend on the machine. */
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

/* Every function below that takes a pm_cluster refuses it (PM_ERR_ARG
 * naming the field) unless every field is a number in its range: mem 0 ..
 * 1e18, tflops 0 .. 1e9, efficiency 0 .. 1, link_gbps 0 .. 1e12, devices
 * >= 0 (NaN and negatives refused: a NaN memory would fit anything). */

/* The cost model of shape on microbatches of mbs sequences, pass times
 * from FLOPs at hw's tflops x efficiency (hw NULL or tflops 0: times in
 * FLOPs), messages over hw's link. Per block and microbatch (b = mbs, e = 2
 * bytes in bf16, 4 in fp32, F the MLP width): activations b s [e (8h + 2F) +
 * 2h] + b a s^2 (2e + 1) without flash attention (Korthikanti et al. 2022:
 * 34 s b h + 5 a s^2 b at e = 2, F = 4h), of which W keeps b s e (8h + 2F)
 * (Zero Bubble's 32h per token); FLOPs F 2 b s P + 4 b s^2 h, B 2 b s P +
 * 8 b s^2 h, W 2 b s P (P its matrices' parameters). The embedding keeps
 * its dropout mask (b s h bytes); the head its norm's and projection's
 * inputs and fp32 logits (b s (2 e h + 4 V)), of which W keeps b s e (h +
 * V). State: bf16 2 + 2 + 12 bytes per parameter (weights, gradients, fp32
 * master, m, v), fp32 4 + 4 + 8. No hooks: a device's activations are the
 * simulated peak, its workspace six messages. PM_ERR_ARG naming the field
 * for a bad shape. Free with pm_plan_model_free. */
pm_status pm_plan_model_gpu(pm_plan_model *m, const pm_gpt_shape *shape, int mbs,
                            const pm_cluster *hw, pm_err *err);

/* ---- one plan as a row ----------------------------------------------------------- */

typedef struct {
    char kind[40];      /* the schedule as built ("auto-v", "zb-1p-r", ...) */
    int pp, dp, m;      /* pipeline depth, data-parallel width, microbatches per replica */
    int zero;           /* 1: ZeRO-1 */
    int mbs;            /* sequences per microbatch */
    int S;              /* stages */
    int *first;         /* (S+1) owned: stage s holds layers first[s] .. first[s+1]-1 */
    int *stage_device;  /* (S) owned: the device that holds stage s */
    pm_plan_dev *dev;   /* (pp) owned: the busiest replica's devices, bytes by kind */
    double act_peak;    /* the largest simulated activation peak (bytes) */
    double state;       /* the largest weights + gradients + optimizer state */
    double total_max;   /* the largest total */
    int busiest;        /* the device (of dev) with total_max */
    int fits;           /* 1: total_max <= the request's device_mem (or none) */
    double M;           /* bytes of one microbatch's activation through the model */
    double limit;       /* a search: auto-v's limit it was built under, auto's answer's
                         * own peak on equal stages (x M); else 0 */
    double bubble;      /* the simulator's: 1 - model work / (pp x makespan) */
    double step;        /* one step (time unit of the model): the replica's makespan,
                         * with the gradient sums across replicas (pm_sim_dp) */
    double samples;     /* sequences per time unit: m mbs dp / step */
    double mfu;         /* model FLOPs per step / (step x devices x peak); 0 without a rate */
} pm_cluster_plan;

/* One plan of rq on model m (pm_plan_build), as a row. Errors as
 * pm_plan_build's (PM_ERR_ARG when the request does not fit the model:
 * too few layers for the stages, m below the kind's minimum; PM_ERR_MEMLIMIT
 * when auto-v finds no V schedule in the memory left, naming it); with
 * rq->mark_over a plan over device_mem is made and marked fits = 0. On
 * error *pl is zeroed. */
pm_status pm_cluster_plan_make(pm_cluster_plan *pl, pm_plan_model *m, const pm_plan_req *rq,
                               pm_err *err);
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
    /* NULL, or called after each plan tried (built or not) with how many
     * are done of the total the search will try (a progress line) */
    void (*progress)(void *ctx, int done, int total);
    void *progress_ctx;
} pm_cluster_search_req;

/* Every plan of the request that can be built, in *plans (*n of them;
 * free with pm_cluster_plans_free): those that fit first, each group by
 * samples per second, fastest first (ties: the smaller total). Shapes or
 * kinds that cannot be built are skipped (*skipped counts them; may be
 * NULL; *err then says why the last one was). PM_ERR_ARG when nothing can
 * be built, naming the last reason. */
pm_status pm_cluster_search(const pm_gpt_shape *shape, const pm_cluster *hw,
                            const pm_cluster_search_req *rq, pm_cluster_plan **plans, int *n,
                            int *skipped, pm_err *err);
void pm_cluster_plans_free(pm_cluster_plan *plans, int n);

#endif
