/* Ranges of a stream, the unit a parallel reader's sessions decode
 * (parallel.c says how they are chosen): which frames a range keeps, which
 * key packets start and end it, and which packets before its start need
 * no decoding. With them, what that takes of the stream's NAL units as the
 * container keeps them (MP4's avcC / hvcC, or Annex B): each packet's NAL
 * types, and the parameter sets. Below demux and the reader, which
 * consult it; a decoder asks only for the parameter sets and whether its
 * errors are expected (kp__range_lenient). */
#include <string.h>

#include "ffmpeg-impl.h"

kp_status kp__range_frame(kp_video_reader_t r, int64_t pts, int *what) {
    struct kp__range *g = &r->range;
    *what = KP__RANGE_KEEP;
    if (pts == AV_NOPTS_VALUE)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: a frame without a timestamp: parallel decode orders frames by them",
                         r->path);
    if (!g->have_start || pts < g->start_pts || pts < g->skip_pts) {
        *what = KP__RANGE_DROP;
    } else if (g->have_end && pts >= g->end_pts) {
        *what = KP__RANGE_END;
        g->ended = true;
    } else {
        g->kept = true;
    }
    return KP_OK;
}

/* Before a range's start its decoder's errors are expected (pictures that
 * refer to what was not decoded). After a seek (seek.c), until the first
 * frame kept: a software decoder on frame threads reports an error frames
 * after the picture that caused it, so an error from a leading picture of
 * the key frame sought to can come after the range's start. */
bool kp__range_lenient(kp_video_reader_t r) {
    const struct kp__range *g = &r->range;
    return g->on && (!g->have_start || (g->skip_pts != INT64_MIN && !g->kept));
}

/* The first byte of each NAL unit of a packet (at most `max`): length-
 * prefixed (MP4's avcC / hvcC, the length size in the extradata) or Annex
 * B start codes. */
static size_t kp__nal_heads(kp_video_reader_t r, const AVPacket *pkt, uint8_t *out, size_t max) {
    const AVCodecParameters *par = r->st->codecpar;
    const bool hevc = par->codec_id == AV_CODEC_ID_HEVC;
    const uint8_t *x = par->extradata;
    int lsize = 0; /* 0: Annex B */
    if (x && par->extradata_size > (hevc ? 22 : 4) && x[0] == 1)
        lsize = (hevc ? x[21] : x[4]) % 4 + 1;
    const uint8_t *d = pkt->data;
    const size_t n = (size_t)pkt->size;
    size_t m = 0;
    for (size_t i = 0; i < n && m < max;) {
        size_t len, at;
        if (lsize) {
            if (n - i < (size_t)lsize) break;
            len = 0;
            for (int k = 0; k < lsize; k++) len = len << 8 | d[i + (size_t)k];
            at = i + (size_t)lsize;
            if (len > n - at) break;
            i = at + len;
        } else { /* the next 00 00 01 */
            while (i + 3 <= n && !(d[i] == 0 && d[i + 1] == 0 && d[i + 2] == 1)) i++;
            if (i + 3 > n) break;
            at = i + 3;
            len = n - at;
            i = at;
        }
        if (len && at < n) out[m++] = d[at];
    }
    return m;
}

/* The parameter sets from the extradata, as Annex B: avcC's SPS and PPS
 * arrays, hvcC's NAL arrays (VPS too), or the extradata as it is where it
 * is Annex B already (RTSP's SDP). */
kp_status kp__param_sets(const AVCodecParameters *par, uint8_t **out, size_t *out_len) {
    const uint8_t *x = par->extradata;
    const size_t n = par->extradata_size > 0 ? (size_t)par->extradata_size : 0;
    *out = NULL;
    *out_len = 0;
    if (!n) return KP_OK;
    /* at most 4 bytes of start code per 2 bytes of length: 2n is enough */
    uint8_t *seq = kp__calloc(2 * n + 8, 1);
    if (!seq) return kp__error(KP_ERR_OUT_OF_MEMORY, "video: no memory for the parameter sets");
    *out = seq;
    if (x[0] != 1) { /* Annex B already */
        memcpy(seq, x, n);
        *out_len = n;
        return KP_OK;
    }
    const bool hevc = par->codec_id == AV_CODEC_ID_HEVC;
    size_t i = hevc ? 23 : 5, len = 0;
    unsigned groups = hevc ? (n > 22 ? x[22] : 0) : 2;
    for (unsigned g = 0; g < groups && i < n; g++) {
        if (hevc) i++; /* the array's NAL type */
        if (i + (hevc ? 2 : 1) > n) break;
        unsigned count = hevc ? (unsigned)(x[i] << 8 | x[i + 1]) : (g ? x[i] : x[i] & 0x1f);
        i += hevc ? 2 : 1;
        for (unsigned k = 0; k < count && i + 2 <= n; k++) {
            size_t l = (size_t)(x[i] << 8 | x[i + 1]);
            i += 2;
            if (l > n - i) break;
            memcpy(seq + len, "\0\0\0\1", 4);
            memcpy(seq + len + 4, x + i, l);
            len += 4 + l;
            i += l;
        }
    }
    *out_len = len;
    return KP_OK;
}

/* What a key packet is: *start, an IDR (nothing after refers to what came
 * before: H.264 NAL type 5, HEVC 19 or 20); *end, nothing after it is
 * shown before it (H.264 5, HEVC 20). */
void kp__key_kind(kp_video_reader_t r, const AVPacket *pkt, bool *start, bool *end) {
    const bool hevc = r->st->codecpar->codec_id == AV_CODEC_ID_HEVC;
    uint8_t h[64];
    const size_t m = kp__nal_heads(r, pkt, h, sizeof h);
    *start = *end = false;
    for (size_t i = 0; i < m; i++) {
        int type = hevc ? (h[i] >> 1) & 0x3f : h[i] & 0x1f;
        if (hevc ? (type == 19 || type == 20) : type == 5) *start = true;
        if (hevc ? type == 20 : type == 5) *end = true;
    }
}

bool kp__range_skip(kp_video_reader_t r, const AVPacket *pkt) {
    if (r->st->codecpar->codec_id != AV_CODEC_ID_H264 || (pkt->flags & AV_PKT_FLAG_KEY))
        return false;
    uint8_t h[64];
    const size_t m = kp__nal_heads(r, pkt, h, sizeof h);
    bool slices = false;
    for (size_t i = 0; i < m; i++) {
        const int type = h[i] & 0x1f;
        if (type < 1 || type > 5) continue;
        if (h[i] & 0x60) return false; /* nal_ref_idc: a reference */
        slices = true;
    }
    return slices;
}

void kp__range_key(kp_video_reader_t r, bool *stop) {
    struct kp__range *g = &r->range;
    const int64_t at = kp__pkt_stamp(r->pkt);
    *stop = false;
    if (!g->have_start && at == g->start_ts) {
        g->have_start = true;
        g->start_pts = r->pkt->pts;
    } else if (g->have_start && !g->have_end && at == g->end_ts) {
        g->have_end = true;
        g->end_pts = r->pkt->pts;
        bool start, end;
        kp__key_kind(r, r->pkt, &start, &end);
        *stop = end;
    } else if (g->have_end) {
        *stop = true;
    }
}
