/* The flows' video stages: raw video as YUV4MPEG2 (.y4m, 8-bit 4:2:0),
 * which ffmpeg writes and plays.
 *
 *   YUV4MPEG2 W1280 H720 F30:1 Ip A1:1 C420jpeg\n      the stream header
 *   FRAME\n <w*h Y bytes> <w*h/4 U> <w*h/4 V>         each frame
 *
 * A frame travels as u8 [h*3/2, w] (kp_frame.desc). The source reads each
 * frame into one of a ring of pinned buffers and copies it to the device on
 * its stream; a buffer is refilled only once its copy has finished, so the
 * host reads the next frame while the device takes the last. The sink
 * copies each frame back through pinned memory and writes it, packed into
 * planar I420 first where the frame is NV12 or has a pitch past its width;
 * it makes its file at the first frame (a flow that fails before leaves
 * none). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages-impl.h"
#include "pattern-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__testsrc_cuda; /* pattern.cu */
#define KP__TESTSRC_CUDA {"cuda", &kp__testsrc_cuda},
#else
#define KP__TESTSRC_CUDA
#endif

#define KP__Y4M_RING 3     /* pinned upload buffers */
#define KP__Y4M_LINE 256   /* longest header or frame line */
#define KP__Y4M_SIDE 16384 /* widest and tallest frame */

/* The frame descriptor of a picture of height h with rows of w bytes
 * (its width, or its pitch): u8 [h*3/2, w], in either layout. */
static kp_status kp__i420_desc(int64_t w, int64_t h, kp_tensor_desc *d) {
    int64_t shape[2] = {h / 2 * 3, w};
    return kp_desc_init(d, KP_U8, 2, shape, NULL);
}

static kp_status kp__check_side(const char *what, int64_t w, int64_t h) {
    if (w < 2 || h < 2 || w > KP__Y4M_SIDE || h > KP__Y4M_SIDE || w % 2 || h % 2)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: a frame of %lldx%lld (width and height even, 2 .. %d)", what,
                         (long long)w, (long long)h, KP__Y4M_SIDE);
    return KP_OK;
}

/* --- the header -------------------------------------------------------------------- */
/* A positive decimal number at *p (at most 9 digits); advances *p. */
static bool kp__y4m_number(const char **p, int64_t *out) {
    int64_t v = 0;
    int n = 0;
    while (**p >= '0' && **p <= '9' && n < 9) v = v * 10 + (*(*p)++ - '0'), n++;
    *out = v;
    return n > 0 && v > 0 && !(**p >= '0' && **p <= '9');
}

/* Reads one line of at most KP__Y4M_LINE - 1 bytes (the newline dropped);
 * KP_ERR_NOT_FOUND at end of file before any byte. */
static kp_status kp__y4m_line(FILE *f, const char *path, char *line) {
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 == KP__Y4M_LINE)
            return kp__error(KP_ERR_PARSE, "%s: a header line longer than %d bytes", path,
                             KP__Y4M_LINE - 1);
        if (c == '\0') return kp__error(KP_ERR_PARSE, "%s: a NUL byte in a header line", path);
        line[n++] = (char)c;
    }
    line[n] = '\0';
    if (c == EOF) {
        if (ferror(f)) return kp__error(KP_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
        return n ? kp__error(KP_ERR_PARSE, "%s: the file ends inside a header line", path)
                 : KP_ERR_NOT_FOUND;
    }
    return KP_OK;
}

typedef struct kp__y4m_info {
    int64_t width, height;
    int32_t rate[2];         /* the F tag; 0/0 without one */
    char tags[KP__Y4M_LINE]; /* F, I, A, C and X as read, for the sink to write back */
} kp__y4m_info;

/* Parses the stream header. Only 8-bit 4:2:0 is taken; other C tags are
 * named in the error. */
static kp_status kp__y4m_header(FILE *f, const char *path, kp__y4m_info *info) {
    char line[KP__Y4M_LINE];
    kp_status st = kp__y4m_line(f, path, line);
    if (st == KP_ERR_NOT_FOUND) return kp__error(KP_ERR_PARSE, "%s: an empty file", path);
    KP_CHECK(st);
    if (strncmp(line, "YUV4MPEG2", 9) != 0 || (line[9] != ' ' && line[9] != '\0'))
        return kp__error(KP_ERR_PARSE, "%s: not a YUV4MPEG2 file (no \"YUV4MPEG2 \" header)", path);
    memset(info, 0, sizeof *info);
    size_t used = 0;
    for (const char *p = line + 9; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        const char *tok = p;
        size_t len = strcspn(p, " ");
        p += len;
        const char *v = tok + 1;
        switch (*tok) {
        case 'W':
        case 'H': {
            int64_t x = 0;
            if (!kp__y4m_number(&v, &x) || v != p)
                return kp__error(KP_ERR_PARSE, "%s: bad %c tag \"%.*s\"", path, *tok, (int)len,
                                 tok);
            *(*tok == 'W' ? &info->width : &info->height) = x;
            continue;
        }
        case 'F':
        case 'A': {
            int64_t a = 0, b = 0;
            bool zero_ok = *tok == 'A' && v[0] == '0' && v[1] == ':' && v[2] == '0' && v + 3 == p;
            if (!zero_ok &&
                (!kp__y4m_number(&v, &a) || *v++ != ':' || !kp__y4m_number(&v, &b) || v != p))
                return kp__error(KP_ERR_PARSE, "%s: bad %c tag \"%.*s\" (n:d)", path, *tok,
                                 (int)len, tok);
            if (*tok == 'F' && a <= INT32_MAX && b <= INT32_MAX) {
                info->rate[0] = (int32_t)a;
                info->rate[1] = (int32_t)b;
            }
            break;
        }
        case 'I':
            if (len != 2 || !strchr("ptbm", tok[1]))
                return kp__error(KP_ERR_PARSE, "%s: bad interlacing tag \"%.*s\"", path, (int)len,
                                 tok);
            /* Im gives each frame its own I tag on its FRAME line, which a
             * flow's frames do not carry: written back as Im with bare
             * FRAME lines, the file would not be valid YUV4MPEG2 */
            if (tok[1] == 'm')
                return kp__error(KP_ERR_UNSUPPORTED,
                                 "%s: mixed interlacing (Im, an I tag on every FRAME line) is "
                                 "not supported: kpipe reads Ip, It or Ib",
                                 path);
            break;
        case 'C':
            if (!((len == 4 && !strncmp(tok, "C420", 4)) ||
                  (len == 8 && !strncmp(tok, "C420jpeg", 8)) ||
                  (len == 9 && !strncmp(tok, "C420paldv", 9)) ||
                  (len == 9 && !strncmp(tok, "C420mpeg2", 9))))
                return kp__error(KP_ERR_UNSUPPORTED,
                                 "%s: colour space \"%.*s\": kpipe reads 8-bit 4:2:0 (C420, "
                                 "C420jpeg, C420mpeg2, C420paldv)",
                                 path, (int)len, tok);
            break;
        case 'X': break; /* extensions go to the sink as they came */
        default:
            return kp__error(KP_ERR_PARSE, "%s: unknown header tag \"%.*s\"", path, (int)len, tok);
        }
        int n = snprintf(info->tags + used, sizeof info->tags - used, " %.*s", (int)len, tok);
        used += (size_t)n < sizeof info->tags - used ? (size_t)n : 0;
    }
    if (!info->width || !info->height)
        return kp__error(KP_ERR_PARSE, "%s: the header gives no %s", path,
                         info->width ? "height (H)" : "width (W)");
    return kp__check_side(path, info->width, info->height);
}

/* --- the y4m source ---------------------------------------------------------------- */
typedef struct kp__y4m_src {
    kp_device_t dev;
    FILE *f;
    char path[1024];
    kp__y4m_info info;
    long data_start; /* the first frame's offset, for looping */
    int64_t frames;  /* 0: the whole file */
    bool loop;
    size_t frame_bytes;
    kp_tensor_desc desc;
    kp_allocator_t pinned;
    void *stage[KP__Y4M_RING];
    kp_event_t ev[KP__Y4M_RING];
    bool pending[KP__Y4M_RING];
    uint64_t next; /* ring position */
} kp__y4m_src;

static void kp__y4m_src_free(void *user) {
    kp__y4m_src *s = user;
    if (!s) return;
    for (int i = 0; i < KP__Y4M_RING; i++) {
        if (s->pending[i] && kp_event_sync(s->ev[i]) != KP_OK) kp_clear_error();
        kp_event_destroy(s->ev[i]);
        if (s->stage[i] && kp_allocator_free(s->pinned, s->stage[i]) != KP_OK) kp_clear_error();
    }
    if (s->f) fclose(s->f);
    kp__free(s);
}

/* Reads the next frame's bytes into buf; KP_ERR_NOT_FOUND at the end. */
static kp_status kp__y4m_frame(kp__y4m_src *s, uint64_t seq, void *buf) {
    char line[KP__Y4M_LINE];
    kp_status st = kp__y4m_line(s->f, s->path, line);
    if (st == KP_ERR_NOT_FOUND && s->loop && seq > 0) {
        if (fseek(s->f, s->data_start, SEEK_SET) != 0)
            return kp__error(KP_ERR_IO, "%s: cannot rewind: %s", s->path, strerror(errno));
        st = kp__y4m_line(s->f, s->path, line);
    }
    if (st == KP_ERR_NOT_FOUND) return st;
    if (st != KP_OK) return kp__error_prefix(st, "frame %llu", (unsigned long long)seq);
    if (strncmp(line, "FRAME", 5) != 0 || (line[5] != '\0' && line[5] != ' '))
        return kp__error(KP_ERR_PARSE, "%s: frame %llu: expected \"FRAME\", found \"%.16s\"",
                         s->path, (unsigned long long)seq, line);
    size_t got = fread(buf, 1, s->frame_bytes, s->f);
    if (got != s->frame_bytes)
        return kp__error(ferror(s->f) ? KP_ERR_IO : KP_ERR_PARSE,
                         "%s: frame %llu is cut short (%zu of %zu bytes)", s->path,
                         (unsigned long long)seq, got, s->frame_bytes);
    return KP_OK;
}

static kp_status kp__y4m_src_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__y4m_src *s = user;
    if (s->frames && f->seq >= (uint64_t)s->frames) {
        *eos = true;
        return KP_OK;
    }
    size_t k = (size_t)(s->next % KP__Y4M_RING);
    if (!s->stage[k]) /* made on first use: a flow that ends early holds less */
        KP_CHECK(kp_allocator_alloc(s->pinned, s->frame_bytes, NULL, &s->stage[k]));
    if (s->pending[k]) { /* its copy, KP__Y4M_RING frames ago, must be done */
        KP_CHECK(kp_event_sync(s->ev[k]));
        s->pending[k] = false;
    }
    kp_status st = kp__y4m_frame(s, f->seq, s->stage[k]);
    if (st == KP_ERR_NOT_FOUND) {
        *eos = true;
        return KP_OK;
    }
    KP_CHECK(st);
    KP_CHECK(kp_memcpy_async(c->stream, f->data, s->stage[k], s->frame_bytes));
    KP_CHECK(kp_event_record(s->ev[k], c->stream));
    s->pending[k] = true;
    s->next++;
    f->desc = s->desc;
    f->bytes = s->frame_bytes;
    f->video = (kp_video_frame){.format = KP_PIXEL_I420,
                                .width = (int32_t)s->info.width,
                                .height = (int32_t)s->info.height,
                                .pitch = s->info.width,
                                .pts = KP_VIDEO_NO_PTS,
                                .rate = {s->info.rate[0], s->info.rate[1]}};
    return KP_OK;
}

kp_status kp__stage_y4m_source(kp_device_t dev, const char *path, int64_t frames, bool loop,
                               kp__stage_made *out, char *tags, size_t tags_len) {
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "y4m source: a device is required");
    if (!path || strlen(path) >= sizeof((kp__y4m_src *)0)->path)
        return kp__error(KP_ERR_INVALID_ARG, "y4m source: a path of at most 1023 characters");
    if (frames < 0)
        return kp__error(KP_ERR_INVALID_ARG, "frames: %lld is negative", (long long)frames);
    kp__y4m_src *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "y4m source: no memory");
    s->dev = dev;
    s->frames = frames;
    s->loop = loop;
    memcpy(s->path, path, strlen(path) + 1);
    kp_status st = KP_OK;
    if (!(s->f = fopen(path, "rb")))
        st = kp__error(KP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (st == KP_OK) st = kp__y4m_header(s->f, path, &s->info);
    if (st == KP_OK && (s->data_start = ftell(s->f)) < 0)
        st = kp__error(KP_ERR_IO, "%s: cannot tell its position", path);
    if (st == KP_OK) st = kp__i420_desc(s->info.width, s->info.height, &s->desc);
    s->frame_bytes = (size_t)(s->info.width * s->info.height / 2 * 3);
    if (st == KP_OK) st = kp_device_allocator(dev, KP_ALLOCATOR_PINNED, &s->pinned);
    for (int i = 0; i < KP__Y4M_RING && st == KP_OK; i++) st = kp_event_create(dev, &s->ev[i]);
    if (st != KP_OK) {
        kp__y4m_src_free(s);
        return st;
    }
    snprintf(tags, tags_len, "%s", s->info.tags);
    *out = (kp__stage_made){.fn = kp__y4m_src_fn,
                            .user = s,
                            .free_fn = kp__y4m_src_free,
                            .frame_bytes = s->frame_bytes,
                            .max_batch = 1};
    return KP_OK;
}

/* --- the testsrc source -------------------------------------------------------------- */
static void kp__testsrc_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                             uint64_t n) {
    const kp__testsrc_frame *f = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)(f->pitch * f->pic.height / 2 * 3), grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) f->pic.out[i] = kp__testsrc_byte(f, (int64_t)i);
}

static const kp_kernel kp__testsrc_kernel = {
    "flow_testsrc",
    sizeof(kp__testsrc_frame),
    {{"host", &(const kp_host_kernel){kp__testsrc_host}}, KP__TESTSRC_CUDA}};

typedef struct kp__testsrc {
    int64_t frames, width, height, pitch;
    kp_pixel_format format;
    kp_tensor_desc desc;
} kp__testsrc;

static kp_status kp__testsrc_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__testsrc *s = user;
    if (s->frames && f->seq >= (uint64_t)s->frames) {
        *eos = true;
        return KP_OK;
    }
    kp__testsrc_frame p = {
        {f->data, s->width, s->height, f->seq}, s->pitch, s->format == KP_PIXEL_NV12,
        s->format == KP_PIXEL_P016};
    uint64_t bytes = (uint64_t)(s->pitch * s->height / 2 * 3), blocks = (bytes + 1023) / 1024;
    kp_launch l = {.kernel = &kp__testsrc_kernel,
                   .grid = {(uint32_t)(blocks < 8192 ? blocks : 8192), 1, 1},
                   .block = {256, 1, 1},
                   .params = &p};
    f->desc = s->desc;
    f->bytes = (size_t)bytes;
    f->video = (kp_video_frame){.format = s->format,
                                .width = (int32_t)s->width,
                                .height = (int32_t)s->height,
                                .pitch = s->pitch,
                                .pts = (int64_t)f->seq,
                                .time_base = {1, 30},
                                .rate = {30, 1}};
    return kp_launch_kernel(c->stream, &l);
}

kp_status kp__stage_testsrc(kp_device_t dev, int64_t frames, int64_t width, int64_t height,
                            kp_pixel_format format, int64_t pitch, kp__stage_made *out) {
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "testsrc: a device is required");
    KP_CHECK(kp__check_side("testsrc", width, height));
    if (frames < 0)
        return kp__error(KP_ERR_INVALID_ARG, "frames: %lld is negative", (long long)frames);
    if (format == KP_PIXEL_NONE) format = KP_PIXEL_I420;
    if (format != KP_PIXEL_I420 && format != KP_PIXEL_NV12 && format != KP_PIXEL_P016)
        return kp__error(KP_ERR_INVALID_ARG,
                         "testsrc: pixel format %d (%s; it makes I420, NV12 or P016)",
                         (int)format, kp_pixel_format_name(format));
    const int64_t row = width * kp_pixel_format_sample_bytes(format);
    if (!pitch) pitch = row;
    if (pitch < row || pitch % 2 || pitch > 2 * KP__Y4M_SIDE)
        return kp__error(
            KP_ERR_INVALID_ARG,
            "testsrc: pitch %lld for width %lld (%s: even, at least %lld bytes, at most %d)",
            (long long)pitch, (long long)width, kp_pixel_format_name(format), (long long)row,
            2 * KP__Y4M_SIDE);
    kp__testsrc *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "testsrc: no memory");
    *s = (kp__testsrc){
        .frames = frames, .width = width, .height = height, .pitch = pitch, .format = format};
    kp_status st = kp__i420_desc(pitch, height, &s->desc); /* u8 [h*3/2, pitch] either way */
    if (st != KP_OK) {
        kp__free(s);
        return st;
    }
    *out = (kp__stage_made){.fn = kp__testsrc_fn,
                            .user = s,
                            .free_fn = kp__free,
                            .frame_bytes = (size_t)(pitch * height / 2 * 3),
                            .max_batch = 1};
    return KP_OK;
}

/* --- the y4m sink -------------------------------------------------------------------- */
typedef struct kp__y4m_sink {
    kp_device_t dev;
    FILE *f;
    char path[1024];
    char tags[KP__Y4M_LINE];
    int64_t width, height;  /* of the first frame; 0 before it */
    kp_pixel_format format; /* what the frames hold, over their own label; NONE: their own */
    kp_allocator_t pinned;
    void *host;
    uint8_t *packed; /* a frame packed into planar I420, made with the stage */
    size_t bytes;
} kp__y4m_sink;

static void kp__y4m_sink_free(void *user) {
    kp__y4m_sink *s = user;
    if (!s) return;
    if (s->host && kp_allocator_free(s->pinned, s->host) != KP_OK) kp_clear_error();
    if (s->f) fclose(s->f);
    kp__free(s->packed);
    kp__free(s);
}

/* What a frame holds for the sink: its size, pitch and layout. A frame
 * described as video gives them (the sink's own format, where set, over its
 * label), and its shape must agree; a frame that is not (a synthetic or
 * remote source's, a stage of a program's) is taken as packed I420 by its
 * shape, u8 [h*3/2, w], as YUV4MPEG2 itself stores it. */
static kp_status kp__y4m_picture(const kp__y4m_sink *s, const kp_frame *f, kp_video_frame *pic) {
    const kp_tensor_desc *d = &f->desc;
    kp_pixel_format fmt = f->video.format;
    if (fmt != KP_PIXEL_NONE && s->format != KP_PIXEL_NONE) fmt = s->format;
    if (fmt != KP_PIXEL_NONE && fmt != KP_PIXEL_I420 && fmt != KP_PIXEL_NV12)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "frame %llu is %s: the y4m sink takes 8-bit I420 and NV12 frames (a "
                         "video source with \"format\": \"i420\" rounds a deeper stream to 8 "
                         "bits; the video sink writes P016 at 10 bits)",
                         (unsigned long long)f->seq, kp__pixel_str(fmt));
    const bool planes = d->dtype == KP_U8 && d->ndim == 2 && kp_desc_is_contiguous(d) &&
                        d->offset == 0 && d->shape[0] % 3 == 0;
    const int64_t pitch = planes ? d->shape[1] : 0, h = planes ? d->shape[0] / 3 * 2 : 0;
    const int64_t w = fmt == KP_PIXEL_NONE ? pitch : f->video.width;
    bool ok = planes && (fmt == KP_PIXEL_NONE || f->video.height == h) && pitch >= w &&
              pitch % 2 == 0 && (size_t)(pitch * h / 2 * 3) == f->bytes && f->bytes <= s->bytes;
    if (ok && kp__check_side("y4m sink", w, h) != KP_OK) {
        kp_clear_error();
        ok = false;
    }
    char buf[96];
    if (!ok && fmt == KP_PIXEL_NONE)
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu: %s (%zu bytes) is not an I420 picture (u8 [h*3/2, w], "
                         "w and h even)",
                         (unsigned long long)f->seq, kp_desc_str(d, buf, sizeof buf), f->bytes);
    if (!ok)
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu: %s (%zu bytes) is not the %dx%d %s picture it is said to "
                         "be (u8 [h*3/2, pitch], the pitch even and at least the width)",
                         (unsigned long long)f->seq, kp_desc_str(d, buf, sizeof buf), f->bytes,
                         (int)f->video.width, (int)f->video.height, kp__pixel_str(fmt));
    *pic = (kp_video_frame){.format = fmt == KP_PIXEL_NONE ? KP_PIXEL_I420 : fmt,
                            .width = (int32_t)w,
                            .height = (int32_t)h,
                            .pitch = pitch,
                            .pts = KP_VIDEO_NO_PTS};
    return KP_OK;
}

/* A w x h picture of any pitch, I420 or NV12, packed into planar I420 with
 * no padding: what a YUV4MPEG2 frame holds. */
static void kp__y4m_pack(const kp_video_frame *pic, const uint8_t *src, uint8_t *dst) {
    const int64_t w = pic->width, h = pic->height, p = pic->pitch, cw = w / 2, ch = h / 2;
    for (int64_t y = 0; y < h; y++) memcpy(dst + y * w, src + y * p, (size_t)w);
    const uint8_t *c = src + p * h;
    uint8_t *u = dst + w * h, *v = u + cw * ch;
    for (int64_t y = 0; y < ch; y++) {
        if (pic->format == KP_PIXEL_NV12) {
            const uint8_t *row = c + y * p;
            for (int64_t x = 0; x < cw; x++) {
                u[y * cw + x] = row[2 * x];
                v[y * cw + x] = row[2 * x + 1];
            }
        } else {
            memcpy(u + y * cw, c + y * (p / 2), (size_t)cw);
            memcpy(v + y * cw, c + (p / 2) * ch + y * (p / 2), (size_t)cw);
        }
    }
}

static kp_status kp__y4m_sink_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__y4m_sink *s = user;
    kp_video_frame pic = {0}; /* filled by kp__y4m_picture, which gcc cannot see */
    KP_CHECK(kp__y4m_picture(s, f, &pic));
    const int64_t w = pic.width, h = pic.height;
    if (!s->width) { /* the file and the buffer are made at the first frame */
        KP_CHECK(kp_allocator_alloc(s->pinned, s->bytes ? s->bytes : 1, NULL, &s->host));
        if (!(s->f = fopen(s->path, "wb")))
            return kp__error(KP_ERR_IO, "%s: cannot write: %s", s->path, strerror(errno));
        s->width = w;
        s->height = h;
        if (fprintf(s->f, "YUV4MPEG2 W%lld H%lld%s\n", (long long)w, (long long)h, s->tags) < 0)
            return kp__error(KP_ERR_IO, "%s: cannot write: %s", s->path, strerror(errno));
    } else if (w != s->width || h != s->height) {
        return kp__error(KP_ERR_MISMATCH, "frame %llu is %lldx%lld but the stream is %lldx%lld",
                         (unsigned long long)f->seq, (long long)w, (long long)h,
                         (long long)s->width, (long long)s->height);
    }
    KP_CHECK(kp_memcpy_async(c->stream, s->host, f->data, f->bytes));
    KP_CHECK(kp_stream_sync(c->stream));
    /* packed I420 is written as it is; NV12, or a pitch past the width, is
     * packed first, on the host, which is waiting for the file anyway */
    const void *out = s->host;
    if (pic.format != KP_PIXEL_I420 || pic.pitch != w) {
        kp__y4m_pack(&pic, s->host, s->packed);
        out = s->packed;
    }
    const size_t n = (size_t)(w * h / 2 * 3);
    if (fputs("FRAME\n", s->f) < 0 || fwrite(out, 1, n, s->f) != n || fflush(s->f) != 0)
        return kp__error(KP_ERR_IO, "%s: cannot write frame %llu: %s", s->path,
                         (unsigned long long)f->seq, strerror(errno));
    return KP_OK;
}

kp_status kp__stage_y4m_sink(kp_device_t dev, const char *path, size_t max_bytes, const char *tags,
                             kp_pixel_format format, kp__stage_made *out) {
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "y4m sink: a device is required");
    if (!path || strlen(path) >= sizeof((kp__y4m_sink *)0)->path)
        return kp__error(KP_ERR_INVALID_ARG, "y4m sink: a path of at most 1023 characters");
    if (format != KP_PIXEL_NONE && format != KP_PIXEL_I420 && format != KP_PIXEL_NV12)
        return kp__error(KP_ERR_INVALID_ARG,
                         "y4m sink: pixel format %d (%s; it writes I420 or NV12)", (int)format,
                         kp_pixel_format_name(format));
    kp__y4m_sink *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "y4m sink: no memory");
    s->dev = dev;
    s->bytes = max_bytes;
    s->format = format;
    memcpy(s->path, path, strlen(path) + 1);
    snprintf(s->tags, sizeof s->tags, "%s", tags && *tags ? tags : " F30:1 Ip A1:1 C420jpeg");
    kp_status st = kp_device_allocator(dev, KP_ALLOCATOR_PINNED, &s->pinned);
    /* a packed frame is never larger than the frame it came from */
    if (st == KP_OK && !(s->packed = kp__malloc(max_bytes ? max_bytes : 1)))
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "y4m sink: no memory for a frame of %zu bytes",
                       max_bytes);
    if (st != KP_OK) {
        kp__y4m_sink_free(s);
        return st;
    }
    *out = (kp__stage_made){
        .fn = kp__y4m_sink_fn, .user = s, .free_fn = kp__y4m_sink_free, .max_batch = 1};
    return KP_OK;
}
