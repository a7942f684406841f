/* ranks.c: a sweep spread over MPI ranks (pm_select_ranks.h): the link
 * between pm_select_run on each rank and the coordinator on rank 0.
 *
 * Every rank runs the same sweep with every task `away` (internal.h) until
 * rank 0 gives it to that rank. Each rank's main thread serves the link
 * while its devices run (run.c, serve_link): under the run's lock it sends
 * what the devices queued (the outbox: events, ASHA's reports at rungs),
 * takes what rank 0 sent, and asks for a task while fewer are ready here
 * than devices. Rank 0 is a rank like the others (it sends to itself
 * through the same MPI path) and the coordinator besides.
 *
 * Messages (one fixed record, tag UP to rank 0, DOWN from it):
 *   up    HELLO (devices, host), ASK (a device is free), EVENT (any event of
 *         a task here: rank 0 reports it), RUNG (a task here reported its
 *         validation loss at its ASHA rung and waits), END (this rank's
 *         devices ended: rank 0's own tells it that its events are all in),
 *         RESULT (a task's, after the run), BYE (after the run: its work,
 *         bound, tasks and CPU time)
 *   down  GIVE (task i is yours), NONE (no task will come: end when yours
 *         are), PROMOTE (task i goes on to rung k), STOP (ASHA stopped it)
 * Per peer MPI keeps the order, so a rank's RESULTs arrive before its BYE.
 *
 * The coordinator's view of the tasks is rank 0's own run state: live for
 * its own tasks and those no rank has yet, a mirror for the others, kept
 * by their events and reports (state, ASHA's reached, rung, at_rung and
 * losses), which is all sel_asha_decide reads. Its decisions go to the
 * owners: a promotion or a stop of another rank's task as a message, of
 * its own as run.c does it. Every rank resumed every task alike
 * (session.c), so each starts from the same steps and rungs. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pipemem/pm_runtime.h"
#include "pipemem/pm_select_ranks.h"
#include "runtime/transport.h"
#include "select/internal.h"
#include "train/config.h"

enum { TAG_UP = 1, TAG_DOWN = 2 };
enum { M_HELLO, M_ASK, M_EVENT, M_RUNG, M_END, M_RESULT, M_BYE, M_GIVE, M_NONE, M_PROMOTE,
       M_STOP };

typedef struct {
    int32_t kind, task, rung, ev, devices, tasks;
    int64_t step;
    double loss, val, work, bound, cpu;
    pm_select_result res; /* RESULT; EVENT: res.why */
    char host[64];        /* HELLO */
} sel_msg;

#define OUTBOX 1024 /* messages to rank 0 queued between two pumps */
#define LINE 4096   /* the running tasks' line */

struct pm_select_ranks {
    sel_link head;        /* first: the run calls the link through it */
    pm_tp_mpi *w;
    pm_tp *tp;
    int rank, size;
    char host[64];
    pthread_t main;       /* the thread that talks to MPI (funneled) */
    pm_status st;         /* the first transport error */
    pm_err err;
    /* this rank's side */
    sel_msg down;         /* the posted receive from rank 0 */
    pm_tp_req down_req;
    sel_msg *out;         /* (OUTBOX) queued for rank 0 */
    int out_head, out_n;
    int hello, asking, closed, ended; /* ended: END sent */
    /* rank 0: the coordinator, for a run of n tasks */
    sel_msg *up;          /* (size) a posted receive from each rank */
    pm_tp_req *up_req;
    int *owner;           /* (n) the rank a task went to, -1 none yet */
    int *was;             /* (n) scratch: rungs before a decision */
    unsigned char *ask;   /* (size) an ask not yet answered */
    int *devices;         /* (size) */
    char (*hosts)[64];    /* (size) */
    int *ran;             /* (size) tasks each rank ran (its BYE) */
    double *cpu;          /* (size) CPU seconds each rank's run took (its BYE) */
    double cpu0;          /* this process's CPU seconds as the run started */
    int byes, end0;       /* BYEs from the other ranks; rank 0's own END came back */
    double work, bound;   /* the other ranks' work and longest task bound */
    pm_select_result *got; /* (n) other ranks' results */
    int dirty;            /* the running line is stale */
    char line[2][LINE];
    _Atomic(const char *) running;
};

/* ---- the link ---------------------------------------------------------------- */

/* Whether every rank has x alike: *first, the lowest rank (> 0) whose x
 * differs from rank 0's, or -1. */
static pm_status alike(uint64_t x, int *first, pm_err *err) {
    char word[PM_MPI_WORD], theirs[PM_MPI_WORD];
    snprintf(word, sizeof word, "%016llx", (unsigned long long)x);
    return pm_mpi_same_word(word, first, theirs, err);
}

/* A part of the sweep every rank must have alike (x its hash), refused
 * naming the first rank that has another: it `what`. */
static pm_status part_alike(uint64_t x, const char *what, pm_err *err) {
    int first = -1;
    pm_status st = alike(x, &first, err);
    if (st || first < 0) return st;
    return pm_errf(err, PM_ERR_ARG, "select across ranks: rank %d %s: every rank needs the "
                   "same sweep; only the devices, device_mem, policy, prefetch and spill_dir "
                   "may differ", first, what);
}

/* The tasks' number and names, then each field of their configurations. */
static pm_status tasks_alike(const pm_select_session *s, pm_err *err) {
    uint64_t h = pm_fnv1a64(PM_FNV_OFFSET, &s->n, sizeof s->n);
    for (int i = 0; i < s->n; i++)
        h = pm_fnv1a64(h, s->tasks[i].name, strlen(s->tasks[i].name) + 1);
    pm_status st = part_alike(h, "has other tasks than rank 0 (their number or names)", err);
    for (int f = 0; !st && f < PM_CFG_FIELDS; f++) {
        char v[64], what[96];
        h = PM_FNV_OFFSET;
        for (int i = 0; i < s->n; i++) {
            pm_train_cfg_value(&s->tasks[i].cfg, (pm_train_field)f, v, sizeof v);
            h = pm_fnv1a64(h, v, strlen(v) + 1);
        }
        snprintf(what, sizeof what, "gives its tasks another %s than rank 0",
                 pm_train_field_names[f]);
        st = part_alike(h, what, err);
    }
    return st;
}

/* The parts of the sweep every rank must have alike, compared one by one
 * so that a refusal names the first that differs: the tasks, evaluation,
 * ASHA, stop_after, save_dir. */
static pm_status sweep_alike(const pm_select_session *s, pm_err *err) {
    const pm_select_opts *o = &s->set.run;
    int32_t ev[2] = {o->eval_every, o->eval_batches};
    int32_t as[4] = {o->asha, o->nrung, o->halving, s->set.asha_min};
    const char *dir = o->save_dir ? o->save_dir : "";
    uint64_t rungs = pm_fnv1a64(pm_fnv1a64(PM_FNV_OFFSET, as, sizeof as), s->rungs,
                                (size_t)o->nrung * sizeof *s->rungs);
    pm_status st = tasks_alike(s, err);
    if (!st) st = part_alike(pm_fnv1a64(PM_FNV_OFFSET, ev, sizeof ev), "evaluates differently "
                             "from rank 0 (eval_every or eval_batches)", err);
    if (!st) st = part_alike(rungs, "stops tasks differently from rank 0 (asha, asha_min or "
                             "successive halving)", err);
    if (!st) st = part_alike(pm_fnv1a64(PM_FNV_OFFSET, &o->stop_after, sizeof o->stop_after),
                             "has another stop_after than rank 0", err);
    if (!st) st = part_alike(pm_fnv1a64(PM_FNV_OFFSET, dir, strlen(dir) + 1), "saves the tasks "
                             "elsewhere than rank 0 (save_dir)", err);
    return st;
}

/* The data every rank reads: one directory's. */
static pm_status same_data(uint64_t data_identity, pm_err *err) {
    int first = -1;
    pm_status st = alike(data_identity, &first, err);
    if (st || first < 0) return st;
    return pm_errf(err, PM_ERR_ARG, "select across ranks: rank %d reads other data than rank 0: "
                   "every rank needs the same data directory", first);
}

static const sel_link_ops link_ops; /* the end of the file */

pm_status pm_select_ranks_create(pm_select_ranks **out, const pm_select_session *s,
                                 uint64_t data_identity, pm_err *err) {
    *out = NULL;
    int rank, size;
    pm_status st = pm_mpi_init(&rank, &size, err);
    /* the data first: the tasks' vocabulary is the data's */
    if (st || (st = same_data(data_identity, err)) || (st = sweep_alike(s, err)))
        return st;
    pm_select_ranks *k = pm_calloc(1, sizeof *k);
    if (!k || !(k->out = pm_malloc(OUTBOX * sizeof *k->out))) {
        pm_free(k);
        return pm_errf(err, PM_ERR_NOMEM, "select across ranks: out of memory");
    }
    k->head.ops = &link_ops;
    k->rank = rank, k->size = size;
    if (gethostname(k->host, sizeof k->host - 1)) snprintf(k->host, sizeof k->host, "?");
    /* every rank's messages to rank 0 may be in flight at once */
    if ((st = pm_tp_mpi_create(&k->w, 4 * OUTBOX, sizeof(sel_msg), size + 1, 0, err))) {
        pm_select_ranks_free(k);
        return st;
    }
    k->tp = pm_tp_mpi_endpoint(k->w);
    atomic_store(&k->running, k->line[0]);
    *out = k;
    return PM_OK;
}

int pm_select_ranks_rank(const pm_select_ranks *k) { return k->rank; }
int pm_select_ranks_size(const pm_select_ranks *k) { return k->size; }
const char *pm_select_ranks_running(const pm_select_ranks *k) { return atomic_load(&k->running); }

pm_status pm_select_ranks_info(const pm_select_ranks *k, int g, pm_select_rank_info *out,
                               pm_err *err) {
    if (k->rank || !k->cpu || g < 0 || g >= k->size)
        return pm_errf(err, PM_ERR_ARG, "pm_select_ranks_info: rank %d of %d, asked on rank %d "
                       "(rank 0 has them, after a run)", g, k->size, k->rank);
    *out = (pm_select_rank_info){.devices = k->devices[g], .tasks = k->ran[g],
                                 .cpu_s = k->cpu[g]};
    snprintf(out->host, sizeof out->host, "%s", k->hosts[g]);
    return PM_OK;
}

static void coord_free(pm_select_ranks *k) {
    pm_free(k->up), pm_free(k->up_req), pm_free(k->owner), pm_free(k->was), pm_free(k->ask);
    pm_free(k->devices), pm_free(k->hosts), pm_free(k->got), pm_free(k->ran), pm_free(k->cpu);
    k->up = NULL, k->up_req = NULL, k->owner = k->was = k->devices = k->ran = NULL;
    k->ask = NULL, k->hosts = NULL, k->got = NULL, k->cpu = NULL;
}

void pm_select_ranks_free(pm_select_ranks *k) {
    if (!k) return;
    pm_tp_mpi_destroy(k->w); /* the sends in flight leave first */
    coord_free(k);
    pm_free(k->out);
    pm_free(k);
}

/* The first transport error stops the link: every rank hears of it (the
 * transport's abort), and this one asks and waits for nothing more. */
static void broken(pm_select_ranks *k, pm_status st) {
    if (!st || k->st) return;
    k->st = st;
    pm_tp_status(k->tp, &k->err);
    pm_tp_abort(k->tp, st, k->err.msg);
    k->closed = 1;
    k->byes = k->size - 1;
}

static void post(pm_select_ranks *k, int peer, int tag, const sel_msg *m) {
    pm_tp_req r;
    if (!k->st) broken(k, pm_tp_isend(k->tp, peer, tag, m, sizeof *m, &r));
}

/* The run's link is this object (its head is the first member). */
static pm_select_ranks *K(const sel_run *r) { return (pm_select_ranks *)r->link; }

/* ---- this rank's side ---------------------------------------------------------- */

static void flush(pm_select_ranks *k) {
    for (; k->out_n; k->out_n--, k->out_head = (k->out_head + 1) % OUTBOX)
        post(k, 0, TAG_UP, &k->out[k->out_head]);
}

/* Under the run's lock, from any thread: m queued for rank 0. A device
 * thread finding the outbox full waits for the main thread's pump; the
 * main thread sends it all at once. */
static void to_root(sel_run *r, const sel_msg *m) {
    pm_select_ranks *k = K(r);
    while (k->out_n == OUTBOX) {
        if (pthread_equal(pthread_self(), k->main)) flush(k);
        else pthread_cond_wait(&r->cv, &r->mu);
    }
    k->out[(k->out_head + k->out_n++) % OUTBOX] = *m;
}

static void link_event(sel_run *r, const pm_select_event *ev) {
    sel_msg m = {.kind = M_EVENT, .task = ev->task, .ev = ev->kind, .step = ev->step,
                 .loss = ev->loss, .val = ev->val_loss};
    if (ev->why) snprintf(m.res.why, sizeof m.res.why, "%s", ev->why);
    to_root(r, &m);
}

static void link_rung(sel_run *r, const sel_task *t, double val) {
    to_root(r, &(sel_msg){.kind = M_RUNG, .task = t->index, .rung = t->rung, .val = val});
}

static int link_open(const sel_run *r) { return !K(r)->closed; }

/* Tasks here that a device could run now or soon: not finished, not
 * waiting at a rung. */
static int ready_here(const sel_run *r) {
    int c = 0;
    for (int i = 0; i < r->n; i++)
        c += !r->t[i].away && r->t[i].state == PM_SELECT_RUNNING && !r->t[i].at_rung;
    return c;
}

/* What rank 0 sent this rank. */
static void from_root(sel_run *r, const sel_msg *m) {
    pm_select_ranks *k = K(r);
    sel_task *t = m->task >= 0 && m->task < r->n ? &r->t[m->task] : NULL;
    if (m->kind == M_NONE) k->closed = 1, k->asking = 0;
    else if (m->kind == M_GIVE && t) t->away = 0, k->asking = 0;
    else if (m->kind == M_PROMOTE && t) t->rung = m->rung, t->at_rung = 0;
    else if (m->kind == M_STOP && t) { /* it waits at its rung: no device holds it */
        t->at_rung = 0;
        sel_stop_early(r, m->task, "ASHA");
    }
    pthread_cond_broadcast(&r->cv);
}

static void serve_self(sel_run *r) {
    pm_select_ranks *k = K(r);
    if (!k->hello) {
        sel_msg m = {.kind = M_HELLO, .devices = r->o->devices};
        snprintf(m.host, sizeof m.host, "%s", k->host);
        to_root(r, &m);
        k->hello = 1;
    }
    for (int done = 1; done && !k->st;) {
        pm_status st = pm_tp_test(k->tp, &k->down_req, &done);
        if (st) broken(k, st);
        if (st || !done) break;
        from_root(r, &k->down);
        broken(k, pm_tp_irecv(k->tp, 0, TAG_DOWN, &k->down, sizeof k->down, &k->down_req));
    }
    if (!k->closed && !k->asking && r->live > 0 && ready_here(r) < r->o->devices) {
        to_root(r, &(sel_msg){.kind = M_ASK});
        k->asking = 1;
    }
    if (r->live == 0 && !k->ended) to_root(r, &(sel_msg){.kind = M_END}), k->ended = 1;
    if (k->out_n == 0) return;
    flush(k);
    pthread_cond_broadcast(&r->cv); /* a device may wait for room in the outbox */
}

/* ---- rank 0: the coordinator ------------------------------------------------------ */

/* The running line: every task given to a rank and not finished, by rank. */
static void running_line(sel_run *r) {
    pm_select_ranks *k = K(r);
    char *s = k->line[atomic_load(&k->running) == k->line[0]];
    size_t n = 0;
    s[0] = 0;
    for (int g = 0; g < k->size; g++) {
        int any = 0;
        for (int i = 0; i < r->n && n + 200 < LINE; i++) {
            if (k->owner[i] != g || r->t[i].state != PM_SELECT_RUNNING) continue;
            n += (size_t)snprintf(s + n, LINE - n, "%s%s", any ? ", " : n ? "; " : "",
                                  r->t[i].task->name);
            any = 1;
        }
        if (any && n + 100 < LINE)
            n += (size_t)snprintf(s + n, LINE - n, " (rank %d on %s)", g, k->hosts[g]);
    }
    atomic_store(&k->running, s);
    k->dirty = 0;
}

static void give(sel_run *r, int g, int kind, int task, int rung) {
    post(K(r), g, TAG_DOWN, &(sel_msg){.kind = kind, .task = task, .rung = rung});
}

/* Rank g asks for a task: the unstarted one with the most time left (ties:
 * the lower index), NONE once none can ever come (every task went to a
 * rank or finished), else the ask waits (a task waiting at a rung that no
 * rank holds may yet go on). */
static void answer(sel_run *r, int g) {
    pm_select_ranks *k = K(r);
    int best = -1, open = 0;
    for (int i = 0; i < r->n; i++) {
        const sel_task *t = &r->t[i];
        if (k->owner[i] >= 0 || t->state != PM_SELECT_RUNNING) continue;
        open = 1;
        if (!t->at_rung &&
            (best < 0 || sel_time_left(r, t, 0) > sel_time_left(r, &r->t[best], 0)))
            best = i;
    }
    if (best < 0 && open) return;
    k->ask[g] = 0;
    if (best >= 0) k->owner[best] = g, k->dirty = 1;
    give(r, g, best >= 0 ? M_GIVE : M_NONE, best, 0);
}

/* ASHA's decisions over the whole sweep (asha.c), sent to the owners. */
static void decide(sel_run *r) {
    pm_select_ranks *k = K(r);
    for (int i = 0; i < r->n; i++) k->was[i] = r->t[i].rung;
    int nstop = sel_asha_decide(&r->asha, r->t, r->rank);
    for (int j = 0; j < nstop; j++) {
        int i = r->rank[j], g = k->owner[i];
        if (g > 0) give(r, g, M_STOP, i, 0);
        else sel_stop_early(r, i, "ASHA"); /* here, or on no rank: rank 0 holds it */
    }
    for (int i = 0; i < r->n; i++)
        if (r->t[i].rung != k->was[i] && k->owner[i] > 0) give(r, k->owner[i], M_PROMOTE, i,
                                                               r->t[i].rung);
    k->dirty |= nstop > 0;
    pthread_cond_broadcast(&r->cv);
}

/* What rank g sent rank 0. Another rank's events keep the mirror of its
 * tasks (their state, ASHA's reports); every event is reported here. */
static void from_rank(sel_run *r, int g, const sel_msg *m) {
    pm_select_ranks *k = K(r);
    sel_task *t = m->task >= 0 && m->task < r->n ? &r->t[m->task] : NULL;
    static const int state_of[] = {PM_SELECT_RUNNING, PM_SELECT_RUNNING, PM_SELECT_DONE,
                                   PM_SELECT_FAILED, PM_SELECT_STOPPED};
    switch (m->kind) {
    case M_HELLO:
        k->devices[g] = m->devices;
        snprintf(k->hosts[g], sizeof k->hosts[g], "%s", m->host);
        break;
    case M_ASK: k->ask[g] = 1; break;
    case M_END: k->end0 |= g == 0; break;
    case M_RUNG:
        if (t && g) sel_asha_report(&r->asha, t, m->val);
        break;
    case M_EVENT:
        if (!t || m->ev < 0 || m->ev > PM_SELECT_EV_STOPPED) break;
        if (g && m->ev >= PM_SELECT_EV_DONE) t->state = state_of[m->ev];
        k->dirty |= m->ev >= PM_SELECT_EV_DONE;
        if (g && m->ev == PM_SELECT_EV_FAILED) snprintf(t->why, sizeof t->why, "%s", m->res.why);
        if (r->o->report) {
            pm_select_event ev = {.task = m->task, .step = m->step, .loss = m->loss,
                                  .val_loss = m->val, .elapsed = pm_now() - r->t0,
                                  .busy = r->stats->busy, .kind = m->ev,
                                  .why = m->ev >= PM_SELECT_EV_FAILED ? m->res.why : NULL};
            r->o->report(r->o->report_ctx, &ev);
        }
        break;
    case M_RESULT:
        if (t) k->got[m->task] = m->res;
        break;
    case M_BYE:
        k->byes += g > 0, k->work += m->work, k->bound = fmax(k->bound, m->bound);
        k->ran[g] = m->tasks, k->cpu[g] = m->cpu;
        break;
    default: break;
    }
}

static void serve_ranks(sel_run *r) {
    pm_select_ranks *k = K(r);
    int heard = 0;
    for (int g = 0; g < k->size && !k->st; g++)
        for (int done = 1; done && !k->st;) {
            pm_status st = pm_tp_test(k->tp, &k->up_req[g], &done);
            if (st) broken(k, st);
            if (st || !done) break;
            from_rank(r, g, &k->up[g]);
            heard = 1;
            broken(k, pm_tp_irecv(k->tp, g, TAG_UP, &k->up[g], sizeof k->up[g], &k->up_req[g]));
        }
    if (heard && r->asha.eta >= 2) decide(r);
    for (int g = 0; g < k->size; g++)
        if (k->ask[g]) answer(r, g);
    if (k->dirty) running_line(r);
}

/* ---- the run's side ---------------------------------------------------------------- */

/* This process's CPU seconds so far, every thread's. */
static double cpu_now(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

static pm_status link_start(sel_run *r, pm_err *err) {
    pm_select_ranks *k = K(r);
    int n = r->n, z = k->size;
    coord_free(k);
    k->main = pthread_self();
    k->hello = k->asking = k->closed = k->ended = k->byes = k->end0 = 0;
    k->out_head = k->out_n = 0;
    k->work = k->bound = 0;
    k->cpu0 = cpu_now();
    for (int i = 0; i < n; i++) r->t[i].away = 1;
    pm_status st = pm_tp_irecv(k->tp, 0, TAG_DOWN, &k->down, sizeof k->down, &k->down_req);
    if (st || k->rank) return st ? pm_tp_status(k->tp, err) : PM_OK;
    k->up = pm_calloc((size_t)z, sizeof *k->up);
    k->up_req = pm_calloc((size_t)z, sizeof *k->up_req);
    k->owner = pm_malloc((size_t)n * sizeof *k->owner);
    k->was = pm_malloc((size_t)n * sizeof *k->was);
    k->ask = pm_calloc((size_t)z, 1);
    k->devices = pm_calloc((size_t)z, sizeof *k->devices);
    k->hosts = pm_calloc((size_t)z, sizeof *k->hosts);
    k->got = pm_calloc((size_t)n, sizeof *k->got);
    k->ran = pm_calloc((size_t)z, sizeof *k->ran);
    k->cpu = pm_calloc((size_t)z, sizeof *k->cpu);
    if (!k->up || !k->up_req || !k->owner || !k->was || !k->ask || !k->devices || !k->hosts ||
        !k->got || !k->ran || !k->cpu)
        return pm_errf(err, PM_ERR_NOMEM, "select across ranks: out of memory for %d tasks", n);
    for (int i = 0; i < n; i++) k->owner[i] = -1;
    for (int g = 0; g < z && !st; g++)
        st = pm_tp_irecv(k->tp, g, TAG_UP, &k->up[g], sizeof k->up[g], &k->up_req[g]);
    if (st) return pm_tp_status(k->tp, err);
    if (r->asha.eta >= 2) decide(r); /* a resumed sweep may wait at a rung */
    running_line(r);
    return PM_OK;
}

static void link_pump(sel_run *r) {
    serve_self(r);
    if (!K(r)->rank) serve_ranks(r);
}

/* This rank's devices ended and all it queued is sent; rank 0 also heard
 * its own END (so every event of its own went through) and every other
 * rank's BYE. A broken link is done at once. */
static int link_done(const sel_run *r) {
    const pm_select_ranks *k = K(r);
    if (r->live || (!k->st && (!k->ended || k->out_n))) return 0;
    return k->rank || k->st || (k->end0 && k->byes == k->size - 1);
}

/* After the run (its devices ended, its results in res): every rank sends
 * rank 0 its tasks' results and its work; rank 0 puts them in res (each
 * with the rank that ran it) and bounds the sweep over every rank's
 * devices: max(all work / all devices, the longest task's bound). */
static pm_status link_finish(sel_run *r, pm_select_result *res, pm_err *err) {
    pm_select_ranks *k = K(r);
    double work = 0, bound = 0, cpu = cpu_now() - k->cpu0;
    int ran = 0;
    for (int i = 0; i < r->n; i++) {
        if (r->t[i].away) continue;
        res[i].rank = k->rank, ran++;
        work += r->t[i].work, bound = fmax(bound, sel_task_bound(r, &r->t[i]));
        if (k->rank) post(k, 0, TAG_UP, &(sel_msg){.kind = M_RESULT, .task = i, .res = res[i]});
    }
    if (k->rank)
        post(k, 0, TAG_UP, &(sel_msg){.kind = M_BYE, .work = work, .bound = bound, .cpu = cpu,
                                      .tasks = ran});
    if (k->st) return pm_errf(err, k->st, "select across ranks: %s", k->err.msg);
    if (k->rank) return PM_OK;
    int all = 0;
    k->ran[0] = ran, k->cpu[0] = cpu;
    for (int g = 0; g < k->size; g++) all += k->devices[g];
    for (int i = 0; i < r->n; i++)
        if (k->owner[i] > 0) res[i] = k->got[i];
    r->stats->lower_bound_s = fmax((work + k->work) / (all > 0 ? all : 1), fmax(bound, k->bound));
    return PM_OK;
}

static const sel_link_ops link_ops = {link_start, link_pump,  link_open,  link_done,
                                      link_event, link_rung, link_finish};
