/* cli.h: the one way the command-line suites (tests/test_cli_*.c) run the
 * built pipemem: a shell command line, its standard output and standard
 * error captured whole, its exit status and its peak resident memory.
 *
 * The library's suites (every other tests/test_*.c) call the library and
 * never the binary: make check gives PM_BIN to the test_cli_* programs
 * alone (scripts/run_tests.sh), and chk_bin fails a test without it. (A
 * library suite may run other commands through it: test_mpi runs itself
 * under mpirun.)
 *
 *   chk_cmd c = {0};
 *   if (chk_sh(&c, "%s schedule --kind 1f1b -p 2 -m 4", chk_bin()))
 *       fail_msg("exit %d: %s", c.status, c.err);
 *   chk_cmd_free(&c);
 *
 * A command has a time limit on the whole (CHK_LIMIT_S): a hang ends it
 * with status 124 instead of stalling make. It is no measurement; no test
 * asserts how long anything took. */
#ifndef PM_TESTS_CLI_H
#define PM_TESTS_CLI_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

enum { CHK_LIMIT_S = 600 };

/* A command's outcome. Zero it before the first use; each run frees the
 * previous one's outputs, chk_cmd_free the last. */
typedef struct {
    int status;           /* exit status; 128 + N if signal N ended it; 124 past the limit */
    char *out, *err;      /* standard output and standard error, whole, NUL-terminated */
    size_t out_len, err_len;
    double rss;           /* peak resident bytes of the largest process it ran (ru_maxrss) */
    FILE *file[2];        /* while it runs: where its stdout and stderr go */
} chk_cmd;

/* The built pipemem (PM_BIN); fails the test (one line saying so) when it
 * is not set. */
const char *chk_bin(void);

/* Runs `sh -c CMD` (CMD printf-style) within CHK_LIMIT_S seconds into *c
 * (c NULL: its outputs are dropped); returns its status (-1 if it could not
 * start). */
int chk_sh(chk_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same with CMD's stderr into its stdout, of which the first cap - 1
 * bytes go into out (NUL-terminated); its status. */
int chk_output(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The same with CMD's standard output alone into out (a JSON summary then
 * cannot be cut by a line of standard error, which mpirun forwards beside
 * it), its standard error after it only if it failed; its status. */
int chk_stdout(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Starts `sh -c CMD` with no time limit (the caller stops it: signals) and
 * returns its pid, which is the command's own when CMD begins with `exec`;
 * -1 if it could not start. chk_wait waits for it, takes its outputs into
 * *c and returns its status. */
pid_t chk_start(chk_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int chk_wait(chk_cmd *c, pid_t pid);

void chk_cmd_free(chk_cmd *c);

/* Makes the directory dir (with its parents), in it the corpus t.txt of n
 * lines, line i (0 to n - 1) what `echo "LINE"` prints in sh (LINE may say
 * $i and $((...))), and `bin prepare` of it into dir/d: 0 if all of it
 * went, else -1 (the suites that train make their data so). */
int chk_prepare(const char *bin, const char *dir, int n, const char *line);

/* Whether files a and b both exist and hold the same bytes. */
int chk_same_file(const char *a, const char *b);

/* The lines of text (a last line without '\n' counts). */
int chk_lines(const char *text);

/* How many times needle occurs in text (overlapping ones too). */
int chk_count(const char *text, const char *needle);

/* Line k of text (0 the first, -1 the last) into line (cap bytes, with its
 * '\n' if it has one; "" if there is no such line); returns line. */
char *chk_line(const char *text, int k, char *line, size_t cap);

#endif
