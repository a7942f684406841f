/* replay.c: a plain driver for the fuzz entry points, so the test suite can
 * replay the seed and regression inputs without libFuzzer.
 *
 *   replay_NAME DIR...
 *
 * Linked with one fuzz/fuzz_NAME.c, it feeds every regular file of every DIR
 * (missing directories are empty; names starting with '.' are skipped) to
 * LLVMFuzzerTestOneInput, each in a forked child so that one crashing input
 * neither hides the others nor the leak checker's verdict on them (under
 * ASan the child's exit runs LeakSanitizer). A child that exits non-zero or
 * dies by a signal fails its input, which is named on stdout. Closes with
 * one line "fuzz replay NAME: N inputs, N passed, N failed" (run_tests.sh
 * adds it to its totals); exits 1 if any input failed. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads path whole; NULL on error. An empty file gives a 1-byte buffer and
 * *n = 0 (libFuzzer passes empty inputs too). */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *more = realloc(buf, cap * 2);
        if (!more) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

/* Runs one input in a child; 1 if it passed. */
static int run_one(const char *path) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL %s: fork: %s\n", path, strerror(errno));
        return 0;
    }
    if (pid == 0) {
        size_t n = 0;
        uint8_t *data = slurp(path, &n);
        if (!data) {
            fprintf(stderr, "%s: cannot read: %s\n", path, strerror(errno));
            exit(2);
        }
        /* A copy of exactly n bytes, so ASan sees any read past the end. */
        uint8_t *exact = malloc(n ? n : 1);
        if (!exact) exit(2);
        memcpy(exact, data, n);
        free(data);
        LLVMFuzzerTestOneInput(exact, n);
        free(exact);
        exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
    if (WIFSIGNALED(st))
        printf("FAIL %s: killed by signal %d\n", path, WTERMSIG(st));
    else
        printf("FAIL %s: exit status %d\n", path, WEXITSTATUS(st));
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays the files of dir in name order; adds to *total and *failed. */
static void run_dir(const char *dir, int *total, int *failed) {
    DIR *d = opendir(dir);
    if (!d) return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **more = realloc(names, cap * sizeof *names);
            if (!more) break;
            names = more;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) break;
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            (*total)++;
            if (!run_one(names[i])) (*failed)++;
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    const char *name = strrchr(argv[0], '/');
    name = name ? name + 1 : argv[0];
    if (!strncmp(name, "replay_", 7)) name += 7;
    int total = 0, failed = 0;
    for (int i = 1; i < argc; i++) run_dir(argv[i], &total, &failed);
    printf("fuzz replay %s: %d inputs, %d passed, %d failed\n", name, total, total - failed,
           failed);
    return failed ? 1 : 0;
}
