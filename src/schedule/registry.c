/* registry.c: the table of named generators and the one entry point that
 * checks a request against a kind before building it.
 *
 * The order of the table is stable (the CLI, `compare` and the README list
 * kinds in it). Every check here produces one line that names the kind, the
 * offending value and what would fit, so the CLI can print it unchanged. */
#include <math.h>
#include <string.h>

#include "pipemem/pm_sched.h"

/* Smallest m each kind builds a complete, valid schedule for. Every fixed
 * pattern here degrades gracefully to m < p (warm-ups are capped at m, ZB-V
 * drops the passes of the microbatches it pads with), so only interleaved
 * needs more: one full group of p microbatches. */
static int min_m_any(int p, int v) {
    (void)p;
    (void)v;
    return 1;
}
static int min_m_interleaved(int p, int v) {
    (void)v;
    return p;
}

/* Supported ranges (max p, max S*m), measured on one core so that a
 * request at the edge builds in a few seconds: fixed patterns are linear;
 * the named blocks' constructor searches offsets (p <= 1024); the Zero
 * Bubble heuristic and V-ZB greedy grow about as p^2 m; auto-v builds
 * hundreds of candidates. */
#define LIM_FIXED PM_SCHED_MAX_P, PM_SCHED_MAX_SM
#define LIM_NAMED 1024, ((int64_t)1 << 19)
#define LIM_ZB 1024, ((int64_t)1 << 20)
#define LIM_VZB 512, ((int64_t)1 << 20)
#define LIM_AUTOV PM_SCHED_SEARCH_MAX_P, PM_SCHED_SEARCH_MAX_SM

static const pm_sched_kind kinds[] = {
    {"gpipe", "all forwards, then all fused backwards; peak m stage activations",
     PM_PLACE_SINGLE, LIM_FIXED, min_m_any, pm_sched_build_gpipe},
    {"1f1b", "one forward one backward (fused BW); peak M on device 0", PM_PLACE_SINGLE,
     LIM_FIXED, min_m_any, pm_sched_build_1f1b},
    {"interleaved", "Megatron interleaved 1F1B, v >= 2 chunks per device, m a multiple of p",
     PM_PLACE_LOOP, LIM_FIXED, min_m_interleaved, pm_sched_build_interleaved},
    {"zb-h1", "zero bubble H1: split B and W, W deferred; 1F1B's peak M", PM_PLACE_SINGLE,
     LIM_FIXED, min_m_any, pm_sched_build_zb_h1},
    {"zb-h2", "zero bubble H2: longer warm-up, no bubble at equal costs; peak (2p-1)M/p",
     PM_PLACE_SINGLE, LIM_FIXED, min_m_any, pm_sched_build_zb_h2},
    {"zb-v", "zero bubble V: fixed pattern on the V placement; peak M, no bubble for m >= 2p",
     PM_PLACE_V, LIM_FIXED, min_m_any, pm_sched_build_zb_v},
    {"v-min", "V-Min building block: about M/3 peak", PM_PLACE_V, LIM_NAMED, min_m_any,
     pm_sched_build_v_min},
    {"v-half", "V-Half building block: about M/2 peak, about half 1F1B's bubble", PM_PLACE_V,
     LIM_NAMED, min_m_any, pm_sched_build_v_half},
    {"1f1b-v", "1F1B on the V placement with fused BW; about 2/3 of 1F1B's peak", PM_PLACE_V,
     LIM_NAMED, min_m_any, pm_sched_build_1f1b_v},
    /* searched under a memory limit (gen_zbauto.c, gen_vzb.c, gen_autov.c) */
    {"zb-1p", "Zero Bubble adaptive heuristic, real costs, limit 1.0 M (or --mem-limit)",
     PM_PLACE_SINGLE, LIM_ZB, min_m_any, pm_sched_build_zb_1p},
    {"zb-2p", "Zero Bubble adaptive heuristic, real costs, limit 2.0 M (or --mem-limit)",
     PM_PLACE_SINGLE, LIM_ZB, min_m_any, pm_sched_build_zb_2p},
    {"zb", "Zero Bubble adaptive heuristic under --mem-limit X (none if not given)",
     PM_PLACE_SINGLE, LIM_ZB, min_m_any, pm_sched_build_zb_auto},
    {"v-zb", "V-ZB greedy: V placement, real costs, limit 1.0 M (or --mem-limit)", PM_PLACE_V,
     LIM_VZB, min_m_any, pm_sched_build_v_zb},
    {"auto-v", "adaptive V scheduler: fastest V schedule under --mem-limit X (required)",
     PM_PLACE_V, LIM_AUTOV, min_m_any, pm_sched_build_auto_v},
};

const pm_sched_kind *pm_sched_kinds(int *n) {
    if (n) *n = (int)(sizeof kinds / sizeof kinds[0]);
    return kinds;
}

const pm_sched_kind *pm_sched_kind_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0) return &kinds[i];
    return NULL;
}

pm_status pm_sched_req_check(const pm_sched_req *req, int v, int max_p, int64_t max_sm,
                             const char *what, pm_err *err) {
    if (req->p < 1 || req->m < 1)
        return pm_errf(err, PM_ERR_ARG, "%s needs p >= 1 and m >= 1 (got p=%d m=%d)", what,
                       req->p, req->m);
    int64_t S = (int64_t)req->p * v, sm = S * req->m;
    if (req->p > max_p)
        return pm_errf(err, PM_ERR_ARG, "%s supports p up to %d (got p=%d)", what, max_p, req->p);
    if (sm > max_sm)
        return pm_errf(err, PM_ERR_ARG,
                       "%s supports stages x microbatches up to %lld (got %lld stages x m=%d); "
                       "use m <= %lld", what, (long long)max_sm, (long long)S, req->m,
                       (long long)(max_sm / S > 0 ? max_sm / S : 1));
    const pm_costs *t = &req->t;
    /* Every pass waits at most for all passes before it, each followed by
     * one transfer: this bounds any makespan the simulator can produce. */
    double bound = (double)sm * (t->f + t->b + t->w + 3 * t->c);
    if (!isfinite(t->f) || !isfinite(t->b) || !isfinite(t->w) || !isfinite(t->c) ||
        !isfinite(bound) || bound > 1e300)
        return pm_errf(err, PM_ERR_ARG,
                       "--costs %g,%g,%g,%g: makespans of this schedule (up to %g) cannot be "
                       "represented; give the costs in larger units", t->f, t->b, t->w, t->c,
                       bound);
    return PM_OK;
}

/* Chunks per device the request asks for, 0 meaning the kind's default. */
static pm_status check_chunks(const pm_sched_kind *k, int v, pm_err *err) {
    if (v < 0) return pm_errf(err, PM_ERR_ARG, "--chunks must be at least 1 (got %d)", v);
    if (v == 0) return PM_OK;
    switch (k->place) {
    case PM_PLACE_SINGLE:
        if (v == 1) return PM_OK;
        return pm_errf(err, PM_ERR_ARG, "%s has 1 chunk per device; --chunks %d only fits %s",
                       k->name, v,
                       v == 2 ? "interleaved or the V kinds (zb-v, v-min, v-half, 1f1b-v)"
                              : "interleaved");
    case PM_PLACE_V:
        if (v == 2) return PM_OK;
        return pm_errf(err, PM_ERR_ARG,
                       "%s has 2 chunks per device (V placement); --chunks %d only fits %s",
                       k->name, v,
                       v == 1 ? "the single-placement kinds (gpipe, 1f1b, zb-h1, zb-h2)"
                              : "interleaved");
    default:
        if (v >= 2) return PM_OK;
        return pm_errf(err, PM_ERR_ARG,
                       "%s needs --chunks >= 2 (got %d); with 1 chunk per device use 1f1b",
                       k->name, v);
    }
}

static void list_kinds(char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "", kinds[i].name);
}

pm_status pm_sched_generate(pm_sched *s, const char *kind, const pm_sched_req *req,
                            pm_err *err) {
    *s = (pm_sched){0};
    const pm_sched_kind *k = pm_sched_kind_find(kind);
    if (!k) {
        char names[256];
        list_kinds(names, sizeof names);
        return pm_errf(err, PM_ERR_ARG, "unknown schedule kind '%s'; known kinds: %s",
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
                       "%s needs m to be a multiple of p = %d (got m = %d); try m = %d or %d",
                       k->name, req->p, req->m, req->m / req->p * req->p,
                       (req->m / req->p + 1) * req->p);
    if ((st = pm_sched_req_check(req, v, k->max_p, k->max_sm, k->name, err))) return st;
    return k->build(s, req, err);
}
