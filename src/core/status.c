/* Status strings and the thread-local error detail. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core-impl.h"

#define KP__ERR_LEN 1024

static _Thread_local char kp__err_buf[KP__ERR_LEN];

const char *kp_status_str(kp_status st) {
    switch (st) {
#define KP__STATUS_STR(name, value, text) case KP_##name: return text;
        KP_STATUS_MAP(KP__STATUS_STR)
#undef KP__STATUS_STR
    }
    return "unknown status";
}

const char *kp_status_name(kp_status st) {
    switch (st) {
#define KP__STATUS_NAME(name, value, text) case KP_##name: return "KP_" #name;
        KP_STATUS_MAP(KP__STATUS_NAME)
#undef KP__STATUS_NAME
    }
    return "KP_UNKNOWN";
}

const char *kp_last_error(void) { return kp__err_buf; }

void kp_clear_error(void) { kp__err_buf[0] = '\0'; }

kp_status kp__error(kp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kp__err_buf, sizeof kp__err_buf, fmt, ap);
    va_end(ap);
    kp__log(KP_LOG_DEBUG, "%s: %s", kp_status_name(st), kp__err_buf);
    return st;
}

kp_status kp__error_prefix(kp_status st, const char *fmt, ...) {
    char prefix[256];
    char old[KP__ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, kp__err_buf, sizeof old);
    snprintf(kp__err_buf, sizeof kp__err_buf, "%s: %s", prefix, old);
    return st;
}

kp_status kp__error_devices(const char *fn, const char *what, const void *what_dev,
                            const char *what_name, const char *owner, const void *owner_dev,
                            const char *owner_name) {
    if (strcmp(what_name, owner_name) != 0)
        return kp__error(KP_ERR_INVALID_ARG, "%s: the %s belongs to %s, the %s to %s", fn, what,
                         what_name, owner, owner_name);
    return kp__error(KP_ERR_INVALID_ARG, "%s: the %s and the %s belong to two different handles "
                     "of device %s (%p and %p): open a device once and use that handle for all "
                     "its objects", fn, what, owner, what_name, what_dev, owner_dev);
}

_Noreturn void kp__assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "kpipe: internal invariant broken: %s (%s:%d)\n", cond, file, line);
    abort();
}

const char *kp_version_str(void) { return "0.1.0"; }
