/* The built-in sources and sinks as public constructors, for flows made
 * from C (include/kpipe/flow.h): each calls the kp__stage_* function the
 * JSON form calls (stages-impl.h), which checks the arguments and makes
 * the stage, then hands what it made over as a kp_flow_stage. Nothing is
 * written to the caller's structs until the stage is made, so a refused
 * call leaves them as they were; the made function has freed what it made
 * before it failed. */
#include <string.h>

#include "stages-impl.h"

#define KP__SINK_CAPACITY 4 /* the JSON form's default queue */

/* What `m` made as the C form's stage, named `name`; a source's frame
 * size (and a y4m source's tags, already in *info) go to `info`. */
static void kp__stage_hand_over(const kp__stage_made *m, kp_device_t dev, const char *name,
                                bool source, kp_flow_stage *out, kp_flow_source_info *info) {
    *out = (kp_flow_stage){.name = name,
                           .fn = m->fn,
                           .user = m->user,
                           .end_fn = m->end_fn,
                           .free_fn = m->free_fn,
                           .dev = dev,
                           .queue_capacity = source ? 0 : KP__SINK_CAPACITY,
                           .source = source,
                           .streams = m->streams,
                           .stream_users = m->stream_users};
    if (info) info->frame_bytes = m->frame_bytes;
}

kp_status kp_flow_synthetic_source(kp_device_t dev, int64_t frames, int ndim, const int64_t *shape,
                                   kp_flow_stage *out, kp_flow_source_info *info) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_synthetic(dev, frames, ndim, shape, &m));
    if (info) info->y4m_tags[0] = '\0';
    kp__stage_hand_over(&m, dev, "synthetic source", true, out, info);
    return KP_OK;
}

kp_status kp_flow_testsrc_source(kp_device_t dev, int64_t frames, int64_t width, int64_t height,
                                 kp_pixel_format format, int64_t pitch, kp_flow_stage *out,
                                 kp_flow_source_info *info) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_testsrc(dev, frames, width, height, format, pitch, &m));
    if (info) info->y4m_tags[0] = '\0';
    kp__stage_hand_over(&m, dev, "testsrc source", true, out, info);
    return KP_OK;
}

kp_status kp_flow_y4m_source(kp_device_t dev, const char *path, int64_t frames, bool loop,
                             kp_flow_stage *out, kp_flow_source_info *info) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    char tags[sizeof info->y4m_tags];
    KP_CHECK(kp__stage_y4m_source(dev, path, frames, loop, &m, tags, sizeof tags));
    if (info) memcpy(info->y4m_tags, tags, sizeof tags);
    kp__stage_hand_over(&m, dev, "y4m source", true, out, info);
    return KP_OK;
}

kp_status kp_flow_video_source(kp_device_t dev, const char *const *paths, size_t n_paths,
                               const kp_flow_video_source_config *cfg, kp_flow_stage *out,
                               kp_flow_source_info *info) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_video_source(dev, paths, n_paths, cfg, &m, NULL));
    if (info) info->y4m_tags[0] = '\0';
    kp__stage_hand_over(&m, dev, "video source", true, out, info);
    return KP_OK;
}

kp_status kp_flow_null_sink(kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_null(&m));
    kp__stage_hand_over(&m, NULL, "null sink", false, out, NULL);
    return KP_OK;
}

kp_status kp_flow_npy_sink(kp_device_t dev, const char *path, size_t frame_bytes,
                           kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_npy(dev, path, frame_bytes, &m));
    kp__stage_hand_over(&m, dev, "npy sink", false, out, NULL);
    return KP_OK;
}

kp_status kp_flow_y4m_sink(kp_device_t dev, const char *path, size_t frame_bytes, const char *tags,
                           kp_pixel_format format, kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_y4m_sink(dev, path, frame_bytes, tags, format, &m));
    kp__stage_hand_over(&m, dev, "y4m sink", false, out, NULL);
    return KP_OK;
}

kp_status kp_flow_video_sink(kp_device_t dev, const char *path, const kp_video_writer_config *cfg,
                             kp_pixel_format format, kp_flow_stage *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    kp__stage_made m;
    KP_CHECK(kp__stage_video_sink(dev, path, cfg, format, &m));
    kp__stage_hand_over(&m, dev, "video sink", false, out, NULL);
    return KP_OK;
}
