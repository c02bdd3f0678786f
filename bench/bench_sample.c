/* ReLU(input0 + input1), float32, at N = 16384 and 16,777,216: kpipe in graph
 * and stream mode beside a hand-written CUDA + cuBLAS version of the same work
 * (the floor that framework overhead is measured against), measured in one
 * process on one GPU. Also: a device-to-device copy as the bandwidth ceiling,
 * and each kpipe module's achieved bandwidth at the large N.
 *   bench_sample SOURCE_DIR [--json FILE] [--quick] */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hand.h"
#include "bench-util.h"
#include "tool-impl.h"

#define CB(x)                                                           \
    do {                                                                \
        cublasStatus_t s_ = (x);                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                              \
            fprintf(stderr, "%s: %s\n", #x, cublasGetStatusString(s_)); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

/* --- the hand-written version ------------------------------------------------------ */
typedef struct hand {
    int64_t n;
    int rows, cols;
    cudaStream_t s;
    float *a, *b, *ia, *ib, *sum, *out;
    hand_relu_static *st;
    hand_relu_dynamic *dyn, *dyn_host;
    hand_relu_params rp;
    unsigned grid;
    cublasHandle_t h;
    void *ws;
    cudaGraphExec_t ge;
} hand;

static void hand_geam(hand *H, const float *a, const float *b) {
    const float one = 1.0f;
    CB(cublasSgeam(H->h, CUBLAS_OP_N, CUBLAS_OP_N, H->rows, H->cols, &one, a, H->rows, &one, b,
                   H->rows, H->sum, H->rows));
}

static void hand_relu(hand *H) {
    void *args[1] = {&H->rp};
    CK(cudaLaunchKernel(hand_relu_fn(), (dim3){H->grid, 1, 1}, (dim3){256, 1, 1}, args, 0, H->s));
}

static void hand_setup(hand *H, int64_t n, const float *a, const float *b) {
    size_t bytes = (size_t)n * sizeof(float);
    memset(H, 0, sizeof *H);
    H->n = n;
    hand_shape(n, &H->rows, &H->cols);
    H->grid = (unsigned)((n + 1023) / 1024);
    CK(cudaStreamCreateWithFlags(&H->s, cudaStreamNonBlocking));
    float **bufs[] = {&H->a, &H->b, &H->ia, &H->ib, &H->sum, &H->out};
    for (int i = 0; i < 6; i++) CK(cudaMalloc((void **)bufs[i], bytes));
    CK(cudaMemcpy(H->a, a, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(H->b, b, bytes, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&H->st, sizeof *H->st));
    CK(cudaMalloc((void **)&H->dyn, sizeof *H->dyn));
    CK(cudaMallocHost((void **)&H->dyn_host, sizeof *H->dyn_host));
    hand_relu_static st = {H->out, n};
    CK(cudaMemcpy(H->st, &st, sizeof st, cudaMemcpyHostToDevice));
    H->dyn_host->input = H->sum;
    CK(cudaMemcpy(H->dyn, H->dyn_host, sizeof *H->dyn, cudaMemcpyHostToDevice));
    /* cudaMemcpy from pageable memory may return before the data lands, and
     * the non-blocking stream below does not wait for the legacy stream. */
    CK(cudaDeviceSynchronize());
    H->rp = (hand_relu_params){H->st, H->dyn};
    CB(cublasCreate(&H->h));
    CK(cudaMalloc(&H->ws, 4 << 20));
    CB(cublasSetWorkspace(H->h, H->ws, 4 << 20));
    CB(cublasSetStream(H->h, H->s));
    /* graph: the two input copies, the captured geam as a child graph, then
     * the relu kernel node */
    cudaGraph_t child, g;
    cudaGraphNode_t copies[2], cn, kn;
    CK(cudaStreamBeginCapture(H->s, cudaStreamCaptureModeThreadLocal));
    hand_geam(H, H->ia, H->ib);
    CK(cudaStreamEndCapture(H->s, &child));
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphAddMemcpyNode1D(&copies[0], g, NULL, 0, H->ia, H->a, bytes, cudaMemcpyDefault));
    CK(cudaGraphAddMemcpyNode1D(&copies[1], g, NULL, 0, H->ib, H->b, bytes, cudaMemcpyDefault));
    CK(cudaGraphAddChildGraphNode(&cn, g, copies, 2, child));
    void *args[1] = {&H->rp};
    struct cudaKernelNodeParams kp = {.func = (void *)hand_relu_fn(),
                                      .gridDim = {H->grid, 1, 1},
                                      .blockDim = {256, 1, 1},
                                      .kernelParams = args};
    CK(cudaGraphAddKernelNode(&kn, g, &cn, 1, &kp));
    CK(cudaGraphInstantiate(&H->ge, g, 0));
    CK(cudaGraphUpload(H->ge, H->s));
    CK(cudaGraphDestroy(child));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamSynchronize(H->s));
}

/* The per-tick work kpipe's graph mode does here: launch the graph, whose
 * first nodes copy both inputs into fixed buffers. The relu's descriptor
 * never changes in this pipeline, so like kpipe (which skips an upload whose
 * bytes did not change) the baseline uploads it once, at setup. */
static void hand_tick_graph(hand *H, bool wait) {
    CK(cudaGraphLaunch(H->ge, H->s));
    if (wait) CK(cudaStreamSynchronize(H->s));
}

/* Stream mode: geam on the inputs in place, then relu. */
static void hand_tick_stream(hand *H, bool wait) {
    hand_geam(H, H->a, H->b);
    hand_relu(H);
    if (wait) CK(cudaStreamSynchronize(H->s));
}

static void hand_free(hand *H) {
    float *bufs[] = {H->a, H->b, H->ia, H->ib, H->sum, H->out};
    for (int i = 0; i < 6; i++) CK(cudaFree(bufs[i]));
    CK(cudaFree(H->st));
    CK(cudaFree(H->dyn));
    CK(cudaFreeHost(H->dyn_host));
    CK(cudaFree(H->ws));
    CK(cudaGraphExecDestroy(H->ge));
    CB(cublasDestroy(H->h));
    CK(cudaStreamDestroy(H->s));
}

/* --- measurement ----------------------------------------------------------------------- */
typedef struct variant {
    const char *name;
    void (*tick)(void *ctx, bool wait);
    void (*sync)(void *ctx);
    void *ctx;
} variant;

typedef struct result {
    char name[32];
    int64_t n;
    kpt_stats lat;    /* us per tick, waiting for each */
    double flight_us; /* us per tick with ticks in flight */
} result;

static void kp_tick(void *ctx, bool wait) { KK(kpt_runner_tick(ctx, wait)); }
static void kp_sync(void *ctx) { KK(kp_stream_sync(((kpt_runner *)ctx)->s)); }
static void hg_tick(void *ctx, bool wait) { hand_tick_graph(ctx, wait); }
static void hs_tick(void *ctx, bool wait) { hand_tick_stream(ctx, wait); }
static void h_sync(void *ctx) { CK(cudaStreamSynchronize(((hand *)ctx)->s)); }

#define ROUNDS 10

/* Measures the variants in interleaved rounds, so that clock and load drift
 * reach every variant alike: per round, each variant runs ticks/ROUNDS
 * waited ticks, then the same number in flight. */
static void measure(const variant *v, size_t nv, int64_t n, long ticks, long warmup, result *r) {
    long per = ticks / ROUNDS;
    double *lat[8], flight[8] = {0};
    for (size_t i = 0; i < nv; i++) {
        lat[i] = malloc((size_t)(per * ROUNDS) * sizeof(double));
        for (long t = 0; t < warmup; t++) v[i].tick(v[i].ctx, true);
    }
    for (int round = 0; round < ROUNDS; round++)
        for (size_t i = 0; i < nv; i++) {
            for (long t = 0; t < per; t++) {
                double t0 = kpt_now_us();
                v[i].tick(v[i].ctx, true);
                lat[i][round * per + t] = kpt_now_us() - t0;
            }
            double t0 = kpt_now_us();
            for (long t = 0; t < per; t++) v[i].tick(v[i].ctx, false);
            v[i].sync(v[i].ctx);
            flight[i] += kpt_now_us() - t0;
        }
    for (size_t i = 0; i < nv; i++) {
        snprintf(r[i].name, sizeof r[i].name, "%s", v[i].name);
        r[i].n = n;
        r[i].flight_us = flight[i] / (double)(per * ROUNDS);
        r[i].lat = kpt_stats_of(lat[i], (size_t)(per * ROUNDS));
        free(lat[i]);
    }
}

/* Device time per call of `fn` over `reps` calls, from events on `s`. */
static double device_us(kp_stream_t s, void (*fn)(void *), void *ctx, int reps) {
    kp_event_t e0, e1;
    float ms;
    KK(kp_event_create(kp_stream_device(s), &e0));
    KK(kp_event_create(kp_stream_device(s), &e1));
    fn(ctx); /* warm */
    KK(kp_event_record(e0, s));
    for (int i = 0; i < reps; i++) fn(ctx);
    KK(kp_event_record(e1, s));
    KK(kp_event_sync(e1));
    KK(kp_event_elapsed_ms(e0, e1, &ms));
    kp_event_destroy(e0);
    kp_event_destroy(e1);
    return (double)ms * 1000.0 / reps;
}

static void exec_stream(void *ctx) {
    kpt_runner *r = ctx;
    KK(kp_pipeline_execute_stream(r->p, r->s));
}

typedef struct copy_ctx {
    kp_stream_t s;
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;
static void d2d_copy(void *ctx) {
    copy_ctx *c = ctx;
    KK(kp_memcpy_async(c->s, c->dst, c->src, c->bytes));
}

/* Achieved bandwidth of each module alone and of a device-to-device copy. */
static void bandwidth(const char *src, json_t *out) {
    char path[2][1024];
    const char *names[2] = {"engine", "relu"};
    const double moved[2] = {3, 2}; /* engine reads 2 and writes 1 tensor; relu 1 and 1 */
    snprintf(path[0], sizeof path[0], "%s/bench/engine_16m.json", src);
    snprintf(path[1], sizeof path[1], "%s/bench/relu_16m.json", src);
    double copy_gbs = 0;
    for (int m = 0; m < 2; m++) {
        kpt_runner r;
        KK(kpt_runner_open(&r, "cuda", path[m], KP_EXEC_STREAM));
        KK(kpt_runner_inputs(&r, NULL, 0, 3));
        KK(kpt_runner_prepare(&r));
        size_t bytes = r.var[0][0].bytes;
        if (m == 0) {
            copy_ctx c = {r.s, r.var[1][0].dev, r.var[0][0].dev, bytes};
            copy_gbs = 2.0 * (double)bytes / device_us(r.s, d2d_copy, &c, 50) / 1e3;
            printf("device-to-device copy of %zu MiB: %.0f GB/s (read + write)\n", bytes >> 20,
                   copy_gbs);
            json_object_set_new(out, "d2d_copy_gbs", json_real(copy_gbs));
        }
        double us = device_us(r.s, exec_stream, &r, 50);
        double gbs = moved[m] * (double)bytes / us / 1e3;
        printf("module %-6s %8.1f us per run, %6.0f GB/s = %5.1f%% of copy bandwidth\n", names[m],
               us, gbs, 100.0 * gbs / copy_gbs);
        json_object_set_new(
            out, names[m],
            json_pack("{s:f,s:f,s:f}", "us", us, "gbs", gbs, "fraction_of_copy", gbs / copy_gbs));
        kpt_runner_close(&r);
    }
}

/* Counts elements of `dev_out` that differ from ReLU(a + b). */
static size_t wrong(const float *dev_out, const float *a, const float *b, int64_t n) {
    float *h = malloc((size_t)n * sizeof *h);
    size_t bad = 0;
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, dev_out, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) bad += h[i] != fmaxf(a[i] + b[i], 0.0f);
    free(h);
    return bad;
}

static void print_row(const result *r, const result *floor) {
    printf("  %-14s %9lld %9.2f %9.2f %9.2f   %7.3fx %10.2f\n", r->name, (long long)r->n,
           r->lat.p50, r->lat.p99, r->lat.max, r->lat.p50 / floor->lat.p50, r->flight_us);
}

static json_t *result_json(const result *r, const result *floor) {
    return json_pack("{s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "variant", r->name, "n", (json_int_t)r->n,
                     "min_us", r->lat.min, "p50_us", r->lat.p50, "p99_us", r->lat.p99, "max_us",
                     r->lat.max, "in_flight_us", r->flight_us, "p50_vs_floor",
                     r->lat.p50 / floor->lat.p50);
}

static void run_size(const char *src, int64_t n, long ticks, long warmup, json_t *rows) {
    char spec[1024];
    snprintf(spec, sizeof spec, n == 16384 ? "%s/examples/sample.json" : "%s/bench/sample_16m.json",
             src);
    kpt_runner kg, ks;
    hand H;
    KK(kpt_runner_open(&kg, "cuda", spec, KP_EXEC_GRAPH));
    KK(kpt_runner_open(&ks, "cuda", spec, KP_EXEC_STREAM));
    KK(kpt_runner_inputs(&kg, NULL, 0, 1));
    KK(kpt_runner_copy_inputs(&ks, &kg));
    KK(kpt_runner_prepare(&kg));
    KK(kpt_runner_prepare(&ks));
    const float *a = kg.var[0][0].host, *b = kg.var[1][0].host;
    hand_setup(&H, n, a, b);
    variant v[4] = {{"hand graph", hg_tick, h_sync, &H},
                    {"kpipe graph", kp_tick, kp_sync, &kg},
                    {"hand stream", hs_tick, h_sync, &H},
                    {"kpipe stream", kp_tick, kp_sync, &ks}};
    result r[4];
    measure(v, 4, n, ticks, warmup, r);
    size_t bad =
        wrong(kg.out[0].data, a, b, n) + wrong(ks.out[0].data, a, b, n) + wrong(H.out, a, b, n);
    printf("N = %lld (%ld ticks after %ld warm-up; %zu wrong output elements)\n", (long long)n,
           ticks, warmup, bad);
    printf("  %-14s %9s %9s %9s %9s   %8s %10s\n", "variant", "N", "p50 us", "p99 us", "max us",
           "vs floor", "flight us");
    for (int i = 0; i < 4; i++) {
        const result *floor = &r[i < 2 ? 0 : 2];
        print_row(&r[i], floor);
        json_array_append_new(rows, result_json(&r[i], floor));
    }
    printf(
        "  in flight: kpipe graph %.2f us/tick vs back-to-back hand graph %.2f: %.2fx throughput\n",
        r[1].flight_us, r[0].flight_us, r[0].flight_us / r[1].flight_us);
    hand_free(&H);
    kpt_runner_close(&kg);
    kpt_runner_close(&ks);
    if (bad) exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sample SOURCE_DIR [--json FILE] [--ticks N]\n");
        return 2;
    }
    const char *src = argv[1], *json_path = NULL;
    long ticks = 20000;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
        if (strcmp(argv[i], "--ticks") == 0) ticks = atol(argv[i + 1]);
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("bench_sample on %s: ReLU(input0 + input1), float32; latency = one tick with a host "
           "wait (us)\n",
           prop.name);
    json_t *root = json_object(), *rows = json_array(), *bw = json_object();
    run_size(src, 16384, ticks, ticks / 10, rows);
    run_size(src, 16777216, ticks / 10, ticks / 100, rows);
    bandwidth(src, bw);
    json_object_set_new(root, "device", json_string(prop.name));
    json_object_set_new(root, "results", rows);
    json_object_set_new(root, "bandwidth", bw);
    if (json_path && json_dump_file(root, json_path, JSON_INDENT(2)) != 0) {
        fprintf(stderr, "cannot write %s\n", json_path);
        return 1;
    }
    json_decref(root);
    return 0;
}
