/* test_kill.c: kill safety of `pipemem train --save` (when PM_BIN names the
 * built binary). A run that saves a checkpoint at every step (1.6 MB, 100
 * steps, so kills land inside saves as well as between them) is killed with
 * SIGKILL at random moments, several times; after each kill the checkpoint
 * on disk (if one was written yet) must load, and `--resume` from it must
 * carry the run to its end, where the checkpoint must be byte for byte the
 * one an uninterrupted run writes. The same for a pipeline run (--pp 2,
 * zb-h1), whose end must also equal the single-device run's. Only the CLI
 * and the library's checkpoint readers are used, so the test does not
 * depend on the checkpoint's layout. And a writer in parts killed between
 * pm_ckpt_create and pm_ckpt_commit leaves the previous checkpoint.
 *
 * The kill moments are drawn from a seeded generator (PM_KILL_SEED overrides
 * the seed, which failures print) as fractions of the uninterrupted run's
 * wall time, so the same seed kills at the same points of the run's
 * progress on a fast or a slow (sanitized, shared) machine. */
#include <errno.h>
#include <fcntl.h>
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
#include "pipemem/pm_train.h"

enum { KILLS = 6, STEPS = 100 };

static char dir[256];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* Starts `bin train ...` saving to save (resuming from it if resume), on one
 * device or (pp) on two device threads with zb-h1, with stdout and stderr
 * to /dev/null; returns the child's pid. */
static pid_t start_train(const char *bin, const char *save, int resume, int pp) {
    char data[300];
    snprintf(data, sizeof data, "%s/d", dir);
    const char *argv[40] = {bin, "train", "--data", data, "--layers", "2", "--dim", "64",
                            "--heads", "4", "--ctx", "32", "--batch", "8", "--microbatches",
                            "2", "--steps", "100", "--eval-every", "1", "--eval-batches", "1",
                            "--seed", "11", "--save", save};
    int n = 26;
    if (pp) {
        argv[n++] = "--pp";
        argv[n++] = "2";
        argv[n++] = "--schedule";
        argv[n++] = "zb-h1";
    } else {
        argv[n++] = "--threads";
        argv[n++] = "1";
    }
    if (resume) {
        argv[n++] = "--resume";
        argv[n++] = save;
    }
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    return pid;
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

/* Verifies every byte of a checkpoint: the header (info) and each slab's
 * checksum. */
static pm_status verify_whole(const char *path, pm_ckpt_info *info, pm_err *err) {
    pm_status st = pm_ckpt_info_read(path, info, err);
    uint64_t sums[PM_CKPT_SLABS];
    for (int s = 0; s < PM_CKPT_SLABS && !st; s++)
        st = pm_ckpt_read_part(path, info, s, 0, NULL, info->n_params, &sums[s], err);
    return st ? st : pm_ckpt_check_sums(path, info, PM_CKPT_ALL, sums, err);
}

static void kill_and_resume(int pp) {
    const char *bin = getenv("PM_BIN");
    if (!bin) skip();
    uint64_t seed = getenv("PM_KILL_SEED") ? strtoull(getenv("PM_KILL_SEED"), NULL, 0) : 20261124;
    uint64_t rng = seed ? seed : 1;
    char ref[300], run[300];
    snprintf(ref, sizeof ref, "%s/ref%d.ckpt", dir, pp);
    snprintf(run, sizeof run, "%s/run%d.ckpt", dir, pp);
    /* The uninterrupted run, timed: the scale for the kill moments. */
    double t0 = now_s();
    assert_int_equal(wait_for(start_train(bin, ref, 0, pp)), 0);
    double full = now_s() - t0;
    pm_ckpt_info info;
    pm_err err;
    if (verify_whole(ref, &info, &err)) fail_msg("%s", err.msg);
    assert_int_equal(info.step, STEPS);
    /* Kills at 2%..37% of a full run's time each: later kills land further
     * into the run (resumed runs start where the last checkpoint stopped). */
    int killed = 0, finished = 0;
    int64_t last = 0;
    char log[1024] = "";
    size_t at = 0;
    for (int k = 0; k < KILLS && !finished; k++) {
        double delay = full * (0.02 + 0.35 * uniform(&rng));
        int resume = exists(run);
        pid_t pid = start_train(bin, run, resume, pp);
        assert_true(pid > 0);
        sleep_s(delay);
        kill(pid, SIGKILL);
        int rc = wait_for(pid);
        if (rc == 128 + SIGKILL) killed++;
        else if (rc == 0) finished = 1;
        else fail_msg("seed %llu: run %d (resume %d) exited with %d", (unsigned long long)seed,
                      k, resume, rc);
        /* Whatever moment it died at, the file on disk is a whole checkpoint
         * no older than the previous one. */
        int64_t step = -1;
        if (exists(run)) {
            if (verify_whole(run, &info, &err))
                fail_msg("seed %llu: after kill %d at %.3f s: %s", (unsigned long long)seed, k,
                         delay, err.msg);
            step = info.step;
            if (step < last || step > STEPS)
                fail_msg("seed %llu: after kill %d the checkpoint is at step %lld (was %lld)",
                         (unsigned long long)seed, k, (long long)step, (long long)last);
            last = step;
        }
        at += (size_t)snprintf(log + at, sizeof log - at, " %.3fs->%lld", delay,
                               (long long)step);
        if (at >= sizeof log) at = sizeof log - 1;
    }
    /* At least half the runs died mid-way, some after saving something. */
    if (killed < KILLS / 2 || last == 0)
        fail_msg("seed %llu: only %d of %d runs were killed before the end (full run %.3f s;"
                 " delay->step:%s)", (unsigned long long)seed, killed, KILLS, full, log);
    print_message("%s: seed %llu, full run %.3f s, %d kills, kill delay->checkpoint step:%s\n",
                  pp ? "pp 2, zb-h1" : "one device", (unsigned long long)seed, full, killed, log);
    if (!finished) assert_int_equal(wait_for(start_train(bin, run, exists(run), pp)), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", ref, run);
    if (system(cmd) != 0)
        fail_msg("seed %llu: the resumed run's checkpoint differs from the uninterrupted one "
                 "(delay->step:%s)", (unsigned long long)seed, log);
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

/* The pipeline driver saves through its own path (gathered from the device
 * threads): the same guarantees. */
static void test_sigkill_then_resume_pp(void **state) {
    (void)state;
    kill_and_resume(1);
}

/* A writer in parts SIGKILLed after pm_ckpt_create and a pm_ckpt_write_part,
 * before the commit: the previous checkpoint is byte for byte there and
 * loads; the dead writer's temporary is cleared by the next writer's check. */
static void test_sigkill_between_create_and_commit(void **state) {
    (void)state;
    static uint8_t text[2000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)("killed mid-save "[i % 16]);
    pm_tokens toks = PM_TOKENS_BYTES(text, sizeof text);
    pm_train_cfg c = {.model = {256, 8, 16, 2, 2}, .batch = 2, .micro = 1, .seed = 3};
    pm_optim_defaults(&c.opt, 4);
    pm_trainer t;
    pm_err err = {{0}};
    pm_step_info si;
    char path[300], cmd[700];
    snprintf(path, sizeof path, "%s/parts.ckpt", dir);
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    assert_int_equal(pm_trainer_step(&t, &si, &err), PM_OK);
    assert_int_equal(pm_ckpt_save(&t, path, &err), PM_OK);
    snprintf(cmd, sizeof cmd, "cp %s %s.before", path, path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(pm_trainer_step(&t, &si, &err), PM_OK);
    pid_t pid = fork();
    if (pid == 0) {
        pm_ckpt_meta meta = pm_ckpt_meta_of(&t);
        char *tmp;
        uint64_t sum;
        if (!pm_ckpt_create(path, &meta, &tmp, &err) &&
            !pm_ckpt_write_part(tmp, t.n_params, PM_CKPT_PARAMS, 0, t.params, t.n_params, &sum,
                                &err))
            raise(SIGKILL);
        _exit(1);
    }
    assert_int_equal(wait_for(pid), 128 + SIGKILL);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s.before", path, path);
    assert_int_equal(system(cmd), 0);
    pm_ckpt_info info;
    if (verify_whole(path, &info, &err)) fail_msg("%s", err.msg);
    assert_int_equal(info.step, 1);
    assert_int_equal(chk_tmp_count(path), 1); /* the dead writer's */
    assert_int_equal(pm_path_check_writable(path, &err), PM_OK);
    assert_int_equal(chk_tmp_count(path), 0);
    pm_trainer_free(&t);
}

static int setup(void **state) {
    (void)state;
    const char *bin = getenv("PM_BIN");
    snprintf(dir, sizeof dir, "/tmp/pm_test_kill_%d", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return -1;
    if (!bin) return 0;
    /* A corpus with some structure: counted sentences. */
    snprintf(cmd, sizeof cmd, "%s/t.txt", dir);
    FILE *f = fopen(cmd, "w");
    if (!f) return -1;
    for (int i = 0; i < 2000; i++)
        fprintf(f, "step %d of %d: a killed run resumes where it stopped.\n", i, i % 7);
    if (fclose(f)) return -1;
    snprintf(cmd, sizeof cmd, "%s prepare %s/t.txt -o %s/d > /dev/null 2>&1", bin, dir, dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_then_resume),
        cmocka_unit_test(test_sigkill_then_resume_pp),
        cmocka_unit_test(test_sigkill_between_create_and_commit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
