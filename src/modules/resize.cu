// The resize kernels (resize-impl.h): one item per thread, grid-stride,
// over every picture. The module's reads its geometry and input from its
// descriptors; the direct one (kp_resize_nv12) takes them by value; the
// batch one (kp_resizer_nv12) reads a table of pictures on the device.
#include <stdint.h>

#include "kpipe/device.h"
#include "resize-impl.h"

__device__ static void kp_resize_all(const kp__resize_args &a) {
    const int64_t items = kp__resize_items(&a), n = items * a.frames;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        kp__resize_item(&a, i / items, i % items);
}

__global__ void kp_resize_module_kernel(kp__resize_params p) {
    kp__resize_args a = *p.st;
    a.in = p.dyn->input;
    a.frames = (int32_t)p.dyn->frames;
    kp_resize_all(a);
}

__global__ void kp_resize_direct_kernel(kp__resize_args a) { kp_resize_all(a); }

__global__ void kp_resize_many_kernel(kp__resize_many m) {
    const int64_t items = kp__resize_many_items(&m), n = items * m.n;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        kp__resize_many_item(&m, i / items, i % items);
}

extern "C" const kp_device_kernel kp__resize_module_cuda = {
    reinterpret_cast<const void *>(kp_resize_module_kernel)};
extern "C" const kp_device_kernel kp__resize_direct_cuda = {
    reinterpret_cast<const void *>(kp_resize_direct_kernel)};
extern "C" const kp_device_kernel kp__resize_many_cuda = {
    reinterpret_cast<const void *>(kp_resize_many_kernel)};
