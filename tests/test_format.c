/* test_format.c: the schedule file formats. Text and CSV round trips (byte
 * for byte and pass for pass, every placement), placement inference,
 * malformed input rejected with the right line and column, and the JSON,
 * SVG and trace writers checked against facts that do not come from their
 * own code (1F1B's peaks and bubble from the reference page, a small JSON
 * syntax checker, element counts). Schedules are built by hand here so the
 * test does not depend on the generators. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "checks.h"
#include "pipemem/pm_sched.h"
#include "schedule/sched.h"

/* ---- helpers --------------------------------------------------------------- */

/* 1F1B as the reference page states it: rank r warms up with min(p-r-1, m)
 * forwards, then pairs (F, BW), then the remaining BW. */
static void build_1f1b(pm_sched *s, int p, int m) {
    assert_int_equal(pm_sched_init(s, "1f1b", PM_PLACE_SINGLE, p, m, 1, NULL), PM_OK);
    for (int r = 0; r < p; r++) {
        int w = p - r - 1 < m ? p - r - 1 : m, f = 0, b = 0;
        while (f < w) pm_sched_push(s, r, PM_PASS_F, r, f++);
        while (f < m) {
            pm_sched_push(s, r, PM_PASS_F, r, f++);
            pm_sched_push(s, r, PM_PASS_BW, r, b++);
        }
        while (b < m) pm_sched_push(s, r, PM_PASS_BW, r, b++);
    }
}

/* GPipe order on any placement: every device runs its forwards sorted by
 * (microbatch, stage), then its backwards by (microbatch, -stage), then (if
 * split) its W passes. Every list follows one global order that every
 * dependency respects, so it cannot deadlock. */
static void build_gpipe(pm_sched *s, pm_place pl, int p, int m, int v, int split) {
    assert_int_equal(pm_sched_init(s, "gpipe", pl, p, m, v, NULL), PM_OK);
    for (int j = 0; j < m; j++)
        for (int st = 0; st < s->S; st++)
            pm_sched_push(s, pm_sched_stage_device(s, st), PM_PASS_F, st, j);
    for (int j = 0; j < m; j++)
        for (int st = s->S - 1; st >= 0; st--)
            pm_sched_push(s, pm_sched_stage_device(s, st), split ? PM_PASS_B : PM_PASS_BW, st, j);
    if (split)
        for (int j = 0; j < m; j++)
            for (int st = 0; st < s->S; st++)
                pm_sched_push(s, pm_sched_stage_device(s, st), PM_PASS_W, st, j);
}

/* Runs writer on s into *buf (malloc'd, caller frees). */
typedef pm_status (*writer_fn)(FILE *, const pm_sched *);
static void write_str(writer_fn w, const pm_sched *s, char **buf, size_t *len) {
    FILE *f = open_memstream(buf, len);
    assert_non_null(f);
    assert_int_equal(w(f, s), PM_OK);
    fclose(f);
}

static void assert_same_sched(const pm_sched *a, const pm_sched *b) {
    assert_int_equal(a->place, b->place);
    assert_int_equal(a->p, b->p);
    assert_int_equal(a->m, b->m);
    assert_int_equal(a->v, b->v);
    assert_int_equal(a->S, b->S);
    for (int d = 0; d < a->p; d++) {
        assert_int_equal(a->len[d], b->len[d]);
        const pm_pass *x = pm_sched_dev(a, d), *y = pm_sched_dev(b, d);
        for (int64_t i = 0; i < a->len[d]; i++) {
            assert_int_equal(x[i].kind, y[i].kind);
            assert_int_equal(x[i].stage, y[i].stage);
            assert_int_equal(x[i].mb, y[i].mb);
        }
    }
}

/* Parses text (as text or CSV), expects failure, and checks that the message
 * starts with "line L, column C:" and mentions want. */
static void expect_error(int csv, const char *text, int line, int col, const char *want) {
    pm_sched s;
    pm_err err = {{0}};
    pm_status st = csv ? pm_sched_parse_csv(&s, text, strlen(text), &err)
                       : pm_sched_parse_text(&s, text, strlen(text), &err);
    char head[64];
    snprintf(head, sizeof head, "line %d, column %d:", line, col);
    if (st != PM_ERR_FORMAT || strncmp(err.msg, head, strlen(head)) || !strstr(err.msg, want))
        fail_msg("input \"%s\": status %d, message \"%s\"; wanted \"%s ...%s...\"", text, st,
                 err.msg, head, want);
    assert_null(s.pass); /* nothing left allocated */
    assert_null(strchr(err.msg, '\n'));
}

/* ---- a tiny JSON syntax checker (RFC 8259 grammar, no semantics) --------- */

typedef struct {
    const char *s;
    size_t i, n;
} js;

static void js_ws(js *j) {
    while (j->i < j->n && strchr(" \t\r\n", j->s[j->i])) j->i++;
}
static int js_value(js *j, int depth);
static int js_lit(js *j, const char *w) {
    size_t k = strlen(w);
    if (j->n - j->i < k || memcmp(j->s + j->i, w, k)) return 0;
    j->i += k;
    return 1;
}
static int js_string(js *j) {
    if (j->i >= j->n || j->s[j->i] != '"') return 0;
    for (j->i++; j->i < j->n; j->i++) {
        unsigned char c = (unsigned char)j->s[j->i];
        if (c == '"') return j->i++, 1;
        if (c < 0x20) return 0;
        if (c == '\\') j->i++;
    }
    return 0;
}
static int js_number(js *j) {
    char *end;
    const char *b = j->s + j->i;
    if (!(*b == '-' || (*b >= '0' && *b <= '9'))) return 0;
    strtod(b, &end);
    if (end == b) return 0;
    j->i += (size_t)(end - b);
    return 1;
}
static int js_seq(js *j, int depth, char close, int obj) {
    j->i++;
    js_ws(j);
    if (j->i < j->n && j->s[j->i] == close) return j->i++, 1;
    for (;;) {
        js_ws(j);
        if (obj) {
            if (!js_string(j)) return 0;
            js_ws(j);
            if (j->i >= j->n || j->s[j->i++] != ':') return 0;
        }
        if (!js_value(j, depth + 1)) return 0;
        js_ws(j);
        if (j->i >= j->n) return 0;
        char c = j->s[j->i++];
        if (c == close) return 1;
        if (c != ',') return 0;
    }
}
static int js_value(js *j, int depth) {
    js_ws(j);
    if (j->i >= j->n || depth > 64) return 0;
    switch (j->s[j->i]) {
    case '{': return js_seq(j, depth, '}', 1);
    case '[': return js_seq(j, depth, ']', 0);
    case '"': return js_string(j);
    case 't': return js_lit(j, "true");
    case 'f': return js_lit(j, "false");
    case 'n': return js_lit(j, "null");
    default: return js_number(j);
    }
}
static int json_valid(const char *s, size_t n) {
    js j = {s, 0, n};
    if (!js_value(&j, 0)) return 0;
    js_ws(&j);
    return j.i == n;
}

/* Occurrences of needle in hay; a plain scan, since sanitizer builds make
 * repeated strstr over megabytes quadratic. */
static int count(const char *hay, const char *needle) {
    size_t hn = strlen(hay), nn = strlen(needle);
    int n = 0;
    for (size_t i = 0; i + nn <= hn; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, nn) == 0) n++;
    return n;
}

/* ---- round trips ----------------------------------------------------------- */

static void test_text_roundtrip_bytes(void **state) {
    (void)state;
    static const char *const texts[] = {
        "0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1\n",                         /* single, BW */
        "0F0 0F1 0I0 0W0 0I1 0W1\n1F0 1I0 1F1 1I1 1W0 1W1\n",         /* single, I/W */
        "0F0 3F0 3I0 0I0 0W0 3W0\n1F0 2F0 2I0 1I0 1W0 2W0\n",         /* V, p=2 */
        "0F0 2F0 4F0 4B0 2B0 0B0\n1F0 3F0 5F0 5B0 3B0 1B0\n",         /* loop, v=3 */
        "0F0 1F0 1B0 0B0\n",                                          /* p=1, two stages */
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        pm_sched s;
        pm_err err;
        if (pm_sched_parse_text(&s, texts[k], strlen(texts[k]), &err))
            fail_msg("%s: %s", texts[k], err.msg);
        char *out;
        size_t n;
        write_str(pm_sched_write_text, &s, &out, &n);
        assert_string_equal(out, texts[k]);
        free(out);
        pm_sched_free(&s);
    }
}

static void test_csv_roundtrip_bytes(void **state) {
    (void)state;
    static const char *const csvs[] = {
        "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n",
        "0F0,3F0,3B0,0B0\n1F0,2F0,2B0,1B0\n",
        "0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n",
    };
    for (size_t k = 0; k < sizeof csvs / sizeof csvs[0]; k++) {
        pm_sched s;
        pm_err err;
        if (pm_sched_parse_csv(&s, csvs[k], strlen(csvs[k]), &err))
            fail_msg("%s: %s", csvs[k], err.msg);
        char *out;
        size_t n;
        write_str(pm_sched_write_csv, &s, &out, &n);
        assert_string_equal(out, csvs[k]);
        free(out);
        pm_sched_free(&s);
    }
}

/* schedule -> text -> schedule and schedule -> CSV -> schedule keep every
 * pass, for every placement and both backward styles. */
static void test_sched_roundtrip_every_placement(void **state) {
    (void)state;
    static const struct {
        pm_place pl;
        int p, m, v;
    } cases[] = {{PM_PLACE_SINGLE, 1, 3, 1}, {PM_PLACE_SINGLE, 4, 8, 1},
                 {PM_PLACE_LOOP, 2, 4, 2},   {PM_PLACE_LOOP, 3, 6, 3},
                 {PM_PLACE_LOOP, 1, 2, 3},   {PM_PLACE_V, 1, 2, 2},
                 {PM_PLACE_V, 2, 4, 2},      {PM_PLACE_V, 5, 10, 2}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int split = 0; split < 2; split++)
            for (int csv = 0; csv < 2; csv++) {
                pm_sched a, b;
                pm_err err;
                build_gpipe(&a, cases[k].pl, cases[k].p, cases[k].m, cases[k].v, split);
                size_t n;
                char *txt;
                write_str(csv ? pm_sched_write_csv : pm_sched_write_text, &a, &txt, &n);
                pm_status st = csv ? pm_sched_parse_csv(&b, txt, n, &err)
                                   : pm_sched_parse_text(&b, txt, n, &err);
                if (st) fail_msg("case %zu: %s", k, err.msg);
                assert_string_equal(b.kind, "file");
                assert_same_sched(&a, &b);
                free(txt);
                pm_sched_free(&a);
                pm_sched_free(&b);
            }
    pm_sched a, b;
    build_1f1b(&a, 5, 7);
    char *txt;
    size_t n;
    write_str(pm_sched_write_text, &a, &txt, &n);
    assert_int_equal(pm_sched_parse_text(&b, txt, n, NULL), PM_OK);
    assert_same_sched(&a, &b);
    free(txt);
    pm_sched_free(&a);
    pm_sched_free(&b);
}

/* Every registered generator's schedule survives text and CSV. Kinds that
 * refuse p = 4, m = 8 are skipped: the generators' own tests cover them. */
static void test_roundtrip_generated(void **state) {
    (void)state;
    int nk = 0, done = 0;
    const pm_sched_kind *kinds = pm_sched_kinds(&nk);
    for (int k = 0; k < nk; k++) {
        pm_sched_req req = {.p = 4, .m = 8, .t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
        pm_sched a, b;
        if (pm_sched_generate(&a, kinds[k].name, &req, NULL)) continue;
        for (int csv = 0; csv < 2; csv++) {
            char *txt;
            size_t n;
            pm_err err;
            write_str(csv ? pm_sched_write_csv : pm_sched_write_text, &a, &txt, &n);
            pm_status st = csv ? pm_sched_parse_csv(&b, txt, n, &err)
                               : pm_sched_parse_text(&b, txt, n, &err);
            if (st) fail_msg("%s: %s", kinds[k].name, err.msg);
            assert_same_sched(&a, &b);
            free(txt);
            pm_sched_free(&b);
        }
        pm_sched_free(&a);
        done++;
    }
    assert_true(done > 0);
}

/* ---- reading -------------------------------------------------------------- */

static void expect_place(const char *text, pm_place pl, int p, int m, int v) {
    pm_sched s;
    pm_err err;
    if (pm_sched_parse_text(&s, text, strlen(text), &err)) fail_msg("%s: %s", text, err.msg);
    assert_int_equal(s.place, pl);
    assert_int_equal(s.p, p);
    assert_int_equal(s.m, m);
    assert_int_equal(s.v, v);
    assert_int_equal(s.S, p * v);
    pm_sched_free(&s);
}

static void test_placement_inference(void **state) {
    (void)state;
    expect_place("0F0\n", PM_PLACE_SINGLE, 1, 1, 1);
    expect_place("0F0 0F4\n1F2\n2F0\n", PM_PLACE_SINGLE, 3, 5, 1);
    expect_place("0F0 3F0\n1F0 2F0\n", PM_PLACE_V, 2, 1, 2);
    expect_place("0F0 5F1\n1F0 4F0\n2F0 3F0\n", PM_PLACE_V, 3, 2, 2);
    expect_place("0F0 2F0\n1F0 3F0\n", PM_PLACE_LOOP, 2, 1, 2);
    expect_place("0F0 3F0 6F0\n1F0 4F0 7F0\n2F0 5F2 8F0\n", PM_PLACE_LOOP, 3, 3, 3);
    /* One device with two stages: V and loop coincide; V is tried first. */
    expect_place("0F0 1F0\n", PM_PLACE_V, 1, 1, 2);
    expect_place("0F0 1F0 2F0\n", PM_PLACE_LOOP, 1, 1, 3);
    /* A stage that appears only on its device's row still places. */
    expect_place("# two devices\n\n0F0 # first\n  1F1\t\n", PM_PLACE_SINGLE, 2, 2, 1);
}

static void test_placement_errors(void **state) {
    (void)state;
    /* Stage 1 on row 0: V (tried before loop) wants it on row 1. */
    expect_error(0, "0F0 1F0\n2F0 3F0\n", 1, 5, "stage 1 is on row 0");
    /* S = p = 3, so single (and loop with one chunk) apply: stage 2 misplaced. */
    expect_error(0, "0F0\n2F0\n1F0\n", 2, 1, "stage 2 is on row 1, but the single");
    expect_error(0, "0F0 1F0\n1F1\n", 2, 1, "stage 1 is on row 1 but also on row 0");
    expect_error(0, "0F0 2F0\n1F0\n", 1, 5, "do not divide among 2 rows");
    expect_error(1, "0F0,1F0,2F0,3F0\n4F0,5F0\n", 1, 5, "stage 1 is on row 0");
}

static void test_malformed_line_and_column(void **state) {
    (void)state;
    expect_error(0, "0F0 0X1\n", 1, 6, "unknown action type");
    expect_error(0, "0F0\n\n  0F\n", 3, 5, "missing microbatch");
    expect_error(0, "0F0 F1\n", 1, 5, "not an action");
    expect_error(0, "0F0 0F1x\n", 1, 8, "unexpected text");
    expect_error(0, "0F0 0F1,0F2\n", 1, 8, "unexpected text");
    expect_error(0, "0F99999999\n", 1, 3, "microbatch number too large");
    expect_error(0, "99999F0\n", 1, 1, "stage number too large");
    expect_error(0, "0f0\n", 1, 2, "unknown action type");
    expect_error(0, "0F-1\n", 1, 3, "missing microbatch");
    expect_error(0, "\t0F0 (0F1;;0I0)OVERLAP_F_B\n", 1, 11, "empty sub-action");
    expect_error(0, "0F0 (0F1;0I0)OVERLAP\n", 1, 5, "malformed overlapped action");
    expect_error(0, "0F0 0I0 0W0 0F0\n", 1, 13, "more than 3 actions");
    expect_error(0, "# nothing here\n\n", 2, 1, "no compute actions");
    expect_error(0, "", 1, 1, "no compute actions");
    expect_error(0, "65535F1048575\n", 1, 1, "too large");
    expect_error(1, "0F0,0F1\n1F0,1Q0\n", 2, 6, "unknown action type");
    expect_error(1, "0F0,0F1\n,1SEND_F0,,\n1F0\n", 2, 1, "row 1 has no compute action");
    expect_error(0, "0F0 # only a comment follows\n0UNSHARD\n", 2, 1, "row 1 has no compute");
    expect_error(1, "0F0,  0F1 x,0F2\n", 1, 11, "unexpected text");
    expect_error(1, "0F0,0F1\r\n1F0,\"1F\"\r\n", 2, 8, "missing microbatch");
    /* The NUL really is inside the input when the length says so. */
    pm_sched s;
    pm_err err;
    assert_int_equal(pm_sched_parse_text(&s, "0F0\n0F\0000", 7, &err), PM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "line 2, column 3: NUL byte"));
}

/* What PyTorch writes and tolerates: empty cells for idle steps, CRLF, a
 * byte order mark, quoted cells, comm actions, overlapped pairs. */
static void test_csv_pytorch_features(void **state) {
    (void)state;
    const char *csv = "\xEF\xBB\xBF"
                      "0F0,,0SEND_F0,0UNSHARD,\"0F1\", 0RECV_B0 ,0I0,0W0,0I1,0W1\r\n"
                      ",1RECV_F0,1F0,1I0,(1F1; 1I1)OVERLAP_F_B,1REDUCE_GRAD,1W0,1W1,,\r\n";
    pm_sched s;
    pm_err err;
    if (pm_sched_parse_csv(&s, csv, strlen(csv), &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.p, 2);
    assert_int_equal(s.m, 2);
    assert_int_equal(s.place, PM_PLACE_SINGLE);
    char *out;
    size_t n;
    write_str(pm_sched_write_csv, &s, &out, &n);
    assert_string_equal(out, "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n");
    free(out);
    pm_sched_free(&s);
    /* The BOM does not shift columns on line 1. */
    expect_error(1, "\xEF\xBB\xBF" "0F0,0Z0\n", 1, 6, "unknown action type");
}

/* What PyTorch's _load_csv (torch.distributed.pipelining, format
 * "compute_only") accepts, restated from its source: csv.reader gives one
 * row per line, row r is rank r's list, and every cell, stripped, must be
 * empty (an idle step) or match (\d+)(F|I|B|W|UNSHARD|RESHARD|SEND_F|
 * RECV_F|SEND_B|RECV_B)(\d*) from its start; anything else raises "Invalid
 * action string". Returns the rows (ranks), or -1 with the bad cell in msg. */
static int pytorch_load_csv(const char *text, char *msg, size_t cap) {
    static const char *const types[] = {"UNSHARD", "RESHARD", "SEND_F", "RECV_F", "SEND_B",
                                        "RECV_B", "F", "I", "B", "W"};
    int rows = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        rows++;
        for (const char *c = line; c <= end;) {
            const char *ce = memchr(c, ',', (size_t)(end - c));
            if (!ce) ce = end;
            const char *a = c, *b = ce;
            while (a < b && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
            const char *q = a;
            while (q < b && *q >= '0' && *q <= '9') q++;
            int ok = a == b; /* empty: None */
            for (size_t k = 0; !ok && q > a && k < sizeof types / sizeof types[0]; k++)
                ok = (size_t)(b - q) >= strlen(types[k]) && !strncmp(q, types[k], strlen(types[k]));
            if (!ok) {
                snprintf(msg, cap, "rank %d: Invalid action string: %.*s", rows - 1,
                         (int)(b - a), a);
                return -1;
            }
            c = ce + 1;
        }
        line = *end ? end + 1 : end;
    }
    return rows;
}

/* A recomputed schedule written as CSV is what PyTorch loads: p ranks of
 * actions, no comment line (it started with "# pipemem: recompute", which
 * _load_csv refused); read back it has the same passes, without the mark,
 * which the text format keeps. */
static void test_csv_loadable_by_pytorch(void **state) {
    (void)state;
    pm_sched s, back;
    pm_err err;
    build_1f1b(&s, 3, 5);
    s.recompute = 1;
    char *csv, *txt, msg[200];
    size_t n;
    write_str(pm_sched_write_csv, &s, &csv, &n);
    int rows = pytorch_load_csv(csv, msg, sizeof msg);
    if (rows != s.p) fail_msg("%d ranks (want %d): %s\n%s", rows, s.p, rows < 0 ? msg : "", csv);
    assert_int_equal(pm_sched_parse_csv(&back, csv, n, &err), PM_OK);
    assert_same_sched(&s, &back);
    assert_int_equal(back.recompute, 0);
    pm_sched_free(&back);
    write_str(pm_sched_write_text, &s, &txt, &n);
    assert_int_equal(pm_sched_parse_text(&back, txt, n, &err), PM_OK);
    assert_int_equal(back.recompute, 1);
    pm_sched_free(&back);
    /* the checker refuses what PyTorch refuses: the old first line */
    assert_int_equal(pytorch_load_csv("# pipemem: recompute\n0F0,0B0\n", msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "Invalid action string: # pipemem: recompute"));
    /* and pipemem still reads a CSV written with it */
    const char *old = "# pipemem: recompute\n0F0,0B0\n";
    assert_int_equal(pm_sched_parse_csv(&back, old, strlen(old), &err), PM_OK);
    assert_int_equal(back.recompute, 1);
    pm_sched_free(&back);
    free(csv), free(txt);
    pm_sched_free(&s);
}

static void test_load_detects_format(void **state) {
    (void)state;
    char path[] = "/tmp/pm_test_format_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("# a CSV, with a comment, commas in it\n0F0,0B0\n1F0,1B0\n", f);
    fclose(f);
    pm_sched s;
    pm_err err;
    assert_int_equal(pm_sched_load(&s, path, &err), PM_OK);
    assert_int_equal(s.p, 2);
    assert_int_equal(s.len[1], 2);
    pm_sched_free(&s);
    f = fopen(path, "w");
    fputs("0F0 0B0 # text, though this comment has a comma\n1F0 1Z0\n", f);
    fclose(f);
    assert_int_equal(pm_sched_load(&s, path, &err), PM_ERR_FORMAT);
    char want[128];
    snprintf(want, sizeof want, "%s: line 2, column 6:", path);
    assert_int_equal(strncmp(err.msg, want, strlen(want)), 0);
    remove(path);
    assert_int_equal(pm_sched_load(&s, path, &err), PM_ERR_IO);
}

/* ---- JSON, SVG, trace ------------------------------------------------------ */

/* Reads the numbers of the JSON array that follows key. */
static int json_array(const char *json, const char *key, double *out, int max) {
    const char *p = strstr(json, key);
    if (!p) return -1;
    p = strchr(p, '[');
    int n = 0;
    for (p++; *p != ']' && n < max;) {
        char *end;
        out[n++] = strtod(p, &end);
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return n;
}

static void test_json_1f1b(void **state) {
    (void)state;
    enum { P = 4, M = 8 };
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_1f1b(&s, P, M);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_int_equal(pm_sched_write_json(f, &s, &c, &sim), PM_OK);
    fclose(f);
    assert_true(json_valid(buf, n));
    static const char *const keys[] = {"\"kind\": \"1f1b\"", "\"placement\": \"single\"",
                                       "\"p\": 4", "\"m\": 8", "\"v\": 1", "\"stages\": 4",
                                       "\"costs\": {\"uniform\": true", "\"makespan\": ",
                                       "\"bubble\": ", "\"peak\": [", "\"peak_max\": 1",
                                       "\"M\": 4", "\"devices\": ["};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (!strstr(buf, keys[k])) fail_msg("JSON lacks %s", keys[k]);
    /* The reference page: rank r peaks at p - r stage activations, M = p
     * stages, so (p - r) / p; and the simulator says the same. */
    double peak[P];
    assert_int_equal(json_array(buf, "\"peak\": [", peak, P), P);
    for (int r = 0; r < P; r++) {
        assert_true(fabs(peak[r] - (double)(P - r) / P) < 1e-9);
        assert_true(fabs(peak[r] - pm_sim_peak_x(&sim, r)) < 1e-9);
    }
    /* Makespan (m + p - 1)(F + B + W) = 33 at unit costs. */
    assert_non_null(strstr(buf, "\"makespan\": 33,"));
    assert_int_equal(count(buf, "\"kind\": \"F\""), P * M);
    assert_int_equal(count(buf, "\"kind\": \"BW\""), P * M);
    assert_int_equal(count(buf, "\"start\": "), 2 * P * M);
    assert_int_equal(count(buf, "{\"device\": "), P);
    free(buf);

    /* Per-stage costs that differ are written as arrays; no sim gives nulls. */
    c.st[2].tf = 2.5;
    f = open_memstream(&buf, &n);
    assert_int_equal(pm_sched_write_json(f, &s, &c, NULL), PM_OK);
    fclose(f);
    assert_true(json_valid(buf, n));
    assert_non_null(strstr(buf, "\"uniform\": false"));
    assert_non_null(strstr(buf, "\"tf\": [1, 1, 2.5, 1]"));
    assert_non_null(strstr(buf, "\"makespan\": null"));
    assert_null(strstr(buf, "\"start\""));
    assert_non_null(strstr(buf, "\"M\": 4,")); /* from the cost table */
    free(buf);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_json_peaks_v_gpipe(void **state) {
    (void)state;
    /* GPipe order on V, p = 3, m = 5, split backward: every device holds all
     * m microbatches of both its stages before any W: m * 2 * (1/2) = m
     * device shares; M = p shares, so the peak is m / p. */
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_gpipe(&s, PM_PLACE_V, 3, 5, 2, 1);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_int_equal(pm_sched_write_json(f, &s, &c, &sim), PM_OK);
    fclose(f);
    assert_true(json_valid(buf, n));
    assert_non_null(strstr(buf, "\"placement\": \"v\""));
    double peak[3];
    assert_int_equal(json_array(buf, "\"peak\": [", peak, 3), 3);
    for (int d = 0; d < 3; d++) assert_true(fabs(peak[d] - 5.0 / 3) < 1e-9);
    free(buf);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void svg_of(const pm_sched *s, const pm_sim *sim, const char *title, char **buf,
                   size_t *n) {
    FILE *f = open_memstream(buf, n);
    assert_int_equal(pm_sched_write_svg(f, s, sim, title), PM_OK);
    fclose(f);
}

/* Every pass's line of the JSON, in the order the devices list their
 * passes, its start and end reading back (strtod) as the simulator's very
 * doubles (the writer formats the numbers itself, for speed, issue 31; every
 * JSON number reads back as the same double), over costs whose times are
 * integers, short binary fractions, long fractions, tiny and huge numbers. */
static void test_json_numbers_read_back(void **state) {
    (void)state;
    const pm_costs costs[] = {{1, 1, 1, 0},          {0.5, 0.75, 0.125, 0.0625},
                              {1, 1.0 / 3, 0.7, 0.1}, {4959, 5217, 3519, 213},
                              {3e-5, 1e-5, 2e-5, 0},  {1e10, 3e10, 7e9, 1},
                              {0.1, 0.2, 0.3, 1e-4},  {123456.789, 2.5, 1e-3, 0},
                              /* binary fractions of more than 12 digits: the general form */
                              {1024.0009765625, 0.5, 0.25, 0}};
    for (size_t k = 0; k < sizeof costs / sizeof costs[0]; k++) {
        pm_sched_req rq = {.p = 4, .m = 8, .t = costs[k], .mem = PM_MEM_DEFAULT};
        pm_sched s;
        pm_cost c;
        pm_sim sim;
        pm_err err;
        assert_int_equal(pm_sched_generate(&s, "zb-v", &rq, &err), PM_OK);
        assert_int_equal(pm_cost_init_uniform(&c, &s, rq.t, rq.mem, &err), PM_OK);
        assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
        char *json = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&json, &n);
        assert_int_equal(pm_sched_write_json(f, &s, &c, &sim), PM_OK);
        fclose(f);
        const char *at = json;
        for (int d = 0; d < s.p; d++)
            for (int64_t i = 0; i < s.len[d]; i++) {
                const pm_pass *ps = &pm_sched_dev(&s, d)[i];
                int64_t x = (int64_t)d * s.cap + i;
                char line[256];
                snprintf(line, sizeof line, "{\"kind\": \"%s\", \"stage\": %d, \"mb\": %d, "
                         "\"start\": ", pm_pass_names[ps->kind], ps->stage, ps->mb);
                const char *got = strstr(at, line);
                if (!got) fail_msg("costs %zu, device %d, pass %lld: no '%s'", k, d, (long long)i,
                                   line);
                char *end;
                double t0 = strtod(got + strlen(line), &end), t1;
                if (strncmp(end, ", \"end\": ", 9)) fail_msg("costs %zu: '%.60s'", k, got);
                t1 = strtod(end + 9, &end);
                if (memcmp(&t0, &sim.start[x], 8) || memcmp(&t1, &sim.end[x], 8))
                    fail_msg("costs %zu, device %d, pass %lld: '%.*s' reads back as %.17g, %.17g "
                             "(the simulator's %.17g, %.17g)", k, d, (long long)i,
                             (int)(end - got), got, t0, t1, sim.start[x], sim.end[x]);
                at = end;
            }
        free(json);
        pm_sim_free(&sim);
        pm_cost_free(&c);
        pm_sched_free(&s);
    }
}

static void test_svg_rows_and_title(void **state) {
    (void)state;
    enum { P = 4, M = 8 };
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_1f1b(&s, P, M);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    size_t n;
    char *svg;
    svg_of(&s, &sim, "1F1B <&>", &svg, &n);
    assert_int_equal(strncmp(svg, "<svg ", 5), 0);
    char msg[512]; /* parsed as XML: one row per device, one box per pass where sim puts it */
    if (chk_svg(svg, n, &s, &sim, msg, sizeof msg)) fail_msg("%s", msg);
    assert_int_equal(count(svg, "<g "), count(svg, "</g>"));
    /* Bubble (p-1)/(m+p-1) = 3/11 = 27.3%, peak M: the reference page. */
    assert_non_null(strstr(svg, "1F1B &lt;&amp;&gt;: p=4 m=8"));
    assert_non_null(strstr(svg, "bubble 27.3%"));
    assert_non_null(strstr(svg, "peak 1.00 M"));
    /* Every pass is a rect with its microbatch number (units are wide). */
    assert_int_equal(count(svg, "<title>device"), 2 * P * M);
    assert_int_equal(count(svg, "text-anchor=\"middle\" fill="), 2 * P * M);
    free(svg);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

/* p = 64, m = 256 on V: one row per device and a bounded width. */
static void test_svg_scales(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_gpipe(&s, PM_PLACE_V, 64, 256, 2, 1);
    assert_int_equal(pm_cost_init_uniform(&c, &s, (pm_costs){4959, 5217, 3519, 213},
                                          PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    size_t n;
    char *svg;
    svg_of(&s, &sim, NULL, &svg, &n);
    char msg[512];
    if (chk_svg(svg, n, &s, &sim, msg, sizeof msg)) fail_msg("%s", msg);
    int w = atoi(strstr(svg, "width=\"") + 7);
    assert_true(w >= 600 && w <= 8200);
    assert_true(n < 40u * 1024 * 1024);
    assert_null(strstr(svg, "<title>")); /* tooltips dropped at this size */
    /* F of chunk 1 in the dark shade: every (device, mb) plus the legend. */
    assert_int_equal(count(svg, "fill=\"#2f6bc0\""), 64 * 256 + 1);
    free(svg);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

static void test_trace(void **state) {
    (void)state;
    pm_sched s;
    pm_cost c;
    pm_sim sim;
    build_gpipe(&s, PM_PLACE_V, 3, 4, 2, 1);
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, NULL), PM_OK);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_int_equal(pm_sched_write_trace(f, &s, &sim), PM_OK);
    fclose(f);
    /* parsed as JSON: 3 * 3 * 4 * 2 X events, one per pass, at the sim's times */
    char msg[512];
    if (chk_trace(buf, n, &s, &sim, msg, sizeof msg)) fail_msg("%s", msg);
    assert_non_null(strstr(buf, "\"args\": {\"name\": \"device 2\"}"));
    /* Writers refuse a simulation of another schedule. */
    pm_sched other;
    build_1f1b(&other, 2, 2);
    free(buf);
    f = open_memstream(&buf, &n);
    assert_int_equal(pm_sched_write_trace(f, &other, &sim), PM_ERR_ARG);
    assert_int_equal(pm_sched_write_svg(f, &other, &sim, NULL), PM_ERR_ARG);
    assert_int_equal(pm_sched_write_svg(f, &other, NULL, NULL), PM_ERR_ARG);
    fclose(f);
    free(buf);
    pm_sched_free(&other);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_roundtrip_bytes),
        cmocka_unit_test(test_csv_roundtrip_bytes),
        cmocka_unit_test(test_sched_roundtrip_every_placement),
        cmocka_unit_test(test_roundtrip_generated),
        cmocka_unit_test(test_placement_inference),
        cmocka_unit_test(test_placement_errors),
        cmocka_unit_test(test_malformed_line_and_column),
        cmocka_unit_test(test_csv_pytorch_features),
        cmocka_unit_test(test_csv_loadable_by_pytorch),
        cmocka_unit_test(test_load_detects_format),
        cmocka_unit_test(test_json_1f1b),
        cmocka_unit_test(test_json_peaks_v_gpipe),
        cmocka_unit_test(test_json_numbers_read_back),
        cmocka_unit_test(test_svg_rows_and_title),
        cmocka_unit_test(test_svg_scales),
        cmocka_unit_test(test_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
