/* passes.h: the model as the library's trainers run it, private to the
 * library: each layer's forward (F), input-gradient (B) and weight-gradient
 * (W) passes on caller-owned buffers, their exact sizes, the layers'
 * parameters and initialisation, and the compute threads' loop. The
 * single-device trainer (src/train), the pipeline's executors
 * (src/runtime), model selection's shard passes (src/select) and the
 * planner's byte counts (src/plan) are built on it; a user trains through
 * them (pm_train.h, pm_runtime.h, pm_select.h), never a layer at a time.
 * The model itself is pm_gpt.h's.
 *
 * Passes of one microbatch (B sequences of T tokens, 1 <= T <= ctx):
 *   F  pm_gpt_layer_f : forward. Reads the input from a caller buffer, keeps
 *      what backward needs in `saved` (caller-owned, sizes.saved bytes),
 *      writes the output to a caller buffer.
 *   B  pm_gpt_layer_b : gradient of the input; turns `saved` into what W
 *      needs, which is its prefix saved[0 .. sizes.saved_w): the caller may
 *      release bytes saved[sizes.saved_w .. sizes.saved) after B.
 *   W  pm_gpt_layer_w : weight gradients, ADDED into the layer's gradient
 *      slice (beta = 1), so accumulation order = W call order. After W the
 *      whole saved buffer may be released. It takes the layer's parameters
 *      too: the head's W makes its logits again (it keeps no (B,T,V)).
 *   BW pm_gpt_layer_bw: B then W in one call; bitwise equal to B;W.
 * Byte accounting (exact, including internal 64-byte alignment padding):
 *   kept after F = sizes.saved, after B = sizes.saved_w, after W = 0,
 *   so released by B (saved - saved_w) + released by W (saved_w) = saved.
 *   saved_w <= saved for every layer, so one allocation of `saved` bytes
 *   at F can shrink to its prefix at B and be freed at W. The embedding has
 *   no input gradient: its F keeps the tokens and reserves a (B,T,C) slot
 *   where its B copies dout for W (so its saved_w == saved).
 * Scratch: each pass may use sizes.scratch_{f,b,w} bytes of `scratch`
 * (caller-owned, contents undefined before and after, may be shared by all
 * layers of a device; BW needs max(scratch_b, scratch_w)). The passes never
 * allocate. All pointers must be 4-byte aligned; 64 is better.
 *
 * Activation memory is linear in T: attention runs over tiles with an
 * online softmax and keeps one log-sum-exp per (sequence, head, row) beside
 * q, k, v and its output, its B recomputing each tile's scores; the head
 * keeps ln_f's output and a normaliser (max, sum) per token, making its
 * logits a row tile of PM_HEAD_ROWS tokens at a time (head.c). No buffer of
 * T x T or (B,T,V) floats exists, not even in scratch: the head's largest is
 * min(B T, PM_HEAD_ROWS) x V, whatever the context.
 *
 * Head parts: the vocabulary projection is computed in fixed tiles of lm_head
 * rows, always the same whatever the parts: per tile the logits, their row
 * max and sum of exponentials merged into a running (max, sum) in
 * vocabulary order (the loss's normaliser), and in the backward the input
 * gradient accumulated tile by tile from the last to the first. Part k
 * takes groups [k G / P, (k+1) G / P) of the G groups of PM_HEAD_GROUP rows
 * and the first part also ln_f, so any number of parts computes bitwise the
 * same as one: the parts are a placement choice (a big vocabulary's head can
 * be cut across pipeline stages), not a model change. Between parts the
 * message is (B,T,C+3) floats: forward ln_f's output, running max, sum and
 * the target's logit; backward the input gradient so far and the row's
 * normaliser (its max and sum of exponentials, then one unused float).
 *
 * Messages between layers (all caller-owned, contents (B,T,C) floats except
 * between head parts):
 *   embedding F: in = int32 tokens (B,T), out = (B,T,C)
 *   block F:     in = (B,T,C),            out = (B,T,C)
 *   head F:      in = (B,T,C) (first part) or (B,T,C+3), targets int32 (B,T)
 *                or NULL (every part), out = (B,T,C+3) or NULL on the last
 *                part, whose *loss = mean cross-entropy over the B*T tokens
 *                (0 if no targets). A trainer passes loss = NULL: a one-part
 *                head's F then only keeps ln_f's output, and its B makes the
 *                logits once for the loss, d lno and (BW) d W.
 *   head B, BW:  dout = NULL on the last part, else (B,T,C+3); din = (B,T,C)
 *                on the first part, else (B,T,C+3); scale multiplies d(loss)
 *                (pass 1/K when K microbatches make a step's mean loss); the
 *                last part sets *loss (if not NULL) to the mean cross-entropy,
 *                bitwise F's. Other layers ignore loss.
 *   block B:     dout = (B,T,C) (read only), din = (B,T,C)
 *   embedding B: dout = (B,T,C) (copied into saved), din = NULL
 * F copies its input into `saved`; `in` may be freed after F. If `in` equals
 * pm_gpt_layer_input_slot(), the copy is skipped (a stage can let the
 * previous layer's F write straight into the next layer's slot). din must
 * not overlap dout or saved. After a one-part head's F given a loss pointer
 * (or after its B), pm_gpt_head_probs_row() gives one row's softmax
 * probabilities (sampling).
 *
 * Usage for one microbatch through one layer:
 *   pm_gpt_sizes s;  pm_gpt_layer_sizes(&cfg, i, B, T, &s, &err);
 *   void *saved = malloc(s.saved), *scratch = malloc(max of s.scratch_*);
 *   pm_gpt_layer_f(&cfg, i, B, T, P + off, x, NULL, y, NULL, saved, scratch);
 *   pm_gpt_layer_b(&cfg, i, B, T, P + off, dy, dx, 1.0f, NULL, saved, scratch);
 *   pm_gpt_layer_w(&cfg, i, B, T, P + off, G + off, saved, scratch);
 * (off = pm_gpt_layer_offset(&cfg, i); after B, bytes from s.saved_w on are free.)
 * Whole model, one device: pm_gpt_work_bytes() then pm_gpt_forward_backward().
 *
 * Parameters of layer i: params + pm_gpt_layer_offset(cfg, i) holds
 * pm_gpt_layer_params(cfg, i) floats, its tensors as pm_gpt_layer_tensors()
 * lists them; pm_gpt_init_layer fills them as pm_gpt.h says. */
#ifndef PM_MODEL_PASSES_H
#define PM_MODEL_PASSES_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_gpt.h"

/* x86-64 built by GCC or clang: target attributes, AVX-512 intrinsics and
 * __builtin_cpu_supports are there, so code for a wider ISA is compiled
 * beside the baseline and picked at run time by the CPU. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PM_X86_GNU 1
#endif

/* Checks every field; one line naming the bad field and the fix. */
pm_status pm_gpt_config_check(const pm_gpt_config *cfg, pm_err *err);

extern const char *const pm_layer_kind_names[PM_LAYER_KIND_COUNT]; /* "embed", "block", "head" */
pm_layer_kind pm_gpt_layer_kind(const pm_gpt_config *cfg, int layer);
int pm_gpt_head_groups(const pm_gpt_config *cfg); /* ceil(vocab / PM_HEAD_GROUP) */
/* A head layer's part index and its lm_head rows [*r0, *r1). */
int pm_gpt_head_rows(const pm_gpt_config *cfg, int layer, size_t *r0, size_t *r1);

/* ---- parameters ------------------------------------------------------------ */

size_t pm_gpt_layer_params(const pm_gpt_config *cfg, int layer); /* floats */
size_t pm_gpt_layer_offset(const pm_gpt_config *cfg, int layer); /* floats before it */

#define PM_GPT_MAX_TENSORS 12
typedef struct {
    char name[48];    /* PyTorch name: "wte.weight", "h.0.attn.c_attn.weight", "lm_head.weight" */
    int ndim;         /* 1 or 2 */
    int64_t shape[2]; /* PyTorch shape (Linear: out, in); shape[1] = 1 when ndim = 1 */
    size_t offset;    /* float offset inside the layer's slice */
    size_t numel;     /* floats */
    int decay;        /* 1 for block matrices and lm_head (AdamW decays them), else 0 */
    float init_std;   /* std of the normal init; 0 = constant init_value */
    float init_value; /* LayerNorm weight 1; biases 0 */
} pm_gpt_tensor;

/* Fills out[0..n) with the layer's tensors in slab order, returns n.
 * Block i (layer i, 1-based) is named "h.{i-1}.*" like PyTorch's ModuleList:
 * ln_1.weight, ln_1.bias, attn.c_attn.weight (3C,C), attn.c_attn.bias,
 * attn.c_proj.weight (C,C), attn.c_proj.bias, ln_2.weight, ln_2.bias,
 * mlp.c_fc.weight (4C,C), mlp.c_fc.bias, mlp.c_proj.weight (C,4C),
 * mlp.c_proj.bias. Embedding: wte.weight (V,C), wpe.weight (ctx,C).
 * Head: ln_f.weight, ln_f.bias, lm_head.weight (V,C). c_attn rows are
 * q (all heads), then k, then v; head h uses columns h*C/H .. (h+1)*C/H. */
int pm_gpt_layer_tensors(const pm_gpt_config *cfg, int layer, pm_gpt_tensor out[PM_GPT_MAX_TENSORS]);

/* Seeded initialisation (pm_gpt.h); layer_params is the layer's slice,
 * params the whole slab. */
void pm_gpt_init_layer(const pm_gpt_config *cfg, int layer, uint64_t seed, float *layer_params);
void pm_gpt_init(const pm_gpt_config *cfg, uint64_t seed, float *params);

/* The rest of the PCG32 generator (pm_gpt.h). */
uint32_t pm_gpt_rng_u32(pm_gpt_rng *r);
double pm_gpt_rng_normal(pm_gpt_rng *r);  /* N(0,1), Box-Muller as pm_gpt.h says */

/* ---- sizes of one microbatch's passes -------------------------------------- */

/* Exact sizes (pm_gpt_sizes) for `layer` on a microbatch of B sequences of
 * T tokens. PM_ERR_ARG for a bad config, layer, B < 1 or T outside
 * 1..ctx; on error *out is zeroed. Pure: allocates nothing. */
pm_status pm_gpt_layer_sizes(const pm_gpt_config *cfg, int layer, int B, int T, pm_gpt_sizes *out,
                             pm_err *err);

/* Where F keeps its copy of the input inside `saved` (tokens for the
 * embedding; (B,T,C+3) floats on a head part after the first; (B,T,C)
 * floats otherwise). */
void *pm_gpt_layer_input_slot(const pm_gpt_config *cfg, int layer, int B, int T, void *saved);

/* The softmax probabilities of token row `row` (0 .. B*T-1; vocab floats
 * into out) after the head's F, before its B: its logits made again from
 * what F kept (lp: the head's parameters). A one-part head only
 * (PM_ASSERT). */
void pm_gpt_head_probs_row(const pm_gpt_config *cfg, int B, int T, const float *lp,
                           const void *saved, size_t row, float *out);

/* ---- passes ------------------------------------------------------------------
 * lp / lg: the layer's slice of the parameter / gradient slab.
 * Arguments not used by a layer kind must be NULL (see the file comment).
 * Bad arguments are bugs: they hit PM_ASSERT. */

void pm_gpt_layer_f(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const void *in, const int32_t *targets, float *out, float *loss, void *saved,
                    void *scratch);
void pm_gpt_layer_b(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    const float *dout, float *din, float scale, float *loss, void *saved,
                    void *scratch);
void pm_gpt_layer_w(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp,
                    float *lg, void *saved, void *scratch);
void pm_gpt_layer_bw(const pm_gpt_config *cfg, int layer, int B, int T, const float *lp, float *lg,
                     const float *dout, float *din, float scale, float *loss, void *saved,
                     void *scratch);

/* Times one layer's F, B and W (t[0..2], seconds) on one microbatch of its
 * own buffers, on the calling thread with one compute thread (as a device
 * thread runs), best of two runs. Allocates about one layer's parameters
 * and saved buffer. PM_ERR_ARG for a bad layer or shape, PM_ERR_NOMEM. */
pm_status pm_gpt_time_layer(const pm_gpt_config *cfg, int layer, int B, int T, double t[3],
                            pm_err *err);

/* ---- whole model on one device --------------------------------------------- */

/* F of every layer, then BW from the head down (loss gradient times scale),
 * ADDING into grads (the whole slab), in a workspace of pm_gpt_work_bytes.
 * Returns the microbatch's mean loss. */
float pm_gpt_forward_backward(const pm_gpt_config *cfg, int B, int T, const float *params,
                              float *grads, const int32_t *tokens, const int32_t *targets,
                              float scale, void *work);

/* The model's floating-point operations of one forward+backward of the
 * whole model on (B, T): the sum of every layer's flops_model. */
double pm_gpt_flops(const pm_gpt_config *cfg, int B, int T);

/* ---- the compute threads (pm_blas_threads) ------------------------------------ */

int pm_blas_threads_get(void); /* the calling thread's compute threads */
/* Whether this CPU runs the 16-float (AVX-512) kernels: the model's and the
 * optimizer's (their other copies give the same bits). */
int pm_k_v16(void);

/* Runs fn(arg, lo, hi) over [0, n) cut into pieces of `chunk` items (the
 * last shorter) on the calling thread's compute threads, returning when all
 * are done; one thread runs the whole range as one piece. For work whose
 * result cannot depend on the cut (each item computed alone), such as the
 * optimizer's update. fn must not call back into the same thread's passes. */
void pm_gpt_par_for(size_t n, size_t chunk,
                    void (*fn)(const void *arg, size_t lo, size_t hi), const void *arg);

#endif
