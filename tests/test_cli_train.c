/* test_cli_train.c: `pipemem prepare`, `train` and `sample` through the
 * built binary (tests/cli.h):
 *   - one device end to end: prepare, train --json (its keys, the device's
 *     bytes by kind from the model's own count, a peak resident memory that
 *     holds the state), sample (exactly the bytes checks.c draws from the
 *     checkpoint), stopped and resumed to the same checkpoint byte for byte,
 *     on one device and on 2 device threads; bad inputs in one line each;
 *   - refused before the first step and before any line is printed: a
 *     resume with another --steps or --warmup, a finished run resumed with
 *     fewer steps, a damaged or another model's checkpoint, --save on a
 *     device; nothing written;
 *   - `train --pp 2 --schedule v-half`, and --pp 4 with 1f1b, zb-v and 1f1b
 *     placed by memory (--placement memory), end with the same losses and a
 *     byte-identical checkpoint as the single-device `train`; each device
 *     allocates what its plan says (--pp 4: at most half the whole model's
 *     state); it reports the runtime's JSON fields, writes the trace and
 *     timeline (read back by checks.c), resumes a finished run, samples
 *     through the pipeline, recomputes, and refuses too few layers with a
 *     clear message. */
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
#include "cli.h"
#include "pipemem/pm_plan.h"
#include "pipemem/pm_train.h"

static char dir[256];
static uint8_t pp_text[3000]; /* test_cli_train_pp's corpus */

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pm_test_cli_train_%d", (int)getpid());
    const char *s = "pipelines keep every device busy; memory is the knob. ";
    size_t L = strlen(s);
    for (size_t i = 0; i < sizeof pp_text; i++) pp_text[i] = (uint8_t)s[(i * 7 + i / L) % L];
    /* the other tests' corpus, DIR/t.txt: a learnable text, a short
     * sentence repeated (4000 bytes) */
    return chk_sh(NULL, "mkdir -p %s && yes 'the quick brown fox jumps over the lazy dog ' | "
                  "tr -d '\\n' | head -c 4000 > %s/t.txt", dir, dir) ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

/* Runs a shell command; returns its exit status, stderr's first line in
 * line (if not NULL) and the number of stderr lines (if nlines is not NULL). */
static int sh(const char *cmd, char *line, size_t cap, int *nlines) {
    chk_cmd c = {0};
    int rc = chk_sh(&c, "%s", cmd);
    if (line) chk_line(c.err, 0, line, cap);
    if (nlines) *nlines = chk_lines(c.err);
    chk_cmd_free(&c);
    return rc;
}

static void test_cli_end_to_end(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char cmd[4096], line[1024], txt[300];
    int n;
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
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
    FILE *f = fopen(txt, "r");
    assert_non_null(f);
    assert_non_null(fgets(out, sizeof out, f));
    fclose(f);
    const char *keys[] = {"\"steps\": 4", "\"final_loss\"", "\"val_loss\"", "\"median_step_ms\"",
                          "\"tokens_per_s\"", "\"gflops_per_s\""};
    for (int i = 0; i < 6; i++)
        if (!strstr(out, keys[i])) fail_msg("no %s in %s", keys[i], out);
    /* the device's bytes by kind: 4 bytes a parameter each for parameters and
     * gradients, 8 for the moments (the model's own count), and the process's
     * peak resident memory, which holds at least that state */
    size_t np = pm_gpt_num_params(&(pm_gpt_config){.vocab = 256, .ctx = 8, .dim = 16,
                                                  .heads = 2, .layers = 1});
    char want[160];
    snprintf(want, sizeof want, "\"parameters\": %zu, \"gradients\": %zu, \"moments\": %zu",
             4 * np, 4 * np, 8 * np);
    if (!strstr(out, want)) fail_msg("no '%s' in %s", want, out);
    const char *rss = strstr(out, "\"peak_rss_bytes\": [");
    assert_non_null(rss);
    assert_true(strtod(rss + 19, NULL) >= 16.0 * (double)np);
    /* sample: the prompt, then exactly the 40 bytes the model draws, then '\n' */
    snprintf(cmd, sizeof cmd, "%s/m.ckpt", dir);
    if (chk_sample(bin, cmd, "the", 40, 7, line, sizeof line)) fail_msg("%s", line);
    /* --ids draws the same tokens from the same ids ("the" is 116 104 101)
     * and prints them as numbers: each the byte the text run printed */
    char ids[4096], tcmd[4096];
    snprintf(ids, sizeof ids, "%s sample --ckpt %s/m.ckpt --ids --prompt '116 104 101' -n 20 "
             "--seed 3", bin, dir);
    snprintf(tcmd, sizeof tcmd, "%s sample --ckpt %s/m.ckpt --prompt the -n 20 --seed 3", bin, dir);
    chk_cmd ci = {0}, ct = {0};
    assert_int_equal(chk_sh(&ci, "%s", ids), 0);
    assert_int_equal(chk_sh(&ct, "%s", tcmd), 0);
    const char *p = ci.out;
    size_t k = 0;
    for (char *end; k < 24; k++, p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v != (unsigned char)ct.out[k])
            fail_msg("--ids token %zu: %ld, the text's %d", k, v, ct.out[k]);
    }
    if (k != 23 || ct.out[23] != '\n') fail_msg("--ids printed %zu ids: %s", k, ci.out);
    chk_cmd_free(&ci), chk_cmd_free(&ct);
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
        /* a split too short for the context is named as the user named it
         * (4000 bytes: 3600 train, 400 val), in both modes */
        {"train --train %s/d/train.bin --val %s/d/val.bin --ctx 5000 --dim 16 --heads 2 "
         "--layers 1 --steps 1", "/d/train.bin holds 3600 tokens, fewer than context+1 = 5001"},
        {"train --train %s/d/train.bin --val %s/d/val.bin --ctx 1000 --dim 16 --heads 2 "
         "--layers 1 --steps 1", "/d/val.bin holds 400 tokens"},
        {"train --train %s/d/train.bin --val %s/d/val.bin --ctx 1000 --dim 16 --heads 2 "
         "--layers 2 --steps 1 --pp 2", "/d/val.bin holds 400 tokens"},
        {"train --data %s/d/ --ctx 1000 --dim 16 --heads 2 --layers 1 --steps 1",
         "/d/val.bin holds 400 tokens"}, /* one slash, however the directory ends */
        {"train --data %s/d --ctx 8 --dim 16 --heads 3 --layers 1 --steps 1", "heads"},
        /* one split alone: one line naming the other, not the usage */
        {"train --train %s/d/train.bin --steps 1", "--train FILE needs --val FILE beside it"},
        {"sample --ckpt %s/m.ckpt --ids -n 2", "--ids needs --prompt"},
        {"sample --ckpt %s/m.ckpt --ids --prompt '1 x' -n 2", "is not token ids 0..255"},
        {"sample --ckpt %s/m.ckpt --ids --prompt '256' -n 2", "is not token ids 0..255"},
        /* a model over this machine's memory: the advice follows where the
         * bytes go (the state here: more microbatches would not help) */
        {"train --data %s/d --ctx 8 --dim 16384 --heads 16 --layers 48 --steps 1",
         "use fewer --layers or a smaller --dim"},
        {"train --data %s/d --ctx 8 --dim 512 --heads 8 --layers 4 --batch 16777216 --steps 1",
         "use a shorter --ctx, a smaller batch or more --microbatches"},
        {"train --data %s/d --ctx 8 --dim 16384 --heads 16 --layers 48 --batch 8 "
         "--microbatches 8 --pp 2 --steps 1",
         "use a smaller model (the device threads share this machine's memory)"},
        {"train --data %s/d --ctx 8 --dim 512 --heads 8 --layers 4 --batch 16777216 "
         "--microbatches 2 --pp 2 --steps 1",
         "use a shorter --ctx, more --microbatches or a schedule with less memory"},
        {"train --data %s/d --ctx 8 --dim 16 --heads 2 --layers 1 --steps 1 --device-mem 1K",
         "but --device-mem is 1.00 KiB; split it across devices with --pp P (each holds only its "
         "stages; a P too few is refused with what its busiest device needs) or use a smaller "
         "model"},
        {"train --data %s/v2 --ctx 8 --dim 16 --heads 2 --layers 1 --steps 1", "version 3"},
        {"train --data %s/d --ctx 8 --dim 16 --heads 2 --layers 2 --steps 8 --batch 2 "
         "--microbatches 2 --resume %s/m.ckpt", "made with --layers 1, this run has 2"},
        /* the same data, padded otherwise: the padding is named, not the data */
        {"train --data %s/d --ctx 8 --dim 16 --heads 2 --layers 1 --steps 4 --batch 2 "
         "--microbatches 2 --pad-vocab 384 --resume %s/m.ckpt",
         "the checkpoint's vocabulary is the data's 256, unpadded; this run's is 384: resume "
         "without --pad-vocab"},
        {"train --data %s/d --ctx 8 --dim 16 --heads 2 --layers 1 --steps 4 --batch 2 "
         "--microbatches 2 --pad-vocab 384 --pp 2 --resume %s/m.ckpt",
         "resume without --pad-vocab"},
        /* one parser for both modes: mode-only options are refused in the other */
        {"train --data %s/d --pp 2 --schedule 1f1b --threads 2", "--threads is for single-device"},
        {"train --data %s/d --steps 1 --timeline %s/t.svg", "--timeline is for pipeline runs; "
         "add --pp P (and --schedule KIND for another schedule than 1F1B)"},
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
    /* A file the user named as a library parameter is (micro: the field
     * behind --microbatches) is named as typed, not turned into the flag. */
    snprintf(cmd, sizeof cmd, "b=$(readlink -f %s) && cd %s/d && cp val.bin micro && \"$b\" train "
             "--train train.bin --val micro --ctx 1000 --dim 16 --heads 2 --layers 1 --steps 1",
             bin, dir);
    assert_int_not_equal(sh(cmd, line, sizeof line, &n), 0);
    assert_non_null(strstr(line, "pipemem: micro holds 400 tokens"));
    /* but a word that only begins a longer name (a file "opt", the field
     * opt.lr) leaves the name to be turned into its flag */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d --lr -1 --save opt --steps 1", bin, dir);
    assert_int_not_equal(sh(cmd, line, sizeof line, &n), 0);
    if (!strstr(line, "--lr -1")) fail_msg("%s", line);
}

/* Before the first step and before any line is printed (issue 31,
 * defects 6, 12 and 17): a checkpoint resumed with another --steps or
 * --warmup (its learning-rate schedule would jump mid-run), or a finished
 * run resumed with fewer steps, is refused naming the option; a damaged
 * checkpoint or another model's is refused with its one line, in both
 * modes; --save on a device (/dev/null, /dev/full) is refused before
 * training, not at the first save. Nothing is written to --save. */
static void test_cli_checked_before_training(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char cmd[4096], line[1024], txt[300];
    int n;
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
    const char *m = "--layers 2 --dim 16 --heads 2 --ctx 8 --batch 2 --threads 1";
    const char *mp = "--layers 2 --dim 16 --heads 2 --ctx 8 --batch 2"; /* pipeline: no threads */
    snprintf(cmd, sizeof cmd, "%s prepare %s -o %s/cb >/dev/null 2>&1 && %s train --data %s/cb "
             "%s --steps 4 --warmup 1 --save %s/x.ckpt >/dev/null 2>&1 && %s train --data %s/cb "
             "%s --steps 6 --save %s/f.ckpt >/dev/null 2>&1 && cp %s/x.ckpt %s/bad.ckpt && "
             "printf '\\125' | dd of=%s/bad.ckpt bs=1 seek=300 conv=notrunc 2>/dev/null && "
             "head -c 3000 %s/x.ckpt > %s/trunc.ckpt", bin, txt, dir, bin, dir, m, dir, bin, dir,
             m, dir, dir, dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    struct {
        const char *opts, *mode, *want;
    } bad[] = {
        {"--steps 8 --warmup 1 --resume %s/x.ckpt", m,
         "x.ckpt was made with --steps 4, this run has --steps 8"},
        {"--steps 4 --warmup 2 --resume %s/x.ckpt", mp,
         "x.ckpt was made with --warmup 1, this run has --warmup 2"},
        {"--steps 8 --warmup 1 --pp 2 --resume %s/x.ckpt", mp, "this run has --steps 8"},
        {"--steps 3 --resume %s/f.ckpt", m, "f.ckpt was made with --steps 6"},
        {"--steps 4 --warmup 1 --resume %s/bad.ckpt", m, "checksum mismatch"},
        {"--steps 4 --warmup 1 --pp 2 --resume %s/bad.ckpt", mp, "checksum mismatch"},
        {"--steps 4 --warmup 1 --pp 2 --resume %s/trunc.ckpt", mp, "truncated"},
        {"--steps 4 --warmup 1 --pp 2 --layers 3 --resume %s/x.ckpt", mp,
         "made with --layers 2, this run has 3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char opts[600];
        snprintf(opts, sizeof opts, bad[i].opts, dir);
        snprintf(cmd, sizeof cmd, "%s train --data %s/cb %s %s --save %s/out%zu.ckpt", bin, dir,
                 bad[i].mode, opts, dir, i);
        int rc = sh(cmd, line, sizeof line, &n);
        if (rc != 1 || n != 1 || !strstr(line, bad[i].want))
            fail_msg("'%s': exit %d, %d stderr lines, first: %s", opts, rc, n, line);
        snprintf(txt, sizeof txt, "%s/out%zu.ckpt", dir, i);
        assert_int_not_equal(access(txt, F_OK), 0); /* nothing saved */
    }
    const char *dev[] = {"/dev/null", "/dev/full"};
    for (int k = 0; k < 2; k++) { /* refused before step 1: no step line */
        snprintf(cmd, sizeof cmd, "%s train --data %s/cb %s --steps 50 --eval-every 25 --save %s",
                 bin, dir, m, dev[k]);
        int rc = sh(cmd, line, sizeof line, &n);
        if (rc != 1 || n != 1 || !strstr(line, "--save") || !strstr(line, "not a regular file"))
            fail_msg("--save %s: exit %d, %d stderr lines, first: %s", dev[k], rc, n, line);
    }
}

static int sh_quiet(const char *cmd) { return sh(cmd, NULL, 0, NULL); }

static void read_all(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    fclose(f);
}

/* The value text after "key": up to the next ',' or '}' outside brackets. */
static void json_field(const char *json, const char *key, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(json, pat);
    if (!p) fail_msg("no %s in %s", key, json);
    p += strlen(pat);
    size_t k = 0;
    int depth = 0;
    for (; *p && k + 1 < n; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if (depth == 0 && (*p == ',' || *p == '}')) break;
        out[k++] = *p;
    }
    out[k] = 0;
}

/* P = 4 on threads, a single (1f1b) and a V (zb-v: 8 stages) placement:
 * the final and validation losses and the checkpoint bytes of one device;
 * and each device allocates what its plan says (train --json's
 * allocated_bytes, the allocation hook's count, through the steps, the
 * evaluations and the saves), at most half the whole model's 16 bytes per
 * parameter (a whole-model copy anywhere would be all of them). */
static void cli_train_p4(const char *bin, const char *rdir) {
    const char *model = "--layers 6 --dim 64 --heads 4 --ctx 8 --batch 8 --microbatches 8 "
                        "--steps 2 --eval-every 1 --seed 3";
    const char *kinds[3] = {"1f1b", "zb-v", "1f1b --placement memory"};
    char cmd[1024], path[256], msg[512];
    static char a[8192], b[8192];
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --threads 1 --save %s/a4.ckpt --json "
             "> %s/a4.json 2>/dev/null", bin, rdir, model, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(path, sizeof path, "%s/a4.json", rdir);
    read_all(path, a, sizeof a);
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --pp 4 --schedule %s --save "
                 "%s/b4.ckpt --json > %s/b4.json 2>/dev/null", bin, rdir, model, kinds[k], rdir,
                 rdir);
        assert_int_equal(sh_quiet(cmd), 0);
        snprintf(path, sizeof path, "%s/b4.json", rdir);
        read_all(path, b, sizeof b);
        const char *same[] = {"final_loss", "val_loss", "steps"};
        for (int i = 0; i < 3; i++) {
            char x[256], y[256];
            json_field(a, same[i], x, sizeof x);
            json_field(b, same[i], y, sizeof y);
            if (strcmp(x, y)) fail_msg("%s: %s (one device) != %s (%s, 4 devices)", same[i], x,
                                       y, kinds[k]);
        }
        snprintf(cmd, sizeof cmd, "cmp -s %s/a4.ckpt %s/b4.ckpt", rdir, rdir);
        if (sh_quiet(cmd)) fail_msg("%s, 4 devices: the checkpoint differs from one device's",
                                    kinds[k]);
        if (chk_train_alloc(b, 0.5, msg, sizeof msg)) fail_msg("%s, 4 devices: %s", kinds[k], msg);
        char rule[64];
        json_field(b, "placement_rule", rule, sizeof rule);
        assert_string_equal(rule, k == 2 ? "\"memory\"" : "\"time\"");
    }
}

static void test_cli_train_pp(void **state) {
    (void)state;
    const char *bin = chk_bin();
    char rdir[128], cmd[4096], a[4096], b[4096], c1[4096], fa[256], fb[256];
    snprintf(rdir, sizeof rdir, "/tmp/pm_test_cli_train_pp_%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "mkdir -p %s", rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/t.txt", rdir);
    FILE *f = fopen(cmd, "w");
    assert_non_null(f);
    fwrite(pp_text, 1, sizeof pp_text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s prepare %s/t.txt -o %s/d 2>/dev/null", bin, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    const char *model = "--layers 2 --dim 16 --heads 2 --ctx 8 --batch 8 --microbatches 8 "
                        "--steps 4 --eval-every 2 --seed 3";
    /* one device, the plain trainer, one BLAS thread */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --threads 1 --save %s/a.ckpt --json "
             "> %s/a.json 2>/dev/null", bin, rdir, model, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    /* two devices, V-Half, with trace and timeline */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --pp 2 --schedule v-half --save "
             "%s/b.ckpt --trace %s/b.trace --timeline %s/b.svg --json > %s/b.json 2>/dev/null",
             bin, rdir, model, rdir, rdir, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(fa, sizeof fa, "%s/a.json", rdir);
    snprintf(fb, sizeof fb, "%s/b.json", rdir);
    read_all(fa, a, sizeof a);
    read_all(fb, b, sizeof b);
    const char *same[] = {"final_loss", "val_loss", "steps"};
    for (int i = 0; i < 3; i++) {
        char x[256], y[256];
        json_field(a, same[i], x, sizeof x);
        json_field(b, same[i], y, sizeof y);
        if (strcmp(x, y)) fail_msg("%s: %s (one device) != %s (v-half, 2 devices)", same[i], x, y);
    }
    const char *keys[] = {"schedule", "pp", "measured_bubble", "predicted_bubble",
                          "measured_step_ms", "predicted_step_ms", "peak_activation_bytes",
                          "predicted_peak_activation_bytes"};
    char pk[256], pp[256], v[256];
    for (int i = 0; i < 8; i++) json_field(b, keys[i], v, sizeof v);
    json_field(b, "schedule", v, sizeof v);
    assert_string_equal(v, "\"v-half\"");
    json_field(b, "peak_activation_bytes", pk, sizeof pk);
    json_field(b, "predicted_peak_activation_bytes", pp, sizeof pp);
    assert_string_equal(pk, pp);
    assert_non_null(strchr(pk, ',')); /* one value per device */
    /* each device's measured busy time, and the busiest over the mean */
    json_field(b, "device_busy_ms", v, sizeof v);
    double b0 = atof(v + 1), b1 = atof(strchr(v, ',') + 1);
    assert_true(b0 > 0 && b1 > 0);
    json_field(b, "busy_max_over_mean", v, sizeof v);
    assert_true(fabs(atof(v) - 2 * (b0 > b1 ? b0 : b1) / (b0 + b1)) < 2e-3);
    json_field(b, "placement", v, sizeof v);
    assert_string_equal(v, "\"flops\"");
    /* the checkpoints are byte for byte the same */
    snprintf(cmd, sizeof cmd, "cmp -s %s/a.ckpt %s/b.ckpt", rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    /* each device allocated what its plan says (the allocation hook's count) */
    if (chk_train_alloc(b, 1, c1, sizeof c1)) fail_msg("v-half, 2 devices: %s", c1);
    cli_train_p4(bin, rdir);
    /* the measured trace and timeline of the last step: one event and one
     * box per pass of v-half p=2 m=8, in each device's order, no overlap.
     * The order is the one train planned: v-half from the layers' FLOPs
     * (the default placement's costs, the same on every machine), which the
     * library's planner gives for the same model (a byte vocabulary) */
    pm_train_cfg tc = {.model = {256, 8, 16, 2, 2}, .batch = 8, .micro = 8, .seed = 3};
    pm_optim_defaults(&tc.opt, 4);
    pm_plan_req rq = {.p = 2, .kind = "v-half"};
    pm_plan pl;
    pm_err err = {{0}};
    if (pm_plan_make(&pl, &tc, &rq, &err)) fail_msg("%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s/b.svg", rdir);
    if (chk_svg_file(cmd, &pl.sched, NULL, c1, sizeof c1)) fail_msg("%s", c1);
    snprintf(cmd, sizeof cmd, "%s/b.trace", rdir);
    if (chk_trace_file(cmd, &pl.sched, NULL, c1, sizeof c1)) fail_msg("%s", c1);
    pm_plan_free(&pl);
    /* resuming a run that already finished: nothing to run, a clean exit
     * (it once crashed printing the last step's figures, which no step made) */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --pp 2 --schedule v-half --resume "
             "%s/b.ckpt --save %s/b2.ckpt --timeline %s/b2.svg --json > /dev/null 2>&1", bin, rdir,
             model, rdir, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s/b.ckpt %s/b2.ckpt", rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    /* sampling from the pipeline's checkpoint through 3 device threads, and
     * with a device budget too small for the model on one device, prints
     * the text one device prints (which test_train checks against its own
     * drawing from the parameters) */
    for (int k = 0; k < 3; k++) {
        const char *how[] = {"", "--pp 3", "--device-mem 80K"}; /* one device: 104 KiB */
        snprintf(cmd, sizeof cmd, "%s sample --ckpt %s/b.ckpt --prompt 'the ' -n 30 --seed 4 %s "
                 "> %s/s%d.txt 2> %s/s%d.err", bin, rdir, how[k], rdir, k, rdir, k);
        assert_int_equal(sh_quiet(cmd), 0);
    }
    for (int k = 1; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "cmp -s %s/s0.txt %s/s%d.txt && grep -q 'sampling through' "
                 "%s/s%d.err", rdir, rdir, k, rdir, k);
        if (sh_quiet(cmd)) fail_msg("sample %d: not the one device's text, or not through the "
                                    "pipeline", k);
    }
    /* --recompute: the same checkpoint again, the recomputed schedule named,
     * and device 0 (stage 0 keeps only its tokens) below plain v-half */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d %s --pp 2 --schedule v-half --recompute "
             "--save %s/c.ckpt --json > %s/c.json 2>/dev/null", bin, rdir, model, rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(cmd, sizeof cmd, "cmp -s %s/a.ckpt %s/c.ckpt", rdir, rdir);
    assert_int_equal(sh_quiet(cmd), 0);
    snprintf(fb, sizeof fb, "%s/c.json", rdir);
    read_all(fb, b, sizeof b);
    json_field(b, "schedule", v, sizeof v);
    assert_string_equal(v, "\"v-half-r\"");
    char pk2[256];
    json_field(b, "peak_activation_bytes", pk2, sizeof pk2);
    json_field(b, "predicted_peak_activation_bytes", pp, sizeof pp);
    assert_string_equal(pk2, pp);
    assert_true(atof(pk2 + 1) < atof(pk + 1)); /* "[d0, d1]": device 0 */
    /* too few layers for 2p stages: a clear error, non-zero exit */
    snprintf(cmd, sizeof cmd, "%s train --data %s/d --layers 1 --dim 16 --heads 2 --ctx 8 "
             "--batch 8 --microbatches 8 --steps 1 --pp 4 --schedule v-half 2> %s/err.txt",
             bin, rdir, rdir);
    assert_int_not_equal(sh_quiet(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/err.txt", rdir);
    read_all(cmd, c1, sizeof c1);
    assert_non_null(strstr(c1, "--layers"));
    snprintf(cmd, sizeof cmd, "rm -rf %s", rdir);
    assert_int_equal(sh_quiet(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_end_to_end),
        cmocka_unit_test(test_cli_checked_before_training),
        cmocka_unit_test(test_cli_train_pp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
