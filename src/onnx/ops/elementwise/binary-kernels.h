/* The broadcasting operators' kernels (ops_binary.c on the host,
 * ops_elementwise.cu on cuda): the launch's description of its inputs
 * against the output, their element offsets, and the per-element math of
 * arithmetic, comparisons, logic and Where, with the conversions and the
 * span scheme of elementwise-kernels.h. */
#ifndef KPIPE_ONNX_BINARY_KERNELS_H
#define KPIPE_ONNX_BINARY_KERNELS_H

#include "elementwise-kernels.h"

/* Inputs broadcast to the output: the output's shape with its size-1
 * dimensions dropped and neighbours that every input treats alike merged,
 * held innermost first (dimension 0 varies fastest); bit k of mask[m] says
 * input m steps along dimension k (clear: it is broadcast there). ndim <= 1
 * is the common case of inputs that are either whole or a single element,
 * indexed by mask bit 0 alone. Otherwise launches of up to 2^31 - 1 items
 * (nearly all) index in 32 bits from `small`, larger ones in 64 from
 * `large`. */
typedef struct kp__ox_bcast_small {
    uint32_t shape[KP_MAX_DIMS];
    uint32_t magic[KP_MAX_DIMS];     /* x / shape[k] by a multiply (kp__ox_div32) */
    uint32_t stride[3][KP_MAX_DIMS]; /* input m's step along k in elements; 0 broadcasts */
    uint8_t shift[KP_MAX_DIMS];
} kp__ox_bcast_small;

typedef struct kp__ox_binary_params {
    const void *in[3]; /* a, b (Where: condition, X, Y) */
    void *y;
    int64_t n;
    int32_t op;     /* KP__OX_B_* */
    int32_t dtype;  /* input 0's (Where: X's) */
    int32_t dtype1; /* input 1's: Pow's exponent */
    int32_t ndim;
    uint8_t mask[4];
    float alpha;
    union {
        kp__ox_bcast_small small;   /* n <= INT32_MAX */
        int64_t large[KP_MAX_DIMS]; /* otherwise: the shape */
    } ix;
} kp__ox_binary_params;

KP__OX_EW float kp__ox_binary_f(int op, float a, float b, float alpha) {
    switch (op) {
    case KP__OX_B_ADD: return a + b;
    case KP__OX_B_SUB: return a - b;
    case KP__OX_B_MUL: return a * b;
    case KP__OX_B_DIV: return a / b;
    case KP__OX_B_MOD: {
        float r = fmodf(a, b);
        return r != 0.0f && ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
    }
    case KP__OX_B_FMOD: return fmodf(a, b);
    case KP__OX_B_PRELU: return a < 0.0f ? a * b : a;
    /* Max and Min pass a NaN on, as NumPy's maximum and minimum do. */
    case KP__OX_B_MAX: return (a > b || a != a) ? a : b;
    case KP__OX_B_MIN: return (a < b || a != a) ? a : b;
    case KP__OX_B_ADD_DIV: return (a + b) / alpha;
    case KP__OX_B_POW: return powf(a, b);
    default: return 0.0f;
    }
}

KP__OX_EW bool kp__ox_compare_f(int op, float a, float b) {
    switch (op) {
    case KP__OX_B_EQUAL: return a == b;
    case KP__OX_B_LESS: return a < b;
    case KP__OX_B_GREATER: return a > b;
    case KP__OX_B_LESS_EQUAL: return a <= b;
    default: return a >= b;
    }
}

KP__OX_EW int64_t kp__ox_ipow(int64_t base, int64_t e) {
    /* A negative exponent leaves a fraction that truncates to 0, except
     * for bases 1 and -1. */
    if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
    uint64_t r = 1, b = (uint64_t)base;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

/* Integer arithmetic in two's complement (wrapping, never undefined);
 * division by zero gives 0 and INT64_MIN / -1 wraps, where C would trap.
 * `uns`: the values are u64 bit patterns. */
KP__OX_EW int64_t kp__ox_binary_i(int op, int64_t a, int64_t b, bool uns, int64_t alpha) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case KP__OX_B_ADD: return (int64_t)(ua + ub);
    case KP__OX_B_SUB: return (int64_t)(ua - ub);
    case KP__OX_B_MUL: return (int64_t)(ua * ub);
    case KP__OX_B_ADD_DIV:
        a = (int64_t)(ua + ub);
        b = alpha;
        ua = (uint64_t)a;
        ub = (uint64_t)b;
        /* fall through */
    case KP__OX_B_DIV:
        if (b == 0) return 0;
        if (uns) return (int64_t)(ua / ub);
        return b == -1 ? (int64_t)(0u - ua) : a / b;
    case KP__OX_B_MOD:
    case KP__OX_B_FMOD: {
        if (b == 0) return 0;
        if (uns) return (int64_t)(ua % ub);
        int64_t r = b == -1 ? 0 : a % b;
        return op == KP__OX_B_MOD && r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
    case KP__OX_B_PRELU: return (uns || a >= 0) ? a : (int64_t)(ua * ub);
    case KP__OX_B_MAX: return (uns ? ua > ub : a > b) ? a : b;
    case KP__OX_B_MIN: return (uns ? ua < ub : a < b) ? a : b;
    case KP__OX_B_POW: return kp__ox_ipow(a, b);
    default: return 0;
    }
}

KP__OX_EW bool kp__ox_compare_i(int op, int64_t a, int64_t b, bool uns) {
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    switch (op) {
    case KP__OX_B_EQUAL: return a == b;
    case KP__OX_B_LESS: return uns ? ua < ub : a < b;
    case KP__OX_B_GREATER: return uns ? ua > ub : a > b;
    case KP__OX_B_LESS_EQUAL: return uns ? ua <= ub : a <= b;
    case KP__OX_B_GREATER_EQUAL: return uns ? ua >= ub : a >= b;
    case KP__OX_B_AND: return (a != 0) & (b != 0);
    case KP__OX_B_OR: return (a != 0) | (b != 0);
    default: return (a != 0) ^ (b != 0);
    }
}

/* The multiplier and shift that divide any value below 2^31 by d (1 <= d
 * < 2^31) exactly: with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d)
 * + 1, x / d = (floor(x m / 2^32) + x) >> l (Granlund and Montgomery's
 * round-up method; the sum stays below 2^32 for such x). */
KP__OX_EW void kp__ox_divider(uint32_t d, uint32_t *magic, uint8_t *shift) {
    uint32_t l = 0;
    while (l < 31 && ((uint32_t)1 << l) < d) l++;
    *magic = (uint32_t)(((((uint64_t)1 << l) - d) << 32) / d + 1);
    *shift = (uint8_t)l;
}

KP__OX_EW uint32_t kp__ox_div32(uint32_t x, uint32_t magic, uint8_t shift) {
#if defined(__CUDA_ARCH__)
    return (__umulhi(x, magic) + x) >> shift;
#else
    return ((uint32_t)(((uint64_t)x * magic) >> 32) + x) >> shift;
#endif
}

/* Element offsets of `n_in` broadcast inputs for output item i. With
 * `direct` (every input whole) they are i itself; without `nd` the caller
 * knows ndim <= 1, so none of the index code is compiled in (the lean cuda
 * kernel). The outermost dimension needs no division. Dimension k's loop
 * body indexes the params by constants once unrolled, so the device reads
 * them straight from the kernel's parameters. */
KP__OX_EW void kp__ox_bcast_offsets(const kp__ox_binary_params *p, int n_in, bool direct, bool nd,
                                    int64_t i, int64_t *o) {
    if (direct) {
        for (int m = 0; m < n_in; m++) o[m] = i;
        return;
    }
    if (!nd || p->ndim <= 1) {
        for (int m = 0; m < n_in; m++) o[m] = (p->mask[m] & 1u) ? i : 0;
        return;
    }
    const int last = p->ndim - 1;
    if (p->n <= (int64_t)INT32_MAX) {
        const kp__ox_bcast_small *b = &p->ix.small;
        uint32_t r = (uint32_t)i, o32[3] = {0, 0, 0};
#if defined(__CUDACC__)
#pragma unroll
#endif
        for (int k = 0; k < KP_MAX_DIMS; k++) {
            uint32_t c = r;
            if (k < last) {
                r = kp__ox_div32(c, b->magic[k], b->shift[k]);
                c -= r * b->shape[k];
            }
            for (int m = 0; m < n_in; m++) o32[m] += c * b->stride[m][k];
            if (k == last) break;
        }
        for (int m = 0; m < n_in; m++) o[m] = o32[m];
        return;
    }
    int64_t r = i, st[3] = {1, 1, 1};
    for (int m = 0; m < n_in; m++) o[m] = 0;
    for (int k = 0; k <= last; k++) {
        int64_t s = p->ix.large[k], c = r;
        if (k < last) {
            r = c / s;
            c -= r * s;
        }
        for (int m = 0; m < n_in; m++)
            if ((p->mask[m] >> k) & 1u) {
                o[m] += c * st[m];
                st[m] *= s;
            }
    }
}

/* One loop of a float operator: op, dt and direct constants at the call. */
KP__OX_EW void kp__ox_binary_float(const kp__ox_binary_params *p, int op, int dt, bool direct,
                                   bool nd, int64_t i, int64_t end, int64_t step) {
    const void *a = p->in[0], *b = p->in[1];
    void *y = p->y;
    const float alpha = p->alpha;
    for (; i < end; i += step) {
        int64_t o[2];
        kp__ox_bcast_offsets(p, 2, direct, nd, i, o);
        float va = kp__ox_ld_f(a, dt, o[0]), vb = kp__ox_ld_f(b, dt, o[1]);
        if (op >= KP__OX_B_EQUAL)
            ((uint8_t *)y)[i] = kp__ox_compare_f(op, va, vb);
        else
            kp__ox_st_f(y, dt, i, kp__ox_binary_f(op, va, vb, alpha));
    }
}

KP__OX_EW void kp__ox_binary_float_ops(const kp__ox_binary_params *p, int dt, bool direct, bool nd,
                                       int64_t i, int64_t end, int64_t step) {
    switch (p->op) {
#define KP__OX_BINARY_CASE(code)                                       \
    case code:                                                         \
        if (direct)                                                    \
            kp__ox_binary_float(p, code, dt, true, nd, i, end, step);  \
        else                                                           \
            kp__ox_binary_float(p, code, dt, false, nd, i, end, step); \
        return;
        KP__OX_BINARY_CASE(KP__OX_B_ADD)
        KP__OX_BINARY_CASE(KP__OX_B_SUB)
        KP__OX_BINARY_CASE(KP__OX_B_MUL)
        KP__OX_BINARY_CASE(KP__OX_B_DIV)
        KP__OX_BINARY_CASE(KP__OX_B_MOD)
        KP__OX_BINARY_CASE(KP__OX_B_FMOD)
        KP__OX_BINARY_CASE(KP__OX_B_PRELU)
        KP__OX_BINARY_CASE(KP__OX_B_MAX)
        KP__OX_BINARY_CASE(KP__OX_B_MIN)
        KP__OX_BINARY_CASE(KP__OX_B_ADD_DIV)
        KP__OX_BINARY_CASE(KP__OX_B_EQUAL)
        KP__OX_BINARY_CASE(KP__OX_B_LESS)
        KP__OX_BINARY_CASE(KP__OX_B_GREATER)
        KP__OX_BINARY_CASE(KP__OX_B_LESS_EQUAL)
        KP__OX_BINARY_CASE(KP__OX_B_GREATER_EQUAL)
#undef KP__OX_BINARY_CASE
    default: return;
    }
}

/* Integer dtypes, bools, and Pow (whose exponent may have another dtype):
 * one loop, converting per element. */
KP__OX_EW void kp__ox_binary_generic(const kp__ox_binary_params *p, bool direct, bool nd, int64_t i,
                                     int64_t end, int64_t step) {
    const void *a = p->in[0], *b = p->in[1];
    void *y = p->y;
    const int op = p->op, dt = p->dtype, dt1 = p->dtype1;
    const bool uns = dt == KP_U64, fl = kp__ox_is_float(dt), fl1 = kp__ox_is_float(dt1);
    const int64_t alpha = (int64_t)p->alpha;
    for (; i < end; i += step) {
        int64_t o[2];
        kp__ox_bcast_offsets(p, 2, direct, nd, i, o);
        if (op == KP__OX_B_POW && fl) {
            kp__ox_st_f(y, dt, i, powf(kp__ox_ld_f(a, dt, o[0]), kp__ox_ld_f(b, dt1, o[1])));
        } else if (op == KP__OX_B_POW && fl1) {
            double v = pow((double)kp__ox_ld_i(a, dt, o[0]), (double)kp__ox_ld_f(b, dt1, o[1]));
            kp__ox_st_i(y, dt, i, kp__ox_f2i(v));
        } else if (op >= KP__OX_B_EQUAL) {
            ((uint8_t *)y)[i] =
                kp__ox_compare_i(op, kp__ox_ld_i(a, dt, o[0]), kp__ox_ld_i(b, dt1, o[1]), uns);
        } else {
            int64_t v = kp__ox_binary_i(op, kp__ox_ld_i(a, dt, o[0]), kp__ox_ld_i(b, dt1, o[1]),
                                        uns, alpha);
            kp__ox_st_i(y, dt, i, v);
        }
    }
}

KP__OX_EW void kp__ox_where(const kp__ox_binary_params *p, int size, bool direct, bool nd,
                            int64_t i, int64_t end, int64_t step) {
    const uint8_t *c = (const uint8_t *)p->in[0];
    const uint8_t *xs = (const uint8_t *)p->in[1], *ys = (const uint8_t *)p->in[2];
    uint8_t *y = (uint8_t *)p->y;
    for (; i < end; i += step) {
        int64_t o[3];
        kp__ox_bcast_offsets(p, 3, direct, nd, i, o);
        const uint8_t *s = c[o[0]] ? xs + o[1] * size : ys + o[2] * size;
        switch (size) {
        case 1: y[i] = *s; break;
        case 2: ((uint16_t *)y)[i] = *(const uint16_t *)s; break;
        case 4: ((uint32_t *)y)[i] = *(const uint32_t *)s; break;
        default: ((uint64_t *)y)[i] = *(const uint64_t *)s; break;
        }
    }
}

/* Whether the float loops serve a launch: arithmetic and comparisons on
 * f32, f16 and bf16. */
KP__OX_EW bool kp__ox_binary_is_float(const kp__ox_binary_params *p) {
    return kp__ox_is_float(p->dtype) && p->op != KP__OX_B_POW && p->op < KP__OX_B_AND;
}

/* `nd`: the launch may have ndim > 1; `other`: it may be one that the float
 * loops do not serve. Both are constants at each call, so the cuda forms
 * split the work into lean kernels for the common launches and one that
 * carries everything else. */
KP__OX_EW void kp__ox_binary_span(const kp__ox_binary_params *p, bool nd, bool other, int64_t i,
                                  int64_t end, int64_t step) {
    const int n_in = p->op == KP__OX_B_WHERE ? 3 : 2;
    bool direct = p->ndim <= 1;
    for (int m = 0; m < n_in; m++) direct = direct && (p->mask[m] & 1u);
    if (kp__ox_binary_is_float(p)) {
        switch (p->dtype) {
        case KP_F32: kp__ox_binary_float_ops(p, KP_F32, direct, nd, i, end, step); return;
        case KP_F16: kp__ox_binary_float_ops(p, KP_F16, direct, nd, i, end, step); return;
        default: kp__ox_binary_float_ops(p, KP_BF16, direct, nd, i, end, step); return;
        }
    }
    if (!other) return;
    if (p->op == KP__OX_B_WHERE) {
        switch (kp__ox_elem_size(p->dtype)) {
#define KP__OX_WHERE_CASE(size)                             \
    case size:                                              \
        if (direct)                                         \
            kp__ox_where(p, size, true, nd, i, end, step);  \
        else                                                \
            kp__ox_where(p, size, false, nd, i, end, step); \
        return;
            KP__OX_WHERE_CASE(1)
            KP__OX_WHERE_CASE(2)
            KP__OX_WHERE_CASE(4)
            KP__OX_WHERE_CASE(8)
#undef KP__OX_WHERE_CASE
        default: return;
        }
    }
    if (direct)
        kp__ox_binary_generic(p, true, nd, i, end, step);
    else
        kp__ox_binary_generic(p, false, nd, i, end, step);
}

#endif
