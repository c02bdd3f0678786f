/* Every frame of a video file, read to the host: shared by the video file
 * and many-streams tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "kp_test.h"

kp_status kpt_read_frames(kp_device_t dev, const char *path, kp_video_decoder decoder,
                          kp_pixel_format format, kpt_frames *out) {
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.decoder = decoder;
    cfg.format = format;
    return kpt_read_frames_cfg(dev, path, &cfg, out);
}

kp_status kpt_read_frames_cfg(kp_device_t dev, const char *path, const kp_video_reader_config *cfg,
                              kpt_frames *out) {
    memset(out, 0, sizeof *out);
    kp_video_reader_t r;
    kp_status st = kp_video_reader_open(dev, path, cfg, &r);
    if (st != KP_OK) return st;
    KPT_OK(kp_video_reader_get_info(r, &out->info));
    out->bytes = out->info.frame_bytes;
    kp_stream_t s;
    void *buf;
    KPT_OK(kp_stream_create(dev, &s));
    KPT_OK(kp_malloc(dev, out->bytes, &buf));
    for (;;) {
        kp_video_frame f;
        bool eos = false;
        st = kp_video_reader_next(r, s, buf, out->bytes, &f, &eos);
        if (st != KP_OK || eos) break;
        assert_true(out->n < KPT_MAX_FRAMES);
        out->data = realloc(out->data, out->bytes * (size_t)(out->n + 1));
        assert_non_null(out->data);
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(dev, out->data + out->bytes * (size_t)out->n, buf, out->bytes));
        assert_int_equal(f.width, out->info.width);
        assert_int_equal(f.format, out->info.format);
        out->pts[out->n++] = f.pts;
    }
    kp_free(dev, buf);
    kp_stream_destroy(s);
    kp_video_reader_close(r);
    return st;
}
