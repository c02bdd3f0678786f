/* The backend table: the built-in backends, one line each, then those a
 * program registers with kp_backend_register. Devices are opened through it
 * by name; nothing else in the library knows a backend by name. */
#include <stdio.h>
#include <string.h>

#include "backend-impl.h"

#define KP__MAX_BACKENDS 16

static const kp_backend_reg *const kp__builtin[] = {
    &kp__cpu_backend,
#ifdef KP_HAVE_CUDA
    &kp__cuda_backend,
#endif
};
#define KP__N_BUILTIN (sizeof kp__builtin / sizeof kp__builtin[0])

/* Registered copies; an entry never moves or changes once counted. */
static kp_backend_reg kp__added[KP__MAX_BACKENDS];
static size_t kp__n_added;
static pthread_mutex_t kp__backends_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t kp__n_added_now(void) {
    pthread_mutex_lock(&kp__backends_mu);
    size_t n = kp__n_added;
    pthread_mutex_unlock(&kp__backends_mu);
    return n;
}

size_t kp_backend_count(void) { return KP__N_BUILTIN + kp__n_added_now(); }

static const kp_backend_reg *kp__backend_at(size_t i) {
    if (i < KP__N_BUILTIN) return kp__builtin[i];
    i -= KP__N_BUILTIN;
    return i < kp__n_added_now() ? &kp__added[i] : NULL;
}

const char *kp_backend_name(size_t i) {
    const kp_backend_reg *r = kp__backend_at(i);
    return r ? r->name : NULL;
}

static const kp_backend_reg *kp__find_n(const char *name, size_t len) {
    const kp_backend_reg *r;
    for (size_t i = 0; (r = kp__backend_at(i)) != NULL; i++)
        if (strlen(r->name) == len && strncmp(r->name, name, len) == 0) return r;
    return NULL;
}

const kp_backend_reg *kp_backend_find(const char *name) {
    return name ? kp__find_n(name, strlen(name)) : NULL;
}

void kp__backend_list(char *buf, size_t len) {
    size_t used = 0;
    const kp_backend_reg *r;
    if (!len) return;
    buf[0] = '\0';
    for (size_t i = 0; (r = kp__backend_at(i)) != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", r->name);
}

kp_status kp_backend_register(const kp_backend_reg *reg) {
    KP_API_ENTRY();
    if (!reg) return kp__error(KP_ERR_INVALID_ARG, "kp_backend_register: reg is NULL");
    kp_backend_reg r = KP_BACKEND_REG_INIT;
    KP_CHECK(kp__config_read(&r, sizeof r, reg, KP__SIZE_THROUGH(kp_backend_reg, options), "reg",
                             "KP_BACKEND_REG_INIT"));
    reg = &r;
    if (!reg->name || !*reg->name || strlen(reg->name) >= 32 || strchr(reg->name, ':'))
        return kp__error(KP_ERR_INVALID_ARG, "kp_backend_register: the name must have 1 to 31 "
                                             "characters and no ':'");
    if (!reg->kernel_form || !*reg->kernel_form || !reg->device_count || !reg->open)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_backend_register: backend \"%s\" needs a kernel "
                         "form, device_count and open",
                         reg->name);
    kp_status st = KP_OK;
    pthread_mutex_lock(&kp__backends_mu);
    bool taken = false;
    for (size_t i = 0; i < KP__N_BUILTIN; i++)
        taken = taken || strcmp(kp__builtin[i]->name, reg->name) == 0;
    for (size_t i = 0; i < kp__n_added; i++)
        taken = taken || strcmp(kp__added[i].name, reg->name) == 0;
    if (taken)
        st = kp__error(KP_ERR_INVALID_ARG,
                       "kp_backend_register: a backend \"%s\" is registered "
                       "already",
                       reg->name);
    else if (kp__n_added == KP__MAX_BACKENDS)
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "kp_backend_register: the table is full (%d)",
                       KP__MAX_BACKENDS);
    else
        kp__added[kp__n_added++] = *reg;
    pthread_mutex_unlock(&kp__backends_mu);
    return st;
}

int kp_device_count(const char *backend, char *why, size_t why_len) {
    const kp_backend_reg *r = kp_backend_find(backend);
    if (!r) {
        char list[256];
        kp__backend_list(list, sizeof list);
        if (why && why_len)
            snprintf(why, why_len, "no backend \"%s\" (registered: %s)",
                     backend ? backend : "(null)", list);
        return 0;
    }
    char none[8];
    return r->device_count(r, why && why_len ? why : none, why && why_len ? why_len : sizeof none);
}

/* "cuda:1" -> the backend and 1; "cpu" -> the backend and 0. */
/* The name's form is checked before its backend is looked up: a malformed
 * name is KP_ERR_INVALID_ARG whichever backends this kpipe was built with. */
kp_status kp__backend_resolve(const char *name, const kp_backend_reg **reg, int *ordinal) {
    const char *colon = strchr(name, ':');
    size_t len = colon ? (size_t)(colon - name) : strlen(name);
    long v = 0;
    if (colon) {
        const char *d = colon + 1;
        for (; *d >= '0' && *d <= '9' && v <= 4096; d++) v = v * 10 + (*d - '0');
        if (d == colon + 1 || *d || v > 4096)
            return kp__error(KP_ERR_INVALID_ARG,
                             "kp_device_open: device name \"%s\": expected \"%.*s\" "
                             "or \"%.*s:N\"",
                             name, (int)len, name, (int)len, name);
    }
    *reg = kp__find_n(name, len);
    if (!*reg) {
        char list[256];
        kp__backend_list(list, sizeof list);
        return kp__error(KP_ERR_NO_DEVICE,
                         "kp_device_open: unknown device \"%s\" (backends: %s; "
                         "a device is \"backend\" or \"backend:N\")",
                         name, list);
    }
    *ordinal = (int)v;
    return KP_OK;
}
