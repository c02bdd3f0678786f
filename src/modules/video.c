/* The video modules, for flows over raw video (docs/video.md):
 *
 *   i420_rgb  u8 [h*3/2, w] (I420)   -> f32 [3*h*w] (planar RGB in [0, 1])
 *   sharpen   f32 [3*h*w]            -> f32 [3*h*w]: amount * (4 p - neighbours),
 *             the detail an unsharp mask adds back (through the engine)
 *   rgb_i420  f32 [3*h*w]            -> u8 [h*3/2, w]
 *
 * Parameters: "width" and "height" (even, 2 .. 16384); sharpen's "amount"
 * (default 0.5). Each module is one kernel that reads its input's address
 * from its dynamic descriptor, so graph mode reads every input in place and
 * a new frame address needs no new graph. */
#include <stdio.h>
#include <string.h>

#include "modules-impl.h"
#include "video-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__i420_rgb_cuda, kp__sharpen_cuda, kp__rgb_i420_cuda; /* video.cu */
#define KP__VCUDA(k) {"cuda", &k},
#else
#define KP__VCUDA(k)
#endif

#define KP__VIDEO_MAX_SIDE 16384

static void kp__video_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n,
                           int op) {
    const kp__video_params *p = pp;
    uint64_t lo, hi;
    int64_t items = kp__video_items(op, p->st->width, p->st->height);
    kp_host_block_span((uint64_t)items, grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) kp__video_item(p->st, p->dyn->input, op, (int64_t)i);
}

#define KP__VIDEO_KERNEL(name, op)                                                                \
    static void kp__##name##_host(const void *pp, kp_dim3 g, kp_dim3 b, uint64_t f, uint64_t n) { \
        kp__video_host(pp, g, b, f, n, op);                                                       \
    }                                                                                             \
    static const kp_kernel kp__##name##_kernel = {                                                \
        #name,                                                                                    \
        sizeof(kp__video_params),                                                                 \
        {{"host", &(const kp_host_kernel){kp__##name##_host}}, KP__VCUDA(kp__##name##_cuda)}};
KP__VIDEO_KERNEL(i420_rgb, KP__VIDEO_I420_RGB)
KP__VIDEO_KERNEL(sharpen, KP__VIDEO_SHARPEN)
KP__VIDEO_KERNEL(rgb_i420, KP__VIDEO_RGB_I420)

typedef struct kp__video {
    kp__video_op op;
    int64_t width, height;
    float amount;
    size_t out_bytes;
    void *out;
    kp_tensor_desc out_desc;
    kp__video_params params;
    kp_launch launch;
} kp__video;

static void kp__video_destroy(void *self) { kp__free(self); }

static kp_status kp__video_mem(void *self, kp_mem_req *r) {
    kp__video *m = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = m->out_bytes;
    r->static_desc_bytes = sizeof(kp__video_static);
    r->dynamic_desc_bytes = sizeof(kp__video_dynamic);
    return KP_OK;
}

static kp_status kp__video_setup(void *self, const kp_mem_slice *s) {
    kp__video *m = self;
    kp__video_static *st = s->static_host;
    m->out = s->device;
    st->output = s->device;
    st->width = m->width;
    st->height = m->height;
    st->amount = m->amount;
    m->params.st = s->static_dev;
    m->params.dyn = s->dynamic_dev;
    static const kp_kernel *const kernels[] = {&kp__i420_rgb_kernel, &kp__sharpen_kernel,
                                               &kp__rgb_i420_kernel};
    int64_t blocks = (kp__video_items(m->op, m->width, m->height) + 255) / 256;
    if (blocks > 8192) blocks = 8192; /* grid-stride past that */
    m->launch = (kp_launch){kernels[m->op], {(uint32_t)blocks, 1, 1}, {256, 1, 1}, 0, &m->params};
    return KP_OK;
}

static kp_status kp__video_io(void *self, const kp_module_io *io) {
    kp__video *m = self;
    ((kp__video_dynamic *)io->dynamic_desc)->input = io->inputs[0].data;
    io->outputs[0].data = m->out;
    io->outputs[0].desc = m->out_desc;
    return KP_OK;
}

static kp_status kp__video_execute(void *self, kp_stream_t s) {
    return kp_launch_kernel(s, &((kp__video *)self)->launch);
}

static kp_status kp__video_add_node(void *self, kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                                    kp_graph_node_t *out) {
    return kp_graph_add_kernel(g, deps, n, &((kp__video *)self)->launch, out);
}

static const kp_module_i kp__video_iface = {
    .destroy = kp__video_destroy,
    .io = kp__video_io,
    .execute = kp__video_execute,
    .memory_requirements = kp__video_mem,
    .setup_memory = kp__video_setup,
    .add_node_to_graph = kp__video_add_node,
};

/* An I420 frame's port: u8 [h*3/2, w]. */
static kp_status kp__i420_port(kp_port_decl *p, const char *name, int64_t w, int64_t h) {
    snprintf(p->name, KP_NAME_MAX, "%s", name);
    p->dynamic = 0;
    int64_t shape[2] = {h / 2 * 3, w};
    return kp_desc_init(&p->desc, KP_U8, 2, shape, NULL);
}

static kp_status kp__video_create(const kp_module_env *env, kp_module_def *def, kp__video_op op) {
    int64_t w = 0, h = 0;
    double amount = 0.5;
    KP_CHECK(kp_param_int(env, "width", false, 0, &w));
    KP_CHECK(kp_param_int(env, "height", false, 0, &h));
    if (op == KP__VIDEO_SHARPEN) {
        KP_CHECK(kp_param_double(env, "amount", true, 0.5, &amount));
        if (amount < -16.0 || amount > 16.0)
            return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": amount %g (-16 .. 16)", env->id,
                             amount);
    }
    if (w < 2 || h < 2 || w > KP__VIDEO_MAX_SIDE || h > KP__VIDEO_MAX_SIDE || w % 2 || h % 2)
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\": a frame of %lldx%lld (width and height even, 2 .. %d)",
                         env->id, (long long)w, (long long)h, KP__VIDEO_MAX_SIDE);
    kp__video *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory", env->id);
    m->op = op;
    m->width = w;
    m->height = h;
    m->amount = (float)amount;
    const int64_t rgb = 3 * w * h; /* at most 3 * 2^28, under KP__MAX_ELEMENTS */
    kp_status st = op == KP__VIDEO_I420_RGB
                       ? kp__i420_port(&def->inputs[0], "input", w, h)
                       : kp_port_decl_1d(&def->inputs[0], "input", KP_F32, rgb);
    if (st == KP_OK)
        st = op == KP__VIDEO_RGB_I420 ? kp__i420_port(&def->outputs[0], "output", w, h)
                                      : kp_port_decl_1d(&def->outputs[0], "output", KP_F32, rgb);
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    m->out_desc = def->outputs[0].desc;
    m->out_bytes = (size_t)kp_desc_bytes_needed(&m->out_desc);
    def->iface = &kp__video_iface;
    def->self = m;
    def->n_inputs = 1;
    def->n_outputs = 1;
    def->live_inputs = 1; /* the kernel reads its input's address from the descriptor */
    return KP_OK;
}

static kp_status kp__i420_rgb_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_I420_RGB);
}
static kp_status kp__sharpen_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_SHARPEN);
}
static kp_status kp__rgb_i420_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_RGB_I420);
}

KP__BUILTIN_MODULE(i420_rgb, kp__i420_rgb_create, NULL)
KP__BUILTIN_MODULE(sharpen, kp__sharpen_create, NULL)
KP__BUILTIN_MODULE(rgb_i420, kp__rgb_i420_create, NULL)
