/* cmd_prepare.c: `pipemem prepare FILE... -o DIR [--tokenizer MODEL]`: text
 * files to token files DIR/train.bin (first 90%) and DIR/val.bin (last 10%),
 * bytes or a SentencePiece model's ids. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_data.h"
#include "pipemem/pm_tokenizer.h"

static void prepare_usage(FILE *f) {
    fprintf(f,
            "usage: pipemem prepare FILE... -o DIR [--tokenizer MODEL]\n"
            "  Streams the text files (concatenated) into DIR/train.bin (first %d%%) and\n"
            "  DIR/val.bin (last %d%%): one token per byte (vocab 256), or with --tokenizer\n"
            "  the ids of a SentencePiece model (made by 'pipemem tokenizer train'), which\n"
            "  is copied to DIR/tokenizer.model; train then takes its vocabulary.\n"
            "  example: pipemem prepare /usr/share/games/fortunes/fortunes -o data\n",
            100 - PM_DATA_VAL_PERCENT, PM_DATA_VAL_PERCENT);
}

typedef struct {
    const char *dir, *model; /* -o DIR, --tokenizer MODEL */
    pm_cli_args files;       /* the text files */
} prepare_opts;

static const pm_cli_opt OPTS[] = {
    {"-o", 'W', 0, 0, offsetof(prepare_opts, dir), NULL, "a directory", 0},
    {"--out", 'W', 0, 0, offsetof(prepare_opts, dir), NULL, "a directory", 0},
    {"--tokenizer", 'r', 0, 0, offsetof(prepare_opts, model), NULL, "a model file", 0},
};

int pm_cmd_prepare(int argc, char **argv) {
    prepare_opts o = {.files = {calloc((size_t)argc + 1, sizeof(char *)), 0}};
    if (!o.files.arg) return pm_cli_fail("out of memory");
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], &o, NULL};
    int rc = pm_cli_parse("prepare", argc, argv, 1, &set, 1, pm_cli_collect, &o.files);
    const char **files = o.files.arg, *dir = o.dir, *model = o.model;
    int nf = o.files.n;
    if (rc == 2) prepare_usage(stdout);
    if (rc || !dir || nf == 0) {
        free(files);
        if (rc) return rc == 2 ? 0 : 1;
        prepare_usage(stderr);
        return 2;
    }
    pm_err err = {{0}};
    pm_prepare_stats st;
    pm_tokenizer *tok = NULL;
    pm_status s = model ? pm_tokenizer_load_file(&tok, model, &err) : PM_OK;
    if (!s) s = pm_data_prepare(files, nf, dir, tok, 0, &st, &err);
    free(files);
    if (s) {
        pm_tokenizer_free(tok);
        return pm_cli_fail("%s", err.msg);
    }
    fprintf(stderr, "prepare: %zu bytes from %d file%s -> %s/train.bin (%zu tokens), "
            "%s/val.bin (%zu tokens)", st.total, nf, nf == 1 ? "" : "s", dir, st.n_train,
            dir, st.n_val);
    if (tok) fprintf(stderr, ", vocabulary %u (%s, %.2f bytes per token)", pm_tokenizer_vocab(tok),
                     model, (double)st.total / (double)(st.n_train + st.n_val));
    fputc('\n', stderr);
    pm_tokenizer_free(tok);
    return 0;
}
