/* The one log sink, and the text it formats for people. The level is read
 * from KP_LOG_LEVEL once, on first use. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>

#include "core-impl.h"

static pthread_once_t kp__log_once = PTHREAD_ONCE_INIT;
static _Atomic int kp__log_level = KP_LOG_WARN;
static kp_log_fn kp__log_fn;
static void *kp__log_user;

static const char *const kp__level_names[] = {"debug", "info", "warn", "error", "off"};

const char *kp_log_level_str(kp_log_level level) {
    if ((unsigned)level > KP_LOG_OFF) return "?";
    return kp__level_names[level];
}

static void kp__log_init(void) {
    const char *env = getenv("KP_LOG_LEVEL");
    if (!env) return;
    for (int i = 0; i <= KP_LOG_OFF; i++)
        if (strcasecmp(env, kp__level_names[i]) == 0) atomic_store(&kp__log_level, i);
}

kp_log_level kp_log_get_level(void) {
    pthread_once(&kp__log_once, kp__log_init);
    return (kp_log_level)atomic_load_explicit(&kp__log_level, memory_order_relaxed);
}

void kp_log_set_callback(kp_log_fn fn, void *user, kp_log_level level) {
    pthread_once(&kp__log_once, kp__log_init);
    kp__log_fn = fn;
    kp__log_user = user;
    atomic_store(&kp__log_level, (int)level);
}

void kp__log(kp_log_level level, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    if (level < kp_log_get_level() || level >= KP_LOG_OFF) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (kp__log_fn)
        kp__log_fn(level, msg, kp__log_user);
    else
        fprintf(stderr, "kpipe %s: %s\n", kp_log_level_str(level), msg);
}

/* --- text for people ------------------------------------------------------------ */
const char *kp__bytes_str(size_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, units[u]);
    return buf;
}
