/* fuzz_ckpt.c: libFuzzer target for the checkpoint readers (ckpt.c) through
 * the file API: the header check (pm_ckpt_info_read, which `--resume` and
 * `sample` run first) and the parameter load (pm_ckpt_load_params).
 *
 * Beyond the sanitizers: the two readers agree (a file one accepts the other
 * accepts, with the same header), an accepted header describes a valid
 * model whose parameter count is the one the model computes, and a rejection
 * comes with a one-line message naming the file. A violation aborts.
 *
 *   make fuzz
 *   build/fuzz/fuzz_ckpt -max_total_time=120 build/fuzz/corpus/ckpt fuzz/seeds/ckpt
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipemem/pm_train.h"

static void check_rejection(pm_status st, const pm_err *err, const char *path) {
    if (st == PM_OK) return;
    if (!strstr(err->msg, path) || strchr(err->msg, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pm_fuzz_ckpt_%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f)) abort();
    pm_ckpt_info info, info2;
    pm_err err = {{0}}, err2 = {{0}};
    pm_status st = pm_ckpt_info_read(path, &info, &err);
    check_rejection(st, &err, path);
    float *params = NULL;
    pm_status st2 = pm_ckpt_load_params(path, &info2, &params, &err2);
    check_rejection(st2, &err2, path);
    unlink(path);
    if ((st == PM_OK) != (st2 == PM_OK)) abort();
    if (st == PM_OK) {
        if (info.n_params != info2.n_params || info.step != info2.step) abort();
        if (pm_gpt_config_check(&info.cfg.model, NULL) != PM_OK) abort();
        if (info.n_params != pm_gpt_num_params(&info.cfg.model)) abort();
        volatile float sum = 0; /* touch every parameter: ASan checks the size */
        for (size_t i = 0; i < info.n_params; i++) sum += params[i];
        (void)sum;
    }
    pm_free(params);
    return 0;
}
