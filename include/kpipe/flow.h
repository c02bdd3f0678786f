/* kpipe flows: stages on threads, each with its own stream, joined by
 * bounded queues. In the chain form frames go from the first stage (the
 * source) through every stage in order to the last (the sink); a flow may
 * also be a graph: several sources (each of one or more streams) feeding
 * one stage, a stage routing its frames to several (kp_flow_stage.from,
 * .source, .streams, .route; docs/flows.md, "Flows as graphs"). A full
 * queue blocks its producer
 * (backpressure) or drops a frame by policy, counted. A frame passes from one
 * stage's stream to the next through an event: the host never waits for the
 * device to hand a frame over.
 *
 *   static kp_status source(void *u, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
 *       if (done) { *eos = true; return KP_OK; }
 *       ...fill f->data (f->capacity bytes, device memory) on c->stream, set f->bytes...
 *   }
 *   kp_flow_stage st[3] = {{"decode", source, &src}, {"infer", infer, &m, 4},
 *                          {"encode", sink, &out, 4}};
 *   kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
 *   cfg.dev = dev;  cfg.stages = st;  cfg.n_stages = 3;  cfg.frame_bytes = 1 << 20;
 *   kp_flow_t f;
 *   kp_flow_create(&cfg, &f);
 *   kp_flow_start(f);
 *   kp_flow_wait(f);              // end of stream, an error, or kp_flow_cancel
 *   kp_flow_destroy(f);
 *
 * End of stream is the source saying so: each stage closes the queue after it
 * once its own queue is closed and empty. kp_flow_cancel stops every stage
 * after the frame it is working on. A stage's error stops the flow, and
 * kp_flow_wait returns it prefixed with the stage's name.
 *
 * Frames come from a fixed set made at creation, with their buffers from
 * the device's bucketed pool (as many as the byte budget lets be in flight
 * at once): a run allocates nothing. Frames in flight (taken by the source and
 * not yet done at the sink or dropped) never exceed the sum of the queue
 * capacities plus one per stage; with a byte budget, their bytes never exceed
 * it: the source waits.
 *
 * Stages may sit on different devices of one backend (kp_flow_stage.dev),
 * or run as replicas on several (replicas, n_replicas): a frame made on
 * one device reaches a stage on another by kp_flow_stage.handoff, and a
 * replicated stage's frames leave it in the order they came. Every frame
 * holds a buffer and an event on every device of the flow. A remote queue
 * (kp_flow_remote_source / _sink, UCX) joins a flow's sink to another
 * process's source.
 */
#ifndef KPIPE_FLOW_H
#define KPIPE_FLOW_H

#include "kpipe/memory.h"
#include "kpipe/video.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_flow *kp_flow_t;

#define KP_FLOW_MAX_STAGES 64
#define KP_FLOW_MAX_STREAMS 256 /* threads of one source (kp_flow_stage.streams) */
#define KP_FLOW_MAX_DEVICES 8  /* distinct devices in one flow */
#define KP_FLOW_MAX_REPLICAS 8 /* of one stage */
#define KP_FLOW_MAX_LINKS (KP_FLOW_MAX_DEVICES * (KP_FLOW_MAX_DEVICES - 1))
#define KP_FLOW_MAX_DEADLINE_US 10000000 /* a micro-batch's deadline: 10 s at most */

/* What a queue does when it is full. */
typedef enum kp_queue_policy {
    KP_QUEUE_BLOCK = 0,       /* the producer waits: backpressure (the default) */
    KP_QUEUE_DROP_OLDEST = 1, /* the oldest queued frame is dropped for the new one */
    KP_QUEUE_DROP_NEWEST = 2, /* the new frame is dropped */
} kp_queue_policy;

/* "block", "drop_oldest", "drop_newest"; "invalid" otherwise. */
const char *kp_queue_policy_str(kp_queue_policy p);

/* How a frame made on one device reaches a stage on another. */
typedef enum kp_handoff {
    /* a copy where the devices reach each other (peer access), else staged */
    KP_HANDOFF_AUTO = 0,
    /* one copy into the consumer's buffer, on its stream: peer to peer where
     * the devices reach each other, else as the backend can */
    KP_HANDOFF_COPY = 1,
    /* no copy: the stage reads and writes the producer's buffer in place
     * (needs peer access) */
    KP_HANDOFF_IN_PLACE = 2,
    /* two copies through pinned host memory, on the consumer's stream */
    KP_HANDOFF_STAGED = 3,
} kp_handoff;

/* "auto", "copy", "in_place", "staged"; "invalid" otherwise. */
const char *kp_handoff_str(kp_handoff h);

/* How a replicated stage's frames are dealt to its replicas. */
typedef enum kp_deal {
    KP_DEAL_LEAST_LOADED = 0, /* to the first replica free to take one */
    KP_DEAL_ROUND_ROBIN = 1,  /* to replicas 0, 1, .., n-1, 0, .. in turn */
} kp_deal;

/* Where a stage with several downstream stages sends each frame: to the
 * downstream stage k = (the field) % (their number), counted in the order
 * of the stages array; or to all of them. */
typedef enum kp_route {
    KP_ROUTE_STREAM = 0, /* by kp_frame.stream: each stream keeps its own path */
    KP_ROUTE_USER0 = 1,  /* by kp_frame.user[0], which a stage before sets */
    /* to every downstream stage: the first takes the frame, each other a
     * copy in a frame of the flow's own (its bytes in use, kp_frame.bytes,
     * copied on the routing stage's stream, device to device; its fields
     * as they are). A copying stage has up to 2 copies per branch (and per
     * thread) in flight, from frames set apart for it (a budget must hold
     * them); a copy waits only for its own branch, and counts as a frame
     * of its own in frames_done and in drops. */
    KP_ROUTE_COPY = 2,
} kp_route;

/* "stream", "user0", "copy"; "invalid" otherwise. */
const char *kp_route_str(kp_route r);

/* One frame as a stage sees it. Stages may rewrite everything but seq,
 * data and capacity. */
typedef struct kp_frame {
    uint64_t seq;        /* its stream's order, from 0 (each stream of each source counts its own) */
    void *data;          /* the frame's buffer: on the stage's device, or (handed over in
                          * place) the producer's; NULL without one */
    size_t capacity;     /* its bytes (the flow's frame_bytes) */
    size_t bytes;        /* bytes in use */
    kp_tensor_desc desc; /* what it holds, as the stages agree */
    int64_t user[4];     /* free for the stages */
    /* A video frame's format, size, pitch and timestamps, set by a video
     * source and read by a video sink; stages between keep it (format
     * KP_PIXEL_NONE: not video). */
    kp_video_frame video;
    /* The stream it belongs to: a source's thread r makes frames of stream
     * (the source's first stream) + r, counted over the flow's sources in
     * the order of the stages array (kp_flow_stage.streams). */
    uint32_t stream;
    /* Set by a source on the first frame after a gap in its input (a live
     * source that reconnected): the frames before it are not the ones just
     * before in time. Stages keep it. */
    bool discontinuity;
} kp_frame;

/* A stage's own resources, for the work it enqueues. */
typedef struct kp_stage_ctx {
    kp_device_t dev;    /* the stage's (or replica's) device, current on its thread */
    kp_stream_t stream; /* the stage's stream: work on the frame goes here */
    const char *name;
    size_t index;   /* position in the stages array */
    size_t replica; /* which replica of the stage, or which stream of a source, from 0 */
    kp_flow_t flow; /* for kp_flow_cancelled */
} kp_stage_ctx;

/* Whether the flow is being cancelled: a stage function that waits on
 * something outside the flow (a socket, a file) polls this and returns. */
bool kp_flow_cancelled(kp_flow_t f);

/* A stage's work on one frame. A source gets a fresh frame and `eos`:
 * setting *eos ends its stream (the frame is discarded). Other stages get
 * eos NULL. The frame's earlier work on other streams is ordered
 * before the stage's stream already; enqueue on ctx->stream and return
 * without waiting for the device. */
typedef kp_status (*kp_flow_stage_fn)(void *user, const kp_stage_ctx *ctx, kp_frame *frame,
                                      bool *eos);

/* A micro-batching stage's work on n frames (1 .. max_batch) at once, in
 * order; as kp_flow_stage_fn otherwise. */
typedef kp_status (*kp_flow_batch_fn)(void *user, const kp_stage_ctx *ctx, kp_frame *const *frames,
                                      size_t n);

/* Optional: runs once on each stage thread as it stops, after its last
 * frame. `why` is KP_OK at end of stream, KP_ERR_STATE when the flow was
 * cancelled, another status when a stage failed. An error returned at end
 * of stream fails the flow. */
typedef kp_status (*kp_flow_end_fn)(void *user, const kp_stage_ctx *ctx, kp_status why);

typedef struct kp_flow_stage {
    const char *name; /* for errors and health; copied */
    kp_flow_stage_fn fn;
    void *user;
    size_t queue_capacity;  /* the queue in front of the stage (1..1024); unused for stage 0 */
    kp_queue_policy policy; /* of that queue */
    /* Micro-batching (not for stage 0): batch_fn instead of fn gets up to
     * max_batch frames (2 .. queue_capacity), collected until the batch is
     * full or deadline_us after its first frame arrived, whichever comes
     * first (deadline_us at most KP_FLOW_MAX_DEADLINE_US); end of stream
     * flushes a partial batch. With a byte budget, the budget must admit
     * 1 + the sum of (max_batch - 1) over the micro-batching stages
     * frames: were fewer admitted, every frame could sit in a partial batch
     * waiting out its deadline, and kp_flow_create refuses that. */
    kp_flow_batch_fn batch_fn;
    size_t max_batch;
    uint32_t deadline_us;
    kp_flow_end_fn end_fn;
    /* Placement: the device the stage runs on (NULL: the flow's), of the
     * flow's backend. A frame from another device reaches it by `handoff`. */
    kp_device_t dev;
    kp_handoff handoff;
    /* Replicas (not for stage 0, not with micro-batching): the stage runs
     * once on each of n_replicas devices (2 .. KP_FLOW_MAX_REPLICAS; dev
     * unused), each on its own thread and stream; replica r gets
     * replica_users[r] (NULL: user for all). Frames are dealt by `deal` and
     * leave the stage in the order they came. */
    const kp_device_t *replicas;
    size_t n_replicas;
    void *const *replica_users;
    kp_deal deal;
    /* Optional: the flow owns `user` and frees it with free_fn when it is
     * destroyed, or when kp_flow_create fails. */
    void (*free_fn)(void *user);
    /* Flows as graphs (docs/flows.md, "Flows as graphs"). The stages this
     * one takes frames from, by name, each before it in the array (so the
     * array is the graph in order and has no cycles). n_from 0: the stage
     * just before it (the chain form); none for a source. With several,
     * their frames meet in this stage's one queue, and its end of stream
     * comes once every one of them has ended. */
    const char *const *from;
    size_t n_from;
    /* A source: it takes no frames, it makes them (stage 0 always is). */
    bool source;
    /* A source's streams: it runs on `streams` threads (0: one; at most
     * KP_FLOW_MAX_STREAMS), each on its own stream of the stage's device;
     * thread r gets stream_users[r] (NULL: user) and ctx->replica r, and
     * its frames kp_frame.stream (the source's first stream id) + r. The
     * source ends once every thread has set *eos. */
    size_t streams;
    void *const *stream_users;
    /* With several stages downstream (stages that name this one in
     * `from`, or the next in the chain form), where each frame goes. */
    kp_route route;
} kp_flow_stage;

typedef struct kp_flow_config {
    size_t struct_size; /* sizeof(kp_flow_config) */
    kp_device_t dev;
    const kp_flow_stage *stages;
    size_t n_stages;     /* 2 .. KP_FLOW_MAX_STAGES */
    size_t frame_bytes;  /* each frame's buffer; 0: frames carry none */
    size_t budget_bytes; /* frame bytes in flight; 0: no budget */
    /* Trace: the last trace_events stage runs (stage, frame, start, end)
     * kept for kp_flow_write_trace, in a ring made here; 0: no trace. */
    size_t trace_events;
    /* Microseconds a stage spins on an empty (or, under block, full) queue
     * before it sleeps: a frame handed over within that time costs no
     * thread wake-up (a futex round trip of several microseconds). The
     * cost: each waiting stage keeps a core busy for up to spin_us per
     * wait. Where the flow's threads are at least as many as the host's
     * cores, a spinning stage yields its core (sched_yield) between looks,
     * so it never holds off the stage it waits for. A spin that finds its
     * thread was taken off the core (the host busy with other work) stops,
     * and that thread sleeps without spinning for 1 ms, doubling while
     * such losses follow within a second, up to 1 s: on a busy host a
     * thread that sleeps is run at once when woken, one that spins waits
     * its turn. 0: 20; -1: never spin; at most 10^6. */
    int spin_us;
    /* Every copy between host and device memory each stage makes is
     * counted (kp_flow_stage_stats); with this set, one made after the
     * first lap of frames (the flow's frame set) stops the flow with
     * KP_ERR_STATE naming the stage: the profile of a flow whose frames
     * stay on the device. */
    bool strict_no_host_copies;
    /* Carrying. A frame done at a single stage (no replicas, one stage
     * downstream) may be run on through the next stage by the same thread
     * instead of being queued for that stage's own thread, when the next
     * stage is single too, on the same device, not micro-batching, fed by
     * no other stage, idle and with nothing queued. A carried frame costs
     * the carrying thread the stage's run; a queued one costs it a store
     * while the stage's thread is awake, and a futex wake (a system call)
     * while it sleeps, and the frame waits for that thread to run (5-20
     * us). So a stage is carried into when its runs take at most 0.2 us of
     * host time (a moving average); when its thread sleeps and they take
     * at most 3 us; and when its thread sleeps and they take at most
     * carry_us. Into a sleeping thread's stage only when no frame waits
     * for the carrying stage itself (it has time to spare; kpipe's remote
     * source says whether its next frame has arrived, other sources are
     * taken to have time), and one such frame in 1024 is queued for the
     * sleeping thread instead: where the carrying thread is the
     * bottleneck, the woken thread stays awake on the frames that follow,
     * and the stages run in parallel again. A stage's first run is on its
     * own thread. A stage
     * function may so run on the thread of a stage upstream, never two at
     * once, and never after its end function. 0: 20; -1: never carry; at
     * most 10^6. */
    int carry_us;
} kp_flow_config;

#define KP_FLOW_CONFIG_INIT \
    { sizeof(kp_flow_config), NULL, NULL, 0, 0, 0, 0, 0, false, 0 }

/* Checks the configuration (KP_ERR_INVALID_ARG names the field), makes the
 * frames, buffers, streams and events; starts nothing. A stage with no
 * stage downstream is a sink: its frames are done there. Stage names are
 * unique, a replicated stage names each device once, and `deal` is for
 * replicated stages: the JSON form obeys the same rules, checked by the
 * same code. */
kp_status kp_flow_create(const kp_flow_config *cfg, kp_flow_t *out);
/* The JSON form ("kpipe_flow": 1; docs/flows.md): a built-in source,
 * pipelines (a spec file, relative to the flow file, or inline) and a
 * built-in sink. KP_ERR_PARSE names the line and column or the JSON path. */
kp_status kp_flow_create_from_json(kp_device_t dev, const char *json_text, kp_flow_t *out);
/* The same, with stages of the caller's own among the built-in ones: a
 * stage {"name": ..., "callback": NAME} (with "queue" and "from" as any,
 * and "frame_bytes" where it writes more than the frames before it hold)
 * runs the entry of `callbacks` named NAME: its fn (or batch_fn, max_batch
 * and deadline_us), user and end_fn; its queue and placement come from the
 * JSON. First in the flow it is the source; it may end a path. Each
 * callback takes one place, and each is used: either mistake is named.
 * The built-in stages are read as kp_flow_create_from_json reads them. */
kp_status kp_flow_create_from_json_with(kp_device_t dev, const char *json_text,
                                        const kp_flow_stage *callbacks, size_t n_callbacks,
                                        kp_flow_t *out);
kp_status kp_flow_create_from_file(kp_device_t dev, const char *path, kp_flow_t *out);
/* The file form with trace_events set (0: the file's "trace_events"). */
kp_status kp_flow_create_from_file_traced(kp_device_t dev, const char *path, size_t trace_events,
                                          kp_flow_t *out);
/* Starts one thread per stage. Once only: a second call, from any thread,
 * gets KP_ERR_STATE. */
kp_status kp_flow_start(kp_flow_t f);
/* Waits until every stage has stopped and the device has finished the
 * flow's work: KP_OK at end of stream, the first stage error (its detail
 * names the stage), or KP_ERR_STATE ("cancelled") after kp_flow_cancel.
 * From any thread, by several at once: each returns once all has stopped,
 * with the same outcome. */
kp_status kp_flow_wait(kp_flow_t f);
/* Asks every stage to stop after its current frame; does not wait.
 * Callable from any thread, a signal handler excepted. */
kp_status kp_flow_cancel(kp_flow_t f);

typedef struct kp_flow_stage_stats {
    const char *name;
    const char *device;              /* its device's name ("cuda:1"); the first replica's */
    size_t replicas;                 /* 1, or how many replicas (or a source's streams) run it */
    bool source;                     /* it makes frames */
    uint64_t in, out;                /* frames taken and passed on (or finished) */
    uint64_t batches;                /* micro-batching: batches run */
    /* the stage function's host time, recent frames: about one run in 8,
     * at random (every run while the flow traces; two clock reads were
     * half of what an empty stage cost) */
    double host_p50_us, host_p99_us;
    /* the device time of the stage's work on its stream (from events, one
     * frame in 8), recent frames; 0 before the first measurement */
    double gpu_p50_us, gpu_p99_us;
    /* copies between host and device memory made while the stage ran
     * (its function and any hand-over), over all its frames */
    kp_copy_counts copies;
} kp_flow_stage_stats;

typedef struct kp_flow_queue_stats {
    size_t depth, capacity, max_depth;
    uint64_t pushed, drops;
    kp_queue_policy policy;
} kp_flow_queue_stats;

/* A device the flow runs on. */
typedef struct kp_flow_device_stats {
    const char *name;   /* "cuda:1" */
    size_t frame_bytes; /* the frame buffers held on it */
    uint64_t runs;      /* stage runs on it */
} kp_flow_device_stats;

/* Frames handed from one device to another. */
typedef struct kp_flow_link_stats {
    const char *from, *to; /* device names */
    kp_handoff handoff;    /* as resolved: copy, in_place or staged */
    uint64_t frames, bytes;
    /* bytes / the host time from the link's first hand-over to its last */
    double bytes_per_s;
} kp_flow_link_stats;

/* One stream of a source (kp_flow_stage.streams). */
typedef struct kp_flow_stream_stats {
    const char *stage; /* the source */
    uint32_t stream;   /* kp_frame.stream */
    uint64_t frames;   /* made and passed on */
    uint64_t drops;    /* of its frames, by a queue's policy anywhere in the flow */
    double frames_per_s;             /* frames over the time since the flow started */
    double host_p50_us, host_p99_us; /* the source function's time per frame: input to frame */
    /* end to end, recent frames: from the source handing a frame on to the
     * last stage's work on it done, the device's included (a host function
     * stamps it, on a stream beside that stage's: the stage's own stream
     * never waits for the stamp). Sampled on the frames whose source
     * run is timed (about one in 8, every one while the flow traces); 0
     * before the first sample ends. */
    double latency_p50_us, latency_p99_us;
    /* what the source says of it: for a video source its decoder, decode
     * errors, reconnections and why it fell back to software ("" if nothing) */
    char detail[320];
} kp_flow_stream_stats;

/* The flow's source streams, in stream order: up to `cap` into out, and
 * how many there are into *n. From any thread, at any time. */
kp_status kp_flow_streams(kp_flow_t f, kp_flow_stream_stats *out, size_t cap, size_t *n);

/* Writes the flow's graph as a Graphviz DOT file: a node per stage (its
 * kind, device, replicas or streams), an edge per queue with its capacity
 * and policy, and a split's route. */
kp_status kp_flow_write_dot(kp_flow_t f, const char *path);

/* The health snapshot. */
typedef struct kp_flow_snapshot {
    size_t n_stages;
    kp_flow_stage_stats stages[KP_FLOW_MAX_STAGES];
    kp_flow_queue_stats queues[KP_FLOW_MAX_STAGES]; /* queues[i] feeds stage i; zero for a source */
    size_t frames_in_flight, max_frames_in_flight, frame_limit;
    size_t bytes_in_flight, peak_bytes_in_flight, budget_bytes;
    uint64_t pool_hits, pool_misses;
    double pool_hit_rate;
    size_t device_bytes, device_peak_bytes; /* the pool's buffers */
    uint64_t frames_done, frames_dropped;
    bool running;    /* started and not yet stopped */
    bool steady;     /* a lap of frames (frame_limit) finished since a buffer was allocated */
    bool consistent; /* in >= out for every stage, and in-flight counts add up */
    size_t n_devices;
    kp_flow_device_stats devices[KP_FLOW_MAX_DEVICES];
    size_t n_links; /* the links that carried frames */
    kp_flow_link_stats links[KP_FLOW_MAX_LINKS];
    uint64_t staged_frames; /* handed over through host memory */
} kp_flow_snapshot;

/* A snapshot from counters, at any time, from any thread. */
kp_status kp_flow_health(kp_flow_t f, kp_flow_snapshot *out);
/* A snapshot as JSON text (what `kpipe flow --json` writes, less the run's
 * seconds): frames, drops, bytes in flight, the pool, and per stage its
 * counts, times, copies and queue, and the links. Writes the text and its
 * NUL into buf when len holds them, and their length into *needed;
 * KP_ERR_INVALID_ARG (nothing written but *needed) when len is too small. */
kp_status kp_flow_health_json(const kp_flow_snapshot *h, char *buf, size_t len, size_t *needed);
/* A remote queue's end: a "remote" source or sink (docs/devices-and-hosts.md, "Remote queues"). */
typedef struct kp_flow_remote_stats {
    /* the receiver's address with the port it listens on (the one the
     * system chose where the file gave port 0); the sender's as given */
    char address[128];
    bool receiver;   /* the source end */
    bool direct;     /* frames go from and to device memory (UCX built with CUDA) */
    /* frames in flight at most, the credits the receiver granted: its
     * capacity, or 2 where frames of 512 KiB and more cross one host's
     * shared memory (0 before the sender connects) */
    size_t capacity;
    uint64_t frames, bytes;
    uint64_t max_in_flight; /* sender: the most frames sent and not yet consumed */
    uint64_t credit_waits;  /* sender: frames that waited for the receiver to consume one */
    /* frames trade buffers with the link, nothing copied (host frames, or
     * direct, and the flow's frames on one device); false: through copies */
    bool zero_copy;
    /* sender: the most frames on the wire at once (sent, their sends not
     * yet complete): frames leave while the next ones are sent */
    uint64_t max_on_wire;
    /* frames whose sends (sender) or receives (receiver) the end's
     * progress thread posted, the stage's thread handing them over and
     * going on; the rest (a paced stream, which finds that thread asleep)
     * the stage's thread posted itself */
    uint64_t handed;
    /* the stage's thread waiting on the link, in all (ns): the sender for
     * a free slot and then a credit (the receiver's pace), the receiver
     * for the next frame to come in (the sender's pace). With CUDA IPC the
     * receiver's wait for the sender's copy into the slot to end, once the
     * frame's header is in, is ipc_wait_ns, apart. Divided by frames: what
     * a frame waited; the stage's time less that: the end's own work. */
    uint64_t wait_ns, ipc_wait_ns;
    /* how frames travel, once the stream began: "tcp" (the endpoint made
     * from the address), "shared memory (sysv, cma)" (both ends on one
     * host: UCX's transports named), with " and CUDA IPC" where device
     * frames go device to device and only their headers on the link;
     * "" before. KP_REMOTE_LANE=tcp or =shm narrows the choice
     * (docs/devices-and-hosts.md, "Remote queues"). */
    char lane[64];
} kp_flow_remote_stats;

/* The two ends of a remote queue as stages, for flows made from C (the
 * JSON form's "remote" source and sink; docs/devices-and-hosts.md, "Remote queues"): fn, user,
 * end_fn, free_fn and dev are filled in, name is "remote", and the flow
 * owns the state. The source listens on `listen` ("host:port", port 0: a
 * free one, see kp_flow_remote) from now on, for one sender whose frames
 * (up to frame_bytes) it takes, capacity (1 .. 1024) in flight, waiting
 * for it up to timeout_ms (0: for ever). The sink connects at its first
 * frame, trying for up to timeout_ms (0: for ever) while nobody listens.
 * KP_ERR_UNSUPPORTED where kpipe was built without UCX. */
kp_status kp_flow_remote_source(kp_device_t dev, const char *listen, size_t frame_bytes,
                                size_t capacity, int timeout_ms, kp_flow_stage *out);
kp_status kp_flow_remote_sink(kp_device_t dev, const char *connect, size_t frame_bytes,
                              int timeout_ms, kp_flow_stage *out);

/* The figures of stage `stage`, a remote queue's end; KP_ERR_INVALID_ARG
 * for another stage. From any thread, at any time after creation. */
kp_status kp_flow_remote(kp_flow_t f, size_t stage, kp_flow_remote_stats *out);

/* --- the built-in sources and sinks, for flows made from C -------------------------
 * Each of the JSON form's sources and sinks (docs/flows.md) as a stage,
 * made by the code that makes the JSON form's, so the two take the same
 * arguments with the same checks and errors:
 *
 *   kp_flow_stage st[2];
 *   kp_flow_source_info info;
 *   int64_t shape[1] = {16384};
 *   kp_flow_synthetic_source(dev, 1000, 1, shape, &st[0], &info);
 *   kp_flow_npy_sink(dev, "out.npy", info.frame_bytes, &st[1]);
 *   cfg.stages = st;  cfg.n_stages = 2;  cfg.frame_bytes = info.frame_bytes;
 *
 * A made stage has fn, user, free_fn, dev and, where the kind has them,
 * end_fn, streams and stream_users; name is the kind and the role
 * ("synthetic source", "npy sink", ...; names are unique in a flow, so two
 * stages of one kind need another name); a source is marked `source`, a
 * sink has queue_capacity 4; the rest is zero. The stage owns what it
 * made (its state, open files and readers, host memory) until
 * free_fn(user) frees it: the flow calls it when it is destroyed, or when
 * kp_flow_create fails; a stage that never reaches kp_flow_create is freed
 * by calling out->free_fn(out->user) (the null sink has none). A made
 * stage belongs to one flow, whose threads run it; the constructors may
 * be called from any thread, each call making a stage of its own. `dev`
 * is the device the stage runs on (its kp_flow_stage.dev) and makes its
 * memory on; it is required. KP_ERR_INVALID_ARG names an argument that is
 * wrong; files and readers that fail to open give their own errors
 * (KP_ERR_IO, KP_ERR_PARSE, KP_ERR_UNSUPPORTED). A refused call writes
 * nothing to *out or *info and holds nothing. */

/* What a built-in source says of its frames. */
typedef struct kp_flow_source_info {
    /* the bytes its largest frame holds: kp_flow_config.frame_bytes is at
     * least this, and a sink that keeps a frame takes it */
    size_t frame_bytes;
    /* a y4m source's header tags (" F25:1 Ip A1:1 C420jpeg"), for a y4m
     * sink to write the same stream header; "" for other sources */
    char y4m_tags[256];
} kp_flow_source_info;

/* Source "synthetic": `frames` frames (0: until cancelled) of f32 of
 * `shape` (ndim 1 .. KP_MAX_DIMS sizes, 1 .. 2^26 elements in all);
 * element i of the frame of sequence number s is ((31 s + 7 i) mod 2001)
 * - 1000, written on the device. */
kp_status kp_flow_synthetic_source(kp_device_t dev, int64_t frames, int ndim, const int64_t *shape,
                                   kp_flow_stage *out, kp_flow_source_info *info);
/* Source "testsrc": `frames` moving test pictures (0: until cancelled) of
 * width x height (even, 2 .. 16384; KP_ERR_UNSUPPORTED otherwise), as
 * `format` (KP_PIXEL_NONE: I420; or NV12), rows of `pitch` bytes (0: the
 * width; even, at least the width), the padding zero; u8 [h*3/2, pitch]
 * video frames at 30 frames/s. */
kp_status kp_flow_testsrc_source(kp_device_t dev, int64_t frames, int64_t width, int64_t height,
                                 kp_pixel_format format, int64_t pitch, kp_flow_stage *out,
                                 kp_flow_source_info *info);
/* Source "y4m": the frames of the YUV4MPEG2 file `path` (8-bit 4:2:0, not
 * mixed interlacing) as u8 [h*3/2, w] I420 video frames, `frames` of them
 * (0: all), from the start again at its end when `loop`. The file is
 * opened and its header read here (KP_ERR_IO, KP_ERR_PARSE and
 * KP_ERR_UNSUPPORTED name what is wrong with it); info->y4m_tags gets the
 * header's F, I, A, C and X tags. */
kp_status kp_flow_y4m_source(kp_device_t dev, const char *path, int64_t frames, bool loop,
                             kp_flow_stage *out, kp_flow_source_info *info);

/* A "video" source's settings. */
typedef struct kp_flow_video_source_config {
    size_t struct_size;            /* sizeof(kp_flow_video_source_config) */
    kp_video_reader_config reader; /* each stream's reader (interrupt: the flow's cancel) */
    int64_t frames;                /* of each stream; 0: all */
    bool realtime; /* each stream paced at its own frame rate, from its timestamps */
    /* As the flow's strict_no_host_copies: where the device's memory is
     * apart from the host's, every stream decodes on NVDEC, and one NVDEC
     * cannot take is refused by name instead of decoded in software,
     * which uploads every frame. */
    bool strict_no_host_copies;
} kp_flow_video_source_config;

#define KP_FLOW_VIDEO_SOURCE_CONFIG_INIT \
    { sizeof(kp_flow_video_source_config), KP_VIDEO_READER_CONFIG_INIT, 0, false, false }

/* Source "video": the frames of each of n_paths (1 .. KP_FLOW_MAX_STREAMS)
 * paths, files or live URLs (udp://, srt://, rtsp://, ...; not mixed with
 * files), through a kp_video_reader_t each, opened here: one stream per
 * path, a source of several streams (out->streams, stream_users) for
 * several. A live stream that ends or fails reconnects with a bounded
 * backoff and marks the frame after the gap (kp_frame.discontinuity).
 * cfg NULL: KP_FLOW_VIDEO_SOURCE_CONFIG_INIT. KP_ERR_UNSUPPORTED where
 * kpipe was built without video files. */
kp_status kp_flow_video_source(kp_device_t dev, const char *const *paths, size_t n_paths,
                               const kp_flow_video_source_config *cfg, kp_flow_stage *out,
                               kp_flow_source_info *info);
/* Sink "null": takes every frame and does nothing with it; no device. */
kp_status kp_flow_null_sink(kp_flow_stage *out);
/* Sink "npy": writes each frame to `path` (the file holds the last one),
 * through frame_bytes (the flow's frame_bytes) of pinned host memory made
 * here; a frame its descriptor does not describe fails the flow. */
kp_status kp_flow_npy_sink(kp_device_t dev, const char *path, size_t frame_bytes,
                           kp_flow_stage *out);
/* Sink "y4m": writes every frame to `path`, made at the first frame, as
 * planar I420 whatever the frames' layout and pitch, with the stream
 * header's `tags` (a y4m source's info.y4m_tags; NULL or "": 30 frames/s,
 * progressive, square pixels); `format` (KP_PIXEL_NONE: each frame's own;
 * I420 or NV12) says what video frames hold, over their label; frame_bytes
 * as the npy sink's. */
kp_status kp_flow_y4m_sink(kp_device_t dev, const char *path, size_t frame_bytes, const char *tags,
                           kp_pixel_format format, kp_flow_stage *out);
/* Sink "video": encodes the frames into `path` through a
 * kp_video_writer_t (cfg NULL: KP_VIDEO_WRITER_CONFIG_INIT), opened here,
 * taking them as `format` (KP_PIXEL_NONE: each frame's own label); "{stream}"
 * in the path makes a file per stream (stream 0's opened here). The end of
 * the stream finishes the file, and an error there fails the flow.
 * KP_ERR_UNSUPPORTED where kpipe was built without video files. */
kp_status kp_flow_video_sink(kp_device_t dev, const char *path, const kp_video_writer_config *cfg,
                             kp_pixel_format format, kp_flow_stage *out);

/* Writes the trace as a Chrome trace file (chrome://tracing, Perfetto):
 * one row per stage, one slice per frame, host time. After kp_flow_wait;
 * KP_ERR_STATE when the flow keeps no trace. */
kp_status kp_flow_write_trace(kp_flow_t f, const char *path);
/* Cancels, waits and frees. NULL is a no-op. */
void kp_flow_destroy(kp_flow_t f);

#ifdef __cplusplus
}
#endif
#endif
