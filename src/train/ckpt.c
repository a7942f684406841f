/* ckpt.c: checkpoints, written and read whole or in parts (format in
 * pm_train.h).
 *
 * Writing: pm_ckpt_create makes the temporary (the whole file's size, all
 * zero), writers pwrite their ranges into it and return their parts of the
 * slab checksums, pm_ckpt_commit writes the bytes outside the slabs last,
 * fsyncs, renames over PATH and fsyncs the directory. Until the rename PATH
 * is untouched, so a failure or a kill anywhere leaves the old checkpoint.
 * The rename alone runs inside the guard, if one is set (pm_ckpt_set_guard),
 * which may refuse it.
 *
 * Reading verifies before it interprets: magic and version, the size a
 * header needs, then the FNV (version 4: of the bytes outside the slabs;
 * before: of the whole file), and only then the header's fields (their
 * consistency, then the run's config and data). So a corrupted field is
 * reported as corruption, never as a config mismatch. Slabs are verified by
 * whoever reads them: the parts' checksums add up to the slab's.
 * pm_ckpt_load hashes every slab before it touches the trainer, then reads
 * them in a second pass that hashes again (a file changed in between is
 * reported). Every read and write is a pread/pwrite at a 64-bit offset, in
 * loops that survive short transfers and EINTR.
 * Assumes a little-endian host for the float slabs (x86-64, arm64). */
#define _XOPEN_SOURCE 700 /* pread, pwrite, fsync, fileno */
#include "pipemem/pm_train.h"
#include "util/file.h"
#include "model/passes.h"
#include "config.h"
#include "ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(off_t) == 8, "checkpoints need 64-bit file offsets");

/* Bounds that keep every offset below 2^63 (so off_t holds it): n floats
 * per slab (12n < 2^62) and the tokenizer model's bytes. */
#define MAX_PARAMS ((uint64_t)1 << 58)
#define MAX_TOK ((uint64_t)1 << 61)
#define TAIL_V4 32 /* slab checksums and FNV at the end of a version-4 file */
#define TAIL_OLD 8 /* the whole-file FNV that ends versions 1 to 3 */

static const char *const slab_names[PM_CKPT_SLABS] = {
    "parameters", "AdamW first moments (m)", "AdamW second moments (v)"};

/* ---- the slab checksum (pm_train.h gives the formula) ---------------------- */

#define MIX_STEP 0x9E3779B97F4A7C15ull

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* Part of a slab's checksum: elements first .. first+count-1, whose 4-byte
 * values (as stored) start at p. The terms are independent, so the loop
 * runs at the multiplier's throughput, not its latency (FNV's chain). */
static uint64_t slab_sum(uint64_t first, const void *p, size_t count) {
    const unsigned char *b = p;
    uint64_t s = 0, k = first * MIX_STEP;
    for (size_t i = 0; i < count; i++, k += MIX_STEP) {
        uint32_t bits;
        memcpy(&bits, b + 4 * i, 4);
        s += fmix64(k ^ bits);
    }
    return s;
}

/* ---- I/O ----------------------------------------------------------------- */

/* Moves n bytes at off, looping over short transfers and EINTR. 0, or -1
 * with errno set (0: the file ended first). */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
    unsigned char *p = buf;
    while (n) {
        size_t k = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t got = pread(fd, p, k, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = 0;
            return -1;
        }
        p += got, n -= (size_t)got, off += (uint64_t)got;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
    const unsigned char *p = buf;
    while (n) {
        size_t k = n < ((size_t)1 << 30) ? n : (size_t)1 << 30;
        ssize_t put = pwrite(fd, p, k, (off_t)off);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            if (put == 0) errno = EIO;
            return -1;
        }
        p += put, n -= (size_t)put, off += (uint64_t)put;
    }
    return 0;
}

/* Reads len bytes at off into dst (NULL: into a buffer that is dropped),
 * adding them to *fnv (unless NULL) and, as slab elements first.. (len a
 * multiple of 4), to *mix (unless NULL). 0, or -1 as pread_all. */
static int scan(int fd, uint64_t off, uint64_t len, void *dst, uint64_t first, uint64_t *fnv,
                uint64_t *mix) {
    float buf[1 << 14]; /* 64 KiB, 4-byte aligned for the slabs */
    size_t chunk = dst ? (size_t)1 << 20 : sizeof buf;
    for (uint64_t at = 0; at < len;) {
        size_t k = len - at < chunk ? (size_t)(len - at) : chunk;
        unsigned char *p = dst ? (unsigned char *)dst + at : (unsigned char *)buf;
        if (pread_all(fd, p, k, off + at)) return -1;
        if (fnv) *fnv = pm_fnv1a64(*fnv, p, k);
        if (mix) *mix += slab_sum(first + at / 4, p, k / 4);
        at += k;
    }
    return 0;
}

static pm_status read_failed(pm_err *err, const char *path, uint64_t off) {
    if (!errno)
        return pm_errf(err, PM_ERR_IO, "%s: ends before offset %llu (the file shrank while it "
                       "was read?)", path, (unsigned long long)off);
    return pm_errf(err, PM_ERR_IO, "%s: read failed at offset %llu: %s", path,
                   (unsigned long long)off, strerror(errno));
}

/* Offset of element `first` of slab s in a file of n floats per slab (the
 * same in every version). */
static uint64_t slab_at(uint64_t n, int s, uint64_t first) {
    return PM_CKPT_HEADER + 4 * (n * (uint64_t)s + first);
}

/* ---- the header -------------------------------------------------------------- */

static void put_f32(uint8_t *p, float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    pm_put_u32(p, x);
}
static float get_f32(const uint8_t *p) {
    uint32_t x = pm_get_u32(p);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void encode_header(uint8_t h[PM_CKPT_HEADER], const pm_ckpt_meta *m, uint64_t n) {
    const pm_train_cfg *c = &m->cfg;
    memset(h, 0, PM_CKPT_HEADER);
    memcpy(h, PM_CKPT_MAGIC, 8);
    pm_put_u32(h + 8, PM_CKPT_VERSION);
    pm_put_u32(h + 12, PM_CKPT_HEADER);
    const int32_t cf[9] = {c->model.vocab, c->model.ctx, c->model.dim, c->model.heads,
                           c->model.layers, c->batch, c->micro, c->opt.steps, c->opt.warmup};
    for (int i = 0; i < 9; i++) pm_put_u32(h + 16 + 4 * i, (uint32_t)cf[i]);
    const float of[7] = {c->opt.lr, c->opt.lr_min_frac, c->opt.beta1, c->opt.beta2,
                         c->opt.eps, c->opt.weight_decay, c->opt.grad_clip};
    for (int i = 0; i < 7; i++) put_f32(h + 52 + 4 * i, of[i]);
    pm_put_u64(h + 80, (uint64_t)m->step);
    pm_put_u64(h + 88, c->seed);
    pm_put_u64(h + 96, m->data_pos);
    pm_put_u64(h + 104, m->data_seed);
    pm_put_u64(h + 112, n);
    pm_put_u64(h + 120, m->data_id);
}

static void decode_header(const uint8_t *h, pm_ckpt_info *info) {
    pm_train_cfg *c = &info->cfg;
    int32_t cf[9];
    for (int i = 0; i < 9; i++) cf[i] = (int32_t)pm_get_u32(h + 16 + 4 * i);
    c->model = (pm_gpt_config){.vocab = cf[0], .ctx = cf[1], .dim = cf[2], .heads = cf[3], .layers = cf[4]};
    c->batch = cf[5];
    c->micro = cf[6];
    c->opt.steps = cf[7];
    c->opt.warmup = cf[8];
    float *of[7] = {&c->opt.lr, &c->opt.lr_min_frac, &c->opt.beta1, &c->opt.beta2,
                    &c->opt.eps, &c->opt.weight_decay, &c->opt.grad_clip};
    for (int i = 0; i < 7; i++) *of[i] = get_f32(h + 52 + 4 * i);
    info->step = (int64_t)pm_get_u64(h + 80);
    c->seed = pm_get_u64(h + 88);
    info->data_pos = pm_get_u64(h + 96);
    info->data_seed = pm_get_u64(h + 104);
    info->n_params = (size_t)pm_get_u64(h + 112);
    info->version = pm_get_u32(h + 8);
    info->data_id = info->version >= 2 ? pm_get_u64(h + 120) : 0;
}

/* ---- writing ------------------------------------------------------------------ */

pm_ckpt_meta pm_ckpt_meta_of(const pm_trainer *t) {
    return (pm_ckpt_meta){.cfg = t->cfg, .step = t->step, .data_pos = t->train.next,
                          .data_seed = t->train.seed, .data_id = t->data_id,
                          .tok_model = t->tok_model, .tok_len = t->tok_model_len};
}

/* The file meta describes: n floats per slab, the slabs' end, the size. */
static pm_status meta_layout(const char *path, const pm_ckpt_meta *m, uint64_t *n,
                             uint64_t *end, uint64_t *size, pm_err *err) {
    pm_err why = {{0}};
    if (pm_gpt_config_check(&m->cfg.model, &why))
        return pm_errf(err, PM_ERR_ARG, "%s: cannot write a checkpoint of this model: %s", path,
                       why.msg);
    *n = pm_gpt_num_params(&m->cfg.model);
    if (*n > MAX_PARAMS || m->tok_len > MAX_TOK || (m->tok_len && !m->tok_model))
        return pm_errf(err, PM_ERR_ARG, "%s: a checkpoint of %llu parameters and a %zu-byte "
                       "tokenizer cannot be written", path, (unsigned long long)*n, m->tok_len);
    *end = slab_at(*n, PM_CKPT_SLABS, 0);
    *size = *end + 8 + m->tok_len + TAIL_V4;
    return PM_OK;
}

pm_status pm_ckpt_check_path(const char *path, pm_err *err) {
    struct stat sb;
    if (path && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return pm_errf(err, PM_ERR_IO, "%s: %s", path, S_ISDIR(sb.st_mode)
                       ? "is a directory; give a file"
                       : "not a regular file (a device or pipe); a checkpoint must be a regular "
                         "file or a new name");
    return pm_path_check_writable(path, err);
}

pm_status pm_ckpt_create(const char *path, const pm_ckpt_meta *meta, char **tmp, pm_err *err) {
    *tmp = NULL;
    uint64_t n, end, size;
    pm_status st = meta_layout(path, meta, &n, &end, &size, err);
    if (st || (st = pm_ckpt_check_path(path, err))) return st;
    char *name;
    int fd = pm_tmp_open(path, 1, &name); /* the parts writers pwrite into it */
    if (fd < 0)
        return pm_errf(err, errno == ENOMEM ? PM_ERR_NOMEM : PM_ERR_IO, "%s: cannot write: %s",
                       path, strerror(errno));
    /* Zero-filled to the whole size (sparse): writers pwrite into place. */
    int bad = ftruncate(fd, (off_t)size) != 0;
    int e = errno;
    if (close(fd) != 0 && !bad) bad = 1, e = errno;
    if (bad) {
        unlink(name);
        pm_free(name);
        return pm_errf(err, PM_ERR_IO, "%s: cannot make a %llu-byte temporary: %s", path,
                       (unsigned long long)size, strerror(e));
    }
    *tmp = name;
    return PM_OK;
}

/* Opens a temporary pm_ckpt_create made, for writing: a regular file (a
 * FIFO is never waited on) of at least `least` bytes, exactly `least` if
 * exact. */
static pm_status open_tmp(const char *tmp, uint64_t least, int exact, int *fd, pm_err *err) {
    *fd = open(tmp, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0) return pm_errf(err, PM_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    struct stat sb;
    pm_status st = PM_OK;
    if (fstat(*fd, &sb) != 0)
        st = pm_errf(err, PM_ERR_IO, "%s: %s", tmp, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = pm_errf(err, PM_ERR_IO, "%s: not a regular file; give the temporary "
                     "pm_ckpt_create made", tmp);
    else if ((uint64_t)sb.st_size < least || (exact && (uint64_t)sb.st_size != least))
        st = pm_errf(err, PM_ERR_ARG, "%s: %lld bytes, not the %llu of this checkpoint; give "
                     "the temporary pm_ckpt_create made for it", tmp, (long long)sb.st_size,
                     (unsigned long long)least);
    if (st) close(*fd), *fd = -1;
    return st;
}

pm_status pm_ckpt_write_part(const char *tmp, size_t n_params, int slab, size_t first,
                             const float *x, size_t count, uint64_t *sum, pm_err *err) {
    if (slab < 0 || slab >= PM_CKPT_SLABS || n_params > MAX_PARAMS || first > n_params ||
        count > n_params - first)
        return pm_errf(err, PM_ERR_ARG, "%s: slab %d, elements %zu + %zu: outside a "
                       "checkpoint of %zu parameters", tmp, slab, first, count, n_params);
    int fd;
    pm_status st = open_tmp(tmp, slab_at(n_params, PM_CKPT_SLABS, 0) + 8 + TAIL_V4, 0, &fd, err);
    if (st) return st;
    uint64_t s = 0, at = slab_at(n_params, slab, first);
    const size_t chunk = (size_t)1 << 18; /* floats: hashed while still in cache */
    for (size_t i = 0; i < count && !st; i += chunk) {
        size_t k = count - i < chunk ? count - i : chunk;
        s += slab_sum(first + i, x + i, k);
        if (pwrite_all(fd, x + i, 4 * k, at + 4 * i))
            st = pm_errf(err, PM_ERR_IO, "%s: write failed at offset %llu: %s", tmp,
                         (unsigned long long)(at + 4 * i), strerror(errno));
    }
    if (!st && fsync(fd) != 0)
        st = pm_errf(err, PM_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !st)
        st = pm_errf(err, PM_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (!st) *sum = s;
    return st;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096] = ".";
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) return -1;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    /* Some file systems refuse fsync on a directory; the rename still
     * happened, so only a real I/O error counts. */
    return rc == 0 || errno == EINVAL || errno == EROFS ? 0 : -1;
}

/* Writes the bytes outside the slabs into fd (laid out for meta: the slabs
 * end at `end`, the file is `size` bytes). The header goes last, so the
 * temporary has no magic until everything else is in place. */
static int write_rest(int fd, const pm_ckpt_meta *m, uint64_t n, uint64_t end, uint64_t size,
                      const uint64_t sums[PM_CKPT_SLABS]) {
    uint8_t h[PM_CKPT_HEADER], len[8], sb[24], fb[8];
    encode_header(h, m, n);
    pm_put_u64(len, m->tok_len);
    for (int s = 0; s < PM_CKPT_SLABS; s++) pm_put_u64(sb + 8 * s, sums[s]);
    uint64_t fnv = pm_fnv1a64(PM_FNV_OFFSET, h, sizeof h);
    fnv = pm_fnv1a64(pm_fnv1a64(fnv, len, 8), m->tok_model, m->tok_len);
    pm_put_u64(fb, pm_fnv1a64(fnv, sb, sizeof sb));
    return pwrite_all(fd, len, 8, end) || pwrite_all(fd, m->tok_model, m->tok_len, end + 8) ||
           pwrite_all(fd, sb, sizeof sb, size - TAIL_V4) || pwrite_all(fd, fb, 8, size - 8) ||
           pwrite_all(fd, h, sizeof h, 0);
}

/* The guard (pm_ckpt_set_guard), or NULL: set by the caller's thread, read
 * by the committing one. */
static _Atomic(const pm_ckpt_guard *) guard;

void pm_ckpt_set_guard(const pm_ckpt_guard *g) { atomic_store(&guard, g); }

/* Renames tmp over path inside the guard: PM_OK, else tmp is removed and
 * path unchanged (the guard's refusal, or the rename's error). */
static pm_status replace(const char *path, const char *tmp, pm_err *err) {
    const pm_ckpt_guard *g = atomic_load(&guard);
    pm_status st = g ? g->enter(g->ctx, path, err) : PM_OK;
    int e = 0;
    if (!st && rename(tmp, path) != 0) e = errno;
    if (g) g->leave(g->ctx);
    if (!st && !e) return PM_OK;
    unlink(tmp);
    if (st) return st;
    return pm_errf(err, PM_ERR_IO, "%s: rename failed: %s; the previous file is unchanged", path,
                   strerror(e));
}

pm_status pm_ckpt_commit(const char *path, const char *tmp, const pm_ckpt_meta *meta,
                         const uint64_t sums[PM_CKPT_SLABS], pm_err *err) {
    uint64_t n, end, size;
    int fd = -1;
    pm_status st = meta_layout(path, meta, &n, &end, &size, err);
    if (st || (st = open_tmp(tmp, size, 1, &fd, err))) {
        unlink(tmp);
        return st;
    }
    const char *why = NULL;
    int e = 0;
    if (write_rest(fd, meta, n, end, size, sums)) why = "write failed", e = errno;
    else if (fsync(fd) != 0) why = "fsync failed", e = errno;
    if (close(fd) != 0 && !why) why = "close failed", e = errno;
    if (why) {
        unlink(tmp);
        return pm_errf(err, PM_ERR_IO, "%s: %s: %s; the previous file is unchanged", path, why,
                       strerror(e));
    }
    if ((st = replace(path, tmp, err))) return st;
    if (sync_dir(path))
        return pm_errf(err, PM_ERR_IO, "%s: written, but its directory could not be synced: %s",
                       path, strerror(errno));
    return PM_OK;
}

void pm_ckpt_abandon(const char *tmp) {
    if (tmp) unlink(tmp);
}

pm_status pm_ckpt_save(const pm_trainer *t, const char *path, pm_err *err) {
    pm_ckpt_meta meta = pm_ckpt_meta_of(t);
    char *tmp;
    pm_status st = pm_ckpt_create(path, &meta, &tmp, err);
    if (st) return st;
    const float *slab[PM_CKPT_SLABS] = {t->params, t->m, t->v};
    uint64_t sums[PM_CKPT_SLABS];
    for (int s = 0; s < PM_CKPT_SLABS && !st; s++)
        st = pm_ckpt_write_part(tmp, t->n_params, s, 0, slab[s], t->n_params, &sums[s], err);
    if (st) pm_ckpt_abandon(tmp);
    else st = pm_ckpt_commit(path, tmp, &meta, sums, err);
    pm_free(tmp);
    return st;
}

/* ---- verifying ------------------------------------------------------------------ */

/* Magic, version and the least size, from the first bytes and the size. */
static pm_status check_start(const char *path, const uint8_t *h, size_t got, uint64_t size,
                             pm_err *err) {
    size_t magic_n = got < 8 ? got : 8;
    if (memcmp(h, PM_CKPT_MAGIC, magic_n))
        return pm_errf(err, PM_ERR_FORMAT, "%s: not a pipemem checkpoint (bad magic at offset 0)",
                       path);
    const unsigned least = PM_CKPT_HEADER + TAIL_OLD;
    if (got < 16)
        return pm_errf(err, PM_ERR_FORMAT, "%s: truncated: %llu bytes, a checkpoint has at "
                       "least %u", path, (unsigned long long)size, least);
    uint32_t ver = pm_get_u32(h + 8);
    if (ver < 1 || ver > PM_CKPT_VERSION)
        return pm_errf(err, PM_ERR_FORMAT, "%s: checkpoint version %u at offset 8, this pipemem "
                       "reads versions 1 to %u", path, ver, PM_CKPT_VERSION);
    if (size < least)
        return pm_errf(err, PM_ERR_FORMAT, "%s: truncated: %llu bytes, a checkpoint has at "
                       "least %u", path, (unsigned long long)size, least);
    if (pm_get_u32(h + 12) != PM_CKPT_HEADER)
        return pm_errf(err, PM_ERR_FORMAT, "%s: header size %u at offset 12, expected %d (the "
                       "file is corrupted)", path, pm_get_u32(h + 12), PM_CKPT_HEADER);
    return PM_OK;
}

/* The FNV did not match: a file shorter than its (unverified) header
 * describes was most likely cut short; anything else is corruption. */
static pm_status bad_fnv(const char *path, uint64_t size, uint64_t claimed, const char *what,
                         pm_err *err) {
    if (claimed > size && claimed < UINT64_MAX)
        return pm_errf(err, PM_ERR_FORMAT, "%s: truncated: %llu bytes, its header describes %llu "
                       "(checksum mismatch); use another checkpoint", path,
                       (unsigned long long)size, (unsigned long long)claimed);
    return pm_errf(err, PM_ERR_FORMAT, "%s: checksum mismatch in %s (the file is corrupted); "
                   "use another checkpoint", path, what);
}

/* Versions 1 to 3: the FNV of every byte before the last 8, the slab
 * checksums computed on the way (when the unverified header's n fits). */
static pm_status verify_old(const char *path, int fd, const uint8_t *h, pm_ckpt_info *info,
                            pm_err *err) {
    uint64_t size = info->size, n = pm_get_u64(h + 112);
    uint64_t fnv = pm_fnv1a64(PM_FNV_OFFSET, h, PM_CKPT_HEADER), at = PM_CKPT_HEADER;
    uint8_t tail[8];
    int fits = n <= MAX_PARAMS && slab_at(n, PM_CKPT_SLABS, 0) + TAIL_OLD <= size;
    for (int s = 0; s < PM_CKPT_SLABS && fits; s++, at += 4 * n)
        if (scan(fd, at, 4 * n, NULL, 0, &fnv, &info->sums[s])) return read_failed(err, path, at);
    if (scan(fd, at, size - TAIL_OLD - at, NULL, 0, &fnv, NULL)) return read_failed(err, path, at);
    if (pread_all(fd, tail, 8, size - TAIL_OLD)) return read_failed(err, path, size - TAIL_OLD);
    if (pm_get_u64(tail) != fnv)
        return bad_fnv(path, size, n <= MAX_PARAMS ? slab_at(n, PM_CKPT_SLABS, 0) + TAIL_OLD
                                                   : UINT64_MAX, "the file", err);
    return PM_OK;
}

/* Version 4: the FNV of the header and of the bytes after the slabs. */
static pm_status verify_v4(const char *path, int fd, const uint8_t *h, pm_ckpt_info *info,
                           pm_err *err) {
    uint64_t size = info->size, n = pm_get_u64(h + 112);
    uint64_t end = n <= MAX_PARAMS ? slab_at(n, PM_CKPT_SLABS, 0) : UINT64_MAX;
    if (end > size - 8 - TAIL_V4) { /* the tokenizer length is not even there */
        if (end == UINT64_MAX)
            return pm_errf(err, PM_ERR_FORMAT, "%s: %llu parameters at offset 112 (the file is "
                           "corrupted); use another checkpoint", path, (unsigned long long)n);
        return pm_errf(err, PM_ERR_FORMAT, "%s: truncated: %llu bytes, its header describes "
                       "at least %llu; use another checkpoint", path, (unsigned long long)size,
                       (unsigned long long)(end + 8 + TAIL_V4));
    }
    uint64_t fnv = pm_fnv1a64(PM_FNV_OFFSET, h, PM_CKPT_HEADER);
    uint8_t len[8], tail[8];
    if (scan(fd, end, size - 8 - end, NULL, 0, &fnv, NULL)) return read_failed(err, path, end);
    if (pread_all(fd, tail, 8, size - 8)) return read_failed(err, path, size - 8);
    if (pm_get_u64(tail) != fnv) {
        if (pread_all(fd, len, 8, end)) return read_failed(err, path, end);
        uint64_t tl = pm_get_u64(len);
        return bad_fnv(path, size, tl <= MAX_TOK ? end + 8 + tl + TAIL_V4 : UINT64_MAX,
                       "the header, the tokenizer or the slab checksums", err);
    }
    return PM_OK;
}

/* The verified header's fields agree with each other and with the file's
 * size (from version 3 on, with the tokenizer length after the slabs). */
static pm_status check_header(const char *path, int fd, pm_ckpt_info *info, pm_err *err) {
    uint64_t n = info->n_params, end = 0, expect = 0;
    const pm_gpt_config *c = &info->cfg.model;
    pm_err why;
    /* the model first: a shape that is no model, or not the parameters said */
    if (pm_gpt_config_check(c, &why))
        return pm_errf(err, PM_ERR_FORMAT, "%s: the header's model is no model (%s); the file "
                       "is inconsistent", path, why.msg);
    if (n != pm_gpt_num_params(c))
        return pm_errf(err, PM_ERR_FORMAT, "%s: the header's model (%d layers, dim %d, %d "
                       "heads, ctx %d, vocab %d) has %zu parameters, but the header says %llu "
                       "(offset 112); the file is inconsistent", path, c->layers, c->dim,
                       c->heads, c->ctx, c->vocab, pm_gpt_num_params(c), (unsigned long long)n);
    int ok = n <= MAX_PARAMS;
    if (ok) expect = end = slab_at(n, PM_CKPT_SLABS, 0);
    if (ok && info->version >= 3) {
        uint8_t len[8];
        ok = end + 8 <= info->size && !pread_all(fd, len, 8, end);
        uint64_t tl = ok ? pm_get_u64(len) : 0;
        ok = ok && tl <= info->size - end - 8;
        info->tok_len = ok ? (size_t)tl : 0;
        info->tok_off = end + 8;
        expect = end + 8 + info->tok_len;
    }
    expect += info->version >= 4 ? TAIL_V4 : TAIL_OLD;
    if (!ok || expect != info->size)
        return pm_errf(err, PM_ERR_FORMAT,
                       "%s: header says %zu parameters (offset 112) for a file of %llu bytes; "
                       "the file is inconsistent", path, info->n_params,
                       (unsigned long long)info->size);
    if (info->version >= 4) {
        uint8_t sb[24];
        if (pread_all(fd, sb, sizeof sb, info->size - TAIL_V4))
            return read_failed(err, path, info->size - TAIL_V4);
        for (int s = 0; s < PM_CKPT_SLABS; s++) info->sums[s] = pm_get_u64(sb + 8 * s);
    }
    return PM_OK;
}

/* Opens and verifies path (magic, version, size, checksum, header). On
 * success *fp is open, h holds the header and info is filled. */
static pm_status open_verified(const char *path, FILE **fp, pm_ckpt_info *info,
                               uint8_t h[PM_CKPT_HEADER], pm_err *err) {
    *fp = NULL;
    *info = (pm_ckpt_info){0};
    FILE *f;
    pm_status st = pm_file_open_read(path, 1, &f, err);
    if (st) return st;
    int fd = fileno(f);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    info->size = (uint64_t)sb.st_size;
    size_t got = info->size < PM_CKPT_HEADER ? (size_t)info->size : PM_CKPT_HEADER;
    memset(h, 0, PM_CKPT_HEADER);
    if (pread_all(fd, h, got, 0)) {
        st = read_failed(err, path, 0);
        goto fail;
    }
    if ((st = check_start(path, h, got, info->size, err))) goto fail;
    if (pm_get_u32(h + 8) >= 4) st = verify_v4(path, fd, h, info, err);
    else st = verify_old(path, fd, h, info, err);
    if (st) goto fail;
    decode_header(h, info);
    if ((st = check_header(path, fd, info, err))) goto fail;
    *fp = f;
    return PM_OK;
fail:
    fclose(f);
    return st;
}

pm_status pm_ckpt_info_read(const char *path, pm_ckpt_info *info, pm_err *err) {
    FILE *f;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, info, h, err);
    if (!st) fclose(f);
    return st;
}

int64_t pm_ckpt_peek_step(const char *path) {
    uint8_t h[88];
    int fd = path ? open(path, O_RDONLY) : -1;
    if (fd < 0) return -1;
    ssize_t n = pread(fd, h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h, PM_CKPT_MAGIC, 8)) return -1;
    return (int64_t)pm_get_u64(h + 80);
}

/* ---- reading ------------------------------------------------------------------ */

/* What must be the same to continue a run: the model, the batch and its
 * microbatches, the seed, lr and weight decay (the total steps may differ:
 * the cosine then spans the new total). */
#define RUN_FIELDS                                                                         \
    (PM_CFG_BIT(PM_CFG_VOCAB) | PM_CFG_BIT(PM_CFG_CTX) | PM_CFG_BIT(PM_CFG_DIM) |          \
     PM_CFG_BIT(PM_CFG_HEADS) | PM_CFG_BIT(PM_CFG_LAYERS) | PM_CFG_BIT(PM_CFG_BATCH) |     \
     PM_CFG_BIT(PM_CFG_MICRO) | PM_CFG_BIT(PM_CFG_SEED) | PM_CFG_BIT(PM_CFG_LR) |           \
     PM_CFG_BIT(PM_CFG_WEIGHT_DECAY))

pm_status pm_ckpt_check_run(const char *path, const pm_ckpt_info *info, const pm_train_cfg *cfg,
                            uint64_t data_id, pm_err *err) {
    const pm_train_cfg *a = &info->cfg, *b = cfg;
    int f = pm_train_cfg_diff(a, b, RUN_FIELDS);
    /* the vocabulary is the data's (its tokenizer's), no setting of its own */
    if (f == PM_CFG_VOCAB)
        return pm_errf(err, PM_ERR_ARG, "%s: the checkpoint's vocabulary has %d tokens, this "
                       "run's data %d; resume on the data (and tokenizer) it was made with, "
                       "or start without resuming", path, a->model.vocab, b->model.vocab);
    if (f >= 0) { /* by the field's name (the CLI turns it into a flag) */
        char was[32], now[32];
        const char *name = pm_train_field_names[f];
        pm_train_cfg_value(a, f, was, sizeof was);
        pm_train_cfg_value(b, f, now, sizeof now);
        return pm_errf(err, PM_ERR_ARG, "%s: the checkpoint was made with %s=%s, this run has "
                       "%s; resume with %s=%s, or start without resuming", path, name, was, now,
                       name, was);
    }
    if (info->data_id && data_id && info->data_id != data_id)
        return pm_errf(err, PM_ERR_ARG,
                       "%s: checkpoint was trained on other data (train tokens identity "
                       "%016llx, this run's %016llx); resume on the data it was made with",
                       path, (unsigned long long)info->data_id, (unsigned long long)data_id);
    return PM_OK;
}

/* Reads a range of a slab from the open, verified fd (see read_part). */
static pm_status read_range(const char *path, int fd, const pm_ckpt_info *info, int slab,
                            size_t first, float *dst, size_t count, uint64_t *sum, pm_err *err) {
    if (slab < 0 || slab >= PM_CKPT_SLABS || first > info->n_params ||
        count > info->n_params - first)
        return pm_errf(err, PM_ERR_ARG, "%s: slab %d, elements %zu + %zu: outside a "
                       "checkpoint of %zu parameters", path, slab, first, count, info->n_params);
    uint64_t at = slab_at(info->n_params, slab, first), s = 0;
    if (scan(fd, at, 4 * (uint64_t)count, dst, first, NULL, &s))
        return read_failed(err, path, at);
    *sum = s;
    return PM_OK;
}

pm_status pm_ckpt_read_part(const char *path, const pm_ckpt_info *info, int slab, size_t first,
                            float *dst, size_t count, uint64_t *sum, pm_err *err) {
    FILE *f;
    pm_status st = pm_file_open_read(path, 1, &f, err);
    if (st) return st;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        st = pm_errf(err, PM_ERR_IO, "%s: %s", path, strerror(errno));
    else if ((uint64_t)sb.st_size != info->size)
        st = pm_errf(err, PM_ERR_IO, "%s: %lld bytes, %llu when its header was read: the file "
                     "changed; read it again", path, (long long)sb.st_size,
                     (unsigned long long)info->size);
    else
        st = read_range(path, fileno(f), info, slab, first, dst, count, sum, err);
    fclose(f);
    return st;
}

pm_status pm_ckpt_check_sums(const char *path, const pm_ckpt_info *info, unsigned mask,
                             const uint64_t sums[PM_CKPT_SLABS], pm_err *err) {
    if (mask > PM_CKPT_ALL)
        return pm_errf(err, PM_ERR_ARG, "%s: slab mask %#x, slabs are bits 0 to 2", path, mask);
    for (int s = 0; s < PM_CKPT_SLABS; s++) {
        if (!(mask & PM_CKPT_MASK(s)) || sums[s] == info->sums[s]) continue;
        if (info->version >= 4)
            return pm_errf(err, PM_ERR_FORMAT, "%s: checksum mismatch in the %s (the file is "
                           "corrupted); use another checkpoint", path, slab_names[s]);
        return pm_errf(err, PM_ERR_IO, "%s: the %s changed after the file was verified (is it "
                       "being rewritten?); read it again", path, slab_names[s]);
    }
    return PM_OK;
}

/* Every slab of fd into dst[s] (NULL: hashed only), the sums checked
 * against info's (see pm_ckpt_check_sums). */
static pm_status read_slabs(const char *path, int fd, const pm_ckpt_info *info,
                            float *const dst[PM_CKPT_SLABS], pm_err *err) {
    uint64_t sums[PM_CKPT_SLABS];
    for (int s = 0; s < PM_CKPT_SLABS; s++) {
        pm_status st = read_range(path, fd, info, s, 0, dst[s], info->n_params, &sums[s], err);
        if (st) return st;
    }
    return pm_ckpt_check_sums(path, info, PM_CKPT_ALL, sums, err);
}

/* The fields of the learning-rate schedule and of AdamW: a run continued
 * with other values would change its schedule mid-run. */
#define SCHEDULE_FIELDS                                                                    \
    (PM_CFG_BIT(PM_CFG_STEPS) | PM_CFG_BIT(PM_CFG_WARMUP) | PM_CFG_BIT(PM_CFG_LR_MIN_FRAC) | \
     PM_CFG_BIT(PM_CFG_BETA1) | PM_CFG_BIT(PM_CFG_BETA2) | PM_CFG_BIT(PM_CFG_EPS) |         \
     PM_CFG_BIT(PM_CFG_GRAD_CLIP))

pm_status pm_ckpt_check_schedule(const char *path, const pm_ckpt_info *info,
                                 const pm_train_cfg *cfg, pm_err *err) {
    char was[240] = "", now[240] = "";
    size_t w = 0, m = 0;
    int f;
    for (unsigned mask = SCHEDULE_FIELDS; (f = pm_train_cfg_diff(&info->cfg, cfg, mask)) >= 0;
         mask &= ~PM_CFG_BIT(f)) {
        char a[32], b[32];
        pm_train_cfg_value(&info->cfg, f, a, sizeof a);
        pm_train_cfg_value(cfg, f, b, sizeof b);
        w += (size_t)snprintf(was + w, sizeof was - w, " %s=%s", pm_train_field_names[f], a);
        m += (size_t)snprintf(now + m, sizeof now - m, " %s=%s", pm_train_field_names[f], b);
        if (w >= sizeof was || m >= sizeof now) break; /* cannot: 7 fields of < 32 bytes */
    }
    if (!w) return PM_OK;
    return pm_errf(err, PM_ERR_ARG, "%s was made with%s, this run has%s (the learning-rate "
                   "schedule would change mid-run); resume with%s, or start without resuming",
                   path, was, now, was);
}

pm_status pm_ckpt_verify(const char *path, const pm_train_cfg *cfg, uint64_t data_id,
                         pm_ckpt_info *info, pm_err *err) {
    FILE *f;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, info, h, err);
    if (st) return st;
    float *const none[PM_CKPT_SLABS] = {NULL, NULL, NULL};
    if (!(st = pm_ckpt_check_run(path, info, cfg, data_id, err)) &&
        !(st = pm_ckpt_check_schedule(path, info, cfg, err)) && info->version >= 4)
        st = read_slabs(path, fileno(f), info, none, err);
    fclose(f);
    return st;
}

pm_status pm_ckpt_load(pm_trainer *t, const char *path, pm_err *err) {
    FILE *f;
    pm_ckpt_info in;
    uint8_t first[PM_CKPT_HEADER], h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, &in, first, err);
    if (st) return st;
    int fd = fileno(f);
    float *const none[PM_CKPT_SLABS] = {NULL, NULL, NULL};
    float *const slab[PM_CKPT_SLABS] = {t->params, t->m, t->v};
    /* Versions 1 to 3 were hashed whole by open_verified; version 4's
     * slabs are hashed here, before the trainer changes. */
    if ((st = pm_ckpt_check_run(path, &in, &t->cfg, t->data_id, err)) ||
        (in.n_params != t->n_params &&
         (st = pm_errf(err, PM_ERR_ARG, "%s: %zu parameters, the trainer has %zu", path,
                       in.n_params, t->n_params))) ||
        (in.version >= 4 && (st = read_slabs(path, fd, &in, none, err)))) {
        fclose(f);
        return st;
    }
    /* Everything checked: now the trainer changes. */
    pm_err why = {{0}};
    int ok = !read_slabs(path, fd, &in, slab, &why) && !pread_all(fd, h, sizeof h, 0) &&
             !memcmp(h, first, sizeof h); /* the header checked is the one loaded */
    fclose(f);
    if (!ok)
        return pm_errf(err, PM_ERR_IO, "%s: the file changed while it was loaded; the trainer's "
                       "parameters are unspecified", path);
    t->step = in.step;
    t->train.next = in.data_pos;
    return PM_OK;
}

pm_status pm_ckpt_load_params(const char *path, pm_ckpt_info *info, float **params,
                              pm_err *err) {
    *params = NULL;
    FILE *f;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, info, h, err);
    if (st) return st;
    float *p = pm_malloc(info->n_params ? info->n_params * sizeof(float) : 1);
    uint64_t sums[PM_CKPT_SLABS] = {0};
    if (!p)
        st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for %zu parameters", path,
                     info->n_params);
    else if (!(st = read_range(path, fileno(f), info, PM_CKPT_PARAMS, 0, p, info->n_params,
                               &sums[0], err)))
        st = pm_ckpt_check_sums(path, info, PM_CKPT_MASK(PM_CKPT_PARAMS), sums, err);
    fclose(f);
    if (st) {
        pm_free(p);
        return st;
    }
    *params = p;
    return PM_OK;
}

pm_status pm_ckpt_load_tokenizer(const char *path, void **model, size_t *len, pm_err *err) {
    *model = NULL, *len = 0;
    FILE *f;
    pm_ckpt_info info;
    uint8_t h[PM_CKPT_HEADER];
    pm_status st = open_verified(path, &f, &info, h, err);
    if (st || !info.tok_len) {
        if (!st) fclose(f);
        return st;
    }
    void *m = pm_malloc(info.tok_len);
    if (!m) st = pm_errf(err, PM_ERR_NOMEM, "%s: out of memory for the tokenizer", path);
    else if (pread_all(fileno(f), m, info.tok_len, info.tok_off))
        st = read_failed(err, path, info.tok_off);
    fclose(f);
    if (st) {
        pm_free(m);
        return st;
    }
    *model = m, *len = info.tok_len;
    return PM_OK;
}
