/* fuzz_tasks.c: libFuzzer target for the parsers of a sweep's tasks
 * (src/select/space.c, pm_sweep_set and pm_sweep_tasks): a key's value (a
 * list v1,v2,..., a range lo..hi or log:lo..hi) and a tasks file (one task
 * per line, key=value pairs). The input is the file; up to its first NUL
 * byte, it is also the value of every key (a command line holds no NUL).
 *
 * Beyond the sanitizers' "no crash, no out-of-bounds access, no leak": a
 * value that parses is a range with finite ends split by two dots (not
 * three), the low one below the high one (above 0 for log:), or a list of
 * 1 to PM_SWEEP_MAX_VALUES finite values, integers for the integer keys; a
 * tasks file that reads holds no NUL byte and gives 1 to PM_SWEEP_MAX_TASKS
 * tasks, each a valid training configuration (pm_train_cfg_check). A
 * violation aborts.
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

#include "pipemem/pm_select.h"
#include "pipemem/pm_train.h"
#include "train/config.h"
#include "select/parts.h"

static void check_value(int k, const char *val) {
    static pm_sweep sw;
    memset(&sw, 0, sizeof sw);
    pm_err err;
    if (pm_sweep_set(&sw, (pm_sweep_key)k, val, NULL, &err)) return;
    int real = k == PM_SWEEP_LR || k == PM_SWEEP_WEIGHT_DECAY;
    if (sw.kind[k] != PM_SWEEP_LIST) { /* "lo..hi": two dots, not three (1e-4...1e-2) */
        if (strstr(val, "...") || !isfinite(sw.lo[k]) || !isfinite(sw.hi[k]) ||
            !(sw.lo[k] < sw.hi[k]))
            abort();
        if (sw.kind[k] == PM_SWEEP_LOG && !(sw.lo[k] > 0)) abort();
        return;
    }
    if (sw.n[k] < 1 || sw.n[k] > PM_SWEEP_MAX_VALUES) abort();
    for (int i = 0; i < sw.n[k]; i++)
        if (!isfinite(sw.v[k][i]) || (!real && sw.v[k][i] != floor(sw.v[k][i]))) abort();
}

static void check_file(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pm_fuzz_tasks_%d.txt", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) abort();
    pm_sweep sw;
    memset(&sw, 0, sizeof sw);
    sw.tasks_file = path;
    pm_select_task *t = NULL;
    int n = 0;
    pm_err err;
    int bad = pm_sweep_tasks(&sw, &t, &n, &err) != PM_OK;
    unlink(path);
    if (!bad && (memchr(data, 0, size) || n < 1 || n > PM_SWEEP_MAX_TASKS)) abort();
    for (int i = 0; i < n; i++) {
        if (pm_train_cfg_check(&t[i].cfg, &err)) abort();
        pm_select_task_free(&t[i]);
    }
    pm_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char val[4096];
    size_t n = strnlen((const char *)data, size < sizeof val - 1 ? size : sizeof val - 1);
    memcpy(val, data, n);
    val[n] = 0;
    for (int k = 0; k < PM_SWEEP_KEYS; k++) check_value(k, val);
    check_file(data, size);
    return 0;
}
