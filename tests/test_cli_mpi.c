/* test_cli_mpi.c: `pipemem train` under mpirun, through the built binary
 * (tests/cli.h; the transport itself, through the library: test_mpi.c):
 *   - checkpoints under --transport mpi byte for byte equal to threads and
 *     to one device, and the same final and validation losses, for every
 *     schedule kind at P = 2 and for single and V placements at P = 4;
 *   - data parallelism: --dp 2 bitwise equal across schedules and between
 *     transports, close to --dp 1 (only the summation order differs);
 *   - a failing, NaN or killed rank stops every rank, non-zero, none
 *     waiting out its own limit;
 *   - checkpoints move between transports (save under one, resume under
 *     the other) bitwise, and between layouts: saved by 4 ranks, resumed
 *     on 2 device threads or one device, saved by one device and resumed
 *     by 4 ranks, all ending as the uninterrupted run; each rank allocates
 *     what its plan says;
 *   - a checkpoint write failing on one rank (a file size limit on it
 *     alone): one line, non-zero exit, the previous checkpoint untouched,
 *     no temporary left;
 *   - ZeRO-1 bitwise --zero 0, both ways through a checkpoint (skipped,
 *     saying so, while the runtime refuses --zero 1);
 *   - bad input: rank count, --dp, ranks with other data: one line each;
 *   - a rank stopped mid-training (kill -STOP): the job ends, one line
 *     naming it; ranks that cannot share one run (one device each, other
 *     commands) and --transport mpi without mpirun: one line each;
 *   - mpirun stopped, or a rank lost while rank 0 renames the next
 *     checkpoint: one line naming the checkpoint and the step it holds;
 *   - failure paths between collectives, each ending in one line.
 * mpirun runs as root here only with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), which
 * the suite sets; --oversubscribe lets 4 ranks share 2 cores. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "cli.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_train.h"

static char dir[256];
static const char *bin;

/* OpenMPI's components keep allocations past MPI_Finalize and are unloaded
 * by then, so LeakSanitizer cannot tell them from ours by module: leak
 * checks are off under mpirun (the threads runs keep them). */
#define MPIENV "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --oversubscribe"
#define MPIRUN MPIENV " --quiet -np"
#define MODEL "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 8 --eval-every 2 --eval-batches 1"

static double json_num(const char *out, const char *key) {
    const char *p = strstr(out, key);
    if (!p) fail_msg("no %s in:\n%s", key, out);
    return strtod(p + strlen(key) + 3, NULL); /* "key": value */
}

/* A run's final and validation losses (its --json summary) equal those of
 * another run (as printed, to 6 decimals: the checkpoints compare the bits). */
static void same_losses(const char *out, const char *ref, const char *what) {
    const char *k[2] = {"\"final_loss\"", "\"val_loss\""};
    for (int i = 0; i < 2; i++)
        if (json_num(out, k[i]) != json_num(ref, k[i]))
            fail_msg("%s: %s %.6f, the reference %.6f", what, k[i], json_num(out, k[i]),
                     json_num(ref, k[i]));
}

/* The single-device run of MODEL with `model` (more model options), 4
 * microbatches, 3 steps, one BLAS thread: its checkpoint and its output,
 * once per model (a few kept). */
typedef struct {
    char model[64], ckpt[300], out[8192];
} one_run;

static const one_run *one_device(const char *model) {
    static one_run runs[4];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strcmp(runs[i].model, model)) return &runs[i];
    assert_true(n < 4);
    one_run *r = &runs[n];
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->ckpt, sizeof r->ckpt, "%s/one_%d.ckpt", dir, n);
    int rc = chk_output(r->out, sizeof r->out, "%s train --data %s/d " MODEL " %s --microbatches "
                 "4 --steps 3 --threads 1 --save %s --json", bin, dir, model, r->ckpt);
    if (rc) fail_msg("one device: exit %d: %s", rc, r->out);
    n++;
    return r;
}

/* Trains under threads and under MPI (P = p ranks x dp replicas; model:
 * more model options, opts: more pipeline options) and compares the
 * checkpoints byte for byte, and the losses; with one replica, both also
 * with the single-device run of the same model (with several, only the
 * order of the gradient sums differs from one device: docs/mpi.md). */
static void same_as_threads(const char *kind, int p, int dp, const char *model,
                            const char *opts) {
    static char tout[16384];
    char a[300], b[300], what[200];
    snprintf(what, sizeof what, "%s p=%d dp=%d %s %s", kind, p, dp, model, opts);
    snprintf(a, sizeof a, "%s/t_%s_%d_%d%s.ckpt", dir, kind, p, dp, opts[0] ? "_o" : "");
    snprintf(b, sizeof b, "%s/m_%s_%d_%d%s.ckpt", dir, kind, p, dp, opts[0] ? "_o" : "");
    int rc = chk_output(tout, sizeof tout, "%s train --data %s/d " MODEL " %s --microbatches 4 "
                 "--steps 3 --pp %d --dp %d --schedule %s %s --save %s --json", bin, dir, model,
                 p, dp, kind, opts, a);
    if (rc) fail_msg("%s, threads: exit %d: %s", what, rc, tout);
    /* the summary from standard output alone: mpirun forwards the ranks'
     * standard error beside it, and a line of it may land inside */
    chk_cmd c = {0};
    rc = chk_sh(&c, MPIRUN " %d %s train --data %s/d " MODEL " %s --microbatches 4 --steps 3 "
                "--pp %d --dp %d --schedule %s %s --save %s --json", p * dp, bin, dir, model, p,
                dp, kind, opts, b);
    if (rc) fail_msg("%s, MPI: exit %d: %s%s", what, rc, c.out, c.err);
    assert_int_equal(chk_count(c.err, "saved "), 1); /* rank 0 alone writes and prints */
    if (!chk_same_file(a, b)) fail_msg("%s: MPI checkpoint differs from threads", what);
    same_losses(c.out, tout, what);
    chk_cmd_free(&c);
    if (dp > 1) return;
    const one_run *one = one_device(model);
    if (!chk_same_file(a, one->ckpt)) fail_msg("%s: checkpoint differs from one device's", what);
    same_losses(tout, one->out, what);
}

/* Every kind at P = 2 (auto-v under a limit), recomputation, and P = 4
 * with a V (v-min, zb-v) and a single placement; all bitwise one device. */
static void test_mpi_equals_threads(void **state) {
    (void)state;
    int n;
    const pm_sched_kind *kinds = pm_sched_kinds(&n);
    for (int k = 0; k < n; k++)
        same_as_threads(kinds[k].name, 2, 1, "",
                        strcmp(kinds[k].name, "auto-v") ? "" : "--mem-limit 2");
    same_as_threads("1f1b-r", 2, 1, "", "");
    same_as_threads("v-min", 4, 1, "--layers 6", "");
    same_as_threads("zb-v", 4, 1, "--layers 6", "");
    same_as_threads("1f1b", 4, 1, "--layers 6", "");
}

static void test_data_parallel(void **state) {
    (void)state;
    static char out[16384];
    /* (the gradient sums and gathers in chunks: test_mpi.c's test_pipe_chunks) */
    same_as_threads("zb-h1", 2, 2, "", "");
    same_as_threads("1f1b", 1, 2, "", "");
    /* bitwise across schedules for the same D (threads checkpoints above) */
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/t_zb-h1_2_2.ckpt", dir);
    int rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --microbatches 4 --steps 3 "
                 "--pp 2 --dp 2 --schedule v-half --save %s/t_vh.ckpt", bin, dir, dir);
    assert_int_equal(rc, 0);
    snprintf(b, sizeof b, "%s/t_vh.ckpt", dir);
    assert_true(chk_same_file(a, b));
    /* against one replica: the same global batch, only the summation order
     * differs, so the losses agree closely (docs/mpi.md: how close) */
    rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --microbatches 4 --steps 6 "
             "--pp 2 --dp 2 --json", bin, dir);
    assert_int_equal(rc, 0);
    double l2 = json_num(out, "\"final_loss\"");
    rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --microbatches 4 --steps 6 "
             "--json", bin, dir);
    assert_int_equal(rc, 0);
    double l1 = json_num(out, "\"final_loss\"");
    assert_true(fabs(l1 - l2) <= 1e-4 * fabs(l1));
}

/* Whether this runtime runs ZeRO-1 (`--zero 1`); the one line it refuses
 * it with otherwise. */
static int zero_runs(void) {
    static char out[4096];
    int rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --microbatches 4 "
                 "--steps 1 --pp 2 --dp 2 --zero 1", bin, dir);
    if (rc && strstr(out, "not run by this runtime yet")) return 0;
    if (rc) fail_msg("--zero 1: %s", out);
    return 1;
}

/* ZeRO-1 (each replica keeps and updates a slice of the AdamW moments and
 * writes that slice of the checkpoint): bitwise --zero 0 (the checkpoint
 * bytes and losses) on both transports, single (zb-h1) and V (v-half)
 * placements; a checkpoint saved under one resumes under the other, across
 * transports, bitwise. Skipped (said so) while the runtime refuses it. */
static void test_zero1(void **state) {
    (void)state;
    static char zero0[4096], out[16384];
    if (!zero_runs()) {
        print_message("test_zero1 skipped: --zero 1 is not run by this runtime yet\n");
        skip();
    }
    const char *m = MODEL " --microbatches 4 --steps 3 --pp 2 --dp 2";
    char ref[300], part[300], a[300];
    snprintf(ref, sizeof ref, "%s/z0.ckpt", dir);
    snprintf(part, sizeof part, "%s/zpart.ckpt", dir);
    if (chk_output(zero0, sizeof zero0, "%s train --data %s/d %s --schedule zb-h1 --save %s --json",
            bin, dir, m, ref))
        fail_msg("%s", zero0);
    const char *kinds[2] = {"zb-h1", "v-half"};
    for (int k = 0; k < 2; k++) {
        same_as_threads(kinds[k], 2, 2, "", "--zero 1"); /* MPI and threads */
        snprintf(a, sizeof a, "%s/t_%s_2_2_o.ckpt", dir, kinds[k]);
        if (!chk_same_file(a, ref)) fail_msg("%s --zero 1: checkpoint differs from --zero 0", kinds[k]);
    }
    /* saved under one, resumed under the other (and the other transport) */
    for (int way = 0; way < 2; way++) {
        const char *first = way ? "" : MPIRUN " 4 ", *second = way ? MPIRUN " 4 " : "";
        remove(part);
        if (chk_output(out, sizeof out, "%s%s train --data %s/d %s --zero %d --stop-after 2 "
                "--save %s", first, bin, dir, m, 1 - way, part))
            fail_msg("%s", out);
        chk_cmd c = {0}; /* the summary from standard output alone, as above */
        if (chk_sh(&c, "%s%s train --data %s/d %s --zero %d --resume %s --save %s --json", second,
                   bin, dir, m, way, part, part))
            fail_msg("%s%s", c.out, c.err);
        if (!chk_same_file(part, ref)) fail_msg("saved with --zero %d, resumed with --zero %d: differs",
                                            1 - way, way);
        same_losses(c.out, zero0, way ? "--zero 0 -> 1" : "--zero 1 -> 0");
        chk_cmd_free(&c);
    }
}

/* A fault on one rank ends every rank with one line naming it, none
 * waiting out its own limit on a silent peer (mpirun's time limit, below
 * the runtime's 300 s wait, would end it with 124; a rank's own timeout
 * would say it "waited");
 * model: MODEL, or one whose 32 KiB messages go by rendezvous (a peer reads
 * the sender's buffer: teardown after an abort once crashed on it). */
static void fault(const char *spec, const char *expect, const char *model) {
    static char out[16384];
    /* not --quiet: a killed rank is reported by mpirun itself */
    int rc = chk_output(out, sizeof out, "PM_FAULT=%s " MPIENV " -np 2 "
                 "%s train --data %s/d %s --microbatches 4 --steps 3 --pp 2 --schedule "
                 "1f1b", spec, bin, dir, model ? model : MODEL);
    if (!strstr(out, expect)) fail_msg("PM_FAULT=%s: no '%s' in:\n%s", spec, expect, out);
    assert_int_not_equal(rc, 0);
    assert_true(rc != 124); /* not ended by the timeout: no rank hung */
    assert_null(strstr(out, "waited"));
    assert_true(chk_count(out, "pipemem: ") <= 1);
    if (strncmp(spec, "kill", 4) && (strstr(out, "Segmentation") || strstr(out, "signal")))
        fail_msg("PM_FAULT=%s: a rank crashed:\n%s", spec, out);
}

static void test_faults(void **state) {
    (void)state;
    const char *big = "--layers 2 --dim 64 --heads 4 --ctx 64 --batch 8 --eval-every 0";
    fault("fail,1,1,2", "pipemem: rank 1: device 1, stage 1, microbatch 1, pass F (#2 on the "
                        "device): injected failure", NULL);
    fault("fail,1,1,2", "pipemem: rank 1: device 1, stage 1, microbatch 1, pass F", big);
    fault("fail,0,0,1", "pipemem: rank 0: device 0, stage 0, microbatch 1, pass F", big);
    fault("fail,0,0,3", "pipemem: rank 0: device 0, stage 0, microbatch", NULL);
    fault("nan,0,1,1", "the loss is nan", NULL);
    fault("kill,1,1,2", "process rank 1 with PID", NULL);
}

/* Saved after 2 of 4 steps under one transport, finished under the other:
 * the same checkpoint as 4 steps in one go. */
static void test_checkpoints_move(void **state) {
    (void)state;
    static char out[16384];
    const char *m = "--microbatches 4 --steps 4 --pp 2 --schedule zb-h1";
    char whole[300], part[300];
    snprintf(whole, sizeof whole, "%s/whole.ckpt", dir);
    snprintf(part, sizeof part, "%s/part.ckpt", dir);
    assert_int_equal(chk_output(out, sizeof out, "%s train --data %s/d " MODEL " %s --save %s", bin,
                         dir, m, whole), 0);
    for (int way = 0; way < 2; way++) {
        const char *first = way ? "" : MPIRUN " 2 ", *second = way ? MPIRUN " 2 " : "";
        remove(part);
        assert_int_equal(chk_output(out, sizeof out, "%s%s train --data %s/d " MODEL " %s "
                             "--stop-after 2 --save %s", first, bin, dir, m, part), 0);
        assert_int_equal(chk_output(out, sizeof out, "%s%s train --data %s/d " MODEL " %s "
                             "--resume %s --save %s", second, bin, dir, m, part, part), 0);
        if (!chk_same_file(whole, part)) fail_msg("resumed %s differs", way ? "threads->mpi" : "mpi->threads");
    }
}

/* Resharding: saved after 2 of 4 steps by 4 MPI ranks under zb-v (a V
 * placement, 8 stages), resumed on 2 device threads (1f1b) and on one
 * device; saved by one device, resumed by 4 ranks (1f1b): every one ends
 * with the checkpoint bytes and the losses of the uninterrupted
 * single-device run. The 4-rank runs allocate on each rank what its plan
 * says, less than the whole model's state. */
static void test_resharding(void **state) {
    (void)state;
    static char whole[4096], out[16384];
    const char *m = MODEL " --layers 6 --microbatches 4 --steps 4";
    char ref[300], part[300], res[300], msg[512];
    snprintf(ref, sizeof ref, "%s/rs_whole.ckpt", dir);
    snprintf(part, sizeof part, "%s/rs_part.ckpt", dir);
    snprintf(res, sizeof res, "%s/rs_res.ckpt", dir);
    if (chk_output(whole, sizeof whole, "%s train --data %s/d %s --threads 1 --save %s --json", bin,
            dir, m, ref))
        fail_msg("%s", whole);
    chk_cmd z = {0};
    if (chk_sh(&z, MPIRUN " 4 %s train --data %s/d %s --pp 4 --schedule zb-v --stop-after 2 "
            "--save %s --json", bin, dir, m, part))
        fail_msg("%s%s", z.out, z.err);
    assert_true(strstr(z.out, "(step 2)") || strstr(z.err, "(step 2)"));
    if (chk_train_alloc(z.out, 1, msg, sizeof msg)) fail_msg("zb-v, 4 ranks: %s", msg);
    chk_cmd_free(&z);
    const char *on[2] = {"--pp 2 --schedule 1f1b", "--threads 1"};
    for (int k = 0; k < 2; k++) {
        remove(res);
        if (chk_output(out, sizeof out, "%s train --data %s/d %s %s --resume %s --save %s --json",
                bin, dir, m, on[k], part, res))
            fail_msg("resumed with %s: %s", on[k], out);
        if (!chk_same_file(ref, res)) fail_msg("saved by 4 ranks, resumed with %s: differs", on[k]);
        same_losses(out, whole, on[k]);
    }
    remove(part);
    if (chk_output(out, sizeof out, "%s train --data %s/d %s --threads 1 --stop-after 2 --save %s",
            bin, dir, m, part))
        fail_msg("%s", out);
    remove(res);
    /* the summary read from standard output alone: mpirun forwards the
     * ranks' standard error beside it, and a line of it may land inside */
    chk_cmd c = {0};
    if (chk_sh(&c, MPIRUN " 4 %s train --data %s/d %s --pp 4 --schedule 1f1b --resume %s "
            "--save %s --json", bin, dir, m, part, res))
        fail_msg("%s%s", c.out, c.err);
    if (!chk_same_file(ref, res)) fail_msg("saved by one device, resumed by 4 ranks: differs");
    same_losses(c.out, whole, "saved by one device, resumed by 4 ranks");
    if (chk_train_alloc(c.out, 1, msg, sizeof msg)) fail_msg("1f1b, 4 ranks: %s", msg);
    chk_cmd_free(&c);
}

/* A checkpoint write that fails on one rank: that rank is started (MPMD)
 * through sh with a file size limit of one 512-byte block and SIGXFSZ
 * ignored, so its writes fail with EFBIG: rank 1's pwrite of its stages'
 * ranges, or rank 0's creation of the temporary at the checkpoint's full
 * size. No product hook: the kernel fails the write. Every rank stops
 * with one line and a non-zero exit; the previous checkpoint is byte for
 * byte as it was, no temporary is left, and a run resumed from it ends as
 * the uninterrupted one. */
static void test_failed_write(void **state) {
    (void)state;
    static char whole[4096], out[16384];
    const char *m = MODEL " --microbatches 4 --steps 4 --pp 2 --schedule 1f1b";
    char ref[300], ck[300], before[300], cmd[700], line[1200];
    snprintf(ref, sizeof ref, "%s/fw_whole.ckpt", dir);
    snprintf(ck, sizeof ck, "%s/fw.ckpt", dir);
    snprintf(before, sizeof before, "%s/fw.before", dir);
    if (chk_output(whole, sizeof whole, "%s train --data %s/d %s --save %s --json", bin, dir, m,
            ref))
        fail_msg("%s", whole);
    for (int bad = 1; bad >= 0; bad--) {
        remove(ck);
        if (chk_output(out, sizeof out, MPIRUN " 2 %s train --data %s/d %s --stop-after 2 --save "
                "%s", bin, dir, m, ck))
            fail_msg("%s", out);
        snprintf(cmd, sizeof cmd, "cp %s %s", ck, before);
        assert_int_equal(system(cmd), 0);
        /* the same command for both ranks; one runs it under the limit */
        snprintf(line, sizeof line, "%s train --data %s/d %s --resume %s --save %s", bin, dir, m,
                 ck, ck);
        int rc = chk_output(out, sizeof out, MPIRUN " 1 %s%s%s : -np 1 %s%s%s",
                     bad ? "" : "sh -c \"ulimit -f 1; trap '' XFSZ; exec ", line, bad ? "" : "\"",
                     bad ? "sh -c \"ulimit -f 1; trap '' XFSZ; exec " : "", line, bad ? "\"" : "");
        if (rc == 0 || rc == 124) fail_msg("rank %d could not write: exit %d:\n%s", bad, rc, out);
        /* rank 1's line names it; rank 0's, the temporary it could not make */
        const char *says = bad ? "pipemem: rank 1: device 1, stage 1: " : "pipemem: ";
        if (chk_count(out, "pipemem: ") != 1 || !strstr(out, says) ||
            !strstr(out, bad ? "write failed at offset" : "cannot make a") ||
            !strstr(out, "File too large"))
            fail_msg("rank %d could not write: not one line saying so:\n%s", bad, out);
        if (!chk_same_file(ck, before)) fail_msg("rank %d could not write: the checkpoint changed", bad);
        assert_int_equal(chk_tmp_count(ck), 0);
        if (chk_output(out, sizeof out, "%s train --data %s/d %s --resume %s --save %s --json", bin,
                dir, m, ck, ck))
            fail_msg("%s", out);
        if (!chk_same_file(ref, ck)) fail_msg("rank %d could not write: resumed, differs", bad);
        same_losses(out, whole, "resumed after a failed write");
    }
}

static void test_bad_input(void **state) {
    (void)state;
    static char out[16384];
    int rc = chk_output(out, sizeof out, MPIRUN " 3 %s train --data %s/d " MODEL " --microbatches 4 "
                 "--steps 2 --pp 2", bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_equal(chk_count(out, "mpirun started 3 ranks, but 1 replicas x 2 devices need 2: "
                                "start it with mpirun -np 2"), 1);
    rc = chk_output(out, sizeof out, MPIRUN " 2 %s train --data %s/d " MODEL " --microbatches 3 "
             "--steps 2 --pp 1 --dp 2", bin, dir);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "--dp 2 must divide --microbatches 3"));
    /* an option every rank shares is wrong: said once (by rank 0), not once per rank */
    rc = chk_output(out, sizeof out, MPIRUN " 4 %s train --data %s/d " MODEL " --microbatches 3 "
             "--steps 2 --pp 2 --dp 2", bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_equal(chk_count(out, "pipemem: "), 1);
    rc = chk_output(out, sizeof out, MPIRUN " 4 %s train --data %s/none " MODEL " --microbatches 4 "
             "--steps 2 --pp 2 --dp 2", bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_equal(chk_count(out, "pipemem: rank 0: "), 1);
    assert_int_equal(chk_count(out, "pipemem: "), 1);
    /* rank 1 reads other data: stopped by the handshake, naming it */
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train "
             "--data %s/d " MODEL " --microbatches 2 --steps 2 --pp 2 : -np 1 %s train --data "
             "%s/e " MODEL " --microbatches 2 --steps 2 --pp 2", bin, dir, bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_equal(chk_count(out, "rank 1 reads other training data than rank 0: every host "
                                    "needs the same data directory"), 1);
    /* a rank whose data is missing says so itself, and every rank stops */
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train "
             "--data %s/d " MODEL " --steps 2 --pp 2 : -np 1 %s train --data %s/none " MODEL
             " --steps 2 --pp 2", bin, dir, bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_not_equal(rc, 124);
    assert_non_null(strstr(out, "pipemem: rank 1: "));
    /* a rank alone with a bad option says so itself, and every rank stops */
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train --data %s/d " MODEL " --steps 2 --pp 2 "
             ": -np 1 %s train --data %s/d " MODEL " --steps 2 --pp 2 --dim x", bin, dir, bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_not_equal(rc, 124);
    assert_int_equal(chk_count(out, "pipemem: "), 1);
    assert_int_equal(chk_count(out, "pipemem: rank 1: --dim: 'x' is not an integer"), 1);
    /* ranks started with other options that decide what they do together
     * (issue 19, 2.8): one resuming, one not; other evaluation steps; one
     * on threads. Each stops at once with one line, no 300 s wait */
    char ck[300];
    snprintf(ck, sizeof ck, "%s/bad_input.ckpt", dir);
    rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --steps 3 --stop-after 2 "
             "--pp 2 --save %s", bin, dir, ck); /* resumed with the same --steps below */
    assert_int_equal(rc, 0);
    const char *other[] = {"--resume", "--eval-every 1 --resume"};
    for (int k = 0; k < 2; k++) {
        rc = chk_output(out, sizeof out, MPIRUN " 1 %s train --data %s/d " MODEL " --steps 3 "
                 "--pp 2 %s %s : -np 1 %s train --data %s/d " MODEL " --steps 3 --pp 2 %s%s", bin,
                 dir, other[k], ck, bin, dir, k ? "--resume " : "", k ? ck : "");
        assert_int_not_equal(rc, 0);
        assert_int_not_equal(rc, 124);
        if (chk_count(out, "rank 1 was started with other options") != 1)
            fail_msg("case %d: exit %d: %s", k, rc, out);
    }
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train --data %s/d " MODEL " --steps 2 --pp 2 "
             "--transport threads : -np 1 %s train --data %s/d " MODEL " --steps 2 --pp 2", bin,
             dir, bin, dir);
    assert_int_not_equal(rc, 0);
    assert_int_not_equal(rc, 124);
    assert_non_null(strstr(out, "--transport threads under mpirun with 2 ranks"));
}

/* Whether file holds needle (0 if it cannot be read). */
static int file_has(const char *path, const char *needle) {
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* The log at path into out (cap bytes, NUL-terminated); the test fails if
 * it cannot be opened. */
static void read_log(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    out[fread(out, 1, cap - 1, f)] = 0;
    fclose(f);
}

/* Polls path (every 0.2 s, at most `tries` times) until it holds needle. */
static int wait_for(const char *path, const char *needle, int tries) {
    for (int k = 0; k < tries; k++) {
        if (file_has(path, needle)) return 1;
        nanosleep(&(struct timespec){0, 200000000}, NULL);
    }
    return file_has(path, needle);
}

/* A rank stopped in the middle of training (kill -STOP, issue 31, 3): the
 * job ends (mpirun's own time limit, 120 s, would say 124) with one line
 * naming the silent rank, and no process is left behind; --comm-timeout 3
 * keeps the wait short. Rank 1 is stopped once rank 0 has printed its
 * start line (the ranks are then past their setup, in the steps). */
static void test_stopped_rank(void **state) {
    (void)state;
    static char out[16384];
    char log[300], cmd[1500], pids[300];
    snprintf(log, sizeof log, "%s/stopped.out", dir);
    snprintf(pids, sizeof pids, "%s/stopped.pids", dir);
    remove(log);
    snprintf(cmd, sizeof cmd, "(" MPIRUN " 2 %s train --data %s/d " MODEL " --microbatches 4 "
             "--steps 1000000 --eval-every 0 --pp 2 --comm-timeout 3 > %s 2>&1; echo \"exit "
             "$?\" >> %s) &", bin, dir, log, log);
    assert_int_equal(chk_sh(NULL, "%s", cmd), 0);
    if (!wait_for(log, "train: ", 300)) fail_msg("the run did not start");
    /* rank 1: the pipemem whose environment says so, started on our data */
    snprintf(cmd, sizeof cmd, "for p in $(pgrep -f '%s train --data %s/d'); do tr '\\0' "
             "'\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done > %s; "
             "true",
             bin, dir, pids);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "test -s %s && kill -STOP $(cat %s)", pids, pids);
    assert_int_equal(system(cmd), 0);
    int ended = wait_for(log, "exit ", 1000);
    snprintf(cmd, sizeof cmd, "kill -KILL $(cat %s) 2>/dev/null; true", pids); /* if left */
    assert_int_equal(system(cmd), 0);
    if (!ended) fail_msg("the job did not end after its rank 1 stopped");
    read_log(log, out, sizeof out);
    if (file_has(log, "exit 0") || file_has(log, "exit 124") || chk_count(out, "pipemem: ") != 1 ||
        !(strstr(out, "from rank 1 that never came") || strstr(out, "rank 1 to receive") ||
          strstr(out, "rank 1 did not answer") || strstr(out, "for ranks that never came")))
        fail_msg("rank 1 stopped: %s", out);
}

/* Rank 0 stalls in a pass (PM_FAULT=stall: until rank 1's error reaches
 * it, then 2 s more) while rank 1 waits for it: rank 1 times out
 * (--comm-timeout 2), and the one line is rank 0's, taken from rank 1's
 * abort line, naming the rank waited for. When rank 1 aborted the job at
 * once, mpirun stopped rank 0 in those 2 s and the only line said that
 * mpirun stopped it; rank 1 now waits 7 s for rank 0 to end the job. */
static void test_stalled_root(void **state) {
    (void)state;
    static char out[16384];
    int rc = chk_output(out, sizeof out, "PM_FAULT=stall,0,1,1 " MPIENV " -np 2 %s train "
                        "--data %s/d " MODEL " --microbatches 4 --steps 3 --pp 2 --schedule "
                        "1f1b --comm-timeout 2", bin, dir);
    if (rc == 0 || rc == 124 || chk_count(out, "pipemem: ") != 1 ||
        !strstr(out, "rank 1 waited 2 s") || !strstr(out, "from rank 0") ||
        strstr(out, "mpirun stopped this rank"))
        fail_msg("exit %d, not one line saying rank 1 waited for rank 0:\n%s", rc, out);
}

/* mpirun stopped (SIGTERM, as at a lost rank or host, or Ctrl-C) with 4
 * ranks on this host: it sends each SIGCONT, SIGTERM and a second later
 * SIGKILL, and the host says so in exactly one line from pipemem, naming
 * the checkpoint saved (every 20 steps; when only the host's first rank
 * handled SIGTERM, another ending at once had the daemon SIGKILL the rest,
 * the speaker too: 4 of 20 runs) and the step the file holds. */
static void test_interrupted(void **state) {
    (void)state;
    static char out[65536];
    char log[300], ck[300], cmd[4096], path[300];
    snprintf(log, sizeof log, "%s/interrupted.out", dir);
    snprintf(ck, sizeof ck, "%s/interrupted.ckpt", dir);
    remove(log), remove(ck);
    snprintf(cmd, sizeof cmd, "(" MPIRUN " 4 %s train --data %s/d " MODEL " --eval-every 20 "
             "--microbatches 4 --steps 1000000 --pp 4 --save %s > %s 2>&1 & echo $! > %s.pid; "
             "wait $!; echo \"exit $?\" >> %s) &", bin, dir, ck, log, log, log);
    assert_int_equal(chk_sh(NULL, "%s", cmd), 0);
    if (!wait_for(ck, "", 1500)) fail_msg("no checkpoint saved");
    /* mpirun, the child of timeout */
    assert_int_equal(chk_sh(NULL, "pkill -TERM -P $(cat %s.pid)", log), 0);
    if (!wait_for(log, "exit ", 300)) fail_msg("mpirun did not end");
    read_log(log, out, sizeof out);
    const char *at = strstr(out, "mpirun stopped this rank");
    long long step = -1;
    at = at ? strstr(at, "the last complete checkpoint is ") : NULL;
    if (chk_count(out, "pipemem: ") != 1 || !at ||
        sscanf(at, "the last complete checkpoint is %299s (step %lld)", path, &step) != 2 ||
        strcmp(path, ck) || step < 20 || step % 20)
        fail_msg("not one line from pipemem naming %s:\n%s", ck, out);
    if (step != pm_ckpt_peek_step(ck)) /* renamed over after the line */
        fail_msg("the line says step %lld, %s holds step %lld", step, ck,
                 (long long)pm_ckpt_peek_step(ck));
}

/* The step in the header of a temporary of path (path.tmp.*, in dir), -1
 * while none has one: a commit writes the header last, then renames. */
static int64_t tmp_step(const char *path) {
    const char *base = strrchr(path, '/') + 1;
    char tmp[600];
    int64_t step = -1;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, base, strlen(base)) || strncmp(e->d_name + strlen(base), ".tmp.", 5))
            continue;
        snprintf(tmp, sizeof tmp, "%s/%s", dir, e->d_name);
        int64_t k = pm_ckpt_peek_step(tmp);
        if (k > step) step = k;
    }
    closedir(d);
    return step;
}

/* A rank lost while rank 0 renames the next checkpoint over the last (the
 * lost rank had sent its part; once in CI the line said step N and the
 * file then held N + 20): the line names the step the file holds, which
 * is returned. PM_TEST_COMMIT_HOLD=WHERE,2 holds rank 0's second rename
 * (step 40), before its guard looks or inside the guard's window, until
 * mpirun's stop reaches it, and 0.1 s more; rank 1 is killed once that
 * checkpoint's temporary is whole. Rank 0, alone on the host then, speaks,
 * its handler on a thread of its own or (before) on the renaming one. */
static long long lost_in_commit(const char *where) {
    static char out[65536];
    char log[300], ck[300], cmd[4096], path[300];
    snprintf(log, sizeof log, "%s/commit.out", dir);
    snprintf(ck, sizeof ck, "%s/commit.ckpt", dir);
    remove(log), remove(ck);
    snprintf(cmd, sizeof cmd, "(PM_TEST_COMMIT_HOLD=%s,2 " MPIRUN " 2 %s train --data %s/d " MODEL
             " --eval-every 20 --microbatches 4 --steps 1000000 --pp 2 --save %s > %s 2>&1 & "
             "echo $! > %s.pid; wait $!; echo \"exit $?\" >> %s) &", where, bin, dir, ck, log, log,
             log);
    assert_int_equal(chk_sh(NULL, "%s", cmd), 0);
    int k = 0;
    for (; k < 3000 && tmp_step(ck) != 40; k++) nanosleep(&(struct timespec){0, 20000000}, NULL);
    if (k == 3000) {
        chk_sh(NULL, "pkill -KILL -P $(cat %s.pid)", log);
        fail_msg("%s: no checkpoint of step 40 was being committed", where);
    }
    /* rank 1: the pipemem whose environment says so, started on our data */
    assert_int_equal(chk_sh(NULL, "for p in $(pgrep -f '%s train --data %s/d'); do tr '\\0' "
                            "'\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && "
                            "kill -KILL $p; done; true", bin, dir), 0);
    if (!wait_for(log, "exit ", 300)) fail_msg("%s: mpirun did not end", where);
    read_log(log, out, sizeof out);
    const char *at = strstr(out, "the last complete checkpoint is ");
    long long step = -1;
    if (file_has(log, "exit 0") || file_has(log, "exit 124") || chk_count(out, "pipemem: ") != 1 ||
        !at || sscanf(at, "the last complete checkpoint is %299s (step %lld)", path, &step) != 2 ||
        strcmp(path, ck))
        fail_msg("%s: not one line from pipemem naming %s:\n%s", where, ck, out);
    if (step != pm_ckpt_peek_step(ck))
        fail_msg("%s: the line says step %lld, %s holds step %lld:\n%s", where, step, ck,
                 (long long)pm_ckpt_peek_step(ck), out);
    return step;
}

/* Held before the guard looks, the stop reaches rank 0 first: the rename
 * is abandoned (a guard that did not look would rename step 40 after the
 * line said 20). Held inside, the line waits for the rename (step 40), or
 * the stop came before the guard looked (20); a speaker that did not wait
 * would say 20 of a file holding 40. */
static void test_lost_in_commit(void **state) {
    (void)state;
    assert_int_equal(lost_in_commit("before"), 20);
    long long step = lost_in_commit("inside");
    assert_true(step == 20 || step == 40);
}

/* Ranks that cannot share one run are refused at once, in one line: one
 * device on each of 2 ranks (issue 31, 4: two trainings writing one file);
 * ranks running different commands (5: train waited on plan, ended without
 * a word);
 * --transport mpi without mpirun (15: it started MPI alone and leaked
 * OpenMPI's memory under the sanitizers). */
static void test_ranks_share_one_run(void **state) {
    (void)state;
    static char out[16384];
    char ck[300];
    snprintf(ck, sizeof ck, "%s/share.ckpt", dir);
    int rc = chk_output(out, sizeof out, MPIRUN " 2 %s train --data %s/d " MODEL " --steps 2 "
                 "--save %s", bin, dir, ck);
    if (rc == 0 || rc == 124 || chk_count(out, "pipemem: ") != 1 ||
        !strstr(out, "one device (no --pp) under mpirun with 2 ranks"))
        fail_msg("one device on 2 ranks: exit %d: %s", rc, out);
    assert_int_not_equal(access(ck, F_OK), 0);
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train --data %s/d " MODEL " --steps 2 --pp 2 "
             "--transport mpi : -np 1 %s schedule --kind 1f1b -p 2 -m 4", bin, dir, bin);
    if (rc == 0 || rc == 124 || chk_count(out, "pipemem: ") != 1 ||
        !strstr(out, "the ranks do not run the same command: rank 0 runs 'train', rank 1 "
                     "'schedule'"))
        fail_msg("train beside schedule: exit %d: %s", rc, out);
    rc = chk_output(out, sizeof out, MPIRUN " 2 %s compare -p 2 -m 4", bin);
    if (rc == 0 || rc == 124 || chk_count(out, "pipemem: ") != 1 ||
        !strstr(out, "compare runs as one process, not across MPI ranks"))
        fail_msg("compare on 2 ranks: exit %d: %s", rc, out);
    rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --steps 1 --pp 2 --transport "
             "mpi", bin, dir);
    if (rc != 1 || chk_count(out, "\n") != 1 || !strstr(out, "--transport mpi runs one device per "
                                                           "MPI rank and needs mpirun"))
        fail_msg("--transport mpi without mpirun: exit %d: %s", rc, out);
}

static void test_built_without(void **state) {
    (void)state;
    static char out[4096];
    int rc = chk_output(out, sizeof out, "%s train --data %s/d " MODEL " --steps 1 --pp 2 "
                 "--transport mpi", bin, dir);
    assert_int_equal(rc, 1);
    assert_int_equal(chk_count(out, "pipemem: --transport mpi: this pipemem was built without MPI"), 1);
}

static int setup(void **state) {
    (void)state;
    static char out[4096];
    bin = chk_bin();
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    snprintf(dir, sizeof dir, "/tmp/pm_test_cli_mpi_%d", (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && for i in $(seq 1 400); do echo \"line $i of a "
             "small corpus for the mpi tests\"; done > %s/a.txt && for i in $(seq 1 400); do "
             "echo \"other $i\"; done > %s/b.txt", dir, dir, dir);
    if (system(cmd)) return -1;
    if (chk_output(out, sizeof out, "%s prepare %s/a.txt -o %s/d && %s prepare %s/b.txt -o %s/e",
            bin, dir, dir, bin, dir, dir))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

/* Failure paths between collectives (found in review): each must end in
 * one line on every rank, never in the 300 s wait (mpirun's time limit,
 * below it, would end the run with 124):
 *   - replica 1's ranks see another file at the same path (a node's own
 *     copy): refused, naming the rank, before any step;
 *   - one rank alone refuses its plan (here: it believes a million ranks
 *     share its machine): every rank stops, the line names it;
 *   - rank 0 alone cannot write --trace with --json: the others do not
 *     wait for a gather it never makes;
 *   - ZeRO-1 with many replicas of one device (9 ranks): the all-gather's
 *     requests fit the transport's slots. */
static void test_failure_paths(void **state) {
    (void)state;
    static char out[16384];
    const char *m = MODEL " --microbatches 4 --steps 4 --pp 2 --dp 2";
    char a[300], b[300], line[900];
    snprintf(a, sizeof a, "%s/fp_a", dir);
    snprintf(b, sizeof b, "%s/fp_b", dir);
    for (int k = 0; k < 2; k++) {
        if (chk_output(out, sizeof out, "mkdir -p %s && %s train --data %s/d %s --stop-after %d "
                "--save %s/c.ckpt", k ? b : a, bin, dir, m, k ? 2 : 3, k ? b : a))
            fail_msg("%s", out);
    }
    char *abs = realpath(bin, NULL); /* the ranks change directory */
    assert_non_null(abs);
    snprintf(line, sizeof line, "exec %s train --data %s/d %s --resume c.ckpt", abs, dir, m);
    free(abs);
    int rc = chk_output(out, sizeof out, MPIRUN " 2 sh -c \"cd %s && %s\" : -np 2 sh -c \"cd %s "
                 "&& %s\"", a, line, b, line);
    assert_true(rc != 0 && rc != 124);
    if (chk_count(out, "pipemem: ") != 1 || !strstr(out, "rank 2 reads another checkpoint"))
        fail_msg("another file on replica 1: %s", out);
    rc = chk_output(out, sizeof out, MPIRUN " 1 %s train --data %s/d " MODEL " --steps 2 --pp 2 "
             ": -np 1 env OMPI_COMM_WORLD_LOCAL_SIZE=1000000 %s train --data %s/d " MODEL
             " --steps 2 --pp 2", bin, dir, bin, dir);
    assert_true(rc != 0 && rc != 124);
    if (chk_count(out, "pipemem: ") != 1 || !strstr(out, "pipemem: rank 1: train: the pipeline needs"))
        fail_msg("one rank's plan refused: %s", out);
    snprintf(line, sizeof line, "%s train --data %s/d " MODEL " --steps 2 --pp 2 --json "
             "--trace %s/fp.trace", bin, dir, dir);
    rc = chk_output(out, sizeof out, MPIRUN " 1 sh -c \"ulimit -f 1; trap '' XFSZ; exec %s\" "
             ": -np 1 %s", line, line);
    assert_true(rc != 0 && rc != 124);
    if (!strstr(out, "fp.trace: write failed")) fail_msg("rank 0's trace: %s", out);
    rc = chk_output(out, sizeof out, MPIRUN " 9 %s train --data %s/d --layers 1 --dim 32 "
             "--heads 2 --ctx 16 --batch 18 --microbatches 18 --steps 1 --eval-batches 1 --pp 1 "
             "--dp 9 --zero 1", bin, dir);
    if (rc) fail_msg("ZeRO-1 on 9 replicas: exit %d: %s", rc, out);
}

int main(void) {
    if (!pm_mpi_built()) { /* NO_MPI=1: the option says so in one line */
        const struct CMUnitTest none[] = {cmocka_unit_test(test_built_without)};
        return cmocka_run_group_tests(none, setup, teardown);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mpi_equals_threads), cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_faults),             cmocka_unit_test(test_checkpoints_move),
        cmocka_unit_test(test_bad_input),          cmocka_unit_test(test_zero1),
        cmocka_unit_test(test_resharding),         cmocka_unit_test(test_failed_write),
        cmocka_unit_test(test_failure_paths),      cmocka_unit_test(test_stopped_rank),
        cmocka_unit_test(test_stalled_root),
        cmocka_unit_test(test_ranks_share_one_run), cmocka_unit_test(test_interrupted),
        cmocka_unit_test(test_lost_in_commit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
