/* Public device API: handle checks, then one call through the backend
 * vtable. Every failure's detail starts with the public function's name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api-impl.h"

/* --- devices ------------------------------------------------------------------- */
kp_status kp_device_open(const char *name, kp_device_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(name, "device name");
    KP__HANDLE(out, "out");
    *out = NULL;
    const kp_backend_reg *reg;
    int ord;
    KP_CHECK(kp__backend_resolve(name, &reg, &ord));
    char why[256] = "";
    int n = reg->device_count(reg, why, sizeof why);
    if (ord >= n)
        return kp__error(KP_ERR_NO_DEVICE, "kp_device_open: device \"%s\": %s has %d device%s%s%s",
                         name, reg->name, n, n == 1 ? "" : "s", why[0] ? ": " : "", why);
    kp_device_t dev = kp__calloc(1, sizeof *dev);
    if (!dev) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_device_open: no memory for a device");
    dev->reg = reg;
    dev->ordinal = ord;
    snprintf(dev->name, sizeof dev->name, "%s:%d", reg->name, ord);
    kp_status st = reg->open(reg, ord, &dev->iface, &dev->ctx);
    if (st != KP_OK) {
        kp__free(dev);
        return st;
    }
    pthread_mutex_init(&dev->mu, NULL);
    *out = dev;
    return KP_OK;
}

void kp_device_close(kp_device_t dev) {
    if (!dev) return;
    for (size_t i = dev->n_att; i-- > 0;) dev->att[i].close(dev->att[i].obj);
    kp__free(dev->att);
    pthread_mutex_destroy(&dev->mu);
    dev->iface->close(dev->ctx);
    kp__free(dev);
}

const char *kp_device_backend(kp_device_t dev) { return dev ? dev->reg->name : "(null)"; }
/* Backends register once each, by a unique name: one registration, one backend. */
bool kp_device_same_backend(kp_device_t a, kp_device_t b) { return a && b && a->reg == b->reg; }
const char *kp_device_kernel_form(kp_device_t dev) {
    return dev ? dev->reg->kernel_form : "(null)";
}
const char *kp_device_name(kp_device_t dev) { return dev ? dev->name : "(null)"; }

kp_status kp_device_describe(kp_device_t dev, char *buf, size_t len) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP_ARG_CHECK(buf && len > 0);
    return dev->iface->describe(dev->ctx, buf, len);
}

kp_status kp_device_versions(kp_device_t dev, int *driver, int *runtime) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP_ARG_CHECK(driver && runtime);
    *driver = *runtime = 0;
    return dev->iface->versions ? dev->iface->versions(dev->ctx, driver, runtime) : KP_OK;
}

kp_status kp_device_query_caps(kp_device_t dev, kp_device_caps *caps) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(caps, "caps");
    size_t have = caps->struct_size;
    if (have < KP__SIZE_THROUGH(kp_device_caps, native_ordinal) || have > sizeof *caps)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_device_query_caps: struct_size %zu; this kpipe fills %zu to %zu "
                         "(use KP_DEVICE_CAPS_INIT)",
                         have, KP__SIZE_THROUGH(kp_device_caps, native_ordinal), sizeof *caps);
    /* Memory counts as apart from the host's unless the backend says
     * otherwise: callers then copy, which is right on any device. */
    kp_device_caps c = KP_DEVICE_CAPS_INIT;
    c.device_memory = true;
    c.native_streams = dev->iface->stream_wrap != NULL;
    c.native_graphs = dev->iface->graph_add_native != NULL;
    c.rtc = dev->iface->rtc_compile != NULL;
    if (dev->iface->caps) KP_CHECK(dev->iface->caps(dev->ctx, &c));
    memcpy(caps, &c, have);
    caps->struct_size = have;
    return KP_OK;
}

kp_status kp_device_peer_access(kp_device_t dev, kp_device_t peer, bool enable, bool *can) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(peer, "peer");
    KP__HANDLE(can, "can");
    *can = false;
    if (dev->iface != peer->iface) return KP_OK;
    if (dev == peer || !dev->iface->peer_access || dev->ctx == peer->ctx) {
        *can = true;
        return KP_OK;
    }
    return dev->iface->peer_access(dev->ctx, peer->ctx, enable, can);
}

kp_status kp_device_bind_thread(kp_device_t dev) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    return dev->iface->bind_thread ? dev->iface->bind_thread(dev->ctx) : KP_OK;
}

kp_status kp_device_attach(kp_device_t dev, const void *key, void *obj, void (*close)(void *obj)) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP_ARG_CHECK(key && close);
    kp_status st = KP_OK;
    pthread_mutex_lock(&dev->mu);
    for (size_t i = 0; i < dev->n_att && st == KP_OK; i++)
        if (dev->att[i].key == key)
            st = kp__error(KP_ERR_STATE,
                           "kp_device_attach: %s already holds an object under this "
                           "key",
                           dev->name);
    if (st == KP_OK && dev->n_att == dev->cap_att) {
        size_t cap = dev->cap_att ? dev->cap_att * 2 : 4;
        kp__attachment *a = kp__calloc(cap, sizeof *a);
        if (!a) {
            st = kp__error(KP_ERR_OUT_OF_MEMORY, "kp_device_attach: no memory");
        } else {
            if (dev->n_att) memcpy(a, dev->att, dev->n_att * sizeof *a);
            kp__free(dev->att);
            dev->att = a;
            dev->cap_att = cap;
        }
    }
    if (st == KP_OK) dev->att[dev->n_att++] = (kp__attachment){key, obj, close};
    pthread_mutex_unlock(&dev->mu);
    return st;
}

void *kp_device_attachment(kp_device_t dev, const void *key) {
    void *obj = NULL;
    if (!dev || !key) return NULL;
    pthread_mutex_lock(&dev->mu);
    for (size_t i = 0; i < dev->n_att && !obj; i++)
        if (dev->att[i].key == key) obj = dev->att[i].obj;
    pthread_mutex_unlock(&dev->mu);
    return obj;
}

/* --- memory ------------------------------------------------------------------- */
/* Sizes past any device are refused before the backend sees them. */
static kp_status kp__check_size(size_t bytes, const char *fn) {
    if (bytes <= KP__MAX_ALLOC_BYTES) return KP_OK;
    return kp__error(KP_ERR_OUT_OF_MEMORY,
                     "%s: %zu bytes is more than any device holds (at most "
                     "%zu in one allocation)",
                     fn, bytes, KP__MAX_ALLOC_BYTES);
}

kp_status kp_malloc(kp_device_t dev, size_t bytes, void **out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    KP_CHECK(kp__check_size(bytes, __func__));
    return dev->iface->malloc(dev->ctx, bytes, out);
}

void kp_free(kp_device_t dev, void *ptr) {
    if (dev && ptr) dev->iface->free(dev->ctx, ptr);
}

kp_status kp_malloc_host(kp_device_t dev, size_t bytes, void **out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    KP_CHECK(kp__check_size(bytes, __func__));
    return dev->iface->malloc_host(dev->ctx, bytes, out);
}

void kp_free_host(kp_device_t dev, void *ptr) {
    if (dev && ptr) dev->iface->free_host(dev->ctx, ptr);
}

/* --- counted copies -------------------------------------------------------------- */
static _Thread_local kp_copy_counts *kp__watch;

kp_copy_counts *kp_copy_count_watch(kp_copy_counts *counts) {
    kp_copy_counts *old = kp__watch;
    kp__watch = counts;
    return old;
}

/* Every copy passes here before it is made (the one place that counts). */
static inline void kp__count_copy(kp_device_t dev, const void *dst, const void *src, size_t bytes) {
    kp_copy_counts *c = kp__watch;
    if (!c || !dev->iface->is_device_memory) return;
    bool to = dev->iface->is_device_memory(dev->ctx, dst),
         from = dev->iface->is_device_memory(dev->ctx, src);
    if (to && !from) {
        c->htod++;
        c->htod_bytes += bytes;
    } else if (from && !to) {
        c->dtoh++;
        c->dtoh_bytes += bytes;
    }
}

static kp_status kp__memcpy(kp_device_t dev, void *dst, const void *src, size_t bytes,
                            const char *fn) {
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "%s: device is NULL", fn);
    if (bytes == 0) return KP_OK;
    if (!dst || !src)
        return kp__error(KP_ERR_INVALID_ARG, "%s: %s is NULL", fn, dst ? "src" : "dst");
    kp__count_copy(dev, dst, src, bytes);
    return dev->iface->memcpy(dev->ctx, dst, src, bytes);
}

kp_status kp_memcpy_htod(kp_device_t d, void *dst, const void *src, size_t n) {
    KP_API_ENTRY();
    return kp__memcpy(d, dst, src, n, __func__);
}
kp_status kp_memcpy_dtoh(kp_device_t d, void *dst, const void *src, size_t n) {
    KP_API_ENTRY();
    return kp__memcpy(d, dst, src, n, __func__);
}
kp_status kp_memcpy_dtod(kp_device_t d, void *dst, const void *src, size_t n) {
    KP_API_ENTRY();
    return kp__memcpy(d, dst, src, n, __func__);
}

kp_status kp_device_sync(kp_device_t dev) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    return dev->iface->sync(dev->ctx);
}

/* --- streams -------------------------------------------------------------------- */
kp_status kp_stream_create(kp_device_t dev, kp_stream_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__MAKE_HANDLE(kp_stream_t, dev, out, dev->iface->stream_create(dev->ctx, &h->impl));
}

kp_status kp_stream_wrap(kp_device_t dev, void *native, kp_stream_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    if (!dev->iface->stream_wrap)
        return kp__error(KP_ERR_UNSUPPORTED, "kp_stream_wrap: the %s backend has no native streams",
                         dev->reg->name);
    void *impl = NULL;
    KP_CHECK(dev->iface->stream_wrap(dev->ctx, native, &impl));
    kp_status st = KP_OK;
    kp__handle *h = kp__handle_new(dev, __func__, &st);
    if (!h) return st;
    h->impl = impl;
    h->borrowed = true;
    *out = (kp_stream_t)kp__handle_done(h, KP_OK);
    return KP_OK;
}

void kp_stream_destroy(kp_stream_t s) {
    if (!s) return;
    if (!s->h.borrowed) KP__CALL(s, stream_destroy, s->h.impl);
    kp__free(s);
}

kp_status kp_stream_sync(kp_stream_t s) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    return KP__CALL(s, stream_sync, s->h.impl);
}

kp_status kp_stream_query(kp_stream_t s, bool *idle) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    KP__HANDLE(idle, "idle");
    return KP__CALL(s, stream_query, s->h.impl, idle);
}

kp_device_t kp_stream_device(kp_stream_t s) { return s ? s->h.dev : NULL; }

kp_status kp_memcpy_async(kp_stream_t s, void *dst, const void *src, size_t bytes) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    if (bytes == 0) return KP_OK;
    KP_ARG_CHECK(dst && src);
    kp__count_copy(s->h.dev, dst, src, bytes);
    return KP__CALL(s, memcpy_async, s->h.impl, dst, src, bytes);
}

kp_status kp_memcpy2d_async(kp_stream_t s, void *dst, size_t dst_pitch, const void *src,
                            size_t src_pitch, size_t width, size_t height) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    if (width == 0 || height == 0) return KP_OK;
    KP_ARG_CHECK(dst && src);
    if (dst_pitch < width || src_pitch < width)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_memcpy2d_async: pitches %zu (dst) and %zu (src) below the width %zu",
                         dst_pitch, src_pitch, width);
    const size_t pitch = dst_pitch > src_pitch ? dst_pitch : src_pitch;
    if ((height - 1) > (SIZE_MAX - width) / pitch || width > SIZE_MAX / height)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_memcpy2d_async: %zu rows of pitch %zu pass the address space", height,
                         pitch);
    kp__count_copy(s->h.dev, dst, src, width * height);
    if (s->h.dev->iface->memcpy2d_async)
        return KP__CALL(s, memcpy2d_async, s->h.impl, dst, dst_pitch, src, src_pitch, width,
                        height);
    for (size_t i = 0; i < height; i++)
        KP_CHECK(KP__CALL(s, memcpy_async, s->h.impl, (char *)dst + i * dst_pitch,
                          (const char *)src + i * src_pitch, width));
    return KP_OK;
}

kp_status kp_memset_async(kp_stream_t s, void *dst, int value, size_t bytes) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    if (bytes == 0) return KP_OK;
    KP_ARG_CHECK(dst);
    return KP__CALL(s, memset_async, s->h.impl, dst, value, bytes);
}

const void *kp_kernel_find(const kp_kernel *k, const char *form) {
    if (!k || !form) return NULL;
    for (int i = 0; i < KP_KERNEL_FORMS && k->impls[i].form; i++)
        if (strcmp(k->impls[i].form, form) == 0) return k->impls[i].impl;
    return NULL;
}

/* A launch the device can run: geometry, parameters and an implementation
 * of the device's kernel form. */
kp_status kp__check_launch(kp_device_t dev, const kp_launch *l, const char *fn) {
    if (!l || !l->kernel)
        return kp__error(KP_ERR_INVALID_ARG, "%s: launch or its kernel is NULL", fn);
    const kp_kernel *k = l->kernel;
    const char *name = k->name ? k->name : "(unnamed)";
    if (k->params_size > KP_MAX_KERNEL_PARAMS || (k->params_size && !l->params))
        return kp__error(KP_ERR_INVALID_ARG, "%s: kernel %s: %zu parameter bytes (max %d)%s", fn,
                         name, k->params_size, KP_MAX_KERNEL_PARAMS,
                         l->params ? "" : ", params is NULL");
    if (!l->grid.x || !l->grid.y || !l->grid.z || !l->block.x || !l->block.y || !l->block.z)
        return kp__error(KP_ERR_INVALID_ARG, "%s: kernel %s: empty grid or block", fn, name);
    if (!kp_kernel_find(k, dev->reg->kernel_form))
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%s: kernel %s has no \"%s\" implementation, which "
                         "%s runs",
                         fn, name, dev->reg->kernel_form, dev->name);
    return KP_OK;
}

kp_status kp_launch_kernel(kp_stream_t s, const kp_launch *l) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    KP_CHECK(kp__check_launch(s->h.dev, l, __func__));
    return KP__CALL(s, launch, s->h.impl, l);
}

kp_status kp_launch_host_func(kp_stream_t s, void (*fn)(void *), void *user) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    KP_ARG_CHECK(fn);
    return KP__CALL(s, host_func, s->h.impl, fn, user);
}

void *kp_stream_native(kp_stream_t s) {
    if (!s || !s->h.dev->iface->stream_native) return NULL;
    return KP__CALL(s, stream_native, s->h.impl);
}

/* --- events --------------------------------------------------------------------- */
kp_status kp_event_create(kp_device_t dev, kp_event_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__MAKE_HANDLE(kp_event_t, dev, out, dev->iface->event_create(dev->ctx, true, &h->impl));
}

kp_status kp_event_create_untimed(kp_device_t dev, kp_event_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__MAKE_HANDLE(kp_event_t, dev, out,
                    (h->untimed = true, dev->iface->event_create(dev->ctx, false, &h->impl)));
}

void kp_event_destroy(kp_event_t ev) {
    if (!ev) return;
    KP__CALL(ev, event_destroy, ev->h.impl);
    kp__free(ev);
}

kp_status kp_event_record(kp_event_t ev, kp_stream_t s) {
    KP_API_ENTRY();
    KP__HANDLE(ev, "event");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ev, "event", s, "stream");
    return KP__CALL(ev, event_record, ev->h.impl, s->h.impl);
}

kp_status kp_event_query(kp_event_t ev, bool *done) {
    KP_API_ENTRY();
    KP__HANDLE(ev, "event");
    KP__HANDLE(done, "done");
    return KP__CALL(ev, event_query, ev->h.impl, done);
}

kp_status kp_event_sync(kp_event_t ev) {
    KP_API_ENTRY();
    KP__HANDLE(ev, "event");
    return KP__CALL(ev, event_sync, ev->h.impl);
}

kp_status kp_stream_wait_event(kp_stream_t s, kp_event_t ev) {
    KP_API_ENTRY();
    KP__HANDLE(ev, "event");
    KP__HANDLE(s, "stream");
    if (s->h.dev->iface != ev->h.dev->iface)
        return kp__error_devices(__func__, "event", ev->h.dev, ev->h.dev->name, "stream", s->h.dev,
                                 s->h.dev->name);
    return KP__CALL(s, stream_wait_event, s->h.impl, ev->h.impl);
}

kp_status kp_event_elapsed_ms(kp_event_t a, kp_event_t b, float *ms) {
    KP_API_ENTRY();
    KP__HANDLE(a, "start event");
    KP__HANDLE(b, "end event");
    KP__HANDLE(ms, "ms");
    KP__SAME_DEV(a, "start event", b, "end event");
    if (a->h.untimed || b->h.untimed)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_event_elapsed_ms: the %s event was made by kp_event_create_untimed "
                         "and has no timestamps",
                         a->h.untimed ? "start" : "end");
    return KP__CALL(a, event_elapsed, a->h.impl, b->h.impl, ms);
}

/* --- sharing with another process ----------------------------------------------- */
/* The backend's slot, or why there is none. */
#define KP__IPC_SLOT(dev, slot)                                                              \
    do {                                                                                     \
        if (!(dev)->iface->slot)                                                             \
            return kp__error(KP_ERR_UNSUPPORTED,                                             \
                             "%s: %s cannot share memory or events with another process", \
                             __func__, (dev)->name);                                         \
    } while (0)

kp_status kp_ipc_export(kp_device_t dev, void *ptr, kp_ipc_handle *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(ptr, "ptr");
    KP__HANDLE(out, "out");
    memset(out, 0, sizeof *out);
    KP__IPC_SLOT(dev, ipc_export);
    return dev->iface->ipc_export(dev->ctx, ptr, out->bytes);
}

kp_status kp_ipc_open(kp_device_t dev, const kp_ipc_handle *h, void **out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(h, "handle");
    KP__HANDLE(out, "out");
    *out = NULL;
    KP__IPC_SLOT(dev, ipc_open);
    return dev->iface->ipc_open(dev->ctx, h->bytes, out);
}

void kp_ipc_close(kp_device_t dev, void *ptr) {
    if (dev && ptr && dev->iface->ipc_close) dev->iface->ipc_close(dev->ctx, ptr);
}

kp_status kp_event_create_ipc(kp_device_t dev, kp_event_t *out, kp_ipc_handle *handle) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(handle, "handle");
    KP__HANDLE(out, "out");
    *out = NULL;
    memset(handle, 0, sizeof *handle);
    KP__IPC_SLOT(dev, ipc_event_create);
    KP__MAKE_HANDLE(kp_event_t, dev, out,
                    (h->untimed = true,
                     dev->iface->ipc_event_create(dev->ctx, &h->impl, handle->bytes)));
}

kp_status kp_event_open_ipc(kp_device_t dev, const kp_ipc_handle *handle, kp_event_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(handle, "handle");
    KP__HANDLE(out, "out");
    *out = NULL;
    KP__IPC_SLOT(dev, ipc_event_open);
    KP__MAKE_HANDLE(kp_event_t, dev, out,
                    (h->untimed = true,
                     dev->iface->ipc_event_open(dev->ctx, handle->bytes, &h->impl)));
}

/* --- run-time compilation --------------------------------------------------------- */
kp_status kp__rtc_args(const char *source, kp_rtc_info *info) {
    if (info) memset(info, 0, sizeof *info);
    if (!source || !*source) return kp__error(KP_ERR_INVALID_ARG, "source is NULL or empty");
    if (strlen(source) > KP_RTC_MAX_SOURCE)
        return kp__error(KP_ERR_INVALID_ARG, "source of %zu bytes (at most %d)", strlen(source),
                         KP_RTC_MAX_SOURCE);
    return KP_OK;
}

kp_status kp_rtc_compile(kp_device_t dev, const char *source, const char *entry,
                         kp_device_kernel *out, kp_rtc_info *info) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    out->fn = NULL;
    KP_CHECK(kp__rtc_args(source, info));
    if (!entry || !*entry || strlen(entry) >= 64)
        return kp__error(KP_ERR_INVALID_ARG, "entry is NULL, empty or longer than 63 characters");
    if (!dev->iface->rtc_compile)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "device %s compiles no kernels at run time: it runs their host form",
                         dev->name);
    return dev->iface->rtc_compile(dev->ctx, source, entry, out, info);
}

#ifndef KP_HAVE_CUDA
/* With CUDA, cuda_rtc.c defines it. */
kp_status kp_rtc_check(const char *arch, const char *source, kp_rtc_info *info) {
    KP_API_ENTRY();
    KP_CHECK(kp__rtc_args(source, info));
    return kp__error(KP_ERR_UNSUPPORTED, "this build has no CUDA, so no run-time compiler");
}
#endif
