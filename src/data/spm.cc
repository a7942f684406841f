// spm.cc: pm_tokenizer.h over SentencePiece, the only C++ in pipemem (its
// API is C++). Everything crossing into C is plain data; no exception
// leaves this file (each entry point catches and turns it into a pm_err).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "pipemem/pm_data.h"
#include "pipemem/pm_tokenizer.h"
#include "util/file.h"
#include "internal.h"
}

struct pm_tokenizer {
    sentencepiece::SentencePieceProcessor sp;
    std::string model;
    uint64_t sum;
};

extern "C" int pm_tokenizer_available(void) { return 1; }

extern "C" pm_status pm_tokenizer_load(pm_tokenizer **out, const void *model, size_t len,
                                       pm_err *err) {
    *out = nullptr;
    if (!model && len) return pm_errf(err, PM_ERR_ARG, "the model is NULL (%zu bytes said)", len);
    try {
        pm_tokenizer *t = new pm_tokenizer;
        t->model.assign(static_cast<const char *>(model), len);
        auto st = t->sp.LoadFromSerializedProto(t->model);
        if (!st.ok()) {
            delete t;
            return pm_errf(err, PM_ERR_FORMAT, "not a SentencePiece model: %s", st.ToString().c_str());
        }
        t->sum = pm_fnv1a64(PM_FNV_OFFSET, t->model.data(), t->model.size());
        *out = t;
        return PM_OK;
    } catch (const std::bad_alloc &) {
        return pm_errf(err, PM_ERR_NOMEM, "out of memory loading a tokenizer");
    }
}

extern "C" pm_status pm_tokenizer_load_file(pm_tokenizer **out, const char *path, pm_err *err) {
    char *buf;
    size_t len;
    *out = nullptr;
    pm_status st = pm_read_file(path, PM_TEXT_MAX, &buf, &len, err);
    if (st) return st;
    st = pm_tokenizer_load(out, buf, len, err);
    pm_free(buf);
    if (st) {
        pm_err e = *err;
        return pm_errf(err, st, "%s: %s", path, e.msg);
    }
    return PM_OK;
}

extern "C" uint32_t pm_tokenizer_vocab(const pm_tokenizer *t) {
    return static_cast<uint32_t>(t->sp.GetPieceSize());
}
extern "C" uint64_t pm_tokenizer_sum(const pm_tokenizer *t) { return t->sum; }
extern "C" const void *pm_tokenizer_model(const pm_tokenizer *t, size_t *len) {
    *len = t->model.size();
    return t->model.data();
}
extern "C" void pm_tokenizer_free(pm_tokenizer *t) { delete t; }

extern "C" pm_status pm_tokenizer_encode(const pm_tokenizer *t, const char *text, size_t len,
                                         uint32_t **ids, size_t *n, pm_err *err) {
    *ids = nullptr, *n = 0;
    if (!text && len) return pm_errf(err, PM_ERR_ARG, "the text is NULL (%zu bytes said)", len);
    try {
        std::vector<int> v;
        auto st = t->sp.Encode(absl::string_view(text, len), &v);
        if (!st.ok()) return pm_errf(err, PM_ERR_ARG, "encoding failed: %s", st.ToString().c_str());
        uint32_t *out = static_cast<uint32_t *>(pm_malloc((v.size() ? v.size() : 1) * sizeof *out));
        if (!out) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu token ids", v.size());
        for (size_t i = 0; i < v.size(); i++) out[i] = static_cast<uint32_t>(v[i]);
        *ids = out, *n = v.size();
        return PM_OK;
    } catch (const std::bad_alloc &) {
        return pm_errf(err, PM_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    }
}

extern "C" pm_status pm_tokenizer_decode(const pm_tokenizer *t, const uint32_t *ids, size_t n,
                                         char **text, size_t *len, pm_err *err) {
    *text = nullptr, *len = 0;
    if (!ids && n) return pm_errf(err, PM_ERR_ARG, "the ids are NULL (%zu said)", n);
    try {
        std::vector<int> v(n);
        int size = t->sp.GetPieceSize();
        for (size_t i = 0; i < n; i++) {
            if (ids[i] >= static_cast<uint32_t>(size))
                return pm_errf(err, PM_ERR_ARG, "token %u is outside the tokenizer's %d pieces",
                               ids[i], size);
            v[i] = static_cast<int>(ids[i]);
        }
        std::string s;
        auto st = t->sp.Decode(v, &s);
        if (!st.ok()) return pm_errf(err, PM_ERR_ARG, "decoding failed: %s", st.ToString().c_str());
        char *out = static_cast<char *>(pm_malloc(s.size() + 1));
        if (!out) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %zu bytes", s.size());
        memcpy(out, s.data(), s.size());
        out[s.size()] = 0;
        *text = out, *len = s.size();
        return PM_OK;
    } catch (const std::bad_alloc &) {
        return pm_errf(err, PM_ERR_NOMEM, "out of memory decoding %zu ids", n);
    }
}

// The training text, line by line, from files opened and sized as
// `prepare` does (regular files only, so an endless stream or a directory
// is refused before anything is read; at most PM_CORPUS_MAX bytes in all),
// handed to SentencePiece through its iterator: its own "input" option
// splits names at commas and stops on a directory with an internal
// assertion.
class file_lines : public sentencepiece::SentenceIterator {
  public:
    file_lines(FILE **f, int n) : f_(f), n_(n) { Next(); }
    ~file_lines() override { free(buf_); }
    bool done() const override { return done_; }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return {}; }
    int failed() const { return failed_; } // the file a read failed in, or -1
    void Next() override {
        while (at_ < n_) {
            ssize_t got = getline(&buf_, &cap_, f_[at_]);
            if (got >= 0) {
                line_.assign(buf_, got > 0 && buf_[got - 1] == '\n' ? got - 1 : got);
                return;
            }
            if (ferror(f_[at_])) {
                failed_ = at_;
                break;
            }
            at_++;
        }
        done_ = true;
    }

  private:
    FILE **f_;
    int n_, at_ = 0, failed_ = -1;
    bool done_ = false;
    char *buf_ = nullptr;
    size_t cap_ = 0;
    std::string line_;
};

// Opens every input (regular files) into f and sums their sizes.
static pm_status open_inputs(const char *const *files, int n, FILE **f, pm_err *err) {
    size_t total = 0;
    pm_status st = PM_OK;
    int k = 0;
    for (; k < n && !st; k++) {
        st = pm_file_open_read(files[k], 1, &f[k], err);
        struct stat sb;
        if (!st && fstat(fileno(f[k]), &sb) != 0)
            st = pm_errf(err, PM_ERR_IO, "%s: %s", files[k], strerror(errno));
        if (!st) total += static_cast<size_t>(sb.st_size);
        if (!st && total > PM_CORPUS_MAX)
            st = pm_errf(err, PM_ERR_ARG, "tokenizer train: the text is over the %zu-byte limit "
                         "at %s; train on less (a sample is enough)", PM_CORPUS_MAX, files[k]);
    }
    if (!st && total == 0)
        st = pm_errf(err, PM_ERR_ARG, "tokenizer train: the text has no bytes; give a non-empty "
                     "file");
    return st; // what was opened is the caller's to close, on error too
}

// The pieces every model holds besides the text's characters: the 256
// bytes (byte_fallback), unknown, begin and end, and the newline.
enum { META_PIECES = 256 + 3 + 1 };

// Round-trip settings (pm_tokenizer.h): no normalization, whitespace as it
// is, no dummy prefix, newline a piece of its own, unknown characters as
// bytes; BPE, quiet.
static pm_status train_lines(FILE **f, const char *const *files, int n, int vocab,
                             std::string *model, pm_err *err) {
    std::unordered_map<std::string, std::string> kw = {
        {"vocab_size", std::to_string(vocab)},
        {"model_type", "bpe"}, {"character_coverage", "1.0"}, {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"}, {"remove_extra_whitespaces", "false"},
        {"add_dummy_prefix", "false"}, {"user_defined_symbols", "\n"},
        {"hard_vocab_limit", "false"}, {"num_threads", "1"}, {"minloglevel", "2"},
        {"input_sentence_size", "2000000"}, {"shuffle_input_sentence", "true"}};
    file_lines lines(f, n);
    auto st = sentencepiece::SentencePieceTrainer::Train(kw, &lines, model);
    if (lines.failed() >= 0)
        return pm_errf(err, PM_ERR_IO, "%s: read failed", files[lines.failed()]);
    if (!st.ok()) {
        // SentencePiece's "Vocabulary size is smaller than required_chars. 300 vs 860.
        // Increase vocab_size or decrease character_coverage with --character_coverage
        // option." names options pipemem has not: say it in pipemem's words
        std::string why = st.ToString();
        size_t at = why.find("required_chars. ");
        int asked = 0, need = 0;
        if (at != std::string::npos &&
            sscanf(why.c_str() + at + 16, "%d vs %d", &asked, &need) == 2 && need > asked)
            return pm_errf(err, PM_ERR_ARG, "tokenizer train: vocab=%d is too small for this "
                           "text: one piece for each of its characters and the %d byte and "
                           "control pieces need vocab=%d or more", vocab, META_PIECES, need);
        return pm_errf(err, PM_ERR_ARG, "tokenizer train: %s", why.c_str());
    }
    return PM_OK;
}

extern "C" pm_status pm_tokenizer_train(const char *const *files, int nfiles, int vocab,
                                        const char *path, pm_err *err) {
    if (nfiles < 1 || !files)
        return pm_errf(err, PM_ERR_ARG, "tokenizer train: no input files given");
    if (!path) return pm_errf(err, PM_ERR_ARG, "tokenizer train: the model's path is NULL");
    for (int i = 0; i < nfiles; i++)
        if (!files[i]) return pm_errf(err, PM_ERR_ARG, "tokenizer train: input file %d is NULL", i);
    if (vocab < 260 || vocab > (1 << 20))
        return pm_errf(err, PM_ERR_ARG, "vocab=%d: must be 260..1048576 (the 256 byte pieces "
                       "and a few more)", vocab);
    struct closer { // the inputs are closed however training ends (an exception too)
        std::vector<FILE *> f;
        ~closer() {
            for (FILE *x : f)
                if (x) fclose(x);
        }
    };
    try {
        closer in{std::vector<FILE *>(static_cast<size_t>(nfiles), nullptr)};
        pm_status s = open_inputs(files, nfiles, in.f.data(), err);
        if (s) return s;
        std::string model;
        s = train_lines(in.f.data(), files, nfiles, vocab, &model, err);
        if (s) return s;
        pm_wfile w;
        s = pm_wfile_open(&w, path, err);
        if (s) return s;
        if (fwrite(model.data(), 1, model.size(), static_cast<FILE *>(w.f)) != model.size()) {
            pm_wfile_abort(&w);
            return pm_errf(err, PM_ERR_IO, "%s: write failed", path);
        }
        return pm_wfile_commit(&w, err);
    } catch (const std::bad_alloc &) {
        return pm_errf(err, PM_ERR_NOMEM, "out of memory training a tokenizer");
    }
}
