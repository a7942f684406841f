/* select_ranks.h: `pipemem select` under mpirun (select_ranks.c), a sweep
 * spread over the ranks (include/pipemem/pm_select_ranks.h). */
#ifndef PM_CLI_SELECT_RANKS_H
#define PM_CLI_SELECT_RANKS_H

#include "pipemem/pm_select_ranks.h"

/* -1 on one process; under mpirun with 2 or more ranks this rank (MPI is
 * up: main.c's handshake), every error line from then on held back off
 * rank 0, which alone says what every rank shares; -2 after a line (no
 * MPI in this pipemem). */
int sel_ranks_rank(void);
/* Collective, once per rank whatever happened before: the ranks agree
 * (failed: this rank's setup), then, if every rank's went well, the link
 * (s started on every rank, tr and va its data). 0, or 1 once the line is
 * out (rank 0's, or that of a rank that failed alone). */
int sel_ranks_open(const pm_select_session *s, const pm_tokens *tr, const pm_tokens *va,
                   int failed, pm_select_ranks **k);

#endif
