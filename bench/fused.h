/* The graph cache benchmark's kernels (fused.cu). */
#ifndef KP_BENCH_FUSED_H
#define KP_BENCH_FUSED_H

#include <stdint.h>

typedef struct bench_fused_params {
    const float *a, *b;
    float *out;
    int64_t n;
} bench_fused_params;

typedef struct bench_relu_params {
    const float *in;
    float *out;
    int64_t n;
} bench_relu_params;

typedef struct bench_tiny_params {
    const float *in;
    float *out;
    float k;
} bench_tiny_params;

#ifdef __cplusplus
extern "C" {
#endif
const void *bench_fused_fn(void);
const void *bench_tiny_fn(void);
const void *bench_relu_fn(void);
#ifdef __cplusplus
}
#endif
#endif
