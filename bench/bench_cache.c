/* The graph cache and graph mode with dynamic shapes and rotating inputs, on
 * one GPU, in one process, with the baselines measured beside them:
 *   1. the cache's hit path against launching the same executable graph by
 *      hand, and a miss (capture + update, capture + instantiate) against
 *      capture + instantiate by hand, for graphs of 1 and 100 kernels;
 *   2. traces of shapes through the dynamic sample (engine + relu) and a
 *      chain of 8 relus: A one shape, B 8 shapes round-robin, C growing
 *      shapes, D 64 random shapes;
 *   3. the sample at 16 K and 16 M elements with 2 and 3 rotating input
 *      buffer sets: graph mode rebinding (zero-copy) and copying, stream
 *      mode, and the floor: one fused kernel reading the inputs in place,
 *      launched as a graph (one per buffer set).
 * Latency is one tick with a host wait, on the host clock.
 *   bench_cache [--json FILE] [--quick] */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench-util.h"
#include "fused.h"
#include "hand.h"
#include "tool-impl.h"

static kp_device_kernel g_tiny_dk;
static const kp_kernel g_tiny = {"bench_tiny", sizeof(bench_tiny_params), {{"cuda", &g_tiny_dk}}};
static bool g_quick;
static json_t *g_json;

static double now_us(void) { return kpt_now_us(); }

/* --- 1. the cache on its own ---------------------------------------------------- */
typedef struct tiny_work {
    int kernels;
} tiny_work;

static kp_status tiny_enqueue(void *user, kp_stream_t s, const kp_graph_args *a) {
    const tiny_work *w = user;
    bench_tiny_params p = {a->inputs[0].data, a->outputs[0].data,
                           a->n_literals ? (float)a->literals[0] : 1.0f};
    kp_launch l = {.kernel = &g_tiny, .grid = {1, 1, 1}, .block = {1, 1, 1}, .params = &p};
    for (int k = 0; k < w->kernels; k++) KK(kp_launch_kernel(s, &l));
    return KP_OK;
}

/* The same work as kernel nodes, in a chain (build), and re-pointed node
 * by node on a graph made for another literal (retarget): a miss without
 * a new graph. */
static kp_status tiny_build(void *user, kp_graph_t g, const kp_graph_args *a, void *state) {
    const tiny_work *w = user;
    kp_graph_node_t *nodes = state;
    bench_tiny_params p = {a->inputs[0].data, a->outputs[0].data,
                           a->n_literals ? (float)a->literals[0] : 1.0f};
    kp_launch l = {.kernel = &g_tiny, .grid = {1, 1, 1}, .block = {1, 1, 1}, .params = &p};
    kp_status st = KP_OK;
    for (int k = 0; k < w->kernels && st == KP_OK; k++)
        st = kp_graph_add_kernel(g, k ? &nodes[k - 1] : NULL, k ? 1 : 0, &l, &nodes[k]);
    return st;
}

static kp_status tiny_retarget(void *user, kp_graph_exec_t ge, const kp_graph_args *a,
                               void *state) {
    const tiny_work *w = user;
    const kp_graph_node_t *nodes = state;
    bench_tiny_params p = {a->inputs[0].data, a->outputs[0].data,
                           a->n_literals ? (float)a->literals[0] : 1.0f};
    kp_launch l = {.kernel = &g_tiny, .grid = {1, 1, 1}, .block = {1, 1, 1}, .params = &p};
    kp_status st = KP_OK;
    for (int k = 0; k < w->kernels && st == KP_OK; k++) st = kp_graph_exec_set_kernel(ge, nodes[k], &l);
    return st;
}

static void hand_tiny(cudaStream_t s, const float *in, float *out, float k, int kernels) {
    bench_tiny_params p = {in, out, k};
    void *args[1] = {&p};
    for (int i = 0; i < kernels; i++)
        CK(cudaLaunchKernel(bench_tiny_fn(), (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, s));
}

static cudaGraph_t hand_capture(cudaStream_t s, const float *in, float *out, float k, int kernels) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    hand_tiny(s, in, out, k, kernels);
    CK(cudaStreamEndCapture(s, &g));
    return g;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static void cache_alone(kp_device_t dev, int kernels) {
    kp_stream_t s;
    KK(kp_stream_create(dev, &s));
    cudaStream_t hs = kp_stream_native(s);
    float *x, *y;
    CK(cudaMalloc((void **)&x, 256));
    CK(cudaMalloc((void **)&y, 256));
    CK(cudaMemset(x, 0, 256));
    tiny_work w = {kernels};
    int64_t one = 1, lit = 3;
    kp_port_info in = {"x", x, {0}}, out = {"y", NULL, {0}};
    KK(kp_desc_init(&in.desc, KP_F32, 1, &one, NULL));
    out.desc = in.desc;
    kp_graph_call call = KP_GRAPH_CALL_INIT;
    call.enqueue = tiny_enqueue;
    call.user = &w;
    call.inputs = &in;
    call.n_inputs = 1;
    call.outputs = &out;
    call.n_outputs = 1;
    call.literals = &lit;
    call.n_literals = 1;
    call.flags = KP_GRAPH_IN_PLACE;
    kp_graph_cache_t c;
    KK(kp_graph_cache_create(dev, NULL, &c));
    KK(kp_graph_cache_run(c, &call, s));
    KK(kp_stream_sync(s));
    /* the hand twin: the same work captured by hand, on the same output */
    cudaGraph_t hg = hand_capture(hs, x, out.data, 3.0f, kernels);
    cudaGraphExec_t he;
    CK(cudaGraphInstantiate(&he, hg, 0));
    int reps = g_quick ? 2000 : 20000, rounds = 10, per = reps / rounds;
    double *lk = malloc((size_t)reps * sizeof *lk), *lh = malloc((size_t)reps * sizeof *lh);
    double enq_k = 0, enq_h = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < per; i++) {
            double t0 = now_us();
            KK(kp_graph_cache_run(c, &call, s));
            KK(kp_stream_sync(s));
            lk[r * per + i] = now_us() - t0;
            t0 = now_us();
            CK(cudaGraphLaunch(he, hs));
            CK(cudaStreamSynchronize(hs));
            lh[r * per + i] = now_us() - t0;
        }
        /* host enqueue cost: batches of 16 launches, then one wait */
        for (int b = 0; b < per / 16; b++) {
            double t0 = now_us();
            for (int i = 0; i < 16; i++) KK(kp_graph_cache_run(c, &call, s));
            enq_k += now_us() - t0;
            KK(kp_stream_sync(s));
            t0 = now_us();
            for (int i = 0; i < 16; i++) CK(cudaGraphLaunch(he, hs));
            enq_h += now_us() - t0;
            CK(cudaStreamSynchronize(hs));
        }
    }
    kpt_stats sk = kpt_stats_of(lk, (size_t)reps), sh = kpt_stats_of(lh, (size_t)reps);
    int nb = rounds * (per / 16) * 16;
    enq_k /= nb;
    enq_h /= nb;

    /* misses, each launched and waited for like a tick, the hit's latency
     * taken off, the captured graph freed as the cache frees it. By hand:
     * capture + instantiate, and capture + update. */
    int mreps = g_quick ? 50 : (kernels > 10 ? 200 : 1000);
    double *m = malloc((size_t)mreps * sizeof *m);
    for (int i = 0; i < mreps; i++) {
        double t0 = now_us();
        cudaGraph_t g = hand_capture(hs, x, y, (float)i, kernels);
        cudaGraphExec_t e;
        CK(cudaGraphInstantiate(&e, g, 0));
        CK(cudaGraphDestroy(g)); /* the cache, too, frees what it captured */
        CK(cudaGraphLaunch(e, hs));
        CK(cudaStreamSynchronize(hs));
        m[i] = now_us() - t0 - sh.p50;
        CK(cudaGraphExecDestroy(e));
    }
    double hand_inst = median(m, mreps);
    for (int i = 0; i < mreps; i++) {
        double t0 = now_us();
        cudaGraph_t g = hand_capture(hs, x, y, (float)i, kernels);
        cudaGraphExecUpdateResultInfo info;
        CK(cudaGraphExecUpdate(he, g, &info));
        CK(cudaGraphDestroy(g));
        CK(cudaGraphLaunch(he, hs));
        CK(cudaStreamSynchronize(hs));
        m[i] = now_us() - t0 - sh.p50;
    }
    double hand_upd = median(m, mreps);
    /* by hand, the floor of a same-topology miss: each kernel node's
     * parameters set on the executable graph */
    size_t n_hn = 0;
    CK(cudaGraphGetNodes(hg, NULL, &n_hn));
    cudaGraphNode_t *hn = malloc(n_hn * sizeof *hn);
    CK(cudaGraphGetNodes(hg, hn, &n_hn));
    for (int i = 0; i < mreps; i++) {
        double t0 = now_us();
        bench_tiny_params p = {x, y, (float)i};
        void *args[1] = {&p};
        struct cudaKernelNodeParams kp = {.func = (void *)bench_tiny_fn(),
                                          .gridDim = {1, 1, 1},
                                          .blockDim = {1, 1, 1},
                                          .kernelParams = args};
        for (size_t k = 0; k < n_hn; k++) CK(cudaGraphExecKernelNodeSetParams(he, hn[k], &kp));
        CK(cudaGraphLaunch(he, hs));
        CK(cudaStreamSynchronize(hs));
        m[i] = now_us() - t0 - sh.p50;
    }
    double hand_set = median(m, mreps);
    free(hn);
    /* The cache: a miss that updates (a bound of one graph, a new literal
     * each call) and one that instantiates (no bound), each launched and
     * waited for; the hit's latency is taken off. */
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    cfg.max_graphs = 1;
    kp_graph_cache_t cu, ci;
    KK(kp_graph_cache_create(dev, &cfg, &cu));
    cfg.max_graphs = 0;
    KK(kp_graph_cache_create(dev, &cfg, &ci));
    /* and one whose call builds nodes and re-points them (build + retarget) */
    kp_graph_cache_t cr;
    cfg.max_graphs = 1;
    KK(kp_graph_cache_create(dev, &cfg, &cr));
    kp_graph_call rcall = call;
    rcall.build = tiny_build;
    rcall.retarget = tiny_retarget;
    rcall.state_bytes = (size_t)kernels * sizeof(kp_graph_node_t);
    double *mu = malloc((size_t)mreps * sizeof *mu), *mi = malloc((size_t)mreps * sizeof *mi);
    double *mr = malloc((size_t)mreps * sizeof *mr);
    for (int i = 0; i < mreps; i++) {
        lit = 1000 + i;
        double t0 = now_us();
        KK(kp_graph_cache_run(cu, &call, s));
        KK(kp_stream_sync(s));
        mu[i] = now_us() - t0 - sk.p50;
        t0 = now_us();
        KK(kp_graph_cache_run(ci, &call, s));
        KK(kp_stream_sync(s));
        mi[i] = now_us() - t0 - sk.p50;
        t0 = now_us();
        KK(kp_graph_cache_run(cr, &rcall, s));
        KK(kp_stream_sync(s));
        mr[i] = now_us() - t0 - sk.p50;
    }
    double miss_upd = median(mu, mreps), miss_inst = median(mi, mreps);
    double miss_ret = median(mr, mreps);
    kp_graph_stats su, si, sr;
    KK(kp_graph_cache_stats(cu, &su));
    KK(kp_graph_cache_stats(ci, &si));
    KK(kp_graph_cache_stats(cr, &sr));
    printf("graph of %d kernel%s:\n", kernels, kernels == 1 ? "" : "s");
    printf("  hit, launch + wait  p50 %7.2f us  p99 %7.2f us | hand cudaGraphLaunch p50 %7.2f us  "
           "p99 %7.2f us | ratio %.3f\n",
           sk.p50, sk.p99, sh.p50, sh.p99, sk.p50 / sh.p50);
    printf("  hit, host enqueue   %7.2f us per call | hand %7.2f us | cache's own cost %.2f us\n",
           enq_k, enq_h, enq_k - enq_h);
    printf(
        "  miss by hand (launched, less a hit): capture + instantiate %8.1f us, capture + update "
        "%8.1f us\n",
        hand_inst, hand_upd);
    printf("  cache miss: updating %8.1f us (%llu updates), instantiating %8.1f us (%llu); "
           "capture+instantiate by hand / cache update-miss = %.2fx\n",
           miss_upd, (unsigned long long)su.updates, miss_inst,
           (unsigned long long)si.instantiations, hand_inst / miss_upd);
    printf("  cache miss by retarget (nodes re-pointed, no new graph) %8.1f us (%llu graphs "
           "made) | by hand: set params %8.1f us | capture+instantiate by hand / retarget-miss = "
           "%.2fx, capture+update by hand / retarget-miss = %.2fx\n",
           miss_ret, (unsigned long long)sr.captures, hand_set, hand_inst / miss_ret,
           hand_upd / miss_ret);
    json_t *j = json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "kernels",
                          kernels, "cache_miss_retarget_us", miss_ret, "hand_set_params_us", hand_set,
                          "hit_p50_us", sk.p50, "hit_p99_us", sk.p99, "hand_launch_p50_us", sh.p50,
                          "hand_launch_p99_us", sh.p99, "hit_enqueue_us", enq_k, "hand_enqueue_us",
                          enq_h, "hand_capture_instantiate_us", hand_inst, "hand_capture_update_us",
                          hand_upd, "cache_miss_update_us", miss_upd, "cache_miss_instantiate_us",
                          miss_inst, "hit_vs_hand", sk.p50 / sh.p50);
    json_array_append_new(json_object_get(g_json, "cache"), j);
    free(lk);
    free(lh);
    free(m);
    free(mu);
    free(mi);
    free(mr);
    CK(cudaGraphExecDestroy(he));
    CK(cudaGraphDestroy(hg));
    kp_graph_cache_destroy(c);
    kp_graph_cache_destroy(cu);
    kp_graph_cache_destroy(ci);
    kp_graph_cache_destroy(cr);
    CK(cudaFree(x));
    CK(cudaFree(y));
    kp_stream_destroy(s);
}

/* --- pipelines ------------------------------------------------------------------------ */
static const char *sample_json(char *buf, size_t len, int64_t n, bool dynamic) {
    char size[64];
    snprintf(size, sizeof size, dynamic ? "{\"max\": %lld}" : "%lld", (long long)n);
    snprintf(buf, len,
             "{\"kpipe_spec\": 1, \"name\": \"sample\", \"graph_cache\": {\"max_graphs\": 0},"
             "\"modules\": [{\"type\": \"engine\", \"id\": \"a\", \"params\": {\"size\": %s}},"
             "{\"type\": \"relu\", \"id\": \"b\", \"params\": {\"size\": %s}}],"
             "\"connections\": [\"a.result0 -> b.input\"],"
             "\"inputs\": {\"input0\": \"a.arg0\", \"input1\": \"a.arg1\"},"
             "\"outputs\": {\"output\": \"b.output\"}}",
             size, size);
    return buf;
}

static const char *chain_json(char *buf, size_t len, int64_t max) {
    size_t u = (size_t)snprintf(buf, len,
                                "{\"kpipe_spec\": 1, \"name\": \"chain8\", \"graph_cache\": "
                                "{\"max_graphs\": 0}, \"fuse\": false, \"modules\": [");
    /* unfused: eight kernel nodes, the graph cache's work as before
     * fusion; bench_fusion measures the fused chains */
    for (int i = 0; i < 8; i++)
        u += (size_t)snprintf(buf + u, len - u,
                              "%s{\"type\": \"relu\", \"id\": \"r%d\", \"params\": {\"size\": "
                              "{\"max\": %lld}}}",
                              i ? "," : "", i, (long long)max);
    u += (size_t)snprintf(buf + u, len - u, "], \"connections\": [");
    for (int i = 0; i < 7; i++)
        u += (size_t)snprintf(buf + u, len - u, "%s\"r%d.output -> r%d.input\"", i ? "," : "", i,
                              i + 1);
    snprintf(buf + u, len - u,
             "], \"inputs\": {\"input0\": \"r0.input\"}, \"outputs\": {\"output\": "
             "\"r7.output\"}}");
    return buf;
}

typedef struct pl {
    kp_pipeline_t p;
    kp_stream_t s;
    size_t n_in;
    kp_port_info in[2], out;
    bool graph, ready;
} pl;

static void pl_open(pl *q, kp_device_t dev, const char *json, int mode, int binding) {
    memset(q, 0, sizeof *q);
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = mode;
    o.binding = binding;
    KK(kp_stream_create(dev, &q->s));
    KK(kp_pipeline_create_from_json_opts(dev, json, &o, &q->p));
    KK(kp_pipeline_setup(q->p));
    kp_pipeline_report r;
    KK(kp_pipeline_report_get(q->p, &r));
    q->n_in = r.n_inputs;
    q->graph = kp_pipeline_mode(q->p) == KP_EXEC_GRAPH;
    for (size_t i = 0; i < q->n_in; i++) KK(kp_pipeline_input_info(q->p, i, &q->in[i]));
    q->out.name = "output";
}

/* One tick on inputs `x` (and `y`) of n elements. */
static void pl_tick(pl *q, float *x, float *y, int64_t n, bool wait) {
    q->in[0].data = x;
    if (q->n_in > 1) q->in[1].data = y;
    for (size_t i = 0; i < q->n_in; i++) KK(kp_desc_init(&q->in[i].desc, KP_F32, 1, &n, NULL));
    KK(kp_pipeline_configure_io(q->p, q->in, q->n_in, &q->out, 1, q->s));
    if (!q->ready) {
        KK(kp_pipeline_warmup(q->p, q->s));
        if (q->graph) KK(kp_pipeline_build_graph(q->p));
        q->ready = true;
    }
    KK(q->graph ? kp_pipeline_execute_graph(q->p, q->s) : kp_pipeline_execute_stream(q->p, q->s));
    if (wait) KK(kp_stream_sync(q->s));
}

static void pl_close(pl *q) {
    kp_pipeline_destroy(q->p);
    kp_stream_destroy(q->s);
}

/* Elements of the output that differ from ReLU(a (+ b)) (host values). */
static size_t wrong(const float *dev_out, const float *a, const float *b, int64_t n) {
    float *h = malloc((size_t)n * sizeof *h);
    size_t bad = 0;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, dev_out, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) bad += h[i] != fmaxf(a[i] + (b ? b[i] : 0.0f), 0.0f);
    free(h);
    return bad;
}

static float *rand_host(int64_t n, uint64_t seed) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v[i] = (float)((int64_t)(seed % 2001) - 1000);
    }
    return v;
}

static float *dev_copy(const float *h, int64_t n) {
    float *d;
    CK(cudaMalloc((void **)&d, (size_t)n * sizeof *d));
    CK(cudaMemcpy(d, h, (size_t)n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

/* --- 2. traces ------------------------------------------------------------------------- */
static void trace(kp_device_t dev, const char *name, const char *json, int n_in, int64_t max,
                  char kind, const int64_t *sizes, int n_sizes, int ticks) {
    pl q;
    pl_open(&q, dev, json, KP_EXEC_FROM_SPEC, KP_INPUTS_FROM_SPEC);
    float *ha = rand_host(max, 1), *hb = rand_host(max, 2);
    float *a = dev_copy(ha, max), *b = dev_copy(hb, max);
    double *lat = malloc((size_t)ticks * sizeof *lat), miss_us = 0;
    uint64_t misses = 0, seed = 99;
    int64_t n = 0;
    for (int t = 0; t < ticks; t++) {
        switch (kind) {
        case 'A': n = sizes[0]; break;
        case 'B': n = sizes[t % n_sizes]; break;
        case 'C': n = sizes[(int64_t)t * n_sizes / ticks]; break;
        default:
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            n = sizes[seed % (uint64_t)n_sizes];
        }
        kp_graph_stats before;
        KK(kp_graph_cache_stats(kp_pipeline_graph_cache(q.p), &before));
        double t0 = now_us();
        pl_tick(&q, a, n_in > 1 ? b : NULL, n, true);
        lat[t] = now_us() - t0;
        kp_graph_stats after;
        KK(kp_graph_cache_stats(kp_pipeline_graph_cache(q.p), &after));
        if (after.captures > before.captures) {
            misses++;
            miss_us += lat[t];
        }
    }
    size_t bad = wrong(q.out.data, ha, n_in > 1 ? hb : NULL, n);
    kp_graph_stats st;
    KK(kp_graph_cache_stats(kp_pipeline_graph_cache(q.p), &st));
    /* hits' p50 from the ticks that did not capture */
    kpt_stats all = kpt_stats_of(lat, (size_t)ticks);
    double per_miss = misses ? miss_us / (double)misses - all.p50 : 0;
    printf("  %-8s %c %6d ticks  p50 %8.2f us  p99 %8.2f us  misses %5llu  per miss %8.1f us  "
           "graphs %4zu  bytes %9zu  wrong %zu\n",
           name, kind, ticks, all.p50, all.p99, (unsigned long long)misses, per_miss, st.graphs,
           st.bytes, bad);
    json_array_append_new(json_object_get(g_json, "traces"),
                          json_pack("{s:s,s:s#,s:i,s:f,s:f,s:I,s:f,s:I,s:I,s:I}", "pipeline", name,
                                    "trace", &kind, (int)1, "ticks", ticks, "p50_us", all.p50,
                                    "p99_us", all.p99, "misses", (json_int_t)misses, "per_miss_us",
                                    per_miss, "graphs", (json_int_t)st.graphs, "bytes",
                                    (json_int_t)st.bytes, "wrong", (json_int_t)bad));
    free(lat);
    free(ha);
    free(hb);
    CK(cudaFree(a));
    CK(cudaFree(b));
    pl_close(&q);
}

static void traces(kp_device_t dev) {
    const int64_t max = 65536;
    int64_t eight[8] = {4096, 8192, 12288, 16384, 24576, 32768, 49152, 65536}, grow[256], rnd[64];
    for (int i = 0; i < 256; i++) grow[i] = 256 * (i + 1);
    uint64_t s = 7;
    for (int i = 0; i < 64; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        rnd[i] = 1 + (int64_t)(s % (uint64_t)max);
    }
    char json[4096];
    int ta = g_quick ? 1000 : 10000, tb = g_quick ? 400 : 4000;
    printf("traces (graph mode, copy binding; A 16384 x %d, B 8 sizes round-robin, C 256 growing "
           "sizes, D 64 random sizes):\n",
           ta);
    for (int pipe = 0; pipe < 2; pipe++) {
        const char *name = pipe ? "chain8" : "sample";
        int n_in = pipe ? 1 : 2;
        if (pipe)
            chain_json(json, sizeof json, max);
        else
            sample_json(json, sizeof json, max, true);
        int64_t a16[1] = {16384};
        trace(dev, name, json, n_in, max, 'A', a16, 1, ta);
        trace(dev, name, json, n_in, max, 'B', eight, 8, tb);
        trace(dev, name, json, n_in, max, 'C', grow, 256, 2048);
        trace(dev, name, json, n_in, max, 'D', rnd, 64, tb);
    }
}

/* --- 3. rotating inputs ---------------------------------------------------------------- */
typedef struct floor_graphs {
    cudaGraphExec_t ge[3], two[3];
    cudaStream_t s;
} floor_graphs;

/* kpipe's zero-copy work by hand: cublasSgeam (the engine's view) into a
 * buffer, then a ReLU kernel, captured per input set and launched. */
static void hand_two_kernels(floor_graphs *f, cublasHandle_t h, float **a, float **b, int sets,
                             float *sum, float *out, int64_t n) {
    int rows, cols;
    const float one = 1.0f;
    hand_shape(n, &rows, &cols);
    unsigned grid = (unsigned)((n + 1023) / 1024);
    if (grid > 132 * 16) grid = 132 * 16;
    for (int k = 0; k < sets; k++) {
        cudaGraph_t g;
        bench_relu_params rp = {sum, out, n};
        void *args[1] = {&rp};
        CK(cudaStreamBeginCapture(f->s, cudaStreamCaptureModeThreadLocal));
        if (cublasSgeam(h, CUBLAS_OP_N, CUBLAS_OP_N, rows, cols, &one, a[k], rows, &one, b[k], rows,
                        sum, rows) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasSgeam failed\n");
            exit(1);
        }
        CK(cudaLaunchKernel(bench_relu_fn(), (dim3){grid, 1, 1}, (dim3){256, 1, 1}, args, 0, f->s));
        CK(cudaStreamEndCapture(f->s, &g));
        CK(cudaGraphInstantiate(&f->two[k], g, 0));
        CK(cudaGraphDestroy(g));
    }
}

static void rotating(kp_device_t dev, int64_t n, int sets) {
    float *ha = rand_host(n, 3), *hb = rand_host(n, 4);
    float *a[3], *b[3];
    for (int k = 0; k < sets; k++) {
        a[k] = dev_copy(ha, n);
        b[k] = dev_copy(hb, n);
    }
    char json[2048];
    sample_json(json, sizeof json, n, false);
    pl q[3];
    enum { NV = 5 };
    const char *names[NV] = {"kpipe rebind", "kpipe copy", "kpipe stream", "hand 2-kernel graph",
                             "floor (fused graph)"};
    pl_open(&q[0], dev, json, KP_EXEC_GRAPH, KP_INPUTS_REBIND);
    pl_open(&q[1], dev, json, KP_EXEC_GRAPH, KP_INPUTS_COPY);
    pl_open(&q[2], dev, json, KP_EXEC_STREAM, KP_INPUTS_FROM_SPEC);
    /* the floor: ReLU(a + b) in one kernel on the inputs in place, one graph per set */
    floor_graphs f;
    float *fout;
    CK(cudaMalloc((void **)&fout, (size_t)n * sizeof *fout));
    CK(cudaStreamCreateWithFlags(&f.s, cudaStreamNonBlocking));
    for (int k = 0; k < sets; k++) {
        cudaGraph_t g;
        bench_fused_params p = {a[k], b[k], fout, n};
        void *args[1] = {&p};
        unsigned grid = (unsigned)((n / 4 + 255) / 256);
        if (grid > 132 * 16) grid = 132 * 16;
        if (grid == 0) grid = 1;
        CK(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal));
        CK(cudaLaunchKernel(bench_fused_fn(), (dim3){grid, 1, 1}, (dim3){256, 1, 1}, args, 0, f.s));
        CK(cudaStreamEndCapture(f.s, &g));
        CK(cudaGraphInstantiate(&f.ge[k], g, 0));
        CK(cudaGraphDestroy(g));
    }
    cublasHandle_t h;
    void *ws;
    float *sum, *hout;
    CK(cudaMalloc(&ws, 4 << 20));
    CK(cudaMalloc((void **)&sum, (size_t)n * sizeof *sum));
    CK(cudaMalloc((void **)&hout, (size_t)n * sizeof *hout));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(h, f.s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, ws, 4 << 20) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS setup failed\n");
        exit(1);
    }
    hand_two_kernels(&f, h, a, b, sets, sum, hout, n);
    int ticks = n > 1000000 ? (g_quick ? 200 : 2000) : (g_quick ? 2000 : 20000);
    int rounds = 10, per = ticks / rounds;
    double *lat[NV];
    for (int v = 0; v < NV; v++) lat[v] = malloc((size_t)ticks * sizeof(double));
    for (int t = 0; t < ticks / 10; t++) /* warm-up */
        for (int v = 0; v < 3; v++) pl_tick(&q[v], a[t % sets], b[t % sets], n, true);
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < NV; v++)
            for (int t = 0; t < per; t++) {
                int k = t % sets;
                double t0 = now_us();
                if (v < 3) {
                    pl_tick(&q[v], a[k], b[k], n, true);
                } else {
                    CK(cudaGraphLaunch(v == 3 ? f.two[k] : f.ge[k], f.s));
                    CK(cudaStreamSynchronize(f.s));
                }
                lat[v][r * per + t] = now_us() - t0;
            }
    /* The host's time per rebind tick by phase, ticks in flight (batches
     * of 16, then one wait): binding this tick's inputs (configure_io),
     * the tick itself up to the graph launch (execute_graph), and the
     * hand two-kernel graph's launch alone. */
    double ph_cfg = 0, ph_exec = 0, ph_hand = 0;
    int ph_n = 0;
    for (int r = 0; r < rounds; r++) {
        for (int bt = 0; bt < per / 16; bt++, ph_n += 16) {
            for (int t = 0; t < 16; t++) {
                int k = t % sets;
                double t0 = now_us();
                q[0].in[0].data = a[k];
                q[0].in[1].data = b[k];
                for (size_t i = 0; i < q[0].n_in; i++)
                    KK(kp_desc_init(&q[0].in[i].desc, KP_F32, 1, &n, NULL));
                KK(kp_pipeline_configure_io(q[0].p, q[0].in, q[0].n_in, &q[0].out, 1, q[0].s));
                double t1 = now_us();
                KK(kp_pipeline_execute_graph(q[0].p, q[0].s));
                double t2 = now_us();
                ph_cfg += t1 - t0;
                ph_exec += t2 - t1;
            }
            KK(kp_stream_sync(q[0].s));
            double t0 = now_us();
            for (int t = 0; t < 16; t++) CK(cudaGraphLaunch(f.two[t % sets], f.s));
            ph_hand += now_us() - t0;
            CK(cudaStreamSynchronize(f.s));
        }
    }
    printf("  host ns per rebind tick, in flight: configure_io %.0f, execute_graph %.0f (of which "
           "the launch by hand: %.0f), kpipe's own %.0f\n",
           ph_cfg * 1e3 / ph_n, ph_exec * 1e3 / ph_n, ph_hand * 1e3 / ph_n,
           (ph_cfg + ph_exec - ph_hand) * 1e3 / ph_n);
    /* The device's time per tick: 512 ticks launched back to back between
     * two events, so that the GPU, not the host, sets the pace (the host
     * enqueues a tick in a few us, faster than the GPU runs it at 16 K).
     * What a tick with its wait costs beyond this is the host's launch and
     * the wake-up after the work. */
    double dev_us[5] = {0};
    {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        const int burst = 512;
        for (int v = 0; v < NV; v++) {
            if (v == 1 || v == 2) continue; /* copy and stream: not what the split is for */
            cudaStream_t cs = v == 0 ? (cudaStream_t)kp_stream_native(q[0].s) : f.s;
            for (int rep = 0; rep < 2; rep++) { /* the first warms up */
                CK(cudaEventRecord(e0, cs));
                for (int t = 0; t < burst; t++) {
                    if (v == 0)
                        pl_tick(&q[0], a[t % sets], b[t % sets], n, false);
                    else
                        CK(cudaGraphLaunch(v == 3 ? f.two[t % sets] : f.ge[t % sets], f.s));
                }
                CK(cudaEventRecord(e1, cs));
                CK(cudaEventSynchronize(e1));
            }
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            dev_us[v] = ms * 1e3 / burst;
        }
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
    }
    size_t bad = 0;
    for (int v = 0; v < 3; v++) bad += wrong(q[v].out.data, ha, hb, n);
    bad += wrong(fout, ha, hb, n) + wrong(hout, ha, hb, n);
    kpt_stats st[NV];
    for (int v = 0; v < NV; v++) st[v] = kpt_stats_of(lat[v], (size_t)ticks);
    printf("N = %lld, %d rotating input sets (%d ticks; %zu wrong output elements)\n", (long long)n,
           sets, ticks, bad);
    for (int v = 0; v < NV; v++) {
        printf("  %-20s p50 %9.2f us  p99 %9.2f us  vs floor %6.3fx  vs stream %6.3fx\n", names[v],
               st[v].p50, st[v].p99, st[v].p50 / st[4].p50, st[v].p50 / st[2].p50);
        json_array_append_new(json_object_get(g_json, "rotating"),
                              json_pack("{s:s,s:I,s:i,s:f,s:f,s:f,s:f}", "variant", names[v], "n",
                                        (json_int_t)n, "sets", sets, "p50_us", st[v].p50, "p99_us",
                                        st[v].p99, "vs_floor", st[v].p50 / st[4].p50, "vs_stream",
                                        st[v].p50 / st[2].p50));
    }
    printf("  device us per tick, back to back: kpipe rebind %.2f, hand 2-kernel graph %.2f, "
           "floor %.2f; with the wait, beyond the device: %.2f, %.2f, %.2f\n",
           dev_us[0], dev_us[3], dev_us[4], st[0].p50 - dev_us[0], st[3].p50 - dev_us[3],
           st[4].p50 - dev_us[4]);
    json_array_append_new(json_object_get(g_json, "rotating"),
                          json_pack("{s:s,s:I,s:i,s:f,s:f,s:f,s:f,s:f}", "variant", "split", "n",
                                    (json_int_t)n, "sets", sets, "device_rebind_us", dev_us[0],
                                    "device_hand_us", dev_us[3], "device_floor_us", dev_us[4],
                                    "host_configure_us", ph_cfg / ph_n, "host_execute_us",
                                    ph_exec / ph_n));
    kp_graph_stats gs;
    KK(kp_graph_cache_stats(kp_pipeline_graph_cache(q[0].p), &gs));
    printf("  rebind's cache: %zu graphs, %llu hits, %llu misses\n", gs.graphs,
           (unsigned long long)gs.hits, (unsigned long long)gs.misses);
    for (int v = 0; v < NV; v++) free(lat[v]);
    cublasDestroy(h);
    CK(cudaFree(ws));
    CK(cudaFree(sum));
    CK(cudaFree(hout));
    for (int v = 0; v < 3; v++) pl_close(&q[v]);
    for (int k = 0; k < sets; k++) {
        CK(cudaGraphExecDestroy(f.ge[k]));
        CK(cudaGraphExecDestroy(f.two[k]));
        CK(cudaFree(a[k]));
        CK(cudaFree(b[k]));
    }
    CK(cudaFree(fout));
    CK(cudaStreamDestroy(f.s));
    free(ha);
    free(hb);
}

int main(int argc, char **argv) {
    const char *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) g_quick = true;
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    }
    g_tiny_dk.fn = bench_tiny_fn();
    kp_device_t dev;
    kp_status st = kp_device_open("cuda", &dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: bench_cache needs a GPU: %s\n", kp_last_error());
        return 77;
    }
    KK(st);
    char desc[256];
    KK(kp_device_describe(dev, desc, sizeof desc));
    g_json = json_pack("{s:s,s:[],s:[],s:[]}", "device", desc, "cache", "traces", "rotating");
    printf("bench_cache on %s\n", desc);
    cache_alone(dev, 1);
    cache_alone(dev, 100);
    traces(dev);
    for (int sets = 2; sets <= 3; sets++) {
        rotating(dev, 16384, sets);
        rotating(dev, (int64_t)1 << 24, sets);
    }
    if (json_path && json_dump_file(g_json, json_path, JSON_INDENT(2)) != 0)
        fprintf(stderr, "cannot write %s\n", json_path);
    json_decref(g_json);
    kp_device_close(dev);
    return 0;
}
