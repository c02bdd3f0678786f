/* Bilinear resizing, shared by the resize module's host code, its kernel
 * file and kp_resize_nv12 (kpipe/modules.h), so both
 * backends compute the same values.
 *
 * A source pixel centre maps to ((x + 0.5) * sw / dw - 0.5), clamped to
 * the picture. NV12 (u8, a pitch): luma and the interleaved chroma at half
 * size are each resized with weights in 1/1024 steps, in integers, rounded
 * to nearest. Planar RGB (f32 [3 * h * w]): weights in float, every
 * product and sum rounded on its own (no fused multiply-add). Either way
 * cuda equals cpu bit for bit. An NV12 output's pitch padding is zeroed. */
#ifndef KPIPE_RESIZE_IMPL_H
#define KPIPE_RESIZE_IMPL_H

#include <stdint.h>

#include "kpipe/device.h"
#include "kpipe/modules.h"

#define KP__RESIZE_NV12 0
#define KP__RESIZE_RGB 1

/* One resize of `frames` pictures, each in_frame / out_frame bytes apart. */
typedef struct kp__resize_args {
    const void *in;
    void *out;
    int64_t spitch, dpitch; /* NV12: bytes per row */
    int64_t in_frame, out_frame;
    int32_t sw, sh, dw, dh;
    int32_t format, frames;
    float sx, sy; /* RGB: sw / dw and sh / dh */
} kp__resize_args;

#ifdef __CUDACC__
#define KP__RHD __host__ __device__ static inline
#else
#define KP__RHD static inline
#endif
#if defined(__CUDA_ARCH__)
#define KP__RMUL(a, b) __fmul_rn((a), (b))
#define KP__RADD(a, b) __fadd_rn((a), (b))
#else
#define KP__RMUL(a, b) ((a) * (b))
#define KP__RADD(a, b) ((a) + (b))
#endif

/* Items per picture: NV12, every byte position of the luma rows plus one
 * per chroma pair (over the whole pitch, so the padding is written); RGB,
 * one per sample. */
KP__RHD int64_t kp__resize_items(const kp__resize_args *a) {
    return a->format == KP__RESIZE_NV12 ? a->dpitch * a->dh + (a->dpitch / 2) * (a->dh / 2)
                                        : (int64_t)3 * a->dw * a->dh;
}

/* The source position of output coordinate o for sizes s -> d, in 1/1024
 * steps: its whole part (clamped) and its weight. */
KP__RHD void kp__resize_pos(int64_t o, int64_t s, int64_t d, int64_t *i0, int64_t *i1,
                            int64_t *w) {
    int64_t p = ((2 * o + 1) * s * 1024) / (2 * d) - 512;
    if (p < 0) p = 0;
    *i0 = p >> 10;
    *w = p & 1023;
    if (*i0 >= s - 1) {
        *i0 = s - 1;
        *w = 0;
    }
    *i1 = *i0 + 1 < s ? *i0 + 1 : *i0;
}

KP__RHD uint8_t kp__resize_mix(uint8_t p00, uint8_t p01, uint8_t p10, uint8_t p11, int64_t wx,
                               int64_t wy) {
    const int64_t top = p00 * (1024 - wx) + p01 * wx, bot = p10 * (1024 - wx) + p11 * wx;
    return (uint8_t)((top * (1024 - wy) + bot * wy + (1 << 19)) >> 20);
}

KP__RHD float kp__resize_posf(int64_t o, float scale, int64_t s, int64_t *i0, int64_t *i1) {
    float p = KP__RADD(KP__RMUL(KP__RADD((float)o, 0.5f), scale), -0.5f);
    if (p < 0.0f) p = 0.0f;
    *i0 = (int64_t)p;
    float w = KP__RADD(p, -(float)*i0);
    if (*i0 >= s - 1) {
        *i0 = s - 1;
        w = 0.0f;
    }
    *i1 = *i0 + 1 < s ? *i0 + 1 : *i0;
    return w;
}

/* Item i of picture `f`. */
KP__RHD void kp__resize_item(const kp__resize_args *a, int64_t f, int64_t i) {
    const uint8_t *in = (const uint8_t *)a->in + f * a->in_frame;
    uint8_t *out = (uint8_t *)a->out + f * a->out_frame;
    if (a->format == KP__RESIZE_NV12) {
        const int64_t luma = a->dpitch * a->dh;
        int64_t x0, x1, y0, y1, wx, wy;
        if (i < luma) {
            const int64_t x = i % a->dpitch, y = i / a->dpitch;
            if (x >= a->dw) {
                out[i] = 0;
                return;
            }
            kp__resize_pos(x, a->sw, a->dw, &x0, &x1, &wx);
            kp__resize_pos(y, a->sh, a->dh, &y0, &y1, &wy);
            const uint8_t *r0 = in + y0 * a->spitch, *r1 = in + y1 * a->spitch;
            out[i] = kp__resize_mix(r0[x0], r0[x1], r1[x0], r1[x1], wx, wy);
            return;
        }
        const int64_t j = i - luma, hp = a->dpitch / 2, x = j % hp, y = j / hp;
        uint8_t *o = out + luma + y * a->dpitch + 2 * x;
        if (2 * x >= a->dw) {
            o[0] = o[1] = 0;
            return;
        }
        kp__resize_pos(x, a->sw / 2, a->dw / 2, &x0, &x1, &wx);
        kp__resize_pos(y, a->sh / 2, a->dh / 2, &y0, &y1, &wy);
        const uint8_t *c = in + a->spitch * a->sh;
        const uint8_t *r0 = c + y0 * a->spitch, *r1 = c + y1 * a->spitch;
        o[0] = kp__resize_mix(r0[2 * x0], r0[2 * x1], r1[2 * x0], r1[2 * x1], wx, wy);
        o[1] = kp__resize_mix(r0[2 * x0 + 1], r0[2 * x1 + 1], r1[2 * x0 + 1], r1[2 * x1 + 1], wx,
                              wy);
        return;
    }
    const int64_t plane = (int64_t)a->dw * a->dh, c = i / plane, p = i % plane;
    const int64_t x = p % a->dw, y = p / a->dw;
    int64_t x0, x1, y0, y1;
    const float wx = kp__resize_posf(x, a->sx, a->sw, &x0, &x1);
    const float wy = kp__resize_posf(y, a->sy, a->sh, &y0, &y1);
    const float *src = (const float *)in + c * (int64_t)a->sw * a->sh;
    const float p00 = src[y0 * a->sw + x0], p01 = src[y0 * a->sw + x1];
    const float p10 = src[y1 * a->sw + x0], p11 = src[y1 * a->sw + x1];
    const float top = KP__RADD(p00, KP__RMUL(KP__RADD(p01, -p00), wx));
    const float bot = KP__RADD(p10, KP__RMUL(KP__RADD(p11, -p10), wx));
    ((float *)out)[i] = KP__RADD(top, KP__RMUL(KP__RADD(bot, -top), wy));
}

/* kp_resizer_nv12's launch: n pictures of any sizes from a table on the
 * device, each into its slot of one output (the sizes and pitch of all). */
typedef struct kp__resize_many {
    const kp_nv12_picture *table;
    void *out;
    int64_t dpitch, out_frame;
    int32_t dw, dh, n, pad_;
} kp__resize_many;

/* Items per output picture: kp__resize_items of NV12 at the output's size. */
KP__RHD int64_t kp__resize_many_items(const kp__resize_many *m) {
    return m->dpitch * m->dh + (m->dpitch / 2) * (m->dh / 2);
}

/* Item i of picture f: the same arithmetic as one kp_resize_nv12 call. */
KP__RHD void kp__resize_many_item(const kp__resize_many *m, int64_t f, int64_t i) {
    const kp_nv12_picture *p = &m->table[f];
    /* field by field: this header is also compiled as C++17 by nvcc, where
     * designated initialisers are not standard */
    kp__resize_args a;
    a.in = p->data;
    a.out = (char *)m->out + f * m->out_frame;
    a.spitch = p->pitch;
    a.dpitch = m->dpitch;
    a.in_frame = a.out_frame = 0;
    a.sw = p->width;
    a.sh = p->height;
    a.dw = m->dw;
    a.dh = m->dh;
    a.format = KP__RESIZE_NV12;
    a.frames = 1;
    a.sx = a.sy = 0.0f;
    kp__resize_item(&a, 0, i);
}

/* The module's kernel parameters: the geometry fixed at setup, and the
 * input and the number of pictures rewritten each tick. */
typedef struct kp__resize_dynamic {
    const void *input;
    int64_t frames;
} kp__resize_dynamic;

typedef struct kp__resize_params {
    const kp__resize_args *st;
    const kp__resize_dynamic *dyn;
} kp__resize_params;


#endif
