/* select_tasks.c: the tasks of `pipemem select` (select_tasks.h): values
 * swept on the command line, their cartesian product (grid search) or a
 * reproducible random sample (random search, with uniform and log-uniform
 * ranges), a tasks file, and a warning for a task that repeats another.
 *
 * A task's configuration is train's for the same options (the defaults,
 * the warm-up's steps/10 and its cap at the steps, the weight decay), so
 * each task trains bitwise as `pipemem train` alone would. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "select_tasks.h"

const char *const sel_key_names[SEL_K_COUNT] = {
    "lr", "layers", "dim", "heads", "ctx", "batch", "microbatches", "warmup", "seed", "steps",
    "weight_decay"};
const char *const sel_key_flags[SEL_K_COUNT] = {
    "--lr",    "--layers",       "--dim",  "--heads", "--ctx",          "--batch",
    "--microbatches", "--warmup", "--seed", "--steps", "--weight-decay"};

static int is_real(int k) { return k == SEL_K_LR || k == SEL_K_WD; }

/* What a value of key k must be (parse_value's rule, for messages). */
static const char *value_rule(int k) {
    if (k == SEL_K_LR) return "a positive number up to 3.4e38 (a float)";
    if (k == SEL_K_WD) return "a number from 0 up to 3.4e38 (a float)";
    return k == SEL_K_SEED || k == SEL_K_WARMUP ? "an integer 0..16777216"
                                                : "an integer 1..16777216";
}

/* A value of key k in [s, s + len): lr a positive number a float holds
 * (train keeps it as one), weight_decay such a number or 0, seed and
 * warmup non-negative integers, the rest positive integers. 0 if good. */
static int parse_value(int k, const char *s, size_t len, double *out) {
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf) return 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    errno = 0;
    double x = strtod(buf, &end);
    if (errno || *end || !isfinite(x)) return 1;
    *out = x;
    if (k == SEL_K_LR) return !(x > 0 && x <= FLT_MAX);
    if (k == SEL_K_WD) return !(x >= 0 && x <= FLT_MAX);
    if (x != floor(x) || x > (1 << 24)) return 1;
    return k == SEL_K_SEED || k == SEL_K_WARMUP ? x < 0 : x < 1;
}

/* lo..hi or log:lo..hi (dots at the first ".."). */
static int parse_range(sel_space *sp, int k, const char *val, const char *dots) {
    const char *flag = sel_key_flags[k];
    int lg = !strncmp(val, "log:", 4);
    const char *lo = lg ? val + 4 : val;
    double a, b;
    if (strchr(val, ','))
        return pm_cli_fail("%s: '%s': a range lo..hi stands alone, not in a list", flag, val);
    if (dots[2] == '.' || strstr(dots + 2, "..")) /* 1e-4...1e-2 read as 1e-4 .. .1e-2 */
        return pm_cli_fail("%s: '%s' is not a range lo..hi: its ends are split by two dots, "
                           "not more", flag, val);
    if (dots < lo || parse_value(k, lo, (size_t)(dots - lo), &a) ||
        parse_value(k, dots + 2, strlen(dots + 2), &b))
        return pm_cli_fail("%s: '%s' is not a range lo..hi (or log:lo..hi) of %s", flag, val,
                           value_rule(k));
    if (!(a < b))
        return pm_cli_fail("%s: '%s': the low end must be below the high end", flag, val);
    if (lg && !(a > 0))
        return pm_cli_fail("%s: '%s': a log-uniform range needs a low end above 0", flag, val);
    sp->kind[k] = lg ? SEL_LOG : SEL_UNIFORM;
    sp->lo[k] = a, sp->hi[k] = b, sp->n[k] = 0;
    return 0;
}

int sel_parse_key(sel_space *sp, int k, const char *val) {
    const char *flag = sel_key_flags[k];
    if (!val) return pm_cli_fail("%s needs a value", flag);
    const char *dots = strstr(val, "..");
    if (dots) return parse_range(sp, k, val, dots);
    sp->kind[k] = SEL_LIST;
    sp->n[k] = 0;
    for (const char *p = val;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (sp->n[k] == SEL_MAX_VALUES)
            return pm_cli_fail("%s: more than %d values", flag, SEL_MAX_VALUES);
        if (parse_value(k, p, len, &sp->v[k][sp->n[k]++]))
            return pm_cli_fail("%s: '%.*s' is not %s (in '%s')", flag, (int)len, p,
                               value_rule(k), val);
        if (!c) return 0;
        p = c + 1;
    }
}

int sel_swept(const sel_space *sp) {
    for (int k = 0; k < SEL_K_COUNT; k++)
        if (sp->n[k] || sp->kind[k] != SEL_LIST) return 1;
    return 0;
}

/* ---- one task --------------------------------------------------------------- */

/* The configuration of key values x (NAN: train's default). */
static void task_cfg(const double *x, pm_train_cfg *c) {
    double d[SEL_K_COUNT] = {1e-3, 4, 128, 4, 64, 8, 1, -1, 1, 100, -1};
    for (int k = 0; k < SEL_K_COUNT; k++)
        if (!isnan(x[k])) d[k] = x[k];
    int steps = (int)d[SEL_K_STEPS];
    *c = (pm_train_cfg){.model = {256, (int32_t)d[SEL_K_CTX], (int32_t)d[SEL_K_DIM],
                                  (int32_t)d[SEL_K_HEADS], (int32_t)d[SEL_K_LAYERS]},
                        .batch = (int)d[SEL_K_BATCH], .micro = (int)d[SEL_K_MICRO],
                        .seed = (uint64_t)d[SEL_K_SEED]};
    pm_optim_defaults(&c->opt, steps);
    c->opt.lr = (float)d[SEL_K_LR];
    /* as train: a warm-up longer than the run is the run */
    if (d[SEL_K_WARMUP] >= 0)
        c->opt.warmup = d[SEL_K_WARMUP] < steps ? (int)d[SEL_K_WARMUP] : steps;
    if (d[SEL_K_WD] >= 0) c->opt.weight_decay = (float)d[SEL_K_WD];
}

/* Why c is no model to train, in why; 0 if it is one. */
static int task_bad(const pm_train_cfg *c, char *why, size_t cap) {
    pm_err e;
    if (pm_gpt_config_check(&c->model, &e)) return snprintf(why, cap, "%s", e.msg), 1;
    if (c->batch % c->micro)
        return snprintf(why, cap, "--batch %d is not a multiple of --microbatches %d", c->batch,
                        c->micro), 1;
    return 0;
}

/* Task t (named tID) from x; refused in one line if it is no model. */
static int make_task(const double *x, pm_select_task *t, int id) {
    char why[sizeof(pm_err)];
    *t = (pm_select_task){0};
    task_cfg(x, &t->cfg);
    snprintf(t->name, sizeof t->name, "t%d", id);
    if (task_bad(&t->cfg, why, sizeof why)) return pm_cli_fail("task %s: %s", t->name, why);
    return 0;
}

int sel_same_cfg(const pm_train_cfg *a, const pm_train_cfg *b) {
    const pm_optim_cfg *p = &a->opt, *q = &b->opt;
    return !memcmp(&a->model, &b->model, sizeof a->model) && a->batch == b->batch &&
           a->micro == b->micro && a->seed == b->seed && p->lr == q->lr &&
           p->lr_min_frac == q->lr_min_frac && p->warmup == q->warmup && p->steps == q->steps &&
           p->beta1 == q->beta1 && p->beta2 == q->beta2 && p->eps == q->eps &&
           p->weight_decay == q->weight_decay && p->grad_clip == q->grad_clip;
}

void sel_warn_duplicates(const pm_select_task *t, int n) {
    int shown = 0, more = 0;
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++) {
            if (!sel_same_cfg(&t[i].cfg, &t[j].cfg)) continue;
            if (shown++ < 5)
                fprintf(stderr, "select: warning: task %s has the configuration of task %s "
                        "(the two train the same, bit for bit)\n", t[i].name, t[j].name);
            else more++;
            break;
        }
    if (more) fprintf(stderr, "select: warning: %d more tasks repeat an earlier one\n", more);
}

/* ---- the grid ----------------------------------------------------------------- */

int sel_expand(const sel_space *sp, pm_select_task *t, int *n) {
    long total = 1;
    for (int k = 0; k < SEL_K_COUNT; k++) {
        if (sp->kind[k] != SEL_LIST)
            return pm_cli_fail("select: %s is a range (lo..hi): add --sample N to draw N tasks "
                               "from it", sel_key_flags[k]);
        total *= sp->n[k] ? sp->n[k] : 1;
        if (total > SEL_MAX_TASKS)
            return pm_cli_fail("select: the lists make over %d tasks; give fewer values, or "
                               "draw some with --sample N", SEL_MAX_TASKS);
    }
    for (long i = 0; i < total; i++) {
        double x[SEL_K_COUNT];
        long r = i;
        for (int k = SEL_K_COUNT - 1; k >= 0; k--) {
            int nk = sp->n[k] ? sp->n[k] : 1;
            x[k] = sp->n[k] ? sp->v[k][r % nk] : NAN;
            r /= nk;
        }
        if (make_task(x, &t[*n], *n)) return 1;
        (*n)++;
    }
    return 0;
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
static double draw(const sel_space *sp, int k, uint64_t *s) {
    if (sp->kind[k] == SEL_LIST) return sp->n[k] ? sp->v[k][next_u64(s) % (uint64_t)sp->n[k]] : NAN;
    double lo = sp->lo[k], hi = sp->hi[k], u = next_unit(s), x;
    if (!is_real(k)) hi += 1; /* the integers lo..hi: [lo, hi + 1) floored */
    x = sp->kind[k] == SEL_LOG ? exp(log(lo) + u * (log(hi) - log(lo))) : lo + u * (hi - lo);
    if (!is_real(k)) x = floor(x), hi -= 1;
    return x < lo ? lo : x > hi ? hi : x; /* exp's rounding kept inside */
}

int sel_sample(const sel_space *sp, int count, uint64_t seed, pm_select_task *t, int *n) {
    double distinct = 1; /* lists alone hold at most their product */
    int ranged = 0;
    for (int k = 0; k < SEL_K_COUNT; k++) {
        ranged |= sp->kind[k] != SEL_LIST;
        if (sp->kind[k] == SEL_LIST && sp->n[k]) distinct *= sp->n[k];
    }
    if (!ranged && distinct < count)
        return pm_cli_fail("select: --sample %d: the lists make only %.0f distinct tasks; sample "
                           "at most that many, or give a range (lo..hi)", count, distinct);
    uint64_t s = seed;
    long draws = 0, limit = 100L * count + 10000, bad = 0, again = 0;
    char why[sizeof(pm_err)] = "";
    while (*n < count && draws < limit) {
        double x[SEL_K_COUNT];
        draws++;
        for (int k = 0; k < SEL_K_COUNT; k++) x[k] = draw(sp, k, &s);
        pm_select_task *c = &t[*n];
        *c = (pm_select_task){0};
        task_cfg(x, &c->cfg);
        if (task_bad(&c->cfg, why, sizeof why)) {
            bad++;
            continue;
        }
        int seen = 0;
        for (int j = 0; j < *n && !seen; j++) seen = sel_same_cfg(&t[j].cfg, &c->cfg);
        if (seen) {
            again++;
            continue;
        }
        snprintf(c->name, sizeof c->name, "t%d", *n);
        (*n)++;
    }
    if (*n < count)
        return pm_cli_fail("select: --sample %d: %d distinct tasks in %ld draws (%ld repeated a "
                           "task, %ld were no model%s%s); widen the ranges or sample fewer",
                           count, *n, draws, again, bad, bad ? ", as: " : "", bad ? why : "");
    return 0;
}

/* ---- the tasks file -------------------------------------------------------------- */

/* A task's name from the tasks file: letters, digits, '_', '.' and '-' (it
 * names files under --resume and rows in every output). */
static int good_name(const char *s, size_t n) {
    if (n < 1 || n > 31) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-') return 0;
    return s[0] != '.';
}

static int key_of(const char *name) {
    for (int k = 0; k < SEL_K_COUNT; k++)
        if (!strcmp(name, sel_key_names[k])) return k;
    return -1;
}

/* One line of the tasks file, [b, e): its values into x (NAN: default) and
 * its name (empty: none). Returns -1 on a bad pair (printed), else the
 * number of pairs read. */
static int parse_task_line(const char *file, int line, const char *b, const char *e, double *x,
                           char name[32]) {
    int any = 0;
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
        else if (named && !good_name(eq + 1, vl))
            bad = "is not a name (1 to 31 of letters, digits, _ . -, not starting with .)";
        else if (named) memcpy(name, eq + 1, vl), name[vl] = 0;
        else if (k < 0)
            bad = "has an unknown key (name, lr, layers, dim, heads, ctx, batch, "
                  "microbatches, warmup, seed, steps, weight_decay)";
        else if (parse_value(k, eq + 1, vl, &x[k])) {
            pm_cli_fail("%s:%d: '%.*s': %s must be %s", file, line, (int)(q - p), p, key,
                        value_rule(k));
            return -1;
        }
        if (bad) {
            pm_cli_fail("%s:%d: '%.*s' %s", file, line, (int)(q - p), p, bad);
            return -1;
        }
        any++;
        p = q;
    }
    return any;
}

/* Task i (from line at[i]) takes a name no earlier task has. */
static int name_free(const char *file, const pm_select_task *t, const int *at, int i, int given) {
    for (int j = 0; j < i; j++)
        if (!strcmp(t[j].name, t[i].name))
            return pm_cli_fail("%s:%d: the name %s%s is taken by the task of line %d; give this "
                               "one name=NAME", file, at[i], t[i].name,
                               given ? "" : " (its default)", at[j]);
    return 0;
}

int sel_read_tasks(const char *file, pm_select_task *t, int *n) {
    char *text = NULL;
    size_t len = 0;
    pm_err e;
    if (pm_read_file(file, PM_TEXT_MAX, &text, &len, &e)) return pm_cli_fail("%s", e.msg);
    const char *nul = memchr(text, 0, len); /* it would end a value early, unseen */
    if (nul) {
        int at_line = 1;
        for (const char *c = text; c < nul; c++) at_line += *c == '\n';
        pm_free(text);
        return pm_cli_fail("%s:%d: a NUL byte (offset %zu): a tasks file is text, key=value "
                           "pairs", file, at_line, (size_t)(nul - text));
    }
    int line = 0, rc = 0, *at = pm_malloc(SEL_MAX_TASKS * sizeof *at); /* each task's line */
    if (!at) rc = pm_cli_fail("select: out of memory");
    for (size_t i = 0; i < len && !rc;) {
        size_t end = i;
        while (end < len && text[end] != '\n') end++;
        double x[SEL_K_COUNT];
        char name[32];
        for (int k = 0; k < SEL_K_COUNT; k++) x[k] = NAN;
        int got = parse_task_line(file, ++line, text + i, text + end, x, name);
        if (got < 0) rc = 1;
        else if (got && *n == SEL_MAX_TASKS)
            rc = pm_cli_fail("%s: more than %d tasks", file, SEL_MAX_TASKS);
        else if (got && !(rc = make_task(x, &t[*n], *n))) {
            if (name[0]) snprintf(t[*n].name, sizeof t[*n].name, "%s", name);
            at[*n] = line;
            rc = name_free(file, t, at, *n, name[0] != 0);
            (*n)++;
        }
        i = end + 1;
    }
    pm_free(text), pm_free(at);
    if (!rc && !*n) rc = pm_cli_fail("%s: no tasks in it", file);
    return rc;
}
