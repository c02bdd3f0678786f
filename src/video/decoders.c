/* The NVDEC driver's entry points, the engine's limits, and the pool of
 * idle decoders.
 *
 * Making a decoder costs tens of milliseconds (the driver makes them one
 * at a time); reconfiguring one costs a few. A closing reader gives its
 * decoder here, with its hold on the device's primary context; an opening
 * one takes the smallest that fits and reconfigures it in the sequence
 * callback, where the driver requires it (nvdec.c). One pool per process,
 * bounded by kp_video_pool_limit. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nvdec-impl.h"

CudaFunctions *kp__cu;
CuvidFunctions *kp__cuvid;
static char kp__nv_why[160];

static void kp__nv_load(void) {
    if (cuda_load_functions(&kp__cu, NULL) < 0) {
        snprintf(kp__nv_why, sizeof kp__nv_why, "cannot load libcuda.so.1 (the NVIDIA driver)");
        kp__cu = NULL;
    } else if (cuvid_load_functions(&kp__cuvid, NULL) < 0) {
        snprintf(kp__nv_why, sizeof kp__nv_why,
                 "cannot load libnvcuvid.so.1 (the NVIDIA driver's video decoder)");
        kp__cuvid = NULL;
    } else if (kp__cu->cuInit(0) != CUDA_SUCCESS) {
        snprintf(kp__nv_why, sizeof kp__nv_why, "cuInit failed");
        kp__cuvid = NULL;
    }
}

kp_status kp__nv_driver(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, kp__nv_load);
    if (!kp__cu || !kp__cuvid) return kp__error(KP_ERR_UNSUPPORTED, "NVDEC: %s", kp__nv_why);
    return KP_OK;
}

kp_status kp__cu_error(CUresult e, const char *what) {
    const char *name = NULL;
    if (kp__cu->cuGetErrorName(e, &name) != CUDA_SUCCESS || !name) name = "?";
    return kp__error((int)e == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? KP_ERR_OUT_OF_MEMORY
                                                                : KP_ERR_DEVICE,
                     "NVDEC: %s: %s (%d)", what, name, (int)e);
}

#define KP__NV_POOL_MAX 64
static pthread_mutex_t kp__pool_mu = PTHREAD_MUTEX_INITIALIZER;
static kp__nv_idle kp__pool[KP__NV_POOL_MAX];
static int kp__pool_n, kp__pool_limit = KP_VIDEO_POOL_DEFAULT;
static uint64_t kp__pool_counts[3]; /* made, reused, freed */

/* The driver's answers to cuvidGetDecoderCaps, per device and question.
 * They describe the hardware, which does not change while the process
 * runs. */
#define KP__NV_CAPS_MAX 32
static struct {
    CUdevice dev;
    CUVIDDECODECAPS caps;
} kp__caps[KP__NV_CAPS_MAX];
static int kp__caps_n;

CUresult kp__nv_caps(CUdevice cudev, CUVIDDECODECAPS *c) {
    if (!kp__cuvid->cuvidGetDecoderCaps) return (CUresult)801; /* CUDA_ERROR_NOT_SUPPORTED */
    pthread_mutex_lock(&kp__pool_mu);
    for (int i = 0; i < kp__caps_n; i++)
        if (kp__caps[i].dev == cudev && kp__caps[i].caps.eCodecType == c->eCodecType &&
            kp__caps[i].caps.eChromaFormat == c->eChromaFormat &&
            kp__caps[i].caps.nBitDepthMinus8 == c->nBitDepthMinus8) {
            *c = kp__caps[i].caps;
            pthread_mutex_unlock(&kp__pool_mu);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&kp__pool_mu);
    CUresult e = kp__cuvid->cuvidGetDecoderCaps(c); /* not under the lock: it takes ms */
    if (e != CUDA_SUCCESS) return e;
    pthread_mutex_lock(&kp__pool_mu);
    if (kp__caps_n < KP__NV_CAPS_MAX) {
        kp__caps[kp__caps_n].dev = cudev;
        kp__caps[kp__caps_n++].caps = *c;
    }
    pthread_mutex_unlock(&kp__pool_mu);
    return CUDA_SUCCESS;
}

void kp__pool_count(int what) {
    pthread_mutex_lock(&kp__pool_mu);
    kp__pool_counts[what]++;
    pthread_mutex_unlock(&kp__pool_mu);
}

void kp__nv_destroy(CUvideodecoder dec, CUcontext ctx, CUdevice cudev) {
    CUcontext dummy;
    if (kp__cu->cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
        kp__cuvid->cuvidDestroyDecoder(dec);
        kp__cu->cuCtxPopCurrent(&dummy);
    }
    kp__cu->cuDevicePrimaryCtxRelease(cudev);
}

bool kp__pool_take(CUdevice cudev, cudaVideoCodec codec, unsigned w, unsigned h, unsigned n,
                   kp__nv_idle *out) {
    pthread_mutex_lock(&kp__pool_mu);
    int best = -1;
    for (int i = 0; i < kp__pool_n; i++) {
        const kp__nv_idle *d = &kp__pool[i];
        if (d->cudev != cudev || d->codec != codec || d->max_w < w || d->max_h < h ||
            d->surfaces < n)
            continue;
        if (best < 0 ||
            (uint64_t)d->max_w * d->max_h < (uint64_t)kp__pool[best].max_w * kp__pool[best].max_h)
            best = i;
    }
    if (best >= 0) {
        *out = kp__pool[best];
        kp__pool[best] = kp__pool[--kp__pool_n];
    }
    pthread_mutex_unlock(&kp__pool_mu);
    return best >= 0;
}

bool kp__pool_give(const kp__nv_idle *d) {
    pthread_mutex_lock(&kp__pool_mu);
    bool ok = kp__pool_n < kp__pool_limit;
    if (ok) kp__pool[kp__pool_n++] = *d;
    pthread_mutex_unlock(&kp__pool_mu);
    return ok;
}

kp_status kp__video_pool_limit(int max_idle) {
    kp__nv_idle cut[KP__NV_POOL_MAX];
    int n = 0;
    pthread_mutex_lock(&kp__pool_mu);
    kp__pool_limit = max_idle;
    while (kp__pool_n > max_idle) cut[n++] = kp__pool[--kp__pool_n];
    kp__pool_counts[KP__POOL_DESTROYED] += (uint64_t)n;
    pthread_mutex_unlock(&kp__pool_mu);
    for (int i = 0; i < n; i++) kp__nv_destroy(cut[i].dec, cut[i].ctx, cut[i].cudev);
    return KP_OK;
}

kp_status kp__video_pool_stats(kp_video_pool_stats *out) {
    pthread_mutex_lock(&kp__pool_mu);
    *out = (kp_video_pool_stats){.idle = kp__pool_n,
                                 .limit = kp__pool_limit,
                                 .created = kp__pool_counts[KP__POOL_CREATED],
                                 .reused = kp__pool_counts[KP__POOL_REUSED],
                                 .destroyed = kp__pool_counts[KP__POOL_DESTROYED]};
    pthread_mutex_unlock(&kp__pool_mu);
    return KP_OK;
}

void kp__nv_bucket(const CUVIDDECODECAPS *c, unsigned w, unsigned h, unsigned *bw, unsigned *bh) {
    static const unsigned sizes[][2] = {{352, 288},   {640, 480},   {1280, 720},
                                        {1920, 1088}, {2560, 1440}, {3840, 2176},
                                        {4096, 2304}, {7680, 4320}, {8192, 8192}};
    *bw = w;
    *bh = h;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (sizes[i][0] < w || sizes[i][1] < h) continue;
        unsigned x = sizes[i][0] < c->nMaxWidth ? sizes[i][0] : c->nMaxWidth,
                 y = sizes[i][1] < c->nMaxHeight ? sizes[i][1] : c->nMaxHeight;
        if (x >= w && y >= h && ((x + 15) / 16) * ((y + 15) / 16) <= c->nMaxMBCount) {
            *bw = x;
            *bh = y;
        }
        break;
    }
}

static const char *kp__nv_codec_name(cudaVideoCodec c) {
    return c == cudaVideoCodec_H264 ? "H.264" : c == cudaVideoCodec_HEVC ? "HEVC" : "?";
}

kp_status kp__nv_fits(const CUVIDDECODECAPS *c, cudaVideoCodec codec, unsigned w, unsigned h) {
    unsigned mbs = ((w + 15) / 16) * ((h + 15) / 16);
    if (!c->bIsSupported)
        return kp__error(KP_ERR_UNSUPPORTED, "NVDEC on this GPU does not decode 8-bit 4:2:0 %s",
                         kp__nv_codec_name(codec));
    if (w > c->nMaxWidth || h > c->nMaxHeight || mbs > c->nMaxMBCount || w < c->nMinWidth ||
        h < c->nMinHeight)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%ux%u is outside NVDEC's limits for %s on this GPU (%ux%u .. %ux%u, "
                         "%u macroblocks)",
                         w, h, kp__nv_codec_name(codec), c->nMinWidth, c->nMinHeight, c->nMaxWidth,
                         c->nMaxHeight, c->nMaxMBCount);
    return KP_OK;
}
