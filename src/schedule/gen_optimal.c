/* gen_optimal.c: the exact optimum for small cases (`--kind optimal` on the
 * single placement, `optimal-v` on the V placement), as a mixed-integer
 * program solved by CBC (milp.h).
 *
 * Variables: each pass x's start s_x >= 0 (it lasts t_x, pm_cost_time);
 * per device d its first start f_d and last end l_d; the makespan C; for
 * every pair of passes a, b of one device an order binary o_ab (1: a runs
 * before b), numbered in the order of the seed schedule.
 *   order    s_b >= s_a + t_a - H (1 - o_ab);  s_a >= s_b + t_b - H o_ab
 *   deps     s_y >= s_x + t_x (+ c across devices), the simulator's rules
 *   span     f_d <= s_x, s_x + t_x <= l_d, l_d - f_d <= C; minimise C
 *   memory   for each pass x of d: the deltas of the passes before it plus
 *            x's rise (pm_cost_rise) stay within the cap: linear in o
 *   cuts     s_x + t_x + (work ordered after x) <= l_d and
 *            f_d + (work ordered before x) <= s_x
 *   symmetry the microbatches of one (stage, kind) run in order, and a pass
 *            runs after what it depends on on its own device: those o = 1.
 * H bounds the start times (the seed's total work plus a latency per pass:
 * every schedule run as soon as possible fits); the seed is the best
 * heuristic schedule of the placement under the limit (the solver's start
 * and upper bound). The MILP may leave a device idle before its first pass
 * where the simulator starts it at once, so its optimum is a lower bound
 * on every schedule's simulated makespan; the order it returns is
 * simulated like any other, and it is proven optimal when that makespan
 * meets the solver's bound. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "milp.h"
#include "slots.h"
#include "pipemem/pm_sched.h"
#include "sched.h"

#define MAX_PASSES 400       /* beyond this the MILP does not solve in useful time */
#define MAX_SLOT_PASSES 1200 /* and the slot model (slots.c) */

typedef struct {
    const pm_sched *s;
    const pm_cost *c;
    int N;          /* passes */
    int *dev;       /* (N) device of each pass */
    int *pos;       /* (N) index in its device's list */
    int *first;     /* (p + 1) passes of device d are first[d] .. first[d+1]-1 */
    double *t;      /* (N) durations */
    int *ocol;      /* (p) first order column of each device */
    int colf, coll, colC; /* f_d, l_d, C */
} model;

static int pid_of(const model *md, int d, int i) { return md->first[d] + i; }

/* Column of o_ab for passes at positions i < j on device d. */
static int ocol(const model *md, int d, int i, int j) {
    int n = md->first[d + 1] - md->first[d];
    return md->ocol[d] + i * n - i * (i + 1) / 2 + (j - i - 1);
}

static const pm_pass *pass_of(const model *md, int x) {
    return pm_sched_dev(md->s, md->dev[x]) + md->pos[x];
}

/* The pass x waits for on the simulator's rules (-1: none). tab maps
 * (stage, mb, kind) to a pass id. */
static int dep_of(const model *md, const int *tab, int x) {
    const pm_pass *ps = pass_of(md, x);
    int S = md->s->S, m = md->s->m;
#define AT(st, k) tab[((st) * m + ps->mb) * PM_PASS_COUNT + (k)]
    switch (ps->kind) {
    case PM_PASS_F: return ps->stage > 0 ? AT(ps->stage - 1, PM_PASS_F) : -1;
    case PM_PASS_W: return AT(ps->stage, PM_PASS_B);
    default:
        if (ps->stage == S - 1) return AT(S - 1, PM_PASS_F);
        return AT(ps->stage + 1, PM_PASS_B) >= 0 ? AT(ps->stage + 1, PM_PASS_B)
                                                 : AT(ps->stage + 1, PM_PASS_BW);
    }
#undef AT
}

/* The seed: the fastest heuristic schedule of the placement within limit. */
static pm_status seed(pm_sched *best, const pm_sched_req *req, pm_place place, const char *kind,
                      pm_err *err) {
    static const char *const single[] = {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb"};
    static const char *const v[] = {"v-min", "v-half", "1f1b-v", "zb-v", "v-zb", "auto-v"};
    const char *const *k = place == PM_PLACE_V ? v : single;
    int nk = place == PM_PLACE_V ? 6 : 5;
    double bestm = INFINITY;
    *best = (pm_sched){0};
    for (int i = 0; i < nk; i++) {
        pm_sched_req q = *req;
        int adaptive = !strcmp(k[i], "zb") || !strcmp(k[i], "v-zb") || !strcmp(k[i], "auto-v");
        if (!adaptive) q.mem_limit = 0;
        if (adaptive && !(q.mem_limit > 0)) q.mem_limit = !strcmp(k[i], "auto-v") ? 2.0 : 0;
        pm_sched s;
        pm_cost c;
        pm_sim sim;
        pm_err e;
        if (pm_sched_generate(&s, k[i], &q, &e)) continue;
        int ok = !pm_cost_init_uniform(&c, &s, req->t, req->mem, &e);
        if (ok) {
            ok = !pm_sched_validate(&s, &c, req->mem_limit, &e) && !pm_sim_run(&sim, &s, &c, &e);
            if (ok && sim.makespan < bestm) {
                pm_sched_free(best);
                *best = s, s = (pm_sched){0}, bestm = sim.makespan;
            }
            if (ok) pm_sim_free(&sim);
            pm_cost_free(&c);
        }
        pm_sched_free(&s);
    }
    if (!best->p)
        return pm_errf(err, PM_ERR_MEMLIMIT, "%s: no heuristic schedule of the %s placement "
                       "fits mem_limit=%g M to start from", kind, pm_place_names[place],
                       req->mem_limit);
    return PM_OK;
}

static void model_free(model *md) {
    pm_free(md->dev), pm_free(md->pos), pm_free(md->first), pm_free(md->t), pm_free(md->ocol);
}

static pm_status model_init(model *md, const pm_sched *s, const pm_cost *c, pm_err *err) {
    int p = s->p, N = 0;
    for (int d = 0; d < p; d++) N += (int)s->len[d];
    *md = (model){s, c, N, pm_malloc((size_t)N * sizeof(int)), pm_malloc((size_t)N * sizeof(int)),
                  pm_malloc(((size_t)p + 1) * sizeof(int)), pm_malloc((size_t)N * sizeof(double)),
                  pm_malloc((size_t)p * sizeof(int)), 0, 0, 0};
    if (!md->dev || !md->pos || !md->first || !md->t || !md->ocol)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for the MILP of %d passes", N);
    md->first[0] = 0;
    for (int d = 0, x = 0; d < p; d++) {
        for (int64_t i = 0; i < s->len[d]; i++, x++) {
            md->dev[x] = d, md->pos[x] = (int)i;
            md->t[x] = pm_cost_time(c, pm_sched_dev(s, d) + i);
        }
        md->first[d + 1] = x;
    }
    return PM_OK;
}

/* Columns: s_x (N), f_d and l_d (p each), C <= UB (only schedules better
 * than the seed matter), then the order binaries. */
static void add_columns(pm_milp *lp, model *md, double H, double UB) {
    int p = md->s->p;
    for (int x = 0; x < md->N; x++) pm_milp_col(lp, 0, H, 0, 0);
    md->colf = pm_milp_cols(lp);
    for (int d = 0; d < p; d++) pm_milp_col(lp, 0, H, 0, 0);
    md->coll = pm_milp_cols(lp);
    for (int d = 0; d < p; d++) pm_milp_col(lp, 0, H, 0, 0);
    md->colC = pm_milp_col(lp, 0, UB, 1, 0);
    for (int d = 0; d < p; d++) {
        int n = md->first[d + 1] - md->first[d];
        md->ocol[d] = pm_milp_cols(lp);
        for (int k = 0; k < n * (n - 1) / 2; k++) pm_milp_col(lp, 0, 1, 0, 1);
    }
}

/* Disjunctions, spans and the work cuts of device d. Two passes of d lie in
 * its window [f_d, l_d], at most C <= UB long, so UB is a valid big-M for
 * their order (far tighter than the horizon). */
static void add_device(pm_milp *lp, const model *md, int d, double H) {
    int n = md->first[d + 1] - md->first[d], cols[2048 + 3];
    double coef[2048 + 3];
    for (int i = 0; i < n; i++) {
        int x = pid_of(md, d, i);
        for (int j = i + 1; j < n; j++) {
            int y = pid_of(md, d, j), o = ocol(md, d, i, j);
            pm_milp_row(lp, 3, (int[]){y, x, o}, (double[]){1, -1, -H}, 'G', md->t[x] - H);
            pm_milp_row(lp, 3, (int[]){x, y, o}, (double[]){1, -1, H}, 'G', md->t[y]);
        }
        pm_milp_row(lp, 2, (int[]){md->colf + d, x}, (double[]){1, -1}, 'L', 0);
        pm_milp_row(lp, 2, (int[]){x, md->coll + d}, (double[]){1, -1}, 'L', -md->t[x]);
        /* after x: o_xy for y later in the seed, 1 - o_yx for y earlier */
        int k = 0;
        double rhs_after = -md->t[x], rhs_before = 0;
        cols[k] = x, coef[k++] = 1;
        cols[k] = md->coll + d, coef[k++] = -1;
        for (int j = 0; j < n && k < 2048; j++) {
            if (j == i) continue;
            int y = pid_of(md, d, j);
            if (j > i) cols[k] = ocol(md, d, i, j), coef[k++] = md->t[y];
            else cols[k] = ocol(md, d, j, i), coef[k++] = -md->t[y], rhs_after -= md->t[y];
        }
        pm_milp_row(lp, k, cols, coef, 'L', rhs_after);
        /* before x: f_d + sum t_y [y before x] <= s_x */
        k = 0;
        cols[k] = md->colf + d, coef[k++] = 1;
        cols[k] = x, coef[k++] = -1;
        for (int j = 0; j < n && k < 2048; j++) {
            if (j == i) continue;
            int y = pid_of(md, d, j);
            if (j < i) cols[k] = ocol(md, d, j, i), coef[k++] = md->t[y];
            else cols[k] = ocol(md, d, i, j), coef[k++] = -md->t[y], rhs_before -= md->t[y];
        }
        pm_milp_row(lp, k, cols, coef, 'L', rhs_before);
    }
    pm_milp_row(lp, 3, (int[]){md->coll + d, md->colf + d, md->colC}, (double[]){1, -1, -1}, 'L', 0);
}

/* Memory of device d under cap: before-x deltas plus x's rise. */
static void add_memory(pm_milp *lp, const model *md, int d, double cap) {
    int n = md->first[d + 1] - md->first[d], cols[2048];
    double coef[2048];
    for (int i = 0; i < n; i++) {
        const pm_pass *px = pass_of(md, pid_of(md, d, i));
        double rhs = cap - pm_cost_rise(md->c, px);
        int k = 0;
        for (int j = 0; j < n && k < 2048; j++) {
            if (j == i) continue;
            double dl = pm_cost_mem(md->c, pass_of(md, pid_of(md, d, j)));
            if (j < i) cols[k] = ocol(md, d, j, i), coef[k++] = dl;
            else cols[k] = ocol(md, d, i, j), coef[k++] = -dl, rhs -= dl;
        }
        pm_milp_row(lp, k, cols, coef, 'L', rhs);
    }
}

/* Dependencies (with latency across devices), and o = 1 where the seed's
 * order is forced: a dependency on the same device, or the microbatch
 * order of one (stage, kind) when the seed keeps it. */
static pm_status add_deps(pm_milp *lp, const model *md, pm_err *err) {
    const pm_sched *s = md->s;
    size_t nt = (size_t)s->S * (size_t)s->m * PM_PASS_COUNT;
    int *tab = pm_malloc(nt * sizeof(int));
    if (!tab) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the MILP's dependencies");
    for (size_t k = 0; k < nt; k++) tab[k] = -1;
    for (int x = 0; x < md->N; x++) {
        const pm_pass *ps = pass_of(md, x);
        tab[((size_t)ps->stage * s->m + ps->mb) * PM_PASS_COUNT + ps->kind] = x;
    }
    for (int x = 0; x < md->N; x++) {
        int y = dep_of(md, tab, x);
        if (y < 0) continue;
        int same = md->dev[y] == md->dev[x];
        pm_milp_row(lp, 2, (int[]){x, y}, (double[]){1, -1}, 'G',
                    md->t[y] + (same ? 0 : md->c->c));
        if (same && md->pos[y] < md->pos[x])
            pm_milp_row(lp, 1, (int[]){ocol(md, md->dev[x], md->pos[y], md->pos[x])},
                        (double[]){1}, 'E', 1);
    }
    for (int d = 0; d < s->p; d++)
        for (int i = md->first[d]; i < md->first[d + 1]; i++)
            for (int j = i + 1; j < md->first[d + 1]; j++) {
                const pm_pass *a = pass_of(md, i), *b = pass_of(md, j);
                if (a->stage == b->stage && a->kind == b->kind && a->mb < b->mb)
                    pm_milp_row(lp, 1, (int[]){ocol(md, d, md->pos[i], md->pos[j])},
                                (double[]){1}, 'E', 1);
            }
    pm_free(tab);
    return PM_OK;
}

/* The seed's values: its simulated starts, spans and order (all o = 1). */
static void start_values(const model *md, const pm_sim *sim, double *x0, int ncol) {
    for (int k = 0; k < ncol; k++) x0[k] = 1;
    for (int x = 0; x < md->N; x++)
        x0[x] = sim->start[(int64_t)md->dev[x] * md->s->cap + md->pos[x]];
    for (int d = 0; d < md->s->p; d++) {
        int64_t base = (int64_t)d * md->s->cap, n = md->s->len[d];
        x0[md->colf + d] = n ? sim->start[base] : 0;
        x0[md->coll + d] = n ? sim->end[base + n - 1] : 0;
    }
    x0[md->colC] = sim->makespan;
}

/* 1 if pass i starts before pass j in solution x (ties: the seed's order). */
static int earlier(const model *md, const double *x, int i, int j) {
    if (x[i] < x[j] - 1e-9) return 1;
    if (x[i] > x[j] + 1e-9) return 0;
    return md->pos[i] < md->pos[j];
}

/* The solution's per-device order, as a schedule named kind. */
static pm_status extract(pm_sched *out, const model *md, const double *x, const char *kind,
                         pm_err *err) {
    const pm_sched *s = md->s;
    pm_status st = pm_sched_init(out, kind, s->place, s->p, s->m, s->v, err);
    int *ids = st ? NULL : pm_malloc((size_t)md->N * sizeof(int));
    if (!st && !ids) st = pm_errf(err, PM_ERR_NOMEM, "out of memory ordering %d passes", md->N);
    for (int d = 0; !st && d < s->p; d++) {
        int n = md->first[d + 1] - md->first[d];
        for (int i = 0; i < n; i++) { /* insertion sort: n <= MAX_PASSES */
            int k = i, v = md->first[d] + i;
            for (; k > 0 && earlier(md, x, v, ids[k - 1]); k--) ids[k] = ids[k - 1];
            ids[k] = v;
        }
        for (int i = 0; i < n; i++) {
            const pm_pass *ps = pass_of(md, ids[i]);
            pm_sched_push(out, d, (pm_pass_kind)ps->kind, ps->stage, ps->mb);
        }
    }
    pm_free(ids);
    if (st) pm_sched_free(out);
    return st;
}

/* Builds and solves the model over seed s0 (costs c, simulated as sim0). */
static pm_status solve(pm_sched *out, const pm_sched *s0, const pm_cost *c, const pm_sim *sim0,
                       const pm_sched_req *req, const char *kind, pm_milp_result *res,
                       pm_err *err) {
    model md;
    pm_milp *lp = pm_milp_new();
    double *x0 = NULL, *x = NULL;
    pm_status st = lp ? model_init(&md, s0, c, err)
                      : pm_errf(err, PM_ERR_NOMEM, "out of memory for the MILP");
    if (!lp) return st;
    double H = 0;
    for (int k = 0; !st && k < md.N; k++) H += md.t[k] + c->c;
    if (!st) {
        add_columns(lp, &md, H, sim0->makespan); /* (C >= bound.c's bound: slower in CBC) */
        for (int d = 0; d < s0->p; d++) add_device(lp, &md, d, sim0->makespan);
        if (req->mem_limit > 0)
            for (int d = 0; d < s0->p; d++) add_memory(lp, &md, d, req->mem_limit * pm_cost_M(c));
        st = add_deps(lp, &md, err);
    }
    int ncol = pm_milp_cols(lp);
    if (!st && (!(x0 = pm_malloc((size_t)ncol * sizeof(double))) ||
                !(x = pm_malloc((size_t)ncol * sizeof(double)))))
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory for %d MILP columns", ncol);
    if (!st) {
        start_values(&md, sim0, x0, ncol);
        double secs = req->time_limit > 0 ? req->time_limit : 60;
        pm_err se;
        pm_status ss = pm_milp_solve(lp, x0, secs, x, res, &se);
        if (ss == PM_ERR_ARG || ss == PM_ERR_NOMEM) st = pm_errf(err, ss, "%s", se.msg);
        else if (ss) res->obj = NAN, snprintf(res->note, sizeof res->note, "%.190s", se.msg);
    }
    if (!st) st = extract(out, &md, x, kind, err);
    pm_free(x0), pm_free(x);
    pm_milp_free(lp);
    model_free(&md);
    return st;
}

/* The exact search: the slot model when the costs sit on one time unit
 * (slots.c), else the MILP over the seed's order. */
static pm_status search(pm_sched *s, const pm_sched *s0, const pm_cost *c, const pm_sim *sim0,
                        const pm_sched_req *req, const char *kind, pm_milp_result *res,
                        pm_err *err) {
    double cap = req->mem_limit > 0 ? req->mem_limit * pm_cost_M(c) : 0;
    double unit = pm_slots_unit(s0, c, sim0->makespan);
    double secs = req->time_limit > 0 ? req->time_limit : 60;
    int64_t passes = (int64_t)3 * s0->p * s0->m * s0->v; /* <= MAX_SLOT_PASSES (build) */
    if (unit > 0)
        return pm_slots_solve(s, s0, c, cap, unit, sim0->makespan,
                              pm_sched_lower_bound_at(s0, c, cap), secs, kind, res, err);
    if (2 * passes / 3 > MAX_PASSES) /* 2 p m v: as if B and W were fused */
        return pm_errf(err, PM_ERR_ARG, "%s: p=%d m=%d makes at least %lld passes; the MILP "
                       "solves at most %d (p m <= %d), and the slot search, which takes up to "
                       "%d, does not apply: it needs a SAT solver in the build, costs that "
                       "are small whole multiples of one unit (at most %d units each), the "
                       "default memory deltas and no recomputation", kind, req->p, req->m,
                       (long long)(2 * passes / 3), MAX_PASSES, MAX_PASSES / (2 * s0->v),
                       MAX_SLOT_PASSES, PM_SLOTS_MAX_UNITS);
    if (!pm_milp_available())
        return pm_errf(err, PM_ERR_ARG, "%s: this pipemem was built without a MILP solver; "
                       "install coinor-libcbc-dev (make deps) and rebuild", kind);
    return solve(s, s0, c, sim0, req, kind, res, err);
}

static pm_status build(pm_sched *s, const pm_sched_req *req, pm_place place, const char *kind,
                       pm_err *err) {
    *s = (pm_sched){0};
    int v = place == PM_PLACE_V ? 2 : 1;
    if ((int64_t)3 * req->p * req->m * v > MAX_SLOT_PASSES)
        return pm_errf(err, PM_ERR_ARG, "%s: p=%d m=%d makes %lld passes; the exact search "
                       "takes at most %d (p m <= %d)", kind, req->p, req->m,
                       (long long)3 * req->p * req->m * v, MAX_SLOT_PASSES,
                       MAX_SLOT_PASSES / (3 * v));
    pm_sched s0;
    pm_cost c;
    pm_sim sim0, sim1;
    pm_milp_result res;
    pm_status st = seed(&s0, req, place, kind, err);
    if (st) return st;
    if ((st = pm_cost_init_uniform(&c, &s0, req->t, req->mem, err))) goto out0;
    if ((st = pm_sim_run(&sim0, &s0, &c, err))) goto out1;
    if ((st = search(s, &s0, &c, &sim0, req, kind, &res, err))) goto out2;
    int better = !pm_sched_validate(s, &c, req->mem_limit, NULL) &&
                 !pm_sim_run(&sim1, s, &c, NULL);
    double mk = sim0.makespan;
    if (better && !(sim1.makespan < sim0.makespan * (1 + 1e-12))) pm_sim_free(&sim1), better = 0;
    if (!better) { /* keep the seed's order: the solver found nothing better */
        pm_sched_free(s);
        if ((st = pm_sched_copy(s, &s0, err))) goto out2;
        snprintf(s->kind, sizeof s->kind, "%s", kind);
    } else {
        mk = sim1.makespan;
        pm_sim_free(&sim1);
    }
    double cap = req->mem_limit > 0 ? req->mem_limit * pm_cost_M(&c) : 0;
    double lb = pm_sched_lower_bound_at(s, &c, cap);
    s->opt_bound = isfinite(res.bound) && res.bound > lb ? res.bound : lb;
    if (s->opt_bound > mk) s->opt_bound = mk;
    s->opt_seconds = res.seconds;
    s->opt_status = isnan(res.obj)                         ? PM_OPT_FAILED
                    : mk <= s->opt_bound * (1 + 1e-6) + 1e-9 ? PM_OPT_PROVEN
                    : res.timed_out                         ? PM_OPT_TIMEOUT
                                                            : PM_OPT_OPEN;
out2:
    pm_sim_free(&sim0);
out1:
    pm_cost_free(&c);
out0:
    pm_sched_free(&s0);
    return st;
}

pm_status pm_sched_build_optimal(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return build(s, req, PM_PLACE_SINGLE, "optimal", err);
}

pm_status pm_sched_build_optimal_v(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return build(s, req, PM_PLACE_V, "optimal-v", err);
}
