// The reduction and normalisation kernels on CUDA. With a thread per row,
// each thread runs reduce-kernels.h's per-row function, as the host does.
// With a block per row (long contiguous rows, or too few rows to fill the
// device), the block's threads stride through the row together and combine
// their partial results through warp shuffles and shared memory; the
// arithmetic on each element and the final step come from the same header.
#include <stdint.h>

#include "reduce-kernels.h"

#define KP__OX_WARPS (KP__OX_THREADS / 32)

// Every row this thread owns (a thread per row), or this block owns (a
// block per row).
#define KP__OX_THREAD_ROWS(i, n)                                              \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)
#define KP__OX_BLOCK_ROWS(i, n) for (int64_t i = blockIdx.x; i < (n); i += gridDim.x)
// This thread's elements of a block's row.
#define KP__OX_BLOCK_ELEMS(j, n) for (int64_t j = threadIdx.x; j < (n); j += blockDim.x)

struct kp__ox_fcomb {
    int comb;
    __device__ float operator()(float a, float b) const { return kp__ox_red_combine(comb, a, b); }
};

struct kp__ox_imin {
    __device__ int64_t operator()(int64_t a, int64_t b) const { return b < a ? b : a; }
};

// Combines every thread's v under op; all threads get the result. The
// block must have a multiple of 32 threads, at most 32 warps' worth of
// slots in sh (KP__OX_WARPS + 1). Two barriers make back-to-back calls on
// one sh safe: a thread writes sh again only after the next call's first
// barrier, by which time every thread has read this call's result.
template <typename T, typename Op>
__device__ static T kp__ox_block_all(T v, Op op, T identity, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sh[lane] : identity;
        for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
        if (lane == 0) sh[KP__OX_WARPS] = v;
    }
    __syncthreads();
    return sh[KP__OX_WARPS];
}

__device__ static float kp__ox_block_combine(float v, int comb, float *sh) {
    return kp__ox_block_all(v, kp__ox_fcomb{comb}, kp__ox_red_identity(comb), sh);
}

// Reductions of float rows, a block each.
__device__ static void kp__ox_reduce_block(const kp__ox_reduce_params &p) {
    __shared__ float sh[KP__OX_WARPS + 1];
    const kp__ox_rows *r = &p.rows;
    const int comb = kp__ox_red_combiner(p.op);
    KP__OX_BLOCK_ROWS(row, r->n_rows) {
        const float *in = (const float *)p.in + kp__ox_rows_base(r, row);
        float shift = 0.0f;
        if (p.op == KP__OX_R_LOGSUMEXP) {
            float m = -INFINITY;
            KP__OX_BLOCK_ELEMS(j, r->n_red) {
                m = kp__ox_red_combine(KP__OX_C_MAX, m, in[kp__ox_rows_elem(r, j)]);
            }
            shift = kp__ox_block_combine(m, KP__OX_C_MAX, sh);
        }
        const bool inf_shift = shift - shift != 0.0f;
        float acc = kp__ox_red_identity(comb);
        if (comb == KP__OX_C_SUM && !inf_shift) {
            kp__ox_ksum k = {0.0f, 0.0f};
            KP__OX_BLOCK_ELEMS(j, r->n_red) {
                kp__ox_ksum_add(&k, kp__ox_red_map(p.op, in[kp__ox_rows_elem(r, j)], shift));
            }
            acc = kp__ox_ksum_value(&k);
        } else if (comb != KP__OX_C_SUM) {
            KP__OX_BLOCK_ELEMS(j, r->n_red) {
                acc = kp__ox_red_combine(comb, acc, in[kp__ox_rows_elem(r, j)]);
            }
        }
        acc = kp__ox_block_combine(acc, comb, sh);
        if (threadIdx.x == 0)
            ((float *)p.out)[row] =
                inf_shift ? shift : kp__ox_red_final(p.op, acc, r->n_red, shift);
    }
}

__global__ void kp__ox_reduce_kernel(kp__ox_reduce_params p) {
    if (p.block_rows) {
        kp__ox_reduce_block(p);
        return;
    }
    KP__OX_THREAD_ROWS(row, p.rows.n_rows) { kp__ox_reduce_row(&p, row); }
}

__global__ void kp__ox_arg_kernel(kp__ox_arg_params p) {
    KP__OX_THREAD_ROWS(row, p.rows.n_rows) { kp__ox_arg_row(&p, row); }
}

// Softmax, LogSoftmax and Hardmax, a block per row: the maximum (and for
// Hardmax its first position), then the sum of exponentials, then the
// outputs.
__device__ static void kp__ox_softmax_block(const kp__ox_softmax_params &p) {
    __shared__ float sh[KP__OX_WARPS + 1];
    __shared__ int64_t shi[KP__OX_WARPS + 1];
    const kp__ox_rows *r = &p.rows;
    const int64_t n = r->n_red;
    KP__OX_BLOCK_ROWS(row, r->n_rows) {
        const int64_t base = kp__ox_rows_base(r, row);
        float m = -INFINITY, s = 0.0f;
        int64_t at = n;
        kp__ox_ksum part = {0.0f, 0.0f};
        KP__OX_BLOCK_ELEMS(j, n) {
            float v = p.in[base + kp__ox_rows_elem(r, j)];
            if (v > m || at == n) { // this thread's first maximum
                m = v;
                at = j;
            }
        }
        const float mx = kp__ox_block_combine(m, KP__OX_C_MAX, sh);
        if (p.kind == KP__OX_HARDMAX) {
            at = kp__ox_block_all(m == mx ? at : n, kp__ox_imin{}, n, shi);
        } else {
            KP__OX_BLOCK_ELEMS(j, n) {
                kp__ox_ksum_add(&part, expf(p.in[base + kp__ox_rows_elem(r, j)] - mx));
            }
            s = kp__ox_block_combine(kp__ox_ksum_value(&part), KP__OX_C_SUM, sh);
        }
        KP__OX_BLOCK_ELEMS(j, n) { kp__ox_softmax_put(&p, base, j, mx, s, at); }
    }
}

__global__ void kp__ox_softmax_kernel(kp__ox_softmax_params p) {
    if (p.block_rows) {
        kp__ox_softmax_block(p);
        return;
    }
    KP__OX_THREAD_ROWS(row, p.rows.n_rows) { kp__ox_softmax_row(&p, row); }
}

// The normalisations, a block per row: the sum of terms, for the mean
// based ones the sum of squared deviations, then the outputs.
__device__ static void kp__ox_norm_block(const kp__ox_norm_params &p) {
    __shared__ float sh[KP__OX_WARPS + 1];
    const kp__ox_rows *r = &p.rows;
    const bool centred = p.kind == KP__OX_N_LAYER || p.kind == KP__OX_N_MVN;
    KP__OX_BLOCK_ROWS(row, r->n_rows) {
        const int64_t base = kp__ox_rows_base(r, row);
        kp__ox_ksum ks = {0.0f, 0.0f}, kq = {0.0f, 0.0f};
        float sum, sq = 0.0f, a, b;
        KP__OX_BLOCK_ELEMS(j, r->n_red) {
            kp__ox_ksum_add(&ks, kp__ox_norm_term(p.kind, p.in[base + kp__ox_rows_elem(r, j)]));
        }
        sum = kp__ox_block_combine(kp__ox_ksum_value(&ks), KP__OX_C_SUM, sh);
        if (centred) {
            const float mean = sum / (float)r->n_red;
            KP__OX_BLOCK_ELEMS(j, r->n_red) {
                float d = p.in[base + kp__ox_rows_elem(r, j)] - mean;
                kp__ox_ksum_add(&kq, d * d);
            }
            sq = kp__ox_block_combine(kp__ox_ksum_value(&kq), KP__OX_C_SUM, sh);
        }
        kp__ox_norm_stats(&p, sum, sq, &a, &b);
        KP__OX_BLOCK_ELEMS(j, r->n_red) { kp__ox_norm_put(&p, row, base, j, a, b); }
    }
}

__global__ void kp__ox_norm_kernel(kp__ox_norm_params p) {
    if (p.block_rows) {
        kp__ox_norm_block(p);
        return;
    }
    KP__OX_THREAD_ROWS(row, p.rows.n_rows) { kp__ox_norm_row(&p, row); }
}

__global__ void kp__ox_cumsum_kernel(kp__ox_cumsum_params p) {
    KP__OX_THREAD_ROWS(row, p.rows.n_rows) { kp__ox_cumsum_row(&p, row); }
}

extern "C" const kp_device_kernel kp__ox_reduce_cuda = {
    reinterpret_cast<const void *>(kp__ox_reduce_kernel)};
extern "C" const kp_device_kernel kp__ox_arg_cuda = {
    reinterpret_cast<const void *>(kp__ox_arg_kernel)};
extern "C" const kp_device_kernel kp__ox_softmax_cuda = {
    reinterpret_cast<const void *>(kp__ox_softmax_kernel)};
extern "C" const kp_device_kernel kp__ox_norm_cuda = {
    reinterpret_cast<const void *>(kp__ox_norm_kernel)};
extern "C" const kp_device_kernel kp__ox_cumsum_cuda = {
    reinterpret_cast<const void *>(kp__ox_cumsum_kernel)};
