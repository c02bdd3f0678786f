/* "precision": "fp16": convolutions in fp16, on channels-last tensors.
 *
 * A model's values keep their f32 NCHW dtype and shape; what changes is
 * how the device holds some of them. After fusion (fuse.c) and before the
 * plan, this pass marks
 *   - every 2-D Conv whose weights are constant and read by convolutions
 *     of this kind alone: it runs as cuDNN's fp16 convolution with fp32
 *     accumulation on NHWC tensors, its fused epilogue (bias, residual,
 *     activation) in fp32 arithmetic on the way out;
 *   - its weights: held as f16 in KRSC order (output channel, kernel rows,
 *     kernel columns, input channel), converted once at upload; input
 *     channels padded to 8 by zeros where there is one group and they are
 *     not a multiple of 8 (kp__ox_half_pad), the input then staged with
 *     the same padding;
 *   - every value such a convolution writes whose readers are all such
 *     convolutions (as their input X or their residual Z), and which is not
 *     a graph output: held as f16 NHWC, half the bytes in the plan.
 *   - the bias of such a convolution whose epilogue is bias, residual and
 *     ReLU from f16 to f16 (kp__ox_half_bias): held as f16, for cuDNN's
 *     fused call.
 * Every other value stays f32 NCHW. A marked convolution converts an f32
 * input (or residual) to f16 NHWC in its workspace on the way in, and its
 * epilogue writes an f32 output in NCHW on the way out, so the rest of the
 * engine -- pools, resizes, GEMMs, the graph's inputs and outputs -- sees
 * the model as written. A chain of convolutions (a ResNet's blocks, an SR
 * network's body) stays in f16 NHWC from its first convolution to its
 * last.
 *
 * The plan sees the smaller sizes through kp__ox_value_bytes; the upload
 * converts the weights (engine.c); the convolution reads n->half and each
 * value's half (ops/nn/ops_conv.c). */
#include <string.h>

#include "onnx-impl.h"

size_t kp__ox_value_bytes(const kp__ox_value *v) {
    if (v->half && v->half_cin > 0 && v->ndim == 4 && v->shape[1] > 0)
        return (size_t)(v->numel / v->shape[1] * v->half_cin) * 2u;
    return (size_t)v->numel * (v->half ? 2u : kp_dtype_size(v->dtype));
}

/* A convolution of one group whose input channels are not a multiple of 8
 * (an image's 3): cuDNN's fast fp16 kernels want 16-byte rows, so its
 * weights are held with the channels padded to 8 by zeros, and its input is
 * staged (from f32) with the same padding. */
static void kp__ox_half_pad(kp__ox_graph *g, const kp__ox_gnode *n) {
    kp__ox_value *w = &g->values[n->in[1]], *x = &g->values[n->in[0]];
    int64_t group = 1;
    if (kp__ox_attr_int(n, "group", 1, &group) != KP_OK || group != 1 || w->shape[1] % 8 == 0)
        return;
    w->half_cin = (w->shape[1] + 7) / 8 * 8;
    x->half = false;
}

static bool kp__ox_half_candidate(const kp__ox_graph *g, const kp__ox_gnode *n) {
    if (n->folded || !n->op || strcmp(n->op->name, "Conv") != 0 || n->src->domain[0] != '\0' ||
        n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0 || n->n_out < 1 || n->out[0] < 0)
        return false;
    const kp__ox_value *x = &g->values[n->in[0]], *w = &g->values[n->in[1]];
    return x->dtype == KP_F32 && x->ndim == 4 && w->ndim == 4 && w->is_const && w->host &&
           w->dtype == KP_F32;
}

/* Whether every per-tick reader of v is a marked convolution reading it
 * as its weights (slot 1), its bias (slot 2), or its input or residual
 * (slot 0: inputs 0 and 3). */
static bool kp__ox_half_readers(const kp__ox_graph *g, int v, size_t slot) {
    bool any = false;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *r = &g->nodes[i];
        if (r->folded) continue;
        for (size_t k = 0; k < r->n_in; k++) {
            if (r->in[k] != v) continue;
            bool ok = r->half && (slot ? k == slot : (k == 0 || k == 3));
            if (!ok) return false;
            any = true;
        }
    }
    return any;
}

/* A convolution whose epilogue is a bias, a residual and a ReLU, writing
 * f16 NHWC from f16 NHWC: cuDNN runs the whole of it in the convolution's
 * own call (cudnnConvolutionBiasActivationForward), which wants the bias
 * in f16 as well. */
static void kp__ox_half_bias(kp__ox_graph *g, const kp__ox_gnode *n) {
    if (n->act != KP__OX_ACT_RELU || n->n_in < 3 || n->in[2] < 0) return;
    const kp__ox_value *y = &g->values[n->out[0]];
    const kp__ox_value *z =
        n->fused_add && n->n_in > 3 && n->in[3] >= 0 ? &g->values[n->in[3]] : NULL;
    kp__ox_value *b = &g->values[n->in[2]];
    if (y->half && (!z || z->half) && b->is_const && b->host && b->dtype == KP_F32 &&
        b->ndim == 1 && kp__ox_half_readers(g, n->in[2], 2))
        b->half = true;
}

kp_status kp__ox_half(kp__ox_graph *g) {
    if (!g->fp16) return KP_OK;
    for (size_t i = 0; i < g->n_nodes; i++)
        g->nodes[i].half = kp__ox_half_candidate(g, &g->nodes[i]);
    /* a weight another node reads as well stays f32, and its convolutions with it */
    for (size_t i = 0; i < g->n_nodes; i++) {
        kp__ox_gnode *n = &g->nodes[i];
        if (n->half && !kp__ox_half_readers(g, n->in[1], 1)) {
            for (size_t j = 0; j < g->n_nodes; j++)
                if (g->nodes[j].half && g->nodes[j].in[1] == n->in[1]) g->nodes[j].half = false;
        }
    }
    for (size_t v = 0; v < g->n_values; v++) {
        g->values[v].half = false;
        g->values[v].half_cin = 0;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        if (!n->half) continue;
        g->values[n->in[1]].half = true;
        kp__ox_value *y = &g->values[n->out[0]];
        y->half =
            !y->is_output && y->kind == KP__OX_V_INNER && kp__ox_half_readers(g, n->out[0], 0);
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        if (n->half) kp__ox_half_bias(g, n);
    }
    for (size_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].half) kp__ox_half_pad(g, &g->nodes[i]);
    return KP_OK;
}
