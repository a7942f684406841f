/* polish.c: an iterated local search over a schedule's per-device orders.
 *
 * The generators place passes by rules (repeated blocks, greedy rounds).
 * Under tight memory their worst cases are a few passes that sit one or two
 * places from where the next device would start sooner: at p = 2 and 0.75 M
 * the V-ZB greedy loses 2 time units every second microbatch. Moving single
 * passes finds most of that.
 *
 * The climb: a move takes one pass to another position within
 * PM_POLISH_WINDOW places on its own device. A device's memory levels
 * depend on its order alone, so a move that breaks a dependency within the
 * device or rises over the cap is refused before any replay; the others
 * are replayed (resim.h: from the first pass the move can change, until
 * its effect dies out, undone from a log if refused), and kept when the
 * schedule does not deadlock and its simulated score falls: the makespan,
 * then the sum of the devices' spans, then the sum of the passes' end
 * times (the two ties let work drift earlier on devices off the critical
 * one, which is what later lets the makespan fall). First improvement, in
 * rounds over every pass until one keeps nothing.
 *
 * Then the kicks: PM_POLISH_KICK random moves (plausible, whatever they
 * score) and a climb from there, kept when it ends with a better score,
 * else undone. A climb stops in a local optimum that single moves cannot
 * leave; a kick of three can. It ends when `patience` kicks in a row gain
 * nothing, when the makespan meets the lower bound (bound.c: no schedule is
 * faster), or when the budget of simulated passes (those the replays
 * actually ran) is spent. A budget, never seconds, and a fixed seed, so
 * every machine and every MPI rank polishes a schedule the same way. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "polish.h"
#include "resim.h"
#include "sched.h"

#define PM_POLISH_WINDOW 4
#define PM_POLISH_KICK 3         /* random moves per kick */
#define PM_POLISH_KICK_COST 256 /* passes a kick is charged at least (iterate) */

typedef struct {
    double makespan, spans, ends;
} score;

/* The score of the replay in r. */
static score score_of(const pm_resim *r, const pm_sched *s) {
    score x = {r->sim.makespan, 0, r->ends};
    for (int d = 0; d < s->p; d++) x.spans += r->sim.span[d];
    return x;
}

/* a < b by more than rounding, in one component after equal ones */
static int less(double a, double b) { return a < b - 1e-12 * fabs(b); }
static int same(double a, double b) { return !less(a, b) && !less(b, a); }
static int better(const score *a, const score *b) {
    if (!same(a->makespan, b->makespan)) return less(a->makespan, b->makespan);
    if (!same(a->spans, b->spans)) return less(a->spans, b->spans);
    return less(a->ends, b->ends);
}

/* Moves list[i] to position j, shifting what lies between. */
static void move(pm_pass *list, int64_t i, int64_t j) {
    pm_pass x = list[i];
    if (i < j) memmove(list + i, list + i + 1, (size_t)(j - i) * sizeof *list);
    else memmove(list + j + 1, list + j, (size_t)(i - j) * sizeof *list);
    list[j] = x;
}

/* Whether b needs a, both of one microbatch: forwards run up the stages and
 * come before every backward, backwards run down, and a W follows its B. */
static int needs(const pm_pass *a, const pm_pass *b) {
    if (a->kind == PM_PASS_W) return 0;
    if (a->kind == PM_PASS_F) return b->kind != PM_PASS_F || a->stage < b->stage;
    if (b->kind == PM_PASS_F) return 0;
    return b->kind == PM_PASS_W ? a->stage >= b->stage : a->stage > b->stage;
}

/* The state of the search: the schedule, its replay, the cap, and each
 * device's level before each of its passes (it depends on the order alone,
 * so a move's memory is checked without a replay). */
typedef struct {
    pm_sched *s;
    const pm_cost *c;
    pm_resim rs; /* the replay of s as it stands (after an undo, too) */
    double cap;
    double *before; /* (p, cap) like the schedule's passes */
    int64_t n, budget;
    int starved; /* a plausible move went unreplayed: the budget ran out */
    double lb;   /* no schedule's makespan is below it (bound.c) */
    score cur;
} polish_ws;

/* Replays s in full; 0 if it deadlocks or a device exceeds the cap (a
 * move's replay need not check it: plausible() did). */
static int eval_full(polish_ws *w, score *out) {
    pm_err err;
    if (pm_resim_full(&w->rs, w->s, w->c, &err)) return 0;
    for (int d = 0; d < w->s->p; d++)
        if (w->cap > 0 && w->rs.sim.peak[d] > w->cap * (1 + PM_PEAK_TOL)) return 0;
    *out = score_of(&w->rs, w->s);
    return 1;
}

static void levels(polish_ws *w, int d) {
    const pm_pass *list = pm_sched_dev(w->s, d);
    double *before = w->before + (int64_t)d * w->s->cap, lvl = 0;
    for (int64_t k = 0; k < w->s->len[d]; k++) before[k] = lvl, lvl += pm_cost_mem(w->c, &list[k]);
}

/* After list[i] moved to j: 0 if the device's order now breaks a
 * dependency within it or a pass between lo and hi rises over the cap. */
static int plausible(const polish_ws *w, int d, int64_t i, int64_t j) {
    const pm_pass *list = pm_sched_dev(w->s, d), *x = &list[j];
    int64_t lo = i < j ? i : j, hi = i < j ? j : i;
    for (int64_t k = lo; k <= hi; k++)
        if (k != j && list[k].mb == x->mb && (k > j ? needs(&list[k], x) : needs(x, &list[k])))
            return 0;
    if (!(w->cap > 0)) return 1;
    double lvl = w->before[(int64_t)d * w->s->cap + lo], cap = w->cap * (1 + PM_PEAK_TOL);
    for (int64_t k = lo; k <= hi; k++) {
        if (lvl + pm_cost_rise(w->c, &list[k]) > cap) return 0;
        lvl += pm_cost_mem(w->c, &list[k]);
    }
    return 1;
}

/* Replays the schedule after list[i] of device d moved to j, from the
 * first pass the move can change until its effect dies out (resim.h).
 * Charged the passes replayed, and one per device (the cut and the spans
 * visit each). 1 if the move is kept, else it is undone, replay too. */
static int try_move(polish_ws *w, int d, int64_t i, int64_t j) {
    pm_pass *list = pm_sched_dev(w->s, d);
    move(list, i, j);
    if (!plausible(w, d, i, j)) {
        move(list, j, i);
        return 0;
    }
    int64_t most = w->budget - w->s->p;
    if (most < 1) {
        w->starved = 1;
        move(list, j, i);
        return 0;
    }
    pm_resim_cut(&w->rs, w->s, d, i < j ? i : j, i < j ? j : i);
    pm_err err;
    pm_status st = pm_resim_run(&w->rs, w->s, w->c, most, &err);
    w->budget -= w->rs.ran + w->s->p;
    if (!st && w->rs.cut_short) w->starved = 1;
    else if (!st) {
        score sc = score_of(&w->rs, w->s);
        if (better(&sc, &w->cur)) {
            w->cur = sc;
            levels(w, d);
            return 1;
        }
    }
    move(list, j, i);
    pm_resim_undo(&w->rs, w->s);
    return 0;
}

/* Tries the moves of device d's pass i; 1 if one was kept. */
static int try_pass(polish_ws *w, int d, int64_t i) {
    for (int64_t j = i - PM_POLISH_WINDOW; j <= i + PM_POLISH_WINDOW; j++)
        if (j >= 0 && j < w->s->len[d] && j != i && try_move(w, d, i, j)) return 1;
    return 0;
}

/* Climbs: rounds over every pass until one keeps nothing or the budget
 * ends; 1 if the last round kept nothing. */
static int climb(polish_ws *w, pm_polish_stats *ps) {
    int kept = 1;
    while (kept && w->budget > 0) {
        kept = 0;
        for (int d = 0; d < w->s->p; d++)
            for (int64_t i = 0; i < w->s->len[d]; i++) kept += try_pass(w, d, i);
        ps->moves += kept, ps->rounds++;
    }
    return !kept && !w->starved;
}

static uint64_t next_rand(uint64_t *x) { /* xorshift64: the same on every machine */
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* The kick of the iterated search: PM_POLISH_KICK random moves that keep
 * each device's own order and memory plausible, whatever they score. Most
 * random moves are plausible; the bound on tries only ends a schedule
 * with none (every pass pinned by its neighbours or the cap). */
static void kick(polish_ws *w, uint64_t *rng) {
    for (int done = 0, tries = 0; done < PM_POLISH_KICK && tries < 100 * PM_POLISH_KICK; tries++) {
        int d = (int)(next_rand(rng) % (uint64_t)w->s->p);
        int64_t len = w->s->len[d];
        if (len < 2) continue;
        int64_t i = (int64_t)(next_rand(rng) % (uint64_t)len);
        int64_t j = i + (int64_t)(next_rand(rng) % (2 * PM_POLISH_WINDOW + 1)) - PM_POLISH_WINDOW;
        if (j < 0 || j >= len || j == i) continue;
        pm_pass *list = pm_sched_dev(w->s, d);
        move(list, i, j);
        if (plausible(w, d, i, j)) levels(w, d), done++;
        else move(list, j, i);
    }
}

/* Puts back (or saves) every device's order. */
static void copy_orders(pm_pass *dst, const pm_pass *src, const pm_sched *s) {
    memcpy(dst, src, (size_t)s->p * (size_t)s->cap * sizeof *dst);
}

/* After the climb stops on its own: kick, climb again, keep the result if
 * it scores better, else go back; until `patience` kicks in a row gain
 * nothing (0: never), the makespan meets the lower bound or the budget
 * ends. A kick is replayed in full, and going back is another full replay
 * (the climb's replays resume from the state it leaves): each is charged
 * at least PM_POLISH_KICK_COST passes, since undoing a kick rewrites every
 * device's order and levels, which on a small schedule costs more than its
 * replay. Both are charged before the climb, so it never overspends. */
static void iterate(polish_ws *w, pm_pass *best, int patience, pm_polish_stats *ps) {
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    score top = w->cur;
    int64_t cost = w->n > PM_POLISH_KICK_COST ? w->n : PM_POLISH_KICK_COST;
    copy_orders(best, w->s->pass, w->s);
    for (int futile = 0; w->budget >= 2 * cost && less(w->lb, top.makespan);) {
        kick(w, &rng);
        w->budget -= 2 * cost;
        pm_polish_stats quiet = {0};
        if (eval_full(w, &w->cur)) climb(w, &quiet);
        ps->kicks++;
        if (better(&w->cur, &top)) {
            top = w->cur, futile = 0, ps->kicks_kept++, ps->moves += quiet.moves;
            w->budget += cost; /* nothing to go back to */
            copy_orders(best, w->s->pass, w->s);
            continue;
        }
        copy_orders(w->s->pass, best, w->s);
        for (int d = 0; d < w->s->p; d++) levels(w, d);
        int back = eval_full(w, &w->cur); /* the best replayed before: it does again */
        PM_ASSERT(back);
        w->cur = top;
        if (patience && ++futile >= patience) break;
    }
}

pm_status pm_sched_polish(pm_sched *s, const pm_cost *c, const pm_polish_cfg *cfg,
                          pm_polish_stats *stats, pm_err *err) {
    pm_polish_stats ps = {0};
    if (stats) *stats = ps;
    /* a move would break an overlapped pair's adjacency: the marks go */
    pm_free(s->pair);
    s->pair = NULL;
    polish_ws w = {.s = s, .c = c, .cap = cfg->cap, .budget = cfg->budget};
    pm_status st = pm_resim_init(&w.rs, s, err);
    if (st) return st;
    w.before = pm_malloc((size_t)s->p * (size_t)s->cap * sizeof *w.before);
    pm_pass *best = pm_malloc((size_t)s->p * (size_t)s->cap * sizeof *best);
    if (!w.before || !best) {
        pm_free(w.before);
        pm_free(best);
        pm_resim_free(&w.rs);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory polishing a schedule of p=%d", s->p);
    }
    if (eval_full(&w, &w.cur)) { /* else nothing to start from: s stays */
        for (int d = 0; d < s->p; d++) w.n += s->len[d], levels(&w, d);
        w.lb = pm_sched_lower_bound_at(s, c, w.cap);
        ps.converged = climb(&w, &ps);
        if (ps.converged) iterate(&w, best, cfg->patience, &ps);
        ps.optimal = !less(w.lb, w.cur.makespan);
        char kind[sizeof s->kind];
        snprintf(kind, sizeof kind, "%s", s->kind);
        snprintf(s->kind, sizeof s->kind, "%.24s+polish", kind);
    }
    ps.spent = cfg->budget - w.budget;
    pm_free(best);
    pm_free(w.before);
    pm_resim_free(&w.rs);
    if (stats) *stats = ps;
    return PM_OK;
}
