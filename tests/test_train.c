/* test_train.c: AdamW against a hand-computed step, the LR schedule's
 * shape, clipping, gradient accumulation, bitwise resume from a checkpoint,
 * every checkpoint error, memory and config errors, and (when PM_BIN names
 * the built binary) the CLI's prepare/train/sample end to end. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "pipemem/pm_train.h"

static char dir[256];
static uint8_t text[4000];
static pm_tokens toks = PM_TOKENS_BYTES(text, sizeof text);

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pm_test_train_%d", (int)getpid());
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    /* A learnable text: a short sentence repeated with a counter digit. */
    const char *s = "the quick brown fox jumps over the lazy dog ";
    size_t L = strlen(s);
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)s[i % L];
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static pm_train_cfg tiny(int batch, int micro, int steps) {
    pm_train_cfg c = {.model = {256, 8, 16, 2, 2}, .batch = batch, .micro = micro, .seed = 5};
    pm_optim_defaults(&c.opt, steps);
    c.opt.lr = 3e-3f;
    return c;
}

static void test_adamw_hand_step(void **state) {
    (void)state;
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    pm_optim_adamw_args a = {0.1f, 0.1f, 0.9f, 0.999f, 1e-8f, 1, 1.0f};
    pm_optim_adamw_update(&p, &g, &m, &v, 1, &a);
    /* t=1: m=0.05, v=0.00025, mhat=0.5, vhat=0.25, step 0.1*0.5/0.5;
     * p = 1*(1-0.01) - 0.1 = 0.89. */
    assert_true(fabsf(m - 0.05f) < 1e-7f);
    assert_true(fabsf(v - 0.00025f) < 1e-8f); /* 1 - 0.999f is off by 1e-8 */
    assert_true(fabsf(p - 0.89f) < 1e-6f);
    /* t=2 with g=-1 and gscale 0.5 (so the used gradient is -0.5):
     * m = 0.045 - 0.05 = -0.005, v = 0.00024975 + 0.00025 = 0.00049975,
     * mhat = -0.005/0.19, vhat = 0.00049975/0.001999. */
    g = -1.0f;
    a.t = 2;
    a.gscale = 0.5f;
    pm_optim_adamw_update(&p, &g, &m, &v, 1, &a);
    double mhat = -0.005 / 0.19, vhat = 0.00049975 / (1.0 - 0.999 * 0.999);
    double want = 0.89 * 0.99 - 0.1 * mhat / (sqrt(vhat) + 1e-8);
    assert_true(fabs(p - want) < 2e-6);
    /* No decay when wd = 0: a zero gradient leaves the weight unchanged
     * except for the moment's momentum (m = 0 and v = 0 here). */
    float q = 2.0f, z = 0.0f, mq = 0.0f, vq = 0.0f;
    pm_optim_adamw_args b = {0.1f, 0.0f, 0.9f, 0.999f, 1e-8f, 1, 1.0f};
    pm_optim_adamw_update(&q, &z, &mq, &vq, 1, &b);
    assert_true(q == 2.0f);
}

static void test_lr_schedule_shape(void **state) {
    (void)state;
    pm_optim_cfg c;
    pm_optim_defaults(&c, 101);
    c.lr = 1.0f;
    c.lr_min_frac = 0.1f;
    c.warmup = 10;
    assert_true(fabs(pm_optim_lr_at(&c, 0) - 0.1) < 1e-12);   /* 1/10 */
    assert_true(fabs(pm_optim_lr_at(&c, 4) - 0.5) < 1e-12);   /* 5/10 */
    assert_true(fabs(pm_optim_lr_at(&c, 9) - 1.0) < 1e-12);   /* warm-up ends at the peak */
    assert_true(fabs(pm_optim_lr_at(&c, 10) - 1.0) < 1e-12);  /* cosine starts at the peak */
    assert_true(fabs(pm_optim_lr_at(&c, 55) - 0.55) < 1e-7);  /* halfway: (1 + 0.1) / 2 */
    assert_true(fabs(pm_optim_lr_at(&c, 100) - 0.1) < 1e-7); /* last step at the floor (0.1f) */
    for (int s = 10; s < 100; s++) assert_true(pm_optim_lr_at(&c, s + 1) <= pm_optim_lr_at(&c, s));
    for (int s = 0; s < 9; s++) assert_true(pm_optim_lr_at(&c, s + 1) > pm_optim_lr_at(&c, s));
    pm_optim_defaults(&c, 5);
    assert_int_equal(c.warmup, 0);
    assert_true(pm_optim_lr_at(&c, 0) == (double)c.lr);
}

static void test_clipping(void **state) {
    (void)state;
    float g[2] = {3.0f, 4.0f};
    double norm = sqrt(pm_optim_sumsq(g, 2));
    assert_true(fabs(norm - 5.0) < 1e-12);
    float s = pm_optim_clip_scale(norm, 1.0f);
    assert_true(fabs(s * norm - 1.0) < 1e-6); /* clipped norm = the limit */
    assert_true(pm_optim_clip_scale(norm, 10.0f) == 1.0f);
    assert_true(pm_optim_clip_scale(norm, 0.0f) == 1.0f); /* disabled */
}

/* Runs `steps` steps, storing each loss; returns the trainer (caller frees). */
static void run_steps(pm_trainer *t, int steps, double *loss) {
    pm_err err = {{0}};
    for (int i = 0; i < steps; i++) {
        pm_step_info si;
        assert_int_equal(pm_trainer_step(t, &si, &err), PM_OK);
        loss[i] = si.loss;
    }
}

static void test_resume_is_bitwise(void **state) {
    (void)state;
    enum { N = 6 };
    pm_train_cfg c = tiny(4, 2, N);
    pm_err err = {{0}};
    pm_trainer a, b;
    double la[N], lb[N];
    assert_int_equal(pm_trainer_init(&a, &c, &toks, 0, &err), PM_OK);
    run_steps(&a, N, la);
    char path[300];
    snprintf(path, sizeof path, "%s/half.ckpt", dir);
    assert_int_equal(pm_trainer_init(&b, &c, &toks, 0, &err), PM_OK);
    run_steps(&b, N / 2, lb);
    assert_int_equal(pm_ckpt_save(&b, path, &err), PM_OK);
    pm_trainer_free(&b);
    assert_int_equal(pm_trainer_init(&b, &c, &toks, 0, &err), PM_OK);
    assert_int_equal(pm_ckpt_load(&b, path, &err), PM_OK);
    assert_int_equal(b.step, N / 2);
    run_steps(&b, N - N / 2, lb + N / 2);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(a.params, b.params, 3 * a.n_params * sizeof(float)); /* params, grads, m */
    assert_memory_equal(a.v, b.v, a.n_params * sizeof(float));
    /* The header reads back. */
    pm_ckpt_info info;
    assert_int_equal(pm_ckpt_info_read(path, &info, &err), PM_OK);
    assert_int_equal(info.step, N / 2);
    assert_int_equal(info.data_pos, (N / 2) * 4);
    assert_int_equal(info.cfg.model.layers, 2);
    pm_trainer_free(&a);
    pm_trainer_free(&b);
}

static void test_accumulation_matches_one_batch(void **state) {
    (void)state;
    /* K=2 microbatches of 2 see the same 4 windows as K=1 of 4; the mean
     * loss and the update must agree to rounding. */
    pm_train_cfg c1 = tiny(4, 1, 3), c2 = tiny(4, 2, 3);
    pm_err err = {{0}};
    pm_trainer a, b;
    double la[3], lb[3];
    assert_int_equal(pm_trainer_init(&a, &c1, &toks, 0, &err), PM_OK);
    assert_int_equal(pm_trainer_init(&b, &c2, &toks, 0, &err), PM_OK);
    run_steps(&a, 3, la);
    run_steps(&b, 3, lb);
    for (int i = 0; i < 3; i++) assert_true(fabs(la[i] - lb[i]) < 1e-5 * fabs(la[i]));
    double maxd = 0;
    for (size_t i = 0; i < a.n_params; i++) maxd = fmax(maxd, fabs(a.params[i] - b.params[i]));
    assert_true(maxd < 1e-5);
    pm_trainer_free(&a);
    pm_trainer_free(&b);
}

static void test_training_lowers_loss(void **state) {
    (void)state;
    enum { N = 40 };
    pm_train_cfg c = tiny(4, 1, N);
    c.opt.lr = 1e-2f;
    pm_err err = {{0}};
    pm_trainer t;
    double l[N];
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    run_steps(&t, N, l);
    assert_true(fabs(l[0] - log(256.0)) < 0.3); /* starts near uniform */
    assert_true(l[N - 1] < l[0] - 1.5);         /* and learns the sentence */
    double vl;
    assert_int_equal(pm_trainer_eval(&t, &toks, 2, &vl, &err), PM_OK);
    assert_true(vl < l[0] - 1.5);
    pm_trainer_free(&t);
}

/* Saves a checkpoint of the tiny model at step 1 to path. */
static void make_ckpt(const char *path) {
    pm_train_cfg c = tiny(4, 2, 4);
    pm_err err = {{0}};
    pm_trainer t;
    double l;
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    run_steps(&t, 1, &l);
    assert_int_equal(pm_ckpt_save(&t, path, &err), PM_OK);
    pm_trainer_free(&t);
}

static void poke(const char *path, long off, int byte) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    fputc(byte, f);
    fclose(f);
}

static void expect_load_error(const char *path, const pm_train_cfg *c, pm_status want,
                              const char *needle) {
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, c, &toks, 0, &err), PM_OK);
    pm_status st = pm_ckpt_load(&t, path, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("want status %d with '%s', got %d: %s", want, needle, st, err.msg);
    assert_null(strchr(err.msg, '\n'));
    pm_trainer_free(&t);
}

static void test_ckpt_errors(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/bad.ckpt", dir);
    pm_train_cfg c = tiny(4, 2, 4);
    make_ckpt(p);
    assert_int_equal(truncate(p, PM_CKPT_HEADER + 100), 0);
    expect_load_error(p, &c, PM_ERR_FORMAT, "truncated");
    make_ckpt(p);
    poke(p, PM_CKPT_HEADER + 1000, 0x5a); /* a parameter byte */
    expect_load_error(p, &c, PM_ERR_FORMAT, "checksum");
    make_ckpt(p);
    poke(p, 0, 'X');
    expect_load_error(p, &c, PM_ERR_FORMAT, "bad magic");
    make_ckpt(p);
    poke(p, 8, 9);
    expect_load_error(p, &c, PM_ERR_FORMAT, "version 9");
    make_ckpt(p);
    pm_train_cfg other = c;
    other.model.layers = 3;
    expect_load_error(p, &other, PM_ERR_ARG, "layers = 2 but this run asks for 3");
    other = c;
    other.batch = 8;
    expect_load_error(p, &other, PM_ERR_ARG, "batch = 4");
    snprintf(p, sizeof p, "%s/none.ckpt", dir);
    expect_load_error(p, &c, PM_ERR_IO, "none.ckpt");
}

/* Reads a whole small file (a test checkpoint). */
static uint8_t *slurp(const char *path, size_t *n) {
    char *buf;
    pm_err err;
    if (pm_read_file(path, 1 << 24, &buf, n, &err)) fail_msg("%s", err.msg);
    return (uint8_t *)buf;
}

static void spill(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* A checkpoint of version 1, 2 or 3 made by hand from a version-4 file's
 * bytes b4, in the old layouts (pm_train.h), independent of ckpt.c: the
 * same header with the version changed (version 1: no data identity), the
 * three slabs, version 3's tokenizer section, then one FNV-1a-64 of every
 * preceding byte. Returns a malloc'd file of *n bytes. */
static uint8_t *old_layout(const uint8_t *b4, uint32_t version, size_t *n) {
    size_t end = PM_CKPT_HEADER + 12 * (size_t)pm_get_u64(b4 + 112);
    size_t tok = version >= 3 ? 8 + (size_t)pm_get_u64(b4 + end) : 0;
    *n = end + tok + 8;
    uint8_t *b = malloc(*n);
    assert_non_null(b);
    memcpy(b, b4, end + tok);
    pm_put_u32(b + 8, version);
    if (version == 1) pm_put_u64(b + 120, 0);
    pm_put_u64(b + *n - 8, pm_fnv1a64(PM_FNV_OFFSET, b, *n - 8));
    return b;
}

/* Messages say what is really wrong: a short file is truncated (not "bad
 * magic"), a corrupted header field is corruption (the checksum is checked
 * before any field is compared with the run), a directory is a directory. */
static void test_ckpt_messages(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/msg.ckpt", dir);
    pm_train_cfg c = tiny(4, 2, 4);
    make_ckpt(p);
    assert_int_equal(truncate(p, 12), 0);
    expect_load_error(p, &c, PM_ERR_FORMAT, "truncated: 12 bytes, a checkpoint has at least");
    make_ckpt(p);
    poke(p, 54, 0x7f); /* a byte of lr */
    expect_load_error(p, &c, PM_ERR_FORMAT, "checksum mismatch");
    expect_load_error(dir, &c, PM_ERR_IO, "is a directory");
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    assert_int_equal(pm_ckpt_save(&t, dir, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "is a directory"));
    pm_trainer_free(&t);
}

/* A checkpoint remembers its data: another token file is refused; a
 * version-1 file (no identity) still loads. */
static void test_ckpt_data_identity(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/id.ckpt", dir);
    pm_train_cfg c = tiny(4, 2, 4);
    make_ckpt(p);
    uint8_t other_text[sizeof text];
    memcpy(other_text, text, sizeof text);
    other_text[100] ^= 1;
    pm_tokens other = PM_TOKENS_BYTES(other_text, sizeof other_text);
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, &c, &other, 0, &err), PM_OK);
    assert_int_equal(pm_ckpt_load(&t, p, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "trained on other data"));
    /* rewrite as version 1 (no identity, not compared), by hand */
    size_t n, n1;
    uint8_t *b = slurp(p, &n);
    assert_int_equal(pm_get_u32(b + 8), 4);
    uint8_t *b1 = old_layout(b, 1, &n1);
    spill(p, b1, n1);
    pm_free(b);
    free(b1);
    pm_ckpt_info info;
    assert_int_equal(pm_ckpt_info_read(p, &info, &err), PM_OK);
    assert_int_equal(info.version, 1);
    assert_int_equal(pm_ckpt_load(&t, p, &err), PM_OK); /* nothing to compare with */
    assert_int_equal(t.step, 1);
    pm_trainer_free(&t);
}

/* A failed load leaves the trainer bitwise as it was. */
static void test_ckpt_failed_load_changes_nothing(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/keep.ckpt", dir);
    pm_train_cfg c = tiny(4, 2, 4);
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    double l[2];
    run_steps(&t, 2, l);
    size_t bytes = 4 * t.n_params * sizeof(float);
    uint8_t *before = malloc(bytes);
    assert_non_null(before);
    memcpy(before, t.params, bytes);
    int64_t step = t.step;
    uint64_t next = t.train.next;
    static const long corrupt_at[] = {PM_CKPT_HEADER + 4, 40, -1};
    for (int k = 0; k < 3; k++) {
        make_ckpt(p); /* a good checkpoint of another step */
        if (corrupt_at[k] >= 0) poke(p, corrupt_at[k], 0x33);
        else t.cfg.seed ^= 1; /* a config mismatch, found after the checksum */
        assert_int_not_equal(pm_ckpt_load(&t, p, &err), PM_OK);
        if (corrupt_at[k] < 0) t.cfg.seed ^= 1;
        assert_memory_equal(t.params, before, bytes);
        assert_int_equal(t.step, step);
        assert_int_equal(t.train.next, next);
    }
    free(before);
    pm_trainer_free(&t);
}

/* Failed saves: a device (refused: a checkpoint is a regular file), a
 * missing directory, an unwritable tmp path, every allocation failing in
 * turn: each is one clear error, and the checkpoint already at the path
 * stays loadable and bitwise the same. */
static void test_ckpt_failed_save_keeps_old(void **state) {
    (void)state;
    char p[300];
    snprintf(p, sizeof p, "%s/old.ckpt", dir);
    make_ckpt(p);
    size_t n0;
    uint8_t *old = slurp(p, &n0);
    pm_train_cfg c = tiny(4, 2, 4);
    pm_err err = {{0}};
    pm_trainer t;
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    double l[3];
    run_steps(&t, 3, l);
    assert_int_equal(pm_ckpt_save(&t, "/dev/full", &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "/dev/full: not a regular file"));
    assert_int_equal(pm_ckpt_save(&t, "/nonexistent-dir/x.ckpt", &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.ckpt"));
    /* a path under a regular file: its temporary cannot be created */
    char under[330];
    snprintf(under, sizeof under, "%s/x.ckpt", p);
    assert_int_equal(pm_ckpt_save(&t, under, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, under));
    for (int64_t k = 1;; k++) {
        pm_alloc_fail_at(k, 0);
        pm_status st = pm_ckpt_save(&t, p, &err);
        int fired = pm_alloc_failed();
        pm_alloc_fail_at(0, 0);
        if (!fired) {
            assert_int_equal(st, PM_OK);
            break;
        }
        assert_int_equal(st, PM_ERR_NOMEM);
        size_t n;
        uint8_t *now = slurp(p, &n);
        assert_int_equal(n, n0);
        assert_memory_equal(now, old, n0);
        pm_free(now);
        assert_int_equal(chk_tmp_count(p), 0);
    }
    pm_ckpt_info info;
    assert_int_equal(pm_ckpt_info_read(p, &info, &err), PM_OK);
    assert_int_equal(info.step, 3); /* the last save went through */
    pm_free(old);
    pm_trainer_free(&t);
}

static void test_config_and_memory_errors(void **state) {
    (void)state;
    pm_err err = {{0}};
    pm_trainer t;
    pm_train_cfg c = tiny(4, 3, 4);
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "--microbatches 3 must divide --batch 4"));
    c = tiny(4, 1, 4);
    c.model.heads = 3; /* 16 % 3 != 0 */
    assert_int_not_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    assert_non_null(strstr(err.msg, "heads"));
    /* A tiny model over a 1 KiB limit: refused, with its need named. */
    c = tiny(4, 1, 4);
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 1024, &err), PM_ERR_MEMLIMIT);
    assert_non_null(strstr(err.msg, "needs"));
    assert_null(t.params);
    /* A model far above any machine's RAM: 48 layers of width 16384 hold
     * 48 * 12 * 16384^2 = 155e9 parameters, 2.3 TiB of slabs. */
    c.model = (pm_gpt_config){.vocab = 256, .ctx = 64, .dim = 16384, .heads = 16, .layers = 48};
    size_t need = pm_train_mem_bytes(&c, &err);
    assert_true(need > (size_t)2000 << 30);
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_ERR_MEMLIMIT);
    /* Context larger than the data. */
    c = tiny(4, 1, 4);
    pm_tokens small = PM_TOKENS_BYTES(text, 8);
    assert_int_equal(pm_trainer_init(&t, &c, &small, 0, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "context"));
}

/* ---- CLI end to end ---------------------------------------------------------- */

/* Runs a shell command; returns its exit status, stderr's first line in
 * line (if not NULL) and the number of stderr lines. */
static int sh(const char *cmd, char *line, size_t cap, int *nlines) {
    char full[4608], errp[300];
    snprintf(errp, sizeof errp, "%s/stderr.txt", dir);
    snprintf(full, sizeof full, "{ %s; } 2>%s", cmd, errp);
    int rc = system(full);
    FILE *f = fopen(errp, "r");
    int n = 0;
    char buf[1024];
    if (line) line[0] = 0;
    while (f && fgets(buf, sizeof buf, f)) {
        if (n == 0 && line) snprintf(line, cap, "%s", buf);
        n++;
    }
    if (f) fclose(f);
    if (nlines) *nlines = n;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void test_cli_end_to_end(void **state) {
    (void)state;
    const char *bin = getenv("PM_BIN");
    if (!bin) skip();
    char cmd[4096], line[1024], txt[300];
    int n;
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
    FILE *f = fopen(txt, "w");
    assert_non_null(f);
    fwrite(text, 1, sizeof text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s prepare %s -o %s/d", bin, txt, dir);
    assert_int_equal(sh(cmd, line, sizeof line, &n), 0);
    snprintf(cmd, sizeof cmd,
             "%s train --data %s/d --layers 1 --dim 16 --heads 2 --ctx 8 --batch 2 "
             "--microbatches 2 --steps 4 --eval-every 1 --threads 1 --save %s/m.ckpt --json "
             "> %s/out.json",
             bin, dir, dir, dir);
    assert_int_equal(sh(cmd, line, sizeof line, &n), 0);
    char out[2048] = {0};
    snprintf(txt, sizeof txt, "%s/out.json", dir);
    f = fopen(txt, "r");
    assert_non_null(f);
    assert_non_null(fgets(out, sizeof out, f));
    fclose(f);
    const char *keys[] = {"\"steps\": 4", "\"final_loss\"", "\"val_loss\"", "\"median_step_ms\"",
                          "\"tokens_per_s\"", "\"gflops_per_s\""};
    for (int i = 0; i < 6; i++)
        if (!strstr(out, keys[i])) fail_msg("no %s in %s", keys[i], out);
    /* sample: the prompt, then exactly the 40 bytes the model draws, then '\n' */
    snprintf(cmd, sizeof cmd, "%s/m.ckpt", dir);
    if (chk_sample(bin, cmd, "the", 40, 7, line, sizeof line)) fail_msg("%s", line);
    /* Interrupted after step 2 and resumed: the same final checkpoint, byte
     * for byte, and the same JSON losses as the straight run. */
    const char *common = "--layers 1 --dim 16 --heads 2 --ctx 8 --batch 2 --microbatches 2 "
                         "--steps 4 --eval-every 1 --threads 1 --json";
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --save %s/half.ckpt --stop-after 2 "
             "> /dev/null && %s train --data %s/d %s --resume %s/half.ckpt --save %s/r.ckpt "
             "> %s/r.json && cmp -s %s/m.ckpt %s/r.ckpt", bin, dir, common, dir, bin, dir, common,
             dir, dir, dir, dir, dir);
    assert_int_equal(sh(cmd, line, sizeof line, &n), 0);
    snprintf(txt, sizeof txt, "%s/r.json", dir);
    char rout[2048] = {0};
    f = fopen(txt, "r");
    assert_non_null(f);
    assert_non_null(fgets(rout, sizeof rout, f));
    fclose(f);
    const char *a1 = strstr(out, "\"final_loss\""), *a2 = strstr(rout, "\"final_loss\"");
    assert_non_null(a1);
    assert_non_null(a2);
    assert_memory_equal(a1, a2, strcspn(a1, "m")); /* final_loss and val_loss, up to "median" */
    /* The same training on 2 device threads (zb-h1), interrupted after step 2
     * and resumed, ends in the single-device run's checkpoint, byte for byte. */
    const char *pp = "--layers 1 --dim 16 --heads 2 --ctx 8 --batch 2 --microbatches 2 "
                     "--steps 4 --eval-every 1 --pp 2 --schedule zb-h1";
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --save %s/pph.ckpt --stop-after 2 "
             "> /dev/null 2>&1 && %s train --data %s/d %s --resume %s/pph.ckpt --save %s/ppr.ckpt "
             "> /dev/null 2>&1 && cmp -s %s/m.ckpt %s/ppr.ckpt", bin, dir, pp, dir, bin, dir, pp,
             dir, dir, dir, dir);
    assert_int_equal(sh(cmd, line, sizeof line, &n), 0);
    /* Bad inputs: non-zero exit, one line on stderr naming the problem. */
    struct {
        const char *args, *needle;
    } bad[] = {
        {"prepare %s/empty.txt -o %s/e", "no bytes"},
        {"train --data %s/d --ctx 5000 --dim 16 --heads 2 --layers 1 --steps 1", "fewer than context"},
        {"train --data %s/d --ctx 8 --dim 16 --heads 3 --layers 1 --steps 1", "heads"},
        {"train --data %s/d --ctx 8 --dim 16384 --heads 16 --layers 48 --steps 1", "needs"},
        {"train --data %s/v2 --ctx 8 --dim 16 --heads 2 --layers 1 --steps 1", "version 3"},
        {"train --data %s/d --ctx 8 --dim 16 --heads 2 --layers 2 --steps 8 --batch 2 "
         "--microbatches 2 --resume %s/m.ckpt", "layers = 1"},
        /* one parser for both modes: mode-only options are refused in the other */
        {"train --data %s/d --pp 2 --schedule 1f1b --threads 2", "--threads is for single-device"},
        {"train --data %s/d --steps 1 --timeline %s/t.svg", "--timeline is for pipeline runs"},
        {"train --data %s/d --schedule auto", "--schedule auto needs --mem-limit"},
        {"train --data %s/d --pp 2 --bogus", "unknown option '--bogus'"},
    };
    snprintf(cmd, sizeof cmd, ": > %s/empty.txt && mkdir -p %s/v2 && cp %s/d/* %s/v2/ && "
             "printf '\\003' | dd of=%s/v2/train.bin bs=1 seek=8 conv=notrunc 2>/dev/null",
             dir, dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[600];
        snprintf(args, sizeof args, bad[i].args, dir, dir);
        snprintf(cmd, sizeof cmd, "%s %s", bin, args);
        int rc = sh(cmd, line, sizeof line, &n);
        if (rc == 0 || n != 1 || !strstr(line, bad[i].needle))
            fail_msg("'%s': exit %d, %d stderr lines, first: %s", args, rc, n, line);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_hand_step),
        cmocka_unit_test(test_lr_schedule_shape),
        cmocka_unit_test(test_clipping),
        cmocka_unit_test(test_resume_is_bitwise),
        cmocka_unit_test(test_accumulation_matches_one_batch),
        cmocka_unit_test(test_training_lowers_loss),
        cmocka_unit_test(test_ckpt_errors),
        cmocka_unit_test(test_ckpt_messages),
        cmocka_unit_test(test_ckpt_data_identity),
        cmocka_unit_test(test_ckpt_failed_load_changes_nothing),
        cmocka_unit_test(test_ckpt_failed_save_keeps_old),
        cmocka_unit_test(test_config_and_memory_errors),
        cmocka_unit_test(test_cli_end_to_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
