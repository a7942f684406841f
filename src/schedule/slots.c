/* slots.c: the exact optimum on a time grid, by SAT (CaDiCaL).
 *
 * When every F, B and W time and the latency are whole multiples of one
 * unit (equal costs, for instance), every schedule the simulator runs has
 * its passes start on that grid of slots. "Is there a schedule whose every
 * device spans at most T slots under the memory cap?" is then a question of
 * boolean satisfiability, and the smallest T that has an answer is the
 * optimum: no big-M, no LP relaxation, which is what keeps the MILP of
 * gen_optimal.c from closing on the V placement.
 *
 * The model, for a given T (the order encoding of start times):
 *   S(x, t)   pass x has started by slot t; monotone in t, false before x's
 *             earliest start, true from its latest one on (the window)
 *   deps      S(y, t) -> S(x, t - gap), gap = x's time plus the latency
 *             across devices; a (stage, kind)'s microbatches run in order
 *             (symmetry: microbatches are interchangeable)
 *   span      each device's first pass, F(lowest stage, 0), starts at its
 *             as-soon-as-possible slot (as the simulator starts it) and
 *             every pass of the device ends within T slots of it: deadlines,
 *             carried back through the dependencies into the windows
 *   device    at most one running pass per slot (a sequential counter)
 *   memory    per stage, H(q) is forced when the stage holds q activations
 *             at slot t (F number j+q started, W number j+1 not); per
 *             device, H(a) of one stage and H(k+1-a) of the other exclude
 *             each other: at most k activations, F's rise included.
 * Any order the simulator runs that keeps each (stage, kind)'s microbatches
 * in order (as every generator here does) is a solution at its own
 * makespan, and the order of a solution, simulated, starts every pass no
 * later than the solution does: the smallest satisfiable T is the
 * simulated optimum over those orders. (An order that starts a device on a
 * later microbatch, and so later than its first input arrives, is outside:
 * the pin would not hold. The MILP, which lets a device wait before its
 * first pass, agreed on every case tested.) */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PM_HAVE_CADICAL
#include <ccadical.h>
#endif

#include "slots.h"
#include "sched.h"

#define MAX_SLOT_VARS 3000000 /* window variables of one model (a few seconds to build) */

enum { KF = 0, KB = 1, KW = 2 };

/* v as a whole number of units u (-1 if it is not one, or too many). */
static int units(double v, double u) {
    double r = v / u, n = floor(r + 0.5);
    int whole = fabs(r - n) <= 1e-9 * (n > 1 ? n : 1);
    return whole && n >= 0 && n <= PM_SLOTS_MAX_UNITS ? (int)n : -1;
}

#ifdef PM_HAVE_CADICAL

typedef struct {
    const pm_sched *s0;
    int p, S, m, N;  /* devices, stages, microbatches, passes (3 S m) */
    int *dev;        /* (S) device of each stage */
    int *dur;        /* (3 S) slots of kind k on stage s at [s * 3 + k] */
    int c, k;        /* latency in slots; activations a device may hold */
    int *lo, *hi;    /* (p) a device's lowest and highest stage (equal: one stage) */
    int *es, *ls;    /* (N) window of start slots */
    int *var0;       /* (N) variable of S(x, es) */
    int *start;      /* (N) solution */
    int nv, T;
    int *hint, win;  /* (N) start slots to stay within win of (NULL: none) */
    int empty;       /* a clause with every literal false: T is infeasible */
    void *sat;
} slot_model;

static int id_of(const slot_model *md, int s, int j, int k) { return (s * md->m + j) * 3 + k; }

/* Up to three passes x waits for, with the slots between their starts. */
static int preds(const slot_model *md, int x, int *q, int *gap) {
    int k = x % 3, j = x / 3 % md->m, s = x / 3 / md->m, n = 0;
    const int *du = md->dur;
#define LAT(a, b) (md->dev[a] != md->dev[b] ? md->c : 0)
    if (j > 0) q[n] = x - 3, gap[n++] = du[s * 3 + k];
    if (k == KF && s > 0)
        q[n] = id_of(md, s - 1, j, KF), gap[n++] = du[(s - 1) * 3 + KF] + LAT(s - 1, s);
    if (k == KB) q[n] = id_of(md, s, j, KF), gap[n++] = du[s * 3 + KF];
    if (k == KB && s < md->S - 1)
        q[n] = id_of(md, s + 1, j, KB), gap[n++] = du[(s + 1) * 3 + KB] + LAT(s + 1, s);
    if (k == KW) q[n] = id_of(md, s, j, KB), gap[n++] = du[s * 3 + KB];
#undef LAT
    return n;
}

/* Visits the passes in a topological order: F up the stages, B down, W. */
static int topo(const slot_model *md, int i) {
    int Sm = md->S * md->m, phase = i / Sm, r = i % Sm, s = r / md->m, j = r % md->m;
    if (phase == KB) s = md->S - 1 - s;
    return id_of(md, s, j, phase);
}

static int dur_of(const slot_model *md, int x) { return md->dur[x / 3 / md->m * 3 + x % 3]; }

/* A neighbourhood of a known schedule: every pass starts within win slots
 * of its start there, carried forward through the dependencies (the
 * deadlines are carried back by windows() after this). */
static void hint_windows(slot_model *md, int *q, int *g) {
    for (int x = 0; x < md->N; x++) {
        if (md->es[x] < md->hint[x] - md->win) md->es[x] = md->hint[x] - md->win;
        if (md->ls[x] > md->hint[x] + md->win) md->ls[x] = md->hint[x] + md->win;
    }
    for (int i = 0; i < md->N; i++) {
        int x = topo(md, i);
        for (int n = preds(md, x, q, g); n-- > 0;)
            if (md->es[q[n]] + g[n] > md->es[x]) md->es[x] = md->es[q[n]] + g[n];
    }
}

/* Windows for span T; 0 if some pass has none (T is infeasible). */
static int windows(slot_model *md, int T) {
    int q[3], g[3];
    for (int x = 0; x < md->N; x++) md->es[x] = 0, md->ls[x] = INT_MAX / 4;
    for (int i = 0; i < md->N; i++) {
        int x = topo(md, i);
        for (int n = preds(md, x, q, g); n-- > 0;)
            if (md->es[q[n]] + g[n] > md->es[x]) md->es[x] = md->es[q[n]] + g[n];
    }
    for (int x = 0; x < md->N; x++) {
        int d = md->dev[x / 3 / md->m], z = md->es[id_of(md, md->lo[d], 0, KF)];
        md->ls[x] = z + T - dur_of(md, x);
    }
    for (int d = 0; d < md->p; d++) {
        int f = id_of(md, md->lo[d], 0, KF);
        if (md->ls[f] > md->es[f]) md->ls[f] = md->es[f];
    }
    if (md->hint) hint_windows(md, q, g);
    for (int i = md->N - 1; i >= 0; i--) {
        int x = topo(md, i);
        for (int n = preds(md, x, q, g); n-- > 0;)
            if (md->ls[x] - g[n] < md->ls[q[n]]) md->ls[q[n]] = md->ls[x] - g[n];
    }
    for (int x = 0; x < md->N; x++)
        if (md->es[x] > md->ls[x]) return 0;
    return 1;
}

enum { TRUE_VAR = 1 };

/* S(x, t) as a literal: false before the window, true from its end. */
static int lit(const slot_model *md, int x, int t) {
    if (t < md->es[x]) return -TRUE_VAR;
    if (t >= md->ls[x]) return TRUE_VAR;
    return md->var0[x] + t - md->es[x];
}

/* Adds a clause of n literals, dropping false ones; a true one drops it,
 * and none left makes the model unsatisfiable. */
static void clause(slot_model *md, int n, const int *l) {
    int left = 0;
    for (int i = 0; i < n; i++) {
        if (l[i] == TRUE_VAR) return;
        left += l[i] != -TRUE_VAR;
    }
    if (!left) {
        md->empty = 1;
        return;
    }
    for (int i = 0; i < n; i++)
        if (l[i] != -TRUE_VAR) ccadical_add(md->sat, l[i]);
    ccadical_add(md->sat, 0);
}
#define CL(...) clause(md, sizeof((int[]){__VA_ARGS__}) / sizeof(int), (int[]){__VA_ARGS__})

static void add_passes(slot_model *md) {
    int q[3], g[3];
    for (int x = 0; x < md->N; x++) {
        md->var0[x] = md->nv + 1;
        md->nv += md->ls[x] - md->es[x];
    }
    for (int x = 0; x < md->N; x++) {
        for (int t = md->es[x]; t < md->ls[x] - 1; t++) CL(-lit(md, x, t), lit(md, x, t + 1));
        for (int n = preds(md, x, q, g); n-- > 0;)
            for (int t = md->es[x]; t < md->ls[x]; t++) CL(-lit(md, x, t), lit(md, q[n], t - g[n]));
    }
}

/* The stages of device d (one or two); returns how many. */
static int stages_of(const slot_model *md, int d, int *st) {
    st[0] = md->lo[d], st[1] = md->hi[d];
    return st[1] != st[0] ? 2 : 1;
}

/* At most one running pass per slot on device d: running(x, t) implies
 * r, and the r of one slot go through a sequential counter. */
static void add_device(slot_model *md, int d, int z) {
    int st[2], ns = stages_of(md, d, st);
    for (int t = z; t < z + md->T; t++) {
        int prev = 0;
        for (int i = 0; i < ns; i++)
            for (int x = id_of(md, st[i], 0, 0); x < id_of(md, st[i] + 1, 0, 0); x++) {
                int du = dur_of(md, x);
                if (t < md->es[x] || t >= md->ls[x] + du) continue;
                int r = ++md->nv, cnt = ++md->nv;
                CL(-lit(md, x, t), lit(md, x, t - du), r);
                CL(-r, cnt);
                if (prev) CL(-prev, cnt), CL(-r, -prev);
                prev = cnt;
            }
    }
}

/* Activations on device d at each slot: at most k. */
static void add_memory(slot_model *md, int d, int z) {
    int m = md->m, k = md->k, stages[2], ns = stages_of(md, d, stages);
    int top = k + 1 < m ? k + 1 : m;
    if (k >= ns * m) return;
    for (int t = z; t < z + md->T; t++) {
        int h[2] = {0, 0}; /* H(q) of stage i is variable h[i] + q - 1 */
        for (int i = 0; i < ns; i++) {
            h[i] = md->nv + 1;
            md->nv += top;
            for (int qq = 1; qq <= top; qq++)
                for (int j = 0; j + qq <= m; j++)
                    CL(-lit(md, id_of(md, stages[i], j + qq - 1, KF), t),
                       lit(md, id_of(md, stages[i], j, KW), t), h[i] + qq - 1);
        }
        if (ns == 1) {
            if (k + 1 <= m) CL(-(h[0] + k));
            continue;
        }
        for (int a = 0; a <= k + 1; a++) {
            int b = k + 1 - a;
            if (a > m || b > m) continue;
            if (a == 0) CL(-(h[1] + b - 1));
            else if (b == 0) CL(-(h[0] + a - 1));
            else CL(-(h[0] + a - 1), -(h[1] + b - 1));
        }
    }
}

typedef struct {
    struct timespec end;
} deadline;

static int past(void *state) {
    const deadline *dl = state;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > dl->end.tv_sec ||
           (now.tv_sec == dl->end.tv_sec && now.tv_nsec >= dl->end.tv_nsec);
}

/* A neighbourhood question (pm_slots_improve) is small and mostly
 * satisfiable: the solver's preprocessing and inprocessing took most of
 * its time there (perf, p = 8, m = 16), so they are off, and the search
 * stops after `conflicts` conflicts. Both keep the answer deterministic. */
static void plain(void *sat, int conflicts) {
    static const char *const off[] = {"compact", "decompose", "elim", "probe",
                                      "subsume", "ternary", "transred", "vivify"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) ccadical_set_option(sat, off[i], 0);
    ccadical_limit(sat, "conflicts", conflicts);
}

/* 10 satisfiable (md->start filled), 20 not, 0 stopped by the deadline
 * (dl, may be NULL) or the conflict budget (> 0; 0 none), -1 too big to
 * build. */
static int solve_at(slot_model *md, int T, deadline *dl, int conflicts) {
    md->T = T;
    if (!windows(md, T)) return 20;
    double vars = 0;
    for (int x = 0; x < md->N; x++) vars += md->ls[x] - md->es[x];
    if (vars > MAX_SLOT_VARS) return -1;
    md->sat = ccadical_init();
    ccadical_set_option(md->sat, "quiet", 1);
    if (dl) ccadical_set_terminate(md->sat, dl, past);
    if (conflicts > 0) plain(md->sat, conflicts);
    md->nv = TRUE_VAR, md->empty = 0;
    ccadical_add(md->sat, TRUE_VAR), ccadical_add(md->sat, 0);
    add_passes(md);
    for (int d = 0; d < md->p; d++) {
        int z = md->es[id_of(md, md->lo[d], 0, KF)];
        add_device(md, d, z);
        add_memory(md, d, z);
    }
    int r = md->empty ? 20 : dl && past(dl) ? 0 : ccadical_solve(md->sat);
    for (int x = 0; r == 10 && x < md->N; x++) {
        int t = md->es[x];
        while (t < md->ls[x] && ccadical_val(md->sat, lit(md, x, t)) < 0) t++;
        md->start[x] = t;
    }
    ccadical_release(md->sat);
    md->sat = NULL;
    return r;
}

static void model_free(slot_model *md) {
    pm_free(md->hint);
    pm_free(md->dev), pm_free(md->dur), pm_free(md->lo), pm_free(md->hi);
    pm_free(md->es), pm_free(md->ls), pm_free(md->var0), pm_free(md->start);
}

static pm_status model_init(slot_model *md, const pm_sched *s0, const pm_cost *c, double cap,
                            double u, pm_err *err) {
    int p = s0->p, S = s0->S, m = s0->m, N = 3 * S * m;
    *md = (slot_model){.s0 = s0, .p = p, .S = S, .m = m, .N = N, .c = units(c->c, u)};
    /* more than 2 m activations never binds (and must not overflow) */
    double k = cap > 0 ? floor(cap / c->st[0].mf + 1e-9) : INFINITY;
    md->k = k < 2.0 * m + 1 ? (int)k : 2 * m + 1;
    md->dev = pm_malloc((size_t)S * sizeof(int)), md->dur = pm_malloc(3 * (size_t)S * sizeof(int));
    md->lo = pm_malloc((size_t)p * sizeof(int)), md->hi = pm_malloc((size_t)p * sizeof(int));
    md->es = pm_malloc((size_t)N * sizeof(int)), md->ls = pm_malloc((size_t)N * sizeof(int));
    md->var0 = pm_malloc((size_t)N * sizeof(int)), md->start = pm_malloc((size_t)N * sizeof(int));
    if (!md->dev || !md->dur || !md->lo || !md->hi || !md->es || !md->ls || !md->var0 ||
        !md->start) {
        model_free(md);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for the slot model of %d passes", N);
    }
    for (int d = 0; d < p; d++) md->lo[d] = INT_MAX, md->hi[d] = -1;
    for (int s = 0; s < S; s++) {
        int d = s0->place == PM_PLACE_V && s >= p ? 2 * p - 1 - s : s;
        md->dev[s] = d;
        md->lo[d] = s < md->lo[d] ? s : md->lo[d], md->hi[d] = s > md->hi[d] ? s : md->hi[d];
        md->dur[s * 3 + KF] = units(c->st[s].tf, u), md->dur[s * 3 + KB] = units(c->st[s].tb, u);
        md->dur[s * 3 + KW] = units(c->st[s].tw, u);
    }
    return PM_OK;
}

/* The longest device span of the solution, in slots. */
static int span_of(const slot_model *md) {
    int mx = 0;
    for (int d = 0; d < md->p; d++) {
        int z = md->start[id_of(md, md->lo[d], 0, KF)], end = z;
        for (int s = 0; s < md->S; s++)
            for (int x = id_of(md, s, 0, 0); md->dev[s] == d && x < id_of(md, s + 1, 0, 0); x++)
                if (md->start[x] + dur_of(md, x) > end) end = md->start[x] + dur_of(md, x);
        if (end - z > mx) mx = end - z;
    }
    return mx;
}

static int by_key(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The solution's per-device order as a schedule named kind. */
static pm_status extract(pm_sched *out, const slot_model *md, const char *kind, pm_err *err) {
    pm_status st = pm_sched_init(out, kind, md->s0->place, md->p, md->m, md->s0->v, err);
    int64_t *key = st ? NULL : pm_malloc((size_t)md->N * sizeof(int64_t));
    if (st) return st;
    if (!key) {
        pm_sched_free(out);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory ordering %d passes", md->N);
    }
    for (int x = 0; x < md->N; x++) key[x] = (int64_t)md->start[x] * md->N + x;
    qsort(key, (size_t)md->N, sizeof *key, by_key);
    static const pm_pass_kind kinds[3] = {PM_PASS_F, PM_PASS_B, PM_PASS_W};
    for (int i = 0; i < md->N; i++) {
        int x = (int)(key[i] % md->N), s = x / 3 / md->m;
        pm_sched_push(out, md->dev[s], kinds[x % 3], s, x / 3 % md->m);
    }
    pm_free(key);
    return PM_OK;
}
#endif

#ifdef PM_HAVE_CADICAL
/* The simulated makespan of s into *mk (0 if it does not replay or breaks
 * the cap) and, with md, its start slots into md->hint. Fails only when
 * memory runs out. */
static pm_status replay_slots(const pm_sched *s, const pm_cost *c, double cap, double unit,
                              slot_model *md, double *mk_out, pm_err *err) {
    pm_sim sim;
    pm_err e;
    pm_status st = pm_sim_run(&sim, s, c, &e);
    *mk_out = 0;
    if (st == PM_ERR_NOMEM) return pm_errf(err, st, "%s", e.msg);
    if (st) return PM_OK;
    double mk = sim.makespan;
    for (int d = 0; d < s->p && mk > 0; d++) {
        if (cap > 0 && sim.peak[d] > cap * (1 + PM_PEAK_TOL)) mk = 0;
        const pm_pass *l = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d] && md; i++) {
            int k = l[i].kind == PM_PASS_F ? KF : l[i].kind == PM_PASS_B ? KB : KW;
            double t = sim.start[(int64_t)d * s->cap + i] / unit;
            md->hint[id_of(md, l[i].stage, l[i].mb, k)] = (int)floor(t + 0.5);
        }
    }
    pm_sim_free(&sim);
    *mk_out = mk;
    return PM_OK;
}

/* pm_slots_improve's loop on a built model: s is replaced by each shorter
 * schedule found. */
static pm_status improve_loop(pm_sched *s, const pm_cost *c, double cap, double unit,
                              slot_model *md, const pm_slots_lns *cfg, int *steps, pm_err *err) {
    double mk, mk2;
    pm_status st = replay_slots(s, c, cap, unit, md, &mk, err);
    for (int k = 0; k < cfg->steps && mk > 0 && !st; k++) {
        int hi = (int)floor(mk / unit + 0.5);
        if (!((hi - 1) * unit < cfg->below) || solve_at(md, hi - 1, NULL, cfg->conflicts) != 10)
            break;
        pm_sched next;
        if ((st = extract(&next, md, s->kind, err))) break;
        /* the replay leaves next's slots as the hint: the next question's
         * window, or unused once the loop stops */
        if ((st = replay_slots(&next, c, cap, unit, md, &mk2, err)) ||
            !(mk2 > 0 && mk2 < mk - 0.5 * unit)) { /* the model's promise broken: keep s */
            pm_sched_free(&next);
            break;
        }
        pm_sched_free(s);
        *s = next;
        md->s0 = s;
        mk = mk2;
        ++*steps;
    }
    return st;
}
#endif

pm_status pm_slots_improve(pm_sched *s, const pm_cost *c, double cap, const pm_slots_lns *cfg,
                           int *steps, pm_err *err) {
    *steps = 0;
#ifdef PM_HAVE_CADICAL
    if (s->place != PM_PLACE_SINGLE && s->place != PM_PLACE_V) return PM_OK;
    double mk;
    pm_status st = replay_slots(s, c, cap, 1, NULL, &mk, err);
    double unit = mk > 0 ? pm_slots_unit(s, c, mk) : 0;
    if (st || !(unit > 0)) return st;
    slot_model md;
    st = model_init(&md, s, c, cap, unit, err);
    if (st) return st;
    md.win = cfg->window;
    md.hint = pm_malloc((size_t)md.N * sizeof *md.hint);
    if (!md.hint)
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory for the slot model of %d passes", md.N);
    if (!st) st = improve_loop(s, c, cap, unit, &md, cfg, steps, err);
    model_free(&md);
    return st;
#else
    (void)s, (void)c, (void)cap, (void)cfg, (void)err;
    return PM_OK;
#endif
}

int pm_slots_available(void) {
#ifdef PM_HAVE_CADICAL
    return 1;
#else
    return 0;
#endif
}

double pm_slots_unit(const pm_sched *s0, const pm_cost *c, double mk0) {
    if (!pm_slots_available() || (s0->place != PM_PLACE_SINGLE && s0->place != PM_PLACE_V))
        return 0;
    double u0 = INFINITY;
    for (int s = 0; s < c->S; s++) {
        const pm_stage_cost *st = &c->st[s];
        if (st->rec || !(st->mf > 0) || st->mb != 0 || st->mw != -st->mf || st->mf != c->st[0].mf)
            return 0;
        double t[3] = {st->tf, st->tb, st->tw};
        for (int k = 0; k < 3; k++) {
            if (!(t[k] > 0)) return 0;
            if (t[k] < u0) u0 = t[k];
        }
    }
    for (int div = 1; div <= 16; div++) {
        double u = u0 / div;
        int ok = units(c->c, u) >= 0 && 3.0 * c->S * s0->m * (mk0 / u) <= MAX_SLOT_VARS;
        for (int s = 0; s < c->S && ok; s++)
            ok = units(c->st[s].tf, u) > 0 && units(c->st[s].tb, u) > 0 &&
                 units(c->st[s].tw, u) > 0;
        if (ok) return u;
    }
    return 0;
}

pm_status pm_slots_solve(pm_sched *out, const pm_sched *s0, const pm_cost *c, double cap,
                         double unit, double mk0, double lb, double seconds, const char *kind,
                         pm_milp_result *res, pm_err *err) {
    *out = (pm_sched){0};
    *res = (pm_milp_result){.obj = mk0, .bound = lb};
#ifdef PM_HAVE_CADICAL
    slot_model md;
    pm_status st = model_init(&md, s0, c, cap, unit, err);
    if (st) return st;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    deadline dl = {t0};
    if (!(seconds < 1e9)) seconds = 1e9; /* about 30 years: no time_t overflow */
    dl.end.tv_sec += (time_t)seconds;
    dl.end.tv_nsec += (long)((seconds - floor(seconds)) * 1e9);
    if (dl.end.tv_nsec >= 1000000000L) dl.end.tv_sec++, dl.end.tv_nsec -= 1000000000L;
    /* Down from the best known: each answer is a shorter schedule (its own
     * span may undercut T), and the first refusal proves the last one. */
    int lo = (int)ceil(lb / unit - 1e-9), hi = (int)floor(mk0 / unit + 0.5), found = 0;
    while (!st && hi > lo) {
        int r = solve_at(&md, hi - 1, &dl, 0);
        if (r < 0)
            snprintf(res->note, sizeof res->note, "the slot model at %d slots is too big", hi - 1);
        if (r <= 0) {
            res->timed_out = 1;
            break;
        }
        if (r == 20) {
            lo = hi;
            break;
        }
        hi = span_of(&md);
        if (found) pm_sched_free(out);
        st = extract(out, &md, kind, err);
        found = !st;
    }
    res->bound = lo * unit > lb ? lo * unit : lb;
    res->obj = hi * unit;
    if (!st && !found && !(st = pm_sched_copy(out, s0, err)))
        snprintf(out->kind, sizeof out->kind, "%s", kind);
    res->proven = !res->timed_out;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    model_free(&md);
    return st;
#else
    (void)s0, (void)c, (void)cap, (void)unit, (void)seconds, (void)kind;
    return pm_errf(err, PM_ERR_ARG, "this pipemem was built without a SAT solver");
#endif
}
