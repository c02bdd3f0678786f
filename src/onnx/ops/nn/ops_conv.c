/* Conv and ConvTranspose, and the sliding-window geometry pools share.
 *
 * Host: a convolution is one GEMM per image and group whose B operand is
 * the im2col matrix packed straight from the image (ops_gemm.c), the
 * weights packed once at prepare. A transposed convolution is a GEMM into
 * a column buffer (the workspace) and col2im, in chunks of input positions.
 *
 * cuda: cuDNN when it loads and can run the shape (forward, or backward
 * data for ConvTranspose), with fp32 FMA math so results match the host.
 * Otherwise im2col into the workspace in chunks of output positions and a
 * batched cuBLAS GEMM over groups, or for ConvTranspose the GEMM and
 * col2im. Bias is its own kernel afterwards (or the output's initial fill).
 *
 * A Conv node may carry a fused epilogue (onnx/fuse.c): a residual input
 * (input 3) added to its output, then an activation (PRelu's slope is
 * input 4). With cuDNN, a bias and a ReLU it is one
 * cudnnConvolutionBiasActivationForward; otherwise the bias pass applies
 * the residual and the activation too, so every form runs one pass after
 * the product at most. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "conv-impl.h"


/* An INTS attribute of exactly `want` values, or its default `def` for
 * every position when absent. */
static kp_status kp__ints_n(const kp__ox_gnode *n, const char *name, size_t want, int64_t def,
                            int64_t lo, int64_t *out) {
    const int64_t *v;
    size_t cnt;
    KP_CHECK(kp__ox_attr_ints(n, name, &v, &cnt));
    if (!v) {
        for (size_t i = 0; i < want; i++) out[i] = def;
        return KP_OK;
    }
    if (cnt != want)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "%s has %zu values, expected %zu", name, cnt,
                                 want);
    for (size_t i = 0; i < want; i++) {
        if (v[i] < lo || v[i] > INT32_MAX)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "%s[%zu] = %lld is out of range", name,
                                     i, (long long)v[i]);
        out[i] = v[i];
    }
    return KP_OK;
}

enum { KP__PAD_NOTSET, KP__PAD_VALID, KP__PAD_SAME_UPPER, KP__PAD_SAME_LOWER };

static kp_status kp__auto_pad(const kp__ox_gnode *n, int *out) {
    const char *s;
    KP_CHECK(kp__ox_attr_str(n, "auto_pad", "NOTSET", &s));
    if (!strcmp(s, "NOTSET") || !strcmp(s, ""))
        *out = KP__PAD_NOTSET;
    else if (!strcmp(s, "VALID"))
        *out = KP__PAD_VALID;
    else if (!strcmp(s, "SAME_UPPER"))
        *out = KP__PAD_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER"))
        *out = KP__PAD_SAME_LOWER;
    else
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "auto_pad '%s' is not supported", s);
    return KP_OK;
}

static kp_status kp__spatial_axis(const kp__ox_gnode *n, kp__ox_spatial *s, int i, int mode,
                                  bool ceil_mode) {
    int64_t ek = (s->k[i] - 1) * s->dil[i] + 1, in = s->in[i], st = s->stride[i];
    if (mode == KP__PAD_SAME_UPPER || mode == KP__PAD_SAME_LOWER) {
        s->out[i] = (in + st - 1) / st;
        int64_t total = (s->out[i] - 1) * st + ek - in;
        if (total < 0) total = 0;
        s->pad[i] = mode == KP__PAD_SAME_UPPER ? total / 2 : total - total / 2;
        s->pad_end[i] = total - s->pad[i];
        return KP_OK;
    }
    if (mode == KP__PAD_VALID) s->pad[i] = s->pad_end[i] = 0;
    int64_t span = in + s->pad[i] + s->pad_end[i] - ek;
    if (span < 0)
        return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                 "the window (%lld) is wider than the padded input (%lld)",
                                 (long long)ek, (long long)(in + s->pad[i] + s->pad_end[i]));
    s->out[i] = (ceil_mode ? (span + st - 1) / st : span / st) + 1;
    /* The last window must start inside the input or its leading padding. */
    if (ceil_mode && (s->out[i] - 1) * st >= in + s->pad[i]) s->out[i]--;
    return KP_OK;
}

kp_status kp__ox_spatial_infer(const kp__ox_gnode *n, int nsp, const int64_t *in,
                               const int64_t *k, bool ceil_mode, kp__ox_spatial *s) {
    int64_t pads[6];
    int mode;
    if (nsp < 1 || nsp > 3)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "%d spatial dimensions (1 to 3 are)", nsp);
    memset(s, 0, sizeof *s);
    s->nsp = nsp;
    KP_CHECK(kp__ints_n(n, "strides", (size_t)nsp, 1, 1, s->stride));
    KP_CHECK(kp__ints_n(n, "dilations", (size_t)nsp, 1, 1, s->dil));
    KP_CHECK(kp__ints_n(n, "pads", 2 * (size_t)nsp, 0, 0, pads));
    KP_CHECK(kp__auto_pad(n, &mode));
    for (int i = 0; i < nsp; i++) {
        s->in[i] = in[i];
        s->k[i] = k[i];
        s->pad[i] = pads[i];
        s->pad_end[i] = pads[nsp + i];
        if (k[i] < 1 || !kp__ox_fits32(k[i]) || !kp__ox_fits32(in[i]))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "kernel %lld over input %lld",
                                     (long long)k[i], (long long)in[i]);
        KP_CHECK(kp__spatial_axis(n, s, i, mode, ceil_mode));
        if (!kp__ox_fits32(s->out[i]) || !kp__ox_fits32((s->k[i] - 1) * s->dil[i] + 1))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "output extent %lld is too large",
                                     (long long)s->out[i]);
    }
    return KP_OK;
}

void kp__ox_spatial_win(const kp__ox_spatial *s, int64_t channels, kp__ox_win *w) {
    int lead = 3 - s->nsp;
    w->c = (int32_t)channels;
    for (int i = 0; i < 3; i++) {
        int j = i - lead;
        w->in[i] = j >= 0 ? (int32_t)s->in[j] : 1;
        w->out[i] = j >= 0 ? (int32_t)s->out[j] : 1;
        w->k[i] = j >= 0 ? (int32_t)s->k[j] : 1;
        w->stride[i] = j >= 0 ? (int32_t)s->stride[j] : 1;
        w->pad[i] = j >= 0 ? (int32_t)s->pad[j] : 0;
        w->dil[i] = j >= 0 ? (int32_t)s->dil[j] : 1;
    }
}

/* --- the convolution as its operators see it (kp__conv: conv-impl.h) ----------------- */


static kp_status kp__conv_values(kp__ox_graph *g, kp__ox_gnode *n, kp__conv *c) {
    c->x = kp__ox_in(g, n, 0);
    c->w = kp__ox_in(g, n, 1);
    c->b = kp__ox_in(g, n, 2);
    c->y = kp__ox_out(g, n, 0);
    c->z = n->fused_add ? kp__ox_in(g, n, 3) : NULL;
    c->slope = n->act == KP__OX_ACT_PRELU ? kp__ox_in(g, n, 4) : NULL;
    c->act = n->act;
    c->act_a = n->act_a;
    c->act_b = n->act_b;
    if (!c->x || !c->w) return kp__ox_node_error(n, KP_ERR_PARSE, "needs inputs X and W");
    const kp__ox_value *v[3] = {c->x, c->w, c->b};
    for (int i = 0; i < 3; i++)
        if (v[i] && v[i]->dtype != KP_F32)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %d has dtype %s; only f32", i,
                                     kp_dtype_name(v[i]->dtype));
    if (c->x->ndim < 3 || c->x->ndim > 5 || c->w->ndim != c->x->ndim)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "X of rank %d and W of rank %d (ranks 3 to 5, equal, are supported)",
                                 c->x->ndim, c->w->ndim);
    KP_CHECK(kp__ox_attr_int(n, "group", 1, &c->group));
    c->batch = c->x->shape[0];
    c->cin = c->x->shape[1];
    if (c->group < 1 || c->cin % c->group != 0)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "group %lld does not divide %lld channels",
                                 (long long)c->group, (long long)c->cin);
    return KP_OK;
}

/* Sizes the kernels hold in 32 bits, and the bias' length. */
static kp_status kp__conv_check(const kp__ox_gnode *n, const kp__conv *c) {
    int64_t rows = (c->transposed ? c->cout : c->cin) / c->group * c->kk;
    if (!kp__ox_fits32(rows) || !kp__ox_fits32(c->cin) || !kp__ox_fits32(c->cout) ||
        !kp__ox_fits32(c->in_size) || !kp__ox_fits32(c->out_size) ||
        !kp__ox_fits32(c->batch * c->group) || !kp__ox_fits32(c->cout * c->kk))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the convolution is too large");
    if (c->b && (c->b->ndim != 1 || c->b->shape[0] != c->cout))
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "B must hold %lld values",
                                 (long long)c->cout);
    return KP_OK;
}

static kp_status kp__conv_read(kp__ox_graph *g, kp__ox_gnode *n, kp__conv *c) {
    memset(c, 0, sizeof *c);
    KP_CHECK(kp__conv_values(g, n, c));
    int nsp = c->x->ndim - 2;
    c->cout = c->w->shape[0];
    if (c->w->shape[1] != c->cin / c->group || c->cout % c->group != 0)
        return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                 "W of shape [%lld, %lld, ...] does not fit %lld channels in %lld groups",
                                 (long long)c->w->shape[0], (long long)c->w->shape[1],
                                 (long long)c->cin, (long long)c->group);
    KP_CHECK(kp__ox_spatial_infer(n, nsp, c->x->shape + 2, c->w->shape + 2, false, &c->sp));
    c->kk = c->in_size = c->out_size = 1;
    for (int i = 0; i < nsp; i++) {
        c->kk *= c->sp.k[i];
        c->in_size *= c->sp.in[i];
        c->out_size *= c->sp.out[i];
    }
    return kp__conv_check(n, c);
}

kp_status kp__ox_conv_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__conv c;
    KP_CHECK(kp__conv_read(g, n, &c));
    int64_t shape[5] = {c.batch, c.cout};
    for (int i = 0; i < c.sp.nsp; i++) shape[2 + i] = c.sp.out[i];
    /* fuse.c fused the Add where it did not broadcast; a later input shape
     * that makes it broadcast cannot run fused */
    bool same = !c.z || (c.z->dtype == KP_F32 && c.z->ndim == c.x->ndim);
    for (int d = 0; same && c.z && d < c.x->ndim; d++) same = c.z->shape[d] == shape[d];
    if (!same)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "the residual Add fused into this convolution would broadcast "
                                 "at these input shapes (set \"fuse\": \"off\" to run it unfused)");
    return kp__ox_set_out(g, n, 0, KP_F32, c.x->ndim, shape);
}

/* --- ConvTranspose's geometry ---------------------------------------------------------- */

/* Padding from a requested output extent: the larger half leads unless
 * SAME_UPPER; a negative total extends the output (floor halves, as the
 * operator's definition computes them). */
static void kp__convt_split(int64_t total, int mode, int64_t *begin, int64_t *end) {
    int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
    *begin = mode == KP__PAD_SAME_UPPER ? half : total - half;
    *end = total - *begin;
}

static kp_status kp__convt_axes(const kp__ox_gnode *n, kp__conv *c, int nsp, const int64_t *opad,
                                const int64_t *oshape, size_t noshape, int mode) {
    for (int i = 0; i < nsp; i++) {
        kp__ox_spatial *s = &c->sp;
        int64_t in = c->x->shape[2 + i], ek = (s->k[i] - 1) * s->dil[i] + 1;
        int64_t full = s->stride[i] * (in - 1) + opad[i] + ek;
        if (noshape || mode == KP__PAD_SAME_UPPER || mode == KP__PAD_SAME_LOWER) {
            int64_t out = noshape ? oshape[noshape - (size_t)nsp + (size_t)i] : in * s->stride[i];
            kp__convt_split(full - out, mode, &s->pad[i], &s->pad_end[i]);
        } else if (mode == KP__PAD_VALID) {
            s->pad[i] = s->pad_end[i] = 0;
        }
        s->in[i] = full - s->pad[i] - s->pad_end[i];
        s->out[i] = in;
        if (s->in[i] < 1 || !kp__ox_fits32(s->in[i]) || !kp__ox_fits32(in) ||
            !kp__ox_fits32(ek) || s->pad[i] < INT32_MIN / 2 || s->pad[i] > INT32_MAX / 2)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "output extent %lld is out of range",
                                     (long long)s->in[i]);
    }
    return KP_OK;
}

static kp_status kp__convt_read(kp__ox_graph *g, kp__ox_gnode *n, kp__conv *c) {
    memset(c, 0, sizeof *c);
    c->transposed = true;
    KP_CHECK(kp__conv_values(g, n, c));
    int nsp = c->x->ndim - 2, mode;
    if (c->w->shape[0] != c->cin)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "W has %lld input channels, X %lld",
                                 (long long)c->w->shape[0], (long long)c->cin);
    c->cout = c->w->shape[1] * c->group;
    int64_t pads[6], opad[3];
    const int64_t *oshape;
    size_t noshape;
    kp__ox_spatial *s = &c->sp;
    s->nsp = nsp;
    KP_CHECK(kp__ints_n(n, "strides", (size_t)nsp, 1, 1, s->stride));
    KP_CHECK(kp__ints_n(n, "dilations", (size_t)nsp, 1, 1, s->dil));
    KP_CHECK(kp__ints_n(n, "pads", 2 * (size_t)nsp, 0, 0, pads));
    KP_CHECK(kp__ints_n(n, "output_padding", (size_t)nsp, 0, 0, opad));
    KP_CHECK(kp__ox_attr_ints(n, "output_shape", &oshape, &noshape));
    KP_CHECK(kp__auto_pad(n, &mode));
    if (oshape && noshape != (size_t)nsp && noshape != (size_t)nsp + 2)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "output_shape has %zu values", noshape);
    c->kk = c->in_size = c->out_size = 1;
    for (int i = 0; i < nsp; i++) {
        s->k[i] = c->w->shape[2 + i];
        s->pad[i] = pads[i];
        s->pad_end[i] = pads[nsp + i];
        c->kk *= s->k[i];
    }
    KP_CHECK(kp__convt_axes(n, c, nsp, opad, oshape, oshape ? noshape : 0, mode));
    for (int i = 0; i < nsp; i++) {
        c->in_size *= s->out[i];
        c->out_size *= s->in[i];
    }
    return kp__conv_check(n, c);
}

kp_status kp__ox_convt_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__conv c;
    KP_CHECK(kp__convt_read(g, n, &c));
    int64_t shape[5] = {c.batch, c.cout};
    for (int i = 0; i < c.sp.nsp; i++) shape[2 + i] = c.sp.in[i];
    return kp__ox_set_out(g, n, 0, KP_F32, c.x->ndim, shape);
}


void kp__ox_conv_describe(const kp__ox_gnode *n, char *buf, size_t len) {
    const kp__conv_state *s = n->state;
    char how[200];
    if (!s) {
        snprintf(buf, len, "not prepared");
        return;
    }
#ifdef KP_HAVE_CUDNN
    if (s->dnn) {
        kp__ox_dnn_conv_describe(s->dnn, how, sizeof how);
        static const char same[] = ", epilogue in the same call";
        char *e = s->unfused ? strstr(how, same) : NULL;
        if (e) memmove(e, e + sizeof same - 1, strlen(e + sizeof same - 1) + 1);
        if (s->unfused)
            snprintf(how + strlen(how), sizeof how - strlen(how),
                     "; epilogue in a pass of its own (cuDNN's fused call refused it)");
    } else
#endif
    if (s->packed) snprintf(how, sizeof how, "host GEMM, weights packed at setup");
    else snprintf(how, sizeof how, "im2col + GEMM, %lld positions a pass", (long long)s->chunk);
    static const char *const acts[] = {"", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid",
                                       "HardSigmoid", "HardSwish", "SiLU"};
    const char *bn = n->fused_bn ? "BatchNormalization (in the weights)" : "";
    const char *add = n->fused_add ? "residual Add" : "";
    int na = (int)(sizeof acts / sizeof acts[0]);
    const char *act = n->act > 0 && n->act < na ? acts[n->act] : "";
    snprintf(buf, len, "%s%s%s%s%s%s%s%s", how, n->half ? "; fp16, channels last" : "",
             *bn || *add || *act ? "; fused: " : "", bn, *bn && (*add || *act) ? " + " : "", add,
             *add && *act ? " + " : "", act);
}

void kp__ox_conv_release(kp__ox_gnode *n) {
    kp__conv_state *s = n->state;
    if (!s) return;
#ifdef KP_HAVE_CUDNN
    kp__ox_dnn_conv_free(s->dnn);
#endif
    kp__free(s->packed);
    kp__free(s);
    n->state = NULL;
}

/* Rows and columns of the column buffer of the fallback paths. */
static void kp__cols_extent(const kp__conv *c, int64_t *rows, int64_t *cols) {
    *rows = (c->transposed ? c->cout : c->cin) * c->kk;
    *cols = c->transposed ? c->in_size : c->out_size;
}

static int64_t kp__cols_chunk(const kp__conv *c) {
    int64_t rows, cols;
    kp__cols_extent(c, &rows, &cols);
    int64_t chunk = rows > 0 ? (int64_t)(KP__OX_COLS_MAX / sizeof(float)) / rows : cols;
    if (chunk > cols) chunk = cols;
    return chunk < 1 ? 1 : chunk;
}

/* The host GEMM of a convolution over every image and group; true when
 * the weights went to the B side. */
static bool kp__conv_gemm(const kp__conv *c, kp__ox_gemm *q) {
    int64_t cg = c->cin / c->group, mg = c->cout / c->group, kg = cg * c->kk;
    int64_t p = c->out_size, hw = c->in_size;
    *q = (kp__ox_gemm){.m = (int32_t)mg, .n = (int32_t)p, .k = (int32_t)kg,
                       .nb = {(int32_t)c->batch, (int32_t)c->group}, .alpha = 1.0f,
                       .a = c->w->data, .a_rs = kg, .a_ks = 1, .a_bs = {0, mg * kg},
                       .b = c->x->data, .b_bs = {c->cin * hw, cg * hw},
                       .c = c->y->data, .c_rs = p, .c_cs = 1, .c_bs = {c->cout * p, mg * p},
                       .bias = c->b ? c->b->data : NULL, .bias_bs = mg};
    bool pointwise = c->kk == 1;
    for (int i = 0; i < c->sp.nsp; i++)
        pointwise = pointwise && c->sp.stride[i] == 1 && c->sp.pad[i] == 0 && c->sp.pad_end[i] == 0;
    if (pointwise) {
        q->b_rs = 1;
        q->b_ks = hw;
    } else {
        q->b_kind = KP__OX_GEMM_WIN;
        kp__ox_spatial_win(&c->sp, cg, &q->win);
    }
    return kp__ox_gemm_orient(q);
}

/* Host: the constant weights packed for the side the GEMM puts them on. */
static kp_status kp__conv_pack(const kp__conv *c, kp__conv_state *s) {
    kp__ox_gemm q;
    int64_t mg = c->cout / c->group, kg = c->cin / c->group * c->kk;
    s->packed_b = kp__conv_gemm(c, &q); /* addresses are not bound yet: only the side counts */
    s->packed_group = (int64_t)kp__ox_gemm_packed_floats(mg, kg, !s->packed_b);
    size_t bytes = (size_t)(s->packed_group * c->group) * sizeof(float);
    if (bytes == 0) return KP_OK;
    s->packed = kp__malloc(bytes);
    if (!s->packed) return kp__error(KP_ERR_OUT_OF_MEMORY, "Conv: no memory for packed weights");
    const float *w = c->w->host;
    for (int64_t g = 0; g < c->group; g++)
        kp__ox_gemm_pack_side(w + g * mg * kg, kg, 1, mg, kg, !s->packed_b,
                              s->packed + g * s->packed_group);
    return KP_OK;
}



static kp_status kp__conv_prepare(const kp__ox_exec *x, kp__ox_gnode *n, const kp__conv *c,
                                  size_t *workspace) {
    /* n->state is NULL here: the engine keeps each shape's states itself. */
    kp__conv_state *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "Conv: no memory");
    n->state = s;
    s->stage_x = s->stage_y = SIZE_MAX;
    if (n->half && x->host)
        return kp__ox_node_error(n, KP_ERR_INTERNAL, "an fp16 convolution on a host device");
    s->chunk = kp__cols_chunk(c);
    int64_t rows, cols;
    kp__cols_extent(c, &rows, &cols);
    size_t cols_bytes = (size_t)(rows * s->chunk) * sizeof(float);
    if (x->host) {
        if (c->transposed) {
            if (*workspace < cols_bytes) *workspace = cols_bytes;
            return KP_OK;
        }
        return c->w->host ? kp__conv_pack(c, s) : KP_OK;
    }
#ifdef KP_HAVE_CUDNN
    if (kp__ox_cuda_dnn(x->cuda)) {
        kp__ox_conv_shape sh = {.nsp = c->sp.nsp, .transposed = c->transposed,
                                .fused = c->act == KP__OX_ACT_RELU && c->b != NULL,
                                .tf32 = kp__ox_cuda_tf32(x->cuda),
                                .tune = kp__ox_cuda_tune(x->cuda), .batch = c->batch,
                                .cin = c->cin, .cout = c->cout, .group = c->group};
        bool symmetric = true;
        for (int i = 0; i < c->sp.nsp; i++) {
            sh.in[i] = c->sp.in[i];
            sh.out[i] = c->sp.out[i];
            sh.k[i] = c->sp.k[i];
            sh.stride[i] = c->sp.stride[i];
            sh.pad[i] = c->sp.pad[i];
            sh.dil[i] = c->sp.dil[i];
            symmetric = symmetric && c->sp.pad[i] == c->sp.pad_end[i] && c->sp.pad[i] >= 0;
        }
        if (n->half && !symmetric)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "fp16 needs equal padding at both "
                                     "ends of each axis");
        if (n->half) return kp__ox_conv_prepare_half(x, n, c, &sh, workspace);
        size_t ws = 0;
        kp_status st = symmetric ? kp__ox_dnn_conv_plan(kp__ox_cuda_dnn(x->cuda), &sh,
                                                          kp__ox_cuda_algos(x->cuda), &s->dnn, &ws)
                                 : KP_ERR_UNSUPPORTED;
        if (st == KP_OK) {
            if (*workspace < ws) *workspace = ws;
            return KP_OK;
        }
        if (st != KP_ERR_UNSUPPORTED) return st;
    }
#endif
    if (n->half)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "fp16 convolutions need cuDNN (%s)",
                                 kp__ox_cudnn_info());
    if (*workspace < cols_bytes + KP__OX_BLAS_RESERVE) *workspace = cols_bytes + KP__OX_BLAS_RESERVE;
    return KP_OK;
}

kp_status kp__ox_conv_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                              size_t *workspace) {
    kp__conv c;
    KP_CHECK(kp__conv_read(g, n, &c));
    return kp__conv_prepare(x, n, &c, workspace);
}

kp_status kp__ox_convt_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                               size_t *workspace) {
    kp__conv c;
    KP_CHECK(kp__convt_read(g, n, &c));
    return kp__conv_prepare(x, n, &c, workspace);
}

/* --- run ------------------------------------------------------------------------------------ */

/* y = bias (set) or y += bias per channel over the whole output, then the
 * fused epilogue: y += z, then the activation. `with_bias` false: the
 * product added the bias already (the host GEMM). */
static kp_status kp__conv_bias_with(const kp__ox_exec *x, const kp__conv *c, bool set,
                                    bool with_bias) {
    const void *b = with_bias && c->b ? c->b->data : NULL;
    if (!set && !b && !c->z && c->act == KP__OX_ACT_NONE) return KP_OK;
    kp__ox_bias_params p = {.bias = b, .add = c->z ? c->z->data : NULL,
                            .slope = c->slope ? c->slope->data : NULL, .y = c->y->data,
                            .n = c->y->numel, .channels = c->cout, .inner = c->out_size,
                            .set = set, .act = c->act, .act_a = c->act_a, .act_b = c->act_b};
    return kp__ox_launch(x, &kp__ox_k_bias, (uint64_t)p.n, &p);
}

static kp_status kp__conv_bias(const kp__ox_exec *x, const kp__conv *c, bool set) {
    return kp__conv_bias_with(x, c, set, true);
}

#ifdef KP_HAVE_CUDA
/* cuda without cuDNN: im2col chunks and a GEMM batched over groups. */
static kp_status kp__conv_device(const kp__ox_exec *x, const kp__conv *c, int64_t chunk) {
    int64_t cg = c->cin / c->group, mg = c->cout / c->group, kg = cg * c->kk;
    int64_t p = c->out_size, hw = c->in_size;
    kp__ox_im2col_params ip = {.cols = x->workspace};
    kp__ox_spatial_win(&c->sp, c->cin, &ip.w);
    for (int64_t i = 0; i < c->batch; i++) {
        for (int64_t p0 = 0; p0 < p; p0 += chunk) {
            int64_t pc = p - p0 < chunk ? p - p0 : chunk;
            ip.img = (const float *)c->x->data + i * c->cin * hw;
            ip.col0 = p0;
            ip.ncols = pc;
            KP_CHECK(kp__ox_launch(x, &kp__ox_k_im2col, (uint64_t)(c->cin * c->kk * pc), &ip));
            kp__ox_blas q = {.m = mg, .n = pc, .k = kg, .batch = c->group, .alpha = 1.0f,
                             .a = c->w->data, .lda = kg, .sa = mg * kg,
                             .b = x->workspace, .ldb = pc, .sb = kg * pc,
                             .c = (float *)c->y->data + i * c->cout * p + p0, .ldc = p,
                             .sc = mg * p};
            KP_CHECK(kp__ox_blas_gemm(x, &q));
        }
    }
    return kp__conv_bias(x, c, false);
}
#endif


kp_status kp__ox_conv_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__conv c;
    KP_CHECK(kp__conv_read(g, n, &c));
    if (c.y->numel == 0) return KP_OK;
    kp__conv_state *s = n->state;
    if (x->host) {
        kp__ox_gemm q;
        bool swapped = kp__conv_gemm(&c, &q);
        if (s && s->packed && swapped != s->packed_b)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "shapes changed since prepare");
        if (s && s->packed && !s->packed_b) {
            q.a = s->packed;
            q.a_kind = KP__OX_GEMM_PACKED;
            q.a_bs[1] = s->packed_group;
        } else if (s && s->packed) {
            q.b = s->packed;
            q.b_kind = KP__OX_GEMM_PACKED;
            q.b_bs[1] = s->packed_group;
        }
        KP_CHECK(kp__ox_gemm_host(x, &q));
        return kp__conv_bias_with(x, &c, false, false);
    }
#ifdef KP_HAVE_CUDA
    if (!s) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "run before prepare");
#ifdef KP_HAVE_CUDNN
    if (n->half) return kp__ox_conv_run_half(x, &c, s);
    if (s->dnn && c.act == KP__OX_ACT_RELU && c.b && !s->unfused) {
        kp_status st = kp__ox_dnn_conv_run_fused(x, kp__ox_cuda_dnn(x->cuda), s->dnn, c.x->data,
                                                 c.w->data, c.b->data, c.z ? c.z->data : NULL,
                                                 c.y->data);
        if (st != KP_ERR_UNSUPPORTED) return st;
        kp__ox_conv_refused(s);
    }
    if (s->dnn) {
        KP_CHECK(kp__ox_dnn_conv_run(x, kp__ox_cuda_dnn(x->cuda), s->dnn, c.x->data, c.w->data, c.y->data));
        return kp__conv_bias(x, &c, false);
    }
#endif
    return kp__conv_device(x, &c, s->chunk);
#else
    return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "no device convolution in this build");
#endif
}

/* One chunk of ConvTranspose's columns for image i: cols (rows x pc) =
 * W_g^T X_g over input positions [p0, p0 + pc), every group at once. */
static kp_status kp__convt_gemm(const kp__ox_exec *x, const kp__conv *c, float *cols, int64_t i,
                                int64_t p0, int64_t pc) {
    int64_t cg = c->cin / c->group, rows = c->cout / c->group * c->kk, hw = c->in_size;
    const float *xi = (const float *)c->x->data + i * c->cin * hw + p0;
    if (!x->host) {
#ifdef KP_HAVE_CUDA
        kp__ox_blas q = {.ta = true, .m = rows, .n = pc, .k = cg, .batch = c->group,
                         .alpha = 1.0f, .a = c->w->data, .lda = rows, .sa = cg * rows,
                         .b = xi, .ldb = hw, .sb = cg * hw, .c = cols, .ldc = pc,
                         .sc = rows * pc};
        return kp__ox_blas_gemm(x, &q);
#endif
    }
    kp__ox_gemm q = {.m = (int32_t)rows, .n = (int32_t)pc, .k = (int32_t)cg,
                     .nb = {1, (int32_t)c->group}, .alpha = 1.0f,
                     .a = c->w->data, .a_rs = 1, .a_ks = rows, .a_bs = {0, cg * rows},
                     .b = xi, .b_rs = 1, .b_ks = hw, .b_bs = {0, cg * hw},
                     .c = cols, .c_rs = pc, .c_cs = 1, .c_bs = {0, rows * pc}};
    kp__ox_gemm_orient(&q);
    return kp__ox_gemm_host(x, &q);
}

static kp_status kp__convt_cols(const kp__ox_exec *x, const kp__conv *c, float *cols,
                                int64_t chunk) {
    KP_CHECK(kp__conv_bias(x, c, true));
    kp__ox_col2im_params cp = {.cols = cols};
    kp__ox_spatial_win(&c->sp, c->cout, &cp.w);
    int64_t image = c->cout * c->out_size;
    for (int64_t i = 0; i < c->batch; i++) {
        for (int64_t p0 = 0; p0 < c->in_size; p0 += chunk) {
            int64_t pc = c->in_size - p0 < chunk ? c->in_size - p0 : chunk;
            KP_CHECK(kp__convt_gemm(x, c, cols, i, p0, pc));
            cp.img = (float *)c->y->data + i * image;
            cp.col0 = p0;
            cp.ncols = pc;
            KP_CHECK(kp__ox_launch(x, &kp__ox_k_col2im, (uint64_t)image, &cp));
        }
    }
    return KP_OK;
}

kp_status kp__ox_convt_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__conv c;
    KP_CHECK(kp__convt_read(g, n, &c));
    if (c.y->numel == 0) return KP_OK;
    kp__conv_state *s = n->state;
    if (x->fold) {
        /* Setup time, not a tick: the column buffer is this call's own. */
        int64_t rows, cols, chunk = kp__cols_chunk(&c);
        kp__cols_extent(&c, &rows, &cols);
        float *buf = kp__malloc((size_t)(rows * chunk + 1) * sizeof(float));
        if (!buf) return kp__error(KP_ERR_OUT_OF_MEMORY, "ConvTranspose: no memory");
        kp_status st = kp__convt_cols(x, &c, buf, chunk);
        kp__free(buf);
        return st;
    }
    if (!s) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "run before prepare");
#ifdef KP_HAVE_CUDNN
    if (!x->host && s->dnn) {
        KP_CHECK(kp__ox_dnn_conv_run(x, kp__ox_cuda_dnn(x->cuda), s->dnn, c.x->data, c.w->data, c.y->data));
        return kp__conv_bias(x, &c, false);
    }
#endif
    return kp__convt_cols(x, &c, x->workspace, s->chunk);
}

