/* options.c: the one option parser every subcommand uses (a table of
 * rows: name, type, range, field; pm_cli_parse), the value parsers it
 * calls, each failure one line naming the option and what it accepts; and
 * the library's parameter names turned into the flags that set them. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "pipemem/pm_runtime.h"

static int g_rank = -1, g_quiet;
static int g_argc; /* the command line, whose words are the user's own */
static char **g_argv;
static char g_held[1024]; /* the last line a quiet rank did not print */

/* What the library calls a parameter (its field in the caller's struct, or
 * its argument) and the flag that sets it. valued: named only as
 * name=VALUE, since the bare name could be a word of prose. */
static const struct {
    const char *name, *flag;
    int valued;
} lib_flags[] = {
    {"mem_limit", "--mem-limit", 0},   {"time_limit", "--time-limit", 0},
    {"device_mem", "--device-mem", 0}, {"spill_dir", "--spill", 0},
    {"stop_after", "--stop-after", 0}, {"micro", "--microbatches", 0},
    {"opt.lr", "--lr", 0},             {"opt.steps", "--steps", 0},
    {"opt.weight_decay", "--weight-decay", 0}, {"opt.warmup", "--warmup", 0},
    {"model.layers", "--layers", 0},   {"model.dim", "--dim", 0},
    {"model.ctx", "--ctx", 0},         {"model.heads", "--heads", 0},
    {"batch", "--batch", 1},           {"seed", "--seed", 1},
    {"v", "--chunks", 1},              {"t", "--costs", 1},
    {"mem", "--mem", 1},               {"head_parts", "--head-parts", 1},
    {"vocab", "--vocab", 1},           {"the MPI transport", "--transport mpi", 0},
    /* pm_select.h (pipemem select) */
    {"save_dir", "--resume", 0},       {"sample", "--sample", 1},
    {"asha_min", "--asha-min", 0},     {"asha", "--asha", 0},
    {"eval_every", "--eval-every", 0}, {"eval_batches", "--eval-batches", 0},
    /* pm_cluster.h (pipemem plan) */
    {"shape.layers", "--layers", 0},   {"shape.hidden", "--hidden", 0},
    {"shape.heads", "--heads", 0},     {"shape.seq", "--seq", 0},
    {"shape.vocab", "--vocab", 0},     {"shape.ffn", "--ffn", 0},
    {"shape.precision", "--precision", 0}, {"hw.mem", "--device-mem", 0},
    {"hw.tflops", "--device-tflops", 0}, {"hw.efficiency", "--pass-efficiency", 0},
    {"hw.link_gbps", "--link-gbps", 0},
    {"hw.devices", "--devices", 0},    {"global_batch", "--global-batch", 0},
    {"pp", "--pp", 1},                 {"dp", "--dp", 1},
    {"mbs", "--mbs", 1},
};

/* Length of the name of entry k at s (after prev), 0 if it does not
 * stand there as a whole name; *valued: it is followed by '='. */
static size_t flag_at(int k, const char *s, char prev, int *valued) {
    const char *name = lib_flags[k].name;
    size_t len = strlen(name);
    if (strncmp(s, name, len)) return 0;
    if (prev && prev != ' ' && (prev != '(' || lib_flags[k].valued)) return 0;
    char next = s[len];
    *valued = next == '=';
    if (*valued) return len + 1;
    if (lib_flags[k].valued) return 0;
    if (next == '.') next = s[len + 1] == ' ' ? 0 : s[len + 1];
    return !next || strchr(" ,;:)", next) ? len : 0;
}

void pm_cli_set_args(int argc, char **argv) { g_argc = argc, g_argv = argv; }

/* Length of the longest argument of the command line, not a flag, that
 * stands at s as a whole word, 0 if none: the user's own text (a file
 * named "micro") is copied as typed, never read as a parameter's name. */
static size_t user_word_at(const char *s) {
    size_t best = 0;
    for (int i = 1; i < g_argc; i++) {
        const char *a = g_argv[i];
        size_t n = strlen(a);
        if (a[0] == '-' || n <= best || strncmp(s, a, n)) continue;
        if (!isalnum((unsigned char)s[n]) && s[n] != '_') best = n;
    }
    return best;
}

void pm_cli_flags(const char *msg, char *out, size_t cap) {
    size_t o = 0;
    for (const char *s = msg; *s && o + 1 < cap;) {
        size_t len = 0, mine = user_word_at(s);
        int k = 0, valued = 0;
        for (; k < (int)(sizeof lib_flags / sizeof lib_flags[0]); k++)
            if ((len = flag_at(k, s, s == msg ? 0 : s[-1], &valued))) break;
        if (mine && mine >= len) { /* as typed, unless a longer name starts with it */
            o += (size_t)snprintf(out + o, cap - o, "%.*s", (int)mine, s);
            if (o >= cap) o = cap - 1;
            s += mine;
            continue;
        }
        if (!len) {
            out[o++] = *s++;
            continue;
        }
        o += (size_t)snprintf(out + o, cap - o, "%s%s", lib_flags[k].flag, valued ? " " : "");
        if (o >= cap) o = cap - 1;
        s += len;
    }
    out[o] = 0;
}

void pm_cli_set_rank(int rank, int quiet) { g_rank = rank, g_quiet = quiet, g_held[0] = 0; }

int pm_cli_fail(const char *fmt, ...) {
    char text[sizeof g_held], line[sizeof g_held];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    int n = snprintf(line, sizeof line, "pipemem: ");
    if (g_rank >= 0) n += snprintf(line + n, sizeof line - (size_t)n, "rank %d: ", g_rank);
    pm_cli_flags(text, line + n, sizeof line - (size_t)n);
    if (g_quiet) snprintf(g_held, sizeof g_held, "%s", line);
    else fprintf(stderr, "%s\n", line);
    return 1;
}

void pm_cli_print_held(void) {
    if (g_held[0]) fprintf(stderr, "%s\n", g_held);
    g_held[0] = 0;
}

int pm_cli_agree(int failed) {
    pm_err err;
    int bad = pm_mpi_agree(!failed, &err);
    if (bad == -2) { /* this rank's own finding: printed even when quiet */
        pm_cli_fail("%s", err.msg);
        pm_cli_print_held();
    } else if (bad > 0 && failed) {
        pm_cli_print_held(); /* rank 0 was fine: ours alone */
    }
    return bad;
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

/* strtod of a finite number at s (end where it stops): 0; 1 if there is
 * none, 2 if it is beyond a double, 3 if it is inf or nan. A number too
 * small for a double's normal range (1e-320) is a number: strtod's ERANGE
 * then is no error. */
static int finite_at(const char *s, char **end, double *x) {
    errno = 0;
    *x = strtod(s, end);
    if (*end == s) return 1;
    if (errno == ERANGE && fabs(*x) > 1) return 2;
    return isfinite(*x) ? 0 : 3;
}

int pm_cli_double(const char *opt, const char *val, double *out) {
    if (!val) return pm_cli_fail("%s needs a value", opt);
    char *end;
    double x;
    int bad = finite_at(val, &end, &x);
    if (bad == 2 && !*end)
        return pm_cli_fail("%s: '%s' is beyond a double (at most about 1.8e308)", opt, val);
    if (bad == 3 && !*end) return pm_cli_fail("%s: '%s' is not a finite number", opt, val);
    if (bad || *end) return pm_cli_fail("%s: '%s' is not a number", opt, val);
    *out = x;
    return 0;
}

/* Parses up to n comma-separated finite numbers; returns how many, or -1. */
static int parse_list(const char *val, double *x, int n) {
    int k = 0;
    const char *q = val;
    while (k < n) {
        char *end;
        if (finite_at(q, &end, &x[k])) return -1;
        k++;
        if (*end == '\0') return k;
        if (*end != ',') return -1;
        q = end + 1;
    }
    return -1;
}

int pm_cli_costs(const pm_cli_opt *d, const char *val, void *out) {
    (void)d;
    double x[4] = {0, 0, 0, 0};
    int k = val ? parse_list(val, x, 4) : -1;
    if (k < 3 || x[0] <= 0 || x[1] <= 0 || x[2] < 0 || x[3] < 0)
        return pm_cli_fail("--costs: '%s' is not F,B,W[,C] (F and B > 0, W and C >= 0)",
                           val ? val : "");
    *(pm_costs *)out = (pm_costs){x[0], x[1], x[2], x[3]};
    return 0;
}

int pm_cli_mem(const pm_cli_opt *d, const char *val, void *out) {
    (void)d;
    double x[4] = {0, 0, 0, 0};
    int k = val ? parse_list(val, x, 4) : -1;
    if (k < 3 || x[0] <= 0 || fabs(x[0] + x[1] + x[2]) > 1e-9 * fabs(x[0]))
        return pm_cli_fail("--mem: '%s' is not F,B,W[,R] with F > 0 and F+B+W = 0 "
                           "(what F keeps, B and W release; R what a recomputed F keeps)",
                           val ? val : "");
    if (k == 4 && !(x[3] > 0 && x[3] <= x[0]))
        return pm_cli_fail("--mem: R = %g must be in (0, F] (what a recomputed F keeps of "
                           "its F = %g)", x[3], x[0]);
    *(pm_mem *)out = (pm_mem){x[0], x[1], x[2], x[3]};
    return 0;
}

/* Stores option d's value v (NULL when argv ran out) into dst. */
static int apply(const pm_cli_opt *d, const char *v, void *dst) {
    switch (d->type) {
    case 'f':
        *(int *)dst = d->lo;
        return 0;
    case 'r': case 'w': case 'R': case 'W':
        if (v && !*v) return pm_cli_fail("%s: the path is empty", d->name);
        /* fallthrough */
    case 's':
        if (!v) return pm_cli_fail("%s needs %s", d->name, d->need ? d->need : "a value");
        *(const char **)dst = v;
        return 0;
    case 'i':
        return pm_cli_int_range(d->name, v, d->lo, d->hi ? d->hi : 1 << 24, dst);
    case 'd':
        return pm_cli_double(d->name, v, dst);
    case 'p':
        if (pm_cli_double(d->name, v, dst)) return 1;
        if (*(double *)dst <= 0) return pm_cli_fail("%s: '%s' must be > 0", d->name, v);
        return 0;
    case 'z':
        return pm_cli_size(d->name, v, dst);
    default:
        return d->fn(d, v, dst);
    }
}

/* A path the command line names: the row that took it (NULL: a positional
 * argument, a file the command reads) and the argument; or a flag given
 * (path NULL) and the field it set. */
typedef struct {
    const pm_cli_opt *d;
    const char *path;
    const void *field;
} given_path;

/* Flag d, setting field, after the flags g[0..n): 1 (printed) if one of
 * them set that field to another value (--prefetch --no-prefetch). */
static int flags_clash(const char *cmd, const given_path *g, int n, const pm_cli_opt *d,
                       const void *field) {
    for (int i = 0; i < n; i++)
        if (!g[i].path && g[i].field == field && g[i].d->lo != d->lo)
            return pm_cli_fail("%s: %s and %s say opposite things; give one", cmd, g[i].d->name,
                               d->name);
    return 0;
}

/* The files in a data directory (prepare writes them, train and select
 * read them). */
static const char *const data_files[3] = {"train.bin", "val.bin", "tokenizer.model"};

/* The files of the paths given (a data directory counts as its files),
 * each described for pm_cli_files_distinct's line, into f and the text of
 * those lines into the arena txt; how many. The last value of a row given
 * twice is the one used, so the earlier ones are skipped. */
static int path_files(const given_path *g, int n, pm_cli_file *f, char *txt) {
    int nf = 0;
    for (int i = 0; i < n; i++) {
        const pm_cli_opt *d = g[i].d;
        int later = 0;
        if (!g[i].path) continue; /* a flag */
        for (int j = i + 1; d && j < n && !later; j++) later = g[j].d == d;
        if (later) continue;
        int dir = d && (d->type == 'R' || d->type == 'W');
        int out = d && (d->type == 'w' || d->type == 'W');
        for (int k = 0; k < (dir ? 3 : 1); k++) {
            const char *path = g[i].path, *what = out ? d->name : txt; /* -o: the line adds */
            if (!out) { /* an input, named whole: "the input --data d (its val.bin)" */
                txt += sprintf(txt, "the input %s%s%s", d ? d->name : "", d ? " " : "", path);
                txt += (dir ? sprintf(txt, " (its %s)", data_files[k]) : 0) + 1;
            }
            if (dir) path = txt, txt += sprintf(txt, "%s/%s", g[i].path, data_files[k]) + 1;
            f[nf++] = (pm_cli_file){what, path, out, d && !dir ? d->lo : 0};
        }
    }
    return nf;
}

/* No output of the command line onto one of its inputs or another output
 * (pm_cli_files_distinct over every path row and positional argument). */
static int paths_distinct(const char *cmd, const given_path *g, int n) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++) /* the lines' text, at most 3 files a path */
        if (g[i].path)
            bytes += 3 * (2 * strlen(g[i].path) + 2 * strlen(g[i].d ? g[i].d->name : "") + 64);
    pm_cli_file *f = malloc((size_t)(3 * n + 1) * sizeof *f);
    char *txt = malloc(bytes + 1);
    int rc = !f || !txt ? pm_cli_fail("%s: out of memory", cmd)
                        : pm_cli_files_distinct(cmd, f, path_files(g, n, f, txt));
    free(f);
    free(txt);
    return rc;
}

int pm_cli_parse(const char *cmd, int argc, char **argv, int first, const pm_cli_opts *sets,
                 int nsets, int (*positional)(void *ctx, const char *arg), void *ctx) {
    for (int s = 0; s < nsets; s++)
        for (int k = 0; sets[s].at && k < sets[s].n; k++) sets[s].at[k] = 0;
    given_path *g = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *g);
    if (!g) return pm_cli_fail("%s: out of memory", cmd);
    int ng = 0, rc = 0;
    for (int i = first; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            rc = 2;
            break;
        }
        if (positional && (a[0] != '-' || !a[1])) {
            rc = positional(ctx, a);
            g[ng++] = (given_path){NULL, a, NULL};
            continue;
        }
        const pm_cli_opts *set = NULL;
        int k = -1;
        for (int s = 0; s < nsets && k < 0; s++)
            for (int j = 0; j < sets[s].n && k < 0; j++)
                if (!strcmp(a, sets[s].opt[j].name)) set = &sets[s], k = j;
        if (k < 0) {
            rc = pm_cli_fail("%s: unknown option '%s' (try 'pipemem %s --help')", cmd, a, cmd);
            break;
        }
        const pm_cli_opt *d = &set->opt[k];
        if ((rc = apply(d, v, (char *)set->dst + d->off))) break;
        if (set->at && !set->at[k]) set->at[k] = i;
        if (d->type == 'f' && (rc = flags_clash(cmd, g, ng, d, (char *)set->dst + d->off)))
            break;
        if (d->type == 'f') g[ng++] = (given_path){d, NULL, (char *)set->dst + d->off};
        if (strchr("rwRW", d->type)) g[ng++] = (given_path){d, v, NULL};
        if (d->type != 'f') i++;
    }
    if (!rc) rc = paths_distinct(cmd, g, ng);
    free(g);
    return rc;
}

int pm_cli_collect(void *ctx, const char *arg) {
    pm_cli_args *a = ctx;
    a->arg[a->n++] = arg;
    return 0;
}

int pm_cli_given(const pm_cli_opts *set, const char *name) {
    for (int k = 0; k < set->n; k++)
        if (!strcmp(set->opt[k].name, name)) return set->at[k];
    PM_ASSERT(!"pm_cli_given: no such option");
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
