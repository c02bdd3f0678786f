#include <time.h>

#include "test_kernels.h"

#ifdef KP_HAVE_CUDA
const void *kpt_axpy_cuda(void);
const void *kpt_affine_cuda(void);
const void *kpt_spin_cuda(void);
#define KPT_CUDA(fn) fn
#else
#define KPT_CUDA(fn) NULL
#endif

static void axpy_cpu(const void *pp, kp_dim3 g, kp_dim3 b) {
    const kpt_axpy_params *p = pp;
    for (int i = 0; i < p->n; i++) p->y[i] = p->a * p->x[i] + p->y[i];
}

static void affine_cpu(const void *pp, kp_dim3 g, kp_dim3 b) {
    const kpt_affine_params *p = pp;
    for (int i = 0; i < p->n; i++) p->y[i] = p->y[i] * p->a + p->b;
}

static void spin_cpu(const void *pp, kp_dim3 g, kp_dim3 b) {
    const kpt_spin_params *p = pp;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < p->ns);
    for (int i = 0; i < p->n; i++) p->out[i] = p->value + (float)i;
}

const kp_kernel kpt_axpy = {"test_axpy", axpy_cpu, KPT_CUDA(kpt_axpy_cuda), sizeof(kpt_axpy_params)};
const kp_kernel kpt_affine = {"test_affine", affine_cpu, KPT_CUDA(kpt_affine_cuda),
                              sizeof(kpt_affine_params)};
const kp_kernel kpt_spin = {"test_spin", spin_cpu, KPT_CUDA(kpt_spin_cuda), sizeof(kpt_spin_params)};
const kp_kernel kpt_cpu_only = {"test_cpu_only", affine_cpu, NULL, sizeof(kpt_affine_params)};

kp_launch kpt_launch_1d(const kp_kernel *k, const void *params, int n) {
    kp_launch l = {k, {(uint32_t)((n + 255) / 256), 1, 1}, {256, 1, 1}, 0, params};
    if (l.grid.x == 0) l.grid.x = 1;
    return l;
}
