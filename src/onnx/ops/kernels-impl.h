/* What the engine's kernels share between their host forms (ops_*.c, C11)
 * and their cuda forms (ops_*.cu, CUDA C++): this header includes nothing
 * that either language cannot read. A kernel family keeps its parameter
 * structs and its per-element functions (KP__HD static inline) in a header
 * of its own that both its .c and its .cu include, so the host and the
 * device compute the same thing from one text. */
#ifndef KPIPE_ONNX_KERNELS_IMPL_H
#define KPIPE_ONNX_KERNELS_IMPL_H

#include <stdint.h>

#include "kpipe/device.h"
#include "kpipe/tensor.h"

/* kp__ox_launch's geometry: on cuda, KP__OX_THREADS threads a block and
 * enough blocks (at most KP__OX_MAX_BLOCKS) for a grid-stride loop
 *     for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
 *          i += (int64_t)gridDim.x * blockDim.x)
 * on the host, blocks of KP__OX_HOST_ITEMS items, spread with
 * kp_host_block_span(n, grid, first, n_blocks, &lo, &hi). */
#define KP__OX_THREADS 256
#define KP__OX_MAX_BLOCKS 65535
#define KP__OX_HOST_ITEMS 65536

#if defined(__CUDACC__)
#define KP__HD __host__ __device__
#else
#define KP__HD
#endif

/* Strided index arithmetic shared by the kernels: an element's linear index
 * over `shape` to an offset through `strides`. */
typedef struct kp__ox_nd {
    int ndim;
    int64_t shape[KP_MAX_DIMS];
    int64_t strides[KP_MAX_DIMS]; /* in elements; 0 broadcasts; may be negative */
} kp__ox_nd;

static inline KP__HD int64_t kp__ox_nd_offset(const kp__ox_nd *d, int64_t linear) {
    int64_t off = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        int64_t s = d->shape[k];
        int64_t q = linear / s;
        off += (linear - q * s) * d->strides[k];
        linear = q;
    }
    return off;
}


#endif
