/* Writing video files: encode H.264 or HEVC with NVENC (FFmpeg's
 * h264_nvenc and hevc_nvenc, where the device has an encoder) or with
 * libx264 and libx265 through libavcodec, and mux through libavformat into
 * the container the extension names. P016 frames are written at 10 bits
 * (High 10, Main10): NVENC takes them as they are (P010), x264 and x265
 * from a planar copy with each sample rounded to 10 bits.
 *
 * Each frame comes back from the device once, into a pinned buffer that
 * the encoder reads in place (an AVFrame over it, no further copy): x264
 * copies the picture into its own frames before avcodec hands back
 * control, so the buffer is free again when the packets are drained. The
 * encoder runs on its own threads (x264: frame and lookahead threads, one
 * set per core by default). Timestamps are the frames' own, in their time
 * base, so a dropped frame leaves a gap rather than a retimed stream.
 *
 * Known of libx265 3.5 (Debian 12): on pictures 16 or 32 samples wide its
 * motion search reads memory it never wrote (valgrind shows it), so such a
 * clip's quality varies run to run; other widths are exact run to run. */
#include <stdio.h>
#include <string.h>

#include <libavutil/opt.h>

#include "ffmpeg-impl.h"

struct kp_video_writer {
    kp_device_t dev;
    char path[KP__VIDEO_PATH_MAX];
    kp_video_writer_config cfg;
    char encoder_pref[16], preset[16];
    char options[KP_VIDEO_OPTIONS_MAX]; /* cfg.options points here */
    const AVOutputFormat *ofmt;
    AVFormatContext *oc;
    AVStream *st;
    AVCodecContext *enc;
    AVFrame *frame;
    AVPacket *pkt;
    AVBufferRef *buf; /* over host: frames reference it, never free it */
    kp_allocator_t pinned;
    void *host;
    AVFrame *deep; /* P016 frames for x264 and x265: yuv420p10le, made at the first */
    bool hevc;
    kp_video_frame first; /* the stream's size, format and time base */
    int64_t last_pts, step;
    uint64_t frames;
    bool opened, header, failed;
    char encoder[32];
};

static void kp__no_free(void *opaque, uint8_t *data) {}

kp_status kp__video_writer_make(kp_device_t dev, const char *path,
                                const kp_video_writer_config *cfg, kp_video_writer_t *out) {
    kp__av_log_capture();
    const AVOutputFormat *of = av_guess_format(NULL, path, NULL);
    /* a stream to the network (udp://, srt://, tcp://) goes out as MPEG-TS;
     * to an RTSP server (rtsp://) as RTP, announced and recorded there */
    static const char *const live[] = {"udp://", "srt://", "tcp://", NULL};
    for (const char *const *k = live; !of && *k; k++)
        if (strncmp(path, *k, strlen(*k)) == 0) of = av_guess_format("mpegts", NULL, NULL);
    if (!of && strncmp(path, "rtsp://", 7) == 0 && !(of = av_guess_format("rtsp", NULL, NULL)))
        return kp__error(KP_ERR_UNSUPPORTED, "%s: this FFmpeg writes no RTSP", path);
    if (!of)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: no container for this extension (.mp4, .mkv or .ts)", path);
    const bool hevc = cfg->codec && strcmp(cfg->codec, "hevc") == 0;
    if (avformat_query_codec(of, hevc ? AV_CODEC_ID_HEVC : AV_CODEC_ID_H264,
                             FF_COMPLIANCE_NORMAL) == 0)
        return kp__error(KP_ERR_UNSUPPORTED, "%s: the %s container does not hold %s", path,
                         of->name, hevc ? "HEVC" : "H.264");
    kp_video_writer_t w = kp__calloc(1, sizeof *w);
    if (!w) return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    w->dev = dev;
    w->ofmt = of;
    w->hevc = hevc;
    w->cfg = *cfg;
    memcpy(w->path, path, strlen(path) + 1);
    snprintf(w->encoder_pref, sizeof w->encoder_pref, "%s", cfg->encoder ? cfg->encoder : "auto");
    snprintf(w->preset, sizeof w->preset, "%s", cfg->preset ? cfg->preset : "veryfast");
    w->cfg.encoder = w->encoder_pref;
    w->cfg.preset = w->preset;
    if (cfg->options) { /* checked by api.c: it fits */
        memcpy(w->options, cfg->options, strlen(cfg->options) + 1);
        w->cfg.options = w->options;
    }
    w->cfg.codec = NULL;
    kp_status st = kp_device_allocator(dev, KP_ALLOCATOR_PINNED, &w->pinned);
    if (st == KP_OK && (!(w->frame = av_frame_alloc()) || !(w->pkt = av_packet_alloc())))
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    if (st != KP_OK) {
        av_frame_free(&w->frame);
        av_packet_free(&w->pkt);
        kp__free(w);
        return st;
    }
    *out = w;
    return KP_OK;
}

/* Opens one encoder by FFmpeg's name for the first frame; KP_ERR_UNSUPPORTED
 * with the reason when it cannot. */
static kp_status kp__open_encoder(kp_video_writer_t w, const char *name) {
    const kp_video_frame *f = &w->first;
    const AVCodec *codec = avcodec_find_encoder_by_name(name);
    if (!codec) return kp__error(KP_ERR_UNSUPPORTED, "this FFmpeg has no %s encoder", name);
    AVCodecContext *c = avcodec_alloc_context3(codec);
    if (!c) return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    c->width = f->width;
    c->height = f->height;
    const bool nvenc = strstr(name, "nvenc") != NULL;
    c->pix_fmt = f->format == KP_PIXEL_P016 ? (nvenc ? AV_PIX_FMT_P010LE : AV_PIX_FMT_YUV420P10LE)
                 : f->format == KP_PIXEL_NV12 ? AV_PIX_FMT_NV12
                                              : AV_PIX_FMT_YUV420P;
    c->color_range = f->full_range ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
    /* the matrix the frames say they were made with, where they say one */
    if (f->matrix == KP_VIDEO_MATRIX_BT709) c->colorspace = AVCOL_SPC_BT709;
    if (f->matrix == KP_VIDEO_MATRIX_BT601) c->colorspace = AVCOL_SPC_SMPTE170M;
    if (f->matrix == KP_VIDEO_MATRIX_BT2020) c->colorspace = AVCOL_SPC_BT2020_NCL;
    c->time_base = (AVRational){f->time_base[0], f->time_base[1]};
    if (f->rate[0] > 0) c->framerate = (AVRational){f->rate[0], f->rate[1]};
    c->thread_count = w->cfg.threads;
    if (w->cfg.gop) c->gop_size = w->cfg.gop;
    if (w->cfg.bframes >= 0) c->max_b_frames = w->cfg.bframes;
    if (w->ofmt->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int crf = w->cfg.crf >= 0 ? w->cfg.crf : 23;
    if (w->cfg.bitrate) c->bit_rate = w->cfg.bitrate;
    if (strcmp(name, "libx264") == 0) {
        av_opt_set(c->priv_data, "preset", w->preset, 0);
        if (!w->cfg.bitrate) av_opt_set_double(c->priv_data, "crf", crf, 0);
        if (w->cfg.open_gop) av_opt_set(c->priv_data, "x264-params", "open-gop=1", 0);
    } else if (strcmp(name, "libx265") == 0) {
        av_opt_set(c->priv_data, "preset", w->preset, 0);
        if (!w->cfg.bitrate) av_opt_set_double(c->priv_data, "crf", crf, 0);
        /* x265 opens its groups by default and prints to stderr: neither
           unless asked */
        av_opt_set(c->priv_data, "x265-params",
                   w->cfg.open_gop ? "log-level=error:open-gop=1" : "log-level=error:open-gop=0", 0);
    } else if (!w->cfg.bitrate) { /* NVENC: constant quality */
        av_opt_set_int(c->priv_data, "cq", crf, 0);
    }
    int e = avcodec_open2(c, codec, NULL);
    if (e < 0) {
        avcodec_free_context(&c);
        return kp__av_error(e, KP_ERR_UNSUPPORTED, "cannot open the %s encoder", name);
    }
    w->enc = c;
    snprintf(w->encoder, sizeof w->encoder, "%s", name);
    return KP_OK;
}

/* At the first frame: the encoder, the file, the header, the host buffer. */
static kp_status kp__writer_start(kp_video_writer_t w, const kp_video_frame *f) {
    w->first = *f;
    if (f->pts == KP_VIDEO_NO_PTS) { /* frames numbered at their rate (30/s unknown) */
        w->first.time_base[0] = f->rate[0] ? f->rate[1] : 1;
        w->first.time_base[1] = f->rate[0] ? f->rate[0] : 30;
    }
    AVRational tb = {w->first.time_base[0], w->first.time_base[1]};
    w->step = f->rate[0] ? av_rescale_q(1, (AVRational){f->rate[1], f->rate[0]}, tb) : 1;
    if (w->step < 1) w->step = 1;
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(w->dev, &caps));
    const char *pref = w->encoder_pref;
    kp_status st = KP_ERR_UNSUPPORTED;
    const char *nvenc = w->hevc ? "hevc_nvenc" : "h264_nvenc",
               *soft = w->hevc ? "libx265" : "libx264";
    if (strcmp(pref, "nvenc") == 0 || (strcmp(pref, "auto") == 0 && caps.video_encode)) {
        st = kp__open_encoder(w, nvenc);
        if (st != KP_OK && strcmp(pref, "nvenc") == 0) return st;
        if (st != KP_OK) { /* once per writer, at its first frame: why x264 encodes */
            kp__log(KP_LOG_INFO, "%s: %s encodes (no NVENC: %s)", w->path, soft, kp_last_error());
            kp_clear_error();
        }
    }
    if (st != KP_OK) KP_CHECK(kp__open_encoder(w, soft));
    if (w->enc->pix_fmt == AV_PIX_FMT_YUV420P10LE) {
        if (!(w->deep = av_frame_alloc()))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
        w->deep->format = AV_PIX_FMT_YUV420P10LE;
        w->deep->width = f->width;
        w->deep->height = f->height;
        const int ae = av_frame_get_buffer(w->deep, 0);
        if (ae < 0) return kp__av_error(ae, KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    }
    int e = avformat_alloc_output_context2(&w->oc, w->ofmt, NULL, w->path);
    if (e < 0) return kp__av_error(e, KP_ERR_IO, "%s: cannot make the container", w->path);
    if (!(w->st = avformat_new_stream(w->oc, NULL)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    if ((e = avcodec_parameters_from_context(w->st->codecpar, w->enc)) < 0)
        return kp__av_error(e, KP_ERR_STATE, "%s: the stream's parameters", w->path);
    w->st->time_base = tb;
    if (f->rate[0]) w->st->avg_frame_rate = (AVRational){f->rate[0], f->rate[1]};
    KP_CHECK(kp_allocator_alloc(w->pinned, (size_t)(f->pitch * f->height / 2 * 3), NULL, &w->host));
    if (!(w->buf = av_buffer_create(w->host, (size_t)(f->pitch * f->height / 2 * 3), kp__no_free,
                                    NULL, 0)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    AVDictionary *opts = NULL;
    KP_CHECK(kp__av_options(w->cfg.options, &opts));
    if (!(w->ofmt->flags & AVFMT_NOFILE)) { /* RTSP makes its own connections */
        if ((e = avio_open(&w->oc->pb, w->path, AVIO_FLAG_WRITE)) < 0) {
            av_dict_free(&opts);
            return kp__av_error(e, KP_ERR_IO, "%s: cannot write", w->path);
        }
        w->opened = true;
    }
    e = avformat_write_header(w->oc, &opts);
    kp_status left = kp__av_options_left(&opts, w->path);
    if (e < 0) return kp__av_error(e, KP_ERR_IO, "%s: cannot write the header", w->path);
    w->header = true; /* the trailer closes what the header opened */
    KP_CHECK(left);
    return KP_OK;
}

/* Sends a frame (NULL: the end) and writes every packet the encoder has. */
static kp_status kp__writer_encode(kp_video_writer_t w, AVFrame *fr) {
    int e = avcodec_send_frame(w->enc, fr);
    if (e < 0)
        return kp__av_error(e, KP_ERR_STATE, "%s: encoding frame %llu", w->path,
                            (unsigned long long)w->frames);
    for (;;) {
        e = avcodec_receive_packet(w->enc, w->pkt);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return KP_OK;
        if (e < 0) return kp__av_error(e, KP_ERR_STATE, "%s: encoding", w->path);
        av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
        w->pkt->stream_index = w->st->index;
        e = av_interleaved_write_frame(w->oc, w->pkt); /* takes the packet */
        if (e < 0) return kp__av_error(e, KP_ERR_IO, "%s: cannot write", w->path);
    }
}

/* Rounds a P016 sample to 10 bits. */
static inline uint16_t kp__to10(uint16_t v) { return (uint16_t)(v >= 0xFFE0 ? 1023 : (v + 32) >> 6); }

/* Sends the P016 frame in w->host to x264 or x265 as yuv420p10le: the
 * chroma taken apart, every sample rounded to 10 bits. */
static kp_status kp__writer_deep(kp_video_writer_t w, const kp_video_frame *f, int64_t pts) {
    AVFrame *fr = w->deep;
    int e = av_frame_make_writable(fr); /* a copy only if the encoder kept the last */
    if (e < 0) return kp__av_error(e, KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    const int64_t p = f->pitch, wd = f->width, h = f->height;
    const uint8_t *b = w->host;
    for (int64_t y = 0; y < h; y++) {
        const uint16_t *src = (const uint16_t *)(b + y * p);
        uint16_t *dst = (uint16_t *)(fr->data[0] + y * fr->linesize[0]);
        for (int64_t x = 0; x < wd; x++) dst[x] = kp__to10(src[x]);
    }
    for (int64_t y = 0; y < h / 2; y++) {
        const uint16_t *src = (const uint16_t *)(b + p * h + y * p);
        uint16_t *u = (uint16_t *)(fr->data[1] + y * fr->linesize[1]),
                 *v = (uint16_t *)(fr->data[2] + y * fr->linesize[2]);
        for (int64_t x = 0; x < wd / 2; x++) {
            u[x] = kp__to10(src[2 * x]);
            v[x] = kp__to10(src[2 * x + 1]);
        }
    }
    fr->color_range = w->enc->color_range;
    fr->pts = pts;
    KP_CHECK(kp__writer_encode(w, fr));
    w->last_pts = pts;
    w->frames++;
    return KP_OK;
}

static kp_status kp__writer_frame(kp_video_writer_t w, kp_stream_t s, const void *src,
                                  const kp_video_frame *f) {
    if (!w->enc) KP_CHECK(kp__writer_start(w, f));
    const kp_video_frame *a = &w->first;
    if (f->format != a->format || f->width != a->width || f->height != a->height ||
        f->pitch != a->pitch)
        return kp__error(KP_ERR_MISMATCH,
                         "%s: frame %llu is %dx%d %s, pitch %lld; the stream is %dx%d %s, pitch "
                         "%lld",
                         w->path, (unsigned long long)w->frames, (int)f->width, (int)f->height,
                         kp_pixel_format_name(f->format), (long long)f->pitch, (int)a->width,
                         (int)a->height, kp_pixel_format_name(a->format), (long long)a->pitch);
    int64_t pts = f->pts;
    if (pts == KP_VIDEO_NO_PTS || a->pts == KP_VIDEO_NO_PTS) {
        pts = w->frames ? w->last_pts + w->step : 0;
    } else if (f->time_base[0] != a->time_base[0] || f->time_base[1] != a->time_base[1]) {
        pts = av_rescale_q(pts, (AVRational){f->time_base[0], f->time_base[1]},
                           (AVRational){a->time_base[0], a->time_base[1]});
    }
    if (w->frames && pts <= w->last_pts)
        return kp__error(KP_ERR_INVALID_ARG, "%s: frame %llu has pts %lld, not after %lld", w->path,
                         (unsigned long long)w->frames, (long long)pts, (long long)w->last_pts);
    if (av_buffer_get_ref_count(w->buf) != 1)
        return kp__error(KP_ERR_STATE, "%s: the encoder still holds the last frame", w->path);
    const int64_t p = f->pitch, h = f->height;
    KP_CHECK(kp_memcpy_async(s, w->host, src, (size_t)(p * h / 2 * 3)));
    KP_CHECK(kp_stream_sync(s));
    if (w->deep) return kp__writer_deep(w, f, pts);
    AVFrame *fr = w->frame;
    av_frame_unref(fr);
    fr->format = w->enc->pix_fmt;
    fr->width = f->width;
    fr->height = f->height;
    fr->color_range = w->enc->color_range;
    uint8_t *b = w->host;
    fr->data[0] = b;
    fr->linesize[0] = (int)p;
    fr->data[1] = b + p * h;
    if (f->format == KP_PIXEL_NV12) {
        fr->linesize[1] = (int)p;
    } else {
        fr->linesize[1] = fr->linesize[2] = (int)(p / 2);
        fr->data[2] = b + p * h + p / 2 * (h / 2);
    }
    if (!(fr->buf[0] = av_buffer_ref(w->buf)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "video writer: no memory");
    fr->pts = pts;
    kp_status st = kp__writer_encode(w, fr);
    av_frame_unref(fr);
    KP_CHECK(st);
    w->last_pts = pts;
    w->frames++;
    return KP_OK;
}

kp_status kp__video_writer_write(kp_video_writer_t w, kp_stream_t s, const void *src, size_t bytes,
                                 const kp_video_frame *frame) {
    if (w->failed) return kp__error(KP_ERR_STATE, "%s: an earlier frame failed", w->path);
    if (kp_stream_device(s) != w->dev)
        return kp__error(KP_ERR_INVALID_ARG, "the stream is on %s, the writer on %s",
                         kp_device_name(kp_stream_device(s)), kp_device_name(w->dev));
    kp_status st = kp__writer_frame(w, s, src, frame);
    /* a refused frame (wrong size, order) changes nothing; a failed encode stops */
    if (st != KP_OK && st != KP_ERR_MISMATCH && st != KP_ERR_INVALID_ARG) w->failed = true;
    return st;
}

const char *kp__video_writer_encoder(kp_video_writer_t w) {
    return w->encoder[0] ? w->encoder : "";
}

kp_status kp__video_writer_finish(kp_video_writer_t w) {
    kp_status st = KP_OK;
    if (w->enc && w->header && !w->failed) {
        st = kp__writer_encode(w, NULL);
        int e = av_write_trailer(w->oc);
        if (st == KP_OK && e < 0) st = kp__av_error(e, KP_ERR_IO, "%s: cannot finish", w->path);
    }
    if (w->oc && w->opened) avio_closep(&w->oc->pb);
    avformat_free_context(w->oc);
    avcodec_free_context(&w->enc);
    av_frame_free(&w->frame);
    av_frame_free(&w->deep);
    av_packet_free(&w->pkt);
    av_buffer_unref(&w->buf);
    if (w->host && kp_allocator_free(w->pinned, w->host) != KP_OK) kp_clear_error();
    kp__free(w);
    return st;
}
