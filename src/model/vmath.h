/* vmath.h: exp, tanh and GELU on float vectors, included by kernels.c once
 * per vector width. Before including, define VM(name) (prefixes the
 * function names), VM_W (floats per vector), VM_ATTR (function attributes,
 * e.g. a target ISA). Defines VM(vf), VM(vi) typedefs, VM(gelu_fg) (the
 * value and its derivative) over element ranges, VM(exp_sub), VM(max) and
 * VM(scale). Every element gets the same IEEE single operations in the
 * same order at every width, so widths give identical bits. That needs no
 * contraction of a * b + c into FMA, which the Makefile's -std=c11
 * guarantees with GCC (-ffp-contract=off in ISO mode); build with GCC or
 * pass -ffp-contract=off to keep it.
 *
 * Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
 * polynomial (relative error ~1e-7), times 2^n built in the exponent bits.
 * Inputs are clamped to [-87, 88] so 2^n stays a normal float. Tails shorter
 * than a vector go through the same code on a zero-padded copy. */
typedef float VM(vf) __attribute__((vector_size(VM_W * 4)));
typedef int32_t VM(vi) __attribute__((vector_size(VM_W * 4)));

VM_ATTR static inline VM(vf) VM(sel)(VM(vi) m, VM(vf) a, VM(vf) b) {
    return (VM(vf))((m & (VM(vi))a) | (~m & (VM(vi))b));
}

VM_ATTR static inline VM(vf) VM(vexp)(VM(vf) x) {
    const VM(vf) zero = {0};
    VM(vf) lo = zero - 87.0f, hi = zero + 88.0f;
    x = VM(sel)(x < lo, lo, x);
    x = VM(sel)(x > hi, hi, x);
    VM(vf) n = x * 1.44269504088896341f + 12582912.0f; /* round to nearest */
    n = n - 12582912.0f;
    VM(vf) r = x - n * 0.693359375f + n * 2.12194440e-4f;
    VM(vf) z = r * r;
    VM(vf) p = zero + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    VM(vi) bits = (__builtin_convertvector(n, VM(vi)) + 127) << 23;
    return p * (VM(vf))bits;
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

/* n < VM_W elements through a zero-padded vector */
VM_ATTR static inline VM(vf) VM(load_tail)(const float *p, size_t n) {
    float t[VM_W] = {0};
    memcpy(t, p, n * sizeof(float));
    return VM(load)(t);
}
VM_ATTR static inline void VM(store_tail)(float *p, VM(vf) v, size_t n) {
    float t[VM_W];
    VM(store)(t, v);
    memcpy(p, t, n * sizeof(float));
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

/* p[j] = exp(p[j] - mx) for j < n */
VM_ATTR static void VM(exp_sub)(float *p, size_t n, float mx) {
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) VM(store)(p + i, VM(vexp)(VM(load)(p + i) - mx));
    if (i < n) VM(store_tail)(p + i, VM(vexp)(VM(load_tail)(p + i, n - i) - mx), n - i);
}

/* The largest of x[0..n), n >= 1. Widths agree because a max is exact in
 * any order, not by doing the same operations: with a NaN in the row they
 * may not (a NaN in the first vector keeps its lane; x[0] NaN is returned),
 * and then the softmax is NaN at every width anyway. */
VM_ATTR static float VM(max)(const float *x, size_t n) {
    float mx = x[0];
    size_t i = 1;
    if (n >= VM_W) {
        VM(vf) a = VM(load)(x);
        for (i = VM_W; i + VM_W <= n; i += VM_W) {
            VM(vf) u = VM(load)(x + i);
            a = VM(sel)(u > a, u, a);
        }
        for (int k = 0; k < VM_W; k++) mx = a[k] > mx ? a[k] : mx;
    }
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

/* x[i] *= f for i < n */
VM_ATTR static void VM(scale)(float *x, float f, size_t n) {
    size_t i = 0;
    for (; i + VM_W <= n; i += VM_W) VM(store)(x + i, VM(load)(x + i) * f);
    for (; i < n; i++) x[i] *= f;
}
