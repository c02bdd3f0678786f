/* The cpu device: host memory, the vtable and the backend's registration. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cpu-impl.h"

static kp_status kp__cpu_alloc(kp_mem_kind kind, size_t bytes, void **out) {
    KP_CHECK(kp__cpu_capture_forbids(kind == KP_MEM_PINNED ? "kp_malloc_host" : "kp_malloc"));
    void *p = kp__aligned_alloc(kind, bytes, 256);
    if (!p)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu: allocating %zu bytes of %s memory failed",
                         bytes, kind == KP_MEM_PINNED ? "pinned host" : "device");
    *out = p;
    return KP_OK;
}

/* The first block whose start is above p. Under d->mu. */
static size_t kp__cpu_block_after(const kp__cpu_device *d, uintptr_t p) {
    size_t lo = 0, hi = d->n_blocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->blocks[mid].lo <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static kp_status kp__cpu_malloc(void *ctx, size_t bytes, void **out) {
    kp__cpu_device *d = ctx;
    KP_CHECK(kp__cpu_alloc(KP_MEM_DEVICE, bytes, out));
    pthread_mutex_lock(&d->mu);
    if (d->n_blocks == d->cap_blocks) {
        size_t cap = d->cap_blocks ? 2 * d->cap_blocks : 64;
        struct kp__cpu_block *b = kp__malloc(cap * sizeof *b);
        if (!b) {
            pthread_mutex_unlock(&d->mu);
            kp__aligned_free(KP_MEM_DEVICE, *out);
            *out = NULL;
            return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu: no memory to track a block");
        }
        if (d->n_blocks) memcpy(b, d->blocks, d->n_blocks * sizeof *b);
        kp__free(d->blocks);
        d->blocks = b;
        d->cap_blocks = cap;
    }
    uintptr_t p = (uintptr_t)*out;
    size_t i = kp__cpu_block_after(d, p);
    memmove(d->blocks + i + 1, d->blocks + i, (d->n_blocks - i) * sizeof *d->blocks);
    d->blocks[i] = (struct kp__cpu_block){p, p + (bytes ? bytes : 1)};
    d->n_blocks++;
    pthread_mutex_unlock(&d->mu);
    return KP_OK;
}
/* Like cudaFree and cudaFreeHost, freeing waits for the device's pending
 * work, so code that is correct on CUDA is correct here. */
static void kp__cpu_free(void *ctx, void *p) {
    kp__cpu_device *d = ctx;
    (void)kp__cpu_device_sync(ctx);
    pthread_mutex_lock(&d->mu);
    size_t i = kp__cpu_block_after(d, (uintptr_t)p);
    if (i > 0 && d->blocks[i - 1].lo == (uintptr_t)p) {
        memmove(d->blocks + i - 1, d->blocks + i, (d->n_blocks - i) * sizeof *d->blocks);
        d->n_blocks--;
    }
    pthread_mutex_unlock(&d->mu);
    kp__aligned_free(KP_MEM_DEVICE, p);
}
static bool kp__cpu_is_device_memory(void *ctx, const void *ptr) {
    kp__cpu_device *d = ctx;
    uintptr_t p = (uintptr_t)ptr;
    pthread_mutex_lock(&d->mu);
    size_t i = kp__cpu_block_after(d, p);
    bool in = i > 0 && p < d->blocks[i - 1].hi;
    pthread_mutex_unlock(&d->mu);
    return in;
}
static kp_status kp__cpu_malloc_host(void *ctx, size_t bytes, void **out) {
    return kp__cpu_alloc(KP_MEM_PINNED, bytes, out);
}
static void kp__cpu_free_host(void *ctx, void *p) {
    (void)kp__cpu_device_sync(ctx);
    kp__aligned_free(KP_MEM_PINNED, p);
}

static kp_status kp__cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes) {
    KP_CHECK(kp__cpu_capture_forbids("a synchronous copy"));
    memmove(dst, src, bytes);
    return KP_OK;
}

static kp_status kp__cpu_describe(void *ctx, char *buf, size_t len) {
    kp__cpu_device *d = ctx;
    snprintf(buf, len, "host memory, a thread per stream, %d worker%s per kernel launch, %ld cores",
             d->workers, d->workers == 1 ? "" : "s", sysconf(_SC_NPROCESSORS_ONLN));
    return KP_OK;
}

static void kp__cpu_close(void *ctx) {
    kp__cpu_device *d = ctx;
    kp__cpu_streams_close(ctx);
    kp__cpu_pool_free(d->pool);
    kp__free(d->blocks);
    pthread_mutex_destroy(&d->mu);
    kp__free(d);
}

/* kp_malloc memory is host memory here, so there is nothing to stage
 * and no native API (the defaults say the rest). */
static kp_status kp__cpu_caps(void *ctx, kp_device_caps *caps) {
    (void)ctx;
    caps->device_memory = false;
    caps->pinned_staging = false;
    return KP_OK;
}

static const kp_device_i kp__cpu_iface = {
    .close = kp__cpu_close,
    .describe = kp__cpu_describe,
    .caps = kp__cpu_caps,
    .malloc = kp__cpu_malloc,
    .free = kp__cpu_free,
    .malloc_host = kp__cpu_malloc_host,
    .free_host = kp__cpu_free_host,
    .memcpy = kp__cpu_memcpy,
    .sync = kp__cpu_device_sync,
    .stream_create = kp__cpu_stream_create,
    .stream_destroy = kp__cpu_stream_destroy,
    .stream_sync = kp__cpu_stream_sync,
    .stream_query = kp__cpu_stream_query,
    .memcpy_async = kp__cpu_memcpy_async,
    .is_device_memory = kp__cpu_is_device_memory,
    .memset_async = kp__cpu_memset_async,
    .memcpy2d_async = kp__cpu_memcpy2d_async,
    .launch = kp__cpu_launch,
    .host_func = kp__cpu_host_func,
    .event_create = kp__cpu_event_create,
    .event_destroy = kp__cpu_event_destroy,
    .event_record = kp__cpu_event_record,
    .event_query = kp__cpu_event_query,
    .event_sync = kp__cpu_event_sync,
    .stream_wait_event = kp__cpu_stream_wait_event,
    .event_elapsed = kp__cpu_event_elapsed,
    .graph_create = kp__cpu_graph_create,
    .graph_destroy = kp__cpu_graph_destroy,
    .graph_add_kernel = kp__cpu_graph_add_kernel,
    .graph_add_memcpy = kp__cpu_graph_add_memcpy,
    .graph_add_child = kp__cpu_graph_add_child,
    .graph_add_empty = kp__cpu_graph_add_empty,
    .graph_node_count = kp__cpu_graph_node_count,
    .graph_instantiate = kp__cpu_graph_instantiate,
    .exec_destroy = kp__cpu_exec_destroy,
    .exec_upload = kp__cpu_exec_upload,
    .exec_launch = kp__cpu_exec_launch,
    .exec_set_kernel = kp__cpu_exec_set_kernel,
    .exec_set_memcpy = kp__cpu_exec_set_memcpy,
    .exec_set_child = kp__cpu_exec_set_child,
    .exec_update = kp__cpu_exec_update,
    .begin_capture = kp__cpu_begin_capture,
    .end_capture = kp__cpu_end_capture,
    .is_capturing = kp__cpu_is_capturing,
};

#define KP__MAX_WORKERS 256
#define KP__MAX_HOST_DEVICES 64

/* The backend's options: its own, or the defaults. */
static kp_status kp__cpu_options(const kp_backend_reg *reg, kp_host_options *o) {
    kp_host_options d = KP_HOST_OPTIONS_INIT;
    *o = d;
    if (reg->options)
        KP_CHECK(kp__config_read(o, sizeof *o, reg->options,
                                 KP__SIZE_THROUGH(kp_host_options, workers), "kp_host_options",
                                 "KP_HOST_OPTIONS_INIT"));
    if (o->devices < 1 || o->devices > KP__MAX_HOST_DEVICES)
        return kp__error(KP_ERR_INVALID_ARG, "backend %s: %d devices (1 .. %d)", reg->name,
                         o->devices, KP__MAX_HOST_DEVICES);
    return KP_OK;
}

static kp_status kp__cpu_open(const kp_backend_reg *reg, int ordinal, const kp_device_i **iface,
                              void **ctx) {
    kp_host_options o;
    KP_CHECK(kp__cpu_options(reg, &o));
    if (o.workers < 1 || o.workers > KP__MAX_WORKERS)
        return kp__error(KP_ERR_INVALID_ARG, "backend %s: %d workers (1 .. %d)", reg->name,
                         o.workers, KP__MAX_WORKERS);
    int workers = o.workers;
    kp__cpu_device *d = kp__calloc(1, sizeof *d);
    if (!d) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu device: no memory");
    d->workers = workers;
    if (workers > 1) {
        kp_status st = kp__cpu_pool_new(workers - 1, &d->pool);
        if (st != KP_OK) {
            kp__free(d);
            return st;
        }
    }
    pthread_mutex_init(&d->mu, NULL);
    *iface = &kp__cpu_iface;
    *ctx = d;
    return KP_OK;
}

/* Logical devices, all on the host (kp_host_options.devices). */
static int kp__cpu_count(const kp_backend_reg *reg, char *why, size_t len) {
    kp_host_options o;
    if (kp__cpu_options(reg, &o) != KP_OK) {
        snprintf(why, len, "%s", kp_last_error());
        kp_clear_error();
        return 0;
    }
    return o.devices;
}

const kp_backend_reg kp__cpu_backend = {
    .struct_size = sizeof(kp_backend_reg),
    .name = "cpu",
    .kernel_form = KP__HOST_FORM,
    .device_count = kp__cpu_count,
    .open = kp__cpu_open,
};
