/* The ONNX engine's private interface: the model as read from the file
 * (reader/), the graph the engine runs (graph.c, infer.c, plan.c,
 * engine.c), and the operator interface every operator family implements
 * (ops/: ops_*.c on the host, ops_*.cu on CUDA).
 *
 * The files of src/onnx/, one layer in three folders:
 *   ./                       the engine: this header, graph.c, infer.c, fuse.c, half.c, plan.c,
 *                            engine.c, engine_report.c, ops.c (the operator
 *                            registry and launch), module.c (the `onnx` module)
 *   reader/                  the file: reader_msg.c (the protobuf wire cursor, tensor
 *                            messages), reader.c (the model's messages, files,
 *                            external data), model.c (element types, opsets,
 *                            freeing); reader-impl.h between them
 *   ops/                     the operators: kernels-impl.h (what every kernel's
 *                            host and cuda forms share), then a folder per family,
 *                            each with its table, its kernels' text (*-kernels.h)
 *                            and its cuda forms (.cu): elementwise/ (with
 *                            binary), movement/ (with slice and shape), nn/ (with
 *                            conv, gemm, and the cuBLAS and cuDNN handles),
 *                            reduce/
 * Every .c file includes this header, directly or through its folder's
 * (a .cu file only its family's kernel header, which C++ reads too); an
 * operator family's files include their own family's headers besides, and
 * call no other family's functions.
 *
 * The layer sits above the pipeline (it sees public headers up to
 * pipeline.h plus core's helpers) and below modules: the `onnx` module
 * (module.c) is its one user inside the library.
 *
 * How a model runs:
 *   read (reader/)           bytes -> kp__ox_model: messages, initializers, opsets
 *   build (graph.c)          kp__ox_model -> kp__ox_graph: values by index, nodes in
 *                            topological order, every node's operator found (all
 *                            missing ones listed), constants marked
 *   infer (infer.c)          input shapes -> every value's dtype and shape; nodes whose
 *                            inputs are all constant run on the host now (folding)
 *   fuse (fuse.c)            once: a convolution's normalization, residual Add and
 *                            activation join its node
 *   half (half.c)            once, with "precision": "fp16": the convolutions and the
 *                            values between them go fp16, channels last
 *   plan (plan.c)            at the maximum shapes: an offset for every value the
 *                            device needs, intermediates sharing bytes by liveness
 *   prepare (engine.c)       per new shape: infer again, operators' prepare slots
 *                            (descriptors, algorithms), constants uploaded
 *   run (engine.c)           per tick: every node's run slot, enqueued on the stream
 */
#ifndef KPIPE_ONNX_IMPL_H
#define KPIPE_ONNX_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kpipe/device.h"
#include "kpipe/tensor.h"
#include "../core/core-impl.h"
#include "ops/kernels-impl.h"

/* ---------------------------------------------------------------------------------
 * The model as the file has it (reader/). Strings are NUL-terminated
 * copies (a string holding a NUL is refused by the reader). Every array is
 * owned by the model; kp__ox_model_free releases all of it.
 * --------------------------------------------------------------------------------- */

/* TensorProto.DataType numbers (onnx.proto). */
enum {
    KP__OX_UNDEFINED = 0,
    KP__OX_FLOAT = 1,
    KP__OX_UINT8 = 2,
    KP__OX_INT8 = 3,
    KP__OX_UINT16 = 4,
    KP__OX_INT16 = 5,
    KP__OX_INT32 = 6,
    KP__OX_INT64 = 7,
    KP__OX_STRING = 8,
    KP__OX_BOOL = 9,
    KP__OX_FLOAT16 = 10,
    KP__OX_DOUBLE = 11,
    KP__OX_UINT32 = 12,
    KP__OX_UINT64 = 13,
    KP__OX_BFLOAT16 = 16,
};

/* kpipe's dtype for an ONNX element type: false for one kpipe does not
 * hold (double, string, complex, uint16/32, the 8-bit floats). BOOL is held
 * as U8 (0 or 1). */
bool kp__ox_dtype(int onnx_type, kp_dtype *out);
/* "FLOAT", "INT64", ..., "type 99": the ONNX name, for messages. */
const char *kp__ox_type_name(int onnx_type);

/* A TensorProto: an initializer, a Constant's value, a test-data file. */
typedef struct kp__ox_tensor {
    char *name;       /* "" when the message has none */
    int onnx_type;    /* as in the file */
    bool dtype_ok;    /* kp__ox_dtype(onnx_type) holds; data is NULL otherwise */
    kp_dtype dtype;   /* when dtype_ok */
    int ndim;         /* 0 .. KP_MAX_DIMS (a larger rank is a read error) */
    int64_t shape[KP_MAX_DIMS];
    int64_t numel;    /* product of shape; 1 for a scalar */
    void *data;       /* numel * kp_dtype_size(dtype) bytes, host, little-endian;
                         from raw_data, the typed fields or external data; may be
                         NULL when numel is 0 */
    size_t bytes;
} kp__ox_tensor;

/* AttributeProto.AttributeType numbers. */
enum {
    KP__OX_ATTR_UNDEFINED = 0,
    KP__OX_ATTR_FLOAT = 1,
    KP__OX_ATTR_INT = 2,
    KP__OX_ATTR_STRING = 3,
    KP__OX_ATTR_TENSOR = 4,
    KP__OX_ATTR_GRAPH = 5,
    KP__OX_ATTR_FLOATS = 6,
    KP__OX_ATTR_INTS = 7,
    KP__OX_ATTR_STRINGS = 8,
    KP__OX_ATTR_TENSORS = 9,
    KP__OX_ATTR_GRAPHS = 10,
};

typedef struct kp__ox_attr {
    char *name;
    int type;         /* KP__OX_ATTR_*: from the `type` field, or inferred from
                         the one value field present when an old file omits it */
    float f;          /* FLOAT */
    int64_t i;        /* INT */
    char *s;          /* STRING (bytes + NUL; s_len excludes the NUL) */
    size_t s_len;
    float *floats;    /* FLOATS, n of them */
    int64_t *ints;    /* INTS, n of them */
    char **strings;   /* STRINGS, n of them */
    size_t n;
    kp__ox_tensor *t; /* TENSOR (owned) */
    /* GRAPH, GRAPHS and TENSORS are skipped by the reader: their type is
     * kept, so an operator that needs one refuses by name. */
} kp__ox_attr;

typedef struct kp__ox_node {
    char *name;    /* "" when the file has none */
    char *op_type;
    char *domain;  /* "" is ai.onnx */
    size_t n_inputs, n_outputs;
    char **inputs; /* "" marks an omitted optional input or output */
    char **outputs;
    size_t n_attrs;
    kp__ox_attr *attrs;
} kp__ox_node;

typedef struct kp__ox_dim {
    int64_t value; /* >= 0 when known, -1 when symbolic or absent */
    char *param;   /* dim_param ("batch"), or NULL */
} kp__ox_dim;

/* A ValueInfoProto: a graph input, output or value_info entry. */
typedef struct kp__ox_value_info {
    char *name;
    int onnx_type;  /* 0 when the type is absent */
    bool has_shape; /* the type has a shape field (rank known) */
    int ndim;
    kp__ox_dim dims[KP_MAX_DIMS];
} kp__ox_value_info;

typedef struct kp__ox_opset {
    char *domain; /* "" and "ai.onnx" are the same domain */
    int64_t version;
} kp__ox_opset;

typedef struct kp__ox_model {
    uint64_t digest;   /* of the file's bytes (the algorithm cache's name for it) */
    int64_t ir_version;
    char *producer;    /* producer_name, "" when absent */
    char *graph_name;
    size_t n_opsets;
    kp__ox_opset *opsets;
    size_t n_nodes;
    kp__ox_node *nodes;
    size_t n_inits;
    kp__ox_tensor *inits;
    size_t n_inputs, n_outputs, n_value_info;
    kp__ox_value_info *inputs; /* may include initializers (IR < 4 files list them) */
    kp__ox_value_info *outputs;
    kp__ox_value_info *value_info;
} kp__ox_model;

/* Largest model file: 2 GiB (protobuf's own limit). */
#define KP__OX_MAX_FILE ((size_t)2 << 30)

/* Reads an ONNX model file. External data (TensorProto.data_location =
 * EXTERNAL) is read from files relative to the model's folder; a location
 * that is absolute, climbs out with "..", or is a symbolic link is refused,
 * and so is a file shorter than offset + length says. Every fault is
 * KP_ERR_PARSE (malformed, truncated: naming the message and field, and the
 * byte offset), KP_ERR_IO (files), KP_ERR_UNSUPPORTED (a rank over
 * KP_MAX_DIMS), KP_ERR_OUT_OF_MEMORY; nothing is left allocated on error. */
kp_status kp__ox_read_file(const char *path, kp__ox_model **out);
/* The same from memory. `dir` is the folder external data is relative to;
 * NULL refuses external data. */
kp_status kp__ox_read_buffer(const void *buf, size_t len, const char *dir, kp__ox_model **out);
/* Reads one serialized TensorProto (ONNX's test data: input_0.pb). */
kp_status kp__ox_read_tensor(const void *buf, size_t len, kp__ox_tensor *out);
/* Frees what a tensor owns (not the struct); NULL is a no-op. */
void kp__ox_tensor_clear(kp__ox_tensor *t);
void kp__ox_model_free(kp__ox_model *m);

/* The model's opset for a domain ("" = ai.onnx); 0 when it imports none. */
int64_t kp__ox_model_opset(const kp__ox_model *m, const char *domain);

/* ---------------------------------------------------------------------------------
 * The graph the engine runs (graph.c).
 * --------------------------------------------------------------------------------- */

typedef enum kp__ox_value_kind {
    KP__OX_V_INPUT = 0,  /* a graph input: bound each tick */
    KP__OX_V_INIT,       /* an initializer or a Constant's output: host data at build */
    KP__OX_V_INNER,      /* produced by a node */
} kp__ox_value_kind;

/* One value of the graph: its current dtype and shape (set by infer), its
 * host data when constant, and its device address when bound. */
typedef struct kp__ox_value {
    const char *name;    /* the model's string */
    kp__ox_value_kind kind;
    bool is_const;       /* known at prepare: an initializer, or folded */
    bool is_output;      /* a graph output */
    bool is_bool;        /* ONNX BOOL held as U8 */
    bool device_use;     /* some node that runs per tick reads it */
    kp_dtype dtype;
    int ndim;
    int64_t shape[KP_MAX_DIMS];
    int64_t numel;
    void *host;          /* constants: numel elements on the host (owned by the graph
                            for folded values, borrowed from the model for
                            initializers) */
    void *data;          /* where the run reads and writes it: the device address
                            (a host address on cpu devices); NULL until bound */
    int producer;        /* node index, -1 for inputs and initializers */
    int last_use;        /* the last node (in run order) that reads it; n_nodes for outputs */
    size_t max_bytes;    /* bytes at the maximum shapes (plan.c) */
    size_t offset;       /* plan: offset in the engine's region */
    bool planned;        /* it has an offset */
    bool half;           /* "precision": "fp16" (half.c): the device holds it as f16,
                            channels last (NHWC; a weight KRSC), though dtype and
                            shape stay the model's f32 NCHW */
    int64_t half_cin;    /* a weight held in fp16 with its input channels padded
                            to this many (half.c); 0: as its shape says */
} kp__ox_value;

struct kp__ox_op;

/* One node, in run order. */
typedef struct kp__ox_gnode {
    const kp__ox_node *src;   /* the file's node: name, attributes */
    const struct kp__ox_op *op;
    int opset;                /* the model's opset for the node's domain */
    size_t n_in, n_out;
    int *in, *out;            /* value indices; -1 for an omitted optional */
    bool folded;              /* every input constant: ran at prepare, on the host */
    /* A convolution with what followed it fused in (fuse.c): a
     * normalization folded into its weights (fused_bn), input 3 added to
     * its output (fused_add), and the activation `act` (KP__OX_ACT_*,
     * with act_a and act_b; PRelu's slope is input 4) applied last. */
    bool fused_bn, fused_add;
    int act;
    float act_a, act_b;
    /* "precision": "fp16" (half.c): the convolution runs in fp16 with fp32
     * accumulation on channels-last tensors */
    bool half;
    void *state;              /* the operator's prepared state (op->prepare), or NULL */
} kp__ox_gnode;

typedef struct kp__ox_graph {
    kp__ox_model *model;      /* owned */
    size_t n_values;
    kp__ox_value *values;
    size_t n_nodes;
    kp__ox_gnode *nodes;      /* run order */
    size_t n_inputs, n_outputs;
    int *inputs;              /* graph inputs that are not initializers */
    int *outputs;
    bool no_fusion;           /* run every node as the file has it (fuse.c) */
    bool tf32;                /* "precision": "tf32": cuda's convolutions and GEMMs may
                                 round their inputs to TF32 on tensor cores */
    bool tune;                /* "tune": cuDNN's algorithms measured at prepare */
    bool fp16;                /* "precision": "fp16": convolutions in fp16 on channels-last
                                 tensors, GEMMs as with tf32 (half.c) */
    char *algo_dir;           /* the algorithm cache's folder (owned); NULL: none */
} kp__ox_graph;

/* ---------------------------------------------------------------------------------
 * Operators. One table per family (ops_*.c), each ending with an entry
 * whose name is NULL; ops.c joins them.
 * --------------------------------------------------------------------------------- */

/* Where an operator's work runs. */
typedef struct kp__ox_cuda kp__ox_cuda; /* cuda handles (ops_cuda.c), opaque to host code */

typedef struct kp__ox_exec {
    kp_stream_t stream;      /* the tick's stream; NULL when folding */
    kp_device_t dev;
    bool host;               /* the host forms run (cpu device, or folding) */
    bool fold;               /* folding: run now, on the host, synchronously */
    kp__ox_cuda *cuda;       /* cuda devices: library handles; NULL on the host */
    void *workspace;         /* scratch in the engine's region, device side */
    size_t workspace_bytes;
} kp__ox_exec;

typedef struct kp__ox_op {
    const char *name; /* op_type in ai.onnx */
    int since;        /* the first opset this entry serves (1: every version) */
    /* Required. Sets every output's dtype and shape (kp__ox_set_out) from the
     * inputs' dtypes, shapes and, where known (value->host), constant data.
     * Refuses what it does not support by name: an attribute value, a dtype,
     * a rank. Runs at build (maximum shapes) and on every new shape. */
    kp_status (*infer)(kp__ox_graph *g, kp__ox_gnode *n);
    /* Required. Enqueues the node's work for the values' current shapes and
     * addresses (x->fold: runs it now on host memory). Never allocates;
     * reads state made by prepare. */
    kp_status (*run)(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n);
    /* Optional: after infer, once per new shape on the run's device (never
     * when folding): makes n->state (descriptors, algorithm choice) and may
     * raise *workspace to what run will need. May allocate host memory. */
    kp_status (*prepare)(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                         size_t *workspace);
    /* Optional: frees n->state. */
    void (*release)(kp__ox_gnode *n);
    /* Optional: true when the operator only reads input i's shape or its
     * constant value on the host (Shape's input, Reshape's shape): such an
     * input needs no device copy and does not keep a producer alive. */
    bool (*host_input)(int i);
    /* Output 0 is input 0's bytes under a new shape (Reshape, Flatten,
     * Squeeze, Unsqueeze, Identity): the engine points it there and runs
     * nothing; `run` is then only used when folding. */
    bool view;
    /* Optional: how the node runs for the current shapes, for validate
     * ("cuDNN, implicit GEMM, 4 MiB workspace"), into buf. */
    void (*describe)(const kp__ox_gnode *n, char *buf, size_t len);
} kp__ox_op;

/* The operator for op_type at `opset` in ai.onnx; NULL when kpipe has none. */
const kp__ox_op *kp__ox_op_find(const char *op_type, int opset);
/* Supported operator names, for listings: the i-th, NULL past the end. */
const char *kp__ox_op_name(size_t i);

/* Family tables (ops_*.c). */
extern const kp__ox_op kp__ox_ops_elementwise[]; /* unary, binary, Where, Cast, Clip, ... */
extern const kp__ox_op kp__ox_ops_movement[];    /* Transpose, Concat, Split, Slice, Gather, ... */
extern const kp__ox_op kp__ox_ops_shape[];       /* Shape, Reshape, Constant, Range, ... */
extern const kp__ox_op kp__ox_ops_nn[];          /* Conv, Gemm, MatMul, pools, BatchNorm, Resize */
extern const kp__ox_op kp__ox_ops_reduce[];      /* ReduceMean, Softmax, LayerNormalization */

/* cuda devices (ops_cuda.c): the handles operators share, one set per
 * engine. bind sets the stream and workspace on them, touching the
 * libraries only when either changed since the last bind. */
/* The algorithm cache (algo_cache.c): convolution choices by key, for one
 * model on one device, kept in a file the next run reads. The key and the
 * device text are one line of printable ASCII without a tab, shorter than
 * KP__OX_ALGO_KEY. create makes an empty cache (`dir` NULL or "": in memory
 * only); load reads its file where there is one, and ignores it whole
 * (logged at INFO) where its header names another model or device or it
 * does not parse; parse reads a file's text (KP_ERR_PARSE naming the line,
 * the cache unchanged). save writes the file when an entry changed. */
#define KP__OX_ALGO_KEY 192
typedef struct kp__ox_algo {
    int algo, math; /* cuDNN's algorithm and math type */
    uint64_t ws;    /* workspace bytes */
} kp__ox_algo;
typedef struct kp__ox_algo_cache kp__ox_algo_cache;
kp_status kp__ox_algo_cache_create(const char *dir, uint64_t model, const char *device,
                                   kp__ox_algo_cache **out);
void kp__ox_algo_cache_load(kp__ox_algo_cache *c);
kp_status kp__ox_algo_cache_parse(kp__ox_algo_cache *c, const char *text, size_t len);
bool kp__ox_algo_cache_get(kp__ox_algo_cache *c, const char *key, kp__ox_algo *out);
kp_status kp__ox_algo_cache_put(kp__ox_algo_cache *c, const char *key, const kp__ox_algo *a);
void kp__ox_algo_cache_save(kp__ox_algo_cache *c);
/* The file (NULL for none); the shapes whose choice came from it, and
 * those chosen in this run (each shape counted once). */
void kp__ox_algo_cache_stats(const kp__ox_algo_cache *c, const char **path, size_t *found,
                             size_t *chosen);
void kp__ox_algo_cache_free(kp__ox_algo_cache *c);

#ifdef KP_HAVE_CUDA
/* `algos` (may be NULL) is the engine's algorithm cache, which the
 * convolutions read and fill; the engine keeps owning it. */
kp_status kp__ox_cuda_create(kp_device_t dev, bool tf32, bool tune, kp__ox_algo_cache *algos,
                             kp__ox_cuda **out);
/* "NVIDIA H100 80GB HBM3, sm_90, cuDNN 91900": what the choices depend on
 * besides the shapes; KP_ERR_UNSUPPORTED without cuDNN. */
kp_status kp__ox_cuda_device_key(kp_device_t dev, char *buf, size_t len);
void kp__ox_cuda_destroy(kp__ox_cuda *c);
kp_status kp__ox_cuda_bind(kp__ox_cuda *c, kp_stream_t s, void *workspace, size_t bytes);
#endif

/* --- helpers for operators (graph.c) ---------------------------------------- */
/* Input i's value, NULL when omitted or past the node's inputs. */
kp__ox_value *kp__ox_in(kp__ox_graph *g, const kp__ox_gnode *n, size_t i);
/* Output i's value, NULL when omitted. */
kp__ox_value *kp__ox_out(kp__ox_graph *g, const kp__ox_gnode *n, size_t i);
/* Sets an output's dtype and shape (numel too); checks rank and size. */
kp_status kp__ox_set_out(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, kp_dtype dt, int ndim,
                         const int64_t *shape);
/* Attribute lookup; NULL when absent. */
const kp__ox_attr *kp__ox_attr_find(const kp__ox_gnode *n, const char *name);
/* Typed getters: the default when absent; KP_ERR_PARSE naming node and
 * attribute when present with another type. */
kp_status kp__ox_attr_int(const kp__ox_gnode *n, const char *name, int64_t def, int64_t *out);
kp_status kp__ox_attr_float(const kp__ox_gnode *n, const char *name, float def, float *out);
/* A string attribute; `def` when absent. */
kp_status kp__ox_attr_str(const kp__ox_gnode *n, const char *name, const char *def,
                          const char **out);
/* An INTS attribute: *vals and *count (NULL, 0 when absent). */
kp_status kp__ox_attr_ints(const kp__ox_gnode *n, const char *name, const int64_t **vals,
                           size_t *count);
kp_status kp__ox_attr_floats(const kp__ox_gnode *n, const char *name, const float **vals,
                             size_t *count);
/* A constant input read as int64 values (from i64 or i32 data): *vals points
 * into the value's host data or `buf` (at most `cap`); KP_ERR_UNSUPPORTED
 * naming the node when the input is not constant. */
kp_status kp__ox_const_ints(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, int64_t *buf,
                            size_t cap, const int64_t **vals, size_t *count);
/* An error naming the node: "Conv node 'conv1': <detail>". */
kp_status kp__ox_node_error(const kp__ox_gnode *n, kp_status st, const char *fmt, ...)
    KP__PRINTF(3, 4);
/* Normalises a possibly negative axis against rank; error names the node. */
kp_status kp__ox_axis(const kp__ox_gnode *n, int64_t axis, int rank, int *out);
/* Broadcasts shapes numpy-style into out (rank = max); KP_ERR_MISMATCH
 * naming the node when they do not broadcast. */
kp_status kp__ox_broadcast(const kp__ox_gnode *n, int na, const int64_t *a, int nb,
                           const int64_t *b, int *nout, int64_t *out);

/* Launches `k` over `n_items` items (blocks of up to 65536 items on the
 * host, 256 threads x enough blocks on cuda; the kernel's host form uses
 * kp_host_block_span over n_items, its cuda form a grid-stride loop). When
 * x->fold the host form runs now. n_items 0 launches nothing. */
kp_status kp__ox_launch(const kp__ox_exec *x, const kp_kernel *k, uint64_t n_items,
                        const void *params);
/* The same with the geometry given: `grid`/`block`/`shared` for the cuda
 * form; on the host the grid is `host_blocks` blocks of one thread (the cpu
 * backend shares a launch's blocks among its workers). */
kp_status kp__ox_launch_geom(const kp__ox_exec *x, const kp_kernel *k, kp_dim3 grid,
                             kp_dim3 block, size_t shared, uint64_t host_blocks,
                             const void *params);

/* ---------------------------------------------------------------------------------
 * Building and running (graph.c, infer.c, plan.c, engine.c).
 * --------------------------------------------------------------------------------- */

/* Builds the graph of a model it takes over (freed on error too): every
 * value named once (a duplicate, or a name nothing defines, is
 * KP_ERR_PARSE naming it), nodes in topological order (a cycle names a node
 * on it), every node's operator found. Unsupported nodes are listed all at
 * once in one KP_ERR_UNSUPPORTED: name, op type, domain and opset each.
 * An unsupported dtype of an initializer or input is KP_ERR_UNSUPPORTED
 * naming the value and its ONNX type. */
kp_status kp__ox_graph_build(kp__ox_model *m, kp__ox_graph **out);
void kp__ox_graph_free(kp__ox_graph *g);
/* Whether graph input i is read only where operators read values on the
 * host (a shape given as an input): its value must then be known at setup. */
bool kp__ox_graph_input_host_only(const kp__ox_graph *g, size_t i);
/* Turns graph input `name` into an initializer holding `t` (taken: its
 * data moves into the model), before kp__ox_graph_build. KP_ERR_NOT_FOUND
 * when the model has no such input. */
kp_status kp__ox_model_fix_input(kp__ox_model *m, const char *name, kp__ox_tensor *t);

/* Every value's dtype and shape for the graph inputs' current shapes;
 * nodes whose inputs are known at setup run now, on the host (infer.c). */
kp_status kp__ox_infer(kp__ox_graph *g);
/* Fuses into each convolution the BatchNormalization (into its weights),
 * residual Add and Relu that follow it, after the first inference and
 * before the plan (fuse.c); nothing when no_fusion. */
kp_status kp__ox_fuse(kp__ox_graph *g);
/* "precision": "fp16": which convolutions run in fp16 and which values the
 * device holds as f16, channels last (half.c), after fuse and before the
 * plan; nothing unless g->fp16. */
kp_status kp__ox_half(kp__ox_graph *g);
/* The bytes a value takes on the device at its current shape. */
size_t kp__ox_value_bytes(const kp__ox_value *v);
/* The value whose bytes v's are (through views). */
int kp__ox_root(const kp__ox_graph *g, int v);
/* Offsets for every value the device holds, at the current (maximum)
 * shapes: constants first (*const_bytes), then intermediates by liveness;
 * *total_bytes is the region's size (plan.c). */
kp_status kp__ox_plan(kp__ox_graph *g, size_t *const_bytes, size_t *total_bytes);

/* A bound on a symbolic dimension, by its dim_param name, or by
 * "INPUT:AXIS" for an unnamed one. */
typedef struct kp__ox_bound {
    const char *name;
    int64_t max;
} kp__ox_bound;

/* A model made ready on a device (engine.c):
 *   create -> memory (sizes) -> bind_memory (region, workspace) ->
 *   per tick: set_input for each input -> prepare (re-infers only when a
 *   shape changed) -> run.
 * One thread at a time. */
typedef struct kp__ox_engine kp__ox_engine;
/* Takes `g` (freed on error too). Infers and plans at the maximum shapes:
 * every symbolic input dimension needs a bound. */
kp_status kp__ox_engine_create(kp_device_t dev, kp__ox_graph *g, const kp__ox_bound *bounds,
                               size_t n_bounds, kp__ox_engine **out);
void kp__ox_engine_destroy(kp__ox_engine *e);
kp__ox_graph *kp__ox_engine_graph(const kp__ox_engine *e);
/* Its algorithm cache; NULL where there is none (host, no cuDNN, "off"). */
const kp__ox_algo_cache *kp__ox_engine_algos(const kp__ox_engine *e);
/* Bytes of the region (constants + intermediates) and of the workspace. */
void kp__ox_engine_memory(const kp__ox_engine *e, size_t *region, size_t *constants,
                          size_t *workspace);
/* The maximum shape of graph input i. */
const int64_t *kp__ox_engine_max_shape(const kp__ox_engine *e, size_t input);
/* Hands over device memory (kp_malloc'd by the caller, or the pipeline
 * arena's) and uploads the initializers, synchronously. */
kp_status kp__ox_engine_bind_memory(kp__ox_engine *e, void *region, void *workspace);
/* Allocates the region and workspace itself (tests, tools). */
kp_status kp__ox_engine_alloc(kp__ox_engine *e);
/* Binds graph input i for the next run: dtype and rank must match, each
 * dimension within its maximum. */
kp_status kp__ox_engine_set_input(kp__ox_engine *e, size_t i, const kp_tensor_desc *d,
                                  void *data);
/* After set_input: when a shape changed since the last prepare, infers
 * again, folds, prepares the operators and uploads the folded constants
 * (waiting for `s` first); otherwise only points views at their roots. */
kp_status kp__ox_engine_prepare(kp__ox_engine *e, kp_stream_t s);
/* Enqueues every per-tick node on `s`. */
kp_status kp__ox_engine_run(kp__ox_engine *e, kp_stream_t s);
/* validate's account: nodes, shapes, the plan (engine_report.c). */
void kp__ox_engine_report(const kp__ox_engine *e, void *file);


#endif
