// The fill kernel: writes one element's bit pattern (1, 2, 4 or 8 bytes) n times.
#include <stdint.h>

#include "fill-impl.h"
#include "kpipe/device.h"

__global__ void kp_fill_kernel(kp__fill_params p) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += stride) {
        switch (p.esize) {
        case 1: static_cast<uint8_t *>(p.dst)[i] = (uint8_t)p.pattern; break;
        case 2: static_cast<uint16_t *>(p.dst)[i] = (uint16_t)p.pattern; break;
        case 4: static_cast<uint32_t *>(p.dst)[i] = (uint32_t)p.pattern; break;
        default: static_cast<uint64_t *>(p.dst)[i] = p.pattern; break;
        }
    }
}

extern "C" const kp_device_kernel kp__fill_cuda = {reinterpret_cast<const void *>(kp_fill_kernel)};
