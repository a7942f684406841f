/* block_format.c: the block text format: parser (errors name line and
 * column) and writer. A building block is one microbatch's passes on every
 * device with slot offsets, repeated every T slots
 * (shared/reference/schedules.md, "Building blocks").
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
    if ((int64_t)b->p * b->T > PM_BLOCK_MAX_DEV_X_T)
        return pm_errf(c->err, PM_ERR_FORMAT,
                       "line %d: devices x interval = %lld is too large (at most %d)", h->T,
                       (long long)b->p * b->T, PM_BLOCK_MAX_DEV_X_T);
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
    x.dur = pm_block_default_dur(x.kind);
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
    if (!text && len) return pm_errf(err, PM_ERR_ARG, "text is NULL (%zu bytes said)", len);
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
    if ((st = pm_block_check_lines(b, lines, 1, err))) goto fail;
    if ((st = pm_block_fill_w(b, err))) goto fail;
    if ((st = pm_block_check_lines(b, NULL, 0, err))) goto fail;
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

pm_status pm_block_write(FILE *f, const pm_block *b) {
    pm_block_pass *v = pm_malloc((size_t)(b->n > 0 ? b->n : 1) * sizeof *v);
    if (!v) return PM_ERR_NOMEM;
    if (b->n) memcpy(v, b->pass, (size_t)b->n * sizeof *v);
    qsort(v, (size_t)b->n, sizeof *v, pm_block_pass_cmp);
    fprintf(f, "block v1\ndevices %d\nplacement %s\n", b->p, pm_place_names[b->place]);
    if (b->place == PM_PLACE_LOOP) fprintf(f, "chunks %d\n", b->v);
    fprintf(f, "interval %d\n# device chunk pass offset [slots]\n", b->T);
    for (int i = 0; i < b->n; i++) {
        fprintf(f, "%d %d %s %d", v[i].dev, v[i].chunk, pm_pass_names[v[i].kind], v[i].off);
        if (v[i].dur != pm_block_default_dur(v[i].kind)) fprintf(f, " %d", v[i].dur);
        fputc('\n', f);
    }
    pm_free(v);
    return ferror(f) ? PM_ERR_IO : PM_OK;
}
