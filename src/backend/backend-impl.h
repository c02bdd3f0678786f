/* The device backend interface: a vtable plus a context, one per open
 * device. Backends register a kp_backend_reg (backend_table.c holds the built-in
 * ones, one line each); its open slot hands out the vtable. Public handles
 * wrap a backend object (`impl`) and their device; node handles are the
 * backend's own pointers. The public wrappers in device.c check handles and
 * arguments, so slots may assume valid input. */
#ifndef KPIPE_BACKEND_IMPL_H
#define KPIPE_BACKEND_IMPL_H

#include <pthread.h>

#include "kpipe/device.h"
#include "../core/core-impl.h"

struct kp_device_i {
    /* Releases the context. */
    void (*close)(void *ctx);
    /* One-line description into buf. */
    kp_status (*describe)(void *ctx, char *buf, size_t len);
    /* Optional: driver and runtime versions; default 0, 0. */
    kp_status (*versions)(void *ctx, int *driver, int *runtime);
    /* Optional: what the device can do (kp_device_query_caps), over the
     * defaults already in *caps: memory apart from the host's, no pinned
     * staging, no video engines, no native API; native streams, native
     * graphs and run-time compiles where their slots are filled. */
    kp_status (*caps)(void *ctx, kp_device_caps *caps);

    /* Device memory, 256-byte aligned. */
    kp_status (*malloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    /* Page-locked host memory. */
    kp_status (*malloc_host)(void *ctx, size_t bytes, void **out);
    void (*free_host)(void *ctx, void *ptr);
    /* Synchronous copy in any direction. */
    kp_status (*memcpy)(void *ctx, void *dst, const void *src, size_t bytes);
    /* Optional: whether ptr lies in this device's memory (kp_malloc) rather
     * than host memory; asked only while a thread counts its copies
     * (kp_copy_count_watch). Default: never. */
    bool (*is_device_memory)(void *ctx, const void *ptr);
    /* Waits for all work on the device. */
    kp_status (*sync)(void *ctx);

    /* Streams. */
    kp_status (*stream_create)(void *ctx, void **out);
    void (*stream_destroy)(void *ctx, void *s);
    kp_status (*stream_sync)(void *ctx, void *s);
    /* *idle = the stream has no unfinished work. */
    kp_status (*stream_query)(void *ctx, void *s, bool *idle);
    kp_status (*memcpy_async)(void *ctx, void *s, void *dst, const void *src, size_t bytes);
    kp_status (*memset_async)(void *ctx, void *s, void *dst, int value, size_t bytes);
    /* Optional: rows of a 2-D copy as one operation (kp_memcpy2d_async,
     * arguments checked); default: one memcpy_async a row. */
    kp_status (*memcpy2d_async)(void *ctx, void *s, void *dst, size_t dpitch, const void *src,
                                size_t spitch, size_t width, size_t height);
    kp_status (*launch)(void *ctx, void *s, const kp_launch *l);
    kp_status (*host_func)(void *ctx, void *s, void (*fn)(void *), void *user);
    /* Optional: the native stream handle; default NULL. */
    void *(*stream_native)(void *ctx, void *s);
    /* Optional: checks a native stream made elsewhere (of this device) and
     * gives the backend's stream object for it; stream_destroy is never
     * called on it. NULL: no native streams. */
    kp_status (*stream_wrap)(void *ctx, void *native, void **out);

    /* Events. */
    /* timing false: the event only orders work (no timestamps), which is
     * cheaper to record and wait for where the device times events */
    kp_status (*event_create)(void *ctx, bool timing, void **out);
    void (*event_destroy)(void *ctx, void *ev);
    kp_status (*event_record)(void *ctx, void *ev, void *s);
    kp_status (*event_query)(void *ctx, void *ev, bool *done);
    kp_status (*event_sync)(void *ctx, void *ev);
    kp_status (*stream_wait_event)(void *ctx, void *s, void *ev);
    kp_status (*event_elapsed)(void *ctx, void *start, void *end, float *ms);

    /* Graphs. Node handles are backend pointers. */
    kp_status (*graph_create)(void *ctx, void **out);
    void (*graph_destroy)(void *ctx, void *g);
    kp_status (*graph_add_kernel)(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  const kp_launch *l, kp_graph_node_t *out);
    kp_status (*graph_add_memcpy)(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  void *dst, const void *src, size_t bytes, kp_graph_node_t *out);
    kp_status (*graph_add_child)(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                 void *child, kp_graph_node_t *out);
    /* Optional: a copy of a native graph made elsewhere as a child node. */
    kp_status (*graph_add_native)(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  void *native, kp_graph_node_t *out);
    kp_status (*graph_add_empty)(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                 kp_graph_node_t *out);
    /* Optional: a kernel node every node without dependencies then waits
     * for (a backend whose graphs run in the order nodes were added, as
     * cpu's, cannot put one before nodes already there). */
    kp_status (*graph_add_kernel_first)(void *ctx, void *g, const kp_launch *l,
                                        kp_graph_node_t *out);
    size_t (*graph_node_count)(void *ctx, void *g);
    kp_status (*graph_instantiate)(void *ctx, void *g, void **out);
    void (*exec_destroy)(void *ctx, void *ge);
    kp_status (*exec_upload)(void *ctx, void *ge, void *s);
    kp_status (*exec_launch)(void *ctx, void *ge, void *s);
    kp_status (*exec_set_kernel)(void *ctx, void *ge, kp_graph_node_t node, const kp_launch *l);
    kp_status (*exec_set_memcpy)(void *ctx, void *ge, kp_graph_node_t node, void *dst,
                                 const void *src, size_t bytes);
    kp_status (*exec_set_child)(void *ctx, void *ge, kp_graph_node_t node, void *child);
    kp_status (*exec_update)(void *ctx, void *ge, void *g);

    /* Capture. */
    kp_status (*begin_capture)(void *ctx, void *s);
    kp_status (*end_capture)(void *ctx, void *s, void **graph_out);
    bool (*is_capturing)(void *ctx, void *s);

    /* Optional: whether this device can reach `peer`'s memory (a device of
     * the same backend) directly, turning that on with `enable`; NULL: the
     * backend's devices share one memory (cpu). */
    kp_status (*peer_access)(void *ctx, void *peer_ctx, bool enable, bool *can);
    /* Optional: sharing with another process (kp_ipc_export and the
     * rest, arguments checked; handles of KP_IPC_HANDLE_BYTES). NULL: the
     * backend cannot (KP_ERR_UNSUPPORTED). */
    kp_status (*ipc_export)(void *ctx, void *ptr, void *handle);
    kp_status (*ipc_open)(void *ctx, const void *handle, void **out);
    void (*ipc_close)(void *ctx, void *ptr);
    kp_status (*ipc_event_create)(void *ctx, void **out, void *handle);
    kp_status (*ipc_event_open)(void *ctx, const void *handle, void **out);
    /* Optional: makes the device the calling thread's current one. */
    kp_status (*bind_thread)(void *ctx);
    /* Optional: compiles and loads a kernel at run time (kp_rtc_compile). */
    kp_status (*rtc_compile)(void *ctx, const char *source, const char *entry,
                             kp_device_kernel *out, kp_rtc_info *info);
};
typedef struct kp_device_i kp_device_i;

/* State attached by higher layers (kp_device_attach). */
typedef struct kp__attachment {
    const void *key;
    void *obj;
    void (*close)(void *obj);
} kp__attachment;

struct kp_device {
    const kp_device_i *iface;
    void *ctx;
    const kp_backend_reg *reg;
    int ordinal;
    char name[48];
    pthread_mutex_t mu; /* guards the attachments */
    kp__attachment *att;
    size_t n_att, cap_att;
};

/* Every handle wraps the backend's object and the device it belongs to. */
typedef struct kp__handle {
    kp_device_t dev;
    void *impl;
    bool untimed;  /* events: made by kp_event_create_untimed */
    bool borrowed; /* streams: made by kp_stream_wrap, the owner's to destroy */
} kp__handle;
struct kp_stream {
    kp__handle h;
};
struct kp_event {
    kp__handle h;
};
struct kp_graph {
    kp__handle h;
};
struct kp_graph_exec {
    kp__handle h;
};

/* Registry (backend_table.c): "cuda:1" to its backend and ordinal; the names of
 * the registered backends, space-separated. */
kp_status kp__backend_resolve(const char *name, const kp_backend_reg **reg, int *ordinal);
void kp__backend_list(char *buf, size_t len);

/* The checks of a run-time compile's source (device.c): non-empty, within
 * KP_RTC_MAX_SOURCE; clears *info. */
kp_status kp__rtc_args(const char *source, kp_rtc_info *info);

/* The built-in backends' registrations (one line each in backend_table.c). */
extern const kp_backend_reg kp__cpu_backend;
#ifdef KP_HAVE_CUDA
extern const kp_backend_reg kp__cuda_backend;
#endif

#endif
