/* Data-movement operators: Transpose, Concat, Split, Expand, Tile,
 * DepthToSpace, SpaceToDepth here, and Slice, Gather, GatherElements, Pad
 * from ops_slice.c. All but the indexed ones are one strided copy each
 * (movement-kernels.h): the operator only works out, at run, which element
 * of the input each output element is, as a shape with strides, so one
 * kernel of a few lines serves them all on both forms. */
#include <string.h>

#include "movement-kernels.h"
#include "../../onnx-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__ox_mv_copy_cuda; /* ops_movement.cu */
extern const kp_device_kernel kp__ox_mv_index_cuda;
extern const kp_device_kernel kp__ox_mv_fill_cuda;
extern const kp_device_kernel kp__ox_mv_range_cuda;
#define KP__OX_MV_CUDA(name) {"cuda", &kp__ox_mv_##name##_cuda},
#else
#define KP__OX_MV_CUDA(name)
#endif

_Static_assert(sizeof(kp__ox_mv_copy_params) <= KP_MAX_KERNEL_PARAMS, "copy params too large");
_Static_assert(sizeof(kp__ox_mv_index_params) <= KP_MAX_KERNEL_PARAMS, "index params too large");
_Static_assert(sizeof(kp__ox_mv_fill_params) <= KP_MAX_KERNEL_PARAMS, "fill params too large");
_Static_assert(sizeof(kp__ox_mv_range_params) <= KP_MAX_KERNEL_PARAMS, "range params too large");

/* --- kernels: host forms ----------------------------------------------------- */

static void mv_move1(void *out, int64_t d, const void *in, int64_t s, int elem) {
    switch (elem) {
    case 1: ((uint8_t *)out)[d] = ((const uint8_t *)in)[s]; break;
    case 2: ((uint16_t *)out)[d] = ((const uint16_t *)in)[s]; break;
    case 4: ((uint32_t *)out)[d] = ((const uint32_t *)in)[s]; break;
    default: ((uint64_t *)out)[d] = ((const uint64_t *)in)[s]; break;
    }
}

/* Where the innermost dim steps through the input one element at a time,
 * whole rows go by memcpy; a transposed inner dim goes element by element. */
static void mv_copy_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kp__ox_mv_copy_params *p = pp;
    uint64_t lo, hi;
    (void)block;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    int last = p->nd.ndim - 1;
    int64_t row = last < 0 ? 1 : (p->nd.strides[last] == 1 ? p->nd.shape[last] : 1);
    size_t es = (size_t)p->elem;
    for (int64_t i = (int64_t)lo; i < (int64_t)hi;) {
        int64_t s, d, len = row - i % row;
        if (len > (int64_t)hi - i) len = (int64_t)hi - i;
        kp__ox_mv_copy_at(p, i, &s, &d);
        if (len == 1)
            mv_move1(p->out, d, p->in, s, p->elem);
        else
            memcpy((char *)p->out + (size_t)d * es, (const char *)p->in + (size_t)s * es,
                   (size_t)len * es);
        i += len;
    }
}

static void mv_index_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                          uint64_t nb) {
    const kp__ox_mv_index_params *p = pp;
    uint64_t lo, hi;
    (void)block;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    const void *fill = p->fill_ptr ? p->fill_ptr : (const void *)&p->fill;
    for (uint64_t i = lo; i < hi; i++) {
        int64_t s = kp__ox_mv_index_src(p, (int64_t)i);
        if (s < 0)
            mv_move1(p->out, (int64_t)i, fill, 0, p->elem);
        else
            mv_move1(p->out, (int64_t)i, p->in, s, p->elem);
    }
}

/* The values are held in the low bytes of each uint64, which on a
 * little-endian host are its first bytes. */
static void mv_fill_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kp__ox_mv_fill_params *p = pp;
    uint64_t lo, hi;
    (void)block;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    for (uint64_t i = lo; i < hi; i++)
        mv_move1(p->out, (int64_t)i, p->vals, (int64_t)(i % (uint64_t)p->count) * (8 / p->elem),
                 p->elem);
}

static void mv_range_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                          uint64_t nb) {
    const kp__ox_mv_range_params *p = pp;
    uint64_t lo, hi;
    (void)block;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    for (uint64_t u = lo; u < hi; u++) {
        int64_t i = (int64_t)u;
        switch (p->type) {
        case KP__OX_MV_RANGE_F32: ((float *)p->out)[i] = kp__ox_mv_range_f32(p, i); break;
        case KP__OX_MV_RANGE_I32:
            ((int32_t *)p->out)[i] = (int32_t)kp__ox_mv_range_int(p, i);
            break;
        case KP__OX_MV_RANGE_I16:
            ((int16_t *)p->out)[i] = (int16_t)kp__ox_mv_range_int(p, i);
            break;
        default: ((int64_t *)p->out)[i] = kp__ox_mv_range_int(p, i); break;
        }
    }
}

const kp_kernel kp__ox_mv_copy_kernel = {
    "onnx_copy",
    sizeof(kp__ox_mv_copy_params),
    {{"host", &(const kp_host_kernel){mv_copy_host}}, KP__OX_MV_CUDA(copy)}};
const kp_kernel kp__ox_mv_index_kernel = {
    "onnx_index",
    sizeof(kp__ox_mv_index_params),
    {{"host", &(const kp_host_kernel){mv_index_host}}, KP__OX_MV_CUDA(index)}};
const kp_kernel kp__ox_mv_fill_kernel = {
    "onnx_fill",
    sizeof(kp__ox_mv_fill_params),
    {{"host", &(const kp_host_kernel){mv_fill_host}}, KP__OX_MV_CUDA(fill)}};
const kp_kernel kp__ox_mv_range_kernel = {
    "onnx_range",
    sizeof(kp__ox_mv_range_params),
    {{"host", &(const kp_host_kernel){mv_range_host}}, KP__OX_MV_CUDA(range)}};

/* --- shared pieces ------------------------------------------------------------ */

kp_status kp__ox_mv_nd(const kp__ox_gnode *n, int ndim, const int64_t *shape,
                       const int64_t *strides, kp__ox_nd *out) {
    int64_t sh[2 * KP_MAX_DIMS], st[2 * KP_MAX_DIMS];
    int m = 0;
    bool empty = false;
    for (int k = 0; k < ndim; k++) empty = empty || shape[k] == 0;
    for (int k = 0; k < ndim; k++) {
        /* An empty copy keeps its zero dim so that its item count stays 0. */
        if (shape[k] == 1 || (empty && shape[k] != 0)) continue;
        if (m > 0 && st[m - 1] == strides[k] * shape[k]) {
            sh[m - 1] *= shape[k];
            st[m - 1] = strides[k];
            continue;
        }
        sh[m] = shape[k];
        st[m] = strides[k];
        m++;
    }
    if (m > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "the copy needs %d strided dims, more than %d", m, KP_MAX_DIMS);
    out->ndim = m;
    for (int k = 0; k < m; k++) {
        out->shape[k] = sh[k];
        out->strides[k] = st[k];
    }
    return KP_OK;
}

void kp__ox_mv_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= shape[k];
    }
}

kp_status kp__ox_mv_copy(const kp__ox_exec *x, const void *in, int64_t in_offset, void *out,
                         int64_t out_offset, int elem, bool scatter, const kp__ox_nd *nd) {
    int64_t items = 1;
    for (int k = 0; k < nd->ndim; k++) items *= nd->shape[k];
    if (items == 0) return KP_OK;
    kp__ox_mv_copy_params p = {
        .in = in,
        .out = out,
        .n = items,
        .in_offset = in_offset,
        .out_offset = out_offset,
        .elem = elem,
        .scatter = scatter,
        .nd = *nd,
    };
    return kp__ox_launch(x, &kp__ox_mv_copy_kernel, (uint64_t)items, &p);
}

kp_status kp__ox_mv_run_view(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    kp__ox_nd nd = {.ndim = 1, .shape = {in->numel}, .strides = {1}};
    return kp__ox_mv_copy(x, in->data, 0, out->data, 0, (int)kp_dtype_size(in->dtype), false, &nd);
}

/* Output i takes input 0's dtype and boolean-ness under a new shape. */
static kp_status mv_set_out(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, int ndim,
                            const int64_t *shape) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(kp__ox_set_out(g, n, i, in->dtype, ndim, shape));
    kp__ox_out(g, n, i)->is_bool = in->is_bool;
    return KP_OK;
}

/* A gather copy of input 0 into output 0 through (shape, strides). */
static kp_status mv_gather_copy(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n, int ndim,
                                const int64_t *shape, const int64_t *strides, int64_t in_offset) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    kp__ox_nd nd;
    KP_CHECK(kp__ox_mv_nd(n, ndim, shape, strides, &nd));
    return kp__ox_mv_copy(x, in->data, in_offset, out->data, 0, (int)kp_dtype_size(in->dtype),
                          false, &nd);
}

static kp_status mv_need_input(const kp__ox_gnode *n, const kp__ox_value *v, size_t i) {
    if (!v) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input %zu is missing", i);
    return KP_OK;
}

/* --- Transpose ---------------------------------------------------------------- */

static kp_status transpose_perm(const kp__ox_gnode *n, int rank, int *perm) {
    const int64_t *p;
    size_t count;
    KP_CHECK(kp__ox_attr_ints(n, "perm", &p, &count));
    if (!p) {
        for (int k = 0; k < rank; k++) perm[k] = rank - 1 - k;
        return KP_OK;
    }
    if (count != (size_t)rank)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "perm has %zu entries for rank %d", count,
                                 rank);
    bool seen[KP_MAX_DIMS] = {false};
    for (int k = 0; k < rank; k++) {
        if (p[k] < 0 || p[k] >= rank || seen[p[k]])
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "perm is not a permutation of 0..%d",
                                     rank - 1);
        seen[p[k]] = true;
        perm[k] = (int)p[k];
    }
    return KP_OK;
}

static kp_status transpose_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, in, 0));
    int perm[KP_MAX_DIMS];
    int64_t shape[KP_MAX_DIMS];
    KP_CHECK(transpose_perm(n, in->ndim, perm));
    for (int k = 0; k < in->ndim; k++) shape[k] = in->shape[perm[k]];
    return mv_set_out(g, n, 0, in->ndim, shape);
}

static kp_status transpose_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    int perm[KP_MAX_DIMS];
    int64_t shape[KP_MAX_DIMS], in_strides[KP_MAX_DIMS], strides[KP_MAX_DIMS];
    KP_CHECK(transpose_perm(n, in->ndim, perm));
    kp__ox_mv_strides(in->ndim, in->shape, in_strides);
    for (int k = 0; k < in->ndim; k++) {
        shape[k] = in->shape[perm[k]];
        strides[k] = in_strides[perm[k]];
    }
    return mv_gather_copy(x, g, n, in->ndim, shape, strides, 0);
}

/* --- Concat ------------------------------------------------------------------- */

static kp_status concat_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *first = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, first, 0));
    int64_t a;
    int axis;
    KP_CHECK(kp__ox_attr_int(n, "axis", n->opset < 4 ? 1 : INT64_MIN, &a));
    if (a == INT64_MIN)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "attribute axis is missing");
    KP_CHECK(kp__ox_axis(n, a, first->ndim, &axis));
    int64_t shape[KP_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    for (size_t i = 1; i < n->n_in; i++) {
        kp__ox_value *v = kp__ox_in(g, n, i);
        KP_CHECK(mv_need_input(n, v, i));
        if (v->dtype != first->dtype || v->ndim != first->ndim)
            return kp__ox_node_error(
                n, KP_ERR_MISMATCH, "input %zu is %s of rank %d, input 0 %s of rank %d", i,
                kp_dtype_name(v->dtype), v->ndim, kp_dtype_name(first->dtype), first->ndim);
        for (int k = 0; k < v->ndim; k++)
            if (k != axis && v->shape[k] != first->shape[k])
                return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                         "input %zu has %lld in dim %d where input 0 has %lld", i,
                                         (long long)v->shape[k], k, (long long)first->shape[k]);
        if (__builtin_add_overflow(shape[axis], v->shape[axis], &shape[axis]))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the concatenated dim overflows");
    }
    return mv_set_out(g, n, 0, first->ndim, shape);
}

/* Each input is a slab of the output along the axis: viewed as outer x
 * (len * inner) elements, it goes to rows of out_axis * inner elements
 * starting at its running offset. */
static kp_status concat_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *out = kp__ox_out(g, n, 0);
    int64_t a;
    int axis;
    KP_CHECK(kp__ox_attr_int(n, "axis", 1, &a));
    KP_CHECK(kp__ox_axis(n, a, out->ndim, &axis));
    int64_t outer = 1, inner = 1, done = 0;
    for (int k = 0; k < axis; k++) outer *= out->shape[k];
    for (int k = axis + 1; k < out->ndim; k++) inner *= out->shape[k];
    for (size_t i = 0; i < n->n_in; i++) {
        kp__ox_value *v = kp__ox_in(g, n, i);
        int64_t len = v->ndim ? v->shape[axis] : 1;
        int64_t shape[2] = {outer, len * inner}, strides[2] = {out->shape[axis] * inner, 1};
        kp__ox_nd nd;
        KP_CHECK(kp__ox_mv_nd(n, 2, shape, strides, &nd));
        KP_CHECK(kp__ox_mv_copy(x, v->data, 0, out->data, done * inner,
                                (int)kp_dtype_size(v->dtype), true, &nd));
        done += len;
    }
    return KP_OK;
}

/* --- Split -------------------------------------------------------------------- */

/* Output k's length along the axis, from the split attribute (before 13),
 * the split input (13 on), num_outputs (18 on) or equal parts. */
static kp_status split_size(kp__ox_graph *g, const kp__ox_gnode *n, int64_t dim, size_t k,
                            int64_t *out) {
    int64_t buf[64];
    const int64_t *split = NULL;
    size_t count = 0;
    if (n->opset < 13)
        KP_CHECK(kp__ox_attr_ints(n, "split", &split, &count));
    else if (kp__ox_in(g, n, 1))
        KP_CHECK(kp__ox_const_ints(g, n, 1, buf, 64, &split, &count));
    if (split) {
        if (count != n->n_out)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "split has %zu entries for %zu outputs",
                                     count, n->n_out);
        *out = split[k];
        return KP_OK;
    }
    int64_t parts;
    KP_CHECK(kp__ox_attr_int(n, "num_outputs", (int64_t)n->n_out, &parts));
    if (parts != (int64_t)n->n_out)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "num_outputs is %lld for %zu outputs",
                                 (long long)parts, n->n_out);
    bool uneven = kp__ox_attr_find(n, "num_outputs") != NULL;
    if (!uneven && dim % parts)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "dim %lld does not split in %lld parts",
                                 (long long)dim, (long long)parts);
    /* num_outputs rounds the parts up, so only the last is shorter. */
    int64_t chunk = dim / parts + (dim % parts != 0), left = dim - chunk * (int64_t)k;
    *out = left < 0 ? 0 : (left < chunk ? left : chunk);
    return KP_OK;
}

static kp_status split_axis(kp__ox_graph *g, const kp__ox_gnode *n, int *axis) {
    int64_t a;
    KP_CHECK(kp__ox_attr_int(n, "axis", 0, &a));
    return kp__ox_axis(n, a, kp__ox_in(g, n, 0)->ndim, axis);
}

static kp_status split_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, in, 0));
    int axis;
    KP_CHECK(split_axis(g, n, &axis));
    int64_t shape[KP_MAX_DIMS], total = 0;
    memcpy(shape, in->shape, sizeof shape);
    for (size_t k = 0; k < n->n_out; k++) {
        if (!kp__ox_out(g, n, k))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "output %zu is omitted", k);
        KP_CHECK(split_size(g, n, in->shape[axis], k, &shape[axis]));
        if (shape[axis] < 0 || shape[axis] > in->shape[axis] - total)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                     "the parts do not add up to dim %lld of the input",
                                     (long long)in->shape[axis]);
        total += shape[axis];
        KP_CHECK(mv_set_out(g, n, k, in->ndim, shape));
    }
    if (total != in->shape[axis])
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                 "the parts add up to %lld, not to dim %lld of the input",
                                 (long long)total, (long long)in->shape[axis]);
    return KP_OK;
}

static kp_status split_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    int axis;
    KP_CHECK(split_axis(g, n, &axis));
    int64_t outer = 1, inner = 1, done = 0;
    for (int k = 0; k < axis; k++) outer *= in->shape[k];
    for (int k = axis + 1; k < in->ndim; k++) inner *= in->shape[k];
    for (size_t k = 0; k < n->n_out; k++) {
        kp__ox_value *out = kp__ox_out(g, n, k);
        int64_t len = out->shape[axis];
        int64_t shape[2] = {outer, len * inner}, strides[2] = {in->shape[axis] * inner, 1};
        kp__ox_nd nd;
        KP_CHECK(kp__ox_mv_nd(n, 2, shape, strides, &nd));
        KP_CHECK(kp__ox_mv_copy(x, in->data, done * inner, out->data, 0,
                                (int)kp_dtype_size(in->dtype), false, &nd));
        done += len;
    }
    return KP_OK;
}

static bool mv_host_input_1(int i) { return i == 1; }

/* --- Expand and Tile --------------------------------------------------------------- */

static kp_status expand_shape(kp__ox_graph *g, const kp__ox_gnode *n, int *ndim, int64_t *shape) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, in, 0));
    int64_t buf[KP_MAX_DIMS];
    const int64_t *want;
    size_t count;
    KP_CHECK(kp__ox_const_ints(g, n, 1, buf, KP_MAX_DIMS, &want, &count));
    if (count > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the shape has %zu dims, more than %d",
                                 count, KP_MAX_DIMS);
    return kp__ox_broadcast(n, in->ndim, in->shape, (int)count, want, ndim, shape);
}

static kp_status expand_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    int ndim;
    int64_t shape[KP_MAX_DIMS];
    KP_CHECK(expand_shape(g, n, &ndim, shape));
    return mv_set_out(g, n, 0, ndim, shape);
}

static kp_status expand_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    int64_t in_strides[KP_MAX_DIMS], strides[KP_MAX_DIMS];
    kp__ox_mv_strides(in->ndim, in->shape, in_strides);
    int lead = out->ndim - in->ndim;
    for (int k = 0; k < out->ndim; k++) {
        int j = k - lead;
        strides[k] = (j < 0 || in->shape[j] == 1) ? 0 : in_strides[j];
    }
    return mv_gather_copy(x, g, n, out->ndim, out->shape, strides, 0);
}

/* Tile's output dim k is repeats[k] copies of input dim k: two dims, the
 * outer of stride 0, which the fold mostly merges away. */
static kp_status tile_plan(kp__ox_graph *g, const kp__ox_gnode *n, int64_t *shape, kp__ox_nd *nd) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, in, 0));
    int64_t buf[KP_MAX_DIMS], in_strides[KP_MAX_DIMS];
    int64_t sh[2 * KP_MAX_DIMS], st[2 * KP_MAX_DIMS];
    const int64_t *rep;
    size_t count;
    KP_CHECK(kp__ox_const_ints(g, n, 1, buf, KP_MAX_DIMS, &rep, &count));
    if (count != (size_t)in->ndim)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "repeats has %zu entries for rank %d",
                                 count, in->ndim);
    kp__ox_mv_strides(in->ndim, in->shape, in_strides);
    for (int k = 0; k < in->ndim; k++) {
        if (rep[k] < 0 || __builtin_mul_overflow(rep[k], in->shape[k], &shape[k]))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "repeats[%d] is %lld", k,
                                     (long long)rep[k]);
        sh[2 * k] = rep[k];
        st[2 * k] = 0;
        sh[2 * k + 1] = in->shape[k];
        st[2 * k + 1] = in_strides[k];
    }
    return kp__ox_mv_nd(n, 2 * in->ndim, sh, st, nd);
}

static kp_status tile_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    int64_t shape[KP_MAX_DIMS];
    kp__ox_nd nd;
    KP_CHECK(tile_plan(g, n, shape, &nd));
    return mv_set_out(g, n, 0, kp__ox_in(g, n, 0)->ndim, shape);
}

static kp_status tile_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    int64_t shape[KP_MAX_DIMS];
    kp__ox_nd nd;
    KP_CHECK(tile_plan(g, n, shape, &nd));
    return kp__ox_mv_copy(x, in->data, 0, out->data, 0, (int)kp_dtype_size(in->dtype), false, &nd);
}

/* --- DepthToSpace and SpaceToDepth ----------------------------------------------- */

static kp_status space_put(const int64_t *sh, const int64_t *st, const int64_t *o, int64_t *shape6,
                           int64_t *strides6, int64_t *out4) {
    memcpy(shape6, sh, 6 * sizeof *sh);
    memcpy(strides6, st, 6 * sizeof *st);
    memcpy(out4, o, 4 * sizeof *o);
    return KP_OK;
}

/* Both are a reshape to six dims, a transpose and a reshape back: the
 * output viewed as six dims, each read through the input's stride for it. */
static kp_status space_plan(kp__ox_graph *g, const kp__ox_gnode *n, bool to_space, int64_t *out4,
                            int64_t *shape6, int64_t *strides6) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(mv_need_input(n, in, 0));
    int64_t b;
    const char *mode = "DCR";
    KP_CHECK(kp__ox_attr_int(n, "blocksize", 0, &b));
    if (to_space) KP_CHECK(kp__ox_attr_str(n, "mode", "DCR", &mode));
    bool crd = strcmp(mode, "CRD") == 0;
    if (!crd && strcmp(mode, "DCR") != 0)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "mode '%s' is not DCR or CRD", mode);
    if (in->ndim != 4)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input rank %d is not 4", in->ndim);
    if (b <= 0 || b > (int64_t)1 << 20)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "blocksize %lld", (long long)b);
    int64_t N = in->shape[0], C = in->shape[1], H = in->shape[2], W = in->shape[3];
    if (to_space) {
        if (C % (b * b))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                     "channels %lld are not a multiple of %lld", (long long)C,
                                     (long long)(b * b));
        int64_t c = C / (b * b), hw = H * W;
        int64_t sh[6] = {N, c, H, b, W, b};
        /* DCR reads the channel as (b1, b2, c), CRD as (c, b1, b2). */
        int64_t st[6] = {C * hw, crd ? b * b * hw : hw, W, crd ? b * hw : b * c * hw,
                         1,      crd ? hw : c * hw};
        int64_t o[4] = {N, c, H * b, W * b};
        return space_put(sh, st, o, shape6, strides6, out4);
    }
    if (H % b || W % b)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "%lldx%lld is not a multiple of %lld",
                                 (long long)H, (long long)W, (long long)b);
    int64_t sh[6] = {N, b, b, C, H / b, W / b};
    int64_t st[6] = {C * H * W, W, 1, H * W, b * W, b};
    int64_t o[4] = {N, C * b * b, H / b, W / b};
    return space_put(sh, st, o, shape6, strides6, out4);
}

static kp_status space_infer(kp__ox_graph *g, kp__ox_gnode *n, bool to_space) {
    int64_t out4[4], sh[6], st[6];
    KP_CHECK(space_plan(g, n, to_space, out4, sh, st));
    return mv_set_out(g, n, 0, 4, out4);
}

static kp_status space_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n, bool to_space) {
    int64_t out4[4], sh[6], st[6];
    KP_CHECK(space_plan(g, n, to_space, out4, sh, st));
    return mv_gather_copy(x, g, n, 6, sh, st, 0);
}

static kp_status d2s_infer(kp__ox_graph *g, kp__ox_gnode *n) { return space_infer(g, n, true); }
static kp_status s2d_infer(kp__ox_graph *g, kp__ox_gnode *n) { return space_infer(g, n, false); }
static kp_status d2s_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    return space_run(x, g, n, true);
}
static kp_status s2d_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    return space_run(x, g, n, false);
}

/* --- the family's table ---------------------------------------------------------- */

const kp__ox_op kp__ox_ops_movement[] = {
    {.name = "Transpose", .since = 1, .infer = transpose_infer, .run = transpose_run},
    {.name = "Concat", .since = 1, .infer = concat_infer, .run = concat_run},
    {.name = "Split",
     .since = 2,
     .infer = split_infer,
     .run = split_run,
     .host_input = mv_host_input_1},
    {.name = "Expand",
     .since = 8,
     .infer = expand_infer,
     .run = expand_run,
     .host_input = mv_host_input_1},
    {.name = "Tile",
     .since = 6,
     .infer = tile_infer,
     .run = tile_run,
     .host_input = mv_host_input_1},
    {.name = "DepthToSpace", .since = 1, .infer = d2s_infer, .run = d2s_run},
    {.name = "SpaceToDepth", .since = 1, .infer = s2d_infer, .run = s2d_run},
    {.name = "Slice",
     .since = 1,
     .infer = kp__ox_slice_infer,
     .run = kp__ox_slice_run,
     .host_input = kp__ox_slice_host_input},
    {.name = "Gather", .since = 1, .infer = kp__ox_gather_infer, .run = kp__ox_gather_run},
    {.name = "GatherElements",
     .since = 11,
     .infer = kp__ox_gather_elements_infer,
     .run = kp__ox_gather_elements_run},
    {.name = "Pad",
     .since = 2,
     .infer = kp__ox_pad_infer,
     .run = kp__ox_pad_run,
     .host_input = kp__ox_pad_host_input},
    {.name = NULL},
};
