/* test_cli_inputs.c: the commands under hostile input, through the
 * built binary (PM_BIN): every case once crashed, ran away or misreported.
 * Each bad request must end in one line on stderr, exit 1, quickly, and
 * leave an existing output file as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[] = "/tmp/pm_test_cli_inputs_XXXXXX";
static const char *bin;

static int setup(void **state) {
    (void)state;
    bin = getenv("PM_BIN");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct {
    int status;      /* exit status, -1 if killed */
    int lines;       /* lines of stderr */
    char err[1024];  /* first line of stderr */
    double seconds;  /* wall time */
} run_result;

/* Runs `PM_BIN args` with stdout discarded (a time limit of 60 s stops a
 * runaway); stderr is captured. */
static run_result run(const char *args) {
    run_result r = {0};
    char cmd[1200], errf[300];
    snprintf(errf, sizeof errf, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "timeout 60 %s %s >/dev/null 2>%s", bin, args,
             errf);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = system(cmd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    r.seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    FILE *f = fopen(errf, "r");
    assert_non_null(f);
    char buf[1024];
    while (fgets(buf, sizeof buf, f)) {
        if (!r.lines) snprintf(r.err, sizeof r.err, "%s", buf);
        r.lines++;
    }
    fclose(f);
    return r;
}

/* A bad request: exit 1, one line containing `want`, within `secs`. */
static void expect_error(const char *args, const char *want, double secs) {
    run_result r = run(args);
    if (r.status != 1 || r.lines != 1 || !strstr(r.err, want) || r.seconds > secs)
        fail_msg("pipemem %s: status %d, %d lines, %.2f s, '%s' (wanted '%s' within %.0f s)",
                 args, r.status, r.lines, r.seconds, r.err, want, secs);
}

static void test_1f1b_v_large_p_builds(void **state) {
    (void)state;
    if (!bin) skip();
    run_result r = run("schedule --kind 1f1b-v -p 508 -m 3");
    assert_int_equal(r.status, 0);
    r = run("compare -p 600 -m 2");
    assert_int_equal(r.status, 0);
}

static void test_endless_inputs_stop_at_the_limit(void **state) {
    (void)state;
    if (!bin) skip();
    expect_error("schedule --from /dev/zero", "/dev/zero: larger than the 67108864-byte limit",
                 20);
    expect_error("block /dev/zero", "/dev/zero: larger than the 67108864-byte limit", 20);
    expect_error("schedule --from /tmp", "/tmp: is a directory", 5);
}

static void test_prepare_inputs_bounded(void **state) {
    (void)state;
    if (!bin) skip();
    char args[600];
    snprintf(args, sizeof args, "prepare /dev/zero -o %s/d", dir);
    expect_error(args, "/dev/zero: larger than the 1073741824-byte limit", 60);
    snprintf(args, sizeof args, "prepare %s -o %s/d", dir, dir);
    expect_error(args, "is a directory", 5);
    snprintf(args, sizeof args, "train --data %s/nodata --steps 1", dir);
    run_result r = run(args);
    assert_int_equal(r.status, 1);
    assert_int_equal(r.lines, 1);
}

static void test_sizes_checked_before_work(void **state) {
    (void)state;
    if (!bin) skip();
    /* linear validation: 200,000 passes validate and simulate in well
     * under a second (the quadratic sweep took over 30 s at p = 100000) */
    run_result r = run("schedule --kind 1f1b -p 100000 -m 3");
    assert_int_equal(r.status, 0);
    if (r.seconds > 10) fail_msg("1f1b p=100000 m=3 took %.1f s", r.seconds);
    expect_error("search -p 4096 -m 1 --mem-limit 1", "search supports p up to 128", 5);
    expect_error("search -p 16777216 -m 1 --mem-limit 1", "search supports p up to 128", 5);
    expect_error("schedule --kind 1f1b -p 2 -m 1000000000",
                 "1f1b supports stages x microbatches up to 4194304", 5);
    expect_error("schedule --kind auto-v -p 200 -m 4 --mem-limit 1", "auto-v supports p up to 128",
                 5);
    expect_error("schedule --kind gpipe -p 2000000 -m 1", "gpipe supports p up to 1048576", 5);
    expect_error("schedule --kind 1f1b -p 2 -m 10000000000", "is not an integer in 1..", 5);
}

static void test_costs_must_be_representable(void **state) {
    (void)state;
    if (!bin) skip();
    expect_error("search -p 4 -m 8 --costs 1e308,1e308,1e308 --mem-limit 1",
                 "cannot be represented", 5);
    expect_error("schedule --kind zb -p 4 -m 8 --costs 1e300,1e300,1e300", "cannot be represented",
                 5);
}

static void test_messages_once_and_named(void **state) {
    (void)state;
    if (!bin) skip();
    expect_error("schedule --kind 1f1b -p", "-p needs a value", 5);
    expect_error("schedule --kind", "--kind needs a value", 5);
    expect_error("schedule --bogus 3", "unknown option '--bogus'", 5);
    expect_error("schedule --me 3", "unknown option '--me'", 5);
}

/* A bad option never touches -o; a good run replaces it whole. */
static void test_output_untouched_on_error(void **state) {
    (void)state;
    if (!bin) skip();
    char path[300], args[600];
    snprintf(path, sizeof path, "%s/k.txt", dir);
    static const char *const bad[] = {
        "schedule --kind 1f1b -p 2 -m 3 --format bogus -o %s",
        "schedule --kind nosuch -p 2 -m 3 -o %s",
        "compare -p 2 -m 4 --format bogus -o %s",
        "curve -p 2 -m 4 --format bogus -o %s",
        "search -p 2 -m 4 --mem-limit 1 --format bogus -o %s",
        "block blocks/v-min-p4.block --format bogus -o %s",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("keep\n", f);
        fclose(f);
        snprintf(args, sizeof args, bad[k], path);
        run_result r = run(args);
        assert_int_equal(r.status, 1);
        char got[16] = "";
        f = fopen(path, "r");
        assert_non_null(f);
        if (!fgets(got, sizeof got, f)) got[0] = 0;
        fclose(f);
        if (strcmp(got, "keep\n")) fail_msg("pipemem %s changed the output to '%s'", args, got);
    }
    snprintf(args, sizeof args, "schedule --kind 1f1b -p 2 -m 3 -o %s", path);
    assert_int_equal(run(args).status, 0);
    char tmp[310];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    FILE *f = fopen(path, "r");
    char line[200];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_string_equal(line, "# 1f1b: p=2 m=3 placement=single stages=2\n");
    expect_error("schedule --kind 1f1b -p 2 -m 3 --format json -o /dev/full",
                 "/dev/full: write failed", 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_v_large_p_builds),
        cmocka_unit_test(test_endless_inputs_stop_at_the_limit),
        cmocka_unit_test(test_prepare_inputs_bounded),
        cmocka_unit_test(test_sizes_checked_before_work),
        cmocka_unit_test(test_costs_must_be_representable),
        cmocka_unit_test(test_messages_once_and_named),
        cmocka_unit_test(test_output_untouched_on_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
