/* The video path of flows: y4m source and sink, the testsrc source, and the
 * video modules (i420_rgb, sharpen, rgb_i420) with the engine between them,
 * on the device named on the command line. Every byte is checked: the
 * integer stages exactly; the float stages against the cpu backend (on a
 * GPU), within 1 of 255 per sample, and against properties that hold
 * without sharing the modules' code (a colour round trip, a flat picture).
 *
 *   test_video DEVICE [BIG]   (cpu or cuda; exit 77 without the device;
 *                              BIG: also 1920x1080 and 3840x2160) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "flow/stages/pattern-impl.h" /* the testsrc picture, to check every byte */

static kp_device_t g_dev, g_cpu;
static bool g_big;
static char g_dir[256];

/* A y4m file as read here, independently of the library's reader. */
typedef struct clip {
    int64_t w, h, n;
    char tags[256];
    unsigned char *data; /* n frames of w*h*3/2 bytes */
} clip;

static void clip_free(clip *c) {
    free(c->data);
    memset(c, 0, sizeof *c);
}

static void clip_read(const char *path, clip *c) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char line[512];
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(strncmp(line, "YUV4MPEG2 ", 10), 0);
    const char *w = strstr(line, " W"), *h = strstr(line, " H");
    assert_true(w && h);
    c->w = atoll(w + 2);
    c->h = atoll(h + 2);
    const char *rest = strchr(h + 1, ' ');
    snprintf(c->tags, sizeof c->tags, "%s", rest ? rest : "");
    size_t fb = (size_t)(c->w * c->h * 3 / 2);
    while (fgets(line, sizeof line, f)) {
        assert_string_equal(line, "FRAME\n");
        c->data = realloc(c->data, (size_t)(c->n + 1) * fb);
        assert_non_null(c->data);
        assert_int_equal(fread(c->data + (size_t)c->n * fb, 1, fb, f), fb);
        c->n++;
    }
    fclose(f);
}

static const char *tmp_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

/* Runs a flow given as JSON text to its end. */
static kp_status run_flow(kp_device_t dev, const char *json) {
    kp_flow_t f = NULL;
    kp_status st = kp_flow_create_from_json(dev, json, &f);
    if (st == KP_OK) st = kp_flow_start(f);
    if (st == KP_OK) st = kp_flow_wait(f);
    if (st != KP_OK && f) { /* keep the flow's error past its destruction */
        char err[600];
        snprintf(err, sizeof err, "%s", kp_last_error());
        kp_flow_destroy(f);
        return kp_set_error(st, "%s", err);
    }
    kp_flow_destroy(f);
    return st;
}

static void make_clip(kp_device_t dev, const char *path, int64_t w, int64_t h, int64_t frames) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"src\", \"source\": \"testsrc\", \"width\": %lld, \"height\": %lld, "
             "\"frames\": %lld},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             (long long)w, (long long)h, (long long)frames, path);
    KPT_OK(run_flow(dev, json));
}

/* The enhance pipeline of examples/video_enhance.json at w x h, `amount`. */
static const char *enhance_json(char *buf, size_t len, const char *in, const char *out,
                                const char *mode, int64_t w, int64_t h, double amount) {
    snprintf(buf, len,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"decode\", \"source\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"enhance\", \"queue\": {\"capacity\": 3}, \"pipeline\": "
             "{\"kpipe_spec\": 1, \"execution\": \"%s\", \"modules\": ["
             "{\"type\": \"i420_rgb\", \"id\": \"rgb\", \"params\": {\"width\": %lld, "
             "\"height\": %lld}},"
             "{\"type\": \"sharpen\", \"id\": \"d\", \"params\": {\"width\": %lld, \"height\": "
             "%lld, \"amount\": %g}},"
             "{\"type\": \"engine\", \"id\": \"add\", \"params\": {\"size\": %lld}},"
             "{\"type\": \"rgb_i420\", \"id\": \"yuv\", \"params\": {\"width\": %lld, "
             "\"height\": %lld}}],"
             "\"connections\": [\"rgb.output -> d.input\", \"rgb.output -> add.arg0\", "
             "\"d.output -> add.arg1\", \"add.result0 -> yuv.input\"],"
             "\"inputs\": {\"frame\": \"rgb.input\"}, \"outputs\": {\"frame\": \"yuv.output\"}}},"
             "{\"name\": \"encode\", \"sink\": \"y4m\", \"path\": \"%s\", \"queue\": "
             "{\"capacity\": 2}}]}",
             in, mode, (long long)w, (long long)h, (long long)w, (long long)h, amount,
             (long long)(3 * w * h), (long long)w, (long long)h, out);
    return buf;
}

/* Largest |a - b| over n bytes, and how many differ. */
static int max_diff(const unsigned char *a, const unsigned char *b, size_t n, size_t *count) {
    int worst = 0;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d) ++*count;
        if (d > worst) worst = d;
    }
    return worst;
}

/* testsrc writes its pattern, and a y4m copy through the source and the
 * sink (integer stages) is byte for byte the same. */
static void check_copy(int64_t w, int64_t h, int64_t frames) {
    char a[512], b[512], json[1024];
    tmp_path(a, sizeof a, "copy_a.y4m");
    tmp_path(b, sizeof b, "copy_b.y4m");
    make_clip(g_dev, a, w, h, frames);
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"in\", \"source\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\", \"queue\": {\"capacity\": "
             "1}}]}",
             a, b);
    KPT_OK(run_flow(g_dev, json));
    clip ca, cb;
    clip_read(a, &ca);
    clip_read(b, &cb);
    assert_int_equal(ca.w, w);
    assert_int_equal(ca.h, h);
    assert_int_equal(ca.n, frames);
    assert_int_equal(cb.n, frames);
    assert_string_equal(ca.tags, " F30:1 Ip A1:1 C420jpeg\n");
    assert_string_equal(cb.tags, ca.tags);
    size_t fb = (size_t)(w * h * 3 / 2);
    for (int64_t s = 0; s < frames; s++) {
        kp__testsrc_params p = {NULL, w, h, (uint64_t)s};
        for (size_t i = 0; i < fb; i++)
            if (ca.data[(size_t)s * fb + i] != kp__testsrc_value(&p, (int64_t)i))
                fail_msg("%lldx%lld frame %lld byte %zu: %u, want %u", (long long)w, (long long)h,
                         (long long)s, i, ca.data[(size_t)s * fb + i],
                         kp__testsrc_value(&p, (int64_t)i));
    }
    assert_memory_equal(ca.data, cb.data, (size_t)frames * fb);
    clip_free(&ca);
    clip_free(&cb);
}

static void y4m_copy_is_exact(void **state) {
    check_copy(2, 2, 3);   /* the smallest picture */
    check_copy(34, 18, 5); /* odd chroma sizes (17 x 9) */
    check_copy(640, 360, 4);
    if (g_big) check_copy(3840, 2160, 3);
}

/* The enhance flow: graph and stream mode agree exactly; amount 0 gives
 * the colour round trip (within 2 of 255: two roundings and the chroma
 * mean of a gentle picture); on a GPU, the cpu backend's output within 1. */
static void check_enhance(int64_t w, int64_t h, int64_t frames) {
    char in[512], g[512], s[512], z[512], c[512], json[4096];
    tmp_path(in, sizeof in, "enh_in.y4m");
    make_clip(g_dev, in, w, h, frames);
    KPT_OK(run_flow(g_dev, enhance_json(json, sizeof json, in, tmp_path(g, sizeof g, "enh_g.y4m"),
                                        "graph", w, h, 0.5)));
    KPT_OK(run_flow(g_dev, enhance_json(json, sizeof json, in, tmp_path(s, sizeof s, "enh_s.y4m"),
                                        "stream", w, h, 0.5)));
    KPT_OK(run_flow(g_dev, enhance_json(json, sizeof json, in, tmp_path(z, sizeof z, "enh_z.y4m"),
                                        "graph", w, h, 0.0)));
    clip ci, cg, cs, cz;
    clip_read(in, &ci);
    clip_read(g, &cg);
    clip_read(s, &cs);
    clip_read(z, &cz);
    size_t n = (size_t)frames * (size_t)(w * h * 3 / 2), count = 0;
    assert_int_equal(cg.n, frames);
    assert_string_equal(cg.tags, ci.tags); /* the source's tags go through */
    assert_memory_equal(cg.data, cs.data, n);
    int rt = max_diff(cz.data, ci.data, n, &count);
    printf("  %lldx%lld: colour round trip max diff %d (%zu of %zu bytes differ)\n", (long long)w,
           (long long)h, rt, count, n);
    assert_true(rt <= 2);
    int sharp = max_diff(cg.data, ci.data, n, &count);
    assert_true(sharp > 2 || w * h <= 4); /* sharpening changed the edges */
    if (g_dev != g_cpu) {
        KPT_OK(
            run_flow(g_cpu, enhance_json(json, sizeof json, in, tmp_path(c, sizeof c, "enh_c.y4m"),
                                         "graph", w, h, 0.5)));
        clip cc;
        clip_read(c, &cc);
        int d = max_diff(cg.data, cc.data, n, &count);
        printf("  %lldx%lld: %s against cpu: max diff %d (%zu of %zu bytes differ)\n", (long long)w,
               (long long)h, kp_device_name(g_dev), d, count, n);
        assert_true(d <= 1);
        clip_free(&cc);
    }
    clip_free(&ci);
    clip_free(&cg);
    clip_free(&cs);
    clip_free(&cz);
}

static void enhance_matches(void **state) {
    check_enhance(2, 2, 2);
    check_enhance(34, 18, 3);
    check_enhance(640, 360, 6);
    if (g_big) {
        check_enhance(1920, 1080, 3);
        check_enhance(3840, 2160, 3);
    }
}

/* A flat grey picture stays itself: no detail to sharpen, and grey (Y 126,
 * U = V = 128) survives the colour round trip. */
static void flat_picture_is_unchanged(void **state) {
    char in[512], out[512], json[4096];
    const int64_t w = 64, h = 32, fb = w * h * 3 / 2;
    tmp_path(in, sizeof in, "flat.y4m");
    FILE *f = fopen(in, "wb");
    assert_non_null(f);
    fprintf(f, "YUV4MPEG2 W64 H32 F25:1 Ip A1:1 C420mpeg2 XYSCSS=420MPEG2\nFRAME\n");
    unsigned char frame[64 * 32 * 3 / 2];
    memset(frame, 128, sizeof frame);
    memset(frame, 126, (size_t)(w * h));
    assert_int_equal(fwrite(frame, 1, (size_t)fb, f), fb);
    fclose(f);
    KPT_OK(
        run_flow(g_dev, enhance_json(json, sizeof json, in, tmp_path(out, sizeof out, "flat_o.y4m"),
                                     "graph", w, h, 2.0)));
    clip c;
    clip_read(out, &c);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.tags, " F25:1 Ip A1:1 C420mpeg2 XYSCSS=420MPEG2\n"); /* all kept */
    assert_memory_equal(c.data, frame, (size_t)fb);
    clip_free(&c);
}

/* "loop" replays the file; "frames" stops early. */
static void loop_and_frames(void **state) {
    char in[512], out[512], json[1024];
    tmp_path(in, sizeof in, "loop_in.y4m");
    make_clip(g_dev, in, 16, 8, 5);
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"in\", \"source\": \"y4m\", \"path\": \"%s\", \"loop\": true, "
             "\"frames\": 12},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             in, tmp_path(out, sizeof out, "loop_out.y4m"));
    KPT_OK(run_flow(g_dev, json));
    clip ci, co;
    clip_read(in, &ci);
    clip_read(out, &co);
    assert_int_equal(co.n, 12);
    size_t fb = 16 * 8 * 3 / 2;
    for (int k = 0; k < 12; k++)
        assert_memory_equal(co.data + (size_t)k * fb, ci.data + (size_t)(k % 5) * fb, fb);
    clip_free(&ci);
    clip_free(&co);
}

/* Writes `text` then `extra` bytes of frame data to the file. */
static const char *write_file(const char *name, const char *text, size_t extra) {
    static char path[512];
    tmp_path(path, sizeof path, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    for (size_t i = 0; i < extra; i++) fputc(i & 0xff, f);
    fclose(f);
    return path;
}

static kp_status run_source(const char *path) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"in\", \"source\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"sink\", \"sink\": \"null\"}]}",
             path);
    return run_flow(g_dev, json);
}

#define EXPECT_ERROR(expr, want_st, text)                                         \
    do {                                                                          \
        KPT_FAILS(expr, want_st);                                                 \
        if (!strstr(kp_last_error(), text))                                       \
            fail_msg("error \"%s\" does not name \"%s\"", kp_last_error(), text); \
    } while (0)

static void bad_files_are_named_errors(void **state) {
    char missing[512];
    EXPECT_ERROR(run_source(tmp_path(missing, sizeof missing, "none.y4m")), KP_ERR_IO,
                 "cannot open");
    EXPECT_ERROR(run_source(write_file("e.y4m", "", 0)), KP_ERR_PARSE, "an empty file");
    EXPECT_ERROR(run_source(write_file("m.y4m", "RIFF W4 H4\n", 0)), KP_ERR_PARSE,
                 "not a YUV4MPEG2 file");
    EXPECT_ERROR(run_source(write_file("nw.y4m", "YUV4MPEG2 H4\n", 0)), KP_ERR_PARSE, "no width");
    EXPECT_ERROR(run_source(write_file("w0.y4m", "YUV4MPEG2 W0 H4\n", 0)), KP_ERR_PARSE,
                 "bad W tag");
    EXPECT_ERROR(run_source(write_file("wx.y4m", "YUV4MPEG2 W4x H4\n", 0)), KP_ERR_PARSE,
                 "bad W tag");
    EXPECT_ERROR(run_source(write_file("big.y4m", "YUV4MPEG2 W999999999 H4\n", 0)),
                 KP_ERR_UNSUPPORTED, "2 .. 16384");
    EXPECT_ERROR(run_source(write_file("odd.y4m", "YUV4MPEG2 W5 H4\n", 0)), KP_ERR_UNSUPPORTED,
                 "even");
    EXPECT_ERROR(run_source(write_file("c444.y4m", "YUV4MPEG2 W4 H4 C444\n", 0)),
                 KP_ERR_UNSUPPORTED, "\"C444\"");
    EXPECT_ERROR(run_source(write_file("c10.y4m", "YUV4MPEG2 W4 H4 C420p10\n", 0)),
                 KP_ERR_UNSUPPORTED, "\"C420p10\"");
    EXPECT_ERROR(run_source(write_file("f.y4m", "YUV4MPEG2 W4 H4 F30\n", 0)), KP_ERR_PARSE,
                 "bad F tag");
    EXPECT_ERROR(run_source(write_file("i.y4m", "YUV4MPEG2 W4 H4 Iq\n", 0)), KP_ERR_PARSE,
                 "interlacing");
    /* mixed interlacing: per-frame tags a flow does not carry, refused */
    EXPECT_ERROR(run_source(write_file("im.y4m", "YUV4MPEG2 W4 H4 Im\nFRAME Ip\n", 24)),
                 KP_ERR_UNSUPPORTED, "mixed interlacing (Im");
    EXPECT_ERROR(run_source(write_file("t.y4m", "YUV4MPEG2 W4 H4 Z9\n", 0)), KP_ERR_PARSE,
                 "unknown header tag");
    EXPECT_ERROR(run_source(write_file("nl.y4m", "YUV4MPEG2 W4 H4", 0)), KP_ERR_PARSE,
                 "ends inside a header line");
    char longline[400];
    memset(longline, 'X', sizeof longline);
    memcpy(longline, "YUV4MPEG2 W4 H4 ", 16);
    longline[sizeof longline - 1] = '\0';
    EXPECT_ERROR(run_source(write_file("long.y4m", longline, 0)), KP_ERR_PARSE, "longer than");
    /* frame errors stop the running flow, named by stage and frame */
    EXPECT_ERROR(run_source(write_file("cut.y4m", "YUV4MPEG2 W4 H4\nFRAME\n", 20)), KP_ERR_PARSE,
                 "stage \"in\"");
    assert_non_null(strstr(kp_last_error(), "frame 0 is cut short (20 of 24 bytes)"));
    EXPECT_ERROR(run_source(write_file("mk.y4m", "YUV4MPEG2 W4 H4\nFRAMX\n", 24)), KP_ERR_PARSE,
                 "expected \"FRAME\"");
    /* a valid empty stream ends at once */
    KPT_OK(run_source(write_file("none.y4m", "YUV4MPEG2 W4 H4 F30000:1001 A0:0 Ip\n", 0)));
}

static void bad_flows_are_named_errors(void **state) {
    char json[1024], out[512];
    tmp_path(out, sizeof out, "bad_out.y4m");
    /* floats are not a picture: the sink says so at the first frame */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"src\", \"source\": \"synthetic\", \"frames\": 2, \"shape\": [96]},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             out);
    EXPECT_ERROR(run_flow(g_dev, json), KP_ERR_MISMATCH, "is not an I420 picture");
    static const struct {
        const char *stage, *error;
    } cases[] = {
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 3, \"height\": 2}", "even"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 20000, \"height\": 2}",
         "$.stages[0].width"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"height\": 2}", "$.stages[0].width"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 2, \"height\": 2, \"shape\": "
         "[1]}",
         "takes no \"shape\""},
        {"{\"name\": \"s\", \"source\": \"y4m\"}", "needs a file path"},
        {"{\"name\": \"s\", \"source\": \"y4m\", \"path\": \"x\", \"loop\": 1}", "true or false"},
        {"{\"name\": \"s\", \"source\": \"synthetic\", \"shape\": [4], \"loop\": true}",
         "takes no \"loop\""},
        {"{\"name\": \"s\", \"source\": \"camera\"}", "\"testsrc\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"o\", \"sink\": \"null\"}]}",
                 cases[i].stage);
        kp_flow_t f = NULL;
        kp_status st = kp_flow_create_from_json(g_dev, json, &f);
        assert_null(f);
        assert_int_not_equal(st, KP_OK);
        if (!strstr(kp_last_error(), cases[i].error))
            fail_msg("case %zu: \"%s\" does not name \"%s\"", i, kp_last_error(), cases[i].error);
    }
    /* the video modules check their sizes */
    kp_pipeline_t p = NULL;
    KPT_FAILS(kp_pipeline_create_from_json(
                  g_dev,
                  "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"i420_rgb\", \"id\": \"r\", "
                  "\"params\": {\"width\": 7, \"height\": 4}}], \"inputs\": {\"x\": \"r.input\"}, "
                  "\"outputs\": {\"y\": \"r.output\"}}",
                  &p),
              KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "7x4"));
    KPT_FAILS(kp_pipeline_create_from_json(
                  g_dev,
                  "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"sharpen\", \"id\": \"s\", "
                  "\"params\": {\"width\": 8, \"height\": 4, \"amount\": 99}}], \"inputs\": "
                  "{\"x\": \"s.input\"}, \"outputs\": {\"y\": \"s.output\"}}",
                  &p),
              KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "amount"));
}

/* One tick of a one-input pipeline on u8 NV12 [rows, w] in host memory;
 * the output's bytes come back in `out` (at most `cap`), its shape in `od`. */
static kp_status sized_tick(kp_pipeline_t p, kp_stream_t s, bool *built, const uint8_t *host,
                            int64_t rows, int64_t w, uint8_t *out, size_t cap,
                            kp_tensor_desc *od) {
    void *d = NULL;
    int64_t shape[2] = {rows, w};
    KPT_OK(kp_malloc(g_dev, (size_t)(rows * w), &d));
    KPT_OK(kp_memcpy_htod(g_dev, d, host, (size_t)(rows * w)));
    kp_port_info in = {"x", d, {0}}, o = {"y", NULL, {0}};
    KPT_OK(kp_desc_init(&in.desc, KP_U8, 2, shape, NULL));
    kp_status st = kp_pipeline_configure_io(p, &in, 1, &o, 1, s);
    if (st == KP_OK && !*built) {
        KPT_OK(kp_pipeline_warmup(p, s));
        if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) KPT_OK(kp_pipeline_build_graph(p));
        *built = true;
    }
    if (st == KP_OK)
        st = kp_pipeline_mode(p) == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, s)
                                                  : kp_pipeline_execute_stream(p, s);
    if (st == KP_OK) st = kp_stream_sync(s);
    size_t bytes = st == KP_OK ? (size_t)kp_desc_bytes_needed(&o.desc) : 0;
    if (st == KP_OK) {
        assert_true(bytes <= cap);
        *od = o.desc;
        st = kp_memcpy_dtoh(g_dev, out, o.data, bytes);
    }
    kp_free(g_dev, d);
    return st;
}

/* NV12 -> RGB -> NV12 through modules sized by their frames ({"max": N}),
 * in graph mode, at sizes that change per tick (the maximum, smaller, the
 * smallest, back): every byte equals the same modules made for that one
 * size. A module sized for larger frames takes a smaller one's output; the
 * other way is refused, as are odd sizes, a pitch and a batch. */
static void sized_modules(void **state) {
    static const char *const sized =
        "{\"kpipe_spec\": 1, \"execution\": \"graph\", \"modules\": ["
        "{\"type\": \"nv12_rgb\", \"id\": \"a\", \"params\": {\"width\": {\"max\": 96}, "
        "\"height\": {\"max\": 64}, \"matrix\": \"bt709\"}},"
        "{\"type\": \"sharpen\", \"id\": \"b\", \"params\": {\"width\": {\"max\": 96}, "
        "\"height\": {\"max\": 64}}},"
        "{\"type\": \"rgb_nv12\", \"id\": \"c\", \"params\": {\"width\": {\"max\": 128}, "
        "\"height\": {\"max\": 96}, \"matrix\": \"bt709\"}}],"
        "\"connections\": [\"a.output -> b.input\", \"b.output -> c.input\"],"
        "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"c.output\"}}";
    kp_stream_t s;
    kp_pipeline_t p, q;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_pipeline_create_from_json(g_dev, sized, &p));
    KPT_OK(kp_pipeline_setup(p));
    bool built = false;
    static const int64_t sizes[][2] = {{96, 64}, {34, 18}, {2, 2}, {96, 64}, {60, 40}};
    const size_t cap = 96 * 96;
    uint8_t *host = malloc(cap), *got = malloc(cap), *want = malloc(cap);
    assert_true(host && got && want);
    uint64_t seed = 7;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int64_t w = sizes[k][0], h = sizes[k][1], rows = h / 2 * 3;
        for (int64_t i = 0; i < rows * w; i++) host[i] = (uint8_t)(kpt_rand(&seed) >> 24);
        kp_tensor_desc gd, wd;
        KPT_OK(sized_tick(p, s, &built, host, rows, w, got, cap, &gd));
        assert_int_equal(gd.shape[0], rows);
        assert_int_equal(gd.shape[1], w);
        /* the same modules, fixed at this size */
        char fixed[1024];
        snprintf(fixed, sizeof fixed,
                 "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": ["
                 "{\"type\": \"nv12_rgb\", \"id\": \"a\", \"params\": {\"width\": %lld, "
                 "\"height\": %lld, \"matrix\": \"bt709\"}},"
                 "{\"type\": \"sharpen\", \"id\": \"b\", \"params\": {\"width\": %lld, "
                 "\"height\": %lld}},"
                 "{\"type\": \"rgb_nv12\", \"id\": \"c\", \"params\": {\"width\": %lld, "
                 "\"height\": %lld, \"matrix\": \"bt709\"}}],"
                 "\"connections\": [\"a.output -> b.input\", \"b.output -> c.input\"],"
                 "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"c.output\"}}",
                 (long long)w, (long long)h, (long long)w, (long long)h, (long long)w,
                 (long long)h);
        bool qb = false;
        KPT_OK(kp_pipeline_create_from_json(g_dev, fixed, &q));
        KPT_OK(kp_pipeline_setup(q));
        KPT_OK(sized_tick(q, s, &qb, host, rows, w, want, cap, &wd));
        kp_pipeline_destroy(q);
        for (int64_t i = 0; i < rows * w; i++)
            if (got[i] != want[i])
                fail_msg("%lldx%lld: byte %lld is %d, the fixed-size modules give %d",
                         (long long)w, (long long)h, (long long)i, got[i], want[i]);
    }
    /* an odd width, and rows that are not h*3/2 */
    kp_tensor_desc od;
    KPT_FAILS(sized_tick(p, s, &built, host, 30, 33, got, cap, &od), KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "even"));
    KPT_FAILS(sized_tick(p, s, &built, host, 31, 32, got, cap, &od), KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "4:2:0"));
    /* it goes on after a refused tick */
    KPT_OK(sized_tick(p, s, &built, host, 24, 32, got, cap, &od));
    kp_pipeline_destroy(p);
    /* larger into smaller, a pitch, a batch, one side sized and not the other */
    static const char *const bad[][2] = {
        {"{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"nv12_rgb\", \"id\": \"a\", "
         "\"params\": {\"width\": {\"max\": 96}, \"height\": {\"max\": 64}}},"
         "{\"type\": \"rgb_nv12\", \"id\": \"c\", \"params\": {\"width\": {\"max\": 64}, "
         "\"height\": {\"max\": 64}}}], \"connections\": [\"a.output -> c.input\"],"
         "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"c.output\"}}",
         "does not match"},
        {"{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"nv12_rgb\", \"id\": \"a\", "
         "\"params\": {\"width\": {\"max\": 96}, \"height\": {\"max\": 64}, \"pitch\": 128}}],"
         "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"a.output\"}}",
         "no \"pitch\""},
        {"{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"nv12_rgb\", \"id\": \"a\", "
         "\"params\": {\"width\": {\"max\": 96}, \"height\": {\"max\": 64}, \"batch\": 2}}],"
         "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"a.output\"}}",
         "batch 1"},
        {"{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"sharpen\", \"id\": \"a\", "
         "\"params\": {\"width\": {\"max\": 96}, \"height\": 64}}],"
         "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"a.output\"}}",
         "both"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = NULL;
        assert_int_not_equal(kp_pipeline_create_from_json(g_dev, bad[i][0], &p), KP_OK);
        assert_null(p);
        if (!strstr(kp_last_error(), bad[i][1]))
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, kp_last_error(), bad[i][1]);
    }
    free(host);
    free(got);
    free(want);
    kp_stream_destroy(s);
}

/* One tick of a pipeline of one module on host data: `in` (in_bytes) in,
 * out_bytes back into `out`. */
static void one_module(const char *json, const void *in, size_t in_bytes, void *out,
                       size_t out_bytes) {
    kp_pipeline_t p;
    kp_stream_t s;
    void *d;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_pipeline_create_from_json(g_dev, json, &p));
    KPT_OK(kp_pipeline_setup(p));
    KPT_OK(kp_malloc(g_dev, in_bytes, &d));
    KPT_OK(kp_memcpy_htod(g_dev, d, in, in_bytes));
    kp_port_info pi = {"x", d, {0}}, po = {"y", NULL, {0}};
    KPT_OK(kp_pipeline_input_info(p, 0, &pi));
    pi.data = d;
    KPT_OK(kp_pipeline_configure_io(p, &pi, 1, &po, 1, s));
    KPT_OK(kp_pipeline_warmup(p, s));
    KPT_OK(kp_pipeline_execute_stream(p, s));
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_memcpy_dtoh(g_dev, out, po.data, out_bytes));
    kp_free(g_dev, d);
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
}

/* The colour matrices: BT.2020's red is Y 74, Cb 97, Cr 240 in limited
 * range (ITU-R BT.2020's weights 0.2627 and 0.0593), and every matrix and
 * range takes flat colours to NV12 and back within 1.5/255. */
static void colour_matrices(void **state) {
    static const char *const mats[] = {"bt601", "bt709", "bt2020"};
    static const char *const ranges[] = {"limited", "full"};
    static const float colours[][3] = {{1, 0, 0},       {0, 1, 0},     {0, 0, 1},
                                       {0.75f, 0.5f, 0.25f}, {0.2f, 0.3f, 0.9f}, {1, 1, 1},
                                       {0, 0, 0},       {0.5f, 0.5f, 0.5f}};
    for (size_t m = 0; m < 3; m++)
        for (size_t r = 0; r < 2; r++)
            for (size_t c = 0; c < sizeof colours / sizeof colours[0]; c++) {
                float rgb[12], back[12];
                uint8_t nv12[6];
                for (int k = 0; k < 3; k++)
                    for (int i = 0; i < 4; i++) rgb[k * 4 + i] = colours[c][k];
                char to[512], from[512];
                snprintf(to, sizeof to,
                         "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": ["
                         "{\"type\": \"rgb_nv12\", \"id\": "
                         "\"m\", \"params\": {\"width\": 2, \"height\": 2, \"matrix\": \"%s\", "
                         "\"range\": \"%s\"}}], \"inputs\": {\"x\": \"m.input\"}, "
                         "\"outputs\": {\"y\": \"m.output\"}}",
                         mats[m], ranges[r]);
                snprintf(from, sizeof from,
                         "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": ["
                         "{\"type\": \"nv12_rgb\", \"id\": "
                         "\"m\", \"params\": {\"width\": 2, \"height\": 2, \"matrix\": \"%s\", "
                         "\"range\": \"%s\"}}], \"inputs\": {\"x\": \"m.input\"}, "
                         "\"outputs\": {\"y\": \"m.output\"}}",
                         mats[m], ranges[r]);
                one_module(to, rgb, sizeof rgb, nv12, sizeof nv12);
                if (m == 2 && r == 0 && c == 0 &&
                    (nv12[0] != 74 || nv12[4] != 97 || nv12[5] != 240))
                    fail_msg("BT.2020 red: Y %d Cb %d Cr %d, not 74 97 240", nv12[0], nv12[4],
                             nv12[5]);
                one_module(from, nv12, sizeof nv12, back, sizeof back);
                for (int i = 0; i < 12; i++)
                    if (fabsf(back[i] - rgb[i]) > 1.5f / 255.0f)
                        fail_msg("%s %s colour %zu: channel %d comes back %g, was %g", mats[m],
                                 ranges[r], c, i / 4, (double)back[i], (double)rgb[i]);
            }
    kp_pipeline_t p = NULL;
    assert_int_not_equal(
        kp_pipeline_create_from_json(
            g_dev,
            "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"nv12_rgb\", \"id\": \"m\", "
            "\"params\": {\"width\": 2, \"height\": 2, \"matrix\": \"bt2100\"}}], "
            "\"inputs\": {\"x\": \"m.input\"}, \"outputs\": {\"y\": \"m.output\"}}",
            &p),
        KP_OK);
    assert_non_null(strstr(kp_last_error(), "bt2020"));
}

static int make_dir(void **state) {
    snprintf(g_dir, sizeof g_dir, "%s/kp_video_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    g_big = argc > 2 && strcmp(argv[2], "BIG") == 0;
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: video tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    if (strcmp(kp_device_name(g_dev), "cpu:0") == 0) {
        g_cpu = g_dev;
    } else if (kp_device_open("cpu", &g_cpu) != KP_OK) {
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(y4m_copy_is_exact),          cmocka_unit_test(enhance_matches),
        cmocka_unit_test(flat_picture_is_unchanged),  cmocka_unit_test(loop_and_frames),
        cmocka_unit_test(bad_files_are_named_errors), cmocka_unit_test(bad_flows_are_named_errors),
        cmocka_unit_test(sized_modules),              cmocka_unit_test(colour_matrices),
    };
    int failed = cmocka_run_group_tests(tests, make_dir, remove_dir);
    if (g_cpu != g_dev) kp_device_close(g_cpu);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
