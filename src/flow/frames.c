/* Flows' frames: the fixed set made at creation, each with a buffer on
 * every device of the flow and an event per device, taken from and put
 * back on a free list under the byte budget. */
#include <pthread.h>
#include <stdatomic.h>

#include "runtime-impl.h"

void kp__frame_put(struct kp_flow *f, kp__fframe *fr, bool dropped) {
    kp__flow_lock(f, &f->mu);
    fr->next_free = f->free_list;
    f->free_list = fr;
    atomic_fetch_sub(&f->in_flight, 1);
    atomic_fetch_sub(&f->bytes, f->frame_bytes);
    if (dropped) atomic_fetch_add(&f->dropped, 1);
    if (dropped && fr->f.stream < f->n_streams) atomic_fetch_add(&f->stream_drops[fr->f.stream], 1);
    pthread_cond_broadcast(&f->freed);
    pthread_mutex_unlock(&f->mu);
}

kp__fframe *kp__frame_take(struct kp_flow *f) {
    kp__fframe *fr = NULL;
    kp__flow_spin_while(f, &f->in_flight, f->n_frames);
    kp__flow_lock(f, &f->mu);
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
