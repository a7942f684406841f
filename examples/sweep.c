/* sweep.c: pipemem as a library: a model-selection sweep. Four GPTs (two
 * learning rates by two depths) train at once on 2 device threads whose
 * memory holds only shards of them, each exactly as `pipemem train` alone
 * would train it; then the table of results, ranked by validation loss,
 * and the best task's checkpoint.
 *
 *   cc sweep.c $(pkg-config --cflags --libs pipemem) -o sweep
 *
 * The tokens are made up: a repeating text the models learn. Exit status 0
 * only if every task ran every step, its validation loss fell below a
 * uniform guess's, and the best task's checkpoint reads back. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipemem/pm_select.h>

static char text[60000];

int main(void) {
    const char *line = "the quick brown fox jumps over the lazy dog. ";
    for (size_t i = 0; i < sizeof text; i++) text[i] = line[i % strlen(line)];
    size_t cut = sizeof text / 10 * 9; /* the last tenth validates */
    pm_tokens tr = PM_TOKENS_BYTES(text, cut), va = PM_TOKENS_BYTES(text + cut, sizeof text - cut);
    /* 1. The sweep: every combination of the listed values, the rest as train's defaults. */
    static const struct {
        pm_sweep_key key;
        const char *values; /* a list, or a range "lo..hi" with .sample */
    } keys[] = {{PM_SWEEP_LR, "1e-3,3e-3"}, {PM_SWEEP_LAYERS, "1,2"}, {PM_SWEEP_DIM, "32"},
                {PM_SWEEP_HEADS, "2"},      {PM_SWEEP_CTX, "16"},      {PM_SWEEP_BATCH, "4"},
                {PM_SWEEP_STEPS, "20"}};
    pm_sweep sw = {0};
    pm_err err;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (pm_sweep_set(&sw, keys[k].key, keys[k].values, NULL, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
    /* 2. The session: 2 devices of 1 MiB each, evaluated every 5 steps on 2 batches. */
    pm_select_setup setup = {.run = {.devices = 2, .policy = PM_POLICY_SHARD,
                                     .prefetch = PM_PREFETCH_AUTO, .eval_every = 5,
                                     .eval_batches = 2},
                             .device_mem = 1 << 20};
    pm_select_session s;
    if (pm_select_session_init(&s, &sw, &setup, &err) ||
        pm_select_session_partition(&s, 0, &err) ||
        pm_select_session_start(&s, &tr, &va, NULL, 0, &err) || pm_select_session_run(&s, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        pm_select_session_free(&s);
        return 1;
    }
    /* 3. The table, best first. */
    int ok = 1;
    printf("%-4s %-6s %6s %6s %9s %9s  %s\n", "task", "lr", "layers", "shards", "loss",
           "val loss", "state");
    for (int k = 0; k < s.n; k++) {
        int i = s.order[k];
        const pm_select_result *r = &s.res[i];
        printf("%-4s %-6g %6d %6d %9.4f %9.4f  %s\n", s.tasks[i].name, s.tasks[i].cfg.opt.lr,
               s.tasks[i].cfg.model.layers, s.tasks[i].nshard, r->final_loss, r->val_loss,
               r->state == PM_SELECT_DONE ? "done" : r->why);
        ok &= r->state == PM_SELECT_DONE && r->val_loss < 5.545; /* ln 256: a uniform guess */
    }
    /* 4. The best task's checkpoint, as `pipemem train --save` writes it. */
    char path[] = "/tmp/pipemem_sweep_XXXXXX";
    int fd = mkstemp(path), best = pm_select_session_best(&s);
    pm_ckpt_info info;
    if (fd >= 0) close(fd);
    if (fd < 0 || best < 0 || pm_select_session_save(&s, best, path, &err) ||
        pm_ckpt_info_read(path, &info, &err) || info.step != s.tasks[best].cfg.opt.steps)
        ok = 0;
    else
        printf("best: %s, saved at step %lld\n", s.tasks[best].name, (long long)info.step);
    if (fd >= 0) unlink(path);
    pm_select_session_free(&s);
    if (!ok) fprintf(stderr, "the sweep did not end as it should\n");
    return ok ? 0 : 1;
}
