/* The rules every video frame description obeys, shared by every entry
 * that takes one (the writer, the flow's video sink, the reader's sizes). */
#include "video-impl.h"

kp_status kp__video_frame_bytes(int64_t pitch, int64_t height, size_t *out) {
    if (pitch <= 0 || height <= 0 || pitch > KP_VIDEO_MAX_SIDE * 2 || height > KP_VIDEO_MAX_SIDE)
        return kp__error(KP_ERR_INVALID_ARG, "a frame of pitch %lld and height %lld",
                         (long long)pitch, (long long)height);
    *out = (size_t)(pitch * height / 2 * 3); /* at most 32768 * 16384 * 3 / 2: no overflow */
    return KP_OK;
}

kp_status kp__video_size_check(const char *path, uint64_t index, int w, int h, int max_w,
                               int max_h) {
    if (w < 2 || h < 2 || w % 2 || h % 2)
        return kp__error(KP_ERR_UNSUPPORTED, "%s: frame %llu is %dx%d: kpipe reads even sizes",
                         path, (unsigned long long)index, w, h);
    if (w > max_w || h > max_h)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: frame %llu is %dx%d, beyond the %dx%d this reader takes (set "
                         "max_width and max_height for a stream that changes size)",
                         path, (unsigned long long)index, w, h, max_w, max_h);
    return KP_OK;
}

kp_status kp__video_frame_check(const kp_video_frame *f, size_t bytes, const char *what) {
    if (!f) return kp__error(KP_ERR_INVALID_ARG, "%s: the frame description is NULL", what);
    if (f->format != KP_PIXEL_I420 && f->format != KP_PIXEL_NV12 && f->format != KP_PIXEL_P016)
        return kp__error(KP_ERR_INVALID_ARG, "%s: pixel format %d (expected I420, NV12 or P016)",
                         what, (int)f->format);
    if (f->width < 2 || f->height < 2 || f->width > KP_VIDEO_MAX_SIDE ||
        f->height > KP_VIDEO_MAX_SIDE || f->width % 2 || f->height % 2)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: a frame of %dx%d (width and height even, 2 .. %d)", what,
                         (int)f->width, (int)f->height, KP_VIDEO_MAX_SIDE);
    const int64_t row = (int64_t)f->width * kp_pixel_format_sample_bytes(f->format);
    if (f->pitch < row || f->pitch % 2 || f->pitch > 2 * KP_VIDEO_MAX_SIDE)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: pitch %lld for a %s row of width %d (even, >= %lld bytes)", what,
                         (long long)f->pitch, kp_pixel_format_name(f->format), (int)f->width,
                         (long long)row);
    if (f->pts != KP_VIDEO_NO_PTS && (f->time_base[0] <= 0 || f->time_base[1] <= 0))
        return kp__error(KP_ERR_INVALID_ARG, "%s: a pts with time base %d/%d", what,
                         (int)f->time_base[0], (int)f->time_base[1]);
    if (f->rate[0] < 0 || f->rate[1] < 0 || (f->rate[0] > 0) != (f->rate[1] > 0))
        return kp__error(KP_ERR_INVALID_ARG, "%s: frame rate %d/%d", what, (int)f->rate[0],
                         (int)f->rate[1]);
    size_t need = (size_t)(f->pitch * f->height / 2 * 3);
    if (bytes && need > bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: a %dx%d frame of pitch %lld needs %zu bytes; %zu given", what,
                         (int)f->width, (int)f->height, (long long)f->pitch, need, bytes);
    return KP_OK;
}
