/* pm_gpt.h: the GPT model: its configuration, its parameters as one slab,
 * the whole model's forward on one device (evaluation, sampling), and the
 * compute threads and OpenBLAS kernels every pass runs on. The layers'
 * split backward passes, which the trainers and the pipeline run, are the
 * library's own (src/model/passes.h).
 *
 * Architecture (GPT-2 style, no dropout): token embedding + learned position
 * embedding; L pre-LayerNorm blocks (LN, causal multi-head attention with a
 * fused QKV projection, output projection, residual; LN, MLP 4C with
 * tanh-GELU, residual); final LN; output projection (no bias, NOT tied to the
 * embedding); mean cross-entropy. LayerNorm eps is 1e-5.
 *
 * Layers: index 0 = embedding, 1..L = blocks, L+1 .. L+P = the head in P
 * parts (cfg.head_parts, 0 meaning 1). A pipeline stage is any contiguous
 * range of layers. The parameters are one slab of pm_gpt_num_params
 * floats, layer after layer with no padding, so a range of layers owns one
 * contiguous slice of parameters, gradients and optimizer state. Inside a
 * layer the tensors follow PyTorch's names and shapes (Linear weights are
 * stored (out, in) row-major exactly like torch.nn.Linear.weight):
 * embedding wte.weight (V,C), wpe.weight (ctx,C); block i "h.{i-1}." ln_1,
 * attn.c_attn (3C,C: q of every head, then k, then v), attn.c_proj (C,C),
 * ln_2, mlp.c_fc (4C,C), mlp.c_proj (C,4C), each weight then its bias;
 * head ln_f.weight, ln_f.bias, lm_head.weight (V,C). The head's parts
 * compute bitwise what one part computes: they are a placement choice (a
 * big vocabulary's head cut across pipeline stages), not a model change.
 *
 * Activation memory is linear in T: attention runs over tiles with an
 * online softmax, the head over tiles of the vocabulary; no buffer of T x T
 * or (B,T,V) floats exists.
 *
 * Initialisation, from a seed: N(0, 0.02) for wte, wpe, c_attn, c_fc,
 * lm_head weights; N(0, 0.02/sqrt(2L)) for attn.c_proj and mlp.c_proj
 * weights; biases 0; LayerNorm weight 1, bias 0. Random numbers: PCG32
 * (O'Neill, XSH-RR, multiplier 6364136223846793005, pm_gpt_rng) seeded per
 * tensor with state = seed, stream = layer * 64 + tensor index; normals by
 * Box-Muller in double from two 32-bit draws, u1 = (a + 1) / 2^32,
 * u2 = b / 2^32, z = sqrt(-2 ln u1) cos(2 pi u2) (one normal per pair).
 * Each layer's init is independent of the others, so a stage initialises
 * only its own layers; a head part draws lm_head's stream from its first
 * row on, so the parts hold exactly the one-part head's numbers.
 *
 * Numerics: every matrix product is an OpenBLAS cblas_sgemm (the head's
 * tiles included) except attention's small tile products, which on CPUs
 * with AVX-512 run on pipemem's own register-tile kernel (OpenBLAS
 * elsewhere); softmax and cross-entropy are fused into the tiles; no
 * -ffast-math. Same inputs -> bitwise same outputs, for any thread count.
 *
 * Threads: pm_blas_threads(n) gives the CALLING thread n compute threads:
 * itself plus a pool of n - 1 persistent workers owned by that thread
 * (created on its first parallel kernel, joined when it changes n or
 * exits). Every pass this thread runs splits its work into tasks on that
 * pool: big products by blocks of output rows (or columns), attention by
 * (sequence, head), elementwise kernels by rows; each product task calls a
 * single-threaded sgemm (attention's tiles: pipemem's own kernel on
 * AVX-512), since OpenBLAS itself is kept at one thread process-wide. Pools are per thread, so several device threads in one
 * process (the pipeline runtime) each drive their own workers with no
 * shared lock between them. Task boundaries depend only on the shapes,
 * never on n, which is why results do not depend on n. A thread that never
 * calls pm_blas_threads computes on itself alone. Any direct cblas call
 * made after pm_blas_threads runs single-threaded (OpenBLAS is at one
 * thread); call openblas_set_num_threads yourself if you need otherwise.
 * Idle workers spin ~0.1-0.3 ms after a kernel, then sleep. */
#ifndef PM_GPT_H
#define PM_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_util.h"

/* ---- configuration --------------------------------------------------------- */

typedef struct {
    int32_t vocab;  /* token ids 0 .. vocab-1 */
    int32_t ctx;    /* maximum sequence length (rows of wpe) */
    int32_t dim;    /* model width C */
    int32_t heads;  /* attention heads; must divide dim */
    int32_t layers; /* transformer blocks L (>= 1) */
    int32_t head_parts; /* layers the head is cut into (0 or 1: one); at most one
                         * per group of PM_HEAD_GROUP rows of lm_head; the same
                         * numbers whatever it is */
} pm_gpt_config;

#define PM_HEAD_GROUP 4096 /* lm_head rows per group of the vocabulary projection */

typedef enum { PM_LAYER_EMBED, PM_LAYER_BLOCK, PM_LAYER_HEAD, PM_LAYER_KIND_COUNT } pm_layer_kind;

int pm_gpt_num_layers(const pm_gpt_config *cfg); /* L + 1 + head parts */
int pm_gpt_head_parts(const pm_gpt_config *cfg);  /* head_parts, 1 for 0 */
size_t pm_gpt_num_params(const pm_gpt_config *cfg); /* floats of the whole slab */

/* The PCG32 generator of the initialisation (above), for a caller's own
 * draws from a seed (sampling). */
typedef struct {
    uint64_t state, inc;
} pm_gpt_rng;
void pm_gpt_rng_seed(pm_gpt_rng *r, uint64_t seed, uint64_t stream);
double pm_gpt_rng_uniform(pm_gpt_rng *r); /* [0, 1), 32 bits */

/* ---- one layer's pass on one microbatch, by the numbers ---------------------- */

typedef struct {
    size_t saved;     /* bytes F keeps alive in `saved` (kept after F) */
    size_t saved_w;   /* bytes kept after B: the prefix of `saved` W reads */
    size_t scratch_f; /* transient bytes of `scratch` during F */
    size_t scratch_b; /* ... during B */
    size_t scratch_w; /* ... during W (BW: max of b and w) */
    size_t in;        /* bytes of F's input message (tokens for the embedding; (B,T,C+3)
                       * floats on a head part after the first) */
    size_t out;       /* bytes of F's output message (0 for the head's last part, (B,T,C+3)
                       * floats for its earlier parts) */
    double flops_f;   /* floating-point operations of a trainer's F: matmuls only,
                       * 2*M*N*K each, as computed (causal attention skips tiles past
                       * the diagonal; a one-part head makes its logits in B, so 0
                       * there; an evaluation's F makes them: one product of N*C*V) */
    double flops_b;   /* ... of B (with what it recomputes: attention's scores; the
                       * head's logits, made there once for its loss and gradient) */
    double flops_w;   /* ... of W after a separate B (the head's logits again) */
    double flops_bw;  /* ... of B and W in one call (BW): flops_b + flops_w, but the
                       * head's logits made once, one product fewer */
    double flops_eval; /* ... of an F given a loss pointer (an evaluation): flops_f,
                        * but a one-part head makes its logits */
    double flops_model; /* the model's FLOPs of F + B + W: each product once, attention
                         * over exactly the T (T + 1) / 2 causal pairs (no recomputation,
                         * no masked entries); what a FLOP rate is counted in */
} pm_gpt_sizes;

/* ---- whole model on one device --------------------------------------------- */

/* Bytes of the workspace pm_gpt_forward needs for (B, T): every layer's
 * saved buffer, two messages ((B,T,C), or (B,T,C+3) with the head in parts)
 * and the largest scratch. A workspace sized for (B, T) also serves any
 * smaller T. 0 on overflow or a bad config. */
size_t pm_gpt_work_bytes(const pm_gpt_config *cfg, int B, int T);

/* Forward of all layers on B sequences of T tokens (int32 (B,T), 1 <= T <=
 * ctx) with the whole parameter slab; returns the mean loss over the B*T
 * targets (0 if targets is NULL). Afterwards pm_gpt_work_probs_row() gives
 * a token row's softmax probabilities (0 .. B*T-1; vocab floats into out),
 * made again from what the forward kept: a one-part head only. */
float pm_gpt_forward(const pm_gpt_config *cfg, int B, int T, const float *params,
                     const int32_t *tokens, const int32_t *targets, void *work);
void pm_gpt_work_probs_row(const pm_gpt_config *cfg, int B, int T, const float *params,
                           const void *work, size_t row, float *out);

/* ---- BLAS ------------------------------------------------------------------ */

/* Sets the number of compute threads of the calling thread (per thread;
 * default 1; n < 1 means 1, at most 16) and keeps OpenBLAS at one thread
 * process-wide (see "Threads" above). Results are bitwise the same for any
 * n. Cheap when n is unchanged. */
void pm_blas_threads(int n);

/* OpenBLAS picks its kernels from the CPU model when it loads; on a CPU it
 * does not know it falls back to slow generic (Prescott) kernels. The
 * OPENBLAS_CORETYPE this CPU should use ("SkylakeX", "Haswell") if OpenBLAS
 * fell back to Prescott on a CPU with AVX-512 or AVX2 and the user did not
 * set OPENBLAS_CORETYPE; else NULL. (A program's main sets
 * OPENBLAS_CORETYPE to this and re-executes itself: the pipemem binary
 * does, in src/cli/reexec.c; the library never execs.) */
const char *pm_blas_better_coretype(void);

#endif
