/* The engine's cpu backend: a host loop launched as a kernel, so it runs on
 * cpu streams and is captured into cpu graphs like any other work. */
#include "modules-impl.h"

typedef struct kp__add_params {
    const float *a, *b;
    float *c;
    int64_t n;
} kp__add_params;

static void kp__add_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n) {
    const kp__add_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) p->c[i] = p->a[i] + p->b[i];
}

static const kp_kernel kp__add_kernel = {
    "engine_add", sizeof(kp__add_params), {{"host", &(const kp_host_kernel){kp__add_host}}}};

static kp_status kp__ecpu_create(kp_device_t dev, int64_t n, void **ctx, size_t *ws) {
    int64_t *state = kp__malloc(sizeof *state);
    if (!state) return kp__error(KP_ERR_OUT_OF_MEMORY, "engine (cpu): no memory");
    *state = n;
    *ctx = state;
    *ws = 0;
    return KP_OK;
}

static kp_status kp__ecpu_set_workspace(void *ctx, void *ws, size_t bytes) { return KP_OK; }

static kp_status kp__ecpu_enqueue(void *ctx, kp_stream_t s, const float *a, const float *b,
                                  float *c, int64_t n) {
    kp__add_params p = {a, b, c, n};
    /* blocks of 64 Ki elements: several workers of a cpu device share them */
    uint32_t blocks = (uint32_t)((p.n + 65535) / 65536);
    kp_launch l = {
        .kernel = &kp__add_kernel, .grid = {blocks, 1, 1}, .block = {1, 1, 1}, .params = &p};
    return kp_launch_kernel(s, &l);
}

static void kp__ecpu_destroy(void *ctx) { kp__free(ctx); }

const kp__engine_backend_i kp__engine_cpu = {
    .create = kp__ecpu_create,
    .set_workspace = kp__ecpu_set_workspace,
    .enqueue = kp__ecpu_enqueue,
    .destroy = kp__ecpu_destroy,
};
