/* sched.c: the schedule and cost data model: allocation, placement lookups,
 * per-stage costs.
 *
 * Invariants: 0 <= len[d] <= cap for every device; cap = 3*m*v is enough for
 * any complete schedule (F, B and W of each of a device's v stages per
 * microbatch), so pushing past it is a bug. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "sched.h"
#include "util/alloc.h"
#include "work.h"

static atomic_llong work; /* pm_sched_work */

void pm_sched_work_add(int64_t n) {
    atomic_fetch_add_explicit(&work, (long long)n, memory_order_relaxed);
}

int64_t pm_sched_work(void) { return (int64_t)atomic_load(&work); }

const char *const pm_pass_names[PM_PASS_COUNT] = {"F", "B", "W", "BW"};
const char *const pm_place_names[PM_PLACE_COUNT] = {"single", "v", "loop"};

pm_status pm_sched_init(pm_sched *s, const char *kind, pm_place place, int p, int m, int v,
                        pm_err *err) {
    *s = (pm_sched){0};
    if (p < 1) return pm_errf(err, PM_ERR_ARG, "p must be at least 1 (got %d)", p);
    if (m < 1) return pm_errf(err, PM_ERR_ARG, "m must be at least 1 (got %d)", m);
    if (v < 1) return pm_errf(err, PM_ERR_ARG, "chunks must be at least 1 (got %d)", v);
    if (place == PM_PLACE_SINGLE && v != 1)
        return pm_errf(err, PM_ERR_ARG, "single placement has 1 chunk per device, not %d", v);
    if (place == PM_PLACE_V && v != 2)
        return pm_errf(err, PM_ERR_ARG, "V placement has 2 chunks per device, not %d", v);
    if ((int64_t)p * v > 1 << 20 || (int64_t)m * v > 1 << 24)
        return pm_errf(err, PM_ERR_ARG, "schedule too large: p=%d m=%d chunks=%d", p, m, v);
    size_t cap = (size_t)3 * (size_t)m * (size_t)v, total;
    if (!pm_size_mul(cap, (size_t)p, &total) || total > ((size_t)1 << 31))
        return pm_errf(err, PM_ERR_ARG, "schedule too large: p=%d m=%d chunks=%d", p, m, v);
    snprintf(s->kind, sizeof s->kind, "%s", kind ? kind : "custom");
    s->place = place;
    s->p = p;
    s->m = m;
    s->v = v;
    s->S = p * v;
    s->cap = (int64_t)cap;
    s->len = pm_calloc((size_t)p, sizeof *s->len);
    s->pass = pm_calloc(total, sizeof *s->pass);
    if (!s->len || !s->pass) {
        pm_sched_free(s);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for a schedule of %zu passes", total);
    }
    return PM_OK;
}

void pm_sched_free(pm_sched *s) {
    if (!s) return;
    pm_free(s->len);
    pm_free(s->pass);
    pm_free(s->pair);
    *s = (pm_sched){0};
}

pm_status pm_sched_copy(pm_sched *dst, const pm_sched *src, pm_err *err) {
    pm_status st = pm_sched_init(dst, src->kind, src->place, src->p, src->m, src->v, err);
    if (st) return st;
    dst->recompute = src->recompute;
    dst->opt_status = src->opt_status;
    dst->opt_bound = src->opt_bound, dst->opt_seconds = src->opt_seconds;
    memcpy(dst->len, src->len, (size_t)src->p * sizeof *src->len);
    memcpy(dst->pass, src->pass, (size_t)src->p * (size_t)src->cap * sizeof *src->pass);
    if (src->pair) {
        if ((st = pm_sched_pairs_init(dst, err))) {
            pm_sched_free(dst);
            return st;
        }
        memcpy(dst->pair, src->pair, (size_t)src->p * (size_t)src->cap);
    }
    return PM_OK;
}

pm_status pm_sched_pairs_init(pm_sched *s, pm_err *err) {
    if (s->pair) return PM_OK;
    s->pair = pm_calloc((size_t)s->p * (size_t)s->cap, 1);
    if (!s->pair) return pm_errf(err, PM_ERR_NOMEM, "out of memory marking overlapped pairs");
    return PM_OK;
}

int pm_sched_paired(const pm_sched *s, int d, int64_t i) {
    if (!s->pair || i + 1 >= s->len[d] || !s->pair[(int64_t)d * s->cap + i]) return 0;
    const pm_pass *x = pm_sched_dev(s, d) + i;
    return x[0].kind == PM_PASS_F && x[1].kind == PM_PASS_BW && x[0].mb != x[1].mb;
}

void pm_sched_push(pm_sched *s, int d, pm_pass_kind kind, int stage, int mb) {
    PM_ASSERT(d >= 0 && d < s->p);
    PM_ASSERT(s->len[d] < s->cap);
    s->pass[(int64_t)d * s->cap + s->len[d]++] = (pm_pass){kind, stage, mb};
}

int pm_sched_stage_device(const pm_sched *s, int stage) {
    switch (s->place) {
    case PM_PLACE_SINGLE: return stage;
    case PM_PLACE_LOOP: return stage % s->p;
    case PM_PLACE_V: return stage < s->p ? stage : 2 * s->p - 1 - stage;
    default: PM_ASSERT(0 && "bad placement"); return -1;
    }
}

int pm_sched_stage_chunk(const pm_sched *s, int stage) {
    switch (s->place) {
    case PM_PLACE_SINGLE: return 0;
    case PM_PLACE_LOOP: return stage / s->p;
    case PM_PLACE_V: return stage < s->p ? 0 : 1;
    default: PM_ASSERT(0 && "bad placement"); return -1;
    }
}

pm_status pm_cost_init(pm_cost *c, int S, pm_err *err) {
    *c = (pm_cost){0};
    if (S < 1) return pm_errf(err, PM_ERR_ARG, "a cost table needs at least one stage");
    c->st = pm_calloc((size_t)S, sizeof *c->st);
    if (!c->st) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d stage costs", S);
    c->S = S;
    return PM_OK;
}

pm_status pm_cost_init_uniform(pm_cost *c, const pm_sched *s, pm_costs t, pm_mem mem,
                               pm_err *err) {
    if (!s) {
        *c = (pm_cost){0};
        return pm_errf(err, PM_ERR_ARG, "the schedule (s) is NULL");
    }
    pm_status st = pm_cost_init(c, s->S, err);
    if (st) return st;
    double k = 1.0 / s->v, keep = s->recompute ? pm_mem_keep(mem) * k : 0;
    c->c = t.c;
    for (int i = 0; i < s->S; i++)
        c->st[i] = (pm_stage_cost){t.f * k, t.b * k, t.w * k, mem.f * k, mem.b * k, mem.w * k,
                                   keep, s->recompute != 0};
    return PM_OK;
}

double pm_mem_keep(pm_mem mem) { return mem.r > 0 ? mem.r : mem.f * PM_KEEP_DEFAULT; }

void pm_cost_free(pm_cost *c) {
    if (!c) return;
    pm_free(c->st);
    *c = (pm_cost){0};
}

double pm_cost_M(const pm_cost *c) {
    double M = 0;
    for (int i = 0; i < c->S; i++) M += c->st[i].mf;
    return M;
}

double pm_cost_time(const pm_cost *c, const pm_pass *ps) {
    const pm_stage_cost *x = &c->st[ps->stage];
    double redo = x->rec ? x->tf : 0;
    switch (ps->kind) {
    case PM_PASS_F: return x->tf;
    case PM_PASS_B: return redo + x->tb;
    case PM_PASS_W: return x->tw;
    default: return redo + x->tb + x->tw;
    }
}

double pm_cost_mem(const pm_cost *c, const pm_pass *ps) {
    const pm_stage_cost *x = &c->st[ps->stage];
    double back = x->rec ? x->mf - x->mr : 0; /* B rebuilds what F dropped */
    switch (ps->kind) {
    case PM_PASS_F: return x->rec ? x->mr : x->mf;
    case PM_PASS_B: return back + x->mb;
    case PM_PASS_W: return x->mw;
    default: return back + x->mb + x->mw;
    }
}

double pm_cost_rise(const pm_cost *c, const pm_pass *ps) {
    const pm_stage_cost *x = &c->st[ps->stage];
    double d = pm_cost_mem(c, ps);
    if (x->rec && ps->kind == PM_PASS_F) return x->mr + x->mf;
    if (x->rec && ps->kind != PM_PASS_W) return x->mf > d ? x->mf : d;
    return d > 0 ? d : 0;
}
