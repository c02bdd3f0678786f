/* What the device and pinned caches share: the streams a block was used on,
 * the events recorded on them at its free, and the pool of idle events
 * those come from, so that a steady state creates no event. */
#include <string.h>

#include "memory-impl.h"

/* --- event pool ----------------------------------------------------------------------- */
kp_status kp__evpool_get(kp__evpool *p, kp_event_t *out) {
    if (p->n) {
        *out = p->v[--p->n];
        return KP_OK;
    }
    return kp_event_create(p->dev, out);
}

void kp__evpool_put(kp__evpool *p, kp_event_t ev) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        kp_event_t *v = kp__malloc(cap * sizeof *v);
        if (!v) {
            kp_event_destroy(ev);
            return;
        }
        if (p->n) memcpy(v, p->v, p->n * sizeof *v);
        kp__free(p->v);
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = ev;
}

void kp__evpool_free(kp__evpool *p) {
    for (size_t i = 0; i < p->n; i++) kp_event_destroy(p->v[i]);
    kp__free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
}

/* --- stream uses ---------------------------------------------------------------------- */
void kp__uses_init(kp__uses *u, kp_stream_t s) {
    memset(u, 0, sizeof *u);
    if (s)
        u->s[u->n++] = s;
    else
        u->overflow = true;
}

void kp__uses_add(kp__uses *u, kp_stream_t s) {
    for (int i = 0; i < u->n; i++)
        if (u->s[i] == s) return;
    if (u->n < KP__MAX_USES)
        u->s[u->n++] = s;
    else
        u->overflow = true;
}

bool kp__uses_idle(const kp__uses *u) {
    for (int i = 0; i < u->n; i++) {
        bool idle = false;
        if (kp_stream_is_capturing(u->s[i]) || kp_stream_query(u->s[i], &idle) != KP_OK || !idle)
            return false;
    }
    return true;
}

int kp__uses_record(kp__uses *u, kp__evpool *pool) {
    for (int i = 0; i < u->n; i++)
        if (kp_stream_is_capturing(u->s[i])) return 0;
    for (int i = u->n_events; i < u->n; i++) {
        kp_event_t ev;
        if (kp__evpool_get(pool, &ev) != KP_OK) return -1;
        if (kp_event_record(ev, u->s[i]) != KP_OK) {
            kp__evpool_put(pool, ev);
            return -1;
        }
        u->ev[u->n_events++] = ev;
    }
    return 1;
}

bool kp__uses_done(const kp__uses *u) {
    bool done = true;
    for (int i = 0; i < u->n_events && done; i++)
        if (kp_event_query(u->ev[i], &done) != KP_OK) done = false;
    return done;
}

void kp__uses_release(kp__uses *u, kp__evpool *pool) {
    for (int i = 0; i < u->n_events; i++) kp__evpool_put(pool, u->ev[i]);
    memset(u, 0, sizeof *u);
}

void kp__uses_destroy(kp__uses *u) {
    for (int i = 0; i < u->n_events; i++) kp_event_destroy(u->ev[i]);
    memset(u, 0, sizeof *u);
}
