/* pool.c: the candidate pool of the memory-limited searches (pool.h): a
 * growable array of candidates, their simulation, the pick of the fastest
 * under a limit, and the rebuild of a winner through the function its
 * generator stored in it. It calls no generator of its own: the named kinds
 * are reached through the public registry (pm_sched_generate).
 *
 * Invariant: a candidate's figures are those of the schedule its rebuild
 * function returns for the same request. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "polish.h"
#include "slots.h"
#include "pool.h"
#include "sched.h"
#include "util/alloc.h"

/* A named kind: the registry again, with its chunks and no limit. */
static pm_status rebuild_named(pm_sched *s, const pm_cand *c, const pm_sched_req *req,
                               pm_err *err) {
    pm_sched_req q = *req;
    q.v = c->v;
    q.mem_limit = 0;
    return pm_sched_generate(s, c->kind, &q, err);
}

pm_status pm_search_fatal(pm_status st, const pm_err *e, pm_err *err) {
    return st == PM_ERR_NOMEM ? pm_errf(err, PM_ERR_NOMEM, "%s", e->msg) : PM_OK;
}

pm_status pm_search_eval(const pm_sched *s, const pm_sched_req *req, pm_search_point *pt,
                         pm_err *err) {
    *pt = (pm_search_point){0};
    pm_cost c;
    pm_sim sim;
    pm_status st = pm_cost_init_uniform(&c, s, req->t, req->mem, err);
    if (st) return st;
    st = pm_sim_run(&sim, s, &c, err);
    if (st) {
        pm_cost_free(&c);
        return st;
    }
    snprintf(pt->kind, sizeof pt->kind, "%s", s->kind);
    pt->ok = 1;
    pt->makespan = sim.makespan;
    pt->bubble = sim.bubble; /* the reruns of the forward count as lost (sim.c) */
    pt->peak = pm_sim_peak_max_x(&sim);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    return PM_OK;
}

void pm_cand_pool_free(pm_cand_pool *pl) {
    if (!pl) return;
    for (int i = 0; pl->done && i < pl->n; i++) pm_sched_free(&pl->done[i]);
    pm_free(pl->done);
    pm_free(pl->c);
    *pl = (pm_cand_pool){0};
}

pm_status pm_cand_pool_add(pm_cand_pool *pl, const pm_cand *c, pm_err *err) {
    PM_ASSERT(!pl->done); /* candidates are added before the polish */
    if (pl->n == pl->cap) {
        int cap = pl->cap ? 2 * pl->cap : 64;
        pm_cand *x = pm_realloc(pl->c, (size_t)cap * sizeof *x);
        if (!x) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d search candidates", cap);
        pl->c = x;
        pl->cap = cap;
    }
    pl->c[pl->n++] = *c;
    return PM_OK;
}

pm_status pm_cand_pool_named(pm_cand_pool *pl, const pm_sched_req *req, pm_place fam, const char *kind,
                        int v, pm_err *err) {
    pm_sched_req q = *req;
    q.v = v;
    q.mem_limit = 0;
    pm_sched s;
    pm_err e;
    pm_status gs = pm_sched_generate(&s, kind, &q, &e);
    if (gs) return pm_search_fatal(gs, &e, err); /* else: does not fit this (p, m) */
    pm_cand c = {.rebuild = rebuild_named, .fam = fam, .v = v};
    snprintf(c.kind, sizeof c.kind, "%s", kind);
    gs = pm_search_eval(&s, req, &c.pt, &e);
    pm_sched_free(&s);
    if (gs) return pm_search_fatal(gs, &e, err);
    c.bound = c.pt.peak;
    if (v > 2) snprintf(c.pt.kind, sizeof c.pt.kind, "%s(v=%d)", kind, v);
    return pm_cand_pool_add(pl, &c, err);
}

double pm_cand_admit(const pm_cand *c) {
    double peak = c->polished ? c->raw_peak : c->pt.peak;
    return peak > c->bound ? peak : c->bound;
}

int pm_cand_pool_best(const pm_cand_pool *pl, int fam, double limit) {
    int best = -1;
    for (int i = 0; i < pl->n; i++) {
        const pm_cand *c = &pl->c[i];
        if (!c->pt.ok || (fam >= 0 && (int)c->fam != fam)) continue;
        if (pm_cand_admit(c) > limit * (1 + PM_PEAK_TOL)) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        const pm_search_point *b = &pl->c[best].pt;
        if (c->pt.makespan < b->makespan * (1 - 1e-12) ||
            (c->pt.makespan <= b->makespan * (1 + 1e-12) && c->pt.peak < b->peak))
            best = i;
    }
    return best;
}

/* The slot model's neighbourhood step after the local search (slots.h),
 * where the costs lie on a grid of slots: every pass may move up to 4
 * slots, and the solver gets 15000 conflicts (about 0.3 s at p = 8,
 * m = 16). At p = 8, m = 16, unit costs it takes the V-ZB greedy's 54.5,
 * 52.5 and 51.5 (0.75, 0.8125, 0.875 M) to 54, 52 and 51, where single
 * moves and kicks found nothing; with 10000 conflicts it found nothing at
 * 0.75 M. It runs only on schedules above the lower bound at their cap
 * (bound.c, which proves those three one slot or less from their optima
 * 53.5, 52 and 50.5) by at most 10% (a test of the candidate alone, so the
 * answers stay monotone and independent of the pool's top): further off,
 * a block or a greedy of another level wins anyway, and each question
 * costs as much; when p m is at most 128 (at p = 8, m = 24 a question that finds nothing
 * took 0.5 s); and when the makespan it asks for (one slot below the
 * candidate's) would beat its family's best at one of the limits asked
 * (pm_cand_pool_polish): at 0.875 M the 0.75 and 0.8125 M candidates
 * (54.5, 52.5) were asked for 54 and 52 against 0.875 M's 51.5: 0.7 s
 * of the search's 1.1 s for answers it could not use. */
#define PM_LNS_MAX_PM 128 /* p m: 768 passes on the V placement, ~0.3 s a question */
#define PM_LNS_WINDOW 4
#define PM_LNS_CONFLICTS 15000
#define PM_LNS_GAP 0.10

/* The rebuilt schedule polished within cap (x M). */
static pm_status polish(pm_sched *s, const pm_sched_req *req, double cap, double lns_above,
                        pm_err *err) {
    pm_cost c;
    pm_status st = pm_cost_init_uniform(&c, s, req->t, req->mem, err);
    if (st) return st;
    pm_polish_cfg cfg = {cap * pm_cost_M(&c), PM_POLISH_BUDGET, PM_POLISH_PATIENCE};
    pm_polish_stats ps;
    st = pm_sched_polish(s, &c, &cfg, &ps, err);
    double lb = 0, mk = 0;
    if (!st && !ps.optimal && (int64_t)req->p * req->m <= PM_LNS_MAX_PM) {
        pm_search_point pt;
        pm_err e;
        lb = pm_sched_lower_bound_at(s, &c, cfg.cap);
        pm_status es = pm_search_eval(s, req, &pt, &e);
        if (es == PM_ERR_NOMEM) st = pm_errf(err, es, "%s", e.msg);
        mk = es ? 0 : pt.makespan;
    }
    if (mk > lb && mk <= lb * (1 + PM_LNS_GAP) && lb <= lns_above) {
        pm_slots_lns lns = {PM_LNS_WINDOW, PM_LNS_CONFLICTS, 1, lns_above};
        int steps;
        st = pm_slots_improve(s, &c, cfg.cap, &lns, &steps, err);
    }
    pm_cost_free(&c);
    return st;
}

pm_status pm_cand_build(pm_sched *s, const pm_cand *c, const pm_sched_req *req, pm_err *err) {
    pm_status st = c->rebuild(s, c, req, err);
    if (!st && c->polished && (st = polish(s, req, c->raw_peak, c->lns_above, err)))
        pm_sched_free(s);
    return st;
}

pm_status pm_cand_pool_build(pm_sched *s, const pm_cand_pool *pl, int i, const pm_sched_req *req,
                             pm_err *err) {
    if (pl->done && pl->done[i].p > 0 && pl->c[i].polished)
        return pm_sched_copy(s, &pl->done[i], err);
    return pm_cand_build(s, &pl->c[i], req, err);
}

/* Whether candidate i is on its family's front (pool.h), on raw figures. */
static int on_front(const pm_cand_pool *pl, int i) {
    const pm_cand *c = &pl->c[i];
    double a = pm_cand_admit(c);
    for (int j = 0; j < pl->n; j++) {
        const pm_cand *d = &pl->c[j];
        if (j == i || !d->pt.ok || d->fam != c->fam) continue;
        double b = pm_cand_admit(d);
        if (b > a * (1 + PM_PEAK_TOL)) continue;
        if (d->pt.makespan < c->pt.makespan * (1 - 1e-12)) return 0;
        if (d->pt.makespan <= c->pt.makespan * (1 + 1e-12) && (b < a * (1 - PM_PEAK_TOL) || j < i))
            return 0;
    }
    return 1;
}

/* The family's best raw makespan among candidates admitted at the
 * smallest of the n limits that admits c (INFINITY if none does). */
static double family_best(const pm_cand_pool *pl, const pm_cand *c, const double *limits, int n) {
    double a = pm_cand_admit(c), l = INFINITY, best = INFINITY;
    for (int k = 0; k < n; k++)
        if (a <= limits[k] * (1 + PM_PEAK_TOL) && limits[k] < l) l = limits[k];
    for (int j = 0; j < pl->n && l < INFINITY; j++) {
        const pm_cand *d = &pl->c[j];
        if (d->pt.ok && d->fam == c->fam && pm_cand_admit(d) <= l * (1 + PM_PEAK_TOL) &&
            d->pt.makespan < best)
            best = d->pt.makespan;
    }
    return best;
}

pm_status pm_cand_pool_polish(pm_cand_pool *pl, int fam, const pm_sched_req *req,
                              const double *limits, int n, pm_err *err) {
    pm_status st = PM_OK;
    double top = 0;
    for (int k = 0; k < n; k++) top = limits[k] > top ? limits[k] : top;
    if ((int64_t)req->p * req->m > PM_POLISH_MAX_PM) return PM_OK;
    char *front = pm_malloc((size_t)(pl->n ? pl->n : 1));
    if (!pl->done) pl->done = pm_calloc((size_t)(pl->n ? pl->n : 1), sizeof *pl->done);
    if (!front || !pl->done) {
        pm_free(front);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory polishing %d candidates", pl->n);
    }
    for (int i = 0; i < pl->n; i++) { /* all first: the front is of raw figures */
        pm_cand *c = &pl->c[i];
        front[i] = c->pt.ok && (fam < 0 || (int)c->fam == fam) &&
                   pm_cand_admit(c) <= top * (1 + PM_PEAK_TOL) && on_front(pl, i);
        /* a bound equal to the best may still win on a smaller peak */
        c->lns_above = family_best(pl, c, limits, n) * (1 + 1e-12);
    }
    for (int i = 0; i < pl->n && !st; i++) {
        if (!front[i]) continue;
        pm_cand *c = &pl->c[i];
        pm_cand x = *c;
        x.polished = 1;
        x.raw_peak = c->pt.peak;
        pm_sched s;
        pm_err e;
        pm_status gs = pm_cand_build(&s, &x, req, &e);
        if (!gs && (gs = pm_search_eval(&s, req, &x.pt, &e))) pm_sched_free(&s);
        if (gs) {
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        snprintf(x.pt.kind, sizeof x.pt.kind, "%.24s+polish", c->pt.kind);
        if (x.pt.makespan < c->pt.makespan * (1 - 1e-12)) *c = x, pl->done[i] = s;
        else pm_sched_free(&s);
    }
    pm_free(front);
    return st;
}
