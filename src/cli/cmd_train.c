/* cmd_train.c: `pipemem train`: single-device training of the GPT on a
 * prepared data directory, with progress on stderr, validation loss at
 * intervals, checkpoints (--save, --resume) and a final JSON line. The
 * options (one parser for both modes) are in train_opts.c; pipeline runs
 * (--pp, --schedule, --schedule-file) go to cmd_train_pp.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "train_opts.h"

static void progress(const pm_trainer *t, const pm_step_info *si, double step_s, double left_s,
                     int tty) {
    const pm_train_cfg *c = &t->cfg;
    double tok = (double)c->batch * c->model.ctx / step_s;
    fprintf(stderr, "%sstep %lld/%d  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  ETA %dm%02ds%s",
            tty ? "\r" : "", (long long)t->step, c->opt.steps, si->loss, si->lr,
            si->grad_norm, tok, (int)(left_s / 60), (int)fmod(left_s, 60.0), tty ? "   " : "\n");
}

static int run(const pm_cli_train_opts *o, pm_trainer *t, const pm_tokens *val, double *times,
               int *ntimes, double *final_loss, double *val_loss) {
    pm_err err = {{0}};
    int tty = isatty(2), every = o->steps >= 20 ? o->steps / 20 : 1;
    double spent = 0.0; /* seconds in steps so far, for the ETA */
    *ntimes = 0;
    *final_loss = NAN;
    int64_t last = o->stop_after && o->stop_after < t->cfg.opt.steps ? o->stop_after
                                                                     : t->cfg.opt.steps;
    while (t->step < last) {
        pm_step_info si;
        double t0 = pm_now();
        if (pm_trainer_step(t, &si, &err)) return pm_cli_fail("%s", err.msg);
        double dt = pm_now() - t0;
        times[(*ntimes)++] = dt;
        *final_loss = si.loss;
        spent += dt;
        if (tty || t->step % every == 0 || t->step == t->cfg.opt.steps)
            progress(t, &si, dt, spent / *ntimes * (double)(t->cfg.opt.steps - t->step), tty);
        if (o->eval_every > 0 && t->step % o->eval_every == 0 && t->step < t->cfg.opt.steps) {
            double vl;
            if (pm_trainer_eval(t, val, o->eval_batches, &vl, &err))
                return pm_cli_fail("%s", err.msg);
            fprintf(stderr, "%sstep %lld  val loss %.4f\n", tty ? "\n" : "", (long long)t->step,
                    vl);
            if (o->save && pm_ckpt_save(t, o->save, &err)) return pm_cli_fail("%s", err.msg);
        }
    }
    if (tty) fputc('\n', stderr);
    if (pm_trainer_eval(t, val, o->eval_batches, val_loss, &err))
        return pm_cli_fail("%s", err.msg);
    fprintf(stderr, "step %lld  val loss %.4f\n", (long long)t->step, *val_loss);
    if (o->save) {
        if (pm_ckpt_save(t, o->save, &err)) return pm_cli_fail("%s", err.msg);
        fprintf(stderr, "saved %s (step %lld)\n", o->save, (long long)t->step);
    }
    return 0;
}

int pm_cmd_train(int argc, char **argv) {
    pm_cli_train_opts o;
    int rc = pm_cli_train_parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (pm_cli_train_check_outputs(&o)) return 1;
    if (o.pipeline) return pm_cli_train_pp(&o);
    pm_blas_threads(o.threads);
    pm_tokens tr, va;
    if (pm_cli_train_load(o.data, &tr, &va)) return 1;
    pm_train_cfg cfg;
    pm_cli_train_cfg(&o, &cfg);
    pm_trainer t;
    double *times = NULL;
    rc = 1;
    if (pm_cli_train_start(&o, &cfg, &tr, &va, &t)) goto out_tok;
    fprintf(stderr, "train: %zu parameters, %.1f MiB, %d layers, dim %d, %d heads, ctx %d, "
            "batch %d in %d microbatches, %d threads%s\n", t.n_params,
            (double)pm_train_mem_bytes(&cfg, NULL) / (1 << 20), o.layers, o.dim, o.heads, o.ctx,
            o.batch, o.micro, o.threads, o.resume ? ", resumed" : "");
    times = malloc(((size_t)o.steps + 1) * sizeof *times);
    if (!times) {
        pm_cli_fail("out of memory");
        goto out;
    }
    int n;
    double fl, vl;
    rc = run(&o, &t, &va, times, &n, &fl, &vl);
    if (!rc && o.json) {
        pm_cli_train_json_head(&o, &t, times, n, fl, vl);
        printf("}\n");
    }
out:
    free(times);
    pm_trainer_free(&t);
out_tok:
    pm_tokens_free(&tr);
    pm_tokens_free(&va);
    return rc;
}
