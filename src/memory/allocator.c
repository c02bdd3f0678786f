/* Allocators: public wrappers, the device's default allocators, and the
 * plain host allocator. */
#include <stdio.h>
#include <string.h>

#include "memory-impl.h"

static const char *const kp__kind_names[] = {"host", "pinned", "device"};

kp_status kp_allocator_create(kp_device_t dev, kp_allocator_kind kind,
                              const kp_allocator_config *cfg, kp_allocator_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(dev && out);
    *out = NULL;
    if ((unsigned)kind >= KP_ALLOCATOR_KINDS)
        return kp__error(KP_ERR_INVALID_ARG, "kp_allocator_create: unknown kind %d", (int)kind);
    kp_allocator_config c = KP_ALLOCATOR_CONFIG_INIT;
    if (cfg)
        KP_CHECK(kp__config_read(&c, sizeof c, cfg,
                                 KP__SIZE_THROUGH(kp_allocator_config, max_split_bytes), "config",
                                 "KP_ALLOCATOR_CONFIG_INIT"));
    cfg = &c;
    kp_allocator_t a = kp__calloc(1, sizeof *a);
    if (!a) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_allocator_create: no memory");
    a->dev = dev;
    a->kind = kind;
    kp_status st = kind == KP_ALLOCATOR_HOST     ? kp__host_allocator_init(a, cfg)
                   : kind == KP_ALLOCATOR_PINNED ? kp__pinned_allocator_init(a, cfg)
                                                 : kp__caching_allocator_init(a, cfg);
    if (st != KP_OK) {
        kp__free(a);
        return st;
    }
    *out = a;
    return KP_OK;
}

void kp_allocator_destroy(kp_allocator_t a) {
    if (!a) return;
    a->iface->destroy(a->ctx);
    kp__free(a);
}

kp_allocator_kind kp_allocator_get_kind(kp_allocator_t a) {
    return a ? a->kind : KP_ALLOCATOR_KINDS;
}

/* --- the device's own allocators, attached to the device ------------------------------ */
typedef struct kp__dev_allocs {
    pthread_mutex_t mu;
    kp_allocator_t own[KP_ALLOCATOR_KINDS];  /* created here, destroyed with the device */
    kp_allocator_t user[KP_ALLOCATOR_KINDS]; /* set by kp_device_set_allocator, not owned */
} kp__dev_allocs;

static const char kp__dev_allocs_key = 0; /* its address is the attachment's key */

/* At device close: the device allocator first (its blocks may have been
 * used with pinned staging), as the kinds were created last-first. */
static void kp__dev_allocs_close(void *obj) {
    kp__dev_allocs *d = obj;
    for (int k = KP_ALLOCATOR_KINDS - 1; k >= 0; k--) kp_allocator_destroy(d->own[k]);
    pthread_mutex_destroy(&d->mu);
    kp__free(d);
}

/* The device's record, attached on first use (another thread may win the race). */
static kp_status kp__dev_allocs_of(kp_device_t dev, kp__dev_allocs **out) {
    kp__dev_allocs *d = kp_device_attachment(dev, &kp__dev_allocs_key);
    if (!d) {
        d = kp__calloc(1, sizeof *d);
        if (!d) return kp__error(KP_ERR_OUT_OF_MEMORY, "device allocators: no memory");
        pthread_mutex_init(&d->mu, NULL);
        kp_status st = kp_device_attach(dev, &kp__dev_allocs_key, d, kp__dev_allocs_close);
        if (st != KP_OK) {
            kp__dev_allocs_close(d);
            d = kp_device_attachment(dev, &kp__dev_allocs_key);
            if (!d) return st;
        }
    }
    *out = d;
    return KP_OK;
}

kp_status kp_device_allocator(kp_device_t dev, kp_allocator_kind kind, kp_allocator_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(dev && out && (unsigned)kind < KP_ALLOCATOR_KINDS);
    kp__dev_allocs *d;
    KP_CHECK(kp__dev_allocs_of(dev, &d));
    pthread_mutex_lock(&d->mu);
    kp_status st = KP_OK;
    if (!d->user[kind] && !d->own[kind]) st = kp_allocator_create(dev, kind, NULL, &d->own[kind]);
    *out = d->user[kind] ? d->user[kind] : d->own[kind];
    pthread_mutex_unlock(&d->mu);
    return st;
}

kp_status kp_device_set_allocator(kp_device_t dev, kp_allocator_kind kind, kp_allocator_t a) {
    KP_API_ENTRY();
    KP_ARG_CHECK(dev && (unsigned)kind < KP_ALLOCATOR_KINDS);
    if (a && (a->dev != dev || a->kind != kind))
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_device_set_allocator: the allocator is a %s "
                         "allocator of %s, not a %s allocator of %s",
                         kp__kind_names[a->kind], kp_device_name(a->dev), kp__kind_names[kind],
                         kp_device_name(dev));
    kp__dev_allocs *d;
    KP_CHECK(kp__dev_allocs_of(dev, &d));
    pthread_mutex_lock(&d->mu);
    d->user[kind] = a;
    pthread_mutex_unlock(&d->mu);
    return KP_OK;
}

/* --- wrappers --------------------------------------------------------------------- */
kp_status kp_allocator_alloc(kp_allocator_t a, size_t bytes, kp_stream_t s, void **out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a && out);
    *out = NULL;
    if (bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_OUT_OF_MEMORY,
                         "kp_allocator_alloc: %zu bytes is more than any "
                         "%s allocator serves (at most %zu)",
                         bytes, kp__kind_names[a->kind], KP__MAX_ALLOC_BYTES);
    if (s && kp_stream_device(s) != a->dev)
        return kp__error_devices(__func__, "stream", kp_stream_device(s),
                                 kp_device_name(kp_stream_device(s)), "allocator", a->dev,
                                 kp_device_name(a->dev));
    return a->iface->alloc(a->ctx, bytes ? bytes : 1, s, out);
}

kp_status kp_allocator_free(kp_allocator_t a, void *ptr) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a);
    return ptr ? a->iface->free(a->ctx, ptr) : KP_OK;
}

kp_status kp_allocator_record_stream(kp_allocator_t a, void *ptr, kp_stream_t s) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a && ptr && s);
    if (kp_stream_device(s) != a->dev)
        return kp__error_devices(__func__, "stream", kp_stream_device(s),
                                 kp_device_name(kp_stream_device(s)), "allocator", a->dev,
                                 kp_device_name(a->dev));
    return a->iface->record_stream ? a->iface->record_stream(a->ctx, ptr, s) : KP_OK;
}

kp_status kp_allocator_empty_cache(kp_allocator_t a) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a);
    return a->iface->empty_cache ? a->iface->empty_cache(a->ctx) : KP_OK;
}

kp_status kp_allocator_stats(kp_allocator_t a, kp_alloc_stats *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a && out);
    memset(out, 0, sizeof *out);
    a->iface->stats(a->ctx, out);
    return KP_OK;
}

kp_status kp_allocator_snapshot(kp_allocator_t a, kp_block_info *rows, size_t cap, size_t *n) {
    KP_API_ENTRY();
    KP_ARG_CHECK(a && n && (rows || cap == 0));
    *n = 0;
    return a->iface->snapshot ? a->iface->snapshot(a->ctx, rows, cap, n) : KP_OK;
}

/* --- plain host memory ------------------------------------------------------------- */
typedef struct kp__host_alloc {
    pthread_mutex_t mu;
    kp__ptrmap live; /* ptr -> size */
    kp_alloc_stats st;
    size_t budget;
} kp__host_alloc;

static kp_status kp__host_alloc_fn(void *ctx, size_t bytes, kp_stream_t s, void **out) {
    kp__host_alloc *h = ctx;
    char b1[32], b2[32];
    pthread_mutex_lock(&h->mu);
    kp_status st = KP_OK;
    if (h->budget && h->st.allocated + bytes > h->budget) {
        h->st.oom_failures++;
        st =
            kp__error(KP_ERR_OUT_OF_MEMORY, "host allocator: %s more would pass the budget of %s",
                      kp__bytes_str(bytes, b1, sizeof b1), kp__bytes_str(h->budget, b2, sizeof b2));
    }
    void *p = st == KP_OK ? kp__aligned_alloc(KP_MEM_HOST, bytes, 256) : NULL;
    if (st == KP_OK && !p) {
        h->st.oom_failures++;
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "host allocator: allocating %s failed",
                       kp__bytes_str(bytes, b1, sizeof b1));
    }
    if (st == KP_OK && (st = kp__ptrmap_put(&h->live, p, (void *)(uintptr_t)bytes)) != KP_OK)
        kp__aligned_free(KP_MEM_HOST, p);
    if (st == KP_OK) {
        h->st.allocs++;
        h->st.driver_allocs++;
        h->st.cache_misses++;
        h->st.allocated += bytes;
        h->st.requested += bytes;
        h->st.reserved += bytes;
        if (h->st.allocated > h->st.peak_allocated) h->st.peak_allocated = h->st.allocated;
        h->st.peak_reserved = h->st.peak_allocated;
        *out = p;
    }
    pthread_mutex_unlock(&h->mu);
    return st;
}

static kp_status kp__host_free_fn(void *ctx, void *ptr) {
    kp__host_alloc *h = ctx;
    pthread_mutex_lock(&h->mu);
    size_t bytes = (size_t)(uintptr_t)kp__ptrmap_take(&h->live, ptr);
    if (bytes) {
        h->st.frees++;
        h->st.driver_frees++;
        h->st.allocated -= bytes;
        h->st.requested -= bytes;
        h->st.reserved -= bytes;
    }
    pthread_mutex_unlock(&h->mu);
    if (!bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_allocator_free: %p was not allocated by this "
                         "host allocator or was freed already",
                         ptr);
    kp__aligned_free(KP_MEM_HOST, ptr);
    return KP_OK;
}

/* Host memory needs no stream bookkeeping, but the pointer must be live. */
static kp_status kp__host_record_fn(void *ctx, void *ptr, kp_stream_t s) {
    kp__host_alloc *h = ctx;
    pthread_mutex_lock(&h->mu);
    bool live = kp__ptrmap_get(&h->live, ptr) != NULL;
    pthread_mutex_unlock(&h->mu);
    return live ? KP_OK
                : kp__error(KP_ERR_INVALID_ARG,
                            "kp_allocator_record_stream: %p is not a live "
                            "block of this host allocator",
                            ptr);
}

static void kp__host_stats_fn(void *ctx, kp_alloc_stats *out) {
    kp__host_alloc *h = ctx;
    pthread_mutex_lock(&h->mu);
    *out = h->st;
    pthread_mutex_unlock(&h->mu);
}

static void kp__host_destroy_fn(void *ctx) {
    kp__host_alloc *h = ctx;
    if (h->live.used)
        kp__log(KP_LOG_WARN, "host allocator destroyed with %zu live blocks; freeing them",
                h->live.used);
    for (size_t i = 0; i < h->live.cap; i++)
        if (h->live.keys[i] > 1) kp__aligned_free(KP_MEM_HOST, (void *)h->live.keys[i]);
    kp__ptrmap_free(&h->live);
    pthread_mutex_destroy(&h->mu);
    kp__free(h);
}

static const kp_allocator_i kp__host_iface = {
    .alloc = kp__host_alloc_fn,
    .free = kp__host_free_fn,
    .record_stream = kp__host_record_fn,
    .stats = kp__host_stats_fn,
    .destroy = kp__host_destroy_fn,
};

kp_status kp__host_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg) {
    kp__host_alloc *h = kp__calloc(1, sizeof *h);
    if (!h) return kp__error(KP_ERR_OUT_OF_MEMORY, "host allocator: no memory");
    pthread_mutex_init(&h->mu, NULL);
    h->budget = cfg->budget_bytes;
    a->iface = &kp__host_iface;
    a->ctx = h;
    return KP_OK;
}
