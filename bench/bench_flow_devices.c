/* Flows over two GPUs, against what the hardware does alone.
 *
 *   bench_flow_devices handoff [MIB] [FRAMES]
 *     A source on cuda:0 and a sink on cuda:1 that do no work: the flow is
 *     only its hand-overs. Bytes/s of the peer copy hand-over and of the
 *     staged one, against cudaMemcpyPeerAsync alone, back to back on one
 *     stream (the floor: the link's own speed).
 *   bench_flow_devices replicas [N] [FRAMES]
 *     A stage running an N x N sgemm (cuBLAS) on every frame, on cuda:0
 *     alone and as replicas on cuda:0 and cuda:1; the source and the sink
 *     on cuda:0. Frames/s, and the same gemms hand-written on one GPU
 *     (back to back on one stream, no flow) as the floor.
 *   bench_flow_devices staged [N] [FRAMES]
 *     Two gemm stages in a row: both on cuda:0, then the second on cuda:1.
 *
 * Every run's frames are counted at the sink; each figure is the median
 * of three runs. */
#include <cublas_v2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-util.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double median3(double a, double b, double c) {
    double m = a > b ? a : b, n = a > b ? b : a;
    return c > m ? m : c < n ? n : c;
}

/* --- hand-over bandwidth --------------------------------------------------------- */
typedef struct src_ctx {
    uint64_t frames;
    size_t bytes;
} src_ctx;

static kp_status src_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    src_ctx *s = user;
    if (f->seq == s->frames) {
        *eos = true;
        return KP_OK;
    }
    f->bytes = s->bytes;
    return KP_OK;
}

/* Touches nothing; keeps the sink's stream busy with the hand-over only. */
static kp_status sink_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    return KP_OK;
}

static double run_flow(kp_device_t d0, kp_flow_stage *st, size_t n, size_t frame_bytes,
                       uint64_t frames) {
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = d0;
    cfg.stages = st;
    cfg.n_stages = n;
    cfg.frame_bytes = frame_bytes;
    kp_flow_t f;
    KK(kp_flow_create(&cfg, &f));
    double t0 = now_s();
    KK(kp_flow_start(f));
    KK(kp_flow_wait(f));
    double dt = now_s() - t0;
    kp_flow_snapshot h;
    KK(kp_flow_health(f, &h));
    if (h.frames_done != frames) {
        fprintf(stderr, "%llu frames done, %llu sent\n", (unsigned long long)h.frames_done,
                (unsigned long long)frames);
        exit(1);
    }
    kp_flow_destroy(f);
    return dt;
}

static void handoff(size_t mib, uint64_t frames) {
    kp_device_t d0, d1;
    KK(kp_device_open("cuda:0", &d0));
    KK(kp_device_open("cuda:1", &d1));
    bool can = false;
    KK(kp_device_peer_access(d1, d0, false, &can));
    size_t bytes = mib << 20;
    src_ctx s = {frames, bytes};
    const kp_handoff kinds[2] = {KP_HANDOFF_COPY, KP_HANDOFF_STAGED};
    double gbs[2];
    for (int k = 0; k < 2; k++) {
        kp_flow_stage st[2] = {
            {.name = "src", .fn = src_fn, .user = &s},
            {.name = "sink", .fn = sink_fn, .queue_capacity = 4, .dev = d1, .handoff = kinds[k]}};
        run_flow(d0, st, 2, bytes, frames); /* warm-up */
        double r[3];
        for (int i = 0; i < 3; i++) r[i] = run_flow(d0, st, 2, bytes, frames);
        gbs[k] = (double)bytes * (double)frames / median3(r[0], r[1], r[2]) * 1e-9;
    }
    /* the floor: cudaMemcpyPeerAsync alone, back to back */
    void *a, *b;
    cudaStream_t s1;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&a, bytes));
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&b, bytes));
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    double r[3];
    for (int i = -1; i < 3; i++) {
        CK(cudaStreamSynchronize(s1));
        double t0 = now_s();
        for (uint64_t k = 0; k < frames; k++) CK(cudaMemcpyPeerAsync(b, 1, a, 0, bytes, s1));
        CK(cudaStreamSynchronize(s1));
        if (i >= 0) r[i] = now_s() - t0;
    }
    double peer = (double)bytes * (double)frames / median3(r[0], r[1], r[2]) * 1e-9;
    printf("handoff %zu MiB x %llu frames, peer access %s:\n", mib, (unsigned long long)frames,
           can ? "yes" : "no");
    printf("  cudaMemcpyPeerAsync alone  %8.1f GB/s\n", peer);
    printf("  flow, peer copy hand-over  %8.1f GB/s  (%.3f x the copy alone)\n", gbs[0],
           gbs[0] / peer);
    printf("  flow, staged hand-over     %8.1f GB/s  (%.3f x)\n", gbs[1], gbs[1] / peer);
    CK(cudaFree(b));
    CK(cudaStreamDestroy(s1));
    CK(cudaSetDevice(0));
    CK(cudaFree(a));
    kp_device_close(d1);
    kp_device_close(d0);
}

/* --- gemm stages ------------------------------------------------------------------ */
/* One replica's (or stage's) cuBLAS handle, weights and output, on its device. */
typedef struct gemm_ctx {
    int n;
    cublasHandle_t h;
    float *w, *out;
} gemm_ctx;

static void gemm_init(gemm_ctx *g, kp_device_t dev, int n) {
    g->n = n;
    KK(kp_device_bind_thread(dev));
    size_t b = (size_t)n * n * sizeof(float);
    KK(kp_malloc(dev, b, (void **)&g->w));
    KK(kp_malloc(dev, b, (void **)&g->out));
    CK(cudaMemset(g->w, 0, b));
    if (cublasCreate(&g->h) != CUBLAS_STATUS_SUCCESS) exit(1);
}

static void gemm_fini(gemm_ctx *g, kp_device_t dev) {
    KK(kp_device_bind_thread(dev));
    cublasDestroy(g->h);
    kp_free(dev, g->w);
    kp_free(dev, g->out);
}

static kp_status gemm_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    gemm_ctx *g = user;
    const float one = 1.0f, zero = 0.0f;
    cublasSetStream(g->h, (cudaStream_t)kp_stream_native(c->stream));
    if (cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, f->data, g->n, g->w,
                    g->n, &zero, g->out, g->n) != CUBLAS_STATUS_SUCCESS)
        return kp_set_error(KP_ERR_DEVICE, "cublasSgemm failed");
    return kp_memcpy_async(c->stream, f->data, g->out, f->bytes);
}

static kp_deal g_deal = KP_DEAL_LEAST_LOADED;

static void gemms(const char *what, int n, uint64_t frames) {
    kp_device_t d[2];
    KK(kp_device_open("cuda:0", &d[0]));
    KK(kp_device_open("cuda:1", &d[1]));
    size_t bytes = (size_t)n * n * sizeof(float);
    src_ctx s = {frames, bytes};
    gemm_ctx g[2][2]; /* [stage][device] */
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) gemm_init(&g[i][k], d[k], n);
    void *users[2] = {&g[0][0], &g[0][1]};
    double fps[2];
    bool replicas = strcmp(what, "replicas") == 0;
    for (int two = 0; two < 2; two++) {
        kp_flow_stage st[4] = {{.name = "src", .fn = src_fn, .user = &s}};
        size_t n_st = 1;
        if (replicas) {
            st[n_st++] = (kp_flow_stage){.name = "gemm",
                                         .fn = gemm_fn,
                                         .user = &g[0][0],
                                         .queue_capacity = 4,
                                         .replicas = two ? d : NULL,
                                         .n_replicas = two ? 2 : 0,
                                         .replica_users = two ? users : NULL,
                                         /* only replicas are dealt to: the one-GPU run
                                          * takes no policy (it would be refused) */
                                         .deal = two ? g_deal : KP_DEAL_LEAST_LOADED};
        } else {
            st[n_st++] = (kp_flow_stage){
                .name = "gemm_a", .fn = gemm_fn, .user = &g[0][0], .queue_capacity = 4};
            st[n_st++] = (kp_flow_stage){.name = "gemm_b",
                                         .fn = gemm_fn,
                                         .user = two ? &g[1][1] : &g[1][0],
                                         .queue_capacity = 4,
                                         .dev = two ? d[1] : NULL};
        }
        st[n_st++] = (kp_flow_stage){.name = "sink", .fn = sink_fn, .queue_capacity = 4};
        run_flow(d[0], st, n_st, bytes, frames);
        double r[3];
        for (int i = 0; i < 3; i++) r[i] = run_flow(d[0], st, n_st, bytes, frames);
        fps[two] = (double)frames / median3(r[0], r[1], r[2]);
    }
    /* the floor on one GPU: the gemms back to back on one stream */
    KK(kp_device_bind_thread(d[0]));
    float *a;
    cudaStream_t s0;
    CK(cudaMalloc((void **)&a, bytes));
    CK(cudaMemset(a, 0, bytes));
    CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
    cublasSetStream(g[0][0].h, s0);
    int per_frame = replicas ? 1 : 2;
    double r[3];
    const float one = 1.0f, zero = 0.0f;
    for (int i = -1; i < 3; i++) {
        double t0 = now_s();
        for (uint64_t k = 0; k < frames * (uint64_t)per_frame; k++)
            cublasSgemm(g[0][0].h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, g[0][0].w, n,
                        &zero, g[0][0].out, n);
        CK(cudaStreamSynchronize(s0));
        if (i >= 0) r[i] = now_s() - t0;
    }
    double hand = (double)frames / median3(r[0], r[1], r[2]);
    printf("%s: %d x %d sgemm%s per frame, %llu frames of %.1f MiB:\n", what, n, n,
           replicas ? "" : " twice", (unsigned long long)frames, bytes / 1048576.0);
    printf("  hand-written, one GPU        %9.1f frames/s\n", hand);
    printf("  flow, one GPU                %9.1f frames/s  (%.3f x hand-written)\n", fps[0],
           fps[0] / hand);
    printf("  flow, %s      %9.1f frames/s  (%.3f x one GPU)\n",
           replicas ? (g_deal ? "2 replicas, round robin" : "2 replicas, least loaded")
                    : "stage per GPU, 2 GPUs",
           fps[1], fps[1] / fps[0]);
    CK(cudaFree(a));
    CK(cudaStreamDestroy(s0));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) gemm_fini(&g[i][k], d[k]);
    kp_device_close(d[1]);
    kp_device_close(d[0]);
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "handoff";
    char why[256] = "";
    if (kp_device_count("cuda", why, sizeof why) < 2) {
        printf("bench_flow_devices: needs two GPUs (%s)\n", why);
        return 77;
    }
    if (strcmp(what, "handoff") == 0) {
        handoff(argc > 2 ? (size_t)atol(argv[2]) : 64, argc > 3 ? (uint64_t)atol(argv[3]) : 200);
    } else if (strcmp(what, "replicas") == 0 || strcmp(what, "staged") == 0) {
        if (argc > 4 && strcmp(argv[4], "round_robin") == 0) g_deal = KP_DEAL_ROUND_ROBIN;
        gemms(what, argc > 2 ? atoi(argv[2]) : 4096, argc > 3 ? (uint64_t)atol(argv[3]) : 400);
    } else {
        fprintf(stderr, "usage: bench_flow_devices handoff|replicas|staged [SIZE] [FRAMES]\n");
        return 2;
    }
    return 0;
}
