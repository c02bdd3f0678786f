/* Pipeline internals shared by creation, execution and the JSON reader. */
#ifndef KPIPE_PIPELINE_IMPL_H
#define KPIPE_PIPELINE_IMPL_H

#include "kpipe/pipeline.h"
#include "../core/core-impl.h"

/* Staging slots for dynamic descriptors: the host writes slot k while the
 * uploads of earlier ticks may still be in flight. Slots come in groups; one
 * event per group (recorded after the group's last upload, waited on before
 * the group is reused) keeps the per-tick cost at one small copy, and lets up
 * to KP__DYN_SLOTS - KP__DYN_GROUP ticks be in flight before the host waits. */
#define KP__DYN_SLOTS 64
#define KP__DYN_GROUP 16
#define KP__DYN_GROUPS (KP__DYN_SLOTS / KP__DYN_GROUP)

typedef enum kp__src_kind { KP__SRC_NONE, KP__SRC_EXTERNAL, KP__SRC_MODULE } kp__src_kind;

/* Where one input port's tensor comes from. */
typedef struct kp__binding {
    kp__src_kind kind;
    size_t index; /* external input index, or upstream module index (execution order) */
    size_t port;  /* upstream output port */
    bool copy;    /* the zero-copy decision: true means the pipeline copies into a buffer */
    const char *reason;
    size_t copy_off; /* the copy's buffer in the arena */
    size_t copy_bytes;
    size_t copy_index; /* its slot in a graph's copy state */
    bool rebind;       /* graph mode, KP_INPUTS_REBIND: read in place, its address keyed */
} kp__binding;

/* Per graph in the cache: the memcpy node of each copy and its source as
 * last set. */
typedef struct kp__copy_state {
    kp_graph_node_t node;
    const void *src;
} kp__copy_state;

typedef struct kp__module {
    char id[KP_NAME_MAX];
    char type[KP_NAME_MAX];
    kp_module_def def;
    kp__binding in[KP_MAX_PORTS];
    kp_port_info in_info[KP_MAX_PORTS];  /* per-tick bindings, preallocated */
    kp_port_info out_info[KP_MAX_PORTS]; /* outputs as of the last configure_io */
    kp_mem_req req;
    size_t copy_bytes; /* the pipeline's copies of its inputs */
    /* arena offsets of its tensors and workspace; its descriptors' offsets
     * within the static and dynamic descriptor regions */
    size_t tensor_off, workspace_off, static_desc_off, dynamic_desc_off;
    size_t n_deps;
    size_t deps[KP_MAX_PORTS]; /* upstream modules, unique */
    kp_graph_node_t node;
} kp__module;

typedef struct kp__external {
    char name[KP_NAME_MAX];
    size_t module, port; /* execution-order module index and its port */
    kp_port_info cur;    /* as bound by the last configure_io */
} kp__external;

typedef enum kp__state {
    KP__CREATED,
    KP__SETUP,
    KP__CONFIGURED,
    KP__WARM,
    KP__BUILT,
} kp__state;

struct kp_pipeline {
    kp_device_t dev;
    char name[KP_NAME_MAX];
    kp_exec_mode mode;
    kp__state state;
    size_t n_modules;
    kp__module *mods; /* execution order */
    size_t n_inputs, n_outputs;
    kp__external *inputs, *outputs;

    /* memory, from the device's allocators */
    kp_allocator_t arena_alloc, pinned_alloc;
    void *arena;  /* the one device allocation */
    void *pinned; /* static descriptors, then the dynamic staging slots */
    size_t arena_bytes, pinned_bytes;
    size_t tensor_bytes; /* module tensors and the pipeline's input copies */
    size_t workspace_bytes, static_desc_bytes, dynamic_desc_bytes;
    size_t staging_stride;                  /* bytes from one dynamic staging slot to the next */
    size_t static_desc_at, dynamic_desc_at; /* the descriptor regions' offsets in the arena */
    void *static_desc_dev, *dynamic_desc_dev;
    unsigned slot;
    kp_event_t group_done[KP__DYN_GROUPS];
    kp_event_t handoff;       /* orders a new stream after the last one */
    kp_stream_t last_stream;  /* stream of the last call that enqueued work */
    int acquired;             /* slot made writable and not yet uploaded, or -1 */
    bool uploaded;            /* the shadow holds what the device region holds */
    kp_stream_t build_stream; /* graph capture and upload at build time */

    /* graph mode: one graph per shape signature (and input address set) */
    kp_input_binding binding;
    kp_graph_cache_config cache_cfg;
    kp_graph_cache_t cache;
    kp_graph_call call;
    size_t n_copies;  /* copy bindings */
    size_t n_rebind;  /* external inputs read in place and keyed by address */
    size_t n_sig;     /* words of the shape signature */
    int64_t *sig;     /* dynamic sizes that graph nodes bake in, this tick */
    kp_port_info rebind_in[KP_GRAPH_MAX_PORTS];
    size_t rebind_ext[KP_GRAPH_MAX_PORTS]; /* their external input indices */
    size_t graph_nodes;                    /* of the last graph built */
};

/* Parameters a module spec may have. */
#define KP__MAX_PARAMS 64

/* Which of a module's parameters its factory looked up, and the keys it
 * asked for (for the message that names an unknown parameter). */
struct kp_param_use {
    bool read[KP__MAX_PARAMS];
    char asked[256];
};

/* kp_pipeline_create; an error creating module i is prefixed with
 * "<modules_path>[i]" ("$.modules[2]" for the JSON form). */
kp_status kp__pipeline_create(kp_device_t dev, const kp_pipeline_spec *spec, kp_pipeline_t *out,
                              const char *modules_path);

/* Computes the memory layout (run.c); called once at creation. */
kp_status kp__plan(kp_pipeline_t p);

/* Registry lookup. */
kp_module_create_fn kp__module_lookup(const char *type);
/* "engine relu" into buf. */
void kp__module_type_list(char *buf, size_t len);

#endif
