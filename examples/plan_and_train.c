/* plan_and_train.c: pipemem as a library: plan a pipeline run under a
 * per-device memory budget, read what every device will hold before
 * anything is allocated, run it, evaluate through the pipeline, save a
 * checkpoint by stage, and load it into a pipeline of another shape.
 *
 *   cc plan_and_train.c $(pkg-config --cflags --libs pipemem) -o plan_and_train
 *
 * The plan searches every schedule family for the fastest whose busiest
 * device fits the budget ("auto"), places the layers and counts each
 * device's bytes by kind. Training runs on 2 device threads on made-up
 * tokens (a repeating sequence the model learns). The checkpoint is then
 * read by a forward-only pipeline of 3 devices (parameters only), which
 * must evaluate to the same losses. Last, the same planner plans the same
 * GPT on another cost model: bf16 on 80 GB GPUs, its bytes and times from
 * formulas (pm_cluster.h), not from this machine. Exit status 0 only if
 * all of that held and the loss fell. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipemem/pm_cluster.h>
#include <pipemem/pm_runtime.h>

enum { P = 2, B = 8, T = 16, STEPS = 8 };

static void tokens(int step, int32_t *inp, int32_t *tgt) {
    for (int i = 0; i < B * T; i++) inp[i] = (i + step) % 7, tgt[i] = (i + step + 1) % 7;
}

static void print_plan(const pm_plan *pl) {
    printf("plan: %s on %d devices, peak activation %.3f M\n", pl->sched.kind, pl->p,
           pm_plan_peak_x(pl, NULL));
    for (int g = 0; g < pl->nd; g++) {
        printf("  device %d: layers", g);
        for (int s = 0; s < pl->S; s++)
            if (pm_sched_stage_device(&pl->sched, s) == g % pl->p)
                printf(" %d-%d", pl->first[s], pl->first[s + 1] - 1);
        printf(":");
        for (int k = 0; k < PM_BYTES_COUNT; k++)
            printf(" %s %zu", pm_bytes_names[k], pl->dev[g].bytes[k]);
        printf(", total %zu bytes\n", pl->dev[g].total);
    }
}

int main(void) {
    pm_err err;
    pm_train_cfg cfg = {.model = {.vocab = 32, .ctx = T, .dim = 32, .heads = 2, .layers = 4},
                        .batch = B, .micro = B, .seed = 1};
    pm_optim_defaults(&cfg.opt, STEPS);
    cfg.opt.lr = 1e-2f;
    /* 1. The plan: nothing large is allocated yet. */
    pm_plan plan;
    pm_plan_req rq = {.p = P, .kind = "auto", .device_mem = 1 << 20};
    if (pm_plan_make(&plan, &cfg, &rq, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    print_plan(&plan);
    /* 2. Run it: every device allocates what the plan says. */
    pm_pipe *pp;
    if (pm_pipe_create(&pp, &plan, NULL, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    int32_t inp[B * T], tgt[B * T];
    double first = 0, last = 0;
    for (int step = 0; step < STEPS; step++) {
        pm_pipe_info in;
        tokens(step, inp, tgt);
        if (pm_pipe_step(pp, inp, tgt, &in, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        printf("step %d  loss %.4f\n", step + 1, in.loss);
        if (!step) first = in.loss;
        last = in.loss;
    }
    /* 3. Evaluate through the pipeline and save by stage. */
    float losses[B], again[B];
    tokens(STEPS, inp, tgt);
    if (pm_pipe_eval(pp, inp, tgt, B, losses, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    char path[] = "/tmp/pipemem_example_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return perror("mkstemp"), 1;
    close(fd);
    pm_ckpt_meta meta = {.cfg = cfg, .step = STEPS};
    if (pm_pipe_save(pp, path, &meta, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    pm_pipe_destroy(pp);
    pm_plan_free(&plan);
    /* 4. Another shape reads it: 3 devices, forward passes only. */
    pm_plan_req rq3 = {.p = 3, .kind = "1f1b", .forward_only = 1};
    if (pm_plan_make(&plan, &cfg, &rq3, &err) || pm_pipe_create(&pp, &plan, NULL, &err) ||
        pm_pipe_load(pp, path, 0, NULL, &err) || pm_pipe_eval(pp, inp, tgt, B, again, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    remove(path);
    int same = !memcmp(losses, again, sizeof losses);
    printf("evaluated on 2 devices: %.6f, reloaded on 3: %.6f (%s)\n", losses[0], again[0],
           same ? "the same bits" : "DIFFERENT");
    pm_pipe_destroy(pp);
    pm_plan_free(&plan);
    /* 5. One planner, another cost model: the same shape on GPUs. */
    pm_gpt_shape shape = {.layers = 4, .hidden = 32, .heads = 2, .seq = T, .vocab = 32};
    pm_cluster gpu = {.devices = P, .mem = 80e9, .tflops = 312};
    pm_plan_model model;
    pm_plan_req rq2 = {.p = P, .m = B / 2, .kind = "1f1b"};
    if (pm_plan_model_gpu(&model, &shape, 2, &gpu, &err) ||
        pm_plan_build(&plan, &model, &rq2, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    print_plan(&plan);
    pm_plan_free(&plan);
    pm_plan_model_free(&model);
    return same && last < first ? 0 : 1;
}
