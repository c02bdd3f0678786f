/* The synthetic source's kernel, shared by its host and CUDA forms:
 * out[i] = ((seq * 31 + i * 7) mod 2001) - 1000, as float: integers, so
 * sums of a few of them are exact in float32 and a flow's results can be
 * checked exactly on any backend. */
#ifndef KPIPE_FLOW_PATTERN_IMPL_H
#define KPIPE_FLOW_PATTERN_IMPL_H

#include <stdint.h>

typedef struct kp__pattern_params {
    float *out;
    int64_t n;
    uint64_t seq;
} kp__pattern_params;

#ifdef __CUDACC__
__host__ __device__
#endif
    static inline float
    kp__pattern_value(uint64_t seq, int64_t i) {
    return (float)((int64_t)((seq * 31u + (uint64_t)i * 7u) % 2001u) - 1000);
}

/* The "testsrc" source's pictures (as packed I420, u8 [h*3/2, w]): diagonal luma
 * stripes moving 3 pixels a frame, a bright 16x16 box crossing the
 * picture, and gentle chroma waves; within the RGB gamut (luma 48 .. 200,
 * chroma 112 .. 144), so a colour round trip keeps it; integers, so any
 * backend writes the same. */
typedef struct kp__testsrc_params {
    uint8_t *out;
    int64_t width, height;
    uint64_t seq;
} kp__testsrc_params;

/* A testsrc frame as the source writes it: the picture, in a layout and a
 * pitch. */
typedef struct kp__testsrc_frame {
    kp__testsrc_params pic;
    int64_t pitch; /* bytes per luma row, even, >= width (P016: twice) */
    int nv12;      /* NV12 (chroma interleaved), else I420 */
    int wide;      /* P016: NV12's samples, each the high byte of a 16-bit word */
} kp__testsrc_frame;

#ifdef __CUDACC__
__host__ __device__
#endif
    static inline uint8_t
    kp__testsrc_value(const kp__testsrc_params *p, int64_t i) {
    const int64_t w = p->width, h = p->height, plane = w * h, t = (int64_t)(p->seq % 4096u);
    if (i < plane) {
        const int64_t x = i % w, y = i / w, bx = (t * 5) % w, by = (t * 3) % h;
        if (x >= bx && x < bx + 16 && y >= by && y < by + 16) return 200;
        return (uint8_t)(48 + (x + 2 * y + 3 * t) % 153);
    }
    const int64_t c = (i - plane) % (plane / 4), cw = w / 2, x = c % cw, y = c / cw;
    const int64_t u = (x + t) % 64 - 32, v = (y + 2 * t) % 64 - 32; /* triangle waves */
    return (uint8_t)(112 + (i - plane < plane / 4 ? (u < 0 ? -u : u) : (v < 0 ? -v : v)));
}

/* Byte i of the frame as written, in its layout and pitch: the same
 * picture as kp__testsrc_value's packed I420 (sample for sample), with
 * the padding past the width zero, so a sink that packs a frame back into
 * I420 must give exactly the packed picture. */
#ifdef __CUDACC__
__host__ __device__
#endif
    static inline uint8_t
    kp__testsrc_byte(const kp__testsrc_frame *f, int64_t i) {
    const kp__testsrc_params *p = &f->pic;
    const int64_t w = p->width, h = p->height, P = f->pitch, cw = w / 2, q = w * h / 4;
    const int64_t row = i / P;
    int64_t col = i % P;
    if (f->wide) { /* little-endian words: the low byte 0, the high one NV12's sample */
        if (col % 2 == 0) return 0;
        col /= 2;
    }
    if (row < h) return col < w ? kp__testsrc_value(p, row * w + col) : (uint8_t)0;
    if (f->nv12 || f->wide) /* chroma rows of U,V pairs: U at even samples, V at odd ones */
        return col < w ? kp__testsrc_value(p, w * h + (col % 2) * q + (row - h) * cw + col / 2)
                       : (uint8_t)0;
    /* I420: the U plane, then the V plane, each h/2 rows of P/2 bytes */
    const int64_t k = i - h * P, half = P / 2, plane = k / (half * (h / 2));
    const int64_t r = k % (half * (h / 2)) / half, x = k % half;
    return x < cw ? kp__testsrc_value(p, w * h + plane * q + r * cw + x) : (uint8_t)0;
}

#endif
