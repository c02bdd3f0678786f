/* kpipe memory: allocators behind one interface (host, caching pinned host,
 * caching device), memory objects and tensors with views, and a bucketed
 * buffer pool.
 *
 *   kp_allocator_t a;
 *   kp_device_allocator(dev, KP_ALLOCATOR_DEVICE, &a);    // the device's own
 *   void *p;
 *   kp_allocator_alloc(a, 1 << 20, stream, &p);            // cached after the first time
 *   kp_allocator_record_stream(a, p, other_stream);       // also used there
 *   kp_allocator_free(a, p);                               // reused once both are done
 *
 *   kp_tensor_t t, col;
 *   int64_t shape[2] = {4, 6};
 *   kp_tensor_zeros(dev, KP_F32, 2, shape, stream, &t);
 *   kp_tensor_slice(t, 1, 2, 3, 1, &col);                  // shares t's memory
 *   kp_tensor_release(t);                                  // col keeps it alive
 *   kp_tensor_release(col);                                // now it is freed
 */
#ifndef KPIPE_MEMORY_H
#define KPIPE_MEMORY_H

#include "kpipe/device.h"
#include "kpipe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_allocator *kp_allocator_t;

typedef enum kp_allocator_kind {
    KP_ALLOCATOR_HOST = 0,   /* plain host memory */
    KP_ALLOCATOR_PINNED = 1, /* page-locked host memory, cached */
    KP_ALLOCATOR_DEVICE = 2, /* device memory, cached per stream */
    KP_ALLOCATOR_KINDS = 3,
} kp_allocator_kind;

typedef struct kp_alloc_stats {
    size_t allocated; /* bytes in live blocks (as rounded) */
    size_t requested; /* bytes asked for by live allocations */
    size_t reserved;  /* bytes obtained from the driver and not returned */
    size_t peak_allocated, peak_reserved;
    size_t largest_free; /* largest cached block ready for reuse */
    uint64_t allocs, frees;
    uint64_t cache_hits;   /* served from cached memory */
    uint64_t cache_misses; /* needed a driver allocation */
    uint64_t splits, merges;
    uint64_t driver_allocs, driver_frees;
    uint64_t oom_retries;  /* driver failures retried after releasing the cache */
    uint64_t oom_failures; /* allocations that failed */
    uint64_t deferred;     /* frees deferred (other stream still using, or another thread) */
} kp_alloc_stats;

typedef struct kp_allocator_config {
    size_t struct_size;     /* sizeof(kp_allocator_config) */
    size_t budget_bytes;    /* cap on reserved bytes; 0: none */
    size_t max_split_bytes; /* cached blocks above this are not split; 0: no cap */
} kp_allocator_config;

#define KP_ALLOCATOR_CONFIG_INIT \
    { sizeof(kp_allocator_config), 0, 0 }

/* Creates an allocator of `kind` for `dev` (config NULL: defaults). */
kp_status kp_allocator_create(kp_device_t dev, kp_allocator_kind kind,
                              const kp_allocator_config *config, kp_allocator_t *out);
/* Frees every cached block and the allocator; live blocks are reported
 * (logged) and released too. NULL is a no-op. */
void kp_allocator_destroy(kp_allocator_t a);
/* The device's allocator of `kind`, created with defaults on first use and
 * destroyed with the device. */
kp_status kp_device_allocator(kp_device_t dev, kp_allocator_kind kind, kp_allocator_t *out);
/* Replaces the device's allocator of `kind` (the caller keeps ownership of
 * `a`; NULL restores the default). Set it before allocating through it. */
kp_status kp_device_set_allocator(kp_device_t dev, kp_allocator_kind kind, kp_allocator_t a);

/* Allocates `bytes` (aligned to 256) for use on `stream`. A device block
 * belongs to its stream: it is reused for that stream only, and once freed
 * it is reused for another allocation only after work recorded with
 * kp_allocator_record_stream is done. stream NULL: device-wide (freeing it
 * waits for the device, as cudaFree does). Past the budget, or when the
 * device is out of memory after the cache was released, KP_ERR_OUT_OF_MEMORY
 * names requested, allocated, reserved and largest free bytes. */
kp_status kp_allocator_alloc(kp_allocator_t a, size_t bytes, kp_stream_t stream, void **out);
/* Returns a block. A pointer this allocator did not hand out, or one already
 * freed, gives KP_ERR_INVALID_ARG saying which. */
kp_status kp_allocator_free(kp_allocator_t a, void *ptr);
/* Marks a live block as used on `stream` too: its reuse after the free waits
 * for the work enqueued on `stream` up to the free. */
kp_status kp_allocator_record_stream(kp_allocator_t a, void *ptr, kp_stream_t stream);
/* Returns cached segments that are wholly free to the driver; like
 * cudaFree, that waits for the device's pending work. Not for a tick's path. */
kp_status kp_allocator_empty_cache(kp_allocator_t a);
kp_status kp_allocator_stats(kp_allocator_t a, kp_alloc_stats *out);
/* One row per block, for inspection and tests. */
typedef struct kp_block_info {
    void *segment; /* base of the driver allocation holding it */
    size_t segment_size;
    void *ptr;
    size_t size;
    bool allocated;
    bool pending; /* freed, waiting for streams that used it */
} kp_block_info;
/* Fills up to `cap` rows; *n gets the number of blocks. */
kp_status kp_allocator_snapshot(kp_allocator_t a, kp_block_info *rows, size_t cap, size_t *n);
/* The allocator's kind; KP_ALLOCATOR_KINDS for NULL. */
kp_allocator_kind kp_allocator_get_kind(kp_allocator_t a);

/* --- memory objects ----------------------------------------------------------- */
typedef struct kp_memory *kp_memory_t;

/* A reference-counted block from an allocator (NULL: the device's of `kind`). */
kp_status kp_memory_alloc(kp_device_t dev, kp_allocator_kind kind, size_t bytes, kp_stream_t stream,
                          kp_memory_t *out);
kp_memory_t kp_memory_retain(kp_memory_t m);
/* Drops a reference; the last one returns the block to its allocator. */
void kp_memory_release(kp_memory_t m);
void *kp_memory_data(kp_memory_t m);
size_t kp_memory_size(kp_memory_t m);
kp_device_t kp_memory_device(kp_memory_t m);
bool kp_memory_is_pinned(kp_memory_t m);
int kp_memory_refcount(kp_memory_t m);

/* --- tensors ------------------------------------------------------------------------ */
typedef struct kp_tensor *kp_tensor_t;

/* A new contiguous tensor in device memory of `dev`. */
kp_status kp_tensor_empty(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                          kp_tensor_t *out);
/* The same, filled with 0 or 1 on `s` (stream-ordered). */
kp_status kp_tensor_zeros(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                          kp_stream_t s, kp_tensor_t *out);
kp_status kp_tensor_ones(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                         kp_stream_t s, kp_tensor_t *out);
/* A tensor over existing memory (retained) with a descriptor that must fit in it. */
kp_status kp_tensor_from_memory(kp_memory_t m, const kp_tensor_desc *desc, kp_tensor_t *out);
/* Views share the memory: elements start, start+step, ... < stop of `dim`. */
kp_status kp_tensor_slice(kp_tensor_t t, int dim, int64_t start, int64_t stop, int64_t step,
                          kp_tensor_t *out);
/* A new shape over contiguous data with the same element count. */
kp_status kp_tensor_reshape(kp_tensor_t t, int ndim, const int64_t *shape, kp_tensor_t *out);
/* Swaps two dims by strides (no data moves). */
kp_status kp_tensor_transpose(kp_tensor_t t, int d0, int d1, kp_tensor_t *out);
kp_tensor_t kp_tensor_retain(kp_tensor_t t);
void kp_tensor_release(kp_tensor_t t);
/* Address of element (0, ..., 0). */
void *kp_tensor_data(kp_tensor_t t);
const kp_tensor_desc *kp_tensor_get_desc(kp_tensor_t t);
kp_memory_t kp_tensor_memory(kp_tensor_t t);

/* --- bucketed buffer pool ----------------------------------------------------------- */
typedef struct kp_buffer_pool *kp_buffer_pool_t;
typedef struct kp_buffer *kp_buffer_t;

typedef struct kp_pool_config {
    size_t struct_size;     /* sizeof(kp_pool_config) */
    kp_allocator_kind kind; /* where buffers live */
    size_t min_bytes;       /* smallest size class (a power of two) */
    size_t max_bytes;       /* largest size class; larger requests overflow */
    size_t max_per_class;   /* cached buffers kept per class; more overflow */
} kp_pool_config;

#define KP_POOL_CONFIG_INIT \
    { sizeof(kp_pool_config), KP_ALLOCATOR_DEVICE, 4096, 64u << 20, 64 }

typedef struct kp_pool_stats {
    uint64_t hits;      /* served from a recycled buffer */
    uint64_t misses;    /* a new buffer was allocated */
    uint64_t recycles;  /* buffers returned to their class */
    uint64_t overflows; /* requests past max_bytes, or returns past max_per_class */
    size_t cached_bytes, live_bytes;
} kp_pool_stats;

kp_status kp_buffer_pool_create(kp_device_t dev, const kp_pool_config *cfg, kp_buffer_pool_t *out);
/* Frees the cached buffers; live buffers keep the pool alive until released. */
void kp_buffer_pool_destroy(kp_buffer_pool_t pool);
/* A buffer of at least `bytes` from its size class, reference count 1.
 * A released buffer is handed out again at once: release it when work on
 * it is done, or acquire it again on the same stream, whose order protects it. */
kp_status kp_buffer_acquire(kp_buffer_pool_t pool, size_t bytes, kp_stream_t stream,
                            kp_buffer_t *out);
kp_buffer_t kp_buffer_retain(kp_buffer_t b);
/* The last release recycles it into its class. */
void kp_buffer_release(kp_buffer_t b);
void *kp_buffer_data(kp_buffer_t b);
size_t kp_buffer_size(kp_buffer_t b);
kp_status kp_buffer_pool_stats(kp_buffer_pool_t pool, kp_pool_stats *out);

#ifdef __cplusplus
}
#endif
#endif
