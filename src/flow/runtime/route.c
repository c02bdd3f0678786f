/* Flows' routing of a frame done at a stage: on to the stage downstream
 * (routed, or copied to all), in ticket order out of a replicated stage,
 * or finished at a sink with its stream's latency sampled; and a stage's
 * failure, which stops the flow. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "runtime-impl.h"

void kp__flow_wake_all(struct kp_flow *f) {
    for (size_t i = 0; i < f->n; i++)
        if (!f->ls[i].source) kp__queue_close(&f->q[i]);
    kp__wake_all(&f->freed);
}

void kp__flow_fail(struct kp_flow *f, kp__stage *s, kp_status st) {
    pthread_mutex_lock(&f->mu);
    if (f->status == KP_OK) {
        f->status = st;
        snprintf(f->error, sizeof f->error, "stage \"%s\": %s", s->name,
                 kp_last_error()[0] ? kp_last_error() : kp_status_str(st));
    }
    pthread_mutex_unlock(&f->mu);
    atomic_store(&f->cancel, true);
    kp__flow_wake_all(f);
}

static void kp__stream_lat_record(struct kp_flow *f, uint32_t stream, double us) {
    if (stream >= f->n_streams) return;
    /* several threads may end one stream's frames: each takes its own index */
    uint64_t k = atomic_fetch_add_explicit(&f->stream_nlat[stream], 1, memory_order_relaxed);
    atomic_store_explicit(&f->stream_lat[(size_t)stream * KP__STREAM_LAT + k % KP__STREAM_LAT],
                          kp__tenths(us), memory_order_relaxed);
}

/* Runs on the device's host-function thread once the frame's work is done. */
static void kp__lat_stamp(void *user) {
    struct kp__lat_slot *l = user;
    kp__stream_lat_record(l->flow, l->stream, kp__now_us() - l->made_us);
    atomic_store_explicit(&l->busy, false, memory_order_release);
}

void kp__flow_latency_end(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    if (fr->ev_dev < 0) {
        kp__stream_lat_record(f, fr->f.stream, kp__now_us() - fr->made_us);
        return;
    }
    struct kp__lat_slot *l = &s->lat_pend[s->lat_pend_next % KP__LAT_PENDING];
    if (atomic_load_explicit(&l->busy, memory_order_acquire)) return; /* the device is behind */
    s->lat_pend_next++;
    l->flow = f;
    l->made_us = fr->made_us;
    l->stream = fr->f.stream;
    atomic_store_explicit(&l->busy, true, memory_order_relaxed);
    /* beside the stage's stream, never in it (kp__stage.lat_pend); the
     * frame's work may be on another replica's stream too */
    if (kp_stream_wait_event(s->lat_stream, fr->ev[fr->ev_dev]) != KP_OK ||
        kp_launch_host_func(s->lat_stream, kp__lat_stamp, l) != KP_OK) {
        kp_clear_error(); /* the sample is lost; the stream reports its own error */
        atomic_store_explicit(&l->busy, false, memory_order_relaxed);
    }
}

/* A copy of fr in a frame of its own, on s's device, for another stage
 * downstream (KP_ROUTE_COPY); NULL when the flow is cancelled, or after
 * failing it. */
static kp__fframe *kp__copy_frame(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    kp__fframe *c = kp__frame_take_copy(f, s->index);
    if (!c) return NULL;
    kp_status st = kp__frame_buffer(f, c);
    const size_t bytes = fr->f.bytes, capacity = c->f.capacity;
    void *data = kp__frame_data(c, s->dev_i);
    if (st == KP_OK && bytes > capacity)
        st = kp__error(KP_ERR_MISMATCH, "frame %llu: %zu bytes in use, past its capacity (%zu)",
                       (unsigned long long)fr->f.seq, bytes, capacity);
    /* the frame's work may be on another replica's stream; the copy's last
     * user (the frame came back from a sink) may still read it */
    if (st == KP_OK && bytes && fr->ev_dev >= 0)
        st = kp_stream_wait_event(s->ctx.stream, fr->ev[fr->ev_dev]);
    if (st == KP_OK && bytes && c->ev_dev >= 0)
        st = kp_stream_wait_event(s->ctx.stream, c->ev[c->ev_dev]);
    if (st == KP_OK && bytes) st = kp_memcpy_async(s->ctx.stream, data, fr->f.data, bytes);
    if (st == KP_OK && bytes) st = kp_event_record(c->ev[s->dev_i], s->ctx.stream);
    if (st != KP_OK) {
        kp__frame_put(f, c, false);
        kp__flow_fail(f, s, st);
        return NULL;
    }
    c->f = fr->f;
    c->f.data = data;
    c->f.capacity = capacity;
    c->loc = s->dev_i;
    c->ev_dev = bytes ? s->dev_i : -1;
    c->made_us = fr->made_us;
    return c;
}

void kp__flow_pass_on(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    const kp__lstage *ls = &f->ls[s->index];
    if (ls->n_out > 1 && ls->route == KP_ROUTE_COPY) {
        bool copied = false;
        for (size_t k = 1; k < ls->n_out; k++) {
            kp__fframe *c = kp__copy_frame(s, fr);
            if (!c) break;
            copied = copied || c->ev_dev >= 0;
            kp__queue_push(f, &f->q[ls->out[k]], c);
        }
        /* the copies read the frame on s's stream: its next writer waits for them */
        if (copied) {
            kp_status st = kp_event_record(fr->ev[s->dev_i], s->ctx.stream);
            if (st != KP_OK) kp__flow_fail(f, s, st);
            fr->ev_dev = s->dev_i;
        }
        kp__queue_push(f, &f->q[ls->out[0]], fr);
        return;
    }
    if (ls->n_out == 1) {
        kp__queue_push(f, &f->q[ls->out[0]], fr);
        return;
    }
    if (ls->n_out) {
        uint64_t key = ls->route == KP_ROUTE_USER0 ? (uint64_t)fr->f.user[0] : fr->f.stream;
        kp__queue_push(f, &f->q[ls->out[key % ls->n_out]], fr);
        return;
    }
    if (fr->made_us > 0) kp__flow_latency_end(s, fr);
    atomic_fetch_add(&f->done, 1);
    kp__frame_put(f, fr, false);
}

void kp__flow_forward(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    kp__lstage *ls = &f->ls[s->index];
    kp__bump(&s->out, 1);
    if (ls->n_rep == 1) {
        kp__flow_pass_on(s, fr);
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
            kp__flow_pass_on(s, next);
            pthread_mutex_lock(&ls->ro_mu);
        }
        ls->ro_pushing = false;
    }
    pthread_mutex_unlock(&ls->ro_mu);
}
