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
#include "train_opts.h"

static const char usage[] =
    "usage: pipemem select --data DIR --devices D --device-mem SIZE [--dry-run]\n"
    "                      [--lr LIST] [--layers LIST] [--dim LIST] [--heads LIST]\n"
    "                      [--ctx LIST] [--batch LIST] [--microbatches LIST]\n"
    "                      [--warmup LIST] [--seed LIST] [--tasks FILE] [--steps N]\n"
    "                      [--policy shard|task|sequential] [--prefetch|--no-prefetch]\n"
    "                      [--spill ram|DIR]\n"
    "                      [--eval-every N] [--eval-batches N] [--halving ETA]\n"
    "                      [--save-best FILE] [--resume DIR] [--stop-after N]\n"
    "                      [--json] [--csv FILE] [--timeline FILE.svg] [--trace FILE]\n"
    "\n"
    "Model selection: many GPT configurations (tasks) trained at once, each cut into\n"
    "shards that fit one device's memory, scheduled so every device stays busy with\n"
    "shards of different tasks (Hydra's shard parallelism, with AdamW).\n"
    "  LIST     comma-separated values; the lists' cartesian product is the task set\n"
    "           (--lr 1e-3,3e-4 --layers 4,8 is four tasks)\n"
    "  --tasks FILE  one task per line as key=value pairs with the same names\n"
    "           (lr=3e-4 layers=8 dim=256), and name=NAME to name it (else tN);\n"
    "           '#' starts a comment\n"
    "  SIZE     bytes, with K, M or G (binary) suffixes: 64M\n"
    "  --dry-run     print every task's shards (layers, bytes) and the simulated\n"
    "           makespan of the policies shard, task and sequential against the lower\n"
    "           bound max(total work / D, longest task), from the model's FLOPs at an\n"
    "           estimated 50 GFLOP/s per device (--json: all of it as one object)\n"
    "  --policy  shard (default: sharded-LRTF), task (a whole task per device) or\n"
    "           sequential (plain model parallelism), for comparison\n"
    "  --prefetch, --no-prefetch  a copy thread per device loads the next shard's\n"
    "           state while the device computes: always, or never (default: when a\n"
    "           core is free of working devices, or for the task that bounds the\n"
    "           makespan; else the copy only takes its time from a device)\n"
    "  --halving ETA  successive halving: at each evaluation round the best 1/ETA\n"
    "           of the tasks still running (by validation loss) go on, the rest stop\n"
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
    "batch 8, microbatches 1, steps 100, lr 1e-3, warm-up steps/10, seed 1).\n";

#define MAX_VALUES 64
#define MAX_TASKS 4096

enum { K_LR, K_LAYERS, K_DIM, K_HEADS, K_CTX, K_BATCH, K_MICRO, K_WARMUP, K_SEED, K_COUNT };
static const char *const key_names[K_COUNT] = {"lr",    "layers", "dim",          "heads", "ctx",
                                               "batch", "microbatches", "warmup", "seed"};

typedef struct {
    double v[K_COUNT][MAX_VALUES];
    int n[K_COUNT]; /* 0: not swept (the default) */
    int devices, steps, prefetch, dry_run, json, eval_every, eval_batches, halving;
    size_t device_mem;
    pm_select_policy policy;
    const char *tasks_file, *data, *csv, *save_best, *resume, *svg, *trace, *spill;
    int stop_after;
} sel_opts;

static int key_of(const char *name) {
    for (int k = 0; k < K_COUNT; k++)
        if (!strcmp(name, key_names[k])) return k;
    return -1;
}

/* What a value of key k must be (parse_value's rule, for messages). */
static const char *value_rule(int k) {
    if (k == K_LR) return "a positive number up to 3.4e38 (a float)";
    return k == K_SEED || k == K_WARMUP ? "an integer 0..16777216" : "an integer 1..16777216";
}

/* A value of key k: lr is a positive number a float holds (train keeps it
 * as one), seed and warmup non-negative integers, the rest positive
 * integers (value_rule). */
static int parse_value(int k, const char *s, size_t len, double *out) {
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf) return 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    errno = 0;
    double x = strtod(buf, &end);
    if (errno || *end || !isfinite(x)) return 1;
    *out = x;
    if (k == K_LR) return !(x > 0 && x <= FLT_MAX);
    if (x != floor(x) || x > (1 << 24)) return 1;
    return k == K_SEED || k == K_WARMUP ? x < 0 : x < 1;
}

/* A swept list, --KEY v1,v2,...: the option's tag is the key. */
static int parse_list(const pm_cli_opt *d, const char *val, void *dst) {
    int k = d->tag;
    sel_opts *o = dst;
    if (!val) return pm_cli_fail("--%s needs a value", key_names[k]);
    o->n[k] = 0;
    for (const char *p = val;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (o->n[k] == MAX_VALUES)
            return pm_cli_fail("--%s: more than %d values", key_names[k], MAX_VALUES);
        if (parse_value(k, p, len, &o->v[k][o->n[k]++]))
            return pm_cli_fail("--%s: '%.*s' is not %s (in '%s')", key_names[k], (int)len, p,
                               value_rule(k), val);
        if (!c) return 0;
        p = c + 1;
    }
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
#define L(name, k) {"--" name, 'x', 0, 0, 0, parse_list, NULL, k} /* key_names[k] */
#define S(name, field) {name, 's', 0, 0, F(field), NULL, NULL, 0}
static const pm_cli_opt OPTS[] = {
    L("lr", K_LR), L("layers", K_LAYERS), L("dim", K_DIM), L("heads", K_HEADS),
    L("ctx", K_CTX), L("batch", K_BATCH), L("microbatches", K_MICRO), L("warmup", K_WARMUP),
    L("seed", K_SEED),
    {"--dry-run", 'f', 1, 0, F(dry_run), NULL, NULL, 0},
    {"--no-prefetch", 'f', PM_PREFETCH_OFF, 0, F(prefetch), NULL, NULL, 0},
    {"--prefetch", 'f', PM_PREFETCH_ON, 0, F(prefetch), NULL, NULL, 0},
    {"--json", 'f', 1, 0, F(json), NULL, NULL, 0},
    {"--policy", 'x', 0, 0, F(policy), parse_policy, NULL, 0},
    {"--eval-every", 'i', 0, 0, F(eval_every), NULL, NULL, 0},
    {"--eval-batches", 'i', 1, 0, F(eval_batches), NULL, NULL, 0},
    {"--halving", 'i', 2, 0, F(halving), NULL, NULL, 0},
    {"--stop-after", 'i', 1, 0, F(stop_after), NULL, NULL, 0},
    S("--spill", spill), S("--timeline", svg), S("--trace", trace), S("--resume", resume),
    S("--csv", csv), S("--save-best", save_best), S("--tasks", tasks_file), S("--data", data),
    {"--devices", 'i', 1, 4096, F(devices), NULL, NULL, 0},
    {"--steps", 'i', 1, 0, F(steps), NULL, NULL, 0},
    {"--device-mem", 'x', 0, 0, F(device_mem), parse_size, NULL, 0},
};
#undef S
#undef L
#undef F

static int parse_args(int argc, char **argv, sel_opts *o) {
    *o = (sel_opts){.steps = 100, .prefetch = PM_PREFETCH_AUTO, .eval_every = -1,
                    .eval_batches = 4};
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], o, NULL};
    int rc = pm_cli_parse("select", argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) fputs(usage, stdout);
    if (rc) return rc;
    if (!o->devices) return pm_cli_fail("select: --devices D is required");
    if (!o->device_mem) return pm_cli_fail("select: --device-mem SIZE is required (e.g. 64M)");
    if (!o->dry_run && !o->data)
        return pm_cli_fail("select: --data DIR is required to train (or --dry-run for the plan)");
    if (o->eval_every < 0) o->eval_every = o->steps >= 5 ? o->steps / 5 : o->steps;
    return 0;
}

/* One task's configuration from its key values (NAN: the default). */
static int make_task(const sel_opts *o, const double *x, pm_select_task *t, int id) {
    double d[K_COUNT] = {1e-3, 4, 128, 4, 64, 8, 1, -1, 1};
    for (int k = 0; k < K_COUNT; k++)
        if (!isnan(x[k])) d[k] = x[k];
    pm_train_cfg c = {.model = {256, (int32_t)d[K_CTX], (int32_t)d[K_DIM], (int32_t)d[K_HEADS],
                                (int32_t)d[K_LAYERS]},
                      .batch = (int)d[K_BATCH], .micro = (int)d[K_MICRO],
                      .seed = (uint64_t)d[K_SEED]};
    pm_optim_defaults(&c.opt, o->steps);
    c.opt.lr = (float)d[K_LR];
    if (d[K_WARMUP] >= 0) c.opt.warmup = (int)d[K_WARMUP];
    *t = (pm_select_task){.cfg = c};
    snprintf(t->name, sizeof t->name, "t%d", id);
    pm_err e;
    if (pm_gpt_config_check(&c.model, &e))
        return pm_cli_fail("task %s: %s", t->name, e.msg);
    if (c.batch % c.micro)
        return pm_cli_fail("task %s: --batch %d is not a multiple of --microbatches %d", t->name,
                           c.batch, c.micro);
    return 0;
}

/* The cartesian product of the swept lists, first key slowest. */
static int expand(const sel_opts *o, pm_select_task *t, int *n) {
    long total = 1;
    for (int k = 0; k < K_COUNT; k++) total *= o->n[k] ? o->n[k] : 1;
    if (total > MAX_TASKS)
        return pm_cli_fail("select: the lists make %ld tasks; at most %d", total, MAX_TASKS);
    for (long i = 0; i < total; i++) {
        double x[K_COUNT];
        long r = i;
        for (int k = K_COUNT - 1; k >= 0; k--) {
            int nk = o->n[k] ? o->n[k] : 1;
            x[k] = o->n[k] ? o->v[k][r % nk] : NAN;
            r /= nk;
        }
        if (make_task(o, x, &t[*n], *n)) return 1;
        (*n)++;
    }
    return 0;
}

/* A task's name from the tasks file: letters, digits, '_', '.' and '-' (it
 * names files under --resume and rows in every output). */
static int good_name(const char *s, size_t n) {
    if (n < 1 || n > 31) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-') return 0;
    return s[0] != '.';
}

/* One line of the tasks file, [b, e): its values into x (NAN: default) and
 * its name (empty: none). Returns -1 on a bad pair (printed), else the
 * number of pairs read. */
static int parse_task_line(const char *file, int line, const char *b, const char *e, double *x,
                           char name[32]) {
    int any = 0;
    name[0] = 0;
    for (const char *p = b; p < e;) {
        while (p < e && isspace((unsigned char)*p)) p++;
        if (p == e || *p == '#') break;
        const char *q = p, *eq;
        while (q < e && !isspace((unsigned char)*q)) q++;
        eq = memchr(p, '=', (size_t)(q - p));
        size_t kl = eq ? (size_t)(eq - p) : 0, vl = eq ? (size_t)(q - eq - 1) : 0;
        char key[32] = "";
        if (eq && kl < sizeof key) memcpy(key, p, kl), key[kl] = 0;
        int k = key_of(key), named = !strcmp(key, "name");
        const char *bad = NULL; /* what is wrong with the pair */
        if (!eq) bad = "is not key=value";
        else if (named && !good_name(eq + 1, vl))
            bad = "is not a name (1 to 31 of letters, digits, _ . -, not starting with .)";
        else if (named) memcpy(name, eq + 1, vl), name[vl] = 0;
        else if (k < 0)
            bad = "has an unknown key (name, lr, layers, dim, heads, ctx, batch, "
                  "microbatches, warmup, seed)";
        else if (parse_value(k, eq + 1, vl, &x[k])) {
            pm_cli_fail("%s:%d: '%.*s': %s must be %s", file, line, (int)(q - p), p, key,
                        value_rule(k));
            return -1;
        }
        if (bad) {
            pm_cli_fail("%s:%d: '%.*s' %s", file, line, (int)(q - p), p, bad);
            return -1;
        }
        any++;
        p = q;
    }
    return any;
}

/* Task i (from line at[i]) takes a name no earlier task has. */
static int name_free(const char *file, const pm_select_task *t, const int *at, int i, int given) {
    for (int j = 0; j < i; j++)
        if (!strcmp(t[j].name, t[i].name))
            return pm_cli_fail("%s:%d: the name %s%s is taken by the task of line %d; give this "
                               "one name=NAME", file, at[i], t[i].name,
                               given ? "" : " (its default)", at[j]);
    return 0;
}

/* --tasks FILE: one task per line, key=value pairs; swept lists are not
 * allowed beside it (one way to say what runs). */
static int read_tasks(const sel_opts *o, pm_select_task *t, int *n) {
    char *text = NULL;
    size_t len = 0;
    pm_err e;
    if (pm_read_file(o->tasks_file, PM_TEXT_MAX, &text, &len, &e)) return pm_cli_fail("%s", e.msg);
    int line = 0, rc = 0, *at = pm_malloc(MAX_TASKS * sizeof *at); /* each task's line */
    if (!at) rc = pm_cli_fail("select: out of memory");
    for (size_t i = 0; i < len && !rc;) {
        size_t end = i;
        while (end < len && text[end] != '\n') end++;
        double x[K_COUNT];
        char name[32];
        for (int k = 0; k < K_COUNT; k++) x[k] = NAN;
        int got = parse_task_line(o->tasks_file, ++line, text + i, text + end, x, name);
        if (got < 0) rc = 1;
        else if (got && *n == MAX_TASKS)
            rc = pm_cli_fail("%s: more than %d tasks", o->tasks_file, MAX_TASKS);
        else if (got && !(rc = make_task(o, x, &t[*n], *n))) {
            if (name[0]) snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
            at[*n] = line;
            rc = name_free(o->tasks_file, t, at, *n, name[0] != 0);
            (*n)++;
        }
        i = end + 1;
    }
    pm_free(text), pm_free(at);
    if (!rc && !*n) rc = pm_cli_fail("%s: no tasks in it", o->tasks_file);
    return rc;
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
                         .eval_every = o->eval_every, .halving = o->halving,
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
 * shards need, pm_select_slab_bytes) and the tasks' state in RAM against
 * this machine's memory (pm_trainer_init checks one task at a time). With
 * --spill a task's state is in RAM only while a device evaluates it. */
static int memory_fits(const sel_opts *o, const pm_select_task *t, int n,
                       const pm_select_layout *lay) {
    double slab = (double)pm_select_slab_bytes(lay), dev = o->devices * slab, tasks = 0;
    double biggest = 0, G = 1 << 30, have = (double)pm_mem_physical();
    int spill = o->spill && strcmp(o->spill, "ram");
    for (int i = 0; i < n; i++) {
        pm_err e;
        size_t b = pm_train_mem_bytes(&t[i].cfg, &e);
        if (!b) return pm_cli_fail("task %s: %s", t[i].name, e.msg);
        double state = 4.0 * sizeof(float) * (double)pm_gpt_num_params(&t[i].cfg.model);
        tasks += spill ? (double)b - state : (double)b;
        biggest = fmax(biggest, state);
    }
    if (spill) tasks += fmin(o->devices, n) * biggest;
    if (have > 0 && dev + tasks > have)
        return pm_cli_fail("select: %d devices' slabs of %.3f GiB (%.2f GiB) and the tasks' "
                           "state in RAM (%.2f GiB) need %.2f GiB, but this machine has %.2f "
                           "GiB; use fewer --devices, a smaller --device-mem (smaller shards)%s",
                           o->devices, slab / G, dev / G, tasks / G, (dev + tasks) / G, have / G,
                           spill ? "" : " or --spill DIR");
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
    int swept = 0;
    for (int k = 0; k < K_COUNT; k++) swept |= o.n[k] > 0;
    if (o.tasks_file && swept)
        return pm_cli_fail("select: give the tasks either as lists or as --tasks FILE, not both");
    pm_select_task *t = pm_calloc(MAX_TASKS, sizeof *t);
    if (!t) return pm_cli_fail("select: out of memory for the tasks");
    int n = 0;
    rc = o.tasks_file ? read_tasks(&o, t, &n) : expand(&o, t, &n);
    if (!rc && o.data) rc = take_vocab(o.data, t, n);
    pm_select_layout lay;
    pm_err e;
    if (!rc && pm_select_partition(t, n, o.device_mem, 2, &lay, &e))
        rc = pm_cli_fail("%s", e.msg);
    if (!rc && o.dry_run && o.json) {
        rc = sel_print_dry_json(t, n, &lay, o.devices, o.steps);
    } else if (!rc && o.dry_run) {
        sel_print_plan(t, n, &lay);
        rc = sel_print_policies(t, n, o.devices, o.steps);
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
