/* The video modules' descriptors and per-pixel arithmetic, shared by their
 * host code and their kernel file, so both backends compute the same
 * values: the device side rounds every product and sum on its own
 * (__fmul_rn, __fadd_rn: no fused multiply-add), as the host does.
 *
 * Frames are I420 (8-bit 4:2:0, BT.601 limited range) stored as u8
 * [height * 3 / 2, width]: the Y plane, then U and V at half size. Images
 * between modules are planar RGB, f32 [3 * height * width], in [0, 1]. */
#ifndef KPIPE_VIDEO_MODULES_IMPL_H
#define KPIPE_VIDEO_MODULES_IMPL_H

#include <stdint.h>

typedef enum kp__video_op {
    KP__VIDEO_I420_RGB = 0, /* I420 -> planar RGB */
    KP__VIDEO_SHARPEN = 1,  /* RGB -> amount * (4 p - its 4 neighbours), edges clamped */
    KP__VIDEO_RGB_I420 = 2, /* planar RGB -> I420, chroma from each 2x2 block's mean */
    KP__VIDEO_NV12_RGB = 3, /* NV12 with a pitch -> planar RGB, f32 or f16 */
    KP__VIDEO_RGB_NV12 = 4, /* planar RGB, f32 or f16 -> NV12 with a pitch (padding zeroed) */
    KP__VIDEO_P016_RGB = 5, /* P016 (16-bit NV12) with a pitch in bytes -> planar RGB */
} kp__video_op;

/* Fixed after setup. */
/* width, height, pitch, in_frame and out_frame are each tick's: the
 * kernels read them from a copy kp__video_sized fills from the dynamic
 * descriptor, and the ones here stay unset. */
typedef struct kp__video_static {
    void *output;
    int64_t width, height;
    float amount;
    /* NV12 ops: the pitch, f16 RGB, and the colour matrix (kp__video_coefs) */
    int64_t pitch;
    int f16;
    float yoff, yscale;           /* to RGB: (Y - yoff) * yscale */
    int64_t in_frame, out_frame;  /* bytes of one picture in and out (a batch's spacing) */
    float rv, gu, gv, bu;         /* to RGB: chroma weights */
    float ky[3], ku[3], kv[3];    /* to YUV: weights of R, G, B in [0, 1] */
} kp__video_static;

/* Rewritten each tick: the input is read in place, wherever it is, at the
 * size it has (modules sized by their frames: "width": {"max": N}). */
typedef struct kp__video_dynamic {
    const void *input;
    int64_t frames; /* pictures in the input: 1, or up to the module's "batch" */
    int64_t width, height, pitch;
    int64_t in_frame, out_frame; /* bytes of one picture in and out */
} kp__video_dynamic;

typedef struct kp__video_params {
    const kp__video_static *st;
    const kp__video_dynamic *dyn;
} kp__video_params;

#include "../core/half-impl.h"
#if defined(__CUDA_ARCH__)
#define KP__VMUL(a, b) __fmul_rn((a), (b))
#define KP__VADD(a, b) __fadd_rn((a), (b))
#else
#define KP__VMUL(a, b) ((a) * (b))
#define KP__VADD(a, b) ((a) + (b))
#endif

/* The static descriptor with this tick's size in it, which every item
 * function reads. */
KP__VHD kp__video_static kp__video_sized(const kp__video_static *st, const kp__video_dynamic *d) {
    kp__video_static s = *st;
    s.width = d->width;
    s.height = d->height;
    s.pitch = d->pitch;
    s.in_frame = d->in_frame;
    s.out_frame = d->out_frame;
    return s;
}

/* Items each op's kernel covers: pixels, samples, or 2x2 blocks (NV12:
 * over the whole pitch, so the padding is written too). */
KP__VHD int64_t kp__video_items(int op, int64_t w, int64_t h, int64_t pitch) {
    return op == KP__VIDEO_I420_RGB || op == KP__VIDEO_NV12_RGB || op == KP__VIDEO_P016_RGB
               ? w * h
           : op == KP__VIDEO_SHARPEN                            ? 3 * w * h
           : op == KP__VIDEO_RGB_NV12                           ? (pitch / 2) * (h / 2)
                                                                : (w / 2) * (h / 2);
}

KP__VHD float kp__clamp01(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }

KP__VHD uint8_t kp__to_u8(float v) {
    return v <= 0.0f ? (uint8_t)0 : v >= 255.0f ? (uint8_t)255 : (uint8_t)(v + 0.5f);
}

/* a*x + b*y + c*z + d, rounded step by step. */
KP__VHD float kp__dot3(float a, float x, float b, float y, float c, float z, float d) {
    return KP__VADD(KP__VADD(KP__VADD(KP__VMUL(a, x), KP__VMUL(b, y)), KP__VMUL(c, z)), d);
}

/* One op's item each: the kernels' inner loops, inlined into
 * kp__video_item (an op is a constant there on cuda: a template argument). */
KP__VHD void kp__video_i420_rgb(const kp__video_static *st, const uint8_t *in, float *out,
                                int64_t i) {
    const int64_t w = st->width, plane = w * st->height;
    const int64_t x = i % w, y = i / w, c = (y / 2) * (w / 2) + x / 2;
    const float Y = KP__VMUL((float)in[i] - 16.0f, 1.164383f);
    const float U = (float)in[plane + c] - 128.0f, V = (float)in[plane + plane / 4 + c] - 128.0f;
    const float k = 1.0f / 255.0f;
    out[i] = kp__clamp01(KP__VMUL(kp__dot3(1.596027f, V, 0.0f, 0.0f, 0.0f, 0.0f, Y), k));
    out[plane + i] =
        kp__clamp01(KP__VMUL(kp__dot3(-0.391762f, U, -0.812968f, V, 0.0f, 0.0f, Y), k));
    out[2 * plane + i] =
        kp__clamp01(KP__VMUL(kp__dot3(2.017232f, U, 0.0f, 0.0f, 0.0f, 0.0f, Y), k));
}

KP__VHD void kp__video_sharpen(const kp__video_static *st, const float *in, float *out, int64_t i) {
    const int64_t w = st->width, h = st->height, plane = w * h;
    const int64_t p = i % plane, x = p % w, y = p / w, base = i - p;
    const float c = in[i];
    const float l = in[base + y * w + (x > 0 ? x - 1 : x)];
    const float r = in[base + y * w + (x + 1 < w ? x + 1 : x)];
    const float u = in[base + (y > 0 ? y - 1 : y) * w + x];
    const float d = in[base + (y + 1 < h ? y + 1 : y) * w + x];
    const float edge = KP__VADD(KP__VADD(KP__VADD(l, r), u), d);
    out[i] = KP__VMUL(st->amount, KP__VADD(KP__VMUL(4.0f, c), -edge));
}

/* Pixel i of planar RGB from its samples y, u, v on the 8-bit scale (a
 * 16-bit sample divided by 256: exact, a power of two). */
KP__VHD void kp__video_yuv_rgb(const kp__video_static *st, float y, float u, float v,
                               void *output, int64_t i) {
    const int64_t plane = st->width * st->height;
    const float Y = KP__VMUL(y - st->yoff, st->yscale);
    const float U = u - 128.0f, V = v - 128.0f;
    const float k = 1.0f / 255.0f;
    const float R = kp__clamp01(KP__VMUL(kp__dot3(st->rv, V, 0.0f, 0.0f, 0.0f, 0.0f, Y), k));
    const float G = kp__clamp01(KP__VMUL(kp__dot3(-st->gu, U, -st->gv, V, 0.0f, 0.0f, Y), k));
    const float B = kp__clamp01(KP__VMUL(kp__dot3(st->bu, U, 0.0f, 0.0f, 0.0f, 0.0f, Y), k));
    if (st->f16) {
        uint16_t *out = (uint16_t *)output;
        out[i] = kp__f32_to_f16(R);
        out[plane + i] = kp__f32_to_f16(G);
        out[2 * plane + i] = kp__f32_to_f16(B);
    } else {
        float *out = (float *)output;
        out[i] = R;
        out[plane + i] = G;
        out[2 * plane + i] = B;
    }
}

KP__VHD void kp__video_nv12_rgb(const kp__video_static *st, const uint8_t *in, void *output,
                                int64_t i) {
    const int64_t w = st->width, h = st->height;
    const int64_t P = st->pitch, x = i % w, y = i / w;
    const int64_t c = h * P + (y / 2) * P + (x / 2) * 2;
    kp__video_yuv_rgb(st, (float)in[y * P + x], (float)in[c], (float)in[c + 1], output, i);
}

/* P016: 16-bit samples, rows of `pitch` bytes. */
KP__VHD void kp__video_p016_rgb(const kp__video_static *st, const uint8_t *in, void *output,
                                int64_t i) {
    const int64_t w = st->width, h = st->height;
    const int64_t P = st->pitch, x = i % w, y = i / w;
    const uint16_t *luma = (const uint16_t *)(in + y * P);
    const uint16_t *uv = (const uint16_t *)(in + h * P + (y / 2) * P) + (x / 2) * 2;
    const float s = 1.0f / 256.0f;
    kp__video_yuv_rgb(st, KP__VMUL((float)luma[x], s), KP__VMUL((float)uv[0], s),
                      KP__VMUL((float)uv[1], s), output, i);
}

/* Pixel px of planar RGB (f32 or f16), each channel clamped to [0, 1]. */
KP__VHD void kp__video_rgb_at(const kp__video_static *st, const void *input, int64_t px, float *R,
                              float *G, float *B) {
    const int64_t plane = st->width * st->height;
    if (st->f16) {
        const uint16_t *in = (const uint16_t *)input;
        *R = kp__f16_to_f32(in[px]);
        *G = kp__f16_to_f32(in[plane + px]);
        *B = kp__f16_to_f32(in[2 * plane + px]);
    } else {
        const float *in = (const float *)input;
        *R = in[px];
        *G = in[plane + px];
        *B = in[2 * plane + px];
    }
    *R = kp__clamp01(*R);
    *G = kp__clamp01(*G);
    *B = kp__clamp01(*B);
}

/* Item i: the 2x2 block (bx, by) of the pitch, its four Y samples and its
 * U and V pair; a block in the pitch's padding is zeroed. */
KP__VHD void kp__video_rgb_nv12(const kp__video_static *st, const void *input, uint8_t *out,
                                int64_t i) {
    const int64_t w = st->width, h = st->height;
    const int64_t P = st->pitch, hp = P / 2, bx = i % hp, by = i / hp;
    uint8_t *uv = out + h * P + by * P + 2 * bx;
    if (2 * bx >= w) { /* the pitch's padding */
        out[(2 * by) * P + 2 * bx] = out[(2 * by) * P + 2 * bx + 1] = 0;
        out[(2 * by + 1) * P + 2 * bx] = out[(2 * by + 1) * P + 2 * bx + 1] = 0;
        uv[0] = uv[1] = 0;
        return;
    }
    float sr = 0.0f, sg = 0.0f, sb = 0.0f;
    for (int k = 0; k < 4; k++) {
        const int64_t y = 2 * by + k / 2, x = 2 * bx + k % 2;
        float R, G, B;
        kp__video_rgb_at(st, input, y * w + x, &R, &G, &B);
        out[y * P + x] = kp__to_u8(kp__dot3(st->ky[0], R, st->ky[1], G, st->ky[2], B, st->yoff));
        sr = KP__VADD(sr, R);
        sg = KP__VADD(sg, G);
        sb = KP__VADD(sb, B);
    }
    sr = KP__VMUL(sr, 0.25f);
    sg = KP__VMUL(sg, 0.25f);
    sb = KP__VMUL(sb, 0.25f);
    uv[0] = kp__to_u8(kp__dot3(st->ku[0], sr, st->ku[1], sg, st->ku[2], sb, 128.0f));
    uv[1] = kp__to_u8(kp__dot3(st->kv[0], sr, st->kv[1], sg, st->kv[2], sb, 128.0f));
}

KP__VHD void kp__video_rgb_i420(const kp__video_static *st, const float *in, uint8_t *out,
                                int64_t i) {
    const int64_t w = st->width, plane = w * st->height;
    const int64_t hw = w / 2, bx = i % hw, by = i / hw;
    float sr = 0.0f, sg = 0.0f, sb = 0.0f;
    for (int k = 0; k < 4; k++) {
        const int64_t px = (2 * by + k / 2) * w + 2 * bx + k % 2;
        const float R = kp__clamp01(in[px]), G = kp__clamp01(in[plane + px]),
                    B = kp__clamp01(in[2 * plane + px]);
        out[px] = kp__to_u8(kp__dot3(65.481f, R, 128.553f, G, 24.966f, B, 16.0f));
        sr = KP__VADD(sr, R);
        sg = KP__VADD(sg, G);
        sb = KP__VADD(sb, B);
    }
    sr = KP__VMUL(sr, 0.25f);
    sg = KP__VMUL(sg, 0.25f);
    sb = KP__VMUL(sb, 0.25f);
    out[plane + i] = kp__to_u8(kp__dot3(-37.797f, sr, -74.203f, sg, 112.0f, sb, 128.0f));
    out[plane + plane / 4 + i] =
        kp__to_u8(kp__dot3(112.0f, sr, -93.786f, sg, -18.214f, sb, 128.0f));
}

/* Item i of `op` (kp__video_items says what an item is). */
KP__VHD void kp__video_item(const kp__video_static *st, const void *input, void *output, int op,
                            int64_t i) {
    if (op == KP__VIDEO_I420_RGB)
        kp__video_i420_rgb(st, (const uint8_t *)input, (float *)output, i);
    else if (op == KP__VIDEO_SHARPEN)
        kp__video_sharpen(st, (const float *)input, (float *)output, i);
    else if (op == KP__VIDEO_NV12_RGB)
        kp__video_nv12_rgb(st, (const uint8_t *)input, output, i);
    else if (op == KP__VIDEO_P016_RGB)
        kp__video_p016_rgb(st, (const uint8_t *)input, output, i);
    else if (op == KP__VIDEO_RGB_NV12)
        kp__video_rgb_nv12(st, input, (uint8_t *)output, i);
    else
        kp__video_rgb_i420(st, (const float *)input, (uint8_t *)output, i);
}

#endif
