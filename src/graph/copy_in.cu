// The input copy of the graph cache as the first node of its graphs: one
// row of blocks per run (blockIdx.y), the run's units over the row.
#include <stdint.h>

#include "copy-impl.h"
#include "kpipe/device.h"

template <typename T> __device__ void kp__copy_units(char *dst, const char *src, uint64_t units) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step)
        reinterpret_cast<T *>(dst)[i] = reinterpret_cast<const T *>(src)[i];
}

__global__ void kp_copy_in_kernel(kp__copy_in_params p) {
    for (uint64_t r = blockIdx.y; r < p.runs; r += gridDim.y) {
        int64_t off = 0;
        uint64_t rem = r;
        for (int k = p.outer - 1; k >= 0; k--) {
            off += (int64_t)(rem % (uint64_t)p.shape[k]) * p.pitch[k];
            rem /= (uint64_t)p.shape[k];
        }
        char *dst = p.dst + off;
        const char *src = p.src + r * p.run_bytes;
        switch (p.vec) {
        case 16: kp__copy_units<int4>(dst, src, p.run_bytes / 16); break;
        case 4: kp__copy_units<uint32_t>(dst, src, p.run_bytes / 4); break;
        default: kp__copy_units<uint8_t>(dst, src, p.run_bytes); break;
        }
    }
}

extern "C" const kp_device_kernel kp__copy_in_cuda = {
    reinterpret_cast<const void *>(kp_copy_in_kernel)};
