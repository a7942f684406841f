/* pm_select_ranks.h: a sweep spread over the processes of an MPI world
 * (`mpirun -np R pipemem select ...`), on any number of hosts.
 *
 * Every rank makes the same sweep (pm_select_session_init, _partition and
 * _start: each with its own devices and device memory, so its own shards)
 * and runs it with pm_select_opts.ranks set. Whole tasks go to ranks as
 * their devices free up: a rank with fewer tasks ready than devices asks
 * rank 0 for one, and rank 0 hands it the unstarted task with the longest
 * time left (Sharded-LRTF's order, over whole tasks). A task stays on the
 * rank it went to, its state too (a task ASHA keeps waiting at a rung
 * waits there). Rank 0 reports every rank's events (one progress), decides
 * ASHA's promotions for the whole sweep from every rank's reports at the
 * rungs, and gets every task's result, so its session's table, ranking and
 * best cover the sweep; another rank's session holds its own tasks'
 * results only. Each task trains as on one process: its losses and
 * parameters are bitwise those of `select` on one machine (and of `train`
 * alone). A task's record under save_dir (its checkpoint, losses, the
 * marker of a task stopped early) is written by the rank that runs it,
 * into a directory every rank sees; resumed, any ranks continue it.
 *
 * The messages go over the MPI transport (pm_runtime.h), from the thread
 * that called pm_select_run only (MPI is initialised funneled). */
#ifndef PM_SELECT_RANKS_H
#define PM_SELECT_RANKS_H

#include <stdint.h>

#include "pipemem/pm_select.h"

typedef struct pm_select_ranks pm_select_ranks;

/* Collective over every rank of the MPI world (pm_mpi_init first): the
 * link. Checks that every rank has rank 0's sweep (the tasks, their names
 * and configurations, evaluation, ASHA, save_dir and stop_after, as s
 * holds them) and data (data_identity: pm_tokens_identity of the train and
 * validation tokens, mixed), else fails naming the first rank that
 * differs and which; devices, device memory, policy, prefetch and spill
 * may differ. A rank that does not answer within the MPI agreements'
 * timeout (pm_mpi_set_timeout) is named in err. */
pm_status pm_select_ranks_create(pm_select_ranks **out, const pm_select_session *s,
                                 uint64_t data_identity, pm_err *err);
int pm_select_ranks_rank(const pm_select_ranks *k);
int pm_select_ranks_size(const pm_select_ranks *k);
/* On rank 0, while a run goes on: the tasks then running on some rank,
 * "t1, t3 (rank 1 on node2); t0 (rank 0 on node1)", or "" when none. Reads
 * one pointer and returns it: async-signal-safe, for a SIGTERM handler
 * (mpirun stops every rank once it lost one: those tasks are lost since
 * their last checkpoint). The text stays valid until the next pump. */
const char *pm_select_ranks_running(const pm_select_ranks *k);
/* On rank 0 after a run: what rank g (0 .. size - 1) had and did. */
typedef struct {
    char host[64]; /* its host name */
    int devices;   /* its devices */
    int tasks;     /* tasks it ran */
    double cpu_s;  /* CPU seconds its process took during the run (every thread) */
} pm_select_rank_info;
pm_status pm_select_ranks_info(const pm_select_ranks *k, int g, pm_select_rank_info *out,
                               pm_err *err);
/* Lets the messages in flight leave, then frees (NULL: no-op). */
void pm_select_ranks_free(pm_select_ranks *k);

#endif
