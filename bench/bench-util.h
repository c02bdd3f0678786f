/* Checks shared by the benchmark programs: a failure ends the run with the
 * call and the reason. */
#ifndef KP_BENCH_UTIL_H
#define KP_BENCH_UTIL_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench-check.h"

#define CK(x)                                                        \
    do {                                                             \
        cudaError_t e_ = (x);                                        \
        if (e_ != cudaSuccess) {                                     \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
            exit(1);                                                 \
        }                                                            \
    } while (0)

#endif
