/* block.c: building blocks: one microbatch's passes on every device with
 * slot offsets, repeated every T slots (shared/reference/schedules.md,
 * "Building blocks"). Parses and writes the block text format, builds the
 * named V blocks (v-min, v-half, 1f1b-v), and analyses a block: legality,
 * lifespans and the memory theorem's bound.
 *
 * THE BLOCK TEXT FORMAT ("block v1")
 *
 *   # anything after '#' is a comment; blank lines are ignored
 *   block v1            first non-blank line: magic and format version
 *   devices 4           p, 1..4096
 *   placement v         single | loop | v  (how stages sit on devices)
 *   chunks 2            stages per device: optional for single (1) and v (2),
 *                       required for loop (2..64)
 *   interval 6          T, the slots between two microbatches, 1..4096
 *   # device chunk pass offset [slots]
 *   0 0 F 0
 *   0 1 F 7
 *   0 1 B 8
 *   0 1 W 10
 *   ...
 *
 * Header lines come first, each once, in any order. Then one line per pass:
 * device (0..p-1), chunk on that device (0..chunks-1), kind (F, B, W or BW,
 * any case), start offset in slots (0..1048576) and optionally how many
 * consecutive slots the pass occupies (1..T; default 1, and 2 for BW). In
 * the papers' units every pass of a V chunk is 1 slot and BW is 2. Tokens
 * are separated by spaces or tabs; CRLF line ends are accepted.
 *   Chunk c of device i is stage i (single), c*p + i (loop), or i for
 * chunk 0 and 2p-1-i for chunk 1 (v).
 *   Every (device, chunk) needs one F and either one BW or one B and one W.
 * W lines may be left out: each missing W then takes, in the order the
 * device's B passes run, the first slot free on that device at or after its
 * B ends (the papers' rule for V-Min and V-Half), computed for the steady
 * state of the repeated block; the filled-in offsets are what `pipemem block`
 * and pm_block_write print.
 *   Dependencies, in slots: F of stage s starts at or after F of stage s-1
 * ends; B (or BW) of stage s at or after B/BW of stage s+1 ends (the last
 * stage's after its own F); W after its own B. A block breaking one is a
 * parse error naming the line.
 *   Legality is not a parse error: a block is legal when no two passes of a
 * device occupy the same slot modulo T; pm_block_analyze reports the first
 * collision (device and residue). Errors name the line and column.
 *
 * Invariants of a pm_block this file returns: 1 <= p <= 4096, v fits the
 * placement, 1 <= T <= 4096, p*T <= 2^22, every pass in range with
 * 1 <= dur <= T, one pass per (stage, kind), the shape and dependency rules
 * above hold. The parser never reads past len and never trusts a number it
 * has not range-checked. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"

#define MAX_DEV_X_T (1 << 22) /* p * T: bounds the per-device residue work */

/* ---- shared helpers ---------------------------------------------------- */

int pm_block_stage(const pm_block *b, int dev, int chunk) {
    switch (b->place) {
    case PM_PLACE_SINGLE: return dev;
    case PM_PLACE_LOOP: return chunk * b->p + dev;
    default: return chunk == 0 ? dev : 2 * b->p - 1 - dev;
    }
}

int pm_block_index(const pm_block *b, int *tab) {
    int S = b->p * b->v;
    for (int i = 0; i < S * PM_PASS_COUNT; i++) tab[i] = -1;
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->dev < 0 || x->dev >= b->p || x->chunk < 0 || x->chunk >= b->v || x->kind < 0 ||
            x->kind >= PM_PASS_COUNT)
            return 0;
        int *slot = &tab[pm_block_stage(b, x->dev, x->chunk) * PM_PASS_COUNT + x->kind];
        if (*slot >= 0) return 0;
        *slot = i;
    }
    return 1;
}

/* Inverse of pm_block_stage. */
static void stage_home(const pm_block *b, int s, int *dev, int *chunk) {
    switch (b->place) {
    case PM_PLACE_SINGLE: *dev = s, *chunk = 0; break;
    case PM_PLACE_LOOP: *dev = s % b->p, *chunk = s / b->p; break;
    default: *dev = s < b->p ? s : 2 * b->p - 1 - s, *chunk = s < b->p ? 0 : 1;
    }
}

static int default_dur(int kind) { return kind == PM_PASS_BW ? 2 : 1; }

void pm_block_free(pm_block *b) {
    if (!b) return;
    pm_free(b->pass);
    *b = (pm_block){0};
}

static pm_status block_alloc(pm_block *b, pm_place place, int p, int v, int T, int cap,
                             pm_err *err) {
    *b = (pm_block){.place = place, .p = p, .v = v, .T = T};
    b->pass = pm_calloc((size_t)(cap > 0 ? cap : 1), sizeof *b->pass);
    if (!b->pass) return pm_errf(err, PM_ERR_NOMEM, "out of memory for a block of %d passes", cap);
    return PM_OK;
}

/* ---- shape and dependency check ---------------------------------------- */

/* Message prefix naming pass i, with its line when the caller has lines. */
static void pass_name(char *buf, size_t n, const pm_block *b, int i, const int *line) {
    const pm_block_pass *x = &b->pass[i];
    int at = line ? snprintf(buf, n, "line %d: ", line[i]) : 0;
    if (at < 0 || (size_t)at >= n) at = 0;
    snprintf(buf + at, n - (size_t)at, "device %d chunk %d %s at slot %d", x->dev, x->chunk,
             pm_pass_names[x->kind], x->off);
}

/* Pass i must start at or after pass j ends. */
static pm_status need_after(const pm_block *b, int i, int j, const char *what, const int *line,
                            pm_err *err) {
    const pm_block_pass *x = &b->pass[i], *y = &b->pass[j];
    if ((int64_t)x->off >= (int64_t)y->off + y->dur) return PM_OK;
    char a[96], c[96];
    pass_name(a, sizeof a, b, i, line);
    pass_name(c, sizeof c, b, j, NULL);
    return pm_errf(err, PM_ERR_FORMAT, "%s starts before %s (%s) ends at slot %d", a, what, c,
                   y->off + y->dur);
}

/* Ranges, one pass per (stage, kind), F and (BW or B+W) per stage, and the
 * dependency order in slots. line may be NULL. W may be missing only when
 * allow_missing_w (the parser fills it afterwards). */
static pm_status check_block(const pm_block *b, const int *line, int allow_missing_w,
                             pm_err *err) {
    if (b->p < 1 || b->p > PM_BLOCK_MAX_DEVICES || b->v < 1 || b->v > PM_BLOCK_MAX_CHUNKS ||
        (b->place == PM_PLACE_V && b->v != 2) || (b->place == PM_PLACE_SINGLE && b->v != 1) ||
        b->T < 1 || b->T > PM_BLOCK_MAX_INTERVAL || (int64_t)b->p * b->T > MAX_DEV_X_T ||
        b->n < 0 || (int64_t)b->n > (int64_t)b->p * b->v * 3)
        return pm_errf(err, PM_ERR_ARG, "block header out of range (p=%d chunks=%d T=%d)", b->p,
                       b->v, b->T);
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->off < 0 || x->off > PM_BLOCK_MAX_OFFSET || x->dur < 1 || x->dur > b->T ||
            x->dev < 0 || x->dev >= b->p || x->chunk < 0 || x->chunk >= b->v || x->kind < 0 ||
            x->kind >= PM_PASS_COUNT) {
            char a[96];
            snprintf(a, sizeof a, "%s%d", line ? "line " : "pass ", line ? line[i] : i);
            return pm_errf(err, PM_ERR_FORMAT, "%s: pass out of range", a);
        }
    }
    int S = b->p * b->v;
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    if (!tab) return pm_errf(err, PM_ERR_NOMEM, "out of memory checking a block");
    pm_status st = PM_OK;
    if (!pm_block_index(b, tab)) {
        st = pm_errf(err, PM_ERR_FORMAT, "block lists a (device, chunk, pass) twice");
        goto done;
    }
    for (int s = 0; s < S && !st; s++) {
        int f = tab[s * 4 + PM_PASS_F], bb = tab[s * 4 + PM_PASS_B], w = tab[s * 4 + PM_PASS_W],
            bw = tab[s * 4 + PM_PASS_BW];
        int dev, chunk;
        stage_home(b, s, &dev, &chunk);
        if (f < 0)
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has no F pass (add '%d %d F <offset>')", dev, chunk,
                         dev, chunk);
        else if (bw >= 0 && (bb >= 0 || w >= 0))
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has BW and also B or W; give BW or B and W", dev,
                         chunk);
        else if (bw < 0 && bb < 0)
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has no backward pass (add a B line, or BW)", dev,
                         chunk);
        else if (bw < 0 && w < 0 && !allow_missing_w)
            st = pm_errf(err, PM_ERR_FORMAT, "device %d chunk %d has B but no W", dev, chunk);
        if (st) break;
        int back = bw >= 0 ? bw : bb;
        if (s > 0)
            st = need_after(b, f, tab[(s - 1) * 4 + PM_PASS_F], "the F of the stage before",
                            line, err);
        if (!st && s == S - 1) st = need_after(b, back, f, "its own F", line, err);
        if (!st && s < S - 1) {
            int nb = tab[(s + 1) * 4 + PM_PASS_B] >= 0 ? tab[(s + 1) * 4 + PM_PASS_B]
                                                       : tab[(s + 1) * 4 + PM_PASS_BW];
            if (nb >= 0) st = need_after(b, back, nb, "the backward of the stage after", line, err);
            if (!st) st = need_after(b, back, f, "its own F", line, err);
        }
        if (!st && w >= 0) st = need_after(b, w, bb, "its own B", line, err);
    }
done:
    pm_free(tab);
    return st;
}

pm_status pm_block_check(const pm_block *b, pm_err *err) { return check_block(b, NULL, 0, err); }

/* ---- filling in W passes ----------------------------------------------- */

typedef struct {
    int64_t ready; /* slot the B ends (W may start here) */
    int bidx;      /* index of the B in b->pass */
} arrival;

static int cmp_arrival(const void *a, const void *b) {
    const arrival *x = a, *y = b;
    return x->ready < y->ready ? -1 : x->ready > y->ready ? 1 : x->bidx - y->bidx;
}

/* Fills the missing W passes of device d: the device's B passes whose W is
 * missing arrive (at the end of the B) every T slots; the slots whose
 * residue no pass of d occupies serve them first come, first served. From
 * an empty queue the queue length repeats after one interval when arrivals
 * do not outnumber free residues, so simulating from slot X and reading the
 * services of the arrivals of [X+2T, X+3T) gives the steady state. */
static pm_status fill_w_dev(pm_block *b, int d, const int *mine, int nmine, const int *tab,
                            unsigned char *occ, arrival *arr, int64_t *served, pm_err *err) {
    int T = b->T, na = 0, nfree = 0;
    memset(occ, 0, (size_t)T);
    for (int q = 0; q < nmine; q++) {
        int i = mine[q];
        const pm_block_pass *x = &b->pass[i];
        for (int k = 0; k < x->dur; k++) occ[(x->off + k) % T] = 1;
        if (x->kind == PM_PASS_B &&
            tab[pm_block_stage(b, d, x->chunk) * PM_PASS_COUNT + PM_PASS_W] < 0)
            arr[na++] = (arrival){(int64_t)x->off + x->dur, i};
    }
    if (!na) return PM_OK;
    for (int r = 0; r < T; r++) nfree += !occ[r];
    if (nfree < na)
        return pm_errf(err, PM_ERR_FORMAT,
                       "device %d: its passes leave %d free slot(s) in the interval of %d, too few "
                       "for its %d missing W pass(es); raise 'interval' or list the W passes",
                       d, nfree, T, na);
    qsort(arr, (size_t)na, sizeof *arr, cmp_arrival);
    int64_t X = (arr[na - 1].ready / T + 1) * (int64_t)T, end = X + (int64_t)(na + 6) * T;
    /* queue of (arrival index, microbatch k) in FIFO order; at most na per
     * interval enter over the 3 intervals read, plus what is still waiting */
    int64_t head = 0, tail = 0, qcap = (int64_t)na * ((end - X) / T + 1);
    int64_t *q = pm_malloc((size_t)qcap * 2 * sizeof *q);
    if (!q) return pm_errf(err, PM_ERR_NOMEM, "out of memory filling W passes");
    for (int i = 0; i < na; i++) served[i] = -1;
    int left = na;
    for (int64_t t = X; t < end && left; t++) {
        if (t < X + 3 * (int64_t)T)
            for (int i = 0; i < na; i++)
                if ((t - arr[i].ready) % T == 0 && tail < qcap)
                    q[2 * tail] = i, q[2 * tail + 1] = (t - arr[i].ready) / T, tail++;
        if (occ[t % T] || head == tail) continue;
        int i = (int)q[2 * head];
        int64_t k = q[2 * head + 1];
        head++;
        /* arrivals of the third interval are in the steady state */
        if (arr[i].ready + k * T >= X + 2 * (int64_t)T && served[i] < 0) {
            served[i] = t - k * T;
            left--;
        }
    }
    pm_free(q);
    if (left)
        return pm_errf(err, PM_ERR_FORMAT,
                       "device %d: the W passes do not settle into the interval; list them", d);
    for (int i = 0; i < na; i++) {
        if (served[i] > PM_BLOCK_MAX_OFFSET)
            return pm_errf(err, PM_ERR_FORMAT, "device %d: a filled-in W lands past slot %d", d,
                           PM_BLOCK_MAX_OFFSET);
        const pm_block_pass *bp = &b->pass[arr[i].bidx];
        b->pass[b->n++] = (pm_block_pass){d, bp->chunk, PM_PASS_W, (int)served[i], 1};
    }
    return PM_OK;
}

/* Fills every missing W (the pass array has room for 3 passes per stage).
 * The passes are grouped by device first (counting sort) so the work is
 * linear in the block, not devices x passes. */
static pm_status fill_w(pm_block *b, pm_err *err) {
    int S = b->p * b->v, n0 = b->n;
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    int *first = pm_calloc((size_t)b->p + 1, sizeof *first);
    int *byd = pm_malloc((size_t)(n0 ? n0 : 1) * sizeof *byd);
    unsigned char *occ = pm_malloc((size_t)b->T);
    arrival *arr = pm_malloc((size_t)b->v * sizeof *arr);
    int64_t *served = pm_malloc((size_t)b->v * sizeof *served);
    pm_status st = PM_OK;
    if (!tab || !first || !byd || !occ || !arr || !served) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory filling W passes");
        goto done;
    }
    if (!pm_block_index(b, tab)) {
        st = pm_errf(err, PM_ERR_FORMAT, "block lists a (device, chunk, pass) twice");
        goto done;
    }
    for (int i = 0; i < n0; i++) first[b->pass[i].dev + 1]++;
    for (int d = 0; d < b->p; d++) first[d + 1] += first[d];
    for (int i = 0, *at = first; i < n0; i++) byd[at[b->pass[i].dev]++] = i;
    for (int d = b->p; d > 0; d--) first[d] = first[d - 1]; /* undo the bumps */
    first[0] = 0;
    for (int d = 0; d < b->p && !st; d++)
        st = fill_w_dev(b, d, byd + first[d], first[d + 1] - first[d], tab, occ, arr, served, err);
done:
    pm_free(first);
    pm_free(byd);
    pm_free(tab);
    pm_free(occ);
    pm_free(arr);
    pm_free(served);
    return st;
}

/* ---- parser ------------------------------------------------------------ */

typedef struct {
    const char *s; /* start of the token in the text */
    int len;       /* bytes */
    int col;       /* 1-based column */
} tok;

#define MAX_TOK 8

/* Splits one line (without its '\n') into tokens; stops at '#'. Returns the
 * number of tokens, at most MAX_TOK (more are reported by the caller as
 * "unexpected" using the last slot). */
static int tokenize(const char *line, size_t n, tok *t) {
    int k = 0;
    size_t i = 0;
    while (i < n) {
        char c = line[i];
        if (c == '#') break;
        if (c == ' ' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && line[j] != ' ' && line[j] != '\t' && line[j] != '\r' && line[j] != '#')
            j++;
        if (k < MAX_TOK) t[k++] = (tok){line + i, (int)(j - i > 64 ? 64 : j - i), (int)i + 1};
        else return MAX_TOK + 1;
        i = j;
    }
    return k;
}

/* A token as printable text for an error message. */
static const char *show(const tok *t, char *buf, size_t n) {
    size_t k = 0;
    for (int i = 0; i < t->len && k + 4 < n; i++) {
        unsigned char c = (unsigned char)t->s[i];
        buf[k++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (t->len > 24 && k > 24) k = 24, buf[k++] = '.', buf[k++] = '.';
    buf[k] = 0;
    return buf;
}

static int tok_is(const tok *t, const char *word) {
    size_t n = strlen(word);
    if ((size_t)t->len != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)t->s[i]) != word[i]) return 0;
    return 1;
}

typedef struct {
    int line;  /* current line, 1-based */
    pm_err *err;
} pctx;

static pm_status perr(pctx *c, int col, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pm_status perr(pctx *c, int col, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pm_errf(c->err, PM_ERR_FORMAT, "line %d, column %d: %s", c->line, col, msg);
}

/* Parses a decimal integer in [lo, hi] from t; names `what` on error. */
static pm_status tok_int(pctx *c, const tok *t, const char *what, int lo, int hi, int *out) {
    char buf[80];
    int64_t x = 0;
    if (t->len == 0 || t->len > 10) goto bad;
    for (int i = 0; i < t->len; i++) {
        if (t->s[i] < '0' || t->s[i] > '9') goto bad;
        x = x * 10 + (t->s[i] - '0');
    }
    if (x < lo || x > hi)
        return perr(c, t->col, "%s %lld out of range %d..%d", what, (long long)x, lo, hi);
    *out = (int)x;
    return PM_OK;
bad:
    return perr(c, t->col, "%s must be a whole number %d..%d, got '%s'", what, lo, hi,
                show(t, buf, sizeof buf));
}

typedef struct {
    int magic, p, place, v, T; /* line each header item was seen on (0 = not yet) */
} seen;

static pm_status parse_header(pctx *c, pm_block *b, seen *h, const tok *t, int nt) {
    char buf[80];
    const char *key = tok_is(&t[0], "devices")     ? "devices"
                      : tok_is(&t[0], "placement") ? "placement"
                      : tok_is(&t[0], "chunks")    ? "chunks"
                      : tok_is(&t[0], "interval")  ? "interval"
                                                   : NULL;
    if (!key)
        return perr(c, t[0].col,
                    "unknown line '%s' (expected devices, placement, chunks, interval, or a pass "
                    "'DEVICE CHUNK KIND OFFSET [SLOTS]')",
                    show(&t[0], buf, sizeof buf));
    if (b->pass)
        return perr(c, t[0].col, "'%s' after the first pass; header lines come first", key);
    if (nt < 2) return perr(c, t[0].col + t[0].len, "'%s' needs a value", key);
    if (nt > 2)
        return perr(c, t[2].col, "unexpected '%s' after the %s value", show(&t[2], buf, sizeof buf),
                    key);
    int *line = key[0] == 'd' ? &h->p : key[0] == 'p' ? &h->place : key[0] == 'c' ? &h->v : &h->T;
    if (*line) return perr(c, t[0].col, "'%s' given twice (first on line %d)", key, *line);
    *line = c->line;
    if (key[0] == 'd') return tok_int(c, &t[1], "devices", 1, PM_BLOCK_MAX_DEVICES, &b->p);
    if (key[0] == 'c') return tok_int(c, &t[1], "chunks", 1, PM_BLOCK_MAX_CHUNKS, &b->v);
    if (key[0] == 'i') return tok_int(c, &t[1], "interval", 1, PM_BLOCK_MAX_INTERVAL, &b->T);
    for (int k = 0; k < PM_PLACE_COUNT; k++)
        if (tok_is(&t[1], pm_place_names[k])) {
            b->place = (pm_place)k;
            return PM_OK;
        }
    return perr(c, t[1].col, "placement must be single, loop or v, got '%s'",
                show(&t[1], buf, sizeof buf));
}

/* Completes the header when the first pass line arrives (or at the end):
 * chunks implied by the placement, every item present, and allocates room
 * for 3 passes per stage. */
static pm_status finish_header(pctx *c, pm_block *b, seen *h, int col, int **lines, int **dup) {
    if (!h->p) return perr(c, col, "the header has no 'devices' line");
    if (!h->place) return perr(c, col, "the header has no 'placement' line (single, loop or v)");
    if (!h->T) return perr(c, col, "the header has no 'interval' line");
    int want = b->place == PM_PLACE_SINGLE ? 1 : b->place == PM_PLACE_V ? 2 : 0;
    if (!h->v) {
        if (!want) return perr(c, col, "placement loop needs a 'chunks' line (2..64)");
        b->v = want;
    }
    if (want && b->v != want)
        return pm_errf(c->err, PM_ERR_FORMAT,
                       "line %d: placement %s has %d chunk(s) per device, not %d", h->v,
                       pm_place_names[b->place], want, b->v);
    if (b->place == PM_PLACE_LOOP && b->v < 2)
        return pm_errf(c->err, PM_ERR_FORMAT, "line %d: placement loop needs chunks >= 2", h->v);
    if ((int64_t)b->p * b->T > MAX_DEV_X_T)
        return pm_errf(c->err, PM_ERR_FORMAT,
                       "line %d: devices x interval = %lld is too large (at most %d)", h->T,
                       (long long)b->p * b->T, MAX_DEV_X_T);
    if ((int64_t)b->p * b->v > PM_BLOCK_MAX_STAGES)
        return pm_errf(c->err, PM_ERR_FORMAT, "line %d: devices x chunks is too large (at most %d)",
                       h->v ? h->v : h->p, PM_BLOCK_MAX_STAGES);
    size_t cap = (size_t)b->p * (size_t)b->v * 3;
    b->pass = pm_calloc(cap, sizeof *b->pass);
    *lines = pm_calloc(cap, sizeof **lines);
    *dup = pm_calloc((size_t)b->p * (size_t)b->v * PM_PASS_COUNT, sizeof **dup);
    if (!b->pass || !*lines || !*dup)
        return pm_errf(c->err, PM_ERR_NOMEM, "out of memory for a block of %zu passes", cap);
    return PM_OK;
}

/* Adds one pass line; lines[i] is the line of pass i, dup[(dev, chunk,
 * kind)] the line that first gave it (0 if none). */
static pm_status parse_pass(pctx *c, pm_block *b, const tok *t, int nt, int *lines, int *dup) {
    char buf[80];
    if (nt > MAX_TOK || nt > 5)
        return perr(c, t[nt > 5 ? 5 : 0].col,
                    "unexpected '%s' after the pass (a pass line is DEVICE CHUNK KIND OFFSET "
                    "[SLOTS])",
                    show(&t[nt > 5 ? 5 : 0], buf, sizeof buf));
    if (nt < 4)
        return perr(c, t[nt - 1].col + t[nt - 1].len,
                    "a pass line is DEVICE CHUNK KIND OFFSET [SLOTS]; this one has %d field(s)",
                    nt);
    pm_block_pass x = {0};
    pm_status st;
    if ((st = tok_int(c, &t[0], "device", 0, b->p - 1, &x.dev))) return st;
    if ((st = tok_int(c, &t[1], "chunk", 0, b->v - 1, &x.chunk))) return st;
    static const char *const lower[PM_PASS_COUNT] = {"f", "b", "w", "bw"};
    x.kind = -1;
    for (int k = 0; k < PM_PASS_COUNT; k++)
        if (tok_is(&t[2], lower[k])) x.kind = k;
    if (x.kind < 0)
        return perr(c, t[2].col, "pass kind must be F, B, W or BW, got '%s'",
                    show(&t[2], buf, sizeof buf));
    if ((st = tok_int(c, &t[3], "offset", 0, PM_BLOCK_MAX_OFFSET, &x.off))) return st;
    x.dur = default_dur(x.kind);
    if (nt == 5 && (st = tok_int(c, &t[4], "slots", 1, b->T, &x.dur))) return st;
    if (x.dur > b->T)
        return perr(c, t[2].col, "a %s pass takes %d slots, more than the interval %d",
                    pm_pass_names[x.kind], x.dur, b->T);
    int *first = &dup[((int64_t)x.dev * b->v + x.chunk) * PM_PASS_COUNT + x.kind];
    if (*first)
        return perr(c, t[0].col, "device %d chunk %d %s given twice (first on line %d)", x.dev,
                    x.chunk, pm_pass_names[x.kind], *first);
    if ((int64_t)b->n >= (int64_t)b->p * b->v * 3)
        return perr(c, t[0].col, "more passes than devices x chunks x 3 (give B and W, or BW)");
    *first = c->line;
    lines[b->n] = c->line;
    b->pass[b->n++] = x;
    return PM_OK;
}

pm_status pm_block_parse(pm_block *b, const char *text, size_t len, pm_err *err) {
    *b = (pm_block){0};
    pctx c = {0, err};
    seen h = {0};
    int *lines = NULL, *dup = NULL;
    pm_status st = PM_OK;
    size_t i = 0;
    if (!text) len = 0;
    while (i < len || (len == 0 && c.line == 0)) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        c.line++;
        tok t[MAX_TOK];
        int nt = len ? tokenize(text + i, j - i, t) : 0;
        i = j + 1;
        if (nt == 0) continue;
        if (!h.magic) {
            if (nt < 2 || !tok_is(&t[0], "block") || !tok_is(&t[1], "v1") || nt > 2) {
                st = perr(&c, t[0].col, "expected 'block v1' as the first line of a block file");
                goto fail;
            }
            h.magic = c.line;
            continue;
        }
        if (t[0].s[0] >= '0' && t[0].s[0] <= '9') {
            if (!b->pass && (st = finish_header(&c, b, &h, t[0].col, &lines, &dup))) goto fail;
            if ((st = parse_pass(&c, b, t, nt, lines, dup))) goto fail;
        } else if ((st = parse_header(&c, b, &h, t, nt))) {
            goto fail;
        }
    }
    if (!h.magic) {
        c.line = c.line ? c.line : 1;
        st = perr(&c, 1, "empty block file; expected 'block v1' as the first line");
        goto fail;
    }
    if (!b->pass) {
        if ((st = finish_header(&c, b, &h, 1, &lines, &dup))) goto fail;
    }
    /* Shape and dependencies first (with lines), then fill the missing W
     * passes and check the result once more (the filled-in W follow their
     * B by construction, so this only guards the fill itself). */
    if ((st = check_block(b, lines, 1, err))) goto fail;
    if ((st = fill_w(b, err))) goto fail;
    if ((st = check_block(b, NULL, 0, err))) goto fail;
    pm_free(lines);
    pm_free(dup);
    return PM_OK;
fail:
    pm_free(lines);
    pm_free(dup);
    pm_block_free(b);
    return st;
}

/* ---- writer ------------------------------------------------------------ */

static int cmp_pass(const void *a, const void *b) {
    const pm_block_pass *x = a, *y = b;
    if (x->dev != y->dev) return x->dev - y->dev;
    if (x->off != y->off) return x->off - y->off;
    if (x->chunk != y->chunk) return x->chunk - y->chunk;
    return x->kind - y->kind;
}

pm_status pm_block_write(FILE *f, const pm_block *b) {
    pm_block_pass *v = pm_malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof *v);
    if (!v) return PM_ERR_NOMEM;
    if (b->n) memcpy(v, b->pass, (size_t)b->n * sizeof *v);
    qsort(v, (size_t)b->n, sizeof *v, cmp_pass);
    fprintf(f, "block v1\ndevices %d\nplacement %s\n", b->p, pm_place_names[b->place]);
    if (b->place == PM_PLACE_LOOP) fprintf(f, "chunks %d\n", b->v);
    fprintf(f, "interval %d\n# device chunk pass offset [slots]\n", b->T);
    for (int i = 0; i < b->n; i++) {
        fprintf(f, "%d %d %s %d", v[i].dev, v[i].chunk, pm_pass_names[v[i].kind], v[i].off);
        if (v[i].dur != default_dur(v[i].kind)) fprintf(f, " %d", v[i].dur);
        fputc('\n', f);
    }
    pm_free(v);
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

/* ---- named blocks ------------------------------------------------------ */

/* V-Min and V-Half: F and B offsets from the papers' formulas (schedules.md;
 * for device i, a shift a keeps the residues distinct when p is divisible by
 * 3, resp. even), W filled in by the first-free-slot rule. */
static pm_status named_formula(pm_block *b, int half, int p, pm_err *err) {
    pm_status st = block_alloc(b, PM_PLACE_V, p, 2, 6, 6 * p, err);
    if (st) return st;
    int a = half ? (p % 2 == 0 ? 3 : 0) : (p % 3 == 0 ? 2 : 0);
    for (int i = 0; i < p; i++) {
        int f0 = half ? 2 * i : i, f1 = half ? 3 * p - 2 - i : 2 * p - 1 - i;
        int b1 = half ? 3 * p + a + 2 * i - 1 : 2 * p + a + i;
        int b0 = half ? 6 * p + a - 2 - i : 4 * p + a - 1 - i;
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_F, f0, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_F, f1, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_B, b1, 1};
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_B, b0, 1};
    }
    if ((st = fill_w(b, err)) || (st = check_block(b, NULL, 0, err))) pm_block_free(b);
    return st;
}

/* Can passes of the given durations still be packed, without overlap, into
 * the residues mod T not set in occ (T small)? Tries every free start. */
static int packable(unsigned char *occ, int T, const int *dur, int n) {
    if (n == 0) return 1;
    for (int r = 0; r < T; r++) {
        int ok = 1;
        for (int k = 0; k < dur[0] && ok; k++) ok = !occ[(r + k) % T];
        if (!ok) continue;
        for (int k = 0; k < dur[0]; k++) occ[(r + k) % T] = 1;
        ok = packable(occ, T, dur + 1, n - 1);
        for (int k = 0; k < dur[0]; k++) occ[(r + k) % T] = 0;
        if (ok) return 1;
    }
    return 0;
}

/* 1F1B-V: V placement, fused BW of 2 slots, T = 6 (F0, F1, BW1, BW0 fill an
 * interval exactly). Passes go in dependency order (F down and back up the
 * V: steps 0..S-1 are the F of stages 0..S-1, steps S..2S-1 the BW of stages
 * S-1..0), each at a slot after its dependency whose residues are free on
 * its device and leave the device's remaining passes room to fit. A
 * depth-first search tries, for every step, the first 3 such slots, earliest
 * first, so its first leaf is the greedy block; within a node budget it
 * keeps the block with the smallest memory bound (largest per-device sum of
 * ceil(lifespan / T), then the total), pruning with a lower bound: a stage
 * whose BW is not placed yet ends no earlier than the remaining chain of
 * passes allows. */
enum { V1_T = 6, V1_BRANCH = 3 };

typedef struct {
    int p, S;
    unsigned char *occ; /* (p, T) residues taken on each device */
    int *off;           /* (2S) slot of each step placed so far */
    int *best;          /* (2S) the best complete block found */
    int *cnt;           /* (p) scratch: per-device sums */
    int best_max, best_sum; /* its objective; best_max < 0 until a leaf */
    long nodes;         /* node budget left */
} v1_search;

static void v1_step(const v1_search *g, int step, int *stage, int *dev, int *chunk, int *dur) {
    int fwd = step < g->S;
    *stage = fwd ? step : 2 * g->S - 1 - step;
    *dev = *stage < g->p ? *stage : g->S - 1 - *stage;
    *chunk = *stage < g->p ? 0 : 1;
    *dur = fwd ? 1 : 2;
}

/* Lower bound (or, at a leaf, the value) of the objective with steps
 * 0..k-1 placed and the next pass ready at slot `ready`. */
static void v1_bound(v1_search *g, int k, int ready, int *mx, int *sum) {
    int S = g->S;
    for (int d = 0; d < g->p; d++) g->cnt[d] = 0;
    for (int s = 0; s < S; s++) {
        int dev = s < g->p ? s : S - 1 - s, j = 2 * S - 1 - s, l = 1;
        if (s < k) {
            int end = j < k ? g->off[j] + 2
                            : ready + (k < S ? S - k : 0) + 2 * (j - (k > S ? k : S) + 1);
            l = end - g->off[s];
        }
        g->cnt[dev] += (l + V1_T - 1) / V1_T;
    }
    *mx = *sum = 0;
    for (int d = 0; d < g->p; d++) {
        if (g->cnt[d] > *mx) *mx = g->cnt[d];
        *sum += g->cnt[d];
    }
}

static void v1_dfs(v1_search *g, int k, int ready) {
    int mx, sum;
    /* The budget bounds the search after the first leaf only: the first
     * descent is the greedy block (packable() leaves every step a free slot,
     * so it never backtracks) and must be reached for every p, even when
     * its 4p + 1 nodes exceed the budget (p >= 508). */
    if (g->nodes-- <= 0 && g->best_max >= 0) return;
    v1_bound(g, k, ready, &mx, &sum);
    if (g->best_max >= 0 && (mx > g->best_max || (mx == g->best_max && sum >= g->best_sum)))
        return;
    if (k == 2 * g->S) {
        g->best_max = mx, g->best_sum = sum;
        memcpy(g->best, g->off, (size_t)(2 * g->S) * sizeof *g->best);
        return;
    }
    int stage, dev, chunk, dur, rest[3], nr = 0;
    v1_step(g, k, &stage, &dev, &chunk, &dur);
    /* what this device still has to place after this pass */
    if (dur == 1 && chunk == 0) rest[nr++] = 1, rest[nr++] = 2, rest[nr++] = 2;
    else if (dur == 1) rest[nr++] = 2, rest[nr++] = 2;
    else if (chunk == 1) rest[nr++] = 2;
    unsigned char *o = g->occ + (size_t)dev * V1_T;
    for (int t = ready, tried = 0; t < ready + V1_T && tried < V1_BRANCH; t++) {
        int ok = 1;
        for (int j = 0; j < dur && ok; j++) ok = !o[(t + j) % V1_T];
        if (!ok) continue;
        for (int j = 0; j < dur; j++) o[(t + j) % V1_T] = 1;
        if (packable(o, V1_T, rest, nr)) {
            tried++;
            g->off[k] = t;
            v1_dfs(g, k + 1, t + dur);
        }
        for (int j = 0; j < dur; j++) o[(t + j) % V1_T] = 0;
    }
}

static pm_status named_1f1b_v(pm_block *b, int p, pm_err *err) {
    pm_status st = block_alloc(b, PM_PLACE_V, p, 2, V1_T, 6 * p, err);
    if (st) return st;
    v1_search g = {.p = p, .S = 2 * p, .best_max = -1, .nodes = 2000000L / (2 * p) + 64};
    g.occ = pm_calloc((size_t)p * V1_T, 1);
    g.off = pm_calloc((size_t)(4 * p), sizeof *g.off);
    g.best = pm_calloc((size_t)(4 * p), sizeof *g.best);
    g.cnt = pm_calloc((size_t)p, sizeof *g.cnt);
    if (!g.occ || !g.off || !g.best || !g.cnt) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory building the 1f1b-v block");
        goto done;
    }
    v1_dfs(&g, 0, 0);
    if (g.best_max < 0) { /* cannot happen (see v1_dfs), but a search never asserts */
        st = pm_errf(err, PM_ERR_ARG, "1f1b-v block search found no block for p=%d", p);
        goto done;
    }
    for (int k = 0; k < 2 * g.S; k++) {
        int stage, dev, chunk, dur;
        v1_step(&g, k, &stage, &dev, &chunk, &dur);
        b->pass[b->n++] =
            (pm_block_pass){dev, chunk, dur == 1 ? PM_PASS_F : PM_PASS_BW, g.best[k], dur};
    }
    st = check_block(b, NULL, 0, err);
done:
    pm_free(g.occ);
    pm_free(g.off);
    pm_free(g.best);
    pm_free(g.cnt);
    if (st) pm_block_free(b);
    return st;
}

pm_status pm_block_named(pm_block *b, const char *name, int p, pm_err *err) {
    *b = (pm_block){0};
    if (p < 1 || p > 1024)
        return pm_errf(err, PM_ERR_ARG, "named blocks need 1 <= p <= 1024 (got %d)", p);
    if (name && strcmp(name, "v-min") == 0) return named_formula(b, 0, p, err);
    if (name && strcmp(name, "v-half") == 0) return named_formula(b, 1, p, err);
    if (name && strcmp(name, "1f1b-v") == 0) return named_1f1b_v(b, p, err);
    return pm_errf(err, PM_ERR_ARG, "unknown block '%s'; named blocks: v-min, v-half, 1f1b-v",
                   name ? name : "(none)");
}

/* ---- analysis ---------------------------------------------------------- */

void pm_block_info_free(pm_block_info *info) {
    if (!info) return;
    pm_free(info->lifespan);
    pm_free(info->bound);
    *info = (pm_block_info){0};
}

/* First collision: devices in order, each device's passes in offset order,
 * the first residue a later pass finds taken. stamp[r] holds 1 + the pass
 * that took residue r on the current device (reset by device). */
static void find_collision(const pm_block *b, const int *order, int *stamp, int *stamp_dev,
                           pm_block_info *info) {
    info->legal = 1;
    info->bad_dev = info->bad_residue = info->bad_pass[0] = info->bad_pass[1] = -1;
    for (int k = 0; k < b->n; k++) {
        const pm_block_pass *x = &b->pass[order[k]];
        for (int j = 0; j < x->dur; j++) {
            int r = (int)(((int64_t)x->off + j) % b->T);
            if (stamp_dev[r] == x->dev) {
                info->legal = 0;
                info->bad_dev = x->dev;
                info->bad_residue = r;
                info->bad_pass[0] = stamp[r];
                info->bad_pass[1] = order[k];
                return;
            }
            stamp_dev[r] = x->dev;
            stamp[r] = order[k];
        }
    }
}

typedef struct {
    pm_block_pass x; /* copy of the pass */
    int i;           /* its index in the block */
} indexed_pass;

static int cmp_indexed(const void *a, const void *b) {
    const indexed_pass *x = a, *y = b;
    int c = cmp_pass(&x->x, &y->x);
    return c ? c : x->i - y->i;
}

/* Pass indices sorted by (device, offset, chunk, kind). */
static int sort_order(const pm_block *b, int *order) {
    indexed_pass *v = pm_malloc((size_t)(b->n ? b->n : 1) * sizeof *v);
    if (!v) return 0;
    for (int i = 0; i < b->n; i++) v[i] = (indexed_pass){b->pass[i], i};
    qsort(v, (size_t)b->n, sizeof *v, cmp_indexed);
    for (int i = 0; i < b->n; i++) order[i] = v[i].i;
    pm_free(v);
    return 1;
}

pm_status pm_block_analyze(const pm_block *b, pm_mem mem, pm_block_info *info, pm_err *err) {
    *info = (pm_block_info){0};
    pm_status st = check_block(b, NULL, 0, err);
    if (st) return st;
    if (!(mem.f > 0))
        return pm_errf(err, PM_ERR_ARG, "the F memory delta must be > 0 (got %g)", mem.f);
    int S = b->p * b->v;
    int *order = pm_malloc((size_t)(b->n ? b->n : 1) * sizeof *order);
    int *stamp = pm_malloc((size_t)b->T * sizeof *stamp);
    int *stamp_dev = pm_malloc((size_t)b->T * sizeof *stamp_dev);
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    info->lifespan = pm_calloc((size_t)S, sizeof *info->lifespan);
    info->bound = pm_calloc((size_t)b->p, sizeof *info->bound);
    if (!order || !stamp || !stamp_dev || !tab || !info->lifespan || !info->bound) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory analysing a block");
        goto done;
    }
    if (!sort_order(b, order)) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory analysing a block");
        goto done;
    }
    for (int r = 0; r < b->T; r++) stamp_dev[r] = -1;
    find_collision(b, order, stamp, stamp_dev, info);
    pm_block_index(b, tab);
    /* Lifespan: start of F to end of the pass that frees the activation;
     * bound: sum of ceil(l/T) microbatches' activations (mem.f / v each)
     * over the device's stages, over M = p * mem.f. */
    for (int d = 0; d < b->p; d++)
        for (int c = 0; c < b->v; c++) {
            int s = pm_block_stage(b, d, c);
            int f = pm_block_tab(tab, s, PM_PASS_F), w = pm_block_tab(tab, s, PM_PASS_W);
            if (w < 0) w = pm_block_tab(tab, s, PM_PASS_BW);
            int l = b->pass[w].off + b->pass[w].dur - b->pass[f].off;
            info->lifespan[d * b->v + c] = l;
            info->bound[d] += (double)((l + b->T - 1) / b->T) / ((double)b->v * b->p);
        }
done:
    pm_free(order);
    pm_free(stamp);
    pm_free(stamp_dev);
    pm_free(tab);
    if (st) pm_block_info_free(info);
    return st;
}
