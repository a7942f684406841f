/* test_cli_inputs.c: the data commands under hostile input, through the
 * built binary (PM_BIN): endless and directory inputs to `prepare`, a
 * missing data directory for `train`. Each bad request must end in one line
 * on stderr, exit 1, quickly. (The schedule commands' hostile inputs are in
 * test_generators.c.) */
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
int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_inputs_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
