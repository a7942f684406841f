/* pool.c: the model's compute threads. Every parallel kernel is a list of
 * independent tasks 0..n-1 run by pm_par_run on the calling thread's pool.
 *
 * Threading model: pm_blas_threads(n) gives the CALLING thread a pool of
 * n - 1 persistent workers (created on first use, kept until the thread
 * changes its count or exits), and sets OpenBLAS to one thread process-wide:
 * all parallelism is ours, every cblas_sgemm runs single-threaded inside a
 * task. Pools are per thread (thread-local), so the device threads of a
 * pipeline each drive their own workers and never serialise on a shared
 * lock; the only process-wide state is OpenBLAS's thread count, always 1.
 *
 * Determinism: how work is cut into tasks depends only on the problem shape,
 * never on the thread count, and each task writes its own outputs; which
 * thread runs a task (tasks are claimed dynamically, which also keeps a
 * core stolen by another process from stalling the rest) changes nothing.
 * So results are bitwise the same for any n. If workers cannot be started,
 * the caller runs every task itself: same results, only slower.
 *
 * Protocol: one 64-bit atomic `ctl` = generation (24 bits) | ntasks (20)
 * | next task (20). The caller publishes fn/arg, then ctl = (gen+1, n, 0),
 * and wakes sleepers. Anyone claims task i by CAS (gen, n, i) -> (gen, n,
 * i+1), only while i < n, and counts it in `done` after running it; the
 * caller returns when done == n. The bound travels inside ctl, so a claim
 * can only succeed while its own job is unfinished, and the caller writes
 * the next job's fn/arg only after that: the fields a worker read before a
 * successful claim are that job's.
 * Idle workers spin briefly (kernel calls come back to back within a pass),
 * then sleep on a condition variable. */
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "model/internal.h"
#include "passes.h"

#define GEN(c) ((uint32_t)((c) >> 40))
#define NTASKS(c) ((size_t)((c) >> 20) & 0xFFFFF)
#define NEXT(c) ((size_t)(c) & 0xFFFFF)
#define MAX_TASKS ((size_t)1 << 20)
#define SPIN_WAIT 4000 /* pause iterations (~100-300 us) before sleeping */

typedef struct pm_cpool pm_cpool;
struct pm_cpool {
    int nworkers;              /* threads besides the owner */
    pthread_t th[PM_MAX_THREADS];
    pthread_mutex_t mu;        /* guards sleeping and the condition waits */
    pthread_cond_t cv_work;    /* workers wait here for a new generation */
    pthread_cond_t cv_done;    /* the owner waits here for done == ntasks */
    int sleepers;              /* workers in cv_work (under mu) */
    int owner_waiting;         /* owner in cv_done (under mu) */
    _Atomic uint64_t ctl;      /* gen << 40 | ntasks << 20 | next task */
    _Atomic(pm_task_fn) fn;    /* current job */
    _Atomic(const void *) arg;
    _Atomic size_t done;       /* tasks of the current job finished */
    _Atomic uint32_t busy;     /* slots in use by running tasks, a bit each */
    atomic_int quit;
};

typedef struct {
    pm_cpool *p;
} worker_arg;

static _Thread_local int tl_threads = 1;
static _Thread_local pm_cpool *tl_pool;
static _Thread_local int tl_pool_failed; /* creation failed for this count */
static _Thread_local int tl_in_task;     /* the owner is inside pm_par_run */
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The lowest slot no running task holds: with k tasks running it is below
 * k + 1, so a job of n tasks on t threads uses slots below min(n, t). */
static int slot_take(pm_cpool *p) {
    uint32_t b = atomic_load_explicit(&p->busy, memory_order_relaxed);
    for (;;) {
        int s = __builtin_ctz(~b);
        if (atomic_compare_exchange_weak_explicit(&p->busy, &b, b | 1u << s,
                                                  memory_order_acquire, memory_order_relaxed))
            return s;
    }
}

static void slot_give(pm_cpool *p, int s) {
    atomic_fetch_and_explicit(&p->busy, ~(1u << s), memory_order_release);
}

/* Claims and runs tasks of generation gen until none is left. Each task
 * holds a slot while it runs and gives it back before it counts as done,
 * so no slot is held when the owner starts the next job. */
static void run_tasks(pm_cpool *p, uint32_t gen) {
    uint64_t c = atomic_load_explicit(&p->ctl, memory_order_acquire);
    for (;;) {
        size_t i = NEXT(c), n = NTASKS(c);
        if (GEN(c) != gen || i >= n) return;
        pm_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        const void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        if (!atomic_compare_exchange_weak_explicit(&p->ctl, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* c now holds the current value */
        int slot = slot_take(p);
        fn(arg, i, slot);
        slot_give(p, slot);
        if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == n) {
            pthread_mutex_lock(&p->mu);
            if (p->owner_waiting) pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
        c = atomic_load_explicit(&p->ctl, memory_order_acquire);
    }
}

static void *worker_main(void *v) {
    tl_in_task = 1; /* tasks on workers never fan out again */
    worker_arg *wa = v;
    pm_cpool *p = wa->p;
    pm_free(wa);
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = GEN(atomic_load_explicit(&p->ctl, memory_order_acquire))) == seen &&
               !atomic_load_explicit(&p->quit, memory_order_relaxed)) {
            if (++spins < SPIN_WAIT) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            p->sleepers++;
            while (GEN(atomic_load(&p->ctl)) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv_work, &p->mu);
            p->sleepers--;
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = g;
        run_tasks(p, g);
    }
}

static void pool_destroy(pm_cpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    pm_free(p);
}

static void key_destructor(void *v) { pool_destroy(v); }
static void make_key(void) { (void)pthread_key_create(&pool_key, key_destructor); }

/* A pool with n - 1 workers, or NULL (then the caller runs everything). */
static pm_cpool *pool_create(int n) {
    pm_cpool *p = pm_calloc(1, sizeof *p);
    if (!p) return NULL;
    if (pthread_mutex_init(&p->mu, NULL)) {
        pm_free(p);
        return NULL;
    }
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->ctl, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->busy, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    for (int i = 0; i < n - 1; i++) {
        worker_arg *wa = pm_malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p};
        if (!wa || pthread_create(&p->th[i], NULL, worker_main, wa)) {
            pm_free(wa);
            break;
        }
        p->nworkers++;
    }
    if (p->nworkers == 0) {
        pool_destroy(p);
        return NULL;
    }
    return p;
}

static void drop_pool(void) {
    pool_destroy(tl_pool);
    tl_pool = NULL;
    tl_pool_failed = 0;
    pthread_once(&pool_once, make_key);
    (void)pthread_setspecific(pool_key, NULL);
}

void pm_blas_threads(int n) {
    n = n < 1 ? 1 : n > PM_MAX_THREADS ? PM_MAX_THREADS : n;
    /* every sgemm runs inside one of our tasks; set only when needed, since
     * device threads may call this concurrently */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    if (n != tl_threads) drop_pool();
    tl_threads = n;
}

int pm_blas_threads_get(void) { return tl_threads; }

/* Inside a task (on any thread) kernels see one thread: nested pm_par_run
 * calls run serially instead of re-entering the busy pool. */
int pm_par_threads(void) { return tl_in_task ? 1 : tl_threads; }

void pm_par_run(size_t ntasks, pm_task_fn fn, const void *arg) {
    PM_ASSERT(ntasks < MAX_TASKS);
    if (ntasks == 0) return;
    if (tl_threads > 1 && !tl_pool && !tl_pool_failed && ntasks > 1) {
        tl_pool = pool_create(tl_threads);
        tl_pool_failed = tl_pool == NULL;
        pthread_once(&pool_once, make_key);
        if (tl_pool) (void)pthread_setspecific(pool_key, tl_pool);
    }
    pm_cpool *p = tl_in_task ? NULL : tl_pool;
    int outer = !tl_in_task;
    tl_in_task = 1;
    if (!p || ntasks == 1) {
        for (size_t i = 0; i < ntasks; i++) fn(arg, i, 0);
        tl_in_task = !outer;
        return;
    }
    uint32_t gen = (GEN(atomic_load_explicit(&p->ctl, memory_order_relaxed)) + 1) & 0xFFFFFF;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->ctl, (uint64_t)gen << 40 | (uint64_t)ntasks << 20,
                          memory_order_release);
    if (p->sleepers) pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, gen);
    for (int spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != ntasks;) {
        if (++spins < SPIN_WAIT) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        p->owner_waiting = 1;
        while (atomic_load(&p->done) != ntasks) pthread_cond_wait(&p->cv_done, &p->mu);
        p->owner_waiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    tl_in_task = 0;
}

typedef struct {
    void (*fn)(const void *arg, size_t lo, size_t hi);
    const void *arg;
    size_t n, chunk;
} piece_job;

static void piece_task(const void *p, size_t i, int slot) {
    (void)slot;
    const piece_job *j = p;
    size_t lo = i * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    j->fn(j->arg, lo, hi);
}

void pm_gpt_par_for(size_t n, size_t chunk,
                    void (*fn)(const void *arg, size_t lo, size_t hi), const void *arg) {
    chunk = chunk < 1 ? 1 : chunk;
    if (pm_par_threads() == 1 || n <= chunk) {
        if (n) fn(arg, 0, n);
        return;
    }
    size_t tasks = (n + chunk - 1) / chunk;
    if (tasks >= MAX_TASKS) { /* keep the task count in range: bigger pieces */
        chunk = (n + MAX_TASKS - 2) / (MAX_TASKS - 1);
        tasks = (n + chunk - 1) / chunk;
    }
    piece_job j = {fn, arg, n, chunk};
    pm_par_run(tasks, piece_task, &j);
}
