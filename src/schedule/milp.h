/* milp.h: a mixed-integer linear program, built row by row and solved by a
 * MILP library in a child process (milp.c). Private to src/schedule.
 *
 * The model is plain data (columns with bounds, objective and integrality,
 * rows as sparse sums with a sense and right-hand side) so that the solver
 * library is touched in one file only, and only in a forked child: a solver
 * that aborts or crashes (CBC 2.10.8 asserts on some models) becomes an
 * error value, never the end of the program. */
#ifndef PM_MILP_H
#define PM_MILP_H

#include "pipemem/pm_util.h"

typedef struct pm_milp pm_milp;

typedef struct {
    double obj;       /* objective of the solution returned */
    double bound;     /* the solver's proven lower bound (minimisation) */
    int proven;       /* 1 if the solution is proven optimal */
    int timed_out;    /* 1 if the time limit stopped the search */
    double seconds;   /* wall time of the solve */
    char note[200];   /* why the solver gave nothing back, if it failed */
} pm_milp_result;

/* 1 if this build has a MILP solver. */
int pm_milp_available(void);
pm_milp *pm_milp_new(void);
void pm_milp_free(pm_milp *m);
/* Adds a column; returns its index, or -1 when out of memory (sticky: the
 * solve then fails with PM_ERR_NOMEM). */
int pm_milp_col(pm_milp *m, double lb, double ub, double obj, int integer);
/* Adds sum coef[k] x[col[k]] (sense 'L' <=, 'G' >=, 'E' =) rhs. */
void pm_milp_row(pm_milp *m, int nz, const int *col, const double *coef, char sense, double rhs);
int pm_milp_cols(const pm_milp *m);
/* Minimises from the feasible start (ncols values) for at most `seconds`;
 * x (ncols) receives the best solution found (the start if none better).
 * PM_ERR_ARG without a solver; PM_ERR_INVALID if the solver failed (the
 * message says how); x then holds the start. */
pm_status pm_milp_solve(pm_milp *m, const double *start, double seconds, double *x,
                        pm_milp_result *res, pm_err *err);

#endif
