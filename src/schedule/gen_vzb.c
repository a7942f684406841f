/* gen_vzb.c: V-ZB, the greedy V-placement scheduler with real costs under a
 * memory limit (kind v-zb; default limit 1.0 M, 1F1B's).
 *
 * Device i holds stage i and stage 2p-1-i. We name the two directions work
 * flows in "lanes": lane 0 flows down the devices (F of stage i, B of stage
 * 2p-1-i), lane 1 flows back up (F of stage 2p-1-i, B of stage i).
 *
 * The greedy (our C restatement of the Controllable Memory paper's V-ZB):
 *   warm-up: F lane 0 of microbatch 0 everywhere; then, from the last device
 *     back, extra lane-0 forwards on devices 0..i while memory allows and
 *     they finish before the lane-1 forward comes back to device i; then
 *     lane-1 forwards fill devices i..p-1 alternately with lane 0 until each
 *     device has caught up with the one before it.
 *   steady, 2m rounds: every device runs one B (lane 1 if its input is
 *     ready, else lane 0; lane-1 devices go first, from the bottom up) and
 *     then one F (lane 1 if its input is ready, else lane 0). Before each,
 *     pending W (in the order their B ran) fill the wait for the input, and
 *     free memory when the next pass would not fit.
 *   end: every remaining W.
 * Variants: whether a W may overrun the wait before an F / before a lane-0
 * B when the gap exceeds the bubble budget; under 1F1B's memory, whether
 * the warm-up's memory reservation (2 + 2i forwards on device i, sized for
 * M) is scaled down to the limit; and a second pass that feeds each
 * device's measured bubble back as its budget ("approved bubble"), repeated
 * while it helps. Below 1F1B's memory a second, event-driven greedy with
 * per-lane caps on the forwards in flight runs too (the list variant, see
 * below). The shortest makespan wins.
 *
 * Invariants: a pass is placed only after its dependency (the lists are a
 * topological order: no deadlock) and no device's running memory exceeds
 * the limit; a variant that would break either is dropped. Times follow the
 * simulator's rule, so makespans compared here are the simulated ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "gen.h"
#include "sched.h"

enum { CF = 0, CB = 1, CW = 2 };

typedef struct {
    pm_sched *s;
    int p, m;
    double t[3], dm[3]; /* time and memory delta of one chunk pass */
    double c, cap;      /* latency; absolute memory limit per device */
    int fill_f, fill_b; /* variant flags */
    double share;       /* warm-up reservation scale: 1, or the limit's share of M */
    const double *approved; /* (p) bubble budget from a previous pass, or NULL */
    double max_approved;
    int *cnt;           /* (p, 4) F lane 0, F lane 1, B lane 0, B lane 1 placed */
    double *cur, *first, *mem, *bub; /* (p) free time, first start, memory, idle */
    double *tf, *tb;    /* (2, p, m) end of F / B per lane, NAN until placed */
    int *wq;            /* (p, 2m) pending W as lane*m+mb, FIFO */
    int *wh, *wt;       /* (p) head and tail of each queue */
    double maxbub;      /* max of bub[] (bubbles only grow) */
    int bad;
    int hit;            /* the limit decided something (a larger one might not) */
} vzb_state;

/* x <= cap, remembering when the limit said no. */
static int fits(vzb_state *g, double x) {
    if (x <= g->cap) return 1;
    g->hit = 1;
    return 0;
}

static double *tfp(vzb_state *g, int lane, int d, int mb) {
    return &g->tf[((size_t)lane * g->p + d) * g->m + mb];
}
static double *tbp(vzb_state *g, int lane, int d, int mb) {
    return &g->tb[((size_t)lane * g->p + d) * g->m + mb];
}
static int *count(vzb_state *g, int d, int cat, int lane) { return &g->cnt[d * 4 + cat * 2 + lane]; }

static int stage_of(const vzb_state *g, int cat, int lane, int d) {
    int low = (cat == CF) == (lane == 0); /* F lane 0 and B lane 1 are stage d */
    return low ? d : 2 * g->p - 1 - d;
}

static double max_stage_bubble(const vzb_state *g, int d) {
    double mx = g->maxbub;
    if (d >= 0 && g->approved) {
        double a = g->max_approved - g->approved[d];
        mx = a > mx ? a : mx;
    }
    return mx;
}

/* Time the input of (cat, lane) microbatch mb on device d arrives, c
 * included for another device; 0 if it has no cross-device input; NAN if
 * the input has not been placed. Local inputs are checked too. */
static double input_at(vzb_state *g, int cat, int lane, int d, int mb) {
    int p = g->p;
    if (cat == CF) {
        if (lane == 1 && isnan(*tfp(g, 0, d, mb))) return NAN;
        if (lane == 0) return d == 0 ? 0 : *tfp(g, 0, d - 1, mb) + g->c;
        return d == p - 1 ? 0 : *tfp(g, 1, d + 1, mb) + g->c;
    }
    if (lane == 0) {
        if (isnan(*tfp(g, 1, d, mb))) return NAN;
        return d == 0 ? 0 : *tbp(g, 0, d - 1, mb) + g->c;
    }
    if (isnan(*tbp(g, 0, d, mb))) return NAN;
    return d == p - 1 ? 0 : *tbp(g, 1, d + 1, mb) + g->c;
}

static void place(vzb_state *g, int cat, int lane, int d, int mb, double ready) {
    if (isnan(ready) || !fits(g, g->mem[d] + g->dm[cat])) {
        g->bad = 1;
        return;
    }
    double start = ready > g->cur[d] ? ready : g->cur[d];
    if (g->s->len[d] == 0) g->first[d] = start;
    if (*count(g, d, CF, 0) > 0) {
        g->bub[d] += start - g->cur[d];
        if (g->bub[d] > g->maxbub) g->maxbub = g->bub[d];
    }
    g->cur[d] = start + g->t[cat];
    g->mem[d] += g->dm[cat];
    pm_pass_kind k = cat == CF ? PM_PASS_F : cat == CB ? PM_PASS_B : PM_PASS_W;
    pm_sched_push(g->s, d, k, stage_of(g, cat == CW ? CB : cat, lane, d), mb);
}

static void put(vzb_state *g, int cat, int lane, int d) {
    if (g->bad) return;
    int *k = count(g, d, cat, lane), mb = *k;
    if (mb >= g->m) {
        g->bad = 1;
        return;
    }
    place(g, cat, lane, d, mb, input_at(g, cat, lane, d, mb));
    if (g->bad) return;
    double end = g->cur[d];
    if (cat == CF) *tfp(g, lane, d, mb) = end;
    else {
        *tbp(g, lane, d, mb) = end;
        g->wq[(size_t)d * 2 * g->m + g->wt[d]++] = lane * g->m + mb;
    }
    (*k)++;
}

static int pending(const vzb_state *g, int d) { return g->wh[d] < g->wt[d]; }

static void put_w(vzb_state *g, int d) {
    if (g->bad) return;
    if (!pending(g, d)) {
        g->bad = 1;
        return;
    }
    int x = g->wq[(size_t)d * 2 * g->m + g->wh[d]++];
    place(g, CW, x / g->m, d, x % g->m, 0);
}

/* Fills the wait for an input arriving at `ready` with pending W; `more`
 * allows one W that overruns the wait when the gap beats the budget. */
static void fill(vzb_state *g, int d, double ready, int more) {
    if (isnan(ready)) return;
    while (!g->bad && pending(g, d) && ready >= g->cur[d] + g->t[CW]) put_w(g, d);
    if (!g->bad && pending(g, d) && ready - g->cur[d] > max_stage_bubble(g, d) - g->bub[d] &&
        more)
        put_w(g, d);
}

static void warmup(vzb_state *g) {
    int p = g->p, m = g->m;
    for (int i = 0; i < p; i++) put(g, CF, 0, i);
    for (int i = p - 1; i >= 0 && !g->bad; i--) {
        if (i < p - 1) {
            double back = *tfp(g, 1, i + 1, 0) + g->c;
            while (!g->bad && fits(g, g->mem[i] + g->dm[CF] * ceil((2 + 2 * i) * g->share)) &&
                   g->cur[i] + g->t[CF] <= back && *count(g, i, CF, 0) < m - i &&
                   *count(g, 0, CF, 0) < m)
                for (int j = 0; j <= i; j++) put(g, CF, 0, j);
        }
        put(g, CF, 1, i);
    }
    int lane = 0;
    for (int i = 1; i < p && !g->bad; i++) {
        int idle = 0;
        while (!g->bad && idle < 2 &&
               (*count(g, i, CF, 0) + *count(g, i, CF, 1) <
                    *count(g, i - 1, CF, 0) + *count(g, i - 1, CF, 1) ||
                (*count(g, i, CF, 1) <= *count(g, i - 1, CF, 1) &&
                 *count(g, i - 1, CF, 1) < m))) {
            int put_any = 0;
            /* down the V for lane 0, back up for lane 1, so inputs come
             * first; a device whose input or memory is not there waits */
            for (int k = i; k < p; k++) {
                int j = lane ? p - 1 - (k - i) : k, mb = *count(g, j, CF, lane);
                if (mb < m && !isnan(input_at(g, CF, lane, j, mb)) &&
                    fits(g, g->mem[j] + g->dm[CF]))
                    put(g, CF, lane, j), put_any = 1;
            }
            idle = put_any ? 0 : idle + 1;
            lane = 1 - lane;
        }
    }
}

/* Whether the next (cat, lane) pass of device d exists and its input has
 * been placed. */
static int ready(vzb_state *g, int cat, int lane, int d) {
    int mb = *count(g, d, cat, lane);
    return mb < g->m && !isnan(input_at(g, cat, lane, d, mb));
}

/* Runs pending W until a pass of delta dm fits; 0 if it cannot. */
static int make_room(vzb_state *g, int d, double dm) {
    while (!g->bad && !fits(g, g->mem[d] + dm) && pending(g, d)) put_w(g, d);
    return !g->bad && fits(g, g->mem[d] + dm);
}

/* Lane of the next B of device i: lane 1 once its input can come (or lane
 * 0 is exhausted), else lane 0. */
static int b_lane(vzb_state *g, int i) {
    int b0 = *count(g, i, CB, 0), b1 = *count(g, i, CB, 1);
    return b1 < b0 && (i == g->p - 1 || b0 >= g->m || !isnan(*tbp(g, 1, i + 1, b1)));
}

/* One B per device: lane-1 devices from the bottom up first, then lane-0
 * devices from the top; a device whose B has no input yet skips the
 * round. Returns the number of B placed. */
static int steady_b(vzb_state *g, int *order) {
    int p = g->p, n = 0, placed = 0;
    for (int i = p - 1; i >= 0; i--)
        if (b_lane(g, i)) order[n++] = i * 2 + 1;
    for (int i = 0; i < p; i++)
        if (!b_lane(g, i)) order[n++] = i * 2;
    for (int k = 0; k < n && !g->bad; k++) {
        int i = order[k] / 2, lane = order[k] % 2;
        if (!ready(g, CB, lane, i)) lane = 1 - lane;
        if (!ready(g, CB, lane, i) || !make_room(g, i, g->dm[CB])) continue;
        int remote = lane ? i < p - 1 : i > 0;
        if (remote)
            fill(g, i, input_at(g, CB, lane, i, *count(g, i, CB, lane)), lane == 1 || g->fill_b);
        put(g, CB, lane, i);
        placed++;
    }
    return placed;
}

/* One F per device: lane 1 if its input is there, else lane 0; a device
 * with no input or no memory to spare skips the round. */
static int steady_f(vzb_state *g) {
    int p = g->p, m = g->m, placed = 0;
    for (int i = 0; i < p && !g->bad; i++) {
        int f0 = *count(g, i, CF, 0), f1 = *count(g, i, CF, 1), lane = -1;
        if (f1 >= m) continue;
        if (f1 >= f0) lane = 0;
        else if (i == p - 1 || !isnan(*tfp(g, 1, i + 1, f1))) lane = 1;
        else if (f0 < m && (i == 0 || !isnan(*tfp(g, 0, i - 1, f0)))) lane = 0;
        if (lane < 0 || !ready(g, CF, lane, i) || !make_room(g, i, g->dm[CF])) continue;
        int remote = lane ? i < p - 1 : i > 0;
        if (remote) fill(g, i, input_at(g, CF, lane, i, *count(g, i, CF, lane)), g->fill_f);
        put(g, CF, lane, i);
        placed++;
    }
    return placed;
}

static void reset(vzb_state *g) {
    int p = g->p;
    size_t nk = 2 * (size_t)p * (size_t)g->m;
    for (int d = 0; d < p; d++) g->s->len[d] = 0;
    memset(g->cnt, 0, 4 * (size_t)p * sizeof *g->cnt);
    memset(g->wh, 0, (size_t)p * sizeof *g->wh);
    memset(g->wt, 0, (size_t)p * sizeof *g->wt);
    for (int d = 0; d < p; d++) g->cur[d] = g->first[d] = g->mem[d] = g->bub[d] = 0;
    for (size_t k = 0; k < nk; k++) g->tf[k] = g->tb[k] = NAN;
    g->bad = 0;
    g->maxbub = 0;
}

/* One greedy pass; returns its makespan or INFINITY if dropped. */
static double run_once(vzb_state *g, int *order) {
    reset(g);
    warmup(g);
    /* rounds until every B ran; one without progress means stuck */
    for (int left = 1; left && !g->bad;) {
        if (steady_b(g, order) + steady_f(g) == 0) g->bad = 1;
        left = 0;
        for (int d = 0; d < g->p; d++)
            left |= *count(g, d, CB, 0) < g->m || *count(g, d, CB, 1) < g->m;
    }
    for (int d = 0; d < g->p && !g->bad; d++)
        while (!g->bad && pending(g, d)) put_w(g, d);
    if (g->bad) return INFINITY;
    for (int d = 0; d < g->p; d++)
        if (g->s->len[d] != 6 * g->m) return INFINITY;
    double mk = 0;
    for (int d = 0; d < g->p; d++) mk = g->cur[d] - g->first[d] > mk ? g->cur[d] - g->first[d] : mk;
    return mk;
}

typedef struct {
    vzb_state g;
    pm_sched work;
    double *appr; /* (p) approved bubble of the previous pass */
    int *order;   /* (p) B order scratch */
} vzb_ctx;

static void ctx_free(vzb_ctx *x) {
    vzb_state *g = &x->g;
    pm_free(g->cnt), pm_free(g->cur), pm_free(g->first), pm_free(g->mem), pm_free(g->bub);
    pm_free(g->tf), pm_free(g->tb), pm_free(g->wq), pm_free(g->wh), pm_free(g->wt);
    pm_free(x->appr), pm_free(x->order);
    pm_sched_free(&x->work);
}

static pm_status ctx_init(vzb_ctx *x, const pm_sched_req *req, double limit, pm_err *err) {
    *x = (vzb_ctx){0};
    int p = req->p, m = req->m;
    pm_status st = pm_sched_init(&x->work, "v-zb", PM_PLACE_V, p, m, 2, err);
    if (st) return st;
    vzb_state *g = &x->g;
    double M = p * req->mem.f;
    *g = (vzb_state){.s = &x->work, .p = p, .m = m, .c = req->t.c,
                     .t = {req->t.f / 2, req->t.b / 2, req->t.w / 2},
                     .dm = {req->mem.f / 2, req->mem.b / 2, req->mem.w / 2},
                     .cap = limit * M * (1 + PM_PEAK_TOL)};
    size_t np = (size_t)p, nk = 2 * np * (size_t)m;
    g->cnt = pm_malloc(4 * np * sizeof *g->cnt);
    g->cur = pm_malloc(np * sizeof(double)), g->first = pm_malloc(np * sizeof(double));
    g->mem = pm_malloc(np * sizeof(double)), g->bub = pm_malloc(np * sizeof(double));
    g->tf = pm_malloc(nk * sizeof(double)), g->tb = pm_malloc(nk * sizeof(double));
    g->wq = pm_malloc(nk * sizeof *g->wq);
    g->wh = pm_malloc(np * sizeof *g->wh), g->wt = pm_malloc(np * sizeof *g->wt);
    x->appr = pm_malloc(np * sizeof(double)), x->order = pm_malloc(np * sizeof(int));
    if (!g->cnt || !g->cur || !g->first || !g->mem || !g->bub || !g->tf || !g->tb || !g->wq ||
        !g->wh || !g->wt || !x->appr || !x->order) {
        ctx_free(x);
        return pm_errf(err, PM_ERR_NOMEM, "v-zb: out of memory for p=%d m=%d", p, m);
    }
    return PM_OK;
}

static void keep(pm_sched *best, const pm_sched *w) {
    memcpy(best->len, w->len, (size_t)w->p * sizeof *w->len);
    memcpy(best->pass, w->pass, (size_t)w->p * (size_t)w->cap * sizeof *w->pass);
}

/* ---- The list variant: an event-driven greedy for limits below 1F1B's.
 *
 * The round-based greedy above reserves warm-up memory as a uniform share
 * of 1F1B's and so loses most of its speed below 1.0 M. This variant
 * instead caps, per device, the forwards in flight of each lane (F placed
 * minus W placed), splitting the device's chunk budget between its two
 * stages in proportion to their lifespans (stage i's activation waits for
 * 2(2p-1-i) passes down and back, stage 2p-1-i's for 2i, plus `own`).
 * Then, globally, the pass that can start earliest is placed (a tournament
 * tree over the devices' next starts; ties by a fixed order of the four
 * kinds, B first or lane 1's F first); a
 * device that would idle runs its oldest pending W instead when the W fits
 * in the gap (or always, when `eager_w`), and an F whose lane is full runs
 * that lane's oldest W to free its slot. W waits otherwise, holding
 * memory: the deferral the lane caps leave room for. Nine variants (tie
 * order, own, eager_w, wfree); the shortest makespan joins the round-based
 * ones'. At p = 8, m = 24 and the measured costs it takes auto-v's bubble
 * from 30.5% to 26.4% at 0.5 M, 17.1% to 14.8% at 0.75 M and 15.3% to
 * 11.9% at 0.875 M (1.0 M, where the round-based greedy wins, is 5.6%).
 *
 * No deadlock: each lane's passes run in microbatch order on a device and
 * every cap is >= 1, so the oldest unfinished microbatch's next pass is
 * either a B, a W (always runnable), or an F whose lane slot is held only
 * by older microbatches whose W is pending. A variant that still gets stuck
 * (other memory deltas) or breaks the limit is dropped. */

typedef struct {
    int *cap0, *cap1; /* (p) in-flight caps per lane */
    int *fly;         /* (p, 2) in flight per lane */
    double *when;     /* (p) cached start of the device's next action */
    int *act;         /* (p) cached action: cat*2+lane, 6 = W, -1 none */
    int *tree;        /* (2 n) tournament over devices by `when`; n a power of 2 */
    int n;
    int order;        /* tie order (list_pick's table): B before F, lane 0
                       * first (0), lane 1 first (1), F lane 1 first (2), or
                       * lane 1's F and B, then lane 0's F and B (3) */
    int eager_w;      /* a W fills any idle gap, not only one it fits */
    int wfree;        /* 1: a full lane's F frees its slot with a W now;
                       * 2: only when nothing else can start sooner */
} list_opt;

/* Position in device d's W queue of its oldest pending W of B lane, or -1
 * (B lane 0 is the stage of F lane 1 and vice versa). */
static int lane_w(const vzb_state *g, int d, int lane) {
    const int *q = g->wq + (size_t)d * 2 * g->m;
    for (int k = g->wh[d]; k < g->wt[d]; k++)
        if (q[k] / g->m == lane) return k;
    return -1;
}

/* The device's best next action and its start time: cat*2+lane, 6 the
 * oldest W, 7+lane the oldest W of that B lane; -1 none. */
static int list_pick(vzb_state *g, list_opt *o, int d, double *at) {
    int best = -1;
    double bt = INFINITY, bkey = INFINITY;
    static const int order[4][4] = {{CB * 2 + 0, CB * 2 + 1, CF * 2 + 0, CF * 2 + 1},
                                    {CB * 2 + 1, CB * 2 + 0, CF * 2 + 1, CF * 2 + 0},
                                    {CF * 2 + 1, CB * 2 + 1, CB * 2 + 0, CF * 2 + 0},
                                    {CF * 2 + 1, CB * 2 + 1, CF * 2 + 0, CB * 2 + 0}};
    for (int k = 0; k < 4; k++) {
        int a = order[o->order][k], cat = a / 2, lane = a % 2;
        int mb = *count(g, d, cat, lane);
        if (mb >= g->m) continue;
        double r = input_at(g, cat, lane, d, mb);
        if (isnan(r)) continue;
        double st = r > g->cur[d] ? r : g->cur[d];
        if (cat == CF) {
            int cap = lane ? o->cap1[d] : o->cap0[d];
            /* a full lane frees its slot with that lane's oldest W */
            if (o->fly[d * 2 + lane] >= cap) {
                if (o->wfree && lane_w(g, d, 1 - lane) >= 0 && g->cur[d] < bt)
                    bt = g->cur[d], best = 8 - lane, bkey = o->wfree > 1 ? INFINITY : bt;
                continue;
            }
            if (!(g->mem[d] + g->dm[CF] <= g->cap)) continue;
        }
        if (best < 0 || st < bkey) bkey = bt = st, best = a;
    }
    if (pending(g, d) && g->mem[d] + g->dm[CW] <= g->cap &&
        (best < 0 || (bt > g->cur[d] && (o->eager_w || bt >= g->cur[d] + g->t[CW]))))
        best = 6, bt = g->cur[d];
    *at = bt;
    return best;
}

static int earlier(const list_opt *o, int a, int b) {
    if (a < 0 || o->act[a] < 0) return b;
    if (b < 0 || o->act[b] < 0) return a;
    return o->when[b] < o->when[a] ? b : a;
}

static void list_refresh(vzb_state *g, list_opt *o, int d) {
    if (d < 0 || d >= g->p) return;
    o->act[d] = list_pick(g, o, d, &o->when[d]);
    for (int k = (o->n + d) / 2; k >= 1; k /= 2)
        o->tree[k] = earlier(o, o->tree[2 * k], o->tree[2 * k + 1]);
}

static double list_once(vzb_state *g, list_opt *o) {
    int p = g->p;
    reset(g);
    memset(o->fly, 0, 2 * (size_t)p * sizeof *o->fly);
    for (int k = 0; k < 2 * o->n; k++) o->tree[k] = k >= o->n && k - o->n < p ? k - o->n : -1;
    for (int d = 0; d < p; d++) o->act[d] = -1; /* a refresh reads its siblings' */
    for (int d = 0; d < p; d++) list_refresh(g, o, d);
    for (size_t left = 6 * (size_t)p * (size_t)g->m; left > 0 && !g->bad; left--) {
        int d = o->tree[1];
        if (d < 0 || o->act[d] < 0) {
            g->bad = 1;
            break;
        }
        int a = o->act[d];
        if (a >= 6) {
            int *q = g->wq + (size_t)d * 2 * g->m;
            if (a > 6) /* bring that lane's oldest W to the head, keeping order */
                for (int k = lane_w(g, d, a - 7); k > g->wh[d]; k--) {
                    int t = q[k];
                    q[k] = q[k - 1], q[k - 1] = t;
                }
            int x = q[g->wh[d]];
            put_w(g, d);
            o->fly[d * 2 + 1 - x / g->m]--; /* B lane 0 is F lane 1's stage */
        } else {
            put(g, a / 2, a % 2, d);
            if (a / 2 == CF) o->fly[d * 2 + a % 2]++;
        }
        /* a pass feeds only its own device and the two next to it */
        for (int i = d - 1; i <= d + 1; i++) list_refresh(g, o, i);
    }
    if (g->bad) return INFINITY;
    double mk = 0;
    for (int d = 0; d < p; d++) {
        if (g->s->len[d] != 6 * g->m) return INFINITY;
        mk = g->cur[d] - g->first[d] > mk ? g->cur[d] - g->first[d] : mk;
    }
    return mk;
}

/* Lane caps per device: `chunks` in flight split by lifespan, where each
 * lane's lifespan counts `own` extra passes (its own B and W and their
 * waits; a larger own evens the split out). */
static void list_caps(list_opt *o, int p, int m, int chunks, int own) {
    for (int d = 0; d < p; d++) {
        double l0 = 2.0 * (2 * p - 1 - d) + own, l1 = 2.0 * d + own;
        int c0 = (int)floor(chunks * l0 / (l0 + l1) + 0.5);
        if (c0 > chunks - 1) c0 = chunks - 1;
        if (c0 < 1) c0 = 1;
        int c1 = chunks - c0;
        o->cap0[d] = c0 < m ? c0 : m, o->cap1[d] = c1 < m ? c1 : m;
    }
}

/* Runs the list variants into best (*bestmk) when the limit is below 1F1B's. */
static pm_status list_variants(vzb_ctx *x, pm_sched *best, double *bestmk, pm_err *err) {
    vzb_state *g = &x->g;
    int p = g->p;
    double unit = g->dm[CF];
    if (!(unit > 0)) return PM_OK;
    int chunks = (int)floor(g->cap / unit + 1e-9);
    if (chunks < 2 || chunks >= 2 * p) return PM_OK;
    list_opt o = {0};
    o.cap0 = pm_malloc((size_t)p * sizeof *o.cap0), o.cap1 = pm_malloc((size_t)p * sizeof *o.cap1);
    o.fly = pm_malloc(2 * (size_t)p * sizeof *o.fly), o.act = pm_malloc((size_t)p * sizeof *o.act);
    o.when = pm_malloc((size_t)p * sizeof *o.when);
    for (o.n = 1; o.n < p; o.n *= 2) {}
    o.tree = pm_malloc(2 * (size_t)o.n * sizeof *o.tree);
    pm_status st = PM_OK;
    if (!o.cap0 || !o.cap1 || !o.fly || !o.act || !o.when || !o.tree)
        st = pm_errf(err, PM_ERR_NOMEM, "v-zb: out of memory for p=%d", p);
    /* {order, eager_w, wfree, own = p/2 << k}: the eight of 16 that came
     * closest to the best of all 16 (within 0.6% summed) at p = 8, 16, 32,
     * m = 3p, 0.5..0.875 M with the measured costs, and matched it at unit
     * costs for p = 4..8, m = 3p; 16 would cost twice the time. The ninth
     * runs a lane's backward after the forwards (order 3): the proven
     * optima at p = 8, m = 16, unit costs keep the first stages'
     * activations waiting while forwards stream in; it took 0.875 M there
     * from 52.5 to 51.5 (the optimum is 50.5) */
    static const int var[9][4] = {{1, 0, 1, 0}, {1, 1, 1, 0}, {1, 0, 1, 1}, {1, 0, 2, 1},
                                  {2, 0, 1, 0}, {2, 0, 2, 0}, {2, 0, 1, 1}, {2, 0, 2, 1},
                                  {3, 0, 1, 1}};
    for (int v = 0; v < (int)(sizeof var / sizeof var[0]) && !st; v++) {
        o.order = var[v][0], o.eager_w = var[v][1], o.wfree = var[v][2];
        list_caps(&o, p, g->m, chunks, (p << var[v][3]) / 2);
        double mk = list_once(g, &o);
        g->hit = 1;
        if (mk < *bestmk) *bestmk = mk, keep(best, &x->work);
    }
    pm_free(o.cap0), pm_free(o.cap1), pm_free(o.fly), pm_free(o.act), pm_free(o.when), pm_free(o.tree);
    return st;
}

pm_status pm_sched_vzb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                              const char *kind, int *binding, pm_err *err) {
    *s = (pm_sched){0};
    pm_status st = pm_sched_check_range(PM_TIER_GREEDY, kind, req->p, req->m, 2, err);
    if (st) return st;
    vzb_ctx x;
    st = ctx_init(&x, req, limit, err);
    if (st) return st;
    if ((st = pm_sched_init(s, kind, PM_PLACE_V, req->p, req->m, 2, err))) {
        ctx_free(&x);
        return st;
    }
    double best = INFINITY;
    /* under 1F1B's memory the warm-up reservation can also be scaled down */
    double M = req->p * req->mem.f, share = x.g.cap / M < 1 ? x.g.cap / M : 1;
    for (int v = 0; v < (share < 1 ? 8 : 4); v++) {
        vzb_state *g = &x.g;
        g->fill_b = v & 1, g->fill_f = (v >> 1) & 1, g->approved = NULL;
        g->share = v >> 2 ? share : 1;
        for (int it = 0; it < 3; it++) {
            double mk = run_once(g, x.order);
            if (mk < best) best = mk, keep(s, &x.work);
            if (isinf(mk)) break;
            double mx = max_stage_bubble(g, -1);
            if (g->approved && !(mx < g->max_approved)) break;
            memcpy(x.appr, g->bub, (size_t)g->p * sizeof(double));
            g->approved = x.appr, g->max_approved = mx;
        }
    }
    st = list_variants(&x, s, &best, err);
    if (binding) *binding = x.g.hit;
    ctx_free(&x);
    if (st) {
        pm_sched_free(s);
        return st;
    }
    if (isinf(best)) {
        pm_sched_free(s);
        return pm_errf(err, PM_ERR_MEMLIMIT,
                       "%s: the V greedy finds no schedule under mem_limit=%.4g M for p=%d "
                       "m=%d; try a larger limit (1.0 always works for m >= 2p)",
                       kind, limit, req->p, req->m);
    }
    return PM_OK;
}

pm_status pm_sched_build_v_zb(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 2)
        return pm_errf(err, PM_ERR_ARG,
                       "v-zb has 2 chunks per device (V placement); v=%d only fits "
                       "interleaved", req->v);
    return pm_sched_vzb_greedy(s, req, req->mem_limit > 0 ? req->mem_limit : 1.0, "v-zb", NULL,
                               err);
}
