/* format_text.c: schedules as text and as PyTorch pipelining CSV, both ways.
 *
 * Actions use torch.distributed.pipelining's grammar, {stage}{type}{microbatch}:
 *
 *   2F0   stage 2, forward, microbatch 0          (PM_PASS_F)
 *   2I0   stage 2, backward for the input         (PM_PASS_B)
 *   2W0   stage 2, backward for the weights       (PM_PASS_W)
 *   2B0   stage 2, full backward, I and W fused   (PM_PASS_BW)
 *
 * Stage and microbatch are decimal numbers (digits only, no sign). PyTorch's
 * communication and sharding actions (SEND_F, RECV_F, SEND_B, RECV_B,
 * UNSHARD, RESHARD, REDUCE_GRAD, microbatch optional: 1SEND_F0, 0UNSHARD) are
 * read and skipped: pipemem schedules are compute only and derive messages
 * from the placement. An overlapped pair "(0F1;1B0)OVERLAP_F_B" is read as
 * its sub-actions in order; when they are an F then a full backward (B) of
 * another microbatch they stay marked as a pair (pm_sched.pair, which only
 * costs with fb_overlap simulate as one), and writers write a marked pair
 * back the same way.
 *
 * Text format: one line per device, device 0 first; actions separated by
 * spaces or tabs, in the order the device runs them. A '#' starts a comment
 * that runs to the end of the line; lines that are blank or only a comment
 * are not devices. Line ends may be LF or CRLF. Example (1F1B, p=2, m=2):
 *
 *   # device 0
 *   0F0 0F1 0B0 0B1
 *   1F0 1B0 1F1 1B1
 *
 * CSV format (PyTorch's _dump_csv / _load_csv with format "compute_only"):
 * one row per rank, one action per cell, rows separated by LF or CRLF. Cells
 * are trimmed of spaces and tabs and may be wrapped in double quotes; empty
 * cells (PyTorch writes its None idle steps as empty cells) are skipped.
 * Blank lines and lines starting with '#' are not ranks. A UTF-8 byte order
 * mark at the start is skipped. In both formats every row needs at least one
 * compute action (a row of only idle cells or comm actions is an error).
 *
 * Readers infer p (devices) from the rows, S = highest stage + 1, m =
 * highest microbatch + 1, and the placement from where the stages sit, tried
 * in this order: single (S == p, stage s on row s), V (S == 2p, stages i and
 * 2p-1-i on row i), loop (S == v*p, stage s on row s mod p). The kind of the
 * schedule read is "file". One comment is read: a line that is exactly
 * RECOMPUTE_LINE (below) marks a schedule with recomputation (pm_sched.h).
 * The text writer puts it first when the schedule has it; the CSV writer
 * never does: PyTorch's _load_csv takes every line for a rank and every
 * cell for an action, so a comment there is refused ("Invalid action
 * string"). A recomputed schedule's CSV is therefore its compute-only
 * actions alone, and whoever reads it says --recompute (the text format
 * keeps the mark; the CSV reader still reads it, for files written before).
 * Writers emit exactly this grammar, one space (text) or comma (CSV)
 * between actions and LF after each device, so writing a schedule that was
 * read from a writer's output reproduces it byte for byte (a CSV of a
 * recomputed schedule, read back, lacks only the mark).
 *
 * Invariants and limits: readers never read past len (no NUL terminator is
 * needed; a NUL byte is an error), never allocate more than a bounded amount
 * (p <= PM_FMT_MAX_P, S <= PM_FMT_MAX_S, m <= PM_FMT_MAX_M and at most
 * PM_FMT_MAX_PASSES pass slots in all), never push more passes on a device
 * than the schedule holds (a complete schedule has at most 3*m*v), and every
 * error is one line "line L, column C: what is wrong; what was expected".
 * On error *s is zeroed and nothing stays allocated. */
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "sched.h"

#define PM_FMT_MAX_P 4096              /* devices (rows) */
#define PM_FMT_MAX_S 65536             /* stages */
#define PM_FMT_MAX_M (1 << 20)         /* microbatches */
#define PM_FMT_MAX_PASSES (1 << 25)    /* p * 3*m*v pass slots (12 bytes each) */
#define PM_FMT_MAX_INPUT ((size_t)1 << 30)

#define RECOMPUTE_LINE "# pipemem: recompute"

/* Action letters by pm_pass_kind: our B is PyTorch's I, our BW its B. */
static const char pass_letter[PM_PASS_COUNT] = {'F', 'I', 'W', 'B'};

/* Actions pipemem reads and ignores (PyTorch's non-compute actions). */
static const char *const skip_names[] = {"SEND_F", "RECV_F",  "SEND_B",     "RECV_B",
                                         "UNSHARD", "RESHARD", "REDUCE_GRAD"};

/* One compute action as read, with where it was found (1-based). */
typedef struct {
    int32_t row, kind, stage, mb;
    int32_t line, col;
    int32_t pair; /* 1: the first of an overlapped pair's two sub-actions */
} fmt_act;

typedef struct {
    const char *text; /* input, len bytes, borrowed */
    size_t len;
    int csv;          /* 1: cells separated by commas; 0: by whitespace */
    fmt_act *act;     /* (cap) actions read; owned */
    size_t n, cap;
    int rows;         /* rows (devices) seen so far */
    int recompute;    /* the RECOMPUTE_LINE comment was seen */
    int line;         /* current line, 1-based */
    size_t line_at;   /* offset of the current line's first byte */
    pm_err *err;
} fmt_parser;

/* ---- tokens --------------------------------------------------------------- */

/* Copies up to 24 bytes of [b, e) into out as printable ASCII for messages. */
static const char *fmt_show(char out[32], const char *b, const char *e) {
    size_t n = (size_t)(e - b), k = 0;
    for (; k < n && k < 24; k++) {
        unsigned char ch = (unsigned char)b[k];
        out[k] = (ch >= 32 && ch < 127) ? (char)ch : '?';
    }
    if (n > 24) out[k++] = '.', out[k++] = '.', out[k++] = '.';
    out[k] = 0;
    return out;
}

static int fmt_col(const fmt_parser *ps, const char *at) {
    return (int)(at - (ps->text + ps->line_at)) + 1;
}

static pm_status fmt_fail(fmt_parser *ps, const char *at, const char *what, const char *b,
                          const char *e, const char *expect) {
    char tok[32];
    return pm_errf(ps->err, PM_ERR_FORMAT, "line %d, column %d: %s '%s'; %s", ps->line,
                   fmt_col(ps, at), what, fmt_show(tok, b, e), expect);
}

static int fmt_digit(char c) { return c >= '0' && c <= '9'; }
static int fmt_blank(char c) { return c == ' ' || c == '\t'; }

/* Reads a decimal number at *p (before e) no larger than max. Returns 1 and
 * advances *p past it, 0 if there is no digit, -1 if it exceeds max. */
static int fmt_number(const char **p, const char *e, int64_t max, int32_t *out) {
    const char *q = *p;
    int64_t v = 0;
    if (q >= e || !fmt_digit(*q)) return 0;
    for (; q < e && fmt_digit(*q); q++) {
        v = v * 10 + (*q - '0');
        if (v > max) return -1;
    }
    *p = q;
    *out = (int32_t)v;
    return 1;
}

static const char *const expect_action =
    "expected an action {stage}{F|I|W|B}{microbatch} such as 2F0";

/* Parses one plain action [b, e) (no parentheses): appends it if it is a
 * compute action, skips it if it is a communication action. */
static pm_status fmt_action(fmt_parser *ps, const char *b, const char *e) {
    const char *q = b;
    int32_t stage = 0, mb = -1;
    int r = fmt_number(&q, e, PM_FMT_MAX_S - 1, &stage);
    if (r < 0)
        return fmt_fail(ps, b, "stage number too large in", b, e,
                        "stages must be below 65536");
    if (r == 0) return fmt_fail(ps, b, "not an action:", b, e, expect_action);
    const char *t = q;
    while (q < e && ((*q >= 'A' && *q <= 'Z') || *q == '_')) q++;
    size_t tn = (size_t)(q - t);
    int kind = -1, skip = 0;
    for (int k = 0; k < PM_PASS_COUNT && tn == 1; k++)
        if (*t == pass_letter[k]) kind = k;
    for (size_t k = 0; k < sizeof skip_names / sizeof skip_names[0] && kind < 0; k++)
        if (strlen(skip_names[k]) == tn && memcmp(t, skip_names[k], tn) == 0) skip = 1;
    if (kind < 0 && !skip)
        return fmt_fail(ps, t, "unknown action type in", b, e,
                        "expected F, I, W or B after the stage number (or SEND_F, RECV_F, "
                        "SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD)");
    r = fmt_number(&q, e, PM_FMT_MAX_M - 1, &mb);
    if (r < 0)
        return fmt_fail(ps, q, "microbatch number too large in", b, e,
                        "microbatches must be below 1048576");
    if (r == 0 && !skip)
        return fmt_fail(ps, q, "missing microbatch number in", b, e, expect_action);
    const char *junk = q;
    while (junk < e && fmt_blank(*junk)) junk++; /* point at the text, not a blank */
    if (q < e)
        return fmt_fail(ps, junk < e ? junk : q, "unexpected text after the action in", b, e,
                        ps->csv ? "put one action in each comma-separated cell"
                                : "separate actions with spaces");
    if (skip) return PM_OK;
    PM_ASSERT(ps->n < ps->cap);
    ps->act[ps->n++] = (fmt_act){ps->rows - 1, kind, stage, mb, ps->line, fmt_col(ps, b), 0};
    return PM_OK;
}

/* Parses one token [b, e): a plain action or "(a;b;...)OVERLAP_F_B". */
static pm_status fmt_token(fmt_parser *ps, const char *b, const char *e) {
    if (*b != '(') return fmt_action(ps, b, e);
    const char *close = memchr(b, ')', (size_t)(e - b));
    static const char ov[] = "OVERLAP_F_B";
    if (!close || (size_t)(e - close - 1) != sizeof ov - 1 || memcmp(close + 1, ov, sizeof ov - 1))
        return fmt_fail(ps, b, "malformed overlapped action", b, e,
                        "expected (action;action)OVERLAP_F_B such as (0F1;1B0)OVERLAP_F_B");
    size_t n0 = ps->n;
    for (const char *q = b + 1; q < close;) {
        const char *semi = memchr(q, ';', (size_t)(close - q));
        const char *end = semi ? semi : close, *sb = q;
        while (sb < end && fmt_blank(*sb)) sb++;
        while (end > sb && fmt_blank(end[-1])) end--;
        if (end == sb)
            return fmt_fail(ps, q, "empty sub-action in", b, e,
                            "separate sub-actions with a single ';'");
        pm_status st = fmt_action(ps, sb, end);
        if (st) return st;
        q = semi ? semi + 1 : close;
    }
    if (ps->n == n0 + 2) ps->act[n0].pair = 1; /* kept if an F then a BW (pm_sched_paired) */
    return PM_OK;
}

/* ---- lines ---------------------------------------------------------------- */

/* Splits line [b, e) (no line end) into tokens and parses them. */
static pm_status fmt_line(fmt_parser *ps, const char *b, const char *e) {
    const char *q = b, *qe = e;
    while (q < e && fmt_blank(*q)) q++;
    while (qe > q && fmt_blank(qe[-1])) qe--;
    if ((size_t)(qe - q) == strlen(RECOMPUTE_LINE) && !memcmp(q, RECOMPUTE_LINE, (size_t)(qe - q)))
        ps->recompute = 1;
    if (q == e || *q == '#') return PM_OK; /* blank or comment: not a device */
    if (ps->rows >= PM_FMT_MAX_P)
        return pm_errf(ps->err, PM_ERR_FORMAT,
                       "line %d, column 1: more than %d rows; at most %d devices are supported",
                       ps->line, PM_FMT_MAX_P, PM_FMT_MAX_P);
    ps->rows++;
    for (const char *z = b; z < e; z++)
        if (*z == 0)
            return pm_errf(ps->err, PM_ERR_FORMAT,
                           "line %d, column %d: NUL byte; expected text actions", ps->line,
                           fmt_col(ps, z));
    size_t n0 = ps->n;
    while (q < e) {
        const char *t = q, *te;
        if (ps->csv) {
            const char *comma = memchr(q, ',', (size_t)(e - q));
            te = comma ? comma : e;
            q = comma ? comma + 1 : e;
            while (t < te && fmt_blank(*t)) t++;
            while (te > t && fmt_blank(te[-1])) te--;
            if (te - t >= 2 && *t == '"' && te[-1] == '"') t++, te--;
            if (t == te) continue; /* an idle step (None in PyTorch) */
        } else {
            if (*q == '#') break;
            while (q < e && !fmt_blank(*q) && *q != '#') q++;
            te = q;
            while (q < e && fmt_blank(*q)) q++;
        }
        pm_status st = fmt_token(ps, t, te);
        if (st) return st;
    }
    /* A device runs at least one pass; an empty row could not be written
     * back (writers would emit a blank line, which is not a row). */
    if (ps->n == n0)
        return pm_errf(ps->err, PM_ERR_FORMAT,
                       "line %d, column 1: row %d has no compute action; %s on every device",
                       ps->line, ps->rows - 1, expect_action);
    return PM_OK;
}

static pm_status fmt_scan(fmt_parser *ps) {
    size_t i = 0;
    if (ps->len >= 3 && memcmp(ps->text, "\xEF\xBB\xBF", 3) == 0) i = 3; /* BOM */
    ps->line = 0;
    while (i < ps->len) {
        const char *nl = memchr(ps->text + i, '\n', ps->len - i);
        size_t end = nl ? (size_t)(nl - ps->text) : ps->len;
        size_t next = nl ? end + 1 : end;
        if (end > i && ps->text[end - 1] == '\r') end--;
        ps->line++;
        ps->line_at = i; /* columns start after a BOM */
        pm_status st = fmt_line(ps, ps->text + i, ps->text + end);
        if (st) return st;
        i = next;
    }
    return PM_OK;
}

/* ---- placement ------------------------------------------------------------ */

/* Row that placement pl puts stage st on, or -1 if pl cannot hold S stages
 * on p rows. */
static int fmt_place_row(pm_place pl, int p, int S, int st) {
    switch (pl) {
    case PM_PLACE_SINGLE: return S == p ? st : -1;
    case PM_PLACE_V: return S == 2 * p ? (st < p ? st : 2 * p - 1 - st) : -1;
    case PM_PLACE_LOOP: return S % p == 0 ? st % p : -1;
    default: return -1;
    }
}

/* Index of the first action placement pl puts on another row, n if none,
 * -1 if pl does not apply. */
static int64_t fmt_place_misfit(const fmt_parser *ps, pm_place pl, int p, int S) {
    if (fmt_place_row(pl, p, S, 0) < 0) return -1;
    for (size_t i = 0; i < ps->n; i++)
        if (fmt_place_row(pl, p, S, ps->act[i].stage) != ps->act[i].row) return (int64_t)i;
    return (int64_t)ps->n;
}

static const char *const place_rule =
    "single: stage s on row s; V: stages i and 2p-1-i on row i; loop: stage s on row s mod p";

/* Picks the first placement (single, V, loop) that fits every action; else
 * names the first action on an unexpected row of the closest placement. */
static pm_status fmt_infer_place(fmt_parser *ps, int p, int S, pm_place *out) {
    static const pm_place order[] = {PM_PLACE_SINGLE, PM_PLACE_V, PM_PLACE_LOOP};
    int64_t best = -1;
    pm_place best_pl = PM_PLACE_SINGLE;
    for (int k = 0; k < 3; k++) {
        int64_t mis = fmt_place_misfit(ps, order[k], p, S);
        if (mis == (int64_t)ps->n) {
            *out = order[k];
            return PM_OK;
        }
        if (mis > best) best = mis, best_pl = order[k];
    }
    if (best < 0) {
        const fmt_act *a = &ps->act[0];
        for (size_t i = 1; i < ps->n; i++)
            if (ps->act[i].stage > a->stage) a = &ps->act[i];
        return pm_errf(ps->err, PM_ERR_FORMAT,
                       "line %d, column %d: highest stage %d makes %d stages, which do not "
                       "divide among %d rows; expected S = p, 2p or a multiple of p (%s)",
                       a->line, a->col, a->stage, S, p, place_rule);
    }
    const fmt_act *a = &ps->act[best];
    return pm_errf(ps->err, PM_ERR_FORMAT,
                   "line %d, column %d: stage %d is on row %d, but the %s placement of %d "
                   "stages on %d rows puts it on row %d (%s)",
                   a->line, a->col, a->stage, a->row, pm_place_names[best_pl], S, p,
                   fmt_place_row(best_pl, p, S, a->stage), place_rule);
}

/* Checks that no stage sits on two rows; stage_row is (S) scratch. */
static pm_status fmt_check_rows(fmt_parser *ps, int S, int32_t *stage_row, size_t *first) {
    for (int i = 0; i < S; i++) stage_row[i] = -1;
    for (size_t i = 0; i < ps->n; i++) {
        const fmt_act *a = &ps->act[i];
        if (stage_row[a->stage] < 0) {
            stage_row[a->stage] = a->row;
            first[a->stage] = i;
        } else if (stage_row[a->stage] != a->row) {
            const fmt_act *f = &ps->act[first[a->stage]];
            return pm_errf(ps->err, PM_ERR_FORMAT,
                           "line %d, column %d: stage %d is on row %d but also on row %d "
                           "(line %d); expected each stage on one device",
                           a->line, a->col, a->stage, a->row, f->row, f->line);
        }
    }
    return PM_OK;
}

/* Builds s from the actions read: infers p, S, m and the placement, checks
 * sizes, then pushes every action. */
static pm_status fmt_build(pm_sched *s, fmt_parser *ps) {
    if (ps->n == 0)
        return pm_errf(ps->err, PM_ERR_FORMAT,
                       "line %d, column 1: no compute actions found; %s, one line per device",
                       ps->line > 0 ? ps->line : 1, expect_action);
    int p = ps->rows, S = 0, m = 0;
    const fmt_act *mb_at = &ps->act[0];
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->act[i].stage + 1 > S) S = ps->act[i].stage + 1;
        if (ps->act[i].mb + 1 > m) m = ps->act[i].mb + 1, mb_at = &ps->act[i];
    }
    int32_t *stage_row = pm_malloc((size_t)S * sizeof *stage_row);
    size_t *first = pm_malloc((size_t)S * sizeof *first);
    pm_status st = PM_ERR_NOMEM;
    pm_place pl = PM_PLACE_SINGLE;
    if (!stage_row || !first) {
        pm_errf(ps->err, st, "out of memory for %d stages", S);
        goto done;
    }
    if ((st = fmt_check_rows(ps, S, stage_row, first))) goto done;
    if ((st = fmt_infer_place(ps, p, S, &pl))) goto done;
    int v = S / p;
    if ((int64_t)p * 3 * m * v > PM_FMT_MAX_PASSES) {
        st = pm_errf(ps->err, PM_ERR_FORMAT,
                     "line %d, column %d: microbatch %d makes the schedule too large (p=%d "
                     "m=%d stages=%d); expected p*3*m*stages/p <= %d",
                     mb_at->line, mb_at->col, mb_at->mb, p, m, S, PM_FMT_MAX_PASSES);
        goto done;
    }
    if ((st = pm_sched_init(s, "file", pl, p, m, v, ps->err))) goto done;
    s->recompute = ps->recompute;
    for (size_t i = 0; i < ps->n; i++) {
        const fmt_act *a = &ps->act[i];
        if (s->len[a->row] >= s->cap) {
            st = pm_errf(ps->err, PM_ERR_FORMAT,
                         "line %d, column %d: row %d has more than %lld actions, the most a "
                         "complete schedule holds (F, B and W of %d stages x %d microbatches); "
                         "expected no repeated actions",
                         a->line, a->col, a->row, (long long)s->cap, v, m);
            pm_sched_free(s);
            goto done;
        }
        if (a->pair && (st = pm_sched_pairs_init(s, ps->err))) {
            pm_sched_free(s);
            goto done;
        }
        if (a->pair) s->pair[(int64_t)a->row * s->cap + s->len[a->row]] = 1;
        pm_sched_push(s, a->row, (pm_pass_kind)a->kind, a->stage, a->mb);
    }
done:
    pm_free(stage_row);
    pm_free(first);
    return st;
}

static pm_status fmt_parse(pm_sched *s, const char *text, size_t len, int csv, pm_err *err) {
    *s = (pm_sched){0};
    if (!text && len) return pm_errf(err, PM_ERR_ARG, "no input text");
    if (len > PM_FMT_MAX_INPUT)
        return pm_errf(err, PM_ERR_FORMAT, "line 1, column 1: input of %zu bytes is too large; "
                                           "expected at most 1 GiB", len);
    /* An action takes at least 3 bytes and a separator, so len/3 + 1 bounds
     * how many can be read. */
    fmt_parser ps = {.text = text, .len = len, .csv = csv, .err = err};
    ps.cap = len / 3 + 1;
    ps.act = pm_malloc(ps.cap * sizeof *ps.act);
    if (!ps.act) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu actions", ps.cap);
    pm_status st = fmt_scan(&ps);
    if (!st) st = fmt_build(s, &ps);
    pm_free(ps.act);
    if (st) *s = (pm_sched){0};
    return st;
}

pm_status pm_sched_parse_text(pm_sched *s, const char *text, size_t len, pm_err *err) {
    return fmt_parse(s, text, len, 0, err);
}

pm_status pm_sched_parse_csv(pm_sched *s, const char *text, size_t len, pm_err *err) {
    return fmt_parse(s, text, len, 1, err);
}

/* CSV if a comma appears outside comments ('#' to the end of the line). */
static int fmt_looks_csv(const char *text, size_t len) {
    int comment = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n') comment = 0;
        else if (text[i] == '#') comment = 1;
        else if (text[i] == ',' && !comment) return 1;
    }
    return 0;
}

pm_status pm_sched_load(pm_sched *s, const char *path, pm_err *err) {
    *s = (pm_sched){0};
    char *text = NULL;
    size_t len = 0;
    pm_status st = pm_read_file(path, PM_TEXT_MAX, &text, &len, err);
    if (st) return st;
    pm_err e = {{0}};
    st = fmt_parse(s, text, len, fmt_looks_csv(text, len), &e);
    pm_free(text);
    if (st) pm_errf(err, st, "%s: %s", path, e.msg);
    return st;
}

/* ---- writers -------------------------------------------------------------- */

static pm_status fmt_write(FILE *f, const pm_sched *s, char sep) {
    if (s->recompute && sep != ',') fputs(RECOMPUTE_LINE "\n", f); /* not in CSV: above */
    for (int d = 0; d < s->p; d++) {
        const pm_pass *ps = pm_sched_dev(s, d);
        for (int64_t i = 0; i < s->len[d]; i++) {
            if (ps[i].kind < 0 || ps[i].kind >= PM_PASS_COUNT) return PM_ERR_ARG;
            if (i > 0) fputc(sep, f);
            if (pm_sched_paired(s, d, i)) { /* as PyTorch writes it; both kinds checked */
                fprintf(f, "(%dF%d;%dB%d)OVERLAP_F_B", (int)ps[i].stage, (int)ps[i].mb,
                        (int)ps[i + 1].stage, (int)ps[i + 1].mb);
                i++;
                continue;
            }
            fprintf(f, "%d%c%d", (int)ps[i].stage, pass_letter[ps[i].kind], (int)ps[i].mb);
        }
        fputc('\n', f);
    }
    return ferror(f) ? PM_ERR_IO : PM_OK;
}

pm_status pm_sched_write_text(FILE *f, const pm_sched *s) { return fmt_write(f, s, ' '); }

pm_status pm_sched_write_csv(FILE *f, const pm_sched *s) { return fmt_write(f, s, ','); }
