/* Shared by the built-in modules. Modules see the library as a program
 * does -- the public headers up to the pipeline's, the layer below them
 * (tests/layering.py) -- plus core's internal helpers. */
#ifndef KPIPE_MODULES_IMPL_H
#define KPIPE_MODULES_IMPL_H

#include "kpipe/pipeline.h"
#include "../core/core-impl.h"

/* Elements a 1-D module accepts: 1 .. 2^31. */
#define KP__MAX_ELEMENTS ((int64_t)1 << 31)

/* Reads the "size" parameter ("N", or "max:N" for a dynamic size) and
 * checks its range. */
kp_status kp__param_size(const kp_module_env *env, int64_t *n, bool *dynamic);

/* A module over pictures stacked along dimension 0 (its "batch"): how
 * many the tick's input holds (KP_ERR_MISMATCH unless whole pictures of
 * in_rows), and its one output set to `out`, `out_desc` with as many
 * pictures of out_rows. */
kp_status kp__pictures_io(const kp_module_io *io, int64_t in_rows, int64_t out_rows, void *out,
                          const kp_tensor_desc *out_desc, int64_t *frames);

/* Defines kp__builtin_<type>(), which registers a built-in module type
 * through kp_module_register as a program would; `on_load` (or NULL) runs
 * first, to note libraries. CMake's kp_builtin_module() lists the type in
 * the generated builtin_modules.c, whose table the registry calls once,
 * before its first use: a static link keeps every built-in module because
 * that table names it, with no linker flags. */
#define KP__BUILTIN_MODULE(type, create, on_load)                          \
    kp_status kp__builtin_##type(void);                                    \
    kp_status kp__builtin_##type(void) {                                   \
        void (*load_)(void) = on_load;                                     \
        if (load_) load_();                                                \
        return kp_module_register(#type, create);                          \
    }

/* The vendor computation behind the engine module: c = a + b over n floats.
 * A backend is opaque to the framework; everything it enqueues must be
 * capturable into a graph and allocate nothing once created. cuBLAS is the
 * CUDA backend; a TensorRT backend (enqueueV3 on the stream, device memory
 * from the workspace) has the same shape. */
typedef struct kp__engine_backend_i {
    /* Prepares n-element adds on `dev`; reports the workspace it wants. */
    kp_status (*create)(kp_device_t dev, int64_t n, void **ctx, size_t *workspace_bytes);
    /* Hands over the workspace (inside the pipeline arena). */
    kp_status (*set_workspace)(void *ctx, void *ws, size_t bytes);
    /* Enqueues c = a + b over n (<= the created size) elements on `s`. */
    kp_status (*enqueue)(void *ctx, kp_stream_t s, const float *a, const float *b, float *c,
                         int64_t n);
    void (*destroy)(void *ctx);
    /* Optional: notes the vendor library's version with kp_library_register. */
    void (*note_library)(void);
} kp__engine_backend_i;

extern const kp__engine_backend_i kp__engine_cpu;
#ifdef KP_HAVE_CUDA
extern const kp__engine_backend_i kp__engine_cublas;
#endif

#endif
