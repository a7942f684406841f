/* search.c: the best schedule under a memory limit, over every family
 * (placement), and the bubble-versus-memory curve.
 *
 * Candidates (pool.h, through gen.h): per family, the fixed kinds of the
 * registry (their peaks do not depend on the limit), and the memory-aware
 * generators run at every memory level up to the limit: the Zero Bubble
 * heuristic (single placement, levels k/p) and, through gen_autov.c, the
 * searched V blocks and the V-ZB greedy (levels k/2p); and recomputed
 * variants of the fixed kinds that go lowest in memory (alone with
 * --recompute). Recomputation costs a forward per backward, so it wins
 * only where nothing faster fits. A candidate is admitted for limit l
 * when its simulated peak and the level it was built for are at most l
 * (pm_cand_admit); the answer is the admitted candidate with the smallest
 * makespan (ties: smaller peak). When p m <= PM_POLISH_MAX_PM the
 * candidates on each family's front are first polished (polish.h), within
 * their own peaks. Since the candidates admitted for l, and which of them
 * are polished, depend on nothing else, `search` and `curve` give the same
 * answer for l, and it never grows with the limit.
 *
 * Invariants: a pool entry's figures are those of the schedule that
 * pm_cand_build rebuilds from it (same generator, same request); the
 * winner is validated under the limit before it is returned. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "gen.h"
#include "pool.h"
#include "sched.h"

/* A Zero Bubble heuristic candidate: the heuristic again at its level. */
static pm_status rebuild_zb(pm_sched *s, const pm_cand *c, const pm_sched_req *req,
                            pm_err *err) {
    return pm_sched_zb_greedy(s, req, c->level, c->kind, 0, NULL, err);
}

/* The single placement: fixed kinds, and the heuristic at every level. */
static pm_status pool_single(pm_cand_pool *pl, const pm_sched_req *req, double max_limit,
                             pm_err *err) {
    static const char *const fixed[] = {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-1p", "zb-2p"};
    pm_status st = PM_OK;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && !st; i++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_SINGLE, fixed[i], 0, err);
    /* the levels run the heuristic alone: ZB-H1/H2 are in the pool above */
    int top = pm_search_levels(max_limit, req->p, 1);
    int binding = 1;
    for (int k = 1; k <= top && binding && !st; k++) {
        pm_sched s;
        double lv = pm_search_level(k, req->p, 1);
        pm_err e;
        pm_status gs = pm_sched_zb_greedy(&s, req, lv, "zb", 0, &binding, &e);
        if (gs) {
            st = pm_search_fatal(gs, &e, err);
            continue;
        }
        pm_cand c = {.rebuild = rebuild_zb, .fam = PM_PLACE_SINGLE, .kind = "zb", .level = lv,
                     .bound = lv};
        gs = pm_search_eval(&s, req, &c.pt, &e);
        pm_sched_free(&s);
        st = gs ? pm_search_fatal(gs, &e, err) : pm_cand_pool_add(pl, &c, err);
    }
    return st;
}

/* Whether p x v stages are within req->max_stages. */
static int stages_fit(const pm_sched_req *req, int v) {
    return !req->max_stages || (int64_t)req->p * v <= req->max_stages;
}

/* The loop placement: interleaved 1F1B with 2, 3 and 4 chunks. */
static pm_status pool_loop(pm_cand_pool *pl, const pm_sched_req *req, pm_err *err) {
    pm_status st = PM_OK;
    for (int v = 2; v <= 4 && stages_fit(req, v) && !st; v++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_LOOP, "interleaved", v, err);
    return st;
}

/* Recomputation: each family's kinds recomputed (each keeps only stage
 * inputs, plus one stage's activation while it is rebuilt), those that go
 * lowest and the fastest: on a real model the state and buffers, not the
 * peak in M alone, decide which of them a device holds. */
static pm_status pool_recomputed(pm_cand_pool *pl, const pm_sched_req *req, pm_err *err) {
    static const char *const single[] = {"1f1b-r", "zb-h1-r"};
    static const char *const v[] = {"v-min-r", "v-half-r", "1f1b-v-r", "zb-v-r", "dualpipev-r"};
    pm_status st = PM_OK;
    for (size_t i = 0; i < sizeof single / sizeof single[0] && !st; i++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_SINGLE, single[i], 0, err);
    for (size_t i = 0; i < sizeof v / sizeof v[0] && stages_fit(req, 2) && !st; i++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_V, v[i], 0, err);
    for (int c = 2; c <= 4 && stages_fit(req, c) && !st; c++)
        st = pm_cand_pool_named(pl, req, PM_PLACE_LOOP, "interleaved-r", c, err);
    return st;
}

/* Every candidate of at most req->max_stages stages; with req->recompute
 * only the recomputed ones. */
static pm_status pool_all(pm_cand_pool *pl, const pm_sched_req *req, double max_limit, pm_err *err) {
    *pl = (pm_cand_pool){0};
    pm_status st = pool_recomputed(pl, req, err);
    if (!st && !req->recompute) st = pool_single(pl, req, max_limit, err);
    if (!st && !req->recompute) st = pool_loop(pl, req, err);
    if (!st && !req->recompute && stages_fit(req, 2)) st = pm_cand_pool_v(pl, req, max_limit, err);
    if (st) pm_cand_pool_free(pl);
    return st;
}

static pm_status check_req(const pm_sched_req *req, const char *what, pm_err *err) {
    if (!req) return pm_sched_check_req(req, err);
    if (req->p < 1 || req->m < 1)
        return pm_errf(err, PM_ERR_ARG, "%s needs p >= 1 and m >= 1 (got p=%d m=%d)", what, req->p,
                       req->m);
    if (!(req->mem.f > 0))
        return pm_errf(err, PM_ERR_ARG, "%s needs a positive forward memory delta", what);
    if (req->max_stages && req->max_stages < req->p)
        return pm_errf(err, PM_ERR_ARG, "%s: max_stages=%d is fewer than the %d devices", what,
                       req->max_stages, req->p);
    pm_status st = pm_sched_check_range(PM_TIER_SEARCH, what, req->p, req->m, 4, err);
    return st ? st : pm_sched_check_req(req, err);
}

static double min_peak(const pm_cand_pool *pl) {
    double mn = INFINITY;
    for (int i = 0; i < pl->n; i++)
        if (pl->c[i].pt.ok && pm_cand_admit(&pl->c[i]) < mn) mn = pm_cand_admit(&pl->c[i]);
    return mn;
}

static void write_reason(char *reason, size_t n, const pm_cand_pool *pl, int w, double limit,
                         const pm_sched_req *req) {
    if (!reason || !n) return;
    const pm_cand *c = &pl->c[w];
    int fit = 0, at = 0;
    for (int i = 0; i < pl->n; i++)
        fit += pl->c[i].pt.ok && pm_cand_admit(&pl->c[i]) <= limit * (1 + PM_PEAK_TOL);
    at = snprintf(reason, n, "%s (%s placement) is the fastest of %d schedules within %.4g M: "
                  "makespan %.6g, bubble %.2f%%, peak %.4g M",
                  c->pt.kind, pm_place_names[c->fam], fit, limit, c->pt.makespan,
                  100 * c->pt.bubble, c->pt.peak);
    for (int f = 0; f < PM_PLACE_COUNT && at > 0 && (size_t)at < n; f++) {
        if (f == (int)c->fam) continue;
        int b = pm_cand_pool_best(pl, f, limit), least = f == PM_PLACE_SINGLE ? 1 : 2;
        if (!stages_fit(req, least))
            at += snprintf(reason + at, n - (size_t)at, "; %s: %d stages, more than the %d the "
                           "model can be cut into", pm_place_names[f], least * req->p,
                           req->max_stages);
        else if (b < 0)
            at += snprintf(reason + at, n - (size_t)at, "; %s: none fits", pm_place_names[f]);
        else
            at += snprintf(reason + at, n - (size_t)at, "; best %s: %s +%.1f%%", pm_place_names[f],
                           pl->c[b].pt.kind,
                           100 * (pl->c[b].pt.makespan / c->pt.makespan - 1));
    }
}

/* The fastest candidate of pl within limit that validates, built into
 * best: its index, or -1 (*st PM_OK when none is left, else why it
 * stopped). Invalid ones (should not happen) are dropped from pl. */
static int next_valid(pm_cand_pool *pl, const pm_sched_req *req, double limit, pm_sched *best,
                      pm_status *st, pm_err *err) {
    *st = PM_OK;
    for (int w; (w = pm_cand_pool_best(pl, -1, limit)) >= 0;) {
        pm_cost c;
        *st = pm_cand_pool_build(best, pl, w, req, err);
        if (!*st) *st = pm_cost_init_uniform(&c, best, req->t, req->mem, err);
        if (!*st) {
            *st = pm_sched_validate(best, &c, limit, err);
            pm_cost_free(&c);
        }
        if (!*st) {
            snprintf(best->kind, sizeof best->kind, "%s", pl->c[w].pt.kind);
            return w;
        }
        pm_sched_free(best);
        if (*st == PM_ERR_NOMEM) return -1;
        *st = PM_OK;
        pl->c[w].pt.ok = 0;
    }
    return -1;
}

/* The pool built for the lowest levels (empty when it could not be, for a
 * reason that is not fatal; the caller frees it either way) and the
 * smallest feasible limit, pl's or its. */
static pm_status low_pool(const pm_sched_req *req, const pm_cand_pool *pl, pm_cand_pool *low,
                          double *least, pm_err *err) {
    pm_err e;
    pm_status st = pool_all(low, req, 1.0, &e); /* on failure freed, so empty */
    *least = min_peak(pl);
    if (st) return pm_search_fatal(st, &e, err);
    double x = min_peak(low);
    *least = x < *least ? x : *least;
    return PM_OK;
}

static pm_status none_fits(const pm_sched_req *req, double limit, double least, pm_err *err) {
    return pm_errf(err, PM_ERR_MEMLIMIT, "no schedule fits mem_limit=%.4g M for p=%d m=%d; the "
                   "smallest feasible limit is %.4g M", limit, req->p, req->m, least);
}

/* The search's pool for req->mem_limit (its candidates polished), after
 * the request's checks. */
static pm_status search_pool(const pm_sched_req *req, pm_cand_pool *pl, pm_err *err) {
    pm_status st = check_req(req, "search", err);
    if (st) return st;
    double limit = req->mem_limit;
    if (!(limit > 0))
        return pm_errf(err, PM_ERR_ARG, "search needs mem_limit=X (a multiple of M, > 0)");
    if ((st = pool_all(pl, req, limit, err))) return st;
    if ((st = pm_cand_pool_polish(pl, -1, req, &limit, 1, err))) pm_cand_pool_free(pl);
    return st;
}

pm_status pm_sched_search(pm_sched *best, const pm_sched_req *req, pm_search_point *pt,
                          char *reason, size_t reason_len, pm_err *err) {
    *best = (pm_sched){0};
    if (pt) *pt = (pm_search_point){0};
    double limit = req ? req->mem_limit : 0, least = INFINITY;
    pm_cand_pool pl, low;
    pm_status st = search_pool(req, &pl, err);
    if (st) return st;
    int w = next_valid(&pl, req, limit, best, &st, err);
    if (w >= 0) {
        if (pt) *pt = pl.c[w].pt;
        write_reason(reason, reason_len, &pl, w, limit, req);
    } else if (!st) { /* the lowest levels: only for the message */
        if (!(st = low_pool(req, &pl, &low, &least, err))) st = none_fits(req, limit, least, err);
        pm_cand_pool_free(&low);
    }
    pm_cand_pool_free(&pl);
    return st;
}

/* Offers pl's candidates within limit to visit, fastest first, each
 * dropped once offered; only those below floor (the main pool's lowest,
 * for the pool of the lowest levels). *n counts them. */
static pm_status offer(pm_cand_pool *pl, const pm_sched_req *req, double limit, double floor,
                       pm_sched_visit_fn visit, void *ctx, int *n, int *stop, pm_err *err) {
    pm_status st = PM_OK;
    pm_sched s;
    for (int w; !*stop && (w = next_valid(pl, req, limit, &s, &st, err)) >= 0;) {
        if (pm_cand_admit(&pl->c[w]) < floor) {
            st = visit(ctx, &s, &pl->c[w].pt, stop, err);
            (*n)++;
        }
        pm_sched_free(&s);
        pl->c[w].pt.ok = 0;
        if (st) break;
    }
    return st;
}

pm_status pm_sched_search_each(const pm_sched_req *req, pm_sched_visit_fn visit, void *ctx,
                               pm_err *err) {
    double limit = req ? req->mem_limit : 0, least = INFINITY;
    pm_cand_pool pl, low;
    pm_status st = search_pool(req, &pl, err);
    if (st) return st;
    int n = 0, stop = 0;
    double floor = min_peak(&pl); /* before offer() drops what it offers */
    st = offer(&pl, req, limit, INFINITY, visit, ctx, &n, &stop, err);
    if (!st && !stop) {
        if (!(st = low_pool(req, &pl, &low, &least, err)))
            st = offer(&low, req, limit, floor, visit, ctx, &n, &stop, err);
        pm_cand_pool_free(&low);
    }
    if (!st && !n) st = none_fits(req, limit, least, err);
    pm_cand_pool_free(&pl);
    return st;
}

pm_status pm_sched_curve(const pm_sched_req *req, const double *limits, int n,
                         pm_search_point *pts, pm_err *err) {
    pm_status st = check_req(req, "curve", err);
    if (st) return st;
    if (n < 1 || !limits) return pm_errf(err, PM_ERR_ARG, "curve needs at least one limit");
    double top = 0;
    for (int k = 0; k < n; k++) {
        if (!(limits[k] > 0) || !isfinite(limits[k]))
            return pm_errf(err, PM_ERR_ARG, "curve: limit %d is %g; limits must be > 0", k,
                           limits[k]);
        top = limits[k] > top ? limits[k] : top;
    }
    pm_cand_pool pl;
    if ((st = pool_all(&pl, req, top, err))) return st;
    if ((st = pm_cand_pool_polish(&pl, -1, req, limits, n, err))) {
        pm_cand_pool_free(&pl);
        return st;
    }
    for (int f = 0; f < PM_PLACE_COUNT; f++)
        for (int k = 0; k < n; k++) {
            int w = pm_cand_pool_best(&pl, f, limits[k]);
            pts[f * n + k] = w < 0 ? (pm_search_point){0} : pl.c[w].pt;
        }
    pm_cand_pool_free(&pl);
    return PM_OK;
}
