/* vmath.h: exp, tanh and GELU on float vectors, included by kernels.c once
 * per vector width. Before including, define VM(name) (prefixes the
 * function names), VM_W (floats per vector), VM_ATTR (function attributes,
 * e.g. a target ISA). Defines VM(vf), VM(vi) typedefs, VM(gelu_fg) (the
 * value and its derivative) over element ranges, VM(max), VM(scale), and
 * the softmax rows of attention's tiles (VM(exp_sum),
 * VM(exp_ds)) and of the head's (VM(exp_total), VM(exp_scale)), each in
 * one pass. Every element gets the same IEEE single operations in the
 * same order at every width, so widths give identical bits. That needs no
 * contraction of a * b + c into FMA, which the Makefile's -std=c11
 * guarantees with GCC (-ffp-contract=off in ISO mode); build with GCC or
 * pass -ffp-contract=off to keep it.
 *
 * Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
 * polynomial (relative error ~1e-7), times 2^n (built in the exponent
 * bits, or by scalef on AVX-512).
 * Inputs are clamped to [-87, 88] so 2^n stays a normal float. Tails shorter
 * than a vector go through the same code on a padded vector: masked loads
 * and stores when VM_MASKED is defined (the AVX-512 copy: immintrin.h
 * included), else a copy through the stack (a variable-length memcpy,
 * which attention's ragged diagonal rows paid once or twice a row). */
typedef float VM(vf) __attribute__((vector_size(VM_W * 4)));
typedef int32_t VM(vi) __attribute__((vector_size(VM_W * 4)));

VM_ATTR static inline VM(vf) VM(sel)(VM(vi) m, VM(vf) a, VM(vf) b) {
    return (VM(vf))((m & (VM(vi))a) | (~m & (VM(vi))b));
}

/* -1 in the first n lanes, 0 in the rest */
VM_ATTR static inline VM(vi) VM(lanes)(size_t n) {
    VM(vi) k;
    for (int j = 0; j < VM_W; j++) k[j] = j;
    return k < (int32_t)n;
}

/* exp's three steps that AVX-512 does in one instruction each, with the
 * same result for every input: x clamped to [lo, hi] (max and min keep a
 * NaN x as the selects do); t rounded to the nearest integer, ties to
 * even, as adding and subtracting 1.5 2^23 does for |t| < 2^22 (the clamp
 * keeps |t| below 128); p 2^n, n an integer in [-126, 127], by scalef
 * (exact, or rounded once if subnormal, as the product is). */
#ifdef VM_MASKED
VM_ATTR static inline VM(vf) VM(clamp)(VM(vf) x, VM(vf) lo, VM(vf) hi) {
    return (VM(vf))_mm512_min_ps((__m512)hi, _mm512_max_ps((__m512)lo, (__m512)x));
}
VM_ATTR static inline VM(vf) VM(rint)(VM(vf) t) {
    return (VM(vf))_mm512_roundscale_ps((__m512)t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VM_ATTR static inline VM(vf) VM(pow2mul)(VM(vf) p, VM(vf) n) {
    return (VM(vf))_mm512_scalef_ps((__m512)p, (__m512)n);
}
#else
VM_ATTR static inline VM(vf) VM(clamp)(VM(vf) x, VM(vf) lo, VM(vf) hi) {
    x = VM(sel)(x < lo, lo, x);
    return VM(sel)(x > hi, hi, x);
}
VM_ATTR static inline VM(vf) VM(rint)(VM(vf) t) {
    t = t + 12582912.0f;
    return t - 12582912.0f;
}
VM_ATTR static inline VM(vf) VM(pow2mul)(VM(vf) p, VM(vf) n) {
    VM(vi) bits = (__builtin_convertvector(n, VM(vi)) + 127) << 23;
    return p * (VM(vf))bits;
}
#endif

VM_ATTR static inline VM(vf) VM(vexp)(VM(vf) x) {
    const VM(vf) zero = {0};
    x = VM(clamp)(x, zero - 87.0f, zero + 88.0f);
    VM(vf) n = VM(rint)(x * 1.44269504088896341f);
    VM(vf) r = x - n * 0.693359375f + n * 2.12194440e-4f;
    VM(vf) z = r * r;
    VM(vf) p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    return VM(pow2mul)(p, n);
}

/* tanh u = 1 - 2 / (exp(2u) + 1): absolute error ~1e-7, which is all GELU
 * needs (it uses 1 + tanh and 1 - tanh^2); saturates to +-1 cleanly. */
VM_ATTR static inline VM(vf) VM(vtanh)(VM(vf) u) {
    return 1.0f - 2.0f / (VM(vexp)(2.0f * u) + 1.0f);
}

VM_ATTR static inline VM(vf) VM(vgelu)(VM(vf) v) {
    VM(vf) th = VM(vtanh)(GELU_K * (v + GELU_A * v * v * v));
    return 0.5f * v * (1.0f + th);
}

/* gelu(v) and, from the same tanh, d/dv 0.5 v (1 + tanh u), u = k (v + a v^3):
 *   0.5 (1 + tanh u) + 0.5 v (1 - tanh^2 u) k (1 + 3 a v^2) */
VM_ATTR static inline VM(vf) VM(vgelu_and_grad)(VM(vf) v, VM(vf) *grad) {
    VM(vf) th = VM(vtanh)(GELU_K * (v + GELU_A * v * v * v));
    *grad = 0.5f * (1.0f + th) +
            0.5f * v * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    return 0.5f * v * (1.0f + th);
}

VM_ATTR static inline VM(vf) VM(load)(const float *p) {
    VM(vf) v;
    memcpy(&v, p, sizeof v);
    return v;
}
VM_ATTR static inline void VM(store)(float *p, VM(vf) v) { memcpy(p, &v, sizeof v); }

/* n < VM_W elements, the lanes past them `fill`; and the first n lanes
 * stored */
#ifdef VM_MASKED
VM_ATTR static inline VM(vf) VM(load_fill)(const float *p, size_t n, float fill) {
    return (VM(vf))_mm512_mask_loadu_ps(_mm512_set1_ps(fill), (__mmask16)((1u << n) - 1), p);
}
VM_ATTR static inline void VM(store_tail)(float *p, VM(vf) v, size_t n) {
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
}
#else
VM_ATTR static inline VM(vf) VM(load_fill)(const float *p, size_t n, float fill) {
    float t[VM_W];
    for (int k = 0; k < VM_W; k++) t[k] = fill;
    memcpy(t, p, n * sizeof(float));
    return VM(load)(t);
}
VM_ATTR static inline void VM(store_tail)(float *p, VM(vf) v, size_t n) {
    float t[VM_W];
    VM(store)(t, v);
    memcpy(p, t, n * sizeof(float));
}
#endif
/* The first w <= VM_W lanes stored: a whole vector when it fits */
VM_ATTR static inline void VM(store_part)(float *p, VM(vf) v, size_t w) {
    if (w == VM_W)
        VM(store)(p, v);
    else
        VM(store_tail)(p, v, w);
}

VM_ATTR static inline VM(vf) VM(load_tail)(const float *p, size_t n) {
    return VM(load_fill)(p, n, 0.0f);
}

/* n <= VM_W floats wanted, w >= n readable: a whole vector when it fits,
 * the lanes past n then holding whatever follows */
VM_ATTR static inline VM(vf) VM(load_part)(const float *p, size_t n, size_t w) {
    return w == VM_W ? VM(load)(p) : VM(load_tail)(p, n);
}

/* out[i] = gelu(x[i]) and g[i] = gelu'(x[i]) for i in [lo, hi); g may
 * alias x (read, then written) */
VM_ATTR static void VM(gelu_fg)(float *out, float *g, const float *x, size_t lo, size_t hi) {
    size_t i = lo;
    VM(vf) d;
    for (; i + VM_W <= hi; i += VM_W) {
        VM(store)(out + i, VM(vgelu_and_grad)(VM(load)(x + i), &d));
        VM(store)(g + i, d);
    }
    if (i < hi) {
        VM(store_tail)(out + i, VM(vgelu_and_grad)(VM(load_tail)(x + i, hi - i), &d), hi - i);
        VM(store_tail)(g + i, d, hi - i);
    }
}

/* The largest of x[0..n), n >= 1, in four independent chains (one would
 * wait on each comparison); the tail's missing lanes hold x[0]. Widths
 * agree because a max is exact in any order, not by doing the same
 * operations: only the sign of a zero maximum may differ (+0 and -0 tie),
 * which changes no exp(x - max). A NaN is dropped by the comparisons
 * unless it is x[0]. */
VM_ATTR static inline VM(vf) VM(vmax2)(VM(vf) a, VM(vf) b) { return VM(sel)(b > a, b, a); }

VM_ATTR static float VM(max)(const float *x, size_t n) {
    const VM(vf) zero = {0};
    VM(vf) a0 = zero + x[0], a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 4 * VM_W <= n; i += 4 * VM_W) {
        a0 = VM(vmax2)(a0, VM(load)(x + i)), a1 = VM(vmax2)(a1, VM(load)(x + i + VM_W));
        a2 = VM(vmax2)(a2, VM(load)(x + i + 2 * VM_W));
        a3 = VM(vmax2)(a3, VM(load)(x + i + 3 * VM_W));
    }
    for (; i + VM_W <= n; i += VM_W) a0 = VM(vmax2)(a0, VM(load)(x + i));
    if (i < n) a1 = VM(vmax2)(a1, VM(load_fill)(x + i, n - i, x[0]));
    a0 = VM(vmax2)(VM(vmax2)(a0, a1), VM(vmax2)(a2, a3));
#ifdef VM_MASKED
    return _mm512_reduce_max_ps((__m512)a0);
#else
    float mx = a0[0];
    for (int k = 1; k < VM_W; k++) mx = a0[k] > mx ? a0[k] : mx;
    return mx;
#endif
}

/* Row sums (attention's F tiles, the head's chunks): 16 lanes, lane L
 * summing x[L], x[L + 16], ... in order (zeros past n), then lanes L and
 * L + 8, L and L + 4, L and L + 2, and the last two added: every width
 * does exactly these additions (a 4-float copy keeps four vectors of
 * lanes), so the bits agree. */
#define VM_G (16 / VM_W) /* vectors per 16 lanes */
VM_ATTR static inline float VM(total16)(const VM(vf) *acc) {
    float L[16], t[8];
    for (int q = 0; q < VM_G; q++) VM(store)(L + q * VM_W, acc[q]);
    for (int k = 0; k < 8; k++) t[k] = L[k] + L[k + 8];
    for (int k = 0; k < 4; k++) t[k] = t[k] + t[k + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* p[j] = exp(p[j] - mx) for j < n and 0 for n <= j < nk; returns the sum
 * of p[0..n) in total16's order: F's tile rows in one pass. */
VM_ATTR static float VM(exp_sum)(float *p, size_t n, size_t nk, float mx) {
    const VM(vf) zero = {0};
    VM(vf) acc[VM_G];
    for (int q = 0; q < VM_G; q++) acc[q] = zero;
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int q = 0; q < VM_G; q++) {
            VM(vf) e = VM(vexp)(VM(load)(p + i + q * VM_W) - mx);
            VM(store)(p + i + q * VM_W, e);
            acc[q] += e;
        }
    for (; i < nk; i += VM_W) { /* the last 16 lanes (ragged), then zeros */
        size_t v = i < n ? n - i : 0, w = nk - i < VM_W ? nk - i : VM_W;
        VM(vf) e = zero;
        if (v) e = VM(vexp)(VM(load_part)(p + i, v < VM_W ? v : VM_W, w) - mx);
        if (v < VM_W) e = VM(sel)(VM(lanes)(v), e, zero);
        VM(store_part)(p + i, e, w);
        acc[i / VM_W % VM_G] += e;
    }
    return VM(total16)(acc);
}

/* The sum of exp(x[j] - mx) over j < n in total16's order, x unchanged:
 * the head's chunk rows, whose logits B keeps. */
VM_ATTR static float VM(exp_total)(const float *x, size_t n, float mx) {
    const VM(vf) zero = {0};
    VM(vf) acc[VM_G];
    for (int q = 0; q < VM_G; q++) acc[q] = zero;
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) acc[i / VM_W % VM_G] += VM(vexp)(VM(load)(x + i) - mx);
    if (i < n)
        acc[i / VM_W % VM_G] +=
            VM(sel)(VM(lanes)(n - i), VM(vexp)(VM(load_tail)(x + i, n - i) - mx), zero);
    return VM(total16)(acc);
}

/* p[j] = exp(p[j] - mx) f for j < n: the head's probabilities, scaled */
VM_ATTR static void VM(exp_scale)(float *p, size_t n, float mx, float f) {
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) VM(store)(p + i, VM(vexp)(VM(load)(p + i) - mx) * f);
    if (i < n) VM(store_tail)(p + i, VM(vexp)(VM(load_tail)(p + i, n - i) - mx) * f, n - i);
}

/* B's tile rows in one pass: p[j] = exp(p[j] - lse) and dp[j] = p[j]
 * (dp[j] - d) for j < n, both 0 for n <= j < nk. */
VM_ATTR static void VM(exp_ds)(float *p, float *dp, size_t n, size_t nk, float lse, float d) {
    const VM(vf) zero = {0};
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) {
        VM(vf) e = VM(vexp)(VM(load)(p + i) - lse);
        VM(store)(p + i, e);
        VM(store)(dp + i, e * (VM(load)(dp + i) - d));
    }
    for (; i < nk; i += VM_W) {
        size_t v = i < n ? n - i : 0, w = nk - i < VM_W ? nk - i : VM_W;
        VM(vf) e = zero, g = zero;
        if (v) {
            VM(vi) in = VM(lanes)(v);
            e = VM(sel)(in, VM(vexp)(VM(load_part)(p + i, v, w) - lse), zero);
            g = VM(sel)(in, e * (VM(load_part)(dp + i, v, w) - d), zero);
        }
        VM(store_part)(p + i, e, w);
        VM(store_part)(dp + i, g, w);
    }
}

/* x[i] *= f for i < n */
VM_ATTR static void VM(scale)(float *x, float f, size_t n) {
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) VM(store)(x + i, VM(load)(x + i) * f);
    for (; i < n; i++) x[i] *= f;
}
