/* cpu streams: each stream is a worker thread draining a bounded ring of
 * operations in submission order, so host code sees the same asynchrony as on
 * a GPU (a missing synchronization shows up here too). Events are sequence
 * counters; capture records operations into a graph instead of queueing them. */
#include <string.h>
#include <time.h>

#include "cpu-impl.h"

#define KP__CPU_RING 256 /* ops in flight per stream; submitters wait past this */

typedef enum kp__cpu_op_kind {
    KP__OP_WORK,
    KP__OP_RECORD,
    KP__OP_WAIT,
    KP__OP_GRAPH
} kp__cpu_op_kind;

typedef struct kp__cpu_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded; /* records issued */
    uint64_t done;     /* highest record completed */
    struct timespec t_done;
    atomic_int refs; /* the handle plus queued ops that name it */
} kp__cpu_event;

/* A stream operation: work (as a graph node holds it), or an event or
 * graph launch, which only streams have. */
typedef struct kp__cpu_op {
    kp__cpu_op_kind kind;
    union {
        kp__cpu_work work;
        struct {
            kp__cpu_event *ev;
            uint64_t seq;
        } ev;
        kp__cpu_exec *exec;
    } u;
} kp__cpu_op;

struct kp__cpu_stream {
    kp__cpu_device *dev;
    kp__cpu_stream *next; /* device list, under dev->mu */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, progress;
    uint64_t head, tail;      /* ops submitted, ops completed (under mu) */
    _Atomic uint64_t pending; /* head - tail, for a query without the lock */
    bool stop;
    /* capture state: touched only by the capturing thread */
    kp__cpu_graph *cap;
    kp__cpu_node *cap_last;
    kp_status cap_error;
    kp__cpu_op ring[KP__CPU_RING];
};

/* --- events -------------------------------------------------------------------- */
static void kp__cpu_event_unref(kp__cpu_event *e) {
    if (atomic_fetch_sub(&e->refs, 1) != 1) return;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    kp__free(e);
}

static void kp__cpu_event_signal(kp__cpu_event *e, uint64_t seq) {
    pthread_mutex_lock(&e->mu);
    if (seq > e->done) {
        e->done = seq;
        clock_gettime(CLOCK_MONOTONIC, &e->t_done);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

static void kp__cpu_event_wait_seq(kp__cpu_event *e, uint64_t seq) {
    pthread_mutex_lock(&e->mu);
    while (e->done < seq) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

/* --- the worker ------------------------------------------------------------------- */
static void kp__cpu_op_run(kp__cpu_device *dev, kp__cpu_op *op) {
    switch (op->kind) {
    case KP__OP_WORK: kp__cpu_work_run(dev, &op->u.work); break;
    case KP__OP_RECORD:
        kp__cpu_event_signal(op->u.ev.ev, op->u.ev.seq);
        kp__cpu_event_unref(op->u.ev.ev);
        break;
    case KP__OP_WAIT:
        kp__cpu_event_wait_seq(op->u.ev.ev, op->u.ev.seq);
        kp__cpu_event_unref(op->u.ev.ev);
        break;
    case KP__OP_GRAPH:
        kp__cpu_exec_run(dev, op->u.exec);
        kp__cpu_exec_finished(op->u.exec);
        break;
    }
}

static void *kp__cpu_worker(void *arg) {
    kp__cpu_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (s->tail == s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (s->tail == s->head) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        /* The slot stays ours until tail advances: submitters never reuse it. */
        kp__cpu_op *op = &s->ring[s->tail % KP__CPU_RING];
        pthread_mutex_unlock(&s->mu);
        kp__cpu_op_run(s->dev, op);
        pthread_mutex_lock(&s->mu);
        s->tail++;
        atomic_store_explicit(&s->pending, s->head - s->tail, memory_order_release);
        pthread_cond_broadcast(&s->progress);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Returns a free slot with s->mu held; kp__cpu_commit publishes it. */
static kp__cpu_op *kp__cpu_reserve(kp__cpu_stream *s, kp__cpu_op_kind kind) {
    pthread_mutex_lock(&s->mu);
    while (s->head - s->tail >= KP__CPU_RING) pthread_cond_wait(&s->progress, &s->mu);
    kp__cpu_op *op = &s->ring[s->head % KP__CPU_RING];
    op->kind = kind;
    return op;
}

static void kp__cpu_commit(kp__cpu_stream *s) {
    s->head++;
    atomic_store_explicit(&s->pending, s->head - s->tail, memory_order_relaxed);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

/* Work becomes a node after the previous one while the stream captures,
 * else it is queued: the one path for copies, fills, kernels and host calls. */
static kp_status kp__cpu_submit(kp__cpu_stream *s, const kp__cpu_work *w) {
    if (s->cap) {
        if (s->cap_error != KP_OK)
            return kp__error(KP_ERR_STATE, "stream capture was invalidated by an earlier failure");
        kp_graph_node_t dep = (kp_graph_node_t)s->cap_last;
        kp__cpu_node *n = NULL;
        kp_status st = kp__cpu_graph_append(s->cap, w->kind, &dep, dep ? 1 : 0, &n);
        if (st != KP_OK) {
            s->cap_error = st;
            return st;
        }
        n->w = *w;
        s->cap_last = n;
        return KP_OK;
    }
    kp__cpu_op *op = kp__cpu_reserve(s, KP__OP_WORK);
    op->u.work = *w;
    kp__cpu_commit(s);
    return KP_OK;
}

static kp_status kp__cpu_no_capture(kp__cpu_stream *s, const char *what) {
    if (!s->cap) return KP_OK;
    s->cap_error = KP_ERR_UNSUPPORTED;
    return kp__error(KP_ERR_UNSUPPORTED, "%s is not supported while a cpu stream is capturing",
                     what);
}

/* Streams this thread is capturing, and the latest of them. */
static _Thread_local int kp__captures_here;
static _Thread_local kp__cpu_stream *kp__capturing;

/* As on CUDA, the refused call also invalidates the capture in progress. */
kp_status kp__cpu_capture_forbids(const char *what) {
    if (kp__captures_here == 0) return KP_OK;
    if (kp__capturing) kp__capturing->cap_error = KP_ERR_STATE;
    return kp__error(KP_ERR_STATE,
                     "%s is not permitted while this thread is capturing a stream "
                     "(as with CUDA's thread-local capture mode)",
                     what);
}

static void kp__capture_ended(kp__cpu_stream *s) {
    if (kp__captures_here > 0) kp__captures_here--;
    if (kp__capturing == s) kp__capturing = NULL;
}

/* --- stream slots ------------------------------------------------------------------ */
kp_status kp__cpu_stream_create(void *ctx, void **out) {
    kp__cpu_device *dev = ctx;
    kp__cpu_stream *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu stream: no memory");
    s->dev = dev;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    int rc = pthread_create(&s->thread, NULL, kp__cpu_worker, s);
    if (rc != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->work);
        pthread_cond_destroy(&s->progress);
        kp__free(s);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu stream: cannot start worker thread: %s",
                         strerror(rc));
    }
    pthread_mutex_lock(&dev->mu);
    s->next = dev->streams;
    dev->streams = s;
    pthread_mutex_unlock(&dev->mu);
    *out = s;
    return KP_OK;
}

static void kp__cpu_stream_wait_idle(kp__cpu_stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->head;
    while (s->tail < target) pthread_cond_wait(&s->progress, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void kp__cpu_stream_stop(kp__cpu_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    kp__cpu_graph_free(s->cap);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->progress);
    kp__free(s);
}

void kp__cpu_stream_destroy(void *ctx, void *sp) {
    kp__cpu_device *dev = ctx;
    kp__cpu_stream *s = sp;
    pthread_mutex_lock(&dev->mu);
    for (kp__cpu_stream **p = &dev->streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&dev->mu);
    if (s->cap) kp__capture_ended(s);
    kp__cpu_stream_stop(s); /* the worker drains the ring before it exits */
}

void kp__cpu_streams_close(void *ctx) {
    kp__cpu_device *dev = ctx;
    while (dev->streams) {
        kp__cpu_stream *s = dev->streams;
        dev->streams = s->next;
        kp__log(KP_LOG_WARN, "cpu device closed with a stream still open; stopping it");
        kp__cpu_stream_stop(s);
    }
}

kp_status kp__cpu_stream_sync(void *ctx, void *sp) {
    kp__cpu_stream *s = sp;
    if (s->cap) {
        /* As on CUDA, a synchronize spoils the capture in progress. */
        s->cap_error = KP_ERR_STATE;
        return kp__error(KP_ERR_STATE, "stream sync: the stream is capturing");
    }
    kp__cpu_stream_wait_idle(s);
    return KP_OK;
}

kp_status kp__cpu_stream_query(void *ctx, void *sp, bool *idle) {
    kp__cpu_stream *s = sp;
    if (s->cap) return kp__error(KP_ERR_STATE, "stream query: the stream is capturing");
    /* No lock: a flow queries its stage's stream after every frame. The
     * worker's release store after an op makes the op's effects visible
     * to a query that reads 0. */
    *idle = atomic_load_explicit(&s->pending, memory_order_acquire) == 0;
    return KP_OK;
}

kp_status kp__cpu_device_sync(void *ctx) {
    kp__cpu_device *dev = ctx;
    pthread_mutex_lock(&dev->mu);
    for (kp__cpu_stream *s = dev->streams; s; s = s->next) kp__cpu_stream_wait_idle(s);
    pthread_mutex_unlock(&dev->mu);
    return KP_OK;
}

kp_status kp__cpu_memcpy_async(void *ctx, void *sp, void *dst, const void *src, size_t bytes) {
    kp__cpu_work w = {.kind = KP__WORK_COPY, .u.copy = {dst, src, bytes}};
    return kp__cpu_submit(sp, &w);
}

kp_status kp__cpu_memcpy2d_async(void *ctx, void *sp, void *dst, size_t dpitch, const void *src,
                                 size_t spitch, size_t width, size_t height) {
    kp__cpu_work w = {.kind = KP__WORK_COPY2D,
                      .u.copy2d = {.dst = dst,
                                   .src = src,
                                   .dpitch = dpitch,
                                   .spitch = spitch,
                                   .width = width,
                                   .height = height}};
    return kp__cpu_submit(sp, &w);
}

kp_status kp__cpu_memset_async(void *ctx, void *sp, void *dst, int value, size_t bytes) {
    kp__cpu_work w = {.kind = KP__WORK_SET, .u.set = {dst, value, bytes}};
    return kp__cpu_submit(sp, &w);
}

kp_status kp__cpu_launch(void *ctx, void *sp, const kp_launch *l) {
    kp__cpu_work w = {.kind = KP__WORK_KERNEL};
    kp__cpu_kcall_set(&w.u.kernel, l);
    return kp__cpu_submit(sp, &w);
}

kp_status kp__cpu_host_func(void *ctx, void *sp, void (*fn)(void *), void *user) {
    kp__cpu_work w = {.kind = KP__WORK_HOST, .u.host = {fn, user}};
    return kp__cpu_submit(sp, &w);
}

/* --- event slots --------------------------------------------------------------------- */
kp_status kp__cpu_event_create(void *ctx, bool timing, void **out) {
    kp__cpu_event *e = kp__calloc(1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu event: no memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->refs, 1);
    *out = e;
    return KP_OK;
}

void kp__cpu_event_destroy(void *ctx, void *ev) { kp__cpu_event_unref(ev); }

/* Queues a record or a wait of `e` at `seq`; the op holds a reference. */
static void kp__cpu_enqueue_event(kp__cpu_stream *s, kp__cpu_op_kind kind, kp__cpu_event *e,
                                  uint64_t seq) {
    atomic_fetch_add(&e->refs, 1);
    kp__cpu_op *op = kp__cpu_reserve(s, kind);
    op->u.ev.ev = e;
    op->u.ev.seq = seq;
    kp__cpu_commit(s);
}

kp_status kp__cpu_event_record(void *ctx, void *evp, void *sp) {
    kp__cpu_event *e = evp;
    kp__cpu_stream *s = sp;
    KP_CHECK(kp__cpu_no_capture(s, "event record"));
    pthread_mutex_lock(&e->mu);
    uint64_t seq = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    kp__cpu_enqueue_event(s, KP__OP_RECORD, e, seq);
    return KP_OK;
}

kp_status kp__cpu_event_query(void *ctx, void *evp, bool *done) {
    kp__cpu_event *e = evp;
    pthread_mutex_lock(&e->mu);
    *done = e->done >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    return KP_OK;
}

kp_status kp__cpu_event_sync(void *ctx, void *evp) {
    kp__cpu_event *e = evp;
    pthread_mutex_lock(&e->mu);
    uint64_t seq = e->recorded;
    pthread_mutex_unlock(&e->mu);
    kp__cpu_event_wait_seq(e, seq);
    return KP_OK;
}

kp_status kp__cpu_stream_wait_event(void *ctx, void *sp, void *evp) {
    kp__cpu_stream *s = sp;
    kp__cpu_event *e = evp;
    KP_CHECK(kp__cpu_no_capture(s, "stream wait event"));
    pthread_mutex_lock(&e->mu);
    uint64_t seq = e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (seq == 0) return KP_OK; /* never recorded: nothing to wait for */
    kp__cpu_enqueue_event(s, KP__OP_WAIT, e, seq);
    return KP_OK;
}

kp_status kp__cpu_event_elapsed(void *ctx, void *a, void *b, float *ms) {
    kp__cpu_event *ea = a, *eb = b;
    struct timespec ta, tb;
    bool ready;
    pthread_mutex_lock(&ea->mu);
    ready = ea->recorded > 0 && ea->done >= ea->recorded;
    ta = ea->t_done;
    pthread_mutex_unlock(&ea->mu);
    pthread_mutex_lock(&eb->mu);
    ready = ready && eb->recorded > 0 && eb->done >= eb->recorded;
    tb = eb->t_done;
    pthread_mutex_unlock(&eb->mu);
    if (!ready)
        return kp__error(KP_ERR_STATE, "event elapsed: both events must be recorded and complete");
    *ms = (float)((double)(tb.tv_sec - ta.tv_sec) * 1e3 + (double)(tb.tv_nsec - ta.tv_nsec) * 1e-6);
    return KP_OK;
}

/* --- graph launch and capture --------------------------------------------------------- */
kp_status kp__cpu_exec_upload(void *ctx, void *ge, void *sp) { return KP_OK; }

kp_status kp__cpu_exec_launch(void *ctx, void *ge, void *sp) {
    kp__cpu_stream *s = sp;
    KP_CHECK(kp__cpu_no_capture(s, "graph launch"));
    kp__cpu_exec_launched(ge);
    kp__cpu_op *op = kp__cpu_reserve(s, KP__OP_GRAPH);
    op->u.exec = ge;
    kp__cpu_commit(s);
    return KP_OK;
}

kp_status kp__cpu_begin_capture(void *ctx, void *sp) {
    kp__cpu_stream *s = sp;
    if (s->cap) return kp__error(KP_ERR_STATE, "begin capture: the stream is already capturing");
    KP_CHECK(kp__cpu_graph_new(&s->cap));
    s->cap_last = NULL;
    s->cap_error = KP_OK;
    kp__captures_here++;
    kp__capturing = s;
    return KP_OK;
}

kp_status kp__cpu_end_capture(void *ctx, void *sp, void **out) {
    kp__cpu_stream *s = sp;
    if (!s->cap) return kp__error(KP_ERR_STATE, "end capture: the stream is not capturing");
    kp__cpu_graph *g = s->cap;
    kp_status err = s->cap_error;
    s->cap = NULL;
    s->cap_last = NULL;
    kp__capture_ended(s);
    if (err != KP_OK) {
        kp__cpu_graph_free(g);
        return kp__error(err,
                         "end capture: the capture was invalidated by an operation that "
                         "failed or is not capturable (%s)",
                         kp_status_str(err));
    }
    *out = g;
    return KP_OK;
}

bool kp__cpu_is_capturing(void *ctx, void *sp) { return ((kp__cpu_stream *)sp)->cap != NULL; }
