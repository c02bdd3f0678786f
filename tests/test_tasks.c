/* Data-flow tasks on the device named on the command line: dependencies
 * from region overlap against a brute-force relation over touched bytes,
 * results against sequential execution on the host (every element), at
 * small sizes and at a million elements, deferred allocation, versions,
 * the index's size under repeated work and across its slabs, and named
 * errors.
 *   test_tasks DEVICE   (cpu or cuda; exit 77 without the device) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

static kp_device_t g_dev;
static uint64_t g_seed = 20261122;

/* args: [0] y (OUT or INOUT), optionally [1] x (IN), last a SCALAR float[3]
 * {a, b, c}: y = c + a y + b x over y's region. */
static kp_status region_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    const float *abc = v[n - 1].scalar;
    kpt_region_params p = {0};
    if (!kpt_region_make(&p, v[0].data, &v[0].desc, n == 3 ? v[1].data : NULL, &v[1].desc, abc[0],
                         abc[1], abc[2]))
        return kp_set_error(KP_ERR_INVALID_ARG, "region task: regions of 1 or 2 dimensions");
    kp_launch l = kpt_launch_1d(&kpt_region, &p, (int)p.n);
    return kp_launch_kernel(s, &l);
}
static const kp_task_kernel k_region = {"region", region_task, NULL, NULL};

/* The same work as one described launch: no function, no capture. */
static kp_status region_launch(void *user, const kp_task_view *v, size_t n, kp_launch *l,
                               void *params) {
    const float *abc = v[n - 1].scalar;
    kpt_region_params *p = params;
    if (!kpt_region_make(p, v[0].data, &v[0].desc, n == 3 ? v[1].data : NULL, &v[1].desc, abc[0],
                         abc[1], abc[2]))
        return kp_set_error(KP_ERR_INVALID_ARG, "region task: regions of 1 or 2 dimensions");
    *l = kpt_launch_1d(&kpt_region, params, (int)p->n);
    return KP_OK;
}
static const kp_task_kernel k_region_launch = {"region", NULL, NULL, region_launch};

/* How a test runs its sets: the stream form or the graph form, with task
 * functions or described launches. */
typedef enum { FORM_RUN, FORM_RUN_LAUNCH, FORM_GRAPH, FORM_GRAPH_LAUNCH } form;
static const char *const form_names[] = {"run", "run+launch", "graph", "graph+launch"};

static const kp_task_kernel *form_kernel(form f) {
    return f == FORM_RUN_LAUNCH || f == FORM_GRAPH_LAUNCH ? &k_region_launch : &k_region;
}

/* Runs the submitted set once in form f. */
static kp_status form_go(kp_tasks_t t, form f, kp_stream_t s) {
    if (f == FORM_RUN || f == FORM_RUN_LAUNCH) return kp_tasks_run(t, s);
    kp_status st = kp_tasks_instantiate(t);
    return st == KP_OK ? kp_tasks_launch(t, s) : st;
}

static kp_status nothing(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    return KP_OK;
}
static const kp_task_kernel k_nothing = {"nothing", nothing, NULL, NULL};

static kp_task_arg tensor(kp_task_access acc, uint32_t buf, const kp_tensor_desc *d) {
    kp_task_arg a = {.access = acc, .buffer = buf, .desc = *d};
    return a;
}

static kp_task_arg scalar3(const float *abc) {
    kp_task_arg a = {.access = KP_TASK_SCALAR, .scalar = abc, .scalar_bytes = 3 * sizeof(float)};
    return a;
}

/* A random region of `dt` inside `bytes` bytes: 1 or 2 dimensions, strides
 * 0 .. 7 elements (0 repeats elements), a random offset. */
static kp_tensor_desc random_region(kp_dtype dt, size_t bytes, int max_side) {
    for (;;) {
        int nd = 1 + (int)(kpt_rand(&g_seed) % 2);
        int64_t shape[2], strides[2];
        for (int k = 0; k < nd; k++) {
            shape[k] = 1 + (int64_t)(kpt_rand(&g_seed) % (uint64_t)max_side);
            strides[k] = (int64_t)(kpt_rand(&g_seed) % 8);
        }
        kp_tensor_desc d;
        if (kp_desc_init(&d, dt, nd, shape, strides) != KP_OK) continue;
        int64_t need = kp_desc_bytes_needed(&d), es = (int64_t)kp_dtype_size(dt);
        if (need < 0 || need > (int64_t)bytes) continue;
        d.offset = (int64_t)(kpt_rand(&g_seed) % (uint64_t)(((int64_t)bytes - need) / es + 1));
        if (kp_desc_bytes_needed(&d) <= (int64_t)bytes) return d;
    }
}

/* Marks the bytes a region touches. */
static void touch(const kp_tensor_desc *d, unsigned char *bytes) {
    int64_t es = (int64_t)kp_dtype_size(d->dtype), n = kp_desc_numel(d);
    for (int64_t i = 0; i < n; i++) {
        int64_t at = d->offset, r = i;
        for (int k = d->ndim - 1; k >= 0; k--) {
            at += (r % d->shape[k]) * d->strides[k];
            r /= d->shape[k];
        }
        memset(bytes + at * es, 1, (size_t)es);
    }
}

#define NT 120 /* tasks per random set */
#define BUF_BYTES 384

typedef struct rtask {
    int n;
    kp_task_arg a[3];
} rtask;

/* reach[i][j]: j reachable from i through the given edges (i < j). */
static void close_over(bool (*r)[NT]) {
    for (int k = 0; k < NT; k++)
        for (int i = 0; i < k; i++)
            if (r[i][k])
                for (int j = k + 1; j < NT; j++) r[i][j] |= r[k][j];
}

static void random_sets_match_brute_force(void **state) {
    static const kp_dtype dts[] = {KP_U8, KP_I16, KP_F32, KP_I64};
    static bool brute[NT][NT], mine[NT][NT];
    static unsigned char ta[BUF_BYTES], tb[BUF_BYTES];
    void *mem[3];
    for (int rep = 0; rep < 40; rep++) {
        kp_tasks_t t;
        KPT_OK(kp_tasks_create(g_dev, 1 + (size_t)(rep % 4), &t));
        uint32_t ids[3];
        for (int b = 0; b < 3; b++) {
            if (rep == 0) KPT_OK(kp_malloc(g_dev, BUF_BYTES, &mem[b]));
            KPT_OK(kp_tasks_buffer_wrap(t, mem[b], BUF_BYTES, &ids[b]));
        }
        static rtask rt[NT];
        for (int i = 0; i < NT; i++) {
            rt[i].n = 1 + (int)(kpt_rand(&g_seed) % 3);
            for (int k = 0; k < rt[i].n; k++) {
                kp_dtype dt = dts[kpt_rand(&g_seed) % 4];
                uint32_t b = ids[kpt_rand(&g_seed) % (rep % 2 ? 1 : 3)]; /* odd reps: one buffer */
                kp_task_access acc = (kp_task_access)(1 + kpt_rand(&g_seed) % 3);
                kp_tensor_desc d = random_region(dt, BUF_BYTES, 1 + (int)(kpt_rand(&g_seed) % 12));
                rt[i].a[k] = tensor(acc, b, &d);
            }
            uint64_t id = 99;
            KPT_OK(kp_tasks_submit(t, &k_nothing, rt[i].a, (size_t)rt[i].n, &id));
            assert_int_equal(id, i);
        }
        /* brute force: a pair conflicts when a byte is touched by both and written by one */
        memset(brute, 0, sizeof brute);
        for (int i = 0; i < NT; i++)
            for (int j = i + 1; j < NT; j++)
                for (int p = 0; p < rt[i].n && !brute[i][j]; p++)
                    for (int q = 0; q < rt[j].n && !brute[i][j]; q++) {
                        const kp_task_arg *x = &rt[i].a[p], *y = &rt[j].a[q];
                        if (x->buffer != y->buffer) continue;
                        if (x->access == KP_TASK_IN && y->access == KP_TASK_IN) continue;
                        memset(ta, 0, sizeof ta);
                        memset(tb, 0, sizeof tb);
                        touch(&x->desc, ta);
                        touch(&y->desc, tb);
                        for (int z = 0; z < BUF_BYTES; z++) brute[i][j] |= ta[z] && tb[z];
                    }
        static kp_task_edge e[NT * NT];
        size_t n = 0;
        KPT_OK(kp_tasks_edges(t, e, NT * NT, &n));
        memset(mine, 0, sizeof mine);
        for (size_t k = 0; k < n; k++) {
            assert_true(e[k].from < e[k].to && e[k].to < NT);
            if (!brute[e[k].from][e[k].to])
                fail_msg("rep %d: edge %llu -> %llu touches no common byte", rep,
                         (unsigned long long)e[k].from, (unsigned long long)e[k].to);
            mine[e[k].from][e[k].to] = true;
        }
        close_over(brute);
        close_over(mine);
        for (int i = 0; i < NT; i++)
            for (int j = i + 1; j < NT; j++)
                if (brute[i][j] != mine[i][j])
                    fail_msg("rep %d: %d -> %d: brute force %d, runtime %d", rep, i, j, brute[i][j],
                             mine[i][j]);
        kp_tasks_stats st;
        KPT_OK(kp_tasks_stats_get(t, &st));
        assert_int_equal(st.tasks, NT);
        assert_int_equal(st.edges, n);
        assert_true(st.edges_found >= st.edges);
        kp_stream_t s;
        KPT_OK(kp_stream_create(g_dev, &s));
        KPT_OK(kp_tasks_run(t, s)); /* tasks that enqueue nothing run too */
        KPT_OK(kp_stream_sync(s));
        kp_stream_destroy(s);
        kp_tasks_destroy(t);
    }
    for (int b = 0; b < 3; b++) kp_free(g_dev, mem[b]);
}

/* Does a region name one element twice? */
static bool aliases(const kp_tensor_desc *d, size_t elems) {
    unsigned char *seen = calloc(elems, 1);
    int64_t n = kp_desc_numel(d);
    bool twice = false;
    for (int64_t i = 0; i < n && !twice; i++) {
        int64_t at = d->offset, r = i;
        for (int k = d->ndim - 1; k >= 0; k--) {
            at += (r % d->shape[k]) * d->strides[k];
            r /= d->shape[k];
        }
        twice = seen[at]++ != 0;
    }
    free(seen);
    return twice;
}

/* Random f32 tasks y = c + a y + b x over 2-D regions of two buffers of
 * `elems` floats, run over a stream pool, against the same tasks one by one
 * on host copies. Coefficients and values are small integers: every result
 * is exact on any device. Three sets in a row on the same buffers. */
static void check_sequential(size_t elems, int side, int n_tasks, size_t n_streams, form f) {
    float *host[2], *ref[2], *got;
    void *dev[2];
    size_t bytes = elems * sizeof(float);
    got = malloc(bytes);
    for (int b = 0; b < 2; b++) {
        host[b] = malloc(bytes);
        ref[b] = malloc(bytes);
        for (size_t i = 0; i < elems; i++) host[b][i] = (float)(kpt_rand(&g_seed) % 7) - 3.0f;
        memcpy(ref[b], host[b], bytes);
        KPT_OK(kp_malloc(g_dev, bytes, &dev[b]));
        KPT_OK(kp_memcpy_htod(g_dev, dev[b], host[b], bytes));
    }
    kp_tasks_t t;
    kp_stream_t s;
    KPT_OK(kp_tasks_create(g_dev, n_streams, &t));
    KPT_OK(kp_stream_create(g_dev, &s));
    uint32_t ids[2];
    for (int b = 0; b < 2; b++) KPT_OK(kp_tasks_buffer_wrap(t, dev[b], bytes, &ids[b]));
    float *abc = malloc((size_t)n_tasks * 3 * sizeof(float));
    for (int set = 0; set < 3; set++) {
        for (int i = 0; i < n_tasks; i++) {
            int yb = (int)(kpt_rand(&g_seed) % 2), xb = (int)(kpt_rand(&g_seed) % 2);
            kp_tensor_desc yd = random_region(KP_F32, bytes, side), xd;
            bool with_x = kpt_rand(&g_seed) % 3 != 0;
            for (int tries = 0;; tries++) {   /* x: y's shape, not overlapping y */
                if (tries == 20) xb = 1 - yb; /* none fits beside y: the other buffer */
                xd = random_region(KP_F32, bytes, side);
                xd.ndim = yd.ndim;
                memcpy(xd.shape, yd.shape, sizeof yd.shape);
                xd.offset = 0;
                int64_t need = kp_desc_bytes_needed(&xd);
                if (need > (int64_t)bytes) continue;
                xd.offset =
                    (int64_t)(kpt_rand(&g_seed) % (uint64_t)(((int64_t)bytes - need) / 4 + 1));
                if (!with_x || xb != yb || kp_desc_overlap(&xd, &yd) == KP_OVERLAP_NONE) break;
            }
            float *c = &abc[3 * i];
            c[0] = (float)(kpt_rand(&g_seed) % 3) - 1.0f; /* -1, 0 (y written only), 1 */
            c[1] = kpt_rand(&g_seed) % 2 ? 1.0f : -1.0f;
            c[2] = (float)(kpt_rand(&g_seed) % 5) - 2.0f;
            /* an element y holds twice (a stride 0, or strides that meet) must not
             * be read-modify-written by two threads at once: such tasks only
             * write (a = 0, no x), the same value everywhere */
            if (aliases(&yd, elems)) c[0] = 0, with_x = false;
            kp_task_arg a[3] = {tensor(c[0] != 0 ? KP_TASK_INOUT : KP_TASK_OUT, ids[yb], &yd),
                                tensor(KP_TASK_IN, ids[xb], &xd), scalar3(c)};
            if (!with_x) a[1] = a[2];
            KPT_OK(kp_tasks_submit(t, form_kernel(f), a, with_x ? 3 : 2, NULL));
            kpt_region_params p = {0};
            assert_true(
                kpt_region_make(&p, ref[yb], &yd, with_x ? ref[xb] : NULL, &xd, c[0], c[1], c[2]));
            /* a write-only region with repeats gets the same value everywhere: any order */
            for (int64_t e = 0; e < p.n; e++) kpt_region_item(&p, e);
        }
        KPT_OK(form_go(t, f, s));
    }
    KPT_OK(kp_stream_sync(s));
    for (int b = 0; b < 2; b++) {
        KPT_OK(kp_memcpy_dtoh(g_dev, got, dev[b], bytes));
        for (size_t i = 0; i < elems; i++)
            if (got[i] != ref[b][i])
                fail_msg("%s, %zu floats, %zu streams: buffer %d element %zu: %g, want %g",
                         form_names[f], elems, n_streams, b, i, got[i], ref[b][i]);
        kp_free(g_dev, dev[b]);
        free(host[b]);
        free(ref[b]);
    }
    free(got);
    free(abc);
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
}

static void results_equal_sequential(void **state) {
    for (form f = FORM_RUN; f <= FORM_GRAPH_LAUNCH; f++) {
        check_sequential(1, 1, 20, 2, f);
        check_sequential(97, 9, 200, 4, f);
        check_sequential(4099, 40, 300, 3, f);
        check_sequential((size_t)1 << 20, 700, 40, 4, f); /* a million floats */
    }
}

/* The graph form replayed: the same tasks submitted again with new scalars
 * and another buffer update the executable graph (no rebuild), and the
 * launches compute with the new values; a set of another shape builds a
 * new graph. Every element checked after each step. */
static void graph_updates_on_replay(void **state) {
    for (int fi = 0; fi < 2; fi++) {
        const kp_task_kernel *k = fi ? &k_region_launch : &k_region;
        const int64_t n = 1 << 20, half = n / 2; /* a million floats */
        size_t bytes = (size_t)n * 4;
        void *mem[2];
        float *h = malloc(bytes), *want = malloc(bytes);
        for (int b = 0; b < 2; b++) {
            KPT_OK(kp_malloc(g_dev, bytes, &mem[b]));
            for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 5);
            KPT_OK(kp_memcpy_htod(g_dev, mem[b], h, bytes));
        }
        kp_tasks_t t;
        kp_stream_t s;
        KPT_OK(kp_tasks_create(g_dev, 3, &t));
        KPT_OK(kp_stream_create(g_dev, &s));
        uint32_t id[2];
        for (int b = 0; b < 2; b++) KPT_OK(kp_tasks_buffer_wrap(t, mem[b], bytes, &id[b]));
        kp_tensor_desc lo, hi;
        KPT_OK(kp_desc_init(&lo, KP_F32, 1, &half, NULL));
        hi = lo;
        hi.offset = half;
        /* y[lo] = c + y[lo]; y[hi] = y[hi] + y[lo]  (then c changes, then buffer) */
        for (int step = 0; step < 3; step++) {
            int b = step == 2;
            float c1[3] = {1, 0, (float)(step + 1)}, c2[3] = {1, 1, 0};
            kp_task_arg a1[2] = {tensor(KP_TASK_INOUT, id[b], &lo), scalar3(c1)};
            kp_task_arg a2[3] = {tensor(KP_TASK_INOUT, id[b], &hi), tensor(KP_TASK_IN, id[b], &lo),
                                 scalar3(c2)};
            KPT_OK(kp_tasks_submit(t, k, a1, 2, NULL));
            KPT_OK(kp_tasks_submit(t, k, a2, 3, NULL));
            KPT_OK(kp_tasks_instantiate(t));
            kp_tasks_stats st;
            KPT_OK(kp_tasks_stats_get(t, &st));
            assert_int_equal(st.graph_builds, 1);
            assert_int_equal(st.graph_updates, (uint64_t)step);
            KPT_OK(kp_tasks_launch(t, s));
            KPT_OK(kp_tasks_launch(t, s)); /* twice */
            KPT_OK(kp_stream_sync(s));
            KPT_OK(kp_memcpy_dtoh(g_dev, h, mem[b], bytes));
            for (int64_t i = 0; i < half; i++) { /* from the values the step started with */
                float y0 = step == 1 ? want[i] : (float)(i % 5);
                float z0 = step == 1 ? want[half + i] : (float)((half + i) % 5);
                float c = (float)(step + 1);
                want[i] = y0 + 2 * c;
                want[half + i] = z0 + (y0 + c) + (y0 + 2 * c);
            }
            for (int64_t i = 0; i < n; i++)
                if (h[i] != want[i])
                    fail_msg("%s, step %d: element %lld is %g, want %g",
                             k->launch ? "launch" : "fn", step, (long long)i, h[i], want[i]);
        }
        /* another shape: one task only, a new graph */
        float c3[3] = {0, 0, 7};
        kp_task_arg a3[2] = {tensor(KP_TASK_OUT, id[0], &lo), scalar3(c3)};
        KPT_OK(kp_tasks_submit(t, k, a3, 2, NULL));
        KPT_OK(kp_tasks_instantiate(t));
        kp_tasks_stats st;
        KPT_OK(kp_tasks_stats_get(t, &st));
        assert_int_equal(st.graph_builds, 2);
        KPT_OK(kp_tasks_launch(t, s));
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(g_dev, h, mem[0], bytes));
        for (int64_t i = 0; i < half; i++) assert_true(h[i] == 7.0f);
        kp_stream_destroy(s);
        kp_tasks_destroy(t);
        for (int b = 0; b < 2; b++) kp_free(g_dev, mem[b]);
        free(h);
        free(want);
    }
}

/* A deferred buffer: refused reads and partial first writes, then allocated
 * by its first whole write; wrapped buffers are never allocated here. */
static void deferred_allocation(void **state) {
    kp_tasks_t t;
    kp_stream_t s;
    KPT_OK(kp_tasks_create(g_dev, 2, &t));
    KPT_OK(kp_stream_create(g_dev, &s));
    uint32_t b;
    const int64_t n = 1000;
    KPT_OK(kp_tasks_buffer(t, (size_t)n * 4, &b));
    void *data = (void *)1;
    KPT_OK(kp_tasks_buffer_data(t, b, &data));
    assert_null(data);
    kp_tensor_desc whole, half, strided;
    KPT_OK(kp_desc_init(&whole, KP_F32, 1, &n, NULL));
    half = whole;
    half.shape[0] = n / 2;
    int64_t sh[1] = {n / 2}, st[1] = {2};
    KPT_OK(kp_desc_init(&strided, KP_F32, 1, sh, st));
    float c[3] = {0, 0, 5};
    kp_task_arg a[2] = {tensor(KP_TASK_IN, b, &whole), scalar3(c)};
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "read before any task wrote it"));
    a[0] = tensor(KP_TASK_INOUT, b, &whole);
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    a[0] = tensor(KP_TASK_OUT, b, &half);
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "contiguously"));
    a[0] = tensor(KP_TASK_OUT, b, &strided); /* spans the buffer, with gaps */
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    KPT_OK(kp_tasks_buffer_data(t, b, &data));
    assert_null(data); /* the refusals allocated nothing */
    a[0] = tensor(KP_TASK_OUT, b, &whole);
    KPT_OK(kp_tasks_submit(t, &k_region, a, 2, NULL));
    KPT_OK(kp_tasks_buffer_data(t, b, &data));
    assert_non_null(data);
    float c2[3] = {1, 0, 1}; /* then y += 1 on half of it */
    kp_task_arg a2[2] = {tensor(KP_TASK_INOUT, b, &half), scalar3(c2)};
    KPT_OK(kp_tasks_submit(t, &k_region, a2, 2, NULL));
    KPT_OK(kp_tasks_run(t, s));
    KPT_OK(kp_stream_sync(s));
    float *h = malloc((size_t)n * 4);
    KPT_OK(kp_memcpy_dtoh(g_dev, h, data, (size_t)n * 4));
    for (int64_t i = 0; i < n; i++) assert_true(h[i] == (i < n / 2 ? 6.0f : 5.0f));
    free(h);
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
}

/* In-place updates make versions; each reader sees the one its place in
 * the program implies, though it may run on another stream. */
static void readers_see_their_version(void **state) {
    const int64_t n = 4096, k = 12;
    kp_tasks_t t;
    kp_stream_t s;
    KPT_OK(kp_tasks_create(g_dev, 4, &t));
    KPT_OK(kp_stream_create(g_dev, &s));
    uint32_t y, snap;
    KPT_OK(kp_tasks_buffer(t, (size_t)n * 4, &y));
    KPT_OK(kp_tasks_buffer(t, (size_t)(n * k) * 4, &snap));
    kp_tensor_desc whole, all_snaps, row;
    KPT_OK(kp_desc_init(&whole, KP_F32, 1, &n, NULL));
    int64_t ks[1] = {n * k};
    KPT_OK(kp_desc_init(&all_snaps, KP_F32, 1, ks, NULL));
    static const float zero[3] = {0, 0, 0}, inc[3] = {1, 0, 1}, copy[3] = {0, 1, 0};
    kp_task_arg a[3] = {tensor(KP_TASK_OUT, y, &whole), scalar3(zero)};
    KPT_OK(kp_tasks_submit(t, &k_region, a, 2, NULL));
    a[0] = tensor(KP_TASK_OUT, snap, &all_snaps);
    KPT_OK(kp_tasks_submit(t, &k_region, a, 2, NULL));
    for (int64_t v = 0; v < k; v++) {
        a[0] = tensor(KP_TASK_INOUT, y, &whole);
        a[1] = scalar3(inc);
        KPT_OK(kp_tasks_submit(t, &k_region, a, 2, NULL)); /* y += 1 */
        row = whole;
        row.offset = v * n;
        kp_task_arg c[3] = {tensor(KP_TASK_OUT, snap, &row), tensor(KP_TASK_IN, y, &whole),
                            scalar3(copy)};
        KPT_OK(kp_tasks_submit(t, &k_region, c, 3, NULL)); /* snapshot v = y */
    }
    KPT_OK(kp_tasks_write_dot(t, "test_tasks.dot"));
    FILE *f = fopen("test_tasks.dot", "r");
    assert_non_null(f);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = '\0';
    fclose(f);
    assert_non_null(strstr(buf, "digraph tasks"));
    assert_non_null(strstr(buf, "RAW b1"));
    assert_non_null(strstr(buf, "inout b1 v2"));
    remove("test_tasks.dot");
    KPT_OK(kp_tasks_run(t, s));
    KPT_OK(kp_stream_sync(s));
    void *data;
    KPT_OK(kp_tasks_buffer_data(t, snap, &data));
    float *h = malloc((size_t)(n * k) * 4);
    KPT_OK(kp_memcpy_dtoh(g_dev, h, data, (size_t)(n * k) * 4));
    for (int64_t v = 0; v < k; v++)
        for (int64_t i = 0; i < n; i++)
            if (h[v * n + i] != (float)(v + 1))
                fail_msg("snapshot %lld element %lld: %g, want %lld", (long long)v, (long long)i,
                         h[v * n + i], (long long)(v + 1));
    free(h);
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
}

/* Repeated work on the same tiles keeps the index at a region per tile and
 * a few exact tests per task, however long the history; a chain of
 * in-place updates keeps one edge per task. */
static void index_stays_small(void **state) {
    kp_tasks_t t;
    KPT_OK(kp_tasks_create(g_dev, 2, &t));
    uint32_t b;
    void *mem;
    const int64_t tiles = 64, tile = 256;
    KPT_OK(kp_malloc(g_dev, (size_t)(tiles * tile) * 4, &mem));
    KPT_OK(kp_tasks_buffer_wrap(t, mem, (size_t)(tiles * tile) * 4, &b));
    kp_tensor_desc d;
    KPT_OK(kp_desc_init(&d, KP_F32, 1, &tile, NULL));
    for (int sweep = 0; sweep < 40; sweep++)
        for (int64_t i = 0; i < tiles; i++) {
            d.offset = i * tile;
            kp_task_arg a = tensor(KP_TASK_INOUT, b, &d);
            KPT_OK(kp_tasks_submit(t, &k_nothing, &a, 1, NULL));
        }
    kp_tasks_stats st;
    KPT_OK(kp_tasks_stats_get(t, &st));
    assert_int_equal(st.tasks, 40 * tiles);
    assert_int_equal(st.regions_live, tiles);
    assert_int_equal(st.edges, 39 * tiles); /* each tile's chain */
    assert_true(st.overlap_tests <= 2 * st.tasks);
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_tasks_run(t, s));
    KPT_OK(kp_stream_sync(s));
    /* a reader of everything after writers of every tile: one edge per tile,
     * and a writer of everything after it prunes nothing it does not imply */
    kp_tensor_desc all;
    int64_t nall = tiles * tile;
    KPT_OK(kp_desc_init(&all, KP_F32, 1, &nall, NULL));
    for (int64_t i = 0; i < tiles; i++) {
        d.offset = i * tile;
        kp_task_arg a = tensor(KP_TASK_OUT, b, &d);
        KPT_OK(kp_tasks_submit(t, &k_nothing, &a, 1, NULL));
    }
    kp_task_arg r = tensor(KP_TASK_IN, b, &all), w = tensor(KP_TASK_OUT, b, &all);
    KPT_OK(kp_tasks_submit(t, &k_nothing, &r, 1, NULL));
    KPT_OK(kp_tasks_submit(t, &k_nothing, &w, 1, NULL));
    KPT_OK(kp_tasks_stats_get(t, &st));
    /* reader: 64 RAW; writer: WAR on the reader, WAW on the 64 writers, implied */
    assert_int_equal(st.edges, tiles + 1);
    assert_int_equal(st.edges_found, tiles + tiles + 1);
    assert_int_equal(st.regions_live, 1);
    KPT_OK(kp_tasks_run(t, s));
    KPT_OK(kp_stream_sync(s));
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
    kp_free(g_dev, mem);
}

/* An index over several of its 2 MiB slabs (each holds some 4,700 nodes;
 * 200,000 regions take about 13,000): every update of a random region
 * must find exactly one hazard, on the last task that touched it, and a
 * reader of a run of regions one per region updated there. A node handed
 * out of the wrong slab, or a walk through a stale one, breaks a count. */
static void index_spans_slabs(void **state) {
    const int64_t live = 200000, updates = 30000, sixteen = 16;
    kp_tasks_t t;
    KPT_OK(kp_tasks_create(g_dev, 1, &t));
    void *mem;
    uint32_t b;
    KPT_OK(kp_malloc(g_dev, (size_t)live * 64, &mem));
    KPT_OK(kp_tasks_buffer_wrap(t, mem, (size_t)live * 64, &b));
    kp_tensor_desc d;
    KPT_OK(kp_desc_init(&d, KP_F32, 1, &sixteen, NULL));
    for (int64_t j = 0; j < live; j++) { /* a reader of every region */
        d.offset = j * 16;
        kp_task_arg a = tensor(KP_TASK_IN, b, &d);
        KPT_OK(kp_tasks_submit(t, &k_nothing, &a, 1, NULL));
    }
    bool *updated = calloc((size_t)live, sizeof *updated);
    assert_non_null(updated);
    kp_tasks_stats before, after;
    for (int64_t k = 0; k < updates; k++) {
        int64_t r = (int64_t)(kpt_rand(&g_seed) % (uint64_t)live);
        d.offset = r * 16;
        kp_task_arg a = tensor(KP_TASK_INOUT, b, &d);
        KPT_OK(kp_tasks_stats_get(t, &before));
        KPT_OK(kp_tasks_submit(t, &k_nothing, &a, 1, NULL));
        KPT_OK(kp_tasks_stats_get(t, &after));
        assert_int_equal(after.edges_found - before.edges_found, 1);
        assert_int_equal(after.regions_live, live);
        updated[r] = true;
    }
    const int64_t first = live / 3, run = 5000;
    uint64_t want = 0;
    for (int64_t j = first; j < first + run; j++) want += updated[j];
    int64_t n = run * 16;
    kp_tensor_desc all;
    KPT_OK(kp_desc_init(&all, KP_F32, 1, &n, NULL));
    all.offset = first * 16;
    kp_task_arg a = tensor(KP_TASK_IN, b, &all);
    KPT_OK(kp_tasks_stats_get(t, &before));
    KPT_OK(kp_tasks_submit(t, &k_nothing, &a, 1, NULL));
    KPT_OK(kp_tasks_stats_get(t, &after));
    assert_true(want > 0);
    assert_int_equal(after.edges_found - before.edges_found, want);
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_tasks_run(t, s));
    KPT_OK(kp_stream_sync(s));
    kp_stream_destroy(s);
    kp_tasks_destroy(t);
    kp_free(g_dev, mem);
    free(updated);
}

static kp_status failing(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    return kp_set_error(KP_ERR_DEVICE, "the kernel said no");
}

/* Pruning: a strided write, a reader of it, then a strided write that
 * meets both but covers neither exactly. The third depends on the first
 * (WAW) and the second (WAR); the first is implied through the second. */
static void implied_edges_are_pruned(void **state) {
    kp_tasks_t t;
    KPT_OK(kp_tasks_create(g_dev, 2, &t));
    void *mem;
    KPT_OK(kp_malloc(g_dev, 256, &mem));
    uint32_t b;
    KPT_OK(kp_tasks_buffer_wrap(t, mem, 256, &b));
    int64_t sh[1] = {8}, st2[1] = {2};
    kp_tensor_desc even, shifted;
    KPT_OK(kp_desc_init(&even, KP_F32, 1, sh, st2)); /* elements 0, 2, .. 14 */
    shifted = even;
    shifted.shape[0] = 4; /* elements 8, 10, 12, 14 */
    shifted.offset = 8;
    kp_task_arg w1 = tensor(KP_TASK_OUT, b, &even), r = tensor(KP_TASK_IN, b, &even),
                w2 = tensor(KP_TASK_OUT, b, &shifted);
    KPT_OK(kp_tasks_submit(t, &k_nothing, &w1, 1, NULL));
    KPT_OK(kp_tasks_submit(t, &k_nothing, &r, 1, NULL));
    KPT_OK(kp_tasks_submit(t, &k_nothing, &w2, 1, NULL));
    kp_tasks_stats st;
    KPT_OK(kp_tasks_stats_get(t, &st));
    assert_int_equal(st.edges_found, 3);
    assert_int_equal(st.edges, 2);
    kp_task_edge e[4];
    size_t n = 0;
    KPT_OK(kp_tasks_edges(t, e, 4, &n));
    assert_int_equal(n, 2);
    assert_true(e[0].from == 0 && e[0].to == 1 && e[0].hazard == KP_HAZARD_RAW);
    assert_true(e[1].from == 1 && e[1].to == 2 && e[1].hazard == KP_HAZARD_WAR);
    kp_tasks_destroy(t);
    kp_free(g_dev, mem);
}

static kp_status no_kernel(void *user, const kp_task_view *v, size_t n, kp_launch *l, void *p) {
    return KP_OK;
}

static void named_errors(void **state) {
    kp_tasks_t t = NULL;
    KPT_FAILS(kp_tasks_create(g_dev, 0, &t), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tasks_create(g_dev, KP_TASKS_MAX_STREAMS + 1, &t), KP_ERR_INVALID_ARG);
    KPT_OK(kp_tasks_create(g_dev, 1, &t));
    uint32_t b;
    KPT_FAILS(kp_tasks_buffer(t, 0, &b), KP_ERR_INVALID_ARG);
    KPT_OK(kp_tasks_buffer(t, 64, &b));
    int64_t n16 = 16, n17 = 17;
    kp_tensor_desc d16, d17;
    KPT_OK(kp_desc_init(&d16, KP_F32, 1, &n16, NULL));
    KPT_OK(kp_desc_init(&d17, KP_F32, 1, &n17, NULL));
    float c[3] = {0, 0, 1};
    kp_task_arg a[3] = {tensor(KP_TASK_OUT, 99, &d16), scalar3(c)};
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_NOT_FOUND);
    assert_non_null(strstr(kp_last_error(), "no buffer 99"));
    a[0] = tensor(KP_TASK_OUT, b, &d17); /* 68 bytes of 64 */
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "reaches byte 68 of buffer 1, which has 64"));
    kp_tensor_desc off = d16;
    off.offset = 1; /* 4 .. 68 */
    a[0] = tensor(KP_TASK_OUT, b, &off);
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    a[0] = tensor(KP_TASK_OUT, b, &d16);
    a[1] = scalar3(c);
    a[1].buffer = b; /* a scalar used as a tensor */
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "a SCALAR names buffer 1"));
    a[1] = scalar3(c);
    a[0].scalar = c; /* a tensor carrying a scalar */
    a[0].scalar_bytes = 4;
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "carries a scalar"));
    a[0] = tensor(KP_TASK_OUT, b, &d16);
    a[1].scalar_bytes = KP_TASK_MAX_SCALAR + 1;
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    a[1] = scalar3(c);
    a[0].access = (kp_task_access)9;
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    a[0] = tensor(KP_TASK_OUT, b, &d16);
    a[0].desc.ndim = 9;
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    a[0] = tensor(KP_TASK_OUT, b, &d16);
    KPT_FAILS(kp_tasks_submit(t, NULL, a, 2, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tasks_submit(t, &k_region, NULL, 2, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, KP_TASK_MAX_ARGS + 1, NULL), KP_ERR_INVALID_ARG);
    kp_tasks_stats st;
    KPT_OK(kp_tasks_stats_get(t, &st));
    assert_int_equal(st.tasks, 0); /* every refusal left the set as it was */
    /* a failing task: the run returns its error, named, and the set is spent */
    static const kp_task_kernel bad = {"bad", failing, NULL, NULL};
    KPT_OK(kp_tasks_submit(t, &bad, a, 2, NULL));
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_FAILS(kp_tasks_run(t, s), KP_ERR_DEVICE);
    assert_non_null(strstr(kp_last_error(), "task 0 (bad)"));
    assert_non_null(strstr(kp_last_error(), "the kernel said no"));
    KPT_OK(kp_tasks_stats_get(t, &st));
    assert_int_equal(st.tasks, 0);
    KPT_OK(kp_tasks_submit(t, &bad, a, 2, NULL)); /* in the graph form: named too */
    KPT_FAILS(kp_tasks_instantiate(t), KP_ERR_DEVICE);
    assert_non_null(strstr(kp_last_error(), "task 0 (bad)"));
    KPT_FAILS(kp_tasks_launch(t, s), KP_ERR_STATE); /* no graph was made */
    static const kp_task_kernel nokernel = {"nokernel", NULL, NULL, no_kernel};
    KPT_OK(kp_tasks_submit(t, &nokernel, a, 2, NULL));
    KPT_FAILS(kp_tasks_run(t, s), KP_ERR_INVALID_ARG);
    assert_non_null(
        strstr(kp_last_error(), "task 0 (nokernel): its launch function gave no kernel"));
    KPT_OK(kp_stream_sync(s));
    kp_stream_destroy(s);
    /* after destroy, the handle is refused, not used */
    kp_tasks_destroy(t);
    KPT_FAILS(kp_tasks_submit(t, &k_region, a, 2, NULL), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "not live"));
    KPT_FAILS(kp_tasks_buffer(t, 64, &b), KP_ERR_INVALID_ARG);
    kp_tasks_destroy(t); /* twice: nothing */
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: task tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_sets_match_brute_force),
        cmocka_unit_test(results_equal_sequential),
        cmocka_unit_test(graph_updates_on_replay),
        cmocka_unit_test(deferred_allocation),
        cmocka_unit_test(readers_see_their_version),
        cmocka_unit_test(index_stays_small),
        cmocka_unit_test(implied_edges_are_pruned),
        cmocka_unit_test(named_errors),
        cmocka_unit_test(index_spans_slabs),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
