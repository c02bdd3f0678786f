// The scale_clamp kernel: addresses, size and constants come from the
// module's descriptors, so one launch serves every tick.
#include "scale_clamp.h"

__global__ void scale_clamp_kernel(scale_clamp_params p) {
    const scale_clamp_static st = *p.st;
    const float *in = p.dyn->input;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < st.n;
         i += (int64_t)gridDim.x * blockDim.x)
        st.output[i] = fminf(fmaxf(in[i] * st.scale, st.lo), st.hi);
}

extern "C" const kp_device_kernel scale_clamp_cuda = {(const void *)scale_clamp_kernel};
