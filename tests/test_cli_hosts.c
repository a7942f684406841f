/* test_cli_hosts.c: pipemem across hosts, over TCP, through scripts/hosts.sh.
 *
 * Started plainly, the program re-runs itself inside `hosts.sh with 2`:
 * two hosts on this machine (network and UTS namespaces, node1 and node2,
 * 198.18.0.1 and .2 on a bridge of their own), all of it ended by the
 * kernel with the harness however the run ends. Where namespaces cannot be
 * made (not root) it prints one line saying it skipped and why. Inside:
 *   - the harness: each host has its own name, address and no route beyond
 *     its subnet; mpirun places ranks on both; `down` is idempotent and a
 *     killed harness leaves no process (hence no namespace or interface),
 *     a stopped one (SIGTERM) no directory either, and a harness killed
 *     outright its directory only until the next harness starts;
 *   - training across hosts: --pp 2 (a rank on each host), --pp 4 under a
 *     V schedule (two a host), DP 2 x PP 2 with and without --zero 1: the
 *     checkpoint byte for byte the threads', the same final and validation
 *     losses, what each rank allocates the same as on one host and its peak
 *     resident memory close; a checkpoint saved by 4 ranks on 2 hosts
 *     resumed on one host (2 ranks, and one device) as if uninterrupted;
 *   - a lost host: every process of node2 killed (OpenMPI's daemon too),
 *     only pipemem's there, or node2's interface taken down, each mid-run:
 *     every rank ends (the test's time limit, not a wall-clock assertion),
 *     one line from pipemem naming the rank and host left and the last
 *     complete checkpoint and the step it holds, which then resumes on
 *     node1 alone with fewer ranks (2, and one device) bitwise as the
 *     uninterrupted run; no process is left on either host;
 *   - hosts that disagree (data, pipemem's version, options): one line
 *     saying which, naming both hosts;
 *   - select across the hosts: every task's records bitwise one machine's,
 *     each rank with devices and memory of its own; ASHA's promotions as
 *     one machine's; ranks with another sweep or data refused in one line;
 *     node2's pipemem lost mid-sweep, the tasks then running named by rank
 *     0, and the sweep resumed on node1 bitwise as one machine's.
 * Every test has a time limit on the whole (alarm); every command one too
 * (timeout), so a hang fails the test instead of stalling make. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "checks.h"
#include "cli.h"
#include "pipemem/pm_runtime.h"
#include "pipemem/pm_train.h"
#include "pipemem/pm_util.h"

#define HOSTS_SH "scripts/hosts.sh"
#define MODEL "--layers 2 --dim 32 --heads 2 --ctx 16 --batch 8 --eval-every 2 --eval-batches 1"
/* mpirun across the hosts (ranks by node: --npernode), leak checks off as in
 * test_mpi (OpenMPI's components keep allocations past MPI_Finalize) */
#define ACROSS "ASAN_OPTIONS=detect_leaks=0 timeout -v -k 5 120 " HOSTS_SH " mpirun %s --quiet"
#define TIMED_OUT "timeout: sending signal" /* timeout -v's line: the command hung */

static char dir[200];   /* this run's files, seen by every host */
static const char *bin; /* pipemem */
static const char *hosts; /* the harness's directory (PM_HOSTS) */

/* ---- helpers ----------------------------------------------------------------- */

/* The whole test's time limit: past it the program ends with a line (the
 * harness then removes the hosts). */
static void too_long(int sig) {
    (void)sig;
    static const char m[] = "test_cli_hosts: a test ran past its time limit\n";
    ssize_t w = write(2, m, sizeof m - 1);
    (void)w;
    _exit(1);
}

static void limit(unsigned secs) {
    signal(SIGALRM, too_long);
    alarm(secs);
}

/* The number after "key": in a run's JSON summary. */
static double json_num(const char *out, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(out, k);
    if (!p) fail_msg("no %s in:\n%s", key, out);
    return strtod(p + strlen(k), NULL);
}

/* Final and validation losses of two runs equal (as printed; the
 * checkpoints compare the bits). */
static void same_losses(const char *a, const char *b, const char *what) {
    const char *k[2] = {"final_loss", "val_loss"};
    for (int i = 0; i < 2; i++)
        if (json_num(a, k[i]) != json_num(b, k[i]))
            fail_msg("%s: %s %.6f against %.6f", what, k[i], json_num(a, k[i]), json_num(b, k[i]));
}

static void nap_ms(int ms) { nanosleep(&(struct timespec){0, ms * 1000000L}, NULL); }

/* Whether any process has one of the network namespaces listed in the
 * harness's hosts file at path (lines "NAME PID net:[INODE] ..."). */
static int namespaces_alive(const char *path) {
    char ns[16][64], line[256], link[64], p[300];
    int n = 0, alive = 0;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (n < 16 && fgets(line, sizeof line, f)) sscanf(line, "%*s %*s %63s", ns[n++]);
    fclose(f);
    assert_true(n >= 3); /* the switch and two hosts */
    DIR *d = opendir("/proc");
    assert_non_null(d);
    for (struct dirent *e; !alive && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(p, sizeof p, "/proc/%s/ns/net", e->d_name);
        ssize_t k = readlink(p, link, sizeof link - 1);
        if (k <= 0) continue;
        link[k] = 0;
        for (int i = 0; i < n; i++) alive |= !strcmp(link, ns[i]);
    }
    closedir(d);
    return alive;
}

/* Waits (within the test's limit) until no process named name (NULL: no
 * process but the harness's holder of its namespace) is on host h. */
static void host_gone(const char *h, const char *name) {
    static char out[1024];
    for (;;) {
        assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " pids %s %s %s", hosts, h,
                            name ? name : ""), 0);
        if (!out[0]) return;
        nap_ms(50);
    }
}

/* ---- the harness ----------------------------------------------------------------- */

/* A harness (`hosts.sh with 2`, its command sleeping) stopped by sig: no
 * process is left in its namespaces (so neither are they, nor their
 * interfaces), and after SIGTERM its directory is gone too (SIGKILL runs
 * no trap: the kernel ends what is inside, the next harness the files). */
static void stop_harness(int sig) {
    char made[300], where[300], cmd[1400], got[300] = "";
    snprintf(made, sizeof made, "%s/stopped.hosts", dir);
    snprintf(where, sizeof where, "%s/stopped.dir", dir);
    remove(made);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        snprintf(cmd, sizeof cmd, "exec env -u PM_HOSTS_PIDNS " HOSTS_SH " with 2 sh -c 'echo "
                 "$PM_HOSTS > %s && cp $PM_HOSTS/hosts %s.part && mv %s.part %s && exec sleep "
                 "600'", where, made, made, made);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    while (access(made, F_OK)) nap_ms(20);
    assert_true(namespaces_alive(made));
    FILE *f = fopen(where, "r");
    assert_non_null(f);
    assert_non_null(fgets(got, sizeof got, f));
    fclose(f);
    got[strcspn(got, "\n")] = 0;
    assert_int_equal(access(got, F_OK), 0);
    kill(pid, sig);
    waitpid(pid, NULL, 0);
    while (namespaces_alive(made)) nap_ms(20); /* the time limit says if it never ends */
    if (sig == SIGTERM && !access(got, F_OK)) fail_msg("SIGTERM left %s", got);
    if (sig != SIGKILL) return;
    /* SIGKILL's directory stays until the next harness, which removes it */
    assert_int_equal(access(got, F_OK), 0);
    static char out[1024];
    assert_int_equal(chk_output(out, sizeof out, "env -u PM_HOSTS_PIDNS " HOSTS_SH " with 2 true"), 0);
    if (!access(got, F_OK)) fail_msg("the next harness left %s", got);
}

static void test_harness(void **state) {
    (void)state;
    static char out[8192];
    limit(120);
    for (int k = 1; k <= 2; k++) {
        assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " run %s node%d hostname", hosts, k), 0);
        char want[32];
        snprintf(want, sizeof want, "node%d\n", k);
        assert_string_equal(out, want);
        /* its address on the subnet, the only route: nothing leaves */
        assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " run %s node%d ip -4 -o addr", hosts, k), 0);
        snprintf(want, sizeof want, "198.18.0.%d/24", k);
        if (!strstr(out, want) || chk_count(out, "inet ") != 2) fail_msg("node%d: %s", k, out);
        assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " run %s node%d ip route", hosts, k), 0);
        if (chk_count(out, "\n") != 1 || !strstr(out, "198.18.0.0/24 dev eth0"))
            fail_msg("node%d's routes: %s", k, out);
    }
    assert_int_equal(chk_output(out, sizeof out, ACROSS " -np 2 --npernode 1 sh -c 'echo rank "
                        "$OMPI_COMM_WORLD_RANK on $(hostname)'", hosts), 0);
    if (!strstr(out, "rank 0 on node1") || !strstr(out, "rank 1 on node2")) fail_msg("%s", out);
    /* up then down, twice: nothing left, and the second is a no-op */
    char h3[300], list[320], kept[320];
    snprintf(h3, sizeof h3, "%s/three", dir);
    snprintf(list, sizeof list, "%s/hosts", h3);
    snprintf(kept, sizeof kept, "%s/three.hosts", dir);
    assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " up %s 3 && cp %s %s", h3, list, kept), 0);
    assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " run %s node3 hostname", h3), 0);
    assert_string_equal(out, "node3\n");
    assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " down %s && " HOSTS_SH " down %s", h3, h3), 0);
    assert_false(namespaces_alive(kept));
    stop_harness(SIGTERM);
    stop_harness(SIGKILL);
}

/* ---- training across hosts ------------------------------------------------------- */

/* Trains on threads and across the hosts (p x dp ranks, per host on each)
 * and compares the checkpoints byte for byte and the losses; the ranks
 * ran where asked (the summary's hosts). The run across hosts's summary
 * stays in across for the caller. */
static void same_across(const char *kind, int p, int dp, int per_host, const char *opts,
                        char *across, size_t cap) {
    static char tout[16384];
    char a[300], b[300], what[200], want[200] = "\"hosts\": [";
    snprintf(what, sizeof what, "%s --pp %d --dp %d %s", kind, p, dp, opts);
    snprintf(a, sizeof a, "%s/t.ckpt", dir);
    snprintf(b, sizeof b, "%s/h.ckpt", dir);
    remove(a), remove(b);
    const char *m = MODEL " --microbatches 4 --steps 3 --json";
    if (chk_stdout(tout, sizeof tout, "%s train --data %s/d %s --pp %d --dp %d --schedule %s %s "
           "--save %s", bin, dir, m, p, dp, kind, opts, a))
        fail_msg("%s, threads: %s", what, tout);
    if (chk_stdout(across, cap, ACROSS " -np %d --npernode %d %s train --data %s/d %s --pp %d --dp %d "
           "--schedule %s %s --save %s", hosts, p * dp, per_host, bin, dir, m, p, dp, kind, opts,
           b))
        fail_msg("%s, across hosts: %s", what, across);
    for (int g = 0; g < p * dp; g++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s\"node%d\"", g ? ", " : "",
                 g / per_host + 1);
    if (!strstr(across, want)) fail_msg("%s: not placed as %s]:\n%s", what, want, across);
    if (!chk_same_file(a, b)) fail_msg("%s: the checkpoint across hosts differs from threads'", what);
    same_losses(across, tout, what);
}

/* What each rank allocated across hosts is its plan's, and its peak
 * resident memory that of the same run with every rank on this machine
 * (shared memory) but for the MPI library's own buffers (a quarter). */
static void memory_as_one_host(const char *across, const char *opts, int np) {
    static char one[16384];
    char msg[512];
    double a[8], b[8];
    /* against the plan (the tiny model's state is smaller than its buffers,
     * so no bound against the whole model's) */
    if (chk_train_alloc(across, 100, msg, sizeof msg)) fail_msg("across hosts: %s", msg);
    if (chk_stdout(one, sizeof one, "ASAN_OPTIONS=detect_leaks=0 timeout -k 5 120 mpirun --oversubscribe "
           "--quiet -np %d %s train --data %s/d " MODEL " --microbatches 4 --steps 3 --json %s",
           np, bin, dir, opts))
        fail_msg("one host: %s", one);
    assert_int_equal(chk_json_array(across, "peak_rss_bytes", a, 8), np);
    assert_int_equal(chk_json_array(one, "peak_rss_bytes", b, 8), np);
    for (int g = 0; g < np; g++)
        if (a[g] > 1.25 * b[g])
            fail_msg("rank %d: peak resident memory %.0f across hosts, %.0f on one", g, a[g], b[g]);
}

static void test_across_hosts(void **state) {
    (void)state;
    static char out[16384], whole[16384];
    limit(400);
    same_across("1f1b", 2, 1, 1, "", out, sizeof out);
    same_across("v-half", 4, 1, 2, "--layers 6", out, sizeof out);
    same_across("zb-h1", 2, 2, 2, "--zero 0", out, sizeof out);
    char opts[400];
    snprintf(opts, sizeof opts, "--pp 2 --dp 2 --schedule zb-h1 --zero 0 --save %s/one.ckpt", dir);
    memory_as_one_host(out, opts, 4);
    same_across("zb-h1", 2, 2, 2, "--zero 1", out, sizeof out);
    /* saved by 4 ranks on 2 hosts (zb-v: 8 stages), resumed on node1 with 2
     * ranks and with one device: as the uninterrupted run */
    const char *m = MODEL " --layers 6 --microbatches 4 --steps 4";
    char ref[300], part[300], res[300];
    snprintf(ref, sizeof ref, "%s/rs_whole.ckpt", dir);
    snprintf(part, sizeof part, "%s/rs_part.ckpt", dir);
    snprintf(res, sizeof res, "%s/rs_res.ckpt", dir);
    if (chk_stdout(whole, sizeof whole, "%s train --data %s/d %s --threads 1 --save %s --json", bin, dir, m,
           ref))
        fail_msg("%s", whole);
    if (chk_output(out, sizeof out, ACROSS " -np 4 --npernode 2 %s train --data %s/d %s --pp 4 --schedule "
           "zb-v --stop-after 2 --save %s", hosts, bin, dir, m, part))
        fail_msg("%s", out);
    const char *on[2] = {ACROSS " -np 2 --host node1:2 %s train --data %s/d %s --pp 2 "
                         "--schedule 1f1b --resume %s --save %s --json",
                         "%.0s%s train --data %s/d %s --threads 1 --resume %s --save %s --json"};
    for (int k = 0; k < 2; k++) {
        remove(res);
        if (chk_stdout(out, sizeof out, on[k], hosts, bin, dir, m, part, res))
            fail_msg("resumed on node1 (%d): %s", k, out);
        if (!chk_same_file(ref, res)) fail_msg("saved across hosts, resumed on one (%d): differs", k);
        same_losses(out, whole, "saved across hosts, resumed on one");
    }
}

/* ---- a lost host ------------------------------------------------------------------ */

/* Trains --pp 4 over both hosts (2 ranks each), saving every 20 steps; once
 * the first checkpoint exists, `inject` (a hosts.sh command) strikes node2.
 * Every rank must end (the command's own time limit is 60 s: timeout says
 * when it struck), with one line from pipemem, `says`, naming the last
 * complete checkpoint and the step the file holds (a save committed after
 * the line would resume past the step asked); then no process is left,
 * and the checkpoint resumed on node1 alone (2 ranks, and one device) ends
 * as the uninterrupted run.
 * Without OpenMPI's keepalive (keep 0) nothing tells mpirun that node2 went
 * silent: pipemem's wait timeout (3 s) must end every rank on both hosts,
 * and the test then ends mpirun and node2's OpenMPI daemon, which would
 * wait for TCP's minutes. (With the keepalive the wait timeout stays at its
 * default: a rank on node2 timing out first would leave its daemon sending
 * to mpirun, and TCP's keepalive waits while data is unsent.) */
static void lose_node2(const char *inject, int keep, const char *says) {
    static char ref[16384], res[16384];
    const char *m = MODEL " --eval-every 20 --microbatches 4 --steps 100000";
    char ck[300], got[300], rf[300];
    snprintf(ck, sizeof ck, "%s/lost.ckpt", dir);
    snprintf(got, sizeof got, "%s/resumed.ckpt", dir);
    snprintf(rf, sizeof rf, "%s/ref.ckpt", dir);
    remove(ck);
    chk_cmd c = {0}; /* its pid is timeout's, which leads a process group of its own */
    pid_t pid = chk_start(&c, "exec 2>&1; exec env ASAN_OPTIONS=detect_leaks=0 HOSTS_KEEPALIVE=%d "
                          "timeout -v -k 5 60 " HOSTS_SH " mpirun %s -np 4 --npernode 2 %s train "
                          "--data %s/d %s --pp 4 --save %s %s", keep, hosts, bin, dir, m, ck,
                          keep ? "" : "--comm-timeout 3");
    assert_true(pid > 0);
    while (access(ck, F_OK)) nap_ms(10);
    assert_int_equal(chk_output(res, sizeof res, HOSTS_SH " %s", inject), 0);
    if (!keep) { /* every rank ends by itself; then mpirun is ended here */
        for (int k = 1; k <= 2; k++) {
            char h[16];
            snprintf(h, sizeof h, "node%d", k);
            host_gone(h, "pipemem");
        }
        /* OpenMPI's daemon on node2 is left too, until TCP's keepalive (300 s) */
        assert_int_equal(chk_output(res, sizeof res, HOSTS_SH " kill %s node1 mpirun && " HOSTS_SH
                            " kill %s node2 && " HOSTS_SH " link %s node2 up", hosts, hosts,
                            hosts), 0);
    }
    int rc = chk_wait(&c, pid);
    const char *out = c.out;
    const char *tail = out + (c.out_len > 900 ? c.out_len - 900 : 0); /* cmocka cuts a long one */
    if (rc == 0 || strstr(out, TIMED_OUT)) fail_msg("%s: exit %d, ending:\n%s", inject, rc, tail);
    const char *at = strstr(out, "the last complete checkpoint is ");
    const char *first = strstr(out, "pipemem: ");
    if (chk_count(out, "pipemem: ") != 1 || !strstr(out, says) || !at)
        fail_msg("%s: not one line from pipemem naming the checkpoint (%d lines, the first: "
                 "%.*s), ending:\n%s", inject, chk_count(out, "pipemem: "),
                 first ? (int)strcspn(first, "\n") : 0, first ? first : "", tail);
    char path[300];
    long long step = -1;
    if (sscanf(at, "the last complete checkpoint is %299s (step %lld)", path, &step) != 2 ||
        strcmp(path, ck) || step < 20 || step % 20)
        fail_msg("%s: %s", inject, at);
    /* rank 0 renamed no checkpoint over it after the line (lost.c's guard) */
    if (pm_ckpt_peek_step(ck) != step)
        fail_msg("%s: the line says step %lld, %s holds step %lld", inject, step, ck,
                 (long long)pm_ckpt_peek_step(ck));
    chk_cmd_free(&c);
    host_gone("node1", NULL);
    host_gone("node2", NULL);
    /* the uninterrupted run to 10 steps past the checkpoint, and the resumes */
    long long stop = step + 10;
    remove(rf);
    if (chk_stdout(ref, sizeof ref, "%s train --data %s/d %s --threads 1 --stop-after %lld --save %s "
           "--json", bin, dir, m, stop, rf))
        fail_msg("%s", ref);
    const char *on[2] = {ACROSS " -np 2 --host node1:2 %s train --data %s/d %s --pp 2 --resume %s "
                         "--stop-after %lld --save %s --json",
                         "%.0s%s train --data %s/d %s --threads 1 --resume %s --stop-after %lld "
                         "--save %s --json"};
    for (int k = 0; k < 2; k++) {
        remove(got);
        if (chk_stdout(res, sizeof res, on[k], hosts, bin, dir, m, ck, stop, got))
            fail_msg("%s: resumed on node1 (%d): %s", inject, k, res);
        if (!chk_same_file(rf, got)) fail_msg("%s: resumed on node1 (%d): differs", inject, k);
        same_losses(res, ref, inject);
    }
}

static void test_lost_host(void **state) {
    (void)state;
    static char out[1024];
    char what[400];
    /* either rank of node1 (the first whose handler ran) says it for the host */
    const char *stopped = "on node1: mpirun stopped this rank";
    limit(500);
    snprintf(what, sizeof what, "kill %s node2", hosts); /* OpenMPI's daemon included */
    lose_node2(what, 1, stopped);
    snprintf(what, sizeof what, "kill %s node2 pipemem", hosts);
    lose_node2(what, 1, stopped);
    snprintf(what, sizeof what, "link %s node2 down", hosts);
    lose_node2(what, 1, stopped);
    assert_int_equal(chk_output(out, sizeof out, HOSTS_SH " link %s node2 up", hosts), 0);
    /* node1's ranks wait for node2's: the one that waits out the 3 s says so,
     * naming the rank it waited for, or at the step's start (a barrier) the
     * ranks that never came (2 of 11 runs here) */
    lose_node2(what, 0, "waited 3 s ");
}

/* ---- hosts that disagree ---------------------------------------------------------- */

/* Rank 0 on node1 and rank 1 on node2 (with env and options of its own):
 * every rank stops at the start, one line saying what differs. */
static void disagree(const char *env, const char *data, const char *opts, const char *expect) {
    static char out[16384];
    const char *m = MODEL " --microbatches 4 --steps 2 --pp 2";
    int rc = chk_output(out, sizeof out, ACROSS " -np 1 -host node1 %s train --data %s/d %s : -np 1 "
                "-host node2 env %s %s train --data %s/%s %s %s", hosts, bin, dir, m, env, bin,
                dir, data, m, opts);
    if (rc == 0 || strstr(out, TIMED_OUT) || chk_count(out, "pipemem: ") != 1 || !strstr(out, expect))
        fail_msg("exit %d, not one line '%s':\n%s", rc, expect, out);
}

static void test_disagree(void **state) {
    (void)state;
    char v[200];
    limit(120);
    const char *where = " (rank 1 runs on node2, rank 0 on node1): ";
    snprintf(v, sizeof v, "rank 1 reads other training data than rank 0%severy host needs the "
             "same data directory", where);
    disagree("PM_X=1", "e", "", v);
    snprintf(v, sizeof v, "rank 1 runs pipemem 9.9.9, rank 0 pipemem %s%severy host needs the "
             "same pipemem", pm_version(), where);
    disagree("PM_TEST_VERSION=9.9.9", "d", "", v);
    snprintf(v, sizeof v, "rank 1 was started with other options or another schedule than rank "
             "0%severy rank needs the same command line", where);
    disagree("PM_X=1", "d", "--eval-every 3", v);
}

/* ---- select across hosts ------------------------------------------------------------ */

#define SWEEP "--layers 4 --dim 64 --heads 2 --ctx 16 --batch 8 --microbatches 2 --eval-batches 1"

/* The records of n tasks t0.. under save directories a and b, byte for
 * byte: each checkpoint and losses, and a stopped task's marker. */
static void same_records(const char *a, const char *b, int n, const char *what) {
    static const char *const ext[3] = {"ckpt", "loss", "stopped"};
    for (int i = 0; i < n; i++)
        for (int e = 0; e < 3; e++) {
            char x[300], y[300];
            snprintf(x, sizeof x, "%s/t%d.%s", a, i, ext[e]);
            snprintf(y, sizeof y, "%s/t%d.%s", b, i, ext[e]);
            int hx = !access(x, F_OK), hy = !access(y, F_OK);
            if (hx != hy || (e < 2 && !hx)) fail_msg("%s: t%d.%s %s on one machine, %s across "
                                                   "hosts", what, i, ext[e], hx ? "is" : "is not",
                                                   hy ? "is" : "is not");
            if (hx && !chk_same_file(x, y)) fail_msg("%s: t%d.%s differs", what, i, ext[e]);
        }
}

/* Sweep sw into save directory save: on one machine (one device of 16
 * MiB; mpi NULL), or under mpirun with mpi's placement, a device of 16 MiB
 * a rank. Fails the test if it fails; its output in out. */
static void sweep(char *out, size_t cap, const char *mpi, const char *sw, const char *save) {
    const char *opts = "--devices 1 --device-mem 16M";
    int rc = mpi ? chk_output(out, cap, ACROSS " %s %s select --data %s/d %s %s --resume %s", hosts, mpi,
                      bin, dir, sw, opts, save)
                 : chk_output(out, cap, "%s select --data %s/d %s %s --resume %s", bin, dir, sw, opts,
                      save);
    if (rc) fail_msg("%s (%s): %s", save, mpi ? mpi : "one machine", out);
}

/* The CSV rank 0 wrote (dir/sel.csv) names for each of its n tasks the rank
 * the JSON in out names (in the task's object: its "rank" before the next). */
static void csv_ranks_as_json(const char *out, int n) {
    char path[300], line[2048];
    snprintf(path, sizeof path, "%s/sel.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: not written", path);
    int rows = 0;
    if (!fgets(line, sizeof line, f) || !strstr(line, ",state,rank,why"))
        fail_msg("%s: the header has no rank column: %s", path, line);
    while (fgets(line, sizeof line, f)) {
        char *col[21], key[200];
        int k = 0;
        for (char *c = line; c && k < 21; k++) { /* empty fields kept (val_step may be) */
            col[k] = c;
            if ((c = strchr(c, ','))) *c++ = 0;
        }
        if (k < 21) fail_msg("%s: a short row", path);
        snprintf(key, sizeof key, "{\"task\": \"%s\"", col[0]);
        const char *at = strstr(out, key), *r = at ? strstr(at, "\"rank\": ") : NULL;
        const char *next = at ? strstr(at + 1, "{\"task\": ") : NULL;
        if (!r || (next && r > next) || !strchr("01", col[20][0]) || atoi(r + 8) != atoi(col[20]))
            fail_msg("task %s: rank %s in the CSV, not the JSON's:\n%s", col[0], col[20], out);
        rows++;
    }
    fclose(f);
    if (rows != n) fail_msg("%s: %d rows, not %d", path, rows, n);
}

/* 8 tasks on one machine (one device), then over both hosts, each rank
 * with devices and memory of its own (node2's 3 MiB cuts every task into
 * 4 shards, node1's 16 MiB leaves one): every task's records bitwise the
 * one machine's, the table and JSON rank 0's alone with every task, tasks
 * run on both ranks. Then ASHA (4 tasks, eta 3, rungs 3 and 9): whichever
 * rank reports when, its promotions are the top 2 of the 4 at step 3 (the
 * quota ceil(4/3), and the first promoted is the best of 3 so in the top 2
 * of 4), so the same tasks stop, each at the same state, as on one machine. */
static void test_select_across_hosts(void **state) {
    (void)state;
    static char out[65536];
    char one[300], two[300];
    const char *sw = SWEEP " --lr 1e-3,2e-3,3e-3,4e-3 --seed 1,2 --steps 6 --eval-every 3";
    limit(300);
    snprintf(one, sizeof one, "%s/sel1", dir);
    snprintf(two, sizeof two, "%s/sel2", dir);
    sweep(out, sizeof out, NULL, sw, one);
    if (chk_output(out, sizeof out, ACROSS " -np 1 -host node1 %s select --data %s/d %s --devices 2 "
           "--device-mem 16M --resume %s --json --csv %s/sel.csv : -np 1 -host node2 %s select "
           "--data %s/d %s --devices 1 --device-mem 3M --resume %s --json --csv %s/sel.csv", hosts,
           bin, dir, sw, two, dir, bin, dir, sw, two, dir))
        fail_msg("across hosts: %s", out);
    if (chk_count(out, "{\"task\": ") != 8 || chk_count(out, "makespan ") != 1 ||
        !strstr(out, "\"rank\": 0") || !strstr(out, "\"rank\": 1"))
        fail_msg("across hosts: not one table of 8 tasks run on both ranks:\n%s", out);
    csv_ranks_as_json(out, 8);
    same_records(one, two, 8, "select across hosts");
    const char *asha = SWEEP " --lr 1e-3,2e-3,5e-3,1e-2 --steps 9 --asha 3 --asha-min 3";
    snprintf(one, sizeof one, "%s/asha1", dir);
    snprintf(two, sizeof two, "%s/asha2", dir);
    sweep(out, sizeof out, NULL, asha, one);
    if (chk_count(out, "stopped: by ASHA after step 3 (") != 2)
        fail_msg("asha: not 2 stopped:\n%s", out);
    sweep(out, sizeof out, "-np 2 --npernode 1", asha, two);
    same_records(one, two, 4, "asha across hosts");
}

/* Ranks that differ in their sweep or data (rank 1 on node2 with other
 * steps, more tasks, other evaluations, another data directory) stop at
 * the start: one line, rank 0's, naming rank 1 and the first part that
 * differs as the options that set it; ranks that differ only in their
 * devices and memory ran above. */
static void test_select_disagree(void **state) {
    (void)state;
    static char out[16384];
    const char *sw = SWEEP " --lr 1e-3,2e-3 --steps 4 --devices 1 --device-mem 16M";
    const char *what[4][2] = {{"d", "--steps 5"}, {"d", "--lr 1e-3,2e-3,3e-3"},
                              {"d", "--eval-every 1"}, {"e", ""}};
    const char *says[4] = {"rank 1 gives its tasks another --steps than rank 0",
                           "rank 1 has other tasks than rank 0 (their number or names)",
                           "rank 1 evaluates differently from rank 0 (--eval-every or "
                           "--eval-batches)",
                           "rank 1 reads other data"};
    limit(120);
    for (int k = 0; k < 4; k++) {
        int rc = chk_output(out, sizeof out, ACROSS " -np 1 -host node1 %s select --data %s/d %s : -np 1 "
                    "-host node2 %s select --data %s/%s %s %s", hosts, bin, dir, sw, bin, dir,
                    what[k][0], sw, what[k][1]);
        if (rc == 0 || strstr(out, TIMED_OUT) || chk_count(out, "pipemem: ") != 1 ||
            !strstr(out, says[k]))
            fail_msg("exit %d, not one line '%s':\n%s", rc, says[k], out);
    }
}

/* A sweep over both hosts loses node2's pipemem mid-run: rank 0 says in
 * one line which tasks were running where (lost since their last
 * checkpoint) and how to resume; resumed on node1 alone (2 ranks), every
 * task ends bitwise as the sweep run on one machine uninterrupted. */
static void test_select_lost_rank(void **state) {
    (void)state;
    static char res[16384];
    char lost[300], ref[300], line[400];
    const char *sw = SWEEP " --lr 1e-3,2e-3,3e-3,4e-3 --steps 300 --eval-every 20";
    limit(300);
    snprintf(lost, sizeof lost, "%s/lost", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    chk_cmd c = {0};
    pid_t pid = chk_start(&c, "exec 2>&1; exec env " ACROSS " -np 2 --npernode 1 %s select --data "
                          "%s/d %s --devices 1 --device-mem 16M --resume %s", hosts, bin, dir, sw,
                          lost);
    assert_true(pid > 0);
    for (int saved = 0; !saved; nap_ms(10))
        for (int i = 0; i < 4 && !saved; i++) {
            char p[320];
            snprintf(p, sizeof p, "%s/t%d.loss", lost, i);
            saved = !access(p, F_OK);
        }
    assert_int_equal(chk_output(res, sizeof res, HOSTS_SH " kill %s node2 pipemem", hosts), 0);
    int rc = chk_wait(&c, pid);
    const char *out = c.out;
    if (rc == 0 || strstr(out, TIMED_OUT)) fail_msg("exit %d:\n%s", rc, out);
    snprintf(line, sizeof line, "; resume with --resume %s on any hosts and ranks", lost);
    if (chk_count(out, "pipemem: ") != 1 || !strstr(out, "pipemem: rank 0 on node1: mpirun stopped") ||
        !strstr(out, "tasks then running are lost since their last checkpoint: ") ||
        !strstr(out, " (rank 1 on node2)") || !strstr(out, line))
        fail_msg("not one line from pipemem naming the lost tasks:\n%s", out);
    chk_cmd_free(&c);
    host_gone("node1", NULL);
    host_gone("node2", NULL);
    sweep(res, sizeof res, NULL, sw, ref);
    sweep(res, sizeof res, "-np 2 --host node1:2", sw, lost); /* resumed on node1 */
    same_records(ref, lost, 4, "lost and resumed on node1");
}

/* ---- setup ------------------------------------------------------------------------ */

static int setup(void **state) {
    (void)state;
    static char out[4096];
    snprintf(dir, sizeof dir, "%.150s/test", hosts); /* goes with the hosts, whatever happens */
    if (chk_output(out, sizeof out, "mkdir -p %s && for i in $(seq 1 400); do echo \"line $i of a small "
           "corpus for the tests across hosts\"; done > %s/a.txt && for i in $(seq 1 300); do "
           "echo \"other $i\"; done > %s/b.txt && %s prepare %s/a.txt -o %s/d && %s prepare "
           "%s/b.txt -o %s/e", dir, dir, dir, bin, dir, dir, bin, dir, dir))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    alarm(0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) ? -1 : 0;
}

int main(int argc, char **argv) {
    (void)argc;
    bin = getenv("PM_BIN");
    hosts = getenv("PM_HOSTS");
    if (!bin) {
        fprintf(stderr, "test_cli_hosts: set PM_BIN to the built pipemem (make check does)\n");
        return 1;
    }
    if (!pm_mpi_built()) {
        printf("test_cli_hosts: skipped: this pipemem was built without MPI\n");
        return 0;
    }
    if (!hosts) { /* into the harness, unless this machine cannot make hosts */
        static char why[1024];
        if (chk_output(why, sizeof why, HOSTS_SH " can")) {
            printf("test_cli_hosts: skipped: %s", why);
            return 0;
        }
        char self[512];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return 1;
        self[n] = 0;
        execl(HOSTS_SH, HOSTS_SH, "with", "2", self, (char *)NULL);
        fprintf(stderr, "test_cli_hosts: cannot run " HOSTS_SH "\n");
        return 1;
    }
    (void)argv;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness),
        cmocka_unit_test(test_across_hosts),
        cmocka_unit_test(test_lost_host),
        cmocka_unit_test(test_disagree),
        cmocka_unit_test(test_select_across_hosts),
        cmocka_unit_test(test_select_disagree),
        cmocka_unit_test(test_select_lost_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
