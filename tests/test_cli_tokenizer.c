/* test_cli_tokenizer.c: subword vocabularies end to end, through the
 * built binary (tests/cli.h): `tokenizer train`, `prepare --tokenizer`, training on
 * the ids on one device and on pipelines (checkpoints byte for byte equal),
 * the checkpoint embedding the data's tokenizer model, and `sample`
 * decoding with it on its own; llm.c's token files with GPT-2's vocabulary;
 * bad requests give one line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "cli.h"

#include "pipemem/pm_tokenizer.h"
#include "pipemem/pm_train.h"
#include "data/internal.h"

static char dir[] = "/tmp/pm_test_tokenizer_XXXXXX";
static const char *bin;

/* Runs `PM_BIN args` (chk_sh); its stdout into out and its stderr into err
 * (cap and ecap bytes), when not NULL; its status. */
static int run(const char *args, char *out, size_t cap, char *err, size_t ecap) {
    chk_cmd c = {0};
    int st = chk_sh(&c, "%s %s", bin, args);
    if (out) snprintf(out, cap, "%s", c.out);
    if (err) snprintf(err, ecap, "%s", c.err);
    chk_cmd_free(&c);
    return st;
}

#define MODEL "--layers 6 --dim 32 --heads 2 --ctx 16 --batch 8 --microbatches 4 --steps 3"

static void test_end_to_end(void **state) {
    (void)state;
    if (!pm_tokenizer_available()) skip();
    char a[1200], out[4096], err[4096];
    snprintf(a, sizeof a, "tokenizer train %s/corpus.txt --vocab 400 -o %s/m.model", dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 0);
    snprintf(a, sizeof a, "prepare %s/corpus.txt -o %s/d --tokenizer %s/m.model", dir, dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 0);
    assert_non_null(strstr(err, "vocabulary 400"));
    /* one device, then pipelines: the same bytes */
    const char *runs[] = {"", "--pp 2 --schedule zb-h1", "--pp 2 --schedule v-half",
                          "--pp 4 --schedule 1f1b"};
    char first[300];
    snprintf(first, sizeof first, "%s/r0.ckpt", dir);
    for (int k = 0; k < 4; k++) {
        snprintf(a, sizeof a, "train --data %s/d " MODEL " %s --save %s/r%d.ckpt", dir, runs[k],
                 dir, k);
        if (run(a, NULL, 0, err, sizeof err)) fail_msg("%s: %s", a, err);
        char p[300];
        snprintf(p, sizeof p, "%s/r%d.ckpt", dir, k);
        if (!chk_same_file(first, p)) fail_msg("'%s' differs from one device", runs[k]);
    }
    /* the checkpoint holds the data's model, byte for byte */
    void *m;
    size_t len, flen;
    pm_err e = {{0}};
    assert_int_equal(pm_ckpt_load_tokenizer(first, &m, &len, &e), PM_OK);
    char p[300], *file;
    snprintf(p, sizeof p, "%s/d/tokenizer.model", dir);
    assert_int_equal(pm_read_file(p, 1 << 24, &file, &flen, &e), PM_OK);
    assert_int_equal(len, flen);
    assert_memory_equal(m, file, len);
    pm_free(m), pm_free(file);
    pm_ckpt_info info;
    assert_int_equal(pm_ckpt_info_read(first, &info, &e), PM_OK);
    assert_int_equal(info.cfg.model.vocab, 400);
    /* sample decodes with it: no tokens drawn gives the prompt back */
    snprintf(a, sizeof a, "sample --ckpt %s -n 0 --prompt 'the quick  fox'", first);
    assert_int_equal(run(a, out, sizeof out, NULL, 0), 0);
    assert_string_equal(out, "the quick  fox\n");
    snprintf(a, sizeof a, "sample --ckpt %s -n 20 --prompt 'the '", first);
    assert_int_equal(run(a, out, sizeof out, NULL, 0), 0);
    assert_true(!strncmp(out, "the ", 4) && strlen(out) > 5);
    /* a vocabulary padded to 4096 (ids 400.. decode to nothing): three
     * steps leave the model near uniform, so every one of 50 tokens would
     * be a padding id with probability 0.9 if they could be drawn */
    snprintf(a, sizeof a, "train --data %s/d " MODEL " --pad-vocab 4096 --save %s/pad.ckpt", dir,
             dir);
    if (run(a, NULL, 0, err, sizeof err)) fail_msg("%s: %s", a, err);
    snprintf(a, sizeof a, "sample --ckpt %s/pad.ckpt -n 50 --prompt 'the '", dir);
    if (run(a, out, sizeof out, err, sizeof err)) fail_msg("%s: %s", a, err);
    assert_true(!strncmp(out, "the ", 4) && strlen(out) > 5);
}

static void test_bad_requests(void **state) {
    (void)state;
    if (!pm_tokenizer_available()) skip();
    char a[1200], err[4096];
    snprintf(a, sizeof a, "tokenizer train %s/corpus.txt --vocab 10 -o %s/x.model", dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "--vocab: 10 is outside the supported range 260.."));
    /* more pieces than the text holds: written, and said so */
    snprintf(a, sizeof a, "tokenizer train %s/corpus.txt --vocab 60000 -o %s/x.model", dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 0);
    assert_non_null(strstr(err, "pieces, not the 60000 asked: the text holds no more"));
    snprintf(a, sizeof a, "prepare %s/corpus.txt -o %s/y --tokenizer %s/none.model", dir, dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "none.model"));
    snprintf(a, sizeof a, "prepare %s/corpus.txt -o %s/y --tokenizer %s/corpus.txt", dir, dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "not a SentencePiece model"));
    /* a data directory whose tokenizer.model is not the one its tokens came from */
    snprintf(a, sizeof a, "tokenizer train %s/corpus.txt --vocab 300 -o %s/o.model", dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 0);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/w && cp %s/d/*.bin %s/w/ && cp %s/o.model "
             "%s/w/tokenizer.model", dir, dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(a, sizeof a, "train --data %s/w " MODEL, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "is not the tokenizer"));
}

/* A text of more characters than --vocab holds (600 CJK characters, with
 * the 256 bytes, unknown, begin, end and the newline: 860 pieces at
 * least): one line in pipemem's words with that least --vocab, not
 * SentencePiece's hint at options pipemem has not (issue 31); and that
 * --vocab does train. */
static void test_vocab_below_the_characters(void **state) {
    (void)state;
    if (!pm_tokenizer_available()) skip();
    char path[300], a[1200], err[4096];
    snprintf(path, sizeof path, "%s/cjk.txt", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    unsigned seed = 7;
    for (int line = 0; line < 400; line++) {
        for (int k = 0; k < 40; k++) {
            /* every character at least once: the first 600 positions run through them */
            seed = seed * 1103515245u + 12345u;
            int c = line * 40 + k < 600 ? line * 40 + k : (int)((seed >> 16) % 600);
            unsigned cp = 0x4e00u + (unsigned)c; /* UTF-8: 3 bytes */
            fputc((int)(0xe0 | (cp >> 12)), f);
            fputc((int)(0x80 | ((cp >> 6) & 0x3f)), f);
            fputc((int)(0x80 | (cp & 0x3f)), f);
        }
        fputc('\n', f);
    }
    fclose(f);
    snprintf(a, sizeof a, "tokenizer train %s --vocab 300 -o %s/cjk.model", path, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    if (!strstr(err, "--vocab 300 is too small for this text") ||
        !strstr(err, "need --vocab 860 or more") || strstr(err, "character_coverage") ||
        strchr(err, '\n') != strrchr(err, '\n'))
        fail_msg("--vocab 300: %s", err);
    snprintf(a, sizeof a, "tokenizer train %s --vocab 860 -o %s/cjk.model", path, dir);
    if (run(a, NULL, 0, err, sizeof err)) fail_msg("--vocab 860: %s", err);
}

/* tokenizer train reads its inputs as prepare does (issue 19): a name with
 * a comma is one file (SentencePiece's own reader split it there), and the
 * model is the one the same text gives under a plain name; a directory, a
 * stream and an empty file are refused in one line before anything is read
 * (a directory gave SentencePiece's internal assertion, /dev/zero read 1 GB
 * first); --help prints the usage. */
static void test_train_inputs(void **state) {
    (void)state;
    if (!pm_tokenizer_available()) skip();
    char a[1200], out[4096], err[4096], p1[300], p2[300];
    snprintf(a, sizeof a, "cp %s/corpus.txt '%s/com,ma.txt'", dir, dir);
    assert_int_equal(system(a), 0);
    snprintf(a, sizeof a, "tokenizer train '%s/com,ma.txt' --vocab 300 -o %s/comma.model", dir,
             dir);
    if (run(a, NULL, 0, err, sizeof err)) fail_msg("a name with a comma: %s", err);
    snprintf(a, sizeof a, "tokenizer train %s/corpus.txt --vocab 300 -o %s/plain.model", dir, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 0);
    snprintf(p1, sizeof p1, "%s/comma.model", dir);
    snprintf(p2, sizeof p2, "%s/plain.model", dir);
    assert_true(chk_same_file(p1, p2));
    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    FILE *f = fopen(empty, "w");
    assert_non_null(f);
    fclose(f);
    const char *bad[][2] = {{dir, "is a directory; give a file"},
                            {"/dev/zero", "/dev/zero: not a regular file"},
                            {empty, "the text has no bytes"}};
    for (int k = 0; k < 3; k++) {
        snprintf(a, sizeof a, "tokenizer train %s --vocab 300 -o %s/bad.model", bad[k][0], dir);
        assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
        if (!strstr(err, bad[k][1]) || strchr(err, '\n') != strrchr(err, '\n'))
            fail_msg("%s: '%s' (wanted one line with '%s')", bad[k][0], err, bad[k][1]);
    }
    snprintf(a, sizeof a, "%s/bad.model", dir);
    assert_int_not_equal(access(a, F_OK), 0);
    assert_int_equal(run("tokenizer train --help", out, sizeof out, err, sizeof err), 0);
    assert_non_null(strstr(out, "usage: pipemem tokenizer train"));
}

/* llm.c token files (written here by their documented layout: 256 int32
 * header with magic 20240520, version 1, token count; then uint16 ids)
 * named with --train/--val, GPT-2's vocabulary padded to 50304 as llm.c
 * does: the model takes it, and trains bitwise alike on one device and on
 * pipelines of several kinds. */
static void write_llmc(const char *path, int n, unsigned seed) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t head[256] = {20240520, 1, n};
    assert_int_equal(fwrite(head, 4, 256, f), 256);
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        uint16_t id = (uint16_t)((seed >> 8) % 50257u);
        if (i % 7 == 0) id = 50256; /* GPT-2's end of text, the largest id */
        assert_int_equal(fwrite(&id, 2, 1, f), 1);
    }
    fclose(f);
}

static void test_llmc_gpt2_vocab(void **state) {
    (void)state;
    char tr[300], va[300], a[1200], err[4096];
    snprintf(tr, sizeof tr, "%s/tiny_shakespeare_train.bin", dir);
    snprintf(va, sizeof va, "%s/tiny_shakespeare_val.bin", dir);
    write_llmc(tr, 3000, 1);
    write_llmc(va, 500, 2);
    /* the head (50304 rows: 13 groups of 4096) whole, in the parts the
     * placement picks, and in 5 and 13 parts: the same bits */
    const char *runs[] = {"", "--pp 2 --schedule zb-h1", "--pp 2 --schedule v-half",
                          "--pp 4 --schedule 1f1b", "--pp 2 --schedule v-half --head-parts 5",
                          "--pp 4 --schedule 1f1b --head-parts 13"};
    char first[300];
    snprintf(first, sizeof first, "%s/g0.ckpt", dir);
    for (int k = 0; k < 6; k++) {
        snprintf(a, sizeof a, "train --train %s --val %s --pad-vocab 64 " MODEL " %s --save "
                 "%s/g%d.ckpt", tr, va, runs[k], dir, k);
        if (run(a, NULL, 0, err, sizeof err)) fail_msg("%s: %s", a, err);
        char p[300];
        snprintf(p, sizeof p, "%s/g%d.ckpt", dir, k);
        if (!chk_same_file(first, p)) fail_msg("'%s' differs from one device", runs[k]);
        if (k >= 4) assert_non_null(strstr(err, k == 4 ? "head in 5 parts" : "head in 13 parts"));
    }
    snprintf(a, sizeof a, "train --train %s --val %s --pad-vocab 64 " MODEL " --pp 2 "
             "--head-parts 14", tr, va);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "--head-parts 14, but a vocabulary of 50304 has 13 group(s) "
                               "of 4096 rows, so 1..13 parts"));
    pm_ckpt_info info;
    pm_err e = {{0}};
    assert_int_equal(pm_ckpt_info_read(first, &info, &e), PM_OK);
    assert_int_equal(info.cfg.model.vocab, 50304);
    assert_int_equal(info.tok_len, 0);
    snprintf(a, sizeof a, "train --train %s --val %s --data %s " MODEL, tr, va, dir);
    assert_int_equal(run(a, NULL, 0, err, sizeof err), 1);
    assert_non_null(strstr(err, "not both"));
}

static int setup(void **state) {
    (void)state;
    bin = chk_bin();
    if (!mkdtemp(dir)) return -1;
    char p[300];
    snprintf(p, sizeof p, "%s/corpus.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    for (int i = 0; i < 600; i++)
        fprintf(f, "%d: the quick brown fox jumps over the lazy dog, said the %s\n", i,
                i % 3 ? "cat" : "bird");
    return fclose(f);
}

static int teardown(void **state) {
    (void)state;
    return chk_rm_rf(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_to_end),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_vocab_below_the_characters),
        cmocka_unit_test(test_train_inputs),
        cmocka_unit_test(test_llmc_gpt2_vocab),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
