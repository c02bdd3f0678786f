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

/* The engine module's matrix view of n elements for cublasSgeam: rows the
 * largest divisor of n not above max(1024, sqrt(n)), many rows per column. */
static inline void hand_shape(int64_t n, int *rows, int *cols) {
    int64_t limit = 1024, r = 1;
    while ((limit + 1) * (limit + 1) <= n) limit++;
    if (limit > n) limit = n;
    for (int64_t d = limit; d >= 1; d--)
        if (n % d == 0) {
            r = d;
            break;
        }
    if (r < 32) r = n;
    *rows = (int)r;
    *cols = (int)(n / r);
}

#endif
