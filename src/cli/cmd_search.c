/* cmd_search.c: `pipemem search`: the fastest schedule of any family whose
 * activation memory stays within --mem-limit on every device, with a
 * one-line reason for the choice (on stderr) and the schedule written like
 * `pipemem schedule` writes it. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pipemem search -p P -m M --mem-limit X [--costs F,B,W[,C]] [--mem F,B,W[,R]]\n"
    "                      [--recompute] [--format text|csv|json|svg|trace] [-o FILE]\n"
    "\n"
    "The fastest schedule over every family (single placement: 1F1B, ZB-H1/H2, the Zero\n"
    "Bubble heuristic; V placement: V-Min, V-Half, ZB-V, V-ZB, DualPipeV (m >= 2p),\n"
    "searched building blocks; interleaved) whose peak activation stays within X times M\n"
    "on every device (M: one microbatch's activation through the whole model, 1F1B's\n"
    "peak). The reason for the choice goes to standard error, the schedule to standard\n"
    "output or -o FILE.\n"
    "Recomputed variants (1f1b-r, zb-h1-r, v-min-r, v-half-r, 1f1b-v-r, zb-v-r) are\n"
    "candidates too, so limits below V-Min's fit; --recompute searches only them.\n"
    "Supported range: p <= 128 and p m <= 2^15 (the search builds O(p) schedules).\n";

int pm_cmd_search(int argc, char **argv) {
    pm_cli_sched_opts o;
    int rc = pm_cli_sched_parse(argc, argv, &o, usage, NULL);
    if (rc) return rc == 2 ? 0 : rc;
    if (o.kind || o.from) return pm_cli_fail("search: --kind/--from belong to 'schedule'");
    if (pm_cli_no_dp(&o, "search")) return 1;
    if (pm_cli_no_polish(&o, "search")) return 1;
    if (!o.have_p || !o.have_m) return pm_cli_fail("search: needs -p P and -m M");
    if (!(o.req.mem_limit > 0))
        return pm_cli_fail("search: needs --mem-limit X (a multiple of M; 1.0 is 1F1B's peak)");
    if (o.req.v) return pm_cli_fail("search: --chunks is chosen by the search; leave it out");
    const char *format = o.format ? o.format : "text";
    if (pm_cli_sched_format_ok(format) || pm_cli_out_check(o.out)) return 1;
    pm_cli_sched pl = {0};
    pm_err err;
    char reason[512];
    pm_status st = pm_sched_search(&pl.s, &o.req, NULL, reason, sizeof reason, &err);
    if (!st) st = pm_cli_sched_adopt(&pl, &o.req, &err);
    if (st) {
        pm_cli_sched_free(&pl);
        return pm_cli_fail("search: %s", err.msg);
    }
    fprintf(stderr, "pipemem: search: %s\n", reason);
    rc = pm_cli_sched_write(&pl, format, o.out, 1);
    if (!rc && o.out) {
        fprintf(stderr, "pipemem: wrote %s: ", o.out);
        pm_cli_sched_summary(stderr, &pl);
    }
    pm_cli_sched_free(&pl);
    return rc;
}
