/* placement.c: which layers each pipeline stage runs, and the per-stage
 * costs and memory deltas the simulator needs for that placement.
 *
 * Rule (pm_plan.h): contiguous ranges in layer order, every stage non-
 * empty, minimising the busiest DEVICE's time for one microbatch (the sum
 * over its stages: under V device 0 holds the embedding's stage and the
 * head's), then the largest device memory (the activations a stage holds
 * count once per microbatch in flight: early stages of 1F1B hold p), then
 * the sum of squared device times (the rest evened out). The memory rule
 * takes the largest device memory first, then the busiest time, then the
 * squares. Either may run under a cap on every device's memory: the best
 * cut among those that fit, or PM_ERR_MEMLIMIT naming the least any cut
 * needs. The cut sees a model only as a table of layers (pm_place_layer:
 * what it balances, its pass times, activation and state bytes), so
 * pipemem's GPT (pm_place_table: its kind's measured F + B + W,
 * pm_place_measure, or before anything is measured its FLOPs) and a GPT
 * sized by formulas for a GPU cluster (pm_cluster.h) are placed by the
 * same code.
 *
 * Search: depth-first over the cut points with the best cut's first figure
 * (time or memory) as the bound, and the cap: a stage that pushes its
 * device past either ends the branch, and so do all longer ones (a longer
 * stage only adds time and bytes). Seeded with whichever stage-balanced cut
 * (of time, of memory: dynamic programs, O(S n log n) figures) fits and
 * ranks better. Exact unless PLACE_NODES partial cuts are visited (then
 * the best found): equal layers make many cuts of one time, which the
 * search ranks by memory one by one, so a loop placement of 32 layers into
 * 16 stages reaches the limit, as do most cuts of 96 layers. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "schedule/sched.h"
#include "model/passes.h"
#include "placement.h"

/* PLACE_CELLS: the most (stage, layer) cells a seed's dynamic program
 * fills (4 bytes and about 40 stage figures each): 1000 stages of 65536
 * blocks in a few seconds */
enum { PLACE_NODES = 4000000, PLACE_CELLS = 1 << 26 };

static atomic_llong evals; /* pm_place_evals */

int64_t pm_place_evals(void) { return (int64_t)atomic_load(&evals); }

const char *const pm_cut_rule_names[PM_CUT_RULES] = {"time", "memory"};
_Static_assert(sizeof pm_cut_rule_names / sizeof pm_cut_rule_names[0] == PM_CUT_RULES,
               "names");
#define TIE 1e-9 /* relative: times closer than this are equal */

/* ---- the layers' costs --------------------------------------------------- */

/* Each layer kind's F, B and W: counted (FLOPs) or timed (seconds), the
 * head whole whatever cfg's parts (a part is charged its share later). */
static pm_status kind_costs(const pm_gpt_config *cfg, int B, int T, int timed,
                            pm_layer_costs *lc, pm_err *err) {
    pm_gpt_config one = *cfg;
    one.head_parts = 0;
    pm_status st = pm_gpt_config_check(&one, err);
    const int layer[PM_LAYER_KIND_COUNT] = {0, 1, one.layers + 1};
    for (int k = 0; k < PM_LAYER_KIND_COUNT && !st; k++) {
        pm_gpt_sizes z;
        double t[3];
        if (timed && !(st = pm_gpt_time_layer(&one, layer[k], B, T, t, err)))
            lc->k[k] = (pm_pass_times){t[0], t[1], t[2]};
        else if (!timed && !(st = pm_gpt_layer_sizes(&one, layer[k], B, T, &z, err)))
            lc->k[k] = (pm_pass_times){z.flops_f, z.flops_b, z.flops_w};
    }
    lc->unit = timed ? "s" : "flop";
    lc->timed_ctx = 0;
    return st;
}

/* A pass's cost ratio: its FLOPs' where it has products, else the tokens'
 * (its work is per token: a lookup, a copy, a norm). */
static double pass_ratio(double to, double from, double tokens) {
    return from > 0 ? to / from : tokens;
}

pm_status pm_place_scale_costs(const pm_gpt_config *cfg, int B, int from_T, int to_T,
                               pm_layer_costs *lc, pm_err *err) {
    pm_layer_costs a, b;
    pm_status st = kind_costs(cfg, B, from_T, 0, &a, err);
    if (!st) st = kind_costs(cfg, B, to_T, 0, &b, err);
    if (st) return st;
    double tok = (double)to_T / (double)from_T;
    for (int k = 0; k < PM_LAYER_KIND_COUNT; k++) {
        pm_pass_times *t = &lc->k[k];
        t->f *= pass_ratio(b.k[k].f, a.k[k].f, tok);
        t->b *= pass_ratio(b.k[k].b, a.k[k].b, tok);
        t->w *= pass_ratio(b.k[k].w, a.k[k].w, tok);
    }
    return PM_OK;
}

pm_status pm_place_flops(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                         pm_err *err) {
    return kind_costs(cfg, B, T, 0, lc, err);
}

/* The length a measurement times: T, or the cap. */
static int timed_len(int T) { return T < PM_PLACE_MEASURE_CTX ? T : PM_PLACE_MEASURE_CTX; }

/* lc, timed at timed_len(T), carried to T. */
static pm_status scale_to(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                          pm_err *err) {
    int Tm = timed_len(T);
    if (Tm == T) return PM_OK;
    lc->timed_ctx = Tm;
    return pm_place_scale_costs(cfg, B, Tm, T, lc, err);
}

pm_status pm_place_measure(const pm_gpt_config *cfg, int B, int T, pm_layer_costs *lc,
                           pm_err *err) {
    pm_status st = kind_costs(cfg, B, timed_len(T), 1, lc, err);
    return st ? st : scale_to(cfg, B, T, lc, err);
}

/* One measuring thread of pm_place_measure_threads. */
typedef struct {
    const pm_gpt_config *cfg;
    int B, T;
    pm_layer_costs lc;
    pm_status st;
    pm_err err;
} measure_job;

static void *measure_run(void *arg) {
    measure_job *j = arg;
    j->st = kind_costs(j->cfg, j->B, j->T, 1, &j->lc, &j->err);
    return NULL;
}

pm_status pm_place_measure_threads(const pm_gpt_config *cfg, int B, int T, int threads,
                                   pm_layer_costs *lc, pm_err *err) {
    if (threads < 1 || threads > 1024)
        return pm_errf(err, PM_ERR_ARG, "threads=%d: must be 1..1024", threads);
    measure_job *job = pm_calloc((size_t)threads, sizeof *job);
    pthread_t *th = pm_calloc((size_t)threads, sizeof *th);
    int started = 0;
    pm_status st = job && th ? PM_OK : pm_errf(err, PM_ERR_NOMEM, "placement: out of memory");
    for (int i = 0; !st && i < threads; i++)
        job[i] = (measure_job){.cfg = cfg, .B = B, .T = timed_len(T)};
    /* the others start first, so the caller's measurement overlaps theirs */
    for (; !st && started < threads - 1; started++)
        if (pthread_create(&th[started], NULL, measure_run, &job[started + 1]))
            st = pm_errf(err, PM_ERR_NOMEM, "placement: cannot start a measuring thread");
    if (!st) measure_run(&job[0]);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int i = 0; !st && i < threads; i++)
        if (job[i].st) st = pm_errf(err, job[i].st, "%s", job[i].err.msg);
    if (!st) { /* each pass's mean over the threads */
        *lc = (pm_layer_costs){.unit = "s"};
        for (int i = 0; i < threads; i++)
            for (int k = 0; k < PM_LAYER_KIND_COUNT; k++) {
                const pm_pass_times *t = &job[i].lc.k[k];
                lc->k[k].f += t->f / threads, lc->k[k].b += t->b / threads;
                lc->k[k].w += t->w / threads;
            }
    }
    if (!st) st = scale_to(cfg, B, T, lc, err);
    pm_free(job);
    pm_free(th);
    return st;
}

/* ---- the cut ------------------------------------------------------------- */

/* How many microbatches each stage holds at most at once under s (F done,
 * W not yet): its activations count that many times in a device's memory. */
static void stage_inflight(const pm_sched *s, int *hold, int *live) {
    for (int k = 0; k < s->S; k++) hold[k] = 1, live[k] = 0;
    for (int d = 0; d < s->p; d++)
        for (int64_t i = 0; i < s->len[d]; i++) {
            const pm_pass *ps = &s->pass[(int64_t)d * s->cap + i];
            if (ps->kind == PM_PASS_F && ++live[ps->stage] > hold[ps->stage])
                hold[ps->stage] = live[ps->stage];
            if (ps->kind == PM_PASS_W || ps->kind == PM_PASS_BW) live[ps->stage]--;
        }
}

/* The search's tables (one allocation each for doubles and ints). */
typedef struct {
    int n, S, p;
    int rec;        /* the schedule recomputes: a stage in flight keeps its input */
    pm_cut_rule rule; /* what ranks first: the busiest time or the largest memory */
    double cap;     /* bytes a device may hold, as stage_mem counts them; 0: no cap */
    const double *extra; /* (p) what each device holds besides (its count starts there);
                          * NULL: none */
    int *dev;       /* (S) stage -> device */
    int *hold;      /* (S) microbatches a stage holds at most */
    double *pre;    /* (n+1) prefix sums of layer weight (what the cut balances) */
    double *prem;   /* (n+1) prefix sums of layer state bytes */
    double *pres;   /* (n+1) prefix sums of layer saved bytes */
    double *inb;    /* (n+1) bytes of layer l's input (0 for the embedding's tokens) */
    double *load, *mem; /* (p) per device, the partial cut's */
    int *cut, *best;    /* (S+1) the partial cut; the best cut (the caller's first[]) */
    int *seed;          /* (S+1) a balanced cut */
    double best_t, best_q, best_m; /* the best cut's max time, sum of squared times, max
                                    * memory; all INFINITY while no cut fits */
    long nodes;
    int64_t evals;  /* stage figures evaluated (pm_place_evals) */
    double *dbl;    /* the allocations */
    int *ints;
} place_search;

static double vmax(const double *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static double sumsq(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

/* a below b by more than rounding */
static int better(double a, double b) { return a < b * (1 - TIE); }

/* A whole cut's figures rank before the best so far under q's rule: its
 * first figure (time, or memory) lower by more than rounding, or equal and
 * its second lower, or both equal and its squared times lower. */
static int ranks_before(const place_search *q, double t, double m, double sq) {
    int mf = q->rule == PM_CUT_MEMORY;
    double a = mf ? m : t, a0 = mf ? q->best_m : q->best_t;
    double b = mf ? t : m, b0 = mf ? q->best_t : q->best_m;
    if (better(a, a0) || better(a0, a)) return better(a, a0);
    if (better(b, b0) || better(b0, b)) return better(b, b0);
    return better(sq, q->best_q);
}

/* Stage k = layers i .. j-1: its state, and its activations once per
 * microbatch in flight (recomputed: its input per microbatch, and one
 * microbatch's rebuilt activations). */
static double stage_mem(const place_search *q, int k, int i, int j) {
    double act = q->pres[j] - q->pres[i];
    act = q->rec ? act + q->hold[k] * q->inb[i] : act * q->hold[k];
    return q->prem[j] - q->prem[i] + act;
}

/* Fills q for the n layers of l under s. */
static pm_status search_init(place_search *q, const pm_place_layer *l, int n, const pm_sched *s,
                             pm_err *err) {
    size_t nn = (size_t)n + 1, ns = (size_t)s->S + 1, np = (size_t)s->p;
    *q = (place_search){.n = n, .S = s->S, .p = s->p, .rec = s->recompute != 0};
    q->dbl = pm_calloc(4 * nn + 2 * np, sizeof *q->dbl);
    q->ints = pm_calloc(5 * ns, sizeof *q->ints);
    if (!q->dbl || !q->ints) return pm_errf(err, PM_ERR_NOMEM, "placement: out of memory");
    q->pre = q->dbl, q->prem = q->pre + nn, q->pres = q->prem + nn, q->inb = q->pres + nn;
    q->load = q->inb + nn, q->mem = q->load + np;
    q->dev = q->ints, q->hold = q->dev + ns, q->cut = q->hold + ns, q->seed = q->cut + ns;
    int *live = q->seed + ns; /* stage_inflight's scratch */
    for (int i = 0; i < n; i++) {
        q->pre[i + 1] = q->pre[i] + l[i].weight;
        q->prem[i + 1] = q->prem[i] + l[i].state;
        q->pres[i + 1] = q->pres[i] + l[i].act;
        q->inb[i] = l[i].in;
    }
    for (int k = 0; k < s->S; k++) q->dev[k] = pm_sched_stage_device(s, k);
    stage_inflight(s, q->hold, live);
    return PM_OK;
}

static void search_free(place_search *q) {
    pm_free(q->dbl);
    pm_free(q->ints);
}

/* No stage yet: each device's time 0, its memory what it holds besides. */
static void search_clear(place_search *q) {
    for (int d = 0; d < q->p; d++) q->load[d] = 0, q->mem[d] = q->extra ? q->extra[d] : 0;
}

/* Each device's time and memory under the cut first[]. */
static void search_eval(place_search *q, const int *first) {
    search_clear(q);
    for (int k = 0; k < q->S; k++) {
        q->load[q->dev[k]] += q->pre[first[k + 1]] - q->pre[first[k]];
        q->mem[q->dev[k]] += stage_mem(q, k, first[k], first[k + 1]);
    }
}

/* The devices' figures now (a whole cut) become the best when they fit the
 * cap and rank before it; c is the cut. */
static void consider(place_search *q, const int *c) {
    double bt = vmax(q->load, q->p), bq = sumsq(q->load, q->p), bm = vmax(q->mem, q->p);
    if ((q->cap > 0 && bm > q->cap) || !ranks_before(q, bt, bm, bq)) return;
    q->best_t = bt, q->best_q = bq, q->best_m = bm;
    memcpy(q->best, c, (size_t)(q->S + 1) * sizeof *c);
}

/* Stage k starts at layer i; the devices hold the stages before it. */
static void dfs(place_search *q, int k, int i) {
    if (++q->nodes > PLACE_NODES) return;
    int d = q->dev[k], last = k == q->S - 1, mf = q->rule == PM_CUT_MEMORY;
    for (int j = last ? q->n : i + 1; j <= q->n - (q->S - 1 - k); j++) {
        double t = q->pre[j] - q->pre[i], m = stage_mem(q, k, i, j);
        q->evals++;
        q->load[d] += t;
        q->mem[d] += m;
        /* past the best's first figure or the cap: so is any longer stage */
        int over = mf ? q->mem[d] > q->best_m * (1 + TIE) : q->load[d] > q->best_t * (1 + TIE);
        over = over || (q->cap > 0 && q->mem[d] > q->cap);
        q->cut[k + 1] = j;
        if (!over && last) consider(q, q->cut);
        else if (!over) dfs(q, k + 1, j);
        q->load[d] -= t;
        q->mem[d] -= m;
        if (over) break; /* a longer stage only adds */
    }
}

/* Stage k = layers i .. j-1 as a balanced seed weighs it: time or memory. */
static double stage_fig(place_search *q, int memory, int k, int i, int j) {
    q->evals++;
    return memory ? stage_mem(q, k, i, j) : q->pre[j] - q->pre[i];
}

/* The first index at or after leaf lo whose value is at most v in a min
 * tree (t[1] the root, leaves at t[size ..]), or -1. */
static int first_at_most(const double *t, int size, int lo, double v) {
    int i = lo + size;
    for (;;) {
        if (t[i] <= v) {
            while (i < size) i = t[2 * i] <= v ? 2 * i : 2 * i + 1;
            return i - size;
        }
        while (i & 1) i >>= 1; /* a right child: up to the nearest left one, */
        if (!i) return -1;
        i++; /* then the subtree just right of everything seen */
    }
}

/* One row of the balanced cut's dynamic program, from the row before
 * (A[j]: the least largest figure of k-1 stages over layers 0 .. j-1, for
 * j >= k-1): for each end i >= k, cur[i], the least over starts j of
 * max(A[j], f(j, i)), f the figure of layers j .. i-1 as stage k-1, and
 * cut[i], the smallest start reaching it: what trying every start gives,
 * in O(log n) figures an end instead of O(n). Since f never grows as its
 * stage starts later, a start whose A is not below a later one's is never
 * better: only the strict suffix minima of A compete (rec: A rising, f
 * falling along them), and the best of them is where A crosses f (a
 * bisection). The smallest start at that value v is then the first at or
 * after the one where f falls to v whose A is at most v (the min tree t
 * over A). Where f does grow (a recomputed stage's kept input larger than
 * the layer it drops) the row is still a cut, which is all a seed needs. */
static void cut_row(place_search *q, int memory, int k, const double *A, double *cur, int *cut,
                    int *rec, double *t, int size) {
    int n = q->n, top = 0;
    for (int j = 0; j < size; j++) t[size + j] = j >= k - 1 && j < n ? A[j] : INFINITY;
    for (int x = size - 1; x >= 1; x--) t[x] = fmin(t[2 * x], t[2 * x + 1]);
    for (int i = k; i <= n; i++) {
        while (top && A[rec[top - 1]] >= A[i - 1]) top--;
        rec[top++] = i - 1;
        int lo = 0, hi = top;
        while (lo < hi) { /* the first record where A is at least f */
            int mid = (lo + hi) / 2;
            if (A[rec[mid]] >= stage_fig(q, memory, k - 1, rec[mid], i)) hi = mid;
            else lo = mid + 1;
        }
        double v = lo < top ? A[rec[lo]] : INFINITY;
        if (lo > 0) v = fmin(v, stage_fig(q, memory, k - 1, rec[lo - 1], i));
        int a = k - 1, b = i - 1; /* the first start whose f is at most v */
        while (a < b) {
            int mid = (a + b) / 2;
            if (stage_fig(q, memory, k - 1, mid, i) <= v) b = mid;
            else a = mid + 1;
        }
        int j = first_at_most(t, size, a, v);
        cur[i] = v, cut[i] = j >= a && j < i ? j : a;
    }
}

/* The stage-balanced cut of time or of memory (min over cuts of the
 * largest stage's), by dynamic programming (cut_row), into first: a seed
 * of the search. 0 when out of memory. */
static int balanced_cut(place_search *q, int memory, int *first) {
    int n = q->n, S = q->S, size = 1;
    while (size < n + 1) size *= 2;
    size_t nn = (size_t)n + 1;
    double *row = pm_malloc((2 * nn + 2 * (size_t)size) * sizeof *row);
    int *cut = pm_malloc(((size_t)S + 2) * nn * sizeof *cut);
    if (!row || !cut) {
        pm_free(row);
        pm_free(cut);
        return 0;
    }
    double *A = row, *cur = row + nn, *t = cur + nn;
    int *rec = cut + ((size_t)S + 1) * nn;
    for (int i = 1; i <= n; i++) A[i] = stage_fig(q, memory, 0, 0, i), cut[nn + (size_t)i] = 0;
    for (int k = 2; k <= S; k++) {
        cut_row(q, memory, k, A, cur, cut + (size_t)k * nn, rec, t, size);
        double *x = A;
        A = cur, cur = x;
    }
    first[S] = n;
    for (int k = S, i = n; k >= 1; k--) first[k - 1] = i = cut[(size_t)k * nn + (size_t)i];
    pm_free(row);
    pm_free(cut);
    return 1;
}

/* The best cut under q's rule and cap into q->best: 1, or 0 when no cut
 * fits the cap (q->best then unchanged), -1 out of memory. */
static int search_run(place_search *q) {
    q->best_t = q->best_q = q->best_m = INFINITY;
    q->nodes = 0;
    for (int memory = 0; memory < 2; memory++) {
        if (!balanced_cut(q, memory, q->seed)) return -1;
        search_eval(q, q->seed);
        consider(q, q->seed);
    }
    search_clear(q);
    q->cut[0] = 0;
    dfs(q, 0, 0);
    return q->best_m < INFINITY;
}

/* ---- pipemem's GPT as a layer table ---------------------------------------- */

pm_status pm_place_table(const pm_gpt_config *cfg, int B, int T, const pm_layer_costs *lc,
                         pm_place_layer *l, pm_err *err) {
    pm_layer_costs flops;
    pm_status st = lc ? PM_OK : pm_place_flops(cfg, B, T, &flops, err);
    if (st) return st;
    if (!lc) lc = &flops;
    for (int i = 0; i < pm_gpt_num_layers(cfg); i++) {
        pm_gpt_sizes z;
        if ((st = pm_gpt_layer_sizes(cfg, i, B, T, &z, err))) return st;
        pm_layer_kind kind = pm_gpt_layer_kind(cfg, i);
        const pm_pass_times *t = &lc->k[kind];
        double share = 1, tf = t->f; /* a head part: its rows' share of the whole head */
        if (kind == PM_LAYER_HEAD) {
            size_t r0, r1;
            pm_gpt_head_rows(cfg, i, &r0, &r1);
            share = (double)(r1 - r0) / cfg->vocab;
            /* the costs are a one-part head's, which makes its logits in B;
             * a head in parts makes them in F too: one of B's two products */
            if (pm_gpt_head_parts(cfg) > 1) tf = t->f + t->b / 2;
        }
        double params = (double)pm_gpt_layer_params(cfg, i);
        l[i] = (pm_place_layer){.weight = (tf + t->b + t->w) * share,
                                .tf = tf * share, .tb = t->b * share, .tw = t->w * share,
                                .act = (double)z.saved, .act_w = (double)z.saved_w,
                                .in = i ? (double)z.in : 0, .params = params,
                                /* parameters, gradients and the two AdamW moments */
                                .state = 4.0 * sizeof(float) * params};
    }
    return PM_OK;
}

/* ---- the cut of any layer table ------------------------------------------- */

pm_status pm_place_fill(int n, int64_t S, pm_err *err) {
    if (n >= S) return PM_OK;
    return pm_errf(err, PM_ERR_ARG, "placement: %d layers cannot fill %lld stages (each needs "
                   "at least one): use more layers, fewer devices or fewer chunks", n,
                   (long long)S);
}

pm_status pm_place_cut(const pm_place_layer *l, int n, const pm_sched *s,
                       const pm_cut_opts *o, int *first, double *least, pm_err *err) {
    int S = s->S;
    const pm_cut_opts none = {.rule = PM_CUT_TIME};
    if (!o) o = &none;
    pm_status st = pm_place_fill(n, S, err);
    if (st) return st;
    if ((int64_t)S * n > PLACE_CELLS)
        return pm_errf(err, PM_ERR_ARG, "placement: %d layers into %d stages is beyond the "
                       "cut (stages x layers = %lld, at most %d): use fewer devices, chunks "
                       "or layers", n, S, (long long)S * n, PLACE_CELLS);
    if ((int)o->rule < 0 || o->rule >= PM_CUT_RULES || !(o->cap >= 0 && o->cap < 1e18))
        return pm_errf(err, PM_ERR_ARG, "cut: rule %d, cap %g bytes: the rule is "
                       "PM_CUT_TIME or PM_CUT_MEMORY, the cap 0 (none) up to 1e18",
                       (int)o->rule, o->cap);
    place_search q;
    st = search_init(&q, l, n, s, err);
    q.best = first, q.rule = o->rule, q.cap = o->cap, q.extra = o->extra;
    int found = st ? 0 : search_run(&q);
    if (!st && !found) { /* the least any cut needs: the memory rule's best, no cap */
        q.rule = PM_CUT_MEMORY, q.cap = 0;
        found = search_run(&q);
        /* it can fit only when the capped search ran out of nodes */
        if (found > 0 && q.best_m > o->cap) {
            char cap[32], need[32];
            pm_bytes_str((size_t)o->cap, cap, sizeof cap); /* counts are whole bytes */
            pm_bytes_str((size_t)q.best_m, need, sizeof need);
            st = pm_errf(err, PM_ERR_MEMLIMIT, "placement: no cut of the %d layers into %d "
                         "stages keeps every device within %s (%.0f bytes: state and the "
                         "activations in flight); the least any cut needs is %s (%.0f bytes)",
                         n, S, cap, floor(o->cap), need, q.best_m);
        }
    }
    if (!st && found < 0) st = pm_errf(err, PM_ERR_NOMEM, "placement: out of memory");
    if (!st || st == PM_ERR_MEMLIMIT) {
        if (least) *least = q.best_m;
        PM_ASSERT(first[0] == 0 && first[S] == n);
    }
    atomic_fetch_add_explicit(&evals, (long long)q.evals, memory_order_relaxed);
    search_free(&q);
    return st;
}

pm_status pm_place_cut_shares(const pm_place_layer *l, int n, const pm_sched *s,
                              const int *first, double *time, double *mem, pm_err *err) {
    place_search q;
    pm_status st = search_init(&q, l, n, s, err);
    if (!st) {
        search_eval(&q, first);
        memcpy(time, q.load, (size_t)q.p * sizeof *time);
        memcpy(mem, q.mem, (size_t)q.p * sizeof *mem);
    }
    search_free(&q);
    return st;
}

pm_status pm_place_stage_costs(const pm_place_layer *l, const int *first, int S, int recompute,
                               pm_cost *c, pm_err *err) {
    pm_status st = pm_cost_init(c, S, err);
    if (st) return st;
    for (int s = 0; s < S; s++) {
        double saved = 0, saved_w = 0, tf = 0, tb = 0, tw = 0;
        for (int i = first[s]; i < first[s + 1]; i++) {
            saved += l[i].act, saved_w += l[i].act_w;
            tf += l[i].tf, tb += l[i].tb, tw += l[i].tw;
        }
        /* recomputed, a stage keeps its first layer's input (tokens stay in the batch) */
        c->st[s] = (pm_stage_cost){tf, tb, tw, saved, -(saved - saved_w), -saved_w,
                                   l[first[s]].in, recompute != 0};
    }
    c->c = 0;
    return PM_OK;
}

/* ---- pipemem's GPT: the table, then the cut -------------------------------- */

/* The GPT's table (cfg checked) in *out, allocated (the caller frees). */
static pm_status gpt_table(const pm_gpt_config *cfg, int B, int T, const pm_layer_costs *lc,
                           pm_place_layer **out, pm_err *err) {
    *out = NULL;
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st) return st;
    pm_place_layer *l = pm_malloc((size_t)pm_gpt_num_layers(cfg) * sizeof *l);
    if (!l) return pm_errf(err, PM_ERR_NOMEM, "placement: out of memory");
    if ((st = pm_place_table(cfg, B, T, lc, l, err))) pm_free(l);
    else *out = l;
    return st;
}

pm_status pm_place_room(const pm_gpt_config *cfg, int S, pm_err *err) {
    int n = pm_gpt_num_layers(cfg);
    if (n >= S) return PM_OK;
    return pm_errf(err, PM_ERR_ARG,
                   "placement: the model has %d layers (embedding, %d blocks, head in %d "
                   "part%s) but the schedule has %d stages, each needing at least one layer; "
                   "use model.layers >= %d, fewer devices or fewer chunks", n, cfg->layers,
                   pm_gpt_head_parts(cfg), pm_gpt_head_parts(cfg) > 1 ? "s" : "", S,
                   S - 1 - pm_gpt_head_parts(cfg));
}

pm_status pm_place_layers(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const pm_cut_opts *o, int *first,
                          pm_err *err) {
    pm_status st = pm_gpt_config_check(cfg, err);
    if (st || (st = pm_place_room(cfg, s->S, err))) return st;
    pm_place_layer *l;
    if ((st = gpt_table(cfg, B, T, lc, &l, err))) return st;
    st = pm_place_cut(l, pm_gpt_num_layers(cfg), s, o, first, NULL, err);
    pm_free(l);
    return st;
}

pm_status pm_place_shares(const pm_gpt_config *cfg, int B, int T, const pm_sched *s,
                          const pm_layer_costs *lc, const int *first, double *time,
                          double *mem, pm_err *err) {
    pm_place_layer *l;
    pm_status st = gpt_table(cfg, B, T, lc, &l, err);
    if (st) return st;
    st = pm_place_cut_shares(l, pm_gpt_num_layers(cfg), s, first, time, mem, err);
    pm_free(l);
    return st;
}
