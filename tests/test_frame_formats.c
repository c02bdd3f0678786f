/* Every stage that reads a frame's pixels takes its layout from the frame
 * (kp_frame.video: NV12 or I420, and the pitch): the y4m sink packs any of
 * them into planar I420, the video sink encodes either, a pipeline refuses
 * frames its input's modules would misread and labels its output with what
 * its output's module makes, and a batch that resizes takes NV12 only. The
 * testsrc source draws one picture in either layout at any pitch, so every
 * byte written can be checked against the picture (src/flow/stages/pattern-impl.h)
 * on any device, with no video library.
 *
 *   test_frame_formats DEVICE [video]   (cpu or cuda; exit 77 without the
 *                                        device; "video": the cases that
 *                                        need FFmpeg, exit 77 without it) */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "flow/stages/pattern-impl.h" /* the testsrc picture, to check every byte */

static kp_device_t g_dev;
static const char *g_devname = "cpu";
static char g_dir[256];

static const char *tmp_path(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

/* Runs a flow given as JSON text on `dev` to its end, keeping the flow's
 * error past its destruction. */
static kp_status run_flow_on(kp_device_t dev, const char *json) {
    kp_flow_t f = NULL;
    kp_status st = kp_flow_create_from_json(dev, json, &f);
    if (st == KP_OK) st = kp_flow_start(f);
    if (st == KP_OK) st = kp_flow_wait(f);
    if (st != KP_OK && f) {
        char err[800];
        snprintf(err, sizeof err, "%s", kp_last_error());
        kp_flow_destroy(f);
        return kp_set_error(st, "%s", err);
    }
    kp_flow_destroy(f);
    return st;
}

static kp_status run_flow(const char *json) { return run_flow_on(g_dev, json); }

#define EXPECT_ERROR(expr, want_st, text)                                         \
    do {                                                                          \
        KPT_FAILS(expr, want_st);                                                 \
        if (!strstr(kp_last_error(), text))                                       \
            fail_msg("error \"%s\" does not name \"%s\"", kp_last_error(), text); \
    } while (0)

/* A y4m file as read here, apart from the library's reader. */
typedef struct clip {
    int64_t w, h, n;
    uint8_t *data; /* n frames of w*h*3/2 bytes */
} clip;

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
    const size_t fb = (size_t)(c->w * c->h * 3 / 2);
    while (fgets(line, sizeof line, f)) {
        assert_string_equal(line, "FRAME\n");
        c->data = realloc(c->data, (size_t)(c->n + 1) * fb);
        assert_non_null(c->data);
        assert_int_equal(fread(c->data + (size_t)c->n * fb, 1, fb, f), fb);
        c->n++;
    }
    fclose(f);
}

/* Frame `seq` of testsrc at w x h, packed planar I420: the picture itself. */
static void picture(int64_t w, int64_t h, uint64_t seq, uint8_t *out) {
    const kp__testsrc_params p = {NULL, w, h, seq};
    for (int64_t i = 0; i < w * h * 3 / 2; i++) out[i] = kp__testsrc_value(&p, i);
}

/* Packed I420 (w x h) laid out as `format` with rows of `pitch` bytes,
 * padding zero: what testsrc must write, built here sample by sample. */
static void lay_out(const uint8_t *i420, int64_t w, int64_t h, bool nv12, int64_t pitch,
                    uint8_t *out) {
    const int64_t cw = w / 2, ch = h / 2;
    const uint8_t *u = i420 + w * h, *v = u + cw * ch;
    memset(out, 0, (size_t)(pitch * h * 3 / 2));
    for (int64_t y = 0; y < h; y++) memcpy(out + y * pitch, i420 + y * w, (size_t)w);
    uint8_t *c = out + pitch * h;
    for (int64_t y = 0; y < ch; y++)
        for (int64_t x = 0; x < cw; x++) {
            if (nv12) {
                c[y * pitch + 2 * x] = u[y * cw + x];
                c[y * pitch + 2 * x + 1] = v[y * cw + x];
            } else {
                c[y * (pitch / 2) + x] = u[y * cw + x];
                c[ch * (pitch / 2) + y * (pitch / 2) + x] = v[y * cw + x];
            }
        }
}

/* The inverse: a picture in `format` with rows of `pitch` bytes, packed. */
static void pack(const uint8_t *in, int64_t w, int64_t h, bool nv12, int64_t pitch, uint8_t *out) {
    const int64_t cw = w / 2, ch = h / 2;
    uint8_t *u = out + w * h, *v = u + cw * ch;
    const uint8_t *c = in + pitch * h;
    for (int64_t y = 0; y < h; y++) memcpy(out + y * w, in + y * pitch, (size_t)w);
    for (int64_t y = 0; y < ch; y++)
        for (int64_t x = 0; x < cw; x++) {
            u[y * cw + x] = nv12 ? c[y * pitch + 2 * x] : c[y * (pitch / 2) + x];
            v[y * cw + x] = nv12 ? c[y * pitch + 2 * x + 1] : c[(ch + y) * (pitch / 2) + x];
        }
}

/* Fails naming the first byte where a and b differ, and which plane. */
static void expect_bytes(const uint8_t *got, const uint8_t *want, int64_t w, int64_t h,
                         const char *what) {
    const int64_t n = w * h * 3 / 2;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: byte %lld (%s) is %d, expected %d", what, (long long)i,
                     i < w * h           ? "Y"
                     : i < w * h * 5 / 4 ? "U"
                                         : "V",
                     got[i], want[i]);
}

/* A testsrc stage named `name` (JSON). */
static const char *testsrc_named(char *buf, size_t len, const char *name, int64_t w, int64_t h,
                                 const char *format, int64_t pitch, int frames) {
    snprintf(buf, len,
             "{\"name\": \"%s\", \"source\": \"testsrc\", \"width\": %lld, \"height\": "
             "%lld, \"format\": \"%s\", \"pitch\": %lld, \"frames\": %d}",
             name, (long long)w, (long long)h, format, (long long)pitch, frames);
    return buf;
}

static const char *testsrc_stage(char *buf, size_t len, int64_t w, int64_t h, const char *format,
                                 int64_t pitch, int frames) {
    return testsrc_named(buf, len, "src", w, h, format, pitch, frames);
}

/* The last frame an npy sink kept, as raw bytes (free after). */
static uint8_t *npy_bytes(const char *path, kp_tensor_desc *d) {
    void *data = NULL;
    size_t bytes = 0;
    KPT_OK(kp_npy_load(path, d, &data, &bytes));
    uint8_t *copy = malloc(bytes);
    assert_non_null(copy);
    memcpy(copy, data, bytes);
    kp_npy_free(data);
    return copy;
}

/* --- testsrc and the y4m sink ----------------------------------------------------- */

/* testsrc writes the picture in the layout and pitch it says (checked
 * against the layout built here), and the y4m sink writes every frame back
 * as the packed picture, whatever the layout and the pitch. */
static void check_y4m(int64_t w, int64_t h, const char *format, int64_t pitch) {
    const int frames = 3;
    const bool nv12 = format[0] == 'n';
    const int64_t P = pitch ? pitch : w;
    char src[256], y4m[512], npy[512], json[2048], what[128];
    testsrc_stage(src, sizeof src, w, h, format, pitch, frames);
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"split\", \"split\": \"copy\"},"
             "{\"name\": \"y4m\", \"from\": \"split\", \"sink\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"npy\", \"from\": \"split\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
             src, tmp_path(y4m, sizeof y4m, "fmt.y4m"), tmp_path(npy, sizeof npy, "fmt.npy"));
    KPT_OK(run_flow(json));
    uint8_t *want = malloc((size_t)(w * h * 3 / 2)), *laid = malloc((size_t)(P * h * 3 / 2));
    assert_true(want && laid);
    /* the frame as the source wrote it: the layout, the padding zero */
    kp_tensor_desc d;
    uint8_t *raw = npy_bytes(npy, &d);
    assert_int_equal(d.dtype, KP_U8);
    assert_int_equal(d.shape[0], h / 2 * 3);
    assert_int_equal(d.shape[1], P);
    picture(w, h, frames - 1, want);
    lay_out(want, w, h, nv12, P, laid);
    for (int64_t i = 0; i < P * h * 3 / 2; i++)
        if (raw[i] != laid[i])
            fail_msg("testsrc %lldx%lld %s pitch %lld: byte %lld is %d, expected %d", (long long)w,
                     (long long)h, format, (long long)P, (long long)i, raw[i], laid[i]);
    /* every frame of the file, packed */
    clip c;
    clip_read(y4m, &c);
    assert_int_equal(c.w, w);
    assert_int_equal(c.h, h);
    assert_int_equal(c.n, frames);
    for (int s = 0; s < frames; s++) {
        picture(w, h, (uint64_t)s, want);
        snprintf(what, sizeof what, "%s %lldx%lld pitch %lld, frame %d", format, (long long)w,
                 (long long)h, (long long)P, s);
        expect_bytes(c.data + (size_t)s * (size_t)(w * h * 3 / 2), want, w, h, what);
    }
    free(c.data);
    free(raw);
    free(laid);
    free(want);
}

static void y4m_sink_packs_every_format(void **state) {
    static const int64_t sizes[][2] = {{64, 48}, {2, 2}, {34, 18}, {320, 180}};
    static const char *const formats[] = {"i420", "nv12"};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int f = 0; f < 2; f++) {
            check_y4m(sizes[k][0], sizes[k][1], formats[f], 0);
            check_y4m(sizes[k][0], sizes[k][1], formats[f], sizes[k][0] + 6);
        }
}

/* Two streams, one I420 and one NV12 with a pitch, into one y4m file: every
 * frame is a picture of the source, each one once from each stream. */
static void y4m_sink_mixed_streams(void **state) {
    enum { W = 48, H = 32, FRAMES = 4 };
    char a[256], b[256], y4m[512], json[2048];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, %s, {\"name\": \"out\", \"from\": [\"a\", "
             "\"b\"], \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             testsrc_named(a, sizeof a, "a", W, H, "i420", 0, FRAMES),
             testsrc_named(b, sizeof b, "b", W, H, "nv12", W + 10, FRAMES),
             tmp_path(y4m, sizeof y4m, "mixed.y4m"));
    KPT_OK(run_flow(json));
    clip c;
    clip_read(y4m, &c);
    assert_int_equal(c.n, 2 * FRAMES);
    uint8_t want[FRAMES][W * H * 3 / 2];
    int seen[FRAMES] = {0};
    for (int s = 0; s < FRAMES; s++) picture(W, H, (uint64_t)s, want[s]);
    for (int k = 0; k < c.n; k++) {
        const uint8_t *got = c.data + (size_t)k * sizeof want[0];
        int s = 0;
        while (s < FRAMES && memcmp(got, want[s], sizeof want[s]) != 0) s++;
        if (s == FRAMES) fail_msg("frame %d of the mixed file is no picture of the source", k);
        seen[s]++;
    }
    for (int s = 0; s < FRAMES; s++) assert_int_equal(seen[s], 2);
    free(c.data);
}

/* The sink's own "format" says what the frames hold, over their label: NV12
 * frames the sink is told are I420 are written as they are, byte for byte. */
static void y4m_sink_format_key(void **state) {
    const int64_t w = 32, h = 16;
    char src[256], y4m[512], json[1024];
    testsrc_stage(src, sizeof src, w, h, "nv12", 0, 2);
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"out\", \"sink\": \"y4m\", "
             "\"path\": \"%s\", \"format\": \"i420\"}]}",
             src, tmp_path(y4m, sizeof y4m, "key.y4m"));
    KPT_OK(run_flow(json));
    clip c;
    clip_read(y4m, &c);
    assert_int_equal(c.n, 2);
    uint8_t want[32 * 16 * 3 / 2], laid[32 * 16 * 3 / 2];
    picture(w, h, 1, want);
    lay_out(want, w, h, true, w, laid);
    expect_bytes(c.data + sizeof laid, laid, w, h, "nv12 frames written as i420");
    free(c.data);
}

/* --- pipelines --------------------------------------------------------------------- */

/* A pipeline spec of modules `mods` (JSON objects) joined in a chain, its
 * input the first one's and its output the last one's. */
static const char *chain_spec(char *buf, size_t len, const char *const *mods, size_t n) {
    size_t at = (size_t)snprintf(buf, len, "{\"kpipe_spec\": 1, \"modules\": [");
    for (size_t i = 0; i < n; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", mods[i]);
    at += (size_t)snprintf(buf + at, len - at, "], \"connections\": [");
    for (size_t i = 1; i < n; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s\"m%zu.output -> m%zu.input\"",
                               i > 1 ? ", " : "", i - 1, i);
    snprintf(buf + at, len - at,
             "], \"inputs\": {\"frame\": \"m0.input\"}, \"outputs\": {\"frame\": \"m%zu.output\"}}",
             n - 1);
    return buf;
}

/* A module of type `type` with id m<i> at w x h, `extra` params appended. */
static const char *module(char *buf, size_t len, size_t i, const char *type, int64_t w, int64_t h,
                          const char *extra) {
    snprintf(buf, len,
             "{\"type\": \"%s\", \"id\": \"m%zu\", \"params\": {\"width\": %lld, \"height\": "
             "%lld%s}}",
             type, i, (long long)w, (long long)h, extra ? extra : "");
    return buf;
}

/* Frames of a pipeline's input layout other than the one its modules read
 * are refused at the first frame, naming both layouts and the module. */
static void pipeline_refuses_the_other_format(void **state) {
    static const struct {
        const char *source, *type, *want;
    } cases[] = {
        {"nv12", "i420_rgb", "is NV12, but pipeline \"pipeline\" takes I420 frames"},
        {"i420", "nv12_rgb", "is I420, but pipeline \"pipeline\" takes NV12 frames"},
    };
    for (size_t k = 0; k < 2; k++) {
        char m[2][256], spec[2048], src[256], json[4096];
        const char *mods[2] = {module(m[0], sizeof m[0], 0, cases[k].type, 32, 16, NULL),
                               module(m[1], sizeof m[1], 1,
                                      cases[k].type[0] == 'i' ? "rgb_i420" : "rgb_nv12", 32, 16,
                                      NULL)};
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
                 "{\"name\": \"out\", \"sink\": \"null\"}]}",
                 testsrc_stage(src, sizeof src, 32, 16, cases[k].source, 0, 2),
                 chain_spec(spec, sizeof spec, mods, 2));
        EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, cases[k].want);
        char type[64];
        snprintf(type, sizeof type, "m0.input (%s)", cases[k].type);
        if (!strstr(kp_last_error(), type)) fail_msg("\"%s\" names no %s", kp_last_error(), type);
    }
    /* the resize module reads NV12 */
    char m[256], spec[1024], src[256], json[2048];
    const char *mods[1] = {
        module(m, sizeof m, 0, "resize", 32, 16, ", \"out_width\": 16, \"out_height\": 8")};
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 32, 16, "i420", 0, 2),
             chain_spec(spec, sizeof spec, mods, 1));
    EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, "m0.input (resize)");
    /* inside the pipeline, NV12 into a module reading I420: the shapes agree,
     * the layouts do not, and the flow refuses the stage when it is made */
    char mm[4][256], spec4[4096];
    const char *chain[4] = {module(mm[0], sizeof mm[0], 0, "nv12_rgb", 32, 16, NULL),
                            module(mm[1], sizeof mm[1], 1, "rgb_nv12", 32, 16, NULL),
                            module(mm[2], sizeof mm[2], 2, "i420_rgb", 32, 16, NULL),
                            module(mm[3], sizeof mm[3], 3, "rgb_i420", 32, 16, NULL)};
    char json4[8192];
    snprintf(json4, sizeof json4,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 32, 16, "nv12", 0, 2),
             chain_spec(spec4, sizeof spec4, chain, 4));
    kp_flow_t f = NULL;
    KPT_FAILS(kp_flow_create_from_json(g_dev, json4, &f), KP_ERR_MISMATCH);
    assert_null(f);
    if (!strstr(kp_last_error(), "m1.output (rgb_nv12) makes NV12 pictures, but m2.input "
                                 "(i420_rgb), which it feeds, reads I420"))
        fail_msg("\"%s\" does not name the two modules and their layouts", kp_last_error());
}

/* Runs `spec` on `frames` testsrc frames (format, pitch) into a y4m file
 * and into an npy file (the last frame's raw bytes), and checks that the
 * y4m file's last frame is the npy frame packed as `out_format` at
 * out_w x out_h: the stage labelled its output with what it is. */
static void check_labelled(const char *spec, int64_t w, int64_t h, const char *format,
                           int64_t pitch, bool out_nv12, int64_t out_w, int64_t out_h,
                           const char *what) {
    const int frames = 2;
    char src[256], y4m[512], npy[512], json[8192];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
             "{\"name\": \"split\", \"split\": \"copy\"},"
             "{\"name\": \"y4m\", \"from\": \"split\", \"sink\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"npy\", \"from\": \"split\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, w, h, format, pitch, frames), spec,
             tmp_path(y4m, sizeof y4m, "label.y4m"), tmp_path(npy, sizeof npy, "label.npy"));
    KPT_OK(run_flow(json));
    kp_tensor_desc d;
    uint8_t *raw = npy_bytes(npy, &d);
    assert_int_equal(d.dtype, KP_U8);
    assert_int_equal(d.shape[0], out_h / 2 * 3);
    uint8_t *want = malloc((size_t)(out_w * out_h * 3 / 2));
    assert_non_null(want);
    pack(raw, out_w, out_h, out_nv12, d.shape[1], want);
    clip c;
    clip_read(y4m, &c);
    assert_int_equal(c.w, out_w);
    assert_int_equal(c.h, out_h);
    assert_int_equal(c.n, frames);
    expect_bytes(c.data + (size_t)(frames - 1) * (size_t)(out_w * out_h * 3 / 2), want, out_w,
                 out_h, what);
    free(c.data);
    free(want);
    free(raw);
}

/* A pipeline that turns one layout into the other hands its frames on
 * labelled with what its output's module makes. */
static void pipeline_labels_its_output(void **state) {
    const int64_t w = 64, h = 48;
    char m[2][256], spec[2048];
    const char *mods[2];
    mods[0] = module(m[0], sizeof m[0], 0, "nv12_rgb", w, h, NULL);
    mods[1] = module(m[1], sizeof m[1], 1, "rgb_i420", w, h, NULL);
    check_labelled(chain_spec(spec, sizeof spec, mods, 2), w, h, "nv12", 0, false, w, h,
                   "nv12_rgb -> rgb_i420");
    mods[0] = module(m[0], sizeof m[0], 0, "i420_rgb", w, h, NULL);
    mods[1] = module(m[1], sizeof m[1], 1, "rgb_nv12", w, h, ", \"pitch\": 72");
    check_labelled(chain_spec(spec, sizeof spec, mods, 2), w, h, "i420", 0, true, w, h,
                   "i420_rgb -> rgb_nv12 (pitch 72)");
    /* a resize of NV12 with a pitch, alone in its pipeline: the frames leave
     * at the new size; a pipeline of one module needs no "outputs" */
    snprintf(spec, sizeof spec,
             "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"resize\", \"id\": \"r\", "
             "\"params\": {\"width\": %lld, \"height\": %lld, \"pitch\": 70, \"out_width\": 32, "
             "\"out_height\": 24}}]}",
             (long long)w, (long long)h);
    check_labelled(spec, w, h, "nv12", 70, true, 32, 24, "resize 64x48 -> 32x24");
    /* a spec read from its file */
    char path[512];
    mods[0] = module(m[0], sizeof m[0], 0, "nv12_rgb", w, h, NULL);
    mods[1] = module(m[1], sizeof m[1], 1, "rgb_i420", w, h, NULL);
    FILE *f = fopen(tmp_path(path, sizeof path, "spec.json"), "w");
    assert_non_null(f);
    fputs(chain_spec(spec, sizeof spec, mods, 2), f);
    fclose(f);
    char quoted[600];
    snprintf(quoted, sizeof quoted, "\"%s\"", path);
    check_labelled(quoted, w, h, "nv12", 0, false, w, h, "nv12_rgb -> rgb_i420 from a file");
}

/* --- batches ----------------------------------------------------------------------- */

static void batches_take_their_format(void **state) {
    char src[256], json[4096], y4m[512], npy[512];
    const char *nv12_i420 =
        "{\"kpipe_spec\": 1, \"modules\": ["
        "{\"type\": \"nv12_rgb\", \"id\": \"a\", \"params\": {\"width\": 32, \"height\": 24, "
        "\"batch\": 4}},"
        "{\"type\": \"rgb_i420\", \"id\": \"b\", \"params\": {\"width\": 32, \"height\": 24, "
        "\"batch\": 4}}],"
        "\"connections\": [\"a.output -> b.input\"],"
        "\"inputs\": {\"frames\": \"a.input\"}, \"outputs\": {\"frames\": \"b.output\"}}";
    const char *i420_i420 =
        "{\"kpipe_spec\": 1, \"modules\": ["
        "{\"type\": \"i420_rgb\", \"id\": \"a\", \"params\": {\"width\": 32, \"height\": 24, "
        "\"batch\": 4}},"
        "{\"type\": \"rgb_i420\", \"id\": \"b\", \"params\": {\"width\": 32, \"height\": 24, "
        "\"batch\": 4}}],"
        "\"connections\": [\"a.output -> b.input\"],"
        "\"inputs\": {\"frames\": \"a.input\"}, \"outputs\": {\"frames\": \"b.output\"}}";
    /* a batch that resizes gives its pipeline NV12: one reading I420 is refused when made */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"b\", \"batch\": {\"max\": 4, "
             "\"deadline_us\": 1000, \"resize\": [32, 24]}, \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 64, 48, "nv12", 0, 4), i420_i420);
    kp_flow_t f = NULL;
    KPT_FAILS(kp_flow_create_from_json(g_dev, json, &f), KP_ERR_MISMATCH);
    assert_null(f);
    if (!strstr(kp_last_error(), "hands it NV12 pictures") || !strstr(kp_last_error(), "I420"))
        fail_msg("\"%s\" does not say what the batch hands and what the pipeline takes",
                 kp_last_error());
    /* ... and I420 frames are refused at the first batch, by name */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"b\", \"batch\": {\"max\": 4, "
             "\"deadline_us\": 1000, \"resize\": [32, 24]}, \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 64, 48, "i420", 0, 4), nv12_i420);
    EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, "is I420: a batch that resizes takes NV12");
    /* NV12 through NV12 -> I420: the frames leave as I420 at the batch's size */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"b\", \"batch\": {\"max\": 4, "
             "\"deadline_us\": 1000, \"resize\": [32, 24]}, \"pipeline\": %s},"
             "{\"name\": \"split\", \"split\": \"copy\"},"
             "{\"name\": \"y4m\", \"from\": \"split\", \"sink\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"npy\", \"from\": \"split\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, 64, 48, "nv12", 80, 5), nv12_i420,
             tmp_path(y4m, sizeof y4m, "batch.y4m"), tmp_path(npy, sizeof npy, "batch.npy"));
    KPT_OK(run_flow(json));
    kp_tensor_desc d;
    uint8_t *raw = npy_bytes(npy, &d);
    clip c;
    clip_read(y4m, &c);
    assert_int_equal(c.w, 32);
    assert_int_equal(c.h, 24);
    assert_int_equal(c.n, 5);
    expect_bytes(c.data + 4 * 32 * 24 * 3 / 2, raw, 32, 24, "batch resized, then I420");
    free(c.data);
    free(raw);
    /* a batch without resize checks every frame against its pipeline's input */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"b\", \"batch\": {\"max\": 4, "
             "\"deadline_us\": 1000}, \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 32, 24, "nv12", 0, 4), i420_i420);
    EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, "is NV12, but pipeline");
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"b\", \"batch\": {\"max\": 4, "
             "\"deadline_us\": 1000}, \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"null\"}]}",
             testsrc_stage(src, sizeof src, 32, 24, "nv12", 0, 4), nv12_i420);
    KPT_OK(run_flow(json));
}

/* --- refusals ---------------------------------------------------------------------- */

static void refusals_name_the_format(void **state) {
    char src[256], json[2048], out[512];
    tmp_path(out, sizeof out, "refused.y4m");
    /* f32 RGB still labelled I420 is not the picture it is said to be */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": "
             "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"i420_rgb\", \"id\": \"r\", "
             "\"params\": {\"width\": 32, \"height\": 16}}]}},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, 32, 16, "i420", 0, 1), out);
    EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, "is not the 32x16 I420 picture it is said to be");
    /* floats that are not video are not an I420 picture either */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"s\", \"source\": \"synthetic\", \"frames\": 1, \"shape\": [96]},"
             "{\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             out);
    EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, "is not an I420 picture");
    static const struct {
        const char *stage, *sink, *error;
    } cases[] = {
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 8, \"height\": 8, \"format\": "
         "\"yuyv\"}",
         "{\"name\": \"o\", \"sink\": \"null\"}", "$.stages[0].format: expected one of"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 8, \"height\": 8, \"pitch\": 9}",
         "{\"name\": \"o\", \"sink\": \"null\"}", "pitch 9 for width 8"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 8, \"height\": 8, \"pitch\": 6}",
         "{\"name\": \"o\", \"sink\": \"null\"}", "pitch 6 for width 8"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 8, \"height\": 8}",
         "{\"name\": \"o\", \"sink\": \"y4m\", \"path\": \"x.y4m\", \"format\": \"rgb\"}",
         "$.stages[1].format: expected one of"},
        {"{\"name\": \"s\", \"source\": \"testsrc\", \"width\": 8, \"height\": 8}",
         "{\"name\": \"o\", \"sink\": \"npy\", \"path\": \"x.npy\", \"format\": \"i420\"}",
         "takes no \"format\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(json, sizeof json, "{\"kpipe_flow\": 1, \"stages\": [%s, %s]}", cases[i].stage,
                 cases[i].sink);
        kp_flow_t f = NULL;
        kp_status st = kp_flow_create_from_json(g_dev, json, &f);
        assert_null(f);
        assert_int_not_equal(st, KP_OK);
        if (!strstr(kp_last_error(), cases[i].error))
            fail_msg("case %zu: \"%s\" does not name \"%s\"", i, kp_last_error(), cases[i].error);
    }
}

/* --- 16-bit frames (P016) ----------------------------------------------------------- */

/* The last frame of testsrc at w x h in `format` (pitch bytes) through a
 * one-module pipeline of `type` (`params` appended), as an npy file's
 * bytes (free after). */
static uint8_t *through(const char *format, int64_t pitch, const char *type, int64_t w, int64_t h,
                        const char *params, const char *name, int frames, size_t *bytes) {
    char src[256], mod[512], spec[1024], json[2048], npy[512];
    tmp_path(npy, sizeof npy, name);
    const char *mods[1] = {module(mod, sizeof mod, 0, type, w, h, params)};
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
             "{\"name\": \"out\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, w, h, format, pitch, frames),
             chain_spec(spec, sizeof spec, mods, 1), npy);
    KPT_OK(run_flow(json));
    kp_tensor_desc d;
    uint8_t *raw = npy_bytes(npy, &d);
    *bytes = (size_t)kp_desc_bytes_needed(&d);
    return raw;
}

/* testsrc's P016 is its NV12 picture in each word's high byte, so
 * p016_rgb (each sample divided by 256, exactly) must give nv12_rgb's RGB
 * bit for bit: at fixed sizes with a pitch past the row, sized by the
 * frames (a padded pitch packed first), f32 and f16, 2x2 to 3840x2160
 * (every one of its 24.9 M values compared). Frames
 * of the other layout are refused by name at each module, and the y4m
 * sink refuses P016. */
static void p016_through_flows(void **state) {
    static const struct {
        int64_t w, h, pitch16;
        const char *params;
        int frames;
    } c[] = {{32, 16, 64, NULL, 3},
             {66, 38, 160, NULL, 3},
             {2, 2, 4, ", \"dtype\": \"f16\"", 3},
             {66, 38, 160, ", \"matrix\": \"bt2020\", \"range\": \"full\"", 3},
             {3840, 2160, 7680, ", \"matrix\": \"bt709\"", 1}};
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        char p16[128];
        snprintf(p16, sizeof p16, ", \"pitch\": %lld%s", (long long)c[k].pitch16,
                 c[k].params ? c[k].params : "");
        size_t nb = 0, pb = 0;
        uint8_t *nv = through("nv12", 0, "nv12_rgb", c[k].w, c[k].h, c[k].params, "nv.npy",
                              c[k].frames, &nb);
        uint8_t *p = through("p016", c[k].pitch16, "p016_rgb", c[k].w, c[k].h, p16, "p.npy",
                             c[k].frames, &pb);
        assert_int_equal(nb, pb);
        if (memcmp(nv, p, nb)) fail_msg("case %zu: p016_rgb differs from nv12_rgb", k);
        free(p);
        free(nv);
    }
    /* sized by the frames: each tick's width from the frame, the padding dropped */
    char src[256], mod[512], spec[1024], json[2048], npy[2][512];
    const char *const fmt[2] = {"nv12", "p016"}, *const type[2] = {"nv12_rgb", "p016_rgb"};
    uint8_t *raw[2];
    kp_tensor_desc d[2];
    for (int k = 0; k < 2; k++) {
        snprintf(mod, sizeof mod, "{\"type\": \"%s\", \"id\": \"m0\", \"params\": "
                 "{\"width\": {\"max\": 128}, \"height\": {\"max\": 64}}}", type[k]);
        const char *mods[1] = {mod};
        tmp_path(npy[k], sizeof npy[k], k ? "sized16.npy" : "sized8.npy");
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
                 "{\"name\": \"out\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
                 testsrc_stage(src, sizeof src, 46, 30, fmt[k], k ? 100 : 0, 2),
                 chain_spec(spec, sizeof spec, mods, 1), npy[k]);
        KPT_OK(run_flow(json));
        raw[k] = npy_bytes(npy[k], &d[k]);
    }
    assert_true(kp_desc_same_shape(&d[0], &d[1]));
    assert_int_equal(d[1].shape[2], 30);
    assert_int_equal(d[1].shape[3], 46);
    assert_memory_equal(raw[0], raw[1], (size_t)kp_desc_bytes_needed(&d[0]));
    free(raw[0]);
    free(raw[1]);
    /* the other layout at each module, and at the y4m sink */
    for (int k = 0; k < 2; k++) {
        const char *mods[1] = {module(mod, sizeof mod, 0, type[k], 32, 16, NULL)};
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"p\", \"pipeline\": %s},"
                 "{\"name\": \"out\", \"sink\": \"null\"}]}",
                 testsrc_stage(src, sizeof src, 32, 16, fmt[1 - k], 0, 1),
                 chain_spec(spec, sizeof spec, mods, 1));
        EXPECT_ERROR(run_flow(json), KP_ERR_MISMATCH, k ? "is NV12, but pipeline" : "is P016, but pipeline");
        assert_non_null(strstr(kp_last_error(), k ? "\"p016" : "\"nv12"));
    }
    tmp_path(npy[0], sizeof npy[0], "p016.y4m");
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"out\", \"sink\": \"y4m\", "
             "\"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, 32, 16, "p016", 0, 1), npy[0]);
    EXPECT_ERROR(run_flow(json), KP_ERR_UNSUPPORTED, "frame 0 is P016");
}

/* --- no allocation per frame, none left on a failure -------------------------------- */

typedef struct counting {
    _Atomic long calls, live, fail_at, failed;
} counting;

static void *count_alloc(void *user, kp_mem_kind kind, size_t bytes, size_t align) {
    counting *c = user;
    long n = atomic_fetch_add(&c->calls, 1) + 1;
    if (n == atomic_load(&c->fail_at)) {
        atomic_fetch_add(&c->failed, 1);
        return NULL;
    }
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, bytes ? bytes : 1))
        return NULL;
    atomic_fetch_add(&c->live, 1);
    return p;
}

static void count_free(void *user, kp_mem_kind kind, void *p) {
    atomic_fetch_sub(&((counting *)user)->live, 1);
    free(p);
}

static bool count_permit(void *user, kp_mem_kind kind, size_t bytes) {
    counting *c = user;
    long n = atomic_fetch_add(&c->calls, 1) + 1;
    if (n != atomic_load(&c->fail_at)) return true;
    atomic_fetch_add(&c->failed, 1);
    return false;
}

/* NV12 frames with a pitch, packed by the y4m sink, through a device
 * opened under the hook: the allocations a run of `frames` asks for. */
static kp_status packing_flow(int frames, long *calls, counting *c) {
    kp_device_t dev = NULL;
    char src[256], json[1024], out[512];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"out\", \"sink\": \"y4m\", "
             "\"path\": \"%s\"}]}",
             testsrc_stage(src, sizeof src, 34, 18, "nv12", 40, frames),
             tmp_path(out, sizeof out, "alloc.y4m"));
    kp_status st = kp_device_open(g_devname, &dev);
    if (st == KP_OK) st = run_flow_on(dev, json);
    kp_device_close(dev);
    *calls = atomic_load(&c->calls);
    return st;
}

static void packing_allocates_once(void **state) {
    counting c = {0};
    kp_alloc_hook hook = KP_ALLOC_HOOK_INIT;
    hook.alloc = count_alloc;
    hook.free = count_free;
    hook.permit = count_permit;
    hook.user = &c;
    KPT_OK(kp_set_alloc_hook(&hook));
    long few = 0, many = 0;
    KPT_OK(packing_flow(4, &few, &c));
    assert_int_equal(atomic_load(&c.live), 0);
    atomic_store(&c.calls, 0);
    KPT_OK(packing_flow(40, &many, &c));
    assert_int_equal(atomic_load(&c.live), 0);
    if (many != few)
        fail_msg("4 frames took %ld allocations, 40 frames %ld: the per-frame path allocates", few,
                 many);
    /* each allocation failed in turn: the error comes back, nothing is left */
    long sites = few, errors = 0;
    for (long k = 1; k <= sites; k++) {
        long calls = 0;
        atomic_store(&c.calls, 0);
        atomic_store(&c.failed, 0);
        atomic_store(&c.fail_at, k);
        kp_clear_error();
        kp_status st = packing_flow(4, &calls, &c);
        if (st != KP_OK && st != KP_ERR_OUT_OF_MEMORY)
            fail_msg("failing allocation %ld of %ld gave %s (%s)", k, sites, kp_status_name(st),
                     kp_last_error());
        if (st != KP_OK) assert_true(kp_last_error()[0] != '\0');
        errors += st != KP_OK;
        if (atomic_load(&c.live) != 0)
            fail_msg("failing allocation %ld of %ld leaves %ld allocations", k, sites,
                     (long)atomic_load(&c.live));
    }
    print_message("%s: %ld allocations for 4 frames and for 40; each failed in turn, %ld came "
                  "back as errors, no leaks\n",
                  g_devname, few, errors);
    KPT_OK(kp_set_alloc_hook(NULL));
}

/* --- video files (FFmpeg) ---------------------------------------------------------- */

/* testsrc in either layout and pitch, through the video sink losslessly
 * (libx264, crf 0) and decoded in software: every byte is the picture. */
static void video_sink_every_format(void **state) {
    static const char *const formats[] = {"i420", "nv12"};
    const int64_t w = 96, h = 64;
    const int frames = 4;
    for (int f = 0; f < 2; f++)
        for (int padded = 0; padded < 2; padded++) {
            char src[256], json[2048], path[512], what[128];
            snprintf(json, sizeof json,
                     "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"out\", \"sink\": "
                     "\"video\", \"path\": \"%s\", \"encoder\": \"libx264\", \"crf\": 0}]}",
                     testsrc_stage(src, sizeof src, w, h, formats[f], padded ? w + 32 : 0, frames),
                     tmp_path(path, sizeof path, "lossless.mkv"));
            KPT_OK(run_flow(json));
            kpt_frames got;
            KPT_OK(kpt_read_frames(g_dev, path, KP_VIDEO_DECODE_SOFTWARE, KP_PIXEL_I420, &got));
            assert_int_equal(got.n, frames);
            assert_int_equal(got.info.width, w);
            uint8_t want[96 * 64 * 3 / 2];
            for (int s = 0; s < frames; s++) {
                picture(w, h, (uint64_t)s, want);
                snprintf(what, sizeof what, "video sink, %s%s, frame %d", formats[f],
                         padded ? " with a pitch" : "", s);
                expect_bytes(got.data + got.bytes * (size_t)s, want, w, h, what);
            }
            free(got.data);
        }
}

/* One video file takes one layout: frames of the other are refused, naming
 * both (each stream to a file of its own takes either). */
static void video_sink_refuses_mixed_layouts(void **state) {
    char a[256], b[256], json[2048], path[512];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, %s, {\"name\": \"out\", \"from\": [\"a\", "
             "\"b\"], \"sink\": \"video\", \"path\": \"%s\", \"encoder\": \"libx264\"}]}",
             testsrc_named(a, sizeof a, "a", 64, 32, "i420", 0, 8),
             testsrc_named(b, sizeof b, "b", 64, 32, "nv12", 0, 8),
             tmp_path(path, sizeof path, "mixed.mkv"));
    KPT_FAILS(run_flow(json), KP_ERR_MISMATCH);
    if (!strstr(kp_last_error(), "NV12") || !strstr(kp_last_error(), "I420"))
        fail_msg("\"%s\" does not name both layouts", kp_last_error());
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, %s, {\"name\": \"out\", \"from\": [\"a\", "
             "\"b\"], \"sink\": \"video\", \"path\": \"%s\", \"encoder\": \"libx264\"}]}",
             testsrc_named(a, sizeof a, "a", 64, 32, "i420", 0, 8),
             testsrc_named(b, sizeof b, "b", 64, 32, "nv12", 0, 8),
             tmp_path(path, sizeof path, "mixed{stream}.mkv"));
    KPT_OK(run_flow(json));
}

/* The video source's frames into the y4m sink: its own format (NV12 from
 * NVDEC on cuda, I420 from software elsewhere), NV12 and I420 asked for,
 * give one file, byte for byte. */
static void video_source_into_y4m(void **state) {
    char src[256], json[2048], clip_path[512];
    const int frames = 12;
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": [%s, {\"name\": \"out\", \"sink\": \"video\", "
             "\"path\": \"%s\", \"encoder\": \"libx264\", \"crf\": 20, \"bframes\": 2}]}",
             testsrc_stage(src, sizeof src, 160, 96, "i420", 0, frames),
             tmp_path(clip_path, sizeof clip_path, "clip.mp4"));
    KPT_OK(run_flow(json));
    static const char *const keys[] = {"", ", \"format\": \"nv12\"",
                                       ", \"format\": \"i420\", \"decoder\": \"software\""};
    clip c[3];
    for (int k = 0; k < 3; k++) {
        char out[512], name[32];
        snprintf(name, sizeof name, "from_video%d.y4m", k);
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"in\", \"source\": \"video\", "
                 "\"path\": \"%s\"%s}, {\"name\": \"out\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
                 clip_path, keys[k], tmp_path(out, sizeof out, name));
        KPT_OK(run_flow(json));
        clip_read(out, &c[k]);
        assert_int_equal(c[k].n, frames);
        assert_int_equal(c[k].w, 160);
    }
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < frames; s++) {
            char what[96];
            snprintf(what, sizeof what, "video source%s, frame %d", keys[k][0] ? keys[k] : "", s);
            expect_bytes(c[k].data + (size_t)s * 160 * 96 * 3 / 2,
                         c[2].data + (size_t)s * 160 * 96 * 3 / 2, 160, 96, what);
        }
    for (int k = 0; k < 3; k++) free(c[k].data);
}

static int make_dir(void **state) {
    snprintf(g_dir, sizeof g_dir, "%s/kp_formats_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    g_devname = argc > 1 ? argv[1] : "cpu";
    const bool video = argc > 2 && strcmp(argv[2], "video") == 0;
    kp_status st = kp_device_open(g_devname, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: frame formats on %s: %s\n", g_devname, kp_last_error());
        return 77;
    }
    if (st != KP_OK) {
        fprintf(stderr, "%s: %s\n", g_devname, kp_last_error());
        return 1;
    }
    if (video && !kp_video_built()) {
        printf("SKIP: frame formats through video files on %s: this build has no FFmpeg "
               "(libavformat-dev, libavcodec-dev, libavutil-dev)\n",
               g_devname);
        kp_device_close(g_dev);
        return 77;
    }
    const struct CMUnitTest frames[] = {
        cmocka_unit_test(y4m_sink_packs_every_format),
        cmocka_unit_test(y4m_sink_mixed_streams),
        cmocka_unit_test(y4m_sink_format_key),
        cmocka_unit_test(pipeline_refuses_the_other_format),
        cmocka_unit_test(pipeline_labels_its_output),
        cmocka_unit_test(batches_take_their_format),
        cmocka_unit_test(refusals_name_the_format),
        cmocka_unit_test(p016_through_flows),
        cmocka_unit_test(packing_allocates_once),
    };
    const struct CMUnitTest files[] = {
        cmocka_unit_test(video_sink_every_format),
        cmocka_unit_test(video_sink_refuses_mixed_layouts),
        cmocka_unit_test(video_source_into_y4m),
    };
    int failed = video ? cmocka_run_group_tests_name("video files", files, make_dir, remove_dir)
                       : cmocka_run_group_tests_name("frames", frames, make_dir, remove_dir);
    if (video) KPT_OK(kp_video_pool_limit(0)); /* the idle decoders freed */
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
