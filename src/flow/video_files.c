/* The flows' "video" source and sink: a kp_video_reader_t and a
 * kp_video_writer_t (src/video) as stages. Frames travel as u8
 * [h*3/2, pitch] with kp_frame.video saying what they are: NV12 from NVDEC,
 * I420 from software decode, with the container's timestamps, which the
 * sink writes back, so frames a drop policy removed leave gaps. */
#include <stdio.h>
#include <string.h>

#include "flow-impl.h"

typedef struct kp__video_src {
    kp_video_reader_t r;
    kp_video_reader_info info;
    int64_t frames; /* 0: all */
    kp_tensor_desc desc;
} kp__video_src;

static void kp__video_src_free(void *user) {
    kp__video_src *s = user;
    if (!s) return;
    kp_video_reader_close(s->r);
    kp__free(s);
}

static kp_status kp__video_src_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__video_src *s = user;
    if (s->frames && f->seq >= (uint64_t)s->frames) {
        *eos = true;
        return KP_OK;
    }
    KP_CHECK(kp_video_reader_next(s->r, c->stream, f->data, f->capacity, &f->video, eos));
    f->desc = s->desc;
    f->bytes = s->info.frame_bytes;
    return KP_OK;
}

kp_status kp__stage_video_source(kp_device_t dev, const char *path,
                                 const kp_video_reader_config *cfg, int64_t frames,
                                 kp__stage_made *out, kp_video_reader_info *info) {
    if (frames < 0)
        return kp__error(KP_ERR_INVALID_ARG, "frames: %lld is negative", (long long)frames);
    kp__video_src *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "video source: no memory");
    s->frames = frames;
    kp_status st = kp_video_reader_open(dev, path, cfg, &s->r);
    if (st == KP_OK) st = kp_video_reader_get_info(s->r, &s->info);
    if (st == KP_OK) {
        int64_t shape[2] = {s->info.height / 2 * 3, s->info.pitch};
        st = kp_desc_init(&s->desc, KP_U8, 2, shape, NULL);
    }
    if (st != KP_OK) {
        kp__video_src_free(s);
        return st;
    }
    if (info) *info = s->info;
    *out = (kp__stage_made){kp__video_src_fn, NULL, s, kp__video_src_free, s->info.frame_bytes, 1,
                            NULL};
    return KP_OK;
}

typedef struct kp__video_sink {
    kp_video_writer_t w;
    kp_pixel_format format; /* KP_PIXEL_NONE: the frames' own */
} kp__video_sink;

static void kp__video_sink_free(void *user) {
    kp__video_sink *s = user;
    if (!s) return;
    if (s->w && kp_video_writer_close(s->w) != KP_OK) kp_clear_error();
    kp__free(s);
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
    return kp_video_writer_write(s->w, c->stream, f->data, f->bytes, &v);
}

/* The end of the stream drains the encoder and finishes the file, so an
 * error there (a full disk) is the flow's. */
static kp_status kp__video_sink_end(void *user, const kp_stage_ctx *c, kp_status why) {
    kp__video_sink *s = user;
    if (why != KP_OK || !s->w) return KP_OK;
    kp_video_writer_t w = s->w;
    s->w = NULL;
    return kp_video_writer_close(w);
}

kp_status kp__stage_video_sink(kp_device_t dev, const char *path,
                               const kp_video_writer_config *cfg, kp_pixel_format format,
                               kp__stage_made *out) {
    kp__video_sink *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "video sink: no memory");
    s->format = format;
    kp_status st = kp_video_writer_open(dev, path, cfg, &s->w);
    if (st != KP_OK) {
        kp__free(s);
        return st;
    }
    *out = (kp__stage_made){kp__video_sink_fn, NULL, s, kp__video_sink_free, 0, 1,
                            kp__video_sink_end};
    return KP_OK;
}
