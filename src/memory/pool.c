/* The bucketed buffer pool: fixed-size buffers in power-of-two classes,
 * recycled into their class when the last reference drops. A buffer's
 * bookkeeping travels with it, so a steady-state acquire/release loop makes
 * no allocation at all, of host or device memory. */
#include <stdatomic.h>
#include <string.h>

#include "memory-impl.h"

#define KP__POOL_CLASSES 48

struct kp_buffer {
    kp_buffer_pool_t pool;
    void *data;
    size_t size;
    int cls;            /* -1: overflow, freed on release */
    kp_stream_t stream; /* the stream it was allocated for */
    atomic_int refs;
    struct kp_buffer *next;
};

struct kp_buffer_pool {
    pthread_mutex_t mu;
    kp_allocator_t alloc;
    kp_pool_config cfg;
    int min_cls, max_cls;
    kp_buffer_t cached[KP__POOL_CLASSES];
    size_t n_cached[KP__POOL_CLASSES];
    kp_pool_stats st;
    atomic_int refs; /* 1 for the owner + 1 per live buffer */
};

static int kp__ceil_log2(size_t x) {
    int c = 0;
    while (((size_t)1 << c) < x && c < 63) c++;
    return c;
}

kp_status kp_buffer_pool_create(kp_device_t dev, const kp_pool_config *cfg, kp_buffer_pool_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(dev && cfg && out);
    *out = NULL;
    kp_pool_config c = KP_POOL_CONFIG_INIT;
    KP_CHECK(kp__config_read(&c, sizeof c, cfg, KP__SIZE_THROUGH(kp_pool_config, max_per_class),
                             "config", "KP_POOL_CONFIG_INIT"));
    cfg = &c;
    if (!cfg->min_bytes || cfg->max_bytes < cfg->min_bytes ||
        kp__ceil_log2(cfg->max_bytes) >= KP__POOL_CLASSES)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_buffer_pool_create: size classes %zu .. %zu bytes "
                         "are not a valid range",
                         cfg->min_bytes, cfg->max_bytes);
    kp_allocator_t a;
    KP_CHECK(kp_device_allocator(dev, cfg->kind, &a));
    kp_buffer_pool_t p = kp__calloc(1, sizeof *p);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "buffer pool: no memory");
    pthread_mutex_init(&p->mu, NULL);
    p->alloc = a;
    p->cfg = *cfg;
    p->min_cls = kp__ceil_log2(cfg->min_bytes);
    p->max_cls = kp__ceil_log2(cfg->max_bytes);
    atomic_init(&p->refs, 1);
    *out = p;
    return KP_OK;
}

static void kp__pool_unref(kp_buffer_pool_t p) {
    if (atomic_fetch_sub(&p->refs, 1) != 1) return;
    for (int c = 0; c < KP__POOL_CLASSES; c++)
        while (p->cached[c]) {
            kp_buffer_t b = p->cached[c];
            p->cached[c] = b->next;
            (void)kp_allocator_free(p->alloc, b->data);
            kp__free(b);
        }
    pthread_mutex_destroy(&p->mu);
    kp__free(p);
}

void kp_buffer_pool_destroy(kp_buffer_pool_t p) {
    if (p) kp__pool_unref(p);
}

static void kp__buffer_recache(kp_buffer_pool_t p, kp_buffer_t b) {
    pthread_mutex_lock(&p->mu);
    b->next = p->cached[b->cls];
    p->cached[b->cls] = b;
    p->n_cached[b->cls]++;
    p->st.cached_bytes += b->size;
    pthread_mutex_unlock(&p->mu);
}

kp_status kp_buffer_acquire(kp_buffer_pool_t p, size_t bytes, kp_stream_t s, kp_buffer_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(p && out);
    *out = NULL;
    int cls = kp__ceil_log2(bytes ? bytes : 1);
    if (cls < p->min_cls) cls = p->min_cls;
    bool overflow = cls > p->max_cls;
    pthread_mutex_lock(&p->mu);
    kp_buffer_t b = overflow ? NULL : p->cached[cls];
    if (b) {
        p->cached[cls] = b->next;
        p->n_cached[cls]--;
        p->st.hits++;
        p->st.cached_bytes -= b->size;
    } else {
        if (overflow)
            p->st.overflows++;
        else
            p->st.misses++;
    }
    pthread_mutex_unlock(&p->mu);
    if (!b) {
        size_t size = overflow ? bytes : (size_t)1 << cls;
        b = kp__calloc(1, sizeof *b);
        if (!b) return kp__error(KP_ERR_OUT_OF_MEMORY, "buffer pool: no memory");
        kp_status st = kp_allocator_alloc(p->alloc, size, s, &b->data);
        if (st != KP_OK) {
            kp__free(b);
            return st;
        }
        b->pool = p;
        b->size = size;
        b->cls = overflow ? -1 : cls;
        b->stream = s;
    } else if (s && s != b->stream) {
        /* used on another stream now: its allocator must wait for that one too */
        kp_status st = kp_allocator_record_stream(p->alloc, b->data, s);
        if (st != KP_OK) {
            kp__buffer_recache(p, b);
            return st;
        }
    }
    atomic_init(&b->refs, 1);
    atomic_fetch_add(&p->refs, 1);
    pthread_mutex_lock(&p->mu);
    p->st.live_bytes += b->size;
    pthread_mutex_unlock(&p->mu);
    *out = b;
    return KP_OK;
}

kp_buffer_t kp_buffer_retain(kp_buffer_t b) {
    if (b) atomic_fetch_add(&b->refs, 1);
    return b;
}

void kp_buffer_release(kp_buffer_t b) {
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
    kp_buffer_pool_t p = b->pool;
    pthread_mutex_lock(&p->mu);
    p->st.live_bytes -= b->size;
    bool keep = b->cls >= 0 && p->n_cached[b->cls] < p->cfg.max_per_class;
    if (keep) {
        b->next = p->cached[b->cls];
        p->cached[b->cls] = b;
        p->n_cached[b->cls]++;
        p->st.recycles++;
        p->st.cached_bytes += b->size;
    } else if (b->cls >= 0) {
        p->st.overflows++;
    }
    pthread_mutex_unlock(&p->mu);
    if (!keep) {
        (void)kp_allocator_free(p->alloc, b->data);
        kp__free(b);
    }
    kp__pool_unref(p);
}

void *kp_buffer_data(kp_buffer_t b) { return b ? b->data : NULL; }
size_t kp_buffer_size(kp_buffer_t b) { return b ? b->size : 0; }

kp_status kp_buffer_pool_stats(kp_buffer_pool_t p, kp_pool_stats *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(p && out);
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
    return KP_OK;
}
