/* Kernels used by the tests, each with a cpu and a cuda form. */
#ifndef KP_TEST_KERNELS_H
#define KP_TEST_KERNELS_H

#include "kpipe/device.h"

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
