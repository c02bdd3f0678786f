/* kpipe tasks: data flow over tensor regions. A task is a function that
 * enqueues work on a stream, submitted with its arguments: regions of
 * buffers it reads (IN), writes (OUT) or both (INOUT), and scalars. The
 * dependencies between tasks come from the regions themselves: a task
 * waits for every earlier task whose region touches a byte of its own on
 * the same buffer, unless both only read (read-after-write, write-after-read,
 * write-after-write), decided by the exact overlap test (kp_desc_overlap).
 *
 *   kp_tasks_t t;
 *   kp_tasks_create(dev, 4, &t);                  // a pool of 4 streams
 *   uint32_t a;
 *   kp_tasks_buffer(t, 1024 * 4, &a);             // allocated by its first writer
 *   kp_task_arg args[2] = {{KP_TASK_OUT, a, whole}, {KP_TASK_SCALAR, 0, {0}, &x, 4}};
 *   kp_tasks_submit(t, &fill, args, 2, NULL);
 *   ...
 *   kp_tasks_run(t, stream);                      // as if enqueued on `stream`, in order
 *   kp_stream_sync(stream);
 *   kp_tasks_destroy(t);
 *
 * Or as one graph, built once and launched many times:
 *   ... submit ...
 *   kp_tasks_instantiate(t);                      // a node per task, an edge per dependence
 *   kp_tasks_launch(t, stream);                   // as often as wanted
 *   ... submit the same tasks with new scalars or buffers ...
 *   kp_tasks_instantiate(t);                      // updates the graph in place, no rebuild
 *
 * Buffers are named by id. A buffer made by kp_tasks_buffer gets its
 * memory (from the device's caching allocator) when its first writer is
 * submitted, whose region must cover it whole and contiguously; one made by
 * kp_tasks_buffer_wrap uses the caller's memory. Program order decides what
 * a reader sees: each write makes a new version of its buffer, and a reader
 * of the region sees the last write submitted before it.
 *
 * A set is used by one thread at a time (program order decides what a
 * reader sees, and threads have none between them): every call claims it
 * for its duration, and one that overlaps another call on it, from a second
 * thread or from a task function inside kp_tasks_run, gets KP_ERR_STATE
 * naming the call in progress, the set left as it was. */
#ifndef KPIPE_TASKS_H
#define KPIPE_TASKS_H

#include "kpipe/device.h"
#include "kpipe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_tasks *kp_tasks_t;

#define KP_TASKS_MAX_STREAMS 16
#define KP_TASK_MAX_ARGS 32
#define KP_TASK_MAX_SCALAR 256 /* bytes of one scalar argument */

typedef enum kp_task_access {
    KP_TASK_IN = 1,     /* reads the region */
    KP_TASK_OUT = 2,    /* writes the region (every byte of it) */
    KP_TASK_INOUT = 3,  /* reads and writes the region */
    KP_TASK_SCALAR = 4, /* a value copied at submit; no buffer */
} kp_task_access;

/* One argument as submitted. Tensors: buffer (an id, never 0) and the
 * region as a descriptor in the buffer's memory (offset and strides in
 * elements of its dtype). Scalars: buffer 0, scalar and scalar_bytes. */
typedef struct kp_task_arg {
    kp_task_access access;
    uint32_t buffer;
    kp_tensor_desc desc;
    const void *scalar;
    size_t scalar_bytes; /* 1 .. KP_TASK_MAX_SCALAR */
} kp_task_arg;

/* One argument as the task's function sees it: the buffer's base address
 * with the region's full descriptor, or the scalar's copy. */
typedef struct kp_task_view {
    kp_task_access access;
    void *data;
    kp_tensor_desc desc;
    const void *scalar;
    size_t scalar_bytes;
} kp_task_view;

/* Enqueues the task's work on `s` (never waits for it). */
typedef kp_status (*kp_task_fn)(void *user, kp_stream_t s, const kp_task_view *args, size_t n);

/* For a task that is one kernel launch: fills *launch for the task's
 * arguments, its parameter block written to `params` (KP_MAX_KERNEL_PARAMS
 * bytes, 16-byte aligned). The stream form launches it; the graph form adds
 * it as a kernel node, with no stream capture. */
typedef kp_status (*kp_task_launch_fn)(void *user, const kp_task_view *args, size_t n,
                                       kp_launch *launch, void *params);

/* A task's work: `launch` when set (fn is then not used), else `fn`, which
 * the graph form runs under stream capture into a child graph (so library
 * calls such as cuBLAS and cuSOLVER work in both forms). */
typedef struct kp_task_kernel {
    const char *name; /* for errors and DOT labels */
    kp_task_fn fn;
    void *user;
    kp_task_launch_fn launch;
} kp_task_kernel;

/* How two tasks depend on each other, through one buffer's bytes. */
typedef enum kp_hazard {
    KP_HAZARD_RAW = 1, /* read after write: the true dependence */
    KP_HAZARD_WAR = 2, /* write after read */
    KP_HAZARD_WAW = 3, /* write after write */
} kp_hazard;

typedef struct kp_task_edge {
    uint64_t from, to; /* task ids, from before to */
    kp_hazard hazard;
    uint32_t buffer;
} kp_task_edge;

typedef struct kp_tasks_stats {
    uint64_t tasks;         /* submitted since the last run */
    uint64_t edges_found;   /* hazards between task pairs */
    uint64_t edges;         /* kept: the found ones less those another path implies */
    uint64_t regions_live;  /* regions the index holds, all buffers */
    uint64_t overlap_tests; /* exact tests run (the index skips the rest) */
    uint64_t runs;
    uint64_t graph_builds;  /* instantiates that built a new executable graph */
    uint64_t graph_updates; /* instantiates that updated the one there was */
} kp_tasks_stats;

/* A task set on `dev` with a pool of n_streams (1 .. KP_TASKS_MAX_STREAMS)
 * streams. */
kp_status kp_tasks_create(kp_device_t dev, size_t n_streams, kp_tasks_t *out);
/* Frees the set and the memory of the buffers it allocated; work still
 * running is waited for. NULL is a no-op. Later calls with the handle are
 * refused (KP_ERR_INVALID_ARG), not undefined. */
void kp_tasks_destroy(kp_tasks_t t);
/* A buffer of `bytes` (1 .. 2^48), allocated by its first writer. */
kp_status kp_tasks_buffer(kp_tasks_t t, size_t bytes, uint32_t *id);
/* A buffer over the caller's device memory (kept alive by the caller). */
kp_status kp_tasks_buffer_wrap(kp_tasks_t t, void *data, size_t bytes, uint32_t *id);
/* A buffer's memory; NULL before its first writer was submitted. */
kp_status kp_tasks_buffer_data(kp_tasks_t t, uint32_t id, void **out);
/* Records a task and its dependencies; *task_id (may be NULL) numbers it
 * from 0 in each run. Every argument is checked first (KP_ERR_INVALID_ARG
 * names it); a refused task changes nothing. */
kp_status kp_tasks_submit(kp_tasks_t t, const kp_task_kernel *kernel, const kp_task_arg *args,
                          size_t n_args, uint64_t *task_id);
/* Enqueues the tasks submitted since the last run over the stream pool,
 * as if they ran in order on `s`: they start after the work already on
 * `s`, and later work on `s` waits for them all. Cross-stream dependencies
 * are events; the host waits for nothing. The next submit starts a new set;
 * so does a failed run (work it enqueued before the failure stays). */
kp_status kp_tasks_run(kp_tasks_t t, kp_stream_t s);
/* Emits the tasks submitted since the last run or instantiate as one graph:
 * a node per task (a kernel node for a `launch` task, a child graph captured
 * from `fn` otherwise), an edge per kept dependence, and makes it the set's
 * executable graph. When one was made before and the new graph has its
 * shape (the same nodes, kinds and edges), that one is updated in place
 * with the new pointers and scalars instead of being rebuilt. The submitted
 * set is spent, as by kp_tasks_run. On failure the set is spent too and
 * the executable graph there was, if any, is kept unchanged. */
kp_status kp_tasks_instantiate(kp_tasks_t t);
/* Launches the executable graph on `s`: it starts after the work already
 * on `s`, and later work on `s` waits for it. Any number of times. */
kp_status kp_tasks_launch(kp_tasks_t t, kp_stream_t s);
/* The kept edges of the current set, `cap` at most, in order of `to`;
 * *n tells how many there are. */
kp_status kp_tasks_edges(kp_tasks_t t, kp_task_edge *out, size_t cap, size_t *n);
kp_status kp_tasks_stats_get(kp_tasks_t t, kp_tasks_stats *out);
/* Writes the current set as Graphviz DOT: a node per task (kernel, regions
 * with their buffer versions), an edge per kept dependence (its hazard). */
kp_status kp_tasks_write_dot(kp_tasks_t t, const char *path);

#ifdef __cplusplus
}
#endif
#endif
