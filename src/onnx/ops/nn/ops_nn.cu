// The neural-network family's cuda kernels. Element kernels are grid-stride
// loops over nn-kernels.h's per-element functions, the same text the host
// forms in ops_nn.c run; the plane kernel reduces one (image, channel)
// plane per block for the global pools and InstanceNormalization.
#include "nn-kernels.h"

#define KP__NN_ELEMENT(name, type, count, fn)                                              \
    __global__ void __launch_bounds__(KP__OX_THREADS, 4)                                   \
        kp__ox_##name##_kernel(const __grid_constant__ type p) {                           \
        const int64_t n = (count);                                                         \
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;            \
             i += (int64_t)gridDim.x * blockDim.x)                                         \
            fn(&p, i);                                                                     \
    }                                                                                      \
    extern "C" const kp_device_kernel kp__ox_##name##_cuda = {                             \
        reinterpret_cast<const void *>(kp__ox_##name##_kernel)};

KP__NN_ELEMENT(bias, kp__ox_bias_params, p.n, kp__ox_bias_at)
KP__NN_ELEMENT(fill, kp__ox_fill_params, p.n, kp__ox_fill_at)
KP__NN_ELEMENT(im2col, kp__ox_im2col_params, p.w.c * kp__ox_win_kk(&p.w) * p.ncols,
               kp__ox_im2col_item)
KP__NN_ELEMENT(col2im, kp__ox_col2im_params, p.w.c * kp__ox_win_in_size(&p.w), kp__ox_col2im_item)
KP__NN_ELEMENT(pool, kp__ox_pool_params, p.n, kp__ox_pool_at)
KP__NN_ELEMENT(bn, kp__ox_bn_params, p.n, kp__ox_bn_at)
KP__NN_ELEMENT(lrn, kp__ox_lrn_params, p.n, kp__ox_lrn_at)
KP__NN_ELEMENT(resize, kp__ox_resize_params, p.n, kp__ox_resize_at)

// The block's combined value of every thread's v (sum, or a max that
// keeps NaN), visible to all threads. blockDim.x is KP__OX_THREADS.
static __device__ float kp__block_reduce(float v, bool max, float *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float a = red[threadIdx.x], b = red[threadIdx.x + s];
            red[threadIdx.x] = max ? (b > a || b != b ? b : a) : a + b;
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

__global__ void kp__ox_plane_kernel(const __grid_constant__ kp__ox_plane_params p) {
    __shared__ float red[KP__OX_THREADS];
    const int64_t q = blockIdx.x;
    const float *x = p.x + q * p.size;
    if (p.mode == KP__OX_PLANE_MAX) {
        float m = -INFINITY;
        for (int64_t i = threadIdx.x; i < p.size; i += blockDim.x) m = x[i] > m || x[i] != x[i] ? x[i] : m;
        m = kp__block_reduce(m, true, red);
        if (threadIdx.x == 0) p.y[q] = m;
        return;
    }
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < p.size; i += blockDim.x) s += x[i];
    s = kp__block_reduce(s, false, red);
    const float mean = p.size ? s / (float)p.size : 0.0f;
    if (p.mode == KP__OX_PLANE_AVG) {
        if (threadIdx.x == 0) p.y[q] = mean;
        return;
    }
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < p.size; i += blockDim.x) v += (x[i] - mean) * (x[i] - mean);
    v = kp__block_reduce(v, false, red);
    const float var = p.size ? v / (float)p.size : 0.0f;
    float *y = p.y + q * p.size;
    for (int64_t i = threadIdx.x; i < p.size; i += blockDim.x)
        y[i] = kp__ox_inorm_apply(&p, q, x[i], mean, var);
}

extern "C" const kp_device_kernel kp__ox_plane_cuda = {
    reinterpret_cast<const void *>(kp__ox_plane_kernel)};
