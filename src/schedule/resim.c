/* resim.c: the replay that resumes (resim.h): pm_sim_replay's rule, run
 * from a cut and stopped once a change has died out.
 *
 * State: per device a cursor (its next pass), its free time, and whether
 * its last replayed pass ended at another time than before ("unsettled");
 * per pass the place of the pass it waits for (where[], kept as passes
 * move) and the run in which it got new times (stamp[]). A pass may start
 * when the one it waits for sits before its device's cursor. pending counts
 * the passes still to run that wait on a pass with new times.
 *
 *   pm_resim_full  -> replayed (every figure, where[] built)
 *   pm_resim_cut   -> cut (cursors set, where[] of the moved places updated)
 *   pm_resim_run   -> replayed (times), or deadlocked
 *   pm_resim_undo  (after a cut or a run) -> replayed as before the cut
 *
 * Invariants: between runs, start[] and end[] are a full replay's for the
 * schedule as it stands; the log holds each place a run rewrote once, with
 * its times before. */
#include <math.h>
#include <string.h>

#include "resim.h"
#include "sim.h"
#include "sched.h"

enum { WHERE_F, WHERE_B, WHERE_W };

void pm_resim_free(pm_resim *r) {
    if (!r) return;
    pm_sim_free(&r->sim);
    pm_free(r->where);
    pm_free(r->stamp);
    pm_free(r->log_at);
    pm_free(r->log_t);
    pm_free(r->dev);
    pm_free(r->free_at);
    pm_free(r->span_was);
    *r = (pm_resim){0};
}

pm_status pm_resim_init(pm_resim *r, const pm_sched *s, pm_err *err) {
    *r = (pm_resim){0};
    pm_status st = pm_sim_init(&r->sim, s, err);
    if (st) return st;
    size_t n = (size_t)s->p * (size_t)s->cap, np = (size_t)s->p;
    size_t nk = (size_t)s->S * (size_t)s->m;
    r->where = pm_malloc(3 * nk * sizeof *r->where);
    r->stamp = pm_calloc(n, sizeof *r->stamp);
    r->log_at = pm_malloc(n * sizeof *r->log_at);
    r->log_t = pm_malloc(2 * n * sizeof *r->log_t);
    r->dev = pm_calloc(4 * np, sizeof *r->dev);
    r->free_at = pm_calloc(np, sizeof *r->free_at);
    r->span_was = pm_calloc(np, sizeof *r->span_was);
    if (!r->where || !r->stamp || !r->log_at || !r->log_t || !r->dev || !r->free_at ||
        !r->span_was) {
        pm_resim_free(r);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for a resumable replay of %zu passes", n);
    }
    return PM_OK;
}

static int64_t *where_of(const pm_resim *r, const pm_sched *s, int kind, int stage, int mb) {
    int w = kind == PM_PASS_F ? WHERE_F : kind == PM_PASS_W ? WHERE_W : WHERE_B;
    return r->where + ((int64_t)w * s->S + stage) * s->m + mb;
}

/* Records the places of device d's passes lo..hi; 0 if one was already
 * placed elsewhere (a pass twice), when check is set. */
static int place(pm_resim *r, const pm_sched *s, int d, int64_t lo, int64_t hi, int check) {
    const pm_pass *list = pm_sched_dev(s, d);
    for (int64_t k = lo; k <= hi; k++) {
        int64_t *w = where_of(r, s, list[k].kind, list[k].stage, list[k].mb);
        if (check && *w >= 0) return 0;
        *w = (int64_t)d * s->cap + k;
    }
    return 1;
}

pm_status pm_resim_full(pm_resim *r, const pm_sched *s, const pm_cost *c, pm_err *err) {
    if (c->fb_overlap && s->pair)
        return pm_errf(err, PM_ERR_ARG, "a resumable replay runs passes one at a time: drop the "
                       "overlapped pairs");
    pm_status st = pm_sim_replay(&r->sim, s, c, err); /* checks the ranges too */
    if (st) return st;
    for (int64_t i = 0; i < 3 * (int64_t)s->S * s->m; i++) r->where[i] = -1;
    r->ends = 0;
    for (int d = 0; d < s->p; d++) {
        if (!place(r, s, d, 0, s->len[d] - 1, 1))
            return pm_errf(err, PM_ERR_ARG, "a resumable replay needs each pass once: device %d "
                           "repeats one (pm_sched_validate names it)", d);
        const double *end = r->sim.end + (int64_t)d * s->cap;
        for (int64_t k = 0; k < s->len[d]; k++) r->ends += end[k];
    }
    r->nlog = 0;
    return PM_OK;
}

int64_t pm_resim_cut(pm_resim *r, const pm_sched *s, int d, int64_t lo, int64_t hi) {
    double t = r->sim.start[(int64_t)d * s->cap + lo];
    int64_t most = 0, *cursor = r->dev;
    for (int e = 0; e < s->p; e++) { /* the first pass that started at or after t */
        const double *start = r->sim.start + (int64_t)e * s->cap;
        int64_t a = 0, b = s->len[e];
        while (a < b) {
            int64_t mid = a + (b - a) / 2;
            if (start[mid] < t) a = mid + 1;
            else b = mid;
        }
        cursor[e] = a;
        most += s->len[e] - a;
        r->span_was[e] = r->sim.span[e];
    }
    r->d = d, r->lo = lo, r->hi = hi, r->nlog = 0, r->run++;
    r->makespan_was = r->sim.makespan, r->ends_was = r->ends;
    place(r, s, d, lo, hi, 0);
    return most;
}

/* The end of the pass x (on device d) waits for, plus the latency if it
 * ran elsewhere; *w its place. NAN if it has not run yet. */
static double ready(const pm_resim *r, const pm_sched *s, const pm_cost *c, const pm_pass *x,
                    int d, int64_t *w) {
    pm_pass_kind kind;
    int stage = pm_sim_dep(s->S, x->kind, x->stage, &kind);
    *w = -1;
    if (stage < 0) return 0;
    *w = *where_of(r, s, kind, stage, x->mb);
    if (*w < 0 || *w % s->cap >= r->dev[*w / s->cap]) return NAN;
    return r->sim.end[*w] + (pm_sched_stage_device(s, stage) != d ? c->c : 0);
}

/* x (at place at) got new times: the passes that wait on it are to come. */
static void mark(pm_resim *r, const pm_sched *s, const pm_pass *x, int64_t at) {
    int64_t readers[2] = {-1, -1};
    if (x->kind == PM_PASS_F) {
        if (x->stage + 1 < s->S) readers[0] = *where_of(r, s, PM_PASS_F, x->stage + 1, x->mb);
        else readers[0] = *where_of(r, s, PM_PASS_B, x->stage, x->mb);
    } else if (x->kind != PM_PASS_W) {
        if (x->stage > 0) readers[0] = *where_of(r, s, PM_PASS_B, x->stage - 1, x->mb);
        readers[1] = *where_of(r, s, PM_PASS_W, x->stage, x->mb);
    }
    r->stamp[at] = r->run;
    r->pending += (readers[0] >= 0) + (readers[1] >= 0);
}

static void wake(pm_resim *r, int np, int64_t *top, int d) {
    int64_t *stack = r->dev + np, *queued = stack + np;
    if (d < 0 || queued[d]) return;
    queued[d] = 1;
    stack[(*top)++] = d;
}

/* Runs device e's passes while they may start; 1 once the change died
 * out, -1 once the run replayed `most` passes. */
static int advance(pm_resim *r, const pm_sched *s, const pm_cost *c, int e, int64_t *top,
                   int64_t most) {
    int np = s->p;
    int64_t *cursor = r->dev, *unsettled = r->dev + 3 * np, base = (int64_t)e * s->cap;
    const pm_pass *list = pm_sched_dev(s, e);
    double *start = r->sim.start, *end = r->sim.end;
    while (cursor[e] < s->len[e]) {
        if (r->nlog >= most) return -1;
        int64_t k = cursor[e], at = base + k, w;
        const pm_pass *x = &list[k];
        double t = ready(r, s, c, x, e, &w);
        if (isnan(t)) return 0;
        double st = t > r->free_at[e] ? t : r->free_at[e], en = st + pm_cost_time(c, x);
        double st0 = start[at], en0 = end[at];
        r->log_at[r->nlog] = at, r->log_t[2 * r->nlog] = st0, r->log_t[2 * r->nlog + 1] = en0;
        r->nlog++;
        start[at] = st, end[at] = en, r->free_at[e] = en, cursor[e] = k + 1;
        r->ends += en - en0;
        if (w >= 0 && r->stamp[w] == r->run) r->pending--; /* it read a new end */
        int now = en != en0;
        r->unsettled += now - (int)unsettled[e];
        unsettled[e] = now;
        if ((e == r->d && k >= r->lo && k <= r->hi) || st != st0 || en != en0) mark(r, s, x, at);
        wake(r, np, top, pm_sim_woken_device(s, x, e));
        if (!r->pending && !r->unsettled && cursor[r->d] > r->hi) return 1;
    }
    return 0;
}

pm_status pm_resim_run(pm_resim *r, const pm_sched *s, const pm_cost *c, int64_t most,
                       pm_err *err) {
    int np = s->p;
    int64_t *cursor = r->dev, *queued = r->dev + 2 * np, *unsettled = r->dev + 3 * np, top = 0;
    for (int e = 0; e < np; e++) {
        int64_t k0 = cursor[e];
        r->free_at[e] = k0 ? r->sim.end[(int64_t)e * s->cap + k0 - 1] : 0;
        queued[e] = 0, unsettled[e] = 0;
    }
    r->pending = 0, r->unsettled = 0;
    for (int e = np - 1; e >= 0; e--) wake(r, np, &top, e);
    int settled = 0;
    while (top > 0 && !settled) {
        int e = (int)r->dev[np + --top];
        queued[e] = 0;
        settled = advance(r, s, c, e, &top, most);
    }
    r->ran = r->nlog, r->cut_short = settled < 0;
    if (settled < 0) return PM_OK;
    for (int e = 0; e < np && !settled; e++)
        if (cursor[e] < s->len[e])
            return pm_errf(err, PM_ERR_DEADLOCK, "deadlock: device %d is stuck at pass %lld", e,
                           (long long)cursor[e]);
    r->sim.makespan = 0;
    for (int e = 0; e < np; e++) {
        int64_t base = (int64_t)e * s->cap, n = s->len[e];
        r->sim.span[e] = n ? r->sim.end[base + n - 1] - r->sim.start[base] : 0;
        if (r->sim.span[e] > r->sim.makespan) r->sim.makespan = r->sim.span[e];
    }
    return PM_OK;
}

void pm_resim_undo(pm_resim *r, const pm_sched *s) {
    for (int64_t i = 0; i < r->nlog; i++) {
        r->sim.start[r->log_at[i]] = r->log_t[2 * i];
        r->sim.end[r->log_at[i]] = r->log_t[2 * i + 1];
    }
    for (int e = 0; e < s->p; e++) r->sim.span[e] = r->span_was[e];
    r->sim.makespan = r->makespan_was, r->ends = r->ends_was, r->nlog = 0;
    place(r, s, r->d, r->lo, r->hi, 0);
}
