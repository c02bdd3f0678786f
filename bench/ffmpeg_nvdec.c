/* FFmpeg's own NVDEC path, the baseline a video user would reach for
 * first: what `ffmpeg -hwaccel cuda -hwaccel_output_format cuda -i FILE
 * -f null -` does, through the same libraries (libavformat's demuxer,
 * libavcodec's decoder with the NVDEC hwaccel, frames left in device
 * memory), in P processes at once (bench/RESULTS.md, "Many streams").
 *
 * Each process opens the file, makes its decoder and decodes the file once
 * (so the hardware decoder exists, as kpipe's and the hand loop's do when
 * their clocks start), seeks back, says it is ready, waits for the start,
 * decodes the whole file again, and reports its frames and its end time.
 * Prints the total frames/s from the common start to the last end.
 *
 *   ffmpeg_nvdec FILE [PROCESSES]   (default 1; exit 2 without NVDEC) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>

#define MAX_PROCS 64

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* one clock for every process */
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static enum AVPixelFormat cuda_format(AVCodecContext *c, const enum AVPixelFormat *f) {
    for (; *f != AV_PIX_FMT_NONE; f++)
        if (*f == AV_PIX_FMT_CUDA) return *f;
    return AV_PIX_FMT_NONE; /* no NVDEC for this stream: fail, never fall back */
}

typedef struct decoder {
    AVFormatContext *fmt;
    AVCodecContext *ctx;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
} decoder;

static int open_decoder(decoder *d, const char *path) {
    const AVCodec *codec = NULL;
    AVBufferRef *hw = NULL;
    if (avformat_open_input(&d->fmt, path, NULL, NULL) < 0 ||
        avformat_find_stream_info(d->fmt, NULL) < 0)
        return fprintf(stderr, "%s: cannot open\n", path), -1;
    d->stream = av_find_best_stream(d->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (d->stream < 0 || !codec) return fprintf(stderr, "%s: no video\n", path), -1;
    d->ctx = avcodec_alloc_context3(codec);
    if (!d->ctx || avcodec_parameters_to_context(d->ctx, d->fmt->streams[d->stream]->codecpar) < 0)
        return -1;
    if (av_hwdevice_ctx_create(&hw, AV_HWDEVICE_TYPE_CUDA, NULL, NULL, 0) < 0)
        return fprintf(stderr, "no CUDA device for FFmpeg\n"), -1;
    d->ctx->hw_device_ctx = hw;
    d->ctx->get_format = cuda_format;
    if (avcodec_open2(d->ctx, codec, NULL) < 0) return -1;
    d->pkt = av_packet_alloc();
    d->frame = av_frame_alloc();
    return d->pkt && d->frame ? 0 : -1;
}

/* Every frame of the file, left on the device; the count, or -1. */
static long decode_all(decoder *d) {
    long frames = 0;
    int eof = 0;
    while (!eof) {
        int r = av_read_frame(d->fmt, d->pkt);
        if (r < 0) eof = 1;
        if (!eof && d->pkt->stream_index != d->stream) {
            av_packet_unref(d->pkt);
            continue;
        }
        if (avcodec_send_packet(d->ctx, eof ? NULL : d->pkt) < 0) return -1;
        av_packet_unref(d->pkt);
        while ((r = avcodec_receive_frame(d->ctx, d->frame)) == 0) {
            if (d->frame->format != AV_PIX_FMT_CUDA) return -1; /* not NVDEC */
            frames++;
            av_frame_unref(d->frame);
        }
        if (r != AVERROR(EAGAIN) && r != AVERROR_EOF) return -1;
    }
    return frames;
}

static void close_decoder(decoder *d) {
    av_frame_free(&d->frame);
    av_packet_free(&d->pkt);
    avcodec_free_context(&d->ctx);
    avformat_close_input(&d->fmt);
}

/* One process: ready -> wait for the start -> decode -> report. */
static int child(const char *path, int ready, int go, int report) {
    decoder d = {0};
    double res[2] = {-1, 0};
    if (open_decoder(&d, path) == 0 && decode_all(&d) > 0 &&
        av_seek_frame(d.fmt, d.stream, 0, AVSEEK_FLAG_BACKWARD) >= 0) {
        avcodec_flush_buffers(d.ctx); /* the decoder stays: the next frame reuses it */
        res[0] = 0;
    }
    char c = res[0] == 0 ? 'r' : 'x';
    if (write(ready, &c, 1) != 1 || read(go, &c, 1) != 1) return 1;
    if (res[0] == 0) {
        long frames = decode_all(&d);
        res[0] = (double)frames;
        res[1] = now_s();
    }
    close_decoder(&d);
    return write(report, res, sizeof res) == sizeof res ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ffmpeg_nvdec FILE [PROCESSES]\n");
        return 1;
    }
    int n = argc > 2 ? atoi(argv[2]) : 1;
    if (n < 1 || n > MAX_PROCS) {
        fprintf(stderr, "PROCESSES: 1 .. %d\n", MAX_PROCS);
        return 1;
    }
    int ready[2], go[2], report[2];
    if (pipe(ready) || pipe(go) || pipe(report)) return 1;
    pid_t pid[MAX_PROCS];
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        if (pid[i] == 0) _exit(child(argv[1], ready[1], go[0], report[1]));
        if (pid[i] < 0) return 1;
    }
    close(ready[1]); /* a process that dies closes its ends: reads see it */
    close(report[1]);
    close(go[0]);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        char c = 0;
        if (read(ready[0], &c, 1) != 1 || c != 'r') ok = 0;
    }
    const double t0 = now_s();
    char start[MAX_PROCS];
    memset(start, 'g', sizeof start);
    if (write(go[1], start, (size_t)n) != n) ok = 0;
    double frames = 0, end = t0;
    for (int i = 0; i < n; i++) {
        double res[2];
        if (read(report[0], res, sizeof res) != sizeof res || res[0] < 0) {
            ok = 0;
            continue;
        }
        frames += res[0];
        if (res[1] > end) end = res[1];
    }
    for (int i = 0; i < n; i++) waitpid(pid[i], NULL, 0);
    if (!ok) {
        fprintf(stderr, "ffmpeg_nvdec: a process could not decode %s on NVDEC\n", argv[1]);
        return 2;
    }
    printf("%d processes: %.0f frames in %.3f s: %.1f frames/s\n", n, frames, end - t0,
           frames / (end - t0));
    return 0;
}
