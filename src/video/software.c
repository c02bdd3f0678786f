/* The software decoder: libavcodec, behind the reader's decoder interface
 * (ffmpeg-impl.h).
 *
 * It decodes on FFmpeg's threads (frame and slice), copies each picture
 * into one of a ring of pinned buffers at the reader's pitch, and uploads
 * it on the caller's stream: one host copy and one upload per frame. A
 * buffer is refilled only once its upload has finished, so the host
 * decodes the next frame while the device takes the last. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <libavutil/pixdesc.h>

#include "ffmpeg-impl.h"

#define KP__SW_RING 3 /* pinned upload buffers */

typedef struct kp__swdec {
    kp_video_reader_t r;
    AVCodecContext *dec;
    AVFrame *frame; /* the picture held between next and output */
    kp_allocator_t pinned;
    void *stage[KP__SW_RING];
    kp_event_t ev[KP__SW_RING];
    bool pending[KP__SW_RING];
    bool slices; /* decoding on slice threads only */
} kp__swdec;

static void kp__sw_close(void *ctx) {
    kp__swdec *d = ctx;
    for (int i = 0; i < KP__SW_RING; i++) {
        if (d->pending[i] && kp_event_sync(d->ev[i]) != KP_OK) kp_clear_error();
        kp_event_destroy(d->ev[i]);
        if (d->stage[i] && kp_allocator_free(d->pinned, d->stage[i]) != KP_OK) kp_clear_error();
    }
    av_frame_free(&d->frame);
    avcodec_free_context(&d->dec);
    kp__free(d);
}

/* The codec context for r's stream, opened: threads as configured, and a
 * damaged bitstream an error rather than a concealed picture. */
static kp_status kp__sw_codec(kp__swdec *d, const AVCodec *codec) {
    kp_video_reader_t r = d->r;
    int e = avcodec_parameters_to_context(d->dec, r->st->codecpar);
    if (e < 0) return kp__av_error(e, KP_ERR_PARSE, "%s: the stream's parameters", r->path);
    d->dec->thread_count = r->cfg.threads;
    /* A session of a parallel reader decodes on slice threads only: frame
     * threads report an error frames later, and a range must know whether
     * it came from a picture before its start (expected, ignored) or after
     * (the file's). The sessions give the parallelism. */
    /* So does a reader that seeks (seek.c): frame threads lose track of
     * references after a start at an open GOP's key frame. */
    d->slices = r->cfg.parallel == KP__PAR_SESSION || r->seeks;
    d->dec->thread_type = d->slices ? FF_THREAD_SLICE : FF_THREAD_FRAME | FF_THREAD_SLICE;
    /* Both start at key frames that are not IDRs, where FFmpeg's H.264
     * decoder holds back pictures until one "recovers" (its recovery point
     * SEI), and at the end of the stream drops those decoded before the
     * first recovered picture was shown: the last frames of a range that
     * ends with the file. Every picture comes out with this flag, those
     * not recovered marked corrupt, and kp__sw_next lets those go: what a
     * decoder run from the file's start gives. */
    if (d->slices) d->dec->flags |= AV_CODEC_FLAG_OUTPUT_CORRUPT;
    d->dec->pkt_timebase = r->st->time_base;
    d->dec->err_recognition |= AV_EF_EXPLODE;
    if ((e = avcodec_open2(d->dec, codec, NULL)) < 0)
        return kp__av_error(e, KP_ERR_UNSUPPORTED, "%s: cannot open the %s decoder", r->path,
                            codec->name);
    return KP_OK;
}

static kp_status kp__sw_setup(kp__swdec *d) {
    kp_video_reader_t r = d->r;
    const AVCodecParameters *par = r->st->codecpar;
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return kp__error(KP_ERR_UNSUPPORTED, "%s: codec %s: this FFmpeg has no decoder for it",
                         r->path, avcodec_get_name(par->codec_id));
    if (!(d->dec = avcodec_alloc_context3(codec)) || !(d->frame = av_frame_alloc()))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a decoder", r->path);
    KP_CHECK(kp__sw_codec(d, codec));
    KP_CHECK(kp_device_allocator(r->dev, KP_ALLOCATOR_PINNED, &d->pinned));
    for (int i = 0; i < KP__SW_RING; i++) KP_CHECK(kp_event_create(r->dev, &d->ev[i]));
    snprintf(r->info.decoder, sizeof r->info.decoder, "libavcodec (%s)", codec->name);
    r->info.format = r->wide                           ? KP_PIXEL_P016
                     : r->cfg.format == KP_PIXEL_NV12 ? KP_PIXEL_NV12
                                                      : KP_PIXEL_I420;
    return KP_OK;
}

static kp_status kp__sw_open(kp_video_reader_t r, void **ctx) {
    kp__swdec *d = kp__calloc(1, sizeof *d);
    if (!d) return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a decoder", r->path);
    d->r = r;
    kp_status st = kp__sw_setup(d);
    if (st != KP_OK) {
        kp__sw_close(d);
        return st;
    }
    *ctx = d;
    return KP_OK;
}

/* The reader's next packet into the decoder, or the end of the stream
 * (which drains the delayed frames). */
static kp_status kp__sw_send(kp__swdec *d, bool lenient) {
    kp_video_reader_t r = d->r;
    kp_status st = kp__demux_next(r);
    int e;
    if (st == KP_ERR_NOT_FOUND) {
        e = avcodec_send_packet(d->dec, NULL);
        if (e < 0 && e != AVERROR_EOF)
            return kp__av_error(e, KP_ERR_PARSE, "%s: draining the decoder", r->path);
        return KP_OK;
    }
    KP_CHECK(st);
    e = avcodec_send_packet(d->dec, r->pkt);
    av_packet_unref(r->pkt);
    if (e < 0 && e != AVERROR(EAGAIN) && !lenient)
        return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream at packet %llu", r->path,
                            (unsigned long long)r->packets - 1);
    return KP_OK;
}

static kp_status kp__sw_next(void *ctx, kp_stream_t s, int64_t *pts, bool *eos) {
    kp__swdec *d = ctx;
    kp_video_reader_t r = d->r;
    (void)s; /* the upload's stream is output's */
    for (;;) {
        int e = avcodec_receive_frame(d->dec, d->frame);
        if (e == 0 && d->slices && (d->frame->flags & AV_FRAME_FLAG_CORRUPT)) {
            av_frame_unref(d->frame); /* not recovered: what the flag above lets out */
            continue;
        }
        if (e == 0) {
            *pts = d->frame->best_effort_timestamp;
            return KP_OK;
        }
        if (e == AVERROR_EOF) {
            *eos = true;
            return KP_OK;
        }
        const bool lenient = kp__range_lenient(r);
        if (e != AVERROR(EAGAIN) && !lenient)
            return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream: decoding frame %llu",
                                r->path, (unsigned long long)r->next);
        KP_CHECK(kp__sw_send(d, lenient));
    }
}

static void kp__sw_drop(void *ctx) {
    kp__swdec *d = ctx;
    av_frame_unref(d->frame);
}

/* Bits of a sample of a planar 4:2:0 YUV picture in `format`, its samples
 * 8-bit bytes or little-endian 16-bit words (yuv420p, yuvj420p,
 * yuv420p10le, yuv420p12le, ...); 0 for any other layout. */
static int kp__sw_depth(int format) {
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(format);
    if (!d || d->nb_components != 3 || d->log2_chroma_w != 1 || d->log2_chroma_h != 1 ||
        (d->flags & (AV_PIX_FMT_FLAG_BE | AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL |
                     AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL)) ||
        !(d->flags & AV_PIX_FMT_FLAG_PLANAR))
        return 0;
    const int depth = d->comp[0].depth;
    for (int c = 0; c < 3; c++)
        if (d->comp[c].plane != c || d->comp[c].shift || d->comp[c].depth != depth ||
            d->comp[c].step != (depth > 8 ? 2 : 1))
            return 0;
    return depth <= 16 ? depth : 0;
}

/* Whether the held picture is one kpipe reads: 4:2:0 of the stream's kind
 * (8-bit, or deeper as P016) within the reader's maximum size. */
static kp_status kp__sw_check(const kp__swdec *d) {
    const kp_video_reader_t r = d->r;
    const AVFrame *fr = d->frame;
    const int depth = kp__sw_depth(fr->format);
    if (!depth || (depth > 8) != (r->depth > 8))
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: frame %llu's pixel format is %s: kpipe reads 4:2:0 of %s (the "
                         "stream's first frames)",
                         r->path, (unsigned long long)r->next,
                         av_get_pix_fmt_name(fr->format) ? av_get_pix_fmt_name(fr->format) : "?",
                         r->depth > 8 ? "9 to 16 bits" : "8 bits (yuv420p, yuvj420p)");
    return kp__video_size_check(r->path, r->next, fr->width, fr->height, r->info.max_width,
                                r->info.max_height);
}

/* Ring buffer k, ready to fill: made on first use (zeroed, so that the
 * pitch's padding is defined), or its upload of KP__SW_RING frames ago
 * finished. */
static kp_status kp__sw_stage(kp__swdec *d, size_t k) {
    if (!d->stage[k]) {
        KP_CHECK(kp_allocator_alloc(d->pinned, d->r->info.frame_bytes, NULL, &d->stage[k]));
        memset(d->stage[k], 0, d->r->info.frame_bytes);
    }
    if (d->pending[k]) {
        d->pending[k] = false;
        KP_CHECK(kp_event_sync(d->ev[k]));
    }
    return KP_OK;
}

/* Copies rows of `width` bytes from a plane with `src_pitch` into one with
 * `dst_pitch`. */
static void kp__copy_plane(uint8_t *dst, int64_t dst_pitch, const uint8_t *src, int src_pitch,
                           int64_t width, int64_t rows) {
    for (int64_t y = 0; y < rows; y++)
        memcpy(dst + y * dst_pitch, src + y * (int64_t)src_pitch, (size_t)width);
}

/* A picture of 9 to 16 bits into b at pitch p as P016: each sample moved
 * to the word's high bits, U and V interleaved as they are copied. */
static void kp__sw_copy16(const AVFrame *fr, uint8_t *b, int64_t p) {
    const int64_t w = fr->width, h = fr->height;
    const int up = 16 - kp__sw_depth(fr->format);
    for (int64_t y = 0; y < h; y++) {
        uint16_t *row = (uint16_t *)(b + y * p);
        const uint16_t *s = (const uint16_t *)(fr->data[0] + y * fr->linesize[0]);
        for (int64_t x = 0; x < w; x++) row[x] = (uint16_t)(s[x] << up);
    }
    for (int64_t y = 0; y < h / 2; y++) {
        uint16_t *row = (uint16_t *)(b + p * h + y * p);
        const uint16_t *u = (const uint16_t *)(fr->data[1] + y * fr->linesize[1]),
                       *v = (const uint16_t *)(fr->data[2] + y * fr->linesize[2]);
        for (int64_t x = 0; x < w / 2; x++) {
            row[2 * x] = (uint16_t)(u[x] << up);
            row[2 * x + 1] = (uint16_t)(v[x] << up);
        }
    }
}

/* A sample of `down` + 8 bits rounded to 8. */
static inline uint8_t kp__narrow(uint16_t v, int down) {
    const unsigned n = ((unsigned)v + (1u << (down - 1))) >> down;
    return (uint8_t)(n > 255 ? 255 : n);
}

/* A picture of 9 to 16 bits into b at pitch p as 8-bit NV12 or I420, each
 * sample rounded: what NV12 or I420 asked for by name gives. */
static void kp__sw_copy_narrow(const AVFrame *fr, kp_pixel_format format, uint8_t *b, int64_t p) {
    const int64_t w = fr->width, h = fr->height, cw = w / 2, ch = h / 2;
    const int down = kp__sw_depth(fr->format) - 8;
    for (int64_t y = 0; y < h; y++) {
        const uint16_t *s = (const uint16_t *)(fr->data[0] + y * fr->linesize[0]);
        for (int64_t x = 0; x < w; x++) b[y * p + x] = kp__narrow(s[x], down);
    }
    uint8_t *c = b + p * h;
    for (int64_t y = 0; y < ch; y++) {
        const uint16_t *u = (const uint16_t *)(fr->data[1] + y * fr->linesize[1]),
                       *v = (const uint16_t *)(fr->data[2] + y * fr->linesize[2]);
        if (format == KP_PIXEL_NV12) { /* U and V interleaved */
            uint8_t *row = c + y * p;
            for (int64_t x = 0; x < cw; x++) {
                row[2 * x] = kp__narrow(u[x], down);
                row[2 * x + 1] = kp__narrow(v[x], down);
            }
        } else { /* the U plane, then the V plane, at half the pitch */
            uint8_t *ur = c + y * (p / 2), *vr = c + (p / 2) * ch + y * (p / 2);
            for (int64_t x = 0; x < cw; x++) {
                ur[x] = kp__narrow(u[x], down);
                vr[x] = kp__narrow(v[x], down);
            }
        }
    }
}

/* The picture into b at pitch p, as I420, NV12 (U and V interleaved as
 * they are copied) or P016. */
static void kp__sw_copy(const AVFrame *fr, kp_pixel_format format, uint8_t *b, int64_t p) {
    const int64_t w = fr->width, h = fr->height;
    if (format == KP_PIXEL_P016) {
        kp__sw_copy16(fr, b, p);
        return;
    }
    if (kp__sw_depth(fr->format) > 8) {
        kp__sw_copy_narrow(fr, format, b, p);
        return;
    }
    kp__copy_plane(b, p, fr->data[0], fr->linesize[0], w, h);
    if (format == KP_PIXEL_NV12) {
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
}

static kp_status kp__sw_output(void *ctx, kp_stream_t s, void *dst, kp_video_frame *vf) {
    kp__swdec *d = ctx;
    kp_video_reader_t r = d->r;
    AVFrame *fr = d->frame;
    const size_t k = (size_t)(r->next % KP__SW_RING);
    kp_status st = kp__sw_check(d);
    if (st == KP_OK) st = kp__sw_stage(d, k);
    if (st != KP_OK) {
        av_frame_unref(fr);
        return st;
    }
    const int64_t w = fr->width, h = fr->height, p = r->info.pitch;
    uint8_t *b = d->stage[k];
    kp__sw_copy(fr, r->info.format, b, p);
    int64_t pts = fr->best_effort_timestamp;
    bool full = fr->format == AV_PIX_FMT_YUVJ420P || fr->color_range == AVCOL_RANGE_JPEG;
    int32_t m = kp__video_matrix_of(fr->colorspace);
    if (m != KP_VIDEO_MATRIX_UNKNOWN) r->matrix = m; /* the bitstream says */
    av_frame_unref(fr);
    KP_CHECK(kp_memcpy_async(s, dst, b, (size_t)(p * h / 2 * 3)));
    KP_CHECK(kp_event_record(d->ev[k], s));
    d->pending[k] = true;
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

/* Emptied for a new start; a reader's first seek also remakes the codec
 * context on slice threads (kp__sw_codec says why). */
static kp_status kp__sw_reset(void *ctx) {
    kp__swdec *d = ctx;
    if (!d->r->seeks || d->slices) {
        avcodec_flush_buffers(d->dec);
        return KP_OK;
    }
    const AVCodec *codec = d->dec->codec;
    avcodec_free_context(&d->dec);
    if (!(d->dec = avcodec_alloc_context3(codec)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory for a decoder", d->r->path);
    return kp__sw_codec(d, codec);
}

const kp__video_decoder_i kp__software_decoder = {
    .name = "libavcodec",
    .kind = KP_VIDEO_DECODE_SOFTWARE,
    .refuses = NULL, /* decodes whatever this FFmpeg has a decoder for, anywhere */
    .open = kp__sw_open,
    .next = kp__sw_next,
    .output = kp__sw_output,
    .drop = kp__sw_drop,
    .reset = kp__sw_reset,
    .close = kp__sw_close,
};
