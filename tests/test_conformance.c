/* Backend conformance: the same cases on the device named on the command
 * line and on the cpu backend, with results compared. The cpu run is also
 * checked against plain host arithmetic. A cuda run without a GPU exits 77
 * (ctest SKIP) after printing why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>
#ifdef KP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "support/kp_test.h"
#include "support/test_kernels.h"

#define TOL 1e-6 /* fused multiply-add on the GPU vs separate on the host */
#define FB(n) ((size_t)(n) * sizeof(float))

static kp_device_t g_dev; /* device under test */
static kp_device_t g_cpu; /* reference */
static uint64_t g_seed = 12345;

/* A case computes `n` floats into `out` on a device; run_both runs it on the
 * device under test and on the cpu backend and compares. */
typedef void (*case_fn)(kp_device_t dev, float *out, int n, uint64_t seed);

static void run_both(case_fn fn, int n, const char *what) {
    float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
    uint64_t seed = kpt_rand(&g_seed);
    fn(g_dev, a, n, seed);
    fn(g_cpu, b, n, seed);
    assert_true(kpt_close(a, b, n, TOL, what));
    free(a);
    free(b);
}

static float *dalloc(kp_device_t dev, int n) {
    void *p = NULL;
    KPT_OK(kp_malloc(dev, FB(n), &p));
    assert_true(((uintptr_t)p & 255) == 0);
    return p;
}

static float *upload(kp_device_t dev, const float *h, int n) {
    float *d = dalloc(dev, n);
    KPT_OK(kp_memcpy_htod(dev, d, h, FB(n)));
    return d;
}

static void download(kp_device_t dev, float *h, const float *d, int n) {
    KPT_OK(kp_memcpy_dtoh(dev, h, d, FB(n)));
}

/* --- memory and copies -------------------------------------------------------- */
static void case_memory(kp_device_t dev, float *out, int n, uint64_t seed) {
    float *h = malloc(FB(n)), *pinned;
    kpt_fill(h, n, &seed);
    float *d0 = upload(dev, h, n), *d1 = dalloc(dev, n);
    KPT_OK(kp_memcpy_dtod(dev, d1, d0, FB(n)));
    KPT_OK(kp_malloc_host(dev, FB(n), (void **)&pinned));
    kp_stream_t s;
    KPT_OK(kp_stream_create(dev, &s));
    /* zero the first quarter asynchronously, then read back through pinned memory */
    KPT_OK(kp_memset_async(s, d1, 0, FB(n / 4)));
    KPT_OK(kp_memcpy_async(s, pinned, d1, FB(n)));
    KPT_OK(kp_stream_sync(s));
    for (int i = 0; i < n; i++) assert_true(pinned[i] == (i < n / 4 ? 0.0f : h[i]));
    memcpy(out, pinned, FB(n));
    kp_stream_destroy(s);
    kp_free_host(dev, pinned);
    kp_free(dev, d0);
    kp_free(dev, d1);
    free(h);
}

static void memory(void **state) {
    run_both(case_memory, 1, "memory n=1");
    run_both(case_memory, 1000, "memory n=1000");
    run_both(case_memory, 1 << 20, "memory n=1M");
}

/* --- stream order: affine maps do not commute ---------------------------------- */
#define N_LAUNCH 64

static void case_order(kp_device_t dev, float *out, int n, uint64_t seed) {
    float *h = malloc(FB(n));
    kpt_fill(h, n, &seed);
    float *y = upload(dev, h, n);
    kp_stream_t s;
    KPT_OK(kp_stream_create(dev, &s));
    float a[N_LAUNCH], b[N_LAUNCH];
    for (int k = 0; k < N_LAUNCH; k++) {
        a[k] = 0.5f + 0.5f * kpt_randf(&seed);
        b[k] = kpt_randf(&seed);
        kpt_affine_params p = {y, a[k], b[k], n};
        kp_launch l = kpt_launch_1d(&kpt_affine, &p, n);
        KPT_OK(kp_launch_kernel(s, &l));
    }
    KPT_OK(kp_stream_sync(s));
    download(dev, out, y, n);
    if (dev == g_cpu) { /* the reference run: against host arithmetic */
        for (int k = 0; k < N_LAUNCH; k++)
            for (int i = 0; i < n; i++) h[i] = h[i] * a[k] + b[k];
        assert_true(kpt_close(out, h, n, 0, "cpu order vs host"));
    }
    kp_stream_destroy(s);
    kp_free(dev, y);
    free(h);
}

static void stream_order(void **state) {
    run_both(case_order, 1000, "order n=1000");
    run_both(case_order, 16384, "order n=16384");
}

/* --- events and cross-stream waits --------------------------------------------- */
static void case_events(kp_device_t dev, float *out, int n, uint64_t seed) {
    kp_stream_t a, b;
    kp_event_t e0, e1, never;
    KPT_OK(kp_stream_create(dev, &a));
    KPT_OK(kp_stream_create(dev, &b));
    KPT_OK(kp_event_create(dev, &e0));
    KPT_OK(kp_event_create(dev, &e1));
    KPT_OK(kp_event_create(dev, &never));
    float *buf = dalloc(dev, n), *copy = dalloc(dev, n);
    KPT_OK(kp_memset_async(a, buf, 0, FB(n)));
    KPT_OK(kp_memset_async(b, copy, 0, FB(n)));
    KPT_OK(kp_stream_sync(b));

    bool done = false;
    KPT_OK(kp_event_query(never, &done));
    assert_true(done); /* never recorded: complete */

    /* a: slow producer; b: waits for it, then copies. */
    float value = (float)(seed % 1000);
    kpt_spin_params sp = {buf, value, n, 50 * 1000 * 1000LL}; /* 50 ms */
    kp_launch l = kpt_launch_1d(&kpt_spin, &sp, n);
    KPT_OK(kp_event_record(e0, a));
    KPT_OK(kp_launch_kernel(a, &l));
    KPT_OK(kp_event_record(e1, a));
    KPT_OK(kp_stream_wait_event(b, e1));
    KPT_OK(kp_stream_wait_event(b, never)); /* no-op */
    KPT_OK(kp_memcpy_async(b, copy, buf, FB(n)));
    KPT_OK(kp_event_query(e1, &done));
    assert_false(done); /* the producer is still spinning */
    KPT_OK(kp_stream_sync(b));
    KPT_OK(kp_event_query(e1, &done));
    assert_true(done);
    KPT_OK(kp_event_sync(e1));
    float ms = 0;
    KPT_OK(kp_event_elapsed_ms(e0, e1, &ms));
    assert_true(ms >= 40.0f);
    download(dev, out, copy, n);
    for (int i = 0; i < n; i++) assert_true(out[i] == value + (float)i);

    kp_event_destroy(e0);
    kp_event_destroy(e1);
    kp_event_destroy(never);
    kp_stream_destroy(a);
    kp_stream_destroy(b);
    kp_free(dev, buf);
    kp_free(dev, copy);
}

static void events(void **state) { run_both(case_events, 4096, "events"); }

/* host functions run in stream order */
static void host_fn(void *user) { (*(int *)user)++; }

static void host_func_order(void **state) {
    kp_stream_t s;
    int count = 0;
    KPT_OK(kp_stream_create(g_dev, &s));
    kpt_spin_params sp = {dalloc(g_dev, 1), 1.0f, 1, 20 * 1000 * 1000LL};
    kp_launch l = kpt_launch_1d(&kpt_spin, &sp, 1);
    KPT_OK(kp_launch_kernel(s, &l));
    KPT_OK(kp_launch_host_func(s, host_fn, &count));
    assert_int_equal(count, 0);
    KPT_OK(kp_stream_sync(s));
    assert_int_equal(count, 1);
    kp_stream_destroy(s);
    kp_free(g_dev, sp.out);
}

/* --- graphs: kernel, child and memcpy nodes; parameter updates ------------------ */
typedef struct graph_fixture {
    kp_graph_t g, child;
    kp_graph_node_t copy_in, axpy, sub, copy_out;
    float *x_src, *x, *y, *w, *out, *out2;
} graph_fixture;

/* child: y = y * ca + cb, then w += 1 * y */
static kp_graph_t make_child(kp_device_t dev, graph_fixture *f, int n, float ca, float cb) {
    kp_graph_t c;
    kp_graph_node_t k1, k2;
    KPT_OK(kp_graph_create(dev, &c));
    kpt_affine_params ap = {f->y, ca, cb, n};
    kp_launch l1 = kpt_launch_1d(&kpt_affine, &ap, n);
    KPT_OK(kp_graph_add_kernel(c, NULL, 0, &l1, &k1));
    kpt_axpy_params xp = {f->w, f->y, 1.0f, n};
    kp_launch l2 = kpt_launch_1d(&kpt_axpy, &xp, n);
    KPT_OK(kp_graph_add_kernel(c, &k1, 1, &l2, &k2));
    assert_int_equal(kp_graph_node_count(c), 2);
    return c;
}

/* g: copy x_src -> x; y += a * x; child; copy y -> out */
static kp_graph_t make_graph(kp_device_t dev, graph_fixture *f, int n, float a, float ca, float cb,
                             float *out) {
    kp_graph_t g, c = make_child(dev, f, n, ca, cb);
    KPT_OK(kp_graph_create(dev, &g));
    KPT_OK(kp_graph_add_memcpy(g, NULL, 0, f->x, f->x_src, FB(n), &f->copy_in));
    kpt_axpy_params p = {f->y, f->x, a, n};
    kp_launch l = kpt_launch_1d(&kpt_axpy, &p, n);
    KPT_OK(kp_graph_add_kernel(g, &f->copy_in, 1, &l, &f->axpy));
    KPT_OK(kp_graph_add_child(g, &f->axpy, 1, c, &f->sub));
    KPT_OK(kp_graph_add_memcpy(g, &f->sub, 1, out, f->y, FB(n), &f->copy_out));
    kp_graph_destroy(c); /* the node holds its own copy */
    assert_int_equal(kp_graph_node_count(g), 4);
    return g;
}

static void reset_yw(kp_device_t dev, graph_fixture *f, const float *h, int n) {
    KPT_OK(kp_memcpy_htod(dev, f->y, h, FB(n)));
    KPT_OK(kp_memcpy_htod(dev, f->w, h + n, FB(n)));
}

/* Six results of n floats: after the first launch, after each kind of
 * parameter update (kernel, memcpy, child, and w after it), after a
 * whole-graph update. */
static void case_graph(kp_device_t dev, float *out, int n6, uint64_t seed) {
    int n = n6 / 6;
    graph_fixture f;
    float *h = malloc(FB(3 * n));
    kpt_fill(h, 3 * n, &seed);
    f.x_src = upload(dev, h + 2 * n, n);
    f.x = dalloc(dev, n);
    f.y = dalloc(dev, n);
    f.w = dalloc(dev, n);
    f.out = dalloc(dev, n);
    f.out2 = dalloc(dev, n);
    kp_stream_t s;
    kp_graph_exec_t ge;
    KPT_OK(kp_stream_create(dev, &s));
    kp_graph_t g = make_graph(dev, &f, n, 2.0f, 0.5f, 1.0f, f.out);
    KPT_OK(kp_graph_instantiate(g, &ge));
    KPT_OK(kp_graph_exec_upload(ge, s));

    /* 1: as built */
    reset_yw(dev, &f, h, n);
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out + 0 * n, f.out, n);
    if (dev == g_cpu)
        for (int i = 0; i < n; i++) {
            float y = (2.0f * h[2 * n + i] + h[i]) * 0.5f + 1.0f;
            assert_true(out[i] == y);
        }
    /* 2: kernel node params: a = -3 */
    kpt_axpy_params p = {f.y, f.x, -3.0f, n};
    kp_launch l = kpt_launch_1d(&kpt_axpy, &p, n);
    KPT_OK(kp_graph_exec_set_kernel(ge, f.axpy, &l));
    reset_yw(dev, &f, h, n);
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out + 1 * n, f.out, n);
    /* 3: memcpy node params: write to out2 */
    KPT_OK(kp_graph_exec_set_memcpy(ge, f.copy_out, f.out2, f.y, FB(n)));
    reset_yw(dev, &f, h, n);
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out + 2 * n, f.out2, n);
    /* 4: child params: same topology, new constants */
    kp_graph_t c2 = make_child(dev, &f, n, -1.0f, 4.0f);
    KPT_OK(kp_graph_exec_set_child(ge, f.sub, c2));
    reset_yw(dev, &f, h, n);
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out + 3 * n, f.out2, n);
    download(dev, out + 4 * n, f.w, n);
    /* 5: whole-graph update from a graph of the same topology */
    graph_fixture f2 = f;
    kp_graph_t g2 = make_graph(dev, &f2, n, 0.25f, 3.0f, -2.0f, f.out);
    KPT_OK(kp_graph_exec_update(ge, g2));
    reset_yw(dev, &f, h, n);
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_graph_exec_launch(ge, s)); /* twice: y and w accumulate */
    KPT_OK(kp_stream_sync(s));
    download(dev, out + 5 * n, f.out, n);

    /* a graph of another topology is refused */
    kp_graph_t bad;
    kp_graph_node_t e;
    KPT_OK(kp_graph_create(dev, &bad));
    KPT_OK(kp_graph_add_empty(bad, NULL, 0, &e));
    assert_int_not_equal(kp_graph_exec_update(ge, bad), KP_OK);
    assert_int_not_equal(kp_graph_exec_set_child(ge, f.sub, bad), KP_OK);

    kp_graph_destroy(bad);
    kp_graph_destroy(g2);
    kp_graph_destroy(c2);
    kp_graph_exec_destroy(ge);
    kp_graph_destroy(g);
    kp_stream_destroy(s);
    float *bufs[] = {f.x_src, f.x, f.y, f.w, f.out, f.out2};
    for (int i = 0; i < 6; i++) kp_free(dev, bufs[i]);
    free(h);
}

static void graphs(void **state) {
    run_both(case_graph, 6 * 1000, "graph n=1000");
    run_both(case_graph, 6 * 16384, "graph n=16384");
}

/* Graph edges order work: a fork-join DAG with an empty join node. */
static void case_dag(kp_device_t dev, float *out, int n2, uint64_t seed) {
    int n = n2 / 2;
    float *h = malloc(FB(2 * n));
    kpt_fill(h, 2 * n, &seed);
    float *a = upload(dev, h, n), *b = upload(dev, h + n, n);
    kp_graph_t g;
    kp_graph_node_t ka, kb, join, tail;
    KPT_OK(kp_graph_create(dev, &g));
    kpt_affine_params pa = {a, 2.0f, 1.0f, n}, pb = {b, -1.0f, 0.5f, n};
    kp_launch la = kpt_launch_1d(&kpt_affine, &pa, n), lb = kpt_launch_1d(&kpt_affine, &pb, n);
    KPT_OK(kp_graph_add_kernel(g, NULL, 0, &la, &ka));
    KPT_OK(kp_graph_add_kernel(g, NULL, 0, &lb, &kb));
    kp_graph_node_t both[2] = {ka, kb};
    KPT_OK(kp_graph_add_empty(g, both, 2, &join));
    kpt_axpy_params px = {a, b, 3.0f, n};
    kp_launch lx = kpt_launch_1d(&kpt_axpy, &px, n);
    KPT_OK(kp_graph_add_kernel(g, &join, 1, &lx, &tail));
    kp_graph_exec_t ge;
    kp_stream_t s;
    KPT_OK(kp_graph_instantiate(g, &ge));
    kp_graph_destroy(g); /* the exec does not need it */
    KPT_OK(kp_stream_create(dev, &s));
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out, a, n);
    download(dev, out + n, b, n);
    kp_graph_exec_destroy(ge);
    kp_stream_destroy(s);
    kp_free(dev, a);
    kp_free(dev, b);
    free(h);
}

static void graph_dag(void **state) { run_both(case_dag, 2 * 5000, "dag"); }

/* --- stream capture ------------------------------------------------------------- */
static void case_capture(kp_device_t dev, float *out, int n, uint64_t seed) {
    float *h = malloc(FB(2 * n));
    kpt_fill(h, 2 * n, &seed);
    float *src = upload(dev, h, n), *y = upload(dev, h + n, n);
    kp_stream_t s;
    kp_graph_t g;
    kp_graph_exec_t ge;
    KPT_OK(kp_stream_create(dev, &s));
    assert_false(kp_stream_is_capturing(s));
    KPT_OK(kp_stream_begin_capture(s));
    assert_true(kp_stream_is_capturing(s));
    KPT_OK(kp_memcpy_async(s, y, src, FB(n)));
    kpt_affine_params p = {y, 3.0f, -1.0f, n};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, n);
    KPT_OK(kp_launch_kernel(s, &l));
    KPT_OK(kp_launch_kernel(s, &l));
    KPT_OK(kp_stream_end_capture(s, &g));
    assert_false(kp_stream_is_capturing(s));
    assert_true(kp_graph_node_count(g) >= 3);
    KPT_OK(kp_graph_instantiate(g, &ge));
    /* nothing ran during capture: y still holds its upload */
    KPT_OK(kp_device_sync(dev));
    download(dev, out, y, n);
    assert_true(kpt_close(out, h + n, n, 0, "y after capture"));
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    download(dev, out, y, n);
    for (int i = 0; i < n; i++) {
        float v = (h[i] * 3.0f - 1.0f) * 3.0f - 1.0f;
        assert_true(fabsf(out[i] - v) <= 1e-5f * fmaxf(1.0f, fabsf(v)));
    }
    /* allocating on a capturing thread is refused and spoils the capture */
    void *tmp = NULL;
    KPT_OK(kp_stream_begin_capture(s));
    assert_int_equal(kp_malloc(dev, 64, &tmp), KP_ERR_STATE);
    assert_null(tmp);
    kp_graph_t spoilt = NULL;
    assert_int_not_equal(kp_stream_end_capture(s, &spoilt), KP_OK);
    assert_null(spoilt);
    KPT_OK(kp_malloc(dev, 64, &tmp)); /* fine again */
    kp_free(dev, tmp);
    /* synchronizing a capturing stream is refused and spoils the capture */
    KPT_OK(kp_stream_begin_capture(s));
    assert_int_equal(kp_stream_sync(s), KP_ERR_STATE);
    kp_graph_t spoiled = NULL;
    assert_int_not_equal(kp_stream_end_capture(s, &spoiled), KP_OK);
    assert_null(spoiled);
    KPT_OK(kp_stream_sync(s)); /* usable again */

    kp_graph_exec_destroy(ge);
    kp_graph_destroy(g);
    kp_stream_destroy(s);
    kp_free(dev, src);
    kp_free(dev, y);
    free(h);
}

static void capture(void **state) { run_both(case_capture, 3000, "capture"); }

/* --- native handles made elsewhere ------------------------------------------------ */
/* A wrapped stream orders work with the owner's, and destroying the wrapper
 * leaves the stream to its owner; a native graph embeds as a child. The cpu
 * backend has neither and says so. */
static void native_handles(void **state) {
    kp_stream_t own, wrapped = (kp_stream_t)1;
    kp_graph_t g;
    kp_graph_node_t node;
    KPT_OK(kp_stream_create(g_dev, &own));
    KPT_OK(kp_graph_create(g_dev, &g));
    void *native = kp_stream_native(own);
    if (!native) {
        KPT_FAILS(kp_stream_wrap(g_dev, NULL, &wrapped), KP_ERR_UNSUPPORTED);
        assert_null(wrapped);
        assert_non_null(strstr(kp_last_error(), "no native streams"));
        KPT_FAILS(kp_graph_add_native(g, NULL, 0, (void *)g, &node), KP_ERR_UNSUPPORTED);
        assert_non_null(strstr(kp_last_error(), "no native graphs"));
    } else {
        const int n = 1 << 20; /* a million floats, every one checked */
        float *h = malloc(FB(n)), *back = malloc(FB(n));
        uint64_t seed = 7;
        kpt_fill(h, n, &seed);
        float *x = upload(g_dev, h, n), *y = dalloc(g_dev, n);
        KPT_OK(kp_stream_wrap(g_dev, native, &wrapped));
        assert_ptr_equal(kp_stream_native(wrapped), native);
        kpt_affine_params p = {y, 2.0f, 1.0f, n};
        kp_launch l = kpt_launch_1d(&kpt_affine, &p, n);
        KPT_OK(kp_memcpy_async(wrapped, y, x, FB(n)));
        KPT_OK(kp_launch_kernel(own, &l)); /* the same stream: after the copy */
        kp_stream_destroy(wrapped);        /* the owner's stream lives on */
        KPT_OK(kp_stream_sync(own));
        download(g_dev, back, y, n);
        for (int i = 0; i < n; i++) assert_true(back[i] == h[i] * 2.0f + 1.0f);
#ifdef KP_HAVE_CUDA
        /* a graph captured by the runtime itself, as another library would,
         * embedded as a child and run twice */
        cudaGraph_t cap;
        kp_graph_exec_t ge;
        assert_int_equal(cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal), 0);
        KPT_OK(kp_launch_kernel(own, &l));
        assert_int_equal(cudaStreamEndCapture(native, &cap), 0);
        KPT_OK(kp_graph_add_native(g, NULL, 0, cap, &node));
        assert_int_equal(cudaGraphDestroy(cap), 0); /* g holds its own copy */
        KPT_OK(kp_graph_instantiate(g, &ge));
        KPT_OK(kp_graph_exec_launch(ge, own));
        KPT_OK(kp_stream_sync(own));
        download(g_dev, back, y, n);
        for (int i = 0; i < n; i++) assert_true(back[i] == (h[i] * 2.0f + 1.0f) * 2.0f + 1.0f);
        kp_graph_exec_destroy(ge);
#endif
        kp_free(g_dev, x);
        kp_free(g_dev, y);
        free(h);
        free(back);
    }
    KPT_FAILS(kp_graph_add_native(g, NULL, 0, NULL, &node), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_stream_wrap(NULL, NULL, &wrapped), KP_ERR_INVALID_ARG);
    kp_graph_destroy(g);
    kp_stream_destroy(own);
}

/* --- misuse gives errors, not crashes ------------------------------------------- */
static void misuse(void **state) {
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_FAILS(kp_launch_kernel(s, NULL), KP_ERR_INVALID_ARG);
    kpt_affine_params p = {NULL, 1, 1, 0};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, 1);
    l.block.x = 0;
    KPT_FAILS(kp_launch_kernel(s, &l), KP_ERR_INVALID_ARG);
    l = kpt_launch_1d(&kpt_affine, NULL, 1);
    KPT_FAILS(kp_launch_kernel(s, &l), KP_ERR_INVALID_ARG);
    if (strcmp(kp_device_kernel_form(g_dev), "host") != 0) {
        kp_launch c = kpt_launch_1d(&kpt_cpu_only, &p, 1);
        KPT_FAILS(kp_launch_kernel(s, &c), KP_ERR_UNSUPPORTED);
        assert_non_null(strstr(kp_last_error(), "test_cpu_only"));
    }
    KPT_FAILS(kp_stream_end_capture(s, &(kp_graph_t){0}), KP_ERR_STATE);
    KPT_FAILS(kp_stream_sync(NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_graph_instantiate(NULL, &(kp_graph_exec_t){0}), KP_ERR_INVALID_ARG);

    /* objects of two devices do not mix */
    if (g_dev != g_cpu) {
        kp_event_t ev;
        KPT_OK(kp_event_create(g_cpu, &ev));
        KPT_FAILS(kp_event_record(ev, s), KP_ERR_INVALID_ARG);
        kp_event_destroy(ev);
    }
    /* a node of another graph is refused as a dependency and for updates */
    kp_graph_t g1, g2;
    kp_graph_node_t n1, n2;
    kp_graph_exec_t ge;
    KPT_OK(kp_graph_create(g_dev, &g1));
    KPT_OK(kp_graph_create(g_dev, &g2));
    KPT_OK(kp_graph_add_empty(g1, NULL, 0, &n1));
    KPT_OK(kp_graph_add_empty(g2, NULL, 0, &n2));
    assert_int_not_equal(kp_graph_add_empty(g2, &n1, 1, &n2), KP_OK);
    KPT_OK(kp_graph_instantiate(g1, &ge));
    float *y = dalloc(g_dev, 1);
    kpt_affine_params py = {y, 1, 1, 1};
    l = kpt_launch_1d(&kpt_affine, &py, 1);
    assert_int_not_equal(kp_graph_exec_set_kernel(ge, n2, &l), KP_OK);
    assert_int_not_equal(kp_graph_exec_set_kernel(ge, n1, &l), KP_OK); /* an empty node */
    kp_graph_exec_destroy(ge);
    kp_graph_destroy(g1);
    kp_graph_destroy(g2);
    kp_free(g_dev, y);
    kp_stream_destroy(s);
    /* NULL handles are no-ops for destroy */
    kp_stream_destroy(NULL);
    kp_graph_destroy(NULL);
    kp_graph_exec_destroy(NULL);
    kp_event_destroy(NULL);
    kp_free(g_dev, NULL);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (kpt_backend_cpu4_register() != KP_OK) return 1;
    if (kp_device_open("cpu", &g_cpu) != KP_OK) {
        fprintf(stderr, "cannot open the cpu device: %s\n", kp_last_error());
        return 1;
    }
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: conformance on %s: %s\n", name, kp_last_error());
        kp_device_close(g_cpu);
        return 77;
    }
    if (st != KP_OK) {
        fprintf(stderr, "cannot open %s: %s\n", name, kp_last_error());
        return 1;
    }
    char desc[256] = "";
    kp_device_describe(g_dev, desc, sizeof desc);
    printf("conformance on %s (%s), compared with cpu\n", name, desc);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(memory),         cmocka_unit_test(stream_order),
        cmocka_unit_test(events),         cmocka_unit_test(host_func_order),
        cmocka_unit_test(graphs),         cmocka_unit_test(graph_dag),
        cmocka_unit_test(capture),        cmocka_unit_test(misuse),
        cmocka_unit_test(native_handles),
    };
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    kp_device_close(g_dev);
    kp_device_close(g_cpu);
    return failed ? 1 : 0;
}
