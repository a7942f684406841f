/* train_opts.c: the one option parser and help text of `pipemem train`,
 * shared by the single-device and the pipeline modes, and the pieces both
 * modes use (configuration, data loading, the common JSON fields).
 *
 * Invariants: every option is one row of OPTS, so both modes accept the same
 * names with the same defaults and ranges; an option that makes sense in one
 * mode only is rejected in the other with a one-line error naming it. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_opts.h"

/* --layers N ... --seed S, one setting of the configuration each (the
 * row's lo is the field): an integer, or a number (--lr, --weight-decay);
 * whether it is a value the field takes is pm_train_cfg_make's to say (its
 * rule, the one every caller follows). */
static int parse_setting(const pm_cli_opt *d, const char *val, void *dst) {
    if (!pm_train_field_integer(d->lo)) return pm_cli_double(d->name, val, dst);
    if (!val) return pm_cli_fail("%s needs a value", d->name);
    char *end;
    errno = 0;
    long x = strtol(val, &end, 10);
    if (errno || end == val || *end) return pm_cli_fail("%s: '%s' is not an integer", d->name, val);
    *(double *)dst = (double)x;
    return 0;
}

/* --comm-timeout S: seconds a device waits for another, 1 up to a day. */
static int parse_timeout(const pm_cli_opt *d, const char *val, void *dst) {
    double x;
    if (pm_cli_double(d->name, val, &x)) return 1;
    if (!(x >= 1 && x <= 86400))
        return pm_cli_fail("%s: %s is not a number of seconds from 1 up to 86400 (a day)",
                           d->name, val);
    *(double *)dst = x;
    return 0;
}

/* The tag is the option's mode: 0 both, 'p' pipeline only, 't' selects the
 * pipeline, 's' single device only. */
#define F(x) offsetof(pm_cli_train_opts, x)
#define I(name, lo, field, mode) {name, 'i', lo, 0, F(field), NULL, NULL, mode}
#define S(name, field, mode) {name, 's', 0, 0, F(field), NULL, NULL, mode}
#define C(name, f) {name, 'x', f, 0, F(set.v[f]), parse_setting, NULL, 0}
/* a path: its role (pm_cli_opt), and 1 for the two that may be one file */
#define P(name, role, same, field, mode) {name, role, same, 0, F(field), NULL, NULL, mode}
static const pm_cli_opt OPTS[] = {
    P("--data", 'R', 0, data, 0),   P("--save", 'w', 1, save, 0),
    P("--curves", 'w', 0, curves, 0),
    P("--train", 'r', 0, train_file, 0), P("--val", 'r', 0, val_file, 0),
    I("--pad-vocab", 1, pad_vocab, 0),
    P("--resume", 'r', 1, resume, 0), C("--layers", PM_CFG_LAYERS),
    C("--dim", PM_CFG_DIM),         C("--heads", PM_CFG_HEADS),
    C("--ctx", PM_CFG_CTX),         C("--batch", PM_CFG_BATCH),
    C("--microbatches", PM_CFG_MICRO), C("--steps", PM_CFG_STEPS),
    C("--lr", PM_CFG_LR),           C("--warmup", PM_CFG_WARMUP),
    C("--weight-decay", PM_CFG_WEIGHT_DECAY),
    I("--eval-every", 0, eval_every, 0), I("--eval-batches", 1, eval_batches, 0),
    C("--seed", PM_CFG_SEED),       I("--stop-after", 1, stop_after, 0),
    {"--json", 'f', 1, 0, F(json), NULL, NULL, 0}, I("--threads", 1, threads, 's'),
    I("--pp", 1, pp, 't'),          S("--schedule", kind, 't'),
    P("--schedule-file", 'r', 0, sched_file, 't'), I("--chunks", 1, chunks, 'p'),
    {"--mem-limit", 'p', 0, 0, F(mem_limit), NULL, NULL, 'p'}, P("--trace", 'w', 0, trace, 'p'),
    P("--timeline", 'w', 0, svg, 'p'), {"--recompute", 'f', 1, 0, F(recompute), NULL, NULL, 'p'},
    I("--dp", 1, dp, 't'),          S("--transport", transport, 't'),
    S("--placement", placement, 'p'), I("--head-parts", 1, head_parts, 'p'),
    {"--device-mem", 'z', 0, 0, F(device_mem), NULL, NULL, 0}, I("--zero", 0, zero, 'p'),
    {"--comm-timeout", 'x', 0, 0, F(comm_timeout), parse_timeout, NULL, 'p'},
};
#undef C
#undef P
#undef S
#undef I
#undef F
enum { N_OPTS = sizeof OPTS / sizeof OPTS[0] };

static void usage(FILE *f) {
    fprintf(f,
            "usage: pipemem train (--data DIR | --train FILE --val FILE) [--pad-vocab N]\n"
            "         [--layers L] [--dim C] [--heads H] [--ctx T]\n"
            "         [--batch B] [--microbatches K] [--steps N] [--lr X] [--warmup N]\n"
            "         [--weight-decay X]\n"
            "         [--eval-every N] [--eval-batches N] [--save FILE] [--resume FILE]\n"
            "         [--seed S] [--stop-after N] [--json] [--curves FILE.svg]\n"
            "         [--threads N | --pp P [--schedule KIND | --schedule-file FILE]\n"
            "          [--chunks V] [--mem-limit X] [--recompute] [--trace FILE]\n"
            "          [--timeline FILE.svg] [--dp D] [--transport threads|mpi]\n"
            "          [--placement flops|measured|memory] [--head-parts N]\n"
            "          [--device-mem SIZE] [--zero 0|1] [--comm-timeout S]]\n"
            "  Trains the GPT on DIR/train.bin (made by 'pipemem prepare'), or on token\n"
            "  files named with --train/--val (pipemem's or llm.c's, e.g.\n"
            "  tiny_shakespeare_train.bin); the vocabulary is the data's, rounded up to a\n"
            "  multiple of N with --pad-vocab N (llm.c pads GPT-2's 50257 to 50304 = 64 x\n"
            "  786). B sequences of T\n"
            "  tokens per step, split into K microbatches whose gradients accumulate.\n"
            "  Defaults: L 4, C 128, H 4, T 64, B 8, K 1, N 100, lr 1e-3, warm-up N/10,\n"
            "  weight decay 0.1 (AdamW's, of the matrices),\n"
            "  threads = cores, eval every N/5 steps on 4 batches, seed 1.\n"
            "  --curves FILE.svg draws the training loss of every step and the validation\n"
            "  losses against the step.\n"
            "  --save writes the checkpoint at every evaluation and at the end; --resume\n"
            "  with the same options continues bitwise as if never stopped. --stop-after N\n"
            "  ends the run after step N (an interruption on purpose).\n"
            "  Pipeline: --pp, --schedule or --schedule-file train the same model (bitwise\n"
            "  the same losses) on P device threads under one schedule (default P 1, 1f1b),\n"
            "  BLAS on 1 thread per device (so no --threads). KIND is any kind of\n"
            "  'pipemem schedule --help' or 'auto' (needs --mem-limit X, in units of M);\n"
            "  K is the schedule's m. --recompute (or KIND-r) keeps only each stage's input\n"
            "  and reruns its forward in the backward: less memory, one more forward.\n"
            "  --trace/--timeline write the last step's measured\n"
            "  timeline (Chrome trace JSON / SVG).\n"
            "  Placement: contiguous layers per stage, cut so the busiest device (all of\n"
            "  its stages) has the least time per microbatch, then the least memory; a\n"
            "  layer's time is its FLOPs (default: the same plan on every machine), or\n"
            "  measured first on one microbatch of an embedding, a block and the head\n"
            "  (--placement measured, at most 2048 tokens a sequence, scaled by FLOPs\n"
            "  beyond: faster where FLOPs mislead, but it depends on the machine and\n"
            "  its load). --placement memory cuts for the least memory on\n"
            "  the fullest device first (parameters, gradients, moments and the\n"
            "  activations of the microbatches it holds at once), then the least time\n"
            "  (FLOPs). Each device's layers, share and planned bytes are printed;\n"
            "  --json gives the measured busy time.\n"
            "  A big vocabulary's head can be cut into N layers (--head-parts N, at most\n"
            "  one per 4096 words; by default the number that best evens out the\n"
            "  devices): the same training to the bit, only placed differently.\n"
            "  Each device holds only its own stages (parameters, gradients, AdamW\n"
            "  moments, activations, workspace); the plan prints every device's bytes\n"
            "  by kind before anything is allocated. --device-mem SIZE (K, M, G: 2G) is\n"
            "  one device's budget: when the placement puts a device over it, the\n"
            "  fastest placement that fits is taken instead; when none does, the run is\n"
            "  refused, naming the least a placement needs and where it goes; with\n"
            "  --schedule auto the search runs under what the budget leaves for\n"
            "  activations (--mem-limit not needed then).\n");
    fprintf(f,
            "  --dp D trains D replicas of the P-device pipeline on D x P devices, each on\n"
            "  K/D of the microbatches, gradients summed across replicas in a fixed order.\n"
            "  --transport mpi runs one device per rank: mpirun -np D*P pipemem train ...\n"
            "  (the default under mpirun; otherwise threads). Rank 0 prints and writes.\n"
            "  --comm-timeout S (default 120): a device or rank that waits longer than S\n"
            "  seconds for another ends the run in one line naming it (under mpirun the\n"
            "  whole job is aborted: a stopped or lost rank cannot hang it).\n"
            "  examples: pipemem train --data data --layers 2 --dim 64 --heads 4 --ctx 32 "
            "--steps 50\n"
            "            pipemem train --data data --pp 2 --schedule v-half --layers 4 "
            "--microbatches 8 --batch 8\n");
}

static void defaults(pm_cli_train_opts *o) {
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (pm_cli_train_opts){.eval_every = -1, .eval_batches = 4,
                             .threads = nproc > 0 ? (int)nproc : 1, .pp = 1, .kind = "1f1b",
                             .dp = 1};
    pm_train_settings_clear(&o->set); /* the configuration's defaults are the library's */
}

/* Cross-option checks once all are read; the first mode-only option seen
 * of each kind is passed in (NULL: none). */
static int check(pm_cli_train_opts *o, const char *pipe_only, const char *single_only) {
    if (!o->data && (o->train_file || o->val_file) && !(o->train_file && o->val_file))
        return pm_cli_fail("train: %s FILE needs %s FILE beside it (the %s split)",
                           o->train_file ? "--train" : "--val", o->train_file ? "--val" : "--train",
                           o->train_file ? "validation" : "training");
    if (!o->data && !(o->train_file && o->val_file)) {
        usage(stderr);
        return pm_cli_fail("train: --data DIR (made by 'pipemem prepare') or --train FILE --val "
                           "FILE is required");
    }
    if (o->data && (o->train_file || o->val_file))
        return pm_cli_fail("train: give --data DIR or --train FILE --val FILE, not both");
    if (o->pipeline && single_only)
        return pm_cli_fail("train: %s is for single-device runs; drop it (a pipeline run "
                           "uses 1 BLAS thread per device)", single_only);
    if (!o->pipeline && pipe_only)
        return pm_cli_fail("train: %s is for pipeline runs; add --pp P (and --schedule KIND "
                           "for another schedule than 1F1B)", pipe_only);
    if (o->pipeline && !o->sched_file && !strcmp(o->kind, "auto") && !(o->mem_limit > 0) &&
        !o->device_mem)
        return pm_cli_fail("--schedule auto needs --mem-limit X (a multiple of M, e.g. 0.5) or "
                           "--device-mem SIZE");
    if (o->zero > 1) return pm_cli_fail("train: --zero %d: use 0 or 1 (ZeRO stage 1)", o->zero);
    if (o->zero && o->dp < 2)
        return pm_cli_fail("train: --zero 1 shards the AdamW moments across data-parallel "
                           "replicas: add --dp 2 or more");
    /* the file decides the kind and the chunks (--mem-limit still checks it,
     * --recompute still applies to it) */
    if (o->sched_file && (o->have_kind || o->chunks))
        return pm_cli_fail("train: --schedule-file %s is the schedule: drop %s (the file decides "
                           "it)", o->sched_file, o->have_kind ? "--schedule" : "--chunks");
    if (o->placement && strcmp(o->placement, "measured") && strcmp(o->placement, "flops") &&
        strcmp(o->placement, "memory"))
        return pm_cli_fail("train: --placement %s: use flops, measured or memory", o->placement);
    if (o->transport && strcmp(o->transport, "threads") && strcmp(o->transport, "mpi"))
        return pm_cli_fail("train: --transport %s: use threads or mpi", o->transport);
    pm_train_cfg d; /* the microbatches given, or the default */
    pm_train_cfg_defaults(&d);
    int micro = isnan(o->set.v[PM_CFG_MICRO]) ? d.micro : (int)o->set.v[PM_CFG_MICRO];
    if (micro % o->dp)
        return pm_cli_fail("train: --dp %d must divide --microbatches %d (each replica runs "
                           "an equal share)", o->dp, micro);
    if (o->pipeline) o->threads = 1;
    return 0;
}

int64_t pm_cli_train_stop_at(const pm_cli_train_opts *o, const pm_train_cfg *cfg) {
    return o->stop_after && o->stop_after < cfg->opt.steps ? o->stop_after : cfg->opt.steps;
}

int pm_cli_train_check_outputs(const pm_cli_train_opts *o) {
    const char *paths[4] = {o->save, o->trace, o->svg, o->curves};
    const char *opts[4] = {"--save", "--trace", "--timeline", "--curves"};
    for (int k = 0; k < 4; k++) {
        pm_err err;
        /* a checkpoint is a regular file (its writer fills a temporary and
         * renames it), so a device such as /dev/full is refused now, not
         * at the first save */
        pm_status st = !paths[k] ? PM_OK
                       : k == 0  ? pm_ckpt_check_path(paths[k], &err)
                                 : pm_path_check_writable(paths[k], &err);
        if (st) return pm_cli_fail("train: %s %s", opts[k], err.msg);
    }
    return 0;
}

/* A checkpoint of this data whose vocabulary was padded otherwise: the
 * library's refusal would send the user to other data. 1 if said. */
static int pad_differs(const pm_cli_train_opts *o, const pm_tokens *tr, const pm_train_cfg *cfg) {
    pm_ckpt_info info;
    pm_err err;
    if (pm_ckpt_info_read(o->resume, &info, &err)) return 0;
    int32_t was = info.cfg.model.vocab, data = (int32_t)tr->vocab;
    pm_train_cfg as = *cfg;
    as.model.vocab = was;
    if (was == cfg->model.vocab || was < data ||
        pm_ckpt_verify(o->resume, &as, pm_tokens_identity(tr), &info, &err))
        return 0;
    if (was == data)
        return pm_cli_fail("train: %s: the checkpoint's vocabulary is the data's %d, unpadded; "
                           "this run's is %d: resume without --pad-vocab", o->resume, data,
                           cfg->model.vocab);
    return pm_cli_fail("train: %s: the checkpoint's vocabulary is the data's %d padded to %d, "
                       "this run's is %d: resume with the --pad-vocab it was made with "
                       "(--pad-vocab %d does)", o->resume, data, was, cfg->model.vocab, was);
}

int pm_cli_train_check_resume(const pm_cli_train_opts *o, const pm_tokens *tr) {
    if (!o->resume) return 0;
    pm_train_cfg cfg;
    pm_ckpt_info info;
    pm_err err;
    pm_cli_train_cfg(o, tr, &cfg);
    if (pm_ckpt_verify(o->resume, &cfg, pm_tokens_identity(tr), &info, &err))
        return pad_differs(o, tr, &cfg) ? 1 : pm_cli_fail("%s", err.msg);
    return 0;
}

/* The mode-only option given first (lowest argv index) of mode, or NULL. */
static const char *first_of(const int *at, int mode) {
    int k0 = -1;
    for (int k = 0; k < N_OPTS; k++)
        if (at[k] && OPTS[k].tag == mode && (k0 < 0 || at[k] < at[k0])) k0 = k;
    return k0 < 0 ? NULL : OPTS[k0].name;
}

int pm_cli_train_parse(int argc, char **argv, pm_cli_train_opts *o) {
    defaults(o);
    int at[N_OPTS];
    pm_cli_opts set = {OPTS, N_OPTS, o, at};
    int rc = pm_cli_parse("train", argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) usage(stdout);
    if (rc) return rc == 2 ? -1 : 1;
    o->pipeline = first_of(at, 't') != NULL;
    o->have_pp = pm_cli_given(&set, "--pp") > 0;
    o->have_kind = pm_cli_given(&set, "--schedule") > 0;
    if (check(o, first_of(at, 'p'), first_of(at, 's'))) return 1;
    pm_err err;
    if (pm_train_cfg_make(&o->cfg, &o->set, &err)) return pm_cli_fail("train: %s", err.msg);
    int steps = o->cfg.opt.steps;
    if (o->eval_every < 0) o->eval_every = steps >= 5 ? steps / 5 : steps;
    return 0;
}

void pm_cli_train_cfg(const pm_cli_train_opts *o, const pm_tokens *tr, pm_train_cfg *cfg) {
    int32_t pad = o->pad_vocab > 1 ? o->pad_vocab : 1;
    *cfg = o->cfg;
    cfg->model.vocab = (int32_t)((tr->vocab + (uint32_t)pad - 1) / (uint32_t)pad * (uint32_t)pad);
}

const char *pm_cli_in_dir(char *buf, size_t n, const char *dir, const char *name) {
    size_t len = strlen(dir);
    while (len > 0 && dir[len - 1] == '/') len--;
    snprintf(buf, n, "%.*s/%s", (int)len, dir, name);
    return buf;
}

static int load_split(const char *path, pm_tokens *t) {
    pm_err err = {{0}};
    if (pm_tokens_read(t, path, &err)) return pm_cli_fail("%s", err.msg);
    return 0;
}

static int check_pair(const char *tn, const char *vn, pm_tokens *tr, pm_tokens *va, int bad);

int pm_cli_train_load(const char *dir, pm_tokens *tr, pm_tokens *va) {
    *tr = (pm_tokens){0};
    *va = (pm_tokens){0};
    char tn[4096], vn[4096];
    pm_cli_in_dir(tn, sizeof tn, dir, "train.bin");
    pm_cli_in_dir(vn, sizeof vn, dir, "val.bin");
    return check_pair(tn, vn, tr, va, load_split(tn, tr) || load_split(vn, va));
}

int pm_cli_train_data(const pm_cli_train_opts *o, pm_tokens *tr, pm_tokens *va) {
    if (o->data) return pm_cli_train_load(o->data, tr, va);
    *tr = (pm_tokens){0};
    *va = (pm_tokens){0};
    pm_err err = {{0}};
    int bad = pm_tokens_read(tr, o->train_file, &err) || pm_tokens_read(va, o->val_file, &err);
    if (bad) pm_cli_fail("%s", err.msg);
    return check_pair(o->train_file, o->val_file, tr, va, bad);
}

/* The file a split was read from, as the user named it (val: the
 * validation split); buf holds it when --data names a directory. */
static const char *split_name(const pm_cli_train_opts *o, int val, char *buf, size_t n) {
    if (!o->data) return val ? o->val_file : o->train_file;
    return pm_cli_in_dir(buf, n, o->data, val ? "val.bin" : "train.bin");
}

int pm_cli_splits_fit(const char *who, const char *tn, const char *vn, int ctx,
                      const pm_tokens *tr, const pm_tokens *va) {
    const pm_tokens *t[2] = {tr, va};
    const char *name[2] = {tn, vn};
    for (int i = 0; i < 2; i++) {
        char what[4200];
        pm_loader ld;
        pm_err err = {{0}};
        snprintf(what, sizeof what, "%s%s", who, name[i]);
        if (pm_loader_init(&ld, t[i], ctx, 0, what, &err)) return pm_cli_fail("%s", err.msg);
    }
    return 0;
}

int pm_cli_train_check_ctx(const pm_cli_train_opts *o, int ctx, const pm_tokens *tr,
                           const pm_tokens *va) {
    char tb[4096], vb[4096];
    return pm_cli_splits_fit("", split_name(o, 0, tb, sizeof tb), split_name(o, 1, vb, sizeof vb),
                             ctx, tr, va);
}

/* Train and validation tokens from one tokenizer; frees both on error. */
static int check_pair(const char *tn, const char *vn, pm_tokens *tr, pm_tokens *va, int bad) {
    if (!bad && (tr->vocab != va->vocab || tr->tokenizer != va->tokenizer))
        bad = pm_cli_fail("%s (vocabulary %u) and %s (vocabulary %u) were made with different "
                          "tokenizers; prepare them together", tn, tr->vocab, vn, va->vocab);
    if (bad) {
        pm_tokens_free(tr);
        pm_tokens_free(va);
    }
    return bad;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Throughput comes from the median step time (robust to the first, cold
 * step): tokens_per_s = B*T / median, gflops_per_s = the model's counted
 * FLOPs per step (pm_train_step_flops) / median. */
void pm_cli_train_json_head(const pm_cli_train_opts *o, const pm_train_cfg *c, int64_t step,
                            double *times, int n, double final_loss, double val_loss) {
    double med = 0;
    if (n > 0) {
        qsort(times, (size_t)n, sizeof *times, cmp_double);
        med = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    }
    double tok = med > 0 ? (double)c->batch * c->model.ctx / med : 0;
    double gf = med > 0 ? pm_train_step_flops(c) / med / 1e9 : 0;
    /* every number as the text that reads back as the same double, so a
     * loss compares exactly with the same run's under select */
    printf("{\"steps\": %lld, \"steps_run\": %d, \"final_loss\": %s, \"val_loss\": %s, "
           "\"median_step_ms\": %s, \"tokens_per_s\": %s, \"gflops_per_s\": %s, "
           "\"params\": %zu, \"threads\": %d, \"batch\": %d, \"microbatches\": %d, "
           "\"ctx\": %d", (long long)step, n, PM_JSON_NUM(final_loss), PM_JSON_NUM(val_loss),
           PM_JSON_NUM(med * 1e3), PM_JSON_NUM(tok), PM_JSON_NUM(gf),
           pm_gpt_num_params(&c->model), o->threads, c->batch, c->micro, c->model.ctx);
}

int pm_cli_train_start(const pm_cli_train_opts *o, const pm_train_cfg *cfg, const pm_tokens *tr,
                       const pm_tokens *va, pm_trainer *t) {
    pm_err err = {{0}};
    *t = (pm_trainer){0};
    if (pm_cli_train_check_ctx(o, cfg->model.ctx, tr, va)) return 1;
    if (pm_trainer_init(t, cfg, tr, o->device_mem, &err)) return pm_cli_fail("%s", err.msg);
    if ((tr->tokenizer && pm_cli_data_tokenizer(o->data ? o->data : o->train_file, tr, t)) ||
        (o->resume && pm_ckpt_load(t, o->resume, &err))) {
        if (err.msg[0]) pm_cli_fail("%s", err.msg);
        pm_trainer_free(t);
        return 1;
    }
    return 0;
}

int pm_cli_train_curves_init(const pm_cli_train_opts *o, int64_t start, int64_t steps,
                             pm_cli_curves *cv) {
    *cv = (pm_cli_curves){0};
    return o->curves ? pm_cli_curves_init(cv, 1, &start, &steps) : 0;
}

void pm_cli_train_curves_event(pm_cli_curves *cv, const pm_loop_event *ev) {
    if (!cv->n) return;
    if (ev->kind == PM_LOOP_STEP) pm_cli_curves_loss(cv, 0, ev->step, ev->info.loss);
    else pm_cli_curves_val(cv, 0, ev->step, ev->val_loss);
}

int pm_cli_train_curves_write(const pm_cli_train_opts *o, const pm_cli_curves *cv) {
    if (!o->curves) return 0;
    static const int order[1] = {0};
    const char *names[1] = {"train"};
    char title[160];
    snprintf(title, sizeof title, "pipemem train: %d layers, dim %d, lr %g, %d steps",
             o->cfg.model.layers, o->cfg.model.dim, (double)o->cfg.opt.lr, o->cfg.opt.steps);
    if (pm_cli_curves_write(cv, order, names, title, o->curves)) return 1;
    fprintf(stderr, "wrote %s\n", o->curves);
    return 0;
}

int pm_cli_read_tokenizer(const char *dir, const pm_tokens *tr, char **model, size_t *len) {
    char path[4096];
    /* --train FILE: the model beside it */
    struct stat sb;
    if (!stat(dir, &sb) && !S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(dir, '/');
        snprintf(path, sizeof path, "%.*s/tokenizer.model", slash ? (int)(slash - dir) : 1,
                 slash ? dir : ".");
    } else {
        pm_cli_in_dir(path, sizeof path, dir, "tokenizer.model");
    }
    pm_err err = {{0}};
    *model = NULL, *len = 0;
    if (pm_read_file(path, PM_TEXT_MAX, model, len, &err)) return pm_cli_fail("%s", err.msg);
    if (pm_fnv1a64(PM_FNV_OFFSET, *model, *len) == tr->tokenizer) return 0;
    pm_free(*model);
    *model = NULL, *len = 0;
    return pm_cli_fail("%s is not the tokenizer the train tokens were made with; prepare the "
                       "directory again", path);
}

int pm_cli_data_tokenizer(const char *dir, const pm_tokens *tr, pm_trainer *t) {
    char *m;
    size_t len;
    pm_err err = {{0}};
    if (pm_cli_read_tokenizer(dir, tr, &m, &len)) return 1;
    int bad = pm_trainer_set_tokenizer(t, m, len, &err) ? pm_cli_fail("%s", err.msg) : 0;
    pm_free(m);
    return bad;
}
