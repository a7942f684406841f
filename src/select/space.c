/* space.c: a sweep's space (pm_select.h): the values swept per key, their
 * cartesian product (grid search) or a reproducible random sample (random
 * search, with uniform and log-uniform ranges), or a tasks file; and which
 * task repeats another.
 *
 * A value is text parsed here and checked by its field's rule in
 * src/train (pm_train_value_ok), and a task's configuration is
 * pm_train_cfg_make's from its keys' values, so each task trains bitwise
 * as `pipemem train` with the same settings, and no default or rule is
 * written twice. Messages name a key by its label (the caller's word for
 * it, "--lr" on a command line) or, in a tasks file, by its name. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_select.h"
#include "train/config.h"
#include "parts.h"

const char *const pm_sweep_key_names[PM_SWEEP_KEYS] = {
    "lr", "layers", "dim", "heads", "ctx", "batch", "microbatches", "warmup", "seed", "steps",
    "weight_decay"};
/* The field each key sets. */
static const pm_train_field key_field[PM_SWEEP_KEYS] = {
    [PM_SWEEP_LR] = PM_CFG_LR,         [PM_SWEEP_LAYERS] = PM_CFG_LAYERS,
    [PM_SWEEP_DIM] = PM_CFG_DIM,       [PM_SWEEP_HEADS] = PM_CFG_HEADS,
    [PM_SWEEP_CTX] = PM_CFG_CTX,       [PM_SWEEP_BATCH] = PM_CFG_BATCH,
    [PM_SWEEP_MICRO] = PM_CFG_MICRO,   [PM_SWEEP_WARMUP] = PM_CFG_WARMUP,
    [PM_SWEEP_SEED] = PM_CFG_SEED,     [PM_SWEEP_STEPS] = PM_CFG_STEPS,
    [PM_SWEEP_WEIGHT_DECAY] = PM_CFG_WEIGHT_DECAY};

static const char *label(const pm_sweep *sw, int k) {
    return sw->label[k] ? sw->label[k] : pm_sweep_key_names[k];
}

static int is_real(int k) { return !pm_train_field_integer(key_field[k]); }

/* A value of key k in [s, s + len): a number its field's rule takes. 0 if
 * good. */
static int parse_value(int k, const char *s, size_t len, double *out) {
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf) return 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    errno = 0;
    double x = strtod(buf, &end);
    if (errno || *end || !isfinite(x)) return 1;
    *out = x;
    return !pm_train_value_ok(key_field[k], x);
}

static const char *rule(int k) { return pm_train_value_rules[key_field[k]]; }

/* lo..hi or log:lo..hi (dots at the first ".."). */
static pm_status parse_range(pm_sweep *sw, int k, const char *val, const char *dots,
                             pm_err *err) {
    const char *flag = label(sw, k);
    int lg = !strncmp(val, "log:", 4);
    const char *lo = lg ? val + 4 : val;
    double a, b;
    if (strchr(val, ','))
        return pm_errf(err, PM_ERR_ARG, "%s: '%s': a range lo..hi stands alone, not in a list",
                       flag, val);
    if (dots[2] == '.' || strstr(dots + 2, "..")) /* 1e-4...1e-2 read as 1e-4 .. .1e-2 */
        return pm_errf(err, PM_ERR_ARG, "%s: '%s' is not a range lo..hi: its ends are split by "
                       "two dots, not more", flag, val);
    if (dots < lo || parse_value(k, lo, (size_t)(dots - lo), &a) ||
        parse_value(k, dots + 2, strlen(dots + 2), &b))
        return pm_errf(err, PM_ERR_ARG, "%s: '%s' is not a range lo..hi (or log:lo..hi) of %s",
                       flag, val, rule(k));
    if (!(a < b))
        return pm_errf(err, PM_ERR_ARG, "%s: '%s': the low end must be below the high end", flag,
                       val);
    if (lg && !(a > 0))
        return pm_errf(err, PM_ERR_ARG, "%s: '%s': a log-uniform range needs a low end above 0",
                       flag, val);
    sw->kind[k] = lg ? PM_SWEEP_LOG : PM_SWEEP_UNIFORM;
    sw->lo[k] = a, sw->hi[k] = b, sw->n[k] = 0;
    return PM_OK;
}

pm_status pm_sweep_set(pm_sweep *sw, pm_sweep_key k, const char *val, const char *name,
                       pm_err *err) {
    if ((unsigned)k >= PM_SWEEP_KEYS)
        return pm_errf(err, PM_ERR_ARG, "sweep key %d: no such key", (int)k);
    sw->label[k] = name;
    const char *flag = label(sw, k);
    if (!val) return pm_errf(err, PM_ERR_ARG, "%s needs a value", flag);
    const char *dots = strstr(val, "..");
    if (dots) return parse_range(sw, k, val, dots, err);
    sw->kind[k] = PM_SWEEP_LIST;
    sw->n[k] = 0;
    for (const char *p = val;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (sw->n[k] == PM_SWEEP_MAX_VALUES)
            return pm_errf(err, PM_ERR_ARG, "%s: more than %d values", flag, PM_SWEEP_MAX_VALUES);
        if (parse_value(k, p, len, &sw->v[k][sw->n[k]++]))
            return pm_errf(err, PM_ERR_ARG, "%s: '%.*s' is not %s (in '%s')", flag, (int)len, p,
                           rule(k), val);
        if (!c) return PM_OK;
        p = c + 1;
    }
}

int pm_sweep_swept(const pm_sweep *sw) {
    for (int k = 0; k < PM_SWEEP_KEYS; k++)
        if (sw->n[k] || sw->kind[k] != PM_SWEEP_LIST) return 1;
    return 0;
}

/* ---- one task --------------------------------------------------------------- */

/* Task t's configuration from key values x (NAN: the default), named tID. */
static pm_status make_task(const double *x, pm_select_task *t, int id, pm_err *err) {
    pm_train_settings s;
    pm_train_settings_clear(&s);
    for (int k = 0; k < PM_SWEEP_KEYS; k++) s.v[key_field[k]] = x[k];
    *t = (pm_select_task){0};
    snprintf(t->name, sizeof t->name, "t%d", id);
    return pm_train_cfg_make(&t->cfg, &s, err);
}

int pm_select_task_repeats(const pm_select_task *t, int i) {
    for (int j = 0; j < i; j++)
        if (pm_train_cfg_diff(&t[i].cfg, &t[j].cfg, PM_CFG_ALL) < 0) return j;
    return -1;
}

/* ---- the grid ----------------------------------------------------------------- */

static pm_status grid(const pm_sweep *sw, pm_select_task *t, int *n, pm_err *err) {
    long total = 1;
    for (int k = 0; k < PM_SWEEP_KEYS; k++) {
        if (sw->kind[k] != PM_SWEEP_LIST)
            return pm_errf(err, PM_ERR_ARG, "select: %s is a range (lo..hi): add sample=N to "
                           "draw N tasks from it", label(sw, k));
        total *= sw->n[k] ? sw->n[k] : 1;
        if (total > PM_SWEEP_MAX_TASKS)
            return pm_errf(err, PM_ERR_ARG, "select: the lists make over %d tasks; give fewer "
                           "values, or draw some with sample=N", PM_SWEEP_MAX_TASKS);
    }
    for (long i = 0; i < total; i++) {
        double x[PM_SWEEP_KEYS];
        long r = i;
        for (int k = PM_SWEEP_KEYS - 1; k >= 0; k--) { /* the first key slowest */
            int nk = sw->n[k] ? sw->n[k] : 1;
            x[k] = sw->n[k] ? sw->v[k][r % nk] : NAN;
            r /= nk;
        }
        pm_err e;
        if (make_task(x, &t[*n], *n, &e))
            return pm_errf(err, PM_ERR_ARG, "task %s: %s", t[*n].name, e.msg);
        (*n)++;
    }
    return PM_OK;
}

/* ---- random search ------------------------------------------------------------ */

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, every seed good. */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform on [0, 1), 53 bits. */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1p-53; }

/* One value of key k: a listed one, or one of the range (an integer key
 * draws the integers lo..hi, each alike, or log-uniformly: k with weight
 * log((k + 1) / k)); NAN when the key is not swept. */
static double draw(const pm_sweep *sw, int k, uint64_t *s) {
    if (sw->kind[k] == PM_SWEEP_LIST)
        return sw->n[k] ? sw->v[k][next_u64(s) % (uint64_t)sw->n[k]] : NAN;
    double lo = sw->lo[k], hi = sw->hi[k], u = next_unit(s), x;
    if (!is_real(k)) hi += 1; /* the integers lo..hi: [lo, hi + 1) floored */
    x = sw->kind[k] == PM_SWEEP_LOG ? exp(log(lo) + u * (log(hi) - log(lo))) : lo + u * (hi - lo);
    if (!is_real(k)) x = floor(x), hi -= 1;
    return x < lo ? lo : x > hi ? hi : x; /* exp's rounding kept inside */
}

static pm_status sample(const pm_sweep *sw, pm_select_task *t, int *n, pm_err *err) {
    int count = sw->sample;
    if (count > PM_SWEEP_MAX_TASKS)
        return pm_errf(err, PM_ERR_ARG, "select: sample=%d: at most %d tasks", count,
                       PM_SWEEP_MAX_TASKS);
    double distinct = 1; /* lists alone hold at most their product */
    int ranged = 0;
    for (int k = 0; k < PM_SWEEP_KEYS; k++) {
        ranged |= sw->kind[k] != PM_SWEEP_LIST;
        if (sw->kind[k] == PM_SWEEP_LIST && sw->n[k]) distinct *= sw->n[k];
    }
    if (!ranged && distinct < count)
        return pm_errf(err, PM_ERR_ARG, "select: sample=%d: the lists make only %.0f distinct "
                       "tasks; sample at most that many, or give a range (lo..hi)", count,
                       distinct);
    uint64_t s = sw->sample_seed;
    long draws = 0, limit = 100L * count + 10000, bad = 0, again = 0;
    pm_err why = {{0}};
    while (*n < count && draws < limit) {
        double x[PM_SWEEP_KEYS];
        draws++;
        for (int k = 0; k < PM_SWEEP_KEYS; k++) x[k] = draw(sw, k, &s);
        pm_select_task *c = &t[*n];
        if (make_task(x, c, *n, &why)) { /* no model: drawn again */
            bad++;
            continue;
        }
        if (pm_select_task_repeats(t, *n) >= 0) {
            again++;
            continue;
        }
        (*n)++;
    }
    if (*n < count)
        return pm_errf(err, PM_ERR_ARG, "select: sample=%d: %d distinct tasks in %ld draws (%ld "
                       "repeated a task, %ld were no model%s%s); widen the ranges or sample fewer",
                       count, *n, draws, again, bad, bad ? ", as: " : "", bad ? why.msg : "");
    return PM_OK;
}

/* ---- the tasks file -------------------------------------------------------------- */

/* A task's name from the tasks file: letters, digits, '_', '.' and '-' (it
 * names files in the save directory and rows in every output). */
static int good_name(const char *s, size_t n) {
    if (n < 1 || n > 31) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-') return 0;
    return s[0] != '.';
}

static int key_of(const char *name) {
    for (int k = 0; k < PM_SWEEP_KEYS; k++)
        if (!strcmp(name, pm_sweep_key_names[k])) return k;
    return -1;
}

/* One line of the tasks file, [b, e): its values into x (NAN: default) and
 * its name (empty: none). Returns -1 on a bad pair (err says), else the
 * number of pairs read. */
static int parse_task_line(const char *file, int line, const char *b, const char *e, double *x,
                           char name[32], pm_err *err) {
    int any = 0, seen[PM_SWEEP_KEYS] = {0};
    name[0] = 0;
    for (const char *p = b; p < e;) {
        while (p < e && isspace((unsigned char)*p)) p++;
        if (p == e || *p == '#') break;
        const char *q = p, *eq;
        while (q < e && !isspace((unsigned char)*q)) q++;
        eq = memchr(p, '=', (size_t)(q - p));
        size_t kl = eq ? (size_t)(eq - p) : 0, vl = eq ? (size_t)(q - eq - 1) : 0;
        char key[32] = "";
        if (eq && kl < sizeof key) memcpy(key, p, kl), key[kl] = 0;
        int k = key_of(key), named = !strcmp(key, "name");
        const char *bad = NULL; /* what is wrong with the pair */
        if (!eq) bad = "is not key=value";
        else if ((named && name[0]) || (k >= 0 && seen[k]++))
            bad = "gives a key this line has given already";
        else if (named && !good_name(eq + 1, vl))
            bad = "is not a name (1 to 31 of letters, digits, _ . -, not starting with .)";
        else if (named) memcpy(name, eq + 1, vl), name[vl] = 0;
        else if (k < 0)
            bad = "has an unknown key (name, lr, layers, dim, heads, ctx, batch, "
                  "microbatches, warmup, seed, steps, weight_decay)";
        else if (parse_value(k, eq + 1, vl, &x[k])) {
            pm_errf(err, PM_ERR_ARG, "%s:%d: '%.*s': %s must be %s", file, line, (int)(q - p), p,
                    key, rule(k));
            return -1;
        }
        if (bad) {
            pm_errf(err, PM_ERR_ARG, "%s:%d: '%.*s' %s", file, line, (int)(q - p), p, bad);
            return -1;
        }
        any++;
        p = q;
    }
    return any;
}

/* Task i (from line at[i]) takes a name no earlier task has. */
static pm_status name_free(const char *file, const pm_select_task *t, const int *at, int i,
                           int given, pm_err *err) {
    for (int j = 0; j < i; j++)
        if (!strcmp(t[j].name, t[i].name))
            return pm_errf(err, PM_ERR_ARG, "%s:%d: the name %s%s is taken by the task of line "
                           "%d; give this one name=NAME", file, at[i], t[i].name,
                           given ? "" : " (its default)", at[j]);
    return PM_OK;
}

/* One task of file's line `line` ([b, e)) into t[*n], unless the line
 * holds none. A key the line does not set takes the sweep's one value for
 * it, if it has one (the command line's default), else the default. */
static pm_status file_line(const pm_sweep *sw, const char *file, int line, const char *b,
                           const char *e, pm_select_task *t, int *at, int *n, pm_err *err) {
    double x[PM_SWEEP_KEYS];
    char name[32];
    pm_err why;
    for (int k = 0; k < PM_SWEEP_KEYS; k++) x[k] = sw->n[k] == 1 ? sw->v[k][0] : NAN;
    int got = parse_task_line(file, line, b, e, x, name, err);
    if (got <= 0) return got < 0 ? PM_ERR_ARG : PM_OK;
    if (*n == PM_SWEEP_MAX_TASKS)
        return pm_errf(err, PM_ERR_ARG, "%s: more than %d tasks", file, PM_SWEEP_MAX_TASKS);
    if (make_task(x, &t[*n], *n, &why))
        return pm_errf(err, PM_ERR_ARG, "task %s: %s", t[*n].name, why.msg);
    if (name[0]) snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
    at[*n] = line;
    pm_status st = name_free(file, t, at, *n, name[0] != 0, err);
    (*n)++;
    return st;
}

/* Beside a tasks file a key may hold one value (every line's default),
 * not a list or a range, and nothing is drawn. */
static pm_status beside_file(const pm_sweep *sw, pm_err *err) {
    if (sw->sample > 0)
        return pm_errf(err, PM_ERR_ARG, "select: sample=%d draws tasks, and %s lists them: give "
                       "one or the other", sw->sample, sw->tasks_file);
    for (int k = 0; k < PM_SWEEP_KEYS; k++)
        if (sw->n[k] > 1 || sw->kind[k] != PM_SWEEP_LIST)
            return pm_errf(err, PM_ERR_ARG, "select: %s holds %s beside the tasks file %s: give "
                           "one value (the default of the lines without %s=) or put the values "
                           "in the file", label(sw, k), sw->n[k] > 1 ? "a list" : "a range",
                           sw->tasks_file, pm_sweep_key_names[k]);
    return PM_OK;
}

static pm_status read_file(const pm_sweep *sw, pm_select_task *t, int *n, pm_err *err) {
    const char *file = sw->tasks_file;
    pm_status st = beside_file(sw, err);
    if (st) return st;
    char *text = NULL;
    size_t len = 0;
    if ((st = pm_read_file(file, PM_TEXT_MAX, &text, &len, err))) return st;
    const char *nul = memchr(text, 0, len); /* it would end a value early, unseen */
    if (nul) {
        int at_line = 1;
        for (const char *c = text; c < nul; c++) at_line += *c == '\n';
        pm_free(text);
        return pm_errf(err, PM_ERR_ARG, "%s:%d: a NUL byte (offset %zu): a tasks file is text, "
                       "key=value pairs", file, at_line, (size_t)(nul - text));
    }
    int line = 0, *at = pm_malloc(PM_SWEEP_MAX_TASKS * sizeof *at); /* each task's line */
    if (!at) st = pm_errf(err, PM_ERR_NOMEM, "select: out of memory");
    for (size_t i = 0; i < len && !st;) {
        size_t end = i;
        while (end < len && text[end] != '\n') end++;
        st = file_line(sw, file, ++line, text + i, text + end, t, at, n, err);
        i = end + 1;
    }
    pm_free(text), pm_free(at);
    if (!st && !*n) st = pm_errf(err, PM_ERR_ARG, "%s: no tasks in it", file);
    return st;
}

/* ---- the tasks ---------------------------------------------------------------- */

pm_status pm_sweep_tasks(const pm_sweep *sw, pm_select_task **tasks, int *n, pm_err *err) {
    *tasks = NULL, *n = 0;
    int cap = sw->tasks_file || sw->sample > PM_SWEEP_MAX_TASKS ? PM_SWEEP_MAX_TASKS
              : sw->sample > 0                                ? sw->sample
                                                              : 1;
    if (!sw->tasks_file && sw->sample <= 0) /* the grid's size: the lists' product */
        for (int k = 0; k < PM_SWEEP_KEYS && cap <= PM_SWEEP_MAX_TASKS; k++)
            cap *= sw->n[k] ? sw->n[k] : 1;
    if (cap > PM_SWEEP_MAX_TASKS) cap = PM_SWEEP_MAX_TASKS; /* refused by grid() */
    pm_select_task *t = pm_calloc((size_t)cap, sizeof *t);
    if (!t) return pm_errf(err, PM_ERR_NOMEM, "select: out of memory for the tasks");
    int got = 0;
    pm_status st = sw->tasks_file ? read_file(sw, t, &got, err)
                   : sw->sample > 0 ? sample(sw, t, &got, err)
                                    : grid(sw, t, &got, err);
    if (st) {
        pm_free(t);
        return st;
    }
    *tasks = t, *n = got;
    return PM_OK;
}
