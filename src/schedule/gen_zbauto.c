/* gen_zbauto.c: the Zero Bubble adaptive heuristic on the single placement
 * (kinds zb, zb-1p, zb-2p): a greedy list scheduler that works with the real
 * pass costs and a memory limit per device.
 *
 * The greedy (our C restatement of the Zero Bubble paper's heuristic):
 *   round 0: every stage runs F of microbatch 0; then, walking from the last
 *     stage back, each stage gets as many extra warm-up forwards as fit in
 *     memory and in the time before the first B can reach it (the counts are
 *     made strictly decreasing along the pipeline so every F finds its
 *     input); then B of microbatch 0 runs back down the pipeline.
 *   round i >= 1: each stage runs one more F (unless "prioritize B" judges
 *     that the F would delay the B stream by more than the worst bubble
 *     seen so far), then B of microbatch i on every stage, last to first.
 *     Before each F and B, pending W passes are run while the device would
 *     otherwise wait (and while memory needs freeing); a W that would
 *     overrun the wait is run only if the gap is worth more than the
 *     bubble budget.
 *   end: every remaining W.
 * Three flags (allow a bubble before the first B, prioritize B, greedy W
 * into small gaps) give eight variants; the shortest makespan wins.
 *
 * Invariants: a pass is only placed once its dependency has been placed
 * (so list order is a topological order: never a deadlock), and the running
 * memory of each device never exceeds the limit (a variant that would need
 * to is dropped). Times computed here follow the simulator's rule exactly,
 * so the makespan compared between variants is the simulated one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "gen.h"
#include "pool.h"
#include "sched.h"

typedef struct {
    pm_sched *s;
    int S, m;
    double t[3], dm[3]; /* time and memory delta of F, B, W on every stage */
    double c;           /* point-to-point latency */
    double cap;         /* absolute memory limit per device */
    int *n;             /* (3, S) passes of each kind placed per stage */
    double *e;          /* (S) time the device becomes free */
    double *first;      /* (S) start of the device's first pass */
    double *mem;        /* (S) live activation */
    double *bub;        /* (S) idle time after the first forward */
    double *tf, *tb;    /* (S, m) end of F and B, NAN until placed */
    double maxbub;      /* max of bub[] (bubbles only grow) */
    int bad;            /* the variant broke a rule: drop it */
    int hit;            /* the limit decided something (a larger one might not) */
} zb_state;

enum { KF = 0, KB = 1, KW = 2 };

/* x <= cap, remembering when the limit said no. */
static int fits(zb_state *g, double x) {
    if (x <= g->cap) return 1;
    g->hit = 1;
    return 0;
}

static int *cnt(zb_state *g, int kind, int j) { return &g->n[kind * g->S + j]; }

static double max_bubble(const zb_state *g) { return g->maxbub; }

/* End time of the dependency of the next pass of `kind` on stage j,
 * including c when it ran on another device; NAN if not placed yet. */
static double dep_ready(const zb_state *g, int j, int kind, int mb) {
    if (kind == KF) return j == 0 ? 0 : g->tf[(j - 1) * g->m + mb] + g->c;
    if (kind == KB)
        return j == g->S - 1 ? g->tf[j * g->m + mb] : g->tb[(j + 1) * g->m + mb] + g->c;
    return g->tb[j * g->m + mb];
}

static void put(zb_state *g, int j, int kind) {
    int *k = cnt(g, kind, j), mb = *k;
    if (g->bad || mb >= g->m) {
        g->bad = 1;
        return;
    }
    double ready = dep_ready(g, j, kind, mb);
    if (isnan(ready) || (kind == KB && isnan(g->tf[j * g->m + mb])) ||
        !fits(g, g->mem[j] + g->dm[kind])) {
        g->bad = 1;
        return;
    }
    int placed = *cnt(g, KF, j) + *cnt(g, KB, j) + *cnt(g, KW, j);
    double start = ready > g->e[j] ? ready : g->e[j];
    if (!placed) g->first[j] = start;
    if (*cnt(g, KF, j) > 0) {
        g->bub[j] += start - g->e[j];
        if (g->bub[j] > g->maxbub) g->maxbub = g->bub[j];
    }
    g->e[j] = start + g->t[kind];
    g->mem[j] += g->dm[kind];
    if (kind == KF) g->tf[j * g->m + mb] = g->e[j];
    if (kind == KB) g->tb[j * g->m + mb] = g->e[j];
    pm_sched_push(g->s, j, kind == KF ? PM_PASS_F : kind == KB ? PM_PASS_B : PM_PASS_W, j, mb);
    (*k)++;
}

static int pending_w(zb_state *g, int j) { return *cnt(g, KW, j) < *cnt(g, KB, j); }

/* Runs pending W on stage j until a pass of delta dm fits in memory. */
static void free_for(zb_state *g, int j, double dm) {
    while (!g->bad && !fits(g, g->mem[j] + dm)) {
        if (!pending_w(g, j)) g->bad = 1;
        else put(g, j, KW);
    }
}

/* Fills the wait before a pass whose input arrives at `ready` with pending
 * W: every W that ends in time, then one more if the remaining gap is
 * larger than the bubble budget (or, with greedy, whenever a gap remains). */
static void fill_gap(zb_state *g, int j, double ready, int greedy) {
    while (!g->bad && pending_w(g, j) && g->e[j] + g->t[KW] <= ready) put(g, j, KW);
    if (g->bad || !pending_w(g, j) || !(g->e[j] < ready)) return;
    if (ready - g->e[j] <= max_bubble(g) - g->bub[j]) {
        if (greedy) put(g, j, KW);
    } else {
        put(g, j, KW);
    }
}

/* Round 0: F of microbatch 0 everywhere, warm-up forwards, B of mb 0. */
static void round0(zb_state *g, int allow_bubble, int *req) {
    int S = g->S, m = g->m;
    for (int j = 0; j < S; j++) put(g, j, KF);
    if (g->bad) return;
    double last = 0;
    for (int j = S - 1; j >= 0; j--) {
        req[j] = 0;
        if (j == S - 1) {
            last = g->tf[j * m] + g->t[KB];
            continue;
        }
        double mem = g->mem[j], t = g->e[j];
        while (*cnt(g, KF, j) + req[j] < m && fits(g, mem + g->dm[KF])) {
            if (allow_bubble ? t + g->t[KF] > last + g->c : t >= last + g->c) break;
            mem += g->dm[KF];
            t += g->t[KF];
            req[j]++;
        }
        last = (t > last + g->c ? t : last + g->c) + g->t[KB];
    }
    for (int j = 1; j < S; j++)
        while (req[j] > 0 && req[j] >= req[j - 1] && *cnt(g, KF, j) + req[j] < m) req[j]--;
    for (int j = 0; j < S; j++)
        for (int r = 0; r < req[j]; r++) put(g, j, KF);
    for (int j = S - 1; j >= 0; j--) put(g, j, KB);
}

/* Whether stage j should run its next F this round under "prioritize B". */
static int want_f(zb_state *g, int j, int prioritize_b) {
    int S = g->S, fj = *cnt(g, KF, j);
    if (fj >= g->m) return 0;
    if (!prioritize_b || j + 1 >= S || fj < *cnt(g, KF, j + 1) + 2) return 1;
    double next = g->e[j + 1] + g->t[KF] + g->t[KB] + g->c;
    if (g->e[j] >= next) return 0;
    double wcost = 0, mem = g->mem[j] + g->dm[KF];
    for (int w = *cnt(g, KW, j); !fits(g, mem) && w < *cnt(g, KB, j); w++)
        wcost += g->t[KW], mem += g->dm[KW];
    if (g->e[j] + g->t[KF] + wcost <= next) return 1;
    return !(next - g->e[j] <= max_bubble(g) - g->bub[j]);
}

static void round_i(zb_state *g, int i, int prioritize_b, int greedy, int *req) {
    int S = g->S, m = g->m;
    for (int j = 0; j < S; j++) req[j] = want_f(g, j, prioritize_b);
    for (int j = S - 2; j >= 0; j--) req[j] = req[j] < req[j + 1] ? req[j] : req[j + 1];
    for (int j = 0; j < S && !g->bad; j++) {
        if (!req[j]) continue;
        free_for(g, j, g->dm[KF]);
        if (j > 0) fill_gap(g, j, dep_ready(g, j, KF, *cnt(g, KF, j)), greedy);
        put(g, j, KF);
    }
    for (int j = S - 1; j >= 0 && !g->bad; j--) {
        if (*cnt(g, KB, j) != i) {
            g->bad = 1;
            return;
        }
        free_for(g, j, g->dm[KB]);
        if (j + 1 < S) fill_gap(g, j, dep_ready(g, j, KB, i), greedy);
        if (j == 0 && *cnt(g, KF, j) == m)
            while (!g->bad && pending_w(g, j)) put(g, j, KW);
        put(g, j, KB);
    }
}

static void reset(zb_state *g) {
    int S = g->S;
    for (int d = 0; d < S; d++) g->s->len[d] = 0;
    memset(g->n, 0, 3 * (size_t)S * sizeof *g->n);
    for (int j = 0; j < S; j++) g->e[j] = g->first[j] = g->mem[j] = g->bub[j] = 0;
    for (size_t k = 0; k < (size_t)S * (size_t)g->m; k++) g->tf[k] = g->tb[k] = NAN;
    g->bad = 0;
    g->maxbub = 0;
}

/* One variant; returns its makespan, or INFINITY if dropped. */
static double run_variant(zb_state *g, int allow_bubble, int prioritize_b, int greedy, int *req) {
    reset(g);
    round0(g, allow_bubble, req);
    for (int i = 1; i < g->m && !g->bad; i++) round_i(g, i, prioritize_b, greedy, req);
    for (int j = 0; j < g->S && !g->bad; j++)
        while (!g->bad && *cnt(g, KW, j) < g->m) put(g, j, KW);
    if (g->bad) return INFINITY;
    double mk = 0;
    for (int j = 0; j < g->S; j++) mk = g->e[j] - g->first[j] > mk ? g->e[j] - g->first[j] : mk;
    return mk;
}

static void keep(pm_sched *best, const pm_sched *w) {
    memcpy(best->len, w->len, (size_t)w->p * sizeof *w->len);
    memcpy(best->pass, w->pass, (size_t)w->p * (size_t)w->cap * sizeof *w->pass);
}

static void zb_state_free(zb_state *g) {
    pm_free(g->n);
    pm_free(g->e);
    pm_free(g->first);
    pm_free(g->mem);
    pm_free(g->bub);
    pm_free(g->tf);
    pm_free(g->tb);
}

/* Builds the best of the eight variants into s under `limit` (x M; <= 0:
 * no limit). */
pm_status pm_sched_zb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                             const char *kind, int with_h, int *binding, pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 1)
        return pm_errf(err, PM_ERR_ARG,
                       "%s has 1 chunk per device; v=%d only fits interleaved", kind,
                       req->v);
    pm_status rs = pm_sched_check_range(PM_TIER_GREEDY, kind, req->p, req->m, 1, err);
    if (rs) return rs;
    pm_sched work = {0};
    pm_status st = pm_sched_init(&work, kind, PM_PLACE_SINGLE, req->p, req->m, 1, err);
    if (st) return st;
    if ((st = pm_sched_init(s, kind, PM_PLACE_SINGLE, req->p, req->m, 1, err))) {
        pm_sched_free(&work);
        return st;
    }
    int S = req->p, m = req->m;
    double M = S * req->mem.f;
    zb_state g = {.s = &work, .S = S, .m = m, .c = req->t.c,
                  .t = {req->t.f, req->t.b, req->t.w},
                  .dm = {req->mem.f, req->mem.b, req->mem.w},
                  .cap = limit > 0 ? limit * M * (1 + PM_PEAK_TOL) : INFINITY};
    size_t nk = (size_t)S * (size_t)m;
    g.n = pm_malloc(3 * (size_t)S * sizeof *g.n);
    g.e = pm_malloc((size_t)S * sizeof(double));
    g.first = pm_malloc((size_t)S * sizeof(double));
    g.mem = pm_malloc((size_t)S * sizeof(double));
    g.bub = pm_malloc((size_t)S * sizeof(double));
    g.tf = pm_malloc(nk * sizeof(double));
    g.tb = pm_malloc(nk * sizeof(double));
    int *rq = pm_malloc((size_t)S * sizeof *rq);
    double best = INFINITY;
    if (!g.n || !g.e || !g.first || !g.mem || !g.bub || !g.tf || !g.tb || !rq) {
        st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for p=%d m=%d", kind, S, m);
        goto done;
    }
    for (int v = 0; v < 8; v++) {
        double mk = run_variant(&g, v & 1, (v >> 1) & 1, (v >> 2) & 1, rq);
        if (mk < best) best = mk, keep(s, &work);
    }
    /* The handcrafted ZB-H1 and ZB-H2 are two more variants: where they fit
     * the limit, the heuristic never returns anything slower. */
    for (int h = 0; h < 2 && with_h && !st; h++) {
        pm_sched hs;
        pm_search_point pt;
        pm_err e;
        pm_status gs = (h ? pm_sched_build_zb_h2 : pm_sched_build_zb_h1)(&hs, req, &e);
        if (gs) {
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        gs = pm_search_eval(&hs, req, &pt, &e);
        if (gs) {
            pm_sched_free(&hs);
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        double mk = pt.makespan;
        if (limit > 0 && pt.peak > limit * (1 + PM_PEAK_TOL)) g.hit = 1;
        else if (mk < best) {
            best = mk;
            keep(s, &hs);
        }
        pm_sched_free(&hs);
    }
    if (binding) *binding = g.hit;
    if (!st && isinf(best)) {
        double need = (req->mem.f > req->mem.f + req->mem.b ? req->mem.f : req->mem.f + req->mem.b);
        st = pm_errf(err, PM_ERR_MEMLIMIT,
                     "%s: no schedule fits mem_limit=%.4g M for p=%d m=%d; none fits under "
                     "%.4g M (one microbatch in flight per device)", kind, limit, S, m, need / M);
    }
done:
    zb_state_free(&g);
    pm_free(rq);
    pm_sched_free(&work);
    if (st) pm_sched_free(s);
    return st;
}

/* x rounded up to 4 significant digits: a limit printed for the user to
 * pass back must not round below the one that was tried. */
static double ceil4(double x) {
    double e = pow(10, floor(log10(x)) - 3);
    return ceil(x / e * (1 - 1e-12)) * e;
}

/* 1 if the greedy meets `limit` (printed as the user would pass it). */
static int meets(const pm_sched_req *req, double limit, const char *kind) {
    pm_sched t;
    pm_err e;
    pm_status st = pm_sched_zb_greedy(&t, req, limit, kind, 1, NULL, &e);
    pm_sched_free(&t);
    return st == PM_OK;
}

/* The greedy keeps k microbatches in flight per device, and its peak is
 * the level (k - 1) F + max(F, F + B), over p F (M); a limit between two
 * levels can make it overshoot and fail where the level below works (p=5
 * m=7, --mem 1,0.2,-1.2: it meets 0.84 and 1.04 but not 1.0; the hint said
 * 0.24 was the smallest feasible limit). So a failure names the nearest
 * levels on each side that it was seen to meet (a few tries each way). */
static pm_status hinted(pm_sched *s, const pm_sched_req *req, double limit, const char *kind,
                        pm_err *err) {
    pm_status st = pm_sched_zb_greedy(s, req, limit, kind, 1, NULL, err);
    if (st != PM_ERR_MEMLIMIT || !(limit > 0) || !(req->mem.f > 0)) return st;
    double f = req->mem.f, one = f > f + req->mem.b ? f : f + req->mem.b, M = req->p * f;
    double k0 = floor((limit * M - one) / f) + 1, below = 0, above = 0; /* k0: levels <= limit */
    for (int i = 0; i < 4 && !below && k0 - i >= 1; i++) {
        double x = ceil4(((k0 - i - 1) * f + one) / M);
        if (x <= limit && meets(req, x, kind)) below = x;
    }
    for (int i = 0; i < 4 && !above; i++) {
        double x = ceil4(((k0 + i) * f + one) / M);
        if (x > limit && meets(req, x, kind)) above = x;
    }
    if (below && above)
        return pm_errf(err, PM_ERR_MEMLIMIT, "%s: no schedule fits mem_limit=%.4g M for p=%d "
                       "m=%d; it meets %.4g M and %.4g M (the limits nearest below and above)",
                       kind, limit, req->p, req->m, below, above);
    if (above)
        return pm_errf(err, PM_ERR_MEMLIMIT, "%s: no schedule fits mem_limit=%.4g M for p=%d "
                       "m=%d; it meets %.4g M (none fits under %.4g M: one microbatch in "
                       "flight per device)", kind, limit, req->p, req->m, above, one / M);
    return st; /* nothing seen to work nearby: the greedy's own message */
}

pm_status pm_sched_build_zb_auto(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return hinted(s, req, req->mem_limit, "zb", err);
}

pm_status pm_sched_build_zb_1p(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return hinted(s, req, req->mem_limit > 0 ? req->mem_limit : 1.0, "zb-1p", err);
}

pm_status pm_sched_build_zb_2p(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return hinted(s, req, req->mem_limit > 0 ? req->mem_limit : 2.0, "zb-2p", err);
}
