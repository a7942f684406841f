/* options.c: parsing of option values shared by the subcommands, each
 * failure one line naming the option and what it accepts. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli.h"

static int g_rank = -1, g_quiet;
static char g_held[1024]; /* the last line a quiet rank did not print */

void pm_cli_set_rank(int rank, int quiet) { g_rank = rank, g_quiet = quiet, g_held[0] = 0; }

int pm_cli_fail(const char *fmt, ...) {
    char line[sizeof g_held];
    int n = snprintf(line, sizeof line, "pipemem: ");
    if (g_rank >= 0) n += snprintf(line + n, sizeof line - (size_t)n, "rank %d: ", g_rank);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (g_quiet) snprintf(g_held, sizeof g_held, "%s", line);
    else fprintf(stderr, "%s\n", line);
    return 1;
}

void pm_cli_print_held(void) {
    if (g_held[0]) fprintf(stderr, "%s\n", g_held);
    g_held[0] = 0;
}

int pm_cli_int(const char *opt, const char *val, int lo, int *out) {
    return pm_cli_int_range(opt, val, lo, 1 << 24, out);
}

int pm_cli_int_range(const char *opt, const char *val, int lo, int hi, int *out) {
    if (!val) return pm_cli_fail("%s needs a value", opt);
    char *end;
    errno = 0;
    long x = strtol(val, &end, 10);
    if (errno || end == val || *end)
        return pm_cli_fail("%s: '%s' is not an integer", opt, val);
    if (x < lo || x > hi)
        return pm_cli_fail("%s: %s is outside the supported range %d..%d", opt, val, lo, hi);
    *out = (int)x;
    return 0;
}

int pm_cli_size(const char *opt, const char *val, size_t *out) {
    if (!val) return pm_cli_fail("%s needs a value", opt);
    char *end;
    errno = 0;
    double x = strtod(val, &end), mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    else if (*end == 'T' || *end == 't') mul = 1024.0 * 1024 * 1024 * 1024, end++;
    if (errno || end == val || *end || !(x > 0) || !(x * mul < 1e18) || x * mul < 1)
        return pm_cli_fail("%s: '%s' is not a size (bytes, or with K, M, G, T: 512M, 1.5G)", opt,
                           val);
    *out = (size_t)(x * mul);
    return 0;
}

int pm_cli_double(const char *opt, const char *val, double *out) {
    if (!val) return pm_cli_fail("%s needs a value", opt);
    char *end;
    errno = 0;
    double x = strtod(val, &end);
    if (errno || end == val || *end || !isfinite(x))
        return pm_cli_fail("%s: '%s' is not a number", opt, val);
    *out = x;
    return 0;
}

/* Parses up to n comma-separated finite numbers; returns how many, or -1. */
static int parse_list(const char *val, double *x, int n) {
    int k = 0;
    const char *q = val;
    while (k < n) {
        char *end;
        errno = 0;
        x[k] = strtod(q, &end);
        if (errno || end == q || !isfinite(x[k])) return -1;
        k++;
        if (*end == '\0') return k;
        if (*end != ',') return -1;
        q = end + 1;
    }
    return -1;
}

int pm_cli_costs(const char *val, pm_costs *out) {
    double x[4] = {0, 0, 0, 0};
    int k = val ? parse_list(val, x, 4) : -1;
    if (k < 3 || x[0] <= 0 || x[1] <= 0 || x[2] < 0 || x[3] < 0)
        return pm_cli_fail("--costs: '%s' is not F,B,W[,C] (F and B > 0, W and C >= 0)",
                           val ? val : "");
    *out = (pm_costs){x[0], x[1], x[2], x[3]};
    return 0;
}

int pm_cli_mem(const char *val, pm_mem *out) {
    double x[4] = {0, 0, 0, 0};
    int k = val ? parse_list(val, x, 4) : -1;
    if (k < 3 || x[0] <= 0 || fabs(x[0] + x[1] + x[2]) > 1e-9 * fabs(x[0]))
        return pm_cli_fail("--mem: '%s' is not F,B,W[,R] with F > 0 and F+B+W = 0 "
                           "(what F keeps, B and W release; R what a recomputed F keeps)",
                           val ? val : "");
    if (k == 4 && !(x[3] > 0 && x[3] <= x[0]))
        return pm_cli_fail("--mem: R = %g must be in (0, F] (what a recomputed F keeps of "
                           "its F = %g)", x[3], x[0]);
    *out = (pm_mem){x[0], x[1], x[2], x[3]};
    return 0;
}

int pm_cli_files_distinct(const char *cmd, const pm_cli_file *f, int n) {
    for (int i = 0; i < n; i++) {
        struct stat sb;
        if (!f[i].output || !f[i].path) continue;
        if (stat(f[i].path, &sb) == 0 && S_ISCHR(sb.st_mode)) continue; /* /dev/null */
        for (int j = 0; j < n; j++) {
            if (j == i || (f[j].output && j < i) || !pm_same_file(f[i].path, f[j].path) ||
                (f[i].shared && f[i].shared == f[j].shared))
                continue;
            if (f[j].output)
                return pm_cli_fail("%s: %s %s and %s %s are one file; give each output its "
                                   "own path", cmd, f[i].what, f[i].path, f[j].what, f[j].path);
            return pm_cli_fail("%s: %s %s would overwrite %s; give another path", cmd,
                               f[i].what, f[i].path, f[j].what);
        }
    }
    return 0;
}
