/* tokenizer_none.c: pm_tokenizer.h when pipemem is built without
 * SentencePiece (libsentencepiece-dev missing): every call says so. */
#include "pipemem/pm_tokenizer.h"
#include "internal.h"

static pm_status none(pm_err *err) {
    return pm_errf(err, PM_ERR_ARG, "this pipemem was built without SentencePiece; install "
                   "libsentencepiece-dev and rebuild for subword tokenizers");
}

int pm_tokenizer_available(void) { return 0; }
pm_status pm_tokenizer_load(pm_tokenizer **out, const void *model, size_t len, pm_err *err) {
    (void)model, (void)len;
    *out = NULL;
    return none(err);
}
pm_status pm_tokenizer_load_file(pm_tokenizer **out, const char *path, pm_err *err) {
    (void)path;
    *out = NULL;
    return none(err);
}
uint32_t pm_tokenizer_vocab(const pm_tokenizer *t) { return t ? 0 : 0; }
uint64_t pm_tokenizer_sum(const pm_tokenizer *t) { return t ? 0 : 0; }
const void *pm_tokenizer_model(const pm_tokenizer *t, size_t *len) {
    (void)t;
    *len = 0;
    return NULL;
}
pm_status pm_tokenizer_encode(const pm_tokenizer *t, const char *text, size_t len, uint32_t **ids,
                              size_t *n, pm_err *err) {
    (void)t, (void)text, (void)len;
    *ids = NULL, *n = 0;
    return none(err);
}
pm_status pm_tokenizer_decode(const pm_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                              size_t *len, pm_err *err) {
    (void)t, (void)ids, (void)n;
    *text = NULL, *len = 0;
    return none(err);
}
void pm_tokenizer_free(pm_tokenizer *t) { (void)t; }
pm_status pm_tokenizer_train(const char *const *files, int nfiles, int vocab, const char *path,
                             pm_err *err) {
    (void)files, (void)nfiles, (void)vocab, (void)path;
    return none(err);
}
