/* The flow runtime (src/flow/runtime/, the lowest of the flow layers:
 * runtime < stages < remote < json) and its own: the frame, queue, stage
 * and flow structures and the functions its files share. Only the
 * runtime's files include it; the flow layers above see flows through
 * flow-impl.h. The files call each other in one direction, from the
 * public calls down: flow, stage, route and devices, queue, frames, spin,
 * each calling only files after it (health.c is called from stage and
 * flow; kinds.c, the kinds of stage, from flow, health and the layers
 * above).
 *
 * Frames live in a free list made at creation. A source takes one (waiting
 * while none is free or the byte budget would be passed), its stage function
 * fills it, and it moves stage to stage through the queues; the sink, or a
 * drop, puts it back. Each frame has one event per device: every stage
 * records it on its stream after its work and the next user (the next
 * stage, or the source reusing the frame) makes its own stream wait for it,
 * so the device orders the hand-overs and the host never waits for them. A
 * frame keeps its pool buffers across reuse: after the first lap nothing is
 * allocated.
 *
 * Hand-overs: a queue between two single stages (one thread feeding it, one
 * taking from it, blocking or dropping the newest) is a lock-free ring;
 * one that replicas or several upstream stages share, or that drops the
 * oldest, has a mutex. The free list is a lock-free stack. A thread that
 * finds nothing to take spins a while, then sleeps on a futex (kp__wake).
 * The per-frame path between single stages takes no lock.
 *
 * Locks: each shared queue has its mutex; the flow's guards its error. No
 * lock is held while a stage function runs, and no thread holds two locks.
 * Counters read by kp_flow_health are atomics. */
#ifndef KPIPE_FLOW_RUNTIME_IMPL_H
#define KPIPE_FLOW_RUNTIME_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "flow-impl.h"
#ifdef KP_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

#define KP__MAX_QUEUE 1024
#define KP__LAT_SAMPLES 1024 /* host-time samples kept per stage */
#define KP__STREAM_LAT 256   /* end-to-end latency samples kept per source stream */
#define KP__LAT_PENDING 8    /* a last stage's latency samples waiting for the device */
/* One run in about this many is timed on the host (every one while the
 * flow traces): two clock reads are most of what an empty stage costs. The
 * gaps between timed runs are random (0 .. 2 * KP__TIME_EVERY - 2 runs),
 * so a stage whose runs alternate in cost is not sampled on one kind. */
#define KP__TIME_EVERY 8
#define KP__SPIN_US 20       /* spin before sleeping (spin_us 0) */
#define KP__GPU_EVERY 8      /* one frame in this many gets its device time measured */
#define KP__REQUERY 64       /* a busy stage queries its stream once in this many frames */
#define KP__GPU_SLOTS 4      /* measurements in flight per stage */
#define KP__REP_DEPTH 2      /* frames a replica has on its device at most: one runs, one waits */
#define KP__PROBE_N 8        /* frames timed per way of an automatic hand-over */
#define KP__CARRY_US 20      /* kp_flow_config.carry_us 0 */
/* A stage that copies its frames to several stages (KP_ROUTE_COPY) has up
 * to this many copies per stage downstream and per thread in flight, from
 * frames set apart for it: the frames upstream of it can never starve it
 * of frames to copy into (which would stop the flow), and a copy waits
 * only for the stages downstream. */
#define KP__COPY_DEPTH 2
/* Carrying into a stage (kp__stage) costs the carrying thread the stage's
 * run; queueing the frame instead costs it a store while the stage's thread
 * is awake, a futex wake (a system call) while it sleeps. So a stage
 * is carried into: */
#define KP__CARRY_ALWAYS_NS 200 /* ... always, when its runs are this short; */
#define KP__CARRY_WAKE_NS 3000  /* ... when its thread sleeps, this short: a wake costs as much; */
/* ... and when its thread sleeps and its runs are within carry_us. Into a
 * sleeping thread's stage only where the carrying one has nothing queued
 * for itself, and never one frame in this many, which wakes the thread
 * instead: */
#define KP__CARRY_PROBE 1024

typedef struct kp__fframe {
    kp_frame f;
    kp_buffer_t buf[KP_FLOW_MAX_DEVICES]; /* one per device of the flow */
    kp_event_t ev[KP_FLOW_MAX_DEVICES];   /* one per device: an event records on its own */
    int ev_dev;                           /* the event marking work to wait for; -1: none */
    int loc;                              /* the device whose buffer holds the frame */
    void *staging;                        /* pinned host memory, for staged hand-overs */
    uint64_t ticket;                      /* its place in a replicated stage's order */
    /* when its source handed it on (kp__now_us), on the frames whose source
     * run was timed (KP__TIME_EVERY); 0: not sampled for the stream's
     * end-to-end latency (kp_flow_stream_stats) */
    double made_us;
    uint16_t copy_of; /* a copy made by logical stage copy_of - 1 (KP_ROUTE_COPY); 0: none */
    _Atomic uint32_t next_free;           /* the free stack's next: index + 1; 0: none */
} kp__fframe;

typedef struct kp__queue {
    char pad_[64]; /* queues apart: each on cache lines of its own */
    kp__fframe **ring;
    size_t cap;
    kp_queue_policy policy;
    bool spsc; /* the lock-free single-producer single-consumer form */
    _Atomic bool closed;
    /* the lock-free form: the consumer's line, then the producer's. Each
     * keeps the last value it read of the other's index, and reads the
     * shared one again only when its copy says empty (full). */
    char pad_c[64];
    _Atomic size_t sp_head;
    size_t sp_tail_seen;
    kp__wake sp_not_full;
    char pad_p[64];
    _Atomic size_t sp_tail;
    size_t sp_head_seen;
    kp__wake sp_not_empty;
    char pad_e[64];
    /* the locked form */
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    size_t head, count;
    bool mu_init;
    uint64_t tickets;   /* frames popped: the next one's ticket */
    size_t round_robin; /* replicas taking turns (0: any consumer takes) */
    _Atomic size_t open_in; /* upstream stages not yet ended: it closes at 0 */
    _Atomic size_t depth, max_depth;
    _Atomic uint64_t pushed, drops;
    _Atomic uint64_t carried; /* frames carried past it (stage.c): pushed, for health */
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
    _Atomic uint64_t in, out, runs; /* runs: on its device, for kp_flow_health */
    _Atomic uint32_t lat[KP__LAT_SAMPLES]; /* tenths of a microsecond */
    _Atomic uint64_t n_lat;
    uint32_t time_gap, time_rng; /* runs before the next timed one; its random state */
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
    uint64_t busy_runs; /* runs while busy: the stream is queried on every KP__REQUERY-th */
    /* host<->device copies made while it ran (kp_copy_count_watch) */
    _Atomic uint64_t cp_htod, cp_dtoh, cp_htod_bytes, cp_dtoh_bytes;
    _Atomic uint32_t gpu_lat[KP__LAT_SAMPLES];
    _Atomic uint64_t n_gpu_lat;
#ifdef KP_HAVE_CUDA
    nvtxStringHandle_t nvtx_name; /* the stage's name, registered once */
#endif
    /* Carrying (stage.c). A frame done at a single stage whose one
     * downstream stage is single too, on the same device, may be run on
     * through that stage by the same thread, instead of being queued for
     * the stage's own thread: when the stage is idle with nothing queued,
     * and either its runs are very short or its thread is asleep and its
     * runs are short (kp_flow_config.carry_us). A stage that may be carried
     * into runs only under `held`, which its own thread or the carrying one
     * takes; its own thread keeps it once it has stopped. */
    struct kp__stage *carry_to; /* the stage frames may be carried into; NULL: none */
    bool carry_in;              /* frames may be carried into this one */
    _Atomic size_t held;       /* 1 while a thread runs it, 2 while its own thread
                                  sleeps for it (stage.c; a size_t: spun on) */
    kp__wake hold_free;        /* its own thread, waiting for `held` */
    _Atomic uint32_t cost_ns;  /* its host time per run, a moving average */
    uint32_t carry_probe;      /* frames carried into it past a sleeping thread */
    bool backlog; /* a source's: its next frame was there already (kp__flow_source_backlog) */
    /* A last stage's latency samples for frames with device work still
     * pending: a host function stamps each once the work is done (a slot
     * still busy skips the sample), on a stream of its own (lat_stream),
     * which waits for the frame's event. On the stage's stream it held
     * the stage's next work until the driver's host thread had run it:
     * 50-60 us on the sampled frames (one in KP__TIME_EVERY), a remote
     * sink's CUDA IPC copies idle 12 us a frame on average (2 x H200,
     * 8 MiB frames, bench/RESULTS.md). */
    struct kp__lat_slot {
        struct kp_flow *flow;
        double made_us;
        uint32_t stream;
        _Atomic bool busy;
    } lat_pend[KP__LAT_PENDING];
    unsigned lat_pend_next;
    kp_stream_t lat_stream; /* a last stage's (kp__flow_latency_end); NULL elsewhere */
} kp__stage;

/* A logical stage: its replicas (threads) and, when there are several, the
 * reordering of their frames back into the order they came in. */
typedef struct kp__lstage {
    size_t first, n_rep; /* its threads: flow->st[first .. first + n_rep) */
    bool source;         /* makes frames; has no queue (its q[] is unused) */
    uint32_t stream_base;         /* a source: its first stream id */
    kp_route route;               /* with several stages downstream */
    size_t n_out;                 /* the stages downstream; 0: a sink */
    uint16_t out[KP_FLOW_MAX_STAGES];
    _Atomic size_t live; /* replicas still running */
    pthread_mutex_t ro_mu;
    kp__fframe **ro; /* ring of frames done out of turn, by ticket */
    size_t ro_cap;
    uint64_t ro_next; /* the ticket to pass on next */
    bool ro_pushing;  /* a replica is passing frames on */
    size_t copy_quota;            /* KP_ROUTE_COPY: its copies in flight at most */
    _Atomic size_t copies_out;    /* ... and now */
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
    kp__queue q[KP_FLOW_MAX_STAGES]; /* q[i] feeds stage i; a source's is unused */
    size_t n_devs;
    kp_device_t devs[KP_FLOW_MAX_DEVICES]; /* devs[0] is the flow's */
    kp_buffer_pool_t pools[KP_FLOW_MAX_DEVICES];
    kp__link link[KP_FLOW_MAX_DEVICES][KP_FLOW_MAX_DEVICES];
    bool staged_logged;
    _Atomic uint64_t staged;
    size_t frame_bytes, budget;
    size_t n_streams;                /* the sources' streams, over all sources */
    _Atomic uint64_t *stream_drops; /* n_streams of them */
    /* each stream's end-to-end latency samples (KP__STREAM_LAT a stream,
     * tenths of a microsecond) and how many were written */
    _Atomic uint32_t *stream_lat;
    _Atomic uint64_t *stream_nlat;
    kp__fframe *frames;
    size_t n_frames;

    pthread_mutex_t mu; /* the error */
    /* held by kp_flow_start while it makes the threads and by kp_flow_wait
     * while it joins them: a second waiter blocks until the first is done */
    pthread_mutex_t wait_mu;
    /* the free frames: a lock-free stack, its top as (tag << 32) | (index
     * + 1), the tag against a frame leaving and coming back between a
     * taker's read and its swap. A taker first reserves a place in
     * in_flight below frame_limit (the frames, or as many as the budget
     * holds), so the stack then has a frame for it. */
    _Atomic uint64_t free_top;
    size_t frame_limit;
    size_t copy_reserve; /* of frame_limit, set apart for copies: the copy_quota of all stages */
    kp__wake freed;
    _Atomic size_t in_flight, max_in_flight; /* bytes: these times frame_bytes */
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
    bool strict_copies; /* kp_flow_config.strict_no_host_copies */
    bool spin_yield; /* more threads than cores: a spin yields the core */
    uint32_t carry_ns; /* kp_flow_config.carry_us in ns, resolved; 0: never carry */
#ifdef KP_HAVE_CUDA
    nvtxDomainHandle_t nvtx; /* "kpipe flow" */
#endif
    /* objects the flow owns (its JSON reader's stages and devices), freed
     * last, the devices after the pools */
    struct kp__owned {
        void *obj;
        void (*free_fn)(void *);
        bool device; /* closed after the pools made on it (kp__flow_own_device) */
    } owned[KP_FLOW_MAX_STAGES * (KP_FLOW_MAX_REPLICAS + 1) + KP_FLOW_MAX_DEVICES];
    size_t n_owned;
};

/* The copies in flight a stage with n_down stages downstream may have
 * (KP_ROUTE_COPY, KP__COPY_DEPTH); 0 for other stages. */
size_t kp__flow_copy_quota(const kp_flow_stage *s, size_t n_down);

static inline double kp__now_us(void) { return (double)kp__mono_ns() * 1e-3; }

static inline uint64_t kp__now_ns(void) { return kp__mono_ns(); }

/* Adds to a counter only its own thread writes (others read it): a plain
 * load and store, no locked instruction on the per-frame path. */
static inline void kp__bump(_Atomic uint64_t *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* A time in microseconds as the latency rings keep it: tenths, clamped. */
static inline uint32_t kp__tenths(double us) {
    const double t = us * 10.0;
    return t > 4e9 ? 4000000000u : t < 0 ? 0 : (uint32_t)t;
}

static inline void kp__atomic_max(_Atomic size_t *m, size_t v) {
    size_t cur = atomic_load(m);
    while (v > cur && !atomic_compare_exchange_weak(m, &cur, v)) {
    }
}

/* --- spinning (spin.c; sleeping until woken is in flow-impl.h) ---------- */
/* Spins while *v == blocked (a queue empty or full), up to the flow's spin
 * time, so that a hand-over arriving within it costs no sleep and wake-up
 * of a thread (a futex round trip of several microseconds). The caller
 * then takes the lock and checks for itself. */
void kp__flow_spin_while(struct kp_flow *f, _Atomic size_t *v, size_t blocked);
/* Takes a lock; a spinning flow tries it a while first, as the thread that
 * just changed what we spun on still holds it: sleeping on it would cost
 * both threads a futex call. */
void kp__flow_lock(struct kp_flow *f, pthread_mutex_t *mu);

/* --- queues (queue.c) -------------------------------------------------- */
/* A queue of `cap` frames by `policy`; kp__queue_fini frees it. `spsc`:
 * one thread pushes and one pops, and the policy is not drop-oldest. */
kp_status kp__queue_init(kp__queue *q, size_t cap, kp_queue_policy policy, bool spsc);
void kp__queue_fini(kp__queue *q);
/* Pushes by the queue's policy. A frame that does not get in (dropped, or
 * the flow cancelled) goes back to the free list. */
void kp__queue_push(struct kp_flow *f, kp__queue *q, kp__fframe *fr);
/* The next frame for replica r (0 unless replicated); NULL at end of stream
 * (closed and empty) or on cancel. */
kp__fframe *kp__queue_pop(struct kp_flow *f, kp__queue *q, size_t r);
/* A frame if one arrives before `deadline` (CLOCK_MONOTONIC); NULL at the
 * deadline, at end of stream or on cancel. */
kp__fframe *kp__queue_pop_until(struct kp_flow *f, kp__queue *q, const struct timespec *deadline);
/* For a lock-free ring's consumer: waits until a frame is there (true),
 * or the queue is closed and empty or the flow cancelled (false). Takes
 * nothing. */
bool kp__queue_wait_ready(struct kp_flow *f, kp__queue *q);
/* Whether no frame waits in the queue (any form; a moment's view; for a
 * lock-free ring's producer, every frame it pushed has been taken). */
bool kp__queue_empty(kp__queue *q);
/* For a lock-free ring's producer: whether its consumer sleeps waiting. */
bool kp__queue_consumer_asleep(kp__queue *q);
/* End of stream (or a stop): wakes every thread waiting on the queue. */
void kp__queue_close(kp__queue *q);
/* Frames still queued at the end go back to the free list. */
void kp__queue_drain(struct kp_flow *f, kp__queue *q);
/* Frames queued now and ever pushed, for kp_flow_health. */
void kp__queue_counts(kp__queue *q, size_t *depth, uint64_t *pushed);

/* --- frames (frames.c) ------------------------------------------------- */
/* Puts a frame back; the next taker waits for its event on its own stream. */
void kp__frame_put(struct kp_flow *f, kp__fframe *fr, bool dropped);
/* Takes a free frame within the budget; NULL once cancelled. */
kp__fframe *kp__frame_take(struct kp_flow *f);
/* A frame for a copy by logical stage i (KP_ROUTE_COPY), within its
 * copy_quota; NULL once the flow is cancelled. */
kp__fframe *kp__frame_take_copy(struct kp_flow *f, size_t i);
/* A frame's buffers, one on each device of the flow from its pool, kept
 * for the flow's life. Creation gives them to every frame that can be in
 * flight at once; a frame past that (the budget's doing) gets its own here,
 * on first use. */
kp_status kp__frame_buffer(struct kp_flow *f, kp__fframe *fr);
/* The frame's buffer on device d (NULL for frames without one). */
void *kp__frame_data(const kp__fframe *fr, int d);
/* The flow's frames, with their events, pools and (staging) pinned memory. */
kp_status kp__flow_make_frames(struct kp_flow *f, bool staging);

/* --- devices and replicas (devices.c) ---------------------------------- */
/* Brings a frame made on another device to stage s, on s's stream (which
 * already waits for the frame's earlier work), by the link's kind. */
kp_status kp__flow_handoff(kp__stage *s, kp__fframe *fr);
/* Once every timed frame has finished: the way with the lower median
 * stays (in place only where it is faster). A failed measurement keeps
 * the copy. */
void kp__flow_probe_decide(kp__stage *s);
/* A replica takes its next frame only once its device has finished all
 * but KP__REP_DEPTH - 1 of its earlier ones: frames then go to the replica
 * whose device has room, not to the thread that happens to ask first (the
 * host enqueues far faster than a device runs). */
kp_status kp__flow_replica_room(kp__stage *s);
/* Marks a replica's frame as issued on its device (see kp__flow_replica_room). */
kp_status kp__flow_replica_issued(kp__stage *s);
/* The index of dev in the flow's devices, added when new. */
kp_status kp__flow_device_index(struct kp_flow *f, kp_device_t dev, int *out);
/* How stage s takes frames from each other device: peer access is turned
 * on both ways where the devices have it; without it a copy goes through
 * host memory (said once). */
kp_status kp__flow_resolve_handoffs(struct kp_flow *f, kp__stage *s, kp_handoff want,
                                    bool *staging);
/* Frames left in the reordering rings at a stop go back to the free list. */
void kp__flow_ring_drain(struct kp_flow *f, kp__lstage *ls);

/* --- where a frame goes, and failing (route.c) -------------------------- */
/* Passes a processed frame on, or finishes it at the sink. A replicated
 * stage's frames go on in ticket order: a frame done out of turn waits in
 * the ring, and one replica at a time passes on what is in turn, without
 * holding the ring's lock while it pushes (which may block). The ring never
 * overflows: its tickets are of frames in flight, fewer than its size. */
void kp__flow_forward(kp__stage *s, kp__fframe *fr);
/* A frame done at s's logical stage goes on downstream (routed when
 * several stages are), or, at a sink, back to the free list, its stream's
 * end-to-end latency sampled (kp__flow_latency_end). */
void kp__flow_pass_on(kp__stage *s, kp__fframe *fr);
/* A sampled frame (made_us) has ended at s: its latency is stamped now
 * when no device work of it is pending, else by a host function on s's
 * stream once that work is done. */
void kp__flow_latency_end(kp__stage *s, kp__fframe *fr);
/* Closes every queue and wakes the sources, so that every thread stops. */
void kp__flow_wake_all(struct kp_flow *f);
/* The first error wins; it cancels the flow. */
void kp__flow_fail(struct kp_flow *f, kp__stage *s, kp_status st);

/* --- stage threads (stage.c) ------------------------------------------- */
/* Reads a completed device-time measurement; false while it is running.
 * `force` (after the streams are synchronised) reads it regardless. */
bool kp__flow_gpu_harvest(kp__stage *s, struct kp__gpu_slot *g, bool force);
/* A stage thread: its loop, its end function, then end of stream downstream. */
void *kp__flow_stage_main(void *arg);
/* One thread of logical stage i: replica r on device dev. */
kp_status kp__flow_stage_init(struct kp_flow *f, kp__stage *s, const kp_flow_stage *cs, size_t i,
                              size_t r, kp_device_t dev);

/* --- health (health.c) ------------------------------------------------- */
/* One stage run into the trace ring (lock-free; the oldest is overwritten). */
void kp__flow_trace(kp__stage *s, uint64_t seq, double t0, double t1);
/* NVTX: one range per stage run, named by the stage, its payload the
 * first frame's sequence number (its colour tells the stages apart in
 * Nsight Systems). Without a tool attached each call is a test and a
 * return; nothing is formatted per frame. */
void kp__flow_nvtx_push(kp__stage *s, uint64_t seq, size_t n);
/* Ends the range kp__flow_nvtx_push began. */
void kp__flow_nvtx_pop(kp__stage *s);

#endif
