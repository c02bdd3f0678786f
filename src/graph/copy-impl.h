/* The copy of an input into its padded static buffer, as a kernel: its
 * parameters, shared by the host and CUDA forms (buffers.c, copy_in.cu).
 * Run r of `runs` is run_bytes contiguous bytes of the source at r *
 * run_bytes; it lands at the offset its index over the `outer` dimensions
 * (exact sizes `shape`, the padded layout's byte strides `pitch`) gives.
 * `vec` (16, 4 or 1) divides run_bytes, both addresses and every pitch. */
#ifndef KPIPE_GRAPH_COPY_IMPL_H
#define KPIPE_GRAPH_COPY_IMPL_H

#include <stdint.h>

#include "kpipe/tensor.h"

typedef struct kp__copy_in_params {
    char *dst;
    const char *src;
    uint64_t run_bytes, runs;
    int32_t outer, vec;
    int64_t shape[KP_MAX_DIMS], pitch[KP_MAX_DIMS];
} kp__copy_in_params;

/* A copy node's launch as last set on an exec (cache-impl.h: kp__gentry). */
typedef struct kp__copy_set {
    kp__copy_in_params prm;
    uint32_t grid[3];
} kp__copy_set;

#endif
