// The elementwise family's cuda forms: each a grid-stride loop over the
// span function its host form also runs (elementwise-kernels.h and
// binary-kernels.h), so both forms compute every element from the same
// text. The kernels stream memory, so what counts is threads resident to
// keep loads in flight: the launch bounds cap registers at 32 for the unary
// kernels and the float arithmetic (flat or broadcast); the kernel for
// everything else (integers, Pow, logic, Where) gets 64.
#include <stdint.h>

#include "binary-kernels.h"

namespace {

__device__ inline int64_t ew_first() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ inline int64_t ew_stride() { return (int64_t)gridDim.x * blockDim.x; }

__global__ void __launch_bounds__(KP__OX_THREADS, 8) ew_unary(kp__ox_unary_params p) {
    kp__ox_unary_span(&p, ew_first(), p.n, ew_stride());
}

__global__ void __launch_bounds__(KP__OX_THREADS, 8) ew_clip(kp__ox_clip_params p) {
    kp__ox_clip_span(&p, ew_first(), p.n, ew_stride());
}

__global__ void __launch_bounds__(KP__OX_THREADS, 8) ew_cast(kp__ox_cast_params p) {
    kp__ox_cast_span(&p, ew_first(), p.n, ew_stride());
}

__global__ void __launch_bounds__(KP__OX_THREADS, 8) ew_binary_flat(kp__ox_binary_params p) {
    kp__ox_binary_span(&p, false, false, ew_first(), p.n, ew_stride());
}

__global__ void __launch_bounds__(KP__OX_THREADS, 8) ew_binary_nd(kp__ox_binary_params p) {
    kp__ox_binary_span(&p, true, false, ew_first(), p.n, ew_stride());
}

__global__ void __launch_bounds__(KP__OX_THREADS, 4) ew_binary_other(kp__ox_binary_params p) {
    kp__ox_binary_span(&p, true, true, ew_first(), p.n, ew_stride());
}

} // namespace

extern "C" const kp_device_kernel kp__ox_unary_cuda = {reinterpret_cast<const void *>(ew_unary)};
extern "C" const kp_device_kernel kp__ox_clip_cuda = {reinterpret_cast<const void *>(ew_clip)};
extern "C" const kp_device_kernel kp__ox_cast_cuda = {reinterpret_cast<const void *>(ew_cast)};
extern "C" const kp_device_kernel kp__ox_binary_flat_cuda = {
    reinterpret_cast<const void *>(ew_binary_flat)};
extern "C" const kp_device_kernel kp__ox_binary_nd_cuda = {
    reinterpret_cast<const void *>(ew_binary_nd)};
extern "C" const kp_device_kernel kp__ox_binary_other_cuda = {
    reinterpret_cast<const void *>(ew_binary_other)};
