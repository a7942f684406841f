/* pm_util.h: status codes, one-line error messages and assertions shared by
 * every pipemem module.
 *
 * Library functions never print or exit: they return a pm_status and, when
 * the caller passes a pm_err, fill it with one line naming what is wrong and,
 * where it helps, how to fix it. Only the CLI turns that line into output.
 *
 * Arguments, in every public header. err may be NULL (the line is then
 * dropped), and every _free, _destroy and _abort takes NULL. A function
 * that returns a pm_status refuses, with PM_ERR_ARG naming the argument, a
 * NULL input (a path, a name, a text, data, a configuration or a request;
 * a NULL path of an output is standard output only where its comment says
 * so) and a number out of its range: NaN and negatives included, never
 * read as a default. The object a function works on or fills (its first
 * argument, and the pointers it writes results to) must not be NULL: that
 * is the caller's bug, not an input; functions that return no status say
 * what they do with NULL, or assert (PM_ASSERT), and the sanitizer build
 * (make asan) stops at any other NULL with its stack. */
#ifndef PM_UTIL_H
#define PM_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The library's version (the shared library's soname takes the major). */
#define PM_VERSION "0.1.0"
/* The version the library was built as (PM_VERSION of its build). */
const char *pm_version(void);

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

/* One line of error text, owned by the caller (usually on its stack). A
 * parameter is named as the caller set it: by its field in the struct the
 * caller passed or by its argument's name, bare where the name cannot be a
 * word of prose (mem_limit, micro, opt.lr, model.dim, device_mem), else
 * with its value (batch=8, v=3, seed=1), so a front end can say its own
 * name for it (the CLI says the flag: src/cli/options.c). */
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

/* Monotonic clock in seconds. */
double pm_now(void);

/* ---- allocation ------------------------------------------------------------
 * Every allocation of the library goes through the library's allocator
 * (src/util/alloc.c), so a test can make the Nth one fail (SQLite's fault
 * injection) and check that each failure path returns one clean error,
 * leaks nothing and leaves outputs untouched. What the library hands the
 * caller to free (a file's text, a tokenizer's ids, a checkpoint's
 * parameters) comes from pm_malloc: free it with pm_free. pm_free(NULL) is
 * a no-op, like free. */
void *pm_malloc(size_t n);
void *pm_calloc(size_t count, size_t size);
void pm_free(void *p);

/* ---- this machine's memory (src/util/mem.c) -------------------------------- */

/* Physical memory of this machine in bytes (sysconf), 0 if unknown. */
size_t pm_mem_physical(void);
/* Memory a new allocation can take now without swapping: MemAvailable of
 * /proc/meminfo (else the physical memory), or less under a cgroup v2
 * limit (memory.max less memory.current); 0 if unknown. */
size_t pm_mem_available(void);
/* The process's peak resident memory (VmHWM in /proc/self/status), in
 * bytes; 0 where the system does not say. */
size_t pm_mem_peak_rss(void);

/* ---- files ------------------------------------------------------------------ */

/* Input size caps: a schedule, block or other text input is read whole, so
 * an endless input (/dev/zero, a pipe) must stop at a limit, not eat memory. */
#define PM_TEXT_MAX ((size_t)64 << 20)   /* schedules, blocks: 64 MiB */
#define PM_CORPUS_MAX ((size_t)1 << 30)  /* `prepare` inputs, together: 1 GiB */

/* Reads a whole file into a NUL-terminated buffer from pm_malloc (caller
 * frees with pm_free), stopping with PM_ERR_IO naming the file and the limit
 * as soon as it holds more than `max` bytes. A directory is PM_ERR_IO
 * ("is a directory"). */
pm_status pm_read_file(const char *path, size_t max, char **out, size_t *len, pm_err *err);

/* An output file written all-or-nothing: bytes go to this writer's own
 * temporary beside PATH, PATH.tmp.PID.N.TAG, created exclusively (a symlink
 * planted there is never followed, two writers of one PATH never share it;
 * TAG, a hash of the rest of the name, tells the temporaries a killed
 * writer left from a user's files, and those whose process is gone are
 * removed, nothing else); commit flushes, fsyncs,
 * renames it over PATH and fsyncs the directory, so PATH is either the old
 * file or the complete new one, never a mix. With path NULL the writer is
 * stdout and commit only flushes; an existing non-regular path (a device
 * such as /dev/null or /dev/full, a FIFO) is written in place. */
typedef struct {
    void *f;    /* FILE *: where to write (tmp file or stdout) */
    char *path; /* final path, owned; NULL for stdout */
    char *tmp;  /* its temporary beside path, owned */
    int direct; /* 1: path is a device or pipe, written in place (no tmp) */
    const char *name; /* for messages: the path (borrowed) or "standard output" */
} pm_wfile;

pm_status pm_wfile_open(pm_wfile *w, const char *path, pm_err *err);
/* Makes the file visible at its path; on error the tmp file is removed and
 * PATH is unchanged. Frees the writer either way. */
pm_status pm_wfile_commit(pm_wfile *w, pm_err *err);
/* Drops what was written (removes the tmp file); PATH is unchanged. Safe on
 * a zeroed or committed writer. */
void pm_wfile_abort(pm_wfile *w);

/* Checks, before long work, that PATH can be written later: not a
 * directory, and its directory exists and accepts a new file (tested by
 * creating and removing a temporary, which also clears stale ones). */
pm_status pm_path_check_writable(const char *path, pm_err *err);

/* 1 if paths a and b name one file, else 0 (a or b NULL or empty: 0).
 * Both existing: the same device and inode (through hard links and
 * symlinks). Neither existing: the same directory (resolved: "d", "./d"
 * and "d/../d" are one) and the same last component, so two outputs not
 * yet written are caught too. One existing and one not: 0. */
int pm_same_file(const char *a, const char *b);

/* Writes s to f as a JSON string: quoted, '"' and '\\' escaped, control
 * bytes as \u00XX (nothing dropped, so a name or message reads back
 * whole); other bytes as they are (UTF-8 passes through). s NULL: null. */
void pm_json_str(FILE *f, const char *s);

/* x as the shortest %g text that reads back (strtof) as the same float:
 * 0.003f as "0.003", where %.9g says 0.00300000003 (a float holds no
 * 0.003, and nine digits show its error). Not finite: "nan", "inf",
 * "-inf". buf holds at least PM_FLOAT_TEXT bytes; returns buf. */
#define PM_FLOAT_TEXT 24
char *pm_float_text(char *buf, float x);

/* x as text that reads back (strtod) as the same double: an integer's
 * digits, else the fewest of 15, 16 or 17 significant digits that do
 * (0.1 as "0.1"); not finite: "nan", "inf", "-inf". buf holds at least
 * PM_DOUBLE_TEXT bytes; returns buf. */
#define PM_DOUBLE_TEXT 32
char *pm_double_text(char *buf, double x);
/* x as a JSON number that reads back as the same double (pm_double_text),
 * or null when it is not finite (JSON has no NaN); PM_JSON_NUM(x) gives it
 * in a buffer of the enclosing block: printf("%s", PM_JSON_NUM(x)). */
char *pm_json_text(char *buf, double x);
#define PM_JSON_NUM(x) pm_json_text((char[PM_DOUBLE_TEXT]){0}, (x))

/* n bytes as text for messages: "512 bytes", "1.50 KiB", "23.4 MiB",
 * "128 GiB" (binary units; 2, 1 or no decimals from 1 KiB on). */
void pm_bytes_str(size_t n, char *buf, size_t cap);

/* FNV-1a 64-bit hash of n bytes, continuing from h (start with
 * PM_FNV_OFFSET). Every pipemem binary format's checksum (token files,
 * checkpoints) and the fingerprints ranks compare at start. */
#define PM_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t pm_fnv1a64(uint64_t h, const void *p, size_t n);

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
