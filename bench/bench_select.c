/* bench_select.c: model selection (issue 10 benchmark (a)): 4 tasks (learning
 * rates 1e-3, 3e-3 x depths 2, 4; dim 128, 4 heads, context 64, batch 8 in
 * 2 microbatches, 20 steps) on D = 2 devices of 14 MiB, a budget that cuts
 * every task into 2 or 4 shards. Each policy runs here, in this process:
 * shard (sharded-LRTF, with and without prefetch), task and sequential.
 * The shard policy runs again with every task's state spilled to files in
 * /tmp (--spill), with and without prefetch, against the same in RAM.
 * Printed per policy: the measured makespan, its ratio to sequential (the
 * peer: plain model parallelism), its ratio to the lower bound
 * max(total pass time / D, longest task) from the same run's pass times,
 * and the dry run's forecast (FLOPs at the rate one block measured before
 * running, pm_select_rate) against the measurement. Every run must end with the same losses (the
 * policies compute the same training); if one does not, or a run fails,
 * the benchmark fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipemem/pm_select.h"

#define NT 4
#define STEPS 20

static void make_tasks(pm_select_task *t) {
    for (int i = 0; i < NT; i++) {
        pm_train_cfg c = {.model = {256, 64, 128, 4, i % 2 ? 4 : 2}, .batch = 8, .micro = 2,
                          .seed = 1};
        pm_optim_defaults(&c.opt, STEPS);
        c.opt.lr = i < 2 ? 1e-3f : 3e-3f;
        t[i] = (pm_select_task){.cfg = c};
        snprintf(t[i].name, sizeof t[i].name, "t%d", i);
    }
}

/* The dry run's forecast: the policy simulated on FLOP-estimated passes. */
static double forecast(const pm_select_task *t, int D, pm_select_policy pol, double rate) {
    int64_t np[NT];
    int *sh[NT];
    double *co[NT];
    for (int i = 0; i < NT; i++) {
        np[i] = (int64_t)STEPS * (2 * t[i].nshard - 1);
        sh[i] = malloc((size_t)np[i] * sizeof(int));
        co[i] = malloc((size_t)np[i] * sizeof(double));
        pm_select_task_passes(&t[i], STEPS, rate, sh[i], co[i]);
    }
    pm_select_work w = {NT, np, (const int *const *)sh, (const double *const *)co};
    pm_select_sim r;
    pm_err e;
    double mk = pm_select_simulate(&w, D, pol, &r, &e) ? NAN : r.makespan;
    pm_select_sim_free(&r);
    for (int i = 0; i < NT; i++) free(sh[i]), free(co[i]);
    return mk;
}

int main(void) {
    pm_err e;
    const char *corpus = "/usr/share/games/fortunes/fortunes";
    char *text = NULL;
    size_t len = 0;
    if (access(corpus, R_OK) || pm_read_file(corpus, PM_CORPUS_MAX, &text, &len, &e)) {
        len = 400000; /* generated text */
        text = malloc(len);
        for (size_t i = 0; i < len; i++) text[i] = "the quick brown fox "[i % 20];
    }
    pm_tokens tok = PM_TOKENS_BYTES(text, len);
    const int D = 2;
    pm_select_task t[NT];
    make_tasks(t);
    pm_select_layout lay;
    if (pm_select_partition(t, NT, (size_t)14 << 20, 2, &lay, &e)) {
        fprintf(stderr, "bench_select: %s\n", e.msg);
        return 1;
    }
    char spill[64];
    snprintf(spill, sizeof spill, "/tmp/bench_select_%d", (int)getpid());
    if (mkdir(spill, 0700)) {
        fprintf(stderr, "bench_select: mkdir %s failed\n", spill);
        return 1;
    }
    struct {
        pm_select_policy pol;
        int prefetch;
        const char *name, *spill;
    } runs[] = {{PM_POLICY_SEQUENTIAL, 0, "sequential", NULL},
                {PM_POLICY_TASK, 0, "task", NULL},
                {PM_POLICY_SHARD, 1, "shard", NULL},
                {PM_POLICY_SHARD, 0, "shard-noprefetch", NULL},
                {PM_POLICY_SHARD, 1, "shard-spill-disk", spill},
                {PM_POLICY_SHARD, 0, "spill-noprefetch", spill}};
    /* the forecasts, made before anything runs */
    enum { NRUN = sizeof runs / sizeof runs[0] };
    double seq = 0, loss0[NT], rate, fc[NRUN];
    if (pm_select_rate(t, NT, &rate, &e)) {
        fprintf(stderr, "bench_select: %s\n", e.msg);
        return 1;
    }
    for (int k = 0; k < NRUN; k++) fc[k] = forecast(t, D, runs[k].pol, rate);
    printf("bench_select: %d tasks (shards", NT);
    for (int i = 0; i < NT; i++) printf(" %d", t[i].nshard);
    printf("), D = %d, 14 MiB devices, %d steps; forecast at %.1f GFLOP/s per device (one "
           "block measured)\n", D, STEPS, rate / 1e9);
    for (int k = 0; k < NRUN; k++) {
        pm_trainer h[NT];
        for (int i = 0; i < NT; i++)
            if (pm_trainer_init(&h[i], &t[i].cfg, &tok, 0, &e)) {
                fprintf(stderr, "bench_select: %s\n", e.msg);
                return 1;
            }
        pm_select_opts o = {.devices = D, .policy = runs[k].pol, .prefetch = runs[k].prefetch,
                            .spill_dir = runs[k].spill};
        pm_select_result res[NT];
        pm_select_stats st;
        if (pm_select_run(t, h, NT, &lay, &o, res, &st, &e)) {
            fprintf(stderr, "bench_select: %s: %s\n", runs[k].name, e.msg);
            return 1;
        }
        double sum = 0, longest = 0;
        for (int i = 0; i < NT; i++) {
            if (res[i].state != PM_SELECT_DONE ||
                (k && memcmp(&res[i].final_loss, &loss0[i], sizeof(double)))) {
                fprintf(stderr, "bench_select: %s: task %d ended differently\n", runs[k].name, i);
                return 1;
            }
            loss0[i] = res[i].final_loss;
            sum += res[i].busy_s, longest = fmax(longest, res[i].busy_s);
            pm_trainer_free(&h[i]);
        }
        double lb = fmax(sum / D, longest), mk = st.makespan_s;
        if (k == 0) seq = mk;
        printf("%-17s makespan %7.3f s  x%.2f faster than sequential  %.3f x the lower bound  "
               "forecast %.3f s (%+.0f%%)\n", runs[k].name, mk, seq / mk, mk / lb,
               fc[k], 100 * (fc[k] / mk - 1));
        pm_select_stats_free(&st);
    }
    for (int i = 0; i < NT; i++) pm_select_task_free(&t[i]);
    free(text);
    rmdir(spill);
    return 0;
}
