/* milp.c: the MILP model as data, and its solve by COIN-OR CBC (Debian's
 * coinor-libcbc-dev) in a forked child that sends the solution back through
 * a pipe (milp.h says why). Built without CBC (PM_HAVE_CBC undefined), a
 * solve is a one-line error. With PM_MILP_WRITE=FILE in the environment the
 * child also writes the model as FILE.lp (CPLEX LP format). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "milp.h"
#include "util/alloc.h"

#ifdef PM_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#endif

struct pm_milp {
    int ncol, capcol;
    double *lb, *ub, *obj;
    char *integer;
    int nrow, caprow, capstart;
    int *start;          /* (nrow + 1) first entry of each row */
    char *sense;
    double *rhs;
    int nnz, capnz;
    int *idx;
    double *val;
    int nomem;
};

int pm_milp_available(void) {
#ifdef PM_HAVE_CBC
    return 1;
#else
    return 0;
#endif
}

pm_milp *pm_milp_new(void) {
    pm_milp *m = pm_calloc(1, sizeof *m);
    if (m && !(m->start = pm_calloc(1, sizeof(int)))) pm_free(m), m = NULL;
    if (m) m->capstart = 1;
    return m;
}

void pm_milp_free(pm_milp *m) {
    if (!m) return;
    pm_free(m->lb), pm_free(m->ub), pm_free(m->obj), pm_free(m->integer);
    pm_free(m->start), pm_free(m->sense), pm_free(m->rhs), pm_free(m->idx), pm_free(m->val);
    pm_free(m);
}

/* Grows *p (of *cap elements of size el) to hold n; 0 on failure. */
static int grow(void **p, int *cap, int n, size_t el) {
    if (n <= *cap) return 1;
    int c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = pm_realloc(*p, (size_t)c * el);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

int pm_milp_col(pm_milp *m, double lb, double ub, double obj, int integer) {
    int c = m->capcol, n = m->ncol + 1, ok = 1;
    ok = ok && grow((void **)&m->lb, &c, n, sizeof(double));
    c = m->capcol, ok = ok && grow((void **)&m->ub, &c, n, sizeof(double));
    c = m->capcol, ok = ok && grow((void **)&m->obj, &c, n, sizeof(double));
    c = m->capcol, ok = ok && grow((void **)&m->integer, &c, n, 1);
    if (!ok) {
        m->nomem = 1;
        return -1;
    }
    m->capcol = c;
    m->lb[m->ncol] = lb, m->ub[m->ncol] = ub, m->obj[m->ncol] = obj;
    m->integer[m->ncol] = (char)(integer != 0);
    return m->ncol++;
}

void pm_milp_row(pm_milp *m, int nz, const int *col, const double *coef, char sense, double rhs) {
    int c = m->caprow, n = m->nrow + 1, ok = 1;
    ok = ok && grow((void **)&m->sense, &c, n, 1);
    c = m->caprow, ok = ok && grow((void **)&m->rhs, &c, n, sizeof(double));
    ok = ok && grow((void **)&m->start, &m->capstart, n + 1, sizeof(int));
    int cn = m->capnz, cv = m->capnz;
    ok = ok && grow((void **)&m->idx, &cn, m->nnz + nz, sizeof(int)) &&
         grow((void **)&m->val, &cv, m->nnz + nz, sizeof(double));
    if (!ok) {
        m->nomem = 1;
        return;
    }
    m->caprow = c, m->capnz = cn < cv ? cn : cv;
    memcpy(m->idx + m->nnz, col, (size_t)nz * sizeof(int));
    memcpy(m->val + m->nnz, coef, (size_t)nz * sizeof(double));
    m->nnz += nz;
    m->sense[m->nrow] = sense, m->rhs[m->nrow] = rhs;
    m->start[++m->nrow] = m->nnz;
}

int pm_milp_cols(const pm_milp *m) { return m->ncol; }

#ifdef PM_HAVE_CBC
/* In the child: builds the CBC model, solves, and writes x then the result
 * to fd. Exit status 0 when both were written. */
static int child_solve(const pm_milp *m, const double *start, double seconds, int fd) {
    Cbc_Model *cm = Cbc_newModel();
    Cbc_setLogLevel(cm, 0);
    for (int j = 0; j < m->ncol; j++)
        Cbc_addCol(cm, "", m->lb[j], m->ub[j], m->obj[j], m->integer[j], 0, NULL, NULL);
    for (int i = 0; i < m->nrow; i++)
        Cbc_addRow(cm, "", m->start[i + 1] - m->start[i], m->idx + m->start[i],
                   m->val + m->start[i], m->sense[i], m->rhs[i]);
    Cbc_setObjSense(cm, 1);
    Cbc_setMaximumSeconds(cm, seconds);
    int *all = malloc((size_t)m->ncol * sizeof(int));
    if (!all) return 2;
    for (int j = 0; j < m->ncol; j++) all[j] = j;
    Cbc_setMIPStartI(cm, m->ncol, all, start);
    free(all);
    /* PM_MILP_WRITE=FILE (no extension) writes the model as FILE.lp, to
     * inspect it or to time another solver on it */
    const char *dump = getenv("PM_MILP_WRITE");
    if (dump && *dump) Cbc_writeLp(cm, dump);
    Cbc_solve(cm);
    const double *x = Cbc_getColSolution(cm);
    pm_milp_result r = {Cbc_getObjValue(cm), Cbc_getBestPossibleObjValue(cm),
                        Cbc_isProvenOptimal(cm), Cbc_isSecondsLimitReached(cm), 0, {0}};
    size_t nx = (size_t)m->ncol * sizeof(double);
    int ok = x && write(fd, x, nx) == (ssize_t)nx && write(fd, &r, sizeof r) == (ssize_t)sizeof r;
    Cbc_deleteModel(cm);
    return ok ? 0 : 3;
}

/* Reads exactly n bytes (the child may write in pieces). */
static int read_all(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    return 1;
}
#endif

pm_status pm_milp_solve(pm_milp *m, const double *start, double seconds, double *x,
                        pm_milp_result *res, pm_err *err) {
    *res = (pm_milp_result){0};
    memcpy(x, start, (size_t)m->ncol * sizeof(double));
    if (m->nomem) return pm_errf(err, PM_ERR_NOMEM, "out of memory building the MILP");
#ifndef PM_HAVE_CBC
    (void)seconds;
    return pm_errf(err, PM_ERR_ARG, "this pipemem was built without a MILP solver; install "
                   "coinor-libcbc-dev (make deps) and rebuild");
#else
    int fd[2];
    if (pipe(fd)) return pm_errf(err, PM_ERR_IO, "pipe: %s", strerror(errno));
    double t0 = pm_now();
    fflush(NULL); /* the child must not write out the parent's buffered output */
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return pm_errf(err, PM_ERR_IO, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fd[0]);
        _exit(child_solve(m, start, seconds, fd[1]));
    }
    close(fd[1]);
    size_t nx = (size_t)m->ncol * sizeof(double);
    double *got = pm_malloc(nx ? nx : 1);
    pm_milp_result r;
    int ok = got && read_all(fd[0], got, nx) && read_all(fd[0], &r, sizeof r);
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (ok && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        memcpy(x, got, nx);
        *res = r;
    }
    pm_free(got);
    res->seconds = pm_now() - t0;
    if (!got) return pm_errf(err, PM_ERR_NOMEM, "out of memory for the MILP solution");
    if (WIFSIGNALED(status))
        return pm_errf(err, PM_ERR_INVALID, "the MILP solver (CBC) died with signal %d (%s)",
                       WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status))
        return pm_errf(err, PM_ERR_INVALID, "the MILP solver (CBC) failed (exit status %d)",
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return PM_OK;
#endif
}
