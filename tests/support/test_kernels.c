#include <time.h>

#include "test_kernels.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kpt_axpy_cuda, kpt_affine_cuda, kpt_spin_cuda, kpt_region_cuda;
#define KPT_CUDA(k) {"cuda", &k},
#else
#define KPT_CUDA(k)
#endif

/* Host forms run the blocks they are given, as a GPU would: one thread per
 * element, 1-D grid. */
static void axpy_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kpt_axpy_params *p = pp;
    uint64_t end = (first + nb) * block.x;
    for (uint64_t i = first * block.x; i < end && i < (uint64_t)p->n; i++)
        p->y[i] = p->a * p->x[i] + p->y[i];
}

static void affine_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kpt_affine_params *p = pp;
    uint64_t end = (first + nb) * block.x;
    for (uint64_t i = first * block.x; i < end && i < (uint64_t)p->n; i++)
        p->y[i] = p->y[i] * p->a + p->b;
}

/* As the CUDA form: block 0 spins, then writes every element. */
static void spin_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kpt_spin_params *p = pp;
    if (first != 0) return;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < p->ns);
    for (int i = 0; i < p->n; i++) p->out[i] = p->value + (float)i;
}

static void region_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kpt_region_params *p = pp;
    uint64_t end = (first + nb) * block.x;
    for (uint64_t i = first * block.x; i < end && i < (uint64_t)p->n; i++)
        kpt_region_item(p, (int64_t)i);
}

const kp_kernel kpt_region = {
    "test_region",
    sizeof(kpt_region_params),
    {{"host", &(const kp_host_kernel){region_host}}, KPT_CUDA(kpt_region_cuda)}};
const kp_kernel kpt_axpy = {
    "test_axpy",
    sizeof(kpt_axpy_params),
    {{"host", &(const kp_host_kernel){axpy_host}}, KPT_CUDA(kpt_axpy_cuda)}};
const kp_kernel kpt_affine = {
    "test_affine",
    sizeof(kpt_affine_params),
    {{"host", &(const kp_host_kernel){affine_host}}, KPT_CUDA(kpt_affine_cuda)}};
const kp_kernel kpt_spin = {
    "test_spin",
    sizeof(kpt_spin_params),
    {{"host", &(const kp_host_kernel){spin_host}}, KPT_CUDA(kpt_spin_cuda)}};
const kp_kernel kpt_cpu_only = {
    "test_cpu_only", sizeof(kpt_affine_params), {{"host", &(const kp_host_kernel){affine_host}}}};

kp_launch kpt_launch_1d(const kp_kernel *k, const void *params, int n) {
    kp_launch l = {.kernel = k,
                   .grid = {(uint32_t)((n + 255) / 256), 1, 1},
                   .block = {256, 1, 1},
                   .params = params};
    if (l.grid.x == 0) l.grid.x = 1;
    return l;
}
