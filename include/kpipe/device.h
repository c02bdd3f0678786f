/* kpipe devices: memory, streams, events, kernels, graphs and stream capture,
 * behind one interface. Backends register themselves in a table: `cpu`
 * (always built) and `cuda` (when the toolkit is found), and any a program
 * adds with kp_backend_register.
 *
 *   kp_device_t dev;  kp_stream_t s;  float *x;
 *   kp_device_open("cuda", &dev);                 // or "cpu", "cuda:1"
 *   kp_stream_create(dev, &s);
 *   kp_malloc(dev, n * sizeof(float), (void **)&x);
 *   my_params p = {x, n};
 *   kp_launch l = {&my_kernel, {n / 256 + 1, 1, 1}, {256, 1, 1}, 0, &p};
 *   kp_launch_kernel(s, &l);                      // in-order on s
 *   kp_stream_sync(s);
 *
 * Graphs follow CUDA graph semantics on every backend: nodes are added with
 * dependencies, the graph is instantiated once, then launched per tick;
 * node parameters can be changed on the instantiated graph.
 */
#ifndef KPIPE_DEVICE_H
#define KPIPE_DEVICE_H

#include "kpipe/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_device *kp_device_t;
typedef struct kp_stream *kp_stream_t;
typedef struct kp_event *kp_event_t;
typedef struct kp_graph *kp_graph_t;
typedef struct kp_graph_exec *kp_graph_exec_t;
typedef struct kp_graph_node *kp_graph_node_t;

typedef struct kp_dim3 {
    uint32_t x, y, z;
} kp_dim3;

/* --- kernels ------------------------------------------------------------------- */
/* Largest kernel parameter block, in bytes. */
#define KP_MAX_KERNEL_PARAMS 256
/* Implementations one kernel may carry. */
#define KP_KERNEL_FORMS 4

/* The "host" form of a kernel, which backends that run on the host (cpu)
 * use: runs blocks [first_block, first_block + n_blocks) of the grid, in
 * linear order (x fastest). A backend with several workers splits a launch's
 * blocks between them, so the blocks of one launch run concurrently. */
typedef void (*kp_host_kernel_fn)(const void *params, kp_dim3 grid, kp_dim3 block,
                                  uint64_t first_block, uint64_t n_blocks);
typedef struct kp_host_kernel {
    kp_host_kernel_fn run;
} kp_host_kernel;

/* A device-compiled form ("cuda"): the __global__ function's address, as
 * the kernel's own .cu file exports it:
 *   extern "C" const kp_device_kernel my_kernel_cuda = {(const void *)my_kernel}; */
typedef struct kp_device_kernel {
    const void *fn;
} kp_device_kernel;

/* One implementation: the form a backend runs ("host", "cuda") and the
 * form's object (a kp_host_kernel, a kp_device_kernel). */
typedef struct kp_kernel_impl {
    const char *form;
    const void *impl;
} kp_kernel_impl;

/* A kernel: a name, the size of its one parameter struct (passed by value
 * on devices, by pointer on the host), and its implementations, found by
 * the form of the device it is launched on; a NULL form ends the list.
 *   static const kp_kernel k = {"scale", sizeof(scale_params), {
 *       {"host", &(const kp_host_kernel){scale_host}},
 *       {"cuda", &scale_cuda}}};                  // when built with CUDA */
typedef struct kp_kernel {
    const char *name;
    size_t params_size; /* <= KP_MAX_KERNEL_PARAMS */
    kp_kernel_impl impls[KP_KERNEL_FORMS];
} kp_kernel;

/* The implementation of `k` for `form`; NULL when it has none. */
const void *kp_kernel_find(const kp_kernel *k, const char *form);

/* For host forms of element-wise kernels: the items [*lo, *hi) of n_items,
 * shared evenly among the grid's blocks, that blocks [first_block,
 * first_block + n_blocks) own. */
static inline void kp_host_block_span(uint64_t n_items, kp_dim3 grid, uint64_t first_block,
                                      uint64_t n_blocks, uint64_t *lo, uint64_t *hi) {
    uint64_t total = (uint64_t)grid.x * grid.y * grid.z, end = first_block + n_blocks;
    uint64_t q = total ? n_items / total : 0, r = total ? n_items % total : 0;
    *lo = first_block * q + (first_block < r ? first_block : r);
    *hi = end * q + (end < r ? end : r);
}

/* One launch: kernel, geometry and a pointer to its parameter struct (copied
 * at launch or node creation, so it may live on the caller's stack). */
typedef struct kp_launch {
    const kp_kernel *kernel;
    kp_dim3 grid;
    kp_dim3 block;
    size_t shared_bytes;
    const void *params;
} kp_launch;

/* --- kernels compiled at run time ------------------------------------------------ */
/* Largest source kp_rtc_compile takes, in bytes. */
#define KP_RTC_MAX_SOURCE (1 << 20)
/* How a run-time compile went. */
typedef struct kp_rtc_info {
    double compile_ms; /* the compiler's time in this call; 0 when a cache served it */
    int cached;        /* 0: compiled now; 1: from memory; 2: from the cache directory */
    char arch[16];     /* what it was compiled for: "sm_90" */
} kp_rtc_info;

/* Compiles CUDA C++ `source` for the device's architecture with NVRTC and
 * loads it; *out is then the "cuda" form of its extern "C" __global__
 * function `entry`. Options: -fmad=false (no contraction of a multiply and
 * an add, so generated code rounds as separate kernels do), C++17.
 * Compiled code stays loaded for the process's life, in a cache keyed by
 * the whole source, the entry and the architecture (at most 1024 kernels;
 * KP_ERR_OUT_OF_MEMORY past that); with the environment variable
 * KP_KERNEL_CACHE_DIR set, it is also kept there, so another process loads
 * it without compiling. A compile error gives KP_ERR_PARSE naming the
 * compiler's first error and the source line it points at; a device that
 * runs host kernels (cpu) gives KP_ERR_UNSUPPORTED. Thread-safe. */
kp_status kp_rtc_compile(kp_device_t dev, const char *source, const char *entry,
                         kp_device_kernel *out, kp_rtc_info *info);
/* Compiles `source` for `arch` ("sm_90") without a device and without
 * loading or caching it: the same options and errors. KP_ERR_UNSUPPORTED
 * in a build without CUDA. */
kp_status kp_rtc_check(const char *arch, const char *source, kp_rtc_info *info);

/* --- backends ------------------------------------------------------------------- */
struct kp_device_i; /* the device vtable, private to backend implementations */

/* A backend as it registers itself. */
typedef struct kp_backend_reg {
    size_t struct_size;      /* sizeof(kp_backend_reg) */
    const char *name;        /* devices are "name" (ordinal 0) and "name:N" */
    const char *kernel_form; /* the kp_kernel implementation its launches use */
    /* Devices present; 0 with the reason in `why` when there are none. */
    int (*device_count)(const struct kp_backend_reg *reg, char *why, size_t len);
    /* Opens device `ordinal` (< device_count): its vtable and context. */
    kp_status (*open)(const struct kp_backend_reg *reg, int ordinal,
                      const struct kp_device_i **iface, void **ctx);
    /* Optional: the libraries it uses ("CUDA runtime 13.0"), into buf. */
    void (*versions)(const struct kp_backend_reg *reg, char *buf, size_t len);
    /* The backend's own options, read by open (host backends: a
     * kp_host_options; NULL: defaults). */
    const void *options;
} kp_backend_reg;

#define KP_BACKEND_REG_INIT \
    { sizeof(kp_backend_reg), NULL, NULL, NULL, NULL, NULL, NULL }

/* Options of the backends that run on the host (the cpu backend). */
typedef struct kp_host_options {
    size_t struct_size; /* sizeof(kp_host_options) */
    int workers;        /* threads that share a kernel launch's blocks; 1: the stream's own */
    /* Logical devices ("cpu:0" .. "cpu:N-1", 1 .. 64): each has its own
     * streams and workers, and all share the host's memory, so work placed
     * on several devices runs, and is tested, without GPUs. */
    int devices;
} kp_host_options;

#define KP_HOST_OPTIONS_INIT \
    { sizeof(kp_host_options), 1, 4 }

/* Adds a backend (copied; its strings must outlive the program's use of
 * it). KP_ERR_INVALID_ARG for a taken name or a missing slot. Thread-safe. */
kp_status kp_backend_register(const kp_backend_reg *reg);
/* The registered backend `name`, or NULL. */
const kp_backend_reg *kp_backend_find(const char *name);
/* Registered backends, for listings; kp_backend_name(i) is NULL past the end. */
size_t kp_backend_count(void);
const char *kp_backend_name(size_t i);
/* Devices of `backend` present (0 without any, or for an unknown backend);
 * on 0 `why` (if given) receives the reason. */
int kp_device_count(const char *backend, char *why, size_t why_len);

/* --- devices ------------------------------------------------------------------- */
/* Opens "name" (ordinal 0) or "name:N" of a registered backend ("cpu",
 * "cuda", "cuda:1"). KP_ERR_NO_DEVICE names why a device is not there
 * (unknown backend, no GPU, bad ordinal). */
kp_status kp_device_open(const char *name, kp_device_t *out);
/* Closes a device; every object made on it must be destroyed first. NULL is a no-op. */
void kp_device_close(kp_device_t dev);
/* Whether `dev` can read and write `peer`'s memory in place (*can), and
 * with `enable` turns that on (once; again is a no-op). A device reaches
 * itself; devices of different backends never do. Copies between devices of
 * one backend work either way (kp_memcpy_async on either's stream); peer
 * access lets them go directly (cuda: NVLink or PCIe peer to peer). */
kp_status kp_device_peer_access(kp_device_t dev, kp_device_t peer, bool enable, bool *can);
/* Makes `dev` the calling thread's current device where its backend has one
 * (cuda: cudaSetDevice), for libraries that work on the current device
 * (cuBLAS, cuSOLVER) and kernels launched outside kpipe. */
kp_status kp_device_bind_thread(kp_device_t dev);
/* The device's backend name ("cuda"); "(null)" for NULL. */
const char *kp_device_backend(kp_device_t dev);
/* Whether two devices belong to one backend (its devices, whatever their
 * ordinals): only such devices share a flow, copy to each other's memory
 * and may reach each other in place (kp_device_peer_access). False when
 * either is NULL. Callers ask this rather than compare backend names. */
bool kp_device_same_backend(kp_device_t a, kp_device_t b);
/* The form of kernel implementation the device runs ("host", "cuda");
 * "(null)" for NULL. */
const char *kp_device_kernel_form(kp_device_t dev);
/* "cpu:0" or "cuda:1"; "(null)" for NULL. */
const char *kp_device_name(kp_device_t dev);
/* Human description ("NVIDIA H100 80GB HBM3, sm_90, 79.1 GiB") into buf. */
kp_status kp_device_describe(kp_device_t dev, char *buf, size_t len);
/* Driver and runtime versions (CUDA: e.g. 13000); 0 where not applicable. */
kp_status kp_device_versions(kp_device_t dev, int *driver, int *runtime);
/* What a device can do, for code that would otherwise compare backend
 * names: each field is a property a caller acts on.
 *   kp_device_caps c = KP_DEVICE_CAPS_INIT;
 *   kp_device_query_caps(dev, &c);
 *   if (c.device_memory) ...                     // stage through a copy */
typedef struct kp_device_caps {
    size_t struct_size; /* sizeof(kp_device_caps), set by KP_DEVICE_CAPS_INIT */
    /* kp_malloc memory is apart from host memory: the host reaches it only
     * through copies (false on cpu, where it is host memory). */
    bool device_memory;
    /* Copies from kp_malloc_host (page-locked) memory are faster and
     * asynchronous, so staging host data through it pays off. */
    bool pinned_staging;
    /* kp_stream_native gives a handle and kp_stream_wrap takes one. */
    bool native_streams;
    /* kp_graph_add_native takes a native graph. */
    bool native_graphs;
    /* kp_rtc_compile compiles for the device. */
    bool rtc;
    /* A hardware video decoder (NVDEC) or encoder (NVENC) may write and read
     * the device's memory; whether one opens is learnt when it is tried. */
    bool video_decode, video_encode;
    /* The API the device's native handles and memory belong to ("cuda":
     * kp_stream_native gives a cudaStream_t, kp_malloc a CUDA device
     * pointer), for libraries that take them; NULL where there is none. */
    const char *native_api;
    /* The device's number in that API (CUDA's device ordinal); -1 without one. */
    int native_ordinal;
} kp_device_caps;

#define KP_DEVICE_CAPS_INIT \
    { sizeof(kp_device_caps), false, false, false, false, false, false, false, NULL, -1 }

/* Fills `caps` (struct_size set, KP_DEVICE_CAPS_INIT) with what the device
 * can do; a struct of an older, shorter version receives its own fields. */
kp_status kp_device_query_caps(kp_device_t dev, kp_device_caps *caps);
/* Attaches per-device state under `key` (any unique address): close(obj)
 * runs when the device closes, the last attached first. KP_ERR_STATE when
 * the key is taken. Higher layers keep their per-device objects this way. */
kp_status kp_device_attach(kp_device_t dev, const void *key, void *obj, void (*close)(void *obj));
/* The object attached under `key`, or NULL. */
void *kp_device_attachment(kp_device_t dev, const void *key);

/* --- memory --------------------------------------------------------------------- */
/* Device memory (host memory on the cpu backend), aligned to 256 bytes.
 * Freeing waits for the device's pending work on both backends (as cudaFree
 * does); never free in a per-tick path. */
kp_status kp_malloc(kp_device_t dev, size_t bytes, void **out);
void kp_free(kp_device_t dev, void *ptr);
/* Page-locked host memory usable by async copies. */
kp_status kp_malloc_host(kp_device_t dev, size_t bytes, void **out);
void kp_free_host(kp_device_t dev, void *ptr);
/* Synchronous copies between memory of this device and host memory
 * (pageable or pinned) in any direction. The copy has landed when the call
 * returns, so work enqueued afterwards on any stream of the device sees it.
 * It does not wait for work already pending on streams: synchronize a
 * stream that still uses the same memory first. */
kp_status kp_memcpy_htod(kp_device_t dev, void *dst, const void *src, size_t bytes);
kp_status kp_memcpy_dtoh(kp_device_t dev, void *dst, const void *src, size_t bytes);
kp_status kp_memcpy_dtod(kp_device_t dev, void *dst, const void *src, size_t bytes);
/* Waits for all work on the device. */
kp_status kp_device_sync(kp_device_t dev);

/* Copies between host and device memory, counted. Every copy kpipe makes
 * (kp_memcpy_async, kp_memcpy_htod, kp_memcpy_dtoh) passes here: while a
 * thread watches (counts non-NULL), each one it makes between host memory
 * and a device's memory adds to `counts`; copies within a device, and
 * everything on the cpu backend whose both ends are kp_malloc memory, do
 * not. Watching costs a pointer lookup per copy (cuda:
 * cudaPointerGetAttributes); not watching costs nothing. Flows watch each
 * stage this way (kp_flow_stage_stats, "strict_no_host_copies"). */
typedef struct kp_copy_counts {
    uint64_t htod, dtoh;             /* copies host to device, device to host */
    uint64_t htod_bytes, dtoh_bytes; /* their bytes */
} kp_copy_counts;
/* Starts (counts) or stops (NULL) watching the calling thread's copies;
 * returns the counts watched before, so watches nest. */
kp_copy_counts *kp_copy_count_watch(kp_copy_counts *counts);

/* --- streams --------------------------------------------------------------------- */
/* An in-order queue of work. Streams do not synchronize with each other
 * except through events. Several threads may enqueue on one stream: each
 * call's work goes in whole, in the order the calls reach it (nothing
 * orders two threads' calls but the caller). While a stream captures,
 * only the capturing thread may enqueue on it. */
kp_status kp_stream_create(kp_device_t dev, kp_stream_t *out);
/* Waits for the stream's work, then releases it. NULL is a no-op. */
void kp_stream_destroy(kp_stream_t s);
/* Blocks until all work submitted to `s` has finished. */
kp_status kp_stream_sync(kp_stream_t s);
/* *idle = all work submitted to `s` has finished; does not block. */
kp_status kp_stream_query(kp_stream_t s, bool *idle);
/* Device of a stream. */
kp_device_t kp_stream_device(kp_stream_t s);
/* Async copy in any direction (memory from this device or pinned host). */
kp_status kp_memcpy_async(kp_stream_t s, void *dst, const void *src, size_t bytes);
/* Async copy of `height` rows of `width` bytes, row i from src + i *
 * src_pitch to dst + i * dst_pitch, in any direction as kp_memcpy_async:
 * one operation on the stream (cuda: cudaMemcpy2DAsync), counted as one
 * copy of width * height bytes. Pitches at least the width; nothing to do
 * when width or height is 0. */
kp_status kp_memcpy2d_async(kp_stream_t s, void *dst, size_t dst_pitch, const void *src,
                            size_t src_pitch, size_t width, size_t height);
/* Async fill of `bytes` bytes with `value`. */
kp_status kp_memset_async(kp_stream_t s, void *dst, int value, size_t bytes);
/* Launches a kernel on the stream. */
kp_status kp_launch_kernel(kp_stream_t s, const kp_launch *launch);
/* Runs fn(user) on a host thread once prior work on `s` is done; the stream
 * waits for it to return. fn must not call kpipe stream functions. */
kp_status kp_launch_host_func(kp_stream_t s, void (*fn)(void *user), void *user);

/* --- events ----------------------------------------------------------------------- */
kp_status kp_event_create(kp_device_t dev, kp_event_t *out);
/* An event that only orders work: no timestamps (kp_event_elapsed_ms
 * refuses it), and cheaper to record and wait for on devices that time
 * events (cuda: cudaEventDisableTiming). */
kp_status kp_event_create_untimed(kp_device_t dev, kp_event_t *out);
void kp_event_destroy(kp_event_t ev);
/* Marks the point in `s` that the event completes at. */
kp_status kp_event_record(kp_event_t ev, kp_stream_t s);
/* KP_OK when complete; *done tells. A never-recorded event is complete. */
kp_status kp_event_query(kp_event_t ev, bool *done);
/* Blocks until the event completes. */
kp_status kp_event_sync(kp_event_t ev);
/* Later work on `s` waits until the event completes. The event may be of
 * another device of the same backend. */
kp_status kp_stream_wait_event(kp_stream_t s, kp_event_t ev);
/* Milliseconds between two completed events. */
kp_status kp_event_elapsed_ms(kp_event_t start, kp_event_t end, float *ms);

/* --- sharing with another process on this host ----------------------------------
 * Device memory and events another process of the same host may use (cuda:
 * CUDA IPC); KP_ERR_UNSUPPORTED on a backend without it (cpu). A handle is
 * plain bytes, to be sent to the other process by any means; it is not
 * valid in the process that made it. The exporting process keeps the
 * memory and the event alive while the other uses them. */
#define KP_IPC_HANDLE_BYTES 64
typedef struct kp_ipc_handle {
    unsigned char bytes[KP_IPC_HANDLE_BYTES];
} kp_ipc_handle;
/* The handle of `ptr`, the start of a kp_malloc of `dev`. */
kp_status kp_ipc_export(kp_device_t dev, void *ptr, kp_ipc_handle *out);
/* Another process's exported memory, mapped for `dev` (which may be
 * another device than the exporter's, where the two can reach each other's
 * memory: kp_device_peer_access); kp_ipc_close unmaps it. */
kp_status kp_ipc_open(kp_device_t dev, const kp_ipc_handle *h, void **out);
void kp_ipc_close(kp_device_t dev, void *ptr);
/* An untimed event another process may wait for (kp_event_open_ipc): each
 * kp_event_record here is seen there. */
kp_status kp_event_create_ipc(kp_device_t dev, kp_event_t *out, kp_ipc_handle *handle);
/* Another process's event (kp_event_create_ipc) as an event of `dev`, to
 * wait for (kp_stream_wait_event, kp_event_query, kp_event_sync); destroy
 * it with kp_event_destroy. */
kp_status kp_event_open_ipc(kp_device_t dev, const kp_ipc_handle *h, kp_event_t *out);

/* --- graphs ------------------------------------------------------------------------ */
kp_status kp_graph_create(kp_device_t dev, kp_graph_t *out);
void kp_graph_destroy(kp_graph_t g);
/* Node adders: `deps` lists n_deps nodes of the same graph that must finish first. */
kp_status kp_graph_add_kernel(kp_graph_t g, const kp_graph_node_t *deps, size_t n_deps,
                              const kp_launch *launch, kp_graph_node_t *out);
kp_status kp_graph_add_memcpy(kp_graph_t g, const kp_graph_node_t *deps, size_t n_deps, void *dst,
                              const void *src, size_t bytes, kp_graph_node_t *out);
/* Embeds a copy of `child` (later changes to `child` do not affect `g`). */
kp_status kp_graph_add_child(kp_graph_t g, const kp_graph_node_t *deps, size_t n_deps,
                             kp_graph_t child, kp_graph_node_t *out);
/* A kernel node that runs before the rest of `g`: every node that had no
 * dependencies now waits for it. For work that must precede a graph made
 * elsewhere (captured, or embedded with kp_graph_add_native); its launch
 * changes per run with kp_graph_exec_set_kernel. KP_ERR_UNSUPPORTED on a
 * backend whose graphs run their nodes in the order they were added (cpu);
 * after any other failure `g` may hold part of the change: discard it. */
kp_status kp_graph_add_kernel_first(kp_graph_t g, const kp_launch *launch, kp_graph_node_t *out);
/* A node that does nothing: joins or forks dependencies. */
kp_status kp_graph_add_empty(kp_graph_t g, const kp_graph_node_t *deps, size_t n_deps,
                             kp_graph_node_t *out);
/* Number of nodes (top level). */
size_t kp_graph_node_count(kp_graph_t g);

/* Builds the executable form. The graph may be destroyed afterwards; its
 * node handles stay valid for the set_* calls below only while it lives. */
kp_status kp_graph_instantiate(kp_graph_t g, kp_graph_exec_t *out);
void kp_graph_exec_destroy(kp_graph_exec_t ge);
/* Moves the executable graph's resources to the device ahead of its first launch. */
kp_status kp_graph_exec_upload(kp_graph_exec_t ge, kp_stream_t s);
/* Launches the whole graph on `s`; it never instantiates. */
kp_status kp_graph_exec_launch(kp_graph_exec_t ge, kp_stream_t s);
/* Parameter updates on the executable graph: take effect for later launches
 * only. `node` is a node of the graph `ge` was instantiated from. */
kp_status kp_graph_exec_set_kernel(kp_graph_exec_t ge, kp_graph_node_t node,
                                   const kp_launch *launch);
kp_status kp_graph_exec_set_memcpy(kp_graph_exec_t ge, kp_graph_node_t node, void *dst,
                                   const void *src, size_t bytes);
/* `child` must have the topology of the embedded graph; only parameters change. */
kp_status kp_graph_exec_set_child(kp_graph_exec_t ge, kp_graph_node_t node, kp_graph_t child);
/* Takes all parameters from `g`, which must have the same topology as the
 * graph `ge` came from. KP_ERR_MISMATCH says where it differs. */
kp_status kp_graph_exec_update(kp_graph_exec_t ge, kp_graph_t g);

/* --- stream capture ---------------------------------------------------------------- */
/* From begin to end, work submitted to `s` (kernels, copies, memsets, and
 * library calls such as cuBLAS on CUDA) is recorded into a new graph instead
 * of running. Synchronizing a capturing stream is an error. */
kp_status kp_stream_begin_capture(kp_stream_t s);
kp_status kp_stream_end_capture(kp_stream_t s, kp_graph_t *out);
/* True while `s` is capturing. */
bool kp_stream_is_capturing(kp_stream_t s);

/* --- backend-native handles (for vendor libraries in kernel files) ----------------- */
/* cudaStream_t of a cuda stream; NULL on the cpu backend. */
void *kp_stream_native(kp_stream_t s);
/* A kpipe stream over a native stream made elsewhere (a cudaStream_t of
 * this device: PyTorch's or CuPy's current stream; 0 is the legacy default
 * stream): work kpipe enqueues on it is ordered with the owner's.
 * kp_stream_destroy frees only the wrapper; the owner keeps the stream alive
 * while the wrapper is used. KP_ERR_UNSUPPORTED on a backend without native
 * streams (cpu); KP_ERR_INVALID_ARG for a handle the driver does not know
 * or one of another device. */
kp_status kp_stream_wrap(kp_device_t dev, void *native, kp_stream_t *out);
/* Embeds a copy of a native graph made elsewhere (a cudaGraph_t, captured by
 * PyTorch's torch.cuda.graph, say) as a child node of `g`, as
 * kp_graph_add_child does for a kpipe graph. The memory its nodes use stays
 * the maker's to keep alive while `g`, or an executable graph of it, lives.
 * KP_ERR_UNSUPPORTED on a backend without native graphs (cpu). */
kp_status kp_graph_add_native(kp_graph_t g, const kp_graph_node_t *deps, size_t n_deps,
                              void *native_child, kp_graph_node_t *out);

#ifdef __cplusplus
}
#endif
#endif
