/* fuzz_tasks.c: libFuzzer target for the parsers of `pipemem select`'s
 * tasks (select_tasks.c): a key's value on the command line (a list
 * v1,v2,..., a range lo..hi or log:lo..hi) and a tasks file (one task per
 * line, key=value pairs). The input is the file; up to its first NUL byte,
 * it is also the value of every key (a command line holds no NUL).
 *
 * Beyond the sanitizers' "no crash, no out-of-bounds access, no leak": a
 * value that parses is a range with finite ends split by two dots (not
 * three), the low one below the high one (above 0 for log:), or a list of
 * 1 to SEL_MAX_VALUES finite values,
 * integers for the integer keys; a tasks file that reads holds no NUL byte
 * and gives 1 to SEL_MAX_TASKS tasks, each a model (pm_gpt_config_check)
 * whose batch its microbatches divide. A violation aborts. The CLI's error
 * lines are held back (pm_cli_set_rank's quiet), not printed.
 *
 *   make fuzz
 *   build/fuzz/fuzz_tasks -max_total_time=120 build/fuzz/corpus/tasks fuzz/seeds/tasks
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/select_tasks.h"

static void check_value(int k, const char *val) {
    static sel_space sp;
    memset(&sp, 0, sizeof sp);
    if (sel_parse_key(&sp, k, val)) return;
    int real = k == SEL_K_LR || k == SEL_K_WD;
    if (sp.kind[k] != SEL_LIST) { /* "lo..hi": two dots, not three (1e-4...1e-2) */
        if (strstr(val, "...") || !isfinite(sp.lo[k]) || !isfinite(sp.hi[k]) ||
            !(sp.lo[k] < sp.hi[k]))
            abort();
        if (sp.kind[k] == SEL_LOG && !(sp.lo[k] > 0)) abort();
        return;
    }
    if (sp.n[k] < 1 || sp.n[k] > SEL_MAX_VALUES) abort();
    for (int i = 0; i < sp.n[k]; i++)
        if (!isfinite(sp.v[k][i]) || (!real && sp.v[k][i] != floor(sp.v[k][i]))) abort();
}

static void check_file(const uint8_t *data, size_t size) {
    static pm_select_task t[SEL_MAX_TASKS];
    char path[64];
    snprintf(path, sizeof path, "/tmp/pm_fuzz_tasks_%d.txt", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) abort();
    int n = 0, bad = sel_read_tasks(path, t, &n);
    unlink(path);
    if (!bad && (memchr(data, 0, size) || n < 1 || n > SEL_MAX_TASKS)) abort();
    for (int i = 0; i < n; i++) {
        pm_err err;
        if (!bad && (pm_gpt_config_check(&t[i].cfg.model, &err) || t[i].cfg.micro < 1 ||
                     t[i].cfg.batch % t[i].cfg.micro))
            abort();
        pm_select_task_free(&t[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pm_cli_set_rank(0, 1); /* quiet: error lines are held, not printed */
    char val[4096];
    size_t n = strnlen((const char *)data, size < sizeof val - 1 ? size : sizeof val - 1);
    memcpy(val, data, n);
    val[n] = 0;
    for (int k = 0; k < SEL_K_COUNT; k++) check_value(k, val);
    check_file(data, size);
    return 0;
}
