/* The video layer's internals: the rules every frame and configuration
 * obeys (api.c, shared by every entry), and what the FFmpeg-backed files
 * (reader.c, nvdec.c, writer.c; built with KP_VIDEO) give api.c. */
#ifndef KPIPE_VIDEO_IMPL_H
#define KPIPE_VIDEO_IMPL_H

#include "kpipe/memory.h"
#include "kpipe/video.h"
#include "../core/core-impl.h"

#define KP__VIDEO_PATH_MAX 1024

/* kp_video_reader_config.options well formed (api.c): for every entry. */
kp_status kp__video_options_check(const char *options);

/* A frame description a writer or a module can take: format, even sides
 * within KP_VIDEO_MAX_SIDE, an even pitch >= width, a time base > 0 when
 * there is a pts, and pitch * height * 3 / 2 within `bytes` (0: not
 * checked). `what` starts the detail. */
kp_status kp__video_frame_check(const kp_video_frame *f, size_t bytes, const char *what);
/* Whether a decoded frame of w x h (frame `index` of `path`) can be given
 * by a reader taking frames up to max_w x max_h: even sides within them,
 * or KP_ERR_UNSUPPORTED naming the sizes and what to set. */
kp_status kp__video_size_check(const char *path, uint64_t index, int w, int h, int max_w,
                               int max_h);
/* pitch * height * 3 / 2, checked: KP_ERR_INVALID_ARG on overflow. */
kp_status kp__video_frame_bytes(int64_t pitch, int64_t height, size_t *out);

#ifdef KP_HAVE_VIDEO
kp_status kp__video_reader_make(kp_device_t dev, const char *path,
                                const kp_video_reader_config *cfg, kp_video_reader_t *out);
kp_status kp__video_reader_info(kp_video_reader_t r, kp_video_reader_info *out);
kp_status kp__video_reader_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                                kp_video_frame *frame, bool *eos);
void kp__video_reader_free(kp_video_reader_t r);
/* The reader's entry points (parallel.c): one session (reader.c), or
 * cfg.parallel sessions. */
kp_status kp__video_open(kp_device_t dev, const char *path, const kp_video_reader_config *cfg,
                         kp_video_reader_t *out);
kp_status kp__video_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                         kp_video_frame *frame, bool *eos);
void kp__video_close(kp_video_reader_t r);
/* Frames by index and by time (seek.c). */
kp_status kp__video_count(kp_video_reader_t r, int64_t *frames);
kp_status kp__video_seek(kp_video_reader_t r, int64_t frame);
kp_status kp__video_frame_at(kp_video_reader_t r, double seconds, int64_t *frame);
kp_status kp__video_pool_limit(int max_idle);
kp_status kp__video_pool_stats(kp_video_pool_stats *out);
kp_status kp__video_writer_make(kp_device_t dev, const char *path,
                                const kp_video_writer_config *cfg, kp_video_writer_t *out);
kp_status kp__video_writer_write(kp_video_writer_t w, kp_stream_t s, const void *src, size_t bytes,
                                 const kp_video_frame *frame);
const char *kp__video_writer_encoder(kp_video_writer_t w);
kp_status kp__video_writer_finish(kp_video_writer_t w);
#endif

#endif
