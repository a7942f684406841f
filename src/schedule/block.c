/* block.c: the building-block model shared by the block files: stage
 * placement, the pass index, allocation, the shape and dependency check
 * (naming text lines when the block was parsed) and the filling-in of W
 * passes by the first-free-slot rule. The text format is block_format.c,
 * the named V blocks block_named.c, the analysis block_analyze.c.
 *
 * Invariants of a pm_block these files return: 1 <= p <= 4096, v fits the
 * placement, 1 <= T <= 4096, p*T <= 2^22, every pass in range with
 * 1 <= dur <= T, one pass per (stage, kind), and the shape and dependency
 * rules of the format (block_format.c) hold. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_internal.h"

/* ---- shared helpers ---------------------------------------------------- */

int pm_block_stage(const pm_block *b, int dev, int chunk) {
    switch (b->place) {
    case PM_PLACE_SINGLE: return dev;
    case PM_PLACE_LOOP: return chunk * b->p + dev;
    default: return chunk == 0 ? dev : 2 * b->p - 1 - dev;
    }
}

int pm_block_index(const pm_block *b, int *tab) {
    int S = b->p * b->v;
    for (int i = 0; i < S * PM_PASS_COUNT; i++) tab[i] = -1;
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->dev < 0 || x->dev >= b->p || x->chunk < 0 || x->chunk >= b->v || x->kind < 0 ||
            x->kind >= PM_PASS_COUNT)
            return 0;
        int *slot = &tab[pm_block_stage(b, x->dev, x->chunk) * PM_PASS_COUNT + x->kind];
        if (*slot >= 0) return 0;
        *slot = i;
    }
    return 1;
}

/* Inverse of pm_block_stage. */
static void stage_home(const pm_block *b, int s, int *dev, int *chunk) {
    switch (b->place) {
    case PM_PLACE_SINGLE: *dev = s, *chunk = 0; break;
    case PM_PLACE_LOOP: *dev = s % b->p, *chunk = s / b->p; break;
    default: *dev = s < b->p ? s : 2 * b->p - 1 - s, *chunk = s < b->p ? 0 : 1;
    }
}


void pm_block_free(pm_block *b) {
    if (!b) return;
    pm_free(b->pass);
    *b = (pm_block){0};
}

pm_status pm_block_alloc(pm_block *b, pm_place place, int p, int v, int T, int cap,
                         pm_err *err) {
    *b = (pm_block){.place = place, .p = p, .v = v, .T = T};
    b->pass = pm_calloc((size_t)(cap > 0 ? cap : 1), sizeof *b->pass);
    if (!b->pass) return pm_errf(err, PM_ERR_NOMEM, "out of memory for a block of %d passes", cap);
    return PM_OK;
}

/* ---- shape and dependency check ---------------------------------------- */

/* Message prefix naming pass i, with its line when the caller has lines. */
static void pass_name(char *buf, size_t n, const pm_block *b, int i, const int *line) {
    const pm_block_pass *x = &b->pass[i];
    int at = line ? snprintf(buf, n, "line %d: ", line[i]) : 0;
    if (at < 0 || (size_t)at >= n) at = 0;
    snprintf(buf + at, n - (size_t)at, "device %d chunk %d %s at slot %d", x->dev, x->chunk,
             pm_pass_names[x->kind], x->off);
}

/* Pass i must start at or after pass j ends. */
static pm_status need_after(const pm_block *b, int i, int j, const char *what, const int *line,
                            pm_err *err) {
    const pm_block_pass *x = &b->pass[i], *y = &b->pass[j];
    if ((int64_t)x->off >= (int64_t)y->off + y->dur) return PM_OK;
    char a[96], c[96];
    pass_name(a, sizeof a, b, i, line);
    pass_name(c, sizeof c, b, j, NULL);
    return pm_errf(err, PM_ERR_FORMAT, "%s starts before %s (%s) ends at slot %d", a, what, c,
                   y->off + y->dur);
}

/* Ranges, one pass per (stage, kind), F and (BW or B+W) per stage, and the
 * dependency order in slots. line may be NULL. W may be missing only when
 * allow_missing_w (the parser fills it afterwards). */
pm_status pm_block_check_lines(const pm_block *b, const int *line, int allow_missing_w,
                               pm_err *err) {
    if (b->p < 1 || b->p > PM_BLOCK_MAX_DEVICES || b->v < 1 || b->v > PM_BLOCK_MAX_CHUNKS ||
        (b->place == PM_PLACE_V && b->v != 2) || (b->place == PM_PLACE_SINGLE && b->v != 1) ||
        b->T < 1 || b->T > PM_BLOCK_MAX_INTERVAL || (int64_t)b->p * b->T > PM_BLOCK_MAX_DEV_X_T ||
        b->n < 0 || (int64_t)b->n > (int64_t)b->p * b->v * 3)
        return pm_errf(err, PM_ERR_ARG, "block header out of range (p=%d chunks=%d T=%d)", b->p,
                       b->v, b->T);
    for (int i = 0; i < b->n; i++) {
        const pm_block_pass *x = &b->pass[i];
        if (x->off < 0 || x->off > PM_BLOCK_MAX_OFFSET || x->dur < 1 || x->dur > b->T ||
            x->dev < 0 || x->dev >= b->p || x->chunk < 0 || x->chunk >= b->v || x->kind < 0 ||
            x->kind >= PM_PASS_COUNT) {
            char a[96];
            snprintf(a, sizeof a, "%s%d", line ? "line " : "pass ", line ? line[i] : i);
            return pm_errf(err, PM_ERR_FORMAT, "%s: pass out of range", a);
        }
    }
    int S = b->p * b->v;
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    if (!tab) return pm_errf(err, PM_ERR_NOMEM, "out of memory checking a block");
    pm_status st = PM_OK;
    if (!pm_block_index(b, tab)) {
        st = pm_errf(err, PM_ERR_FORMAT, "block lists a (device, chunk, pass) twice");
        goto done;
    }
    for (int s = 0; s < S && !st; s++) {
        int f = tab[s * 4 + PM_PASS_F], bb = tab[s * 4 + PM_PASS_B], w = tab[s * 4 + PM_PASS_W],
            bw = tab[s * 4 + PM_PASS_BW];
        int dev, chunk;
        stage_home(b, s, &dev, &chunk);
        if (f < 0)
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has no F pass (add '%d %d F <offset>')", dev, chunk,
                         dev, chunk);
        else if (bw >= 0 && (bb >= 0 || w >= 0))
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has BW and also B or W; give BW or B and W", dev,
                         chunk);
        else if (bw < 0 && bb < 0)
            st = pm_errf(err, PM_ERR_FORMAT,
                         "device %d chunk %d has no backward pass (add a B line, or BW)", dev,
                         chunk);
        else if (bw < 0 && w < 0 && !allow_missing_w)
            st = pm_errf(err, PM_ERR_FORMAT, "device %d chunk %d has B but no W", dev, chunk);
        if (st) break;
        int back = bw >= 0 ? bw : bb;
        if (s > 0)
            st = need_after(b, f, tab[(s - 1) * 4 + PM_PASS_F], "the F of the stage before",
                            line, err);
        if (!st && s == S - 1) st = need_after(b, back, f, "its own F", line, err);
        if (!st && s < S - 1) {
            int nb = tab[(s + 1) * 4 + PM_PASS_B] >= 0 ? tab[(s + 1) * 4 + PM_PASS_B]
                                                       : tab[(s + 1) * 4 + PM_PASS_BW];
            if (nb >= 0) st = need_after(b, back, nb, "the backward of the stage after", line, err);
            if (!st) st = need_after(b, back, f, "its own F", line, err);
        }
        if (!st && w >= 0) st = need_after(b, w, bb, "its own B", line, err);
    }
done:
    pm_free(tab);
    return st;
}

/* ---- filling in W passes ----------------------------------------------- */

typedef struct {
    int64_t ready; /* slot the B ends (W may start here) */
    int bidx;      /* index of the B in b->pass */
} arrival;

static int cmp_arrival(const void *a, const void *b) {
    const arrival *x = a, *y = b;
    return x->ready < y->ready ? -1 : x->ready > y->ready ? 1 : x->bidx - y->bidx;
}

/* Fills the missing W passes of device d: the device's B passes whose W is
 * missing arrive (at the end of the B) every T slots; the slots whose
 * residue no pass of d occupies serve them first come, first served. From
 * an empty queue the queue length repeats after one interval when arrivals
 * do not outnumber free residues, so simulating from slot X and reading the
 * services of the arrivals of [X+2T, X+3T) gives the steady state. */
static pm_status fill_w_dev(pm_block *b, int d, const int *mine, int nmine, const int *tab,
                            unsigned char *occ, arrival *arr, int64_t *served, pm_err *err) {
    int T = b->T, na = 0, nfree = 0;
    memset(occ, 0, (size_t)T);
    for (int q = 0; q < nmine; q++) {
        int i = mine[q];
        const pm_block_pass *x = &b->pass[i];
        for (int k = 0; k < x->dur; k++) occ[(x->off + k) % T] = 1;
        if (x->kind == PM_PASS_B &&
            tab[pm_block_stage(b, d, x->chunk) * PM_PASS_COUNT + PM_PASS_W] < 0)
            arr[na++] = (arrival){(int64_t)x->off + x->dur, i};
    }
    if (!na) return PM_OK;
    for (int r = 0; r < T; r++) nfree += !occ[r];
    if (nfree < na)
        return pm_errf(err, PM_ERR_FORMAT,
                       "device %d: its passes leave %d free slot(s) in the interval of %d, too few "
                       "for its %d missing W pass(es); raise 'interval' or list the W passes",
                       d, nfree, T, na);
    qsort(arr, (size_t)na, sizeof *arr, cmp_arrival);
    int64_t X = (arr[na - 1].ready / T + 1) * (int64_t)T, end = X + (int64_t)(na + 6) * T;
    /* queue of (arrival index, microbatch k) in FIFO order; at most na per
     * interval enter over the 3 intervals read, plus what is still waiting */
    int64_t head = 0, tail = 0, qcap = (int64_t)na * ((end - X) / T + 1);
    int64_t *q = pm_malloc((size_t)qcap * 2 * sizeof *q);
    if (!q) return pm_errf(err, PM_ERR_NOMEM, "out of memory filling W passes");
    for (int i = 0; i < na; i++) served[i] = -1;
    int left = na;
    for (int64_t t = X; t < end && left; t++) {
        if (t < X + 3 * (int64_t)T)
            for (int i = 0; i < na; i++)
                if ((t - arr[i].ready) % T == 0 && tail < qcap)
                    q[2 * tail] = i, q[2 * tail + 1] = (t - arr[i].ready) / T, tail++;
        if (occ[t % T] || head == tail) continue;
        int i = (int)q[2 * head];
        int64_t k = q[2 * head + 1];
        head++;
        /* arrivals of the third interval are in the steady state */
        if (arr[i].ready + k * T >= X + 2 * (int64_t)T && served[i] < 0) {
            served[i] = t - k * T;
            left--;
        }
    }
    pm_free(q);
    if (left)
        return pm_errf(err, PM_ERR_FORMAT,
                       "device %d: the W passes do not settle into the interval; list them", d);
    for (int i = 0; i < na; i++) {
        if (served[i] > PM_BLOCK_MAX_OFFSET)
            return pm_errf(err, PM_ERR_FORMAT, "device %d: a filled-in W lands past slot %d", d,
                           PM_BLOCK_MAX_OFFSET);
        const pm_block_pass *bp = &b->pass[arr[i].bidx];
        b->pass[b->n++] = (pm_block_pass){d, bp->chunk, PM_PASS_W, (int)served[i], 1};
    }
    return PM_OK;
}

/* Fills every missing W (the pass array has room for 3 passes per stage).
 * The passes are grouped by device first (counting sort) so the work is
 * linear in the block, not devices x passes. */
pm_status pm_block_fill_w(pm_block *b, pm_err *err) {
    int S = b->p * b->v, n0 = b->n;
    int *tab = pm_malloc((size_t)S * PM_PASS_COUNT * sizeof *tab);
    int *first = pm_calloc((size_t)b->p + 1, sizeof *first);
    int *byd = pm_malloc((size_t)(n0 ? n0 : 1) * sizeof *byd);
    unsigned char *occ = pm_malloc((size_t)b->T);
    arrival *arr = pm_malloc((size_t)b->v * sizeof *arr);
    int64_t *served = pm_malloc((size_t)b->v * sizeof *served);
    pm_status st = PM_OK;
    if (!tab || !first || !byd || !occ || !arr || !served) {
        st = pm_errf(err, PM_ERR_NOMEM, "out of memory filling W passes");
        goto done;
    }
    if (!pm_block_index(b, tab)) {
        st = pm_errf(err, PM_ERR_FORMAT, "block lists a (device, chunk, pass) twice");
        goto done;
    }
    for (int i = 0; i < n0; i++) first[b->pass[i].dev + 1]++;
    for (int d = 0; d < b->p; d++) first[d + 1] += first[d];
    for (int i = 0, *at = first; i < n0; i++) byd[at[b->pass[i].dev]++] = i;
    for (int d = b->p; d > 0; d--) first[d] = first[d - 1]; /* undo the bumps */
    first[0] = 0;
    for (int d = 0; d < b->p && !st; d++)
        st = fill_w_dev(b, d, byd + first[d], first[d + 1] - first[d], tab, occ, arr, served, err);
done:
    pm_free(first);
    pm_free(byd);
    pm_free(tab);
    pm_free(occ);
    pm_free(arr);
    pm_free(served);
    return st;
}

int pm_block_pass_cmp(const void *a, const void *b) {
    const pm_block_pass *x = a, *y = b;
    if (x->dev != y->dev) return x->dev - y->dev;
    if (x->off != y->off) return x->off - y->off;
    if (x->chunk != y->chunk) return x->chunk - y->chunk;
    return x->kind - y->kind;
}
