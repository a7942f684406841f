/* alloc.c: the library's allocator front (malloc, calloc, realloc, free)
 * with a fault-injection hook: a test makes the Nth allocation fail and
 * checks that the failure path is clean (SQLite's OOM tests).
 * The counters are atomics, so device threads may allocate concurrently;
 * with the hook off each call costs one relaxed increment. */
#define _DEFAULT_SOURCE /* madvise and MADV_HUGEPAGE, beyond POSIX */
#include "pipemem/pm_util.h"
#include "alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

static atomic_llong calls;     /* allocation calls so far */
static atomic_llong bytes;     /* bytes those calls asked for (successful or not) */
static atomic_llong fail_from; /* call number that fails first; 0 = never */
static atomic_int fail_sticky; /* later calls fail too */
static atomic_int failed;      /* the hook fired */
static _Thread_local int64_t *account; /* the calling thread's byte count, or NULL */

/* Counts the call and its bytes (also into the thread's account); 1 if the
 * fault hook makes it fail. */
static int should_fail(size_t size) {
    atomic_fetch_add_explicit(&bytes, (long long)size, memory_order_relaxed);
    if (account) *account += (int64_t)size;
    long long n = atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed) + 1;
    long long at = atomic_load_explicit(&fail_from, memory_order_relaxed);
    if (at == 0 || n < at) return 0;
    if (n > at && !atomic_load_explicit(&fail_sticky, memory_order_relaxed)) return 0;
    atomic_store(&failed, 1);
    return 1;
}

void *pm_malloc(size_t n) { return should_fail(n) ? NULL : malloc(n ? n : 1); }

void *pm_calloc(size_t count, size_t size) {
    size_t n = 0;
    pm_size_mul(count, size, &n); /* on overflow calloc fails: counted as 0 */
    if (should_fail(n)) return NULL;
    return count && size ? calloc(count, size) : calloc(1, 1);
}

void *pm_realloc(void *p, size_t n) { return should_fail(n) ? NULL : realloc(p, n ? n : 1); }

void *pm_aligned_alloc(size_t align, size_t n) {
    if (should_fail(n)) return NULL;
    if (!align || n > SIZE_MAX - align) return NULL; /* rounding up would wrap */
    size_t r = n ? (n + align - 1) / align * align : align; /* C11: a multiple of align */
    return aligned_alloc(align, r);
}

/* Transparent huge pages are only given to memory that asks (the usual
 * setting, "madvise"): 2 MiB pages make a gigabyte's first touch 512 times
 * fewer page faults (a GPT-2 small trainer's 3 GiB: 812 thousand faults,
 * seconds of start-up on a VM where each costs microseconds) and the
 * strided reads of matrix packing cheaper in the TLB. */
#define HUGE_PAGE ((size_t)2 << 20)

void *pm_alloc_big(size_t n) {
    int huge = n >= 2 * HUGE_PAGE;
    void *p = pm_aligned_alloc(huge ? HUGE_PAGE : 64, n); /* whole huge pages, or NULL */
#ifdef MADV_HUGEPAGE
    if (p && huge) /* advice: refused, 4 KiB pages serve */
        (void)madvise(p, (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE);
#endif
    return p;
}

void pm_free(void *p) { free(p); }

void pm_alloc_fail_at(int64_t n, int sticky) {
    atomic_store(&failed, 0);
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_from, n > 0 ? (long long)atomic_load(&calls) + n : 0);
}

int64_t pm_alloc_calls(void) { return (int64_t)atomic_load(&calls); }

int64_t pm_alloc_bytes(void) { return (int64_t)atomic_load(&bytes); }

int pm_alloc_failed(void) { return atomic_load(&failed); }

int64_t *pm_alloc_account(int64_t *acct) {
    int64_t *was = account;
    account = acct;
    return was;
}
