/* The task set's own: its accesses, buffers, tasks and arguments, and the
 * functions its files share (tasks.c, index.c, hazards.c, schedule.c,
 * graph.c; they call each other one way: graph -> schedule -> tasks,
 * hazards -> index -> tasks). */
#ifndef KPIPE_TASKS_IMPL_H
#define KPIPE_TASKS_IMPL_H

#include "kpipe/memory.h"
#include "kpipe/tasks.h"
#include "../core/core-impl.h"

#define KP__MAX_TASK_BUFFERS (1u << 20)

/* A live access, in the set's pool; its buffer's index names it by its
 * place there, and its leaf keeps what the hazard walk reads (the task and
 * the flags below), so that walk reads no pool entry for dense regions. */
typedef struct kp__access {
    int64_t lo, hi;     /* byte extent */
    uint32_t arg;       /* a strided access's argument in args[]: its descriptor */
    uint32_t next_free; /* the pool's free list */
} kp__access;

#define KP__ACC_WRITE 1u /* the access writes */
#define KP__ACC_DENSE 2u /* contiguous: its extent is its region, byte for byte */

/* A node of a buffer's region index (index.c), on cache lines of its own,
 * its count first, so a walk's first line holds it and the first keys:
 * in a leaf, accesses (lo, hi, the access, its task and flags); in an inner
 * node, children (a lower bound of their keys, the largest hi under them,
 * the child). Keys are (lo, id), id the access number, so equal starts stay
 * apart. Task numbers fit 32 bits: a set holds fewer than 2^32 tasks. */
#define KP__BT_FAN 16
typedef struct kp__bnode {
    uint32_t n;
    bool leaf;
    uint8_t flags[KP__BT_FAN]; /* leaves: KP__ACC_* */
    int64_t lo[KP__BT_FAN];
    int64_t hi[KP__BT_FAN];
    uint32_t id[KP__BT_FAN];
    union {
        uint32_t ref[KP__BT_FAN];  /* inner: the child node; [0]: the free list */
        uint32_t task[KP__BT_FAN]; /* leaves: the access's task */
    };
} __attribute__((aligned(64))) kp__bnode;

typedef struct kp__tbuf {
    size_t bytes;
    void *data;
    bool owned; /* allocated here, by its first writer */
    uint64_t version;
    uint32_t root;  /* of the index of live accesses; 0: none */
    uint32_t depth; /* its levels */
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
    kp__guard guard; /* one thread at a time: claimed by every call (KP__TASKS) */
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
    kp__access *pool; /* the live accesses of every buffer; [0] unused */
    size_t n_pool, cap_pool;
    uint32_t pool_free; /* a list through .next_free */
    kp__bnode **bt_slabs; /* the index's nodes, KP__BT_SLAB a slab */
    size_t n_bt_slabs, cap_bt_slabs;
    uint32_t n_bt, bt_free; /* nodes handed out (0 is none); a list through ref[0] */
    uint32_t bt_depth;      /* the deepest index since the set last ran */
    uint32_t *drop;     /* scratch: the accesses a write covers */
    size_t n_drop, cap_drop;
    kp_graph_node_t *nodes; /* the graph form: one per task */
    size_t n_nodes, cap_nodes;
    kp_stream_t cap_stream; /* the graph form captures task functions on it */
    kp_graph_exec_t exec;
    kp_tasks_stats stats;
};

/* Opens every public call on a set: a live handle, claimed for the call. */
#define KP__TASKS(t)                                                                          \
    do {                                                                                      \
        if (!(t)) return kp__error(KP_ERR_INVALID_ARG, "%s: the task set is NULL", __func__); \
        if (!kp__tasks_live((t), false))                                                      \
            return kp__error(KP_ERR_INVALID_ARG,                                              \
                             "%s: the task set is not live (destroyed already?)", __func__);  \
    } while (0);                                                                              \
    KP_GUARD(&(t)->guard, "task set")

#define KP__GROW(t, field, want)                                                                \
    kp__tasks_grow((void **)&(t)->field, (t)->n_##field, &(t)->cap_##field, sizeof *(t)->field, \
                   (want))


#define KP__N(i) (t->pool[i])

/* Whether t is a live set (calls on a destroyed one are refused, not
 * undefined); `remove` takes it off the list. */
bool kp__tasks_live(kp_tasks_t t, bool remove);
/* Room for `want` more of `size` bytes in *arr (count n, capacity *cap). */
bool kp__tasks_grow(void **arr, size_t n, size_t *cap, size_t size, size_t want);

/* --- the set, its buffers and arguments (tasks.c) -------------------------- */
kp__tbuf *kp__tasks_buf(kp_tasks_t t, uint32_t id);
kp_status kp__tasks_check_arg(kp_tasks_t t, const kp_task_arg *a, size_t i);
/* A deferred buffer's first access must write all of it, contiguously. */
kp_status kp__tasks_check_first(kp_tasks_t t, const kp_task_arg *args, size_t n);
/* Allocates the deferred buffers this task writes first; all or none. */
kp_status kp__tasks_allocate_first(kp_tasks_t t, const kp_task_arg *args, size_t n);

/* --- the region index (index.c) -------------------------------------------- */
/* Room for `inserts` insertions, so that they cannot fail. */
kp_status kp__tasks_index_reserve(kp_tasks_t t, size_t inserts);
/* Adds access a (its lo and hi set) of task `task` to b's index; erase
 * takes it out and frees it. */
void kp__tasks_index_insert(kp_tasks_t t, kp__tbuf *b, uint32_t a, uint32_t task, unsigned flags);
void kp__tasks_index_erase(kp_tasks_t t, kp__tbuf *b, uint32_t a);
/* The slabs back to the allocator (the set's end). */
void kp__tasks_index_free(kp_tasks_t t);
/* A free access; the pool has room (reserved by the caller). */
uint32_t kp__tasks_node_new(kp_tasks_t t);
/* Calls visit(t, leaf, i, ctx) for every access of b whose extent meets
 * [lo, hi) (entry i of that leaf), in key order; false from visit stops
 * the walk. Until the next insert or erase in b, the entry stays there:
 * its task and flags (not its key) may be changed in place. */
typedef bool (*kp__index_visit_fn)(kp_tasks_t t, kp__bnode *leaf, unsigned i, void *ctx);
bool kp__tasks_index_visit(kp_tasks_t t, const kp__tbuf *b, int64_t lo, int64_t hi,
                           kp__index_visit_fn visit, void *ctx);

/* --- streams (schedule.c) -------------------------------------------------- */
void kp__tasks_reset_set(kp_tasks_t t);
/* Task k's arguments as its work sees them. */
void kp__tasks_views(const kp_tasks_t t, const kp__task *k, kp_task_view *views);
const char *kp__tasks_name(const kp__task *k);
/* The launch of a `launch` task, its parameters in `params`. */
kp_status kp__tasks_launch_of(const kp__task *k, const kp_task_view *views, kp_launch *l,
                              void *params);
/* Enqueues task i's work on `s`. */
kp_status kp__tasks_enqueue(kp_tasks_t t, size_t i, kp_stream_t s);

#endif
