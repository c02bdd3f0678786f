/* Soak: the sample pipeline, ReLU(input0 + input1), for many ticks in each
 * execution mode, alternating between two sets of input buffers so that
 * addresses change every tick (descriptor uploads, copy nodes re-pointed).
 * Every CHECK-th tick's output is read back and checked element by element;
 * every SAMPLE ticks the allocators' statistics, the host allocations made
 * through kpipe's allocation hook and the process's resident memory are
 * sampled. After the first sample all must stay flat: the tick path
 * allocates nothing and nothing grows.
 *   test_soak DEVICE [TICKS [SAMPLE [CHECK [N]]]]
 * Defaults: 20000 ticks, a sample every 2000, a check every 100, N = 16384;
 * exit 77 without the device. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kpipe/kpipe.h"
#include "support/kp_test.h"

#define RSS_SLACK ((long)4 << 20) /* drivers touch a few pages late; growth past this fails */

static atomic_long g_host_allocs;

static void *count_alloc(void *user, kp_mem_kind kind, size_t bytes, size_t align) {
    void *p = NULL;
    atomic_fetch_add(&g_host_allocs, 1);
    if (align < sizeof(void *)) align = sizeof(void *);
    return posix_memalign(&p, align, bytes ? bytes : 1) == 0 ? p : NULL;
}

static void count_free(void *user, kp_mem_kind kind, void *p) { free(p); }

static long rss_bytes(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

typedef struct sample {
    long tick, rss, host_allocs;
    kp_alloc_stats st[KP_ALLOCATOR_KINDS];
} sample;

#define FAIL(...)                                    \
    do {                                             \
        fprintf(stderr, __VA_ARGS__);                \
        fprintf(stderr, " (%s)\n", kp_last_error()); \
        return 1;                                    \
    } while (0)
#define TRY(expr)                                                     \
    do {                                                              \
        kp_status st_ = (expr);                                       \
        if (st_ != KP_OK) FAIL("%s: %s", #expr, kp_status_name(st_)); \
    } while (0)

/* The statistics first: the first look-up creates the device's unused
 * allocators, which must not count as the ticks' allocations. */
static int take(kp_device_t dev, long tick, sample *s) {
    s->tick = tick;
    for (int k = 0; k < KP_ALLOCATOR_KINDS; k++) {
        kp_allocator_t a;
        TRY(kp_device_allocator(dev, (kp_allocator_kind)k, &a));
        TRY(kp_allocator_stats(a, &s->st[k]));
    }
    s->rss = rss_bytes();
    s->host_allocs = atomic_load(&g_host_allocs);
    return 0;
}

/* Flat: the same allocator figures and host allocations as the first sample,
 * and resident memory within RSS_SLACK of it. */
static int flat(const sample *first, const sample *s) {
    static const char *const kinds[] = {"host", "pinned", "device"};
    int bad = 0;
    for (int k = 0; k < KP_ALLOCATOR_KINDS; k++) {
        const kp_alloc_stats *a = &first->st[k], *b = &s->st[k];
        if (a->allocated != b->allocated || a->reserved != b->reserved || a->allocs != b->allocs ||
            a->driver_allocs != b->driver_allocs) {
            fprintf(stderr,
                    "tick %ld: %s allocator moved: allocated %zu -> %zu, reserved %zu -> "
                    "%zu, allocs %llu -> %llu, driver allocs %llu -> %llu\n",
                    s->tick, kinds[k], a->allocated, b->allocated, a->reserved, b->reserved,
                    (unsigned long long)a->allocs, (unsigned long long)b->allocs,
                    (unsigned long long)a->driver_allocs, (unsigned long long)b->driver_allocs);
            bad = 1;
        }
    }
    if (s->host_allocs != first->host_allocs) {
        fprintf(stderr, "tick %ld: %ld host allocations since tick %ld\n", s->tick,
                s->host_allocs - first->host_allocs, first->tick);
        bad = 1;
    }
    if (s->rss - first->rss > RSS_SLACK) {
        fprintf(stderr, "tick %ld: resident memory grew by %ld bytes\n", s->tick,
                s->rss - first->rss);
        bad = 1;
    }
    return bad;
}

typedef struct soak {
    kp_device_t dev;
    kp_stream_t s;
    long ticks, every, check;
    int64_t n;
    float *host[2][2], *dev_in[2][2], *out;
} soak;

static int check_output(soak *k, const kp_port_info *o, int set, long tick) {
    TRY(kp_stream_sync(k->s));
    TRY(kp_memcpy_dtoh(k->dev, k->out, o->data, (size_t)k->n * sizeof(float)));
    for (int64_t i = 0; i < k->n; i++) {
        float want = k->host[set][0][i] + k->host[set][1][i];
        want = want > 0 ? want : 0.0f;
        if (k->out[i] != want)
            FAIL("tick %ld element %lld: got %g, want %g", tick, (long long)i, (double)k->out[i],
                 (double)want);
    }
    return 0;
}

static int run_mode(soak *k, kp_exec_mode mode) {
    char json[1024];
    kpt_sample_json(json, sizeof json, kp_exec_mode_str(mode), k->n);
    kp_pipeline_t p;
    kp_port_info in[2] = {{"input0", NULL, {0}}, {"input1", NULL, {0}}}, o = {"output", NULL, {0}};
    TRY(kp_desc_init(&in[0].desc, KP_F32, 1, &k->n, NULL));
    in[1].desc = in[0].desc;
    TRY(kp_pipeline_create_from_json(k->dev, json, &p));
    TRY(kp_pipeline_setup(p));
    size_t n_samples = (size_t)(k->ticks / k->every) + 1;
    sample *samples = calloc(n_samples, sizeof *samples);
    int bad = 0;
    size_t taken = 0;
    for (long t = 0; t < k->ticks && !bad; t++) {
        int set = (int)(t & 1);
        in[0].data = k->dev_in[set][0];
        in[1].data = k->dev_in[set][1];
        TRY(kp_pipeline_configure_io(p, in, 2, &o, 1, k->s));
        if (t == 0) {
            TRY(kp_pipeline_warmup(p, k->s));
            if (mode == KP_EXEC_GRAPH) TRY(kp_pipeline_build_graph(p));
        }
        TRY(mode == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, k->s)
                                  : kp_pipeline_execute_stream(p, k->s));
        if ((t + 1) % k->check == 0 && check_output(k, &o, set, t)) bad = 1;
        if ((t + 1) % k->every == 0) {
            TRY(kp_stream_sync(k->s));
            if (take(k->dev, t + 1, &samples[taken]) != 0)
                bad = 1;
            else if (taken > 0 && flat(&samples[0], &samples[taken]))
                bad = 1;
            taken++;
        }
    }
    TRY(kp_stream_sync(k->s));
    printf("%s mode, %lld elements, %ld ticks, output checked every %ld:\n", kp_exec_mode_str(mode),
           (long long)k->n, k->ticks, k->check);
    printf("  %10s %12s %14s %14s %12s %12s\n", "tick", "rss MiB", "device alloc", "device rsvd",
           "pinned rsvd", "host allocs");
    for (size_t i = 0; i < taken; i++)
        printf("  %10ld %12.2f %14zu %14zu %12zu %12ld\n", samples[i].tick,
               (double)samples[i].rss / (1 << 20), samples[i].st[KP_ALLOCATOR_DEVICE].allocated,
               samples[i].st[KP_ALLOCATOR_DEVICE].reserved,
               samples[i].st[KP_ALLOCATOR_PINNED].reserved, samples[i].host_allocs);
    printf("  %s\n", bad ? "FAIL" : "flat: ok");
    free(samples);
    kp_pipeline_destroy(p);
    return bad;
}

static int setup_buffers(soak *k) {
    size_t bytes = (size_t)k->n * sizeof(float);
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int set = 0; set < 2; set++)
        for (int j = 0; j < 2; j++) {
            k->host[set][j] = malloc(bytes);
            if (!k->host[set][j]) FAIL("no host memory");
            for (int64_t i = 0; i < k->n; i++) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                k->host[set][j][i] = (float)((int64_t)(seed % 2001) - 1000);
            }
            TRY(kp_malloc(k->dev, bytes, (void **)&k->dev_in[set][j]));
            TRY(kp_memcpy_htod(k->dev, k->dev_in[set][j], k->host[set][j], bytes));
        }
    k->out = malloc(bytes);
    return k->out ? 0 : 1;
}

int main(int argc, char **argv) {
    soak k = {.ticks = 20000, .every = 2000, .check = 100, .n = 16384};
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (argc > 2) k.ticks = atol(argv[2]);
    if (argc > 3) k.every = atol(argv[3]);
    if (argc > 4) k.check = atol(argv[4]);
    if (argc > 5) k.n = atoll(argv[5]);
    if (k.ticks < 1 || k.every < 1 || k.check < 1 || k.n < 1) {
        fprintf(stderr, "usage: test_soak DEVICE [TICKS [SAMPLE [CHECK [N]]]]\n");
        return 2;
    }
    kp_alloc_hook hook = KP_ALLOC_HOOK_INIT;
    hook.alloc = count_alloc;
    hook.free = count_free;
    TRY(kp_set_alloc_hook(&hook));
    kp_status st = kp_device_open(name, &k.dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: soak on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) FAIL("cannot open %s", name);
    TRY(kp_stream_create(k.dev, &k.s));
    int bad = setup_buffers(&k);
    if (!bad) bad = run_mode(&k, KP_EXEC_GRAPH);
    if (!bad) bad = run_mode(&k, KP_EXEC_STREAM);
    for (int set = 0; set < 2; set++)
        for (int j = 0; j < 2; j++) {
            kp_free(k.dev, k.dev_in[set][j]);
            free(k.host[set][j]);
        }
    free(k.out);
    kp_stream_destroy(k.s);
    kp_device_close(k.dev);
    kp_set_alloc_hook(NULL);
    return bad;
}
