/* cmd_block.c: `pipemem block`: checks a building-block file (legality,
 * lifespans, the memory theorem's bound per device), builds the schedule
 * from it with the generic constructor, validates and simulates it, and
 * reports or writes it; `--named` prints a named V block in the file
 * format.
 *
 * The report goes to standard output, unless the schedule itself does
 * (--format without -o): then the report goes to standard error so the
 * output stays machine-readable. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: pipemem block FILE [-m M] [--costs F,B,W[,C]] [--mem F,B,W] [--format F] [-o FILE]\n"
    "       pipemem block --named NAME -p P [-o FILE]\n"
    "\n"
    "  FILE              a building block in the block text format ('block v1';\n"
    "                    see docs/formats.md, \"Building blocks\")\n"
    "  -m M              microbatches to build the schedule for (default 3p)\n"
    "  --costs F,B,W[,C] times of F, B, W through one device's share, latency C (1,1,1,0)\n"
    "  --mem F,B,W       activation deltas of F, B, W for one device's share (1,0,-1)\n"
    "  --format F        also write the schedule: text, csv, json, svg or trace\n"
    "  -o FILE           write the schedule (or the named block) there\n"
    "  --named NAME      print the named block v-min, v-half or 1f1b-v for -p P devices\n";

typedef struct {
    const char *file, *named, *format, *out;
    int p, m, have_p, have_m;
    pm_costs t;
    pm_mem mem;
} block_opts;

#define F(x) offsetof(block_opts, x)
static const pm_cli_opt OPTS[] = {
    {"--named", 's', 0, 0, F(named), NULL, NULL, 0},
    {"--format", 's', 0, 0, F(format), NULL, NULL, 0},
    {"-o", 'w', 0, 0, F(out), NULL, NULL, 0},
    {"-p", 'i', 1, PM_SCHED_MAX_P, F(p), NULL, NULL, 0},
    {"-m", 'i', 1, PM_SCHED_MAX_M, F(m), NULL, NULL, 0},
    {"--costs", 'x', 0, 0, F(t), pm_cli_costs, NULL, 0},
    {"--mem", 'x', 0, 0, F(mem), pm_cli_mem, NULL, 0},
};
#undef F

/* The block file: one only. */
static int take_file(void *ctx, const char *a) {
    block_opts *o = ctx;
    if (o->file) return pm_cli_fail("block: one block file only ('%s' and '%s')", o->file, a);
    o->file = a;
    return 0;
}

/* 0 ok, 1 error (printed), 2 --help printed. */
static int parse_opts(int argc, char **argv, block_opts *o) {
    *o = (block_opts){.t = PM_COSTS_DEFAULT, .mem = PM_MEM_DEFAULT};
    int at[sizeof OPTS / sizeof OPTS[0]];
    pm_cli_opts set = {OPTS, sizeof OPTS / sizeof OPTS[0], o, at};
    int rc = pm_cli_parse("block", argc, argv, 1, &set, 1, take_file, o);
    if (rc == 2) fputs(usage, stdout);
    if (rc) return rc;
    o->have_p = pm_cli_given(&set, "-p") > 0, o->have_m = pm_cli_given(&set, "-m") > 0;
    return 0;
}

static int print_named(const block_opts *o) {
    if (!o->have_p) return pm_cli_fail("block: --named %s needs -p P", o->named);
    if (o->file) return pm_cli_fail("block: give either a FILE or --named, not both");
    pm_block b;
    pm_err err;
    if (pm_cli_out_check(o->out)) return 1;
    if (pm_block_named(&b, o->named, o->p, &err)) return pm_cli_fail("%s", err.msg);
    pm_wfile w;
    FILE *f = pm_cli_out_open(&w, o->out);
    if (!f) {
        pm_block_free(&b);
        return 1;
    }
    fprintf(f, "# %s building block for p = %d (pipemem block --named %s -p %d)\n", o->named,
            o->p, o->named, o->p);
    int bad = pm_block_write(f, &b) != PM_OK;
    pm_block_free(&b);
    return pm_cli_out_close(&w, bad, o->out);
}

static void report_block(FILE *f, const char *file, const pm_block *b, const pm_block_info *in) {
    fprintf(f, "block %s: p=%d placement=%s chunks=%d interval=%d passes=%d\n", file, b->p,
            pm_place_names[b->place], b->v, b->T, b->n);
    fprintf(f, "legal: yes (no two passes of a device share a slot mod %d)\n", b->T);
    fprintf(f, "lifespan in slots per chunk (F start to the end of the pass that frees it); "
               "memory bound sum ceil(l/T) x activation, x M:\n");
    for (int d = 0; d < b->p; d++) {
        fprintf(f, "  device %d:", d);
        for (int c = 0; c < b->v; c++) fprintf(f, " chunk %d %d", c, in->lifespan[d * b->v + c]);
        fprintf(f, "   bound %.4f M\n", in->bound[d]);
    }
}

static void report_sched(FILE *f, const pm_cli_sched *pl) {
    fprintf(f, "schedule: m=%d makespan %.6g  bubble %.4f  peak %.4f M (per device:", pl->s.m,
            pl->sim.makespan, pl->sim.bubble, pm_sim_peak_max_x(&pl->sim));
    for (int d = 0; d < pl->s.p; d++) fprintf(f, " %.4f", pm_sim_peak_x(&pl->sim, d));
    fprintf(f, ")\n");
}

/* One line naming the collision: device, residue and the two passes. */
static int fail_collision(const char *file, const pm_block *b, const pm_block_info *in) {
    const pm_block_pass *x = &b->pass[in->bad_pass[0]], *y = &b->pass[in->bad_pass[1]];
    return pm_cli_fail("illegal block %s: device %d has two passes on residue %d mod %d (chunk %d "
                       "%s at slot %d and chunk %d %s at slot %d); move one to a free residue "
                       "or raise the interval",
                       file, in->bad_dev, in->bad_residue, b->T, x->chunk, pm_pass_names[x->kind],
                       x->off, y->chunk, pm_pass_names[y->kind], y->off);
}

static int run_file(const block_opts *o) {
    char *text = NULL;
    size_t len = 0;
    pm_err err;
    pm_block b = {0};
    pm_block_info in = {0};
    pm_cli_sched pl = {0};
    int rc = 1;
    if (pm_read_file(o->file, PM_TEXT_MAX, &text, &len, &err)) return pm_cli_fail("%s", err.msg);
    if (pm_block_parse(&b, text, len, &err)) {
        pm_cli_fail("%s: %s", o->file, err.msg);
        goto done;
    }
    if (o->have_p && o->p != b.p) {
        pm_cli_fail("%s is a block for %d devices; -p %d does not match", o->file, b.p, o->p);
        goto done;
    }
    if (pm_block_analyze(&b, o->mem, &in, &err)) {
        pm_cli_fail("%s: %s", o->file, err.msg);
        goto done;
    }
    if (!in.legal) {
        fail_collision(o->file, &b, &in);
        goto done;
    }
    FILE *rep = o->format && !o->out ? stderr : stdout;
    report_block(rep, o->file, &b, &in);
    pm_sched_req req = {.p = b.p, .m = o->have_m ? o->m : 3 * b.p, .t = o->t, .mem = o->mem};
    /* the schedule's kind: the file's base name without ".block" */
    char kind[32];
    const char *base = strrchr(o->file, '/') ? strrchr(o->file, '/') + 1 : o->file;
    size_t kn = strcspn(base, ".");
    snprintf(kind, sizeof kind, "%.*s", (int)(kn ? kn : strlen(base)), base);
    if (pm_sched_from_block(&pl.s, &b, &req, kind, &err) ||
        pm_cli_sched_adopt(&pl, &req, &err)) {
        pm_cli_fail("%s: %s", o->file, err.msg);
        goto done;
    }
    report_sched(rep, &pl);
    rc = o->format ? pm_cli_sched_write(&pl, o->format, o->out, 0) : 0;
    if (!rc && o->out) fprintf(rep, "wrote %s (%s)\n", o->out, o->format);
done:
    free(text);
    pm_block_free(&b);
    pm_block_info_free(&in);
    pm_cli_sched_free(&pl);
    return rc;
}

int pm_cmd_block(int argc, char **argv) {
    block_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 2 ? 0 : rc;
    if (o.named) return print_named(&o);
    if (!o.file) return pm_cli_fail("block: give a block FILE or --named NAME -p P (see --help)");
    if (o.out && !o.format)
        return pm_cli_fail("block: -o needs --format (text, csv, json, svg, trace)");
    if (o.format && pm_cli_sched_format_ok(o.format)) return 1;
    if (pm_cli_out_check(o.out)) return 1;
    return run_file(&o);
}
