/* A fused group of elementwise modules: what fuse.c builds and runs, and
 * what fuse_gen.c writes CUDA C++ for. */
#ifndef KPIPE_FUSE_IMPL_H
#define KPIPE_FUSE_IMPL_H

#include "pipeline-impl.h"

typedef struct kp__fused kp__fused;

/* Elements each thread of the generated kernel takes per step, and the
 * elements of one host block step (per member, on the stack). */
#define KP__FUSE_VEC 4
#define KP__FUSE_BLOCK 256
#define KP__FUSE_CHUNK 512

/* The static descriptor's head; the members' parameter blocks follow it,
 * each 8-aligned (the generated kp_st matches this layout). */
typedef struct kp__fused_static {
    void *out[KP_MAX_PORTS];
    int64_t max_n;
} kp__fused_static;

/* The dynamic descriptor: this tick's input addresses and elements. */
typedef struct kp__fused_dynamic {
    const void *in[KP_MAX_PORTS];
    int64_t n;
} kp__fused_dynamic;

/* The kernel's parameters (the generated kp_params matches). */
typedef struct kp__fused_params {
    const kp__fused_static *st;
    const kp__fused_dynamic *dyn;
    const struct kp__fused *host; /* the host form's view of the group */
} kp__fused_params;

typedef struct kp__fused_member {
    char id[KP_NAME_MAX];
    char type[KP_NAME_MAX];
    kp_module_def def; /* the module as its factory made it */
    /* per input: >= 0 the group input it reads; -1 - j: member j's output */
    int src[KP_MAX_PORTS];
    int out;          /* its output slot in the group, or -1 (kept in registers) */
    size_t param_off; /* its parameter block, after kp__fused_static */
} kp__fused_member;

struct kp__fused {
    kp_device_t dev;
    bool owns; /* the members' modules are the group's to destroy */
    size_t n_members;
    kp__fused_member mem[KP_FUSE_MAX_MODULES];
    size_t n_in, n_out;
    kp_dtype in_dt[KP_MAX_PORTS], out_dt[KP_MAX_PORTS];
    int64_t max_n;
    size_t params_bytes;
    char *source; /* the generated CUDA C++ */
    kp_host_kernel host;
    kp_device_kernel cuda;
    kp_kernel kernel;
    kp__fused_params params;
    kp_launch launch;
    size_t out_off[KP_MAX_PORTS]; /* in the group's device slice */
    void *out[KP_MAX_PORTS];
    kp_tensor_desc out_desc[KP_MAX_PORTS];
    kp_rtc_info rtc;
};

/* The group's kernel source, kp__malloc'd (fuse_gen.c). */
kp_status kp__fuse_source(const kp__fused *f, char **out);

#endif
