/* The graph cache on its own: hits and misses, keys that differ in one
 * field, growth and invalidation, updates, eviction under both bounds,
 * padding and sliced outputs, the strict and fallback policies, prepare, and
 * in-place calls with rotating and new input buffers. Every output element
 * is checked against host arithmetic.
 *   test_graph_cache DEVICE   (cpu or cuda; exit 77 without the device) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

static kp_device_t g_dev;
static kp_stream_t g_s;

/* The work: out = a * in0 + in1 over the padded elements, a = literals[0]
 * (1 without literals): a copy node and a kernel node. */
static kp_status axpy_work(void *user, kp_stream_t s, const kp_graph_args *a) {
    (void)user;
    int64_t n = kp_desc_numel(&a->outputs[0].desc);
    kp_status st =
        kp_memcpy_async(s, a->outputs[0].data, a->inputs[1].data, (size_t)n * sizeof(float));
    if (st != KP_OK) return st;
    kpt_axpy_params p = {a->outputs[0].data, a->inputs[0].data,
                         a->n_literals ? (float)a->literals[0] : 1.0f, (int)n};
    kp_launch l = kpt_launch_1d(&kpt_axpy, &p, (int)n);
    return kp_launch_kernel(s, &l);
}

/* The same work as nodes (build), and re-pointed node by node on a graph
 * build made for other arguments (retarget): refused for a = 7, which
 * sends the miss down the build-and-update way. */
typedef struct axpy_nodes {
    kp_graph_node_t copy, kernel;
} axpy_nodes;

static void axpy_params(const kp_graph_args *a, kpt_axpy_params *p, size_t *bytes) {
    int64_t n = kp_desc_numel(&a->outputs[0].desc);
    *p = (kpt_axpy_params){a->outputs[0].data, a->inputs[0].data,
                           a->n_literals ? (float)a->literals[0] : 1.0f, (int)n};
    *bytes = (size_t)n * sizeof(float);
}

static kp_status axpy_build(void *user, kp_graph_t g, const kp_graph_args *a, void *state) {
    axpy_nodes *nd = state;
    kpt_axpy_params p;
    size_t bytes;
    axpy_params(a, &p, &bytes);
    kp_status st =
        kp_graph_add_memcpy(g, NULL, 0, a->outputs[0].data, a->inputs[1].data, bytes, &nd->copy);
    if (st != KP_OK) return st;
    kp_launch l = kpt_launch_1d(&kpt_axpy, &p, p.n);
    return kp_graph_add_kernel(g, &nd->copy, 1, &l, &nd->kernel);
}

static int g_retargets;

static kp_status axpy_retarget(void *user, kp_graph_exec_t ge, const kp_graph_args *a,
                               void *state) {
    const axpy_nodes *nd = state;
    if (a->literals[0] == 7) return KP_ERR_UNSUPPORTED;
    kpt_axpy_params p;
    size_t bytes;
    axpy_params(a, &p, &bytes);
    kp_status st =
        kp_graph_exec_set_memcpy(ge, nd->copy, a->outputs[0].data, a->inputs[1].data, bytes);
    if (st != KP_OK) return st;
    kp_launch l = kpt_launch_1d(&kpt_axpy, &p, p.n);
    g_retargets++;
    return kp_graph_exec_set_kernel(ge, nd->kernel, &l);
}

static bool g_nodes; /* run_axpy's calls build nodes and retarget */

/* The work for any dtype: out = in0, byte for byte. */
static kp_status copy_work(void *user, kp_stream_t s, const kp_graph_args *a) {
    (void)user;
    int64_t bytes = kp_desc_bytes_needed(&a->inputs[0].desc);
    return kp_memcpy_async(s, a->outputs[0].data, a->inputs[0].data, (size_t)bytes);
}

typedef struct bufs {
    float *x, *y;     /* device inputs */
    float *hx, *hy;   /* their host values */
    float *out;       /* host copy of the output view's buffer */
    int64_t n, bytes; /* elements */
} bufs;

static void bufs_open(bufs *b, int64_t n, uint64_t seed) {
    b->n = n;
    b->out = NULL;
    b->bytes = n * (int64_t)sizeof(float);
    b->hx = malloc((size_t)b->bytes);
    b->hy = malloc((size_t)b->bytes);
    assert_non_null(b->hx);
    assert_non_null(b->hy);
    for (int64_t i = 0; i < n; i++) {
        b->hx[i] = (float)((int64_t)(kpt_rand(&seed) % 2001) - 1000);
        b->hy[i] = (float)((int64_t)(kpt_rand(&seed) % 2001) - 1000);
    }
    KPT_OK(kp_malloc(g_dev, (size_t)b->bytes, (void **)&b->x));
    KPT_OK(kp_malloc(g_dev, (size_t)b->bytes, (void **)&b->y));
    KPT_OK(kp_memcpy_htod(g_dev, b->x, b->hx, (size_t)b->bytes));
    KPT_OK(kp_memcpy_htod(g_dev, b->y, b->hy, (size_t)b->bytes));
}

static void bufs_close(bufs *b) {
    kp_free(g_dev, b->x);
    kp_free(g_dev, b->y);
    free(b->hx);
    free(b->hy);
    free(b->out);
}

/* The call out = a * x + y with x, y and out of `shape` (no data yet),
 * masks[3] its dynamic dimensions (or NULL), *a its literal. */
static void axpy_call(kp_graph_call *call, kp_port_info in[2], kp_port_info out[1], int ndim,
                      const int64_t *shape, const uint32_t *masks, const int64_t *a) {
    in[0] = (kp_port_info){"x", NULL, {0}};
    in[1] = (kp_port_info){"y", NULL, {0}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, ndim, shape, NULL));
    in[1].desc = in[0].desc;
    out[0] = (kp_port_info){"out", NULL, in[0].desc};
    *call = (kp_graph_call)KP_GRAPH_CALL_INIT;
    call->enqueue = axpy_work;
    call->inputs = in;
    call->n_inputs = 2;
    call->outputs = out;
    call->n_outputs = 1;
    call->dynamic = masks;
    call->literals = a;
    call->n_literals = 1;
}

/* Runs out = a * x + y through the cache with x, y of `shape` and checks
 * every element of the output view (whatever its strides). */
static kp_status run_axpy(kp_graph_cache_t c, bufs *b, int ndim, const int64_t *shape, uint32_t dyn,
                          int64_t a, unsigned flags) {
    kp_port_info in[2], out[1];
    uint32_t masks[3] = {dyn, dyn, dyn};
    kp_graph_call call;
    axpy_call(&call, in, out, ndim, shape, masks, &a);
    in[0].data = b->x;
    in[1].data = b->y;
    call.flags = flags;
    if (g_nodes) {
        call.build = axpy_build;
        call.retarget = axpy_retarget;
        call.state_bytes = sizeof(axpy_nodes);
    }
    kp_status st = kp_graph_cache_run(c, &call, g_s);
    if (st != KP_OK) return st;
    KPT_OK(kp_stream_sync(g_s));
    const kp_tensor_desc *v = &out[0].desc;
    assert_int_equal(v->ndim, ndim);
    for (int k = 0; k < ndim; k++) assert_int_equal(v->shape[k], shape[k]);
    int64_t need = kp_desc_bytes_needed(v);
    free(b->out);
    b->out = malloc((size_t)need);
    assert_non_null(b->out);
    KPT_OK(kp_memcpy_dtoh(g_dev, b->out, out[0].data, (size_t)need));
    int64_t n = kp_desc_numel(v), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, at = v->offset;
        for (int k = ndim - 1; k >= 0; k--) {
            at += (rem % v->shape[k]) * v->strides[k];
            rem /= v->shape[k];
        }
        float want = (float)a * b->hx[i] + b->hy[i];
        if (b->out[at] != want && bad++ < 3)
            fprintf(stderr, "element %lld: %g, want %g\n", (long long)i, (double)b->out[at],
                    (double)want);
    }
    assert_int_equal(bad, 0);
    return KP_OK;
}

static kp_graph_stats stats(kp_graph_cache_t c) {
    kp_graph_stats s;
    KPT_OK(kp_graph_cache_stats(c, &s));
    return s;
}

static kp_graph_cache_t cache(const kp_graph_cache_config *cfg) {
    kp_graph_cache_t c;
    KPT_OK(kp_graph_cache_create(g_dev, cfg, &c));
    return c;
}

/* A cache that pads dynamic dimensions into the n capture sizes caps. */
static kp_graph_cache_t padded_cache(const int64_t *caps, size_t n) {
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    memcpy(cfg.capture_sizes, caps, n * sizeof *caps);
    cfg.n_capture_sizes = n;
    return cache(&cfg);
}

static void hit_and_miss(void **state) {
    (void)state;
    kp_graph_cache_t c = cache(NULL);
    bufs b;
    bufs_open(&b, 1000, 1);
    int64_t n = 1000;
    KPT_OK(run_axpy(c, &b, 1, &n, 0, 3, 0));
    for (int i = 0; i < 5; i++) KPT_OK(run_axpy(c, &b, 1, &n, 0, 3, 0));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.calls, 6);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 5);
    assert_int_equal(s.captures, 1);
    assert_int_equal(s.instantiations, 1);
    assert_int_equal(s.graphs, 1);
    assert_true(s.buffer_bytes >= 3 * 1000 * sizeof(float));
    /* new input data each call, same buffers: the copies bring it in */
    for (int64_t i = 0; i < n; i++) b.hx[i] = (float)i;
    KPT_OK(kp_memcpy_htod(g_dev, b.x, b.hx, (size_t)b.bytes));
    KPT_OK(run_axpy(c, &b, 1, &n, 0, 3, 0));
    /* other inputs of the same shape, in turn: the copy nodes, set only
     * when they change, follow each (every element checked) */
    bufs b2;
    bufs_open(&b2, 1000, 2);
    for (int i = 0; i < 3; i++) {
        KPT_OK(run_axpy(c, &b2, 1, &n, 0, 3, 0));
        KPT_OK(run_axpy(c, &b2, 1, &n, 0, 3, 0));
        KPT_OK(run_axpy(c, &b, 1, &n, 0, 3, 0));
    }
    bufs_close(&b2);
    assert_int_equal(stats(c).misses, 1);
    char rep[2048];
    kp_graph_cache_report(c, rep, sizeof rep);
    assert_non_null(strstr(rep, "live"));
    assert_non_null(strstr(rep, "id=0 in0=f32[1000] in1=f32[1000] out0=f32[1000] lit=[3]"));
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* Calls that differ in one field of the key never share a graph. */
static void keys_differ_in_one_field(void **state) {
    (void)state;
    kp_graph_cache_t c = cache(NULL);
    bufs b;
    bufs_open(&b, 64, 2);
    int64_t s8[1] = {8}, s9[1] = {9}, s24[2] = {2, 4}, s42[2] = {4, 2};
    KPT_OK(run_axpy(c, &b, 1, s9, 0, 2, 0));  /* the largest first: no growth later */
    KPT_OK(run_axpy(c, &b, 1, s8, 0, 2, 0));  /* one dimension */
    KPT_OK(run_axpy(c, &b, 1, s8, 0, 5, 0));  /* one literal */
    KPT_OK(run_axpy(c, &b, 1, s8, 1, 2, 0));  /* the dynamic mask */
    KPT_OK(run_axpy(c, &b, 2, s24, 0, 2, 0)); /* same count, other shape */
    KPT_OK(run_axpy(c, &b, 2, s42, 0, 2, 0));
    char rep[4096];
    if (stats(c).graphs != 6) fprintf(stderr, "%s", kp_graph_cache_report(c, rep, sizeof rep));
    assert_int_equal(stats(c).graphs, 6);
    assert_int_equal(stats(c).misses, 6);
    /* each again: six hits, each with its own right answer */
    KPT_OK(run_axpy(c, &b, 1, s8, 0, 2, 0));
    KPT_OK(run_axpy(c, &b, 1, s9, 0, 2, 0));
    KPT_OK(run_axpy(c, &b, 1, s8, 0, 5, 0));
    KPT_OK(run_axpy(c, &b, 1, s8, 1, 2, 0));
    KPT_OK(run_axpy(c, &b, 2, s24, 0, 2, 0));
    KPT_OK(run_axpy(c, &b, 2, s42, 0, 2, 0));
    assert_int_equal(stats(c).hits, 6);

    /* one dtype, one id: a byte copy of 8 elements of f32 vs i32 vs u8 */
    uint8_t host[32], back[32];
    for (int i = 0; i < 32; i++) host[i] = (uint8_t)(i * 7 + 1);
    KPT_OK(kp_memcpy_htod(g_dev, b.x, host, sizeof host));
    kp_dtype dts[3] = {KP_F32, KP_I32, KP_U8};
    for (int round = 0; round < 2; round++)
        for (int d = 0; d < 3; d++)
            for (uint64_t id = 7; id <= 8; id++) {
                kp_port_info in = {"x", b.x, {0}}, out = {"y", NULL, {0}};
                KPT_OK(kp_desc_init(&in.desc, dts[d], 1, s8, NULL));
                out.desc = in.desc;
                kp_graph_call call = KP_GRAPH_CALL_INIT;
                call.id = id;
                call.enqueue = copy_work;
                call.inputs = &in;
                call.n_inputs = 1;
                call.outputs = &out;
                call.n_outputs = 1;
                KPT_OK(kp_graph_cache_run(c, &call, g_s));
                KPT_OK(kp_stream_sync(g_s));
                size_t bytes = 8 * kp_dtype_size(dts[d]);
                memset(back, 0, sizeof back);
                KPT_OK(kp_memcpy_dtoh(g_dev, back, out.data, bytes));
                assert_memory_equal(back, host, bytes);
                assert_int_equal(out.desc.dtype, dts[d]);
            }
    kp_graph_stats s = stats(c);
    assert_int_equal(s.graphs, 12);
    assert_int_equal(s.hits, 12);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* A larger shape grows the buffers and makes the old graphs stale; going
 * back updates a stale graph instead of instantiating. */
static void growth_invalidates_then_updates(void **state) {
    (void)state;
    kp_graph_cache_t c = cache(NULL);
    bufs b;
    bufs_open(&b, 4096, 3);
    int64_t small = 100, big = 4000;
    KPT_OK(run_axpy(c, &b, 1, &small, 0, 1, 0));
    KPT_OK(run_axpy(c, &b, 1, &big, 0, 1, 0));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.invalidations, 1);
    assert_int_equal(s.grows, 6); /* three ports, twice */
    assert_int_equal(s.stale, 0); /* the stale graph was updated into the new key */
    assert_int_equal(s.updates, 1);
    assert_int_equal(s.instantiations, 1);
    KPT_OK(run_axpy(c, &b, 1, &small, 0, 1, 0)); /* small again: a new graph */
    KPT_OK(run_axpy(c, &b, 1, &small, 0, 1, 0));
    KPT_OK(run_axpy(c, &b, 1, &big, 0, 1, 0));
    s = stats(c);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.grows, 6);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

static void eviction_by_count(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.max_graphs = 2;
    kp_graph_cache_t c = cache(&cfg);
    bufs b;
    bufs_open(&b, 64, 4);
    int64_t sizes[3] = {64, 33, 17};
    KPT_OK(run_axpy(c, &b, 1, &sizes[0], 0, 1, 0));
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 3; i++) {
            KPT_OK(run_axpy(c, &b, 1, &sizes[i], 0, 1, 0));
            assert_true(stats(c).graphs <= 2);
        }
    kp_graph_stats s = stats(c);
    /* at the bound every miss re-points the least recent graph by update */
    assert_true(s.updates >= 10);
    assert_true(s.evictions >= 10);
    assert_int_equal(s.instantiations, 2);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* At a bound of one graph, misses re-point it node by node: no graph is
 * made after the first, every output element right; a refused retarget
 * (a = 7) is served by build and update, and the next retargets again. */
static void retarget_repoints_without_a_graph(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.max_graphs = 1;
    kp_graph_cache_t c = cache(&cfg);
    bufs b;
    bufs_open(&b, 4099, 9);
    int64_t sizes[4] = {4099, 1, 33, 1024};
    g_nodes = true;
    g_retargets = 0;
    KPT_OK(run_axpy(c, &b, 1, &sizes[0], 0, 2, 0));
    for (int r = 0; r < 12; r++) KPT_OK(run_axpy(c, &b, 1, &sizes[r % 4], 0, 3 + r % 3, 0));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.captures, 1);
    assert_int_equal(s.instantiations, 1);
    assert_int_equal(s.updates, 12);
    assert_int_equal(g_retargets, 12);
    KPT_OK(run_axpy(c, &b, 1, &sizes[2], 0, 7, 0)); /* refused: built and updated */
    s = stats(c);
    assert_int_equal(s.captures, 2);
    assert_int_equal(s.failed_updates, 1);
    assert_int_equal(s.updates, 13);
    KPT_OK(run_axpy(c, &b, 1, &sizes[1], 0, 5, 0)); /* and re-pointed again */
    assert_int_equal(stats(c).captures, 2);
    assert_int_equal(g_retargets, 13);
    KPT_OK(run_axpy(c, &b, 1, &sizes[1], 0, 5, 0)); /* a hit */
    assert_int_equal(stats(c).updates, 14);
    assert_int_equal(stats(c).hits, 1);
    g_nodes = false;
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

static void eviction_by_bytes(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    /* the buffers (3 x 4 KiB) and two graphs' charge (2 nodes of 1 KiB each) */
    cfg.max_bytes = 16 * 1024;
    kp_graph_cache_t c = cache(&cfg);
    bufs b;
    bufs_open(&b, 1024, 5);
    for (int64_t n = 1024; n > 1000; n--) {
        KPT_OK(run_axpy(c, &b, 1, &n, 0, 1, 0));
        kp_graph_stats s = stats(c);
        assert_true(s.bytes <= cfg.max_bytes);
    }
    kp_graph_stats s = stats(c);
    assert_true(s.evictions > 0);
    assert_true(s.graphs >= 1);
    /* buffers alone past the budget: refused, named */
    int64_t huge = 1 << 20;
    bufs big;
    bufs_open(&big, huge, 6);
    KPT_FAILS(run_axpy(c, &big, 1, &huge, 0, 1, 0), KP_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(kp_last_error(), "byte budget"));
    bufs_close(&big);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

static void padding_and_slicing(void **state) {
    (void)state;
    const int64_t caps[3] = {4, 8, 16};
    kp_graph_cache_t c = padded_cache(caps, 3);
    bufs b;
    bufs_open(&b, 64 * 5, 7);
    /* dimension 0 dynamic: batches 1..4 share the graph of 4, 5..8 of 8 */
    for (int64_t batch = 0; batch <= 8; batch++) { /* 8 first: the buffers grow once */
        int64_t shape[2] = {batch ? batch : 8, 5};
        KPT_OK(run_axpy(c, &b, 2, shape, 1, 2, 0));
    }
    kp_graph_stats s = stats(c);
    assert_int_equal(s.graphs, 2);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hits, 7);
    /* past the largest capture size: exact */
    int64_t shape[2] = {17, 5};
    KPT_OK(run_axpy(c, &b, 2, shape, 1, 2, 0));
    s = stats(c);
    assert_int_equal(s.invalidations, 2); /* the buffers grew under both graphs */
    assert_int_equal(s.graphs, 2);        /* one was updated into the new key */
    assert_int_equal(s.stale, 1);
    /* an inner dimension padded: the rows copied by one 2-D copy, the output
     * a strided view */
    for (int64_t w = 1; w <= 4; w++) {
        int64_t sh[2] = {3, w};
        KPT_OK(run_axpy(c, &b, 2, sh, 2, 1, 0));
    }
    /* deeper: a 2-D copy for each index of the dimensions further out,
     * and one of a single row */
    for (int64_t w = 1; w <= 5; w += 2) {
        int64_t sh3[3] = {3, 2, w}, sh4[4] = {2, 2, 3, w}, one[3] = {3, 1, w};
        KPT_OK(run_axpy(c, &b, 3, sh3, 4, 1, 0));
        KPT_OK(run_axpy(c, &b, 4, sh4, 8, 3, 0));
        KPT_OK(run_axpy(c, &b, 3, one, 4, 2, 0));
        KPT_OK(run_axpy(c, &b, 3, sh3, 2, 1, 0)); /* the middle one padded */
    }
    /* two dynamic dimensions, each at, under and over a capture size: one
     * graph meets lengths whose copies split at different dimensions (one
     * run, a run per row, a run per row of each outer index), and the copy
     * node's grid and parameters change between hits */
    for (int64_t u = 3; u <= 5; u++)
        for (int64_t w = 3; w <= 5; w++) {
            int64_t outer[3] = {u, w, 2}, apart[3] = {u, 2, w};
            KPT_OK(run_axpy(c, &b, 3, outer, 3, 2, 0));
            KPT_OK(run_axpy(c, &b, 3, apart, 5, 3, 0));
        }
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

static void strict_and_prepare(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.miss = KP_GRAPH_MISS_STRICT;
    kp_graph_cache_t c = cache(&cfg);
    bufs b;
    bufs_open(&b, 512, 8);
    int64_t n = 300;
    KPT_FAILS(run_axpy(c, &b, 1, &n, 0, 1, 0), KP_ERR_NOT_FOUND);
    assert_non_null(strstr(kp_last_error(), "in0=f32[300]"));
    /* prepare three sizes ahead, then only hits */
    int64_t sizes[3] = {100, 300, 512};
    kp_port_info in[3][2], out[3][1];
    kp_graph_call calls[3];
    int64_t lit = 1;
    for (int i = 0; i < 3; i++) axpy_call(&calls[i], in[i], out[i], 1, &sizes[i], NULL, &lit);
    KPT_OK(kp_graph_cache_prepare(c, calls, 3, g_s));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.graphs, 3);
    assert_int_equal(s.grows, 3); /* once, to the largest */
    assert_int_equal(s.invalidations, 0);
    /* each call's output set as a run sets it: the one static buffer, at
     * the call's shape */
    for (int i = 0; i < 3; i++) {
        assert_non_null(out[i][0].data);
        assert_ptr_equal(out[i][0].data, out[0][0].data);
        assert_int_equal(out[i][0].desc.ndim, 1);
        assert_int_equal(out[i][0].desc.shape[0], sizes[i]);
    }
    for (int i = 0; i < 3; i++) KPT_OK(run_axpy(c, &b, 1, &sizes[i], 0, 1, 0));
    assert_int_equal(stats(c).hits, 3);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* Prepared calls inside padded sizes: their outputs are the views a run
 * gives (the static buffer, the exact shape, the padded layout), and a run
 * of the same call is a hit on the same buffer. */
static void prepare_gives_padded_views(void **state) {
    (void)state;
    const int64_t caps[2] = {4, 8};
    kp_graph_cache_t c = padded_cache(caps, 2);
    bufs b;
    bufs_open(&b, 3 * 8, 9);
    const int64_t widths[3] = {8, 3, 5}, padded[3] = {8, 4, 8};
    kp_port_info in[3][2], out[3][1];
    kp_graph_call calls[3];
    uint32_t masks[3] = {2, 2, 2};
    int64_t lit = 2;
    for (int i = 0; i < 3; i++) {
        int64_t shape[2] = {3, widths[i]};
        axpy_call(&calls[i], in[i], out[i], 2, shape, masks, &lit);
    }
    KPT_OK(kp_graph_cache_prepare(c, calls, 3, g_s));
    assert_int_equal(stats(c).graphs, 2); /* 5 and 8 share the graph of 8 */
    for (int i = 0; i < 3; i++) {
        const kp_tensor_desc *v = &out[i][0].desc;
        assert_ptr_equal(out[i][0].data, out[0][0].data);
        assert_int_equal(v->ndim, 2);
        assert_int_equal(v->shape[0], 3);
        assert_int_equal(v->shape[1], widths[i]);
        assert_int_equal(v->strides[0], padded[i]);
        assert_int_equal(v->strides[1], 1);
    }
    /* the prepared call of width 5, run: a hit, the same view; every
     * element right (run_axpy checks them at the same shape) */
    void *prepared = out[2][0].data;
    in[2][0].data = b.x;
    in[2][1].data = b.y;
    KPT_OK(kp_graph_cache_run(c, &calls[2], g_s));
    assert_int_equal(stats(c).hits, 1);
    assert_ptr_equal(out[2][0].data, prepared);
    assert_int_equal(out[2][0].desc.strides[0], 8);
    int64_t shape[2] = {3, 5};
    KPT_OK(run_axpy(c, &b, 2, shape, 2, 2, 0));
    assert_int_equal(stats(c).misses, 0);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

static void fallback_runs_without_graph(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.miss = KP_GRAPH_MISS_FALLBACK;
    kp_graph_cache_t c = cache(&cfg);
    bufs b;
    bufs_open(&b, 777, 9);
    int64_t n = 777;
    for (int i = 0; i < 3; i++) KPT_OK(run_axpy(c, &b, 1, &n, 0, 4, 0));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.fallbacks, 3);
    assert_int_equal(s.graphs, 0);
    assert_int_equal(s.captures, 0);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* The byte bound holds on the fallback path too: a fallback that grows
 * the buffers evicts graphs until the cache is within max_bytes. */
static void fallback_keeps_the_byte_bound(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.miss = KP_GRAPH_MISS_FALLBACK;
    /* four graphs of small sizes, prepared, fit: their work is one node (a
     * copy), and on cuda the input's copy into the static buffer leads as
     * a node of its own; each node is charged 1 KiB */
    const size_t nodes = strcmp(kp_device_backend(g_dev), "cpu") == 0 ? 1 : 2;
    cfg.max_bytes = 4096 + 4 * nodes * KP_GRAPH_NODE_BYTES;
    kp_graph_cache_t c = cache(&cfg);
    int64_t sizes[5] = {8, 16, 24, 32, 1500};
    kp_port_info in[5], out[5];
    kp_graph_call calls[5];
    for (int i = 0; i < 5; i++) {
        in[i] = (kp_port_info){"x", NULL, {0}};
        KPT_OK(kp_desc_init(&in[i].desc, KP_F32, 1, &sizes[i], NULL));
        out[i] = (kp_port_info){"out", NULL, in[i].desc};
        calls[i] = (kp_graph_call)KP_GRAPH_CALL_INIT;
        calls[i].enqueue = copy_work;
        calls[i].inputs = &in[i];
        calls[i].n_inputs = 1;
        calls[i].outputs = &out[i];
        calls[i].n_outputs = 1;
    }
    KPT_OK(kp_graph_cache_prepare(c, calls, 4, g_s));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.graphs, 4);
    assert_true(s.bytes <= cfg.max_bytes);
    /* a 1500-float call falls back: its output's buffer (6000 bytes of
     * the budget; the input is read in place) leaves room for fewer graphs */
    bufs b;
    bufs_open(&b, 1500, 21);
    in[4].data = b.x;
    KPT_OK(kp_graph_cache_run(c, &calls[4], g_s));
    float *host = malloc(1500 * sizeof(float));
    assert_non_null(host);
    KPT_OK(kp_stream_sync(g_s));
    KPT_OK(kp_memcpy_dtoh(g_dev, host, out[4].data, 1500 * sizeof(float)));
    for (int i = 0; i < 1500; i++) assert_true(host[i] == b.hx[i]);
    free(host);
    s = stats(c);
    if (s.bytes > cfg.max_bytes)
        print_error("after a fallback: %zu bytes, %zu graphs, %llu evictions\n", s.bytes, s.graphs,
                    (unsigned long long)s.evictions);
    assert_int_equal(s.fallbacks, 1);
    assert_true(s.bytes <= cfg.max_bytes);
    assert_true(s.evictions >= 1);
    assert_true(s.graphs < 4);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* An inner dimension padded has one run per row, at most
 * KP_GRAPH_MAX_COPY_RUNS: one row past it is refused, and the refused
 * call changes nothing (no capture, no update, no counter). */
static void padding_rows_bound_refuses_cleanly(void **state) {
    (void)state;
    const int64_t caps[2] = {4, 8};
    kp_graph_cache_t c = padded_cache(caps, 2);
    int64_t rows = KP_GRAPH_MAX_COPY_RUNS;
    bufs b;
    bufs_open(&b, (rows + 1) * 3, 22);
    int64_t ok[2] = {rows, 3}, over[2] = {rows + 1, 3};
    KPT_OK(run_axpy(c, &b, 2, ok, 2, 1, 0)); /* every element checked */
    KPT_OK(run_axpy(c, &b, 2, (int64_t[2]){rows, 2}, 2, 1, 0));
    kp_graph_stats before = stats(c);
    KPT_FAILS(run_axpy(c, &b, 2, over, 2, 1, 0), KP_ERR_UNSUPPORTED);
    assert_non_null(strstr(kp_last_error(), "copies (at most 4096)"));
    kp_graph_stats after = stats(c);
    assert_memory_equal(&before, &after, sizeof before);
    /* the kept graph still serves its own key */
    KPT_OK(run_axpy(c, &b, 2, ok, 2, 1, 0));
    assert_int_equal(stats(c).hits, before.hits + 1);
    /* padded in the outer dimension instead: one copy, any number of rows */
    KPT_OK(run_axpy(c, &b, 2, over, 1, 1, 0));
    bufs_close(&b);
    kp_graph_cache_destroy(c);
}

/* In place: a graph per input address set; rotating buffers hit; new
 * buffers past max_variants re-point the least recent variant. */
static void in_place_variants(void **state) {
    (void)state;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.max_variants = 3;
    kp_graph_cache_t c = cache(&cfg);
    enum { N = 10 };
    bufs b[N];
    int64_t n = 1 << 12;
    for (int i = 0; i < N; i++) bufs_open(&b[i], n, 20 + (uint64_t)i);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 3; i++) KPT_OK(run_axpy(c, &b[i], 1, &n, 0, 1, KP_GRAPH_IN_PLACE));
    kp_graph_stats s = stats(c);
    assert_int_equal(s.graphs, 3);
    assert_int_equal(s.hits, 9);
    for (int i = 3; i < N; i++) KPT_OK(run_axpy(c, &b[i], 1, &n, 0, 1, KP_GRAPH_IN_PLACE));
    s = stats(c);
    assert_int_equal(s.graphs, 3);
    assert_int_equal(s.updates, 7);
    assert_int_equal(s.instantiations, 3);
    assert_int_equal(s.buffer_bytes >= (size_t)n * 4, 1); /* the output only */
    for (int i = 0; i < N; i++) bufs_close(&b[i]);
    kp_graph_cache_destroy(c);
}

/* Users' sizes: 1, odd, 1 M and 16 M elements, new and reused buffers. */
static void large_sizes(void **state) {
    (void)state;
    kp_graph_cache_t c = cache(NULL);
    int64_t sizes[4] = {1, 12345, 1 << 20, (1 << 24) + 3};
    for (int i = 0; i < 4; i++) {
        bufs b;
        bufs_open(&b, sizes[i], 30 + (uint64_t)i);
        KPT_OK(run_axpy(c, &b, 1, &sizes[i], 0, 2, 0));
        KPT_OK(run_axpy(c, &b, 1, &sizes[i], 0, 2, 0));
        KPT_OK(run_axpy(c, &b, 1, &sizes[i], 0, 2, KP_GRAPH_IN_PLACE));
        bufs_close(&b);
    }
    kp_graph_cache_destroy(c);
    /* the same lengths padded into one capture size, largest first: one
     * graph, its input copy's grid the padded size's for every length */
    const int64_t cap = (1 << 24) + 8;
    c = padded_cache(&cap, 1);
    for (int i = 3; i >= 0; i--) {
        bufs b;
        bufs_open(&b, sizes[i], 40 + (uint64_t)i);
        KPT_OK(run_axpy(c, &b, 1, &sizes[i], 1, 3, 0));
        KPT_OK(run_axpy(c, &b, 1, &sizes[i], 1, 3, 0));
        bufs_close(&b);
    }
    kp_graph_stats s = stats(c);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 7);
    kp_graph_cache_destroy(c);
}

static void misuse(void **state) {
    (void)state;
    kp_graph_cache_t c = cache(NULL);
    bufs b;
    bufs_open(&b, 16, 40);
    int64_t n = 16;
    kp_port_info in[2] = {{"x", b.x, {0}}, {"y", b.y, {0}}}, out[1] = {{"o", NULL, {0}}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n, NULL));
    in[1].desc = out[0].desc = in[0].desc;
    kp_graph_call call = KP_GRAPH_CALL_INIT;
    call.inputs = in;
    call.n_inputs = 2;
    call.outputs = out;
    call.n_outputs = 1;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG); /* no work */
    assert_non_null(strstr(kp_last_error(), "neither enqueue nor build"));
    call.enqueue = axpy_work;
    KPT_FAILS(kp_graph_cache_run(c, NULL, g_s), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_graph_cache_run(c, &call, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_graph_cache_run(NULL, &call, g_s), KP_ERR_INVALID_ARG);
    call.flags = 8;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    call.flags = 0;
    uint32_t masks[3] = {2, 0, 0};
    call.dynamic = masks;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "dynamic mask"));
    call.dynamic = NULL;
    call.n_inputs = 17;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    call.n_inputs = 2;
    kp_tensor_desc good = in[0].desc;
    in[0].desc.strides[0] = 2; /* strided: the cache cannot copy it */
    in[0].desc.shape[0] = 8;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "contiguous"));
    in[0].desc = good;
    in[0].desc.ndim = 99;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    in[0].desc = good;
    in[0].data = NULL;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    in[0].data = b.x;
    call.struct_size = 3;
    KPT_FAILS(kp_graph_cache_run(c, &call, g_s), KP_ERR_INVALID_ARG);
    call.struct_size = sizeof call;
    KPT_OK(kp_graph_cache_run(c, &call, g_s));
    KPT_OK(kp_stream_sync(g_s));

    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    kp_graph_cache_t bad = NULL;
    cfg.miss = (kp_graph_miss)7;
    KPT_FAILS(kp_graph_cache_create(g_dev, &cfg, &bad), KP_ERR_INVALID_ARG);
    cfg.miss = KP_GRAPH_MISS_CAPTURE;
    cfg.capture_sizes[0] = 8;
    cfg.capture_sizes[1] = 8;
    cfg.n_capture_sizes = 2;
    KPT_FAILS(kp_graph_cache_create(g_dev, &cfg, &bad), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "capture_sizes[1]"));
    cfg.n_capture_sizes = 1000;
    KPT_FAILS(kp_graph_cache_create(g_dev, &cfg, &bad), KP_ERR_INVALID_ARG);
    assert_null(bad);
    KPT_FAILS(kp_graph_cache_create(NULL, NULL, &bad), KP_ERR_INVALID_ARG);
    kp_graph_miss m;
    KPT_FAILS(kp_graph_miss_parse("lazy", &m), KP_ERR_PARSE);
    KPT_OK(kp_graph_miss_parse("fallback", &m));
    assert_int_equal(m, KP_GRAPH_MISS_FALLBACK);
    assert_string_equal(kp_graph_miss_str((kp_graph_miss)9), "invalid");
    char rep[8];
    assert_string_equal(kp_graph_cache_report(NULL, rep, sizeof rep), "");
    kp_graph_cache_report(c, rep, sizeof rep); /* truncated, terminated */
    assert_true(strlen(rep) < sizeof rep);
    bufs_close(&b);
    kp_graph_cache_destroy(c);
    kp_graph_cache_destroy(NULL);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: graph cache tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK || kp_stream_create(g_dev, &g_s) != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hit_and_miss),
        cmocka_unit_test(keys_differ_in_one_field),
        cmocka_unit_test(growth_invalidates_then_updates),
        cmocka_unit_test(eviction_by_count),
        cmocka_unit_test(retarget_repoints_without_a_graph),
        cmocka_unit_test(eviction_by_bytes),
        cmocka_unit_test(padding_and_slicing),
        cmocka_unit_test(strict_and_prepare),
        cmocka_unit_test(prepare_gives_padded_views),
        cmocka_unit_test(fallback_runs_without_graph),
        cmocka_unit_test(fallback_keeps_the_byte_bound),
        cmocka_unit_test(padding_rows_bound_refuses_cleanly),
        cmocka_unit_test(in_place_variants),
        cmocka_unit_test(large_sizes),
        cmocka_unit_test(misuse),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_stream_destroy(g_s);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
