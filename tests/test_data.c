/* test_data.c: tokenizer/token files, prepare's split, the loader's
 * determinism and resumability, and every bad-input error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipemem/pm_data.h"
#include "pipemem/pm_tokenizer.h"
#include "data/loader.h"
#include "data/internal.h"

static char tmpdir[256];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pm_test_data_%d", (int)getpid());
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    fclose(f);
}

static void test_prepare_split_and_roundtrip(void **state) {
    (void)state;
    char in1[300], in2[300], dir[300], p[400];
    snprintf(dir, sizeof dir, "%s/d", tmpdir);
    char mk[400];
    snprintf(mk, sizeof mk, "mkdir -p %s", tmpdir);
    assert_int_equal(system(mk), 0);
    snprintf(in1, sizeof in1, "%s/a.txt", tmpdir);
    snprintf(in2, sizeof in2, "%s/b.txt", tmpdir);
    char text[100];
    for (int i = 0; i < 100; i++) text[i] = (char)(i * 7 + 3); /* all 100 bytes differ */
    write_text(in1, text, 60);
    write_text(in2, text + 60, 40);
    const char *files[] = {in1, in2};
    pm_err err = {{0}};
    pm_prepare_stats st;
    assert_int_equal(pm_data_prepare(files, 2, dir, NULL, 0, &st, &err), PM_OK);
    assert_int_equal(st.total, 100);
    assert_int_equal(st.n_train, 90);
    assert_int_equal(st.n_val, 10);
    pm_tokens tr, va;
    snprintf(p, sizeof p, "%s/train.bin", dir);
    assert_int_equal(pm_tokens_read(&tr, p, &err), PM_OK);
    snprintf(p, sizeof p, "%s/val.bin", dir);
    assert_int_equal(pm_tokens_read(&va, p, &err), PM_OK);
    assert_int_equal(tr.n, 90);
    assert_int_equal(va.n, 10);
    /* Byte-level: the train file is the first 90 bytes, val the last 10. */
    assert_memory_equal(tr.tok, text, 90);
    assert_memory_equal(va.tok, text + 90, 10);
    pm_tokens_free(&tr);
    pm_tokens_free(&va);
    pm_tokens_free(&va); /* safe twice */
}

static void test_prepare_empty_text(void **state) {
    (void)state;
    char mk[400], in[300], dir[300];
    snprintf(mk, sizeof mk, "mkdir -p %s", tmpdir);
    assert_int_equal(system(mk), 0);
    snprintf(in, sizeof in, "%s/empty.txt", tmpdir);
    snprintf(dir, sizeof dir, "%s/e", tmpdir);
    write_text(in, "", 0);
    const char *files[] = {in};
    pm_err err = {{0}};
    assert_int_equal(pm_data_prepare(files, 1, dir, NULL, 0, NULL, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "no bytes"));
    assert_null(strchr(err.msg, '\n'));
    snprintf(in, sizeof in, "%s/missing.txt", tmpdir);
    const char *missing[] = {in};
    assert_int_equal(pm_data_prepare(missing, 1, dir, NULL, 0, NULL, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.txt"));
}

/* An output that cannot be opened (a file where the directory should be,
 * train.bin or val.bin a directory) is one error, leaves what was there
 * untouched and frees each path once (it was freed twice: issue 19). */
static void test_prepare_unwritable_outputs(void **state) {
    (void)state;
    char mk[700], in[300], out[300], sub[400];
    snprintf(mk, sizeof mk, "mkdir -p %s", tmpdir);
    assert_int_equal(system(mk), 0);
    snprintf(in, sizeof in, "%s/text.txt", tmpdir);
    write_text(in, "some text that is long enough to split\n", 39);
    const char *files[] = {in};
    pm_err err = {{0}};
    /* -o an existing file: refused, the file keeps its bytes */
    snprintf(out, sizeof out, "%s/afile", tmpdir);
    write_text(out, "keep", 4);
    assert_int_equal(pm_data_prepare(files, 1, out, NULL, 0, NULL, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "not a directory"));
    FILE *f = fopen(out, "rb");
    char back[8] = {0};
    assert_non_null(f);
    assert_int_equal(fread(back, 1, sizeof back, f), 4);
    fclose(f);
    assert_string_equal(back, "keep");
    /* the first writer fails, then the second (the first was open) */
    static const char *const blocked[] = {"train.bin", "val.bin"};
    for (int k = 0; k < 2; k++) {
        snprintf(out, sizeof out, "%s/blocked%d", tmpdir, k);
        snprintf(sub, sizeof sub, "%s/%s", out, blocked[k]);
        snprintf(mk, sizeof mk, "mkdir -p %s", sub);
        assert_int_equal(system(mk), 0);
        assert_int_equal(pm_data_prepare(files, 1, out, NULL, 0, NULL, &err), PM_ERR_IO);
        assert_non_null(strstr(err.msg, blocked[k]));
        assert_null(strchr(err.msg, '\n'));
        snprintf(sub, sizeof sub, "%s/%s", out, blocked[1 - k]);
        assert_int_not_equal(access(sub, F_OK), 0); /* nothing half-written */
    }
}

/* Writes a valid token file, then damages it in place by `how`. */
static void damaged(const char *path, int how) {
    uint8_t tok[50];
    for (int i = 0; i < 50; i++) tok[i] = (uint8_t)i;
    pm_err err = {{0}};
    assert_int_equal(pm_tokens_write(path, tok, 50, &err), PM_OK);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    if (how == 0) { /* version 3 */
        fseek(f, 8, SEEK_SET);
        fputc(3, f);
    } else if (how == 1) { /* flip a token byte */
        fseek(f, PM_TOK_HEADER + 17, SEEK_SET);
        fputc(200, f);
    } else if (how == 2) { /* wrong magic */
        fseek(f, 0, SEEK_SET);
        fputc('X', f);
    }
    fclose(f);
    if (how == 3) assert_int_equal(truncate(path, PM_TOK_HEADER + 20), 0);
}

static void test_token_file_errors(void **state) {
    (void)state;
    char mk[400], p[300];
    snprintf(mk, sizeof mk, "mkdir -p %s", tmpdir);
    assert_int_equal(system(mk), 0);
    snprintf(p, sizeof p, "%s/t.bin", tmpdir);
    const char *want[] = {"version 3", "checksum", "not a token file", "truncated"};
    for (int how = 0; how < 4; how++) {
        damaged(p, how);
        pm_tokens t;
        pm_err err = {{0}};
        assert_int_equal(pm_tokens_read(&t, p, &err), PM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, want[how]));
        assert_non_null(strstr(err.msg, "t.bin"));
        assert_null(t.tok);
    }
}

static void test_loader_deterministic_resumable(void **state) {
    (void)state;
    uint8_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint8_t)(i % 251);
    pm_tokens t = PM_TOKENS_BYTES(tok, 1000);
    pm_loader a, b, c;
    pm_err err = {{0}};
    enum { T = 16, B = 3 };
    assert_int_equal(pm_loader_init(&a, &t, T, 42, "x", &err), PM_OK);
    assert_int_equal(pm_loader_init(&b, &t, T, 42, "x", &err), PM_OK);
    assert_int_equal(pm_loader_init(&c, &t, T, 43, "x", &err), PM_OK);
    int32_t ia[4][B * T], ta[4][B * T], ib[B * T], tb[B * T];
    for (int s = 0; s < 4; s++) pm_loader_next(&a, B, ia[s], ta[s]);
    /* Same seed: same batches. Resume from a saved counter: same tail. */
    pm_loader_next(&b, B, ib, tb);
    assert_memory_equal(ib, ia[0], sizeof ib);
    pm_loader r;
    assert_int_equal(pm_loader_init(&r, &t, T, 42, "x", &err), PM_OK);
    r.next = 2 * B;
    pm_loader_next(&r, B, ib, tb);
    assert_memory_equal(ib, ia[2], sizeof ib);
    assert_memory_equal(tb, ta[2], sizeof tb);
    /* Targets are inputs shifted by one within each window. */
    for (int bb = 0; bb < B; bb++)
        for (int i = 0; i + 1 < T; i++) assert_int_equal(ta[1][bb * T + i], ia[1][bb * T + i + 1]);
    /* Another seed gives other positions (over 12 windows, not all equal). */
    int diff = 0;
    for (uint64_t i = 0; i < 12; i++) diff += pm_loader_pos(&a, i) != pm_loader_pos(&c, i);
    assert_true(diff > 0);
    /* Every window lies inside the data, and all starts are reachable. */
    pm_tokens small = PM_TOKENS_BYTES(tok, T + 3);
    pm_loader s;
    assert_int_equal(pm_loader_init(&s, &small, T, 7, "x", &err), PM_OK);
    int seen[3] = {0, 0, 0};
    for (uint64_t i = 0; i < 200; i++) {
        size_t p = pm_loader_pos(&s, i);
        assert_true(p + T + 1 <= small.n);
        seen[p]++;
    }
    assert_true(seen[0] && seen[1] && seen[2]);
}

static void test_loader_context_too_large(void **state) {
    (void)state;
    uint8_t tok[10] = {0};
    pm_tokens t = PM_TOKENS_BYTES(tok, 10);
    pm_loader ld;
    pm_err err = {{0}};
    assert_int_equal(pm_loader_init(&ld, &t, 10, 1, "data/val.bin", &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "data/val.bin"));
    assert_non_null(strstr(err.msg, "use a smaller context (model.ctx)"));
    assert_int_equal(pm_loader_init(&ld, &t, 9, 1, "data/val.bin", &err), PM_OK);
}

/* ---- token formats, streaming, the tokenizer ----------------------------------- */

/* The same ids written as version 1 (bytes), version 2 (16-bit, vocab 300)
 * and an llm.c file (built here by hand from its documented layout) read
 * back to the same tokens; an id past the vocabulary and a short llm.c
 * file are refused. */
static void test_formats_read_alike(void **state) {
    (void)state;
    char p1[300], p2[300], p3[300];
    snprintf(p1, sizeof p1, "%s/v1.bin", tmpdir);
    snprintf(p2, sizeof p2, "%s/v2.bin", tmpdir);
    snprintf(p3, sizeof p3, "%s/llmc.bin", tmpdir);
    enum { N = 1000 };
    uint8_t b[N];
    uint32_t ids[N];
    for (int i = 0; i < N; i++) b[i] = (uint8_t)(i * 37 + 5), ids[i] = b[i];
    pm_err err = {{0}};
    assert_int_equal(pm_tokens_write(p1, b, N, &err), PM_OK);
    assert_int_equal(pm_tokens_write_ids(p2, ids, N, 300, 77, &err), PM_OK);
    FILE *f = fopen(p3, "wb");
    assert_non_null(f);
    int32_t head[256] = {PM_LLMC_MAGIC, 1, N};
    assert_int_equal(fwrite(head, 4, 256, f), 256); /* little-endian host */
    for (int i = 0; i < N; i++) {
        uint16_t v = (uint16_t)ids[i];
        assert_int_equal(fwrite(&v, 2, 1, f), 1);
    }
    fclose(f);
    pm_tokens t[3];
    const char *paths[3] = {p1, p2, p3};
    int width[3] = {1, 2, 2};
    uint32_t vocab[3] = {256, 300, 50257};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(pm_tokens_read(&t[k], paths[k], &err), PM_OK);
        assert_int_equal(t[k].n, N);
        assert_int_equal(t[k].width, width[k]);
        assert_int_equal(t[k].vocab, vocab[k]);
        for (int i = 0; i < N; i++) assert_int_equal(pm_tok_at(&t[k], (size_t)i), b[i]);
    }
    assert_int_equal(t[1].tokenizer, 77);
    /* the loader draws the same windows from each */
    pm_loader ld[3];
    int32_t in[3][4 * 16], tg[3][4 * 16];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(pm_loader_init(&ld[k], &t[k], 16, 9, "t", &err), PM_OK);
        pm_loader_next(&ld[k], 4, in[k], tg[k]);
        pm_tokens_free(&t[k]);
    }
    assert_memory_equal(in[0], in[1], sizeof in[0]);
    assert_memory_equal(in[0], in[2], sizeof in[0]);
    assert_memory_equal(tg[0], tg[2], sizeof tg[0]);
    ids[10] = 300; /* past the vocabulary: the writer refuses it */
    assert_int_equal(pm_tokens_write_ids(p2, ids, N, 300, 0, &err), PM_ERR_ARG);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(truncate(p3, 1024 + 2 * N - 2), 0);
    assert_int_equal(pm_tokens_read(&t[2], p3, &err), PM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "llm.c header says 1000 tokens"));
}

/* prepare streams: a 7-byte chunk gives the same files as one chunk for
 * the whole corpus, and they hold the text's first 90% and last 10%. */
static void test_prepare_streams(void **state) {
    (void)state;
    char in[300], d1[300], d2[300];
    snprintf(in, sizeof in, "%s/long.txt", tmpdir);
    enum { N = 5003 };
    char text[N];
    for (int i = 0; i < N; i++) text[i] = (char)("abcdefghij\n"[i % 11]);
    write_text(in, text, N);
    const char *files[] = {in};
    pm_err err = {{0}};
    snprintf(d1, sizeof d1, "%s/s1", tmpdir);
    snprintf(d2, sizeof d2, "%s/s2", tmpdir);
    assert_int_equal(pm_data_prepare(files, 1, d1, NULL, 7, NULL, &err), PM_OK);
    assert_int_equal(pm_data_prepare(files, 1, d2, NULL, 1 << 20, NULL, &err), PM_OK);
    size_t n_train = N - N * PM_DATA_VAL_PERCENT / 100;
    for (int k = 0; k < 2; k++) {
        char p[320];
        pm_tokens a, b;
        snprintf(p, sizeof p, "%s/%s", d1, k ? "val.bin" : "train.bin");
        assert_int_equal(pm_tokens_read(&a, p, &err), PM_OK);
        snprintf(p, sizeof p, "%s/%s", d2, k ? "val.bin" : "train.bin");
        assert_int_equal(pm_tokens_read(&b, p, &err), PM_OK);
        assert_int_equal(a.n, k ? N - n_train : n_train);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.tok, text + (k ? n_train : 0), a.n);
        assert_memory_equal(a.tok, b.tok, a.n);
        pm_tokens_free(&a), pm_tokens_free(&b);
    }
}

/* Decodes a token file back to text. */
static char *decode_file(const pm_tokenizer *tk, const char *path, size_t *len) {
    pm_tokens t;
    pm_err err = {{0}};
    assert_int_equal(pm_tokens_read(&t, path, &err), PM_OK);
    uint32_t *ids = malloc((t.n + 1) * sizeof *ids);
    for (size_t i = 0; i < t.n; i++) ids[i] = pm_tok_at(&t, i);
    char *text;
    assert_int_equal(pm_tokenizer_decode(tk, ids, t.n, &text, len, &err), PM_OK);
    free(ids);
    pm_tokens_free(&t);
    return text;
}

/* A trained tokenizer gives any text back (spaces, newlines, characters it
 * never saw, raw bytes), and prepare --tokenizer, in small chunks or one,
 * writes ids that decode to exactly the text's two parts. */
static void test_tokenizer_round_trip(void **state) {
    (void)state;
    if (!pm_tokenizer_available()) skip();
    char in[300], model[300], dir[300];
    snprintf(in, sizeof in, "%s/corpus.txt", tmpdir);
    snprintf(model, sizeof model, "%s/t.model", tmpdir);
    snprintf(dir, sizeof dir, "%s/tk", tmpdir);
    FILE *f = fopen(in, "w");
    for (int i = 0; i < 400; i++)
        fprintf(f, "%d: the quick brown fox jumps over the lazy dog  (twice)\n", i);
    fclose(f);
    const char *files[] = {in};
    pm_err err = {{0}};
    assert_int_equal(pm_tokenizer_train(files, 1, 400, model, &err), PM_OK);
    pm_tokenizer *tk;
    assert_int_equal(pm_tokenizer_load_file(&tk, model, &err), PM_OK);
    assert_true(pm_tokenizer_vocab(tk) > 256 && pm_tokenizer_vocab(tk) <= 400);
    const char *odd = "  leading spaces\n\nbrown fox\tTAB, caf\xc3\xa9 \xe2\x82\xac \x01 end \n";
    uint32_t *ids;
    size_t n, len;
    assert_int_equal(pm_tokenizer_encode(tk, odd, strlen(odd), &ids, &n, &err), PM_OK);
    char *back;
    assert_int_equal(pm_tokenizer_decode(tk, ids, n, &back, &len, &err), PM_OK);
    assert_int_equal(len, strlen(odd));
    assert_memory_equal(back, odd, len);
    pm_free(ids), pm_free(back);
    /* the corpus's own words become pieces, not bytes */
    const char *known = "the quick brown fox jumps over the lazy dog";
    assert_int_equal(pm_tokenizer_encode(tk, known, strlen(known), &ids, &n, &err), PM_OK);
    assert_true(n > 0 && n < strlen(known) / 2);
    pm_free(ids);
    /* prepare: the decoded parts are the text's first 90% and last 10% */
    char *text;
    size_t tl;
    assert_int_equal(pm_read_file(in, 1 << 20, &text, &tl, &err), PM_OK);
    size_t cut = tl - tl * PM_DATA_VAL_PERCENT / 100;
    size_t chunks[2] = {64, 0};
    for (int c = 0; c < 2; c++) {
        assert_int_equal(pm_data_prepare(files, 1, dir, tk, chunks[c], NULL, &err), PM_OK);
        char p[320];
        size_t l0, l1;
        snprintf(p, sizeof p, "%s/train.bin", dir);
        char *t0 = decode_file(tk, p, &l0);
        snprintf(p, sizeof p, "%s/val.bin", dir);
        char *t1 = decode_file(tk, p, &l1);
        assert_int_equal(l0, cut);
        assert_int_equal(l1, tl - cut);
        assert_memory_equal(t0, text, l0);
        assert_memory_equal(t1, text + cut, l1);
        pm_free(t0), pm_free(t1);
    }
    pm_free(text);
    pm_tokenizer_free(tk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_split_and_roundtrip),
        cmocka_unit_test(test_prepare_empty_text),
        cmocka_unit_test(test_prepare_unwritable_outputs),
        cmocka_unit_test(test_token_file_errors),
        cmocka_unit_test(test_loader_deterministic_resumable),
        cmocka_unit_test(test_loader_context_too_large),
        cmocka_unit_test(test_formats_read_alike),
        cmocka_unit_test(test_prepare_streams),
        cmocka_unit_test(test_tokenizer_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
