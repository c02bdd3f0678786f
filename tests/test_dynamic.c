/* Pipelines with dynamic dimensions, in graph mode (copy and rebind) and
 * stream mode: sizes 1, odd, the maximum and past it; one graph per size for
 * the engine and one for all sizes for relu chains; rotating and new input
 * buffers; the strict and fallback policies; and a random trace of ticks
 * (random sizes, random input buffers, pinned among them) compared tick by
 * tick with host arithmetic on every element, for every pipeline at once:
 * graph-copy, graph-rebind and stream mode on the device, and graph mode on
 * cpu. Integer-valued data keeps every sum exact, so "equal" means equal.
 *   test_dynamic DEVICE [TICKS [TEST]]   (cpu or cuda; exit 77 without the device;
 *                                        TEST: run only the tests matching it) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev, g_cpu;
static int g_ticks = 1000;

/* ReLU(input0 + input1) with both sizes dynamic up to `max`. */
static const char *sample_dyn(char *buf, size_t len, const char *mode, const char *binding,
                              int64_t max, const char *cache) {
    snprintf(buf, len,
             "{\"kpipe_spec\": 1, \"name\": \"dyn\", \"execution\": \"%s\", "
             "\"input_binding\": \"%s\", %s%s"
             "\"modules\": ["
             "{\"type\": \"engine\", \"id\": \"a\", \"params\": {\"size\": {\"max\": %lld}}},"
             "{\"type\": \"relu\", \"id\": \"b\", \"params\": {\"size\": {\"max\": %lld}}}],"
             "\"connections\": [\"a.result0 -> b.input\"],"
             "\"inputs\": {\"input0\": \"a.arg0\", \"input1\": \"a.arg1\"},"
             "\"outputs\": {\"output\": \"b.output\"}}",
             mode, binding, cache ? "\"graph_cache\": " : "", cache ? cache : "", (long long)max,
             (long long)max);
    return buf;
}

/* A chain of 8 relus, all dynamic: one graph serves every size (the relus
 * fuse into one kernel, which reads the size from its descriptor too). */
static const char *relu_chain(char *buf, size_t len, const char *mode, int64_t max) {
    size_t used = (size_t)snprintf(
        buf, len, "{\"kpipe_spec\": 1, \"execution\": \"%s\", \"modules\": [", mode);
    for (int i = 0; i < 8; i++)
        used += (size_t)snprintf(buf + used, len - used,
                                 "%s{\"type\": \"relu\", \"id\": \"r%d\", \"params\": "
                                 "{\"size\": {\"max\": %lld}}}",
                                 i ? "," : "", i, (long long)max);
    used += (size_t)snprintf(buf + used, len - used, "], \"connections\": [");
    for (int i = 0; i < 7; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s\"r%d.output -> r%d.input\"",
                                 i ? "," : "", i, i + 1);
    snprintf(buf + used, len - used,
             "], \"inputs\": {\"x\": \"r0.input\"}, \"outputs\": {\"y\": \"r7.output\"}}");
    return buf;
}

typedef struct pipe {
    kp_device_t dev;
    kp_stream_t s;
    kp_pipeline_t p;
    bool graph, built;
} pipe;

static void pipe_open(pipe *q, kp_device_t dev, const char *json) {
    memset(q, 0, sizeof *q);
    q->dev = dev;
    KPT_OK(kp_stream_create(dev, &q->s));
    KPT_OK(kp_pipeline_create_from_json(dev, json, &q->p));
    KPT_OK(kp_pipeline_setup(q->p));
    q->graph = kp_pipeline_mode(q->p) == KP_EXEC_GRAPH;
}

static void pipe_close(pipe *q) {
    kp_pipeline_destroy(q->p);
    kp_stream_destroy(q->s);
}

/* One tick with inputs (x, y) of n elements; the output lands in `out`
 * (host, n floats). */
static kp_status pipe_tick(pipe *q, const void *x, const void *y, int n_in, int64_t n, float *out) {
    kp_port_info in[2] = {{"input0", (void *)x, {0}}, {"input1", (void *)y, {0}}};
    if (n_in == 1) in[0].name = "x";
    kp_port_info o[1] = {{n_in == 1 ? "y" : "output", NULL, {0}}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n, NULL));
    in[1].desc = in[0].desc;
    kp_status st = kp_pipeline_configure_io(q->p, in, (size_t)n_in, o, 1, q->s);
    if (st != KP_OK) return st;
    assert_int_equal(o[0].desc.shape[0], n);
    if (!q->built) {
        KPT_OK(kp_pipeline_warmup(q->p, q->s));
        if (q->graph) KPT_OK(kp_pipeline_build_graph(q->p));
        q->built = true;
    }
    st = q->graph ? kp_pipeline_execute_graph(q->p, q->s) : kp_pipeline_execute_stream(q->p, q->s);
    if (st != KP_OK) return st;
    KPT_OK(kp_stream_sync(q->s));
    return kp_memcpy_dtoh(q->dev, out, o[0].data, (size_t)n * sizeof(float));
}

/* Integer values in [-1000, 1000]. */
static void fill(float *v, int64_t n, uint64_t *seed) {
    for (int64_t i = 0; i < n; i++) v[i] = (float)((int64_t)(kpt_rand(seed) % 2001) - 1000);
}

static int64_t check_relu_add(const float *x, const float *y, const float *out, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = fmaxf(x[i] + y[i], 0.0f);
        if (out[i] != want && bad++ < 3)
            fprintf(stderr, "element %lld of %lld: %g, want %g\n", (long long)i, (long long)n,
                    (double)out[i], (double)want);
    }
    return bad;
}

/* Device buffers holding host data. */
typedef struct dbuf {
    float *d;
    bool pinned;
} dbuf;

static void dbuf_open(dbuf *b, kp_device_t dev, int64_t n, bool pinned) {
    b->pinned = pinned;
    if (pinned)
        KPT_OK(kp_malloc_host(dev, (size_t)n * sizeof(float), (void **)&b->d));
    else
        KPT_OK(kp_malloc(dev, (size_t)n * sizeof(float), (void **)&b->d));
}

static void dbuf_close(dbuf *b, kp_device_t dev) {
    if (b->pinned)
        kp_free_host(dev, b->d);
    else
        kp_free(dev, b->d);
}

static kp_graph_stats cache_stats(pipe *q) {
    kp_graph_stats s;
    memset(&s, 0, sizeof s);
    if (q->graph) KPT_OK(kp_graph_cache_stats(kp_pipeline_graph_cache(q->p), &s));
    return s;
}

/* Sizes 1, odd, the maximum, then 0 and past the maximum (named errors),
 * in every mode and binding. */
static void sizes_at_the_edges(void **state) {
    (void)state;
    const int64_t max = 4099;
    static const char *const modes[3][2] = {
        {"graph", "copy"}, {"graph", "rebind"}, {"stream", "copy"}};
    float *x = malloc(max * sizeof(float)), *y = malloc(max * sizeof(float)),
          *out = malloc(max * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(out);
    uint64_t seed = 11;
    for (int mi = 0; mi < 3; mi++) {
        char json[2048];
        pipe q;
        pipe_open(&q, g_dev, sample_dyn(json, sizeof json, modes[mi][0], modes[mi][1], max, NULL));
        dbuf a, b;
        dbuf_open(&a, g_dev, max, false);
        dbuf_open(&b, g_dev, max, false);
        const int64_t sizes[] = {1, 777, max, 2, max - 1, 777, 1};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            int64_t n = sizes[k];
            fill(x, n, &seed);
            fill(y, n, &seed);
            KPT_OK(kp_memcpy_htod(g_dev, a.d, x, (size_t)n * 4));
            KPT_OK(kp_memcpy_htod(g_dev, b.d, y, (size_t)n * 4));
            KPT_OK(pipe_tick(&q, a.d, b.d, 2, n, out));
            assert_int_equal(check_relu_add(x, y, out, n), 0);
        }
        if (q.graph) {
            kp_graph_stats s = cache_stats(&q);
            assert_int_equal(s.graphs, 5); /* one per engine size */
            assert_int_equal(s.hits, 3);
        }
        KPT_FAILS(pipe_tick(&q, a.d, b.d, 2, max + 1, out), KP_ERR_MISMATCH);
        assert_non_null(strstr(kp_last_error(), "over its maximum 4099"));
        KPT_FAILS(pipe_tick(&q, a.d, b.d, 2, 0, out), KP_ERR_MISMATCH);
        assert_non_null(strstr(kp_last_error(), "takes 1 .. 4099"));
        /* and it still runs afterwards */
        KPT_OK(pipe_tick(&q, a.d, b.d, 2, 5, out));
        dbuf_close(&a, g_dev);
        dbuf_close(&b, g_dev);
        pipe_close(&q);
    }
    free(x);
    free(y);
    free(out);
}

/* A relu chain reads its size from its descriptors: one graph for all. */
static void relu_chain_one_graph(void **state) {
    (void)state;
    const int64_t max = 1 << 16;
    char json[4096];
    pipe q;
    pipe_open(&q, g_dev, relu_chain(json, sizeof json, "graph", max));
    float *x = malloc(max * sizeof(float)), *out = malloc(max * sizeof(float));
    assert_non_null(x);
    assert_non_null(out);
    dbuf a;
    dbuf_open(&a, g_dev, max, false);
    uint64_t seed = 12;
    for (int t = 0; t < 50; t++) {
        int64_t n = 1 + (int64_t)(kpt_rand(&seed) % (uint64_t)max);
        fill(x, n, &seed);
        KPT_OK(kp_memcpy_htod(g_dev, a.d, x, (size_t)n * 4));
        KPT_OK(pipe_tick(&q, a.d, NULL, 1, n, out));
        for (int64_t i = 0; i < n; i++) assert_true(out[i] == fmaxf(x[i], 0.0f));
    }
    kp_graph_stats s = cache_stats(&q);
    assert_int_equal(s.graphs, 1);
    assert_int_equal(s.misses, 0); /* built once, then only hits */
    assert_int_equal(s.hits, 50);
    kp_pipeline_report r;
    KPT_OK(kp_pipeline_report_get(q.p, &r));
    assert_int_equal(r.graph_nodes, 1); /* the eight relus fuse into one kernel node */
    assert_int_equal(r.n_dynamic_dims, 1);
    dbuf_close(&a, g_dev);
    pipe_close(&q);
    free(x);
    free(out);
}

/* Rotating buffers: rebind keeps a graph per address set and copies
 * nothing; copy mode keeps one graph. New buffers every tick: rebind
 * re-points the least recent variant, within max_variants. */
static void rotating_and_new_buffers(void **state) {
    (void)state;
    const int64_t n = 12345;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
          *out = malloc(n * sizeof(float));
    uint64_t seed = 13;
    for (int rebind = 0; rebind < 2; rebind++) {
        char json[2048];
        pipe q;
        pipe_open(&q, g_dev,
                  sample_dyn(json, sizeof json, "graph", rebind ? "rebind" : "copy", n,
                             "{\"max_variants\": 3},"));
        dbuf a[3], b[3];
        for (int k = 0; k < 3; k++) {
            dbuf_open(&a[k], g_dev, n, false);
            dbuf_open(&b[k], g_dev, n, false);
        }
        for (int t = 0; t < 12; t++) {
            int k = t % 3;
            fill(x, n, &seed);
            fill(y, n, &seed);
            KPT_OK(kp_memcpy_htod(g_dev, a[k].d, x, n * 4));
            KPT_OK(kp_memcpy_htod(g_dev, b[k].d, y, n * 4));
            KPT_OK(pipe_tick(&q, a[k].d, b[k].d, 2, n, out));
            assert_int_equal(check_relu_add(x, y, out, n), 0);
        }
        kp_graph_stats s = cache_stats(&q);
        assert_int_equal(s.graphs, rebind ? 3 : 1);
        assert_int_equal(s.hits, rebind ? 10 : 12);
        kp_module_report mr;
        KPT_OK(kp_pipeline_module_report(q.p, 0, &mr));
        assert_int_equal(mr.copy_bytes, rebind ? 0 : 2 * n * sizeof(float));
        /* New buffers each tick: first kept until the end (new addresses),
         * then freed after their tick, so the next ones may reuse an
         * address a kept graph baked in (legal: the address is valid again).
         * compute-sanitizer (13.0) crashes inside cuGraphLaunch on that
         * reuse, in memcheck and racecheck alike, while plain runs pass:
         * KP_TEST_NO_ADDRESS_REUSE=1 (set by gpu-check's sanitizer stage)
         * keeps every buffer to the end. */
        bool reuse = !getenv("KP_TEST_NO_ADDRESS_REUSE");
        dbuf kept[2][12];
        int n_kept = 0;
        for (int t = 0; t < 12; t++) {
            dbuf na, nb;
            dbuf_open(&na, g_dev, n, false);
            dbuf_open(&nb, g_dev, n, false);
            fill(x, n, &seed);
            fill(y, n, &seed);
            KPT_OK(kp_memcpy_htod(g_dev, na.d, x, n * 4));
            KPT_OK(kp_memcpy_htod(g_dev, nb.d, y, n * 4));
            KPT_OK(pipe_tick(&q, na.d, nb.d, 2, n, out));
            assert_int_equal(check_relu_add(x, y, out, n), 0);
            if (t < 6 || !reuse) {
                kept[0][n_kept] = na;
                kept[1][n_kept++] = nb;
            } else {
                dbuf_close(&na, g_dev);
                dbuf_close(&nb, g_dev);
            }
        }
        for (int k = 0; k < n_kept; k++) {
            dbuf_close(&kept[0][k], g_dev);
            dbuf_close(&kept[1][k], g_dev);
        }
        s = cache_stats(&q);
        assert_true(s.graphs <= 3);
        if (rebind) assert_true(s.updates >= 1);
        for (int k = 0; k < 3; k++) {
            dbuf_close(&a[k], g_dev);
            dbuf_close(&b[k], g_dev);
        }
        pipe_close(&q);
    }
    free(x);
    free(y);
    free(out);
}

static void strict_and_fallback(void **state) {
    (void)state;
    const int64_t max = 1000;
    float *x = malloc(max * 4), *y = malloc(max * 4), *out = malloc(max * 4);
    uint64_t seed = 14;
    char json[2048];
    dbuf a, b;
    dbuf_open(&a, g_dev, max, false);
    dbuf_open(&b, g_dev, max, false);
    fill(x, max, &seed);
    fill(y, max, &seed);
    KPT_OK(kp_memcpy_htod(g_dev, a.d, x, max * 4));
    KPT_OK(kp_memcpy_htod(g_dev, b.d, y, max * 4));

    pipe q;
    pipe_open(&q, g_dev,
              sample_dyn(json, sizeof json, "graph", "copy", max, "{\"miss\": \"strict\"},"));
    KPT_OK(pipe_tick(&q, a.d, b.d, 2, 10, out)); /* built at 10 */
    assert_int_equal(check_relu_add(x, y, out, 10), 0);
    KPT_FAILS(pipe_tick(&q, a.d, b.d, 2, 20, out), KP_ERR_NOT_FOUND);
    assert_non_null(strstr(kp_last_error(), "strict"));
    /* prepare 20: configure_io at that size, build_graph */
    kp_port_info in[2] = {{"input0", a.d, {0}}, {"input1", b.d, {0}}}, o = {"output", NULL, {0}};
    int64_t n20 = 20;
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n20, NULL));
    in[1].desc = in[0].desc;
    KPT_OK(kp_pipeline_configure_io(q.p, in, 2, &o, 1, q.s));
    KPT_OK(kp_pipeline_build_graph(q.p));
    KPT_OK(pipe_tick(&q, a.d, b.d, 2, 20, out));
    assert_int_equal(check_relu_add(x, y, out, 20), 0);
    pipe_close(&q);

    pipe_open(&q, g_dev,
              sample_dyn(json, sizeof json, "graph", "copy", max, "{\"miss\": \"fallback\"},"));
    for (int64_t n = 1; n <= max; n += 111) {
        KPT_OK(pipe_tick(&q, a.d, b.d, 2, n, out));
        assert_int_equal(check_relu_add(x, y, out, n), 0);
    }
    kp_graph_stats s = cache_stats(&q);
    assert_int_equal(s.graphs, 1); /* the one built */
    assert_int_equal(s.fallbacks, 9);
    pipe_close(&q);
    dbuf_close(&a, g_dev);
    dbuf_close(&b, g_dev);
    free(x);
    free(y);
    free(out);
}

/* Users' sizes: 1 M and 16 M elements (odd too) under a 16 M maximum. */
static void large_sizes(void **state) {
    (void)state;
    const int64_t max = 1 << 24;
    float *x = malloc(max * sizeof(float)), *y = malloc(max * sizeof(float)),
          *out = malloc(max * sizeof(float));
    uint64_t seed = 15;
    static const char *const modes[3][2] = {
        {"graph", "copy"}, {"graph", "rebind"}, {"stream", "copy"}};
    for (int mi = 0; mi < 3; mi++) {
        char json[2048];
        pipe q;
        pipe_open(&q, g_dev, sample_dyn(json, sizeof json, modes[mi][0], modes[mi][1], max, NULL));
        dbuf a, b;
        dbuf_open(&a, g_dev, max, false);
        dbuf_open(&b, g_dev, max, false);
        const int64_t sizes[] = {1 << 20, max, max - 3, (1 << 20) + 1};
        for (int k = 0; k < 4; k++) {
            int64_t n = sizes[k];
            fill(x, n, &seed);
            fill(y, n, &seed);
            KPT_OK(kp_memcpy_htod(g_dev, a.d, x, (size_t)n * 4));
            KPT_OK(kp_memcpy_htod(g_dev, b.d, y, (size_t)n * 4));
            KPT_OK(pipe_tick(&q, a.d, b.d, 2, n, out));
            assert_int_equal(check_relu_add(x, y, out, n), 0);
        }
        dbuf_close(&a, g_dev);
        dbuf_close(&b, g_dev);
        pipe_close(&q);
    }
    free(x);
    free(y);
    free(out);
}

/* The random trace: every pipeline gets the same ticks. */
enum { TRACE_PIPES = 4, TRACE_BUFS = 4 };

static void random_trace(void **state) {
    (void)state;
    const int64_t max = 3000;
    static const char *const modes[TRACE_PIPES][2] = {
        {"graph", "copy"}, {"graph", "rebind"}, {"stream", "copy"}, {"graph", "copy"}};
    pipe q[TRACE_PIPES];
    dbuf bx[TRACE_PIPES][TRACE_BUFS], by[TRACE_PIPES][TRACE_BUFS];
    int n_pipes = g_dev == g_cpu ? 3 : 4; /* the 4th: the same on cpu */
    for (int i = 0; i < n_pipes; i++) {
        char json[2048];
        kp_device_t dev = i == 3 ? g_cpu : g_dev;
        pipe_open(&q[i], dev, sample_dyn(json, sizeof json, modes[i][0], modes[i][1], max, NULL));
        for (int k = 0; k < TRACE_BUFS; k++) {
            dbuf_open(&bx[i][k], dev, max, k == TRACE_BUFS - 1); /* one pinned pair */
            dbuf_open(&by[i][k], dev, max, k == TRACE_BUFS - 1);
        }
    }
    float *x = malloc(max * 4), *y = malloc(max * 4), *out = malloc(max * 4);
    uint64_t seed = 16;
    /* fresh buffers are freed after their tick (the next may reuse the
     * address), or kept to the end under KP_TEST_NO_ADDRESS_REUSE (see
     * rotating_and_new_buffers) */
    bool reuse = !getenv("KP_TEST_NO_ADDRESS_REUSE");
    struct {
        dbuf b;
        kp_device_t dev;
    } *kept = reuse ? NULL : calloc((size_t)g_ticks * TRACE_PIPES * 2 + 1, sizeof *kept);
    size_t n_kept = 0;
    for (int t = 0; t < g_ticks; t++) {
        int64_t n = 1 + (int64_t)(kpt_rand(&seed) % (uint64_t)max);
        int k = (int)(kpt_rand(&seed) % TRACE_BUFS);
        bool fresh = kpt_rand(&seed) % 10 == 0; /* a new buffer pair this tick */
        fill(x, n, &seed);
        fill(y, n, &seed);
        for (int i = 0; i < n_pipes; i++) {
            dbuf fx, fy, *ux = &bx[i][k], *uy = &by[i][k];
            if (fresh) {
                dbuf_open(&fx, q[i].dev, n, false);
                dbuf_open(&fy, q[i].dev, n, false);
                ux = &fx;
                uy = &fy;
            }
            if (ux->pinned) {
                memcpy(ux->d, x, (size_t)n * 4);
                memcpy(uy->d, y, (size_t)n * 4);
            } else {
                KPT_OK(kp_memcpy_htod(q[i].dev, ux->d, x, (size_t)n * 4));
                KPT_OK(kp_memcpy_htod(q[i].dev, uy->d, y, (size_t)n * 4));
            }
            memset(out, 0x7f, (size_t)n * 4);
            KPT_OK(pipe_tick(&q[i], ux->d, uy->d, 2, n, out));
            int64_t bad = check_relu_add(x, y, out, n);
            if (bad)
                fprintf(stderr, "tick %d, pipeline %d (%s %s on %s): %lld wrong\n", t, i,
                        modes[i][0], modes[i][1], kp_device_name(q[i].dev), (long long)bad);
            assert_int_equal(bad, 0);
            if (fresh && reuse) {
                dbuf_close(&fx, q[i].dev);
                dbuf_close(&fy, q[i].dev);
            } else if (fresh) {
                kept[n_kept].b = fx;
                kept[n_kept++].dev = q[i].dev;
                kept[n_kept].b = fy;
                kept[n_kept++].dev = q[i].dev;
            }
        }
    }
    for (size_t k = 0; k < n_kept; k++) dbuf_close(&kept[k].b, kept[k].dev);
    free(kept);
    for (int i = 0; i < n_pipes; i++) {
        kp_graph_stats s = cache_stats(&q[i]);
        char rep[512];
        if (q[i].graph)
            printf("trace %s %s on %s: %.200s...\n", modes[i][0], modes[i][1],
                   kp_device_name(q[i].dev),
                   kp_graph_cache_report(kp_pipeline_graph_cache(q[i].p), rep, sizeof rep));
        if (q[i].graph) assert_int_equal(s.calls, (uint64_t)g_ticks);
        for (int k = 0; k < TRACE_BUFS; k++) {
            dbuf_close(&bx[i][k], q[i].dev);
            dbuf_close(&by[i][k], q[i].dev);
        }
        pipe_close(&q[i]);
    }
    free(x);
    free(y);
    free(out);
}

static void bad_dynamic_specs(void **state) {
    (void)state;
    kp_pipeline_t p = NULL;
    /* a dynamic output into a fixed input */
    KPT_FAILS(kp_pipeline_create_from_json(
                  g_dev,
                  "{\"kpipe_spec\": 1, \"modules\": ["
                  "{\"type\": \"relu\", \"id\": \"a\", \"params\": {\"size\": {\"max\": 8}}},"
                  "{\"type\": \"relu\", \"id\": \"b\", \"params\": {\"size\": 8}}],"
                  "\"connections\": [\"a.output -> b.input\"],"
                  "\"inputs\": {\"x\": \"a.input\"}, \"outputs\": {\"y\": \"b.output\"}}",
                  &p),
              KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "dimension 0 of output is dynamic (up to 8)"));
    static const char *const bad[] = {
        "{\"max\": \"8\"}", "{\"max\": 8, \"min\": 1}",
        "{\"maximum\": 8}", "{}",
        "{\"max\": 8.5}",   "{\"max\": 0}",
        "{\"max\": -4}",    "{\"max\": 9999999999999}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"relu\", \"id\": \"a\", "
                 "\"params\": {\"size\": %s}}], \"inputs\": {\"x\": \"a.input\"}}",
                 bad[i]);
        kp_status st = kp_pipeline_create_from_json(g_dev, json, &p);
        if (st == KP_OK) fprintf(stderr, "accepted: %s\n", bad[i]);
        assert_true(st == KP_ERR_PARSE || st == KP_ERR_INVALID_ARG);
        assert_null(p);
    }
    static const char *const bad_top[] = {
        "\"input_binding\": \"zero\"",
        "\"input_binding\": 1",
        "\"graph_cache\": {\"miss\": \"lazy\"}",
        "\"graph_cache\": {\"max_graphs\": -1}",
        "\"graph_cache\": {\"max_graphs\": 1.5}",
        "\"graph_cache\": {\"capture_sizes\": [1, 2]}",
        "\"graph_cache\": {\"unknown\": 1}",
        "\"graph_cache\": []",
    };
    for (size_t i = 0; i < sizeof bad_top / sizeof bad_top[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"kpipe_spec\": 1, %s, \"modules\": [{\"type\": \"relu\", \"id\": \"a\", "
                 "\"params\": {\"size\": 8}}], \"inputs\": {\"x\": \"a.input\"}}",
                 bad_top[i]);
        KPT_FAILS(kp_pipeline_create_from_json(g_dev, json, &p), KP_ERR_PARSE);
    }
    /* capture sizes through the C options: refused for pipelines */
    kp_graph_cache_config gc = KP_GRAPH_CACHE_CONFIG_INIT;
    gc.capture_sizes[0] = 8;
    gc.n_capture_sizes = 1;
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.graph_cache = &gc;
    KPT_FAILS(kp_pipeline_create_from_json_opts(
                  g_dev,
                  "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"relu\", \"id\": \"a\", "
                  "\"params\": {\"size\": 8}}], \"inputs\": {\"x\": \"a.input\"}}",
                  &o, &p),
              KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "capture_sizes"));
    o.graph_cache = NULL;
    o.binding = 9;
    KPT_FAILS(kp_pipeline_create_from_json_opts(
                  g_dev,
                  "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"relu\", \"id\": \"a\", "
                  "\"params\": {\"size\": 8}}], \"inputs\": {\"x\": \"a.input\"}}",
                  &o, &p),
              KP_ERR_INVALID_ARG);
    /* the dynamic masks are reported */
    char json[2048];
    KPT_OK(kp_pipeline_create_from_json(
        g_dev, sample_dyn(json, sizeof json, "graph", "copy", 64, NULL), &p));
    uint32_t m;
    KPT_OK(kp_pipeline_input_dynamic(p, 1, &m));
    assert_int_equal(m, 1);
    KPT_OK(kp_pipeline_output_dynamic(p, 0, &m));
    assert_int_equal(m, 1);
    kp_pipeline_destroy(p);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (argc > 2) g_ticks = atoi(argv[2]);
    if (argc > 3) cmocka_set_test_filter(argv[3]);
    if (argc > 3) cmocka_set_test_filter(argv[3]);
    if (kp_device_open("cpu", &g_cpu) != KP_OK) return 1;
    if (strcmp(name, "cpu") == 0) {
        g_dev = g_cpu;
    } else {
        kp_status st = kp_device_open(name, &g_dev);
        if (st == KP_ERR_NO_DEVICE) {
            printf("SKIP: dynamic pipeline tests on %s: %s\n", name, kp_last_error());
            kp_device_close(g_cpu);
            return 77;
        }
        if (st != KP_OK) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_at_the_edges),
        cmocka_unit_test(relu_chain_one_graph),
        cmocka_unit_test(rotating_and_new_buffers),
        cmocka_unit_test(strict_and_fallback),
        cmocka_unit_test(large_sizes),
        cmocka_unit_test(random_trace),
        cmocka_unit_test(bad_dynamic_specs),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_dev != g_cpu) kp_device_close(g_dev);
    kp_device_close(g_cpu);
    return failed ? 1 : 0;
}
