/* test_cli_kill.c: kill safety of `pipemem train --save`, through the built
 * binary (tests/cli.h). A run that saves a checkpoint at every step (1.6 MB, 100
 * steps) is killed with SIGKILL several times, each run resuming from the
 * checkpoint the last one left: on one device, and as a pipeline (--pp 2,
 * zb-h1, device threads), where every device writes its own stages into
 * the one temporary the root commits. Before each kill the run is frozen
 * (SIGSTOP) and the checkpoint on disk copied; every other kill is made
 * while a save is in progress (the run's temporary exists while frozen).
 * The run is killed still frozen or after running on a little; then the
 * checkpoint must be the copy byte for byte or a newer whole checkpoint
 * (header and every slab verified against its checksum), and at the end
 * `--resume` must carry the run to a checkpoint byte for byte the one an
 * uninterrupted run writes (for --pp 2 also the single-device one). Only
 * the CLI and the library's checkpoint readers are used, so the test does
 * not depend on the checkpoint's layout. (A writer in parts killed between
 * pm_ckpt_create and pm_ckpt_commit, through the library: test_train.c.)
 *
 * The kill moments are drawn from a seeded generator (PM_KILL_SEED overrides
 * the seed, which the test prints) in steps of progress (the checkpoint's
 * step), never in wall time, so a slow or loaded machine kills at the same
 * points of the run. */
#include <errno.h>
#include <glob.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "cli.h"
#include "pipemem/pm_train.h"
#include "train/trainer.h"
#include "train/ckpt.h"

enum { KILLS = 6, STEPS = 100 };

static char dir[256];

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* The started runs' outputs (chk_start: they go to /dev/null, so these
 * stay empty). */
static chk_cmd runs;

/* Starts `bin train ...` saving to save (resuming from it if resume), on one
 * device or (pp) on two device threads with zb-h1, with stdout and stderr
 * to /dev/null; returns the child's pid (pipemem's own: exec). */
static pid_t start_train(const char *bin, const char *save, int resume, int pp) {
    return chk_start(&runs, "exec %s train --data %s/d --layers 2 --dim 64 --heads 4 --ctx 32 "
                     "--batch 8 --microbatches 2 --steps 100 --eval-every 1 --eval-batches 1 "
                     "--seed 11 --save %s %s%s%s >/dev/null 2>&1", bin, dir, save,
                     pp ? "--pp 2 --schedule zb-h1" : "--threads 1", resume ? " --resume " : "",
                     resume ? save : "");
}

/* Waits for pid; its exit status, or 128 + signal. */
static int wait_for(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* xorshift64*: reproducible kill moments. */
static double uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return (double)((*s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* The whole file at path (pm_malloc'd into *buf); 0, or -1 if unreadable. */
static int slurp(const char *path, char **buf, size_t *len) {
    pm_err err;
    *buf = NULL, *len = 0;
    return pm_read_file(path, (size_t)64 << 20, buf, len, &err) ? -1 : 0;
}

/* Whether the writer pid has a temporary of path open (PATH.tmp.PID.N:
 * created at the start of a save, renamed or removed at its end). */
static int saving(const char *path, pid_t pid) {
    char pat[400];
    snprintf(pat, sizeof pat, "%s.tmp.%ld.*", path, (long)pid);
    glob_t g;
    int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    globfree(&g);
    return n > 0;
}

/* Stops pid (SIGSTOP, every thread) and waits until it is stopped: 1; or
 * 0 if it ended first (*rc its status). */
static int freeze(pid_t pid, int *rc) {
    int st;
    kill(pid, SIGSTOP);
    while (waitpid(pid, &st, WUNTRACED) < 0)
        if (errno != EINTR) return *rc = -1, 0;
    if (WIFSTOPPED(st)) return 1;
    *rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return 0;
}

/* The step of the checkpoint at path, -1 if there is none (yet). */
static int64_t step_of(const char *path) {
    pm_ckpt_info info;
    pm_err err;
    return pm_ckpt_info_read(path, &info, &err) ? -1 : info.step;
}

/* One kill of a run saving to path (resumed from it if it exists): once
 * the checkpoint on disk reaches step `target`, the run is frozen
 * (SIGSTOP) at a random moment, or (in_save) at the first of repeated
 * random moments at which it is inside a save (its temporary exists);
 * while frozen the checkpoint is copied; the run is then SIGKILLed,
 * still frozen or after a random moment of running on. Afterwards the
 * checkpoint must be the copy byte for byte, or a newer whole checkpoint.
 * Moments count progress (steps saved), never wall time, so a slow or
 * loaded machine kills at the same points of the run. Returns 1 if the
 * freeze found a save in progress, 0 if not, -1 if the run ended first. */
static int kill_once(const char *bin, const char *path, int pp, int64_t target, int in_save,
                     uint64_t *rng, char *log, size_t cap) {
    pid_t pid = start_train(bin, path, exists(path), pp);
    assert_true(pid > 0);
    int rc = 0, frozen = 0, was_saving = 0;
    while (step_of(path) < target) {
        if (waitpid(pid, &rc, WNOHANG) == pid) fail_msg("the run ended before step %lld",
                                                         (long long)target);
        sleep_s(0.0005);
    }
    for (int tries = 0; !frozen; tries++) {
        sleep_s(in_save ? 0.001 * uniform(rng) : 0.005 * uniform(rng));
        if (!freeze(pid, &rc)) {
            if (rc != 0) fail_msg("the run exited with %d", rc);
            snprintf(log, cap, " ended");
            return -1;
        }
        was_saving = saving(path, pid);
        if (was_saving || !in_save || tries == 100000) frozen = 1;
        else kill(pid, SIGCONT);
    }
    char *before;
    size_t n;
    int had = slurp(path, &before, &n) == 0;
    pm_ckpt_info info;
    pm_err err;
    int64_t step0 = -1;
    if (had && chk_ckpt_whole(path, &info, &err)) fail_msg("while frozen: %s", err.msg);
    if (had) step0 = info.step;
    int late = uniform(rng) < 0.5; /* kill after running on a little */
    if (late) {
        kill(pid, SIGCONT);
        sleep_s(0.003 * uniform(rng));
    }
    kill(pid, SIGKILL);
    rc = wait_for(pid);
    if (rc != 128 + SIGKILL && rc != 0) fail_msg("the killed run exited with %d", rc);
    char *after;
    size_t m;
    int has = slurp(path, &after, &m) == 0;
    if (had && !has) fail_msg("the checkpoint at step %lld is gone", (long long)step0);
    int same = had && has && n == m && !memcmp(before, after, n);
    if (has && !same) { /* not the copy: a newer whole checkpoint */
        if (chk_ckpt_whole(path, &info, &err)) fail_msg("after the kill: %s", err.msg);
        if (info.step <= step0 || info.step > STEPS)
            fail_msg("after the kill the checkpoint is at step %lld (was %lld)",
                     (long long)info.step, (long long)step0);
    }
    if (!late && had && !same) fail_msg("killed while frozen, yet the checkpoint changed");
    snprintf(log, cap, " %lld%s%s->%s", (long long)step0, was_saving ? "(saving)" : "",
             late ? "+run" : "", same ? "same" : "newer");
    pm_free(before);
    pm_free(after);
    return was_saving;
}

static void kill_and_resume(int pp) {
    const char *bin = chk_bin();
    uint64_t seed = getenv("PM_KILL_SEED") ? strtoull(getenv("PM_KILL_SEED"), NULL, 0) : 20261124;
    uint64_t rng = seed ? seed : 1;
    char ref[300], run[300];
    snprintf(ref, sizeof ref, "%s/ref%d.ckpt", dir, pp);
    snprintf(run, sizeof run, "%s/run%d.ckpt", dir, pp);
    /* the uninterrupted run */
    assert_int_equal(wait_for(start_train(bin, ref, 0, pp)), 0);
    pm_ckpt_info info;
    pm_err err;
    if (chk_ckpt_whole(ref, &info, &err)) fail_msg("%s", err.msg);
    assert_int_equal(info.step, STEPS);
    /* kills at increasing steps, 1 to 12 apart (all before step 73), every
     * other one inside a save */
    int in_saves = 0;
    int64_t target = 0;
    char log[1024] = "";
    size_t at = 0;
    for (int k = 0; k < KILLS; k++) {
        target += 1 + (int64_t)(uniform(&rng) * 12);
        int r = kill_once(bin, run, pp, target, k % 2, &rng, log + at, sizeof log - at);
        at = strlen(log);
        if (r < 0) fail_msg("seed %llu: run %d ended before it was killed:%s",
                            (unsigned long long)seed, k, log);
        in_saves += r;
    }
    print_message("%s: seed %llu, %d kills, %d inside a save; checkpoint step at the kill"
                  "(saving)(+run: killed after running on)->after:%s\n",
                  pp ? "pp 2, zb-h1" : "one device", (unsigned long long)seed, KILLS, in_saves,
                  log);
    if (in_saves < KILLS / 2) fail_msg("only %d kills landed inside a save", in_saves);
    assert_int_equal(wait_for(start_train(bin, run, 1, pp)), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", ref, run);
    if (system(cmd) != 0)
        fail_msg("seed %llu: the resumed run's checkpoint differs from the uninterrupted one "
                 "(%s)", (unsigned long long)seed, log);
    /* a finished save leaves no temporary behind (the killed runs' are
     * cleared by the next writer: their processes are gone) */
    assert_int_equal(chk_tmp_count(run), 0);
    /* both drivers train the same model: pipeline and single-device end equal */
    if (pp) {
        snprintf(cmd, sizeof cmd, "cmp -s %s %s/ref0.ckpt", run, dir);
        if (exists(ref) && system(cmd) != 0) fail_msg("pp 2 and one device end apart");
    }
}

static void test_sigkill_then_resume(void **state) {
    (void)state;
    kill_and_resume(0);
}

/* The pipeline saves by stage (every device thread writes its own ranges
 * of one temporary; the root commits): the same guarantees. */
static void test_sigkill_then_resume_pp(void **state) {
    (void)state;
    kill_and_resume(1);
}

static int setup(void **state) {
    (void)state;
    const char *bin = chk_bin();
    snprintf(dir, sizeof dir, "/tmp/pm_test_cli_kill_%d", (int)getpid());
    /* A corpus with some structure: counted sentences. */
    return chk_prepare(bin, dir, 2000, "step $i of $((i % 7)): a killed run resumes where it "
                       "stopped.");
}

static int teardown(void **state) {
    (void)state;
    chk_cmd_free(&runs);
    return chk_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_then_resume),
        cmocka_unit_test(test_sigkill_then_resume_pp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
