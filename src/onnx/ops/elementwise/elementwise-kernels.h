/* The elementwise operators' kernels, shared by their host forms
 * (ops_elementwise.c, ops_binary.c) and their cuda forms
 * (ops_elementwise.cu): parameter structs, element conversions and the
 * per-element math, so both backends compute the same thing from one text.
 * The broadcasting operators' part is binary-kernels.h.
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

#include "../kernels-impl.h"

/* Everything here is inlined where it is used: the op and dtype arguments
 * are constants there, and their switches fold away. */
#if defined(__CUDACC__)
#define KP__OX_EW static __forceinline__ KP__HD
#else
#define KP__OX_EW static inline __attribute__((always_inline))
#endif

/* clang-format off */
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
/* clang-format on */

#define KP__OX_ENUM_ITEM(code) code,
enum { KP__OX_UNARY_FLOAT_OPS(KP__OX_ENUM_ITEM) KP__OX_U_FLOAT_END };
#undef KP__OX_ENUM_ITEM
enum {
    KP__OX_U_ISNAN = KP__OX_U_FLOAT_END, /* float -> bool */
    KP__OX_U_ISINF, /* float -> bool; alpha: detect negative, beta: detect positive */
    KP__OX_U_NOT,   /* bool -> bool */
    KP__OX_U_COPY,  /* any dtype, by element size */
    KP__OX_U_ONE,   /* writes 1 in the output's dtype; reads nothing */
    KP__OX_U_COUNT
};

/* Binary operators (two inputs broadcast to the output). */
enum {
    KP__OX_B_ADD,
    KP__OX_B_SUB,
    KP__OX_B_MUL,
    KP__OX_B_DIV,
    KP__OX_B_MOD,  /* the result takes the divisor's sign (Python's %) */
    KP__OX_B_FMOD, /* the dividend's sign (C's fmod and %) */
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
    KP__OX_B_WHERE, /* three inputs: condition, X, Y; any dtype by element size */
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
    int32_t from, to;   /* kp_dtype */
    int32_t to_bool;    /* the output is ONNX BOOL: 0 or 1 */
    int32_t bf16_trunc; /* f32 -> bf16 drops the low bits (Cast before opset 19) */
} kp__ox_cast_params;

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
        return (uint16_t)(sign | 0x7c00u |
                          (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0u));
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
    case KP__OX_U_SELU:
        return x <= 0.0f ? p->gamma * (p->alpha * expf(x) - p->alpha) : p->gamma * x;
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
    case 1:
        for (; i < end; i += step) ((uint8_t *)y)[i] = ((const uint8_t *)x)[i];
        return;
    case 2:
        for (; i < end; i += step) ((uint16_t *)y)[i] = ((const uint16_t *)x)[i];
        return;
    case 4:
        for (; i < end; i += step) ((uint32_t *)y)[i] = ((const uint32_t *)x)[i];
        return;
    default:
        for (; i < end; i += step) ((uint64_t *)y)[i] = ((const uint64_t *)x)[i];
        return;
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
#define KP__OX_UNARY_CASE(code)                                                    \
    case code:                                                                     \
        for (; i < end; i += step)                                                 \
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

KP__OX_EW void kp__ox_clip_span(const kp__ox_clip_params *p, int64_t i, int64_t end, int64_t step) {
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
        if (p->to_bool)
            ((uint8_t *)y)[i] = v != 0.0f;
        else if (to == KP_BF16)
            ((uint16_t *)y)[i] = kp__ox_f32_to_bf16(v, p->bf16_trunc != 0);
        else
            kp__ox_st_f(y, to, i, v);
    } else if (from == KP_U64) {
        uint64_t v = ((const uint64_t *)x)[i];
        if (p->to_bool)
            ((uint8_t *)y)[i] = v != 0u;
        else if (kp__ox_is_float(to))
            kp__ox_st_f(y, to, i, (float)v);
        else
            kp__ox_st_i(y, to, i, (int64_t)v);
    } else {
        int64_t v = kp__ox_ld_i(x, from, i);
        if (p->to_bool)
            ((uint8_t *)y)[i] = v != 0;
        else if (kp__ox_is_float(to))
            kp__ox_st_f(y, to, i, (float)v);
        else
            kp__ox_st_i(y, to, i, v);
    }
}

KP__OX_EW void kp__ox_cast_span(const kp__ox_cast_params *p, int64_t i, int64_t end, int64_t step) {
    const int from = p->from, to = p->to;
    /* The engine's own conversions (precision changes, index dtypes) get
     * loops of their own; the rest convert through the generic path. */
    if (!p->to_bool) {
#define KP__OX_CAST_PAIR(F, T)                                  \
    if (from == F && to == T) {                                 \
        for (; i < end; i += step) kp__ox_cast_one(p, F, T, i); \
        return;                                                 \
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
