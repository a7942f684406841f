/* test_cli_inputs.c: the commands under hostile input, through the built
 * binary (PM_BIN): endless and directory inputs to `prepare` and its -o
 * onto a file; a missing data directory; a pipeline run whose schedule
 * cannot meet its --mem-limit or whose schedule file disagrees with --pp;
 * outputs onto inputs or onto each other; standard output on a full disk;
 * `select` resumed, failing everywhere, or given bad task files; `schedule
 * --from` with options the file decides, and its CSV under recomputation;
 * the library's parameter names said as the flags that set them; every
 * command's options through the one parser (the same refusal of an unknown
 * option, --help);
 * pipelines of 131072 devices. Each bad request must end in one line on
 * stderr and a non-zero exit, with nothing overwritten. (More of
 * the schedule commands' hostile inputs are in test_cli_schedule.c.) */
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
#include <jansson.h>

#include "checks.h"
#include "cli.h"

static char dir[] = "/tmp/pm_test_cli_inputs_XXXXXX";
static const char *bin;

static int setup(void **state) {
    (void)state;
    bin = chk_bin();
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

typedef struct {
    int status;      /* exit status; 128 + N if signal N ended it */
    int lines;       /* lines of stderr */
    char err[1024];  /* first line of stderr */
    char last[1024]; /* last line of stderr */
} run_result;

/* Runs `PM_BIN args` with stdout to `out` (chk_sh's time limit stops a
 * runaway); stderr is kept. */
static run_result run_to(const char *args, const char *out) {
    chk_cmd c = {0};
    run_result r = {.status = chk_sh(&c, "%s %s >%s", bin, args, out)};
    r.lines = chk_lines(c.err);
    chk_line(c.err, 0, r.err, sizeof r.err);
    chk_line(c.err, -1, r.last, sizeof r.last);
    chk_cmd_free(&c);
    return r;
}

/* The same with stdout discarded. */
static run_result run(const char *args) { return run_to(args, "/dev/null"); }

/* A bad request: exit 1, one line containing `want`. */
static void expect_error(const char *args, const char *want) {
    run_result r = run(args);
    if (r.status != 1 || r.lines != 1 || !strstr(r.err, want))
        fail_msg("pipemem %s: status %d, %d lines, '%s' (wanted '%s')", args, r.status, r.lines,
                 r.err, want);
}

static void test_prepare_inputs_bounded(void **state) {
    (void)state;
    char args[600];
    snprintf(args, sizeof args, "prepare /dev/zero -o %s/d", dir);
    /* prepare streams, so it takes sizes first: a stream is refused at once */
    expect_error(args, "/dev/zero: not a regular file");
    snprintf(args, sizeof args, "prepare %s -o %s/d", dir, dir);
    expect_error(args, "is a directory");
    snprintf(args, sizeof args, "train --data %s/nodata --steps 1", dir);
    run_result r = run(args);
    assert_int_equal(r.status, 1);
    assert_int_equal(r.lines, 1);
}

/* prepare -o onto a file or a device: one line, the file untouched (it was
 * a double free, exit 134: issue 19). */
static void test_prepare_output_not_a_directory(void **state) {
    (void)state;
    char text[300], out[300], args[800];
    snprintf(text, sizeof text, "%s/in.txt", dir);
    snprintf(out, sizeof out, "%s/existing", dir);
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    fputs("enough text for a train and a validation split\n", f);
    fclose(f);
    f = fopen(out, "w");
    assert_non_null(f);
    fputs("keep", f);
    fclose(f);
    snprintf(args, sizeof args, "prepare %s -o %s", text, out);
    expect_error(args, "existing: exists and is not a directory");
    char back[8] = {0};
    f = fopen(out, "r");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, sizeof back, f), 4);
    fclose(f);
    assert_string_equal(back, "keep");
    snprintf(args, sizeof args, "prepare %s -o /dev/full", text);
    expect_error(args, "/dev/full: exists and is not a directory");
}
/* A pipeline of 131072 devices is a few million passes: its lower bound
 * and zb-v's pattern were quadratic in p and ran for minutes. Both
 * commands finish; that the work is linear is counted, not timed, in the
 * library's suites (test_sim.c, test_generators.c). */
static void test_huge_pipelines_finish(void **state) {
    (void)state;
    run_result r = run("schedule --kind 1f1b -p 131072 -m 5 --format json");
    if (r.status != 0) fail_msg("schedule -p 131072: status %d, '%s'", r.status, r.err);
    r = run("compare -p 65536 -m 1");
    if (r.status != 0) fail_msg("compare -p 65536: status %d, '%s'", r.status, r.err);
}

/* A small prepared corpus in dir/d. */
static void prepare_data(void) {
    char path[300], args[700];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 300; i++) fprintf(f, "line %d: the quick brown fox jumps\n", i);
    fclose(f);
    snprintf(args, sizeof args, "prepare %s -o %s/d", path, dir);
    assert_int_equal(run(args).status, 0);
}

#define TRAIN "train --layers 4 --dim 32 --heads 2 --ctx 16 --batch 8 --microbatches 4 " \
              "--steps 2 --data "
#define TRAIN6 "train --layers 6 --dim 32 --heads 2 --ctx 16 --batch 8 --microbatches 4 " \
               "--steps 2 --data "

static void test_pipeline_refusals(void **state) {
    (void)state;
    prepare_data();
    char args[900];
    /* A 0.1 M limit is far below any 1F1B peak (device 0 holds two
     * microbatches of its stage): refused, naming the peak and the smallest
     * limit that works; that limit must then be met, and 1% less must not. */
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --schedule 1f1b --mem-limit 0.1", dir);
    expect_error(args, "over --mem-limit 0.1 M; the smallest limit it meets is ");
    run_result r0 = run(args);
    double least = atof(strstr(r0.err, "the smallest limit it meets is ") + 31);
    double peak = atof(strstr(r0.err, "peaks at ") + 9);
    assert_true(least >= peak && least < peak + 1e-4 && least > 0.5);
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --schedule 1f1b --mem-limit %.4f", dir, least);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --schedule 1f1b --mem-limit %.4f", dir,
             least * 0.99);
    expect_error(args, "the smallest limit it meets is ");
    /* auto plans the search's candidates in turn when the real (unequal)
     * stages overshoot, and says so when none fits: at 0.2 M the lowest,
     * interleaved-r with 4 chunks, peaks at 0.17 M on equal stages but
     * 0.23 M on these; at 0.6 M only recomputation fits. (6 layers: with 4,
     * the V placement's real stages peak below the equal stages' M, so
     * whatever the search finds fits.) */
    snprintf(args, sizeof args, TRAIN6 "%s/d --pp 2 --schedule auto --mem-limit 0.2", dir);
    expect_error(args, "no schedule meets --mem-limit 0.2 M on this model");
    snprintf(args, sizeof args, TRAIN6 "%s/d --pp 2 --schedule auto --mem-limit 0.6", dir);
    run_result r = run(args);
    assert_int_equal(r.status, 0);
    const char *kind = strstr(r.err, "picked "); /* a recomputing kind: "...-r", "...-r(v=4)" */
    assert_non_null(kind);
    char picked[64];
    snprintf(picked, sizeof picked, "%.*s", (int)strcspn(kind + 7, " +("), kind + 7);
    if (strlen(picked) < 2 || strcmp(picked + strlen(picked) - 2, "-r"))
        fail_msg("auto at 0.6 M picked %s", picked);
    /* a schedule file for 4 devices with --pp 2 */
    snprintf(args, sizeof args, "schedule --kind 1f1b -p 4 -m 4 -o %s/s4.txt", dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --schedule-file %s/s4.txt", dir, dir);
    expect_error(args, "pipemem: train: --pp 2 but"); /* one prefix */
    /* a model no machine holds (5 TB of state) is refused at once, with
     * what it needs */
    snprintf(args, sizeof args, "train --layers 400 --dim 8192 --heads 8 --ctx 16 --batch 8 "
             "--microbatches 4 --steps 2 --data %s/d --pp 2", dir);
    expect_error(args, "the pipeline needs ");
    /* a budget below what any placement needs: refused, naming the least */
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --device-mem 100K", dir);
    expect_error(args, "no placement fits --device-mem 100 KiB: the one of least memory");
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --placement even", dir);
    expect_error(args, "--placement even: use flops, measured or memory");
    snprintf(args, sizeof args, TRAIN "%s/d --placement flops", dir);
    expect_error(args, "--placement is for pipeline runs");
    /* the file decides the kind and the chunks: either beside it is refused
     * (issue 19, 2.9), also with auto's limit */
    const char *beside[] = {"--schedule v-half", "--schedule auto --mem-limit 0.5", "--chunks 2"};
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, TRAIN "%s/d --schedule-file %s/s4.txt %s", dir, dir,
                 beside[k]);
        expect_error(args, k < 2 ? "is the schedule: drop --schedule" : "drop --chunks");
    }
    snprintf(args, sizeof args, TRAIN "%s/d --schedule-file %s/s4.txt --mem-limit 0.2",
             dir, dir);
    expect_error(args, "over --mem-limit 0.2 M");
    /* a file for other microbatches names the option that agrees with it */
    snprintf(args, sizeof args, "schedule --kind 1f1b -p 2 -m 8 -o %s/s28.txt", dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, TRAIN "%s/d --schedule-file %s/s28.txt", dir, dir);
    expect_error(args, "per replica; set --microbatches to 8 or make the schedule for the plan");
}

/* Output paths are checked before the first step, not after the run. */
static void test_outputs_checked_before_training(void **state) {
    (void)state;
    prepare_data();
    char args[900];
    static const char *const bad[][2] = {
        {"--save %s", "is a directory"},
        {"--save /nonexistent-dir/x.ckpt", "/nonexistent-dir/x.ckpt: cannot be written"},
        {"--pp 2 --trace /nonexistent-dir/t.json", "--trace /nonexistent-dir/t.json"},
        {"--pp 2 --timeline %s", "--timeline"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char extra[300];
        snprintf(extra, sizeof extra, bad[k][0], dir);
        snprintf(args, sizeof args, TRAIN "%s/d %s", dir, extra);
        expect_error(args, bad[k][1]);
    }
    /* a user's files named like temporaries stay whole beside the outputs
     * (issue 31, 1: the cleanup of killed runs' temporaries removed them) */
    static const char *const mine[] = {"run.ckpt.tmp", "run.ckpt.tmp.999999.notes",
                                       "run.ckpt.tmp.4194305.0", "p.json.tmp"};
    char tmp[4][300];
    for (int k = 0; k < 4; k++) {
        snprintf(tmp[k], sizeof tmp[k], "%s/%s", dir, mine[k]);
        FILE *f = fopen(tmp[k], "w");
        assert_non_null(f);
        fputs("mine\n", f);
        fclose(f);
    }
    snprintf(args, sizeof args, TRAIN "%s/d --save %s/run.ckpt", dir, dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, "plan --layers 4 --hidden 256 --heads 4 --seq 128 --vocab 1000 "
             "--devices 2 --global-batch 8 --device-mem 8G --device-tflops 100 --format json "
             "-o %s/p.json", dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, "%s/run.ckpt", dir);
    assert_int_equal(access(args, F_OK), 0);
    for (int k = 0; k < 4; k++) {
        char buf[16] = {0};
        FILE *f = fopen(tmp[k], "r");
        if (!f || !fgets(buf, sizeof buf, f) || strcmp(buf, "mine\n"))
            fail_msg("%s: the user's file was removed or changed", tmp[k]);
        fclose(f);
    }
}

/* ---- select ---------------------------------------------------------------- */

#define SELECT "select --devices 2 --device-mem 8M --layers 2 --dim 32 --heads 2 --ctx 16 " \
               "--batch 4 --steps 10 --eval-every 5 --data "

typedef struct {
    char name[32];
    double loss, val; /* final_loss and val_loss */
    char val_text[40]; /* val_loss as written */
} csv_row;

/* The rows of a `select --csv` file (task first, final_loss and val_loss
 * the 12th and 13th columns); the count. */
static int read_csv(const char *path, csv_row *rows, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: not written", path);
    char line[2048];
    int n = 0;
    if (!fgets(line, sizeof line, f)) fail_msg("%s: empty", path);
    while (n < cap && fgets(line, sizeof line, f)) {
        char *col[13], *save = NULL;
        int k = 0;
        for (char *c = strtok_r(line, ",", &save); c && k < 13; c = strtok_r(NULL, ",", &save))
            col[k++] = c;
        if (k < 13) fail_msg("%s: a short row", path);
        snprintf(rows[n].name, sizeof rows[n].name, "%s", col[0]);
        snprintf(rows[n].val_text, sizeof rows[n].val_text, "%s", col[12]);
        rows[n].loss = strtod(col[11], NULL);
        rows[n].val = strtod(col[12], NULL);
        n++;
    }
    fclose(f);
    return n;
}

/* Every row has finite losses, ranked by validation loss; the number of rows. */
static int expect_ranked(const char *path, csv_row *rows, int cap) {
    int n = read_csv(path, rows, cap);
    for (int i = 0; i < n; i++) {
        if (!isfinite(rows[i].loss) || !isfinite(rows[i].val))
            fail_msg("%s: task %s has loss %g, val loss %g", path, rows[i].name, rows[i].loss,
                     rows[i].val);
        if (i && rows[i].val < rows[i - 1].val) fail_msg("%s: not ranked by val loss", path);
    }
    return n;
}

/* --resume after some tasks finished: those keep their losses (they showed
 * nan and ranked last), --save-best takes the best by them, and a finished
 * sweep resumed again shows the same table. */
static void test_select_resume_keeps_losses(void **state) {
    (void)state;
    prepare_data();
    char args[1200], a[300], b[300], c[300], best[300], ck[300];
    snprintf(a, sizeof a, "%s/a.csv", dir);
    snprintf(b, sizeof b, "%s/b.csv", dir);
    snprintf(c, sizeof c, "%s/c.csv", dir);
    snprintf(best, sizeof best, "%s/best.ckpt", dir);
    /* t0 runs to its end alone; then t1 joins it, t0 resumed done */
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e-2 --resume %s/sv --csv %s", dir, dir, a);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e-2,1e-3 --resume %s/sv --csv %s "
             "--save-best %s", dir, dir, b, best);
    assert_int_equal(run(args).status, 0);
    csv_row ra[2], rb[2], rc[2];
    assert_int_equal(expect_ranked(a, ra, 2), 1);
    assert_int_equal(expect_ranked(b, rb, 2), 2);
    int t0 = strcmp(rb[0].name, "t0") ? 1 : 0;
    assert_string_equal(rb[t0].val_text, ra[0].val_text); /* what it ended with */
    snprintf(ck, sizeof ck, "%s/sv/%s.ckpt", dir, rb[0].name);
    if (!chk_same_file(best, ck)) fail_msg("--save-best is not the best task's (%s)", rb[0].name);
    /* the finished sweep again: nothing runs, the same table */
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e-2,1e-3 --resume %s/sv --csv %s "
             "--save-best %s", dir, dir, c, best);
    assert_int_equal(run(args).status, 0);
    assert_int_equal(expect_ranked(c, rc, 2), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(rc[i].name, rb[i].name);
        assert_string_equal(rc[i].val_text, rb[i].val_text);
    }
    if (!chk_same_file(best, ck)) fail_msg("--save-best of the finished sweep changed");
}

/* A failure that comes out of the run (after progress lines): exit 1 and
 * the last line of stderr says it. */
static void expect_last_line(const char *args, const char *want) {
    run_result r = run(args);
    if (r.status != 1 || !strstr(r.last, want))
        fail_msg("pipemem %s: status %d, last line '%s' (wanted '%s')", args, r.status, r.last,
                 want);
}

/* A sweep whose every task fails exits 1 saying so (it exited 0); a
 * --resume that is no directory is refused before anything runs. */
static void test_select_all_failed(void **state) {
    (void)state;
    prepare_data();
    char args[1200], path[400];
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e30,1e31", dir);
    expect_last_line(args, "select: every task failed (the table says why)");
    snprintf(path, sizeof path, "%s/notadir", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(args, sizeof args, SELECT "%s/d --resume %s", dir, path);
    expect_error(args, "notadir: exists and is not a directory");
    snprintf(args, sizeof args, SELECT "%s/d --resume /dev/full", dir);
    expect_error(args, "/dev/full: exists and is not a directory");
    /* a checkpoint to resume that is a directory: refused at the start */
    snprintf(path, sizeof path, "mkdir -p %s/blocked/t0.ckpt", dir);
    assert_int_equal(system(path), 0);
    snprintf(args, sizeof args, SELECT "%s/d --resume %s/blocked", dir, dir);
    expect_error(args, "t0.ckpt: is a directory");
    /* a save directory where the task's losses cannot go: the task fails */
    snprintf(path, sizeof path, "mkdir -p %s/blocked2/t0.loss", dir);
    assert_int_equal(system(path), 0);
    snprintf(args, sizeof args, SELECT "%s/d --resume %s/blocked2", dir, dir);
    expect_last_line(args, "select: the task failed (the table says why)");
    /* one task failing beside one that ends is a result, not a failure */
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e-3,1e31", dir);
    assert_int_equal(run(args).status, 0);
}

/* Standard output on a full disk: every command that prints ends saying
 * so in one line and exits 1 (they exited 0 silently); train's checkpoint
 * is still written. */
static void test_stdout_full(void **state) {
    (void)state;
    prepare_data();
    char args[1200], cmd[700];
    snprintf(args, sizeof args, TRAIN "%s/d --save %s/full.ckpt", dir, dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, "block --named v-half -p 4 -o %s/v.block", dir);
    assert_int_equal(run(args).status, 0);
    static const char *const fmts[] = {
        TRAIN "%s/d --json --save %s/json.ckpt",
        SELECT "%s/d --lr 1e-3",
        SELECT "%s/d --lr 1e-3 --dry-run",
        "sample --ckpt %s/full.ckpt --prompt the -n 20",
        "block %s/v.block",
        "compare -p 4 -m 8%.0s",
        "--version%.0s",
    };
    for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
        snprintf(args, sizeof args, fmts[k], dir, dir);
        run_result r = run_to(args, "/dev/full");
        if (r.status != 1 || !strstr(r.last, "standard output: write failed"))
            fail_msg("pipemem %s >/dev/full: status %d, last line '%s'", args, r.status, r.last);
    }
    snprintf(cmd, sizeof cmd, "%s/json.ckpt", dir);
    assert_int_equal(access(cmd, F_OK), 0);
}

/* 1 if the file at path has exactly the bytes of the file at copy. */
static int unchanged(const char *path, const char *copy) { return chk_same_file(path, copy); }

/* Outputs onto inputs or onto each other are refused before anything runs
 * (train --data d --save d/train.bin overwrote the data; --save X --trace X
 * replaced the checkpoint with the trace): one line, nothing written.
 * --resume X --save X continues a run in place and stays allowed. */
static void test_outputs_onto_inputs(void **state) {
    (void)state;
    prepare_data();
    char args[1500], cmd[900], keep[300], ck[300], x[300], sched[300];
    snprintf(keep, sizeof keep, "%s/train.copy", dir);
    snprintf(ck, sizeof ck, "%s/run.ckpt", dir);
    snprintf(x, sizeof x, "%s/x", dir);
    snprintf(sched, sizeof sched, "%s/s2.txt", dir);
    snprintf(cmd, sizeof cmd, "cp %s/d/train.bin %s", dir, keep);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof args, "schedule --kind 1f1b -p 2 -m 4 -o %s", sched);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, TRAIN "%s/d --save %s", dir, ck);
    assert_int_equal(run(args).status, 0);
    snprintf(cmd, sizeof cmd, "cp %s %s.copy", ck, ck);
    assert_int_equal(system(cmd), 0);
    struct { const char *fmt, *want; } bad[] = {
        {TRAIN "%s/d --save %s/d/train.bin", "would overwrite the input --data"},
        {TRAIN "%s/d --save %s/d/../d/val.bin", "(its val.bin)"},
        {TRAIN "%s/d --pp 2 --save %s/x --trace %s/./x", "are one file"},
        {TRAIN "%s/d --pp 2 --trace %s/x --timeline %s/x", "are one file"},
        {TRAIN "%s/d --pp 2 --resume %s/run.ckpt --trace %s/run.ckpt",
         "would overwrite the input --resume"},
        {TRAIN "%s/d --pp 2 --schedule-file %s/s2.txt --timeline %s/s2.txt",
         "would overwrite the input --schedule-file"},
        {"train --train %s/d/train.bin --val %s/d/val.bin --steps 1 --save %s/d/train.bin",
         "would overwrite the input --train"},
        {SELECT "%s/d --csv %s/d/train.bin", "would overwrite the input --data"},
        {SELECT "%s/d --timeline %s/x --trace %s/x", "are one file"},
        {SELECT "%s/d --resume %s/sv2 --save-best %s/sv2/t0.ckpt",
         "would overwrite task t0's checkpoint"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(args, sizeof args, bad[k].fmt, dir, dir, dir);
        expect_error(args, bad[k].want);
    }
    assert_true(unchanged(keep, strcat(strcpy(cmd, dir), "/d/train.bin")));
    snprintf(cmd, sizeof cmd, "%s.copy", ck);
    assert_true(unchanged(ck, cmd));
    assert_int_not_equal(access(x, F_OK), 0);
    /* continuing in place, and two outputs on /dev/null, stay allowed */
    snprintf(args, sizeof args, "train --layers 4 --dim 32 --heads 2 --ctx 16 --batch 8 "
             "--microbatches 4 --steps 2 --data %s/d --resume %s --save %s", dir, ck, ck);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --trace /dev/null --timeline /dev/null", dir);
    assert_int_equal(run(args).status, 0);
}

/* Every command, every output: an output that is one of the inputs (by
 * name, through a symlink or a hard link) is refused in one line before
 * anything is written (issue 31, 2: the tokenizer replaced its corpus with
 * the model, block and schedule their input with their output). */
static void test_no_output_is_an_input(void **state) {
    (void)state;
    prepare_data();
    char cmd[1200], args[1500];
    snprintf(cmd, sizeof cmd, "cd %s && cp corpus.txt c.txt && ln -sf c.txt c.link && "
             "ln -f c.txt c.hard && printf 'lr=1e-3\\n' > t.txt", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof args, "block --named v-min -p 4 -o %s/b.block", dir);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, "schedule --kind 1f1b -p 2 -m 4 -o %s/s.txt", dir);
    assert_int_equal(run(args).status, 0);
    snprintf(cmd, sizeof cmd, "cd %s && ln -sf s.txt s.link && cp s.txt s.copy && "
             "cp b.block b.copy && cp c.txt c.copy && cp t.txt t.copy", dir);
    assert_int_equal(system(cmd), 0);
    struct { const char *fmt, *want; } bad[] = {
        {"tokenizer train %s/c.txt --vocab 300 -o %s/c.txt", "-o %s/c.txt would overwrite the "
                                                             "input %s/c.txt"},
        {"tokenizer train %s/c.txt --vocab 300 -o %s/c.link", "would overwrite the input"},
        {"tokenizer train %s/c.hard --vocab 300 -o %s/c.txt", "would overwrite the input"},
        {"block %s/b.block -m 8 --format json -o %s/b.block", "would overwrite the input"},
        {"schedule --from %s/s.txt -o %s/s.txt", "would overwrite the input --from"},
        {"schedule --from %s/s.link --format svg -o %s/s.txt", "would overwrite the input --from"},
        {"compare --from %s/s.txt -o %s/s.link", "would overwrite the input --from"},
        {"prepare %s/d/train.bin -o %s/d", "would overwrite the input"},
        {"prepare %s/c.txt --tokenizer %s/e/tokenizer.model -o %s/e", "-o %s/e/tokenizer.model "
                                                                    "would overwrite the input"},
        {SELECT "%s/d --tasks %s/t.txt --csv %s/t.txt", "would overwrite the input --tasks"},
        {SELECT "%s/d --csv %s/c.txt --trace %s/c.hard", "are one file"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char want[700];
        snprintf(args, sizeof args, bad[k].fmt, dir, dir, dir);
        snprintf(want, sizeof want, bad[k].want, dir, dir, dir);
        expect_error(args, want);
    }
    static const char *const kept[] = {"c", "s", "b", "t"};
    static const char *const ext[] = {"txt", "txt", "block", "txt"};
    for (int k = 0; k < 4; k++) {
        char a[400], b[400];
        snprintf(a, sizeof a, "%s/%s.%s", dir, kept[k], ext[k]);
        snprintf(b, sizeof b, "%s/%s.copy", dir, kept[k]);
        if (!chk_same_file(a, b)) fail_msg("%s was changed", a);
    }
    snprintf(args, sizeof args, "%s/e", dir);
    assert_int_not_equal(access(args, F_OK), 0);
}

/* Inputs that were taken wrongly or ignored (issue 31, 16), each refused in
 * one line: a range with three dots (read as 1e-4 .. .1e-2), opposite flags,
 * --overlap-fb on a schedule without overlapped pairs, a tasks file with a
 * NUL byte (it ended a value unseen). */
static void test_misread_inputs_refused(void **state) {
    (void)state;
    prepare_data();
    char path[300], args[1200];
    snprintf(path, sizeof path, "%s/nul_tasks.txt", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("lr=1e-3\n\nlr=3e-3\0 layers=9\n", 1, 27, f);
    fclose(f);
    struct { const char *fmt, *want; } bad[] = {
        {SELECT "%s/d --lr 1e-4...1e-2 --sample 2 --dry-run", "is not a range lo..hi"},
        {SELECT "%s/d --lr 1e-4..1e-3..1e-2 --sample 2 --dry-run", "is not a range lo..hi"},
        {SELECT "%s/d --lr 1e-3 --prefetch --no-prefetch --dry-run",
         "--prefetch and --no-prefetch say opposite things"},
        {"select --devices 1 --device-mem 64M --data %s/d --tasks %s/nul_tasks.txt --dry-run",
         "nul_tasks.txt:3: a NUL byte (offset 16)"},
        {"schedule --kind 1f1b -p 2 -m 4 --overlap-fb 0.5%.0s",
         "--overlap-fb 0.5: this 1f1b schedule has no overlapped F&B pairs"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(args, sizeof args, bad[k].fmt, dir, dir);
        expect_error(args, bad[k].want);
    }
    /* the same flag twice agrees with itself, and DualPipeV has pairs */
    snprintf(args, sizeof args, SELECT "%s/d --lr 1e-3 --no-prefetch --no-prefetch --dry-run",
             dir);
    assert_int_equal(run(args).status, 0);
    assert_int_equal(run("schedule --kind dualpipev -p 2 -m 4 --overlap-fb 0.5").status, 0);
}

/* schedule --from FILE: the file decides p, m and the chunks; -p, -m and
 * --chunks beside it were ignored silently, now refused in one line. */
static void test_schedule_from_conflicts(void **state) {
    (void)state;
    char args[900];
    snprintf(args, sizeof args, "schedule --kind interleaved -p 2 -m 4 --chunks 2 -o %s/il.txt",
             dir);
    assert_int_equal(run(args).status, 0);
    static const char *const opt[] = {"-p 4", "-m 8", "--chunks 2", "-p 2 -m 4"};
    static const char *const want[] = {"-p with --from", "-m with --from", "--chunks with --from",
                                       "-p with --from"};
    for (size_t k = 0; k < sizeof opt / sizeof opt[0]; k++) {
        snprintf(args, sizeof args, "schedule --from %s/il.txt %s", dir, opt[k]);
        expect_error(args, want[k]);
    }
    snprintf(args, sizeof args, "schedule --from %s/il.txt --costs 1,2,1", dir);
    assert_int_equal(run(args).status, 0);
}

/* The library names its parameters (model.layers, seed, opt.lr, micro,
 * device_mem); the commands say the flags that set them. */
static void test_library_names_as_flags(void **state) {
    (void)state;
    prepare_data();
    char args[900];
    snprintf(args, sizeof args, TRAIN "%s/d --save %s/lf.ckpt", dir, dir);
    assert_int_equal(run(args).status, 0);
    struct { const char *fmt, *want; } bad[] = {
        {"train --layers 2 --dim 32 --heads 2 --ctx 16 --batch 8 --microbatches 4 --steps 3 "
         "--data %s/d --resume %s/lf.ckpt", "lf.ckpt: the checkpoint was made with --layers 4, "
         "this run has 2; resume with --layers 4, or start without resuming"},
        {TRAIN "%s/d --seed 5 --resume %s/lf.ckpt", "made with --seed 1, this run has 5"},
        {TRAIN "%s/d --lr 0.5 --resume %s/lf.ckpt", "made with --lr 0.001, this run has 0.5; "
         "resume with --lr 0.001"},
        {SELECT "%s/d --device-mem 20K", "but --device-mem is 20480; raise it or shrink the "
         "task (a smaller batch or more --microbatches, a smaller --dim or --ctx)"},
        {"train --layers 1 --dim 32 --heads 2 --ctx 16 --batch 8 --microbatches 8 --steps 2 "
         "--pp 4 --data %s/d", "each needing at least one layer; use --layers >= 2, fewer"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(args, sizeof args, bad[k].fmt, dir, dir);
        expect_error(args, bad[k].want);
    }
    /* a diverging step: "lower opt.lr" in the library's words */
    snprintf(args, sizeof args, TRAIN "%s/d --lr 1e10 --steps 3", dir);
    run_result r = run(args);
    if (r.status != 1 || !strstr(r.last, "is not finite; lower --lr"))
        fail_msg("%s: exit %d, last line '%s'", args, r.status, r.last);
}

/* Messages that named the wrong cause or nothing (issue 31, 18): each names
 * the user's option, the real limit and the real cause. */
static void test_messages_name_the_cause(void **state) {
    (void)state;
    prepare_data();
    char args[1200];
    snprintf(args, sizeof args, "train --layers 8 --dim 32 --heads 2 --ctx 16 --batch 8 "
             "--steps 1 --data %s/d --save %s/l8.ckpt", dir, dir);
    assert_int_equal(run(args).status, 0);
#define PLAN "plan --hidden 512 --heads 8 --seq 1024 --vocab 51200 --devices 16 " \
             "--global-batch 128 --device-mem 80G "
    struct { const char *fmt, *want; } bad[] = {
        /* printed "pipemem: sample: " and nothing else */
        {"sample --ckpt %s/l8.ckpt --pp 11 -n 4", "--pp 11: the checkpoint's model has 10 layers "
         "(the embedding, 8 blocks and the head), so at most --pp 10"},
        /* named --costs and F+B+W+2C, which plan has not */
        {PLAN "--layers 30 --device-tflops 1e-300%.0s", "--device-tflops 1e-300 (x efficiency "
         "0.65) makes one microbatch's F, B and W through a device take"},
        /* "4 layers" without the embedding and the head */
        {PLAN "--layers 2 --pp 16 --kind v-half --device-tflops 300%.0s", "--layers is 2: with "
         "the embedding and the head 4 layers, fewer than the 32 stages the schedule needs (a "
         "layer each); give --layers of 30 or more"},
        /* named an --asha-min 0 never given */
        {SELECT "%s/d --lr 1e-3,2e-3 --asha 2 --steps 1 --dry-run", "--asha 2 compares tasks at "
         "a rung below --steps (at --steps / 2), but --steps 1 leaves none; raise --steps to 2"},
        /* "is not a number" of a number below a double's normal range */
        {"schedule --kind 1f1b -p 2 -m 4 --overlap-fb 1e400%.0s", "'1e400' is beyond a double"},
        /* hinted "lower its --lr" */
        {TRAIN "%s/d --weight-decay 1e30 --steps 3", "--weight-decay 1e+30 x --lr 0.001 >= 1 "
         "flips the weights; lower it below 1000"},
    };
#undef PLAN
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(args, sizeof args, bad[k].fmt, dir, dir);
        run_result r = run(args);
        if (r.status != 1 || !strstr(r.last, bad[k].want))
            fail_msg("pipemem %s: exit %d, last line '%s' (wanted '%s')", args, r.status, r.last,
                     bad[k].want);
    }
    /* 1e-320 is a number (below a double's normal range, not 0) */
    assert_int_equal(run("schedule --kind dualpipev -p 2 -m 4 --overlap-fb 1e-320").status, 0);
}

/* Every command parses its options with the one parser (pm_cli_parse): an
 * unknown option is refused in the same words, --help prints the usage on
 * standard output and exits 0, a value missing at the end is named. */
static void test_one_option_parser(void **state) {
    (void)state;
    static const char *const cmd[] = {"schedule", "compare", "search", "curve", "block",
                                      "select", "sample", "prepare", "tokenizer", "train",
                                      "plan"};
    char args[300], want[300], out[300];
    snprintf(out, sizeof out, "%s/help.out", dir);
    for (size_t k = 0; k < sizeof cmd / sizeof cmd[0]; k++) {
        const char *sub = strcmp(cmd[k], "tokenizer") ? "" : " train";
        snprintf(args, sizeof args, "%s%s --bogus", cmd[k], sub);
        snprintf(want, sizeof want, "pipemem: %s: unknown option '--bogus' (try 'pipemem %s "
                 "--help')", cmd[k], cmd[k]);
        expect_error(args, want);
        snprintf(args, sizeof args, "%s%s --help", cmd[k], sub);
        run_result r = run_to(args, out);
        char line[300] = "";
        FILE *f = fopen(out, "r");
        assert_non_null(f);
        if (!fgets(line, sizeof line, f)) line[0] = 0;
        fclose(f);
        if (r.status || r.lines || strncmp(line, "usage: pipemem ", 15))
            fail_msg("%s: exit %d, %d stderr lines, first out '%s'", args, r.status, r.lines,
                     line);
    }
    expect_error("schedule --kind 1f1b -p 2 -m", "-m needs a value");
    expect_error("sample --ckpt", "--ckpt needs a value");
    expect_error("prepare x.txt -o", "-o needs a directory");
    expect_error("tokenizer train x.txt --vocab 300 -o", "-o needs a file");
    expect_error("train --data", "--data needs a value");
    expect_error("plan --layers", "--layers needs a value");
}

/* select's hints say what is wrong: a tasks-file pair is named with what
 * its key takes (layers=0 said "not key=value"), an empty name is not a
 * name, a default name taken says whose it is (it said "the name  is
 * taken"), --lr beyond a float says so (it said "must be a positive
 * number"); and --dry-run --json prints JSON (it printed the text). */
static void test_select_hints(void **state) {
    (void)state;
    char tf[300], args[900], out[300];
    snprintf(tf, sizeof tf, "%s/tasks.txt", dir);
    static const char *const file[][2] = {
        {"layers=0\n", "tasks.txt:1: 'layers=0': layers must be an integer 1..16777216"},
        {"lr=1e308\n", "'lr=1e308': lr must be a positive number up to 3.4e38"},
        {"name= lr=1e-3\n", "'name=' is not a name (1 to 31 of"},
        {"speed=3\n", "'speed=3' has an unknown key (name, lr,"},
        {"lr 1e-3\n", "'lr' is not key=value"},
        {"name=t1 lr=1e-3\n# a comment\n\nlr=2e-3\n",
         "tasks.txt:4: the name t1 (its default) is taken by the task of line 1"},
    };
    for (size_t k = 0; k < sizeof file / sizeof file[0]; k++) {
        FILE *f = fopen(tf, "w");
        assert_non_null(f);
        fputs(file[k][0], f);
        fclose(f);
        snprintf(args, sizeof args, "select --devices 1 --device-mem 64M --dry-run --tasks %s", tf);
        expect_error(args, file[k][1]);
    }
    expect_error("select --devices 1 --device-mem 64M --dry-run --lr 1e-3,1e308",
                 "--lr: '1e308' is not a positive number up to 3.4e38 (a float)");
    expect_error("train --data /nonexistent --lr 1e308", "--lr 1e+308 is beyond a float");
    snprintf(out, sizeof out, "%s/dry.json", dir);
    run_result r = run_to("select --devices 2 --device-mem 6M --lr 1e-3,2e-3 --layers 2 --dim 64 "
                          "--heads 2 --steps 10 --dry-run --json", out);
    assert_int_equal(r.status, 0);
    json_error_t je;
    json_t *root = json_load_file(out, 0, &je);
    if (!root) fail_msg("%s: not JSON: %s (line %d)", out, je.text, je.line);
    json_t *tasks = json_object_get(root, "tasks"), *pol = json_object_get(root, "policies");
    assert_int_equal(json_array_size(tasks), 2);
    assert_int_equal(json_array_size(pol), 3);
    assert_true(json_is_true(json_object_get(root, "dry_run")));
    double lb = json_number_value(json_object_get(root, "lower_bound_s"));
    for (size_t k = 0; k < 3; k++) /* no policy beats the bound */
        assert_true(json_number_value(json_object_get(json_array_get(pol, k), "makespan_s")) >=
                    lb * (1 - 1e-9));
    json_t *t0 = json_array_get(tasks, 0);
    assert_string_equal(json_string_value(json_object_get(t0, "task")), "t0");
    assert_true(json_array_size(json_object_get(t0, "shards")) >= 1);
    json_decref(root);
}

/* The file's lines from the first that does not start with '#'. */
static void body_of(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: not written", path);
    char line[4096];
    size_t n = 0;
    out[0] = 0;
    while (fgets(line, sizeof line, f))
        if (line[0] != '#' && n + strlen(line) < cap) n += (size_t)snprintf(out + n, cap - n, "%s", line);
    fclose(f);
}

/* schedule --format csv of a recomputed schedule is PyTorch's compute-only
 * layout: no comment line (it began with '# pipemem: recompute', which
 * _load_csv refuses), a note on stderr, and read back with --recompute it
 * is the schedule the text format gives. */
/* A learning rate that blows the parameters up (issue 19, 2.3): the run
 * stops at the first evaluation that is not finite, names the step and the
 * reason, exits 1, and saves nothing: no new checkpoint, and a good one
 * already at the path stays byte for byte (one device and a pipeline). */
static void test_diverged_saves_nothing(void **state) {
    (void)state;
    prepare_data();
    char args[900], path[600];
    const char *how[] = {"", "--pp 2"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/diverged%d.ckpt", dir, k);
        unlink(path);
        snprintf(args, sizeof args, TRAIN "%s/d %s --lr 1e10 --eval-every 1 --save %s", dir,
                 how[k], path);
        run_result r = run(args);
        if (r.status != 1 || !strstr(r.last, "the parameters are no longer finite, so the "
                                      "checkpoint was not saved"))
            fail_msg("pipemem %s: status %d, '%s'", args, r.status, r.last);
        assert_int_not_equal(access(path, F_OK), 0);
        /* a good checkpoint first; the diverging run must leave it as it was */
        snprintf(args, sizeof args, TRAIN "%s/d %s --save %s", dir, how[k], path);
        assert_int_equal(run(args).status, 0);
        char before[700], cmd[1500];
        snprintf(before, sizeof before, "%s.good", path);
        snprintf(cmd, sizeof cmd, "cp %s %s", path, before);
        assert_int_equal(system(cmd), 0);
        snprintf(args, sizeof args, TRAIN "%s/d %s --lr 1e10 --eval-every 1 --save %s", dir,
                 how[k], path);
        r = run(args);
        if (r.status != 1 || !strstr(r.last, "step 1: the validation loss is"))
            fail_msg("pipemem %s: status %d, '%s'", args, r.status, r.last);
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, before);
        assert_int_equal(system(cmd), 0);
    }
}

/* Too few layers for the stages: the hint counts the head's parts (issue
 * 19, 2.11): v-half on 4 devices has 8 stages; embedding + L blocks + a
 * head in 2 parts is L + 3 layers, so L >= 5, and 5 works. */
static void test_layers_hint_counts_head_parts(void **state) {
    (void)state;
    prepare_data();
    char args[600];
    const char *m = "train --dim 32 --heads 2 --ctx 16 --batch 4 --microbatches 4 --steps 1 "
                    "--pp 4 --schedule v-half --head-parts 2 --pad-vocab 8192 --eval-batches 1";
    snprintf(args, sizeof args, "%s --layers 3 --data %s/d", m, dir);
    expect_error(args, "use --layers >= 5,");
    snprintf(args, sizeof args, "%s --layers 5 --data %s/d", m, dir);
    assert_int_equal(run(args).status, 0);
}

/* One bubble under recomputation (issue 19, 2.12): the search's line, the
 * schedule's JSON and its text header give the same rate, and it is the
 * model's work against device time, by hand: with unit costs each device
 * does 3 m units of F, B and W, so bubble = 1 - 3 m / makespan (the reruns
 * of the forward are overhead, not work). */
static void test_one_bubble(void **state) {
    (void)state;
    char args[600], path[400], cmd[900], buf[8192];
    snprintf(path, sizeof path, "%s/b.json", dir);
    snprintf(args, sizeof args, "search -p 8 -m 16 --mem-limit 0.2 --recompute --format json "
             "-o %s", path);
    run_result r = run(args);
    assert_int_equal(r.status, 0);
    double said = atof(strstr(r.err, "bubble ") + 7) / 100;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    double json = atof(strstr(buf, "\"bubble\": ") + 10);
    double mk = atof(strstr(buf, "\"makespan\": ") + 12);
    assert_true(fabs(said - json) < 5e-5); /* the line prints 2 decimals of a percent */
    assert_true(fabs(json - (1 - 3.0 * 16 / mk)) < 1e-9);
    /* the measured timeline of a recomputed run: its peak is the arena's (a
     * rebuilt activation inside a backward counts), its time axis says its
     * unit, and it fits a screen */
    snprintf(path, sizeof path, "%s/t.svg", dir);
    snprintf(args, sizeof args, TRAIN "%s/d --pp 2 --schedule 1f1b-r --timeline %s --json",
             dir, path);
    snprintf(cmd, sizeof cmd, "%s/t.out", dir);
    r = run_to(args, cmd);
    assert_int_equal(r.status, 0);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "time (us)"));
    assert_true(atof(strstr(buf, "width=\"") + 7) <= 1700);
}

static void test_schedule_csv_recompute(void **state) {
    (void)state;
    char args[900], csv[300], a[300], b[300], ta[8192], tb[8192];
    snprintf(csv, sizeof csv, "%s/vr.csv", dir);
    snprintf(a, sizeof a, "%s/vr.txt", dir);
    snprintf(b, sizeof b, "%s/back.txt", dir);
    snprintf(args, sizeof args, "schedule --kind v-half-r -p 4 -m 8 --format csv -o %s", csv);
    run_result r = run(args);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "read it with --recompute"));
    FILE *f = fopen(csv, "r");
    assert_non_null(f);
    int c = fgetc(f);
    fclose(f);
    assert_true(c >= '0' && c <= '9'); /* an action, first */
    snprintf(args, sizeof args, "schedule --kind v-half-r -p 4 -m 8 -o %s", a);
    assert_int_equal(run(args).status, 0);
    snprintf(args, sizeof args, "schedule --from %s --recompute -o %s", csv, b);
    assert_int_equal(run(args).status, 0);
    body_of(a, ta, sizeof ta);
    body_of(b, tb, sizeof tb);
    assert_true(ta[0] != 0);
    assert_string_equal(ta, tb);
    char ha[4096], hb[4096]; /* the same peak and makespan: recomputed both ways */
    f = fopen(a, "r");
    assert_non_null(f);
    assert_non_null(fgets(ha, sizeof ha, f)), assert_non_null(fgets(ha, sizeof ha, f));
    fclose(f);
    f = fopen(b, "r");
    assert_non_null(f);
    assert_non_null(fgets(hb, sizeof hb, f)), assert_non_null(fgets(hb, sizeof hb, f));
    fclose(f);
    assert_string_equal(ha, hb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_inputs_bounded),
        cmocka_unit_test(test_prepare_output_not_a_directory),
        cmocka_unit_test(test_huge_pipelines_finish),
        cmocka_unit_test(test_pipeline_refusals),
        cmocka_unit_test(test_outputs_checked_before_training),
        cmocka_unit_test(test_select_resume_keeps_losses),
        cmocka_unit_test(test_select_all_failed),
        cmocka_unit_test(test_stdout_full),
        cmocka_unit_test(test_outputs_onto_inputs),
        cmocka_unit_test(test_no_output_is_an_input),
        cmocka_unit_test(test_misread_inputs_refused),
        cmocka_unit_test(test_messages_name_the_cause),
        cmocka_unit_test(test_schedule_from_conflicts),
        cmocka_unit_test(test_select_hints),
        cmocka_unit_test(test_library_names_as_flags),
        cmocka_unit_test(test_one_option_parser),
        cmocka_unit_test(test_schedule_csv_recompute),
        cmocka_unit_test(test_diverged_saves_nothing),
        cmocka_unit_test(test_one_bubble),
        cmocka_unit_test(test_layers_hint_counts_head_parts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
