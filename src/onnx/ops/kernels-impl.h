/* What the engine's kernels share between their host forms (ops_*.c, C11)
 * and their cuda forms (ops_*.cu, CUDA C++): this header includes nothing
 * that either language cannot read. A kernel family keeps its parameter
 * structs and its per-element functions (KP__HD static inline) in a header
 * of its own that both its .c and its .cu include, so the host and the
 * device compute the same thing from one text. */
#ifndef KPIPE_ONNX_KERNELS_IMPL_H
#define KPIPE_ONNX_KERNELS_IMPL_H

#include <math.h>
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
    if (linear >= 0 && linear <= (int64_t)UINT32_MAX) {
        /* 32-bit division where the index fits: several times cheaper on
         * cuda than 64-bit, which is most of a movement kernel's work */
        uint32_t l = (uint32_t)linear;
        for (int k = d->ndim - 1; k >= 0 && l; k--) {
            int64_t s = d->shape[k];
            uint32_t q = s > (int64_t)UINT32_MAX ? 0u : l / (uint32_t)s;
            off += (int64_t)(l - q * (uint32_t)s) * d->strides[k];
            l = q;
        }
        return off;
    }
    for (int k = d->ndim - 1; k >= 0; k--) {
        int64_t s = d->shape[k];
        int64_t q = linear / s;
        off += (linear - q * s) * d->strides[k];
        linear = q;
    }
    return off;
}

/* The activations a convolution's epilogue applies last (onnx/fuse.c
 * fuses the node that follows it), each as its own operator computes it:
 * a = LeakyRelu's or HardSigmoid's alpha, Clip's low bound; b =
 * HardSigmoid's beta, Clip's high bound; `slope` PRelu's per-channel
 * slope. Comparisons rather than fminf/fmaxf, so a NaN stays NaN. */
enum {
    KP__OX_ACT_NONE = 0,
    KP__OX_ACT_RELU,
    KP__OX_ACT_LEAKYRELU,
    KP__OX_ACT_PRELU,
    KP__OX_ACT_CLIP,
    KP__OX_ACT_SIGMOID,
    KP__OX_ACT_HARDSIGMOID,
    KP__OX_ACT_HARDSWISH,
    KP__OX_ACT_SILU, /* x * Sigmoid(x), as Mul(x, Sigmoid(x)) writes it */
};

static inline KP__HD float kp__ox_act_apply(int act, float v, float a, float b, float slope) {
    switch (act) {
    case KP__OX_ACT_RELU: return v < 0.0f ? 0.0f : v;
    case KP__OX_ACT_LEAKYRELU: return v < 0.0f ? a * v : v;
    case KP__OX_ACT_PRELU: return v < 0.0f ? v * slope : v;
    case KP__OX_ACT_CLIP: v = v < a ? a : v; return v > b ? b : v;
    case KP__OX_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case KP__OX_ACT_HARDSIGMOID:
    case KP__OX_ACT_HARDSWISH: {
        float h = a * v + b;
        h = h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
        return act == KP__OX_ACT_HARDSWISH ? v * h : h;
    }
    case KP__OX_ACT_SILU: return v * (1.0f / (1.0f + expf(-v)));
    default: return v;
    }
}

#endif
