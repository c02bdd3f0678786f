/* The synthetic source's kernel, shared by its host and CUDA forms:
 * out[i] = ((seq * 31 + i * 7) mod 2001) - 1000, as float: integers, so
 * sums of a few of them are exact in float32 and a flow's results can be
 * checked exactly on any backend. */
#ifndef KPIPE_FLOW_PATTERN_IMPL_H
#define KPIPE_FLOW_PATTERN_IMPL_H

#include <stdint.h>

typedef struct kp__pattern_params {
    float *out;
    int64_t n;
    uint64_t seq;
} kp__pattern_params;

#ifdef __CUDACC__
__host__ __device__
#endif
    static inline float
    kp__pattern_value(uint64_t seq, int64_t i) {
    return (float)((int64_t)((seq * 31u + (uint64_t)i * 7u) % 2001u) - 1000);
}

#endif
