/* kpipe graph cache: executable graphs kept per call signature, so work
 * whose shapes (or input addresses) change per tick still replays as one
 * graph launch.
 *
 *   static kp_status add(void *user, kp_stream_t s, const kp_graph_args *a) {
 *       ...enqueue work on s for a->inputs[0..] -> a->outputs[0..] (a->inputs[i].desc
 *          is the padded shape; every address is the cache's static buffer)...
 *   }
 *   kp_graph_cache_t c;
 *   kp_graph_cache_create(dev, NULL, &c);             // capture on a miss, no bounds
 *   kp_graph_call call = KP_GRAPH_CALL_INIT;
 *   call.enqueue = add;  call.inputs = in;  call.n_inputs = 2;
 *   call.outputs = out;  call.n_outputs = 1;          // out[0].desc: the shape wanted
 *   kp_graph_cache_run(c, &call, s);                  // out[0].data, .desc: a view
 *
 * The key of a call is compared in full, never by hash alone: the call's id,
 * every port's dtype and (padded) shape and dynamic-dimension mask, the
 * literals, and the input addresses of an in-place call. A hit copies the
 * inputs into the static buffers and launches the graph. A miss captures the
 * work, then first tries to update an executable graph it may reuse (one made
 * stale by buffer growth, or the least recently used one when the cache is
 * at a bound) and instantiates only when that fails; or, by policy, runs the
 * work on the stream without a graph, or fails.
 *
 * Static buffers (one per port) grow when a larger shape arrives; growing
 * moves them, which makes every graph captured on the old buffers stale
 * (counted as invalidations; a stale graph is a cheap update target).
 * Whatever grows them (a capture, a fallback run, prepare), the cache then
 * evicts least recently used graphs until max_bytes holds again. A call
 * refused for what it asks (bad arguments, too many copies) changes
 * nothing, not even a counter; one refused by the byte budget or the
 * strict policy counts as a call and a miss and changes no graph or buffer.
 * Outputs come back as views of the static output buffers sliced to the
 * shape asked for, valid until the next call that uses the cache.
 *
 * A cache is used by one thread at a time, on one device: run, prepare,
 * stats and report claim it for their duration, and one that overlaps
 * another call on it (from a second thread, or from the work function
 * inside the first) gets KP_ERR_STATE naming the call in progress (the
 * report says so in its text), the cache left as it was. Calls in turn
 * from different threads are fine; outputs are then rewritten by the next
 * call, whichever thread makes it.
 */
#ifndef KPIPE_GRAPH_CACHE_H
#define KPIPE_GRAPH_CACHE_H

#include "kpipe/memory.h"
#include "kpipe/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_graph_cache *kp_graph_cache_t;

/* What a miss does. */
typedef enum kp_graph_miss {
    KP_GRAPH_MISS_CAPTURE = 0,  /* make the graph now (lazy capture) */
    KP_GRAPH_MISS_FALLBACK = 1, /* run this call on the stream without a graph */
    KP_GRAPH_MISS_STRICT = 2,   /* fail with KP_ERR_NOT_FOUND: only prepared keys run */
} kp_graph_miss;

/* "capture", "fallback", "strict"; "invalid" otherwise. */
const char *kp_graph_miss_str(kp_graph_miss m);
/* Parses the names above; KP_ERR_PARSE names the text. */
kp_status kp_graph_miss_parse(const char *text, kp_graph_miss *out);

#define KP_GRAPH_MAX_CAPTURE_SIZES 64
/* Ports of one call (inputs plus outputs). */
#define KP_GRAPH_MAX_PORTS 16
/* Literals of one call. */
#define KP_GRAPH_MAX_LITERALS 64
/* Runs one input may be copied in as: a padded dimension other than the
 * outermost is copied a run at a time (a [rows, n] input padded in n has
 * `rows` runs; on cuda the graph's first node, a copy kernel, places them,
 * on cpu one 2-D copy, kp_memcpy2d_async, for each index of the dimensions
 * further out), so such a call may have at most this many runs; one past
 * it is refused with KP_ERR_UNSUPPORTED before it changes anything. Pad an
 * outer dimension, or use KP_GRAPH_IN_PLACE. */
#define KP_GRAPH_MAX_COPY_RUNS 4096
/* Bytes a kept graph is charged per node on top of the static buffers its
 * key needs: the driver does not report an executable graph's own memory. */
#define KP_GRAPH_NODE_BYTES 1024

typedef struct kp_graph_cache_config {
    size_t struct_size; /* sizeof(kp_graph_cache_config) */
    kp_graph_miss miss;
    size_t max_graphs; /* executable graphs kept (default 64); 0: no bound */
    /* Bytes the cache holds: its static buffers (as its allocator reports
     * them) plus what its graphs are charged; 0: no bound. Least recently
     * used graphs are evicted to stay under it; buffers that alone exceed
     * it are refused (KP_ERR_OUT_OF_MEMORY). */
    size_t max_bytes;
    /* Padding: each dynamic dimension rounds up to the smallest of these
     * sizes that holds it (ascending, positive); a larger one is kept
     * exact. None: exact keys. */
    int64_t capture_sizes[KP_GRAPH_MAX_CAPTURE_SIZES];
    size_t n_capture_sizes;
    /* In-place calls: graphs kept per shape, one per input address set;
     * past it the least recently used one is re-pointed. 0: 4. */
    size_t max_variants;
} kp_graph_cache_config;

#define KP_GRAPH_CACHE_CONFIG_INIT \
    { sizeof(kp_graph_cache_config), KP_GRAPH_MISS_CAPTURE, 64, 0, {0}, 0, 0 }

/* What the work sees: its ports as the graph uses them, and the literals. */
typedef struct kp_graph_args {
    const kp_port_info *inputs;
    size_t n_inputs;
    const kp_port_info *outputs;
    size_t n_outputs;
    const int64_t *literals;
    size_t n_literals;
} kp_graph_args;

/* Enqueues the work on `s` (captured into a graph, or run directly on the
 * fallback path). */
typedef kp_status (*kp_graph_enqueue_fn)(void *user, kp_stream_t s, const kp_graph_args *args);
/* Adds the work's nodes to `g` directly, instead of capture; `state` is the
 * graph's own state_bytes (zeroed), for node handles its bind step needs.
 * It must add the same nodes in the same order for calls that differ only in
 * parameters, as graph updates pair nodes by position. */
typedef kp_status (*kp_graph_build_fn)(void *user, kp_graph_t g, const kp_graph_args *args,
                                       void *state);
/* Before every launch: parameter updates on the executable graph; `fresh`
 * is true right after it was instantiated or updated. */
typedef kp_status (*kp_graph_bind_fn)(void *user, kp_graph_exec_t ge, const kp_graph_args *args,
                                      void *state, bool fresh);
/* A miss's fast way, for work with a build function: re-points an
 * executable graph that `build` made for another key of the same call id
 * at this call's arguments, node by node (kp_graph_exec_set_kernel,
 * kp_graph_exec_set_memcpy, with the node handles build kept in `state`),
 * where the arguments change only parameters, not the nodes. No graph is
 * built and none updated: a miss then costs a few parameter sets. Any
 * error (KP_ERR_UNSUPPORTED where the topology would change) makes the
 * cache build and update or instantiate as without it; the graph it left
 * half re-pointed is marked stale. */
typedef kp_status (*kp_graph_retarget_fn)(void *user, kp_graph_exec_t ge,
                                          const kp_graph_args *args, void *state);

/* Inputs are read where they are (no static input buffers, no copies):
 * their addresses join the key, and each address set gets its own graph. */
#define KP_GRAPH_IN_PLACE 1u

typedef struct kp_graph_call {
    size_t struct_size;          /* sizeof(kp_graph_call) */
    uint64_t id;                 /* the function or layer; part of the key */
    kp_graph_enqueue_fn enqueue; /* the work; required unless build is given */
    kp_graph_build_fn build;     /* optional: nodes instead of capture */
    kp_graph_bind_fn bind;       /* optional */
    void *user;
    size_t state_bytes; /* per-graph state for build and bind */
    /* Inputs: contiguous tensors of this device (data may be NULL for
     * prepare). Outputs: the caller sets each desc's dtype and shape; the
     * call sets data and desc to a view of the static output buffer. */
    const kp_port_info *inputs;
    size_t n_inputs;
    kp_port_info *outputs;
    size_t n_outputs;
    /* Per port, inputs first, then outputs: bit d marks dimension d dynamic
     * (padded by capture_sizes). NULL: every dimension is exact. */
    const uint32_t *dynamic;
    const int64_t *literals; /* part of the key, passed to the work */
    size_t n_literals;
    unsigned flags; /* KP_GRAPH_IN_PLACE */
    kp_graph_retarget_fn retarget; /* optional, with build: misses without a new graph */
} kp_graph_call;

#define KP_GRAPH_CALL_INIT                                                                   \
    { sizeof(kp_graph_call), 0, NULL, NULL, NULL, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, 0, 0, \
      NULL }

typedef struct kp_graph_stats {
    uint64_t calls;
    uint64_t hits;
    uint64_t misses;
    uint64_t captures;       /* graphs made by capture or build */
    uint64_t updates;        /* misses served by updating a kept executable graph */
    uint64_t instantiations; /* misses that instantiated */
    uint64_t failed_updates; /* updates the device refused (topology differed) */
    uint64_t fallbacks;      /* calls run without a graph */
    uint64_t invalidations;  /* graphs made stale by buffer growth */
    uint64_t evictions;      /* graphs destroyed or re-pointed to stay in bounds */
    uint64_t grows;          /* static buffer reallocations */
    size_t graphs;           /* executable graphs held, stale ones included */
    size_t stale;            /* of which stale */
    size_t buffer_bytes;     /* static buffers: the cache's allocator's allocated bytes */
    size_t graph_bytes;      /* what the graphs are charged */
    size_t bytes;            /* buffer_bytes + graph_bytes */
    size_t peak_bytes;
} kp_graph_stats;

/* config NULL: defaults. Bad values (unknown policy, capture sizes not
 * ascending or not positive) give KP_ERR_INVALID_ARG naming the field. */
kp_status kp_graph_cache_create(kp_device_t dev, const kp_graph_cache_config *config,
                                kp_graph_cache_t *out);
/* Waits for the device's work that may use the graphs, frees everything.
 * NULL is a no-op. */
void kp_graph_cache_destroy(kp_graph_cache_t c);
/* One call: hit, miss (by policy) and launch on `s`. Never blocks the host
 * on a hit; a hit allocates nothing. */
kp_status kp_graph_cache_run(kp_graph_cache_t c, kp_graph_call *call, kp_stream_t s);
/* Makes the graphs of `n` calls ahead of time (whatever the miss policy),
 * growing the static buffers once to the largest first; launches nothing.
 * Input data may be NULL, except for in-place calls (their addresses are
 * part of the key). Sets each call's outputs as a run would (data and
 * desc: a view of the static output buffer), so views of every prepared
 * size can be made before the first run; they stand until a larger call
 * grows the buffers. */
kp_status kp_graph_cache_prepare(kp_graph_cache_t c, kp_graph_call *calls, size_t n, kp_stream_t s);
kp_status kp_graph_cache_stats(kp_graph_cache_t c, kp_graph_stats *out);
/* A text report into buf: one line of stats, then one line per graph (its
 * key, live or stale, nodes, bytes, hits), most recently used first.
 * Truncated to len; returns buf ("" when buf is NULL or len is 0). */
const char *kp_graph_cache_report(kp_graph_cache_t c, char *buf, size_t len);
/* The configuration in use. */
kp_status kp_graph_cache_config_get(kp_graph_cache_t c, kp_graph_cache_config *out);

#ifdef __cplusplus
}
#endif
#endif
