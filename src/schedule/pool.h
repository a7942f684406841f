/* pool.h: the candidate pool of the memory-limited searches, a leaf: it
 * knows no generator. A search gathers candidates in a pool: each
 * candidate carries its own rebuild function (set by the generator that
 * made it) and a few parameters, and its simulated figures, so a pool of
 * hundreds of candidates costs kilobytes, and only the winner is rebuilt.
 * Adding a generator adds a rebuild function beside it, never a case here
 * or in search.c. A pool built for a largest limit L answers every limit up
 * to L: a candidate is admitted for l when both its peak and the level it
 * was built for are at most l (pm_cand_admit), and every pool built for a
 * limit of at least l holds those, so the answers are the same whatever L
 * is and monotone in the limit. (A greedy or block built for a level above
 * l can peak below l, but only pools built above l hold it.) */
#ifndef PM_POOL_H
#define PM_POOL_H

#include "pipemem/pm_sched.h"

/* Simulates s with req's costs into pt (pt->ok = 1); on error pt->ok = 0
 * and the status is returned (err filled). */
pm_status pm_search_eval(const pm_sched *s, const pm_sched_req *req, pm_search_point *pt,
                         pm_err *err);
/* A candidate that failed with status st (message in e) is skipped, unless
 * it ran out of memory: then the search ends with PM_ERR_NOMEM in err. */
pm_status pm_search_fatal(pm_status st, const pm_err *e, pm_err *err);

/* The limits (x M) at which a greedy's memory decisions can change, under
 * the default accounting, are the multiples of one stage's forward
 * activation, 1/(v p). The searches run the greedies on a grid of those: a
 * step of ceil(v p / 16) activations, so at most 16 levels per M whatever
 * p is. The grid depends on p and v only, never on the limit asked. */
static inline int pm_search_step(int p, int v) { return (v * p + 15) / 16; }
static inline double pm_search_level(int k, int p, int v) {
    return (double)k * pm_search_step(p, v) / ((double)v * p);
}
/* Highest grid index whose level is at most limit. */
static inline int pm_search_levels(double limit, int p, int v) {
    return (int)(limit * v * p / pm_search_step(p, v) + 1e-9);
}

#define PM_CAND_BLK 12

typedef struct pm_cand pm_cand;

/* Rebuilds candidate c's schedule for req into s (on error s is zeroed). */
typedef pm_status (*pm_cand_rebuild)(pm_sched *s, const pm_cand *c, const pm_sched_req *req,
                                     pm_err *err);

struct pm_cand {
    pm_cand_rebuild rebuild; /* how to rebuild it: set by the generator that made it */
    pm_place fam;           /* placement family it is listed under */
    char kind[32];        /* the generator name reported for it */
    int v;                /* chunks (named kinds; 0 = default) */
    double level;         /* limit the greedy ran at (x M) */
    int blk[PM_CAND_BLK]; /* block parameters (gen_autov.c) */
    double bound;         /* the level it was built for (named kinds: their peak); x M */
    pm_search_point pt;   /* simulated figures (after the polish, if polished) */
    int polished;         /* 1: rebuilt, then polished (polish.h) within raw_peak */
    double raw_peak;      /* the peak before the polish, x M */
    double lns_above;     /* the polish's slot-model step runs only when the
                           * lower bound is at most this and the makespan
                           * it asks for is under it (pool.c) */
};

typedef struct pm_cand_pool {
    pm_cand *c; /* (cap); owned */
    int n, cap;
    pm_sched *done; /* (n) NULL, or from pm_cand_pool_polish on: each polished
                     * candidate's schedule, so the winner is not polished twice */
} pm_cand_pool;

void pm_cand_pool_free(pm_cand_pool *pl);
pm_status pm_cand_pool_add(pm_cand_pool *pl, const pm_cand *c, pm_err *err);
/* Builds the named kind (with v chunks) and adds it with its figures;
 * kinds that do not build for req are skipped. */
pm_status pm_cand_pool_named(pm_cand_pool *pl, const pm_sched_req *req, pm_place fam, const char *kind,
                        int v, pm_err *err);
/* The smallest limit (x M) that admits c: the larger of its peak (before
 * any polish) and the level it was built for. */
double pm_cand_admit(const pm_cand *c);
/* Index of the fastest candidate of family fam (-1: any) admitted for
 * limit (ties to the smaller peak), or -1. */
int pm_cand_pool_best(const pm_cand_pool *pl, int fam, double limit);
/* Rebuilds candidate c's schedule (and polishes it, if it was). */
pm_status pm_cand_build(pm_sched *s, const pm_cand *c, const pm_sched_req *req, pm_err *err);
/* Candidate i's schedule: a copy of the one its polish kept, else rebuilt. */
pm_status pm_cand_pool_build(pm_sched *s, const pm_cand_pool *pl, int i, const pm_sched_req *req,
                             pm_err *err);
/* Polishes, within its own peak, every candidate of family fam (-1: all)
 * admitted for the largest of the n limits that is on its family's front:
 * no candidate of the family admitted from a limit no higher is faster (or
 * as fast and admitted lower, or listed first). Keeps the polished figures
 * where they are faster; admission does not change. Whether a candidate is
 * on the front depends only on candidates every pool that admits it holds,
 * so the answers stay monotone in the limit and the same whatever top the
 * pool had. Once per pool, on raw figures. The costly slot-model step is
 * skipped for a candidate whose lower bound exceeds its family's best raw
 * makespan at the smallest of the limits that admits it: it cannot be
 * the family's answer at any of them, polished or not. */
pm_status pm_cand_pool_polish(pm_cand_pool *pl, int fam, const pm_sched_req *req,
                              const double *limits, int n, pm_err *err);

#endif
