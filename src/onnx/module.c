/* The `onnx` module: an ONNX model file run by kpipe's engine (src/onnx/).
 *
 *   {"type": "onnx", "id": "net", "params": {"model": "sr.onnx",
 *    "max": {"height": 1080, "width": 1920}, "precision": "fp32", "fuse": "on"}}
 *
 * "precision": "tf32" lets cuda's convolutions and GEMMs round their
 * inputs to TF32 on tensor cores (fp32 storage, about 1e-3 relative
 * error); "fp32" (the default) keeps them in fp32 FMA math, as the host.
 * "fp16" (cuda with cuDNN) runs the convolutions in fp16 with fp32
 * accumulation on channels-last tensors, f16 between one convolution and
 * the next, and the GEMMs as "tf32" does (half.c); the ports stay f32.
 * "auto" is fp16 where the device can (cuda with cuDNN), fp32 elsewhere:
 * for a spec meant to run on either.
 * "tune": "on" measures cuDNN's algorithms for each convolution shape when
 * it is prepared (cudnnFind*: milliseconds each, at setup and at a new
 * shape) instead of taking its heuristics' first choice.
 * "algo_cache" names the folder of the algorithm cache (algo_cache.c): the
 * convolutions' algorithms, chosen once per model, GPU and cuDNN version
 * and read back by the next run, measured ones ("tune") included. Its
 * default is $KP_ALGO_CACHE_DIR, else $XDG_CACHE_HOME/kpipe, else
 * ~/.cache/kpipe; "off" keeps choices in memory only. Used on cuda with
 * cuDNN; elsewhere there is nothing to choose.
 * "fuse": "off" runs every node as the file has it, where "on" (the
 * default) runs a convolution's residual Add and activation inside it
 * (fuse.c).
 *
 * Ports are the model's graph inputs and outputs, named by one rule (see
 * kp__onnx_port_name): "input.1" is the port "input_1". The model's tensors
 * live in the module's slice of the pipeline arena: constants first, then
 * the intermediates, placed by liveness at the maximum shapes; vendor
 * libraries get the module's workspace. Symbolic dimensions are the ports'
 * dynamic dimensions, bounded by "max": a new size re-infers shapes and
 * re-prepares operators (host work, once per change) and, in graph mode,
 * captures one more graph -- the plan itself never changes.
 *
 * Inputs are read where the pipeline puts them: in graph mode the captured
 * work bakes in addresses, so live_inputs stays 0 and the pipeline copies
 * inputs from upstreams whose address may change, as for the engine module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/pipeline.h"
#include "onnx-impl.h"
#include "ops/nn/nn-impl.h" /* kp__ox_cudnn_available: "precision": "auto" */

typedef struct kp__onnx {
    kp__ox_engine *e;
} kp__onnx;

static void kp__onnx_destroy(void *self) {
    kp__onnx *m = self;
    if (!m) return;
    kp__ox_engine_destroy(m->e);
    kp__free(m);
}

static kp_status kp__onnx_mem(void *self, kp_mem_req *r) {
    kp__onnx *m = self;
    memset(r, 0, sizeof *r);
    kp__ox_engine_memory(m->e, &r->device_bytes, NULL, &r->workspace_bytes);
    return KP_OK;
}

static kp_status kp__onnx_setup(void *self, const kp_mem_slice *s) {
    kp__onnx *m = self;
    return kp__ox_engine_bind_memory(m->e, s->device, s->workspace);
}

static void kp__onnx_out_desc(const kp__ox_value *v, kp_tensor_desc *d) {
    kp_status st = kp_desc_init(d, v->dtype, v->ndim, v->shape, NULL);
    KP_ASSERT(st == KP_OK); /* infer checked rank and size */
}

static kp_status kp__onnx_io(void *self, const kp_module_io *io) {
    kp__onnx *m = self;
    kp__ox_graph *g = kp__ox_engine_graph(m->e);
    for (size_t i = 0; i < io->n_inputs; i++)
        KP_CHECK(kp__ox_engine_set_input(m->e, i, &io->inputs[i].desc, io->inputs[i].data));
    KP_CHECK(kp__ox_engine_prepare(m->e, io->stream));
    for (size_t o = 0; o < io->n_outputs; o++) {
        const kp__ox_value *v = &g->values[g->outputs[o]];
        io->outputs[o].data = v->data;
        kp__onnx_out_desc(v, &io->outputs[o].desc);
    }
    return KP_OK;
}

static kp_status kp__onnx_execute(void *self, kp_stream_t s) {
    return kp__ox_engine_run(((kp__onnx *)self)->e, s);
}

/* validate's account: the engine's report, written through a memory stream. */
static size_t kp__onnx_describe(void *self, char *buf, size_t len) {
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return 0;
    kp__ox_engine_report(((kp__onnx *)self)->e, f);
    fclose(f);
    if (len) snprintf(buf, len, "%s", text ? text : "");
    free(text); /* open_memstream's buffer is the C library's */
    return n;
}

static const kp_module_i kp__onnx_iface = {
    .describe = kp__onnx_describe,
    .destroy = kp__onnx_destroy,
    .io = kp__onnx_io,
    .execute = kp__onnx_execute,
    .memory_requirements = kp__onnx_mem,
    .setup_memory = kp__onnx_setup,
};

/* A port's name for a model's value name: every character other than a
 * letter, digit, '_' or '-' becomes '_' ("input.1" -> "input_1"); a name
 * of 64 characters or more keeps its first 54 and ends in '_' and 8 hex
 * digits of its hash, so two long names stay apart. */
static void kp__onnx_port_name(const char *value, char out[KP_NAME_MAX]) {
    size_t n = strlen(value), k = 0;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)value[i]) * 16777619u;
    for (size_t i = 0; i < n && k < KP_NAME_MAX - 1; i++) {
        char c = value[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        out[k++] = ok ? c : '_';
    }
    out[k] = 0;
    if (n >= KP_NAME_MAX) snprintf(out + 54, KP_NAME_MAX - 54, "_%08x", h);
    if (!out[0]) snprintf(out, KP_NAME_MAX, "_");
}

static kp_status kp__onnx_port(kp_port_decl *d, const kp__ox_value *v, const int64_t *max,
                               const kp__ox_value_info *vi) {
    kp__onnx_port_name(v->name, d->name);
    KP_CHECK(kp_desc_init(&d->desc, v->dtype, v->ndim, max ? max : v->shape, NULL));
    d->dynamic = 0;
    for (int k = 0; vi && k < vi->ndim && k < v->ndim; k++)
        if (vi->dims[k].param || vi->dims[k].value < 0) d->dynamic |= 1u << k;
    return KP_OK;
}

static const kp__ox_value_info *kp__onnx_info(const kp__ox_value_info *vi, size_t n,
                                              const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(vi[i].name, name) == 0) return &vi[i];
    return NULL;
}

static kp_status kp__onnx_ports(kp__onnx *m, kp_module_def *def) {
    kp__ox_graph *g = kp__ox_engine_graph(m->e);
    const kp__ox_model *md = g->model;
    if (g->n_inputs > KP_MAX_PORTS || g->n_outputs > KP_MAX_PORTS)
        return kp__error(KP_ERR_UNSUPPORTED, "the model has %zu inputs and %zu outputs; a module "
                         "has at most %d of each", g->n_inputs, g->n_outputs, KP_MAX_PORTS);
    for (size_t i = 0; i < g->n_inputs; i++) {
        const kp__ox_value *v = &g->values[g->inputs[i]];
        KP_CHECK(kp__onnx_port(&def->inputs[i], v, kp__ox_engine_max_shape(m->e, i),
                               kp__onnx_info(md->inputs, md->n_inputs, v->name)));
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        const kp__ox_value *v = &g->values[g->outputs[o]];
        KP_CHECK(kp__onnx_port(&def->outputs[o], v, NULL,
                               kp__onnx_info(md->outputs, md->n_outputs, v->name)));
    }
    def->n_inputs = g->n_inputs;
    def->n_outputs = g->n_outputs;
    for (size_t a = 0; a < def->n_inputs + def->n_outputs; a++)
        for (size_t b = a + 1; b < def->n_inputs + def->n_outputs; b++) {
            const char *x = a < def->n_inputs ? def->inputs[a].name : def->outputs[a - def->n_inputs].name;
            const char *y = b < def->n_inputs ? def->inputs[b].name : def->outputs[b - def->n_inputs].name;
            if (strcmp(x, y) == 0)
                return kp__error(KP_ERR_UNSUPPORTED, "two of the model's inputs and outputs "
                                 "become the same port name '%s'", x);
        }
    return KP_OK;
}

/* "batch=8,height=1080" into bounds (names point into `text`, which is changed). */
static kp_status kp__onnx_bounds(char *text, kp__ox_bound *b, size_t cap, size_t *n) {
    *n = 0;
    for (char *tok = text; tok && *tok;) {
        char *next = strchr(tok, ',');
        if (next) *next++ = 0;
        char *eq = strrchr(tok, '=');
        if (!eq || eq == tok || *n >= cap)
            return kp__error(KP_ERR_INVALID_ARG, "\"max\": expected {\"name\": N, ...} (at most "
                             "%zu names)", cap);
        *eq = 0;
        char *end;
        long long v = strtoll(eq + 1, &end, 10);
        if (*end || v < 1)
            return kp__error(KP_ERR_INVALID_ARG, "\"max\".%s: %s is not a size of at least 1",
                             tok, eq + 1);
        b[*n].name = tok;
        b[(*n)++].max = v;
        tok = next;
    }
    return KP_OK;
}

/* The algorithm cache's folder: the parameter, or the default named at the
 * top of this file; NULL for "off" (or no home to put it in). */
static kp_status kp__onnx_algo_dir(const char *param, char **out) {
    char buf[4096];
    const char *v;
    *out = NULL;
    if (!strcmp(param, "off") || !strcmp(param, "false")) return KP_OK;
    if (param[0]) snprintf(buf, sizeof buf, "%s", param);
    else if ((v = getenv("KP_ALGO_CACHE_DIR")) && *v) snprintf(buf, sizeof buf, "%s", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v) snprintf(buf, sizeof buf, "%s/kpipe", v);
    else if ((v = getenv("HOME")) && *v) snprintf(buf, sizeof buf, "%s/.cache/kpipe", v);
    else return KP_OK;
    size_t n = strlen(buf);
    if (n + 1 >= sizeof buf)
        return kp__error(KP_ERR_INVALID_ARG, "\"algo_cache\": a folder name of over %zu bytes",
                         sizeof buf - 2);
    *out = kp__malloc(n + 1);
    if (!*out) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory");
    memcpy(*out, buf, n + 1);
    return KP_OK;
}

static kp_status kp__onnx_load(const kp_module_env *env, kp__onnx *m) {
    const char *model, *max_text, *precision, *fuse, *tune, *algo_cache;
    KP_CHECK(kp_param_str(env, "model", NULL, &model));
    if (!model || !model[0])
        return kp__error(KP_ERR_INVALID_ARG, "\"model\": the path of an .onnx file is required");
    KP_CHECK(kp_param_str(env, "max", "", &max_text));
    KP_CHECK(kp_param_str(env, "precision", "fp32", &precision));
    KP_CHECK(kp_param_str(env, "fuse", "on", &fuse));
    KP_CHECK(kp_param_str(env, "tune", "off", &tune));
    KP_CHECK(kp_param_str(env, "algo_cache", "", &algo_cache));
    bool tune_on = !strcmp(tune, "on") || !strcmp(tune, "true");
    if (!tune_on && strcmp(tune, "off") != 0 && strcmp(tune, "false") != 0)
        return kp__error(KP_ERR_INVALID_ARG, "\"tune\": \"%s\": on or off", tune);
    bool fuse_on = !strcmp(fuse, "on") || !strcmp(fuse, "true");
    if (!fuse_on && strcmp(fuse, "off") != 0 && strcmp(fuse, "false") != 0)
        return kp__error(KP_ERR_INVALID_ARG, "\"fuse\": \"%s\": on or off", fuse);
    bool tf32 = strcmp(precision, "tf32") == 0, fp16 = strcmp(precision, "fp16") == 0;
    bool cuda = strcmp(kp_device_kernel_form(env->dev), "cuda") == 0;
    if (strcmp(precision, "auto") == 0) /* the fastest the device has; fp32 on the host */
        fp16 = cuda && kp__ox_cudnn_available();
    else if (strcmp(precision, "fp32") != 0 && !tf32 && !fp16)
        return kp__error(KP_ERR_INVALID_ARG, "\"precision\": \"%s\": fp32, tf32, fp16 or auto",
                         precision);
    if (fp16 && !cuda)
        return kp__error(KP_ERR_UNSUPPORTED, "\"precision\": \"fp16\" runs on cuda devices (with "
                         "cuDNN); %s runs models in fp32", kp_device_name(env->dev));
    char path[4096], bounds_text[1024];
    if (model[0] != '/' && env->base_dir) snprintf(path, sizeof path, "%s/%s", env->base_dir, model);
    else snprintf(path, sizeof path, "%s", model);
    snprintf(bounds_text, sizeof bounds_text, "%s", max_text);
    kp__ox_bound b[32];
    size_t nb;
    KP_CHECK(kp__onnx_bounds(bounds_text, b, 32, &nb));
    char *algo_dir;
    KP_CHECK(kp__onnx_algo_dir(algo_cache, &algo_dir));
    kp__ox_model *md;
    kp__ox_graph *g;
    kp_status st = kp__ox_read_file(path, &md);
    if (st == KP_OK) st = kp__ox_graph_build(md, &g);
    if (st != KP_OK) {
        kp__free(algo_dir);
        return st;
    }
    g->algo_dir = algo_dir;
    g->no_fusion = !fuse_on;
    g->tf32 = tf32 || fp16; /* fp16's GEMMs run as tf32's do */
    g->fp16 = fp16;
    g->tune = tune_on;
    return kp__ox_engine_create(env->dev, g, b, nb, &m->e);
}

static kp_status kp__onnx_create(const kp_module_env *env, kp_module_def *def) {
    kp__onnx *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory");
    kp_status st = kp__onnx_load(env, m);
    if (st == KP_OK) st = kp__onnx_ports(m, def);
    if (st != KP_OK) {
        kp__onnx_destroy(m);
        return st;
    }
    def->iface = &kp__onnx_iface;
    def->self = m;
    return KP_OK;
}

/* Listed by kp_builtin_module(onnx ...) in src/CMakeLists.txt: the module
 * registry calls this once, as it does every built-in module's. */
kp_status kp__builtin_onnx(void);
kp_status kp__builtin_onnx(void) { return kp_module_register("onnx", kp__onnx_create); }
