/* cmd_train.c: `pipemem train`: single-device training of the GPT on a
 * prepared data directory, with progress on stderr, validation loss at
 * intervals, checkpoints (--save, --resume) and a final JSON line. The loop
 * itself is the library's (pm_train_loop); this file prints its events.
 * The options (one parser for both modes) are in train_opts.c; pipeline
 * runs (--pp, --schedule, --schedule-file) go to cmd_train_pp.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_runtime.h"
#include "train_opts.h"

/* Progress lines, validation lines and the step times of a single-device
 * run, from the library loop's events. */
typedef struct {
    const pm_cli_train_opts *o;
    const pm_trainer *t;
    double *times; /* wall time of each step (s) */
    int n;
    double spent, final_loss, val_loss;
    int tty, every;
    pm_cli_curves curves; /* --curves */
} progress;

static void on_event(void *ctx, const pm_loop_event *ev) {
    progress *pr = ctx;
    const pm_train_cfg *c = &pr->t->cfg;
    pm_cli_train_curves_event(&pr->curves, ev);
    if (ev->kind == PM_LOOP_STEP) {
        pr->times[pr->n++] = ev->seconds;
        pr->spent += ev->seconds;
        pr->final_loss = ev->info.loss;
        if (!(pr->tty || ev->step % pr->every == 0 || ev->step == c->opt.steps)) return;
        double left = pr->spent / pr->n * (double)(c->opt.steps - ev->step);
        double tok = (double)c->batch * c->model.ctx / ev->seconds;
        fprintf(stderr, "%sstep %lld/%d  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  ETA "
                "%dm%02ds%s", pr->tty ? "\r" : "", (long long)ev->step, c->opt.steps,
                ev->info.loss, ev->info.lr, ev->info.grad_norm, tok, (int)(left / 60),
                (int)fmod(left, 60.0), pr->tty ? "   " : "\n");
        return;
    }
    if (ev->kind == PM_LOOP_END && pr->tty) fputc('\n', stderr);
    fprintf(stderr, "%sstep %lld  val loss %.4f\n", ev->kind == PM_LOOP_EVAL && pr->tty ? "\n" : "",
            (long long)ev->step, ev->val_loss);
    pr->val_loss = ev->val_loss;
    if (ev->kind == PM_LOOP_END && ev->saved)
        fprintf(stderr, "saved %s (step %lld)\n", ev->saved, (long long)ev->step);
}

/* Under mpirun a rank stopped by its options still meets the others in the
 * first agreement (the one the ranks that read them fine make once their data
 * is loaded). Exiting at once raced rank 0: mpirun ends the job on the first
 * non-zero exit, sometimes before rank 0's line was out. */
static int stop_together(void) {
    int rank, size;
    pm_err err;
    if (pm_mpi_init(&rank, &size, &err)) return 1;
    pm_cli_agree(1);
    pm_mpi_finalize();
    return 1;
}

/* Under mpirun with several ranks only a pipeline on MPI shares one run:
 * one device, or a whole pipeline of threads, on every rank would train
 * the model once per rank, each writing the same files (the others on MPI
 * waiting for it). 0, or 1 after one line (held back off rank 0). */
static int ranks_share_the_run(const pm_cli_train_opts *o) {
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (!ws || atoi(ws) < 2) return 0;
    if (!o->pipeline)
        return pm_cli_fail("train: one device (no --pp) under mpirun with %s ranks would train "
                           "the model once on every rank, each writing the same files: give "
                           "--pp P and --dp D with P x D = %s ranks, or run without mpirun",
                           ws, ws);
    if (o->transport && !strcmp(o->transport, "threads"))
        return pm_cli_fail("train: --transport threads under mpirun with %s ranks would run the "
                           "whole pipeline on every rank, and the ranks on MPI would wait for "
                           "this one: drop --transport threads, or run without mpirun", ws);
    return 0;
}

int pm_cmd_train(int argc, char **argv) {
    pm_cli_train_opts o;
    /* under mpirun every rank reads the same options, and only rank 0
     * writes the outputs: it alone says what is wrong with them */
    const char *mr = getenv("OMPI_COMM_WORLD_RANK");
    int other = mr && strcmp(mr, "0");
    pm_cli_set_rank(other ? atoi(mr) : -1, other);
    int rc = pm_cli_train_parse(argc, argv, &o);
    if (!rc && !other) rc = pm_cli_train_check_outputs(&o);
    if (!rc) rc = ranks_share_the_run(&o);
    if (rc > 0 && pm_mpi_launched()) rc = stop_together();
    pm_cli_set_rank(-1, 0);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.pipeline) return pm_cli_train_pp(&o);
    pm_blas_threads(o.threads);
    pm_tokens tr, va;
    if (pm_cli_train_data(&o, &tr, &va)) return 1;
    if (pm_cli_train_check_resume(&o, &tr)) {
        pm_tokens_free(&tr), pm_tokens_free(&va);
        return 1;
    }
    pm_train_cfg cfg;
    pm_cli_train_cfg(&o, &tr, &cfg);
    pm_trainer t;
    double *times = NULL;
    rc = 1;
    if (pm_cli_train_start(&o, &cfg, &tr, &va, &t)) goto out_tok;
    fprintf(stderr, "train: %zu parameters, %.1f MiB, %d layers, dim %d, %d heads, ctx %d, "
            "vocab %d, batch %d in %d microbatches, %d threads%s\n", t.n_params,
            (double)pm_train_mem_bytes(&cfg, NULL) / (1 << 20), cfg.model.layers, cfg.model.dim,
            cfg.model.heads, cfg.model.ctx, cfg.model.vocab, cfg.batch, cfg.micro, o.threads,
            o.resume ? ", resumed" : "");
    times = malloc(((size_t)cfg.opt.steps + 1) * sizeof *times);
    pm_train_state st;
    pm_err err = {{0}};
    if (!times || pm_train_state_init(&st, &cfg, &tr, &err)) {
        pm_cli_fail("%s", times ? err.msg : "out of memory");
        goto out;
    }
    /* the loop's state continues where the trainer (resumed or not) is */
    st.step = t.step, st.train.next = t.train.next;
    st.tok_model = t.tok_model, st.tok_model_len = t.tok_model_len;
    progress pr = {.o = &o, .t = &t, .times = times, .final_loss = NAN, .tty = isatty(2),
                   .every = cfg.opt.steps >= 20 ? cfg.opt.steps / 20 : 1};
    pm_train_driver drv = pm_trainer_driver(&t, on_event, &pr);
    pm_loop_opts lo = {.stop_at = pm_cli_train_stop_at(&o, &cfg), .eval_every = o.eval_every,
                       .eval_batches = o.eval_batches, .val = &va, .save = o.save};
    rc = pm_cli_train_curves_init(&o, st.step, cfg.opt.steps, &pr.curves);
    if (!rc) rc = pm_train_loop(&st, &drv, &lo, &err) ? pm_cli_fail("%s", err.msg) : 0;
    if (!rc) rc = pm_cli_train_curves_write(&o, &pr.curves);
    pm_cli_curves_free(&pr.curves);
    if (!rc && o.json) { /* one device's bytes by kind, as the pipeline prints its devices' */
        size_t n = pm_gpt_num_params(&cfg.model) * sizeof(float);
        size_t work = pm_train_mem_bytes(&cfg, NULL) - 4 * n;
        pm_cli_train_json_head(&o, &cfg, st.step, times, pr.n, pr.final_loss, pr.val_loss);
        printf(", \"planned_bytes\": [{\"parameters\": %zu, \"gradients\": %zu, \"moments\": "
               "%zu, \"activations and workspace\": %zu, \"total\": %zu}], \"peak_rss_bytes\": "
               "[%zu]}\n", n, n, 2 * n, work, 4 * n + work, pm_mem_peak_rss());
    }
    pm_train_state_free(&st);
out:
    free(times);
    pm_trainer_free(&t);
out_tok:
    pm_tokens_free(&tr);
    pm_tokens_free(&va);
    return rc;
}
