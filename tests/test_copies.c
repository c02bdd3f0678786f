/* Synchronous copies feed a pipeline: each tick rewrites the two inputs of
 * ReLU(input0 + input1) with kp_memcpy_htod (or htod into a staging buffer,
 * then kp_memcpy_dtod), runs configure_io + execute + sync, reads the output
 * back with kp_memcpy_dtoh and checks every element against host arithmetic.
 * The copies must have landed when they return: on CUDA a copy from pageable
 * memory that only staged its bytes showed up here as "new input0 plus old
 * input1" at a million elements.
 *
 * Matrix: 1 M and 16 M elements x pageable, pinned and device sources x
 * graph and stream mode x the same input buffers every tick and new ones.
 *   test_copies DEVICE [TICKS] [MAX_ELEMENTS]
 * TICKS defaults to 100 on cuda (20 at 1 M and 3 at 16 M on cpu, where no
 * race is possible and time is dearer); exit 77 without the device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev;
static int g_ticks; /* 0: the defaults above */
static int64_t g_max = (int64_t)1 << 24;

typedef enum { SRC_PAGEABLE, SRC_PINNED, SRC_DEVICE } src_kind;
static const char *const src_names[] = {"pageable", "pinned", "device"};

/* Integers in [-1000, 1000]: sums are exact in float32, so the check is exact. */
static float *pattern(int64_t len, uint64_t seed) {
    float *v = malloc((size_t)len * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < len; i++) v[i] = (float)((int64_t)(kpt_rand(&seed) % 2001) - 1000);
    return v;
}

static const char *sample_json(const char *mode, int64_t n) {
    static char buf[1024];
    return kpt_sample_json(buf, sizeof buf, mode, n);
}

typedef struct copy_case {
    int64_t n;
    src_kind src;
    bool graph, new_buffers;
    int ticks;
} copy_case;

/* Host sources of one tick's inputs: pageable (malloc) or pinned. */
typedef struct sources {
    float *host[2];
    float *staging[2]; /* SRC_DEVICE: host -> staging (htod), staging -> input (dtod) */
} sources;

static void sources_open(const copy_case *c, sources *s) {
    size_t bytes = (size_t)c->n * sizeof(float);
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 2; k++) {
        if (c->src == SRC_PINNED)
            KPT_OK(kp_malloc_host(g_dev, bytes, (void **)&s->host[k]));
        else
            s->host[k] = malloc(bytes);
        assert_non_null(s->host[k]);
        if (c->src == SRC_DEVICE) KPT_OK(kp_malloc(g_dev, bytes, (void **)&s->staging[k]));
    }
}

static void sources_close(const copy_case *c, sources *s) {
    for (int k = 0; k < 2; k++) {
        if (c->src == SRC_PINNED)
            kp_free_host(g_dev, s->host[k]);
        else
            free(s->host[k]);
        kp_free(g_dev, s->staging[k]);
    }
}

/* Writes tick t's data into the device inputs through the case's path. */
static void feed(const copy_case *c, sources *s, const float *pat[2], int t, float *dst[2]) {
    size_t bytes = (size_t)c->n * sizeof(float);
    for (int k = 0; k < 2; k++) {
        memcpy(s->host[k], pat[k] + (size_t)t * (k ? 53 : 37), bytes);
        if (c->src == SRC_DEVICE) {
            KPT_OK(kp_memcpy_htod(g_dev, s->staging[k], s->host[k], bytes));
            KPT_OK(kp_memcpy_dtod(g_dev, dst[k], s->staging[k], bytes));
        } else {
            KPT_OK(kp_memcpy_htod(g_dev, dst[k], s->host[k], bytes));
        }
    }
}

static void run_case(const copy_case *c) {
    size_t bytes = (size_t)c->n * sizeof(float);
    int64_t n = c->n;
    const float *pat[2] = {pattern(c->n + 53 * (int64_t)c->ticks, 11),
                           pattern(c->n + 53 * (int64_t)c->ticks, 12)};
    float *out = malloc(bytes), *in[2] = {NULL, NULL};
    sources s;
    kp_stream_t st;
    kp_pipeline_t p;
    sources_open(c, &s);
    KPT_OK(kp_stream_create(g_dev, &st));
    KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json(c->graph ? "graph" : "stream", n), &p));
    KPT_OK(kp_pipeline_setup(p));
    kp_port_info ports[2] = {{"input0", NULL, {0}}, {"input1", NULL, {0}}};
    kp_port_info o = {"output", NULL, {0}};
    for (int k = 0; k < 2; k++) KPT_OK(kp_desc_init(&ports[k].desc, KP_F32, 1, &n, NULL));
    size_t wrong_total = 0;
    for (int t = 0; t < c->ticks; t++) {
        float *old[2] = {in[0], in[1]};
        if (t == 0 || c->new_buffers)
            for (int k = 0; k < 2; k++) KPT_OK(kp_malloc(g_dev, bytes, (void **)&in[k]));
        feed(c, &s, pat, t, in);
        for (int k = 0; k < 2; k++) ports[k].data = in[k];
        KPT_OK(kp_pipeline_configure_io(p, ports, 2, &o, 1, st));
        if (t == 0) {
            KPT_OK(kp_pipeline_warmup(p, st));
            if (c->graph) KPT_OK(kp_pipeline_build_graph(p));
        }
        KPT_OK(c->graph ? kp_pipeline_execute_graph(p, st) : kp_pipeline_execute_stream(p, st));
        KPT_OK(kp_stream_sync(st));
        KPT_OK(kp_memcpy_dtoh(g_dev, out, o.data, bytes));
        size_t wrong = 0, first = 0;
        for (int64_t i = 0; i < n; i++) {
            float want = fmaxf(s.host[0][i] + s.host[1][i], 0.0f);
            if (out[i] != want && wrong++ == 0) first = (size_t)i;
        }
        if (wrong) {
            print_error("%lld elements, %s source, %s mode, %s buffers: tick %d has %zu wrong "
                        "outputs, first at %zu: %g, want %g\n",
                        (long long)n, src_names[c->src], c->graph ? "graph" : "stream",
                        c->new_buffers ? "new" : "same", t, wrong, first, (double)out[first],
                        (double)fmaxf(s.host[0][first] + s.host[1][first], 0.0f));
            wrong_total += wrong;
        }
        if (c->new_buffers && t > 0)
            for (int k = 0; k < 2; k++) kp_free(g_dev, old[k]);
    }
    kp_pipeline_destroy(p);
    kp_stream_destroy(st);
    for (int k = 0; k < 2; k++) kp_free(g_dev, in[k]);
    sources_close(c, &s);
    free(out);
    free((void *)pat[0]);
    free((void *)pat[1]);
    assert_int_equal(wrong_total, 0);
}

static int ticks_for(int64_t n) {
    if (g_ticks) return g_ticks;
    if (strcmp(kp_device_kernel_form(g_dev), "host") != 0) return 100;
    return n > ((int64_t)1 << 20) ? 3 : 20;
}

static void run_size(int64_t n) {
    if (n > g_max) {
        printf("  %lld elements: skipped (above the limit of %lld given)\n", (long long)n,
               (long long)g_max);
        return;
    }
    for (int src = 0; src < 3; src++)
        for (int graph = 0; graph < 2; graph++)
            for (int fresh = 0; fresh < 2; fresh++) {
                copy_case c = {.n = n,
                               .src = (src_kind)src,
                               .graph = graph,
                               .new_buffers = fresh,
                               .ticks = ticks_for(n)};
                printf("  %lld elements, %s source, %s mode, %s buffers, %d ticks\n", (long long)n,
                       src_names[src], graph ? "graph" : "stream", fresh ? "new" : "same", c.ticks);
                run_case(&c);
            }
}

static void one_million(void **state) { run_size((int64_t)1 << 20); }
static void sixteen_million(void **state) { run_size((int64_t)1 << 24); }

/* Odd sizes and one element: the copies' tails. */
static void odd_sizes(void **state) {
    static const int64_t sizes[] = {1, 3, 1000003};
    for (size_t i = 0; i < 3; i++) {
        copy_case c = {
            .n = sizes[i], .src = SRC_PAGEABLE, .graph = true, .new_buffers = true, .ticks = 3};
        run_case(&c);
        c.src = SRC_DEVICE;
        c.graph = false;
        run_case(&c);
    }
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (argc > 2) g_ticks = atoi(argv[2]);
    if (argc > 3) g_max = atoll(argv[3]);
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: copy tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(odd_sizes),
        cmocka_unit_test(one_million),
        cmocka_unit_test(sixteen_million),
    };
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
