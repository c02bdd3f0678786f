/* Memory layer: tensors and views, fills, 2-D copies, the caching allocators' rules,
 * cross-stream reuse, the buffer pool's steady state. argv[1]: cpu (default)
 * or cuda (exit 77 = SKIP without a GPU). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

static kp_device_t g_dev;

static kp_alloc_stats stats_of(kp_allocator_t a) {
    kp_alloc_stats s;
    KPT_OK(kp_allocator_stats(a, &s));
    return s;
}

/* kp_memcpy2d_async: host (pageable or pinned) -> device -> device -> host,
 * at 1x1, odd widths and pitches, 1 M and 16 M bytes; new and reused
 * buffers; every byte checked, the pitch padding of every destination left
 * as it was; the same copy captured into a graph and launched; bad
 * arguments refused with nothing done. */
static void copy_2d(void **state) {
    static const size_t geo[][4] = {/* width, height, src pitch, dst pitch */
                                    {1, 1, 1, 1},
                                    {7, 5, 9, 13},
                                    {1, 1000, 3, 1},
                                    {4096, 256, 4096, 4160},
                                    {16384, 1024, 16400, 16384}};
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    for (size_t gi = 0; gi < sizeof geo / sizeof geo[0]; gi++)
        for (int pinned = 0; pinned < 2; pinned++) {
            const size_t w = geo[gi][0], h = geo[gi][1], sp = geo[gi][2], dp = geo[gi][3];
            const size_t sb = sp * (h - 1) + w, db = dp * (h - 1) + w;
            unsigned char *src = NULL, *back = NULL;
            if (pinned) {
                KPT_OK(kp_malloc_host(g_dev, sb, (void **)&src));
                KPT_OK(kp_malloc_host(g_dev, db, (void **)&back));
            } else {
                src = malloc(sb);
                back = malloc(db);
            }
            void *d1, *d2;
            KPT_OK(kp_malloc(g_dev, db, &d1));
            KPT_OK(kp_malloc(g_dev, db, &d2));
            for (int round = 0; round < 2; round++) { /* the same buffers again */
                for (size_t i = 0; i < sb; i++) src[i] = (unsigned char)(i * 7 + gi + round);
                KPT_OK(kp_memset_async(s, d1, 0xA5, db));
                KPT_OK(kp_memset_async(s, d2, 0x5A, db));
                KPT_OK(kp_memcpy2d_async(s, d1, dp, src, sp, w, h));
                KPT_OK(kp_memcpy2d_async(s, d2, dp, d1, dp, w, h));
                memset(back, 0x11, db);
                KPT_OK(kp_memcpy2d_async(s, back, dp, d2, dp, w, h));
                KPT_OK(kp_stream_sync(s));
                size_t bad = 0;
                for (size_t r = 0; r < h; r++)
                    for (size_t x = 0; x < w; x++) bad += back[r * dp + x] != src[r * sp + x];
                for (size_t r = 0; r + 1 < h; r++) /* the padding: not written */
                    for (size_t x = w; x < dp; x++) bad += back[r * dp + x] != 0x11;
                assert_int_equal(bad, 0);
            }
            kp_free(g_dev, d1);
            kp_free(g_dev, d2);
            if (pinned) {
                kp_free_host(g_dev, src);
                kp_free_host(g_dev, back);
            } else {
                free(src);
                free(back);
            }
        }
    /* captured, then launched: device to device */
    void *a, *b;
    unsigned char hb[64 * 8], ha[64 * 8];
    KPT_OK(kp_malloc(g_dev, sizeof hb, &a));
    KPT_OK(kp_malloc(g_dev, sizeof hb, &b));
    for (size_t i = 0; i < sizeof ha; i++) ha[i] = (unsigned char)(i * 3);
    KPT_OK(kp_memcpy_htod(g_dev, a, ha, sizeof ha));
    KPT_OK(kp_memset_async(s, b, 0, sizeof hb));
    KPT_OK(kp_stream_sync(s));
    kp_graph_t g;
    kp_graph_exec_t ge;
    KPT_OK(kp_stream_begin_capture(s));
    KPT_OK(kp_memcpy2d_async(s, b, 64, a, 32, 20, 8));
    KPT_OK(kp_stream_end_capture(s, &g));
    KPT_OK(kp_graph_instantiate(g, &ge));
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_memcpy_dtoh(g_dev, hb, b, sizeof hb));
    for (size_t r = 0; r < 8; r++)
        for (size_t x = 0; x < 64; x++)
            assert_int_equal(hb[r * 64 + x], x < 20 ? ha[r * 32 + x] : 0);
    kp_graph_exec_destroy(ge);
    kp_graph_destroy(g);
    /* refused, nothing done */
    KPT_FAILS(kp_memcpy2d_async(s, b, 8, a, 32, 20, 2), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "below the width 20"));
    KPT_FAILS(kp_memcpy2d_async(s, NULL, 64, a, 32, 20, 2), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_memcpy2d_async(NULL, b, 64, a, 32, 20, 2), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_memcpy2d_async(s, b, SIZE_MAX / 2, a, 32, 20, 4), KP_ERR_INVALID_ARG);
    KPT_OK(kp_memcpy2d_async(s, NULL, 0, NULL, 0, 0, 5)); /* nothing to do */
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_memcpy_dtoh(g_dev, hb, b, sizeof hb));
    for (size_t r = 0; r < 8; r++)
        for (size_t x = 0; x < 64; x++)
            assert_int_equal(hb[r * 64 + x], x < 20 ? ha[r * 32 + x] : 0);
    kp_free(g_dev, a);
    kp_free(g_dev, b);
    kp_stream_destroy(s);
}

static void views_share_memory(void **state) {
    kp_stream_t s;
    kp_tensor_t base, rows, col, tr, flat;
    int64_t shape[2] = {4, 6};
    float h[24], row_vals[12];
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_tensor_zeros(g_dev, KP_F32, 2, shape, s, &base));
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_tensor_slice(base, 0, 1, 3, 1, &rows)); /* rows 1 and 2 */
    KPT_OK(kp_tensor_slice(base, 1, 2, 6, 3, &col));  /* columns 2 and 5 */
    KPT_OK(kp_tensor_transpose(base, 0, 1, &tr));
    KPT_OK(kp_tensor_reshape(base, 1, (int64_t[]){24}, &flat));
    assert_ptr_equal(kp_tensor_memory(rows), kp_tensor_memory(base));
    assert_int_equal(kp_memory_refcount(kp_tensor_memory(base)), 5);
    const kp_tensor_desc *cd = kp_tensor_get_desc(col), *td = kp_tensor_get_desc(tr);
    assert_int_equal(cd->shape[1], 2);
    assert_int_equal(cd->strides[1], 3);
    assert_ptr_equal(kp_tensor_data(col), (float *)kp_tensor_data(base) + 2);
    assert_int_equal(td->shape[0], 6);
    assert_int_equal(td->strides[0], 1);
    assert_int_equal(td->strides[1], 6);
    assert_false(kp_desc_is_contiguous(td));
    kp_tensor_t bad;
    KPT_FAILS(kp_tensor_reshape(tr, 1, (int64_t[]){24}, &bad), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tensor_reshape(base, 1, (int64_t[]){25}, &bad), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tensor_slice(base, 0, 2, 9, 1, &bad), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tensor_transpose(base, 0, 2, &bad), KP_ERR_INVALID_ARG);

    /* a write through the row view is seen by the base */
    for (int i = 0; i < 12; i++) row_vals[i] = (float)(i + 1);
    KPT_OK(kp_memcpy_htod(g_dev, kp_tensor_data(rows), row_vals, sizeof row_vals));
    /* the base goes; the views keep the memory */
    kp_tensor_release(base);
    assert_int_equal(kp_memory_refcount(kp_tensor_memory(flat)), 4);
    KPT_OK(kp_memcpy_dtoh(g_dev, h, kp_tensor_data(flat), sizeof h));
    for (int i = 0; i < 24; i++) assert_true(h[i] == (i >= 6 && i < 18 ? (float)(i - 5) : 0.0f));
    kp_allocator_t a;
    KPT_OK(kp_device_allocator(g_dev, KP_ALLOCATOR_DEVICE, &a));
    size_t before = stats_of(a).allocated;
    kp_tensor_release(rows);
    kp_tensor_release(col);
    kp_tensor_release(tr);
    assert_int_equal(stats_of(a).allocated, before); /* flat still holds it */
    kp_tensor_release(flat);
    assert_true(stats_of(a).allocated < before); /* the last reference freed it */
    kp_stream_destroy(s);
}

static void zeros_and_ones(void **state) {
    static const struct {
        kp_dtype dt;
        uint64_t one;
    } cases[] = {{KP_F32, 0x3F800000u},
                 {KP_F16, 0x3C00u},
                 {KP_BF16, 0x3F80u},
                 {KP_I32, 1},
                 {KP_I16, 1},
                 {KP_I8, 1},
                 {KP_U8, 1},
                 {KP_I64, 1},
                 {KP_U64, 1}};
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t shape[2] = {33, 31}; /* not a multiple of the block size */
        kp_tensor_t z, o;
        size_t esz = kp_dtype_size(cases[c].dt), n = 33 * 31;
        unsigned char *h = malloc(n * esz);
        KPT_OK(kp_tensor_zeros(g_dev, cases[c].dt, 2, shape, s, &z));
        KPT_OK(kp_tensor_ones(g_dev, cases[c].dt, 2, shape, s, &o));
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(g_dev, h, kp_tensor_data(o), n * esz));
        for (size_t i = 0; i < n; i++) {
            uint64_t v = 0;
            memcpy(&v, h + i * esz, esz);
            assert_int_equal(v, cases[c].one);
        }
        KPT_OK(kp_memcpy_dtoh(g_dev, h, kp_tensor_data(z), n * esz));
        for (size_t i = 0; i < n * esz; i++) assert_int_equal(h[i], 0);
        kp_tensor_release(z);
        kp_tensor_release(o);
        free(h);
    }
    kp_stream_destroy(s);
}

static void caching_rules(void **state) {
    kp_allocator_t a;
    kp_stream_t s;
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, NULL, &a));
    KPT_OK(kp_stream_create(g_dev, &s));
    void *p, *q, *r;
    KPT_OK(kp_allocator_alloc(a, 1000, s, &p));
    assert_true(((uintptr_t)p & 255) == 0);
    kp_alloc_stats st = stats_of(a);
    assert_int_equal(st.cache_misses, 1);
    assert_int_equal(st.reserved, 2 << 20);     /* one small segment */
    assert_int_equal(st.allocated, 1024);       /* rounded to 512 */
    KPT_OK(kp_allocator_alloc(a, 5000, s, &q)); /* split from the same segment */
    assert_int_equal(stats_of(a).cache_hits, 1);
    assert_true((char *)q == (char *)p + 1024);
    KPT_OK(kp_allocator_free(a, p));
    KPT_OK(kp_allocator_alloc(a, 900, s, &r)); /* the freed block again */
    assert_ptr_equal(r, p);
    KPT_OK(kp_allocator_free(a, r));
    KPT_OK(kp_allocator_free(a, q));
    st = stats_of(a);
    assert_int_equal(st.allocated, 0);
    assert_true(st.merges >= 1);
    assert_int_equal(st.largest_free, 2 << 20); /* merged back into one block */
    /* misuse is diagnosed */
    KPT_FAILS(kp_allocator_free(a, q), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "double free"));
    KPT_OK(kp_allocator_alloc(a, 4096, s, &p));
    KPT_FAILS(kp_allocator_free(a, (char *)p + 512), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "points 512 bytes into a block"));
    int local;
    KPT_FAILS(kp_allocator_free(a, &local), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "not allocated by this allocator"));
    KPT_OK(kp_allocator_free(a, p));
    /* large requests use the large pool; emptying the cache returns it all */
    KPT_OK(kp_allocator_alloc(a, 3 << 20, s, &p));
    assert_int_equal(stats_of(a).reserved, (2 << 20) + (20 << 20));
    KPT_OK(kp_allocator_free(a, p));
    KPT_OK(kp_allocator_empty_cache(a));
    st = stats_of(a);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.driver_allocs, st.driver_frees);
    kp_allocator_destroy(a);
    kp_stream_destroy(s);
}

static void budget_and_oom_message(void **state) {
    kp_allocator_config cfg = KP_ALLOCATOR_CONFIG_INIT;
    kp_allocator_t a;
    void *p, *q;
    cfg.budget_bytes = 24 << 20;
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, &cfg, &a));
    KPT_OK(kp_allocator_alloc(a, 15 << 20, NULL, &p)); /* a 16 MiB segment */
    KPT_FAILS(kp_allocator_alloc(a, 15 << 20, NULL, &q), KP_ERR_OUT_OF_MEMORY);
    const char *e = kp_last_error();
    assert_non_null(strstr(e, "out of memory allocating 15.00 MiB"));
    assert_non_null(strstr(e, "allocated 16.00 MiB, reserved 16.00 MiB"));
    assert_non_null(strstr(e, "largest free block"));
    assert_non_null(strstr(e, "budget of 24.00 MiB"));
    kp_alloc_stats st = stats_of(a);
    assert_int_equal(st.oom_failures, 1);
    assert_int_equal(st.oom_retries, 1);
    /* freeing makes room: the ladder releases the cached segment and retries */
    KPT_OK(kp_allocator_free(a, p));
    KPT_OK(kp_allocator_alloc(a, 20 << 20, NULL, &q));
    KPT_OK(kp_allocator_free(a, q));
    kp_allocator_destroy(a);
    cfg.budget_bytes = 0;
    cfg.max_split_bytes = 1 << 20;
    KPT_FAILS(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, &cfg, &a), KP_ERR_INVALID_ARG);
}

/* A block freed while a slow kernel on another stream still writes it is not
 * handed out again until that kernel is done. */
static void cross_stream_reuse_waits(void **state) {
    kp_allocator_t a;
    kp_stream_t s1, s2;
    const int n = 1 << 16;
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, NULL, &a));
    KPT_OK(kp_stream_create(g_dev, &s1));
    KPT_OK(kp_stream_create(g_dev, &s2));
    float *x, *y, *z;
    KPT_OK(kp_allocator_alloc(a, n * sizeof(float), s1, (void **)&x));
    kpt_spin_params sp = {x, 7.0f, n, 100 * 1000 * 1000LL}; /* 100 ms, then writes x */
    kp_launch l = kpt_launch_1d(&kpt_spin, &sp, n);
    KPT_OK(kp_launch_kernel(s2, &l));
    KPT_OK(kp_allocator_record_stream(a, x, s2));
    KPT_OK(kp_allocator_free(a, x));
    KPT_OK(kp_allocator_alloc(a, n * sizeof(float), s1, (void **)&y));
    assert_ptr_not_equal(y, x); /* the kernel still writes x */
    kp_alloc_stats st = stats_of(a);
    assert_int_equal(st.deferred, 1);
    kp_block_info rows[16];
    size_t nrows;
    KPT_OK(kp_allocator_snapshot(a, rows, 16, &nrows));
    bool pending = false;
    for (size_t i = 0; i < nrows && i < 16; i++)
        pending = pending || (rows[i].ptr == x && rows[i].pending);
    assert_true(pending);
    KPT_OK(kp_stream_sync(s2));
    /* now x is reusable: the next allocation of that size gets it */
    KPT_OK(kp_allocator_alloc(a, n * sizeof(float), s1, (void **)&z));
    assert_ptr_equal(z, x);
    float h[4];
    KPT_OK(kp_memcpy_dtoh(g_dev, h, x, sizeof h));
    assert_true(h[0] == 7.0f && h[3] == 10.0f); /* the kernel's writes are intact */
    KPT_OK(kp_allocator_free(a, y));
    KPT_OK(kp_allocator_free(a, z));
    kp_allocator_destroy(a);
    kp_stream_destroy(s1);
    kp_stream_destroy(s2);
}

/* During capture the allocator serves cached blocks, refuses what would need
 * the driver, and records and queries nothing on the capturing stream: the
 * capture stays valid, and deferred frees complete after it. */
static void allocation_during_capture(void **state) {
    kp_allocator_t a;
    kp_stream_t s, other;
    void *warm, *used, *p, *q = NULL, *again;
    kp_graph_t g;
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, NULL, &a));
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_stream_create(g_dev, &other));
    KPT_OK(kp_allocator_alloc(a, 4096, s, &warm));
    KPT_OK(kp_allocator_free(a, warm)); /* cached for s */
    KPT_OK(kp_allocator_alloc(a, 8192, other, &used));
    KPT_OK(kp_allocator_record_stream(a, used, s));
    KPT_OK(kp_stream_begin_capture(s));
    KPT_OK(kp_allocator_alloc(a, 4096, s, &p)); /* a cache hit */
    assert_ptr_equal(p, warm);
    KPT_FAILS(kp_allocator_alloc(a, 64 << 20, s, &q), KP_ERR_STATE);
    assert_null(q);
    KPT_OK(kp_allocator_free(a, used)); /* used on s, which captures: deferred */
    assert_int_equal(stats_of(a).deferred, 1);
    KPT_OK(kp_allocator_free(a, p));
    KPT_OK(kp_stream_end_capture(s, &g)); /* not invalidated */
    kp_graph_destroy(g);
    /* the next call records the deferred events; it allocates for s, whose
     * blocks are apart from other's, so it cannot take `used` early */
    KPT_OK(kp_allocator_alloc(a, 100, s, &q));
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_allocator_alloc(a, 8192, other, &again));
    assert_ptr_equal(again, used);
    KPT_OK(kp_allocator_free(a, again));
    KPT_OK(kp_allocator_free(a, q));
    kp_allocator_destroy(a);
    kp_stream_destroy(s);
    kp_stream_destroy(other);
}

typedef struct free_job {
    kp_allocator_t a;
    void *p;
    kp_status st;
} free_job;
static void *free_elsewhere(void *arg) {
    free_job *j = arg;
    j->st = kp_allocator_free(j->a, j->p);
    return NULL;
}

static void pinned_caching_and_deferred_frees(void **state) {
    kp_allocator_t a;
    kp_stream_t s;
    void *p, *q, *r, *other;
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_PINNED, NULL, &a));
    KPT_OK(kp_stream_create(g_dev, &s));
    /* a block used on s is reused once s has passed the point of its free */
    KPT_OK(kp_allocator_alloc(a, 10000, s, &p)); /* class 16 KiB */
    KPT_OK(kp_allocator_free(a, p));
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_allocator_alloc(a, 16000, s, &q));
    assert_ptr_equal(q, p);
    kp_alloc_stats st = stats_of(a);
    assert_int_equal(st.cache_hits, 1);
    assert_int_equal(st.cache_misses, 1);
    /* freed from another thread: parked with no driver call, retired by the
     * owner's next call, reused once the stream has passed it */
    free_job j = {a, q, KP_ERR_INTERNAL};
    pthread_t t;
    pthread_create(&t, NULL, free_elsewhere, &j);
    pthread_join(t, NULL);
    KPT_OK(j.st);
    st = stats_of(a);
    assert_int_equal(st.frees, 2);
    assert_int_equal(st.deferred, 1); /* parked; the first free found s idle: no event */
    KPT_OK(kp_allocator_alloc(a, 100000, s, &other)); /* another class; retires q */
    KPT_OK(kp_stream_sync(s));
    KPT_OK(kp_allocator_alloc(a, 16000, s, &r));
    assert_ptr_equal(r, q);
    /* misuse */
    KPT_FAILS(kp_allocator_free(a, (char *)r + 1), KP_ERR_INVALID_ARG);
    KPT_OK(kp_allocator_free(a, r));
    KPT_FAILS(kp_allocator_free(a, r), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "double free"));
    KPT_OK(kp_allocator_free(a, other));
    kp_allocator_destroy(a);
    kp_stream_destroy(s);
}

static void buffer_pool_steady_state(void **state) {
    kp_pool_config cfg = KP_POOL_CONFIG_INIT;
    kp_buffer_pool_t pool;
    kp_stream_t s;
    kp_allocator_t a;
    cfg.max_bytes = 1 << 20;
    cfg.max_per_class = 4;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_device_allocator(g_dev, KP_ALLOCATOR_DEVICE, &a));
    KPT_OK(kp_buffer_pool_create(g_dev, &cfg, &pool));
    static const size_t sizes[] = {100, 5000, 70000, 1 << 20};
    kp_buffer_t live[4];
    for (int warm = 0; warm < 2; warm++) {
        for (int i = 0; i < 4; i++) {
            KPT_OK(kp_buffer_acquire(pool, sizes[i], s, &live[i]));
            assert_true(kp_buffer_size(live[i]) >= sizes[i]);
        }
        for (int i = 0; i < 4; i++) kp_buffer_release(live[i]);
    }
    kp_pool_stats p0;
    KPT_OK(kp_buffer_pool_stats(pool, &p0));
    kp_alloc_stats a0 = stats_of(a);
    for (int iter = 0; iter < 1000; iter++) { /* steady state: a tick's buffers */
        for (int i = 0; i < 4; i++) KPT_OK(kp_buffer_acquire(pool, sizes[i], s, &live[i]));
        kp_buffer_t extra = kp_buffer_retain(live[1]);
        for (int i = 0; i < 4; i++) kp_buffer_release(live[i]);
        kp_buffer_release(extra);
    }
    kp_pool_stats p1;
    KPT_OK(kp_buffer_pool_stats(pool, &p1));
    kp_alloc_stats a1 = stats_of(a);
    assert_int_equal(p1.misses, p0.misses);
    assert_int_equal(p1.hits, p0.hits + 4000);
    assert_int_equal(p1.recycles, p0.recycles + 4000);
    assert_int_equal(a1.driver_allocs, a0.driver_allocs); /* no driver allocation */
    assert_int_equal(a1.allocs, a0.allocs);               /* not even from the cache */
    /* overflow: past max_bytes, and past max_per_class on return */
    kp_buffer_t big, many[6];
    KPT_OK(kp_buffer_acquire(pool, 3 << 20, s, &big));
    kp_buffer_release(big);
    for (int i = 0; i < 6; i++) KPT_OK(kp_buffer_acquire(pool, 100, s, &many[i]));
    for (int i = 0; i < 6; i++) kp_buffer_release(many[i]);
    kp_pool_stats p2;
    KPT_OK(kp_buffer_pool_stats(pool, &p2));
    assert_int_equal(p2.overflows, p1.overflows + 1 + 2);
    assert_int_equal(p2.live_bytes, 0);
    /* a live buffer keeps the pool alive past destroy */
    KPT_OK(kp_buffer_acquire(pool, 100, s, &big));
    kp_buffer_pool_destroy(pool);
    assert_non_null(kp_buffer_data(big));
    kp_buffer_release(big);
    kp_stream_destroy(s);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE && strncmp(name, "cuda", 4) == 0) {
        printf("SKIP: memory tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) {
        fprintf(stderr, "cannot open %s: %s\n", name, kp_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(views_share_memory),
        cmocka_unit_test(copy_2d),
        cmocka_unit_test(zeros_and_ones),
        cmocka_unit_test(caching_rules),
        cmocka_unit_test(budget_and_oom_message),
        cmocka_unit_test(cross_stream_reuse_waits),
        cmocka_unit_test(allocation_during_capture),
        cmocka_unit_test(pinned_caching_and_deferred_frees),
        cmocka_unit_test(buffer_pool_steady_state),
    };
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
