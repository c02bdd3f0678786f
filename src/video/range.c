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
 * refer to what was not decoded). So are they from a start whose key frame
 * has leading pictures (their references lie before it), or after a seek
 * (seek.c), until the first frame kept: a software decoder on frame threads
 * reports an error frames after the picture that caused it. */
bool kp__range_lenient(kp_video_reader_t r) {
    const struct kp__range *g = &r->range;
    return g->on && (!g->have_start || ((g->lead || g->skip_pts != INT64_MIN) && !g->kept));
}

/* The length size of the stream's NAL units (MP4's avcC / hvcC say it in
 * their extradata); 0 for Annex B start codes. */
static int kp__nal_lsize(kp_video_reader_t r) {
    const AVCodecParameters *par = r->st->codecpar;
    const bool hevc = par->codec_id == AV_CODEC_ID_HEVC;
    const uint8_t *x = par->extradata;
    if (x && par->extradata_size > (hevc ? 22 : 4) && x[0] == 1)
        return (hevc ? x[21] : x[4]) % 4 + 1;
    return 0;
}

/* The NAL units of a packet one after another, from offset *i: the unit
 * (its header byte first) in *nal, and *len its bytes; for Annex B, *len
 * runs to the packet's end, an upper bound. False after the last. */
static bool kp__nal_next(int lsize, const uint8_t *d, size_t n, size_t *i, const uint8_t **nal,
                         size_t *len) {
    while (*i < n) {
        size_t at, l;
        if (lsize) {
            if (n - *i < (size_t)lsize) return false;
            l = 0;
            for (int k = 0; k < lsize; k++) l = l << 8 | d[*i + (size_t)k];
            at = *i + (size_t)lsize;
            if (l > n - at) return false;
            *i = at + l;
        } else { /* the next 00 00 01 */
            size_t j = *i;
            while (j + 3 <= n && !(d[j] == 0 && d[j + 1] == 0 && d[j + 2] == 1)) j++;
            if (j + 3 > n) return false;
            at = j + 3;
            l = n - at;
            *i = at;
        }
        if (l && at < n) {
            *nal = d + at;
            *len = l;
            return true;
        }
    }
    return false;
}

/* Whether an H.264 SEI NAL unit holds a recovery point saying that
 * decoding from its access unit gives every picture from it on in display
 * order exactly: recovery_frame_cnt 0 (ue(v) "1") and exact_match_flag 1,
 * the first two bits of the message. Reads the first 256 bytes of the
 * payload, emulation prevention removed; a message past them is not
 * found, which only costs a range its earlier start. */
static bool kp__sei_recovers(const uint8_t *nal, size_t len) {
    uint8_t b[256];
    size_t m = 0, zeros = 0;
    for (size_t i = 1; i < len && m < sizeof b; i++) {
        if (zeros >= 2 && nal[i] == 3) { /* emulation prevention */
            zeros = 0;
            continue;
        }
        zeros = nal[i] == 0 ? zeros + 1 : 0;
        b[m++] = nal[i];
    }
    size_t at = 0;
    while (at < m && b[at] != 0x80) { /* 0x80: the RBSP's trailing bits */
        size_t type = 0, size = 0;
        while (at < m && b[at] == 0xff) type += 255, at++;
        if (at >= m) return false;
        type += b[at++];
        while (at < m && b[at] == 0xff) size += 255, at++;
        if (at >= m) return false;
        size += b[at++];
        if (size > m - at) return false;
        if (type == 6) return size >= 1 && (b[at] & 0xc0) == 0xc0;
        at += size;
    }
    return false;
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

/* What a key packet is (ffmpeg-impl.h). HEVC: IDR 19, 20; CRA 21 and BLA
 * 16-18, whose leading pictures are RASL and RADL, which no trailing
 * picture refers to; no leading picture after IDR_N_LP 20 and BLA_N_LP 18.
 * H.264: IDR 5, none after it; a key frame with a recovery point of 0
 * frames, exact (x264's open-GOP key frames carry one). */
void kp__key_kind(kp_video_reader_t r, const AVPacket *pkt, bool *start, bool *end) {
    const bool hevc = r->st->codecpar->codec_id == AV_CODEC_ID_HEVC;
    const int lsize = kp__nal_lsize(r);
    const uint8_t *nal;
    size_t i = 0, len;
    *start = *end = false;
    const size_t n = (size_t)pkt->size;
    for (unsigned k = 0; k < 64 && kp__nal_next(lsize, pkt->data, n, &i, &nal, &len); k++) {
        const int type = hevc ? (nal[0] >> 1) & 0x3f : nal[0] & 0x1f;
        if (hevc ? (type >= 16 && type <= 21) : type == 5) *start = true;
        if (hevc ? (type == 18 || type == 20) : type == 5) *end = true;
        if (!hevc && type == 6 && kp__sei_recovers(nal, len)) *start = true;
    }
}

/* Before the start nothing is kept: an H.264 picture with nal_ref_idc 0
 * is referred to by no other. After a start whose key frame has leading
 * pictures (shown before it, decoded after), those are dropped, and only
 * other leading pictures refer to them (HEVC's rule for RASL and RADL; an
 * H.264 recovery point's promise): H.264's with nal_ref_idc 0 and HEVC's
 * RASL and RADL (6-9) need no decoding. H.264 leading pictures that are
 * references are decoded, since a frame number gap would make the
 * decoder invent pictures (kp__range_lenient passes over their errors). */
bool kp__range_skip(kp_video_reader_t r, const AVPacket *pkt) {
    const struct kp__range *g = &r->range;
    if (pkt->flags & AV_PKT_FLAG_KEY) return false;
    const bool lead =
        g->have_start && g->lead && pkt->pts != AV_NOPTS_VALUE && pkt->pts < g->start_pts;
    if (g->have_start && !lead) return false;
    const bool hevc = r->st->codecpar->codec_id == AV_CODEC_ID_HEVC;
    if (hevc ? !lead : r->st->codecpar->codec_id != AV_CODEC_ID_H264) return false;
    const int lsize = kp__nal_lsize(r);
    const uint8_t *nal;
    size_t i = 0, len;
    bool slices = false;
    const size_t n = (size_t)pkt->size;
    for (unsigned k = 0; k < 64 && kp__nal_next(lsize, pkt->data, n, &i, &nal, &len); k++) {
        if (hevc) {
            const int type = (nal[0] >> 1) & 0x3f;
            if (type > 31) continue; /* not a slice: parameter sets, SEI, ... */
            if (type < 6 || type > 9) return false;
        } else {
            const int type = nal[0] & 0x1f;
            if (type < 1 || type > 5) continue;
            if (nal[0] & 0x60) return false; /* nal_ref_idc: a reference */
        }
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
        bool start, end;
        kp__key_kind(r, r->pkt, &start, &end);
        g->lead = !end;
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
