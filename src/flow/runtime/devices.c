/* Flows over several devices: the hand-over of a frame made on one device
 * to a stage on another (copy, in place or staged, "auto" timing both
 * ways), and replicated stages' room on the device (route.c puts their
 * frames back in order). */
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime-impl.h"

kp_status kp__flow_handoff(kp__stage *s, kp__fframe *fr) {
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

static int kp__cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void kp__flow_probe_decide(kp__stage *s) {
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

kp_status kp__flow_replica_room(kp__stage *s) {
    if (!s->issued[0] || s->n_issued < KP__REP_DEPTH) return KP_OK;
    return kp_event_sync(s->issued[s->n_issued % KP__REP_DEPTH]);
}

kp_status kp__flow_replica_issued(kp__stage *s) {
    if (!s->issued[0]) return KP_OK;
    KP_CHECK(kp_event_record(s->issued[s->n_issued % KP__REP_DEPTH], s->ctx.stream));
    s->n_issued++;
    return KP_OK;
}

const char *kp_handoff_str(kp_handoff h) {
    switch (h) {
    case KP_HANDOFF_AUTO: return "auto";
    case KP_HANDOFF_COPY: return "copy";
    case KP_HANDOFF_IN_PLACE: return "in_place";
    case KP_HANDOFF_STAGED: return "staged";
    }
    return "invalid";
}

kp_status kp__flow_device_index(struct kp_flow *f, kp_device_t dev, int *out) {
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

kp_status kp__flow_resolve_handoffs(struct kp_flow *f, kp__stage *s, kp_handoff want,
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

void kp__flow_ring_drain(struct kp_flow *f, kp__lstage *ls) {
    for (size_t k = 0; ls->ro && k < ls->ro_cap; k++)
        if (ls->ro[k]) {
            kp__frame_put(f, ls->ro[k], false);
            ls->ro[k] = NULL;
        }
}
