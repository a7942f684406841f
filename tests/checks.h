/* checks.h: test helpers that read pipemem's outputs back with real parsers
 * (Jansson for Chrome traces, libxml2 for SVG timelines) and compare what
 * they find with the schedule and the simulation or measured timeline the
 * output was written from.
 *
 * Each check returns 0 if the output holds, else -1 with one line saying
 * what is wrong in msg (cap bytes); a test asserts the 0 and prints msg:
 *   char msg[512];
 *   if (chk_trace(buf, n, &s, &sim, msg, sizeof msg)) fail_msg("%s", msg); */
#ifndef PM_TESTS_CHECKS_H
#define PM_TESTS_CHECKS_H

#include <stddef.h>

#include "pipemem/pm_sched.h"
#include "pipemem/pm_train.h"

/* A Chrome trace of schedule s: valid JSON whose traceEvents hold exactly one
 * complete ("X") event per pass, on pid 0 and tid = the pass's device, named
 * "<kind> mb<mb>" with args {stage, mb} of that pass, in each device's list
 * order, with dur >= 0 and no two events of one device overlapping; one
 * thread_name event per device. With sim (not NULL) every ts and dur equal the
 * simulation's start and end - start (to the writer's 12 digits). */
int chk_trace(const char *json, size_t len, const pm_sched *s, const pm_sim *sim, char *msg,
              size_t cap);

/* An SVG timeline of s: well-formed XML, an <svg> root holding one
 * <g class="dev" id="devD"> row per device in order, each with its background
 * <rect> then exactly one pass <rect> per pass of that device, inside the
 * row (same y), left to right without overlap, and with a <title> (when
 * present) naming the device, kind, stage and microbatch. With sim, each box
 * spans the pass's start..end on the row's time scale (the row's width is
 * the last end), to half a pixel. */
int chk_svg(const char *svg, size_t len, const pm_sched *s, const pm_sim *sim, char *msg,
            size_t cap);

/* The same for a file. */
int chk_trace_file(const char *path, const pm_sched *s, const pm_sim *sim, char *msg, size_t cap);
int chk_svg_file(const char *path, const pm_sched *s, const pm_sim *sim, char *msg, size_t cap);

/* `BIN sample --ckpt CKPT --prompt PROMPT -n N --seed SEED` (temperature 1):
 * exit 0 and stdout exactly PROMPT, N bytes, '\n', where the N bytes are the
 * ones this check draws itself from the checkpoint's parameters: the model's
 * next-byte probabilities over the last ctx bytes, one PCG32 draw each
 * (stream "sample"), the first byte whose running sum passes u * total. */
int chk_sample(const char *bin, const char *ckpt, const char *prompt, int n, int seed,
               char *msg, size_t cap);

/* Reads every byte of the checkpoint at path: its header (into info) and
 * each slab against its checksum; PM_OK, or the reader's error. */
pm_status chk_ckpt_whole(const char *path, pm_ckpt_info *info, pm_err *err);

/* How many temporaries of a writer of path exist (names of the form
 * PATH.tmp.PID.N.TAG, TAG 16 hex digits: pm_tmp_open's). */
int chk_tmp_count(const char *path);

/* `rm -rf DIR` (a test's own directory, at teardown): 0 if it went. */
int chk_rm_rf(const char *dir);

/* The numbers of the array `key` in the JSON summary of a `pipemem train
 * --json` run (the line of out that starts with {"steps"; parsed by
 * Jansson) into v (at most max); how many, or -1 (no summary, not valid
 * JSON, no such key, or not an array of numbers). */
int chk_json_array(const char *out, const char *key, double *v, int max);

/* Each device's planned bytes of `kind` ("parameters", "gradients",
 * "moments", "activations", "workspace", "transport" or "total") from that
 * summary's planned_bytes into v (at most max); how many devices, or -1. */
int chk_json_planned(const char *out, const char *kind, double *v, int max);

/* What the devices of a pipeline run (`train --pp ... --json`) allocated,
 * against their plan: each device's allocated_bytes is at least its
 * planned parameters, gradients, AdamW moments and activations, at most its
 * planned total plus 2% and 64 KiB of bookkeeping, and at most `whole` of
 * the whole model's 16 bytes per parameter; and the devices' planned
 * parameter bytes add up to 4 per parameter per replica (every layer on
 * one device of each replica). */
int chk_train_alloc(const char *out, double whole, char *msg, size_t cap);

#endif
