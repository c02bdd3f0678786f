/* The relu module's descriptors, shared by its host code and its kernel file. */
#ifndef KPIPE_RELU_IMPL_H
#define KPIPE_RELU_IMPL_H

#include <stdint.h>

/* Fixed after setup; uploaded once at warmup. */
typedef struct kp__relu_static {
    float *output;
    int64_t max_size; /* the grid covers this many */
} kp__relu_static;

/* Rewritten each tick; uploaded with every other module's in one copy. */
typedef struct kp__relu_dynamic {
    const float *input;
    int64_t size; /* this tick's elements (<= max_size) */
} kp__relu_dynamic;

/* The kernel's parameters: where the descriptors live on the device. */
typedef struct kp__relu_params {
    const kp__relu_static *st;
    const kp__relu_dynamic *dyn;
} kp__relu_params;

#endif
