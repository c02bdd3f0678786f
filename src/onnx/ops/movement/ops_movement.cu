// The movement family's cuda forms (movement-kernels.h says what each
// computes): grid-stride loops over the items, the element size chosen once
// per launch so that each loop moves one unsigned type.
#include <stdint.h>

#include "movement-kernels.h"

namespace {

__device__ inline int64_t mv_first() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline int64_t mv_stride() { return (int64_t)gridDim.x * blockDim.x; }

template <typename T> __device__ void mv_copy(const kp__ox_mv_copy_params &p) {
    const T *in = static_cast<const T *>(p.in);
    T *out = static_cast<T *>(p.out);
    for (int64_t i = mv_first(); i < p.n; i += mv_stride()) {
        int64_t s, d;
        kp__ox_mv_copy_at(&p, i, &s, &d);
        out[d] = in[s];
    }
}

template <typename T> __device__ void mv_index(const kp__ox_mv_index_params &p) {
    const T *in = static_cast<const T *>(p.in);
    T *out = static_cast<T *>(p.out);
    T fill = p.fill_ptr ? *static_cast<const T *>(p.fill_ptr) : (T)p.fill;
    for (int64_t i = mv_first(); i < p.n; i += mv_stride()) {
        int64_t s = kp__ox_mv_index_src(&p, i);
        out[i] = s < 0 ? fill : in[s];
    }
}

template <typename T> __device__ void mv_fill(const kp__ox_mv_fill_params &p) {
    T *out = static_cast<T *>(p.out);
    for (int64_t i = mv_first(); i < p.n; i += mv_stride()) out[i] = (T)p.vals[i % p.count];
}

template <typename T> __device__ void mv_range_int(const kp__ox_mv_range_params &p) {
    T *out = static_cast<T *>(p.out);
    for (int64_t i = mv_first(); i < p.n; i += mv_stride()) out[i] = (T)kp__ox_mv_range_int(&p, i);
}

} // namespace

#define KP__OX_MV_BY_SIZE(fn, p)        \
    switch ((p).elem) {                 \
    case 1: fn<uint8_t>(p); break;      \
    case 2: fn<uint16_t>(p); break;     \
    case 4: fn<uint32_t>(p); break;     \
    default: fn<unsigned long long>(p); \
    }

__global__ void kp_ox_mv_copy_kernel(kp__ox_mv_copy_params p){
    KP__OX_MV_BY_SIZE(mv_copy, p)} __global__
    void kp_ox_mv_index_kernel(kp__ox_mv_index_params p){KP__OX_MV_BY_SIZE(mv_index, p)} __global__
    void kp_ox_mv_fill_kernel(kp__ox_mv_fill_params p){KP__OX_MV_BY_SIZE(mv_fill, p)}

__global__ void kp_ox_mv_range_kernel(kp__ox_mv_range_params p) {
    switch (p.type) {
    case KP__OX_MV_RANGE_F32:
        for (int64_t i = mv_first(); i < p.n; i += mv_stride())
            static_cast<float *>(p.out)[i] = kp__ox_mv_range_f32(&p, i);
        break;
    case KP__OX_MV_RANGE_I32: mv_range_int<int32_t>(p); break;
    case KP__OX_MV_RANGE_I16: mv_range_int<int16_t>(p); break;
    default: mv_range_int<int64_t>(p); break;
    }
}

extern "C" const kp_device_kernel kp__ox_mv_copy_cuda = {
    reinterpret_cast<const void *>(kp_ox_mv_copy_kernel)};
extern "C" const kp_device_kernel kp__ox_mv_index_cuda = {
    reinterpret_cast<const void *>(kp_ox_mv_index_kernel)};
extern "C" const kp_device_kernel kp__ox_mv_fill_cuda = {
    reinterpret_cast<const void *>(kp_ox_mv_fill_kernel)};
extern "C" const kp_device_kernel kp__ox_mv_range_cuda = {
    reinterpret_cast<const void *>(kp_ox_mv_range_kernel)};
