/* The video layer's public entry points, built with or without FFmpeg:
 * each checks its arguments here, by the same rules whichever way it is
 * reached, then goes to reader.c and writer.c (KP_VIDEO) or answers
 * KP_ERR_UNSUPPORTED. */
#include <string.h>

#include "video-impl.h"

#ifdef KP_HAVE_VIDEO
#define KP__VIDEO_OR(call) return (call)
#else
#define KP__VIDEO_OR(call)               \
    return kp__error(KP_ERR_UNSUPPORTED, \
                     "video files are not built in (KP_VIDEO: FFmpeg's libraries were not found)")
#endif

bool kp_video_built(void) {
#ifdef KP_HAVE_VIDEO
    return true;
#else
    return false;
#endif
}

static kp_status kp__path_check(const char *path, const char *what) {
    if (!path || !*path) return kp__error(KP_ERR_INVALID_ARG, "%s: no path", what);
    if (strlen(path) >= KP__VIDEO_PATH_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "%s: a path of at most %d characters", what,
                         KP__VIDEO_PATH_MAX - 1);
    return KP_OK;
}

/* FFmpeg options (kp_video_reader_config.options): "key=value" pairs joined
 * by '&', each key and value non-empty and without '=' or '&'. Whether
 * FFmpeg takes them is known only where it opens the input or output. */
kp_status kp__video_options_check(const char *o) {
    if (!o) return KP_OK;
    size_t n = strlen(o);
    if (n >= KP_VIDEO_OPTIONS_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "options: at most %d characters",
                         KP_VIDEO_OPTIONS_MAX - 1);
    for (const char *p = o; *p;) {
        const char *amp = strchr(p, '&'), *end = amp ? amp : p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq || eq == p || eq + 1 == end || memchr(eq + 1, '=', (size_t)(end - eq - 1)))
            return kp__error(KP_ERR_INVALID_ARG,
                             "options: \"%.*s\" is not key=value (pairs joined by '&')",
                             (int)(end - p > 64 ? 64 : end - p), p);
        p = amp ? amp + 1 : end;
        if (amp && !*p) return kp__error(KP_ERR_INVALID_ARG, "options: nothing after the last '&'");
    }
    return KP_OK;
}

/* --- the reader -------------------------------------------------------------------- */
kp_status kp_video_reader_open(kp_device_t dev, const char *path, const kp_video_reader_config *cfg,
                               kp_video_reader_t *out) {
    KP_API_ENTRY();
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "device is NULL");
    KP_CHECK(kp__path_check(path, "video reader"));
    kp_video_reader_config c = KP_VIDEO_READER_CONFIG_INIT;
    if (cfg) c = *cfg;
    if (c.decoder != KP_VIDEO_DECODE_AUTO && c.decoder != KP_VIDEO_DECODE_NVDEC &&
        c.decoder != KP_VIDEO_DECODE_SOFTWARE)
        return kp__error(KP_ERR_INVALID_ARG, "decoder %d (auto, nvdec or software)",
                         (int)c.decoder);
    if (c.pitch < 0 || c.pitch % 2 || c.pitch > 2 * KP_VIDEO_MAX_SIDE)
        return kp__error(KP_ERR_INVALID_ARG, "pitch %lld (0, or even and at most %d)",
                         (long long)c.pitch, 2 * KP_VIDEO_MAX_SIDE);
    if (c.threads < 0 || c.threads > 256)
        return kp__error(KP_ERR_INVALID_ARG, "threads %d (0 .. 256)", c.threads);
    if (c.format != KP_PIXEL_NONE && c.format != KP_PIXEL_I420 && c.format != KP_PIXEL_NV12 &&
        c.format != KP_PIXEL_P016)
        return kp__error(KP_ERR_INVALID_ARG, "format %d (none, I420, NV12 or P016)",
                         (int)c.format);
    if (c.timeout_ms < 0 || c.timeout_ms > 86400000)
        return kp__error(KP_ERR_INVALID_ARG, "timeout_ms %d (0 .. 86400000)", c.timeout_ms);
    if (c.parallel < 0 || c.parallel > KP_VIDEO_MAX_PARALLEL)
        return kp__error(KP_ERR_INVALID_ARG, "parallel %d (0 .. %d sessions)", c.parallel,
                         KP_VIDEO_MAX_PARALLEL);
    if (c.max_width < 0 || c.max_height < 0 || c.max_width > KP_VIDEO_MAX_SIDE ||
        c.max_height > KP_VIDEO_MAX_SIDE || c.max_width % 2 || c.max_height % 2 ||
        !c.max_width != !c.max_height)
        return kp__error(KP_ERR_INVALID_ARG,
                         "max_width %d, max_height %d (both 0, or both even and at most %d)",
                         (int)c.max_width, (int)c.max_height, KP_VIDEO_MAX_SIDE);
    if (c.pitch && c.pitch < (int64_t)c.max_width * kp_pixel_format_sample_bytes(c.format))
        return kp__error(KP_ERR_INVALID_ARG, "pitch %lld is below max_width %d of %s", (long long)c.pitch,
                         (int)c.max_width, kp_pixel_format_name(c.format));
    if (c.format == KP_PIXEL_I420 && c.decoder == KP_VIDEO_DECODE_NVDEC)
        return kp__error(KP_ERR_UNSUPPORTED, "NVDEC gives NV12, not I420");
    if (c.format == KP_PIXEL_P016 && c.decoder == KP_VIDEO_DECODE_NVDEC)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "NVDEC gives 8-bit NV12 here, not P016 (software decode gives P016)");
    KP_CHECK(kp__video_options_check(c.options));
    KP__VIDEO_OR(kp__video_open(dev, path, &c, out));
}

kp_status kp_video_reader_get_info(kp_video_reader_t r, kp_video_reader_info *out) {
    KP_API_ENTRY();
    if (!r || !out) return kp__error(KP_ERR_INVALID_ARG, "%s is NULL", r ? "out" : "reader");
    KP__VIDEO_OR(kp__video_reader_info(r, out));
}

kp_status kp_video_reader_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                               kp_video_frame *frame, bool *eos) {
    KP_API_ENTRY();
    if (!r || !s || !dst || !frame || !eos)
        return kp__error(KP_ERR_INVALID_ARG, "%s is NULL",
                         !r       ? "reader"
                         : !s     ? "stream"
                         : !dst   ? "dst"
                         : !frame ? "frame"
                                  : "eos");
    KP__VIDEO_OR(kp__video_next(r, s, dst, capacity, frame, eos));
}

kp_status kp_video_reader_count(kp_video_reader_t r, int64_t *frames) {
    KP_API_ENTRY();
    if (!r || !frames) return kp__error(KP_ERR_INVALID_ARG, "%s is NULL", r ? "frames" : "reader");
    KP__VIDEO_OR(kp__video_count(r, frames));
}

kp_status kp_video_reader_seek(kp_video_reader_t r, int64_t index) {
    KP_API_ENTRY();
    if (!r) return kp__error(KP_ERR_INVALID_ARG, "reader is NULL");
    KP__VIDEO_OR(kp__video_seek(r, index));
}

kp_status kp_video_reader_frame_at(kp_video_reader_t r, double seconds, int64_t *index) {
    KP_API_ENTRY();
    if (!r || !index) return kp__error(KP_ERR_INVALID_ARG, "%s is NULL", r ? "index" : "reader");
    KP__VIDEO_OR(kp__video_frame_at(r, seconds, index));
}

void kp_video_reader_close(kp_video_reader_t r) {
#ifdef KP_HAVE_VIDEO
    if (r) kp__video_close(r);
#else
    (void)r;
#endif
}

/* --- the decoder pool -------------------------------------------------------------- */
kp_status kp_video_pool_limit(int max_idle) {
    KP_API_ENTRY();
    if (max_idle < 0 || max_idle > KP_VIDEO_POOL_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "max_idle %d (0 .. %d decoders)", max_idle,
                         KP_VIDEO_POOL_MAX);
    KP__VIDEO_OR(kp__video_pool_limit(max_idle));
}

kp_status kp_video_pool_stats_get(kp_video_pool_stats *out) {
    KP_API_ENTRY();
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    KP__VIDEO_OR(kp__video_pool_stats(out));
}

/* --- the writer -------------------------------------------------------------------- */
kp_status kp_video_writer_open(kp_device_t dev, const char *path, const kp_video_writer_config *cfg,
                               kp_video_writer_t *out) {
    KP_API_ENTRY();
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "device is NULL");
    KP_CHECK(kp__path_check(path, "video writer"));
    kp_video_writer_config c = KP_VIDEO_WRITER_CONFIG_INIT;
    if (cfg) c = *cfg;
    if (c.codec && strcmp(c.codec, "h264") != 0 && strcmp(c.codec, "hevc") != 0)
        return kp__error(KP_ERR_UNSUPPORTED, "codec \"%.32s\": kpipe encodes \"h264\" or \"hevc\"",
                         c.codec);
    if (c.encoder && strcmp(c.encoder, "auto") && strcmp(c.encoder, "nvenc") &&
        strcmp(c.encoder, "libx264") && strcmp(c.encoder, "libx265"))
        return kp__error(KP_ERR_INVALID_ARG,
                         "encoder \"%.32s\" (auto, nvenc, libx264 or libx265)", c.encoder);
    const bool hevc = c.codec && strcmp(c.codec, "hevc") == 0;
    if (c.encoder && strcmp(c.encoder, hevc ? "libx264" : "libx265") == 0)
        return kp__error(KP_ERR_INVALID_ARG, "encoder %s does not write %s", c.encoder,
                         hevc ? "HEVC" : "H.264");
    if (c.bitrate < 0 || c.bitrate > 2000000000)
        return kp__error(KP_ERR_INVALID_ARG, "bitrate %lld (0 .. 2e9 bits per second)",
                         (long long)c.bitrate);
    if (c.crf < -1 || c.crf > 51) return kp__error(KP_ERR_INVALID_ARG, "crf %d (0 .. 51)", c.crf);
    if (c.bitrate && c.crf >= 0)
        return kp__error(KP_ERR_INVALID_ARG, "both a bitrate and a crf: give one");
    if (c.bframes < -1 || c.bframes > 16)
        return kp__error(KP_ERR_INVALID_ARG, "bframes %d (0 .. 16)", c.bframes);
    if (c.gop < 0 || c.gop > 10000)
        return kp__error(KP_ERR_INVALID_ARG, "gop %d (0 .. 10000)", c.gop);
    if (c.threads < 0 || c.threads > 256)
        return kp__error(KP_ERR_INVALID_ARG, "threads %d (0 .. 256)", c.threads);
    static const char *const presets[] = {"ultrafast", "superfast", "veryfast", "faster",  "fast",
                                          "medium",    "slow",      "slower",   "veryslow"};
    bool known = !c.preset;
    for (size_t i = 0; !known && i < sizeof presets / sizeof *presets; i++)
        known = strcmp(c.preset, presets[i]) == 0;
    if (!known)
        return kp__error(KP_ERR_INVALID_ARG, "preset \"%.32s\" (ultrafast .. veryslow)", c.preset);
    KP_CHECK(kp__video_options_check(c.options));
    KP__VIDEO_OR(kp__video_writer_make(dev, path, &c, out));
}

kp_status kp_video_writer_write(kp_video_writer_t w, kp_stream_t s, const void *src, size_t bytes,
                                const kp_video_frame *frame) {
    KP_API_ENTRY();
    if (!w || !s || !src)
        return kp__error(KP_ERR_INVALID_ARG, "%s is NULL", !w ? "writer" : !s ? "stream" : "src");
    KP_CHECK(kp__video_frame_check(frame, bytes, "frame"));
    KP__VIDEO_OR(kp__video_writer_write(w, s, src, bytes, frame));
}

const char *kp_video_writer_encoder(kp_video_writer_t w) {
#ifdef KP_HAVE_VIDEO
    return w ? kp__video_writer_encoder(w) : "";
#else
    (void)w;
    return "";
#endif
}

kp_status kp_video_writer_close(kp_video_writer_t w) {
    KP_API_ENTRY();
    if (!w) return KP_OK;
    KP__VIDEO_OR(kp__video_writer_finish(w));
}
