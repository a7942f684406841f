/* fuzz_tokens.c: libFuzzer target for the token-file reader (pm_tokens_read,
 * tokfile.c) through the file API, as `train` reads DIR/train.bin: versions
 * 1 and 2 and llm.c's files.
 *
 * Beyond the sanitizers' "no crash, no out-of-bounds access, no leak": a file
 * the reader accepts holds exactly header + n tokens of its width (a
 * pipemem file's FNV-1a-64 the header's), every id below the vocabulary, and
 * a loader over it draws windows inside the data. A rejection must come
 * with a one-line message naming the file. A violation aborts.
 *
 *   make fuzz
 *   build/fuzz/fuzz_tokens -max_total_time=120 build/fuzz/corpus/tokens fuzz/seeds/tokens
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_data.h"
#include "data/loader.h"

static void check_accepted(const pm_tokens *t, const uint8_t *data, size_t size) {
    int pm = size >= 8 && !memcmp(data, PM_TOK_MAGIC, 8);
    size_t head = !pm ? PM_LLMC_HEADER : pm_get_u32(data + 8) == 1 ? PM_TOK_HEADER : PM_TOK_HEADER2;
    size_t bytes = t->n * (size_t)t->width;
    if (size != head + bytes || memcmp(t->tok, data + head, bytes)) abort();
    if (pm && pm_fnv1a64(PM_FNV_OFFSET, t->tok, bytes) != pm_get_u64(data + 24)) abort();
    for (size_t i = 0; i < t->n; i++)
        if (pm_tok_at(t, i) >= t->vocab) abort();
    pm_loader ld;
    if (pm_loader_init(&ld, t, 1, 7, "fuzz", NULL) == PM_OK) {
        int32_t in[4], tg[4];
        pm_loader_next(&ld, 4, in, tg);
        for (int i = 0; i < 4; i++)
            if (in[i] < 0 || (uint32_t)in[i] >= t->vocab || tg[i] < 0 || (uint32_t)tg[i] >= t->vocab)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pm_fuzz_tokens_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) abort();
    pm_tokens t;
    pm_err err = {{0}};
    pm_status st = pm_tokens_read(&t, path, &err);
    unlink(path);
    if (st == PM_OK) {
        check_accepted(&t, data, size);
        pm_tokens_free(&t);
    } else if (!strstr(err.msg, path) || strchr(err.msg, '\n')) {
        abort(); /* one line naming the file */
    }
    return 0;
}
