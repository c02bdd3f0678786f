/* Flows: one thread and one stream per stage, bounded queues between them,
 * a fixed set of frames.
 *
 * Frames live in a free list made at creation. The source takes one (waiting
 * while none is free or the byte budget would be passed), its stage function
 * fills it, and it moves stage to stage through the queues; the sink, or a
 * drop, puts it back. Each frame has one event: every stage records it on
 * its stream after its work and the next user (the next stage, or the source
 * reusing the frame) makes its own stream wait for it, so the device orders
 * the hand-overs and the host never waits for them. A frame keeps its pool
 * buffer across reuse: after the first lap nothing is allocated.
 *
 * Locks: each queue has its mutex; the free list and the budget share the
 * flow's. No lock is held while a stage function runs, and no thread holds
 * two locks. Counters read by kp_flow_health are atomics. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flow-impl.h"
#ifdef KP_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

#define KP__MAX_QUEUE 1024
#define KP__LAT_SAMPLES 1024 /* host-time samples kept per stage */
#define KP__SPIN_US 20       /* spin before sleeping (spin_us 0) */
#define KP__GPU_EVERY 8      /* one frame in this many gets its device time measured */
#define KP__GPU_SLOTS 4      /* measurements in flight per stage */
#define KP__REP_DEPTH 2      /* frames a replica has on its device at most: one runs, one waits */
#define KP__PROBE_N 8        /* frames timed per way of an automatic hand-over */

typedef struct kp__fframe {
    kp_frame f;
    kp_buffer_t buf[KP_FLOW_MAX_DEVICES]; /* one per device of the flow */
    kp_event_t ev[KP_FLOW_MAX_DEVICES];   /* one per device: an event records on its own */
    int ev_dev;                           /* the event marking work to wait for; -1: none */
    int loc;                              /* the device whose buffer holds the frame */
    void *staging;                        /* pinned host memory, for staged hand-overs */
    uint64_t ticket;                      /* its place in a replicated stage's order */
    struct kp__fframe *next_free;
} kp__fframe;

typedef struct kp__queue {
    char pad_[64]; /* queues apart: each on cache lines of its own */
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    kp__fframe **ring;
    size_t cap, head, count;
    bool closed;
    kp_queue_policy policy;
    uint64_t tickets;   /* frames popped: the next one's ticket */
    size_t round_robin; /* replicas taking turns (0: any consumer takes) */
    _Atomic size_t depth, max_depth;
    _Atomic uint64_t pushed, drops;
} kp__queue;

typedef struct kp__stage {
    struct kp_flow *flow;
    size_t index;                        /* the logical stage */
    size_t replica;                      /* of it */
    int dev_i;                           /* its device in flow->devs */
    kp_handoff how[KP_FLOW_MAX_DEVICES]; /* frames from each other device: resolved */
    bool auto_how[KP_FLOW_MAX_DEVICES];  /* ... by "auto", with peer access: probed */
    /* An automatic hand-over between devices that reach each other is
     * timed both ways on the first frames from one device (`from`): the
     * copy and the stage's work on its own buffer, against the stage's work
     * read in place; the faster way stays. Events are read once done,
     * never waited for. */
    struct kp__probe {
        int from;      /* the device probed; -1: none (yet) */
        unsigned next; /* frames timed: copy first, then in place */
        kp_event_t start[2 * KP__PROBE_N], end[2 * KP__PROBE_N];
        bool decided;
    } probe;
    char name[64];
    kp_flow_end_fn end_fn;
    kp_flow_stage_fn fn;
    kp_flow_batch_fn batch_fn;
    void *user;
    size_t max_batch;
    uint32_t deadline_us;
    kp__fframe **batch; /* max_batch slots */
    kp_frame **batch_frames;
    _Atomic uint64_t batches;
    kp_stage_ctx ctx;
    pthread_t thread;
    bool started;
    _Atomic uint64_t in, out;
    _Atomic uint32_t lat[KP__LAT_SAMPLES]; /* tenths of a microsecond */
    _Atomic uint64_t n_lat;
    /* device time: a pair of events around the stage's work on sampled
     * frames, read once both have completed (never waited for) */
    struct kp__gpu_slot {
        kp_event_t start, end;
        bool pending;
    } gpu[KP__GPU_SLOTS];
    uint64_t gpu_next, frames_run;
    /* a replica's frames on its device: the event after each of the last
     * KP__REP_DEPTH, so it takes a frame only when its device has room */
    kp_event_t issued[KP__REP_DEPTH];
    uint64_t n_issued;
    bool busy; /* the last run left work on the stream: its runs are measured */
    _Atomic uint32_t gpu_lat[KP__LAT_SAMPLES];
    _Atomic uint64_t n_gpu_lat;
#ifdef KP_HAVE_CUDA
    nvtxStringHandle_t nvtx_name; /* the stage's name, registered once */
#endif
} kp__stage;

/* A logical stage: its replicas (threads) and, when there are several, the
 * reordering of their frames back into the order they came in. */
typedef struct kp__lstage {
    size_t first, n_rep; /* its threads: flow->st[first .. first + n_rep) */
    _Atomic size_t live; /* replicas still running */
    pthread_mutex_t ro_mu;
    kp__fframe **ro; /* ring of frames done out of turn, by ticket */
    size_t ro_cap;
    uint64_t ro_next; /* the ticket to pass on next */
    bool ro_pushing;  /* a replica is passing frames on */
    bool ro_init;
} kp__lstage;

/* Frames from one device to another. */
typedef struct kp__link {
    _Atomic int kind; /* the kp_handoff it last used */
    _Atomic uint64_t frames, bytes;
    _Atomic uint64_t t_first_ns, t_last_ns;
} kp__link;

struct kp_flow {
    kp_device_t dev;
    size_t n;      /* logical stages */
    size_t n_st;   /* threads: stages and replicas */
    kp__stage *st; /* n_st of them */
    kp__lstage ls[KP_FLOW_MAX_STAGES];
    kp__queue q[KP_FLOW_MAX_STAGES]; /* q[i] feeds stage i; q[0] unused */
    size_t n_devs;
    kp_device_t devs[KP_FLOW_MAX_DEVICES]; /* devs[0] is the flow's */
    kp_buffer_pool_t pools[KP_FLOW_MAX_DEVICES];
    _Atomic uint64_t dev_runs[KP_FLOW_MAX_DEVICES];
    kp__link link[KP_FLOW_MAX_DEVICES][KP_FLOW_MAX_DEVICES];
    bool staged_logged;
    _Atomic uint64_t staged;
    size_t frame_bytes, budget;
    kp__fframe *frames;
    size_t n_frames;

    pthread_mutex_t mu; /* the free list, the budget, the error */
    pthread_cond_t freed;
    kp__fframe *free_list;
    _Atomic size_t in_flight, max_in_flight, bytes, peak_bytes;
    _Atomic uint64_t done, dropped;
    /* read by every stage at every hand-over: on a cache line of its own,
     * away from the counters the source and the sink write per frame */
    char pad_a[64];
    _Atomic bool cancel;
    char pad_b[64];
    _Atomic bool started, waited;
    _Atomic int running;
    kp_status status;
    char error[512];
    _Atomic uint64_t done_at_alloc; /* frames done when a frame last got its buffer */
    /* the trace ring: trace_cap slots, trace_n events ever written */
    struct kp__trace_ev {
        _Atomic uint64_t seq;
        _Atomic uint32_t stage;
        _Atomic uint64_t t0_ns, t1_ns;
    } * trace;
    size_t trace_cap;
    _Atomic uint64_t trace_n;
    double t_start_us;
    double spin_us;  /* kp_flow_config.spin_us, resolved */
    bool spin_yield; /* more threads than cores: a spin yields the core */
#ifdef KP_HAVE_CUDA
    nvtxDomainHandle_t nvtx; /* "kpipe flow" */
#endif
    /* objects the flow owns (its JSON reader's stages), freed last */
    struct kp__owned {
        void *obj;
        void (*free_fn)(void *);
    } owned[KP_FLOW_MAX_STAGES * (KP_FLOW_MAX_REPLICAS + 1) + KP_FLOW_MAX_DEVICES];
    size_t n_owned;
};

kp_status kp__flow_own(kp_flow_t f, void *obj, void (*free_fn)(void *)) {
    if (!free_fn) return KP_OK;
    if (f->n_owned == sizeof f->owned / sizeof f->owned[0]) {
        free_fn(obj);
        return kp__error(KP_ERR_INTERNAL, "flow: too many owned objects");
    }
    f->owned[f->n_owned].obj = obj;
    f->owned[f->n_owned++].free_fn = free_fn;
    return KP_OK;
}

const char *kp_queue_policy_str(kp_queue_policy p) {
    switch (p) {
    case KP_QUEUE_BLOCK: return "block";
    case KP_QUEUE_DROP_OLDEST: return "drop_oldest";
    case KP_QUEUE_DROP_NEWEST: return "drop_newest";
    }
    return "invalid";
}

static double kp__now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void kp__atomic_max(_Atomic size_t *m, size_t v) {
    size_t cur = atomic_load(m);
    while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
    }
}

/* --- spinning ---------------------------------------------------------------------- */
static void kp__pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* One wait of a spin. Where the flow's threads outnumber the cores, a
 * spinning thread would burn the very core that the thread it waits for
 * needs (on 2 cores, 4 stages spinning for 1 ms each made a frame cost
 * 50 times more): there it yields the core instead of pausing on it. */
static void kp__spin_once(const struct kp_flow *f) {
    if (f->spin_yield)
        sched_yield();
    else
        kp__pause();
}

/* Spins while *v == blocked (a queue empty or full), up to the flow's spin
 * time, so that a hand-over arriving within it costs no sleep and wake-up
 * of a thread (a futex round trip of several microseconds). The caller
 * then takes the lock and checks for itself. */
static void kp__spin_while(struct kp_flow *f, _Atomic size_t *v, size_t blocked) {
    if (!f->spin_us) return;
    double until = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(v, memory_order_relaxed) != blocked) return;
        if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return;
        if (i % 64 == 0 || f->spin_yield) {
            double now = kp__now_us();
            if (!until) until = now + f->spin_us;
            if (now >= until) return;
        }
        kp__spin_once(f);
    }
}

/* Takes a lock; a spinning flow tries it a while first, as the thread that
 * just changed what we spun on still holds it: sleeping on it would cost
 * both threads a futex call. */
static void kp__lock(struct kp_flow *f, pthread_mutex_t *mu) {
    for (int i = 0; f->spin_us && i < (f->spin_yield ? 4 : 256); i++) {
        if (pthread_mutex_trylock(mu) == 0) return;
        kp__spin_once(f);
    }
    pthread_mutex_lock(mu);
}

/* --- frames ------------------------------------------------------------------------ */
/* Puts a frame back; the next taker waits for its event on its own stream. */
static void kp__frame_put(struct kp_flow *f, kp__fframe *fr, bool dropped) {
    kp__lock(f, &f->mu);
    fr->next_free = f->free_list;
    f->free_list = fr;
    atomic_fetch_sub(&f->in_flight, 1);
    atomic_fetch_sub(&f->bytes, f->frame_bytes);
    if (dropped) atomic_fetch_add(&f->dropped, 1);
    pthread_cond_broadcast(&f->freed);
    pthread_mutex_unlock(&f->mu);
}

/* Takes a free frame within the budget; NULL once cancelled. */
static kp__fframe *kp__frame_take(struct kp_flow *f) {
    kp__fframe *fr = NULL;
    kp__spin_while(f, &f->in_flight, f->n_frames);
    kp__lock(f, &f->mu);
    for (;;) {
        if (atomic_load(&f->cancel)) break;
        bool budget_ok = !f->budget || atomic_load(&f->bytes) + f->frame_bytes <= f->budget;
        if (f->free_list && budget_ok) {
            fr = f->free_list;
            f->free_list = fr->next_free;
            size_t n = atomic_fetch_add(&f->in_flight, 1) + 1;
            size_t b = atomic_fetch_add(&f->bytes, f->frame_bytes) + f->frame_bytes;
            kp__atomic_max(&f->max_in_flight, n);
            kp__atomic_max(&f->peak_bytes, b);
            break;
        }
        pthread_cond_wait(&f->freed, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return fr;
}

/* A frame's buffers, one on each device of the flow from its pool, kept
 * for the flow's life. Creation gives them to every frame that can be in
 * flight at once; a frame past that (the budget's doing) gets its own here,
 * on first use. */
static kp_status kp__frame_buffer(struct kp_flow *f, kp__fframe *fr) {
    if (fr->buf[0] || !f->frame_bytes) return KP_OK;
    for (size_t d = 0; d < f->n_devs; d++)
        KP_CHECK(kp_buffer_acquire(f->pools[d], f->frame_bytes, NULL, &fr->buf[d]));
    fr->f.capacity = f->frame_bytes;
    atomic_store(&f->done_at_alloc, atomic_load(&f->done));
    return KP_OK;
}

/* The frame's buffer on device d (NULL for frames without one). */
static void *kp__frame_data(const kp__fframe *fr, int d) {
    return fr->buf[d] ? kp_buffer_data(fr->buf[d]) : NULL;
}

static uint64_t kp__now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Brings a frame made on another device to stage s, on s's stream (which
 * already waits for the frame's earlier work), by the link's kind. */
static kp_status kp__handoff(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    int from = fr->loc, to = s->dev_i;
    kp__link *l = &f->link[from][to];
    size_t n = fr->f.bytes;
    if (n > fr->f.capacity)
        return kp__error(KP_ERR_INVALID_ARG, "frame %llu: bytes (%zu) exceed its capacity (%zu)",
                         (unsigned long long)fr->f.seq, n, fr->f.capacity);
    void *src = kp__frame_data(fr, from), *dst = kp__frame_data(fr, to);
    kp_handoff how = s->how[from];
    atomic_store_explicit(&l->kind, (int)how, memory_order_relaxed);
    if (how == KP_HANDOFF_COPY) {
        KP_CHECK(kp_memcpy_async(s->ctx.stream, dst, src, n));
    } else if (how == KP_HANDOFF_STAGED) {
        KP_CHECK(kp_memcpy_async(s->ctx.stream, fr->staging, src, n));
        KP_CHECK(kp_memcpy_async(s->ctx.stream, dst, fr->staging, n));
        atomic_fetch_add_explicit(&f->staged, 1, memory_order_relaxed);
    }
    if (how != KP_HANDOFF_IN_PLACE) {
        fr->loc = to;
        fr->f.data = dst;
    }
    uint64_t now = kp__now_ns(), zero = 0;
    atomic_compare_exchange_strong(&l->t_first_ns, &zero, now);
    atomic_store_explicit(&l->t_last_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->frames, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->bytes, n, memory_order_relaxed);
    return KP_OK;
}

/* --- queues ------------------------------------------------------------------------ */
static kp_status kp__queue_init(kp__queue *q, size_t cap, kp_queue_policy policy) {
    q->ring = kp__calloc(cap, sizeof *q->ring);
    if (!q->ring) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for a queue");
    q->cap = cap;
    q->policy = policy;
    if (pthread_mutex_init(&q->mu, NULL) != 0) goto fail;
    pthread_condattr_t ca;
    bool ca_ok = pthread_condattr_init(&ca) == 0;
    if (ca_ok) (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->not_empty, ca_ok ? &ca : NULL);
    if (ca_ok) pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail_mu;
    if (pthread_cond_init(&q->not_full, NULL) != 0) goto fail_ne;
    return KP_OK;
fail_ne:
    pthread_cond_destroy(&q->not_empty);
fail_mu:
    pthread_mutex_destroy(&q->mu);
fail:
    kp__free(q->ring);
    q->ring = NULL;
    return kp__error(KP_ERR_INTERNAL, "flow: cannot initialise a queue's lock");
}

static void kp__queue_fini(kp__queue *q) {
    if (!q->ring) return;
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->mu);
    kp__free(q->ring);
    q->ring = NULL;
}

/* Pushes by the queue's policy. A frame that does not get in (dropped, or
 * the flow cancelled) goes back to the free list. */
static void kp__queue_push(struct kp_flow *f, kp__queue *q, kp__fframe *fr) {
    kp__fframe *drop = NULL;
    bool in = false;
    if (q->policy == KP_QUEUE_BLOCK) kp__spin_while(f, &q->depth, q->cap);
    kp__lock(f, &q->mu);
    while (q->count == q->cap && q->policy == KP_QUEUE_BLOCK && !q->closed &&
           !atomic_load(&f->cancel))
        pthread_cond_wait(&q->not_full, &q->mu);
    if (!q->closed && !atomic_load(&f->cancel)) {
        if (q->count == q->cap && q->policy == KP_QUEUE_DROP_NEWEST) {
            drop = fr;
        } else {
            if (q->count == q->cap) { /* drop oldest */
                drop = q->ring[q->head];
                q->head = (q->head + 1) % q->cap;
                q->count--;
            }
            q->ring[(q->head + q->count) % q->cap] = fr;
            q->count++;
            in = true;
            atomic_fetch_add(&q->pushed, 1);
            atomic_store(&q->depth, q->count);
            kp__atomic_max(&q->max_depth, q->count);
            if (q->round_robin)
                pthread_cond_broadcast(&q->not_empty); /* wake the replica whose turn it is */
            else
                pthread_cond_signal(&q->not_empty);
        }
        if (drop) atomic_fetch_add(&q->drops, 1);
    }
    pthread_mutex_unlock(&q->mu);
    if (drop) kp__frame_put(f, drop, true);
    if (!in && drop != fr) kp__frame_put(f, fr, false);
}

/* Whether replica r may take the queue's next frame. */
static bool kp__my_turn(const kp__queue *q, size_t r) {
    return !q->round_robin || q->tickets % q->round_robin == r;
}

/* Takes the head (the queue's lock held), with the next ticket. */
static kp__fframe *kp__queue_take_head(kp__queue *q) {
    kp__fframe *fr = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    fr->ticket = q->tickets++;
    atomic_store(&q->depth, q->count);
    pthread_cond_signal(&q->not_full);
    if (q->round_robin) pthread_cond_broadcast(&q->not_empty); /* the next one's turn */
    return fr;
}

/* The next frame for replica r (0 unless replicated); NULL at end of stream
 * (closed and empty) or on cancel. */
static kp__fframe *kp__queue_pop(struct kp_flow *f, kp__queue *q, size_t r) {
    kp__fframe *fr = NULL;
    kp__spin_while(f, &q->depth, 0);
    kp__lock(f, &q->mu);
    while ((q->count == 0 || !kp__my_turn(q, r)) && !(q->closed && q->count == 0) &&
           !atomic_load(&f->cancel))
        pthread_cond_wait(&q->not_empty, &q->mu);
    if (q->count && !atomic_load(&f->cancel)) fr = kp__queue_take_head(q);
    pthread_mutex_unlock(&q->mu);
    return fr;
}

/* A frame if one arrives before `deadline` (CLOCK_MONOTONIC); NULL at the
 * deadline, at end of stream or on cancel. */
static kp__fframe *kp__queue_pop_until(struct kp_flow *f, kp__queue *q,
                                       const struct timespec *deadline) {
    kp__fframe *fr = NULL;
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->closed && !atomic_load(&f->cancel))
        if (pthread_cond_timedwait(&q->not_empty, &q->mu, deadline) != 0) break;
    if (q->count && !atomic_load(&f->cancel)) fr = kp__queue_take_head(q);
    pthread_mutex_unlock(&q->mu);
    return fr;
}

static void kp__queue_close(kp__queue *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

/* Frames still queued at the end go back to the free list. */
static void kp__queue_drain(struct kp_flow *f, kp__queue *q) {
    for (;;) {
        kp__fframe *fr = NULL;
        pthread_mutex_lock(&q->mu);
        if (q->count) {
            fr = q->ring[q->head];
            q->head = (q->head + 1) % q->cap;
            q->count--;
            atomic_store(&q->depth, q->count);
        }
        pthread_mutex_unlock(&q->mu);
        if (!fr) return;
        kp__frame_put(f, fr, false);
    }
}

/* --- stopping ------------------------------------------------------------------------ */
static void kp__wake_all(struct kp_flow *f) {
    for (size_t i = 1; i < f->n; i++) kp__queue_close(&f->q[i]);
    pthread_mutex_lock(&f->mu);
    pthread_cond_broadcast(&f->freed);
    pthread_mutex_unlock(&f->mu);
}

/* The first error wins; it cancels the flow. */
static void kp__fail(struct kp_flow *f, kp__stage *s, kp_status st) {
    pthread_mutex_lock(&f->mu);
    if (f->status == KP_OK) {
        f->status = st;
        snprintf(f->error, sizeof f->error, "stage \"%s\": %s", s->name,
                 kp_last_error()[0] ? kp_last_error() : kp_status_str(st));
    }
    pthread_mutex_unlock(&f->mu);
    atomic_store(&f->cancel, true);
    kp__wake_all(f);
}

/* --- a stage's thread ------------------------------------------------------------------ */
static void kp__record_sample(_Atomic uint32_t *ring, _Atomic uint64_t *n, double us) {
    uint64_t k = atomic_fetch_add(n, 1);
    double tenths = us * 10.0;
    atomic_store(&ring[k % KP__LAT_SAMPLES], tenths > 4e9 ? 4000000000u : (uint32_t)tenths);
}

/* Reads a completed device-time measurement; false while it is running.
 * `force` (after the streams are synchronised) reads it regardless. */
static bool kp__gpu_harvest(kp__stage *s, struct kp__gpu_slot *g, bool force) {
    if (!g->pending) return true;
    bool done = force;
    if (!force && kp_event_query(g->end, &done) != KP_OK) {
        kp_clear_error();
        done = true; /* a failed query drops the sample; the stream reports the error */
    }
    if (!done) return false;
    float ms = 0;
    if (kp_event_elapsed_ms(g->start, g->end, &ms) == KP_OK)
        kp__record_sample(s->gpu_lat, &s->n_gpu_lat, (double)ms * 1e3);
    else
        kp_clear_error();
    g->pending = false;
    return true;
}

/* The slot to measure this frame's device time with, or NULL: every
 * KP__GPU_EVERY-th frame of a stage that enqueues work, when the slot's
 * last measurement has completed. */
static struct kp__gpu_slot *kp__gpu_begin(kp__stage *s) {
    if (!s->busy || s->frames_run++ % KP__GPU_EVERY) return NULL; /* host-only: no events */
    struct kp__gpu_slot *g = &s->gpu[s->gpu_next % KP__GPU_SLOTS];
    if (!kp__gpu_harvest(s, g, false)) return NULL;
    if (kp_event_record(g->start, s->ctx.stream) != KP_OK) {
        kp_clear_error();
        return NULL;
    }
    s->gpu_next++;
    return g;
}

/* One stage run into the trace ring (lock-free; the oldest is overwritten). */
static void kp__trace(kp__stage *s, uint64_t seq, double t0, double t1) {
    struct kp_flow *f = s->flow;
    if (!f->trace) return;
    uint64_t k = atomic_fetch_add(&f->trace_n, 1) % f->trace_cap;
    atomic_store(&f->trace[k].seq, seq);
    atomic_store(&f->trace[k].stage, (uint32_t)(s - f->st)); /* the thread's row */
    atomic_store(&f->trace[k].t0_ns, (uint64_t)((t0 - f->t_start_us) * 1e3));
    atomic_store(&f->trace[k].t1_ns, (uint64_t)((t1 - f->t_start_us) * 1e3));
}

/* NVTX: one range per stage run, named by the stage, its payload the
 * first frame's sequence number (its colour tells the stages apart in
 * Nsight Systems). Without a tool attached each call is a test and a
 * return; nothing is formatted per frame. */
static void kp__nvtx_push(kp__stage *s, uint64_t seq, size_t n) {
#ifdef KP_HAVE_CUDA
    if (!s->flow->nvtx) return;
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xff000000u | (uint32_t)(0x3f7fbfu * (s->index + 1) & 0xffffffu);
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = seq;
    a.category = (uint32_t)n;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = s->nvtx_name;
    nvtxDomainRangePushEx(s->flow->nvtx, &a);
#endif
}

static void kp__nvtx_pop(kp__stage *s) {
#ifdef KP_HAVE_CUDA
    if (s->flow->nvtx) nvtxDomainRangePop(s->flow->nvtx);
#endif
}

/* Runs the stage function on n frames (1 unless micro-batching), timed on
 * the host, on the device (sampled), traced and named for NVTX; then tells
 * whether the stage's stream has work pending. */
static kp_status kp__timed_call(kp__stage *s, kp__fframe *const *frs, size_t n, bool *eos,
                                bool *idle) {
    struct kp__gpu_slot *g = kp__gpu_begin(s);
    double t0 = kp__now_us();
    kp__nvtx_push(s, frs[0]->f.seq, n);
    kp_status st;
    if (s->batch_fn) {
        for (size_t i = 0; i < n; i++) s->batch_frames[i] = &frs[i]->f;
        st = s->batch_fn(s->user, &s->ctx, s->batch_frames, n);
        atomic_fetch_add(&s->batches, 1);
    } else {
        st = s->fn(s->user, &s->ctx, &frs[0]->f, eos);
    }
    kp__nvtx_pop(s);
    double t1 = kp__now_us();
    kp__record_sample(s->lat, &s->n_lat, t1 - t0);
    for (size_t i = 0; i < n; i++) kp__trace(s, frs[i]->f.seq, t0, t1);
    if (st == KP_OK) st = kp_stream_query(s->ctx.stream, idle);
    s->busy = !*idle;
    if (g) {
        kp_status gst = kp_event_record(g->end, s->ctx.stream);
        g->pending = gst == KP_OK;
        if (gst != KP_OK) kp_clear_error();
    }
    return st;
}

static int kp__cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Once every timed frame has finished: the way with the lower median
 * stays (in place only where it is faster). A failed measurement keeps
 * the copy. */
static void kp__probe_decide(kp__stage *s) {
    struct kp__probe *p = &s->probe;
    float t[2][KP__PROBE_N];
    for (int k = 0; k < 2 * KP__PROBE_N; k++) {
        bool done = false;
        if (kp_event_query(p->end[k], &done) != KP_OK) {
            kp_clear_error();
            p->decided = true;
            return;
        }
        if (!done) return; /* not yet: asked again after the next frame */
        if (kp_event_elapsed_ms(p->start[k], p->end[k], &t[k / KP__PROBE_N][k % KP__PROBE_N]) !=
            KP_OK) {
            kp_clear_error();
            p->decided = true;
            return;
        }
    }
    qsort(t[0], KP__PROBE_N, sizeof(float), kp__cmp_f);
    qsort(t[1], KP__PROBE_N, sizeof(float), kp__cmp_f);
    float copy = t[0][KP__PROBE_N / 2], in_place = t[1][KP__PROBE_N / 2];
    p->decided = true;
    if (in_place < copy) s->how[p->from] = KP_HANDOFF_IN_PLACE;
    if (KP_LOG_ENABLED(KP_LOG_INFO))
        kp__log(KP_LOG_INFO,
                "flow: stage \"%s\" on %s takes frames from %s %s (median %.1f us by copy, "
                "%.1f us in place)",
                s->name, kp_device_name(s->ctx.dev), kp_device_name(s->flow->devs[p->from]),
                in_place < copy ? "in place" : "by copy", copy * 1e3, in_place * 1e3);
}

/* Frames through one stage: wait for their earlier work on the device,
 * bring them over from other devices, run the function, mark the frames'
 * new work. A stream with nothing pending has nothing to hand over: the
 * next user need not wait (host-only stages cost no event traffic). */
static kp_status kp__run_frames(kp__stage *s, kp__fframe *const *frs, size_t n, bool *eos) {
    for (size_t i = 0; i < n; i++)
        if (frs[i]->ev_dev >= 0)
            KP_CHECK(kp_stream_wait_event(s->ctx.stream, frs[i]->ev[frs[i]->ev_dev]));
    struct kp__probe *p = &s->probe;
    int timed = -1; /* the probe's slot this run fills */
    for (size_t i = 0; i < n; i++) {
        if (frs[i]->loc == s->dev_i || !frs[i]->buf[0]) continue;
        int from = frs[i]->loc;
        if (n == 1 && p->start[0] && !p->decided && p->next < 2 * KP__PROBE_N &&
            s->how[from] == KP_HANDOFF_COPY && s->auto_how[from] &&
            (p->from < 0 || p->from == from)) {
            p->from = from;
            timed = (int)p->next++;
            s->how[from] = timed < KP__PROBE_N ? KP_HANDOFF_COPY : KP_HANDOFF_IN_PLACE;
            KP_CHECK(kp_event_record(p->start[timed], s->ctx.stream));
        }
        kp_status hst = kp__handoff(s, frs[i]);
        if (timed >= 0) s->how[from] = KP_HANDOFF_COPY; /* until decided */
        KP_CHECK(hst);
    }
    bool idle = false;
    KP_CHECK(kp__timed_call(s, frs, n, eos, &idle));
    if (timed >= 0) KP_CHECK(kp_event_record(p->end[timed], s->ctx.stream));
    if (p->from >= 0 && !p->decided && p->next == 2 * KP__PROBE_N) kp__probe_decide(s);
    atomic_fetch_add_explicit(&s->flow->dev_runs[s->dev_i], 1, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        frs[i]->ev_dev = idle ? -1 : s->dev_i;
        if (!idle) KP_CHECK(kp_event_record(frs[i]->ev[s->dev_i], s->ctx.stream));
    }
    return KP_OK;
}

/* A frame done at stage i goes to the next stage's queue, or, at the sink,
 * back to the free list. */
static void kp__pass_on(struct kp_flow *f, size_t i, kp__fframe *fr) {
    if (i + 1 < f->n) {
        kp__queue_push(f, &f->q[i + 1], fr);
        return;
    }
    atomic_fetch_add(&f->done, 1);
    kp__frame_put(f, fr, false);
}

/* Passes a processed frame on, or finishes it at the sink. A replicated
 * stage's frames go on in ticket order: a frame done out of turn waits in
 * the ring, and one replica at a time passes on what is in turn, without
 * holding the ring's lock while it pushes (which may block). The ring never
 * overflows: its tickets are of frames in flight, fewer than its size. */
static void kp__forward(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    kp__lstage *ls = &f->ls[s->index];
    atomic_fetch_add(&s->out, 1);
    if (ls->n_rep == 1) {
        kp__pass_on(f, s->index, fr);
        return;
    }
    pthread_mutex_lock(&ls->ro_mu);
    ls->ro[fr->ticket % ls->ro_cap] = fr;
    if (!ls->ro_pushing) {
        ls->ro_pushing = true;
        kp__fframe *next;
        while ((next = ls->ro[ls->ro_next % ls->ro_cap]) != NULL) {
            ls->ro[ls->ro_next++ % ls->ro_cap] = NULL;
            pthread_mutex_unlock(&ls->ro_mu);
            kp__pass_on(f, s->index, next);
            pthread_mutex_lock(&ls->ro_mu);
        }
        ls->ro_pushing = false;
    }
    pthread_mutex_unlock(&ls->ro_mu);
}

static void kp__source_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    for (uint64_t seq = 0;; seq++) {
        kp__fframe *fr = kp__frame_take(f);
        if (!fr) return;
        kp_status bst = kp__frame_buffer(f, fr);
        if (bst != KP_OK) {
            kp__frame_put(f, fr, false);
            kp__fail(f, s, bst);
            return;
        }
        memset(&fr->f.desc, 0, sizeof fr->f.desc);
        memset(fr->f.user, 0, sizeof fr->f.user);
        fr->f.seq = seq;
        fr->f.bytes = 0;
        fr->loc = s->dev_i;
        fr->f.data = kp__frame_data(fr, s->dev_i);
        bool eos = false;
        atomic_fetch_add(&s->in, 1);
        kp_status st = kp__run_frames(s, &fr, 1, &eos);
        if (st != KP_OK || eos) {
            kp__frame_put(f, fr, false);
            if (st != KP_OK) kp__fail(f, s, st);
            return;
        }
        atomic_fetch_add(&s->out, 1);
        kp__queue_push(f, &f->q[1], fr);
    }
}

/* A replica takes its next frame only once its device has finished all
 * but KP__REP_DEPTH - 1 of its earlier ones: frames then go to the replica
 * whose device has room, not to the thread that happens to ask first (the
 * host enqueues far faster than a device runs). */
static kp_status kp__replica_room(kp__stage *s) {
    if (!s->issued[0] || s->n_issued < KP__REP_DEPTH) return KP_OK;
    return kp_event_sync(s->issued[s->n_issued % KP__REP_DEPTH]);
}

static kp_status kp__replica_issued(kp__stage *s) {
    if (!s->issued[0]) return KP_OK;
    KP_CHECK(kp_event_record(s->issued[s->n_issued % KP__REP_DEPTH], s->ctx.stream));
    s->n_issued++;
    return KP_OK;
}

static void kp__stage_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    kp__fframe *fr;
    for (;;) {
        kp_status rst = kp__replica_room(s);
        if (rst != KP_OK) {
            kp__fail(f, s, rst);
            return;
        }
        if (!(fr = kp__queue_pop(f, &f->q[s->index], s->replica))) return;
        atomic_fetch_add(&s->in, 1);
        kp_status st = kp__run_frames(s, &fr, 1, NULL);
        if (st == KP_OK) st = kp__replica_issued(s);
        if (st != KP_OK) {
            kp__frame_put(f, fr, false);
            kp__fail(f, s, st);
            return;
        }
        kp__forward(s, fr);
    }
}

/* Runs one batch: waits for each frame's earlier work, the batch function,
 * then marks each frame's new work (or none when the stream is idle). */
static void kp__batch_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    kp__queue *q = &f->q[s->index];
    for (;;) {
        size_t n = 0;
        kp__fframe *fr = kp__queue_pop(f, q, 0);
        if (!fr) return;
        s->batch[n++] = fr;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += (long)s->deadline_us * 1000;
        dl.tv_sec += dl.tv_nsec / 1000000000;
        dl.tv_nsec %= 1000000000;
        while (n < s->max_batch && (fr = kp__queue_pop_until(f, q, &dl)) != NULL)
            s->batch[n++] = fr;
        atomic_fetch_add(&s->in, n);
        kp_status st = atomic_load(&f->cancel) ? KP_OK : kp__run_frames(s, s->batch, n, NULL);
        if (st != KP_OK || atomic_load(&f->cancel)) {
            for (size_t i = 0; i < n; i++) kp__frame_put(f, s->batch[i], false);
            if (st != KP_OK) kp__fail(f, s, st);
            return;
        }
        for (size_t i = 0; i < n; i++) kp__forward(s, s->batch[i]);
    }
}

/* The stage's end function, told why the stage stopped; its error at end
 * of stream fails the flow. */
static void kp__stage_end(kp__stage *s) {
    struct kp_flow *f = s->flow;
    if (!s->end_fn) return;
    pthread_mutex_lock(&f->mu);
    kp_status why = f->status;
    pthread_mutex_unlock(&f->mu);
    if (why == KP_OK && atomic_load(&f->cancel)) why = KP_ERR_STATE;
    kp_status st = s->end_fn(s->user, &s->ctx, why);
    if (st != KP_OK && why == KP_OK)
        kp__fail(f, s, st);
    else if (st != KP_OK)
        kp_clear_error();
}

static void *kp__stage_main(void *arg) {
    kp__stage *s = arg;
    struct kp_flow *f = s->flow;
    kp_status st = kp_device_bind_thread(s->ctx.dev);
    if (st != KP_OK)
        kp__fail(f, s, st);
    else if (s->index == 0)
        kp__source_loop(s);
    else if (s->batch_fn)
        kp__batch_loop(s);
    else
        kp__stage_loop(s);
    kp__stage_end(s);
    /* end of stream (or cancel) flows downstream once every replica stopped */
    if (atomic_fetch_sub(&f->ls[s->index].live, 1) == 1 && s->index + 1 < f->n)
        kp__queue_close(&f->q[s->index + 1]);
    atomic_fetch_sub(&f->running, 1);
    return NULL;
}

/* --- public ------------------------------------------------------------------------ */
const char *kp_handoff_str(kp_handoff h) {
    switch (h) {
    case KP_HANDOFF_AUTO: return "auto";
    case KP_HANDOFF_COPY: return "copy";
    case KP_HANDOFF_IN_PLACE: return "in_place";
    case KP_HANDOFF_STAGED: return "staged";
    }
    return "invalid";
}

bool kp_flow_cancelled(kp_flow_t f) { return f && atomic_load(&f->cancel); }

/* --- kinds of stage --------------------------------------------------------------- */
#define KP__MAX_KINDS 16
static kp__stage_kind kp__kinds[KP__MAX_KINDS];
static _Atomic size_t kp__n_kinds; /* entries below it are complete and never change */
static pthread_mutex_t kp__kinds_mu = PTHREAD_MUTEX_INITIALIZER;

kp_status kp__stage_kind_add(const kp__stage_kind *kind) {
    kp_status st = KP_OK;
    pthread_mutex_lock(&kp__kinds_mu);
    size_t n = atomic_load(&kp__n_kinds);
    bool known = false;
    for (size_t i = 0; i < n && !known; i++) known = kp__kinds[i].fn == kind->fn;
    if (!known && n == KP__MAX_KINDS)
        st = kp__error(KP_ERR_INTERNAL, "flow: more than %d kinds of stage", KP__MAX_KINDS);
    else if (!known) {
        kp__kinds[n] = *kind;
        atomic_store(&kp__n_kinds, n + 1);
    }
    pthread_mutex_unlock(&kp__kinds_mu);
    return st;
}

const kp__stage_kind *kp__stage_kind_find(kp_flow_stage_fn fn) {
    size_t n = atomic_load(&kp__n_kinds);
    for (size_t i = 0; fn && i < n; i++)
        if (kp__kinds[i].fn == fn) return &kp__kinds[i];
    return NULL;
}

kp_status kp_flow_remote(kp_flow_t f, size_t stage, kp_flow_remote_stats *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && out);
    memset(out, 0, sizeof *out);
    if (stage >= f->n)
        return kp__error(KP_ERR_INVALID_ARG, "stage %zu: the flow has %zu stages", stage, f->n);
    const kp__stage *s = &f->st[f->ls[stage].first];
    const kp__stage_kind *k = kp__stage_kind_find(s->fn);
    if (k && k->remote_stats) return k->remote_stats(s->user, out);
    return kp__error(KP_ERR_INVALID_ARG, "stage %zu (%s) is not a remote queue's end", stage,
                     s->name);
}

/* The devices stage i runs on: its replicas, or its one device. */
static size_t kp__stage_devices(const kp_flow_config *c, size_t i, const kp_device_t **devs,
                                kp_device_t *one) {
    const kp_flow_stage *s = &c->stages[i];
    if (s->n_replicas > 1) {
        *devs = s->replicas;
        return s->n_replicas;
    }
    *one = s->dev ? s->dev : c->dev;
    *devs = one;
    return 1;
}

/* Where stage i runs: its devices exist, are of the flow's backend, and a
 * replicated stage names each device once. */
static kp_status kp__check_stage_devices(const kp_flow_config *c, size_t i) {
    const kp_flow_stage *s = &c->stages[i];
    if (s->handoff > KP_HANDOFF_STAGED)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).handoff: unknown hand-over %d", i,
                         s->name, (int)s->handoff);
    if (s->deal != KP_DEAL_LEAST_LOADED && s->deal != KP_DEAL_ROUND_ROBIN)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).deal: unknown deal %d", i, s->name,
                         (int)s->deal);
    if (s->n_replicas > 1) {
        if (i == 0 || s->batch_fn || s->n_replicas > KP_FLOW_MAX_REPLICAS || !s->replicas)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): a replicated stage is not the first, does not "
                             "micro-batch, and has 2 to %d devices in replicas",
                             i, s->name, KP_FLOW_MAX_REPLICAS);
        const kp__stage_kind *k = kp__stage_kind_find(s->fn);
        if (k && k->one_link)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): a stage with one link (a remote queue's end) has "
                             "no replicas",
                             i, s->name);
    } else if (s->replicas || s->replica_users) {
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s): replicas or replica_users without n_replicas >= 2", i,
                         s->name);
    } else if (s->deal != KP_DEAL_LEAST_LOADED) {
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s).deal: only a stage with replicas deals frames", i,
                         s->name);
    }
    kp_device_t one;
    const kp_device_t *devs;
    size_t n = kp__stage_devices(c, i, &devs, &one);
    for (size_t r = 0; r < n; r++) {
        if (!devs[r])
            return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).replicas[%zu] is NULL", i,
                             s->name, r);
        if (strcmp(kp_device_backend(devs[r]), kp_device_backend(c->dev)) != 0)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): device %s is not of the flow's backend (%s)", i,
                             s->name, kp_device_name(devs[r]), kp_device_backend(c->dev));
        for (size_t q = 0; q < r; q++)
            if (devs[q] == devs[r] || strcmp(kp_device_name(devs[q]), kp_device_name(devs[r])) == 0)
                return kp__error(KP_ERR_INVALID_ARG,
                                 "stages[%zu] (%s).replicas[%zu]: %s is named twice (replicas[%zu])",
                                 i, s->name, r, kp_device_name(devs[r]), q);
    }
    return KP_OK;
}

/* Stage i by itself and against the stages before it. */
static kp_status kp__check_stage(const kp_flow_config *c, size_t i) {
    const kp_flow_stage *s = &c->stages[i];
    if (!s->name || !*s->name || strlen(s->name) >= 64)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu].name: 1 to 63 characters", i);
    for (size_t j = 0; j < i; j++)
        if (strcmp(c->stages[j].name, s->name) == 0)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu].name: \"%s\" is used twice (stages[%zu] too)", i,
                             s->name, j);
    bool batching = s->batch_fn || s->max_batch > 1;
    if (batching && (i == 0 || !s->batch_fn || s->fn || s->max_batch < 2 ||
                     s->max_batch > s->queue_capacity))
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s): a micro-batching stage (not the first) sets batch_fn "
                         "and not fn, and max_batch from 2 to its queue_capacity (%zu)",
                         i, s->name, s->queue_capacity);
    if (batching && s->deadline_us > KP_FLOW_MAX_DEADLINE_US)
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s).deadline_us is %u (at most %d)", i, s->name,
                         s->deadline_us, KP_FLOW_MAX_DEADLINE_US);
    if (!batching && !s->fn)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).fn is NULL", i, s->name);
    if (i && (s->queue_capacity < 1 || s->queue_capacity > KP__MAX_QUEUE))
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).queue_capacity is %zu (1 .. %d)", i,
                         s->name, s->queue_capacity, KP__MAX_QUEUE);
    if (i && s->policy != KP_QUEUE_BLOCK && s->policy != KP_QUEUE_DROP_OLDEST &&
        s->policy != KP_QUEUE_DROP_NEWEST)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).policy: unknown policy %d", i,
                         s->name, (int)s->policy);
    return kp__check_stage_devices(c, i);
}

/* A byte budget must let every micro-batching stage fill its batch: were
 * all the frames it admits held in partial batches, none could arrive
 * before each batch's deadline. With b frames admitted and batches of at
 * most m_k, that cannot happen when b > sum(m_k - 1). */
static kp_status kp__check_budget(const kp_flow_config *c) {
    if (!c->budget_bytes || !c->frame_bytes) return KP_OK;
    size_t admitted = c->budget_bytes / c->frame_bytes, need = 1;
    const char *last = NULL;
    for (size_t i = 0; i < c->n_stages; i++)
        if (c->stages[i].batch_fn) {
            need += c->stages[i].max_batch - 1;
            last = c->stages[i].name;
        }
    if (admitted >= need) return KP_OK;
    return kp__error(KP_ERR_INVALID_ARG,
                     "budget_bytes (%zu) admits %zu frames of %zu bytes; the micro-batching "
                     "stages (\"%s\" and any before it) need %zu, or frames would wait out each "
                     "batch's deadline: raise budget_bytes to %zu or lower max_batch",
                     c->budget_bytes, admitted, c->frame_bytes, last, need,
                     need * c->frame_bytes);
}

kp_status kp__flow_check_config(const kp_flow_config *c) {
    if (!c->dev) return kp__error(KP_ERR_INVALID_ARG, "dev is NULL");
    if (c->n_stages < 2 || c->n_stages > KP_FLOW_MAX_STAGES)
        return kp__error(KP_ERR_INVALID_ARG, "n_stages is %zu (2 .. %d)", c->n_stages,
                         KP_FLOW_MAX_STAGES);
    if (!c->stages) return kp__error(KP_ERR_INVALID_ARG, "stages is NULL");
    if (c->frame_bytes > KP__MAX_ALLOC_BYTES || c->budget_bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "frame_bytes or budget_bytes is too large");
    if (c->budget_bytes && c->budget_bytes < c->frame_bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "budget_bytes (%zu) is smaller than one frame (%zu bytes)",
                         c->budget_bytes, c->frame_bytes);
    if (c->spin_us > 1000000 || c->spin_us < -1)
        return kp__error(KP_ERR_INVALID_ARG, "spin_us is %d (-1 .. 1000000)", c->spin_us);
    if (c->trace_events > ((size_t)1 << 24))
        return kp__error(KP_ERR_INVALID_ARG, "trace_events is %zu (at most 2^24)",
                         c->trace_events);
    for (size_t i = 0; i < c->n_stages; i++) KP_CHECK(kp__check_stage(c, i));
    return kp__check_budget(c);
}

/* The index of dev in the flow's devices, added when new. */
static kp_status kp__device_index(struct kp_flow *f, kp_device_t dev, int *out) {
    for (size_t d = 0; d < f->n_devs; d++)
        if (f->devs[d] == dev) {
            *out = (int)d;
            return KP_OK;
        }
    if (f->n_devs == KP_FLOW_MAX_DEVICES)
        return kp__error(KP_ERR_INVALID_ARG, "flow: more than %d devices", KP_FLOW_MAX_DEVICES);
    f->devs[f->n_devs] = dev;
    *out = (int)f->n_devs++;
    return KP_OK;
}

/* How stage s takes frames from each other device: peer access is turned
 * on both ways where the devices have it; without it a copy goes through
 * host memory (said once). */
static kp_status kp__resolve_handoffs(struct kp_flow *f, kp__stage *s, kp_handoff want,
                                      bool *staging) {
    kp_device_t to = f->devs[s->dev_i];
    for (size_t d = 0; d < f->n_devs; d++) {
        if ((int)d == s->dev_i) continue;
        kp_device_t from = f->devs[d];
        bool can = false, back = false;
        KP_CHECK(kp_device_peer_access(to, from, want != KP_HANDOFF_STAGED, &can));
        if (can && want != KP_HANDOFF_STAGED)
            KP_CHECK(kp_device_peer_access(from, to, true, &back));
        kp_handoff how = want;
        if (want == KP_HANDOFF_AUTO) how = can ? KP_HANDOFF_COPY : KP_HANDOFF_STAGED;
        if (how == KP_HANDOFF_IN_PLACE && !can)
            return kp__error(KP_ERR_UNSUPPORTED,
                             "stage \"%s\": an in-place hand-over from %s needs peer access, "
                             "which %s lacks",
                             s->name, kp_device_name(from), kp_device_name(to));
        if (how == KP_HANDOFF_STAGED && !f->staged_logged && want == KP_HANDOFF_AUTO) {
            f->staged_logged = true;
            kp__log(KP_LOG_WARN,
                    "flow: %s cannot reach %s's memory (no peer access): frames between them go "
                    "through pinned host memory (counted as staged_frames)",
                    kp_device_name(to), kp_device_name(from));
        }
        if (how == KP_HANDOFF_STAGED) *staging = true;
        s->how[d] = how;
        s->auto_how[d] = want == KP_HANDOFF_AUTO && can;
        if (s->auto_how[d] && !s->probe.start[0])
            for (int k = 0; k < 2 * KP__PROBE_N; k++) {
                KP_CHECK(kp_event_create(to, &s->probe.start[k]));
                KP_CHECK(kp_event_create(to, &s->probe.end[k]));
            }
    }
    return KP_OK;
}

static kp_status kp__make_frames(struct kp_flow *f, bool staging) {
    kp_pool_config pc = KP_POOL_CONFIG_INIT;
    for (size_t d = 0; d < f->n_devs; d++)
        KP_CHECK(kp_buffer_pool_create(f->devs[d], &pc, &f->pools[d]));
    f->frames = kp__calloc(f->n_frames, sizeof *f->frames);
    if (!f->frames) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for frames");
    for (size_t i = 0; i < f->n_frames; i++) {
        kp__fframe *fr = &f->frames[i];
        fr->ev_dev = -1;
        for (size_t d = 0; d < f->n_devs; d++)
            KP_CHECK(kp_event_create_untimed(f->devs[d], &fr->ev[d]));
        if (staging && f->frame_bytes)
            KP_CHECK(kp_malloc_host(f->devs[0], f->frame_bytes, &fr->staging));
        fr->next_free = f->free_list;
        f->free_list = fr;
    }
    /* Every frame that can be in flight at once (all of them, or as many as
     * the budget holds) gets its buffers now, not at its first use in the
     * middle of a run: the list hands out the newest frames first, so those
     * are the ones with buffers. */
    size_t m = f->n_frames;
    if (f->budget && f->frame_bytes && f->budget / f->frame_bytes < m)
        m = f->budget / f->frame_bytes;
    for (size_t i = f->n_frames - m; i < f->n_frames; i++)
        KP_CHECK(kp__frame_buffer(f, &f->frames[i]));
    return KP_OK;
}

/* One thread of logical stage i: replica r on device dev. */
static kp_status kp__stage_init(struct kp_flow *f, kp__stage *s, const kp_flow_stage *cs, size_t i,
                                size_t r, kp_device_t dev) {
    s->flow = f;
    s->index = i;
    s->replica = r;
    s->probe.from = -1;
    KP_CHECK(kp__device_index(f, dev, &s->dev_i));
    snprintf(s->name, sizeof s->name, "%s", cs->name);
    s->fn = cs->fn;
    s->batch_fn = cs->batch_fn;
    s->end_fn = cs->end_fn;
    s->max_batch = cs->batch_fn ? cs->max_batch : 1;
    s->deadline_us = cs->deadline_us;
    s->user = cs->replica_users && cs->replica_users[r] ? cs->replica_users[r] : cs->user;
    if (s->batch_fn && (!(s->batch = kp__calloc(s->max_batch, sizeof *s->batch)) ||
                        !(s->batch_frames = kp__calloc(s->max_batch, sizeof *s->batch_frames))))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for a batch");
    s->ctx.dev = dev;
    s->ctx.name = s->name;
    s->ctx.index = i;
    s->ctx.replica = r;
    s->ctx.flow = f;
    KP_CHECK(kp_stream_create(dev, &s->ctx.stream));
    for (size_t k = 0; cs->n_replicas > 1 && k < KP__REP_DEPTH; k++)
        KP_CHECK(kp_event_create_untimed(dev, &s->issued[k]));
    for (size_t k = 0; k < KP__GPU_SLOTS; k++) {
        KP_CHECK(kp_event_create(dev, &s->gpu[k].start));
        KP_CHECK(kp_event_create(dev, &s->gpu[k].end));
    }
#ifdef KP_HAVE_CUDA
    if (f->nvtx) s->nvtx_name = nvtxDomainRegisterStringA(f->nvtx, s->name);
#endif
    return KP_OK;
}

/* The stages' threads, queues and reordering rings; then the frames. */
static kp_status kp__make_stages(struct kp_flow *f, const kp_flow_config *c) {
    f->n_devs = 1;
    f->devs[0] = c->dev;
    for (size_t i = 0; i < c->n_stages; i++)
        f->n_st += c->stages[i].n_replicas > 1 ? c->stages[i].n_replicas : 1;
    if (!(f->st = kp__calloc(f->n_st, sizeof *f->st)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for its stages");
    f->n_frames = 0; /* one in hand per thread, plus every queue slot */
    size_t k = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        const kp_flow_stage *cs = &c->stages[i];
        kp__lstage *ls = &f->ls[i];
        kp_device_t one;
        const kp_device_t *devs;
        ls->first = k;
        ls->n_rep = kp__stage_devices(c, i, &devs, &one);
        atomic_store(&ls->live, ls->n_rep);
        for (size_t r = 0; r < ls->n_rep; r++, k++)
            KP_CHECK(kp__stage_init(f, &f->st[k], cs, i, r, devs[r]));
        f->n_frames += ls->n_rep;
        if (i) {
            KP_CHECK(kp__queue_init(&f->q[i], cs->queue_capacity, cs->policy));
            if (ls->n_rep > 1 && cs->deal == KP_DEAL_ROUND_ROBIN) f->q[i].round_robin = ls->n_rep;
            f->n_frames += cs->queue_capacity;
        }
    }
    for (size_t i = 0; i < c->n_stages; i++) {
        kp__lstage *ls = &f->ls[i];
        if (ls->n_rep < 2) continue;
        if (pthread_mutex_init(&ls->ro_mu, NULL) != 0)
            return kp__error(KP_ERR_INTERNAL, "flow: cannot initialise a lock");
        ls->ro_init = true;
        ls->ro_cap = f->n_frames;
        if (!(ls->ro = kp__calloc(ls->ro_cap, sizeof *ls->ro)))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for reordering");
    }
    bool staging = false;
    for (size_t j = 0; j < f->n_st; j++)
        KP_CHECK(kp__resolve_handoffs(f, &f->st[j], c->stages[f->st[j].index].handoff, &staging));
    if (f->frame_bytes && f->n_frames > KP__MAX_ALLOC_BYTES / f->frame_bytes / f->n_devs)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: %zu frames of %zu bytes on %zu devices",
                         f->n_frames, f->frame_bytes, f->n_devs);
    return kp__make_frames(f, staging);
}

static kp_status kp__flow_create(const kp_flow_config *config, kp_flow_t *out);

/* The flow takes the stages' users that come with a free_fn: freed at
 * kp_flow_destroy, or here when creation fails. */
kp_status kp_flow_create(const kp_flow_config *config, kp_flow_t *out) {
    KP_API_ENTRY();
    kp_status st = kp__flow_create(config, out);
    const kp_flow_stage *cs =
        config && config->stages && config->n_stages <= KP_FLOW_MAX_STAGES ? config->stages : NULL;
    for (size_t i = 0; cs && i < config->n_stages; i++) {
        if (!cs[i].free_fn) continue;
        if (st == KP_OK)
            st = kp__flow_own(*out, cs[i].user, cs[i].free_fn);
        else
            cs[i].free_fn(cs[i].user);
    }
    if (st != KP_OK && out && *out) {
        kp_flow_destroy(*out);
        *out = NULL;
    }
    return st;
}

static kp_status kp__flow_create(const kp_flow_config *config, kp_flow_t *out) {
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(config);
    kp_flow_config c = KP_FLOW_CONFIG_INIT;
    KP_CHECK(kp__config_read(&c, sizeof c, config, KP__SIZE_THROUGH(kp_flow_config, budget_bytes),
                             "config", "KP_FLOW_CONFIG_INIT"));
    if (kp__flow_check_config(&c) != KP_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", kp_last_error());
        return kp__error(KP_ERR_INVALID_ARG, "config.%s", detail);
    }
    struct kp_flow *f = kp__calloc(1, sizeof *f);
    if (!f) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory");
    kp_status st = KP_OK;
    f->dev = c.dev;
    f->n = c.n_stages;
    f->frame_bytes = c.frame_bytes;
    f->budget = c.budget_bytes;
    f->trace_cap = c.trace_events;
    if (c.trace_events && !(f->trace = kp__calloc(c.trace_events, sizeof *f->trace))) {
        kp__free(f);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for the trace");
    }
    f->t_start_us = kp__now_us();
    if (pthread_mutex_init(&f->mu, NULL) != 0 || pthread_cond_init(&f->freed, NULL) != 0) {
        kp__free(f->trace);
        kp__free(f);
        return kp__error(KP_ERR_INTERNAL, "flow: cannot initialise its lock");
    }
#ifdef KP_HAVE_CUDA
    f->nvtx = nvtxDomainCreateA("kpipe flow"); /* NULL without a tool attached */
#endif
    KP_CHECK_GOTO(kp__make_stages(f, &c), st, fail);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    f->spin_us = c.spin_us < 0 ? 0 : c.spin_us ? c.spin_us : KP__SPIN_US;
    f->spin_yield = cpus <= (long)f->n_st;
    *out = f;
    return KP_OK;
fail:
    kp_flow_destroy(f);
    return st;
}

kp_status kp_flow_start(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    if (atomic_exchange(&f->started, true))
        return kp__error(KP_ERR_STATE, "the flow was started already");
    atomic_store(&f->running, (int)f->n_st);
    for (size_t i = 0; i < f->n_st; i++) {
        if (pthread_create(&f->st[i].thread, NULL, kp__stage_main, &f->st[i]) != 0) {
            /* the stages already running stop; the ones never started count as stopped */
            atomic_fetch_sub(&f->running, (int)(f->n_st - i));
            kp__fail(f, &f->st[i], kp__error(KP_ERR_INTERNAL, "cannot start its thread"));
            return KP_ERR_INTERNAL;
        }
        f->st[i].started = true;
    }
    return KP_OK;
}

/* Frames left in the reordering rings at a stop go back to the free list. */
static void kp__ring_drain(struct kp_flow *f, kp__lstage *ls) {
    for (size_t k = 0; ls->ro && k < ls->ro_cap; k++)
        if (ls->ro[k]) {
            kp__frame_put(f, ls->ro[k], false);
            ls->ro[k] = NULL;
        }
}

kp_status kp_flow_wait(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    if (!atomic_load(&f->started)) return kp__error(KP_ERR_STATE, "the flow was not started");
    if (!atomic_exchange(&f->waited, true)) {
        for (size_t i = 0; i < f->n_st; i++)
            if (f->st[i].started) pthread_join(f->st[i].thread, NULL);
        for (size_t i = 1; i < f->n; i++) kp__queue_drain(f, &f->q[i]);
        for (size_t i = 0; i < f->n; i++) kp__ring_drain(f, &f->ls[i]);
        for (size_t i = 0; i < f->n_st; i++) {
            kp_status st = kp_stream_sync(f->st[i].ctx.stream);
            if (st != KP_OK && f->status == KP_OK) {
                f->status = st;
                snprintf(f->error, sizeof f->error, "stage \"%s\": %s", f->st[i].name,
                         kp_last_error());
            }
            for (size_t k = 0; st == KP_OK && k < KP__GPU_SLOTS; k++)
                kp__gpu_harvest(&f->st[i], &f->st[i].gpu[k], true);
        }
    }
    if (f->status != KP_OK) return kp__error(f->status, "%s", f->error);
    if (atomic_load(&f->cancel)) return kp__error(KP_ERR_STATE, "the flow was cancelled");
    return KP_OK;
}

kp_status kp_flow_cancel(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    /* a flow whose stages have all stopped (end of stream) stays finished */
    if (atomic_load(&f->started) && atomic_load(&f->running) == 0) return KP_OK;
    atomic_store(&f->cancel, true);
    kp__wake_all(f);
    return KP_OK;
}

static int kp__cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* p50 and p99 of a stage's recent host (gpu false) or device times, over
 * its replicas. */
static void kp__latency(const struct kp_flow *f, const kp__lstage *ls, bool gpu, double *p50,
                        double *p99) {
    uint32_t v[KP__LAT_SAMPLES * KP_FLOW_MAX_REPLICAS];
    size_t k = 0;
    for (size_t r = 0; r < ls->n_rep; r++) {
        kp__stage *s = &f->st[ls->first + r];
        _Atomic uint32_t *ring = gpu ? s->gpu_lat : s->lat;
        uint64_t n = atomic_load(gpu ? &s->n_gpu_lat : &s->n_lat);
        size_t m = n < KP__LAT_SAMPLES ? (size_t)n : KP__LAT_SAMPLES;
        for (size_t i = 0; i < m; i++) v[k++] = atomic_load(&ring[i]);
    }
    *p50 = *p99 = 0;
    if (!k) return;
    qsort(v, k, sizeof *v, kp__cmp_u32);
    *p50 = v[(k - 1) / 2] / 10.0;
    *p99 = v[(size_t)((double)(k - 1) * 0.99)] / 10.0;
}

kp_status kp_flow_health(kp_flow_t f, kp_flow_snapshot *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && out);
    memset(out, 0, sizeof *out);
    out->n_stages = f->n;
    out->consistent = true;
    for (size_t i = 0; i < f->n; i++) {
        const kp__lstage *ls = &f->ls[i];
        kp_flow_stage_stats *o = &out->stages[i];
        o->name = f->st[ls->first].name;
        o->device = kp_device_name(f->st[ls->first].ctx.dev);
        o->replicas = ls->n_rep;
        /* counters move while we read: a stage's out is read after its in,
         * so in >= out holds for what we return */
        for (size_t r = 0; r < ls->n_rep; r++) o->in += atomic_load(&f->st[ls->first + r].in);
        for (size_t r = 0; r < ls->n_rep; r++) {
            o->out += atomic_load(&f->st[ls->first + r].out);
            o->batches += atomic_load(&f->st[ls->first + r].batches);
        }
        kp__latency(f, ls, false, &o->host_p50_us, &o->host_p99_us);
        kp__latency(f, ls, true, &o->gpu_p50_us, &o->gpu_p99_us);
        if (o->in < o->out) out->consistent = false;
        if (i) {
            kp__queue *q = &f->q[i];
            kp_flow_queue_stats *qs = &out->queues[i];
            qs->depth = atomic_load(&q->depth);
            qs->max_depth = atomic_load(&q->max_depth);
            qs->capacity = q->cap;
            qs->pushed = atomic_load(&q->pushed);
            qs->drops = atomic_load(&q->drops);
            qs->policy = q->policy;
        }
    }
    out->frames_in_flight = atomic_load(&f->in_flight);
    out->max_frames_in_flight = atomic_load(&f->max_in_flight);
    out->frame_limit = f->n_frames;
    out->bytes_in_flight = atomic_load(&f->bytes);
    out->peak_bytes_in_flight = atomic_load(&f->peak_bytes);
    out->budget_bytes = f->budget;
    out->frames_done = atomic_load(&f->done);
    out->frames_dropped = atomic_load(&f->dropped);
    if (out->max_frames_in_flight > f->n_frames) out->consistent = false;
    out->n_devices = f->n_devs;
    for (size_t d = 0; d < f->n_devs; d++) {
        kp_flow_device_stats *ds = &out->devices[d];
        kp_pool_stats ps = {0};
        ds->name = kp_device_name(f->devs[d]);
        ds->runs = atomic_load(&f->dev_runs[d]);
        if (kp_buffer_pool_stats(f->pools[d], &ps) != KP_OK) continue;
        ds->frame_bytes = ps.live_bytes + ps.cached_bytes;
        out->pool_hits += ps.hits;
        out->pool_misses += ps.misses;
        out->device_bytes += ds->frame_bytes;
    }
    out->pool_hit_rate = out->pool_hits + out->pool_misses
                             ? (double)out->pool_hits / (double)(out->pool_hits + out->pool_misses)
                             : 0.0;
    out->device_peak_bytes = f->n_frames * f->frame_bytes * f->n_devs;
    for (size_t a = 0; a < f->n_devs; a++)
        for (size_t b = 0; b < f->n_devs; b++) {
            const kp__link *l = &f->link[a][b];
            uint64_t frames = atomic_load(&l->frames);
            if (a == b || !frames) continue;
            kp_flow_link_stats *o = &out->links[out->n_links++];
            o->from = kp_device_name(f->devs[a]);
            o->to = kp_device_name(f->devs[b]);
            o->handoff = (kp_handoff)atomic_load(&l->kind);
            o->frames = frames;
            o->bytes = atomic_load(&l->bytes);
            uint64_t t0 = atomic_load(&l->t_first_ns), t1 = atomic_load(&l->t_last_ns);
            o->bytes_per_s = t1 > t0 ? (double)o->bytes * 1e9 / (double)(t1 - t0) : 0.0;
        }
    out->staged_frames = atomic_load(&f->staged);
    out->running = atomic_load(&f->started) && atomic_load(&f->running) > 0;
    /* a whole lap of frames finished since a frame last got a buffer */
    out->steady = out->frames_done >= atomic_load(&f->done_at_alloc) + f->n_frames;
    return KP_OK;
}

/* A JSON string's characters: quotes, backslashes and control bytes escaped. */
static void kp__json_escaped(FILE *out, const char *text) {
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
}

kp_status kp_flow_write_trace(kp_flow_t f, const char *path) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && path);
    if (!f->trace) return kp__error(KP_ERR_STATE, "the flow keeps no trace (trace_events is 0)");
    if (!atomic_load(&f->waited)) return kp__error(KP_ERR_STATE, "call kp_flow_wait first");
    FILE *out = fopen(path, "w");
    if (!out) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    uint64_t n = atomic_load(&f->trace_n), first = n > f->trace_cap ? n - f->trace_cap : 0;
    fprintf(out, "{\"traceEvents\": [\n");
    for (size_t i = 0; i < f->n_st; i++) { /* one named row per stage thread */
        const kp__stage *s = &f->st[i];
        fprintf(out,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %zu, "
                "\"args\": {\"name\": \"%zu ",
                i, s->index);
        kp__json_escaped(out, s->name);
        if (f->ls[s->index].n_rep > 1)
            fprintf(out, " [%zu] %s", s->replica, kp_device_name(s->ctx.dev));
        fprintf(out, "\"}},\n");
    }
    for (uint64_t k = first; k < n; k++) {
        struct kp__trace_ev *e = &f->trace[k % f->trace_cap];
        uint64_t t0 = atomic_load(&e->t0_ns), t1 = atomic_load(&e->t1_ns);
        fprintf(out,
                "{\"name\": \"frame %llu\", \"cat\": \"stage\", \"ph\": \"X\", \"pid\": 1, "
                "\"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"seq\": %llu}}%s\n",
                (unsigned long long)atomic_load(&e->seq), atomic_load(&e->stage), t0 / 1e3,
                (t1 - t0) / 1e3, (unsigned long long)atomic_load(&e->seq), k + 1 < n ? "," : "");
    }
    fprintf(out, "], \"displayTimeUnit\": \"ns\"}\n");
    if (fclose(out) != 0) return kp__error(KP_ERR_IO, "%s: writing failed", path);
    return KP_OK;
}

void kp_flow_destroy(kp_flow_t f) {
    if (!f) return;
    if (atomic_load(&f->started)) {
        (void)kp_flow_cancel(f);
        if (kp_flow_wait(f) != KP_OK) kp_clear_error();
    }
    for (size_t i = 0; f->st && i < f->n_st; i++) {
        for (size_t k = 0; k < KP__GPU_SLOTS; k++) {
            kp_event_destroy(f->st[i].gpu[k].start);
            kp_event_destroy(f->st[i].gpu[k].end);
        }
        for (size_t k = 0; k < KP__REP_DEPTH; k++) kp_event_destroy(f->st[i].issued[k]);
        for (int k = 0; k < 2 * KP__PROBE_N; k++) {
            kp_event_destroy(f->st[i].probe.start[k]);
            kp_event_destroy(f->st[i].probe.end[k]);
        }
        kp_stream_destroy(f->st[i].ctx.stream);
        kp__free(f->st[i].batch);
        kp__free(f->st[i].batch_frames);
    }
    for (size_t i = 0; i < f->n; i++) {
        if (i) kp__queue_fini(&f->q[i]);
        if (f->ls[i].ro_init) pthread_mutex_destroy(&f->ls[i].ro_mu);
        kp__free(f->ls[i].ro);
    }
    kp__free(f->st);
    for (size_t i = 0; f->frames && i < f->n_frames; i++) {
        kp__fframe *fr = &f->frames[i];
        for (size_t d = 0; d < f->n_devs; d++) {
            kp_event_destroy(fr->ev[d]);
            if (fr->buf[d]) kp_buffer_release(fr->buf[d]);
        }
        kp_free_host(f->devs[0], fr->staging);
    }
    kp__free(f->frames);
    for (size_t d = 0; d < f->n_devs; d++) kp_buffer_pool_destroy(f->pools[d]);
    for (size_t i = f->n_owned; i-- > 0;) f->owned[i].free_fn(f->owned[i].obj);
    kp__free(f->trace);
#ifdef KP_HAVE_CUDA
    if (f->nvtx) nvtxDomainDestroy(f->nvtx);
#endif
    pthread_cond_destroy(&f->freed);
    pthread_mutex_destroy(&f->mu);
    kp__free(f);
}
