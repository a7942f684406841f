/* gen_autov.c: auto-v, the adaptive V scheduler: the fastest V-placement
 * schedule whose peak fits a memory limit (the Controllable Memory paper's
 * search, which its authors never released).
 *
 * Building blocks searched (slot units, every V chunk pass one slot, T = 6
 * so each device's six passes of a microbatch fill an interval exactly):
 *   F0(0) = 0,                 F0(i) = F0(i-1) + a_i    (forward down)
 *   F1(p-1) = F0(p-1) + 1 + e1, F1(i) = F1(i+1) + b_i   (forward back up)
 *   B1(0) = F1(0) + 1 + e2,    B1(i) = B1(i-1) + c_i    (backward down)
 *   B0(p-1) = B1(p-1) + 1 + e3, B0(i) = B0(i+1) + d_i   (backward up)
 * with steps a, b, c, d in {1, 2} taken from one set for the devices below
 * a split device K and another for K and above, and e1, e2, e3 in 0..5.
 * V-Min (all steps 1) and V-Half (a = c = 2, b = d = 1) are members. A
 * block is legal when each device's four offsets are distinct mod 6; its W
 * passes then take the two free residues, the W of the earlier B first,
 * each at the first free slot after its B. Lifespans l0, l1 follow, and the
 * memory theorem bounds device i by (ceil(l0/6) + ceil(l1/6)) chunk
 * activations, i.e. that many times M/(2p).
 *
 * The split K runs over a grid of at most 9 devices (every ceil(p/8)-th).
 * Every legal block is ranked by an estimate: the squeezed makespan, with
 * the real costs, of its plain repetition for min(m, p + 8) microbatches
 * (the constructor's first candidate, computed in one sweep over the slots
 * without building a schedule). Per bound level the best-ranked block is
 * kept, and only if it beats every block of a lower level (a Pareto front
 * of memory against estimated time). Each kept block whose bound fits is
 * built by the generic constructor (repeat, squeeze with real costs,
 * reorder warm-up and cool-down under the peak) and joins the fixed V kinds
 * (v-min, v-half, zb-v, 1f1b-v, v-zb at its default 1.0 M, dualpipev when
 * m >= 2p) and the V-ZB greedy on a grid of memory levels from V-Min's peak up
 * (gen.h). When p m <= PM_POLISH_MAX_PM the candidates on
 * the front of peak and makespan are polished (polish.h, through the
 * pool); the fastest whose simulated peak fits wins. Nothing
 * in a level's choice depends on the limit asked, so the set considered
 * only grows with the limit, and the answer's makespan never grows with it.
 *
 * Invariants: a legal block's offsets are distinct mod T on every device and
 * every pass starts after its dependency's slot (steps and gaps are >= 1),
 * so slot order is a topological order; a pool candidate's figures are
 * those of the schedule pm_autov_block_build rebuilds from its parameters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "gen.h"
#include "pool.h"
#include "sched.h"

enum { T = 6 }; /* the interval: six one-slot passes per device */

/* blk[]: 0..3 steps a, b, c, d below K; 4..7 from K up; 8 K; 9..11 e1..e3 */
typedef struct {
    int p;
    int *f0, *f1, *b1, *b0, *w0, *w1; /* (p) offsets */
} offs;

static int step(const int *blk, int chain, int i) { return blk[(i < blk[8] ? 0 : 4) + chain]; }

static void chain_f(offs *o, const int *blk) {
    int p = o->p;
    o->f0[0] = 0;
    for (int i = 1; i < p; i++) o->f0[i] = o->f0[i - 1] + step(blk, 0, i);
    o->f1[p - 1] = o->f0[p - 1] + 1 + blk[9];
    for (int i = p - 2; i >= 0; i--) o->f1[i] = o->f1[i + 1] + step(blk, 1, i);
}

static void chain_b1(offs *o, const int *blk) {
    o->b1[0] = o->f1[0] + 1 + blk[10];
    for (int i = 1; i < o->p; i++) o->b1[i] = o->b1[i - 1] + step(blk, 2, i);
}

static void chain_b0(offs *o, const int *blk) {
    int p = o->p;
    o->b0[p - 1] = o->b1[p - 1] + 1 + blk[11];
    for (int i = p - 2; i >= 0; i--) o->b0[i] = o->b0[i + 1] + step(blk, 3, i);
}

static int distinct(int n, const int *x) {
    unsigned seen = 0;
    for (int k = 0; k < n; k++) {
        unsigned bit = 1u << (x[k] % T);
        if (seen & bit) return 0;
        seen |= bit;
    }
    return 1;
}

/* First slot >= from whose residue is in mask. */
static int first_free(int from, unsigned mask) {
    for (int t = from;; t++)
        if (mask & (1u << (t % T))) return t;
}

/* W offsets of device i into the two free residues; returns the device's
 * theorem bound in chunk activations. */
static int place_w(offs *o, int i) {
    int x[4] = {o->f0[i], o->f1[i], o->b1[i], o->b0[i]};
    unsigned free = 0x3f;
    for (int k = 0; k < 4; k++) free &= ~(1u << (x[k] % T));
    int first1 = o->b1[i] <= o->b0[i]; /* B1 ends first */
    int ea = (first1 ? o->b1[i] : o->b0[i]) + 1, eb = (first1 ? o->b0[i] : o->b1[i]) + 1;
    int wa = first_free(ea, free);
    int wb = first_free(eb, free & ~(1u << (wa % T)));
    o->w1[i] = first1 ? wa : wb;
    o->w0[i] = first1 ? wb : wa;
    int l0 = o->w0[i] + 1 - o->f0[i], l1 = o->w1[i] + 1 - o->f1[i];
    return (l0 + T - 1) / T + (l1 + T - 1) / T;
}

/* Places every W of a legal block; returns its bound in chunk activations
 * (max over devices). */
static int finish(offs *o) {
    int bound = 0;
    for (int i = 0; i < o->p; i++) {
        int u = place_w(o, i);
        bound = u > bound ? u : bound;
    }
    return bound;
}

typedef struct {
    double est;          /* best estimated makespan at this bound level */
    int blk[PM_CAND_BLK];
} level_best;

/* Scratch of the estimator, sized once for (p, m). */
typedef struct {
    const pm_sched_req *req;
    int m;
    double *end;   /* (6, p, m) end of each pass of the plain repetition */
    double *free_at, *first; /* (p) */
    signed char *res; /* (p, T) which of the six passes sits on each residue */
    int *off;         /* (p, 6) the six offsets of each device */
} est_ws;

/* The six passes of device d in blk order: F0 F1 B1 B0 W1 W0. */
static int off_of(const offs *o, int j, int d) {
    const int *x[6] = {o->f0, o->f1, o->b1, o->b0, o->w1, o->w0};
    return x[j][d];
}

/* End of the dependency of pass j of device d, microbatch k (+ c when
 * remote), or 0 when it has none. */
static double dep_end(const est_ws *w, int p, int j, int d, int k) {
    const double *e = w->end;
    double c = w->req->t.c;
#define END(jj, dd) e[((size_t)(jj) * p + (dd)) * w->m + k]
    switch (j) {
    case 0: return d == 0 ? 0 : END(0, d - 1) + c;
    case 1: return d == p - 1 ? END(0, d) : END(1, d + 1) + c;
    case 2: return d == 0 ? END(1, 0) : END(2, d - 1) + c;
    case 3: return d == p - 1 ? END(2, d) : END(3, d + 1) + c;
    case 4: return END(2, d);
    default: return END(3, d);
    }
#undef END
}

/* Squeezed makespan of the plain repetition (each device runs its passes
 * in slot order) with the real costs: the constructor's first candidate,
 * so an upper bound on what it returns. Slot order is a topological order,
 * so one sweep over the slots times everything. Gives up (INFINITY) once a
 * device's span reaches `cut`: spans only grow. */
static double estimate(const offs *o, est_ws *w, double cut) {
    int p = o->p, m = w->m, last = 0;
    const pm_costs *t = &w->req->t;
    double cost[6] = {t->f / 2, t->f / 2, t->b / 2, t->b / 2, t->w / 2, t->w / 2};
    memset(w->res, -1, (size_t)p * T);
    for (int d = 0; d < p; d++) {
        w->free_at[d] = 0, w->first[d] = -1;
        for (int j = 0; j < 6; j++) {
            int x = off_of(o, j, d);
            w->off[d * 6 + j] = x;
            w->res[d * T + x % T] = (signed char)j;
            last = x > last ? x : last;
        }
    }
    int64_t end_slot = last + (int64_t)(m - 1) * T;
    for (int64_t s = 0; s <= end_slot; s++) {
        const signed char *res = w->res + s % T;
        for (int d = 0; d < p; d++) {
            int j = res[d * T];
            if (j < 0) continue;
            int64_t x = w->off[d * 6 + j];
            if (s < x || s - x >= (int64_t)m * T) continue;
            int k = (int)((s - x) / T);
            double st = dep_end(w, p, j, d, k);
            st = st > w->free_at[d] ? st : w->free_at[d];
            if (w->first[d] < 0) w->first[d] = st;
            w->free_at[d] = st + cost[j];
            w->end[((size_t)j * p + d) * m + k] = st + cost[j];
            if (w->free_at[d] - w->first[d] >= cut) return INFINITY;
        }
    }
    double mk = 0;
    for (int d = 0; d < p; d++) mk = w->free_at[d] - w->first[d] > mk ? w->free_at[d] - w->first[d] : mk;
    return mk;
}

static void consider(offs *o, const int *blk, level_best *lv, int nlv, est_ws *w) {
    int u = finish(o);
    if (u >= nlv) return;
    double est = estimate(o, w, lv[u].est);
    if (est < lv[u].est) {
        lv[u].est = est;
        memcpy(lv[u].blk, blk, sizeof lv[u].blk);
    }
}

static int legal_upto(const offs *o, int parts) {
    for (int i = 0; i < o->p; i++) {
        int x[4] = {o->f0[i], o->f1[i], o->b1[i], o->b0[i]};
        if (!distinct(parts, x)) return 0;
    }
    return 1;
}

/* Steps below K (lo) and from K (hi) of one chain: code 0..3 gives (lo,
 * hi) in {1,2}^2; with K = p there is no hi, so only codes 0 and 3. */
static void set_steps(int *blk, int chain, int code) {
    blk[chain] = 1 + (code & 1);
    blk[4 + chain] = 1 + (code >> 1);
}

typedef struct {
    offs *o;
    level_best *lv;
    int nlv;
    est_ws *w;
    int blk[PM_CAND_BLK];
    int codes[4], ncodes; /* the step codes this K allows */
} search_ctx;

/* The backward-up chain B0, then the finished block. */
static void enum_b0(search_ctx *x) {
    for (int c = 0; c < x->ncodes; c++)
        for (int e3 = 0; e3 < T; e3++) {
            set_steps(x->blk, 3, x->codes[c]);
            x->blk[11] = e3;
            chain_b0(x->o, x->blk);
            if (legal_upto(x->o, 4)) consider(x->o, x->blk, x->lv, x->nlv, x->w);
        }
}

/* The backward-down chain B1; pruned as soon as two offsets collide. */
static void enum_b1(search_ctx *x) {
    for (int c = 0; c < x->ncodes; c++)
        for (int e2 = 0; e2 < T; e2++) {
            set_steps(x->blk, 2, x->codes[c]);
            x->blk[10] = e2;
            chain_b1(x->o, x->blk);
            if (legal_upto(x->o, 3)) enum_b0(x);
        }
}

/* Every legal block: the best-estimated one per bound level into lv. The
 * forward chains come first so collisions prune early. */
static void enumerate(offs *o, level_best *lv, int nlv, est_ws *w) {
    int p = o->p, kstep = (p + 7) / 8; /* K on a grid: at most 9 values */
    search_ctx x = {.o = o, .lv = lv, .nlv = nlv, .w = w};
    for (int K = 1; K <= p; K = K < p && K + kstep > p ? p : K + kstep) {
        x.blk[8] = K;
        x.ncodes = K == p ? 2 : 4;
        for (int c = 0; c < 4; c++) x.codes[c] = K == p ? 3 * c : c;
        for (int ca = 0; ca < x.ncodes; ca++)
            for (int cb = 0; cb < x.ncodes; cb++)
                for (int e1 = 0; e1 < T; e1++) {
                    set_steps(x.blk, 0, x.codes[ca]);
                    set_steps(x.blk, 1, x.codes[cb]);
                    x.blk[9] = e1;
                    chain_f(o, x.blk);
                    if (legal_upto(o, 2)) enum_b1(&x);
                }
    }
}

static void offs_free(offs *o) {
    pm_free(o->f0);
    *o = (offs){0};
}

static pm_status offs_init(offs *o, int p, pm_err *err) {
    *o = (offs){.p = p};
    int *x = pm_malloc(6 * (size_t)p * sizeof *x);
    if (!x) return pm_errf(err, PM_ERR_NOMEM, "auto-v: out of memory for p=%d", p);
    o->f0 = x, o->f1 = x + p, o->b1 = x + 2 * p, o->b0 = x + 3 * p, o->w0 = x + 4 * p,
    o->w1 = x + 5 * p;
    return PM_OK;
}

/* The block of parameters blk as a pm_block (caller frees). */
static pm_status make_block(pm_block *b, const int *blk, int p, pm_err *err) {
    *b = (pm_block){0};
    offs o;
    pm_status st = offs_init(&o, p, err);
    if (st) return st;
    chain_f(&o, blk);
    chain_b1(&o, blk);
    chain_b0(&o, blk);
    finish(&o);
    b->pass = pm_malloc(6 * (size_t)p * sizeof *b->pass);
    if (!b->pass) {
        offs_free(&o);
        return pm_errf(err, PM_ERR_NOMEM, "auto-v: out of memory for a block of p=%d", p);
    }
    b->place = PM_PLACE_V, b->p = p, b->v = 2, b->T = T;
    for (int i = 0; i < p; i++) {
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_F, o.f0[i], 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_F, o.f1[i], 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_B, o.b1[i], 1};
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_B, o.b0[i], 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_W, o.w1[i], 1};
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_W, o.w0[i], 1};
    }
    offs_free(&o);
    return PM_OK;
}

pm_status pm_autov_block_build(pm_sched *s, const int *blk, const pm_sched_req *req,
                               pm_err *err) {
    pm_block b;
    pm_sched_req q = *req;
    q.v = 2;
    q.mem_limit = 0;
    pm_status st = make_block(&b, blk, req->p, err);
    if (st) return st;
    st = pm_sched_from_block(s, &b, &q, "auto-v", err);
    pm_block_free(&b);
    return st;
}

/* The searched blocks whose bound fits max_limit, on the Pareto front of
 * (bound, estimated makespan). */
/* Candidate rebuild functions (pool.h): a searched block from its
 * parameters, and the V-ZB greedy at its level. */
static pm_status rebuild_block(pm_sched *s, const pm_cand *c, const pm_sched_req *req,
                               pm_err *err) {
    return pm_autov_block_build(s, c->blk, req, err);
}

static pm_status rebuild_vzb(pm_sched *s, const pm_cand *c, const pm_sched_req *req,
                             pm_err *err) {
    return pm_sched_vzb_greedy(s, req, c->level, c->kind, NULL, err);
}

static pm_status pool_blocks(pm_cand_pool *pl, const pm_sched_req *req, double max_limit,
                             pm_err *err) {
    int p = req->p, m = req->m, nlv = (int)(max_limit * 2 * p + 1e-9) + 1;
    if (nlv < 1) return PM_OK;
    offs o;
    pm_status st = offs_init(&o, p, err);
    if (st) return st;
    level_best *lv = pm_malloc((size_t)nlv * sizeof *lv);
    /* the estimate ranks blocks; 2p + 8 microbatches show warm-up, steady
     * state and cool-down, and the winners are then built at full m */
    est_ws w = {.req = req, .m = m < p + 8 ? m : p + 8};
    m = w.m;
    w.end = pm_malloc(6 * (size_t)p * (size_t)m * sizeof(double));
    w.free_at = pm_malloc((size_t)p * sizeof(double));
    w.first = pm_malloc((size_t)p * sizeof(double));
    w.res = pm_malloc((size_t)p * T);
    w.off = pm_malloc(6 * (size_t)p * sizeof *w.off);
    if (!lv || !w.end || !w.free_at || !w.first || !w.res || !w.off) {
        st = pm_errf(err, PM_ERR_NOMEM, "auto-v: out of memory searching blocks for p=%d", p);
        goto done;
    }
    for (int u = 0; u < nlv; u++) lv[u].est = INFINITY;
    enumerate(&o, lv, nlv, &w);
    double front = INFINITY;
    for (int u = 0; u < nlv && !st; u++) {
        if (!(lv[u].est < front)) continue;
        front = lv[u].est;
        pm_sched s;
        pm_err e;
        pm_status gs = pm_autov_block_build(&s, lv[u].blk, req, &e);
        if (gs) {
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        pm_cand c = {.rebuild = rebuild_block, .fam = PM_PLACE_V, .kind = "auto-v",
                     .bound = (double)u / (2.0 * p)};
        memcpy(c.blk, lv[u].blk, sizeof c.blk);
        gs = pm_search_eval(&s, req, &c.pt, &e);
        pm_sched_free(&s);
        st = gs ? pm_search_fatal(gs, &e, err) : pm_cand_pool_add(pl, &c, err);
    }
done:
    offs_free(&o);
    pm_free(lv);
    pm_free(w.end);
    pm_free(w.free_at);
    pm_free(w.first);
    pm_free(w.res);
    pm_free(w.off);
    return st;
}

/* Lowest grid level the V-ZB greedy is tried at (about a quarter of M):
 * below it the greedy's warm-up has no room and the blocks do better. */
static int vzb_lowest_level(int p) {
    int k = p / (2 * pm_search_step(p, 2));
    return k > 1 ? k : 1;
}

pm_status pm_cand_pool_v(pm_cand_pool *pl, const pm_sched_req *req, double max_limit, pm_err *err) {
    static const char *const fixed[] = {"v-min", "v-half", "zb-v", "1f1b-v", "v-zb", "dualpipev"};
    pm_status st = PM_OK;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && !st; i++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_V, fixed[i], 0, err);
    if (!st) st = pool_blocks(pl, req, max_limit, err);
    int top = pm_search_levels(max_limit, req->p, 2);
    /* The greedy runs at every level from a quarter of M up: where it fits
     * below V-Min's peak (small p, e.g. p = 2 at 0.75 M) it is the only V
     * schedule that does, and the search must see it. */
    int binding = 1;
    for (int k = vzb_lowest_level(req->p); k <= top && binding && !st; k++) {
        pm_sched s;
        double lv = pm_search_level(k, req->p, 2);
        pm_err e;
        pm_status gs = pm_sched_vzb_greedy(&s, req, lv, "v-zb", &binding, &e);
        if (gs) {
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        pm_cand c = {.rebuild = rebuild_vzb, .fam = PM_PLACE_V, .kind = "v-zb", .level = lv,
                     .bound = lv};
        gs = pm_search_eval(&s, req, &c.pt, &e);
        pm_sched_free(&s);
        st = gs ? pm_search_fatal(gs, &e, err) : pm_cand_pool_add(pl, &c, err);
    }
    return st;
}

static double pool_min_admit(const pm_cand_pool *pl, const char **who) {
    double mn = INFINITY;
    for (int i = 0; i < pl->n; i++)
        if (pl->c[i].pt.ok && pm_cand_admit(&pl->c[i]) < mn)
            mn = pm_cand_admit(&pl->c[i]), *who = pl->c[i].kind;
    return mn;
}

pm_status pm_sched_auto_v_min_limit(const pm_sched_req *req, double *limit, pm_err *err) {
    *limit = INFINITY;
    pm_cand_pool pl = {0};
    /* The whole pool up to 1F1B's memory: the greedy fits below V-Min's
     * peak, and a pool holds every candidate admitted below its top (the
     * larger of peak and level, pool.h), so this one holds the minimum. */
    pm_status st = pm_cand_pool_v(&pl, req, 1.0, err);
    const char *who = "";
    if (!st) *limit = pool_min_admit(&pl, &who);
    pm_cand_pool_free(&pl);
    if (!st && isinf(*limit))
        st = pm_errf(err, PM_ERR_ARG, "auto-v: no V schedule builds for p=%d m=%d", req->p,
                     req->m);
    return st;
}

pm_status pm_sched_build_auto_v(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 2)
        return pm_errf(err, PM_ERR_ARG,
                       "auto-v has 2 chunks per device (V placement); v=%d only fits "
                       "interleaved", req->v);
    if (!(req->mem_limit > 0))
        return pm_errf(err, PM_ERR_ARG,
                       "auto-v needs mem_limit=X (a multiple of M; e.g. 0.5 for half of "
                       "1F1B's activation memory)");
    if (!(req->mem.f > 0))
        return pm_errf(err, PM_ERR_ARG, "auto-v needs a positive forward memory delta");
    pm_status rs = pm_sched_check_range(PM_TIER_SEARCH, "auto-v", req->p, req->m, 2, err);
    if (rs) return rs;
    pm_cand_pool pl = {0};
    pm_status st = pm_cand_pool_v(&pl, req, req->mem_limit, err);
    if (!st) st = pm_cand_pool_polish(&pl, PM_PLACE_V, req, &req->mem_limit, 1, err);
    if (st) goto done;
    int w = pm_cand_pool_best(&pl, PM_PLACE_V, req->mem_limit);
    if (w < 0) {
        /* The pool was built for this limit; the smallest feasible one may
         * come from the greedy at a level this pool never tried. */
        double mn;
        if ((st = pm_sched_auto_v_min_limit(req, &mn, err))) goto done;
        st = pm_errf(err, PM_ERR_MEMLIMIT,
                     "auto-v: no V schedule fits mem_limit=%.4g M for p=%d m=%d; the smallest "
                     "feasible limit is %.4g M", req->mem_limit, req->p, req->m, mn);
        goto done;
    }
    if ((st = pm_cand_pool_build(s, &pl, w, req, err))) goto done;
    snprintf(s->kind, sizeof s->kind, "auto-v");
done:
    pm_cand_pool_free(&pl);
    if (st) pm_sched_free(s);
    return st;
}
