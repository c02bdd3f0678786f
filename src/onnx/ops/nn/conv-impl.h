/* What Conv and ConvTranspose share between their files: ops_conv.c (the
 * operators, fp32 on every device) and ops_conv_half.c (the fp16 form on
 * cuDNN, onnx/half.c, and its staging and epilogue kernels' launches). */
#ifndef KPIPE_ONNX_CONV_IMPL_H
#define KPIPE_ONNX_CONV_IMPL_H

#include "nn-impl.h"

/* The convolution as its operators see it, read from the node each run. */
typedef struct kp__conv {
    bool transposed;
    int64_t batch, cin, cout, group, kk;
    int64_t in_size, out_size;  /* spatial positions of X and of Y */
    kp__ox_spatial sp;          /* Conv: X -> Y; ConvTranspose: the forward conv Y -> X */
    kp__ox_value *x, *w, *b, *y;
    kp__ox_value *z;            /* a fused residual, or NULL */
    kp__ox_value *slope;        /* a fused PRelu's slope, or NULL */
    int act;                    /* the fused activation (KP__OX_ACT_*) */
    float act_a, act_b;
} kp__conv;

/* A node's prepared state, one per input shape (the engine keeps them). */
typedef struct kp__conv_state {
    float *packed;         /* host: W packed for the GEMM, group after group */
    int64_t packed_group;  /* floats per group */
    bool packed_b;         /* packed for the B side (the product is transposed) */
    int64_t chunk;         /* positions per pass through the column buffer */
#ifdef KP_HAVE_CUDA
    kp__ox_dnn_conv *dnn;  /* cuDNN's plan, when it runs this convolution */
#endif
    /* fp16 (n->half): where in the workspace, after cuDNN's own bytes, an
     * f32 input is staged as f16 NHWC (stage_x) and an f32 output's
     * product waits for the epilogue (stage_y); SIZE_MAX when not staged */
    size_t stage_x, stage_y;
    /* cuDNN's fused call (bias, residual, ReLU) refused its algorithm at
     * the first run: the epilogue runs as a pass of its own since */
    bool unfused;
} kp__conv_state;

#ifdef KP_HAVE_CUDNN
/* Input channels as an fp16 convolution holds them: padded to 8 where
 * half.c padded its weights. */
int64_t kp__ox_conv_cin_held(const kp__conv *c);
/* fp16: cuDNN's plan, then the staging buffers after its workspace; a
 * shape cuDNN refuses is KP_ERR_UNSUPPORTED naming the node. */
kp_status kp__ox_conv_prepare_half(const kp__ox_exec *x, kp__ox_gnode *n, const kp__conv *c,
                                   kp__ox_conv_shape *sh, size_t *workspace);
/* fp16: staging, cuDNN's product, the epilogue. */
kp_status kp__ox_conv_run_half(const kp__ox_exec *x, const kp__conv *c, kp__conv_state *s);
/* cuDNN refused its fused call: from now on the convolution runs unfused. */
void kp__ox_conv_refused(kp__conv_state *s);
#endif

#endif
