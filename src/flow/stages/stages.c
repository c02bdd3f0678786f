/* The flows' built-in stages: a synthetic source, sinks, and a stage that
 * runs a kpipe pipeline on every frame. */
#include <stdio.h>
#include <string.h>

#include "stages-impl.h"
#include "pattern-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__pattern_cuda; /* pattern.cu */
#define KP__PATTERN_CUDA {"cuda", &kp__pattern_cuda},
#else
#define KP__PATTERN_CUDA
#endif

static void kp__pattern_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                             uint64_t n) {
    const kp__pattern_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++) p->out[i] = kp__pattern_value(p->seq, (int64_t)i);
}

static const kp_kernel kp__pattern_kernel = {
    "flow_pattern",
    sizeof(kp__pattern_params),
    {{"host", &(const kp_host_kernel){kp__pattern_host}}, KP__PATTERN_CUDA}};

/* --- synthetic source ------------------------------------------------------------ */
typedef struct kp__synthetic {
    int64_t frames;
    kp_tensor_desc desc;
    int64_t n;
} kp__synthetic;

static kp_status kp__synthetic_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__synthetic *s = user;
    if (s->frames && f->seq >= (uint64_t)s->frames) {
        *eos = true;
        return KP_OK;
    }
    kp__pattern_params p = {f->data, s->n, f->seq};
    uint64_t blocks = ((uint64_t)s->n + 1023) / 1024;
    kp_launch l = {.kernel = &kp__pattern_kernel,
                   .grid = {(uint32_t)(blocks < 4096 ? blocks : 4096), 1, 1},
                   .block = {256, 1, 1},
                   .params = &p};
    f->desc = s->desc;
    f->bytes = (size_t)s->n * sizeof(float);
    return kp_launch_kernel(c->stream, &l);
}

kp_status kp__stage_synthetic(kp_device_t dev, int64_t frames, int ndim, const int64_t *shape,
                              kp__stage_made *out) {
    if (!dev || !shape || ndim < 1 || ndim > KP_MAX_DIMS)
        return kp__error(KP_ERR_INVALID_ARG,
                         "synthetic source: a device and a shape of 1 to %d sizes are required",
                         KP_MAX_DIMS);
    kp__synthetic *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "synthetic source: no memory");
    kp_status st = kp_desc_init(&s->desc, KP_F32, ndim, shape, NULL);
    s->n = kp_desc_numel(&s->desc);
    if (st == KP_OK && (s->n < 1 || s->n > ((int64_t)1 << 26)))
        st = kp__error(KP_ERR_INVALID_ARG, "shape: %lld elements (1 .. 2^26, 256 MiB of f32)",
                       (long long)s->n);
    if (st == KP_OK && frames < 0)
        st = kp__error(KP_ERR_INVALID_ARG, "frames: %lld is negative", (long long)frames);
    if (st != KP_OK) {
        kp__free(s);
        return st;
    }
    s->frames = frames;
    *out = (kp__stage_made){.fn = kp__synthetic_fn,
                            .user = s,
                            .free_fn = kp__free,
                            .frame_bytes = (size_t)s->n * sizeof(float),
                            .max_batch = 1};
    return KP_OK;
}

/* --- sinks ------------------------------------------------------------------------ */
static kp_status kp__null_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    return KP_OK;
}

kp_status kp__stage_null(kp__stage_made *out) {
    *out = (kp__stage_made){.fn = kp__null_fn, .max_batch = 1};
    return KP_OK;
}

typedef struct kp__npy_sink {
    kp_device_t dev;
    char path[1024];
    void *host; /* pinned */
    size_t bytes;
} kp__npy_sink;

static void kp__npy_free(void *user) {
    kp__npy_sink *s = user;
    if (!s) return;
    if (s->host) kp_free_host(s->dev, s->host);
    kp__free(s);
}

static kp_status kp__npy_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__npy_sink *s = user;
    if (f->bytes > s->bytes || !kp__desc_ok(&f->desc) ||
        (size_t)kp_desc_bytes_needed(&f->desc) != f->bytes)
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu: %zu bytes that its descriptor does not describe",
                         (unsigned long long)f->seq, f->bytes);
    KP_CHECK(kp_memcpy_async(c->stream, s->host, f->data, f->bytes));
    KP_CHECK(kp_stream_sync(c->stream));
    return kp_npy_save(s->path, &f->desc, s->host);
}

kp_status kp__stage_npy(kp_device_t dev, const char *path, size_t max_bytes, kp__stage_made *out) {
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "npy sink: a device is required");
    if (!path || strlen(path) >= sizeof((kp__npy_sink *)0)->path)
        return kp__error(KP_ERR_INVALID_ARG, "npy sink: a path of at most 1023 characters");
    kp__npy_sink *s = kp__calloc(1, sizeof *s);
    if (!s) return kp__error(KP_ERR_OUT_OF_MEMORY, "npy sink: no memory");
    s->dev = dev;
    s->bytes = max_bytes;
    memcpy(s->path, path, strlen(path) + 1);
    kp_status st = kp_malloc_host(dev, max_bytes ? max_bytes : 1, &s->host);
    if (st != KP_OK) {
        kp__npy_free(s);
        return st;
    }
    *out = (kp__stage_made){.fn = kp__npy_fn, .user = s, .free_fn = kp__npy_free, .max_batch = 1};
    return KP_OK;
}

/* --- a pipeline as a stage ---------------------------------------------------------- */
typedef struct kp__pstage {
    kp_pipeline_t p;
    kp_port_info in, out;
    uint32_t in_dynamic;
    bool ready;
    /* pictures: the layout the modules reading the input declare, and the
     * one the output's module declares (KP_PIXEL_NONE: not said) */
    kp_pixel_format takes, makes;
    char taker[3 * KP_NAME_MAX + 8]; /* "module.port (type)" reading the input, for errors */
    /* micro-batching: the concatenated input */
    kp_device_t dev;
    void *gather;
    size_t gather_bytes, max_batch;
    int32_t rw, rh;  /* a batch across streams: every NV12 frame resized to rw x rh; 0: none */
    kp_resizer_t rz; /* ... by one launch per batch */
    kp_nv12_picture *pics; /* max_batch: the batch's pictures */
    /* An input sized by its frames (dimension 1 dynamic, NV12: modules that
     * take the pitch as the width): a frame narrower than its pitch (a
     * stream that changed size under max_width) is first packed here at
     * pitch = width, by one 2-D copy; allocated at the first such frame. */
    bool sized;
    size_t in_bytes; /* the input's largest */
    kp_device_t compact_dev;
    void *compact;
} kp__pstage;

static void kp__pstage_free(void *user) {
    kp__pstage *s = user;
    if (!s) return;
    kp_pipeline_destroy(s->p);
    if (s->gather) kp_free(s->dev, s->gather);
    if (s->compact) kp_free(s->compact_dev, s->compact);
    kp_resizer_destroy(s->rz);
    kp__free(s->pics);
    kp__free(s);
}

/* Configure, warm up once, execute: one tick of the stage's pipeline. */
static kp_status kp__pstage_tick(kp__pstage *s, kp_stream_t stream) {
    KP_CHECK(kp_pipeline_configure_io(s->p, &s->in, 1, &s->out, 1, stream));
    if (!s->ready) {
        KP_CHECK(kp_pipeline_warmup(s->p, stream));
        if (kp_pipeline_mode(s->p) == KP_EXEC_GRAPH) KP_CHECK(kp_pipeline_build_graph(s->p));
        s->ready = true;
    }
    return kp_pipeline_mode(s->p) == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(s->p, stream)
                                                   : kp_pipeline_execute_stream(s->p, stream);
}

/* A video frame of the other layout than the pipeline's input takes would
 * be misread by its modules, plane for plane: refused, by name. A frame
 * that is not video says nothing to check. */
static kp_status kp__pstage_check(const kp__pstage *s, const kp_frame *f) {
    const kp_pixel_format v = f->video.format;
    if (s->takes == KP_PIXEL_NONE || v == KP_PIXEL_NONE || v == s->takes) return KP_OK;
    return kp__error(KP_ERR_MISMATCH,
                     "frame %llu of stream %u is %s, but pipeline \"%s\" takes %s frames (its "
                     "input \"%s\" feeds %s): a video or testsrc source gives %s with "
                     "\"format\": \"%s\"",
                     (unsigned long long)f->seq, f->stream, kp__pixel_str(v),
                     kp_pipeline_name(s->p), kp__pixel_str(s->takes), s->in.name, s->taker,
                     kp__pixel_str(s->takes),
                     s->takes == KP_PIXEL_I420   ? "i420"
                     : s->takes == KP_PIXEL_P016 ? "p016"
                                                 : "nv12");
}

/* What a frame shows once the pipeline's output is in it. Where the
 * output's module declares the layout of its pictures: that layout and the
 * output's pitch, and where the pictures changed height (or are wider than
 * the new pitch holds), the size the shape gives, pitch wide, as the I420
 * modules, and resize without "out_pitch", make them. Otherwise the frame
 * keeps the description it came with. */
static void kp__pstage_label(const kp__pstage *s, const kp_tensor_desc *d, kp_video_frame *v) {
    if (s->makes == KP_PIXEL_NONE || d->dtype != KP_U8 || d->ndim != 2 || d->shape[0] < 3 ||
        d->shape[0] % 3 || d->shape[1] < 2 || d->shape[1] > INT32_MAX)
        return;
    const int64_t h = d->shape[0] / 3 * 2, pitch = d->shape[1];
    if (h != v->height || pitch < v->width) {
        v->width = (int32_t)pitch;
        v->height = (int32_t)h;
    }
    v->format = s->makes;
    v->pitch = pitch;
}

/* A sized input's NV12 or P016 frame narrower than its pitch, packed at
 * pitch = the width's bytes into s->compact: the modules read the width
 * from the shape. */
static kp_status kp__pstage_compact(kp__pstage *s, const kp_stage_ctx *c, const kp_frame *f) {
    const kp_video_frame *v = &f->video;
    const int64_t row = (int64_t)v->width * kp_pixel_format_sample_bytes(v->format);
    const int64_t rows = f->desc.ndim == 2 ? f->desc.shape[0] : 0;
    if (rows != (int64_t)v->height / 2 * 3 || f->desc.shape[1] != v->pitch)
        return kp__error(KP_ERR_MISMATCH, "frame %llu of stream %u: u8 [%lld, %lld] is not "
                         "%dx%d %s at pitch %lld", (unsigned long long)f->seq, f->stream,
                         (long long)f->desc.shape[0], (long long)f->desc.shape[1],
                         (int)v->width, (int)v->height, kp_pixel_format_name(v->format),
                         (long long)v->pitch);
    if ((size_t)(rows * row) > s->in_bytes)
        return kp__error(KP_ERR_MISMATCH, "frame %llu of stream %u: %dx%d passes pipeline "
                         "\"%s\"'s input (%zu bytes)", (unsigned long long)f->seq, f->stream,
                         (int)v->width, (int)v->height, kp_pipeline_name(s->p), s->in_bytes);
    if (!s->compact) {
        KP_CHECK(kp_malloc(c->dev, s->in_bytes, &s->compact));
        s->compact_dev = c->dev;
    }
    KP_CHECK(kp_memcpy2d_async(c->stream, s->compact, (size_t)row, f->data, (size_t)v->pitch,
                               (size_t)row, (size_t)rows));
    int64_t shape[2] = {rows, row};
    KP_CHECK(kp_desc_init(&s->in.desc, KP_U8, 2, shape, NULL));
    s->in.data = s->compact;
    return KP_OK;
}

/* The frame feeds the input; the output is copied back into the frame on
 * the stage's stream, after the pipeline's work. */
static kp_status kp__pstage_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kp__pstage *s = user;
    KP_CHECK(kp__pstage_check(s, f));
    s->in.data = f->data;
    s->in.desc = f->desc;
    s->in.desc.offset = 0;
    if (s->sized && f->video.pitch > (int64_t)f->video.width *
                                          kp_pixel_format_sample_bytes(f->video.format))
        KP_CHECK(kp__pstage_compact(s, c, f));
    KP_CHECK(kp__pstage_tick(s, c->stream));
    int64_t bytes = kp_desc_bytes_needed(&s->out.desc);
    if (!kp_desc_is_contiguous(&s->out.desc) || bytes < 0 || (size_t)bytes > f->capacity)
        return kp__error(KP_ERR_MISMATCH,
                         "pipeline \"%s\": its output (%lld bytes) does not fit the frame (%zu)",
                         kp_pipeline_name(s->p), (long long)bytes, f->capacity);
    KP_CHECK(kp_memcpy_async(c->stream, f->data, s->out.data, (size_t)bytes));
    f->desc = s->out.desc;
    f->bytes = (size_t)bytes;
    kp__pstage_label(s, &f->desc, &f->video);
    return KP_OK;
}

/* The port a spec writes "module.port", on the given side, and its
 * module's type; NULL where the pipeline has no such port. */
static const kp_port_decl *kp__pstage_port(kp_pipeline_t p, const char *where, bool output,
                                           const char **type) {
    const char *dot = strchr(where, '.');
    kp_pipeline_report r;
    if (!dot || kp_pipeline_report_get(p, &r) != KP_OK) return NULL;
    const size_t id_len = (size_t)(dot - where);
    for (size_t i = 0; i < r.n_modules; i++) {
        kp_module_report m;
        if (kp_pipeline_module_report(p, i, &m) != KP_OK) return NULL;
        if (strlen(m.id) != id_len || strncmp(m.id, where, id_len) != 0) continue;
        const kp_port_decl *d = output ? m.outputs : m.inputs;
        for (size_t k = 0, n = output ? m.n_outputs : m.n_inputs; k < n; k++)
            if (strcmp(d[k].name, dot + 1) == 0) {
                *type = m.type;
                return &d[k];
            }
    }
    return NULL;
}

/* A connection from a port making pictures of one layout into a port
 * reading the other: the shapes agree, so only the layouts tell that the
 * second module would misread the first's output. */
static kp_status kp__pstage_link(const kp__pstage *s, const kp_connection_report *c) {
    const char *from_type = NULL, *to_type = NULL;
    const kp_port_decl *from = kp__pstage_port(s->p, c->from, true, &from_type),
                       *to = kp__pstage_port(s->p, c->to, false, &to_type);
    if (!from || !to || from->format == KP_PIXEL_NONE || to->format == KP_PIXEL_NONE ||
        from->format == to->format)
        return KP_OK;
    return kp__error(KP_ERR_MISMATCH,
                     "pipeline \"%s\": %s (%s) makes %s pictures, but %s (%s), which it feeds, "
                     "reads %s",
                     kp_pipeline_name(s->p), c->from, from_type, kp__pixel_str(from->format), c->to,
                     to_type, kp__pixel_str(to->format));
}

/* What the pipeline's pictures are: the layout the module port its input
 * feeds declares, and the one its output's module declares; and that no
 * module reads the other layout than the module before it makes. */
static kp_status kp__pstage_formats(kp__pstage *s, const char *output) {
    kp_pipeline_report r;
    KP_CHECK(kp_pipeline_report_get(s->p, &r));
    for (size_t i = 0; i < r.n_connections; i++) {
        kp_connection_report c;
        const char *type = NULL;
        KP_CHECK(kp_pipeline_connection_report(s->p, i, &c));
        if (!c.external) {
            KP_CHECK(kp__pstage_link(s, &c));
            continue;
        }
        /* an external input feeds one port */
        const kp_port_decl *d =
            strcmp(c.from, s->in.name) == 0 ? kp__pstage_port(s->p, c.to, false, &type) : NULL;
        if (!d) continue;
        s->takes = d->format;
        s->sized = (d->format == KP_PIXEL_NV12 || d->format == KP_PIXEL_P016) &&
                   (d->dynamic & 2u);
        snprintf(s->taker, sizeof s->taker, "%s (%s)", c.to, type);
    }
    /* a pipeline of one module has its output there, whatever the spec says */
    char one[2 * KP_NAME_MAX + 2];
    if (!output && r.n_modules == 1) {
        kp_module_report m;
        KP_CHECK(kp_pipeline_module_report(s->p, 0, &m));
        if (m.n_outputs == 1) {
            snprintf(one, sizeof one, "%s.%s", m.id, m.outputs[0].name);
            output = one;
        }
    }
    const char *type = NULL;
    const kp_port_decl *d = output ? kp__pstage_port(s->p, output, true, &type) : NULL;
    s->makes = d ? d->format : KP_PIXEL_NONE;
    return KP_OK;
}

kp_status kp__stage_pipeline(kp_pipeline_t p, const char *output, kp__stage_made *out) {
    kp_pipeline_report r;
    kp_status st = kp_pipeline_report_get(p, &r);
    if (st == KP_OK && (r.n_inputs != 1 || r.n_outputs != 1))
        st = kp__error(KP_ERR_UNSUPPORTED,
                       "pipeline \"%s\" has %zu inputs and %zu outputs; a flow stage takes one "
                       "of each",
                       kp_pipeline_name(p), r.n_inputs, r.n_outputs);
    kp__pstage *s = st == KP_OK ? kp__calloc(1, sizeof *s) : NULL;
    if (st == KP_OK && !s) st = kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline stage: no memory");
    if (st != KP_OK) {
        kp_pipeline_destroy(p);
        return st;
    }
    s->p = p;
    if (st == KP_OK) st = kp_pipeline_input_info(p, 0, &s->in);
    if (st == KP_OK) st = kp_pipeline_output_info(p, 0, &s->out);
    if (st == KP_OK) st = kp__pstage_formats(s, output);
    if (st == KP_OK) st = kp_pipeline_setup(p);
    s->in_bytes = (size_t)kp_desc_bytes_needed(&s->in.desc);
    if (st != KP_OK) {
        kp__pstage_free(s);
        return st;
    }
    int64_t out_bytes = kp_desc_bytes_needed(&s->out.desc);
    *out = (kp__stage_made){.fn = kp__pstage_fn,
                            .user = s,
                            .free_fn = kp__pstage_free,
                            .frame_bytes = (size_t)out_bytes,
                            .max_batch = 1};
    return KP_OK;
}

/* The batch: frames concatenated along dimension 0 into the gather buffer,
 * one pipeline tick, the output split back along dimension 0. */
static kp_status kp__pstage_batch_run(kp__pstage *s, const kp_stage_ctx *c, kp_frame *const *fr,
                                      size_t n);

/* A batch across streams: each NV12 frame, whatever its size, resized
 * into its slot of the gather buffer as rw x rh (pitch rw), all by one
 * launch, so the pipeline takes u8 [n * rh*3/2, rw]. */
static kp_status kp__pstage_gather_resized(kp__pstage *s, const kp_stage_ctx *c,
                                           kp_frame *const *fr, size_t n) {
    const size_t slot = (size_t)s->rw * (size_t)s->rh / 2 * 3;
    if (n * slot > s->gather_bytes)
        return kp__error(KP_ERR_MISMATCH,
                         "a batch of %zu frames of %dx%d passes the pipeline's input (%zu bytes)",
                         n, (int)s->rw, (int)s->rh, s->gather_bytes);
    for (size_t i = 0; i < n; i++) {
        const kp_video_frame *v = &fr[i]->video;
        const kp_tensor_desc *d = &fr[i]->desc;
        if (v->format != KP_PIXEL_NV12)
            return kp__error(KP_ERR_MISMATCH,
                             "frame %llu of stream %u is %s: a batch that resizes takes NV12 "
                             "video frames (a video or testsrc source with \"format\": "
                             "\"nv12\")",
                             (unsigned long long)fr[i]->seq, fr[i]->stream,
                             kp__pixel_str(v->format));
        if (d->dtype != KP_U8 || d->ndim != 2 || d->shape[0] != (int64_t)v->height / 2 * 3 ||
            d->shape[1] < v->width || (size_t)kp_desc_bytes_needed(d) > fr[i]->capacity) {
            char buf[96];
            return kp__error(KP_ERR_MISMATCH,
                             "frame %llu of stream %u: %s is not the %dx%d NV12 picture it is "
                             "said to be (u8 [h*3/2, pitch])",
                             (unsigned long long)fr[i]->seq, fr[i]->stream,
                             kp_desc_str(d, buf, sizeof buf), (int)v->width, (int)v->height);
        }
        s->pics[i] = (kp_nv12_picture){fr[i]->data, v->width, v->height, d->shape[1]};
    }
    KP_CHECK(kp_resizer_nv12(s->rz, c->stream, s->pics, n, s->gather, s->rw, s->rh, s->rw));
    int64_t shape[2] = {(int64_t)n * s->rh / 2 * 3, s->rw};
    s->in.data = s->gather;
    return kp_desc_init(&s->in.desc, KP_U8, 2, shape, NULL);
}

/* The batch: frames concatenated along dimension 0 into the gather buffer
 * (resized first where the stage resizes), one pipeline tick, the output
 * split back along dimension 0. */
static kp_status kp__pstage_batch_fn(void *user, const kp_stage_ctx *c, kp_frame *const *fr,
                                     size_t n) {
    kp__pstage *s = user;
    if (s->rw) {
        KP_CHECK(kp__pstage_gather_resized(s, c, fr, n));
        return kp__pstage_batch_run(s, c, fr, n);
    }
    const kp_tensor_desc *d0 = &fr[0]->desc;
    if (d0->ndim < 1 || !kp_desc_is_contiguous(d0))
        return kp__error(KP_ERR_MISMATCH,
                         "frame %llu: a batch needs contiguous frames of at "
                         "least one dimension",
                         (unsigned long long)fr[0]->seq);
    size_t fb = (size_t)kp_desc_bytes_needed(d0);
    for (size_t i = 0; i < n; i++) {
        KP_CHECK(kp__pstage_check(s, fr[i]));
        if (!kp_desc_same_shape(&fr[i]->desc, d0) || !kp_desc_is_contiguous(&fr[i]->desc))
            return kp__error(KP_ERR_MISMATCH,
                             "frames %llu and %llu differ in shape: a batch takes one shape",
                             (unsigned long long)fr[0]->seq, (unsigned long long)fr[i]->seq);
        if ((i + 1) * fb > s->gather_bytes)
            return kp__error(KP_ERR_MISMATCH,
                             "a batch of %zu frames of %zu bytes passes the "
                             "pipeline's input (%zu bytes)",
                             n, fb, s->gather_bytes);
        KP_CHECK(kp_memcpy_async(c->stream, (char *)s->gather + i * fb, fr[i]->data, fb));
    }
    int64_t shape[KP_MAX_DIMS];
    for (int k = 0; k < d0->ndim; k++) shape[k] = d0->shape[k];
    shape[0] *= (int64_t)n;
    s->in.data = s->gather;
    KP_CHECK(kp_desc_init(&s->in.desc, d0->dtype, d0->ndim, shape, NULL));
    return kp__pstage_batch_run(s, c, fr, n);
}

/* One tick on the gathered batch, its output split back into the frames. */
static kp_status kp__pstage_batch_run(kp__pstage *s, const kp_stage_ctx *c, kp_frame *const *fr,
                                      size_t n) {
    KP_CHECK(kp__pstage_tick(s, c->stream));
    const kp_tensor_desc *od = &s->out.desc;
    if (od->ndim < 1 || od->shape[0] % (int64_t)n || !kp_desc_is_contiguous(od))
        return kp__error(KP_ERR_MISMATCH,
                         "pipeline \"%s\": its output's dimension 0 does not split into %zu "
                         "frames",
                         kp_pipeline_name(s->p), n);
    kp_tensor_desc each = *od;
    each.shape[0] /= (int64_t)n;
    each.offset = 0;
    size_t ob = (size_t)kp_desc_bytes_needed(&each);
    for (size_t i = 0; i < n; i++) {
        if (ob > fr[i]->capacity)
            return kp__error(KP_ERR_MISMATCH, "an output of %zu bytes does not fit the frame (%zu)",
                             ob, fr[i]->capacity);
        KP_CHECK(kp_memcpy_async(c->stream, fr[i]->data, (const char *)s->out.data + i * ob, ob));
        fr[i]->desc = each;
        fr[i]->bytes = ob;
        if (s->rw) {
            /* what the frame shows now: rw x rh, and where the output's
             * module does not say its layout, NV12 (what the pipeline was
             * given) where the output is shaped so */
            kp_video_frame *v = &fr[i]->video;
            bool nv12 = each.dtype == KP_U8 && each.ndim == 2 && each.shape[0] == s->rh / 2 * 3 &&
                        each.shape[1] >= s->rw && each.shape[1] % 2 == 0;
            v->width = s->rw;
            v->height = s->rh;
            v->format = nv12 ? KP_PIXEL_NV12 : KP_PIXEL_NONE;
            v->pitch = nv12 ? each.shape[1] : 0;
        }
        kp__pstage_label(s, &each, &fr[i]->video);
    }
    return KP_OK;
}

kp_status kp__stage_pipeline_batch(kp_device_t dev, kp_pipeline_t p, const char *output,
                                   size_t max_batch, const int32_t *resize, kp__stage_made *out) {
    KP_CHECK(kp__stage_pipeline(p, output, out)); /* takes p over */
    kp__pstage *s = out->user;
    uint32_t dyn = 0;
    kp_status st = kp_pipeline_input_dynamic(s->p, 0, &dyn);
    if (st == KP_OK && !(dyn & 1u))
        st = kp__error(KP_ERR_UNSUPPORTED,
                       "pipeline \"%s\": a micro-batching stage needs its input's dimension 0 "
                       "dynamic ({\"max\": N})",
                       kp_pipeline_name(s->p));
    int64_t in_bytes = kp_desc_bytes_needed(&s->in.desc);
    s->dev = dev;
    s->max_batch = max_batch;
    s->gather_bytes = in_bytes > 0 ? (size_t)in_bytes : 0;
    if (st == KP_OK && resize) {
        s->rw = resize[0];
        s->rh = resize[1];
        const kp_tensor_desc *d = &s->in.desc;
        const int64_t rows = (int64_t)s->rh / 2 * 3 * (int64_t)max_batch;
        if (s->rw < 2 || s->rh < 2 || s->rw % 2 || s->rh % 2 || s->rw > KP_VIDEO_MAX_SIDE ||
            s->rh > KP_VIDEO_MAX_SIDE)
            st = kp__error(KP_ERR_INVALID_ARG, "resize %dx%d: sides even, 2 .. %d", (int)s->rw,
                           (int)s->rh, KP_VIDEO_MAX_SIDE);
        else if (d->dtype != KP_U8 || d->ndim != 2 || d->shape[1] != s->rw || d->shape[0] < rows)
            st = kp__error(KP_ERR_MISMATCH,
                           "pipeline \"%s\": a batch of %zu NV12 frames of %dx%d needs an input "
                           "of u8 [%lld (dynamic), %d]",
                           kp_pipeline_name(s->p), max_batch, (int)s->rw, (int)s->rh,
                           (long long)rows, (int)s->rw);
        else if (s->takes != KP_PIXEL_NONE && s->takes != KP_PIXEL_NV12)
            st = kp__error(KP_ERR_MISMATCH,
                           "pipeline \"%s\": a batch that resizes hands it NV12 pictures, but "
                           "its input \"%s\" feeds %s, which takes %s",
                           kp_pipeline_name(s->p), s->in.name, s->taker, kp__pixel_str(s->takes));
    }
    if (st == KP_OK && s->rw) {
        st = kp_resizer_create(dev, max_batch, &s->rz);
        if (st == KP_OK && !(s->pics = kp__calloc(max_batch, sizeof *s->pics)))
            st = kp__error(KP_ERR_OUT_OF_MEMORY, "batch stage: no memory");
    }
    if (st == KP_OK) st = kp_malloc(dev, s->gather_bytes ? s->gather_bytes : 1, &s->gather);
    if (st != KP_OK) {
        kp__pstage_free(s);
        memset(out, 0, sizeof *out); /* nothing left for the caller to free */
        return st;
    }
    out->fn = NULL;
    out->batch_fn = kp__pstage_batch_fn;
    out->max_batch = max_batch;
    out->frame_bytes = (out->frame_bytes + max_batch - 1) / max_batch;
    return KP_OK;
}
