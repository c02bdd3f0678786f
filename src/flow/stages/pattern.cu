// The synthetic and testsrc sources' kernels (pattern-impl.h).
#include <stdint.h>

#include "kpipe/device.h"
#include "pattern-impl.h"

__global__ void kp_pattern_kernel(kp__pattern_params p) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride)
        p.out[i] = kp__pattern_value(p.seq, i);
}

extern "C" const kp_device_kernel kp__pattern_cuda = {reinterpret_cast<const void *>(kp_pattern_kernel)};

__global__ void kp_testsrc_kernel(kp__testsrc_frame f) {
    const int64_t n = f.pitch * f.pic.height * 3 / 2;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        f.pic.out[i] = kp__testsrc_byte(&f, i);
}

extern "C" const kp_device_kernel kp__testsrc_cuda = {reinterpret_cast<const void *>(kp_testsrc_kernel)};
