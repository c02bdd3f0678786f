/* Flows' queues: bounded rings between stages, by policy (block, drop
 * oldest, drop newest). Between two single stages a ring is lock-free
 * (one producer, one consumer: each index written by one side only); one
 * that replicas share is under a lock, with the tickets replicated stages
 * take their turns by. */
#include <pthread.h>
#include <stdatomic.h>

#include "runtime-impl.h"

const char *kp_queue_policy_str(kp_queue_policy p) {
    switch (p) {
    case KP_QUEUE_BLOCK: return "block";
    case KP_QUEUE_DROP_OLDEST: return "drop_oldest";
    case KP_QUEUE_DROP_NEWEST: return "drop_newest";
    }
    return "invalid";
}

kp_status kp__queue_init(kp__queue *q, size_t cap, kp_queue_policy policy, bool spsc) {
    q->ring = kp__calloc(cap, sizeof *q->ring);
    if (!q->ring) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for a queue");
    q->cap = cap;
    q->policy = policy;
    q->spsc = spsc && policy != KP_QUEUE_DROP_OLDEST;
    if (q->spsc) return KP_OK;
    if (pthread_mutex_init(&q->mu, NULL) != 0) goto fail;
    pthread_condattr_t ca;
    bool ca_ok = pthread_condattr_init(&ca) == 0;
    if (ca_ok) (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->not_empty, ca_ok ? &ca : NULL);
    if (ca_ok) pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail_mu;
    if (pthread_cond_init(&q->not_full, NULL) != 0) goto fail_ne;
    q->mu_init = true;
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

void kp__queue_fini(kp__queue *q) {
    if (!q->ring) return;
    if (q->mu_init) {
        pthread_cond_destroy(&q->not_full);
        pthread_cond_destroy(&q->not_empty);
        pthread_mutex_destroy(&q->mu);
    }
    kp__free(q->ring);
    q->ring = NULL;
}

/* --- the lock-free form ---------------------------------------------- */

static bool kp__stopped(struct kp_flow *f, kp__queue *q) {
    return atomic_load_explicit(&q->closed, memory_order_acquire) ||
           atomic_load_explicit(&f->cancel, memory_order_relaxed);
}

/* Whether the ring is full for a push at tail t, reading the consumer's
 * index again only when the last value read says so. */
static bool kp__sp_full(kp__queue *q, size_t t) {
    if (t - q->sp_head_seen < q->cap) return false;
    q->sp_head_seen = atomic_load_explicit(&q->sp_head, memory_order_acquire);
    return t - q->sp_head_seen == q->cap;
}

static bool kp__sp_empty(kp__queue *q, size_t h) {
    if (h != q->sp_tail_seen) return false;
    q->sp_tail_seen = atomic_load_explicit(&q->sp_tail, memory_order_acquire);
    return h == q->sp_tail_seen;
}

/* Waits while the ring is full (producer) or empty (consumer), up to the
 * deadline (NULL: none) or a stop: spins first, then sleeps on w. */
static void kp__sp_wait(struct kp_flow *f, kp__queue *q, bool producer, size_t at,
                        const struct timespec *deadline) {
    kp__wake *w = producer ? &q->sp_not_full : &q->sp_not_empty;
    if (producer)
        kp__flow_spin_while(f, &q->sp_head, at - q->cap);
    else if (!deadline) /* a batch's wait for more: its deadline, not a spin */
        kp__flow_spin_while(f, &q->sp_tail, at);
    for (;;) {
        if ((producer ? !kp__sp_full(q, at) : !kp__sp_empty(q, at)) || kp__stopped(f, q)) return;
        uint32_t key = kp__wake_prepare(w);
        if ((producer ? !kp__sp_full(q, at) : !kp__sp_empty(q, at)) || kp__stopped(f, q)) {
            kp__wake_cancel(w);
            return;
        }
        kp__wake_wait(w, key, deadline);
        if (kp__wake_past(deadline)) return;
    }
}

static void kp__sp_push(struct kp_flow *f, kp__queue *q, kp__fframe *fr) {
    size_t t = atomic_load_explicit(&q->sp_tail, memory_order_relaxed);
    bool full = kp__sp_full(q, t);
    if (full && q->policy == KP_QUEUE_BLOCK) {
        kp__sp_wait(f, q, true, t, NULL);
        full = kp__sp_full(q, t);
    }
    if (kp__stopped(f, q)) {
        kp__frame_put(f, fr, false);
        return;
    }
    if (full) { /* drop newest */
        atomic_fetch_add_explicit(&q->drops, 1, memory_order_relaxed);
        kp__frame_put(f, fr, true);
        return;
    }
    q->ring[t % q->cap] = fr;
    atomic_store_explicit(&q->sp_tail, t + 1, memory_order_release);
    /* the depth seen from here is an upper bound (the head only grows);
     * this thread alone writes max_depth */
    size_t d = t + 1 - q->sp_head_seen;
    if (d > atomic_load_explicit(&q->max_depth, memory_order_relaxed))
        atomic_store_explicit(&q->max_depth, d, memory_order_relaxed);
    kp__wake_all(&q->sp_not_empty);
}

static kp__fframe *kp__sp_pop(struct kp_flow *f, kp__queue *q, const struct timespec *deadline) {
    size_t h = atomic_load_explicit(&q->sp_head, memory_order_relaxed);
    if (kp__sp_empty(q, h)) {
        kp__sp_wait(f, q, false, h, deadline);
        /* closed: what the producer pushed before closing is still taken */
        if (kp__sp_empty(q, h)) return NULL;
    }
    if (atomic_load_explicit(&f->cancel, memory_order_relaxed)) return NULL;
    kp__fframe *fr = q->ring[h % q->cap];
    fr->ticket = h;
    atomic_store_explicit(&q->sp_head, h + 1, memory_order_release);
    kp__wake_all(&q->sp_not_full);
    return fr;
}

bool kp__queue_wait_ready(struct kp_flow *f, kp__queue *q) {
    size_t h = atomic_load_explicit(&q->sp_head, memory_order_relaxed);
    if (kp__sp_empty(q, h)) kp__sp_wait(f, q, false, h, NULL);
    return !kp__sp_empty(q, h) && !atomic_load_explicit(&f->cancel, memory_order_relaxed);
}

bool kp__queue_empty(kp__queue *q) {
    if (!q->spsc) return atomic_load_explicit(&q->depth, memory_order_relaxed) == 0;
    /* acquire: for the ring's producer, every frame it pushed is taken */
    return atomic_load_explicit(&q->sp_head, memory_order_acquire) ==
           atomic_load_explicit(&q->sp_tail, memory_order_relaxed);
}

bool kp__queue_consumer_asleep(kp__queue *q) {
    return atomic_load_explicit(&q->sp_not_empty.waiters, memory_order_relaxed) != 0;
}

/* --- the locked form --------------------------------------------------- */

void kp__queue_push(struct kp_flow *f, kp__queue *q, kp__fframe *fr) {
    if (q->spsc) {
        kp__sp_push(f, q, fr);
        return;
    }
    kp__fframe *drop = NULL;
    bool in = false;
    if (q->policy == KP_QUEUE_BLOCK) kp__flow_spin_while(f, &q->depth, q->cap);
    kp__flow_lock(f, &q->mu);
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

kp__fframe *kp__queue_pop(struct kp_flow *f, kp__queue *q, size_t r) {
    if (q->spsc) return kp__sp_pop(f, q, NULL);
    kp__fframe *fr = NULL;
    kp__flow_spin_while(f, &q->depth, 0);
    kp__flow_lock(f, &q->mu);
    while ((q->count == 0 || !kp__my_turn(q, r)) && !(q->closed && q->count == 0) &&
           !atomic_load(&f->cancel))
        pthread_cond_wait(&q->not_empty, &q->mu);
    if (q->count && !atomic_load(&f->cancel)) fr = kp__queue_take_head(q);
    pthread_mutex_unlock(&q->mu);
    return fr;
}

kp__fframe *kp__queue_pop_until(struct kp_flow *f, kp__queue *q, const struct timespec *deadline) {
    if (q->spsc) return kp__sp_pop(f, q, deadline);
    kp__fframe *fr = NULL;
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->closed && !atomic_load(&f->cancel))
        if (pthread_cond_timedwait(&q->not_empty, &q->mu, deadline) != 0) break;
    if (q->count && !atomic_load(&f->cancel)) fr = kp__queue_take_head(q);
    pthread_mutex_unlock(&q->mu);
    return fr;
}

void kp__queue_close(kp__queue *q) {
    if (!q->ring) return; /* a source's: none */
    if (q->spsc) {
        atomic_store_explicit(&q->closed, true, memory_order_release);
        kp__wake_all(&q->sp_not_empty);
        kp__wake_all(&q->sp_not_full);
        return;
    }
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

void kp__queue_drain(struct kp_flow *f, kp__queue *q) {
    if (q->ring && q->spsc) { /* the threads are gone */
        size_t t = atomic_load(&q->sp_tail);
        for (size_t h = atomic_load(&q->sp_head); h != t; h++) {
            atomic_store(&q->sp_head, h + 1);
            kp__frame_put(f, q->ring[h % q->cap], false);
        }
        return;
    }
    while (q->ring) {
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

void kp__queue_counts(kp__queue *q, size_t *depth, uint64_t *pushed) {
    if (!q->spsc) {
        *depth = atomic_load(&q->depth);
        *pushed = atomic_load(&q->pushed);
        return;
    }
    size_t h = atomic_load(&q->sp_head), t = atomic_load(&q->sp_tail);
    *depth = t >= h ? t - h : 0; /* read apart: the tail read last is the newer */
    *pushed = t + atomic_load(&q->carried);
}
