/* kpipe modules: the interface a pipeline stage implements, and the registry
 * of factories that create modules by type name. A module fills three slots;
 * the rest are optional, with defaults the pipeline supplies.
 *
 *   static kp_status my_io(void *self, const kp_module_io *io) {    // per tick
 *       my *m = self;
 *       ((my_dynamic *)io->dynamic_desc)->in = io->inputs[0].data;   // its kernel reads this
 *       io->outputs[0].data = m->out;
 *       io->outputs[0].desc = m->out_desc;
 *       return KP_OK;
 *   }
 *   static kp_status my_execute(void *self, kp_stream_t s) {
 *       return kp_launch_kernel(s, &((my *)self)->launch);
 *   }
 *   static const kp_module_i my_iface = {.destroy = free, .io = my_io, .execute = my_execute,
 *                                        .memory_requirements = my_mem, .setup_memory = my_setup};
 *   static kp_status my_create(const kp_module_env *env, kp_module_def *def) {
 *       int64_t n;
 *       kp_status st = kp_param_int(env, "size", false, 0, &n);
 *       ...
 *       def->iface = &my_iface;  def->self = m;
 *       kp_port_decl_1d(&def->inputs[def->n_inputs++], "input", KP_F32, n);
 *       kp_port_decl_1d(&def->outputs[def->n_outputs++], "output", KP_F32, n);
 *       def->live_inputs = 1;   // its work reads the input's address anew each tick
 *       def->live_shapes = 1;   // ... and its shape (declared dynamic: .dynamic = 1)
 *       return KP_OK;
 *   }
 *   kp_module_register("my_module", my_create);
 *
 * Lifecycle as the pipeline drives it: create -> memory_requirements ->
 * setup_memory -> per tick io (then execute in stream mode) -> warmup
 * (once, after the first io) -> add_node_to_graph (graph mode: once per
 * graph the pipeline builds, for the shapes of the io just before).
 * examples/custom_module/ is a complete module written outside the library.
 */
#ifndef KPIPE_MODULE_H
#define KPIPE_MODULE_H

#include "kpipe/device.h"
#include "kpipe/memory.h"
#include "kpipe/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KP_MAX_PORTS 8
#define KP_NAME_MAX 64

typedef enum kp_exec_mode {
    KP_EXEC_GRAPH = 0,  /* one pre-built graph launched per tick (default) */
    KP_EXEC_STREAM = 1, /* module by module on a stream */
} kp_exec_mode;

/* A tensor bound to a named port: device pointer plus descriptor. */
typedef struct kp_port_info {
    const char *name;
    void *data;
    kp_tensor_desc desc;
} kp_port_info;

/* A tensor as a port binding: `data` is its first element, the descriptor
 * its shape and strides with offset 0. */
void kp_port_from_tensor(kp_port_info *out, const char *name, kp_tensor_t t);

/* How the bytes of a 4:2:0 picture are laid out, as u8 [height*3/2,
 * pitch] (pitch: bytes per luma row, even, at least the width's samples):
 * `height` rows of luma, then NV12's height/2 rows of interleaved U,V, or
 * I420's U then V planes of height/2 rows of pitch/2 bytes. P016 is NV12
 * with 16-bit samples (little-endian, the value in the high bits: a 10-bit
 * sample v is v << 6), its pitch at least twice the width: how kpipe gives
 * streams of more than 8 bits (HEVC Main10). A video frame says its own
 * (kpipe/video.h); a port that holds pictures says the one it takes or
 * makes (kp_port_decl.format). */
typedef enum kp_pixel_format {
    KP_PIXEL_NONE = 0, /* not a picture, or not said */
    KP_PIXEL_I420 = 1, /* planar Y, U, V (software decode, y4m) */
    KP_PIXEL_NV12 = 2, /* Y, then interleaved UV (NVDEC) */
    KP_PIXEL_P016 = 3, /* NV12 of 16-bit samples (streams of 9 to 16 bits) */
} kp_pixel_format;
/* "I420", "NV12", "P016"; "none" for KP_PIXEL_NONE; "unknown" otherwise. */
const char *kp_pixel_format_name(kp_pixel_format f);
/* Bytes of one sample: 2 for P016, else 1. */
int kp_pixel_format_sample_bytes(kp_pixel_format f);

/* A port as a module declares it. A dynamic dimension (bit d of `dynamic`)
 * takes any size from 1 to desc.shape[d] per tick; the arena is planned for
 * that maximum, and the tick's actual shapes flow through the io calls. */
typedef struct kp_port_decl {
    char name[KP_NAME_MAX];
    kp_tensor_desc desc; /* dtype and shape (maxima where dynamic); contiguous, offset 0 */
    uint32_t dynamic;    /* bit d: dimension d is dynamic */
    /* A port of pictures (u8, each picture height*3/2 rows of pitch
     * bytes) says their layout: a flow refuses a video frame of the other
     * layout at the input it feeds, and labels the frames an output makes
     * with it. KP_PIXEL_NONE: not pictures, or not said. */
    kp_pixel_format format;
} kp_port_decl;

/* Fills a 1-D contiguous port declaration (fixed size). */
kp_status kp_port_decl_1d(kp_port_decl *p, const char *name, kp_dtype dt, int64_t n);

/* What a module needs from the pipeline's memory. */
typedef struct kp_mem_req {
    size_t device_bytes;       /* tensors (buffers the module owns) */
    size_t workspace_bytes;    /* scratch for vendor libraries */
    size_t static_desc_bytes;  /* parameters fixed after setup, uploaded once at warmup */
    size_t dynamic_desc_bytes; /* parameters rewritten each tick, uploaded in one bulk copy */
} kp_mem_req;

/* The module's part of the pipeline arena. The device addresses are fixed for
 * the pipeline's life; static_host stays valid too. The host staging area for
 * dynamic descriptors changes per tick and comes with each io call. */
typedef struct kp_mem_slice {
    void *device;
    size_t device_bytes;
    void *workspace;
    size_t workspace_bytes;
    void *static_host;
    void *static_dev;
    size_t static_bytes;
    void *dynamic_dev;
    size_t dynamic_bytes;
} kp_mem_slice;

/* One tick's binding of a module, as its io slot receives it. */
typedef struct kp_module_io {
    kp_stream_t stream;         /* the tick's stream, for stream-ordered prework */
    const kp_port_info *inputs; /* addresses and descriptors, in declaration order */
    size_t n_inputs;
    kp_port_info *outputs; /* the module sets data and desc of each */
    size_t n_outputs;
    /* Host staging for the module's whole dynamic descriptor (its
     * dynamic_desc_bytes; NULL without one). It holds an older tick's bytes:
     * write all of it. The pipeline uploads every module's in one copy, and
     * none at all when nothing changed. */
    void *dynamic_desc;
    /* Reserved, NULL: graph mode keeps one executable graph per shape
     * signature, so a module's node takes per-tick changes through its
     * dynamic descriptor, never through node updates. */
    kp_graph_exec_t graph;
} kp_module_io;

/* The module vtable; `self` is the module's own state. */
typedef struct kp_module_i {
    /* Required. Releases self and everything it owns. */
    void (*destroy)(void *self);
    /* Required. Per tick, in execution order: binds the inputs, writes the
     * dynamic descriptor, fills the outputs. Never blocks or allocates. */
    kp_status (*io)(void *self, const kp_module_io *io);
    /* Required. Enqueues the module's work for the last io's inputs: each
     * tick in stream mode; in graph mode, captured once unless
     * add_node_to_graph is given. */
    kp_status (*execute)(void *self, kp_stream_t s);
    /* Optional: what the module needs from the arena. Default: nothing. */
    kp_status (*memory_requirements)(void *self, kp_mem_req *out);
    /* Optional: hands over the module's slice (write the static descriptor
     * host-side here). Default: nothing. */
    kp_status (*setup_memory)(void *self, const kp_mem_slice *slice);
    /* Optional: one-time preparation on a stream, after the first io. */
    kp_status (*warmup)(void *self, kp_stream_t s);
    /* Optional, graph mode: adds the module's node(s) after `deps`; *out is
     * the node dependents wait for. Default: execute() on a stream, captured
     * into a child graph. */
    kp_status (*add_node_to_graph)(void *self, kp_graph_t g, const kp_graph_node_t *deps,
                                   size_t n_deps, kp_graph_node_t *out);
    /* Optional: what `kpipe validate` shows of the module beyond its ports
     * (a model's nodes and memory plan), as text into buf (snprintf's
     * rules); returns the length the whole text needs. */
    size_t (*describe)(void *self, char *buf, size_t len);
} kp_module_i;

/* A module parameter as text ("16384", "true", "name"). */
typedef struct kp_param {
    const char *key;
    const char *value;
} kp_param;

/* What a factory is given. */
typedef struct kp_module_env {
    kp_device_t dev;
    kp_exec_mode mode;
    const char *id;
    const kp_param *params;
    size_t n_params;
    /* The pipeline's record of the parameters the factory looks up; a
     * parameter it never looks up is refused as unknown. NULL: no record. */
    struct kp_param_use *use;
    /* The folder that relative paths in params are read from (the spec
     * file's, for a spec read from a file); NULL: the working directory. */
    const char *base_dir;
} kp_module_env;

/* --- elementwise modules ---------------------------------------------------------
 * A module may declare that it is elementwise: its one output's element i
 * is a pure function of element i of each input, plus scalar parameters,
 * every port of the same shape. The pipeline then runs it itself, and
 * fuses connected elementwise modules into one kernel (kpipe validate
 * shows the groups): on cuda, generated from the modules' CUDA bodies and
 * compiled at setup with NVRTC; on cpu, one loop over cache-sized blocks
 * calling each module's host function. A module with its own execute runs
 * it when it is not fused with another; one without runs alone as a
 * generated kernel.
 *
 *   static void clamp01_host(const void *params, const void *const *in, void *out, size_t n) {
 *       const float *x = in[0];
 *       for (size_t i = 0; i < n; i++) ((float *)out)[i] = fminf(fmaxf(x[i], 0.0f), 1.0f);
 *   }
 *   static const kp_elementwise clamp01 = {.cuda = "y = fminf(fmaxf(x, 0.0f), 1.0f);",
 *                                          .host = clamp01_host};
 *   def->elementwise = &clamp01;       // ports "x" -> "y", declared as usual
 *
 * The CUDA body is statements over the ports and parameters by name: each
 * input a const value, the output a variable it assigns, each parameter a
 * const of its dtype. Values are computed in float for f32 and f16, in int
 * for i32 and u8; the output is stored in its port's dtype (f16 rounded to
 * nearest even, u8 modulo 256). The host function computes the same, bit
 * for bit, over n elements of contiguous inputs (in[k] in port order) into
 * `out`, reading `params`. Generated code is compiled without contracting a
 * multiply and an add, so fused and unfused results agree exactly. */
#define KP_ELEMENTWISE_MAX_PARAMS 8
typedef void (*kp_elementwise_fn)(const void *params, const void *const *in, void *out,
                                  size_t n);
/* A parameter: its name in the body, its dtype (f32, i32, i64 or u8)
 * and where it lives in the parameter block. */
typedef struct kp_elementwise_param {
    const char *name;
    kp_dtype dtype;
    size_t offset;
} kp_elementwise_param;
typedef struct kp_elementwise {
    const char *cuda;      /* the body (at most 4096 bytes) */
    kp_elementwise_fn host; /* the same on the host */
    const void *params;    /* the parameter block, alive as long as the module */
    size_t params_bytes;   /* at most 256 */
    size_t n_params;
    kp_elementwise_param param[KP_ELEMENTWISE_MAX_PARAMS];
} kp_elementwise;

/* What a factory fills. */
typedef struct kp_module_def {
    const kp_module_i *iface;
    void *self;
    size_t n_inputs, n_outputs;
    kp_port_decl inputs[KP_MAX_PORTS];
    kp_port_decl outputs[KP_MAX_PORTS];
    /* Inputs (bit i: input i) whose address the module's work takes anew
     * every tick in graph mode too, because it reads it from the dynamic
     * descriptor: they are read in place. Any other input of a graph-mode
     * module has its address baked into the graph, so when its upstream's
     * address may change (external inputs, dynamic outputs) the pipeline
     * copies it into a buffer of its own each tick, inside the graph. Stream
     * mode reads every input in place. */
    uint32_t live_inputs;
    /* Outputs (bit i) whose address may change per tick (a pass-through). */
    uint32_t dynamic_outputs;
    /* Inputs (bit i) whose shape the module's work reads anew every tick in
     * graph mode too (from its dynamic descriptor; its grid is sized for the
     * maximum): a shape change there needs no new graph. Any other input's
     * shape is part of the key of the pipeline's graphs. */
    uint32_t live_shapes;
    /* Elementwise work (NULL: none), alive as long as the module; io and
     * execute may then be NULL. */
    const kp_elementwise *elementwise;
} kp_module_def;

typedef kp_status (*kp_module_create_fn)(const kp_module_env *env, kp_module_def *def);

/* Registers a factory under `type` (copied). The built-in types (engine,
 * relu) register themselves this way when the library loads.
 * KP_ERR_INVALID_ARG if the type is taken. Thread-safe. */
kp_status kp_module_register(const char *type, kp_module_create_fn create);
/* Number of registered types and the i-th name, for listings. */
size_t kp_module_type_count(void);
const char *kp_module_type_name(size_t i);

/* Parameter lookup for factories. A missing key gives `def` when `def_ok`;
 * bad text gives KP_ERR_INVALID_ARG naming module, key and value. Integers
 * are decimal digits with an optional '-': no spaces, '+', point or
 * exponent. Every parameter of a spec must be looked up by its factory. */
kp_status kp_param_int(const kp_module_env *env, const char *key, bool def_ok, int64_t def,
                       int64_t *out);
/* A finite decimal number ("0.5", "-2", "1e-3"); no spaces, '+', nan or inf. */
kp_status kp_param_double(const kp_module_env *env, const char *key, bool def_ok, double def,
                          double *out);
kp_status kp_param_str(const kp_module_env *env, const char *key, const char *def,
                       const char **out);
/* A size: "16384" is fixed; "max:16384" (the JSON form {"max": 16384}) is
 * dynamic up to 16384. Sizes outside lo .. hi are refused, named. */
kp_status kp_param_dim(const kp_module_env *env, const char *key, int64_t lo, int64_t hi,
                       int64_t *size, bool *dynamic);

#ifdef __cplusplus
}
#endif
#endif
