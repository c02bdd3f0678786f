/* The `relu` module: out[i] = max(0, in[i]). Its kernel takes the addresses
 * of its static descriptor {output, max_size} and dynamic descriptor
 * {input, size}; each tick only the dynamic descriptor changes, through the
 * pipeline's bulk upload, so the same launch serves a stream launch and a
 * graph kernel node, and the graph never needs a parameter update: neither
 * for a new input address nor for a new size ("size": {"max": N}), as the
 * grid covers the maximum and the kernel reads the tick's size. */
#include <math.h>
#include <string.h>

#include "modules-impl.h"
#include "relu-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__relu_cuda; /* relu.cu */
#define KP__RELU_CUDA {"cuda", &kp__relu_cuda},
#else
#define KP__RELU_CUDA
#endif

#define KP__RELU_BLOCK 256
#define KP__RELU_PER_THREAD 4

static void kp__relu_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n) {
    const kp__relu_params *p = pp;
    const float *in = p->dyn->input;
    float *out = p->st->output;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->dyn->size, grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) out[i] = fmaxf(in[i], 0.0f);
}

static const kp_kernel kp__relu_kernel = {
    "relu",
    sizeof(kp__relu_params),
    {{"host", &(const kp_host_kernel){kp__relu_host}}, KP__RELU_CUDA}};

/* Elementwise too: fused with its elementwise neighbours, the pipeline
 * runs this body in their kernel; alone, the module runs its own. */
static void kp__relu_span(const void *params, const void *const *in, void *out, size_t n) {
    const float *x = in[0];
    float *y = out;
    for (size_t i = 0; i < n; i++) y[i] = fmaxf(x[i], 0.0f);
}

static const kp_elementwise kp__relu_elementwise = {.cuda = "output = fmaxf(input, 0.0f);",
                                                    .host = kp__relu_span};

typedef struct kp__relu {
    int64_t n;
    kp_tensor_desc out_desc;
    float *out;
    kp__relu_params params;
    kp_launch launch;
} kp__relu;

static void kp__relu_destroy(void *self) { kp__free(self); }

static kp_status kp__relu_mem(void *self, kp_mem_req *r) {
    kp__relu *m = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = (size_t)m->n * sizeof(float);
    r->static_desc_bytes = sizeof(kp__relu_static);
    r->dynamic_desc_bytes = sizeof(kp__relu_dynamic);
    return KP_OK;
}

static kp_status kp__relu_setup(void *self, const kp_mem_slice *s) {
    kp__relu *m = self;
    m->out = s->device;
    kp__relu_static *st = s->static_host;
    st->output = m->out;
    st->max_size = m->n;
    m->params.st = s->static_dev;
    m->params.dyn = s->dynamic_dev;
    int64_t per_block = KP__RELU_BLOCK * KP__RELU_PER_THREAD;
    int64_t blocks = (m->n + per_block - 1) / per_block;
    m->launch = (kp_launch){.kernel = &kp__relu_kernel,
                            .grid = {(uint32_t)blocks, 1, 1},
                            .block = {KP__RELU_BLOCK, 1, 1},
                            .params = &m->params};
    return KP_OK;
}

/* The input's address and size go to the device through the dynamic
 * descriptor; the output has the input's shape. */
static kp_status kp__relu_io(void *self, const kp_module_io *io) {
    kp__relu *m = self;
    kp__relu_dynamic *d = io->dynamic_desc;
    d->input = io->inputs[0].data;
    d->size = io->inputs[0].desc.shape[0];
    io->outputs[0].data = m->out;
    io->outputs[0].desc = m->out_desc;
    io->outputs[0].desc.shape[0] = d->size;
    return KP_OK;
}

static kp_status kp__relu_execute(void *self, kp_stream_t s) {
    return kp_launch_kernel(s, &((kp__relu *)self)->launch);
}

/* One kernel node: the same launch as stream mode, no child graph. */
static kp_status kp__relu_add_node(void *self, kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                                   kp_graph_node_t *out) {
    return kp_graph_add_kernel(g, deps, n, &((kp__relu *)self)->launch, out);
}

static const kp_module_i kp__relu_iface = {
    .destroy = kp__relu_destroy,
    .io = kp__relu_io,
    .execute = kp__relu_execute,
    .memory_requirements = kp__relu_mem,
    .setup_memory = kp__relu_setup,
    .add_node_to_graph = kp__relu_add_node,
};

static kp_status kp__relu_create(const kp_module_env *env, kp_module_def *def) {
    int64_t n;
    bool dynamic;
    KP_CHECK(kp__param_size(env, &n, &dynamic));
    kp__relu *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "relu: no memory");
    m->n = n;
    kp_status st = kp_port_decl_1d(&def->inputs[0], "input", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->outputs[0], "output", KP_F32, n);
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    m->out_desc = def->outputs[0].desc;
    def->inputs[0].dynamic = def->outputs[0].dynamic = dynamic;
    def->iface = &kp__relu_iface;
    def->self = m;
    def->n_inputs = 1;
    def->n_outputs = 1;
    def->live_inputs = 1; /* the kernel reads its input's address from the descriptor */
    def->live_shapes = 1; /* ... and its size */
    def->elementwise = &kp__relu_elementwise;
    return KP_OK;
}

KP__BUILTIN_MODULE(relu, kp__relu_create, NULL)
