/* sched_and_train.c: pipemem used as a library, built against an installed
 * copy with pkg-config:
 *
 *   cc sched_and_train.c $(pkg-config --cflags --libs pipemem) -o sched_and_train
 *
 * It generates a V-Half schedule for 2 devices and 4 microbatches, checks and
 * simulates it, then trains a small GPT on it for a few steps on 2 device
 * threads, on made-up tokens (a repeating sequence the model learns), and
 * prints the loss going down. Exit status 0 only if everything worked and
 * the loss fell. */
#include <stdio.h>
#include <stdlib.h>

#include <pipemem/pm_runtime.h>
#include <pipemem/pm_sched.h>

enum { P = 2, M = 4, STEPS = 8 };

int main(void) {
    pm_err err;
    pm_sched s;
    pm_sched_req req = {.p = P, .m = M, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    if (pm_sched_generate(&s, "v-half", &req, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    pm_cost c;
    pm_sim sim;
    if (pm_cost_init_uniform(&c, &s, req.t, req.mem, &err) ||
        pm_sched_validate(&s, &c, 0, &err) || pm_sim_run(&sim, &s, &c, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    printf("pipemem %s: %s p=%d m=%d: makespan %g, bubble %.1f%%, peak %.3f M\n", pm_version(),
           s.kind, s.p, s.m, sim.makespan, 100 * sim.bubble, pm_sim_peak_max_x(&sim));

    pm_train_cfg cfg = {.model = {.vocab = 32, .ctx = 16, .dim = 32, .heads = 2, .layers = 2},
                        .batch = 8, .micro = M, .seed = 1};
    pm_optim_defaults(&cfg.opt, STEPS);
    cfg.opt.lr = 1e-2f;
    pm_plan plan;
    pm_plan_req rq = {.sched = &s};
    pm_pipe *pp;
    if (pm_plan_make(&plan, &cfg, &rq, &err) || pm_pipe_create(&pp, &plan, NULL, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    pm_plan_free(&plan);
    int32_t inp[8 * 16], tgt[8 * 16];
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < 8 * 16; i++) inp[i] = (i + step) % 7, tgt[i] = (i + step + 1) % 7;
        pm_pipe_info in;
        if (pm_pipe_step(pp, inp, tgt, &in, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        printf("step %d  loss %.4f  measured bubble %.3f\n", step + 1, in.loss, in.bubble);
        if (!step) first = in.loss;
        last = in.loss;
    }
    pm_pipe_destroy(pp);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    return last < first ? 0 : 1;
}
