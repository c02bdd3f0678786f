// The relu kernel: out[i] = max(0, in[i]), addresses and this tick's size
// read from the module's descriptors (the grid covers the maximum size). 16-byte accesses when both pointers allow them.
#include <stdint.h>

#include "kpipe/device.h"
#include "relu-impl.h"

__global__ void kp_relu_kernel(kp__relu_params p) {
    const float *in = p.dyn->input;
    float *out = p.st->output;
    const int64_t n = p.dyn->size;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15) == 0) {
        const float4 *in4 = reinterpret_cast<const float4 *>(in);
        float4 *out4 = reinterpret_cast<float4 *>(out);
        const int64_t n4 = n >> 2;
        for (int64_t j = i; j < n4; j += stride) {
            float4 v = in4[j];
            v.x = fmaxf(v.x, 0.0f);
            v.y = fmaxf(v.y, 0.0f);
            v.z = fmaxf(v.z, 0.0f);
            v.w = fmaxf(v.w, 0.0f);
            out4[j] = v;
        }
        done = n4 << 2;
    }
    for (int64_t j = done + i; j < n; j += stride) out[j] = fmaxf(in[j], 0.0f);
}

extern "C" const kp_device_kernel kp__relu_cuda = {reinterpret_cast<const void *>(kp_relu_kernel)};
