/* Per-task cost of kpipe tasks, measured three ways.
 *
 *   bench_tasks patterns DEVICE WIDTH STEPS REPEAT
 *     The Task Bench dependence patterns (trivial, stencil, FFT, sweep, tree,
 *     random) as CUDASTF's cudax/test/stf/stress/task_bench.cu builds them:
 *     WIDTH x STEPS data of 128 ints, task (t, i) updates datum (t, i) and
 *     reads the data of step t - 1 its pattern names; empty task bodies;
 *     REPEAT sweeps per timed iteration, then the set runs and the stream is
 *     synchronized. Microseconds per task, mean +- sd over 10 iterations, in
 *     the stream form and in the graph form (instantiate, which updates the
 *     graph of the iteration before, then launch).
 *   bench_tasks scaling DEVICE [MAX_LIVE]
 *     Time per submit with 10^3 .. 10^6 live regions in one buffer, beside
 *     the floor of the same random updates: a hand-written lookup of each
 *     region by halving in a sorted array of the live extents, and a write
 *     of its new owner. It does no hazard work and keeps no task, so its
 *     growth with the regions is what the memory hierarchy alone charges
 *     for finding one of that many entries.
 *   bench_tasks overhead DEVICE NTASKS
 *     StarPU's tasks_overhead on kpipe: NTASKS tasks, each updating the same
 *     0, 1, 2 or 4 buffers and running an empty kernel, one stream (one
 *     worker on the cpu backend): submit, then run and wait; per task. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-check.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static kp_status empty_body(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    return KP_OK;
}
static const kp_task_kernel k_empty = {"empty", empty_body, NULL, NULL};

/* --- Task Bench patterns ------------------------------------------------------------ */
enum { TRIVIAL, STENCIL, FFT, SWEEP, TREE, RANDOM, N_PATTERNS };
static const char *const pattern_names[] = {"TRIVIAL", "STENCIL", "FFT", "SWEEP", "TREE", "RANDOM"};

static int skip_task(int id, int t, int i) {
    if (id == SWEEP) return i <= t;
    if (id == TREE) return t != 0 && i % (1 << t) != 0;
    return 0;
}

static int input_deps(int id, int t, int i, int w, int *out) {
    int n = 0;
    if (t == 0) return 0;
    switch (id) {
    case STENCIL:
        out[n++] = i;
        if (i > 0) out[n++] = i - 1;
        if (i < w - 1) out[n++] = i + 1;
        break;
    case FFT:
        out[n++] = i;
        if (t < 32) {
            int two = 1 << (t - 1);
            if (i - two >= 0) out[n++] = i - two;
            if (i + two < w) out[n++] = i + two;
        }
        break;
    case SWEEP:
        out[n++] = i;
        if (i > 0) out[n++] = i - 1;
        break;
    case TREE:
        out[n++] = i;
        if (i + (1 << (t - 1)) < w) out[n++] = i + (1 << (t - 1));
        break;
    case RANDOM:
        out[n++] = rand() % w;
        out[n++] = rand() % w;
        break;
    }
    return n;
}

static kp_tensor_desc datum(int64_t index) {
    int64_t n = 128;
    kp_tensor_desc d;
    kp_desc_init(&d, KP_I32, 1, &n, NULL);
    d.offset = index * 128;
    return d;
}

static void patterns(kp_device_t dev, int w, int steps, int repeat) {
    kp_tasks_t t;
    kp_stream_t s;
    void *mem;
    size_t bytes = (size_t)w * (size_t)steps * 128 * 4;
    KK(kp_tasks_create(dev, 4, &t));
    KK(kp_stream_create(dev, &s));
    KK(kp_malloc(dev, bytes, &mem));
    uint32_t buf;
    KK(kp_tasks_buffer_wrap(t, mem, bytes, &buf));
    printf("# kpipe tasks on %s: width %d, steps %d, repeat %d, 4 streams\n", kp_device_name(dev),
           w, steps, repeat);
    printf("%-8s %-6s %12s %8s %8s %10s\n", "pattern", "form", "us/task", "sd", "tasks",
           "deps/task");
    for (int id = 0; id < N_PATTERNS; id++)
        for (int graph = 0; graph < 2; graph++) {
            double sum = 0, sq = 0;
            size_t tasks = 0, deps = 0;
            srand(1);
            for (int iter = -1; iter < 10; iter++) { /* one warm-up */
                tasks = deps = 0;
                double t0 = now_us();
                for (int k = 0; k < repeat; k++)
                    for (int st = 0; st < steps; st++)
                        for (int i = 0; i < w; i++) {
                            if (skip_task(id, st, i)) continue;
                            int d[3];
                            int nd = input_deps(id, st, i, w, d);
                            kp_task_arg a[4];
                            a[0] = (kp_task_arg){.access = KP_TASK_INOUT,
                                                 .buffer = buf,
                                                 .desc = datum((int64_t)st * w + i)};
                            for (int j = 0; j < nd; j++)
                                a[1 + j] = (kp_task_arg){
                                    .access = KP_TASK_IN,
                                    .buffer = buf,
                                    .desc = datum((int64_t)((st - 1 + steps) % steps) * w + d[j])};
                            KK(kp_tasks_submit(t, &k_empty, a, (size_t)(1 + nd), NULL));
                            tasks++;
                            deps += (size_t)nd;
                        }
                if (graph) {
                    KK(kp_tasks_instantiate(t));
                    KK(kp_tasks_launch(t, s));
                } else {
                    KK(kp_tasks_run(t, s));
                }
                KK(kp_stream_sync(s));
                double us = (now_us() - t0) / (double)tasks;
                if (iter >= 0) sum += us, sq += us * us;
            }
            double mean = sum / 10, sd = sqrt(fmax(sq / 10 - mean * mean, 0));
            printf("%-8s %-6s %12.3f %8.3f %8zu %10.2f\n", pattern_names[id],
                   graph ? "graph" : "stream", mean, sd, tasks, (double)deps / (double)tasks);
        }
    kp_tasks_stats stats;
    KK(kp_tasks_stats_get(t, &stats));
    printf("# graph builds %llu, updates %llu\n", (unsigned long long)stats.graph_builds,
           (unsigned long long)stats.graph_updates);
    kp_free(dev, mem);
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
}

/* --- inference with many live regions ------------------------------------------------ */

/* The floor: m random updates of `live` regions of 64 bytes, each found by
 * halving in a sorted array of their starts, its owner replaced; us each. */
static double lookup_floor(int64_t live, int m) {
    int64_t *lo = malloc((size_t)live * sizeof *lo);
    uint64_t *owner = malloc((size_t)live * sizeof *owner);
    if (!lo || !owner) {
        fprintf(stderr, "bench_tasks: no memory for the floor\n");
        exit(1);
    }
    for (int64_t i = 0; i < live; i++) lo[i] = i * 64, owner[i] = (uint64_t)i;
    uint64_t seed = 12345, sum = 0;
    double t0 = now_us();
    for (int k = 0; k < m; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int64_t key = (int64_t)((seed >> 33) % (uint64_t)live) * 64, a = 0, b = live;
        while (b - a > 1) {
            int64_t c = a + (b - a) / 2;
            if (lo[c] <= key)
                a = c;
            else
                b = c;
        }
        sum += owner[a];
        owner[a] = (uint64_t)k;
    }
    double us = (now_us() - t0) / m;
    if (sum == 42) printf("#\n"); /* keeps the loop */
    free(lo);
    free(owner);
    return us;
}

static void scaling(kp_device_t dev, int64_t max_live) {
    printf("# time per submit against live regions, %s; floor: a lookup in a sorted array\n",
           kp_device_name(dev));
    printf("%10s %14s %14s %12s %12s\n", "live", "us/submit", "tests/submit", "regions_live",
           "floor_us");
    for (int64_t live = 1000; live <= max_live; live *= 10) {
        kp_tasks_t t;
        kp_stream_t s;
        void *mem;
        size_t bytes = (size_t)live * 16 * 4;
        KK(kp_tasks_create(dev, 1, &t));
        KK(kp_stream_create(dev, &s));
        KK(kp_malloc(dev, bytes, &mem));
        uint32_t buf;
        KK(kp_tasks_buffer_wrap(t, mem, bytes, &buf));
        int64_t sixteen = 16;
        kp_tensor_desc d;
        KK(kp_desc_init(&d, KP_F32, 1, &sixteen, NULL));
        double us = 0;
        kp_tasks_stats before, after;
        const int m = 200000; /* 20 ms or more of submits: a clock tick is noise */
        for (int set = 0; set < 2;
             set++) { /* the first sizes the set's arrays, the second is timed */
            for (int64_t j = 0; j < live; j++) { /* readers of every region: all stay live */
                d.offset = j * 16;
                kp_task_arg a = {.access = KP_TASK_IN, .buffer = buf, .desc = d};
                KK(kp_tasks_submit(t, &k_empty, &a, 1, NULL));
            }
            KK(kp_tasks_stats_get(t, &before));
            uint64_t seed = 12345;
            double t0 = now_us();
            for (int k = 0; k < m; k++) { /* updates of random regions: each replaces its entry */
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                d.offset = (int64_t)((seed >> 33) % (uint64_t)live) * 16;
                kp_task_arg a = {.access = KP_TASK_INOUT, .buffer = buf, .desc = d};
                KK(kp_tasks_submit(t, &k_empty, &a, 1, NULL));
            }
            us = (now_us() - t0) / m;
            KK(kp_tasks_stats_get(t, &after));
            KK(kp_tasks_run(t, s));
            KK(kp_stream_sync(s));
        }
        printf("%10lld %14.3f %14.2f %12llu %12.3f\n", (long long)live, us,
               (double)(after.overlap_tests - before.overlap_tests) / m,
               (unsigned long long)after.regions_live, lookup_floor(live, 1000000));
        kp_free(dev, mem);
        kp_stream_destroy(s);
        kp_tasks_destroy(t);
    }
}

/* --- StarPU's tasks_overhead ------------------------------------------------------------ */
static void nothing_host(const void *p, kp_dim3 g, kp_dim3 b, uint64_t first, uint64_t n) {}
static const kp_kernel k_nothing = {
    "nothing", 8, {{"host", &(const kp_host_kernel){nothing_host}}}};

static kp_status nothing_launch(void *user, const kp_task_view *v, size_t n, kp_launch *l,
                                void *params) {
    memset(params, 0, 8);
    *l = (kp_launch){.kernel = &k_nothing, .grid = {1, 1, 1}, .block = {1, 1, 1}, .params = params};
    return KP_OK;
}
static const kp_task_kernel k_nothing_task = {"nothing", NULL, NULL, nothing_launch};

static void overhead(kp_device_t dev, int ntasks) {
    printf("# StarPU tasks_overhead on kpipe: %d tasks, empty host kernels, 1 stream, %s\n", ntasks,
           kp_device_name(dev));
    printf("%8s %14s %14s %14s\n", "buffers", "submit us", "run+wait us", "total us/task");
    for (int nb = 0; nb <= 4; nb = nb ? 2 * nb : 1) {
        double best_s = 1e30, best_r = 0;
        for (int rep = 0; rep < 5; rep++) {
            kp_tasks_t t;
            kp_stream_t s;
            KK(kp_tasks_create(dev, 1, &t));
            KK(kp_stream_create(dev, &s));
            uint32_t ids[4];
            void *mem[4];
            int64_t sixteen = 16;
            kp_tensor_desc d;
            KK(kp_desc_init(&d, KP_F32, 1, &sixteen, NULL));
            for (int b = 0; b < nb; b++) {
                KK(kp_malloc(dev, 64, &mem[b]));
                KK(kp_tasks_buffer_wrap(t, mem[b], 64, &ids[b]));
            }
            kp_task_arg a[4];
            for (int b = 0; b < nb; b++)
                a[b] = (kp_task_arg){.access = KP_TASK_INOUT, .buffer = ids[b], .desc = d};
            double t0 = now_us();
            for (int i = 0; i < ntasks; i++)
                KK(kp_tasks_submit(t, &k_nothing_task, a, (size_t)nb, NULL));
            double t1 = now_us();
            KK(kp_tasks_run(t, s));
            KK(kp_stream_sync(s));
            double t2 = now_us();
            if (t2 - t0 < best_s + best_r) best_s = t1 - t0, best_r = t2 - t1;
            for (int b = 0; b < nb; b++) kp_free(dev, mem[b]);
            kp_stream_destroy(s);
            kp_tasks_destroy(t);
        }
        printf("%8d %14.3f %14.3f %14.3f\n", nb, best_s / ntasks, best_r / ntasks,
               (best_s + best_r) / ntasks);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tasks patterns DEVICE WIDTH STEPS REPEAT | scaling DEVICE | "
                        "overhead DEVICE NTASKS\n");
        return 2;
    }
    kp_device_t dev;
    KK(kp_device_open(argv[2], &dev));
    if (!strcmp(argv[1], "patterns") && argc == 6)
        patterns(dev, atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    else if (!strcmp(argv[1], "scaling"))
        scaling(dev, argc > 3 ? atoll(argv[3]) : 1000000);
    else if (!strcmp(argv[1], "overhead") && argc == 4)
        overhead(dev, atoi(argv[3]));
    else {
        fprintf(stderr, "bench_tasks: unknown mode or arguments\n");
        return 2;
    }
    kp_device_close(dev);
    return 0;
}
