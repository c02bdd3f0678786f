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

#ifdef __cplusplus
}
#endif
#endif
