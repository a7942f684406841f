/* cli.h: the pipemem subcommands and the option helpers they share.
 * Each command returns the process exit status; only the CLI prints. */
#ifndef PM_CLI_H
#define PM_CLI_H

#include "pipemem/pm_sched.h"

typedef struct {
    const char *name;                  /* "schedule" */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    const char *summary;               /* one line for `pipemem help` */
} pm_cli_cmd;

int pm_cmd_schedule(int argc, char **argv);
int pm_cmd_compare(int argc, char **argv);
int pm_cmd_block(int argc, char **argv);
int pm_cmd_search(int argc, char **argv);
int pm_cmd_curve(int argc, char **argv);
int pm_cmd_plan(int argc, char **argv);
int pm_cmd_prepare(int argc, char **argv);
int pm_cmd_tokenizer(int argc, char **argv);
int pm_cmd_train(int argc, char **argv);
int pm_cmd_sample(int argc, char **argv);
int pm_cmd_select(int argc, char **argv);

/* Prints "pipemem: <msg>" on stderr, the library's parameter names in it
 * turned into flags (pm_cli_flags); returns 1 (the exit status). */
int pm_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A library message as the CLI's user reads it, in out (cap bytes, cut to
 * fit): a parameter the library names by its field or argument becomes
 * the flag that sets it: "mem_limit=0.5" -> "--mem-limit 0.5", "lower
 * opt.lr" -> "lower --lr", "v=3" -> "--chunks 3". The library writes a name
 * bare only where it cannot be a word of prose (mem_limit, micro,
 * model.dim, opt.lr), else as name=VALUE (batch=8, v=3, seed=1). */
void pm_cli_flags(const char *msg, char *out, size_t cap);
/* The command line whose words pm_cli_flags copies as typed (a file the
 * user named "micro" stays "micro"); main sets it once. */
void pm_cli_set_args(int argc, char **argv);
/* Under MPI: rank >= 0 prefixes every error line with it (a rank's own
 * failure); quiet holds them back (errors every rank shares, which rank 0
 * prints): pm_cli_print_held prints the last one held, for a failure that
 * turns out to be this rank's alone. rank -1 and quiet 0 restore plain
 * lines. */
void pm_cli_set_rank(int rank, int quiet);
void pm_cli_print_held(void);
/* Under MPI (after pm_mpi_init), collective: whether any rank failed
 * (pm_mpi_agree): -1 if none, else the lowest rank that did, whose line
 * stands (a rank that failed alone prints the line it held back); -2 if a
 * rank did not answer in time, said in one line by the ranks that waited
 * (the job is then aborted at pm_mpi_finalize). */
int pm_cli_agree(int failed);

/* Under mpirun, around the training loop (lost.c): arm makes the daemon's
 * SIGCONT or SIGTERM, which it sends every rank once mpirun lost one (in
 * that order, a second apart), print one line a host (the first rank
 * there whose handler runs, while the host's local rank 0 lives) naming
 * that rank and host and the last complete checkpoint (at save, else at
 * resume; either may be NULL); the other ranks wait for mpirun's SIGKILL.
 * Rank 0's renames of the checkpoint go through a guard meanwhile
 * (pm_ckpt_set_guard): none replaces the file after its host's line named
 * it. disarm restores both signals and removes the guard. */
void pm_cli_lost_arm(int rank, const char *save, const char *resume);
void pm_cli_lost_disarm(void);
/* "the last complete checkpoint is PATH (step N): ..." (or that there is
 * none); valid until the next call. */
const char *pm_cli_lost_ckpt(void);
/* A rank ending on an MPI error of its own while armed: "msg; " and the
 * last complete checkpoint through pm_cli_fail (speak: this rank prints
 * for every rank, else its line is held back and its handler silent),
 * unless SIGTERM's line was said here already: one line either way.
 * Returns 1, pm_cli_fail's value. */
int pm_cli_lost_fail(int speak, const char *msg);
/* select under mpirun: rank 0 alone speaks for the sweep (the others wait), the
 * line naming the sweep's tasks then running on each rank (lost since
 * their last checkpoint) and how to resume them (resume: --resume's DIR,
 * or NULL). pm_cli_lost_disarm disarms it too. */
struct pm_select_ranks;
void pm_cli_lost_arm_sweep(const struct pm_select_ranks *k, const char *resume);

/* Option value parsers: 0 on success, else print one line and return 1. */
int pm_cli_int_range(const char *opt, const char *val, int lo, int hi, int *out);
int pm_cli_double(const char *opt, const char *val, double *out);
/* A byte size: a positive number with an optional K, M, G or T (powers of
 * 1024), e.g. 512M or 1.5G. */
int pm_cli_size(const char *opt, const char *val, size_t *out);

/* ---- the option parser every command uses (options.c) ----------------- */

typedef struct pm_cli_opt pm_cli_opt;
/* Parses val (NULL when the arguments ran out) into dst: 0, or 1 after
 * printing one line. */
typedef int (*pm_cli_opt_fn)(const pm_cli_opt *d, const char *val, void *dst);

/* One option, one row. type: 'f' a flag (stores lo as an int), 's' a
 * string (missing: "NAME needs " need, or "a value"), 'i' an int in lo..hi
 * (hi 0: 2^24; pm_cli_int_range), 'd' a finite double (pm_cli_double), 'p'
 * a double > 0, 'z' a byte size (pm_cli_size), 'x' fn's own. Paths are
 * strings too, with their role: 'r' a file the command reads, 'w' a file it
 * writes, 'R' and 'W' a data directory it reads or writes (its train.bin,
 * val.bin and tokenizer.model); for 'r' and 'w', lo nonzero lets the path be
 * the file of the other rows with the same lo (train's --resume X --save X
 * continues a run in place). Every type but 'f' takes the next argument as
 * its value. */
struct pm_cli_opt {
    const char *name; /* "--steps", "-o" */
    char type;
    int lo, hi;
    size_t off;       /* of the field in the set's struct (fn may take the whole) */
    pm_cli_opt_fn fn; /* 'x' */
    const char *need; /* 's': what a missing value is ("a directory"); NULL "a value" */
    int tag;          /* the command's own (train: the mode; select: the key) */
};

/* A table of options and the struct their offsets point into. */
typedef struct {
    const pm_cli_opt *opt;
    int n;
    void *dst;
    int *at; /* NULL, or (n): the argv index each row was first given at, 0 if not */
} pm_cli_opts;

/* Parses argv[first..] against the sets in order (the first set naming an
 * option takes it; a row given twice keeps the last value). An argument
 * not starting with '-' (or "-" alone) goes to positional (NULL: an unknown
 * option), which returns 0 or 1 (printed); positional arguments are files
 * the command reads. Then, for every command alike: no output path ('w',
 * 'W') is one of the inputs (a positional, 'r', 'R') or another output
 * (pm_cli_files_distinct). Returns 0; 1 after one line ("CMD: unknown
 * option 'X' (try 'pipemem CMD --help')", the option's own, or the two
 * paths that are one file); 2 at -h/--help, nothing printed (the caller
 * prints its usage). */
int pm_cli_parse(const char *cmd, int argc, char **argv, int first, const pm_cli_opts *sets,
                 int nsets, int (*positional)(void *ctx, const char *arg), void *ctx);
/* Arguments that are not options, in order (a positional for
 * pm_cli_parse: pm_cli_collect with a pm_cli_args as its ctx). */
typedef struct {
    const char **arg; /* room for argc, the caller's */
    int n;
} pm_cli_args;
int pm_cli_collect(void *ctx, const char *arg);
/* Where option `name` of set (parsed with its at) was given: its argv
 * index, 0 if it was not. */
int pm_cli_given(const pm_cli_opts *set, const char *name);
/* Option parsers ('x') of --costs F,B,W[,C] (into a pm_costs) and --mem
 * F,B,W[,R] (into a pm_mem). */
int pm_cli_costs(const pm_cli_opt *d, const char *val, void *out);
int pm_cli_mem(const pm_cli_opt *d, const char *val, void *out);

/* A file a command reads or writes, for pm_cli_files_distinct. */
typedef struct {
    const char *what; /* an output: its option ("--save"); an input: what it is and
                         where it came from ("the training data (--data d)") */
    const char *path; /* NULL: not given */
    int output;       /* 1 written by the command, 0 read */
    int shared;       /* nonzero: may be the file of the entry with the same tag
                         (train's --resume X --save X continues a run in place) */
} pm_cli_file;
/* Before any work: no output is an input or another output (pm_same_file;
 * a character device such as /dev/null may take several). Else one line
 * naming both, and 1. pm_cli_parse makes this check for the paths of the
 * command line; a command calls it for inputs it learns of later (select's
 * task checkpoints under --resume DIR). */
int pm_cli_files_distinct(const char *cmd, const pm_cli_file *f, int n);


/* ---- options shared by the schedule commands (sched.c) ---------------- */

typedef struct {
    const char *kind;   /* --kind */
    const char *from;   /* --from FILE */
    const char *format; /* --format */
    const char *out;    /* -o FILE */
    pm_sched_req req;   /* -p -m --chunks --costs --mem --mem-limit */
    int have_p, have_m; /* whether -p / -m were given */
    int dp;             /* --dp: data-parallel replicas (1: none) */
    int polish;         /* --polish (schedule only) */
    double ar;          /* --allreduce-cost: one stage's gradient sum across them */
    double overlap_fb;  /* --overlap-fb X: what an overlapped F&B pair does not hide */
    int have_overlap_fb; /* whether --overlap-fb was given */
} pm_cli_sched_opts;

/* Parses the options above starting at argv[1] (argv[0] the command's
 * name), with extra (NULL: none) a command's own, which come first (curve's
 * --from X shadows schedule's --from FILE); any other option is an error.
 * Returns 0, 1 on error (printed), or 2 for --help (after printing usage). */
int pm_cli_sched_parse(int argc, char **argv, pm_cli_sched_opts *o, const char *usage,
                       const pm_cli_opts *extra);
/* 1 (after one line) if --polish was given to cmd, which polishes itself. */
int pm_cli_no_polish(const pm_cli_sched_opts *o, const char *cmd);

/* A schedule with its per-stage costs and simulation. */
typedef struct {
    pm_sched s;
    pm_cost c;
    pm_sim sim;
} pm_cli_sched;

/* Generates (kind) or adopts (s already filled, kind NULL) a schedule,
 * validates it under req->mem_limit and simulates it. */
pm_status pm_cli_sched_make(pm_cli_sched *pl, const char *kind, const pm_sched_req *req,
                           pm_err *err);
pm_status pm_cli_sched_adopt(pm_cli_sched *pl, const pm_sched_req *req, pm_err *err);
void pm_cli_sched_free(pm_cli_sched *pl);
/* With o->dp > 1: every stage's gradient sum across the replicas costs
 * o->ar; the simulation gains them (pm_sim_dp). Nothing otherwise. */
pm_status pm_cli_sched_dp(pm_cli_sched *pl, const pm_cli_sched_opts *o, pm_err *err);
/* search and curve: 1 (printed) if --dp or --allreduce-cost was given. */
int pm_cli_no_dp(const pm_cli_sched_opts *o, const char *cmd);
/* With --overlap-fb X: the schedule's overlapped F&B pairs run as one
 * (pm_cost.fb_overlap) and it is simulated again. Nothing otherwise. */
pm_status pm_cli_sched_overlap(pm_cli_sched *pl, const pm_cli_sched_opts *o, pm_err *err);
/* 0 if format is one of text, csv, json, svg, trace; else prints, 1. */
int pm_cli_sched_format_ok(const char *format);
/* Before long work: 0 if path (NULL: stdout) can be written later; else
 * prints one line, 1. */
int pm_cli_out_check(const char *path);
/* All-or-nothing output (pm_wfile): open returns where to write or NULL
 * (printed); close commits when bad is 0 and no write failed, else drops
 * the tmp file so path keeps its old content. Returns 0 or 1 (printed). */
FILE *pm_cli_out_open(pm_wfile *w, const char *path);
int pm_cli_out_close(pm_wfile *w, int bad, const char *path);
/* The plan's facts, one per line as '#' comments the text reader skips:
 * kind, p, m, placement, stages; makespan, bubble, peak per device (x M);
 * with data parallelism the step with and without overlapped sums. */
void pm_cli_sched_summary(FILE *f, const pm_cli_sched *pl);
/* Writes the plan in format (text|csv|json|svg|trace) to path or stdout;
 * summary: the text format opens with pm_cli_sched_summary. */
int pm_cli_sched_write(const pm_cli_sched *pl, const char *format, const char *path, int summary);

#endif
