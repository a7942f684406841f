/* test_cli_select.c: `pipemem select` through the built binary
 * (tests/cli.h; the partitioner, the policies and the executor through the
 * library: test_select.c):
 *   - the dry run: lists expand to their product, every task's shards are
 *     printed, the policies ordered as the toy case says, tasks files;
 *   - a sweep end to end: the best task's checkpoint (--save-best) byte for
 *     byte the one `pipemem train` writes for it alone, the JSON fields,
 *     the timeline and trace (one box and one event per pass), every task
 *     failing, --resume after --stop-after, Ctrl-C and a resume after it;
 *   - --spill keeps RAM from growing with the tasks; a device takes what
 *     its largest shard needs, not the whole --device-mem; a request this
 *     machine cannot hold is refused before anything is allocated. */
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
#include "pipemem/pm_train.h"

/* Runs the shell command cmd (chk_sh); its exit status, and its standard
 * output into out (at most cap - 1 bytes) when out is not NULL. */
static int sh_out(const char *cmd, char *out, size_t cap) {
    chk_cmd c = {0};
    int rc = chk_sh(&c, "%s", cmd);
    if (out) snprintf(out, cap, "%s", c.out);
    chk_cmd_free(&c);
    return rc;
}

static int sh(const char *cmd) { return sh_out(cmd, NULL, 0); }

/* The CLI's dry run: lists expand to their product, every task's shards
 * are printed, the policies come out ordered as the toy case says they
 * must be (shard <= task, shard <= sequential), and training without
 * --data is refused in one line. */
static void cli_dry_run(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char cmd[512], out[8192];
    snprintf(cmd, sizeof cmd, "%s select --devices 2 --device-mem 6M --lr 1e-3,3e-4 "
             "--layers 2,3 --dim 64 --heads 2 --steps 10 --dry-run 2>&1", bin);
    assert_int_equal(sh_out(cmd, out, sizeof out), 0);
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "\nt%d ", i);
        if (!strstr(out, name)) fail_msg("no task t%d in:\n%s", i, out);
    }
    double mk[3];
    const char *names[3] = {"\nshard ", "\ntask ", "\nsequential "};
    const char *pol = strstr(out, "\npolicy ");
    assert_non_null(pol);
    for (int p = 0; p < 3; p++) {
        const char *at = strstr(pol, names[p]);
        if (!at) fail_msg("no %s line in:\n%s", names[p] + 1, out);
        mk[p] = atof(at + strlen(names[p]));
    }
    assert_true(mk[0] > 0 && mk[0] <= mk[1] + 1e-9 && mk[0] <= mk[2] + 1e-9);
    snprintf(cmd, sizeof cmd, "%s select --devices 2 --device-mem 6M --dim 64 --heads 2 "
             "2>&1 >/dev/null", bin);
    assert_int_not_equal(sh_out(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "--data DIR is required"));
    /* options that would do nothing are refused, each naming itself: an
     * output of a run under --dry-run, halving with no evaluation before
     * the end, empty paths */
    const struct {
        const char *args, *want;
    } idle[] = {{"--dry-run --csv /tmp/x.csv", "--csv is written by a sweep that runs"},
                {"--dry-run --curves /tmp/x.svg", "--curves is written by a sweep that runs"},
                {"--data /tmp --halving 2 --eval-every 0", "give --eval-every N or drop --halving"},
                {"--dry-run --spill ''", "--spill needs ram or a directory"},
                {"--data /tmp --csv ''", "--csv: the path is empty"}};
    for (size_t i = 0; i < sizeof idle / sizeof idle[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s select --devices 2 --device-mem 6M --dim 64 --heads 2 %s "
                 "2>&1 >/dev/null", bin, idle[i].args);
        assert_int_not_equal(sh_out(cmd, out, sizeof out), 0);
        if (!strstr(out, idle[i].want)) fail_msg("'%s': %s", idle[i].args, out);
    }
    /* a tasks file names its tasks; a taken or unsafe name is refused */
    char tf[128];
    snprintf(tf, sizeof tf, "/tmp/pm_test_select_tasks_%d", (int)getpid());
    FILE *w = fopen(tf, "w");
    assert_non_null(w);
    fputs("name=small lr=1e-3 layers=2 dim=64 heads=2\n# a comment\n"
          "name=deep lr=3e-4 layers=3 dim=64 heads=2\n", w);
    fclose(w);
    snprintf(cmd, sizeof cmd, "%s select --devices 2 --device-mem 6M --tasks %s --dry-run 2>&1",
             bin, tf);
    assert_int_equal(sh_out(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "\nsmall "));
    assert_non_null(strstr(out, "\ndeep "));
    /* a taken name, an unsafe one, a key given twice on a line (the first
     * value was dropped without a word) */
    const char *bad[] = {"name=a lr=1e-3\nname=a lr=2e-3\n", "name=../x lr=1e-3\n",
                         "name=a lr=1e-3 layers=2 lr=2e-3\n"};
    const char *why[] = {"is taken by the task of line 1", "is not a name",
                         ":1: 'lr=2e-3' gives a key this line has given already"};
    for (int k = 0; k < 3; k++) {
        w = fopen(tf, "w");
        fputs(bad[k], w);
        fclose(w);
        snprintf(cmd, sizeof cmd, "%s select --devices 2 --device-mem 6M --tasks %s --dry-run "
                 "2>&1 >/dev/null", bin, tf);
        assert_int_not_equal(sh_out(cmd, out, sizeof out), 0);
        if (!strstr(out, why[k])) fail_msg("'%s': %s", bad[k], out);
    }
    unlink(tf);
}

/* The CLI end to end: `select` over two learning rates on 2 devices under
 * a budget that shards them; the best task's checkpoint (--save-best) is
 * byte for byte the one `pipemem train` writes for that configuration
 * alone, and a real run prints the table and the JSON fields. */
static void cli_train_matches(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char dir[128], cmd[4096], out[8192];
    snprintf(dir, sizeof dir, "/tmp/pm_test_select_%d", (int)getpid());
    assert_int_equal(chk_prepare(bin, dir, 300, "line $((i + 1)): pack my box with five dozen "
                                 "liquor jugs"), 0);
    const char *model = "--layers 3 --dim 32 --heads 2 --ctx 16 --batch 4 --microbatches 2 "
                        "--steps 6 --eval-every 3";
    snprintf(cmd, sizeof cmd, "%s select --data %s/d --devices 2 --device-mem 1200K %s "
             "--lr 2e-3,8e-3 --json --save-best %s/best.ckpt --timeline %s/run.svg --trace "
             "%s/run.json 2>/dev/null", bin, dir, model, dir, dir, dir);
    assert_int_equal(sh_out(cmd, out, sizeof out), 0);
    /* the JSON's first task is the best; its lr, and it was sharded */
    const char *lr = strstr(out, "\"lr\": ");
    const char *shards = strstr(out, "\"shards\": ");
    if (!lr || !shards) fail_msg("no lr/shards in '%s'", out);
    assert_true(atoi(shards + 10) >= 2);
    assert_non_null(strstr(out, "\"lower_bound_s\""));
    assert_non_null(strstr(out, "\"device_seconds\": [{\"compute\": "));
    assert_non_null(strstr(out, "\"device_peak_bytes\""));
    assert_non_null(strstr(out, "\"warmup\": "));
    assert_non_null(strstr(out, "\"wall_s\": "));
    assert_non_null(strstr(out, "\"why\": \"\"")); /* done: no reason */
    /* the timeline and the trace: one box and one event per pass, as many as
     * 6 steps of 2 S - 1 passes of each task */
    int passes = 0;
    for (const char *q = out; (q = strstr(q, "\"shards\": ")); q += 10) passes += 6 * (2 * atoi(q + 10) - 1);
    snprintf(cmd, sizeof cmd, "test $(grep -o 'class=\"pass\"' %s/run.svg | wc -l) -eq %d && "
             "test $(grep -cE '\"cat\": \"(F|FBW|B)\"' %s/run.json) -eq %d",
             dir, passes, dir,
             passes);
    if (sh(cmd)) fail_msg("timeline or trace without %d passes (%s)", passes, cmd);
    /* every task fails: --save-best says it wrote nothing, and the run fails */
    snprintf(cmd, sizeof cmd, "%s select --data %s/d --devices 2 --device-mem 1200K %s "
             "--lr 1e5,1e6 --save-best %s/none.ckpt > %s/fail.out 2>&1; test $? -ne 0 && "
             "grep -q 'no task ended with a validation loss' %s/fail.out && "
             "grep -q 'failed: step' %s/fail.out && test ! -e %s/none.ckpt && "
             /* the reason in the library's words, with the flag (pm_cli_flags) */
             "grep -q 'is not finite; lower its --lr' %s/fail.out", bin, dir, model,
             dir, dir, dir, dir, dir, dir);
    if (sh(cmd)) fail_msg("a sweep whose tasks all fail (%s)", cmd);
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --lr %g --threads 1 --save %s/alone.ckpt "
             ">/dev/null 2>&1 && cmp -s %s/best.ckpt %s/alone.ckpt", bin, dir, model,
             atof(lr + 6), dir, dir, dir);
    if (sh(cmd)) fail_msg("the best task's checkpoint differs from train's (%s)", cmd);
    /* --resume: a sweep stopped after step 3 and run again ends with the
     * same per-task checkpoints, byte for byte, as one never stopped */
    const char *sweep = "--devices 2 --device-mem 1200K --lr 2e-3,8e-3";
    snprintf(cmd, sizeof cmd, "%s select --data %s/d %s %s --resume %s/a >/dev/null 2>&1 && "
             "%s select --data %s/d %s %s --resume %s/b --stop-after 3 >/dev/null 2>&1", bin,
             dir, model, sweep, dir, bin, dir, model, sweep, dir);
    assert_int_equal(sh(cmd), 0);
    char ck[300];
    pm_ckpt_info info;
    pm_err e;
    snprintf(ck, sizeof ck, "%s/b/t0.ckpt", dir);
    assert_int_equal(pm_ckpt_info_read(ck, &info, &e), PM_OK);
    assert_int_equal(info.step, 3); /* stopped where asked, saved there */
    /* (stderr to a file: a grep -q in a pipe would end the run with SIGPIPE) */
    snprintf(cmd, sizeof cmd, "%s select --data %s/d %s %s --resume %s/b >/dev/null 2>%s/err && "
             "grep -q 'resumed 2 of 2 tasks' %s/err", bin, dir, model, sweep, dir, dir, dir);
    assert_int_equal(sh(cmd), 0);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "cmp -s %s/a/t%d.ckpt %s/b/t%d.ckpt", dir, i, dir, i);
        if (sh(cmd)) fail_msg("task t%d: the resumed sweep ends apart (%s)", i, cmd);
    }
    /* Ctrl-C: the passes running finish, the table so far is printed, and
     * the exit status is 128 + SIGINT */
    snprintf(cmd, sizeof cmd, "%s select --data %s/d --layers 3 --dim 32 --heads 2 --ctx 16 "
             "--batch 4 --microbatches 2 --steps 100000 --eval-every 1 %s > %s/int.out "
             "2> %s/int.err & pid=$!; n=0; until grep -q 'step 1/' %s/int.err || [ $n -gt 300 ]; "
             "do sleep 0.1; n=$((n+1)); done; kill -INT $pid; wait $pid; test $? -eq 130 && "
             "grep -q 'stopped: interrupted after step' %s/int.out", bin, dir, sweep, dir, dir, dir,
             dir);
    if (sh(cmd)) fail_msg("an interrupted sweep did not stop cleanly (%s)", cmd);
    /* ... and run again with --resume it ends as a sweep never interrupted */
    const char *longer = "--layers 3 --dim 32 --heads 2 --ctx 16 --batch 4 --microbatches 2 "
                         "--steps 300 --eval-every 10";
    snprintf(cmd, sizeof cmd, "%s select --data %s/d %s %s --resume %s/r >/dev/null 2>&1 && "
             "(%s select --data %s/d %s %s --resume %s/c > /dev/null 2> %s/c.err & pid=$!; n=0; "
             "until grep -q 'step 20/' %s/c.err || [ $n -gt 300 ]; do sleep 0.05; "
             "n=$((n+1)); done; kill -INT $pid; wait $pid; test $? -eq 130) && "
             "%s select --data %s/d %s %s --resume %s/c >/dev/null 2>&1 && "
             "cmp -s %s/r/t0.ckpt %s/c/t0.ckpt && cmp -s %s/r/t1.ckpt %s/c/t1.ckpt", bin, dir,
             longer, sweep, dir, bin, dir, longer, sweep, dir, dir, dir, bin, dir, longer, sweep,
             dir, dir, dir, dir, dir);
    if (sh(cmd)) fail_msg("a sweep interrupted and resumed ends apart (%s)", cmd);
    assert_int_equal(chk_rm_rf(dir), 0);
}

/* --spill DIR holds the tasks' state on disk, so RAM does not grow with
 * the number of tasks: 6 tasks peak within one task's state (53 MB here)
 * of 2 tasks, where in RAM they take the 4 extra states (over 150 MB). The
 * peak is the child's own (wait4). */
static long peak_kib(const char *cmd) {
    chk_cmd c = {0};
    if (chk_sh(&c, "%s", cmd)) fail_msg("failed: %s", cmd);
    long kib = (long)(c.rss / 1024);
    chk_cmd_free(&c);
    return kib;
}

static void cli_spill_bounds_ram(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char dir[128], cmd[4096];
    snprintf(dir, sizeof dir, "/tmp/pm_test_spill_cli_%d", (int)getpid());
    assert_int_equal(chk_prepare(bin, dir, 300, "line $((i + 1)): the quick brown fox"), 0);
    assert_int_equal(chk_sh(NULL, "mkdir %s/sp", dir), 0);
    const char *lrs[2] = {"1e-3,2e-3", "1e-3,2e-3,3e-3,4e-3,5e-3,6e-3"};
    long kib[2][2];
    for (int spill = 0; spill < 2; spill++)
        for (int k = 0; k < 2; k++) {
            /* under AddressSanitizer freed memory waits in a quarantine: none here */
            snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=quarantine_size_mb=0 exec %s select --data "
                     "%s/d --devices 2 --device-mem 40M --layers 4 --dim 256 --heads 4 --ctx 16 "
                     "--batch 4 --microbatches 2 --steps 1 --eval-every 0 --lr %s --spill %s%s "
                     ">/dev/null 2>&1", bin, dir,
                     lrs[k], spill ? dir : "ram", spill ? "/sp" : "");
            kib[spill][k] = peak_kib(cmd);
        }
    print_message("peak RSS, 2 and 6 tasks: in RAM %ld and %ld KiB, spilled %ld and %ld KiB\n",
                  kib[0][0], kib[0][1], kib[1][0], kib[1][1]);
    assert_true(kib[0][1] - kib[0][0] > 150 * 1024);
    assert_true(kib[1][1] - kib[1][0] < 40 * 1024);
    assert_int_equal(chk_rm_rf(dir), 0);
}

/* A device takes what the largest shard needs, not the whole --device-mem:
 * 2 devices of 1 GiB for a task of under 2 MiB touched 2.1 GB, and 64 such
 * devices ran the machine out of memory. Both now stay far below 1 GiB
 * (the slabs are 2 and 64 x 1.8 MB; AddressSanitizer adds its own). A
 * request this machine cannot hold is refused before anything is
 * allocated, naming both numbers. */
static void cli_slab_is_the_need(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char dir[128], cmd[4096];
    snprintf(dir, sizeof dir, "/tmp/pm_test_slab_cli_%d", (int)getpid());
    assert_int_equal(chk_prepare(bin, dir, 300, "line $((i + 1)): the quick brown fox"), 0);
    static const int devices[] = {2, 64};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=quarantine_size_mb=0 exec %s select --data %s/d "
                 "--devices %d --device-mem 1G --layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 "
                 "--steps 2 >/dev/null 2>&1", bin, dir, devices[k]);
        long kib = peak_kib(cmd);
        print_message("--devices %d --device-mem 1G: peak RSS %ld KiB\n", devices[k], kib);
        assert_true(kib < 1024 * 1024);
    }
    snprintf(cmd, sizeof cmd, "%s select --data %s/d --devices 4096 --device-mem 1024G --dim 4096 "
             "--layers 48 --heads 32 --ctx 16 --batch 4 --steps 1 > %s/out 2> %s/err; "
             "test $? -eq 1 && test $(wc -l < %s/err) -eq 1 && "
             "grep -q \"4096 devices' slabs of .* GiB, but this machine has\" %s/err", bin, dir,
             dir, dir, dir, dir);
    if (sh(cmd)) fail_msg("a request larger than the machine was not refused (%s)", cmd);
    /* a task whose window the data cannot hold is refused before the sweep
     * (it failed mid-sweep, at its first step or evaluation), and by the
     * dry run, which would forecast it */
    for (int dry = 0; dry < 2; dry++) {
        snprintf(cmd, sizeof cmd, "%s select --data %s/d/ --devices 2 --device-mem 1G --dim 16 "
                 "--layers 1 --heads 2 --ctx 16,5000 --steps 1 %s > %s/out 2> %s/err; "
                 "test $? -eq 1 && test $(wc -l < %s/err) -eq 1 && test ! -s %s/out && "
                 "grep -q 'select: task t1: %s/d/val.bin holds [0-9]* tokens, fewer than "
                 "context+1 = 5001' %s/err", bin, dir, dry ? "--dry-run" : "", dir, dir, dir,
                 dir, dir, dir);
        if (sh(cmd)) fail_msg("a context longer than the data was not refused (%s)", cmd);
    }
    assert_int_equal(chk_rm_rf(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cli_dry_run),
        cmocka_unit_test(cli_train_matches),
        cmocka_unit_test(cli_spill_bounds_ram),
        cmocka_unit_test(cli_slab_is_the_need),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
