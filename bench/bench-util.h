/* Checks shared by the benchmark programs: a failure ends the run with the
 * call and the reason. */
#ifndef KP_BENCH_UTIL_H
#define KP_BENCH_UTIL_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "kpipe/kpipe.h"

#define CK(x)                                                        \
    do {                                                             \
        cudaError_t e_ = (x);                                        \
        if (e_ != cudaSuccess) {                                     \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
            exit(1);                                                 \
        }                                                            \
    } while (0)

#define KK(x)                                                                        \
    do {                                                                             \
        kp_status s_ = (x);                                                          \
        if (s_ != KP_OK) {                                                           \
            fprintf(stderr, "%s: %s: %s\n", #x, kp_status_str(s_), kp_last_error()); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif
