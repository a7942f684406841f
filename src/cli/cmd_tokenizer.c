/* cmd_tokenizer.c: `pipemem tokenizer train FILE... --vocab N -o MODEL`: a
 * SentencePiece model trained on text files, for `prepare --tokenizer`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_tokenizer.h"

static const char usage[] =
    "usage: pipemem tokenizer train FILE... --vocab N -o MODEL\n"
    "  Trains a SentencePiece (BPE) model of N pieces on the text files and writes it\n"
    "  to MODEL. It keeps text as it is (no normalization; spaces and newlines are\n"
    "  pieces; unknown characters fall back to bytes), so decoding gives the text\n"
    "  back. The files are read as `prepare` reads them: regular files only (a\n"
    "  directory or a stream such as /dev/zero is refused before anything is read),\n"
    "  at most 1 GiB in all; any name works, commas included.\n"
    "  Use it with: pipemem prepare FILE... -o DIR --tokenizer MODEL\n"
    "  example: pipemem tokenizer train /usr/share/games/fortunes/fortunes --vocab 2000 "
    "-o fortunes.model\n";

int pm_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "train"))
        return pm_cli_fail("tokenizer: unknown action '%s' (try 'pipemem tokenizer --help')",
                           argv[1]);
    const char **files = calloc((size_t)argc, sizeof *files), *out = NULL;
    int nf = 0, vocab = 0, bad = 0;
    if (!files) return pm_cli_fail("out of memory");
    for (int i = 2; i < argc && !bad; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            free(files);
            return 0;
        } else if (!strcmp(argv[i], "--vocab")) bad = pm_cli_int_range("--vocab", v, 260, 1 << 20, &vocab), i++;
        else if (!strcmp(argv[i], "-o")) out = v, bad = !v && pm_cli_fail("-o needs a file"), i++;
        else if (argv[i][0] == '-' && argv[i][1])
            bad = pm_cli_fail("tokenizer: unknown option '%s' (try 'pipemem tokenizer --help')",
                              argv[i]);
        else files[nf++] = argv[i];
    }
    if (!bad && (!nf || !out || !vocab))
        bad = pm_cli_fail("tokenizer train: needs FILE..., --vocab N and -o MODEL");
    pm_err err = {{0}};
    if (!bad && pm_tokenizer_train(files, nf, vocab, out, &err)) bad = pm_cli_fail("%s", err.msg);
    free(files);
    if (bad) return 1;
    pm_tokenizer *t;
    if (pm_tokenizer_load_file(&t, out, &err)) return pm_cli_fail("%s", err.msg);
    fprintf(stderr, "tokenizer: wrote %s (%u pieces)\n", out, pm_tokenizer_vocab(t));
    pm_tokenizer_free(t);
    return 0;
}
