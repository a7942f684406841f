/* simulate.c: the model-selection policies on D devices, as list
 * schedules over the tasks' pass lists (pm_select.h has the rules).
 *
 * Every policy is event-driven: the device that becomes free first picks
 * next, at the time it is free (or, when nothing is ready then, at the
 * earliest time something becomes ready). Within a task passes run strictly
 * in order, one at a time. The shard policy never leaves a device idle
 * while a task has a ready pass, so it stays within total / D + (1 - 1/D)
 * times the longest task (Graham's list-scheduling bound). Cost: O(P (D +
 * n)) for P passes of n tasks.
 *
 * Joining (pm_select.h; run.c's rules, prefetch aside): a device with no
 * ready task takes the next pass of a running task's round (a step's, or
 * an evaluation's), and a pass's timing follows the wavefront: its
 * microbatches each wait for the round's previous pass's same microbatch
 * (but for a lead before, a trail after), and a round's last pass waits for
 * every other pass of the round before its after part (the run's
 * write-back wait and the step end). Every pass taken has its times fixed
 * then: they depend only on the passes of its round taken before it. Cost:
 * O(P n s) more for s passes a round. */
#include <math.h>
#include <string.h>

#include "select/internal.h"
#include "model/passes.h"
#include "parts.h"

const char *const pm_select_policy_names[PM_POLICY_COUNT] = {"shard", "task", "sequential"};

void pm_select_sim_free(pm_select_sim *s) {
    if (!s) return;
    pm_free(s->busy);
    pm_free(s->dev);
    pm_free(s->start);
    pm_free(s->end);
    *s = (pm_select_sim){0};
}

typedef struct {
    const pm_select_work *w;
    int D;
    pm_select_sim *out;
    int64_t *base;  /* (n + 1) first global pass index of each task */
    int64_t *next;  /* (n) next pass of each task */
    double *ready;  /* (n) the latest end of each task's passes taken */
    double *left;   /* (n) cost of each task's remaining passes */
    double *free_at; /* (D) */
    int *last_task; /* (D) task whose pass each device ran last (-1 none) */
    int *last_shard; /* (D) and its shard */
    int join;       /* devices join running tasks (pm_select_simulate) */
    int kmax;       /* joining: the most microbatches of a task */
    double *mb;     /* (n, kmax) joining: each task's last taken pass's microbatch ends */
} simx;

/* Pass k of task t: its place in its round, its microbatches, and whether
 * it ends its round (pm_select_work). */
static int pos_of(const pm_select_work *w, int t, int64_t k) {
    return w->pos ? w->pos[t][k] : (int)(k % w->per_step[t]);
}
static int mbs_of(const pm_select_work *w, int t, int64_t k) {
    return w->mbs ? w->mbs[t][k] : w->micro[t];
}
static int round_last(const pm_select_work *w, int t, int64_t k) {
    return k + 1 >= w->npass[t] || pos_of(w, t, k + 1) == 0;
}

/* Joining's end of pass k of task t started at `at` (pm_select.h): its
 * part before, then each microbatch after its own previous one: its lead,
 * then (after the round's previous pass has put out the same microbatch)
 * the rest but its trail, when it puts out its own, then the trail; a
 * round's last pass then waits for the round's other passes (ready: the
 * latest end taken); then its part after. */
static double flow_end(simx *x, int t, int64_t k, double at) {
    const pm_select_work *w = x->w;
    int K = mbs_of(w, t, k), j = pos_of(w, t, k);
    double c = w->cost[t][k], pre = w->before ? w->before[t][k] : 0;
    double post = w->after ? w->after[t][k] : 0, each = fmax(0, c - pre - post) / K;
    double lead = w->lead ? w->lead[t][k] * each : 0, trail = w->trail ? w->trail[t][k] * each : 0;
    double e = at + pre, *mb = x->mb + (size_t)t * (size_t)x->kmax;
    for (int m = 0; m < K; m++) {
        double out = e + lead;
        if (j > 0 && mb[m] > out) out = mb[m];
        mb[m] = out += each - lead - trail;
        e = out + trail;
    }
    if (round_last(w, t, k) && x->ready[t] > e) e = x->ready[t];
    return e + post;
}

/* Task t's next pass on device d from `at`: it ends its cost later, or
 * where joining's wavefront says. */
static void run_pass(simx *x, int t, int d, double at) {
    const pm_select_work *w = x->w;
    int64_t k = x->next[t]++, g = x->base[t] + k;
    double c = w->cost[t][k], e = x->join ? flow_end(x, t, k, at) : at + c;
    x->out->dev[g] = d;
    x->out->start[g] = at;
    x->out->busy[d] += c;
    x->free_at[d] = x->out->end[g] = e;
    if (e > x->ready[t]) x->ready[t] = e;
    x->left[t] -= c;
    x->last_task[d] = t, x->last_shard[d] = w->shard[t][k];
    if (e > x->out->makespan) x->out->makespan = e;
}

/* Whether a device free at `at` may join task t: a pass of it runs, the
 * round's next pass is not its first (a round's last pass was taken: the
 * barrier), and no pass of the round on that shard still runs. */
static int joinable(const simx *x, int t, double at) {
    const pm_select_work *w = x->w;
    int64_t k = x->next[t];
    if (k >= w->npass[t] || x->ready[t] <= at || pos_of(w, t, k) == 0) return 0;
    for (int64_t q = k - pos_of(w, t, k); q < k; q++)
        if (w->shard[t][q] == w->shard[t][k] && x->out->end[x->base[t] + q] > at) return 0;
    return 1;
}

/* The joinable task with the most cost left (ties: the lower index), or -1. */
static int pick_join(const simx *x, double at) {
    int best = -1;
    for (int t = 0; t < x->w->ntask; t++)
        if (joinable(x, t, at) && (best < 0 || x->left[t] > x->left[best])) best = t;
    return best;
}

/* Joining, nothing to take at `at`: the next end after it of a pass of an
 * unfinished task's current round (a task then ready or a shard free). */
static double next_end(const simx *x, double at) {
    double r = INFINITY;
    for (int t = 0; t < x->w->ntask; t++) {
        int64_t k = x->next[t];
        if (k >= x->w->npass[t] || k == 0) continue;
        for (int64_t q = (k - 1) - pos_of(x->w, t, k - 1); q < k; q++) {
            double e = x->out->end[x->base[t] + q];
            if (e > at && e < r) r = e;
        }
    }
    return r;
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
        if (t < 0 && x->join) t = pick_join(x, at);
        if (t < 0) { /* nothing ready yet: idle devices wait for it */
            double r = x->join ? next_end(x, at) : next_ready(x);
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
    pm_free(x->mb);
    pm_free(x->base);
    pm_free(x->next);
    pm_free(x->ready);
    pm_free(x->left);
    pm_free(x->free_at);
    pm_free(x->last_task);
    pm_free(x->last_shard);
}

/* The least time task t (its cost `cost`) can take: joined, its passes on
 * at most min(D, its shards) devices at once (one per shard), and without
 * leads and trails its compute on at most min(D, shards, microbatches)
 * (two passes computing at once work on two microbatches; a lead or a
 * trail overlaps a neighbour's same microbatch, so then not), as the
 * run's task_bound; else all. */
static double task_bound(const simx *x, int t, double cost) {
    const pm_select_work *w = x->w;
    if (!x->join) return cost;
    int S = 1, K = 1;
    double compute = 0;
    for (int64_t k = 0; k < w->npass[t]; k++) {
        double pre = w->before ? w->before[t][k] : 0, post = w->after ? w->after[t][k] : 0;
        compute += fmax(0, w->cost[t][k] - pre - post);
        if (w->shard[t][k] + 1 > S) S = w->shard[t][k] + 1;
        if (mbs_of(w, t, k) > K) K = mbs_of(w, t, k);
    }
    double on = fmin(x->D, S);
    return w->lead || w->trail ? cost / on : fmax(cost / on, compute / fmin(on, K));
}

static pm_status simx_init(simx *x, const pm_select_work *w, int D, int join,
                           pm_select_sim *out, int64_t *total, pm_err *err) {
    size_t n = (size_t)w->ntask;
    *x = (simx){w, D, out, pm_malloc((n + 1) * sizeof(int64_t)), pm_calloc(n + 1, sizeof(int64_t)),
                pm_calloc(n + 1, sizeof(double)), pm_calloc(n + 1, sizeof(double)),
                pm_calloc((size_t)D, sizeof(double)), pm_malloc((size_t)D * sizeof(int)),
                pm_malloc((size_t)D * sizeof(int)), join, 1, NULL};
    if (!x->base || !x->next || !x->ready || !x->left || !x->free_at || !x->last_task ||
        !x->last_shard)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory simulating %d tasks", w->ntask);
    x->base[0] = 0;
    double longest = 0;
    for (int t = 0; t < w->ntask; t++) {
        x->base[t + 1] = x->base[t] + w->npass[t];
        for (int64_t k = 0; k < w->npass[t]; k++) x->left[t] += w->cost[t][k];
        out->total += x->left[t];
        double b = task_bound(x, t, x->left[t]);
        longest = b > longest ? b : longest;
        for (int64_t k = 0; join && k < w->npass[t]; k++)
            if (mbs_of(w, t, k) > x->kmax) x->kmax = mbs_of(w, t, k);
    }
    for (int d = 0; d < D; d++) x->last_task[d] = x->last_shard[d] = -1;
    *total = x->base[w->ntask];
    out->lower_bound = out->total / D > longest ? out->total / D : longest;
    out->busy = pm_calloc((size_t)D, sizeof(double));
    out->dev = pm_malloc((size_t)(*total ? *total : 1) * sizeof(int));
    out->start = pm_malloc((size_t)(*total ? *total : 1) * sizeof(double));
    out->end = pm_malloc((size_t)(*total ? *total : 1) * sizeof(double));
    if (join) x->mb = pm_calloc(n * (size_t)x->kmax, sizeof(double));
    if (!out->busy || !out->dev || !out->start || !out->end || (join && !x->mb))
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for %lld passes", (long long)*total);
    return PM_OK;
}

/* A task's pass list as pm_select.h says it must be; PM_ERR_ARG naming
 * the first thing wrong. */
static pm_status check_task(const pm_select_work *w, int t, pm_err *err) {
    if (w->per_step && w->micro && (w->per_step[t] < 1 || w->micro[t] < 1))
        return pm_errf(err, PM_ERR_ARG, "task %d: %d passes a step, %d microbatches (each >= 1)",
                       t, w->per_step[t], w->micro[t]);
    for (int64_t k = 0; k < w->npass[t]; k++) {
        double c = w->cost[t][k], pre = w->before ? w->before[t][k] : 0;
        double post = w->after ? w->after[t][k] : 0;
        if (!(c >= 0) || !isfinite(c) || w->shard[t][k] < 0 || !(pre >= 0) || !(post >= 0) ||
            !isfinite(pre + post))
            return pm_errf(err, PM_ERR_ARG, "task %d pass %lld: cost %g (before %g, after %g), "
                           "shard %d", t, (long long)k, c, pre, post, w->shard[t][k]);
        double ld = w->lead ? w->lead[t][k] : 0, tr = w->trail ? w->trail[t][k] : 0;
        int pos = w->pos ? w->pos[t][k] : 0, prev = k && w->pos ? w->pos[t][k - 1] : -1;
        if ((w->mbs && w->mbs[t][k] < 1) || (w->pos && pos != 0 && pos != prev + 1) ||
            !(ld >= 0 && tr >= 0 && ld + tr <= 1))
            return pm_errf(err, PM_ERR_ARG, "task %d pass %lld: place %d in its round after %d, "
                           "%d microbatches, lead %g, trail %g", t, (long long)k, pos, prev,
                           w->mbs ? w->mbs[t][k] : 0, ld, tr);
    }
    return PM_OK;
}

pm_status pm_select_simulate(const pm_select_work *w, int D, pm_select_policy pol, int no_join,
                             pm_select_sim *out, pm_err *err) {
    *out = (pm_select_sim){0};
    if (D < 1) return pm_errf(err, PM_ERR_ARG, "devices must be at least 1 (got %d)", D);
    if (w->ntask < 1) return pm_errf(err, PM_ERR_ARG, "no tasks to simulate");
    for (int t = 0; t < w->ntask; t++) {
        pm_status st = check_task(w, t, err);
        if (st) return st;
    }
    int join = !no_join && pol == PM_POLICY_SHARD && D > 1 && w->per_step && w->micro;
    simx x;
    int64_t total = 0;
    pm_status st = simx_init(&x, w, D, join, out, &total, err);
    if (!st) {
        if (pol == PM_POLICY_SHARD) policy_shard(&x, total);
        else if (pol == PM_POLICY_TASK) policy_task(&x);
        else policy_sequential(&x);
    }
    simx_free(&x);
    if (st) pm_select_sim_free(out);
    return st;
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
