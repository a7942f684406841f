/* pm_tokenizer.h: subword tokenizers: SentencePiece (Debian's
 * libsentencepiece) behind a C face. Built when the library is found;
 * otherwise every call fails with a line saying so.
 *
 * Models are trained to round-trip any text: identity normalization (no
 * Unicode folding), whitespace kept as it is, newlines as their own piece,
 * byte fallback for characters the model does not know. A model is held as
 * its serialized bytes, which data directories and checkpoints embed; its
 * FNV-1a-64 is the tokenizer's identity. */
#ifndef PM_TOKENIZER_H
#define PM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "pipemem/pm_util.h"

typedef struct pm_tokenizer pm_tokenizer;

/* From a model's serialized bytes (copied) or its file. */
pm_status pm_tokenizer_load(pm_tokenizer **out, const void *model, size_t len, pm_err *err);
pm_status pm_tokenizer_load_file(pm_tokenizer **out, const char *path, pm_err *err);
uint32_t pm_tokenizer_vocab(const pm_tokenizer *t);
/* Text to ids: *ids from pm_malloc (caller frees), *n of them. */
pm_status pm_tokenizer_encode(const pm_tokenizer *t, const char *text, size_t len, uint32_t **ids,
                              size_t *n, pm_err *err);
/* Ids to text: *text from pm_malloc, NUL-terminated, *len bytes. */
pm_status pm_tokenizer_decode(const pm_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                              size_t *len, pm_err *err);
void pm_tokenizer_free(pm_tokenizer *t);
/* Trains a model of `vocab` pieces on the files and writes it to path
 * (all-or-nothing). */
pm_status pm_tokenizer_train(const char *const *files, int nfiles, int vocab, const char *path,
                             pm_err *err);

#endif
