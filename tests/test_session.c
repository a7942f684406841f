/* test_session.c: a sweep through the library alone (pm_select.h): its
 * space (a grid in the documented order, a reproducible sample inside its
 * ranges, a tasks file, each refusal naming what is wrong), its session
 * (run, ranked, the best saved, resumed from the save directory to the same
 * losses, refused when the learning-rate schedule changed), and the
 * forecast (sequential takes exactly every task's work, no policy beats
 * the bound). */
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

#include "pipemem/pm_select.h"
#include "select/parts.h"

static char dir[256];
static char text[40000];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pm_test_session_%d", (int)getpid());
    const char *line = "the quick brown fox jumps over the lazy dog. ";
    for (size_t i = 0; i < sizeof text; i++) text[i] = line[i % strlen(line)];
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Key `name` takes `values`; label NULL (messages name the key). */
static void set(pm_sweep *sw, const char *name, const char *values) {
    pm_err e;
    for (int k = 0; k < PM_SWEEP_KEYS; k++)
        if (!strcmp(pm_sweep_key_names[k], name)) {
            if (pm_sweep_set(sw, k, values, NULL, &e)) fail_msg("%s=%s: %s", name, values, e.msg);
            return;
        }
    fail_msg("no key %s", name);
}

static void free_tasks(pm_select_task *t, int n) {
    for (int i = 0; i < n; i++) pm_select_task_free(&t[i]);
    pm_free(t);
}

/* The grid: the lists' product, the first key slowest, named t0, t1, ...;
 * every key not listed at train's default. */
static void grid_order(void **state) {
    (void)state;
    pm_sweep sw = {0};
    pm_select_task *t;
    int n;
    pm_err e;
    set(&sw, "lr", "1e-3,3e-3");
    set(&sw, "layers", "1,2");
    set(&sw, "steps", "35");
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_OK);
    assert_int_equal(n, 4);
    static const float lr[] = {1e-3f, 1e-3f, 3e-3f, 3e-3f};
    static const int layers[] = {1, 2, 1, 2};
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        assert_string_equal(t[i].name, name);
        assert_true(t[i].cfg.opt.lr == lr[i]);
        assert_int_equal(t[i].cfg.model.layers, layers[i]);
        assert_int_equal(t[i].cfg.opt.steps, 35);
        assert_int_equal(t[i].cfg.opt.warmup, 3); /* a tenth of the steps */
        assert_int_equal(t[i].cfg.model.dim, 128);
        assert_int_equal(t[i].cfg.batch, 8);
        assert_int_equal(pm_select_task_repeats(t, i), -1);
    }
    free_tasks(t, n);
    /* a list that repeats a value makes a task repeat another */
    sw = (pm_sweep){0};
    set(&sw, "dim", "32,64,32");
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_OK);
    assert_int_equal(n, 3);
    assert_int_equal(pm_select_task_repeats(t, 2), 0);
    free_tasks(t, n);
    /* nothing swept: one task of the defaults */
    sw = (pm_sweep){0};
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(t[0].cfg.model.layers, 4);
    free_tasks(t, n);
}

/* Each refusal names the key (by its label when one is given), the value
 * and what the key takes; a task that is no model names the task. */
static void space_refusals(void **state) {
    (void)state;
    pm_sweep sw = {0};
    pm_select_task *t;
    int n;
    pm_err e;
    static const struct {
        int key;
        const char *text, *label, *want;
    } bad[] = {
        {0, "1e-3,abc", "--lr", "--lr: 'abc' is not a positive number up to 3.4e38 (a float) "
                                "(in '1e-3,abc')"},
        {0, "1e-3,1e308", NULL, "lr: '1e308' is not a positive number"},
        {1, "0", NULL, "layers: '0' is not an integer 1..16777216"},
        {7, "log:0..5", "--warmup", "a log-uniform range needs a low end above 0"},
        {1, "3..1", NULL, "the low end must be below the high end"},
        {1, "1..3,4", NULL, "a range lo..hi stands alone, not in a list"},
        {8, "1073741825", NULL, "seed: '1073741825' is not an integer 0..1073741824"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        sw = (pm_sweep){0};
        assert_int_equal(pm_sweep_set(&sw, bad[k].key, bad[k].text, bad[k].label, &e),
                         PM_ERR_ARG);
        if (!strstr(e.msg, bad[k].want)) fail_msg("'%s' does not say '%s'", e.msg, bad[k].want);
    }
    sw = (pm_sweep){0};
    set(&sw, "layers", "1..3");
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "layers is a range (lo..hi): add sample=N"));
    assert_null(t);
    sw = (pm_sweep){0};
    set(&sw, "dim", "30,32");
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "task t0: model config: heads (4) must divide dim (30)"));
    sw = (pm_sweep){0};
    set(&sw, "lr", "1e-3,2e-3");
    sw.sample = 3;
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "sample=3: the lists make only 2 distinct tasks"));
}

/* A sample: that many distinct tasks, every value inside its range (an
 * integer key drawn as integers), the same seed drawing the same tasks and
 * another seed others. */
static void sample_in_ranges(void **state) {
    (void)state;
    pm_sweep sw = {0};
    pm_select_task *a, *b;
    int na, nb;
    pm_err e;
    set(&sw, "lr", "log:1e-4..1e-2");
    set(&sw, "layers", "1..3");
    set(&sw, "dim", "32,64");
    sw.sample = 20, sw.sample_seed = 7;
    assert_int_equal(pm_sweep_tasks(&sw, &a, &na, &e), PM_OK);
    assert_int_equal(pm_sweep_tasks(&sw, &b, &nb, &e), PM_OK);
    assert_int_equal(na, 20);
    assert_int_equal(nb, 20);
    int seen[4] = {0};
    for (int i = 0; i < na; i++) {
        const pm_train_cfg *c = &a[i].cfg;
        assert_true(c->opt.lr >= 1e-4f && c->opt.lr <= 1e-2f);
        assert_true(c->model.layers >= 1 && c->model.layers <= 3);
        seen[c->model.layers] = 1;
        assert_true(c->model.dim == 32 || c->model.dim == 64);
        assert_int_equal(pm_select_task_repeats(a, i), -1);
        assert_int_equal(memcmp(&a[i].cfg, &b[i].cfg, sizeof a[i].cfg), 0);
    }
    assert_true(seen[1] && seen[2] && seen[3]); /* both ends of the range drawn (seed 7) */
    free_tasks(b, nb);
    sw.sample_seed = 8;
    assert_int_equal(pm_sweep_tasks(&sw, &b, &nb, &e), PM_OK);
    int differ = 0;
    for (int i = 0; i < na; i++) differ += a[i].cfg.opt.lr != b[i].cfg.opt.lr;
    assert_true(differ > 0);
    free_tasks(a, na), free_tasks(b, nb);
}

/* A tasks file: one task a line, names given or tN, the rest at train's
 * defaults (a warm-up past the steps is the run); a bad pair is named by
 * file and line. */
static void tasks_file(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/tasks.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("name=a lr=3e-4 steps=35\n# a comment\n\nlayers=2 warmup=50 steps=20\n", f);
    fclose(f);
    pm_sweep sw = {.tasks_file = path};
    pm_select_task *t;
    int n;
    pm_err e;
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_OK);
    assert_int_equal(n, 2);
    assert_string_equal(t[0].name, "a");
    assert_true(t[0].cfg.opt.lr == 3e-4f);
    assert_int_equal(t[0].cfg.opt.warmup, 3);
    assert_int_equal(t[0].cfg.model.layers, 4);
    assert_string_equal(t[1].name, "t1");
    assert_int_equal(t[1].cfg.model.layers, 2);
    assert_int_equal(t[1].cfg.opt.warmup, 20);
    assert_true(t[1].cfg.opt.lr == 1e-3f);
    free_tasks(t, n);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("lr=1e-3\n\nlr=0\n", f);
    fclose(f);
    assert_int_equal(pm_sweep_tasks(&sw, &t, &n, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "tasks.txt:3: 'lr=0': lr must be a positive number"));
}

/* Two tasks of 2 layers in shards on 2 devices (the example's sweep). */
static void tiny_sweep(pm_sweep *sw, const char *steps) {
    *sw = (pm_sweep){0};
    set(sw, "lr", "1e-2,1e-3");
    set(sw, "layers", "2");
    set(sw, "dim", "32");
    set(sw, "heads", "2");
    set(sw, "ctx", "16");
    set(sw, "batch", "4");
    set(sw, "steps", steps);
}

/* The test text: the first nine tenths train, the rest validates. */
static void split_text(pm_tokens *tr, pm_tokens *va) {
    size_t cut = sizeof text / 10 * 9;
    *tr = (pm_tokens)PM_TOKENS_BYTES(text, cut);
    *va = (pm_tokens)PM_TOKENS_BYTES(text + cut, sizeof text - cut);
}

static pm_select_setup tiny_setup(const char *save_dir) {
    return (pm_select_setup){.run = {.devices = 2, .prefetch = PM_PREFETCH_AUTO,
                                     .eval_every = -1, .eval_batches = 2, .save_dir = save_dir},
                             .device_mem = 1 << 20};
}

/* A session runs every task, ranks them by validation loss and saves the
 * best; a second session on the same save directory resumes every task at
 * its end and reports the same losses, bit for bit; one whose tasks have
 * other steps is refused, naming the steps both ways. */
static void session_run_and_resume(void **state) {
    (void)state;
    pm_tokens tr, va;
    split_text(&tr, &va);
    char save[300], best[300];
    snprintf(save, sizeof save, "%s/sv", dir);
    snprintf(best, sizeof best, "%s/best.ckpt", dir);
    pm_sweep sw;
    pm_select_setup set_up = tiny_setup(save);
    pm_select_session s;
    pm_err e;
    double val[2];
    tiny_sweep(&sw, "4");
    for (int round = 0; round < 2; round++) {
        if (pm_select_session_init(&s, &sw, &set_up, &e) ||
            pm_select_session_partition(&s, 0, &e) ||
            pm_select_session_start(&s, &tr, &va, NULL, 0, &e) || pm_select_session_run(&s, &e))
            fail_msg("round %d: %s", round, e.msg);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.set.run.eval_every, 0); /* at the end: 10 x 2 batches / 3 > 4 steps */
        assert_int_equal(s.resumed, round ? 2 : 0);
        for (int i = 0; i < 2; i++) {
            assert_true(s.tasks[i].nshard >= 2);
            assert_int_equal(s.res[i].state, PM_SELECT_DONE);
            assert_int_equal(s.res[i].steps, 4);
            if (round && memcmp(&s.res[i].val_loss, &val[i], sizeof val[i]))
                fail_msg("task %d resumed: val %.17g, run %.17g", i, s.res[i].val_loss, val[i]);
            val[i] = s.res[i].val_loss;
        }
        int b = s.order[0];
        assert_true(s.res[b].val_loss <= s.res[s.order[1]].val_loss);
        assert_int_equal(pm_select_session_best(&s), b);
        assert_int_equal(pm_select_session_save(&s, b, best, &e), PM_OK);
        pm_ckpt_info info;
        assert_int_equal(pm_ckpt_info_read(best, &info, &e), PM_OK);
        assert_int_equal(info.step, 4);
        assert_true(info.cfg.opt.lr == s.tasks[b].cfg.opt.lr);
        pm_select_session_free(&s);
    }
    tiny_sweep(&sw, "6");
    assert_int_equal(pm_select_session_init(&s, &sw, &set_up, &e), PM_OK);
    assert_int_equal(pm_select_session_partition(&s, 0, &e), PM_OK);
    assert_int_equal(pm_select_session_start(&s, &tr, &va, NULL, 0, &e), PM_ERR_ARG);
    assert_non_null(strstr(e.msg, "task t0: "));
    assert_non_null(strstr(e.msg, "was made with opt.steps=4, this run has opt.steps=6"));
    pm_select_session_free(&s);
}

/* FNV-1a-64, written here from its definition (offset basis
 * 0xcbf29ce484222325, prime 0x100000001b3), not the library's. */
static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

/* A task's record (issue 31, defect 7): a line whose sum is its text's
 * parses to its numbers; the same line with one character changed, its
 * sum kept, with a NUL, or in the old form without a sum is refused. */
static void record_parse(void **state) {
    (void)state;
    char line[300], bad[300];
    const char *body = "step 4 loss 3.25 val_loss -0.5 ckpt 00000000000000ff";
    int n = snprintf(line, sizeof line, "%s sum %016llx\n", body,
                     (unsigned long long)fnv(body, strlen(body)));
    pm_select_record r;
    pm_err e;
    assert_int_equal(pm_select_record_parse(line, (size_t)n, &r, &e), PM_OK);
    assert_int_equal(r.step, 4);
    assert_true(r.loss == 3.25 && r.val == -0.5 && r.ckpt == 0xff);
    snprintf(bad, sizeof bad, "%s", line);
    bad[strlen("step 4 loss 3.25 val_loss -")] = '7'; /* -7.5, the sum kept */
    assert_int_equal(pm_select_record_parse(bad, (size_t)n, &r, &e), PM_ERR_FORMAT);
    assert_true(isnan(r.val)); /* nothing taken from a refused record */
    bad[strlen("step 4 loss 3.25 val_loss -")] = '0';
    bad[1] = 0;
    assert_int_equal(pm_select_record_parse(bad, (size_t)n, &r, &e), PM_ERR_FORMAT);
    const char *old = "step 4 loss -1e30 val_loss -7\n";
    assert_int_equal(pm_select_record_parse(old, strlen(old), &r, &e), PM_ERR_FORMAT);
}

/* A finished sweep whose record was edited (the issue's: t0's losses made
 * -1e30 and -7, so it would rank first) is refused as it resumes, naming
 * the record; with the record deleted it resumes, its validation loss
 * measured again on the checkpoint: the run's, bit for bit. */
static void record_tampered(void **state) {
    (void)state;
    pm_tokens tr, va;
    split_text(&tr, &va);
    char save[300], path[400];
    snprintf(save, sizeof save, "%s/tamper", dir);
    snprintf(path, sizeof path, "%s/t0.loss", save);
    pm_sweep sw;
    pm_select_setup set_up = tiny_setup(save);
    pm_select_session s;
    pm_err e;
    tiny_sweep(&sw, "3");
    double val = NAN;
    for (int round = 0; round < 3; round++) {
        if (round == 1) {
            FILE *f = fopen(path, "w");
            assert_non_null(f);
            fputs("step 3 loss -1e30 val_loss -7\n", f);
            fclose(f);
        }
        if (round == 2) assert_int_equal(unlink(path), 0);
        pm_status st = pm_select_session_init(&s, &sw, &set_up, &e);
        if (!st) st = pm_select_session_partition(&s, 0, &e);
        if (!st) st = pm_select_session_start(&s, &tr, &va, NULL, 0, &e);
        if (round == 1) {
            assert_int_equal(st, PM_ERR_FORMAT);
            if (!strstr(e.msg, "task t0: ") || !strstr(e.msg, "t0.loss: ") ||
                !strstr(e.msg, "edited or damaged"))
                fail_msg("a tampered record: %s", e.msg);
            pm_select_session_free(&s);
            continue;
        }
        if (st || pm_select_session_run(&s, &e)) fail_msg("round %d: %s", round, e.msg);
        assert_int_equal(s.res[0].state, PM_SELECT_DONE);
        if (round == 2 && memcmp(&s.res[0].val_loss, &val, sizeof val))
            fail_msg("measured again: %.17g, the run's %.17g", s.res[0].val_loss, val);
        val = s.res[0].val_loss;
        pm_select_session_free(&s);
    }
}

/* The forecast at rates given by hand: sequential runs every pass one
 * after another, so its makespan is every task's compute and moves added;
 * the bound is at least that over the devices, and no policy beats it. */
static void forecast_sums(void **state) {
    (void)state;
    pm_sweep sw;
    pm_select_setup set_up = tiny_setup(NULL);
    pm_select_session s;
    pm_select_forecast f;
    pm_err e;
    tiny_sweep(&sw, "3");
    set_up.run.eval_every = 2;
    assert_int_equal(pm_select_session_init(&s, &sw, &set_up, &e), PM_OK);
    assert_int_equal(pm_select_session_partition(&s, 0, &e), PM_OK);
    pm_select_rates r = {.flops = 1e9, .read_bps = 2e9, .write_bps = 1e9, .adamw_s = 1e-9};
    assert_int_equal(pm_select_forecast_make(&f, s.tasks, s.n, 2, &r, 2, 2, 0, &e), PM_OK);
    double sum = 0;
    for (int i = 0; i < s.n; i++) {
        assert_true(f.compute[i] > 0 && f.move[i] > 0);
        sum += f.compute[i] + f.move[i];
    }
    assert_true(fabs(f.makespan[PM_POLICY_SEQUENTIAL] - sum) <= 1e-9 * sum);
    assert_true(f.lower_bound >= sum / 2 * (1 - 1e-12));
    for (int p = 0; p < PM_POLICY_COUNT; p++)
        assert_true(f.makespan[p] >= f.lower_bound * (1 - 1e-12));
    assert_true(f.rates.flops == r.flops);
    pm_select_forecast_free(&f);
    pm_select_session_free(&s);
}

/* A forecast of many long tasks (issue 31, defect 10: 64 tasks of 1000000
 * steps took 42 to 88 s and 3 GB) simulates a bounded number of passes and
 * scales: each task's compute is exactly its FLOPs by hand at the rate
 * (every step the same, an evaluation every 10 steps), the simulated
 * passes stay at PM_SELECT_FORECAST_PASSES (give or take a step a task),
 * and the makespans of 1000 times the steps are 1000 times those of a
 * forecast simulated whole (the work scales exactly; only the ends of the
 * tasks may fall elsewhere: 2%). */
static void forecast_extrapolated(void **state) {
    (void)state;
    pm_sweep sw = {0};
    set(&sw, "lr", "1e-3,2e-3,3e-3,4e-3,5e-3,6e-3,7e-3,8e-3");
    set(&sw, "layers", "1,2,3,4,5,6,7,8");
    set(&sw, "dim", "32");
    set(&sw, "heads", "2");
    set(&sw, "ctx", "16");
    set(&sw, "batch", "4");
    set(&sw, "microbatches", "2");
    pm_select_setup set_up = tiny_setup(NULL);
    set_up.device_mem = 1 << 20; /* 1 to 5 shards */
    pm_select_rates r = {.flops = 1e9, .read_bps = 2e9, .write_bps = 1e9, .adamw_s = 1e-9};
    pm_select_forecast f[2];
    pm_err e;
    const char *steps[2] = {"20", "20000"};
    for (int k = 0; k < 2; k++) {
        pm_select_session s;
        set(&sw, "steps", steps[k]);
        assert_int_equal(pm_select_session_init(&s, &sw, &set_up, &e), PM_OK);
        assert_int_equal(pm_select_session_partition(&s, 0, &e), PM_OK);
        assert_int_equal(s.n, 64);
        assert_int_equal(pm_select_forecast_make(&f[k], s.tasks, s.n, 2, &r, 10, 2, 0, &e), PM_OK);
        int64_t most = (int64_t)PM_SELECT_FORECAST_PASSES;
        for (int i = 0; i < s.n; i++) {
            const pm_select_task *t = &s.tasks[i];
            int S = t->nshard, K = t->cfg.micro, n = t->cfg.opt.steps;
            double fl = 0, ev = 0;
            for (int q = 0; q < S; q++) {
                const pm_shard *h = &t->shard[q];
                fl += q < S - 1 ? 3 * h->flops_f + h->flops_bw : h->flops_f + h->flops_bw;
                /* eval_batches 2; an evaluation's head makes its logits, which a
                 * trainer's F leaves to B: one product of (2 x 16 tokens) x 32 x V */
                int head = h->last == pm_gpt_num_layers(&t->cfg.model);
                ev += 2 * (h->flops_f + (head ? 2.0 * 32 * 32 * t->cfg.model.vocab : 0));
            }
            double want = (n * K * fl + n / 10 * ev) / r.flops;
            if (fabs(f[k].compute[i] - want) > 1e-9 * want)
                fail_msg("%s steps, task %d: compute %.17g, by hand %.17g", steps[k], i,
                         f[k].compute[i], want);
            most += 2 * S - 1;
        }
        assert_true(f[k].passes_simulated <= most);
        assert_true(k ? f[k].scale > 1 : f[k].scale == 1);
        pm_select_session_free(&s);
    }
    for (int p = 0; p < PM_POLICY_COUNT; p++) {
        double ratio = f[1].makespan[p] / f[0].makespan[p] / 1000;
        if (fabs(ratio - 1) > 0.02)
            fail_msg("%s: 1000 times the steps, %.4f times 1000 the makespan",
                     pm_select_policy_names[p], ratio);
    }
    pm_select_forecast_free(&f[0]);
    pm_select_forecast_free(&f[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grid_order),
        cmocka_unit_test(space_refusals),
        cmocka_unit_test(sample_in_ranges),
        cmocka_unit_test(tasks_file),
        cmocka_unit_test(session_run_and_resume),
        cmocka_unit_test(forecast_sums),
        cmocka_unit_test(record_parse),
        cmocka_unit_test(record_tampered),
        cmocka_unit_test(forecast_extrapolated),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
