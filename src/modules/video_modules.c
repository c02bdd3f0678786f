/* The video modules, for flows over raw video (docs/video.md):
 *
 *   i420_rgb  u8 [h*3/2, w] (I420)   -> f32 [3*h*w] (planar RGB in [0, 1])
 *   sharpen   f32 [3*h*w]            -> f32 [3*h*w]: amount * (4 p - neighbours),
 *             the detail an unsharp mask adds back (through the engine)
 *   rgb_i420  f32 [3*h*w]            -> u8 [h*3/2, w]
 *   nv12_rgb  u8 [h*3/2, pitch] (NV12, as NVDEC gives) -> f32 or f16 [3*h*w]
 *   rgb_nv12  f32 or f16 [3*h*w]    -> u8 [h*3/2, pitch] (NV12, padding zeroed)
 *   p016_rgb  u8 [h*3/2, pitch] (P016: 16-bit NV12, the pitch in bytes, at
 *             least 2*w; 10-bit streams as the reader gives them) -> f32 or f16
 *
 * nv12_rgb, p016_rgb and rgb_nv12 take "pitch" (default: the width's bytes), "matrix"
 * ("bt601", "bt709" or "bt2020"), "range" ("limited" or "full") and "dtype" ("f32"
 * or "f16"), and round as the I420 modules do: step by step, so cuda
 * equals cpu.
 *
 * Parameters: "width" and "height" (even, 2 .. 16384), or both {"max": N}:
 * sized by the frames, each tick's size taken from its input (pictures
 * u8 [h*3/2, w], the pitch being the width; RGB f32 or f16 [1, 3, h, w],
 * NCHW as a model takes it) up to those maxima, with no new graph when it
 * changes. Such a module takes one picture per tick and no "pitch".
 * sharpen's "amount"
 * (default 0.5); "batch" (pictures per tick at most, default 1: above 1,
 * dimension 0 is dynamic and holds as many pictures as each tick's input).
 * Each module is one kernel that reads its input's address
 * from its dynamic descriptor, so graph mode reads every input in place and
 * a new frame address needs no new graph. */
#include <stdio.h>
#include <string.h>

#include "modules-impl.h"
#include "video_modules-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__i420_rgb_cuda, kp__sharpen_cuda, kp__rgb_i420_cuda,
    kp__nv12_rgb_cuda, kp__rgb_nv12_cuda, kp__p016_rgb_cuda; /* video_modules.cu */
#define KP__VCUDA(k) {"cuda", &k},
#else
#define KP__VCUDA(k)
#endif

#define KP__VIDEO_MAX_SIDE 16384

static void kp__video_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n,
                           int op) {
    const kp__video_params *p = pp;
    const kp__video_static sized = kp__video_sized(p->st, p->dyn);
    const kp__video_static *st = &sized;
    uint64_t lo, hi;
    int64_t items = kp__video_items(op, st->width, st->height, st->pitch);
    kp_host_block_span((uint64_t)(items * p->dyn->frames), grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) {
        const int64_t f = (int64_t)i / items;
        kp__video_item(st, (const char *)p->dyn->input + f * st->in_frame,
                       (char *)st->output + f * st->out_frame, op, (int64_t)i % items);
    }
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
KP__VIDEO_KERNEL(nv12_rgb, KP__VIDEO_NV12_RGB)
KP__VIDEO_KERNEL(rgb_nv12, KP__VIDEO_RGB_NV12)
KP__VIDEO_KERNEL(p016_rgb, KP__VIDEO_P016_RGB)

typedef struct kp__video {
    kp__video_op op;
    int64_t width, height; /* sized by the frames: the maxima */
    bool sized;            /* "width": {"max": N}: each tick's size from its input */
    int64_t batch;             /* pictures per tick at most */
    int64_t in_rows, out_rows; /* dimension 0 of one picture, in and out */
    float amount;
    kp__video_static colour; /* NV12 ops: pitch, f16 and matrix, copied at setup */
    size_t out_bytes;
    int64_t in_frame; /* bytes of one input picture */
    void *out;
    kp_tensor_desc out_desc;
    kp__video_params params;
    kp_launch launch;
} kp__video;

static void kp__video_destroy(void *self) { kp__free(self); }

static kp_status kp__video_mem(void *self, kp_mem_req *r) {
    kp__video *m = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = m->out_bytes; /* the whole batch's */
    r->static_desc_bytes = sizeof(kp__video_static);
    r->dynamic_desc_bytes = sizeof(kp__video_dynamic);
    return KP_OK;
}

static kp_status kp__video_setup(void *self, const kp_mem_slice *s) {
    kp__video *m = self;
    kp__video_static *st = s->static_host;
    m->out = s->device;
    /* the size (width, height, pitch, bytes per picture) is each tick's,
       in the dynamic descriptor (kp__video_sized) */
    *st = m->colour;
    st->output = s->device;
    st->amount = m->amount;
    m->params.st = s->static_dev;
    m->params.dyn = s->dynamic_dev;
    static const kp_kernel *const kernels[] = {&kp__i420_rgb_kernel, &kp__sharpen_kernel,
                                               &kp__rgb_i420_kernel, &kp__nv12_rgb_kernel,
                                               &kp__rgb_nv12_kernel, &kp__p016_rgb_kernel};
    int64_t blocks =
        (kp__video_items(m->op, m->width, m->height, m->colour.pitch) * m->batch + 255) / 256;
    if (blocks > 8192) blocks = 8192; /* grid-stride past that */
    m->launch = (kp_launch){.kernel = kernels[m->op],
                            .grid = {(uint32_t)blocks, 1, 1},
                            .block = {256, 1, 1},
                            .params = &m->params};
    return KP_OK;
}

static bool kp__video_takes_pictures(kp__video_op op) {
    return op == KP__VIDEO_I420_RGB || op == KP__VIDEO_NV12_RGB || op == KP__VIDEO_P016_RGB;
}

static bool kp__video_makes_pictures(kp__video_op op) {
    return op == KP__VIDEO_RGB_I420 || op == KP__VIDEO_RGB_NV12;
}

/* A module sized by its frames: this tick's width and height from the
 * input (pictures u8 [h*3/2, w], the pitch the width; or RGB [1, 3, h, w]),
 * the output's shape from them. 4:2:0 needs both even. */
static kp_status kp__video_sized_io(kp__video *m, const kp_module_io *io, kp__video_dynamic *d) {
    const kp_tensor_desc *in = &io->inputs[0].desc;
    int64_t w, h;
    if (kp__video_takes_pictures(m->op)) {
        if (in->shape[0] % 3)
            return kp__error(KP_ERR_MISMATCH, "a frame of %lld rows is not h*3/2 rows of 4:2:0 "
                             "pictures", (long long)in->shape[0]);
        h = in->shape[0] / 3 * 2;
        w = m->op == KP__VIDEO_P016_RGB ? in->shape[1] / 2 : in->shape[1];
    } else {
        h = in->shape[2];
        w = in->shape[3];
    }
    if (w < 2 || h < 2 || w % 2 || h % 2)
        return kp__error(KP_ERR_MISMATCH, "a frame of %lldx%lld: 4:2:0 pictures need an even "
                         "width and height", (long long)w, (long long)h);
    kp_tensor_desc o = m->out_desc;
    if (kp__video_makes_pictures(m->op)) {
        o.shape[0] = h / 2 * 3;
        o.shape[1] = w;
    } else {
        o.shape[2] = h;
        o.shape[3] = w;
    }
    KP_CHECK(kp_desc_init(&io->outputs[0].desc, o.dtype, o.ndim, o.shape, NULL));
    io->outputs[0].data = m->out;
    d->frames = 1;
    d->width = w;
    d->height = h;
    d->pitch = m->op == KP__VIDEO_P016_RGB ? 2 * w : w;
    d->in_frame = kp_desc_bytes_needed(in);
    d->out_frame = kp_desc_bytes_needed(&io->outputs[0].desc);
    return KP_OK;
}

static kp_status kp__video_io(void *self, const kp_module_io *io) {
    kp__video *m = self;
    kp__video_dynamic *d = io->dynamic_desc;
    if (m->sized) KP_CHECK(kp__video_sized_io(m, io, d));
    else {
        KP_CHECK(kp__pictures_io(io, m->in_rows, m->out_rows, m->out, &m->out_desc, &d->frames));
        d->width = m->width;
        d->height = m->height;
        d->pitch = m->colour.pitch;
        d->in_frame = m->in_frame;
        d->out_frame = (int64_t)m->out_bytes / m->batch;
    }
    d->input = io->inputs[0].data;
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

/* A port of 4:2:0 pictures, u8 [h*3/2, pitch], saying its layout: a flow
 * refuses frames of the other one here rather than let the kernel misread
 * them. */
static kp_status kp__picture_port(kp_port_decl *p, const char *name, kp_pixel_format format,
                                  int64_t pitch, int64_t h) {
    snprintf(p->name, KP_NAME_MAX, "%s", name);
    p->dynamic = 0;
    p->format = format;
    int64_t shape[2] = {h / 2 * 3, pitch};
    return kp_desc_init(&p->desc, KP_U8, 2, shape, NULL);
}

/* An I420 frame's port: u8 [h*3/2, w]. */
static kp_status kp__i420_port(kp_port_decl *p, const char *name, int64_t w, int64_t h) {
    return kp__picture_port(p, name, KP_PIXEL_I420, w, h);
}

/* An NV12 frame's port with pitch p: u8 [h*3/2, p]. */
static kp_status kp__nv12_port(kp_port_decl *p, const char *name, int64_t pitch, int64_t h) {
    return kp__picture_port(p, name, KP_PIXEL_NV12, pitch, h);
}

/* The colour matrix: BT.601, BT.709 or BT.2020, limited (16..235, 16..240) or full
 * range. To RGB: R = Y' + rv V', G = Y' - gu U' - gv V', B = Y' + bu U'
 * with Y' = (Y - yoff) * yscale and U', V' centred on 128 (the chroma
 * weights scaled by 255/224 in limited range); to YUV the inverse weights
 * of R, G, B in [0, 1]. */
static kp_status kp__video_coefs(const kp_module_env *env, kp__video_static *c) {
    const char *matrix = NULL, *range = NULL;
    KP_CHECK(kp_param_str(env, "matrix", "bt601", &matrix));
    KP_CHECK(kp_param_str(env, "range", "limited", &range));
    bool b709 = strcmp(matrix, "bt709") == 0, b2020 = strcmp(matrix, "bt2020") == 0,
         full = strcmp(range, "full") == 0;
    if (!b709 && !b2020 && strcmp(matrix, "bt601") != 0)
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\": matrix \"%s\" (bt601, bt709 or bt2020)", env->id,
                         matrix);
    if (!full && strcmp(range, "limited") != 0)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": range \"%s\" (limited or full)",
                         env->id, range);
    /* the luma weights of red and blue: BT.601, BT.709, BT.2020 (non-constant) */
    const double kr = b709 ? 0.2126 : b2020 ? 0.2627 : 0.299;
    const double kb = b709 ? 0.0722 : b2020 ? 0.0593 : 0.114, kg = 1.0 - kr - kb;
    const double ys = full ? 255.0 : 219.0, cs = full ? 255.0 : 224.0;
    const double cu = 255.0 / cs; /* chroma code values to unit range, times 255 */
    c->yoff = full ? 0.0f : 16.0f;
    c->yscale = (float)(255.0 / ys);
    c->rv = (float)(2.0 * (1.0 - kr) * cu);
    c->gu = (float)(2.0 * kb * (1.0 - kb) / kg * cu);
    c->gv = (float)(2.0 * kr * (1.0 - kr) / kg * cu);
    c->bu = (float)(2.0 * (1.0 - kb) * cu);
    const double w[3] = {kr, kg, kb};
    for (int i = 0; i < 3; i++) {
        c->ky[i] = (float)(ys * w[i]);
        /* Cb = (B - Y) / (2 (1 - kb)), Cr = (R - Y) / (2 (1 - kr)) */
        c->ku[i] = (float)(cs * ((i == 2 ? 1.0 : 0.0) - w[i]) / (2.0 * (1.0 - kb)));
        c->kv[i] = (float)(cs * ((i == 0 ? 1.0 : 0.0) - w[i]) / (2.0 * (1.0 - kr)));
    }
    return KP_OK;
}

/* What a video module's parameters say. */
typedef struct kp__video_args {
    int64_t w, h, pitch, batch;
    bool sized; /* width and height {"max": N}: sized by the frames */
    double amount;
    kp__video_static colour; /* NV12 ops: pitch, f16 and matrix */
} kp__video_args;

/* nv12_rgb's, p016_rgb's and rgb_nv12's own: "pitch" (bytes), "dtype" and
 * the colour matrix. `sample`: bytes of a sample (P016: 2). */
static kp_status kp__video_nv12_args(const kp_module_env *env, int sample, kp__video_args *a) {
    const char *dtype = NULL;
    KP_CHECK(kp_param_int(env, "pitch", true, 0, &a->pitch));
    KP_CHECK(kp_param_str(env, "dtype", "f32", &dtype));
    if (strcmp(dtype, "f32") && strcmp(dtype, "f16"))
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": dtype \"%s\" (f32 or f16)", env->id,
                         dtype);
    a->colour.f16 = strcmp(dtype, "f16") == 0;
    KP_CHECK(kp__video_coefs(env, &a->colour));
    if (a->pitch && a->sized)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": a module sized by its frames "
                         "takes the pitch from them (each frame's width); no \"pitch\"",
                         env->id);
    if (!a->pitch) a->pitch = a->w * sample;
    if (a->pitch < a->w * sample || a->pitch % 2 || a->pitch > 2 * KP__VIDEO_MAX_SIDE)
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\": pitch %lld for width %lld (even, >= %lld bytes, "
                         "at most %d)",
                         env->id, (long long)a->pitch, (long long)a->w, (long long)(a->w * sample),
                         2 * KP__VIDEO_MAX_SIDE);
    a->colour.pitch = a->pitch;
    return KP_OK;
}

static kp_status kp__video_args_read(const kp_module_env *env, kp__video_op op, kp__video_args *a) {
    memset(a, 0, sizeof *a);
    a->batch = 1;
    a->amount = 0.5;
    bool wdyn, hdyn;
    KP_CHECK(kp_param_dim(env, "width", 2, KP__VIDEO_MAX_SIDE, &a->w, &wdyn));
    KP_CHECK(kp_param_dim(env, "height", 2, KP__VIDEO_MAX_SIDE, &a->h, &hdyn));
    if (wdyn != hdyn)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": width and height are both sizes, "
                         "or both {\"max\": N} (sized by the frames)", env->id);
    a->sized = wdyn;
    KP_CHECK(kp_param_int(env, "batch", true, 1, &a->batch));
    if (a->batch < 1 || a->batch > 1024)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": batch %lld (1 .. 1024)", env->id,
                         (long long)a->batch);
    if (a->sized && a->batch != 1)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": a module sized by its frames "
                         "takes one picture per tick (batch 1)", env->id);
    if (op == KP__VIDEO_NV12_RGB || op == KP__VIDEO_RGB_NV12 || op == KP__VIDEO_P016_RGB)
        KP_CHECK(kp__video_nv12_args(env, op == KP__VIDEO_P016_RGB ? 2 : 1, a));
    if (op == KP__VIDEO_SHARPEN) {
        KP_CHECK(kp_param_double(env, "amount", true, 0.5, &a->amount));
        if (a->amount < -16.0 || a->amount > 16.0)
            return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": amount %g (-16 .. 16)", env->id,
                             a->amount);
    }
    const int64_t w = a->w, h = a->h;
    if (w < 2 || h < 2 || w > KP__VIDEO_MAX_SIDE || h > KP__VIDEO_MAX_SIDE || w % 2 || h % 2)
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\": a frame of %lldx%lld (width and height even, 2 .. %d)",
                         env->id, (long long)w, (long long)h, KP__VIDEO_MAX_SIDE);
    return KP_OK;
}

/* An RGB port of a module sized by its frames: [1, 3, h, w], h and w
 * dynamic up to the maxima (NCHW, as a model takes it). */
static kp_status kp__rgb_port(kp_port_decl *p, const char *name, kp_dtype dt, int64_t w,
                              int64_t h) {
    snprintf(p->name, KP_NAME_MAX, "%s", name);
    p->dynamic = (1u << 2) | (1u << 3);
    p->format = KP_PIXEL_NONE;
    int64_t shape[4] = {1, 3, h, w};
    return kp_desc_init(&p->desc, dt, 4, shape, NULL);
}

/* The ports of one picture: I420 or NV12 frames, or planar RGB. */
static kp_status kp__video_ports(kp_module_def *def, kp__video_op op, const kp__video_args *a) {
    const int64_t w = a->w, h = a->h, pitch = a->pitch, rgb = 3 * w * h;
    const kp_dtype rgb_t = a->colour.f16 ? KP_F16 : KP_F32;
    if (a->sized) {
        kp_port_decl *in = &def->inputs[0], *out = &def->outputs[0];
        kp_status st = op == KP__VIDEO_I420_RGB   ? kp__i420_port(in, "input", w, h)
                       : op == KP__VIDEO_NV12_RGB ? kp__nv12_port(in, "input", w, h)
                       : op == KP__VIDEO_P016_RGB
                           ? kp__picture_port(in, "input", KP_PIXEL_P016, 2 * w, h)
                           : kp__rgb_port(in, "input", rgb_t, w, h);
        if (st == KP_OK)
            st = op == KP__VIDEO_RGB_I420   ? kp__i420_port(out, "output", w, h)
                 : op == KP__VIDEO_RGB_NV12 ? kp__nv12_port(out, "output", w, h)
                                            : kp__rgb_port(out, "output", rgb_t, w, h);
        if (kp__video_takes_pictures(op)) in->dynamic = 3u;
        if (kp__video_makes_pictures(op)) out->dynamic = 3u;
        return st;
    }
    kp_status st = op == KP__VIDEO_I420_RGB ? kp__i420_port(&def->inputs[0], "input", w, h)
                   : op == KP__VIDEO_NV12_RGB
                       ? kp__nv12_port(&def->inputs[0], "input", pitch, h)
                   : op == KP__VIDEO_P016_RGB
                       ? kp__picture_port(&def->inputs[0], "input", KP_PIXEL_P016, pitch, h)
                       : kp_port_decl_1d(&def->inputs[0], "input", rgb_t, rgb);
    if (st == KP_OK)
        st = op == KP__VIDEO_RGB_I420   ? kp__i420_port(&def->outputs[0], "output", w, h)
             : op == KP__VIDEO_RGB_NV12 ? kp__nv12_port(&def->outputs[0], "output", pitch, h)
                                        : kp_port_decl_1d(&def->outputs[0], "output", rgb_t, rgb);
    return st;
}

/* A batch: dimension 0 of each port holds up to `batch` pictures, as many
 * as each tick's input. */
static kp_status kp__video_batch(kp_module_def *def, int64_t batch) {
    kp_port_decl *ports[2] = {&def->inputs[0], &def->outputs[0]};
    kp_status st = KP_OK;
    for (int k = 0; k < 2 && st == KP_OK; k++) {
        int64_t shape[KP_MAX_DIMS];
        for (int d = 0; d < ports[k]->desc.ndim; d++) shape[d] = ports[k]->desc.shape[d];
        shape[0] *= batch;
        st = kp_desc_init(&ports[k]->desc, ports[k]->desc.dtype, ports[k]->desc.ndim, shape, NULL);
        ports[k]->dynamic = batch > 1 ? 1u : 0u;
    }
    return st;
}

static kp_status kp__video_create(const kp_module_env *env, kp_module_def *def, kp__video_op op) {
    kp__video_args a;
    KP_CHECK(kp__video_args_read(env, op, &a));
    kp__video *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory", env->id);
    m->op = op;
    m->width = a.w;
    m->height = a.h;
    m->sized = a.sized;
    m->amount = (float)a.amount;
    m->colour = a.colour;
    m->batch = a.batch;
    const int64_t rgb = 3 * a.w * a.h; /* at most 3 * 2^28, under KP__MAX_ELEMENTS */
    if (rgb * a.batch > KP__MAX_ELEMENTS) {
        kp__free(m);
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\": a batch of %lld pictures of %lldx%lld "
                         "is too large",
                         env->id, (long long)a.batch, (long long)a.w, (long long)a.h);
    }
    kp_status st = kp__video_ports(def, op, &a);
    if (st == KP_OK) {
        m->in_rows = def->inputs[0].desc.shape[0];
        m->out_rows = def->outputs[0].desc.shape[0];
        m->in_frame = kp_desc_bytes_needed(&def->inputs[0].desc);
        if (!a.sized) st = kp__video_batch(def, a.batch);
    }
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    m->out_desc = def->outputs[0].desc;
    m->out_bytes = (size_t)kp_desc_bytes_needed(&m->out_desc);
    def->live_shapes = 1; /* ... and how many pictures */
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

static kp_status kp__nv12_rgb_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_NV12_RGB);
}
static kp_status kp__rgb_nv12_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_RGB_NV12);
}
static kp_status kp__p016_rgb_create(const kp_module_env *env, kp_module_def *def) {
    return kp__video_create(env, def, KP__VIDEO_P016_RGB);
}

KP__BUILTIN_MODULE(i420_rgb, kp__i420_rgb_create, NULL)
KP__BUILTIN_MODULE(nv12_rgb, kp__nv12_rgb_create, NULL)
KP__BUILTIN_MODULE(rgb_nv12, kp__rgb_nv12_create, NULL)
KP__BUILTIN_MODULE(p016_rgb, kp__p016_rgb_create, NULL)
KP__BUILTIN_MODULE(sharpen, kp__sharpen_create, NULL)
KP__BUILTIN_MODULE(rgb_i420, kp__rgb_i420_create, NULL)
