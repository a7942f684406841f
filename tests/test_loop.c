/* test_loop.c: the library's training loop (pm_train_loop) with a fake
 * driver: the order and cadence of steps, evaluations and saves, stopping
 * early, resuming from a step count, a failing step ending the loop with its
 * own error, and a diverged model (a non-finite validation loss) stopping
 * the loop before anything is saved. Expected sequences are written out by
 * hand from the loop's contract in pm_train.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"

#include "pipemem/pm_train.h"

static uint8_t text[3000];
static pm_tokens toks = PM_TOKENS_BYTES(text, sizeof text);
static char dir[] = "/tmp/pm_test_loop_XXXXXX";

typedef struct {
    int steps, evals, fail_at, nan_from; /* nan_from: evaluations from this one on are NaN */
    int64_t saved_step;                  /* the state's step at the last save */
    uint64_t saved_pos;                  /* its data position */
    char log[512]; /* one letter per event: s step, e eval, E end; S after a save */
    int64_t last_step;
} fake;

static pm_status fake_step(void *ctx, const int32_t *inp, const int32_t *tgt, pm_step_info *info,
                           pm_err *err) {
    fake *f = ctx;
    (void)inp, (void)tgt;
    if (++f->steps == f->fail_at) return pm_errf(err, PM_ERR_NUMERIC, "scripted failure");
    *info = (pm_step_info){.loss = 10.0 - f->steps, .grad_norm = 1, .lr = 1e-3};
    return PM_OK;
}

static pm_status fake_eval(void *ctx, const int32_t *inp, const int32_t *tgt, int n,
                           float *losses, pm_err *err) {
    fake *f = ctx;
    (void)inp, (void)tgt, (void)err;
    f->evals++;
    for (int i = 0; i < n; i++) losses[i] = f->nan_from && f->evals >= f->nan_from ? NAN : 2.5f;
    return PM_OK;
}

static pm_status fake_save(void *ctx, const char *path, const pm_train_state *st, pm_err *err) {
    fake *f = ctx;
    (void)path, (void)err;
    f->saved_step = st->step, f->saved_pos = st->train.next;
    return PM_OK;
}

static void fake_report(void *ctx, const pm_loop_event *ev) {
    fake *f = ctx;
    size_t n = strlen(f->log);
    f->log[n] = ev->kind == PM_LOOP_STEP ? 's' : ev->kind == PM_LOOP_EVAL ? 'e' : 'E';
    if (ev->saved) f->log[++n] = 'S';
    f->log[n + 1] = 0;
    if (ev->kind == PM_LOOP_STEP) {
        assert_true(ev->info.loss == 10.0 - f->steps); /* the step's own figures */
        assert_int_equal(ev->step, f->last_step + 1);
        f->last_step = ev->step;
    } else {
        assert_true(isfinite(ev->val_loss) && ev->val_loss > 0);
    }
}

static void init_state(pm_train_state *t, int steps) {
    pm_train_cfg c = {.model = {256, 8, 16, 2, 1}, .batch = 2, .micro = 1, .seed = 5};
    pm_optim_defaults(&c.opt, steps);
    pm_err err = {{0}};
    assert_int_equal(pm_train_state_init(t, &c, &toks, &err), PM_OK);
}

static void run(pm_train_state *t, fake *f, int64_t stop_at, int eval_every, const char *save,
                pm_status want, const char *why) {
    pm_train_driver drv = {.ctx = f, .step = fake_step, .eval = fake_eval, .save = fake_save,
                           .report = fake_report, .report_ctx = f};
    pm_loop_opts o = {.stop_at = stop_at, .eval_every = eval_every, .eval_batches = 1,
                      .val = &toks, .save = save};
    pm_err err = {{0}};
    f->last_step = t->step;
    assert_int_equal(pm_train_loop(t, &drv, &o, &err), want);
    if (want) assert_non_null(strstr(err.msg, why));
}

static void test_cadence(void **state) {
    (void)state;
    pm_train_state t;
    init_state(&t, 7);
    fake f = {0};
    run(&t, &f, 7, 3, NULL, PM_OK, NULL);
    /* eval after steps 3 and 6 (not 7: the end evaluates), then the end */
    assert_string_equal(f.log, "sssesssesE");
    assert_int_equal(f.steps, 7);
    assert_int_equal(t.step, 7);
    assert_int_equal(f.evals, 3); /* one microbatch each: one call */
    assert_int_equal(t.train.next, 7 * 2); /* 7 steps of 2 windows */
    pm_train_state_free(&t);
}

static void test_saves_stop_and_resume(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/l.ckpt", dir);
    pm_train_state t;
    init_state(&t, 6);
    fake f = {0};
    run(&t, &f, 4, 2, path, PM_OK, NULL); /* stopped after step 4 of 6 */
    assert_string_equal(f.log, "sseSssES"); /* step 4: the end's eval and save, once */
    assert_int_equal(f.saved_step, 4);
    assert_int_equal(f.saved_pos, 4 * 2);
    /* a later run from step 4 does the remaining two steps */
    fake g = {0};
    run(&t, &g, 6, 2, NULL, PM_OK, NULL);
    assert_string_equal(g.log, "ssE"); /* step 6 is the end: no separate eval */
    assert_int_equal(t.step, 6);
    pm_train_state_free(&t);
}

static void test_failing_step_stops(void **state) {
    (void)state;
    pm_train_state t;
    init_state(&t, 10);
    fake f = {.fail_at = 3};
    run(&t, &f, 10, 2, NULL, PM_ERR_NUMERIC, "scripted failure");
    assert_string_equal(f.log, "sse"); /* nothing after the failure, no end */
    assert_int_equal(t.step, 2);
    pm_train_state_free(&t);
}

/* The second evaluation finds the parameters diverged: the loop stops
 * there, naming the step, and that evaluation's save never happens. */
static void test_diverged_not_saved(void **state) {
    (void)state;
    pm_train_state t;
    init_state(&t, 10);
    fake f = {.nan_from = 2};
    run(&t, &f, 10, 2, "unused.ckpt", PM_ERR_NUMERIC, "step 4: the validation loss is nan");
    assert_string_equal(f.log, "sseSss"); /* step 2 saved; step 4 neither reported nor saved */
    assert_int_equal(f.saved_step, 2);
    pm_train_state_free(&t);
}

static int setup(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)("the loop runs "[i % 14]);
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cadence),
        cmocka_unit_test(test_saves_stop_and_resume),
        cmocka_unit_test(test_failing_step_stops),
        cmocka_unit_test(test_diverged_not_saved),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
