/* lost.c: the line a rank prints when mpirun stops it.
 *
 * When mpirun loses a rank (killed, crashed) or a host (its daemon gone,
 * or silent past OpenMPI's TCP keepalive), it ends every other rank: each
 * host's daemon sends its ranks SIGCONT, then SIGTERM, then SIGKILL, with
 * a sleep of a second before each of the last two. MPI tells the ranks left
 * nothing before that (a receive from a dead peer just never completes),
 * so these signals are their news. One rank a host prints one line, naming
 * the rank and host and the last complete checkpoint: of --save's and
 * --resume's, the one holding more steps, as its header says at that
 * moment (a checkpoint is replaced whole, so the file is complete whatever
 * step it holds).
 *
 * The line goes out at the daemon's SIGCONT (one whose sender is this
 * rank's parent: a shell's kill -CONT says nothing), or at SIGTERM if that
 * comes first. SIGTERM alone can leave a loaded rank too little time, or
 * none: the daemon's sleeps end early when a signal reaches its main
 * thread (sleep() is interrupted and returns 0), as when a child ends (on
 * mpirun's host its children include the agents that started the other
 * hosts' daemons), so SIGKILL may follow SIGTERM at once; and mpirun
 * stopped by a second SIGTERM (timeout's) sent its ranks SIGCONT and
 * nothing else before it ended (perf's signal trace). The line was
 * missing once in make test at 3x load (test_cli_hosts, node2's pipemem
 * killed; not reproduced here since, so which of these it was is not
 * known). (With OpenMPI's
 * orte_forward_job_control set, mpirun also forwards a resume after
 * Ctrl-Z as SIGCONT: the line then says the run stopped, and rank 0 keeps
 * to it: its next save fails, ending the run; it is off by default.)
 *
 * Every rank handles both, and none ends before the line is out: a rank
 * ended at once by SIGTERM cut the daemon's sleep short as above, and the
 * others were SIGKILLed before their handler ran (1 run in 10 on a loaded
 * machine). The first rank of a host whose handler runs speaks: it binds
 * an abstract Unix socket named after the job (one per network namespace,
 * that is per host), which the others then cannot bind; but a rank other
 * than the host's first (local rank 0) speaks only while that one lives,
 * listening at a name of its own: once it ended (its own line said, or
 * itself the one lost) the others stay silent. At SIGTERM the others wait
 * for the SIGKILL (at most 2 s, for a SIGTERM not from mpirun), the
 * speaker 0.3 s (mpirun forwards the line only while the rank lives); each
 * then ends by SIGTERM as it would have.
 *
 * The line names the step the file holds, and no later save replaces that
 * file: rank 0 (which alone commits a save, pm_pipe_save) may be renaming
 * the next checkpoint over --save's path as its host's line is said, the
 * lost ranks having sent their parts of it (once in CI: the line said step
 * N, the file then held N + 20, and a resume to step N + 10 saved N + 20
 * again without a word). So rank 0 renames inside a guard
 * (pm_ckpt_set_guard): it listens at "\0pipemem-commit-JOB", then renames
 * only if no line was said on its host (the speaker's turn socket listens
 * once taken) and mpirun's stop has not reached it (a flag of its own,
 * which outlives a speaker ended since: its socket closed), else abandons
 * the save; the speaker listens at its turn, then waits while rank 0
 * listens at its commit (at most 0.5 s) before it reads the header. Each
 * publishes before it looks and one kernel orders the socket calls, so
 * either rank 0 sees the line and keeps the file, or the speaker sees the
 * rename and reads after it. SIGCONT and SIGTERM wait on the renaming
 * thread meanwhile (another of rank 0's threads takes them: a handler on
 * it would wait for a window its own thread holds). Known limits: a host
 * other than rank 0's sees the file through a shared file system and
 * cannot take part (its line may name the step before); a rename slower
 * than the speaker's 0.5 s, or a rank whose sockets could not be made,
 * goes unguarded.
 *
 * A rank ending on an error of its own (pm_cli_lost_fail) says it once
 * too: SIGTERM blocked on its thread, it takes the same turn, so either
 * its line or a handler's is written, never both, never neither.
 *
 * A sweep (select under mpirun) has rank 0 alone speak for it: its line
 * names the tasks then running on each rank, lost since their last
 * checkpoint (pm_select_ranks_running: one atomic read); the other ranks
 * wait for the SIGKILL.
 *
 * Everything the handlers call is async-signal-safe (atomic exchange and
 * store, getppid, socket, connect, bind, listen, close, pm_ckpt_peek_step:
 * open, pread, close; write, nanosleep, signal, raise); the rest was
 * prepared when the run started. The guard runs on the committing thread,
 * outside any handler. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "pipemem/pm_select_ranks.h"
#include "pipemem/pm_train.h"

static char g_who[160];        /* "pipemem: rank 0 on node1: " */
static char g_save[2048];      /* --save's path, or "" */
static char g_resume[2048];    /* --resume's path, or "" */
static char g_line[6144];      /* built in the handler */
static char g_ckpt[4224];      /* pm_cli_lost_ckpt's */
static struct sockaddr_un g_turn, g_alive; /* "\0pipemem-said-JOB", "\0pipemem-first-JOB" */
static struct sockaddr_un g_commit_at;     /* "\0pipemem-commit-JOB" */
static socklen_t g_turn_len, g_alive_len, g_commit_len;
static int g_sock = -1;        /* binds g_turn: this rank's turn to speak; listens once taken */
static int g_commit = -1;      /* listens at g_commit_at while this rank renames a checkpoint */
static sigset_t g_commit_mask; /* the renaming thread's signal mask before */
static atomic_int g_stopping;  /* mpirun's stop reached this process: no rename after it */
static int g_hold, g_inside;   /* PM_TEST_COMMIT_HOLD's K, and 1 for inside the window */
static int g_commits;          /* renames begun (the guard entered) */
static int g_beacon = -1;      /* the host's first rank: listens at g_alive while it lives */
static int g_first;            /* this is the host's first rank (local rank 0) */
static atomic_int g_said;      /* this process took its turn (or leaves it to rank 0) */
static atomic_int g_spoke;     /* this process wrote the line */
static const pm_select_ranks *g_sweep; /* a sweep's, or NULL */

/* Appends s to buf (cap bytes) at *n (cut to fit). */
static void put(char *buf, size_t cap, size_t *n, const char *s) {
    while (*s && *n + 2 < cap) buf[(*n)++] = *s++;
}

static void put_u64(char *buf, size_t cap, size_t *n, unsigned long long v) {
    char d[24];
    int k = 0;
    do d[k++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (k && *n + 2 < cap) buf[(*n)++] = d[--k];
}

/* Appends the last complete checkpoint to buf at n: the one of --save and
 * --resume that holds more steps. */
static size_t put_ckpt(char *buf, size_t cap, size_t n) {
    int64_t ss = g_save[0] ? pm_ckpt_peek_step(g_save) : -1;
    int64_t rs = g_resume[0] ? pm_ckpt_peek_step(g_resume) : -1;
    if (ss < 0 && rs < 0) {
        put(buf, cap, &n, g_save[0] ? "no checkpoint was saved yet" : "no checkpoint (no --save)");
        return n;
    }
    put(buf, cap, &n, "the last complete checkpoint is ");
    put(buf, cap, &n, ss >= rs ? g_save : g_resume);
    put(buf, cap, &n, " (step ");
    put_u64(buf, cap, &n, (unsigned long long)(ss >= rs ? ss : rs));
    put(buf, cap, &n, "): resume from it with --resume, on any hosts and ranks");
    return n;
}

/* Appends the sweep's tasks then running and how to resume them. */
static size_t put_sweep(char *buf, size_t cap, size_t n) {
    const char *running = pm_select_ranks_running(g_sweep);
    if (!running[0]) put(buf, cap, &n, "no task of the sweep was running");
    else put(buf, cap, &n, "the sweep's tasks then running are lost since their last "
             "checkpoint: "), put(buf, cap, &n, running);
    if (!g_resume[0]) {
        put(buf, cap, &n, " (no --resume: every task starts over)");
        return n;
    }
    put(buf, cap, &n, "; resume with --resume ");
    put(buf, cap, &n, g_resume);
    put(buf, cap, &n, " on any hosts and ranks");
    return n;
}

/* Whether a process of this host listens at a (the connection is taken,
 * or its backlog is full): 1 or 0, -1 if no socket could be made. */
static int listening(const struct sockaddr_un *a, socklen_t len) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    int up = !connect(s, (const struct sockaddr *)a, len) || errno == EAGAIN;
    close(s);
    return up;
}

/* Whether the host's first rank lives (it is this one, or listens): once
 * it ended, having said a line of its own (then SIGCONT woke a rank it
 * had waited for) or lost itself, the others stay silent. */
static int first_alive(void) {
    return g_first || listening(&g_alive, g_alive_len) != 0;
}

/* This process's turn to say the line: the first to ask in the process,
 * and (host) the first on this host (a socket it cannot bind is another
 * rank's; none made: every rank speaks rather than none). A turn taken
 * listens, so rank 0's guard sees that the host's line is said. */
static int my_turn(int host) {
    if (atomic_exchange(&g_said, 1)) return 0;
    if (!host) return 1;
    if (!first_alive()) return 0;
    if (g_sock < 0) return 1;
    if (bind(g_sock, (const struct sockaddr *)&g_turn, g_turn_len)) return 0;
    listen(g_sock, 64);
    return 1;
}

/* Waits while rank 0 renames a checkpoint on this host (it listens at
 * g_commit_at meanwhile), at most 0.5 s: the line then reads the file
 * after the rename. */
static void await_commit(void) {
    struct timespec ms = {0, 1000000};
    for (int k = 0; k < 500 && listening(&g_commit_at, g_commit_len) > 0; k++)
        nanosleep(&ms, NULL);
}

/* Builds and writes the line (this process's turn). */
static void say(void) {
    await_commit();
    size_t n = 0;
    put(g_line, sizeof g_line, &n, g_who);
    put(g_line, sizeof g_line, &n, "mpirun stopped this rank, as it stops every rank once "
        "one of them or its host is lost (its own message says which) or the run is "
        "interrupted; ");
    n = g_sweep ? put_sweep(g_line, sizeof g_line, n) : put_ckpt(g_line, sizeof g_line, n);
    g_line[n++] = '\n';
    ssize_t w = write(2, g_line, n);
    (void)w;
    atomic_store(&g_spoke, 1);
}

/* mpirun's stop reached this process: no rename after this (commit_enter).
 * Marked after the turn was taken, so that a rename refused for it finds
 * the turn taken (pm_cli_lost_fail then says nothing of its own). */
static void stopping(void) { atomic_store(&g_stopping, 1); }

/* SIGCONT from this rank's daemon (its parent) opens mpirun's stop: the
 * line goes out now, a second before SIGTERM. Another's SIGCONT (a shell's
 * kill -CONT, a debugger) says nothing. */
static void on_cont(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)ctx;
    int saved = errno; /* bind's refusal sets it */
    if (info && info->si_pid == getppid()) {
        int mine = my_turn(1);
        stopping();
        if (mine) say();
    }
    errno = saved;
}

static void on_term(int sig) {
    int saved = errno;
    struct timespec left = {2, 0};
    int mine = atomic_load(&g_spoke) || my_turn(1);
    stopping();
    if (mine) {
        if (!atomic_load(&g_spoke)) say();
        left = (struct timespec){0, 300000000}; /* for mpirun to take the line in */
    }
    /* the others until the daemon's SIGKILL (a second after SIGTERM):
     * ending sooner would cut its sleep short before the line is out */
    while (nanosleep(&left, &left)) continue;
    errno = saved;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* PM_TEST_COMMIT_HOLD=before,K or inside,K (tests/test_cli_mpi.c): the
 * K-th rename waits, before the guard looks (as after a slow fsync) or
 * inside its window (as a slow rename), until mpirun's stop reached this
 * process (at most 5 s) and 0.1 s more: a guard that did not look would
 * rename after the line, a speaker that did not wait for the window would
 * name the step before. */
static void test_hold(int inside) {
    struct timespec tick = {0, 10000000}, more = {0, 100000000};
    if (g_commits != g_hold || g_inside != inside) return;
    for (int k = 0; k < 500 && !atomic_load(&g_stopping); k++) nanosleep(&tick, NULL);
    nanosleep(&more, NULL);
}

/* The guard around rank 0's rename (pm_ckpt_set_guard), on its thread:
 * SIGCONT and SIGTERM wait there, the window is announced, then the
 * rename goes ahead unless the host's line was said or mpirun's stop
 * reached this process (no socket made: unannounced, as every rank speaks
 * when its own cannot be made). */
static pm_status commit_enter(void *ctx, const char *path, pm_err *err) {
    (void)ctx;
    g_commits++;
    test_hold(0);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGCONT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &g_commit_mask);
    g_commit = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g_commit >= 0 && (bind(g_commit, (const struct sockaddr *)&g_commit_at, g_commit_len) ||
                          listen(g_commit, 64)))
        close(g_commit), g_commit = -1;
    if (atomic_load(&g_stopping) || listening(&g_turn, g_turn_len) > 0)
        return pm_errf(err, PM_ERR_TRANSPORT, "%s: not replaced: mpirun is stopping this rank "
                       "and the line naming the checkpoint was said", path);
    test_hold(1);
    return PM_OK;
}

static void commit_leave(void *ctx) {
    (void)ctx;
    if (g_commit >= 0) close(g_commit), g_commit = -1;
    pthread_sigmask(SIG_SETMASK, &g_commit_mask, NULL);
}

static const pm_ckpt_guard g_guard = {commit_enter, commit_leave, NULL};

const char *pm_cli_lost_ckpt(void) {
    g_ckpt[put_ckpt(g_ckpt, sizeof g_ckpt, 0)] = 0;
    return g_ckpt;
}

/* The abstract socket address "\0pipemem-WHAT-JOB" at a; its length. */
static socklen_t name(struct sockaddr_un *a, const char *what, const char *job) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = job ? snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "pipemem-%s-%s", what, job)
                : snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "pipemem-%s-%ld", what,
                           (long)getppid());
    if (n >= (int)sizeof a->sun_path - 1) n = (int)sizeof a->sun_path - 2;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* SIGTERM's handler, who this rank is, and the host's turn to speak
 * (speaks 0: this rank never does). */
static void arm(int rank, int speaks) {
    char host[64] = "?";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "?");
    snprintf(g_who, sizeof g_who, "pipemem: rank %d on %s: ", rank, host);
    /* the job: PMIx's namespace (OpenMPI 5), ORTE's job id (4), else the
     * host's daemon, every rank's parent */
    const char *job = getenv("PMIX_NAMESPACE");
    if (!job) job = getenv("OMPI_MCA_ess_base_jobid");
    g_turn_len = name(&g_turn, "said", job);
    g_alive_len = name(&g_alive, "first", job);
    g_commit_len = name(&g_commit_at, "commit", job);
    const char *hold = getenv("PM_TEST_COMMIT_HOLD");
    char where[8] = "";
    g_hold = g_commits = 0;
    if (hold && sscanf(hold, "%7[a-z],%d", where, &g_hold) == 2)
        g_inside = !strcmp(where, "inside");
    atomic_store(&g_stopping, 0);
    if (g_sock < 0) g_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    g_first = !local || atoi(local) == 0;
    if (g_beacon < 0 && g_first &&
        (g_beacon = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
        (bind(g_beacon, (const struct sockaddr *)&g_alive, g_alive_len) ||
         listen(g_beacon, 64)))
        close(g_beacon), g_beacon = -1;
    atomic_store(&g_said, !speaks);
    atomic_store(&g_spoke, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_sigaction = on_cont; /* SIGTERM waits until it has spoken, on its thread */
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGCONT, &sa, NULL);
}

void pm_cli_lost_arm(int rank, const char *save, const char *resume) {
    snprintf(g_save, sizeof g_save, "%s", save ? save : "");
    snprintf(g_resume, sizeof g_resume, "%s", resume ? resume : "");
    arm(rank, 1);
    pm_ckpt_set_guard(&g_guard); /* rank 0 alone commits */
}

void pm_cli_lost_arm_sweep(const struct pm_select_ranks *k, const char *resume) {
    g_sweep = k;
    snprintf(g_resume, sizeof g_resume, "%s", resume ? resume : "");
    arm(pm_select_ranks_rank(k), pm_select_ranks_rank(k) == 0);
}

void pm_cli_lost_disarm(void) {
    pm_ckpt_set_guard(NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCONT, SIG_DFL);
    g_sweep = NULL; /* after: no handler reads it now */
}

int pm_cli_lost_fail(int speak, const char *msg) {
    pm_cli_lost_ckpt(); /* before the turn: it reads a file */
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigaddset(&term, SIGCONT);
    pthread_sigmask(SIG_BLOCK, &term, &old);
    /* rank 0 speaks for every rank; the others' lines are held back (and
     * their handler stays silent) */
    if (my_turn(speak)) pm_cli_fail("%s; %s", msg, g_ckpt);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 1;
}
