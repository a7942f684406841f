/* cli.h: the pipemem subcommands and the option helpers they share.
 * Each command returns the process exit status; only the CLI prints. */
#ifndef PM_CLI_H
#define PM_CLI_H

#include <stdio.h>

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
int pm_cmd_prepare(int argc, char **argv);
int pm_cmd_train(int argc, char **argv);
int pm_cmd_sample(int argc, char **argv);

/* Prints "pipemem: <msg>" on stderr; returns 1 (the exit status). */
int pm_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Option value parsers: 0 on success, else print one line and return 1. */
/* An integer in lo..hi. Sizes a kind limits more tightly (p, m) take a wide
 * hi here, so the kind's own check names the real limit. */
#define PM_CLI_INT_MAX (1 << 30)
int pm_cli_int(const char *opt, const char *val, int lo, int hi, int *out);
int pm_cli_double(const char *opt, const char *val, double *out);
int pm_cli_costs(const char *val, pm_costs *out);
int pm_cli_mem(const char *val, pm_mem *out);

#endif

/* ---- options shared by the schedule commands (plan.c) ----------------- */

typedef struct {
    const char *kind;   /* --kind */
    const char *from;   /* --from FILE */
    const char *format; /* --format */
    const char *out;    /* -o FILE */
    pm_sched_req req;   /* -p -m --chunks --costs --mem --mem-limit */
    int have_p, have_m; /* whether -p / -m were given */
} pm_cli_sched_opts;

/* Parses the options above starting at argv[1]; any other option is an
 * error. Returns 0, 1 on error (printed), or 2 for --help (after printing
 * usage). */
int pm_cli_sched_parse(int argc, char **argv, pm_cli_sched_opts *o, const char *usage);

/* A schedule with its per-stage costs and simulation. */
typedef struct {
    pm_sched s;
    pm_cost c;
    pm_sim sim;
} pm_cli_plan;

/* Generates (kind) or adopts (s already filled, kind NULL) a schedule,
 * validates it under req->mem_limit and simulates it. */
pm_status pm_cli_plan_make(pm_cli_plan *pl, const char *kind, const pm_sched_req *req,
                           pm_err *err);
pm_status pm_cli_plan_adopt(pm_cli_plan *pl, const pm_sched_req *req, pm_err *err);
void pm_cli_plan_free(pm_cli_plan *pl);
/* The formats pm_cli_plan_write knows (NULL-terminated). */
extern const char *const pm_cli_plan_formats[];
/* 0 if format is one of allowed (NULL-terminated), else prints and returns 1.
 * Commands call it before any work, so a bad format never touches -o. */
int pm_cli_format_check(const char *format, const char *const *allowed);
/* "# kind: p= m= ..." and "# makespan ... peak ..." lines. */
void pm_cli_plan_summary(FILE *f, const pm_cli_plan *pl);
/* Writes the plan in format (text|csv|json|svg|trace) to path or stdout,
 * all or nothing (pm_wfile). */
int pm_cli_plan_write(const pm_cli_plan *pl, const char *format, const char *path);
/* An output file (path, or stdout if NULL) written all or nothing: open,
 * write to w->f, then close with failed = whether writing went wrong.
 * Each returns 0 or prints one line and returns 1. */
int pm_cli_open_out(pm_wfile *w, const char *path);
int pm_cli_close_out(pm_wfile *w, int failed);
