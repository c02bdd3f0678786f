/* Video files in and out: containers through FFmpeg's libavformat, decode
 * on NVDEC (cuda, H.264 and HEVC) or in software (libavcodec), encode with
 * NVENC where the device has one or libx264 through libavcodec. A reader
 * and a writer usable on their own; the flow's "video" source and sink
 * wrap them (docs/video.md).
 *
 *   kp_video_reader_t r;
 *   kp_video_reader_open(dev, "in.mp4", NULL, &r);
 *   kp_video_reader_info info;  kp_video_reader_get_info(r, &info);
 *   // a device buffer of info.frame_bytes, then for each frame:
 *   kp_video_frame vf;  bool eos;
 *   kp_video_reader_next(r, stream, buf, info.frame_bytes, &vf, &eos);
 *   kp_video_writer_write(w, stream, buf, info.frame_bytes, &vf);
 *
 * A frame lives in device memory as 4:2:0 with a pitch P (bytes per luma
 * row, even, >= the width's bytes): `height` rows of luma, then NV12's
 * `height/2` rows of interleaved U,V of P bytes, or I420's U then V planes
 * of `height/2` rows of P/2 bytes. Either way P * height * 3 / 2 bytes,
 * which a flow describes as u8 [height*3/2, P]. A stream of more than 8
 * bits (HEVC Main10, H.264 High 10) comes as P016: NV12's layout with
 * 16-bit samples, each value in the high bits (kpipe/module.h); it decodes
 * in software, and the writer encodes it at 10 bits.
 *
 * Built with KP_VIDEO (FFmpeg found); without it every call checks its
 * arguments and returns KP_ERR_UNSUPPORTED. */
#ifndef KPIPE_VIDEO_H
#define KPIPE_VIDEO_H

#include "kpipe/device.h"
#include "kpipe/module.h" /* kp_pixel_format: the layouts, shared with modules' ports */

#ifdef __cplusplus
extern "C" {
#endif

/* What a video frame is, with the timestamps carried from demux to mux. */
typedef struct kp_video_frame {
    kp_pixel_format format;
    int32_t width, height; /* even, 2 .. KP_VIDEO_MAX_SIDE */
    int64_t pitch;         /* bytes per luma row */
    int64_t pts;           /* in time_base units; KP_VIDEO_NO_PTS: none */
    int32_t time_base[2];  /* numerator, denominator */
    int32_t rate[2];       /* frames per second as n/d; 0/0: unknown */
    bool full_range;       /* samples span 0..255 (JPEG range) rather than 16..235 */
    int32_t matrix;        /* the stream's colour matrix, KP_VIDEO_MATRIX_*: 0 unknown */
} kp_video_frame;
/* The YUV <-> RGB matrices a stream may say it uses (its colour space). */
#define KP_VIDEO_MATRIX_UNKNOWN 0
#define KP_VIDEO_MATRIX_BT601 1
#define KP_VIDEO_MATRIX_BT709 2
#define KP_VIDEO_MATRIX_BT2020 3
#define KP_VIDEO_NO_PTS INT64_MIN
#define KP_VIDEO_MAX_SIDE 16384

bool kp_video_built(void); /* whether this build reads and writes video files */

/* --- reading ----------------------------------------------------------------------- */
typedef struct kp_video_reader *kp_video_reader_t;

typedef enum kp_video_decoder {
    KP_VIDEO_DECODE_AUTO = 0,     /* NVDEC where the device and codec allow, else software */
    KP_VIDEO_DECODE_NVDEC = 1,    /* NVDEC or a named error (cuda, H.264 or HEVC) */
    KP_VIDEO_DECODE_SOFTWARE = 2, /* libavcodec, frames uploaded through pinned memory */
} kp_video_decoder;

typedef struct kp_video_reader_config {
    kp_video_decoder decoder;
    int64_t pitch; /* 0: the width */
    int threads;   /* software decode threads; 0: one per core */
    /* The frames' format: KP_PIXEL_NONE, the decoder's own (NVDEC: NV12,
     * software: I420; a stream of more than 8 bits: P016); NV12 from
     * software decode interleaves the chroma as it copies (no extra pass);
     * I420 takes software decode. NV12 or I420 named for a deeper stream
     * rounds each sample to 8 bits (info.depth still says the stream's);
     * P016 for an 8-bit stream is refused by name. */
    kp_pixel_format format;
    /* Live input (udp://, srt://, rtsp:// or any URL FFmpeg reads): an open
     * or a packet that takes longer than timeout_ms fails with KP_ERR_IO
     * ("timed out"); 0: wait for ever. */
    int timeout_ms;
    /* Polled while FFmpeg waits for input: returning true stops the wait
     * with KP_ERR_STATE ("interrupted"), so a cancel reaches a blocked read.
     * NULL: never. */
    bool (*interrupt)(void *user);
    void *interrupt_user;
    /* One file on several decoder sessions at once: 0 or 1, one session;
     * N (2 .. KP_VIDEO_MAX_PARALLEL), N sessions (on NVDEC, spread over the
     * device's engines) decode the groups of pictures between the key
     * frames of the demuxer's index at once, and frames leave in display
     * order, equal to one session's, frame for frame. A file without a key
     * frame index (MPEG-TS, live input) is refused by name. It costs each
     * session a ring of device frames as long as the longest group of
     * pictures (at most 64), and one device-to-device copy per frame. */
    int parallel;
    /* The largest frames the stream may change to mid-stream (an adaptive
     * stream's renditions, a camera switching modes); 0: its first size.
     * Frames of any even size within both sides follow each other, each
     * described by its kp_video_frame; the pitch (when not given) and
     * info.frame_bytes are those of the largest. A frame beyond either
     * side is KP_ERR_UNSUPPORTED, named. On NVDEC a size change
     * reconfigures the decoder (made for the largest size) in place. */
    int32_t max_width, max_height;
    /* FFmpeg's own options for the container or the protocol, as
     * "key=value" pairs joined by '&' (KP_VIDEO_OPTIONS_MAX bytes at most):
     * an RTSP server that a camera publishes to, "rtsp_flags=listen"; RTSP
     * over TCP, "rtsp_transport=tcp". An option FFmpeg does not take there
     * is KP_ERR_INVALID_ARG, named. NULL: none. */
    const char *options;
} kp_video_reader_config;
#define KP_VIDEO_READER_CONFIG_INIT \
    {KP_VIDEO_DECODE_AUTO, 0, 0, KP_PIXEL_NONE, 0, NULL, NULL, 0, 0, 0, NULL}
#define KP_VIDEO_OPTIONS_MAX 1024
#define KP_VIDEO_MAX_PARALLEL 16

typedef struct kp_video_reader_info {
    int32_t width, height; /* the stream's header's: the first frame's, in a sound
                            * file (a frame's own size is in its kp_video_frame) */
    int64_t pitch;
    kp_pixel_format format;
    size_t frame_bytes;   /* pitch * max_height * 3 / 2 */
    int32_t max_width, max_height; /* the largest frames taken (config, or the first size) */
    int32_t time_base[2]; /* of the stream's timestamps */
    int32_t rate[2];      /* frames per second; 0/0: unknown */
    int64_t frames;       /* as the container says; 0: unknown */
    char codec[32];       /* "h264" */
    char decoder[48];     /* "nvdec" or "libavcodec" */
    char fallback[160];   /* why NVDEC was not used, when AUTO chose software */
    int32_t depth;        /* bits of a sample in the stream: 8, or 9 .. 16 (given as P016) */
} kp_video_reader_info;

/* Opens `path` (any container FFmpeg reads) for frames on `dev`; cfg NULL:
 * defaults. Named errors: KP_ERR_IO (cannot open), KP_ERR_PARSE (not a
 * container, no video stream, truncated), KP_ERR_UNSUPPORTED (codec,
 * pixel format or size kpipe does not take; NVDEC asked for and absent). */
kp_status kp_video_reader_open(kp_device_t dev, const char *path,
                               const kp_video_reader_config *cfg, kp_video_reader_t *out);
kp_status kp_video_reader_get_info(kp_video_reader_t r, kp_video_reader_info *out);
/* Decodes the next frame into dst (device memory of at least
 * info.frame_bytes), enqueued on `s`; *eos at the end (dst untouched).
 * `frame` gets its description (its own size, the reader's pitch) and
 * timestamp. A corrupt bitstream, or a frame larger than max_width x
 * max_height, is a named error. */
kp_status kp_video_reader_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                               kp_video_frame *frame, bool *eos);
void kp_video_reader_close(kp_video_reader_t r);

/* Frames by index and by time, frame-accurate (a file; not live input,
 * not a parallel reader). The first of these calls scans the file's
 * packets once (nothing decoded: milliseconds for a clip, a read of the
 * whole file for a long one).
 *   count:    the exact number of frames.
 *   seek:     the next kp_video_reader_next gives frame `index` (display
 *             order, from 0), the same frame sequential decode gives, byte
 *             for byte, B-frames and open GOPs included; reading goes on
 *             in order from there. The reader goes back to the key frame
 *             before it and decodes forward, on the decoder it holds.
 *   frame_at: the index of the frame shown at `seconds` from the first
 *             frame.
 * An index or a time out of range is KP_ERR_INVALID_ARG, naming the
 * range; a stream whose packets lack timestamps or repeat one is
 * KP_ERR_UNSUPPORTED. */
kp_status kp_video_reader_count(kp_video_reader_t r, int64_t *frames);
kp_status kp_video_reader_seek(kp_video_reader_t r, int64_t index);
kp_status kp_video_reader_frame_at(kp_video_reader_t r, double seconds, int64_t *index);

/* --- the NVDEC decoder pool -------------------------------------------------------- */
/* Making an NVDEC decoder costs tens of milliseconds (the driver makes them
 * one at a time); reconfiguring one for a new clip costs a few. A closing
 * reader gives its decoder to a pool of idle ones (one per process), and
 * an opening reader takes the smallest that fits (same device and codec,
 * made for at least the stream's coded size) and reconfigures it. Each
 * decoder is made for the common frame size at or above its stream's
 * (352x288, 640x480, 1280x720, 1920x1088, 2560x1440, 3840x2176, 4096x2304,
 * 7680x4320), so clips of nearby sizes share. An idle decoder holds its
 * device memory until taken or cut: a program cuts the pool
 * (kp_video_pool_limit(0)) before it closes the device, or
 * compute-sanitizer's memcheck reports the decoders as leaked. */
#define KP_VIDEO_POOL_DEFAULT 16 /* idle decoders kept */
#define KP_VIDEO_POOL_MAX 64
typedef struct kp_video_pool_stats {
    int idle, limit;
    uint64_t created;   /* decoders made */
    uint64_t reused;    /* streams that took a pooled decoder */
    uint64_t destroyed; /* decoders freed: over the limit, or cut */
} kp_video_pool_stats;
/* Keeps at most max_idle idle decoders (0 .. KP_VIDEO_POOL_MAX; 0: none,
 * every decoder freed at close); the idle ones over it are freed now. */
kp_status kp_video_pool_limit(int max_idle);
kp_status kp_video_pool_stats_get(kp_video_pool_stats *out);

/* --- writing ----------------------------------------------------------------------- */
typedef struct kp_video_writer *kp_video_writer_t;

typedef struct kp_video_writer_config {
    const char *codec;   /* "h264" or "hevc" (NULL: h264) */
    /* "auto" (NVENC where there is one, else libx264 or libx265), "nvenc",
     * "libx264" (H.264), "libx265" (HEVC) */
    const char *encoder;
    int64_t bitrate;     /* bits per second; 0: constant quality (crf) */
    int crf;             /* 0 .. 51; -1: 23 */
    const char *preset;  /* x264 and x265 name the same ("ultrafast" .. "veryslow"); NULL: "veryfast" */
    int bframes;         /* -1: the preset's */
    int gop;             /* frames between key frames; 0: the encoder's */
    int threads;         /* 0: one per core */
    /* Open groups of pictures: a key frame after the first is not an IDR
     * (libx264: an I picture with a recovery point SEI; libx265: a CRA),
     * and the B-frames before it in display order refer to the group
     * before (smaller files; a reader starting there skips them). */
    bool open_gop;
    /* FFmpeg's options for the container or the protocol, as the reader's
     * (publishing to an RTSP server over TCP: "rtsp_transport=tcp"). */
    const char *options;
} kp_video_writer_config;
#define KP_VIDEO_WRITER_CONFIG_INIT {NULL, NULL, 0, -1, NULL, -1, 0, 0, false, NULL}

/* Makes a writer for `path`; the container follows the extension (.mp4,
 * .mkv, .ts; MPEG-TS for a udp://, srt:// or tcp:// URL). The file is made at the first frame, whose size, format,
 * time base and rate the stream keeps. cfg NULL: defaults. */
kp_status kp_video_writer_open(kp_device_t dev, const char *path,
                               const kp_video_writer_config *cfg, kp_video_writer_t *out);
/* Encodes one frame read from src (device memory, `bytes` of it) after the
 * work on `s`. Frames without a pts are numbered from the last one. */
kp_status kp_video_writer_write(kp_video_writer_t w, kp_stream_t s, const void *src, size_t bytes,
                                const kp_video_frame *frame);
/* The encoder in use ("libx264"), once the first frame has opened it. */
const char *kp_video_writer_encoder(kp_video_writer_t w);
/* Drains the encoder and finishes the file; frees the writer either way. */
kp_status kp_video_writer_close(kp_video_writer_t w);

#ifdef __cplusplus
}
#endif
#endif
