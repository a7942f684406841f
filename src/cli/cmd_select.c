/* cmd_select.c: `pipemem select`: model selection with shard parallelism
 * (include/pipemem/pm_select.h). Options expand to tasks (comma lists form
 * a cartesian product; --tasks FILE gives one task per line), the
 * partitioner cuts them for --device-mem, and --dry-run prints every
 * task's shards with their bytes and the simulated makespan of each policy
 * against the lower bound; without it the tasks train (pm_select_run),
 * resumable, interruptible with Ctrl-C. What is printed and written is
 * select_out.c's. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <signal.h>
#include <stdatomic.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "pipemem/pm_select.h"
#include "select_out.h"
#include "select_tasks.h"
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
    "           name it (else tN); '#' starts a comment\n"
    "  Tasks with the same configuration are warned about (they train the same).\n";
static const char usage_more[] = /* (two strings: C keeps one under 4096 bytes) */
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
    "  --save-best FILE  the best task's checkpoint (by validation loss), as\n"
    "           `pipemem train --save` would write it (pipemem sample reads it)\n"
    "Every task trains exactly as `pipemem train` alone with its options: the same\n"
    "losses and parameters bit for bit. At the end a table sorted by validation loss\n"
    "(--json: one object on standard output; --csv FILE: the same rows).\n"
    "Options not swept take train's defaults (layers 4, dim 128, heads 4, ctx 64,\n"
    "batch 8, microbatches 1, steps 100, lr 1e-3, warm-up steps/10, weight decay\n"
    "0.1, seed 1).\n";

typedef struct {
    sel_space sp;   /* the swept keys */
    int devices, steps, prefetch, no_join, dry_run, json, eval_every, eval_batches, halving;
    int sample, sample_seed;
    int asha, asha_min, nrung; /* --asha ETA, --asha-min N; the rungs' count */
    int64_t rungs[64];         /* ASHA's rungs in steps, ascending */
    size_t device_mem;
    pm_select_policy policy;
    const char *tasks_file, *data, *csv, *save_best, *resume, *svg, *trace, *spill;
    int stop_after;
} sel_opts;

/* A swept key, --KEY LIST or a range: the option's tag is the key. */
static int parse_key(const pm_cli_opt *d, const char *val, void *dst) {
    return sel_parse_key(&((sel_opts *)dst)->sp, d->tag, val);
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
#define L(name, k) {name, 'x', 0, 0, 0, parse_key, NULL, k} /* sel_key_flags[k] */
#define S(name, field) {name, 's', 0, 0, F(field), NULL, NULL, 0}
#define P(name, role, field) {name, role, 0, 0, F(field), NULL, NULL, 0} /* a path */
static const pm_cli_opt OPTS[] = {
    L("--lr", SEL_K_LR), L("--layers", SEL_K_LAYERS), L("--dim", SEL_K_DIM),
    L("--heads", SEL_K_HEADS), L("--ctx", SEL_K_CTX), L("--batch", SEL_K_BATCH),
    L("--microbatches", SEL_K_MICRO), L("--warmup", SEL_K_WARMUP), L("--seed", SEL_K_SEED),
    L("--steps", SEL_K_STEPS), L("--weight-decay", SEL_K_WD),
    {"--dry-run", 'f', 1, 0, F(dry_run), NULL, NULL, 0},
    {"--no-prefetch", 'f', PM_PREFETCH_OFF, 0, F(prefetch), NULL, NULL, 0},
    {"--prefetch", 'f', PM_PREFETCH_ON, 0, F(prefetch), NULL, NULL, 0},
    {"--no-join", 'f', 1, 0, F(no_join), NULL, NULL, 0},
    {"--json", 'f', 1, 0, F(json), NULL, NULL, 0},
    {"--policy", 'x', 0, 0, F(policy), parse_policy, NULL, 0},
    {"--eval-every", 'i', 0, 0, F(eval_every), NULL, NULL, 0},
    {"--eval-batches", 'i', 1, 0, F(eval_batches), NULL, NULL, 0},
    {"--halving", 'i', 2, 0, F(halving), NULL, NULL, 0},
    {"--asha", 'i', 2, 0, F(asha), NULL, NULL, 0},
    {"--asha-min", 'i', 1, 0, F(asha_min), NULL, NULL, 0},
    {"--stop-after", 'i', 1, 0, F(stop_after), NULL, NULL, 0},
    {"--sample", 'i', 1, SEL_MAX_TASKS, F(sample), NULL, NULL, 0},
    {"--sample-seed", 'i', 0, 0, F(sample_seed), NULL, NULL, 0},
    S("--spill", spill), P("--timeline", 'w', svg), P("--trace", 'w', trace), S("--resume", resume),
    P("--csv", 'w', csv), P("--save-best", 'w', save_best), P("--tasks", 'r', tasks_file),
    P("--data", 'R', data),
    {"--devices", 'i', 1, 4096, F(devices), NULL, NULL, 0},
    {"--device-mem", 'x', 0, 0, F(device_mem), parse_size, NULL, 0},
};
#undef P
#undef S
#undef L
#undef F

static int parse_args(int argc, char **argv, sel_opts *o) {
    *o = (sel_opts){.prefetch = PM_PREFETCH_AUTO, .eval_every = -1, .eval_batches = 4,
                    .sample_seed = -1};
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], o, NULL};
    int rc = pm_cli_parse("select", argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) fputs(usage, stdout), fputs(usage_more, stdout);
    if (rc) return rc;
    if (!o->devices) return pm_cli_fail("select: --devices D is required");
    if (!o->device_mem) return pm_cli_fail("select: --device-mem SIZE is required (e.g. 64M)");
    if (!o->dry_run && !o->data)
        return pm_cli_fail("select: --data DIR is required to train (or --dry-run for the plan)");
    if (o->tasks_file && (sel_swept(&o->sp) || o->sample))
        return pm_cli_fail("select: give the tasks either as lists (or ranges with --sample N) "
                           "or as --tasks FILE, not both");
    if (o->sample_seed >= 0 && !o->sample)
        return pm_cli_fail("select: --sample-seed S seeds --sample N; add --sample N");
    if (o->asha && o->halving)
        return pm_cli_fail("select: --asha and --halving are two ways to stop tasks early; "
                           "give one");
    if (o->asha_min && !o->asha) return pm_cli_fail("select: --asha-min N needs --asha ETA");
    return 0;
}

/* --asha: the rungs from the tasks' steps (one budget for all: ASHA
 * compares them at the same steps) and --asha-min. */
static int asha_rungs(sel_opts *o, const pm_select_task *t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i].cfg.opt.steps != o->steps)
            return pm_cli_fail("select: --asha compares tasks at the same steps, but task %s has "
                               "--steps %d and others %d; give every task the same --steps",
                               t[i].name, t[i].cfg.opt.steps, o->steps);
    o->nrung = pm_select_asha_rungs(o->steps, o->asha, o->asha_min, o->rungs, 64);
    if (o->nrung < 2 && o->asha_min)
        return pm_cli_fail("select: --asha %d: --steps %d leaves no rung at or above --asha-min "
                           "%d below it; lower --asha-min or --asha, or raise --steps to %lld",
                           o->asha, o->steps, o->asha_min, (long long)o->asha * o->asha_min);
    if (o->nrung < 2) /* rungs at steps / asha^k, the lowest at least 1 */
        return pm_cli_fail("select: --asha %d compares tasks at a rung below --steps (at --steps "
                           "/ %d), but --steps %d leaves none; raise --steps to %d or more",
                           o->asha, o->asha, o->steps, o->asha);
    return 0;
}

/* The tasks: a tasks file, a sample, or the grid; then what depends on
 * them all (the longest task's steps, the evaluation interval). */
static int make_tasks(sel_opts *o, pm_select_task *t, int *n) {
    uint64_t seed = o->sample_seed >= 0 ? (uint64_t)o->sample_seed : 1;
    int rc = o->tasks_file ? sel_read_tasks(o->tasks_file, t, n)
             : o->sample   ? sel_sample(&o->sp, o->sample, seed, t, n)
                           : sel_expand(&o->sp, t, n);
    if (rc) return rc;
    sel_warn_duplicates(t, *n);
    o->steps = 0;
    for (int i = 0; i < *n; i++)
        if (t[i].cfg.opt.steps > o->steps) o->steps = t[i].cfg.opt.steps;
    if (o->eval_every < 0) o->eval_every = o->steps >= 5 ? o->steps / 5 : o->steps;
    return o->asha ? asha_rungs(o, t, *n) : 0;
}

/* ---- training ------------------------------------------------------------- */

/* Ctrl-C: the run stops after the passes running, and the table so far is
 * printed (a second Ctrl-C kills as usual: the handler is reset). */
static _Atomic int interrupt_flag;
static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&interrupt_flag, 1);
    signal(SIGINT, SIG_DFL);
}

/* The learning-rate schedule of the checkpoint at path is the task's: a
 * resumed run with other steps (and so another cosine and warm-up) would
 * train neither sweep, so it is refused, saying what changed. (The model,
 * data, lr and weight decay pm_ckpt_load checks.) */
static int schedule_kept(const char *path, const pm_select_task *t) {
    pm_ckpt_info in;
    pm_err e;
    if (pm_ckpt_info_read(path, &in, &e)) return pm_cli_fail("task %s: %s", t->name, e.msg);
    const pm_optim_cfg *a = &in.cfg.opt, *b = &t->cfg.opt;
    char was[200] = "", now[200] = "";
    size_t w = 0, m = 0;
    if (a->steps != b->steps) {
        w += (size_t)snprintf(was + w, sizeof was - w, " --steps %d", a->steps);
        m += (size_t)snprintf(now + m, sizeof now - m, " --steps %d", b->steps);
    }
    if (a->warmup != b->warmup) {
        w += (size_t)snprintf(was + w, sizeof was - w, " --warmup %d", a->warmup);
        m += (size_t)snprintf(now + m, sizeof now - m, " --warmup %d", b->warmup);
    }
    if (a->lr_min_frac != b->lr_min_frac || a->beta1 != b->beta1 || a->beta2 != b->beta2 ||
        a->eps != b->eps || a->grad_clip != b->grad_clip) {
        w += (size_t)snprintf(was + w, sizeof was - w, " other AdamW settings");
        m += (size_t)snprintf(now + m, sizeof now - m, " select's");
    }
    if (!w) return 0;
    return pm_cli_fail("task %s: %s was made with%s, this run has%s (the learning-rate schedule "
                       "would change mid-run); resume with%s, or give another --resume DIR",
                       t->name, path, was, now, was);
}

/* --resume DIR: each task with a checkpoint there continues from it
 * (pm_ckpt_load checks it is this task's configuration and data), each with
 * a .stopped marker stays stopped. Its losses at the checkpoint come from
 * NAME.loss; a validation loss not measured there is measured now (the
 * same number the run would have: evaluation is deterministic), so a task
 * that runs no further step still ranks by it. 1 if it resumed, 0 if not,
 * -1 on error. */
static int resume_task(const sel_opts *o, const pm_tokens *va, const pm_select_task *t,
                       pm_trainer *host, unsigned char *skip, double *loss, double *val) {
    char path[4096];
    pm_err e;
    snprintf(path, sizeof path, "%s/%s.stopped", o->resume, t->name);
    *skip = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "%s/%s.ckpt", o->resume, t->name);
    if (access(path, F_OK)) return 0;
    if (schedule_kept(path, t)) return -1;
    if (pm_ckpt_load(host, path, &e)) return -pm_cli_fail("task %s: %s", t->name, e.msg);
    pm_select_saved_losses(o->resume, t->name, host->step, loss, val);
    if (!isfinite(*val) && pm_trainer_eval(host, va, o->eval_batches, val, &e))
        return -pm_cli_fail("task %s: evaluating its checkpoint: %s", t->name, e.msg);
    return 1;
}

/* Each task's trainer, resumed if --resume has its checkpoint, and with
 * --spill DIR spilled at once, so RAM holds one task's state at a time.
 * hosts[0 .. *ready-1] are initialised (the caller frees them). */
static int make_hosts(const sel_opts *o, pm_select_task *t, int n, const pm_tokens *tr,
                      const pm_tokens *va, pm_trainer *hosts, unsigned char *skip, double *loss,
                      double *val, int *ready) {
    const char *spill = o->spill && strcmp(o->spill, "ram") ? o->spill : NULL;
    struct stat sb;
    if (o->resume && mkdir(o->resume, 0777) && errno != EEXIST)
        return pm_cli_fail("--resume %s: %s", o->resume, strerror(errno));
    if (o->resume && (stat(o->resume, &sb) || !S_ISDIR(sb.st_mode)))
        return pm_cli_fail("--resume %s: exists and is not a directory; give a directory for "
                           "the tasks' checkpoints", o->resume);
    int resumed = 0;
    for (int i = 0; i < n; i++) {
        pm_err e;
        if (pm_trainer_init(&hosts[i], &t[i].cfg, tr, 0, &e))
            return pm_cli_fail("task %s: %s", t[i].name, e.msg); /* left nothing allocated */
        *ready = i + 1;
        if (tr->tokenizer && pm_cli_data_tokenizer(o->data, tr, &hosts[i])) return 1;
        loss[i] = val[i] = NAN;
        int r = o->resume ? resume_task(o, va, &t[i], &hosts[i], &skip[i], &loss[i], &val[i]) : 0;
        if (r < 0) return 1;
        resumed += r;
        if (spill && pm_select_spill(&t[i], &hosts[i], spill, &e))
            return pm_cli_fail("%s", e.msg);
    }
    if (resumed) fprintf(stderr, "select: resumed %d of %d tasks from %s\n", resumed, n, o->resume);
    return 0;
}

/* Every task's vocabulary is the data's (a tokenizer's, or 256 bytes), so
 * the partitioner sizes embedding and head right. */
static int take_vocab(const char *dir, pm_select_task *t, int n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", dir);
    pm_tokens tr;
    pm_err e = {{0}};
    if (pm_tokens_read(&tr, path, &e)) return pm_cli_fail("%s", e.msg);
    for (int i = 0; i < n; i++) t[i].cfg.model.vocab = (int32_t)tr.vocab;
    pm_tokens_free(&tr);
    return 0;
}

/* --save-best: the best-ranked task that did not fail and has a validation
 * loss (a task halving or an interruption stopped keeps its last state). */
static int save_best(const char *path, const pm_select_task *t, pm_trainer *hosts,
                     const pm_select_result *res, const int *order, int n) {
    for (int k = 0; k < n; k++) {
        int i = order[k];
        if (res[i].state == PM_SELECT_FAILED || !isfinite(res[i].val_loss)) continue;
        pm_err e;
        if (pm_select_host_load(&t[i], &hosts[i], &e) || pm_ckpt_save(&hosts[i], path, &e))
            return pm_cli_fail("%s", e.msg);
        fprintf(stderr, "select: wrote %s (task %s, %s, val loss %.4f)\n", path, t[i].name,
                res[i].state == PM_SELECT_DONE ? "done" : "stopped", res[i].val_loss);
        return 0;
    }
    return pm_cli_fail("select: --save-best %s: no task ended with a validation loss (all "
                       "failed, or none was evaluated); nothing written", path);
}

static int train_tasks(const sel_opts *o, pm_select_task *t, int n,
                       const pm_select_layout *lay) {
    pm_tokens tr, va;
    if (pm_cli_train_load(o->data, &tr, &va)) return 1;
    pm_trainer *hosts = pm_calloc((size_t)n, sizeof *hosts);
    pm_select_result *res = pm_calloc((size_t)n, sizeof *res);
    int *order = pm_malloc((size_t)n * sizeof *order), rc = 0, ready = 0;
    if (!hosts || !res || !order) rc = pm_cli_fail("select: out of memory for %d tasks", n);
    unsigned char *skip = pm_calloc((size_t)n, 1);
    double *prior = pm_malloc(2 * (size_t)n * sizeof *prior); /* (2, n) loss, val loss */
    if (!rc && (!skip || !prior)) rc = pm_cli_fail("select: out of memory");
    if (!rc) rc = make_hosts(o, t, n, &tr, &va, hosts, skip, prior, prior + n, &ready);
    pm_select_stats st;
    pm_err e;
    sel_progress pg = {.t = t, .n = n, .devices = o->devices, .t0 = pm_now()};
    for (int i = 0; i < n; i++) pg.steps_all += t[i].cfg.opt.steps - hosts[i].step;
    pm_select_opts so = {.devices = o->devices, .policy = o->policy, .prefetch = o->prefetch,
                         .no_join = o->no_join, .eval_every = o->eval_every,
                         .halving = o->halving,
                         .asha = o->asha, .rungs = o->rungs, .nrung = o->nrung,
                         .eval_batches = o->eval_batches, .val = &va, .save_dir = o->resume,
                         .stop_after = o->stop_after, .skip = skip, .prior_loss = prior,
                         .prior_val = prior ? prior + n : NULL, .report = sel_on_event,
                         .report_ctx = &pg, .interrupt = &interrupt_flag,
                         .spill_dir = o->spill && strcmp(o->spill, "ram") ? o->spill : NULL};
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);
    if (!rc && pm_select_run(t, hosts, n, lay, &so, res, &st, &e)) rc = pm_cli_fail("%s", e.msg);
    sigaction(SIGINT, &old, NULL);
    int stopped = atomic_load(&interrupt_flag);
    if (!rc && stopped) fprintf(stderr, "select: interrupted; the table so far follows\n");
    if (!rc) {
        double bound = st.lower_bound_s;
        FILE *out = o->json ? stderr : stdout;
        sel_rank(res, n, order);
        sel_print_table(out, t, res, order, n);
        fprintf(out, "makespan %.2f s, lower bound %.2f s (the tasks' measured work: passes, "
                "step ends, evaluations; max(total / D, longest task)); per device peak bytes / "
                "busy:", st.makespan_s, bound);
        for (int d = 0; d < o->devices; d++)
            fprintf(out, " %zu / %.0f%%", st.peak[d], 100 * st.busy[d] / st.makespan_s);
        for (int d = 0; d < o->devices; d++) { /* where each device's time went */
            fprintf(out, "\ndevice %d:", d);
            for (int p = 0; p < PM_PART_COUNT; p++)
                fprintf(out, " %s %.0f%%", pm_select_part_names[p],
                        100 * st.part[(size_t)d * PM_PART_COUNT + p] / st.makespan_s);
        }
        fprintf(out, "\n");
        if (o->json)
            sel_print_json(o->policy, o->devices, o->device_mem, t, res, order, n, &st, bound);
        if (o->csv) rc = sel_write_csv(o->csv, t, res, order, n);
        if (!rc && o->svg) rc = sel_write_timeline(o->svg, &st, t, n, bound, 0);
        if (!rc && o->trace) rc = sel_write_timeline(o->trace, &st, t, n, bound, 1);
        if (!rc && o->save_best) rc = save_best(o->save_best, t, hosts, res, order, n);
        int failed = 0;
        for (int i = 0; i < n; i++) failed += res[i].state == PM_SELECT_FAILED;
        if (!rc && failed == n)
            rc = pm_cli_fail("select: %s failed (the table says why)",
                             n == 1 ? "the task" : "every task");
        pm_select_stats_free(&st);
    }
    for (int i = 0; i < ready; i++) pm_trainer_free(&hosts[i]);
    pm_free(hosts), pm_free(res), pm_free(order), pm_free(skip), pm_free(prior);
    pm_tokens_free(&tr), pm_tokens_free(&va);
    return rc ? rc : stopped ? 130 : 0; /* 128 + SIGINT, as a shell reports it */
}

/* Before anything is allocated: the devices' slabs (what the largest
 * shards need, at most --device-mem) and the tasks' state in RAM against
 * the memory this machine has available now (pm_trainer_init checks one
 * task at a time). With --spill a task's state is in RAM only while a
 * device evaluates it. */
static int memory_fits(const sel_opts *o, const pm_select_task *t, int n,
                       const pm_select_layout *lay) {
    pm_select_ram need;
    pm_err e;
    int spill = o->spill && strcmp(o->spill, "ram");
    if (pm_select_ram_need(t, n, lay, o->devices, spill, &need, &e) ||
        pm_select_ram_check(&need, (double)pm_mem_available(), &e))
        return pm_cli_fail("select: %s", e.msg);
    return 0;
}

/* No output onto an input or another output: the data, the tasks file,
 * and with --resume DIR each task's checkpoint and losses there. */
static int outputs_distinct(const sel_opts *o, const pm_select_task *t, int n) {
    int nres = o->resume ? 2 * n : 0, rc;
    pm_cli_file *f = pm_calloc((size_t)(8 + nres), sizeof *f);
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
    f[4] = (pm_cli_file){"the task list (--tasks)", o->tasks_file, 0, 0};
    for (int k = 0; k < 3 && o->data; k++) {
        snprintf(names[2 * k], sizeof names[0], "%s (--data %s)", role[k], o->data);
        snprintf(names[2 * k + 1], sizeof names[0], "%s/%s", o->data, split[k]);
        f[5 + k] = (pm_cli_file){names[2 * k], names[2 * k + 1], 0, 0};
    }
    for (int i = 0; i < nres; i++) {
        char *what = names[6 + 2 * i], *path = names[7 + 2 * i];
        const char *name = t[i / 2].name;
        snprintf(what, sizeof names[0], "task %s's %s (--resume %s)", name,
                 i % 2 ? "losses" : "checkpoint", o->resume);
        snprintf(path, sizeof names[0], "%s/%s.%s", o->resume, name, i % 2 ? "loss" : "ckpt");
        f[8 + i] = (pm_cli_file){what, path, 0, 0};
    }
    rc = pm_cli_files_distinct("select", f, 8 + nres);
    pm_free(f), pm_free(names);
    return rc;
}

int pm_cmd_select(int argc, char **argv) {
    sel_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 2 ? 0 : rc;
    pm_select_task *t = pm_calloc(SEL_MAX_TASKS, sizeof *t);
    if (!t) return pm_cli_fail("select: out of memory for the tasks");
    int n = 0;
    rc = make_tasks(&o, t, &n);
    if (!rc && o.data) rc = take_vocab(o.data, t, n);
    pm_select_layout lay;
    pm_err e;
    if (!rc && pm_select_partition(t, n, o.device_mem, 2, &lay, &e))
        rc = pm_cli_fail("%s", e.msg);
    const char *spill = o.spill && strcmp(o.spill, "ram") ? o.spill : NULL;
    sel_eval ev = {o.eval_every, o.eval_batches, o.no_join};
    if (!rc && o.dry_run && o.json) {
        rc = sel_print_dry_json(t, n, &lay, o.devices, o.steps, spill, &ev);
    } else if (!rc && o.dry_run) {
        sel_print_plan(t, n, &lay);
        rc = sel_print_policies(t, n, o.devices, &lay, spill, &ev);
    } else if (!rc) {
        rc = outputs_distinct(&o, t, n);
        if (!rc && o.save_best && pm_cli_out_check(o.save_best)) rc = 1;
        if (!rc && o.csv && pm_cli_out_check(o.csv)) rc = 1;
        if (!rc && o.svg && pm_cli_out_check(o.svg)) rc = 1;
        if (!rc && o.trace && pm_cli_out_check(o.trace)) rc = 1;
        if (!rc) rc = memory_fits(&o, t, n, &lay);
        if (!rc) rc = train_tasks(&o, t, n, &lay);
    }
    for (int i = 0; i < n; i++) pm_select_task_free(&t[i]);
    pm_free(t);
    return rc;
}
