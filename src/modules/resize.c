/* The resize module: bilinear scaling on the device (resize-impl.h says
 * how it rounds), of NV12 pictures with a pitch or of planar RGB images:
 *
 *   format "nv12": u8 [batch * h*3/2, pitch] -> u8 [batch * out_h*3/2, out_pitch]
 *   format "rgb":  f32 [batch * 3*h*w]       -> f32 [batch * 3*out_h*out_w]
 *
 * Parameters: "width", "height", "out_width", "out_height" (even, 2 ..
 * 16384), "pitch" and "out_pitch" (NV12; default the widths), "batch"
 * (pictures per tick at most, default 1; above 1 dimension 0 is dynamic,
 * and each tick resizes as many pictures as its input holds). One kernel,
 * reading its input's address and picture count from its dynamic
 * descriptor: graph mode reads every input in place. */
#include <stdio.h>
#include <string.h>

#include "kpipe/modules.h"
#include "modules-impl.h"
#include "resize-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__resize_module_cuda, kp__resize_direct_cuda,
    kp__resize_many_cuda; /* resize.cu */
#define KP__RCUDA(k) {"cuda", &k},
#else
#define KP__RCUDA(k)
#endif

#define KP__RESIZE_MAX_SIDE 16384
#define KP__RESIZE_MAX_BATCH 1024

static void kp__resize_span(const kp__resize_args *a, kp_dim3 grid, uint64_t first, uint64_t n) {
    const int64_t items = kp__resize_items(a);
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)(items * a->frames), grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) kp__resize_item(a, (int64_t)i / items, (int64_t)i % items);
}

static void kp__resize_module_host(const void *pp, kp_dim3 g, kp_dim3 b, uint64_t first,
                                   uint64_t n) {
    const kp__resize_params *p = pp;
    kp__resize_args a = *p->st;
    a.in = p->dyn->input;
    a.frames = (int32_t)p->dyn->frames;
    kp__resize_span(&a, g, first, n);
}

static void kp__resize_direct_host(const void *pp, kp_dim3 g, kp_dim3 b, uint64_t first,
                                   uint64_t n) {
    kp__resize_span(pp, g, first, n);
}

static void kp__resize_many_host(const void *pp, kp_dim3 g, kp_dim3 b, uint64_t first, uint64_t n) {
    const kp__resize_many *m = pp;
    const int64_t items = kp__resize_many_items(m);
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)(items * m->n), g, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++)
        kp__resize_many_item(m, (int64_t)i / items, (int64_t)i % items);
}

static const kp_kernel kp__resize_module_kernel = {
    "resize",
    sizeof(kp__resize_params),
    {{"host", &(const kp_host_kernel){kp__resize_module_host}}, KP__RCUDA(kp__resize_module_cuda)}};
static const kp_kernel kp__resize_direct_kernel = {
    "resize_direct",
    sizeof(kp__resize_args),
    {{"host", &(const kp_host_kernel){kp__resize_direct_host}}, KP__RCUDA(kp__resize_direct_cuda)}};

static const kp_kernel kp__resize_many_kernel = {
    "resize_many",
    sizeof(kp__resize_many),
    {{"host", &(const kp_host_kernel){kp__resize_many_host}}, KP__RCUDA(kp__resize_many_cuda)}};

static uint32_t kp__blocks_for(int64_t items) {
    int64_t blocks = (items + 255) / 256;
    return (uint32_t)(blocks > 8192 ? 8192 : blocks < 1 ? 1 : blocks); /* grid-stride past that */
}

static uint32_t kp__resize_blocks(const kp__resize_args *a, int64_t frames) {
    return kp__blocks_for(kp__resize_items(a) * frames);
}

/* The rules every resize obeys, from the module or from a flow. */
static kp_status kp__resize_check(const kp__resize_args *a, const char *who) {
    const int32_t side[4] = {a->sw, a->sh, a->dw, a->dh};
    for (int k = 0; k < 4; k++)
        if (side[k] < 2 || side[k] > KP__RESIZE_MAX_SIDE || side[k] % 2)
            return kp__error(KP_ERR_INVALID_ARG, "%s: %dx%d to %dx%d (sides even, 2 .. %d)", who,
                             (int)a->sw, (int)a->sh, (int)a->dw, (int)a->dh, KP__RESIZE_MAX_SIDE);
    if (a->format != KP__RESIZE_NV12 && a->format != KP__RESIZE_RGB)
        return kp__error(KP_ERR_INVALID_ARG, "%s: format %d (nv12 or rgb)", who, (int)a->format);
    if (a->format == KP__RESIZE_NV12 &&
        (a->spitch < a->sw || a->dpitch < a->dw || a->spitch % 2 || a->dpitch % 2 ||
         a->spitch > 2 * KP__RESIZE_MAX_SIDE || a->dpitch > 2 * KP__RESIZE_MAX_SIDE))
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: pitches %lld and %lld for widths %d and %d (even, at least the "
                         "width, at most %d)",
                         who, (long long)a->spitch, (long long)a->dpitch, (int)a->sw, (int)a->dw,
                         2 * KP__RESIZE_MAX_SIDE);
    if (a->frames < 1 || a->frames > KP__RESIZE_MAX_BATCH)
        return kp__error(KP_ERR_INVALID_ARG, "%s: %d pictures (1 .. %d)", who, (int)a->frames,
                         KP__RESIZE_MAX_BATCH);
    return KP_OK;
}

/* Bytes of one picture, in and out. */
static void kp__resize_frame_bytes(kp__resize_args *a) {
    if (a->format == KP__RESIZE_NV12) {
        a->in_frame = a->spitch * a->sh / 2 * 3;
        a->out_frame = a->dpitch * a->dh / 2 * 3;
    } else {
        a->in_frame = (int64_t)3 * a->sw * a->sh * (int64_t)sizeof(float);
        a->out_frame = (int64_t)3 * a->dw * a->dh * (int64_t)sizeof(float);
    }
    a->sx = (float)a->sw / (float)a->dw;
    a->sy = (float)a->sh / (float)a->dh;
}

kp_status kp_resize_nv12(kp_stream_t s, const void *src, int32_t src_width, int32_t src_height,
                         int64_t src_pitch, void *dst, int32_t dst_width, int32_t dst_height,
                         int64_t dst_pitch) {
    KP_API_ENTRY();
    KP_ARG_CHECK(s && src && dst);
    kp__resize_args a = {.in = src,
                         .out = dst,
                         .spitch = src_pitch,
                         .dpitch = dst_pitch,
                         .sw = src_width,
                         .sh = src_height,
                         .dw = dst_width,
                         .dh = dst_height,
                         .format = KP__RESIZE_NV12,
                         .frames = 1};
    KP_CHECK(kp__resize_check(&a, "kp_resize_nv12"));
    kp__resize_frame_bytes(&a);
    kp_launch l = {.kernel = &kp__resize_direct_kernel,
                   .grid = {kp__resize_blocks(&a, 1), 1, 1},
                   .block = {256, 1, 1},
                   .params = &a};
    return kp_launch_kernel(s, &l);
}

/* --- the batch resizer (kpipe/modules.h) ---------------------------------------------- */
#define KP__RESIZER_SLOTS 4

struct kp_resizer {
    kp__guard guard; /* one thread at a time: claimed by kp_resizer_nv12 */
    kp_device_t dev;
    size_t max;
    kp_nv12_picture *host;  /* KP__RESIZER_SLOTS tables of max, pinned */
    kp_nv12_picture *table; /* the same on the device */
    kp_event_t done[KP__RESIZER_SLOTS];
    unsigned next;
};

void kp_resizer_destroy(kp_resizer_t r) {
    if (!r) return;
    for (int k = 0; k < KP__RESIZER_SLOTS; k++)
        if (r->done[k]) {
            kp_event_sync(r->done[k]);
            kp_event_destroy(r->done[k]);
        }
    kp_clear_error(); /* a device error here is the stream's to report */
    if (r->table) kp_free(r->dev, r->table);
    if (r->host) kp_free_host(r->dev, r->host);
    kp__free(r);
}

kp_status kp_resizer_create(kp_device_t dev, size_t max_pictures, kp_resizer_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(dev);
    if (max_pictures < 1 || max_pictures > KP__RESIZE_MAX_BATCH)
        return kp__error(KP_ERR_INVALID_ARG, "kp_resizer_create: %zu pictures (1 .. %d)",
                         max_pictures, KP__RESIZE_MAX_BATCH);
    kp_resizer_t r = kp__calloc(1, sizeof *r);
    if (!r) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_resizer_create: no memory");
    r->dev = dev;
    r->max = max_pictures;
    const size_t bytes = KP__RESIZER_SLOTS * max_pictures * sizeof(kp_nv12_picture);
    kp_status st = kp_malloc_host(dev, bytes, (void **)&r->host);
    if (st == KP_OK) st = kp_malloc(dev, bytes, (void **)&r->table);
    for (int k = 0; k < KP__RESIZER_SLOTS && st == KP_OK; k++)
        st = kp_event_create_untimed(dev, &r->done[k]);
    if (st != KP_OK) {
        kp_resizer_destroy(r);
        return st;
    }
    *out = r;
    return KP_OK;
}

kp_status kp_resizer_nv12(kp_resizer_t r, kp_stream_t s, const kp_nv12_picture *src, size_t n,
                          void *dst, int32_t dst_width, int32_t dst_height, int64_t dst_pitch) {
    KP_API_ENTRY();
    KP_GUARD(r ? &r->guard : NULL, "resizer");
    KP_ARG_CHECK(r && s && src && dst);
    if (kp_stream_device(s) != r->dev)
        return kp__error(KP_ERR_INVALID_ARG, "kp_resizer_nv12: a stream of %s, not of %s",
                         kp_device_name(kp_stream_device(s)), kp_device_name(r->dev));
    if (n < 1 || n > r->max)
        return kp__error(KP_ERR_INVALID_ARG, "kp_resizer_nv12: %zu pictures (1 .. %zu)", n, r->max);
    for (size_t i = 0; i < n; i++) {
        kp__resize_args a = {.in = src[i].data,
                             .out = dst,
                             .spitch = src[i].pitch,
                             .dpitch = dst_pitch,
                             .sw = src[i].width,
                             .sh = src[i].height,
                             .dw = dst_width,
                             .dh = dst_height,
                             .format = KP__RESIZE_NV12,
                             .frames = 1};
        char who[64];
        snprintf(who, sizeof who, "kp_resizer_nv12: picture %zu", i);
        if (!src[i].data) return kp__error(KP_ERR_INVALID_ARG, "%s: data is NULL", who);
        KP_CHECK(kp__resize_check(&a, who));
    }
    const unsigned k = r->next;
    KP_CHECK(kp_event_sync(r->done[k])); /* the launch that last read slot k has run */
    kp_nv12_picture *host = r->host + k * r->max, *table = r->table + k * r->max;
    memcpy(host, src, n * sizeof *src);
    /* addresses and sizes, not data: not counted as a host copy, so a flow
     * whose frames stay on the device passes strict_no_host_copies */
    kp_copy_counts *watch = kp_copy_count_watch(NULL);
    kp_status st = kp_memcpy_async(s, table, host, n * sizeof *src);
    kp_copy_count_watch(watch);
    KP_CHECK(st);
    kp__resize_many m = {.table = table,
                         .out = dst,
                         .dpitch = dst_pitch,
                         .dw = dst_width,
                         .dh = dst_height,
                         .n = (int32_t)n};
    m.out_frame = dst_pitch * dst_height / 2 * 3;
    kp_launch l = {.kernel = &kp__resize_many_kernel,
                   .grid = {kp__blocks_for(kp__resize_many_items(&m) * (int64_t)n), 1, 1},
                   .block = {256, 1, 1},
                   .params = &m};
    KP_CHECK(kp_launch_kernel(s, &l));
    KP_CHECK(kp_event_record(r->done[k], s));
    r->next = (k + 1) % KP__RESIZER_SLOTS;
    return KP_OK;
}

typedef struct kp__resize {
    kp__resize_args geo; /* frames: the batch */
    int64_t in_rows;     /* dimension 0 of one input picture */
    int64_t out_rows;
    void *out;
    kp_tensor_desc out_desc;
    kp__resize_params params;
    kp_launch launch;
} kp__resize;

static void kp__resize_destroy(void *self) { kp__free(self); }

static kp_status kp__resize_mem(void *self, kp_mem_req *r) {
    kp__resize *m = self;
    memset(r, 0, sizeof *r);
    r->device_bytes = (size_t)(m->geo.out_frame * m->geo.frames);
    r->static_desc_bytes = sizeof(kp__resize_args);
    r->dynamic_desc_bytes = sizeof(kp__resize_dynamic);
    return KP_OK;
}

static kp_status kp__resize_setup(void *self, const kp_mem_slice *s) {
    kp__resize *m = self;
    kp__resize_args *st = s->static_host;
    m->out = s->device;
    *st = m->geo;
    st->out = s->device;
    m->params.st = s->static_dev;
    m->params.dyn = s->dynamic_dev;
    m->launch = (kp_launch){.kernel = &kp__resize_module_kernel,
                            .grid = {kp__resize_blocks(&m->geo, m->geo.frames), 1, 1},
                            .block = {256, 1, 1},
                            .params = &m->params};
    return KP_OK;
}

/* The input's address and picture count go to the device through the
 * dynamic descriptor; the output holds as many pictures. */
static kp_status kp__resize_io(void *self, const kp_module_io *io) {
    kp__resize *m = self;
    kp__resize_dynamic *d = io->dynamic_desc;
    KP_CHECK(kp__pictures_io(io, m->in_rows, m->out_rows, m->out, &m->out_desc, &d->frames));
    d->input = io->inputs[0].data;
    return KP_OK;
}

static kp_status kp__resize_execute(void *self, kp_stream_t s) {
    return kp_launch_kernel(s, &((kp__resize *)self)->launch);
}

static kp_status kp__resize_add_node(void *self, kp_graph_t g, const kp_graph_node_t *deps,
                                     size_t n, kp_graph_node_t *out) {
    return kp_graph_add_kernel(g, deps, n, &((kp__resize *)self)->launch, out);
}

static const kp_module_i kp__resize_iface = {
    .destroy = kp__resize_destroy,
    .io = kp__resize_io,
    .execute = kp__resize_execute,
    .memory_requirements = kp__resize_mem,
    .setup_memory = kp__resize_setup,
    .add_node_to_graph = kp__resize_add_node,
};

static kp_status kp__resize_port(kp_port_decl *p, const char *name, const kp__resize_args *a,
                                 bool out, int64_t rows) {
    snprintf(p->name, KP_NAME_MAX, "%s", name);
    p->dynamic = a->frames > 1 ? 1u : 0u;
    if (a->format == KP__RESIZE_NV12) {
        p->format = KP_PIXEL_NV12; /* a flow refuses I420 frames here, by name */
        int64_t shape[2] = {rows * a->frames, out ? a->dpitch : a->spitch};
        return kp_desc_init(&p->desc, KP_U8, 2, shape, NULL);
    }
    int64_t shape[1] = {rows * a->frames};
    return kp_desc_init(&p->desc, KP_F32, 1, shape, NULL);
}

static kp_status kp__resize_create(const kp_module_env *env, kp_module_def *def) {
    kp__resize_args a;
    memset(&a, 0, sizeof a);
    int64_t w = 0, h = 0, ow = 0, oh = 0, pitch = 0, opitch = 0, batch = 1;
    const char *format = NULL;
    KP_CHECK(kp_param_str(env, "format", "nv12", &format));
    KP_CHECK(kp_param_int(env, "width", false, 0, &w));
    KP_CHECK(kp_param_int(env, "height", false, 0, &h));
    KP_CHECK(kp_param_int(env, "out_width", false, 0, &ow));
    KP_CHECK(kp_param_int(env, "out_height", false, 0, &oh));
    KP_CHECK(kp_param_int(env, "pitch", true, 0, &pitch));
    KP_CHECK(kp_param_int(env, "out_pitch", true, 0, &opitch));
    KP_CHECK(kp_param_int(env, "batch", true, 1, &batch));
    char who[KP_NAME_MAX + 16];
    snprintf(who, sizeof who, "module \"%s\"", env->id);
    if (strcmp(format, "nv12") && strcmp(format, "rgb"))
        return kp__error(KP_ERR_INVALID_ARG, "%s: format \"%s\" (nv12 or rgb)", who, format);
    bool nv12 = format[0] == 'n';
    if (!nv12 && (pitch || opitch))
        return kp__error(KP_ERR_INVALID_ARG, "%s: an RGB image has no pitch", who);
    const int64_t sides[4] = {w, h, ow, oh};
    for (int k = 0; k < 4; k++)
        if (sides[k] < 2 || sides[k] > KP__RESIZE_MAX_SIDE || sides[k] % 2)
            return kp__error(KP_ERR_INVALID_ARG, "%s: %lldx%lld to %lldx%lld (sides even, 2 .. %d)",
                             who, (long long)w, (long long)h, (long long)ow, (long long)oh,
                             KP__RESIZE_MAX_SIDE);
    if (batch < 1 || batch > KP__RESIZE_MAX_BATCH || pitch < 0 || opitch < 0 ||
        pitch > 2 * KP__RESIZE_MAX_SIDE || opitch > 2 * KP__RESIZE_MAX_SIDE)
        return kp__error(KP_ERR_INVALID_ARG, "%s: batch %lld (1 .. %d) or a pitch out of range",
                         who, (long long)batch, KP__RESIZE_MAX_BATCH);
    a.format = nv12 ? KP__RESIZE_NV12 : KP__RESIZE_RGB;
    a.sw = (int32_t)w;
    a.sh = (int32_t)h;
    a.dw = (int32_t)ow;
    a.dh = (int32_t)oh;
    a.spitch = nv12 ? (pitch ? pitch : w) : 0;
    a.dpitch = nv12 ? (opitch ? opitch : ow) : 0;
    a.frames = (int32_t)batch;
    KP_CHECK(kp__resize_check(&a, who));
    kp__resize_frame_bytes(&a);
    /* at most 1024 pictures of 3 * 2^28 floats: within KP__MAX_ALLOC_BYTES is the arena's to say */
    const int64_t in_rows = nv12 ? h / 2 * 3 : 3 * w * h,
                  out_rows = nv12 ? oh / 2 * 3 : 3 * ow * oh;
    if (in_rows * batch > KP__MAX_ELEMENTS || out_rows * batch > KP__MAX_ELEMENTS)
        return kp__error(KP_ERR_INVALID_ARG, "%s: a batch of %lld is too large", who,
                         (long long)batch);
    kp__resize *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "%s: no memory", who);
    m->geo = a;
    m->in_rows = in_rows;
    m->out_rows = out_rows;
    kp_status st = kp__resize_port(&def->inputs[0], "input", &a, false, in_rows);
    if (st == KP_OK) st = kp__resize_port(&def->outputs[0], "output", &a, true, out_rows);
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    m->out_desc = def->outputs[0].desc;
    def->iface = &kp__resize_iface;
    def->self = m;
    def->n_inputs = 1;
    def->n_outputs = 1;
    def->live_inputs = 1; /* the kernel reads its input's address from the descriptor */
    def->live_shapes = 1; /* ... and how many pictures */
    return KP_OK;
}

KP__BUILTIN_MODULE(resize, kp__resize_create, NULL)
