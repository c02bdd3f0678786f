/* The device caching allocator (the pinned one is pinned_cache.c).
 *
 * Segments come from the driver (kp_malloc); each belongs to one stream and
 * is carved into blocks, neighbours linked by address. Requests are rounded
 * to 512 bytes; up to 1 MiB they come from the small pool (2 MiB segments),
 * above from the large pool (20 MiB segments under 10 MiB, else the rounded
 * size). Free blocks sit in per-stream, per-pool bins by log2 of their size;
 * allocation takes the best fit and splits off the rest, freeing merges a
 * block with free neighbours. Blocks above max_split_bytes are never split
 * and serve only requests close to their size.
 *
 * A block used on other streams (kp_allocator_record_stream) is not reused
 * at once when freed: an event is recorded on each of those streams and the
 * block waits in the pending list until all have completed. While a stream
 * is capturing nothing is recorded or queried on it.
 *
 * Out of memory: reuse cached -> process pending frees and retry -> release
 * wholly free segments and retry the driver -> fail with the figures. */
#include <stdio.h>
#include <string.h>

#include "memory-impl.h"

#define KP__ROUND 512
#define KP__SMALL_MAX ((size_t)1 << 20)
#define KP__SMALL_SEG ((size_t)2 << 20)
#define KP__MID_SEG ((size_t)20 << 20)
#define KP__LARGE_MIN ((size_t)10 << 20)
#define KP__SEG_ROUND ((size_t)2 << 20)
#define KP__OVERSIZE_SLACK ((size_t)20 << 20)
#define KP__NBINS 64

typedef struct kp__cblock kp__cblock;

typedef struct kp__cseg {
    char *base;
    size_t size;
    bool small;
    kp_stream_t stream;
    kp__cblock *first;
    struct kp__cseg *next;
} kp__cseg;

struct kp__cblock {
    char *ptr;
    size_t size, requested;
    kp__cseg *seg;
    kp__cblock *prev, *next;   /* neighbours in the segment, by address */
    kp__cblock *lprev, *lnext; /* free bin or pending list */
    bool allocated, pending, listed, need_record;
    kp__uses uses; /* streams other than its segment's (kp_allocator_record_stream) */
};

typedef struct kp__spool {
    kp_stream_t stream;
    kp__cblock *bins[2][KP__NBINS]; /* [small][log2 size] */
    struct kp__spool *next;
} kp__spool;

typedef struct kp__caching {
    pthread_mutex_t mu;
    kp_device_t dev;
    size_t budget, max_split;
    kp__cseg *segs;
    kp__spool *spools;
    kp__cblock *pending;
    kp__cblock *spare; /* recycled block structs */
    kp__evpool events;
    kp__ptrmap live;
    kp_alloc_stats st;
} kp__caching;

static int kp__log2(size_t x) {
    int b = 0;
    while (x >>= 1) b++;
    return b;
}

/* --- lists ------------------------------------------------------------------------ */
static void kp__list_push(kp__cblock **head, kp__cblock *b) {
    b->lprev = NULL;
    b->lnext = *head;
    if (*head) (*head)->lprev = b;
    *head = b;
    b->listed = true;
}

static void kp__list_remove(kp__cblock **head, kp__cblock *b) {
    if (b->lprev)
        b->lprev->lnext = b->lnext;
    else
        *head = b->lnext;
    if (b->lnext) b->lnext->lprev = b->lprev;
    b->lprev = b->lnext = NULL;
    b->listed = false;
}

static kp__spool *kp__spool_of(kp__caching *c, kp_stream_t s, bool create) {
    for (kp__spool *p = c->spools; p; p = p->next)
        if (p->stream == s) return p;
    if (!create) return NULL;
    kp__spool *p = kp__calloc(1, sizeof *p);
    if (!p) return NULL;
    p->stream = s;
    p->next = c->spools;
    c->spools = p;
    return p;
}

static kp__cblock **kp__bin_of(kp__caching *c, kp__cblock *b) {
    kp__spool *p = kp__spool_of(c, b->seg->stream, false);
    KP_ASSERT(p);
    return &p->bins[b->seg->small][kp__log2(b->size)];
}

static kp__cblock *kp__block_new(kp__caching *c) {
    kp__cblock *b = c->spare;
    if (b)
        c->spare = b->lnext;
    else
        b = kp__malloc(sizeof *b);
    if (b) memset(b, 0, sizeof *b);
    return b;
}

static void kp__block_recycle(kp__caching *c, kp__cblock *b) {
    b->lnext = c->spare;
    c->spare = b;
}

/* Marks b free, merges it with free neighbours, and files it in its bin. */
static void kp__make_free(kp__caching *c, kp__cblock *b) {
    b->allocated = b->pending = b->need_record = false;
    memset(&b->uses, 0, sizeof b->uses);
    kp__cblock *nb[2] = {b->prev, b->next};
    for (int side = 0; side < 2; side++) {
        kp__cblock *n = nb[side];
        if (!n || n->allocated || n->pending) continue;
        kp__list_remove(kp__bin_of(c, n), n);
        kp__cblock *lo = side ? b : n, *hi = side ? n : b;
        lo->size += hi->size;
        lo->next = hi->next;
        if (hi->next) hi->next->prev = lo;
        kp__block_recycle(c, hi);
        b = lo;
        c->st.merges++;
    }
    kp__list_push(kp__bin_of(c, b), b);
}

/* --- pending frees ------------------------------------------------------------------ */
/* Moves pending blocks whose uses have completed back to the free bins;
 * records the events of those whose streams were capturing at the free.
 * Queries nothing when `query` is false (the caller's stream is capturing). */
static void kp__process_pending(kp__caching *c, bool query) {
    kp__cblock *b = c->pending, *next;
    for (; b; b = next) {
        next = b->lnext;
        if (b->need_record) b->need_record = kp__uses_record(&b->uses, &c->events) != 1;
        if (b->need_record || !query || !kp__uses_done(&b->uses)) continue;
        kp__uses_release(&b->uses, &c->events);
        kp__list_remove(&c->pending, b);
        kp__make_free(c, b);
    }
}

/* --- finding and carving blocks ---------------------------------------------------------- */
static bool kp__fits(const kp__caching *c, const kp__cblock *b, size_t size) {
    if (b->size < size) return false;
    if (!c->max_split) return true;
    if (size < c->max_split) return b->size <= c->max_split;
    return b->size - size < KP__OVERSIZE_SLACK;
}

static kp__cblock *kp__find(kp__caching *c, kp_stream_t s, bool small, size_t size) {
    kp__spool *p = kp__spool_of(c, s, false);
    if (!p) return NULL;
    for (int i = kp__log2(size); i < KP__NBINS; i++) {
        kp__cblock *best = NULL;
        for (kp__cblock *b = p->bins[small][i]; b; b = b->lnext)
            if (kp__fits(c, b, size) && (!best || b->size < best->size)) best = b;
        if (best) {
            kp__list_remove(&p->bins[small][i], best);
            return best;
        }
    }
    return NULL;
}

/* Splits the tail off an allocated block when enough is left over. */
static void kp__maybe_split(kp__caching *c, kp__cblock *b, size_t size) {
    size_t rest = b->size - size;
    if (c->max_split && b->size > c->max_split) return;
    if (b->seg->small ? rest < KP__ROUND : rest <= KP__SMALL_MAX) return;
    kp__cblock *t = kp__block_new(c);
    if (!t) return; /* no memory for bookkeeping: hand out the whole block */
    t->ptr = b->ptr + size;
    t->size = rest;
    t->seg = b->seg;
    t->prev = b;
    t->next = b->next;
    if (b->next) b->next->prev = t;
    b->next = t;
    b->size = size;
    c->st.splits++;
    kp__make_free(c, t);
}

static size_t kp__segment_size(size_t size) {
    if (size <= KP__SMALL_MAX) return KP__SMALL_SEG;
    if (size < KP__LARGE_MIN) return KP__MID_SEG;
    return (size + KP__SEG_ROUND - 1) / KP__SEG_ROUND * KP__SEG_ROUND;
}

/* Returns wholly free segments to the driver. */
static void kp__release_cached(kp__caching *c) {
    for (kp__cseg **sp = &c->segs; *sp;) {
        kp__cseg *s = *sp;
        kp__cblock *b = s->first;
        if (b->allocated || b->pending || b->size != s->size) {
            sp = &s->next;
            continue;
        }
        kp__list_remove(kp__bin_of(c, b), b);
        kp_free(c->dev, s->base);
        c->st.reserved -= s->size;
        c->st.driver_frees++;
        *sp = s->next;
        kp__block_recycle(c, b);
        kp__free(s);
    }
}

static kp_status kp__driver_alloc(kp__caching *c, size_t seg_size, void **out) {
    char b1[32], b2[32];
    if (c->budget && c->st.reserved + seg_size > c->budget)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "a new %s segment would pass the budget of %s",
                         kp__bytes_str(seg_size, b1, sizeof b1),
                         kp__bytes_str(c->budget, b2, sizeof b2));
    return kp_malloc(c->dev, seg_size, out);
}

/* A new segment holding one block, returned unlisted for the caller to use. */
static kp_status kp__new_segment(kp__caching *c, kp_stream_t s, bool small, size_t size,
                                 kp__cblock **out) {
    size_t seg_size = kp__segment_size(size);
    void *base = NULL;
    kp_status st = kp__driver_alloc(c, seg_size, &base);
    if (st == KP_ERR_OUT_OF_MEMORY) {
        /* the ladder: give the cache back and try the driver again */
        c->st.oom_retries++;
        kp__release_cached(c);
        st = kp__driver_alloc(c, seg_size, &base);
    }
    if (st != KP_OK) return st;
    kp__cseg *seg = kp__calloc(1, sizeof *seg);
    kp__cblock *b = kp__block_new(c);
    if (!seg || !b || !kp__spool_of(c, s, true)) {
        kp__free(seg);
        if (b) kp__block_recycle(c, b);
        kp_free(c->dev, base);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "allocator: no memory for bookkeeping");
    }
    *seg = (kp__cseg){
        .base = base, .size = seg_size, .small = small, .stream = s, .first = b, .next = c->segs};
    c->segs = seg;
    b->ptr = base;
    b->size = seg_size;
    b->seg = seg;
    *out = b;
    c->st.reserved += seg_size;
    c->st.driver_allocs++;
    if (c->st.reserved > c->st.peak_reserved) c->st.peak_reserved = c->st.reserved;
    return KP_OK;
}

/* --- interface ------------------------------------------------------------------------ */
static size_t kp__largest_free(const kp__caching *c) {
    size_t best = 0;
    for (const kp__spool *p = c->spools; p; p = p->next)
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < KP__NBINS; i++)
                for (const kp__cblock *b = p->bins[k][i]; b; b = b->lnext)
                    if (b->size > best) best = b->size;
    return best;
}

static kp_status kp__oom(kp__caching *c, size_t bytes, kp_stream_t s) {
    char r[32], a[32], v[32], l[32], why[512];
    snprintf(why, sizeof why, "%s", kp_last_error());
    c->st.oom_failures++;
    return kp__error(KP_ERR_OUT_OF_MEMORY,
                     "%s: out of memory allocating %s for stream %p: "
                     "allocated %s, reserved %s, largest free block %s (%s)",
                     kp_device_name(c->dev), kp__bytes_str(bytes, r, sizeof r), (void *)s,
                     kp__bytes_str(c->st.allocated, a, sizeof a),
                     kp__bytes_str(c->st.reserved, v, sizeof v),
                     kp__bytes_str(kp__largest_free(c), l, sizeof l), why);
}

static kp_status kp__take(kp__caching *c, size_t bytes, kp_stream_t s, kp__cblock **out) {
    /* bytes <= KP__MAX_ALLOC_BYTES (the public wrapper): no rounding wraps */
    size_t size = (bytes + KP__ROUND - 1) / KP__ROUND * KP__ROUND;
    bool small = size <= KP__SMALL_MAX, capturing = s && kp_stream_is_capturing(s);
    /* blocks whose other streams are done come back first, so they are reused
     * (and merged) before anything is carved anew */
    if (c->pending) kp__process_pending(c, !capturing);
    kp__cblock *b = kp__find(c, s, small, size);
    if (b) {
        c->st.cache_hits++;
    } else {
        if (capturing)
            return kp__error(KP_ERR_STATE,
                             "%s: no cached block of %zu bytes for a capturing "
                             "stream, and the driver may not allocate during capture",
                             kp_device_name(c->dev), size);
        kp_status st = kp__new_segment(c, s, small, size, &b);
        if (st == KP_ERR_OUT_OF_MEMORY) return kp__oom(c, bytes, s);
        if (st != KP_OK) return st;
        c->st.cache_misses++;
    }
    b->allocated = true;
    kp__maybe_split(c, b, size);
    b->requested = bytes;
    *out = b;
    return KP_OK;
}

static kp_status kp__c_alloc(void *ctx, size_t bytes, kp_stream_t s, void **out) {
    kp__caching *c = ctx;
    kp__cblock *b = NULL;
    pthread_mutex_lock(&c->mu);
    kp_status st = kp__take(c, bytes, s, &b);
    if (st == KP_OK && (st = kp__ptrmap_put(&c->live, b->ptr, b)) != KP_OK) kp__make_free(c, b);
    if (st == KP_OK) {
        c->st.allocs++;
        c->st.allocated += b->size;
        c->st.requested += bytes;
        if (c->st.allocated > c->st.peak_allocated) c->st.peak_allocated = c->st.allocated;
        *out = b->ptr;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Why `ptr` is not a live block: it lies in freed memory (a double free,
 * even once the block has merged with a neighbour), inside a live block, or
 * in no segment of this allocator. */
static kp_status kp__bad_free(kp__caching *c, const void *ptr) {
    const char *q = ptr;
    for (kp__cseg *s = c->segs; s; s = s->next) {
        if (q < s->base || q >= s->base + s->size) continue;
        for (kp__cblock *b = s->first; b; b = b->next) {
            if (q < b->ptr || q >= b->ptr + b->size) continue;
            if (!b->allocated)
                return kp__error(KP_ERR_INVALID_ARG,
                                 "%s allocator: double free of %p (it lies in "
                                 "freed memory)",
                                 kp_device_name(c->dev), ptr);
            return kp__error(KP_ERR_INVALID_ARG,
                             "%s allocator: %p points %zu bytes into a block "
                             "at %p; free the block's start",
                             kp_device_name(c->dev), ptr, (size_t)(q - b->ptr), (void *)b->ptr);
        }
    }
    return kp__error(KP_ERR_INVALID_ARG, "%s allocator: %p was not allocated by this allocator",
                     kp_device_name(c->dev), ptr);
}

static kp_status kp__c_free(void *ctx, void *ptr) {
    kp__caching *c = ctx;
    pthread_mutex_lock(&c->mu);
    kp__cblock *b = kp__ptrmap_get(&c->live, ptr);
    bool wait_device = b && (!b->seg->stream || b->uses.overflow);
    pthread_mutex_unlock(&c->mu);
    /* A device-wide block (or one used on too many streams to track) is
     * reused only after all work on the device, as cudaFree would. */
    if (wait_device) (void)kp_device_sync(c->dev);
    pthread_mutex_lock(&c->mu);
    kp_status st = KP_OK;
    b = kp__ptrmap_take(&c->live, ptr);
    if (!b) {
        st = kp__bad_free(c, ptr);
    } else {
        c->st.frees++;
        c->st.allocated -= b->size;
        c->st.requested -= b->requested;
        if (b->uses.n && !wait_device && !kp__uses_idle(&b->uses)) {
            b->allocated = false;
            b->pending = true;
            kp__list_push(&c->pending, b);
            c->st.deferred++;
            b->need_record = kp__uses_record(&b->uses, &c->events) != 1;
        } else {
            kp__make_free(c, b);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static kp_status kp__c_record_stream(void *ctx, void *ptr, kp_stream_t s) {
    kp__caching *c = ctx;
    pthread_mutex_lock(&c->mu);
    kp__cblock *b = kp__ptrmap_get(&c->live, ptr);
    kp_status st = KP_OK;
    if (!b) {
        st = kp__error(KP_ERR_INVALID_ARG,
                       "record_stream: %p is not a live block of this "
                       "allocator",
                       ptr);
    } else if (s != b->seg->stream) {
        kp__uses_add(&b->uses, s);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static kp_status kp__c_empty_cache(void *ctx) {
    kp__caching *c = ctx;
    pthread_mutex_lock(&c->mu);
    kp__process_pending(c, true);
    kp__release_cached(c);
    pthread_mutex_unlock(&c->mu);
    return KP_OK;
}

static void kp__c_stats(void *ctx, kp_alloc_stats *out) {
    kp__caching *c = ctx;
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->largest_free = kp__largest_free(c);
    pthread_mutex_unlock(&c->mu);
}

static kp_status kp__c_snapshot(void *ctx, kp_block_info *rows, size_t cap, size_t *n) {
    kp__caching *c = ctx;
    pthread_mutex_lock(&c->mu);
    size_t k = 0;
    for (kp__cseg *s = c->segs; s; s = s->next)
        for (kp__cblock *b = s->first; b; b = b->next, k++)
            if (k < cap)
                rows[k] = (kp_block_info){.segment = s->base,
                                          .segment_size = s->size,
                                          .ptr = b->ptr,
                                          .size = b->size,
                                          .allocated = b->allocated,
                                          .pending = b->pending};
    *n = k;
    pthread_mutex_unlock(&c->mu);
    return KP_OK;
}

static void kp__c_destroy(void *ctx) {
    kp__caching *c = ctx;
    (void)kp_device_sync(c->dev); /* pending blocks' streams finish */
    if (c->live.used)
        kp__log(KP_LOG_WARN, "%s allocator destroyed with %zu live blocks; freeing them",
                kp_device_name(c->dev), c->live.used);
    for (kp__cblock *b = c->pending; b; b = b->lnext) kp__uses_destroy(&b->uses);
    while (c->segs) {
        kp__cseg *s = c->segs;
        c->segs = s->next;
        for (kp__cblock *b = s->first, *n; b; b = n) {
            n = b->next;
            kp__free(b);
        }
        kp_free(c->dev, s->base);
        kp__free(s);
    }
    for (kp__cblock *b = c->spare, *n; b; b = n) {
        n = b->lnext;
        kp__free(b);
    }
    for (kp__spool *p = c->spools, *n; p; p = n) {
        n = p->next;
        kp__free(p);
    }
    kp__evpool_free(&c->events);
    kp__ptrmap_free(&c->live);
    pthread_mutex_destroy(&c->mu);
    kp__free(c);
}

static const kp_allocator_i kp__caching_iface = {
    .alloc = kp__c_alloc,
    .free = kp__c_free,
    .record_stream = kp__c_record_stream,
    .empty_cache = kp__c_empty_cache,
    .stats = kp__c_stats,
    .snapshot = kp__c_snapshot,
    .destroy = kp__c_destroy,
};

kp_status kp__caching_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg) {
    if (cfg->max_split_bytes && cfg->max_split_bytes < KP__MID_SEG)
        return kp__error(KP_ERR_INVALID_ARG,
                         "caching allocator: max_split_bytes %zu is below the "
                         "%zu-byte segment size (use 0 for no cap)",
                         cfg->max_split_bytes, KP__MID_SEG);
    kp__caching *c = kp__calloc(1, sizeof *c);
    if (!c) return kp__error(KP_ERR_OUT_OF_MEMORY, "caching allocator: no memory");
    pthread_mutex_init(&c->mu, NULL);
    c->dev = a->dev;
    c->events.dev = a->dev;
    c->budget = cfg->budget_bytes;
    c->max_split = cfg->max_split_bytes;
    a->iface = &kp__caching_iface;
    a->ctx = c;
    return KP_OK;
}
