/* cuda backend internals: error mapping and the check macro. */
#ifndef KPIPE_CUDA_IMPL_H
#define KPIPE_CUDA_IMPL_H

#include <cuda_runtime_api.h>

#include "../backend-impl.h"

typedef struct kp__cuda_device {
    int ordinal;
    /* Private non-blocking stream for the synchronous copies: each is issued
     * here and waited for, so it has landed before the call returns, whatever
     * the source memory (cudaMemcpy from pageable memory returns once the
     * bytes are staged, and a device-to-device cudaMemcpy returns at once;
     * neither orders kpipe's non-blocking streams after it). */
    cudaStream_t copy;
} kp__cuda_device;

/* Maps a CUDA error to a status, records the detail, and clears CUDA's
 * sticky last error so the next call starts clean. */
kp_status kp__cuda_fail(cudaError_t err, const char *call, const char *file, int line);

#define KP_CUDA_CHECK(call)                                                               \
    do {                                                                                  \
        cudaError_t kp__e = (call);                                                       \
        if (kp__e != cudaSuccess) return kp__cuda_fail(kp__e, #call, __FILE__, __LINE__); \
    } while (0)

#define KP_CUDA_CHECK_GOTO(call, st, label)                         \
    do {                                                            \
        cudaError_t kp__e = (call);                                 \
        if (kp__e != cudaSuccess) {                                 \
            (st) = kp__cuda_fail(kp__e, #call, __FILE__, __LINE__); \
            goto label;                                             \
        }                                                           \
    } while (0)

/* Calls that may fail harmlessly (teardown, queries): the error is dropped
 * and CUDA's sticky last error cleared. */
#define KP_CUDA_IGNORE(call)                                 \
    do {                                                     \
        if ((call) != cudaSuccess) (void)cudaGetLastError(); \
    } while (0)

/* Makes the context's device current on this thread (cheap when it is). */
kp_status kp__cuda_enter(const kp__cuda_device *d);

/* Kernel function of a launch, or an error naming the kernel. */
kp_status kp__cuda_func(const kp_launch *l, const void **fn);

/* Run-time compilation (cuda_rtc.c). */
kp_status kp__cuda_rtc_compile(void *ctx, const char *source, const char *entry,
                               kp_device_kernel *out, kp_rtc_info *info);

/* Graph slots (cuda_graph.c). */
kp_status kp__cuda_graph_create(void *ctx, void **out);
void kp__cuda_graph_destroy(void *ctx, void *g);
kp_status kp__cuda_graph_add_kernel(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                    const kp_launch *l, kp_graph_node_t *out);
kp_status kp__cuda_graph_add_memcpy(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                    void *dst, const void *src, size_t bytes, kp_graph_node_t *out);
kp_status kp__cuda_graph_add_child(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   void *child, kp_graph_node_t *out);
kp_status kp__cuda_graph_add_kernel_first(void *ctx, void *g, const kp_launch *l,
                                          kp_graph_node_t *out);
kp_status kp__cuda_graph_add_empty(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   kp_graph_node_t *out);
size_t kp__cuda_graph_node_count(void *ctx, void *g);
kp_status kp__cuda_graph_instantiate(void *ctx, void *g, void **out);
void kp__cuda_exec_destroy(void *ctx, void *ge);
kp_status kp__cuda_exec_upload(void *ctx, void *ge, void *s);
kp_status kp__cuda_exec_launch(void *ctx, void *ge, void *s);
kp_status kp__cuda_exec_set_kernel(void *ctx, void *ge, kp_graph_node_t node, const kp_launch *l);
kp_status kp__cuda_exec_set_memcpy(void *ctx, void *ge, kp_graph_node_t node, void *dst,
                                   const void *src, size_t bytes);
kp_status kp__cuda_exec_set_child(void *ctx, void *ge, kp_graph_node_t node, void *child);
kp_status kp__cuda_exec_update(void *ctx, void *ge, void *g);
kp_status kp__cuda_begin_capture(void *ctx, void *s);
kp_status kp__cuda_end_capture(void *ctx, void *s, void **out);
bool kp__cuda_is_capturing(void *ctx, void *s);

#endif
