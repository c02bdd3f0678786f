/* Frame-accurate random access: a reader's frames by their index in
 * display order, and by time.
 *
 * The first call that needs it scans the file once on a second demuxer --
 * packets only, nothing decoded -- and keeps, for the reader's stream,
 * every packet's presentation stamp (sorted: frame i is the i-th) and
 * every key packet's index stamp, presentation stamp, and whether decoding
 * can start there (range.c's kp__key_kind). A seek to frame i then
 *   1. picks K, the last key packet in decode order shown at or before
 *      frame i: every frame shown from K on decodes from K;
 *   2. starts decoding at K where decoding can start there (an IDR, an
 *      HEVC CRA, an H.264 key frame with an exact recovery point: K's
 *      leading pictures, shown before it, are skipped), else at the key
 *      packet before it, exactly as a parallel reader's ranges do
 *      (parallel.c);
 *   3. drops what the decoder gives before frame i, uncopied (the reader's
 *      range, range.c, with skip_pts).
 * The frame given is the one sequential decode gives, byte for byte. The
 * decoder is the reader's own, reset (for NVDEC, the pooled decoder it
 * already holds): a seek makes no new decoder.
 *
 * Refused by name: a parallel reader, live input (no file to scan), and a
 * stream whose packets lack timestamps or repeat one. */
#include <stdlib.h>
#include <string.h>

#include "ffmpeg-impl.h"

static void kp__seek_index_free(struct kp__seek_index *x) {
    if (!x) return;
    kp__free(x->pts);
    kp__free(x->keys);
    kp__free(x);
}

static int kp__cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Appends to a growing array of `size`-byte items. */
static kp_status kp__grow(void **arr, int64_t n, int64_t *cap, size_t size) {
    if (n < *cap) return KP_OK;
    int64_t c = *cap ? 2 * *cap : 1024;
    void *p = kp__calloc((size_t)c, size);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "video: no memory for the frame index");
    if (n) memcpy(p, *arr, (size_t)n * size);
    kp__free(*arr);
    *arr = p;
    *cap = c;
    return KP_OK;
}

/* One packet of the scan into x. */
static kp_status kp__scan_packet(kp_video_reader_t r, const AVPacket *pkt,
                                 struct kp__seek_index *x, int64_t *cap, int64_t *kcap) {
    if (pkt->pts == AV_NOPTS_VALUE)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: packet %lld has no timestamp: seeking by frame needs them (a raw "
                         "elementary stream has none; put it in a container)",
                         r->path, (long long)x->n);
    KP_CHECK(kp__grow((void **)&x->pts, x->n, cap, sizeof *x->pts));
    x->pts[x->n++] = pkt->pts;
    if (!(pkt->flags & AV_PKT_FLAG_KEY)) return KP_OK;
    KP_CHECK(kp__grow((void **)&x->keys, x->nkeys, kcap, sizeof *x->keys));
    bool start, end;
    kp__key_kind(r, pkt, &start, &end);
    x->keys[x->nkeys++] = (struct kp__seek_key){kp__pkt_stamp(pkt), pkt->pts, start};
    return KP_OK;
}

/* Every packet of the reader's stream, read by a demuxer of its own. */
static kp_status kp__scan(kp_video_reader_t r, struct kp__seek_index *x) {
    AVFormatContext *fc = NULL;
    AVPacket *pkt = av_packet_alloc();
    if (!pkt) return kp__error(KP_ERR_OUT_OF_MEMORY, "video: no memory for the frame index");
    int e = avformat_open_input(&fc, r->path, NULL, NULL);
    if (e >= 0 && (int)fc->nb_streams <= r->st->index) e = avformat_find_stream_info(fc, NULL);
    kp_status st = KP_OK;
    if (e < 0) st = kp__av_error(e, KP_ERR_IO, "%s: opening it again to index its frames", r->path);
    else if ((int)fc->nb_streams <= r->st->index)
        st = kp__error(KP_ERR_PARSE, "%s: a second read of it finds fewer streams", r->path);
    int64_t cap = 0, kcap = 0;
    while (st == KP_OK && (e = av_read_frame(fc, pkt)) >= 0) {
        if (pkt->stream_index == r->st->index) st = kp__scan_packet(r, pkt, x, &cap, &kcap);
        av_packet_unref(pkt);
    }
    if (st == KP_OK && e != AVERROR_EOF)
        st = kp__av_error(e, KP_ERR_PARSE, "%s: indexing frame %lld", r->path, (long long)x->n);
    av_packet_free(&pkt);
    avformat_close_input(&fc);
    return st;
}

/* The index, scanned on first use. */
static kp_status kp__seek_index_get(kp_video_reader_t r, struct kp__seek_index **out) {
    if (r->par)
        return kp__error(KP_ERR_UNSUPPORTED, "%s: a parallel reader (parallel %d) reads in order "
                         "only; open one session to seek", r->path, r->cfg.parallel);
    if (!r->fmt->pb || !(r->fmt->pb->seekable & AVIO_SEEKABLE_NORMAL))
        return kp__error(KP_ERR_UNSUPPORTED, "%s: live input cannot seek", r->path);
    if (r->index) {
        *out = r->index;
        return KP_OK;
    }
    struct kp__seek_index *x = kp__calloc(1, sizeof *x);
    if (!x) return kp__error(KP_ERR_OUT_OF_MEMORY, "video: no memory for the frame index");
    kp_status st = kp__scan(r, x);
    if (st == KP_OK && x->n == 0) st = kp__error(KP_ERR_PARSE, "%s: no video frame", r->path);
    if (st == KP_OK && x->nkeys == 0)
        st = kp__error(KP_ERR_UNSUPPORTED, "%s: no key frame to seek to", r->path);
    if (st == KP_OK) qsort(x->pts, (size_t)x->n, sizeof *x->pts, kp__cmp_i64);
    for (int64_t i = 1; st == KP_OK && i < x->n; i++)
        if (x->pts[i] == x->pts[i - 1])
            st = kp__error(KP_ERR_UNSUPPORTED, "%s: two frames share the timestamp %lld: frames "
                           "cannot be told apart by time", r->path, (long long)x->pts[i]);
    if (st != KP_OK) {
        kp__seek_index_free(x);
        return st;
    }
    r->index = x;
    *out = x;
    return KP_OK;
}

kp_status kp__video_count(kp_video_reader_t r, int64_t *frames) {
    struct kp__seek_index *x;
    KP_CHECK(kp__seek_index_get(r, &x));
    *frames = x->n;
    return KP_OK;
}

kp_status kp__video_seek(kp_video_reader_t r, int64_t frame) {
    struct kp__seek_index *x;
    KP_CHECK(kp__seek_index_get(r, &x));
    if (frame < 0 || frame >= x->n)
        return kp__error(KP_ERR_INVALID_ARG, "%s: frame %lld is out of range: it has %lld (0 .. "
                         "%lld)", r->path, (long long)frame, (long long)x->n,
                         (long long)(x->n - 1));
    const int64_t t = x->pts[frame];
    int64_t k = 0;
    for (int64_t i = 0; i < x->nkeys; i++)
        if (x->keys[i].pts <= t) k = i;
    const int64_t from = x->keys[k].clean || k == 0 ? k : k - 1;
    r->failed = false; /* a seek starts the decoder afresh */
    r->seeks = true;
    kp_status st = kp__reader_seek(r, x->keys[from].ts, x->keys[k].ts, INT64_MAX);
    if (st != KP_OK) {
        kp__video_reader_fail(r, st);
        return st;
    }
    r->range.skip_pts = t;
    r->next = (uint64_t)frame;
    return KP_OK;
}

kp_status kp__video_frame_at(kp_video_reader_t r, double seconds, int64_t *frame) {
    struct kp__seek_index *x;
    KP_CHECK(kp__seek_index_get(r, &x));
    const AVRational tb = r->st->time_base;
    const double first = (double)x->pts[0] * tb.num / tb.den;
    const double last = (double)x->pts[x->n - 1] * tb.num / tb.den;
    /* the last frame is shown for one frame's time, as the others */
    const double step = x->n > 1 ? (last - first) / (double)(x->n - 1) : 0.0;
    if (!(seconds >= 0.0) || seconds >= last - first + step + 1e-9 * (1 + step))
        return kp__error(KP_ERR_INVALID_ARG, "%s: %g s is out of range: it lasts %g s", r->path,
                         seconds, last - first + step);
    /* the last frame shown at or before the time (a tick's slack for
     * rounding in the caller's seconds) */
    const double want = first + seconds;
    int64_t lo = 0, hi = x->n - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        double at = (double)x->pts[mid] * tb.num / tb.den;
        if (at <= want + 0.5 * tb.num / tb.den) lo = mid;
        else hi = mid - 1;
    }
    *frame = lo;
    return KP_OK;
}
