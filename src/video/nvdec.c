/* NVDEC: one session's parser, decoder and output, through the driver's
 * entry points that decoders.c loads at run time (and where the pool of
 * idle decoders lives); the reader's decoder kp__nvdec_decoder
 * (ffmpeg-impl.h says how a reader uses one).
 *
 * Packets come from the reader's demuxer through the mp4-to-Annex-B
 * bitstream filter, one at a time, into the parser; its callbacks run on
 * the calling thread: the sequence callback checks the stream against the
 * decoder's limits and takes a decoder (from the pool, or a new one made
 * for the reader's largest size); at a size change mid-stream it copies
 * out the pictures still queued and reconfigures the decoder in place. The
 * decode callback starts a picture on the engine, the display callback
 * queues the picture for output. A packet is fed only when that queue is
 * empty, and the decoder has KP__NV_EXTRA surfaces over the parser's
 * minimum: the parser cycles through its surfaces, so a picture queued for
 * output is never decoded over before it is copied. Each output picture is
 * mapped, copied on the caller's stream into the destination (device to
 * device, at the reader's pitch), and unmapped once the copy has finished.
 * The flush at the end drains the delayed pictures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ffmpeg-impl.h"
#include "nvdec-impl.h"

#define KP__NV_QUEUE 32 /* display queue: every surface at most */
#define KP__NV_EXTRA 8  /* decode surfaces over the parser's minimum */

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
    unsigned max_w, max_h; /* what the decoder was made for: a reconfigure stays within */
    CUVIDPARSERDISPINFO q[KP__NV_QUEUE];
    unsigned qh, qn;
    bool eos_sent;
    uint8_t *seq; /* the parameter sets as Annex B (kp__param_sets) */
    size_t seq_len;
    int cur_w, cur_h; /* the size of the pictures queued now */
    CUstream stream;  /* the caller's, while a frame is asked for */
    /* pictures taken out before a size change (kp__nv_resize), handed on
     * before the queue; their device frames are kept for the next */
    struct kp__nv_held {
        void *buf;
        int w, h;
        int64_t pts;
    } held[KP__NV_QUEUE];
    unsigned held_h, held_n;
    /* the picture next gave and output takes: a queued one (out), or a
     * held one (out_held, not NULL) */
    CUVIDPARSERDISPINFO out;
    struct kp__nv_held *out_held;
    bool broken;         /* a device error: the decoder is not pooled */
    kp_status cb_status; /* a callback's error, its detail in cb_detail */
    char cb_detail[400];
    uint64_t t_caps, t_parser; /* the open's phases, ns (logged at debug) */
};

#define KP__CU(call, what)                                           \
    do {                                                             \
        CUresult kp__e = (call);                                     \
        if (kp__e != CUDA_SUCCESS) return kp__cu_error(kp__e, what); \
    } while (0)

static int kp__nv_fail(struct kp__nvdec *nv, kp_status st) {
    nv->cb_status = st;
    snprintf(nv->cb_detail, sizeof nv->cb_detail, "%s", kp_last_error());
    return 0; /* stops the parser */
}

/* What a reconfigure for fmt's sequence takes: its coded size, its display
 * area cropped (not scaled: bit-exact) to w x h, `surfaces`. */
static void kp__nv_reconf_info(const CUVIDEOFORMAT *fmt, unsigned w, unsigned h, unsigned surfaces,
                               CUVIDRECONFIGUREDECODERINFO *ri) {
    memset(ri, 0, sizeof *ri);
    ri->ulWidth = fmt->coded_width;
    ri->ulHeight = fmt->coded_height;
    ri->ulTargetWidth = w;
    ri->ulTargetHeight = h;
    ri->ulNumDecodeSurfaces = surfaces;
    ri->display_area.left = (short)fmt->display_area.left;
    ri->display_area.top = (short)fmt->display_area.top;
    ri->display_area.right = (short)fmt->display_area.right;
    ri->display_area.bottom = (short)fmt->display_area.bottom;
    ri->target_rect.right = (short)w;
    ri->target_rect.bottom = (short)h;
}

/* A decoder for fmt in nv->dec: an idle one from the pool, reconfigured, or
 * a new one made for the common size at or above the larger of the coded
 * size and the reader's maximum, so that later sizes reconfigure it. */
static kp_status kp__nv_make(struct kp__nvdec *nv, const CUVIDEOFORMAT *fmt, unsigned w, unsigned h,
                             unsigned n) {
    CUVIDRECONFIGUREDECODERINFO ri;
    kp__nv_idle idle;
    while (kp__pool_take(nv->cudev, fmt->codec, fmt->coded_width, fmt->coded_height, n, &idle)) {
        kp__nv_reconf_info(fmt, w, h, idle.surfaces, &ri);
        if (kp__cuvid->cuvidReconfigureDecoder &&
            kp__cuvid->cuvidReconfigureDecoder(idle.dec, &ri) == CUDA_SUCCESS) {
            kp__cu->cuDevicePrimaryCtxRelease(idle.cudev); /* nv holds the context already */
            kp__pool_count(KP__POOL_REUSED);
            nv->dec = idle.dec;
            nv->surfaces = idle.surfaces;
            nv->max_w = idle.max_w;
            nv->max_h = idle.max_h;
            return KP_OK;
        }
        kp__nv_destroy(idle.dec, idle.ctx, idle.cudev); /* it would not: the next, or a new one */
        kp__pool_count(KP__POOL_DESTROYED);
    }
    const kp_video_reader_info *in = &nv->r->info;
    unsigned mw = (unsigned)(in->max_width + 15) & ~15u,
             mh = (unsigned)(in->max_height + 15) & ~15u;
    if (mw < fmt->coded_width) mw = fmt->coded_width;
    if (mh < fmt->coded_height) mh = fmt->coded_height;
    /* the maximum is beyond the engine: this size */
    if (kp__nv_fits(&nv->caps, nv->codec, mw, mh) != KP_OK) {
        kp_clear_error();
        mw = fmt->coded_width;
        mh = fmt->coded_height;
    }
    unsigned bw, bh;
    kp__nv_bucket(&nv->caps, mw, mh, &bw, &bh);
    CUVIDDECODECREATEINFO ci;
    memset(&ci, 0, sizeof ci);
    ci.ulWidth = fmt->coded_width;
    ci.ulHeight = fmt->coded_height;
    ci.ulMaxWidth = bw;
    ci.ulMaxHeight = bh;
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
    ci.ulTargetWidth = w;
    ci.ulTargetHeight = h;
    ci.ulNumOutputSurfaces = 2;
    CUresult e = kp__cuvid->cuvidCreateDecoder(&nv->dec, &ci);
    if (e != CUDA_SUCCESS) {
        nv->dec = NULL;
        return kp__cu_error(e, "creating the decoder");
    }
    kp__pool_count(KP__POOL_CREATED);
    nv->surfaces = n;
    nv->max_w = bw;
    nv->max_h = bh;
    return KP_OK;
}

static kp_status kp__nv_output(struct kp__nvdec *nv, const CUVIDPARSERDISPINFO *d, CUstream s,
                               void *dst);

/* A size change: the pictures still queued for output belong to the old
 * size, and a reconfigure takes their surfaces, so each is copied out
 * first into a held device frame (at the reader's pitch), handed on before
 * the queue. Then the decoder is reconfigured in place, or, when the new
 * size is beyond what it was made for, freed and another taken. */
static kp_status kp__nv_resize(struct kp__nvdec *nv, const CUVIDEOFORMAT *fmt, unsigned w,
                               unsigned h, unsigned n) {
    if (nv->held_n + nv->qn > KP__NV_QUEUE)
        return kp__error(KP_ERR_STATE, "NVDEC: more than %d pictures held over size changes",
                         KP__NV_QUEUE);
    while (nv->qn) {
        struct kp__nv_held *e = &nv->held[(nv->held_h + nv->held_n) % KP__NV_QUEUE];
        if (!e->buf) KP_CHECK(kp_malloc(nv->r->dev, nv->r->info.frame_bytes, &e->buf));
        const CUVIDPARSERDISPINFO d = nv->q[nv->qh];
        KP_CHECK(kp__nv_output(nv, &d, nv->stream, e->buf));
        nv->qh = (nv->qh + 1) % KP__NV_QUEUE;
        nv->qn--;
        e->w = nv->cur_w;
        e->h = nv->cur_h;
        e->pts = d.timestamp;
        nv->held_n++;
    }
    if (fmt->coded_width <= nv->max_w && fmt->coded_height <= nv->max_h && n <= nv->surfaces &&
        kp__cuvid->cuvidReconfigureDecoder) {
        CUVIDRECONFIGUREDECODERINFO ri;
        kp__nv_reconf_info(fmt, w, h, nv->surfaces, &ri);
        CUresult e = kp__cuvid->cuvidReconfigureDecoder(nv->dec, &ri);
        if (e == CUDA_SUCCESS) return KP_OK;
        nv->broken = true;
        return kp__cu_error(e, "reconfiguring the decoder for a new size");
    }
    kp__cuvid->cuvidDestroyDecoder(nv->dec);
    kp__pool_count(KP__POOL_DESTROYED);
    nv->dec = NULL;
    return kp__nv_make(nv, fmt, w, h, n);
}

static int CUDAAPI kp__nv_sequence(void *user, CUVIDEOFORMAT *fmt) {
    struct kp__nvdec *nv = user;
    const kp_video_reader_info *in = &nv->r->info;
    int w = fmt->display_area.right - fmt->display_area.left,
        h = fmt->display_area.bottom - fmt->display_area.top;
    /* the bitstream says (the container may not, and its header is not
     * always probed) */
    if (fmt->video_signal_description.video_full_range_flag) nv->r->full_range = true;
    int32_t m = kp__video_matrix_of(fmt->video_signal_description.matrix_coefficients);
    if (m != KP_VIDEO_MATRIX_UNKNOWN) nv->r->matrix = m;
    if (nv->dec && fmt->coded_width == nv->coded_w && fmt->coded_height == nv->coded_h &&
        w == nv->cur_w && h == nv->cur_h)
        return (int)nv->surfaces;
    if (fmt->chroma_format != cudaVideoChromaFormat_420 || fmt->bit_depth_luma_minus8 ||
        fmt->bit_depth_chroma_minus8)
        return kp__nv_fail(nv, kp__error(KP_ERR_UNSUPPORTED,
                                         "%s: %d-bit, chroma format %d: kpipe decodes 8-bit "
                                         "4:2:0 on NVDEC",
                                         nv->r->path, 8 + fmt->bit_depth_luma_minus8,
                                         (int)fmt->chroma_format));
    /* the container's size may be any the stream takes (MPEG-TS gives the
     * last one its probe saw): each picture is described by its own, and
     * the reader's maximum bounds them */
    kp_status st = kp__video_size_check(nv->r->path, nv->r->next, w, h, (int)in->max_width,
                                        (int)in->max_height);
    if (st == KP_OK) st = kp__nv_fits(&nv->caps, nv->codec, fmt->coded_width, fmt->coded_height);
    if (st != KP_OK) return kp__nv_fail(nv, st);
    unsigned n = fmt->min_num_decode_surfaces + KP__NV_EXTRA;
    if (n > KP__NV_QUEUE) n = KP__NV_QUEUE;
    st = nv->dec ? kp__nv_resize(nv, fmt, (unsigned)w, (unsigned)h, n)
                 : kp__nv_make(nv, fmt, (unsigned)w, (unsigned)h, n);
    if (st != KP_OK) return kp__nv_fail(nv, st);
    nv->coded_w = fmt->coded_width;
    nv->coded_h = fmt->coded_height;
    nv->cur_w = w;
    nv->cur_h = h;
    return (int)nv->surfaces;
}

static int CUDAAPI kp__nv_decode(void *user, CUVIDPICPARAMS *pic) {
    struct kp__nvdec *nv = user;
    if (!nv->dec)
        return kp__nv_fail(
            nv, kp__error(KP_ERR_PARSE, "%s: a picture before any sequence header", nv->r->path));
    CUresult e = kp__cuvid->cuvidDecodePicture(nv->dec, pic);
    if (e != CUDA_SUCCESS) {
        nv->broken = true;
        return kp__nv_fail(nv, kp__cu_error(e, "decoding a picture"));
    }
    return 1;
}

static int CUDAAPI kp__nv_display(void *user, CUVIDPARSERDISPINFO *d) {
    struct kp__nvdec *nv = user;
    if (!d) return 1; /* the end of the stream */
    if (nv->qn == KP__NV_QUEUE)
        return kp__nv_fail(
            nv, kp__error(KP_ERR_STATE, "NVDEC: more than %d pictures to output", KP__NV_QUEUE));
    nv->q[(nv->qh + nv->qn++) % KP__NV_QUEUE] = *d;
    return 1;
}

static void kp__nvdec_close(void *ctx) {
    struct kp__nvdec *nv = ctx;
    if (!nv) return;
    if (nv->ctx) {
        CUcontext dummy;
        bool pooled = false;
        if (kp__cu->cuCtxPushCurrent(nv->ctx) == CUDA_SUCCESS) {
            if (nv->parser) kp__cuvid->cuvidDestroyVideoParser(nv->parser);
            /* the decoder goes to the pool with the context hold, or away */
            if (nv->dec) {
                kp__nv_idle d = {.dec = nv->dec,
                                 .cudev = nv->cudev,
                                 .ctx = nv->ctx,
                                 .codec = nv->codec,
                                 .max_w = nv->max_w,
                                 .max_h = nv->max_h,
                                 .surfaces = nv->surfaces};
                pooled = !nv->broken && kp__pool_give(&d);
                if (!pooled) {
                    kp__cuvid->cuvidDestroyDecoder(nv->dec);
                    kp__pool_count(KP__POOL_DESTROYED);
                }
            }
            kp__cu->cuCtxPopCurrent(&dummy);
        }
        if (!pooled) kp__cu->cuDevicePrimaryCtxRelease(nv->cudev);
    }
    for (int i = 0; i < KP__NV_QUEUE; i++)
        if (nv->held[i].buf) kp_free(nv->r->dev, nv->held[i].buf);
    av_bsf_free(&nv->bsf);
    av_packet_free(&nv->fpkt);
    kp__free(nv->seq);
    kp__free(nv);
}

static kp_status kp__nv_parser(struct kp__nvdec *nv) {
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

/* A new parser, told the stream's parameter sets first (nv->seq): where
 * the container gives them apart from the frames (MP4's avcC, an RTSP
 * server's SDP) and the bitstream filter leaves them there (Annex B
 * already, as from RTSP), the frames alone never start a sequence. */
static kp_status kp__nv_parser_seeded(struct kp__nvdec *nv) {
    CUcontext dummy;
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    if (nv->parser) kp__cuvid->cuvidDestroyVideoParser(nv->parser);
    nv->parser = NULL;
    kp_status st = kp__nv_parser(nv);
    CUresult e = CUDA_SUCCESS;
    if (st == KP_OK && nv->seq_len) {
        CUVIDSOURCEDATAPACKET p;
        memset(&p, 0, sizeof p);
        p.payload = nv->seq;
        p.payload_size = (unsigned long)nv->seq_len;
        e = kp__cuvid->cuvidParseVideoData(nv->parser, &p);
    }
    kp__cu->cuCtxPopCurrent(&dummy);
    KP_CHECK(st);
    /* what the parameter sets made the callbacks find (an unsupported
     * stream, a failed decoder) stays in cb_status for the caller */
    if (e != CUDA_SUCCESS && nv->cb_status == KP_OK)
        return kp__cu_error(e, "parsing the parameter sets");
    return KP_OK;
}

/* Forgets what the parser and the output queue hold (a seek); the decoder
 * stays. */
static kp_status kp__nvdec_reset(void *ctx) {
    struct kp__nvdec *nv = ctx;
    KP_CHECK(kp__nv_parser_seeded(nv));
    if (nv->cb_status != KP_OK) return kp__error(nv->cb_status, "%s", nv->cb_detail);
    av_bsf_flush(nv->bsf);
    av_packet_unref(nv->fpkt);
    nv->qh = nv->qn = nv->held_h = nv->held_n = 0;
    nv->eos_sent = false;
    return KP_OK;
}

/* The context comes from the driver through the loader, not from the
 * device backend: the cuda backend speaks only the runtime API, which
 * never hands out a CUcontext, and giving it one would link the driver's
 * library into kpipe (src/CMakeLists.txt keeps it out, so that programs
 * start on machines without a GPU). Nothing is lost: the runtime works in
 * the device's primary context, which is what retaining it by the
 * device's CUDA ordinal gives here, so both share one context. */
static kp_status kp__nv_setup(struct kp__nvdec *nv) {
    kp_video_reader_t r = nv->r;
    kp_device_caps caps = KP_DEVICE_CAPS_INIT;
    KP_CHECK(kp_device_query_caps(r->dev, &caps));
    if (caps.native_ordinal < 0)
        return kp__error(KP_ERR_UNSUPPORTED, "NVDEC: %s has no CUDA device ordinal",
                         kp_device_name(r->dev));
    KP__CU(kp__cu->cuDeviceGet(&nv->cudev, caps.native_ordinal), "cuDeviceGet");
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
    e = kp__nv_caps(nv->cudev, &nv->caps);
    kp__cu->cuCtxPopCurrent(&dummy);
    if (e != CUDA_SUCCESS) return kp__cu_error(e, "cuvidGetDecoderCaps");
    nv->t_caps = kp__mono_ns();
    KP_CHECK(kp__nv_fits(&nv->caps, nv->codec, (unsigned)r->info.width, (unsigned)r->info.height));

    const AVBitStreamFilter *f = av_bsf_get_by_name(
        nv->codec == cudaVideoCodec_H264 ? "h264_mp4toannexb" : "hevc_mp4toannexb");
    if (!f) return kp__error(KP_ERR_UNSUPPORTED, "this FFmpeg lacks the mp4toannexb filters");
    int ae = av_bsf_alloc(f, &nv->bsf);
    if (ae >= 0) ae = avcodec_parameters_copy(nv->bsf->par_in, r->st->codecpar);
    if (ae >= 0) {
        nv->bsf->time_base_in = r->st->time_base;
        ae = av_bsf_init(nv->bsf);
    }
    if (ae < 0) return kp__av_error(ae, KP_ERR_PARSE, "%s: the bitstream filter", r->path);
    if (!(nv->fpkt = av_packet_alloc())) return kp__error(KP_ERR_OUT_OF_MEMORY, "NVDEC: no memory");
    KP_CHECK(kp__param_sets(r->st->codecpar, &nv->seq, &nv->seq_len));
    kp_status st = kp__nv_parser_seeded(nv);
    nv->t_parser = kp__mono_ns();
    return st;
}

static kp_status kp__nv_feed(struct kp__nvdec *nv);

/* Opens a session for r's stream, or says why not (KP_ERR_UNSUPPORTED
 * with the reason in the detail). */
static kp_status kp__nvdec_open(kp_video_reader_t r, void **ctx) {
    KP_CHECK(kp__nv_driver());
    const uint64_t t0 = kp__mono_ns();
    struct kp__nvdec *nv = kp__calloc(1, sizeof *nv);
    if (!nv) return kp__error(KP_ERR_OUT_OF_MEMORY, "NVDEC: no memory");
    nv->r = r;
    nv->codec =
        r->st->codecpar->codec_id == AV_CODEC_ID_H264 ? cudaVideoCodec_H264 : cudaVideoCodec_HEVC;
    kp_status st = kp__nv_setup(nv);
    if (st != KP_OK) {
        kp__nvdec_close(nv);
        return st;
    }
    *ctx = nv;
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
    if (KP_LOG_ENABLED(KP_LOG_DEBUG)) {
        const uint64_t t1 = kp__mono_ns();
        kp__log(KP_LOG_DEBUG,
                "%s: NVDEC session in %.2f ms: context and caps %.2f, filter and parser %.2f, "
                "decoder to the first sequence header %.2f",
                r->path, (double)(t1 - t0) / 1e6, (double)(nv->t_caps - t0) / 1e6,
                (double)(nv->t_parser - nv->t_caps) / 1e6, (double)(t1 - nv->t_parser) / 1e6);
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

/* Maps a queued picture (of the current size), copies it to dst on the
 * caller's stream at the reader's pitch, unmaps. */
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
    c.WidthInBytes = (size_t)nv->cur_w;
    c.Height = (size_t)nv->cur_h;
    CUresult e = kp__cu->cuMemcpy2DAsync(&c, s);
    if (e == CUDA_SUCCESS) { /* the chroma plane follows the (even) surface height */
        c.srcDevice =
            (CUdeviceptr)(src + (unsigned long long)pitch * (((unsigned)nv->cur_h + 1) & ~1u));
        c.dstDevice = (CUdeviceptr)((uintptr_t)dst + (size_t)(in->pitch * nv->cur_h));
        c.Height = (size_t)nv->cur_h / 2;
        e = kp__cu->cuMemcpy2DAsync(&c, s);
    }
    /* the surface goes back once the copies have read it */
    CUresult se = e == CUDA_SUCCESS ? kp__cu->cuStreamSynchronize(s) : CUDA_SUCCESS;
    CUresult ue = kp__cuvid->cuvidUnmapVideoFrame(nv->dec, src);
    nv->broken |= e != CUDA_SUCCESS || se != CUDA_SUCCESS || ue != CUDA_SUCCESS;
    if (e != CUDA_SUCCESS) return kp__cu_error(e, "copying a picture");
    if (se != CUDA_SUCCESS) return kp__cu_error(se, "waiting for a picture's copy");
    if (ue != CUDA_SUCCESS) return kp__cu_error(ue, "unmapping a picture");
    return KP_OK;
}

/* Takes the next picture to hand on: the pictures held over a size change
 * (kp__nv_resize) first, then the output queue, fed one packet at a time
 * while it is empty. A picture outside a range is never mapped: the
 * reader drops it before output. */
static kp_status kp__nvdec_next(void *ctx, kp_stream_t s, int64_t *pts, bool *eos) {
    struct kp__nvdec *nv = ctx;
    nv->stream = (CUstream)kp_stream_native(s); /* for a size change while feeding */
    while (!nv->qn && !nv->held_n) {
        if (nv->eos_sent) {
            *eos = true;
            return KP_OK;
        }
        KP_CHECK(kp__nv_feed(nv));
    }
    if (nv->held_n) {
        nv->out_held = &nv->held[nv->held_h];
        nv->held_h = (nv->held_h + 1) % KP__NV_QUEUE;
        nv->held_n--;
        *pts = nv->out_held->pts;
        return KP_OK;
    }
    nv->out_held = NULL;
    nv->out = nv->q[nv->qh];
    nv->qh = (nv->qh + 1) % KP__NV_QUEUE;
    nv->qn--;
    *pts = nv->out.timestamp;
    return KP_OK;
}

/* Hands on a held picture: its device frame into dst. */
static kp_status kp__nv_held_out(struct kp__nvdec *nv, const struct kp__nv_held *e, CUstream s,
                                 void *dst, kp_video_frame *vf) {
    kp_video_reader_t r = nv->r;
    const kp_video_reader_info *in = &r->info;
    CUcontext dummy;
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    CUresult ce =
        kp__cu->cuMemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)e->buf,
                                  (size_t)(in->pitch * e->h / 2 * 3), s);
    /* the held frame may be refilled at the next size change, on another stream */
    if (ce == CUDA_SUCCESS) ce = kp__cu->cuStreamSynchronize(s);
    kp__cu->cuCtxPopCurrent(&dummy);
    if (ce != CUDA_SUCCESS) return kp__cu_error(ce, "copying a held picture");
    *vf = (kp_video_frame){.format = KP_PIXEL_NV12,
                           .width = e->w,
                           .height = e->h,
                           .pitch = in->pitch,
                           .pts = e->pts,
                           .time_base = {in->time_base[0], in->time_base[1]},
                           .rate = {in->rate[0], in->rate[1]},
                           .full_range = r->full_range};
    return KP_OK;
}

static kp_status kp__nvdec_output(void *ctx, kp_stream_t s, void *dst, kp_video_frame *vf) {
    struct kp__nvdec *nv = ctx;
    kp_video_reader_t r = nv->r;
    const struct kp__nv_held *held = nv->out_held;
    nv->out_held = NULL;
    if (held) return kp__nv_held_out(nv, held, (CUstream)kp_stream_native(s), dst, vf);
    const CUVIDPARSERDISPINFO d = nv->out;
    CUcontext dummy;
    KP__CU(kp__cu->cuCtxPushCurrent(nv->ctx), "cuCtxPushCurrent");
    kp_status st = kp__nv_output(nv, &d, (CUstream)kp_stream_native(s), dst);
    kp__cu->cuCtxPopCurrent(&dummy);
    KP_CHECK(st);
    const kp_video_reader_info *in = &r->info;
    *vf = (kp_video_frame){.format = KP_PIXEL_NV12,
                           .width = nv->cur_w,
                           .height = nv->cur_h,
                           .pitch = in->pitch,
                           .pts = d.timestamp,
                           .time_base = {in->time_base[0], in->time_base[1]},
                           .rate = {in->rate[0], in->rate[1]},
                           .full_range = r->full_range};
    return KP_OK;
}

static void kp__nvdec_drop(void *ctx) {
    struct kp__nvdec *nv = ctx;
    nv->out_held = NULL; /* a held frame stays for the next size change */
}

/* NVDEC takes 8-bit H.264 and HEVC, for devices whose memory is CUDA's,
 * in NV12. */
static const char *kp__nvdec_refuses(kp_video_reader_t r, const kp_device_caps *caps) {
    const enum AVCodecID id = r->st->codecpar->codec_id;
    if (r->cfg.format == KP_PIXEL_I420) return "I420 asked for: NVDEC gives NV12";
    /* NVDEC's pictures are CUDA memory, which only a device that both has
     * the engine and speaks CUDA can take */
    if (!caps->video_decode || !caps->native_api || strcmp(caps->native_api, "cuda") != 0)
        return "NVDEC decodes for cuda devices only";
    if (id != AV_CODEC_ID_H264 && id != AV_CODEC_ID_HEVC)
        return "kpipe decodes H.264 and HEVC on NVDEC";
    /* kpipe's NVDEC sessions output 8-bit NV12: a deeper stream (HEVC
       Main10) decodes in software, as P016, rather than cut to 8 bits */
    if (r->depth > 8) return "kpipe decodes 8-bit streams on NVDEC; deeper ones in software";
    return NULL;
}

const kp__video_decoder_i kp__nvdec_decoder = {
    .name = "nvdec",
    .kind = KP_VIDEO_DECODE_NVDEC,
    .refuses = kp__nvdec_refuses,
    .open = kp__nvdec_open,
    .next = kp__nvdec_next,
    .output = kp__nvdec_output,
    .drop = kp__nvdec_drop,
    .reset = kp__nvdec_reset,
    .close = kp__nvdec_close,
};
