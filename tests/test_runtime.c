/* test_runtime.c: the pipeline runtime.
 *   transport: order per (peer, tag) both ways, copy semantics, length
 *     mismatch is a sticky error, abort wakes a blocked device; rendezvous
 *     sends (issend): done only after the receive, read at receive time (no
 *     copy), ordered with copied sends, the same errors, an abort wakes a
 *     sender and drops its message, a timeout names device, peer and tag;
 *   arena: exact live/peak accounting, first fit reuse, overflow; the offline
 *     plan never overlaps two blocks alive at once, replays, and a wrong
 *     plan is refused;
 *   pipeline: for every generated schedule kind and P in 1, 2, 4, 8, two steps
 *     give losses, gradient norms and parameters bitwise equal to the
 *     single-device trainer (pm_trainer_step_batch) with the same config;
 *     measured peak activation bytes equal the simulator's prediction on
 *     every device, and 1F1B's device 0 holds min(p, m) stage-0 microbatches
 *     (independent of the simulator); placed by the memory rule (another
 *     cut, less memory on its fullest device) 1F1B at P = 4 trains the
 *     same bits; a schedule read back from CSV trains
 *     identically; gathered parameters and moments scattered into another
 *     pipe (other schedule and P) continue training exactly; split weight
 *     passes out of microbatch order are relabelled, fused ones refused;
 *     injected failures (error, NaN, a token outside the vocabulary, arena
 *     overflow) stop every device with
 *     one message naming device, stage, microbatch and pass, and stay sticky
 *     (`train --pp` through the command line: test_cli_train.c). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "pipemem/pm_runtime.h"
#include "schedule/sched.h"
#include "util/alloc.h"
#include "model/passes.h"
#include "train/trainer.h"
#include "plan/arena.h"
#include "runtime/transport.h"
#include "runtime/pipe.h"

/* ---- transport --------------------------------------------------------------- */

static void test_tp_order_and_copy(void **state) {
    (void)state;
    pm_tp_threads *w;
    pm_err err;
    assert_int_equal(pm_tp_threads_create(&w, 2, 5, &err), PM_OK);
    pm_tp *a = pm_tp_threads_endpoint(w, 0), *b = pm_tp_threads_endpoint(w, 1);
    int32_t v, got[3] = {0};
    pm_tp_req sr[4], rr[4];
    /* sent before the receives are posted: buffered copies, in order */
    for (int i = 0; i < 3; i++) {
        v = 10 + i;
        assert_int_equal(pm_tp_isend(a, 1, 7, &v, sizeof v, &sr[i]), PM_OK);
        v = -1; /* the copy was taken at isend: changing v must not matter */
    }
    /* a different tag does not overtake or get matched */
    int32_t other = 99, o_got = 0;
    assert_int_equal(pm_tp_isend(a, 1, 8, &other, sizeof other, &sr[3]), PM_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pm_tp_irecv(b, 0, 7, &got[i], sizeof got[i], &rr[i]), PM_OK);
        assert_int_equal(pm_tp_wait(b, &rr[i]), PM_OK);
    }
    assert_int_equal(got[0], 10);
    assert_int_equal(got[1], 11);
    assert_int_equal(got[2], 12);
    /* posted first, then sent: copied straight in, also in order */
    int32_t late[2] = {0, 0};
    assert_int_equal(pm_tp_irecv(b, 0, 9, &late[0], sizeof late[0], &rr[0]), PM_OK);
    assert_int_equal(pm_tp_irecv(b, 0, 9, &late[1], sizeof late[1], &rr[1]), PM_OK);
    int done = 1;
    assert_int_equal(pm_tp_test(b, &rr[0], &done), PM_OK);
    assert_int_equal(done, 0);
    v = 1;
    assert_int_equal(pm_tp_isend(a, 1, 9, &v, sizeof v, &sr[0]), PM_OK);
    v = 2;
    assert_int_equal(pm_tp_isend(a, 1, 9, &v, sizeof v, &sr[1]), PM_OK);
    assert_int_equal(pm_tp_wait(b, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_wait(b, &rr[1]), PM_OK);
    assert_int_equal(late[0], 1);
    assert_int_equal(late[1], 2);
    assert_int_equal(pm_tp_irecv(b, 0, 8, &o_got, sizeof o_got, &rr[2]), PM_OK);
    assert_int_equal(pm_tp_wait(b, &rr[2]), PM_OK);
    assert_int_equal(o_got, 99);
    /* a device sends to itself through the same path */
    v = 5;
    int32_t self = 0;
    assert_int_equal(pm_tp_isend(a, 0, 1, &v, sizeof v, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_irecv(a, 0, 1, &self, sizeof self, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_wait(a, &rr[0]), PM_OK);
    assert_int_equal(self, 5);
    /* a length mismatch fails the whole world, stickily */
    int64_t big = 0;
    assert_int_equal(pm_tp_isend(a, 1, 3, &v, sizeof v, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_irecv(b, 0, 3, &big, sizeof big, &rr[0]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_isend(a, 1, 4, &v, sizeof v, &sr[0]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_status(a, &err), PM_ERR_TRANSPORT);
    assert_non_null(strstr(err.msg, "posted a receive of 8 bytes"));
    pm_tp_threads_destroy(w);
}

typedef struct {
    pm_tp *tp;
    pm_status st;
} waiter;

static void *wait_forever(void *arg) {
    waiter *x = arg;
    int32_t v;
    pm_tp_req r;
    x->st = pm_tp_irecv(x->tp, 0, 42, &v, sizeof v, &r);
    if (!x->st) x->st = pm_tp_wait(x->tp, &r);
    return NULL;
}

static void test_tp_abort_wakes(void **state) {
    (void)state;
    pm_tp_threads *w;
    pm_err err;
    assert_int_equal(pm_tp_threads_create(&w, 3, 30, &err), PM_OK);
    waiter x[2] = {{pm_tp_threads_endpoint(w, 1), PM_OK}, {pm_tp_threads_endpoint(w, 2), PM_OK}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, wait_forever, &x[i]), 0);
    pm_tp_abort(pm_tp_threads_endpoint(w, 0), PM_ERR_NUMERIC, "device 0 failed");
    pm_tp_abort(pm_tp_threads_endpoint(w, 1), PM_ERR_ARG, "second abort loses");
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(x[i].st, PM_ERR_NUMERIC);
    }
    assert_int_equal(pm_tp_status(pm_tp_threads_endpoint(w, 2), &err), PM_ERR_NUMERIC);
    assert_string_equal(err.msg, "device 0 failed");
    pm_tp_threads_reset(w);
    assert_int_equal(pm_tp_status(pm_tp_threads_endpoint(w, 2), &err), PM_OK);
    pm_tp_threads_destroy(w);
}

/* Rendezvous sends (issend), on one thread so every step is deterministic:
 * not done before the matching receive, done after; the receive reads the
 * sender's buffer when it runs. The contract says the caller keeps the
 * buffer unchanged until the send is done; this test changes it on purpose
 * between issend and irecv, and the receiver getting the changed bytes
 * proves no copy was taken. */
static void test_tp_issend(void **state) {
    (void)state;
    pm_tp_threads *w;
    pm_err err;
    assert_int_equal(pm_tp_threads_create(&w, 2, 5, &err), PM_OK);
    pm_tp *a = pm_tp_threads_endpoint(w, 0), *b = pm_tp_threads_endpoint(w, 1);
    pm_tp_req sr[4], rr[4];
    int done = 1;
    /* queued: not done until the receive; the receive reads buf then */
    int32_t buf[3] = {1, 2, 3}, got[3] = {0};
    assert_int_equal(pm_tp_issend(a, 1, 7, buf, sizeof buf, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_test(a, &sr[0], &done), PM_OK);
    assert_int_equal(done, 0);
    buf[1] = 20;
    assert_int_equal(pm_tp_irecv(b, 0, 7, got, sizeof got, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_test(b, &rr[0], &done), PM_OK);
    assert_int_equal(done, 1);
    assert_int_equal(got[1], 20); /* the changed byte: read at receive time */
    assert_int_equal(got[0] + got[2], 4);
    assert_int_equal(pm_tp_test(a, &sr[0], &done), PM_OK);
    assert_int_equal(done, 1);
    assert_int_equal(pm_tp_wait(a, &sr[0]), PM_OK);
    /* posted first: copied straight in, done at once */
    int32_t v = 5, one = 0;
    assert_int_equal(pm_tp_irecv(b, 0, 8, &one, sizeof one, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_issend(a, 1, 8, &v, sizeof v, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_test(a, &sr[0], &done), PM_OK);
    assert_int_equal(done, 1);
    assert_int_equal(one, 5);
    assert_int_equal(pm_tp_wait(b, &rr[0]), PM_OK);
    /* one (peer, tag), isend and issend interleaved, all queued before any
     * receive: received in the order sent; each issend done only once its
     * own receive ran */
    int32_t x[4] = {10, 11, 12, 13}, y[4] = {0};
    for (int i = 0; i < 4; i++)
        assert_int_equal((i % 2 ? pm_tp_issend : pm_tp_isend)(a, 1, 9, &x[i], sizeof x[i], &sr[i]),
                         PM_OK);
    x[0] = -1; /* the isend's copy was taken: no effect */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pm_tp_irecv(b, 0, 9, &y[i], sizeof y[i], &rr[i]), PM_OK);
        assert_int_equal(pm_tp_wait(b, &rr[i]), PM_OK);
        assert_int_equal(y[i], 10 + i);
        if (i == 1) {
            assert_int_equal(pm_tp_test(a, &sr[1], &done), PM_OK);
            assert_int_equal(done, 1);
            assert_int_equal(pm_tp_test(a, &sr[3], &done), PM_OK);
            assert_int_equal(done, 0);
        }
    }
    assert_int_equal(pm_tp_wait(a, &sr[3]), PM_OK);
    /* to itself: the same device's receive completes it */
    int32_t self = 0;
    v = 6;
    assert_int_equal(pm_tp_issend(a, 0, 1, &v, sizeof v, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_irecv(a, 0, 1, &self, sizeof self, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_wait(a, &sr[0]), PM_OK);
    assert_int_equal(self, 6);
    /* a length mismatch at the receive: sticky, naming both sizes; the
     * waiting sender gets the error */
    int64_t big = 0;
    assert_int_equal(pm_tp_issend(a, 1, 3, &v, sizeof v, &sr[0]), PM_OK);
    assert_int_equal(pm_tp_irecv(b, 0, 3, &big, sizeof big, &rr[0]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_wait(a, &sr[0]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_issend(a, 1, 4, &v, sizeof v, &sr[1]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_status(b, &err), PM_ERR_TRANSPORT);
    assert_string_equal(err.msg, "device 0 sent 4 bytes with tag 3 to device 1, which posted a "
                                 "receive of 8 bytes");
    /* and at the send, when the receive was posted first */
    pm_tp_threads_reset(w);
    assert_int_equal(pm_tp_irecv(b, 0, 3, &big, sizeof big, &rr[0]), PM_OK);
    assert_int_equal(pm_tp_issend(a, 1, 3, &v, sizeof v, &sr[0]), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_status(a, &err), PM_ERR_TRANSPORT);
    assert_string_equal(err.msg, "device 0 sent 4 bytes with tag 3 to device 1, which posted a "
                                 "receive of 8 bytes");
    pm_tp_threads_destroy(w);
}

typedef struct {
    pm_tp *tp;
    int peer;
    atomic_int queued; /* the issend returned */
    pm_status st;
} ssender;

/* Sends from its own stack by rendezvous and waits: returns (the buffer
 * gone) only when received or aborted. */
static void *ssend_and_wait(void *arg) {
    ssender *x = arg;
    int32_t v[64];
    for (int i = 0; i < 64; i++) v[i] = i;
    pm_tp_req r;
    x->st = pm_tp_issend(x->tp, x->peer, 5, v, sizeof v, &r);
    atomic_store(&x->queued, 1);
    if (!x->st) x->st = pm_tp_wait(x->tp, &r);
    return NULL;
}

/* A device blocked on a rendezvous send nobody receives: an abort wakes it
 * with the abort's error, and the message is gone with its buffer (a later
 * receive on the same tag does not match it); a wait past the timeout
 * fails naming the device, the peer and the tag. */
static void test_tp_issend_abort(void **state) {
    (void)state;
    pm_tp_threads *w;
    pm_err err;
    assert_int_equal(pm_tp_threads_create(&w, 2, 30, &err), PM_OK);
    ssender x = {pm_tp_threads_endpoint(w, 0), 1, 0, PM_OK};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ssend_and_wait, &x), 0);
    while (!atomic_load(&x.queued)) sched_yield(); /* queued: the abort must unlink it */
    pm_tp_abort(pm_tp_threads_endpoint(w, 1), PM_ERR_NUMERIC, "device 1 failed");
    pthread_join(th, NULL);
    assert_int_equal(x.st, PM_ERR_NUMERIC);
    pm_tp_threads_reset(w);
    int32_t got[64], v = 0;
    pm_tp_req rr, sr;
    int done = 1;
    assert_int_equal(pm_tp_irecv(pm_tp_threads_endpoint(w, 1), 0, 5, got, sizeof got, &rr), PM_OK);
    assert_int_equal(pm_tp_test(pm_tp_threads_endpoint(w, 1), &rr, &done), PM_OK);
    assert_int_equal(done, 0);
    pm_tp_threads_destroy(w);
    /* nobody receives: the sender's wait times out naming it all */
    assert_int_equal(pm_tp_threads_create(&w, 2, 1, &err), PM_OK);
    assert_int_equal(pm_tp_issend(pm_tp_threads_endpoint(w, 0), 1, 6, &v, sizeof v, &sr), PM_OK);
    assert_int_equal(pm_tp_wait(pm_tp_threads_endpoint(w, 0), &sr), PM_ERR_TRANSPORT);
    assert_int_equal(pm_tp_status(pm_tp_threads_endpoint(w, 1), &err), PM_ERR_TRANSPORT);
    assert_non_null(strstr(err.msg, "device 0 waited 1 s for device 1 to receive its message "
                                    "with tag 6"));
    pm_tp_threads_destroy(w);
}

/* ---- arena ---------------------------------------------------------------------- */

static void test_arena(void **state) {
    (void)state;
    pm_arena a;
    pm_err err;
    assert_int_equal(pm_arena_init(&a, 1024, 8, &err), PM_OK);
    size_t o1, o2, o3, o4;
    assert_int_equal(pm_arena_alloc(&a, 100, &o1), PM_OK); /* footprint 128 */
    assert_int_equal(pm_arena_alloc(&a, 64, &o2), PM_OK);
    assert_int_equal(o1, 0);
    assert_int_equal(o2, 128);
    assert_int_equal(a.live, 164);
    pm_arena_shrink(&a, o1, 10); /* footprint 64: a 64-byte gap opens */
    assert_int_equal(a.live, 74);
    assert_int_equal(a.peak, 164);
    assert_int_equal(pm_arena_alloc(&a, 64, &o3), PM_OK);
    assert_int_equal(o3, 64); /* first fit: the gap */
    assert_int_equal(pm_arena_alloc(&a, 2000, &o4), PM_ERR_MEMLIMIT);
    assert_int_equal(pm_arena_alloc(&a, 832, &o4), PM_OK); /* exactly the rest */
    assert_int_equal(o4, 192);
    assert_int_equal(a.high, 1024);
    char *p = pm_arena_ptr(&a, o4);
    memset(p, 1, 832); /* inside the slab (ASan checks) */
    pm_arena_release(&a, o2);
    pm_arena_release(&a, o1);
    pm_arena_release(&a, o3);
    pm_arena_release(&a, o4);
    assert_int_equal(a.live, 0);
    assert_int_equal(a.peak, 10 + 64 + 64 + 832);
    pm_arena_free(&a);
    pm_arena_free(&a); /* twice is safe */
}

/* Random lives: the plan never puts two blocks alive at once on the same
 * bytes (prefix over [alloc, free), suffix over [alloc, shrink)), and a
 * planned arena replays the lives without an error. */
static size_t r64(size_t n) { return (n + 63) / 64 * 64; }

static void test_arena_plan(void **state) {
    (void)state;
    enum { N = 80 };
    pm_arena_life l[N];
    uint64_t x = 12345;
    int64_t t = 0;
    /* events: allocate in order, shrink/release at random later times */
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t size = 64 + (x >> 33) % 5000, w = 1 + (x >> 20) % size;
        l[i] = (pm_arena_life){size, w, t++, -1, -1};
    }
    /* shrink and free times after every alloc, interleaved pseudo-randomly */
    int64_t ev[2 * N];
    int ne = 0;
    for (int i = 0; i < N; i++) ev[ne++] = i, ev[ne++] = N + i;
    for (int i = ne - 1; i > 0; i--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((x >> 33) % (uint64_t)(i + 1));
        int64_t tmp = ev[i];
        ev[i] = ev[j], ev[j] = tmp;
    }
    /* a shrink must precede its free: fix order by swapping labels */
    int seen[N] = {0};
    for (int e = 0; e < ne; e++) {
        int b = (int)(ev[e] % N);
        if (!seen[b]++) l[b].t_shrink = t++;
        else l[b].t_free = t++;
    }
    size_t off[N], cap;
    pm_err err;
    assert_int_equal(pm_arena_plan(l, N, off, &cap, &err), PM_OK);
    for (int i = 0; i < N; i++) {
        assert_true(off[i] % 64 == 0 && off[i] + r64(l[i].size) <= cap);
        for (int j = 0; j < i; j++) {
            /* rectangles: (lo, hi, t0, t1) */
            size_t a[2][4] = {{off[i], off[i] + r64(l[i].size_w), (size_t)l[i].t_alloc, (size_t)l[i].t_free},
                              {off[i] + r64(l[i].size_w), off[i] + r64(l[i].size), (size_t)l[i].t_alloc, (size_t)l[i].t_shrink}};
            size_t b[2][4] = {{off[j], off[j] + r64(l[j].size_w), (size_t)l[j].t_alloc, (size_t)l[j].t_free},
                              {off[j] + r64(l[j].size_w), off[j] + r64(l[j].size), (size_t)l[j].t_alloc, (size_t)l[j].t_shrink}};
            for (int u = 0; u < 2; u++)
                for (int v = 0; v < 2; v++) {
                    int tover = a[u][2] < b[v][3] && b[v][2] < a[u][3];
                    int sover = a[u][0] < b[v][1] && b[v][0] < a[u][1];
                    if (tover && sover) fail_msg("blocks %d and %d overlap", i, j);
                }
        }
    }
    /* replay on a planned arena: every allocation lands, nothing overlaps */
    pm_arena a;
    assert_int_equal(pm_arena_init(&a, cap, N, &err), PM_OK);
    assert_int_equal(pm_arena_use_plan(&a, off, N, &err), PM_OK);
    size_t at[N];
    int k = 0;
    for (int64_t now = 0; now < t; now++) {
        for (int i = 0; i < N; i++) {
            if (l[i].t_alloc == now) {
                assert_int_equal(pm_arena_alloc(&a, l[i].size, &at[i]), PM_OK);
                assert_int_equal(at[i], off[k++]);
            }
            if (l[i].t_shrink == now) pm_arena_shrink(&a, at[i], l[i].size_w);
            if (l[i].t_free == now) pm_arena_release(&a, at[i]);
        }
    }
    assert_int_equal(a.live, 0);
    /* a plan pointing into a live block is refused, not obeyed */
    pm_arena_begin(&a);
    size_t bad[2] = {0, 0}, o;
    assert_int_equal(pm_arena_use_plan(&a, bad, 2, &err), PM_OK);
    assert_int_equal(pm_arena_alloc(&a, 64, &o), PM_OK);
    assert_int_equal(pm_arena_alloc(&a, 64, &o), PM_ERR_MEMLIMIT);
    pm_arena_free(&a);
}

/* ---- pipeline ----------------------------------------------------------------- */

#define NSTEPS 2
#define TINY_M 8
static uint8_t text[3000];

static pm_train_cfg tiny(int layers) {
    pm_train_cfg c = {.model = {64, 8, 16, 2, layers}, .batch = TINY_M, .micro = TINY_M,
                      .seed = 11};
    pm_optim_defaults(&c.opt, 4);
    c.opt.lr = 1e-2f;
    c.opt.grad_clip = 0.5f; /* small, so clipping is exercised */
    return c;
}

typedef struct {
    double loss[NSTEPS], norm[NSTEPS];
    float *params; /* malloc'd */
} run_result;

static void batch_of(int step, int32_t *inp, int32_t *tgt, const pm_train_cfg *c) {
    int T = c->model.ctx;
    for (int b = 0; b < c->batch; b++)
        for (int t = 0; t < T; t++) {
            size_t at = (size_t)((step * 7 + b * 13 + t) % (int)(sizeof text - 1));
            inp[b * T + t] = text[at] % 64;
            tgt[b * T + t] = text[at + 1] % 64;
        }
}

static void reference(const pm_train_cfg *c, run_result *r) {
    pm_tokens toks = PM_TOKENS_BYTES(text, sizeof text);
    pm_trainer t;
    pm_err err;
    pm_blas_threads(1);
    assert_int_equal(pm_trainer_init(&t, c, &toks, 0, &err), PM_OK);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    for (int s = 0; s < NSTEPS; s++) {
        pm_step_info si;
        batch_of(s, inp, tgt, c);
        assert_int_equal(pm_trainer_step_batch(&t, inp, tgt, &si, &err), PM_OK);
        r->loss[s] = si.loss, r->norm[s] = si.grad_norm;
    }
    r->params = malloc(t.n_params * sizeof(float));
    memcpy(r->params, t.params, t.n_params * sizeof(float));
    pm_trainer_free(&t);
}

/* A pipe running schedule s for c with dp replicas (FLOPs placed by
 * rule): plans, creates (the pipe keeps a copy of the plan) and frees the
 * plan. */
static pm_status make_pipe_rule(pm_pipe **pp, const pm_train_cfg *c, const pm_sched *s, int dp,
                                pm_cut_rule rule, const pm_pipe_opts *o, pm_err *err) {
    pm_plan pl;
    pm_plan_req rq = {.sched = s, .dp = dp, .cut = rule};
    *pp = NULL;
    pm_status st = pm_plan_make(&pl, c, &rq, err);
    if (st) return st;
    st = pm_pipe_create(pp, &pl, o, err);
    pm_plan_free(&pl);
    return st;
}

static pm_status make_pipe(pm_pipe **pp, const pm_train_cfg *c, const pm_sched *s, int dp,
                           const pm_pipe_opts *o, pm_err *err) {
    return make_pipe_rule(pp, c, s, dp, PM_CUT_TIME, o, err);
}

/* Trains NSTEPS on schedule s with dp replicas, the gradient sums in
 * messages of `chunk` floats (0: the default), placed by rule; checks
 * memory on every step. */
static void run_pipe_dpc(const pm_train_cfg *c, const pm_sched *s, int dp, size_t chunk,
                         pm_cut_rule rule, run_result *r) {
    pm_pipe *pp;
    pm_err err = {{0}};
    pm_pipe_opts o = {.chunk_floats = chunk};
    pm_status st = make_pipe_rule(&pp, c, s, dp, rule, &o, &err);
    if (st) fail_msg("%s p=%d: %s", s->kind, s->p, err.msg);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    size_t peak0 = 0; /* device 0's measured peak, last step */
    for (int k = 0; k < NSTEPS; k++) {
        pm_pipe_info in;
        batch_of(k, inp, tgt, c);
        st = pm_pipe_step(pp, inp, tgt, &in, &err);
        if (st) fail_msg("%s p=%d step %d: %s", s->kind, s->p, k, err.msg);
        r->loss[k] = in.loss, r->norm[k] = in.grad_norm;
        peak0 = in.peak[0];
        for (int d = 0; d < pm_pipe_devices(pp) * dp; d++) {
            if (in.peak[d] != in.pred_peak[d])
                fail_msg("%s p=%d device %d: measured peak %zu != predicted %zu", s->kind, s->p,
                         d, in.peak[d], in.pred_peak[d]);
            assert_true(in.peak[d] > 0 && in.peak[d] <= in.arena[d]);
        }
        assert_true(in.makespan_ms > 0 && in.pred_makespan_ms > 0);
        assert_true(in.bubble >= 0 && in.bubble < 1);
    }
    if (!strcmp(s->kind, "1f1b")) {
        /* 1F1B's device 0 holds min(p, m) forwards of stage 0 at its peak,
         * each the sum of its layers' saved bytes (from the model itself) */
        double mf0 = 0;
        const int *first = pm_pipe_stage_first(pp);
        for (int l = first[0]; l < first[1]; l++) {
            pm_gpt_sizes z;
            assert_int_equal(pm_gpt_layer_sizes(&c->model, l, c->batch / c->micro, c->model.ctx, &z, NULL), PM_OK);
            mf0 += (double)z.saved;
        }
        int held = s->p < s->m ? s->p : s->m;
        assert_true((double)peak0 == held * mf0);
    }
    if (!strcmp(s->kind, "1f1b-r")) {
        /* recomputed, stage 0 keeps nothing (its tokens are in the batch):
         * device 0 peaks at one microbatch's activation, while a backward
         * rebuilds it; device 1 keeps min(p - 1, m) inputs of one
         * activation tensor (mbsz T C floats) under its own rebuilt one */
        const int *first = pm_pipe_stage_first(pp);
        double mf[2] = {0, 0};
        for (int st1 = 0; st1 < 2 && st1 < s->p; st1++)
            for (int l = first[st1]; l < first[st1 + 1]; l++) {
                pm_gpt_sizes z;
                assert_int_equal(pm_gpt_layer_sizes(&c->model, l, c->batch / c->micro,
                                                    c->model.ctx, &z, NULL), PM_OK);
                mf[st1] += (double)z.saved;
            }
        assert_true((double)peak0 == mf[0]);
        if (s->p > 1) {
            int held = s->p - 1 < s->m ? s->p - 1 : s->m;
            double in = (double)(c->batch / c->micro) * c->model.ctx * c->model.dim * 4;
            assert_true((double)pm_pipe_predicted_peak(pp)[1] == held * in + mf[1]);
        }
    }
    size_t n = pm_gpt_num_params(&c->model);
    r->params = malloc(n * sizeof(float));
    assert_int_equal(pm_pipe_gather(pp, PM_SLAB_PARAMS, r->params, NULL), PM_OK);
    pm_pipe_destroy(pp);
}

static void run_pipe_dp(const pm_train_cfg *c, const pm_sched *s, int dp, run_result *r) {
    run_pipe_dpc(c, s, dp, 0, PM_CUT_TIME, r);
}

static void run_pipe(const pm_train_cfg *c, const pm_sched *s, run_result *r) {
    run_pipe_dp(c, s, 1, r);
}

static void expect_same(const pm_train_cfg *c, const run_result *ref, const run_result *got,
                        const char *what) {
    for (int k = 0; k < NSTEPS; k++) {
        if (memcmp(&ref->loss[k], &got->loss[k], sizeof(double)))
            fail_msg("%s: step %d loss %.9g != reference %.9g", what, k, got->loss[k],
                     ref->loss[k]);
        if (memcmp(&ref->norm[k], &got->norm[k], sizeof(double)))
            fail_msg("%s: step %d grad norm %.17g != reference %.17g", what, k, got->norm[k],
                     ref->norm[k]);
    }
    size_t n = pm_gpt_num_params(&c->model);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&ref->params[i], &got->params[i], sizeof(float)))
            fail_msg("%s: parameter %zu is %.9g, reference %.9g", what, i, got->params[i],
                     ref->params[i]);
}

static void gen_rec(pm_sched *s, const char *kind, int p, int m, int rec) {
    pm_sched_req req = {.p = p, .m = m, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT,
                        .recompute = rec};
    const pm_sched_kind *k = pm_sched_kind_find(kind);
    if (!strcmp(kind, "auto-v")) req.mem_limit = 1.0;
    if (rec && k->tier >= PM_TIER_GREEDY) req.mem_limit = 2.0; /* no default with it */
    if (!strcmp(kind, "interleaved")) req.v = 2;
    pm_err err;
    if (pm_sched_generate(s, kind, &req, &err)) fail_msg("%s p=%d m=%d: %s", kind, p, m, err.msg);
}

static void gen(pm_sched *s, const char *kind, int p, int m) { gen_rec(s, kind, p, m, 0); }

/* Every kind at each P in ps against one single-device reference, and
 * each recomputed too if rec. */
static int exact_for(int layers, const int *ps, int nps, int rec) {
    pm_train_cfg c = tiny(layers);
    run_result ref;
    reference(&c, &ref);
    /* the reference must move: otherwise equality would prove little */
    assert_true(ref.loss[1] < ref.loss[0]);
    int nk, runs = 0;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    for (int k = 0; k < nk; k++)
        for (int pi = 0; pi < nps * (rec ? 2 : 1); pi++) {
            if (TINY_M < kinds[k].min_m(ps[pi % nps], 2)) continue; /* dualpipev: m >= 2p */
            pm_sched s;
            gen_rec(&s, kinds[k].name, ps[pi % nps], TINY_M, pi >= nps);
            run_result got;
            run_pipe(&c, &s, &got);
            char what[96];
            snprintf(what, sizeof what, "%s p=%d", s.kind, s.p);
            expect_same(&c, &ref, &got, what);
            free(got.params);
            pm_sched_free(&s);
            runs++;
        }
    free(ref.params);
    return runs;
}

/* The memory rule (pm_plan_req.placement): on 4 devices under 1F1B its
 * fullest device holds no more, as the rule counts memory (here less, by
 * another cut), than the time rule's, and it trains bitwise as one device
 * (the run also checks device 0's peak against min(p, m) stage-0
 * forwards of the cut it got). */
static void test_memory_placement(void **state) {
    (void)state;
    pm_train_cfg c = tiny(6);
    run_result ref, got;
    reference(&c, &ref);
    pm_sched s;
    gen(&s, "1f1b", 4, TINY_M);
    double most[PM_CUT_RULES];
    int first[PM_CUT_RULES][5];
    for (int r = 0; r < PM_CUT_RULES; r++) {
        pm_plan pl;
        pm_plan_req rq = {.sched = &s, .cut = (pm_cut_rule)r};
        pm_err err = {{0}};
        if (pm_plan_make(&pl, &c, &rq, &err)) fail_msg("%s", err.msg);
        double t[4], m[4];
        assert_int_equal(pm_place_shares(&c.model, 1, c.model.ctx, &pl.sched, NULL, pl.first, t,
                                         m, &err), PM_OK);
        most[r] = fmax(fmax(m[0], m[1]), fmax(m[2], m[3]));
        memcpy(first[r], pl.first, sizeof first[r]);
        pm_plan_free(&pl);
    }
    assert_true(most[PM_CUT_MEMORY] < most[PM_CUT_TIME]);
    assert_true(memcmp(first[0], first[1], sizeof first[0]));
    run_pipe_dpc(&c, &s, 1, 0, PM_CUT_MEMORY, &got);
    expect_same(&c, &ref, &got, "1f1b p=4 placed by memory");
    free(got.params);
    free(ref.params);
    pm_sched_free(&s);
}

static void test_exact_every_schedule(void **state) {
    (void)state;
    int small[] = {1, 2, 4}, eight[] = {8};
    int nk;
    pm_sched_kinds(&nk);
    assert_true(nk >= 9);
    /* 8 layers: enough for 2p = 8 stages at p = 4; 16 for p = 8 */
    /* every kind also recomputed at p = 1, 2, 4; at p = 8 all but those
     * that need more than TINY_M microbatches (DualPipeV's 2p) */
    const pm_sched_kind *kinds = pm_sched_kinds(NULL);
    int short8 = 0;
    for (int k = 0; k < nk; k++) short8 += TINY_M < kinds[k].min_m(8, 2);
    assert_true(short8 <= 1);
    assert_int_equal(exact_for(6, small, 3, 1), 6 * nk);
    assert_int_equal(exact_for(14, eight, 1, 0), nk - short8);
}

/* Data parallelism: D replicas each on TINY_M / D microbatches. For one D,
 * every schedule gives bitwise the same run, and so does any chunk size of
 * the gradient sums (stages of a few thousand floats in messages of 1000
 * or 7: several per stage, the last one short); against one device only
 * the order of the gradient sum differs, so losses, norms and parameters
 * agree to float rounding (a lost replica or a wrong scale would be off by
 * far more). D = 4 takes the middle replicas' path of the sum. */
static void test_data_parallel(void **state) {
    (void)state;
    pm_train_cfg c = tiny(6);
    run_result ref;
    reference(&c, &ref);
    size_t n = pm_gpt_num_params(&c.model);
    const char *kinds[] = {"1f1b", "zb-h1", "v-half", "zb-v"};
    int dps[] = {2, 4}, devs[] = {2, 1};
    for (int t = 0; t < 2; t++) {
        run_result first = {0};
        for (int k = 0; k < 4; k++) {
            if (devs[t] == 1 && k > 0) break; /* one device: one schedule */
            pm_sched s;
            gen(&s, kinds[k], devs[t], TINY_M / dps[t]);
            run_result got;
            run_pipe_dp(&c, &s, dps[t], &got);
            char what[64];
            snprintf(what, sizeof what, "%s p=%d dp=%d", kinds[k], devs[t], dps[t]);
            if (k) expect_same(&c, &first, &got, what);
            for (int ci = 0; ci < 2 && k == 0; ci++) {
                size_t chunks[2] = {1000, 7};
                run_result part;
                run_pipe_dpc(&c, &s, dps[t], chunks[ci], PM_CUT_TIME, &part);
                char w2[96];
                snprintf(w2, sizeof w2, "%s, sums in chunks of %zu floats", what, chunks[ci]);
                expect_same(&c, &got, &part, w2);
                free(part.params);
            }
            for (int j = 0; j < NSTEPS; j++) {
                assert_true(fabs(got.loss[j] - ref.loss[j]) <= 1e-6 * fabs(ref.loss[j]));
                assert_true(fabs(got.norm[j] - ref.norm[j]) <= 1e-5 * ref.norm[j]);
            }
            for (size_t i = 0; i < n; i++)
                if (fabsf(got.params[i] - ref.params[i]) > 1e-5f)
                    fail_msg("%s: parameter %zu is %.9g, one device %.9g", what, i,
                             got.params[i], ref.params[i]);
            if (k) free(got.params);
            else first = got;
            pm_sched_free(&s);
        }
        free(first.params);
    }
    /* the measured timeline draws each stage's sum on its device's row,
     * starting after that stage's last weight pass there */
    pm_sched s;
    pm_pipe *pp;
    pm_err err;
    gen(&s, "zb-h1", 2, TINY_M / 2);
    assert_int_equal(make_pipe(&pp, &c, &s, 2, NULL, &err), PM_OK);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    batch_of(0, inp, tgt, &c);
    assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_OK);
    pm_sim tl;
    assert_int_equal(pm_pipe_timeline(pp, &tl, &err), PM_OK);
    const pm_sched *ps = pm_pipe_schedule(pp);
    for (int k = 0; k < ps->S; k++) {
        int d = pm_sched_stage_device(ps, k);
        double last_w = 0;
        for (int64_t i = 0; i < ps->len[d]; i++)
            if (pm_sched_dev(ps, d)[i].stage == k && pm_sched_dev(ps, d)[i].kind == PM_PASS_W)
                last_w = tl.end[(int64_t)d * ps->cap + i];
        assert_true(tl.red_start[k] >= last_w && tl.red_end[k] >= tl.red_start[k]);
    }
    pm_sim_free(&tl);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(pm_pipe_write_svg(pp, f, "dp", &err), PM_OK);
    fclose(f);
    int bars = 0;
    for (char *q = strstr(buf, "gradient sum of stage"); q; q = strstr(q + 1, "gradient sum of stage"))
        bars++;
    assert_int_equal(bars, ps->S);
    free(buf);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
    /* D must divide the microbatches; the schedule runs one replica's share */
    gen(&s, "1f1b", 2, 3);
    pm_train_cfg c3 = c;
    c3.micro = 8, c3.batch = 8;
    assert_int_equal(make_pipe(&pp, &c3, &s, 3, NULL, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "the replicas (3) must divide the microbatches (8)"));
    assert_int_equal(make_pipe(&pp, &c3, &s, 2, NULL, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "is for 2 devices and 3 microbatches, but the plan has 2 "
                                    "devices and 4 microbatches per replica"));
    pm_sched_free(&s);
    free(ref.params);
}

/* Parameters and moments gathered from one pipe and scattered into another
 * (other schedule, other P) continue training exactly: 2 steps on zb-h1 at
 * p = 2, then 1 step on v-min at p = 4, equals 3 single-device steps. */
static void test_gather_scatter_resume(void **state) {
    (void)state;
    pm_train_cfg c = tiny(6);
    size_t n = pm_gpt_num_params(&c.model);
    pm_tokens toks = PM_TOKENS_BYTES(text, sizeof text);
    pm_trainer t;
    pm_err err;
    pm_blas_threads(1);
    assert_int_equal(pm_trainer_init(&t, &c, &toks, 0, &err), PM_OK);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    double ref_loss = 0;
    for (int k = 0; k < 3; k++) {
        pm_step_info si;
        batch_of(k, inp, tgt, &c);
        assert_int_equal(pm_trainer_step_batch(&t, inp, tgt, &si, &err), PM_OK);
        ref_loss = si.loss;
    }
    pm_sched s1, s2;
    gen(&s1, "zb-h1", 2, TINY_M);
    gen(&s2, "v-min", 4, TINY_M);
    pm_pipe *a, *b;
    assert_int_equal(make_pipe(&a, &c, &s1, 1, NULL, &err), PM_OK);
    assert_int_equal(make_pipe(&b, &c, &s2, 1, NULL, &err), PM_OK);
    for (int k = 0; k < 2; k++) {
        batch_of(k, inp, tgt, &c);
        assert_int_equal(pm_pipe_step(a, inp, tgt, NULL, &err), PM_OK);
    }
    float *sl = malloc(3 * n * sizeof(float));
    assert_int_equal(pm_pipe_gather(a, PM_SLAB_PARAMS, sl, NULL), PM_OK);
    assert_int_equal(pm_pipe_gather(a, PM_SLAB_ADAM_M, sl + n, NULL), PM_OK);
    assert_int_equal(pm_pipe_gather(a, PM_SLAB_ADAM_V, sl + 2 * n, NULL), PM_OK);
    pm_pipe_scatter(b, sl, sl + n, sl + 2 * n);
    pm_pipe_set_steps_done(b, pm_pipe_steps_done(a));
    pm_pipe_info in;
    batch_of(2, inp, tgt, &c);
    assert_int_equal(pm_pipe_step(b, inp, tgt, &in, &err), PM_OK);
    assert_memory_equal(&in.loss, &ref_loss, sizeof(double));
    assert_int_equal(pm_pipe_gather(b, PM_SLAB_PARAMS, sl, NULL), PM_OK);
    assert_int_equal(pm_pipe_gather(b, PM_SLAB_ADAM_M, sl + n, NULL), PM_OK);
    assert_int_equal(pm_pipe_gather(b, PM_SLAB_ADAM_V, sl + 2 * n, NULL), PM_OK);
    assert_memory_equal(sl, t.params, n * sizeof(float));
    assert_memory_equal(sl + n, t.m, n * sizeof(float));
    assert_memory_equal(sl + 2 * n, t.v, n * sizeof(float));
    free(sl);
    pm_pipe_destroy(a);
    pm_pipe_destroy(b);
    pm_sched_free(&s1);
    pm_sched_free(&s2);
    pm_trainer_free(&t);
}

static void test_csv_schedule(void **state) {
    (void)state;
    pm_train_cfg c = tiny(4);
    pm_sched s, back;
    gen(&s, "v-half", 2, TINY_M);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(pm_sched_write_csv(f, &s), PM_OK);
    fclose(f);
    pm_err err;
    assert_int_equal(pm_sched_parse_csv(&back, buf, len, &err), PM_OK);
    free(buf);
    run_result a, b;
    run_pipe(&c, &s, &a);
    run_pipe(&c, &back, &b);
    expect_same(&c, &a, &b, "v-half from CSV");
    free(a.params);
    free(b.params);
    pm_sched_free(&s);
    pm_sched_free(&back);
}

static void test_w_order_refused(void **state) {
    (void)state;
    pm_train_cfg c = tiny(1);
    c.batch = c.micro = 2;
    pm_sched s;
    pm_err err;
    assert_int_equal(pm_sched_init(&s, "test", PM_PLACE_SINGLE, 1, 2, 1, &err), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_B, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_B, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_W, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_W, 0, 0);
    pm_pipe *pp;
    /* split W passes of a stage are interchangeable: relabelled into order */
    assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_OK);
    assert_int_equal(pm_pipe_w_relabeled(pp), 2);
    assert_int_equal(pm_sched_dev(pm_pipe_schedule(pp), 0)[4].mb, 0);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
    /* fused BW passes out of order cannot be: refused */
    assert_int_equal(pm_sched_init(&s, "test", PM_PLACE_SINGLE, 1, 2, 1, &err), PM_OK);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 0);
    pm_sched_push(&s, 0, PM_PASS_F, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 1);
    pm_sched_push(&s, 0, PM_PASS_BW, 0, 0);
    assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "microbatch order"));
    pm_sched_free(&s);
    /* too many stages for the layers */
    gen(&s, "v-half", 4, TINY_M);
    c = tiny(2);
    assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "layers"));
    pm_sched_free(&s);
}

/* NSTEPS steps with dp replicas, ZeRO-1 or not (sums in chunks of
 * `chunk` floats): the losses, norms, parameters and both moments. */
typedef struct {
    double loss[NSTEPS], norm[NSTEPS];
    float *slab[3]; /* parameters, m, v (gathered) */
} zero_run;

static void run_zero(const pm_train_cfg *c, const pm_sched *s, int dp, int zero, size_t chunk,
                     zero_run *r) {
    pm_plan pl;
    pm_plan_req rq = {.sched = s, .dp = dp, .zero = zero};
    pm_pipe_opts o = {.chunk_floats = chunk};
    pm_err err = {{0}};
    pm_pipe *pp;
    if (pm_plan_make(&pl, c, &rq, &err) || pm_pipe_create(&pp, &pl, &o, &err))
        fail_msg("%s dp=%d zero=%d: %s", s->kind, dp, zero, err.msg);
    size_t n = pm_gpt_num_params(&c->model), slice = 0;
    for (int g = 0; g < pl.nd; g++) { /* ZeRO-1: each device keeps 1/dp of its moments */
        size_t state = pl.dev[g].bytes[PM_BYTES_PARAMS], mom = pl.dev[g].bytes[PM_BYTES_MOMENTS];
        assert_true(zero ? mom < 2 * state : mom == 2 * state);
        /* (a test's tiny chunks need a request per chunk: not what the plan counts) */
        if (!chunk && (double)pm_pipe_allocated(pp)[g] > (double)pl.dev[g].total * 1.02 + 65536)
            fail_msg("%s dp=%d zero=%d device %d: allocated %lld, planned %zu", s->kind, dp, zero,
                     g, (long long)pm_pipe_allocated(pp)[g], pl.dev[g].total);
        slice += mom / 8;
    }
    assert_int_equal(slice, zero ? n : n * (size_t)dp); /* the slices cover every parameter once */
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    for (int k = 0; k < NSTEPS; k++) {
        pm_pipe_info in;
        batch_of(k, inp, tgt, c);
        if (pm_pipe_step(pp, inp, tgt, &in, &err)) fail_msg("%s: %s", s->kind, err.msg);
        r->loss[k] = in.loss, r->norm[k] = in.grad_norm;
    }
    for (int k = 0; k < 3; k++) {
        r->slab[k] = malloc(n * sizeof(float));
        assert_int_equal(pm_pipe_gather(pp, (pm_slab)k, r->slab[k], &err), PM_OK);
    }
    pm_pipe_destroy(pp);
    pm_plan_free(&pl);
}

/* ZeRO-1 (each replica keeps and updates only its slice of every stage's
 * AdamW moments, the totals reduce-scattered and the updated parameters
 * all-gathered) trains bitwise as without it: losses, norms, parameters
 * and moments, for even and uneven slices, chunks that cut the slices, and
 * single and V placements. */
static void test_zero(void **state) {
    (void)state;
    struct { const char *kind; int p, dp; size_t chunk; } cases[] = {
        {"zb-h1", 2, 2, 0}, {"v-half", 2, 2, 7}, {"1f1b", 1, 3, 100}, {"1f1b", 2, 4, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pm_train_cfg c = tiny(6);
        if (cases[k].dp == 3) c.batch = c.micro = 6; /* two microbatches a replica */
        size_t n = pm_gpt_num_params(&c.model);
        pm_sched s;
        gen(&s, cases[k].kind, cases[k].p, c.micro / cases[k].dp);
        zero_run a, b;
        run_zero(&c, &s, cases[k].dp, 0, 0, &a);
        run_zero(&c, &s, cases[k].dp, 1, cases[k].chunk, &b);
        for (int j = 0; j < NSTEPS; j++)
            if (memcmp(&a.loss[j], &b.loss[j], sizeof(double)) ||
                memcmp(&a.norm[j], &b.norm[j], sizeof(double)))
                fail_msg("%s dp=%d step %d: zero 1 loss %.17g norm %.17g, zero 0 %.17g %.17g",
                         s.kind, cases[k].dp, j, b.loss[j], b.norm[j], a.loss[j], a.norm[j]);
        for (int q = 0; q < 3; q++) {
            for (size_t i = 0; i < n; i++)
                if (memcmp(&a.slab[q][i], &b.slab[q][i], sizeof(float)))
                    fail_msg("%s dp=%d: slab %d element %zu: zero 1 %.9g, zero 0 %.9g", s.kind,
                             cases[k].dp, q, i, b.slab[q][i], a.slab[q][i]);
            free(a.slab[q]);
            free(b.slab[q]);
        }
        pm_sched_free(&s);
    }
}

/* A save's metadata must describe the pipe: another model, or a step count
 * the pipe has not reached, is refused before anything is written. */
static void test_save_checks_meta(void **state) {
    (void)state;
    pm_train_cfg c = tiny(6);
    pm_sched s;
    gen(&s, "1f1b", 2, TINY_M);
    pm_pipe *pp;
    pm_err err = {{0}};
    assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_OK);
    const char *path = "/tmp/pm_meta_never_written.ckpt";
    pm_ckpt_meta meta = {.cfg = c, .step = 0};
    meta.cfg.model.layers = 7;
    assert_int_equal(pm_pipe_save(pp, path, &meta, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "is not this pipeline's"));
    meta.cfg = c, meta.step = 3;
    assert_int_equal(pm_pipe_save(pp, path, &meta, &err), PM_ERR_ARG);
    assert_int_not_equal(access(path, F_OK), 0);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
}

/* Evaluation through the pipeline: every microbatch's loss bitwise what
 * pm_gpt_forward gives on one device with the same parameters (after a
 * step, so they are not the initial ones), for single, loop and V
 * placements, recomputation, head parts, data parallelism and short rounds
 * (n < dp * m, n = 0). */
static void test_eval_through_pipe(void **state) {
    (void)state;
    struct { const char *kind; int p, dp, rec, parts; } cases[] = {
        {"1f1b", 2, 1, 0, 1}, {"v-half", 2, 1, 0, 1}, {"interleaved", 2, 1, 0, 1},
        {"zb-v", 4, 1, 0, 1}, {"1f1b", 2, 2, 0, 1}, {"v-min", 2, 1, 1, 1}, {"1f1b", 3, 1, 0, 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pm_train_cfg c = tiny(6);
        c.model.head_parts = cases[k].parts;
        if (cases[k].parts > 1) c.model.vocab = 8200; /* two groups of 4096 rows */
        pm_sched s;
        gen_rec(&s, cases[k].kind, cases[k].p, TINY_M / cases[k].dp, cases[k].rec);
        pm_pipe *pp;
        pm_err err = {{0}};
        if (make_pipe(&pp, &c, &s, cases[k].dp, NULL, &err)) fail_msg("%s: %s", s.kind, err.msg);
        int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
        batch_of(0, inp, tgt, &c);
        assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_OK);
        size_t np = pm_gpt_num_params(&c.model);
        float *params = malloc(np * sizeof *params), losses[TINY_M];
        assert_int_equal(pm_pipe_gather(pp, PM_SLAB_PARAMS, params, &err), PM_OK);
        void *work = malloc(pm_gpt_work_bytes(&c.model, 1, c.model.ctx));
        batch_of(1, inp, tgt, &c);
        for (int n = TINY_M; n >= 0; n -= 3) {
            assert_int_equal(pm_pipe_eval(pp, inp, tgt, n, losses, &err), PM_OK);
            for (int i = 0; i < n; i++) {
                size_t at = (size_t)i * (size_t)c.model.ctx;
                float want = pm_gpt_forward(&c.model, 1, c.model.ctx, params, inp + at, tgt + at,
                                            work);
                if (memcmp(&want, &losses[i], sizeof want))
                    fail_msg("%s p=%d dp=%d: microbatch %d of %d: %.9g, one device %.9g",
                             s.kind, cases[k].p, cases[k].dp, i, n, losses[i], want);
            }
        }
        /* a step after evaluating still trains as before (nothing was left behind) */
        assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_OK);
        free(work);
        free(params);
        pm_pipe_destroy(pp);
        pm_sched_free(&s);
    }
}

/* Sampling through the pipeline: a forward-only plan (parameters alone:
 * no gradients or moments planned or allocated) gives, for any length T,
 * the next-token probabilities pm_gpt_forward gives on one device, bit for
 * bit; it refuses to train. */
static void test_forward_only(void **state) {
    (void)state;
    pm_train_cfg c = tiny(6);
    c.batch = c.micro = 1;
    size_t np = pm_gpt_num_params(&c.model);
    float *params = malloc(np * sizeof *params), *probs = malloc(64 * sizeof(float));
    pm_gpt_init(&c.model, 99, params); /* not the pipe's own initialisation */
    void *work = malloc(pm_gpt_work_bytes(&c.model, 1, c.model.ctx));
    const char *kinds[] = {"1f1b", "v-half"};
    for (int k = 0; k < 2; k++) {
        pm_plan pl;
        pm_plan_req rq = {.p = 2, .kind = kinds[k], .forward_only = 1};
        pm_err err = {{0}};
        if (pm_plan_make(&pl, &c, &rq, &err)) fail_msg("%s", err.msg);
        for (int g = 0; g < pl.nd; g++)
            assert_true(pl.dev[g].bytes[PM_BYTES_GRADS] == 0 &&
                        pl.dev[g].bytes[PM_BYTES_MOMENTS] == 0);
        pm_pipe *pp;
        assert_int_equal(pm_pipe_create(&pp, &pl, NULL, &err), PM_OK);
        for (int g = 0; g < pl.nd; g++) /* parameters and bookkeeping, not 4 slabs */
                assert_true((double)pm_pipe_allocated(pp)[g] <= (double)pl.dev[g].total * 1.02 + 65536);
        pm_pipe_scatter(pp, params, NULL, NULL);
        int32_t tok[8] = {3, 1, 4, 1, 5, 9, 2, 6};
        for (int T = 1; T <= c.model.ctx; T += 3) {
            assert_int_equal(pm_pipe_forward(pp, tok, T, probs, &err), PM_OK);
            pm_gpt_forward(&c.model, 1, T, params, tok, NULL, work);
            float want[64];
            pm_gpt_work_probs_row(&c.model, 1, T, params, work, (size_t)T - 1, want);
            if (memcmp(want, probs, 64 * sizeof(float)))
                fail_msg("%s: T = %d: the pipeline's probabilities differ from one device's",
                         kinds[k], T);
        }
        assert_int_equal(pm_pipe_step(pp, tok, tok, NULL, &err), PM_ERR_ARG);
        assert_non_null(strstr(err.msg, "forward passes only"));
        /* and it holds no moments: a checkpoint of it would not load */
        pm_ckpt_meta meta = {.cfg = c, .step = 0};
        assert_int_equal(pm_pipe_save(pp, "/tmp/pm_never_written.ckpt", &meta, &err), PM_ERR_ARG);
        assert_non_null(strstr(err.msg, "cannot save"));
        assert_int_not_equal(access("/tmp/pm_never_written.ckpt", F_OK), 0);
        pm_pipe_destroy(pp);
        pm_plan_free(&pl);
    }
    free(work);
    free(probs);
    free(params);
}

/* Each device allocates what its plan says and no more: the allocation
 * hook's count per device (state, arena, workspace, transport buffers and
 * its small tables) is at least the plan's big buffers and at most the
 * plan's total plus 2% and 64 KiB of bookkeeping; a device that held a
 * whole-model copy (4 slabs of every parameter) would be far over. And the
 * caller's own thread allocates only tables through plan, create, steps and
 * an evaluation: under 5% of one device's planned bytes. */
static void test_allocations_follow_plan(void **state) {
    (void)state;
    struct { const char *kind; int p, dp; } cases[] = {{"1f1b", 4, 1}, {"v-half", 2, 1},
                                                      {"zb-h1", 2, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pm_train_cfg c = tiny(8);
        c.model.dim = 64, c.model.heads = 4; /* state well above the tables */
        pm_sched s;
        gen(&s, cases[k].kind, cases[k].p, TINY_M / cases[k].dp);
        pm_plan pl;
        pm_plan_req rq = {.sched = &s, .dp = cases[k].dp};
        pm_err err = {{0}};
        int64_t host = 0, *was = pm_alloc_account(&host);
        assert_int_equal(pm_plan_make(&pl, &c, &rq, &err), PM_OK);
        pm_pipe *pp;
        assert_int_equal(pm_pipe_create(&pp, &pl, NULL, &err), PM_OK);
        int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
        float losses[TINY_M];
        batch_of(0, inp, tgt, &c);
        for (int st = 0; st < 2; st++) assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_OK);
        assert_int_equal(pm_pipe_eval(pp, inp, tgt, TINY_M, losses, &err), PM_OK);
        pm_alloc_account(was);
        const int64_t *got = pm_pipe_allocated(pp);
        for (int g = 0; g < pl.nd; g++) {
            const pm_plan_dev *dv = &pl.dev[g];
            size_t big = dv->bytes[PM_BYTES_PARAMS] + dv->bytes[PM_BYTES_GRADS] +
                         dv->bytes[PM_BYTES_MOMENTS] + dv->bytes[PM_BYTES_ACTIVATIONS];
            if ((size_t)got[g] < big || (double)got[g] > (double)dv->total * 1.02 + 65536)
                fail_msg("%s p=%d dp=%d device %d: allocated %lld bytes, plan %zu (state and "
                         "arena %zu)", s.kind, cases[k].p, cases[k].dp, g, (long long)got[g],
                         dv->total, big);
        }
        if ((double)host > 0.05 * (double)pl.dev[0].total)
            fail_msg("%s: the caller's thread allocated %lld bytes (a device plans %zu)", s.kind,
                     (long long)host, pl.dev[0].total);
        pm_pipe_destroy(pp);
        pm_plan_free(&pl);
        pm_sched_free(&s);
    }
}

/* Runs one step with a fault; returns the status and the message. */
static pm_status faulty(const char *kind, int p, pm_pipe_opts *o, pm_err *err) {
    pm_train_cfg c = tiny(6);
    pm_sched s;
    gen(&s, kind, p, TINY_M);
    pm_pipe *pp;
    pm_status st = make_pipe(&pp, &c, &s, 1, o, err);
    assert_int_equal(st, PM_OK);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    batch_of(0, inp, tgt, &c);
    st = pm_pipe_step(pp, inp, tgt, NULL, err);
    /* sticky: the pipe refuses further steps with the same error */
    pm_err again;
    assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &again), st);
    if (st) assert_string_equal(again.msg, err->msg);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
    return st;
}

static void test_faults(void **state) {
    (void)state;
    pm_err err;
    /* an error in the middle of device 2's list */
    pm_pipe_opts o = {.fault_kind = PM_FAULT_FAIL, .fault_dev = 2, .fault_pass = 5, .wait_timeout_s = 20};
    assert_int_equal(faulty("1f1b", 4, &o, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "device 2, stage 2, microbatch"));
    assert_non_null(strstr(err.msg, "injected"));
    /* NaN in stage 0's first output reaches the head: the loss check fires
     * on the last stage's device (device 0 under the V placement), in B,
     * where a one-part head makes its logits and the loss */
    o = (pm_pipe_opts){.fault_kind = PM_FAULT_NAN, .fault_dev = 0, .fault_pass = 0, .wait_timeout_s = 20};
    assert_int_equal(faulty("v-half", 2, &o, &err), PM_ERR_NUMERIC);
    assert_non_null(strstr(err.msg, "device 0, stage 3, microbatch 0, pass B"));
    assert_non_null(strstr(err.msg, "loss"));
    /* bad input: a token outside the vocabulary in microbatch 3 */
    {
        pm_train_cfg c = tiny(6);
        pm_sched s;
        gen(&s, "zb-h1", 2, TINY_M);
        pm_pipe *pp;
        assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_OK);
        int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
        batch_of(0, inp, tgt, &c);
        inp[3 * 8 + 5] = 64; /* vocab is 64 */
        assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_ERR_ARG);
        assert_non_null(strstr(err.msg, "device 0, stage 0, microbatch 3, pass F"));
        assert_non_null(strstr(err.msg, "token id 64 at position 5"));
        pm_pipe_destroy(pp);
        pm_sched_free(&s);
    }
    /* an arena too small for the schedule */
    o = (pm_pipe_opts){.arena_cap = 4096, .wait_timeout_s = 20};
    assert_int_equal(faulty("zb-h1", 2, &o, &err), PM_ERR_MEMLIMIT);
    assert_non_null(strstr(err.msg, "arena full"));
    assert_non_null(strstr(err.msg, "pass F"));
}

static void test_timeline_outputs(void **state) {
    (void)state;
    pm_train_cfg c = tiny(4);
    pm_sched s;
    gen(&s, "zb-h1", 2, TINY_M);
    pm_pipe *pp;
    pm_err err;
    assert_int_equal(make_pipe(&pp, &c, &s, 1, NULL, &err), PM_OK);
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    batch_of(0, inp, tgt, &c);
    assert_int_equal(pm_pipe_step(pp, inp, tgt, NULL, &err), PM_OK);
    pm_sim t;
    assert_int_equal(pm_pipe_timeline(pp, &t, &err), PM_OK);
    /* each device's passes run in list order without overlap */
    for (int d = 0; d < 2; d++)
        for (int64_t i = 1; i < s.len[d]; i++) {
            int64_t k = d * s.cap + i;
            assert_true(t.start[k] >= t.end[k - 1] && t.end[k] >= t.start[k]);
        }
    /* parsed back: one event and one box per pass, at the measured times */
    char *buf = NULL, msg[512];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(pm_pipe_write_trace(pp, f, &err), PM_OK);
    fclose(f);
    if (chk_trace(buf, len, &s, &t, msg, sizeof msg)) fail_msg("%s", msg);
    free(buf);
    f = open_memstream(&buf, &len);
    assert_int_equal(pm_pipe_write_svg(pp, f, "zb-h1 measured", &err), PM_OK);
    fclose(f);
    if (chk_svg(buf, len, &s, &t, msg, sizeof msg)) fail_msg("%s", msg);
    free(buf);
    pm_sim_free(&t);
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
}

/* The forecast is made before a step from earlier warm steps only: none
 * for the first two (step 0 is cold and never used); for the third,
 * exactly the replay of the second (the one warm step so far). A warm step
 * allocates nothing (the simulations are sized at init), with data
 * parallelism too (its gradient sums in several chunks per stage). */
static void test_forecast_and_no_allocation(void **state) {
    (void)state;
    for (int dp = 1; dp <= 2; dp++) {
        pm_train_cfg c = tiny(4);
        pm_sched s;
        gen(&s, "zb-h1", 2, TINY_M / dp);
        pm_pipe *pp;
        pm_err err = {{0}};
        pm_pipe_opts o = {.chunk_floats = 1000};
        assert_int_equal(make_pipe(&pp, &c, &s, dp, &o, &err), PM_OK);
        int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
        pm_pipe_info in[5];
        for (int k = 0; k < 5; k++) {
            batch_of(k, inp, tgt, &c);
            int64_t calls = pm_alloc_calls();
            assert_int_equal(pm_pipe_step(pp, inp, tgt, &in[k], &err), PM_OK);
            if (k >= 1 && pm_alloc_calls() != calls)
                fail_msg("step %d made %lld allocations", k, (long long)(pm_alloc_calls() - calls));
        }
        assert_true(isnan(in[0].forecast_makespan_ms));
        assert_true(isnan(in[1].forecast_makespan_ms));
        assert_true(in[2].forecast_makespan_ms == in[1].pred_makespan_ms);
        for (int k = 2; k < 5; k++) {
            assert_true(in[k].forecast_makespan_ms > 0);
            assert_true(in[k].forecast_bubble >= 0 && in[k].forecast_bubble < 1);
        }
        pm_pipe_destroy(pp);
        pm_sched_free(&s);
    }
}

/* What a pipe allocates (pm_pipe_create and its first step) beyond the
 * bytes that must grow with the model: the parameter slabs (parameters,
 * gradients and two AdamW moments, 16 bytes per parameter per replica)
 * and the activation arenas (the step's report). *stage: the largest
 * stage's parameter bytes. */
static double extra_bytes(int layers, int dp, double *stage) {
    pm_train_cfg c = {.model = {64, 8, 64, 4, layers}, .batch = TINY_M, .micro = TINY_M,
                      .seed = 11};
    pm_optim_defaults(&c.opt, 4);
    pm_sched s;
    gen(&s, "1f1b", 2, TINY_M / dp);
    pm_pipe *pp;
    pm_err err = {{0}};
    pm_pipe_opts o = {.chunk_floats = 4096};
    int32_t inp[TINY_M * 8], tgt[TINY_M * 8];
    batch_of(0, inp, tgt, &c);
    pm_pipe_info in;
    int64_t b0 = pm_alloc_bytes();
    assert_int_equal(make_pipe(&pp, &c, &s, dp, &o, &err), PM_OK);
    assert_int_equal(pm_pipe_step(pp, inp, tgt, &in, &err), PM_OK);
    double extra = (double)(pm_alloc_bytes() - b0);
    extra -= 16.0 * (double)pm_gpt_num_params(&c.model) * dp;
    for (int g = 0; g < 2 * dp; g++) extra -= (double)in.arena[g];
    const int *first = pm_pipe_stage_first(pp);
    *stage = 0;
    for (int k = 0; k < pm_pipe_stages(pp); k++) {
        double b = 0;
        for (int l = first[k]; l < first[k + 1]; l++) b += 4.0 * pm_gpt_layer_params(&c.model, l);
        if (b > *stage) *stage = b;
    }
    pm_pipe_destroy(pp);
    pm_sched_free(&s);
    return extra;
}

/* No buffer grows with a stage: with 20 layers instead of 2 the stages
 * hold about 10 times the parameters, but what the pipe allocates beyond
 * the slabs and arenas grows only with its per-layer tables, far less
 * than one stage. A stage-sized buffer anywhere (a mailbox reserve for the
 * gradient sums, a receive buffer for a partial sum) would add at least
 * the stage's growth. */
static void test_no_stage_sized_buffers(void **state) {
    (void)state;
    for (int dp = 1; dp <= 2; dp++) {
        double s2, s20, e2 = extra_bytes(2, dp, &s2), e20 = extra_bytes(20, dp, &s20);
        assert_true(s20 > 8 * s2);
        if (e20 - e2 >= (s20 - s2) / 4)
            fail_msg("dp %d: the largest stage grew from %.0f to %.0f bytes and the other "
                     "allocations from %.0f to %.0f", dp, s2, s20, e2, e20);
    }
}

/* Every allocation of pipeline init failing in turn: one clean error, the
 * pipe zeroed, nothing leaked (ASan), and init works again afterwards. */
static void test_init_allocation_failures(void **state) {
    (void)state;
    pm_train_cfg c = tiny(4);
    pm_sched s;
    gen(&s, "v-half", 2, TINY_M);
    int64_t n;
    for (n = 1;; n++) {
        pm_pipe *pp;
        pm_err err = {{0}};
        pm_alloc_fail_at(n, 0);
        pm_status st = make_pipe(&pp, &c, &s, 1, NULL, &err);
        int fired = pm_alloc_failed();
        pm_alloc_fail_at(0, 0);
        if (!fired) {
            assert_int_equal(st, PM_OK);
            pm_pipe_destroy(pp);
            break;
        }
        if (st != PM_ERR_NOMEM) fail_msg("allocation %lld: status %d: %s", (long long)n, st, err.msg);
        assert_true(err.msg[0] != 0);
        assert_null(strchr(err.msg, '\n'));
        assert_null(pp);
    }
    assert_true(n > 20); /* the walk really went through init's allocations */
    pm_sched_free(&s);
    /* the single-device trainer likewise */
    static uint8_t tok[400];
    for (size_t i = 0; i < sizeof tok; i++) tok[i] = (uint8_t)(i * 7 % 64);
    pm_tokens toks = PM_TOKENS_BYTES(tok, sizeof tok);
    for (n = 1;; n++) {
        pm_trainer t;
        pm_err err = {{0}};
        pm_alloc_fail_at(n, 0);
        pm_status st = pm_trainer_init(&t, &c, &toks, 0, &err);
        int fired = pm_alloc_failed();
        pm_alloc_fail_at(0, 0);
        if (!fired) {
            assert_int_equal(st, PM_OK);
            pm_trainer_free(&t);
            break;
        }
        assert_int_equal(st, PM_ERR_NOMEM);
        assert_null(t.params);
    }
}

static int setup(void **state) {
    (void)state;
    const char *s = "pipelines keep every device busy; memory is the knob. ";
    size_t L = strlen(s);
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)s[(i * 7 + i / L) % L];
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tp_order_and_copy),
        cmocka_unit_test(test_tp_abort_wakes),
        cmocka_unit_test(test_tp_issend),
        cmocka_unit_test(test_tp_issend_abort),
        cmocka_unit_test(test_arena),
        cmocka_unit_test(test_arena_plan),
        cmocka_unit_test(test_exact_every_schedule),
        cmocka_unit_test(test_memory_placement),
        cmocka_unit_test(test_gather_scatter_resume),
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_zero),
        cmocka_unit_test(test_save_checks_meta),
        cmocka_unit_test(test_eval_through_pipe),
        cmocka_unit_test(test_allocations_follow_plan),
        cmocka_unit_test(test_forward_only),
        cmocka_unit_test(test_csv_schedule),
        cmocka_unit_test(test_w_order_refused),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_timeline_outputs),
        cmocka_unit_test(test_forecast_and_no_allocation),
        cmocka_unit_test(test_no_stage_sized_buffers),
        cmocka_unit_test(test_init_allocation_failures),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
