/* The JSON form's sources and sinks (flow_json.c reads the rest): each
 * kind with the keys it takes.
 *
 * Sources: "synthetic" (frames, shape), "testsrc" (frames, width, height,
 * format, pitch), "y4m" (path, frames, loop), "video" (path, frames,
 * decoder, format, pitch, threads), "remote" (listen, frame_bytes,
 * capacity, timeout_ms).
 * Sinks: "null", "npy" (path), "y4m" (path, format), "video" (path, codec,
 * encoder, bitrate or crf, preset, bframes, gop, threads, format),
 * "remote" (connect, timeout_ms). */
#include <stdio.h>
#include <string.h>

#include "flow_json-impl.h"

kp_status kp__json_count(json_t *v, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return KP__PERR("%s: expected an integer from %lld to %lld", path, (long long)lo,
                        (long long)hi);
    *out = json_integer_value(v);
    return KP_OK;
}

static kp_status kp__synthetic(kp_device_t dev, json_t *s, const char *path, int64_t frames,
                               kp__stage_made *m) {
    char sub[96];
    int64_t shape[KP_MAX_DIMS];
    json_t *sh = json_object_get(s, "shape"), *e;
    size_t nd = json_array_size(sh), i;
    if (!json_is_array(sh) || nd < 1 || nd > KP_MAX_DIMS)
        return KP__PERR("%s.shape: expected 1 to %d sizes", path, KP_MAX_DIMS);
    json_array_foreach(sh, i, e) {
        snprintf(sub, sizeof sub, "%s.shape[%zu]", path, i);
        KP_CHECK(kp__json_count(e, sub, 1, (int64_t)1 << 32, &shape[i]));
    }
    return kp__stage_synthetic(dev, frames, (int)nd, shape, m);
}

/* The keys only some kinds of stage take: "frames" (sources), "shape"
 * (synthetic), "width" and "height" (testsrc), "loop" (y4m source), "path"
 * (files). */
kp_status kp__json_kind_keys(json_t *s, const char *path, const char *kind,
                             const char *const *allowed) {
    static const char *const optional[] = {
        "frames",   "shape",    "width",       "height",     "loop",       "path",
        "listen",   "connect",  "frame_bytes", "capacity",   "timeout_ms", "decoder",
        "pitch",    "codec",    "encoder",     "bitrate",    "crf",        "preset",
        "bframes",  "gop",      "threads",     "format",     "paths",      "streams",
        "realtime", "parallel", "max_width",   "max_height", NULL};
    for (const char *const *k = optional; *k; k++) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, *k) == 0;
        if (!ok && json_object_get(s, *k))
            return KP__PERR("%s.%s: a %s stage takes no \"%s\"", path, *k, kind, *k);
    }
    return KP_OK;
}

/* "host:port" at key `key`, and timeout_ms (default `timeout`). */
static kp_status kp__endpoint(json_t *s, const char *path, const char *key, int64_t timeout,
                              const char **addr, int *timeout_ms) {
    char sub[96];
    *addr = json_string_value(json_object_get(s, key));
    if (!*addr) return KP__PERR("%s.%s: expected \"HOST:PORT\"", path, key);
    json_t *v = json_object_get(s, "timeout_ms");
    snprintf(sub, sizeof sub, "%s.timeout_ms", path);
    if (v) KP_CHECK(kp__json_count(v, sub, 0, 86400000, &timeout));
    *timeout_ms = (int)timeout;
    return KP_OK;
}

/* A remote queue's receiving end (docs/devices-and-hosts.md, "Remote queues"). */
static kp_status kp__remote_source(kp_device_t dev, json_t *s, const char *path,
                                   kp__stage_made *m) {
    char sub[96];
    const char *addr;
    int timeout_ms = 0; /* set by kp__endpoint; gcc 12 at -O3 cannot see it */
    int64_t bytes = 0, cap = KP__DEFAULT_CAPACITY;
    KP_CHECK(kp__endpoint(s, path, "listen", 0, &addr, &timeout_ms));
    snprintf(sub, sizeof sub, "%s.frame_bytes", path);
    KP_CHECK(kp__json_count(json_object_get(s, "frame_bytes"), sub, 0, (int64_t)1 << 32, &bytes));
    json_t *v = json_object_get(s, "capacity");
    snprintf(sub, sizeof sub, "%s.capacity", path);
    if (v) KP_CHECK(kp__json_count(v, sub, 1, 1024, &cap));
    return kp__stage_remote_source(dev, addr, (size_t)bytes, (size_t)cap, timeout_ms, m);
}

static kp_status kp__remote_sink(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                                 kp__stage_made *m) {
    const char *addr;
    int timeout_ms = 0; /* set by kp__endpoint; gcc 12 at -O3 cannot see it */
    KP_CHECK(kp__endpoint(s, path, "connect", 30000, &addr, &timeout_ms));
    return kp__stage_remote_sink(dev, addr, b->frame_bytes, timeout_ms, m);
}

/* An optional integer key into *out (left as it is when absent). */
static kp_status kp__opt_int(json_t *s, const char *path, const char *key, int64_t lo, int64_t hi,
                             int64_t *out) {
    char sub[96];
    json_t *v = json_object_get(s, key);
    snprintf(sub, sizeof sub, "%s.%s", path, key);
    return v ? kp__json_count(v, sub, lo, hi, out) : KP_OK;
}

/* An optional string key, one of `allowed` (NULL-ended; NULL: any). */
static kp_status kp__opt_str(json_t *s, const char *path, const char *key,
                             const char *const *allowed, const char **out) {
    json_t *v = json_object_get(s, key);
    if (!v) return KP_OK;
    const char *t = json_string_value(v);
    bool ok = t != NULL;
    if (ok && allowed) {
        ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, t) == 0;
    }
    if (!ok) {
        char list[160] = "";
        for (const char *const *a = allowed; a && *a; a++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"",
                     a == allowed ? "" : ", ", *a);
        return KP__PERR("%s.%s: expected %s%s", path, key, allowed ? "one of " : "a string", list);
    }
    *out = t;
    return KP_OK;
}

/* An optional "format" key, "nv12" or "i420", into *out (left as it is
 * when absent). */
static kp_status kp__opt_format(json_t *s, const char *path, kp_pixel_format *out) {
    const char *format = NULL;
    KP_CHECK(kp__opt_str(s, path, "format", (const char *const[]){"nv12", "i420", NULL}, &format));
    if (format) *out = format[0] == 'n' ? KP_PIXEL_NV12 : KP_PIXEL_I420;
    return KP_OK;
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

/* Video in (docs/video.md): "path" (a file or a live URL) or "paths" (one
 * stream each), "streams" (that many streams of "path"), decoder, pitch,
 * threads, format, realtime, timeout_ms, parallel (sessions per file),
 * max_width and max_height (a stream that changes size), options. */
static kp_status kp__video_source(kp_device_t dev, json_t *s, const char *path, int64_t frames,
                                  bool strict, kp__stage_made *m) {
    KP_CHECK(kp__json_kind_keys(s, path, "video",
                                (const char *const[]){"frames", "path", "paths", "streams",
                                                      "realtime", "timeout_ms", "decoder", "pitch",
                                                      "threads", "format", "parallel", "max_width",
                                                      "max_height", "options", NULL}));
    kp__video_source_opts o = {KP_VIDEO_READER_CONFIG_INIT, frames, false, strict};
    kp_video_reader_config *cfg = &o.reader;
    const char *file = json_string_value(json_object_get(s, "path")), *dec = "auto";
    json_t *list = json_object_get(s, "paths");
    int64_t streams = 1;
    KP_CHECK(kp__opt_int(s, path, "streams", 1, KP_FLOW_MAX_STREAMS, &streams));
    if (!file == !list || (list && json_object_get(s, "streams")))
        return KP__PERR("%s: the video source takes \"path\" (with \"streams\" copies of it) "
                        "or \"paths\", one of them",
                        path);
    size_t n = list ? json_array_size(list) : (size_t)streams;
    if (list && (!json_is_array(list) || n < 1 || n > KP_FLOW_MAX_STREAMS))
        return KP__PERR("%s.paths: expected 1 to %d paths", path, KP_FLOW_MAX_STREAMS);
    const char *paths[KP_FLOW_MAX_STREAMS];
    for (size_t i = 0; i < n; i++) {
        paths[i] = list ? json_string_value(json_array_get(list, i)) : file;
        if (!paths[i]) return KP__PERR("%s.paths[%zu]: expected a path or URL", path, i);
    }
    KP_CHECK(kp__opt_str(s, path, "decoder",
                         (const char *const[]){"auto", "nvdec", "software", NULL}, &dec));
    cfg->decoder = dec[0] == 'a'   ? KP_VIDEO_DECODE_AUTO
                   : dec[0] == 'n' ? KP_VIDEO_DECODE_NVDEC
                                   : KP_VIDEO_DECODE_SOFTWARE;
    int64_t pitch = 0, threads = 0, timeout = 0, parallel = 1, max_w = 0, max_h = 0;
    KP_CHECK(kp__opt_int(s, path, "parallel", 1, KP_VIDEO_MAX_PARALLEL, &parallel));
    KP_CHECK(kp__opt_int(s, path, "max_width", 0, KP_VIDEO_MAX_SIDE, &max_w));
    KP_CHECK(kp__opt_int(s, path, "max_height", 0, KP_VIDEO_MAX_SIDE, &max_h));
    KP_CHECK(kp__opt_int(s, path, "pitch", 0, 2 * KP_VIDEO_MAX_SIDE, &pitch));
    KP_CHECK(kp__opt_int(s, path, "threads", 0, 256, &threads));
    KP_CHECK(kp__opt_int(s, path, "timeout_ms", 0, 86400000, &timeout));
    json_t *rt = json_object_get(s, "realtime");
    if (rt && !json_is_boolean(rt)) return KP__PERR("%s.realtime: expected true or false", path);
    o.realtime = json_is_true(rt);
    KP_CHECK(kp__opt_format(s, path, &cfg->format));
    cfg->pitch = pitch;
    cfg->threads = (int)threads;
    cfg->timeout_ms = (int)timeout;
    cfg->parallel = (int)parallel;
    cfg->max_width = (int32_t)max_w;
    cfg->max_height = (int32_t)max_h;
    char opts[KP_VIDEO_OPTIONS_MAX];
    KP_CHECK(kp__av_options_json(s, path, opts, sizeof opts, &cfg->options));
    return kp__stage_video_source(dev, paths, n, &o, m, NULL);
}

/* A video file out: path, codec, encoder, bitrate or crf, preset, bframes,
 * gop, threads, format, options. */
static kp_status kp__video_sink(kp_device_t dev, json_t *s, const char *path, kp__stage_made *m) {
    KP_CHECK(kp__json_kind_keys(s, path, "video",
                                (const char *const[]){"path", "codec", "encoder", "bitrate", "crf",
                                                      "preset", "bframes", "gop", "threads",
                                                      "format", "options", NULL}));
    kp_video_writer_config cfg = KP_VIDEO_WRITER_CONFIG_INIT;
    const char *file = json_string_value(json_object_get(s, "path"));
    if (!file) return KP__PERR("%s.path: the video sink needs a file path", path);
    KP_CHECK(kp__opt_str(s, path, "codec", (const char *const[]){"h264", NULL}, &cfg.codec));
    KP_CHECK(kp__opt_str(s, path, "encoder",
                         (const char *const[]){"auto", "nvenc", "libx264", NULL}, &cfg.encoder));
    KP_CHECK(kp__opt_str(s, path, "preset", NULL, &cfg.preset));
    kp_pixel_format pf = KP_PIXEL_NONE;
    KP_CHECK(kp__opt_format(s, path, &pf));
    int64_t crf = -1, bframes = -1, gop = 0, threads = 0;
    KP_CHECK(kp__opt_int(s, path, "bitrate", 1, 2000000000, &cfg.bitrate));
    KP_CHECK(kp__opt_int(s, path, "crf", 0, 51, &crf));
    KP_CHECK(kp__opt_int(s, path, "bframes", 0, 16, &bframes));
    KP_CHECK(kp__opt_int(s, path, "gop", 1, 10000, &gop));
    KP_CHECK(kp__opt_int(s, path, "threads", 0, 256, &threads));
    cfg.crf = (int)crf;
    cfg.bframes = (int)bframes;
    cfg.gop = (int)gop;
    cfg.threads = (int)threads;
    char opts[KP_VIDEO_OPTIONS_MAX];
    KP_CHECK(kp__av_options_json(s, path, opts, sizeof opts, &cfg.options));
    return kp__stage_video_sink(dev, file, &cfg, pf, m);
}

kp_status kp__json_source(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                          kp__stage_made *m) {
    const char *kind = json_string_value(json_object_get(s, "source"));
    char sub[96];
    int64_t frames = 0, w = 0, h = 0;
    kp_status st;
    json_t *v = json_object_get(s, "frames");
    snprintf(sub, sizeof sub, "%s.frames", path);
    if (v) KP_CHECK(kp__json_count(v, sub, 0, INT64_MAX, &frames));
    if (kind && strcmp(kind, "synthetic") == 0) {
        KP_CHECK(kp__json_kind_keys(s, path, kind,
                                    (const char *const[]){"frames", "shape", "streams", NULL}));
        st = kp__synthetic(dev, s, path, frames, m);
    } else if (kind && strcmp(kind, "testsrc") == 0) {
        KP_CHECK(kp__json_kind_keys(s, path, kind,
                                    (const char *const[]){"frames", "width", "height", "streams",
                                                          "format", "pitch", NULL}));
        snprintf(sub, sizeof sub, "%s.width", path);
        KP_CHECK(kp__json_count(json_object_get(s, "width"), sub, 2, 16384, &w));
        snprintf(sub, sizeof sub, "%s.height", path);
        KP_CHECK(kp__json_count(json_object_get(s, "height"), sub, 2, 16384, &h));
        int64_t pitch = 0;
        kp_pixel_format pf = KP_PIXEL_NONE;
        KP_CHECK(kp__opt_int(s, path, "pitch", 0, 2 * KP_VIDEO_MAX_SIDE, &pitch));
        KP_CHECK(kp__opt_format(s, path, &pf));
        st = kp__stage_testsrc(frames, w, h, pf, pitch, m);
    } else if (kind && strcmp(kind, "y4m") == 0) {
        KP_CHECK(kp__json_kind_keys(s, path, kind,
                                    (const char *const[]){"frames", "loop", "path", NULL}));
        const char *file = json_string_value(json_object_get(s, "path"));
        json_t *loop = json_object_get(s, "loop");
        if (!file) return KP__PERR("%s.path: the y4m source needs a file path", path);
        if (loop && !json_is_boolean(loop))
            return KP__PERR("%s.loop: expected true or false", path);
        st = kp__stage_y4m_source(dev, file, frames, json_is_true(loop), m, b->y4m_tags,
                                  sizeof b->y4m_tags);
    } else if (kind && strcmp(kind, "video") == 0) {
        st = kp__video_source(dev, s, path, frames, b->strict, m);
    } else if (kind && strcmp(kind, "remote") == 0) {
        KP_CHECK(kp__json_kind_keys(
            s, path, kind,
            (const char *const[]){"listen", "frame_bytes", "capacity", "timeout_ms", NULL}));
        st = kp__remote_source(dev, s, path, m);
    } else {
        return KP__PERR("%s.source: expected \"synthetic\", \"testsrc\", \"y4m\", "
                        "\"video\" or \"remote\"",
                        path);
    }
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
}

kp_status kp__json_sink(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                        kp__stage_made *m) {
    const char *kind = json_string_value(json_object_get(s, "sink"));
    if (kind && strcmp(kind, "null") == 0) {
        KP_CHECK(kp__json_kind_keys(s, path, kind, (const char *const[]){NULL}));
        return kp__stage_null(m);
    }
    if (kind && strcmp(kind, "remote") == 0) {
        KP_CHECK(kp__json_kind_keys(s, path, kind,
                                    (const char *const[]){"connect", "timeout_ms", NULL}));
        kp_status st = kp__remote_sink(b, dev, s, path, m);
        return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
    }
    if (kind && strcmp(kind, "video") == 0) {
        kp_status st = kp__video_sink(dev, s, path, m);
        return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
    }
    if (!kind || (strcmp(kind, "npy") != 0 && strcmp(kind, "y4m") != 0))
        return KP__PERR("%s.sink: expected \"null\", \"npy\", \"y4m\", \"video\" or "
                        "\"remote\"",
                        path);
    const bool y4m = kind[0] == 'y';
    KP_CHECK(kp__json_kind_keys(s, path, kind,
                                y4m ? (const char *const[]){"path", "format", NULL}
                                    : (const char *const[]){"path", NULL}));
    const char *file = json_string_value(json_object_get(s, "path"));
    if (!file) return KP__PERR("%s.path: the %s sink needs a file path", path, kind);
    kp_pixel_format pf = KP_PIXEL_NONE;
    if (y4m) KP_CHECK(kp__opt_format(s, path, &pf));
    kp_status st = !y4m ? kp__stage_npy(dev, file, b->frame_bytes, m)
                        : kp__stage_y4m_sink(dev, file, b->frame_bytes, b->y4m_tags, pf, m);
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
}
