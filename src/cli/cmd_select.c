/* cmd_select.c: `pipemem select`: model selection with shard parallelism
 * (include/pipemem/pm_select.h). It parses the options into a sweep (comma
 * lists form a cartesian product, ranges are sampled, --tasks FILE gives
 * one task per line) and the session's setup, and calls the library's
 * session: its tasks, their layout for --device-mem, then with --dry-run
 * every task's shards and the forecast makespan of each policy against the
 * lower bound, else the run (resumable, interruptible with Ctrl-C). What is
 * printed and written is select_out.c's. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_select.h"
#include "select_out.h"
#include "select_ranks.h"
#include "train_opts.h"

static const char usage[] =
    "usage: pipemem select --data DIR --devices D --device-mem SIZE [--dry-run]\n"
    "                      [--lr V] [--layers V] [--dim V] [--heads V] [--ctx V]\n"
    "                      [--batch V] [--microbatches V] [--warmup V] [--seed V]\n"
    "                      [--steps V] [--weight-decay V] [--tasks FILE]\n"
    "                      [--sample N [--sample-seed S]]\n"
    "                      [--policy shard|task|sequential] [--prefetch|--no-prefetch]\n"
    "                      [--no-join]\n"
    "                      [--spill ram|DIR]\n"
    "                      [--eval-every N] [--eval-batches N] [--halving ETA]\n"
    "                      [--asha ETA [--asha-min N]]\n"
    "                      [--save-best FILE] [--resume DIR] [--stop-after N]\n"
    "                      [--json] [--csv FILE] [--timeline FILE.svg] [--trace FILE]\n"
    "                      [--curves FILE.svg]\n"
    "\n"
    "Model selection: many GPT configurations (tasks) trained at once, each cut into\n"
    "shards that fit one device's memory, scheduled so every device stays busy with\n"
    "shards of different tasks (Hydra's shard parallelism, with AdamW).\n"
    "  V        a comma-separated list; the lists' cartesian product is the task set\n"
    "           (--lr 1e-3,3e-4 --layers 4,8 is four tasks); or, with --sample, a\n"
    "           range: lo..hi (uniform) or log:lo..hi (log-uniform), integers drawn as\n"
    "           integers (--lr log:1e-4..1e-2 --layers 2..8)\n"
    "  --steps V, --weight-decay V  each task's steps (its cosine spans them) and\n"
    "           AdamW weight decay (default 100 and 0.1), swept like the rest\n"
    "  --sample N  N distinct tasks drawn at random from the lists (a value each,\n"
    "           alike) and ranges, instead of the product; a draw that is no model\n"
    "           (heads not dividing dim) or repeats a task is drawn again\n"
    "  --sample-seed S  the draw's seed (default 1): the same S, the same tasks\n"
    "  --tasks FILE  one task per line as key=value pairs with the same names\n"
    "           (lr=3e-4 layers=8 dim=256 steps=50 weight_decay=0), and name=NAME to\n"
    "           name it (else tN); '#' starts a comment. An option given one value\n"
    "           beside it (--steps 12) is the value of every line that does not set it\n"
    "  Tasks with the same configuration are warned about (they train the same).\n";
static const char usage_more[] = /* (three strings: C keeps one under 4096 bytes) */
    "  SIZE     bytes, with K, M or G (binary) suffixes: 64M\n"
    "  --dry-run     print every task's shards (layers, bytes) and the forecast\n"
    "           makespan of the policies shard, task and sequential against the lower\n"
    "           bound max(total work / D, longest task): each pass's FLOPs at the rate\n"
    "           one device thread reaches on one block, plus moving its shard's state in\n"
    "           and back (from RAM, or --spill DIR's files) and AdamW's update, at rates\n"
    "           measured on this machine first; shard with idle devices joining running\n"
    "           tasks unless --no-join (--json: all of it as one object)\n"
    "  --policy  shard (default: sharded-LRTF), task (a whole task per device) or\n"
    "           sequential (plain model parallelism), for comparison\n"
    "  --prefetch, --no-prefetch  a copy thread per device loads the next shard's\n"
    "           state while the device computes: always, or never (default: when a\n"
    "           core is free of working devices, or for the task that bounds the\n"
    "           makespan; else the copy only takes its time from a device)\n"
    "  --no-join     a device with no ready pass waits. By default (policy shard) it\n"
    "           joins a running task: it takes the step's next pass while the earlier\n"
    "           ones still run and waits per microbatch for its input, so one task's\n"
    "           shards run as a pipeline over several devices (fewer tasks than\n"
    "           devices: the end of a sweep, after halving, one large model); still\n"
    "           bit for bit\n"
    "  --eval-every N, --eval-batches N  evaluate each task every N steps and at its\n"
    "           end on N microbatches (default 4), through its shards as its training\n"
    "           passes go, so idle devices share it; by default every steps/5, but no\n"
    "           more often than keeps evaluation under a tenth of the training (every\n"
    "           10 N / (3 K) steps, K the microbatches: 14 with the defaults; under\n"
    "           --halving every steps/5); 0: only at the end\n"
    "  --halving ETA  successive halving: at each evaluation round the best 1/ETA\n"
    "           of the tasks still running (by validation loss) go on, the rest stop\n"
    "  --asha ETA  asynchronous successive halving (ASHA, Li et al. 2018, as Ray\n"
    "           Tune's): rungs at steps/ETA^k steps (k = 0, 1, ... while at least\n"
    "           --asha-min, default steps/ETA^2), the last --steps; each task is\n"
    "           evaluated at each rung it reaches and goes on at once if it is among the\n"
    "           best floor(m/ETA) of the m tasks that reached that rung so far, else waits\n"
    "           (its device runs others); at most ceil(N_k/ETA) of the N_k tasks that\n"
    "           can reach rung k go on (N_0 all tasks), so of 9 tasks and ETA 3 at most 3\n"
    "           pass the first rung; once no task can still reach a rung, its best\n"
    "           ceil(m/ETA) fill the rest of that and the others there stop\n"
    ;
static const char usage_end[] =
    "  --resume DIR  each task's checkpoint goes to DIR/NAME.ckpt at every evaluation\n"
    "           and at its end (its losses to DIR/NAME.loss, which a resumed task that\n"
    "           runs no further step reports); run again with the same options to\n"
    "           continue a killed sweep from there, bit for bit (--stop-after N: stop\n"
    "           every task after step N, saved, as an interruption on purpose)\n"
    "  --spill DIR  keep every task's state (parameters, gradients, AdamW moments) in\n"
    "           a file in DIR instead of RAM, read and written a shard at a time, so a\n"
    "           sweep can hold more state than memory (default: ram)\n"
    "  --timeline FILE.svg, --trace FILE  the run as measured: one row (track) per\n"
    "           device, each shard pass a box coloured by task, idle time as gaps\n"
    "  --curves FILE.svg  every task's training loss and validation losses against\n"
    "           the step, a colour each, the legend ranked (best first), early stops\n"
    "           crossed\n"
    "  --save-best FILE  the best task's checkpoint (by validation loss), as\n"
    "           `pipemem train --save` would write it (pipemem sample reads it)\n"
    "Every task trains exactly as `pipemem train` alone with its options: the same\n"
    "losses and parameters bit for bit. At the end a table sorted by validation loss\n"
    "(--json: one object on standard output; --csv FILE: the same rows).\n"
    "Options not swept take train's defaults (layers 4, dim 128, heads 4, ctx 64,\n"
    "batch 8, microbatches 1, steps 100, lr 1e-3, warm-up steps/10, weight decay\n"
    "0.1, seed 1).\n";

typedef struct {
    pm_sweep sweep;      /* the tasks: the swept keys, --sample, --tasks */
    pm_select_setup set; /* the session's: devices, policy, evaluation, --resume, ... */
    int dry_run, json, stop_after, sample_seed;
    const char *data, *csv, *save_best, *svg, *trace, *spill, *curves;
    sel_progress pg;     /* the progress lines' state (set.run.report_ctx) */
    pm_cli_curves curves_rec; /* --curves: what the run's events recorded */
} sel_opts;

/* A swept key, --KEY LIST or a range: the option's tag is the key. */
static int parse_key(const pm_cli_opt *d, const char *val, void *dst) {
    pm_err e;
    if (pm_sweep_set(dst, (pm_sweep_key)d->tag, val, d->name, &e)) return pm_cli_fail("%s", e.msg);
    return 0;
}

static int parse_size(const pm_cli_opt *d, const char *val, void *dst) {
    (void)d;
    size_t *out = dst;
    char *end;
    errno = 0;
    double x = val ? strtod(val, &end) : 0;
    if (!val || errno || end == val || !(x > 0)) goto bad;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end || !(x * mul < 1e18)) goto bad;
    *out = (size_t)(x * mul);
    return 0;
bad:
    return pm_cli_fail("--device-mem: '%s' is not a size (bytes, or with K, M, G: 64M)",
                       val ? val : "");
}

static int parse_policy(const pm_cli_opt *d, const char *val, void *dst) {
    (void)d;
    pm_select_policy *out = dst;
    for (int p = 0; val && p < PM_POLICY_COUNT; p++)
        if (!strcmp(val, pm_select_policy_names[p])) {
            *out = (pm_select_policy)p;
            return 0;
        }
    return pm_cli_fail("--policy: '%s' is not shard, task or sequential", val ? val : "");
}

#define F(x) offsetof(sel_opts, x)
#define L(name, k) {name, 'x', 0, 0, F(sweep), parse_key, NULL, k} /* a pm_sweep_key */
#define S(name, field) {name, 's', 0, 0, F(field), NULL, NULL, 0}
#define P(name, role, field) {name, role, 0, 0, F(field), NULL, NULL, 0} /* a path */
static const pm_cli_opt OPTS[] = {
    L("--lr", PM_SWEEP_LR), L("--layers", PM_SWEEP_LAYERS), L("--dim", PM_SWEEP_DIM),
    L("--heads", PM_SWEEP_HEADS), L("--ctx", PM_SWEEP_CTX), L("--batch", PM_SWEEP_BATCH),
    L("--microbatches", PM_SWEEP_MICRO), L("--warmup", PM_SWEEP_WARMUP),
    L("--seed", PM_SWEEP_SEED), L("--steps", PM_SWEEP_STEPS),
    L("--weight-decay", PM_SWEEP_WEIGHT_DECAY),
    {"--dry-run", 'f', 1, 0, F(dry_run), NULL, NULL, 0},
    {"--no-prefetch", 'f', PM_PREFETCH_OFF, 0, F(set.run.prefetch), NULL, NULL, 0},
    {"--prefetch", 'f', PM_PREFETCH_ON, 0, F(set.run.prefetch), NULL, NULL, 0},
    {"--no-join", 'f', 1, 0, F(set.run.no_join), NULL, NULL, 0},
    {"--json", 'f', 1, 0, F(json), NULL, NULL, 0},
    {"--policy", 'x', 0, 0, F(set.run.policy), parse_policy, NULL, 0},
    {"--eval-every", 'i', 0, 0, F(set.run.eval_every), NULL, NULL, 0},
    {"--eval-batches", 'i', 1, 0, F(set.run.eval_batches), NULL, NULL, 0},
    {"--halving", 'i', 2, 0, F(set.run.halving), NULL, NULL, 0},
    {"--asha", 'i', 2, 0, F(set.run.asha), NULL, NULL, 0},
    {"--asha-min", 'i', 1, 0, F(set.asha_min), NULL, NULL, 0},
    {"--stop-after", 'i', 1, 0, F(stop_after), NULL, NULL, 0},
    {"--sample", 'i', 1, PM_SWEEP_MAX_TASKS, F(sweep.sample), NULL, NULL, 0},
    {"--sample-seed", 'i', 0, 0, F(sample_seed), NULL, NULL, 0},
    S("--spill", spill), P("--timeline", 'w', svg), P("--trace", 'w', trace),
    P("--curves", 'w', curves),
    S("--resume", set.run.save_dir), P("--csv", 'w', csv), P("--save-best", 'w', save_best),
    P("--tasks", 'r', sweep.tasks_file), P("--data", 'R', data),
    {"--devices", 'i', 1, 4096, F(set.run.devices), NULL, NULL, 0},
    {"--device-mem", 'x', 0, 0, F(set.device_mem), parse_size, NULL, 0},
};
#undef P
#undef S
#undef L
#undef F

/* Ctrl-C: the run stops after the passes running, and the table so far is
 * printed (a second Ctrl-C kills as usual: the handler is reset). */
static _Atomic int interrupt_flag;
static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&interrupt_flag, 1);
    signal(SIGINT, SIG_DFL);
}

static int parse_args(int argc, char **argv, sel_opts *o) {
    *o = (sel_opts){.set.run = {.prefetch = PM_PREFETCH_AUTO, .eval_every = -1,
                                .eval_batches = 4, .report = sel_on_event,
                                .interrupt = &interrupt_flag},
                    .sample_seed = -1};
    o->set.run.report_ctx = &o->pg;
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], o, NULL};
    int rc = pm_cli_parse("select", argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) fputs(usage, stdout), fputs(usage_more, stdout), fputs(usage_end, stdout);
    if (rc) return rc;
    const pm_select_opts *r = &o->set.run;
    if (!r->devices) return pm_cli_fail("select: --devices D is required");
    if (!o->set.device_mem) return pm_cli_fail("select: --device-mem SIZE is required (e.g. 64M)");
    if (!o->dry_run && !o->data)
        return pm_cli_fail("select: --data DIR is required to train (or --dry-run for the plan)");
    if (o->sample_seed >= 0 && !o->sweep.sample)
        return pm_cli_fail("select: --sample-seed S seeds --sample N; add --sample N");
    if (r->asha && r->halving)
        return pm_cli_fail("select: --asha and --halving are two ways to stop tasks early; "
                           "give one");
    if (o->set.asha_min && !r->asha) return pm_cli_fail("select: --asha-min N needs --asha ETA");
    if (r->halving && r->eval_every == 0)
        return pm_cli_fail("select: --halving ETA stops tasks at evaluation rounds and "
                           "--eval-every 0 leaves none before the end; give --eval-every N or "
                           "drop --halving");
    if (o->spill && !*o->spill) return pm_cli_fail("select: --spill needs ram or a directory");
    const char *out[] = {o->csv ? "--csv" : NULL, o->svg ? "--timeline" : NULL,
                         o->trace ? "--trace" : NULL, o->curves ? "--curves" : NULL,
                         o->save_best ? "--save-best" : NULL};
    for (size_t i = 0; o->dry_run && i < sizeof out / sizeof out[0]; i++)
        if (out[i])
            return pm_cli_fail("select: %s is written by a sweep that runs; --dry-run only "
                               "prints the plan (drop %s)", out[i], out[i]);
    o->sweep.sample_seed = o->sample_seed >= 0 ? (uint64_t)o->sample_seed : 1;
    o->set.run.stop_after = o->stop_after;
    o->set.run.spill_dir = o->spill && strcmp(o->spill, "ram") ? o->spill : NULL;
    return 0;
}

/* One warning line per task whose configuration an earlier task has (the
 * first few, then a count). */
static void warn_repeats(const pm_select_session *s) {
    int shown = 0, more = 0;
    for (int i = 1; i < s->n; i++) {
        int j = pm_select_task_repeats(s->tasks, i);
        if (j < 0) continue;
        if (shown++ < 5)
            fprintf(stderr, "select: warning: task %s has the configuration of task %s (the two "
                    "train the same, bit for bit)\n", s->tasks[i].name, s->tasks[j].name);
        else more++;
    }
    if (more) fprintf(stderr, "select: warning: %d more tasks repeat an earlier one\n", more);
}

/* The data's vocabulary (a tokenizer's, or 256 bytes): every task's, so
 * the partitioner sizes embedding and head right. */
static int data_vocab(const char *dir, int32_t *vocab) {
    char path[4096];
    pm_cli_in_dir(path, sizeof path, dir, "train.bin");
    pm_tokens tr;
    pm_err e = {{0}};
    if (pm_tokens_read(&tr, path, &e)) return pm_cli_fail("%s", e.msg);
    *vocab = (int32_t)tr.vocab;
    pm_tokens_free(&tr);
    return 0;
}

/* --dry-run: the plan, then the forecast (rates measured first). */
static int dry_run(const sel_opts *o, const pm_select_session *s) {
    pm_select_forecast f;
    pm_err e;
    if (!o->json) sel_print_plan(s);
    if (pm_select_session_forecast(s, &f, &e)) return pm_cli_fail("select: %s", e.msg);
    if (o->json) sel_print_dry_json(s, &f);
    else sel_print_policies(s, &f);
    pm_select_forecast_free(&f);
    return 0;
}

/* --save-best: the best-ranked task that did not fail and has a validation
 * loss (a task halving or an interruption stopped keeps its last state). */
static int save_best(const char *path, pm_select_session *s) {
    int i = pm_select_session_best(s);
    pm_err e;
    if (i < 0)
        return pm_cli_fail("select: --save-best %s: no task ended with a validation loss (all "
                           "failed, or none was evaluated); nothing written", path);
    if (pm_select_session_save(s, i, path, &e)) return pm_cli_fail("%s", e.msg);
    fprintf(stderr, "select: wrote %s (task %s, %s, val loss %.4f)\n", path, s->tasks[i].name,
            s->res[i].state == PM_SELECT_DONE ? "done" : "stopped", s->res[i].val_loss);
    return 0;
}

/* What a finished (or interrupted) run prints and writes. */
static int report(const sel_opts *o, pm_select_session *s) {
    FILE *out = o->json ? stderr : stdout;
    int rc = 0, failed = 0;
    sel_print_table(out, s);
    sel_print_summary(out, s);
    if (o->json) sel_print_json(s);
    if (o->csv) rc = sel_write_csv(o->csv, s);
    if (!rc && o->svg) rc = sel_write_timeline(o->svg, s, 0);
    if (!rc && o->trace) rc = sel_write_timeline(o->trace, s, 1);
    if (!rc && o->curves) rc = sel_write_curves(o->curves, s, &o->pg);
    if (!rc && o->save_best) rc = save_best(o->save_best, s);
    for (int i = 0; i < s->n; i++) failed += s->res[i].state == PM_SELECT_FAILED;
    if (!rc && failed == s->n)
        rc = pm_cli_fail("select: %s failed (the table says why)",
                         s->n == 1 ? "the task" : "every task");
    return rc;
}

/* --curves: a curve per task from the step it starts at (resumed: its
 * checkpoint's) to its last, and room for each one's stop reason. */
static int curves_start(sel_opts *o, const pm_select_session *s) {
    int64_t *at = pm_malloc(2 * (size_t)s->n * sizeof *at);
    o->pg.why = pm_calloc((size_t)s->n, sizeof *o->pg.why);
    if (!at || !o->pg.why) {
        pm_free(at);
        return pm_cli_fail("select: out of memory");
    }
    for (int i = 0; i < s->n; i++)
        at[i] = s->hosts[i].step, at[s->n + i] = s->tasks[i].cfg.opt.steps;
    int rc = pm_cli_curves_init(&o->curves_rec, s->n, at, at + s->n);
    pm_free(at);
    if (!rc) o->pg.curves = &o->curves_rec;
    return rc;
}

/* Every task's context against both splits before any trainer exists: a
 * window that does not fit failed its task mid-sweep, at its first step or
 * its first evaluation. */
static int data_fits(const sel_opts *o, const pm_select_session *s, const pm_tokens *tr,
                     const pm_tokens *va) {
    char tn[4096], vn[4096], who[200];
    pm_cli_in_dir(tn, sizeof tn, o->data, "train.bin");
    pm_cli_in_dir(vn, sizeof vn, o->data, "val.bin");
    for (int i = 0; i < s->n; i++) {
        snprintf(who, sizeof who, "select: task %s: ", s->tasks[i].name);
        if (pm_cli_splits_fit(who, tn, vn, s->tasks[i].cfg.model.ctx, tr, va)) return 1;
    }
    return 0;
}

/* The data's splits, each task's context checked against them. */
static int load_data(const sel_opts *o, const pm_select_session *s, pm_tokens *tr,
                     pm_tokens *va) {
    return pm_cli_train_load(o->data, tr, va) || data_fits(o, s, tr, va);
}

/* The data and its tokenizer, every task's trainer (resumed). */
static int start(sel_opts *o, pm_select_session *s, pm_tokens *tr, pm_tokens *va) {
    char *tok = NULL;
    size_t tok_len = 0;
    pm_err e;
    if (load_data(o, s, tr, va) ||
        (tr->tokenizer && pm_cli_read_tokenizer(o->data, tr, &tok, &tok_len)))
        return 1;
    int rc = 0;
    if (pm_select_session_start(s, tr, va, tok, tok_len, &e)) rc = pm_cli_fail("%s", e.msg);
    pm_free(tok);
    return rc;
}

/* The run and the report; across ranks (k), rank 0's alone, and its line
 * if mpirun stops the sweep (a rank lost). */
static int train(sel_opts *o, pm_select_session *s, pm_select_ranks *k) {
    pm_err e;
    int rc = 0, quiet = k && pm_select_ranks_rank(k) != 0; /* rank 0 reports every rank's */
    s->set.run.ranks = k;
    if (s->resumed && !quiet)
        fprintf(stderr, "select: resumed %d of %d tasks from %s\n", s->resumed, s->n,
                o->set.run.save_dir);
    o->pg = (sel_progress){.t = s->tasks, .n = s->n, .devices = o->set.run.devices,
                           .t0 = pm_now()};
    for (int i = 0; i < s->n; i++) o->pg.steps_all += s->tasks[i].cfg.opt.steps - s->hosts[i].step;
    if (o->curves && !quiet && curves_start(o, s)) return 1;
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    if (k) pm_cli_lost_arm_sweep(k, o->set.run.save_dir);
    if (pm_select_session_run(s, &e)) rc = pm_cli_fail("%s", e.msg);
    if (k) pm_cli_lost_disarm();
    sigaction(SIGINT, &old, NULL);
    int stopped = atomic_load(&interrupt_flag);
    if (!rc && stopped && !quiet)
        fprintf(stderr, "select: interrupted; the table so far follows\n");
    if (!rc && !quiet) rc = report(o, s);
    return rc ? rc : stopped ? 130 : 0; /* 128 + SIGINT, as a shell reports it */
}

/* No output onto an input or another output: the data, the tasks file,
 * and with --resume DIR each task's checkpoint and losses there. */
static int outputs_distinct(const sel_opts *o, const pm_select_task *t, int n) {
    const char *resume = o->set.run.save_dir;
    int nres = resume ? 2 * n : 0, rc;
    pm_cli_file *f = pm_calloc((size_t)(9 + nres), sizeof *f);
    char (*names)[4200] = pm_calloc((size_t)(6 + 2 * nres), sizeof *names);
    if (!f || !names) {
        pm_free(f), pm_free(names);
        return pm_cli_fail("select: out of memory");
    }
    static const char *const split[3] = {"train.bin", "val.bin", "tokenizer.model"};
    static const char *const role[3] = {"the training data", "the validation data",
                                        "the tokenizer"};
    f[0] = (pm_cli_file){"--csv", o->csv, 1, 0};
    f[1] = (pm_cli_file){"--timeline", o->svg, 1, 0};
    f[2] = (pm_cli_file){"--trace", o->trace, 1, 0};
    f[3] = (pm_cli_file){"--save-best", o->save_best, 1, 0};
    f[4] = (pm_cli_file){"--curves", o->curves, 1, 0};
    f[5] = (pm_cli_file){"the task list (--tasks)", o->sweep.tasks_file, 0, 0};
    for (int k = 0; k < 3 && o->data; k++) {
        snprintf(names[2 * k], sizeof names[0], "%s (--data %s)", role[k], o->data);
        pm_cli_in_dir(names[2 * k + 1], sizeof names[0], o->data, split[k]);
        f[6 + k] = (pm_cli_file){names[2 * k], names[2 * k + 1], 0, 0};
    }
    for (int i = 0; i < nres; i++) {
        char *what = names[6 + 2 * i], *path = names[7 + 2 * i];
        const char *name = t[i / 2].name;
        snprintf(what, sizeof names[0], "task %s's %s (--resume %s)", name,
                 i % 2 ? "losses" : "checkpoint", resume);
        snprintf(path, sizeof names[0], "%s/%s.%s", resume, name, i % 2 ? "loss" : "ckpt");
        f[9 + i] = (pm_cli_file){what, path, 0, 0};
    }
    rc = pm_cli_files_distinct("select", f, 9 + nres);
    pm_free(f), pm_free(names);
    return rc;
}

/* The outputs: none onto an input or another, each writable. */
static int outputs_ok(const sel_opts *o, const pm_select_session *s) {
    int rc = outputs_distinct(o, s->tasks, s->n);
    if (!rc && o->save_best && pm_cli_out_check(o->save_best)) rc = 1;
    if (!rc && o->csv && pm_cli_out_check(o->csv)) rc = 1;
    if (!rc && o->svg && pm_cli_out_check(o->svg)) rc = 1;
    if (!rc && o->trace && pm_cli_out_check(o->trace)) rc = 1;
    if (!rc && o->curves && pm_cli_out_check(o->curves)) rc = 1;
    return rc;
}

int pm_cmd_select(int argc, char **argv) {
    sel_opts o;
    int rank = sel_ranks_rank(); /* -1: one process */
    if (rank == -2) return 1;
    int rc = parse_args(argc, argv, &o);
    if (rc == 2) return 0;
    if (!rc && rank >= 0 && o.dry_run)
        rc = pm_cli_fail("select: --dry-run forecasts one process's devices; run it without "
                         "mpirun");
    if (!rc && rank >= 0 && o.save_best && !o.set.run.save_dir)
        rc = pm_cli_fail("select: --save-best across ranks copies the best task's checkpoint "
                         "from --resume DIR (its state stays on the rank that ran it); give "
                         "--resume DIR");
    if (rc) return rank >= 0 ? sel_ranks_open(NULL, NULL, NULL, 1, &(pm_select_ranks *){0}) : rc;
    pm_select_session s;
    pm_select_ranks *k = NULL;
    pm_tokens tr = {0}, va = {0};
    pm_err e;
    int32_t vocab = 0;
    pm_status st = pm_select_session_init(&s, &o.sweep, &o.set, &e);
    if (rank <= 0) warn_repeats(&s); /* the tasks made, whatever failed after them */
    if (st) rc = pm_cli_fail("%s", e.msg);
    if (!rc && o.data) rc = data_vocab(o.data, &vocab);
    if (!rc && pm_select_session_partition(&s, vocab, &e)) rc = pm_cli_fail("%s", e.msg);
    if (!rc && o.dry_run) {
        rc = o.data && load_data(&o, &s, &tr, &va);
        if (!rc) rc = dry_run(&o, &s);
    } else if (!rc) {
        if (rank <= 0) rc = outputs_ok(&o, &s); /* rank 0 writes them */
        /* before anything is allocated: the devices' slabs and the tasks'
         * state in RAM against what this machine has available now */
        if (!rc && pm_select_session_fits(&s, (double)pm_mem_available(), &e))
            rc = pm_cli_fail("select: %s", e.msg);
        if (!rc) rc = start(&o, &s, &tr, &va);
    }
    if (rank >= 0) rc = sel_ranks_open(rc ? NULL : &s, &tr, &va, rc, &k); /* every rank's */
    if (!rc && !o.dry_run) rc = train(&o, &s, k);
    pm_select_session_free(&s);
    pm_select_ranks_free(k);
    pm_tokens_free(&tr), pm_tokens_free(&va);
    pm_cli_curves_free(&o.curves_rec);
    pm_free(o.pg.why);
    return rc;
}
