/* cmd_prepare.c: `pipemem prepare FILE... -o DIR`: text files to byte-level
 * token files DIR/train.bin (first 90%) and DIR/val.bin (last 10%). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipemem/pm_data.h"

static void prepare_usage(FILE *f) {
    fprintf(f,
            "usage: pipemem prepare FILE... -o DIR\n"
            "  Concatenates the text files, one token per byte (vocab 256), and writes\n"
            "  DIR/train.bin (first %d%%) and DIR/val.bin (last %d%%).\n"
            "  example: pipemem prepare /usr/share/games/fortunes/fortunes -o data\n",
            100 - PM_DATA_VAL_PERCENT, PM_DATA_VAL_PERCENT);
}

int pm_cmd_prepare(int argc, char **argv) {
    const char *dir = NULL;
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
    pm_status s = pm_data_prepare(files, nf, dir, &st, &err);
    free(files);
    if (s) return pm_cli_fail("%s", err.msg);
    fprintf(stderr, "prepare: %zu bytes from %d file%s -> %s/train.bin (%zu tokens), "
            "%s/val.bin (%zu tokens)\n", st.total, nf, nf == 1 ? "" : "s", dir, st.n_train,
            dir, st.n_val);
    return 0;
}
