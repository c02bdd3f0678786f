/* One file on several decoder sessions at once (kp_video_reader_config
 * .parallel).
 *
 * The demuxer's index gives the key frames. Group of pictures c is the
 * frames whose timestamps lie in [pts(key c), pts(key c+1)): in display
 * order, with an open GOP's leading B-frames (shown before key c+1, decoded
 * after it) in group c. Session k decodes groups k, k+N, k+2N, ... in turn
 * on its own thread, each through a reader seeked to the group's key frame
 * (decoder kept: a seek empties the parser, not the session), into a ring
 * of device frames; the reader hands them on in group order, one
 * device-to-device copy each, so the output is one session's, frame for
 * frame.
 *
 * A range starts at its key frame when decoding can start there (range.c's
 * kp__key_kind): an IDR (H.264 NAL type 5, HEVC 19 or 20); an HEVC CRA or
 * BLA; an H.264 key frame whose recovery point SEI promises every picture
 * from it on, exactly (x264 writes one on each open-GOP key frame). The
 * key frame's leading pictures (an open GOP's B-frames shown before it)
 * belong to the group before and are dropped here; only other leading
 * pictures refer to them, so those no picture refers to (H.264) or all of
 * them (HEVC's RASL and RADL) are not decoded. An H.264 key frame without
 * that promise may have later pictures refer to the group before, so the
 * range starts at the index's key frame before and drops the frames shown
 * before its own; the pictures decoded before its own key frame only
 * serve as references, so their decode errors are expected and ignored,
 * and H.264 pictures no other refers to (nal_ref_idc 0) are not decoded
 * at all. A range ends at the index's next key frame when that has no
 * leading pictures (H.264 5, HEVC 18 or 20: the demux stops there);
 * otherwise it decodes on until the first frame shown at or after that
 * key frame, the demux stopping at the key packet after. An index may hold
 * fewer key frames than the stream (Matroska's cues: one per cluster); key
 * frames between are decoded through.
 *
 * The ring holds the longest group (at most KP__PAR_DEPTH frames): while
 * the reader drains one session, the others decode their next groups
 * whole, which is what keeps N sessions busy. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ffmpeg-impl.h"

#define KP__PAR_DEPTH 64

typedef struct kp__par_session {
    struct kp__par *p;
    unsigned id;
    pthread_t th;
    bool started;
    kp_video_reader_t sub;
    kp_stream_t s;
    /* the ring: slots [head, head+count) hold frames, oldest first */
    void **buf;
    kp_event_t *ready, *freed; /* decoded into; copied out of */
    bool *freed_pending;
    kp_video_frame *vf;
    uint64_t *group;
    unsigned head, count;
    uint64_t done; /* every group of this session below it is complete */
    kp_status st;  /* a failed group: its number and the detail */
    uint64_t failed_group;
    char detail[512];
} kp__par_session;

struct kp__par {
    kp_video_reader_t r;
    unsigned n, depth;
    uint64_t groups, next; /* the group the reader hands on */
    int64_t *keys;         /* each key frame's index timestamp */
    size_t bytes;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any change of any ring */
    bool stop;
    kp__par_session *ss;
};

/* --- sessions --------------------------------------------------------------------------- */
/* Decodes group c into the session's ring. */
static kp_status kp__par_group(kp__par_session *w, uint64_t c) {
    struct kp__par *p = w->p;
    const int64_t end_ts = c + 1 < p->groups ? p->keys[c + 1] : INT64_MAX;
    KP_CHECK(kp__reader_seek(w->sub, p->keys[c], p->keys[c], end_ts));
    bool clean = true, end;
    if (c > 0) kp__key_kind(w->sub, w->sub->pkt, &clean, &end);
    if (!clean) KP_CHECK(kp__reader_seek(w->sub, p->keys[c - 1], p->keys[c], end_ts));
    if (c == 0) { /* what the first key frame shows before it is the file's */
        w->sub->range.have_start = true;
        w->sub->range.start_pts = INT64_MIN;
    }
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (w->count == p->depth && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        const unsigned slot = (w->head + w->count) % p->depth;
        const bool stop = p->stop, wait = w->freed_pending[slot];
        w->freed_pending[slot] = false;
        pthread_mutex_unlock(&p->mu);
        if (stop) return kp__error(KP_ERR_STATE, "%s: the reader was closed", p->r->path);
        if (wait) KP_CHECK(kp_event_sync(w->freed[slot])); /* its copy out is done */
        kp_video_frame vf;
        bool eos = false;
        KP_CHECK(kp__video_reader_next(w->sub, w->s, w->buf[slot], p->bytes, &vf, &eos));
        if (eos) return KP_OK;
        vf.matrix = w->sub->matrix; /* what the bitstream says, as the session read it */
        KP_CHECK(kp_event_record(w->ready[slot], w->s));
        pthread_mutex_lock(&p->mu);
        w->vf[slot] = vf;
        w->group[slot] = c;
        w->count++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *kp__par_main(void *arg) {
    kp__par_session *w = arg;
    struct kp__par *p = w->p;
    for (uint64_t c = w->id; c < p->groups; c += p->n) {
        kp_status st = kp__par_group(w, c);
        pthread_mutex_lock(&p->mu);
        if (st != KP_OK) {
            w->st = st;
            w->failed_group = c;
            snprintf(w->detail, sizeof w->detail, "%s", kp_last_error());
            kp_clear_error();
        } else {
            w->done = c + 1;
        }
        pthread_cond_broadcast(&p->cv);
        const bool stop = p->stop || st != KP_OK;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
    }
    return NULL;
}

static void kp__par_close(struct kp__par *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; p->ss && i < p->n; i++) {
        kp__par_session *w = &p->ss[i];
        if (w->started) pthread_join(w->th, NULL);
        for (unsigned k = 0; w->buf && k < p->depth; k++) {
            if (w->freed_pending[k] && kp_event_sync(w->freed[k]) != KP_OK) kp_clear_error();
            kp_event_destroy(w->ready[k]);
            kp_event_destroy(w->freed[k]);
            if (w->buf[k]) kp_free(p->r->dev, w->buf[k]);
        }
        if (w->s && kp_stream_sync(w->s) != KP_OK) kp_clear_error();
        kp_stream_destroy(w->s);
        if (w->sub) kp__video_reader_free(w->sub);
        kp__free(w->buf);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    kp__free(p->ss);
    kp__free(p->keys);
    kp__free(p);
}

/* The key frames of the index into p->keys, and the longest group's frames
 * (counted where the index holds every frame, as MP4's does; else from the
 * frame rate). */
static kp_status kp__par_index(struct kp__par *p) {
    kp_video_reader_t r = p->r;
    const int n = avformat_index_get_entries_count(r->st);
    size_t nkeys = 0;
    for (int i = 0; i < n; i++)
        if (avformat_index_get_entry(r->st, i)->flags & AVINDEX_KEYFRAME) nkeys++;
    if (!nkeys)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: parallel decode splits a file at the key frames of its index, and "
                         "this one has none (%s; MP4 and Matroska have one)",
                         r->path, r->fmt->iformat->name);
    if (!(p->keys = kp__calloc(nkeys, sizeof *p->keys)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "parallel reader: no memory");
    size_t k = 0, longest = 0, run = 0, frames = 0;
    for (int i = 0; i < n; i++) {
        const AVIndexEntry *e = avformat_index_get_entry(r->st, i);
        if (e->flags & AVINDEX_KEYFRAME) {
            if (k && e->timestamp <= p->keys[k - 1])
                return kp__error(KP_ERR_PARSE, "%s: the index's key frames are out of order",
                                 r->path);
            p->keys[k++] = e->timestamp;
            run = 0;
        }
        if (k) run++;
        frames++;
        if (run > longest) longest = run;
    }
    if ((size_t)n == nkeys) { /* key frames only: the longest gap at the frame rate */
        longest = 1;
        const AVRational tb = r->st->time_base, fr = r->st->avg_frame_rate;
        for (size_t i = 0; i + 1 < nkeys && fr.num > 0 && fr.den > 0; i++) {
            int64_t f = av_rescale_q(p->keys[i + 1] - p->keys[i], tb, av_inv_q(fr)) + 1;
            if (f > (int64_t)longest) longest = (size_t)f;
        }
        if (longest == 1) longest = KP__PAR_DEPTH;
    }
    p->groups = nkeys;
    /* a few over the longest group: leading B-frames of the next group */
    p->depth = (unsigned)(longest + 4 < KP__PAR_DEPTH ? longest + 4 : KP__PAR_DEPTH);
    return KP_OK;
}

static kp_status kp__par_session_open(struct kp__par *p, kp__par_session *w) {
    kp_video_reader_t r = p->r;
    kp_video_reader_config cfg = r->cfg;
    cfg.parallel = KP__PAR_SESSION;
    if (!cfg.threads) { /* software decode: the cores shared among the sessions */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg.threads = cores > (long)p->n ? (int)(cores / (long)p->n) : 1;
    }
    KP_CHECK(kp__video_reader_make(r->dev, r->path, &cfg, &w->sub));
    if (!p->bytes) p->bytes = w->sub->info.frame_bytes; /* the first session's says */
    KP_CHECK(kp_stream_create(r->dev, &w->s));
    w->buf = kp__calloc(p->depth, sizeof *w->buf + 2 * sizeof *w->ready + sizeof *w->freed_pending +
                                      sizeof *w->vf + sizeof *w->group);
    if (!w->buf) return kp__error(KP_ERR_OUT_OF_MEMORY, "parallel reader: no memory");
    /* one allocation: the pointers first, then the rest, each array aligned */
    w->ready = (kp_event_t *)(w->buf + p->depth);
    w->freed = w->ready + p->depth;
    w->vf = (kp_video_frame *)(w->freed + p->depth);
    w->group = (uint64_t *)(w->vf + p->depth);
    w->freed_pending = (bool *)(w->group + p->depth);
    for (unsigned k = 0; k < p->depth; k++) {
        KP_CHECK(kp_malloc(r->dev, p->bytes, &w->buf[k]));
        KP_CHECK(kp_event_create_untimed(r->dev, &w->ready[k]));
        KP_CHECK(kp_event_create_untimed(r->dev, &w->freed[k]));
    }
    return KP_OK;
}

static kp_status kp__par_open(kp_video_reader_t r) {
    enum AVCodecID id = r->st->codecpar->codec_id;
    if (id != AV_CODEC_ID_H264 && id != AV_CODEC_ID_HEVC)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: parallel decode takes H.264 and HEVC (the stream is %s)", r->path,
                         r->info.codec);
    struct kp__par *p = kp__calloc(1, sizeof *p);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "parallel reader: no memory");
    p->r = r;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        kp__free(p);
        return kp__error(KP_ERR_INTERNAL, "parallel reader: cannot initialise a lock");
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        kp__free(p);
        return kp__error(KP_ERR_INTERNAL, "parallel reader: cannot initialise a condition");
    }
    r->par = p; /* freed with r from here on */
    KP_CHECK(kp__par_index(p));
    p->n = (unsigned)r->cfg.parallel;
    if (p->n > p->groups) p->n = (unsigned)p->groups;
    if (!(p->ss = kp__calloc(p->n, sizeof *p->ss)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "parallel reader: no memory");
    for (unsigned i = 0; i < p->n; i++) { /* the first gives the frame size to the others */
        p->ss[i].p = p;
        p->ss[i].id = i;
        KP_CHECK(kp__par_session_open(p, &p->ss[i]));
    }
    const kp_video_reader_info in = p->ss[0].sub->info;
    snprintf(r->info.decoder, sizeof r->info.decoder, "%.30s x%u", in.decoder, p->n);
    snprintf(r->info.fallback, sizeof r->info.fallback, "%s", in.fallback);
    r->info.format = in.format;
    r->info.pitch = in.pitch;
    r->info.frame_bytes = in.frame_bytes;
    for (unsigned i = 0; i < p->n; i++) {
        if (pthread_create(&p->ss[i].th, NULL, kp__par_main, &p->ss[i]) != 0)
            return kp__error(KP_ERR_INTERNAL, "parallel reader: cannot start session %u", i);
        p->ss[i].started = true;
    }
    return KP_OK;
}

static kp_status kp__par_next(kp_video_reader_t r, kp_stream_t s, void *dst, kp_video_frame *frame,
                              bool *eos) {
    struct kp__par *p = r->par;
    kp__par_session *w = NULL;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->next >= p->groups) {
            pthread_mutex_unlock(&p->mu);
            *eos = true;
            return KP_OK;
        }
        w = &p->ss[p->next % p->n];
        if (w->count && w->group[w->head] == p->next) break;
        if (w->done > p->next) { /* that group is complete and handed on */
            p->next++;
            continue;
        }
        if (w->st != KP_OK) {
            kp_status st = w->st;
            char detail[sizeof w->detail];
            memcpy(detail, w->detail, sizeof detail);
            unsigned long long g = (unsigned long long)w->failed_group;
            pthread_mutex_unlock(&p->mu);
            return kp__error(st, "%s (parallel session %u, group of pictures %llu)", detail, w->id,
                             g);
        }
        pthread_cond_wait(&p->cv, &p->mu);
    }
    const unsigned slot = w->head;
    *frame = w->vf[slot];
    pthread_mutex_unlock(&p->mu);
    kp_status st = kp_stream_wait_event(s, w->ready[slot]);
    /* the frame's own bytes: a stream may change size below the maximum */
    const size_t bytes = (size_t)(frame->pitch * frame->height / 2 * 3);
    if (st == KP_OK) st = kp_memcpy_async(s, dst, w->buf[slot], bytes);
    if (st == KP_OK) st = kp_event_record(w->freed[slot], s);
    if (st != KP_OK) return st;
    pthread_mutex_lock(&p->mu);
    w->freed_pending[slot] = true;
    w->head = (w->head + 1) % p->depth;
    w->count--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    r->next++;
    return KP_OK;
}

/* --- the reader's entry points: one session, or several ------------------------------- */
kp_status kp__video_open(kp_device_t dev, const char *path, const kp_video_reader_config *cfg,
                         kp_video_reader_t *out) {
    kp_video_reader_t r;
    KP_CHECK(kp__video_reader_make(dev, path, cfg, &r)); /* parallel > 1: demux alone */
    if (cfg->parallel > 1) {
        kp_status st = kp__par_open(r);
        if (st != KP_OK) {
            kp__video_close(r);
            return st;
        }
    }
    *out = r;
    return KP_OK;
}

kp_status kp__video_next(kp_video_reader_t r, kp_stream_t s, void *dst, size_t capacity,
                         kp_video_frame *frame, bool *eos) {
    kp_status st;
    if (!r->par) {
        st = kp__video_reader_next(r, s, dst, capacity, frame, eos);
    } else {
        *eos = false;
        KP_CHECK(kp__video_reader_check(r, s, capacity));
        st = kp__par_next(r, s, dst, frame, eos);
        if (st != KP_OK) kp__video_reader_fail(r, st);
    }
    if (st == KP_OK && !*eos && !r->par) frame->matrix = r->matrix;
    return st;
}

void kp__video_close(kp_video_reader_t r) {
    kp__par_close(r->par);
    r->par = NULL;
    kp__video_reader_free(r);
}
