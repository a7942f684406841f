/* internal.h: private to src/data (and its tests): token files written as
 * they are produced (tokfile.c), and what `prepare` asks of a tokenizer
 * (spm.cc, or tokenizer_none.c without SentencePiece). */
#ifndef PM_DATA_INTERNAL_H
#define PM_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_data.h"
#include "pipemem/pm_tokenizer.h"

/* Writes n bytes as a version-1 token file. */
pm_status pm_tokens_write(const char *path, const uint8_t *tok, size_t n, pm_err *err);
/* Writes n ids as a version-2 token file (2 bytes each if vocab <= 65536). */
pm_status pm_tokens_write_ids(const char *path, const uint32_t *ids, size_t n, uint32_t vocab,
                              uint64_t tokenizer, pm_err *err);

/* A token file written as it is produced: the header goes last (seek), so
 * any number of tokens streams through. version 1 takes ids < 256. */
typedef struct {
    pm_wfile w;
    const char *path;
    int version, width;
    uint32_t vocab;
    uint64_t tokenizer, n, sum;
} pm_tokwriter;
pm_status pm_tokwriter_open(pm_tokwriter *tw, const char *path, int version, uint32_t vocab,
                            uint64_t tokenizer, pm_err *err);
pm_status pm_tokwriter_put(pm_tokwriter *tw, const uint32_t *ids, size_t n, pm_err *err);
pm_status pm_tokwriter_put_bytes(pm_tokwriter *tw, const uint8_t *b, size_t n, pm_err *err);
/* Writes the header and commits (all-or-nothing, pm_wfile); abort drops it. */
pm_status pm_tokwriter_close(pm_tokwriter *tw, pm_err *err);
void pm_tokwriter_abort(pm_tokwriter *tw);

/* 1 if SentencePiece was built in (else every pm_tokenizer.h call fails). */
int pm_tokenizer_available(void);
/* The tokenizer's identity: FNV-1a-64 of its model's bytes. */
uint64_t pm_tokenizer_sum(const pm_tokenizer *t);
/* The model's bytes (owned by t). */
const void *pm_tokenizer_model(const pm_tokenizer *t, size_t *len);

#endif
