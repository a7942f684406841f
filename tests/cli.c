/* cli.c: running commands for the command-line suites (see cli.h). The
 * command's standard output and error go to two unlinked temporary files
 * (no pipe to drain while it runs, so nothing it prints can block it) and
 * are read whole once it ends; wait4 gives its status and peak memory. */
#define _DEFAULT_SOURCE /* wait4 */
#include "cli.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

const char *chk_bin(void) {
    const char *b = getenv("PM_BIN");
    if (!b || !*b)
        fail_msg("PM_BIN is not set: the command-line suites run the built pipemem (make check "
                 "sets PM_BIN for tests/test_cli_* alone)");
    return b;
}

void chk_cmd_free(chk_cmd *c) {
    free(c->out);
    free(c->err);
    for (int k = 0; k < 2; k++)
        if (c->file[k]) fclose(c->file[k]);
    *c = (chk_cmd){.status = -1};
}

/* Forks `sh -c cmd`, under `timeout` when limit, its stdout and stderr
 * into two new temporary files (merge: both into the first). Only dup2 and
 * exec run in the child (a suite may have threads). */
static pid_t spawn(chk_cmd *c, int limit, int merge, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *cmd = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (cmd) vsnprintf(cmd, (size_t)n + 1, fmt, again);
    va_end(again);
    chk_cmd_free(c);
    c->file[0] = tmpfile();
    c->file[1] = tmpfile();
    /* the command comes in as $1, so it needs no quoting here */
    char shell[64];
    snprintf(shell, sizeof shell, "exec timeout -k 10 %d /bin/sh -c \"$1\"", (int)CHK_LIMIT_S);
    fflush(NULL); /* nothing buffered is written twice */
    pid_t pid = cmd && c->file[0] && c->file[1] ? fork() : -1;
    if (pid == 0) {
        if (dup2(fileno(c->file[0]), 1) < 0 || dup2(fileno(c->file[merge ? 0 : 1]), 2) < 0)
            _exit(127);
        if (limit) execl("/bin/sh", "sh", "-c", shell, "sh", cmd, (char *)NULL);
        else execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    return pid;
}

/* The whole of file f, NUL-terminated (its size into *len); "" if it cannot be read. */
static char *slurp(FILE *f, size_t *len) {
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (!buf) fail_msg("out of memory reading a command's output");
    *len = n > 0 && fseek(f, 0, SEEK_SET) == 0 ? fread(buf, 1, (size_t)n, f) : 0;
    buf[*len] = 0;
    return buf;
}

int chk_wait(chk_cmd *c, pid_t pid) {
    int st = 0;
    struct rusage ru = {0};
    pid_t got = pid;
    while (pid > 0 && (got = wait4(pid, &st, 0, &ru)) < 0 && errno == EINTR) {
    }
    c->status = pid <= 0 || got < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    c->rss = 1024.0 * (double)ru.ru_maxrss;
    for (int k = 0; k < 2; k++) {
        size_t len = 0;
        char *text = c->file[k] ? slurp(c->file[k], &len) : calloc(1, 1);
        if (c->file[k]) fclose(c->file[k]);
        c->file[k] = NULL;
        *(k ? &c->err : &c->out) = text;
        *(k ? &c->err_len : &c->out_len) = len;
    }
    return c->status;
}

int chk_sh(chk_cmd *c, const char *fmt, ...) {
    chk_cmd own = {0}, *x = c ? c : &own;
    va_list ap;
    va_start(ap, fmt);
    pid_t pid = spawn(x, 1, 0, fmt, ap);
    va_end(ap);
    int st = chk_wait(x, pid);
    chk_cmd_free(&own);
    return st;
}

/* A command's standard output into out: with its standard error merged in
 * (merged), or else after it only if the command failed. */
static int output_of(char *out, size_t cap, int merged, const char *fmt, va_list ap) {
    chk_cmd c = {0};
    pid_t pid = spawn(&c, 1, merged, fmt, ap);
    int st = chk_wait(&c, pid);
    snprintf(out, cap, "%s%s", c.out, !merged && st ? c.err : "");
    chk_cmd_free(&c);
    return st;
}

int chk_output(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int st = output_of(out, cap, 1, fmt, ap);
    va_end(ap);
    return st;
}

int chk_stdout(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int st = output_of(out, cap, 0, fmt, ap);
    va_end(ap);
    return st;
}

pid_t chk_start(chk_cmd *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pid_t pid = spawn(c, 0, 0, fmt, ap);
    va_end(ap);
    return pid;
}

int chk_prepare(const char *bin, const char *dir, int n, const char *line) {
    return chk_sh(NULL, "mkdir -p %s && for i in $(seq 0 %d); do echo \"%s\"; done > %s/t.txt && "
                  "%s prepare %s/t.txt -o %s/d", dir, n - 1, line, dir, bin, dir, dir) ? -1 : 0;
}

int chk_same_file(const char *a, const char *b) {
    FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
    int same = f && g;
    char x[65536], y[65536];
    while (same) {
        size_t n = fread(x, 1, sizeof x, f), m = fread(y, 1, sizeof y, g);
        same = n == m && !memcmp(x, y, n) && !ferror(f) && !ferror(g);
        if (n < sizeof x) break; /* the end of a (b's too, if same) */
    }
    if (f) fclose(f);
    if (g) fclose(g);
    return same;
}

int chk_lines(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++)
        if (*p == '\n' || !p[1]) n++;
    return n;
}

int chk_count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

char *chk_line(const char *text, int k, char *line, size_t cap) {
    int n = chk_lines(text), want = k < 0 ? n + k : k;
    if (want < 0 || want >= n) want = n; /* no such line: "" */
    const char *p = text;
    for (int i = 0; i < want && i < n - 1; i++) /* lines before the last end in '\n' */
        p = strchr(p, '\n') + 1;
    size_t len = want < n ? strcspn(p, "\n") : 0;
    len += want < n && p[len] == '\n';
    snprintf(line, cap, "%.*s", (int)len, p);
    return line;
}
