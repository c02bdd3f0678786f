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

/* The 8-module chain of bench_fusion, fused by hand:
 * y = clamp(scale(add(relu(mul(clamp(scale(add(x, b), 0.75), -2, 3), c)), b)...)) */
typedef struct bench_chain8_params {
    const float *x, *b, *c;
    float *out;
    int64_t n;
} bench_chain8_params;

#ifdef __cplusplus
extern "C" {
#endif
const void *bench_fused_fn(void);
const void *bench_tiny_fn(void);
const void *bench_relu_fn(void);
const void *bench_chain8_fn(void);
#ifdef __cplusplus
}
#endif
#endif
