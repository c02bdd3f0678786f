/* Shared by the built-in modules. */
#ifndef KPIPE_MODULES_IMPL_H
#define KPIPE_MODULES_IMPL_H

#include "../pipeline/pipeline-impl.h"

/* Elements a 1-D module accepts: 1 .. 2^31. */
#define KP__MAX_ELEMENTS ((int64_t)1 << 31)

/* Reads the "size" parameter and checks its range. */
kp_status kp__param_size(const kp_module_env *env, int64_t *n);

/* The vendor computation behind the engine module: c = a + b over n floats.
 * A backend is opaque to the framework; everything it enqueues must be
 * capturable into a graph and allocate nothing once created. cuBLAS is the
 * CUDA backend; a TensorRT backend (enqueueV3 on the stream, device memory
 * from the workspace) has the same shape. */
typedef struct kp__engine_backend_i {
    const char *name;
    /* Prepares n-element adds on `dev`; reports the workspace it wants. */
    kp_status (*create)(kp_device_t dev, int64_t n, void **ctx, size_t *workspace_bytes);
    /* Hands over the workspace (inside the pipeline arena). */
    kp_status (*set_workspace)(void *ctx, void *ws, size_t bytes);
    /* Enqueues c = a + b on `s`. */
    kp_status (*enqueue)(void *ctx, kp_stream_t s, const float *a, const float *b, float *c);
    void (*destroy)(void *ctx);
} kp__engine_backend_i;

extern const kp__engine_backend_i kp__engine_cpu;
#ifdef KP_HAVE_CUDA
extern const kp__engine_backend_i kp__engine_cublas;
#endif

#endif
