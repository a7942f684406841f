/* cmd_train.c: `pipemem train`: single-device training of the GPT on a
 * prepared data directory, with progress on stderr, validation loss at
 * intervals, checkpoints (--save, --resume) and a final JSON line.
 *
 * Throughput figures come from the median step time (robust to the first,
 * cold step): tokens_per_s = B*T / median, gflops_per_s = the model's
 * counted FLOPs per step (pm_train_step_flops) / median. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pipemem/pm_data.h"
#include "pipemem/pm_gpt.h"
#include "pipemem/pm_train.h"

typedef struct {
    const char *data, *save, *resume;
    int layers, dim, heads, ctx, batch, micro, steps, threads, eval_every, eval_batches;
    int warmup; /* -1: the default steps/10 */
    int stop_after; /* stop after this step as if interrupted (0: run to --steps) */
    int json;
    double lr;
    uint64_t seed;
} train_opts;

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: pipemem train --data DIR [--layers L] [--dim C] [--heads H] [--ctx T]\n"
            "         [--batch B] [--microbatches K] [--steps N] [--lr X] [--warmup N]\n"
            "         [--threads N] [--eval-every N] [--eval-batches N] [--save FILE]\n"
            "         [--resume FILE] [--seed S] [--stop-after N] [--json]\n"
            "  Trains the GPT on DIR/train.bin (made by 'pipemem prepare'); B sequences of T\n"
            "  tokens per step, split into K microbatches whose gradients accumulate.\n"
            "  Defaults: L 4, C 128, H 4, T 64, B 8, K 1, N 100, lr 1e-3, warm-up N/10,\n"
            "  threads = cores, eval every N/5 steps on 4 batches, seed 1.\n"
            "  --save writes the checkpoint at every evaluation and at the end; --resume\n"
            "  with the same options continues bitwise as if never stopped. --stop-after N\n"
            "  ends the run after step N (an interruption on purpose).\n"
            "  example: pipemem train --data data --layers 2 --dim 64 --heads 4 --ctx 32 "
            "--steps 50\n");
}

static int parse(int argc, char **argv, train_opts *o) {
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (train_opts){.layers = 4, .dim = 128, .heads = 4, .ctx = 64, .batch = 8, .micro = 1,
                      .steps = 100, .threads = nproc > 0 ? (int)nproc : 1, .eval_every = -1,
                      .eval_batches = 4, .warmup = -1, .lr = 1e-3, .seed = 1};
    struct {
        const char *name;
        int *dst;
        int lo;
    } ints[] = {{"--layers", &o->layers, 1},     {"--dim", &o->dim, 1},
                {"--heads", &o->heads, 1},       {"--ctx", &o->ctx, 1},
                {"--batch", &o->batch, 1},       {"--microbatches", &o->micro, 1},
                {"--steps", &o->steps, 1},       {"--threads", &o->threads, 1},
                {"--eval-every", &o->eval_every, 0}, {"--eval-batches", &o->eval_batches, 1},
                {"--warmup", &o->warmup, 0},     {"--stop-after", &o->stop_after, 1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t k, nints = sizeof ints / sizeof ints[0];
        for (k = 0; k < nints; k++)
            if (!strcmp(a, ints[k].name)) break;
        if (k < nints) {
            if (pm_cli_int(a, v, ints[k].lo, ints[k].dst)) return 1;
            i++;
        } else if (!strcmp(a, "--lr")) {
            if (pm_cli_double(a, v, &o->lr)) return 1;
            if (o->lr <= 0) return pm_cli_fail("--lr: '%s' must be > 0", v);
            i++;
        } else if (!strcmp(a, "--seed")) {
            int s;
            if (pm_cli_int(a, v, 0, &s)) return 1;
            o->seed = (uint64_t)s;
            i++;
        } else if (!strcmp(a, "--data") || !strcmp(a, "--save") || !strcmp(a, "--resume")) {
            if (!v) return pm_cli_fail("%s needs a value", a);
            *(a[2] == 'd' ? &o->data : a[2] == 's' ? &o->save : &o->resume) = v;
            i++;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            train_usage(stdout);
            return -1;
        } else {
            return pm_cli_fail("train: unknown option '%s' (try 'pipemem train --help')", a);
        }
    }
    if (!o->data) {
        train_usage(stderr);
        return pm_cli_fail("train: --data DIR is required (make it with 'pipemem prepare')");
    }
    if (o->eval_every < 0) o->eval_every = o->steps >= 5 ? o->steps / 5 : o->steps;
    return 0;
}

static int load_split(const char *dir, const char *name, pm_tokens *t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    pm_err err = {{0}};
    if (pm_tokens_read(t, path, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void progress(const pm_trainer *t, const pm_step_info *si, double step_s, double left_s,
                     int tty) {
    const pm_train_cfg *c = &t->cfg;
    double tok = (double)c->batch * c->model.ctx / step_s;
    fprintf(stderr, "%sstep %lld/%d  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  ETA %dm%02ds%s",
            tty ? "\r" : "", (long long)t->step, c->opt.steps, si->loss, si->lr,
            si->grad_norm, tok, (int)(left_s / 60), (int)fmod(left_s, 60.0), tty ? "   " : "\n");
}

static int run(const train_opts *o, pm_trainer *t, const pm_tokens *val, double *times,
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

static void print_json(const train_opts *o, const pm_trainer *t, double *times, int n,
                       double final_loss, double val_loss) {
    double med = 0;
    if (n > 0) {
        qsort(times, (size_t)n, sizeof *times, cmp_double);
        med = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    }
    const pm_train_cfg *c = &t->cfg;
    double tok = med > 0 ? (double)c->batch * c->model.ctx / med : 0;
    double gf = med > 0 ? pm_train_step_flops(c) / med / 1e9 : 0;
    char fl[32];
    if (isfinite(final_loss)) snprintf(fl, sizeof fl, "%.6f", final_loss);
    else snprintf(fl, sizeof fl, "null");
    printf("{\"steps\": %lld, \"steps_run\": %d, \"final_loss\": %s, \"val_loss\": %.6f, "
           "\"median_step_ms\": %.3f, \"tokens_per_s\": %.1f, \"gflops_per_s\": %.2f, "
           "\"params\": %zu, \"threads\": %d, \"batch\": %d, \"microbatches\": %d, "
           "\"ctx\": %d}\n", (long long)t->step, n, fl, val_loss, med * 1e3, tok, gf,
           t->n_params, o->threads, c->batch, c->micro, c->model.ctx);
}

/* Pipeline options hand the whole command to the pipeline runtime. */
static int wants_pipeline(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--pp") || !strcmp(argv[i], "--schedule") ||
            !strcmp(argv[i], "--schedule-file"))
            return 1;
    return 0;
}

int pm_cmd_train(int argc, char **argv) {
    if (wants_pipeline(argc, argv)) return pm_cmd_train_pp(argc, argv);
    train_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    pm_blas_threads(o.threads);
    pm_tokens tr = {0}, va = {0};
    if (load_split(o.data, "train.bin", &tr) || load_split(o.data, "val.bin", &va)) {
        pm_tokens_free(&tr);
        return 1;
    }
    pm_train_cfg cfg = {.model = {PM_TOK_VOCAB, o.ctx, o.dim, o.heads, o.layers},
                        .batch = o.batch, .micro = o.micro, .seed = o.seed};
    pm_optim_defaults(&cfg.opt, o.steps);
    cfg.opt.lr = (float)o.lr;
    if (o.warmup >= 0) cfg.opt.warmup = o.warmup < o.steps ? o.warmup : o.steps;
    pm_err err = {{0}};
    pm_trainer t;
    pm_loader vcheck;
    double *times = NULL;
    rc = 1;
    if (pm_loader_init(&vcheck, &va, o.ctx, 0, "val.bin", &err)) {
        pm_cli_fail("%s/%s", o.data, err.msg);
        goto out_tok;
    }
    if (pm_trainer_init(&t, &cfg, &tr, 0, &err)) {
        pm_cli_fail("%s", err.msg);
        goto out_tok;
    }
    if (o.resume && pm_ckpt_load(&t, o.resume, &err)) {
        pm_cli_fail("%s", err.msg);
        goto out;
    }
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
    if (!rc && o.json) print_json(&o, &t, times, n, fl, vl);
out:
    free(times);
    pm_trainer_free(&t);
out_tok:
    pm_tokens_free(&tr);
    pm_tokens_free(&va);
    return rc;
}
