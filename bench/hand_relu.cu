// The hand-written baseline's ReLU kernel: the same descriptor-driven work as
// the relu module, written without the framework.
#include <stdint.h>

#include "hand.h"

__global__ void hand_relu_kernel(hand_relu_params p) {
    const float *in = p.dyn->input;
    float *out = p.st->output;
    const int64_t n = p.st->size, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15) == 0) {
        const float4 *in4 = reinterpret_cast<const float4 *>(in);
        float4 *out4 = reinterpret_cast<float4 *>(out);
        for (int64_t j = i; j < n >> 2; j += stride) {
            float4 v = in4[j];
            v.x = fmaxf(v.x, 0.0f);
            v.y = fmaxf(v.y, 0.0f);
            v.z = fmaxf(v.z, 0.0f);
            v.w = fmaxf(v.w, 0.0f);
            out4[j] = v;
        }
        done = (n >> 2) << 2;
    }
    for (int64_t j = done + i; j < n; j += stride) out[j] = fmaxf(in[j], 0.0f);
}

extern "C" const void *hand_relu_fn(void) {
    return reinterpret_cast<const void *>(hand_relu_kernel);
}
