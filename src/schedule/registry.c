/* registry.c: the table of named generators and the one entry point that
 * checks a request against a kind before building it.
 *
 * The order of the table is stable (the CLI, `compare` and docs/schedules.md
 * list kinds in it). Every check here produces one line that names the kind, the
 * offending value and what would fit, so the CLI can print it unchanged. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gen.h"
#include "pipemem/pm_sched.h"
#include "sched.h"

/* Smallest m each kind builds a complete, valid schedule for. Every fixed
 * pattern here degrades gracefully to m < p (warm-ups are capped at m, ZB-V
 * drops the passes of the microbatches it pads with), so only interleaved
 * needs more: one full group of p microbatches; and DualPipeV (below). */
static int min_m_any(int p, int v) {
    (void)p;
    (void)v;
    return 1;
}
static int min_m_interleaved(int p, int v) {
    (void)v;
    return p;
}
/* DualPipeV fills both chunks' warm-ups before its steady phase, which
 * needs 2p microbatches (DeepSeek's and PyTorch's own check). */
static int min_m_dualpipev(int p, int v) {
    (void)v;
    return 2 * p;
}

static const pm_sched_kind kinds[] = {
    {"gpipe", "all forwards, then all fused backwards; peak m stage activations",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_gpipe, PM_TIER_FIXED},
    {"1f1b", "one forward one backward (fused BW); peak M on device 0", PM_PLACE_SINGLE,
     min_m_any, pm_sched_build_1f1b, PM_TIER_FIXED},
    {"interleaved", "Megatron interleaved 1F1B, v >= 2 chunks per device, m a multiple of p",
     PM_PLACE_LOOP, min_m_interleaved, pm_sched_build_interleaved, PM_TIER_FIXED},
    {"zb-h1", "zero bubble H1: split B and W, W deferred; 1F1B's peak M", PM_PLACE_SINGLE,
     min_m_any, pm_sched_build_zb_h1, PM_TIER_FIXED},
    {"zb-h2", "zero bubble H2: longer warm-up, no bubble at equal costs; peak (2p-1)M/p",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_zb_h2, PM_TIER_FIXED},
    {"zb-v", "zero bubble V: fixed pattern on the V placement; peak M, no bubble for m >= 2p",
     PM_PLACE_V, min_m_any, pm_sched_build_zb_v, PM_TIER_FIXED},
    {"v-min", "V-Min building block: about M/3 peak", PM_PLACE_V, min_m_any,
     pm_sched_build_v_min, PM_TIER_BLOCK},
    {"v-half", "V-Half building block: about M/2 peak, about half 1F1B's bubble", PM_PLACE_V,
     min_m_any, pm_sched_build_v_half, PM_TIER_BLOCK},
    {"1f1b-v", "1F1B on the V placement with fused BW; about 2/3 of 1F1B's peak", PM_PLACE_V,
     min_m_any, pm_sched_build_1f1b_v, PM_TIER_BLOCK},
    /* searched under a memory limit (gen_zbauto.c, gen_vzb.c, gen_autov.c) */
    {"zb-1p", "Zero Bubble adaptive heuristic, real costs, limit 1.0 M (or mem_limit)",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_zb_1p, PM_TIER_GREEDY},
    {"zb-2p", "Zero Bubble adaptive heuristic, real costs, limit 2.0 M (or mem_limit)",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_zb_2p, PM_TIER_GREEDY},
    {"zb", "Zero Bubble adaptive heuristic under mem_limit (none if 0)",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_zb_auto, PM_TIER_GREEDY},
    {"v-zb", "V-ZB greedy: V placement, real costs, limit 1.0 M (or mem_limit)", PM_PLACE_V,
     min_m_any, pm_sched_build_v_zb, PM_TIER_GREEDY},
    {"dualpipev", "DeepSeek's DualPipeV order (PyTorch's builder), F&B pairs as 2 passes; "
     "m >= 2p", PM_PLACE_V, min_m_dualpipev, pm_sched_build_dualpipev, PM_TIER_FIXED},
    {"auto-v", "adaptive V scheduler: fastest V schedule under mem_limit (required)",
     PM_PLACE_V, min_m_any, pm_sched_build_auto_v, PM_TIER_SEARCH},
    /* exact, small cases only (gen_optimal.c); last, and not in
     * pm_sched_kinds: a solve can take minutes */
    {"optimal", "the optimum by a MILP (CBC), single placement, under mem_limit; small p m",
     PM_PLACE_SINGLE, min_m_any, pm_sched_build_optimal, PM_TIER_SEARCH},
    {"optimal-v", "the optimum by a MILP (CBC), V placement, under mem_limit; small p m",
     PM_PLACE_V, min_m_any, pm_sched_build_optimal_v, PM_TIER_SEARCH},
};

enum { N_EXACT = 2 }; /* the optimal kinds at the end of the table */

const pm_sched_kind *pm_sched_kinds(int *n) {
    if (n) *n = (int)(sizeof kinds / sizeof kinds[0]) - N_EXACT;
    return kinds;
}

const pm_sched_kind *pm_sched_kind_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0) return &kinds[i];
    return NULL;
}

/* Chunks per device the request asks for, 0 meaning the kind's default. */
static pm_status check_chunks(const pm_sched_kind *k, int v, pm_err *err) {
    if (v < 0) return pm_errf(err, PM_ERR_ARG, "v=%d: chunks per device must be at least 1", v);
    if (v == 0) return PM_OK;
    switch (k->place) {
    case PM_PLACE_SINGLE:
        if (v == 1) return PM_OK;
        return pm_errf(err, PM_ERR_ARG, "%s has 1 chunk per device; v=%d only fits %s",
                       k->name, v,
                       v == 2 ? "interleaved or the V kinds (zb-v, v-min, v-half, 1f1b-v, "
                                "dualpipev)"
                              : "interleaved");
    case PM_PLACE_V:
        if (v == 2) return PM_OK;
        return pm_errf(err, PM_ERR_ARG,
                       "%s has 2 chunks per device (V placement); v=%d only fits %s",
                       k->name, v,
                       v == 1 ? "the single-placement kinds (gpipe, 1f1b, zb-h1, zb-h2)"
                              : "interleaved");
    default:
        if (v >= 2) return PM_OK;
        return pm_errf(err, PM_ERR_ARG,
                       "%s needs 2 or more chunks per device (got v=%d); with 1 use 1f1b",
                       k->name, v);
    }
}

pm_status pm_sched_check_range(pm_sched_tier tier, const char *what, int p, int m, int v,
                               pm_err *err) {
    if (p < 1 || p > PM_SCHED_MAX_P)
        return pm_errf(err, PM_ERR_ARG, "%s: p = %d is outside the supported range 1..%d", what,
                       p, PM_SCHED_MAX_P);
    if (m < 1 || m > PM_SCHED_MAX_M)
        return pm_errf(err, PM_ERR_ARG, "%s: m = %d is outside the supported range 1..%d", what,
                       m, PM_SCHED_MAX_M);
    int64_t pm = (int64_t)p * m, passes = 3 * pm * (v > 0 ? v : 1);
    if (passes > PM_SCHED_MAX_PASSES)
        return pm_errf(err, PM_ERR_ARG,
                       "%s: p = %d, m = %d, %d chunks make %lld passes, over the limit %lld; "
                       "lower p or m",
                       what, p, m, v > 0 ? v : 1, (long long)passes,
                       (long long)PM_SCHED_MAX_PASSES);
    int max_p = tier == PM_TIER_BLOCK    ? PM_BLOCK_MAX_P
                : tier == PM_TIER_GREEDY ? PM_GREEDY_MAX_P
                : tier == PM_TIER_SEARCH ? PM_SEARCH_MAX_P
                                         : PM_SCHED_MAX_P;
    int64_t max_pm = tier == PM_TIER_BLOCK    ? PM_BLOCK_MAX_PM
                     : tier == PM_TIER_GREEDY ? PM_GREEDY_MAX_PM
                     : tier == PM_TIER_SEARCH ? PM_SEARCH_MAX_PM
                                              : INT64_MAX;
    if (p > max_p)
        return pm_errf(err, PM_ERR_ARG, "%s supports p <= %d (got p = %d)", what, max_p, p);
    if (pm > max_pm)
        return pm_errf(err, PM_ERR_ARG, "%s supports p * m <= %lld (got %d * %d = %lld)", what,
                       (long long)max_pm, p, m, (long long)pm);
    return PM_OK;
}

pm_status pm_sched_check_costs(const pm_sched_req *req, pm_err *err) {
    const pm_costs *t = &req->t;
    double unit = t->f + t->b + t->w + 2 * t->c;
    double bound = unit * 4 * (double)(req->p > 0 ? req->p : 1) * (req->m > 0 ? req->m : 1);
    if (!(t->f >= 0 && t->b >= 0 && t->w >= 0 && t->c >= 0) || !(bound < 1e300))
        return pm_errf(err, PM_ERR_ARG,
                       "t=%g,%g,%g,%g: a makespan for p=%d m=%d could reach %g, which a "
                       "double cannot hold with margin; give costs whose sum F+B+W+2C is below "
                       "%g",
                       t->f, t->b, t->w, t->c, req->p, req->m, bound,
                       1e300 / (4 * (double)(req->p > 0 ? req->p : 1) * (req->m > 0 ? req->m : 1)));
    return PM_OK;
}

pm_status pm_sched_check_req(const pm_sched_req *req, pm_err *err) {
    if (!req) return pm_errf(err, PM_ERR_ARG, "req is NULL: give a request (p, m, costs)");
    const pm_mem *m = &req->mem;
    if (!isfinite(m->f) || !isfinite(m->b) || !isfinite(m->w) || !isfinite(m->r))
        return pm_errf(err, PM_ERR_ARG, "mem=%g,%g,%g,%g: the memory deltas must be finite "
                       "numbers", m->f, m->b, m->w, m->r);
    /* !(x >= 0) is true of NaN too; a negative limit is no default */
    if (!(req->mem_limit >= 0 && req->mem_limit < 1e300))
        return pm_errf(err, PM_ERR_ARG, "mem_limit is %g: it must be a number from 0 (the "
                       "kind's default, or none) up to 1e300 (x M)", req->mem_limit);
    if (!(req->time_limit >= 0 && isfinite(req->time_limit)))
        return pm_errf(err, PM_ERR_ARG, "time_limit is %g: it must be a finite number of "
                       "seconds from 0 (the default 60) up", req->time_limit);
    return pm_sched_check_costs(req, err);
}

static void list_kinds(char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "", kinds[i].name);
}

void pm_sched_req_recompute(const pm_sched_req *req, int v, pm_sched_req *out) {
    pm_mem m = req->mem.f > 0 ? req->mem : PM_MEM_DEFAULT;
    pm_costs t = req->t.f > 0 ? req->t : PM_COSTS_DEFAULT;
    double keep = pm_mem_keep(m);
    *out = *req;
    out->recompute = 0;
    out->t = (pm_costs){t.f, t.b + t.f, t.w, t.c};
    out->mem = (pm_mem){keep, m.f - keep + m.b, m.w, 0};
    if (req->mem_limit > 0)
        out->mem_limit = (req->mem_limit * req->p * m.f - m.f / v) / (req->p * keep);
}

/* "KIND-r" is KIND with recomputation (1f1b-r, v-half-r, ...). */
const pm_sched_kind *pm_sched_kind_find_r(const char *name, int *rec) {
    const pm_sched_kind *k = pm_sched_kind_find(name);
    size_t n = name ? strlen(name) : 0;
    *rec = 0;
    if (k || n < 3 || n >= 64 || strcmp(name + n - 2, "-r")) return k;
    char base[64];
    memcpy(base, name, n - 2);
    base[n - 2] = 0;
    *rec = 1;
    return pm_sched_kind_find(base);
}

/* Builds kind k with recomputation: the equivalent plain request
 * (pm_sched_req_recompute), then the flag and the "-r" name. */
static pm_status build_recompute(pm_sched *s, const pm_sched_kind *k, const pm_sched_req *req,
                                 int v, pm_err *err) {
    if (!strncmp(k->name, "optimal", 7)) /* the reduction's limit is conservative: not exact */
        return pm_errf(err, PM_ERR_ARG, "%s does not model recomputation", k->name);
    pm_sched_req q;
    pm_sched_req_recompute(req, v, &q);
    if (req->mem_limit > 0 && !(q.mem_limit > 0)) {
        pm_mem m = req->mem.f > 0 ? req->mem : PM_MEM_DEFAULT;
        return pm_errf(err, PM_ERR_MEMLIMIT,
                       "%s-r: mem_limit=%.4g M is below one stage's activation, %.4g M, which "
                       "a recomputing pass holds while it runs",
                       k->name, req->mem_limit, m.f / v / (req->p * m.f));
    }
    pm_status st = k->build(s, &q, err);
    if (st == PM_ERR_MEMLIMIT && !(req->mem_limit > 0))
        return pm_errf(err, st, "%s-r: give mem_limit=X (x M): %s's default limit does not "
                       "fit with recomputation, whose backward holds what its forward "
                       "dropped", k->name, k->name);
    if (st) return st;
    s->recompute = 1;
    char name[sizeof s->kind];
    snprintf(name, sizeof name, "%.29s-r", s->kind);
    memcpy(s->kind, name, sizeof name);
    return PM_OK;
}

pm_status pm_sched_generate(pm_sched *s, const char *kind, const pm_sched_req *req,
                            pm_err *err) {
    *s = (pm_sched){0};
    int rec;
    if (!req) return pm_sched_check_req(req, err);
    const pm_sched_kind *k = pm_sched_kind_find_r(kind, &rec);
    if (!k) {
        char names[256];
        list_kinds(names, sizeof names);
        return pm_errf(err, PM_ERR_ARG,
                       "unknown schedule kind '%s'; known kinds: %s (each also as KIND-r, "
                       "with recomputation)",
                       kind ? kind : "(none)", names);
    }
    if (req->p < 1) return pm_errf(err, PM_ERR_ARG, "p must be at least 1 (got %d)", req->p);
    pm_status st = check_chunks(k, req->v, err);
    if (st) return st;
    int v = req->v ? req->v : (k->place == PM_PLACE_SINGLE ? 1 : 2);
    int min_m = k->min_m(req->p, v);
    if (min_m < 1) min_m = 1;
    if (req->m < min_m)
        return pm_errf(err, PM_ERR_ARG, "%s needs m >= %d for p = %d (got %d)", k->name, min_m,
                       req->p, req->m);
    if (k->place == PM_PLACE_LOOP && req->m % req->p != 0)
        return pm_errf(err, PM_ERR_ARG,
                       "%s needs m to be a multiple of p = %d (got m = %d); try m = %lld or %lld",
                       k->name, req->p, req->m, (long long)req->m / req->p * req->p,
                       ((long long)req->m / req->p + 1) * req->p);
    if ((st = pm_sched_check_range(k->tier, k->name, req->p, req->m, v, err))) return st;
    if ((st = pm_sched_check_req(req, err))) return st;
    if (rec || req->recompute) return build_recompute(s, k, req, v, err);
    return k->build(s, req, err);
}
