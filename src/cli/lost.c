/* lost.c: the line a rank prints when mpirun stops it.
 *
 * When mpirun loses a rank (killed, crashed) or a host (its daemon gone,
 * or silent past OpenMPI's TCP keepalive), it ends every other rank: its
 * daemons send SIGCONT, then SIGTERM, then SIGKILL a second later. MPI
 * tells the ranks left nothing before that (a receive from a dead peer
 * just never completes), so SIGTERM is their news. The handler prints one
 * line, on the first rank of each host (OMPI_COMM_WORLD_LOCAL_RANK 0, so a
 * host says it once), naming the rank and its host and the last complete
 * checkpoint: of --save's and --resume's, the one holding more steps, as
 * its header says at that moment (a checkpoint is replaced whole, so the
 * file is complete whatever step it holds). Then, after 0.3 s for mpirun
 * to take the line in, the rank ends by SIGTERM as it would have.
 *
 * Everything the handler calls is async-signal-safe (pm_ckpt_peek_step:
 * open, pread, close; write, nanosleep, signal, raise); the rest was
 * prepared when the run started. The handler is armed only around the
 * training loop, and disarmed before the rank prints a line of its own, so
 * a run says one thing. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "pipemem/pm_train.h"

static char g_who[160];        /* "pipemem: rank 0 on node1: " */
static char g_save[2048];      /* --save's path, or "" */
static char g_resume[2048];    /* --resume's path, or "" */
static char g_line[6144];      /* built in the handler */
static volatile sig_atomic_t g_armed;

/* Appends s to g_line at *n (cut to fit). */
static void put(size_t *n, const char *s) {
    while (*s && *n + 2 < sizeof g_line) g_line[(*n)++] = *s++;
}

static void put_u64(size_t *n, unsigned long long v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (k && *n + 2 < sizeof g_line) g_line[(*n)++] = d[--k];
}

/* Appends the last complete checkpoint to g_line at n: the one of --save
 * and --resume that holds more steps. */
static size_t put_ckpt(size_t n) {
    int64_t ss = g_save[0] ? pm_ckpt_peek_step(g_save) : -1;
    int64_t rs = g_resume[0] ? pm_ckpt_peek_step(g_resume) : -1;
    if (ss < 0 && rs < 0) {
        put(&n, g_save[0] ? "no checkpoint was saved yet" : "no checkpoint (no --save)");
        return n;
    }
    put(&n, "the last complete checkpoint is ");
    put(&n, ss >= rs ? g_save : g_resume);
    put(&n, " (step ");
    put_u64(&n, (unsigned long long)(ss >= rs ? ss : rs));
    put(&n, "): resume from it with --resume, on any hosts and ranks");
    return n;
}

static void on_term(int sig) {
    size_t n = 0;
    put(&n, g_who);
    put(&n, "mpirun stopped this rank, as it stops every rank once one of them or its host is "
            "lost (its own message says which) or the run is interrupted; ");
    n = put_ckpt(n);
    g_line[n++] = '\n';
    if (g_armed) {
        ssize_t w = write(2, g_line, n);
        (void)w;
        /* mpirun forwards the line only while the rank lives (with --quiet
         * it lost it in 3 of 3 runs); SIGKILL comes a second after anyway */
        nanosleep(&(struct timespec){0, 300000000}, NULL);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

const char *pm_cli_lost_ckpt(void) {
    g_line[put_ckpt(0)] = 0;
    return g_line;
}

void pm_cli_lost_arm(int rank, const char *save, const char *resume) {
    char host[64] = "?";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "?");
    snprintf(g_who, sizeof g_who, "pipemem: rank %d on %s: ", rank, host);
    snprintf(g_save, sizeof g_save, "%s", save ? save : "");
    snprintf(g_resume, sizeof g_resume, "%s", resume ? resume : "");
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (local && atoi(local) != 0) return; /* the host's first rank speaks for it */
    g_armed = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

void pm_cli_lost_disarm(void) {
    g_armed = 0;
    signal(SIGTERM, SIG_DFL);
}
