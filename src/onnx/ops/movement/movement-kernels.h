/* The data-movement and shape operators' kernels (ops_movement.c,
 * ops_slice.c, ops_shape.c on the host; ops_movement.cu on cuda): their
 * parameter structs and the index arithmetic that both forms share.
 *
 * Movement never looks at element values, only at their bytes, so every
 * kernel takes an element size (1, 2, 4 or 8 bytes) instead of a dtype and
 * moves elements as unsigned integers of that size: one kernel serves every
 * dtype the engine holds.
 *
 *   copy    out[out_offset + d] = in[in_offset + s], where for item i either
 *           s = nd(i), d = i (a gather: Transpose, Slice, Expand, Tile,
 *           DepthToSpace, Split) or s = i, d = nd(i) (a scatter into a
 *           slab of the output: Concat)
 *   index   out[i] = in[src(i)], or a fill value where src(i) is outside the
 *           input: Gather, GatherElements, Pad
 *   fill    out[i] = vals[i % count]: Shape, Size, ConstantOfShape
 *   range   out[i] = start + i * delta: Range
 */
#ifndef KPIPE_ONNX_MOVEMENT_KERNELS_H
#define KPIPE_ONNX_MOVEMENT_KERNELS_H

#include <stdint.h>

#include "../kernels-impl.h"

typedef struct kp__ox_mv_copy_params {
    const void *in;
    void *out;
    int64_t n;          /* items */
    int64_t in_offset;  /* elements */
    int64_t out_offset; /* elements */
    int32_t elem;       /* bytes of one element: 1, 2, 4 or 8 */
    int32_t scatter;    /* nonzero: nd addresses the output, the input is read in order */
    kp__ox_nd nd;
} kp__ox_mv_copy_params;

/* Item i's source and destination, in elements. */
static inline KP__HD void kp__ox_mv_copy_at(const kp__ox_mv_copy_params *p, int64_t i, int64_t *src,
                                            int64_t *dst) {
    int64_t off = kp__ox_nd_offset(&p->nd, i);
    *src = p->in_offset + (p->scatter ? i : off);
    *dst = p->out_offset + (p->scatter ? off : i);
}

/* What an index kernel computes its source from. */
enum {
    KP__OX_MV_GATHER = 0,
    KP__OX_MV_GATHER_ELEMENTS = 1,
    KP__OX_MV_PAD = 2,
};

/* Pad modes. */
enum {
    KP__OX_MV_PAD_CONSTANT = 0,
    KP__OX_MV_PAD_REFLECT = 1,
    KP__OX_MV_PAD_EDGE = 2,
};

/* Gather: the output is outer x count x inner items, the input outer x
 * axis_dim x inner; idx holds `count` indices into the axis. */
typedef struct kp__ox_mv_gather {
    const void *idx;
    int32_t idx64; /* indices are int64 (else int32) */
    int32_t pad_;
    int64_t count, inner, axis_dim;
} kp__ox_mv_gather;

/* GatherElements: nd has the indices' shape and the input's strides; the
 * coordinate on `axis` comes from idx[i]. */
typedef struct kp__ox_mv_gather_elements {
    const void *idx;
    int32_t idx64;
    int32_t axis;
    int64_t axis_dim;
    kp__ox_nd nd;
} kp__ox_mv_gather_elements;

/* Pad: output coordinate c reads input coordinate c - begin, brought back
 * into the input by the mode (constant: none, the fill value instead). */
typedef struct kp__ox_mv_pad {
    int32_t ndim;
    int32_t mode;
    int64_t out_shape[KP_MAX_DIMS];
    int64_t in_shape[KP_MAX_DIMS];
    int64_t begin[KP_MAX_DIMS];
} kp__ox_mv_pad;

typedef struct kp__ox_mv_index_params {
    const void *in;
    void *out;
    int64_t n;            /* items: the output's elements */
    uint64_t fill;        /* the element written where the source is outside the input */
    const void *fill_ptr; /* when set, the fill element is read here instead (Pad's
                             constant_value input, which may live on the device) */
    int32_t elem;
    int32_t kind; /* KP__OX_MV_GATHER ... */
    union {
        kp__ox_mv_gather g;
        kp__ox_mv_gather_elements ge;
        kp__ox_mv_pad pad;
    } u;
} kp__ox_mv_index_params;

/* An index read from int64 or int32 data, a negative one counted from the
 * end; -1 when it is outside [0, dim) either way. */
static inline KP__HD int64_t kp__ox_mv_index(const void *idx, int idx64, int64_t i, int64_t dim) {
    int64_t v = idx64 ? ((const int64_t *)idx)[i] : (int64_t)((const int32_t *)idx)[i];
    if (v < 0) v += dim;
    return (v < 0 || v >= dim) ? -1 : v;
}

static inline KP__HD int64_t kp__ox_mv_gather_src(const kp__ox_mv_gather *g, int64_t i) {
    int64_t inner_i = i % g->inner;
    int64_t rest = i / g->inner;
    int64_t j = rest % g->count;
    int64_t outer = rest / g->count;
    int64_t k = kp__ox_mv_index(g->idx, g->idx64, j, g->axis_dim);
    if (k < 0) return -1;
    return (outer * g->axis_dim + k) * g->inner + inner_i;
}

static inline KP__HD int64_t kp__ox_mv_gather_elements_src(const kp__ox_mv_gather_elements *g,
                                                           int64_t i) {
    int64_t k = kp__ox_mv_index(g->idx, g->idx64, i, g->axis_dim);
    if (k < 0) return -1;
    int64_t off = 0, linear = i;
    for (int d = g->nd.ndim - 1; d >= 0; d--) {
        int64_t s = g->nd.shape[d];
        int64_t q = linear / s;
        int64_t c = d == g->axis ? k : linear - q * s;
        off += c * g->nd.strides[d];
        linear = q;
    }
    return off;
}

/* Coordinate c brought into [0, dim) by the pad mode; -1 for a constant. */
static inline KP__HD int64_t kp__ox_mv_pad_coord(int mode, int64_t c, int64_t dim) {
    if (c >= 0 && c < dim) return c;
    if (mode == KP__OX_MV_PAD_EDGE) return c < 0 ? 0 : dim - 1;
    if (mode == KP__OX_MV_PAD_REFLECT) {
        if (dim == 1) return 0;
        /* Reflection without repeating the edge is periodic in 2 (dim - 1). */
        int64_t period = 2 * (dim - 1);
        c %= period;
        if (c < 0) c += period;
        return c < dim ? c : period - c;
    }
    return -1;
}

static inline KP__HD int64_t kp__ox_mv_pad_src(const kp__ox_mv_pad *p, int64_t i) {
    int64_t off = 0, stride = 1, linear = i;
    for (int d = p->ndim - 1; d >= 0; d--) {
        int64_t s = p->out_shape[d];
        int64_t q = linear / s;
        int64_t c = kp__ox_mv_pad_coord(p->mode, linear - q * s - p->begin[d], p->in_shape[d]);
        if (c < 0) return -1;
        off += c * stride;
        stride *= p->in_shape[d];
        linear = q;
    }
    return off;
}

static inline KP__HD int64_t kp__ox_mv_index_src(const kp__ox_mv_index_params *p, int64_t i) {
    if (p->kind == KP__OX_MV_GATHER) return kp__ox_mv_gather_src(&p->u.g, i);
    if (p->kind == KP__OX_MV_GATHER_ELEMENTS) return kp__ox_mv_gather_elements_src(&p->u.ge, i);
    return kp__ox_mv_pad_src(&p->u.pad, i);
}

typedef struct kp__ox_mv_fill_params {
    void *out;
    int64_t n;
    int32_t elem;
    int32_t count; /* 1 .. KP_MAX_DIMS values, repeated */
    uint64_t vals[KP_MAX_DIMS];
} kp__ox_mv_fill_params;

/* Range's element types. */
enum {
    KP__OX_MV_RANGE_F32 = 0,
    KP__OX_MV_RANGE_I32 = 1,
    KP__OX_MV_RANGE_I64 = 2,
    KP__OX_MV_RANGE_I16 = 3,
};

typedef struct kp__ox_mv_range_params {
    void *out;
    int64_t n;
    int32_t type; /* KP__OX_MV_RANGE_* */
    float fstart, fdelta;
    int64_t istart, idelta;
} kp__ox_mv_range_params;

/* Integer ranges wrap as the element type does, so the product is formed
 * unsigned, where wrapping is defined. */
static inline KP__HD int64_t kp__ox_mv_range_int(const kp__ox_mv_range_params *p, int64_t i) {
    return (int64_t)((uint64_t)p->istart + (uint64_t)i * (uint64_t)p->idelta);
}

static inline KP__HD float kp__ox_mv_range_f32(const kp__ox_mv_range_params *p, int64_t i) {
    return p->fstart + (float)i * p->fdelta;
}

#ifndef __CUDACC__
/* The host side of the family: the kernels (ops_movement.c) and the
 * operators' pieces that ops_movement.c's table lists from ops_slice.c. */
#include <stdbool.h>

struct kp__ox_exec;
struct kp__ox_graph;
struct kp__ox_gnode;

extern const kp_kernel kp__ox_mv_copy_kernel;
extern const kp_kernel kp__ox_mv_index_kernel;
extern const kp_kernel kp__ox_mv_fill_kernel;
extern const kp_kernel kp__ox_mv_range_kernel;

/* Folds `ndim` dims of `shape` (addressed through `strides`, up to 2 x
 * KP_MAX_DIMS of them) into *out: dims of size 1 dropped, neighbours that
 * step through memory as one dim merged. KP_ERR_UNSUPPORTED naming the node
 * when more than KP_MAX_DIMS remain. */
kp_status kp__ox_mv_nd(const struct kp__ox_gnode *n, int ndim, const int64_t *shape,
                       const int64_t *strides, kp__ox_nd *out);
/* Row-major element strides of a shape. */
void kp__ox_mv_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Launches the copy kernel over every item of `nd` (see the family's
 * comment); nothing when it has no items. */
kp_status kp__ox_mv_copy(const struct kp__ox_exec *x, const void *in, int64_t in_offset, void *out,
                         int64_t out_offset, int elem, bool scatter, const kp__ox_nd *nd);
/* A contiguous copy of input 0 into output 0: how the views (Reshape,
 * Squeeze, ...) run when folded. */
kp_status kp__ox_mv_run_view(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                             struct kp__ox_gnode *n);

/* ops_slice.c */
kp_status kp__ox_slice_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n);
kp_status kp__ox_slice_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                           struct kp__ox_gnode *n);
bool kp__ox_slice_host_input(int i);
kp_status kp__ox_gather_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n);
kp_status kp__ox_gather_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                            struct kp__ox_gnode *n);
kp_status kp__ox_gather_elements_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n);
kp_status kp__ox_gather_elements_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                                     struct kp__ox_gnode *n);
kp_status kp__ox_pad_infer(struct kp__ox_graph *g, struct kp__ox_gnode *n);
kp_status kp__ox_pad_run(const struct kp__ox_exec *x, struct kp__ox_graph *g,
                         struct kp__ox_gnode *n);
bool kp__ox_pad_host_input(int i);
#endif

#endif
