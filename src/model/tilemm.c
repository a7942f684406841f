/* tilemm.c: the small matrix products of attention's tiles, without
 * OpenBLAS's packing. A tile's products are 64 x 256 x 64 or so: a
 * cblas_sgemm call that small spends a fifth of its time copying its
 * operands into panels and more on its own bookkeeping (perf, GPT-2 small
 * at ctx 1024: packing 16% of attention's samples, the kernel 50%). Here
 * B's rows are read where they lie, 64 columns at a time (one panel: 16 KB
 * at 64 rows, which stays in L1 while every row of C passes over it), and
 * A's entries are broadcast from where they lie, at any row and column
 * stride, so a transposed A costs nothing either.
 *
 * C (m, n) = alpha A B (+ C), with A(i, p) = A[i ars + p aks] and B(p, j) =
 * B[(j / 64) bps + p ldb + j % 64]: bps = 64 for a row-major B, or the
 * size of a panel for B stored as panels of 64 columns (attention keeps
 * K^T and V^T so, where a row-major K^T of T columns would put every row
 * of a panel in the same cache sets). Each element is one sum over p in
 * order, in fused multiply-adds, then scaled by alpha and added to C: the
 * bits depend on the operands alone, not on how the caller splits work.
 *
 * AVX-512 only (registers hold a 6 x 64 tile of C); elsewhere, or when a
 * test asks (pm_k_tile_mm_blas), each panel is one cblas_sgemm.
 *
 * pm_k_panels makes such panels (K^T, V^T) 16 x 16 blocks at a time
 * through AVX-512 registers, element by element elsewhere or when a test
 * asks (the same switch). */
#include <stdatomic.h>

#include "model/internal.h"

static atomic_int g_blas; /* a test's request for the OpenBLAS path */

void pm_k_tile_mm_blas(int on) { atomic_store(&g_blas, on); }

/* Whether the AVX-512 code runs: the CPU has it and no test asked for the
 * other path. */
static int use_tiles16(void) { return pm_k_v16() && !atomic_load(&g_blas); }

/* One panel's product by OpenBLAS: A's strides as a transpose flag. */
static void blas_panel(size_t m, size_t w, size_t k, float alpha, const float *A, size_t ars,
                       size_t aks, const float *B, size_t ldb, int acc, float *C, size_t ldc) {
    PM_ASSERT(ars == 1 || aks == 1); /* A as given or transposed */
    int ta = aks != 1 || ars < k;    /* (ars 1, aks 1: one row or a column of A) */
    pm_k_gemm(ta, 0, m, w, k, alpha, A, ta ? aks : ars, B, ldb, acc ? 1.0f : 0.0f, C, ldc);
}

/* Rows [j0, j1) of x, columns [p0, hs), into their panels' columns. */
static void panels_by_row(float *dst, const float *x, size_t ld, size_t j0, size_t j1, size_t p0,
                          size_t hs) {
    for (size_t j = j0; j < j1; j++) {
        float *col = dst + j / 64 * 64 * hs + j % 64;
        const float *row = x + j * ld;
        for (size_t p = p0; p < hs; p++) col[p * 64] = row[p];
    }
}

#ifdef PM_X86_GNU
#include <immintrin.h>

#define MR 6 /* rows of C a register tile holds */
#define NV 4 /* its 16-float vectors per row: one panel's 64 columns */

typedef struct {
    size_t ars, aks, ldb, ldc;
    float alpha;
    int acc;
} mm_args;

/* C's R x 16 U tile at c from A's R rows at a and B's panel at b over k
 * terms; the last vector of each row holds the columns in `last`. R and U
 * are constants at every call, so the loops unroll and the tile stays in
 * registers. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile(const float *a, const float *b, float *c, size_t k, const mm_args *x, int R, int U,
     __mmask16 last) {
    __m512 acc[MR][NV];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) acc[r][u] = _mm512_setzero_ps();
    for (size_t p = 0; p < k; p++) {
        const float *bp = b + p * x->ldb, *ap = a + p * x->aks;
        __m512 bv[NV];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++)
            bv[u] = _mm512_maskz_loadu_ps(u + 1 == U ? last : 0xFFFF, bp + 16 * u);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(ap[(size_t)r * x->ars]);
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) acc[r][u] = _mm512_fmadd_ps(av, bv[u], acc[r][u]);
        }
    }
    __m512 al = _mm512_set1_ps(x->alpha);
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) {
            __mmask16 mk = u + 1 == U ? last : 0xFFFF;
            float *cp = c + (size_t)r * x->ldc + 16 * u;
            __m512 v = _mm512_mul_ps(acc[r][u], al);
            if (x->acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, cp), v);
            _mm512_mask_storeu_ps(cp, mk, v);
        }
}

#define TILE(R, U) \
    case (R) * 8 + (U): tile(a, b, c, k, x, R, U, last); break;

/* The R x U tile, by its shape. */
__attribute__((target("avx512f"))) static void
tile_any(const float *a, const float *b, float *c, size_t k, const mm_args *x, int R, int U,
         __mmask16 last) {
    switch (R * 8 + U) {
        TILE(6, 4) TILE(5, 4) TILE(4, 4) TILE(3, 4) TILE(2, 4) TILE(1, 4)
        TILE(6, 3) TILE(5, 3) TILE(4, 3) TILE(3, 3) TILE(2, 3) TILE(1, 3)
        TILE(6, 2) TILE(5, 2) TILE(4, 2) TILE(3, 2) TILE(2, 2) TILE(1, 2)
        TILE(6, 1) TILE(5, 1) TILE(4, 1) TILE(3, 1) TILE(2, 1) TILE(1, 1)
    default: PM_ASSERT(0);
    }
}

/* The register tile's share of the band: its columns (*U vectors, the
 * last holding *last) and terms [*p0, *p1); 0 when it has none to make.
 * A cut keeps the panel's own last mask unless it drops whole vectors: a
 * ragged panel's last vector must not store past the panel's w columns
 * (that is the next row of C). */
static int band_cut(pm_band band, size_t i, int R, size_t j, int *U, __mmask16 *last,
                    size_t *p0, size_t *p1) {
    int64_t lo = (int64_t)i - band.diag, hi = (int64_t)i + R + band.diag; /* rows' reach */
    switch (band.kind) {
    case PM_BAND_ALL:
        break;
    case PM_BAND_COLS: { /* columns below hi - j of this panel */
        int64_t c = hi - (int64_t)j;
        if (c <= 0) return 0;
        if (c < 16 * (int64_t)*U) {
            int u = (int)((c + 15) / 16);
            if (u < *U) *U = u, *last = 0xFFFF;
        }
        break;
    }
    case PM_BAND_K_TO:
        if (hi < (int64_t)*p1) *p1 = hi > 0 ? (size_t)hi : 0;
        break;
    case PM_BAND_K_FROM:
        if (lo > 0) *p0 = (size_t)lo < *p1 ? (size_t)lo : *p1;
        break;
    }
    return 1;
}

__attribute__((target("avx512f"))) static void
mm16(size_t m, size_t n, size_t k, const float *A, const float *B, size_t bps, float *C,
     const mm_args *x, pm_band band) {
    for (size_t j = 0; j < n; j += 16 * NV) {
        size_t w = n - j < 16 * NV ? n - j : 16 * NV;
        int U = (int)((w + 15) / 16);
        __mmask16 last = (__mmask16)(w % 16 ? (1u << (w % 16)) - 1 : 0xFFFF);
        for (size_t i = 0; i < m; i += MR) {
            int R = (int)(m - i < MR ? m - i : MR), u = U;
            __mmask16 lm = last;
            size_t p0 = 0, p1 = k;
            if (!band_cut(band, i, R, j, &u, &lm, &p0, &p1)) continue;
            tile_any(A + i * x->ars + p0 * x->aks, B + j / (16 * NV) * bps + p0 * x->ldb,
                     C + i * x->ldc + j, p1 - p0, x, R, u, lm);
        }
    }
}

/* r[c] becomes column c of the 16 x 16 block whose rows were r[0..15]:
 * pairs of rows interleaved by floats, then by float pairs, leave lane L
 * of t[4 i + k] holding column 4 L + k of rows 4 i .. 4 i + 3; two rounds
 * of moving whole lanes gather each column's four lanes in row order. */
__attribute__((target("avx512f"))) static inline void transpose16(__m512 r[16]) {
    __m512 a[16], t[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4)
        for (int h = 0; h < 2; h++) {
            __m512d lo = _mm512_castps_pd(a[i + h]), hi = _mm512_castps_pd(a[i + h + 2]);
            t[i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            t[i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
        }
    for (int k = 0; k < 4; k++) {
        __m512 u0 = _mm512_shuffle_f32x4(t[k], t[4 + k], 0x88);
        __m512 u1 = _mm512_shuffle_f32x4(t[k], t[4 + k], 0xdd);
        __m512 v0 = _mm512_shuffle_f32x4(t[8 + k], t[12 + k], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(t[8 + k], t[12 + k], 0xdd);
        r[k] = _mm512_shuffle_f32x4(u0, v0, 0x88);
        r[k + 4] = _mm512_shuffle_f32x4(u1, v1, 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(u0, v0, 0xdd);
        r[k + 12] = _mm512_shuffle_f32x4(u1, v1, 0xdd);
    }
}

/* Whole 16 x 16 blocks through registers; returns the rows done. */
__attribute__((target("avx512f"))) static size_t
panels16(float *dst, const float *x, size_t ld, size_t T, size_t hs) {
    size_t J = T / 16 * 16, P = hs / 16 * 16;
    for (size_t j = 0; j < J; j += 16) {
        float *pd = dst + j / 64 * 64 * hs + j % 64;
        for (size_t p = 0; p < P; p += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(x + (j + (size_t)i) * ld + p);
            transpose16(r);
            for (int c = 0; c < 16; c++) _mm512_storeu_ps(pd + (p + (size_t)c) * 64, r[c]);
        }
    }
    panels_by_row(dst, x, ld, 0, J, P, hs);
    return J;
}
#endif

void pm_k_panels(float *dst, const float *x, size_t ld, size_t T, size_t hs) {
    size_t done = 0;
#ifdef PM_X86_GNU
    if (use_tiles16()) done = panels16(dst, x, ld, T, hs);
#endif
    panels_by_row(dst, x, ld, done, T, 0, hs);
}

void pm_k_tile_mm(size_t m, size_t n, size_t k, float alpha, const float *A, size_t ars,
                  size_t aks, const float *B, size_t ldb, size_t bps, int acc, float *C,
                  size_t ldc, pm_band band) {
#ifdef PM_X86_GNU
    if (use_tiles16()) {
        mm_args x = {ars, aks, ldb, ldc, alpha, acc};
        mm16(m, n, k, A, B, bps, C, &x, band);
        return;
    }
#endif
    (void)band;
    for (size_t j = 0; j < n; j += 64)
        blas_panel(m, n - j < 64 ? n - j : 64, k, alpha, A, ars, aks, B + j / 64 * bps, ldb, acc,
                   C + j, ldc);
}
