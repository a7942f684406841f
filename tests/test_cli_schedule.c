/* test_cli_schedule.c: the schedule commands (schedule, search, compare,
 * curve, block) through the built binary (tests/cli.h):
 *   - requests beyond the documented ranges of p and m, a missing value,
 *     costs whose makespan a double cannot hold, the library's parameter
 *     names said as the flags that set them, endless and directory inputs,
 *     data parallelism's and overlapped pairs' options: exit 1 and one line
 *     naming the limit or the flag (test_generators.c counts that the
 *     library refuses them before allocating anything);
 *   - a bad option or a failed run leaves an existing -o file as it was,
 *     and no other file; a good run replaces it whole;
 *   - `block`: the shipped files, a legal block, a collision, a malformed
 *     line, a schedule in a format;
 *   - `schedule --from FILE --polish` on polish's hand case, and the
 *     commands that polish by themselves refusing the flag. */
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
#include "cli.h"

/* Each command fails at once (exit 1; before the fix these ran for minutes
 * or grew past GBs: the library's refusals come before any allocation,
 * which test_generators.c counts) with exactly one line containing want.
 * No ulimit -v: ASan's shadow memory needs the address space. */
static void expect_one_line(const char *bin, const char *args, const char *want) {
    chk_cmd c = {0};
    char line[1024];
    int rc = chk_sh(&c, "%s %s 2>&1", bin, args), n = chk_lines(c.out);
    chk_line(c.out, 0, line, sizeof line);
    if (rc != 1 || n != 1 || !strstr(line, want))
        fail_msg("pipemem %s: exit %d, %d lines, first '%s' (want '%s')", args, rc, n, line,
                 want);
    chk_cmd_free(&c);
}

static void test_cli_limits_and_messages(void **state) {
    (void)state;
    const char *bin = chk_bin();
    /* 1.4: beyond the range, one line naming the limit, at once */
    expect_one_line(bin, "search -p 4096 -m 1 --mem-limit 1", "p <= 128");
    expect_one_line(bin, "search -p 16777216 -m 1 --mem-limit 1", "1..1048576");
    expect_one_line(bin, "schedule --kind 1f1b -p 100000 -m 1000", "16777216");
    /* 1.8: the real limit, and a missing value reported once */
    expect_one_line(bin, "schedule --kind 1f1b -p 4 -m 1000000000", "1..1048576");
    expect_one_line(bin, "schedule --kind 1f1b -p", "-p needs a value");
    expect_one_line(bin, "schedule --kind", "--kind needs a value");
    /* 1.7: costs whose makespan overflows */
    expect_one_line(bin, "search -p 4 -m 8 --costs 1e308,1e308,1e308 --mem-limit 1",
                    "--costs 1e+308,1e+308,1e+308,0: a makespan");
    expect_one_line(bin, "compare -p 4 -m 8 --costs 1e308,1,1", "--costs 1e+308,1,1,0: a makespan");
    /* the library's parameter names (req.v, req.mem_limit) as the flags */
    expect_one_line(bin, "schedule --kind 1f1b -p 4 -m 8 --chunks 3",
                    "1f1b has 1 chunk per device; --chunks 3 only fits interleaved");
    expect_one_line(bin, "schedule --kind interleaved -p 4 -m 8 --chunks 1",
                    "interleaved needs 2 or more chunks per device (got --chunks 1)");
    expect_one_line(bin, "schedule --kind auto-v -p 4 -m 8", "auto-v needs --mem-limit X");
    expect_one_line(bin, "schedule --kind zb -p 4 -m 8 --mem-limit 0.1",
                    "zb: no schedule fits --mem-limit 0.1 M for p=4 m=8");
    /* 1.2: endless inputs stop at the size limit (64 MiB), directories are named */
    expect_one_line(bin, "schedule --from /dev/zero", "/dev/zero: larger than the 67108864");
    expect_one_line(bin, "block /dev/zero", "/dev/zero: larger than the 67108864");
    expect_one_line(bin, "schedule --from /tmp", "/tmp: is a directory");
    expect_one_line(bin, "block /tmp", "/tmp: is a directory");
    /* data parallelism's options */
    expect_one_line(bin, "schedule --kind 1f1b -p 2 -m 2 --dp 0", "--dp: 0 is outside");
    expect_one_line(bin, "schedule --kind 1f1b -p 2 -m 2 --dp 2 --allreduce-cost -1",
                    "--allreduce-cost -1: must be >= 0 and below 1e300");
    /* 1e300 is finite: the limit is named, not finiteness (issue 19) */
    expect_one_line(bin, "schedule --kind 1f1b -p 2 -m 2 --dp 2 --allreduce-cost 1e300",
                    "--allreduce-cost 1e300: must be >= 0 and below 1e300");
    expect_one_line(bin, "schedule --kind 1f1b -p 2 -m 2 --allreduce-cost 1",
                    "--allreduce-cost needs --dp D > 1");
    expect_one_line(bin, "compare -p 4 -m 8 --allreduce-cost 500",
                    "--allreduce-cost needs --dp D > 1");
    expect_one_line(bin, "search -p 2 -m 4 --mem-limit 1 --dp 2",
                    "--dp and --allreduce-cost belong to 'schedule' and 'compare'");
    /* overlapped F&B pairs */
    expect_one_line(bin, "schedule --kind dualpipev -p 2 -m 4 --overlap-fb 1.5",
                    "--overlap-fb 1.5: must be between 0");
    expect_one_line(bin, "schedule --kind dualpipev -p 2 -m 4 --overlap-fb 0.5 --polish",
                    "--polish with --overlap-fb");
    expect_one_line(bin, "search -p 2 -m 4 --mem-limit 1 --overlap-fb 0.5",
                    "--overlap-fb belongs to 'schedule' and 'compare'");
}

/* 1.5: a bad option or a failed run leaves an existing -o file as it was;
 * a good run replaces it whole. */
static void test_cli_output_untouched_on_error(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char dir[] = "/tmp/pm_test_gen_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const char *const bad[] = {
        "schedule --kind 1f1b -p 2 -m 3 --format bogus",
        "block blocks/v-min-p4.block --format bogus",
        "search -p 4 -m 8 --mem-limit 1 --format bogus",
        "search -p 4 -m 8 --mem-limit 0.01",
        "compare -p 4 -m 8 --format bogus",
        "curve -p 4 -m 8 --format bogus",
        "schedule --kind 1f1b -p 2 -m 3 --costs 1e308,1,1",
    };
    chk_cmd c = {0};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(chk_sh(&c, "echo keep > %s/k.txt; %s %s -o %s/k.txt 2>&1", dir, bin,
                                bad[k], dir), 1);
        assert_int_equal(chk_sh(&c, "cat %s/k.txt; ls %s | wc -l", dir, dir), 0);
        if (strcmp(c.out, "keep\n1\n")) fail_msg("%s: k.txt now '%s' (and the files)", bad[k], c.out);
    }
    assert_int_equal(chk_sh(&c, "%s schedule --kind 1f1b -p 2 -m 3 -o %s/k.txt && head -1 %s/k.txt",
                            bin, dir, dir), 0);
    assert_string_equal(c.out, "# 1f1b: p=2 m=3 placement=single stages=2\n");
    chk_cmd_free(&c);
    assert_int_equal(chk_rm_rf(dir), 0);
}

/* `block`: --named prints the shipped file; a legal block's report and
 * schedule; a collision and a malformed line (tests/data/tiny.block, the
 * hand-made block of test_block.c, edited) in one line each; a schedule
 * written in a format. */
static void test_cli_block(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char dir[] = "/tmp/pm_test_block_XXXXXX";
    chk_cmd c = {0};
    assert_non_null(mkdtemp(dir));
    /* --named prints exactly the shipped file */
    assert_int_equal(chk_sh(&c, "%s block --named v-half -p 8 | cmp -s - blocks/v-half-p8.block",
                            bin), 0);
    /* a legal block: report and schedule */
    assert_int_equal(chk_sh(&c, "%s block blocks/v-min-p4.block -m 12 | grep -c -e '^legal: yes' "
                            "-e '^schedule: m=12 .* peak 0.5000 M'", bin), 0);
    assert_string_equal(c.out, "2\n");
    /* a collision: one line naming device and residue, exit 1 */
    char path[200];
    snprintf(path, sizeof path, "%s/bad.block", dir);
    assert_int_equal(chk_sh(&c, "sed 's/^1 0 W 3$/1 0 W 5/' tests/data/tiny.block > %s && %s block "
                            "%s 2>&1", path, bin, path), 1);
    assert_int_equal(chk_lines(c.out), 1);
    assert_non_null(strstr(c.out, "device 1 has two passes on residue 1 mod 4"));
    /* a malformed line: line and column, exit 1 */
    assert_int_equal(chk_sh(&c, "sed -i 's/^0 0 F 0$/0 0 Q 0/' %s && %s block %s 2>&1", path, bin,
                            path), 1);
    assert_int_equal(chk_lines(c.out), 1);
    assert_non_null(strstr(c.out, "line 6, column 5: pass kind must be F, B, W or BW"));
    /* a schedule written in a format */
    assert_int_equal(chk_sh(&c, "%s block blocks/1f1b-v-p4.block --format json -o %s/s.json && "
                            "grep -c '\"peak_max\"' %s/s.json", bin, dir, dir), 0);
    chk_cmd_free(&c);
    assert_int_equal(chk_rm_rf(dir), 0);
}

/* `schedule --from FILE --polish` on the hand case of test_polish.c: 8 to
 * 7, said on stderr; the commands that polish by themselves refuse the flag
 * in one line. */
static void cli_polish(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char path[] = "/tmp/pm_test_polish_XXXXXX";
    chk_cmd c = {0};
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("0F0 0F1 0I0 0W0 0I1 0W1\n1F0 1F1 1I0 1W0 1I1 1W1\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chk_sh(&c, "%s schedule --from %s --polish 2>&1", bin, path), 0);
    const char *out = c.out;
    assert_non_null(strstr(out, "# file+polish: p=2 m=2"));
    assert_non_null(strstr(out, "# makespan 7 "));
    assert_non_null(strstr(out, "pipemem: polish: makespan 8 -> 7, "));
    assert_non_null(strstr(out, "optimal: it meets the lower bound"));
    remove(path);
    static const char *const refuse[] = {"search -p 2 -m 4 --mem-limit 1 --polish",
                                         "curve -p 2 -m 4 --polish", "compare -p 2 -m 4 --polish"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(chk_sh(&c, "%s %s 2>&1", bin, refuse[k]), 1);
        out = c.out;
        if (!strstr(out, "--polish belongs to 'schedule'") || strchr(out, '\n') != strrchr(out, '\n'))
            fail_msg("%s: '%s'", refuse[k], out);
    }
    chk_cmd_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_limits_and_messages),
        cmocka_unit_test(test_cli_output_untouched_on_error),
        cmocka_unit_test(test_cli_block),
        cmocka_unit_test(cli_polish),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
