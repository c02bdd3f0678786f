/* Video files on the GPU machine (bench/RESULTS.md, "Video files"):
 *
 *   decode only   the flow's video source (NVDEC) into a null sink, against
 *                 a hand-written NVDEC loop through the same loader (the
 *                 driver's parser and decoder, each picture mapped and
 *                 copied to a device buffer: the hardware's ceiling for one
 *                 session) and libavcodec's software decode on every core;
 *   end to end    NVDEC -> nv12_rgb -> sharpen -> engine add -> rgb_nv12 ->
 *                 libx264 (no NVENC on an H100), against each stage alone,
 *                 and the same work from a .y4m file of the same frames.
 *
 *   many streams  one video source of N streams of one 1080p clip (N NVDEC
 *                 sessions) as fast as they decode, and paced at 30
 *                 frames/s each (realtime): whether every stream keeps its
 *                 pace with no drop; against the hand loop on 1 and 7
 *                 threads at once.
 *
 *                 FFmpeg's own NVDEC path (ffmpeg_nvdec) in 1 and 7
 *                 processes; a batched pipeline for all streams against a
 *                 pipeline tick per frame, with each stream's latency.
 *
 *   bench_video DIR [FRAMES_1080 FRAMES_2160]   (DIR: where clips are made)
 *   bench_video DIR streams [FRAMES]            (many streams only) */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ffnvcodec/dynlink_loader.h>
#include <libavcodec/avcodec.h>
#include <libavcodec/bsf.h>
#include <libavformat/avformat.h>

#include <cuda_runtime_api.h>

#include "bench-check.h"
#include "kpipe/kpipe.h"

#define CHECK(x) KK(x)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static kp_device_t g_dev;

/* --- clips ------------------------------------------------------------------------- */
static void make_clip_gop(const char *path, int w, int h, int n, int64_t bitrate, int gop,
                          bool open_gop) {
    size_t bytes = (size_t)w * h * 3 / 2;
    uint8_t *host = malloc(bytes);
    void *dev;
    kp_stream_t s;
    kp_video_writer_t wr;
    CHECK(kp_stream_create(g_dev, &s));
    CHECK(kp_malloc(g_dev, bytes, &dev));
    kp_video_writer_config c = KP_VIDEO_WRITER_CONFIG_INIT;
    c.bitrate = bitrate;
    c.bframes = 3;
    c.preset = "veryfast";
    c.encoder = "libx264";
    c.gop = gop;
    c.open_gop = open_gop;
    CHECK(kp_video_writer_open(g_dev, path, &c, &wr));
    for (int i = 0; i < n; i++) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                host[(size_t)y * w + x] =
                    (uint8_t)(110 + 50 * sin((x + 4 * i) * 0.02) + 40 * cos((y * 0.03) + i * 0.1) +
                              ((x * 7 + y * 13 + i * 31) % 23));
        for (size_t k = (size_t)w * h; k < bytes; k++) host[k] = (uint8_t)(128 + (k + i) % 17);
        CHECK(kp_memcpy_htod(g_dev, dev, host, bytes));
        kp_video_frame f = {.format = KP_PIXEL_I420,
                            .width = w,
                            .height = h,
                            .pitch = w,
                            .pts = i,
                            .time_base = {1, 30},
                            .rate = {30, 1}};
        CHECK(kp_video_writer_write(wr, s, dev, bytes, &f));
    }
    CHECK(kp_video_writer_close(wr));
    kp_free(g_dev, dev);
    kp_stream_destroy(s);
    free(host);
}

static void make_clip(const char *path, int w, int h, int n, int64_t bitrate) {
    make_clip_gop(path, w, h, n, bitrate, 0, false);
}

/* --- the hand-written NVDEC loop --------------------------------------------------------- */
typedef struct hand {
    CudaFunctions *cu;
    CuvidFunctions *cv;
    CUvideodecoder dec;
    CUstream stream;
    CUdeviceptr out;
    unsigned w, h;
    long frames;
    /* false: each picture mapped and copied inside the display callback
     * on a blocking stream (the SDK sample's way); true: queued there, and
     * mapped after the parse call returns, with 8 spare surfaces, on a
     * non-blocking stream (kpipe's way) */
    bool deferred;
    CUVIDPARSERDISPINFO q[32];
    int qn;
} hand;

static int CUDAAPI hand_seq(void *u, CUVIDEOFORMAT *f) {
    hand *H = u;
    if (H->dec) return f->min_num_decode_surfaces;
    CUVIDDECODECREATEINFO ci = {0};
    ci.ulWidth = ci.ulMaxWidth = f->coded_width;
    ci.ulHeight = ci.ulMaxHeight = f->coded_height;
    ci.ulNumDecodeSurfaces = f->min_num_decode_surfaces + (H->deferred ? 8 : 4);
    ci.CodecType = f->codec;
    ci.ChromaFormat = f->chroma_format;
    ci.ulCreationFlags = cudaVideoCreate_PreferCUVID;
    ci.OutputFormat = cudaVideoSurfaceFormat_NV12;
    ci.DeinterlaceMode = cudaVideoDeinterlaceMode_Weave;
    H->w = (unsigned)(f->display_area.right - f->display_area.left);
    H->h = (unsigned)(f->display_area.bottom - f->display_area.top);
    ci.ulTargetWidth = H->w;
    ci.ulTargetHeight = H->h;
    ci.display_area.right = (short)f->display_area.right;
    ci.display_area.bottom = (short)f->display_area.bottom;
    ci.ulNumOutputSurfaces = 2;
    if (H->cv->cuvidCreateDecoder(&H->dec, &ci) != CUDA_SUCCESS) return 0;
    H->cu->cuMemAlloc(&H->out, (size_t)H->w * H->h * 3 / 2);
    return (int)ci.ulNumDecodeSurfaces;
}
static int CUDAAPI hand_decode(void *u, CUVIDPICPARAMS *p) {
    hand *H = u;
    return H->cv->cuvidDecodePicture(H->dec, p) == CUDA_SUCCESS;
}
static int hand_out(hand *H, const CUVIDPARSERDISPINFO *d);
static int CUDAAPI hand_display(void *u, CUVIDPARSERDISPINFO *d) {
    hand *H = u;
    if (!d) return 1;
    if (!H->deferred) return hand_out(H, d);
    if (H->qn == 32) return 0;
    H->q[H->qn++] = *d;
    return 1;
}
/* Maps a picture, copies it into the output buffer, waits, unmaps. */
static int hand_out(hand *H, const CUVIDPARSERDISPINFO *d) {
    CUVIDPROCPARAMS pp = {0};
    pp.progressive_frame = d->progressive_frame;
    pp.output_stream = H->stream;
    unsigned long long src;
    unsigned pitch;
    if (H->cv->cuvidMapVideoFrame(H->dec, d->picture_index, &src, &pitch, &pp) != CUDA_SUCCESS)
        return 0;
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.srcPitch = pitch;
    c.dstDevice = H->out;
    c.dstPitch = H->w;
    c.WidthInBytes = H->w;
    c.Height = H->h * 3 / 2; /* luma and chroma: the sample's layout, surface height = h */
    H->cu->cuMemcpy2DAsync(&c, H->stream);
    H->cu->cuStreamSynchronize(H->stream);
    H->cv->cuvidUnmapVideoFrame(H->dec, src);
    H->frames++;
    return 1;
}

/* The hand loop over one file: frames/s from the moment its decoder exists
 * (kpipe makes its decoders when a source opens, outside the timed run)
 * to the last picture copied. With `bar`, the loops of several threads
 * wait there for each other once their decoders exist, so they decode at
 * once; *t_end: when this one finished. */
static double hand_loop_at(const char *path, long *frames, bool deferred, pthread_barrier_t *bar,
                           double *t_end) {
    hand H = {0};
    H.deferred = deferred;
    if (cuda_load_functions(&H.cu, NULL) < 0 || cuvid_load_functions(&H.cv, NULL) < 0) return 0;
    H.cu->cuInit(0);
    CUdevice d;
    CUcontext ctx, dummy;
    H.cu->cuDeviceGet(&d, 0);
    H.cu->cuDevicePrimaryCtxRetain(&ctx, d);
    H.cu->cuCtxPushCurrent(ctx);
    /* kpipe's streams do not wait for the legacy default stream; a blocking
     * one (flag 0) would order each copy after everything on it */
    H.cu->cuStreamCreate(&H.stream, deferred ? CU_STREAM_NON_BLOCKING : 0);
    AVFormatContext *fmt = NULL;
    avformat_open_input(&fmt, path, NULL, NULL);
    avformat_find_stream_info(fmt, NULL);
    int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    AVBSFContext *bsf;
    bool hevc = fmt->streams[si]->codecpar->codec_id == AV_CODEC_ID_HEVC;
    av_bsf_alloc(av_bsf_get_by_name(hevc ? "hevc_mp4toannexb" : "h264_mp4toannexb"), &bsf);
    avcodec_parameters_copy(bsf->par_in, fmt->streams[si]->codecpar);
    av_bsf_init(bsf);
    CUVIDPARSERPARAMS pp = {0};
    pp.CodecType = hevc ? cudaVideoCodec_HEVC : cudaVideoCodec_H264;
    pp.ulMaxNumDecodeSurfaces = 1;
    pp.ulMaxDisplayDelay = 4;
    pp.pUserData = &H;
    pp.pfnSequenceCallback = hand_seq;
    pp.pfnDecodePicture = hand_decode;
    pp.pfnDisplayPicture = hand_display;
    CUvideoparser parser;
    H.cv->cuvidCreateVideoParser(&parser, &pp);
    AVPacket *pkt = av_packet_alloc();
    double t0 = 0;
    for (bool more = true; more;) {
        more = av_read_frame(fmt, pkt) >= 0;
        if (more && pkt->stream_index != si) {
            av_packet_unref(pkt);
            continue;
        }
        av_bsf_send_packet(bsf, more ? pkt : NULL);
        while (av_bsf_receive_packet(bsf, pkt) == 0) {
            CUVIDSOURCEDATAPACKET p = {0};
            p.payload = pkt->data;
            p.payload_size = (unsigned long)pkt->size;
            H.cv->cuvidParseVideoData(parser, &p);
            for (int i = 0; i < H.qn; i++) hand_out(&H, &H.q[i]);
            H.qn = 0;
            av_packet_unref(pkt);
            if (!t0 && H.dec) { /* the decoder exists: the timed run starts */
                if (bar) pthread_barrier_wait(bar);
                t0 = now_s();
            }
        }
    }
    CUVIDSOURCEDATAPACKET eos = {0};
    eos.flags = CUVID_PKT_ENDOFSTREAM;
    H.cv->cuvidParseVideoData(parser, &eos);
    for (int i = 0; i < H.qn; i++) hand_out(&H, &H.q[i]);
    if (t_end) *t_end = now_s();
    double t = now_s() - t0;
    H.cv->cuvidDestroyVideoParser(parser);
    H.cv->cuvidDestroyDecoder(H.dec);
    H.cu->cuMemFree(H.out);
    H.cu->cuStreamDestroy(H.stream);
    H.cu->cuCtxPopCurrent(&dummy);
    H.cu->cuDevicePrimaryCtxRelease(d);
    av_packet_free(&pkt);
    av_bsf_free(&bsf);
    avformat_close_input(&fmt);
    *frames = H.frames;
    return t > 0 ? H.frames / t : 0;
}

static double hand_loop(const char *path, long *frames, bool deferred) {
    return hand_loop_at(path, frames, deferred, NULL, NULL);
}

static size_t device_used(void) {
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return total - free_b;
}

/* device memory held by the last read_loop_n's reader, at its first frame */
static size_t g_read_held;

/* --- kpipe ---------------------------------------------------------------------------- */
/* The reader alone into one device buffer: frames/s. */
static double read_loop_n(const char *path, kp_video_decoder dec, int parallel, long *frames) {
    kp_video_reader_config c = KP_VIDEO_READER_CONFIG_INIT;
    c.decoder = dec;
    c.parallel = parallel;
    size_t before = device_used();
    kp_video_reader_t r;
    kp_video_reader_info in;
    CHECK(kp_video_reader_open(g_dev, path, &c, &r));
    CHECK(kp_video_reader_get_info(r, &in));
    kp_stream_t s;
    void *buf;
    CHECK(kp_stream_create(g_dev, &s));
    CHECK(kp_malloc(g_dev, in.frame_bytes, &buf));
    long n = 0;
    double t0 = now_s();
    for (;;) {
        kp_video_frame f;
        bool eos;
        CHECK(kp_video_reader_next(r, s, buf, in.frame_bytes, &f, &eos));
        if (eos) break;
        if (!n++) g_read_held = device_used() - before;
    }
    CHECK(kp_stream_sync(s));
    double t = now_s() - t0;
    kp_free(g_dev, buf);
    kp_stream_destroy(s);
    kp_video_reader_close(r);
    *frames = n;
    return n / t;
}

static double read_loop(const char *path, kp_video_decoder dec, long *frames) {
    return read_loop_n(path, dec, 0, frames);
}

/* Runs a flow; frames/s, with its health and (ss: up to cap, their
 * number into *n) its streams' figures. */
static double run_flow_streams(const char *json, kp_flow_snapshot *h, kp_flow_stream_stats *ss,
                               size_t cap, size_t *n) {
    kp_flow_t f;
    CHECK(kp_flow_create_from_json(g_dev, json, &f));
    double t0 = now_s();
    CHECK(kp_flow_start(f));
    CHECK(kp_flow_wait(f));
    double t = now_s() - t0;
    CHECK(kp_flow_health(f, h));
    if (ss) CHECK(kp_flow_streams(f, ss, cap, n));
    kp_flow_destroy(f);
    return h->frames_done / t;
}

/* Runs a flow; frames/s, with its health. */
static double run_flow(const char *json, kp_flow_snapshot *h, bool print) {
    double fps = run_flow_streams(json, h, NULL, 0, NULL);
    if (print)
        for (size_t i = 0; i < h->n_stages; i++)
            printf("    %-8s device p50 %8.1f us, host p50 %8.1f us, copies h2d %llu d2h %llu\n",
                   h->stages[i].name, h->stages[i].gpu_p50_us, h->stages[i].host_p50_us,
                   (unsigned long long)h->stages[i].copies.htod,
                   (unsigned long long)h->stages[i].copies.dtoh);
    return fps;
}

static const char *enhance(char *buf, size_t len, int w, int h, const char *fmt) {
    const char *in = fmt[0] == 'n' ? "nv12_rgb" : "i420_rgb",
               *out = fmt[0] == 'n' ? "rgb_nv12" : "rgb_i420";
    snprintf(buf, len,
             "{\"kpipe_spec\": 1, \"execution\": \"graph\", \"modules\": ["
             "{\"type\": \"%s\", \"id\": \"rgb\", \"params\": {\"width\": %d, \"height\": %d}},"
             "{\"type\": \"sharpen\", \"id\": \"d\", \"params\": {\"width\": %d, \"height\": %d}},"
             "{\"type\": \"engine\", \"id\": \"add\", \"params\": {\"size\": %d}},"
             "{\"type\": \"%s\", \"id\": \"out\", \"params\": {\"width\": %d, \"height\": %d}}],"
             "\"connections\": [\"rgb.output -> d.input\", \"rgb.output -> add.arg0\","
             " \"d.output -> add.arg1\", \"add.result0 -> out.input\"],"
             "\"inputs\": {\"frame\": \"rgb.input\"}, \"outputs\": {\"frame\": \"out.output\"}}",
             in, w, h, w, h, 3 * w * h, out, w, h);
    return buf;
}

/* A flow decoding `in` on NVDEC into libx264 (ultrafast) writing `out`. */
static void decode_encode(char *json, size_t len, const char *in, const char *out) {
    snprintf(json, len,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"decode\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": "
             "\"nvdec\"},"
             "{\"name\": \"encode\", \"sink\": \"video\", \"path\": \"%s\", \"preset\": "
             "\"ultrafast\"}]}",
             in, out);
}

static void bench_clip(const char *dir, int w, int h, int n, int64_t bitrate) {
    char clip[512], y4m[512], out[512], json[4096], pipe[2048];
    snprintf(clip, sizeof clip, "%s/clip_%d.mp4", dir, h);
    snprintf(y4m, sizeof y4m, "%s/clip_%d.y4m", dir, h);
    snprintf(out, sizeof out, "%s/out_%d.mp4", dir, h);
    double t0 = now_s();
    make_clip(clip, w, h, n, bitrate);
    printf("\n## %dx%d H.264, %lld b/s, B-frames, %d frames (made in %.1f s)\n", w, h,
           (long long)bitrate, n, now_s() - t0);
    long fh = 0, fr = 0, fs = 0;
    double hand_fps = hand_loop(clip, &fh, true);
    double reader_fps = read_loop(clip, KP_VIDEO_DECODE_NVDEC, &fr);
    double sw_fps = read_loop(clip, KP_VIDEO_DECODE_SOFTWARE, &fs);
    kp_flow_snapshot h1;
    snprintf(
        json, sizeof json,
        "{\"kpipe_flow\": 1, \"strict_no_host_copies\": true, \"stages\": ["
        "{\"name\": \"decode\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": \"nvdec\"},"
        "{\"name\": \"null\", \"sink\": \"null\"}]}",
        clip);
    double flow_fps = run_flow(json, &h1, false);
    printf("| decode only | frames/s | ratio to the hand loop |\n|---|---|---|\n");
    printf("| hand NVDEC loop (%ld frames) | %.0f | 1.00 |\n", fh, hand_fps);
    printf("| flow: video source (NVDEC) -> null, strict | %.0f | %.2f |\n", flow_fps,
           flow_fps / hand_fps);
    printf("| kp_video_reader_next loop (NVDEC, %ld frames) | %.0f | %.2f |\n", fr, reader_fps,
           reader_fps / hand_fps);
    printf("| libavcodec software, all cores (%ld frames) | %.0f | %.2f |\n", fs, sw_fps,
           sw_fps / hand_fps);
    printf("  frames in flight at most %zu; frame buffers %zu bytes\n", h1.max_frames_in_flight,
           h1.device_bytes);

    /* each stage alone: the pipeline (flow: decode -> enhance -> null, minus
     * decode by device time) and the encoder (flow: decode -> encode) */
    kp_flow_snapshot h2, h3, h4, h5;
    snprintf(
        json, sizeof json,
        "{\"kpipe_flow\": 1, \"stages\": ["
        "{\"name\": \"decode\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": \"nvdec\"},"
        "{\"name\": \"enhance\", \"pipeline\": %s},"
        "{\"name\": \"null\", \"sink\": \"null\"}]}",
        clip, enhance(pipe, sizeof pipe, w, h, "nv12"));
    double dec_enh_fps = run_flow(json, &h2, false);
    decode_encode(json, sizeof json, clip, out);
    double dec_enc_fps = run_flow(json, &h3, false);
    snprintf(
        json, sizeof json,
        "{\"kpipe_flow\": 1, \"stages\": ["
        "{\"name\": \"decode\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": \"nvdec\"},"
        "{\"name\": \"enhance\", \"pipeline\": %s},"
        "{\"name\": \"encode\", \"sink\": \"video\", \"path\": \"%s\", \"preset\": "
        "\"ultrafast\"}]}",
        clip, enhance(pipe, sizeof pipe, w, h, "nv12"), out);
    printf("| end to end (NVDEC -> enhance -> libx264 ultrafast), best of 2 | frames/s "
           "|\n|---|---|\n");
    double e2e_fps = run_flow(json, &h4, true);
    e2e_fps = fmax(e2e_fps, run_flow(json, &h4, false));
    /* the encoder alone on the frames it encodes end to end (sharpened
     * pictures cost x264 more than the clip's own): decode that output
     * (NVDEC runs 2-7x faster than libx264 here) into the encoder */
    char out2[600];
    snprintf(out2, sizeof out2, "%s.again.mp4", out);
    decode_encode(json, sizeof json, out, out2);
    double enc_alone = fmax(run_flow(json, &h5, false), run_flow(json, &h5, false));
    remove(out2);
    double enh_alone = h2.stages[1].gpu_p50_us > 0 ? 1e6 / h2.stages[1].gpu_p50_us : 0;
    double slowest = fmin(fmin(flow_fps, enc_alone), enh_alone > 0 ? enh_alone : 1e12);
    printf("| decode alone (flow) | %.0f |\n| enhance alone (1 / its device time) | %.0f |\n",
           flow_fps, enh_alone);
    printf("| encode alone, on the enhanced frames (best of 2) | %.0f |\n", enc_alone);
    printf("| decode -> encode of the clip itself | %.0f |\n| decode -> enhance -> null | %.0f |\n",
           dec_enc_fps, dec_enh_fps);
    printf("| **end to end** | **%.0f** (%.2f of the slowest stage alone, %.0f) |\n", e2e_fps,
           e2e_fps / slowest, slowest);
    uint64_t copies = 0;
    for (size_t i = 0; i + 1 < h4.n_stages; i++)
        copies += h4.stages[i].copies.htod + h4.stages[i].copies.dtoh;
    printf("  host copies before the sink: %llu over %llu frames; the sink: %llu d2h (one per "
           "frame, libx264 on the host)\n",
           (unsigned long long)copies, (unsigned long long)h4.frames_done,
           (unsigned long long)h4.stages[h4.n_stages - 1].copies.dtoh);
    printf("  frames in flight at most %zu; frame buffers %zu bytes\n", h4.max_frames_in_flight,
           h4.device_bytes);
    /* the .y4m path on the same frames */
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"decode\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": "
             "\"software\"},"
             "{\"name\": \"raw\", \"sink\": \"y4m\", \"path\": \"%s\"}]}",
             clip, y4m);
    run_flow(json, &h5, false);
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"read\", \"source\": \"y4m\", \"path\": \"%s\"},"
             "{\"name\": \"enhance\", \"pipeline\": %s},"
             "{\"name\": \"encode\", \"sink\": \"video\", \"path\": \"%s\", \"preset\": "
             "\"ultrafast\"}]}",
             y4m, enhance(pipe, sizeof pipe, w, h, "i420"), out);
    double y4m_fps = run_flow(json, &h5, false);
    printf(
        "| .y4m in (the same frames, raw) -> enhance -> libx264 | %.0f (%.2f of the MP4 path) |\n",
        y4m_fps, y4m_fps / e2e_fps);
    remove(y4m);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --- many streams ------------------------------------------------------------------ */
typedef struct hand_thread {
    const char *path;
    long frames;
    pthread_t th;
    bool deferred;
    pthread_barrier_t *bar;
    double t_end;
} hand_thread;

static void *hand_thread_main(void *arg) {
    hand_thread *t = arg;
    hand_loop_at(t->path, &t->frames, t->deferred, t->bar, &t->t_end);
    return NULL;
}

/* k hand loops at once, each its own session on its own thread: total frames/s. */
static double hand_loops(const char *path, int k, bool deferred) {
    hand_thread t[16];
    pthread_barrier_t bar; /* the main thread too: it takes the start time */
    pthread_barrier_init(&bar, NULL, (unsigned)k + 1);
    for (int i = 0; i < k; i++) {
        t[i] = (hand_thread){.path = path, .deferred = deferred, .bar = &bar};
        pthread_create(&t[i].th, NULL, hand_thread_main, &t[i]);
    }
    pthread_barrier_wait(&bar); /* every decoder exists */
    const double t0 = now_s();
    long frames = 0;
    double end = t0;
    for (int i = 0; i < k; i++) {
        pthread_join(t[i].th, NULL);
        frames += t[i].frames;
        if (t[i].t_end > end) end = t[i].t_end;
    }
    pthread_barrier_destroy(&bar);
    return frames / (end - t0);
}

/* One source of n streams of the clip (each its own NVDEC session) into a
 * null sink: frames/s over the run, the device memory the flow holds per
 * stream, drops, and (realtime) whether every stream kept its pace. */
static void streams_row(const char *clip, int n, bool realtime, int frames_per_stream) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"cams\", \"source\": \"video\", \"path\": \"%s\", \"decoder\": "
             "\"nvdec\", \"streams\": %d, \"realtime\": %s},"
             "{\"name\": \"null\", \"sink\": \"null\", \"queue\": {\"policy\": \"%s\"}}]}",
             clip, n, realtime ? "true" : "false", realtime ? "drop_newest" : "block");
    size_t before = device_used();
    double t0 = now_s();
    kp_flow_t f;
    CHECK(kp_flow_create_from_json(g_dev, json, &f));
    double made = now_s() - t0;
    size_t held = device_used() - before;
    t0 = now_s();
    CHECK(kp_flow_start(f));
    CHECK(kp_flow_wait(f));
    double t = now_s() - t0;
    held = device_used() - before; /* decoders, their surfaces, the frames: before freeing */
    kp_flow_snapshot h;
    CHECK(kp_flow_health(f, &h));
    kp_flow_stream_stats *ss = calloc((size_t)n, sizeof *ss);
    size_t m = 0;
    CHECK(kp_flow_streams(f, ss, (size_t)n, &m));
    uint64_t min_frames = UINT64_MAX;
    for (size_t i = 0; i < m; i++)
        if (ss[i].frames < min_frames) min_frames = ss[i].frames;
    const double duration = frames_per_stream / 30.0;
    if (realtime)
        printf("| %d streams at 30 frames/s (realtime) | %.0f | %llu | %s | %.2f s for %.2f s of "
               "video | %.1f | %.0f |\n",
               n, h.frames_done / t, (unsigned long long)h.frames_dropped,
               h.frames_dropped == 0 && min_frames == (uint64_t)frames_per_stream &&
                       t < duration * 1.05 + 0.2
                   ? "held"
                   : "NOT held",
               t, duration, held / 1048576.0 / n, made * 1e3 / n);
    else
        printf("| %d streams, as fast as decoded | %.0f | %llu | - | %.2f s | %.1f | %.0f |\n", n,
               h.frames_done / t, (unsigned long long)h.frames_dropped, t, held / 1048576.0 / n,
               made * 1e3 / n);
    free(ss);
    kp_flow_destroy(f);
}

/* Decode -> resize to 640x360 -> NV12 to RGB (f32) for n streams of the
 * clip: one batched pipeline tick for up to n frames (the batch stage
 * resizes every frame into its slot with one launch), against a pipeline
 * tick per frame (resize and nv12_rgb as modules). As fast as decoded, and
 * paced at 30 frames/s a stream (realtime). Frames/s, the pipeline
 * stage's host and device time per run (a batch, or a frame), and each
 * stream's end-to-end latency (source to the work done on the device,
 * kp_flow_stream_stats): the median over the streams of their p50, and
 * the largest p99. */
static void batch_rows(const char *clip, int n) {
    char json[4096];
    printf("\n| %d streams of 1080p: decode -> resize 640x360 -> nv12_rgb | frames/s | runs | "
           "host p50 / p99 us per run | device p50 / p99 us per run | latency per stream: "
           "median p50 / worst p99, ms |\n|---|---|---|---|---|---|\n",
           n);
    for (int paced = 0; paced < 2; paced++)
        for (int batched = 1; batched >= 0; batched--) {
            if (batched)
                snprintf(json, sizeof json,
                         "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"cams\", \"source\": "
                         "\"video\", \"path\": \"%s\", \"decoder\": \"nvdec\", \"streams\": "
                         "%d, \"realtime\": %s},"
                         "{\"name\": \"net\", \"queue\": {\"capacity\": %d}, \"batch\": "
                         "{\"max\": %d, \"deadline_us\": 20000, \"resize\": [640, 360]}, "
                         "\"pipeline\": {\"kpipe_spec\": 1, \"name\": \"b\", \"execution\": "
                         "\"graph\", \"modules\": [{\"type\": \"nv12_rgb\", \"id\": \"rgb\", "
                         "\"params\": {\"width\": 640, \"height\": 360, \"batch\": %d}}], "
                         "\"inputs\": {\"x\": \"rgb.input\"}, \"outputs\": {\"y\": "
                         "\"rgb.output\"}}},"
                         "{\"name\": \"out\", \"sink\": \"null\"}]}",
                         clip, n, paced ? "true" : "false", 2 * n, n, n);
            else
                snprintf(json, sizeof json,
                         "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"cams\", \"source\": "
                         "\"video\", \"path\": \"%s\", \"decoder\": \"nvdec\", \"streams\": "
                         "%d, \"realtime\": %s},"
                         "{\"name\": \"net\", \"queue\": {\"capacity\": %d}, \"pipeline\": "
                         "{\"kpipe_spec\": 1, \"name\": \"f\", \"execution\": \"graph\", "
                         "\"modules\": [{\"type\": \"resize\", \"id\": \"rs\", \"params\": "
                         "{\"width\": 1920, \"height\": 1080, \"out_width\": 640, "
                         "\"out_height\": 360}}, {\"type\": \"nv12_rgb\", \"id\": \"rgb\", "
                         "\"params\": {\"width\": 640, \"height\": 360}}], \"connections\": "
                         "[\"rs.output -> rgb.input\"], \"inputs\": {\"x\": \"rs.input\"}, "
                         "\"outputs\": {\"y\": \"rgb.output\"}}},"
                         "{\"name\": \"out\", \"sink\": \"null\"}]}",
                         clip, n, paced ? "true" : "false", 2 * n);
            kp_flow_snapshot h;
            kp_flow_stream_stats ss[64];
            size_t m = 0;
            const double fps = run_flow_streams(json, &h, ss, 64, &m);
            double p50[64], worst = 0;
            for (size_t i = 0; i < m; i++) {
                p50[i] = ss[i].latency_p50_us;
                if (ss[i].latency_p99_us > worst) worst = ss[i].latency_p99_us;
            }
            qsort(p50, m, sizeof p50[0], cmp_double);
            const kp_flow_stage_stats *st = &h.stages[1];
            printf("| %s, %s | %.0f | %llu | %.1f / %.1f | %.1f / %.1f | %.2f / %.2f |\n",
                   batched ? "one batched pipeline (up to 16 frames a tick, 20 ms deadline)"
                           : "a pipeline tick per frame",
                   paced ? "every stream at 30 frames/s" : "as fast as decoded", fps,
                   (unsigned long long)(batched ? st->batches : st->in), st->host_p50_us,
                   st->host_p99_us, st->gpu_p50_us, st->gpu_p99_us,
                   m ? p50[(m - 1) / 2] / 1e3 : 0.0, worst / 1e3);
        }
}

/* FFmpeg's NVDEC path (ffmpeg_nvdec, beside this program) in k processes:
 * frames/s, or -1 where it cannot run. */
static double ffmpeg_nvdec(const char *clip, int k) {
    char exe[1024], cmd[2048];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return -1;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = '\0';
    snprintf(cmd, sizeof cmd, "%s/ffmpeg_nvdec '%s' %d 2>/dev/null", exe, clip, k);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    double fps = -1;
    char line[256];
    while (fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "s: ");
        if (at) fps = atof(at + 3);
    }
    return pclose(p) == 0 ? fps : -1;
}

static void bench_streams(const char *dir, int frames) {
    char clip[512];
    snprintf(clip, sizeof clip, "%s/streams_1080.mp4", dir);
    double t0 = now_s();
    make_clip(clip, 1920, 1080, frames, 6000000);
    printf("\n## Many streams: 1920x1080 H.264, 6 Mb/s, B-frames, %d frames each (made in %.1f "
           "s)\n",
           frames, now_s() - t0);
    double one = hand_loops(clip, 1, false), seven = hand_loops(clip, 7, false);
    double one_d = hand_loops(clip, 1, true), seven_d = hand_loops(clip, 7, true);
    printf("| hand NVDEC loop, sessions at once | mapped in the display callback (the SDK "
           "sample's way), frames/s | mapped after each parse call, 8 spare surfaces, a "
           "non-blocking stream, frames/s |\n|---|---|---|\n");
    printf("| 1 | %.0f | %.0f |\n| 7 | %.0f | %.0f |\n", one, one_d, seven, seven_d);
    const double ff1 = ffmpeg_nvdec(clip, 1), ff7 = ffmpeg_nvdec(clip, 7);
    printf("\n| FFmpeg's NVDEC path (libavcodec hwaccel cuda, frames left on the device), "
           "processes at once | frames/s |\n|---|---|\n| 1 | %.0f |\n| 7 | %.0f |\n",
           ff1, ff7);
    if (seven_d > seven) seven = seven_d; /* the better hand loop is the baseline */
    printf("\n| kpipe: one video source | frames/s | drops | real time | wall | device MiB "
           "per stream | ms to open per stream |\n|---|---|---|---|---|---|---|\n");
    const int n[] = {1, 7, 16, 64, 150};
    for (int i = 0; i < 5; i++) streams_row(clip, n[i], false, frames);
    printf("  ratio at 7 streams to the hand loop's 7 sessions: see the 7-stream row / %.0f\n",
           seven);
    /* every stream starts at once on the same clip: their frames fall due
     * together, a burst of n frames each 33 ms, which the sink's queue
     * (dropping the newest when full; by default one frame of each stream)
     * must hold */
    const int rt[] = {64, 140, 150, 180};
    for (int i = 0; i < 4; i++) streams_row(clip, rt[i], true, frames);
    batch_rows(clip, 16);
}

/* One file on N NVDEC sessions ("parallel"): frames/s of the reader alone
 * against one session, on 2160p and 1080p clips with a key frame every
 * second (closed, and open groups of pictures at 2160p). */
static void bench_parallel(const char *dir, int frames) {
    static const struct {
        int w, h;
        int64_t bitrate;
        bool open;
    } clips[] = {
        {3840, 2160, 20000000, false}, {3840, 2160, 20000000, true}, {1920, 1080, 6000000, false}};
    printf("\n## One file on several NVDEC sessions (reader alone, %d frames, a key frame "
           "every 30)\n\n| clip | sessions | frames/s | x one session | device MiB held |\n"
           "|---|---|---|---|---|\n",
           frames);
    for (size_t c = 0; c < sizeof clips / sizeof clips[0]; c++) {
        char clip[512];
        snprintf(clip, sizeof clip, "%s/par_%d_%d.mp4", dir, clips[c].h, (int)clips[c].open);
        double t0 = now_s();
        make_clip_gop(clip, clips[c].w, clips[c].h, frames, clips[c].bitrate, 30, clips[c].open);
        fprintf(stderr, "clip %dp made in %.1f s\n", clips[c].h, now_s() - t0);
        const int n[] = {1, 2, 4, 7};
        double one = 0;
        for (int i = 0; i < 4; i++) {
            long got = 0;
            double fps = read_loop_n(clip, KP_VIDEO_DECODE_NVDEC, n[i], &got);
            if (got != frames) {
                fprintf(stderr, "parallel %d: %ld frames of %d\n", n[i], got, frames);
                exit(1);
            }
            if (i == 0) one = fps;
            printf("| %dp H.264%s | %d | %.0f | %.2f | %.0f |\n", clips[c].h,
                   clips[c].open ? ", open GOP" : "", n[i], fps, fps / one,
                   (double)g_read_held / 1048576.0);
        }
        remove(clip);
    }
}

/* A decoder for each of many short clips (1080p and 720p in turn): open,
 * first frame on the device, close; p50 and p99 in ms, pooled decoders
 * (reconfigured) against a decoder made each time. */
static void bench_pool(const char *dir, int clips) {
    char clip[2][512];
    snprintf(clip[0], sizeof clip[0], "%s/short_1080.mp4", dir);
    snprintf(clip[1], sizeof clip[1], "%s/short_720.mp4", dir);
    make_clip(clip[0], 1920, 1080, 10, 6000000);
    make_clip(clip[1], 1280, 720, 10, 4000000);
    printf("\n## A decoder for each of many short clips (1080p and 720p in turn: open, first "
           "frame, close)\n\n| decoders | clips | p50 ms | p99 ms | of which open, p50 | container "
           "alone (libavformat open + stream info), p50 | made | reused |\n"
           "|---|---|---|---|---|---|---|---|\n");
    kp_stream_t s;
    void *buf;
    CHECK(kp_stream_create(g_dev, &s));
    CHECK(kp_malloc(g_dev, 1920 * 1088 * 3 / 2, &buf));
    for (int pooled = 1; pooled >= 0; pooled--) {
        const int n = pooled ? clips : clips / 10;
        double *t = calloc((size_t)n, sizeof *t);
        CHECK(kp_video_pool_limit(0));
        CHECK(kp_video_pool_limit(pooled ? KP_VIDEO_POOL_DEFAULT : 0));
        double *t_open = calloc((size_t)n, sizeof *t), *t_demux = calloc((size_t)n, sizeof *t);
        kp_video_pool_stats a, b;
        CHECK(kp_video_pool_stats_get(&a));
        for (int i = -2; i < n; i++) { /* two to warm up */
            /* the container alone, as the reader opens it: demux's share */
            double t0 = now_s();
            AVFormatContext *fc = NULL;
            if (avformat_open_input(&fc, clip[i & 1], NULL, NULL) < 0 ||
                avformat_find_stream_info(fc, NULL) < 0) {
                fprintf(stderr, "%s: cannot open\n", clip[i & 1]);
                exit(1);
            }
            avformat_close_input(&fc);
            if (i >= 0) t_demux[i] = (now_s() - t0) * 1e3;
            t0 = now_s();
            kp_video_reader_config c = KP_VIDEO_READER_CONFIG_INIT;
            c.decoder = KP_VIDEO_DECODE_NVDEC;
            kp_video_reader_t r;
            CHECK(kp_video_reader_open(g_dev, clip[i & 1], &c, &r));
            if (i >= 0) t_open[i] = (now_s() - t0) * 1e3;
            kp_video_frame f;
            bool eos;
            CHECK(kp_video_reader_next(r, s, buf, 1920 * 1088 * 3 / 2, &f, &eos));
            CHECK(kp_stream_sync(s));
            if (i >= 0) t[i] = (now_s() - t0) * 1e3;
            kp_video_reader_close(r);
        }
        CHECK(kp_video_pool_stats_get(&b));
        qsort(t, (size_t)n, sizeof *t, cmp_double);
        qsort(t_open, (size_t)n, sizeof *t, cmp_double);
        qsort(t_demux, (size_t)n, sizeof *t, cmp_double);
        printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %llu | %llu |\n",
               pooled ? "pooled (reconfigured)" : "made each time", n, t[n / 2],
               t[(size_t)((n - 1) * 0.99)], t_open[n / 2], t_demux[n / 2],
               (unsigned long long)(b.created - a.created),
               (unsigned long long)(b.reused - a.reused));
        free(t);
        free(t_open);
        free(t_demux);
    }
    CHECK(kp_video_pool_limit(KP_VIDEO_POOL_DEFAULT));
    kp_free(g_dev, buf);
    kp_stream_destroy(s);
    remove(clip[0]);
    remove(clip[1]);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows reach a log as they come */
    if (argc < 2) {
        fprintf(stderr, "usage: bench_video DIR [FRAMES_1080 FRAMES_2160]\n"
                        "       bench_video DIR streams [FRAMES]\n"
                        "       bench_video DIR parallel [FRAMES [CLIPS]]\n");
        return 2;
    }
    if (argc > 2 && strcmp(argv[2], "parallel") == 0) {
        if (kp_device_open("cuda", &g_dev) != KP_OK) {
            fprintf(stderr, "no cuda device: %s\n", kp_last_error());
            return 77;
        }
        const int frames = argc > 3 ? atoi(argv[3]) : 300; /* 0: the pool's table alone */
        if (frames > 0) bench_parallel(argv[1], frames);
        bench_pool(argv[1], argc > 4 ? atoi(argv[4]) : 1000);
        kp_device_close(g_dev);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "streams") == 0) {
        if (kp_device_open("cuda", &g_dev) != KP_OK) {
            fprintf(stderr, "no cuda device: %s\n", kp_last_error());
            return 77;
        }
        char desc[256];
        kp_device_describe(g_dev, desc, sizeof desc);
        printf("# bench_video streams on %s\n", desc);
        bench_streams(argv[1], argc > 3 ? atoi(argv[3]) : 150);
        kp_device_close(g_dev);
        return 0;
    }
    if (kp_device_open("cuda", &g_dev) != KP_OK) {
        fprintf(stderr, "no cuda device: %s\n", kp_last_error());
        return 77;
    }
    int n1 = argc > 2 ? atoi(argv[2]) : 600, n2 = argc > 3 ? atoi(argv[3]) : 240;
    char desc[256];
    kp_device_describe(g_dev, desc, sizeof desc);
    printf("# bench_video on %s\n", desc);
    bench_clip(argv[1], 1920, 1080, n1, 6000000);
    bench_clip(argv[1], 3840, 2160, n2, 20000000);
    kp_device_close(g_dev);
    return 0;
}
