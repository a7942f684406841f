/* test_reference.c: the C model and trainer against PyTorch 1.13 on a tiny
 * GPT (vocab 256, ctx 16, dim 32, heads 4, layers 2, batch 2). The reference
 * file tests/data/gpt_reference.bin was written by scripts/torch_reference.py
 * from the checkpoint this file writes with --write-ckpt (see the script's
 * header to regenerate). Checks: same parameters (hash), log-softmax of the
 * logits within 1e-4, loss within 1e-5 relative, each gradient tensor within
 * 1e-4 of its largest magnitude, and 10 AdamW steps' losses within 1e-4. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipemem/pm_train.h"
#include "model/passes.h"
#include "train/trainer.h"
#include "train/ckpt.h"

#define REF_STEPS 10

static pm_train_cfg ref_cfg(void) {
    pm_train_cfg c = {.model = {256, 16, 32, 4, 2}, .batch = 2, .micro = 1, .seed = 1234};
    pm_optim_defaults(&c.opt, REF_STEPS);
    c.opt.lr = 1e-2f;
    c.opt.warmup = 2;
    return c;
}

static uint8_t dummy_text[64];
static pm_tokens dummy = PM_TOKENS_BYTES(dummy_text, sizeof dummy_text);

/* ---- reading the reference file ---------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
    int bad;
} rd;
static uint32_t rd_u32(rd *r) {
    if (r->end - r->p < 4) {
        r->bad = 1;
        return 0;
    }
    uint32_t x;
    memcpy(&x, r->p, 4);
    r->p += 4;
    return x;
}
static const void *rd_bytes(rd *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const void *q = r->p;
    r->p += n;
    return q;
}

typedef struct {
    int32_t cfg[7]; /* vocab ctx dim heads layers B T */
    uint64_t param_hash;
    const int32_t *tok, *tgt;
    float loss;
    const float *logits;
    uint32_t nsteps;
    const float *losses;
    uint32_t ntensors;
    const uint8_t *tensors; /* start of the per-tensor records */
    const uint8_t *end;     /* end of the records (the checksum) */
} ref_file;

static char *ref_buf;

static void load_ref(ref_file *f) {
    const char *path = getenv("PM_REF_FILE");
    if (!path) path = "tests/data/gpt_reference.bin";
    size_t len;
    pm_err err = {{0}};
    if (pm_read_file(path, PM_CORPUS_MAX, &ref_buf, &len, &err)) fail_msg("%s", err.msg);
    assert_true(len > 16);
    uint64_t want;
    memcpy(&want, ref_buf + len - 8, 8);
    assert_true(pm_fnv1a64(PM_FNV_OFFSET, ref_buf, len - 8) == want);
    rd r = {(const uint8_t *)ref_buf, (const uint8_t *)ref_buf + len - 8, 0};
    assert_memory_equal(rd_bytes(&r, 8), "PMREF001", 8);
    assert_int_equal(rd_u32(&r), 1);
    for (int i = 0; i < 7; i++) f->cfg[i] = (int32_t)rd_u32(&r);
    memcpy(&f->param_hash, rd_bytes(&r, 8), 8);
    size_t bt = (size_t)f->cfg[5] * (size_t)f->cfg[6];
    f->tok = rd_bytes(&r, bt * 4);
    f->tgt = rd_bytes(&r, bt * 4);
    memcpy(&f->loss, rd_bytes(&r, 4), 4);
    f->logits = rd_bytes(&r, bt * (size_t)f->cfg[0] * 4);
    f->nsteps = rd_u32(&r);
    f->losses = rd_bytes(&r, (size_t)f->nsteps * 4);
    f->ntensors = rd_u32(&r);
    f->tensors = r.p;
    f->end = r.end;
    assert_false(r.bad);
}

static int setup(void **state) {
    (void)state;
    return 0;
}
static int teardown(void **state) {
    (void)state;
    free(ref_buf);
    ref_buf = NULL;
    return 0;
}

/* ---- the checks --------------------------------------------------------------- */

static void test_matches_pytorch(void **state) {
    (void)state;
    ref_file f;
    load_ref(&f);
    pm_train_cfg c = ref_cfg();
    const int32_t want_cfg[7] = {c.model.vocab, c.model.ctx, c.model.dim, c.model.heads,
                                 c.model.layers, c.batch, c.model.ctx};
    assert_memory_equal(f.cfg, want_cfg, sizeof want_cfg);
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, &c, &dummy, 0, &err), PM_OK);
    if (pm_fnv1a64(PM_FNV_OFFSET, t.params, t.n_params * 4) != f.param_hash)
        fail_msg("the model's initial parameters differ from those the reference was made "
                 "from; regenerate it (scripts/torch_reference.py header)");
    const pm_gpt_config *m = &c.model;
    int B = c.batch, T = m->ctx, V = m->vocab;

    /* Logits: the model exposes probabilities, so compare log p with
     * PyTorch's log_softmax(logits) (logits are defined up to a row shift). */
    pm_gpt_forward(m, B, T, t.params, f.tok, f.tgt, t.work);
    float *probs = malloc((size_t)B * T * V * sizeof *probs);
    assert_non_null(probs);
    for (int r = 0; r < B * T; r++)
        pm_gpt_work_probs_row(m, B, T, t.params, t.work, (size_t)r, probs + (size_t)r * V);
    double worst = 0;
    for (int r = 0; r < B * T; r++) {
        const float *lg = f.logits + (size_t)r * V;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, lg[v]);
        for (int v = 0; v < V; v++) s += exp(lg[v] - mx);
        for (int v = 0; v < V; v++) {
            double want = lg[v] - mx - log(s), got = log((double)probs[(size_t)r * V + v]);
            worst = fmax(worst, fabs(want - got));
        }
    }
    print_message("log-softmax max |diff| %.3g\n", worst);
    assert_true(worst < 1e-4);
    free(probs);

    memset(t.grads, 0, t.n_params * sizeof(float));
    float loss = pm_gpt_forward_backward(m, B, T, t.params, t.grads, f.tok, f.tgt, 1.0f, t.work);
    print_message("loss C %.7f torch %.7f\n", loss, f.loss);
    assert_true(fabs(loss - f.loss) <= 1e-5 * fabs(f.loss));

    /* Gradients, tensor by tensor in slab order, names checked too. */
    rd r = {f.tensors, f.end, 0};
    pm_gpt_tensor tens[PM_GPT_MAX_TENSORS];
    uint32_t seen = 0;
    for (int l = 0; l < pm_gpt_num_layers(m); l++) {
        int nt = pm_gpt_layer_tensors(m, l, tens);
        for (int i = 0; i < nt; i++, seen++) {
            uint32_t nl = rd_u32(&r);
            const char *name = rd_bytes(&r, nl);
            uint32_t numel = rd_u32(&r);
            const void *graw = rd_bytes(&r, (size_t)numel * 4);
            assert_false(r.bad);
            /* Names have any length, so the floats may be unaligned: copy. */
            float *g = malloc((size_t)numel * 4 + 4);
            assert_non_null(g);
            memcpy(g, graw, (size_t)numel * 4);
            if (strlen(tens[i].name) != nl || memcmp(name, tens[i].name, nl) ||
                numel != tens[i].numel)
                fail_msg("tensor %u: reference has %.*s (%u), model has %s (%zu)", seen,
                         (int)nl, name, numel, tens[i].name, tens[i].numel);
            const float *cg = t.grads + pm_gpt_layer_offset(m, l) + tens[i].offset;
            double big = 0, diff = 0;
            size_t at = 0;
            for (size_t k = 0; k < numel; k++) {
                big = fmax(big, fabs(g[k]));
                if (fabs(g[k] - cg[k]) > diff) diff = fabs(g[k] - cg[k]), at = k;
            }
            if (diff > 1e-4 * big)
                fail_msg("grad %s: max |diff| %.3g at %zu (C %.7g, torch %.7g), largest %.3g",
                         tens[i].name, diff, at, cg[at], g[at], big);
            free(g);
        }
    }
    assert_int_equal(seen, f.ntensors);

    /* 10 AdamW steps on the same batch. */
    double worst_step = 0;
    for (uint32_t s = 0; s < f.nsteps; s++) {
        pm_step_info si;
        assert_int_equal(pm_trainer_step_batch(&t, f.tok, f.tgt, &si, &err), PM_OK);
        worst_step = fmax(worst_step, fabs(si.loss - f.losses[s]));
        if (fabs(si.loss - f.losses[s]) > 1e-4)
            fail_msg("AdamW step %u: loss C %.6f torch %.6f", s + 1, si.loss, f.losses[s]);
    }
    print_message("10 steps: loss %.4f -> %.4f, max |diff| %.3g\n", f.losses[0],
                  f.losses[f.nsteps - 1], worst_step);
    assert_true(f.losses[f.nsteps - 1] < f.losses[0]); /* the steps did train */
    pm_trainer_free(&t);
}

/* Writes the checkpoint the reference script reads (see its header). */
static int write_ckpt(const char *path) {
    pm_train_cfg c = ref_cfg();
    pm_err err = {{0}};
    pm_trainer t;
    if (pm_trainer_init(&t, &c, &dummy, 0, &err) || pm_ckpt_save(&t, path, &err)) {
        fprintf(stderr, "test_reference: %s\n", err.msg);
        return 1;
    }
    pm_trainer_free(&t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-ckpt")) return write_ckpt(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_pytorch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
