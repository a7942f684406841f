/* block_named.c: the named V blocks for p devices: V-Min and V-Half from
 * the papers' offset formulas, and 1F1B-V: the chain block of the authors'
 * generator (forwards back to back, then the fused backward chain), or, when
 * that needs more memory, the block of a bounded depth-first search whose
 * first leaf is the greedy block (so it always returns one). */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"

/* ---- named blocks ------------------------------------------------------ */

/* V-Min and V-Half: F and B offsets from the papers' formulas (schedules.md;
 * for device i, a shift a keeps the residues distinct when p is divisible by
 * 3, resp. even), W filled in by the first-free-slot rule. */
static pm_status named_formula(pm_block *b, int half, int p, pm_err *err) {
    pm_status st = pm_block_alloc(b, PM_PLACE_V, p, 2, 6, 6 * p, err);
    if (st) return st;
    int a = half ? (p % 2 == 0 ? 3 : 0) : (p % 3 == 0 ? 2 : 0);
    for (int i = 0; i < p; i++) {
        int f0 = half ? 2 * i : i, f1 = half ? 3 * p - 2 - i : 2 * p - 1 - i;
        int b1 = half ? 3 * p + a + 2 * i - 1 : 2 * p + a + i;
        int b0 = half ? 6 * p + a - 2 - i : 4 * p + a - 1 - i;
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_F, f0, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_F, f1, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_B, b1, 1};
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_B, b0, 1};
    }
    if ((st = pm_block_fill_w(b, err)) || (st = pm_block_check_lines(b, NULL, 0, err))) pm_block_free(b);
    return st;
}

/* Can passes of the given durations still be packed, without overlap, into
 * the residues mod T not set in occ (T small)? Tries every free start. */
static int packable(unsigned char *occ, int T, const int *dur, int n) {
    if (n == 0) return 1;
    for (int r = 0; r < T; r++) {
        int ok = 1;
        for (int k = 0; k < dur[0] && ok; k++) ok = !occ[(r + k) % T];
        if (!ok) continue;
        for (int k = 0; k < dur[0]; k++) occ[(r + k) % T] = 1;
        ok = packable(occ, T, dur + 1, n - 1);
        for (int k = 0; k < dur[0]; k++) occ[(r + k) % T] = 0;
        if (ok) return 1;
    }
    return 0;
}

/* 1F1B-V: V placement, fused BW of 2 slots, T = 6 (F0, F1, BW1, BW0 fill an
 * interval exactly). Passes go in dependency order (F down and back up the
 * V: steps 0..S-1 are the F of stages 0..S-1, steps S..2S-1 the BW of stages
 * S-1..0), each at a slot after its dependency whose residues are free on
 * its device and leave the device's remaining passes room to fit. A
 * depth-first search tries, for every step, the first 3 such slots, earliest
 * first, so its first leaf is the greedy block; within a node budget it
 * keeps the block with the smallest memory bound (largest per-device sum of
 * ceil(lifespan / T), then the total), pruning with a lower bound: a stage
 * whose BW is not placed yet ends no earlier than the remaining chain of
 * passes allows. */
enum { V1_T = 6, V1_BRANCH = 3 };

typedef struct {
    int p, S;
    unsigned char *occ; /* (p, T) residues taken on each device */
    int *off;           /* (2S) slot of each step placed so far */
    int *best;          /* (2S) the best complete block found */
    int *cnt;           /* (p) scratch: per-device sums */
    int best_max, best_sum; /* its objective; best_max < 0 until a leaf */
    long nodes;         /* node budget left */
} v1_search;

static void v1_step(const v1_search *g, int step, int *stage, int *dev, int *chunk, int *dur) {
    int fwd = step < g->S;
    *stage = fwd ? step : 2 * g->S - 1 - step;
    *dev = *stage < g->p ? *stage : g->S - 1 - *stage;
    *chunk = *stage < g->p ? 0 : 1;
    *dur = fwd ? 1 : 2;
}

/* Lower bound (or, at a leaf, the value) of the objective with steps
 * 0..k-1 placed and the next pass ready at slot `ready`. */
static void v1_bound(v1_search *g, int k, int ready, int *mx, int *sum) {
    int S = g->S;
    for (int d = 0; d < g->p; d++) g->cnt[d] = 0;
    for (int s = 0; s < S; s++) {
        int dev = s < g->p ? s : S - 1 - s, j = 2 * S - 1 - s, l = 1;
        if (s < k) {
            int end = j < k ? g->off[j] + 2
                            : ready + (k < S ? S - k : 0) + 2 * (j - (k > S ? k : S) + 1);
            l = end - g->off[s];
        }
        g->cnt[dev] += (l + V1_T - 1) / V1_T;
    }
    *mx = *sum = 0;
    for (int d = 0; d < g->p; d++) {
        if (g->cnt[d] > *mx) *mx = g->cnt[d];
        *sum += g->cnt[d];
    }
}

static void v1_dfs(v1_search *g, int k, int ready) {
    int mx, sum;
    /* The budget bounds the search after the first leaf only: the first
     * descent is the greedy block (packable() leaves every step a free slot,
     * so it never backtracks) and must be reached for every p, even when
     * its 4p + 1 nodes exceed the budget (p >= 508). */
    if (g->nodes-- <= 0 && g->best_max >= 0) return;
    v1_bound(g, k, ready, &mx, &sum);
    if (g->best_max >= 0 && (mx > g->best_max || (mx == g->best_max && sum >= g->best_sum)))
        return;
    if (k == 2 * g->S) {
        g->best_max = mx, g->best_sum = sum;
        memcpy(g->best, g->off, (size_t)(2 * g->S) * sizeof *g->best);
        return;
    }
    int stage, dev, chunk, dur, rest[3], nr = 0;
    v1_step(g, k, &stage, &dev, &chunk, &dur);
    /* what this device still has to place after this pass */
    if (dur == 1 && chunk == 0) rest[nr++] = 1, rest[nr++] = 2, rest[nr++] = 2;
    else if (dur == 1) rest[nr++] = 2, rest[nr++] = 2;
    else if (chunk == 1) rest[nr++] = 2;
    unsigned char *o = g->occ + (size_t)dev * V1_T;
    for (int t = ready, tried = 0; t < ready + V1_T && tried < V1_BRANCH; t++) {
        int ok = 1;
        for (int j = 0; j < dur && ok; j++) ok = !o[(t + j) % V1_T];
        if (!ok) continue;
        for (int j = 0; j < dur; j++) o[(t + j) % V1_T] = 1;
        if (packable(o, V1_T, rest, nr)) {
            tried++;
            g->off[k] = t;
            v1_dfs(g, k + 1, t + dur);
        }
        for (int j = 0; j < dur; j++) o[(t + j) % V1_T] = 0;
    }
}

/* The chain block for 1F1B-V (the pattern of the authors' 1F1B-V
 * generator): the forwards back to back down the V and up again (device i's
 * F0 at slot i, its F1 at 2p-1-i), then the backward chain from the loss
 * back to stage 0, each fused BW taking 2 slots right after the previous
 * one, with 3 free slots after every third BW (the first gap placed by
 * p mod 3, and the chain starting 3 slots later when 3 divides p): every
 * device then has its 6 residues taken once. Its lifespans are the shortest
 * the dependencies allow, up to those gaps. */
static pm_status named_1f1b_v_chain(pm_block *b, int p, pm_err *err) {
    pm_status st = pm_block_alloc(b, PM_PLACE_V, p, 2, V1_T, 4 * p, err);
    if (st) return st;
    int at = 2 * p + (p % 3 == 0 ? 3 : 0), run = (3 - (p + 2) % 3) % 3;
    int *bw = pm_malloc((size_t)(2 * p) * sizeof *bw); /* BW slot, in chain order */
    if (!bw) {
        pm_block_free(b);
        return pm_errf(err, PM_ERR_NOMEM, "out of memory building the 1f1b-v block");
    }
    for (int k = 0; k < 2 * p; k++) {
        bw[k] = at;
        at += 2;
        if (++run == 3) run = 0, at += 3;
    }
    for (int i = 0; i < p; i++) {
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_F, i, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_F, 2 * p - 1 - i, 1};
        b->pass[b->n++] = (pm_block_pass){i, 1, PM_PASS_BW, bw[i], 2};
        b->pass[b->n++] = (pm_block_pass){i, 0, PM_PASS_BW, bw[2 * p - 1 - i], 2};
    }
    pm_free(bw);
    return PM_OK;
}

/* *mx: the largest per-device theorem bound of a block, or -1 if it is
 * not legal. */
static pm_status max_bound(const pm_block *b, double *mx, pm_err *err) {
    pm_block_info in;
    pm_status st = pm_block_analyze(b, PM_MEM_DEFAULT, &in, err);
    if (st) return st;
    *mx = in.legal ? 0 : -1;
    for (int d = 0; in.legal && d < b->p; d++)
        if (in.bound[d] > *mx) *mx = in.bound[d];
    pm_block_info_free(&in);
    return PM_OK;
}

static pm_status named_1f1b_v_search(pm_block *b, int p, pm_err *err) {
    pm_status st = pm_block_alloc(b, PM_PLACE_V, p, 2, V1_T, 6 * p, err);
    if (st) return st;
    v1_search g = {.p = p, .S = 2 * p, .best_max = -1, .nodes = 2000000L / (2 * p) + 64};
    g.occ = pm_calloc((size_t)p * V1_T, 1);
    g.off = pm_calloc((size_t)(4 * p), sizeof *g.off);
    g.best = pm_calloc((size_t)(4 * p), sizeof *g.best);
    g.cnt = pm_calloc((size_t)p, sizeof *g.cnt);
    if (!g.occ || !g.off || !g.best || !g.cnt) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory building the 1f1b-v block");
        goto done;
    }
    v1_dfs(&g, 0, 0);
    if (g.best_max < 0) { /* cannot happen (see v1_dfs), but a search never asserts */
        st = pm_errf(err, PM_ERR_ARG, "1f1b-v block search found no block for p=%d", p);
        goto done;
    }
    for (int k = 0; k < 2 * g.S; k++) {
        int stage, dev, chunk, dur;
        v1_step(&g, k, &stage, &dev, &chunk, &dur);
        b->pass[b->n++] =
            (pm_block_pass){dev, chunk, dur == 1 ? PM_PASS_F : PM_PASS_BW, g.best[k], dur};
    }
    st = pm_block_check_lines(b, NULL, 0, err);
done:
    pm_free(g.occ);
    pm_free(g.off);
    pm_free(g.best);
    pm_free(g.cnt);
    if (st) pm_block_free(b);
    return st;
}

/* 1F1B-V: the chain block when it is legal and uses no more memory than
 * the searched block (the chain keeps the passes of a microbatch closer
 * together, so it wastes fewer slots in the warm-up and cool-down); else the
 * searched block, which can fit less memory (p = 3, 6, 9: the chain's
 * shift by 3 costs one activation more; and with m close to p its warm-up,
 * all forwards first, can peak higher). Memory compared as the theorem's
 * largest bound (m = 0), or as the peak of m repetitions. */
pm_status pm_block_1f1b_v(pm_block *b, int p, int m, pm_mem mem, pm_err *err) {
    *b = (pm_block){0};
    if (p < 1 || p > 1024)
        return pm_errf(err, PM_ERR_ARG, "named blocks need 1 <= p <= 1024 (got %d)", p);
    pm_block chain = {0};
    double bc, bs, pc = 0, ps = 0;
    pm_status st = named_1f1b_v_search(b, p, err);
    if (!st) st = named_1f1b_v_chain(&chain, p, err);
    if (!st) st = max_bound(&chain, &bc, err);
    if (!st) st = max_bound(b, &bs, err);
    int take = !st && bc >= 0 && bc <= bs + 1e-12;
    if (take && m > 0) {
        st = pm_block_repeat_peak(&chain, m, mem, &pc, err);
        if (!st) st = pm_block_repeat_peak(b, m, mem, &ps, err);
        take = !st && pc <= ps + 1e-12 * (ps > 1 ? ps : 1);
    }
    if (st || take) pm_block_free(b);
    if (take) *b = chain;
    else pm_block_free(&chain);
    return st;
}

pm_status pm_block_named(pm_block *b, const char *name, int p, pm_err *err) {
    *b = (pm_block){0};
    if (p < 1 || p > 1024)
        return pm_errf(err, PM_ERR_ARG, "named blocks need 1 <= p <= 1024 (got %d)", p);
    if (name && strcmp(name, "v-min") == 0) return named_formula(b, 0, p, err);
    if (name && strcmp(name, "v-half") == 0) return named_formula(b, 1, p, err);
    if (name && strcmp(name, "1f1b-v") == 0) return pm_block_1f1b_v(b, p, 0, PM_MEM_DEFAULT, err);
    return pm_errf(err, PM_ERR_ARG, "unknown block '%s'; named blocks: v-min, v-half, 1f1b-v",
                   name ? name : "(none)");
}
