/* pass.c: one shard pass of a task on a device's slab (internal.h).
 *
 * State slot: the shard's parameters, gradients and AdamW moments as four
 * runs of n floats (n = the shard's parameters), copied from the host store
 * unless the slot already holds the current version. Activation area, as
 * the partitioner counts it: the input, each layer's saved tensors, three
 * (B/K, T, C) buffers and the largest scratch, each at a 64-byte boundary.
 *
 * Per microbatch j (the step's K in order, as `train` does):
 *   F      input (tokens on shard 0, else the previous shard's output kept
 *          on the host), the layers' F, the output back to the host;
 *   FUSED  the last shard: F, then B down its layers (the head's B makes
 *          the loss, with its W in the same call), the input gradient to
 *          the host, then W;
 *   B      F again from the kept input (recomputation), then B with the
 *          output gradient from the host, the input gradient to the host,
 *          then W;
 *   EVAL   an evaluation's: F on a validation microbatch, the output back
 *          to the host (the loss, on the last shard).
 * Gradients accumulate per layer over j in order, so every gradient is the
 * single-device one bitwise. A shard's first pass after a step (the next
 * step's, or the evaluation's) first applies that step's AdamW update (the
 * global norm is only known after the last backward) and zeroes its
 * gradients: the one AdamW loop of the core, on the shard's slabs, so the
 * result equals the whole-model update. Only that pass needs the shard's
 * gradients and moments from the store; any other copies in the parameters
 * alone, its gradients from zero, and writes back what it computed. */
#include <string.h>

#include "select/internal.h"
#include "model/passes.h"
#include "train/optim.h"

static size_t up(size_t x) { return (x + 63) / 64 * 64; }

typedef struct {
    const pm_train_cfg *c;
    const pm_shard *sh;
    unsigned char *in, *saved0, *scratch; /* saved0: the first layer's saved */
    float *buf[3];
} act_area;

static size_t layer_saved(const pm_train_cfg *c, int l) {
    pm_gpt_sizes z;
    pm_gpt_layer_sizes(&c->model, l, c->batch / c->micro, c->model.ctx, &z, NULL);
    return up(z.saved);
}

static void area_layout(const pm_train_cfg *c, const pm_shard *sh, unsigned char *base,
                        act_area *a) {
    int mb = c->batch / c->micro, T = c->model.ctx;
    size_t nc = (size_t)mb * (size_t)T * (size_t)c->model.dim * sizeof(float);
    pm_gpt_sizes z;
    pm_gpt_layer_sizes(&c->model, sh->first, mb, T, &z, NULL);
    *a = (act_area){c, sh, base, base + up(z.in), NULL, {NULL, NULL, NULL}};
    size_t at = up(z.in);
    for (int l = sh->first; l < sh->last; l++) at += layer_saved(c, l);
    for (int k = 0; k < 3; k++, at += up(nc)) a->buf[k] = (float *)(base + at);
    a->scratch = base + at;
}

/* Layer l's saved region (the shard's layers follow one another). */
static void *saved_of(const act_area *a, int l) {
    unsigned char *p = a->saved0;
    for (int k = a->sh->first; k < l; k++) p += layer_saved(a->c, k);
    return p;
}

/* Runs the shard's layers forward from a->in; the last layer's output goes
 * to a->buf[0] (none on the head, which adds its loss to *loss if loss is
 * not NULL: an evaluation's). */
static void forward(const pm_train_cfg *c, const pm_shard *sh, const float *P, act_area *a,
                    const int32_t *tgt, double *loss) {
    const pm_gpt_config *m = &c->model;
    int mb = c->batch / c->micro, T = m->ctx, head = pm_gpt_num_layers(m) - 1;
    size_t base = pm_gpt_layer_offset(m, sh->first);
    for (int l = sh->first; l < sh->last; l++) {
        void *sv = saved_of(a, l);
        const void *lin = l == sh->first ? (const void *)a->in
                                         : pm_gpt_layer_input_slot(m, l, mb, T, sv);
        float *lout = l == head ? NULL
                      : l + 1 < sh->last
                          ? pm_gpt_layer_input_slot(m, l + 1, mb, T, saved_of(a, l + 1))
                          : a->buf[0];
        float ls = 0;
        pm_gpt_layer_f(m, l, mb, T, P + (pm_gpt_layer_offset(m, l) - base), lin,
                       l == head ? tgt : NULL, lout, l == head && loss ? &ls : NULL, sv,
                       a->scratch);
        if (l == head && loss) *loss += ls;
    }
}

static int is_head(const pm_gpt_config *m, int l) {
    return pm_gpt_layer_kind(m, l) == PM_LAYER_HEAD;
}

/* B down the shard's layers from dout (NULL on the head, whose B adds its
 * loss to *loss); the first layer's input gradient is left in the returned
 * buffer (NULL on shard 0). A head part runs B and W as one (BW), which
 * makes its logits once rather than twice. */
static float *backward_b(const pm_train_cfg *c, const pm_shard *sh, const float *P, float *G,
                         act_area *a, float *dout, double *loss) {
    const pm_gpt_config *m = &c->model;
    int mb = c->batch / c->micro, T = m->ctx;
    size_t base = pm_gpt_layer_offset(m, sh->first);
    float *din = NULL;
    for (int l = sh->last - 1, k = 1; l >= sh->first; l--, k = 3 - k) {
        din = l == 0 ? NULL : a->buf[k];
        float ls = 0;
        size_t o = pm_gpt_layer_offset(m, l) - base;
        if (is_head(m, l))
            pm_gpt_layer_bw(m, l, mb, T, P + o, G + o, dout, din, 1.0f / (float)c->micro, &ls,
                            saved_of(a, l), a->scratch);
        else
            pm_gpt_layer_b(m, l, mb, T, P + o, dout, din, 1.0f / (float)c->micro, &ls,
                           saved_of(a, l), a->scratch);
        if (!dout) *loss += ls; /* the head's last part */
        dout = din;
    }
    return din;
}

/* W of the shard's layers but the head's (done with its B), after their B
 * (what B saved for it). */
static void backward_w(const pm_train_cfg *c, const pm_shard *sh, const float *P, float *G,
                       act_area *a) {
    const pm_gpt_config *m = &c->model;
    size_t base = pm_gpt_layer_offset(m, sh->first);
    for (int l = sh->first; l < sh->last; l++) {
        if (is_head(m, l)) continue;
        size_t o = pm_gpt_layer_offset(m, l) - base;
        pm_gpt_layer_w(m, l, c->batch / c->micro, m->ctx, P + o, G + o, saved_of(a, l),
                       a->scratch);
    }
}

static size_t shard_floats(const pm_train_cfg *c, const pm_shard *sh) {
    const pm_gpt_config *m = &c->model;
    size_t end = sh->last < pm_gpt_num_layers(m) ? pm_gpt_layer_offset(m, sh->last)
                                                  : pm_gpt_num_params(m);
    return end - pm_gpt_layer_offset(m, sh->first);
}

int sel_resident(const sel_dev *dv, const sel_task *t, int s) {
    for (int k = 0; k < dv->slots; k++)
        if (dv->res_task[k] == t->index && dv->res_shard[k] == s &&
            dv->res_version[k] == t->version[s])
            return k;
    return -1;
}

int sel_pick_slot(const sel_dev *dv, const sel_task *t, int s) {
    int k = sel_resident(dv, t, s);
    if (k >= 0 || dv->slots == 1) return k >= 0 ? k : 0;
    if (dv->res_task[0] < 0) return 0;
    if (dv->res_task[1] < 0) return 1;
    return dv->last_slot ^ 1;
}

int sel_load_state(sel_task *t, sel_dev *dv, int s, int slot, int whole, double *bytes) {
    const pm_train_cfg *c = &t->host->cfg;
    const pm_shard *sh = &t->task->shard[s];
    size_t n = shard_floats(c, sh), at = pm_gpt_layer_offset(&c->model, sh->first);
    float *P = (float *)(dv->slab + dv->state_off[slot]);
    dv->res_task[slot] = -1; /* until the state is in */
    for (int k = 0; k < (whole ? 4 : 1); k++)
        if (sel_store_io(t, k, at, n, P + (size_t)k * n, 0)) return -1;
    if (!whole) memset(P + n, 0, n * sizeof(float)); /* the gradients start at zero */
    *bytes = (double)(whole ? 4 : 1) * (double)(n * sizeof(float));
    dv->res_task[slot] = t->index, dv->res_shard[slot] = s, dv->res_version[slot] = t->version[s];
    dv->res_whole[slot] = whole;
    return 0;
}

/* The previous step's AdamW update (step s - 1 of the shard's layers) if
 * not yet applied, and zeroed gradients for step s. Returns 1 if it
 * applied the update (the parameters and moments changed; zeroed
 * gradients need no writing back: no one reads the host's until a pass
 * has computed them). */
static int start_step(sel_task *t, int s, float *P, float *G, float *M, float *V, size_t n) {
    const pm_train_cfg *c = &t->host->cfg;
    const pm_shard *sh = &t->task->shard[s];
    int64_t step = t->host->step;
    int updated = 0;
    if (t->updated[s] < step) {
        pm_optim_step_layers(c, sh->first, sh->last, step - 1, t->gscale, P, G, M, V);
        t->updated[s] = step;
        updated = 1;
    }
    if (t->zeroed[s] <= step) {
        memset(G, 0, n * sizeof(float));
        t->zeroed[s] = step + 1;
    }
    return updated;
}

/* Joining (t->mu set): waits until pass q of the round has put microbatch
 * j's output on the host (j < 0: until every pass before q has ended; q <
 * 0: nothing to wait for), adding the seconds waited to *waited (a wait,
 * even one that ends in failure, is not compute); -1 if a pass of the task
 * failed meanwhile. Under the run's lock, so what the other device wrote
 * before publishing is visible here. */
static int flow_wait(sel_task *t, int q, int j, double *waited) {
    if (!t->mu || q < 0 || (j < 0 && q == 0)) return 0;
    double t0 = pm_now();
    pthread_mutex_lock(t->mu);
    while (!t->broken && (j >= 0 ? t->mb[q] <= j : t->pass < q))
        pthread_cond_wait(t->flow, t->mu);
    int bad = t->broken;
    pthread_mutex_unlock(t->mu);
    *waited += pm_now() - t0;
    return bad ? -1 : 0;
}

/* Joining: microbatch j of pass k is out (on the host); a device waiting
 * for it goes on. */
static void flow_done(sel_task *t, int k, int j) {
    if (!t->mu) return;
    pthread_mutex_lock(t->mu);
    t->mb[k] = j + 1;
    pthread_cond_broadcast(t->flow);
    pthread_mutex_unlock(t->mu);
}

/* Microbatch j of an evaluation's pass k on shard s (its chunk's
 * tokens, or the previous shard's output kept on the host, once pass k - 1
 * has put it out), forward; the output back to the host, or on the last
 * shard the loss added. -1 if a pass it waited for failed. */
static int eval_micro(sel_task *t, int k, int j, int s, const float *P, act_area *a,
                      double *waited) {
    if (flow_wait(t, k - 1, j, waited)) return -1;
    const pm_train_cfg *c = &t->host->cfg;
    size_t mtok = (size_t)(c->batch / c->micro) * (size_t)c->model.ctx;
    size_t at = (size_t)(k / t->S * t->ev_micro + j) * mtok; /* the round's j-th */
    const pm_shard *sh = &t->task->shard[s];
    if (s > 0) memcpy(a->in, t->ev_act + ((size_t)(s - 1) * t->ev_micro + j) * t->nc,
                      t->nc * sizeof(float));
    else memcpy(a->in, t->ev_inp + at, mtok * sizeof(int32_t));
    forward(c, sh, P, a, t->ev_tgt + at, &t->ev_sum);
    if (s < t->S - 1)
        memcpy(t->ev_act + ((size_t)s * t->ev_micro + j) * t->nc, a->buf[0], t->nc * sizeof(float));
    flow_done(t, k, j);
    return 0;
}

/* Microbatch j of a step's pass k on shard s, as the header says. Joined,
 * each input is waited for only when it is needed: the forward's (shard
 * s - 1's output, pass s - 1's) before the forward, so a backward pass
 * recomputes its forward while the passes after it still run; the output
 * gradient (pass k - 1's) before B. The input gradient goes out after B,
 * before W (but the head's, done with its B), so the next backward starts
 * while this one does W. The
 * computation and its order are the same either way. -1 if a pass it
 * waited for failed. */
static int step_micro(sel_task *t, int k, int j, int s, const float *P, float *G, act_area *a,
                      double *waited) {
    const pm_train_cfg *c = &t->host->cfg;
    const pm_shard *sh = &t->task->shard[s];
    sel_kind kind = sel_pass_kind(t->S, k);
    size_t mtok = (size_t)(c->batch / c->micro) * (size_t)c->model.ctx;
    pm_trainer *h = t->host;
    float *keep = s > 0 ? t->act + ((size_t)(s - 1) * t->K + j) * t->nc : NULL;
    if (flow_wait(t, s - 1, j, waited)) return -1;
    if (keep) memcpy(a->in, keep, t->nc * sizeof(float));
    else memcpy(a->in, h->inp + (size_t)j * mtok, mtok * sizeof(int32_t));
    forward(c, sh, P, a, h->tgt + (size_t)j * mtok, NULL); /* the head's B gives the loss */
    if (kind == SEL_F) {
        memcpy(t->act + ((size_t)s * t->K + j) * t->nc, a->buf[0], t->nc * sizeof(float));
        flow_done(t, k, j);
        return 0;
    }
    float *dout = NULL;
    if (kind == SEL_B) {
        if (flow_wait(t, k - 1, j, waited)) return -1;
        dout = a->buf[0];
        memcpy(dout, t->grad + ((size_t)s * t->K + j) * t->nc, t->nc * sizeof(float));
    }
    float *din = backward_b(c, sh, P, G, a, dout, &t->loss_sum);
    if (din) memcpy(t->grad + ((size_t)(s - 1) * t->K + j) * t->nc, din, t->nc * sizeof(float));
    flow_done(t, k, j);
    backward_w(c, sh, P, G, a);
    return 0;
}

int sel_run_pass(sel_task *t, sel_dev *dv, const pm_select_layout *lay, int k, int slot,
                 double mark[3], double *waited) {
    const pm_train_cfg *c = &t->host->cfg;
    int s = sel_round_shard(t, k), nmb = sel_round_micro(t, k);
    sel_kind kind = sel_round_kind(t, k);
    const pm_shard *sh = &t->task->shard[s];
    size_t n = shard_floats(c, sh), at = pm_gpt_layer_offset(&c->model, sh->first);
    float *P = (float *)(dv->slab + dv->state_off[slot]), *G = P + n, *M = G + n, *V = M + n;
    double in = 0;
    *waited = 0;
    /* the shard's update is due: its gradients and moments are needed */
    int whole = t->updated[s] < t->host->step;
    int here = dv->res_task[slot] == t->index && dv->res_shard[slot] == s &&
               dv->res_version[slot] == t->version[s]; /* (the other slot may be filling) */
    if (here && whole && !dv->res_whole[slot]) { /* parameters and gradients are there */
        if (sel_store_io(t, 2, at, n, M, 0) || sel_store_io(t, 3, at, n, V, 0)) return -1;
        dv->res_whole[slot] = 1, in = 2.0 * (double)(n * sizeof(float));
    } else if (!here && sel_load_state(t, dv, s, slot, whole, &in)) {
        return -1;
    }
    dv->bytes += in;
    mark[0] = pm_now();
    int all = start_step(t, s, P, G, M, V, n);
    mark[1] = pm_now();
    act_area a;
    area_layout(c, sh, dv->slab + dv->act_off, &a);
    for (int j = 0; j < nmb; j++)
        if (kind == SEL_EVAL ? eval_micro(t, k, j, s, P, &a, waited)
                             : step_micro(t, k, j, s, P, G, &a, waited))
            return -1;
    /* its gradients are the step's: their units' sums of squares for the
     * norm (pm_optim_norm adds them in unit order), here while they are at
     * hand, on every device at once */
    if (kind == SEL_FUSED || kind == SEL_B)
        pm_optim_unit_sums(&c->model, sh->first, sh->last, G, t->usum + t->ufirst[s]);
    /* the round's last: the others' write-backs and sums */
    if (k == sel_round_passes(t) - 1 && flow_wait(t, k, -1, waited)) return -1;
    mark[2] = pm_now();
    if (all && (sel_store_io(t, 0, at, n, P, 1) || sel_store_io(t, 2, at, n, M, 1) ||
                sel_store_io(t, 3, at, n, V, 1)))
        return -1;
    int grads = kind == SEL_FUSED || kind == SEL_B; /* it computed gradients */
    if (grads && sel_store_io(t, 1, at, n, G, 1)) return -1;
    if (all || grads) t->version[s]++;
    dv->bytes += (double)((all ? 3 : 0) + grads) * (double)(n * sizeof(float));
    dv->res_version[slot] = t->version[s]; /* the slot holds what the host now has */
    dv->last_slot = slot;
    size_t used = dv->act_off + sh->act, st_end = dv->state_off[slot] + 4 * n * sizeof(float);
    PM_ASSERT(used <= pm_select_slab_bytes(lay) && st_end <= pm_select_slab_bytes(lay));
    if (used > dv->peak) dv->peak = used;
    if (st_end > dv->peak) dv->peak = st_end;
    return 0;
}

void sel_flush_updates(sel_task *t) {
    pm_trainer *h = t->host;
    const pm_gpt_config *m = &h->cfg.model;
    for (int s = 0; s < t->S; s++) {
        if (t->updated[s] >= h->step) continue;
        const pm_shard *sh = &t->task->shard[s];
        size_t at = pm_gpt_layer_offset(m, sh->first);
        pm_optim_step_layers(&h->cfg, sh->first, sh->last, h->step - 1, t->gscale,
                             h->params + at, h->grads + at, h->m + at, h->v + at);
        t->updated[s] = h->step;
        t->version[s]++;
    }
}
