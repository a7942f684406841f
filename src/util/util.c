/* util.c: status names, error formatting, checked size arithmetic, the
 * clock, the checksum and JSON strings shared by every module. */
#include "pipemem/pm_util.h"
#include "alloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const status_names[] = {
    "ok", "out of memory", "i/o error", "bad format", "bad argument",
    "invalid schedule", "deadlock", "over memory limit", "numeric error",
    "transport error",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == PM_STATUS_COUNT,
               "one name per pm_status");

const char *pm_version(void) { return PM_VERSION; }

const char *pm_status_str(pm_status st) {
    if ((int)st < 0 || st >= PM_STATUS_COUNT) return "unknown status";
    return status_names[st];
}

pm_status pm_errf(pm_err *err, pm_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

void pm_abort(const char *file, int line, const char *cond) {
    fflush(stdout);
    fprintf(stderr, "pipemem: internal error at %s:%d: assertion '%s' failed\n", file, line,
            cond);
    abort();
}

int pm_size_mul(size_t a, size_t b, size_t *out) {
    if (a && b > (size_t)-1 / a) return 0;
    *out = a * b;
    return 1;
}

int pm_size_add(size_t a, size_t b, size_t *out) {
    if (b > (size_t)-1 - a) return 0;
    *out = a + b;
    return 1;
}

double pm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t pm_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void pm_json_str(FILE *f, const char *s) {
    if (!s) { /* no string: JSON's null */
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void pm_bytes_str(size_t n, char *buf, size_t cap) {
    double x = (double)n;
    const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (x >= 1024 && u < 4) x /= 1024, u++;
    if (u == 0) snprintf(buf, cap, "%zu bytes", n);
    else snprintf(buf, cap, "%.*f %s", x < 10 ? 2 : x < 100 ? 1 : 0, x, unit[u]);
}

char *pm_double_text(char *buf, double x) {
    if (!isfinite(x)) {
        snprintf(buf, PM_DOUBLE_TEXT, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return buf;
    }
    if (x == floor(x) && fabs(x) < 1e15) { /* an integer: its digits, read back exactly */
        snprintf(buf, PM_DOUBLE_TEXT, "%.0f", x == 0 ? 0.0 : x); /* no "-0" */
        return buf;
    }
    /* 17 significant digits always read back (DBL_DECIMAL_DIG); %g drops
     * trailing zeros, so 15 give the text of a number that has at most 15 */
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, PM_DOUBLE_TEXT, "%.*g", p, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

char *pm_json_text(char *buf, double x) {
    if (isfinite(x)) return pm_double_text(buf, x);
    snprintf(buf, PM_DOUBLE_TEXT, "null");
    return buf;
}

char *pm_float_text(char *buf, float x) {
    if (!isfinite(x)) {
        snprintf(buf, PM_FLOAT_TEXT, "%s", isnan(x) ? "nan" : x > 0 ? "inf" : "-inf");
        return buf;
    }
    /* nine significant digits always read back (FLT_DECIMAL_DIG); fewer
     * often do, and the fewest that do is the text the number was given as */
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, PM_FLOAT_TEXT, "%.*g", p, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return buf;
}
