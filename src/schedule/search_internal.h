/* search_internal.h: what the memory-limited generators (gen_zbauto.c,
 * gen_vzb.c, gen_autov.c) share with search.c and nothing else.
 *
 * A search gathers candidates in a pool: each candidate records how to
 * rebuild its schedule (a recipe, a few ints) and its simulated figures, so
 * a pool of hundreds of candidates costs kilobytes, and only the winner is
 * rebuilt. A pool built for a largest limit L answers every limit up to L:
 * the candidates it holds for a limit l are the same whatever L is, which is
 * what makes the answers monotone in the limit. */
#ifndef PM_SEARCH_INTERNAL_H
#define PM_SEARCH_INTERNAL_H

#include "pipemem/pm_sched.h"

/* The V-ZB greedy at `limit` (x M, > 0) into s, named `kind`. *binding
 * (may be NULL) is set to 0 when the limit never decided anything, in which
 * case every larger limit gives the same schedule. PM_ERR_MEMLIMIT if no
 * variant fits. On error *s is zeroed. */
pm_status pm_sched_vzb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                              const char *kind, int *binding, pm_err *err);

/* The Zero Bubble heuristic at `limit` (x M; <= 0 no limit), likewise;
 * with_h adds ZB-H1 and ZB-H2 as two more variants where they fit. */
pm_status pm_sched_zb_greedy(pm_sched *s, const pm_sched_req *req, double limit,
                             const char *kind, int with_h, int *binding, pm_err *err);

/* Simulates s with req's device-share costs into *pt (ok = 1); returns
 * pt->makespan, or INFINITY (ok = 0) if s does not simulate. */
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

typedef enum { PM_CAND_NAMED, PM_CAND_ZB, PM_CAND_VZB, PM_CAND_BLOCK } pm_cand_src;

#define PM_CAND_BLK 12

typedef struct {
    pm_cand_src src;
    pm_family fam;
    char kind[32];        /* the generator name reported for it */
    int v;                /* chunks (named kinds; 0 = default) */
    double level;         /* limit the greedy ran at (x M) */
    int blk[PM_CAND_BLK]; /* block parameters (gen_autov.c) */
    double bound;         /* memory-theorem bound (blocks) or level; x M */
    pm_search_point pt;   /* simulated figures */
} pm_cand;

typedef struct {
    pm_cand *c; /* (cap); owned */
    int n, cap;
} pm_pool;

void pm_pool_free(pm_pool *pl);
pm_status pm_pool_add(pm_pool *pl, const pm_cand *c, pm_err *err);
/* Builds the named kind (with v chunks) and adds it with its figures;
 * kinds that do not build for req are skipped. */
pm_status pm_pool_named(pm_pool *pl, const pm_sched_req *req, pm_family fam, const char *kind,
                        int v, pm_err *err);
/* Index of the fastest candidate of family fam (-1: any) whose peak fits
 * limit (ties to the smaller peak), or -1. */
int pm_pool_best(const pm_pool *pl, int fam, double limit);
/* Rebuilds candidate c's schedule. */
pm_status pm_cand_build(pm_sched *s, const pm_cand *c, const pm_sched_req *req, pm_err *err);

/* gen_autov.c: the V family's candidates for every limit up to max_limit:
 * the fixed V kinds, the searched blocks, and the V-ZB greedy per level. */
pm_status pm_pool_v(pm_pool *pl, const pm_sched_req *req, double max_limit, pm_err *err);
/* Rebuilds a searched block from its parameters. */
pm_status pm_autov_block_build(pm_sched *s, const int *blk, const pm_sched_req *req,
                               pm_err *err);

#endif
