/* cmd_tokenizer.c: `pipemem tokenizer train FILE... --vocab N -o MODEL`: a
 * SentencePiece model trained on text files, for `prepare --tokenizer`. */
#include <stddef.h>
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

typedef struct {
    const char *out;   /* -o MODEL */
    int vocab;         /* --vocab N */
    pm_cli_args files; /* the text files */
} tok_opts;

static const pm_cli_opt OPTS[] = {
    {"--vocab", 'i', 260, 1 << 20, offsetof(tok_opts, vocab), NULL, NULL, 0},
    {"-o", 'w', 0, 0, offsetof(tok_opts, out), NULL, "a file", 0},
};

int pm_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "train"))
        return pm_cli_fail("tokenizer: unknown action '%s' (try 'pipemem tokenizer --help')",
                           argv[1]);
    tok_opts o = {.files = {calloc((size_t)argc, sizeof(char *)), 0}};
    if (!o.files.arg) return pm_cli_fail("out of memory");
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], &o, NULL};
    int bad = pm_cli_parse("tokenizer", argc, argv, 2, &set, 1, pm_cli_collect, &o.files);
    const char **files = o.files.arg, *out = o.out;
    int nf = o.files.n, vocab = o.vocab;
    if (bad == 2) {
        fputs(usage, stdout);
        free(files);
        return 0;
    }
    if (!bad && (!nf || !out || !vocab))
        bad = pm_cli_fail("tokenizer train: needs FILE..., --vocab N and -o MODEL");
    pm_err err = {{0}};
    if (!bad && pm_tokenizer_train(files, nf, vocab, out, &err)) bad = pm_cli_fail("%s", err.msg);
    free(files);
    if (bad) return 1;
    pm_tokenizer *t;
    if (pm_tokenizer_load_file(&t, out, &err)) return pm_cli_fail("%s", err.msg);
    unsigned got = pm_tokenizer_vocab(t);
    fprintf(stderr, "tokenizer: wrote %s (%u pieces", out, got);
    if (got < (unsigned)vocab) /* the trainer stops where the text has no more pieces */
        fprintf(stderr, ", not the %d asked: the text holds no more; more text gives more", vocab);
    fprintf(stderr, ")\n");
    pm_tokenizer_free(t);
    return 0;
}
