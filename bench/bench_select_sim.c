/* bench_select_sim.c: the model-selection policies simulated at the paper's
 * scale (issue 10 benchmark (c)): 12 tasks on 8 devices, as in Hydra's
 * GPT-2 sweep, half of them cut into 13 shards (25 shard passes per
 * minibatch) and half into 8 (15 passes), each pass as long as its shard's
 * share of the work (a backward twice a forward, the fused last pass three
 * times), 100 minibatches per task, with pass times varied by +-20% by a
 * fixed generator. Printed per policy: the simulated makespan against the
 * lower bound max(total / D, longest task), and against plain model
 * parallelism (sequential), the peer simulated in the same run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pipemem/pm_select.h"
#include "select/parts.h"

#define NT 12
#define D 8
#define STEPS 100

int main(void) {
    int64_t np[NT];
    int *sh[NT];
    double *co[NT];
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < NT; t++) {
        int S = t % 2 ? 8 : 13, per = 2 * S - 1;
        np[t] = (int64_t)STEPS * per;
        sh[t] = malloc((size_t)np[t] * sizeof(int));
        co[t] = malloc((size_t)np[t] * sizeof(double));
        if (!sh[t] || !co[t]) return 1;
        for (int64_t k = 0; k < np[t]; k++) {
            int j = (int)(k % per), s = j < S ? j : 2 * S - 2 - j;
            double base = j < S - 1 ? 1 : j == S - 1 ? 3 : 2;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            double jitter = 0.8 + 0.4 * (double)(rng >> 11) / 9007199254740992.0;
            sh[t][k] = s;
            co[t][k] = base * jitter / S; /* a shard's share of the model */
        }
    }
    pm_select_work w = {NT,   np,   (const int *const *)sh, (const double *const *)co, NULL, NULL,
                        NULL, NULL, NULL, NULL, NULL, NULL}; /* whole passes: no joining */
    double seq = 0;
    printf("bench_select_sim: %d tasks (25 and 15 shard passes per minibatch), %d devices, "
           "%d minibatches each\n", NT, D, STEPS);
    const pm_select_policy order[] = {PM_POLICY_SEQUENTIAL, PM_POLICY_TASK, PM_POLICY_SHARD};
    for (int i = 0; i < 3; i++) {
        pm_select_sim r;
        pm_err e;
        if (pm_select_simulate(&w, D, order[i], 0, &r, &e)) {
            fprintf(stderr, "bench_select_sim: %s\n", e.msg);
            return 1;
        }
        if (i == 0) seq = r.makespan;
        printf("%-10s makespan %9.2f  %.3f x the lower bound %.2f  x%.2f faster than "
               "sequential\n", pm_select_policy_names[order[i]], r.makespan,
               r.makespan / r.lower_bound, r.lower_bound, seq / r.makespan);
        pm_select_sim_free(&r);
    }
    for (int t = 0; t < NT; t++) free(sh[t]), free(co[t]);
    return 0;
}
