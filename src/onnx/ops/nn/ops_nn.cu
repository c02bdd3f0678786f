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

// --- fp16 convolutions' staging and epilogue (onnx/half.c) -----------------------
// NCHW <-> NHWC goes through a KP__OX_TILE x KP__OX_TILE tile in shared
// memory, so both the reads and the writes are coalesced: the grid is
// (positions / tile, channels / tile, images), the block KP__OX_TILE x 8.
// Fewer channels than a tile go element by element on a 1-D grid. The
// launch (kp__ox_half_launch in ops_conv.c) makes the same choice.

__global__ void __launch_bounds__(KP__OX_TILE * 8)
    kp__ox_to_half_kernel(const __grid_constant__ kp__ox_to_half_params p) {
    __shared__ float tile[KP__OX_TILE][KP__OX_TILE + 1];
    if (p.cpad < KP__OX_TILE) { // few channels (an image's 3): element by element
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n;
             i += (int64_t)gridDim.x * blockDim.x)
            kp__ox_to_half_at(&p, i);
        return;
    }
    const int64_t q0 = (int64_t)blockIdx.x * KP__OX_TILE, c0 = (int64_t)blockIdx.y * KP__OX_TILE;
    const float *x = p.x + blockIdx.z * p.c * p.hw;
    uint16_t *y = p.y + blockIdx.z * p.cpad * p.hw;
    for (int r = threadIdx.y; r < KP__OX_TILE; r += blockDim.y) {
        const int64_t c = c0 + r, q = q0 + threadIdx.x;
        if (c < p.c && q < p.hw) tile[r][threadIdx.x] = x[c * p.hw + q];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < KP__OX_TILE; r += blockDim.y) {
        const int64_t q = q0 + r, c = c0 + threadIdx.x;
        if (c < p.cpad && q < p.hw)
            y[q * p.cpad + c] = c < p.c ? kp__f16_of(tile[threadIdx.x][r]) : (uint16_t)0;
    }
}

// f16 NHWC out, channels a multiple of 8, no f32 residual: 16 bytes a
// thread, in place.
static __device__ void kp__ox_epilogue16_x8(const kp__ox_epilogue16_params &p) {
    const int64_t n8 = p.n / 8;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n8;
         j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = (j * 8) % p.c;
        uint4 a = reinterpret_cast<const uint4 *>(p.acc)[j], z = make_uint4(0, 0, 0, 0);
        if (p.z16) z = reinterpret_cast<const uint4 *>(p.z16)[j];
        const uint16_t *av = reinterpret_cast<const uint16_t *>(&a);
        const uint16_t *zv = reinterpret_cast<const uint16_t *>(&z);
        uint4 out;
        uint16_t *ov = reinterpret_cast<uint16_t *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++)
            ov[k] = kp__f16_of(kp__ox_epilogue16_value(&p, kp__f32_of(av[k]), ch + k,
                                                       p.z16 ? kp__f32_of(zv[k]) : 0.0f));
        reinterpret_cast<uint4 *>(p.y16)[j] = out;
    }
}

// f32 NCHW out: the tile is read along channels and written along positions.
static __device__ void kp__ox_epilogue16_nchw(const kp__ox_epilogue16_params &p) {
    __shared__ float tile[KP__OX_TILE][KP__OX_TILE + 1];
    const int64_t img = p.c * p.hw, q0 = (int64_t)blockIdx.x * KP__OX_TILE;
    const int64_t c0 = (int64_t)blockIdx.y * KP__OX_TILE, base = blockIdx.z * img;
    for (int r = threadIdx.y; r < KP__OX_TILE; r += blockDim.y) {
        const int64_t q = q0 + r, c = c0 + threadIdx.x;
        if (c < p.c && q < p.hw) {
            const int64_t h = base + q * p.c + c;
            tile[threadIdx.x][r] = kp__f32_of(p.acc[h]) + (p.z16 ? kp__f32_of(p.z16[h]) : 0.0f);
        }
    }
    __syncthreads();
    for (int r = threadIdx.y; r < KP__OX_TILE; r += blockDim.y) {
        const int64_t c = c0 + r, q = q0 + threadIdx.x;
        if (c < p.c && q < p.hw) {
            const int64_t e = base + c * p.hw + q;
            const float z = p.z32 ? p.z32[e] : 0.0f;
            p.y32[e] = kp__ox_epilogue16_value(&p, tile[r][threadIdx.x], c, z);
        }
    }
}

__global__ void __launch_bounds__(KP__OX_THREADS)
    kp__ox_epilogue16_kernel(const __grid_constant__ kp__ox_epilogue16_params p) {
    if (!p.y16 && p.c >= KP__OX_TILE) {
        kp__ox_epilogue16_nchw(p);
    } else if (p.y16 && p.c % 8 == 0 && !p.z32) {
        kp__ox_epilogue16_x8(p);
    } else {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n;
             i += (int64_t)gridDim.x * blockDim.x)
            kp__ox_epilogue16_at(&p, i);
    }
}

extern "C" const kp_device_kernel kp__ox_to_half_cuda = {
    reinterpret_cast<const void *>(kp__ox_to_half_kernel)};
extern "C" const kp_device_kernel kp__ox_epilogue16_cuda = {
    reinterpret_cast<const void *>(kp__ox_epilogue16_kernel)};

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
