/* kpipe modules: the interface a pipeline stage implements, and the registry
 * of factories that create modules by type name.
 *
 *   static kp_status my_create(const kp_module_env *env, kp_module_def *def) {
 *       int64_t n;
 *       kp_status st = kp_param_int(env, "size", false, 0, &n);
 *       if (st != KP_OK) return st;
 *       def->iface = &my_iface;  def->self = ...;
 *       kp_port_decl_1d(&def->inputs[def->n_inputs++], "input", KP_F32, n);
 *       kp_port_decl_1d(&def->outputs[def->n_outputs++], "output", KP_F32, n);
 *       return KP_OK;
 *   }
 *   kp_module_register("my_module", my_create);
 *
 * Lifecycle as the pipeline drives it: create -> set_connection_copy_mode
 * (each input) -> memory_requirements -> setup_memory -> per tick:
 * set_inputs, configure_io -> warmup (once) -> add_node_to_graph (graph
 * mode, once) -> execute (stream mode, per tick).
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
    KP_EXEC_GRAPH  = 0, /* one pre-built graph launched per tick (default) */
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

/* A port as a module declares it. */
typedef struct kp_port_decl {
    char name[KP_NAME_MAX];
    kp_tensor_desc desc; /* dtype and shape; contiguous, offset 0 */
} kp_port_decl;

/* Fills a 1-D contiguous port declaration. */
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
 * dynamic descriptors changes per tick and is passed to configure_io. */
typedef struct kp_mem_slice {
    void *device;       size_t device_bytes;
    void *workspace;    size_t workspace_bytes;
    void *static_host;  void *static_dev;  size_t static_bytes;
    void *dynamic_dev;  size_t dynamic_bytes;
} kp_mem_slice;

/* The module vtable; `self` is the module's own state. */
typedef struct kp_module_i {
    /* Releases self and everything it owns. */
    void (*destroy)(void *self);
    /* Decides, per input port, whether the module copies its input into a
     * buffer of its own (true) or reads the upstream tensor in place. */
    kp_status (*set_connection_copy_mode)(void *self, size_t input, bool copy);
    /* Optional: true when the input's address must not change after warmup
     * (e.g. it is baked into a captured graph). Default false. */
    bool (*input_needs_fixed_address)(void *self, size_t input);
    /* Optional: true when the output's address may change per tick. Default false. */
    bool (*output_address_dynamic)(void *self, size_t output);
    /* Memory needs, given the copy modes. */
    kp_status (*memory_requirements)(void *self, kp_mem_req *out);
    /* Hands the module its slice; it writes its static descriptor host-side here. */
    kp_status (*setup_memory)(void *self, const kp_mem_slice *slice);
    /* Binds the tensors feeding the input ports (in declaration order), per tick. */
    kp_status (*set_inputs)(void *self, const kp_port_info *inputs, size_t n);
    /* Per tick, stream-ordered and non-blocking: input copies, and the whole
     * dynamic descriptor written into dyn_host, a staging slot that holds an
     * older tick's bytes (the pipeline uploads all modules' descriptors in
     * one copy afterwards, and skips it when nothing changed). */
    kp_status (*configure_io)(void *self, kp_stream_t s, void *dyn_host);
    /* Output tensors, in declaration order. */
    kp_status (*get_outputs)(void *self, kp_port_info *outputs, size_t n);
    /* Optional: one-time preparation on a stream (handles, capture). */
    kp_status (*warmup)(void *self, kp_stream_t s);
    /* Stream mode: enqueue the module's work. */
    kp_status (*execute)(void *self, kp_stream_t s);
    /* Graph mode: add the module's node(s) after `deps`; *out is the node that
     * dependents wait for. */
    kp_status (*add_node_to_graph)(void *self, kp_graph_t g, const kp_graph_node_t *deps,
                                   size_t n_deps, kp_graph_node_t *out);
    /* Optional: refresh node parameters on the instantiated graph. */
    kp_status (*update_graph_node_params)(void *self, kp_graph_exec_t ge);
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
} kp_module_env;

/* What a factory fills. */
typedef struct kp_module_def {
    const kp_module_i *iface;
    void *self;
    size_t n_inputs, n_outputs;
    kp_port_decl inputs[KP_MAX_PORTS];
    kp_port_decl outputs[KP_MAX_PORTS];
} kp_module_def;

typedef kp_status (*kp_module_create_fn)(const kp_module_env *env, kp_module_def *def);

/* Registers a factory under `type` (copied). Built-in types: engine, relu.
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
kp_status kp_param_str(const kp_module_env *env, const char *key, const char *def,
                       const char **out);

#ifdef __cplusplus
}
#endif
#endif
