/* Threads meet in the memory layer: one device caching allocator, one pinned
 * allocator (with frees from threads that do not own it), one buffer pool
 * and one tensor's reference count, shared by THREADS threads. Run under
 * ThreadSanitizer in the test script; every operation's result is checked. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"

#define THREADS 4
#define OPS 4000
#define HANDOFF 64

typedef struct shared {
    kp_device_t dev;
    kp_allocator_t dev_alloc, pin_alloc;
    kp_buffer_pool_t pool;
    kp_tensor_t tensor;
    kp_stream_t streams[THREADS];
    pthread_mutex_t mu;
    void *handoff[HANDOFF]; /* pinned blocks for another thread to free */
    int n_handoff;
    int failures;
} shared;

typedef struct worker {
    shared *sh;
    int id;
} worker;

static void fail_once(shared *sh, const char *what) {
    pthread_mutex_lock(&sh->mu);
    if (sh->failures++ == 0) fprintf(stderr, "%s: %s\n", what, kp_last_error());
    pthread_mutex_unlock(&sh->mu);
}

static void device_ops(shared *sh, int id, uint64_t *seed) {
    void *p;
    size_t n = 1 + (size_t)(kpt_rand(seed) % (3u << 20));
    if (kp_allocator_alloc(sh->dev_alloc, n, sh->streams[id], &p) != KP_OK)
        return fail_once(sh, "alloc");
    memset(p, id, n < 4096 ? n : 4096); /* cpu backend: the memory is ours to write */
    if (kpt_rand(seed) % 4 == 0 &&
        kp_allocator_record_stream(sh->dev_alloc, p, sh->streams[(id + 1) % THREADS]) != KP_OK)
        fail_once(sh, "record_stream");
    if (kp_allocator_free(sh->dev_alloc, p) != KP_OK) fail_once(sh, "free");
}

static void pinned_ops(shared *sh, int id, uint64_t *seed) {
    void *p, *theirs = NULL;
    if (kp_allocator_alloc(sh->pin_alloc, 1 + (size_t)(kpt_rand(seed) % 65536), NULL, &p) != KP_OK)
        return fail_once(sh, "pinned alloc");
    pthread_mutex_lock(&sh->mu);
    if (sh->n_handoff < HANDOFF) {
        sh->handoff[sh->n_handoff++] = p; /* someone else frees it */
        p = NULL;
    }
    if (sh->n_handoff > 1) theirs = sh->handoff[--sh->n_handoff];
    pthread_mutex_unlock(&sh->mu);
    if (p && kp_allocator_free(sh->pin_alloc, p) != KP_OK) fail_once(sh, "pinned free");
    if (theirs && kp_allocator_free(sh->pin_alloc, theirs) != KP_OK)
        fail_once(sh, "pinned free (other)");
}

static void pool_and_tensor_ops(shared *sh, int id, uint64_t *seed) {
    kp_buffer_t b;
    if (kp_buffer_acquire(sh->pool, 1 + (size_t)(kpt_rand(seed) % 200000), sh->streams[id], &b) !=
        KP_OK)
        return fail_once(sh, "acquire");
    kp_buffer_t again = kp_buffer_retain(b);
    ((char *)kp_buffer_data(b))[0] = (char)id;
    kp_buffer_release(b);
    kp_buffer_release(again);
    kp_tensor_t t = kp_tensor_retain(sh->tensor), v;
    if (kp_tensor_slice(t, 0, 1, 3, 1, &v) != KP_OK)
        fail_once(sh, "slice");
    else
        kp_tensor_release(v);
    kp_tensor_release(t);
}

static void *work(void *arg) {
    worker *w = arg;
    uint64_t seed = 0x1234567ULL * (uint64_t)(w->id + 1);
    for (int i = 0; i < OPS; i++) {
        switch (kpt_rand(&seed) % 3) {
        case 0: device_ops(w->sh, w->id, &seed); break;
        case 1: pinned_ops(w->sh, w->id, &seed); break;
        default: pool_and_tensor_ops(w->sh, w->id, &seed); break;
        }
    }
    return NULL;
}

static void threads_share_the_memory_layer(void **state) {
    shared sh = {0};
    kp_pool_config pc = KP_POOL_CONFIG_INIT;
    pc.max_bytes = 1 << 20;
    pthread_mutex_init(&sh.mu, NULL);
    KPT_OK(kp_device_open("cpu", &sh.dev));
    for (int i = 0; i < THREADS; i++) KPT_OK(kp_stream_create(sh.dev, &sh.streams[i]));
    KPT_OK(kp_allocator_create(sh.dev, KP_ALLOCATOR_DEVICE, NULL, &sh.dev_alloc));
    KPT_OK(kp_allocator_create(sh.dev, KP_ALLOCATOR_PINNED, NULL, &sh.pin_alloc));
    KPT_OK(kp_buffer_pool_create(sh.dev, &pc, &sh.pool));
    KPT_OK(kp_tensor_empty(sh.dev, KP_F32, 2, (int64_t[]){4, 4}, &sh.tensor));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&sh, i};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    assert_int_equal(sh.failures, 0);
    for (int i = 0; i < sh.n_handoff; i++) KPT_OK(kp_allocator_free(sh.pin_alloc, sh.handoff[i]));
    kp_alloc_stats st;
    KPT_OK(kp_allocator_stats(sh.dev_alloc, &st));
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.allocs, st.frees);
    KPT_OK(kp_allocator_stats(sh.pin_alloc, &st));
    assert_int_equal(st.allocated, 0);
    assert_true(st.deferred > 0); /* frees from threads that do not own it */
    assert_int_equal(kp_memory_refcount(kp_tensor_memory(sh.tensor)), 1);
    kp_tensor_release(sh.tensor);
    kp_buffer_pool_destroy(sh.pool);
    kp_allocator_destroy(sh.pin_alloc);
    kp_allocator_destroy(sh.dev_alloc);
    for (int i = 0; i < THREADS; i++) kp_stream_destroy(sh.streams[i]);
    kp_device_close(sh.dev);
    pthread_mutex_destroy(&sh.mu);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(threads_share_the_memory_layer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
