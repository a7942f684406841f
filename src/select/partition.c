/* partition.c: the exact partitioner of model selection (pm_select.h).
 *
 * Bytes come from the model's own size functions (pm_gpt_layer_sizes,
 * pm_gpt_layer_params), each region rounded up to 64 bytes as the executor
 * lays it out, never from trial. For a state-slot size K the activation
 * area left is A = device_mem - slots * K, and each task is cut greedily:
 * a shard grows by the next layer while its state stays <= K and its
 * activation area <= A. Both grow with every layer added, so the greedy cut
 * has the fewest shards for that K. K runs over every contiguous range's
 * state (the only values where a cut can change); the K with the fewest
 * passes per step summed over the tasks (each weighted by its steps) wins,
 * ties to the smaller slab.
 *
 * Cost: O(R * n * L) for R candidate sizes (at most n L (L + 1) / 2, after
 * removing duplicates), n tasks of L layers: a sweep of 20 tasks of 50
 * layers is about 25 million steps. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* close: a task's spill file */

#include "pipemem/pm_select.h"
#include "model/passes.h"
#include "parts.h"

#define ALIGN 64

static size_t up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

/* One layer's pieces: state, saved, input bytes, scratch (the largest of
 * its three passes), FLOPs: F, B and W, W after the input gradient is out
 * (a head part runs B and W as one, pass.c), an evaluation's F. */
typedef struct {
    size_t state, saved, in, scratch;
    double ff, fbw, fw, fe;
} layer_info;

static pm_status layer_info_get(const pm_train_cfg *cfg, int l, layer_info *li, pm_err *err) {
    pm_gpt_sizes z;
    int B = cfg->batch / cfg->micro;
    pm_status st = pm_gpt_layer_sizes(&cfg->model, l, B, cfg->model.ctx, &z, err);
    if (st) return st;
    size_t sc = z.scratch_f > z.scratch_b ? z.scratch_f : z.scratch_b;
    sc = z.scratch_w > sc ? z.scratch_w : sc;
    int head = pm_gpt_layer_kind(&cfg->model, l) == PM_LAYER_HEAD;
    *li = (layer_info){up(4 * pm_gpt_layer_params(&cfg->model, l) * sizeof(float)), up(z.saved),
                       up(z.in), up(sc), z.flops_f, head ? z.flops_bw : z.flops_b + z.flops_w,
                       head ? 0 : z.flops_w, z.flops_eval};
    return PM_OK;
}

/* The three (B, T, C) float buffers of the activation area. */
static size_t act_buffers(const pm_train_cfg *cfg) {
    size_t B = (size_t)(cfg->batch / cfg->micro);
    return 3 * up(B * (size_t)cfg->model.ctx * (size_t)cfg->model.dim * sizeof(float));
}

pm_status pm_select_layer_bytes(const pm_train_cfg *cfg, int layer, size_t *state, size_t *act,
                                pm_err *err) {
    layer_info li;
    pm_status st = layer_info_get(cfg, layer, &li, err);
    if (st) return st;
    *state = li.state;
    *act = li.in + li.saved + act_buffers(cfg) + li.scratch;
    return PM_OK;
}

void pm_select_task_free(pm_select_task *t) {
    if (!t) return;
    pm_free(t->shard);
    t->shard = NULL;
    t->nshard = 0;
    if (t->spilled) close(t->spill_fd);
    t->spilled = 0;
}

/* Every task's layers, in one table: info[off[t] + l]. */
typedef struct {
    int n;
    int *off;         /* (n + 1) */
    layer_info *info; /* (off[n]) */
} layer_table;

static void table_free(layer_table *lt) {
    pm_free(lt->off);
    pm_free(lt->info);
}

static pm_status table_init(layer_table *lt, const pm_select_task *t, int n, pm_err *err) {
    *lt = (layer_table){n, pm_malloc(((size_t)n + 1) * sizeof(int)), NULL};
    if (!lt->off) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d tasks", n);
    lt->off[0] = 0;
    for (int i = 0; i < n; i++) lt->off[i + 1] = lt->off[i] + pm_gpt_num_layers(&t[i].cfg.model);
    lt->info = pm_malloc((size_t)lt->off[n] * sizeof *lt->info);
    if (!lt->info) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d layers", lt->off[n]);
    for (int i = 0; i < n; i++)
        for (int l = 0; l < lt->off[i + 1] - lt->off[i]; l++) {
            pm_err e;
            if (layer_info_get(&t[i].cfg, l, &lt->info[lt->off[i] + l], &e))
                return pm_errf(err, PM_ERR_ARG, "task %s: %s", t[i].name, e.msg);
        }
    return PM_OK;
}

/* Activation area of layers a..b-1 of task i. */
static size_t shard_act(const layer_table *lt, const pm_select_task *t, int i, int a, int b) {
    const layer_info *li = lt->info + lt->off[i];
    size_t saved = 0, sc = 0;
    for (int l = a; l < b; l++) {
        saved += li[l].saved;
        sc = li[l].scratch > sc ? li[l].scratch : sc;
    }
    return li[a].in + saved + act_buffers(&t[i].cfg) + sc;
}

/* Greedy cut of task i under (K, A): cuts[] receives the shard starts
 * (with the end appended), returns the shard count or 0 if a layer alone
 * breaks a cap. *smax, *amax grow to the largest state and act cut. */
static int cut_task(const layer_table *lt, const pm_select_task *t, int i, size_t K, size_t A,
                    int *cuts, size_t *smax, size_t *amax) {
    const layer_info *li = lt->info + lt->off[i];
    int L = lt->off[i + 1] - lt->off[i], ns = 0, a = 0;
    while (a < L) {
        size_t state = 0;
        int b = a;
        while (b < L && state + li[b].state <= K && shard_act(lt, t, i, a, b + 1) <= A)
            state += li[b++].state;
        if (b == a) return 0;
        size_t act = shard_act(lt, t, i, a, b);
        *smax = state > *smax ? state : *smax;
        *amax = act > *amax ? act : *amax;
        cuts[ns++] = a;
        a = b;
    }
    cuts[ns] = L;
    return ns;
}

static int cmp_size(const void *x, const void *y) {
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

/* Every contiguous range's state up to the cap, sorted, duplicates out. */
static pm_status candidates(const layer_table *lt, size_t cap, size_t **out, size_t *nout,
                            pm_err *err) {
    size_t n = 0, room = 0;
    for (int i = 0; i < lt->n; i++) {
        size_t L = (size_t)(lt->off[i + 1] - lt->off[i]);
        room += L * (L + 1) / 2;
    }
    size_t *k = pm_malloc((room ? room : 1) * sizeof *k);
    if (!k) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu shard sizes", room);
    for (int i = 0; i < lt->n; i++)
        for (int a = lt->off[i]; a < lt->off[i + 1]; a++) {
            size_t s = 0;
            for (int b = a; b < lt->off[i + 1] && (s += lt->info[b].state) <= cap; b++) k[n++] = s;
        }
    qsort(k, n, sizeof *k, cmp_size);
    size_t u = 0;
    for (size_t j = 0; j < n; j++)
        if (!u || k[j] != k[u - 1]) k[u++] = k[j];
    *out = k, *nout = u;
    return PM_OK;
}

/* A layer that cannot fit even alone: refused with its bytes. */
static pm_status check_layers(const layer_table *lt, const pm_select_task *t, size_t mem,
                              int slots, pm_err *err) {
    for (int i = 0; i < lt->n; i++)
        for (int l = 0; l < lt->off[i + 1] - lt->off[i]; l++) {
            const layer_info *li = &lt->info[lt->off[i] + l];
            size_t act = shard_act(lt, t, i, l, l + 1), need = slots * li->state + act;
            if (need > mem)
                return pm_errf(err, PM_ERR_MEMLIMIT,
                               "task %s: layer %d (%s) needs %zu bytes on a device (%d x %zu of "
                               "state, %zu of activations) but device_mem is %zu; raise it "
                               "or shrink the task (a smaller batch or more micro, a smaller "
                               "model.dim or model.ctx)",
                               t[i].name, l,
                               pm_layer_kind_names[pm_gpt_layer_kind(&t[i].cfg.model, l)], need,
                               slots, li->state, act, mem);
        }
    return PM_OK;
}

/* Passes per step over every task (weighted by its steps) when cut under
 * (K, A); -1 if some task cannot be. */
static double score(const layer_table *lt, const pm_select_task *t, size_t K, size_t A,
                    int *cuts, size_t *smax, size_t *amax) {
    double passes = 0;
    *smax = *amax = 0;
    for (int i = 0; i < lt->n; i++) {
        int ns = cut_task(lt, t, i, K, A, cuts, smax, amax);
        if (!ns) return -1;
        passes += (2.0 * ns - 1) * (t[i].cfg.opt.steps > 0 ? t[i].cfg.opt.steps : 1);
    }
    return passes;
}

static pm_status fill_shards(const layer_table *lt, pm_select_task *t, size_t K, size_t A,
                             int *cuts, pm_err *err) {
    for (int i = 0; i < lt->n; i++) {
        size_t s = 0, a = 0;
        int ns = cut_task(lt, t, i, K, A, cuts, &s, &a);
        pm_shard *sh = pm_calloc((size_t)ns, sizeof *sh);
        if (!sh) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d shards", ns);
        for (int k = 0; k < ns; k++) {
            pm_shard *x = &sh[k];
            x->first = cuts[k], x->last = cuts[k + 1];
            x->act = shard_act(lt, t, i, x->first, x->last);
            for (int l = x->first; l < x->last; l++) {
                const layer_info *li = &lt->info[lt->off[i] + l];
                x->state += li->state, x->flops_f += li->ff, x->flops_bw += li->fbw;
                x->flops_w += li->fw, x->flops_eval += li->fe;
            }
        }
        pm_free(t[i].shard);
        t[i].shard = sh, t[i].nshard = ns;
    }
    return PM_OK;
}

pm_status pm_select_partition(pm_select_task *tasks, int n, size_t device_mem, int slots,
                              pm_select_layout *out, pm_err *err) {
    if (n < 1 || !tasks) return pm_errf(err, PM_ERR_ARG, "no tasks to partition");
    if (slots < 1 || slots > 2) return pm_errf(err, PM_ERR_ARG, "state slots must be 1 or 2");
    for (int i = 0; i < n; i++) /* pass.c's boundaries are (B, T, C) and its targets the head's */
        if (pm_gpt_head_parts(&tasks[i].cfg.model) > 1)
            return pm_errf(err, PM_ERR_ARG, "task %s: a head cut into %d parts; select cuts "
                           "models into shards by whole layers, the head in one part",
                           tasks[i].name, pm_gpt_head_parts(&tasks[i].cfg.model));
    layer_table lt;
    size_t *k = NULL, nk = 0;
    int *cuts = NULL;
    pm_status st = table_init(&lt, tasks, n, err);
    if (!st) st = check_layers(&lt, tasks, device_mem, slots, err);
    if (!st) st = candidates(&lt, device_mem / (size_t)slots, &k, &nk, err);
    if (!st && !(cuts = pm_malloc(((size_t)lt.off[n] + 1) * sizeof *cuts)))
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory for shard cuts");
    double best = -1;
    size_t bestK = 0, bestSlab = 0;
    for (size_t j = 0; !st && j < nk; j++) {
        size_t s, a, A = device_mem - (size_t)slots * k[j];
        double sc = score(&lt, tasks, k[j], A, cuts, &s, &a);
        size_t slab = (size_t)slots * s + a;
        if (sc > 0 && (best < 0 || sc < best || (sc == best && slab < bestSlab)))
            best = sc, bestK = k[j], bestSlab = slab;
    }
    if (!st && best < 0)
        st = pm_errf(err, PM_ERR_MEMLIMIT,
                     "every layer fits device_mem %zu alone, but no one pair of slot sizes "
                     "fits the largest state and the largest activations of these tasks "
                     "together; raise device_mem or sweep fewer shapes at once", device_mem);
    if (!st) {
        size_t A = device_mem - (size_t)slots * bestK, s, a;
        score(&lt, tasks, bestK, A, cuts, &s, &a);
        st = fill_shards(&lt, tasks, bestK, A, cuts, err);
        if (!st && out) *out = (pm_select_layout){device_mem, slots, s, a};
    }
    pm_free(cuts);
    pm_free(k);
    table_free(&lt);
    return st;
}

size_t pm_select_slab_bytes(const pm_select_layout *L) {
    return (size_t)L->slots * L->state_slot + L->act_slot;
}
