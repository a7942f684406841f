/* asha.c: asynchronous successive halving (ASHA: Li et al., "A System for
 * Massively Parallel Hyperparameter Tuning", MLSys 2020, arXiv 1810.05934;
 * Ray Tune's ASHAScheduler) for pm_select_run.
 *
 * Rungs are step budgets steps / ETA^k, k = K .. 0, the last every task's
 * steps (pm_select_asha_rungs). Every task runs to the first rung and is
 * evaluated there; then, without waiting for the others, it goes on to the
 * next rung as soon as it is among the best floor(m / ETA) of the m tasks
 * that have reported at its rung so far (pm_select_asha_promote), and
 * waits otherwise, freeing its device. At most ceil(N_k / ETA) tasks ever
 * leave rung k, N_0 the sweep's tasks and N_k+1 = ceil(N_k / ETA), so with
 * 9 tasks and ETA 3 at most 3 pass the first rung and at most 1 the second.
 * Once no task can still report at a rung (every task still running has
 * reported there), the best ceil(m / ETA) fill what is left of that quota
 * and the tasks still waiting there stop.
 *
 * Being asynchronous, a task promoted early can be outranked later by a
 * task that reports after it (the paper's mispromotion); the quota then
 * keeps a later, better task from going on. Synchronous halving (halving
 * in pm_select_opts) waits for the whole rung instead.
 *
 * The bookkeeping (sel_asha_*) runs under the scheduler's lock; a task's
 * rung and reached fields change only there, and only while no device runs
 * the task. */
#include <math.h>
#include <string.h>

#include "select/internal.h"
#include "parts.h"

int pm_select_asha_rungs(int64_t steps, int eta, int64_t min, int64_t *rungs, int cap) {
    if (eta < 2 || steps < 1 || cap < 1) return 0;
    if (min < 1) min = steps / ((int64_t)eta * eta) > 0 ? steps / ((int64_t)eta * eta) : 1;
    int k = 0;
    for (int64_t b = steps; b >= min && k < cap; b /= eta) rungs[k++] = b;
    if (k == 0) rungs[k++] = steps;
    for (int i = 0; i < k / 2; i++) { /* ascending */
        int64_t x = rungs[i];
        rungs[i] = rungs[k - 1 - i], rungs[k - 1 - i] = x;
    }
    return k;
}

/* 1 if loss a (index i) ranks above loss b (index j): lower, a number
 * before NAN, ties to the lower index. */
static int better(double a, int i, double b, int j) {
    if (isnan(a) != isnan(b)) return !isnan(a);
    if (!isnan(a) && a != b) return a < b;
    return i < j;
}

int pm_select_asha_promote(int eta, int entrants, int closed, int n, const double *loss,
                           const unsigned char *state, unsigned char *promote, int *order) {
    if (eta < 1 || n < 0) { /* pm_select.h: nothing promoted */
        for (int j = 0; j < n; j++) promote[j] = 0;
        return -1;
    }
    int quota = (entrants + eta - 1) / eta, done = 0, got = 0;
    int top = closed ? (n + eta - 1) / eta : n / eta;
    for (int j = 0; j < n; j++) {
        promote[j] = 0;
        done += state[j] == PM_ASHA_PROMOTED;
        order[j] = j;
        for (int i = j; i > 0 && better(loss[order[i]], order[i], loss[order[i - 1]],
                                         order[i - 1]); i--) {
            int x = order[i];
            order[i] = order[i - 1], order[i - 1] = x;
        }
    }
    for (int r = 0; r < top && r < n && done < quota; r++) {
        int j = order[r];
        if (state[j] != PM_ASHA_WAITING || isnan(loss[j])) continue;
        promote[j] = 1;
        done++, got++;
    }
    return got;
}

pm_status sel_asha_init(sel_asha *a, const pm_select_opts *o, sel_task *t, int n, pm_err *err) {
    *a = (sel_asha){.eta = o->asha, .nrung = o->nrung, .rungs = o->rungs, .n = n};
    if (o->asha < 2) return PM_OK;
    if (o->nrung < 1 || !o->rungs)
        return pm_errf(err, PM_ERR_ARG, "asha=%d needs its rungs (nrung=%d)", o->asha, o->nrung);
    if (!o->val || o->halving > 1)
        return pm_errf(err, PM_ERR_ARG, "asha=%d ranks by validation loss and runs alone: it "
                       "needs val tokens and no halving", o->asha);
    for (int i = 0; i < n; i++)
        if (t[i].stop_at != o->rungs[o->nrung - 1])
            return pm_errf(err, PM_ERR_ARG, "task %s: asha's last rung is %lld steps, the "
                           "task's opt.steps=%lld; give every task the same steps",
                           t[i].task->name, (long long)o->rungs[o->nrung - 1],
                           (long long)t[i].stop_at);
    a->loss = pm_malloc((size_t)n * (size_t)o->nrung * sizeof *a->loss);
    a->key = pm_malloc((size_t)n * sizeof *a->key);
    a->idx = pm_malloc(2 * (size_t)n * sizeof *a->idx);
    a->state = pm_malloc(2 * (size_t)n);
    a->entrants = pm_malloc((size_t)o->nrung * sizeof *a->entrants);
    if (!a->loss || !a->key || !a->idx || !a->state || !a->entrants)
        return pm_errf(err, PM_ERR_NOMEM, "out of memory for asha's rungs of %d tasks", n);
    a->entrants[0] = n;
    for (int k = 1; k < o->nrung; k++)
        a->entrants[k] = (a->entrants[k - 1] + o->asha - 1) / o->asha;
    /* where each task stands (a resumed one from its step): past a rung it
     * was promoted there (its loss there unknown: it ranks first), at a
     * rung it reported there (its loss the one it starts with) */
    for (int i = 0; i < n; i++) {
        sel_task *x = &t[i];
        int64_t step = x->host->step;
        x->reached = 0;
        for (int k = 0; k < o->nrung - 1; k++) {
            a->loss[(size_t)i * o->nrung + k] = NAN;
            if (step < o->rungs[k]) continue;
            x->reached = k + 1;
            a->loss[(size_t)i * o->nrung + k] = step > o->rungs[k] ? -INFINITY : x->val_loss;
        }
        x->rung = x->reached;
        if (x->reached > 0 && step == o->rungs[x->reached - 1]) {
            x->rung = x->reached - 1;
            x->at_rung = x->state == PM_SELECT_RUNNING;
        }
    }
    return PM_OK;
}

void sel_asha_free(sel_asha *a) {
    pm_free(a->loss), pm_free(a->key), pm_free(a->idx), pm_free(a->state), pm_free(a->entrants);
    *a = (sel_asha){0};
}

int sel_asha_due(const sel_asha *a, const sel_task *t) {
    return a->eta >= 2 && t->rung < a->nrung - 1 && t->host->step == a->rungs[t->rung];
}

void sel_asha_report(sel_asha *a, sel_task *t, double val) {
    a->loss[(size_t)t->index * a->nrung + t->rung] = val;
    t->reached = t->rung + 1;
    t->at_rung = 1;
}

int sel_asha_decide(sel_asha *a, sel_task *t, int *stop) {
    int nstop = 0;
    unsigned char *st = a->state, *up = a->state + a->n;
    int *idx = a->idx, *order = a->idx + a->n;
    for (int k = 0; k + 1 < a->nrung; k++) {
        int m = 0, closed = 1;
        for (int i = 0; i < a->n; i++) {
            int live = t[i].state == PM_SELECT_RUNNING;
            if (live && t[i].reached <= k) closed = 0;
            if (t[i].reached <= k) continue;
            idx[m] = i, a->key[m] = a->loss[(size_t)i * a->nrung + k];
            st[m++] = t[i].rung > k ? PM_ASHA_PROMOTED : live && t[i].at_rung ? PM_ASHA_WAITING
                                                                               : PM_ASHA_OUT;
        }
        pm_select_asha_promote(a->eta, a->entrants[k], closed, m, a->key, st, up, order);
        for (int j = 0; j < m; j++) {
            sel_task *x = &t[idx[j]];
            if (up[j]) x->rung = k + 1, x->at_rung = 0;
            else if (closed && st[j] == PM_ASHA_WAITING) {
                x->at_rung = 0, x->state = PM_SELECT_STOPPED;
                stop[nstop++] = idx[j];
            }
        }
    }
    return nstop;
}
