/* gen_v.c: the V-shaped schedules built from building blocks: V-Min, V-Half
 * and 1F1B-V. Each one is a named block (block_named.c: the papers' offsets,
 * W in the free slots in the order their B ran, or for 1F1B-V the chain
 * block of the authors' generator unless, for this m, it would peak above
 * the searched block) fed to the generic constructor (construct.c: repeat,
 * squeeze, move passes under the memory caps); nothing here lists passes by
 * hand. */
#include <string.h>

#include "block_internal.h"
#include "gen.h"

static pm_status build_named(pm_sched *s, const pm_sched_req *req, const char *name,
                             pm_err *err) {
    *s = (pm_sched){0};
    if (req->p < 1) return pm_errf(err, PM_ERR_ARG, "p must be at least 1 (got %d)", req->p);
    if (req->v && req->v != 2)
        return pm_errf(err, PM_ERR_ARG, "%s has 2 chunks per device (V placement), not %d", name,
                       req->v);
    pm_block b;
    pm_status st = strcmp(name, "1f1b-v") == 0
                       ? pm_block_1f1b_v(&b, req->p, req->m,
                                         req->mem.f > 0 ? req->mem : PM_MEM_DEFAULT, err)
                       : pm_block_named(&b, name, req->p, err);
    if (st) return st;
    st = pm_sched_from_block(s, &b, req, name, err);
    pm_block_free(&b);
    return st;
}

pm_status pm_sched_build_v_min(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return build_named(s, req, "v-min", err);
}

pm_status pm_sched_build_v_half(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return build_named(s, req, "v-half", err);
}

pm_status pm_sched_build_1f1b_v(pm_sched *s, const pm_sched_req *req, pm_err *err) {
    return build_named(s, req, "1f1b-v", err);
}
