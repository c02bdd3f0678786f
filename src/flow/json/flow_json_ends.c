/* The JSON form's sources and sinks (flow_json.c reads the rest), chosen
 * from a table: each kind with the keys it takes and its maker, which
 * reads them and makes the stage through the code the public constructors
 * share (stages-impl.h, remote_end-impl.h). Adding a kind is a maker and
 * a line in a table.
 *
 * Sources: "synthetic" (frames, shape), "testsrc" (frames, width, height,
 * format, pitch), "y4m" (path, frames, loop), "video" (path, frames,
 * decoder, format, pitch, threads), "remote" (listen, frame_bytes,
 * capacity, timeout_ms).
 * Sinks: "null", "npy" (path), "y4m" (path, format), "video" (path, codec,
 * encoder, bitrate or crf, preset, bframes, gop, threads, format),
 * "remote" (connect, timeout_ms).
 *
 * A maker's own errors (a key of the wrong type or range) name the key by
 * its JSON path; what the stage's code refuses (a file that does not open,
 * a frame size past the limit) is named by the stage's path. */
#include <stdio.h>
#include <string.h>

#include "flow_json-impl.h"

/* A kind of source or sink: its name, the keys only some kinds take that
 * it takes (NULL-ended), and its maker. A source's maker gets its
 * "frames", which every source reads. */
typedef struct kp__end_kind {
    const char *name;
    const char *const *keys;
    kp_status (*make)(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                      int64_t frames, kp__stage_made *m);
} kp__end_kind;

#define KP__KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* What the stage's code said: an error is named by the stage's path. */
static kp_status kp__made(kp_status st, const char *path) {
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
}

/* An optional "format" key, "nv12", "i420" or "p016", into *out (left as
 * it is when absent); a stage that does not take one refuses it by name. */
static kp_status kp__opt_format(json_t *s, const char *path, kp_pixel_format *out) {
    const char *format = NULL;
    KP_CHECK(kp__json_opt_string(s, path, "format", KP__KEYS("nv12", "i420", "p016"), &format));
    if (format)
        *out = strcmp(format, "nv12") == 0   ? KP_PIXEL_NV12
               : strcmp(format, "i420") == 0 ? KP_PIXEL_I420
                                             : KP_PIXEL_P016;
    return KP_OK;
}

/* A file's path at "path", which a kind of stage needs. */
static kp_status kp__file(json_t *s, const char *path, const char *what, const char **out) {
    *out = json_string_value(json_object_get(s, "path"));
    return *out ? KP_OK : KP__PERR("%s.path: the %s needs a file path", path, what);
}

/* --- sources ---------------------------------------------------------------------- */
static kp_status kp__synthetic_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                    const char *path, int64_t frames, kp__stage_made *m) {
    char sub[96];
    int64_t shape[KP_MAX_DIMS];
    json_t *sh = json_object_get(s, "shape"), *e;
    size_t nd = json_array_size(sh), i;
    if (!json_is_array(sh) || nd < 1 || nd > KP_MAX_DIMS)
        return KP__PERR("%s.shape: expected 1 to %d sizes", path, KP_MAX_DIMS);
    json_array_foreach(sh, i, e) {
        snprintf(sub, sizeof sub, "%s.shape[%zu]", path, i);
        KP_CHECK(kp__json_int(e, sub, 1, (int64_t)1 << 32, &shape[i]));
    }
    return kp__made(kp__stage_synthetic(dev, frames, (int)nd, shape, m), path);
}

static kp_status kp__testsrc_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                  const char *path, int64_t frames, kp__stage_made *m) {
    char sub[96];
    int64_t w = 0, h = 0, pitch = 0;
    kp_pixel_format pf = KP_PIXEL_NONE;
    snprintf(sub, sizeof sub, "%s.width", path);
    KP_CHECK(kp__json_int(json_object_get(s, "width"), sub, 2, 16384, &w));
    snprintf(sub, sizeof sub, "%s.height", path);
    KP_CHECK(kp__json_int(json_object_get(s, "height"), sub, 2, 16384, &h));
    KP_CHECK(kp__json_opt_int(s, path, "pitch", 0, 2 * KP_VIDEO_MAX_SIDE, &pitch));
    KP_CHECK(kp__opt_format(s, path, &pf));
    return kp__made(kp__stage_testsrc(dev, frames, w, h, pf, pitch, m), path);
}

static kp_status kp__y4m_source_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                     const char *path, int64_t frames, kp__stage_made *m) {
    const char *file = NULL;
    bool loop = false;
    KP_CHECK(kp__file(s, path, "y4m source", &file));
    KP_CHECK(kp__json_opt_bool(s, path, "loop", &loop));
    return kp__made(kp__stage_y4m_source(dev, file, frames, loop, m, b->y4m_tags,
                                         sizeof b->y4m_tags),
                    path);
}

/* "options": {"key": "value", ...}, FFmpeg's options for the container or
 * protocol, joined into buf as kp_video_reader_config.options takes them
 * (whose check then applies to both forms); *out NULL without the key. */
static kp_status kp__av_options_json(json_t *s, const char *path, char *buf, size_t n,
                                     const char **out) {
    json_t *o = json_object_get(s, "options");
    *out = NULL;
    if (!o) return KP_OK;
    if (!json_is_object(o))
        return KP__PERR("%s.options: expected an object of FFmpeg options (strings)", path);
    size_t at = 0;
    const char *key;
    json_t *v;
    buf[0] = '\0';
    json_object_foreach(o, key, v) {
        const char *val = json_string_value(v);
        if (!val || !*key || !*val || strpbrk(key, "=&") || strpbrk(val, "=&"))
            return KP__PERR("%s.options.%.64s: expected a non-empty string, without '=' or '&'",
                            path, key);
        int w = snprintf(buf + at, n - at, "%s%s=%s", at ? "&" : "", key, val);
        if (w < 0 || (size_t)w >= n - at)
            return KP__PERR("%s.options: at most %zu characters in all", path, n - 1);
        at += (size_t)w;
    }
    *out = at ? buf : NULL;
    return KP_OK;
}

/* The video source's paths: "path" (with "streams" copies of it) or
 * "paths", one stream each, into paths[*n]. */
static kp_status kp__video_paths(json_t *s, const char *path, const char **paths, size_t *n) {
    const char *file = json_string_value(json_object_get(s, "path"));
    json_t *list = json_object_get(s, "paths");
    int64_t streams = 1;
    KP_CHECK(kp__json_opt_int(s, path, "streams", 1, KP_FLOW_MAX_STREAMS, &streams));
    if (!file == !list || (list && json_object_get(s, "streams")))
        return KP__PERR("%s: the video source takes \"path\" (with \"streams\" copies of it) "
                        "or \"paths\", one of them",
                        path);
    *n = list ? json_array_size(list) : (size_t)streams;
    if (list && (!json_is_array(list) || *n < 1 || *n > KP_FLOW_MAX_STREAMS))
        return KP__PERR("%s.paths: expected 1 to %d paths", path, KP_FLOW_MAX_STREAMS);
    for (size_t i = 0; i < *n; i++) {
        paths[i] = list ? json_string_value(json_array_get(list, i)) : file;
        if (!paths[i]) return KP__PERR("%s.paths[%zu]: expected a path or URL", path, i);
    }
    return KP_OK;
}

/* The video source's reader settings: decoder, pitch, threads, format,
 * timeout_ms, parallel (sessions per file), max_width and max_height (a
 * stream that changes size), options (FFmpeg's, into opts). */
static kp_status kp__video_reader_json(json_t *s, const char *path, kp_video_reader_config *cfg,
                                       char *opts, size_t opts_len) {
    const char *dec = "auto";
    KP_CHECK(kp__json_opt_string(s, path, "decoder", KP__KEYS("auto", "nvdec", "software"), &dec));
    cfg->decoder = dec[0] == 'a'   ? KP_VIDEO_DECODE_AUTO
                   : dec[0] == 'n' ? KP_VIDEO_DECODE_NVDEC
                                   : KP_VIDEO_DECODE_SOFTWARE;
    int64_t pitch = 0, threads = 0, timeout = 0, parallel = 1, max_w = 0, max_h = 0;
    KP_CHECK(kp__json_opt_int(s, path, "parallel", 1, KP_VIDEO_MAX_PARALLEL, &parallel));
    KP_CHECK(kp__json_opt_int(s, path, "max_width", 0, KP_VIDEO_MAX_SIDE, &max_w));
    KP_CHECK(kp__json_opt_int(s, path, "max_height", 0, KP_VIDEO_MAX_SIDE, &max_h));
    KP_CHECK(kp__json_opt_int(s, path, "pitch", 0, 2 * KP_VIDEO_MAX_SIDE, &pitch));
    KP_CHECK(kp__json_opt_int(s, path, "threads", 0, 256, &threads));
    KP_CHECK(kp__json_opt_int(s, path, "timeout_ms", 0, 86400000, &timeout));
    cfg->pitch = pitch;
    cfg->threads = (int)threads;
    cfg->timeout_ms = (int)timeout;
    cfg->parallel = (int)parallel;
    cfg->max_width = (int32_t)max_w;
    cfg->max_height = (int32_t)max_h;
    return kp__av_options_json(s, path, opts, opts_len, &cfg->options);
}

/* Video in (docs/video.md): its paths, its reader's settings, realtime,
 * format; strict_no_host_copies is the flow's. */
static kp_status kp__video_source_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                       const char *path, int64_t frames, kp__stage_made *m) {
    const char *paths[KP_FLOW_MAX_STREAMS];
    size_t n = 0;
    KP_CHECK(kp__video_paths(s, path, paths, &n));
    kp_flow_video_source_config o = KP_FLOW_VIDEO_SOURCE_CONFIG_INIT;
    o.frames = frames;
    o.strict_no_host_copies = b->strict;
    char opts[KP_VIDEO_OPTIONS_MAX];
    KP_CHECK(kp__video_reader_json(s, path, &o.reader, opts, sizeof opts));
    KP_CHECK(kp__json_opt_bool(s, path, "realtime", &o.realtime));
    KP_CHECK(kp__opt_format(s, path, &o.reader.format));
    return kp__made(kp__stage_video_source(dev, paths, n, &o, m, NULL), path);
}

/* "host:port" at key `key`, and timeout_ms (default `timeout`). */
static kp_status kp__endpoint(json_t *s, const char *path, const char *key, int64_t timeout,
                              const char **addr, int *timeout_ms) {
    *addr = json_string_value(json_object_get(s, key));
    if (!*addr) return KP__PERR("%s.%s: expected \"HOST:PORT\"", path, key);
    KP_CHECK(kp__json_opt_int(s, path, "timeout_ms", 0, 86400000, &timeout));
    *timeout_ms = (int)timeout;
    return KP_OK;
}

/* A remote queue's receiving end (docs/devices-and-hosts.md, "Remote queues"). */
static kp_status kp__remote_source_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                        const char *path, int64_t frames, kp__stage_made *m) {
    char sub[96];
    const char *addr;
    int timeout_ms = 0; /* set by kp__endpoint; gcc 12 at -O3 cannot see it */
    int64_t bytes = 0, cap = KP__DEFAULT_CAPACITY;
    KP_CHECK(kp__endpoint(s, path, "listen", 0, &addr, &timeout_ms));
    snprintf(sub, sizeof sub, "%s.frame_bytes", path);
    KP_CHECK(kp__json_int(json_object_get(s, "frame_bytes"), sub, 0, (int64_t)1 << 32, &bytes));
    KP_CHECK(kp__json_opt_int(s, path, "capacity", 1, 1024, &cap));
    return kp__made(
        kp__stage_remote_source(dev, addr, (size_t)bytes, (size_t)cap, timeout_ms, m), path);
}

static const kp__end_kind kp__sources[] = {
    {"synthetic", KP__KEYS("frames", "shape", "streams"), kp__synthetic_json},
    {"testsrc", KP__KEYS("frames", "width", "height", "streams", "format", "pitch"),
     kp__testsrc_json},
    {"y4m", KP__KEYS("frames", "loop", "path"), kp__y4m_source_json},
    {"video",
     KP__KEYS("frames", "path", "paths", "streams", "realtime", "timeout_ms", "decoder", "pitch",
              "threads", "format", "parallel", "max_width", "max_height", "options"),
     kp__video_source_json},
    {"remote", KP__KEYS("listen", "frame_bytes", "capacity", "timeout_ms"),
     kp__remote_source_json},
};

/* --- sinks ------------------------------------------------------------------------ */
static kp_status kp__null_json(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                               int64_t frames, kp__stage_made *m) {
    return kp__made(kp__stage_null(m), path);
}

static kp_status kp__npy_json(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                              int64_t frames, kp__stage_made *m) {
    const char *file = NULL;
    KP_CHECK(kp__file(s, path, "npy sink", &file));
    return kp__made(kp__stage_npy(dev, file, b->frame_bytes, m), path);
}

static kp_status kp__y4m_sink_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                   const char *path, int64_t frames, kp__stage_made *m) {
    const char *file = NULL;
    kp_pixel_format pf = KP_PIXEL_NONE;
    KP_CHECK(kp__file(s, path, "y4m sink", &file));
    KP_CHECK(kp__opt_format(s, path, &pf));
    return kp__made(kp__stage_y4m_sink(dev, file, b->frame_bytes, b->y4m_tags, pf, m), path);
}

/* A video file out: path, codec, encoder, bitrate or crf, preset, bframes,
 * gop, threads, format, options. */
static kp_status kp__video_sink_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                     const char *path, int64_t frames, kp__stage_made *m) {
    kp_video_writer_config cfg = KP_VIDEO_WRITER_CONFIG_INIT;
    const char *file = NULL;
    KP_CHECK(kp__file(s, path, "video sink", &file));
    KP_CHECK(kp__json_opt_string(s, path, "codec", KP__KEYS("h264", "hevc"), &cfg.codec));
    KP_CHECK(kp__json_opt_string(s, path, "encoder",
                                 KP__KEYS("auto", "nvenc", "libx264", "libx265"), &cfg.encoder));
    KP_CHECK(kp__json_opt_string(s, path, "preset", NULL, &cfg.preset));
    kp_pixel_format pf = KP_PIXEL_NONE;
    KP_CHECK(kp__opt_format(s, path, &pf));
    int64_t crf = -1, bframes = -1, gop = 0, threads = 0;
    KP_CHECK(kp__json_opt_int(s, path, "bitrate", 1, 2000000000, &cfg.bitrate));
    KP_CHECK(kp__json_opt_int(s, path, "crf", 0, 51, &crf));
    KP_CHECK(kp__json_opt_int(s, path, "bframes", 0, 16, &bframes));
    KP_CHECK(kp__json_opt_int(s, path, "gop", 1, 10000, &gop));
    KP_CHECK(kp__json_opt_int(s, path, "threads", 0, 256, &threads));
    KP_CHECK(kp__json_opt_bool(s, path, "open_gop", &cfg.open_gop));
    cfg.crf = (int)crf;
    cfg.bframes = (int)bframes;
    cfg.gop = (int)gop;
    cfg.threads = (int)threads;
    char opts[KP_VIDEO_OPTIONS_MAX];
    KP_CHECK(kp__av_options_json(s, path, opts, sizeof opts, &cfg.options));
    return kp__made(kp__stage_video_sink(dev, file, &cfg, pf, m), path);
}

static kp_status kp__remote_sink_json(kp__flow_build *b, kp_device_t dev, json_t *s,
                                      const char *path, int64_t frames, kp__stage_made *m) {
    const char *addr;
    int timeout_ms = 0; /* set by kp__endpoint; gcc 12 at -O3 cannot see it */
    KP_CHECK(kp__endpoint(s, path, "connect", 30000, &addr, &timeout_ms));
    return kp__made(kp__stage_remote_sink(dev, addr, b->frame_bytes, timeout_ms, m), path);
}

static const kp__end_kind kp__sinks[] = {
    {"null", (const char *const[]){NULL}, kp__null_json},
    {"npy", KP__KEYS("path"), kp__npy_json},
    {"y4m", KP__KEYS("path", "format"), kp__y4m_sink_json},
    {"video",
     KP__KEYS("path", "codec", "encoder", "bitrate", "crf", "preset", "bframes", "gop", "threads",
              "format", "options", "open_gop"),
     kp__video_sink_json},
    {"remote", KP__KEYS("connect", "timeout_ms"), kp__remote_sink_json},
};

#define KP__N_SOURCES (sizeof kp__sources / sizeof kp__sources[0])
#define KP__N_SINKS (sizeof kp__sinks / sizeof kp__sinks[0])

/* --- choosing a kind -------------------------------------------------------------- */
static bool kp__named(const char *const *list, const char *key) {
    for (const char *const *a = list; *a; a++)
        if (strcmp(*a, key) == 0) return true;
    return false;
}

/* Whether `key` is one that only some kinds take: a key of some source or
 * sink in the tables. */
static bool kp__kind_key(const char *key) {
    for (size_t i = 0; i < KP__N_SOURCES; i++)
        if (kp__named(kp__sources[i].keys, key)) return true;
    for (size_t i = 0; i < KP__N_SINKS; i++)
        if (kp__named(kp__sinks[i].keys, key)) return true;
    return false;
}

kp_status kp__json_kind_keys(json_t *s, const char *path, const char *kind,
                             const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (kp__kind_key(key) && !kp__named(allowed, key))
            return KP__PERR("%s.%s: a %s stage takes no \"%s\"", path, key, kind, key);
    }
    return KP_OK;
}

/* The kind named at PATH.ROLE in `table`, or KP_ERR_PARSE listing them. */
static kp_status kp__end_find(const kp__end_kind *table, size_t n, json_t *s, const char *path,
                              const char *role, const kp__end_kind **out) {
    const char *name = json_string_value(json_object_get(s, role));
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(table[i].name, name) == 0) {
            *out = &table[i];
            return KP_OK;
        }
    char list[160] = "";
    for (size_t i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                 i == 0 ? "" : i + 1 == n ? " or " : ", ", table[i].name);
    return KP__PERR("%s.%s: expected %s", path, role, list);
}

kp_status kp__json_source(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                          kp__stage_made *m) {
    int64_t frames = 0;
    const kp__end_kind *k = NULL;
    KP_CHECK(kp__json_opt_int(s, path, "frames", 0, INT64_MAX, &frames));
    KP_CHECK(kp__end_find(kp__sources, KP__N_SOURCES, s, path, "source", &k));
    KP_CHECK(kp__json_kind_keys(s, path, k->name, k->keys));
    return k->make(b, dev, s, path, frames, m);
}

kp_status kp__json_sink(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                        kp__stage_made *m) {
    const kp__end_kind *k = NULL;
    KP_CHECK(kp__end_find(kp__sinks, KP__N_SINKS, s, path, "sink", &k));
    KP_CHECK(kp__json_kind_keys(s, path, k->name, k->keys));
    return k->make(b, dev, s, path, 0, m);
}
