/* Status strings and the thread-local error detail. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "core-impl.h"

#define KP__ERR_LEN 4096

static _Thread_local char kp__err_buf[KP__ERR_LEN];
static _Thread_local unsigned kp__err_gen; /* counts details recorded on this thread */

const char *kp_status_str(kp_status st) {
    switch (st) {
#define KP__STATUS_STR(name, value, text) \
    case KP_##name: return text;
        KP_STATUS_MAP(KP__STATUS_STR)
#undef KP__STATUS_STR
    }
    return "unknown status";
}

const char *kp_status_name(kp_status st) {
    switch (st) {
#define KP__STATUS_NAME(name, value, text) \
    case KP_##name: return "KP_" #name;
        KP_STATUS_MAP(KP__STATUS_NAME)
#undef KP__STATUS_NAME
    }
    return "KP_UNKNOWN";
}

const char *kp_last_error(void) { return kp__err_buf; }

void kp_clear_error(void) { kp__err_buf[0] = '\0'; }

kp_status kp__error(kp_status st, const char *fmt, ...) {
    va_list ap;
    kp__err_gen++;
    va_start(ap, fmt);
    vsnprintf(kp__err_buf, sizeof kp__err_buf, fmt, ap);
    va_end(ap);
    kp__log(KP_LOG_DEBUG, "%s: %s", kp_status_name(st), kp__err_buf);
    return st;
}

kp_status kp_set_error(kp_status st, const char *fmt, ...) {
    va_list ap;
    kp__err_gen++;
    if (!fmt) return kp__error(st, "(no detail given)");
    va_start(ap, fmt);
    vsnprintf(kp__err_buf, sizeof kp__err_buf, fmt, ap);
    va_end(ap);
    return st;
}

kp_status kp__error_prefix(kp_status st, const char *fmt, ...) {
    char prefix[256];
    char old[KP__ERR_LEN];
    va_list ap;
    kp__err_gen++;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, kp__err_buf, sizeof old);
    snprintf(kp__err_buf, sizeof kp__err_buf, "%s: %s", prefix, old);
    return st;
}

kp_status kp__config_read(void *dst, size_t size, const void *src, size_t min_size,
                          const char *what, const char *init_macro) {
    size_t have = *(const size_t *)src;
    if (have < min_size || have > size)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: struct_size %zu; this kpipe reads %zu to %zu (use "
                         "%s)",
                         what, have, min_size, size, init_macro);
    memcpy(dst, src, have);
    *(size_t *)dst = size;
    return KP_OK;
}

kp__api_scope kp__api_enter(const char *fn) { return (kp__api_scope){fn, kp__err_gen}; }

void kp__api_leave(const kp__api_scope *s) {
    size_t n = strlen(s->fn);
    if (kp__err_gen == s->gen || (strncmp(kp__err_buf, s->fn, n) == 0 && kp__err_buf[n] == ':'))
        return;
    kp__error_prefix(KP_OK, "%s", s->fn);
}

kp_status kp__guard_refuse(const char *what, const char *inside) {
    return kp__error(KP_ERR_STATE,
                     "the %s is in use: %s is running on it (on another thread, or this call "
                     "came from a callback inside it); a %s is used by one thread at a time",
                     what, inside ? inside : "another call", what);
}

kp_status kp__error_devices(const char *fn, const char *what, const void *what_dev,
                            const char *what_name, const char *owner, const void *owner_dev,
                            const char *owner_name) {
    if (strcmp(what_name, owner_name) != 0)
        return kp__error(KP_ERR_INVALID_ARG, "%s: the %s belongs to %s, the %s to %s", fn, what,
                         what_name, owner, owner_name);
    return kp__error(KP_ERR_INVALID_ARG,
                     "%s: the %s and the %s belong to two different handles "
                     "of device %s (%p and %p): open a device once and use that handle for all "
                     "its objects",
                     fn, what, owner, what_name, what_dev, owner_dev);
}

_Noreturn void kp__assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "kpipe: internal invariant broken: %s (%s:%d)\n", cond, file, line);
    abort();
}

#define KP__STR(x) #x
#define KP__XSTR(x) KP__STR(x)
const char *kp_version_str(void) {
    return KP__XSTR(KP_VERSION_MAJOR) "." KP__XSTR(KP_VERSION_MINOR) "." KP__XSTR(KP_VERSION_PATCH);
}

/* --- libraries in use ------------------------------------------------------------- */
#define KP__MAX_LIBS 32
static char kp__libs[KP__MAX_LIBS][64];
static size_t kp__n_libs;
static pthread_mutex_t kp__libs_mu = PTHREAD_MUTEX_INITIALIZER;

kp_status kp_library_register(const char *name, const char *version) {
    KP_API_ENTRY();
    if (!name || !*name || !version)
        return kp__error(KP_ERR_INVALID_ARG, "kp_library_register: name and version are required");
    char text[64];
    if ((size_t)snprintf(text, sizeof text, "%s %s", name, version) >= sizeof text)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_library_register: \"%s %s\" is longer than %zu "
                         "characters",
                         name, version, sizeof text - 1);
    kp_status st = KP_OK;
    size_t n = strlen(name);
    pthread_mutex_lock(&kp__libs_mu);
    bool seen = false;
    for (size_t i = 0; i < kp__n_libs && !seen; i++)
        seen = strncmp(kp__libs[i], name, n) == 0 && kp__libs[i][n] == ' ';
    if (!seen && kp__n_libs == KP__MAX_LIBS)
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "kp_library_register: %d libraries noted already",
                       KP__MAX_LIBS);
    else if (!seen)
        memcpy(kp__libs[kp__n_libs++], text, sizeof text);
    pthread_mutex_unlock(&kp__libs_mu);
    return st;
}

const char *kp_library_name(size_t i) {
    pthread_mutex_lock(&kp__libs_mu);
    const char *s = i < kp__n_libs ? kp__libs[i] : NULL;
    pthread_mutex_unlock(&kp__libs_mu);
    return s;
}
