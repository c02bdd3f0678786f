/* The neural-network family's kernels, as both their host forms (ops_nn.c,
 * ops_conv.c, ops_gemm.c) and their cuda forms (ops_nn.cu) compute them:
 * parameter structs and per-element functions, one text for both.
 *
 * Spatial operators see every input as three spatial dimensions (depth,
 * height, width): a 1-D or 2-D operator gets leading dimensions of size
 * one, kernel one, stride one and no padding, so one code path serves all
 * ranks. Sizes that fit the kernels' 32-bit fields are checked when the
 * operator's shapes are inferred. */
#ifndef KPIPE_ONNX_NN_KERNELS_H
#define KPIPE_ONNX_NN_KERNELS_H

#include "../kernels-impl.h"
#include "../../../core/half-impl.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* --- sliding windows: convolutions and pools ------------------------------------ */

/* The geometry of a convolution over one image, as im2col sees it: the
 * columns are output positions, the rows (channel, kernel position). For a
 * transposed convolution the same struct describes the forward convolution
 * it is the adjoint of: `in` is the transposed one's output. */
typedef struct kp__ox_win {
    int32_t c;         /* channels the rows cover */
    int32_t in[3];     /* image extent (d, h, w) */
    int32_t out[3];    /* output positions (d, h, w) */
    int32_t k[3];      /* kernel extent */
    int32_t stride[3];
    int32_t pad[3];    /* leading padding */
    int32_t dil[3];
} kp__ox_win;

static inline KP__HD int64_t kp__ox_win_kk(const kp__ox_win *w) {
    return (int64_t)w->k[0] * w->k[1] * w->k[2];
}

static inline KP__HD int64_t kp__ox_win_in_size(const kp__ox_win *w) {
    return (int64_t)w->in[0] * w->in[1] * w->in[2];
}

static inline KP__HD int64_t kp__ox_win_out_size(const kp__ox_win *w) {
    return (int64_t)w->out[0] * w->out[1] * w->out[2];
}

/* Element (row, col) of the im2col matrix of `img` (one image, or one
 * group's channels of it): zero where the window reaches into padding. */
static inline KP__HD float kp__ox_im2col_at(const kp__ox_win *w, const float *img, int64_t row,
                                            int64_t col) {
    int64_t kx = row % w->k[2], t = row / w->k[2];
    int64_t ky = t % w->k[1];
    t /= w->k[1];
    int64_t kz = t % w->k[0], c = t / w->k[0];
    int64_t ox = col % w->out[2], u = col / w->out[2];
    int64_t oy = u % w->out[1], oz = u / w->out[1];
    int64_t iz = oz * w->stride[0] - w->pad[0] + kz * w->dil[0];
    int64_t iy = oy * w->stride[1] - w->pad[1] + ky * w->dil[1];
    int64_t ix = ox * w->stride[2] - w->pad[2] + kx * w->dil[2];
    if (iz < 0 || iz >= w->in[0] || iy < 0 || iy >= w->in[1] || ix < 0 || ix >= w->in[2]) return 0.0f;
    return img[((c * w->in[0] + iz) * w->in[1] + iy) * w->in[2] + ix];
}

/* One axis of col2im: the kernel tap `k` reaches output coordinate `o`
 * from input position *i when (o + pad - k*dil) is a multiple of the
 * stride inside [0, n). */
static inline KP__HD bool kp__ox_col2im_tap(int64_t o, int64_t k, int32_t stride, int32_t pad,
                                           int32_t dil, int32_t n, int64_t *i) {
    int64_t v = o + pad - k * dil;
    if (v < 0 || v % stride != 0) return false;
    *i = v / stride;
    return *i < n;
}

/* The sum col2im gives image element `e` (channel, d, h, w) from the
 * columns [col0, col0 + ncols) of `cols` (ncols columns a row): the
 * adjoint of im2col over those columns. */
static inline KP__HD float kp__ox_col2im_at(const kp__ox_win *w, const float *cols, int64_t col0,
                                            int64_t ncols, int64_t e) {
    int64_t x = e % w->in[2], t = e / w->in[2];
    int64_t y = t % w->in[1];
    t /= w->in[1];
    int64_t z = t % w->in[0], c = t / w->in[0];
    float sum = 0.0f;
    for (int64_t kz = 0; kz < w->k[0]; kz++) {
        int64_t iz, iy, ix;
        if (!kp__ox_col2im_tap(z, kz, w->stride[0], w->pad[0], w->dil[0], w->out[0], &iz)) continue;
        for (int64_t ky = 0; ky < w->k[1]; ky++) {
            if (!kp__ox_col2im_tap(y, ky, w->stride[1], w->pad[1], w->dil[1], w->out[1], &iy))
                continue;
            for (int64_t kx = 0; kx < w->k[2]; kx++) {
                if (!kp__ox_col2im_tap(x, kx, w->stride[2], w->pad[2], w->dil[2], w->out[2], &ix))
                    continue;
                int64_t col = (iz * w->out[1] + iy) * w->out[2] + ix - col0;
                if (col < 0 || col >= ncols) continue;
                int64_t row = ((c * w->k[0] + kz) * w->k[1] + ky) * w->k[2] + kx;
                sum += cols[row * ncols + col];
            }
        }
    }
    return sum;
}

/* im2col of columns [col0, col0 + ncols) of every image channel into
 * cols (rows x ncols); the cuda fallback of Conv. */
typedef struct kp__ox_im2col_params {
    kp__ox_win w;      /* w.c: all channels (every group) */
    const float *img;  /* one image */
    float *cols;
    int64_t col0, ncols;
} kp__ox_im2col_params;

/* col2im: image[e] += the columns' sum; ConvTranspose's fallback. */
typedef struct kp__ox_col2im_params {
    kp__ox_win w;      /* w.c: all output channels */
    const float *cols;
    float *img;        /* one output image */
    int64_t col0, ncols;
} kp__ox_col2im_params;

static inline KP__HD void kp__ox_im2col_item(const kp__ox_im2col_params *p, int64_t i) {
    p->cols[i] = kp__ox_im2col_at(&p->w, p->img, i / p->ncols, p->col0 + i % p->ncols);
}

static inline KP__HD void kp__ox_col2im_item(const kp__ox_col2im_params *p, int64_t i) {
    p->img[i] += kp__ox_col2im_at(&p->w, p->cols, p->col0, p->ncols, i);
}

/* Pools. `mode`: */
enum { KP__OX_POOL_MAX = 0, KP__OX_POOL_AVG = 1, KP__OX_POOL_LP = 2 };

typedef struct kp__ox_pool_params {
    kp__ox_win w;       /* w.c unused; planes below */
    int32_t pad_end[3]; /* trailing padding (count_include_pad's divisor) */
    int32_t mode;
    int32_t dtype;      /* kp_dtype: f32; u8, i8 for max */
    int32_t count_include_pad;
    float p;            /* LpPool's order */
    const void *x;
    void *y;
    int64_t n;          /* output elements: planes x output positions */
} kp__ox_pool_params;

/* The window of output position `o` along one axis: the taps [*k0, *k1)
 * that land inside the input, and how many land inside input plus padding. */
/* The taps [*lo, *hi) of a window starting at `start` (step `dil`, k taps)
 * that land in [begin, end). */
static inline KP__HD void kp__ox_taps_in(int64_t start, int64_t dil, int64_t k, int64_t begin,
                                         int64_t end, int64_t *lo, int64_t *hi) {
    int64_t l = start >= begin ? 0 : dil == 1 ? begin - start : (begin - start + dil - 1) / dil;
    int64_t h = end <= start ? 0 : dil == 1 ? end - start : (end - start + dil - 1) / dil;
    if (h > k) h = k;
    *lo = l;
    *hi = h > l ? h : l;
}

static inline KP__HD void kp__ox_pool_axis(const kp__ox_win *w, const int32_t *pad_end, int a,
                                          int64_t o, int64_t *k0, int64_t *k1, int64_t *padded) {
    int64_t start = o * w->stride[a] - w->pad[a], plo, phi;
    kp__ox_taps_in(start, w->dil[a], w->k[a], 0, w->in[a], k0, k1);
    kp__ox_taps_in(start, w->dil[a], w->k[a], -(int64_t)w->pad[a],
                   (int64_t)w->in[a] + pad_end[a], &plo, &phi);
    *padded = phi - plo;
}

static inline KP__HD float kp__ox_pool_load(const kp__ox_pool_params *p, int64_t i) {
    if (p->dtype == KP_U8) return (float)((const uint8_t *)p->x)[i];
    if (p->dtype == KP_I8) return (float)((const int8_t *)p->x)[i];
    return ((const float *)p->x)[i];
}

/* Output element e of a pool, at output position (oz, oy, ox) of `plane`. */
static inline KP__HD void kp__ox_pool_pos(const kp__ox_pool_params *p, int64_t e, int64_t plane,
                                          int64_t oz, int64_t oy, int64_t ox) {
    const kp__ox_win *w = &p->w;
    int64_t z0, z1, y0, y1, x0, x1, cz, cy, cx;
    kp__ox_pool_axis(w, p->pad_end, 0, oz, &z0, &z1, &cz);
    kp__ox_pool_axis(w, p->pad_end, 1, oy, &y0, &y1, &cy);
    kp__ox_pool_axis(w, p->pad_end, 2, ox, &x0, &x1, &cx);
    int64_t base = plane * kp__ox_win_in_size(w);
    int64_t sz = oz * w->stride[0] - w->pad[0], sy = oy * w->stride[1] - w->pad[1],
            sx = ox * w->stride[2] - w->pad[2];
    float acc = p->mode == KP__OX_POOL_MAX ? -INFINITY : 0.0f;
    int64_t count = (z1 - z0) * (y1 - y0) * (x1 - x0);
    bool fast = p->dtype == KP_F32 && p->mode != KP__OX_POOL_LP;
    int nan = 0;
    const float *xf = (const float *)p->x;
    for (int64_t kz = z0; kz < z1; kz++)
        for (int64_t ky = y0; ky < y1; ky++) {
            int64_t row = base + ((sz + kz * w->dil[0]) * w->in[1] + sy + ky * w->dil[1]) * w->in[2];
            const float *r = xf + row + sx;
            /* f32 max and average, the common pools, loop without per-tap branches */
            if (fast && p->mode == KP__OX_POOL_MAX) {
                /* Branch-free: a data-dependent branch per tap mispredicts. */
                for (int64_t kx = x0; kx < x1; kx++) {
                    float v = r[kx * w->dil[2]];
                    nan |= v != v;
                    acc = v > acc ? v : acc;
                }
            } else if (fast) {
                for (int64_t kx = x0; kx < x1; kx++) acc += r[kx * w->dil[2]];
            } else {
                for (int64_t kx = x0; kx < x1; kx++) {
                    float v = kp__ox_pool_load(p, row + sx + kx * w->dil[2]);
                    if (p->mode == KP__OX_POOL_MAX)
                        acc = v > acc || v != v ? v : acc;
                    else if (p->mode == KP__OX_POOL_AVG)
                        acc += v;
                    else
                        acc += powf(fabsf(v), p->p);
                }
            }
        }
    if (nan) acc = NAN;
    if (p->mode == KP__OX_POOL_MAX && count == 0 && p->dtype != KP_F32) {
        acc = 0.0f; /* an all-padding window: no value to convert */
    } else if (p->mode == KP__OX_POOL_AVG) {
        int64_t div = p->count_include_pad ? cz * cy * cx : count;
        acc = div > 0 ? acc / (float)div : 0.0f;
    } else if (p->mode == KP__OX_POOL_LP) {
        acc = powf(acc, 1.0f / p->p);
    }
    if (p->dtype == KP_U8)
        ((uint8_t *)p->y)[e] = (uint8_t)acc;
    else if (p->dtype == KP_I8)
        ((int8_t *)p->y)[e] = (int8_t)acc;
    else
        ((float *)p->y)[e] = acc;
}

static inline KP__HD void kp__ox_pool_at(const kp__ox_pool_params *p, int64_t e) {
    const kp__ox_win *w = &p->w;
    int64_t ox = e % w->out[2], t = e / w->out[2];
    int64_t oy = t % w->out[1];
    t /= w->out[1];
    kp__ox_pool_pos(p, e, t / w->out[0], t % w->out[0], oy, ox);
}

/* --- per-channel and per-plane operators ----------------------------------------- */

/* BatchNormalization (inference): y = (x - mean) * scale / sqrt(var + eps) + b,
 * channel c = (i / inner) % channels. */
typedef struct kp__ox_bn_params {
    const float *x, *scale, *bias, *mean, *var;
    float *y;
    int64_t n, channels, inner;
    float eps;
} kp__ox_bn_params;

static inline KP__HD void kp__ox_bn_at(const kp__ox_bn_params *p, int64_t i) {
    int64_t c = (i / p->inner) % p->channels;
    float a = p->scale[c] / sqrtf(p->var[c] + p->eps);
    p->y[i] = (p->x[i] - p->mean[c]) * a + p->bias[c];
}

/* y = x + bias[c] (or y = bias[c] when `set`), c = (i / inner) % channels;
 * a NULL bias adds nothing (sets zero). A convolution's fused epilogue
 * (onnx/fuse.c) rides on the same pass: `add` (a residual of y's shape) is
 * added next, and the activation `act` (KP__OX_ACT_*) applies last. */
typedef struct kp__ox_bias_params {
    const float *bias;
    const float *add;
    const float *slope; /* PRelu's, one per channel */
    float *y;
    int64_t n, channels, inner;
    int32_t set, act;
    float act_a, act_b;
} kp__ox_bias_params;

static inline KP__HD void kp__ox_bias_at(const kp__ox_bias_params *p, int64_t i) {
    int64_t c = (i / p->inner) % p->channels;
    float b = p->bias ? p->bias[c] : 0.0f;
    float v = p->set ? b : p->y[i] + b;
    if (p->add) v += p->add[i];
    p->y[i] = kp__ox_act_apply(p->act, v, p->act_a, p->act_b, p->slope ? p->slope[c] : 0.0f);
}

/* --- fp16 convolutions ("precision": "fp16", onnx/half.c) -------------------------- */

/* The side of the transposing tiles of the cuda forms. */
#define KP__OX_TILE 32

/* Item i of an NCHW tensor of `c` channels and `hw` positions per image,
 * as the index of the same element in NHWC order. */
static inline KP__HD int64_t kp__ox_nhwc_of(int64_t i, int64_t c, int64_t hw) {
    int64_t q = i % hw, r = i / hw;
    return ((r / c) * hw + q) * c + r % c;
}

/* f32 NCHW -> f16 NHWC: a convolution's input (or residual) on its way in,
 * with `cpad` >= c channels in the output, those past c zero. Item i is the
 * output's element. */
typedef struct kp__ox_to_half_params {
    const float *x;
    uint16_t *y;
    int64_t n, c, cpad, hw; /* n: output elements (images x hw x cpad) */
} kp__ox_to_half_params;

static inline KP__HD void kp__ox_to_half_at(const kp__ox_to_half_params *p, int64_t i) {
    int64_t c = i % p->cpad, r = i / p->cpad, q = r % p->hw, b = r / p->hw;
    p->y[i] = c < p->c ? kp__f16_of(p->x[(b * p->c + c) * p->hw + q]) : 0;
}

/* An fp16 convolution's epilogue: v = acc + bias[c] (+ the residual), then
 * the activation, in fp32; acc is cuDNN's product (f16 NHWC). The result
 * goes to y16 (f16 NHWC, which may be acc itself) or to y32 (f32 NCHW, the
 * model's layout for a reader that is not an fp16 convolution). The
 * residual is z16 (f16 NHWC) or z32 (f32 NCHW). Item i walks the output's
 * own order. These per-element forms are the host's and the reference;
 * the cuda forms (ops_nn.cu) compute the same values eight channels at a
 * time (f16 out) or through a transposing tile (f32 out), and so does the
 * staging kernel (kp__ox_to_half_at). */
typedef struct kp__ox_epilogue16_params {
    const uint16_t *acc, *z16;
    const uint16_t *bias16; /* an f16 bias (the fused call's, when cuDNN refused it) */
    const float *bias, *slope, *z32;
    uint16_t *y16;
    float *y32;
    int64_t n, c, hw;
    int32_t act;
    float act_a, act_b;
} kp__ox_epilogue16_params;

/* The epilogue of one element: the product `v` of channel ch, plus the
 * bias and the residual `z` (0 for none), then the activation. */
static inline KP__HD float kp__ox_epilogue16_value(const kp__ox_epilogue16_params *p, float v,
                                                   int64_t ch, float z) {
    v += (p->bias ? p->bias[ch] : p->bias16 ? kp__f32_of(p->bias16[ch]) : 0.0f) + z;
    return kp__ox_act_apply(p->act, v, p->act_a, p->act_b, p->slope ? p->slope[ch] : 0.0f);
}

static inline KP__HD void kp__ox_epilogue16_at(const kp__ox_epilogue16_params *p, int64_t i) {
    int64_t nhwc = p->y16 ? i : kp__ox_nhwc_of(i, p->c, p->hw), ch = nhwc % p->c;
    float z = 0.0f;
    if (p->z16) z = kp__f32_of(p->z16[nhwc]);
    if (p->z32) {
        /* the NCHW index of element nhwc */
        int64_t q = (nhwc / p->c) % p->hw, b = nhwc / (p->c * p->hw);
        z = p->z32[(b * p->c + ch) * p->hw + q];
    }
    float v = kp__ox_epilogue16_value(p, kp__f32_of(p->acc[nhwc]), ch, z);
    if (p->y16) p->y16[i] = kp__f16_of(v);
    else p->y32[i] = v;
}

/* y[i, j] = beta * c[i * c_rs + j * c_cs] over rows x cols: Gemm's C,
 * broadcast (a stride of 0) into the output before the product adds to it. */
typedef struct kp__ox_fill_params {
    const float *c;
    float *y;
    int64_t n, cols, c_rs, c_cs;
    float beta;
} kp__ox_fill_params;

static inline KP__HD void kp__ox_fill_at(const kp__ox_fill_params *p, int64_t i) {
    int64_t r = i / p->cols, q = i - r * p->cols;
    p->y[i] = p->beta * p->c[r * p->c_rs + q * p->c_cs];
}

/* LRN across channels: y = x / (bias + alpha / size * sum x^2)^beta, the sum
 * over channels [c - (size-1)/2, c + size/2] that exist. */
typedef struct kp__ox_lrn_params {
    const float *x;
    float *y;
    int64_t n, channels, inner;
    int32_t size;
    float alpha, beta, bias;
} kp__ox_lrn_params;

static inline KP__HD void kp__ox_lrn_at(const kp__ox_lrn_params *p, int64_t i) {
    int64_t c = (i / p->inner) % p->channels;
    int64_t lo = c - (p->size - 1) / 2, hi = c + p->size / 2;
    if (lo < 0) lo = 0;
    if (hi > p->channels - 1) hi = p->channels - 1;
    float sum = 0.0f;
    for (int64_t k = lo; k <= hi; k++) {
        float v = p->x[i + (k - c) * p->inner];
        sum += v * v;
    }
    p->y[i] = p->x[i] / powf(p->bias + p->alpha / (float)p->size * sum, p->beta);
}

/* Per-plane reductions, one plane (a channel of one image) per block:
 * GlobalAveragePool, GlobalMaxPool, InstanceNormalization. */
enum { KP__OX_PLANE_AVG = 0, KP__OX_PLANE_MAX = 1, KP__OX_PLANE_INORM = 2 };

typedef struct kp__ox_plane_params {
    const float *x, *scale, *bias; /* scale, bias: InstanceNormalization's */
    float *y;
    int64_t planes, size, channels;
    int32_t mode;
    float eps;
} kp__ox_plane_params;

/* InstanceNormalization of one element, given its plane's statistics. */
static inline KP__HD float kp__ox_inorm_apply(const kp__ox_plane_params *p, int64_t plane,
                                              float v, float mean, float var) {
    int64_t c = plane % p->channels;
    return (v - mean) * (p->scale[c] / sqrtf(var + p->eps)) + p->bias[c];
}

/* --- Resize and Upsample ------------------------------------------------------- */

enum { KP__OX_RESIZE_NEAREST = 0, KP__OX_RESIZE_LINEAR = 1, KP__OX_RESIZE_CUBIC = 2 };
/* coordinate_transformation_mode */
enum {
    KP__OX_CTM_HALF_PIXEL = 0,
    KP__OX_CTM_ASYMMETRIC,
    KP__OX_CTM_ALIGN_CORNERS,
    KP__OX_CTM_PYTORCH_HALF_PIXEL,
    KP__OX_CTM_TF_HALF_PIXEL_FOR_NN,
    KP__OX_CTM_HALF_PIXEL_SYMMETRIC,
};
/* nearest_mode; SIMPLE is opset 10 and Upsample: floor, or ceil when shrinking */
enum {
    KP__OX_NEAREST_ROUND_PREFER_FLOOR = 0,
    KP__OX_NEAREST_ROUND_PREFER_CEIL,
    KP__OX_NEAREST_FLOOR,
    KP__OX_NEAREST_CEIL,
    KP__OX_NEAREST_SIMPLE,
};

/* Axes a Resize may interpolate at once (the others copy through). */
#define KP__OX_RESIZE_AXES 4

typedef struct kp__ox_resize_params {
    const float *x;
    float *y;
    int64_t n;                       /* output elements */
    int64_t in_shape[KP_MAX_DIMS], out_shape[KP_MAX_DIMS];
    int32_t ndim, naxes;
    int32_t axis[KP__OX_RESIZE_AXES]; /* the resized axes, ascending */
    double scale[KP__OX_RESIZE_AXES]; /* as the operator defines it: not out / in when given */
    int32_t mode, ctm, nearest, exclude_outside;
    float cubic_a;
} kp__ox_resize_params;

/* The input coordinate output coordinate `o` maps to along an axis. The
 * resized length is scale * in, as the operator defines it, which is not
 * always the integer output extent. */
static inline KP__HD double kp__ox_resize_coord(int ctm, double o, double s, int64_t in,
                                                int64_t out) {
    double len = s * (double)in;
    switch (ctm) {
    case KP__OX_CTM_ASYMMETRIC: return o / s;
    case KP__OX_CTM_ALIGN_CORNERS: return len == 1.0 ? 0.0 : o * (double)(in - 1) / (len - 1.0);
    case KP__OX_CTM_PYTORCH_HALF_PIXEL: return len == 1.0 ? -0.5 : (o + 0.5) / s - 0.5;
    case KP__OX_CTM_TF_HALF_PIXEL_FOR_NN: return (o + 0.5) / s;
    case KP__OX_CTM_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)out / len, center = (double)in / 2.0;
        return center * (1.0 - adj) + (o + 0.5) / s - 0.5;
    }
    default: return (o + 0.5) / s - 0.5;
    }
}

static inline KP__HD int64_t kp__ox_clamp_i64(int64_t v, int64_t hi) {
    return v < 0 ? 0 : v > hi ? hi : v;
}

static inline KP__HD float kp__ox_cubic_w(float t, float a) {
    t = fabsf(t);
    if (t <= 1.0f) return ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
    if (t < 2.0f) return ((a * t - 5.0f * a) * t + 8.0f * a) * t - 4.0f * a;
    return 0.0f;
}

/* The nearest input index along an axis. */
static inline KP__HD int64_t kp__ox_resize_nearest(const kp__ox_resize_params *p, double c,
                                                   double scale, int64_t in) {
    double f = floor(c), r = c - f;
    int64_t i = (int64_t)f;
    if (r != 0.0) {
        switch (p->nearest) {
        case KP__OX_NEAREST_ROUND_PREFER_CEIL: i += r >= 0.5; break;
        case KP__OX_NEAREST_FLOOR: break;
        case KP__OX_NEAREST_CEIL: i += 1; break;
        case KP__OX_NEAREST_SIMPLE: i += scale < 1.0; break;
        default: i += r > 0.5; break;
        }
    }
    return kp__ox_clamp_i64(i, in - 1);
}

/* An axis' taps: *n input indices (clamped) and their weights. */
static inline KP__HD void kp__ox_resize_taps(const kp__ox_resize_params *p, double c, int64_t in,
                                            int64_t *idx, float *w, int *n) {
    double f = floor(c);
    float r = (float)(c - f);
    int64_t i0 = (int64_t)f;
    if (p->mode == KP__OX_RESIZE_LINEAR) {
        *n = 2;
        idx[0] = i0;
        idx[1] = i0 + 1;
        w[0] = 1.0f - r;
        w[1] = r;
    } else {
        *n = 4;
        for (int t = 0; t < 4; t++) {
            idx[t] = i0 - 1 + t;
            w[t] = kp__ox_cubic_w(r + 1.0f - (float)t, p->cubic_a);
        }
    }
    float sum = 0.0f;
    for (int t = 0; t < *n; t++) {
        if (p->exclude_outside && (idx[t] < 0 || idx[t] >= in)) w[t] = 0.0f;
        sum += w[t];
        idx[t] = kp__ox_clamp_i64(idx[t], in - 1);
    }
    if (p->exclude_outside && sum != 0.0f)
        for (int t = 0; t < *n; t++) w[t] /= sum;
}

/* Output element e. */
static inline KP__HD void kp__ox_resize_at(const kp__ox_resize_params *p, int64_t e) {
    int64_t coord[KP_MAX_DIMS], stride[KP_MAX_DIMS];
    int64_t rest = e, s = 1, base = 0;
    bool narrow = p->n <= (int64_t)UINT32_MAX; /* 32-bit division: cheaper on cuda */
    for (int d = p->ndim - 1; d >= 0; d--) {
        if (narrow) {
            uint32_t r = (uint32_t)rest, o = (uint32_t)p->out_shape[d];
            coord[d] = r % o;
            rest = r / o;
        } else {
            coord[d] = rest % p->out_shape[d];
            rest /= p->out_shape[d];
        }
        stride[d] = s;
        s *= p->in_shape[d];
    }
    int a = 0;
    for (int d = 0; d < p->ndim; d++) {
        if (a < p->naxes && p->axis[a] == d) {
            a++;
            continue;
        }
        base += coord[d] * stride[d];
    }
    int64_t idx[KP__OX_RESIZE_AXES][4];
    float w[KP__OX_RESIZE_AXES][4];
    int nt[KP__OX_RESIZE_AXES];
    int64_t combos = 1;
    for (a = 0; a < p->naxes; a++) {
        int d = p->axis[a];
        double c = kp__ox_resize_coord(p->ctm, (double)coord[d], p->scale[a], p->in_shape[d],
                                       p->out_shape[d]);
        if (p->mode == KP__OX_RESIZE_NEAREST) {
            base += kp__ox_resize_nearest(p, c, p->scale[a], p->in_shape[d]) * stride[d];
            nt[a] = 1;
            idx[a][0] = 0;
            w[a][0] = 1.0f;
        } else {
            kp__ox_resize_taps(p, c, p->in_shape[d], idx[a], w[a], &nt[a]);
            for (int t = 0; t < nt[a]; t++) idx[a][t] *= stride[d];
        }
        combos *= nt[a];
    }
    if (p->mode == KP__OX_RESIZE_NEAREST) {
        p->y[e] = p->x[base];
        return;
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < combos; k++) {
        int64_t off = base, q = k;
        float wt = 1.0f;
        for (a = p->naxes - 1; a >= 0; a--) {
            int t = (int)(q % nt[a]);
            q /= nt[a];
            off += idx[a][t];
            wt *= w[a][t];
        }
        sum += wt * p->x[off];
    }
    p->y[e] = sum;
}

#endif
