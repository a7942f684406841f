/* cmd_sample.c: `pipemem sample --ckpt FILE --prompt TEXT -n N`: prints
 * the prompt followed by N generated tokens. Each new token re-runs the
 * forward pass over the last ctx tokens and samples from
 * softmax(logits / temperature) with a seeded PCG32. The forward runs on
 * one device when the parameters and one sequence's workspace fit
 * --device-mem (default: this machine), else through a pipeline of device
 * threads (--pp P, or the fewest whose every device fits the budget), each
 * loading only its own layers from the checkpoint: the same tokens either
 * way. The threads share this process, so together they must fit the
 * machine: the pipeline serves per-device budgets, not a model larger than
 * the machine. */
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_gpt.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_tokenizer.h"
#include "pipemem/pm_train.h"

static void sample_usage(FILE *f) {
    fprintf(f, "usage: pipemem sample --ckpt FILE [--prompt TEXT] [-n N] [--temperature X]\n"
               "         [--seed S] [--threads N] [--device-mem SIZE] [--pp P] [--ids]\n"
               "  Prints TEXT and N tokens the model generates after it, decoded with the\n"
               "  tokenizer the checkpoint carries (bytes without one). Defaults: prompt\n"
               "  \"\\n\", N 200, temperature 1, seed 1; below 1, the temperature keeps to\n"
               "  likelier tokens. The model runs on one device when its parameters and one\n"
               "  sequence's work fit --device-mem SIZE (default: this machine's memory),\n"
               "  else through P device threads (--pp P, or the fewest that fit), each\n"
               "  reading only its own layers from the checkpoint: the same text either way.\n"
               "  --ids: tokens as ids, for a model trained on token files without a\n"
               "  tokenizer (llm.c's GPT-2 files): --prompt, required, is ids separated\n"
               "  by spaces, and the prompt and the drawn tokens are printed as ids.\n"
               "  example: pipemem sample --ckpt model.ckpt --prompt 'The ' -n 100\n");
}

/* Draws an index from probs^(1/temp) (renormalised), in index order. */
static int draw(const float *probs, int V, double temp, pm_gpt_rng *rng) {
    double tot = 0.0;
    for (int i = 0; i < V; i++) tot += pow((double)probs[i], 1.0 / temp);
    double u = pm_gpt_rng_uniform(rng) * tot, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += pow((double)probs[i], 1.0 / temp);
        if (u < acc) return i;
    }
    return V - 1;
}

/* --ids' prompt ("50256 464"), for a model whose tokens are not bytes and
 * that carries no tokenizer (trained on llm.c's GPT-2 files, say): ids
 * 0..V-1 separated by white space. There is no default: a padded
 * vocabulary's last id is padding, not those files' end of text. */
static int prompt_ids(const char *prompt, int given, int32_t V, uint32_t **ids, size_t *n) {
    *n = 0, *ids = NULL;
    if (!given) return pm_cli_fail("sample: --ids needs --prompt: the token ids to start from");
    if (!(*ids = pm_malloc((strlen(prompt) / 2 + 1) * sizeof **ids))) /* ids need a gap */
        return pm_cli_fail("out of memory");
    for (const char *p = prompt; *p;) {
        char *end = (char *)p;
        long v = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : -1;
        if (v < 0 || v >= V || (*end && !isspace((unsigned char)*end))) {
            pm_free(*ids), *ids = NULL;
            return pm_cli_fail("sample: --ids: --prompt is not token ids 0..%d separated by "
                               "spaces", V - 1);
        }
        (*ids)[(*n)++] = (uint32_t)v;
        for (p = end; isspace((unsigned char)*p); p++) {}
    }
    return 0;
}

/* The checkpoint's tokenizer (NULL: bytes) and the prompt's ids under it. */
static int open_tokenizer(const char *ckpt, const char *prompt, pm_tokenizer **tk,
                          uint32_t **ids, size_t *n) {
    void *model;
    size_t len;
    pm_err err = {{0}};
    *tk = NULL, *ids = NULL;
    if (pm_ckpt_load_tokenizer(ckpt, &model, &len, &err)) return pm_cli_fail("%s", err.msg);
    if (!model) return 0;
    pm_status st = pm_tokenizer_load(tk, model, len, &err);
    pm_free(model);
    if (!st) st = pm_tokenizer_encode(*tk, prompt, strlen(prompt), ids, n, &err);
    if (st) {
        pm_tokenizer_free(*tk);
        *tk = NULL;
        return pm_cli_fail("%s: its tokenizer: %s", ckpt, err.msg);
    }
    return 0;
}

/* Where the forward passes run: one device's parameters and workspace, or
 * a forward-only pipeline; either way the next token's probabilities. */
typedef struct {
    const pm_gpt_config *c;
    float *params;   /* one device: the whole model's parameters (owned) */
    void *work;      /* one device: its workspace (owned) */
    pm_pipe *pp;     /* or a pipeline of forward-only devices (owned) */
    float *probs;    /* (vocab) the next token's probabilities (owned) */
} sampler;

static const float *next_probs(sampler *sm, const int32_t *tok, int T) {
    if (!sm->pp) {
        pm_gpt_forward(sm->c, 1, T, sm->params, tok, NULL, sm->work);
        pm_gpt_work_probs_row(sm->c, 1, T, sm->params, sm->work, (size_t)T - 1, sm->probs);
        return sm->probs;
    }
    pm_err err = {{0}};
    if (pm_pipe_forward(sm->pp, tok, T, sm->probs, &err)) {
        pm_cli_fail("sample: %s", err.msg);
        return NULL;
    }
    return sm->probs;
}

/* Prints the prompt and n drawn tokens after it: bytes one at a time, ids
 * (ptok without a tokenizer), or with a tokenizer the decoded text at the
 * end (a piece alone may be part of a character). Tokens are drawn from
 * ids 0..live-1: a vocabulary padded past the data's (--pad-vocab) ends
 * in ids nothing decodes. */
static int generate(sampler *sm, const pm_tokenizer *tk, const uint32_t *ptok, size_t plen,
                    const char *prompt, size_t n, double temp, int seed, int live) {
    const pm_gpt_config *c = sm->c;
    size_t total = plen + n;
    int ids = !tk && ptok;
    int32_t *tok = malloc((total ? total : 1) * sizeof *tok);
    if (!tok) return pm_cli_fail("out of memory");
    for (size_t i = 0; i < plen; i++) tok[i] = ptok ? (int32_t)ptok[i] : (uint8_t)prompt[i];
    if (!ptok) fwrite(prompt, 1, plen, stdout);
    for (size_t i = 0; ids && i < plen; i++) printf("%s%d", i ? " " : "", tok[i]);
    pm_gpt_rng rng;
    pm_gpt_rng_seed(&rng, (uint64_t)seed, 0x73616d706c65ull);
    int rc = 0;
    for (size_t k = plen; k < total && !rc; k++) {
        size_t start = k > (size_t)c->ctx ? k - (size_t)c->ctx : 0;
        const float *probs = next_probs(sm, tok + start, (int)(k - start));
        if (!probs) rc = 1;
        else tok[k] = draw(probs, live, temp, &rng);
        if (!rc && ids) printf(" %d", tok[k]), fflush(stdout);
        else if (!rc && !tk) putchar(tok[k]), fflush(stdout);
    }
    if (!rc && tk) {
        char *text;
        size_t len;
        pm_err err = {{0}};
        if (pm_tokenizer_decode(tk, (const uint32_t *)tok, total, &text, &len, &err)) {
            rc = pm_cli_fail("%s", err.msg);
        } else {
            fwrite(text, 1, len, stdout);
            pm_free(text);
        }
    }
    putchar('\n');
    free(tok);
    return rc;
}

/* One device: the whole parameters and one sequence's workspace. */
static size_t one_device_bytes(const pm_gpt_config *c) {
    return pm_gpt_num_params(c) * sizeof(float) + pm_gpt_work_bytes(c, 1, c->ctx);
}

/* A forward-only plan on p devices (one sequence, the head whole). */
static pm_status plan_on(pm_plan *pl, const pm_gpt_config *c, int p, size_t budget, pm_err *err) {
    pm_train_cfg cfg = {.model = *c, .batch = 1, .micro = 1, .seed = 1};
    cfg.model.head_parts = 1;
    pm_optim_defaults(&cfg.opt, 1);
    pm_plan_req rq = {.p = p, .kind = "1f1b", .forward_only = 1, .device_mem = budget,
                      .head_parts = 1};
    return pm_plan_make(pl, &cfg, &rq, err);
}

/* The pipeline: --pp P, or the fewest devices (up to the layers) whose
 * forward-only plan fits the budget; each loads only its layers. */
static int open_pipeline(sampler *sm, const char *ckpt, int pp_opt, size_t budget) {
    pm_err err = {{0}};
    pm_plan pl = {0};
    int most = pm_gpt_num_layers(sm->c), p = pp_opt ? pp_opt : 2;
    if (pp_opt > most) /* a device holds one layer at least */
        return pm_cli_fail("sample: --pp %d: the checkpoint's model has %d layers (the "
                           "embedding, %d blocks and the head), so at most --pp %d", pp_opt,
                           most, sm->c->layers, most);
    pm_status st = PM_ERR_MEMLIMIT;
    for (; p <= most && st == PM_ERR_MEMLIMIT; p++) {
        st = plan_on(&pl, sm->c, p, budget, &err);
        if (pp_opt) break;
    }
    if (st) return pm_cli_fail("sample: %s", err.msg);
    /* the devices are threads of this process: together they need the machine */
    size_t all = 0, have = pm_mem_physical();
    for (int g = 0; g < pl.nd; g++) all += pl.dev[g].total;
    if (have && all > have) {
        char a[32], b[32];
        int devices = pl.p;
        pm_bytes_str(all, a, sizeof a), pm_bytes_str(have, b, sizeof b);
        pm_plan_free(&pl);
        return pm_cli_fail("sample: %d device threads need %s together but this machine has %s",
                           devices, a, b);
    }
    char one[32], dev[32];
    pm_bytes_str(one_device_bytes(sm->c), one, sizeof one);
    pm_bytes_str(pl.dev[pl.busiest].total, dev, sizeof dev);
    fprintf(stderr, "sample: the model needs %s on one device; sampling through %d devices "
            "(%s the busiest)\n", one, pl.p, dev);
    sm->probs = malloc((size_t)sm->c->vocab * sizeof *sm->probs);
    if (!sm->probs) st = pm_errf(&err, PM_ERR_NOMEM, "out of memory");
    if (!st) st = pm_pipe_create(&sm->pp, &pl, NULL, &err);
    pm_plan_free(&pl);
    if (!st) st = pm_pipe_load(sm->pp, ckpt, 0, NULL, &err);
    return st ? pm_cli_fail("%s", err.msg) : 0;
}

typedef struct {
    const char *ckpt, *prompt;
    int n, threads, seed, pp, ids;
    size_t budget; /* --device-mem; 0: this machine's memory */
    double temp;
} sample_opts;

#define F(x) offsetof(sample_opts, x)
static const pm_cli_opt OPTS[] = {
    {"--ckpt", 'r', 0, 0, F(ckpt), NULL, NULL, 0},
    {"--prompt", 's', 0, 0, F(prompt), NULL, NULL, 0},
    {"-n", 'i', 0, 0, F(n), NULL, NULL, 0},
    {"--threads", 'i', 1, 64, F(threads), NULL, NULL, 0},
    {"--device-mem", 'z', 0, 0, F(budget), NULL, NULL, 0},
    {"--pp", 'i', 1, 1024, F(pp), NULL, NULL, 0},
    {"--seed", 'i', 0, 0, F(seed), NULL, NULL, 0},
    {"--temperature", 'p', 0, 0, F(temp), NULL, NULL, 0},
    {"--ids", 'f', 1, 0, F(ids), NULL, NULL, 0},
};
#undef F

int pm_cmd_sample(int argc, char **argv) {
    sample_opts o = {.prompt = "\n", .n = 200, .threads = 1, .seed = 1, .temp = 1.0};
    int at[sizeof OPTS / sizeof OPTS[0]] = {0}; /* where each was given: --prompt's matters */
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], &o, at};
    int rc = pm_cli_parse("sample", argc, argv, 1, &set, 1, NULL, NULL);
    if (rc == 2) sample_usage(stdout);
    if (rc) return rc == 2 ? 0 : 1;
    if (!o.ckpt) {
        sample_usage(stderr);
        return pm_cli_fail("sample: --ckpt FILE is required");
    }
    if (o.ids && !*o.prompt) return pm_cli_fail("sample: --ids: --prompt holds no token ids");
    const char *ckpt = o.ckpt, *prompt = *o.prompt ? o.prompt : "\n";
    pm_blas_threads(o.threads);
    pm_err err = {{0}};
    pm_ckpt_info info;
    if (pm_ckpt_info_read(ckpt, &info, &err)) return pm_cli_fail("%s", err.msg);
    sampler sm = {.c = &info.cfg.model};
    size_t need = one_device_bytes(sm.c), have = o.budget ? o.budget : pm_mem_physical();
    rc = 1;
    if (!o.pp && !o.budget && have && need > have) { /* threads would need it all the same */
        char a[32], b[32];
        pm_bytes_str(need, a, sizeof a), pm_bytes_str(have, b, sizeof b);
        pm_cli_fail("sample: the model needs %s but this machine has %s", a, b);
        goto out;
    }
    if (o.pp || (have && need > have)) {
        if (open_pipeline(&sm, ckpt, o.pp, o.budget)) goto out;
    } else if (pm_ckpt_load_params(ckpt, &info, &sm.params, &err) ||
               !(sm.work = malloc(pm_gpt_work_bytes(sm.c, 1, sm.c->ctx))) ||
               !(sm.probs = malloc((size_t)sm.c->vocab * sizeof *sm.probs))) {
        pm_cli_fail("%s", sm.params ? "out of memory" : err.msg);
        goto out;
    }
    pm_tokenizer *tk = NULL;
    uint32_t *ptok = NULL;
    size_t plen = strlen(prompt);
    if (o.ids ? prompt_ids(prompt, pm_cli_given(&set, "--prompt"), sm.c->vocab, &ptok, &plen)
              : open_tokenizer(ckpt, prompt, &tk, &ptok, &plen))
        goto out;
    if (!o.ids && !tk && sm.c->vocab > 256) /* padded bytes, or ids that print as noise */
        fprintf(stderr, "pipemem: sample: %s carries no tokenizer and its vocabulary is %d, "
                "so it draws bytes (ids 0..255); if its tokens are not bytes (llm.c's GPT-2 "
                "files), give --ids\n", ckpt, (int)sm.c->vocab);
    int live = sm.c->vocab; /* what the data can hold: a tokenizer's pieces, or bytes */
    if (tk && (int)pm_tokenizer_vocab(tk) < live) live = (int)pm_tokenizer_vocab(tk);
    if (!tk && !o.ids && live > 256) live = 256;
    rc = generate(&sm, tk, ptok, plen, prompt, (size_t)o.n, o.temp, o.seed, live);
    pm_free(ptok);
    pm_tokenizer_free(tk);
out:
    pm_pipe_destroy(sm.pp);
    free(sm.probs);
    free(sm.work);
    pm_free(sm.params);
    return rc;
}
