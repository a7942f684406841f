/* fuzz_select.c: libFuzzer target for the text `pipemem select` reads: a
 * tasks file (space.c, through the file API as `--tasks FILE` reads it,
 * beside one value on the command line, which is the default of every line
 * that does not set it) and a task's record in a save directory
 * (pm_select_record_parse, record.c). Each input goes to both.
 *
 * Beyond the sanitizers' "no crash, no out-of-bounds access, no leak": a
 * tasks file that is accepted gives at least one task, each a
 * configuration train can run (pm_train_cfg_check) under a name no other
 * task has; a record that parses is exactly the line its fields print with
 * the FNV-1a-64 of that text; a refusal is one line. A violation aborts.
 *
 *   make fuzz
 *   build/fuzz/fuzz_select -max_total_time=120 build/fuzz/corpus/select fuzz/seeds/select
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_select.h"
#include "train/config.h"
#include "select/parts.h"

static void check_line(const pm_err *e) {
    if (!memchr(e->msg, 0, sizeof e->msg) || strchr(e->msg, '\n')) abort();
}

static void fz_tasks(const uint8_t *data, size_t size) {
    char path[] = "/tmp/pm_fuzz_tasks_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    close(fd);
    pm_sweep sw = {0};
    pm_err e;
    if (pm_sweep_set(&sw, PM_SWEEP_STEPS, "7", "--steps", &e)) abort();
    sw.tasks_file = path;
    pm_select_task *t;
    int n;
    pm_status st = pm_sweep_tasks(&sw, &t, &n, &e);
    unlink(path);
    if (st) {
        check_line(&e);
        return;
    }
    if (n < 1) abort();
    for (int i = 0; i < n; i++) {
        if (pm_train_cfg_check(&t[i].cfg, &e)) abort();
        for (int j = 0; j < i; j++)
            if (!strcmp(t[i].name, t[j].name)) abort();
        pm_select_task_free(&t[i]);
    }
    pm_free(t);
}

static void fz_record(const uint8_t *data, size_t size) {
    pm_select_record r;
    pm_err e;
    if (pm_select_record_parse((const char *)data, size, &r, &e)) {
        check_line(&e);
        return;
    }
    char want[PM_SELECT_RECORD_MAX + 64];
    int n = snprintf(want, sizeof want, "step %lld loss %.17g val_loss %.17g ckpt %016llx",
                     (long long)r.step, r.loss, r.val, (unsigned long long)r.ckpt);
    n += snprintf(want + n, sizeof want - (size_t)n, " sum %016llx\n",
                  (unsigned long long)pm_fnv1a64(PM_FNV_OFFSET, want, (size_t)n));
    if ((size_t)n != size || memcmp(want, data, size)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_tasks(data, size);
    fz_record(data, size);
    return 0;
}
