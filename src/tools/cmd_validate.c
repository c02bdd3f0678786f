/* kpipe validate: parses and plans a spec without running it, and prints
 * what the pipeline will do. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "options.h"
#include "tool-impl.h"

static const char kpt_validate_usage[] =
    "usage: kpipe validate SPEC.json|MODEL.onnx [--max N=V,...] [--precision P] [--device D] [--mode M] [--fuse on|off] [--source]\n"
    "       kpipe validate FLOW.json [--device D] [--dot FILE]\n\n"
    "Parses and plans the spec without running it: modules in execution order, their\n"
    "ports (a dynamic dimension as <=MAX), each connection with its zero-copy\n"
    "decision and why, the dynamic dimensions, the arena layout (planned for the maxima),\n"
    "descriptor bytes, and the graph's nodes and edges; the groups of elementwise\n"
    "modules fused into one kernel each, and why each boundary is where it is.\n"
    "Exit status 1 and a message\n"
    "naming the file and the line and column or JSON path on a bad spec.\n\n"
    "  --device D  plan for cpu (default), cuda or cuda:N; allocates nothing\n"
    "  --mode M    graph or stream (default: the spec's \"execution\")\n"
    "  --max N=V,...  a model's symbolic dimensions' maxima, by name (MODEL.onnx)\n"
    "  --precision P  fp32, tf32 or fp16: a model's cuda convolutions and GEMMs (MODEL.onnx)\n"
    "  --tune T       on or off: measure cuDNN's convolution algorithms at setup (MODEL.onnx)\n"
    "  --algo-cache D folder of the convolutions' algorithm cache, or off (MODEL.onnx)\n"
    "  --fuse F    on or off: override the spec's \"fuse\" (a MODEL.onnx: the engine's\n"
    "              fused convolution epilogues)\n"
    "  --source    print each fused group's generated CUDA C++\n\n"
    "A flow file (\"kpipe_flow\": 1) is made without being started -- its files and\n"
    "decoders opened, its frames allocated -- and its stages and queues are printed; a\n"
    "video source's header (size, codec, frames) is printed, and frames the first\n"
    "pipeline cannot take, or an output folder that cannot be written, fail it:\n"
    "  --dot FILE  also draw the flow's graph as Graphviz DOT (dot -Tsvg FILE)\n";

/* What validate can know of a flow before it runs: sinks' output folders
 * that do not exist or cannot be written, and a linear flow's source
 * frames against the first pipeline's input (the source's size comes from
 * the file's header). A flow bound to fail says so here, not after its
 * first frame. */
/* The folder a sink's file goes in (sink paths are relative to the
 * working directory, as the flow opens them). */
static void kpt_dir_of(const char *path, char *out, size_t len) {
    const char *cut = strrchr(path, '/');
    if (!cut) snprintf(out, len, ".");
    else if (cut == path) snprintf(out, len, "/");
    else snprintf(out, len, "%.*s", (int)(cut - path), path);
}

static kp_status kpt_check_sinks(json_t *stages) {
    size_t i;
    json_t *st;
    json_array_foreach(stages, i, st) {
        const char *sink = json_string_value(json_object_get(st, "sink"));
        const char *path = json_string_value(json_object_get(st, "path"));
        const char *name = json_string_value(json_object_get(st, "name"));
        if (!sink || !path || strstr(path, "://")) continue;
        char dir[4096];
        kpt_dir_of(path, dir, sizeof dir);
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return kpt_error(KP_ERR_IO, "stage \"%s\": the output folder \"%s\" of \"%s\" does not "
                             "exist", name ? name : "?", dir, path);
        if (access(dir, W_OK) != 0)
            return kpt_error(KP_ERR_IO, "stage \"%s\": the output folder \"%s\" cannot be written",
                             name ? name : "?", dir);
    }
    return KP_OK;
}

/* A y4m file's size from its header ("YUV4MPEG2 W640 H360 ..."). */
static bool kpt_y4m_size(const char *path, long *w, long *h) {
    FILE *f = fopen(path, "rb");
    char line[256];
    bool ok = f && fgets(line, sizeof line, f) && strncmp(line, "YUV4MPEG2 ", 10) == 0;
    if (f) fclose(f);
    *w = *h = 0;
    for (char *t = ok ? strtok(line + 10, " \n") : NULL; t; t = strtok(NULL, " \n")) {
        if (t[0] == 'W') *w = strtol(t + 1, NULL, 10);
        if (t[0] == 'H') *h = strtol(t + 1, NULL, 10);
    }
    return ok && *w > 0 && *h > 0;
}

/* A video source's file, read as the flow will (its header, and its frames
 * counted from the packets): printed, and its size into *w, *h, its rows'
 * pitch into *pitch and whether its frames are P016 (a deep stream, no
 * 8-bit format asked for) into *wide. A file that cannot
 * be read is the flow's error now, named; a URL or a stream list is left
 * to the run. */
static kp_status kpt_video_header(kp_device_t dev, json_t *src, long *w, long *h, long *pitch,
                                  bool *wide) {
    const char *path = json_string_value(json_object_get(src, "path"));
    const char *name = json_string_value(json_object_get(src, "name"));
    if (!path || strstr(path, "://") || strstr(path, "{stream}") || !kp_video_built())
        return KP_OK;
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.decoder = KP_VIDEO_DECODE_SOFTWARE; /* the header is the same; no decoder session */
    cfg.threads = 1;
    kp_video_reader_t r;
    kp_status st = kp_video_reader_open(dev, path, &cfg, &r);
    if (st != KP_OK)
        return kpt_error(st, "stage \"%s\": %s", name ? name : "?", kp_last_error());
    kp_video_reader_info info;
    int64_t frames = 0;
    st = kp_video_reader_get_info(r, &info);
    if (st == KP_OK && kp_video_reader_count(r, &frames) != KP_OK) {
        frames = info.frames; /* as the container says */
        kp_clear_error();
    }
    if (st == KP_OK) {
        const char *fmt = json_string_value(json_object_get(src, "format"));
        json_int_t p = json_integer_value(json_object_get(src, "pitch"));
        *w = info.width;
        *h = info.height;
        /* an 8-bit format named rounds a deep stream's samples to 8 bits */
        *wide = info.format == KP_PIXEL_P016 && (!fmt || strcmp(fmt, "p016") == 0);
        *pitch = p > 0 ? (long)p : (long)info.width * (*wide ? 2 : 1);
        char deep[96];
        if (*wide)
            snprintf(deep, sizeof deep, "P016 (%d-bit samples, 16 bits each)", (int)info.depth);
        else if (fmt && info.depth > 8)
            snprintf(deep, sizeof deep, "%s (%d-bit samples rounded to 8)", fmt, (int)info.depth);
        printf("source \"%s\": %s: %dx%d %s, %lld frames at %d/%d frames/s, %s 4:2:0\n",
               name ? name : "?", path, (int)info.width, (int)info.height, info.codec,
               (long long)frames, (int)info.rate[0], (int)info.rate[1],
               *wide || (fmt && info.depth > 8) ? deep
               : fmt                            ? fmt
                                            : "the decoder's (NV12 from NVDEC, I420 from software)");
    }
    kp_video_reader_close(r);
    return st;
}

/* The first pipeline after a y4m, testsrc or video source must take its
 * frames: u8 [height*3/2, pitch], within the maxima of its dynamic
 * dimensions. */
static kp_status kpt_check_shapes(kp_device_t dev, const char *file, json_t *stages) {
    json_t *src = json_array_get(stages, 0), *next = json_array_get(stages, 1);
    const char *kind = json_string_value(json_object_get(src, "source"));
    const char *pipe = json_string_value(json_object_get(next, "pipeline"));
    const char *name = json_string_value(json_object_get(next, "name"));
    if (!kind) return KP_OK;
    long w = 0, h = 0, pitch = 0;
    bool wide = false;
    if (strcmp(kind, "video") == 0) KPT_CHECK(kpt_video_header(dev, src, &w, &h, &pitch, &wide));
    const char *sink = json_string_value(json_object_get(next, "sink"));
    if (wide && sink && strcmp(sink, "y4m") == 0)
        return kpt_error(KP_ERR_UNSUPPORTED,
                         "stage \"%s\": the source gives P016 frames (a stream of more than 8 "
                         "bits), which the y4m sink does not take (it writes 8-bit I420: give "
                         "the source \"format\": \"i420\" to round the samples to 8 bits; the "
                         "video sink writes P016 at 10 bits)",
                         name ? name : "?");
    if (!pipe || json_object_get(next, "inputs")) return KP_OK;
    if (strcmp(kind, "y4m") == 0) {
        const char *path = json_string_value(json_object_get(src, "path"));
        if (!path || !kpt_y4m_size(path, &w, &h)) return KP_OK; /* the flow itself names that */
    } else if (strcmp(kind, "testsrc") == 0) {
        w = (long)json_integer_value(json_object_get(src, "width"));
        h = (long)json_integer_value(json_object_get(src, "height"));
    }
    if (w <= 0 || h <= 0) return KP_OK;
    char spec[4096];
    const char *slash = strrchr(file, '/');
    if (pipe[0] != '/' && slash) snprintf(spec, sizeof spec, "%.*s/%s", (int)(slash - file), file, pipe);
    else snprintf(spec, sizeof spec, "%s", pipe);
    kp_pipeline_t p;
    if (kp_pipeline_create_from_file(dev, spec, &p) != KP_OK) return KP_OK; /* named by the flow */
    kp_port_info in;
    uint32_t dyn = 0;
    kp_status st = kp_pipeline_input_info(p, 0, &in);
    if (st == KP_OK) st = kp_pipeline_input_dynamic(p, 0, &dyn);
    long rows = h * 3 / 2, cols = pitch > 0 ? pitch : w;
    bool fits = st == KP_OK && in.desc.ndim == 2 && in.desc.dtype == KP_U8 &&
                ((dyn & 1) ? rows <= in.desc.shape[0] : rows == in.desc.shape[0]) &&
                ((dyn & 2) ? cols <= in.desc.shape[1] : cols == in.desc.shape[1]);
    char d[128];
    if (st == KP_OK && !fits)
        st = kpt_error(KP_ERR_MISMATCH, "stage \"%s\": the source gives %ldx%ld frames (u8[%ld,%ld]), "
                       "but pipeline %s takes \"%s\" as %s%s", name ? name : "?", w, h, rows, cols,
                       pipe, in.name, kp_desc_str(&in.desc, d, sizeof d),
                       dyn ? " (its dynamic dimensions at their maxima)" : "");
    kp_pipeline_destroy(p);
    return st;
}

static kp_status kpt_flow_prerun(kp_device_t dev, const char *file) {
    json_error_t err;
    json_t *root = json_load_file(file, 0, &err);
    if (!root) return KP_OK; /* the flow's own reader names the syntax error */
    json_t *stages = json_object_get(root, "stages");
    kp_status st = json_is_array(stages) ? kpt_check_sinks(stages) : KP_OK;
    if (st == KP_OK && json_is_array(stages)) st = kpt_check_shapes(dev, file, stages);
    json_decref(root);
    return st;
}

/* A flow file: made, not started; its stages, queues and streams. */
static int kpt_validate_flow(const char *file, const char *device, const char *dot) {
    kp_device_t dev;
    kp_flow_t f = NULL;
    kp_status st = kp_device_open(device, &dev);
    if (st != KP_OK) return kpt_fail("validate", st);
    st = kpt_keep_error(kp_flow_create_from_file(dev, file, &f));
    if (st == KP_OK) st = kpt_flow_prerun(dev, file);
    kp_flow_snapshot h;
    size_t n_streams = 0;
    if (st == KP_OK) st = kp_flow_health(f, &h);
    if (st == KP_OK) st = kp_flow_streams(f, NULL, 0, &n_streams);
    if (st == KP_OK) {
        printf("%s: flow of %zu stages, %zu source streams, %zu frames, on %s\n", file, h.n_stages,
               n_streams, h.frame_limit, kp_device_name(dev));
        for (size_t i = 0; i < h.n_stages; i++) {
            const kp_flow_queue_stats *q = &h.queues[i];
            printf("  %-16s on %-8s %zu thread%s", h.stages[i].name, h.stages[i].device,
                   h.stages[i].replicas, h.stages[i].replicas > 1 ? "s" : "");
            if (q->capacity)
                printf(", queue %zu (%s)", q->capacity, kp_queue_policy_str(q->policy));
            printf("\n");
        }
    }
    if (st == KP_OK && dot) st = kp_flow_write_dot(f, dot);
    if (st == KP_OK && dot) printf("graph: %s\n", dot);
    int rc = st == KP_OK ? 0 : kpt_fail_flow("validate", st, file);
    if (rc == 0) printf("OK\n");
    kp_flow_destroy(f);
    kp_device_close(dev);
    return rc;
}

/* Whether a file is a flow: its text names "kpipe_flow". */
static bool kpt_is_flow_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return strstr(buf, "\"kpipe_flow\"") != NULL;
}

/* "f32[<=16384,3]": a dynamic dimension shows its maximum after "<=". */
static const char *kpt_decl_str(const kp_tensor_desc *d, uint32_t dynamic, char *buf, size_t len) {
    size_t used = (size_t)snprintf(buf, len, "%s[", kp_dtype_name(d->dtype));
    for (int k = 0; k < d->ndim && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s%lld", k ? "," : "",
                                 dynamic >> k & 1u ? "<=" : "", (long long)d->shape[k]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}

static void kpt_ports(const char *what, const kp_port_decl *p, size_t n) {
    char d[128];
    printf("      %s:", what);
    for (size_t k = 0; k < n; k++)
        printf(" %s %s", p[k].name, kpt_decl_str(&p[k].desc, p[k].dynamic, d, sizeof d));
    printf("%s\n", n ? "" : " none");
}

/* What graph mode does with the inputs' addresses. The binding is the
 * spec's choice for inputs whose address may change under a module that
 * bakes addresses into the graph; where no connection is such, nothing is
 * copied whatever the choice, and the line says that rather than "copy". */
static kp_status kpt_print_binding(kp_pipeline_t p, const kp_pipeline_report *r) {
    size_t copied = 0;
    for (size_t i = 0; i < r->n_connections; i++) {
        kp_connection_report c;
        KPT_CHECK(kp_pipeline_connection_report(p, i, &c));
        copied += !c.zero_copy;
    }
    printf("graph cache: one graph per shape signature");
    if (r->binding == KP_INPUTS_REBIND)
        printf(" and input address set; inputs read in place (input binding rebind)\n");
    else if (copied)
        printf("; %zu module input%s copied into the pipeline's own buffer%s inside the graph, "
               "so one graph serves any input address (input binding copy)\n",
               copied, copied == 1 ? "" : "s", copied == 1 ? "" : "s");
    else
        printf("; inputs read in place, none copied (every connection above is zero-copy)\n");
    return KP_OK;
}

/* A column as wide as its longest name, `len`, and at least `min`: tables
 * stay aligned whatever the ids' lengths (a fused group's id joins its
 * members'). */
static int kpt_width(int min, size_t len) { return len > (size_t)min ? (int)len : min; }

/* The dynamic dimensions of the external inputs and outputs, and what graph
 * mode does with a new shape. */
static kp_status kpt_print_dynamic(kp_pipeline_t p, const kp_pipeline_report *r) {
    printf("dynamic dimensions:");
    size_t shown = 0;
    for (int side = 0; side < 2; side++) {
        size_t n = side ? r->n_outputs : r->n_inputs;
        for (size_t i = 0; i < n; i++) {
            kp_port_info pi;
            uint32_t dyn;
            KPT_CHECK(side ? kp_pipeline_output_info(p, i, &pi)
                           : kp_pipeline_input_info(p, i, &pi));
            KPT_CHECK(side ? kp_pipeline_output_dynamic(p, i, &dyn)
                           : kp_pipeline_input_dynamic(p, i, &dyn));
            for (int d = 0; d < pi.desc.ndim; d++)
                if (dyn >> d & 1u) {
                    printf("\n  %s %-16s dimension %d: 1 .. %lld", side ? "output" : "input ",
                           pi.name, d, (long long)pi.desc.shape[d]);
                    shown++;
                }
        }
    }
    printf("%s\n", shown ? "" : " none (every shape is fixed)");
    if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) KPT_CHECK(kpt_print_binding(p, r));
    return KP_OK;
}

static kp_status kpt_print_modules(kp_pipeline_t p, const kp_pipeline_report *r) {
    printf("modules, in execution order:\n");
    for (size_t i = 0; i < r->n_modules; i++) {
        kp_module_report m;
        KPT_CHECK(kp_pipeline_module_report(p, i, &m));
        printf("  %zu. %s (%s)\n", i, m.id, m.type);
        kpt_ports("inputs ", m.inputs, m.n_inputs);
        kpt_ports("outputs", m.outputs, m.n_outputs);
        size_t need = 0;
        KPT_CHECK(kp_pipeline_module_describe(p, i, NULL, 0, &need));
        if (need) {
            char *text = malloc(need + 1);
            if (!text) return kpt_error(KP_ERR_OUT_OF_MEMORY, "out of host memory");
            kp_status st = kp_pipeline_module_describe(p, i, text, need + 1, NULL);
            if (st == KP_OK) fputs(text, stdout);
            free(text);
            KPT_CHECK(st);
        }
    }
    printf("connections:\n");
    int wf = 24, wt = 24;
    for (size_t i = 0; i < r->n_connections; i++) {
        kp_connection_report c;
        KPT_CHECK(kp_pipeline_connection_report(p, i, &c));
        wf = kpt_width(wf, strlen(c.from));
        wt = kpt_width(wt, strlen(c.to));
    }
    for (size_t i = 0; i < r->n_connections; i++) {
        kp_connection_report c;
        KPT_CHECK(kp_pipeline_connection_report(p, i, &c));
        printf("  %-*s -> %-*s %-9s %s\n", wf, c.from, wt, c.to, c.zero_copy ? "zero-copy" : "copy",
               c.reason + (c.zero_copy ? strlen("zero-copy: ") : strlen("copy: ")));
    }
    printf("external outputs:\n");
    for (size_t i = 0; i < r->n_outputs; i++) {
        kp_port_info o;
        char d[128];
        uint32_t dyn;
        KPT_CHECK(kp_pipeline_output_info(p, i, &o));
        KPT_CHECK(kp_pipeline_output_dynamic(p, i, &dyn));
        printf("  %-24s %s\n", o.name, kpt_decl_str(&o.desc, dyn, d, sizeof d));
    }
    return KP_OK;
}

/* Fused groups, and why each connection of an elementwise module is inside
 * a group or at its edge; with `source`, each group's generated kernel. */
static kp_status kpt_print_fusion(kp_pipeline_t p, bool source) {
    kp_fusion_report f;
    kp_fusion_edge e;
    size_t n = 0, n_edges = 0;
    while (kp_pipeline_fusion_report(p, n, &f) == KP_OK) n++;
    while (kp_pipeline_fusion_edge(p, n_edges, &e) == KP_OK) n_edges++;
    kp_clear_error();
    if (!n && !n_edges) return KP_OK;
    printf("fusion: %zu group%s running as one kernel each\n", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        KPT_CHECK(kp_pipeline_fusion_report(p, i, &f));
        printf("  group %zu (module %zu):", i, f.module);
        for (size_t j = 0; j < f.n_members; j++)
            printf("%s %s (%s)", j ? " ->" : "", f.members[j], f.member_types[j]);
        printf("\n");
        if (source) printf("%s", f.source);
    }
    int wf = 24, wt = 24;
    for (size_t i = 0; i < n_edges; i++) {
        KPT_CHECK(kp_pipeline_fusion_edge(p, i, &e));
        wf = kpt_width(wf, strlen(e.from));
        wt = kpt_width(wt, strlen(e.to));
    }
    for (size_t i = 0; i < n_edges; i++) {
        KPT_CHECK(kp_pipeline_fusion_edge(p, i, &e));
        printf("  %-*s -> %-*s %s\n", wf, e.from, wt, e.to, e.fused ? "fused" : e.why);
    }
    return KP_OK;
}

/* The widest module id, at least `min` columns. */
static kp_status kpt_id_width(kp_pipeline_t p, const kp_pipeline_report *r, int min, int *out) {
    *out = min;
    for (size_t i = 0; i < r->n_modules; i++) {
        kp_module_report m;
        KPT_CHECK(kp_pipeline_module_report(p, i, &m));
        *out = kpt_width(*out, strlen(m.id));
    }
    return KP_OK;
}

static void kpt_arena_row(int w, const char *id, const char *what, size_t offset, size_t bytes) {
    if (bytes) printf("  %-*s  %-12s %12zu %12zu\n", w, id, what, offset, bytes);
}

static kp_status kpt_print_memory(kp_pipeline_t p, const kp_pipeline_report *r) {
    int w;
    KPT_CHECK(kpt_id_width(p, r, 16, &w));
    printf("arena: one device allocation of %zu bytes\n", r->arena_bytes);
    printf("  %-*s  %-12s %12s %12s\n", w, "module", "what", "offset", "bytes");
    for (size_t i = 0; i < r->n_modules; i++) {
        kp_module_report m;
        KPT_CHECK(kp_pipeline_module_report(p, i, &m));
        kpt_arena_row(w, m.id, "tensors", m.device_offset, m.req.device_bytes);
        kpt_arena_row(w, m.id, "input copies", m.copy_offset, m.copy_bytes);
        kpt_arena_row(w, m.id, "workspace", m.workspace_offset, m.req.workspace_bytes);
        kpt_arena_row(w, m.id, "static desc", m.static_desc_offset, m.req.static_desc_bytes);
        kpt_arena_row(w, m.id, "dynamic desc", m.dynamic_desc_offset, m.req.dynamic_desc_bytes);
    }
    printf("  totals: tensors %zu, workspace %zu, static descriptors %zu (uploaded once), dynamic "
           "descriptors %zu (one upload per tick)\n",
           r->tensor_bytes, r->workspace_bytes, r->static_desc_bytes, r->dynamic_desc_bytes);
    printf("  pinned host staging: %zu bytes\n", r->pinned_bytes);
    return KP_OK;
}

static kp_status kpt_print_graph(kp_pipeline_t p, const kp_pipeline_report *r) {
    size_t edges = 0;
    int w;
    KPT_CHECK(kpt_id_width(p, r, 16, &w));
    for (size_t i = 0; i < r->n_modules; i++) {
        kp_module_report m;
        KPT_CHECK(kp_pipeline_module_report(p, i, &m));
        edges += m.n_graph_deps;
    }
    printf("graph (%s mode): %zu module node%s, %zu edge%s\n",
           kp_exec_mode_str(kp_pipeline_mode(p)), r->n_modules, r->n_modules == 1 ? "" : "s", edges,
           edges == 1 ? "" : "s");
    for (size_t i = 0; i < r->n_modules; i++) {
        kp_module_report m;
        KPT_CHECK(kp_pipeline_module_report(p, i, &m));
        printf("  %-*s waits for:", w, m.id);
        for (size_t d = 0; d < m.n_graph_deps; d++) printf(" %s", m.graph_deps[d]);
        printf("%s\n", m.n_graph_deps ? "" : " nothing (starts at once)");
    }
    return KP_OK;
}

int kpt_cmd_validate(int argc, char **argv) {
    const char *spec = NULL, *device = "cpu", *dot = NULL, *v;
    int mode = KP_EXEC_FROM_SPEC, fuse = KP_FUSE_FROM_SPEC, r;
    bool source = false;
    for (int i = 1; i < argc; i++) {
        if (kpt_is_help(argv[i])) {
            fputs(kpt_validate_usage, stdout);
            return 0;
        }
        if (strncmp(argv[i], "--fuse", 6) != 0 &&
            (r = kpt_model_option(argc, argv, &i, "validate")) != 0) {
            if (r < 0) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0) return 2;
            device = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--mode", &v)) != 0) {
            if (r < 0 || !kpt_parse_mode(v, &mode)) return 2;
        } else if (strcmp(argv[i], "--source") == 0) {
            source = true;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--fuse", &v)) != 0) {
            if (r < 0) return 2;
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0) {
                fprintf(stderr, "kpipe validate: --fuse takes on or off, not \"%s\"\n", v);
                return 2;
            }
            fuse = strcmp(v, "on") == 0;
            kpt_model_fuse = v; /* a MODEL.onnx: the engine's fusion too */
        } else if ((r = kpt_opt_value(argc, argv, &i, "--dot", &v)) != 0) {
            if (r < 0) return 2;
            dot = v;
        } else if (argv[i][0] == '-' || spec) {
            fprintf(stderr, "kpipe validate: unexpected argument \"%s\"\n\n%s", argv[i],
                    kpt_validate_usage);
            return 2;
        } else {
            spec = argv[i];
        }
    }
    if (!spec) {
        fprintf(stderr, "kpipe validate: no spec given\n\n%s", kpt_validate_usage);
        return 2;
    }
    if (kpt_is_flow_file(spec)) return kpt_validate_flow(spec, device, dot);
    if (dot) {
        fprintf(stderr, "kpipe validate: --dot draws a flow's graph; %s is a pipeline spec\n",
                spec);
        return 2;
    }
    kp_device_t dev;
    kp_pipeline_t p = NULL;
    kp_pipeline_report rep;
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = mode;
    o.fuse = fuse;
    kp_status st = kp_device_open(device, &dev);
    if (st != KP_OK) return kpt_fail("validate", st);
    st = kpt_pipeline_open(dev, spec, &o, &p);
    if (st == KP_OK) st = kp_pipeline_report_get(p, &rep);
    if (st == KP_OK) {
        printf("%s: pipeline \"%s\", %s mode, planned for %s\n", spec, kp_pipeline_name(p),
               kp_exec_mode_str(kp_pipeline_mode(p)), kp_device_name(dev));
        st = kpt_print_modules(p, &rep);
    }
    if (st == KP_OK) st = kpt_print_fusion(p, source);
    if (st == KP_OK) st = kpt_print_dynamic(p, &rep);
    if (st == KP_OK) st = kpt_print_memory(p, &rep);
    if (st == KP_OK) st = kpt_print_graph(p, &rep);
    int rc = st == KP_OK ? 0 : kpt_fail("validate", st);
    if (rc == 0) printf("OK\n");
    kp_pipeline_destroy(p);
    kp_device_close(dev);
    return rc;
}
