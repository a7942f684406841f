/* alloc.h: the library's allocator beyond pm_malloc, pm_calloc and pm_free
 * (pm_util.h), private to the library (and its tests): growing and aligned
 * blocks, the test hooks that make the Nth allocation fail or count what
 * was asked for, a thread's allocation account, and the size arithmetic
 * that sizes allocations without wrapping (util.c). */
#ifndef PM_UTIL_ALLOC_H
#define PM_UTIL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *pm_realloc(void *p, size_t n);
/* align a power of two; n is rounded up to a multiple of it. */
void *pm_aligned_alloc(size_t align, size_t n);
/* A buffer of megabytes that lives for a whole run (parameters, arenas,
 * scratch): 64-byte aligned, from 4 MiB on in 2 MiB huge pages where the
 * kernel gives them. Freed with pm_free; counted and failed by the hooks
 * below like pm_aligned_alloc. */
void *pm_alloc_big(size_t n);

/* Test hook: the n-th call (n >= 1, counted from this call) of pm_malloc,
 * pm_calloc, pm_realloc, pm_aligned_alloc or pm_alloc_big returns NULL, and so does every later one while
 * `sticky` is set; n = 0 turns the hook off. Process-wide, thread-safe. */
void pm_alloc_fail_at(int64_t n, int sticky);
/* Allocation calls made since the process started (successful or not). */
int64_t pm_alloc_calls(void);
/* Bytes those calls asked for (a realloc counts its new size): tests bound
 * what a call allocates. */
int64_t pm_alloc_bytes(void);
/* 1 if the hook made at least one allocation fail since pm_alloc_fail_at. */
int pm_alloc_failed(void);
/* Accounting: while set, the bytes of every allocation the CALLING THREAD
 * makes through pm_malloc, pm_calloc, pm_realloc, pm_aligned_alloc and pm_alloc_big are
 * added to *acct (frees are not subtracted: a total, not a level). NULL
 * stops counting. Returns the account it replaces (to restore it after).
 * The runtime counts each device's allocations so; the tests compare them
 * with the plan. */
int64_t *pm_alloc_account(int64_t *acct);

/* Multiplication and addition of sizes that report overflow instead of
 * wrapping; return 0 on overflow. */
int pm_size_mul(size_t a, size_t b, size_t *out);
int pm_size_add(size_t a, size_t b, size_t *out);

#endif
