/* The graph cache's own: its entries, a resolved call, the cache, and the
 * functions its files share (key.c, lru.c, buffers.c, graph_cache.c; they call
 * each other in one direction: run -> buffers -> lru, run -> key).
 *
 * A key is a string of 64-bit words (the call's id, flags, every port's
 * dtype, mask and padded shape, the literals, then the input addresses of an
 * in-place call). Entries sit in one array scanned by 64-bit hash, and a
 * hash match is confirmed by comparing the whole key, so two keys never
 * share a graph. A hit allocates nothing: the key is written into a buffer
 * the cache keeps. */
#ifndef KPIPE_GRAPH_CACHE_IMPL_H
#define KPIPE_GRAPH_CACHE_IMPL_H

#include "kpipe/graph_cache.h"
#include "../core/core-impl.h"
#include "copy-impl.h"

#define KP__KEY_HEAD 5 /* id, flags, n_inputs, n_outputs, n_literals */
#define KP__KEY_PORT (3 + KP_MAX_DIMS)
#define KP__KEY_WORDS \
    (KP__KEY_HEAD + KP_GRAPH_MAX_PORTS * KP__KEY_PORT + KP_GRAPH_MAX_LITERALS + KP_GRAPH_MAX_PORTS)
/* The device allocator's rounding of a request: the budget check predicts
 * what its stats will then report. */
#define KP__ALLOC_ROUND 512

typedef struct kp__gentry {
    uint64_t hash;       /* of the whole key */
    uint64_t shape_hash; /* of the key without input addresses */
    uint64_t *key;
    size_t key_words;
    uint64_t id;
    kp_graph_t graph; /* the graph it was instantiated from: its nodes address the exec */
    kp_graph_exec_t exec;
    void *state;
    size_t state_bytes;
    void *bufs[KP_GRAPH_MAX_PORTS]; /* static buffers baked in (NULL: not used) */
    size_t n_ports;
    size_t nodes, bytes;
    uint64_t last_use, hits;
    bool stale;
    bool built; /* its graph came from the call's build: a retarget may re-point it */
    /* the inputs' copies as its first nodes, one per input (0: copies on
     * the stream, or none) */
    size_t n_copies;
    kp_graph_node_t copy[KP_GRAPH_MAX_PORTS];
    /* what each copy node was last set to (n_copies of them; NULL: set at
     * every launch), holding while copies_known: a hit whose copies did not
     * change (one length, the same input) launches without setting them.
     * An exec made or updated holds its graph's: kp__entry_bufs clears it. */
    kp__copy_set *copy_last;
    bool copies_known;
} kp__gentry;

/* One call, resolved: padded descriptors, the key, what the buffers need. */
typedef struct kp__gcall {
    kp_graph_call c;
    bool in_place;
    size_t n_ports;
    kp_tensor_desc padded[KP_GRAPH_MAX_PORTS];
    kp_port_info args_in[KP_GRAPH_MAX_PORTS], args_out[KP_GRAPH_MAX_PORTS];
    size_t need[KP_GRAPH_MAX_PORTS]; /* static buffer bytes per port; 0: none */
    size_t key_words;
    uint64_t hash, shape_hash;
} kp__gcall;

struct kp_graph_cache {
    kp__guard guard; /* one thread at a time: claimed by run, prepare, stats and report */
    kp_device_t dev;
    kp_graph_cache_config cfg;
    kp_allocator_t alloc; /* the static buffers' own allocator, for exact stats */
    kp_stream_t capture;  /* graphs are captured here */
    bool no_copy_nodes;   /* the backend cannot put the input copies first in a graph */
    void *buf[KP_GRAPH_MAX_PORTS];
    size_t buf_bytes[KP_GRAPH_MAX_PORTS];
    kp__gentry **e;
    size_t n, cap;
    uint64_t clock;
    kp_graph_stats st;
    uint64_t key[KP__KEY_WORDS]; /* the current call's key */
    kp__gcall cur;
};

/* How an input reaches its padded static buffer: one copy per run of the
 * innermost padded dimension `inner` (-1: none padded, one copy). */
typedef struct kp__copy_plan {
    int inner;
    int64_t runs, run_elems;
} kp__copy_plan;

/* --- keys (key.c) ---------------------------------------------------------- */
/* Plans the copy of `a` into the layout of `pd`; returns the copies. */
int64_t kp__gc_plan_copy(const kp_tensor_desc *a, const kp_tensor_desc *pd, kp__copy_plan *out);
/* Validates a call at the boundary, pads its shapes and writes its key. */
kp_status kp__gc_resolve(kp_graph_cache_t c, const kp_graph_call *call, bool prepare, kp__gcall *g,
                         uint64_t *key);
/* "id=3 in0=f32[4,8]~1 out0=f32[4,8] lit=[2] @0x7f.." into buf. */
const char *kp__gc_key_str(const uint64_t *key, size_t words, char *buf, size_t len);

/* --- entries and bounds (lru.c) -------------------------------------------- */
kp__gentry *kp__gc_find(kp_graph_cache_t c, const kp__gcall *g);
/* Can e (NULL: none found) be launched as it is: not stale, and its graph
 * still using the static buffers where they are? A run's hit and a
 * prepare's skip both ask it. */
bool kp__gc_launchable(kp_graph_cache_t c, const kp__gentry *e);
void kp__gc_entry_free(kp__gentry *e);
void kp__gc_account(kp_graph_cache_t c);
void kp__gc_remove(kp_graph_cache_t c, kp__gentry *e);
/* The least recently used entry, stale ones first; `skip` is never picked;
 * `same_shape`: only variants of that shape. */
kp__gentry *kp__gc_lru(kp_graph_cache_t c, const kp__gentry *skip, const uint64_t *same_shape);
/* Evicts least recently used entries (never `keep`) until the bounds hold. */
void kp__gc_enforce_bounds(kp_graph_cache_t c, const kp__gentry *keep);

/* --- static buffers (buffers.c) -------------------------------------------- */
/* Grows the buffers to at least need[p] bytes; graphs on a moved buffer go
 * stale. Every path that grows them comes here, so the bounds are enforced
 * here: least recently used graphs (never `keep`) go until the cache's
 * bytes are within max_bytes again. */
kp_status kp__gc_grow(kp_graph_cache_t c, const size_t *need, size_t n_ports,
                      const kp__gentry *keep);
/* The work's view of the call: static buffers (or the inputs in place). */
void kp__gc_args(kp_graph_cache_t c, kp__gcall *g, kp_graph_args *a, bool exact);
/* The copy nodes a graph made now for g would lead with: one per input,
 * none for an in-place call or where the backend's graphs take none (cpu,
 * known after its first refusal). */
size_t kp__gc_copies_wanted(kp_graph_cache_t c, const kp__gcall *g);
/* The input copies as the first nodes of `graph` (nodes[p] for input p),
 * with the current call's addresses: *added is false where the call reads
 * its inputs in place or the backend cannot (cpu), and copies go on the
 * stream instead. On failure the graph is half changed: discard it. */
kp_status kp__gc_copy_nodes(kp_graph_cache_t c, const kp__gcall *g, kp_graph_t graph,
                            kp_graph_node_t *nodes, bool *added);
/* Brings the current call's inputs into the static buffers for e's launch:
 * e's copy nodes set to them, or copies on s. */
kp_status kp__gc_copy_inputs(kp_graph_cache_t c, const kp__gcall *g, kp__gentry *e, kp_stream_t s);
/* The outputs as views of the static buffers sliced to the shape asked for. */
void kp__gc_outputs(kp_graph_cache_t c, kp__gcall *g, kp_graph_call *call, bool exact);

#endif
