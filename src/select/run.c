/* run.c: the model-selection executor: D device threads and the scheduler
 * they share (pm_select_run, pm_select.h).
 *
 * A device thread loops: under the lock, ask the policy for a pass (the
 * same rules simulate.c simulates, joining aside), wait on the condition
 * variable if none is ready, mark the task running; outside the lock, run
 * the pass (pass.c); if it was the step's last, finish the step (loss, global norm
 * over the host gradients in index order, AdamW deferred to each shard's
 * next load, evaluation at intervals); under the lock, advance the task
 * and wake the others. A shard's state is on one device at a time, so it
 * is touched by one thread at a time; the lock hands it over.
 * Each pass is logged with the times its parts ended (pm_select_part), so
 * the log accounts for every moment of every device.
 *
 * Joining (shard policy, unless opts.no_join): a device with no ready pass
 * takes the next pass of a running task's step (t->next) while the earlier
 * ones still run, if no device runs a pass on that pass's shard and no
 * device keeps it for itself (its copy thread prefetching that shard).
 * Pass k's microbatch j needs only pass k - 1's microbatch j (the host's
 * boundary tensors), so the joined pass waits per microbatch (pass.c,
 * t->mb) and the step's passes flow over the devices as a wavefront; each
 * pass still computes exactly what it computes alone, in the same order,
 * so results stay bitwise. The shard's state (and updated, zeroed, version)
 * belongs to the one device running a pass on it (t->inuse); the step's
 * last pass waits for every other pass to end before the global norm, and
 * a step starts only when the last one ended (step ends are barriers).
 *
 * Invariants: t->running counts the devices holding a task (running one of
 * its passes, or having claimed it for their next), changed only under the
 * lock; the policy picks only a task no device holds, a join only a task
 * one of whose passes runs (t->pass < t->next); t->inuse[s] is set while a
 * pass on shard s runs, and only then is the shard's state written. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "select/internal.h"
#include "data/loader.h"
#include "train/optim.h"
#include "parts.h"

#define RATE 50e9 /* FLOP/s a device is assumed to do before any pass is measured */


typedef struct {
    sel_run *r;
    int d;
} dev_arg;

static int finished(const sel_task *t) { return t->state != PM_SELECT_RUNNING; }

/* FLOPs of pass k of t's current round (the backward reruns the
 * forward; an evaluation's is a forward). */
static double pass_flops(const sel_task *t, int k) {
    const pm_shard *sh = &t->task->shard[sel_round_shard(t, k)];
    sel_kind kind = sel_round_kind(t, k);
    double fl = kind == SEL_EVAL                  ? sh->flops_eval
                : kind == SEL_F                   ? sh->flops_f
                : kind == SEL_FUSED               ? sh->flops_f + sh->flops_bw
                                                  : 2 * sh->flops_f + sh->flops_bw;
    return fl * sel_round_micro(t, k);
}

/* Seconds per FLOP for what task t has not measured yet: its own passes'
 * measured rate, else every pass's so far, else an assumed 50 GFLOP/s. */
static double sec_per_flop(const sel_run *r, const sel_task *t) {
    double fl = 0, sec = 0;
    for (int k = 0; k < 2 * t->S - 1; k++) fl += (double)t->cnt[k] * t->fl[k], sec += t->sec[k];
    if (fl > 0) return sec / fl;
    return r->sec_done > 0 ? r->sec_done / r->fl_done : 1 / RATE;
}

/* Host work (evaluation, checkpoint: end_step's host_work) after the steps
 * after `done` up to stop_at: at every eval_every-th and at the last. */
static int64_t evals_after(const sel_run *r, const sel_task *t, int64_t done) {
    int64_t every = r->o->eval_every, end = t->stop_at;
    if (done >= end) return 0;
    if (every <= 0) return 1;
    return end / every - done / every + (end % every != 0);
}

/* Sharded-LRTF's estimate of task t's seconds left after `adv` more of its
 * passes (sel_est_left on its measured times; with opts.est_step_s, on the
 * step time given, shared among a step's passes by FLOPs). During an
 * evaluation's round: its evaluations and steps after it. */
double sel_time_left(const sel_run *r, const sel_task *t, int adv) {
    int np = 2 * t->S - 1, pass = t->ev ? np : t->pass + adv;
    int64_t done = t->done + (pass >= np && !t->ev);
    if (pass >= np) pass -= np;
    sel_est e = {np, pass, t->fl, t->sec, t->cnt, 0, 0, -1, t->fl_eval,
                 t->stop_at - done - 1, evals_after(r, t, done)};
    if (r->o->est_step_s) {
        double fl = 0;
        for (int k = 0; k < np; k++) fl += t->fl[k];
        e.cnt = NULL, e.spf = r->o->est_step_s[t->index] / fl, e.eval = 0;
        return sel_est_left(&e);
    }
    e.spf = sec_per_flop(r, t);
    e.after = t->after_n ? t->after_s / (double)t->after_n : 0;
    e.eval = t->eval_n ? t->eval_s / (double)t->eval_n : -1;
    return sel_est_left(&e);
}

/* Sharded-LRTF in the run. Ready: neither running, finished nor waiting at
 * a rung, or `cont`, the task device d is running, deciding now what
 * follows its pass (its time left then counts from after that pass). Here:
 * `own`, the task on the device, or a task whose next shard, current, the
 * device holds. First: a task not yet measured over a whole step, so every
 * task's times are known early (Hydra measures a minibatch of each first). */
typedef struct {
    const sel_run *r;
    int d, cont, own;
} run_pick;

static int run_ready(const void *ctx, int i) {
    const run_pick *c = ctx;
    const sel_task *t = &c->r->t[i];
    return i == c->cont || (!t->running && !finished(t) && !t->at_rung && !t->away);
}

static double run_left(const void *ctx, int i) {
    const run_pick *c = ctx;
    return sel_time_left(c->r, &c->r->t[i], i == c->cont);
}

static int run_here(const void *ctx, int i) {
    const run_pick *c = ctx;
    const sel_task *t = &c->r->t[i];
    return i == c->own || sel_resident(&c->r->dev[c->d], t, sel_pass_shard(t->S, t->pass)) >= 0;
}

static int run_first(const void *ctx, int i) {
    const run_pick *c = ctx;
    const sel_task *t = &c->r->t[i];
    return !c->r->o->est_step_s && t->cnt[2 * t->S - 2] == 0;
}

static int pick_shard(sel_run *r, int d, int cont, int own) {
    run_pick c = {r, d, cont, own};
    sel_lrtf q = {run_ready, run_left, run_here, run_first, &c};
    return sel_lrtf_pick(&q, r->n);
}

static int pick_task(sel_run *r, int d) {
    int best = -1;
    for (int i = 0; i < r->n; i++) {
        sel_task *t = &r->t[i];
        if (t->running || finished(t) || t->at_rung || t->away) continue;
        if (r->owner[i] == d) return i;
        if (r->owner[i] < 0 &&
            (best < 0 || sel_time_left(r, t, 0) > sel_time_left(r, &r->t[best], 0)))
            best = i;
    }
    if (best >= 0) r->owner[best] = d;
    return best;
}

static int pick_sequential(sel_run *r, int d) {
    if (r->busy_global) return -1;
    for (int i = 0; i < r->n; i++) {
        sel_task *t = &r->t[i];
        if (finished(t) || t->at_rung || t->away) continue;
        return sel_round_shard(t, t->pass) % r->o->devices == d ? i : -1;
    }
    return -1;
}

/* Every task finished (across ranks: every task here, and no more to
 * come). */
static int all_finished(const sel_run *r) {
    for (int i = 0; i < r->n; i++)
        if (!finished(&r->t[i]) && !r->t[i].away) return 0;
    return !r->link || !r->link->ops->open(r);
}

static void emit(sel_run *r, int task, int kind, double loss, double val) {
    if (!r->o->report && !r->link) return;
    sel_task *t = &r->t[task];
    char why[sizeof t->why];
    pthread_mutex_lock(&r->why_mu); /* another pass of the task may be failing now */
    memcpy(why, t->why, sizeof why);
    pthread_mutex_unlock(&r->why_mu);
    pm_select_event ev = {.task = task, .step = t->host->step, .loss = loss, .val_loss = val,
                          .elapsed = pm_now() - r->t0, .busy = r->stats->busy, .kind = kind,
                          .why = kind >= PM_SELECT_EV_FAILED ? why : NULL};
    if (r->link) r->link->ops->event(r, &ev); /* rank 0 reports every rank's */
    else r->o->report(r->o->report_ctx, &ev);
}

/* The work at a step's end that needs the task's whole state in RAM (the
 * --stop-after interruption, checkpoints), a spilled state brought in and
 * out; evaluated: after its round. Returns the event to report. */
static int host_work(sel_run *r, sel_task *t, int end, int evaluated, int stop, int *state) {
    if (!stop && !r->o->save_dir) /* nothing needs the state whole */
        return end ? (*state = PM_SELECT_DONE, PM_SELECT_EV_DONE)
                   : evaluated ? PM_SELECT_EV_EVAL : PM_SELECT_EV_STEP;
    if (sel_store_materialize(t)) return *state = PM_SELECT_FAILED, PM_SELECT_EV_FAILED;
    sel_flush_updates(t);
    int kind = end ? PM_SELECT_EV_DONE : evaluated ? PM_SELECT_EV_EVAL : PM_SELECT_EV_STEP;
    if (stop) { /* interrupted on purpose, saved where it stands (train --stop-after) */
        snprintf(t->why, sizeof t->why, "interrupted after step %lld (stop_after)",
                 (long long)t->host->step);
        *state = PM_SELECT_STOPPED, kind = PM_SELECT_EV_STOPPED;
    }
    if (r->o->save_dir && sel_record_save(r->o->save_dir, t))
        *state = PM_SELECT_FAILED, kind = PM_SELECT_EV_FAILED;
    else if (end && !stop) *state = PM_SELECT_DONE;
    if (sel_store_release(t)) return *state = PM_SELECT_FAILED, PM_SELECT_EV_FAILED;
    return kind;
}

/* After the step's last pass (task running, lock not held): the loss and
 * the global norm; at intervals and at the end *eval is set (an
 * evaluation's round of passes follows, the step's report after it), else
 * the host work. Returns the event to report; *state gets the task's new
 * state, which the caller sets under the lock (other devices read it
 * there). */
static int end_step(sel_run *r, sel_task *t, double *loss, int *state, double *step_end, int *hw,
                    int *eval) {
    pm_trainer *h = t->host;
    double norm = 0;
    *loss = t->loss_sum / t->K;
    *state = PM_SELECT_RUNNING;
    /* the units' sums in unit order, as pm_optim_norm adds them */
    for (int u = 0; u < t->ufirst[t->S]; u++) norm += t->usum[u];
    norm = sqrt(norm);
    *step_end = pm_now(); /* the rest is evaluation's (PM_PART_EVAL) */
    if (!isfinite(*loss) || !isfinite(norm)) {
        char hint[200];
        snprintf(t->why, sizeof t->why, "step %lld: loss %g, gradient norm %g is not finite; "
                 "%s", (long long)h->step + 1, *loss, norm,
                 pm_optim_diverged_hint(&h->cfg.opt, "its ", hint, sizeof hint));
        *state = PM_SELECT_FAILED;
        return PM_SELECT_EV_FAILED;
    }
    t->gscale = pm_optim_clip_scale(norm, h->cfg.opt.grad_clip);
    t->last_loss = *loss;
    h->step++;
    int end = h->step >= t->stop_at;
    int stop = !end && r->o->stop_after > 0 && h->step >= r->o->stop_after;
    int ev = (r->o->eval_every > 0 && h->step % r->o->eval_every == 0) ||
             sel_asha_due(&r->asha, t);
    if (!end && !stop && !ev) return PM_SELECT_EV_STEP;
    if (!stop && r->o->val) return *eval = 1, PM_SELECT_EV_STEP;
    *hw = 1;
    return host_work(r, t, end, 0, stop, state);
}

/* After an evaluation round's last pass (lock not held): the validation
 * loss (the microbatches' losses added in order, over their count, as
 * pm_trainer_eval gives it), then the host work. */
static int end_eval(sel_run *r, sel_task *t, double *val, int *state, int *hw) {
    *val = t->ev_sum / t->ev_batches;
    *state = PM_SELECT_RUNNING;
    t->val_loss = *val;
    t->val_step = t->host->step;
    *hw = r->o->save_dir != NULL;
    return host_work(r, t, t->host->step >= t->stop_at, 1, 0, state);
}

static int pick(sel_run *r, int d) {
    switch (r->o->policy) {
    case PM_POLICY_SHARD: return pick_shard(r, d, -1, r->dev[d].ran);
    case PM_POLICY_TASK: return pick_task(r, d);
    default: return pick_sequential(r, d);
    }
}

/* ---- successive halving -------------------------------------------------- */

/* Under the lock: task i (no device runs it) stops early, `by` halving or
 * ASHA: its pending updates go to the host, so it ends as saved, and a
 * marker in the save directory keeps a resumed sweep from reviving it. */
void sel_stop_early(sel_run *r, int i, const char *by) {
    sel_task *t = &r->t[i];
    if (!sel_store_materialize(t)) { /* else it stays as its last save left it */
        sel_flush_updates(t);
        sel_store_release(t);
    }
    t->state = PM_SELECT_STOPPED;
    snprintf(t->why, sizeof t->why, "by %s after step %lld", by, (long long)t->host->step);
    if (r->o->save_dir) sel_record_stop(r->o->save_dir, t);
    emit(r, i, PM_SELECT_EV_STOPPED, t->last_loss, t->val_loss);
}

/* Under the lock: once every unfinished task has evaluated at this round
 * (at_rung), the best ceil(k / halving) of the k by validation loss (ties
 * to the lower index, a loss that is not a number last) go on and the rest
 * stop; their pending updates go to the host, so they end as saved. */
static void halve(sel_run *r) {
    int k = 0, *idx = r->rank;
    for (int i = 0; i < r->n; i++) {
        if (finished(&r->t[i])) continue;
        if (!r->t[i].at_rung) return;
        idx[k++] = i;
    }
    if (!k) return;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0; b--) {
            double x = r->t[idx[b - 1]].val_loss, y = r->t[idx[b]].val_loss;
            if (!((isnan(x) && !isnan(y)) || y < x)) break;
            int z = idx[b];
            idx[b] = idx[b - 1], idx[b - 1] = z;
        }
    int keep = (k + r->o->halving - 1) / r->o->halving;
    for (int j = 0; j < k; j++) {
        r->t[idx[j]].at_rung = 0;
        if (j >= keep) sel_stop_early(r, idx[j], "halving");
    }
}

/* ---- ASHA (asha.c decides) ----------------------------------------------- */

/* Under the lock: what ASHA promotes now goes on, what it stops stops. */
static void asha_settle(sel_run *r) {
    int k = sel_asha_decide(&r->asha, r->t, r->rank);
    for (int j = 0; j < k; j++) sel_stop_early(r, r->rank[j], "ASHA");
}

/* Under the lock, after task t's step ended with event kind: a report at
 * its rung, then ASHA's decisions (an ended or failed task can close a
 * rung too). */
static void asha_step(sel_run *r, sel_task *t, int kind, double val) {
    int due = kind == PM_SELECT_EV_EVAL && sel_asha_due(&r->asha, t);
    if (due) sel_asha_report(&r->asha, t, val);
    if (r->link && due) r->link->ops->rung(r, t, val); /* rank 0 decides for every rank */
    else if (!r->link) asha_settle(r);
}

/* ---- prefetch (the copy thread is device.c's) --------------------------- */

/* Task t has a pass after its running one k that it can run at once (not
 * its last, not stopped by stop_after, not waiting at a halving rung). */
static int has_next(const sel_run *r, const sel_task *t, int k) {
    if (k < sel_round_passes(t) - 1) return 1;
    if (t->ev) return t->done < t->stop_at; /* the next step, unless that was the last */
    int64_t s = t->done + 1;
    if (s >= t->stop_at || (r->o->stop_after > 0 && s >= r->o->stop_after)) return 0;
    return !(r->o->halving > 1 && r->o->eval_every > 0 && s % r->o->eval_every == 0);
}

/* Under the lock, with task cur running on d: the task d runs after cur's
 * pass, decided now so that its shard can be copied in meanwhile (shard
 * policy with prefetch): Sharded-LRTF over the ready tasks and cur itself.
 * cur: it continues (the task already on the device, as Hydra prefers).
 * Another: claimed, which holds it back from the other devices, so only
 * while at least one other ready task remains for each of them. -1: the
 * choice is made when the pass ends. */
static int claim_next(sel_run *r, int d, int cur, int k) {
    if (r->o->policy != PM_POLICY_SHARD) return -1;
    int y = pick_shard(r, d, has_next(r, &r->t[cur], k) ? cur : -1, cur);
    if (y < 0 || y == cur) return y;
    int ready = 0;
    for (int i = 0; i < r->n; i++)
        ready += !r->t[i].running && !finished(&r->t[i]) && !r->t[i].at_rung && !r->t[i].away;
    if (ready < r->o->devices) return -1;
    r->t[y].running = 1;
    return y;
}

/* Under the lock, joining: every device works and has a task of its own
 * to go on with (no fewer unfinished tasks than devices), so none is
 * about to join: only then may a device keep its task's next pass for its
 * prefetch (a device soon free would wait for it: one task on 2 devices
 * left one idle for a whole pass). */
static int all_busy(const sel_run *r) {
    if (r->active < r->o->devices) return 0;
    int open = 0;
    for (int i = 0; i < r->n && open < r->o->devices; i++)
        open += !finished(&r->t[i]) && !r->t[i].at_rung;
    return open >= r->o->devices;
}

/* Under the lock, device d having taken pass k of cur: start copying what
 * runs after it into the slot cur does not use: the claimed task's next
 * shard, or else (cur continues, or nothing was decided) cur's own next
 * shard within the step (not after the step's last pass: the next step
 * starts on the shard just run, and an evaluation may rewrite every shard
 * on the host). cur's next pass is then kept for d (t->pf_pass) until d's
 * pass ends and its copy is done: no device writes a shard the copy thread
 * reads. So with joining, not while a device waits for work (it may join
 * that pass instead), nor when a device runs a pass on that shard. */
static void prefetch(sel_run *r, int d, sel_task *cur, int k, int slot, int y) {
    sel_dev *dv = &r->dev[d];
    if (y == cur->index) y = -1;
    sel_task *t = y >= 0 ? &r->t[y] : cur;
    int kk = y >= 0 ? t->next : k + 1;
    if (y < 0 && (kk >= sel_round_passes(cur) || (r->join && !all_busy(r)))) return;
    int s = sel_round_shard(t, kk);
    if (y < 0 && (s == sel_round_shard(cur, k) || t->inuse[s])) return;
    if (y < 0) cur->pf_pass = kk, cur->pf_dev = d;
    /* the shard's update is pending (no pass on it runs: what the lock
     * published is what its last pass left) */
    int whole = t->updated[s] < t->done;
    if (sel_resident(dv, t, s) == (slot ^ 1) && (dv->res_whole[slot ^ 1] || !whole)) return;
    sel_copy_start(dv, t, s, slot ^ 1, whole);
}

/* Under the lock, device d having taken task cur: whether its copy thread
 * prefetches for what follows (pm_select_prefetch). Auto: when a core is
 * free of working devices (this one counted), or cur bounds the makespan:
 * the most time left, and at least every task's left over D (running ones
 * too: time_left reads only what the lock guards). */
static int use_prefetch(const sel_run *r, int d, int cur) {
    if (r->dev[d].slots < 2 || r->o->policy == PM_POLICY_SEQUENTIAL) return 0;
    if (r->o->prefetch != PM_PREFETCH_AUTO) return r->o->prefetch == PM_PREFETCH_ON;
    if (r->active < r->cores) return 1;
    double mine = sel_time_left(r, &r->t[cur], 0), total = 0;
    for (int i = 0; i < r->n; i++) {
        if (finished(&r->t[i]) || r->t[i].away) continue;
        double l = sel_time_left(r, &r->t[i], 0);
        if (l > mine) return 0;
        total += l;
    }
    return mine * r->o->devices >= total;
}

static int interrupted(const sel_run *r) { return r->o->interrupt && atomic_load(r->o->interrupt); }

/* Under the lock, after an interrupt: every unfinished task no device is
 * running (and `mine`, which this device had claimed) stops where its last
 * step ended. */
static void stop_idle(sel_run *r, int mine) {
    for (int k = 0; k < r->n; k++) {
        sel_task *t = &r->t[k];
        if (finished(t) || t->away || (t->running && k != mine)) continue;
        t->running = 0;
        t->state = PM_SELECT_STOPPED;
        snprintf(t->why, sizeof t->why, "interrupted after step %lld", (long long)t->host->step);
    }
    pthread_cond_broadcast(&r->cv);
}

/* Under the lock: whether device d may join task t now: one of its passes
 * runs, the step's next pass is not taken, its shard is not on a device,
 * and no other device keeps that pass for itself. */
static int joinable(const sel_run *r, const sel_task *t, int d) {
    return r->join && !finished(t) && !t->at_rung && !t->away && t->pass < t->next &&
           t->next < sel_round_passes(t) && !t->inuse[sel_round_shard(t, t->next)] &&
           (t->pf_pass != t->next || t->pf_dev == d);
}

/* Under the lock, device d having no ready task: the joinable task with the
 * most time left (Sharded-LRTF's order), or -1. */
static int pick_join(const sel_run *r, int d) {
    int best = -1;
    for (int i = 0; i < r->n; i++)
        if (joinable(r, &r->t[i], d) &&
            (best < 0 || sel_time_left(r, &r->t[i], 0) > sel_time_left(r, &r->t[best], 0)))
            best = i;
    return best;
}

/* Under the lock: device d takes pass t->next of task i (held: it claimed
 * the task before, so it is counted in running already). A step's first
 * pass starts the step's microbatch counts. Returns the pass. */
static int take(sel_run *r, int i, int held) {
    sel_task *t = &r->t[i];
    int k = t->next;
    if (k == 0) {
        memset(t->mb, 0, (size_t)sel_round_passes(t) * sizeof *t->mb);
        memset(t->fin, 0, (size_t)sel_round_passes(t));
    }
    t->next = k + 1;
    t->running += !held;
    t->inuse[sel_round_shard(t, k)] = 1;
    r->busy_global = 1;
    if (r->join) pthread_cond_broadcast(&r->cv); /* its next pass may be joined now */
    return k;
}

/* Under the lock, joining: the start gate. A device's first choice is
 * counted (*first cleared); one that took a pass waits until every device
 * has chosen, so no first pass starts before the others could join it
 * (with one task and D devices, the later ones join it at once). */
static void gate(sel_run *r, int *first, int took) {
    if (!r->join || !*first) return;
    *first = 0;
    r->gated++;
    pthread_cond_broadcast(&r->cv);
    while (took && r->gated < r->gate_n) pthread_cond_wait(&r->cv, &r->mu);
}

/* Under the lock: the next task for device d and the pass it runs (*k),
 * taken, or -1 when every task is finished or the run was interrupted
 * (this device then ends; the others end after their running passes).
 * *claimed: the task chosen at the last pass (held: claimed for d, else
 * the task d ran, which it continues, by joining if another device runs a
 * pass of it). *joined: d joined the task. *first: d has not chosen yet
 * (gate). */
static int next_task(sel_run *r, int d, int *claimed, int held, int *k, int *joined,
                     int *first) {
    int i = *claimed;
    *claimed = -1;
    *joined = 0;
    for (;;) {
        if (interrupted(r)) {
            stop_idle(r, held ? i : -1);
            gate(r, first, 0);
            return -1;
        }
        if (i >= 0 && (finished(&r->t[i]) || r->t[i].at_rung)) { /* it ended or waits at a
                                                                     rung */
            r->t[i].running -= held;
            i = -1;
        }
        if (i >= 0) {
            const sel_task *t = &r->t[i];
            if (held || !t->running) break;
            if (joinable(r, t, d)) {
                *joined = 1;
                break;
            }
            i = -1; /* another device runs it and its next pass cannot be joined now */
        }
        held = 0;
        if (all_finished(r)) {
            gate(r, first, 0);
            return -1;
        }
        if ((i = pick(r, d)) >= 0) break;
        if ((i = pick_join(r, d)) >= 0) {
            *joined = 1;
            break;
        }
        gate(r, first, 0);
        pthread_cond_wait(&r->cv, &r->mu);
    }
    *k = take(r, i, held);
    gate(r, first, 1);
    return i;
}

/* Under the lock, after pass k of t ended on device d: the round's
 * bookkeeping. Its first pass not yet ended moves on (passes of one round
 * can end out of order when joined); after the round's last, the next
 * round (an evaluation's if `eval`, else a step's) starts at pass 0. A
 * failed pass marks the task broken, so the passes waiting for its
 * microbatches give up. */
static void pass_ended(sel_run *r, sel_task *t, int d, int k, int last, int bad, int eval) {
    t->fin[k] = 1;
    t->inuse[sel_round_shard(t, k)] = 0;
    if (t->pf_dev == d) t->pf_pass = t->pf_dev = -1; /* its copy is done (sel_copy_wait) */
    if (bad) t->broken = 1;
    if (last && !bad) t->pass = t->next = 0, t->ev = eval;
    else
        while (t->pass < t->next && t->fin[t->pass]) t->pass++;
    t->running--;
    pthread_cond_broadcast(&r->flow);
}

/* The least time task t can take, from its measured work. Its step ends
 * run alone. Its passes, joined, run on at most min(D, S) devices at once
 * (one per shard); their compute may run on as many (a backward recomputes
 * its forward and does its W beside its neighbours, whatever the
 * microbatches). Not joined, one pass at a time: all of its work. */
double sel_task_bound(const sel_run *r, const sel_task *t) {
    if (!r->join) return t->work;
    return t->work - t->busy + t->busy / fmin(r->o->devices, t->S);
}

/* A round's first pass, before it runs (no other pass of the task runs):
 * a step draws its batch; an evaluation its validation microbatches, from
 * a loader restarted at the same place every time (pm_trainer_eval's).
 * 1 if the loader cannot be made (t->why says). */
static int round_start(const sel_run *r, sel_task *t) {
    pm_trainer *h = t->host;
    if (!t->ev) {
        pm_loader_next(&h->train, h->cfg.batch, h->inp, h->tgt);
        t->loss_sum = 0;
        return 0;
    }
    pm_loader ld;
    pm_err e;
    if (pm_loader_init(&ld, r->o->val, h->cfg.model.ctx, h->cfg.seed ^ PM_VAL_SEED, "val.bin",
                       &e)) {
        pthread_mutex_lock(t->why_mu);
        snprintf(t->why, sizeof t->why, "evaluation: %.140s", e.msg);
        pthread_mutex_unlock(t->why_mu);
        return 1;
    }
    pm_loader_next(&ld, t->ev_batches * (h->cfg.batch / h->cfg.micro), t->ev_inp, t->ev_tgt);
    t->ev_sum = 0;
    return 0;
}

static void *device_main(void *arg) {
    dev_arg *a = arg;
    sel_run *r = a->r;
    int d = a->d, claimed = -1, held = 0, k, joined, first = 1;
    sel_dev *dv = &r->dev[d];
    pm_blas_threads(1);
    pthread_mutex_lock(&r->mu);
    for (int i; (i = next_task(r, d, &claimed, held, &k, &joined, &first)) >= 0;) {
        sel_task *t = &r->t[i];
        r->active++;
        int pf = use_prefetch(r, d, i), y = pf ? claim_next(r, d, i, k) : -1;
        int slot = sel_pick_slot(dv, t, sel_round_shard(t, k)), ev = t->ev;
        if (pf) prefetch(r, d, t, k, slot, y);
        pthread_mutex_unlock(&r->mu);
        double t0 = pm_now(), mark[3] = {-1, -1, -1}, flow = 0;
        int bad = k == 0 && round_start(r, t); /* no other pass of the task runs */
        if (!bad) bad = sel_run_pass(t, dv, r->lay, k, slot, mark, &flow);
        int last = k == sel_round_passes(t) - 1 || bad, kind = PM_SELECT_EV_STEP, hw = 0;
        int state = bad ? PM_SELECT_FAILED : PM_SELECT_RUNNING, eval = 0;
        double loss = t->last_loss, val = NAN, t1 = pm_now(), step_end = t1, c0, c1;
        if (bad) kind = PM_SELECT_EV_FAILED; /* its store failed (t->why says how), or
                                                a pass it waited for did */
        else if (last && ev) kind = end_eval(r, t, &val, &state, &hw);
        else if (last) kind = end_step(r, t, &loss, &state, &step_end, &hw, &eval);
        double w0 = pm_now();
        sel_copy_wait(dv, &c0, &c1);
        double w1 = pm_now(), dt = t1 - t0 - flow; /* its waits for other devices: WAIT */
        for (int m = 0; m < 3; m++) /* a pass that failed in its load: all of it load */
            if (mark[m] < 0) mark[m] = t1;
        pthread_mutex_lock(&r->mu);
        /* a task fails once; a step that evaluates reports after the round */
        int report = last && !eval && t->state == PM_SELECT_RUNNING;
        if (state != PM_SELECT_RUNNING) t->state = state;
        t->busy += dt;
        t->work += dt + (w0 - t1);
        if (t->first_start < 0) t->first_start = t0 - r->t0;
        t->last_end = fmax(t->last_end, t1 - r->t0);
        t->passes_done++;
        r->fl_done += pass_flops(t, k), r->sec_done += dt;
        if (ev) t->ev_busy += dt; /* what LRTF knows of it: */
        else t->sec[k] += dt, t->cnt[k]++;
        if (last && !bad && !ev) t->after_s += step_end - t1, t->after_n++;
        if (last && !bad && ev) t->eval_s += t->ev_busy, t->eval_n++, t->ev_busy = 0;
        if (hw) t->eval_s += w0 - step_end, t->eval_n += !ev;
        dv->ran = i;
        r->stats->busy[d] += dt;
        r->stats->joined += joined;
        int64_t at = r->stats->nlog++;
        PM_ASSERT(at < r->log_cap);
        double z = r->t0;
        r->stats->log[at] = (pm_select_pass){
            .dev = d, .task = i, .shard = sel_round_shard(t, k),
            .kind = (int)sel_round_kind(t, k), .start = t0 - z, .end = t1 - z,
            .loaded = mark[0] - z, .updated = mark[1] - z, .computed = mark[2] - z,
            .step_end = step_end - z, .eval_end = w0 - z, .wait0 = w0 - z, .wait1 = w1 - z,
            .copy0 = c0 > 0 ? c0 - z : 0, .copy1 = c0 > 0 ? c1 - z : 0, .flow = flow,
            .joined = joined};
        pass_ended(r, t, d, k, last, bad, eval);
        t->done = t->host->step;
        r->busy_global = 0;
        r->active--;
        claimed = y, held = y >= 0 && y != i;
        if (report) emit(r, i, kind, loss, val);
        if (report && r->o->halving > 1) {
            t->at_rung = kind == PM_SELECT_EV_EVAL;
            halve(r);
        } else if (report && r->o->asha > 1) {
            asha_step(r, t, kind, val);
        }
        pthread_cond_broadcast(&r->cv);
    }
    r->live--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Across ranks, the main thread (the one MPI speaks to) serves the link
 * while the devices run, and after, until the link is done. */
static void serve_link(sel_run *r) {
    long ns = 0;
    pthread_mutex_lock(&r->mu);
    while (!r->link->ops->done(r)) {
        int before = r->live;
        r->link->ops->pump(r);
        pthread_mutex_unlock(&r->mu);
        /* polled: 20 us growing to 1 ms while nothing happens */
        ns = ns ? (ns * 2 > 1000000 ? 1000000 : ns * 2) : 20000;
        nanosleep(&(struct timespec){0, ns}, NULL);
        pthread_mutex_lock(&r->mu);
        if (r->live != before) ns = 0;
    }
    pthread_mutex_unlock(&r->mu);
}

/* Each device's time by part, from the log (a device's entries follow one
 * another in time): what the entries cover, and IDLE the rest. */
static void account(pm_select_stats *st) {
    for (int64_t k = 0; k < st->nlog; k++) {
        const pm_select_pass *p = &st->log[k];
        double *q = st->part + (size_t)p->dev * PM_PART_COUNT;
        if (p->kind == SEL_EVAL) /* all of an evaluation's pass is evaluation */
            q[PM_PART_EVAL] += p->end - p->start - p->flow;
        else {
            q[PM_PART_LOAD] += p->loaded - p->start;
            q[PM_PART_ADAMW] += p->updated - p->loaded;
            q[PM_PART_COMPUTE] += p->computed - p->updated - p->flow;
            q[PM_PART_STORE] += p->end - p->computed;
        }
        q[PM_PART_STEP] += p->step_end - p->end;
        q[PM_PART_EVAL] += p->eval_end - p->step_end;
        q[PM_PART_WAIT] += p->wait1 - p->wait0 + p->flow;
    }
    for (int d = 0; d < st->devices; d++) {
        double *q = st->part + (size_t)d * PM_PART_COUNT, sum = 0;
        for (int k = 0; k < PM_PART_IDLE; k++) sum += q[k];
        q[PM_PART_IDLE] = st->makespan_s - sum;
    }
}

void pm_select_stats_free(pm_select_stats *s) {
    if (!s) return;
    pm_free(s->peak);
    pm_free(s->busy);
    pm_free(s->wait);
    pm_free(s->part);
    pm_free(s->log);
    *s = (pm_select_stats){0};
}

static void tasks_free(sel_task *t, int n) {
    for (int i = 0; t && i < n; i++) {
        sel_store_close(&t[i]); /* after an early error: the state written out */
        pm_free(t[i].act);
        pm_free(t[i].grad);
        pm_free(t[i].updated);
        pm_free(t[i].zeroed);
        pm_free(t[i].version);
        pm_free(t[i].fl);
        pm_free(t[i].sec);
        pm_free(t[i].cnt);
        pm_free(t[i].mb);
        pm_free(t[i].fin);
        pm_free(t[i].inuse);
        pm_free(t[i].usum);
        pm_free(t[i].ufirst);
        pm_free(t[i].ev_inp);
        pm_free(t[i].ev_tgt);
        pm_free(t[i].ev_act);
    }
    pm_free(t);
}

/* Task t's evaluation rounds (with validation tokens): its chunks, their
 * tokens and boundary outputs. 1 if out of memory. */
static int eval_init(const sel_run *r, sel_task *t) {
    const pm_train_cfg *c = &t->host->cfg;
    int E = r->o->val && r->o->eval_batches > 0 ? r->o->eval_batches : 1;
    size_t mtok = (size_t)(c->batch / c->micro) * (size_t)c->model.ctx;
    t->ev_batches = E;
    t->ev_micro = E < SEL_EVAL_CHUNK ? E : SEL_EVAL_CHUNK;
    t->ev_chunks = (E + t->ev_micro - 1) / t->ev_micro;
    if (!r->o->val) return 0;
    t->ev_inp = pm_malloc((size_t)E * mtok * sizeof(int32_t));
    t->ev_tgt = pm_malloc((size_t)E * mtok * sizeof(int32_t));
    t->ev_act = pm_malloc((size_t)(t->S > 1 ? t->S - 1 : 1) * (size_t)t->ev_micro * t->nc *
                          sizeof(float));
    return !t->ev_inp || !t->ev_tgt || !t->ev_act;
}

static pm_status tasks_init(sel_run *r, pm_select_task *tasks, pm_trainer *hosts,
                            pm_err *err) {
    r->t = pm_calloc((size_t)r->n, sizeof *r->t);
    if (!r->t) return pm_errf(err, PM_ERR_NOMEM, "out of memory for %d tasks", r->n);
    for (int i = 0; i < r->n; i++) {
        sel_task *t = &r->t[i];
        const pm_train_cfg *c = &hosts[i].cfg;
        if (tasks[i].nshard < 1 || memcmp(&c->model, &tasks[i].cfg.model, sizeof c->model))
            return pm_errf(err, PM_ERR_ARG, "task %s: not partitioned for its trainer's model",
                           tasks[i].name);
        int S = tasks[i].nshard, K = c->micro, E = r->o->eval_batches > 0 ? r->o->eval_batches : 1;
        size_t nc = (size_t)(c->batch / K) * (size_t)c->model.ctx * (size_t)c->model.dim;
        size_t nb = (size_t)(S > 1 ? S - 1 : 1) * (size_t)K * nc;
        /* passes of a round: a step's 2S - 1, or an evaluation's chunks' S each */
        size_t np = (size_t)(2 * S - 1);
        size_t ne = (size_t)((E + SEL_EVAL_CHUNK - 1) / SEL_EVAL_CHUNK) * (size_t)S;
        np = np > ne ? np : ne;
        *t = (sel_task){.task = &tasks[i], .index = i, .host = &hosts[i], .S = S, .K = K,
                        .nc = nc, .done = hosts[i].step, .act = pm_malloc(nb * sizeof(float)),
                        .grad = pm_malloc(nb * sizeof(float)), .stop_at = c->opt.steps,
                        .val_loss = r->o->prior_val ? r->o->prior_val[i] : NAN,
                        .last_loss = r->o->prior_loss ? r->o->prior_loss[i] : NAN,
                        .val_step = r->o->prior_val ? hosts[i].step : -1, .first_start = -1,
                        .updated = pm_malloc((size_t)S * sizeof(int64_t)),
                        .zeroed = pm_malloc((size_t)S * sizeof(int64_t)),
                        .version = pm_calloc((size_t)S, sizeof(uint64_t)),
                        .fl = pm_malloc((size_t)(2 * S - 1) * sizeof(double)),
                        .sec = pm_calloc((size_t)(2 * S - 1), sizeof(double)),
                        .cnt = pm_calloc((size_t)(2 * S - 1), sizeof(int64_t)),
                        .mb = pm_calloc(np, sizeof(int)), .fin = pm_calloc(np, 1),
                        .inuse = pm_calloc((size_t)S, 1), .pf_pass = -1, .pf_dev = -1};
        t->ufirst = pm_malloc((size_t)(S + 1) * sizeof(int));
        if (t->ufirst)
            for (int s = 0; s <= S; s++)
                t->ufirst[s] = pm_optim_units(&c->model, 0, s < S ? tasks[i].shard[s].first
                                                                  : pm_gpt_num_layers(&c->model));
        t->usum = t->ufirst ? pm_malloc((size_t)(t->ufirst[S] + 1) * sizeof(double)) : NULL;
        if (!t->act || !t->grad || !t->updated || !t->zeroed || !t->version || !t->fl ||
            !t->sec || !t->cnt || !t->mb || !t->fin || !t->inuse || !t->usum ||
            eval_init(r, t))
            return pm_errf(err, PM_ERR_NOMEM, "out of memory for task %s's boundaries",
                           tasks[i].name);
        for (int k = 0; k < 2 * S - 1; k++) t->fl[k] = pass_flops(t, k);
        for (int s = 0; s < S; s++) /* an evaluation: eval_batches forwards */
            t->fl_eval += (double)r->o->eval_batches * tasks[i].shard[s].flops_eval;
        for (int s = 0; s < S; s++) t->updated[s] = hosts[i].step, t->zeroed[s] = hosts[i].step;
        pm_status st = sel_store_open(t, r->o->spill_dir, err);
        if (st) return st;
        if (hosts[i].step >= t->stop_at) t->state = PM_SELECT_DONE;
        if (r->o->skip && r->o->skip[i]) {
            t->state = PM_SELECT_STOPPED;
            snprintf(t->why, sizeof t->why, "early, before the resume (halving or ASHA)");
        }
    }
    return PM_OK;
}

static pm_status devices_init(sel_run *r, pm_err *err) {
    int D = r->o->devices;
    const pm_select_layout *L = r->lay;
    r->dev = pm_calloc((size_t)D, sizeof *r->dev);
    r->owner = pm_malloc((size_t)r->n * sizeof(int));
    r->rank = pm_malloc((size_t)r->n * sizeof(int));
    if (!r->dev || !r->owner || !r->rank)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for devices");
    for (int i = 0; i < r->n; i++) r->owner[i] = -1;
    for (int d = 0; d < D; d++) {
        pm_status st = sel_dev_init(&r->dev[d], L, d, err);
        if (st) return st;
    }
    return PM_OK;
}

static void run_free(sel_run *r) {
    for (int d = 0; r->dev && d < r->o->devices; d++) sel_dev_free(&r->dev[d]);
    pm_free(r->dev);
    pm_free(r->owner);
    pm_free(r->rank);
    sel_asha_free(&r->asha);
    tasks_free(r->t, r->n);
}

/* Starts the device threads and waits for them. A thread that cannot start
 * fails the tasks not yet running; the others finish theirs. */
static pm_status run_threads(sel_run *r, pm_err *err) {
    int D = r->o->devices, started = 0;
    pthread_t *th = pm_malloc((size_t)D * sizeof *th);
    dev_arg *args = pm_malloc((size_t)D * sizeof *args);
    pm_status st = PM_OK;
    if (!th || !args) st = pm_errf(err, PM_ERR_NOMEM, "out of memory for threads");
    if (!st) {
        pthread_mutex_init(&r->mu, NULL);
        pthread_mutex_init(&r->why_mu, NULL);
        pthread_cond_init(&r->cv, NULL);
        pthread_cond_init(&r->flow, NULL);
        r->join = !r->o->no_join && r->o->policy == PM_POLICY_SHARD && D > 1;
        r->gate_n = D;
        for (int i = 0; i < r->n; i++) r->t[i].why_mu = &r->why_mu;
        for (int i = 0; r->join && i < r->n; i++) r->t[i].mu = &r->mu, r->t[i].flow = &r->flow;
        r->t0 = pm_now();
        if (r->o->asha > 1 && !r->link) asha_settle(r); /* a resumed sweep may wait at a
                                                            rung (across ranks: rank 0's say) */
        r->live = D;
        for (; started < D; started++) {
            args[started] = (dev_arg){r, started};
            if (pthread_create(&th[started], NULL, device_main, &args[started])) break;
        }
        if (started < D) {
            st = pm_errf(err, PM_ERR_NOMEM, "could not start device thread %d", started);
            pthread_mutex_lock(&r->mu);
            r->gate_n = started; /* the started ones wait for no more */
            r->live -= D - started;
            for (int i = 0; i < r->n; i++)
                if (!r->t[i].running) r->t[i].state = PM_SELECT_FAILED;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
        }
        if (r->link) serve_link(r);
        for (int d = 0; d < started; d++) pthread_join(th[d], NULL);
        r->stats->makespan_s = pm_now() - r->t0;
        pthread_cond_destroy(&r->flow);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        for (int i = 0; i < r->n; i++) r->t[i].why_mu = NULL;
        pthread_mutex_destroy(&r->why_mu);
    }
    pm_free(th);
    pm_free(args);
    return st;
}

/* After the run: AdamW updates still pending on shards (applied when a
 * shard is next loaded, so an interrupted task can have some) applied, so
 * the host holds the state its last step ended in; then a spilled state
 * goes out to its file. -1 on a store error (t->why says). */
static int finish_task(sel_task *t) {
    int pending = 0;
    for (int s = 0; s < t->S; s++) pending |= t->updated[s] < t->host->step;
    if (t->state != PM_SELECT_FAILED && pending) {
        if (sel_store_materialize(t)) return -1;
        sel_flush_updates(t);
    }
    return sel_store_close(t);
}

pm_status pm_select_run(pm_select_task *tasks, pm_trainer *hosts, int n,
                        const pm_select_layout *layout, const pm_select_opts *o,
                        pm_select_result *res, pm_select_stats *stats, pm_err *err) {
    *stats = (pm_select_stats){0};
    if (!tasks || !hosts || !layout || !o || !res)
        return pm_errf(err, PM_ERR_ARG, "pm_select_run: tasks, hosts, layout, o and res must be "
                       "given (one is NULL)");
    if (n < 1 || o->devices < 1)
        return pm_errf(err, PM_ERR_ARG, "select needs tasks and devices (got %d, %d)", n,
                       o->devices);
    if (pm_select_slab_bytes(layout) > layout->device_mem)
        return pm_errf(err, PM_ERR_ARG, "the layout does not fit its device memory");
    if (o->val && o->eval_batches < 1)
        return pm_errf(err, PM_ERR_ARG, "eval_batches=%d: an evaluation needs at least 1 "
                       "microbatch", o->eval_batches);
    if (o->ranks && o->halving > 1)
        return pm_errf(err, PM_ERR_ARG, "select across ranks: halving waits for every task at "
                       "each round; use asha, which rank 0 decides for the whole sweep");
    sel_run r = {.o = o, .lay = layout, .n = n, .stats = stats, .link = (sel_link *)o->ranks,
                 .cores = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    stats->peak = pm_calloc((size_t)o->devices, sizeof(size_t));
    stats->busy = pm_calloc((size_t)o->devices, sizeof(double));
    stats->wait = pm_calloc((size_t)o->devices, sizeof(double));
    stats->part = pm_calloc((size_t)o->devices * PM_PART_COUNT, sizeof(double));
    pm_status st = !stats->peak || !stats->busy || !stats->wait || !stats->part
                       ? pm_errf(err, PM_ERR_NOMEM, "out of memory for device statistics")
                       : PM_OK;
    if (!st) st = tasks_init(&r, tasks, hosts, err);
    for (int i = 0; !st && i < n; i++) /* every pass still to run, each logged once */
        if (r.t[i].stop_at > hosts[i].step) {
            const sel_task *t = &r.t[i];
            int64_t evals = o->val ? evals_after(&r, t, hosts[i].step) + o->nrung : 0;
            r.log_cap += (t->stop_at - hosts[i].step) * (2 * t->S - 1) +
                         evals * t->ev_chunks * t->S;
        }
    if (!st && !(stats->log = pm_malloc((size_t)(r.log_cap ? r.log_cap : 1) * sizeof *stats->log)))
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory for a log of %lld passes",
                     (long long)r.log_cap);
    stats->devices = o->devices;
    if (!st) st = sel_asha_init(&r.asha, o, r.t, n, err);
    if (!st) st = devices_init(&r, err);
    if (!st && r.link) st = r.link->ops->start(&r, err);
    if (!st) st = run_threads(&r, err);
    for (int i = 0; r.t && i < n; i++) /* its state whole, and a spilled one written out */
        if ((st ? sel_store_close(&r.t[i]) : finish_task(&r.t[i])) &&
            r.t[i].state != PM_SELECT_FAILED)
            r.t[i].state = PM_SELECT_FAILED;
    double sum = 0, longest = 0;
    for (int i = 0; r.t && i < n; i++) {
        sel_task *t = &r.t[i];
        res[i] = (pm_select_result){
            .state = t->state, .steps = hosts[i].step, .final_loss = t->last_loss,
            .val_loss = t->val_loss, .busy_s = t->busy, .work_s = t->work,
            .wall_s = t->first_start < 0 ? 0 : t->last_end - t->first_start,
            .val_step = isnan(t->val_loss) ? -1 : t->val_step};
        memcpy(res[i].why, t->why, sizeof res[i].why);
        sum += t->work, longest = fmax(longest, sel_task_bound(&r, t));
    }
    stats->lower_bound_s = fmax(sum / o->devices, longest);
    if (!st && r.link) st = r.link->ops->finish(&r, res, err); /* rank 0: every rank's */
    if (!st) account(stats);
    for (int d = 0; r.dev && d < o->devices; d++)
        stats->peak[d] = r.dev[d].peak, stats->wait[d] = r.dev[d].wait_s,
        stats->moved_bytes += r.dev[d].bytes + r.dev[d].jbytes;
    run_free(&r);
    if (st) pm_select_stats_free(stats);
    return st;
}
