/* select_tasks.h: the tasks of `pipemem select` (select_tasks.c): values
 * swept on the command line (lists and ranges) expanded to their cartesian
 * product or sampled at random, or one task per line of a tasks file. */
#ifndef PM_CLI_SELECT_TASKS_H
#define PM_CLI_SELECT_TASKS_H

#include <stdint.h>

#include "cli.h"
#include "pipemem/pm_select.h"

/* The keys a task is given by: --lr ... on the command line, lr= ... in a
 * tasks file (sel_key_names; the flags are sel_key_flags). */
enum {
    SEL_K_LR,
    SEL_K_LAYERS,
    SEL_K_DIM,
    SEL_K_HEADS,
    SEL_K_CTX,
    SEL_K_BATCH,
    SEL_K_MICRO,
    SEL_K_WARMUP,
    SEL_K_SEED,
    SEL_K_STEPS,
    SEL_K_WD,
    SEL_K_COUNT
};
extern const char *const sel_key_names[SEL_K_COUNT]; /* "lr", ..., "weight_decay" */
extern const char *const sel_key_flags[SEL_K_COUNT]; /* "--lr", ..., "--weight-decay" */

#define SEL_MAX_VALUES 64
#define SEL_MAX_TASKS 4096

enum { SEL_LIST, SEL_UNIFORM, SEL_LOG };

/* What the command line sweeps: per key a list of values, or a range. */
typedef struct {
    double v[SEL_K_COUNT][SEL_MAX_VALUES]; /* the listed values */
    int n[SEL_K_COUNT];                    /* how many are listed (0: none) */
    int kind[SEL_K_COUNT];                 /* SEL_LIST, or a range: SEL_UNIFORM lo..hi,
                                              SEL_LOG log:lo..hi */
    double lo[SEL_K_COUNT], hi[SEL_K_COUNT]; /* a range's ends (both drawable) */
} sel_space;

/* --KEY VALUE for key k: v1,v2,... (a list), lo..hi (a uniform range) or
 * log:lo..hi (log-uniform); each value as the key takes it (an integer
 * for every key but lr and weight_decay). 0, or 1 after one line. */
int sel_parse_key(sel_space *sp, int k, const char *val);
/* 1 if any key is listed or ranged. */
int sel_swept(const sel_space *sp);

/* The tasks t0, t1, ... of the lists' cartesian product, first key
 * slowest; a range is refused (it needs --sample). */
int sel_expand(const sel_space *sp, pm_select_task *t, int *n);
/* count distinct tasks drawn at random: each key independently, a list's
 * value uniformly, a range's uniformly (or log-uniformly) between its
 * ends, integers as integers; a draw that is not a model (heads not
 * dividing dim, batch not a multiple of microbatches) or repeats a task
 * drawn before is drawn again. The same seed gives the same tasks. */
int sel_sample(const sel_space *sp, int count, uint64_t seed, pm_select_task *t, int *n);
/* One task per line of file, as key=value pairs (and name=NAME). */
int sel_read_tasks(const char *file, pm_select_task *t, int *n);
/* 1 if a and b train the same (every field of the configuration). */
int sel_same_cfg(const pm_train_cfg *a, const pm_train_cfg *b);
/* One warning line on stderr per task whose configuration an earlier
 * task has (the first few, then a count). */
void sel_warn_duplicates(const pm_select_task *t, int n);

#endif
