/* test_validate.c: one broken schedule per rule the validator enforces, each
 * checked for its status code AND for a message that names the offending
 * pass or device; plus agreement between the validator's memory check and
 * the simulator's peaks. The broken schedules start from generator output
 * (or are built by hand) and are changed in one place, so the expected
 * offender is known from the change itself. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "pipemem/pm_sched.h"
#include "schedule/sched.h"

static void gen(pm_sched *s, const char *kind, int p, int m) {
    pm_err err = {{0}};
    pm_sched_req req = {.p = p, .m = m};
    pm_status st = pm_sched_generate(s, kind, &req, &err);
    if (st) fail_msg("%s p=%d m=%d: %s", kind, p, m, err.msg);
}

/* Index of (kind, stage, mb) in device d's list; fails the test if absent. */
static int64_t find(const pm_sched *s, int d, int kind, int stage, int mb) {
    const pm_pass *l = pm_sched_dev(s, d);
    for (int64_t i = 0; i < s->len[d]; i++)
        if (l[i].kind == kind && l[i].stage == stage && l[i].mb == mb) return i;
    fail_msg("device %d has no %s of stage %d mb %d", d, pm_pass_names[kind], stage, mb);
    return -1;
}

static void swap(pm_sched *s, int d, int64_t i, int64_t j) {
    pm_pass *l = pm_sched_dev(s, d), t = l[i];
    l[i] = l[j];
    l[j] = t;
}

/* Validates s, expecting status want and every needle in the message. */
static void expect(const pm_sched *s, const pm_cost *c, double limit, pm_status want,
                   const char *n1, const char *n2) {
    pm_err err = {{0}};
    pm_status st = pm_sched_validate(s, c, limit, &err);
    if (st != want)
        fail_msg("status %d (%s), expected %d; message: %s", st, pm_status_str(st), want, err.msg);
    if (n1 && !strstr(err.msg, n1)) fail_msg("message '%s' lacks '%s'", err.msg, n1);
    if (n2 && !strstr(err.msg, n2)) fail_msg("message '%s' lacks '%s'", err.msg, n2);
    assert_null(strchr(err.msg, '\n'));
}

static void test_valid_schedules_pass(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "zb-h1", 4, 6);
    expect(&s, NULL, 0, PM_OK, NULL, NULL);
    pm_sched_free(&s);
    /* A hand-written 1F1B, p = 2, m = 2. */
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 2, 2, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 1);
    pm_sched_push(&s, 1, PM_PASS_F, 1, 0);
    pm_sched_push(&s, 1, PM_PASS_BW, 1, 0);
    pm_sched_push(&s, 1, PM_PASS_F, 1, 1);
    pm_sched_push(&s, 1, PM_PASS_BW, 1, 1);
    expect(&s, NULL, 0, PM_OK, NULL, NULL);
    pm_sched_free(&s);
}

static void test_wrong_device(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "1f1b", 3, 4);
    pm_sched_dev(&s, 1)[2].stage = 2; /* device 1's third pass now claims stage 2 */
    char want[64];
    const pm_pass *ps = &pm_sched_dev(&s, 1)[2];
    snprintf(want, sizeof want, "device 1, pass 2 (2%s%d)", pm_pass_names[ps->kind], ps->mb);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, "stage 2 is held by device 2, not device 1");
    pm_sched_free(&s);
}

static void test_missing_pass(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "zb-h1", 3, 5);
    /* Drop device 2's last pass and expect it to be named as missing. */
    pm_pass gone = pm_sched_dev(&s, 2)[--s.len[2]];
    char want[80];
    snprintf(want, sizeof want, "stage %d microbatch %d has no %s pass", gone.stage, gone.mb,
             pm_pass_names[gone.kind]);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, "device 2");
    pm_sched_free(&s);
    /* A missing F. */
    gen(&s, "1f1b", 2, 3);
    int64_t i = find(&s, 0, PM_PASS_F, 0, 2);
    memmove(&pm_sched_dev(&s, 0)[i], &pm_sched_dev(&s, 0)[i + 1],
            (size_t)(s.len[0] - i - 1) * sizeof(pm_pass));
    s.len[0]--;
    expect(&s, NULL, 0, PM_ERR_INVALID, "stage 0 microbatch 2 has no F pass", NULL);
    pm_sched_free(&s);
}

static void test_duplicate_pass(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "1f1b", 2, 3);
    int64_t first = find(&s, 1, PM_PASS_F, 1, 0), later = find(&s, 1, PM_PASS_F, 1, 2);
    pm_sched_dev(&s, 1)[later].mb = 0;
    char want[64], at[32];
    snprintf(want, sizeof want, "device 1, pass %lld (1F0): duplicate", (long long)later);
    snprintf(at, sizeof at, "at pass %lld", (long long)first);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, at);
    pm_sched_free(&s);
}

static void test_fused_and_split_mixed(void **state) {
    (void)state;
    pm_sched s;
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 1, 1, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_B, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 0);
    expect(&s, NULL, 0, PM_ERR_INVALID, "device 0, pass 2 (0BW0)", "already has a B pass");
    pm_sched_free(&s);
}

static void test_w_before_b(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "zb-h1", 3, 4);
    int64_t b = find(&s, 0, PM_PASS_B, 0, 1), w = find(&s, 0, PM_PASS_W, 0, 1);
    assert_true(b < w);
    swap(&s, 0, b, w);
    char want[64];
    snprintf(want, sizeof want, "device 0, pass %lld (0W1): runs before 0B1", (long long)b);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, NULL);
    pm_sched_free(&s);
}

/* The last stage's B needs its own F on the same device. */
static void test_last_stage_b_before_f(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "zb-h1", 2, 3);
    int64_t f = find(&s, 1, PM_PASS_F, 1, 2), b = find(&s, 1, PM_PASS_B, 1, 2);
    assert_true(f < b);
    swap(&s, 1, f, b);
    char want[64];
    snprintf(want, sizeof want, "device 1, pass %lld (1B2): runs before 1F2", (long long)f);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, NULL);
    pm_sched_free(&s);
}

/* On the V placement device p-1 holds stages p-1 and p: B of stage p-1
 * needs B of stage p from the same device. */
static void test_local_chunk_order(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "zb-v", 2, 4);
    int64_t hi = find(&s, 1, PM_PASS_B, 2, 0), lo = find(&s, 1, PM_PASS_B, 1, 0);
    assert_true(hi < lo);
    swap(&s, 1, hi, lo);
    char want[64];
    snprintf(want, sizeof want, "device 1, pass %lld (1B0): runs before 2B0", (long long)hi);
    expect(&s, NULL, 0, PM_ERR_INVALID, want, NULL);
    pm_sched_free(&s);
}

/* Device 0 runs microbatch 0's backward before microbatch 1's forward;
 * device 1 insists on microbatch 1 first: each waits on the other. */
static void test_cross_device_deadlock(void **state) {
    (void)state;
    pm_sched s;
    assert_int_equal(pm_sched_init(&s, "hand", PM_PLACE_SINGLE, 2, 2, 1, NULL), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 1);
    pm_sched_push(&s, 1, PM_PASS_F, 1, 1);
    pm_sched_push(&s, 1, PM_PASS_BW, 1, 1);
    pm_sched_push(&s, 1, PM_PASS_F, 1, 0);
    pm_sched_push(&s, 1, PM_PASS_BW, 1, 0);
    expect(&s, NULL, 0, PM_ERR_DEADLOCK, "device 0 is stuck at pass 1 (0BW0) waiting for 1BW0",
           "device 1, which is stuck at pass 0 (1F1) waiting for 0F1");
    /* The simulator, written separately, agrees that it cannot run. */
    pm_cost c;
    pm_sim sim;
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_ERR_DEADLOCK);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* A three-device cycle through the loop placement: no pair waits on each
 * other directly, the replay still finds nobody can move. */
static void test_deadlock_interleaved_swap(void **state) {
    (void)state;
    pm_sched s;
    pm_err err = {{0}};
    pm_sched_req req = {.p = 3, .m = 3, .v = 2};
    assert_int_equal(pm_sched_generate(&s, "interleaved", &req, &err), PM_OK);
    /* Device 0 runs chunk 1 of microbatch 0 (stage 3) before chunk 0 of it
     * (stage 0): stage 3 needs stage 2, which needs stage 1, which needs 0. */
    int64_t a = find(&s, 0, PM_PASS_F, 0, 0), b = find(&s, 0, PM_PASS_F, 3, 0);
    swap(&s, 0, a, b);
    expect(&s, NULL, 0, PM_ERR_DEADLOCK, "device 0 is stuck at pass 0 (3F0) waiting for 2F0",
           NULL);
    pm_sched_free(&s);
}

static void test_out_of_range(void **state) {
    (void)state;
    pm_sched s;
    gen(&s, "1f1b", 2, 3);
    pm_sched_dev(&s, 0)[1].stage = 7;
    expect(&s, NULL, 0, PM_ERR_INVALID, "device 0, pass 1 (7F1)", "stage must be in 0..1");
    pm_sched_free(&s);
    gen(&s, "1f1b", 2, 3);
    pm_sched_dev(&s, 1)[3].mb = 3;
    expect(&s, NULL, 0, PM_ERR_INVALID, "device 1, pass 3 (1BW3)", "microbatch in 0..2");
    pm_sched_free(&s);
    gen(&s, "1f1b", 2, 3);
    pm_sched_dev(&s, 1)[0].mb = -1;
    expect(&s, NULL, 0, PM_ERR_INVALID, "device 1, pass 0 (1F-1)", NULL);
    pm_sched_free(&s);
    gen(&s, "1f1b", 2, 3);
    pm_sched_dev(&s, 1)[2].kind = 9;
    expect(&s, NULL, 0, PM_ERR_INVALID, "device 1, pass 2: unknown pass kind 9", NULL);
    pm_sched_free(&s);
}

/* 1F1B, p = 4: device 0's fourth forward (pass 3, 0F3) is its first to
 * hold 4 stages, i.e. 1.00 M; a limit of 0.9 M must name exactly it. */
static void test_over_memory_limit(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    gen(&s, "1f1b", 4, 8);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    expect(&s, &c, 0.9, PM_ERR_MEMLIMIT, "device 0 reaches 1.00 M at pass 3 (0F3)",
           "over the limit 0.90 M");
    expect(&s, &c, 1.0, PM_OK, NULL, NULL);
    expect(&s, NULL, 0.5, PM_OK, NULL, NULL); /* no costs: the limit is not checked */
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* The validator's running sums and the simulator's peaks are computed
 * separately; for every fixed-pattern and block kind the simulator's peak must be exactly the
 * tightest limit the validator accepts. */
static void test_memory_agrees_with_simulator(void **state) {
    (void)state;
    static const char *const named[] = {"gpipe", "1f1b",   "interleaved", "zb-h1", "zb-h2",
                                        "zb-v",  "v-min", "v-half",      "1f1b-v"};
    pm_mem mem = {1, -0.25, -0.75, 0};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        for (int p = 2; p <= 5; p++) {
            int m = 2 * p;
            pm_sched s;
            pm_cost c;
            pm_sim sim;
            gen(&s, named[i], p, m);
            assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, mem, NULL), PM_OK);
            assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
            double peak = pm_sim_peak_max_x(&sim);
            expect(&s, &c, peak, PM_OK, NULL, NULL);
            expect(&s, &c, peak * 0.99, PM_ERR_MEMLIMIT, "over the limit", NULL);
            pm_sim_free(&sim);
            pm_cost_free(&c);
            pm_sched_free(&s);
        }
}

static void test_cost_table_mismatch(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    gen(&s, "1f1b", 3, 3);
    assert_int_equal(pm_cost_init(&c, 2, NULL), PM_OK);
    expect(&s, &c, 1.0, PM_ERR_ARG, "costs cover 2 stages but the schedule has 3", NULL);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_schedules_pass),
        cmocka_unit_test(test_wrong_device),
        cmocka_unit_test(test_missing_pass),
        cmocka_unit_test(test_duplicate_pass),
        cmocka_unit_test(test_fused_and_split_mixed),
        cmocka_unit_test(test_w_before_b),
        cmocka_unit_test(test_last_stage_b_before_f),
        cmocka_unit_test(test_local_chunk_order),
        cmocka_unit_test(test_cross_device_deadlock),
        cmocka_unit_test(test_deadlock_interleaved_swap),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_over_memory_limit),
        cmocka_unit_test(test_memory_agrees_with_simulator),
        cmocka_unit_test(test_cost_table_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
