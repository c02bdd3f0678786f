/* Allocation latency of kpipe's caching allocators beside the CUDA runtime's:
 * device alloc+free pairs for 256 B .. 64 MiB (cached) against cudaMalloc /
 * cudaFree and against cudaMallocAsync / cudaFreeAsync with the pool keeping
 * its memory; pinned host against cudaMallocHost / cudaFreeHost; and a
 * fragmentation replay of a recorded mixed-size trace. One process, one GPU.
 *   bench_alloc [--json FILE] */
#include <cuda_runtime_api.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "bench-util.h"
#include "tool-impl.h"

#define REPEATS 15

typedef struct ctx {
    kp_allocator_t dev, pin;
    kp_stream_t ks;
    cudaStream_t cs;
    size_t bytes;
    int pairs;
} ctx;

/* Median over REPEATS of the mean time of one alloc+free pair, in us. */
static double time_pairs(void (*pair)(ctx *), ctx *c) {
    double v[REPEATS];
    pair(c); /* warm: the first of each size fills the cache */
    for (int r = 0; r < REPEATS; r++) {
        double t0 = kpt_now_us();
        for (int i = 0; i < c->pairs; i++) pair(c);
        v[r] = (kpt_now_us() - t0) / c->pairs;
    }
    return kpt_stats_of(v, REPEATS).p50;
}

static void kp_dev_pair(ctx *c) {
    void *p;
    KK(kp_allocator_alloc(c->dev, c->bytes, c->ks, &p));
    KK(kp_allocator_free(c->dev, p));
}
static void cuda_pair(ctx *c) {
    void *p;
    CK(cudaMalloc(&p, c->bytes));
    CK(cudaFree(p));
}
static void cuda_async_pair(ctx *c) {
    void *p;
    CK(cudaMallocAsync(&p, c->bytes, c->cs));
    CK(cudaFreeAsync(p, c->cs));
}
static void kp_pin_pair(ctx *c) {
    void *p;
    KK(kp_allocator_alloc(c->pin, c->bytes, c->ks, &p));
    KK(kp_allocator_free(c->pin, p));
}
static void cuda_host_pair(ctx *c) {
    void *p;
    CK(cudaMallocHost(&p, c->bytes));
    CK(cudaFreeHost(p));
}

/* A recorded trace: a serving loop's mixed sizes, with long-lived weights,
 * per-request activations and short-lived temporaries, replayed through the
 * allocator; reserved / peak-allocated measures fragmentation. */
static void fragmentation(ctx *c, json_t *out) {
    enum { STEPS = 20000, SLOTS = 256 };
    void *live[SLOTS] = {0};
    uint64_t s = 42;
    KK(kp_allocator_empty_cache(c->dev));
    for (int i = 0; i < STEPS; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int k = (int)(s % SLOTS);
        if (live[k]) {
            KK(kp_allocator_free(c->dev, live[k]));
            live[k] = NULL;
            continue;
        }
        size_t r = (s >> 8) % 100, bytes;
        if (r < 50)
            bytes = 256 + (s >> 16) % (64 << 10); /* temporaries */
        else if (r < 90)
            bytes = (1 << 20) + (s >> 16) % (8 << 20); /* activations */
        else
            bytes = (16 << 20) + (s >> 16) % (48 << 20); /* large buffers */
        KK(kp_allocator_alloc(c->dev, bytes, c->ks, &live[k]));
    }
    kp_alloc_stats st;
    KK(kp_allocator_stats(c->dev, &st));
    for (int k = 0; k < SLOTS; k++)
        if (live[k]) KK(kp_allocator_free(c->dev, live[k]));
    double ratio = (double)st.peak_reserved / (double)st.peak_allocated;
    printf("fragmentation replay (%d steps, 256 B .. 64 MiB): peak allocated %.1f MiB, peak "
           "reserved %.1f MiB, reserved / peak-allocated %.3f; %llu hits, %llu misses, %llu "
           "splits, %llu merges, %llu OOM retries\n",
           STEPS, st.peak_allocated / 1048576.0, st.peak_reserved / 1048576.0, ratio,
           (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
           (unsigned long long)st.splits, (unsigned long long)st.merges,
           (unsigned long long)st.oom_retries);
    json_object_set_new(out, "fragmentation",
                        json_pack("{s:f,s:f,s:f}", "peak_allocated_mib",
                                  st.peak_allocated / 1048576.0, "peak_reserved_mib",
                                  st.peak_reserved / 1048576.0, "reserved_over_peak_allocated",
                                  ratio));
}

int main(int argc, char **argv) {
    const char *json_path = argc > 2 && strcmp(argv[1], "--json") == 0 ? argv[2] : NULL;
    kp_device_t dev;
    ctx c = {0};
    KK(kp_device_open("cuda", &dev));
    KK(kp_stream_create(dev, &c.ks));
    KK(kp_allocator_create(dev, KP_ALLOCATOR_DEVICE, NULL, &c.dev));
    KK(kp_allocator_create(dev, KP_ALLOCATOR_PINNED, NULL, &c.pin));
    CK(cudaStreamCreateWithFlags(&c.cs, cudaStreamNonBlocking));
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    json_t *root = json_object(), *rows = json_array();
    printf("alloc+free pair latency, median of %d repeats (us); ratio = theirs / kpipe\n", REPEATS);
    printf("%10s %10s %12s %8s %14s %8s %12s %16s %8s\n", "bytes", "kpipe dev", "cudaMalloc",
           "ratio", "cudaMallocAsync", "ratio", "kpipe pinned", "cudaMallocHost", "ratio");
    for (size_t bytes = 256; bytes <= ((size_t)64 << 20); bytes *= 4) {
        c.bytes = bytes;
        c.pairs = 2000;
        double kd = time_pairs(kp_dev_pair, &c), ka = time_pairs(cuda_async_pair, &c);
        double kp = time_pairs(kp_pin_pair, &c);
        c.pairs = 20; /* the driver's own calls are slow: fewer of them */
        double cm = time_pairs(cuda_pair, &c), ch = time_pairs(cuda_host_pair, &c);
        printf("%10zu %10.3f %12.2f %7.0fx %14.3f %7.2fx %12.3f %16.2f %7.0fx\n", bytes, kd, cm,
               cm / kd, ka, ka / kd, kp, ch, ch / kp);
        json_array_append_new(rows, json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}", "bytes",
                                              (json_int_t)bytes, "kpipe_device_us", kd,
                                              "cudaMalloc_us", cm, "cudaMallocAsync_us", ka,
                                              "kpipe_pinned_us", kp, "cudaMallocHost_us", ch));
    }
    json_object_set_new(root, "pairs", rows);
    fragmentation(&c, root);
    if (json_path && json_dump_file(root, json_path, JSON_INDENT(2)) != 0) return 1;
    json_decref(root);
    kp_allocator_destroy(c.pin);
    kp_allocator_destroy(c.dev);
    CK(cudaStreamDestroy(c.cs));
    kp_stream_destroy(c.ks);
    kp_device_close(dev);
    return 0;
}
