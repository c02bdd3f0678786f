/* cpu backend internals shared by its streams and graphs. */
#ifndef KPIPE_CPU_IMPL_H
#define KPIPE_CPU_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../backend-impl.h"

typedef enum kp__cpu_node_kind {
    KP__NODE_KERNEL,
    KP__NODE_MEMCPY,
    KP__NODE_MEMSET,
    KP__NODE_HOST,
    KP__NODE_CHILD,
    KP__NODE_EMPTY,
} kp__cpu_node_kind;

/* A kernel invocation with its parameter block copied inline. */
typedef struct kp__cpu_kcall {
    const kp_kernel *kernel;
    kp_dim3 grid, block;
    _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
} kp__cpu_kcall;

struct kp__cpu_graph;

/* One node. Nodes can only depend on nodes added before them, so the
 * insertion order is a topological order and graphs are acyclic by
 * construction. */
typedef struct kp__cpu_node {
    kp__cpu_node_kind kind;
    uint32_t index;     /* position in its graph */
    uint64_t graph_id;  /* id of the graph it was added to */
    uint32_t n_deps;
    uint32_t *deps;     /* indices of earlier nodes */
    union {
        kp__cpu_kcall kernel;
        struct { void *dst; const void *src; size_t bytes; } copy;
        struct { void *dst; int value; size_t bytes; } set;
        struct { void (*fn)(void *); void *user; } host;
        struct kp__cpu_graph *child; /* owned copy */
    } u;
} kp__cpu_node;

typedef struct kp__cpu_graph {
    uint64_t id;      /* unique; a clone keeps the id of its source */
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

void kp__cpu_kcall_set(kp__cpu_kcall *c, const kp_launch *l);
void kp__cpu_kcall_run(const kp__cpu_kcall *c);
kp_status kp__cpu_graph_new(kp__cpu_graph **out);
void kp__cpu_graph_free(kp__cpu_graph *g);
/* Appends a node of `kind` depending on deps; its payload is left for the caller. */
kp_status kp__cpu_graph_append(kp__cpu_graph *g, kp__cpu_node_kind kind,
                               const kp_graph_node_t *deps, size_t n, kp__cpu_node **out);
/* Runs an executable graph's nodes in order (called by a stream worker). */
void kp__cpu_exec_run(kp__cpu_exec *e);
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
/* The device context: its open streams, so device sync can reach them all. */
typedef struct kp__cpu_stream kp__cpu_stream;
typedef struct kp__cpu_device {
    pthread_mutex_t mu;
    kp__cpu_stream *streams;
} kp__cpu_device;
kp_status kp__cpu_stream_create(void *ctx, void **out);
void kp__cpu_stream_destroy(void *ctx, void *s);
kp_status kp__cpu_stream_sync(void *ctx, void *s);
kp_status kp__cpu_stream_query(void *ctx, void *s, bool *idle);
kp_status kp__cpu_memcpy_async(void *ctx, void *s, void *dst, const void *src, size_t bytes);
kp_status kp__cpu_memset_async(void *ctx, void *s, void *dst, int value, size_t bytes);
kp_status kp__cpu_launch(void *ctx, void *s, const kp_launch *l);
kp_status kp__cpu_host_func(void *ctx, void *s, void (*fn)(void *), void *user);
kp_status kp__cpu_event_create(void *ctx, void **out);
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
