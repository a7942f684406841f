/* cmd_sample.c: `pipemem sample --ckpt FILE --prompt TEXT -n N`: loads a
 * checkpoint's parameters and prints the prompt followed by N generated
 * bytes. Each new byte re-runs the forward pass over the last ctx tokens
 * and samples from softmax(logits / temperature) with a seeded PCG32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_tokenizer.h"
#include "pipemem/pm_gpt.h"
#include "pipemem/pm_train.h"

static void sample_usage(FILE *f) {
    fprintf(f, "usage: pipemem sample --ckpt FILE [--prompt TEXT] [-n N] [--temperature X]\n"
               "         [--seed S] [--threads N]\n"
               "  Prints TEXT and N tokens the model generates after it, decoded with the\n"
               "  tokenizer the checkpoint carries (bytes without one). Defaults: prompt\n"
               "  \"\\n\", N 200, temperature 1, seed 1; below 1, the temperature keeps to\n"
               "  likelier tokens.\n"
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

/* Prints the prompt and n drawn tokens after it: bytes one at a time, or
 * with a tokenizer the decoded text at the end (a piece alone may be part
 * of a character). */
static int generate(const pm_gpt_config *c, const float *params, const pm_tokenizer *tk,
                    const uint32_t *ptok, size_t plen, const char *prompt, size_t n, double temp,
                    int seed) {
    size_t total = plen + n;
    int32_t *tok = malloc((total ? total : 1) * sizeof *tok);
    void *work = malloc(pm_gpt_work_bytes(c, 1, c->ctx));
    if (!tok || !work) {
        free(tok), free(work);
        return pm_cli_fail("out of memory");
    }
    for (size_t i = 0; i < plen; i++) tok[i] = tk ? (int32_t)ptok[i] : (uint8_t)prompt[i];
    if (!tk) fwrite(prompt, 1, plen, stdout);
    pm_gpt_rng rng;
    pm_gpt_rng_seed(&rng, (uint64_t)seed, 0x73616d706c65ull);
    for (size_t k = plen; k < total; k++) {
        size_t start = k > (size_t)c->ctx ? k - (size_t)c->ctx : 0;
        int T = (int)(k - start);
        pm_gpt_forward(c, 1, T, params, tok + start, NULL, work);
        const float *probs = pm_gpt_work_probs(c, 1, T, work) + (size_t)(T - 1) * c->vocab;
        tok[k] = draw(probs, c->vocab, temp, &rng);
        if (!tk) putchar(tok[k]), fflush(stdout);
    }
    int rc = 0;
    if (tk) {
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
    free(work);
    return rc;
}

int pm_cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "\n";
    int n = 200, threads = 1, seed = 1;
    double temp = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            sample_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ckpt") || !strcmp(a, "--prompt")) {
            if (!v) return pm_cli_fail("%s needs a value", a);
            *(a[2] == 'c' ? &ckpt : &prompt) = v;
        } else if (!strcmp(a, "-n")) {
            if (pm_cli_int(a, v, 0, &n)) return 1;
        } else if (!strcmp(a, "--threads")) {
            if (pm_cli_int_range(a, v, 1, 64, &threads)) return 1;
        } else if (!strcmp(a, "--seed")) {
            if (pm_cli_int(a, v, 0, &seed)) return 1;
        } else if (!strcmp(a, "--temperature")) {
            if (pm_cli_double(a, v, &temp)) return 1;
            if (temp <= 0) return pm_cli_fail("--temperature: '%s' must be > 0", v);
        } else {
            return pm_cli_fail("sample: unknown option '%s' (try 'pipemem sample --help')", a);
        }
        i++;
    }
    if (!ckpt) {
        sample_usage(stderr);
        return pm_cli_fail("sample: --ckpt FILE is required");
    }
    if (!*prompt) prompt = "\n";
    pm_blas_threads(threads);
    pm_err err = {{0}};
    pm_ckpt_info info;
    float *params;
    if (pm_ckpt_load_params(ckpt, &info, &params, &err)) return pm_cli_fail("%s", err.msg);
    pm_tokenizer *tk = NULL;
    uint32_t *ptok = NULL;
    size_t plen = strlen(prompt);
    if (open_tokenizer(ckpt, prompt, &tk, &ptok, &plen)) {
        free(params);
        return 1;
    }
    int rc = generate(&info.cfg.model, params, tk, ptok, plen, prompt, (size_t)n, temp, seed);
    pm_free(ptok);
    pm_tokenizer_free(tk);
    free(params);
    return rc;
}
