/* pipe_ckpt.c: checkpoints written and read by stage (pm_pipe_save,
 * pm_pipe_load). No process gathers the model: each device writes its own
 * stages' ranges of the checkpoint's three slabs into one temporary and
 * reads its own ranges back, under any placement, schedule, transport or
 * replica count (the slabs are in layer order, so a stage is one range of
 * each; pm_train.h has the format).
 *
 * Who writes what (each float once): replica 0's devices the parameters;
 * the AdamW moments replica 0's devices too, or with ZeRO-1 each replica
 * its own slice. Every device reads the parameters and the moments it
 * keeps. Only the ranges that cover each slab exactly once (the writers'
 * ones) count in the checksums.
 *
 * All or nothing: the root creates the temporary, every device writes and
 * reports (status, checksum parts), the root commits only if all succeeded
 * (else abandons it), and tells every device the outcome; a kill at any
 * moment leaves PATH as it was. Loading: every process checks the header
 * and the run; every device reads; the root checks the summed parts; the
 * outcome is shared. A load that fails after reading leaves the devices'
 * state unspecified (the caller stops).
 *   save: create (root) -> names shared -> write parts (devices, in
 *         parallel) -> records to root -> commit or abandon -> outcome
 *   load: header + run checks (every process) -> outcome -> read parts
 *         (devices) -> records to root -> sums checked -> outcome */
#include <string.h>

#include "runtime/internal.h"
#include "train/ckpt.h"
#include "plan/query.h"

/* Device g's share of slab k of stage s, as [*first, *first + *count) of
 * the stage: the whole stage, or under ZeRO-1 a moment's slice of its
 * replica. Whether it writes it: replica 0 writes the parameters (and the
 * moments without ZeRO), each replica its slices under ZeRO; every float
 * is written once. Reading, every replica reads its share. */
static int writes(const pm_pipe *pp, int g, int k, int s, size_t *first, size_t *count) {
    int rep = g / pp->p;
    if (k == PM_CKPT_PARAMS || !pp->pl->zero) {
        *first = 0, *count = pm_stage_floats(pp, s);
        return rep == 0;
    }
    pm_plan_moment_slice(pp->pl, s, rep, first, count);
    return 1;
}

/* The device's slab k of stage s, at the start of what it keeps. */
static float *slab_of(const pm_pipe_dev *dv, int k, int s) {
    return k == PM_CKPT_PARAMS ? dv->sp[s] : k == PM_CKPT_M ? dv->sm[s] : dv->sv[s];
}

static int slabs(const pm_pipe *pp) { return pp->pl->forward_only ? 1 : PM_CKPT_SLABS; }

/* A device's failed read or write, named: which device and stage, and
 * under MPI which rank (whose file system, quota or limits failed). */
static pm_status dev_fail(pm_pipe_dev *dv, int s, pm_status st) {
    pm_err e = dv->err;
    if (dv->pp->mpi)
        return pm_errf(&dv->err, st, "rank %d: device %d, stage %d: %s", dv->g, dv->g, s, e.msg);
    return pm_errf(&dv->err, st, "device %d, stage %d: %s", dv->g, s, e.msg);
}

/* Runs on the device (its thread, or the rank): its part of a save (what
 * it writes) or of a load (all it reads), into dv->st / dv->err and the
 * checksum parts dv->sums. */
static pm_status dev_ckpt(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    size_t n = pm_gpt_num_params(&pp->cfg.model);
    int save = pp->run == PM_RUN_SAVE;
    memset(dv->sums, 0, sizeof dv->sums);
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        size_t base = pm_plan_stage_offset(pp->pl, s);
        for (int k = 0; k < slabs(pp); k++) {
            size_t first, count;
            uint64_t part = 0;
            pm_status st;
            if (save && !writes(pp, dv->g, k, s, &first, &count)) continue;
            if (!save) writes(pp, dv->g, k, s, &first, &count);
            if (save)
                st = pm_ckpt_write_part(pp->ck_name, n, k, base + first, slab_of(dv, k, s),
                                        count, &part, &dv->err);
            else
                st = pm_ckpt_read_part(pp->ck_path, &pp->ck_info, k, base + first,
                                       slab_of(dv, k, s), count, &part, &dv->err);
            if (st) return dev_fail(dv, s, st);
            dv->sums[k] += part;
        }
    }
    return PM_OK;
}

/* A save's metadata must describe this pipe's run and state. */
static pm_status check_meta(const pm_pipe *pp, const char *path, const pm_ckpt_meta *meta,
                            pm_err *err) {
    const pm_gpt_config *a = &meta->cfg.model, *b = &pp->cfg.model;
    if (pp->pl->forward_only)
        return pm_errf(err, PM_ERR_ARG, "%s: a forward-only pipeline holds no gradients or "
                       "moments: it cannot save a checkpoint", path);
    if (a->vocab != b->vocab || a->ctx != b->ctx || a->dim != b->dim || a->heads != b->heads ||
        a->layers != b->layers || meta->cfg.batch != pp->cfg.batch ||
        meta->cfg.micro != pp->cfg.micro || meta->step != pp->step)
        return pm_errf(err, PM_ERR_ARG, "%s: the checkpoint's metadata (model, batch, "
                       "microbatches, step %lld) is not this pipeline's (step %lld)", path,
                       (long long)meta->step, (long long)pp->step);
    return PM_OK;
}

pm_status pm_pipe_save(pm_pipe *pp, const char *path, const pm_ckpt_meta *meta, pm_err *err) {
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    pm_err mine = {{0}};
    char *tmp = NULL;
    pm_status st = check_meta(pp, path, meta, &mine);
    if (!st && pm_root(pp)) st = pm_ckpt_create(path, meta, &tmp, &mine);
    if (!st && pm_root(pp)) snprintf(pp->ck_name, sizeof pp->ck_name, "%s", tmp);
    /* every process learns the temporary's name, or the root's failure (a
     * failure every process shares: all return here together) */
    if ((st = pm_pipe_share_name(pp, st, &mine))) goto done;
    pm_pipe_run(pp, PM_RUN_SAVE, dev_ckpt);
    st = pm_pipe_gather_parts(pp, PM_OK, 0, &mine);
    if (pm_root(pp)) {
        uint64_t sums[PM_CKPT_SLABS] = {0}; /* every float written once, by some replica */
        for (int r = 0; r < pp->dp; r++)
            for (int k = 0; k < PM_CKPT_SLABS; k++) sums[k] += pp->ck_sums[r * PM_CKPT_SLABS + k];
        if (!st) st = pm_ckpt_commit(path, tmp, meta, sums, &mine);
        else pm_ckpt_abandon(tmp);
    }
    st = pm_pipe_share_outcome(pp, st, &mine);
done:
    pp->ck_name[0] = 0;
    pm_free(tmp);
    if (st && err) *err = mine;
    return st;
}

/* A forward-only pipe (sampling) needs only the same model: the run that
 * trained it (batch, seed, learning rate, data) does not matter. */
static pm_status check_model(const pm_pipe *pp, const char *path, const pm_ckpt_info *in,
                             pm_err *err) {
    const pm_gpt_config *a = &in->cfg.model, *b = &pp->cfg.model;
    if (a->vocab == b->vocab && a->ctx == b->ctx && a->dim == b->dim && a->heads == b->heads &&
        a->layers == b->layers)
        return PM_OK;
    return pm_errf(err, PM_ERR_ARG, "%s: the checkpoint's model (vocabulary %d, context %d, "
                   "width %d, %d heads, %d layers) is not the pipeline's (%d, %d, %d, %d, %d)",
                   path, a->vocab, a->ctx, a->dim, a->heads, a->layers, b->vocab, b->ctx, b->dim,
                   b->heads, b->layers);
}

/* What a process read of a checkpoint's header, to compare across ranks:
 * another file at the same path (a node's own copy, a file replaced
 * while loading) differs in some of these. */
static uint64_t header_id(const pm_ckpt_info *in) {
    uint64_t v[] = {in->version, (uint64_t)in->step, in->data_pos, in->data_seed, in->size,
                    in->data_id, in->sums[0], in->sums[1], in->sums[2]};
    return pm_fnv1a64(PM_FNV_OFFSET, v, sizeof v) | 1; /* never 0 (0: not compared) */
}

/* The root checks the parts each replica read: every replica reads all of
 * the parameters (each its own full set), and all of the moments too, or
 * under ZeRO-1 only its slices (which add up to the slabs over the
 * replicas). */
static pm_status check_read(pm_pipe *pp, const char *path, pm_err *err) {
    uint64_t sums[PM_CKPT_SLABS] = {0};
    pm_status st = PM_OK;
    for (int r = 0; r < pp->dp && !st; r++) {
        uint64_t *x = pp->ck_sums + r * PM_CKPT_SLABS;
        unsigned mask = PM_CKPT_MASK(PM_CKPT_PARAMS);
        if (!pp->pl->forward_only && !pp->pl->zero) mask = PM_CKPT_ALL;
        st = pm_ckpt_check_sums(path, &pp->ck_info, mask, x, err);
        for (int k = 0; k < PM_CKPT_SLABS; k++) sums[k] += x[k];
    }
    if (!st && !pp->pl->forward_only && pp->pl->zero)
        st = pm_ckpt_check_sums(path, &pp->ck_info, PM_CKPT_MASK(PM_CKPT_M) |
                                PM_CKPT_MASK(PM_CKPT_V), sums, err);
    return st;
}

pm_status pm_pipe_load(pm_pipe *pp, const char *path, uint64_t data_id, pm_ckpt_info *info,
                       pm_err *err) {
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    pm_err mine = {{0}};
    /* every process checks the header and the run, and the root that they
     * all read the same file */
    pm_status st = pm_ckpt_info_read(path, &pp->ck_info, &mine);
    if (!st && pp->pl->forward_only) st = check_model(pp, path, &pp->ck_info, &mine);
    else if (!st) st = pm_ckpt_check_run(path, &pp->ck_info, &pp->cfg, data_id, &mine);
    for (int g = pp->lo; g < pp->hi; g++) /* the devices have nothing to add yet */
        pp->dev[g].st = PM_OK, memset(pp->dev[g].sums, 0, sizeof pp->dev[g].sums);
    st = pm_pipe_gather_parts(pp, st, st ? 0 : header_id(&pp->ck_info), &mine);
    if ((st = pm_pipe_share_outcome(pp, st, &mine))) goto done;
    pp->ck_path = path;
    pm_pipe_run(pp, PM_RUN_LOAD, dev_ckpt);
    st = pm_pipe_gather_parts(pp, PM_OK, 0, &mine);
    if (!st && pm_root(pp)) st = check_read(pp, path, &mine);
    st = pm_pipe_share_outcome(pp, st, &mine);
    pp->ck_path = NULL;
    if (!st) {
        pp->step = pp->ck_info.step;
        if (info) *info = pp->ck_info;
    }
done:
    if (st && err) *err = mine;
    return st;
}
