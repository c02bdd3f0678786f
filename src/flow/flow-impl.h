/* Flow internals shared by the runtime, its built-in stages and the JSON
 * reader. */
#ifndef KPIPE_FLOW_IMPL_H
#define KPIPE_FLOW_IMPL_H

#include <sys/socket.h>

#include "kpipe/flow.h"
#include "kpipe/modules.h"
#include "kpipe/npy.h"
#include "kpipe/pipeline.h"
#include "../core/core-impl.h"

/* Hands the flow an object to free (with free_fn) once its threads have
 * stopped, in kp_flow_destroy; on failure free_fn(obj) has run. */
kp_status kp__flow_own(kp_flow_t f, void *obj, void (*free_fn)(void *));
/* The same for a device the flow runs on: closed after everything else. */
kp_status kp__flow_own_device(kp_flow_t f, kp_device_t dev);

/* The rules every flow's configuration obeys, whichever form made it: C
 * (kp_flow_create) or JSON, which calls this before creating, so the two
 * cannot drift apart. KP_ERR_INVALID_ARG names the field by its path in
 * the configuration ("stages[2] (scale).replicas[1]: ..."). */
kp_status kp__flow_check_config(const kp_flow_config *c);
/* How many stages take frames from each stage (down: n_stages of them), by
 * the same reading of "from" the flow makes; KP_ERR_INVALID_ARG names a
 * name that is not there. */
kp_status kp__flow_downstream(const kp_flow_config *c, size_t *down);
/* The copies in flight a stage with n_down stages downstream may have
 * (KP_ROUTE_COPY; runtime-impl.h, KP__COPY_DEPTH); 0 for other stages. */
size_t kp__flow_copy_quota(const kp_flow_stage *s, size_t n_down);

/* What a flow asks of a kind of stage beyond running it, found by the
 * stage's function: the flow sees every source and sink through this,
 * never by name. A stage file adds its kinds (once) before it makes a
 * stage; kinds are never removed. */
typedef struct kp__stage_kind {
    kp_flow_stage_fn fn;
    bool one_link; /* the stage has one peer: no replicas */
    /* optional: the figures of a remote queue's end (kp_flow_remote) */
    kp_status (*remote_stats)(void *user, kp_flow_remote_stats *out);
    /* optional: what a source says of one of its streams (`user` is the
     * stream's), for kp_flow_streams' detail */
    void (*stream_detail)(void *user, char *buf, size_t len);
} kp__stage_kind;
kp_status kp__stage_kind_add(const kp__stage_kind *kind);
/* The kind of a stage function, or NULL for a plain one. */
const kp__stage_kind *kp__stage_kind_find(kp_flow_stage_fn fn);

/* A built-in stage as made: its function and state, what frames it needs. */
typedef struct kp__stage_made {
    kp_flow_stage_fn fn;
    kp_flow_batch_fn batch_fn; /* instead of fn, for a micro-batching stage */
    void *user;
    void (*free_fn)(void *user);
    size_t frame_bytes; /* bytes its frames must hold */
    size_t max_batch;
    kp_flow_end_fn end_fn; /* optional */
    /* a source of several streams: each one's user (in `user`'s memory) */
    size_t streams;
    void **stream_users;
} kp__stage_made;

/* Trading buffers with frames, for a stage that keeps buffers of its own
 * in flight (a remote queue's end receives into them, or sends from them,
 * while its frames go on): kp__flow_spare_buffer acquires a buffer like a
 * frame's from the flow's pool (KP_ERR_UNSUPPORTED where frames have a
 * buffer on several devices); kp__frame_trade gives `frame` (one the
 * stage was handed) the buffer *b and *b the frame's old one. Only a
 * source, or a stage with none downstream, trades: the bytes of a frame
 * passed on go with it (KP_ERR_UNSUPPORTED for `stage` otherwise). A spare
 * buffer goes back with kp_buffer_release before the flow is destroyed,
 * which its owner's free function is (kp__flow_own). */
kp_status kp__flow_spare_buffer(kp_flow_t f, size_t stage, kp_buffer_t *out);
void kp__frame_trade(kp_frame *frame, kp_buffer_t *b);

/* Source "synthetic": `frames` frames (0: until cancelled) of f32[shape],
 * element i of frame s = kp__pattern_value(s, i), written on the device. */
kp_status kp__stage_synthetic(kp_device_t dev, int64_t frames, int ndim, const int64_t *shape,
                              kp__stage_made *out);
/* Sink "null": nothing. Sink "npy": writes each frame to `path` (the file
 * holds the last one), through host memory made here. */
kp_status kp__stage_null(kp__stage_made *out);
kp_status kp__stage_npy(kp_device_t dev, const char *path, size_t max_bytes, kp__stage_made *out);
/* "I420", "NV12"; "not video" for KP_PIXEL_NONE; "unknown" otherwise. */
static inline const char *kp__pixel_str(kp_pixel_format f) {
    return f == KP_PIXEL_I420   ? "I420"
           : f == KP_PIXEL_NV12 ? "NV12"
           : f == KP_PIXEL_NONE ? "not video"
                                : "unknown";
}

/* Raw video (raw_video.c). Source "y4m": the frames of a YUV4MPEG2 file (8-bit
 * 4:2:0, not mixed interlacing) as u8 [h*3/2, w], `frames` of them (0:
 * all), from the start again at the end when `loop`; its header's F, I, A,
 * C and X tags go to `tags` for the sink. Source "testsrc": `frames` moving
 * test pictures of width x height, as `format` (KP_PIXEL_NONE: I420) with
 * rows of `pitch` bytes (0: the width), the padding zero. Sink "y4m":
 * writes the frames to `path` with `tags` (NULL or "": 30 frames/s,
 * progressive, square pixels) as planar I420, packing NV12 frames and
 * frames with a pitch past the width on the way; `format` (KP_PIXEL_NONE:
 * each frame's own) says what video frames hold, over their label. */
kp_status kp__stage_y4m_source(kp_device_t dev, const char *path, int64_t frames, bool loop,
                               kp__stage_made *out, char *tags, size_t tags_len);
kp_status kp__stage_testsrc(int64_t frames, int64_t width, int64_t height, kp_pixel_format format,
                            int64_t pitch, kp__stage_made *out);
kp_status kp__stage_y4m_sink(kp_device_t dev, const char *path, size_t max_bytes, const char *tags,
                             kp_pixel_format format, kp__stage_made *out);
/* Video files (video_files.c). Source "video": the frames of each path
 * (a file, or a live URL: udp://, srt://, rtsp://, ...) through a
 * kp_video_reader_t, one stream per path (several: a source of several
 * streams, kp__stage_made.streams), `frames` of each (0: all); `info` (may
 * be NULL) gets the first reader's. "realtime" paces each stream at its
 * own frame rate, from its timestamps. A live stream that ends or fails
 * reconnects with a bounded backoff and marks the frame after the gap.
 * Sink "video": writes them through a kp_video_writer_t, which encodes
 * NV12 and I420 as they come, taking them as `format` (KP_PIXEL_NONE: the
 * frames' own label, which the source or a pipeline's output module set;
 * set where a stage changed the layout without saying so); "{stream}" in
 * the path makes a file per stream. */
typedef struct kp__video_source_opts {
    kp_video_reader_config reader;
    int64_t frames;
    bool realtime;
    /* the flow's strict_no_host_copies: on a cuda device every stream
     * decodes on NVDEC, and one NVDEC cannot take is refused by name
     * instead of falling back to software (which uploads every frame) */
    bool strict;
} kp__video_source_opts;
kp_status kp__stage_video_source(kp_device_t dev, const char *const *paths, size_t n_paths,
                                 const kp__video_source_opts *o, kp__stage_made *out,
                                 kp_video_reader_info *info);
kp_status kp__stage_video_sink(kp_device_t dev, const char *path,
                               const kp_video_writer_config *cfg, kp_pixel_format format,
                               kp__stage_made *out);
/* A stage running pipeline `p` (taken over, set up here) on each frame:
 * the frame feeds its one external input, its one external output is copied
 * back into the frame. `output` names the module port ("module.port") the
 * spec's external output is, NULL where the spec does not say (a pipeline
 * of one module needs none). Pictures: a video frame whose layout is not
 * the one the modules reading the input declare (kp_port_decl.format) is
 * refused by name; the frames leave labelled with the layout the output's
 * module declares (kept as they came where it declares none). */
kp_status kp__stage_pipeline(kp_pipeline_t p, const char *output, kp__stage_made *out);
/* The same on batches of up to max_batch frames: the frames (of one shape)
 * are concatenated along dimension 0, which the pipeline's input must take
 * as dynamic; its output is split along dimension 0 back into the frames.
 * `resize` (width, height; NULL: none) makes it a batch across streams:
 * each NV12 frame, of any size, is scaled to width x height as it is
 * gathered (the pipeline takes u8 [n * height*3/2, width]; an I420 frame
 * is refused by name, and so is a pipeline whose input takes I420 when it
 * is made), and the frames leave described as that size. */
kp_status kp__stage_pipeline_batch(kp_device_t dev, kp_pipeline_t p, const char *output,
                                   size_t max_batch, const int32_t *resize, kp__stage_made *out);

/* Remote queues (remote_end.c, always built; remote.c with UCX). Source
 * "remote": listens on `listen` ("host:port"; port 0: any free one) for one
 * sender, whose frames (up to frame_bytes) it receives, `capacity` in
 * flight; waits for the sender up to timeout_ms (0: for ever). Sink
 * "remote": sends every frame to `connect`, trying for up to timeout_ms
 * while the receiver is not up yet. Both check every argument and the
 * address whether or not UCX is built (KP_ERR_UNSUPPORTED without it). */
#define KP__REMOTE_MAX_CAPACITY 1024
kp_status kp__stage_remote_source(kp_device_t dev, const char *listen, size_t frame_bytes,
                                  size_t capacity, int timeout_ms, kp__stage_made *out);
kp_status kp__stage_remote_sink(kp_device_t dev, const char *connect, size_t frame_bytes,
                                int timeout_ms, kp__stage_made *out);
/* A remote end as checked by remote_end.c: its arguments and the parsed
 * address. */
typedef struct kp__remote_end {
    kp_device_t dev;
    bool receiver;
    const char *addr; /* as given, "host:port" */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    size_t frame_bytes, capacity;
    int timeout_ms;
} kp__remote_end;
#ifdef KP_HAVE_UCX
/* remote_rx.c and remote_tx.c: make an end remote_end.c has checked. */
kp_status kp__remote_source_make(const kp__remote_end *end, kp__stage_made *out);
kp_status kp__remote_sink_make(const kp__remote_end *end, kp__stage_made *out);
#endif

#endif
