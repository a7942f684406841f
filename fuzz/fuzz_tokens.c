/* fuzz_tokens.c: libFuzzer target for the token-file reader (pm_tokens_read,
 * data.c) through the file API, as `train` reads DIR/train.bin.
 *
 * Beyond the sanitizers' "no crash, no out-of-bounds access, no leak": a file
 * the reader accepts holds exactly header + n tokens whose FNV-1a-64 is the
 * header's, and a loader over it draws windows inside the data. A rejection
 * must come with a one-line message naming the file. A violation aborts.
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

static void check_accepted(const pm_tokens *t, const uint8_t *data, size_t size) {
    if (size != PM_TOK_HEADER + t->n) abort();
    if (memcmp(t->tok, data + PM_TOK_HEADER, t->n)) abort();
    if (pm_fnv1a64(PM_FNV_OFFSET, t->tok, t->n) != pm_get_u64(data + 24)) abort();
    pm_loader ld;
    if (pm_loader_init(&ld, t, 1, 7, "fuzz", NULL) == PM_OK) {
        int32_t in[4], tg[4];
        pm_loader_next(&ld, 4, in, tg);
        for (int i = 0; i < 4; i++)
            if (in[i] < 0 || in[i] >= PM_TOK_VOCAB || tg[i] < 0 || tg[i] >= PM_TOK_VOCAB) abort();
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
