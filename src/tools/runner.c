/* Running a spec from the command line: device tensors for the external
 * inputs, filled from .npy files or seeded random data, and the lifecycle. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool-impl.h"

double kpt_now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int kpt_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

kpt_stats kpt_stats_of(double *v, size_t n) {
    kpt_stats s = {0};
    if (!n) return s;
    qsort(v, n, sizeof *v, kpt_cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
        /* nearest-rank percentiles */
#define KPT_PCT(p) v[(size_t)((p) / 100.0 * (double)(n - 1) + 0.5)]
    s.min = v[0];
    s.p50 = KPT_PCT(50);
    s.p90 = KPT_PCT(90);
    s.p99 = KPT_PCT(99);
    s.max = v[n - 1];
    s.mean = sum / (double)n;
#undef KPT_PCT
    return s;
}

size_t kpt_tensor_bytes(const kp_tensor_desc *d) {
    return (size_t)kp_desc_numel(d) * kp_dtype_size(d->dtype);
}

const char *kpt_model_max;
const char *kpt_model_fuse;
const char *kpt_model_precision;
const char *kpt_model_tune;
const char *kpt_model_algo_cache;

bool kpt_is_model_file(const char *path) {
    size_t n = strlen(path);
    return n > 5 && strcmp(path + n - 5, ".onnx") == 0;
}

kp_status kpt_pipeline_open(kp_device_t dev, const char *path, const kp_pipeline_options *o,
                            kp_pipeline_t *out) {
    if (!kpt_is_model_file(path)) return kp_pipeline_create_from_file_opts(dev, path, o, out);
    kp_param params[6] = {{"model", path}};
    size_t np = 1;
    if (kpt_model_max) params[np++] = (kp_param){"max", kpt_model_max};
    if (kpt_model_fuse) params[np++] = (kp_param){"fuse", kpt_model_fuse};
    if (kpt_model_precision) params[np++] = (kp_param){"precision", kpt_model_precision};
    if (kpt_model_tune) params[np++] = (kp_param){"tune", kpt_model_tune};
    if (kpt_model_algo_cache) params[np++] = (kp_param){"algo_cache", kpt_model_algo_cache};
    kp_module_spec m = {.type = "onnx", .id = "model", .params = params, .n_params = np};
    kp_pipeline_spec spec = KP_PIPELINE_SPEC_INIT;
    spec.name = "model";
    spec.modules = &m;
    spec.n_modules = 1;
    if (o && o->mode != KP_EXEC_FROM_SPEC) spec.mode = (kp_exec_mode)o->mode;
    kp_status st = kp_pipeline_create(dev, &spec, out);
    if (st != KP_OK) return kpt_keep_error(st);
    return KP_OK;
}

kp_status kpt_runner_open(kpt_runner *r, const char *devname, const char *spec, int mode) {
    memset(r, 0, sizeof *r);
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = mode;
    KPT_CHECK(kp_device_open(devname, &r->dev));
    KPT_CHECK(kp_stream_create(r->dev, &r->s));
    KPT_CHECK(kpt_pipeline_open(r->dev, spec, &o, &r->p));
    kp_pipeline_report rep;
    KPT_CHECK(kp_pipeline_report_get(r->p, &rep));
    r->n_in = rep.n_inputs;
    r->n_out = rep.n_outputs;
    r->in = calloc(r->n_in + 1, sizeof *r->in);
    r->decl = calloc(r->n_in + 1, sizeof *r->decl);
    r->dynamic = calloc(r->n_in + 1, sizeof *r->dynamic);
    r->var = calloc(r->n_in + 1, sizeof *r->var);
    r->n_var = calloc(r->n_in + 1, sizeof *r->n_var);
    r->out = calloc(r->n_out + 1, sizeof *r->out);
    if (!r->in || !r->decl || !r->dynamic || !r->var || !r->n_var || !r->out)
        return kpt_error(KP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (size_t i = 0; i < r->n_in; i++) {
        KPT_CHECK(kp_pipeline_input_info(r->p, i, &r->decl[i]));
        KPT_CHECK(kp_pipeline_input_dynamic(r->p, i, &r->dynamic[i]));
        r->in[i] = r->decl[i];
    }
    for (size_t i = 0; i < r->n_out; i++) KPT_CHECK(kp_pipeline_output_info(r->p, i, &r->out[i]));
    return KP_OK;
}

/* Adds a variant of input i with `desc`: host and device memory. */
static kp_status kpt_add_variant(kpt_runner *r, size_t i, const kp_tensor_desc *desc,
                                 kpt_variant **out) {
    kpt_variant *v = realloc(r->var[i], (r->n_var[i] + 1) * sizeof *v);
    if (!v) return kpt_error(KP_ERR_OUT_OF_MEMORY, "out of host memory");
    r->var[i] = v;
    v = &v[r->n_var[i]];
    memset(v, 0, sizeof *v);
    v->desc = *desc;
    v->bytes = kpt_tensor_bytes(desc);
    v->host = malloc(v->bytes ? v->bytes : 1);
    if (!v->host) return kpt_error(KP_ERR_OUT_OF_MEMORY, "out of host memory for input %s",
                                   r->decl[i].name);
    r->n_var[i]++;
    *out = v;
    return kp_malloc(r->dev, v->bytes ? v->bytes : 1, &v->dev);
}

static uint64_t kpt_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Floats uniform in [-1, 1); integers in [-100, 100) (unsigned: [0, 200)). */
static kp_status kpt_fill_random(const kp_port_info *port, void *p, uint64_t *s) {
    size_t n = (size_t)kp_desc_numel(&port->desc);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = kpt_next(s);
        int64_t v = (int64_t)(r % 200) - 100;
        switch (port->desc.dtype) {
        case KP_F32: ((float *)p)[i] = (float)((double)(r >> 11) / 4503599627370496.0 - 1.0); break;
        case KP_I32: ((int32_t *)p)[i] = (int32_t)v; break;
        case KP_I16: ((int16_t *)p)[i] = (int16_t)v; break;
        case KP_I8: ((int8_t *)p)[i] = (int8_t)v; break;
        case KP_U8: ((uint8_t *)p)[i] = (uint8_t)(v + 100); break;
        case KP_I64: ((int64_t *)p)[i] = v; break;
        case KP_U64: ((uint64_t *)p)[i] = (uint64_t)(v + 100); break;
        case KP_U16: ((uint16_t *)p)[i] = (uint16_t)(v + 100); break;
        default:
            return kpt_error(KP_ERR_UNSUPPORTED,
                             "input %s: no random data for dtype %s; give it "
                             "with --input %s=FILE.npy",
                             port->name, kp_dtype_name(port->desc.dtype), port->name);
        }
    }
    return KP_OK;
}

/* A file's tensor for input i: the declared shape when the element counts
 * agree (a reshape), else its own shape, which the pipeline checks against
 * the dynamic dimensions each tick. */
static kp_status kpt_load_input(kpt_runner *r, size_t i, const char *path) {
    kp_tensor_desc d;
    void *data;
    size_t bytes;
    char want[96], got[96];
    const kp_port_info *decl = &r->decl[i];
    KPT_CHECK(kp_npy_load(path, &d, &data, &bytes));
    kp_status st = KP_OK;
    kpt_variant *v = NULL;
    if (d.dtype == decl->desc.dtype && kp_desc_numel(&d) == kp_desc_numel(&decl->desc))
        d = decl->desc;
    else if (d.dtype != decl->desc.dtype || d.ndim != decl->desc.ndim || !r->dynamic[i])
        st = kpt_error(KP_ERR_MISMATCH, "input %s: %s holds %s, the pipeline takes %s",
                       decl->name, path, kp_desc_str(&d, got, sizeof got),
                       kp_desc_str(&decl->desc, want, sizeof want));
    if (st == KP_OK) st = kpt_add_variant(r, i, &d, &v);
    if (st == KP_OK) memcpy(v->host, data, v->bytes);
    kp_npy_free(data);
    return st;
}

kp_status kpt_runner_inputs(kpt_runner *r, const kpt_named_file *files, size_t n_files,
                            uint64_t seed) {
    for (size_t f = 0; f < n_files; f++) {
        size_t i = 0;
        while (i < r->n_in && strcmp(r->decl[i].name, files[f].name) != 0) i++;
        if (i == r->n_in) {
            char names[512] = "";
            for (size_t k = 0, used = 0; k < r->n_in && used < sizeof names; k++)
                used += (size_t)snprintf(names + used, sizeof names - used, " %s",
                                         r->decl[k].name);
            return kpt_error(KP_ERR_NOT_FOUND,
                             "--input %s: the pipeline has no input of that "
                             "name (inputs:%s)",
                             files[f].name, names);
        }
    }
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
    for (size_t i = 0; i < r->n_in; i++) {
        for (size_t f = 0; f < n_files; f++)
            if (strcmp(r->decl[i].name, files[f].name) == 0)
                KPT_CHECK(kpt_load_input(r, i, files[f].path));
        if (!r->n_var[i]) {
            kpt_variant *v;
            KPT_CHECK(kpt_add_variant(r, i, &r->decl[i].desc, &v));
            KPT_CHECK(kpt_fill_random(&r->decl[i], v->host, &s));
        }
        for (size_t k = 0; k < r->n_var[i]; k++)
            KPT_CHECK(kp_memcpy_htod(r->dev, r->var[i][k].dev, r->var[i][k].host,
                                     r->var[i][k].bytes));
    }
    return KP_OK;
}

kp_status kpt_runner_copy_inputs(kpt_runner *r, const kpt_runner *src) {
    for (size_t i = 0; i < r->n_in && i < src->n_in; i++)
        for (size_t k = 0; k < src->n_var[i]; k++) {
            kpt_variant *v;
            KPT_CHECK(kpt_add_variant(r, i, &src->var[i][k].desc, &v));
            memcpy(v->host, src->var[i][k].host, v->bytes);
            KPT_CHECK(kp_memcpy_htod(r->dev, v->dev, v->host, v->bytes));
        }
    memcpy(r->shapes, src->shapes, sizeof r->shapes);
    r->n_shapes = src->n_shapes;
    return KP_OK;
}

/* Tick t's inputs: variant t mod count of each, with --shapes applied. */
static void kpt_bind_tick(kpt_runner *r) {
    for (size_t i = 0; i < r->n_in; i++) {
        const kpt_variant *v = &r->var[i][(size_t)r->tick % r->n_var[i]];
        r->in[i].data = v->dev;
        r->in[i].desc = v->desc;
        if (!r->n_shapes) continue;
        int64_t n = r->shapes[(size_t)r->tick % r->n_shapes], shape[KP_MAX_DIMS];
        for (int d = 0; d < v->desc.ndim; d++)
            shape[d] = r->dynamic[i] >> d & 1u ? n : v->desc.shape[d];
        (void)kp_desc_init(&r->in[i].desc, v->desc.dtype, v->desc.ndim, shape, NULL);
    }
}

kp_status kpt_runner_prepare(kpt_runner *r) {
    KPT_CHECK(kp_pipeline_setup(r->p));
    kpt_bind_tick(r);
    KPT_CHECK(kp_pipeline_configure_io(r->p, r->in, r->n_in, r->out, r->n_out, r->s));
    KPT_CHECK(kp_pipeline_warmup(r->p, r->s));
    if (kp_pipeline_mode(r->p) == KP_EXEC_GRAPH) KPT_CHECK(kp_pipeline_build_graph(r->p));
    return kp_stream_sync(r->s);
}

kp_status kpt_runner_tick(kpt_runner *r, bool wait) {
    kpt_bind_tick(r);
    r->tick++;
    KPT_CHECK(kp_pipeline_configure_io(r->p, r->in, r->n_in, r->out, r->n_out, r->s));
    if (kp_pipeline_mode(r->p) == KP_EXEC_GRAPH)
        KPT_CHECK(kp_pipeline_execute_graph(r->p, r->s));
    else
        KPT_CHECK(kp_pipeline_execute_stream(r->p, r->s));
    return wait ? kp_stream_sync(r->s) : KP_OK;
}

kp_status kpt_runner_fetch(kpt_runner *r, size_t i, void *host) {
    KPT_CHECK(kp_stream_sync(r->s));
    return kp_memcpy_dtoh(r->dev, host, r->out[i].data, kpt_tensor_bytes(&r->out[i].desc));
}

void kpt_runner_close(kpt_runner *r) {
    if (r->s) (void)kp_stream_sync(r->s);
    kp_pipeline_destroy(r->p);
    for (size_t i = 0; i < r->n_in && r->var; i++) {
        for (size_t k = 0; k < r->n_var[i]; k++) {
            kp_free(r->dev, r->var[i][k].dev);
            free(r->var[i][k].host);
        }
        free(r->var[i]);
    }
    free(r->in);
    free(r->decl);
    free(r->dynamic);
    free(r->var);
    free(r->n_var);
    free(r->out);
    kp_stream_destroy(r->s);
    kp_device_close(r->dev);
    memset(r, 0, sizeof *r);
}
