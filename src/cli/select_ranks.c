/* select_ranks.c: `pipemem select` under mpirun. Every rank parses the
 * same sweep (its own --devices and --device-mem) and starts it; one
 * agreement says whether every rank did (the CLI's, pm_cli_agree), then
 * the library's link checks that they have the same sweep and data and
 * spreads the tasks (pm_select_ranks.h). Rank 0 alone prints and writes. */
#include <stdlib.h>

#include "cli.h"
#include "pipemem/pm_runtime.h"
#include "select_ranks.h"

int sel_ranks_rank(void) {
    const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
    int rank, size;
    pm_err e;
    if (!ws || atoi(ws) < 2) return -1;
    if (!pm_mpi_built())
        return pm_cli_fail("select under mpirun: this pipemem was built without MPI, so every "
                           "rank would run the whole sweep; rebuild with libopenmpi-dev, or run "
                           "without mpirun"), -2;
    if (pm_mpi_init(&rank, &size, &e)) return pm_cli_fail("%s", e.msg), -2;
    pm_cli_set_rank(rank ? rank : -1, rank != 0);
    return rank;
}

int sel_ranks_open(const pm_select_session *s, const pm_tokens *tr, const pm_tokens *va,
                   int failed, pm_select_ranks **k) {
    pm_err e;
    *k = NULL;
    if (pm_cli_agree(failed) != -1) return 1;
    /* the data as one word: the train and the validation tokens' */
    uint64_t id = pm_tokens_identity(tr) * 1099511628211ULL ^ pm_tokens_identity(va);
    if (pm_select_ranks_create(k, s, id, &e)) return pm_cli_fail("%s", e.msg);
    return 0;
}
