/* The library check shared by the benchmark programs, CUDA or not: a
 * failure ends the run with the call and the library's detail. */
#ifndef KP_BENCH_CHECK_H
#define KP_BENCH_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "kpipe/kpipe.h"

#define KK(x)                                                                        \
    do {                                                                             \
        kp_status s_ = (x);                                                          \
        if (s_ != KP_OK) {                                                           \
            fprintf(stderr, "%s: %s: %s\n", #x, kp_status_str(s_), kp_last_error()); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif
