/* kpipe pipelines: modules wired by named ports, one device arena, kernel
 * descriptors uploaded in bulk, executed module by module on a stream or as
 * one pre-built graph.
 *
 *   kp_pipeline_t p;
 *   kp_pipeline_create_from_json(dev, json_text, &p);
 *   kp_pipeline_setup(p);
 *   kp_port_info in[2] = {{"input0", a, desc}, {"input1", b, desc}};
 *   kp_port_info out[1] = {{"output"}};
 *   kp_pipeline_configure_io(p, in, 2, out, 1, s);   // out[0].data is set
 *   kp_pipeline_warmup(p, s);
 *   kp_pipeline_build_graph(p);                      // graph mode
 *   for (;;) {                                       // per tick
 *       kp_pipeline_configure_io(p, in, 2, out, 1, s);
 *       kp_pipeline_execute_graph(p, s);             // or _execute_stream
 *   }
 *
 * A pipeline is used by one thread at a time. Its calls that tick it or
 * read what ticks change (setup, configure_io, warmup, build_graph,
 * execute_*, report_get, module_describe, fusion_report) claim it for
 * their duration: one that overlaps another call on it, from a second
 * thread or from a module's callback inside the first, gets KP_ERR_STATE
 * naming the call in progress, and the pipeline is left as it was. Calls
 * in turn from different threads are fine (each claim orders it after the
 * one before); the other reports read what creation planned and may come
 * from any thread. Outputs point into the pipeline's arena, which the next
 * tick rewrites, whichever thread makes it.
 */
#ifndef KPIPE_PIPELINE_H
#define KPIPE_PIPELINE_H

#include "kpipe/graph_cache.h"
#include "kpipe/module.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kp_pipeline *kp_pipeline_t;

typedef struct kp_module_spec {
    const char *type;
    const char *id;
    const kp_param *params;
    size_t n_params;
    /* An elementwise module fused with none of its neighbours (JSON:
     * "fuse": false in the module's object). */
    bool no_fuse;
} kp_module_spec;

/* "module_a.result0" -> "module_b.input" */
typedef struct kp_connection_spec {
    const char *from;
    const char *to;
} kp_connection_spec;

/* An external input ("input0" feeds "module_a.arg0") or output ("output" is
 * "module_b.output"). */
typedef struct kp_external_spec {
    const char *name;
    const char *port;
} kp_external_spec;

/* How graph mode treats an input whose address may change per tick (an
 * external input, or a pass-through module's output) when the module it
 * feeds bakes its input addresses into the graph. */
typedef enum kp_input_binding {
    /* Copy it into a buffer of the pipeline's own, inside the graph: one
     * graph serves every address (the default). */
    KP_INPUTS_COPY = 0,
    /* Zero-copy: read external inputs in place, with one graph per input
     * address set (the graph cache's in-place calls); double or triple
     * buffering then replays without any copy, and a new address re-points
     * the least recently used variant past graph_cache.max_variants. */
    KP_INPUTS_REBIND = 1,
} kp_input_binding;

/* "copy", "rebind"; "invalid" otherwise. */
const char *kp_input_binding_str(kp_input_binding b);

typedef struct kp_pipeline_spec {
    size_t struct_size; /* sizeof(kp_pipeline_spec) */
    const char *name;
    const kp_module_spec *modules;
    size_t n_modules;
    const kp_connection_spec *connections;
    size_t n_connections;
    const kp_external_spec *inputs;
    size_t n_inputs;
    const kp_external_spec *outputs;
    size_t n_outputs;
    kp_exec_mode mode;
    kp_input_binding binding;
    /* Graph mode's graph cache: miss policy, bounds, variants. Pipelines key
     * graphs by exact shapes (capture_sizes must be empty: padding would
     * read past the caller's inputs). */
    kp_graph_cache_config graph_cache;
    /* No fusion of elementwise modules in this pipeline (JSON: "fuse": false). */
    bool no_fuse;
    /* The folder relative paths in module params are read from (a model's
     * file); NULL: the working directory. The file form sets the spec
     * file's folder. */
    const char *base_dir;
} kp_pipeline_spec;

#define KP_PIPELINE_SPEC_INIT                                                      \
    { sizeof(kp_pipeline_spec), "pipeline", NULL, 0, NULL, 0, NULL, 0, NULL, 0,    \
      KP_EXEC_GRAPH, KP_INPUTS_COPY, KP_GRAPH_CACHE_CONFIG_INIT, false, NULL }

/* Creates modules through their factories, orders them topologically,
 * checks ports, dtypes and shapes, and decides zero-copy per connection.
 * A bad spec gives KP_ERR_INVALID_ARG (or KP_ERR_NOT_FOUND for unknown
 * types and ports) with a detail naming the problem. */
kp_status kp_pipeline_create(kp_device_t dev, const kp_pipeline_spec *spec, kp_pipeline_t *out);
/* The same from the JSON form ("kpipe_spec": 1); parse errors give
 * KP_ERR_PARSE with line, column and JSON path. */
kp_status kp_pipeline_create_from_json(kp_device_t dev, const char *json_text, kp_pipeline_t *out);
/* Reads a JSON spec from a file (errors name the file). */
kp_status kp_pipeline_create_from_file(kp_device_t dev, const char *path, kp_pipeline_t *out);

/* Choices made when a spec is turned into a pipeline. */
#define KP_EXEC_FROM_SPEC (-1)
#define KP_INPUTS_FROM_SPEC (-1)
typedef struct kp_pipeline_options {
    size_t struct_size; /* sizeof(kp_pipeline_options) */
    int mode;           /* KP_EXEC_FROM_SPEC, or a kp_exec_mode that overrides the spec */
    int binding;        /* KP_INPUTS_FROM_SPEC, or a kp_input_binding */
    const kp_graph_cache_config *graph_cache; /* NULL: the spec's */
    int fuse; /* KP_FUSE_FROM_SPEC, 0 (no fusion) or 1 (the spec's modules may fuse) */
} kp_pipeline_options;
#define KP_FUSE_FROM_SPEC (-1)
#define KP_PIPELINE_OPTIONS_INIT \
    { sizeof(kp_pipeline_options), KP_EXEC_FROM_SPEC, KP_INPUTS_FROM_SPEC, NULL, KP_FUSE_FROM_SPEC }

/* The JSON and file forms with options (NULL: defaults). */
kp_status kp_pipeline_create_from_json_opts(kp_device_t dev, const char *json_text,
                                            const kp_pipeline_options *opts, kp_pipeline_t *out);
kp_status kp_pipeline_create_from_file_opts(kp_device_t dev, const char *path,
                                            const kp_pipeline_options *opts, kp_pipeline_t *out);
/* Allocates the arena and descriptor regions; hands modules their slices. */
kp_status kp_pipeline_setup(kp_pipeline_t p);
/* Per tick: binds external inputs (by name), issues input copies and the
 * bulk upload of dynamic descriptors on `s`, fills the external outputs (by
 * name). Never blocks the host and never allocates.
 * A pipeline's calls run on the device in call order, whatever streams they
 * come on: a call on another stream than the previous call waits, on the
 * device, for that stream's work so far (which stream must still exist). */
kp_status kp_pipeline_configure_io(kp_pipeline_t p, const kp_port_info *inputs, size_t n_inputs,
                                   kp_port_info *outputs, size_t n_outputs, kp_stream_t s);
/* Once, after the first configure_io: uploads static descriptors, lets
 * modules prepare (engine captures its work in graph mode). */
kp_status kp_pipeline_warmup(kp_pipeline_t p, kp_stream_t s);
/* Graph mode, after warmup: builds, instantiates and uploads the graph for
 * the shapes (and, rebinding, the input addresses) of the last configure_io.
 * Called again after a configure_io with other shapes, it prepares their
 * graph ahead of time too (what a strict miss policy needs). */
kp_status kp_pipeline_build_graph(kp_pipeline_t p);
/* Stream mode: enqueues every module in order on `s`. */
kp_status kp_pipeline_execute_stream(kp_pipeline_t p, kp_stream_t s);
/* Graph mode: one graph launch on `s`: the graph of the last configure_io's
 * shapes from the pipeline's graph cache; on a miss, the cache's policy
 * (capture, fallback to running module by module, or strict). */
kp_status kp_pipeline_execute_graph(kp_pipeline_t p, kp_stream_t s);
/* The graph cache of a graph-mode pipeline once set up (for its stats and
 * report); NULL otherwise. It belongs to the pipeline. */
kp_graph_cache_t kp_pipeline_graph_cache(kp_pipeline_t p);
/* Frees everything; freeing the arena waits for the device's pending work
 * (as cudaFree does), so uploads in flight finish first. NULL is a no-op. */
void kp_pipeline_destroy(kp_pipeline_t p);

/* --- introspection ------------------------------------------------------------- */
/* The execution mode (KP_EXEC_GRAPH for NULL). */
kp_exec_mode kp_pipeline_mode(kp_pipeline_t p);
/* The spec's name ("(null)" for NULL). */
const char *kp_pipeline_name(kp_pipeline_t p);
/* "graph" / "stream"; "invalid" for another value */
const char *kp_exec_mode_str(kp_exec_mode m);
/* The libraries in use, gathered from what is registered: "jansson 2.14,
 * CUDA runtime 13.0, driver 13.0, cuBLAS 13.1.0" into buf. */
const char *kp_library_versions(char *buf, size_t len);

typedef struct kp_pipeline_report {
    size_t n_modules, n_connections, n_inputs, n_outputs;
    size_t tensor_bytes; /* module tensors and the pipeline's input copies, in the arena */
    size_t workspace_bytes;
    size_t static_desc_bytes, dynamic_desc_bytes;
    size_t arena_bytes;  /* the one device allocation, alignment included */
    size_t pinned_bytes; /* host staging for descriptors */
    size_t graph_nodes;  /* top-level nodes of the last graph built; 0 before */
    kp_input_binding binding;
    size_t n_dynamic_dims; /* dynamic dimensions of external inputs */
} kp_pipeline_report;

typedef struct kp_module_report {
    const char *id, *type;
    size_t order;               /* position in execution order */
    size_t device_offset;       /* of its tensors in the arena */
    size_t workspace_offset;    /* of its workspace in the arena */
    size_t static_desc_offset;  /* of its static descriptor in the arena */
    size_t dynamic_desc_offset; /* of its dynamic descriptor in the arena */
    kp_mem_req req;
    size_t copy_bytes;  /* the pipeline's copies of its inputs, after its tensors */
    size_t copy_offset; /* of the first copy in the arena (0 without copies) */
    size_t n_inputs, n_outputs;
    const kp_port_decl *inputs, *outputs;
    size_t n_graph_deps; /* modules its graph node waits for */
    const char *graph_deps[KP_MAX_PORTS];
} kp_module_report;

typedef struct kp_connection_report {
    char from[2 * KP_NAME_MAX + 2]; /* "module.port", or the external input's name */
    char to[2 * KP_NAME_MAX + 2];
    bool external; /* fed by an external input */
    bool zero_copy;
    const char *reason;
} kp_connection_report;

/* Reports are available from creation: the memory layout is planned then
 * (setup only allocates it); graph_nodes is set once the graph is built. */
kp_status kp_pipeline_report_get(kp_pipeline_t p, kp_pipeline_report *out);
/* i-th module in execution order. */
kp_status kp_pipeline_module_report(kp_pipeline_t p, size_t i, kp_module_report *out);
/* The i-th module's own account (its describe slot) into buf, cut to len
 * with a NUL; *needed (optional) is the whole text's length. A module
 * without one writes "". */
kp_status kp_pipeline_module_describe(kp_pipeline_t p, size_t i, char *buf, size_t len,
                                      size_t *needed);
/* i-th external input or output: its name, and the port's dtype and shape
 * (maxima where dynamic; data is NULL). */
kp_status kp_pipeline_input_info(kp_pipeline_t p, size_t i, kp_port_info *out);
kp_status kp_pipeline_output_info(kp_pipeline_t p, size_t i, kp_port_info *out);
/* The dynamic dimensions (bit d) of the i-th external input or output. */
kp_status kp_pipeline_input_dynamic(kp_pipeline_t p, size_t i, uint32_t *out);
kp_status kp_pipeline_output_dynamic(kp_pipeline_t p, size_t i, uint32_t *out);
/* i-th input binding (connections and external inputs). */
kp_status kp_pipeline_connection_report(kp_pipeline_t p, size_t i, kp_connection_report *out);

/* --- fusion ------------------------------------------------------------------------- */
/* Modules one fused group holds at most, and the inputs it reads at most
 * (KP_MAX_PORTS). */
#define KP_FUSE_MAX_MODULES 16

/* A group of elementwise modules that runs as one kernel: the module at
 * `module` in execution order (type "fused"), its members in execution
 * order, and the CUDA C++ generated for it. */
typedef struct kp_fusion_report {
    size_t module;
    size_t n_members;
    const char *members[KP_FUSE_MAX_MODULES]; /* ids */
    const char *member_types[KP_FUSE_MAX_MODULES];
    const char *source;
    double compile_ms; /* after setup on a cuda device: NVRTC's time (0: from a cache) */
    int cached;        /* as kp_rtc_info.cached */
} kp_fusion_report;

/* The i-th fused group; KP_ERR_NOT_FOUND past the last. */
kp_status kp_pipeline_fusion_report(kp_pipeline_t p, size_t i, kp_fusion_report *out);

/* A connection that touches an elementwise module: inside a group, or a
 * group's boundary and why ("fan-out: ...", "fusion is off for ..."). */
typedef struct kp_fusion_edge {
    const char *from, *to; /* "module.port" */
    bool fused;
    const char *why;
} kp_fusion_edge;

/* The i-th such connection; KP_ERR_NOT_FOUND past the last. */
kp_status kp_pipeline_fusion_edge(kp_pipeline_t p, size_t i, kp_fusion_edge *out);

#ifdef __cplusplus
}
#endif
#endif
