/* cpu backend internals shared by its streams, graphs and workers. */
#ifndef KPIPE_CPU_IMPL_H
#define KPIPE_CPU_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../backend-impl.h"

/* The kernel form this backend runs. */
#define KP__HOST_FORM "host"

/* A kernel invocation with its parameter block copied inline. */
typedef struct kp__cpu_kcall {
    const kp_host_kernel *k;
    kp_dim3 grid, block;
    _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
} kp__cpu_kcall;

struct kp__cpu_graph;

typedef enum kp__cpu_work_kind {
    KP__WORK_KERNEL,
    KP__WORK_COPY,
    KP__WORK_SET,
    KP__WORK_COPY2D,
    KP__WORK_HOST,
    KP__WORK_EMPTY,
    KP__WORK_CHILD, /* graph nodes only */
} kp__cpu_work_kind;

/* One piece of work: the payload of a stream operation and of a graph node
 * alike, so capturing and enqueuing share one path. */
typedef struct kp__cpu_work {
    kp__cpu_work_kind kind;
    union {
        kp__cpu_kcall kernel;
        struct {
            void *dst;
            const void *src;
            size_t bytes;
        } copy;
        struct {
            void *dst;
            int value;
            size_t bytes;
        } set;
        struct {
            void *dst;
            const void *src;
            size_t dpitch, spitch, width, height;
        } copy2d;
        struct {
            void (*fn)(void *);
            void *user;
        } host;
        struct kp__cpu_graph *child; /* owned copy */
    } u;
} kp__cpu_work;

/* One node. Nodes can only depend on nodes added before them, so the
 * insertion order is a topological order and graphs are acyclic by
 * construction. */
typedef struct kp__cpu_node {
    uint32_t index;    /* position in its graph */
    uint64_t graph_id; /* id of the graph it was added to */
    uint32_t n_deps;
    uint32_t *deps; /* indices of earlier nodes */
    kp__cpu_work w;
} kp__cpu_node;

typedef struct kp__cpu_graph {
    uint64_t id; /* unique; a clone keeps the id of its source */
    size_t n, cap;
    kp__cpu_node **nodes;
} kp__cpu_graph;

/* An instantiated graph: a private deep copy run in insertion order. */
typedef struct kp__cpu_exec {
    kp__cpu_graph *g;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    uint64_t launched, finished; /* under mu */
} kp__cpu_exec;

/* Helper threads that share a kernel launch's blocks (cpu_workers.c). */
typedef struct kp__cpu_pool kp__cpu_pool;
kp_status kp__cpu_pool_new(int helpers, kp__cpu_pool **out);
void kp__cpu_pool_free(kp__cpu_pool *p);
/* Runs every block of the call: on the calling thread alone without a
 * pool, else split in chunks that the pool's threads and the caller share. */
void kp__cpu_kcall_run(kp__cpu_pool *p, const kp__cpu_kcall *c);

/* The device context: its open streams (so device sync can reach them all)
 * and its workers. */
typedef struct kp__cpu_stream kp__cpu_stream;
typedef struct kp__cpu_device {
    pthread_mutex_t mu;
    kp__cpu_stream *streams;
    int workers;
    kp__cpu_pool *pool; /* NULL with one worker */
    /* the live kp_malloc blocks, sorted by address, so a copy can tell
     * device memory from host memory as cuda does (is_device_memory) */
    struct kp__cpu_block {
        uintptr_t lo, hi;
    } *blocks;
    size_t n_blocks, cap_blocks;
} kp__cpu_device;

void kp__cpu_kcall_set(kp__cpu_kcall *c, const kp_launch *l);
/* Runs one piece of work (a child graph's nodes in order). */
void kp__cpu_work_run(kp__cpu_device *dev, const kp__cpu_work *w);
kp_status kp__cpu_graph_new(kp__cpu_graph **out);
void kp__cpu_graph_free(kp__cpu_graph *g);
/* Appends a node of `kind` depending on deps; its payload is left for the caller. */
kp_status kp__cpu_graph_append(kp__cpu_graph *g, kp__cpu_work_kind kind,
                               const kp_graph_node_t *deps, size_t n, kp__cpu_node **out);
/* Runs an executable graph's nodes in order (called by a stream worker). */
void kp__cpu_exec_run(kp__cpu_device *dev, kp__cpu_exec *e);
void kp__cpu_exec_launched(kp__cpu_exec *e);
void kp__cpu_exec_finished(kp__cpu_exec *e);

/* Graph vtable slots (cpu_graph.c). */
kp_status kp__cpu_graph_create(void *ctx, void **out);
void kp__cpu_graph_destroy(void *ctx, void *g);
kp_status kp__cpu_graph_add_kernel(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   const kp_launch *l, kp_graph_node_t *out);
kp_status kp__cpu_graph_add_memcpy(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   void *dst, const void *src, size_t bytes, kp_graph_node_t *out);
kp_status kp__cpu_graph_add_child(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  void *child, kp_graph_node_t *out);
kp_status kp__cpu_graph_add_empty(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  kp_graph_node_t *out);
size_t kp__cpu_graph_node_count(void *ctx, void *g);
kp_status kp__cpu_graph_instantiate(void *ctx, void *g, void **out);
void kp__cpu_exec_destroy(void *ctx, void *ge);
kp_status kp__cpu_exec_set_kernel(void *ctx, void *ge, kp_graph_node_t node, const kp_launch *l);
kp_status kp__cpu_exec_set_memcpy(void *ctx, void *ge, kp_graph_node_t node, void *dst,
                                  const void *src, size_t bytes);
kp_status kp__cpu_exec_set_child(void *ctx, void *ge, kp_graph_node_t node, void *child);
kp_status kp__cpu_exec_update(void *ctx, void *ge, void *g);

/* Stream and event vtable slots (cpu_stream.c). */
kp_status kp__cpu_stream_create(void *ctx, void **out);
void kp__cpu_stream_destroy(void *ctx, void *s);
kp_status kp__cpu_stream_sync(void *ctx, void *s);
kp_status kp__cpu_stream_query(void *ctx, void *s, bool *idle);
kp_status kp__cpu_memcpy_async(void *ctx, void *s, void *dst, const void *src, size_t bytes);
kp_status kp__cpu_memset_async(void *ctx, void *s, void *dst, int value, size_t bytes);
kp_status kp__cpu_memcpy2d_async(void *ctx, void *s, void *dst, size_t dpitch, const void *src,
                                 size_t spitch, size_t width, size_t height);
kp_status kp__cpu_launch(void *ctx, void *s, const kp_launch *l);
kp_status kp__cpu_host_func(void *ctx, void *s, void (*fn)(void *), void *user);
kp_status kp__cpu_event_create(void *ctx, bool timing, void **out);
void kp__cpu_event_destroy(void *ctx, void *ev);
kp_status kp__cpu_event_record(void *ctx, void *ev, void *s);
kp_status kp__cpu_event_query(void *ctx, void *ev, bool *done);
kp_status kp__cpu_event_sync(void *ctx, void *ev);
kp_status kp__cpu_stream_wait_event(void *ctx, void *s, void *ev);
kp_status kp__cpu_event_elapsed(void *ctx, void *a, void *b, float *ms);
kp_status kp__cpu_exec_upload(void *ctx, void *ge, void *s);
kp_status kp__cpu_exec_launch(void *ctx, void *ge, void *s);
kp_status kp__cpu_begin_capture(void *ctx, void *s);
kp_status kp__cpu_end_capture(void *ctx, void *s, void **out);
bool kp__cpu_is_capturing(void *ctx, void *s);
kp_status kp__cpu_device_sync(void *ctx);
/* As CUDA's thread-local capture mode: KP_ERR_STATE when the calling thread
 * is capturing a stream, for calls that may not run during capture. */
kp_status kp__cpu_capture_forbids(const char *what);
void kp__cpu_streams_close(void *ctx);

#endif
