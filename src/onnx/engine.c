/* A model made ready on a device: planned once at the maximum shapes, then
 * per tick only bound and enqueued. A new input shape re-infers shapes,
 * re-folds shape arithmetic and re-prepares the operators (descriptors,
 * algorithms) -- host work, once per change, never a new plan: every value
 * keeps the offset it got at the maximum shapes. */
#include <stdio.h>
#include <string.h>

#include "../core/half-impl.h"
#include "onnx-impl.h"

/* The operators' states for one set of input shapes. */
typedef struct kp__ox_shape_set {
    int64_t *shapes; /* n_inputs x KP_MAX_DIMS */
    void **states;   /* one per node */
    size_t workspace;
} kp__ox_shape_set;

/* More shape sets than this is a stream of ever-new sizes, not a few
 * resolutions: refused rather than grown without bound. */
#define KP__OX_MAX_SHAPE_SETS 1024

struct kp__ox_engine {
    kp_device_t dev;
    kp__ox_graph *g;
    bool host; /* the device runs host kernels (cpu) */
#ifdef KP_HAVE_CUDA
    kp__ox_cuda *cuda;
#endif
    kp__ox_algo_cache *algos; /* cuda with cuDNN and a cache folder; else NULL */
    size_t const_bytes, region_bytes, workspace_bytes;
    uint8_t *region;
    void *workspace;
    bool owns_memory;
    int64_t (*max_shape)[KP_MAX_DIMS]; /* per graph input */
    int64_t (*cur_shape)[KP_MAX_DIMS]; /* as last prepared */
    bool prepared;                     /* cur_shape holds what the graph was inferred for */
    /* Operator states by input shapes: work already enqueued, and graphs
     * captured for earlier shapes, keep pointing at the states they were
     * made with, so a state lives until the engine does. A return to a
     * known shape takes its states back without preparing again. */
    kp__ox_shape_set *sets;
    size_t n_sets, cap_sets;
};

kp__ox_graph *kp__ox_engine_graph(const kp__ox_engine *e) { return e->g; }

const kp__ox_algo_cache *kp__ox_engine_algos(const kp__ox_engine *e) { return e->algos; }

void kp__ox_engine_memory(const kp__ox_engine *e, size_t *region, size_t *constants,
                          size_t *workspace) {
    if (region) *region = e->region_bytes;
    if (constants) *constants = e->const_bytes;
    if (workspace) *workspace = e->workspace_bytes;
}

const int64_t *kp__ox_engine_max_shape(const kp__ox_engine *e, size_t input) {
    return e->max_shape[input];
}

static kp__ox_exec kp__ox_engine_exec(const kp__ox_engine *e, kp_stream_t s) {
    kp__ox_exec x = {.stream = s, .dev = e->dev, .host = e->host, .workspace = e->workspace,
                     .workspace_bytes = e->workspace_bytes};
#ifdef KP_HAVE_CUDA
    x.cuda = e->cuda;
#endif
    return x;
}

/* The maximum of input `in`'s dimension d: its fixed size, or a bound. */
static kp_status kp__ox_dim_max(const kp__ox_value_info *vi, int d, const kp__ox_bound *bounds,
                                size_t n_bounds, int64_t *out) {
    const kp__ox_dim *dim = &vi->dims[d];
    if (dim->value >= 0 && !dim->param) {
        *out = dim->value;
        return KP_OK;
    }
    char anon[320];
    snprintf(anon, sizeof anon, "%s:%d", vi->name, d);
    for (size_t b = 0; b < n_bounds; b++)
        if ((dim->param && strcmp(bounds[b].name, dim->param) == 0) ||
            strcmp(bounds[b].name, anon) == 0) {
            if (bounds[b].max < 1)
                return kp__error(KP_ERR_INVALID_ARG, "the bound of '%s' is %lld; it must be at "
                                 "least 1", bounds[b].name, (long long)bounds[b].max);
            *out = bounds[b].max;
            return KP_OK;
        }
    if (dim->param)
        return kp__error(KP_ERR_INVALID_ARG, "input '%s' dimension %d is symbolic ('%s'): give its "
                         "maximum (\"max\": {\"%s\": N})", vi->name, d, dim->param, dim->param);
    return kp__error(KP_ERR_INVALID_ARG, "input '%s' dimension %d has no size in the model: give "
                     "its maximum (\"max\": {\"%s\": N})", vi->name, d, anon);
}

static const kp__ox_value_info *kp__ox_input_info(const kp__ox_graph *g, size_t i) {
    const char *name = g->values[g->inputs[i]].name;
    for (size_t k = 0; k < g->model->n_inputs; k++)
        if (strcmp(g->model->inputs[k].name, name) == 0) return &g->model->inputs[k];
    return NULL;
}

static kp_status kp__ox_engine_max(kp__ox_engine *e, const kp__ox_bound *bounds, size_t n) {
    kp__ox_graph *g = e->g;
    for (size_t i = 0; i < g->n_inputs; i++) {
        const kp__ox_value_info *vi = kp__ox_input_info(g, i);
        kp__ox_value *v = &g->values[g->inputs[i]];
        v->numel = 1;
        for (int d = 0; d < v->ndim; d++) {
            KP_CHECK(kp__ox_dim_max(vi, d, bounds, n, &e->max_shape[i][d]));
            v->shape[d] = e->max_shape[i][d];
            v->numel *= v->shape[d];
        }
    }
    return KP_OK;
}

static size_t kp__ox_shapes_len(const kp__ox_engine *e) {
    return (e->g->n_inputs ? e->g->n_inputs : 1) * KP_MAX_DIMS;
}

static kp__ox_shape_set *kp__ox_find_set(kp__ox_engine *e) {
    size_t len = kp__ox_shapes_len(e);
    for (size_t k = 0; k < e->n_sets; k++)
        if (memcmp(e->sets[k].shapes, e->cur_shape, len * sizeof(int64_t)) == 0)
            return &e->sets[k];
    return NULL;
}

/* Each per-tick node's prepare for the current shapes, kept as a new shape
 * set; the workspace they ask for, at most. */
static kp_status kp__ox_prepare_nodes(kp__ox_engine *e, size_t *ws) {
    kp__ox_graph *g = e->g;
    kp__ox_exec x = kp__ox_engine_exec(e, NULL);
    if (e->n_sets == KP__OX_MAX_SHAPE_SETS)
        return kp__error(KP_ERR_UNSUPPORTED, "onnx: %d different input shapes have been run; give "
                         "the inputs fewer distinct sizes", KP__OX_MAX_SHAPE_SETS);
    if (e->n_sets == e->cap_sets) {
        size_t cap = e->cap_sets ? 2 * e->cap_sets : 4;
        kp__ox_shape_set *sets = kp__calloc(cap, sizeof *sets);
        if (!sets) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for shape sets");
        if (e->n_sets) memcpy(sets, e->sets, e->n_sets * sizeof *sets);
        kp__free(e->sets);
        e->sets = sets;
        e->cap_sets = cap;
    }
    kp__ox_shape_set *set = &e->sets[e->n_sets];
    size_t len = kp__ox_shapes_len(e);
    set->shapes = kp__calloc(len, sizeof(int64_t));
    set->states = kp__calloc(g->n_nodes + 1, sizeof(void *));
    if (!set->shapes || !set->states) {
        kp__free(set->shapes);
        kp__free(set->states);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for a shape set");
    }
    memcpy(set->shapes, e->cur_shape, len * sizeof(int64_t));
    e->n_sets++; /* from here on, destroy releases whatever this set holds */
    *ws = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        kp__ox_gnode *n = &g->nodes[i];
        n->state = NULL;
        if (n->folded || n->op->view || !n->op->prepare) continue;
        size_t need = 0;
        kp_status st = n->op->prepare(&x, g, n, &need);
        set->states[i] = n->state;
        if (st != KP_OK) return st;
        if (need > *ws) *ws = need;
    }
    set->workspace = *ws;
    kp__ox_algo_cache_save(e->algos); /* what this shape's convolutions chose */
    return KP_OK;
}

/* Points every node at the states of the current shapes. */
static void kp__ox_use_set(kp__ox_engine *e, const kp__ox_shape_set *set) {
    for (size_t i = 0; i < e->g->n_nodes; i++) e->g->nodes[i].state = set->states[i];
}

static void kp__ox_free_sets(kp__ox_engine *e) {
    kp__ox_graph *g = e->g;
    for (size_t k = 0; k < e->n_sets; k++) {
        for (size_t i = 0; g && i < g->n_nodes; i++) {
            kp__ox_gnode *n = &g->nodes[i];
            n->state = e->sets[k].states[i];
            if (n->state && n->op && n->op->release) n->op->release(n);
            n->state = NULL;
        }
        kp__free(e->sets[k].shapes);
        kp__free(e->sets[k].states);
    }
    kp__free(e->sets);
    e->sets = NULL;
    e->n_sets = 0;
}

static kp_status kp__ox_engine_setup(kp__ox_engine *e, const kp__ox_bound *bounds, size_t n) {
    kp__ox_graph *g = e->g;
    e->max_shape = kp__calloc(g->n_inputs + 1, sizeof *e->max_shape);
    e->cur_shape = kp__calloc(g->n_inputs + 1, sizeof *e->cur_shape);
    if (!e->max_shape || !e->cur_shape)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the engine");
    KP_CHECK(kp__ox_engine_max(e, bounds, n));
    for (size_t i = 0; i < g->n_inputs; i++)
        memcpy(e->cur_shape[i], e->max_shape[i], sizeof e->cur_shape[i]);
#ifdef KP_HAVE_CUDA
    if (!e->host) {
        char key[KP__OX_ALGO_KEY];
        if (g->algo_dir && kp__ox_cuda_device_key(e->dev, key, sizeof key) == KP_OK) {
            KP_CHECK(kp__ox_algo_cache_create(g->algo_dir, g->model->digest, key, &e->algos));
            kp__ox_algo_cache_load(e->algos);
        } else {
            kp_clear_error(); /* no cuDNN: no algorithms to keep */
        }
        KP_CHECK(kp__ox_cuda_create(e->dev, g->tf32, g->tune, e->algos, &e->cuda));
    }
#endif
    KP_CHECK(kp__ox_infer(g));
    KP_CHECK(kp__ox_fuse(g));
    KP_CHECK(kp__ox_half(g));
    KP_CHECK(kp__ox_plan(g, &e->const_bytes, &e->region_bytes));
    KP_CHECK(kp__ox_prepare_nodes(e, &e->workspace_bytes));
    e->prepared = true;
    return KP_OK;
}

kp_status kp__ox_engine_create(kp_device_t dev, kp__ox_graph *g, const kp__ox_bound *bounds,
                               size_t n_bounds, kp__ox_engine **out) {
    kp__ox_engine *e = kp__calloc(1, sizeof *e);
    if (!e) {
        kp__ox_graph_free(g);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the engine");
    }
    e->dev = dev;
    e->g = g;
    e->host = strcmp(kp_device_kernel_form(dev), "host") == 0;
    kp_status st = KP_OK;
#ifndef KP_HAVE_CUDA
    if (!e->host)
        st = kp__error(KP_ERR_UNSUPPORTED, "the engine runs on host or cuda devices; %s runs "
                       "neither", kp_device_name(dev));
#endif
    if (st == KP_OK) st = kp__ox_engine_setup(e, bounds, n_bounds);
    if (st != KP_OK) {
        kp__ox_engine_destroy(e);
        return st;
    }
    *out = e;
    return KP_OK;
}

void kp__ox_engine_destroy(kp__ox_engine *e) {
    if (!e) return;
    kp__ox_free_sets(e);
    if (e->owns_memory) {
        kp_free(e->dev, e->region);
        kp_free(e->dev, e->workspace);
    }
    kp__ox_graph_free(e->g);
#ifdef KP_HAVE_CUDA
    if (e->cuda) kp__ox_cuda_destroy(e->cuda);
#endif
    kp__ox_algo_cache_free(e->algos);
    kp__free(e->max_shape);
    kp__free(e->cur_shape);
    kp__free(e);
}

/* A weight of an fp16 convolution (half.c): [K, C, R, S] f32 on the host
 * to [K, R, S, C'] f16 on the device (C' = half_cin, zeros past C), through
 * a buffer of setup time; a bias: f32 to f16. */
static kp_status kp__ox_upload_half(kp__ox_engine *e, const kp__ox_value *val) {
    if (val->ndim == 1 && val->dtype == KP_F32) { /* a bias */
        uint16_t *b = kp__calloc((size_t)val->numel + 1, sizeof *b);
        const float *src = val->host;
        if (!b)
            return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to convert '%s'", val->name);
        for (int64_t i = 0; i < val->numel; i++) b[i] = kp__f32_to_f16(src[i]);
        kp_status st = kp_memcpy_htod(e->dev, e->region + val->offset, b, kp__ox_value_bytes(val));
        kp__free(b);
        return st;
    }
    if (val->ndim != 4 || val->dtype != KP_F32)
        return kp__error(KP_ERR_INTERNAL, "onnx: '%s' is held in fp16 but is not a 4-D f32 weight",
                         val->name);
    int64_t k = val->shape[0], c = val->shape[1], r = val->shape[2], s = val->shape[3];
    int64_t cp = val->half_cin > c ? val->half_cin : c; /* padded by zeros */
    uint16_t *buf = kp__calloc(kp__ox_value_bytes(val) / 2 + 1, sizeof *buf);
    if (!buf) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to convert '%s'", val->name);
    const float *src = val->host;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < c; b++)
            for (int64_t i = 0; i < r * s; i++)
                buf[(a * r * s + i) * cp + b] = kp__f32_to_f16(src[(a * c + b) * r * s + i]);
    kp_status st = kp_memcpy_htod(e->dev, e->region + val->offset, buf, kp__ox_value_bytes(val));
    kp__free(buf);
    return st;
}

/* Uploads the constants a per-tick node reads: initializers once, folded
 * values after each fold. */
static kp_status kp__ox_upload(kp__ox_engine *e, bool initializers) {
    kp__ox_graph *g = e->g;
    for (size_t v = 0; v < g->n_values; v++) {
        kp__ox_value *val = &g->values[v];
        if (!val->planned || !val->is_const) continue;
        if ((val->kind == KP__OX_V_INIT) != initializers) continue;
        size_t bytes = kp__ox_value_bytes(val);
        if (bytes > val->max_bytes)
            return kp__error(KP_ERR_UNSUPPORTED, "onnx: constant '%s' needs %zu bytes at these "
                             "shapes, more than the %zu planned at the maximum ones", val->name,
                             bytes, val->max_bytes);
        if (bytes && val->half) KP_CHECK(kp__ox_upload_half(e, val));
        else if (bytes) KP_CHECK(kp_memcpy_htod(e->dev, e->region + val->offset, val->host, bytes));
    }
    return KP_OK;
}

kp_status kp__ox_engine_bind_memory(kp__ox_engine *e, void *region, void *workspace) {
    kp__ox_graph *g = e->g;
    if (e->region_bytes && !region)
        return kp__error(KP_ERR_INVALID_ARG, "onnx: the engine needs a region of %zu bytes",
                         e->region_bytes);
    e->region = region;
    e->workspace = workspace;
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].planned) g->values[v].data = e->region + g->values[v].offset;
    KP_CHECK(kp__ox_upload(e, true));
    return kp__ox_upload(e, false);
}

kp_status kp__ox_engine_alloc(kp__ox_engine *e) {
    void *region = NULL, *ws = NULL;
    if (e->region_bytes) KP_CHECK(kp_malloc(e->dev, e->region_bytes, &region));
    if (e->workspace_bytes) {
        kp_status st = kp_malloc(e->dev, e->workspace_bytes, &ws);
        if (st != KP_OK) {
            kp_free(e->dev, region);
            return st;
        }
    }
    e->owns_memory = true;
    return kp__ox_engine_bind_memory(e, region, ws);
}

kp_status kp__ox_engine_set_input(kp__ox_engine *e, size_t i, const kp_tensor_desc *d,
                                  void *data) {
    kp__ox_graph *g = e->g;
    if (i >= g->n_inputs)
        return kp__error(KP_ERR_INVALID_ARG, "onnx: the model has %zu inputs; there is no input %zu",
                         g->n_inputs, i);
    kp__ox_value *v = &g->values[g->inputs[i]];
    if (d->dtype != v->dtype || d->ndim != v->ndim) {
        char a[128];
        return kp__error(KP_ERR_MISMATCH, "input '%s' is %s, but the model takes %s of rank %d",
                         v->name, kp_desc_str(d, a, sizeof a), kp_dtype_name(v->dtype), v->ndim);
    }
    if (!kp_desc_is_contiguous(d))
        return kp__error(KP_ERR_UNSUPPORTED, "input '%s' must be contiguous", v->name);
    for (int k = 0; k < d->ndim; k++)
        if (d->shape[k] > e->max_shape[i][k] || d->shape[k] < 0)
            return kp__error(KP_ERR_MISMATCH, "input '%s' dimension %d is %lld; the engine was "
                             "planned for at most %lld", v->name, k, (long long)d->shape[k],
                             (long long)e->max_shape[i][k]);
    for (int k = 0; k < d->ndim; k++)
        if (d->shape[k] != e->cur_shape[i][k]) e->prepared = false;
    memcpy(e->cur_shape[i], d->shape, sizeof(int64_t) * (size_t)d->ndim);
    v->data = (uint8_t *)data + d->offset * (int64_t)kp_dtype_size(d->dtype);
    return KP_OK;
}

/* Checks every planned value still fits the bytes it was given. */
static kp_status kp__ox_check_fit(const kp__ox_graph *g) {
    for (size_t v = 0; v < g->n_values; v++) {
        const kp__ox_value *val = &g->values[v];
        size_t bytes = kp__ox_value_bytes(val);
        if (val->planned && bytes > val->max_bytes)
            return kp__error(KP_ERR_UNSUPPORTED, "onnx: value '%s' needs %zu bytes at these input "
                             "shapes, more than the %zu it has at the maximum ones", val->name,
                             bytes, val->max_bytes);
    }
    return KP_OK;
}

static kp_status kp__ox_reshape(kp__ox_engine *e, kp_stream_t s) {
    kp__ox_graph *g = e->g;
    for (size_t i = 0; i < g->n_inputs; i++) {
        kp__ox_value *v = &g->values[g->inputs[i]];
        v->numel = 1;
        for (int d = 0; d < v->ndim; d++) {
            v->shape[d] = e->cur_shape[i][d];
            v->numel *= v->shape[d];
        }
    }
    KP_CHECK(kp__ox_infer(g));
    KP_CHECK(kp__ox_check_fit(g));
    /* folding pointed constants at their host copies: the run reads the region */
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].planned) g->values[v].data = e->region + g->values[v].offset;
    size_t ws = 0;
    const kp__ox_shape_set *known = kp__ox_find_set(e);
    if (known) {
        kp__ox_use_set(e, known);
        ws = known->workspace;
    } else {
        KP_CHECK(kp__ox_prepare_nodes(e, &ws));
    }
    if (ws > e->workspace_bytes)
        return kp__error(KP_ERR_UNSUPPORTED, "onnx: these input shapes need %zu bytes of "
                         "workspace; %zu were planned at the maximum ones", ws, e->workspace_bytes);
    /* folded values are re-uploaded: earlier work may still read them */
    if (s) KP_CHECK(kp_stream_sync(s));
    KP_CHECK(kp__ox_upload(e, false));
    e->prepared = true;
    return KP_OK;
}

kp_status kp__ox_engine_prepare(kp__ox_engine *e, kp_stream_t s) {
    kp__ox_graph *g = e->g;
    if (!e->prepared) {
        kp_status st = kp__ox_reshape(e, s);
        if (st != KP_OK) return st;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        if (n->folded || !n->op->view || n->out[0] < 0 || n->in[0] < 0) continue;
        g->values[n->out[0]].data = g->values[n->in[0]].data;
    }
    return KP_OK;
}

kp_status kp__ox_engine_run(kp__ox_engine *e, kp_stream_t s) {
    kp__ox_graph *g = e->g;
    if (!e->prepared)
        return kp__error(KP_ERR_STATE, "onnx: an input shape changed since the last prepare");
    kp__ox_exec x = kp__ox_engine_exec(e, s);
#ifdef KP_HAVE_CUDA
    if (e->cuda) KP_CHECK(kp__ox_cuda_bind(e->cuda, s, e->workspace, e->workspace_bytes));
#endif
    for (size_t i = 0; i < g->n_nodes; i++) {
        kp__ox_gnode *n = &g->nodes[i];
        if (n->folded || n->op->view) continue;
        kp_status st = n->op->run(&x, g, n);
        if (st != KP_OK) return st;
    }
    return KP_OK;
}
