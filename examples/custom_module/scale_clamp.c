/* A module written outside the library, as a user writes one:
 * y = clamp(x * scale, lo, hi) over `size` floats.
 *
 * It fills the three required slots (destroy, io, execute) and the two that
 * give it memory (memory_requirements, setup_memory). Its kernel reads the
 * input's address from the dynamic descriptor each tick, so the input is
 * "live": in graph mode the pipeline captures execute() once and never
 * copies the input, and only the descriptor's bytes change per tick. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "scale_clamp.h"

/* The host form runs the blocks it is given; with several workers a cpu
 * device runs a launch's blocks concurrently. */
static void scale_clamp_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                             uint64_t n_blocks) {
    const scale_clamp_params *p = pp;
    const scale_clamp_static *st = p->st;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)st->n, grid, first, n_blocks, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++)
        st->output[i] = fminf(fmaxf(p->dyn->input[i] * st->scale, st->lo), st->hi);
}

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel scale_clamp_cuda; /* scale_clamp.cu */
#define SCALE_CLAMP_CUDA {"cuda", &scale_clamp_cuda},
#else
#define SCALE_CLAMP_CUDA
#endif

static const kp_kernel scale_clamp_kernel = {
    "scale_clamp",
    sizeof(scale_clamp_params),
    {{"host", &(const kp_host_kernel){scale_clamp_host}}, SCALE_CLAMP_CUDA}};

/* Declared elementwise as well: next to other elementwise modules (an
 * `add` before it, say) the pipeline fuses it into their kernel, running
 * this body on cuda and this span function on cpu, with scale, lo and hi
 * read from the module's static values. Alone, it runs its own kernel. */
static void scale_clamp_span(const void *params, const void *const *in, void *out, size_t n) {
    const scale_clamp_static *st = params;
    const float *x = in[0];
    float *y = out;
    for (size_t i = 0; i < n; i++) y[i] = fminf(fmaxf(x[i] * st->scale, st->lo), st->hi);
}

typedef struct scale_clamp {
    kp_elementwise ew;
    scale_clamp_static st; /* its values, copied to the static descriptor at setup */
    kp_tensor_desc out_desc;
    scale_clamp_params params;
    kp_launch launch;
} scale_clamp;

static void sc_destroy(void *self) { free(self); }

static kp_status sc_memory(void *self, kp_mem_req *r) {
    scale_clamp *m = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = (size_t)m->st.n * sizeof(float); /* the output */
    r->static_desc_bytes = sizeof(scale_clamp_static);
    r->dynamic_desc_bytes = sizeof(scale_clamp_dynamic);
    return KP_OK;
}

static kp_status sc_setup(void *self, const kp_mem_slice *s) {
    scale_clamp *m = self;
    m->st.output = s->device;
    *(scale_clamp_static *)s->static_host = m->st; /* uploaded at warmup */
    m->params = (scale_clamp_params){s->static_dev, s->dynamic_dev};
    uint32_t blocks = (uint32_t)((m->st.n + 1023) / 1024);
    m->launch = (kp_launch){.kernel = &scale_clamp_kernel,
                            .grid = {blocks, 1, 1},
                            .block = {256, 1, 1},
                            .params = &m->params};
    return KP_OK;
}

static kp_status sc_io(void *self, const kp_module_io *io) {
    scale_clamp *m = self;
    ((scale_clamp_dynamic *)io->dynamic_desc)->input = io->inputs[0].data;
    io->outputs[0].data = m->st.output;
    io->outputs[0].desc = m->out_desc;
    return KP_OK;
}

static kp_status sc_execute(void *self, kp_stream_t s) {
    return kp_launch_kernel(s, &((scale_clamp *)self)->launch);
}

static const kp_module_i sc_iface = {
    .destroy = sc_destroy,
    .io = sc_io,
    .execute = sc_execute,
    .memory_requirements = sc_memory,
    .setup_memory = sc_setup,
};

static kp_status sc_create(const kp_module_env *env, kp_module_def *def) {
    int64_t n;
    double scale, lo, hi;
    kp_status st = kp_param_int(env, "size", false, 0, &n);
    if (st == KP_OK) st = kp_param_double(env, "scale", false, 0, &scale);
    if (st == KP_OK) st = kp_param_double(env, "lo", true, 0.0, &lo);
    if (st == KP_OK) st = kp_param_double(env, "hi", true, 1.0, &hi);
    if (st != KP_OK) return st;
    /* the pipeline puts the module's id and type in front of the detail */
    if (n < 1 || lo > hi)
        return kp_set_error(KP_ERR_INVALID_ARG,
                            "size %lld, lo %g, hi %g: need size >= 1 and "
                            "lo <= hi",
                            (long long)n, lo, hi);
    scale_clamp *m = calloc(1, sizeof *m);
    if (!m) return kp_set_error(KP_ERR_OUT_OF_MEMORY, "no memory");
    m->st = (scale_clamp_static){.n = n, .scale = (float)scale, .lo = (float)lo, .hi = (float)hi};
    st = kp_port_decl_1d(&def->inputs[0], "input", KP_F32, n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->outputs[0], "output", KP_F32, n);
    if (st != KP_OK) {
        free(m);
        return st;
    }
    m->out_desc = def->outputs[0].desc;
    def->iface = &sc_iface;
    def->self = m;
    def->n_inputs = def->n_outputs = 1;
    def->live_inputs = 1; /* read through the dynamic descriptor: no copy in graph mode */
    m->ew = (kp_elementwise){.cuda = "output = fminf(fmaxf(input * scale, lo), hi);",
                             .host = scale_clamp_span,
                             .params = &m->st,
                             .params_bytes = sizeof m->st,
                             .n_params = 3};
    m->ew.param[0] = (kp_elementwise_param){"scale", KP_F32, offsetof(scale_clamp_static, scale)};
    m->ew.param[1] = (kp_elementwise_param){"lo", KP_F32, offsetof(scale_clamp_static, lo)};
    m->ew.param[2] = (kp_elementwise_param){"hi", KP_F32, offsetof(scale_clamp_static, hi)};
    def->elementwise = &m->ew;
    return KP_OK;
}

kp_status scale_clamp_register(void) { return kp_module_register("scale_clamp", sc_create); }
