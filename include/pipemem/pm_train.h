/* pm_train.h: training on one device: AdamW on flat float slabs, the
 * learning-rate schedule, global gradient-norm clipping, the trainer (steps
 * of K accumulated microbatches, validation) and checkpoints. Implemented in
 * src/train/.
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
 * element (of the mean-loss gradient), summed in one order every trainer
 * shares (one device, any pipeline, model selection: the same bits);
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

/* ---- single-device trainer ------------------------------------------------
 * A step: zero the gradient slab; for each of K microbatches (B/K sequences
 * of T = ctx tokens, drawn from the train loader in order) run the whole
 * model's forward+backward with loss scale 1/K, accumulating into the slab;
 * the step's loss is the mean of the K microbatch losses (double, in order);
 * then global-norm clipping and AdamW per tensor (decay as above).
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
/* 1 if field f takes integers only. */
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
 * longer than the run is the run; then the whole configuration must be one
 * that can be trained (the model's dimensions fit one another, micro
 * divides batch, the warm-up is at most the steps), else PM_ERR_ARG naming
 * the field. *c is written only on success. */
pm_status pm_train_cfg_make(pm_train_cfg *c, const pm_train_settings *s, pm_err *err);

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

/* Checks that cfg can be trained (as pm_train_cfg_make), that
 * pm_train_mem_bytes fits in device_mem bytes, one device's budget (0:
 * none), and in this machine's physical memory (PM_ERR_MEMLIMIT names both
 * figures), that the train tokens hold ctx+1 tokens, then allocates and
 * initialises the parameters from cfg->seed. `train` is borrowed for the
 * trainer's life. On error *t is zeroed. */
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

/* An evaluation's loss is the mean over its microbatches of B/K windows of
 * the validation tokens, drawn from a loader seeded with cfg.seed ^
 * PM_VAL_SEED and restarted every time, so each evaluation sees the same
 * text. */
#define PM_VAL_SEED 0x76616c6964617465ull

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
    /* One optimizer step on inp, tgt (B, ctx), microbatch k rows k*B/K ..
     * (k+1)*B/K, as the single-device trainer's step (above). */
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

/* The single-device driver: t trains itself (its step count follows the
 * loop's; a save records the state's data position). */
pm_train_driver pm_trainer_driver(pm_trainer *t,
                                  void (*report)(void *ctx, const pm_loop_event *ev),
                                  void *report_ctx);

/* Training FLOPs of one step: K times the model's on (B/K, ctx), the
 * matrix products as the model computes them (2*M*N*K each). With N = (B/K)*T
 * tokens per microbatch, per block: F 24 N C^2 + 4 (B/K) T^2 C (QKV, proj,
 * MLP; full T x T scores and weighted sums), B 24 N C^2 + 8 (B/K) T^2 C,
 * W 24 N C^2; the head 2 N C V in each of F, B, W; the embedding 0. The
 * optimizer's few operations per parameter are not counted. */
double pm_train_step_flops(const pm_train_cfg *cfg);

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
 * A pipeline's devices write and read a checkpoint in parts, each its own
 * layers' ranges (under ZeRO-1 its own pieces of the moments), no process
 * holding the whole model; written through a temporary the size of the
 * whole file whose header is valid only after the commit, PATH holds its
 * old content or the whole new checkpoint, never a mix, whatever fails or
 * is killed. */
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

/* A training loop state's metadata (tok_model borrowed from it). */
pm_ckpt_meta pm_train_state_meta(const pm_train_state *st);

/* Whether path can take a checkpoint: a regular file or a new name in a
 * writable directory (a directory, device or FIFO is refused in one line).
 * Clears the temporaries killed writers left (pm_path_check_writable). */
pm_status pm_ckpt_check_path(const char *path, pm_err *err);

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
/* The steps completed that the checkpoint at path says it holds, -1 if
 * there is none (no file, or no checkpoint's magic); not verified beyond
 * the magic. Async-signal-safe (open, pread, close only), for a line a
 * signal handler prints. */
int64_t pm_ckpt_peek_step(const char *path);

/* A guard around the rename that replaces a checkpoint, for a program whose
 * signal handler names the checkpoint (pipemem under mpirun, through
 * pm_ckpt_peek_step) and must not see it replaced after it spoke. While one
 * is set, every commit (pm_pipe_save, pm_train_loop's saves) calls
 * enter(ctx, path, err) once the temporary is whole and synced, right
 * before the rename, and leave(ctx) right after it, or after a refusal,
 * on the committing thread. enter returns PM_OK to let the rename go
 * ahead; any other status refuses it: the temporary is removed, path stays
 * as it was, and the save fails with that status and enter's message. */
typedef struct {
    pm_status (*enter)(void *ctx, const char *path, pm_err *err);
    void (*leave)(void *ctx);
    void *ctx; /* theirs */
} pm_ckpt_guard;
/* Sets the guard (g borrowed until the next call; NULL removes it), while
 * no checkpoint is being committed. */
void pm_ckpt_set_guard(const pm_ckpt_guard *g);

/* A checkpoint checked whole before anything uses it: its header, this
 * run (the model, batch, microbatches, seed, lr, weight decay and the train
 * data's identity must be cfg's and data_id's, 0 on either side not
 * compared; continuing must keep the learning-rate schedule and AdamW
 * settings; each mismatch named, with the option to pass) and every slab's
 * checksum (the file read through once). *info as pm_ckpt_info_read gives
 * it. */
pm_status pm_ckpt_verify(const char *path, const pm_train_cfg *cfg, uint64_t data_id,
                         pm_ckpt_info *info, pm_err *err);

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
