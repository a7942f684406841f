/* main.c: the pipemem binary: dispatches to one subcommand per file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "reexec.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_train.h"

static const pm_cli_cmd cmds[] = {
    {"schedule", pm_cmd_schedule, "generate or read a schedule; validate, simulate, export"},
    {"compare", pm_cmd_compare, "every schedule side by side: makespan, bubble, peak memory"},
    {"block", pm_cmd_block, "check a building-block file and build the schedule from it"},
    {"search", pm_cmd_search, "the fastest schedule of any family under --mem-limit X"},
    {"plan", pm_cmd_plan, "size a GPT's pipeline run on a GPU cluster: memory by kind, step, MFU"},
    {"curve", pm_cmd_curve, "bubble rate of the best schedule per family against the memory limit"},
    {"tokenizer", pm_cmd_tokenizer, "train a SentencePiece tokenizer on text files"},
    {"prepare", pm_cmd_prepare, "text files to token files, bytes or a tokenizer's (train/val)"},
    {"train", pm_cmd_train, "train the GPT on a prepared data directory"},
    {"sample", pm_cmd_sample, "generate text from a checkpoint"},
    {"select", pm_cmd_select, "model selection: many configurations trained at once, sharded"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: pipemem <command> [options]   (pipemem <command> --help for more)\n"
               "       pipemem --version\n\n");
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
}

static int dispatch(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("pipemem %s\n", pm_version());
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) return cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "pipemem: unknown command '%s' (try 'pipemem help')\n", argv[1]);
    return 2;
}

/* Whatever a command printed must have reached standard output: a full disk
 * or a closed pipe under it is a failure (it exited 0 silently), checked
 * here once for every command. An error the command reported stands. */
static int stdout_written(int rc) {
    errno = 0;
    int flushed = fflush(stdout) == 0;
    if ((flushed && !ferror(stdout)) || rc != 0) return rc;
    return pm_cli_fail("standard output: write failed%s%s; the command's output is lost",
                       !flushed && errno ? ": " : "", !flushed && errno ? strerror(errno) : "");
}

/* Under mpirun with several ranks, every pipemem process first meets the
 * others (MPI's handshake, pm_mpi_same_word): ranks running different
 * commands would wait for each other for ever (train in its first
 * agreement, plan in none). Only train and select run across ranks;
 * another command, even on every rank alike, is refused. Rank 0 says it in
 * one line; every rank then ends, together. 0 to go on (train and select
 * keep MPI initialised). */
static int ranks_agree(const char *cmd) {
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (!ws || atoi(ws) < 2 || !pm_mpi_built()) return 0; /* without MPI, train says so */
    int rank, size, first = -1, rc = 0;
    char theirs[PM_MPI_WORD];
    pm_err err;
    if (pm_mpi_init(&rank, &size, &err)) return pm_cli_fail("%s", err.msg);
    if (pm_mpi_same_word(cmd, &first, theirs, &err)) rc = pm_cli_fail("%s", err.msg);
    else if (first >= 0)
        rc = rank ? 1 : pm_cli_fail("the ranks do not run the same command: rank 0 runs '%s', "
                                    "rank %d '%s'; under mpirun every rank runs one pipemem "
                                    "train or select command line", cmd, first, theirs);
    else if (strcmp(cmd, "train") && strcmp(cmd, "select"))
        rc = rank ? 1 : pm_cli_fail("%s runs as one process, not across MPI ranks (only "
                                    "train, with --pp or --dp, and select do): run it without "
                                    "mpirun", cmd);
    if (rc) pm_mpi_finalize();
    return rc;
}

int main(int argc, char **argv) {
    pm_cli_blas_reexec(argv); /* OpenBLAS on a CPU it does not know: see reexec.c */
    pm_cli_set_args(argc, argv);
    if (ranks_agree(argc >= 2 ? argv[1] : "")) return 1;
    int rc = dispatch(argc, argv);
    if (pm_mpi_await_root()) pm_cli_print_held(); /* select: rank 0 did not say it */
    pm_mpi_finalize(); /* if the handshake's MPI is still up (train --help) */
    return stdout_written(rc);
}
