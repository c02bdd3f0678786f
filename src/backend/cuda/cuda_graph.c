/* cuda graphs and stream capture: thin checked wrappers over the CUDA graph API. */
#include <string.h>

#include "cuda-impl.h"

static void kp__kparams(const kp_launch *l, const void *fn, void **args,
                        struct cudaKernelNodeParams *p) {
    memset(p, 0, sizeof *p);
    args[0] = (void *)l->params;
    p->func = (void *)fn;
    p->gridDim = (dim3){l->grid.x, l->grid.y, l->grid.z};
    p->blockDim = (dim3){l->block.x, l->block.y, l->block.z};
    p->sharedMemBytes = (unsigned)l->shared_bytes;
    p->kernelParams = args;
}

kp_status kp__cuda_graph_create(void *ctx, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaGraphCreate((cudaGraph_t *)out, 0));
    return KP_OK;
}

void kp__cuda_graph_destroy(void *ctx, void *g) { KP_CUDA_IGNORE(cudaGraphDestroy(g)); }

kp_status kp__cuda_graph_add_kernel(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                    const kp_launch *l, kp_graph_node_t *out) {
    const void *fn;
    void *args[1];
    struct cudaKernelNodeParams p;
    KP_CHECK(kp__cuda_func(l, &fn));
    kp__kparams(l, fn, args, &p);
    KP_CUDA_CHECK(
        cudaGraphAddKernelNode((cudaGraphNode_t *)out, g, (const cudaGraphNode_t *)deps, n, &p));
    return KP_OK;
}

/* The graph's roots are read before the node is added (it is one too),
 * then each waits for it: one edge per root. */
kp_status kp__cuda_graph_add_kernel_first(void *ctx, void *g, const kp_launch *l,
                                          kp_graph_node_t *out) {
    size_t n = 0;
    KP_CUDA_CHECK(cudaGraphGetRootNodes(g, NULL, &n));
    cudaGraphNode_t *roots = NULL;
    if (n && !(roots = kp__malloc(n * sizeof *roots)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "graph: no memory for %zu root nodes", n);
    kp_status st = KP_OK;
    if (n) KP_CUDA_CHECK_GOTO(cudaGraphGetRootNodes(g, roots, &n), st, done);
    KP_CHECK_GOTO(kp__cuda_graph_add_kernel(ctx, g, NULL, 0, l, out), st, done);
    for (size_t i = 0; i < n; i++)
        KP_CUDA_CHECK_GOTO(
            cudaGraphAddDependencies(g, (const cudaGraphNode_t *)out, &roots[i], NULL, 1), st,
            done);
done:
    kp__free(roots);
    return st;
}

kp_status kp__cuda_graph_add_memcpy(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                    void *dst, const void *src, size_t bytes,
                                    kp_graph_node_t *out) {
    KP_CUDA_CHECK(cudaGraphAddMemcpyNode1D((cudaGraphNode_t *)out, g, (const cudaGraphNode_t *)deps,
                                           n, dst, src, bytes, cudaMemcpyDefault));
    return KP_OK;
}

kp_status kp__cuda_graph_add_child(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   void *child, kp_graph_node_t *out) {
    KP_CUDA_CHECK(cudaGraphAddChildGraphNode((cudaGraphNode_t *)out, g,
                                             (const cudaGraphNode_t *)deps, n, child));
    return KP_OK;
}

kp_status kp__cuda_graph_add_empty(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   kp_graph_node_t *out) {
    KP_CUDA_CHECK(
        cudaGraphAddEmptyNode((cudaGraphNode_t *)out, g, (const cudaGraphNode_t *)deps, n));
    return KP_OK;
}

size_t kp__cuda_graph_node_count(void *ctx, void *g) {
    size_t n = 0;
    KP_CUDA_IGNORE(cudaGraphGetNodes(g, NULL, &n));
    return n;
}

kp_status kp__cuda_graph_instantiate(void *ctx, void *g, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaGraphInstantiate((cudaGraphExec_t *)out, g, 0));
    return KP_OK;
}

void kp__cuda_exec_destroy(void *ctx, void *ge) { KP_CUDA_IGNORE(cudaGraphExecDestroy(ge)); }

kp_status kp__cuda_exec_upload(void *ctx, void *ge, void *s) {
    KP_CUDA_CHECK(cudaGraphUpload(ge, s));
    return KP_OK;
}

kp_status kp__cuda_exec_launch(void *ctx, void *ge, void *s) {
    KP_CUDA_CHECK(cudaGraphLaunch(ge, s));
    return KP_OK;
}

kp_status kp__cuda_exec_set_kernel(void *ctx, void *ge, kp_graph_node_t node, const kp_launch *l) {
    const void *fn;
    void *args[1];
    struct cudaKernelNodeParams p;
    KP_CHECK(kp__cuda_func(l, &fn));
    kp__kparams(l, fn, args, &p);
    KP_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(ge, (cudaGraphNode_t)node, &p));
    return KP_OK;
}

kp_status kp__cuda_exec_set_memcpy(void *ctx, void *ge, kp_graph_node_t node, void *dst,
                                   const void *src, size_t bytes) {
    KP_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(ge, (cudaGraphNode_t)node, dst, src, bytes,
                                                     cudaMemcpyDefault));
    return KP_OK;
}

kp_status kp__cuda_exec_set_child(void *ctx, void *ge, kp_graph_node_t node, void *child) {
    KP_CUDA_CHECK(cudaGraphExecChildGraphNodeSetParams(ge, (cudaGraphNode_t)node, child));
    return KP_OK;
}

kp_status kp__cuda_exec_update(void *ctx, void *ge, void *g) {
    cudaGraphExecUpdateResultInfo info;
    memset(&info, 0, sizeof info);
    cudaError_t e = cudaGraphExecUpdate(ge, g, &info);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kp__error(KP_ERR_MISMATCH, "graph exec update failed: %s (update result %d)",
                         cudaGetErrorName(e), (int)info.result);
    }
    return KP_OK;
}

kp_status kp__cuda_begin_capture(void *ctx, void *s) {
    if (kp__cuda_is_capturing(ctx, s))
        return kp__error(KP_ERR_STATE, "begin capture: the stream is already capturing");
    /* Thread-local mode: other threads may keep allocating while we capture. */
    KP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    return KP_OK;
}

kp_status kp__cuda_end_capture(void *ctx, void *s, void **out) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    KP_CUDA_CHECK(cudaStreamIsCapturing(s, &cs));
    if (cs == cudaStreamCaptureStatusNone)
        return kp__error(KP_ERR_STATE, "end capture: the stream is not capturing");
    KP_CUDA_CHECK(cudaStreamEndCapture(s, (cudaGraph_t *)out));
    return KP_OK;
}

bool kp__cuda_is_capturing(void *ctx, void *s) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    KP_CUDA_IGNORE(cudaStreamIsCapturing(s, &st));
    return st != cudaStreamCaptureStatusNone;
}
