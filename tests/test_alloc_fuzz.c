/* Differential fuzz of the device caching allocator (cpu backend) against a
 * shadow set of live intervals: random sizes, streams, cross-stream uses and
 * frees over FUZZ_OPS operations. After every operation: live blocks never
 * overlap and are aligned; periodically the snapshot must tile each segment
 * exactly, reserved must equal the sum of segments and the statistics must
 * match a recount. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <time.h>

#include "support/kp_test.h"

#define FUZZ_OPS 100000
#define MAX_LIVE 400
#define CHECK_EVERY 997

typedef struct live {
    char *p;
    size_t n;
    int stream;
} live;

/* Holds a cpu stream busy until opened, so that frees of blocks used there
 * stay pending for a while, as behind a long kernel. */
static atomic_int g_gate;
static void gate(void *user) {
    struct timespec ts = {0, 100000};
    while (!atomic_load(&g_gate)) nanosleep(&ts, NULL);
}

static size_t rand_size(uint64_t *s) {
    int r = (int)(kpt_rand(s) % 100);
    int bits = r < 60   ? 4 + (int)(kpt_rand(s) % 16) /* up to 1 MiB: small pool */
               : r < 97 ? 20 + (int)(kpt_rand(s) % 4)
                        : 24 + (int)(kpt_rand(s) % 2);
    return 1 + (size_t)(kpt_rand(s) % ((uint64_t)1 << bits));
}

static int cmp_rows(const void *a, const void *b) {
    const kp_block_info *x = a, *y = b;
    return (x->ptr > y->ptr) - (x->ptr < y->ptr);
}

/* Recounts everything from a snapshot and compares with the stats. */
static void check_snapshot(kp_allocator_t a, const live *lv, size_t n_live) {
    static kp_block_info rows[20000];
    size_t n;
    KPT_OK(kp_allocator_snapshot(a, rows, 20000, &n));
    assert_true(n <= 20000);
    qsort(rows, n, sizeof *rows, cmp_rows);
    size_t reserved = 0, allocated = 0, n_alloc = 0;
    for (size_t i = 0; i < n;) {
        /* blocks of one segment follow each other and tile it exactly */
        char *seg = rows[i].segment, *at = seg;
        size_t seg_size = rows[i].segment_size;
        assert_ptr_equal(rows[i].ptr, seg);
        for (; i < n && rows[i].segment == seg; i++) {
            assert_ptr_equal(rows[i].ptr, at);
            assert_true(rows[i].size > 0 && rows[i].size % 512 == 0);
            at += rows[i].size;
            if (rows[i].allocated) {
                allocated += rows[i].size;
                n_alloc++;
            }
        }
        if (at != seg + seg_size) {
            for (size_t k = 0; k < n; k++)
                if (rows[k].segment == seg)
                    print_error("  block %p +%zu %s%s\n", rows[k].ptr, rows[k].size,
                                rows[k].allocated ? "allocated" : "free",
                                rows[k].pending ? " pending" : "");
            print_error("segment %p +%zu is tiled up to %p\n", (void *)seg, seg_size, (void *)at);
            fail();
        }
        reserved += seg_size;
    }
    kp_alloc_stats st;
    KPT_OK(kp_allocator_stats(a, &st));
    assert_int_equal(st.reserved, reserved);
    assert_int_equal(st.allocated, allocated);
    assert_int_equal(n_alloc, n_live);
    assert_int_equal(st.allocs - st.frees, n_live);
    size_t requested = 0;
    for (size_t i = 0; i < n_live; i++) requested += lv[i].n;
    assert_int_equal(st.requested, requested);
    assert_true(st.peak_reserved >= st.reserved && st.peak_allocated >= st.allocated);
}

static void fuzz_against_shadow(void **state) {
    kp_device_t dev;
    kp_stream_t s[3];
    kp_allocator_t a;
    kp_allocator_config cfg = KP_ALLOCATOR_CONFIG_INIT;
    cfg.max_split_bytes = 24 << 20; /* oversized blocks: not split */
    KPT_OK(kp_device_open("cpu", &dev));
    for (int i = 0; i < 3; i++) KPT_OK(kp_stream_create(dev, &s[i]));
    KPT_OK(kp_allocator_create(dev, KP_ALLOCATOR_DEVICE, &cfg, &a));
    live lv[MAX_LIVE];
    size_t n_live = 0;
    uint64_t seed = 0xfeedface12345ULL;
    atomic_store(&g_gate, 0);
    KPT_OK(kp_launch_host_func(s[1], gate, NULL));
    for (long op = 0; op < FUZZ_OPS; op++) {
        if (op % 5000 == 4999) {
            /* let the busy stream finish; returning cached segments to the
             * driver waits for the whole device (as cudaFree does), so it is
             * done here, then the stream is held again */
            atomic_store(&g_gate, 1);
            KPT_OK(kp_stream_sync(s[1]));
            KPT_OK(kp_allocator_empty_cache(a));
            atomic_store(&g_gate, 0);
            KPT_OK(kp_launch_host_func(s[1], gate, NULL));
        }
        uint64_t r = kpt_rand(&seed) % 100;
        if (n_live < MAX_LIVE && (r < 52 || n_live == 0)) {
            size_t n = rand_size(&seed);
            int si = (int)(kpt_rand(&seed) % 3);
            char *p;
            KPT_OK(kp_allocator_alloc(a, n, s[si], (void **)&p));
            assert_true(((uintptr_t)p & 255) == 0);
            for (size_t k = 0; k < n_live; k++)
                if (p < lv[k].p + lv[k].n && lv[k].p < p + n) {
                    print_error("op %ld: [%p, +%zu) overlaps live [%p, +%zu)\n", op, (void *)p, n,
                                (void *)lv[k].p, lv[k].n);
                    fail();
                }
            lv[n_live++] = (live){p, n, si};
        } else {
            size_t k = (size_t)(kpt_rand(&seed) % n_live);
            if (kpt_rand(&seed) % 8 == 0) /* used on another stream too */
                KPT_OK(kp_allocator_record_stream(a, lv[k].p, s[(lv[k].stream + 1) % 3]));
            KPT_OK(kp_allocator_free(a, lv[k].p));
            lv[k] = lv[--n_live];
        }
        if (op % CHECK_EVERY == 0) check_snapshot(a, lv, n_live);
    }
    check_snapshot(a, lv, n_live);
    atomic_store(&g_gate, 1);
    KPT_OK(kp_stream_sync(s[1]));
    kp_alloc_stats st;
    KPT_OK(kp_allocator_stats(a, &st));
    print_message("%d ops: %llu hits, %llu misses, %llu splits, %llu merges, %llu deferred, "
                  "%llu driver allocs, peak reserved %zu\n",
                  FUZZ_OPS, (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
                  (unsigned long long)st.splits, (unsigned long long)st.merges,
                  (unsigned long long)st.deferred, (unsigned long long)st.driver_allocs,
                  st.peak_reserved);
    assert_true(st.splits > 1000 && st.merges > 1000 && st.deferred > 500);
    while (n_live) KPT_OK(kp_allocator_free(a, lv[--n_live].p));
    KPT_OK(kp_allocator_empty_cache(a));
    KPT_OK(kp_allocator_stats(a, &st));
    assert_int_equal(st.reserved, 0);
    kp_allocator_destroy(a);
    for (int i = 0; i < 3; i++) kp_stream_destroy(s[i]);
    kp_device_close(dev);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(fuzz_against_shadow)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
