/* sim.h: the full replay's rules (sim.c) that the resumed replay
 * (resim.c) and the constructor's slot-order replay (construct.c) follow
 * too, so that the three agree bit for bit. Private to src/schedule. */
#ifndef PM_SIM_H
#define PM_SIM_H

#include "pipemem/pm_sched.h"

/* The stage of the pass a pass of kind k on stage u waits for, of the same
 * microbatch, and its kind in *dep (PM_PASS_B standing for B or BW): F the
 * previous stage's F, W its own B, B or BW the next stage's B, or its own F
 * on the last of S stages; -1 for none (F of stage 0). */
static inline int pm_sim_dep(int S, pm_pass_kind k, int u, pm_pass_kind *dep) {
    switch (k) {
    case PM_PASS_F: *dep = PM_PASS_F; return u - 1;
    case PM_PASS_W: *dep = PM_PASS_B; return u;
    default: /* B, BW */
        *dep = u == S - 1 ? PM_PASS_F : PM_PASS_B;
        return u == S - 1 ? u : u + 1;
    }
}

/* The device whose next pass may wait on x, which just ran on d; -1 if
 * none other than d. */
int pm_sim_woken_device(const pm_sched *s, const pm_pass *x, int d);

#endif
