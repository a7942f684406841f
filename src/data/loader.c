/* loader.c: the seeded batch loader over token data of any width.
 * Invariant: a loader's window always lies inside the data (n >= ctx + 1). */
#include "pipemem/pm_data.h"
#include "loader.h"

uint64_t pm_splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

pm_status pm_loader_init(pm_loader *ld, const pm_tokens *t, int ctx, uint64_t seed,
                         const char *what, pm_err *err) {
    *ld = (pm_loader){0};
    if (!t) return pm_errf(err, PM_ERR_ARG, "%s: the tokens are NULL", what ? what : "data");
    if (ctx < 1) return pm_errf(err, PM_ERR_ARG, "context must be >= 1 (got %d)", ctx);
    if (t->n < (size_t)ctx + 1)
        return pm_errf(err, PM_ERR_ARG,
                       "%s holds %zu tokens, fewer than context+1 = %d; use a smaller context "
                       "(model.ctx) or more text", what ? what : "token data", t->n, ctx + 1);
    *ld = (pm_loader){*t, t->n, ctx, seed, 0};
    ld->t.map = NULL; /* a view: the mapping stays the caller's */
    return PM_OK;
}

size_t pm_loader_pos(const pm_loader *ld, uint64_t i) {
    /* n - ctx possible starts: 0 .. n-ctx-1, each leaving ctx+1 tokens. */
    uint64_t span = (uint64_t)(ld->n - (size_t)ld->ctx);
    return (size_t)(pm_splitmix64(ld->seed ^ pm_splitmix64(i)) % span);
}

void pm_loader_next(pm_loader *ld, int B, int32_t *inputs, int32_t *targets) {
    size_t T = (size_t)ld->ctx;
    for (int b = 0; b < B; b++) {
        size_t at = pm_loader_pos(ld, ld->next++);
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        if (ld->t.width == 1) { /* bytes: the common case, no per-token switch */
            const uint8_t *w = ld->t.tok + at;
            for (size_t t = 0; t < T; t++) in[t] = w[t], tg[t] = w[t + 1];
            continue;
        }
        for (size_t t = 0; t < T; t++)
            in[t] = (int32_t)pm_tok_at(&ld->t, at + t), tg[t] = (int32_t)pm_tok_at(&ld->t, at + t + 1);
    }
}
