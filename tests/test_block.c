/* test_block.c: building blocks: the text format (parse, write, errors with
 * line and column, robustness against garbage), the named V blocks against
 * the papers' offset formulas and the shipped files in blocks/, legality
 * and collisions, lifespans and the memory theorem's bound on blocks
 * checked by hand. */
#define _GNU_SOURCE /* open_memstream is POSIX 2008; the Makefile asks for it */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pipemem/pm_sched.h"

static pm_status parse(pm_block *b, const char *text, pm_err *err) {
    return pm_block_parse(b, text, strlen(text), err);
}

/* The pass of (dev, chunk, kind), or NULL. */
static const pm_block_pass *find(const pm_block *b, int dev, int chunk, int kind) {
    for (int i = 0; i < b->n; i++)
        if (b->pass[i].dev == dev && b->pass[i].chunk == chunk && b->pass[i].kind == kind)
            return &b->pass[i];
    return NULL;
}

static char *block_text(const pm_block *b) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    assert_int_equal(pm_block_write(f, b), PM_OK);
    fclose(f);
    return buf;
}

/* ---- named blocks -------------------------------------------------------- */

/* F and B offsets are the papers' formulas (schedules.md), written out here
 * independently of block.c. */
static void test_named_offsets_follow_formulas(void **state) {
    (void)state;
    for (int p = 1; p <= 32; p++) {
        pm_block mn, hf;
        pm_err err;
        assert_int_equal(pm_block_named(&mn, "v-min", p, &err), PM_OK);
        assert_int_equal(pm_block_named(&hf, "v-half", p, &err), PM_OK);
        assert_int_equal(mn.T, 6);
        assert_int_equal(mn.n, 6 * p); /* F, B, W of 2 chunks per device */
        assert_int_equal(hf.n, 6 * p);
        int a = p % 3 == 0 ? 2 : 0, h = p % 2 == 0 ? 3 : 0;
        for (int i = 0; i < p; i++) {
            assert_int_equal(find(&mn, i, 0, PM_PASS_F)->off, i);
            assert_int_equal(find(&mn, i, 1, PM_PASS_F)->off, 2 * p - 1 - i);
            assert_int_equal(find(&mn, i, 1, PM_PASS_B)->off, 2 * p + a + i);
            assert_int_equal(find(&mn, i, 0, PM_PASS_B)->off, 4 * p + a - 1 - i);
            assert_int_equal(find(&hf, i, 0, PM_PASS_F)->off, 2 * i);
            assert_int_equal(find(&hf, i, 1, PM_PASS_F)->off, 3 * p - 2 - i);
            assert_int_equal(find(&hf, i, 1, PM_PASS_B)->off, 3 * p + h + 2 * i - 1);
            assert_int_equal(find(&hf, i, 0, PM_PASS_B)->off, 6 * p + h - 2 - i);
            /* each W after its own B */
            for (int c = 0; c < 2; c++) {
                assert_true(find(&mn, i, c, PM_PASS_W)->off > find(&mn, i, c, PM_PASS_B)->off);
                assert_true(find(&hf, i, c, PM_PASS_W)->off > find(&hf, i, c, PM_PASS_B)->off);
            }
        }
        pm_block_free(&mn);
        pm_block_free(&hf);
    }
}

/* The W rule worked by hand for V-Min, p = 4, device 0: F0 0, F1 7, B1 8,
 * B0 15 leave residues 4 and 5 free. B1(k) ends at 9+6k, B0(k-1) at
 * 10+6k: W of B1(k) takes 10+6k, W of B0(k-1) takes 11+6k = 17+6(k-1).
 * Device 3: F0 3, F1 4, B1 11, B0 12 leave 1 and 2: W1 13, W0 14. */
static void test_w_fill_by_hand(void **state) {
    (void)state;
    pm_block b;
    assert_int_equal(pm_block_named(&b, "v-min", 4, NULL), PM_OK);
    assert_int_equal(find(&b, 0, 1, PM_PASS_W)->off, 10);
    assert_int_equal(find(&b, 0, 0, PM_PASS_W)->off, 17);
    assert_int_equal(find(&b, 3, 1, PM_PASS_W)->off, 13);
    assert_int_equal(find(&b, 3, 0, PM_PASS_W)->off, 14);
    pm_block_free(&b);
}

static void test_named_blocks_legal(void **state) {
    (void)state;
    static const char *names[] = {"v-min", "v-half", "1f1b-v"};
    for (int k = 0; k < 3; k++)
        for (int p = 1; p <= 40; p++) {
            pm_block b;
            pm_block_info in;
            pm_err err;
            assert_int_equal(pm_block_named(&b, names[k], p, &err), PM_OK);
            assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
            if (!in.legal) fail_msg("%s p=%d: device %d residue %d", names[k], p, in.bad_dev, in.bad_residue);
            /* 1f1b-v: F, F, BW(2), BW(2) fill the interval of 6 exactly */
            if (k == 2)
                for (int i = 0; i < b.n; i++)
                    assert_int_equal(b.pass[i].dur, b.pass[i].kind == PM_PASS_BW ? 2 : 1);
            pm_block_info_free(&in);
            pm_block_free(&b);
        }
    pm_block b;
    pm_err err;
    assert_int_equal(pm_block_named(&b, "v-quarter", 4, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "v-min"));
    assert_int_equal(pm_block_named(&b, "v-min", 0, &err), PM_ERR_ARG);
}

/* The 1f1b-v search keeps a node budget; from p = 508 the budget was
 * smaller than the first (greedy) descent and the search asserted. Every
 * p up to the named-block limit must give a legal block with BW of 2. */
static void test_1f1b_v_large_p(void **state) {
    (void)state;
    static const int ps[] = {507, 508, 509, 777, 1024};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        pm_block b;
        pm_block_info in;
        pm_err err;
        assert_int_equal(pm_block_named(&b, "1f1b-v", ps[k], &err), PM_OK);
        assert_int_equal(b.n, 4 * ps[k]);
        assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
        if (!in.legal) fail_msg("1f1b-v p=%d: device %d residue %d", ps[k], in.bad_dev, in.bad_residue);
        pm_block_info_free(&in);
        pm_block_free(&b);
    }
}

/* 1F1B-V's named block is the chain block (forwards back to back: device
 * i's chunk-0 F at slot i, its chunk-1 F at 2p-1-i) for every p except 3,
 * 6 and 9, where the chain needs one activation more than the searched
 * block; legal everywhere, BW of 2 slots. */
static void test_1f1b_v_chain(void **state) {
    (void)state;
    static const int big[] = {100, 255, 256, 509, 1000, 1024};
    for (int k = 0; k < 64 + (int)(sizeof big / sizeof big[0]); k++) {
        int p = k < 64 ? k + 1 : big[k - 64];
        pm_block b;
        pm_block_info in;
        pm_err err;
        assert_int_equal(pm_block_named(&b, "1f1b-v", p, &err), PM_OK);
        assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
        if (!in.legal) fail_msg("1f1b-v p=%d: device %d residue %d", p, in.bad_dev, in.bad_residue);
        int chain = 1;
        for (int i = 0; i < b.n; i++) {
            const pm_block_pass *x = &b.pass[i];
            if (x->kind == PM_PASS_F)
                chain &= x->off == (x->chunk == 0 ? x->dev : 2 * p - 1 - x->dev);
            else
                assert_int_equal(x->dur, 2);
        }
        if (chain != (p != 3 && p != 6 && p != 9))
            fail_msg("1f1b-v p=%d: %s block", p, chain ? "chain" : "searched");
        pm_block_info_free(&in);
        pm_block_free(&b);
    }
}

/* The shipped files are what `pipemem block --named` prints: the same
 * passes, and the same text once the leading comment is dropped. */
static void test_shipped_files_match(void **state) {
    (void)state;
    static const struct { const char *file, *name; int p; } files[] = {
        {"blocks/v-min-p4.block", "v-min", 4},   {"blocks/v-min-p8.block", "v-min", 8},
        {"blocks/v-half-p4.block", "v-half", 4}, {"blocks/v-half-p8.block", "v-half", 8},
        {"blocks/1f1b-v-p4.block", "1f1b-v", 4}, {"blocks/1f1b-v-p8.block", "1f1b-v", 8},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *text;
        size_t len;
        pm_err err;
        pm_block fb, nb;
        if (pm_read_file(files[i].file, PM_TEXT_MAX, &text, &len, &err))
            fail_msg("%s (run the tests from the repository root)", err.msg);
        if (pm_block_parse(&fb, text, len, &err)) fail_msg("%s: %s", files[i].file, err.msg);
        assert_int_equal(pm_block_named(&nb, files[i].name, files[i].p, &err), PM_OK);
        char *a = block_text(&fb), *b = block_text(&nb);
        assert_string_equal(a, b);
        const char *body = text;
        while (*body == '#') body = strchr(body, '\n') + 1;
        assert_string_equal(body, b);
        free(a);
        free(b);
        free(text);
        pm_block_free(&fb);
        pm_block_free(&nb);
    }
}

/* ---- hand-checked blocks --------------------------------------------------- */

/* Two devices, single placement, T = 4:
 *   device 0: F 0, B 3, W 5      device 1: F 1, B 2, W 3
 * residues: device 0 {0, 3, 1}, device 1 {1, 2, 3}: legal.
 * Lifespans: device 0 from 0 to the end of W at 6 = 6; device 1 1..4 = 3.
 * Bound: ceil(6/4) = 2 activations of a stage that is M/2, so 1.0 M;
 * ceil(3/4) = 1, so 0.5 M. */
/* A block of 2 devices by hand (tests/data/tiny.block, which the
 * command-line suite feeds `pipemem block` too), read at the start. */
static char tiny[512];

static int read_tiny(void **state) {
    (void)state;
    FILE *f = fopen("tests/data/tiny.block", "r");
    size_t n = f ? fread(tiny, 1, sizeof tiny - 1, f) : 0;
    if (f) fclose(f);
    tiny[n] = 0;
    return n > 0 && n < sizeof tiny - 1 ? 0 : -1;
}

static void test_tiny_lifespans_and_bound(void **state) {
    (void)state;
    pm_block b;
    pm_block_info in;
    pm_err err;
    assert_int_equal(parse(&b, tiny, &err), PM_OK);
    assert_int_equal(b.p, 2);
    assert_int_equal(b.v, 1);
    assert_int_equal(b.T, 4);
    assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
    assert_true(in.legal);
    assert_int_equal(in.lifespan[0], 6);
    assert_int_equal(in.lifespan[1], 3);
    assert_true(in.bound[0] == 1.0);
    assert_true(in.bound[1] == 0.5);
    /* The theorem: the built schedule's peaks stay under the bound. */
    pm_sched s;
    pm_sched_req req = {.p = 2, .m = 7};
    assert_int_equal(pm_sched_from_block(&s, &b, &req, "tiny", &err), PM_OK);
    pm_cost c;
    pm_sim sim;
    assert_int_equal(pm_cost_init_uniform(&c, &s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, NULL), PM_OK);
    assert_int_equal(pm_sim_run(&sim, &s, &c, &err), PM_OK);
    assert_int_equal(pm_sched_validate(&s, &c, 0, &err), PM_OK);
    for (int d = 0; d < 2; d++) assert_true(pm_sim_peak_x(&sim, d) <= in.bound[d] + 1e-12);
    pm_sim_free(&sim);
    pm_cost_free(&c);
    pm_sched_free(&s);
    pm_block_info_free(&in);
    pm_block_free(&b);
}

/* Device 1's W moved to slot 5 shares residue 1 with its F at 1. */
static void test_collision_named(void **state) {
    (void)state;
    char text[sizeof tiny];
    memcpy(text, tiny, sizeof tiny);
    char *w = strstr(text, "1 0 W 3");
    w[6] = '5';
    pm_block b;
    pm_block_info in;
    pm_err err;
    assert_int_equal(parse(&b, text, &err), PM_OK); /* legality is not a parse error */
    assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
    assert_false(in.legal);
    assert_int_equal(in.bad_dev, 1);
    assert_int_equal(in.bad_residue, 1);
    const pm_block_pass *x = &b.pass[in.bad_pass[0]], *y = &b.pass[in.bad_pass[1]];
    assert_int_equal(x->dev, 1);
    assert_int_equal(y->dev, 1);
    assert_true((x->kind == PM_PASS_F && y->kind == PM_PASS_W) ||
                (x->kind == PM_PASS_W && y->kind == PM_PASS_F));
    pm_block_info_free(&in);
    pm_sched s;
    pm_sched_req req = {.p = 2, .m = 4};
    assert_int_equal(pm_sched_from_block(&s, &b, &req, "bad", &err), PM_ERR_INVALID);
    assert_non_null(strstr(err.msg, "device 1"));
    assert_non_null(strstr(err.msg, "residue 1"));
    pm_block_free(&b);
}

/* A BW of 2 slots collides through its second slot. */
static void test_collision_second_slot(void **state) {
    (void)state;
    const char *text = "block v1\ndevices 1\nplacement single\ninterval 3\n"
                       "0 0 F 0\n0 0 BW 2\n";
    pm_block b;
    pm_block_info in;
    pm_err err;
    assert_int_equal(parse(&b, text, &err), PM_OK);
    assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
    assert_false(in.legal); /* BW at 2 covers 2 and 3 = residue 0, F's */
    assert_int_equal(in.bad_dev, 0);
    assert_int_equal(in.bad_residue, 0);
    pm_block_info_free(&in);
    pm_block_free(&b);
}

/* Leaving the W lines out fills them by the first-free-slot rule: V-Min
 * p = 4 without W equals the named block. */
static void test_missing_w_filled(void **state) {
    (void)state;
    pm_block named, b;
    pm_err err;
    assert_int_equal(pm_block_named(&named, "v-min", 4, &err), PM_OK);
    char *full = block_text(&named), *text = malloc(strlen(full) + 1), *o = text;
    for (const char *line = full; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line + 1) : strlen(line);
        if (!strstr(line, " W ") || (nl && strstr(line, " W ") > nl)) memcpy(o, line, n), o += n;
        line += n;
    }
    *o = 0;
    assert_null(strstr(text, " W "));
    assert_int_equal(parse(&b, text, &err), PM_OK);
    char *again = block_text(&b);
    assert_string_equal(again, full);
    free(again);
    free(full);
    free(text);
    pm_block_free(&b);
    pm_block_free(&named);
}

static void test_write_parse_round_trip(void **state) {
    (void)state;
    static const char *names[] = {"v-min", "v-half", "1f1b-v"};
    for (int k = 0; k < 3; k++)
        for (int p = 2; p <= 9; p += 7) {
            pm_block b, r;
            pm_err err;
            assert_int_equal(pm_block_named(&b, names[k], p, &err), PM_OK);
            char *t = block_text(&b);
            if (parse(&r, t, &err)) fail_msg("%s", err.msg);
            char *t2 = block_text(&r);
            assert_string_equal(t, t2);
            free(t);
            free(t2);
            pm_block_free(&b);
            pm_block_free(&r);
        }
}

/* ---- parser errors --------------------------------------------------------- */

static const char head[] = "block v1\ndevices 2\nplacement v\ninterval 6\n";

/* Parses head + body (or body alone when no_head) and expects a format
 * error whose message contains want. */
static void expect_error(const char *body, int no_head, const char *want) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", no_head ? "" : head, body);
    pm_block b;
    pm_err err = {{0}};
    pm_status st = parse(&b, text, &err);
    if (st == PM_OK) fail_msg("accepted: %s", body);
    assert_int_equal(st, PM_ERR_FORMAT);
    if (!strstr(err.msg, want)) fail_msg("'%s' lacks '%s'", err.msg, want);
    assert_null(b.pass);
}

/* A valid V block body for p = 2 (V-Min's offsets with W). */
static const char v2[] = "0 0 F 0\n1 0 F 1\n1 1 F 2\n0 1 F 3\n0 1 B 4\n0 1 W 5\n"
                         "1 1 B 5\n1 0 B 6\n0 0 B 7\n0 0 W 8\n1 1 W 9\n1 0 W 10\n";

static void test_parse_errors_line_column(void **state) {
    (void)state;
    char body[512];
    pm_block b;
    pm_err err;
    snprintf(body, sizeof body, "%s%s", head, v2);
    assert_int_equal(parse(&b, body, &err), PM_OK);
    pm_block_free(&b);

    expect_error("", 1, "line 1, column 1: empty");
    expect_error("block v2\n", 1, "line 1, column 1: expected 'block v1'");
    expect_error("\n\n  blok v1\n", 1, "line 3, column 3");
    expect_error("block v1\ndevices x\n", 1, "line 2, column 9: devices must be a whole number");
    expect_error("block v1\ndevices 5000\n", 1, "line 2, column 9: devices 5000 out of range");
    expect_error("block v1\ndevices 2\ndevices 3\n", 1, "line 3, column 1: 'devices' given twice (first on line 2)");
    expect_error("block v1\nplacement w\n", 1, "line 2, column 11: placement must be single, loop or v");
    expect_error("block v1\ndevices 2\nplacement v\n0 0 F 0\n", 1, "line 4, column 1: the header has no 'interval' line");
    expect_error("block v1\ndevices 2\nplacement loop\ninterval 6\n0 0 F 0\n", 1, "chunks");
    expect_error("0 0 X 0\n", 0, "line 5, column 5: pass kind must be F, B, W or BW, got 'X'");
    expect_error("0 2 F 0\n", 0, "line 5, column 3: chunk 2 out of range 0..1");
    expect_error("0 0 F 99999999\n", 0, "line 5, column 7: offset 99999999 out of range");
    expect_error("0 0 F 1 1 extra\n", 0, "line 5, column 11: unexpected 'extra'");
    expect_error("0 0 F\n", 0, "line 5, column 6: a pass line is DEVICE CHUNK KIND OFFSET");
    expect_error("0 0 F 0 7\n", 0, "line 5, column 9: slots 7 out of range 1..6");
    expect_error("0 0 F 0\n0 0 f 1\n", 0, "line 6, column 1: device 0 chunk 0 F given twice (first on line 5)");
    expect_error("0 0 F 0\ninterval 7\n", 0, "line 6, column 1: 'interval' after the first pass");
    expect_error("0 0 F 0\n\tfoo 1\n", 0, "line 6, column 2: unknown line 'foo'");
    /* incomplete and out-of-order blocks */
    expect_error("0 0 F 0\n", 0, "device 0 chunk 0 has no backward pass");
    expect_error("0 0 B 3\n", 0, "device 0 chunk 0 has no F pass");
    /* stage 1 (device 1 chunk 0) forward before stage 0's ends */
    snprintf(body, sizeof body, "%s", v2);
    body[14] = '0'; /* "1 0 F 1" -> "1 0 F 0" */
    expect_error(body, 0, "line 6: device 1 chunk 0 F at slot 0 starts before the F of the stage before");
    /* a W before its B */
    expect_error("0 0 F 0\n1 0 F 1\n1 1 F 2\n0 1 F 3\n0 1 B 4\n0 1 W 3\n"
                 "1 1 B 5\n1 0 B 6\n0 0 B 7\n0 0 W 8\n1 1 W 9\n1 0 W 10\n",
                 0, "line 10: device 0 chunk 1 W at slot 3 starts before its own B");
    expect_error("block v1\ndevices 1\nplacement single\ninterval 6\n0 0 F 0\n0 0 BW 1\n0 0 W 3\n", 1,
                 "BW and also B or W");
}

/* Comments, blank lines, tabs, CRLF and case are all accepted. */
static void test_parse_lenient_layout(void **state) {
    (void)state;
    const char *text = "\r\n# hello\nBLOCK V1 # magic\r\n\tdevices\t1\r\nplacement Single\n"
                       "interval 3\n\n0 0 f 0 # forward\r\n0 0 bw 1 2\r\n";
    pm_block b;
    pm_err err;
    assert_int_equal(parse(&b, text, &err), PM_OK);
    assert_int_equal(b.n, 2);
    assert_int_equal(find(&b, 0, 0, PM_PASS_BW)->dur, 2);
    pm_block_free(&b);
}

/* Garbage and mutations of a valid block: an error or a valid block, never
 * a crash (the fuzz target goes further; this runs in every test pass). */
static void test_parse_never_crashes(void **state) {
    (void)state;
    char base[512], text[512];
    snprintf(base, sizeof base, "%s%s", head, v2);
    size_t n = strlen(base);
    uint32_t seed = 12345;
    static const char alphabet[] = "0123456789 \n\t#-FBWbwx\r\0";
    for (int it = 0; it < 20000; it++) {
        memcpy(text, base, n + 1);
        size_t len = n;
        int edits = 1 + (int)(seed % 4);
        for (int e = 0; e < edits; e++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % len;
            char ch = alphabet[(seed >> 20) % (sizeof alphabet - 1)];
            if ((seed >> 3) % 3 == 0 && len > 1) { /* delete */
                memmove(text + at, text + at + 1, len - at);
                len--;
            } else {
                text[at] = ch;
            }
        }
        pm_block b;
        pm_err err;
        pm_status st = pm_block_parse(&b, text, len, &err);
        assert_true(st == PM_OK || st == PM_ERR_FORMAT);
        if (st == PM_OK) {
            pm_block_info in;
            assert_int_equal(pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err), PM_OK);
            pm_block_info_free(&in);
            pm_block_free(&b);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_offsets_follow_formulas),
        cmocka_unit_test(test_w_fill_by_hand),
        cmocka_unit_test(test_named_blocks_legal),
        cmocka_unit_test(test_1f1b_v_large_p),
        cmocka_unit_test(test_1f1b_v_chain),
        cmocka_unit_test(test_shipped_files_match),
        cmocka_unit_test(test_tiny_lifespans_and_bound),
        cmocka_unit_test(test_collision_named),
        cmocka_unit_test(test_collision_second_slot),
        cmocka_unit_test(test_missing_w_filled),
        cmocka_unit_test(test_write_parse_round_trip),
        cmocka_unit_test(test_parse_errors_line_column),
        cmocka_unit_test(test_parse_lenient_layout),
        cmocka_unit_test(test_parse_never_crashes),
    };
    return cmocka_run_group_tests(tests, read_tiny, NULL);
}
