/* cmd_schedule.c: `pipemem schedule`: generate a named schedule or read one
 * (text or CSV), validate it, simulate it and write it out. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pipemem schedule --kind K -p P -m M [--chunks V] [options]\n"
    "       pipemem schedule --from FILE [options]\n"
    "\n"
    "  --kind K          a named schedule (see `pipemem compare` for the list);\n"
    "                    KIND-r is KIND with recomputation (1f1b-r, v-half-r, ...)\n"
    "  --recompute       every stage keeps only its input and B reruns its forward\n"
    "  -p P, -m M        devices and microbatches\n"
    "  --chunks V        chunks per device (interleaved only)\n"
    "  --from FILE       read a schedule in PyTorch's action text or CSV format (it\n"
    "                    decides P, M and V: -p, -m and --chunks are refused)\n"
    "  --costs F,B,W[,C] times of F, B, W through one device's share of the model,\n"
    "                    and the point-to-point latency C (default 1,1,1,0)\n"
    "  --mem F,B,W[,R]   activation deltas of F, B, W for one device's share (1,0,-1),\n"
    "                    and R what a recomputed F keeps (default F/16)\n"
    "  --mem-limit X     reject the schedule if a device exceeds X times M\n"
    "  --overlap-fb X    run overlapped F&B pairs (DualPipeV's, or a file's\n"
    "                    OVERLAP_F_B cells) as one pass of max(F, BW) + X min(F, BW),\n"
    "                    0 <= X <= 1 (default: two passes, one after the other)\n"
    "  --polish          improve it by a local search over each device's order, within\n"
    "                    --mem-limit (or its own peak without one); the kind gains\n"
    "                    \"+polish\" and stderr says what it did\n"
    "  --time-limit S    optimal, optimal-v: seconds the exact search may take (default 60)\n"
    "  --dp D            D data-parallel replicas: each stage's gradients are summed\n"
    "                    across them from the end of its last weight pass on; -m is\n"
    "                    one replica's microbatches (train's --microbatches is D m)\n"
    "  --allreduce-cost C  that sum's time per stage, in the units of --costs\n"
    "  --format F        text (default), csv, json, svg or trace; csv is PyTorch's\n"
    "                    compute-only layout, which has no place for recomputation:\n"
    "                    read a recomputed schedule's CSV with --recompute (the text\n"
    "                    format marks it with the line '# pipemem: recompute')\n"
    "  -o FILE           write there instead of standard output (replaced whole, or\n"
    "                    left as it was on any error)\n"
    "\n"
    "Supported range: p, m <= 1048576 and 3 p m v <= 2^24 passes; v-min, v-half,\n"
    "1f1b-v: p <= 1024; zb, zb-1p, zb-2p, v-zb: p <= 1024 and p m <= 2^21; auto-v:\n"
    "p <= 128 and p m <= 2^15; dualpipev: m >= 2p. Costs must keep (F+B+W+2C) 4 p m\n"
    "below 1e300.\n";

_Static_assert(PM_SCHED_MAX_PASSES == (int64_t)1 << 24, "the help text says 2^24 passes");

/* Passes --polish may simulate (about a second here): once the first climb
 * ends, kicks go on until the budget ends or the makespan meets the lower
 * bound. The search's own polish stops far sooner (polish.h); asked for by
 * name, it may take more: at p = 2, m = 8, costs 3,3,2, 0.75 M it reaches
 * the optimum, 71.5, where the search's stops at 72.5. */
#define POLISH_BUDGET ((int64_t)100000000)

/* --polish: the local search within --mem-limit, or within the schedule's
 * own peak without one, then validated and simulated again. */
static pm_status polish(pm_cli_sched *pl, const pm_sched_req *req, pm_err *err) {
    double before = pl->sim.makespan;
    if (pl->s.opt_status == PM_OPT_PROVEN) {
        fprintf(stderr, "pipemem: polish: nothing to do, %s is proven optimal\n", pl->s.kind);
        return PM_OK;
    }
    double cap = (req->mem_limit > 0 ? req->mem_limit : pm_sim_peak_max_x(&pl->sim)) * pl->sim.M;
    pm_polish_stats ps;
    pm_polish_cfg cfg = {cap, POLISH_BUDGET, 0};
    pm_status st = pm_sched_polish(&pl->s, &pl->c, &cfg, &ps, err);
    if (!st) st = pm_sched_validate(&pl->s, &pl->c, req->mem_limit, err);
    if (st) return st;
    pm_sim_free(&pl->sim);
    if ((st = pm_sim_run(&pl->sim, &pl->s, &pl->c, err))) return st;
    fprintf(stderr, "pipemem: polish: makespan %.6g -> %.6g, %d move%s kept; ", before,
            pl->sim.makespan, ps.moves, ps.moves == 1 ? "" : "s");
    if (ps.optimal) fprintf(stderr, "optimal: it meets the lower bound\n");
    else if (ps.converged)
        fprintf(stderr, "%lld random kicks, %lld of them kept\n", (long long)ps.kicks,
                (long long)ps.kicks_kept);
    else
        fprintf(stderr, "its budget of %.0e simulated passes ran out in the first climb\n",
                (double)POLISH_BUDGET);
    return PM_OK;
}

/* 1 if s has an overlapped F&B pair (what --overlap-fb runs as one). */
static int has_pairs(const pm_sched *s) {
    for (int d = 0; s->pair && d < s->p; d++)
        for (int64_t i = 0; i + 1 < s->len[d]; i++)
            if (pm_sched_paired(s, d, i)) return 1;
    return 0;
}

int pm_cmd_schedule(int argc, char **argv) {
    pm_cli_sched_opts o;
    int rc = pm_cli_sched_parse(argc, argv, &o, usage, NULL);
    if (rc) return rc == 2 ? 0 : rc;
    if (!o.kind == !o.from) return pm_cli_fail("schedule: give either --kind K or --from FILE");
    if (o.kind && (!o.have_p || !o.have_m))
        return pm_cli_fail("schedule: --kind %s needs -p P and -m M", o.kind);
    if (o.from && (o.have_p || o.have_m || o.req.v)) { /* they were ignored */
        const char *opt = o.have_p ? "-p" : o.have_m ? "-m" : "--chunks";
        return pm_cli_fail("schedule: %s with --from %s: the file decides the devices, "
                           "microbatches and chunks; drop %s", opt, o.from, opt);
    }
    const char *format = o.format ? o.format : "text";
    if (pm_cli_sched_format_ok(format) || pm_cli_out_check(o.out)) return 1;
    pm_cli_sched pl = {0};
    pm_err err;
    pm_status st;
    if (o.kind) {
        st = pm_cli_sched_make(&pl, o.kind, &o.req, &err);
    } else {
        st = pm_sched_load(&pl.s, o.from, &err);
        if (!st && o.req.recompute) pl.s.recompute = 1;
        if (!st) st = pm_cli_sched_adopt(&pl, &o.req, &err);
    }
    if (!st && o.have_overlap_fb && !has_pairs(&pl.s))
        st = pm_errf(&err, PM_ERR_ARG, "schedule: --overlap-fb %g: this %s schedule has no "
                     "overlapped F&B pairs to run as one (DualPipeV's have them, and a file's "
                     "marked pairs); drop --overlap-fb", o.overlap_fb, pl.s.kind);
    if (!st && o.polish) st = polish(&pl, &o.req, &err);
    if (!st) st = pm_cli_sched_overlap(&pl, &o, &err);
    if (!st) st = pm_cli_sched_dp(&pl, &o, &err);
    if (st) {
        pm_cli_sched_free(&pl);
        return pm_cli_fail("%s", err.msg);
    }
    rc = pm_cli_sched_write(&pl, format, o.out, 1);
    if (pl.s.opt_status) {
        static const char *const how[] = {"", "proven optimal", "time limit reached",
                                           "search ended unproven", "solver failed"};
        fprintf(stderr, "pipemem: %s: %s: makespan %.6g, proven bound %.6g (gap %.2f%%), "
                "%.1f s\n", pl.s.kind, how[pl.s.opt_status], pl.sim.makespan, pl.s.opt_bound,
                100 * (pl.sim.makespan / pl.s.opt_bound - 1), pl.s.opt_seconds);
    }
    if (!rc && o.out)
        fprintf(stderr, "pipemem: wrote %s (%s p=%d m=%d: makespan %.6g, bubble %.2f%%, peak %.3f M)\n",
                o.out, pl.s.kind, pl.s.p, pl.s.m, pl.sim.makespan, 100 * pl.sim.bubble,
                pm_sim_peak_max_x(&pl.sim));
    pm_cli_sched_free(&pl);
    return rc;
}
