/* The cuda device: memory, streams, events and kernel launch through the
 * CUDA runtime. Streams are non-blocking: they never synchronize implicitly
 * with the legacy default stream. */
#include <dlfcn.h>
#include <limits.h>
#include <string.h>
#include <stdio.h>

#include "cuda-impl.h"

static kp_status kp__cuda_status_of(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation: return KP_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice: return KP_ERR_NO_DEVICE;
    case cudaErrorInvalidValue: return KP_ERR_INVALID_ARG;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation: return KP_ERR_STATE;
    case cudaErrorGraphExecUpdateFailure: return KP_ERR_MISMATCH;
    default: return KP_ERR_DEVICE;
    }
}

kp_status kp__cuda_fail(cudaError_t err, const char *call, const char *file, int line) {
    (void)cudaGetLastError();
    return kp__error(kp__cuda_status_of(err), "%s failed: %s (%s) at %s:%d", call,
                     cudaGetErrorName(err), cudaGetErrorString(err), file, line);
}

kp_status kp__cuda_enter(const kp__cuda_device *d) {
    int cur = -1;
    KP_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != d->ordinal) KP_CUDA_CHECK(cudaSetDevice(d->ordinal));
    return KP_OK;
}

kp_status kp__cuda_func(const kp_launch *l, const void **fn) {
    const kp_device_kernel *k = kp_kernel_find(l->kernel, "cuda");
    *fn = k ? k->fn : NULL;
    if (!*fn)
        return kp__error(KP_ERR_UNSUPPORTED, "kernel %s has no \"cuda\" implementation",
                         l->kernel->name);
    return KP_OK;
}

/* Whether the driver's library can be loaded. The runtime loads it on its
 * first call, so it is already there on a machine with a driver; only
 * where that call failed is a real load tried, which tells a missing
 * driver from an old one. */
static bool kp__cuda_driver_present(void) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) h = dlopen("libcuda.so.1", RTLD_LAZY);
    if (!h) return false;
    dlclose(h);
    return true;
}

static int kp__cuda_count(const kp_backend_reg *reg, char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        /* without any driver the runtime says the driver is "insufficient",
         * which sends a user looking for an upgrade of something absent */
        if (why && len && e == cudaErrorInsufficientDriver && !kp__cuda_driver_present())
            snprintf(why, len, "no NVIDIA driver (libcuda.so.1 not found)");
        else if (why && len)
            snprintf(why, len, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why && len) snprintf(why, len, "the driver reports no CUDA device");
    return n;
}

/* --- memory ------------------------------------------------------------------- */
static kp_status kp__cuda_malloc(void *ctx, size_t bytes, void **out) {
    if (!kp__permit(KP_MEM_DEVICE, bytes))
        return kp__error(KP_ERR_OUT_OF_MEMORY,
                         "cuda: allocation of %zu device bytes refused "
                         "by the allocation hook",
                         bytes);
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaMalloc(out, bytes ? bytes : 1));
    return KP_OK;
}

/* Frees wait for the whole device explicitly, not through cudaFree's own
 * implicit synchronization: work queued on any stream may still read the
 * memory. */
static void kp__cuda_free(void *ctx, void *p) {
    if (kp__cuda_enter(ctx) != KP_OK) return;
    KP_CUDA_IGNORE(cudaDeviceSynchronize());
    KP_CUDA_IGNORE(cudaFree(p));
}

static kp_status kp__cuda_malloc_host(void *ctx, size_t bytes, void **out) {
    if (!kp__permit(KP_MEM_PINNED, bytes))
        return kp__error(KP_ERR_OUT_OF_MEMORY,
                         "cuda: allocation of %zu pinned bytes refused "
                         "by the allocation hook",
                         bytes);
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaMallocHost(out, bytes ? bytes : 1));
    return KP_OK;
}

static void kp__cuda_free_host(void *ctx, void *p) {
    if (kp__cuda_enter(ctx) != KP_OK) return;
    KP_CUDA_IGNORE(cudaDeviceSynchronize());
    KP_CUDA_IGNORE(cudaFreeHost(p));
}

/* Complete before it returns, for every kind of memory on either side: the
 * copy goes on the device's private stream and that stream is waited for. */
static kp_status kp__cuda_memcpy(void *ctx, void *dst, const void *src, size_t bytes) {
    kp__cuda_device *d = ctx;
    KP_CHECK(kp__cuda_enter(d));
    KP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, d->copy));
    KP_CUDA_CHECK(cudaStreamSynchronize(d->copy));
    return KP_OK;
}

static kp_status kp__cuda_sync(void *ctx) {
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaDeviceSynchronize());
    return KP_OK;
}

static kp_status kp__cuda_describe(void *ctx, char *buf, size_t len) {
    kp__cuda_device *d = ctx;
    struct cudaDeviceProp p;
    KP_CUDA_CHECK(cudaGetDeviceProperties(&p, d->ordinal));
    snprintf(buf, len, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return KP_OK;
}

static kp_status kp__cuda_versions(void *ctx, int *driver, int *runtime) {
    KP_CUDA_CHECK(cudaDriverGetVersion(driver));
    KP_CUDA_CHECK(cudaRuntimeGetVersion(runtime));
    return KP_OK;
}

static kp_status kp__cuda_caps(void *ctx, kp_device_caps *caps) {
    kp__cuda_device *d = ctx;
    caps->device_memory = true;
    caps->pinned_staging = true;
    /* NVDEC and NVENC sit on every CUDA GPU the driver's video libraries
     * serve; the video layer opens them at run time and falls back when
     * they are absent */
    caps->video_decode = caps->video_encode = true;
    caps->native_api = "cuda";
    caps->native_ordinal = d->ordinal;
    return KP_OK;
}

/* --- streams -------------------------------------------------------------------- */
static kp_status kp__cuda_stream_create(void *ctx, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaStreamCreateWithFlags((cudaStream_t *)out, cudaStreamNonBlocking));
    return KP_OK;
}

static void kp__cuda_stream_destroy(void *ctx, void *s) {
    KP_CUDA_IGNORE(cudaStreamSynchronize(s));
    KP_CUDA_IGNORE(cudaStreamDestroy(s));
}

static kp_status kp__cuda_stream_sync(void *ctx, void *s) {
    KP_CUDA_CHECK(cudaStreamSynchronize(s));
    return KP_OK;
}

static kp_status kp__cuda_stream_query(void *ctx, void *s, bool *idle) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *idle = false;
        return KP_OK;
    }
    KP_CUDA_CHECK(e);
    *idle = true;
    return KP_OK;
}

static kp_status kp__cuda_memcpy_async(void *ctx, void *s, void *dst, const void *src,
                                       size_t bytes) {
    KP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    return KP_OK;
}

static kp_status kp__cuda_memcpy2d_async(void *ctx, void *s, void *dst, size_t dpitch,
                                         const void *src, size_t spitch, size_t width,
                                         size_t height) {
    /* the driver takes pitches up to 2^31 - 1 (cudaDeviceProp.memPitch) */
    if (dpitch > INT_MAX || spitch > INT_MAX) {
        for (size_t i = 0; i < height; i++)
            KP_CHECK(kp__cuda_memcpy_async(ctx, s, (char *)dst + i * dpitch,
                                           (const char *)src + i * spitch, width));
        return KP_OK;
    }
    KP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, s));
    return KP_OK;
}

/* Device or managed memory of any device (a copy from another GPU is not a
 * host copy); host memory, pinned or not, is not. */
static bool kp__cuda_is_device_memory(void *ctx, const void *ptr) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static kp_status kp__cuda_memset_async(void *ctx, void *s, void *dst, int v, size_t bytes) {
    KP_CUDA_CHECK(cudaMemsetAsync(dst, v, bytes, s));
    return KP_OK;
}

static kp_status kp__cuda_launch(void *ctx, void *s, const kp_launch *l) {
    const void *fn;
    KP_CHECK(kp__cuda_func(l, &fn));
    /* a kernel goes to the current device's streams only; a thread working
     * on several devices may have left another current (a cheap check) */
    KP_CHECK(kp__cuda_enter(ctx));
    void *args[1] = {(void *)l->params};
    dim3 grid = {l->grid.x, l->grid.y, l->grid.z}, block = {l->block.x, l->block.y, l->block.z};
    KP_CUDA_CHECK(cudaLaunchKernel(fn, grid, block, args, l->shared_bytes, s));
    return KP_OK;
}

static kp_status kp__cuda_host_func(void *ctx, void *s, void (*fn)(void *), void *user) {
    KP_CUDA_CHECK(cudaLaunchHostFunc(s, fn, user));
    return KP_OK;
}

static void *kp__cuda_stream_native(void *ctx, void *s) { return s; }

/* The driver checks the handle: a stream it does not know (or a destroyed
 * one) fails here, as does one of another device. */
static kp_status kp__cuda_stream_wrap(void *ctx, void *native, void **out) {
    const kp__cuda_device *d = ctx;
    KP_CHECK(kp__cuda_enter(d));
    int dev = -1;
    cudaError_t e = cudaStreamGetDevice((cudaStream_t)native, &dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return kp__error(KP_ERR_INVALID_ARG, "kp_stream_wrap: %p is not a CUDA stream (%s)", native,
                         cudaGetErrorString(e));
    }
    if (dev != d->ordinal)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_stream_wrap: stream %p belongs to cuda:%d, not cuda:%d", native, dev,
                         d->ordinal);
    *out = native;
    return KP_OK;
}

/* --- events --------------------------------------------------------------------- */
static kp_status kp__cuda_event_create(void *ctx, bool timing, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CUDA_CHECK(cudaEventCreateWithFlags((cudaEvent_t *)out,
                                           timing ? cudaEventDefault : cudaEventDisableTiming));
    return KP_OK;
}

static void kp__cuda_event_destroy(void *ctx, void *ev) { KP_CUDA_IGNORE(cudaEventDestroy(ev)); }

static kp_status kp__cuda_event_record(void *ctx, void *ev, void *s) {
    KP_CUDA_CHECK(cudaEventRecord(ev, s));
    return KP_OK;
}

static kp_status kp__cuda_event_query(void *ctx, void *ev, bool *done) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        *done = false;
        return KP_OK;
    }
    KP_CUDA_CHECK(e);
    *done = true;
    return KP_OK;
}

static kp_status kp__cuda_event_sync(void *ctx, void *ev) {
    KP_CUDA_CHECK(cudaEventSynchronize(ev));
    return KP_OK;
}

static kp_status kp__cuda_stream_wait_event(void *ctx, void *s, void *ev) {
    KP_CUDA_CHECK(cudaStreamWaitEvent(s, ev, 0));
    return KP_OK;
}

static kp_status kp__cuda_event_elapsed(void *ctx, void *a, void *b, float *ms) {
    KP_CUDA_CHECK(cudaEventElapsedTime(ms, a, b));
    return KP_OK;
}

/* --- sharing with another process: CUDA IPC ------------------------------------ */
_Static_assert(sizeof(cudaIpcMemHandle_t) <= KP_IPC_HANDLE_BYTES, "a CUDA IPC handle fits");
_Static_assert(sizeof(cudaIpcEventHandle_t) <= KP_IPC_HANDLE_BYTES, "a CUDA IPC handle fits");

static kp_status kp__cuda_ipc_export(void *ctx, void *ptr, void *handle) {
    KP_CHECK(kp__cuda_enter(ctx));
    cudaIpcMemHandle_t h;
    KP_CUDA_CHECK(cudaIpcGetMemHandle(&h, ptr));
    memcpy(handle, &h, sizeof h);
    return KP_OK;
}

/* Peer access is turned on where the memory is another device's: the
 * copies of this device reach it in place. */
static kp_status kp__cuda_ipc_open(void *ctx, const void *handle, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    KP_CUDA_CHECK(cudaIpcOpenMemHandle(out, h, cudaIpcMemLazyEnablePeerAccess));
    return KP_OK;
}

static void kp__cuda_ipc_close(void *ctx, void *ptr) {
    if (kp__cuda_enter(ctx) != KP_OK) return;
    KP_CUDA_IGNORE(cudaDeviceSynchronize()); /* no copy of this device's still writes it */
    KP_CUDA_IGNORE(cudaIpcCloseMemHandle(ptr));
}

static kp_status kp__cuda_ipc_event_create(void *ctx, void **out, void *handle) {
    KP_CHECK(kp__cuda_enter(ctx));
    cudaEvent_t ev;
    KP_CUDA_CHECK(
        cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    cudaIpcEventHandle_t h;
    cudaError_t e = cudaIpcGetEventHandle(&h, ev);
    if (e != cudaSuccess) {
        KP_CUDA_IGNORE(cudaEventDestroy(ev));
        return kp__cuda_fail(e, "cudaIpcGetEventHandle", __FILE__, __LINE__);
    }
    memcpy(handle, &h, sizeof h);
    *out = ev;
    return KP_OK;
}

static kp_status kp__cuda_ipc_event_open(void *ctx, const void *handle, void **out) {
    KP_CHECK(kp__cuda_enter(ctx));
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    KP_CUDA_CHECK(cudaIpcOpenEventHandle((cudaEvent_t *)out, h));
    return KP_OK;
}

static void kp__cuda_close(void *ctx) {
    kp__cuda_device *d = ctx;
    if (d->copy) KP_CUDA_IGNORE(cudaStreamDestroy(d->copy));
    kp__free(d);
}

static kp_status kp__cuda_peer_access(void *ctx, void *peer_ctx, bool enable, bool *can) {
    const kp__cuda_device *d = ctx, *p = peer_ctx;
    int ok = 1;
    if (d->ordinal != p->ordinal)
        KP_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, d->ordinal, p->ordinal));
    *can = ok != 0;
    if (!ok || !enable || d->ordinal == p->ordinal) return KP_OK;
    KP_CHECK(kp__cuda_enter(d));
    cudaError_t e = cudaDeviceEnablePeerAccess(p->ordinal, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        return KP_OK;
    }
    KP_CUDA_CHECK(e);
    return KP_OK;
}

static kp_status kp__cuda_bind_thread(void *ctx) { return kp__cuda_enter(ctx); }

static const kp_device_i kp__cuda_iface = {
    .close = kp__cuda_close,
    .describe = kp__cuda_describe,
    .versions = kp__cuda_versions,
    .caps = kp__cuda_caps,
    .malloc = kp__cuda_malloc,
    .free = kp__cuda_free,
    .malloc_host = kp__cuda_malloc_host,
    .free_host = kp__cuda_free_host,
    .memcpy = kp__cuda_memcpy,
    .sync = kp__cuda_sync,
    .stream_create = kp__cuda_stream_create,
    .stream_wrap = kp__cuda_stream_wrap,
    .stream_destroy = kp__cuda_stream_destroy,
    .stream_sync = kp__cuda_stream_sync,
    .stream_query = kp__cuda_stream_query,
    .memcpy_async = kp__cuda_memcpy_async,
    .memcpy2d_async = kp__cuda_memcpy2d_async,
    .is_device_memory = kp__cuda_is_device_memory,
    .memset_async = kp__cuda_memset_async,
    .launch = kp__cuda_launch,
    .host_func = kp__cuda_host_func,
    .stream_native = kp__cuda_stream_native,
    .event_create = kp__cuda_event_create,
    .event_destroy = kp__cuda_event_destroy,
    .event_record = kp__cuda_event_record,
    .event_query = kp__cuda_event_query,
    .event_sync = kp__cuda_event_sync,
    .stream_wait_event = kp__cuda_stream_wait_event,
    .event_elapsed = kp__cuda_event_elapsed,
    .graph_create = kp__cuda_graph_create,
    .graph_destroy = kp__cuda_graph_destroy,
    .graph_add_kernel = kp__cuda_graph_add_kernel,
    .graph_add_memcpy = kp__cuda_graph_add_memcpy,
    .graph_add_child = kp__cuda_graph_add_child,
    .graph_add_native = kp__cuda_graph_add_child,
    .graph_add_empty = kp__cuda_graph_add_empty,
    .graph_add_kernel_first = kp__cuda_graph_add_kernel_first,
    .graph_node_count = kp__cuda_graph_node_count,
    .graph_instantiate = kp__cuda_graph_instantiate,
    .exec_destroy = kp__cuda_exec_destroy,
    .exec_upload = kp__cuda_exec_upload,
    .exec_launch = kp__cuda_exec_launch,
    .exec_set_kernel = kp__cuda_exec_set_kernel,
    .exec_set_memcpy = kp__cuda_exec_set_memcpy,
    .exec_set_child = kp__cuda_exec_set_child,
    .exec_update = kp__cuda_exec_update,
    .begin_capture = kp__cuda_begin_capture,
    .end_capture = kp__cuda_end_capture,
    .is_capturing = kp__cuda_is_capturing,
    .peer_access = kp__cuda_peer_access,
    .bind_thread = kp__cuda_bind_thread,
    .rtc_compile = kp__cuda_rtc_compile,
    .ipc_export = kp__cuda_ipc_export,
    .ipc_open = kp__cuda_ipc_open,
    .ipc_close = kp__cuda_ipc_close,
    .ipc_event_create = kp__cuda_ipc_event_create,
    .ipc_event_open = kp__cuda_ipc_event_open,
};

static kp_status kp__cuda_open(const kp_backend_reg *reg, int ordinal, const kp_device_i **iface,
                               void **ctx) {
    kp__cuda_device *d = kp__calloc(1, sizeof *d);
    if (!d) return kp__error(KP_ERR_OUT_OF_MEMORY, "cuda device: no memory");
    d->ordinal = ordinal;
    kp_status st = kp__cuda_enter(d);
    if (st == KP_OK) {
        cudaError_t e = cudaFree(NULL); /* creates the primary context now, not mid-tick */
        if (e != cudaSuccess) st = kp__cuda_fail(e, "cudaFree(NULL)", __FILE__, __LINE__);
    }
    if (st == KP_OK) {
        cudaError_t e = cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking);
        if (e != cudaSuccess)
            st = kp__cuda_fail(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    if (st != KP_OK) {
        kp__cuda_close(d);
        return st;
    }
    *iface = &kp__cuda_iface;
    *ctx = d;
    return KP_OK;
}

static void kp__cuda_backend_versions(const kp_backend_reg *reg, char *buf, size_t len) {
    int rt = 0, drv = 0;
    KP_CUDA_IGNORE(cudaRuntimeGetVersion(&rt));
    KP_CUDA_IGNORE(cudaDriverGetVersion(&drv));
    if (drv)
        snprintf(buf, len, "CUDA runtime %d.%d, driver %d.%d", rt / 1000, rt % 1000 / 10,
                 drv / 1000, drv % 1000 / 10);
    else
        snprintf(buf, len, "CUDA runtime %d.%d (no driver)", rt / 1000, rt % 1000 / 10);
}

const kp_backend_reg kp__cuda_backend = {
    .struct_size = sizeof(kp_backend_reg),
    .name = "cuda",
    .kernel_form = "cuda",
    .device_count = kp__cuda_count,
    .open = kp__cuda_open,
    .versions = kp__cuda_backend_versions,
};
