/* Memory layer internals: the allocator interface and a pointer map. */
#ifndef KPIPE_MEMORY_IMPL_H
#define KPIPE_MEMORY_IMPL_H

#include <pthread.h>

#include "kpipe/memory.h"
#include "../core/core-impl.h"

/* An allocator implementation; the public wrappers check arguments. */
typedef struct kp_allocator_i {
    /* Allocates `bytes` (1 .. KP__MAX_ALLOC_BYTES) for `stream` (may be NULL). */
    kp_status (*alloc)(void *ctx, size_t bytes, kp_stream_t stream, void **out);
    /* Returns a block; diagnoses foreign pointers and double frees. */
    kp_status (*free)(void *ctx, void *ptr);
    /* Optional: marks a live block as used on `stream`. Default: no-op. */
    kp_status (*record_stream)(void *ctx, void *ptr, kp_stream_t stream);
    /* Optional: returns wholly free cached memory. Default: no-op. */
    kp_status (*empty_cache)(void *ctx);
    void (*stats)(void *ctx, kp_alloc_stats *out);
    /* Optional: block rows. Default: none. */
    kp_status (*snapshot)(void *ctx, kp_block_info *rows, size_t cap, size_t *n);
    void (*destroy)(void *ctx);
} kp_allocator_i;

struct kp_allocator {
    const kp_allocator_i *iface;
    void *ctx;
    kp_device_t dev;
    kp_allocator_kind kind;
};

/* Constructors of the implementations: fill iface and ctx. */
kp_status kp__host_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg);
kp_status kp__pinned_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg);
kp_status kp__caching_allocator_init(kp_allocator_t a, const kp_allocator_config *cfg);

/* --- pointer -> value map (open addressing, grows by doubling) ---------------- */
typedef struct kp__ptrmap {
    size_t cap, used, tomb;
    uintptr_t *keys; /* 0 empty, 1 tombstone */
    void **vals;
} kp__ptrmap;

void kp__ptrmap_free(kp__ptrmap *m);
/* KP_ERR_OUT_OF_MEMORY if it cannot grow. */
kp_status kp__ptrmap_put(kp__ptrmap *m, const void *key, void *val);
void *kp__ptrmap_get(const kp__ptrmap *m, const void *key);
/* Removes and returns the value, or NULL. */
void *kp__ptrmap_take(kp__ptrmap *m, const void *key);

/* --- idle events for reuse, so freeing blocks used on streams creates none
 * in steady state (stream_uses.c) ------------------------------------------------ */
typedef struct kp__evpool {
    kp_device_t dev;
    kp_event_t *v;
    size_t n, cap;
} kp__evpool;

kp_status kp__evpool_get(kp__evpool *p, kp_event_t *out);
/* Keeps ev for reuse (destroys it if the pool cannot grow). */
void kp__evpool_put(kp__evpool *p, kp_event_t ev);
void kp__evpool_free(kp__evpool *p);

/* --- the stream-use tracker of the caching allocators (stream_uses.c) -------------
 * The streams a block was used on; at its free, an event on each, and the
 * block is reused once all have completed. */
#define KP__MAX_USES 4
typedef struct kp__uses {
    int n, n_events;
    bool overflow; /* more streams than tracked, or device-wide: wait for the device */
    kp_stream_t s[KP__MAX_USES];
    kp_event_t ev[KP__MAX_USES];
} kp__uses;

/* A block's uses start with `s` (NULL: device-wide, so overflow). */
void kp__uses_init(kp__uses *u, kp_stream_t s);
/* Adds a stream once; past KP__MAX_USES the block waits for the device instead. */
void kp__uses_add(kp__uses *u, kp_stream_t s);
/* Every stream idle (none capturing): the block can be reused at once. */
bool kp__uses_idle(const kp__uses *u);
/* Records an event on each stream not yet recorded: 1 done, 0 later (a
 * stream is capturing, where nothing may be recorded), -1 no event could be
 * had (those recorded stay, for a retry). */
int kp__uses_record(kp__uses *u, kp__evpool *pool);
/* All recorded events complete (queries; never blocks). */
bool kp__uses_done(const kp__uses *u);
/* The events go back to the pool; the uses are forgotten. */
void kp__uses_release(kp__uses *u, kp__evpool *pool);
/* At teardown: destroys the events outright. */
void kp__uses_destroy(kp__uses *u);

#endif
