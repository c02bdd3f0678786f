/* The `engine` module: an opaque vendor computation, result0 = arg0 + arg1
 * (float32), through cuBLAS on CUDA devices and a host loop on host ones.
 * It fills only what every module must, plus its memory: in graph mode the
 * pipeline captures execute() into a child graph, which bakes in the input
 * addresses, so the pipeline copies inputs from dynamic upstreams into
 * buffers of its own (memcpy nodes in front of the child graph, re-pointed
 * only when a source address changes). In stream mode execute() calls the
 * vendor library each tick with the current addresses. A dynamic size
 * ("size": {"max": N}) is captured anew per size in graph mode. */
#include <string.h>

#include "modules-impl.h"

typedef struct kp__engine {
    int64_t n;
    const kp__engine_backend_i *be;
    void *be_ctx;
    size_t ws_bytes;
    const float *in[2]; /* as bound by the last io */
    int64_t cur;        /* elements of the last io (<= n) */
    float *out;
    kp_tensor_desc out_desc;
} kp__engine;

static void kp__engine_destroy(void *self) {
    kp__engine *e = self;
    if (!e) return;
    if (e->be_ctx) e->be->destroy(e->be_ctx);
    kp__free(e);
}

static kp_status kp__engine_mem(void *self, kp_mem_req *r) {
    kp__engine *e = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = (size_t)e->n * sizeof(float);
    r->workspace_bytes = e->ws_bytes;
    return KP_OK;
}

static kp_status kp__engine_setup(void *self, const kp_mem_slice *s) {
    kp__engine *e = self;
    e->out = s->device;
    return e->ws_bytes ? e->be->set_workspace(e->be_ctx, s->workspace, s->workspace_bytes) : KP_OK;
}

/* The pipeline has checked each input against its declaration; a dynamic
 * size must also be the same for both. */
static kp_status kp__engine_io(void *self, const kp_module_io *io) {
    kp__engine *e = self;
    int64_t n = io->inputs[0].desc.shape[0];
    if (io->inputs[1].desc.shape[0] != n)
        return kp__error(KP_ERR_MISMATCH, "arg0 has %lld elements but arg1 %lld", (long long)n,
                         (long long)io->inputs[1].desc.shape[0]);
    e->in[0] = io->inputs[0].data;
    e->in[1] = io->inputs[1].data;
    e->cur = n;
    io->outputs[0].data = e->out;
    io->outputs[0].desc = e->out_desc;
    io->outputs[0].desc.shape[0] = n;
    return KP_OK;
}

static kp_status kp__engine_execute(void *self, kp_stream_t s) {
    kp__engine *e = self;
    return e->be->enqueue(e->be_ctx, s, e->in[0], e->in[1], e->out, e->cur);
}

static const kp_module_i kp__engine_iface = {
    .destroy = kp__engine_destroy,
    .io = kp__engine_io,
    .execute = kp__engine_execute,
    .memory_requirements = kp__engine_mem,
    .setup_memory = kp__engine_setup,
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

static kp_status kp__engine_create(const kp_module_env *env, kp_module_def *def) {
    int64_t n;
    bool dynamic;
    KP_CHECK(kp__param_size(env, &n, &dynamic));
    const kp__engine_backend_i *be = kp__engine_backend_for(kp_device_kernel_form(env->dev));
    if (!be)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "no engine implementation runs on %s (kernel form "
                         "\"%s\")",
                         kp_device_name(env->dev), kp_device_kernel_form(env->dev));
    kp__engine *e = kp__calloc(1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "engine: no memory");
    e->n = n;
    e->be = be;
    kp_status st = be->create(env->dev, n, &e->be_ctx, &e->ws_bytes);
    if (st == KP_OK) st = kp_port_decl_1d(&def->inputs[0], "arg0", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->inputs[1], "arg1", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->outputs[0], "result0", KP_F32, n);
    if (st != KP_OK) {
        kp__engine_destroy(e);
        return st;
    }
    e->out_desc = def->outputs[0].desc;
    e->cur = n;
    def->inputs[0].dynamic = def->inputs[1].dynamic = def->outputs[0].dynamic = dynamic;
    def->iface = &kp__engine_iface;
    def->self = e;
    def->n_inputs = 2;
    def->n_outputs = 1;
    /* live_inputs and live_shapes 0: the vendor call bakes its addresses and
     * its size into a graph, so a new size is a new graph */
    return KP_OK;
}

#ifdef KP_HAVE_CUDA
KP__BUILTIN_MODULE(engine, kp__engine_create, kp__engine_cublas.note_library)
#else
KP__BUILTIN_MODULE(engine, kp__engine_create, NULL)
#endif
