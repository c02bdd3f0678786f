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
    if (fr->copy_of) {
        atomic_fetch_sub_explicit(&f->ls[fr->copy_of - 1].copies_out, 1, memory_order_relaxed);
        fr->copy_of = 0;
    }
    if (dropped) atomic_fetch_add_explicit(&f->dropped, 1, memory_order_relaxed);
    if (dropped && fr->f.stream < f->n_streams)
        atomic_fetch_add_explicit(&f->stream_drops[fr->f.stream], 1, memory_order_relaxed);
    kp__free_push(f, fr);
    atomic_fetch_sub_explicit(&f->in_flight, 1, memory_order_release);
    kp__wake_all(&f->freed);
}

/* Reserves a place in *count below limit; false once it is reached. */
static bool kp__reserve(_Atomic size_t *count, size_t limit) {
    size_t n = atomic_load_explicit(count, memory_order_relaxed);
    do {
        if (n >= limit) return false;
    } while (!atomic_compare_exchange_weak_explicit(count, &n, n + 1, memory_order_acquire,
                                                    memory_order_relaxed));
    return true;
}

/* Waits for a place in *count below limit; false once cancelled. */
static bool kp__reserve_wait(struct kp_flow *f, _Atomic size_t *count, size_t limit) {
    bool spun = false;
    for (;;) {
        if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return false;
        if (kp__reserve(count, limit)) return true;
        if (!spun) {
            kp__flow_spin_while(f, count, limit);
            spun = true;
            continue;
        }
        uint32_t key = kp__wake_prepare(&f->freed);
        if (atomic_load(count) < limit || atomic_load(&f->cancel))
            kp__wake_cancel(&f->freed);
        else
            kp__wake_wait(&f->freed, key, NULL);
    }
}

/* Sources stay below the limit less the frames set apart for copies, so
 * a copy's frame is always there once its stage's quota admits it. */
kp__fframe *kp__frame_take(struct kp_flow *f) {
    if (!kp__reserve_wait(f, &f->in_flight, f->frame_limit - f->copy_reserve)) return NULL;
    kp__atomic_max(&f->max_in_flight, atomic_load_explicit(&f->in_flight, memory_order_relaxed));
    return kp__free_pop(f);
}

kp__fframe *kp__frame_take_copy(struct kp_flow *f, size_t i) {
    kp__lstage *ls = &f->ls[i];
    if (!kp__reserve_wait(f, &ls->copies_out, ls->copy_quota)) return NULL;
    size_t n = atomic_fetch_add_explicit(&f->in_flight, 1, memory_order_acquire) + 1;
    kp__atomic_max(&f->max_in_flight, n);
    kp__fframe *fr = kp__free_pop(f);
    fr->copy_of = (uint16_t)(i + 1);
    return fr;
}

kp_status kp__frame_buffer(struct kp_flow *f, kp__fframe *fr) {
    if (fr->buf[0] || !f->frame_bytes) return KP_OK;
    for (size_t d = 0; d < f->n_devs; d++)
        KP_CHECK(kp_buffer_acquire(f->pools[d], f->frame_bytes, NULL, &fr->buf[d]));
    fr->f.capacity = f->frame_bytes;
    atomic_store(&f->done_at_alloc, atomic_load(&f->done));
    return KP_OK;
}

kp_status kp__flow_spare_buffer(kp_flow_t f, size_t stage, kp_buffer_t *out) {
    *out = NULL;
    if (f->n_devs != 1 || !f->frame_bytes)
        return kp__error(KP_ERR_UNSUPPORTED, "flow: frames with a buffer on %zu devices",
                         f->n_devs);
    if (stage >= f->n || (!f->ls[stage].source && f->ls[stage].n_out))
        return kp__error(KP_ERR_UNSUPPORTED,
                         "flow: stage %zu passes its frames on, their bytes with them", stage);
    return kp_buffer_acquire(f->pools[0], f->frame_bytes, NULL, out);
}

void kp__frame_trade(kp_frame *frame, kp_buffer_t *b) {
    kp__fframe *fr = (kp__fframe *)frame; /* a stage's frames are the flow's */
    kp_buffer_t mine = fr->buf[0];
    fr->buf[0] = *b;
    *b = mine;
    fr->f.data = kp_buffer_data(fr->buf[0]);
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
    f->frame_limit = m; /* above copy_reserve: kp__check_budget saw to it */
    for (size_t i = f->n_frames - m; i < f->n_frames; i++)
        KP_CHECK(kp__frame_buffer(f, &f->frames[i]));
    return KP_OK;
}
