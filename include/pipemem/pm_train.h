/* pm_train.h: training on one device: AdamW on flat float slabs, the
 * learning-rate schedule, global gradient-norm clipping, the trainer (steps
 * of K accumulated microbatches, validation), checkpoints, and the choice of
 * OpenBLAS kernels. Implemented in src/train/.
 *
 * Learning rate (step counted from 0, `steps` in all):
 *   step < warmup:  lr * (step + 1) / warmup                (linear warm-up)
 *   otherwise:      lo + (lr - lo) * (1 + cos(pi * q)) / 2,  lo = lr * lr_min_frac,
 *                   q = (step - warmup) / (steps - warmup - 1), clamped to [0, 1]
 * so the first post-warm-up step runs at lr and the last at the floor lo.
 *
 * AdamW (PyTorch's torch.optim.AdamW, t counted from 1):
 *   g = grad * gscale          (gscale folds in 1/K accumulation and clipping)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p = p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * Weight decay is decoupled and applies to the matrices of the blocks (QKV,
 * attention output, MLP in and out) and the LM head's matrix; biases,
 * LayerNorm gains and biases, and both embeddings do not decay.
 *
 * Clipping: the global norm is sqrt of the sum of squares over every gradient
 * element (of the mean-loss gradient; pm_optim_norm says in which order);
 * if it exceeds grad_clip every gradient is scaled by grad_clip / (norm + 1e-6). */
#ifndef PM_TRAIN_H
#define PM_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_data.h"
#include "pipemem/pm_gpt.h"
#include "pipemem/pm_util.h"

typedef struct {
    float lr;           /* peak learning rate */
    float lr_min_frac;  /* floor of the cosine as a fraction of lr */
    int warmup;         /* warm-up steps */
    int steps;          /* total steps the cosine spans */
    float beta1, beta2; /* Adam moment decays */
    float eps;          /* Adam denominator epsilon */
    float weight_decay; /* decoupled decay for matrices */
    float grad_clip;    /* max global gradient norm; <= 0 disables */
} pm_optim_cfg;

/* lr 1e-3, floor 10%, warm-up steps/10 (0 under 10 steps), betas 0.9/0.95,
 * eps 1e-8, weight decay 0.1, clip 1.0. */
void pm_optim_defaults(pm_optim_cfg *c, int steps);

/* Learning rate of step `step` (0-based). */
double pm_optim_lr_at(const pm_optim_cfg *c, int64_t step);

/* The global gradient norm, defined so that every trainer (one device, any
 * pipeline, model selection) computes the same bits and each device can
 * compute its own part early and in parallel:
 *   - the slab is cut into units: the embedding, each block, and the
 *     head's groups of PM_HEAD_GROUP rows of lm_head (ln_f's 2C floats with
 *     the first), so every stage boundary of every placement and head-part
 *     count is a unit boundary;
 *   - a unit's sum of squares is pm_optim_sumsq over its floats;
 *   - norm = sqrt of the units' sums added in unit order (a double).
 * pm_optim_sumsq: blocks of PM_NORM_BLOCK floats from the start, each in 8
 * double lanes (element i into lane i % 8, lanes added
 * ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))), the blocks' sums added in order;
 * the blocks run on the calling thread's compute threads, the result does
 * not depend on how many. */
#define PM_NORM_BLOCK ((size_t)1 << 16)
double pm_optim_sumsq(const float *g, size_t n);
/* Units in layers l0 .. l1-1. */
int pm_optim_units(const pm_gpt_config *c, int l0, int l1);
/* The units' sums of squares of layers l0 .. l1-1 (g starts at layer l0's
 * first parameter) into sums, in order; returns how many. */
int pm_optim_unit_sums(const pm_gpt_config *c, int l0, int l1, const float *g, double *sums);
/* The norm of a whole slab of c's parameters. */
double pm_optim_norm(const pm_gpt_config *c, const float *g);
/* The same norm from the slab read in pieces, in order (a slab spilled to
 * a file): init, add every float once, end. Bitwise pm_optim_norm. */
typedef struct {
    const pm_gpt_config *c;
    int l, k;          /* the current unit: layer l's k-th */
    size_t left;       /* its floats still to come */
    size_t pos;        /* position in the current block */
    double lane[8];    /* the block's lanes so far */
    double unit, total;
} pm_norm_stream;
void pm_norm_stream_init(pm_norm_stream *s, const pm_gpt_config *c);
void pm_norm_stream_add(pm_norm_stream *s, const float *x, size_t n);
double pm_norm_stream_end(const pm_norm_stream *s);

/* Factor to scale gradients by for global norm `norm` under limit `clip`. */
float pm_optim_clip_scale(double norm, float clip);

/* What to change when a run under o diverged (its loss or gradient norm not
 * finite), as one clause into buf (cap bytes; returns buf): "lower
 * opt.lr", or, when opt.weight_decay is above 1 and opt.lr x
 * opt.weight_decay is 1 or more (each step then scales the decayed weights
 * by 1 - lr x decay, at most 0: they flip and grow), the decay and its
 * limit (1 / lr). whose ("" or "its ") stands
 * before the parameter's name. */
const char *pm_optim_diverged_hint(const pm_optim_cfg *o, const char *whose, char *buf,
                                   size_t cap);

typedef struct {
    float lr;     /* this step's learning rate */
    float wd;     /* weight decay of this tensor (0 for no decay) */
    float beta1, beta2, eps;
    int64_t t;    /* step number, from 1 */
    float gscale; /* multiplies every gradient before use */
} pm_optim_adamw_args;

/* One AdamW update of n parameters in place (p, m, v updated; g read). */
void pm_optim_adamw_update(float *restrict p, const float *restrict g, float *restrict m,
                     float *restrict v, size_t n, const pm_optim_adamw_args *a);

/* ---- single-device trainer ------------------------------------------------
 * A step: zero the gradient slab; for each of K microbatches (B/K sequences
 * of T = ctx tokens, drawn from the train loader in order) run the whole
 * model's forward+backward with loss scale 1/K, accumulating into the slab;
 * the step's loss is the mean of the K microbatch losses (double, in order);
 * then global-norm clipping and AdamW per tensor (decay per pm_gpt_tensor).
 * Memory, allocated once in init: params, grads, m, v (4 slabs of
 * pm_gpt_num_params floats, one allocation), the model workspace for one
 * microbatch (pm_gpt_work_bytes(B/K, ctx)), and one step's inputs and
 * targets (B, ctx). Nothing is allocated in a step. */

typedef struct {
    pm_gpt_config model; /* architecture */
    int batch;           /* sequences per optimizer step B */
    int micro;           /* microbatches per step K (divides B) */
    uint64_t seed;       /* initialisation and data positions */
    pm_optim_cfg opt;    /* optimizer and schedule (opt.steps = total steps) */
} pm_train_cfg;

/* ---- the training configuration ------------------------------------------
 * One place builds, checks and compares a pm_train_cfg (src/train/config.c):
 * train's options, a sweep's tasks (pm_select.h) and a checkpoint's run all
 * go through it, so a task trains what train with the same settings trains
 * and a mismatch names its field. The fields by name, in the order a
 * comparison finds the first that differs (a checkpoint's run first). */
typedef enum {
    PM_CFG_VOCAB, PM_CFG_CTX, PM_CFG_DIM, PM_CFG_HEADS, PM_CFG_LAYERS, PM_CFG_BATCH,
    PM_CFG_MICRO, PM_CFG_SEED, PM_CFG_LR, PM_CFG_WEIGHT_DECAY, PM_CFG_STEPS, PM_CFG_WARMUP,
    PM_CFG_LR_MIN_FRAC, PM_CFG_BETA1, PM_CFG_BETA2, PM_CFG_EPS, PM_CFG_GRAD_CLIP,
    PM_CFG_HEAD_PARTS, PM_CFG_FIELDS
} pm_train_field;
#define PM_CFG_BIT(f) (1u << (f))
#define PM_CFG_ALL ((1u << PM_CFG_FIELDS) - 1u)
/* Each field's name as messages give it ("model.vocab", ..., "batch",
 * "micro", "seed", "opt.lr", ...: pm_util.h), and what a value of it must
 * be ("an integer 1..16777216", "a positive number up to 3.4e38 (a float)"). */
extern const char *const pm_train_field_names[PM_CFG_FIELDS];
extern const char *const pm_train_value_rules[PM_CFG_FIELDS];
/* 1 if x is a value field f takes (its rule); 1 if f takes integers only. */
int pm_train_value_ok(pm_train_field f, double x);
int pm_train_field_integer(pm_train_field f);

/* The defaults: a GPT of 4 layers, dim 128, 4 heads, ctx 64 and a
 * vocabulary of 256 (bytes), batch 8 in 1 microbatch, seed 1, and
 * pm_optim_defaults for 100 steps. */
void pm_train_cfg_defaults(pm_train_cfg *c);

/* Values for some fields (NAN: the default). */
typedef struct {
    double v[PM_CFG_FIELDS];
} pm_train_settings;
void pm_train_settings_clear(pm_train_settings *s); /* every field NAN */

/* The defaults with s applied: each value must follow its rule (else
 * PM_ERR_ARG naming the field and the value); the steps first, so the
 * warm-up and AdamW defaults are pm_optim_defaults' for them; a warm-up
 * longer than the run is the run; then pm_train_cfg_check. *c is written
 * only on success. */
pm_status pm_train_cfg_make(pm_train_cfg *c, const pm_train_settings *s, pm_err *err);

/* Whether c can be trained: the model (pm_gpt_config_check), every other
 * field within its rule (the seed takes any 64 bits), micro dividing
 * batch, the warm-up at most the steps; else PM_ERR_ARG naming the field. */
pm_status pm_train_cfg_check(const pm_train_cfg *c, pm_err *err);

/* The first field among mask's (PM_CFG_BIT(f) each, PM_CFG_ALL every one),
 * in pm_train_field order, whose value differs in a and b; -1 if none. */
int pm_train_cfg_diff(const pm_train_cfg *a, const pm_train_cfg *b, unsigned mask);
/* Field f of c as text: an integer in decimal, a float as pm_float_text. */
void pm_train_cfg_value(const pm_train_cfg *c, pm_train_field f, char *buf, size_t cap);

/* One AdamW step over layers l0 .. l1-1 of cfg->model (embedding 0, blocks,
 * head L+1), whose parameters, gradients and moments are slabs that start
 * at layer l0's first parameter (so a pipeline stage or a model-selection
 * shard passes its own slabs, the single-device trainer the whole model).
 * step = optimizer steps completed before this one (learning rate from
 * pm_optim_lr_at, bias correction t = step + 1); gscale folds in clipping. Decay
 * per tensor as pm_gpt_layer_tensors says. Every trainer calls this one
 * loop, so they stay bitwise alike. */
void pm_optim_step_layers(const pm_train_cfg *cfg, int l0, int l1, int64_t step, float gscale,
                          float *p, const float *g, float *m, float *v);

/* The same update for parameters a .. b-1 of the whole slab (any range,
 * cutting layers and tensors anywhere: each element's update is its own,
 * so a ZeRO-1 slice gets exactly the bits the whole update gives it);
 * p, g, m, v start at element a. */
void pm_optim_step_range(const pm_train_cfg *cfg, size_t a, size_t b, int64_t step, float gscale,
                         float *p, const float *g, float *m, float *v);

/* Exact bytes pm_trainer_init allocates for cfg; 0 (and err) on a bad config
 * or overflow. */
size_t pm_train_mem_bytes(const pm_train_cfg *cfg, pm_err *err);

typedef struct {
    pm_train_cfg cfg;   /* copy of the configuration */
    size_t n_params;    /* floats per slab */
    float *params;      /* (n_params) owned: one block with grads, m, v */
    float *grads;       /* (n_params) this step's accumulated gradient */
    float *m, *v;       /* (n_params) AdamW moments */
    void *work;         /* model workspace for one microbatch; owned */
    int32_t *inp, *tgt; /* (B, ctx) one step's tokens; owned */
    pm_loader train;    /* train windows; tokens borrowed from the caller */
    uint64_t data_id;   /* pm_tokens_identity of the train tokens (checkpoints) */
    const void *tok_model; /* the data's tokenizer model, owned (NULL: bytes); saved
                            * in checkpoints so they sample text on their own */
    size_t tok_model_len;
    int64_t step;       /* optimizer steps completed */
} pm_trainer;

/* Checks cfg (pm_train_cfg_check), that pm_train_mem_bytes fits in
 * device_mem bytes, one device's budget (0: none), and in this machine's
 * physical memory (PM_ERR_MEMLIMIT names both figures), that the train
 * tokens hold ctx+1 tokens, then allocates and initialises the parameters
 * from cfg->seed. `train` is borrowed for the trainer's life. On error *t
 * is zeroed. */
pm_status pm_trainer_init(pm_trainer *t, const pm_train_cfg *cfg, const pm_tokens *train,
                          size_t device_mem, pm_err *err);
void pm_trainer_free(pm_trainer *t);
/* Keeps a copy of the data's tokenizer model for its checkpoints. */
pm_status pm_trainer_set_tokenizer(pm_trainer *t, const void *model, size_t len, pm_err *err);

typedef struct {
    double loss;      /* mean loss of the step's microbatches */
    double grad_norm; /* global norm before clipping */
    double lr;        /* learning rate used */
} pm_step_info;

/* One optimizer step. PM_ERR_NUMERIC (and no update) if the loss or the
 * gradient norm is not finite. */
pm_status pm_trainer_step(pm_trainer *t, pm_step_info *info, pm_err *err);

/* The same step on given tokens: inp and tgt are (B, ctx); microbatch k is
 * rows k*B/K .. (k+1)*B/K. pm_trainer_step = the loader's next B windows
 * followed by this. */
pm_status pm_trainer_step_batch(pm_trainer *t, const int32_t *inp, const int32_t *tgt,
                                pm_step_info *info, pm_err *err);

/* Mean loss over `batches` microbatches of B/K windows of `val`, drawn from
 * a loader seeded with cfg.seed ^ PM_VAL_SEED and restarted every call, so
 * each evaluation sees the same text. */
#define PM_VAL_SEED 0x76616c6964617465ull
pm_status pm_trainer_eval(pm_trainer *t, const pm_tokens *val, int batches, double *loss,
                          pm_err *err);

/* ---- the training loop --------------------------------------------------------
 * One loop for every way of training (one device, a pipeline's devices,
 * MPI ranks): the loop's own state (pm_train_state: configuration, train
 * loader, step count, the data's identity and tokenizer, one step's tokens)
 * draws each step's batch; a driver runs the step wherever the model lives,
 * evaluates it and saves it; the loop reports each event, evaluates and
 * checkpoints at intervals, and at the end evaluates and saves. The model's
 * state never passes through the loop, so a pipeline needs no whole-model
 * copy anywhere. The loop allocates nothing and prints nothing: reports go
 * to a callback. A validation loss that is not finite (the parameters
 * diverged) ends the loop with PM_ERR_NUMERIC before anything is saved. */

typedef struct {
    pm_train_cfg cfg;       /* the run (a copy) */
    pm_loader train;        /* train windows; tokens borrowed from the caller */
    uint64_t data_id;       /* pm_tokens_identity of the train tokens (checkpoints) */
    const void *tok_model;  /* the data's tokenizer model, borrowed (NULL: bytes) */
    size_t tok_model_len;
    int64_t step;           /* optimizer steps completed */
    int32_t *inp, *tgt;     /* (B, ctx) one step's tokens; owned */
} pm_train_state;

/* Checks cfg, that the train tokens hold ctx+1 tokens, and allocates one
 * step's tokens; step 0 at the loader's start. On error *st is zeroed. */
pm_status pm_train_state_init(pm_train_state *st, const pm_train_cfg *cfg,
                              const pm_tokens *train, pm_err *err);
void pm_train_state_free(pm_train_state *st);

typedef struct {
    int64_t step;        /* steps completed after this event's step */
    pm_step_info info;   /* what the step did (when kind is PM_LOOP_STEP) */
    double seconds;      /* the step's wall time */
    double val_loss;     /* PM_LOOP_EVAL, PM_LOOP_END */
    const char *saved;   /* checkpoint written at this event, or NULL */
    enum { PM_LOOP_STEP, PM_LOOP_EVAL, PM_LOOP_END } kind;
} pm_loop_event;

typedef struct {
    void *ctx; /* the driver's state, passed back to each call */
    /* One optimizer step on inp, tgt (B, ctx) as pm_trainer_step_batch. */
    pm_status (*step)(void *ctx, const int32_t *inp, const int32_t *tgt, pm_step_info *info,
                      pm_err *err);
    /* The loss of each of n <= K microbatches of inp, tgt (microbatch i is
     * rows i*B/K .. (i+1)*B/K), forward only, each bitwise what
     * pm_gpt_forward gives; a non-finite loss is a value, not an error. */
    pm_status (*eval)(void *ctx, const int32_t *inp, const int32_t *tgt, int n, float *losses,
                      pm_err *err);
    /* Writes the model's state as a checkpoint at path, with the run's
     * state (step, data position, identity, tokenizer) from st. */
    pm_status (*save)(void *ctx, const char *path, const pm_train_state *st, pm_err *err);
    /* Every event, in order, with report_ctx (the caller's: progress lines,
     * statistics); may be NULL. */
    void (*report)(void *report_ctx, const pm_loop_event *ev);
    void *report_ctx;
} pm_train_driver;

typedef struct {
    int64_t stop_at;        /* run until st->step reaches this (<= opt.steps) */
    int eval_every;         /* evaluate (and save) every N steps; 0 never, but at the end */
    int eval_batches;       /* microbatches per evaluation */
    const pm_tokens *val;   /* validation tokens */
    const char *save;       /* checkpoint path, or NULL */
} pm_loop_opts;

/* Runs steps until st->step == o->stop_at, then evaluates and saves. The
 * first failing step, evaluation or save ends the loop with its error. */
pm_status pm_train_loop(pm_train_state *st, const pm_train_driver *drv, const pm_loop_opts *o,
                        pm_err *err);

/* Mean loss over `batches` microbatches of B/K windows of `val`, drawn from
 * a loader seeded with cfg.seed ^ PM_VAL_SEED and restarted every call (so
 * each evaluation sees the same text), K at a time through drv->eval,
 * summed in double in microbatch order (so any driver gives the same bits
 * as pm_trainer_eval). */
pm_status pm_train_eval(pm_train_state *st, const pm_train_driver *drv, const pm_tokens *val,
                        int batches, double *loss, pm_err *err);

/* The single-device driver: t trains itself (its step count follows the
 * loop's; a save records the state's data position). */
pm_train_driver pm_trainer_driver(pm_trainer *t,
                                  void (*report)(void *ctx, const pm_loop_event *ev),
                                  void *report_ctx);

/* Training FLOPs of one step: K * pm_gpt_flops(B/K, ctx), the matrix
 * products as the model computes them (2*M*N*K each). With N = (B/K)*T
 * tokens per microbatch, per block: F 24 N C^2 + 4 (B/K) T^2 C (QKV, proj,
 * MLP; full T x T scores and weighted sums), B 24 N C^2 + 8 (B/K) T^2 C,
 * W 24 N C^2; the head 2 N C V in each of F, B, W; the embedding 0. The
 * optimizer's few operations per parameter are not counted. */
double pm_train_step_flops(const pm_train_cfg *cfg);

/* ---- BLAS kernels -------------------------------------------------------------
 * OpenBLAS picks its kernels from the CPU model when it loads; on a CPU it
 * does not know it falls back to slow generic (Prescott) kernels. */

/* The OPENBLAS_CORETYPE this CPU should use ("SkylakeX", "Haswell") if
 * OpenBLAS fell back to Prescott on a CPU with AVX-512 or AVX2 and the user
 * did not set OPENBLAS_CORETYPE; else NULL. */
const char *pm_blas_better_coretype(void);

/* (A program's main sets OPENBLAS_CORETYPE to this and re-executes itself:
 * the pipemem binary does, in src/cli/reexec.c; the library never execs.) */

/* ---- checkpoints ------------------------------------------------------------
 * File format, version 4, little-endian, floats IEEE-754 binary32:
 *   offset size field
 *        0    8 magic "PMCKPT01"
 *        8    4 version (u32) = PM_CKPT_VERSION
 *       12    4 header bytes (u32) = PM_CKPT_HEADER
 *       16   20 model: vocab, ctx, dim, heads, layers (i32 each)
 *       36    4 batch (i32)
 *       40    4 microbatches (i32)
 *       44    4 total steps (i32)
 *       48    4 warm-up steps (i32)
 *       52   28 lr, lr_min_frac, beta1, beta2, eps, weight_decay, grad_clip (f32)
 *       80    8 steps completed (u64)
 *       88    8 seed (u64): init and data positions
 *       96    8 data position: train windows drawn (u64)
 *      104    8 RNG state (u64): the loader's seed (its generator is
 *               counter-based, so seed + position is its whole state)
 *      112    8 parameter count n (u64)
 *      120    8 data identity: pm_tokens_identity of the train tokens
 *               (version 1 has 0 here: no identity, not checked)
 *      128  4n parameters, layer slab order (pm_gpt.h)
 *     +4n   4n AdamW first moments m
 *     +4n   4n AdamW second moments v
 *     +4n    8 tokenizer length L (u64; 0: the data is bytes)
 *     +8     L the tokenizer model (SentencePiece), so `sample` decodes on its own
 *     +L    24 slab checksums of the parameters, m and v (u64 each)
 *     +24    8 FNV-1a-64 of every byte outside the three slabs, in file order
 *               (header, tokenizer length and model, slab checksums)
 * A slab's checksum is additive, so each writer or reader of a range computes
 * its part and the parts of any partition add up to it: with b_i the 32 bits
 * of the slab's element i (0-based index within the slab), modulo 2^64,
 *   sum = SUM_i fmix64((i * 0x9E3779B97F4A7C15) XOR b_i)
 *   fmix64(k) = k ^= k >> 33, k *= 0xff51afd7ed558ccd, k ^= k >> 33,
 *               k *= 0xc4ceb9fe1a85ec53, k ^= k >> 33   (MurmurHash3's finalizer)
 * The index in the mix makes moved or swapped values count. Versions 1 to 3
 * are read, not written: they have no slab checksums and end in one FNV-1a-64
 * of every preceding byte; version 3 has the tokenizer section after v,
 * versions 1 and 2 end with v. Gradients are not stored: every step starts
 * from zero.
 *
 * Writing in parts (a pipeline's devices each write their own layers' ranges,
 * with ZeRO-1 their own pieces of the moments): the root pm_ckpt_create()s a
 * temporary (pm_tmp_open) the size of the whole file, all zero (its header is
 * not valid until the commit, so a crash never leaves a file that reads as a
 * checkpoint); every writer, a thread or a process on any machine sharing the
 * file system, pm_ckpt_write_part()s its ranges (pwrite at their offsets,
 * fsync) and gets each range's part of its slab's checksum; once every writer
 * succeeded the root adds the parts and pm_ckpt_commit()s (header, tokenizer,
 * checksums, fsync, rename over PATH, directory fsync), or after any failure
 * pm_ckpt_abandon()s. PATH holds its old content or the whole new checkpoint,
 * never a mix. pm_ckpt_save is these steps for a whole trainer.
 *
 * Reading in parts: pm_ckpt_info_read() verifies the header, the tokenizer and
 * the checksums' FNV (version 4; cheap) or the whole file (versions 1 to 3);
 * then each reader pm_ckpt_read_part()s its ranges, the caller adds the parts
 * and pm_ckpt_check_sums() compares the slabs read whole. pm_ckpt_load is
 * these steps for a whole trainer. */
#define PM_CKPT_MAGIC "PMCKPT01"
#define PM_CKPT_VERSION 4u
#define PM_CKPT_HEADER 128

/* Slabs of a checkpoint, in file order; PM_CKPT_MASK(s) selects one. */
enum { PM_CKPT_PARAMS, PM_CKPT_M, PM_CKPT_V, PM_CKPT_SLABS };
#define PM_CKPT_MASK(s) (1u << (s))
#define PM_CKPT_ALL 7u

/* What a checkpoint holds besides the slabs. */
typedef struct {
    pm_train_cfg cfg;      /* the run's configuration (n = pm_gpt_num_params(&cfg.model)) */
    int64_t step;          /* optimizer steps completed */
    uint64_t data_pos;     /* train windows drawn */
    uint64_t data_seed;    /* the train loader's seed */
    uint64_t data_id;      /* pm_tokens_identity of the train tokens (0: unknown) */
    const void *tok_model; /* the tokenizer model (borrowed; NULL with tok_len 0: bytes) */
    size_t tok_len;
} pm_ckpt_meta;

/* A trainer's metadata (tok_model borrowed from it). */
pm_ckpt_meta pm_ckpt_meta_of(const pm_trainer *t);
/* A training loop state's metadata (tok_model borrowed from it). */
pm_ckpt_meta pm_train_state_meta(const pm_train_state *st);

/* Whether path can take a checkpoint: a regular file or a new name in a
 * writable directory (a directory, device or FIFO is refused in one line).
 * Clears the temporaries killed writers left (pm_path_check_writable). */
pm_status pm_ckpt_check_path(const char *path, pm_err *err);

/* Writes t's checkpoint to path (create, three write_parts, commit): on
 * error path is unchanged. */
pm_status pm_ckpt_save(const pm_trainer *t, const char *path, pm_err *err);

/* Starts a checkpoint of meta at path: checks the path (pm_ckpt_check_path),
 * creates the temporary sized to the whole file and returns its name in
 * *tmp (pm_malloc'd: the caller pm_frees it after commit or abandon). On
 * error nothing was created and *tmp is NULL. */
pm_status pm_ckpt_create(const char *path, const pm_ckpt_meta *meta, char **tmp, pm_err *err);

/* Writes x[0 .. count) as elements first .. first+count-1 of slab (a
 * PM_CKPT_* slab) of a checkpoint of n_params floats per slab into the
 * temporary tmp, fsyncs it, and sets *sum to the range's part of the slab's
 * checksum. Safe to call concurrently for disjoint ranges, from threads or
 * processes. Errors (one line naming tmp) leave *sum unset; the root must
 * then abandon. */
pm_status pm_ckpt_write_part(const char *tmp, size_t n_params, int slab, size_t first,
                             const float *x, size_t count, uint64_t *sum, pm_err *err);

/* Finishes the checkpoint once every range of every slab was written:
 * meta must be the one given to create, sums[s] the sum of slab s's parts.
 * Writes the header, tokenizer and checksums, fsyncs, renames tmp over path
 * and fsyncs the directory. On error tmp is removed and path is unchanged
 * (unless only the directory's fsync failed: the message says so). */
pm_status pm_ckpt_commit(const char *path, const char *tmp, const pm_ckpt_meta *meta,
                         const uint64_t sums[PM_CKPT_SLABS], pm_err *err);

/* Removes the temporary (after a writer failed); path stays as it was.
 * NULL is a no-op. Does not free tmp. */
void pm_ckpt_abandon(const char *tmp);

/* The header of a checkpoint, believed only after the magic, version, size
 * and checksums passed: version 4's FNV of the bytes outside the slabs (the
 * slabs are verified by whoever reads them), versions 1 to 3's FNV of the
 * whole file (read through once, the slab checksums computed on the way). */
typedef struct {
    pm_train_cfg cfg;   /* as saved */
    int64_t step;       /* steps completed */
    uint64_t data_pos;  /* train windows drawn */
    uint64_t data_seed; /* the train loader's seed */
    size_t n_params;    /* floats per slab */
    uint32_t version;   /* file format version (1 to 4) */
    uint64_t data_id;   /* identity of the train tokens; 0 if unknown (version 1) */
    size_t tok_len;     /* bytes of the embedded tokenizer model (version 3 on; 0: bytes) */
    uint64_t tok_off;   /* file offset of the tokenizer model (version 3 on) */
    uint64_t size;      /* file bytes */
    uint64_t sums[PM_CKPT_SLABS]; /* slab checksums: stored (version 4), or
                                   * computed while the file was verified (1 to 3) */
} pm_ckpt_info;
pm_status pm_ckpt_info_read(const char *path, pm_ckpt_info *info, pm_err *err);

/* Whether a checkpoint's run is this one: the model config, batch,
 * microbatches, seed, lr, weight decay and the train data's identity (0 on
 * either side: unknown, not compared) must be equal, else PM_ERR_ARG naming
 * the field, both values and the option to pass. The total steps may differ (the
 * cosine then spans the new total). */
pm_status pm_ckpt_check_run(const char *path, const pm_ckpt_info *info, const pm_train_cfg *cfg,
                            uint64_t data_id, pm_err *err);

/* Whether continuing a checkpoint's run keeps its learning-rate schedule
 * and AdamW settings: opt.steps, opt.warmup, the cosine's floor, betas, eps
 * and clipping must be cfg's, else PM_ERR_ARG naming each field that
 * differs, what it was and what cfg has. */
pm_status pm_ckpt_check_schedule(const char *path, const pm_ckpt_info *info,
                                 const pm_train_cfg *cfg, pm_err *err);

/* A checkpoint checked whole before anything uses it: its header, this
 * run (pm_ckpt_check_run, pm_ckpt_check_schedule) and every slab's checksum
 * (the file read through once). *info as pm_ckpt_info_read gives it. */
pm_status pm_ckpt_verify(const char *path, const pm_train_cfg *cfg, uint64_t data_id,
                         pm_ckpt_info *info, pm_err *err);

/* Reads elements first .. first+count-1 of slab from path (info from
 * pm_ckpt_info_read) into dst, or only hashes them with dst NULL (to verify
 * before anything is overwritten), and sets *sum to the range's part of the
 * slab's checksum. Concurrent readers are fine. */
pm_status pm_ckpt_read_part(const char *path, const pm_ckpt_info *info, int slab, size_t first,
                            float *dst, size_t count, uint64_t *sum, pm_err *err);

/* Compares sums[s] (the parts of every reader of slab s, added) with the
 * checkpoint's for the slabs in mask (PM_CKPT_MASK bits: only slabs read
 * whole can be checked). A mismatch names the slab: corruption (version 4),
 * or a file that changed since it was verified (1 to 3). */
pm_status pm_ckpt_check_sums(const char *path, const pm_ckpt_info *info, unsigned mask,
                             const uint64_t sums[PM_CKPT_SLABS], pm_err *err);

/* Loads a checkpoint into an initialised trainer: info, check_run, every
 * slab hashed and checked, then read into the trainer (hashed again: a file
 * changed in between is reported, and the parameters are then unspecified).
 * Every other error comes before the trainer is touched: it is unchanged. */
pm_status pm_ckpt_load(pm_trainer *t, const char *path, pm_err *err);

/* The tokenizer model a checkpoint embeds: *model from pm_malloc (caller
 * frees), NULL and *len 0 when the model was trained on bytes. */
pm_status pm_ckpt_load_tokenizer(const char *path, void **model, size_t *len, pm_err *err);

/* Loads only the parameters (for sampling), checked against their checksum:
 * *params is pm_malloc'd (info->n_params floats, caller frees). */
pm_status pm_ckpt_load_params(const char *path, pm_ckpt_info *info, float **params,
                              pm_err *err);

#endif
