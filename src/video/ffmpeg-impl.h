/* What the FFmpeg-backed files of the video layer share (built with
 * KP_VIDEO): the reader's state, demux, and FFmpeg's messages turned into
 * error details. */
#ifndef KPIPE_VIDEO_FFMPEG_IMPL_H
#define KPIPE_VIDEO_FFMPEG_IMPL_H

#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>

#include "video-impl.h"

#define KP__SW_RING 3 /* pinned upload buffers of the software path */

struct kp__nvdec; /* nvdec.c */
struct kp_video_reader;
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
    kp_video_reader_config cfg;
    kp_video_reader_info info;
    bool full_range;
    /* demux */
    AVFormatContext *fmt;
    AVStream *st;
    AVPacket *pkt;
    bool demux_eof;
    /* FFmpeg's interrupt callback: the user's, and the deadline of the wait
     * under way (CLOCK_MONOTONIC ns; 0: none) from cfg.timeout_ms */
    uint64_t deadline_ns;
    bool timed_out, interrupted;
    uint64_t packets;
    /* software decode */
    AVCodecContext *dec;
    AVFrame *frame;
    bool flushed;
    kp_allocator_t pinned;
    void *stage[KP__SW_RING];
    kp_event_t ev[KP__SW_RING];
    bool pending[KP__SW_RING];
    uint64_t next;
    /* NVDEC, when it decodes */
    struct kp__nvdec *nv;
    bool failed; /* a named error stopped it: every later call repeats that */
    kp_status fail_status;
    char fail_detail[512];
};

/* An FFmpeg error code as a kpipe error naming `what` and FFmpeg's last
 * logged message (FFmpeg's log goes to the error details, never to stderr,
 * unless KPIPE_FFMPEG_LOG=1). */
kp_status kp__av_error(int averr, kp_status st, const char *fmt, ...) KP__PRINTF(3, 4);
/* Installs the log capture (once). */
void kp__av_log_capture(void);
/* The next packet of the video stream into r->pkt: KP_ERR_NOT_FOUND at the
 * end of the file. */
kp_status kp__demux_next(kp_video_reader_t r);

/* NVDEC (nvdec.c): opens a session for r's stream, or says why not
 * (KP_ERR_UNSUPPORTED with the reason in the detail). */
kp_status kp__nvdec_open(kp_video_reader_t r);
kp_status kp__nvdec_next(kp_video_reader_t r, kp_stream_t s, void *dst, kp_video_frame *frame,
                         bool *eos);
void kp__nvdec_close(struct kp__nvdec *nv);

#endif
