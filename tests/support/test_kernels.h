/* Kernels used by the tests, each with a cpu and a cuda form. */
#ifndef KP_TEST_KERNELS_H
#define KP_TEST_KERNELS_H

#include "kpipe/device.h"
#include "kpipe/tensor.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = a * x[i] + y[i] */
typedef struct kpt_axpy_params {
    float *y;
    const float *x;
    float a;
    int n;
} kpt_axpy_params;

/* y[i] = y[i] * a + b: the order of several launches changes the result. */
typedef struct kpt_affine_params {
    float *y;
    float a, b;
    int n;
} kpt_affine_params;

/* Spins for about `ns` nanoseconds (one thread), then writes out[i] = value + i. */
typedef struct kpt_spin_params {
    float *out;
    float value;
    int n;
    long long ns;
} kpt_spin_params;

/* Over two regions of one shape, 1 or 2 dimensions (f32; row-major order
 * of the shape): y = c + a y + b x; x may be NULL; a = 0 never reads y. */
typedef struct kpt_region_params {
    float *y;
    const float *x;
    int64_t shape[2], ys[2], xs[2]; /* a 1-D region: shape[0] = 1, strides 0 */
    int64_t yoff, xoff, n;
    float a, b, c;
} kpt_region_params;

/* The parameters for regions yd and xd (xd is ignored when x is NULL);
 * false when they are not 1 or 2 dimensions of one shape. */
static inline bool kpt_region_make(kpt_region_params *p, float *y, const kp_tensor_desc *yd,
                                   const float *x, const kp_tensor_desc *xd, float a, float b,
                                   float c) {
    if (yd->ndim < 1 || yd->ndim > 2 || (x && xd->ndim != yd->ndim)) return false;
    int lead = 2 - yd->ndim;
    *p = (kpt_region_params){y, x, {1, 1}, {0, 0}, {0, 0}, yd->offset, x ? xd->offset : 0,
                             1, a, b,      c};
    for (int k = 0; k < yd->ndim; k++) {
        if (x && xd->shape[k] != yd->shape[k]) return false;
        p->shape[lead + k] = yd->shape[k];
        p->ys[lead + k] = yd->strides[k];
        p->xs[lead + k] = x ? xd->strides[k] : 0;
        p->n *= yd->shape[k];
    }
    return true;
}

#ifdef __CUDACC__
__host__ __device__
#endif
    static inline void
    kpt_region_item(const kpt_region_params *p, int64_t i) {
    const int64_t r = i / p->shape[1], q = i % p->shape[1];
    float *y = p->y + p->yoff + r * p->ys[0] + q * p->ys[1];
    float v = p->c;
    if (p->a != 0.0f) v += p->a * *y; /* a = 0: y is written, never read */
    if (p->x) v += p->b * p->x[p->xoff + r * p->xs[0] + q * p->xs[1]];
    *y = v;
}

extern const kp_kernel kpt_region;
extern const kp_kernel kpt_axpy;
extern const kp_kernel kpt_affine;
extern const kp_kernel kpt_spin;
extern const kp_kernel kpt_cpu_only; /* same as affine, no cuda form */

/* Registers the test backend "cpu4" (backend_cpu4.c). */
kp_status kpt_backend_cpu4_register(void);

/* A launch covering n elements with 256-thread blocks. */
kp_launch kpt_launch_1d(const kp_kernel *k, const void *params, int n);

#ifdef __cplusplus
}
#endif
#endif
