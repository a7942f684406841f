/* ckpt.h: a checkpoint written and read in parts, and a trainer saved whole
 * (ckpt.c), private to the library: the pipeline's devices (src/runtime)
 * and model selection's records (src/select) use them; a user saves and
 * loads through pm_pipe_save, pm_pipe_load, pm_train_loop and pm_ckpt_load
 * (pm_train.h has the format).
 *
 * Writing in parts (a pipeline's devices each write their own layers' ranges,
 * with ZeRO-1 their own pieces of the moments): the root pm_ckpt_create()s a
 * temporary (pm_tmp_open) the size of the whole file, all zero (its header
 * is not valid until the commit, so a crash never leaves a file that reads
 * as a checkpoint); every writer, a thread or a process on any machine sharing the
 * file system, pm_ckpt_write_part()s its ranges (pwrite at their offsets,
 * fsync) and gets each range's part of its slab's checksum; once every writer
 * succeeded the root adds the parts and pm_ckpt_commit()s (header, tokenizer,
 * checksums, fsync, rename over PATH, directory fsync), or after any failure
 * pm_ckpt_abandon()s. PATH holds its old content or the whole new checkpoint,
 * never a mix. pm_ckpt_save is these steps for a whole trainer.
 *
 * Reading in parts: pm_ckpt_info_read() verifies the header, the tokenizer and
 * the checksums' FNV (version 4; cheap) or the whole file (versions 1 to 3);
 * then each reader pm_ckpt_read_part()s its ranges, the caller adds the parts
 * and pm_ckpt_check_sums() compares the slabs read whole. pm_ckpt_load is
 * these steps for a whole trainer. */
#ifndef PM_TRAIN_CKPT_H
#define PM_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_train.h"

/* A trainer's metadata (tok_model borrowed from it). */
pm_ckpt_meta pm_ckpt_meta_of(const pm_trainer *t);
/* Writes t's checkpoint to path (create, three write_parts, commit): on
 * error path is unchanged. */
pm_status pm_ckpt_save(const pm_trainer *t, const char *path, pm_err *err);

/* Starts a checkpoint of meta at path: checks the path (pm_ckpt_check_path),
 * creates the temporary sized to the whole file and returns its name in
 * *tmp (pm_malloc'd: the caller pm_frees it after commit or abandon). On
 * error nothing was created and *tmp is NULL. */
pm_status pm_ckpt_create(const char *path, const pm_ckpt_meta *meta, char **tmp, pm_err *err);

/* Writes x[0 .. count) as elements first .. first+count-1 of slab (a
 * PM_CKPT_* slab) of a checkpoint of n_params floats per slab into the
 * temporary tmp, fsyncs it, and sets *sum to the range's part of the slab's
 * checksum. Safe to call concurrently for disjoint ranges, from threads or
 * processes. Errors (one line naming tmp) leave *sum unset; the root must
 * then abandon. */
pm_status pm_ckpt_write_part(const char *tmp, size_t n_params, int slab, size_t first,
                             const float *x, size_t count, uint64_t *sum, pm_err *err);

/* Finishes the checkpoint once every range of every slab was written:
 * meta must be the one given to create, sums[s] the sum of slab s's parts.
 * Writes the header, tokenizer and checksums, fsyncs, renames tmp over path
 * (inside the guard, pm_ckpt_set_guard, which may refuse it) and fsyncs the
 * directory. On error tmp is removed and path is unchanged (unless only the
 * directory's fsync failed: the message says so). */
pm_status pm_ckpt_commit(const char *path, const char *tmp, const pm_ckpt_meta *meta,
                         const uint64_t sums[PM_CKPT_SLABS], pm_err *err);

/* Removes the temporary (after a writer failed); path stays as it was.
 * NULL is a no-op. Does not free tmp. */
void pm_ckpt_abandon(const char *tmp);

/* Whether a checkpoint's run is this one: the model config, batch,
 * microbatches, seed, lr, weight decay and the train data's identity (0 on
 * either side: unknown, not compared) must be equal, else PM_ERR_ARG naming
 * the field, both values and the option to pass. The total steps may differ (the
 * cosine then spans the new total). */
pm_status pm_ckpt_check_run(const char *path, const pm_ckpt_info *info, const pm_train_cfg *cfg,
                            uint64_t data_id, pm_err *err);

/* Whether continuing a checkpoint's run keeps its learning-rate schedule
 * and AdamW settings: opt.steps, opt.warmup, the cosine's floor, betas, eps
 * and clipping must be cfg's, else PM_ERR_ARG naming each field that
 * differs, what it was and what cfg has. */
pm_status pm_ckpt_check_schedule(const char *path, const pm_ckpt_info *info,
                                 const pm_train_cfg *cfg, pm_err *err);

/* Reads elements first .. first+count-1 of slab from path (info from
 * pm_ckpt_info_read) into dst, or only hashes them with dst NULL (to verify
 * before anything is overwritten), and sets *sum to the range's part of the
 * slab's checksum. Concurrent readers are fine. */
pm_status pm_ckpt_read_part(const char *path, const pm_ckpt_info *info, int slab, size_t first,
                            float *dst, size_t count, uint64_t *sum, pm_err *err);

/* Compares sums[s] (the parts of every reader of slab s, added) with the
 * checkpoint's for the slabs in mask (PM_CKPT_MASK bits: only slabs read
 * whole can be checked). A mismatch names the slab: corruption (version 4),
 * or a file that changed since it was verified (1 to 3). */
pm_status pm_ckpt_check_sums(const char *path, const pm_ckpt_info *info, unsigned mask,
                             const uint64_t sums[PM_CKPT_SLABS], pm_err *err);

#endif
