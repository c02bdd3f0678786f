/* The fp16 convolution's own kernels ("precision": "fp16",
 * src/onnx/half.c): the f32 NCHW -> f16 NHWC staging and the epilogue
 * (bias, residual, every fused activation) back to f16 NHWC or f32 NCHW,
 * on one device, every element checked against a reference computed here
 * from the same f16-rounded inputs.
 *
 *   test_onnx_half cpu|cuda
 *
 * Shapes: one element, odd channel counts, and 1 M elements; staging with
 * the channels padded to 8 (an image's 3). Exit 77
 * (ctest's skip) when the device is absent. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/kpipe.h"
#include "../src/core/half-impl.h"
#include "../src/onnx/ops/nn/nn-impl.h"

static int failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
            return;                                     \
        }                                               \
    } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) & 0xffffff) / (float)0x800000 - 1.0f; /* [-1, 1) */
}

typedef struct bufs {
    kp_device_t dev;
    void *d[6];
} bufs;

/* Device copies of host arrays (the cpu device's memory is host memory too). */
static void *up(bufs *b, int slot, const void *src, size_t bytes) {
    if (kp_malloc(b->dev, bytes ? bytes : 1, &b->d[slot]) != KP_OK) return NULL;
    if (src && kp_memcpy_htod(b->dev, b->d[slot], src, bytes) != KP_OK) return NULL;
    return b->d[slot];
}

static void release(bufs *b) {
    for (int i = 0; i < 6; i++) kp_free(b->dev, b->d[i]);
    memset(b->d, 0, sizeof b->d);
}

static float act_ref(int act, float v, float slope) {
    switch (act) {
    case KP__OX_ACT_RELU: return v < 0 ? 0 : v;
    case KP__OX_ACT_LEAKYRELU: return v < 0 ? 0.2f * v : v;
    case KP__OX_ACT_PRELU: return v < 0 ? slope * v : v;
    case KP__OX_ACT_CLIP: return v < -0.5f ? -0.5f : v > 0.75f ? 0.75f : v;
    case KP__OX_ACT_SIGMOID: return 1.0f / (1.0f + expf(-v));
    case KP__OX_ACT_HARDSIGMOID: return fminf(fmaxf(0.3f * v + 0.4f, 0.0f), 1.0f);
    case KP__OX_ACT_HARDSWISH: return v * fminf(fmaxf(v / 6.0f + 0.5f, 0.0f), 1.0f);
    case KP__OX_ACT_SILU: return v / (1.0f + expf(-v));
    default: return v;
    }
}

static void act_params(int act, float *a, float *b) {
    *a = act == KP__OX_ACT_LEAKYRELU     ? 0.2f
         : act == KP__OX_ACT_CLIP        ? -0.5f
         : act == KP__OX_ACT_HARDSIGMOID ? 0.3f
         : act == KP__OX_ACT_HARDSWISH   ? 1.0f / 6.0f
                                         : 0.0f;
    *b = act == KP__OX_ACT_CLIP          ? 0.75f
         : act == KP__OX_ACT_HARDSIGMOID ? 0.4f
         : act == KP__OX_ACT_HARDSWISH   ? 0.5f
                                         : 0.0f;
}

/* One shape, one activation, one output form (f16 NHWC in place, or f32
 * NCHW), one residual form (none, f16 NHWC, f32 NCHW). */
static void check_case(kp_device_t dev, kp_stream_t s, int64_t nb, int64_t c, int64_t hw, int act,
                       bool out16, int zform) {
    int64_t n = nb * c * hw;
    size_t nf = (size_t)n;
    float *x = malloc(nf * 4), *z = malloc(nf * 4), *bias = malloc((size_t)c * 4);
    float *slope = malloc((size_t)c * 4), *got32 = malloc(nf * 4);
    uint16_t *acc = malloc(nf * 2), *got16 = malloc(nf * 2), *z16 = malloc(nf * 2);
    bufs b = {.dev = dev};
    CHECK(x && z && bias && slope && got32 && acc && got16 && z16, "no memory");
    for (size_t i = 0; i < nf; i++) {
        x[i] = 4.0f * frand();
        z[i] = frand();
    }
    for (int64_t k = 0; k < c; k++) {
        bias[k] = frand();
        slope[k] = 0.25f + 0.1f * frand();
    }
    /* 1. staging: x (NCHW f32) -> acc (NHWC f16) */
    kp__ox_exec ex = {.stream = s, .dev = dev, .host = !strcmp(kp_device_kernel_form(dev), "host")};
    kp__ox_to_half_params tp = {.x = up(&b, 0, x, nf * 4),
                                .y = up(&b, 1, NULL, nf * 2),
                                .n = n,
                                .c = c,
                                .cpad = c,
                                .hw = hw};
    CHECK(tp.x && tp.y, "device memory: %s", kp_last_error());
    CHECK(kp__ox_to_half(&ex, &tp) == KP_OK, "%s", kp_last_error());
    CHECK(kp_stream_sync(s) == KP_OK, "%s", kp_last_error());
    CHECK(kp_memcpy_dtoh(dev, acc, tp.y, nf * 2) == KP_OK, "%s", kp_last_error());
    for (int64_t i = 0; i < n; i++) {
        int64_t q = i % hw, ch = (i / hw) % c, im = i / (hw * c);
        uint16_t want = kp__f32_to_f16(x[i]);
        uint16_t have = acc[(im * hw + q) * c + ch];
        CHECK(have == want, "to_half element %lld: %04x, expected %04x", (long long)i, have, want);
    }
    for (size_t i = 0; i < nf; i++) z16[i] = kp__f32_to_f16(z[i]); /* NHWC order */
    /* 2. the epilogue over the staged product */
    float a, bb;
    act_params(act, &a, &bb);
    /* f16 in and out with an f16 residual is the fused call's pattern: its
     * bias is f16, and when cuDNN refuses the call the epilogue reads it */
    const bool b16 = out16 && zform == 1;
    uint16_t *bias_h = malloc((size_t)c * 2);
    CHECK(bias_h, "no memory");
    for (int64_t k = 0; k < c; k++) {
        bias_h[k] = kp__f32_to_f16(bias[k]);
        if (b16) bias[k] = kp__f16_to_f32(bias_h[k]); /* the reference's bias */
    }
    kp__ox_epilogue16_params ep = {.acc = tp.y,
                                   .bias = b16 ? NULL : up(&b, 2, bias, (size_t)c * 4),
                                   .bias16 = b16 ? up(&b, 2, bias_h, (size_t)c * 2) : NULL,
                                   .slope = up(&b, 3, slope, (size_t)c * 4),
                                   .n = n,
                                   .c = c,
                                   .hw = hw,
                                   .act = act,
                                   .act_a = a,
                                   .act_b = bb};
    if (zform == 1) ep.z16 = up(&b, 4, z16, nf * 2);
    if (zform == 2) ep.z32 = up(&b, 4, z, nf * 4);
    if (out16)
        ep.y16 = (uint16_t *)tp.y; /* in place, as a chain's convolutions run */
    else
        ep.y32 = up(&b, 5, NULL, nf * 4);
    CHECK(kp__ox_epilogue16(&ex, &ep) == KP_OK, "%s", kp_last_error());
    CHECK(kp_stream_sync(s) == KP_OK, "%s", kp_last_error());
    if (out16)
        CHECK(kp_memcpy_dtoh(dev, got16, ep.y16, nf * 2) == KP_OK, "%s", kp_last_error());
    else
        CHECK(kp_memcpy_dtoh(dev, got32, ep.y32, nf * 4) == KP_OK, "%s", kp_last_error());
    for (int64_t i = 0; i < n; i++) {
        int64_t q = i % hw, ch = (i / hw) % c, im = i / (hw * c), h = (im * hw + q) * c + ch;
        float v = kp__f16_to_f32(acc[h]) + bias[ch];
        if (zform == 1) v += kp__f16_to_f32(z16[h]);
        if (zform == 2) v += z[(im * c + ch) * hw + q];
        v = act_ref(act, v, slope[ch]);
        float have = out16 ? kp__f16_to_f32(got16[h]) : got32[i];
        float tol = out16 ? 1e-3f + fabsf(v) * 1.0e-3f : 1e-5f + fabsf(v) * 1e-5f;
        CHECK(fabsf(have - v) <= tol,
              "epilogue (act %d, out %s, residual %d, %lldx%lldx%lld) "
              "element %lld: %g, expected %g",
              act, out16 ? "f16" : "f32", zform, (long long)nb, (long long)c, (long long)hw,
              (long long)i, have, v);
    }
    release(&b);
    free(x), free(z), free(bias), free(slope), free(got32), free(acc), free(got16), free(z16);
    free(bias_h);
}

/* Staging with the channels padded to 8 by zeros (a convolution over an
 * image's 3 channels, src/onnx/half.c). */
static void check_pad(kp_device_t dev, kp_stream_t s, int64_t nb, int64_t c, int64_t hw) {
    int64_t cp = (c + 7) / 8 * 8, n = nb * cp * hw;
    size_t nx = (size_t)(nb * c * hw);
    float *x = malloc(nx * 4);
    uint16_t *y = malloc((size_t)n * 2);
    bufs b = {.dev = dev};
    CHECK(x && y, "no memory");
    for (size_t i = 0; i < nx; i++) x[i] = 3.0f * frand();
    kp__ox_exec ex = {.stream = s, .dev = dev, .host = !strcmp(kp_device_kernel_form(dev), "host")};
    kp__ox_to_half_params tp = {.x = up(&b, 0, x, nx * 4),
                                .y = up(&b, 1, NULL, (size_t)n * 2),
                                .n = n,
                                .c = c,
                                .cpad = cp,
                                .hw = hw};
    CHECK(tp.x && tp.y, "device memory: %s", kp_last_error());
    CHECK(kp__ox_to_half(&ex, &tp) == KP_OK, "%s", kp_last_error());
    CHECK(kp_stream_sync(s) == KP_OK, "%s", kp_last_error());
    CHECK(kp_memcpy_dtoh(dev, y, tp.y, (size_t)n * 2) == KP_OK, "%s", kp_last_error());
    for (int64_t i = 0; i < n; i++) {
        int64_t ch = i % cp, q = (i / cp) % hw, im = i / (cp * hw);
        uint16_t want = ch < c ? kp__f32_to_f16(x[(im * c + ch) * hw + q]) : 0;
        CHECK(y[i] == want,
              "padded staging (%lld channels to %lld) element %lld: %04x, "
              "expected %04x",
              (long long)c, (long long)cp, (long long)i, y[i], want);
    }
    release(&b);
    free(x), free(y);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_device_t dev;
    kp_stream_t s;
    if (kp_device_open(name, &dev) != KP_OK) {
        printf("SKIP: no %s device: %s\n", name, kp_last_error());
        return 77;
    }
    if (kp_stream_create(dev, &s) != KP_OK) return printf("%s\n", kp_last_error()), 1;
    /* one element; odd channels and positions (partial tiles); channels a
     * multiple of 8 (the eight-wide path); 1 M elements in 64 channels */
    static const int64_t shapes[][3] = {{1, 1, 1},  {2, 5, 21},  {3, 7, 33},
                                        {2, 16, 7}, {2, 33, 70}, {1, 64, 16384}};
    int cases = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int act = KP__OX_ACT_NONE; act <= KP__OX_ACT_SILU; act++)
            for (int out16 = 0; out16 < 2; out16++)
                for (int z = 0; z < 3; z++) {
                    bool big = shapes[k][2] > 1000;
                    if (big && (act % 3 != 0 || z == 1)) continue; /* the large shape: a few */
                    check_case(dev, s, shapes[k][0], shapes[k][1], shapes[k][2], act, out16, z);
                    cases++;
                }
    static const int64_t padded[][3] = {{1, 3, 1}, {2, 3, 1000}, {1, 5, 33}, {1, 3, 224 * 224}};
    for (size_t k = 0; k < sizeof padded / sizeof padded[0]; k++, cases++)
        check_pad(dev, s, padded[k][0], padded[k][1], padded[k][2]);
    kp_stream_destroy(s);
    kp_device_close(dev);
    printf("%s: %d cases, %d failed\n", name, cases, failures);
    return failures ? 1 : 0;
}
