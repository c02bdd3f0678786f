/* The `engine` module: an opaque vendor computation, result0 = arg0 + arg1
 * (float32). In graph mode its work is captured at warmup into a child graph,
 * which bakes in its input addresses: its inputs then need fixed addresses,
 * so inputs from dynamic upstreams are copied into buffers of its own each
 * tick. Those copies are memcpy nodes in front of the child graph (one graph
 * launch per tick instead of a launch per copy); configure_io re-points a
 * copy node only when its source address changed. In stream mode it calls
 * the vendor library each tick with the current addresses. */
#include <string.h>

#include "modules-impl.h"

typedef struct kp__engine {
    kp_exec_mode mode;
    int64_t n;
    const kp__engine_backend_i *be;
    void *be_ctx;
    size_t ws_bytes;
    bool copy[2];
    const float *bound[2]; /* inputs as bound this tick */
    float *own[2];         /* own input buffers (copy mode) */
    float *out;
    kp_tensor_desc out_desc;
    kp_graph_t captured;   /* graph mode, after warmup */
    kp_graph_node_t copy_node[2];
    const float *copy_src[2]; /* source of each copy node as last set */
} kp__engine;

static const float *kp__engine_in(const kp__engine *e, int i) {
    return e->copy[i] ? e->own[i] : e->bound[i];
}

static void kp__engine_destroy(void *self) {
    kp__engine *e = self;
    if (!e) return;
    kp_graph_destroy(e->captured);
    if (e->be_ctx) e->be->destroy(e->be_ctx);
    kp__free(e);
}

static kp_status kp__engine_copy_mode(void *self, size_t input, bool copy) {
    ((kp__engine *)self)->copy[input] = copy;
    return KP_OK;
}

static bool kp__engine_needs_fixed(void *self, size_t input) {
    return ((kp__engine *)self)->mode == KP_EXEC_GRAPH;
}

static kp_status kp__engine_mem(void *self, kp_mem_req *r) {
    kp__engine *e = self;
    size_t bytes = (size_t)e->n * sizeof(float);
    memset(r, 0, sizeof *r);
    r->device_bytes = bytes * (1 + (size_t)e->copy[0] + (size_t)e->copy[1]);
    r->workspace_bytes = e->ws_bytes;
    return KP_OK;
}

static kp_status kp__engine_setup(void *self, const kp_mem_slice *s) {
    kp__engine *e = self;
    float *p = s->device;
    e->out = p;
    p += e->n;
    for (int i = 0; i < 2; i++)
        if (e->copy[i]) {
            e->own[i] = p;
            p += e->n;
        }
    return e->ws_bytes ? e->be->set_workspace(e->be_ctx, s->workspace, s->workspace_bytes) : KP_OK;
}

static kp_status kp__engine_set_inputs(void *self, const kp_port_info *in, size_t n) {
    kp__engine *e = self;
    e->bound[0] = in[0].data;
    e->bound[1] = in[1].data;
    return KP_OK;
}

/* The copies run inside the graph (see add_node_to_graph), so there is
 * nothing to enqueue here. */
static kp_status kp__engine_configure(void *self, kp_stream_t s, void *dyn_host) {
    return KP_OK;
}

static kp_status kp__engine_update_nodes(void *self, kp_graph_exec_t ge) {
    kp__engine *e = self;
    for (int i = 0; i < 2; i++) {
        if (!e->copy[i] || e->copy_src[i] == e->bound[i]) continue;
        KP_CHECK(kp_graph_exec_set_memcpy(ge, e->copy_node[i], e->own[i], e->bound[i],
                                          (size_t)e->n * sizeof(float)));
        e->copy_src[i] = e->bound[i];
    }
    return KP_OK;
}

static kp_status kp__engine_outputs(void *self, kp_port_info *out, size_t n) {
    kp__engine *e = self;
    out[0].data = e->out;
    out[0].desc = e->out_desc; /* fixed at creation: nothing to rebuild per tick */
    return KP_OK;
}

static kp_status kp__engine_warmup(void *self, kp_stream_t s) {
    kp__engine *e = self;
    if (e->mode != KP_EXEC_GRAPH || e->captured) return KP_OK;
    KP_CHECK(kp_stream_begin_capture(s));
    kp_status st = e->be->enqueue(e->be_ctx, s, kp__engine_in(e, 0), kp__engine_in(e, 1), e->out);
    kp_graph_t g = NULL;
    kp_status end = kp_stream_end_capture(s, &g);
    if (st != KP_OK) {
        kp_graph_destroy(g);
        return st;
    }
    KP_CHECK(end);
    e->captured = g;
    return KP_OK;
}

static kp_status kp__engine_execute(void *self, kp_stream_t s) {
    kp__engine *e = self;
    return e->be->enqueue(e->be_ctx, s, kp__engine_in(e, 0), kp__engine_in(e, 1), e->out);
}

static kp_status kp__engine_add_node(void *self, kp_graph_t g, const kp_graph_node_t *deps,
                                     size_t n, kp_graph_node_t *out) {
    kp__engine *e = self;
    if (!e->captured)
        return kp__error(KP_ERR_STATE, "engine: no captured work; warm up in graph mode first");
    kp_graph_node_t all[KP_MAX_PORTS + 2];
    size_t n_all = 0;
    for (size_t d = 0; d < n && d < KP_MAX_PORTS; d++) all[n_all++] = deps[d];
    for (int i = 0; i < 2; i++) {
        if (!e->copy[i]) continue;
        KP_CHECK(kp_graph_add_memcpy(g, deps, n, e->own[i], e->bound[i],
                                     (size_t)e->n * sizeof(float), &e->copy_node[i]));
        e->copy_src[i] = e->bound[i];
        all[n_all++] = e->copy_node[i];
    }
    return kp_graph_add_child(g, all, n_all, e->captured, out);
}

static const kp_module_i kp__engine_iface = {
    .destroy = kp__engine_destroy,
    .set_connection_copy_mode = kp__engine_copy_mode,
    .input_needs_fixed_address = kp__engine_needs_fixed,
    .memory_requirements = kp__engine_mem,
    .setup_memory = kp__engine_setup,
    .set_inputs = kp__engine_set_inputs,
    .configure_io = kp__engine_configure,
    .get_outputs = kp__engine_outputs,
    .warmup = kp__engine_warmup,
    .execute = kp__engine_execute,
    .add_node_to_graph = kp__engine_add_node,
    .update_graph_node_params = kp__engine_update_nodes,
};

/* The vendor computation for a kernel form: cuBLAS where the device runs
 * CUDA kernels, a host loop where it runs host kernels. */
static const kp__engine_backend_i *kp__engine_backend_for(const char *form) {
    static const struct {
        const char *form;
        const kp__engine_backend_i *be;
    } table[] = {
        {"host", &kp__engine_cpu},
#ifdef KP_HAVE_CUDA
        {"cuda", &kp__engine_cublas},
#endif
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].form, form) == 0) return table[i].be;
    return NULL;
}

kp_status kp__engine_create(const kp_module_env *env, kp_module_def *def) {
    int64_t n;
    KP_CHECK(kp__param_size(env, &n));
    kp__engine *e = kp__calloc(1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "engine: no memory");
    e->mode = env->mode;
    e->n = n;
    e->be = kp__engine_backend_for(kp_device_kernel_form(env->dev));
    if (!e->be) {
        kp__free(e);
        return kp__error(KP_ERR_UNSUPPORTED, "no engine implementation runs on %s (kernel form "
                         "\"%s\")", kp_device_name(env->dev), kp_device_kernel_form(env->dev));
    }
    kp_status st = e->be->create(env->dev, n, &e->be_ctx, &e->ws_bytes);
    if (st == KP_OK) st = kp_port_decl_1d(&def->inputs[0], "arg0", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->inputs[1], "arg1", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->outputs[0], "result0", KP_F32, n);
    if (st != KP_OK) {
        kp__engine_destroy(e);
        return st;
    }
    e->out_desc = def->outputs[0].desc;
    def->iface = &kp__engine_iface;
    def->self = e;
    def->n_inputs = 2;
    def->n_outputs = 1;
    return KP_OK;
}
