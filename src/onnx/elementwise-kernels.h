/* The elementwise operators' kernels, shared by their host forms
 * (ops_elementwise.c, ops_binary.c) and their cuda forms
 * (ops_elementwise.cu): parameter structs, element conversions and the
 * per-element math, so both backends compute the same thing from one text.
 *
 * Each kernel is a span function over items [i, end) taken `step` apart:
 * the host form passes its block's span with step 1, the cuda form its
 * thread's first item and the grid's width. A span switches once on the
 * launch's operator and dtype and then runs a loop in which both are
 * constants, so every (operator, dtype) pair the engine cares about gets a
 * loop of its own after inlining; the rarer dtypes share a loop that
 * converts through a per-element switch. */
#ifndef KPIPE_ONNX_ELEMENTWISE_KERNELS_H
#define KPIPE_ONNX_ELEMENTWISE_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels-impl.h"

/* Everything here is inlined where it is used: the op and dtype arguments
 * are constants there, and their switches fold away. */
#if defined(__CUDACC__)
#define KP__OX_EW static __forceinline__ KP__HD
#else
#define KP__OX_EW static inline __attribute__((always_inline))
#endif

/* Unary operators on floats (f32, f16, bf16, computed in f32). */
#define KP__OX_UNARY_FLOAT_OPS(X)                                                               \
    X(KP__OX_U_RELU) X(KP__OX_U_SIGMOID) X(KP__OX_U_TANH) X(KP__OX_U_EXP) X(KP__OX_U_LOG)       \
    X(KP__OX_U_SQRT) X(KP__OX_U_ABS) X(KP__OX_U_NEG) X(KP__OX_U_RECIPROCAL) X(KP__OX_U_FLOOR)   \
    X(KP__OX_U_CEIL) X(KP__OX_U_ROUND) X(KP__OX_U_ERF) X(KP__OX_U_SIN) X(KP__OX_U_COS)          \
    X(KP__OX_U_TAN) X(KP__OX_U_ASIN) X(KP__OX_U_ACOS) X(KP__OX_U_ATAN) X(KP__OX_U_SINH)         \
    X(KP__OX_U_COSH) X(KP__OX_U_ASINH) X(KP__OX_U_ACOSH) X(KP__OX_U_ATANH) X(KP__OX_U_SOFTPLUS) \
    X(KP__OX_U_SOFTSIGN) X(KP__OX_U_SIGN) X(KP__OX_U_HARDSIGMOID) X(KP__OX_U_HARDSWISH)         \
    X(KP__OX_U_LEAKYRELU) X(KP__OX_U_ELU) X(KP__OX_U_SELU) X(KP__OX_U_CELU)                     \
    X(KP__OX_U_THRESHOLDEDRELU) X(KP__OX_U_GELU) X(KP__OX_U_GELU_TANH) X(KP__OX_U_MISH)         \
    X(KP__OX_U_SHRINK)

#define KP__OX_ENUM_ITEM(code) code,
enum {
    KP__OX_UNARY_FLOAT_OPS(KP__OX_ENUM_ITEM)
    KP__OX_U_ISNAN,    /* float -> bool */
    KP__OX_U_ISINF,    /* float -> bool; alpha: detect negative, beta: detect positive */
    KP__OX_U_NOT,      /* bool -> bool */
    KP__OX_U_COPY,     /* any dtype, by element size */
    KP__OX_U_ONE,      /* writes 1 in the output's dtype; reads nothing */
    KP__OX_U_COUNT
};

/* Binary operators (two inputs broadcast to the output). */
enum {
    KP__OX_B_ADD,
    KP__OX_B_SUB,
    KP__OX_B_MUL,
    KP__OX_B_DIV,
    KP__OX_B_MOD,     /* the result takes the divisor's sign (Python's %) */
    KP__OX_B_FMOD,    /* the dividend's sign (C's fmod and %) */
    KP__OX_B_PRELU,
    KP__OX_B_MAX,
    KP__OX_B_MIN,
    KP__OX_B_ADD_DIV, /* (a + b) / alpha: Mean's last step */
    KP__OX_B_POW,     /* the exponent's dtype is dtype1 */
    KP__OX_B_EQUAL,   /* the comparisons and logic write bools */
    KP__OX_B_LESS,
    KP__OX_B_GREATER,
    KP__OX_B_LESS_EQUAL,
    KP__OX_B_GREATER_EQUAL,
    KP__OX_B_AND,
    KP__OX_B_OR,
    KP__OX_B_XOR,
    KP__OX_B_WHERE,   /* three inputs: condition, X, Y; any dtype by element size */
    KP__OX_B_COUNT
};

typedef struct kp__ox_unary_params {
    const void *x;
    void *y;
    int64_t n;
    int32_t op;    /* KP__OX_U_* */
    int32_t dtype; /* the input's kp_dtype (ONE: the output's) */
    float alpha, beta, gamma;
} kp__ox_unary_params;

/* Clip: the bounds come from the params or, when lo/hi are set, from
 * element 0 there (an input computed on the device). Absent bounds are
 * the dtype's extremes. */
typedef struct kp__ox_clip_params {
    const void *x;
    void *y;
    const void *lo, *hi;
    int64_t n;
    int64_t ilo, ihi; /* integer dtypes (u64: the bit patterns) */
    float flo, fhi;   /* float dtypes */
    int32_t dtype;
} kp__ox_clip_params;

typedef struct kp__ox_cast_params {
    const void *x;
    void *y;
    int64_t n;
    int32_t from, to;  /* kp_dtype */
    int32_t to_bool;   /* the output is ONNX BOOL: 0 or 1 */
    int32_t bf16_trunc; /* f32 -> bf16 drops the low bits (Cast before opset 19) */
} kp__ox_cast_params;

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
        kp__ox_bcast_small small;         /* n <= INT32_MAX */
        int64_t large[KP_MAX_DIMS];       /* otherwise: the shape */
    } ix;
} kp__ox_binary_params;

/* --- element conversions --------------------------------------------------------- */

KP__OX_EW uint32_t kp__ox_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    union {
        float f;
        uint32_t u;
    } c;
    c.f = f;
    return c.u;
#endif
}

KP__OX_EW float kp__ox_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union {
        float f;
        uint32_t u;
    } c;
    c.u = u;
    return c.f;
#endif
}

/* IEEE half from f32, rounded to nearest even; NaN stays NaN (quiet, the
 * payload's high bits kept), and values past 65504 by half an ulp or more
 * become infinity. */
KP__OX_EW uint16_t kp__ox_f32_to_f16(float f) {
#if defined(__CUDA_ARCH__)
    /* The same rounding in one instruction (a NaN's payload aside). */
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    uint32_t x = kp__ox_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* A half subnormal counts units of 2^-24; below half a unit is 0. */
        if (ax <= 0x33000000u) return (uint16_t)sign;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - (ax >> 23);
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    /* Rebias the exponent (127 -> 15); a carry out of the mantissa moves
     * into the exponent, which is the right rounding there too. */
    uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
#endif
}

/* f32 from IEEE half: exact. */
KP__OX_EW float kp__ox_f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return kp__ox_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e != 0) return kp__ox_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return kp__ox_bits_f32(sign);
    /* A subnormal: shift its leading one up to the hidden bit. */
    e = 113u;
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return kp__ox_bits_f32(sign | (e << 23) | ((m & 0x3ffu) << 13));
#endif
}

/* bfloat16 from f32: rounded to nearest even, or truncated; NaN stays a
 * quiet NaN either way (truncation alone could turn it into infinity). */
KP__OX_EW uint16_t kp__ox_f32_to_bf16(float f, bool truncate) {
    uint32_t x = kp__ox_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    if (truncate) return (uint16_t)(x >> 16);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

KP__OX_EW float kp__ox_bf16_to_f32(uint16_t h) { return kp__ox_bits_f32((uint32_t)h << 16); }

/* Float to integer: toward zero, saturating, NaN to 0 (C leaves the
 * out-of-range cases undefined; these are defined on both backends). */
KP__OX_EW int64_t kp__ox_f2i(double v) {
    if (!(v == v)) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

KP__OX_EW uint64_t kp__ox_f2u(double v) {
    if (!(v >= 0.0)) return (uint64_t)kp__ox_f2i(v);
    if (v >= 18446744073709551616.0) return UINT64_MAX;
    return (uint64_t)v;
}

KP__OX_EW bool kp__ox_is_float(int dt) { return dt == KP_F32 || dt == KP_F16 || dt == KP_BF16; }

KP__OX_EW float kp__ox_ld_f(const void *p, int dt, int64_t i) {
    switch (dt) {
    case KP_F32: return ((const float *)p)[i];
    case KP_F16: return kp__ox_f16_to_f32(((const uint16_t *)p)[i]);
    case KP_BF16: return kp__ox_bf16_to_f32(((const uint16_t *)p)[i]);
    case KP_I64: return (float)((const int64_t *)p)[i];
    case KP_I32: return (float)((const int32_t *)p)[i];
    case KP_I16: return (float)((const int16_t *)p)[i];
    case KP_I8: return (float)((const int8_t *)p)[i];
    case KP_U8: return (float)((const uint8_t *)p)[i];
    case KP_U64: return (float)((const uint64_t *)p)[i];
    default: return 0.0f;
    }
}

/* Integers as int64 (u64 as its bit pattern); floats converted. */
KP__OX_EW int64_t kp__ox_ld_i(const void *p, int dt, int64_t i) {
    switch (dt) {
    case KP_I64: return ((const int64_t *)p)[i];
    case KP_I32: return ((const int32_t *)p)[i];
    case KP_I16: return ((const int16_t *)p)[i];
    case KP_I8: return ((const int8_t *)p)[i];
    case KP_U8: return ((const uint8_t *)p)[i];
    case KP_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return kp__ox_f2i(kp__ox_ld_f(p, dt, i));
    }
}

/* Stores into a float dtype; integer dtypes take the value toward zero. */
KP__OX_EW void kp__ox_st_f(void *p, int dt, int64_t i, float v) {
    switch (dt) {
    case KP_F32: ((float *)p)[i] = v; return;
    case KP_F16: ((uint16_t *)p)[i] = kp__ox_f32_to_f16(v); return;
    case KP_BF16: ((uint16_t *)p)[i] = kp__ox_f32_to_bf16(v, false); return;
    case KP_I64: ((int64_t *)p)[i] = kp__ox_f2i(v); return;
    case KP_I32: ((int32_t *)p)[i] = (int32_t)kp__ox_f2i(v); return;
    case KP_I16: ((int16_t *)p)[i] = (int16_t)kp__ox_f2i(v); return;
    case KP_I8: ((int8_t *)p)[i] = (int8_t)kp__ox_f2i(v); return;
    case KP_U8: ((uint8_t *)p)[i] = (uint8_t)kp__ox_f2i(v); return;
    case KP_U64: ((uint64_t *)p)[i] = kp__ox_f2u(v); return;
    default: return;
    }
}

/* Stores an integer, wrapping to the dtype's width (as C and NumPy do). */
KP__OX_EW void kp__ox_st_i(void *p, int dt, int64_t i, int64_t v) {
    switch (dt) {
    case KP_I64: ((int64_t *)p)[i] = v; return;
    case KP_I32: ((int32_t *)p)[i] = (int32_t)v; return;
    case KP_I16: ((int16_t *)p)[i] = (int16_t)v; return;
    case KP_I8: ((int8_t *)p)[i] = (int8_t)v; return;
    case KP_U8: ((uint8_t *)p)[i] = (uint8_t)v; return;
    case KP_U64: ((uint64_t *)p)[i] = (uint64_t)v; return;
    default: kp__ox_st_f(p, dt, i, (float)v); return;
    }
}

/* --- unary ------------------------------------------------------------------------ */

KP__OX_EW float kp__ox_softplus(float x) {
    /* log(1 + e^x) without overflowing e^x for large x. */
    return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x));
}

KP__OX_EW float kp__ox_unary_f(int op, float x, const kp__ox_unary_params *p) {
    switch (op) {
    case KP__OX_U_RELU: return x < 0.0f ? 0.0f : x; /* NaN passes */
    case KP__OX_U_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KP__OX_U_TANH: return tanhf(x);
    case KP__OX_U_EXP: return expf(x);
    case KP__OX_U_LOG: return logf(x);
    case KP__OX_U_SQRT: return sqrtf(x);
    case KP__OX_U_ABS: return fabsf(x);
    case KP__OX_U_NEG: return -x;
    case KP__OX_U_RECIPROCAL: return 1.0f / x;
    case KP__OX_U_FLOOR: return floorf(x);
    case KP__OX_U_CEIL: return ceilf(x);
    case KP__OX_U_ROUND: return rintf(x); /* halves to even in the default mode */
    case KP__OX_U_ERF: return erff(x);
    case KP__OX_U_SIN: return sinf(x);
    case KP__OX_U_COS: return cosf(x);
    case KP__OX_U_TAN: return tanf(x);
    case KP__OX_U_ASIN: return asinf(x);
    case KP__OX_U_ACOS: return acosf(x);
    case KP__OX_U_ATAN: return atanf(x);
    case KP__OX_U_SINH: return sinhf(x);
    case KP__OX_U_COSH: return coshf(x);
    case KP__OX_U_ASINH: return asinhf(x);
    case KP__OX_U_ACOSH: return acoshf(x);
    case KP__OX_U_ATANH: return atanhf(x);
    case KP__OX_U_SOFTPLUS: return kp__ox_softplus(x);
    case KP__OX_U_SOFTSIGN: return x / (1.0f + fabsf(x));
    case KP__OX_U_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
    case KP__OX_U_HARDSIGMOID:
    case KP__OX_U_HARDSWISH: {
        float v = p->alpha * x + p->beta;
        v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
        return op == KP__OX_U_HARDSWISH ? x * v : v;
    }
    case KP__OX_U_LEAKYRELU: return x < 0.0f ? p->alpha * x : x;
    case KP__OX_U_ELU: return x < 0.0f ? p->alpha * expm1f(x) : x;
    case KP__OX_U_SELU: return x <= 0.0f ? p->gamma * (p->alpha * expf(x) - p->alpha) : p->gamma * x;
    case KP__OX_U_CELU: return x > 0.0f ? x : p->alpha * expm1f(x / p->alpha);
    case KP__OX_U_THRESHOLDEDRELU: return x > p->alpha ? x : 0.0f;
    /* Gelu's 1 + erf(z) and 1 + tanh(u) as erfc(-z) and 2 / (1 + e^-2u),
     * which keep their precision where x is negative and the sum cancels. */
    case KP__OX_U_GELU: return 0.5f * x * erfcf(x * -0.70710678118654752f);
    case KP__OX_U_GELU_TANH:
        return x / (1.0f + expf(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
    case KP__OX_U_MISH: return x * tanhf(kp__ox_softplus(x));
    case KP__OX_U_SHRINK: /* alpha: lambd, beta: bias */
        return x < -p->alpha ? x + p->beta : (x > p->alpha ? x - p->beta : 0.0f);
    default: return x;
    }
}

/* Abs, Neg, Sign and Relu on integers; wrapping where C would overflow. */
KP__OX_EW int64_t kp__ox_unary_i(int op, int64_t v, bool uns) {
    switch (op) {
    case KP__OX_U_ABS: return uns || v >= 0 ? v : (int64_t)(0u - (uint64_t)v);
    case KP__OX_U_NEG: return (int64_t)(0u - (uint64_t)v);
    case KP__OX_U_SIGN: return uns ? v != 0 : (v > 0) - (v < 0);
    case KP__OX_U_RELU: return uns || v >= 0 ? v : 0;
    default: return v;
    }
}

KP__OX_EW void kp__ox_copy_span(const void *x, void *y, int size, int64_t i, int64_t end,
                                int64_t step) {
    switch (size) {
    case 1: for (; i < end; i += step) ((uint8_t *)y)[i] = ((const uint8_t *)x)[i]; return;
    case 2: for (; i < end; i += step) ((uint16_t *)y)[i] = ((const uint16_t *)x)[i]; return;
    case 4: for (; i < end; i += step) ((uint32_t *)y)[i] = ((const uint32_t *)x)[i]; return;
    default: for (; i < end; i += step) ((uint64_t *)y)[i] = ((const uint64_t *)x)[i]; return;
    }
}

KP__OX_EW int kp__ox_elem_size(int dt) {
    switch (dt) {
    case KP_I64:
    case KP_U64: return 8;
    case KP_F32:
    case KP_I32: return 4;
    case KP_F16:
    case KP_BF16:
    case KP_I16: return 2;
    default: return 1;
    }
}

/* The float operators with the dtype `dt` a constant at the call. */
KP__OX_EW void kp__ox_unary_float(const kp__ox_unary_params *p, int dt, int64_t i, int64_t end,
                                  int64_t step) {
    const void *x = p->x;
    void *y = p->y;
    switch (p->op) {
#define KP__OX_UNARY_CASE(code)                                                 \
    case code:                                                                  \
        for (; i < end; i += step)                                              \
            kp__ox_st_f(y, dt, i, kp__ox_unary_f(code, kp__ox_ld_f(x, dt, i), p)); \
        return;
        KP__OX_UNARY_FLOAT_OPS(KP__OX_UNARY_CASE)
#undef KP__OX_UNARY_CASE
    default: return;
    }
}

KP__OX_EW void kp__ox_unary_span(const kp__ox_unary_params *p, int64_t i, int64_t end,
                                 int64_t step) {
    const void *x = p->x;
    void *y = p->y;
    const int dt = p->dtype, op = p->op;
    uint8_t *yb = (uint8_t *)y;
    switch (op) {
    case KP__OX_U_COPY: kp__ox_copy_span(x, y, kp__ox_elem_size(dt), i, end, step); return;
    case KP__OX_U_ONE:
        for (; i < end; i += step) kp__ox_st_i(y, dt, i, 1);
        return;
    case KP__OX_U_NOT:
        for (; i < end; i += step) yb[i] = !((const uint8_t *)x)[i];
        return;
    case KP__OX_U_ISNAN:
        for (; i < end; i += step) {
            float v = kp__ox_ld_f(x, dt, i);
            yb[i] = !(v == v);
        }
        return;
    case KP__OX_U_ISINF:
        for (; i < end; i += step) {
            float v = kp__ox_ld_f(x, dt, i);
            yb[i] = (v == INFINITY && p->beta != 0.0f) || (v == -INFINITY && p->alpha != 0.0f);
        }
        return;
    default: break;
    }
    switch (dt) {
    case KP_F32: kp__ox_unary_float(p, KP_F32, i, end, step); return;
    case KP_F16: kp__ox_unary_float(p, KP_F16, i, end, step); return;
    case KP_BF16: kp__ox_unary_float(p, KP_BF16, i, end, step); return;
    default:
        for (; i < end; i += step)
            kp__ox_st_i(y, dt, i, kp__ox_unary_i(op, kp__ox_ld_i(x, dt, i), dt == KP_U64));
        return;
    }
}

/* --- Clip ------------------------------------------------------------------------- */

KP__OX_EW void kp__ox_clip_span(const kp__ox_clip_params *p, int64_t i, int64_t end,
                                int64_t step) {
    const void *x = p->x;
    void *y = p->y;
    const int dt = p->dtype;
    if (kp__ox_is_float(dt)) {
        float lo = p->lo ? kp__ox_ld_f(p->lo, dt, 0) : p->flo;
        float hi = p->hi ? kp__ox_ld_f(p->hi, dt, 0) : p->fhi;
        /* Comparisons rather than fminf/fmaxf, so a NaN element stays NaN. */
        if (dt == KP_F32) {
            for (; i < end; i += step) {
                float v = ((const float *)x)[i];
                v = v < lo ? lo : v;
                ((float *)y)[i] = v > hi ? hi : v;
            }
            return;
        }
        for (; i < end; i += step) {
            float v = kp__ox_ld_f(x, dt, i);
            v = v < lo ? lo : v;
            kp__ox_st_f(y, dt, i, v > hi ? hi : v);
        }
        return;
    }
    int64_t lo = p->lo ? kp__ox_ld_i(p->lo, dt, 0) : p->ilo;
    int64_t hi = p->hi ? kp__ox_ld_i(p->hi, dt, 0) : p->ihi;
    if (dt == KP_U64) {
        for (; i < end; i += step) {
            uint64_t v = ((const uint64_t *)x)[i];
            v = v < (uint64_t)lo ? (uint64_t)lo : v;
            ((uint64_t *)y)[i] = v > (uint64_t)hi ? (uint64_t)hi : v;
        }
        return;
    }
    for (; i < end; i += step) {
        int64_t v = kp__ox_ld_i(x, dt, i);
        v = v < lo ? lo : v;
        kp__ox_st_i(y, dt, i, v > hi ? hi : v);
    }
}

/* --- Cast ------------------------------------------------------------------------- */

KP__OX_EW void kp__ox_cast_one(const kp__ox_cast_params *p, int from, int to, int64_t i) {
    const void *x = p->x;
    void *y = p->y;
    if (kp__ox_is_float(from)) {
        float v = kp__ox_ld_f(x, from, i);
        if (p->to_bool) ((uint8_t *)y)[i] = v != 0.0f;
        else if (to == KP_BF16) ((uint16_t *)y)[i] = kp__ox_f32_to_bf16(v, p->bf16_trunc != 0);
        else kp__ox_st_f(y, to, i, v);
    } else if (from == KP_U64) {
        uint64_t v = ((const uint64_t *)x)[i];
        if (p->to_bool) ((uint8_t *)y)[i] = v != 0u;
        else if (kp__ox_is_float(to)) kp__ox_st_f(y, to, i, (float)v);
        else kp__ox_st_i(y, to, i, (int64_t)v);
    } else {
        int64_t v = kp__ox_ld_i(x, from, i);
        if (p->to_bool) ((uint8_t *)y)[i] = v != 0;
        else if (kp__ox_is_float(to)) kp__ox_st_f(y, to, i, (float)v);
        else kp__ox_st_i(y, to, i, v);
    }
}

KP__OX_EW void kp__ox_cast_span(const kp__ox_cast_params *p, int64_t i, int64_t end,
                                int64_t step) {
    const int from = p->from, to = p->to;
    /* The engine's own conversions (precision changes, index dtypes) get
     * loops of their own; the rest convert through the generic path. */
    if (!p->to_bool) {
#define KP__OX_CAST_PAIR(F, T)                                                 \
    if (from == F && to == T) {                                                \
        for (; i < end; i += step) kp__ox_cast_one(p, F, T, i);                \
        return;                                                                \
    }
        KP__OX_CAST_PAIR(KP_F32, KP_F16)
        KP__OX_CAST_PAIR(KP_F16, KP_F32)
        KP__OX_CAST_PAIR(KP_I64, KP_F32)
        KP__OX_CAST_PAIR(KP_F32, KP_I64)
        KP__OX_CAST_PAIR(KP_I32, KP_I64)
        KP__OX_CAST_PAIR(KP_I64, KP_I32)
#undef KP__OX_CAST_PAIR
    }
    for (; i < end; i += step) kp__ox_cast_one(p, from, to, i);
}

/* --- binary, broadcast -------------------------------------------------------------- */

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
KP__OX_EW void kp__ox_bcast_offsets(const kp__ox_binary_params *p, int n_in, bool direct,
                                    bool nd, int64_t i, int64_t *o) {
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
        if (op >= KP__OX_B_EQUAL) ((uint8_t *)y)[i] = kp__ox_compare_f(op, va, vb);
        else kp__ox_st_f(y, dt, i, kp__ox_binary_f(op, va, vb, alpha));
    }
}

KP__OX_EW void kp__ox_binary_float_ops(const kp__ox_binary_params *p, int dt, bool direct,
                                       bool nd, int64_t i, int64_t end, int64_t step) {
    switch (p->op) {
#define KP__OX_BINARY_CASE(code)                                          \
    case code:                                                            \
        if (direct) kp__ox_binary_float(p, code, dt, true, nd, i, end, step); \
        else kp__ox_binary_float(p, code, dt, false, nd, i, end, step);       \
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
KP__OX_EW void kp__ox_binary_generic(const kp__ox_binary_params *p, bool direct, bool nd,
                                     int64_t i, int64_t end, int64_t step) {
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
#define KP__OX_WHERE_CASE(size)                                    \
    case size:                                                     \
        if (direct) kp__ox_where(p, size, true, nd, i, end, step); \
        else kp__ox_where(p, size, false, nd, i, end, step);       \
        return;
            KP__OX_WHERE_CASE(1)
            KP__OX_WHERE_CASE(2)
            KP__OX_WHERE_CASE(4)
            KP__OX_WHERE_CASE(8)
#undef KP__OX_WHERE_CASE
        default: return;
        }
    }
    if (direct) kp__ox_binary_generic(p, true, nd, i, end, step);
    else kp__ox_binary_generic(p, false, nd, i, end, step);
}

/* --- the family's host entry points shared by its two .c files ---------------------- */
#if !defined(__CUDACC__)
struct kp__ox_exec;
struct kp__ox_graph;
struct kp__ox_gnode;
struct kp__ox_value;
/* ops_binary.c: the broadcasting operators (op: KP__OX_B_*) and the
 * variadic ones (op: the step's KP__OX_B_*). */
kp_status kp__ox_binary_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n, int op);
kp_status kp__ox_binary_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                            struct kp__ox_gnode *n, int op);
kp_status kp__ox_variadic_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n, int op);
kp_status kp__ox_variadic_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                              struct kp__ox_gnode *n, int op);
/* ops_elementwise.c: enqueues out = in, element for element. */
kp_status kp__ox_ew_copy(const struct kp__ox_exec *x, const struct kp__ox_value *in,
                         struct kp__ox_value *out);
#endif

#endif
