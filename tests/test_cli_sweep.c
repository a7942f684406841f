/* test_cli_sweep.c: `pipemem select` as a person writes a sweep (issue 20,
 * part 3), through the built binary (tests/cli.h): random search over lists and
 * ranges (reproducible, within range, integers integer, log-uniform where
 * asked, distinct), duplicate tasks warned about, per-task steps and
 * weight decay (each such task bitwise `pipemem train` with those options),
 * numbers printed as given. Expected values come from the ranges and
 * lists themselves, from probabilities worked out by hand, and from
 * `pipemem train` run alone. */
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
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "checks.h"
#include "cli.h"
#include "pipemem/pm_select.h"
#include "select/parts.h"

static char dir[] = "/tmp/pm_test_cli_sweep_XXXXXX";
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

/* Runs `PM_BIN args` (chk_sh: a time limit stops a runaway), stdout to
 * DIR/out and stderr to DIR/err; the exit status. */
static int run(const char *args) {
    return chk_sh(NULL, "%s %s >%s/out 2>%s/err", bin, args, dir, dir);
}

/* The text of DIR/name (at most cap - 1 bytes). */
static char *slurp(const char *name, char *buf, size_t cap) {
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: not written", path);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int lines_of(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* A small corpus prepared once in DIR/d. */
static void prepare_data(void) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "test -e %s/d/train.bin || (for i in $(seq 1 300); do echo "
             "\"line $i: pack my box with five dozen liquor jugs\"; done > %s/t.txt && %s "
             "prepare %s/t.txt -o %s/d >/dev/null 2>&1)", dir, dir, bin, dir, dir);
    assert_int_equal(chk_sh(NULL, "%s", cmd), 0);
}

/* The dry run's tasks (--dry-run --json on DIR/out): a new reference. */
static json_t *dry_tasks(const char *args, json_t **root) {
    char a[2048], path[300];
    snprintf(a, sizeof a, "select --devices 2 --device-mem 8M --dim 32 --heads 2 --ctx 16 "
             "--batch 4 --dry-run --json %s", args);
    int st = run(a);
    if (st) {
        char err[2048];
        fail_msg("pipemem %s: status %d: %s", a, st, slurp("err", err, sizeof err));
    }
    snprintf(path, sizeof path, "%s/out", dir);
    json_error_t je;
    *root = json_load_file(path, 0, &je);
    if (!*root) fail_msg("%s: not JSON: %s", path, je.text);
    return json_object_get(*root, "tasks");
}

static double cfg_num(json_t *task, const char *key) {
    json_t *v = json_object_get(json_object_get(task, "config"), key);
    if (!json_is_number(v)) fail_msg("no number %s in a task's config", key);
    return json_number_value(v);
}

static const char *const cfg_keys[] = {"lr", "layers", "dim", "heads", "ctx", "batch",
                                       "microbatches", "warmup", "seed", "steps",
                                       "weight_decay"};
enum { NKEYS = sizeof cfg_keys / sizeof cfg_keys[0] };

static int same_task(json_t *a, json_t *b) {
    for (int k = 0; k < NKEYS; k++)
        if (cfg_num(a, cfg_keys[k]) != cfg_num(b, cfg_keys[k])) return 0;
    return 1;
}

/* --sample N: the same seed draws the same tasks, another seed others;
 * every value within its range (as floats: the text printed reads back
 * as the float the task holds),
 * integers integer, a list's values only, no task twice. Log-uniform:
 * P(lr < 1e-3) for log:1e-4..1e-2 is 1/2 (1e-3 is the ends' geometric
 * middle), where uniform gives 0.9e-3 / 9.9e-3 = 0.09; for the integers
 * log:1..16, P(layers <= 4) = ln 5 / ln 17 = 0.568, uniform 4/16 = 0.25.
 * 200 draws: 100 +- 20 and 114 +- 22 (three standard deviations). */
static void sampling(void **state) {
    (void)state;
    const char *space = "--lr log:1e-4..1e-2 --layers log:1..16 --steps 10,20 "
                        "--weight-decay 0..0.2 --warmup 0..3 --sample 200";
    char args[1024];
    json_t *r1, *r2, *r3;
    snprintf(args, sizeof args, "%s --sample-seed 7", space);
    json_t *a = dry_tasks(args, &r1);
    json_t *b = dry_tasks(args, &r2);
    snprintf(args, sizeof args, "%s --sample-seed 8", space);
    json_t *c = dry_tasks(args, &r3);
    assert_int_equal(json_array_size(a), 200);
    assert_int_equal(json_array_size(b), 200);
    int differ = 0, low_lr = 0, low_layers = 0, steps10 = 0;
    for (size_t i = 0; i < 200; i++) {
        json_t *t = json_array_get(a, i);
        if (!same_task(t, json_array_get(b, i)))
            fail_msg("task %zu: the same seed drew another", i);
        differ += !same_task(t, json_array_get(c, i));
        double lr = cfg_num(t, "lr"), layers = cfg_num(t, "layers");
        double wd = cfg_num(t, "weight_decay");
        double steps = cfg_num(t, "steps"), warm = cfg_num(t, "warmup");
        if (!((float)lr >= 1e-4f && (float)lr <= 1e-2f)) fail_msg("lr %g outside", lr);
        if (!(layers >= 1 && layers <= 16 && layers == floor(layers)))
            fail_msg("layers %g is not an integer 1..16", layers);
        if (!(wd >= 0 && (float)wd <= 0.2f)) fail_msg("weight decay %g outside", wd);
        if (steps != 10 && steps != 20) fail_msg("steps %g is not listed", steps);
        if (!(warm >= 0 && warm <= 3 && warm == floor(warm))) fail_msg("warmup %g", warm);
        assert_true(cfg_num(t, "dim") == 32 && cfg_num(t, "heads") == 2);
        low_lr += lr < 1e-3, low_layers += layers <= 4, steps10 += steps == 10;
        for (size_t j = 0; j < i; j++)
            if (same_task(t, json_array_get(a, j))) fail_msg("tasks %zu and %zu are one", j, i);
    }
    print_message("200 draws: lr < 1e-3 %d, layers <= 4 %d, steps 10 %d; seed 8 differs in %d\n",
                  low_lr, low_layers, steps10, differ);
    assert_true(differ > 190);
    assert_true(low_lr >= 80 && low_lr <= 120);
    assert_true(low_layers >= 92 && low_layers <= 136);
    assert_true(steps10 >= 79 && steps10 <= 121); /* a list's values alike: 1/2 */
    json_decref(r1), json_decref(r2), json_decref(r3);
}

/* Distinct tasks only: sampling the 4 tasks of two 2-value lists gives
 * each once; a fifth cannot exist and is refused in one line; and a range
 * without --sample is refused, naming the fix. */
static void sampling_distinct(void **state) {
    (void)state;
    json_t *root;
    json_t *t = dry_tasks("--lr 1e-3,2e-3 --layers 2,3 --sample 4", &root);
    assert_int_equal(json_array_size(t), 4);
    int seen[2][2] = {{0}};
    for (size_t i = 0; i < 4; i++) {
        json_t *x = json_array_get(t, i);
        int l = (float)cfg_num(x, "lr") == 2e-3f, y = (int)cfg_num(x, "layers") - 2;
        assert_true(y == 0 || y == 1);
        seen[l][y]++;
    }
    for (int l = 0; l < 2; l++)
        for (int y = 0; y < 2; y++) assert_int_equal(seen[l][y], 1);
    json_decref(root);
    char err[2048];
    static const char *const refused[][2] = {
        {"--lr 1e-3,2e-3 --layers 2,3 --sample 5", "the lists make only 4 distinct tasks"},
        {"--lr log:1e-4..1e-2", "--lr is a range (lo..hi): add --sample N"},
        {"--warmup log:0..5 --sample 2", "a log-uniform range needs a low end above 0"},
        {"--layers 8..2 --sample 2", "the low end must be below the high end"},
        {"--layers 2.5..8 --sample 2", "is not a range lo..hi (or log:lo..hi) of an integer"},
        {"--lr 1e-3 --sample-seed 3", "--sample-seed S seeds --sample N"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        char a[600];
        snprintf(a, sizeof a, "select --devices 2 --device-mem 8M --dim 32 --heads 2 --dry-run %s",
                 refused[k][0]);
        int st = run(a);
        slurp("err", err, sizeof err);
        if (st != 1 || lines_of(err) != 1 || !strstr(err, refused[k][1]))
            fail_msg("%s: status %d, stderr '%s' (wanted one line with '%s')", a, st, err,
                     refused[k][1]);
    }
}

/* A task repeating another's configuration is warned about, naming both:
 * 0.001 is 1e-3 on the command line, and two lines of a tasks file. */
static void duplicates_warned(void **state) {
    (void)state;
    char err[4096], a[600];
    assert_int_equal(run("select --devices 1 --device-mem 8M --dim 32 --heads 2 --dry-run "
                         "--lr 1e-3,2e-3,0.001"), 0);
    if (!strstr(slurp("err", err, sizeof err), "task t2 has the configuration of task t0"))
        fail_msg("no warning: '%s'", err);
    assert_int_equal(lines_of(err), 1);
    char tf[300];
    snprintf(tf, sizeof tf, "%s/dup.txt", dir);
    FILE *f = fopen(tf, "w");
    assert_non_null(f);
    fputs("name=a lr=3e-3 steps=5\nname=b lr=3e-3 steps=6\nname=c lr=0.003 steps=5\n", f);
    fclose(f);
    snprintf(a, sizeof a, "select --devices 1 --device-mem 64M --dry-run --tasks %s", tf);
    assert_int_equal(run(a), 0);
    if (!strstr(slurp("err", err, sizeof err), "task c has the configuration of task a"))
        fail_msg("no warning: '%s'", err);
    assert_int_equal(lines_of(err), 1); /* b differs in its steps */
}

/* Options beside a tasks file (issue 31, "select for daily use" 2): one
 * value on the command line is the value of every line that does not set
 * it (--steps 12: line a runs 12 steps, its warm-up train's for 12, line
 * b its own 5; --dim 32 for both); a list or a range beside the file is
 * refused in one line naming the option. */
static void tasks_file_defaults(void **state) {
    (void)state;
    char tf[300], args[1000], err[2048];
    snprintf(tf, sizeof tf, "%s/defaults.txt", dir);
    FILE *f = fopen(tf, "w");
    assert_non_null(f);
    fputs("name=a lr=1e-3\nname=b lr=3e-3 steps=5 dim=64\n", f);
    fclose(f);
    json_t *root;
    snprintf(args, sizeof args, "--steps 12 --tasks %s", tf); /* dry_tasks gives --dim 32 */
    json_t *t = dry_tasks(args, &root);
    assert_int_equal(json_array_size(t), 2);
    json_t *a = json_array_get(t, 0), *b = json_array_get(t, 1);
    assert_true(cfg_num(a, "steps") == 12 && cfg_num(a, "warmup") == 1 && cfg_num(a, "dim") == 32);
    assert_true(cfg_num(b, "steps") == 5 && cfg_num(b, "warmup") == 0 && cfg_num(b, "dim") == 64);
    assert_true((float)cfg_num(a, "lr") == 1e-3f && (float)cfg_num(b, "lr") == 3e-3f);
    json_decref(root);
    const char *bad[] = {"--steps 12,24", "--lr log:1e-4..1e-2"};
    const char *want[] = {"--steps holds a list beside the tasks file",
                          "--lr holds a range beside the tasks file"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "select --devices 2 --device-mem 8M --dry-run %s --tasks %s",
                 bad[k], tf);
        int st = run(args);
        slurp("err", err, sizeof err);
        if (st != 1 || lines_of(err) != 1 || !strstr(err, want[k]))
            fail_msg("%s beside --tasks: exit %d: %s", bad[k], st, err);
    }
}

/* Per-task budgets: a tasks file's steps= and weight_decay=, and --steps
 * and --weight-decay as lists. Each task runs exactly its steps and ends
 * with the checkpoint `pipemem train` writes with those options, byte for
 * byte; the CSV prints the numbers as given (lr 0.003, not 0.00300000003). */
static void per_task_budgets(void **state) {
    (void)state;
    prepare_data();
    const char *model = "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 --microbatches 2";
    char tf[300], a[2048], csv[8192];
    snprintf(tf, sizeof tf, "%s/budgets.txt", dir);
    /* (the tasks file gives the model too: the line's keys, else the defaults) */
    FILE *f = fopen(tf, "w");
    assert_non_null(f);
    fputs("name=short lr=3e-3 steps=4 weight_decay=0 layers=2 dim=32 heads=2 ctx=16 batch=4 "
          "microbatches=2\nname=long lr=1e-3 steps=7 layers=2 dim=32 heads=2 ctx=16 batch=4 "
          "microbatches=2\n", f);
    fclose(f);
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 1200K --tasks %s "
             "--resume %s/bud --csv %s/bud.csv", dir, tf, dir, dir);
    assert_int_equal(run(a), 0);
    slurp("bud.csv", csv, sizeof csv);
    if (!strstr(csv, "\nshort,0.003,") || !strstr(csv, "\nlong,0.001,"))
        fail_msg("lr not as given in:\n%s", csv);
    static const struct {
        const char *name, *opts;
        int steps;
    } want[] = {{"short", "--lr 3e-3 --steps 4 --weight-decay 0", 4},
                {"long", "--lr 1e-3 --steps 7", 7}};
    for (int i = 0; i < 2; i++) {
        char row[64];
        snprintf(row, sizeof row, "\n%s,", want[i].name);
        const char *r = strstr(csv, row);
        assert_non_null(r);
        int col = 0;
        for (r++; col < 10; r++) col += *r == ',';
        if (atoi(r) != want[i].steps) fail_msg("%s ran %d steps, want %d", want[i].name, atoi(r),
                                               want[i].steps);
        snprintf(a, sizeof a, "train --data %s/d %s %s --threads 1 --save %s/alone.ckpt", dir,
                 model, want[i].opts, dir);
        assert_int_equal(run(a), 0);
        snprintf(a, sizeof a, "cmp -s %s/alone.ckpt %s/bud/%s.ckpt", dir, dir, want[i].name);
        if (system(a)) fail_msg("task %s ends apart from train %s", want[i].name, want[i].opts);
    }
    /* as lists: 2 x 2 tasks, t1 = steps 3, weight decay 0.05 */
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 1200K %s --lr 2e-3 "
             "--steps 3,5 --weight-decay 0,0.05 --resume %s/lists --json", dir, model, dir);
    assert_int_equal(run(a), 0);
    char out[16384];
    slurp("out", out, sizeof out);
    if (!strstr(out, "\"lr\": 0.002,") || !strstr(out, "\"weight_decay\": 0.05}"))
        fail_msg("numbers not as given in:\n%s", out);
    snprintf(a, sizeof a, "train --data %s/d %s --lr 2e-3 --steps 3 --weight-decay 0.05 "
             "--threads 1 --save %s/alone.ckpt", dir, model, dir);
    assert_int_equal(run(a), 0);
    snprintf(a, sizeof a, "cmp -s %s/alone.ckpt %s/lists/t1.ckpt", dir, dir);
    if (system(a)) fail_msg("task t1 (steps 3, weight decay 0.05) ends apart from train");
}

/* One row of a select CSV: the columns a test reads. */
typedef struct {
    char name[32], state[16], val_text[40];
    int steps_run;
    double loss, val;
    long val_step; /* -1: empty */
} csv_row;

/* The rows of DIR/name (task, ..., steps_run 10, final_loss 11, val_loss
 * 12, val_step 13, ..., state 19); how many. */
static int read_csv(const char *name, csv_row *rows, int cap) {
    char text[16384];
    slurp(name, text, sizeof text);
    char *line = strchr(text, '\n'), *save = NULL;
    int n = 0;
    for (line = line ? strtok_r(line + 1, "\n", &save) : NULL; line && n < cap;
         line = strtok_r(NULL, "\n", &save)) {
        char *col[21];
        int k = 0;
        for (char *c = line; k < 21; k++) {
            col[k] = c;
            char *e = strchr(c, ',');
            if (!e) break;
            *e = 0, c = e + 1;
        }
        if (k < 19) fail_msg("%s: a short row", name);
        csv_row *r = &rows[n++];
        snprintf(r->name, sizeof r->name, "%s", col[0]);
        snprintf(r->val_text, sizeof r->val_text, "%s", col[12]);
        snprintf(r->state, sizeof r->state, "%s", col[19]);
        r->steps_run = atoi(col[10]);
        r->loss = strtod(col[11], NULL), r->val = strtod(col[12], NULL);
        r->val_step = *col[13] ? atol(col[13]) : -1;
    }
    return n;
}

static const csv_row *row_of(const csv_row *rows, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) return &rows[i];
    fail_msg("no row %s", name);
    return NULL;
}

/* The table says at which step each validation loss was taken, and a task
 * stopped early ranks after one that ran every step even with a lower
 * loss: "fast" (lr 1e-2, 8 steps, stopped after step 4 by --stop-after,
 * its last evaluation at step 4) against "slow" (lr 1e-4, 3 steps, done).
 * Under successive halving every stopped task's validation loss is its
 * last step's, and the stopped rank by that step, later first. */
static void table_ranks_and_steps(void **state) {
    (void)state;
    prepare_data();
    char tf[300], a[2048], out[16384];
    snprintf(tf, sizeof tf, "%s/rank.txt", dir);
    FILE *f = fopen(tf, "w");
    assert_non_null(f);
    fputs("name=fast lr=1e-2 steps=8 layers=2 dim=32 heads=2 ctx=16 batch=4\n"
          "name=slow lr=1e-4 steps=3 layers=2 dim=32 heads=2 ctx=16 batch=4\n", f);
    fclose(f);
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 8M --tasks %s "
             "--eval-every 2 --stop-after 5 --csv %s/rank.csv", dir, tf, dir);
    assert_int_equal(run(a), 0);
    csv_row r[2];
    assert_int_equal(read_csv("rank.csv", r, 2), 2);
    assert_string_equal(r[0].name, "slow");
    assert_string_equal(r[0].state, "done");
    assert_int_equal(r[0].val_step, 3);
    assert_string_equal(r[1].name, "fast");
    assert_string_equal(r[1].state, "stopped");
    assert_int_equal(r[1].steps_run, 5);
    assert_int_equal(r[1].val_step, 4);
    if (!(r[1].val < r[0].val)) /* else the rule was not what placed it */
        fail_msg("fast's val loss %g is not below slow's %g", r[1].val, r[0].val);
    slurp("out", out, sizeof out);
    if (!strstr(out, "ranked: tasks that ran every step by validation loss, then tasks stopped "
                     "early") || !strstr(out, "at step"))
        fail_msg("the table does not say how it ranks or at which step:\n%s", out);
    /* halving: 4 tasks, evaluations every 2 of 8 steps, ETA 2 */
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 8M --layers 2 --dim 32 "
             "--heads 2 --ctx 16 --batch 4 --steps 8 --eval-every 2 --halving 2 "
             "--lr 1e-3,3e-3,1e-2,2e-2 --csv %s/halv.csv", dir, dir);
    assert_int_equal(run(a), 0);
    csv_row h[4];
    assert_int_equal(read_csv("halv.csv", h, 4), 4);
    assert_string_equal(h[0].state, "done");
    for (int i = 1; i < 4; i++) {
        assert_string_equal(h[i].state, "stopped");
        assert_int_equal(h[i].val_step, h[i].steps_run);
        assert_true(h[i].val_step <= h[i - 1].val_step);
        if (h[i].val_step == h[i - 1].val_step && i > 1) assert_true(h[i].val >= h[i - 1].val);
    }
}

/* Resuming: a sweep interrupted (SIGINT) after its short task finished
 * keeps that task's losses; run again it finishes the long one, prints
 * every loss and exits 0, and --save-best takes the best of both; the
 * finished sweep run once more prints the same table and exits 0; the
 * same sweep with other --steps is refused in one line saying what
 * changed. */
static void resume_finished(void **state) {
    (void)state;
    prepare_data();
    char tf[300], a[3000], err[4096];
    snprintf(tf, sizeof tf, "%s/res.txt", dir);
    FILE *f = fopen(tf, "w");
    assert_non_null(f);
    fputs("name=short lr=1e-3 steps=3 layers=2 dim=32 heads=2 ctx=16 batch=4\n"
          "name=long lr=3e-3 steps=2000 layers=2 dim=32 heads=2 ctx=16 batch=4\n", f);
    fclose(f);
    char sweep[1200];
    snprintf(sweep, sizeof sweep, "%s select --data %s/d --devices 2 --device-mem 8M --tasks %s "
             "--eval-every 200 --resume %s/rs", bin, dir, tf, dir);
    snprintf(a, sizeof a, "%s --csv %s/r1.csv > %s/r1.out 2> %s/r1.err & pid=$!; n=0; "
             "until grep -q 'short done' %s/r1.err || [ $n -gt 600 ]; do sleep 0.05; "
             "n=$((n+1)); done; kill -INT $pid; wait $pid; test $? -eq 130", sweep, dir, dir,
             dir, dir);
    if (chk_sh(NULL, "%s", a)) fail_msg("the sweep was not interrupted cleanly (%s)", a);
    csv_row r1[2], r2[2], r3[2];
    assert_int_equal(read_csv("r1.csv", r1, 2), 2);
    const csv_row *s1 = row_of(r1, 2, "short");
    assert_string_equal(s1->state, "done");
    assert_true(isfinite(s1->loss) && isfinite(s1->val));
    assert_string_equal(row_of(r1, 2, "long")->state, "stopped");
    /* resumed: long runs to its end, short keeps its losses */
    snprintf(a, sizeof a, "%s --csv %s/r2.csv --save-best %s/best.ckpt > %s/out 2> %s/err",
             sweep, dir, dir, dir, dir);
    assert_int_equal(chk_sh(NULL, "%s", a), 0);
    assert_int_equal(read_csv("r2.csv", r2, 2), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(r2[i].state, "done");
        assert_true(isfinite(r2[i].loss) && isfinite(r2[i].val));
    }
    assert_string_equal(row_of(r2, 2, "short")->val_text, s1->val_text);
    assert_int_equal(row_of(r2, 2, "long")->steps_run, 2000);
    snprintf(a, sizeof a, "cmp -s %s/best.ckpt %s/rs/%s.ckpt", dir, dir, r2[0].name);
    if (system(a)) fail_msg("--save-best is not the best task's (%s)", r2[0].name);
    /* finished: nothing runs, the same table, exit 0 */
    snprintf(a, sizeof a, "%s --csv %s/r3.csv > %s/out 2> %s/err", sweep, dir, dir, dir);
    assert_int_equal(chk_sh(NULL, "%s", a), 0);
    assert_int_equal(read_csv("r3.csv", r3, 2), 2);
    for (int i = 0; i < 2; i++) {
        assert_string_equal(r3[i].name, r2[i].name);
        assert_string_equal(r3[i].val_text, r2[i].val_text);
    }
    char out[8192];
    slurp("out", out, sizeof out);
    if (strstr(out, " nan ") || strstr(out, " -nan ")) fail_msg("a loss missing in:\n%s", out);
    /* other steps: refused before anything runs, in one line */
    f = fopen(tf, "w");
    fputs("name=short lr=1e-3 steps=5 layers=2 dim=32 heads=2 ctx=16 batch=4\n"
          "name=long lr=3e-3 steps=2000 layers=2 dim=32 heads=2 ctx=16 batch=4\n", f);
    fclose(f);
    snprintf(a, sizeof a, "%s > %s/out 2> %s/err", sweep, dir, dir);
    assert_int_equal(chk_sh(NULL, "%s", a), 1);
    slurp("err", err, sizeof err);
    if (lines_of(err) != 1 || !strstr(err, "task short: ") ||
        !strstr(err, "was made with --steps 3, this run has --steps 5"))
        fail_msg("a changed --steps: '%s'", err);
}

/* Issue 31, defect 7: a finished sweep's record edited so that t0 would
 * rank first (`step 4 loss -1e30 val_loss -7`) and the sweep run again
 * with --save-best: refused in one line naming the record, nothing saved;
 * t1's record copied over t0's (a record with a good sum, of another
 * checkpoint) likewise. */
static void resume_record_tampered(void **state) {
    (void)state;
    prepare_data();
    char a[2000], err[4096], best[300];
    snprintf(best, sizeof best, "%s/tb.ckpt", dir);
    const char *sweep = "select --data %s/d --devices 2 --device-mem 8M --lr 1e-2,1e-3 "
                        "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 --steps 4 "
                        "--resume %s/tr --save-best %s";
    snprintf(a, sizeof a, sweep, dir, dir, best);
    assert_int_equal(run(a), 0);
    remove(best);
    const char *edit[] = {"printf 'step 4 loss -1e30 val_loss -7\\n' > %s/tr/t0.loss",
                          "cp %s/tr/t1.loss %s/tr/t0.loss"};
    const char *want[] = {"edited or damaged", "of another checkpoint"};
    for (int k = 0; k < 2; k++) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, edit[k], dir, dir);
        assert_int_equal(system(cmd), 0);
        int st = run(a);
        slurp("err", err, sizeof err);
        if (st != 1 || lines_of(err) != 1 || !strstr(err, "t0.loss") || !strstr(err, want[k]))
            fail_msg("record edited (%d): exit %d: %s", k, st, err);
        assert_int_not_equal(access(best, F_OK), 0);
    }
}

/* The double at key of a JSON object, read back (jansson reads with strtod). */
static double num(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("no number %s", key);
    return json_number_value(v);
}

/* Numbers that round-trip (issue 31, "select for daily use" 4): a task's
 * final_loss and val_loss read back from select --json are the doubles
 * train --json prints for the same run, bit for bit (the two train alike;
 * train printed 6 decimals, select 9 digits). */
static void json_round_trip(void **state) {
    (void)state;
    prepare_data();
    const char *m = "--lr 1e-2 --layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 --steps 5 "
                    "--eval-every 5";
    char a[1200], path[300];
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 8M %s --json", dir, m);
    assert_int_equal(run(a), 0);
    json_error_t je;
    snprintf(path, sizeof path, "%s/out", dir);
    json_t *sel = json_load_file(path, 0, &je);
    if (!sel) fail_msg("select --json: %s", je.text);
    snprintf(a, sizeof a, "train --data %s/d %s --threads 1 --json", dir, m);
    assert_int_equal(run(a), 0);
    json_t *tr = json_load_file(path, 0, &je);
    if (!tr) fail_msg("train --json: %s", je.text);
    json_t *task = json_array_get(json_object_get(sel, "tasks"), 0);
    const char *key[] = {"final_loss", "val_loss"};
    for (int k = 0; k < 2; k++) {
        double x = num(task, key[k]), y = num(tr, key[k]);
        if (memcmp(&x, &y, sizeof x)) fail_msg("%s: select %.17g, train %.17g", key[k], x, y);
    }
    json_decref(sel);
    json_decref(tr);
}

/* The elements of doc named `name` whose class is `cls` (any class: NULL),
 * in document order, into out (cap); how many. */
static int elements(xmlNode *n, const char *name, const char *cls, xmlNode **out, int cap,
                    int k) {
    for (; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE) continue;
        xmlChar *c = xmlGetProp(n, (const xmlChar *)"class");
        if (!strcmp((const char *)n->name, name) && (!cls || (c && !strcmp((char *)c, cls)))) {
            if (k < cap) out[k] = n;
            k++;
        }
        xmlFree(c);
        k = elements(n->children, name, cls, out, cap, k);
    }
    return k;
}

/* The points of a path's d ("M x y L x y ..."). */
static int path_points(xmlNode *n) {
    xmlChar *d = xmlGetProp(n, (const xmlChar *)"d");
    int k = 0;
    for (const char *q = (const char *)d; q && *q; q++) k += *q == 'M' || *q == 'L';
    xmlFree(d);
    return k;
}

/* --curves (issue 31, "select for daily use" 3): a sweep of 4 learning
 * rates under ASHA draws an SVG that parses as XML with one training path
 * per task, each a point per step it ran (30 steps: no averaging), the
 * legend in the table's order (the best first), a stop mark per task ASHA
 * stopped; train --curves one path of its steps; a --curves path that
 * cannot be written is refused before anything runs. */
static void curves_svg(void **state) {
    (void)state;
    prepare_data();
    char a[1500], path[300], err[2048];
    snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 8M --lr 1e-4,1e-3,3e-3,1e-2 "
             "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 --steps 30 --asha 2 "
             "--curves %s/c.svg --csv %s/c.csv", dir, dir, dir);
    assert_int_equal(run(a), 0);
    csv_row rows[4];
    assert_int_equal(read_csv("c.csv", rows, 4), 4);
    snprintf(path, sizeof path, "%s/c.svg", dir);
    xmlDoc *doc = xmlReadFile(path, NULL, XML_PARSE_NONET);
    if (!doc) fail_msg("%s: not XML", path);
    xmlNode *root = xmlDocGetRootElement(doc), *paths[8], *legend[1], *text[8], *stops[8];
    assert_int_equal(elements(root, "path", "train", paths, 8, 0), 4);
    int stopped = 0;
    for (int r = 0; r < 4; r++) {
        stopped += !strcmp(rows[r].state, "stopped");
        int found = 0;
        for (int k = 0; k < 4; k++) {
            xmlChar *t = xmlGetProp(paths[k], (const xmlChar *)"data-task");
            if (t && !strcmp((char *)t, rows[r].name)) {
                found++;
                assert_int_equal(path_points(paths[k]), rows[r].steps_run);
            }
            xmlFree(t);
        }
        assert_int_equal(found, 1);
    }
    assert_true(stopped >= 1); /* ASHA at 2 of 4 tasks stops some at its first rung */
    assert_int_equal(elements(root, "g", "stop", stops, 8, 0), stopped);
    assert_int_equal(elements(root, "g", "legend", legend, 1, 0), 1);
    assert_int_equal(elements(legend[0]->children, "text", NULL, text, 8, 0), 4);
    for (int r = 0; r < 4; r++) { /* the table's order: the best first */
        xmlChar *t = xmlNodeGetContent(text[r]);
        if (strncmp((char *)t, rows[r].name, strlen(rows[r].name)))
            fail_msg("legend %d: '%s', the table's '%s'", r, (char *)t, rows[r].name);
        xmlFree(t);
    }
    xmlFreeDoc(doc);
    /* train: one path, a point per step */
    snprintf(a, sizeof a, "train --data %s/d --layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 "
             "--steps 7 --threads 1 --curves %s/t.svg", dir, dir);
    assert_int_equal(run(a), 0);
    snprintf(path, sizeof path, "%s/t.svg", dir);
    doc = xmlReadFile(path, NULL, XML_PARSE_NONET);
    if (!doc) fail_msg("%s: not XML", path);
    assert_int_equal(elements(xmlDocGetRootElement(doc), "path", "train", paths, 8, 0), 1);
    assert_int_equal(path_points(paths[0]), 7);
    xmlFreeDoc(doc);
    /* an output that cannot be written: refused before anything runs */
    const char *cmd[2] = {"select --data %s/d --devices 2 --device-mem 8M --layers 2 --dim 32 "
                          "--heads 2 --ctx 16 --batch 4 --steps 3 --curves %s/no/c.svg",
                          "train --data %s/d --layers 2 --dim 32 --heads 2 --ctx 16 --batch 4 "
                          "--steps 3 --curves %s/no/c.svg"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, cmd[k], dir, dir);
        int st = run(a);
        slurp("err", err, sizeof err);
        if (st != 1 || lines_of(err) != 1 || !strstr(err, "no/c.svg"))
            fail_msg("%s: exit %d: %s", a, st, err);
    }
}

/* A request far beyond any machine (4096 devices whose slabs hold a
 * 48-layer, 4096-wide model's shards) is refused before anything is
 * allocated, in one line naming what it needs and what the machine has. */
static void memory_refused(void **state) {
    (void)state;
    prepare_data();
    char a[1024], err[4096];
    snprintf(a, sizeof a, "select --data %s/d --devices 4096 --device-mem 64G --dim 4096 "
             "--layers 48 --heads 32 --ctx 16 --batch 4 --steps 1", dir);
    assert_int_equal(run(a), 1);
    slurp("err", err, sizeof err);
    if (lines_of(err) != 1 || !strstr(err, "4096 devices' slabs of ") ||
        !strstr(err, "GiB available; use fewer devices") || !strstr(err, "--device-mem"))
        fail_msg("refusal: '%s'", err);
}

/* The dry run forecasts with the measured costs of moving state, not the
 * compute alone: one task of 3 shards on one device, 6 steps. By hand,
 * from pass.c: a step's 2S - 1 = 5 passes each bring their shard's state
 * in (shards 0, 1, 2, 1, 0); each shard's first pass after a step ended
 * (a forward or the fused last, or an evaluation's) writes all of it back
 * after AdamW's update (a quarter of the state's bytes are parameters),
 * every other pass computing gradients writes them back (a quarter); each
 * of the 2 evaluations (steps 4 and 6, every 4 and the last; 4 batches, one
 * chunk) is a forward pass per shard, each bringing its state in, so step
 * 5's forwards find the updates done. In RAM or spilled alike (the spill
 * files' rates). On one device the makespan is the task's compute and
 * moves; --help no longer says the rate is assumed. */
static void dry_run_forecast(void **state) {
    (void)state;
    char a[1024], help[16384];
    for (int spill = 0; spill < 2; spill++) {
        snprintf(a, sizeof a, "select --devices 1 --device-mem 1M --layers 3 --dim 32 "
                 "--heads 2 --ctx 16 --batch 4 --steps 6 --eval-every 4 --dry-run --json%s%s",
                 spill ? " --spill " : "", spill ? dir : "");
        assert_int_equal(run(a), 0);
        char path[300];
        snprintf(path, sizeof path, "%s/out", dir);
        json_error_t je;
        json_t *root = json_load_file(path, 0, &je);
        if (!root) fail_msg("not JSON: %s", je.text);
        assert_string_equal(json_string_value(json_object_get(root, "store")),
                            spill ? "spill" : "ram");
        double rd = num(root, "state_read_bytes_per_s"), wr = num(root, "state_write_bytes_per_s");
        double adam = num(root, "adamw_s_per_param");
        assert_true(rd > 0 && wr > 0 && adam > 0 && num(root, "flops_per_s") > 0);
        json_t *t = json_array_get(json_object_get(root, "tasks"), 0);
        json_t *sh = json_object_get(t, "shards");
        assert_int_equal(json_array_size(sh), 3);
        double st[3], all = 0;
        for (int k = 0; k < 3; k++) all += st[k] = num(json_array_get(sh, (size_t)k), "state");
        double in = (2 * st[0] + 2 * st[1] + st[2]) / rd; /* every pass of a step: in */
        double update = all / wr + all / 16 * adam;       /* each shard's first pass after a
                                                             step: AdamW, all of it back */
        double grads = (st[0] + st[1]) / 4 / wr;          /* backwards: gradients back */
        double step = in + update + grads;
        /* after an evaluation (its passes took the updates) the fused pass
         * writes its gradients back; an evaluation (after steps 4 and 6):
         * every shard in, the updates */
        double after_eval = in + grads + st[2] / 4 / wr, eval = all / rd + update;
        double want = 5 * step + after_eval + 2 * eval;
        double move = num(t, "move_s"), compute = num(t, "compute_s");
        if (fabs(move - want) > 1e-6 * want)
            fail_msg("spill %d: moves forecast %.9g s, by hand %.9g s", spill, move, want);
        json_t *pol = json_object_get(root, "policies");
        for (size_t p = 0; p < 3; p++) {
            double mk = num(json_array_get(pol, p), "makespan_s");
            if (fabs(mk - (compute + move)) > 1e-6 * mk)
                fail_msg("one device: makespan %.9g s, compute %.9g + moves %.9g", mk, compute,
                         move);
        }
        json_decref(root);
    }
    /* 64 tasks of 1000000 steps (issue 31, defect 10: 42 to 88 s and 3 GB):
     * a bounded share of the steps simulated, and said so */
    json_t *root;
    json_t *t = dry_tasks("--lr 1e-3,2e-3,3e-3,4e-3,5e-3,6e-3,7e-3,8e-3 --layers 1,2,3,4,5,6,7,8 "
                          "--steps 1000000", &root);
    assert_int_equal(json_array_size(t), 64);
    assert_true(json_is_true(json_object_get(root, "extrapolated")));
    double sim = num(root, "steps_simulated");
    assert_true(sim >= 64 && sim <= PM_SELECT_FORECAST_PASSES + 64);
    assert_true(fabs(num(root, "scale") * sim - 64e6) < 0.05 * 64e6); /* uniform tasks */
    json_decref(root);
    assert_int_equal(run("select --help"), 0);
    slurp("out", help, sizeof help);
    assert_null(strstr(help, "50 GFLOP/s"));
    assert_non_null(strstr(help, "measured on this machine first"));
}

/* ASHA end to end: 9 learning rates, ETA 3, 9 steps. With --asha-min 3
 * the rungs are 3 and 9: exactly 3 tasks go past step 3 (at most
 * ceil(9/3) leave the first rung, and once every task has reported there
 * the best fill that quota), the other 6 stop at step 3 with their loss
 * taken there; the finished ones rank first and train bitwise as `pipemem
 * train` alone. With the default rungs 1, 3, 9 exactly one runs to the end,
 * 2 stop at step 3 and 6 at step 1. */
static void asha_end_to_end(void **state) {
    (void)state;
    prepare_data();
    const char *model = "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 4";
    const char *lrs = "1e-4,2e-4,5e-4,1e-3,2e-3,3e-3,5e-3,1e-2,2e-2";
    char a[2048];
    for (int dflt = 0; dflt < 2; dflt++) {
        snprintf(a, sizeof a, "select --data %s/d --devices 2 --device-mem 8M %s --steps 9 "
                 "--eval-every 0 --lr %s --asha 3%s --resume %s/asha%d --csv %s/asha.csv", dir,
                 model, lrs, dflt ? "" : " --asha-min 3", dir, dflt, dir);
        assert_int_equal(run(a), 0);
        csv_row r[9];
        assert_int_equal(read_csv("asha.csv", r, 9), 9);
        int at[10] = {0};
        for (int i = 0; i < 9; i++) {
            int s = r[i].steps_run;
            if (s != 1 && s != 3 && s != 9) fail_msg("%s stopped after %d steps", r[i].name, s);
            at[s]++;
            assert_int_equal(r[i].val_step, s);
            assert_string_equal(r[i].state, s == 9 ? "done" : "stopped");
            if (i && r[i].steps_run > r[i - 1].steps_run) fail_msg("not ranked by steps");
        }
        if (dflt) assert_true(at[9] == 1 && at[3] == 2 && at[1] == 6);
        else assert_true(at[9] == 3 && at[3] == 6 && at[1] == 0);
        /* the best finished task as train alone */
        double lr = 0;
        char text[16384], key[48];
        slurp("asha.csv", text, sizeof text);
        snprintf(key, sizeof key, "\n%s,", r[0].name);
        lr = atof(strstr(text, key) + strlen(key));
        snprintf(a, sizeof a, "train --data %s/d %s --steps 9 --lr %g --threads 1 --save "
                 "%s/alone.ckpt", dir, model, lr, dir);
        assert_int_equal(run(a), 0);
        snprintf(a, sizeof a, "cmp -s %s/alone.ckpt %s/asha%d/%s.ckpt", dir, dir, dflt, r[0].name);
        if (system(a)) fail_msg("ASHA's finished %s ends apart from train", r[0].name);
    }
    /* refusals: one line each */
    static const char *const refused[][2] = {
        {"--asha 3 --halving 2", "--asha and --halving are two ways"},
        {"--asha-min 2", "--asha-min N needs --asha ETA"},
        {"--asha 3 --asha-min 5", "leaves no rung at or above --asha-min 5"},
        {"--asha 3 --steps 9,10", "--asha compares tasks at the same steps"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        char err[2048];
        snprintf(a, sizeof a, "select --devices 2 --device-mem 8M %s --dry-run --lr 1e-3,2e-3 "
                 "--steps 9 %s", model, refused[k][0]);
        int st = run(a);
        slurp("err", err, sizeof err);
        if (st != 1 || lines_of(err) != 1 || !strstr(err, refused[k][1]))
            fail_msg("%s: status %d, '%s'", refused[k][0], st, err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sampling),
        cmocka_unit_test(sampling_distinct),
        cmocka_unit_test(duplicates_warned),
        cmocka_unit_test(tasks_file_defaults),
        cmocka_unit_test(per_task_budgets),
        cmocka_unit_test(table_ranks_and_steps),
        cmocka_unit_test(resume_finished),
        cmocka_unit_test(resume_record_tampered),
        cmocka_unit_test(json_round_trip),
        cmocka_unit_test(curves_svg),
        cmocka_unit_test(memory_refused),
        cmocka_unit_test(dry_run_forecast),
        cmocka_unit_test(asha_end_to_end),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
