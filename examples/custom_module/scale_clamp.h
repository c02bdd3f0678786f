/* The scale_clamp module's descriptors, shared by its host code and its
 * kernel file: y[i] = min(max(x[i] * scale, lo), hi). */
#ifndef SCALE_CLAMP_H
#define SCALE_CLAMP_H

#include <kpipe/kpipe.h>

/* Fixed once set up: uploaded at warmup. */
typedef struct scale_clamp_static {
    float *output;
    int64_t n;
    float scale, lo, hi;
} scale_clamp_static;

/* Rewritten each tick (the input's address), uploaded with every other
 * module's dynamic descriptor in one copy. */
typedef struct scale_clamp_dynamic {
    const float *input;
} scale_clamp_dynamic;

/* The kernel's one parameter: where the descriptors live on the device. */
typedef struct scale_clamp_params {
    const scale_clamp_static *st;
    const scale_clamp_dynamic *dyn;
} scale_clamp_params;

/* Registers the module type "scale_clamp" (scale_clamp.c). */
kp_status scale_clamp_register(void);

#endif
