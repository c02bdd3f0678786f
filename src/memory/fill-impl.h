/* Parameters of the fill kernel, shared by its host and CUDA forms. */
#ifndef KPIPE_FILL_IMPL_H
#define KPIPE_FILL_IMPL_H

#include <stdint.h>

typedef struct kp__fill_params {
    void *dst;
    uint64_t pattern; /* the element's bits, in its low bytes */
    int64_t n;
    int esize; /* 1, 2, 4 or 8 */
} kp__fill_params;

#endif
