/* cmd_plan.c: `pipemem plan`: size a pipeline run of a GPT-shaped model on
 * a GPU cluster before paying for it: which schedule fits each device's
 * memory with which microbatch size and count, what every device holds and
 * how fast each choice runs (the library's pm_cluster.h; this file parses
 * and prints). --pipemem-gpt plans pipemem's own fp32 GPT on this machine
 * instead, with pass times measured here, to set beside `train --pp`. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "plan_out.h"

static const char usage[] =
    "usage: pipemem plan --layers L --hidden H --heads A --seq S --vocab V [--ffn F]\n"
    "                    --devices N --device-mem SIZE --device-tflops T\n"
    "                    [--pp P] [--dp D] [--mbs B] [--microbatches M | --global-batch G]\n"
    "                    [--kind K | --kinds all] [--precision bf16|fp32] [--flash-attention]\n"
    "                    [--zero 0|1] [--link-gbps X] [--pass-efficiency E] [--max-mbs B]\n"
    "                    [--top K] [--format table|json|csv|svg] [-o FILE]\n"
    "       pipemem plan --pipemem-gpt --layers L --hidden H --heads A --seq S --vocab V\n"
    "                    --pp P --mbs B --microbatches M --kind K [--format ...]\n"
    "\n"
    "Sizes a pipeline run before it is paid for: for each schedule kind, pipeline depth P,\n"
    "data-parallel width D = N / P, microbatch size B and count M (per pipeline and step),\n"
    "what each device holds (weights, gradients, optimizer state, the schedule's activation\n"
    "peak, message buffers) against --device-mem, the bubble, the time of a step, samples\n"
    "per second and MFU. docs/plan.md gives every formula and its source.\n"
    "\n"
    "  --layers/--hidden/--heads/--seq/--vocab  the GPT: blocks, width, heads, sequence\n"
    "                    length, vocabulary; --ffn its MLP width (default 4 x hidden)\n"
    "  --devices N       GPUs in all; --device-mem SIZE each one's memory (80G: 80 GiB,\n"
    "                    an A100 80GB's); --device-tflops T its peak dense TFLOP/s\n"
    "  --pp, --dp, --mbs fix P, D, B; each left out is searched (P dividing N, D = N / P,\n"
    "                    B a power of two up to --max-mbs, default 64)\n"
    "  --microbatches M  microbatches per pipeline and step; or --global-batch G sequences\n"
    "                    per step (M = G / (B D), shapes where it is not whole are skipped)\n"
    "  --kind K          one schedule kind (KIND-r recomputed, auto-v: the fastest V\n"
    "                    schedule in the memory left); default --kinds all: every kind,\n"
    "                    each also recomputed, and auto-v\n"
    "  --precision       bf16 (mixed precision, fp32 master weights; default) or fp32\n"
    "  --flash-attention no s^2 attention activation is kept\n"
    "  --zero 1          ZeRO-1: the optimizer state sharded across the D replicas\n"
    "  --link-gbps X     point-to-point and all-reduce bandwidth (default 200, one HDR\n"
    "                    InfiniBand port per GPU as in a DGX A100; 0: communication free)\n"
    "  --pass-efficiency E  fraction of the peak one pass reaches (default 0.65)\n"
    "  --top K           the table shows the first K plans (default all)\n"
    "  --format F        table (default), json, csv (a row per device of each plan) or svg\n"
    "                    (MFU against activation memory, the Pareto front of those that fit)\n"
    "  --pipemem-gpt     pipemem's own fp32 GPT (its exact bytes) on this machine's device\n"
    "                    threads, pass times measured here by P threads at once (at\n"
    "                    most seq 2048, longer scaled by FLOPs): compare with train --pp\n"
    "                    --json\n"
    "\n"
    "Plans are listed those that fit first, each group fastest first. GB is 10^9 bytes.\n";

typedef struct {
    pm_gpt_shape g;
    int devices, pp, dp, mbs, m, global_batch, max_mbs, top, zero, pipemem;
    size_t device_mem;
    double tflops, link, eff;
    const char *kind, *kinds, *precision, *format, *out;
} plan_opts;

static int parse_link(const pm_cli_opt *d, const char *val, void *dst) {
    double *x = dst;
    if (pm_cli_double(d->name, val, x)) return 1;
    if (!(*x >= 0 && *x < 1e9))
        return pm_cli_fail("--link-gbps %s: from 0 (messages and gradient sums cost nothing) to "
                           "below 1e9", val);
    return 0;
}

static int parse_eff(const pm_cli_opt *d, const char *val, void *dst) {
    double *x = dst;
    if (pm_cli_double(d->name, val, x)) return 1;
    if (!(*x > 0 && *x <= 1)) return pm_cli_fail("--pass-efficiency %s: must be in (0, 1]", val);
    return 0;
}

#define F(x) offsetof(plan_opts, x)
static const pm_cli_opt OPTS[] = {
    {"--layers", 'i', 1, 1 << 16, F(g.layers), NULL, NULL, 0},
    {"--hidden", 'i', 1, 1 << 20, F(g.hidden), NULL, NULL, 0},
    {"--heads", 'i', 1, 1 << 16, F(g.heads), NULL, NULL, 0},
    {"--seq", 'i', 1, 1 << 24, F(g.seq), NULL, NULL, 0},
    {"--vocab", 'i', 1, 1 << 28, F(g.vocab), NULL, NULL, 0},
    {"--ffn", 'i', 1, 1 << 22, F(g.ffn), NULL, NULL, 0},
    {"--devices", 'i', 1, 1 << 20, F(devices), NULL, NULL, 0},
    {"--device-mem", 'z', 0, 0, F(device_mem), NULL, NULL, 0},
    {"--device-tflops", 'p', 0, 0, F(tflops), NULL, NULL, 0},
    {"--pp", 'i', 1, 1 << 20, F(pp), NULL, NULL, 0},
    {"--dp", 'i', 1, 1 << 20, F(dp), NULL, NULL, 0},
    {"--mbs", 'i', 1, 1 << 20, F(mbs), NULL, NULL, 0},
    {"--max-mbs", 'i', 1, 1 << 20, F(max_mbs), NULL, NULL, 0},
    {"--microbatches", 'i', 1, PM_SCHED_MAX_M, F(m), NULL, NULL, 0},
    {"--global-batch", 'i', 1, 1 << 30, F(global_batch), NULL, NULL, 0},
    {"--kind", 's', 0, 0, F(kind), NULL, "a schedule kind", 0},
    {"--kinds", 's', 0, 0, F(kinds), NULL, "'all'", 0},
    {"--precision", 's', 0, 0, F(precision), NULL, "bf16 or fp32", 0},
    {"--flash-attention", 'f', 1, 0, F(g.flash), NULL, NULL, 0},
    {"--zero", 'i', 0, 1, F(zero), NULL, NULL, 0},
    {"--link-gbps", 'x', 0, 0, F(link), parse_link, NULL, 0},
    {"--pass-efficiency", 'x', 0, 0, F(eff), parse_eff, NULL, 0},
    {"--top", 'i', 0, 1 << 24, F(top), NULL, NULL, 0},
    {"--format", 's', 0, 0, F(format), NULL, "table, json, csv or svg", 0},
    {"-o", 'w', 0, 0, F(out), NULL, "a file", 0},
    {"--pipemem-gpt", 'f', 1, 0, F(pipemem), NULL, NULL, 0},
};
#undef F
enum { N_OPTS = sizeof OPTS / sizeof OPTS[0] };

/* --pipemem-gpt: one run of pipemem's own fp32 GPT on this machine's
 * device threads, whose pass times are measured: the GPU options, which
 * would be silently ignored, are refused by name. */
static int check_pipemem(const plan_opts *o, const pm_cli_opts *set) {
    static const char *const gpu_only[] = {
        "--dp", "--zero", "--flash-attention", "--ffn", "--precision", "--device-tflops",
        "--link-gbps", "--pass-efficiency", "--max-mbs", "--global-batch", "--kinds"};
    for (size_t i = 0; i < sizeof gpu_only / sizeof gpu_only[0]; i++)
        if (pm_cli_given(set, gpu_only[i]))
            return pm_cli_fail("plan: --pipemem-gpt is pipemem's own fp32 GPT on this "
                               "machine's device threads, its passes timed here: %s is for GPU "
                               "plans", gpu_only[i]);
    if (!o->pp || !o->mbs || !o->m || !o->kind)
        return pm_cli_fail("plan: --pipemem-gpt plans one run: give --pp, --mbs, "
                           "--microbatches and --kind");
    if (o->devices && o->devices != o->pp)
        return pm_cli_fail("plan: --pipemem-gpt: --devices %d is not --pp %d", o->devices, o->pp);
    if (!o->device_mem && (!strcmp(o->kind, "auto") || !strcmp(o->kind, "auto-v")))
        return pm_cli_fail("plan: --kind %s searches under the devices' memory: give "
                           "--device-mem SIZE", o->kind);
    return 0;
}

/* Required options, refused combinations; 0 or 1 (printed). */
static int check(plan_opts *o, const pm_cli_opts *set) {
    static const char *const shape[] = {"--layers", "--hidden", "--heads", "--seq", "--vocab"};
    static const char *const gpu[] = {"--devices", "--device-mem", "--device-tflops"};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (!pm_cli_given(set, shape[i])) return pm_cli_fail("plan: needs %s", shape[i]);
    for (size_t i = 0; !o->pipemem && i < sizeof gpu / sizeof gpu[0]; i++)
        if (!pm_cli_given(set, gpu[i])) return pm_cli_fail("plan: needs %s", gpu[i]);
    if (o->precision && strcmp(o->precision, "bf16") && strcmp(o->precision, "fp32"))
        return pm_cli_fail("plan: --precision %s: bf16 or fp32", o->precision);
    o->g.precision = o->precision && !strcmp(o->precision, "fp32") ? PM_PREC_FP32 : PM_PREC_BF16;
    if (o->kind && o->kinds) return pm_cli_fail("plan: --kind K or --kinds all, not both");
    if (o->kinds && strcmp(o->kinds, "all"))
        return pm_cli_fail("plan: --kinds %s: only 'all' (one kind: --kind K)", o->kinds);
    if (strcmp(o->format, "table") && strcmp(o->format, "json") && strcmp(o->format, "csv") &&
        strcmp(o->format, "svg"))
        return pm_cli_fail("plan: --format %s: table, json, csv or svg", o->format);
    if (o->pipemem) return check_pipemem(o, set);
    if (o->m && o->global_batch)
        return pm_cli_fail("plan: --microbatches M or --global-batch G, not both");
    if (!o->m && !o->global_batch)
        return pm_cli_fail("plan: needs --microbatches M (per pipeline and step) or "
                           "--global-batch G (sequences per step)");
    return 0;
}

static void model_line(const plan_opts *o, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s %d x %d, %d heads, seq %d, vocab %d",
                     o->pipemem ? "pipemem's fp32 GPT" : "GPT", o->g.layers, o->g.hidden,
                     o->g.heads, o->g.seq, o->g.vocab);
    if (!o->pipemem && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, "%s%.0d, %s%s", o->g.ffn ? ", ffn " : "", o->g.ffn,
                 pm_precision_names[o->g.precision], o->g.flash ? ", flash attention" : "");
}

static int write_report(const plan_opts *o, const plan_report *r) {
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, o->out);
    if (!f) return 1;
    int bad = !strcmp(o->format, "json") ? plan_write_json(f, r)
              : !strcmp(o->format, "csv") ? plan_write_csv(f, r)
              : !strcmp(o->format, "svg") ? plan_write_svg(f, r)
                                          : plan_write_table(f, r);
    return pm_cli_out_close(&w, bad, o->out);
}

/* pipemem's own GPT: the plan `train --pp` makes (the same cost model and
 * request: its exact bytes, the cut and the schedule by FLOPs, a device
 * over --device-mem placed again or refused), its step simulated with pass
 * times measured on this machine by P threads at once, as the run's P
 * device threads will compute. */
static int run_pipemem(const plan_opts *o, plan_report *r) {
    if ((int64_t)o->mbs * o->m > 1 << 30)
        return pm_cli_fail("plan: --pipemem-gpt: --mbs %d x --microbatches %d sequences a step "
                           "is over 2^30", o->mbs, o->m);
    pm_train_cfg cfg = {.model = {.vocab = o->g.vocab, .ctx = o->g.seq, .dim = o->g.hidden,
                                  .heads = o->g.heads, .layers = o->g.layers, .head_parts = 1},
                        .batch = o->mbs * o->m, .micro = o->m};
    pm_optim_defaults(&cfg.opt, 1);
    pm_plan_req rq = {.p = o->pp, .m = o->m, .kind = o->kind, .device_mem = o->device_mem};
    pm_layer_costs lc;
    pm_plan_model m;
    pm_cluster_plan pl;
    pm_err err;
    /* as many measuring threads as the run has device threads */
    int shown = isatty(2) ? fprintf(stderr, "pipemem: plan: timing each layer kind's passes "
                                            "on %d threads...\r", o->pp) : 0;
    pm_status st = pm_place_measure_threads(&cfg.model, o->mbs, cfg.model.ctx, o->pp, &lc, &err);
    if (shown > 0) fprintf(stderr, "%*s\r", shown, "");
    if (st) return pm_cli_fail("plan: %s", err.msg);
    r->timed_seq = lc.timed_ctx;
    if ((st = pm_plan_model_pipemem(&m, &cfg, &rq, &lc, &err)))
        return pm_cli_fail("plan: %s", err.msg);
    st = pm_cluster_plan_make(&pl, &m, &rq, &err);
    pm_plan_model_free(&m);
    if (st) return pm_cli_fail("plan: %s", err.msg);
    r->plan = &pl, r->n = 1, r->devices = o->pp, r->time_unit = "s", r->kinds = PM_BYTES_COUNT;
    int rc = write_report(o, r);
    pm_cluster_plan_free(&pl);
    return rc;
}

/* The search's progress on a terminal: once it has run PROGRESS_AFTER
 * seconds, a line rewritten in place a few times a second, erased before
 * the report. */
#define PROGRESS_AFTER 2.0
typedef struct {
    double t0, last;
    int width; /* of the line shown; 0: none yet */
} progress;

static void on_progress(void *ctx, int done, int total) {
    progress *pg = ctx;
    double t = pm_now();
    if (t - pg->t0 < PROGRESS_AFTER || (t - pg->last < 0.25 && done < total)) return;
    pg->last = t;
    int w = fprintf(stderr, "\rpipemem: plan: %d of %d plans tried, %.0f s", done, total,
                    t - pg->t0);
    pg->width = w > pg->width ? w : pg->width;
}

static void progress_end(const progress *pg) {
    if (pg->width) fprintf(stderr, "\r%*s\r", pg->width, "");
}

static int run_gpu(const plan_opts *o, plan_report *r) {
    pm_cluster hw = {.devices = o->devices, .mem = (double)o->device_mem, .tflops = o->tflops,
                     .efficiency = o->eff, .link_gbps = o->link};
    pm_cluster_search_req rq = {.pp = o->pp, .dp = o->dp, .mbs = o->mbs, .m = o->m,
                                .global_batch = o->global_batch, .max_mbs = o->max_mbs,
                                .kind = o->kind, .zero = o->zero};
    progress pg = {.t0 = pm_now()};
    if (isatty(2)) rq.progress = on_progress, rq.progress_ctx = &pg;
    pm_cluster_plan *plans;
    int n, skipped;
    pm_err err;
    pm_status st = pm_cluster_search(&o->g, &hw, &rq, &plans, &n, &skipped, &err);
    progress_end(&pg);
    if (st) return pm_cli_fail("plan: %s", err.msg);
    r->plan = plans, r->n = n, r->devices = o->devices, r->time_unit = "s", r->mfu = 1;
    r->kinds = PM_BYTES_TRANSPORT; /* a GPU's transport buffers are not modelled */
    int rc = write_report(o, r);
    if (!rc && skipped) { /* the reason in the options' names */
        char last[sizeof err.msg];
        pm_cli_flags(err.msg, last, sizeof last);
        fprintf(stderr, "pipemem: plan: %d kind%s or shape%s could not be planned; the last: "
                "%s\n", skipped, skipped == 1 ? "" : "s", skipped == 1 ? "" : "s", last);
    }
    pm_cluster_plans_free(plans, n);
    return rc;
}

int pm_cmd_plan(int argc, char **argv) {
    plan_opts o = {.link = 200, .eff = PM_CLUSTER_EFFICIENCY, .format = "table"};
    int at[N_OPTS];
    pm_cli_opts set = {OPTS, N_OPTS, &o, at};
    int rc = pm_cli_parse(argv[0], argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) fputs(usage, stdout);
    if (rc) return rc == 2 ? 0 : rc;
    if (check(&o, &set) || pm_cli_out_check(o.out)) return 1;
    if (o.zero && o.dp == 1) return pm_cli_fail("plan: --zero 1 needs --dp 2 or more");
    plan_report r = {.device_mem = (double)o.device_mem, .top = o.top};
    model_line(&o, r.model, sizeof r.model);
    return o.pipemem ? run_pipemem(&o, &r) : run_gpu(&o, &r);
}
