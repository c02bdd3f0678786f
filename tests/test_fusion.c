/* Fusion of elementwise modules: random chains and DAGs (1 to 12 modules,
 * f32 / f16 / i32 / u8 through casts, fan-in, fan-out, intermediates that
 * are outputs too) with dynamic sizes, run fused in graph mode (copy and
 * rebind; reused buffers, and new ones every tick filled from pinned
 * memory) and stream mode and unfused, each output element compared bit
 * for bit with the others, with the cpu backend, and with an evaluator
 * written here; 1 M and 16 M elements; the groups and their boundaries;
 * the generated source against a golden file and through NVRTC (which
 * runs without a GPU); bad bodies and bad declarations refused by name.
 *   test_fusion DEVICE [TEST | SMALL]   (cpu or cuda; exit 77 without the device;
 *                                       SMALL: 1 M at most, for compute-sanitizer
 *                                       and ThreadSanitizer) */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/half-impl.h"
#include "support/kp_test.h"

static kp_device_t g_dev, g_cpu;
static bool g_small;

/* --- random DAGs ----------------------------------------------------------------- */
enum { OP_ADD, OP_MUL, OP_SCALE, OP_CLAMP, OP_CAST, OP_RELU };
static const char *const op_names[] = {"add", "mul", "scale", "clamp", "cast", "relu"};
static const kp_dtype dts[] = {KP_F32, KP_F16, KP_I32, KP_U8};

#define MAX_VALS 32
typedef struct dag {
    int n_ext, n_mod;
    kp_dtype ext_dt[MAX_VALS];
    struct {
        int op;
        int in[2]; /* value indices: < n_ext external, else module (v - n_ext) */
        kp_dtype dt, to;
        double k[2];
        bool no_fuse;
    } m[16];
    int consumers[MAX_VALS];
    bool out[MAX_VALS]; /* module value is an external output */
} dag;

static kp_dtype val_dt(const dag *g, int v) {
    return v < g->n_ext ? g->ext_dt[v] : g->m[v - g->n_ext].to;
}

/* An earlier value of dtype dt (a recent one more often), or a new input. */
static int pick_value(dag *g, uint64_t *rs, kp_dtype dt, bool allow_new) {
    int n = g->n_ext + g->n_mod, cand[MAX_VALS], nc = 0;
    for (int v = 0; v < n; v++)
        if (val_dt(g, v) == dt) cand[nc++] = v;
    if ((allow_new && kpt_rand(rs) % 4 == 0) || nc == 0) {
        /* a new external input: renumber module values up by one */
        for (int j = 0; j <= g->n_mod; j++) /* the module being made too */
            for (int q = 0; q < 2; q++)
                if (g->m[j].in[q] >= g->n_ext) g->m[j].in[q]++;
        g->ext_dt[g->n_ext] = dt;
        return g->n_ext++;
    }
    return kpt_rand(rs) % 2 ? cand[nc - 1] : cand[kpt_rand(rs) % (uint64_t)nc];
}

static void make_dag(dag *g, uint64_t *rs, int n_mod) {
    memset(g, 0, sizeof *g);
    g->ext_dt[g->n_ext++] = dts[kpt_rand(rs) % 4];
    for (int i = 0; i < n_mod; i++) {
        int op = (int)(kpt_rand(rs) % 6);
        kp_dtype dt = dts[kpt_rand(rs) % 4];
        if (i > 0 && kpt_rand(rs) % 3) dt = g->m[i - 1].to; /* mostly chains */
        if (op == OP_RELU && dt != KP_F32) op = OP_CAST;
        g->m[i].op = op;
        g->m[i].dt = g->m[i].to = dt;
        g->m[i].in[0] = g->m[i].in[1] = -1;
        g->m[i].in[0] = pick_value(g, rs, dt, false);
        if (op == OP_ADD || op == OP_MUL) g->m[i].in[1] = pick_value(g, rs, dt, true);
        if (op == OP_CAST) g->m[i].to = dts[kpt_rand(rs) % 4];
        bool fl = dt == KP_F32 || dt == KP_F16;
        if (op == OP_SCALE)
            g->m[i].k[0] = fl ? ((int)(kpt_rand(rs) % 9) - 4) * 0.375 : (int)(kpt_rand(rs) % 7) - 3;
        if (op == OP_CLAMP) {
            double lo = fl ? -1.25 : (dt == KP_U8 ? 20 : -50);
            g->m[i].k[0] = lo;
            g->m[i].k[1] = fl ? 2.5 : (dt == KP_U8 ? 200 : 60);
        }
        g->m[i].no_fuse = kpt_rand(rs) % 16 == 0;
        g->n_mod++;
    }
    memset(g->consumers, 0, sizeof g->consumers);
    for (int i = 0; i < g->n_mod; i++)
        for (int q = 0; q < 2; q++)
            if (g->m[i].in[q] >= g->n_ext) g->consumers[g->m[i].in[q] - g->n_ext]++;
    for (int i = 0; i < g->n_mod; i++)
        g->out[i] = g->consumers[i] == 0 || i == g->n_mod - 1 || kpt_rand(rs) % 5 == 0;
}

static const char *port_of(const dag *g, int mod, int q) {
    int op = g->m[mod].op;
    return op == OP_ADD || op == OP_MUL ? (q ? "b" : "a") : "input";
}

/* The JSON of a DAG; every size dynamic up to max. */
static char *dag_json(const dag *g, int64_t max, bool fuse) {
    size_t cap = 16384, used = 0;
    char *b = malloc(cap);
#define ADD(...) used += (size_t)snprintf(b + used, cap - used, __VA_ARGS__)
    ADD("{\"kpipe_spec\": 1, \"name\": \"dag\", \"fuse\": %s, \"modules\": [",
        fuse ? "true" : "false");
    for (int i = 0; i < g->n_mod; i++) {
        int op = g->m[i].op;
        ADD("%s{\"type\": \"%s\", \"id\": \"m%d\", %s\"params\": {\"size\": {\"max\": %lld}",
            i ? "," : "", op_names[op], i, g->m[i].no_fuse ? "\"fuse\": false, " : "",
            (long long)max);
        if (op == OP_CAST)
            ADD(", \"from\": \"%s\", \"to\": \"%s\"", kp_dtype_name(g->m[i].dt),
                kp_dtype_name(g->m[i].to));
        else if (op != OP_RELU)
            ADD(", \"dtype\": \"%s\"", kp_dtype_name(g->m[i].dt));
        if (op == OP_SCALE) ADD(", \"factor\": %g", g->m[i].k[0]);
        if (op == OP_CLAMP) ADD(", \"lo\": %g, \"hi\": %g", g->m[i].k[0], g->m[i].k[1]);
        ADD("}}");
    }
    ADD("], \"connections\": [");
    bool first = true;
    for (int i = 0; i < g->n_mod; i++)
        for (int q = 0; q < 2; q++)
            if (g->m[i].in[q] >= g->n_ext) {
                ADD("%s\"m%d.output -> m%d.%s\"", first ? "" : ",", g->m[i].in[q] - g->n_ext, i,
                    port_of(g, i, q));
                first = false;
            }
    ADD("], \"inputs\": {");
    first = true;
    for (int i = 0; i < g->n_mod; i++)
        for (int q = 0; q < 2; q++)
            if (g->m[i].in[q] >= 0 && g->m[i].in[q] < g->n_ext) {
                /* an external input feeds one port: later readers get their own */
                ADD("%s\"x%d_%d\": \"m%d.%s\"", first ? "" : ",", i, q, i, port_of(g, i, q));
                first = false;
            }
    ADD("}, \"outputs\": {");
    first = true;
    for (int i = 0; i < g->n_mod; i++)
        if (g->out[i]) {
            ADD("%s\"y%d\": \"m%d.output\"", first ? "" : ",", i, i);
            first = false;
        }
    ADD("}}");
#undef ADD
    return b;
}

/* --- the evaluator written here ----------------------------------------------------- */
typedef union {
    float f;
    int32_t i;
} num;

static num load(const void *p, kp_dtype dt, size_t i) {
    num v;
    if (dt == KP_F32)
        v.f = ((const float *)p)[i];
    else if (dt == KP_F16)
        v.f = kp__f16_to_f32(((const uint16_t *)p)[i]);
    else if (dt == KP_I32)
        v.i = ((const int32_t *)p)[i];
    else
        v.i = ((const uint8_t *)p)[i];
    return v;
}

/* Stores and returns the value as stored (what a consumer reads). */
static num store(void *p, kp_dtype dt, size_t i, num v) {
    if (dt == KP_F32)
        ((float *)p)[i] = v.f;
    else if (dt == KP_F16)
        ((uint16_t *)p)[i] = kp__f32_to_f16(v.f);
    else if (dt == KP_I32)
        ((int32_t *)p)[i] = v.i;
    else
        ((uint8_t *)p)[i] = (uint8_t)v.i;
    return load(p, dt, i);
}

static num eval_op(const dag *g, int i, num a, num b) {
    bool fl = g->m[i].dt == KP_F32 || g->m[i].dt == KP_F16;
    num r;
    switch (g->m[i].op) {
    case OP_ADD:
        if (fl)
            r.f = a.f + b.f;
        else
            r.i = (int32_t)((uint32_t)a.i + (uint32_t)b.i);
        break;
    case OP_MUL:
        if (fl)
            r.f = a.f * b.f;
        else
            r.i = (int32_t)((uint32_t)a.i * (uint32_t)b.i);
        break;
    case OP_SCALE:
        if (fl)
            r.f = a.f * (float)g->m[i].k[0];
        else
            r.i = (int32_t)((uint32_t)a.i * (uint32_t)(int32_t)g->m[i].k[0]);
        break;
    case OP_CLAMP:
        if (fl)
            r.f = fminf(fmaxf(a.f, (float)g->m[i].k[0]), (float)g->m[i].k[1]);
        else
            r.i = a.i < (int)g->m[i].k[0]   ? (int)g->m[i].k[0]
                  : a.i > (int)g->m[i].k[1] ? (int)g->m[i].k[1]
                                            : a.i;
        break;
    case OP_RELU: r.f = fmaxf(a.f, 0.0f); break;
    default: { /* cast */
        kp_dtype to = g->m[i].to;
        bool tf = to == KP_F32 || to == KP_F16;
        if (fl && tf)
            r.f = a.f;
        else if (fl && to == KP_I32)
            r.i = isnan(a.f)              ? 0
                  : a.f >= 2147483648.0f  ? INT32_MAX
                  : a.f <= -2147483648.0f ? INT32_MIN
                                          : (int32_t)a.f;
        else if (fl)
            r.i = (int32_t)fminf(fmaxf(a.f, 0.0f), 255.0f);
        else if (tf)
            r.f = (float)a.i;
        else
            r.i = to == KP_I32 ? a.i : a.i < 0 ? 0 : a.i > 255 ? 255 : a.i;
    }
    }
    return r;
}

/* --- running ---------------------------------------------------------------------- */
typedef struct run_cfg {
    kp_device_t dev;
    kp_exec_mode mode;
    kp_input_binding binding;
    bool fuse;
    /* new device buffers every tick, filled from pinned host memory (else
     * two buffer sets, alternating, filled once from pageable memory) */
    bool fresh;
} run_cfg;

/* Random data for an input of dtype dt. */
static void fill(void *p, kp_dtype dt, size_t n, uint64_t *rs) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kpt_rand(rs);
        if (dt == KP_F32)
            ((float *)p)[i] = (float)((int)(r % 2001) - 1000) / 256.0f;
        else if (dt == KP_F16)
            ((uint16_t *)p)[i] = kp__f32_to_f16((float)((int)(r % 2001) - 1000) / 128.0f);
        else if (dt == KP_I32)
            ((int32_t *)p)[i] = (int32_t)(r % 200001) - 100000;
        else
            ((uint8_t *)p)[i] = (uint8_t)r;
    }
}

#define MAX_EXT 40
#define MAX_TICKS 3
/* Runs the spec for the ticks' sizes with the given host inputs (two sets
 * of device buffers, alternating); returns every output of every tick,
 * concatenated, in *out (malloc'd) and its size. */
static void run_spec(const run_cfg *c, const char *json, int n_in, void *const *host_in,
                     const size_t *elem, const int64_t *sizes, int n_ticks, unsigned char **out,
                     size_t *out_bytes) {
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = c->mode;
    o.binding = c->binding;
    o.fuse = c->fuse;
    kp_pipeline_t p;
    kp_stream_t s;
    KPT_OK(kp_stream_create(c->dev, &s));
    KPT_OK(kp_pipeline_create_from_json_opts(c->dev, json, &o, &p));
    KPT_OK(kp_pipeline_setup(p));
    kp_pipeline_report r;
    KPT_OK(kp_pipeline_report_get(p, &r));
    assert_int_equal((int)r.n_inputs, n_in);
    kp_port_info in[MAX_EXT], outs[MAX_EXT];
    void *buf[2][MAX_EXT];
    size_t total = 0;
    for (size_t k = 0; k < r.n_outputs; k++) {
        KPT_OK(kp_pipeline_output_info(p, k, &outs[k]));
        for (int t = 0; t < n_ticks; t++)
            total += (size_t)sizes[t] * kp_dtype_size(outs[k].desc.dtype);
    }
    *out = malloc(total + 1);
    *out_bytes = total;
    size_t at = 0;
    /* fresh: a new buffer per input and tick (kept to the end, so no
     * address comes back), filled from pinned memory */
    void *pinned[MAX_EXT], *fresh[MAX_TICKS][MAX_EXT];
    assert_true(n_ticks <= MAX_TICKS);
    for (int k = 0; k < n_in; k++) {
        KPT_OK(kp_pipeline_input_info(p, (size_t)k, &in[k]));
        size_t bytes = (size_t)sizes[0] * elem[k];
        pinned[k] = NULL;
        for (int t = 0; t < n_ticks; t++) fresh[t][k] = NULL;
        if (c->fresh) {
            KPT_OK(kp_malloc_host(c->dev, bytes, &pinned[k]));
            memcpy(pinned[k], host_in[k], bytes);
        }
        for (int b = 0; b < 2; b++) {
            buf[b][k] = NULL;
            if (c->fresh) continue;
            KPT_OK(kp_malloc(c->dev, bytes, &buf[b][k]));
            KPT_OK(kp_memcpy_htod(c->dev, buf[b][k], host_in[k], bytes));
        }
    }
    for (int t = 0; t < n_ticks; t++) {
        for (int k = 0; k < n_in; k++) {
            if (c->fresh) {
                size_t bytes = (size_t)sizes[0] * elem[k];
                KPT_OK(kp_malloc(c->dev, bytes, &fresh[t][k]));
                KPT_OK(kp_memcpy_htod(c->dev, fresh[t][k], pinned[k], bytes));
            }
            in[k].data = c->fresh ? fresh[t][k] : buf[t % 2][k];
            in[k].desc.shape[0] = sizes[t];
        }
        KPT_OK(kp_pipeline_configure_io(p, in, (size_t)n_in, outs, r.n_outputs, s));
        if (t == 0) KPT_OK(kp_pipeline_warmup(p, s));
        if (c->mode == KP_EXEC_GRAPH) {
            if (t == 0) KPT_OK(kp_pipeline_build_graph(p));
            KPT_OK(kp_pipeline_execute_graph(p, s));
        } else {
            KPT_OK(kp_pipeline_execute_stream(p, s));
        }
        KPT_OK(kp_stream_sync(s));
        for (size_t k = 0; k < r.n_outputs; k++) {
            size_t bytes = (size_t)sizes[t] * kp_dtype_size(outs[k].desc.dtype);
            assert_int_equal(outs[k].desc.shape[0], sizes[t]);
            KPT_OK(kp_memcpy_dtoh(c->dev, *out + at, outs[k].data, bytes));
            at += bytes;
        }
    }
    for (int k = 0; k < n_in; k++) {
        for (int b = 0; b < 2; b++) kp_free(c->dev, buf[b][k]);
        for (int t = 0; t < n_ticks; t++) kp_free(c->dev, fresh[t][k]);
        kp_free_host(c->dev, pinned[k]);
    }
    kp_pipeline_destroy(p);
    kp_stream_destroy(s);
}

/* The expected outputs of every tick, in run_spec's order (outputs in
 * declaration order: y<i> by module index). */
static unsigned char *dag_expect(const dag *g, void *const *host_in, const int *in_of,
                                 const int64_t *sizes, int n_ticks, size_t *bytes) {
    size_t total = 0;
    for (int t = 0; t < n_ticks; t++)
        for (int i = 0; i < g->n_mod; i++)
            if (g->out[i]) total += (size_t)sizes[t] * kp_dtype_size(g->m[i].to);
    unsigned char *e = malloc(total + 1), *at = e;
    *bytes = total;
    for (int t = 0; t < n_ticks; t++) {
        size_t n = (size_t)sizes[t];
        void *vals[16];
        for (int i = 0; i < g->n_mod; i++) vals[i] = malloc(n * 4 + 4);
        for (size_t j = 0; j < n; j++)
            for (int i = 0; i < g->n_mod; i++) {
                num a[2] = {{0}, {0}};
                for (int q = 0; q < 2 && g->m[i].in[q] >= 0; q++) {
                    int v = g->m[i].in[q];
                    a[q] = v < g->n_ext ? load(host_in[in_of[i * 2 + q]], g->ext_dt[v], j)
                                        : load(vals[v - g->n_ext], g->m[v - g->n_ext].to, j);
                }
                store(vals[i], g->m[i].to, j, eval_op(g, i, a[0], a[1]));
            }
        for (int i = 0; i < g->n_mod; i++) {
            if (g->out[i]) {
                size_t b = n * kp_dtype_size(g->m[i].to);
                memcpy(at, vals[i], b);
                at += b;
            }
            free(vals[i]);
        }
    }
    return e;
}

static void assert_same(const unsigned char *a, const unsigned char *b, size_t n, const char *what,
                        const char *json) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            fprintf(stderr, "%s: byte %zu of %zu differs (%02x vs %02x)\nspec: %s\n", what, i, n,
                    a[i], b[i], json);
            fail();
        }
}

/* One DAG at one maximum size: every configuration against the evaluator. */
static void check_dag(const dag *g, int64_t max, uint64_t *rs) {
    char *fused = dag_json(g, max, true);
    int n_in = 0, in_of[32];
    void *host_in[MAX_EXT];
    size_t elem[MAX_EXT];
    for (int i = 0; i < g->n_mod; i++)
        for (int q = 0; q < 2; q++)
            if (g->m[i].in[q] >= 0 && g->m[i].in[q] < g->n_ext) {
                kp_dtype dt = g->ext_dt[g->m[i].in[q]];
                elem[n_in] = kp_dtype_size(dt);
                host_in[n_in] = malloc((size_t)max * elem[n_in]);
                fill(host_in[n_in], dt, (size_t)max, rs);
                in_of[i * 2 + q] = n_in++;
            }
    int64_t sizes[3] = {max, max > 2 ? max - 1 - (int64_t)(kpt_rand(rs) % (uint64_t)(max - 2)) : 1,
                        1};
    size_t want_bytes;
    unsigned char *want = dag_expect(g, host_in, in_of, sizes, 3, &want_bytes);
    run_cfg cfgs[] = {
        {g_dev, KP_EXEC_GRAPH, KP_INPUTS_COPY, true, false},
        {g_dev, KP_EXEC_GRAPH, KP_INPUTS_REBIND, true, false},
        {g_dev, KP_EXEC_STREAM, KP_INPUTS_COPY, true, false},
        {g_dev, KP_EXEC_GRAPH, KP_INPUTS_COPY, false, false},
        {g_dev, KP_EXEC_STREAM, KP_INPUTS_COPY, false, false},
        {g_dev, KP_EXEC_GRAPH, KP_INPUTS_REBIND, true, true},
        {g_cpu, KP_EXEC_GRAPH, KP_INPUTS_COPY, true, false},
    };
    const char *names[] = {
        "fused graph copy", "fused graph rebind",
        "fused stream",     "unfused graph",
        "unfused stream",   "fused graph rebind, new pinned-filled buffers each tick",
        "cpu fused graph"};
    size_t n_cfg = g_dev == g_cpu ? 6 : 7;
    for (size_t c = 0; c < n_cfg; c++) {
        unsigned char *got;
        size_t got_bytes;
        run_spec(&cfgs[c], fused, n_in, host_in, elem, sizes, 3, &got, &got_bytes);
        assert_int_equal(got_bytes, want_bytes);
        assert_same(got, want, want_bytes, names[c], fused);
        free(got);
    }
    for (int k = 0; k < n_in; k++) free(host_in[k]);
    free(want);
    free(fused);
}

static void random_dags(void **state) {
    uint64_t rs = 0x5eed;
    static const int64_t maxima[] = {1, 7, 1001, 4097, 65537};
    for (int round = 0; round < 60; round++) {
        dag g;
        make_dag(&g, &rs, 1 + round % 12);
        check_dag(&g, maxima[round % 5], &rs);
    }
}

/* 1 M and 16 M elements: an 8-module chain over f32 with fan-in. */
static void large_chains(void **state) {
    uint64_t rs = 77;
    static const int64_t sizes[] = {(1 << 20) + 3, 1 << 24};
    for (int s = 0; s < (g_small ? 1 : 2); s++) {
        dag g;
        memset(&g, 0, sizeof g);
        g.n_ext = 3;
        g.ext_dt[0] = g.ext_dt[1] = g.ext_dt[2] = KP_F32;
        int ops[8] = {OP_ADD, OP_SCALE, OP_CLAMP, OP_MUL, OP_RELU, OP_SCALE, OP_ADD, OP_CLAMP};
        for (int i = 0; i < 8; i++) {
            g.m[i].op = ops[i];
            g.m[i].dt = g.m[i].to = KP_F32;
            g.m[i].in[0] = i ? g.n_ext + i - 1 : 0;
            g.m[i].in[1] = ops[i] == OP_ADD || ops[i] == OP_MUL ? 1 + (i % 2) : -1;
            g.m[i].k[0] = ops[i] == OP_CLAMP ? -2.0 : 0.75;
            g.m[i].k[1] = 3.0;
        }
        g.n_mod = 8;
        g.out[7] = true;
        check_dag(&g, sizes[s], &rs);
    }
}

/* --- groups, boundaries, sources ---------------------------------------------------- */
static const char *k_add_relu =
    "{\"kpipe_spec\": 1, \"modules\": ["
    "{\"type\": \"add\", \"id\": \"sum\", \"params\": {\"size\": {\"max\": 1000}}},"
    "{\"type\": \"relu\", \"id\": \"act\", \"params\": {\"size\": {\"max\": 1000}}}],"
    "\"connections\": [\"sum.output -> act.input\"],"
    "\"inputs\": {\"a\": \"sum.a\", \"b\": \"sum.b\"}, \"outputs\": {\"y\": \"act.output\"}}";

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    b[fread(b, 1, (size_t)n, f)] = 0;
    fclose(f);
    return b;
}

static void golden_source(void **state) {
    kp_pipeline_t p;
    kp_fusion_report f;
    KPT_OK(kp_pipeline_create_from_json(g_cpu, k_add_relu, &p));
    KPT_OK(kp_pipeline_fusion_report(p, 0, &f));
    assert_int_equal(f.n_members, 2);
    assert_string_equal(f.members[0], "sum");
    assert_string_equal(f.members[1], "act");
    KPT_FAILS(kp_pipeline_fusion_report(p, 1, &f), KP_ERR_NOT_FOUND);
    KPT_OK(kp_pipeline_fusion_report(p, 0, &f));
    char *golden = read_text(KP_SOURCE_DIR "/tests/data/fused_add_relu.cu");
    assert_non_null(golden);
    if (strcmp(golden, f.source) != 0) {
        fprintf(stderr, "generated:\n%s", f.source);
        fail_msg("the generated source differs from tests/data/fused_add_relu.cu");
    }
    free(golden);
    kp_rtc_info info;
    kp_status st = kp_rtc_check("sm_90", f.source, &info);
    if (st != KP_ERR_UNSUPPORTED) {
        KPT_OK(st);
        printf("NVRTC compiled the add -> relu group for sm_90 in %.1f ms\n", info.compile_ms);
    }
    kp_pipeline_destroy(p);
}

/* Every group of a few random DAGs compiles with NVRTC. */
static void random_sources_compile(void **state) {
    uint64_t rs = 991;
    kp_rtc_info info;
    if (kp_rtc_check("sm_90", "extern \"C\" __global__ void k() {}", &info) == KP_ERR_UNSUPPORTED)
        skip();
    for (int round = 0; round < 12; round++) {
        dag g;
        make_dag(&g, &rs, 1 + round);
        char *json = dag_json(&g, 100, true);
        kp_pipeline_t p;
        kp_fusion_report f;
        KPT_OK(kp_pipeline_create_from_json(g_cpu, json, &p));
        for (size_t i = 0; kp_pipeline_fusion_report(p, i, &f) == KP_OK; i++)
            if (kp_rtc_check("sm_90", f.source, &info) != KP_OK) {
                fprintf(stderr, "%s\n%s\n", kp_last_error(), f.source);
                fail();
            }
        kp_pipeline_destroy(p);
        free(json);
    }
}

/* The boundary of each connection, by reason. */
static const char *edge_why(kp_pipeline_t p, const char *to) {
    kp_fusion_edge e;
    for (size_t i = 0; kp_pipeline_fusion_edge(p, i, &e) == KP_OK; i++)
        if (strcmp(e.to, to) == 0) return e.fused ? "fused" : e.why;
    return "(none)";
}

static void boundaries(void **state) {
    char buf[8192];
    kp_pipeline_t p;
    kp_pipeline_report r;
    /* fan-out of x ends the group at x; y is fused with z; engine is opaque */
    const char *spec =
        "{\"kpipe_spec\": 1, \"modules\": ["
        "{\"type\": \"engine\", \"id\": \"e\", \"params\": {\"size\": 64}},"
        "{\"type\": \"scale\", \"id\": \"x\", \"params\": {\"size\": 64, \"factor\": 2}},"
        "{\"type\": \"relu\", \"id\": \"y\", \"params\": {\"size\": 64}},"
        "{\"type\": \"relu\", \"id\": \"w\", \"params\": {\"size\": 64}},"
        "{\"type\": \"clamp\", \"id\": \"z\", \"fuse\": %s, \"params\": {\"size\": 64, \"lo\": 0, "
        "\"hi\": 1}}],"
        "\"connections\": [\"e.result0 -> x.input\", \"x.output -> y.input\", \"x.output -> "
        "w.input\","
        "\"y.output -> z.input\"],"
        "\"inputs\": {\"a\": \"e.arg0\", \"b\": \"e.arg1\"},"
        "\"outputs\": {\"z\": \"z.output\", \"w\": \"w.output\", \"y\": \"y.output\"}}";
    snprintf(buf, sizeof buf, spec, "true");
    KPT_OK(kp_pipeline_create_from_json(g_cpu, buf, &p));
    assert_string_equal(edge_why(p, "x.input"), "e is not elementwise");
    assert_string_equal(edge_why(p, "e.arg0"), "(none)");
    assert_string_equal(edge_why(p, "y.input"), "fan-out: x.output feeds 2 modules");
    assert_string_equal(edge_why(p, "z.input"), "fused");
    KPT_OK(kp_pipeline_report_get(p, &r));
    /* e; x alone (scale has no kernel of its own); w alone (its own relu); y+z */
    assert_int_equal(r.n_modules, 4);
    kp_fusion_report f;
    KPT_OK(kp_pipeline_fusion_report(p, 1, &f));
    assert_int_equal(f.n_members, 2); /* y -> z, y also an output */
    kp_pipeline_destroy(p);
    snprintf(buf, sizeof buf, spec, "false");
    KPT_OK(kp_pipeline_create_from_json(g_cpu, buf, &p));
    assert_string_equal(edge_why(p, "z.input"), "fusion is off for z");
    kp_pipeline_destroy(p);
    /* more than 8 inputs, more than 16 modules */
    size_t used = (size_t)snprintf(buf, sizeof buf, "{\"kpipe_spec\": 1, \"modules\": [");
    for (int i = 0; i < 20; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used,
                                 "%s{\"type\": \"%s\", \"id\": \"m%d\", \"params\": {\"size\": 8}}",
                                 i ? "," : "", i < 10 ? "add" : "relu", i);
    used += (size_t)snprintf(buf + used, sizeof buf - used, "], \"connections\": [");
    for (int i = 1; i < 20; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s\"m%d.output -> m%d.%s\"",
                                 i > 1 ? "," : "", i - 1, i, i < 10 ? "a" : "input");
    used += (size_t)snprintf(buf + used, sizeof buf - used, "], \"inputs\": {\"x0\": \"m0.a\"");
    for (int i = 0; i < 10; i++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, ", \"b%d\": \"m%d.b\"", i, i);
    snprintf(buf + used, sizeof buf - used, "}, \"outputs\": {\"y\": \"m19.output\"}}");
    KPT_OK(kp_pipeline_create_from_json(g_cpu, buf, &p));
    assert_string_equal(edge_why(p, "m7.a"), "the group would read more than 8 inputs");
    assert_string_equal(edge_why(p, "m6.a"), "fused");
    KPT_OK(kp_pipeline_fusion_report(p, 1, &f));
    assert_int_equal(f.n_members, 13); /* m7 .. m19 */
    kp_pipeline_destroy(p);
}

/* --- bad bodies and declarations ----------------------------------------------------- */
typedef struct bad_cfg {
    const char *body;
    const char *in_name;
    int n_out;
    size_t param_off;
    int64_t in_size;
} bad_cfg;
static bad_cfg g_bad;

static void bad_host(const void *pp, const void *const *in, void *out, size_t n) {
    for (size_t i = 0; i < n; i++) ((float *)out)[i] = ((const float *)in[0])[i] + 1.0f;
}

static kp_elementwise g_bad_ew;
static float g_bad_param = 2.0f;
static void bad_destroy(void *self) { (void)self; }
static const kp_module_i bad_iface = {.destroy = bad_destroy};

static kp_status bad_create(const kp_module_env *env, kp_module_def *def) {
    g_bad_ew = (kp_elementwise){.cuda = g_bad.body,
                                .host = bad_host,
                                .params = &g_bad_param,
                                .params_bytes = sizeof g_bad_param,
                                .n_params = 1};
    g_bad_ew.param[0] = (kp_elementwise_param){"k", KP_F32, g_bad.param_off};
    KPT_OK(kp_port_decl_1d(&def->inputs[0], g_bad.in_name, KP_F32, g_bad.in_size));
    for (int k = 0; k < g_bad.n_out; k++)
        KPT_OK(kp_port_decl_1d(&def->outputs[k], k ? "z" : "y", KP_F32, 64));
    def->n_inputs = 1;
    def->n_outputs = (size_t)g_bad.n_out;
    def->iface = &bad_iface;
    def->self = &g_bad;
    def->elementwise = &g_bad_ew;
    return KP_OK;
}

static const char *k_bad =
    "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"test_bad\", \"id\": \"b\"}],"
    "\"inputs\": {\"x\": \"b.%s\"}, \"outputs\": {\"y\": \"b.y\"}}";

static kp_status try_bad(bad_cfg c, kp_device_t dev, bool setup) {
    char buf[512];
    g_bad = c;
    snprintf(buf, sizeof buf, k_bad, c.in_name);
    kp_pipeline_t p;
    kp_status st = kp_pipeline_create_from_json(dev, buf, &p);
    if (st == KP_OK && setup) st = kp_pipeline_setup(p);
    kp_pipeline_destroy(st == KP_OK || setup ? p : NULL);
    return st;
}

static void bad_declarations(void **state) {
    (void)kp_module_register("test_bad", bad_create);
    bad_cfg ok = {"y = x * k;", "x", 1, 0, 64};
    KPT_OK(try_bad(ok, g_cpu, true));
    bad_cfg c = ok;
    c.in_name = "kp_x";
    KPT_FAILS(try_bad(c, g_cpu, false), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "is not an identifier"));
    c = ok;
    c.n_out = 2;
    KPT_FAILS(try_bad(c, g_cpu, false), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "one output"));
    c = ok;
    c.param_off = 2;
    KPT_FAILS(try_bad(c, g_cpu, false), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "parameter \"k\""));
    c = ok;
    c.in_size = 32;
    KPT_FAILS(try_bad(c, g_cpu, false), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "one contiguous shape"));
    c = ok;
    c.in_name = "k";
    KPT_FAILS(try_bad(c, g_cpu, false), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "the name is taken"));
    /* a body that does not compile: named by NVRTC, with the generated line */
    c = ok;
    c.body = "y = x +* k;";
    KPT_OK(try_bad(c, g_cpu, true)); /* the cpu runs the host function */
    g_bad = c;
    kp_pipeline_t p;
    kp_fusion_report f;
    char buf[512];
    snprintf(buf, sizeof buf, k_bad, "x");
    KPT_OK(kp_pipeline_create_from_json(g_cpu, buf, &p));
    KPT_OK(kp_pipeline_fusion_report(p, 0, &f));
    kp_status st = kp_rtc_check("sm_90", f.source, NULL);
    if (st != KP_ERR_UNSUPPORTED) {
        assert_int_equal(st, KP_ERR_PARSE);
        printf("refused: %s\n", kp_last_error());
        assert_non_null(strstr(kp_last_error(), "generated line"));
        assert_non_null(strstr(kp_last_error(), "y = x +* k;"));
    }
    kp_pipeline_destroy(p);
    if (g_dev != g_cpu) {
        KPT_FAILS(try_bad(c, g_dev, true), KP_ERR_PARSE);
        assert_non_null(strstr(kp_last_error(), "y = x +* k;"));
    }
    /* spec options */
    KPT_FAILS(kp_pipeline_create_from_json(
                  g_cpu, "{\"kpipe_spec\": 1, \"fuse\": \"no\", \"modules\": []}", &p),
              KP_ERR_PARSE);
    assert_non_null(strstr(kp_last_error(), "$.fuse: expected true or false"));
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.fuse = 7;
    KPT_FAILS(kp_pipeline_create_from_json_opts(g_cpu, k_add_relu, &o, &p), KP_ERR_INVALID_ARG);
    /* a built-in's parameters */
    KPT_FAILS(
        kp_pipeline_create_from_json(
            g_cpu,
            "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"clamp\", \"id\": \"c\", \"params\": "
            "{\"size\": 4, \"lo\": 2, \"hi\": 1}}], \"inputs\": {\"x\": \"c.input\"}}",
            &p),
        KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "lo is above hi"));
    KPT_FAILS(
        kp_pipeline_create_from_json(
            g_cpu,
            "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"cast\", \"id\": \"c\", \"params\": "
            "{\"size\": 4, \"to\": \"bf16\"}}], \"inputs\": {\"x\": \"c.input\"}}",
            &p),
        KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "not f32, f16, i32 or u8"));
}

/* Run-time compile on a device: a cache hit the second time. */
static void compile_cache(void **state) {
    if (g_dev == g_cpu) {
        kp_device_kernel k;
        KPT_FAILS(kp_rtc_compile(g_cpu, "x", "k", &k, NULL), KP_ERR_UNSUPPORTED);
        skip();
    }
    kp_device_kernel k1, k2;
    kp_rtc_info i1, i2;
    const char *src = "extern \"C\" __global__ void kp_probe(float *p) { if (p) p[0] = 1.0f; }";
    KPT_OK(kp_rtc_compile(g_dev, src, "kp_probe", &k1, &i1));
    KPT_OK(kp_rtc_compile(g_dev, src, "kp_probe", &k2, &i2));
    assert_ptr_equal(k1.fn, k2.fn);
    assert_int_equal(i2.cached, 1);
    KPT_FAILS(kp_rtc_compile(g_dev, src, "no_such", &k1, NULL), KP_ERR_DEVICE);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    g_small = argc > 2 && strcmp(argv[2], "SMALL") == 0;
    if (argc > 2 && !g_small) cmocka_set_test_filter(argv[2]);
    if (kp_device_open("cpu", &g_cpu) != KP_OK) return 1;
    if (strcmp(name, "cpu") == 0) {
        g_dev = g_cpu;
    } else {
        kp_status st = kp_device_open(name, &g_dev);
        if (st == KP_ERR_NO_DEVICE) {
            printf("SKIP: fusion tests on %s: %s\n", name, kp_last_error());
            kp_device_close(g_cpu);
            return 77;
        }
        if (st != KP_OK) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_source), cmocka_unit_test(random_sources_compile),
        cmocka_unit_test(boundaries),    cmocka_unit_test(bad_declarations),
        cmocka_unit_test(compile_cache), cmocka_unit_test(random_dags),
        cmocka_unit_test(large_chains),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_dev != g_cpu) kp_device_close(g_dev);
    kp_device_close(g_cpu);
    return failed ? 1 : 0;
}
