/* Streams of more than 8 bits (HEVC Main10, H.264 High 10) as P016: the
 * writer makes 10-bit clips from pictures drawn here (libx265, libx264),
 * the reader gives them back as 16-bit samples, and every entry refuses by
 * name what it does not take. On the device named on the command line.
 *
 *   test_video_deep DEVICE   (cpu or cuda; exit 77 without the device) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev;
static char g_dir[256];

static const char *tmp_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

/* Picture i as P016 at pitch p (bytes): 10-bit samples in the high bits,
 * a smooth pattern whose steps are finer than 8 bits can say. */
static void draw16(uint8_t *b, int w, int h, int64_t p, int i) {
    for (int y = 0; y < h; y++) {
        uint16_t *row = (uint16_t *)(b + y * p);
        for (int x = 0; x < w; x++) {
            int v = (int)(440 + 240 * sin((x + 3 * i) * 0.031) + 160 * cos((y - 2 * i) * 0.043));
            row[x] = (uint16_t)(v << 6);
        }
    }
    for (int y = 0; y < h / 2; y++) {
        uint16_t *row = (uint16_t *)(b + (int64_t)h * p + y * p);
        for (int x = 0; x < w / 2; x++) {
            row[2 * x] = (uint16_t)((int)(512 + 200 * sin((x + i) * 0.07)) << 6);
            row[2 * x + 1] = (uint16_t)((int)(512 + 200 * cos((y + i) * 0.06)) << 6);
        }
    }
}

/* n drawn P016 frames written with cfg. */
static void write_deep(const char *path, int w, int h, int n, const kp_video_writer_config *cfg) {
    const int64_t p = 2 * (int64_t)w;
    const size_t bytes = (size_t)(p * h * 3 / 2);
    uint8_t *host = malloc(bytes);
    void *dev = NULL;
    kp_stream_t s;
    kp_video_writer_t wr;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, bytes, &dev));
    KPT_OK(kp_video_writer_open(g_dev, path, cfg, &wr));
    for (int i = 0; i < n; i++) {
        draw16(host, w, h, p, i);
        KPT_OK(kp_memcpy_htod(g_dev, dev, host, bytes));
        kp_video_frame f = {.format = KP_PIXEL_P016,
                            .width = w,
                            .height = h,
                            .pitch = p,
                            .pts = i,
                            .time_base = {1, 30},
                            .rate = {30, 1},
                            .matrix = KP_VIDEO_MATRIX_BT2020};
        KPT_OK(kp_video_writer_write(wr, s, dev, bytes, &f));
    }
    KPT_OK(kp_video_writer_close(wr));
    kp_free(g_dev, dev);
    kp_stream_destroy(s);
    free(host);
}

static void make_deep(const char *path, const char *codec, int w, int h, int n, int crf,
                      bool open_gop) {
    kp_video_writer_config cfg = KP_VIDEO_WRITER_CONFIG_INIT;
    cfg.codec = codec;
    cfg.crf = crf;
    cfg.bframes = 3;
    cfg.gop = 12;
    cfg.open_gop = open_gop;
    cfg.preset = "ultrafast";
    write_deep(path, w, h, n, &cfg);
}

/* PSNR of two P016 pictures' samples on the 10-bit scale. */
static double psnr10(const uint8_t *a, const uint8_t *b, size_t bytes) {
    const uint16_t *x = (const uint16_t *)a, *y = (const uint16_t *)b;
    double se = 0;
    for (size_t i = 0; i < bytes / 2; i++) {
        const double d = (double)(x[i] >> 6) - (double)(y[i] >> 6);
        se += d * d;
    }
    return se == 0 ? 99.0 : 10.0 * log10(1023.0 * 1023.0 * (double)(bytes / 2) / se);
}

/* HEVC Main10 and H.264 High 10, 4 sizes (odd multiples of two among
 * them): the reader says P016 at twice the width's bytes, on software
 * decode; every sample has its low 6 bits clear, the pictures come back
 * within 40 dB of what was drawn, and their steps finer than 8 bits stay.
 * The smallest HEVC clip is 18 wide: libx265 3.5's motion search reads
 * memory it never wrote on pictures 16 or 32 samples wide (valgrind shows
 * it), and such a clip came out anywhere from 20 to 59 dB run to run. */
static void deep_round_trip(void **state) {
    static const struct {
        const char *codec, *file;
        int w, h;
    } c[] = {{"hevc", "main10.mp4", 320, 240},
             {"hevc", "main10_odd.mkv", 66, 38},
             {"h264", "high10.mp4", 176, 144},
             {"hevc", "main10_small.mp4", 18, 18},
             {"h264", "high10_2x2.mp4", 2, 2}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        char path[512];
        const int n = 12;
        make_deep(tmp_path(path, sizeof path, c[k].file), c[k].codec, c[k].w, c[k].h, n, 4, false);
        kpt_frames f;
        KPT_OK(kpt_read_frames(g_dev, path, KP_VIDEO_DECODE_AUTO, KP_PIXEL_NONE, &f));
        assert_int_equal(f.n, n);
        assert_int_equal(f.info.format, KP_PIXEL_P016);
        assert_int_equal(f.info.pitch, 2 * c[k].w);
        assert_string_equal(f.info.codec, c[k].codec);
        assert_non_null(strstr(f.info.decoder, "libavcodec"));
        uint8_t *want = malloc(f.bytes);
        double worst = 99;
        size_t fine = 0, total = 0;
        for (int i = 0; i < n; i++) {
            const uint8_t *got = f.data + f.bytes * (size_t)i;
            draw16(want, c[k].w, c[k].h, 2 * c[k].w, i);
            const uint16_t *g = (const uint16_t *)got;
            for (size_t j = 0; j < f.bytes / 2; j++) {
                if (g[j] & 63) fail_msg("%s frame %d sample %zu is %u: low bits set", path, i, j, g[j]);
                fine += (g[j] >> 6) & 3;
                total++;
            }
            const double p = psnr10(want, got, f.bytes);
            worst = p < worst ? p : worst;
        }
        print_message("%s %dx%d: worst PSNR %.2f dB (10-bit scale)\n", c[k].file, c[k].w, c[k].h,
                      worst);
        if (c[k].w > 2) assert_true(worst >= 40.0);
        /* cut to 8 bits, every sample's two lowest 10-bit bits would be 0 */
        if (c[k].w > 2) assert_true(fine > total / 4);
        free(want);
        free(f.data);
    }
}

/* The 10-bit clip asked for as NV12 or I420 by name: every sample rounded
 * to 8 bits, each frame equal to its P016 read so rounded. P016 asked for
 * an 8-bit clip, NVDEC asked for the 10-bit one, and pitches too small for
 * 16-bit rows: each refused by name at open. */
static void deep_as_8_bit_and_refusals(void **state) {
    char deep[512], plain[512];
    make_deep(tmp_path(deep, sizeof deep, "refuse10.mp4"), "hevc", 64, 64, 3, 20, false);
    kp_video_writer_config wc = KP_VIDEO_WRITER_CONFIG_INIT;
    wc.preset = "ultrafast";
    {
        const int w = 64, h = 64;
        const size_t bytes = (size_t)w * h * 3 / 2;
        void *dev;
        kp_stream_t s;
        kp_video_writer_t wr;
        KPT_OK(kp_stream_create(g_dev, &s));
        KPT_OK(kp_malloc(g_dev, bytes, &dev));
        KPT_OK(kp_memset_async(s, dev, 100, bytes));
        KPT_OK(kp_video_writer_open(g_dev, tmp_path(plain, sizeof plain, "plain8.mp4"), &wc, &wr));
        for (int i = 0; i < 3; i++) {
            kp_video_frame f = {.format = KP_PIXEL_NV12, .width = w, .height = h, .pitch = w,
                                .pts = i, .time_base = {1, 30}, .rate = {30, 1}};
            KPT_OK(kp_video_writer_write(wr, s, dev, bytes, &f));
        }
        KPT_OK(kp_video_writer_close(wr));
        kp_free(g_dev, dev);
        kp_stream_destroy(s);
    }
    kpt_frames wide;
    KPT_OK(kpt_read_frames(g_dev, deep, KP_VIDEO_DECODE_AUTO, KP_PIXEL_NONE, &wide));
    assert_int_equal(wide.n, 3);
    static const kp_pixel_format eight[] = {KP_PIXEL_NV12, KP_PIXEL_I420};
    for (size_t i = 0; i < 2; i++) {
        kpt_frames f;
        KPT_OK(kpt_read_frames(g_dev, deep, KP_VIDEO_DECODE_AUTO, eight[i], &f));
        assert_int_equal(f.n, 3);
        assert_int_equal(f.info.format, eight[i]);
        assert_int_equal(f.info.depth, 10);
        assert_int_equal(f.info.pitch, 64);
        const int w = 64, h = 64;
        for (int k = 0; k < 3; k++) {
            const uint16_t *p = (const uint16_t *)(wide.data + wide.bytes * (size_t)k);
            const uint8_t *g = f.data + f.bytes * (size_t)k;
            for (int j = 0; j < w * h * 3 / 2; j++) {
                /* sample j of the 8-bit frame, and where P016 holds it */
                int at = j;
                if (j >= w * h && eight[i] == KP_PIXEL_I420) {
                    const int c = j - w * h, plane = c / (w * h / 4), q = c % (w * h / 4);
                    at = w * h + (q / (w / 2)) * w + (q % (w / 2)) * 2 + plane;
                }
                const int v10 = p[at] >> 6, want = (v10 + 2) >> 2 > 255 ? 255 : (v10 + 2) >> 2;
                if (g[j] != want)
                    fail_msg("%s frame %d sample %d: %d, the 10-bit %d rounds to %d",
                             kp_pixel_format_name(eight[i]), k, j, g[j], v10, want);
            }
        }
        free(f.data);
    }
    free(wide.data);
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.format = KP_PIXEL_P016;
    kp_video_reader_t r = NULL;
    KPT_FAILS(kp_video_reader_open(g_dev, plain, &cfg, &r), KP_ERR_UNSUPPORTED);
    assert_non_null(strstr(kp_last_error(), "8-bit"));
    cfg.decoder = KP_VIDEO_DECODE_NVDEC;
    KPT_FAILS(kp_video_reader_open(g_dev, deep, &cfg, &r), KP_ERR_UNSUPPORTED);
    cfg.format = KP_PIXEL_NONE;
    KPT_FAILS(kp_video_reader_open(g_dev, deep, &cfg, &r), KP_ERR_UNSUPPORTED);
    /* a pitch too small for 16-bit rows */
    cfg = (kp_video_reader_config)KP_VIDEO_READER_CONFIG_INIT;
    cfg.pitch = 64;
    KPT_FAILS(kp_video_reader_open(g_dev, deep, &cfg, &r), KP_ERR_INVALID_ARG);
    cfg.format = KP_PIXEL_P016;
    KPT_FAILS(kp_video_reader_open(g_dev, deep, &cfg, &r), KP_ERR_INVALID_ARG);
    /* asked as P016 with room: taken */
    cfg.pitch = 256;
    KPT_OK(kp_video_reader_open(g_dev, deep, &cfg, &r));
    kp_video_reader_info in;
    KPT_OK(kp_video_reader_get_info(r, &in));
    assert_int_equal(in.pitch, 256);
    assert_int_equal(in.format, KP_PIXEL_P016);
    kp_video_reader_close(r);
}

/* A writer's P016 frames: a row shorter than twice the width, and a P016
 * frame into a stream that began 8-bit, are refused by name and change
 * nothing: the clip holds the frames written before and after. */
static void deep_writer_refusals(void **state) {
    char path[512];
    const int w = 64, h = 48;
    const size_t bytes = (size_t)w * 2 * h * 3 / 2;
    void *dev;
    kp_stream_t s;
    kp_video_writer_t wr;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, bytes, &dev));
    KPT_OK(kp_memset_async(s, dev, 0x40, bytes));
    kp_video_writer_config cfg = KP_VIDEO_WRITER_CONFIG_INIT;
    cfg.preset = "ultrafast";
    KPT_OK(kp_video_writer_open(g_dev, tmp_path(path, sizeof path, "w8.mp4"), &cfg, &wr));
    kp_video_frame f = {.format = KP_PIXEL_NV12, .width = w, .height = h, .pitch = w,
                        .pts = 0, .time_base = {1, 30}, .rate = {30, 1}};
    KPT_OK(kp_video_writer_write(wr, s, dev, bytes, &f));
    kp_video_frame d = f;
    d.format = KP_PIXEL_P016;
    d.pts = 1;
    KPT_FAILS(kp_video_writer_write(wr, s, dev, bytes, &d), KP_ERR_INVALID_ARG); /* pitch = w */
    assert_non_null(strstr(kp_last_error(), "P016"));
    d.pitch = 2 * w;
    KPT_FAILS(kp_video_writer_write(wr, s, dev, bytes, &d), KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "P016"));
    f.pts = 1;
    KPT_OK(kp_video_writer_write(wr, s, dev, bytes, &f));
    KPT_OK(kp_video_writer_close(wr));
    kpt_frames got;
    KPT_OK(kpt_read_frames(g_dev, path, KP_VIDEO_DECODE_SOFTWARE, KP_PIXEL_NV12, &got));
    assert_int_equal(got.n, 2);
    free(got.data);
    /* encoders that do not write the codec asked for */
    cfg.codec = "hevc";
    cfg.encoder = "libx264";
    KPT_FAILS(kp_video_writer_open(g_dev, path, &cfg, &wr), KP_ERR_INVALID_ARG);
    cfg.codec = "h264";
    cfg.encoder = "libx265";
    KPT_FAILS(kp_video_writer_open(g_dev, path, &cfg, &wr), KP_ERR_INVALID_ARG);
    cfg.codec = "vp9";
    cfg.encoder = NULL;
    KPT_FAILS(kp_video_writer_open(g_dev, path, &cfg, &wr), KP_ERR_UNSUPPORTED);
    kp_free(g_dev, dev);
    kp_stream_destroy(s);
}

/* Random access on a Main10 clip with B-frames and open groups of
 * pictures equals sequential decode, byte for byte, on 100 random indices;
 * a parallel reader (2 sessions) gives the same frames in order. */
static void deep_seek_exact(void **state) {
    char path[512];
    const int w = 96, h = 64, n = 60;
    make_deep(tmp_path(path, sizeof path, "seek10.mp4"), "hevc", w, h, n, 24, true);
    kpt_frames seq, par;
    KPT_OK(kpt_read_frames(g_dev, path, KP_VIDEO_DECODE_SOFTWARE, KP_PIXEL_P016, &seq));
    assert_int_equal(seq.n, n);
    kp_video_reader_config pc = KP_VIDEO_READER_CONFIG_INIT;
    pc.parallel = 2;
    KPT_OK(kpt_read_frames_cfg(g_dev, path, &pc, &par));
    assert_int_equal(par.n, n);
    assert_int_equal(par.info.format, KP_PIXEL_P016);
    assert_memory_equal(par.data, seq.data, seq.bytes * (size_t)n);
    kp_video_reader_t r;
    kp_stream_t s;
    void *buf;
    uint8_t *host = malloc(seq.bytes);
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, seq.bytes, &buf));
    KPT_OK(kp_video_reader_open(g_dev, path, NULL, &r));
    uint64_t rng = 777;
    for (int k = 0; k < 100; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const int64_t i = (int64_t)((rng >> 33) % (uint64_t)n);
        KPT_OK(kp_video_reader_seek(r, i));
        kp_video_frame vf;
        bool eos;
        KPT_OK(kp_video_reader_next(r, s, buf, seq.bytes, &vf, &eos));
        assert_false(eos);
        assert_int_equal(vf.format, KP_PIXEL_P016);
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(g_dev, host, buf, seq.bytes));
        if (memcmp(host, seq.data + seq.bytes * (size_t)i, seq.bytes))
            fail_msg("frame %lld after a seek differs from sequential decode", (long long)i);
    }
    kp_video_reader_close(r);
    kp_free(g_dev, buf);
    kp_stream_destroy(s);
    free(host);
    free(seq.data);
    free(par.data);
}

static void not_built(void **state) {
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.format = KP_PIXEL_P016;
    kp_video_reader_t r;
    KPT_FAILS(kp_video_reader_open(g_dev, "x.mp4", &cfg, &r), KP_ERR_UNSUPPORTED);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (kp_device_open(name, &g_dev) != KP_OK) {
        fprintf(stderr, "no %s device: %s\n", name, kp_last_error());
        return 77;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/kp_video_deep_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    int rc;
    if (!kp_video_built()) {
        const struct CMUnitTest off[] = {cmocka_unit_test(not_built)};
        rc = cmocka_run_group_tests(off, NULL, NULL);
    } else {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(deep_round_trip),
            cmocka_unit_test(deep_as_8_bit_and_refusals),
            cmocka_unit_test(deep_writer_refusals),
            cmocka_unit_test(deep_seek_exact),
        };
        rc = cmocka_run_group_tests(tests, NULL, NULL);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    if (kp_video_built()) KPT_OK(kp_video_pool_limit(0));
    kp_device_close(g_dev);
    return rc;
}
