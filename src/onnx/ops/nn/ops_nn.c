/* The neural-network operator family: its table, its element kernels'
 * host forms, and the pools, normalizations, LRN, Resize and Upsample.
 * Conv and ConvTranspose live in ops_conv.c, Gemm and MatMul in
 * ops_gemm.c; every entry of the family is listed here. */
#include <string.h>

#include "nn-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__ox_bias_cuda, kp__ox_fill_cuda, kp__ox_im2col_cuda,
    kp__ox_col2im_cuda, kp__ox_pool_cuda, kp__ox_bn_cuda, kp__ox_lrn_cuda, kp__ox_resize_cuda,
    kp__ox_plane_cuda, kp__ox_to_half_cuda, kp__ox_epilogue16_cuda;
#define KP__NN_CUDA(name) {"cuda", &kp__ox_##name##_cuda},
#else
#define KP__NN_CUDA(name)
#endif

#define KP__NN_FITS(type) \
    _Static_assert(sizeof(type) <= KP_MAX_KERNEL_PARAMS, #type " is a kernel's parameter block")
KP__NN_FITS(kp__ox_bias_params);
KP__NN_FITS(kp__ox_to_half_params);
KP__NN_FITS(kp__ox_epilogue16_params);
KP__NN_FITS(kp__ox_fill_params);
KP__NN_FITS(kp__ox_im2col_params);
KP__NN_FITS(kp__ox_col2im_params);
KP__NN_FITS(kp__ox_pool_params);
KP__NN_FITS(kp__ox_bn_params);
KP__NN_FITS(kp__ox_lrn_params);
KP__NN_FITS(kp__ox_resize_params);
KP__NN_FITS(kp__ox_plane_params);

/* An element kernel: the host form walks its share of `count(p)` items.
 * `linkage` is static for the kernels only this file launches. */
#define KP__NN_KERNEL(linkage, name, type, count, fn)                                          \
    static void kp__##name##_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, \
                                  uint64_t nb) {                                               \
        const type *p = pp;                                                                    \
        uint64_t lo, hi;                                                                       \
        kp_host_block_span((uint64_t)(count), grid, first, nb, &lo, &hi);                      \
        for (uint64_t i = lo; i < hi; i++) fn(p, (int64_t)i);                                  \
    }                                                                                          \
    linkage const kp_kernel kp__ox_k_##name = {                                                \
        "onnx_" #name, sizeof(type),                                                           \
        {{"host", &(const kp_host_kernel){kp__##name##_host}}, KP__NN_CUDA(name)}};

KP__NN_KERNEL(, bias, kp__ox_bias_params, p->n, kp__ox_bias_at)
KP__NN_KERNEL(, fill, kp__ox_fill_params, p->n, kp__ox_fill_at)
KP__NN_KERNEL(, to_half, kp__ox_to_half_params, p->n, kp__ox_to_half_at)
KP__NN_KERNEL(, epilogue16, kp__ox_epilogue16_params, p->n, kp__ox_epilogue16_at)
KP__NN_KERNEL(, im2col, kp__ox_im2col_params, p->w.c * kp__ox_win_kk(&p->w) * p->ncols,
              kp__ox_im2col_item)
KP__NN_KERNEL(, col2im, kp__ox_col2im_params, p->w.c * kp__ox_win_in_size(&p->w),
              kp__ox_col2im_item)

/* Pools on the host: the position advances like an odometer instead of
 * being divided out of every element's index. */
static void kp__pool_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                          uint64_t nb) {
    const kp__ox_pool_params *p = pp;
    const kp__ox_win *w = &p->w;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    if (lo >= hi) return;
    int64_t e = (int64_t)lo, ox = e % w->out[2], t = e / w->out[2], oy = t % w->out[1];
    t /= w->out[1];
    int64_t oz = t % w->out[0], plane = t / w->out[0];
    for (; e < (int64_t)hi; e++) {
        kp__ox_pool_pos(p, e, plane, oz, oy, ox);
        if (++ox < w->out[2]) continue;
        ox = 0;
        if (++oy < w->out[1]) continue;
        oy = 0;
        if (++oz < w->out[0]) continue;
        oz = 0;
        plane++;
    }
}

static const kp_kernel kp__ox_k_pool = {
    "onnx_pool",
    sizeof(kp__ox_pool_params),
    {{"host", &(const kp_host_kernel){kp__pool_host}}, KP__NN_CUDA(pool)}};
KP__NN_KERNEL(static, bn, kp__ox_bn_params, p->n, kp__ox_bn_at)
KP__NN_KERNEL(static, lrn, kp__ox_lrn_params, p->n, kp__ox_lrn_at)
KP__NN_KERNEL(static, resize, kp__ox_resize_params, p->n, kp__ox_resize_at)

/* One plane per block: GlobalAveragePool, GlobalMaxPool, and
 * InstanceNormalization's statistics and output. The host sums in double. */
static void kp__plane_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                           uint64_t nb) {
    const kp__ox_plane_params *p = pp;
    for (uint64_t q = first; q < first + nb; q++) {
        const float *x = p->x + (int64_t)q * p->size;
        if (p->mode == KP__OX_PLANE_MAX) {
            float m = -INFINITY;
            for (int64_t i = 0; i < p->size; i++) m = x[i] > m || x[i] != x[i] ? x[i] : m;
            p->y[q] = m;
            continue;
        }
        double s = 0.0, v = 0.0;
        for (int64_t i = 0; i < p->size; i++) s += x[i];
        float mean = p->size ? (float)(s / (double)p->size) : 0.0f;
        if (p->mode == KP__OX_PLANE_AVG) {
            p->y[q] = mean;
            continue;
        }
        for (int64_t i = 0; i < p->size; i++) v += ((double)x[i] - mean) * ((double)x[i] - mean);
        float var = p->size ? (float)(v / (double)p->size) : 0.0f;
        float *y = p->y + (int64_t)q * p->size;
        for (int64_t i = 0; i < p->size; i++)
            y[i] = kp__ox_inorm_apply(p, (int64_t)q, x[i], mean, var);
    }
}

static const kp_kernel kp__ox_k_plane = {
    "onnx_plane",
    sizeof(kp__ox_plane_params),
    {{"host", &(const kp_host_kernel){kp__plane_host}}, KP__NN_CUDA(plane)}};

static kp_status kp__plane_launch(const kp__ox_exec *x, const kp__ox_plane_params *p) {
    if (p->planes == 0) return KP_OK;
    kp_dim3 grid = {(uint32_t)p->planes, 1, 1}, block = {KP__OX_THREADS, 1, 1};
    return kp__ox_launch_geom(x, &kp__ox_k_plane, grid, block, 0, (uint64_t)p->planes, p);
}

/* --- shared checks ------------------------------------------------------------------ */

static kp_status kp__f32_in(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, int min_rank,
                            kp__ox_value **out) {
    kp__ox_value *v = kp__ox_in(g, n, i);
    if (!v) return kp__ox_node_error(n, KP_ERR_PARSE, "input %zu is missing", i);
    if (v->dtype != KP_F32)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %zu has dtype %s; only f32", i,
                                 kp_dtype_name(v->dtype));
    if (v->ndim < min_rank)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "input %zu has rank %d, at least %d", i,
                                 v->ndim, min_rank);
    *out = v;
    return KP_OK;
}

/* Per-channel inputs [first, last] hold C values. */
static kp_status kp__channel_vecs(kp__ox_graph *g, const kp__ox_gnode *n, size_t first,
                                  size_t last, int64_t c) {
    for (size_t i = first; i <= last; i++) {
        kp__ox_value *v = NULL;
        KP_CHECK(kp__f32_in(g, n, i, 1, &v));
        if (v->ndim != 1 || v->shape[0] != c)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "input %zu must hold %lld values", i,
                                     (long long)c);
    }
    return KP_OK;
}

/* Elements per channel of an (N, C, ...) tensor. */
static int64_t kp__inner(const kp__ox_value *v) {
    int64_t s = 1;
    for (int i = 2; i < v->ndim; i++) s *= v->shape[i];
    return s;
}

/* --- pools ---------------------------------------------------------------------------- */

static int kp__pool_mode(const kp__ox_gnode *n) {
    const char *t = n->src->op_type;
    return !strcmp(t, "MaxPool") ? KP__OX_POOL_MAX
           : !strcmp(t, "LpPool") ? KP__OX_POOL_LP
                                  : KP__OX_POOL_AVG;
}

static kp_status kp__pool_read(kp__ox_graph *g, kp__ox_gnode *n, kp__ox_pool_params *p,
                               kp__ox_spatial *s) {
    kp__ox_value *x = kp__ox_in(g, n, 0);
    int mode = kp__pool_mode(n);
    int64_t ceil_mode, cip;
    const int64_t *k;
    size_t nk;
    if (!x) return kp__ox_node_error(n, KP_ERR_PARSE, "input X is missing");
    bool ints = mode == KP__OX_POOL_MAX && (x->dtype == KP_U8 || x->dtype == KP_I8);
    if (x->dtype != KP_F32 && !ints)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "X has dtype %s", kp_dtype_name(x->dtype));
    if (x->ndim < 3 || x->ndim > 5)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "X has rank %d (3 to 5 are supported)",
                                 x->ndim);
    if (mode == KP__OX_POOL_MAX && n->n_out > 1 && kp__ox_out(g, n, 1))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the Indices output is not supported");
    KP_CHECK(kp__ox_attr_ints(n, "kernel_shape", &k, &nk));
    if (!k || nk != (size_t)(x->ndim - 2))
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "kernel_shape needs %d values", x->ndim - 2);
    KP_CHECK(kp__ox_attr_int(n, "ceil_mode", 0, &ceil_mode));
    KP_CHECK(kp__ox_attr_int(n, "count_include_pad", 0, &cip));
    KP_CHECK(kp__ox_spatial_infer(n, x->ndim - 2, x->shape + 2, k, ceil_mode != 0, s));
    memset(p, 0, sizeof *p);
    kp__ox_spatial_win(s, 1, &p->w);
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - s->nsp);
        p->pad_end[i] = j >= 0 ? (int32_t)s->pad_end[j] : 0;
    }
    int64_t pv = 2;
    const kp__ox_attr *pa = kp__ox_attr_find(n, "p");
    if (mode == KP__OX_POOL_LP && pa && pa->type == KP__OX_ATTR_FLOAT) /* LpPool-1's p is a float */
        pv = (int64_t)pa->f;
    else if (mode == KP__OX_POOL_LP)
        KP_CHECK(kp__ox_attr_int(n, "p", 2, &pv));
    if (mode == KP__OX_POOL_LP && pv < 1)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "p = %lld", (long long)pv);
    p->mode = mode;
    p->dtype = (int32_t)x->dtype;
    p->count_include_pad = cip != 0;
    p->p = (float)pv;
    p->x = x->data;
    return KP_OK;
}

static kp_status kp__pool_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_pool_params p;
    kp__ox_spatial s;
    KP_CHECK(kp__pool_read(g, n, &p, &s));
    kp__ox_value *x = kp__ox_in(g, n, 0);
    int64_t shape[5] = {x->shape[0], x->shape[1]};
    for (int i = 0; i < s.nsp; i++) shape[2 + i] = s.out[i];
    return kp__ox_set_out(g, n, 0, x->dtype, x->ndim, shape);
}

static kp_status kp__pool_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_pool_params p;
    kp__ox_spatial s;
    KP_CHECK(kp__pool_read(g, n, &p, &s));
    kp__ox_value *y = kp__ox_out(g, n, 0);
    p.y = y->data;
    p.n = y->numel;
    return kp__ox_launch(x, &kp__ox_k_pool, (uint64_t)p.n, &p);
}

static kp_status kp__global_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    KP_CHECK(kp__f32_in(g, n, 0, 3, &x));
    if (!kp__ox_fits32(x->shape[0] * x->shape[1]))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "too many channels");
    int64_t shape[KP_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = i < 2 ? x->shape[i] : 1;
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, shape);
}

static kp_status kp__global_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *v = kp__ox_in(g, n, 0), *y = kp__ox_out(g, n, 0);
    kp__ox_plane_params p = {
        .x = v->data, .y = y->data, .planes = v->shape[0] * v->shape[1], .size = kp__inner(v),
        .channels = v->shape[1],
        .mode = strcmp(n->src->op_type, "GlobalMaxPool") ? KP__OX_PLANE_AVG : KP__OX_PLANE_MAX};
    return kp__plane_launch(x, &p);
}

/* --- normalizations and LRN -------------------------------------------------------------- */

static kp_status kp__bn_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    int64_t training, spatial;
    KP_CHECK(kp__f32_in(g, n, 0, 2, &x));
    KP_CHECK(kp__ox_attr_int(n, "training_mode", 0, &training));
    KP_CHECK(kp__ox_attr_int(n, "spatial", 1, &spatial));
    if (training)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "training_mode=1 is not supported");
    if (!spatial) return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "spatial=0 is not supported");
    for (size_t i = 1; i < n->n_out; i++)
        if (kp__ox_out(g, n, i))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                     "the training outputs (running statistics) are not supported");
    KP_CHECK(kp__channel_vecs(g, n, 1, 4, x->shape[1]));
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape);
}

static kp_status kp__bn_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *v = kp__ox_in(g, n, 0), *y = kp__ox_out(g, n, 0);
    kp__ox_bn_params p = {.x = v->data, .scale = kp__ox_in(g, n, 1)->data,
                          .bias = kp__ox_in(g, n, 2)->data, .mean = kp__ox_in(g, n, 3)->data,
                          .var = kp__ox_in(g, n, 4)->data, .y = y->data, .n = v->numel,
                          .channels = v->shape[1], .inner = kp__inner(v)};
    KP_CHECK(kp__ox_attr_float(n, "epsilon", 1e-5f, &p.eps));
    if (p.n == 0) return KP_OK;
    return kp__ox_launch(x, &kp__ox_k_bn, (uint64_t)p.n, &p);
}

static kp_status kp__inorm_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    KP_CHECK(kp__f32_in(g, n, 0, 3, &x));
    KP_CHECK(kp__channel_vecs(g, n, 1, 2, x->shape[1]));
    if (!kp__ox_fits32(x->shape[0] * x->shape[1]))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "too many channels");
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape);
}

static kp_status kp__inorm_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *v = kp__ox_in(g, n, 0), *y = kp__ox_out(g, n, 0);
    kp__ox_plane_params p = {.x = v->data, .scale = kp__ox_in(g, n, 1)->data,
                             .bias = kp__ox_in(g, n, 2)->data, .y = y->data,
                             .planes = v->shape[0] * v->shape[1], .size = kp__inner(v),
                             .channels = v->shape[1], .mode = KP__OX_PLANE_INORM};
    KP_CHECK(kp__ox_attr_float(n, "epsilon", 1e-5f, &p.eps));
    return kp__plane_launch(x, &p);
}

static kp_status kp__lrn_read(kp__ox_graph *g, kp__ox_gnode *n, kp__ox_lrn_params *p) {
    kp__ox_value *x = NULL;
    int64_t size;
    KP_CHECK(kp__f32_in(g, n, 0, 2, &x));
    KP_CHECK(kp__ox_attr_int(n, "size", 0, &size));
    if (size < 1 || size > INT32_MAX)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "size %lld is out of range", (long long)size);
    *p = (kp__ox_lrn_params){.x = x->data, .n = x->numel, .channels = x->shape[1],
                             .inner = kp__inner(x), .size = (int32_t)size};
    KP_CHECK(kp__ox_attr_float(n, "alpha", 1e-4f, &p->alpha));
    KP_CHECK(kp__ox_attr_float(n, "beta", 0.75f, &p->beta));
    return kp__ox_attr_float(n, "bias", 1.0f, &p->bias);
}

static kp_status kp__lrn_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_lrn_params p;
    KP_CHECK(kp__lrn_read(g, n, &p));
    kp__ox_value *x = kp__ox_in(g, n, 0);
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape);
}

static kp_status kp__lrn_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_lrn_params p;
    KP_CHECK(kp__lrn_read(g, n, &p));
    p.y = kp__ox_out(g, n, 0)->data;
    if (p.n == 0) return KP_OK;
    return kp__ox_launch(x, &kp__ox_k_lrn, (uint64_t)p.n, &p);
}

/* --- Resize and Upsample ---------------------------------------------------------------- */

static int kp__pick(const char *s, const char *const *names) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Upsample, and Resize before opset 11, map coordinates as `asymmetric`
 * and pick nearest neighbours the way those versions did. */
static bool kp__resize_old(const kp__ox_gnode *n) {
    return !strcmp(n->src->op_type, "Upsample") || n->opset < 11;
}

static kp_status kp__resize_modes(const kp__ox_gnode *n, kp__ox_resize_params *p) {
    static const char *const modes[] = {"nearest", "linear", "cubic", "bilinear", NULL};
    static const char *const ctms[] = {"half_pixel",           "asymmetric",
                                       "align_corners",        "pytorch_half_pixel",
                                       "tf_half_pixel_for_nn", "half_pixel_symmetric",
                                       NULL};
    static const char *const nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil", NULL};
    const char *s;
    bool old = kp__resize_old(n);
    KP_CHECK(kp__ox_attr_str(n, "mode", "nearest", &s));
    p->mode = kp__pick(s, modes);
    if (p->mode == 3) p->mode = KP__OX_RESIZE_LINEAR;
    if (p->mode < 0 || (old && p->mode == KP__OX_RESIZE_CUBIC))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "mode '%s' is not supported", s);
    p->cubic_a = -0.75f;
    if (old) {
        p->ctm = KP__OX_CTM_ASYMMETRIC;
        p->nearest = KP__OX_NEAREST_SIMPLE;
        return KP_OK;
    }
    int64_t excl, anti;
    KP_CHECK(kp__ox_attr_str(n, "coordinate_transformation_mode", "half_pixel", &s));
    if ((p->ctm = kp__pick(s, ctms)) < 0)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "coordinate_transformation_mode '%s' is not supported", s);
    KP_CHECK(kp__ox_attr_str(n, "nearest_mode", "round_prefer_floor", &s));
    if ((p->nearest = kp__pick(s, nearest)) < 0)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "nearest_mode '%s' is not supported", s);
    KP_CHECK(kp__ox_attr_float(n, "cubic_coeff_a", -0.75f, &p->cubic_a));
    KP_CHECK(kp__ox_attr_int(n, "exclude_outside", 0, &excl));
    KP_CHECK(kp__ox_attr_int(n, "antialias", 0, &anti));
    if (anti) return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "antialias=1 is not supported");
    p->exclude_outside = excl != 0;
    return KP_OK;
}

/* The resized axes (opset 18's `axes`, else all), ascending positions. */
static kp_status kp__resize_axes(const kp__ox_gnode *n, int rank, int *axes, size_t *count) {
    const int64_t *v = NULL;
    size_t cnt = 0;
    if (!kp__resize_old(n)) KP_CHECK(kp__ox_attr_ints(n, "axes", &v, &cnt));
    if (!v) {
        for (int i = 0; i < rank; i++) axes[i] = i;
        *count = (size_t)rank;
        return KP_OK;
    }
    if (cnt > (size_t)rank) return kp__ox_node_error(n, KP_ERR_MISMATCH, "too many axes");
    for (size_t i = 0; i < cnt; i++) {
        KP_CHECK(kp__ox_axis(n, v[i], rank, &axes[i]));
        for (size_t j = 0; j < i; j++)
            if (axes[j] == axes[i])
                return kp__ox_node_error(n, KP_ERR_MISMATCH, "axis %d repeats", axes[i]);
    }
    *count = cnt;
    return KP_OK;
}

/* The scales (as floats) or sizes the node gives, constant. */
static kp_status kp__resize_inputs(kp__ox_graph *g, const kp__ox_gnode *n, const float **sc,
                                   const int64_t **sz, int64_t *buf, size_t *count) {
    bool upsample = !strcmp(n->src->op_type, "Upsample");
    *sc = NULL;
    *sz = NULL;
    *count = 0;
    if (upsample && n->opset < 9) return kp__ox_attr_floats(n, "scales", sc, count);
    size_t si = kp__resize_old(n) ? 1 : 2;
    kp__ox_value *v = kp__ox_in(g, n, si);
    if (v && v->numel > 0) {
        if (!v->host || v->dtype != KP_F32)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "scales must be a constant f32 tensor");
        *sc = v->host;
        *count = (size_t)v->numel;
        return KP_OK;
    }
    v = kp__resize_old(n) ? NULL : kp__ox_in(g, n, 3);
    if (v && v->numel > 0) return kp__ox_const_ints(g, n, 3, buf, KP_MAX_DIMS, sz, count);
    return kp__ox_node_error(n, KP_ERR_MISMATCH, "needs scales or sizes");
}

/* Output extents and scales per axis from the node's scales or sizes. */
static kp_status kp__resize_extents(kp__ox_graph *g, const kp__ox_gnode *n, const int64_t *in,
                                    int rank, int64_t *out, double *scale) {
    int axes[KP_MAX_DIMS];
    size_t na = 0, cnt = 0;
    const float *sc;
    const int64_t *sz;
    int64_t buf[KP_MAX_DIMS];
    const char *policy = "stretch";
    KP_CHECK(kp__resize_axes(n, rank, axes, &na));
    KP_CHECK(kp__resize_inputs(g, n, &sc, &sz, buf, &cnt));
    if (cnt != na)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "%zu scales or sizes for %zu axes", cnt, na);
    if (n->opset >= 18 && !kp__resize_old(n))
        KP_CHECK(kp__ox_attr_str(n, "keep_aspect_ratio_policy", "stretch", &policy));
    int pol = kp__pick(policy, (const char *const[]){"stretch", "not_larger", "not_smaller", NULL});
    if (pol < 0)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "keep_aspect_ratio_policy '%s'", policy);
    for (int d = 0; d < rank; d++) {
        out[d] = in[d];
        scale[d] = 1.0;
    }
    double keep = pol == 1 ? 1e300 : 0.0;
    for (size_t a = 0; a < na; a++) {
        int d = axes[a];
        double s = sc ? (double)sc[a] : in[d] > 0 ? (double)sz[a] / (double)in[d] : 1.0;
        if (!(s > 0.0) || (sz && sz[a] < 0) || s > 1e9)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "scale %g of axis %d is out of range", s,
                                     d);
        scale[d] = s;
        out[d] = sc ? (int64_t)floor(s * (double)in[d]) : sz[a];
        keep = pol == 1 ? (s < keep ? s : keep) : (s > keep ? s : keep);
    }
    for (size_t a = 0; pol != 0 && a < na; a++) {
        scale[axes[a]] = keep;
        out[axes[a]] = (int64_t)floor(keep * (double)in[axes[a]] + 0.5);
    }
    return KP_OK;
}

static kp_status kp__resize_read(kp__ox_graph *g, kp__ox_gnode *n, kp__ox_resize_params *p) {
    kp__ox_value *x = NULL;
    double scale[KP_MAX_DIMS];
    KP_CHECK(kp__f32_in(g, n, 0, 1, &x));
    memset(p, 0, sizeof *p);
    KP_CHECK(kp__resize_modes(n, p));
    KP_CHECK(kp__resize_extents(g, n, x->shape, x->ndim, p->out_shape, scale));
    p->ndim = x->ndim;
    p->x = x->data;
    for (int d = 0; d < x->ndim; d++) {
        p->in_shape[d] = x->shape[d];
        if (p->out_shape[d] == x->shape[d] && scale[d] == 1.0 &&
            p->ctm != KP__OX_CTM_TF_HALF_PIXEL_FOR_NN)
            continue; /* an axis that maps onto itself */
        if (p->naxes == KP__OX_RESIZE_AXES)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "more than %d axes are resized",
                                     KP__OX_RESIZE_AXES);
        if (x->shape[d] == 0 && p->out_shape[d] > 0)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "axis %d is empty", d);
        p->axis[p->naxes] = d;
        p->scale[p->naxes++] = scale[d];
    }
    return KP_OK;
}

static kp_status kp__resize_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_resize_params p;
    KP_CHECK(kp__resize_read(g, n, &p));
    return kp__ox_set_out(g, n, 0, KP_F32, p.ndim, p.out_shape);
}

static kp_status kp__resize_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_resize_params p;
    KP_CHECK(kp__resize_read(g, n, &p));
    kp__ox_value *y = kp__ox_out(g, n, 0);
    p.y = y->data;
    p.n = y->numel;
    if (p.n == 0) return KP_OK;
    return kp__ox_launch(x, &kp__ox_k_resize, (uint64_t)p.n, &p);
}

/* Resize's scales, sizes and roi, and Upsample's scales, are read on the host. */
static bool kp__resize_host_input(int i) { return i >= 1; }

/* --- the family's table ------------------------------------------------------------------ */

#define KP__OP(op, from, inf, rn) {.name = op, .since = from, .infer = inf, .run = rn}

const kp__ox_op kp__ox_ops_nn[] = {
    {.name = "Conv", .since = 1, .infer = kp__ox_conv_infer, .run = kp__ox_conv_run,
     .prepare = kp__ox_conv_prepare, .release = kp__ox_conv_release,
     .describe = kp__ox_conv_describe},
    {.name = "ConvTranspose", .since = 1, .infer = kp__ox_convt_infer, .run = kp__ox_convt_run,
     .prepare = kp__ox_convt_prepare, .release = kp__ox_conv_release,
     .describe = kp__ox_conv_describe},
    {.name = "Gemm", .since = 1, .infer = kp__ox_gemm_infer, .run = kp__ox_gemm_op_run,
     .prepare = kp__ox_blas_prepare},
    {.name = "MatMul", .since = 1, .infer = kp__ox_matmul_infer, .run = kp__ox_matmul_run,
     .prepare = kp__ox_blas_prepare},
    KP__OP("MaxPool", 1, kp__pool_infer, kp__pool_run),
    KP__OP("AveragePool", 1, kp__pool_infer, kp__pool_run),
    KP__OP("LpPool", 1, kp__pool_infer, kp__pool_run),
    KP__OP("GlobalAveragePool", 1, kp__global_infer, kp__global_run),
    KP__OP("GlobalMaxPool", 1, kp__global_infer, kp__global_run),
    KP__OP("BatchNormalization", 1, kp__bn_infer, kp__bn_run),
    KP__OP("InstanceNormalization", 1, kp__inorm_infer, kp__inorm_run),
    KP__OP("LRN", 1, kp__lrn_infer, kp__lrn_run),
    {.name = "Upsample", .since = 7, .infer = kp__resize_infer, .run = kp__resize_run,
     .host_input = kp__resize_host_input},
    {.name = "Resize", .since = 10, .infer = kp__resize_infer, .run = kp__resize_run,
     .host_input = kp__resize_host_input},
    {.name = NULL}};
