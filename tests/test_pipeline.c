/* Pipeline framework tests: the seed's sample in both modes, DAGs, sizes,
 * zero-copy decisions, memory figures, lifecycle misuse and bad specs. Each
 * numeric case runs on the device under test and on cpu, and is checked
 * against host arithmetic. argv[1]: cpu (default) or cuda (exit 77 = SKIP
 * without a GPU). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev, g_cpu;

/* --- a test module: passes its input through (its output address is the
 * input's, so it changes whenever the input's does). It fills only the three
 * required slots; in graph mode its node is the pipeline's default capture
 * of execute(), which enqueues nothing. ------------------------------------ */
typedef struct tap {
    int64_t n;
    kp_dtype dt;
} tap;

static void tap_destroy(void *self) { free(self); }
static kp_status tap_io(void *self, const kp_module_io *io) {
    tap *t = self;
    io->outputs[0].data = io->inputs[0].data;
    return kp_desc_init(&io->outputs[0].desc, t->dt, 1, &t->n, NULL);
}
static kp_status tap_execute(void *self, kp_stream_t s) { return KP_OK; }
static const kp_module_i tap_iface = {.destroy = tap_destroy, .io = tap_io, .execute = tap_execute};
static kp_status tap_create(const kp_module_env *env, kp_module_def *def) {
    int64_t n;
    const char *dt;
    kp_dtype dtype;
    kp_status st = kp_param_int(env, "size", false, 0, &n);
    if (st == KP_OK) st = kp_param_str(env, "dtype", "f32", &dt);
    if (st == KP_OK) st = kp_dtype_parse(dt, &dtype);
    if (st != KP_OK) return st;
    tap *t = calloc(1, sizeof *t);
    t->n = n;
    t->dt = dtype;
    def->iface = &tap_iface;
    def->self = t;
    def->n_inputs = def->n_outputs = 1;
    def->live_inputs = 1;     /* it only passes the address on */
    def->dynamic_outputs = 1; /* ... so its output moves with its input */
    kp_port_decl_1d(&def->inputs[0], "in", dtype, n);
    return kp_port_decl_1d(&def->outputs[0], "out", dtype, n);
}

/* --- specs ------------------------------------------------------------------------ */
static char *sample_json(const char *mode, int n) {
    static char buf[1024];
    snprintf(
        buf, sizeof buf,
        "{\"kpipe_spec\": 1, \"name\": \"sample\", \"execution\": \"%s\",\n"
        " \"modules\": [{\"type\": \"engine\", \"id\": \"module_a\", \"params\": {\"size\": %d}},\n"
        "             {\"type\": \"relu\", \"id\": \"module_b\", \"params\": {\"size\": %d}}],\n"
        " \"connections\": [\"module_a.result0 -> module_b.input\"],\n"
        " \"inputs\": {\"input0\": \"module_a.arg0\", \"input1\": \"module_a.arg1\"},\n"
        " \"outputs\": {\"output\": \"module_b.output\"}}",
        mode, n, n);
    return buf;
}

static char *dag_json(const char *mode, int n) {
    static char buf[1024];
    snprintf(
        buf, sizeof buf,
        "{\"kpipe_spec\": 1, \"name\": \"dag\", \"execution\": \"%s\",\n"
        " \"modules\": [{\"type\": \"engine\", \"id\": \"join\", \"params\": {\"size\": %d}},\n"
        "             {\"type\": \"relu\", \"id\": \"left\", \"params\": {\"size\": %d}},\n"
        "             {\"type\": \"relu\", \"id\": \"right\", \"params\": {\"size\": %d}}],\n"
        " \"connections\": [{\"from\": \"left.output\", \"to\": \"join.arg0\"},\n"
        "                   \"right.output->join.arg1\"],\n"
        " \"inputs\": {\"input0\": \"left.input\", \"input1\": \"right.input\"},\n"
        " \"outputs\": {\"output\": \"join.result0\"}}",
        mode, n, n, n);
    return buf;
}

static char *relu_json(const char *mode, int n) {
    static char buf[512];
    snprintf(buf, sizeof buf,
             "{\"kpipe_spec\": 1, \"execution\": \"%s\", \"modules\": [{\"type\": \"relu\", "
             "\"id\": \"r\", \"params\": {\"size\": %d}}], \"inputs\": {\"input0\": \"r.input\"}, "
             "\"outputs\": {\"output\": \"r.output\"}}",
             mode, n);
    return buf;
}

/* --- running a pipeline for some ticks ------------------------------------------- */
typedef enum { WANT_SAMPLE, WANT_DAG, WANT_RELU, WANT_ADD } want_kind;

typedef struct run_cfg {
    const char *json; /* or */
    const kp_pipeline_spec *spec;
    want_kind want;
    int n, ticks, n_inputs;
    int range;       /* 0: uniform [-1, 1); else integers in [-range, range) */
    bool edit_ticks; /* ticks 2+: first 256 elements -10 and +5 */
} run_cfg;

static float expect(want_kind w, float a, float b) {
    switch (w) {
    case WANT_SAMPLE: return fmaxf(a + b, 0.0f);
    case WANT_DAG: return fmaxf(a, 0.0f) + fmaxf(b, 0.0f);
    case WANT_ADD: return a + b;
    default: return fmaxf(a, 0.0f);
    }
}

static void gen(const run_cfg *c, float *h, int tick, int which, uint64_t *seed) {
    for (int i = 0; i < c->n; i++)
        h[i] = c->range ? (float)((int64_t)(kpt_rand(seed) % (uint64_t)(2 * c->range)) - c->range)
                        : kpt_randf(seed);
    if (c->edit_ticks && tick >= 1)
        for (int i = 0; i < c->n && i < 256; i++) h[i] = which == 0 ? -10.0f : 5.0f;
}

/* Runs and checks every tick on the host; the last output goes to `last`. */
static void run_pipeline(kp_device_t dev, const run_cfg *c, uint64_t seed, float *last) {
    kp_pipeline_t p;
    kp_stream_t s;
    size_t bytes = (size_t)c->n * sizeof(float);
    if (c->json)
        KPT_OK(kp_pipeline_create_from_json(dev, c->json, &p));
    else
        KPT_OK(kp_pipeline_create(dev, c->spec, &p));
    KPT_OK(kp_stream_create(dev, &s));
    KPT_OK(kp_pipeline_setup(p));
    /* Two sets of input buffers, alternated per tick: input addresses change
     * every tick, as with a user's ring of buffers. */
    float *d[2][2] = {{NULL, NULL}, {NULL, NULL}}, *h[2], *out = malloc(bytes);
    kp_port_info in[2];
    int64_t n64 = c->n;
    for (int k = 0; k < c->n_inputs; k++) {
        KPT_OK(kp_malloc(dev, bytes, (void **)&d[0][k]));
        KPT_OK(kp_malloc(dev, bytes, (void **)&d[1][k]));
        h[k] = malloc(bytes);
        in[k].name = k ? "input1" : "input0";
        KPT_OK(kp_desc_init(&in[k].desc, KP_F32, 1, &n64, NULL));
    }
    kp_port_info o = {"output", NULL, {0}};
    size_t nodes = 0;
    for (int t = 0; t < c->ticks; t++) {
        for (int k = 0; k < c->n_inputs; k++) {
            gen(c, h[k], t, k, &seed);
            in[k].data = d[t % 2][k];
            KPT_OK(kp_memcpy_htod(dev, d[t % 2][k], h[k], bytes));
        }
        KPT_OK(kp_pipeline_configure_io(p, in, (size_t)c->n_inputs, &o, 1, s));
        assert_non_null(o.data);
        if (t == 0) {
            KPT_OK(kp_pipeline_warmup(p, s));
            if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) KPT_OK(kp_pipeline_build_graph(p));
        }
        kp_pipeline_report r;
        KPT_OK(kp_pipeline_report_get(p, &r));
        if (t == 0) nodes = r.graph_nodes;
        assert_int_equal(r.graph_nodes, nodes); /* built once, never rebuilt */
        if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) {
            KPT_OK(kp_pipeline_execute_graph(p, s));
        } else {
            KPT_OK(kp_pipeline_execute_stream(p, s));
        }
        KPT_OK(kp_stream_sync(s));
        KPT_OK(kp_memcpy_dtoh(dev, out, o.data, bytes));
        for (int i = 0; i < c->n; i++) {
            float want = expect(c->want, h[0][i], c->n_inputs > 1 ? h[1][i] : 0.0f);
            if (out[i] != want) {
                print_error("%s tick %d element %d: got %g, want %g\n", kp_device_name(dev), t, i,
                            (double)out[i], (double)want);
                fail();
            }
        }
        if (c->edit_ticks && t >= 1)
            for (int i = 0; i < c->n && i < 256; i++) assert_true(out[i] == 0.0f);
    }
    memcpy(last, out, bytes);
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
    for (int k = 0; k < c->n_inputs; k++) {
        kp_free(dev, d[0][k]);
        kp_free(dev, d[1][k]);
        free(h[k]);
    }
    free(out);
}

/* Runs on the device under test and on cpu; both were checked on the host
 * tick by tick, and the last outputs must agree exactly. */
static void run_both(const run_cfg *c) {
    float *a = malloc((size_t)c->n * sizeof(float)), *b = malloc((size_t)c->n * sizeof(float));
    run_pipeline(g_dev, c, 42, a);
    if (g_dev != g_cpu) {
        run_pipeline(g_cpu, c, 42, b);
        assert_true(kpt_close(a, b, c->n, 0.0, "device vs cpu"));
    }
    free(a);
    free(b);
}

static void stream_mode_validates(void **state) {
    run_cfg c = {.json = sample_json("stream", 16384), .n = 16384, .ticks = 1, .n_inputs = 2};
    run_both(&c);
}

static void graph_mode_validates(void **state) {
    run_cfg c = {.json = sample_json("graph", 16384), .n = 16384, .ticks = 1, .n_inputs = 2};
    run_both(&c);
}

static void graph_mode_many_ticks_new_data(void **state) {
    run_cfg c = {.json = sample_json("graph", 16384),
                 .n = 16384,
                 .ticks = 6,
                 .n_inputs = 2,
                 .edit_ticks = true};
    run_both(&c);
    c.json = sample_json("stream", 16384);
    run_both(&c);
}

static void large_range(void **state) {
    for (int m = 0; m < 2; m++) {
        run_cfg c = {.json = sample_json(m ? "graph" : "stream", 16384),
                     .n = 16384,
                     .ticks = 3,
                     .n_inputs = 2,
                     .range = 8192};
        run_both(&c);
    }
}

/* Engine modules only: no descriptors at all, so no pinned staging (clang's
 * UBSan once caught setup computing NULL + 0 here). */
static void engine_only_no_descriptors(void **state) {
    const char *fmt =
        "{\"kpipe_spec\": 1, \"execution\": \"%s\", \"modules\": [{\"type\": \"engine\", "
        "\"id\": \"e\", \"params\": {\"size\": 777}}], \"inputs\": {\"input0\": \"e.arg0\", "
        "\"input1\": \"e.arg1\"}, \"outputs\": {\"output\": \"e.result0\"}}";
    for (int m = 0; m < 2; m++) {
        char json[512];
        snprintf(json, sizeof json, fmt, m ? "graph" : "stream");
        run_cfg c = {.json = json, .want = WANT_ADD, .n = 777, .ticks = 3, .n_inputs = 2};
        run_both(&c);
        kp_pipeline_t p;
        kp_pipeline_report r;
        KPT_OK(kp_pipeline_create_from_json(g_dev, json, &p));
        KPT_OK(kp_pipeline_report_get(p, &r));
        assert_int_equal(r.pinned_bytes, 0);
        assert_int_equal(r.static_desc_bytes + r.dynamic_desc_bytes, 0);
        kp_pipeline_destroy(p);
    }
}

static void relu_standalone(void **state) {
    for (int m = 0; m < 2; m++) {
        run_cfg c = {.json = relu_json(m ? "graph" : "stream", 5000),
                     .want = WANT_RELU,
                     .n = 5000,
                     .ticks = 3,
                     .n_inputs = 1};
        run_both(&c);
    }
}

static void sizes_not_multiple_of_block(void **state) {
    static const int sizes[] = {1, 1000, 16384, 1 << 24};
    for (size_t i = 0; i < 4; i++)
        for (int m = 0; m < 2; m++) {
            run_cfg c = {.json = sample_json(m ? "graph" : "stream", sizes[i]),
                         .n = sizes[i],
                         .ticks = 2,
                         .n_inputs = 2};
            run_both(&c);
        }
}

static void dag_parallel_branches(void **state) {
    for (int m = 0; m < 2; m++) {
        run_cfg c = {.json = dag_json(m ? "graph" : "stream", 3000),
                     .want = WANT_DAG,
                     .n = 3000,
                     .ticks = 2,
                     .n_inputs = 2};
        run_both(&c);
    }
    /* the branches have no edge between them; the join waits for both */
    kp_pipeline_t p;
    KPT_OK(kp_pipeline_create_from_json(g_dev, dag_json("graph", 64), &p));
    kp_module_report r[3];
    for (size_t i = 0; i < 3; i++) KPT_OK(kp_pipeline_module_report(p, i, &r[i]));
    assert_string_equal(r[0].id, "left");
    assert_string_equal(r[1].id, "right");
    assert_string_equal(r[2].id, "join"); /* declared first, runs last */
    assert_int_equal(r[0].n_graph_deps, 0);
    assert_int_equal(r[1].n_graph_deps, 0);
    assert_int_equal(r[2].n_graph_deps, 2);
    assert_string_equal(r[2].graph_deps[0], "left");
    assert_string_equal(r[2].graph_deps[1], "right");
    kp_pipeline_destroy(p);
}

/* The C form of the sample spec. */
static const kp_param size_param[] = {{"size", "16384"}};
static const kp_module_spec sample_modules[] = {{"engine", "module_a", size_param, 1, false},
                                                {"relu", "module_b", size_param, 1, false}};
static const kp_connection_spec sample_conns[] = {{"module_a.result0", "module_b.input"}};
static const kp_external_spec sample_ins[] = {{"input0", "module_a.arg0"},
                                              {"input1", "module_a.arg1"}};
static const kp_external_spec sample_outs[] = {{"output", "module_b.output"}};

static kp_pipeline_spec sample_spec(kp_exec_mode mode) {
    kp_pipeline_spec s = KP_PIPELINE_SPEC_INIT;
    s.name = "sample";
    s.modules = sample_modules;
    s.n_modules = 2;
    s.connections = sample_conns;
    s.n_connections = 1;
    s.inputs = sample_ins;
    s.n_inputs = 2;
    s.outputs = sample_outs;
    s.n_outputs = 1;
    s.mode = mode;
    return s;
}

static void json_and_c_specs_agree(void **state) {
    for (int m = 0; m < 2; m++) {
        kp_pipeline_spec spec = sample_spec(m ? KP_EXEC_GRAPH : KP_EXEC_STREAM);
        run_cfg cj = {.json = sample_json(m ? "graph" : "stream", 16384),
                      .n = 16384,
                      .ticks = 2,
                      .n_inputs = 2};
        run_cfg cc = {.spec = &spec, .n = 16384, .ticks = 2, .n_inputs = 2};
        float *a = malloc(16384 * sizeof(float)), *b = malloc(16384 * sizeof(float));
        run_pipeline(g_dev, &cj, 7, a);
        run_pipeline(g_dev, &cc, 7, b);
        assert_memory_equal(a, b, 16384 * sizeof(float));
        free(a);
        free(b);
    }
}

static void memory_figures(void **state) {
    static const size_t want[2] = {131072, 262144}; /* stream, graph: the seed's figures */
    for (int m = 0; m < 2; m++) {
        kp_pipeline_t p;
        kp_pipeline_report r;
        KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json(m ? "graph" : "stream", 16384), &p));
        KPT_OK(kp_pipeline_setup(p));
        KPT_OK(kp_pipeline_report_get(p, &r));
        assert_int_equal(r.tensor_bytes, want[m]);
        kp_module_report a, b;
        KPT_OK(kp_pipeline_module_report(p, 0, &a));
        KPT_OK(kp_pipeline_module_report(p, 1, &b));
        /* the engine's output; in graph mode the pipeline's copies of its two inputs */
        assert_int_equal(a.req.device_bytes, 65536);
        assert_int_equal(a.copy_bytes, m ? 131072 : 0);
        assert_int_equal(b.req.device_bytes, 65536);
        assert_int_equal(b.copy_bytes, 0);
        assert_true(r.static_desc_bytes > 0 && r.dynamic_desc_bytes > 0);
        assert_true(r.arena_bytes >= r.tensor_bytes + r.workspace_bytes + r.static_desc_bytes +
                                         r.dynamic_desc_bytes);
        kp_pipeline_destroy(p);
    }
}

static void expect_copy(kp_pipeline_t p, const char *to, bool zero_copy) {
    kp_pipeline_report r;
    KPT_OK(kp_pipeline_report_get(p, &r));
    for (size_t i = 0; i < r.n_connections; i++) {
        kp_connection_report c;
        KPT_OK(kp_pipeline_connection_report(p, i, &c));
        if (strcmp(c.to, to) != 0) continue;
        if (c.zero_copy != zero_copy) {
            print_error("%s -> %s: zero_copy %d, expected %d (%s)\n", c.from, c.to, c.zero_copy,
                        zero_copy, c.reason);
            fail();
        }
        assert_non_null(c.reason);
        return;
    }
    print_error("no connection to %s\n", to);
    fail();
}

/* upstream dynamic x downstream needs a fixed address */
static void zero_copy_decisions(void **state) {
    const char *json =
        "{\"kpipe_spec\": 1, \"execution\": \"graph\", \"modules\": ["
        "{\"type\": \"tap\", \"id\": \"t\", \"params\": {\"size\": 256}},"
        "{\"type\": \"engine\", \"id\": \"e1\", \"params\": {\"size\": 256}},"
        "{\"type\": \"engine\", \"id\": \"e2\", \"params\": {\"size\": 256}},"
        "{\"type\": \"relu\", \"id\": \"r1\", \"params\": {\"size\": 256}},"
        "{\"type\": \"relu\", \"id\": \"r2\", \"params\": {\"size\": 256}}],"
        "\"connections\": [\"t.out -> e1.arg1\", \"e1.result0 -> e2.arg0\", \"t.out -> r1.input\","
        "\"e1.result0 -> r2.input\"],"
        "\"inputs\": {\"x\": \"t.in\", \"y\": \"e1.arg0\", \"z\": \"e2.arg1\"},"
        "\"outputs\": {\"a\": \"e2.result0\", \"b\": \"r1.output\", \"c\": \"r2.output\"}}";
    kp_pipeline_t p;
    KPT_OK(kp_pipeline_create_from_json(g_dev, json, &p));
    expect_copy(p, "e1.arg0", false); /* external (dynamic) -> fixed: copy */
    expect_copy(p, "e1.arg1", false); /* dynamic module output -> fixed: copy */
    expect_copy(p, "e2.arg0", true);  /* fixed upstream -> fixed: zero-copy */
    expect_copy(p, "r1.input", true); /* dynamic -> reads each tick: zero-copy */
    expect_copy(p, "r2.input", true); /* fixed -> reads each tick: zero-copy */
    kp_pipeline_destroy(p);
    /* in stream mode the engine takes its addresses each tick: all zero-copy */
    kp_pipeline_t q;
    KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json("stream", 64), &q));
    expect_copy(q, "module_a.arg0", true);
    expect_copy(q, "module_b.input", true);
    kp_pipeline_destroy(q);
}

/* Ticks alternate between two streams with no host wait and a new input
 * buffer each tick, so descriptor staging slots are reused while uploads on
 * the other stream may still be pending (ThreadSanitizer watches the cpu
 * backend's workers here). The last tick, after both streams drained, must
 * be right. */
static void ticks_on_two_streams(void **state) {
    enum { N = 4096, BUFS = 4, TICKS = 300 };
    for (int m = 0; m < 2; m++) {
        kp_pipeline_t p;
        kp_stream_t s[2];
        float *d[BUFS], *h = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
        int64_t n = N;
        kp_port_info in = {"input0", NULL, {0}}, o = {"output", NULL, {0}};
        KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, &n, NULL));
        KPT_OK(kp_pipeline_create_from_json(g_dev, relu_json(m ? "graph" : "stream", N), &p));
        KPT_OK(kp_pipeline_setup(p));
        for (int i = 0; i < 2; i++) KPT_OK(kp_stream_create(g_dev, &s[i]));
        for (int b = 0; b < BUFS; b++) {
            for (int i = 0; i < N; i++) h[i] = (float)((i * 7 + b * 13) % 101) - 50.0f;
            KPT_OK(kp_malloc(g_dev, N * sizeof(float), (void **)&d[b]));
            KPT_OK(kp_memcpy_htod(g_dev, d[b], h, N * sizeof(float)));
        }
        in.data = d[0];
        KPT_OK(kp_pipeline_configure_io(p, &in, 1, &o, 1, s[0]));
        KPT_OK(kp_pipeline_warmup(p, s[0]));
        if (m) KPT_OK(kp_pipeline_build_graph(p));
        for (int t = 0; t < TICKS; t++) {
            kp_stream_t st = s[(t / 3) % 2];
            if (t == TICKS - 1) {
                KPT_OK(kp_stream_sync(s[0]));
                KPT_OK(kp_stream_sync(s[1]));
            }
            in.data = d[t % BUFS];
            KPT_OK(kp_pipeline_configure_io(p, &in, 1, &o, 1, st));
            KPT_OK(m ? kp_pipeline_execute_graph(p, st) : kp_pipeline_execute_stream(p, st));
        }
        KPT_OK(kp_device_sync(g_dev));
        KPT_OK(kp_memcpy_dtoh(g_dev, out, o.data, N * sizeof(float)));
        int b = (TICKS - 1) % BUFS;
        for (int i = 0; i < N; i++) {
            float want = fmaxf((float)((i * 7 + b * 13) % 101) - 50.0f, 0.0f);
            if (out[i] != want) {
                print_error("%s mode element %d: got %g want %g\n", m ? "graph" : "stream", i,
                            (double)out[i], (double)want);
                fail();
            }
        }
        kp_pipeline_destroy(p);
        for (int i = 0; i < 2; i++) kp_stream_destroy(s[i]);
        for (int x = 0; x < BUFS; x++) kp_free(g_dev, d[x]);
        free(h);
        free(out);
    }
}

/* An unchanged descriptor is not uploaded again; a changed one is. */
static void unchanged_descriptors_skip_the_upload(void **state) {
    run_cfg c = {
        .json = relu_json("graph", 2048), .want = WANT_RELU, .n = 2048, .ticks = 5, .n_inputs = 1};
    run_both(&c); /* the input address changes every tick: uploads happen */
    kp_pipeline_t p;
    kp_stream_t s;
    float *x;
    int64_t n = 64;
    kp_port_info in = {"input0", NULL, {0}}, o = {"output", NULL, {0}};
    KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, &n, NULL));
    KPT_OK(kp_malloc(g_dev, 64 * sizeof(float), (void **)&x));
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_pipeline_create_from_json(g_dev, relu_json("stream", 64), &p));
    KPT_OK(kp_pipeline_setup(p));
    in.data = x;
    /* After warmup, configure_io with the same address issues no copy: a
     * capture of it records nothing. */
    KPT_OK(kp_pipeline_configure_io(p, &in, 1, &o, 1, s));
    KPT_OK(kp_pipeline_warmup(p, s));
    KPT_OK(kp_stream_begin_capture(s));
    KPT_OK(kp_pipeline_configure_io(p, &in, 1, &o, 1, s));
    kp_graph_t g;
    KPT_OK(kp_stream_end_capture(s, &g));
    assert_int_equal(kp_graph_node_count(g), 0);
    kp_graph_destroy(g);
    float *y; /* a new address: one upload */
    KPT_OK(kp_malloc(g_dev, 64 * sizeof(float), (void **)&y));
    KPT_OK(kp_stream_begin_capture(s));
    in.data = y;
    KPT_OK(kp_pipeline_configure_io(p, &in, 1, &o, 1, s));
    KPT_OK(kp_stream_end_capture(s, &g));
    assert_int_equal(kp_graph_node_count(g), 1);
    kp_graph_destroy(g);
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
    kp_free(g_dev, x);
    kp_free(g_dev, y);
}

static void lifecycle_out_of_order(void **state) {
    kp_pipeline_t g, s;
    kp_stream_t st;
    float *a, *b;
    int64_t n = 64;
    KPT_OK(kp_stream_create(g_dev, &st));
    KPT_OK(kp_malloc(g_dev, 256, (void **)&a));
    KPT_OK(kp_malloc(g_dev, 256, (void **)&b));
    kp_port_info in[2] = {{"input0", a, {0}}, {"input1", b, {0}}}, out[1] = {{"output", NULL, {0}}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n, NULL));
    in[1].desc = in[0].desc;
    KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json("graph", 64), &g));
    KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json("stream", 64), &s));

    KPT_FAILS(kp_pipeline_execute_graph(g, st), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_execute_stream(s, st), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_configure_io(g, in, 2, out, 1, st), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_warmup(g, st), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_build_graph(g), KP_ERR_STATE);
    KPT_OK(kp_pipeline_setup(g));
    KPT_FAILS(kp_pipeline_setup(g), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_warmup(g, st), KP_ERR_STATE); /* before configure_io */

    /* configure_io with a wrong name, dtype, size, missing input */
    kp_port_info bad[2] = {in[0], in[1]};
    bad[1].name = "input7";
    KPT_FAILS(kp_pipeline_configure_io(g, bad, 2, out, 1, st), KP_ERR_NOT_FOUND);
    assert_non_null(strstr(kp_last_error(), "input7"));
    bad[1] = in[1];
    bad[1].desc.dtype = KP_I32;
    KPT_FAILS(kp_pipeline_configure_io(g, bad, 2, out, 1, st), KP_ERR_MISMATCH);
    assert_non_null(strstr(kp_last_error(), "i32[64]"));
    bad[1] = in[1];
    bad[1].desc.shape[0] = 63;
    KPT_FAILS(kp_pipeline_configure_io(g, bad, 2, out, 1, st), KP_ERR_MISMATCH);
    KPT_FAILS(kp_pipeline_configure_io(g, in, 1, out, 1, st), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "input1"));
    kp_port_info badout[1] = {{"outptu", NULL, {0}}};
    KPT_FAILS(kp_pipeline_configure_io(g, in, 2, badout, 1, st), KP_ERR_NOT_FOUND);
    bad[1] = in[1];
    bad[1].data = NULL;
    KPT_FAILS(kp_pipeline_configure_io(g, bad, 2, out, 1, st), KP_ERR_INVALID_ARG);

    KPT_OK(kp_pipeline_configure_io(g, in, 2, out, 1, st));
    KPT_FAILS(kp_pipeline_build_graph(g), KP_ERR_STATE); /* before warmup */
    KPT_OK(kp_pipeline_warmup(g, st));
    KPT_FAILS(kp_pipeline_warmup(g, st), KP_ERR_STATE);
    KPT_FAILS(kp_pipeline_execute_graph(g, st), KP_ERR_STATE);  /* before build */
    KPT_FAILS(kp_pipeline_execute_stream(g, st), KP_ERR_STATE); /* wrong mode */
    KPT_OK(kp_pipeline_build_graph(g));
    KPT_OK(kp_pipeline_build_graph(g)); /* the same key again: already there */
    KPT_OK(kp_pipeline_execute_graph(g, st));
    kp_graph_stats gs;
    KPT_OK(kp_graph_cache_stats(kp_pipeline_graph_cache(g), &gs));
    assert_int_equal(gs.graphs, 1);
    assert_int_equal(gs.hits, 1);

    KPT_OK(kp_pipeline_setup(s));
    KPT_OK(kp_pipeline_configure_io(s, in, 2, out, 1, st));
    KPT_OK(kp_pipeline_warmup(s, st));
    KPT_FAILS(kp_pipeline_build_graph(s), KP_ERR_STATE); /* stream mode */
    KPT_FAILS(kp_pipeline_execute_graph(s, st), KP_ERR_STATE);
    KPT_OK(kp_pipeline_execute_stream(s, st));
    KPT_FAILS(kp_pipeline_execute_stream(NULL, st), KP_ERR_INVALID_ARG);
    KPT_OK(kp_stream_sync(st));
    kp_pipeline_destroy(g);
    kp_pipeline_destroy(s);
    kp_pipeline_destroy(NULL);
    kp_free(g_dev, a);
    kp_free(g_dev, b);
    kp_stream_destroy(st);
}

/* A bad spec must fail with `want` and a detail that contains `needle`. */
static void bad_spec(const char *json, kp_status want, const char *needle) {
    kp_pipeline_t p = (kp_pipeline_t)0x1;
    kp_status st = kp_pipeline_create_from_json(g_dev, json, &p);
    if (st != want || !strstr(kp_last_error(), needle)) {
        print_error("spec %s\n gave %s: \"%s\"\n expected %s with \"%s\"\n", json,
                    kp_status_name(st), kp_last_error(), kp_status_name(want), needle);
        fail();
    }
    assert_null(p);
}

#define HDR "{\"kpipe_spec\": 1, "
#define M_E(id, n) "{\"type\": \"engine\", \"id\": \"" id "\", \"params\": {\"size\": " #n "}}"
#define M_R(id, n) "{\"type\": \"relu\", \"id\": \"" id "\", \"params\": {\"size\": " #n "}}"

/* One module and no wiring (what `kpipe run MODEL.onnx` makes): the
 * module's ports are the pipeline's inputs and outputs, by their names. */
static void lone_module_ports(void **state) {
    kp_pipeline_t p;
    kp_port_info in, out;
    KPT_OK(kp_pipeline_create_from_json(g_dev, HDR "\"modules\": [" M_R("r", 4) "]}", &p));
    KPT_OK(kp_pipeline_input_info(p, 0, &in));
    KPT_OK(kp_pipeline_output_info(p, 0, &out));
    assert_string_equal(in.name, "input");
    assert_string_equal(out.name, "output");
    KPT_FAILS(kp_pipeline_input_info(p, 1, &in), KP_ERR_NOT_FOUND);
    kp_pipeline_destroy(p);
}

static void bad_specs(void **state) {
    bad_spec("{\"kpipe_spec\": 1, \"modules\": [", KP_ERR_PARSE, "line 1, column");
    bad_spec("[1, 2]", KP_ERR_PARSE, "$: expected an object");
    bad_spec("{\"modules\": []}", KP_ERR_PARSE, "$.kpipe_spec: missing");
    bad_spec("{\"kpipe_spec\": 2, \"modules\": []}", KP_ERR_PARSE, "unsupported version 2");
    bad_spec("{\"kpipe_spec\": \"1\"}", KP_ERR_PARSE, "expected the integer 1");
    bad_spec(HDR "\"modules\": []}", KP_ERR_PARSE, "$.modules: expected a non-empty array");
    bad_spec(HDR "\"modules\": [" M_R("r", 4) "], \"conections\": []}", KP_ERR_PARSE,
             "$.conections: unknown key");
    bad_spec(HDR "\"execution\": \"fast\", \"modules\": [" M_R("r", 4) "]}", KP_ERR_PARSE,
             "$.execution");
    bad_spec(HDR "\"modules\": [{\"type\": 3, \"id\": \"x\"}]}", KP_ERR_PARSE,
             "$.modules[0].type: expected a string");
    bad_spec(HDR "\"modules\": [{\"type\": \"relu\", \"id\": \"x\", \"params\": {\"size\": [1]}}]}",
             KP_ERR_PARSE, "$.modules[0].params.size");
    bad_spec(HDR "\"modules\": [" M_R("r", 4) "], \"connections\": [\"r.output => r.input\"]}",
             KP_ERR_PARSE, "$.connections[0]");
    /* unknown module type */
    bad_spec(HDR "\"modules\": [{\"type\": \"reluu\", \"id\": \"x\"}]}", KP_ERR_NOT_FOUND,
             "unknown type \"reluu\"");
    /* duplicate id */
    bad_spec(HDR
             "\"modules\": [" M_R("a", 4) ", " M_R("a", 4) "], \"inputs\": {\"i\": \"a.input\"}}",
             KP_ERR_INVALID_ARG, "duplicate module id \"a\"");
    /* unknown port, unknown module */
    bad_spec(HDR "\"modules\": [" M_E("a", 4) ", " M_R("b", 4) "], \"connections\": "
                                                               "[\"a.result9 -> b.input\"]}",
             KP_ERR_NOT_FOUND, "no output port \"result9\"");
    bad_spec(HDR "\"modules\": [" M_R("b", 4) "], \"inputs\": {\"x\": \"c.input\"}}",
             KP_ERR_NOT_FOUND, "no module with id \"c\"");
    /* cycle */
    bad_spec(HDR "\"modules\": [" M_E("a", 4) ", " M_R(
                 "b", 4) "], \"connections\": "
                         "[\"a.result0 -> b.input\", \"b.output -> a.arg0\"], \"inputs\": {\"x\": "
                         "\"a.arg1\"}}",
             KP_ERR_INVALID_ARG, "cycle");
    /* dtype and size mismatch */
    bad_spec(HDR "\"modules\": [{\"type\": \"tap\", \"id\": \"t\", \"params\": {\"size\": 4, "
                 "\"dtype\": \"i32\"}}, " M_R("r", 4) "], \"connections\": [\"t.out -> r.input\"], "
                                                      "\"inputs\": {\"x\": \"t.in\"}}",
             KP_ERR_MISMATCH, "dtype of out i32[4]");
    bad_spec(
        HDR "\"modules\": [" M_E("a", 16384) ", " M_R(
            "b",
            1000) "], \"connections\": "
                  "[\"a.result0 -> b.input\"], \"inputs\": {\"x\": \"a.arg0\", \"y\": \"a.arg1\"}}",
        KP_ERR_MISMATCH, "shape of result0 f32[16384] does not match f32[1000]");
    /* negative and absurd sizes, missing size */
    bad_spec(HDR "\"modules\": [" M_R("r", -5) "]}", KP_ERR_INVALID_ARG,
             "\"size\" = -5 is out of range");
    bad_spec(HDR "\"modules\": [" M_R("r", 1000000000000) "]}", KP_ERR_INVALID_ARG, "out of range");
    bad_spec(HDR "\"modules\": [{\"type\": \"relu\", \"id\": \"r\"}]}", KP_ERR_INVALID_ARG,
             "parameter \"size\" is required");
    /* wiring */
    /* a lone module exposes its ports only when nothing is wired at all */
    bad_spec(HDR "\"modules\": [" M_R("r", 4) "], \"outputs\": {\"y\": \"r.output\"}}",
             KP_ERR_INVALID_ARG, "r.input is not connected");
    bad_spec(
        HDR "\"modules\": [" M_R("r", 4) "], \"inputs\": {\"x\": \"r.input\", \"y\": \"r.input\"}}",
        KP_ERR_INVALID_ARG, "fed twice");
    bad_spec(HDR "\"modules\": [" M_R("r.1", 4) "]}", KP_ERR_INVALID_ARG, "may not contain '.'");
    /* duplicate keys are a JSON error */
    bad_spec(HDR "\"modules\": [" M_R("r", 4) "], \"modules\": []}", KP_ERR_PARSE, "duplicate");

    /* the C form is checked as well */
    kp_pipeline_spec spec = sample_spec(KP_EXEC_GRAPH);
    kp_pipeline_t p;
    spec.struct_size = 8;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), KP_ERR_INVALID_ARG);
    spec = sample_spec(KP_EXEC_GRAPH);
    spec.n_modules = 0;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_pipeline_create_from_file(g_dev, "/nonexistent/spec.json", &p), KP_ERR_IO);
}

/* Inputs that crashed, or were taken silently, at the public boundary. */
static void boundary_checks(void **state) {
    kp_pipeline_t p = NULL;
    /* a C spec with a parameter count and no parameters */
    kp_pipeline_spec spec = sample_spec(KP_EXEC_GRAPH);
    kp_module_spec mods[2] = {sample_modules[0], sample_modules[1]};
    mods[1].params = NULL;
    spec.modules = mods;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "params is NULL"));
    kp_param nulls[1] = {{"size", NULL}};
    mods[1].params = nulls;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), KP_ERR_INVALID_ARG);
    kp_param twice[2] = {{"size", "16384"}, {"size", "16384"}};
    mods[1].params = twice;
    mods[1].n_params = 2;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "given twice"));
    assert_null(p);

    /* descriptors given to configure_io are validated before use */
    kp_stream_t s;
    float *a, *b;
    int64_t n = 64;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, 256, (void **)&a));
    KPT_OK(kp_malloc(g_dev, 256, (void **)&b));
    KPT_OK(kp_pipeline_create_from_json(g_dev, sample_json("stream", 64), &p));
    KPT_OK(kp_pipeline_setup(p));
    kp_port_info in[3] = {{"input0", a, {0}}, {"input1", b, {0}}, {"input0", b, {0}}};
    kp_port_info out[1] = {{"output", NULL, {0}}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n, NULL));
    in[1].desc = in[2].desc = in[0].desc;
    for (int nd = -1; nd <= 1000; nd += 1001 / 3) {
        kp_port_info bad[2] = {in[0], in[1]};
        bad[1].desc.ndim = nd < 0 ? -1 : nd > KP_MAX_DIMS ? nd : KP_MAX_DIMS + 1;
        KPT_FAILS(kp_pipeline_configure_io(p, bad, 2, out, 1, s), KP_ERR_INVALID_ARG);
        assert_non_null(strstr(kp_last_error(), "input1"));
    }
    /* the same input twice is refused, not "last wins" */
    KPT_FAILS(kp_pipeline_configure_io(p, in, 3, out, 1, s), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "\"input0\" is given twice"));
    /* a stream of another handle of the same device: the message says so */
    kp_device_t other;
    kp_stream_t os;
    KPT_OK(kp_device_open(kp_device_name(g_dev), &other));
    KPT_OK(kp_stream_create(other, &os));
    KPT_FAILS(kp_pipeline_configure_io(p, in, 2, out, 1, os), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "two different handles of device"));
    kp_stream_destroy(os);
    kp_device_close(other);
    KPT_OK(kp_pipeline_configure_io(p, in, 2, out, 1, s));
    KPT_OK(kp_stream_sync(s));
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
    kp_free(g_dev, a);
    kp_free(g_dev, b);
}

/* Parameters: unknown keys and non-integer text are errors naming the
 * module, the parameter and the JSON path. */
static void strict_parameters(void **state) {
    bad_spec(HDR "\"modules\": [{\"type\": \"relu\", \"id\": \"r\", \"params\": {\"size\": 4, "
                 "\"sise\": 4}}], \"inputs\": {\"x\": \"r.input\"}}",
             KP_ERR_INVALID_ARG,
             "$.modules[0]: module \"r\" (relu): unknown parameter \"sise\" (it takes: size)");
    bad_spec(HDR "\"modules\": [{\"type\": \"relu\", \"id\": \"\"}]}", KP_ERR_INVALID_ARG,
             "$.modules[0]: id: name is missing or empty");
    bad_spec(HDR "\"modules\": [" M_R("a", 4) ", {\"type\": \"relu\", \"id\": \"r\", \"params\": "
                                              "{\"sise\": 16384}}]}",
             KP_ERR_INVALID_ARG, "$.modules[1]");
    static const char *const not_ints[] = {
        "16384.0",    "1.6384e4", "\" +16384\"", "\"+16384\"", "\"16384 \"",
        "\"0x4000\"", "\"\"",     "\"-\"",       "true",       "\"99999999999999999999\""};
    for (size_t i = 0; i < sizeof not_ints / sizeof not_ints[0]; i++) {
        char json[256];
        snprintf(json, sizeof json,
                 HDR "\"modules\": [{\"type\": \"relu\", \"id\": \"r\", "
                     "\"params\": {\"size\": %s}}], \"inputs\": {\"x\": \"r.input\"}}",
                 not_ints[i]);
        bad_spec(json, KP_ERR_INVALID_ARG, "parameter \"size\"");
    }
    /* a NUL byte in a spec file is an error at its line and column */
    char path[] = "/tmp/kpipe_nul_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "{\"kpipe_spec\": 1,\n \"modules\": [" M_R("r", 4) "]}\0 junk";
    assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
    close(fd);
    kp_pipeline_t p = NULL;
    KPT_FAILS(kp_pipeline_create_from_file(g_dev, path, &p), KP_ERR_PARSE);
    assert_non_null(strstr(kp_last_error(), "line 2, column"));
    assert_non_null(strstr(kp_last_error(), "NUL byte"));
    unlink(path);
}

static void examples_spec_file(void **state) {
    kp_pipeline_t p;
    KPT_OK(kp_pipeline_create_from_file(g_dev, KP_SOURCE_DIR "/examples/sample.json", &p));
    assert_string_equal(kp_pipeline_name(p), "sample");
    assert_int_equal(kp_pipeline_mode(p), KP_EXEC_GRAPH);
    kp_pipeline_destroy(p);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    if (kp_module_register("tap", tap_create) != KP_OK) return 1;
    if (kp_device_open("cpu", &g_cpu) != KP_OK) return 1;
    if (strcmp(name, "cpu") == 0) {
        g_dev = g_cpu;
    } else {
        kp_status st = kp_device_open(name, &g_dev);
        if (st == KP_ERR_NO_DEVICE) {
            printf("SKIP: pipeline tests on %s: %s\n", name, kp_last_error());
            kp_device_close(g_cpu);
            return 77;
        }
        if (st != KP_OK) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stream_mode_validates),
        cmocka_unit_test(graph_mode_validates),
        cmocka_unit_test(graph_mode_many_ticks_new_data),
        cmocka_unit_test(large_range),
        cmocka_unit_test(relu_standalone),
        cmocka_unit_test(engine_only_no_descriptors),
        cmocka_unit_test(sizes_not_multiple_of_block),
        cmocka_unit_test(dag_parallel_branches),
        cmocka_unit_test(json_and_c_specs_agree),
        cmocka_unit_test(memory_figures),
        cmocka_unit_test(zero_copy_decisions),
        cmocka_unit_test(ticks_on_two_streams),
        cmocka_unit_test(unchanged_descriptors_skip_the_upload),
        cmocka_unit_test(lifecycle_out_of_order),
        cmocka_unit_test(bad_specs),
        cmocka_unit_test(lone_module_ports),
        cmocka_unit_test(boundary_checks),
        cmocka_unit_test(strict_parameters),
        cmocka_unit_test(examples_spec_file),
    };
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    if (g_dev != g_cpu) kp_device_close(g_dev);
    kp_device_close(g_cpu);
    return failed ? 1 : 0;
}
