/* The flows' "video" source and sink: a kp_video_reader_t and a
 * kp_video_writer_t (src/video) as stages. Frames travel as u8
 * [h*3/2, pitch] with kp_frame.video saying what they are: NV12 from NVDEC,
 * I420 from software decode, with the container's timestamps, which the
 * sink writes back, so frames a drop policy removed leave gaps. */
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "stages-impl.h"

/* One stream of a video source: its reader, its pacing and its counts. */
typedef struct kp__video_stream {
    struct kp__video_src *owner;
    char path[1024];
    kp_video_reader_t r;
    kp_video_reader_info info;
    /* "realtime": frame k is due at t0 + (pts_k - pts_0) in wall time */
    double t0_us;
    int64_t pts0;
    bool gap;       /* the next frame follows a reconnection */
    kp_flow_t flow; /* for the reader's interrupt: the flow's cancel */
    _Atomic uint64_t reconnects, errors;
    char last_error[160];
    pthread_mutex_t mu; /* info and last_error, read by kp_flow_streams */
} kp__video_stream;

/* Keeps FFmpeg options (kp_video_reader_config.options) in the stage's
 * own buffer of KP_VIDEO_OPTIONS_MAX: *kept points there, or stays NULL. */
static kp_status kp__keep_options(char *buf, const char *options, const char **kept) {
    if (!options) return KP_OK;
    size_t n = strlen(options);
    if (n >= KP_VIDEO_OPTIONS_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "options: at most %d characters",
                         KP_VIDEO_OPTIONS_MAX - 1);
    *kept = memcpy(buf, options, n + 1);
    return KP_OK;
}

typedef struct kp__video_src {
    kp_device_t dev;
    kp_video_reader_config cfg; /* cfg.options points into options: reopened live streams */
    char options[KP_VIDEO_OPTIONS_MAX];
    int64_t frames; /* per stream; 0: all */
    bool realtime, live;
    size_t frame_bytes; /* the flow's frames: the largest stream's at creation */
    size_t n;
    void **users;
    kp__video_stream *s;
} kp__video_src;

static void kp__video_src_free(void *user) {
    kp__video_src *v = user ? ((kp__video_stream *)user)->owner : NULL;
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        kp_video_reader_close(v->s[i].r);
        pthread_mutex_destroy(&v->s[i].mu);
    }
    kp__free(v->users);
    kp__free(v->s);
    kp__free(v);
}

static bool kp__video_src_interrupt(void *user) {
    kp__video_stream *s = user;
    return kp_flow_cancelled(__atomic_load_n(&s->flow, __ATOMIC_ACQUIRE));
}

/* Sleeps until `due_us` (CLOCK_MONOTONIC), waking every 10 ms to see
 * whether the flow was cancelled. */
static void kp__sleep_until(kp_flow_t f, double due_us) {
    for (;;) {
        double left = due_us - (double)kp__mono_ns() * 1e-3;
        if (left <= 0 || kp_flow_cancelled(f)) return;
        if (left > 10000) left = 10000;
        struct timespec d = {0, (long)(left * 1e3)};
        nanosleep(&d, NULL);
    }
}

/* Keeps the thread's last error as the stream's, less what the stream's
 * health says already (the call, the stream's path), so the reason fits. */
static void kp__video_keep_error(kp__video_stream *s) {
    const char *e = kp_last_error();
    static const char call[] = "kp_video_reader_"; /* _open: or _next: */
    if (strncmp(e, call, sizeof call - 1) == 0 && strstr(e, ": ")) e = strstr(e, ": ") + 2;
    size_t n = strlen(s->path);
    if (strncmp(e, s->path, n) == 0 && e[n] == ':' && e[n + 1] == ' ') e += n + 2;
    pthread_mutex_lock(&s->mu);
    snprintf(s->last_error, sizeof s->last_error, "%s", e);
    pthread_mutex_unlock(&s->mu);
}

/* A live stream that ended or failed opens again, after 100 ms, then
 * twice as long each time up to 2 s, until it opens or the flow is
 * cancelled; the frame after the gap is marked. */
static kp_status kp__video_reconnect(kp__video_src *v, kp__video_stream *s, kp_flow_t flow) {
    kp__video_keep_error(s);
    kp_clear_error();
    kp_video_reader_close(s->r);
    s->r = NULL;
    double wait_us = 100000;
    for (;;) {
        kp__sleep_until(flow, (double)kp__mono_ns() * 1e-3 + wait_us);
        if (kp_flow_cancelled(flow)) return kp__error(KP_ERR_STATE, "cancelled");
        atomic_fetch_add(&s->reconnects, 1);
        kp_video_reader_info info;
        kp_video_reader_config cfg = v->cfg;
        cfg.interrupt = kp__video_src_interrupt;
        cfg.interrupt_user = s;
        kp_status st = kp_video_reader_open(v->dev, s->path, &cfg, &s->r);
        if (st == KP_OK) st = kp_video_reader_get_info(s->r, &info);
        if (st == KP_OK && info.frame_bytes > v->frame_bytes)
            st = kp__error(KP_ERR_MISMATCH,
                           "%s: came back with %dx%d frames, larger than the flow's frames",
                           s->path, (int)info.width, (int)info.height);
        if (st == KP_OK) {
            pthread_mutex_lock(&s->mu); /* kp_flow_streams reads it */
            s->info = info;
            pthread_mutex_unlock(&s->mu);
            s->gap = true;
            s->t0_us = 0;
            return KP_OK;
        }
        kp_video_reader_close(s->r);
        s->r = NULL;
        kp__video_keep_error(s);
        kp_clear_error();
        if ((wait_us *= 2) > 2e6) wait_us = 2e6;
    }
}

static kp_status kp__video_src_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__video_stream *s = user;
    kp__video_src *v = s->owner;
    if (v->frames && f->seq >= (uint64_t)v->frames) {
        *eos = true;
        return KP_OK;
    }
    __atomic_store_n(&s->flow, c->flow, __ATOMIC_RELEASE);
    for (;;) {
        /* s->r is open: at creation, and again after every reconnection */
        kp_status st = kp_video_reader_next(s->r, c->stream, f->data, f->capacity, &f->video, eos);
        if (st == KP_OK && (!*eos || !v->live)) break;
        if (!v->live || kp_flow_cancelled(c->flow)) return st;
        if (st != KP_OK) atomic_fetch_add(&s->errors, 1);
        *eos = false;
        if (st == KP_OK) /* the detail the reconnection keeps as the stream's last error */
            kp__error(KP_ERR_IO, "%s: the stream ended", s->path);
        KP_CHECK(kp__video_reconnect(v, s, c->flow));
    }
    if (*eos) return KP_OK;
    /* the frame's own rows: a stream may change size (max_width, max_height) */
    int64_t shape[2] = {f->video.height / 2 * 3, f->video.pitch};
    KP_CHECK(kp_desc_init(&f->desc, KP_U8, 2, shape, NULL));
    f->bytes = (size_t)kp_desc_bytes_needed(&f->desc);
    f->discontinuity = s->gap;
    s->gap = false;
    if (v->realtime && f->video.pts != KP_VIDEO_NO_PTS && f->video.time_base[1] > 0) {
        double now = (double)kp__mono_ns() * 1e-3;
        if (s->t0_us == 0) {
            s->t0_us = now;
            s->pts0 = f->video.pts;
        }
        double due = s->t0_us + (double)(f->video.pts - s->pts0) * 1e6 *
                                    (double)f->video.time_base[0] / (double)f->video.time_base[1];
        if (due > now) kp__sleep_until(c->flow, due);
    }
    return KP_OK;
}

static void kp__video_src_detail(void *user, char *buf, size_t len) {
    kp__video_stream *s = user;
    pthread_mutex_lock(&s->mu);
    snprintf(buf, len, "%s%s%s%s, %llu reconnects, %llu errors%s%s", s->info.decoder,
             s->info.fallback[0] ? " (fell back: " : "", s->info.fallback,
             s->info.fallback[0] ? ")" : "", (unsigned long long)atomic_load(&s->reconnects),
             (unsigned long long)atomic_load(&s->errors), s->last_error[0] ? "; last: " : "",
             s->last_error);
    pthread_mutex_unlock(&s->mu);
}

/* Whether a path names live input: a URL FFmpeg reads from the network. */
static bool kp__is_live(const char *path) {
    static const char *const schemes[] = {"udp://", "srt://",  "rtsp://", "rtp://",
                                          "tcp://", "rtmp://", NULL};
    for (const char *const *k = schemes; *k; k++)
        if (strncmp(path, *k, strlen(*k)) == 0) return true;
    return false;
}

/* The source and its streams' memory, each stream pointing at it; the
 * settings `o` kept (their FFmpeg options in the source's own buffer). */
static kp_status kp__video_src_alloc(kp_device_t dev, size_t n_paths,
                                     const kp_flow_video_source_config *o, kp__video_src **out) {
    kp__video_src *v = kp__calloc(1, sizeof *v);
    kp__video_stream *streams = v ? kp__calloc(n_paths, sizeof *streams) : NULL;
    void **users = streams ? kp__calloc(n_paths, sizeof *users) : NULL;
    if (!users) {
        kp__free(streams);
        kp__free(v);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "video source: no memory");
    }
    v->dev = dev;
    v->cfg = o->reader;
    v->frames = o->frames;
    v->realtime = o->realtime;
    v->s = streams;
    v->users = users;
    for (size_t i = 0; i < n_paths; i++) {
        streams[i].owner = v;
        users[i] = &streams[i];
    }
    *out = v;
    return KP_OK;
}

/* The reader settings of one stream: under strict_no_host_copies, on a
 * device whose memory is apart from the host's, NVDEC or a refusal by
 * name (software decode uploads every frame); the interrupt is the
 * stream's, and a live stream notices a dead camera. */
static kp_status kp__video_stream_config(kp_device_t dev, const kp_flow_video_source_config *o,
                                         bool live, kp_video_reader_config *cfg, bool *strict) {
    *cfg = o->reader;
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(dev, &caps));
    *strict = o->strict_no_host_copies && caps.device_memory;
    if (*strict && (cfg->decoder == KP_VIDEO_DECODE_SOFTWARE || !caps.video_decode))
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s uploads every frame from the host: refused under "
                         "strict_no_host_copies",
                         caps.video_decode ? "decoder \"software\""
                                           : "the only decoder for this device (software)");
    if (*strict) cfg->decoder = KP_VIDEO_DECODE_NVDEC;
    cfg->interrupt = kp__video_src_interrupt;
    if (live && !cfg->timeout_ms) cfg->timeout_ms = 2000;
    return KP_OK;
}

/* Stream i of source v: its path checked and kept, its reader opened. */
static kp_status kp__video_stream_open(kp__video_src *v, size_t i, const char *path,
                                       const kp_flow_video_source_config *o) {
    kp__video_stream *s = &v->s[i];
    if (pthread_mutex_init(&s->mu, NULL) != 0)
        return kp__error(KP_ERR_INTERNAL, "video source: cannot initialise a lock");
    v->n = i + 1;
    if (!path || strlen(path) >= sizeof s->path)
        return kp__error(KP_ERR_INVALID_ARG, "paths[%zu]: a path of 1 to %zu characters", i,
                         sizeof s->path - 1);
    snprintf(s->path, sizeof s->path, "%s", path);
    bool live = kp__is_live(s->path), strict = false;
    if (i && live != v->live)
        return kp__error(KP_ERR_INVALID_ARG,
                         "paths[%zu]: live URLs and files do not mix in one source", i);
    v->live = live;
    kp_video_reader_config cfg;
    KP_CHECK(kp__video_stream_config(v->dev, o, live, &cfg, &strict));
    cfg.interrupt_user = s;
    KP_CHECK(kp__keep_options(v->options, cfg.options, &cfg.options));
    v->cfg = cfg;
    kp_status st = kp_video_reader_open(v->dev, s->path, &cfg, &s->r);
    if (st == KP_OK) st = kp_video_reader_get_info(s->r, &s->info);
    if (st != KP_OK)
        return kp__error_prefix(st, "paths[%zu]%s", i,
                                strict ? ": strict_no_host_copies takes NVDEC only" : "");
    if (s->info.frame_bytes > v->frame_bytes) v->frame_bytes = s->info.frame_bytes;
    return KP_OK;
}

kp_status kp__stage_video_source(kp_device_t dev, const char *const *paths, size_t n_paths,
                                 const kp_flow_video_source_config *cfg, kp__stage_made *out,
                                 kp_video_reader_info *info) {
    kp_flow_video_source_config o = KP_FLOW_VIDEO_SOURCE_CONFIG_INIT;
    if (cfg)
        KP_CHECK(kp__config_read(
            &o, sizeof o, cfg, KP__SIZE_THROUGH(kp_flow_video_source_config, strict_no_host_copies),
            "video source: cfg", "KP_FLOW_VIDEO_SOURCE_CONFIG_INIT"));
    if (!dev || !paths)
        return kp__error(KP_ERR_INVALID_ARG, "video source: a device and paths are required");
    if (o.frames < 0)
        return kp__error(KP_ERR_INVALID_ARG, "frames: %lld is negative", (long long)o.frames);
    if (n_paths < 1 || n_paths > KP_FLOW_MAX_STREAMS)
        return kp__error(KP_ERR_INVALID_ARG, "%zu streams (1 .. %d)", n_paths, KP_FLOW_MAX_STREAMS);
    kp__video_src *v = NULL;
    KP_CHECK(kp__video_src_alloc(dev, n_paths, &o, &v));
    kp_status st = KP_OK;
    for (size_t i = 0; i < n_paths && st == KP_OK; i++)
        st = kp__video_stream_open(v, i, paths[i], &o);
    /* each stream's interrupt reads its own stream: the config kept is the last one's */
    v->cfg.interrupt_user = NULL;
    static const kp__stage_kind kind = {.fn = kp__video_src_fn,
                                        .stream_detail = kp__video_src_detail};
    if (st == KP_OK) st = kp__stage_kind_add(&kind);
    if (st != KP_OK) {
        kp__video_src_free(&v->s[0]);
        return st;
    }
    if (info) *info = v->s[0].info;
    *out = (kp__stage_made){.fn = kp__video_src_fn,
                            .user = &v->s[0],
                            .free_fn = kp__video_src_free,
                            .frame_bytes = v->frame_bytes,
                            .max_batch = 1,
                            .streams = n_paths > 1 ? n_paths : 0,
                            .stream_users = n_paths > 1 ? v->users : NULL};
    return KP_OK;
}

/* "{stream}" in a sink's path: one file per stream, the id put there. */
#define KP__STREAM_KEY "{stream}"

typedef struct kp__video_sink {
    kp_device_t dev;
    kp_video_writer_config cfg; /* its strings point into the buffers below */
    char codec[32], encoder[32], preset[32];
    char options[KP_VIDEO_OPTIONS_MAX];
    char path[1024];
    bool per_stream;
    kp_video_writer_t w;    /* one file */
    kp_video_writer_t *ws;  /* per stream: KP_FLOW_MAX_STREAMS, opened at each one's first frame */
    kp_pixel_format format; /* KP_PIXEL_NONE: the frames' own */
} kp__video_sink;

/* Closes every writer: the first error is returned, the rest cleared. */
static kp_status kp__video_sink_close_all(kp__video_sink *s) {
    kp_status first = KP_OK;
    const size_t n = s->ws ? KP_FLOW_MAX_STREAMS + 1 : 1; /* the last: the one file */
    for (size_t i = 0; i < n; i++) {
        kp_video_writer_t *w = i + 1 < n ? &s->ws[i] : &s->w;
        if (!*w) continue;
        kp_status st = kp_video_writer_close(*w);
        *w = NULL;
        if (st != KP_OK && first == KP_OK)
            first = st;
        else if (st != KP_OK)
            kp_clear_error();
    }
    return first;
}

static void kp__video_sink_free(void *user) {
    kp__video_sink *s = user;
    if (!s) return;
    if (kp__video_sink_close_all(s) != KP_OK) kp_clear_error();
    kp__free(s->ws);
    kp__free(s);
}

/* The path with "{stream}" replaced by the id. */
static void kp__stream_path(const char *tmpl, uint32_t stream, char *out, size_t len) {
    const char *k = strstr(tmpl, KP__STREAM_KEY);
    if (!k) {
        snprintf(out, len, "%s", tmpl);
        return;
    }
    snprintf(out, len, "%.*s%u%s", (int)(k - tmpl), tmpl, stream, k + strlen(KP__STREAM_KEY));
}

/* The writer of the frame's stream, opened at its first frame. */
static kp_status kp__video_sink_writer(kp__video_sink *s, uint32_t stream, kp_video_writer_t *out) {
    if (!s->per_stream) {
        *out = s->w;
        return KP_OK;
    }
    if (stream >= KP_FLOW_MAX_STREAMS)
        return kp__error(KP_ERR_INVALID_ARG, "stream %u: at most %d streams", stream,
                         KP_FLOW_MAX_STREAMS);
    if (!s->ws[stream]) {
        char path[1100];
        kp__stream_path(s->path, stream, path, sizeof path);
        KP_CHECK(kp_video_writer_open(s->dev, path, &s->cfg, &s->ws[stream]));
    }
    *out = s->ws[stream];
    return KP_OK;
}

static kp_status kp__video_sink_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__video_sink *s = user;
    kp_video_frame v = f->video;
    const kp_tensor_desc *d = &f->desc;
    if (v.format == KP_PIXEL_NONE)
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu is not a video frame: a video sink takes frames from a "
                         "video, y4m or testsrc source",
                         (unsigned long long)f->seq);
    if (s->format != KP_PIXEL_NONE) v.format = s->format;
    /* a pipeline between may have changed the pitch: the frame's shape says */
    bool ok = d->dtype == KP_U8 && d->ndim == 2 && kp_desc_is_contiguous(d) && d->offset == 0 &&
              d->shape[0] == (int64_t)v.height / 2 * 3;
    if (ok) v.pitch = d->shape[1];
    if (!ok) {
        char buf[96];
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu: %s (%zu bytes) is not a %dx%d 4:2:0 picture (u8 "
                         "[h*3/2, pitch])",
                         (unsigned long long)f->seq, kp_desc_str(d, buf, sizeof buf), f->bytes,
                         (int)v.width, (int)v.height);
    }
    kp_video_writer_t w = NULL;
    KP_CHECK(kp__video_sink_writer(s, f->stream, &w));
    return kp_video_writer_write(w, c->stream, f->data, f->bytes, &v);
}

/* The end of the stream drains the encoder and finishes the file, so an
 * error there (a full disk) is the flow's. */
static kp_status kp__video_sink_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__video_sink *s = user;
    if (why != KP_OK) return KP_OK;
    return kp__video_sink_close_all(s);
}

kp_status kp__stage_video_sink(kp_device_t dev, const char *path, const kp_video_writer_config *cfg,
                               kp_pixel_format format, kp__stage_made *out) {
    const kp_video_writer_config defaults = KP_VIDEO_WRITER_CONFIG_INIT;
    if (!cfg) cfg = &defaults;
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "video sink: a device is required");
    if (format != KP_PIXEL_NONE && format != KP_PIXEL_I420 && format != KP_PIXEL_NV12 &&
        format != KP_PIXEL_P016)
        return kp__error(KP_ERR_INVALID_ARG, "video sink: pixel format %d (I420, NV12 or P016)",
                         (int)format);
    if (!path || !*path || strlen(path) >= sizeof((kp__video_sink *)0)->path)
        return kp__error(KP_ERR_INVALID_ARG, "video sink: a path of 1 to 1023 characters");
    kp__video_sink *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "video sink: no memory");
    s->dev = dev;
    s->cfg = *cfg;
    /* per-stream writers open later: the settings' strings are kept here */
    const char *const from[3] = {cfg->codec, cfg->encoder, cfg->preset};
    char *const to[3] = {s->codec, s->encoder, s->preset};
    const char **dst[3] = {&s->cfg.codec, &s->cfg.encoder, &s->cfg.preset};
    for (int k = 0; k < 3; k++) {
        if (!from[k]) continue;
        if (strlen(from[k]) >= sizeof s->codec) {
            kp__free(s);
            return kp__error(KP_ERR_INVALID_ARG, "video sink: \"%.40s\" is too long", from[k]);
        }
        snprintf(to[k], sizeof s->codec, "%s", from[k]);
        *dst[k] = to[k];
    }
    kp_status kst = kp__keep_options(s->options, cfg->options, &s->cfg.options);
    if (kst != KP_OK) {
        kp__free(s);
        return kst;
    }
    s->format = format;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->per_stream = strstr(path, KP__STREAM_KEY) != NULL;
    kp_status st = KP_OK;
    if (s->per_stream) {
        /* stream 0's file shows now whether the path and the settings work */
        char first[1100];
        kp__stream_path(path, 0, first, sizeof first);
        if (!(s->ws = kp__calloc(KP_FLOW_MAX_STREAMS, sizeof *s->ws)))
            st = kp__error(KP_ERR_OUT_OF_MEMORY, "video sink: no memory");
        if (st == KP_OK) st = kp_video_writer_open(dev, first, cfg, &s->ws[0]);
    } else {
        st = kp_video_writer_open(dev, path, cfg, &s->w);
    }
    if (st != KP_OK) {
        kp__video_sink_free(s);
        return st;
    }
    *out = (kp__stage_made){.fn = kp__video_sink_fn,
                            .user = s,
                            .free_fn = kp__video_sink_free,
                            .max_batch = 1,
                            .end_fn = kp__video_sink_end};
    return KP_OK;
}
