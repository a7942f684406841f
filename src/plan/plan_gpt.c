/* plan_gpt.c: pipemem's own GPT as the planner's cost model (pm_plan.h):
 * its layers' exact bytes (pm_place_table, from pm_gpt_layer_sizes) and
 * pass times (FLOPs, or measured here), how many parts its head is cut
 * into, and what its runtime allocates besides the state: each device's
 * activation arena (a dry replay of the executor's allocation sequence,
 * devmem.c, planned offline by pm_arena_plan), its passes' scratch, its
 * message and reduction buffers and the transport's buffers. Then
 * pm_plan_make (this model, then the planner) and pm_plan_copy. */
#include <string.h>

#include "schedule/sched.h"
#include "model/passes.h"
#include "placement.h"
#include "arena.h"
#include "devmem.h"
#include "query.h"

/* The hooks' state (pm_plan_model.ctx). */
typedef struct {
    pm_train_cfg cfg;     /* as configured */
    int parts;            /* the head's parts asked for; 0: the planner's pick */
    int B, T;             /* a microbatch: sequences and tokens */
    pm_layer_costs place; /* what the cut and the generators weigh */
    pm_layer_costs time;  /* the simulation's pass times */
    int timed;            /* 1: time is not place */
} gpt_ctx;

enum { MOST_PARTS = 16 }; /* the head's parts head_parts tries */

static pm_status nomem(pm_err *err, const char *what) {
    return pm_errf(err, PM_ERR_NOMEM, "plan: out of memory for %s", what);
}

/* ---- the head's parts and the table ---------------------------------------------- */

/* The head's parts: the fewest that bring the rule's first figure (the
 * busiest device's time, or the largest device memory) within 1% of the
 * best any number of parts (up to 16) gives, placed without a cap. Any
 * number computes the same training; this is placement only. */
static pm_status head_parts(pm_plan *pl, pm_err *err) {
    pm_gpt_config *mc = &pl->cfg.model;
    const pm_sched *s = &pl->sched;
    int G = pm_gpt_head_groups(mc), mb = pl->cfg.batch / pl->cfg.micro, pick = 1;
    double *t = pm_malloc(2 * (size_t)s->p * sizeof *t), best[MOST_PARTS + 1] = {0};
    const pm_cut_opts rule = {.rule = pl->cut.rule};
    int by = rule.rule == PM_CUT_MEMORY ? s->p : 0; /* t[by ..]: what ranks first */
    int *first = pm_malloc((size_t)(s->S + 1) * sizeof *first);
    pm_status st = t && first ? PM_OK : nomem(err, "choosing the head's parts");
    for (int h = 1; h <= G && h <= MOST_PARTS && !st; h++) {
        mc->head_parts = h;
        if (pm_gpt_num_layers(mc) < s->S) continue;
        if ((st = pm_place_layers(mc, mb, mc->ctx, s, &pl->place, &rule, first, err)) ||
            (st = pm_place_shares(mc, mb, mc->ctx, s, &pl->place, first, t, t + s->p, err)))
            break;
        for (int d = 0; d < s->p; d++) best[h] = t[by + d] > best[h] ? t[by + d] : best[h];
    }
    for (int h = 1; h <= G && h <= MOST_PARTS; h++)
        if (best[h] > 0 && (!best[pick] || best[h] < best[pick])) pick = h;
    for (int h = 1; h < pick; h++) /* fewer parts within 1% */
        if (best[h] > 0 && best[h] <= best[pick] * 1.01) {
            pick = h;
            break;
        }
    pm_free(t);
    pm_free(first);
    mc->head_parts = pick;
    return st;
}

/* The table of c's layers into m (the cut and the generators weigh
 * g->place, the simulation g->time), and, when pl is given, its sizes and
 * message bytes. */
static pm_status gpt_table(pm_plan_model *m, const gpt_ctx *g, const pm_gpt_config *c,
                           pm_plan *pl, pm_err *err) {
    int n = pm_gpt_num_layers(c);
    pm_free(m->layer);
    m->layer = pm_malloc((size_t)n * sizeof *m->layer);
    pm_place_layer *timed = g->timed ? pm_malloc((size_t)n * sizeof *timed) : NULL;
    pm_status st = m->layer && (timed || !g->timed) ? PM_OK : nomem(err, "the layer table");
    if (!st) m->n = n, st = pm_place_table(c, g->B, g->T, &g->place, m->layer, err);
    if (!st && timed) st = pm_place_table(c, g->B, g->T, &g->time, timed, err);
    for (int i = 0; !st && timed && i < n; i++)
        m->layer[i].tf = timed[i].tf, m->layer[i].tb = timed[i].tb, m->layer[i].tw = timed[i].tw;
    pm_free(timed);
    size_t w = (size_t)c->dim + (pm_gpt_head_parts(c) > 1 ? 3 : 0);
    m->msg = (double)g->B * g->T * (double)w * sizeof(float);
    if (st || !pl) return st;
    pm_free(pl->sz);
    if (!(pl->sz = pm_calloc((size_t)n, sizeof *pl->sz))) return nomem(err, "the sizes");
    for (int l = 0; l < n && !st; l++) st = pm_gpt_layer_sizes(c, l, g->B, g->T, &pl->sz[l], err);
    pl->msg_bytes = (size_t)m->msg;
    return st;
}

/* pm_plan_model.shape: the run's configuration with its head's parts (the
 * asked, or the pick for the schedule and the cut's rule), and its table. */
static pm_status gpt_shape(pm_plan_model *m, pm_plan *pl, pm_err *err) {
    const gpt_ctx *g = m->ctx;
    pl->cfg = g->cfg, pl->place = g->place;
    pm_gpt_config *c = &pl->cfg.model;
    c->head_parts = g->parts;
    pm_status st = pm_gpt_config_check(c, err);
    if (!st && !g->parts) st = head_parts(pl, err);
    if (!st) st = pm_place_room(c, pl->sched.S, err);
    return st ? st : gpt_table(m, g, c, pl, err);
}

/* pm_plan_model.room: the embedding, the blocks and the head in the parts
 * asked, or in as many as head_parts may try; refused in the words
 * gpt_shape would use (the parts asked, else one: head_parts' pick when no
 * number of parts fills the stages). */
static pm_status gpt_room(const pm_plan_model *m, int64_t S, pm_err *err) {
    const gpt_ctx *g = m->ctx;
    pm_gpt_config c = g->cfg.model;
    int G = pm_gpt_head_groups(&c);
    c.head_parts = g->parts ? g->parts : G < MOST_PARTS ? G : MOST_PARTS;
    if (pm_gpt_num_layers(&c) >= S) return PM_OK;
    c.head_parts = g->parts ? g->parts : 1;
    return pm_place_room(&c, S < INT32_MAX ? (int)S : INT32_MAX, err);
}

/* ---- what the runtime allocates -------------------------------------------------- */

/* Device d's arena: a dry first-fit replay of its allocation sequence must
 * peak at the simulator's prediction (the two count the same bytes); the
 * offline planner places the logged blocks; a second dry replay proves the
 * plan; the smaller slab wins. */
static pm_status plan_arena(pm_plan *pl, int d, pm_err *err) {
    pm_plan_arena *pa = &pl->arena[d];
    pm_devmem dm;
    pm_status st = pm_devmem_init(&dm, pl, d, 0, err);
    if (st) return st;
    PM_ASSERT(!pm_devmem_replay(&dm, d)); /* a dry arena has room for anything */
    size_t peak = dm.arena.peak, live = dm.arena.live, n = dm.arena.nlog, cap = 0;
    pa->ff = dm.arena.high, pa->max_blocks = dm.arena.max_blocks, pa->n = n;
    if (peak != (size_t)pl->sim.peak[d] || live != 0) {
        st = pm_errf(err, PM_ERR_INVALID, "device %d: replaying the schedule gives a peak of "
                     "%zu activation bytes (%zu left at the end) but the simulator predicts %.0f "
                     "(a planner bug)", d, peak, live, pl->sim.peak[d]);
        goto done;
    }
    pa->off = pm_malloc((n ? n : 1) * sizeof *pa->off);
    if (!pa->off) {
        st = nomem(err, "an arena plan");
        goto done;
    }
    if ((st = pm_arena_plan(dm.arena.log, n, pa->off, &cap, err))) goto done;
    pa->cap = pa->ff;
    if (cap >= pa->ff) { /* first fit is as good: no plan */
        pm_free(pa->off);
        pa->off = NULL;
        goto done;
    }
    pm_devmem_free(&dm);
    if ((st = pm_devmem_init(&dm, pl, d, 0, err)) ||
        (st = pm_arena_use_plan(&dm.arena, pa->off, n, err)))
        goto done;
    dm.arena.cap = cap;
    if (pm_devmem_replay(&dm, d) || dm.arena.high > cap) {
        st = pm_errf(err, PM_ERR_INVALID, "device %d: the arena plan (%zu bytes, first fit "
                     "%zu) does not replay: stopped at allocation %zu (a planner bug)", d, cap,
                     pa->ff, dm.arena.next);
        goto done;
    }
    pa->cap = cap;
done:
    pm_devmem_free(&dm);
    return st;
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* The scratch of its passes, the six message buffers (two receive slots,
 * two send buffers, two gradients between a stage's layers) and, on
 * replicas after the first, the chunk a partial gradient sum arrives in:
 * what the runtime allocates (pipe.c, dev_work, from the same queries).
 * Small tables (offsets, requests, a few per stage and pass) are not
 * counted. */
static size_t workspace(const pm_plan *pl, int g) {
    size_t bytes = round64(pm_plan_scratch_bytes(pl, g % pl->p)) + 6 * round64(pl->msg_bytes);
    if (pl->dp > 1 && g / pl->p > 0) bytes += pm_plan_red_floats(pl) * sizeof(float);
    return bytes;
}

/* Buffers for messages sent before their receive is posted: the threads
 * transport reserves them per receiving device; the MPI transport copies
 * every send into one of at most pm_plan_send_buffers. */
static size_t transport(const pm_plan *pl, int d) {
    int64_t n = pl->transport == PM_TRANSPORT_THREADS ? pm_plan_mailbox_buffers(pl, d)
                                                       : pm_plan_send_buffers(pl);
    return (size_t)n * pm_plan_msg_buffer(pl);
}

/* pm_plan_model.devices: each device's arena, workspace and transport. */
static pm_status gpt_devices(const pm_plan_model *m, pm_plan *pl, pm_err *err) {
    (void)m;
    if (!pl->arena && !(pl->arena = pm_calloc((size_t)pl->p, sizeof *pl->arena)))
        return nomem(err, "the arenas");
    for (int d = 0; d < pl->p; d++) {
        pm_free(pl->arena[d].off);
        pl->arena[d] = (pm_plan_arena){0};
    }
    pm_status st = PM_OK;
    for (int d = 0; d < pl->p && !st; d++) st = plan_arena(pl, d, err);
    for (int g = 0; g < pl->nd && !st; g++) {
        size_t *b = pl->dev[g].bytes;
        b[PM_BYTES_ACTIVATIONS] = pl->arena[g % pl->p].cap;
        b[PM_BYTES_WORKSPACE] = workspace(pl, g);
        b[PM_BYTES_TRANSPORT] = transport(pl, g % pl->p);
        pl->dev[g].act_peak = (size_t)pl->sim.peak[g % pl->p];
    }
    return st;
}

/* ---- the model ------------------------------------------------------------------- */

static pm_status check_cfg(const pm_train_cfg *cfg, const pm_plan_req *rq, int dp, pm_err *err) {
    pm_status st = pm_gpt_config_check(&cfg->model, err);
    if (st) return st;
    if (cfg->micro < 1 || cfg->batch < 1 || cfg->batch % cfg->micro)
        return pm_errf(err, PM_ERR_ARG, "the microbatches (%d) must divide the batch (%d)",
                       cfg->micro, cfg->batch);
    if (dp > 4096) return pm_errf(err, PM_ERR_ARG, "data-parallel replicas %d: must be 1..4096", dp);
    if (cfg->micro % dp)
        return pm_errf(err, PM_ERR_ARG, "the replicas (%d) must divide the microbatches (%d): "
                       "each replica runs an equal share", dp, cfg->micro);
    if (cfg->opt.steps < 1) return pm_errf(err, PM_ERR_ARG, "steps must be >= 1");
    if (rq->m != cfg->micro / dp)
        return pm_errf(err, PM_ERR_ARG, "m=%d: pipemem's GPT runs its configuration's %d "
                       "microbatches a replica", rq->m, cfg->micro / dp);
    return PM_OK;
}

pm_status pm_plan_model_pipemem(pm_plan_model *m, const pm_train_cfg *cfg, const pm_plan_req *rq,
                                const pm_layer_costs *times, pm_err *err) {
    *m = (pm_plan_model){0};
    int dp = rq->dp > 1 ? rq->dp : 1;
    pm_status st = check_cfg(cfg, rq, dp, err);
    if (st) return st;
    gpt_ctx *g = pm_calloc(1, sizeof *g);
    if (!g) return nomem(err, "the model");
    m->ctx = g;
    g->cfg = *cfg, g->parts = rq->head_parts ? rq->head_parts : cfg->model.head_parts;
    g->B = cfg->batch / cfg->micro, g->T = cfg->model.ctx;
    pm_layer_costs flops;
    if ((st = pm_place_flops(&cfg->model, g->B, g->T, &flops, err))) goto fail;
    g->place = rq->costs ? *rq->costs : flops;
    g->time = times ? *times : g->place, g->timed = times != NULL;
    /* the generators weigh the whole model once (the head whole, whatever its parts) */
    const pm_pass_times *k = g->place.k;
    double blocks = cfg->model.layers;
    m->gen[0] = k[PM_LAYER_EMBED].f + blocks * k[PM_LAYER_BLOCK].f + k[PM_LAYER_HEAD].f;
    m->gen[1] = k[PM_LAYER_EMBED].b + blocks * k[PM_LAYER_BLOCK].b + k[PM_LAYER_HEAD].b;
    m->gen[2] = k[PM_LAYER_EMBED].w + blocks * k[PM_LAYER_BLOCK].w + k[PM_LAYER_HEAD].w;
    m->flops = pm_gpt_flops(&cfg->model, g->B, g->T); /* MFU counts no recomputation */
    m->bytes_param = m->bytes_grad = sizeof(float), m->bytes_opt = 2 * sizeof(float);
    m->mbs = g->B, m->time_unit = g->time.unit;
    m->shape = gpt_shape, m->room = gpt_room, m->devices = gpt_devices;
    /* the table as configured, until a schedule shapes it */
    if (!(st = gpt_table(m, g, &cfg->model, NULL, err))) return PM_OK;
fail:
    pm_plan_model_free(m);
    return st;
}

pm_status pm_plan_make(pm_plan *pl, const pm_train_cfg *cfg, const pm_plan_req *rq,
                       pm_err *err) {
    *pl = (pm_plan){0};
    if (!cfg || !rq)
        return pm_errf(err, PM_ERR_ARG, "%s is NULL", cfg ? "the request (rq)" : "cfg");
    pm_plan_req q = *rq;
    int dp = rq->dp > 1 ? rq->dp : 1;
    q.m = cfg->micro / dp;
    pm_plan_model m;
    pm_status st = pm_plan_model_pipemem(&m, cfg, &q, NULL, err);
    if (st) return st;
    st = pm_plan_build(pl, &m, &q, err);
    pm_plan_model_free(&m);
    return st;
}

pm_status pm_plan_copy(pm_plan *dst, const pm_plan *src, pm_err *err) {
    *dst = *src;
    dst->sched = (pm_sched){0}, dst->cost = (pm_cost){0}, dst->sim = (pm_sim){0};
    dst->first = NULL, dst->sz = NULL, dst->arena = NULL, dst->dev = NULL;
    size_t nl = (size_t)pm_gpt_num_layers(&src->cfg.model);
    pm_status st = pm_sched_copy(&dst->sched, &src->sched, err);
    if (!st) st = pm_cost_init(&dst->cost, src->S, err);
    dst->first = pm_malloc(((size_t)src->S + 1) * sizeof *dst->first);
    dst->sz = pm_malloc(nl * sizeof *dst->sz);
    dst->arena = pm_calloc((size_t)src->p, sizeof *dst->arena);
    dst->dev = pm_malloc((size_t)src->nd * sizeof *dst->dev);
    if (!st && (!dst->first || !dst->sz || !dst->arena || !dst->dev)) st = nomem(err, "a copy");
    for (int d = 0; d < src->p && !st; d++) {
        dst->arena[d] = src->arena[d];
        dst->arena[d].off = NULL;
        if (!src->arena[d].off) continue;
        size_t n = src->arena[d].n;
        if (!(dst->arena[d].off = pm_malloc((n ? n : 1) * sizeof(size_t)))) st = nomem(err, "a copy");
        else memcpy(dst->arena[d].off, src->arena[d].off, n * sizeof(size_t));
    }
    if (st) {
        pm_plan_free(dst);
        return st;
    }
    memcpy(dst->first, src->first, ((size_t)src->S + 1) * sizeof *dst->first);
    memcpy(dst->sz, src->sz, nl * sizeof *dst->sz);
    memcpy(dst->dev, src->dev, (size_t)src->nd * sizeof *dst->dev);
    for (int s = 0; s < src->S; s++) dst->cost.st[s] = src->cost.st[s];
    dst->cost.c = src->cost.c;
    if ((st = pm_sim_run(&dst->sim, &dst->sched, &dst->cost, err))) pm_plan_free(dst);
    return st;
}
