/* The hand-written baseline: ReLU(a + b) with cuBLAS and one kernel, no framework. */
#ifndef KP_BENCH_HAND_H
#define KP_BENCH_HAND_H

#include <stdint.h>

typedef struct hand_relu_static {
    float *output;
    int64_t size;
} hand_relu_static;
typedef struct hand_relu_dynamic {
    const float *input;
} hand_relu_dynamic;
typedef struct hand_relu_params {
    const hand_relu_static *st;
    const hand_relu_dynamic *dyn;
} hand_relu_params;

#ifdef __cplusplus
extern "C"
#endif
    const void *
    hand_relu_fn(void);

#endif
