/* Flows' frames: the fixed set made at creation, each with a buffer on
 * every device of the flow and an event per device, taken from and put
 * back on a lock-free free stack under the byte budget. */
#include <pthread.h>
#include <stdatomic.h>

#include "runtime-impl.h"

static void kp__free_push(struct kp_flow *f, kp__fframe *fr) {
    uint32_t idx = (uint32_t)(fr - f->frames) + 1;
    uint64_t top = atomic_load_explicit(&f->free_top, memory_order_relaxed);
    do {
        atomic_store_explicit(&fr->next_free, (uint32_t)top, memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(&f->free_top, &top,
                                                    ((top >> 32) + 1) << 32 | idx,
                                                    memory_order_release, memory_order_relaxed));
}

/* Pops a frame; the caller holds a reservation in in_flight, so one is
 * there (see struct kp_flow). */
static kp__fframe *kp__free_pop(struct kp_flow *f) {
    uint64_t top = atomic_load_explicit(&f->free_top, memory_order_acquire);
    for (;;) {
        uint32_t idx = (uint32_t)top;
        if (!idx) { /* every frame out for a moment: another taker's is on its way back */
            top = atomic_load_explicit(&f->free_top, memory_order_acquire);
            continue;
        }
        kp__fframe *fr = &f->frames[idx - 1];
        uint32_t next = atomic_load_explicit(&fr->next_free, memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&f->free_top, &top,
                                                  ((top >> 32) + 1) << 32 | next,
                                                  memory_order_acquire, memory_order_acquire))
            return fr;
    }
}

void kp__frame_put(struct kp_flow *f, kp__fframe *fr, bool dropped) {
    if (dropped) atomic_fetch_add_explicit(&f->dropped, 1, memory_order_relaxed);
    if (dropped && fr->f.stream < f->n_streams)
        atomic_fetch_add_explicit(&f->stream_drops[fr->f.stream], 1, memory_order_relaxed);
    kp__free_push(f, fr);
    atomic_fetch_sub_explicit(&f->in_flight, 1, memory_order_release);
    kp__wake_all(&f->freed);
}

/* Reserves a place in flight below the limit; false once it is reached. */
static bool kp__reserve(struct kp_flow *f) {
    size_t n = atomic_load_explicit(&f->in_flight, memory_order_relaxed);
    do {
        if (n >= f->frame_limit) return false;
    } while (!atomic_compare_exchange_weak_explicit(&f->in_flight, &n, n + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    kp__atomic_max(&f->max_in_flight, n + 1);
    return true;
}

kp__fframe *kp__frame_take(struct kp_flow *f) {
    bool spun = false;
    for (;;) {
        if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return NULL;
        if (kp__reserve(f)) break;
        if (!spun) {
            kp__flow_spin_while(f, &f->in_flight, f->frame_limit);
            spun = true;
            continue;
        }
        uint32_t key = kp__wake_prepare(&f->freed);
        if (atomic_load(&f->in_flight) < f->frame_limit || atomic_load(&f->cancel))
            kp__wake_cancel(&f->freed);
        else
            kp__wake_wait(&f->freed, key, NULL);
    }
    return kp__free_pop(f);
}

kp_status kp__frame_buffer(struct kp_flow *f, kp__fframe *fr) {
    if (fr->buf[0] || !f->frame_bytes) return KP_OK;
    for (size_t d = 0; d < f->n_devs; d++)
        KP_CHECK(kp_buffer_acquire(f->pools[d], f->frame_bytes, NULL, &fr->buf[d]));
    fr->f.capacity = f->frame_bytes;
    atomic_store(&f->done_at_alloc, atomic_load(&f->done));
    return KP_OK;
}

void *kp__frame_data(const kp__fframe *fr, int d) {
    return fr->buf[d] ? kp_buffer_data(fr->buf[d]) : NULL;
}

kp_status kp__flow_make_frames(struct kp_flow *f, bool staging) {
    kp_pool_config pc = KP_POOL_CONFIG_INIT;
    for (size_t d = 0; d < f->n_devs; d++)
        KP_CHECK(kp_buffer_pool_create(f->devs[d], &pc, &f->pools[d]));
    if (f->n_frames >= UINT32_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "flow: too many frames (%zu)", f->n_frames);
    f->frames = kp__calloc(f->n_frames, sizeof *f->frames);
    if (!f->frames) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for frames");
    for (size_t i = 0; i < f->n_frames; i++) {
        kp__fframe *fr = &f->frames[i];
        fr->ev_dev = -1;
        for (size_t d = 0; d < f->n_devs; d++)
            KP_CHECK(kp_event_create_untimed(f->devs[d], &fr->ev[d]));
        if (staging && f->frame_bytes)
            KP_CHECK(kp_malloc_host(f->devs[0], f->frame_bytes, &fr->staging));
        kp__free_push(f, fr);
    }
    /* As many frames as the budget holds are in flight at most. Every one
     * of them gets its buffers now, not at its first use in the middle of
     * a run: the stack hands out the newest frames first, and never
     * reaches below the limit, so those are the ones with buffers. */
    size_t m = f->n_frames;
    if (f->budget && f->frame_bytes && f->budget / f->frame_bytes < m)
        m = f->budget / f->frame_bytes;
    f->frame_limit = m;
    for (size_t i = f->n_frames - m; i < f->n_frames; i++)
        KP_CHECK(kp__frame_buffer(f, &f->frames[i]));
    return KP_OK;
}
