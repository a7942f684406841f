/* pm_util.h: status codes, one-line error messages and assertions shared by
 * every pipemem module.
 *
 * Library functions never print or exit: they return a pm_status and, when
 * the caller passes a pm_err, fill it with one line naming what is wrong and,
 * where it helps, how to fix it. Only the CLI turns that line into output. */
#ifndef PM_UTIL_H
#define PM_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PM_OK = 0,
    PM_ERR_NOMEM,     /* an allocation failed */
    PM_ERR_IO,        /* a file could not be read or written */
    PM_ERR_FORMAT,    /* malformed input text, CSV, block or binary file */
    PM_ERR_ARG,       /* a parameter out of range or not fitting the request */
    PM_ERR_INVALID,   /* a schedule that breaks a rule (completeness, order) */
    PM_ERR_DEADLOCK,  /* a schedule no device can make progress on */
    PM_ERR_MEMLIMIT,  /* a schedule or model over its memory limit */
    PM_ERR_NUMERIC,   /* NaN or infinity where a number must be finite */
    PM_ERR_TRANSPORT, /* a message between devices failed */
    PM_STATUS_COUNT
} pm_status;

const char *pm_status_str(pm_status st);

/* One line of error text, owned by the caller (usually on its stack). */
typedef struct {
    char msg[512];
} pm_err;

/* Formats msg into err (if err is not NULL) and returns st, so a failing
 * function can `return pm_errf(err, PM_ERR_ARG, "p must be >= 1");`. */
pm_status pm_errf(pm_err *err, pm_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Broken invariants are bugs, not errors: report file:line and abort. */
void pm_abort(const char *file, int line, const char *cond) __attribute__((noreturn));
#define PM_ASSERT(c) ((c) ? (void)0 : pm_abort(__FILE__, __LINE__, #c))

/* Multiplication and addition of sizes that report overflow instead of
 * wrapping; return 0 on overflow. */
int pm_size_mul(size_t a, size_t b, size_t *out);
int pm_size_add(size_t a, size_t b, size_t *out);

/* Monotonic clock in seconds. */
double pm_now(void);

/* Reads a whole file into a NUL-terminated malloc'd buffer (caller frees). */
pm_status pm_read_file(const char *path, char **out, size_t *len, pm_err *err);

/* Little-endian encoding for the binary file formats (token files,
 * checkpoints), independent of the host's byte order. */
static inline void pm_put_u32(uint8_t *p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static inline void pm_put_u64(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static inline uint32_t pm_get_u32(const uint8_t *p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) x |= (uint32_t)p[i] << (8 * i);
    return x;
}
static inline uint64_t pm_get_u64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}

#endif
