/* ONNX's own backend test data (Debian's libonnx-testdata) run through the
 * engine: every case whose operators kpipe supports, on one device, each
 * output checked against the file's expected output with ONNX's tolerances
 * (rtol 1e-3, atol 1e-7 for floats; exact for integers and booleans).
 *
 *   test_onnx_conformance [--device cpu|cuda] [--filter TEXT] [--dir DATA] [--verbose]
 *
 * A case the engine refuses with KP_ERR_UNSUPPORTED (an operator it lacks,
 * a dtype it does not hold) is a skip, printed with its reason; any other
 * failure, and any wrong element, is a failure. Exit 0 when nothing failed,
 * 77 (ctest's skip) when the device is absent. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kpipe/kpipe.h"
#include "../src/onnx/onnx-impl.h"

#define MAX_IO 32

typedef struct counts {
    int ran, passed, failed, skipped;
} counts;

typedef struct opts {
    const char *device, *filter, *dir;
    int verbose;
} opts;

static kp_status read_all(const char *path, void **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    *buf = NULL;
    if (!f) return KP_ERR_IO;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc(n > 0 ? (size_t)n : 1);
    *len = n > 0 ? (size_t)n : 0;
    size_t got = *len ? fread(*buf, 1, *len, f) : 0;
    fclose(f);
    return got == *len ? KP_OK : KP_ERR_IO;
}

static kp_status read_tensor(const char *path, kp__ox_tensor *t) {
    void *buf = NULL;
    size_t len = 0;
    memset(t, 0, sizeof *t);
    kp_status st = read_all(path, &buf, &len);
    if (st == KP_OK) st = kp__ox_read_tensor(buf, len, t);
    free(buf);
    return st;
}

static bool same_value(const kp__ox_tensor *want, const void *got, int64_t i, double *err) {
    switch (want->dtype) {
    case KP_F32: {
        float a = ((const float *)got)[i], b = ((const float *)want->data)[i];
        if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
        if (isinf(b)) return a == b;
        double d = fabs((double)a - b);
        if (d > *err) *err = d;
        return d <= 1e-7 + 1e-3 * fabs((double)b);
    }
    case KP_F16:
    case KP_BF16:
    case KP_I16:
        return ((const uint16_t *)got)[i] == ((const uint16_t *)want->data)[i];
    default: {
        size_t sz = kp_dtype_size(want->dtype);
        return memcmp((const char *)got + i * sz, (const char *)want->data + i * sz, sz) == 0;
    }
    }
}

/* Compares one output; prints the first wrong element. */
static bool check_output(const char *name, const kp__ox_value *v, const void *got,
                         const kp__ox_tensor *want, const char *label) {
    if (v->dtype != want->dtype || v->numel != want->numel || v->ndim != want->ndim) {
        printf("FAIL %s: output '%s' is %s with %lld elements (rank %d), expected %s with %lld "
               "(rank %d)\n", label, name, kp_dtype_name(v->dtype), (long long)v->numel, v->ndim,
               kp_dtype_name(want->dtype), (long long)want->numel, want->ndim);
        return false;
    }
    for (int d = 0; d < v->ndim; d++)
        if (v->shape[d] != want->shape[d]) {
            printf("FAIL %s: output '%s' dimension %d is %lld, expected %lld\n", label, name, d,
                   (long long)v->shape[d], (long long)want->shape[d]);
            return false;
        }
    double err = 0;
    for (int64_t i = 0; i < want->numel; i++)
        if (!same_value(want, got, i, &err)) {
            if (want->dtype == KP_F32)
                printf("FAIL %s: output '%s' element %lld is %.9g, expected %.9g\n", label, name,
                       (long long)i, ((const float *)got)[i], ((const float *)want->data)[i]);
            else
                printf("FAIL %s: output '%s' element %lld differs\n", label, name, (long long)i);
            return false;
        }
    return true;
}

typedef struct run_ctx {
    kp_device_t dev;
    kp_stream_t s;
    kp__ox_engine *e;
    kp__ox_tensor in[MAX_IO], out[MAX_IO];
    void *dev_in[MAX_IO];
    size_t n_in, n_out;
    bool wrong; /* an element differed: already printed */
    bool fixed[MAX_IO]; /* data inputs made constants (see make_engine) */
    size_t n_fixed;
} run_ctx;

static void run_ctx_clear(run_ctx *c) {
    for (size_t i = 0; i < MAX_IO; i++) {
        kp__ox_tensor_clear(&c->in[i]);
        kp__ox_tensor_clear(&c->out[i]);
        if (c->dev_in[i]) kp_free(c->dev, c->dev_in[i]);
        c->dev_in[i] = NULL;
    }
    c->n_in = c->n_out = 0;
}

/* Reads input_N.pb / output_N.pb of one data set. */
static kp_status read_set(run_ctx *c, const char *set) {
    char path[4096];
    for (c->n_in = 0; c->n_in < MAX_IO; c->n_in++) {
        snprintf(path, sizeof path, "%s/input_%zu.pb", set, c->n_in);
        if (access(path, R_OK) != 0) break;
        KP_CHECK(read_tensor(path, &c->in[c->n_in]));
    }
    for (c->n_out = 0; c->n_out < MAX_IO; c->n_out++) {
        snprintf(path, sizeof path, "%s/output_%zu.pb", set, c->n_out);
        if (access(path, R_OK) != 0) break;
        KP_CHECK(read_tensor(path, &c->out[c->n_out]));
    }
    return KP_OK;
}

/* Bounds for every input dimension: the data set's own sizes. */
static size_t bounds_from(const kp__ox_model *m, const run_ctx *c, kp__ox_bound *b,
                          char (*names)[300]) {
    size_t n = 0, k = 0;
    for (size_t i = 0; i < m->n_inputs; i++) {
        const kp__ox_value_info *vi = &m->inputs[i];
        bool init = false;
        for (size_t j = 0; j < m->n_inits; j++) init |= strcmp(m->inits[j].name, vi->name) == 0;
        if (init) {
            if (k < c->n_in && c->fixed[k]) k++;
            continue;
        }
        while (k < c->n_in && c->fixed[k]) k++;
        if (k >= c->n_in) break;
        for (int d = 0; d < vi->ndim && d < c->in[k].ndim && n < 64; d++) {
            if (vi->dims[d].param) snprintf(names[n], 300, "%s", vi->dims[d].param);
            else snprintf(names[n], 300, "%s:%d", vi->name, d);
            b[n].name = names[n];
            b[n].max = c->in[k].shape[d];
            n++;
        }
        k++;
    }
    return n;
}

static kp_status run_set(run_ctx *c, const char *label) {
    kp__ox_graph *g = kp__ox_engine_graph(c->e);
    if (c->n_in - c->n_fixed != g->n_inputs)
        return kp__error(KP_ERR_MISMATCH, "%zu inputs in the data, %zu in the model",
                         c->n_in - c->n_fixed, g->n_inputs);
    for (size_t i = 0, k = 0; i < c->n_in; i++) {
        kp__ox_tensor *t = &c->in[i];
        if (c->fixed[i]) continue;
        if (!t->dtype_ok) return kp__error(KP_ERR_UNSUPPORTED, "input dtype %d", t->onnx_type);
        kp_tensor_desc d;
        KP_CHECK(kp_desc_init(&d, t->dtype, t->ndim, t->shape, NULL));
        KP_CHECK(kp_malloc(c->dev, t->bytes ? t->bytes : 1, &c->dev_in[i]));
        if (t->bytes) KP_CHECK(kp_memcpy_htod(c->dev, c->dev_in[i], t->data, t->bytes));
        KP_CHECK(kp__ox_engine_set_input(c->e, k++, &d, c->dev_in[i]));
    }
    KP_CHECK(kp__ox_engine_prepare(c->e, c->s));
    KP_CHECK(kp__ox_engine_run(c->e, c->s));
    KP_CHECK(kp_stream_sync(c->s));
    bool ok = true;
    for (size_t o = 0; o < c->n_out && o < g->n_outputs; o++) {
        const kp__ox_value *v = &g->values[g->outputs[o]];
        if (!c->out[o].dtype_ok) return kp__error(KP_ERR_UNSUPPORTED, "output dtype %s",
                                                  kp__ox_type_name(c->out[o].onnx_type));
        size_t bytes = (size_t)v->numel * kp_dtype_size(v->dtype);
        void *host = malloc(bytes ? bytes : 1);
        kp_status st = bytes ? kp_memcpy_dtoh(c->dev, host, v->data, bytes) : KP_OK;
        if (st == KP_OK) ok &= check_output(v->name, v, host, &c->out[o], label);
        free(host);
        KP_CHECK(st);
    }
    c->wrong = !ok;
    return ok ? KP_OK : KP_ERR_MISMATCH;
}

/* One case folder: model.onnx plus test_data_set_* folders. */
/* Names of the model's data inputs (those that are not initializers), in
 * the order test data numbers them. */
static size_t data_inputs(const kp__ox_model *m, const char **names) {
    size_t k = 0;
    for (size_t i = 0; i < m->n_inputs && k < MAX_IO; i++) {
        bool init = false;
        for (size_t j = 0; j < m->n_inits; j++) init |= strcmp(m->inits[j].name, m->inputs[i].name) == 0;
        if (!init) names[k++] = m->inputs[i].name;
    }
    return k;
}

/* Builds the engine for one data set. Inputs the model reads only as
 * shapes or constant values on the host (a Reshape's shape given as an
 * input) become constants holding this data set's values: the engine needs
 * them at setup, as every shape it plans for. */
static kp_status make_engine(run_ctx *c, const char *model) {
    kp__ox_model *m;
    kp__ox_graph *g;
    KP_CHECK(kp__ox_read_file(model, &m));
    const char *names[MAX_IO];
    size_t n = data_inputs(m, names);
    char fixed_names[MAX_IO][256];
    size_t n_fixed = 0;
    KP_CHECK(kp__ox_graph_build(m, &g));
    for (size_t i = 0; i < g->n_inputs && i < n; i++)
        if (kp__ox_graph_input_host_only(g, i)) {
            snprintf(fixed_names[n_fixed++], 256, "%s", g->values[g->inputs[i]].name);
        }
    for (size_t i = 0; i < n; i++) c->fixed[i] = false;
    if (n_fixed) {
        kp__ox_graph_free(g);
        KP_CHECK(kp__ox_read_file(model, &m));
        n = data_inputs(m, names);
        for (size_t f = 0; f < n_fixed; f++)
            for (size_t i = 0; i < n && i < c->n_in; i++)
                if (strcmp(names[i], fixed_names[f]) == 0) {
                    kp__ox_tensor t = c->in[i];
                    void *copy = malloc(t.bytes ? t.bytes : 1);
                    if (t.bytes) memcpy(copy, t.data, t.bytes);
                    t.data = copy; /* the model takes this copy; the name is its own */
                    t.name = NULL;
                    kp_status st = kp__ox_model_fix_input(m, fixed_names[f], &t);
                    if (st != KP_OK) {
                        free(copy);
                        kp__ox_model_free(m);
                        return st;
                    }
                    c->fixed[i] = true;
                }
        KP_CHECK(kp__ox_graph_build(m, &g));
    }
    kp__ox_bound b[64];
    char bnames[64][300];
    size_t nb = bounds_from(g->model, c, b, bnames);
    KP_CHECK(kp__ox_engine_create(c->dev, g, b, nb, &c->e));
    c->n_fixed = n_fixed;
    return kp__ox_engine_alloc(c->e);
}

static void count(const opts *o, kp_status st, const run_ctx *c, const char *label, counts *n) {
    n->ran++;
    if (st == KP_OK) {
        n->passed++;
        if (o->verbose) printf("pass %s\n", label);
    } else if (st == KP_ERR_UNSUPPORTED) {
        n->skipped++;
        printf("skip %s: %.300s\n", label, kp_last_error());
    } else {
        n->failed++;
        if (!c->wrong)
            printf("FAIL %s: %s: %.400s\n", label, kp_status_name(st), kp_last_error());
    }
}

/* One case folder: model.onnx plus test_data_set_* folders. */
static void run_case(const opts *o, kp_device_t dev, kp_stream_t s, const char *dir,
                     const char *label, counts *n) {
    char model[4096], path[4200];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    if (access(model, R_OK) != 0) return;
    run_ctx c = {.dev = dev, .s = s};
    /* the model first: an input that is no tensor (a sequence, an
     * optional) is refused there, before its data is read */
    kp__ox_model *m;
    kp__ox_graph *g = NULL;
    kp_status st = kp__ox_read_file(model, &m);
    if (st == KP_OK) st = kp__ox_graph_build(m, &g);
    kp__ox_graph_free(g);
    for (int set = 0; st == KP_OK; set++) {
        snprintf(path, sizeof path, "%s/test_data_set_%d", dir, set);
        struct stat sb;
        if (stat(path, &sb) != 0) break;
        run_ctx_clear(&c);
        st = read_set(&c, path);
        if (st == KP_OK && (set == 0 || c.n_fixed)) {
            kp__ox_engine_destroy(c.e);
            c.e = NULL;
            st = make_engine(&c, model);
        }
        if (st == KP_OK) st = run_set(&c, label);
    }
    count(o, st, &c, label, n);
    kp__ox_engine_destroy(c.e);
    run_ctx_clear(&c);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_suite(const opts *o, kp_device_t dev, kp_stream_t s, const char *suite,
                      counts *n) {
    char root[4096];
    snprintf(root, sizeof root, "%s/%s", o->dir, suite);
    DIR *d = opendir(root);
    if (!d) return;
    char *names[4096];
    size_t k = 0;
    for (struct dirent *e; (e = readdir(d)) && k < 4096;)
        if (e->d_name[0] != '.') names[k++] = strdup(e->d_name);
    closedir(d);
    qsort(names, k, sizeof names[0], cmp_str);
    counts local = {0};
    for (size_t i = 0; i < k; i++) {
        char label[600], dir[4096 + 300];
        snprintf(label, sizeof label, "%s/%s", suite, names[i]);
        if (!o->filter || strstr(label, o->filter)) {
            snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
            run_case(o, dev, s, dir, label, &local);
        }
        free(names[i]);
    }
    printf("conformance %-18s (%s): ran %d, passed %d, failed %d, skipped %d\n", suite, o->device,
           local.ran, local.passed, local.failed, local.skipped);
    n->ran += local.ran;
    n->passed += local.passed;
    n->failed += local.failed;
    n->skipped += local.skipped;
}

int main(int argc, char **argv) {
    opts o = {.device = "cpu", .dir = getenv("KP_ONNX_TESTDATA")};
    if (!o.dir) o.dir = "/usr/share/libonnx-testdata/data";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) o.device = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) o.filter = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) o.dir = argv[++i];
        else if (!strcmp(argv[i], "--verbose")) o.verbose = 1;
        else return fprintf(stderr, "usage: %s [--device D] [--filter T] [--dir D] [--verbose]\n",
                            argv[0]), 2;
    }
    struct stat sb;
    if (stat(o.dir, &sb) != 0) {
        printf("SKIP: no ONNX test data at %s (apt-get install libonnx-testdata)\n", o.dir);
        return 77;
    }
    kp_device_t dev;
    kp_stream_t s;
    if (kp_device_open(o.device, &dev) != KP_OK) {
        printf("SKIP: no %s device: %s\n", o.device, kp_last_error());
        return 77;
    }
    if (kp_stream_create(dev, &s) != KP_OK) return printf("%s\n", kp_last_error()), 1;
    counts n = {0};
    static const char *suites[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        run_suite(&o, dev, s, suites[i], &n);
    printf("conformance total (%s): ran %d, passed %d, failed %d, skipped %d\n", o.device, n.ran,
           n.passed, n.failed, n.skipped);
    printf("%d passed, %d failed, %d skipped\n", n.passed, n.failed, n.skipped);
    kp_stream_destroy(s);
    kp_device_close(dev);
    return n.failed ? 1 : 0;
}
