/* pm_sched.h: the schedule engine. Pure computation: no model, no threads.
 *
 * A schedule is data: a placement of S stages on p devices, and for each
 * device the ordered list of passes (F, B, W or fused BW; stage; microbatch)
 * it runs. Generators build schedules, the validator proves them complete,
 * ordered and deadlock-free, the simulator replays them with per-stage costs
 * and memory deltas, and the formats read and write them.
 *
 * Definitions follow shared/reference/schedules.md:
 *   - F(s,j) needs F(s-1,j); B(s,j) needs B(s+1,j) (or BW), the last stage's
 *     B needs its own F; W(s,j) needs B(s,j) on the same device.
 *   - A pass starts at max(device free, dependency end + c if the dependency
 *     ran on another device) and lasts its cost.
 *   - Peaks are reported as multiples of M, one microbatch's activation
 *     through the whole model (sum over stages of the F delta). */
#ifndef PM_SCHED_H
#define PM_SCHED_H

#include <stdint.h>
#include <stdio.h>

#include "pipemem/pm_util.h"

/* ---- passes and placements -------------------------------------------- */

enum {
    PM_OPT_PROVEN = 1, /* the schedule is optimal (simulated makespan = the bound) */
    PM_OPT_TIMEOUT,    /* the time limit ended the search: best found, with a bound */
    PM_OPT_OPEN,       /* the search ended without proof (node limit, relaxation) */
    PM_OPT_FAILED,     /* the solver failed: the best heuristic schedule, unproven */
};

typedef enum { PM_PASS_F, PM_PASS_B, PM_PASS_W, PM_PASS_BW, PM_PASS_COUNT } pm_pass_kind;
extern const char *const pm_pass_names[PM_PASS_COUNT]; /* "F", "B", "W", "BW" */

/* Where the stages sit: the placements, in the order the search and the
 * curve list them (its families). */
typedef enum {
    PM_PLACE_SINGLE, /* S = p, stage s on device s */
    PM_PLACE_V,      /* S = 2p, device i holds stages i and 2p-1-i */
    PM_PLACE_LOOP,   /* S = v*p, stage s on device s mod p */
    PM_PLACE_COUNT
} pm_place;
extern const char *const pm_place_names[PM_PLACE_COUNT]; /* "single", "v", "loop" */

typedef struct {
    int32_t kind;  /* pm_pass_kind */
    int32_t stage; /* 0 .. S-1 */
    int32_t mb;    /* microbatch, 0 .. m-1 */
} pm_pass;

/* ---- the schedule ------------------------------------------------------ */

typedef struct {
    char kind[32];  /* generator name ("1f1b", "v-half", "file", ...) */
    pm_place place; /* stage-to-device placement */
    int recompute;  /* 1: every stage recomputes (below); 0: F keeps its activations */
    /* `optimal` kinds: how the MILP ended (0 not an optimal kind, PM_OPT_*),
     * its proven lower bound on the makespan and the solve's seconds */
    int opt_status;
    double opt_bound, opt_seconds;
    int p;          /* devices */
    int m;          /* microbatches */
    int v;          /* stages per device: 1 single, v loop, 2 V */
    int S;          /* stages = v*p */
    int64_t cap;    /* pass capacity per device: 3*m*v */
    int64_t *len;   /* (p) passes on each device; owned */
    pm_pass *pass;  /* (p, cap) device d's list is pass[d*cap .. d*cap+len[d]); owned */
    /* (p, cap) or NULL (no pairs): pair[d*cap+i] = 1 when device d's pass i,
     * an F, and pass i+1, a BW of another microbatch, are an overlapped
     * pair (DualPipe's F&B). Only costs with fb_overlap run a pair as one
     * (pm_cost); elsewhere they are two passes in list order. owned */
    uint8_t *pair;
} pm_sched;

void pm_sched_free(pm_sched *s);
/* 1 if device d's passes i and i+1 form an overlapped pair: marked, an F
 * then a BW, of different microbatches (neither needs the other's output). */
int pm_sched_paired(const pm_sched *s, int d, int64_t i);

static inline pm_pass *pm_sched_dev(const pm_sched *s, int d) { return s->pass + (int64_t)d * s->cap; }

/* Device that holds stage s. */
int pm_sched_stage_device(const pm_sched *s, int stage);

/* ---- costs and memory -------------------------------------------------- */

/* What the user gives on the command line: the times and activation deltas
 * of one microbatch through ONE DEVICE'S SHARE of the model (1/p of the
 * layers). A placement with v stages per device charges 1/v per pass. */
typedef struct {
    double f, b, w; /* time of F, B and W; BW costs b + w */
    double c;       /* point-to-point latency between devices */
} pm_costs;
typedef struct {
    double f, b, w; /* activation delta of F, B and W; BW = b + w */
    double r;       /* what a recomputed F keeps (its stage's input); 0 = f * PM_KEEP_DEFAULT */
} pm_mem;

#define PM_COSTS_DEFAULT ((pm_costs){1, 1, 1, 0})
#define PM_MEM_DEFAULT ((pm_mem){1, 0, -1, 0})
/* What a recomputed stage keeps of one microbatch when --mem does not say,
 * as a fraction of its activation. A GPT block of pipemem's model keeps its
 * input, h floats per token, of about 16h + as it saves (h width, a heads,
 * s context; src/model/shape.c), so 1/16 is the most a block keeps. */
#define PM_KEEP_DEFAULT 0.0625

/* Activation recomputation (the papers' 1F1B-R), a property of a whole
 * schedule: F runs its stage and keeps only the stage's input (mr); B first
 * reruns the stage's forward from that input (so it costs tf + tb), then
 * runs as usual. While F runs, the whole activation (mf) exists on top of
 * what F keeps; while B runs, the recomputed activation exists on top of
 * what was there before. */
/* Per-stage costs, what the simulator consumes. The runtime fills these from
 * measured pass times and the model's exact byte deltas. */
typedef struct {
    double tf, tb, tw; /* time of F, B, W on this stage */
    double mf, mb, mw; /* memory delta of F, B, W on this stage (without recomputation) */
    double mr;         /* recomputed: what F keeps (bytes or units like mf) */
    int rec;           /* 1 if the stage recomputes: F keeps mr, B reruns F first */
} pm_stage_cost;

typedef struct {
    int S;             /* stages */
    double c;          /* point-to-point latency */
    pm_stage_cost *st; /* (S); owned */
    /* 1: a schedule's overlapped pairs (pm_sched.pair) run as one, starting
     * when both may, both ending after max(tF, tBW) + fb_frac min(tF, tBW):
     * F and BW of two microbatches sharing the device, each hiding the
     * other's communication (DualPipe). 0 (the default): two passes. */
    int fb_overlap;
    double fb_frac;    /* 0 .. 1: what the overlap does not hide of the shorter one */
} pm_cost;

/* Per-stage costs for schedule s from device-share costs: every stage gets
 * t/v and mem/v; rec and mr from s->recompute and mem.r (or its default). */
pm_status pm_cost_init_uniform(pm_cost *c, const pm_sched *s, pm_costs t, pm_mem mem,
                               pm_err *err);
void pm_cost_free(pm_cost *c);

/* ---- simulator --------------------------------------------------------- */

typedef struct {
    int p;             /* devices */
    int64_t cap;       /* same layout as the schedule's pass array */
    double *start;     /* (p, cap) start time of each pass */
    double *end;       /* (p, cap) end time of each pass */
    double *mem;       /* (p, cap) device activation after each pass (absolute units) */
    double *span;      /* (p) end of last pass - start of first */
    double *busy;      /* (p) sum of pass times */
    double *peak;      /* (p) peak activation (absolute units) */
    int64_t *peak_at;  /* (p) index of the pass that first reached the peak */
    double makespan;   /* max span */
    double bubble;     /* 1 - the model's work / (p * makespan): busy time, less the
                          reruns of recomputed forwards (overhead, not work); an
                          overlapped pair run as one (fb_overlap) is busy once */
    double M;          /* activation of one microbatch through the model */
    const char *unit;  /* the times' unit for people ("us" measured); NULL: the costs' */
    int S, m;          /* stages and microbatches it was sized for */
    /* data parallelism, filled by pm_sim_dp (NULL and 0 before) */
    double *red_start, *red_end; /* (S) stage s's gradient reduction across replicas */
    double dp_step;              /* the step with the reductions overlapped */
    double dp_step_serial;       /* the step if each device reduced after its passes */
    double *scratch;   /* replay state: dependency ends, device free times; owned */
    int64_t *cursor;   /* (3p) replay state: next pass of each device, worklist of
                          devices to revisit, on-list flags; owned */
} pm_sim;

/* Replays s with costs c (the rule above). On deadlock returns
 * PM_ERR_DEADLOCK and names the first stuck device, its pass and what it
 * waits for. On error *out is zeroed. */
pm_status pm_sim_run(pm_sim *out, const pm_sched *s, const pm_cost *c, pm_err *err);
/* Replays s again into a simulation pm_sim_run made, with other costs:
 * allocates nothing and overwrites the previous result. The schedule must
 * have the shape sim was sized for (p, cap, S, m). On an error the contents
 * are unspecified but sim stays valid to free. */
pm_status pm_sim_replay(pm_sim *sim, const pm_sched *s, const pm_cost *c, pm_err *err);
void pm_sim_free(pm_sim *sim);
/* Data parallelism on a simulated schedule: D replicas each run it, and
 * stage k's gradients are then summed across them, taking ar[k] (the cost
 * of the sum: a ring all-reduce of n bytes over D replicas at bw bytes and
 * latency a per time unit takes 2 (D - 1) (a + n / (D bw))). A stage's sum starts when its last
 * weight pass (W or BW) on its device ends; a device's link does one sum at
 * a time, in the order its stages become ready (ties: lower stage first).
 * Fills sim->red_start/red_end (allocated on the first call, reused after)
 * and the step the simulator's way (per device, its first pass's start to
 * the later of its last pass and its last sum; the largest), overlapped and
 * with every device's sums after its own last pass. */
pm_status pm_sim_dp(pm_sim *sim, const pm_sched *s, const double *ar, pm_err *err);

/* Peak of device d as a multiple of M. */
static inline double pm_sim_peak_x(const pm_sim *sim, int d) { return sim->peak[d] / sim->M; }
double pm_sim_peak_max_x(const pm_sim *sim);

/* A lower bound on the makespan of every schedule with s's placement, p, m
 * and these per-stage costs whose every device stays within cap (absolute
 * units, like pm_sim.M; <= 0: no cap): work, fill and drain per device
 * (bound.c has the derivation), and memory limits the work a device can do
 * before its first backward and after its last forward, and how many
 * microbatches it can hold per round trip, which tightens the bound. No
 * valid schedule's simulated makespan is below it. O(S + p). s and c must
 * not be NULL (asserted). */
double pm_sched_lower_bound_at(const pm_sched *s, const pm_cost *c, double cap);

/* ---- polish ------------------------------------------------------------ */

typedef struct {
    double cap;      /* no device's peak above it (absolute units, like pm_sim.M); <= 0: none */
    int64_t budget;  /* passes it may simulate */
    int patience;    /* kicks in a row without a gain that end it; 0: no such limit */
} pm_polish_cfg;

typedef struct {
    int moves;       /* moves kept by the climbs that were kept */
    int rounds;      /* rounds over every pass in the first climb */
    int64_t spent;   /* passes simulated: those each move's replay ran (it resumes
                        and stops early) plus one per device, and two full replays
                        a kick (each counted at least 256) */
    int converged;   /* 1: the first climb ended with a round that kept nothing */
    int64_t kicks;   /* random kicks tried after it, ... */
    int64_t kicks_kept; /* ... and those whose climb ended with a better score */
    int optimal;     /* 1: the makespan meets pm_sched_lower_bound_at (then it stops) */
} pm_polish_stats;

/* Improves s in place by an iterated local search over each device's order
 * (polish.c). A climb moves one pass at a time up to 4 places on its
 * device and keeps a move when the replay gets a smaller makespan (then a
 * smaller sum of device spans, then of end times), until a round keeps
 * nothing; then random kicks of 3 moves, each followed by a climb, are kept
 * when they end better, until cfg->patience kicks in a row gain nothing,
 * the makespan meets pm_sched_lower_bound_at, or cfg->budget simulated
 * passes are spent; s->kind gains "+polish". The result replays under c,
 * stays within cfg->cap and its makespan is at most s's; it depends on
 * nothing but the inputs (same result on any machine). A schedule that
 * does not replay, runs a pass twice or is over the cap to start with is
 * left as it is, kind and all, but for the marks of overlapped pairs (pm_sched.pair), which
 * polishing always drops: a move would break a pair. stats may be NULL.
 * Fails only out of memory. */
pm_status pm_sched_polish(pm_sched *s, const pm_cost *c, const pm_polish_cfg *cfg,
                          pm_polish_stats *stats, pm_err *err);

/* ---- validator --------------------------------------------------------- */

/* A peak meets a memory limit when it is at most limit * (1 + PM_PEAK_TOL):
 * the sums of pass deltas that reach a peak round differently in different
 * orders, so a schedule built to a limit can overshoot it by a few ulps.
 * The validator, the generators, the searches and the planner all use it. */
#define PM_PEAK_TOL 1e-9

/* Checks, naming the first offending pass:
 *   1. every pass names a stage in 0..S-1 and a microbatch in 0..m-1;
 *   2. each device only runs stages it holds;
 *   3. each (stage, mb) has F exactly once and either B and W once each or
 *      BW once;
 *   4. within a device, dependencies listed on that device come first (F
 *      before B before W of a (stage, mb); F(s-1) before F(s) when both
 *      stages are local, and so on);
 *   5. the schedule does not deadlock under the simulation rule;
 *   6. if mem_limit > 0 (a multiple of M) and c is given, no device's peak
 *      exceeds it (by more than PM_PEAK_TOL).
 * c may be NULL (unit costs and the default memory are used for 5). */
pm_status pm_sched_validate(const pm_sched *s, const pm_cost *c, double mem_limit, pm_err *err);

/* ---- generators -------------------------------------------------------- */

/* Everything a generator may use. Zero fields take the kind's default. */
typedef struct {
    int p;            /* devices */
    int m;            /* microbatches */
    int v;            /* chunks per device (interleaved); 0 = kind default */
    pm_costs t;       /* device-share costs (for generators that squeeze) */
    pm_mem mem;       /* device-share memory deltas */
    double mem_limit; /* multiple of M; 0 = kind default or none */
    int recompute;    /* 1: build the kind with recomputation (any kind) */
    double time_limit; /* seconds the `optimal` kinds may search (0: 60) */
    int max_stages;   /* a search's candidates have at most this many stages (a model
                       * cut into no more pieces than it has layers); 0 = any */
} pm_sched_req;

/* Supported range. Every request outside it is refused at once, before any
 * allocation, with one line naming the limit. The limits keep each command
 * under about ten seconds and a few hundred MB on one core (docs/schedules.md,
 * "Supported ranges", has the measured times):
 *   every kind:  1 <= p <= PM_SCHED_MAX_P, 1 <= m <= PM_SCHED_MAX_M, and at
 *                most PM_SCHED_MAX_PASSES passes (3 p m v: F, B, W of every
 *                stage and microbatch); validation and simulation are
 *                linear in the passes;
 *   named V blocks (v-min, v-half, 1f1b-v): p <= PM_BLOCK_MAX_P and
 *                p m <= PM_BLOCK_MAX_PM (the constructor's reordering
 *                grows faster than the passes);
 *   greedy kinds (zb, zb-1p, zb-2p, v-zb): p <= PM_GREEDY_MAX_P and
 *                p m <= PM_GREEDY_MAX_PM (their cost grows as p^2 m);
 *   searches (auto-v, `search`, `curve`): p <= PM_SEARCH_MAX_P and
 *                p m <= PM_SEARCH_MAX_PM (they build O(p) schedules). */
#define PM_SCHED_MAX_P 1048576
#define PM_SCHED_MAX_M 1048576
#define PM_SCHED_MAX_PASSES ((int64_t)1 << 24)
#define PM_BLOCK_MAX_P 1024
#define PM_BLOCK_MAX_PM ((int64_t)1 << 18)
#define PM_GREEDY_MAX_P 1024
#define PM_GREEDY_MAX_PM ((int64_t)1 << 21)
#define PM_SEARCH_MAX_P 128
#define PM_SEARCH_MAX_PM ((int64_t)1 << 15)

/* PM_OK if every time the simulator can compute for req (p, m, t) is a
 * finite double with room to spare: the makespan is at most the whole work
 * of every device plus a latency per pass, (f + b + w + 2c) * 4 p m, which
 * must stay below 1e300. Else PM_ERR_ARG naming --costs. */
pm_status pm_sched_check_costs(const pm_sched_req *req, pm_err *err);

typedef enum {
    PM_TIER_FIXED = 0, /* a fixed pattern: linear in passes */
    PM_TIER_BLOCK,     /* a named V block repeated */
    PM_TIER_GREEDY,    /* a greedy search over passes */
    PM_TIER_SEARCH,    /* a search over many schedules */
} pm_sched_tier;

typedef struct {
    const char *name;  /* "1f1b" */
    const char *about; /* one line for --help */
    pm_place place;
    /* Smallest m the kind accepts for p devices and v chunks (0 if any). */
    int (*min_m)(int p, int v);
    /* Checks req (v fits the kind, m large enough...) and builds. */
    pm_status (*build)(pm_sched *s, const pm_sched_req *req, pm_err *err);
    pm_sched_tier tier; /* which supported range applies */
} pm_sched_kind;

/* Registry of the named heuristic generators, in a stable order (what
 * `compare` and every loop over kinds run). The exact kinds `optimal` and
 * `optimal-v`, whose MILP can search for minutes, are found by name only
 * (pm_sched_generate). */
const pm_sched_kind *pm_sched_kinds(int *n);
/* Looks the kind up by name, checks p, m and v with clear messages (naming
 * the minimum m, the chunk counts that fit), and builds. */
pm_status pm_sched_generate(pm_sched *s, const char *kind, const pm_sched_req *req, pm_err *err);

/* ---- building blocks --------------------------------------------------- */

/* One microbatch's passes on every device with slot offsets, repeated every
 * T slots. Offsets are in slots; a pass occupies `dur` consecutive slots
 * (1 for V chunk passes in the papers' units). */
typedef struct {
    int dev;    /* device */
    int chunk;  /* chunk on that device (0 .. v-1) */
    int kind;   /* pm_pass_kind */
    int off;    /* start slot */
    int dur;    /* slots occupied */
} pm_block_pass;

typedef struct {
    pm_place place;       /* placement of the stages */
    int p;                /* devices */
    int v;                /* chunks per device (2 for V) */
    int T;                /* interval between microbatches */
    int n;                /* number of passes */
    pm_block_pass *pass;  /* (n); owned */
} pm_block;

typedef struct {
    int legal;          /* 1 if no device has two passes on one residue mod T */
    int bad_dev;        /* first collision: device ... */
    int bad_residue;    /* ... and residue */
    int bad_pass[2];    /* the two colliding passes (indices into the block's pass[]) */
    int *lifespan;      /* (p, v) slots from F start to end of the freeing pass */
    double *bound;      /* (p) memory theorem bound per device, multiple of M */
} pm_block_info;

/* Text format (documented in docs/formats.md, "Building blocks"). Errors name line and
 * column. */
pm_status pm_block_parse(pm_block *b, const char *text, size_t len, pm_err *err);
pm_status pm_block_write(FILE *f, const pm_block *b);
void pm_block_free(pm_block *b);
/* Named V blocks (v-min, v-half, 1f1b-v) for p devices. */
pm_status pm_block_named(pm_block *b, const char *name, int p, pm_err *err);
/* Legality, lifespans and the memory bound (mem gives each pass's delta per
 * device share). */
pm_status pm_block_analyze(const pm_block *b, pm_mem mem, pm_block_info *info, pm_err *err);
void pm_block_info_free(pm_block_info *info);
/* Repeat at interval T for m microbatches, squeeze with real costs, move
 * passes earlier into idle slots (construct.c) without raising the largest
 * device's peak of the plain repetition; a device may rise up to that peak
 * but never above its own memory-theorem bound. */
pm_status pm_sched_from_block(pm_sched *s, const pm_block *b, const pm_sched_req *req,
                              const char *kind, pm_err *err);

/* ---- formats ----------------------------------------------------------- */

/* PyTorch pipelining action grammar: "2F0" stage 2 forward mb 0; I the
 * input-gradient pass (our B), W the weight pass, B the fused pass (our BW).
 * Text: one line per device, actions separated by spaces; CSV: one row per
 * rank, actions separated by commas (compute actions only). Errors name line
 * and column. The reader infers p from the rows, S and m from the actions,
 * and the placement from where the stages sit. */
pm_status pm_sched_write_text(FILE *f, const pm_sched *s);
pm_status pm_sched_write_csv(FILE *f, const pm_sched *s);
/* Reads a file, telling text from CSV by its content. */
pm_status pm_sched_load(pm_sched *s, const char *path, pm_err *err);

/* JSON: kind, placement, p, m, v, stages, costs, makespan, bubble, peak
 * (per device, x M), peak_max, and per device the passes with start/end. */
pm_status pm_sched_write_json(FILE *f, const pm_sched *s, const pm_cost *c, const pm_sim *sim);
/* SVG timeline: one row per device, passes coloured by kind, microbatch
 * numbers, V chunks told apart, a title with bubble rate and peak. */
pm_status pm_sched_write_svg(FILE *f, const pm_sched *s, const pm_sim *sim, const char *title);
/* Chrome trace JSON (opens in Perfetto): one track per device. */
pm_status pm_sched_write_trace(FILE *f, const pm_sched *s, const pm_sim *sim);

/* ---- schedules searched under a memory limit -------------------------- */

/* One point of a bubble-versus-memory curve, or a search result. */
typedef struct {
    int ok;            /* 1 if some schedule fits the limit */
    char kind[32];     /* the generator of the best one */
    double makespan;   /* its simulated makespan */
    double bubble;     /* the simulator's bubble (a recomputed forward counts as lost
                          time, so the rates of all schedules of one shape compare) */
    double peak;       /* its peak, x M (max over devices) */
} pm_search_point;

/* The best schedule over every family that fits req->mem_limit (> 0
 * required): smallest makespan, ties to the smaller peak. When p m <= 200
 * the candidates are first polished by a local search over each device's
 * order (the kind then ends in "+polish"). best receives the
 * schedule (caller frees), *pt its figures and reason (reason_len bytes) a
 * one-line explanation of the choice. If nothing fits, PM_ERR_MEMLIMIT
 * naming the smallest feasible limit. */
pm_status pm_sched_search(pm_sched *best, const pm_sched_req *req, pm_search_point *pt,
                          char *reason, size_t reason_len, pm_err *err);

/* Bubble-versus-memory curve: for each placement f (pm_place: the families
 * compared) and each of the n limits (x M), the best schedule of that
 * placement fitting limits[k], in pts[f * n + k] (ok = 0 where none fits).
 * req->mem_limit is ignored. */
pm_status pm_sched_curve(const pm_sched_req *req, const double *limits, int n,
                         pm_search_point *pts, pm_err *err);

#endif
