/* simulate.c: the model-selection policies on D devices, as list
 * schedules over the tasks' pass lists (pm_select.h has the rules).
 *
 * Every policy is event-driven: the device that becomes free first picks
 * next, at the time it is free (or, when nothing is ready then, at the
 * earliest time something becomes ready). Within a task passes run strictly
 * in order, one at a time. The shard policy never leaves a device idle
 * while a task has a ready pass, so it stays within total / D + (1 - 1/D)
 * times the longest task (Graham's list-scheduling bound). Cost: O(P (D +
 * n)) for P passes of n tasks. */
#include <math.h>
#include <string.h>

#include "select/internal.h"

const char *const pm_select_policy_names[PM_POLICY_COUNT] = {"shard", "task", "sequential"};

void pm_select_sim_free(pm_select_sim *s) {
    if (!s) return;
    pm_free(s->busy);
    pm_free(s->dev);
    pm_free(s->start);
    *s = (pm_select_sim){0};
}

typedef struct {
    const pm_select_work *w;
    int D;
    pm_select_sim *out;
    int64_t *base;  /* (n + 1) first global pass index of each task */
    int64_t *next;  /* (n) next pass of each task */
    double *ready;  /* (n) end of each task's last pass */
    double *left;   /* (n) cost of each task's remaining passes */
    double *free_at; /* (D) */
    int *last_task; /* (D) task whose pass each device ran last (-1 none) */
    int *last_shard; /* (D) and its shard */
} simx;

static void run_pass(simx *x, int t, int d, double at) {
    const pm_select_work *w = x->w;
    int64_t k = x->next[t]++, g = x->base[t] + k;
    double c = w->cost[t][k];
    x->out->dev[g] = d;
    x->out->start[g] = at;
    x->out->busy[d] += c;
    x->free_at[d] = x->ready[t] = at + c;
    x->left[t] -= c;
    x->last_task[d] = t, x->last_shard[d] = w->shard[t][k];
    if (at + c > x->out->makespan) x->out->makespan = at + c;
}

static int earliest_device(const simx *x) {
    int d = 0;
    for (int e = 1; e < x->D; e++)
        if (x->free_at[e] < x->free_at[d]) d = e;
    return d;
}

int sel_lrtf_pick(const sel_lrtf *q, int n) {
    int best = -1, bf = 0;
    double bl = 0;
    for (int t = 0; t < n; t++) {
        if (!q->ready(q->ctx, t)) continue;
        int f = q->first ? q->first(q->ctx, t) : 0;
        double l = q->left(q->ctx, t);
        if (best < 0 || f > bf ||
            (f == bf && (l > bl * (1 + 1e-12) ||
                         (l >= bl * (1 - 1e-12) && q->here(q->ctx, t) && !q->here(q->ctx, best)))))
            best = t, bl = l, bf = f;
    }
    return best;
}

double sel_est_left(const sel_est *e) {
    double step = 0, rest = 0;
    for (int k = 0; k < e->np; k++) {
        double s = e->cnt && e->cnt[k] ? e->sec[k] / (double)e->cnt[k] : e->fl[k] * e->spf;
        step += s;
        if (k >= e->pass) rest += s;
    }
    double ev = e->eval >= 0 ? e->eval : e->eval_fl * e->spf;
    return rest + e->after + (double)e->steps_after * (step + e->after) + (double)e->evals * ev;
}

/* Sharded-LRTF in the simulation: ready is not running at `at`; device d
 * holds the shard it ran last. */
typedef struct {
    const simx *x;
    int d;
    double at;
} sim_pick;

static int sim_ready(const void *ctx, int t) {
    const sim_pick *c = ctx;
    return c->x->next[t] < c->x->w->npass[t] && c->x->ready[t] <= c->at;
}

static double sim_left(const void *ctx, int t) { return ((const sim_pick *)ctx)->x->left[t]; }

static int sim_here(const void *ctx, int t) {
    const sim_pick *c = ctx;
    return c->x->last_task[c->d] == t && c->x->last_shard[c->d] == c->x->w->shard[t][c->x->next[t]];
}

static int pick_shard(const simx *x, int d, double at) {
    sim_pick c = {x, d, at};
    sel_lrtf q = {sim_ready, sim_left, sim_here, NULL, &c};
    return sel_lrtf_pick(&q, x->w->ntask);
}

/* Earliest time an unfinished task's next pass is ready (INFINITY: none). */
static double next_ready(const simx *x) {
    double t0 = INFINITY;
    for (int t = 0; t < x->w->ntask; t++)
        if (x->next[t] < x->w->npass[t] && x->ready[t] < t0) t0 = x->ready[t];
    return t0;
}

static void policy_shard(simx *x, int64_t total) {
    for (int64_t done = 0; done < total;) {
        int d = earliest_device(x);
        double at = x->free_at[d];
        int t = pick_shard(x, d, at);
        if (t < 0) { /* nothing ready yet: idle devices wait for it */
            double r = next_ready(x);
            for (int e = 0; e < x->D; e++)
                if (x->free_at[e] < r) x->free_at[e] = r;
            continue;
        }
        run_pass(x, t, d, at);
        done++;
    }
}

/* Whole tasks: longest total first, each on the device free first. */
static void policy_task(simx *x) {
    for (;;) {
        int best = -1;
        for (int t = 0; t < x->w->ntask; t++)
            if (x->next[t] == 0 && x->w->npass[t] > 0 && (best < 0 || x->left[t] > x->left[best]))
                best = t;
        if (best < 0) return;
        int d = earliest_device(x);
        while (x->next[best] < x->w->npass[best]) run_pass(x, best, d, x->free_at[d]);
    }
}

/* Tasks one after another, shard k on device k mod D, nothing overlapped. */
static void policy_sequential(simx *x) {
    double at = 0;
    for (int t = 0; t < x->w->ntask; t++)
        while (x->next[t] < x->w->npass[t]) {
            int d = x->w->shard[t][x->next[t]] % x->D;
            run_pass(x, t, d, at);
            at = x->ready[t];
        }
}

static void simx_free(simx *x) {
    pm_free(x->base);
    pm_free(x->next);
    pm_free(x->ready);
    pm_free(x->left);
    pm_free(x->free_at);
    pm_free(x->last_task);
    pm_free(x->last_shard);
}

static pm_status simx_init(simx *x, const pm_select_work *w, int D, pm_select_sim *out,
                           int64_t *total, pm_err *err) {
    size_t n = (size_t)w->ntask;
    *x = (simx){w, D, out, pm_malloc((n + 1) * sizeof(int64_t)), pm_calloc(n + 1, sizeof(int64_t)),
                pm_calloc(n + 1, sizeof(double)), pm_calloc(n + 1, sizeof(double)),
                pm_calloc((size_t)D, sizeof(double)), pm_malloc((size_t)D * sizeof(int)),
                pm_malloc((size_t)D * sizeof(int))};
    if (!x->base || !x->next || !x->ready || !x->left || !x->free_at || !x->last_task ||
        !x->last_shard)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory simulating %d tasks", w->ntask);
    x->base[0] = 0;
    double longest = 0;
    for (int t = 0; t < w->ntask; t++) {
        x->base[t + 1] = x->base[t] + w->npass[t];
        for (int64_t k = 0; k < w->npass[t]; k++) x->left[t] += w->cost[t][k];
        out->total += x->left[t];
        longest = x->left[t] > longest ? x->left[t] : longest;
    }
    for (int d = 0; d < D; d++) x->last_task[d] = x->last_shard[d] = -1;
    *total = x->base[w->ntask];
    out->lower_bound = out->total / D > longest ? out->total / D : longest;
    out->busy = pm_calloc((size_t)D, sizeof(double));
    out->dev = pm_malloc((size_t)(*total ? *total : 1) * sizeof(int));
    out->start = pm_malloc((size_t)(*total ? *total : 1) * sizeof(double));
    if (!out->busy || !out->dev || !out->start)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for %lld passes", (long long)*total);
    return PM_OK;
}

pm_status pm_select_simulate(const pm_select_work *w, int D, pm_select_policy pol,
                             pm_select_sim *out, pm_err *err) {
    *out = (pm_select_sim){0};
    if (D < 1) return pm_errf(err, PM_ERR_ARG, "devices must be at least 1 (got %d)", D);
    if (w->ntask < 1) return pm_errf(err, PM_ERR_ARG, "no tasks to simulate");
    for (int t = 0; t < w->ntask; t++)
        for (int64_t k = 0; k < w->npass[t]; k++)
            if (!(w->cost[t][k] >= 0) || !isfinite(w->cost[t][k]) || w->shard[t][k] < 0)
                return pm_errf(err, PM_ERR_ARG, "task %d pass %lld: cost %g, shard %d", t,
                               (long long)k, w->cost[t][k], w->shard[t][k]);
    simx x;
    int64_t total = 0;
    pm_status st = simx_init(&x, w, D, out, &total, err);
    if (!st) {
        if (pol == PM_POLICY_SHARD) policy_shard(&x, total);
        else if (pol == PM_POLICY_TASK) policy_task(&x);
        else policy_sequential(&x);
    }
    simx_free(&x);
    if (st) pm_select_sim_free(out);
    return st;
}

void pm_select_task_passes(const pm_select_task *t, int64_t steps, double rate, int *shard,
                           double *cost) {
    int S = t->nshard, K = t->cfg.micro;
    int64_t i = 0;
    for (int64_t s = 0; s < steps; s++) {
        for (int k = 0; k < S - 1; k++, i++)
            shard[i] = k, cost[i] = K * t->shard[k].flops_f / rate;
        shard[i] = S - 1, cost[i++] = K * (t->shard[S - 1].flops_f + t->shard[S - 1].flops_bw) / rate;
        for (int k = S - 2; k >= 0; k--, i++)
            shard[i] = k, cost[i] = K * (2 * t->shard[k].flops_f + t->shard[k].flops_bw) / rate;
    }
}

pm_status pm_select_rate(const pm_select_task *t, int n, double *rate, pm_err *err) {
    int w = 0;
    for (int i = 1; i < n; i++)
        if (t[i].cfg.model.dim > t[w].cfg.model.dim) w = i;
    const pm_train_cfg *c = &t[w].cfg;
    int B = c->batch / c->micro;
    double tm[3];
    pm_gpt_sizes z;
    pm_status st = pm_gpt_time_layer(&c->model, 1, B, c->model.ctx, tm, err);
    if (!st) st = pm_gpt_layer_sizes(&c->model, 1, B, c->model.ctx, &z, err);
    if (st) return st;
    *rate = (z.flops_f + z.flops_b + z.flops_w) / (tm[0] + tm[1] + tm[2]);
    return PM_OK;
}
