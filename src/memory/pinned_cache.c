/* The pinned host caching allocator.
 *
 * Blocks come from kp_malloc_host in power-of-two classes (4 KiB up) and are
 * cached per class. A block is reused only once the streams it was used on
 * (its allocation stream and kp_allocator_record_stream) have finished the
 * work enqueued before its free; a block allocated for no stream is
 * device-wide and waits for the whole device. The thread that created the
 * allocator owns it: a free from any other thread is O(1) and makes no driver
 * call: the block is parked and released by the owner's next call (and at
 * destroy), so real-time threads never wait in the driver. Thread-safe. */
#include <string.h>

#include "memory-impl.h"

#define KP__PIN_MIN_CLASS 12 /* 4 KiB */
#define KP__PIN_CLASSES 48

typedef struct kp__pblock {
    void *ptr;
    size_t requested;
    int cls;
    bool allocated;
    kp__uses uses; /* its allocation stream (none: device-wide) and recorded ones */
    struct kp__pblock *next;
} kp__pblock;

typedef struct kp__pinned {
    pthread_mutex_t mu;
    kp_device_t dev;
    pthread_t owner;
    size_t budget;
    kp__pblock *cls[KP__PIN_CLASSES]; /* cached, ready */
    kp__pblock *pending;              /* freed, waiting for events */
    kp__pblock *parked;               /* freed by other threads */
    kp__ptrmap live, all;             /* live blocks; every block we hold */
    kp__evpool events;
    kp_alloc_stats st;
} kp__pinned;

static int kp__class_of(size_t bytes) {
    int c = KP__PIN_MIN_CLASS;
    while (((size_t)1 << c) < bytes && c < KP__PIN_CLASSES - 1) c++;
    return c;
}

static bool kp__is_owner(const kp__pinned *p) { return pthread_equal(p->owner, pthread_self()); }

/* Files a freed block (owner thread, lock held): ready now, pending on
 * events recorded on the streams that used it, or, while one of those
 * streams is capturing, left for a later call (returns false). */
static bool kp__p_retire(kp__pinned *p, kp__pblock *b) {
    if (b->uses.overflow) {
        (void)kp_device_sync(p->dev);
    } else if (b->uses.n && !kp__uses_idle(&b->uses)) {
        int r = kp__uses_record(&b->uses, &p->events);
        if (r == 0) return false;
        if (r == 1) {
            b->next = p->pending;
            p->pending = b;
            p->st.deferred++;
            return true;
        }
        kp__uses_release(&b->uses, &p->events);
        (void)kp_device_sync(p->dev); /* no events to wait on: wait for the device */
    }
    b->next = p->cls[b->cls];
    p->cls[b->cls] = b;
    return true;
}

/* Owner thread: retires parked frees, moves completed pending blocks back. */
static void kp__p_drain(kp__pinned *p, bool query) {
    kp__pblock *list = p->parked;
    p->parked = NULL;
    while (list) {
        kp__pblock *b = list;
        list = b->next;
        if (!kp__p_retire(p, b)) {
            b->next = p->parked;
            p->parked = b;
        }
    }
    for (kp__pblock **bp = &p->pending; query && *bp;) {
        kp__pblock *b = *bp;
        if (!kp__uses_done(&b->uses)) {
            bp = &b->next;
            continue;
        }
        *bp = b->next;
        kp__uses_release(&b->uses, &p->events);
        b->next = p->cls[b->cls];
        p->cls[b->cls] = b;
    }
}

static void kp__p_release_cached(kp__pinned *p) {
    for (int c = 0; c < KP__PIN_CLASSES; c++)
        while (p->cls[c]) {
            kp__pblock *b = p->cls[c];
            p->cls[c] = b->next;
            kp__ptrmap_take(&p->all, b->ptr);
            kp_free_host(p->dev, b->ptr);
            p->st.reserved -= (size_t)1 << b->cls;
            p->st.driver_frees++;
            kp__free(b);
        }
}

static kp_status kp__p_new(kp__pinned *p, int cls, kp__pblock **out) {
    size_t size = (size_t)1 << cls;
    char b1[32], b2[32];
    if (p->budget && p->st.reserved + size > p->budget)
        return kp__error(
            KP_ERR_OUT_OF_MEMORY, "pinned allocator: %s more would pass the budget of %s",
            kp__bytes_str(size, b1, sizeof b1), kp__bytes_str(p->budget, b2, sizeof b2));
    kp__pblock *b = kp__calloc(1, sizeof *b);
    if (!b) return kp__error(KP_ERR_OUT_OF_MEMORY, "pinned allocator: no memory for bookkeeping");
    kp_status st = kp_malloc_host(p->dev, size, &b->ptr);
    if (st == KP_ERR_OUT_OF_MEMORY) {
        p->st.oom_retries++;
        kp__p_release_cached(p);
        st = kp_malloc_host(p->dev, size, &b->ptr);
    }
    if (st == KP_OK && (st = kp__ptrmap_put(&p->all, b->ptr, b)) != KP_OK)
        kp_free_host(p->dev, b->ptr);
    if (st != KP_OK) {
        kp__free(b);
        return st;
    }
    b->cls = cls;
    p->st.reserved += size;
    p->st.driver_allocs++;
    if (p->st.reserved > p->st.peak_reserved) p->st.peak_reserved = p->st.reserved;
    *out = b;
    return KP_OK;
}

static kp_status kp__p_alloc(void *ctx, size_t bytes, kp_stream_t s, void **out) {
    kp__pinned *p = ctx;
    int cls = kp__class_of(bytes);
    if (((size_t)1 << cls) < bytes)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "pinned allocator: %zu bytes is too large", bytes);
    bool capturing = s && kp_stream_is_capturing(s);
    pthread_mutex_lock(&p->mu);
    if (kp__is_owner(p)) kp__p_drain(p, !capturing);
    kp__pblock *b = p->cls[cls];
    kp_status st = KP_OK;
    if (b) {
        p->cls[cls] = b->next;
        p->st.cache_hits++;
    } else if ((st = kp__p_new(p, cls, &b)) == KP_OK) {
        p->st.cache_misses++;
    } else if (st == KP_ERR_OUT_OF_MEMORY) {
        p->st.oom_failures++;
    }
    if (st == KP_OK && (st = kp__ptrmap_put(&p->live, b->ptr, b)) != KP_OK) {
        b->next = p->cls[cls];
        p->cls[cls] = b;
    }
    if (st == KP_OK) {
        b->allocated = true;
        b->requested = bytes;
        kp__uses_init(&b->uses, s);
        p->st.allocs++;
        p->st.allocated += (size_t)1 << cls;
        p->st.requested += bytes;
        if (p->st.allocated > p->st.peak_allocated) p->st.peak_allocated = p->st.allocated;
        *out = b->ptr;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

static kp_status kp__p_free(void *ctx, void *ptr) {
    kp__pinned *p = ctx;
    kp_status st = KP_OK;
    pthread_mutex_lock(&p->mu);
    kp__pblock *b = kp__ptrmap_take(&p->live, ptr);
    if (!b) {
        st = kp__ptrmap_get(&p->all, ptr)
                 ? kp__error(KP_ERR_INVALID_ARG, "pinned allocator: double free of %p", ptr)
                 : kp__error(KP_ERR_INVALID_ARG,
                             "pinned allocator: %p was not allocated by this "
                             "allocator",
                             ptr);
    } else {
        b->allocated = false;
        p->st.frees++;
        p->st.allocated -= (size_t)1 << b->cls;
        p->st.requested -= b->requested;
        if (kp__is_owner(p)) {
            kp__p_drain(p, true);
            if (!kp__p_retire(p, b)) {
                b->next = p->parked;
                p->parked = b;
            }
        } else {
            b->next = p->parked; /* the owner retires it; no driver call here */
            p->parked = b;
            p->st.deferred++;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

static kp_status kp__p_record_stream(void *ctx, void *ptr, kp_stream_t s) {
    kp__pinned *p = ctx;
    pthread_mutex_lock(&p->mu);
    kp__pblock *b = kp__ptrmap_get(&p->live, ptr);
    kp_status st = KP_OK;
    if (!b) {
        st = kp__error(KP_ERR_INVALID_ARG,
                       "record_stream: %p is not a live block of this "
                       "pinned allocator",
                       ptr);
    } else {
        kp__uses_add(&b->uses, s);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

static kp_status kp__p_empty_cache(void *ctx) {
    kp__pinned *p = ctx;
    pthread_mutex_lock(&p->mu);
    if (kp__is_owner(p)) kp__p_drain(p, true);
    kp__p_release_cached(p);
    pthread_mutex_unlock(&p->mu);
    return KP_OK;
}

static void kp__p_stats(void *ctx, kp_alloc_stats *out) {
    kp__pinned *p = ctx;
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    for (int c = KP__PIN_CLASSES - 1; c >= 0 && !out->largest_free; c--)
        if (p->cls[c]) out->largest_free = (size_t)1 << c;
    pthread_mutex_unlock(&p->mu);
}

static void kp__p_destroy(void *ctx) {
    kp__pinned *p = ctx;
    (void)kp_device_sync(p->dev);
    kp__p_drain(p, true); /* parked frees of other threads, at shutdown */
    if (p->live.used)
        kp__log(KP_LOG_WARN, "pinned allocator destroyed with %zu live blocks; freeing them",
                p->live.used);
    for (size_t i = 0; i < p->all.cap; i++) {
        if (p->all.keys[i] <= 1) continue;
        kp__pblock *b = p->all.vals[i];
        kp__uses_destroy(&b->uses);
        kp_free_host(p->dev, b->ptr);
        kp__free(b);
    }
    kp__ptrmap_free(&p->all);
    kp__ptrmap_free(&p->live);
    kp__evpool_free(&p->events);
    pthread_mutex_destroy(&p->mu);
    kp__free(p);
}

static const kp_allocator_i kp__pinned_iface = {
    .alloc = kp__p_alloc,
    .free = kp__p_free,
    .record_stream = kp__p_record_stream,
    .empty_cache = kp__p_empty_cache,
    .stats = kp__p_stats,
    .destroy = kp__p_destroy,
};

kp_status kp__pinned_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg) {
    kp__pinned *p = kp__calloc(1, sizeof *p);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "pinned allocator: no memory");
    pthread_mutex_init(&p->mu, NULL);
    p->dev = a->dev;
    p->events.dev = a->dev;
    p->owner = pthread_self();
    p->budget = cfg->budget_bytes;
    a->iface = &kp__pinned_iface;
    a->ctx = p;
    return KP_OK;
}
