/* What the FFmpeg-backed files of the video layer share (built with
 * KP_VIDEO): the reader's state, demux, the decoder interface, and
 * FFmpeg's messages turned into error details.
 *
 * A reader (reader.c) owns the demux (demux.c) and one decoder, chosen
 * from a table by what the caller asked for and what the device can do:
 * NVDEC (nvdec.c) or libavcodec in software (software.c). A decoder pulls
 * the packets it needs from the reader's demux and holds one decoded
 * picture at a time, which the reader either has it output or lets go:
 *
 *   open -> { next (a picture held, its pts) -> output | drop } ... -> close
 *           reset at a seek
 *
 * Ranges (range.c) and a parallel reader's sessions (parallel.c) sit on
 * top of readers: the reader asks a range whether to keep each picture a
 * decoder gives, so a picture outside it is never copied. */
#ifndef KPIPE_VIDEO_FFMPEG_IMPL_H
#define KPIPE_VIDEO_FFMPEG_IMPL_H

#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>

#include "video-impl.h"

struct kp_video_reader;

/* A decoder (the way libavcodec's codec tables work): a const table of
 * slots, one per implementation; the reader keeps its context. Every slot
 * but `refuses` and `drop` is required. */
typedef struct kp__video_decoder_i {
    const char *name;      /* "nvdec", "libavcodec" */
    kp_video_decoder kind; /* what a configuration names it by */
    /* Optional: why it cannot decode r's stream (r->st, r->info) for r's
     * configuration on a device with `caps`, for the reader's fallback
     * note; NULL when it may. Only the reader's description is set yet. */
    const char *(*refuses)(struct kp_video_reader *r, const kp_device_caps *caps);
    /* Opens on r's stream: *ctx its state; sets r->info.decoder and
     * r->info.format. On error nothing is left made. */
    kp_status (*open)(struct kp_video_reader *r, void **ctx);
    /* Decodes up to the next picture, pulling packets from the reader's
     * demux (kp__demux_next), and holds it: *pts its timestamp (AV_NOPTS_VALUE
     * when it has none); *eos instead once the stream has no more. `s` is
     * the stream its output will go on. */
    kp_status (*next)(void *ctx, kp_stream_t s, int64_t *pts, bool *eos);
    /* The held picture into dst on s, at r's pitch: *frame describes it;
     * the picture is let go either way. */
    kp_status (*output)(void *ctx, kp_stream_t s, void *dst, kp_video_frame *frame);
    /* Optional: lets the held picture go without output. */
    void (*drop)(void *ctx);
    /* Forgets what it holds of the stream (a seek); the decoder itself
     * stays. */
    kp_status (*reset)(void *ctx);
    /* Frees the context and all it holds (after output's copies are
     * done: it waits for them). */
    void (*close)(void *ctx);
} kp__video_decoder_i;
extern const kp__video_decoder_i kp__nvdec_decoder;    /* nvdec.c */
extern const kp__video_decoder_i kp__software_decoder; /* software.c */

/* demux.c: FFmpeg's interrupt callback (opaque: the reader), which stops a
 * wait for input on the reader's interrupt or deadline; starting the
 * deadline of a wait (cfg.timeout_ms); and naming a failed wait:
 * interrupted, timed out, or FFmpeg's error. */
int kp__reader_interrupt(void *opaque);
void kp__reader_arm(struct kp_video_reader *r);
kp_status kp__reader_wait_error(struct kp_video_reader *r, int averr, kp_status st,
                                const char *what);

struct kp_video_reader {
    kp_device_t dev;
    char path[KP__VIDEO_PATH_MAX];
    char options[KP_VIDEO_OPTIONS_MAX]; /* cfg.options points here */
    kp_video_reader_config cfg;
    kp_video_reader_info info;
    bool full_range;
    int32_t matrix; /* KP_VIDEO_MATRIX_*, from the stream's colour space */
    int depth;      /* bits of a luma sample: 8, or 9 .. 16 */
    bool wide;      /* frames given as P016 (a deep stream, NV12 or I420 not asked for) */
    /* demux */
    AVFormatContext *fmt;
    AVStream *st;
    AVPacket *pkt;
    bool demux_eof;
    bool held; /* r->pkt is the next packet (a seek read it) */
    /* FFmpeg's interrupt callback: the user's, and the deadline of the wait
     * under way (CLOCK_MONOTONIC ns; 0: none) from cfg.timeout_ms */
    uint64_t deadline_ns;
    bool timed_out, interrupted;
    /* why the callback last stopped a wait (1 interrupted, 2 timed out), kept
     * past the next arm: a protocol that latches the stop (udp's receiving
     * thread) returns it from a later call as AVERROR_EXIT */
    int stopped;
    uint64_t packets;
    uint64_t next; /* the index of the next frame handed on */
    /* the decoder and its context; NULL for a parallel reader's own */
    const kp__video_decoder_i *decoder;
    void *decoder_ctx;
    /* One session of a parallel reader (parallel.c) decodes a range: the
     * frames in display order from its key frame (index stamp start_ts;
     * its pts start_pts) up to the next key frame of the index (end_ts,
     * end_pts; INT64_MAX: the end of the file), dropping what lies
     * outside. Key packets are matched as they are demuxed; the key packet
     * after the end, or an IDR ending the range, ends the demux. */
    struct kp__range {
        bool on, ended;
        int64_t start_ts, end_ts;
        bool have_start, have_end;
        int64_t start_pts, end_pts;
        int64_t skip_pts; /* frames shown before it are dropped too: a seek's target
                             (seek.c); INT64_MIN: none */
        bool kept;        /* a frame was kept since the range began */
        bool lead;        /* the start's key frame has leading pictures (kp__key_kind) */
    } range;
    /* frames by index and time (seek.c), scanned on first use; NULL before */
    struct kp__seek_index *index;
    bool seeks; /* it has been sought: decoders start anywhere (software.c) */
    /* a parallel reader: the sessions, each a reader with a range (the
     * parallel reader itself has no decoder) */
    struct kp__par *par;
    bool failed; /* a named error stopped it: every later call repeats that */
    kp_status fail_status;
    char fail_detail[512];
};

/* An FFmpeg error code as a kpipe error naming `what` and FFmpeg's last
 * logged message (FFmpeg's log goes to the error details, never to stderr,
 * unless KPIPE_FFMPEG_LOG=1). */
kp_status kp__av_error(int averr, kp_status st, const char *fmt, ...) KP__PRINTF(3, 4);
/* KP_VIDEO_MATRIX_* of a colour space as FFmpeg and H.264/HEVC's
 * matrix_coefficients number it (1 BT.709, 5 and 6 BT.601, 9 and 10
 * BT.2020); KP_VIDEO_MATRIX_UNKNOWN for any other. */
int32_t kp__video_matrix_of(int colour_space);
/* kp_video_reader_config.options (checked by kp__video_options_check) as
 * a dictionary for FFmpeg; *out NULL for none. */
kp_status kp__av_options(const char *options, AVDictionary **out);
/* After FFmpeg took what it knows of d: KP_ERR_INVALID_ARG naming the
 * first option left, which nothing there takes; frees d either way. */
kp_status kp__av_options_left(AVDictionary **d, const char *path);
/* Installs the log capture (once). */
void kp__av_log_capture(void);
/* The next packet of the video stream into r->pkt: KP_ERR_NOT_FOUND at the
 * end of the file. */
kp_status kp__demux_next(kp_video_reader_t r);

/* Ranges (range.c; parallel.c uses them). What a decoded frame with `pts` is to r's range:
 * KP__RANGE_KEEP (and always when no range is on), KP__RANGE_DROP (before
 * its start), or KP__RANGE_END (the range is complete: r->range.ended). A
 * frame without a timestamp in a range is KP_ERR_UNSUPPORTED, named. */
enum { KP__RANGE_KEEP, KP__RANGE_DROP, KP__RANGE_END };
kp_status kp__range_frame(kp_video_reader_t r, int64_t pts, int *what);
/* Whether a decoder's errors are expected now and to be passed over: the
 * pictures decoded before a range's own key frame, or its leading ones
 * (an open GOP's), refer to what was never decoded here, and are dropped
 * anyway. */
bool kp__range_lenient(kp_video_reader_t r);
/* A key packet of r's stream just demuxed into r->pkt: counts it against
 * the range; *stop: the demux ends before it. */
void kp__range_key(kp_video_reader_t r, bool *stop);
/* Whether a packet of r's stream need not be decoded: before its range's
 * start, an H.264 picture that no other refers to; after it, a leading
 * picture of the start's key frame that no kept picture refers to. */
bool kp__range_skip(kp_video_reader_t r, const AVPacket *pkt);
/* The stream's parameter sets (H.264's SPS and PPS; HEVC's VPS too) as
 * Annex B, from the extradata (avcC, hvcC, or Annex B already), into *out
 * (kp__free; NULL and 0 without extradata): a decoder's parser is told them
 * first, since the bitstream filter puts them before IDR frames only (an
 * open GOP's key frame is not one) and leaves Annex B input as it is. */
kp_status kp__param_sets(const AVCodecParameters *par, uint8_t **out, size_t *out_len);
/* What a key packet is: *start, decoding from it gives every picture shown
 * from it on as decoding from the file's start does (an IDR, an HEVC CRA or
 * BLA, an H.264 key frame with an exact recovery point of 0 frames); *end,
 * nothing after it is shown before it (no leading pictures). */
void kp__key_kind(kp_video_reader_t r, const AVPacket *pkt, bool *start, bool *end);
/* The sessions of a parallel reader are readers made with cfg.parallel =
 * KP__PAR_SESSION; kp__video_reader_make with parallel > 1 opens the demux
 * alone, and parallel.c adds the sessions. */
#define KP__PAR_SESSION (-1)
/* Whether r can give a frame of `capacity` bytes on `s` (and has not
 * failed), and stopping r for good after a failed frame. */
kp_status kp__video_reader_check(kp_video_reader_t r, kp_stream_t s, size_t capacity);
void kp__video_reader_fail(kp_video_reader_t r, kp_status st);
/* A packet's stamp as the index keeps it: its dts (MP4), or where packets
 * have none, its pts (Matroska). */
/* A reader's frames by index and time (seek.c), freed with the reader. */
struct kp__seek_key {
    int64_t ts, pts; /* index stamp (kp__pkt_stamp), presentation stamp */
    bool clean; /* kp__key_kind's start: decoding can begin here */
};
struct kp__seek_index {
    int64_t n;     /* frames */
    int64_t *pts;  /* n, ascending: frame i's presentation stamp */
    int64_t nkeys;
    struct kp__seek_key *keys; /* in decode order */
};

static inline int64_t kp__pkt_stamp(const AVPacket *p) {
    return p->dts != AV_NOPTS_VALUE ? p->dts : p->pts;
}
/* Seeks r to the key frame stamped `ts` in the index, holding its packet
 * in r->pkt for the next demux, and empties the decoder for the range
 * [start_ts, end_ts) of index stamps. */
kp_status kp__reader_seek(kp_video_reader_t r, int64_t ts, int64_t start_ts, int64_t end_ts);

#endif
