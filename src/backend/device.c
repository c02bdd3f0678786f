/* Public device API: handle checks, then one call through the backend vtable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend-impl.h"

#define KP__HANDLE(h, what)                                                     \
    do {                                                                        \
        if (!(h)) return kp__error(KP_ERR_INVALID_ARG, "%s: %s is NULL", __func__, what); \
    } while (0)

/* `b` (called `what`) must be on the device of `a` (called `owner`). */
#define KP__SAME_DEV(a, owner, b, what)                                         \
    do {                                                                        \
        if ((a)->dev != (b)->dev)                                               \
            return kp__error_devices(__func__, what, (b)->dev, (b)->dev->name, owner, \
                                     (a)->dev, (a)->dev->name);                 \
    } while (0)

const char *kp_backends_built(void) {
#ifdef KP_HAVE_CUDA
    return "cpu cuda";
#else
    return "cpu";
#endif
}

int kp_cuda_device_count(char *why, size_t why_len) {
#ifdef KP_HAVE_CUDA
    return kp__cuda_count(why, why_len);
#else
    if (why && why_len) snprintf(why, why_len, "kpipe was built without the CUDA backend");
    return 0;
#endif
}

/* "cuda" -> 0, "cuda:3" -> 3; -1 if malformed. */
static int kp__parse_ordinal(const char *s) {
    if (*s == '\0') return 0;
    if (*s != ':' || s[1] == '\0') return -1;
    char *end;
    long v = strtol(s + 1, &end, 10);
    return (*end != '\0' || v < 0 || v > 1024) ? -1 : (int)v;
}

kp_status kp_device_open(const char *name, kp_device_t *out) {
    KP__HANDLE(name, "device name");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_device_t dev = kp__calloc(1, sizeof *dev);
    if (!dev) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_device_open: no memory for device");
    kp_status st;
    if (strcmp(name, "cpu") == 0) {
        dev->backend = KP_BACKEND_CPU;
        snprintf(dev->name, sizeof dev->name, "cpu");
        st = kp__cpu_open(dev);
    } else if (strncmp(name, "cuda", 4) == 0) {
        int ord = kp__parse_ordinal(name + 4);
        dev->backend = KP_BACKEND_CUDA;
        dev->ordinal = ord;
        snprintf(dev->name, sizeof dev->name, "cuda:%d", ord);
        if (ord < 0)
            st = kp__error(KP_ERR_INVALID_ARG,
                           "device name \"%s\": expected \"cuda\" or \"cuda:N\"", name);
        else
#ifdef KP_HAVE_CUDA
            st = kp__cuda_open(dev, ord);
#else
            st = kp__error(KP_ERR_NO_DEVICE, "device \"%s\": kpipe was built without the CUDA "
                           "backend (configure with -DKP_CUDA=ON)", name);
#endif
    } else {
        st = kp__error(KP_ERR_NO_DEVICE, "unknown device \"%s\" (expected cpu, cuda or cuda:N)",
                       name);
    }
    if (st != KP_OK) {
        kp__free(dev);
        return st;
    }
    pthread_mutex_init(&dev->ext_mu, NULL);
    *out = dev;
    return KP_OK;
}

void kp_device_close(kp_device_t dev) {
    if (!dev) return;
    for (int i = KP__DEVICE_EXT_SLOTS - 1; i >= 0; i--)
        if (dev->ext[i].obj) dev->ext[i].close(dev->ext[i].obj);
    pthread_mutex_destroy(&dev->ext_mu);
    dev->iface->close(dev->ctx);
    kp__free(dev);
}

kp_backend kp_device_backend(kp_device_t dev) { return dev ? dev->backend : KP_BACKEND_NONE; }
const char *kp_device_name(kp_device_t dev) { return dev ? dev->name : "(null)"; }

kp_status kp_device_describe(kp_device_t dev, char *buf, size_t len) {
    KP__HANDLE(dev, "device");
    KP_ARG_CHECK(buf && len > 0);
    return dev->iface->describe(dev->ctx, buf, len);
}

kp_status kp_device_versions(kp_device_t dev, int *driver, int *runtime) {
    KP__HANDLE(dev, "device");
    KP_ARG_CHECK(driver && runtime);
    *driver = *runtime = 0;
    return dev->iface->versions ? dev->iface->versions(dev->ctx, driver, runtime) : KP_OK;
}

/* --- memory ------------------------------------------------------------------- */
/* Sizes past any device are refused before the backend sees them. */
static kp_status kp__check_size(size_t bytes, const char *fn) {
    if (bytes <= KP__MAX_ALLOC_BYTES) return KP_OK;
    return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: %zu bytes is more than any device holds (at most "
                     "%zu in one allocation)", fn, bytes, KP__MAX_ALLOC_BYTES);
}

kp_status kp_malloc(kp_device_t dev, size_t bytes, void **out) {
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
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    KP_CHECK(kp__check_size(bytes, __func__));
    return dev->iface->malloc_host(dev->ctx, bytes, out);
}

void kp_free_host(kp_device_t dev, void *ptr) {
    if (dev && ptr) dev->iface->free_host(dev->ctx, ptr);
}

static kp_status kp__memcpy(kp_device_t dev, void *dst, const void *src, size_t bytes) {
    KP__HANDLE(dev, "device");
    if (bytes == 0) return KP_OK;
    KP_ARG_CHECK(dst && src);
    return dev->iface->memcpy(dev->ctx, dst, src, bytes);
}

kp_status kp_memcpy_htod(kp_device_t d, void *dst, const void *src, size_t n) {
    return kp__memcpy(d, dst, src, n);
}
kp_status kp_memcpy_dtoh(kp_device_t d, void *dst, const void *src, size_t n) {
    return kp__memcpy(d, dst, src, n);
}
kp_status kp_memcpy_dtod(kp_device_t d, void *dst, const void *src, size_t n) {
    return kp__memcpy(d, dst, src, n);
}

kp_status kp_device_sync(kp_device_t dev) {
    KP__HANDLE(dev, "device");
    return dev->iface->sync(dev->ctx);
}

/* --- streams -------------------------------------------------------------------- */
kp_status kp_stream_create(kp_device_t dev, kp_stream_t *out) {
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_stream_t s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_stream_create: no memory");
    s->dev = dev;
    kp_status st = dev->iface->stream_create(dev->ctx, &s->impl);
    if (st != KP_OK) {
        kp__free(s);
        return st;
    }
    *out = s;
    return KP_OK;
}

void kp_stream_destroy(kp_stream_t s) {
    if (!s) return;
    s->dev->iface->stream_destroy(s->dev->ctx, s->impl);
    kp__free(s);
}

kp_status kp_stream_sync(kp_stream_t s) {
    KP__HANDLE(s, "stream");
    return s->dev->iface->stream_sync(s->dev->ctx, s->impl);
}

kp_status kp_stream_query(kp_stream_t s, bool *idle) {
    KP__HANDLE(s, "stream");
    KP__HANDLE(idle, "idle");
    return s->dev->iface->stream_query(s->dev->ctx, s->impl, idle);
}

kp_device_t kp_stream_device(kp_stream_t s) { return s ? s->dev : NULL; }

kp_status kp_memcpy_async(kp_stream_t s, void *dst, const void *src, size_t bytes) {
    KP__HANDLE(s, "stream");
    if (bytes == 0) return KP_OK;
    KP_ARG_CHECK(dst && src);
    return s->dev->iface->memcpy_async(s->dev->ctx, s->impl, dst, src, bytes);
}

kp_status kp_memset_async(kp_stream_t s, void *dst, int value, size_t bytes) {
    KP__HANDLE(s, "stream");
    if (bytes == 0) return KP_OK;
    KP_ARG_CHECK(dst);
    return s->dev->iface->memset_async(s->dev->ctx, s->impl, dst, value, bytes);
}

static kp_status kp__check_launch(const kp_launch *l, const char *fn) {
    if (!l || !l->kernel || !l->kernel->cpu)
        return kp__error(KP_ERR_INVALID_ARG, "%s: launch or its kernel is NULL", fn);
    if (l->kernel->params_size > KP_MAX_KERNEL_PARAMS || (l->kernel->params_size && !l->params))
        return kp__error(KP_ERR_INVALID_ARG, "%s: kernel %s: %zu parameter bytes (max %d)%s", fn,
                         l->kernel->name, l->kernel->params_size, KP_MAX_KERNEL_PARAMS,
                         l->params ? "" : ", params is NULL");
    if (!l->grid.x || !l->grid.y || !l->grid.z || !l->block.x || !l->block.y || !l->block.z)
        return kp__error(KP_ERR_INVALID_ARG, "%s: kernel %s: empty grid or block", fn,
                         l->kernel->name);
    return KP_OK;
}

kp_status kp_launch_kernel(kp_stream_t s, const kp_launch *l) {
    KP__HANDLE(s, "stream");
    KP_CHECK(kp__check_launch(l, __func__));
    return s->dev->iface->launch(s->dev->ctx, s->impl, l);
}

kp_status kp_launch_host_func(kp_stream_t s, void (*fn)(void *), void *user) {
    KP__HANDLE(s, "stream");
    KP_ARG_CHECK(fn);
    return s->dev->iface->host_func(s->dev->ctx, s->impl, fn, user);
}

void *kp_stream_native(kp_stream_t s) {
    if (!s || !s->dev->iface->stream_native) return NULL;
    return s->dev->iface->stream_native(s->dev->ctx, s->impl);
}

/* --- events --------------------------------------------------------------------- */
kp_status kp_event_create(kp_device_t dev, kp_event_t *out) {
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_event_t ev = kp__calloc(1, sizeof *ev);
    if (!ev) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_event_create: no memory");
    ev->dev = dev;
    kp_status st = dev->iface->event_create(dev->ctx, &ev->impl);
    if (st != KP_OK) {
        kp__free(ev);
        return st;
    }
    *out = ev;
    return KP_OK;
}

void kp_event_destroy(kp_event_t ev) {
    if (!ev) return;
    ev->dev->iface->event_destroy(ev->dev->ctx, ev->impl);
    kp__free(ev);
}

kp_status kp_event_record(kp_event_t ev, kp_stream_t s) {
    KP__HANDLE(ev, "event");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ev, "event", s, "stream");
    return ev->dev->iface->event_record(ev->dev->ctx, ev->impl, s->impl);
}

kp_status kp_event_query(kp_event_t ev, bool *done) {
    KP__HANDLE(ev, "event");
    KP__HANDLE(done, "done");
    return ev->dev->iface->event_query(ev->dev->ctx, ev->impl, done);
}

kp_status kp_event_sync(kp_event_t ev) {
    KP__HANDLE(ev, "event");
    return ev->dev->iface->event_sync(ev->dev->ctx, ev->impl);
}

kp_status kp_stream_wait_event(kp_stream_t s, kp_event_t ev) {
    KP__HANDLE(ev, "event");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(s, "stream", ev, "event");
    return s->dev->iface->stream_wait_event(s->dev->ctx, s->impl, ev->impl);
}

kp_status kp_event_elapsed_ms(kp_event_t a, kp_event_t b, float *ms) {
    KP__HANDLE(a, "start event");
    KP__HANDLE(b, "end event");
    KP__HANDLE(ms, "ms");
    KP__SAME_DEV(a, "start event", b, "end event");
    return a->dev->iface->event_elapsed(a->dev->ctx, a->impl, b->impl, ms);
}

/* --- graphs ---------------------------------------------------------------------- */
kp_status kp_graph_create(kp_device_t dev, kp_graph_t *out) {
    KP__HANDLE(dev, "device");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_graph_t g = kp__calloc(1, sizeof *g);
    if (!g) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_graph_create: no memory");
    g->dev = dev;
    kp_status st = dev->iface->graph_create(dev->ctx, &g->impl);
    if (st != KP_OK) {
        kp__free(g);
        return st;
    }
    *out = g;
    return KP_OK;
}

void kp_graph_destroy(kp_graph_t g) {
    if (!g) return;
    g->dev->iface->graph_destroy(g->dev->ctx, g->impl);
    kp__free(g);
}

#define KP__NODE_ARGS(g, deps, n, out)                                          \
    do {                                                                        \
        KP__HANDLE(g, "graph");                                                 \
        KP__HANDLE(out, "out");                                                 \
        if (n && !deps)                                                         \
            return kp__error(KP_ERR_INVALID_ARG, "%s: %zu dependencies but deps is NULL", \
                             __func__, (size_t)(n));                            \
        for (size_t i_ = 0; i_ < (n); i_++)                                     \
            if (!(deps)[i_])                                                    \
                return kp__error(KP_ERR_INVALID_ARG, "%s: dependency %zu is NULL", __func__, i_); \
    } while (0)

kp_status kp_graph_add_kernel(kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                              const kp_launch *l, kp_graph_node_t *out) {
    KP__NODE_ARGS(g, deps, n, out);
    KP_CHECK(kp__check_launch(l, __func__));
    return g->dev->iface->graph_add_kernel(g->dev->ctx, g->impl, deps, n, l, out);
}

kp_status kp_graph_add_memcpy(kp_graph_t g, const kp_graph_node_t *deps, size_t n, void *dst,
                              const void *src, size_t bytes, kp_graph_node_t *out) {
    KP__NODE_ARGS(g, deps, n, out);
    KP_ARG_CHECK(dst && src && bytes > 0);
    return g->dev->iface->graph_add_memcpy(g->dev->ctx, g->impl, deps, n, dst, src, bytes, out);
}

kp_status kp_graph_add_child(kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                             kp_graph_t child, kp_graph_node_t *out) {
    KP__NODE_ARGS(g, deps, n, out);
    KP__HANDLE(child, "child graph");
    KP__SAME_DEV(g, "graph", child, "child graph");
    if (child == g) return kp__error(KP_ERR_INVALID_ARG, "kp_graph_add_child: graph is its own child");
    return g->dev->iface->graph_add_child(g->dev->ctx, g->impl, deps, n, child->impl, out);
}

kp_status kp_graph_add_empty(kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                             kp_graph_node_t *out) {
    KP__NODE_ARGS(g, deps, n, out);
    return g->dev->iface->graph_add_empty(g->dev->ctx, g->impl, deps, n, out);
}

size_t kp_graph_node_count(kp_graph_t g) {
    return g ? g->dev->iface->graph_node_count(g->dev->ctx, g->impl) : 0;
}

kp_status kp_graph_instantiate(kp_graph_t g, kp_graph_exec_t *out) {
    KP__HANDLE(g, "graph");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_graph_exec_t ge = kp__calloc(1, sizeof *ge);
    if (!ge) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_graph_instantiate: no memory");
    ge->dev = g->dev;
    kp_status st = g->dev->iface->graph_instantiate(g->dev->ctx, g->impl, &ge->impl);
    if (st != KP_OK) {
        kp__free(ge);
        return st;
    }
    *out = ge;
    return KP_OK;
}

void kp_graph_exec_destroy(kp_graph_exec_t ge) {
    if (!ge) return;
    ge->dev->iface->exec_destroy(ge->dev->ctx, ge->impl);
    kp__free(ge);
}

kp_status kp_graph_exec_upload(kp_graph_exec_t ge, kp_stream_t s) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ge, "graph exec", s, "stream");
    return ge->dev->iface->exec_upload(ge->dev->ctx, ge->impl, s->impl);
}

kp_status kp_graph_exec_launch(kp_graph_exec_t ge, kp_stream_t s) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ge, "graph exec", s, "stream");
    return ge->dev->iface->exec_launch(ge->dev->ctx, ge->impl, s->impl);
}

kp_status kp_graph_exec_set_kernel(kp_graph_exec_t ge, kp_graph_node_t node, const kp_launch *l) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP_CHECK(kp__check_launch(l, __func__));
    return ge->dev->iface->exec_set_kernel(ge->dev->ctx, ge->impl, node, l);
}

kp_status kp_graph_exec_set_memcpy(kp_graph_exec_t ge, kp_graph_node_t node, void *dst,
                                   const void *src, size_t bytes) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP_ARG_CHECK(dst && src && bytes > 0);
    return ge->dev->iface->exec_set_memcpy(ge->dev->ctx, ge->impl, node, dst, src, bytes);
}

kp_status kp_graph_exec_set_child(kp_graph_exec_t ge, kp_graph_node_t node, kp_graph_t child) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP__HANDLE(child, "child graph");
    KP__SAME_DEV(ge, "graph exec", child, "child graph");
    return ge->dev->iface->exec_set_child(ge->dev->ctx, ge->impl, node, child->impl);
}

kp_status kp_graph_exec_update(kp_graph_exec_t ge, kp_graph_t g) {
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(g, "graph");
    KP__SAME_DEV(ge, "graph exec", g, "graph");
    return ge->dev->iface->exec_update(ge->dev->ctx, ge->impl, g->impl);
}

/* --- capture ---------------------------------------------------------------------- */
kp_status kp_stream_begin_capture(kp_stream_t s) {
    KP__HANDLE(s, "stream");
    return s->dev->iface->begin_capture(s->dev->ctx, s->impl);
}

kp_status kp_stream_end_capture(kp_stream_t s, kp_graph_t *out) {
    KP__HANDLE(s, "stream");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_graph_t g = kp__calloc(1, sizeof *g);
    if (!g) {
        /* Still end the capture so the stream is usable again. */
        void *impl = NULL;
        if (s->dev->iface->end_capture(s->dev->ctx, s->impl, &impl) == KP_OK)
            s->dev->iface->graph_destroy(s->dev->ctx, impl);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_stream_end_capture: no memory");
    }
    g->dev = s->dev;
    kp_status st = s->dev->iface->end_capture(s->dev->ctx, s->impl, &g->impl);
    if (st != KP_OK) {
        kp__free(g);
        return st;
    }
    *out = g;
    return KP_OK;
}

bool kp_stream_is_capturing(kp_stream_t s) {
    return s && s->dev->iface->is_capturing(s->dev->ctx, s->impl);
}
