/* What nvdec.c (a session: parser, decoder, output; the reader's NVDEC
 * decoder) and decoders.c (the driver's entry points, the engine's limits
 * and the pool of idle decoders) share. */
#ifndef KPIPE_VIDEO_NVDEC_IMPL_H
#define KPIPE_VIDEO_NVDEC_IMPL_H

#include <ffnvcodec/dynlink_loader.h>

#include "video-impl.h"

/* The driver's CUDA and NVDEC entry points, loaded at run time through
 * FFmpeg's loader headers (libffmpeg-nvenc-dev), so nothing links against
 * the driver and the build works where no GPU is. Set by kp__nv_driver. */
extern CudaFunctions *kp__cu;
extern CuvidFunctions *kp__cuvid;
/* Loads them (once): KP_ERR_UNSUPPORTED naming what is missing. */
kp_status kp__nv_driver(void);
/* A CUDA driver error as a kpipe error naming `what`. */
kp_status kp__cu_error(CUresult e, const char *what);

/* --- the pool of idle decoders (decoders.c) ------------------------------------------ */
/* A decoder and its hold on the device's primary context. */
typedef struct kp__nv_idle {
    CUvideodecoder dec;
    CUdevice cudev;
    CUcontext ctx;
    cudaVideoCodec codec;
    unsigned max_w, max_h, surfaces;
} kp__nv_idle;
/* Takes the smallest idle decoder for (device, codec) made for at least
 * w x h coded and n surfaces; false: none. */
bool kp__pool_take(CUdevice cudev, cudaVideoCodec codec, unsigned w, unsigned h, unsigned n,
                   kp__nv_idle *out);
/* Gives a decoder with its context hold to the pool; false: full (the
 * caller frees both). */
bool kp__pool_give(const kp__nv_idle *d);
/* Counts a decoder made, one taken from the pool, or one freed. */
enum { KP__POOL_CREATED, KP__POOL_REUSED, KP__POOL_DESTROYED };
void kp__pool_count(int what);
/* Frees a decoder and releases its context hold. */
void kp__nv_destroy(CUvideodecoder dec, CUcontext ctx, CUdevice cudev);
/* The common frame size at or above w x h coded, within the engine's
 * limits: what a decoder is made for, so that clips of nearby sizes, and a
 * stream's later sizes, fit it. */
void kp__nv_bucket(const CUVIDDECODECAPS *c, unsigned w, unsigned h, unsigned *bw, unsigned *bh);
/* The engine's limits (c, for `codec`) for a coded size w x h:
 * KP_ERR_UNSUPPORTED names them. */
kp_status kp__nv_fits(const CUVIDDECODECAPS *c, cudaVideoCodec codec, unsigned w, unsigned h);
/* The engine's caps for c->eCodecType, c->eChromaFormat and
 * c->nBitDepthMinus8 on cudev (ctx current), asked of the driver once per
 * process and kept: the query costs about 8 ms, most of a pooled open. */
CUresult kp__nv_caps(CUdevice cudev, CUVIDDECODECAPS *c);

#endif
