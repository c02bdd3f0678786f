/* Memory objects (reference-counted blocks from an allocator) and tensors (a
 * memory reference plus a descriptor). Views share the memory; the last
 * reference returns it. */
#include <stdatomic.h>
#include <string.h>

#include "fill-impl.h"
#include "memory-impl.h"

struct kp_memory {
    atomic_int refs;
    kp_allocator_t alloc;
    void *data;
    size_t size;
};

struct kp_tensor {
    atomic_int refs;
    kp_memory_t mem;
    kp_tensor_desc desc;
};

kp_status kp_memory_alloc(kp_device_t dev, kp_allocator_kind kind, size_t bytes, kp_stream_t s,
                          kp_memory_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(dev && out);
    *out = NULL;
    kp_allocator_t a;
    KP_CHECK(kp_device_allocator(dev, kind, &a));
    kp_memory_t m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_memory_alloc: no memory");
    kp_status st = kp_allocator_alloc(a, bytes, s, &m->data);
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    atomic_init(&m->refs, 1);
    m->alloc = a;
    m->size = bytes;
    *out = m;
    return KP_OK;
}

kp_memory_t kp_memory_retain(kp_memory_t m) {
    if (m) atomic_fetch_add(&m->refs, 1);
    return m;
}

void kp_memory_release(kp_memory_t m) {
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    kp_status st = kp_allocator_free(m->alloc, m->data);
    if (st != KP_OK) kp__log(KP_LOG_ERROR, "kp_memory_release: %s", kp_last_error());
    kp__free(m);
}

void *kp_memory_data(kp_memory_t m) { return m ? m->data : NULL; }
size_t kp_memory_size(kp_memory_t m) { return m ? m->size : 0; }
kp_device_t kp_memory_device(kp_memory_t m) { return m ? m->alloc->dev : NULL; }
bool kp_memory_is_pinned(kp_memory_t m) { return m && m->alloc->kind == KP_ALLOCATOR_PINNED; }
int kp_memory_refcount(kp_memory_t m) { return m ? atomic_load(&m->refs) : 0; }

/* --- tensors ---------------------------------------------------------------------- */
kp_status kp_tensor_from_memory(kp_memory_t m, const kp_tensor_desc *d, kp_tensor_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(m && d && out);
    *out = NULL;
    KP_CHECK(kp_desc_validate(d));
    if ((size_t)kp_desc_bytes_needed(d) > m->size)
        return kp__error(KP_ERR_INVALID_ARG, "tensor needs %lld bytes, the memory holds %zu",
                         (long long)kp_desc_bytes_needed(d), m->size);
    kp_tensor_t t = kp__calloc(1, sizeof *t);
    if (!t) return kp__error(KP_ERR_OUT_OF_MEMORY, "tensor: no memory");
    atomic_init(&t->refs, 1);
    t->mem = kp_memory_retain(m);
    t->desc = *d;
    *out = t;
    return KP_OK;
}

kp_status kp_tensor_empty(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                          kp_tensor_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    *out = NULL;
    kp_tensor_desc d;
    kp_memory_t m;
    KP_CHECK(kp_desc_init(&d, dt, ndim, shape, NULL));
    KP_CHECK(kp_memory_alloc(dev, KP_ALLOCATOR_DEVICE, (size_t)kp_desc_bytes_needed(&d), NULL, &m));
    kp_status st = kp_tensor_from_memory(m, &d, out);
    kp_memory_release(m); /* the tensor holds it now (or nobody does) */
    return st;
}

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__fill_cuda; /* fill.cu */
#define KP__FILL_CUDA {"cuda", &kp__fill_cuda},
#else
#define KP__FILL_CUDA
#endif

static void kp__fill_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n) {
    const kp__fill_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++)
        memcpy((char *)p->dst + i * p->esize, &p->pattern, (size_t)p->esize);
}

static const kp_kernel kp__fill_kernel = {
    "fill",
    sizeof(kp__fill_params),
    {{"host", &(const kp_host_kernel){kp__fill_host}}, KP__FILL_CUDA}};

/* The bits of 1 in each dtype. */
static uint64_t kp__one_bits(kp_dtype dt) {
    switch (dt) {
    case KP_F32: return 0x3F800000u;
    case KP_F16: return 0x3C00u;
    case KP_BF16: return 0x3F80u;
    default: return 1;
    }
}

static kp_status kp__tensor_filled(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                                   kp_stream_t s, bool ones, kp_tensor_t *out) {
    if (!s) return kp__error(KP_ERR_INVALID_ARG, "stream is NULL");
    KP_CHECK(kp_tensor_empty(dev, dt, ndim, shape, out));
    kp_tensor_t t = *out;
    int64_t n = kp_desc_numel(&t->desc);
    kp_status st = KP_OK;
    if (!ones) {
        st = kp_memset_async(s, t->mem->data, 0, (size_t)n * kp_dtype_size(dt));
    } else if (n > 0) {
        kp__fill_params p = {t->mem->data, kp__one_bits(dt), n, (int)kp_dtype_size(dt)};
        int64_t blocks = (n + 255) / 256;
        kp_launch l = {.kernel = &kp__fill_kernel,
                       .grid = {(uint32_t)(blocks < 65535 ? blocks : 65535), 1, 1},
                       .block = {256, 1, 1},
                       .params = &p};
        st = kp_launch_kernel(s, &l);
    }
    if (st != KP_OK) {
        kp_tensor_release(t);
        *out = NULL;
    }
    return st;
}

kp_status kp_tensor_zeros(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                          kp_stream_t s, kp_tensor_t *out) {
    KP_API_ENTRY();
    return kp__tensor_filled(dev, dt, ndim, shape, s, false, out);
}

kp_status kp_tensor_ones(kp_device_t dev, kp_dtype dt, int ndim, const int64_t *shape,
                         kp_stream_t s, kp_tensor_t *out) {
    KP_API_ENTRY();
    return kp__tensor_filled(dev, dt, ndim, shape, s, true, out);
}

static kp_status kp__view(kp_tensor_t t, const kp_tensor_desc *d, kp_tensor_t *out) {
    return kp_tensor_from_memory(t->mem, d, out);
}

kp_status kp_tensor_slice(kp_tensor_t t, int dim, int64_t start, int64_t stop, int64_t step,
                          kp_tensor_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(t && out);
    *out = NULL;
    const kp_tensor_desc *s = &t->desc;
    if (dim < 0 || dim >= s->ndim || step < 1 || start < 0 || stop > s->shape[dim] || start > stop)
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_tensor_slice: dim %d [%lld:%lld:%lld] does not "
                         "fit a tensor of %d dims with %lld elements there",
                         dim, (long long)start, (long long)stop, (long long)step, s->ndim,
                         dim >= 0 && dim < s->ndim ? (long long)s->shape[dim] : 0LL);
    kp_tensor_desc d = *s;
    int64_t count = stop == start ? 0 : (stop - start - 1) / step + 1, skip;
    /* The view's stride matters only when it has two elements or more. */
    if (count > 1 && __builtin_mul_overflow(s->strides[dim], step, &d.strides[dim]))
        return kp__error(KP_ERR_INVALID_ARG,
                         "kp_tensor_slice: step %lld times stride %lld "
                         "overflows",
                         (long long)step, (long long)s->strides[dim]);
    if (__builtin_mul_overflow(start, s->strides[dim], &skip) ||
        __builtin_add_overflow(d.offset, skip, &d.offset))
        return kp__error(KP_ERR_INVALID_ARG, "kp_tensor_slice: start %lld overflows the offset",
                         (long long)start);
    d.shape[dim] = count;
    return kp__view(t, &d, out);
}

kp_status kp_tensor_reshape(kp_tensor_t t, int ndim, const int64_t *shape, kp_tensor_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(t && out);
    *out = NULL;
    if (!kp_desc_is_contiguous(&t->desc))
        return kp__error(KP_ERR_INVALID_ARG, "reshape needs contiguous data; this view is strided");
    kp_tensor_desc d;
    KP_CHECK(kp_desc_init(&d, t->desc.dtype, ndim, shape, NULL));
    if (kp_desc_numel(&d) != kp_desc_numel(&t->desc))
        return kp__error(KP_ERR_INVALID_ARG, "reshape from %lld to %lld elements",
                         (long long)kp_desc_numel(&t->desc), (long long)kp_desc_numel(&d));
    d.offset = t->desc.offset;
    return kp__view(t, &d, out);
}

kp_status kp_tensor_transpose(kp_tensor_t t, int d0, int d1, kp_tensor_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(t && out);
    *out = NULL;
    if (d0 < 0 || d1 < 0 || d0 >= t->desc.ndim || d1 >= t->desc.ndim)
        return kp__error(KP_ERR_INVALID_ARG, "transpose of dims %d and %d of a %d-dim tensor", d0,
                         d1, t->desc.ndim);
    kp_tensor_desc d = t->desc;
    d.shape[d0] = t->desc.shape[d1];
    d.shape[d1] = t->desc.shape[d0];
    d.strides[d0] = t->desc.strides[d1];
    d.strides[d1] = t->desc.strides[d0];
    return kp__view(t, &d, out);
}

kp_tensor_t kp_tensor_retain(kp_tensor_t t) {
    if (t) atomic_fetch_add(&t->refs, 1);
    return t;
}

void kp_tensor_release(kp_tensor_t t) {
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    kp_memory_release(t->mem);
    kp__free(t);
}

void *kp_tensor_data(kp_tensor_t t) {
    return t ? (char *)t->mem->data + t->desc.offset * (int64_t)kp_dtype_size(t->desc.dtype) : NULL;
}

const kp_tensor_desc *kp_tensor_get_desc(kp_tensor_t t) { return t ? &t->desc : NULL; }
kp_memory_t kp_tensor_memory(kp_tensor_t t) { return t ? t->mem : NULL; }
