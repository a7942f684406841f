/* test_mpi.c: the MPI transport and a pipe's data parallelism on it,
 * through mpirun, by the library alone (pipemem's own runs under mpirun:
 * test_cli_mpi.c).
 *
 * Two halves in one program. Started by mpirun (OMPI_COMM_WORLD_SIZE set),
 * it is a probe of the transport (and of a small pipe): argv[1] names a
 * case, every rank runs it and prints "ok" or the error line. Started plainly,
 * it is the cmocka suite: it runs the probe cases through mpirun and checks
 *   - the transport's contract, for copied (isend) and rendezvous (issend)
 *     sends: exact bytes, order per tag (the two kinds interleaved), a
 *     rendezvous send not done before its receive is posted, length
 *     mismatches and timeouts as one line naming both ranks (a rank whose
 *     own wait is longer woken by the other's error), an abort reaching a
 *     rank blocked in a wait on a receive or a rendezvous send;
 *   - a pipe of 2 devices x 2 replicas: its gradient sums and the
 *     parameter gather in chunks bitwise equal to one message per stage
 *     and to the threads, and what each rank allocates beyond its slabs and
 *     arena far from growing with the stages (no stage-sized buffer).
 * mpirun runs as root here only with OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM), which
 * the suite sets; --oversubscribe lets 4 ranks share 2 cores. */
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

#include "cli.h"
#include "pipemem/pm_runtime.h"
#include "util/alloc.h"
#include "model/passes.h"
#include "runtime/transport.h"
#include "runtime/pipe.h"

/* ---- the probe (one process per rank) ---------------------------------------- */

static int probe_fail(pm_tp *tp, const char *what) {
    pm_err e = {{0}};
    pm_tp_status(tp, &e);
    printf("rank %d %s: %s\n", tp->dev, what, e.msg);
    return 3;
}

/* rank 0 sends sizes 0, 1, 1000 and 1 MiB, copied (isend) then by
 * rendezvous (issend), then three messages with one tag, then isend and
 * issend interleaved on one tag; rank 1 posts some receives late (after a
 * sleep) and some early. */
static int probe_exact(pm_tp *tp) {
    static unsigned char a[1 << 20], b[1 << 20];
    size_t sizes[4] = {0, 1, 1000, 1 << 20};
    pm_tp_req r;
    for (size_t i = 0; i < sizeof a; i++) a[i] = (unsigned char)(i * 7 + 3);
    for (int k = 0; k < 8; k++) {
        if (tp->dev == 0) {
            if ((k < 4 ? pm_tp_isend : pm_tp_issend)(tp, 1, 10 + k, a, sizes[k % 4], &r) ||
                pm_tp_wait(tp, &r))
                return probe_fail(tp, "send");
        } else {
            if (k % 2) nanosleep(&(struct timespec){0, 20000000}, NULL);
            memset(b, 0, sizeof b);
            if (pm_tp_irecv(tp, 0, 10 + k, b, sizes[k % 4], &r) || pm_tp_wait(tp, &r))
                return probe_fail(tp, "recv");
            if (memcmp(a, b, sizes[k % 4]))
                return printf("rank 1: bytes differ at size %zu\n", sizes[k % 4]), 3;
        }
    }
    for (int k = 0; k < 3; k++) { /* non-overtaking on one tag */
        int v = 100 + k, got = -1;
        if (tp->dev == 0 && (pm_tp_isend(tp, 1, 5, &v, sizeof v, &r) || pm_tp_wait(tp, &r)))
            return probe_fail(tp, "send");
        if (tp->dev == 1) {
            if (pm_tp_irecv(tp, 0, 5, &got, sizeof got, &r) || pm_tp_wait(tp, &r))
                return probe_fail(tp, "recv");
            if (got != v) return printf("rank 1: message %d arrived as %d\n", v, got), 3;
        }
    }
    /* isend, issend, isend, issend on one tag, all started before any wait
     * (rank 1 receives late): they arrive in the order sent */
    int v[4] = {200, 201, 202, 203}, got[4] = {-1, -1, -1, -1};
    pm_tp_req q[4];
    for (int k = 0; k < 4 && tp->dev == 0; k++)
        if ((k % 2 ? pm_tp_issend : pm_tp_isend)(tp, 1, 6, &v[k], sizeof v[k], &q[k]))
            return probe_fail(tp, "send");
    for (int k = 0; k < 4 && tp->dev == 0; k++)
        if (pm_tp_wait(tp, &q[k])) return probe_fail(tp, "send");
    if (tp->dev == 1) nanosleep(&(struct timespec){0, 20000000}, NULL);
    for (int k = 0; k < 4 && tp->dev == 1; k++) {
        if (pm_tp_irecv(tp, 0, 6, &got[k], sizeof got[k], &r) || pm_tp_wait(tp, &r))
            return probe_fail(tp, "recv");
        if (got[k] != v[k]) return printf("rank 1: message %d arrived as %d\n", v[k], got[k]), 3;
    }
    printf("rank %d ok\n", tp->dev);
    return 0;
}

/* A rendezvous send is not done before its receive is posted: rank 0
 * issends, tests it (and again after 20 ms), and only then tells rank 1
 * (another tag) to post the receive; after that its wait completes. */
static int probe_sync(pm_tp *tp) {
    static unsigned char a[1 << 16], b[1 << 16];
    pm_tp_req r, go;
    int done = 1, tok = 1;
    for (size_t i = 0; i < sizeof a; i++) a[i] = (unsigned char)(i * 5 + 1);
    if (tp->dev == 0) {
        for (size_t n = 4; n <= sizeof a; n *= 128) { /* small (eager in MPI) and large */
            if (pm_tp_issend(tp, 1, 20, a, n, &r)) return probe_fail(tp, "issend");
            for (int k = 0; k < 2; k++) {
                if (pm_tp_test(tp, &r, &done)) return probe_fail(tp, "test");
                if (done) return printf("rank 0: the issend of %zu bytes was done before the "
                                        "receive was posted\n", n), 3;
                nanosleep(&(struct timespec){0, 20000000}, NULL);
            }
            if (pm_tp_isend(tp, 1, 21, &tok, sizeof tok, &go) || pm_tp_wait(tp, &go) ||
                pm_tp_wait(tp, &r))
                return probe_fail(tp, "wait");
        }
    } else {
        for (size_t n = 4; n <= sizeof a; n *= 128) {
            if (pm_tp_irecv(tp, 0, 21, &tok, sizeof tok, &go) || pm_tp_wait(tp, &go) ||
                pm_tp_irecv(tp, 0, 20, b, n, &r) || pm_tp_wait(tp, &r))
                return probe_fail(tp, "recv");
            if (memcmp(a, b, n)) return printf("rank 1: bytes differ at size %zu\n", n), 3;
        }
    }
    printf("rank %d ok\n", tp->dev);
    return 0;
}

/* rank 0 sends `n` bytes (by rendezvous if rdv), rank 1 expects 50. */
static int probe_length(pm_tp *tp, size_t n, int rdv) {
    static unsigned char buf[100];
    pm_tp_req r;
    if (tp->dev == 0) {
        if ((rdv ? pm_tp_issend : pm_tp_isend)(tp, 1, 7, buf, n, &r)) return probe_fail(tp, "send");
        /* stays until rank 1's error reaches it */
        if (pm_tp_irecv(tp, 1, 8, buf, 1, &r) || pm_tp_wait(tp, &r)) return probe_fail(tp, "wait");
        return 0;
    }
    if (pm_tp_irecv(tp, 0, 7, buf, 50, &r) || pm_tp_wait(tp, &r)) return probe_fail(tp, "recv");
    return 0;
}

/* rank 1 never sends (rdv: never receives rank 0's issend): rank 0's
 * wait times out naming it; rank 1, waiting for rank 0 much longer, is
 * woken by rank 0's error. */
static int probe_silent(pm_tp *tp, int rdv) {
    static int x;
    pm_tp_req r;
    if (rdv && tp->dev == 0) {
        if (pm_tp_issend(tp, 1, 9, &x, sizeof x, &r) || pm_tp_wait(tp, &r))
            return probe_fail(tp, "wait");
        return 0;
    }
    if (pm_tp_irecv(tp, 1 - tp->dev, rdv ? 8 : 9, &x, sizeof x, &r) || pm_tp_wait(tp, &r))
        return probe_fail(tp, "wait");
    return 0;
}

/* rank 0 waits on a receive (rdv: on a rendezvous send of 1 MiB) that rank
 * 1 never matches; rank 1 aborts; rank 0 wakes with its line. The buffer
 * is static: MPI may still read it after the abort (the contract). */
static int probe_abort(pm_tp *tp, int rdv) {
    static unsigned char x[1 << 20];
    pm_tp_req r;
    if (tp->dev == 1) {
        nanosleep(&(struct timespec){0, 100000000}, NULL);
        pm_tp_abort(tp, PM_ERR_ARG, "boom");
        return probe_fail(tp, "aborted");
    }
    if ((rdv ? pm_tp_issend(tp, 1, 9, x, sizeof x, &r) : pm_tp_irecv(tp, 1, 9, x, 4, &r)) ||
        pm_tp_wait(tp, &r))
        return probe_fail(tp, "wait");
    return 0;
}

/* ---- the probe: a pipe of 2 devices x 2 replicas (mpirun -np 4) ---------- */

enum { PB = 8, PT = 8 }; /* batch (= microbatches), context */

typedef struct {
    double mine;     /* bytes this process allocated in create and the first step, less
                      * its devices' parameter slabs */
    double arena[4]; /* the root's: each device's arena (the step's report) */
    double stage;    /* the largest stage's parameter bytes */
} pipe_mem;

/* Two steps of `layers` blocks of width 64 on device dev of an MPI world
 * (dev -1: every device, threads in this process), the gradient sums and
 * the gather in messages of `chunk` floats (0: the default); the root's
 * gathered parameters into params. */
static pm_status pipe_run(int layers, int dev, size_t chunk, float *params, pipe_mem *pm,
                          pm_err *err) {
    pm_train_cfg c = {.model = {64, PT, 64, 4, layers}, .batch = PB, .micro = PB, .seed = 5};
    pm_optim_defaults(&c.opt, 4);
    pm_sched s;
    pm_sched_req req = {.p = 2, .m = PB / 2, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    pm_status st = pm_sched_generate(&s, "1f1b", &req, err);
    if (st) return st;
    pm_pipe_opts o = {.chunk_floats = chunk, .wait_timeout_s = 30};
    pm_plan_req rq = {.sched = &s, .dp = 2,
                      .transport = dev < 0 ? PM_TRANSPORT_THREADS : PM_TRANSPORT_MPI};
    pm_plan pl = {0};
    int32_t inp[PB * PT], tgt[PB * PT];
    for (int i = 0; i < PB * PT; i++) inp[i] = (i * 7 + 3) % 64, tgt[i] = (i * 11 + 5) % 64;
    pm_pipe *pp;
    pm_pipe_info in;
    int64_t b0 = pm_alloc_bytes();
    if ((st = pm_plan_make(&pl, &c, &rq, err)) || (st = pm_pipe_create(&pp, &pl, &o, err)))
        goto done;
    for (int k = 0; k < 2 && !st; k++)
        if (!(st = pm_pipe_step(pp, inp, tgt, &in, err)) && k == 0 && pm) {
            /* device g holds stage g % 2 (1f1b on 2 devices): 16 bytes per parameter */
            const int *first = pm_pipe_stage_first(pp);
            pm->mine = (double)(pm_alloc_bytes() - b0), pm->stage = 0;
            for (int g = 0; g < 4; g++) {
                double b = 0;
                for (int l = first[g % 2]; l < first[g % 2 + 1]; l++)
                    b += 4.0 * (double)pm_gpt_layer_params(&c.model, l);
                pm->stage = b > pm->stage ? b : pm->stage;
                if (dev < 0 || dev == g) pm->mine -= 4 * b;
                if (pm_pipe_is_root(pp)) pm->arena[g] = (double)in.arena[g];
            }
        }
    if (!st && params) st = pm_pipe_gather(pp, PM_SLAB_PARAMS, params, err); /* collective */
    pm_pipe_destroy(pp);
done:
    pm_plan_free(&pl);
    pm_sched_free(&s);
    return st;
}

/* Every rank: the pipe under MPI with sums and gathers in one message per
 * stage (the default chunk) and in chunks of 100 and 4096 floats; the root
 * then checks the three bitwise equal and equal to the same pipe on
 * threads, and that what each rank allocated beyond its slabs and arena
 * grew far less with 20 layers than the stages did (2 -> 20: about 10
 * times): no transport buffer is stage-sized. */
static int probe_pipe(pm_tp *tp) {
    static float a[3][1 << 18], t[1 << 18];
    pipe_mem m2 = {0}, m20 = {0};
    size_t chunks[3] = {0, 100, 4096};
    pm_err err = {{0}};
    int dev = tp->dev;
    for (int k = 0; k < 3; k++)
        if (pipe_run(2, dev, chunks[k], a[k], k == 2 ? &m2 : NULL, &err))
            return printf("rank %d: %s\n", dev, err.msg), 3;
    if (pipe_run(20, dev, 4096, NULL, &m20, &err)) return printf("rank %d: %s\n", dev, err.msg), 3;
    double mine[2] = {m2.mine, m20.mine};
    pm_tp_req r;
    if (dev) {
        if (pm_tp_isend(tp, 0, 30, mine, sizeof mine, &r) || pm_tp_wait(tp, &r))
            return probe_fail(tp, "send");
        printf("rank %d ok\n", dev);
        return 0;
    }
    if (pipe_run(2, -1, 0, t, NULL, &err)) return printf("rank 0 threads: %s\n", err.msg), 3;
    for (int k = 1; k < 3; k++)
        if (memcmp(a[0], a[k], sizeof a[0]))
            return printf("rank 0: chunks of %zu floats differ from one message\n", chunks[k]), 3;
    if (memcmp(a[0], t, sizeof t)) return printf("rank 0: MPI and threads differ\n"), 3;
    for (int g = 0; g < 4; g++) {
        if (g && (pm_tp_irecv(tp, g, 30, mine, sizeof mine, &r) || pm_tp_wait(tp, &r)))
            return probe_fail(tp, "recv");
        double e2 = mine[0] - m2.arena[g], e20 = mine[1] - m20.arena[g];
        if (!(m20.stage > 8 * m2.stage) || e20 - e2 >= (m20.stage - m2.stage) / 4)
            return printf("rank %d: the largest stage grew from %.0f to %.0f bytes and the "
                          "other allocations from %.0f to %.0f\n", g, m2.stage, m20.stage, e2,
                          e20), 3;
    }
    printf("rank 0 ok\n");
    return 0;
}

static int probe_main(int argc, char **argv) {
    int rank, size, rc = 2;
    pm_err err = {{0}};
    if (argc < 2 || pm_mpi_init(&rank, &size, &err)) {
        printf("probe: %s\n", err.msg);
        return 2;
    }
    const char *c = argv[1];
    int quiet = !strcmp(c, "silent") || !strcmp(c, "ssilent");
    double timeout = quiet ? (rank == 0 ? 1 : 30) : 30;
    pm_tp_mpi *w;
    if (pm_tp_mpi_create(&w, 8, 1 << 20, 16, timeout, &err)) {
        printf("probe: %s\n", err.msg);
    } else {
        pm_tp *tp = pm_tp_mpi_endpoint(w);
        rc = !strcmp(c, "exact")     ? probe_exact(tp)
             : !strcmp(c, "sync")    ? probe_sync(tp)
             : !strcmp(c, "long")    ? probe_length(tp, 100, 0)
             : !strcmp(c, "short")   ? probe_length(tp, 30, 0)
             : !strcmp(c, "slong")   ? probe_length(tp, 100, 1)
             : !strcmp(c, "sshort")  ? probe_length(tp, 30, 1)
             : !strcmp(c, "silent")  ? probe_silent(tp, 0)
             : !strcmp(c, "ssilent") ? probe_silent(tp, 1)
             : !strcmp(c, "sabort")  ? probe_abort(tp, 1)
             : !strcmp(c, "pipe")    ? probe_pipe(tp)
                                     : probe_abort(tp, 0);
        fflush(stdout);
        pm_tp_mpi_destroy(w);
    }
    pm_mpi_finalize();
    return rc;
}

/* ---- the suite ------------------------------------------------------------------ */

static char self[512];

/* mpirun; leak checks off (OpenMPI's components keep allocations past
 * MPI_Finalize, and are unloaded by then, so LeakSanitizer cannot tell them
 * from ours by module); its time limit is a hang guard. */
#define MPIRUN "ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --oversubscribe --quiet -np"

static void test_transport_contract(void **state) {
    (void)state;
    static char out[8192];
    assert_int_equal(chk_output(out, sizeof out, MPIRUN " 2 %s exact", self), 0);
    assert_int_equal(chk_count(out, " ok\n"), 2);
    /* a rendezvous send is not done before its receive is posted */
    assert_int_equal(chk_output(out, sizeof out, MPIRUN " 2 %s sync", self), 0);
    assert_int_equal(chk_count(out, " ok\n"), 2);
    for (int rdv = 0; rdv < 2; rdv++) { /* copied, then rendezvous sends */
        /* a longer message than the receive: MPI truncation, one line */
        assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s %slong", self,
                                 rdv ? "s" : ""), 0);
        assert_non_null(strstr(out, "rank 0 sent a message longer than the 50 bytes rank 1 "
                                    "posted for tag 7"));
        assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s %sshort", self,
                                 rdv ? "s" : ""), 0);
        assert_non_null(strstr(out, "rank 0 sent 30 bytes with tag 7 to rank 1, which posted a "
                                    "receive of 50 bytes"));
        /* the rank that sent is stopped by the receiver's error, not left waiting */
        assert_non_null(strstr(out, "rank 0 wait:"));
    }
    /* rank 1, whose own wait is 30 s, is woken by rank 0's error: its line
     * is rank 0's (its own would say "rank 1 waited 30 s") */
    assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s silent", self), 0);
    assert_non_null(strstr(out, "rank 0 waited 1 s for a message with tag 9 from rank 1"));
    assert_non_null(strstr(out, "rank 1 wait: rank 0 waited 1 s for a message with tag 9"));
    assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s ssilent", self), 0);
    assert_non_null(strstr(out, "rank 0 waited 1 s for rank 1 to receive its message with "
                                "tag 9"));
    assert_non_null(strstr(out, "rank 1 wait: rank 0 waited 1 s for rank 1 to receive"));
    assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s abort", self), 0);
    assert_non_null(strstr(out, "rank 0 wait: rank 1: boom"));
    /* a rank blocked on a rendezvous send is woken by the abort too */
    assert_int_not_equal(chk_output(out, sizeof out, MPIRUN " 2 %s sabort", self), 0);
    assert_non_null(strstr(out, "rank 0 wait: rank 1: boom"));
}

/* Data parallelism's gradient sums and the parameter gather in chunks
 * (probe_pipe on 4 ranks): bitwise one message per stage, bitwise the
 * threads, and no stage-sized buffer on any rank. */
static void test_pipe_chunks(void **state) {
    (void)state;
    static char out[16384];
    assert_int_equal(chk_output(out, sizeof out, MPIRUN " 4 %s pipe", self), 0);
    assert_int_equal(chk_count(out, " ok\n"), 4);
}

/* Built without MPI: the transport says so, in one line naming the fix. */
static void test_built_without(void **state) {
    (void)state;
    int rank, size;
    pm_err err = {{0}};
    assert_int_equal(pm_mpi_init(&rank, &size, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "this pipemem was built without MPI"));
}

int main(int argc, char **argv) {
    if (pm_mpi_launched()) return probe_main(argc, argv);
    if (!pm_mpi_built()) {
        const struct CMUnitTest none[] = {cmocka_unit_test(test_built_without)};
        return cmocka_run_group_tests(none, NULL, NULL);
    }
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transport_contract),
        cmocka_unit_test(test_pipe_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
