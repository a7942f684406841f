/* session.c: a sweep as one library object (pm_select.h): its tasks, made
 * from the sweep's space (space.c), with what depends on them all (the
 * longest task's steps, the evaluation interval, ASHA's rungs); their
 * layout on the devices (pm_select_partition); the RAM check and the
 * forecast; each task's trainer (its store) made, resumed from its record
 * (record.c) and spilled; the run (run.c); and the table: every task's
 * result, ranked, and the best.
 *
 * Three things stay apart, so that tasks can later be spread over
 * processes (MPI ranks) with one table: which task runs where (today every
 * task runs on this process's devices, which the executor's policy hands
 * passes to), running a task's steps (run.c and pass.c, which need only
 * the task, its trainer and the layout), and recording and resuming a
 * task's results (record.c, and here the table: results, ranking and the
 * resume state in `stopped` and `prior`).
 *
 * States: init (tasks) -> partition (layout) -> start (trainers) -> run
 * (results); pm_select_session_free from any of them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "select/internal.h"
#include "train/ckpt.h"
#include "parts.h"

/* State slots per device: the running shard's and the next one's, which
 * the copy thread fills while the device computes (prefetch). */
#define SLOTS 2

/* ASHA compares the tasks at the same steps: its rungs from them and
 * asha_min. */
static pm_status asha_rungs(pm_select_session *s, pm_err *err) {
    pm_select_opts *o = &s->set.run;
    for (int i = 0; i < s->n; i++)
        if (s->tasks[i].cfg.opt.steps != s->steps)
            return pm_errf(err, PM_ERR_ARG, "select: asha compares tasks at the same steps, but "
                           "task %s has opt.steps=%d and others %d; give every task the same "
                           "opt.steps", s->tasks[i].name, s->tasks[i].cfg.opt.steps, s->steps);
    o->nrung = pm_select_asha_rungs(s->steps, o->asha, s->set.asha_min, s->rungs, 64);
    if (o->nrung < 2 && s->set.asha_min)
        return pm_errf(err, PM_ERR_ARG, "select: asha=%d: opt.steps=%d leaves no rung at or "
                       "above asha_min=%d below it; lower asha_min or asha, or raise opt.steps "
                       "to %lld", o->asha, s->steps, s->set.asha_min,
                       (long long)o->asha * s->set.asha_min);
    if (o->nrung < 2) /* rungs at steps / asha^k, the lowest at least 1 */
        return pm_errf(err, PM_ERR_ARG, "select: asha=%d compares tasks at a rung below "
                       "opt.steps (at opt.steps / %d), but opt.steps=%d leaves none; raise "
                       "opt.steps to %d or more", o->asha, o->asha, s->steps, o->asha);
    return PM_OK;
}

/* The evaluation interval a user would choose (docs/select.md): a
 * validation loss at each task's end to rank by, and along the way up to
 * five (curves, checkpoints), but never so often that evaluating costs
 * more than a tenth of the training: an evaluation is eval_batches (E)
 * forwards of the whole model, a step about 3 K (the forward, B and W of
 * each of its K microbatches), so at most every 10 E / (3 K) steps (K the
 * fewest microbatches of any task). Under successive halving the
 * evaluations are its rounds: every steps / 5. 0: only at the end. */
static int default_eval_every(const pm_select_session *s) {
    const pm_select_opts *o = &s->set.run;
    int every = s->steps >= 5 ? s->steps / 5 : s->steps, K = 1 << 30;
    if (o->halving > 1) return every;
    for (int i = 0; i < s->n; i++) K = s->tasks[i].cfg.micro < K ? s->tasks[i].cfg.micro : K;
    int least = (10 * o->eval_batches + 3 * K - 1) / (3 * K);
    every = every > least ? every : least;
    return every >= s->steps ? 0 : every;
}

pm_status pm_select_session_init(pm_select_session *s, const pm_sweep *sw,
                                 const pm_select_setup *set, pm_err *err) {
    *s = (pm_select_session){.set = *set};
    pm_status st = pm_sweep_tasks(sw, &s->tasks, &s->n, err);
    if (st) return st;
    for (int i = 0; i < s->n; i++)
        if (s->tasks[i].cfg.opt.steps > s->steps) s->steps = s->tasks[i].cfg.opt.steps;
    pm_select_opts *o = &s->set.run;
    if (o->eval_every < 0) o->eval_every = default_eval_every(s);
    return o->asha ? asha_rungs(s, err) : PM_OK;
}

pm_status pm_select_session_partition(pm_select_session *s, int32_t vocab, pm_err *err) {
    for (int i = 0; i < s->n && vocab > 0; i++) s->tasks[i].cfg.model.vocab = vocab;
    return pm_select_partition(s->tasks, s->n, s->set.device_mem,
                               s->set.slots ? s->set.slots : SLOTS, &s->layout, err);
}

pm_status pm_select_session_fits(const pm_select_session *s, double available, pm_err *err) {
    pm_select_ram need;
    pm_status st = pm_select_ram_need(s->tasks, s->n, &s->layout, s->set.run.devices,
                                      s->set.run.spill_dir != NULL, &need, err);
    return st ? st : pm_select_ram_check(&need, available, err);
}

pm_status pm_select_session_forecast(const pm_select_session *s, pm_select_forecast *f,
                                     pm_err *err) {
    const pm_select_opts *o = &s->set.run;
    pm_select_rates r;
    *f = (pm_select_forecast){0};
    pm_status st = pm_select_measure(s->tasks, s->n, &s->layout, o->spill_dir, &r, err);
    return st ? st
              : pm_select_forecast_make(f, s->tasks, s->n, o->devices, &r, o->eval_every,
                                        o->eval_batches, o->no_join, err);
}

/* The save directory: made if it is not there, refused if it is no
 * directory. */
static pm_status save_dir_ready(const char *dir, pm_err *err) {
    struct stat sb;
    if (mkdir(dir, 0777) && errno != EEXIST)
        return pm_errf(err, PM_ERR_IO, "save_dir %s: %s", dir, strerror(errno));
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return pm_errf(err, PM_ERR_ARG, "save_dir %s: exists and is not a directory; give a "
                       "directory for the tasks' checkpoints", dir);
    return PM_OK;
}

/* Task i's trainer: made, given the data's tokenizer, resumed from its
 * record, and with a spill directory spilled at once, so RAM holds one
 * task's state at a time. */
static pm_status start_task(pm_select_session *s, int i, const pm_tokens *train,
                            const void *tok, size_t tok_len, pm_err *err) {
    const pm_select_opts *o = &s->set.run;
    pm_select_task *t = &s->tasks[i];
    pm_trainer *h = &s->hosts[i];
    pm_err e;
    pm_status st = pm_trainer_init(h, &t->cfg, train, 0, &e);
    if (st) return pm_errf(err, st, "task %s: %s", t->name, e.msg); /* nothing allocated */
    s->nhost = i + 1;
    s->prior[i] = s->prior[s->n + i] = NAN;
    if (tok_len && (st = pm_trainer_set_tokenizer(h, tok, tok_len, err))) return st;
    if (o->save_dir) {
        int resumed;
        st = sel_record_resume(o->save_dir, t, h, s->val, o->eval_batches, &s->stopped[i],
                               &s->prior[i], &s->prior[s->n + i], &resumed, err);
        if (st) return st;
        s->resumed += resumed;
    }
    return o->spill_dir ? pm_select_spill(t, h, o->spill_dir, err) : PM_OK;
}

pm_status pm_select_session_start(pm_select_session *s, const pm_tokens *train,
                                  const pm_tokens *val, const void *tok, size_t tok_len,
                                  pm_err *err) {
    int n = s->n;
    if (s->hosts) return pm_errf(err, PM_ERR_ARG, "select: the session has started already");
    s->val = val;
    s->hosts = pm_calloc((size_t)n, sizeof *s->hosts);
    s->stopped = pm_calloc((size_t)n, 1);
    s->prior = pm_malloc(2 * (size_t)n * sizeof *s->prior);
    if (!s->hosts || !s->stopped || !s->prior)
        return pm_errf(err, PM_ERR_NOMEM, "select: out of memory for %d tasks", n);
    pm_status st = s->set.run.save_dir ? save_dir_ready(s->set.run.save_dir, err) : PM_OK;
    for (int i = 0; i < n && !st; i++) st = start_task(s, i, train, tok, tok_len, err);
    return st;
}

/* ---- the table ------------------------------------------------------------ */

const char pm_select_rank_rule[] =
    "ranked: tasks that ran every step by validation loss, then tasks stopped early by the "
    "step of their last validation loss (later first) and that loss, then the rest";

/* A task's place in the ranking: 0 finished (every step run) with a
 * validation loss, 1 stopped early with one (halving, ASHA, an
 * interruption), 2 failed or without one. */
static int rank_group(const pm_select_result *r) {
    if (r->state == PM_SELECT_FAILED || isnan(r->val_loss)) return 2;
    return r->state == PM_SELECT_DONE ? 0 : 1;
}

/* 1 if task b ranks above task a (pm_select_rank_rule's order). */
static int ranks_above(const pm_select_result *a, const pm_select_result *b) {
    int ga = rank_group(a), gb = rank_group(b);
    if (ga != gb) return gb < ga;
    if (ga == 1 && a->val_step != b->val_step) return b->val_step > a->val_step;
    return ga < 2 && b->val_loss < a->val_loss;
}

/* The tasks in pm_select_rank_rule's order, by an insertion sort: stable,
 * so ties keep the index order. */
static void rank_tasks(const pm_select_result *res, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && ranks_above(&res[order[j - 1]], &res[order[j]]); j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
}

pm_status pm_select_session_run(pm_select_session *s, pm_err *err) {
    int n = s->n;
    if (s->nhost < n) return pm_errf(err, PM_ERR_ARG, "select: the session has not started");
    pm_select_opts o = s->set.run;
    o.rungs = s->rungs, o.val = s->val;
    o.skip = s->stopped, o.prior_loss = s->prior, o.prior_val = s->prior + n;
    s->res = pm_calloc((size_t)n, sizeof *s->res);
    s->order = pm_malloc((size_t)n * sizeof *s->order);
    if (!s->res || !s->order)
        return pm_errf(err, PM_ERR_NOMEM, "select: out of memory for %d tasks", n);
    pm_status st = pm_select_run(s->tasks, s->hosts, n, &s->layout, &o, s->res, &s->stats, err);
    if (!st) rank_tasks(s->res, n, s->order);
    return st;
}

int pm_select_session_best(const pm_select_session *s) {
    for (int k = 0; s->res && k < s->n; k++) {
        int i = s->order[k];
        if (s->res[i].state != PM_SELECT_FAILED && isfinite(s->res[i].val_loss)) return i;
    }
    return -1;
}

/* Across ranks, task i ran on another rank, whose state stayed there: its
 * record's checkpoint (written there as it ended or stopped, its state
 * then) copied to path. */
static pm_status save_from_record(const pm_select_session *s, int i, const char *path,
                                  pm_err *err) {
    const char *dir = s->set.run.save_dir, *name = s->tasks[i].name;
    if (!dir)
        return pm_errf(err, PM_ERR_ARG, "select: task %s ran on rank %d, where its state stays; "
                       "across ranks it is saved from its checkpoint under save_dir DIR: give "
                       "one", name, s->res[i].rank);
    char from[4096], *bytes = NULL;
    size_t len = 0;
    pm_wfile w;
    snprintf(from, sizeof from, "%s/%s.ckpt", dir, name);
    pm_status st = pm_read_file(from, (size_t)1 << 40, &bytes, &len, err);
    if (!st && !(st = pm_wfile_open(&w, path, err))) {
        if (fwrite(bytes, 1, len, w.f) != len) {
            pm_wfile_abort(&w);
            st = pm_errf(err, PM_ERR_IO, "%s: write failed", path);
        } else {
            st = pm_wfile_commit(&w, err);
        }
    }
    pm_free(bytes);
    return st;
}

pm_status pm_select_session_save(pm_select_session *s, int i, const char *path, pm_err *err) {
    if (i < 0 || i >= s->nhost) return pm_errf(err, PM_ERR_ARG, "select: no task %d to save", i);
    if (s->set.run.ranks && s->res && s->res[i].rank != 0) return save_from_record(s, i, path, err);
    pm_status st = pm_select_host_load(&s->tasks[i], &s->hosts[i], err);
    return st ? st : pm_ckpt_save(&s->hosts[i], path, err);
}

void pm_select_session_free(pm_select_session *s) {
    if (!s) return;
    for (int i = 0; i < s->nhost; i++) pm_trainer_free(&s->hosts[i]);
    for (int i = 0; s->tasks && i < s->n; i++) pm_select_task_free(&s->tasks[i]);
    pm_select_stats_free(&s->stats);
    pm_free(s->tasks), pm_free(s->hosts), pm_free(s->stopped), pm_free(s->prior);
    pm_free(s->res), pm_free(s->order);
    *s = (pm_select_session){0};
}
