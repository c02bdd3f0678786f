/* The operator registry: the family tables joined, looked up by op type and
 * opset, and the one launch helper every operator enqueues through. */
#include <string.h>

#include "kpipe/onnx.h"
#include "onnx-impl.h"
#include "ops/nn/nn-impl.h"

static const kp__ox_op *const kp__ox_tables[] = {
    kp__ox_ops_elementwise, kp__ox_ops_movement, kp__ox_ops_shape,
    kp__ox_ops_nn,          kp__ox_ops_reduce,
};
#define KP__OX_N_TABLES (sizeof kp__ox_tables / sizeof kp__ox_tables[0])

/* Several entries may serve one op type for different opset ranges: the
 * one with the greatest `since` not above the model's opset wins. */
const kp__ox_op *kp__ox_op_find(const char *op_type, int opset) {
    const kp__ox_op *best = NULL;
    for (size_t t = 0; t < KP__OX_N_TABLES; t++)
        for (const kp__ox_op *o = kp__ox_tables[t]; o->name; o++)
            if (strcmp(o->name, op_type) == 0 && o->since <= opset &&
                (!best || o->since > best->since))
                best = o;
    return best;
}

/* Names listed once each, in table order. */
const char *kp__ox_op_name(size_t i) {
    size_t seen = 0;
    for (size_t t = 0; t < KP__OX_N_TABLES; t++)
        for (const kp__ox_op *o = kp__ox_tables[t]; o->name; o++) {
            bool dup = false;
            for (size_t u = 0; u <= t && !dup; u++)
                for (const kp__ox_op *p = kp__ox_tables[u]; p->name && p != o; p++)
                    if (strcmp(p->name, o->name) == 0) {
                        dup = true;
                        break;
                    }
            if (dup) continue;
            if (seen++ == i) return o->name;
        }
    return NULL;
}

kp_status kp__ox_launch_geom(const kp__ox_exec *x, const kp_kernel *k, kp_dim3 grid,
                             kp_dim3 block, size_t shared, uint64_t host_blocks,
                             const void *params) {
    if (x->host) {
        if (host_blocks == 0) return KP_OK;
        if (host_blocks > UINT32_MAX) host_blocks = UINT32_MAX;
        kp_dim3 hg = {(uint32_t)host_blocks, 1, 1}, hb = {1, 1, 1};
        if (x->fold) {
            /* folding runs at prepare, on the calling thread, over host memory */
            const kp_host_kernel *h = kp_kernel_find(k, "host");
            if (!h) return kp__error(KP_ERR_INTERNAL, "kernel %s has no host form", k->name);
            h->run(params, hg, hb, 0, host_blocks);
            return KP_OK;
        }
        kp_launch l = {.kernel = k, .grid = hg, .block = hb, .shared_bytes = 0, .params = params};
        return kp_launch_kernel(x->stream, &l);
    }
    if ((uint64_t)grid.x * grid.y * grid.z == 0) return KP_OK;
    kp_launch l = {.kernel = k, .grid = grid, .block = block, .shared_bytes = shared,
                   .params = params};
    return kp_launch_kernel(x->stream, &l);
}

kp_status kp__ox_launch(const kp__ox_exec *x, const kp_kernel *k, uint64_t n_items,
                        const void *params) {
    if (n_items == 0) return KP_OK;
    uint64_t host_blocks = (n_items + KP__OX_HOST_ITEMS - 1) / KP__OX_HOST_ITEMS;
    uint64_t blocks = (n_items + KP__OX_THREADS - 1) / KP__OX_THREADS;
    if (blocks > KP__OX_MAX_BLOCKS) blocks = KP__OX_MAX_BLOCKS;
    kp_dim3 grid = {(uint32_t)blocks, 1, 1}, block = {KP__OX_THREADS, 1, 1};
    return kp__ox_launch_geom(x, k, grid, block, 0, host_blocks, params);
}

const char *kp_onnx_op_name(size_t i) { return kp__ox_op_name(i); }

#ifndef KP_HAVE_CUDNN /* with cuDNN, ops_cudnn.c says which one */
const char *kp_onnx_conv_library(void) {
#ifdef KP_HAVE_CUDA
    return kp__ox_cudnn_info();
#else
    return "none: this build has no CUDA backend";
#endif
}
#endif
