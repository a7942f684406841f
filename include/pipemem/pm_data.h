/* pm_data.h: tokens, token files, `prepare` and the batch loader.
 *
 * Tokenizers: bytes (one token per byte, vocabulary 256, decoding is the
 * identity) or a SentencePiece model (pm_tokenizer.h). Token ids are kept as
 * they are stored: 1, 2 or 4 bytes each, little-endian; pm_tok_at reads one.
 *
 * Token file, version 1 (bytes; what `prepare` writes without a tokenizer):
 *   offset  size  field
 *        0     8  magic "PMTOKENS"
 *        8     4  version (u32) = 1
 *       12     4  vocab (u32) = 256
 *       16     8  token count n (u64)
 *       24     8  FNV-1a-64 of the n token bytes (u64)
 *       32     n  tokens, one byte each
 * Version 2 (a tokenizer's ids):
 *        0     8  magic "PMTOKENS"
 *        8     4  version (u32) = 2
 *       12     4  vocab V (u32)
 *       16     8  token count n (u64)
 *       24     8  FNV-1a-64 of the n*w token bytes (u64)
 *       32     4  bytes per token w (u32): 2 when V <= 65536, else 4
 *       36     4  zero
 *       40     8  FNV-1a-64 of the tokenizer model (the data directory holds
 *                 it as tokenizer.model)
 *       48   n*w  tokens
 * llm.c's token files are read too: 256 int32 header (magic 20240520,
 * version 1, token count), then uint16 tokens of GPT-2's vocabulary 50257.
 * Every format must be exactly as long as its header says; every id must be
 * below the vocabulary (checked when read).
 *
 * `prepare` streams its inputs (regular files, sizes taken first): the first
 * 90% of the bytes (rounded down) become DIR/train.bin and the last 10%
 * DIR/val.bin, so the validation text is never seen in training; with a
 * tokenizer each part is encoded in chunks that end at a newline.
 *
 * Files are mapped (mmap), not read: a corpus larger than memory trains.
 *
 * Loader: a batch is B windows of ctx+1 consecutive tokens (inputs are the
 * first ctx, targets the last ctx). Window number i (counting from 0 over the
 * loader's life) starts at splitmix64(seed ^ splitmix64(i)) mod (n - ctx)
 * (SplitMix64, one step of a counter-based generator), so the positions
 * depend only on (seed, i): saving the counter is enough to resume exactly.
 * The trainers draw their batches through it. */
#ifndef PM_DATA_H
#define PM_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_util.h"

#define PM_TOK_MAGIC "PMTOKENS"
#define PM_TOK_VERSION 2u  /* the newest version read and written */
#define PM_TOK_HEADER 32   /* version 1 */
#define PM_TOK_HEADER2 48  /* version 2 */
#define PM_TOK_VOCAB 256   /* bytes */
#define PM_LLMC_MAGIC 20240520
#define PM_LLMC_HEADER 1024
#define PM_LLMC_VOCAB 50257
#define PM_DATA_VAL_PERCENT 10

/* Token data: a mapped file (pm_tokens_read) or borrowed memory. */
typedef struct {
    const uint8_t *tok;  /* n tokens of `width` bytes, little-endian */
    size_t n;            /* token count */
    int width;           /* 1, 2 or 4 */
    uint32_t vocab;      /* every id is below it */
    uint64_t tokenizer;  /* FNV-1a-64 of the tokenizer model; 0: bytes or llm.c */
    void *map;           /* the mapping, owned (NULL when borrowed) */
    size_t map_len;
} pm_tokens;

/* Borrowed bytes as tokens (vocabulary 256), for an initializer. */
#define PM_TOKENS_BYTES(p, len) \
    {.tok = (const uint8_t *)(p), .n = (len), .width = 1, .vocab = PM_TOK_VOCAB}

static inline uint32_t pm_tok_at(const pm_tokens *t, size_t i) {
    const uint8_t *p = t->tok + i * (size_t)t->width;
    switch (t->width) {
    case 1: return p[0];
    case 2: return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    default: return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
}

/* Maps and checks a token file of any of the formats above: magic, version,
 * vocab, width, size, checksum, every id below the vocabulary. On error *t
 * is zeroed and nothing is held. */
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

struct pm_tokenizer; /* pm_tokenizer.h */

/* Streams nfiles regular text files into dir/train.bin and dir/val.bin (dir
 * is created if missing): bytes, or with tok (not NULL) its ids in version-2
 * files, its model copied to dir/tokenizer.model. chunk is the read size in
 * bytes (0: 1 MiB). Fails on no input bytes, or on too few to give both
 * splits at least 2 tokens. */
pm_status pm_data_prepare(const char *const *files, int nfiles, const char *dir,
                          const struct pm_tokenizer *tok, size_t chunk, pm_prepare_stats *st,
                          pm_err *err);

/* Batch loader over borrowed tokens. */
typedef struct {
    pm_tokens t;        /* a view of the caller's tokens (the mapping stays theirs) */
    size_t n;           /* token count */
    int ctx;            /* context length T; windows are T+1 tokens */
    uint64_t seed;      /* position seed */
    uint64_t next;      /* windows drawn so far: the resumable position */
} pm_loader;

/* Fails (one line naming `what`, e.g. "data/train.bin") if the data holds
 * fewer than ctx+1 tokens. */
pm_status pm_loader_init(pm_loader *ld, const pm_tokens *t, int ctx, uint64_t seed,
                         const char *what, pm_err *err);

#endif
