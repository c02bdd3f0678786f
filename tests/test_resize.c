/* The resize module and kp_resize_nv12: every byte (NV12) and every float
 * (planar RGB) against a reference written here from the documented rule
 * (pixel centres, 1/1024 integer weights for NV12, step-by-step float for
 * RGB), in stream and graph mode, for a batch whose picture count changes
 * per tick, at sizes from 2x2 to 1080p, up and down, identity, odd ratios
 * and a padded pitch; the direct call and the batch resizer (pictures of
 * mixed sizes, one launch) equal to the module. On cuda the
 * same reference is met, so cuda equals cpu.
 *   test_resize DEVICE [BIG]   (cpu or cuda; exit 77 without the device) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev;
static bool g_big;

/* --- the reference --------------------------------------------------------------- */
static void ref_pos(int64_t o, int64_t s, int64_t d, int64_t *i0, int64_t *i1, int64_t *w) {
    int64_t p = (2 * o + 1) * s * 1024 / (2 * d) - 512; /* 1/1024 of a source pixel */
    p = p < 0 ? 0 : p;
    *i0 = p / 1024;
    *w = p % 1024;
    if (*i0 >= s - 1) *i0 = s - 1, *w = 0;
    *i1 = *i0 + 1 < s ? *i0 + 1 : *i0;
}

static uint8_t ref_mix(int a, int b, int c, int d, int64_t wx, int64_t wy) {
    int64_t top = a * (1024 - wx) + b * wx, bot = c * (1024 - wx) + d * wx;
    return (uint8_t)((top * (1024 - wy) + bot * wy + 524288) / 1048576);
}

/* NV12 sw x sh (pitch sp) -> dw x dh (pitch dp), padding zero. */
static void ref_nv12(const uint8_t *in, int sw, int sh, int64_t sp, uint8_t *out, int dw, int dh,
                     int64_t dp) {
    memset(out, 0, (size_t)(dp * dh / 2 * 3));
    for (int y = 0; y < dh; y++)
        for (int x = 0; x < dw; x++) {
            int64_t x0, x1, y0, y1, wx, wy;
            ref_pos(x, sw, dw, &x0, &x1, &wx);
            ref_pos(y, sh, dh, &y0, &y1, &wy);
            out[y * dp + x] = ref_mix(in[y0 * sp + x0], in[y0 * sp + x1], in[y1 * sp + x0],
                                      in[y1 * sp + x1], wx, wy);
        }
    const uint8_t *ci = in + sp * sh;
    uint8_t *co = out + dp * dh;
    for (int y = 0; y < dh / 2; y++)
        for (int x = 0; x < dw / 2; x++)
            for (int k = 0; k < 2; k++) {
                int64_t x0, x1, y0, y1, wx, wy;
                ref_pos(x, sw / 2, dw / 2, &x0, &x1, &wx);
                ref_pos(y, sh / 2, dh / 2, &y0, &y1, &wy);
                co[y * dp + 2 * x + k] =
                    ref_mix(ci[y0 * sp + 2 * x0 + k], ci[y0 * sp + 2 * x1 + k],
                            ci[y1 * sp + 2 * x0 + k], ci[y1 * sp + 2 * x1 + k], wx, wy);
            }
}

static float ref_posf(int64_t o, float scale, int64_t s, int64_t *i0, int64_t *i1) {
    volatile float a = (float)o + 0.5f; /* each step rounded to float, as the module does */
    volatile float b = a * scale;
    float p = b - 0.5f;
    p = p < 0.0f ? 0.0f : p;
    *i0 = (int64_t)p;
    float w = p - (float)*i0;
    if (*i0 >= s - 1) *i0 = s - 1, w = 0.0f;
    *i1 = *i0 + 1 < s ? *i0 + 1 : *i0;
    return w;
}

static float lerp(float a, float b, float w) {
    volatile float d = b - a;
    volatile float m = d * w;
    return a + m;
}

static void ref_rgb(const float *in, int sw, int sh, float *out, int dw, int dh) {
    const float sx = (float)sw / (float)dw, sy = (float)sh / (float)dh;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < dh; y++)
            for (int x = 0; x < dw; x++) {
                int64_t x0, x1, y0, y1;
                float wx = ref_posf(x, sx, sw, &x0, &x1), wy = ref_posf(y, sy, sh, &y0, &y1);
                const float *p = in + (int64_t)c * sw * sh;
                float top = lerp(p[y0 * sw + x0], p[y0 * sw + x1], wx);
                float bot = lerp(p[y1 * sw + x0], p[y1 * sw + x1], wx);
                out[(int64_t)c * dw * dh + (int64_t)y * dw + x] = lerp(top, bot, wy);
            }
}

/* --- running the module ------------------------------------------------------------ */
typedef struct geo {
    int sw, sh, dw, dh;
    int64_t sp, dp; /* NV12 pitches */
    bool rgb;
} geo;

static size_t in_bytes(const geo *g) {
    return g->rgb ? (size_t)3 * g->sw * g->sh * sizeof(float) : (size_t)(g->sp * g->sh / 2 * 3);
}
static size_t out_bytes(const geo *g) {
    return g->rgb ? (size_t)3 * g->dw * g->dh * sizeof(float) : (size_t)(g->dp * g->dh / 2 * 3);
}

static void fill(const geo *g, void *p, unsigned seed) {
    srand(seed);
    if (g->rgb) {
        float *f = p;
        for (size_t i = 0; i < in_bytes(g) / sizeof(float); i++)
            f[i] = (float)((double)rand() / RAND_MAX);
    } else {
        uint8_t *b = p;
        for (size_t i = 0; i < in_bytes(g); i++) b[i] = (uint8_t)rand();
    }
}

static void reference(const geo *g, const void *in, void *out) {
    if (g->rgb)
        ref_rgb(in, g->sw, g->sh, out, g->dw, g->dh);
    else
        ref_nv12(in, g->sw, g->sh, g->sp, out, g->dw, g->dh, g->dp);
}

/* Ticks with 3, 1 and 2 pictures (a batch of at most 3), new data each
 * tick, every output byte compared with the reference. */
static void check_module(const geo *g, const char *mode) {
    char json[1024];
    snprintf(
        json, sizeof json,
        "{\"kpipe_spec\": 1, \"name\": \"rs\", \"execution\": \"%s\", \"modules\": [{\"type\": "
        "\"resize\", \"id\": \"r\", \"params\": {\"format\": \"%s\", \"width\": %d, "
        "\"height\": %d, \"out_width\": %d, \"out_height\": %d, %s \"batch\": 3}}], "
        "\"inputs\": {\"x\": \"r.input\"}, \"outputs\": {\"y\": \"r.output\"}}",
        mode, g->rgb ? "rgb" : "nv12", g->sw, g->sh, g->dw, g->dh, "");
    if (!g->rgb) {
        char extra[96];
        snprintf(extra, sizeof extra, "\"pitch\": %lld, \"out_pitch\": %lld,", (long long)g->sp,
                 (long long)g->dp);
        snprintf(json, sizeof json,
                 "{\"kpipe_spec\": 1, \"name\": \"rs\", \"execution\": \"%s\", \"modules\": "
                 "[{\"type\": \"resize\", \"id\": \"r\", \"params\": {\"format\": \"nv12\", "
                 "\"width\": %d, \"height\": %d, \"out_width\": %d, \"out_height\": %d, %s "
                 "\"batch\": 3}}], \"inputs\": {\"x\": \"r.input\"}, \"outputs\": {\"y\": "
                 "\"r.output\"}}",
                 mode, g->sw, g->sh, g->dw, g->dh, extra);
    }
    kp_pipeline_t p;
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_pipeline_create_from_json(g_dev, json, &p));
    KPT_OK(kp_pipeline_setup(p));
    const size_t ib = in_bytes(g), ob = out_bytes(g);
    uint8_t *host_in = malloc(3 * ib), *host_out = malloc(3 * ob), *want = malloc(ob);
    void *dev_in;
    KPT_OK(kp_malloc(g_dev, 3 * ib, &dev_in));
    const int counts[3] = {3, 1, 2};
    bool built = false;
    for (int t = 0; t < 3; t++) {
        const int n = counts[t];
        for (int k = 0; k < n; k++) fill(g, host_in + k * ib, (unsigned)(t * 10 + k + 1));
        KPT_OK(kp_memcpy_htod(g_dev, dev_in, host_in, n * ib));
        kp_port_info in = {"x", dev_in, {0}}, out = {"y", NULL, {0}};
        if (g->rgb) {
            int64_t shape[1] = {(int64_t)n * 3 * g->sw * g->sh};
            KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, shape, NULL));
        } else {
            int64_t shape[2] = {(int64_t)n * g->sh / 2 * 3, g->sp};
            KPT_OK(kp_desc_init(&in.desc, KP_U8, 2, shape, NULL));
        }
        KPT_OK(kp_pipeline_configure_io(p, &in, 1, &out, 1, s));
        assert_int_equal(kp_desc_bytes_needed(&out.desc), (int64_t)(n * ob));
        if (!built) {
            KPT_OK(kp_pipeline_warmup(p, s));
            if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) KPT_OK(kp_pipeline_build_graph(p));
            built = true;
        }
        KPT_OK(kp_pipeline_mode(p) == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, s)
                                                    : kp_pipeline_execute_stream(p, s));
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(g_dev, host_out, out.data, n * ob));
        for (int k = 0; k < n; k++) {
            reference(g, host_in + k * ib, want);
            if (memcmp(want, host_out + k * ob, ob) != 0) {
                size_t i = 0;
                while (((uint8_t *)want)[i] == host_out[k * ob + i]) i++;
                fprintf(stderr, "%s %s %dx%d -> %dx%d, tick %d picture %d: byte %zu differs\n",
                        g->rgb ? "rgb" : "nv12", mode, g->sw, g->sh, g->dw, g->dh, t, k, i);
                fail();
            }
        }
    }
    kp_free(g_dev, dev_in);
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
    free(host_in);
    free(host_out);
    free(want);
}

static const geo k_sizes[] = {
    {2, 2, 2, 2, 2, 2, false},         {2, 2, 8, 6, 2, 8, false},
    {64, 48, 64, 48, 64, 64, false}, /* identity, padded output */
    {64, 48, 32, 24, 64, 32, false},   {64, 48, 30, 18, 70, 30, false},
    {30, 18, 64, 48, 30, 66, false},   {1920, 1080, 640, 360, 2048, 640, false},
    {2, 2, 2, 2, 0, 0, true},          {16, 12, 16, 12, 0, 0, true},
    {16, 12, 6, 10, 0, 0, true},       {10, 6, 64, 34, 0, 0, true},
    {1280, 720, 320, 180, 0, 0, true},
};

static void module_matches_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_sizes / sizeof k_sizes[0]; i++) {
        check_module(&k_sizes[i], "stream");
        check_module(&k_sizes[i], "graph");
    }
    if (g_big) { /* 4K: 12.4 M bytes of NV12, and 24.9 M floats (past 16 M) of RGB per picture */
        const geo big = {3840, 2160, 1920, 1080, 3840, 1920, false};
        const geo big_rgb = {3840, 2160, 1920, 1080, 0, 0, true};
        check_module(&big, "graph");
        check_module(&big_rgb, "stream");
    }
}

/* kp_resize_nv12 gives the module's bytes: pageable and pinned host copies,
 * new and reused buffers. */
static void direct_call(void **state) {
    (void)state;
    const geo g = {720, 480, 416, 234, 768, 448, false};
    const size_t ib = in_bytes(&g), ob = out_bytes(&g);
    uint8_t *host = malloc(ib), *want = malloc(ob), *pinned = NULL;
    KPT_OK(kp_malloc_host(g_dev, ob, (void **)&pinned));
    void *a, *b;
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, ib, &a));
    KPT_OK(kp_malloc(g_dev, ob, &b));
    for (int round = 0; round < 3; round++) {
        fill(&g, host, (unsigned)(100 + round));
        reference(&g, host, want);
        KPT_OK(kp_memcpy_htod(g_dev, a, host, ib));
        KPT_OK(kp_resize_nv12(s, a, g.sw, g.sh, g.sp, b, g.dw, g.dh, g.dp));
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(g_dev, pinned, b, ob));
        assert_memory_equal(pinned, want, ob);
    }
    kp_free(g_dev, a);
    kp_free(g_dev, b);
    kp_free_host(g_dev, pinned);
    kp_stream_destroy(s);
    free(host);
    free(want);
}

/* kp_resizer_nv12: batches of 1, 7 and the maximum (33) pictures of
 * mixed sizes (2x2 to 1280x720, padded pitches, up and down), each batch
 * new pictures, more batches than the resizer has slots, on two streams
 * in turn; every output byte (the padding included) against the
 * reference. A refused batch leaves dst untouched. */
static void resizer_batches(void **state) {
    (void)state;
    enum { MAXP = 33 };
    static const int sizes[][3] = {{2, 2, 2},         {8, 6, 10},        {640, 360, 640},
                                   {1280, 720, 1280}, {320, 240, 384},   {720, 480, 768},
                                   {34, 18, 40},      {1920, 1080, 1920}};
    const int dw = 416, dh = 234;
    const int64_t dp = 448, slot = dp * dh / 2 * 3;
    kp_resizer_t r;
    kp_stream_t s[2];
    KPT_OK(kp_resizer_create(g_dev, MAXP, &r));
    KPT_OK(kp_stream_create(g_dev, &s[0]));
    KPT_OK(kp_stream_create(g_dev, &s[1]));
    void *src[MAXP], *dst;
    geo g[MAXP];
    uint8_t *host[MAXP], *want = malloc((size_t)slot), *got = malloc((size_t)(slot * MAXP));
    KPT_OK(kp_malloc(g_dev, (size_t)(slot * MAXP), &dst));
    for (int i = 0; i < MAXP; i++) {
        const int *z = sizes[(i * 5 + 3) % 8];
        g[i] = (geo){z[0], z[1], dw, dh, z[2], dp, false};
        host[i] = malloc(in_bytes(&g[i]));
        KPT_OK(kp_malloc(g_dev, in_bytes(&g[i]), &src[i]));
    }
    const int counts[] = {1, 7, MAXP, 2, MAXP, 1, 7};
    for (int b = 0; b < 7; b++) {
        const int n = counts[b];
        kp_nv12_picture pics[MAXP];
        for (int i = 0; i < n; i++) {
            fill(&g[i], host[i], (unsigned)(b * 100 + i));
            KPT_OK(kp_memcpy_htod(g_dev, src[i], host[i], in_bytes(&g[i])));
            pics[i] = (kp_nv12_picture){src[i], g[i].sw, g[i].sh, g[i].sp};
        }
        KPT_OK(kp_resizer_nv12(r, s[b % 2], pics, (size_t)n, dst, dw, dh, dp));
        KPT_OK(kp_stream_sync(s[b % 2]));
        KPT_OK(kp_memcpy_dtoh(g_dev, got, dst, (size_t)(slot * n)));
        for (int i = 0; i < n; i++) {
            reference(&g[i], host[i], want);
            assert_memory_equal(got + i * slot, want, (size_t)slot);
        }
    }
    /* refused: nothing enqueued, dst as it was */
    kp_nv12_picture bad[2] = {{src[0], g[0].sw, g[0].sh, g[0].sp}, {src[1], 7, 8, 8}};
    KPT_FAILS(kp_resizer_nv12(r, s[0], bad, 2, dst, dw, dh, dp), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "picture 1"));
    bad[1] = (kp_nv12_picture){NULL, 8, 8, 8};
    KPT_FAILS(kp_resizer_nv12(r, s[0], bad, 2, dst, dw, dh, dp), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "picture 1: data is NULL"));
    KPT_FAILS(kp_resizer_nv12(r, s[0], bad, MAXP + 1, dst, dw, dh, dp), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_resizer_nv12(r, s[0], bad, 1, dst, dw, dh, 100), KP_ERR_INVALID_ARG);
    KPT_OK(kp_stream_sync(s[0]));
    uint8_t *again = malloc((size_t)(slot * MAXP));
    KPT_OK(kp_memcpy_dtoh(g_dev, again, dst, (size_t)(slot * 7)));
    assert_memory_equal(again, got, (size_t)(slot * 7));
    free(again);
    for (int i = 0; i < MAXP; i++) {
        kp_free(g_dev, src[i]);
        free(host[i]);
    }
    kp_free(g_dev, dst);
    kp_resizer_destroy(r);
    kp_stream_destroy(s[0]);
    kp_stream_destroy(s[1]);
    free(want);
    free(got);
}

/* Bad parameters are named; a batch input that is not whole pictures is
 * refused at configure_io. */
static void bad_params(void **state) {
    (void)state;
    static const struct {
        const char *params, *want;
    } bad[] = {
        {"\"width\": 7, \"height\": 8, \"out_width\": 4, \"out_height\": 4", "sides even"},
        {"\"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 40000", "sides even"},
        {"\"format\": \"yuv\", \"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 4",
         "format \"yuv\""},
        {"\"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 4, \"pitch\": 6",
         "pitches 6"},
        {"\"format\": \"rgb\", \"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 4, "
         "\"pitch\": 8",
         "no pitch"},
        {"\"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 4, \"batch\": 0",
         "batch 0"},
        {"\"width\": 8, \"height\": 8, \"out_height\": 4", "out_width"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"kpipe_spec\": 1, \"name\": \"rs\", \"modules\": [{\"type\": \"resize\", "
                 "\"id\": \"r\", \"params\": {%s}}], \"inputs\": {\"x\": \"r.input\"}, "
                 "\"outputs\": {\"y\": \"r.output\"}}",
                 bad[i].params);
        kp_pipeline_t p = NULL;
        kp_status st = kp_pipeline_create_from_json(g_dev, json, &p);
        if (st == KP_OK) st = kp_pipeline_setup(p);
        if (st == KP_OK || !strstr(kp_last_error(), bad[i].want))
            fprintf(stderr, "case %zu: %s (want \"%s\")\n", i, kp_last_error(), bad[i].want);
        assert_int_not_equal(st, KP_OK);
        assert_non_null(strstr(kp_last_error(), bad[i].want));
        kp_pipeline_destroy(p);
    }
    const char *json = "{\"kpipe_spec\": 1, \"name\": \"rs\", \"execution\": \"stream\", "
                       "\"modules\": [{\"type\": \"resize\", \"id\": \"r\", \"params\": "
                       "{\"width\": 8, \"height\": 8, \"out_width\": 4, \"out_height\": 4, "
                       "\"batch\": 4}}], \"inputs\": {\"x\": \"r.input\"}, \"outputs\": {\"y\": "
                       "\"r.output\"}}";
    kp_pipeline_t p;
    kp_stream_t s;
    void *d;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, 8 * 48, &d));
    KPT_OK(kp_pipeline_create_from_json(g_dev, json, &p));
    KPT_OK(kp_pipeline_setup(p));
    kp_port_info in = {"x", d, {0}}, out = {"y", NULL, {0}};
    int64_t shape[2] = {13, 8}; /* 12 rows per picture: not whole pictures */
    KPT_OK(kp_desc_init(&in.desc, KP_U8, 2, shape, NULL));
    KPT_FAILS(kp_pipeline_configure_io(p, &in, 1, &out, 1, s), KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "not whole pictures of 12"));
    kp_pipeline_destroy(p);
    kp_free(g_dev, d);
    kp_stream_destroy(s);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    g_big = argc > 2 && strcmp(argv[2], "BIG") == 0;
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: resize tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(module_matches_reference),
        cmocka_unit_test(direct_call),
        cmocka_unit_test(resizer_batches),
        cmocka_unit_test(bad_params),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
