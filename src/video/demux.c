/* What the FFmpeg-backed files share below the reader and the writer:
 * FFmpeg's messages turned into error details, and demux. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ffmpeg-impl.h"

/* --- FFmpeg's messages ----------------------------------------------------------------- */
/* FFmpeg logs from its own threads too, so the last message is kept for the
 * process, not per thread. */
static pthread_mutex_t kp__av_mu = PTHREAD_MUTEX_INITIALIZER;
static char kp__av_last[256];
static bool kp__av_echo;

static void kp__av_log(void *avcl, int level, const char *fmt, va_list vl) {
    if (kp__av_echo) {
        va_list copy;
        va_copy(copy, vl);
        av_log_default_callback(avcl, level, fmt, copy);
        va_end(copy);
    }
    if (level > AV_LOG_ERROR) return;
    char line[sizeof kp__av_last];
    vsnprintf(line, sizeof line, fmt, vl);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = '\0';
    if (!n) return;
    pthread_mutex_lock(&kp__av_mu);
    memcpy(kp__av_last, line, n + 1);
    pthread_mutex_unlock(&kp__av_mu);
}

static void kp__av_log_install(void) {
    const char *e = getenv("KPIPE_FFMPEG_LOG");
    kp__av_echo = e && *e == '1';
    av_log_set_callback(kp__av_log);
}

void kp__av_log_capture(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, kp__av_log_install);
}

kp_status kp__av_error(int averr, kp_status st, const char *fmt, ...) {
    char what[512], err[128] = "", last[sizeof kp__av_last];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (averr < 0) av_strerror(averr, err, sizeof err);
    pthread_mutex_lock(&kp__av_mu);
    memcpy(last, kp__av_last, sizeof last);
    kp__av_last[0] = '\0';
    pthread_mutex_unlock(&kp__av_mu);
    return kp__error(st, "%s%s%s%s%s%s", what, *err ? ": " : "", err, *last ? " (FFmpeg: " : "",
                     last, *last ? ")" : "");
}

kp_status kp__av_options(const char *options, AVDictionary **out) {
    *out = NULL;
    if (!options || !*options) return KP_OK;
    int e = av_dict_parse_string(out, options, "=", "&", 0);
    if (e < 0) {
        av_dict_free(out);
        return kp__av_error(e, KP_ERR_INVALID_ARG, "options \"%.64s\"", options);
    }
    return KP_OK;
}

kp_status kp__av_options_left(AVDictionary **d, const char *path) {
    const AVDictionaryEntry *e = av_dict_get(*d, "", NULL, AV_DICT_IGNORE_SUFFIX);
    kp_status st =
        e ? kp__error(KP_ERR_INVALID_ARG, "%s: option \"%.64s\" is not one that FFmpeg takes there",
                      path, e->key)
          : KP_OK;
    av_dict_free(d);
    return st;
}

/* --- demux --------------------------------------------------------------------------- */
/* FFmpeg polls this while it waits for input: the user's interrupt (a
 * cancelled flow) or the wait's deadline stops the wait. */
int kp__reader_interrupt(void *opaque) {
    kp_video_reader_t r = opaque;
    if (r->cfg.interrupt && r->cfg.interrupt(r->cfg.interrupt_user)) r->interrupted = true;
    if (r->deadline_ns && kp__mono_ns() > r->deadline_ns) r->timed_out = true;
    if (r->interrupted || r->timed_out) r->stopped = r->interrupted ? 1 : 2;
    return r->interrupted || r->timed_out;
}

void kp__reader_arm(kp_video_reader_t r) {
    r->timed_out = r->interrupted = false;
    r->deadline_ns = 0;
    if (r->cfg.timeout_ms > 0)
        r->deadline_ns = kp__mono_ns() + (uint64_t)r->cfg.timeout_ms * 1000000u;
}

kp_status kp__reader_wait_error(kp_video_reader_t r, int averr, kp_status st, const char *what) {
    const bool latched = averr == AVERROR_EXIT && !r->interrupted && !r->timed_out;
    if (r->interrupted || (latched && r->stopped == 1))
        return kp__error(KP_ERR_STATE, "%s: %s: interrupted", r->path, what);
    if (r->timed_out || (latched && r->stopped == 2))
        return kp__error(KP_ERR_IO, "%s: %s: timed out after %d ms", r->path, what,
                         r->cfg.timeout_ms);
    return kp__av_error(averr, st, "%s: %s", r->path, what);
}

kp_status kp__demux_next(kp_video_reader_t r) {
    for (;;) {
        if (r->demux_eof) return KP_ERR_NOT_FOUND;
        kp__reader_arm(r);
        int e = 0;
        if (r->held) /* the packet a seek stopped at */
            r->held = false;
        else
            e = av_read_frame(r->fmt, r->pkt);
        if (e == AVERROR_EOF) {
            r->demux_eof = true;
            return KP_ERR_NOT_FOUND;
        }
        if (e < 0) {
            char what[64];
            snprintf(what, sizeof what, "reading packet %llu", (unsigned long long)r->packets);
            return kp__reader_wait_error(r, e, e == AVERROR(EIO) ? KP_ERR_IO : KP_ERR_PARSE, what);
        }
        if (r->pkt->stream_index == r->st->index) {
            bool stop = false;
            if (r->range.on && (r->pkt->flags & AV_PKT_FLAG_KEY)) kp__range_key(r, &stop);
            if (r->range.on && kp__range_skip(r, r->pkt)) {
                av_packet_unref(r->pkt); /* dropped, and referred to by nothing kept */
                continue;
            }
            if (stop) {
                av_packet_unref(r->pkt);
                r->demux_eof = true;
                return KP_ERR_NOT_FOUND;
            }
            r->packets++;
            return KP_OK;
        }
        av_packet_unref(r->pkt);
    }
}
