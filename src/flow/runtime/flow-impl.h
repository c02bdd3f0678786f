/* The flow runtime's interface for the flow layers above it (src/flow/:
 * runtime < stages < remote < json; tests/layering.py lets exactly these
 * three include this header, and no other layer): owning objects for a
 * flow, the configuration's rules, kinds of stage, a stage as made,
 * trading buffers with frames, and sleeping until woken. The runtime's own
 * structures are in runtime-impl.h, which includes this one. */
#ifndef KPIPE_FLOW_IMPL_H
#define KPIPE_FLOW_IMPL_H

#include <stdatomic.h>
#include <time.h>

#include "kpipe/flow.h"
#include "../../core/core-impl.h"

/* Hands the flow an object to free (with free_fn) once its threads have
 * stopped, in kp_flow_destroy; on failure free_fn(obj) has run. */
kp_status kp__flow_own(kp_flow_t f, void *obj, void (*free_fn)(void *));
/* The same for a device the flow runs on: closed after everything else. */
kp_status kp__flow_own_device(kp_flow_t f, kp_device_t dev);

/* The rules every flow's configuration obeys, whichever form made it: C
 * (kp_flow_create) or JSON, which calls this before creating, so the two
 * cannot drift apart. KP_ERR_INVALID_ARG names the field by its path in
 * the configuration ("stages[2] (scale).replicas[1]: ..."). */
kp_status kp__flow_check_config(const kp_flow_config *c);
/* How many stages take frames from each stage (down: n_stages of them), by
 * the same reading of "from" the flow makes; KP_ERR_INVALID_ARG names a
 * name that is not there. */
kp_status kp__flow_downstream(const kp_flow_config *c, size_t *down);

/* What a flow asks of a kind of stage beyond running it, found by the
 * stage's function: the flow sees every source and sink through this,
 * never by name. A stage file adds its kinds (once) before it makes a
 * stage; kinds are never removed. */
typedef struct kp__stage_kind {
    kp_flow_stage_fn fn;
    bool one_link; /* the stage has one peer: no replicas */
    /* optional: the figures of a remote queue's end (kp_flow_remote) */
    kp_status (*remote_stats)(void *user, kp_flow_remote_stats *out);
    /* optional: what a source says of one of its streams (`user` is the
     * stream's), for kp_flow_streams' detail */
    void (*stream_detail)(void *user, char *buf, size_t len);
} kp__stage_kind;
kp_status kp__stage_kind_add(const kp__stage_kind *kind);
/* The kind of a stage function, or NULL for a plain one. */
const kp__stage_kind *kp__stage_kind_find(kp_flow_stage_fn fn);

/* A built-in stage as made: its function and state, what frames it needs. */
typedef struct kp__stage_made {
    kp_flow_stage_fn fn;
    kp_flow_batch_fn batch_fn; /* instead of fn, for a micro-batching stage */
    void *user;
    void (*free_fn)(void *user);
    size_t frame_bytes; /* bytes its frames must hold */
    size_t max_batch;
    kp_flow_end_fn end_fn; /* optional */
    /* a source of several streams: each one's user (in `user`'s memory) */
    size_t streams;
    void **stream_users;
} kp__stage_made;

/* A source's word, each run, on whether its next frame is already there
 * (a remote source whose next frame has arrived): it is then the flow's
 * bottleneck, and does not carry its frames into a stage whose thread
 * sleeps, which would make it run that stage too; it wakes that thread
 * instead, as a stage with frames queued for it does (stage.c,
 * kp__carry_worth). `c` is the context the flow passed the source. */
void kp__flow_source_backlog(const kp_stage_ctx *c, bool waiting);

/* Trading buffers with frames, for a stage that keeps buffers of its own
 * in flight (a remote queue's end receives into them, or sends from them,
 * while its frames go on): kp__flow_spare_buffer acquires a buffer like a
 * frame's from the flow's pool (KP_ERR_UNSUPPORTED where frames have a
 * buffer on several devices); kp__frame_trade gives `frame` (one the
 * stage was handed) the buffer *b and *b the frame's old one. Only a
 * source, or a stage with none downstream, trades: the bytes of a frame
 * passed on go with it (KP_ERR_UNSUPPORTED for `stage` otherwise). A spare
 * buffer goes back with kp_buffer_release before the flow is destroyed,
 * which its owner's free function is (kp__flow_own). */
kp_status kp__flow_spare_buffer(kp_flow_t f, size_t stage, kp_buffer_t *out);
void kp__frame_trade(kp_frame *frame, kp_buffer_t *b);

/* kp_pixel_format_name, and "not video" for KP_PIXEL_NONE. */
static inline const char *kp__pixel_str(kp_pixel_format f) {
    return f == KP_PIXEL_NONE ? "not video" : kp_pixel_format_name(f);
}

/* Sleeping until woken (spin.c; the runtime's queues and frames, and the
 * remote ends' progress): a sequence to futex-wait on and a count of the
 * threads that sleep, so that a wake with no sleeper is a fence and a
 * load, not a system call. A waiter calls kp__wake_prepare, checks its
 * condition again, then either kp__wake_cancel or kp__wake_wait with the
 * key (up to an absolute CLOCK_MONOTONIC deadline, NULL: none; it may
 * return early, so the caller loops). A waker changes the condition, then
 * kp__wake_all. */
typedef struct kp__wake {
    _Atomic uint32_t seq;
    _Atomic uint32_t waiters;
} kp__wake;
uint32_t kp__wake_prepare(kp__wake *w);
void kp__wake_cancel(kp__wake *w);
void kp__wake_wait(kp__wake *w, uint32_t key, const struct timespec *deadline);
void kp__wake_all(kp__wake *w);
/* Whether CLOCK_MONOTONIC has reached `deadline` (NULL: never). */
bool kp__wake_past(const struct timespec *deadline);
/* Spins while *v == blocked (a kp__wake's sequence), up to the flow's spin
 * time, so that a change within it costs no sleep and wake-up of a thread
 * (a futex round trip of several microseconds). */
void kp__flow_spin_while32(kp_flow_t f, _Atomic uint32_t *v, uint32_t blocked);
/* One turn of a spin: tells the core that this thread only waits. */
static inline void kp__pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
