/* Reading video files: demux through libavformat (demux.c), and a decoder
 * from the table below: NVDEC (nvdec.c) where the configuration, the
 * device and the codec allow it, else libavcodec in software
 * (software.c). The reader hands on the pictures its decoder gives, and
 * lets go those a range drops (range.c), before they are copied. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <libavutil/pixdesc.h>

#include "ffmpeg-impl.h"

/* The decoders, in the order an automatic choice tries them. */
static const kp__video_decoder_i *const kp__decoders[] = {&kp__nvdec_decoder,
                                                          &kp__software_decoder};
#define KP__N_DECODERS (sizeof kp__decoders / sizeof kp__decoders[0])

/* --- the reader ---------------------------------------------------------------------- */
void kp__video_reader_free(kp_video_reader_t r) {
    if (r->index) { /* seek.c's */
        kp__free(r->index->pts);
        kp__free(r->index->keys);
        kp__free(r->index);
    }
    if (r->decoder) r->decoder->close(r->decoder_ctx);
    av_packet_free(&r->pkt);
    avformat_close_input(&r->fmt);
    kp__free(r);
}

/* Bits of the stream's luma samples as its parameters say them: the
 * pixel format where probing found one, else the MP4 header's decoder
 * configuration (H.264's avcC: profiles below High 10 are 8-bit; HEVC's
 * hvcC: bitDepthLumaMinus8 in byte 17). 0: not said (probing finds it). */
static int kp__stream_depth(const AVCodecParameters *par) {
    if (par->format != AV_PIX_FMT_NONE) {
        const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(par->format);
        return d && d->comp[0].depth > 8 ? d->comp[0].depth : 8;
    }
    const uint8_t *x = par->extradata;
    if (!x || par->extradata_size < 2 || x[0] != 1) return 0;
    if (par->codec_id == AV_CODEC_ID_H264) return x[1] < 110 ? 8 : 0;
    if (par->codec_id == AV_CODEC_ID_HEVC && par->extradata_size >= 23) return 8 + (x[17] & 7);
    return 0;
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
    /* streams of more than 8 bits come as P016, unless NV12 or I420 is
       asked for by name: then each sample is rounded to 8 bits (software
       decode). P016 asked for an 8-bit stream is refused by name. */
    r->depth = kp__stream_depth(par);
    if (r->depth == 0) r->depth = 8; /* not said even by probing: frames say (software.c) */
    in->depth = r->depth;
    if (r->cfg.format == KP_PIXEL_P016 && r->depth <= 8)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: its samples are 8-bit (%s) and format P016 was asked for: kpipe "
                         "gives 8-bit streams as I420 or NV12, and deeper ones as P016 (16-bit "
                         "samples)",
                         r->path,
                         av_get_pix_fmt_name(par->format) ? av_get_pix_fmt_name(par->format)
                                                          : avcodec_get_name(par->codec_id));
    r->wide = r->depth > 8 && (r->cfg.format == KP_PIXEL_NONE || r->cfg.format == KP_PIXEL_P016);
    const int64_t row = (int64_t)in->max_width * (r->wide ? 2 : 1);
    in->pitch = r->cfg.pitch ? r->cfg.pitch : row;
    if (in->pitch < row)
        return kp__error(KP_ERR_INVALID_ARG, "pitch %lld is below a row of %d %d-bit samples",
                         (long long)in->pitch, (int)in->max_width, r->depth);
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
    /* the container's word; the bitstream's, where it says one, replaces it
       as frames decode (software.c, nvdec.c) */
    r->matrix = kp__video_matrix_of(par->color_space);
    return KP_OK;
}

int32_t kp__video_matrix_of(int colour_space) {
    switch (colour_space) {
    case AVCOL_SPC_BT709: return KP_VIDEO_MATRIX_BT709;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M: return KP_VIDEO_MATRIX_BT601;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return KP_VIDEO_MATRIX_BT2020;
    default: return KP_VIDEO_MATRIX_UNKNOWN;
    }
}

/* The first decoder of the table that the configuration names (any, for
 * KP_VIDEO_DECODE_AUTO), that does not refuse the stream on this device,
 * and that opens. A decoder asked for by name refuses or fails with a named
 * error; one passed over in an automatic choice leaves its reason in
 * r->info.fallback. */
static kp_status kp__reader_pick(kp_video_reader_t r) {
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    if (r->cfg.decoder != KP_VIDEO_DECODE_SOFTWARE) KP_CHECK(kp_device_query_caps(r->dev, &caps));
    for (size_t i = 0; i < KP__N_DECODERS; i++) {
        const kp__video_decoder_i *d = kp__decoders[i];
        const bool asked = r->cfg.decoder == d->kind;
        if (r->cfg.decoder != KP_VIDEO_DECODE_AUTO && !asked) continue;
        const char *why = d->refuses ? d->refuses(r, &caps) : NULL;
        if (why && asked)
            return kp__error(KP_ERR_UNSUPPORTED, "%s: %s (the stream is %s, the device %s)",
                             r->path, why, r->info.codec, kp_device_name(r->dev));
        if (why) {
            snprintf(r->info.fallback, sizeof r->info.fallback, "%s", why);
            continue;
        }
        kp_status st = d->open(r, &r->decoder_ctx);
        if (st == KP_OK) {
            r->decoder = d;
            return KP_OK;
        }
        if (asked || i + 1 == KP__N_DECODERS) return st;
        snprintf(r->info.fallback, sizeof r->info.fallback, "%s", kp_last_error());
        kp_clear_error();
    }
    return kp__error(KP_ERR_UNSUPPORTED, "%s: no decoder takes the stream (%s)", r->path,
                     r->info.fallback);
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
            p->extradata_size <= 0 || st->avg_frame_rate.num <= 0 || st->avg_frame_rate.den <= 0 ||
            kp__stream_depth(p) == 0)
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
    const uint64_t t0 = kp__mono_ns();
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
    if (st == KP_OK && KP_LOG_ENABLED(KP_LOG_DEBUG))
        kp__log(KP_LOG_DEBUG, "%s: container in %.2f ms (%s)", path,
                (double)(kp__mono_ns() - t0) / 1e6,
                kp__header_complete(r->fmt) ? "header complete, not probed" : "probed");
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

/* The decoder's next picture that r's range keeps (every one when no
 * range is on) into dst; a picture the range drops is let go uncopied. */
static kp_status kp__reader_frame(kp_video_reader_t r, kp_stream_t s, void *dst,
                                  kp_video_frame *frame, bool *eos) {
    const kp__video_decoder_i *d = r->decoder;
    for (;;) {
        if (r->range.ended) {
            *eos = true;
            return KP_OK;
        }
        int64_t pts = AV_NOPTS_VALUE;
        KP_CHECK(d->next(r->decoder_ctx, s, &pts, eos));
        if (*eos) return KP_OK;
        int what = KP__RANGE_KEEP;
        if (r->range.on) {
            kp_status st = kp__range_frame(r, pts, &what);
            if ((st != KP_OK || what != KP__RANGE_KEEP) && d->drop) d->drop(r->decoder_ctx);
            KP_CHECK(st);
        }
        if (what == KP__RANGE_KEEP) break;
    }
    KP_CHECK(d->output(r->decoder_ctx, s, dst, frame));
    r->next++;
    return KP_OK;
}

kp_status kp__video_reader_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                                kp_video_frame *frame, bool *eos) {
    *eos = false;
    KP_CHECK(kp__video_reader_check(r, s, capacity));
    kp_status st = kp__reader_frame(r, s, dst, frame, eos);
    if (st != KP_OK) kp__video_reader_fail(r, st);
    return st;
}

kp_status kp__reader_seek(kp_video_reader_t r, int64_t ts, int64_t start_ts, int64_t end_ts) {
    av_packet_unref(r->pkt);
    r->held = r->demux_eof = false;
    r->range = (struct kp__range){0};
    if (r->decoder) KP_CHECK(r->decoder->reset(r->decoder_ctx));
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
    r->range = (struct kp__range){.on = true, .start_ts = start_ts, .end_ts = end_ts,
                                  .skip_pts = INT64_MIN};
    return KP_OK;
}
