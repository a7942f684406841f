/* test_util.c: the allocation fault hook, bounded file reads (endless and
 * oversized inputs, directories, FIFOs) and all-or-nothing writes (the old
 * file survives a dropped or failed write; stale temporaries are cleared,
 * users' files named like them never;
 * a planted symlink is never followed; concurrent writers never share a
 * temporary), whether two paths name one file, the checksum and JSON
 * strings. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "checks.h"
#include "pipemem/pm_util.h"
#include "util/alloc.h"
#include "util/file.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pm_test_util_%d", (int)getpid());
    return mkdir(dir, 0777);
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_content(const char *path, const char *text) {
    char *got;
    size_t n;
    pm_err err;
    assert_int_equal(pm_read_file(path, 1024, &got, &n, &err), PM_OK);
    assert_int_equal(n, strlen(text));
    assert_string_equal(got, text);
    pm_free(got);
}

/* A writer of path killed mid-write: a child process opens it, writes,
 * and exits without commit or abort, leaving its temporary behind. */
static void killed_writer(const char *path) {
    int before = chk_tmp_count(path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pm_wfile w;
        pm_err err;
        if (pm_wfile_open(&w, path, &err)) _exit(1);
        fputs("half of a killed write", w.f);
        fflush(w.f);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(chk_tmp_count(path), before + 1);
}

static void test_alloc_hook_fails_exactly_the_nth(void **state) {
    (void)state;
    pm_alloc_fail_at(3, 0);
    void *a = pm_malloc(8), *b = pm_calloc(2, 8), *c = pm_malloc(8), *d = pm_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c);
    assert_non_null(d); /* not sticky: only the third failed */
    assert_true(pm_alloc_failed());
    pm_free(a), pm_free(b), pm_free(d);
    pm_alloc_fail_at(2, 1);
    a = pm_malloc(8);
    assert_non_null(a);
    assert_null(pm_realloc(a, 64)); /* realloc failure keeps a */
    assert_null(pm_malloc(1));      /* sticky */
    pm_alloc_fail_at(0, 0);
    b = pm_malloc(1);
    assert_non_null(b);
    pm_free(a), pm_free(b);
    int64_t c0 = pm_alloc_calls();
    pm_free(pm_malloc(4));
    assert_int_equal(pm_alloc_calls(), c0 + 1);
}

static void test_read_stops_at_the_limit(void **state) {
    (void)state;
    char *buf = (char *)1;
    size_t n = 7;
    pm_err err;
    /* An endless input fails at the cap instead of growing without end. */
    assert_int_equal(pm_read_file("/dev/zero", 1 << 20, &buf, &n, &err), PM_ERR_IO);
    assert_null(buf);
    assert_int_equal(n, 0);
    assert_non_null(strstr(err.msg, "/dev/zero"));
    assert_non_null(strstr(err.msg, "1048576-byte limit"));
    char path[300];
    snprintf(path, sizeof path, "%s/ten", dir);
    put(path, "0123456789");
    assert_int_equal(pm_read_file(path, 9, &buf, &n, &err), PM_ERR_IO);
    assert_int_equal(pm_read_file(path, 10, &buf, &n, &err), PM_OK);
    assert_int_equal(n, 10);
    assert_int_equal(buf[10], '\0');
    pm_free(buf);
    assert_int_equal(pm_read_file(dir, 100, &buf, &n, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "is a directory"));
    pm_alloc_fail_at(1, 1);
    assert_int_equal(pm_read_file(path, 100, &buf, &n, &err), PM_ERR_NOMEM);
    pm_alloc_fail_at(0, 0);
    assert_null(buf);
}

static void test_write_is_all_or_nothing(void **state) {
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    put(path, "keep");
    pm_err err;
    pm_wfile w;
    assert_int_equal(pm_wfile_open(&w, path, &err), PM_OK);
    fputs("half", w.f);
    expect_content(path, "keep"); /* nothing visible before commit */
    pm_wfile_abort(&w);
    expect_content(path, "keep");
    assert_int_equal(chk_tmp_count(path), 0);
    killed_writer(path);
    assert_int_equal(pm_wfile_open(&w, path, &err), PM_OK);
    fputs("new", w.f);
    assert_int_equal(pm_wfile_commit(&w, &err), PM_OK);
    expect_content(path, "new");
    assert_int_equal(chk_tmp_count(path), 0);
    pm_wfile_abort(&w); /* safe after commit */
    /* A device is written in place, and a full one fails at commit. */
    assert_int_equal(pm_wfile_open(&w, "/dev/full", &err), PM_OK);
    for (int i = 0; i < 10000; i++) fputs("0123456789", w.f);
    assert_int_equal(pm_wfile_commit(&w, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "No space"));
    assert_int_not_equal(access("/dev/full.tmp", F_OK), 0);
    /* A full disk under a regular file: the old file stays. */
    assert_int_equal(pm_wfile_open(&w, path, &err), PM_OK);
    fclose(w.f);
    w.f = fopen("/dev/full", "wb");
    assert_non_null(w.f);
    for (int i = 0; i < 10000; i++) fputs("0123456789", w.f);
    assert_int_equal(pm_wfile_commit(&w, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "unchanged"));
    expect_content(path, "new");
}

static void test_writable_check(void **state) {
    (void)state;
    pm_err err;
    assert_int_equal(pm_path_check_writable(dir, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "is a directory"));
    assert_int_equal(pm_path_check_writable("/nonexistent-dir/x", &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x"));
    char path[300];
    snprintf(path, sizeof path, "%s/ok", dir);
    killed_writer(path);
    assert_int_equal(pm_path_check_writable(path, &err), PM_OK);
    assert_int_equal(chk_tmp_count(path), 0); /* the stale one is gone */
    assert_int_not_equal(access(path, F_OK), 0); /* and nothing was created */
    assert_int_equal(pm_path_check_writable("/dev/null", &err), PM_OK);
    assert_int_not_equal(access("/dev/null.tmp", F_OK), 0);
    pm_wfile w;
    assert_int_equal(pm_wfile_open(&w, dir, &err), PM_ERR_IO);
}

/* Writers never follow a symlink planted at a temporary's name, and two
 * writers of one path at once each write their own temporary: the path
 * ends holding one of the two contents whole. */
static void test_symlink_and_concurrent_writers(void **state) {
    (void)state;
    char path[300], victim[300], link[330];
    snprintf(path, sizeof path, "%s/out2.txt", dir);
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    snprintf(link, sizeof link, "%s.tmp", path);
    put(victim, "precious");
    assert_int_equal(symlink(victim, link), 0);
    pm_err err;
    assert_int_equal(pm_path_check_writable(path, &err), PM_OK);
    pm_wfile a, b;
    assert_int_equal(pm_wfile_open(&a, path, &err), PM_OK);
    assert_int_equal(pm_wfile_open(&b, path, &err), PM_OK);
    assert_string_not_equal(a.tmp, b.tmp);
    fputs("from a", a.f);
    fputs("from b, longer", b.f);
    assert_int_equal(pm_wfile_commit(&a, &err), PM_OK);
    expect_content(path, "from a");
    assert_int_equal(pm_wfile_commit(&b, &err), PM_OK);
    expect_content(path, "from b, longer");
    expect_content(victim, "precious");
    assert_int_equal(chk_tmp_count(path), 0);
}

/* The cleanup of stale temporaries removes only what a writer of ours
 * left (issue 31, 1): files a user named like temporaries, a dead pid's
 * included, and a name with a wrong tag stay, whole. */
static void test_users_files_kept(void **state) {
    (void)state;
    char path[300], mine[5][400];
    snprintf(path, sizeof path, "%s/o.ckpt", dir);
    /* pid 2^22 + 1 is above Linux's pid_max: no process has it */
    const char *tail[5] = {".tmp", ".tmp.999999.notes", ".tmp.4194305.7",
                           ".tmp.4194305.7.0123456789abcdef", ".tmp.4194305.7.0.tmp"};
    for (int k = 0; k < 5; k++) {
        snprintf(mine[k], sizeof mine[k], "%s%s", path, tail[k]);
        put(mine[k], "mine");
    }
    killed_writer(path);
    pm_err err;
    assert_int_equal(pm_path_check_writable(path, &err), PM_OK);
    assert_int_equal(chk_tmp_count(path), 1); /* the look-alike with a wrong tag */
    killed_writer(path);
    pm_wfile w;
    assert_int_equal(pm_wfile_open(&w, path, &err), PM_OK);
    fputs("new", w.f);
    assert_int_equal(pm_wfile_commit(&w, &err), PM_OK);
    expect_content(path, "new");
    assert_int_equal(chk_tmp_count(path), 1);
    for (int k = 0; k < 5; k++) expect_content(mine[k], "mine");
}

/* A FIFO without a writer would block an open forever: refused at once. */
static void test_fifo_refused(void **state) {
    (void)state;
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0666), 0);
    char *got;
    size_t n;
    pm_err err;
    assert_int_equal(pm_read_file(fifo, 1024, &got, &n, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "pipe"));
    FILE *f;
    assert_int_equal(pm_file_open_read(fifo, 1, &f, &err), PM_ERR_IO);
    assert_int_equal(pm_file_open_read("/dev/zero", 1, &f, &err), PM_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(pm_file_open_read("/dev/zero", 0, &f, &err), PM_OK);
    fclose(f);
}

/* Rounding a size near SIZE_MAX up to the alignment must not wrap. */
/* pm_same_file: one file under every name it has (hard link, symlink,
 * "./", "..", doubled and trailing slashes), outputs not yet written in one
 * directory, and files that differ. */
static void test_same_file(void **state) {
    (void)state;
    char a[400], b[400], sub[400], cwd[4096];
    snprintf(a, sizeof a, "%s/a", dir);
    FILE *f = fopen(a, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    static const char *const same[] = {"%s/a", "%s//a", "%s/./a", "%s/sub/../a", "%s/hard",
                                       "%s/soft"};
    snprintf(b, sizeof b, "%s/hard", dir);
    assert_int_equal(link(a, b), 0);
    snprintf(b, sizeof b, "%s/soft", dir);
    assert_int_equal(symlink("a", b), 0);
    for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
        snprintf(b, sizeof b, same[k], dir);
        if (!pm_same_file(a, b)) fail_msg("%s and %s: not the same file", a, b);
    }
    /* not there yet: the same directory and name, however written */
    static const char *const later[][2] = {{"%s/new", "%s/./new"}, {"%s/new", "%s/sub/../new"},
                                           {"%s/new", "%s//new/"}, {"%s/sub/x", "%s/sub/./x"}};
    for (size_t k = 0; k < sizeof later / sizeof later[0]; k++) {
        char x[400], y[400];
        snprintf(x, sizeof x, later[k][0], dir);
        snprintf(y, sizeof y, later[k][1], dir);
        if (!pm_same_file(x, y)) fail_msg("%s and %s: not the same file", x, y);
    }
    /* a relative name is the current directory's */
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    snprintf(b, sizeof b, "%s/not-yet", dir);
    int rel_new = pm_same_file("not-yet", b), rel_old = pm_same_file("a", a);
    int rel_none = pm_same_file("not-yet", "sub/not-yet");
    assert_int_equal(chdir(cwd), 0);
    assert_true(rel_new && rel_old && !rel_none);
    /* different files: another name, one there and one not, another directory */
    snprintf(b, sizeof b, "%s/b", dir);
    assert_false(pm_same_file(a, b));
    snprintf(b, sizeof b, "%s/sub/a", dir);
    assert_false(pm_same_file(a, b));
    assert_false(pm_same_file(a, sub));
    assert_false(pm_same_file(a, NULL));
    assert_false(pm_same_file("", ""));
    assert_false(pm_same_file("/nonexistent-dir/x", "/nonexistent-dir/y"));
    assert_true(pm_same_file("/nonexistent-dir/x", "/nonexistent-dir/x"));
}

static void test_fnv_known_values(void **state) {
    (void)state;
    /* Published FNV-1a-64 test vectors. */
    assert_true(pm_fnv1a64(PM_FNV_OFFSET, "", 0) == 0xcbf29ce484222325ull);
    assert_true(pm_fnv1a64(PM_FNV_OFFSET, "a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(pm_fnv1a64(PM_FNV_OFFSET, "foobar", 6) == 0x85944171f73967e8ull);
    /* continuing from h hashes the concatenation */
    assert_true(pm_fnv1a64(pm_fnv1a64(PM_FNV_OFFSET, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
}

/* What pm_json_str writes reads back whole with a real JSON parser, every
 * byte from 1 to 255 (control bytes included, UTF-8 passing through). */
static void test_json_str_reads_back(void **state) {
    (void)state;
    const char *texts[] = {"", "plain", "a \"quoted\" \\path\\", "tab\there\nline\r\x01\x1f\x7f",
                           "caf\xc3\xa9 \xe2\x86\x92"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        assert_non_null(f);
        pm_json_str(f, texts[i]);
        assert_int_equal(fclose(f), 0);
        json_error_t je;
        json_t *v = json_loadb(buf, len, JSON_DECODE_ANY, &je);
        if (!v) fail_msg("'%s' is not JSON: %s", buf, je.text);
        assert_true(json_is_string(v));
        assert_string_equal(json_string_value(v), texts[i]);
        json_decref(v);
        free(buf);
    }
}

/* A float as the text it was given as: the expected texts are written by
 * hand (0.003f printed 0.00300000003 with %.9g); then 2000 floats spread
 * over 2^-40 .. 2^40 each read back exactly, and one digit fewer does not. */
static void test_float_text(void **state) {
    (void)state;
    static const struct {
        float x;
        const char *want;
    } known[] = {{3e-3f, "0.003"},    {1e-3f, "0.001"}, {0.1f, "0.1"},
                 {2.5e-4f, "0.00025"}, {1e-5f, "1e-05"}, {1.0f, "1"},
                 {16777217.0f, "16777216"}, {123456789.0f, "1.2345679e+08"},
                 {-0.5f, "-0.5"},      {0.0f, "0"}};
    char buf[PM_FLOAT_TEXT];
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        assert_string_equal(pm_float_text(buf, known[i].x), known[i].want);
    assert_string_equal(pm_float_text(buf, NAN), "nan");
    assert_string_equal(pm_float_text(buf, -INFINITY), "-inf");
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 2000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float x = ldexpf(1.0f + (float)(s >> 40) / 16777216.0f, (int)(s % 81) - 40);
        pm_float_text(buf, x);
        if (strtof(buf, NULL) != x) fail_msg("%.9g printed as %s", (double)x, buf);
        char fewer[400];
        int digits = 0, lead = 1; /* significant digits of the mantissa */
        for (const char *q = buf; *q && *q != 'e'; q++)
            if (*q >= '1' && *q <= '9') digits++, lead = 0;
            else if (*q == '0' && !lead) digits++;
        snprintf(fewer, sizeof fewer, "%.*g", digits - 1, (double)x);
        if (digits > 1 && strtof(fewer, NULL) == x)
            fail_msg("%.9g printed as %s, but %s reads back too", (double)x, buf, fewer);
    }
}

static void test_aligned_alloc_overflow(void **state) {
    (void)state;
    assert_null(pm_aligned_alloc(64, SIZE_MAX - 10));
    void *p = pm_aligned_alloc(64, 100);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    pm_free(p);
}

/* The VmFlags line of /proc/self/smaps for the mapping that holds p, or ""
 * (no such file: not Linux). */
static void vm_flags(const void *p, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return;
    char line[512];
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            snprintf(out, cap, "%s", line);
    }
    fclose(f);
}

/* pm_alloc_big: small blocks 64-byte aligned, big ones on 2 MiB marks and
 * advised as huge pages (the kernel's "hg" flag, wherever the kernel has
 * transparent huge pages), failed and counted by the hooks like the rest. */
static void test_alloc_big(void **state) {
    (void)state;
    void *s = pm_alloc_big(1000);
    assert_non_null(s);
    assert_int_equal((uintptr_t)s % 64, 0);
    pm_free(s);
    size_t n = ((size_t)9 << 20) + 12345;
    int64_t b0 = pm_alloc_bytes();
    char *p = pm_alloc_big(n);
    assert_non_null(p);
    assert_int_equal(pm_alloc_bytes() - b0, (int64_t)n); /* what was asked, not the rounding */
    assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
    memset(p, 1, n);
    char flags[512];
    vm_flags(p, flags, sizeof flags);
    struct stat st;
    if (stat("/sys/kernel/mm/transparent_hugepage", &st) == 0 && flags[0]) {
        if (!strstr(flags, " hg")) fail_msg("no huge-page advice on the block: %s", flags);
    } else {
        print_message("no transparent huge pages here: their advice is not checked\n");
    }
    pm_free(p);
    void *edge[2] = {pm_alloc_big(((size_t)4 << 20) - 1), pm_alloc_big((size_t)4 << 20)};
    assert_true(edge[0] && edge[1]);
    assert_int_equal((uintptr_t)edge[0] % 64, 0);
    assert_int_equal((uintptr_t)edge[1] % ((size_t)2 << 20), 0); /* from 4 MiB on */
    pm_free(edge[0]), pm_free(edge[1]);
    assert_null(pm_alloc_big(SIZE_MAX - 10));
    pm_alloc_fail_at(1, 0);
    assert_null(pm_alloc_big(n));
    assert_true(pm_alloc_failed());
    pm_alloc_fail_at(0, 0);
}

/* pm_double_text (every JSON number, issue 31): what it prints reads back
 * through strtod as the same double, bit for bit, for 200000 doubles drawn
 * from every exponent (subnormals, huge, negative); it is short where the
 * number is ("0.1", an integer's digits, -0 as "0"); JSON gets null for
 * what it cannot hold. */
static void test_double_text(void **state) {
    (void)state;
    char b[PM_DOUBLE_TEXT];
    uint64_t z = 42;
    for (int i = 0; i < 200000; i++) {
        z += 0x9E3779B97F4A7C15ull; /* splitmix64 */
        uint64_t r = z;
        r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
        r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
        r ^= r >> 31;
        double x;
        if (i % 3 == 0) x = (double)(int64_t)(r >> 20) * (i % 2 ? 1 : -1); /* integers */
        else memcpy(&x, &r, sizeof x);                                      /* any bits */
        if (!isfinite(x)) continue;
        pm_double_text(b, x);
        assert_true(strlen(b) < PM_DOUBLE_TEXT);
        double y = strtod(b, NULL);
        if (memcmp(&x, &y, sizeof x) && !(x == 0 && y == 0))
            fail_msg("%.17g printed as %s reads back as %.17g", x, b, y);
    }
    assert_string_equal(pm_double_text(b, 0.1), "0.1");
    assert_string_equal(pm_double_text(b, 4959), "4959");
    assert_string_equal(pm_double_text(b, -0.0), "0");
    assert_string_equal(pm_double_text(b, 1.0 / 3), "0.3333333333333333"); /* Python repr */
    assert_string_equal(pm_double_text(b, 0.1 + 0.2), "0.30000000000000004");
    assert_string_equal(pm_double_text(b, NAN), "nan");
    assert_string_equal(pm_json_text(b, NAN), "null");
    assert_string_equal(pm_json_text(b, -INFINITY), "null");
    assert_string_equal(PM_JSON_NUM(2.5), "2.5");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_hook_fails_exactly_the_nth),
        cmocka_unit_test(test_read_stops_at_the_limit),
        cmocka_unit_test(test_write_is_all_or_nothing),
        cmocka_unit_test(test_writable_check),
        cmocka_unit_test(test_symlink_and_concurrent_writers),
        cmocka_unit_test(test_users_files_kept),
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_same_file),
        cmocka_unit_test(test_aligned_alloc_overflow),
        cmocka_unit_test(test_alloc_big),
        cmocka_unit_test(test_fnv_known_values),
        cmocka_unit_test(test_json_str_reads_back),
        cmocka_unit_test(test_float_text),
        cmocka_unit_test(test_double_text),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
