/* exec.c: the executor: one device's thread for one step. It walks the
 * device's pass list and does exactly what each pass says, nothing else.
 *
 * Per pass (stage s holding layers a..b-1, microbatch j):
 *   F   take the input (tokens if s == 0, else the received activation),
 *       allocate every layer's `saved` in the arena, run the layers' F (each
 *       writing straight into the next layer's input slot, the last into a
 *       send buffer), send the output to stage s+1's device (itself at a V
 *       turn: same path). An evaluation's head gives the loss here.
 *   B   take the output gradient (none on the last stage: the loss, scaled
 *       1/m), run the layers' B from b-1 down to a, shrink each saved to its
 *       W prefix, send the input gradient to stage s-1's device. In
 *       training the head's B gives the loss (a one-part head makes its
 *       logits there, not in F): check it is finite.
 *   W   add each layer's weight gradient into the device's gradient slab and
 *       release its saved. Weight passes of a stage come in microbatch order
 *       (checked at init), so accumulation order is the single-device one.
 *   BW  the B part then the W part (bitwise B;W = BW per the model; a head
 *       layer's B and W run as one call in the B part, making each tile of
 *       logits once); the input gradient leaves at the end of the fused
 *       pass, which is when the schedule (and the simulator) says it is
 *       ready.
 * Receives are posted ahead: the current pass's and the next one's, into two
 * receive slots. Sends use two alternating buffers, each waited for before
 * reuse (the threads transport copies at once; MPI need not).
 * With replicas, a stage's gradients are summed across them right after
 * its last weight pass (reduce_start: in chunks, by rendezvous from the
 * gradient slab); the totals are waited for after the passes.
 * Each stage's sums of squares per unit (pm_optim_norm's definition) are
 * made as soon as its gradients are final; after the passes they run as a
 * chain through the stages in layer order (device of stage 0 starts from
 * 0.0, each adds its units' sums in order and passes the running double
 * on), which is exactly pm_optim_norm over the whole slab; the last stage's
 * device sends the norm to every device; each device steps AdamW on its
 * own layers.
 *
 * Errors: a failing pass formats one line naming device, stage, microbatch
 * and pass, aborts the transport (waking every device) and returns; a device
 * that sees the abort stops at its next transport call or pass boundary.
 *
 * Device state machine (one step):
 *   passes --(pass i done, i+1 < len: run_pass)--> passes
 *   passes --(a stage's last W with replicas: reduce_start)--> passes
 *   passes --(last pass done: wait sends, reduce_finish)--> norm --(norm_chain)--> update
 *   update --(adamw_dev)--> done
 *   any    --(a pass fails or the transport is aborted)--> failed
 * Invariants: at most two receives are posted (rxpass[] names their passes,
 * in list order); a posted receive's buffer is not touched until its wait
 * returns; a send buffer is reused only after its send completed (a
 * gradient chunk handed on by rendezvous too: the totals' receive into it
 * is posted only then; the last replica's totals stay unchanged until
 * reduce_finish saw their sends done); the device writes only its own gradient slab, arena, message buffers and its
 * row of the pipe's timing tables (loss_mb: only the head's device). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "model/passes.h"
#include "train/optim.h"
#include "plan/arena.h"
#include "plan/devmem.h"
#include "plan/query.h"
#include "transport.h"

static int stage_dev(const pm_pipe *pp, int s) { return pm_sched_stage_device(&pp->sched, s); }

static void *saved_ptr(pm_pipe_dev *dv, int l, int j) {
    return pm_devmem_saved(&dv->mem, l, j, dv->pp->m);
}

/* ---- messages ------------------------------------------------------------------ */

/* Whether pass ps receives a message, and from whom with which tag. */
static int pass_msg(const pm_pipe_dev *dv, const pm_pass *ps, int *peer, int *tag) {
    const pm_pipe *pp = dv->pp;
    if (ps->kind == PM_PASS_F && ps->stage > 0) {
        *peer = pm_dev_peer(dv, ps->stage - 1), *tag = pm_tag_f(pp, ps->stage, ps->mb);
        return 1;
    }
    if ((ps->kind == PM_PASS_B || ps->kind == PM_PASS_BW) && ps->stage < pp->S - 1) {
        *peer = pm_dev_peer(dv, ps->stage + 1), *tag = pm_tag_b(pp, ps->stage, ps->mb);
        return 1;
    }
    return 0;
}

/* Posts receives in list order into free slots (at most two ahead). */
static pm_status post_ahead(pm_pipe_dev *dv) {
    const pm_pipe *pp = dv->pp;
    const pm_pass *ps = dv->list;
    int64_t len = dv->len;
    for (int k = 0; k < 2; k++) {
        if (dv->rxpass[k] >= 0) continue;
        int peer = 0, tag = 0;
        while (dv->scan < len && !pass_msg(dv, &ps[dv->scan], &peer, &tag)) dv->scan++;
        if (dv->scan >= len) return PM_OK;
        pm_status st = pm_tp_irecv(dv->tp, peer, tag, dv->rx[k], pm_msg_bytes(pp), &dv->rxreq[k]);
        if (st) return st;
        dv->rxpass[k] = dv->scan++;
    }
    return PM_OK;
}

/* Waits for pass i's message; returns its slot's buffer. */
static pm_status take_msg(pm_pipe_dev *dv, int64_t i, float **buf) {
    for (int k = 0; k < 2; k++)
        if (dv->rxpass[k] == i) {
            *buf = dv->rx[k];
            return pm_tp_wait(dv->tp, &dv->rxreq[k]);
        }
    PM_ASSERT(0 && "a pass's receive was not posted");
    return PM_ERR_TRANSPORT;
}

static void done_msg(pm_pipe_dev *dv, int64_t i) {
    for (int k = 0; k < 2; k++)
        if (dv->rxpass[k] == i) dv->rxpass[k] = -1;
}

/* The send buffer to fill next (its previous send completed first). */
static pm_status tx_buf(pm_pipe_dev *dv, float **buf) {
    *buf = dv->tx[dv->txnext];
    return pm_tp_wait(dv->tp, &dv->txreq[dv->txnext]);
}

static pm_status tx_send(pm_pipe_dev *dv, int peer, int tag) {
    int k = dv->txnext;
    dv->txnext ^= 1;
    return pm_tp_isend(dv->tp, peer, tag, dv->tx[k], pm_msg_bytes(dv->pp), &dv->txreq[k]);
}

/* ---- passes ---------------------------------------------------------------------- */

typedef struct {
    pm_pipe_dev *dv;
    int64_t i;         /* index in the device's list */
    const pm_pass *ps; /* the pass */
    int fault;         /* pm_fault_kind injected into this pass */
    double t_start;    /* compute start (after the input arrived) */
    double t_mid;      /* BW: end of the B part */
} pass_ctx;

static pm_status pass_fail(pass_ctx *x, pm_status st, const char *why) {
    pm_pipe_dev *dv = x->dv;
    pm_errf(&dv->err, st, "device %d, stage %d, microbatch %d, pass %s (#%lld on the device): %s",
            dv->g, x->ps->stage, x->ps->mb, pm_pass_names[x->ps->kind], (long long)x->i, why);
    pm_tp_abort(dv->tp, st, dv->err.msg);
    return st;
}

/* Token ids outside the vocabulary are bad input, not a reason to index
 * out of bounds: the first one is named. */
static int bad_token(const int32_t *t, size_t n, int32_t vocab, size_t *at) {
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= vocab) {
            *at = i;
            return 1;
        }
    return 0;
}

static pm_status check_tokens(pass_ctx *x, const int32_t *t, size_t n, const char *what) {
    size_t at;
    int32_t vocab = x->dv->pp->cfg.model.vocab;
    if (!bad_token(t, n, vocab, &at)) return PM_OK;
    char why[160];
    snprintf(why, sizeof why, "%s id %d at position %zu of the microbatch is outside the "
             "vocabulary 0..%d", what, (int)t[at], at, (int)vocab - 1);
    return pass_fail(x, PM_ERR_ARG, why);
}

/* Runs stage s's layers forward for microbatch j from `in` (tokens on
 * stage 0): every layer writes its saved (allocated) and the next layer's
 * input slot, the last one `out` (NULL on the head, which computes *loss
 * if loss is not NULL: an evaluation's). */
static void stage_forward(pm_pipe_dev *dv, int s, int j, const void *in, float *out,
                          float *loss) {
    pm_pipe *pp = dv->pp;
    const pm_gpt_config *c = &pp->cfg.model;
    int a = pp->first[s], b = pp->first[s + 1], head = pm_gpt_num_layers(c) - 1;
    size_t mtok = (size_t)pp->mbsz * (size_t)pp->T;
    for (int l = a; l < b; l++) {
        void *sv = saved_ptr(dv, l, j);
        const void *lin = l == a ? in : pm_gpt_layer_input_slot(c, l, pp->mbsz, pp->T, sv);
        float *lout = l == head ? NULL
                      : l + 1 < b ? pm_gpt_layer_input_slot(c, l + 1, pp->mbsz, pp->T,
                                                            saved_ptr(dv, l + 1, j))
                                  : out;
        const float *lp = dv->sp[s] + (pm_gpt_layer_offset(c, l) - pm_gpt_layer_offset(c, a));
        /* every head part reads the targets (the target's logit, the one-hot) */
        int vocab = pm_gpt_layer_kind(c, l) == PM_LAYER_HEAD;
        pm_gpt_layer_f(c, l, pp->mbsz, pp->T, lp, lin,
                       vocab && dv->tgt ? dv->tgt + (size_t)j * mtok : NULL, lout,
                       l == head ? loss : NULL, sv, dv->scratch);
    }
}

static pm_status arena_full(pass_ctx *x, int bad) {
    pm_pipe_dev *dv = x->dv;
    const pm_pipe *pp = dv->pp;
    char why[256];
    size_t need = bad < 0 ? pm_plan_keep_bytes(pp->pl, x->ps->stage) : pp->sz[bad].saved;
    char what[48];
    if (bad < 0) snprintf(what, sizeof what, "the kept input of stage %d", x->ps->stage);
    else snprintf(what, sizeof what, "layer %d", bad);
    snprintf(why, sizeof why, "activation arena full: %s needs %zu bytes with %zu of %zu live "
             "(the arena is sized from the predicted peak)", what, need, dv->mem.arena.live,
             dv->mem.arena.cap);
    return pass_fail(x, PM_ERR_MEMLIMIT, why);
}

static pm_status bad_loss(pass_ctx *x, float loss) {
    char why[256], hint[200];
    snprintf(why, sizeof why, "the loss is %g; %s", (double)loss,
             pm_optim_diverged_hint(&x->dv->pp->cfg.opt, "", hint, sizeof hint));
    return pass_fail(x, PM_ERR_NUMERIC, why);
}

static pm_status run_f(pass_ctx *x) {
    pm_pipe_dev *dv = x->dv;
    pm_pipe *pp = dv->pp;
    const pm_gpt_config *c = &pp->cfg.model;
    int s = x->ps->stage, j = x->ps->mb, a = pp->first[s], b = pp->first[s + 1], bad = 0;
    int head = pm_gpt_num_layers(c) - 1;
    size_t mtok = (size_t)pp->mbsz * (size_t)pp->T, keep = pm_plan_keep_bytes(pp->pl, s);
    const void *in = dv->inp + (size_t)j * mtok;
    float *rx = NULL, *out = NULL, loss = 0;
    int eval = pp->run == PM_RUN_EVAL;
    pm_status st = PM_OK;
    if (s > 0 && (st = take_msg(dv, x->i, &rx))) return st;
    if (rx) in = rx;
    if (a == 0 && (st = check_tokens(x, in, mtok, "token"))) return st;
    if (b - 1 > c->layers && dv->tgt &&
        (st = check_tokens(x, dv->tgt + (size_t)j * mtok, mtok, "target")))
        return st; /* the stage holds (a part of) the head */
    if (b - 1 != head && (st = tx_buf(dv, &out))) return st;
    x->t_start = pm_now();
    if (eval) pm_devmem_forward_layout(&dv->mem, s, j); /* nothing outlives the pass */
    else if (pm_devmem_pass(&dv->mem, x->ps, PM_MEM_PRE, &bad)) return arena_full(x, bad);
    if (keep && !eval)
        memcpy(pm_arena_ptr(&dv->mem.arena, dv->mem.koff[(size_t)s * pp->m + j]), in, keep);
    stage_forward(dv, s, j, in, out, eval ? &loss : NULL);
    if (!eval) pm_devmem_pass(&dv->mem, x->ps, PM_MEM_POST, &bad);
    done_msg(dv, x->i);
    if (x->fault == PM_FAULT_NAN) {
        if (out) out[0] = NAN;
        else loss = NAN;
    }
    if (b - 1 == head && pp->probs && eval) { /* sampling: the last position's row */
        pm_gpt_head_probs_row(c, pp->mbsz, pp->T,
                              dv->sp[s] + (pm_gpt_layer_offset(c, head) - pm_gpt_layer_offset(c, a)),
                              saved_ptr(dv, head, j), (size_t)pp->T - 1, pp->probs);
    }
    if (b - 1 == head) {
        /* an evaluation reports a bad loss (the caller decides); training
         * has it from B, unless a NaN was injected here */
        if (eval) pp->loss_mb[(size_t)dv->rep * pp->m + j] = loss;
        if (!eval && x->fault == PM_FAULT_NAN) return bad_loss(x, loss);
        return PM_OK;
    }
    return tx_send(dv, pm_dev_peer(dv, s + 1), pm_tag_f(pp, s + 1, j));
}

/* Recomputation: rebuilds stage s's saved for microbatch j from its kept
 * input (or the batch's tokens on stage 0). The same layers on the same
 * input give the same bytes, so B sees exactly what F saw. The stage's
 * output goes to bb[0], free until B starts; the head's loss is not
 * recorded again. */
static pm_status redo_forward(pass_ctx *x) {
    pm_pipe_dev *dv = x->dv;
    pm_pipe *pp = dv->pp;
    int s = x->ps->stage, j = x->ps->mb, bad = 0;
    size_t mtok = (size_t)pp->mbsz * (size_t)pp->T, keep = pm_plan_keep_bytes(pp->pl, s);
    if (pm_devmem_pass(&dv->mem, x->ps, PM_MEM_PRE, &bad)) return arena_full(x, bad);
    const void *in = keep ? pm_arena_ptr(&dv->mem.arena, dv->mem.koff[(size_t)s * pp->m + j])
                          : (const void *)(dv->inp + (size_t)j * mtok);
    stage_forward(dv, s, j, in, dv->bb[0], NULL);
    pm_devmem_pass(&dv->mem, x->ps, PM_MEM_REDONE, &bad);
    return PM_OK;
}

/* A fused BW pass does a head layer's B and W in one call (the model's BW:
 * bitwise B;W), in its B part; its W part skips the layer. */
static int fused_head(const pass_ctx *x, const pm_gpt_config *c, int l) {
    return x->ps->kind == PM_PASS_BW && pm_gpt_layer_kind(c, l) == PM_LAYER_HEAD;
}

static pm_status run_b(pass_ctx *x) {
    pm_pipe_dev *dv = x->dv;
    pm_pipe *pp = dv->pp;
    const pm_gpt_config *c = &pp->cfg.model;
    int s = x->ps->stage, j = x->ps->mb, a = pp->first[s], b = pp->first[s + 1], bad = 0;
    float *dout = NULL, *last = NULL, loss = 0;
    pm_status st;
    if (s < pp->S - 1 && (st = take_msg(dv, x->i, &dout))) return st;
    if (a > 0 && (st = tx_buf(dv, &last))) return st;
    x->t_start = pm_now();
    if (pp->sched.recompute && (st = redo_forward(x))) return st;
    float scale = 1.0f / (float)(pp->m * pp->dp);
    for (int l = b - 1, k = 0; l >= a; l--, k ^= 1) {
        float *din = l == 0 ? NULL : l == a ? last : dv->bb[k];
        size_t o = pm_gpt_layer_offset(c, l) - pm_gpt_layer_offset(c, a);
        if (fused_head(x, c, l)) /* each tile of logits made once, not twice */
            pm_gpt_layer_bw(c, l, pp->mbsz, pp->T, dv->sp[s] + o, dv->sg[s] + o, dout, din,
                            scale, &loss, saved_ptr(dv, l, j), dv->scratch);
        else
            pm_gpt_layer_b(c, l, pp->mbsz, pp->T, dv->sp[s] + o, dout, din, scale, &loss,
                           saved_ptr(dv, l, j), dv->scratch);
        dout = din;
    }
    done_msg(dv, x->i);
    pm_devmem_pass(&dv->mem, x->ps, PM_MEM_POST, &bad);
    if (b == pm_gpt_num_layers(c)) { /* the head's last part: the loss */
        pp->loss_mb[(size_t)dv->rep * pp->m + j] = loss;
        if (!isfinite(loss)) return bad_loss(x, loss);
    }
    if (x->fault == PM_FAULT_NAN && last) last[0] = NAN;
    /* a fused BW sends when the whole pass is done (run_pass) */
    if (a == 0 || x->ps->kind == PM_PASS_BW) return PM_OK;
    return tx_send(dv, pm_dev_peer(dv, s - 1), pm_tag_b(pp, s - 1, j));
}

static pm_status run_w(pass_ctx *x) {
    pm_pipe_dev *dv = x->dv;
    pm_pipe *pp = dv->pp;
    const pm_gpt_config *c = &pp->cfg.model;
    int s = x->ps->stage, j = x->ps->mb, a = pp->first[s], b = pp->first[s + 1];
    if (x->ps->kind == PM_PASS_W) x->t_start = pm_now();
    for (int l = a; l < b; l++) {
        if (fused_head(x, c, l)) continue; /* done in the B part */
        size_t o = pm_gpt_layer_offset(c, l) - pm_gpt_layer_offset(c, a);
        pm_gpt_layer_w(c, l, pp->mbsz, pp->T, dv->sp[s] + o, dv->sg[s] + o, saved_ptr(dv, l, j),
                       dv->scratch);
    }
    int bad;
    pm_devmem_pass(&dv->mem, x->ps, PM_MEM_WDONE, &bad);
    return PM_OK;
}

/* PM_FAULT_STALL: the pass waits until another device's error reaches
 * this one (its wait for this one ran out meanwhile), at most the timeout
 * and a minute, then 2 s more, as a pass still computing when the error
 * came; a handler that runs meanwhile (lost.c's SIGCONT) does not end it. */
static void stall(const pm_tp *tp, double timeout_s) {
    double cap = (timeout_s > 0 ? timeout_s : PM_COMM_TIMEOUT) + 60, t0 = pm_now();
    struct timespec tick = {0, 10000000}, more = {2, 0};
    while (!pm_tp_status(tp, NULL) && pm_now() - t0 < cap) nanosleep(&tick, NULL);
    while (nanosleep(&more, &more) && errno == EINTR) continue;
}

static pm_status run_pass(pass_ctx *x) {
    pm_pipe_dev *dv = x->dv;
    pm_status st = post_ahead(dv);
    if (st) return st;
    if (x->fault == PM_FAULT_KILL) raise(SIGKILL);
    if (x->fault == PM_FAULT_STALL) stall(dv->tp, dv->pp->opts.wait_timeout_s);
    if (x->fault == PM_FAULT_FAIL) {
        x->t_start = pm_now();
        return pass_fail(x, PM_ERR_ARG, "injected failure (test hook)");
    }
    switch (x->ps->kind) {
    case PM_PASS_F: return run_f(x);
    case PM_PASS_B: return run_b(x);
    case PM_PASS_W: return run_w(x);
    default: /* BW: B, W, then the input gradient leaves, as the schedule says */
        if ((st = run_b(x))) return st;
        x->t_mid = pm_now();
        if ((st = run_w(x))) return st;
        if (dv->pp->first[x->ps->stage] == 0) return PM_OK;
        return tx_send(dv, pm_dev_peer(dv, x->ps->stage - 1),
                       pm_tag_b(dv->pp, x->ps->stage - 1, x->ps->mb));
    }
}

/* ---- after the passes: norm chain and AdamW ----------------------------------- */

/* Stage s's gradients are final here: the norm's sums of its units, now
 * (while other devices still compute), so the chain after the passes only
 * adds them. */
static void unit_sums(pm_pipe_dev *dv, int s) {
    const pm_pipe *pp = dv->pp;
    pm_optim_unit_sums(&pp->cfg.model, pp->first[s], pp->first[s + 1], dv->sg[s],
                       dv->usum + dv->ubase[s]);
}

/* The global gradient norm, bitwise pm_optim_norm over the whole slab: a
 * chain through the stages in layer order, each device adding its stages'
 * unit sums (made as each stage's gradients became final) in order to the
 * running double. Each replica chains its own (the totals are the same
 * everywhere); under ZeRO-1 only the last replica holds every total, so it
 * alone chains and its last stage's device sends the norm to every device
 * of every replica. */
static pm_status norm_chain(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    pm_status st = PM_OK;
    int zero = pp->pl->zero, chain = !zero || dv->rep == pp->dp - 1;
    int to = zero ? pp->nd : pp->p, from0 = zero ? 0 : dv->rep * pp->p;
    for (int s = 0; s < pp->S && chain; s++) {
        if (stage_dev(pp, s) != dv->d) continue;
        double acc = 0;
        pm_tp_req r;
        if (s > 0) {
            if ((st = pm_tp_irecv(dv->tp, pm_dev_peer(dv, s - 1), pm_tag_norm(pp, s), &acc,
                                  sizeof acc, &r)) ||
                (st = pm_tp_wait(dv->tp, &r)))
                return st;
        }
        if (pp->dp > 1 && dv->rep < pp->dp - 1) unit_sums(dv, s); /* its totals came late */
        for (int u = dv->ubase[s]; u < dv->ubase[s + 1]; u++) acc += dv->usum[u];
        dv->nbuf[s] = acc;
        if (s + 1 < pp->S) {
            st = pm_tp_isend(dv->tp, pm_dev_peer(dv, s + 1), pm_tag_norm(pp, s + 1), &dv->nbuf[s],
                             sizeof(double), &dv->nreq[s]);
        } else {
            dv->nbuf[pp->S] = sqrt(dv->nbuf[s]);
            for (int g = 0; g < to && !st; g++)
                st = pm_tp_isend(dv->tp, from0 + g, pm_tag_bcast(pp), &dv->nbuf[pp->S],
                                 sizeof(double), &dv->nreq[pp->S + g]);
        }
        if (st) return st;
    }
    int root = (zero ? pp->dp - 1 : dv->rep) * pp->p + stage_dev(pp, pp->S - 1);
    pm_tp_req r;
    if ((st = pm_tp_irecv(dv->tp, root, pm_tag_bcast(pp), &dv->norm, sizeof dv->norm, &r)) ||
        (st = pm_tp_wait(dv->tp, &r)))
        return st;
    for (int k = 0; k < pp->S + to; k++)
        if ((st = pm_tp_wait(dv->tp, &dv->nreq[k]))) return st;
    return PM_OK;
}

/* ---- data parallelism: the gradient sum across replicas ----------------------- */

static double now_us(const pm_pipe_dev *dv) { return (pm_now() - dv->t_base) * 1e6; }

/* The part of chunk [lo, lo + n) of stage s that replica r needs the
 * totals of: the whole chunk, or under ZeRO-1 its intersection with r's
 * slice, as [lo + *a, lo + *a + *c). 0 if empty. */
static int slice_part(const pm_pipe *pp, int s, int r, size_t lo, size_t n, size_t *a, size_t *c) {
    size_t first, count;
    pm_plan_moment_slice(pp->pl, s, r, &first, &count);
    size_t x = first > lo ? first : lo, y = first + count < lo + n ? first + count : lo + n;
    if (x >= y) return 0;
    *a = x - lo, *c = y - x;
    return 1;
}

/* One chunk of stage s's sum on replica r: floats g[0 .. n) of its
 * gradients; tot: the chunk's requests for the totals (pm_dev_sum_reqs).
 * Replica r adds its own to what r-1 passed on (red + g, as the single
 * sum's order) and hands the partial sum on by rendezvous straight from g
 * (waited for: g is read until r+1 has it, and r+1 is here, receiving);
 * the last replica sends the total back the same way to every other,
 * whose receive into g is posted once g is free again. Neither side waits
 * for the totals here: the others may be in later passes, and MPI moves a
 * message only while its receiver is inside MPI; both wait after the
 * passes (reduce_finish), and nothing writes g until then. */
static pm_status reduce_chunk(pm_pipe_dev *dv, int s, size_t lo, size_t n, pm_tp_req *tot) {
    pm_pipe *pp = dv->pp;
    int r = dv->rep, last = pp->dp - 1, p = pp->p, d = dv->d;
    float *g = dv->sg[s] + lo;
    size_t bytes = n * sizeof(float), a, c;
    pm_tp_req q;
    pm_status st;
    if (r > 0) {
        if ((st = pm_tp_irecv(dv->tp, (r - 1) * p + d, pm_tag_red(pp, s), dv->red, bytes, &q)) ||
            (st = pm_tp_wait(dv->tp, &q)))
            return st;
        for (size_t i = 0; i < n; i++) g[i] = dv->red[i] + g[i];
    }
    if (r < last) {
        if ((st = pm_tp_issend(dv->tp, (r + 1) * p + d, pm_tag_red(pp, s), g, bytes, &q)) ||
            (st = pm_tp_wait(dv->tp, &q)))
            return st;
        /* the totals come back: all of the chunk, or under ZeRO-1 only the
         * part inside this replica's slice (none: the request stays idle) */
        if (!slice_part(pp, s, r, lo, n, &a, &c)) return PM_OK;
        return pm_tp_irecv(dv->tp, last * p + d, pm_tag_sum(pp, s), g + a, c * sizeof(float), tot);
    }
    for (int o = 0; o < last; o++) {
        if (!slice_part(pp, s, o, lo, n, &a, &c)) continue;
        if ((st = pm_tp_issend(dv->tp, o * p + d, pm_tag_sum(pp, s), g + a, c * sizeof(float),
                               &tot[o])))
            return st;
    }
    return PM_OK;
}

/* Stage s's gradients are complete on this replica (its last weight pass
 * ran), so its share of the sum starts now, while later passes run: the
 * sum goes along the replicas in order (a fixed order: bitwise the same
 * whatever the timing, transport or chunk size), chunk by chunk, so the
 * only buffer it needs is one chunk (dv->red) and nothing is copied into
 * the transport. Rendezvous makes a replica wait for the next to arrive
 * here; that cannot deadlock, because every replica of a device runs the
 * same pass list and so reduces the same stages in the same order (each
 * reduction acts as a meeting point of identical positions), and the
 * pipeline's own messages are still copied (a sender never waits). */
static pm_status reduce_start(pm_pipe_dev *dv, int s) {
    pm_pipe *pp = dv->pp;
    size_t n = pm_stage_floats(pp, s), c = pm_chunk(pp), k = (size_t)dv->g * pp->S + s;
    size_t per = pm_dev_sum_per(dv);
    pm_tp_req *tot = dv->rreq + pm_dev_sum_reqs(dv, s);
    pp->red0[k] = now_us(dv);
    for (size_t lo = 0; lo < n; lo += c, tot += per) {
        pm_status st = reduce_chunk(dv, s, lo, n - lo < c ? n - lo : c, tot);
        if (st) return st;
    }
    /* the last replica's share is done: the totals are on their way */
    if (dv->rep == pp->dp - 1) pp->red1[k] = now_us(dv);
    return PM_OK;
}

/* After the passes: the totals the last replica sent back have arrived
 * (the others), or have been received (the last: its slab may change). */
static pm_status reduce_finish(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    if (pp->dp == 1) return PM_OK;
    for (int s = 0; s < pp->S; s++) {
        if (stage_dev(pp, s) != dv->d) continue;
        for (size_t i = pm_dev_sum_reqs(dv, s); i < pm_dev_sum_reqs(dv, s + 1); i++) {
            pm_status st = pm_tp_wait(dv->tp, &dv->rreq[i]);
            if (st) return st;
        }
        if (dv->rep < pp->dp - 1) pp->red1[(size_t)dv->g * pp->S + s] = now_us(dv);
    }
    return PM_OK;
}

/* AdamW on each of the device's stages: the trainer's own loop on the
 * stage's slabs, or under ZeRO-1 on the replica's slice of each. */
static void adamw_dev(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    float gscale = pm_optim_clip_scale(dv->norm, pp->cfg.opt.grad_clip);
    for (int s = 0; s < pp->S; s++) {
        if (stage_dev(pp, s) != dv->d) continue;
        size_t first, count, base = pm_plan_stage_offset(pp->pl, s);
        pm_plan_moment_slice(pp->pl, s, dv->rep, &first, &count);
        pm_optim_step_range(&pp->cfg, base + first, base + first + count, pp->step, gscale,
                            dv->sp[s] + first, dv->sg[s] + first, dv->sm[s], dv->sv[s]);
    }
}

/* ZeRO-1, after the update: every replica's updated slice of each stage to
 * every other replica, straight between the parameter slabs (rendezvous,
 * in chunks; every receive posted before any send waits, so no replica
 * waits on one that waits on it). */
static pm_status gather_slices(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    size_t c = pm_chunk(pp), k = 0;
    pm_status st = PM_OK;
    for (int pass = 0; pass < 2 && !st; pass++) /* receives, then sends */
        for (int s = 0; s < pp->S && !st; s++) {
            if (stage_dev(pp, s) != dv->d) continue;
            for (int r = 0; r < pp->dp && !st; r++) {
                size_t first, count;
                pm_plan_moment_slice(pp->pl, s, r, &first, &count);
                int mine = r == dv->rep;
                if (mine != pass) continue;
                for (size_t lo = 0; lo < count && !st; lo += c) {
                    size_t n = count - lo < c ? count - lo : c;
                    float *x = dv->sp[s] + first + lo;
                    for (int o = 0; o < pp->dp && !st; o++) {
                        if (mine && o == dv->rep) continue;
                        int peer = (mine ? o : r) * pp->p + dv->d;
                        st = mine ? pm_tp_issend(dv->tp, peer, pm_tag_gath(pp, s), x,
                                                 n * sizeof(float), &dv->greq[k++])
                                  : pm_tp_irecv(dv->tp, peer, pm_tag_gath(pp, s), x,
                                                n * sizeof(float), &dv->greq[k++]);
                        if (!mine) break; /* one receive per chunk */
                    }
                }
            }
        }
    for (size_t i = 0; i < k && !st; i++) st = pm_tp_wait(dv->tp, &dv->greq[i]);
    return st;
}

pm_status pm_dev_step(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    const pm_pass *ps = dv->list = pm_sched_dev(&pp->sched, dv->d);
    int64_t len = dv->len = pp->sched.len[dv->d], base = (int64_t)dv->g * pp->sched.cap;
    const pm_pipe_opts *op = &pp->opts;
    memset(dv->slab + dv->n, 0, dv->n * sizeof(float)); /* gradients */
    dv->rxpass[0] = dv->rxpass[1] = -1;
    dv->scan = 0;
    pm_arena_begin(&dv->mem.arena);
    pm_status st;
    for (int64_t i = 0; i < len; i++) {
        if ((st = pm_tp_status(dv->tp, NULL))) return st;
        int fault = op->fault_kind && op->fault_step == pp->step && op->fault_dev == dv->g &&
                            op->fault_pass == i
                        ? op->fault_kind
                        : PM_FAULT_NONE;
        pass_ctx x = {dv, i, &ps[i], fault, 0, NAN};
        if ((st = run_pass(&x))) return st;
        double t_end = pm_now();
        /* weight passes run in microbatch order: m-1 is the stage's last; its
         * gradients are final now (one replica), or its totals once the last
         * replica has summed them */
        if (ps[i].mb == pp->m - 1 && (ps[i].kind == PM_PASS_W || ps[i].kind == PM_PASS_BW)) {
            if (pp->dp > 1 && (st = reduce_start(dv, ps[i].stage))) return st;
            if (dv->rep == pp->dp - 1) unit_sums(dv, ps[i].stage);
        }
        pp->t0[base + i] = (x.t_start - dv->t_base) * 1e6;
        pp->t1[base + i] = (t_end - dv->t_base) * 1e6;
        pp->tmid[base + i] = (x.t_mid - dv->t_base) * 1e6;
        pp->live_after[base + i] = (double)dv->mem.arena.live;
    }
    for (int k = 0; k < 2; k++)
        if ((st = pm_tp_wait(dv->tp, &dv->txreq[k]))) return st;
    if ((st = reduce_finish(dv)) || (st = norm_chain(dv))) return st;
    if (!isfinite(dv->norm)) return PM_ERR_NUMERIC; /* every device sees it: no update */
    adamw_dev(dv);
    return pp->pl->zero ? gather_slices(dv) : PM_OK;
}

/* Forward passes only: this device's stages for the round's microbatches
 * of its replica, in wavefront order; the head's device keeps the losses. */
pm_status pm_dev_eval(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    int have = pp->eval_n - dv->rep * pp->m; /* this replica's share of the round */
    const pm_pass *all = pp->fwd + (int64_t)dv->d * pp->fcap;
    dv->len = 0;
    for (int64_t i = 0; i < pp->fwd_len[dv->d]; i++)
        if (all[i].mb < have) dv->elist[dv->len++] = all[i];
    dv->list = dv->elist;
    dv->rxpass[0] = dv->rxpass[1] = -1;
    dv->scan = 0;
    pm_status st;
    for (int64_t i = 0; i < dv->len; i++) {
        if ((st = pm_tp_status(dv->tp, NULL))) return st;
        pass_ctx x = {dv, i, &dv->list[i], PM_FAULT_NONE, 0, NAN};
        if ((st = run_pass(&x))) return st;
    }
    for (int k = 0; k < 2; k++)
        if ((st = pm_tp_wait(dv->tp, &dv->txreq[k]))) return st;
    return PM_OK;
}

