/* What the built-in modules offer outside a pipeline: their kernels as
 * plain calls on a stream, with the arithmetic the modules use, for stages
 * and programs that work on frames themselves (a flow's batch across
 * streams resizes each frame as it gathers the batch). */
#ifndef KPIPE_MODULES_H
#define KPIPE_MODULES_H

#include "kpipe/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resizes one NV12 picture (u8: `height` rows of luma, then height/2 rows
 * of interleaved U,V, each row `pitch` bytes) bilinearly, as the "resize"
 * module does, on `s`: src and dst are device memory of s's device (host
 * memory on cpu). Sides even, 2 .. 16384; pitches even, at least the
 * width; dst's padding is zeroed. Checks every argument
 * (KP_ERR_INVALID_ARG names it); enqueues and returns. */
kp_status kp_resize_nv12(kp_stream_t s, const void *src, int32_t src_width, int32_t src_height,
                         int64_t src_pitch, void *dst, int32_t dst_width, int32_t dst_height,
                         int64_t dst_pitch);

/* One NV12 picture as kp_resizer_nv12 reads it: device memory of the
 * resizer's device (host memory on cpu), `height` rows of luma and
 * height/2 of interleaved U,V, each `pitch` bytes. */
typedef struct kp_nv12_picture {
    const void *data;
    int32_t width, height;
    int64_t pitch;
} kp_nv12_picture;

/* A batch resizer: up to max_pictures NV12 pictures of any sizes resized
 * into one buffer by one kernel launch, with the arithmetic of
 * kp_resize_nv12 (bit for bit the bytes of one call per picture). It
 * keeps a table of the pictures on the device, written each call through
 * pinned staging slots that are reused once the launch that read them has
 * run (a slot not yet free is waited for: never in steady state). The
 * table's upload is a few bytes of addresses and sizes, not counted as a
 * host copy (kp_copy_count_watch). One resizer serves one thread at a
 * time: a kp_resizer_nv12 that overlaps another on it gets KP_ERR_STATE
 * and changes nothing. max_pictures 1 .. 1024. */
typedef struct kp_resizer *kp_resizer_t;
kp_status kp_resizer_create(kp_device_t dev, size_t max_pictures, kp_resizer_t *out);
/* Waits for the resizer's launches, then frees it. NULL is a no-op. */
void kp_resizer_destroy(kp_resizer_t r);
/* Resizes src[0 .. n-1] (n 1 .. max_pictures) on `s` (a stream of the
 * resizer's device): picture i into dst + i * dst_pitch * dst_height * 3/2,
 * dst_width x dst_height with rows of dst_pitch bytes, padding zeroed.
 * Every picture is checked as kp_resize_nv12 checks it, before anything
 * is enqueued (KP_ERR_INVALID_ARG names the picture); a refused call
 * changes nothing. One launch and one upload of 24 bytes per picture. */
kp_status kp_resizer_nv12(kp_resizer_t r, kp_stream_t s, const kp_nv12_picture *src, size_t n,
                          void *dst, int32_t dst_width, int32_t dst_height, int64_t dst_pitch);

#ifdef __cplusplus
}
#endif
#endif
