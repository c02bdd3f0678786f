#include "test_kernels.h"

__global__ void kpt_axpy_k(kpt_axpy_params p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.y[i] = p.a * p.x[i] + p.y[i];
}

__global__ void kpt_affine_k(kpt_affine_params p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) p.y[i] = p.y[i] * p.a + p.b;
}

/* Thread 0 of block 0 spins on the global timer, then the grid writes. */
__global__ void kpt_spin_k(kpt_spin_params p) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long t0 = 0, t = 0;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        while ((long long)(t - t0) < p.ns);
    }
    __syncthreads();
    /* one block writes all elements, after the spin */
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < p.n; i += blockDim.x) p.out[i] = p.value + (float)i;
}

__global__ void kpt_region_k(kpt_region_params p) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) kpt_region_item(&p, i);
}

extern "C" const kp_device_kernel kpt_region_cuda = {(const void *)kpt_region_k};
extern "C" const kp_device_kernel kpt_axpy_cuda = {(const void *)kpt_axpy_k};
extern "C" const kp_device_kernel kpt_affine_cuda = {(const void *)kpt_affine_k};
extern "C" const kp_device_kernel kpt_spin_cuda = {(const void *)kpt_spin_k};
