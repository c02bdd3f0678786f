/* Public graph API: graphs built node by node or captured from a stream,
 * their executable form and its updates; handle checks, then one call
 * through the backend vtable, as in device.c. */
#include "api-impl.h"

/* --- graphs ---------------------------------------------------------------------- */
kp_status kp_graph_create(kp_device_t dev, kp_graph_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(dev, "device");
    KP__MAKE_HANDLE(kp_graph_t, dev, out, dev->iface->graph_create(dev->ctx, &h->impl));
}

void kp_graph_destroy(kp_graph_t g) {
    if (!g) return;
    KP__CALL(g, graph_destroy, g->h.impl);
    kp__free(g);
}

#define KP__NODE_ARGS(g, deps, n, out)                                                            \
    do {                                                                                          \
        KP__HANDLE(g, "graph");                                                                   \
        KP__HANDLE(out, "out");                                                                   \
        if (n && !deps)                                                                           \
            return kp__error(KP_ERR_INVALID_ARG, "%s: %zu dependencies but deps is NULL",         \
                             __func__, (size_t)(n));                                              \
        for (size_t i_ = 0; i_ < (n); i_++)                                                       \
            if (!(deps)[i_])                                                                      \
                return kp__error(KP_ERR_INVALID_ARG, "%s: dependency %zu is NULL", __func__, i_); \
    } while (0)

kp_status kp_graph_add_kernel(kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                              const kp_launch *l, kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__NODE_ARGS(g, deps, n, out);
    KP_CHECK(kp__check_launch(g->h.dev, l, __func__));
    return KP__CALL(g, graph_add_kernel, g->h.impl, deps, n, l, out);
}

kp_status kp_graph_add_memcpy(kp_graph_t g, const kp_graph_node_t *deps, size_t n, void *dst,
                              const void *src, size_t bytes, kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__NODE_ARGS(g, deps, n, out);
    KP_ARG_CHECK(dst && src && bytes > 0);
    return KP__CALL(g, graph_add_memcpy, g->h.impl, deps, n, dst, src, bytes, out);
}

kp_status kp_graph_add_child(kp_graph_t g, const kp_graph_node_t *deps, size_t n, kp_graph_t child,
                             kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__NODE_ARGS(g, deps, n, out);
    KP__HANDLE(child, "child graph");
    KP__SAME_DEV(g, "graph", child, "child graph");
    if (child == g)
        return kp__error(KP_ERR_INVALID_ARG, "kp_graph_add_child: graph is its own child");
    return KP__CALL(g, graph_add_child, g->h.impl, deps, n, child->h.impl, out);
}

kp_status kp_graph_add_native(kp_graph_t g, const kp_graph_node_t *deps, size_t n, void *native,
                              kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__NODE_ARGS(g, deps, n, out);
    KP__HANDLE(native, "native graph");
    if (!g->h.dev->iface->graph_add_native)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "kp_graph_add_native: the %s backend has no native graphs",
                         g->h.dev->reg->name);
    return KP__CALL(g, graph_add_native, g->h.impl, deps, n, native, out);
}

kp_status kp_graph_add_kernel_first(kp_graph_t g, const kp_launch *l, kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(g, "graph");
    KP__HANDLE(out, "out");
    KP_CHECK(kp__check_launch(g->h.dev, l, __func__));
    if (!g->h.dev->iface->graph_add_kernel_first)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "kp_graph_add_kernel_first: the %s backend runs a graph's nodes in the "
                         "order they were added; add the kernel before the rest",
                         g->h.dev->reg->name);
    return KP__CALL(g, graph_add_kernel_first, g->h.impl, l, out);
}

kp_status kp_graph_add_empty(kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                             kp_graph_node_t *out) {
    KP_API_ENTRY();
    KP__NODE_ARGS(g, deps, n, out);
    return KP__CALL(g, graph_add_empty, g->h.impl, deps, n, out);
}

size_t kp_graph_node_count(kp_graph_t g) {
    return g ? KP__CALL(g, graph_node_count, g->h.impl) : 0;
}

kp_status kp_graph_instantiate(kp_graph_t g, kp_graph_exec_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(g, "graph");
    KP__MAKE_HANDLE(kp_graph_exec_t, g->h.dev, out,
                    KP__CALL(g, graph_instantiate, g->h.impl, &h->impl));
}

void kp_graph_exec_destroy(kp_graph_exec_t ge) {
    if (!ge) return;
    KP__CALL(ge, exec_destroy, ge->h.impl);
    kp__free(ge);
}

kp_status kp_graph_exec_upload(kp_graph_exec_t ge, kp_stream_t s) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ge, "graph exec", s, "stream");
    return KP__CALL(ge, exec_upload, ge->h.impl, s->h.impl);
}

kp_status kp_graph_exec_launch(kp_graph_exec_t ge, kp_stream_t s) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(s, "stream");
    KP__SAME_DEV(ge, "graph exec", s, "stream");
    return KP__CALL(ge, exec_launch, ge->h.impl, s->h.impl);
}

kp_status kp_graph_exec_set_kernel(kp_graph_exec_t ge, kp_graph_node_t node, const kp_launch *l) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP_CHECK(kp__check_launch(ge->h.dev, l, __func__));
    return KP__CALL(ge, exec_set_kernel, ge->h.impl, node, l);
}

kp_status kp_graph_exec_set_memcpy(kp_graph_exec_t ge, kp_graph_node_t node, void *dst,
                                   const void *src, size_t bytes) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP_ARG_CHECK(dst && src && bytes > 0);
    return KP__CALL(ge, exec_set_memcpy, ge->h.impl, node, dst, src, bytes);
}

kp_status kp_graph_exec_set_child(kp_graph_exec_t ge, kp_graph_node_t node, kp_graph_t child) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(node, "node");
    KP__HANDLE(child, "child graph");
    KP__SAME_DEV(ge, "graph exec", child, "child graph");
    return KP__CALL(ge, exec_set_child, ge->h.impl, node, child->h.impl);
}

kp_status kp_graph_exec_update(kp_graph_exec_t ge, kp_graph_t g) {
    KP_API_ENTRY();
    KP__HANDLE(ge, "graph exec");
    KP__HANDLE(g, "graph");
    KP__SAME_DEV(ge, "graph exec", g, "graph");
    return KP__CALL(ge, exec_update, ge->h.impl, g->h.impl);
}

/* --- capture ---------------------------------------------------------------------- */
kp_status kp_stream_begin_capture(kp_stream_t s) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    return KP__CALL(s, begin_capture, s->h.impl);
}

kp_status kp_stream_end_capture(kp_stream_t s, kp_graph_t *out) {
    KP_API_ENTRY();
    KP__HANDLE(s, "stream");
    KP__HANDLE(out, "out");
    *out = NULL;
    kp_status st = KP_OK;
    kp__handle *h = kp__handle_new(s->h.dev, __func__, &st);
    if (!h) {
        /* Still end the capture so the stream is usable again. */
        void *impl = NULL;
        if (KP__CALL(s, end_capture, s->h.impl, &impl) == KP_OK) KP__CALL(s, graph_destroy, impl);
        return st;
    }
    st = KP__CALL(s, end_capture, s->h.impl, &h->impl);
    *out = (kp_graph_t)kp__handle_done(h, st);
    return st;
}

bool kp_stream_is_capturing(kp_stream_t s) { return s && KP__CALL(s, is_capturing, s->h.impl); }
