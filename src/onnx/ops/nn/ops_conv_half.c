/* The fp16 convolution ("precision": "fp16", onnx/half.c) on cuDNN: its
 * plan and staging buffers, its run (an f32 input staged to f16 NHWC,
 * cuDNN's product, one epilogue pass, or cuDNN's fused call where bias,
 * residual and ReLU go from f16 to f16), and the launches of the staging
 * and epilogue kernels (ops_nn.cu), which every build has: their host
 * forms are the reference test_onnx_half checks the cuda forms against. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "conv-impl.h"

/* The fp16 convolutions' kernels with their cuda geometry (ops_nn.cu): a
 * transposing tile per (positions, channels, image), or a 1-D grid of one
 * thread per element or per eight of them. The host forms walk the
 * elements. */
enum { KP__OX_HALF_ELEMENTS, KP__OX_HALF_EIGHTS, KP__OX_HALF_TILES };

static kp_status kp__ox_half_launch(const kp__ox_exec *x, const kp_kernel *k, int64_t n, int64_t c,
                                    int64_t hw, int how, const void *params) {
    uint64_t host_blocks = ((uint64_t)n + KP__OX_HOST_ITEMS - 1) / KP__OX_HOST_ITEMS;
    if (n == 0) return KP_OK;
    if (how != KP__OX_HALF_TILES) {
        uint64_t items = how == KP__OX_HALF_EIGHTS ? (uint64_t)n / 8 : (uint64_t)n;
        uint64_t blocks = (items + KP__OX_THREADS - 1) / KP__OX_THREADS;
        if (blocks > KP__OX_MAX_BLOCKS) blocks = KP__OX_MAX_BLOCKS;
        return kp__ox_launch_geom(x, k, (kp_dim3){(uint32_t)blocks, 1, 1},
                                  (kp_dim3){KP__OX_THREADS, 1, 1}, 0, host_blocks, params);
    }
    int64_t images = n / (c * hw), gx = (hw + KP__OX_TILE - 1) / KP__OX_TILE;
    int64_t gy = (c + KP__OX_TILE - 1) / KP__OX_TILE;
    if (images > 65535 || gy > 65535 || gx > INT32_MAX)
        return kp__error(KP_ERR_UNSUPPORTED, "onnx: an fp16 convolution of %lld images of %lld "
                         "channels is too large", (long long)images, (long long)c);
    return kp__ox_launch_geom(x, k, (kp_dim3){(uint32_t)gx, (uint32_t)gy, (uint32_t)images},
                              (kp_dim3){KP__OX_TILE, 8, 1}, 0, host_blocks, params);
}

kp_status kp__ox_to_half(const kp__ox_exec *x, const kp__ox_to_half_params *p) {
    int how = p->cpad >= KP__OX_TILE ? KP__OX_HALF_TILES : KP__OX_HALF_ELEMENTS;
    return kp__ox_half_launch(x, &kp__ox_k_to_half, p->n, p->cpad, p->hw, how, p);
}

kp_status kp__ox_epilogue16(const kp__ox_exec *x, const kp__ox_epilogue16_params *p) {
    /* as ops_nn.cu's kernel chooses its form */
    int how = !p->y16 && p->c >= KP__OX_TILE         ? KP__OX_HALF_TILES
              : p->y16 && p->c % 8 == 0 && !p->z32 ? KP__OX_HALF_EIGHTS
                                                   : KP__OX_HALF_ELEMENTS;
    return kp__ox_half_launch(x, &kp__ox_k_epilogue16, p->n, p->c, p->hw, how, p);
}

#ifdef KP_HAVE_CUDNN
/* Input channels as an fp16 convolution holds them: padded to 8 where
 * half.c padded its weights. */
int64_t kp__ox_conv_cin_held(const kp__conv *c) {
    return c->w->half && c->w->half_cin > c->cin ? c->w->half_cin : c->cin;
}

/* fp16 (onnx/half.c): cuDNN's plan, then the staging buffers after its
 * workspace. cuDNN must take the shape: there is no other fp16 form. */
kp_status kp__ox_conv_prepare_half(const kp__ox_exec *x, kp__ox_gnode *n, const kp__conv *c,
                                   kp__ox_conv_shape *sh, size_t *workspace) {
    kp__conv_state *s = n->state;
    size_t ws = 0;
    sh->half = true;
    sh->cin = kp__ox_conv_cin_held(c);
    sh->fused = c->b && c->b->half; /* half.c: bias, residual and ReLU in cuDNN's call */
    kp_status st = kp__ox_cuda_dnn(x->cuda) ? kp__ox_dnn_conv_plan(kp__ox_cuda_dnn(x->cuda), sh,
                                                                   kp__ox_cuda_algos(x->cuda),
                                                                   &s->dnn, &ws)
                                            : KP_ERR_UNSUPPORTED;
    if (st == KP_ERR_UNSUPPORTED)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "cuDNN has no fp16 algorithm for this "
                                 "convolution (run the model with \"precision\": \"fp32\" or "
                                 "\"tf32\")");
    KP_CHECK(st);
    size_t at = (ws + 255) & ~(size_t)255;
    if (!c->x->half) {
        s->stage_x = at;
        at += ((size_t)(c->x->numel / c->cin * kp__ox_conv_cin_held(c)) * 2 + 255) & ~(size_t)255;
    }
    if (!c->y->half) {
        s->stage_y = at;
        at += ((size_t)c->y->numel * 2 + 255) & ~(size_t)255;
    }
    if (*workspace < at) *workspace = at;
    return KP_OK;
}
#endif

#ifdef KP_HAVE_CUDNN
/* cuDNN took the fused call's plan but refused to run it (a status of its
 * NOT_SUPPORTED family: some algorithms take no bias-activation epilogue
 * on some layouts). Nothing was enqueued; the convolution runs unfused
 * from here on, and validate and the reports say so. */
void kp__ox_conv_refused(kp__conv_state *s) {
    if (!s->unfused)
        kp__log(KP_LOG_INFO, "onnx: cuDNN's fused convolution call refused its algorithm "
                "(%s); the epilogue runs as a pass of its own", kp_last_error());
    kp_clear_error();
    s->unfused = true;
}

/* fp16 (onnx/half.c): an f32 input staged to f16 NHWC, cuDNN's product,
 * then one epilogue pass: bias, residual and activation in fp32, written
 * as f16 NHWC in place or as f32 NCHW for a reader that wants the model's
 * layout. */
kp_status kp__ox_conv_run_half(const kp__ox_exec *x, const kp__conv *c, kp__conv_state *s) {
    uint8_t *ws = x->workspace;
    const void *in = c->x->data;
    if (!c->x->half) {
        int64_t cp = kp__ox_conv_cin_held(c);
        kp__ox_to_half_params p = {.x = c->x->data, .y = (uint16_t *)(ws + s->stage_x),
                                   .n = c->x->numel / c->cin * cp, .c = c->cin, .cpad = cp,
                                   .hw = c->in_size};
        KP_CHECK(kp__ox_to_half(x, &p));
        in = p.y;
    }
    if (c->b && c->b->half && !s->unfused) { /* f16 in and out, bias + residual + ReLU */
        kp_status st = kp__ox_dnn_conv_run_fused(x, kp__ox_cuda_dnn(x->cuda), s->dnn, in,
                                                 c->w->data, c->b->data,
                                                 c->z ? c->z->data : NULL, c->y->data);
        if (st != KP_ERR_UNSUPPORTED) return st;
        kp__ox_conv_refused(s); /* then the product below, the epilogue after */
    }
    uint16_t *acc = c->y->half ? c->y->data : (uint16_t *)(ws + s->stage_y);
    KP_CHECK(kp__ox_dnn_conv_run(x, kp__ox_cuda_dnn(x->cuda), s->dnn, in, c->w->data, acc));
    if (c->y->half && !c->b && !c->z && c->act == KP__OX_ACT_NONE) return KP_OK;
    bool z16 = c->z && c->z->half;
    kp__ox_epilogue16_params e = {.acc = acc, .z16 = z16 ? c->z->data : NULL,
                                  .z32 = c->z && !z16 ? c->z->data : NULL,
                                  .bias = c->b && !c->b->half ? c->b->data : NULL,
                                  .bias16 = c->b && c->b->half ? c->b->data : NULL,
                                  .slope = c->slope ? c->slope->data : NULL,
                                  .y16 = c->y->half ? acc : NULL,
                                  .y32 = c->y->half ? NULL : c->y->data, .n = c->y->numel,
                                  .c = c->cout, .hw = c->out_size, .act = c->act,
                                  .act_a = c->act_a, .act_b = c->act_b};
    return kp__ox_epilogue16(x, &e);
}
#endif
