/* IEEE half <-> float for code that runs on both backends (the video
 * conversions' f16 planes, the elementwise built-ins' f16 ports, the ONNX
 * engine's fp16 weights and channels-last conversions). */
#ifndef KPIPE_HALF_IMPL_H
#define KPIPE_HALF_IMPL_H

#include <stdint.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define KP__VHD __host__ __device__ static inline
#else
#define KP__VHD static inline
#endif

/* IEEE half from float, rounded to nearest even (the same bits on both
 * backends), and back. */
KP__VHD uint16_t kp__f32_to_f16(float f) {
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    const uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
    if (a < 0x38800000u) {                                   /* a subnormal half, or 0 */
        if (a < 0x33000000u) return (uint16_t)sign;
        const uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((a >> 13) - (112u << 10));
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

KP__VHD float kp__f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    union {
        float f;
        uint32_t u;
    } v;
    if (e == 0) {
        v.f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        v.u |= sign;
        return v.f;
    }
    v.u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112u) << 23) | (m << 13));
    return v.f;
}

/* The same conversions where a NaN's payload does not matter (the ONNX
 * engine's fp16 tensors): on the device, the hardware's instructions. */
KP__VHD uint16_t kp__f16_of(float f) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    return kp__f32_to_f16(f);
#endif
}

KP__VHD float kp__f32_of(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return kp__f16_to_f32(h);
#endif
}

#endif
