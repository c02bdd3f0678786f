/* Reading video files: demux through libavformat, then NVDEC (nvdec.c)
 * where it decodes, else libavcodec in software.
 *
 * The software path decodes on FFmpeg's threads (frame and slice), copies
 * each picture into one of a ring of pinned buffers at the reader's pitch,
 * and uploads it on the caller's stream: one host copy and one upload per
 * frame. A buffer is refilled only once its upload has finished, so the
 * host decodes the next frame while the device takes the last. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <libavutil/pixdesc.h>

#include "ffmpeg-impl.h"

/* --- software decode ------------------------------------------------------------------- */
static kp_status kp__sw_open(kp_video_reader_t r) {
    const AVCodecParameters *par = r->st->codecpar;
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return kp__error(KP_ERR_UNSUPPORTED, "%s: codec %s: this FFmpeg has no decoder for it",
                         r->path, avcodec_get_name(par->codec_id));
    if (!(r->dec = avcodec_alloc_context3(codec)) || !(r->frame = av_frame_alloc()))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a decoder", r->path);
    int e = avcodec_parameters_to_context(r->dec, par);
    if (e < 0) return kp__av_error(e, KP_ERR_PARSE, "%s: the stream's parameters", r->path);
    r->dec->thread_count = r->cfg.threads;
    /* A session of a parallel reader decodes on slice threads only: frame
     * threads report an error frames later, and a range must know whether
     * it came from a picture before its start (expected, ignored) or after
     * (the file's). The sessions give the parallelism. */
    r->dec->thread_type =
        r->cfg.parallel == KP__PAR_SESSION ? FF_THREAD_SLICE : FF_THREAD_FRAME | FF_THREAD_SLICE;
    r->dec->pkt_timebase = r->st->time_base;
    /* a damaged bitstream is an error, not a concealed picture */
    r->dec->err_recognition |= AV_EF_EXPLODE;
    if ((e = avcodec_open2(r->dec, codec, NULL)) < 0)
        return kp__av_error(e, KP_ERR_UNSUPPORTED, "%s: cannot open the %s decoder", r->path,
                            codec->name);
    KP_CHECK(kp_device_allocator(r->dev, KP_ALLOCATOR_PINNED, &r->pinned));
    for (int i = 0; i < KP__SW_RING; i++) KP_CHECK(kp_event_create(r->dev, &r->ev[i]));
    snprintf(r->info.decoder, sizeof r->info.decoder, "libavcodec (%s)", codec->name);
    r->info.format = r->cfg.format == KP_PIXEL_NV12 ? KP_PIXEL_NV12 : KP_PIXEL_I420;
    return KP_OK;
}

/* Copies rows of `width` bytes from a plane with `src_pitch` into one with
 * `dst_pitch`. */
static void kp__copy_plane(uint8_t *dst, int64_t dst_pitch, const uint8_t *src, int src_pitch,
                           int64_t width, int64_t rows) {
    for (int64_t y = 0; y < rows; y++)
        memcpy(dst + y * dst_pitch, src + y * (int64_t)src_pitch, (size_t)width);
}

static kp_status kp__sw_next(kp_video_reader_t r, kp_stream_t s, void *dst, kp_video_frame *vf,
                             bool *eos) {
    for (;;) {
        if (r->range.ended) {
            *eos = true;
            return KP_OK;
        }
        int e = avcodec_receive_frame(r->dec, r->frame);
        if (e == 0 && r->range.on) { /* a frame outside the range is neither copied nor sent */
            int what = KP__RANGE_KEEP;
            kp_status st = kp__range_frame(r, r->frame->best_effort_timestamp, &what);
            if (st != KP_OK || what != KP__RANGE_KEEP) av_frame_unref(r->frame);
            KP_CHECK(st);
            if (what != KP__RANGE_KEEP) continue;
        }
        if (e == 0) break;
        if (e == AVERROR_EOF) {
            *eos = true;
            return KP_OK;
        }
        /* Before a range's own key frame (an open GOP's, reached from the
         * key frame before), the pictures shown before that one refer to
         * a group never decoded here: their errors are expected, and they
         * are dropped anyway. */
        const bool lenient = r->range.on && !r->range.have_start;
        if (e != AVERROR(EAGAIN) && !lenient)
            return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream: decoding frame %llu",
                                r->path, (unsigned long long)r->next);
        kp_status st = kp__demux_next(r);
        if (st == KP_ERR_NOT_FOUND) {
            e = avcodec_send_packet(r->dec, NULL); /* drain the delayed frames */
            if (e < 0 && e != AVERROR_EOF)
                return kp__av_error(e, KP_ERR_PARSE, "%s: draining the decoder", r->path);
            continue;
        }
        KP_CHECK(st);
        e = avcodec_send_packet(r->dec, r->pkt);
        av_packet_unref(r->pkt);
        if (e < 0 && e != AVERROR(EAGAIN) && !lenient)
            return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream at packet %llu", r->path,
                                (unsigned long long)r->packets - 1);
    }
    AVFrame *fr = r->frame;
    kp_status st = KP_OK;
    if (fr->format != AV_PIX_FMT_YUV420P && fr->format != AV_PIX_FMT_YUVJ420P)
        st = kp__error(KP_ERR_UNSUPPORTED,
                       "%s: pixel format %s: kpipe reads 8-bit 4:2:0 (yuv420p, yuvj420p)", r->path,
                       av_get_pix_fmt_name(fr->format) ? av_get_pix_fmt_name(fr->format) : "?");
    else
        st = kp__video_size_check(r->path, r->next, fr->width, fr->height, r->info.max_width,
                                  r->info.max_height);
    if (st != KP_OK) {
        av_frame_unref(fr);
        return st;
    }
    size_t k = (size_t)(r->next % KP__SW_RING);
    if (!r->stage[k]) { /* made on first use, zeroed: the pitch's padding is defined */
        st = kp_allocator_alloc(r->pinned, r->info.frame_bytes, NULL, &r->stage[k]);
        if (st == KP_OK) memset(r->stage[k], 0, r->info.frame_bytes);
    }
    if (st == KP_OK && r->pending[k]) { /* its upload, KP__SW_RING frames ago, must be done */
        st = kp_event_sync(r->ev[k]);
        r->pending[k] = false;
    }
    if (st != KP_OK) {
        av_frame_unref(fr);
        return st;
    }
    const int64_t w = fr->width, h = fr->height, p = r->info.pitch;
    uint8_t *b = r->stage[k];
    kp__copy_plane(b, p, fr->data[0], fr->linesize[0], w, h);
    if (r->info.format == KP_PIXEL_NV12) { /* U and V interleaved as they are copied */
        for (int64_t y = 0; y < h / 2; y++) {
            uint8_t *row = b + p * h + y * p;
            const uint8_t *u = fr->data[1] + y * fr->linesize[1],
                          *v = fr->data[2] + y * fr->linesize[2];
            for (int64_t x = 0; x < w / 2; x++) {
                row[2 * x] = u[x];
                row[2 * x + 1] = v[x];
            }
        }
    } else {
        kp__copy_plane(b + p * h, p / 2, fr->data[1], fr->linesize[1], w / 2, h / 2);
        kp__copy_plane(b + p * h + p / 2 * (h / 2), p / 2, fr->data[2], fr->linesize[2], w / 2,
                       h / 2);
    }
    int64_t pts = fr->best_effort_timestamp;
    bool full = fr->format == AV_PIX_FMT_YUVJ420P || fr->color_range == AVCOL_RANGE_JPEG;
    av_frame_unref(fr);
    KP_CHECK(kp_memcpy_async(s, dst, b, (size_t)(p * h / 2 * 3)));
    KP_CHECK(kp_event_record(r->ev[k], s));
    r->pending[k] = true;
    r->next++;
    *vf = (kp_video_frame){.format = r->info.format,
                           .width = (int32_t)w,
                           .height = (int32_t)h,
                           .pitch = p,
                           .pts = pts == AV_NOPTS_VALUE ? KP_VIDEO_NO_PTS : pts,
                           .time_base = {r->info.time_base[0], r->info.time_base[1]},
                           .rate = {r->info.rate[0], r->info.rate[1]},
                           .full_range = full};
    return KP_OK;
}

/* --- the reader ---------------------------------------------------------------------- */
void kp__video_reader_free(kp_video_reader_t r) {
    if (r->nv) kp__nvdec_close(r->nv);
    for (int i = 0; i < KP__SW_RING; i++) {
        if (r->pending[i] && kp_event_sync(r->ev[i]) != KP_OK) kp_clear_error();
        kp_event_destroy(r->ev[i]);
        if (r->stage[i] && kp_allocator_free(r->pinned, r->stage[i]) != KP_OK) kp_clear_error();
    }
    av_frame_free(&r->frame);
    avcodec_free_context(&r->dec);
    av_packet_free(&r->pkt);
    avformat_close_input(&r->fmt);
    kp__free(r);
}

/* Takes the stream's description into r->info. */
static kp_status kp__reader_describe(kp_video_reader_t r) {
    const AVCodecParameters *par = r->st->codecpar;
    kp_video_reader_info *in = &r->info;
    if (par->width <= 0 || par->height <= 0)
        return kp__error(KP_ERR_PARSE, "%s: the video stream gives no frame size", r->path);
    if (par->width % 2 || par->height % 2 || par->width > KP_VIDEO_MAX_SIDE ||
        par->height > KP_VIDEO_MAX_SIDE)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: frames of %dx%d: kpipe reads even sizes up to %dx%d", r->path,
                         par->width, par->height, KP_VIDEO_MAX_SIDE, KP_VIDEO_MAX_SIDE);
    in->width = par->width;
    in->height = par->height;
    in->max_width = r->cfg.max_width ? r->cfg.max_width : par->width;
    in->max_height = r->cfg.max_height ? r->cfg.max_height : par->height;
    if (in->width > in->max_width || in->height > in->max_height)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: frames of %dx%d, beyond max_width x max_height %dx%d", r->path,
                         (int)in->width, (int)in->height, (int)in->max_width, (int)in->max_height);
    in->pitch = r->cfg.pitch ? r->cfg.pitch : in->max_width;
    if (in->pitch < in->width)
        return kp__error(KP_ERR_INVALID_ARG, "pitch %lld is below the width %d",
                         (long long)in->pitch, (int)in->width);
    KP_CHECK(kp__video_frame_bytes(in->pitch, in->max_height, &in->frame_bytes));
    in->time_base[0] = r->st->time_base.num;
    in->time_base[1] = r->st->time_base.den;
    AVRational fr = r->st->avg_frame_rate.num ? r->st->avg_frame_rate : r->st->r_frame_rate;
    if (fr.num > 0 && fr.den > 0) {
        in->rate[0] = fr.num;
        in->rate[1] = fr.den;
    }
    in->frames = r->st->nb_frames > 0 ? r->st->nb_frames : 0;
    snprintf(in->codec, sizeof in->codec, "%s", avcodec_get_name(par->codec_id));
    r->full_range = par->color_range == AVCOL_RANGE_JPEG;
    return KP_OK;
}

/* NVDEC when the configuration, the device and the codec allow it. */
static kp_status kp__reader_pick(kp_video_reader_t r) {
    enum AVCodecID id = r->st->codecpar->codec_id;
    const char *why = NULL;
    if (r->cfg.decoder == KP_VIDEO_DECODE_SOFTWARE) return kp__sw_open(r);
    if (r->cfg.format == KP_PIXEL_I420) {
        snprintf(r->info.fallback, sizeof r->info.fallback, "I420 asked for: NVDEC gives NV12");
        return kp__sw_open(r);
    }
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(r->dev, &caps));
    /* NVDEC's pictures are CUDA memory, which only a device that both has
     * the engine and speaks CUDA can take */
    if (!caps.video_decode || !caps.native_api || strcmp(caps.native_api, "cuda") != 0)
        why = "NVDEC decodes for cuda devices only";
    else if (id != AV_CODEC_ID_H264 && id != AV_CODEC_ID_HEVC)
        why = "kpipe decodes H.264 and HEVC on NVDEC";
    if (why) {
        if (r->cfg.decoder == KP_VIDEO_DECODE_NVDEC)
            return kp__error(KP_ERR_UNSUPPORTED, "%s: %s (the stream is %s, the device %s)",
                             r->path, why, r->info.codec, kp_device_name(r->dev));
        snprintf(r->info.fallback, sizeof r->info.fallback, "%s", why);
        return kp__sw_open(r);
    }
    kp_status st = kp__nvdec_open(r);
    if (st == KP_OK || r->cfg.decoder == KP_VIDEO_DECODE_NVDEC) return st;
    snprintf(r->info.fallback, sizeof r->info.fallback, "%s", kp_last_error());
    kp_clear_error();
    if (r->nv) {
        kp__nvdec_close(r->nv);
        r->nv = NULL;
    }
    return kp__sw_open(r);
}

/* Whether an MP4's header already says all a reader needs of its video
 * stream (codec, size, parameter sets, frame rate), so that probing the
 * stream, which decodes its first frames in software (about 75 ms for a
 * 1080p clip on 16 cores, most of a short clip's open), can be skipped.
 * Other containers are probed. */
static bool kp__header_complete(const AVFormatContext *fc) {
    if (!fc->iformat || strncmp(fc->iformat->name, "mov,mp4", 7) != 0 ||
        (fc->ctx_flags & AVFMTCTX_NOHEADER))
        return false;
    int videos = 0;
    for (unsigned i = 0; i < fc->nb_streams; i++) {
        const AVStream *st = fc->streams[i];
        const AVCodecParameters *p = st->codecpar;
        if (p->codec_type != AVMEDIA_TYPE_VIDEO) continue;
        if (p->codec_id == AV_CODEC_ID_NONE || p->width <= 0 || p->height <= 0 ||
            p->extradata_size <= 0 || st->avg_frame_rate.num <= 0 || st->avg_frame_rate.den <= 0)
            return false;
        videos++;
    }
    return videos == 1;
}

kp_status kp__video_reader_make(kp_device_t dev, const char *path,
                                const kp_video_reader_config *cfg, kp_video_reader_t *out) {
    kp__av_log_capture();
    kp_video_reader_t r = kp__calloc(1, sizeof *r);
    if (!r) return kp__error(KP_ERR_OUT_OF_MEMORY, "video reader: no memory");
    r->dev = dev;
    r->cfg = *cfg;
    memcpy(r->path, path, strlen(path) + 1);
    if (cfg->options) {
        memcpy(r->options, cfg->options, strlen(cfg->options) + 1); /* checked: it fits */
        r->cfg.options = r->options;
    }
    AVDictionary *opts = NULL;
    kp_status ost = kp__av_options(r->cfg.options, &opts);
    if (ost != KP_OK) {
        kp__free(r);
        return ost;
    }
    kp_status st = KP_OK;
    if (!(r->fmt = avformat_alloc_context())) {
        av_dict_free(&opts);
        kp__free(r);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "video reader: no memory");
    }
    r->fmt->interrupt_callback.callback = kp__reader_interrupt;
    r->fmt->interrupt_callback.opaque = r;
    kp__reader_arm(r);
    int e = avformat_open_input(&r->fmt, path, NULL, &opts); /* frees fmt on failure */
    kp_status left = kp__av_options_left(&opts, path);
    if (e >= 0 && left != KP_OK)
        st = left;
    else if (e < 0)
        st = kp__reader_wait_error(r, e,
                                   e == AVERROR(ENOENT) || e == AVERROR(EACCES) ||
                                           e == AVERROR(EISDIR) || e == AVERROR(ECONNREFUSED) ||
                                           e == AVERROR(EIO)
                                       ? KP_ERR_IO
                                       : KP_ERR_PARSE,
                                   "cannot open as a video file");
    if (st == KP_OK && !kp__header_complete(r->fmt) &&
        (e = avformat_find_stream_info(r->fmt, NULL)) < 0)
        st = kp__reader_wait_error(r, e, KP_ERR_PARSE, "cannot read its streams");
    if (st == KP_OK) {
        e = av_find_best_stream(r->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
        if (e < 0) st = kp__error(KP_ERR_PARSE, "%s: no video stream", path);
    }
    if (st == KP_OK) {
        r->st = r->fmt->streams[e];
        for (unsigned i = 0; i < r->fmt->nb_streams; i++)
            if ((int)i != e) r->fmt->streams[i]->discard = AVDISCARD_ALL;
        st = kp__reader_describe(r);
    }
    if (st == KP_OK && !(r->pkt = av_packet_alloc()))
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "video reader: no memory");
    if (st == KP_OK && r->cfg.parallel <= 1) st = kp__reader_pick(r); /* else parallel.c's */
    if (st != KP_OK) {
        kp__video_reader_free(r);
        return st;
    }
    *out = r;
    return KP_OK;
}

kp_status kp__video_reader_info(kp_video_reader_t r, kp_video_reader_info *out) {
    *out = r->info;
    return KP_OK;
}

kp_status kp__video_reader_check(kp_video_reader_t r, kp_stream_t s, size_t capacity) {
    if (r->failed) return kp__error(r->fail_status, "%s", r->fail_detail);
    if (capacity < r->info.frame_bytes)
        return kp__error(KP_ERR_INVALID_ARG, "%s: a frame needs %zu bytes; %zu given", r->path,
                         r->info.frame_bytes, capacity);
    if (kp_stream_device(s) != r->dev)
        return kp__error(KP_ERR_INVALID_ARG, "the stream is on %s, the reader on %s",
                         kp_device_name(kp_stream_device(s)), kp_device_name(r->dev));
    return KP_OK;
}

void kp__video_reader_fail(kp_video_reader_t r, kp_status st) {
    r->failed = true; /* the decoder's state is unknown now: it stays stopped */
    r->fail_status = st;
    snprintf(r->fail_detail, sizeof r->fail_detail, "%s", kp_last_error());
}

kp_status kp__video_reader_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                                kp_video_frame *frame, bool *eos) {
    *eos = false;
    KP_CHECK(kp__video_reader_check(r, s, capacity));
    kp_status st =
        r->nv ? kp__nvdec_next(r, s, dst, frame, eos) : kp__sw_next(r, s, dst, frame, eos);
    if (st != KP_OK) kp__video_reader_fail(r, st);
    return st;
}

kp_status kp__reader_seek(kp_video_reader_t r, int64_t ts, int64_t start_ts, int64_t end_ts) {
    av_packet_unref(r->pkt);
    r->held = r->demux_eof = false;
    r->range = (struct kp__range){0};
    if (r->nv) KP_CHECK(kp__nvdec_reset(r->nv));
    if (r->dec) avcodec_flush_buffers(r->dec);
    /* A demuxer may seek by presentation time (MP4 shifts by the B-frame
     * delay) and land a key frame early: the packets up to the one at `ts`
     * are demuxed and dropped, never decoded. */
    int e = av_seek_frame(r->fmt, r->st->index, ts, AVSEEK_FLAG_BACKWARD);
    if (e < 0) return kp__av_error(e, KP_ERR_PARSE, "%s: seeking to %lld", r->path, (long long)ts);
    for (;;) {
        kp_status st = kp__demux_next(r);
        if (st == KP_ERR_NOT_FOUND)
            return kp__error(KP_ERR_PARSE, "%s: no packet at %lld, a key frame in the index",
                             r->path, (long long)ts);
        KP_CHECK(st);
        const int64_t at = kp__pkt_stamp(r->pkt);
        if (r->pkt->flags & AV_PKT_FLAG_KEY) {
            if (at == ts) break;
            if (at > ts || at == AV_NOPTS_VALUE)
                return kp__error(KP_ERR_PARSE,
                                 "%s: seeking to the key frame at %lld landed at %lld, after it",
                                 r->path, (long long)ts, (long long)at);
        }
        av_packet_unref(r->pkt);
    }
    r->held = true;
    r->range = (struct kp__range){.on = true, .start_ts = start_ts, .end_ts = end_ts};
    return KP_OK;
}
