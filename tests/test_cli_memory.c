/* test_cli_memory.c: a pipeline divides the model's memory, as the kernel
 * measures it, through the built binary (tests/cli.h). One GPT, big enough
 * that its state dominates what a process holds: 8 layers, dim 512, 8
 * heads, ctx 32, batch 8 in 8 microbatches, the corpus's bytes as its
 * vocabulary: 25.5 M parameters, 408 MB of parameters, gradients and AdamW
 * moments (16 bytes each). Each run trains one step, evaluates one batch
 * and saves a checkpoint:
 *   - one device (`train --threads 1`): its peak resident memory (the
 *     kernel's ru_maxrss of the process) holds at least the whole state;
 *   - 4 device threads (`--pp 4`): the process's peak (train --json's
 *     peak_rss_bytes, VmHWM, and ru_maxrss at exit) at most 1.15 times one
 *     device's;
 *   - 4 MPI ranks (`mpirun -np 4 ... --pp 4`): each rank's peak at most
 *     0.40 times one device's, and at least the state its plan gives it;
 *     each rank allocates its plan, at most 0.35 of the whole state;
 *   - all three checkpoints byte for byte the same.
 *
 * Why the bounds hold, and with what margin. Each of 4 stages holds about a
 * quarter of the layers (3, 2, 2, 3 of embedding, 8 blocks and head), so a
 * rank holds 0.25 to 0.27 of the state, plus its activation arena (1F1B:
 * up to 4 microbatches of its stage on rank 0), workspace and transport
 * buffers, plus what any process holds (the program, OpenBLAS, MPI): about
 * 0.32 of one device here. Four device threads hold the whole state once,
 * four arenas (4 + 3 + 2 + 1 microbatches of a stage) against one device's
 * one microbatch of the whole model, four workspaces: about 1.05 here. A
 * whole-model copy in any process (as before the pipeline held its
 * stages alone) would put a rank above 1.0 and four threads above 2.0.
 *
 * What else moves resident memory, and why it cannot eat the margin:
 *   - the core count: OpenBLAS starts a pool of (cores - 1) threads when
 *     it loads; every run here gets OPENBLAS_NUM_THREADS=1, so there is no
 *     pool, and the one device computes on one thread as each device does;
 *   - the page cache (the data read, the checkpoint written) is not
 *     resident memory of a process; the data's mapping is (the pages
 *     touched), but the corpus is 100 KB;
 *   - load and timing: every buffer is sized by the plan and allocated
 *     once, before the step; under MPI the copies in flight are bounded by
 *     the plan's transport buffers, and the activations travel by
 *     rendezvous (above OpenMPI's 4 KiB eager limit), so a slow receiver
 *     makes no unexpected-message copies of them;
 *   - the CPU: OpenBLAS's packing buffers touched depend on its kernels'
 *     block sizes, bounded by the operands (a few MB per thread);
 *   - transparent huge pages ("always"): touched extents round up to
 *     2 MB, a few MB per thread outside the planned buffers;
 *   - sanitizers: AddressSanitizer's shadow and quarantine (measured under
 *     make asan: 0.98 and 0.33).
 * The margins left, 0.08 and 0.10 of one device's peak (35 and 44 MB),
 * are several times those. */
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
#include "pipemem/pm_runtime.h"

#define SHAPE "--layers 8 --dim 512 --heads 8 --ctx 32 --batch 8 --microbatches 8 --steps 1 " \
              "--eval-batches 1"
#define MPIRUN "ASAN_OPTIONS=detect_leaks=0 timeout 600 mpirun --oversubscribe --quiet -np 4 "

static char dir[256];
static const char *bin;

/* Runs cmd through chk_sh (stdout and stderr into out, at most cap); its
 * exit status; *rss: the kernel's peak resident memory (ru_maxrss, bytes)
 * of the largest process it ran. */
static int run(char *out, size_t cap, double *rss, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int run(char *out, size_t cap, double *rss, const char *fmt, ...) {
    char cmd[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    chk_cmd c = {0};
    int st = chk_sh(&c, "exec 2>&1; %s", cmd);
    if (rss) *rss = c.rss;
    snprintf(out, cap, "%s", c.out);
    chk_cmd_free(&c);
    return st;
}

static double json_num(const char *out, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(out, pat);
    if (!p) fail_msg("no %s in:\n%s", key, out);
    return strtod(p + strlen(pat), NULL);
}

/* One device's peak resident memory (bytes), measured once; at least the
 * state, 16 bytes per parameter (so the ratios below are to a real
 * measurement of the whole model). */
static double one_device(void) {
    static double peak;
    static char out[8192];
    if (peak > 0) return peak;
    if (run(out, sizeof out, &peak, "exec %s train --data %s/d " SHAPE " --threads 1 --save "
            "%s/one.ckpt --json", bin, dir, dir))
        fail_msg("one device: %s", out);
    double params = json_num(out, "params");
    if (peak < 16 * params)
        fail_msg("one device: peak resident memory %.0f bytes, below the state's %.0f", peak,
                 16 * params);
    return peak;
}

/* Four device threads hold the model once: at most 1.15 times one device. */
static void test_threads(void **state) {
    (void)state;
    static char out[16384];
    double one = one_device(), rss, v[8];
    char ck[300];
    snprintf(ck, sizeof ck, "%s/threads.ckpt", dir);
    if (run(out, sizeof out, &rss, "exec %s train --data %s/d " SHAPE " --pp 4 --save %s "
            "--json", bin, dir, ck))
        fail_msg("--pp 4: %s", out);
    if (chk_json_array(out, "peak_rss_bytes", v, 8) != 1) fail_msg("no peak_rss_bytes:\n%s", out);
    /* the larger of VmHWM at the end of training and the kernel's figure at
     * exit (as one device's is measured) */
    double peak = v[0] > rss ? v[0] : rss;
    print_message("4 device threads: peak %.0f MB (VmHWM after training %.0f MB), one device "
                  "%.0f MB: %.3f\n", peak / 1e6, v[0] / 1e6, one / 1e6, peak / one);
    if (peak > 1.15 * one)
        fail_msg("4 device threads peaked at %.0f bytes, %.3f times one device's %.0f", peak,
                 peak / one, one);
    char a[300];
    snprintf(a, sizeof a, "%s/one.ckpt", dir);
    if (!chk_same_file(a, ck)) fail_msg("4 device threads: the checkpoint differs from one device's");
    remove(ck);
}

/* Four MPI ranks: each at most 0.40 times one device, at least its plan's
 * state, and allocating its plan. */
static void test_ranks(void **state) {
    (void)state;
    if (!pm_mpi_built()) {
        print_message("test_ranks skipped: this pipemem was built without MPI\n");
        skip();
    }
    static char out[16384];
    double one = one_device(), v[8], par[8], grad[8], mom[8];
    char ck[300], msg[512];
    snprintf(ck, sizeof ck, "%s/ranks.ckpt", dir);
    if (run(out, sizeof out, NULL, MPIRUN "%s train --data %s/d " SHAPE " --pp 4 --save %s --json",
            bin, dir, ck))
        fail_msg("4 ranks: %s", out);
    if (chk_json_array(out, "peak_rss_bytes", v, 8) != 4 ||
        chk_json_planned(out, "parameters", par, 8) != 4 ||
        chk_json_planned(out, "gradients", grad, 8) != 4 ||
        chk_json_planned(out, "moments", mom, 8) != 4)
        fail_msg("4 ranks: no peak_rss_bytes or planned_bytes for 4 devices:\n%s", out);
    for (int r = 0; r < 4; r++) {
        print_message("rank %d: peak %.0f MB, %.3f of one device's %.0f MB\n", r, v[r] / 1e6,
                      v[r] / one, one / 1e6);
        if (v[r] > 0.40 * one)
            fail_msg("rank %d peaked at %.0f bytes, %.3f times one device's %.0f", r, v[r],
                     v[r] / one, one);
        if (v[r] < par[r] + grad[r] + mom[r])
            fail_msg("rank %d peaked at %.0f bytes, below its state's %.0f", r, v[r],
                     par[r] + grad[r] + mom[r]);
    }
    if (chk_train_alloc(out, 0.35, msg, sizeof msg)) fail_msg("4 ranks: %s", msg);
    char a[300];
    snprintf(a, sizeof a, "%s/one.ckpt", dir);
    if (!chk_same_file(a, ck)) fail_msg("4 ranks: the checkpoint differs from one device's");
    remove(ck);
}

static int setup(void **state) {
    (void)state;
    bin = chk_bin();
    /* no OpenBLAS thread pool (its size would be the core count's) */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    snprintf(dir, sizeof dir, "/tmp/pm_test_cli_memory_%d", (int)getpid());
    return chk_prepare(bin, dir, 3000, "line $((i + 1)) of a corpus for memory");
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_ranks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
