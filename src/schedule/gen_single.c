/* gen_single.c: the named schedules with single placement (stage s on device
 * s, S = p): GPipe, 1F1B, ZB-H1 and ZB-H2, exactly as
 * shared/reference/schedules.md defines them.
 *
 * Invariants of every schedule built here: each device r lists F, then the
 * backward of every microbatch 0..m-1 of its own stage r, microbatches in
 * increasing order within each pass kind; GPipe and 1F1B use the fused BW
 * pass, ZB-H1/H2 split it into B and W. The lists are fixed patterns: no
 * costs are consulted, so the same (p, m) always gives the same schedule. */
#include "gen.h"
#include "pipemem/pm_sched.h"
#include "sched.h"

static int min_int(int a, int b) { return a < b ? a : b; }

/* Checks what every single-placement kind needs and allocates the empty
 * schedule. On error *s is zeroed. */
static pm_status single_init(pm_sched *s, const char *kind, const pm_sched_req *req,
                             pm_err *err) {
    *s = (pm_sched){0};
    if (req->v != 0 && req->v != 1)
        return pm_errf(err, PM_ERR_ARG,
                       "%s has 1 chunk per device; v=%d only fits interleaved", kind,
                       req->v);
    return pm_sched_init(s, kind, PM_PLACE_SINGLE, req->p, req->m, 1, err);
}

/* GPipe: every forward, then every fused backward, microbatches in order.
 * Each device holds all m activations at its peak. */
pm_status pm_sched_build_gpipe(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    pm_status st = single_init(s, "gpipe", req, err);
    if (st) return st;
    for (int r = 0; r < s->p; r++) {
        for (int j = 0; j < s->m; j++) pm_sched_push(s, r, PM_PASS_F, r, j);
        for (int j = 0; j < s->m; j++) pm_sched_push(s, r, PM_PASS_BW, r, j);
    }
    return PM_OK;
}

/* 1F1B: rank r warms up with min(p-r-1, m) forwards, then alternates one
 * forward and one fused backward, then drains the remaining backwards. At
 * most p-r forwards are ever outstanding on rank r, hence its peak. */
pm_status pm_sched_build_1f1b(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    pm_status st = single_init(s, "1f1b", req, err);
    if (st) return st;
    int p = s->p, m = s->m;
    for (int r = 0; r < p; r++) {
        int warm = min_int(p - r - 1, m);
        for (int j = 0; j < warm; j++) pm_sched_push(s, r, PM_PASS_F, r, j);
        for (int i = 0; i < m - warm; i++) {
            pm_sched_push(s, r, PM_PASS_F, r, warm + i);
            pm_sched_push(s, r, PM_PASS_BW, r, i);
        }
        for (int i = m - warm; i < m; i++) pm_sched_push(s, r, PM_PASS_BW, r, i);
    }
    return PM_OK;
}

/* The ZB-H family: rank r warms up with min(k(p-r-1), m) forwards; then for
 * each microbatch i: the next forward (while any remain), B of i, and the
 * oldest pending W once i >= k*r; the remaining W close the list. k = 1 is
 * ZB-H1 (rank r holds at most p activations, 1F1B's device-0 peak), k = 2 is
 * ZB-H2 (at most 2p-1, enough warm-up to hide the whole bubble). Deferring
 * W by k*r steps is what lets B run back down the pipeline without waiting
 * for the W of later ranks. */
static void build_zb_h(pm_sched *s, int k) {
    int p = s->p, m = s->m;
    for (int r = 0; r < p; r++) {
        int warm = min_int(k * (p - r - 1), m), nf = 0, nw = 0;
        for (; nf < warm; nf++) pm_sched_push(s, r, PM_PASS_F, r, nf);
        for (int i = 0; i < m; i++) {
            if (nf < m) pm_sched_push(s, r, PM_PASS_F, r, nf++);
            pm_sched_push(s, r, PM_PASS_B, r, i);
            if (i >= k * r) pm_sched_push(s, r, PM_PASS_W, r, nw++);
        }
        for (; nw < m; nw++) pm_sched_push(s, r, PM_PASS_W, r, nw);
    }
}

pm_status pm_sched_build_zb_h1(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    pm_status st = single_init(s, "zb-h1", req, err);
    if (st) return st;
    build_zb_h(s, 1);
    return PM_OK;
}

pm_status pm_sched_build_zb_h2(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    pm_status st = single_init(s, "zb-h2", req, err);
    if (st) return st;
    build_zb_h(s, 2);
    return PM_OK;
}
