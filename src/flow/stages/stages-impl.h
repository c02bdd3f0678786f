/* The flows' built-in stages (src/flow/stages/, the flow layer above the
 * runtime: runtime < stages < remote < json): sources and sinks over
 * files, test patterns and video (stages.c, raw_video.c, video_files.c,
 * with the pattern both forms of the kernels draw, pattern-impl.h and
 * pattern.cu), a pipeline as a stage with its micro-batching (stages.c),
 * and their public C constructors (api.c). Each kp__stage_* function below
 * checks its arguments and makes a stage, for the public constructor and
 * for the JSON form (src/flow/json/), the one layer above that
 * tests/layering.py lets include this header: both forms get the same
 * checks and the same errors. A refused call has freed what it made. */
#ifndef KPIPE_FLOW_STAGES_IMPL_H
#define KPIPE_FLOW_STAGES_IMPL_H

#include "kpipe/modules.h"
#include "kpipe/npy.h"
#include "kpipe/pipeline.h"
#include "../runtime/flow-impl.h"

/* Source "synthetic": `frames` frames (0: until cancelled) of f32[shape],
 * element i of frame s = kp__pattern_value(s, i), written on the device. */
kp_status kp__stage_synthetic(kp_device_t dev, int64_t frames, int ndim, const int64_t *shape,
                              kp__stage_made *out);
/* Sink "null": nothing. Sink "npy": writes each frame to `path` (the file
 * holds the last one), through host memory made here. */
kp_status kp__stage_null(kp__stage_made *out);
kp_status kp__stage_npy(kp_device_t dev, const char *path, size_t max_bytes, kp__stage_made *out);
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
kp_status kp__stage_testsrc(kp_device_t dev, int64_t frames, int64_t width, int64_t height,
                            kp_pixel_format format, int64_t pitch, kp__stage_made *out);
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
 * the path makes a file per stream; `cfg` NULL: the writer's defaults.
 * (kp_flow_video_source_config's strict_no_host_copies: on a device whose
 * memory is apart from the host's every stream decodes on NVDEC, and one
 * NVDEC cannot take is refused by name instead of falling back to
 * software, which uploads every frame.) */
kp_status kp__stage_video_source(kp_device_t dev, const char *const *paths, size_t n_paths,
                                 const kp_flow_video_source_config *o, kp__stage_made *out,
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

#endif
