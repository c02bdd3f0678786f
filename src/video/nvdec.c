/* NVDEC: the driver's parser and decoder, opened at run time through
 * FFmpeg's loader headers (libffmpeg-nvenc-dev), so nothing links against
 * the driver and the build works where no GPU is.
 *
 * Packets come from the reader's demuxer through the mp4-to-Annex-B
 * bitstream filter, one at a time, into the parser; its callbacks run on
 * the calling thread: the sequence callback checks the stream against the
 * decoder's limits and makes the decoder (once: a size change mid-stream is
 * refused by name), the decode callback starts a picture on the engine,
 * the display callback queues the picture for output. A packet is fed only
 * when that queue is empty, and the decoder has KP__NV_EXTRA surfaces over
 * the parser's minimum: the parser cycles through its surfaces, so a
 * picture queued for output is never decoded over before it is copied.
 * Each output picture is mapped, copied on the caller's stream into the
 * destination (device to device, at the reader's pitch), and unmapped once
 * the copy has finished. The flush at the end drains the delayed pictures. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ffnvcodec/dynlink_loader.h>

#include "ffmpeg-impl.h"

#define KP__NV_QUEUE 32 /* display queue: every surface at most */
#define KP__NV_EXTRA 8  /* decode surfaces over the parser's minimum */

static CudaFunctions *kp__cu;
static CuvidFunctions *kp__cuvid;
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

struct kp__nvdec {
    kp_video_reader_t r;
    CUdevice cudev;
    CUcontext ctx; /* the device's primary context, which the CUDA runtime uses too */
    CUvideoparser parser;
    CUvideodecoder dec;
    cudaVideoCodec codec;
    CUVIDDECODECAPS caps;
    AVBSFContext *bsf;
    AVPacket *fpkt;
    unsigned surfaces, coded_w, coded_h;
    CUVIDPARSERDISPINFO q[KP__NV_QUEUE];
    unsigned qh, qn;
    bool eos_sent;
    kp_status cb_status; /* a callback's error, its detail in cb_detail */
    char cb_detail[400];
};

static kp_status kp__cu_error(CUresult e, const char *what) {
    const char *name = NULL;
    if (kp__cu->cuGetErrorName(e, &name) != CUDA_SUCCESS || !name) name = "?";
    return kp__error((int)e == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? KP_ERR_OUT_OF_MEMORY : KP_ERR_DEVICE,
                     "NVDEC: %s: %s (%d)", what, name, (int)e);
}
#define KP__CU(call, what)                                   \
    do {                                                     \
        CUresult kp__e = (call);                             \
        if (kp__e != CUDA_SUCCESS) return kp__cu_error(kp__e, what); \
    } while (0)

static int kp__nv_fail(struct kp__nvdec *nv, kp_status st) {
    nv->cb_status = st;
    snprintf(nv->cb_detail, sizeof nv->cb_detail, "%s", kp_last_error());
    return 0; /* stops the parser */
}

static const char *kp__nv_codec_name(cudaVideoCodec c) {
    return c == cudaVideoCodec_H264 ? "H.264" : c == cudaVideoCodec_HEVC ? "HEVC" : "?";
}

/* The decoder's limits for a coded size; KP_ERR_UNSUPPORTED names them. */
static kp_status kp__nv_fits(struct kp__nvdec *nv, unsigned w, unsigned h) {
    const CUVIDDECODECAPS *c = &nv->caps;
    unsigned mbs = ((w + 15) / 16) * ((h + 15) / 16);
    if (!c->bIsSupported)
        return kp__error(KP_ERR_UNSUPPORTED, "NVDEC on this GPU does not decode 8-bit 4:2:0 %s",
                         kp__nv_codec_name(nv->codec));
    if (w > c->nMaxWidth || h > c->nMaxHeight || mbs > c->nMaxMBCount || w < c->nMinWidth ||
        h < c->nMinHeight)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%ux%u is outside NVDEC's limits for %s on this GPU (%ux%u .. %ux%u, "
                         "%u macroblocks)",
                         w, h, kp__nv_codec_name(nv->codec), c->nMinWidth, c->nMinHeight,
                         c->nMaxWidth, c->nMaxHeight, c->nMaxMBCount);
    return KP_OK;
}

static int CUDAAPI kp__nv_sequence(void *user, CUVIDEOFORMAT *fmt) {
    struct kp__nvdec *nv = user;
    const kp_video_reader_info *in = &nv->r->info;
    int w = fmt->display_area.right - fmt->display_area.left,
        h = fmt->display_area.bottom - fmt->display_area.top;
    if (nv->dec) {
        if (fmt->coded_width == nv->coded_w && fmt->coded_height == nv->coded_h &&
            w == in->width && h == in->height)
            return (int)nv->surfaces;
        return kp__nv_fail(nv, kp__error(KP_ERR_UNSUPPORTED,
                                         "%s: the stream changes size from %dx%d to %dx%d: a size "
                                         "change mid-stream is not supported",
                                         nv->r->path, (int)in->width, (int)in->height, w, h));
    }
    if (fmt->chroma_format != cudaVideoChromaFormat_420 || fmt->bit_depth_luma_minus8 ||
        fmt->bit_depth_chroma_minus8)
        return kp__nv_fail(nv, kp__error(KP_ERR_UNSUPPORTED,
                                         "%s: %d-bit, chroma format %d: kpipe decodes 8-bit "
                                         "4:2:0 on NVDEC",
                                         nv->r->path, 8 + fmt->bit_depth_luma_minus8,
                                         (int)fmt->chroma_format));
    if (w != in->width || h != in->height)
        return kp__nv_fail(nv, kp__error(KP_ERR_UNSUPPORTED,
                                         "%s: the bitstream's pictures are %dx%d, the "
                                         "container says %dx%d (a size change mid-stream "
                                         "is not supported)",
                                         nv->r->path, w, h, (int)in->width, (int)in->height));
    kp_status st = kp__nv_fits(nv, fmt->coded_width, fmt->coded_height);
    if (st != KP_OK) return kp__nv_fail(nv, st);
    unsigned n = fmt->min_num_decode_surfaces + KP__NV_EXTRA;
    if (n > KP__NV_QUEUE) n = KP__NV_QUEUE;
    CUVIDDECODECREATEINFO ci;
    memset(&ci, 0, sizeof ci);
    ci.ulWidth = fmt->coded_width;
    ci.ulHeight = fmt->coded_height;
    ci.ulMaxWidth = fmt->coded_width;
    ci.ulMaxHeight = fmt->coded_height;
    ci.ulNumDecodeSurfaces = n;
    ci.CodecType = fmt->codec;
    ci.ChromaFormat = cudaVideoChromaFormat_420;
    ci.ulCreationFlags = cudaVideoCreate_PreferCUVID;
    ci.display_area.left = (short)fmt->display_area.left;
    ci.display_area.top = (short)fmt->display_area.top;
    ci.display_area.right = (short)fmt->display_area.right;
    ci.display_area.bottom = (short)fmt->display_area.bottom;
    ci.OutputFormat = cudaVideoSurfaceFormat_NV12;
    ci.DeinterlaceMode = cudaVideoDeinterlaceMode_Weave;
    ci.ulTargetWidth = (unsigned)w; /* cropped, not scaled: bit-exact */
    ci.ulTargetHeight = (unsigned)h;
    ci.ulNumOutputSurfaces = 2;
    CUresult e = kp__cuvid->cuvidCreateDecoder(&nv->dec, &ci);
    if (e != CUDA_SUCCESS) {
        nv->dec = NULL;
        return kp__nv_fail(nv, kp__cu_error(e, "creating the decoder"));
    }
    nv->surfaces = n;
    nv->coded_w = fmt->coded_width;
    nv->coded_h = fmt->coded_height;
    return (int)n;
}

static int CUDAAPI kp__nv_decode(void *user, CUVIDPICPARAMS *pic) {
    struct kp__nvdec *nv = user;
    if (!nv->dec)
        return kp__nv_fail(nv, kp__error(KP_ERR_PARSE, "%s: a picture before any sequence header",
                                         nv->r->path));
    CUresult e = kp__cuvid->cuvidDecodePicture(nv->dec, pic);
    if (e != CUDA_SUCCESS) return kp__nv_fail(nv, kp__cu_error(e, "decoding a picture"));
    return 1;
}

static int CUDAAPI kp__nv_display(void *user, CUVIDPARSERDISPINFO *d) {
    struct kp__nvdec *nv = user;
    if (!d) return 1; /* the end of the stream */
    if (nv->qn == KP__NV_QUEUE)
        return kp__nv_fail(nv, kp__error(KP_ERR_STATE, "NVDEC: more than %d pictures to output",
                                         KP__NV_QUEUE));
    nv->q[(nv->qh + nv->qn++) % KP__NV_QUEUE] = *d;
    return 1;
}

void kp__nvdec_close(struct kp__nvdec *nv) {
    if (!nv) return;
    if (nv->ctx) {
        CUcontext dummy;
        if (kp__cu->cuCtxPushCurrent(nv->ctx) == CUDA_SUCCESS) {
            if (nv->dec) kp__cuvid->cuvidDestroyDecoder(nv->dec);
            if (nv->parser) kp__cuvid->cuvidDestroyVideoParser(nv->parser);
            kp__cu->cuCtxPopCurrent(&dummy);
        }
        kp__cu->cuDevicePrimaryCtxRelease(nv->cudev);
    }
    av_bsf_free(&nv->bsf);
    av_packet_free(&nv->fpkt);
    kp__free(nv);
}

static kp_status kp__nv_setup(struct kp__nvdec *nv) {
    kp_video_reader_t r = nv->r;
    int ordinal = 0;
    const char *colon = strchr(kp_device_name(r->dev), ':');
    if (colon) ordinal = atoi(colon + 1);
    KP__CU(kp__cu->cuDeviceGet(&nv->cudev, ordinal), "cuDeviceGet");
    CUresult e = kp__cu->cuDevicePrimaryCtxRetain(&nv->ctx, nv->cudev);
    if (e != CUDA_SUCCESS) {
        nv->ctx = NULL;
        return kp__cu_error(e, "retaining the device's context");
    }
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    CUcontext dummy;
    memset(&nv->caps, 0, sizeof nv->caps);
    nv->caps.eCodecType = nv->codec;
    nv->caps.eChromaFormat = cudaVideoChromaFormat_420;
    e = kp__cuvid->cuvidGetDecoderCaps ? kp__cuvid->cuvidGetDecoderCaps(&nv->caps)
                                       : (CUresult)801 /* CUDA_ERROR_NOT_SUPPORTED */;
    kp__cu->cuCtxPopCurrent(&dummy);
    if (e != CUDA_SUCCESS) return kp__cu_error(e, "cuvidGetDecoderCaps");
    KP_CHECK(kp__nv_fits(nv, (unsigned)r->info.width, (unsigned)r->info.height));

    const AVBitStreamFilter *f =
        av_bsf_get_by_name(nv->codec == cudaVideoCodec_H264 ? "h264_mp4toannexb" : "hevc_mp4toannexb");
    if (!f) return kp__error(KP_ERR_UNSUPPORTED, "this FFmpeg lacks the mp4toannexb filters");
    int ae = av_bsf_alloc(f, &nv->bsf);
    if (ae >= 0) ae = avcodec_parameters_copy(nv->bsf->par_in, r->st->codecpar);
    if (ae >= 0) {
        nv->bsf->time_base_in = r->st->time_base;
        ae = av_bsf_init(nv->bsf);
    }
    if (ae < 0) return kp__av_error(ae, KP_ERR_PARSE, "%s: the bitstream filter", r->path);
    if (!(nv->fpkt = av_packet_alloc())) return kp__error(KP_ERR_OUT_OF_MEMORY, "NVDEC: no memory");

    CUVIDPARSERPARAMS pp;
    memset(&pp, 0, sizeof pp);
    pp.CodecType = nv->codec;
    pp.ulMaxNumDecodeSurfaces = 1; /* the sequence callback gives the number */
    pp.ulMaxDisplayDelay = 4;      /* lets decode run ahead of output */
    pp.pUserData = nv;
    pp.pfnSequenceCallback = kp__nv_sequence;
    pp.pfnDecodePicture = kp__nv_decode;
    pp.pfnDisplayPicture = kp__nv_display;
    KP__CU(kp__cuvid->cuvidCreateVideoParser(&nv->parser, &pp), "creating the parser");
    return KP_OK;
}

static kp_status kp__nv_feed(struct kp__nvdec *nv);

kp_status kp__nvdec_open(kp_video_reader_t r) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, kp__nv_load);
    if (!kp__cu || !kp__cuvid) return kp__error(KP_ERR_UNSUPPORTED, "NVDEC: %s", kp__nv_why);
    struct kp__nvdec *nv = kp__calloc(1, sizeof *nv);
    if (!nv) return kp__error(KP_ERR_OUT_OF_MEMORY, "NVDEC: no memory");
    nv->r = r;
    nv->codec = r->st->codecpar->codec_id == AV_CODEC_ID_H264 ? cudaVideoCodec_H264
                                                              : cudaVideoCodec_HEVC;
    kp_status st = kp__nv_setup(nv);
    if (st != KP_OK) {
        kp__nvdec_close(nv);
        return st;
    }
    r->nv = nv;
    snprintf(r->info.decoder, sizeof r->info.decoder, "nvdec");
    r->info.format = KP_PIXEL_NV12;
    /* The decoder is made now, not at the first frame: creating one costs
     * tens of milliseconds (and the driver makes them one at a time), which
     * would otherwise stall the first frame of every stream of a running
     * flow. The packets parsed to reach the first sequence header are
     * decoded as usual; a failure here is the first frame's error. */
    while (!nv->dec && !nv->eos_sent) {
        st = kp__nv_feed(nv);
        if (st != KP_OK) {
            r->failed = true;
            r->fail_status = st;
            snprintf(r->fail_detail, sizeof r->fail_detail, "%s", kp_last_error());
            kp_clear_error();
            break;
        }
    }
    return KP_OK;
}

/* The next packet after the bitstream filter into nv->fpkt; KP_ERR_NOT_FOUND
 * once the filter has given everything. */
static kp_status kp__nv_packet(struct kp__nvdec *nv) {
    kp_video_reader_t r = nv->r;
    for (;;) {
        int e = av_bsf_receive_packet(nv->bsf, nv->fpkt);
        if (e == 0) return KP_OK;
        if (e == AVERROR_EOF) return KP_ERR_NOT_FOUND;
        if (e != AVERROR(EAGAIN))
            return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream at packet %llu", r->path,
                                (unsigned long long)r->packets);
        kp_status st = kp__demux_next(r);
        if (st == KP_ERR_NOT_FOUND) {
            e = av_bsf_send_packet(nv->bsf, NULL);
        } else {
            KP_CHECK(st);
            e = av_bsf_send_packet(nv->bsf, r->pkt); /* takes the packet's data */
            av_packet_unref(r->pkt);
        }
        if (e < 0)
            return kp__av_error(e, KP_ERR_PARSE, "%s: a corrupt bitstream at packet %llu", r->path,
                                (unsigned long long)r->packets);
    }
}

/* Feeds the parser one packet, or the end of the stream. */
static kp_status kp__nv_feed(struct kp__nvdec *nv) {
    CUVIDSOURCEDATAPACKET p;
    memset(&p, 0, sizeof p);
    kp_status st = kp__nv_packet(nv);
    if (st == KP_ERR_NOT_FOUND) {
        p.flags = CUVID_PKT_ENDOFSTREAM;
        nv->eos_sent = true;
    } else {
        KP_CHECK(st);
        p.payload = nv->fpkt->data;
        p.payload_size = (unsigned long)nv->fpkt->size;
        if (nv->fpkt->pts != AV_NOPTS_VALUE) {
            p.flags = CUVID_PKT_TIMESTAMP;
            p.timestamp = nv->fpkt->pts;
        }
    }
    CUcontext dummy;
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    CUresult e = kp__cuvid->cuvidParseVideoData(nv->parser, &p);
    kp__cu->cuCtxPopCurrent(&dummy);
    av_packet_unref(nv->fpkt);
    if (nv->cb_status != KP_OK) return kp__error(nv->cb_status, "%s", nv->cb_detail);
    if (e != CUDA_SUCCESS) return kp__cu_error(e, "parsing a packet");
    return KP_OK;
}

/* Maps a queued picture, copies it to dst on the caller's stream, unmaps. */
static kp_status kp__nv_output(struct kp__nvdec *nv, const CUVIDPARSERDISPINFO *d, CUstream s,
                               void *dst) {
    const kp_video_reader_info *in = &nv->r->info;
    CUVIDGETDECODESTATUS ds;
    memset(&ds, 0, sizeof ds);
    if (kp__cuvid->cuvidGetDecodeStatus(nv->dec, d->picture_index, &ds) == CUDA_SUCCESS &&
        (ds.decodeStatus == cuvidDecodeStatus_Error ||
         ds.decodeStatus == cuvidDecodeStatus_Error_Concealed))
        return kp__error(KP_ERR_PARSE, "%s: a corrupt bitstream: NVDEC failed on a picture",
                         nv->r->path);
    CUVIDPROCPARAMS pp;
    memset(&pp, 0, sizeof pp);
    pp.progressive_frame = d->progressive_frame;
    pp.top_field_first = d->top_field_first;
    pp.unpaired_field = d->repeat_first_field < 0;
    pp.output_stream = s;
    unsigned long long src = 0;
    unsigned pitch = 0;
    KP__CU(kp__cuvid->cuvidMapVideoFrame(nv->dec, d->picture_index, &src, &pitch, &pp),
           "mapping a picture");
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = (CUdeviceptr)src;
    c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = (CUdeviceptr)(uintptr_t)dst;
    c.dstPitch = (size_t)in->pitch;
    c.WidthInBytes = (size_t)in->width;
    c.Height = (size_t)in->height;
    CUresult e = kp__cu->cuMemcpy2DAsync(&c, s);
    if (e == CUDA_SUCCESS) { /* the chroma plane follows the (even) surface height */
        c.srcDevice = (CUdeviceptr)(src + (unsigned long long)pitch * (((unsigned)in->height + 1) & ~1u));
        c.dstDevice = (CUdeviceptr)((uintptr_t)dst + (size_t)(in->pitch * in->height));
        c.Height = (size_t)in->height / 2;
        e = kp__cu->cuMemcpy2DAsync(&c, s);
    }
    /* the surface goes back once the copies have read it */
    CUresult se = e == CUDA_SUCCESS ? kp__cu->cuStreamSynchronize(s) : CUDA_SUCCESS;
    CUresult ue = kp__cuvid->cuvidUnmapVideoFrame(nv->dec, src);
    if (e != CUDA_SUCCESS) return kp__cu_error(e, "copying a picture");
    if (se != CUDA_SUCCESS) return kp__cu_error(se, "waiting for a picture's copy");
    if (ue != CUDA_SUCCESS) return kp__cu_error(ue, "unmapping a picture");
    return KP_OK;
}

kp_status kp__nvdec_next(kp_video_reader_t r, kp_stream_t s, void *dst, kp_video_frame *vf,
                         bool *eos) {
    struct kp__nvdec *nv = r->nv;
    while (!nv->qn) {
        if (nv->eos_sent) {
            *eos = true;
            return KP_OK;
        }
        KP_CHECK(kp__nv_feed(nv));
    }
    CUVIDPARSERDISPINFO d = nv->q[nv->qh];
    nv->qh = (nv->qh + 1) % KP__NV_QUEUE;
    nv->qn--;
    CUcontext dummy;
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    kp_status st = kp__nv_output(nv, &d, (CUstream)kp_stream_native(s), dst);
    kp__cu->cuCtxPopCurrent(&dummy);
    KP_CHECK(st);
    r->next++;
    const kp_video_reader_info *in = &r->info;
    *vf = (kp_video_frame){KP_PIXEL_NV12,
                           in->width,
                           in->height,
                           in->pitch,
                           d.timestamp,
                           {in->time_base[0], in->time_base[1]},
                           {in->rate[0], in->rate[1]},
                           r->full_range};
    return KP_OK;
}
