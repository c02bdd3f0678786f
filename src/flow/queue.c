/* Flows' queues: bounded rings between stages under a lock, by policy
 * (block, drop oldest, drop newest), with the tickets replicated stages
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

kp_status kp__queue_init(kp__queue *q, size_t cap, kp_queue_policy policy) {
    q->ring = kp__calloc(cap, sizeof *q->ring);
    if (!q->ring) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for a queue");
    q->cap = cap;
    q->policy = policy;
    if (pthread_mutex_init(&q->mu, NULL) != 0) goto fail;
    pthread_condattr_t ca;
    bool ca_ok = pthread_condattr_init(&ca) == 0;
    if (ca_ok) (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->not_empty, ca_ok ? &ca : NULL);
    if (ca_ok) pthread_condattr_destroy(&ca);
    if (rc != 0) goto fail_mu;
    if (pthread_cond_init(&q->not_full, NULL) != 0) goto fail_ne;
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
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_mutex_destroy(&q->mu);
    kp__free(q->ring);
    q->ring = NULL;
}

void kp__queue_push(struct kp_flow *f, kp__queue *q, kp__fframe *fr) {
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
    pthread_mutex_lock(&q->mu);
    q->closed = true;
    pthread_cond_broadcast(&q->not_empty);
    pthread_cond_broadcast(&q->not_full);
    pthread_mutex_unlock(&q->mu);
}

void kp__queue_drain(struct kp_flow *f, kp__queue *q) {
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
