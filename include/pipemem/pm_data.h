/* pm_data.h: byte-level tokens, token files and the batch loader.
 *
 * Tokenizer: one token per byte of the text, vocabulary 256. Decoding is the
 * identity, so any file round-trips exactly.
 *
 * Token file (little-endian), version 1:
 *   offset  size  field
 *        0     8  magic "PMTOKENS"
 *        8     4  version (u32) = PM_TOK_VERSION
 *       12     4  vocab (u32) = 256
 *       16     8  token count n (u64)
 *       24     8  FNV-1a-64 of the n token bytes (u64)
 *       32     n  tokens, one byte each
 * The file is exactly 32 + n bytes long; anything else is rejected.
 *
 * `prepare` concatenates the input files in order; the first 90% of the bytes
 * (rounded down) become DIR/train.bin and the last 10% DIR/val.bin, so the
 * validation text is never seen in training.
 *
 * Loader: a batch is B windows of ctx+1 consecutive tokens (inputs are the
 * first ctx, targets the last ctx). Window number i (counting from 0 over the
 * loader's life) starts at splitmix64(seed ^ splitmix64(i)) mod (n - ctx), so
 * the positions depend only on (seed, i): saving the counter is enough to
 * resume exactly. */
#ifndef PM_DATA_H
#define PM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_util.h"

#define PM_TOK_MAGIC "PMTOKENS"
#define PM_TOK_VERSION 1u
#define PM_TOK_HEADER 32
#define PM_TOK_VOCAB 256
#define PM_DATA_VAL_PERCENT 10

/* FNV-1a 64-bit hash of n bytes, continuing from h (start with
 * PM_FNV_OFFSET). Used by every pipemem binary format as its checksum. */
#define PM_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t pm_fnv1a64(uint64_t h, const void *p, size_t n);

/* SplitMix64: one step of a counter-based generator (deterministic, tiny). */
uint64_t pm_splitmix64(uint64_t x);

/* A token file in memory. tok is owned (malloc'd). */
typedef struct {
    uint8_t *tok; /* (n) tokens */
    size_t n;     /* token count */
} pm_tokens;

/* Writes n tokens to path with the header above. */
pm_status pm_tokens_write(const char *path, const uint8_t *tok, size_t n, pm_err *err);
/* Reads and checks a token file: magic, version, vocab, size, checksum. On
 * error *t is zeroed and nothing is allocated. */
pm_status pm_tokens_read(pm_tokens *t, const char *path, pm_err *err);
/* What a checkpoint records of the data it was trained on: FNV-1a-64 of the
 * token count (u64, little-endian) followed by the tokens; never 0. */
uint64_t pm_tokens_identity(const pm_tokens *t);
void pm_tokens_free(pm_tokens *t);

/* What prepare did. */
typedef struct {
    size_t total;    /* bytes read over all inputs */
    size_t n_train;  /* tokens in train.bin */
    size_t n_val;    /* tokens in val.bin */
} pm_prepare_stats;

/* Reads nfiles text files, writes dir/train.bin and dir/val.bin (dir is
 * created if missing). Fails on no input bytes, or on too few bytes to give
 * both splits at least 2 tokens. */
pm_status pm_data_prepare(const char *const *files, int nfiles, const char *dir,
                          pm_prepare_stats *st, pm_err *err);

/* Batch loader over a borrowed token array. */
typedef struct {
    const uint8_t *tok; /* borrowed tokens */
    size_t n;           /* token count */
    int ctx;            /* context length T; windows are T+1 tokens */
    uint64_t seed;      /* position seed */
    uint64_t next;      /* windows drawn so far: the resumable position */
} pm_loader;

/* Fails (one line naming `what`, e.g. "data/train.bin") if the data holds
 * fewer than ctx+1 tokens. */
pm_status pm_loader_init(pm_loader *ld, const pm_tokens *t, int ctx, uint64_t seed,
                         const char *what, pm_err *err);
/* Fills inputs (B, T) and targets (B, T) with the next B windows. */
void pm_loader_next(pm_loader *ld, int B, int32_t *inputs, int32_t *targets);
/* Offset of window i (exposed for tests). */
size_t pm_loader_pos(const pm_loader *ld, uint64_t i);

#endif
