/* The engine's cpu backend: a host loop launched as a kernel, so it runs on
 * cpu streams and is captured into cpu graphs like any other work. */
#include "modules-impl.h"

typedef struct kp__add_params {
    const float *a, *b;
    float *c;
    int64_t n;
} kp__add_params;

static void kp__add_cpu(const void *pp, kp_dim3 g, kp_dim3 b) {
    const kp__add_params *p = pp;
    for (int64_t i = 0; i < p->n; i++) p->c[i] = p->a[i] + p->b[i];
}

static const kp_kernel kp__add_kernel = {"engine_add", kp__add_cpu, NULL, sizeof(kp__add_params)};

static kp_status kp__ecpu_create(kp_device_t dev, int64_t n, void **ctx, size_t *ws) {
    int64_t *state = kp__malloc(sizeof *state);
    if (!state) return kp__error(KP_ERR_OUT_OF_MEMORY, "engine (cpu): no memory");
    *state = n;
    *ctx = state;
    *ws = 0;
    return KP_OK;
}

static kp_status kp__ecpu_set_workspace(void *ctx, void *ws, size_t bytes) { return KP_OK; }

static kp_status kp__ecpu_enqueue(void *ctx, kp_stream_t s, const float *a, const float *b, float *c) {
    kp__add_params p = {a, b, c, *(int64_t *)ctx};
    kp_launch l = {&kp__add_kernel, {1, 1, 1}, {1, 1, 1}, 0, &p};
    return kp_launch_kernel(s, &l);
}

static void kp__ecpu_destroy(void *ctx) { kp__free(ctx); }

const kp__engine_backend_i kp__engine_cpu = {
    .name = "cpu loop",
    .create = kp__ecpu_create,
    .set_workspace = kp__ecpu_set_workspace,
    .enqueue = kp__ecpu_enqueue,
    .destroy = kp__ecpu_destroy,
};
