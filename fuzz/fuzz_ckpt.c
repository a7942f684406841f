/* fuzz_ckpt.c: libFuzzer target for the checkpoint readers (ckpt.c) through
 * the file API: the header check (pm_ckpt_info_read, which `--resume` and
 * `sample` run first), the parameter load (pm_ckpt_load_params), the
 * tokenizer load, and the readers in parts (every slab read as two ranges
 * cut where the input's last bytes say, and whole, then pm_ckpt_check_sums).
 *
 * Beyond the sanitizers: the readers agree (the parameter and tokenizer
 * loads accept only files the header check accepts; once it accepts, the
 * parameter load accepts exactly when the parameters' checksum holds, and a
 * file of version 1 to 3, verified whole, passes every reader), the two
 * parts of a slab add up to the whole slab's checksum and read the same
 * floats as the parameter load, an accepted header describes a valid model
 * whose parameter count is the one the model computes, and a rejection comes
 * with a one-line message naming the file. A violation aborts.
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
#include "model/passes.h"
#include "train/ckpt.h"

static void check_rejection(pm_status st, const pm_err *err, const char *path) {
    if (st == PM_OK) return;
    if (!strstr(err->msg, path) || strchr(err->msg, '\n')) abort();
}

/* Reads every slab of an accepted file in two ranges cut at `cut` (the
 * parameters into params) and whole; the parts must add up to the whole.
 * Fills sums with the slabs' checksums as read. */
static void read_in_parts(const char *path, const pm_ckpt_info *info, size_t cut, float *params,
                          uint64_t sums[PM_CKPT_SLABS]) {
    size_t n = info->n_params;
    cut %= n + 1;
    pm_err err = {{0}};
    for (int s = 0; s < PM_CKPT_SLABS; s++) {
        uint64_t a, b;
        float *dst = s == PM_CKPT_PARAMS ? params : NULL;
        if (pm_ckpt_read_part(path, info, s, 0, dst, cut, &a, &err) ||
            pm_ckpt_read_part(path, info, s, cut, dst ? dst + cut : NULL, n - cut, &b, &err) ||
            pm_ckpt_read_part(path, info, s, 0, NULL, n, &sums[s], &err))
            abort(); /* an accepted file is whole: its ranges read */
        if (a + b != sums[s]) abort();
    }
}

/* The readers after the header check accepted the file. */
static void check_accepted(const char *path, const pm_ckpt_info *info, pm_status st_params,
                           const pm_ckpt_info *info2, const float *params, size_t cut) {
    if (pm_gpt_config_check(&info->cfg.model, NULL) != PM_OK) abort();
    if (info->n_params != pm_gpt_num_params(&info->cfg.model)) abort();
    float *parts = pm_malloc(info->n_params ? info->n_params * sizeof(float) : 1);
    if (!parts) abort();
    uint64_t sums[PM_CKPT_SLABS];
    read_in_parts(path, info, cut, parts, sums);
    pm_err err = {{0}};
    pm_status st_p = pm_ckpt_check_sums(path, info, PM_CKPT_MASK(PM_CKPT_PARAMS), sums, &err);
    check_rejection(st_p, &err, path);
    pm_status st_all = pm_ckpt_check_sums(path, info, PM_CKPT_ALL, sums, &err);
    check_rejection(st_all, &err, path);
    if ((st_params == PM_OK) != (st_p == PM_OK)) abort();
    if (info->version < 4 && st_all != PM_OK) abort(); /* verified whole already */
    if (st_params == PM_OK) {
        if (info->n_params != info2->n_params || info->step != info2->step) abort();
        if (memcmp(parts, params, info->n_params * sizeof(float))) abort();
    }
    pm_free(parts);
    void *tok = NULL;
    size_t len = 0;
    if (pm_ckpt_load_tokenizer(path, &tok, &len, &err) || len != info->tok_len) abort();
    pm_free(tok);
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
    if (st2 == PM_OK && st != PM_OK) abort();
    size_t cut = size >= 2 ? (size_t)data[size - 1] << 8 | data[size - 2] : 0;
    if (st == PM_OK) {
        check_accepted(path, &info, st2, &info2, params, cut);
    } else {
        void *tok = NULL;
        size_t len;
        pm_status st3 = pm_ckpt_load_tokenizer(path, &tok, &len, &err);
        if (st3 == PM_OK) abort();
        check_rejection(st3, &err, path);
    }
    unlink(path);
    pm_free(params);
    return 0;
}
