/* fuzz_parsers.c: libFuzzer target for every text parser pipemem exposes:
 * schedules as text and as CSV (format_text.c) and building blocks
 * (block.c). Each input goes to all three parsers.
 *
 * Beyond "no crash, no out-of-bounds access, no leak" (the sanitizers), a
 * schedule that parses must survive a round trip: written back as text or
 * CSV and parsed again it gives the same passes, and its second writing is
 * byte-identical to the first. A schedule the validator accepts (unit
 * costs) must also simulate: no deadlock, every pass ends no earlier than it
 * starts and after the previous pass of its device, a finite makespan.
 * A block survives the same text round trip and goes on through analysis
 * and, when legal and small, schedule construction (then the same check). A
 * mismatch aborts, so libFuzzer (or the replay driver) records it.
 *
 *   make fuzz
 *   build/fuzz/fuzz_parsers -dict=fuzz/parsers.dict -max_total_time=240 build/fuzz/corpus/parsers \
 *       fuzz/seeds/parsers
 * Inputs it once failed on are kept in fuzz/crashes/parsers/ (make check
 * replays them and the seeds).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipemem/pm_sched.h"
#include "schedule/sched.h"

typedef pm_status (*parse_fn)(pm_sched *, const char *, size_t, pm_err *);
typedef pm_status (*write_fn)(FILE *, const pm_sched *);

static char *fz_write(write_fn w, const pm_sched *s, size_t *n) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    if (!f) abort();
    if (w(f, s) != PM_OK) abort();
    fclose(f);
    return buf;
}

static int fz_same(const pm_sched *a, const pm_sched *b) {
    if (a->place != b->place || a->p != b->p || a->m != b->m || a->v != b->v) return 0;
    for (int d = 0; d < a->p; d++) {
        if (a->len[d] != b->len[d]) return 0;
        if (memcmp(pm_sched_dev(a, d), pm_sched_dev(b, d), (size_t)a->len[d] * sizeof(pm_pass)))
            return 0;
    }
    return 1;
}

/* Validator and simulator agree on a schedule that parsed. */
static void fz_simulate(const pm_sched *s) {
    pm_err err;
    if (pm_sched_validate(s, NULL, 0, &err) != PM_OK) return;
    pm_cost c;
    pm_sim sim;
    if (pm_cost_init_uniform(&c, s, PM_COSTS_DEFAULT, PM_MEM_DEFAULT, &err) != PM_OK) return;
    if (pm_sim_run(&sim, s, &c, &err) != PM_OK) abort();
    for (int d = 0; d < s->p; d++)
        for (int64_t i = 0; i < s->len[d]; i++) {
            int64_t k = (int64_t)d * s->cap + i;
            if (!(sim.end[k] >= sim.start[k]) || (i > 0 && sim.start[k] < sim.end[k - 1]))
                abort();
        }
    if (!(sim.makespan >= 0) || sim.makespan > 1e300) abort();
    pm_sim_free(&sim);
    pm_cost_free(&c);
}

static void fz_schedule(parse_fn parse, write_fn write, const char *text, size_t len) {
    pm_sched s, t;
    pm_err err;
    if (parse(&s, text, len, &err) != PM_OK) {
        if (!memchr(err.msg, 0, sizeof err.msg) || strchr(err.msg, '\n')) abort();
        return;
    }
    size_t n1, n2;
    char *out1 = fz_write(write, &s, &n1);
    if (parse(&t, out1, n1, &err) != PM_OK || !fz_same(&s, &t)) abort();
    fz_simulate(&s);
    char *out2 = fz_write(write, &t, &n2);
    if (n1 != n2 || memcmp(out1, out2, n1)) abort();
    free(out1);
    free(out2);
    pm_sched_free(&s);
    pm_sched_free(&t);
}

static char *fz_block_text(const pm_block *b, size_t *n) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    if (!f) abort();
    if (pm_block_write(f, b) != PM_OK) abort();
    fclose(f);
    return buf;
}

/* A block that parses writes back to text that parses to the same text; its
 * analysis succeeds; a legal block of modest size goes through the schedule
 * construction `pipemem block FILE` uses, and what that builds, if the
 * validator accepts it, must simulate. */
static void fz_block(const char *text, size_t len) {
    pm_block b, b2;
    pm_err err;
    if (pm_block_parse(&b, text, len, &err) != PM_OK) {
        if (!memchr(err.msg, 0, sizeof err.msg) || strchr(err.msg, '\n')) abort();
        return;
    }
    size_t n1, n2;
    char *out1 = fz_block_text(&b, &n1);
    if (pm_block_parse(&b2, out1, n1, &err) != PM_OK) abort();
    char *out2 = fz_block_text(&b2, &n2);
    if (n1 != n2 || memcmp(out1, out2, n1)) abort();
    free(out1);
    free(out2);
    pm_block_free(&b2);
    pm_block_info in;
    if (pm_block_analyze(&b, PM_MEM_DEFAULT, &in, &err) == PM_OK) {
        if (in.legal && b.p <= 16 && b.n <= 256 && b.T <= 256) {
            pm_sched_req req = {.p = b.p, .m = 3 * b.p, .t = PM_COSTS_DEFAULT,
                                .mem = PM_MEM_DEFAULT};
            pm_sched s;
            if (pm_sched_from_block(&s, &b, &req, "fuzz", &err) == PM_OK) {
                fz_simulate(&s);
                pm_sched_free(&s);
            }
        }
        pm_block_info_free(&in);
    }
    pm_block_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    fz_schedule(pm_sched_parse_text, pm_sched_write_text, text, size);
    fz_schedule(pm_sched_parse_csv, pm_sched_write_csv, text, size);
    fz_block(text, size);
    return 0;
}
