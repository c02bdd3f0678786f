/* Fusion of elementwise modules on one GPU, with its baselines measured in
 * the same process:
 *   add_relu  ReLU(a + b) as the modules add -> relu
 *   chain8    add(b) -> scale -> clamp -> mul(c) -> relu -> scale -> add(b) -> clamp
 * at 16 K and 16 M elements: fused and unfused ("fuse": false), graph mode
 * rebinding (zero-copy) and stream mode, against the floor -- one kernel
 * written by hand, reading the inputs in place (bench/fused.cu) -- launched
 * as a graph. Every variant's output is checked against the floor's.
 * Latency is one tick with a host wait, on the host clock; the median of
 * the ticks. Also the NVRTC compile time of each group and whether a cache
 * served it (run twice with KP_KERNEL_CACHE_DIR set: the second run loads
 * from the directory).
 *   bench_fusion [TICKS_16K]   (16 M runs a tenth as many) */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "bench-util.h"
#include "fused.h"
#include "tool-impl.h"

/* The median of the ticks (sorts them). */
static double median(double *v, int n) { return kpt_stats_of(v, (size_t)n).p50; }

static const char *spec_add_relu(char *buf, size_t len, int64_t n, bool fuse) {
    snprintf(
        buf, len,
        "{\"kpipe_spec\": 1, \"name\": \"add_relu\", \"fuse\": %s, \"modules\": ["
        "{\"type\": \"add\", \"id\": \"sum\", \"params\": {\"size\": %lld}},"
        "{\"type\": \"relu\", \"id\": \"act\", \"params\": {\"size\": %lld}}],"
        "\"connections\": [\"sum.output -> act.input\"],"
        "\"inputs\": {\"x\": \"sum.a\", \"b\": \"sum.b\"}, \"outputs\": {\"y\": \"act.output\"}}",
        fuse ? "true" : "false", (long long)n, (long long)n);
    return buf;
}

static const char *spec_chain8(char *buf, size_t len, int64_t n, bool fuse) {
    snprintf(
        buf, len,
        "{\"kpipe_spec\": 1, \"name\": \"chain8\", \"fuse\": %s, \"modules\": ["
        "{\"type\": \"add\", \"id\": \"m0\", \"params\": {\"size\": %lld}},"
        "{\"type\": \"scale\", \"id\": \"m1\", \"params\": {\"size\": %lld, \"factor\": 0.75}},"
        "{\"type\": \"clamp\", \"id\": \"m2\", \"params\": {\"size\": %lld, \"lo\": -2, \"hi\": "
        "3}},"
        "{\"type\": \"mul\", \"id\": \"m3\", \"params\": {\"size\": %lld}},"
        "{\"type\": \"relu\", \"id\": \"m4\", \"params\": {\"size\": %lld}},"
        "{\"type\": \"scale\", \"id\": \"m5\", \"params\": {\"size\": %lld, \"factor\": 0.75}},"
        "{\"type\": \"add\", \"id\": \"m6\", \"params\": {\"size\": %lld}},"
        "{\"type\": \"clamp\", \"id\": \"m7\", \"params\": {\"size\": %lld, \"lo\": -2, \"hi\": "
        "3}}],"
        "\"connections\": [\"m0.output -> m1.input\", \"m1.output -> m2.input\","
        "\"m2.output -> m3.a\", \"m3.output -> m4.input\", \"m4.output -> m5.input\","
        "\"m5.output -> m6.a\", \"m6.output -> m7.input\"],"
        "\"inputs\": {\"x\": \"m0.a\", \"b\": \"m0.b\", \"c\": \"m3.b\", \"b2\": \"m6.b\"},"
        "\"outputs\": {\"y\": \"m7.output\"}}",
        fuse ? "true" : "false", (long long)n, (long long)n, (long long)n, (long long)n,
        (long long)n, (long long)n, (long long)n, (long long)n);
    return buf;
}

typedef struct bufs {
    float *x, *b, *c, *ref, *host_ref, *host_got;
    int64_t n;
} bufs;

/* The floor: one hand-fused kernel in a graph, inputs in place. */
static double floor_us(bool chain, const bufs *d, int ticks, cudaStream_t s) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    int blocks = (int)((d->n + 1023) / 1024);
    bench_fused_params fp = {d->x, d->b, d->ref, d->n};
    bench_chain8_params cp = {.x = d->x, .b = d->b, .c = d->c, .out = d->ref, .n = d->n};
    void *args[1] = {chain ? (void *)&cp : (void *)&fp};
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    dim3 grid = {(unsigned)blocks, 1, 1}, block = {256, 1, 1};
    CK(cudaLaunchKernel(chain ? bench_chain8_fn() : bench_fused_fn(), grid, block, args, 0, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double *lat = malloc(sizeof(double) * (size_t)ticks);
    for (int t = -ticks / 10; t < ticks; t++) {
        double t0 = kpt_now_us();
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        if (t >= 0) lat[t] = kpt_now_us() - t0;
    }
    double m = median(lat, ticks);
    free(lat);
    CK(cudaMemcpy(d->host_ref, d->ref, (size_t)d->n * 4, cudaMemcpyDeviceToHost));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return m;
}

/* One kpipe variant: median tick, output checked against the floor's. */
static double kpipe_us(kp_device_t dev, const char *json, kp_exec_mode mode, const bufs *d,
                       int ticks, kp_stream_t s, double *compile_ms, int *cached) {
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = mode;
    o.binding = KP_INPUTS_REBIND;
    kp_pipeline_t p;
    KK(kp_pipeline_create_from_json_opts(dev, json, &o, &p));
    KK(kp_pipeline_setup(p));
    kp_fusion_report f;
    *compile_ms = 0;
    *cached = -1;
    if (kp_pipeline_fusion_report(p, 0, &f) == KP_OK) {
        *compile_ms = f.compile_ms;
        *cached = f.cached;
    }
    kp_pipeline_report r;
    KK(kp_pipeline_report_get(p, &r));
    kp_port_info in[4], out = {"y", NULL, {0}};
    float *src[4] = {d->x, d->b, d->c, d->b};
    for (size_t k = 0; k < r.n_inputs; k++) {
        KK(kp_pipeline_input_info(p, k, &in[k]));
        in[k].data = src[k];
    }
    double *lat = malloc(sizeof(double) * (size_t)ticks);
    for (int t = -ticks / 10 - 1; t < ticks; t++) {
        double t0 = kpt_now_us();
        KK(kp_pipeline_configure_io(p, in, r.n_inputs, &out, 1, s));
        if (t == -ticks / 10 - 1) {
            KK(kp_pipeline_warmup(p, s));
            if (mode == KP_EXEC_GRAPH) KK(kp_pipeline_build_graph(p));
        }
        KK(mode == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, s)
                                 : kp_pipeline_execute_stream(p, s));
        KK(kp_stream_sync(s));
        if (t >= 0) lat[t] = kpt_now_us() - t0;
    }
    double m = median(lat, ticks);
    free(lat);
    KK(kp_memcpy_dtoh(dev, d->host_got, out.data, (size_t)d->n * 4));
    if (memcmp(d->host_got, d->host_ref, (size_t)d->n * 4) != 0) {
        fprintf(stderr, "%s: the output differs from the hand-fused kernel's\n", json);
        exit(1);
    }
    kp_pipeline_destroy(p);
    return m;
}

int main(int argc, char **argv) {
    int ticks = argc > 1 ? atoi(argv[1]) : 20000;
    kp_device_t dev;
    kp_stream_t s;
    KK(kp_device_open("cuda", &dev));
    KK(kp_stream_create(dev, &s));
    cudaStream_t cs = kp_stream_native(s);
    static const int64_t sizes[] = {16384, 16777216};
    printf("| work | elements | variant | µs per tick (p50) | × floor |\n|---|---|---|---|---|\n");
    double compile_total = 0;
    int groups = 0, from_disk = 0, from_memory = 0;
    for (int chain = 0; chain < 2; chain++)
        for (int si = 0; si < 2; si++) {
            bufs d = {.n = sizes[si]};
            size_t bytes = (size_t)d.n * 4;
            int tk = si ? ticks / 10 : ticks;
            float *h = malloc(bytes);
            d.host_ref = malloc(bytes);
            d.host_got = malloc(bytes);
            CK(cudaMalloc((void **)&d.x, bytes));
            CK(cudaMalloc((void **)&d.b, bytes));
            CK(cudaMalloc((void **)&d.c, bytes));
            CK(cudaMalloc((void **)&d.ref, bytes));
            float **dst[3] = {&d.x, &d.b, &d.c};
            for (int k = 0; k < 3; k++) {
                for (int64_t i = 0; i < d.n; i++)
                    h[i] = (float)((int)((i * (7 + 2 * k) + k) % 2001) - 1000) / 256.0f;
                CK(cudaMemcpy(*dst[k], h, bytes, cudaMemcpyHostToDevice));
            }
            const char *work = chain ? "chain8" : "add_relu";
            double fl = floor_us(chain, &d, tk, cs);
            printf("| %s | %lld | floor: one hand-fused kernel, graph | %.1f | 1.00 |\n", work,
                   (long long)d.n, fl);
            char json[4096];
            for (int fuse = 1; fuse >= 0; fuse--)
                for (int m = 0; m < 2; m++) {
                    kp_exec_mode mode = m ? KP_EXEC_STREAM : KP_EXEC_GRAPH;
                    (chain ? spec_chain8 : spec_add_relu)(json, sizeof json, d.n, fuse);
                    double cms;
                    int cached;
                    double us = kpipe_us(dev, json, mode, &d, tk, s, &cms, &cached);
                    if (fuse) {
                        groups++;
                        compile_total += cms;
                        from_disk += cached == 2;
                        from_memory += cached == 1;
                    }
                    printf("| %s | %lld | kpipe %s, %s | %.1f | %.2f |\n", work, (long long)d.n,
                           fuse ? "fused" : "unfused", m ? "stream" : "graph rebind", us, us / fl);
                }
            free(h);
            free(d.host_ref);
            free(d.host_got);
            CK(cudaFree(d.x));
            CK(cudaFree(d.b));
            CK(cudaFree(d.c));
            CK(cudaFree(d.ref));
        }
    printf("\nNVRTC: %d fused pipelines set up; compile time %.1f ms in all; %d loaded from the "
           "cache directory, %d from memory\n",
           groups, compile_total, from_disk, from_memory);
    kp_stream_destroy(s);
    kp_device_close(dev);
    return 0;
}
