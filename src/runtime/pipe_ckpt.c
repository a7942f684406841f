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

/* Whether device g writes (and counts the checksum of) slab k of stage s:
 * its share of it as [*first, *first + *count) of the stage. */
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

/* Runs on the device (its thread, or the rank): its part of a save or a
 * load, into dv->st / dv->err and dv->sums. */
static pm_status dev_ckpt(pm_pipe_dev *dv) {
    pm_pipe *pp = dv->pp;
    size_t n = pm_gpt_num_params(&pp->cfg.model);
    memset(dv->sums, 0, sizeof dv->sums);
    for (int s = 0; s < pp->S; s++) {
        if (pm_sched_stage_device(&pp->sched, s) != dv->d) continue;
        size_t base = pm_plan_stage_offset(pp->pl, s);
        for (int k = 0; k < slabs(pp); k++) {
            size_t first, count;
            int mine = writes(pp, dv->g, k, s, &first, &count);
            uint64_t part = 0;
            pm_status st;
            if (pp->run == PM_RUN_SAVE && !mine) continue;
            if (pp->run == PM_RUN_SAVE)
                st = pm_ckpt_write_part(pp->ck_tmp, n, k, base + first, slab_of(dv, k, s),
                                        count, &part, &dv->err);
            else /* every replica reads the parameters; moments where it keeps them */
                st = pm_ckpt_read_part(pp->ck_path, &pp->ck_info, k, base + first,
                                       slab_of(dv, k, s), count, &part, &dv->err);
            if (st) return dev_fail(dv, s, st);
            if (mine) dv->sums[k] += part;
        }
    }
    return PM_OK;
}

/* Runs every local device's part, then gathers the outcome and the
 * checksum parts at the root (the first failure's line wins). */
static pm_status run_parts(pm_pipe *pp, pm_run_kind kind, uint64_t sums[PM_CKPT_SLABS],
                           pm_err *err) {
    pm_pipe_run(pp, kind, dev_ckpt);
    return pm_pipe_gather_parts(pp, sums, err);
}

pm_status pm_pipe_save(pm_pipe *pp, const char *path, const pm_ckpt_meta *meta, pm_err *err) {
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    pm_err mine = {{0}};
    uint64_t sums[PM_CKPT_SLABS] = {0};
    char *tmp = NULL;
    pm_status st = pm_root(pp) ? pm_ckpt_create(path, meta, &tmp, &mine) : PM_OK;
    /* every process learns the temporary's name, or the root's failure */
    if ((st = pm_pipe_share_name(pp, st, &mine, &tmp))) goto done;
    pp->ck_tmp = tmp;
    st = run_parts(pp, PM_RUN_SAVE, sums, &mine);
    if (pm_root(pp)) {
        if (!st) st = pm_ckpt_commit(path, tmp, meta, sums, &mine);
        else pm_ckpt_abandon(tmp);
    }
    st = pm_pipe_share_outcome(pp, st, &mine);
done:
    pp->ck_tmp = NULL;
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

pm_status pm_pipe_load(pm_pipe *pp, const char *path, uint64_t data_id, pm_ckpt_info *info,
                       pm_err *err) {
    if (pp->dead) {
        if (err) *err = pp->dead_err;
        return pp->dead;
    }
    pm_err mine = {{0}};
    uint64_t sums[PM_CKPT_SLABS] = {0};
    pm_status st = pm_ckpt_info_read(path, &pp->ck_info, &mine);
    if (!st && pp->pl->forward_only) st = check_model(pp, path, &pp->ck_info, &mine);
    else if (!st) st = pm_ckpt_check_run(path, &pp->ck_info, &pp->cfg, data_id, &mine);
    if ((st = pm_pipe_share_outcome(pp, st, &mine))) goto done;
    pp->ck_path = path;
    st = run_parts(pp, PM_RUN_LOAD, sums, &mine);
    unsigned mask = pp->pl->forward_only ? PM_CKPT_MASK(PM_CKPT_PARAMS) : PM_CKPT_ALL;
    if (!st && pm_root(pp)) st = pm_ckpt_check_sums(path, &pp->ck_info, mask, sums, &mine);
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
