/* Tasks: dependencies from region overlap, execution over a stream pool.
 *
 * The index. Each buffer keeps its live accesses (task, region, read or
 * write) in an interval treap: a tree ordered by the start of their byte
 * extent, each node holding the largest end in its subtree, balanced by
 * random priorities. A new region visits only the subtrees whose extents
 * can reach it (O(log n) plus the overlapping ones), and the exact overlap
 * test runs on those alone. A write removes the accesses it covers (all
 * inside its extent when its region is contiguous, else those on exactly
 * its region): any later task that touches their bytes touches the write's
 * and so depends on it, and through it on them.
 * Repeated work on the same tiles keeps the index at one entry per tile,
 * however long the history. Insertion and removal cost O(log n).
 *
 * Pruning. Of a new task's predecessors, one that is itself a predecessor
 * of another is implied and dropped.
 *
 * Running. Tasks go out in submission order (a topological order). A task
 * takes its latest predecessor's stream when that predecessor was the last
 * thing put on it, else the next stream in turn; an event after each task
 * lets tasks on other streams wait for it. Streams are picked before
 * anything is enqueued, so only a task that another stream waits for
 * records an event, and a stream waits once for the latest task it needs
 * from each other stream (a stream's events complete in order).
 *
 * The graph form. The kept edges are the graph's edges, so nodes are added
 * straight from them, in submission order; a `launch` task is a kernel
 * node, any other task a child graph captured from its function on a
 * stream kept for capture. A later instantiate first tries to update the
 * executable graph it made before (the backends compare the topology), and
 * builds a new one only when that is refused. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/memory.h"
#include "kpipe/tasks.h"
#include "../core/core-impl.h"

#define KP__MAX_TASK_BUFFERS (1u << 20)

/* A live access: a node of its buffer's treap, in the set's node pool. */
typedef struct kp__access {
    int64_t lo, hi; /* byte extent */
    int64_t max_hi; /* the largest hi in the subtree */
    uint64_t task;
    uint32_t arg; /* its argument in args[]: the region's descriptor */
    uint32_t prio;
    uint32_t left, right; /* pool indices; 0: none */
    bool write;
    bool read;
} kp__access;

typedef struct kp__tbuf {
    size_t bytes;
    void *data;
    bool owned; /* allocated here, by its first writer */
    uint64_t version;
    uint32_t root; /* of the treap of live accesses */
    size_t n_acc;
} kp__tbuf;

typedef struct kp__task {
    kp_task_kernel k;
    size_t first_arg, n_args;
    size_t first_pred, n_preds; /* kept predecessors, in preds[] */
    int stream;
    bool signals; /* a task on another stream waits for it: record its event */
} kp__task;

typedef struct kp__targ {
    kp_task_view v;
    uint32_t buffer;
    uint64_t version; /* the buffer's version this argument reads or makes */
    size_t scalar_off;
} kp__targ;

struct kp_tasks {
    kp_device_t dev;
    kp_allocator_t alloc;
    size_t n_streams;
    kp_stream_t streams[KP_TASKS_MAX_STREAMS];
    kp_event_t stream_ev[KP_TASKS_MAX_STREAMS];
    kp_event_t start_ev;
    kp__tbuf *bufs; /* id i is bufs[i - 1] */
    size_t n_bufs, cap_bufs;
    kp__task *tasks;
    size_t n_tasks, cap_tasks;
    kp__targ *args;
    size_t n_args, cap_args;
    kp_task_edge *edges; /* kept */
    size_t n_edges, cap_edges;
    unsigned char *scalars;
    size_t n_scalars, cap_scalars;
    kp_event_t *task_ev; /* one per task slot, made as needed, reused */
    size_t n_task_ev, cap_task_ev;
    kp__access *pool; /* treap nodes of every buffer; [0] unused */
    size_t n_pool, cap_pool;
    uint32_t pool_free; /* a list through .left */
    uint32_t *drop;     /* scratch: the accesses a write covers */
    size_t n_drop, cap_drop;
    uint32_t prio_state;
    kp_graph_node_t *nodes; /* the graph form: one per task */
    size_t n_nodes, cap_nodes;
    kp_stream_t cap_stream; /* the graph form captures task functions on it */
    kp_graph_exec_t exec;
    kp_tasks_stats stats;
};

/* --- live handles: calls on a destroyed set are refused, not undefined -------- */
static pthread_mutex_t kp__live_mu = PTHREAD_MUTEX_INITIALIZER;
static kp_tasks_t *kp__live;
static size_t kp__n_live, kp__cap_live;

static bool kp__live_add(kp_tasks_t t) {
    pthread_mutex_lock(&kp__live_mu);
    bool ok = true;
    if (kp__n_live == kp__cap_live) {
        size_t cap = kp__cap_live ? 2 * kp__cap_live : 16;
        kp_tasks_t *n = kp__malloc(cap * sizeof *n);
        if (n) {
            if (kp__n_live) memcpy(n, kp__live, kp__n_live * sizeof *n);
            kp__free(kp__live);
            kp__live = n;
            kp__cap_live = cap;
        }
        ok = n != NULL;
    }
    if (ok) kp__live[kp__n_live++] = t;
    pthread_mutex_unlock(&kp__live_mu);
    return ok;
}

static bool kp__live_take(kp_tasks_t t, bool remove) {
    pthread_mutex_lock(&kp__live_mu);
    bool found = false;
    for (size_t i = 0; i < kp__n_live && !found; i++)
        if (kp__live[i] == t) {
            found = true;
            if (remove) kp__live[i] = kp__live[--kp__n_live];
        }
    if (remove && !kp__n_live) { /* the last one out frees the list */
        kp__free(kp__live);
        kp__live = NULL;
        kp__cap_live = 0;
    }
    pthread_mutex_unlock(&kp__live_mu);
    return found;
}

#define KP__TASKS(t)                                                                          \
    do {                                                                                      \
        if (!(t)) return kp__error(KP_ERR_INVALID_ARG, "%s: the task set is NULL", __func__); \
        if (!kp__live_take((t), false))                                                       \
            return kp__error(KP_ERR_INVALID_ARG,                                              \
                             "%s: the task set is not live (destroyed already?)", __func__);  \
    } while (0)

/* Room for one more of `size` bytes in *arr (count n, capacity *cap). */
static bool kp__grow(void **arr, size_t n, size_t *cap, size_t size, size_t want) {
    if (n + want <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < n + want) c *= 2;
    void *p = kp__malloc(c * size);
    if (!p) return false;
    if (n && *arr) memcpy(p, *arr, n * size);
    kp__free(*arr);
    *arr = p;
    *cap = c;
    return true;
}
#define KP__GROW(t, field, want) \
    kp__grow((void **)&(t)->field, (t)->n_##field, &(t)->cap_##field, sizeof *(t)->field, (want))

/* --- create and destroy ---------------------------------------------------------- */
static void kp__tasks_free(kp_tasks_t t);

kp_status kp_tasks_create(kp_device_t dev, size_t n_streams, kp_tasks_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(dev);
    if (n_streams < 1 || n_streams > KP_TASKS_MAX_STREAMS)
        return kp__error(KP_ERR_INVALID_ARG, "n_streams is %zu (1 .. %d)", n_streams,
                         KP_TASKS_MAX_STREAMS);
    kp_tasks_t t = kp__calloc(1, sizeof *t);
    if (!t) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    t->dev = dev;
    t->prio_state = 0x9e3779b9u;
    kp_status st = kp_device_allocator(dev, KP_ALLOCATOR_DEVICE, &t->alloc);
    if (st == KP_OK) st = kp_event_create_untimed(dev, &t->start_ev);
    for (size_t i = 0; i < n_streams && st == KP_OK; i++) {
        st = kp_stream_create(dev, &t->streams[i]);
        if (st == KP_OK) t->n_streams++;
        if (st == KP_OK) st = kp_event_create_untimed(dev, &t->stream_ev[i]);
    }
    if (st == KP_OK && !kp__live_add(t)) st = kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    if (st != KP_OK) {
        kp__tasks_free(t);
        return st;
    }
    *out = t;
    return KP_OK;
}

static void kp__tasks_free(kp_tasks_t t) {
    for (size_t i = 0; i < t->n_streams; i++) {
        if (kp_stream_sync(t->streams[i]) != KP_OK) kp_clear_error();
        kp_stream_destroy(t->streams[i]);
        kp_event_destroy(t->stream_ev[i]);
    }
    kp_event_destroy(t->start_ev);
    if (t->exec && kp_device_sync(t->dev) != KP_OK) /* a launch may still use the buffers */
        kp_clear_error();
    kp_graph_exec_destroy(t->exec);
    kp_stream_destroy(t->cap_stream);
    for (size_t i = 0; i < t->n_task_ev; i++) kp_event_destroy(t->task_ev[i]);
    for (size_t i = 0; i < t->n_bufs; i++) {
        if (t->bufs[i].owned && t->bufs[i].data &&
            kp_allocator_free(t->alloc, t->bufs[i].data) != KP_OK)
            kp_clear_error();
    }
    kp__free(t->pool);
    kp__free(t->drop);
    kp__free(t->bufs);
    kp__free(t->tasks);
    kp__free(t->args);
    kp__free(t->edges);
    kp__free(t->scalars);
    kp__free(t->task_ev);
    kp__free(t->nodes);
    kp__free(t);
}

void kp_tasks_destroy(kp_tasks_t t) {
    if (t && kp__live_take(t, true)) kp__tasks_free(t); /* a second destroy does nothing */
}

/* --- buffers ------------------------------------------------------------------------ */
static kp_status kp__new_buffer(kp_tasks_t t, void *data, size_t bytes, uint32_t *id) {
    if (bytes < 1 || bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "bytes is %zu (1 .. 2^48)", bytes);
    if (t->n_bufs >= KP__MAX_TASK_BUFFERS)
        return kp__error(KP_ERR_INVALID_ARG, "the set has %u buffers already",
                         KP__MAX_TASK_BUFFERS);
    if (!KP__GROW(t, bufs, 1)) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    kp__tbuf *b = &t->bufs[t->n_bufs++];
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->data = data;
    *id = (uint32_t)t->n_bufs;
    return KP_OK;
}

kp_status kp_tasks_buffer(kp_tasks_t t, size_t bytes, uint32_t *id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(id);
    return kp__new_buffer(t, NULL, bytes, id);
}

kp_status kp_tasks_buffer_wrap(kp_tasks_t t, void *data, size_t bytes, uint32_t *id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(id && data);
    return kp__new_buffer(t, data, bytes, id);
}

static kp__tbuf *kp__buf(kp_tasks_t t, uint32_t id) {
    return id >= 1 && id <= t->n_bufs ? &t->bufs[id - 1] : NULL;
}

kp_status kp_tasks_buffer_data(kp_tasks_t t, uint32_t id, void **out) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(out);
    kp__tbuf *b = kp__buf(t, id);
    if (!b) return kp__error(KP_ERR_NOT_FOUND, "no buffer %u (the set has %zu)", id, t->n_bufs);
    *out = b->data;
    return KP_OK;
}

/* --- submit ------------------------------------------------------------------------- */
static kp_status kp__check_arg(kp_tasks_t t, const kp_task_arg *a, size_t i) {
    if (a->access == KP_TASK_SCALAR) {
        if (a->buffer)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: a SCALAR names buffer %u (a tensor is IN, OUT or "
                             "INOUT)",
                             i, a->buffer);
        if (!a->scalar || a->scalar_bytes < 1 || a->scalar_bytes > KP_TASK_MAX_SCALAR)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: a scalar needs its value and 1 to %d bytes (%zu)", i,
                             KP_TASK_MAX_SCALAR, a->scalar_bytes);
        return KP_OK;
    }
    if (a->access != KP_TASK_IN && a->access != KP_TASK_OUT && a->access != KP_TASK_INOUT)
        return kp__error(KP_ERR_INVALID_ARG, "argument %zu: unknown access %d", i, (int)a->access);
    if (a->scalar || a->scalar_bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "argument %zu: a tensor argument carries a scalar (a scalar is "
                         "KP_TASK_SCALAR)",
                         i);
    kp__tbuf *b = kp__buf(t, a->buffer);
    if (!b)
        return kp__error(KP_ERR_NOT_FOUND, "argument %zu: no buffer %u (the set has %zu)", i,
                         a->buffer, t->n_bufs);
    if (kp_desc_validate(&a->desc) != KP_OK)
        return kp__error_prefix(KP_ERR_INVALID_ARG, "argument %zu (buffer %u)", i, a->buffer);
    int64_t need = kp_desc_bytes_needed(&a->desc);
    char d[96];
    if (need < 0 || (uint64_t)need > b->bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "argument %zu: region %s at offset %lld reaches byte %lld of buffer %u, "
                         "which has %zu",
                         i, kp_desc_str(&a->desc, d, sizeof d), (long long)a->desc.offset,
                         (long long)need, a->buffer, b->bytes);
    return KP_OK;
}

/* A deferred buffer's first access must write all of it, contiguously. */
static kp_status kp__check_first(kp_tasks_t t, const kp_task_arg *args, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const kp_task_arg *a = &args[i];
        if (a->access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__buf(t, a->buffer);
        if (b->data) continue;
        bool reads = false, whole = false;
        for (size_t j = 0; j < n; j++) /* every argument of this task on the buffer */
            if (args[j].access != KP_TASK_SCALAR && args[j].buffer == a->buffer) {
                reads |= args[j].access != KP_TASK_OUT;
                whole |= args[j].access == KP_TASK_OUT && kp_desc_is_contiguous(&args[j].desc) &&
                         kp_desc_bytes_needed(&args[j].desc) == (int64_t)b->bytes &&
                         args[j].desc.offset == 0;
            }
        if (reads)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: buffer %u is read before any task wrote it", i,
                             a->buffer);
        if (!whole) {
            char d[96];
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: buffer %u is allocated by its first writer, whose "
                             "region must cover its %zu bytes contiguously from 0 (%s at offset "
                             "%lld does not)",
                             i, a->buffer, b->bytes, kp_desc_str(&a->desc, d, sizeof d),
                             (long long)a->desc.offset);
        }
    }
    return KP_OK;
}

/* Allocates the deferred buffers this task writes first; all or none. */
static kp_status kp__allocate_first(kp_tasks_t t, const kp_task_arg *args, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (args[i].access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__buf(t, args[i].buffer);
        if (b->data) continue;
        kp_status st = kp_allocator_alloc(t->alloc, b->bytes, NULL, &b->data);
        if (st != KP_OK) {
            for (size_t j = 0; j < i; j++) { /* undo this task's allocations */
                kp__tbuf *o = args[j].access == KP_TASK_SCALAR ? NULL : kp__buf(t, args[j].buffer);
                if (o && o->owned && o->version == 0 && o->data) {
                    if (kp_allocator_free(t->alloc, o->data) != KP_OK) kp_clear_error();
                    o->data = NULL;
                    o->owned = false;
                }
            }
            return kp__error_prefix(st, "buffer %u (first written by argument %zu)", args[i].buffer,
                                    i);
        }
        b->owned = true;
    }
    return KP_OK;
}

/* --- the interval treap ------------------------------------------------------------- */
#define KP__N(i) (t->pool[i])

static int64_t kp__max_hi(const kp_tasks_t t, uint32_t i) {
    return i ? KP__N(i).max_hi : INT64_MIN;
}

static void kp__fix(kp_tasks_t t, uint32_t i) {
    int64_t m = KP__N(i).hi, l = kp__max_hi(t, KP__N(i).left), r = kp__max_hi(t, KP__N(i).right);
    KP__N(i).max_hi = m > l ? (m > r ? m : r) : (l > r ? l : r);
}

/* Key order: by lo, then by pool index. */
static bool kp__before(const kp_tasks_t t, uint32_t i, int64_t lo, uint32_t j) {
    return KP__N(i).lo < lo || (KP__N(i).lo == lo && i < j);
}

/* Splits subtree n into the keys before (lo, j) and the rest. */
static void kp__split(kp_tasks_t t, uint32_t n, int64_t lo, uint32_t j, uint32_t *l, uint32_t *r) {
    if (!n) {
        *l = *r = 0;
        return;
    }
    if (kp__before(t, n, lo, j)) {
        kp__split(t, KP__N(n).right, lo, j, &KP__N(n).right, r);
        *l = n;
    } else {
        kp__split(t, KP__N(n).left, lo, j, l, &KP__N(n).left);
        *r = n;
    }
    kp__fix(t, n);
}

static uint32_t kp__merge(kp_tasks_t t, uint32_t l, uint32_t r) {
    if (!l || !r) return l ? l : r;
    if (KP__N(l).prio > KP__N(r).prio) {
        KP__N(l).right = kp__merge(t, KP__N(l).right, r);
        kp__fix(t, l);
        return l;
    }
    KP__N(r).left = kp__merge(t, l, KP__N(r).left);
    kp__fix(t, r);
    return r;
}

static void kp__treap_insert(kp_tasks_t t, kp__tbuf *b, uint32_t n) {
    uint32_t l, r;
    kp__split(t, b->root, KP__N(n).lo, n, &l, &r);
    b->root = kp__merge(t, kp__merge(t, l, n), r);
    b->n_acc++;
}

static void kp__treap_erase(kp_tasks_t t, kp__tbuf *b, uint32_t n) {
    uint32_t l, m, r;
    kp__split(t, b->root, KP__N(n).lo, n, &l, &m);
    kp__split(t, m, KP__N(n).lo, n + 1, &m, &r); /* m is n alone */
    b->root = kp__merge(t, l, r);
    b->n_acc--;
    KP__N(n).left = t->pool_free;
    t->pool_free = n;
}

/* A free pool node; the pool has room (reserved by the caller). */
static uint32_t kp__node_new(kp_tasks_t t) {
    uint32_t n = t->pool_free;
    if (n)
        t->pool_free = KP__N(n).left;
    else
        n = (uint32_t)t->n_pool++;
    t->prio_state ^= t->prio_state << 13; /* xorshift32 */
    t->prio_state ^= t->prio_state >> 17;
    t->prio_state ^= t->prio_state << 5;
    memset(&KP__N(n), 0, sizeof KP__N(n));
    KP__N(n).prio = t->prio_state;
    return n;
}

/* Calls visit(ctx, node) for every access of subtree n whose extent meets
 * [lo, hi); false from visit stops the walk. */
static bool kp__treap_visit(kp_tasks_t t, uint32_t n, int64_t lo, int64_t hi,
                            bool (*visit)(kp_tasks_t, uint32_t, void *), void *ctx) {
    while (n && KP__N(n).max_hi > lo) {
        if (!kp__treap_visit(t, KP__N(n).left, lo, hi, visit, ctx)) return false;
        if (KP__N(n).lo >= hi) return true; /* it and its right subtree start too late */
        if (KP__N(n).hi > lo && !visit(t, n, ctx)) return false;
        n = KP__N(n).right;
    }
    return true;
}

static bool kp__is_pred(const kp_tasks_t t, uint64_t p, uint64_t of) {
    const kp__task *k = &t->tasks[of];
    for (size_t i = 0; i < k->n_preds; i++)
        if (t->edges[k->first_pred + i].from == p) return true;
    return false;
}

/* Do two regions name the same bytes the same way? */
static bool kp__same_region(const kp_tensor_desc *a, const kp_tensor_desc *b) {
    if (kp_dtype_size(a->dtype) != kp_dtype_size(b->dtype) || a->ndim != b->ndim ||
        a->offset != b->offset)
        return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k] || a->strides[k] != b->strides[k]) return false;
    return true;
}

/* The accesses of other tasks a write covers, into out[]: inside its
 * extent when it is contiguous, else on exactly its region. */
typedef struct kp__cover_ctx {
    int64_t lo, hi;
    uint64_t id;
    const kp_tensor_desc *desc;
    bool contiguous;
    uint32_t *out;
    size_t n;
} kp__cover_ctx;

static void kp__cover_test(kp_tasks_t t, uint32_t n, kp__cover_ctx *c) {
    const kp__access *e = &KP__N(n);
    if (e->task != c->id &&
        (c->contiguous ? e->lo >= c->lo && e->hi <= c->hi
                       : e->lo == c->lo && kp__same_region(&t->args[e->arg].v.desc, c->desc)))
        c->out[c->n++] = n;
}

static bool kp__cover_visit(kp_tasks_t t, uint32_t n, void *ctx) {
    kp__cover_test(t, n, ctx);
    return true;
}

/* The hazards of one new region: candidate predecessors, one per task. */
typedef struct kp__hazard_ctx {
    const kp_task_arg *a;
    uint32_t buffer;
    uint64_t id;
    bool w, r;
    kp_task_edge *cand;
    size_t n_cand, cap;
    bool overflow;
    kp__cover_ctx *cover; /* when set, the same walk finds what the write covers */
} kp__hazard_ctx;

static bool kp__hazard_visit(kp_tasks_t t, uint32_t n, void *ctx) {
    kp__hazard_ctx *h = ctx;
    const kp__access *e = &KP__N(n);
    if (h->cover) kp__cover_test(t, n, h->cover);
    if (e->task == h->id || (!e->write && !h->w)) return true; /* two reads never conflict */
    t->stats.overlap_tests++;
    if (kp_desc_overlap(&t->args[e->arg].v.desc, &h->a->desc) == KP_OVERLAP_NONE) return true;
    kp_hazard hz = e->write && h->r ? KP_HAZARD_RAW : e->write ? KP_HAZARD_WAW : KP_HAZARD_WAR;
    size_t c = 0;
    while (c < h->n_cand && h->cand[c].from != e->task) c++;
    if (c < h->n_cand) {
        if (hz == KP_HAZARD_RAW) h->cand[c].hazard = hz, h->cand[c].buffer = h->buffer;
    } else if (h->n_cand == h->cap) {
        h->overflow = true;
        return false;
    } else {
        h->cand[h->n_cand++] = (kp_task_edge){e->task, h->id, hz, h->buffer};
    }
    return true;
}

kp_status kp_tasks_submit(kp_tasks_t t, const kp_task_kernel *kernel, const kp_task_arg *args,
                          size_t n_args, uint64_t *task_id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(kernel);
    if (!kernel->fn && !kernel->launch)
        return kp__error(KP_ERR_INVALID_ARG, "kernel %s has neither fn nor launch",
                         kernel->name ? kernel->name : "(unnamed)");
    if (n_args > KP_TASK_MAX_ARGS)
        return kp__error(KP_ERR_INVALID_ARG, "%zu arguments (at most %d)", n_args,
                         KP_TASK_MAX_ARGS);
    if (n_args && !args) return kp__error(KP_ERR_INVALID_ARG, "args is NULL");
    size_t scalar_bytes = 0;
    for (size_t i = 0; i < n_args; i++) {
        KP_CHECK(kp__check_arg(t, &args[i], i));
        scalar_bytes += args[i].access == KP_TASK_SCALAR ? args[i].scalar_bytes : 0;
    }
    KP_CHECK(kp__check_first(t, args, n_args));
    /* room for everything first: past this point nothing fails */
    kp_task_edge cand[1024];
    size_t n_cand = 0;
    size_t acc_room = 0;
    for (size_t i = 0; i < n_args; i++) acc_room += args[i].access != KP_TASK_SCALAR;
    bool room = KP__GROW(t, tasks, 1) && KP__GROW(t, args, n_args) &&
                KP__GROW(t, scalars, scalar_bytes + 16 * n_args);
    if (t->n_args + n_args > UINT32_MAX || t->n_pool + acc_room + 1 > UINT32_MAX)
        return kp__error(KP_ERR_UNSUPPORTED, "the set holds 2^32 arguments; run it first");
    if (room && !t->n_pool) t->n_pool = 1; /* node 0 means none */
    room = room && KP__GROW(t, pool, acc_room);
    /* the accesses the writes may drop: each write's list, then room for one
     * more (a write whose buffer the task names twice looks again later);
     * never empty, so drop + n is always a pointer into it */
    bool alone[KP_TASK_MAX_ARGS];
    size_t drop_room = 0, drop_max = 0;
    for (size_t i = 0; i < n_args; i++) {
        alone[i] = args[i].access != KP_TASK_SCALAR && args[i].access != KP_TASK_IN;
        for (size_t j = 0; j < n_args && alone[i]; j++)
            alone[i] =
                j == i || args[j].access == KP_TASK_SCALAR || args[j].buffer != args[i].buffer;
        if (args[i].access != KP_TASK_SCALAR && args[i].access != KP_TASK_IN) {
            size_t na = kp__buf(t, args[i].buffer)->n_acc;
            drop_room += na;
            drop_max = na > drop_max ? na : drop_max;
        }
    }
    t->n_drop = 0;
    room = room && KP__GROW(t, drop, drop_room + drop_max + 1);
    if (!room) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for a task");
    uint64_t id = t->n_tasks;
    /* hazards against the live regions; what a write alone on its buffer
     * covers, in the same walk */
    bool overflow = false;
    kp__cover_ctx cover[KP_TASK_MAX_ARGS];
    for (size_t i = 0; i < n_args; i++) {
        const kp_task_arg *a = &args[i];
        if (a->access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__buf(t, a->buffer);
        int64_t lo, hi;
        kp_desc_byte_extent(&a->desc, &lo, &hi);
        if (lo == hi) continue; /* an empty region touches nothing */
        kp__hazard_ctx h = {a,
                            a->buffer,
                            id,
                            a->access != KP_TASK_IN,
                            a->access != KP_TASK_OUT,
                            cand,
                            n_cand,
                            sizeof cand / sizeof cand[0],
                            false,
                            NULL};
        if (alone[i]) {
            cover[i] = (kp__cover_ctx){
                lo, hi, id, &a->desc, kp_desc_is_contiguous(&a->desc), t->drop + t->n_drop, 0};
            h.cover = &cover[i];
        }
        kp__treap_visit(t, b->root, lo, hi, kp__hazard_visit, &h);
        if (alone[i]) t->n_drop += cover[i].n;
        n_cand = h.n_cand;
        overflow |= h.overflow;
    }
    if (overflow)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "task %llu depends on more than %zu earlier tasks directly; run the set "
                         "before submitting more",
                         (unsigned long long)id, sizeof cand / sizeof cand[0]);
    if (!KP__GROW(t, edges, n_cand))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for edges");
    KP_CHECK(kp__allocate_first(t, args, n_args));
    /* keep the predecessors no other predecessor implies */
    kp__task *task = &t->tasks[t->n_tasks++];
    *task = (kp__task){*kernel, t->n_args, n_args, t->n_edges, 0, -1, false};
    t->stats.edges_found += n_cand;
    for (size_t c = 0; c < n_cand; c++) {
        bool implied = false;
        for (size_t d = 0; d < n_cand && !implied; d++)
            implied =
                d != c && cand[d].from > cand[c].from && kp__is_pred(t, cand[c].from, cand[d].from);
        if (implied) continue;
        t->edges[t->n_edges++] = cand[c];
        task->n_preds++;
    }
    t->stats.edges += task->n_preds;
    /* the arguments, and the index updated: writes cover what they contain */
    for (size_t i = 0; i < n_args; i++) {
        const kp_task_arg *a = &args[i];
        kp__targ *g = &t->args[t->n_args++];
        memset(g, 0, sizeof *g);
        g->v.access = a->access;
        if (a->access == KP_TASK_SCALAR) {
            g->scalar_off = t->n_scalars;
            memcpy(t->scalars + t->n_scalars, a->scalar, a->scalar_bytes);
            t->n_scalars += (a->scalar_bytes + 15) & ~(size_t)15;
            g->v.scalar_bytes = a->scalar_bytes;
            continue;
        }
        kp__tbuf *b = kp__buf(t, a->buffer);
        g->buffer = a->buffer;
        g->v.desc = a->desc;
        bool w = a->access != KP_TASK_IN;
        if (w) b->version++;
        g->version = b->version;
        int64_t lo, hi;
        kp_desc_byte_extent(&a->desc, &lo, &hi);
        if (lo == hi) continue;
        uint32_t nd = 0; /* a covered node of the same extent is reused in place */
        if (w) {         /* drop what this write covers */
            kp__cover_ctx c = cover[i];
            if (!alone[i]) { /* the task wrote this buffer already: look again */
                c = (kp__cover_ctx){
                    lo, hi, id, &a->desc, kp_desc_is_contiguous(&a->desc), t->drop + t->n_drop, 0};
                kp__treap_visit(t, b->root, lo, hi, kp__cover_visit, &c);
            }
            for (size_t k = 0; k < c.n; k++)
                if (!nd && KP__N(c.out[k]).lo == lo && KP__N(c.out[k]).hi == hi)
                    nd = c.out[k]; /* same key and end: the tree stays as it is */
                else
                    kp__treap_erase(t, b, c.out[k]);
        }
        bool fresh = !nd;
        if (fresh) {
            nd = kp__node_new(t);
            KP__N(nd).lo = lo;
            KP__N(nd).hi = KP__N(nd).max_hi = hi;
        }
        KP__N(nd).task = id;
        KP__N(nd).arg = (uint32_t)(t->n_args - 1);
        KP__N(nd).write = w;
        KP__N(nd).read = a->access != KP_TASK_OUT;
        if (fresh) kp__treap_insert(t, b, nd);
    }
    t->stats.tasks = t->n_tasks;
    if (task_id) *task_id = id;
    return KP_OK;
}

/* --- run ----------------------------------------------------------------------------- */
static void kp__reset_set(kp_tasks_t t) {
    t->n_tasks = t->n_args = t->n_edges = t->n_scalars = 0;
    for (size_t i = 0; i < t->n_bufs; i++) {
        t->bufs[i].n_acc = 0;
        t->bufs[i].root = 0;
    }
    t->n_pool = t->pool_free = 0;
    kp_tasks_stats keep = t->stats;
    memset(&t->stats, 0, sizeof t->stats);
    t->stats.runs = keep.runs;
    t->stats.graph_builds = keep.graph_builds;
    t->stats.graph_updates = keep.graph_updates;
}

static kp_status kp__run(kp_tasks_t t, kp_stream_t s);

kp_status kp_tasks_run(kp_tasks_t t, kp_stream_t s) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(s);
    kp_status st = kp__run(t, s);
    kp__reset_set(t); /* run or failed, the set is spent */
    return st;
}

/* Task k's arguments as its work sees them. */
static void kp__views(const kp_tasks_t t, const kp__task *k, kp_task_view *views) {
    for (size_t a = 0; a < k->n_args; a++) {
        const kp__targ *g = &t->args[k->first_arg + a];
        views[a] = g->v;
        if (g->v.access == KP_TASK_SCALAR)
            views[a].scalar = t->scalars + g->scalar_off;
        else
            views[a].data = kp__buf(t, g->buffer)->data;
    }
}

static const char *kp__name(const kp__task *k) { return k->k.name ? k->k.name : "unnamed"; }

/* The launch of a `launch` task, its parameters in `params`. */
static kp_status kp__task_launch(const kp__task *k, const kp_task_view *views, kp_launch *l,
                                 void *params) {
    memset(l, 0, sizeof *l);
    kp_status st = k->k.launch(k->k.user, views, k->n_args, l, params);
    if (st == KP_OK && !l->kernel)
        st = kp__error(KP_ERR_INVALID_ARG, "its launch function gave no kernel");
    return st;
}

/* Enqueues task i's work on `s`. */
static kp_status kp__task_enqueue(kp_tasks_t t, size_t i, kp_stream_t s) {
    const kp__task *k = &t->tasks[i];
    kp_task_view views[KP_TASK_MAX_ARGS];
    kp__views(t, k, views);
    kp_status st;
    if (k->k.launch) {
        _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
        kp_launch l;
        st = kp__task_launch(k, views, &l, params);
        if (st == KP_OK) st = kp_launch_kernel(s, &l);
    } else {
        st = k->k.fn(k->k.user, s, views, k->n_args);
    }
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "task %zu (%s)", i, kp__name(k));
}

static kp_status kp__run(kp_tasks_t t, kp_stream_t s) {
    while (t->n_task_ev < t->n_tasks) { /* one event per task slot, kept for later runs */
        if (!KP__GROW(t, task_ev, 1))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for events");
        KP_CHECK(kp_event_create_untimed(t->dev, &t->task_ev[t->n_task_ev]));
        t->n_task_ev++;
    }
    /* streams first: then only tasks that another stream waits for record an event */
    int64_t last[KP_TASKS_MAX_STREAMS]; /* the task last put on each stream; -1: none */
    bool used[KP_TASKS_MAX_STREAMS] = {false};
    for (size_t i = 0; i < t->n_streams; i++) last[i] = -1;
    size_t next = 0;
    for (size_t i = 0; i < t->n_tasks; i++) {
        kp__task *k = &t->tasks[i];
        int pick = -1;
        for (size_t p = k->n_preds; p-- > 0 && pick < 0;) {
            int ps = t->tasks[t->edges[k->first_pred + p].from].stream;
            if (last[ps] == (int64_t)t->edges[k->first_pred + p].from) pick = ps;
        }
        if (pick < 0) pick = (int)(next++ % t->n_streams);
        k->stream = pick;
        k->signals = false;
        last[pick] = (int64_t)i;
        for (size_t p = 0; p < k->n_preds; p++) {
            kp__task *from = &t->tasks[t->edges[k->first_pred + p].from];
            if (from->stream != pick) from->signals = true;
        }
    }
    /* waited[a][b]: the latest task of stream b that stream a waited for */
    int64_t waited[KP_TASKS_MAX_STREAMS][KP_TASKS_MAX_STREAMS];
    for (size_t a = 0; a < t->n_streams; a++)
        for (size_t b = 0; b < t->n_streams; b++) waited[a][b] = -1;
    if (t->n_tasks) KP_CHECK(kp_event_record(t->start_ev, s));
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        int pick = k->stream;
        kp_stream_t st = t->streams[pick];
        if (!used[pick]) {
            KP_CHECK(kp_stream_wait_event(st, t->start_ev));
            used[pick] = true;
        }
        int64_t want[KP_TASKS_MAX_STREAMS]; /* per other stream, its latest predecessor */
        for (size_t b = 0; b < t->n_streams; b++) want[b] = -1;
        for (size_t p = 0; p < k->n_preds; p++) {
            uint64_t from = t->edges[k->first_pred + p].from;
            int ps = t->tasks[from].stream;
            if (ps != pick && (int64_t)from > want[ps]) want[ps] = (int64_t)from;
        }
        for (size_t b = 0; b < t->n_streams; b++) /* a stream's events complete in order */
            if (want[b] > waited[pick][b]) {
                KP_CHECK(kp_stream_wait_event(st, t->task_ev[want[b]]));
                waited[pick][b] = want[b];
            }
        KP_CHECK(kp__task_enqueue(t, i, st));
        if (k->signals) KP_CHECK(kp_event_record(t->task_ev[i], st));
    }
    for (size_t i = 0; i < t->n_streams; i++)
        if (used[i]) {
            KP_CHECK(kp_event_record(t->stream_ev[i], t->streams[i]));
            KP_CHECK(kp_stream_wait_event(s, t->stream_ev[i]));
        }
    t->stats.runs++;
    return KP_OK;
}

/* --- the graph form --------------------------------------------------------------------- */
/* Task i as a node of g after `deps`: a kernel node for a `launch` task,
 * else a child graph captured from what kp__task_enqueue puts on a stream. */
static kp_status kp__task_node(kp_tasks_t t, size_t i, kp_graph_t g, const kp_graph_node_t *deps,
                               size_t n_deps, kp_graph_node_t *node) {
    const kp__task *k = &t->tasks[i];
    if (k->k.launch) {
        kp_task_view views[KP_TASK_MAX_ARGS];
        kp__views(t, k, views);
        _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
        kp_launch l;
        kp_status st = kp__task_launch(k, views, &l, params);
        if (st == KP_OK) st = kp_graph_add_kernel(g, deps, n_deps, &l, node);
        return st == KP_OK ? KP_OK : kp__error_prefix(st, "task %zu (%s)", i, kp__name(k));
    }
    kp_graph_t child = NULL;
    kp_status st = kp_stream_begin_capture(t->cap_stream);
    if (st == KP_OK) {
        st = kp__task_enqueue(t, i, t->cap_stream); /* names the task when it fails */
        kp_status end = kp_stream_end_capture(t->cap_stream, &child); /* always ended */
        if (st == KP_OK && end != KP_OK)
            st = kp__error_prefix(end, "task %zu (%s)", i, kp__name(k));
    } else {
        st = kp__error_prefix(st, "task %zu (%s)", i, kp__name(k));
    }
    if (st == KP_OK) { /* a task that enqueued nothing still orders its successors */
        st = kp_graph_node_count(child) ? kp_graph_add_child(g, deps, n_deps, child, node)
                                        : kp_graph_add_empty(g, deps, n_deps, node);
        if (st != KP_OK) st = kp__error_prefix(st, "task %zu (%s)", i, kp__name(k));
    }
    kp_graph_destroy(child);
    return st;
}

static kp_status kp__build(kp_tasks_t t, kp_graph_t g) {
    t->n_nodes = 0;
    if (!KP__GROW(t, nodes, t->n_tasks))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for graph nodes");
    if (!t->cap_stream) KP_CHECK(kp_stream_create(t->dev, &t->cap_stream));
    kp_graph_node_t deps[1024]; /* a task keeps at most as many predecessors as submit allows */
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        for (size_t p = 0; p < k->n_preds; p++)
            deps[p] = t->nodes[t->edges[k->first_pred + p].from];
        KP_CHECK(kp__task_node(t, i, g, deps, k->n_preds, &t->nodes[i]));
        t->n_nodes++;
    }
    return KP_OK;
}

static kp_status kp__instantiate(kp_tasks_t t) {
    kp_graph_t g;
    KP_CHECK(kp_graph_create(t->dev, &g));
    kp_status st = kp__build(t, g);
    bool build = st == KP_OK && !t->exec;
    if (st == KP_OK && t->exec) {
        st = kp_graph_exec_update(t->exec, g);
        if (st == KP_OK) t->stats.graph_updates++;
        if (st == KP_ERR_MISMATCH) { /* another shape: a new graph */
            kp_clear_error();
            st = KP_OK;
            build = true;
        }
    }
    if (build) {
        kp_graph_exec_t ge;
        st = kp_graph_instantiate(g, &ge);
        if (st == KP_OK) {
            if (t->exec && kp_device_sync(t->dev) != KP_OK) kp_clear_error(); /* may run still */
            kp_graph_exec_destroy(t->exec);
            t->exec = ge;
            t->stats.graph_builds++;
        }
    }
    kp_graph_destroy(g);
    return st;
}

kp_status kp_tasks_instantiate(kp_tasks_t t) {
    KP_API_ENTRY();
    KP__TASKS(t);
    kp_status st = kp__instantiate(t);
    kp__reset_set(t);
    return st;
}

kp_status kp_tasks_launch(kp_tasks_t t, kp_stream_t s) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(s);
    if (!t->exec)
        return kp__error(KP_ERR_STATE, "no graph to launch: call kp_tasks_instantiate first");
    return kp_graph_exec_launch(t->exec, s);
}

/* --- inspection ------------------------------------------------------------------------ */
kp_status kp_tasks_edges(kp_tasks_t t, kp_task_edge *out, size_t cap, size_t *n) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(n && (out || !cap));
    *n = t->n_edges;
    size_t k = cap < t->n_edges ? cap : t->n_edges;
    if (k) memcpy(out, t->edges, k * sizeof *out);
    return KP_OK;
}

kp_status kp_tasks_stats_get(kp_tasks_t t, kp_tasks_stats *out) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(out);
    *out = t->stats;
    for (size_t i = 0; i < t->n_bufs; i++) out->regions_live += t->bufs[i].n_acc;
    return KP_OK;
}

static const char *kp__hazard_str(kp_hazard h) {
    return h == KP_HAZARD_RAW ? "RAW" : h == KP_HAZARD_WAR ? "WAR" : "WAW";
}

kp_status kp_tasks_write_dot(kp_tasks_t t, const char *path) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(path);
    FILE *f = fopen(path, "w");
    if (!f) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "digraph tasks {\n  node [shape=box, fontname=monospace];\n");
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        fprintf(f, "  t%zu [label=\"%zu: ", i, i);
        for (const char *c = k->k.name ? k->k.name : "task"; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) fputc(*c, f);
        for (size_t a = 0; a < k->n_args; a++) {
            const kp__targ *g = &t->args[k->first_arg + a];
            char d[96];
            static const char *const acc[] = {"", "in", "out", "inout", "scalar"};
            if (g->v.access == KP_TASK_SCALAR)
                fprintf(f, "\\n%s %zu B", acc[g->v.access], g->v.scalar_bytes);
            else
                fprintf(f, "\\n%s b%u v%llu %s @%lld", acc[g->v.access], g->buffer,
                        (unsigned long long)g->version, kp_desc_str(&g->v.desc, d, sizeof d),
                        (long long)g->v.desc.offset);
        }
        fprintf(f, "\"];\n");
    }
    for (size_t e = 0; e < t->n_edges; e++)
        fprintf(f, "  t%llu -> t%llu [label=\"%s b%u\"];\n", (unsigned long long)t->edges[e].from,
                (unsigned long long)t->edges[e].to, kp__hazard_str(t->edges[e].hazard),
                t->edges[e].buffer);
    fprintf(f, "}\n");
    if (fclose(f) != 0) return kp__error(KP_ERR_IO, "%s: writing failed", path);
    return KP_OK;
}
