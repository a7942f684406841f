/* cmd_prepare.c: `pipemem prepare FILE... -o DIR [--tokenizer MODEL]`: text
 * files to token files DIR/train.bin (first 90%) and DIR/val.bin (last 10%),
 * bytes or a SentencePiece model's ids. */
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

int pm_cmd_prepare(int argc, char **argv) {
    const char *dir = NULL, *model = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    if (!files) return pm_cli_fail("out of memory");
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            prepare_usage(stdout);
            free(files);
            return 0;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) {
                free(files);
                return pm_cli_fail("%s needs a directory", argv[i]);
            }
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--tokenizer")) {
            if (i + 1 >= argc) {
                free(files);
                return pm_cli_fail("--tokenizer needs a model file");
            }
            model = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            free(files);
            return pm_cli_fail("prepare: unknown option '%s' (try 'pipemem prepare --help')",
                               argv[i]);
        } else {
            files[nf++] = argv[i];
        }
    }
    if (!dir || nf == 0) {
        free(files);
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
