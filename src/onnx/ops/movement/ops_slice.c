/* The movement operators with the most to work out per node: Slice (a
 * strided copy once the spec's clamping is done), Gather and GatherElements
 * (their indices read where they live, so they need not be constant) and
 * Pad. ops_movement.c lists them in the family's table. */
#include <string.h>

#include "movement-kernels.h"
#include "../../onnx-impl.h"

/* --- Slice ----------------------------------------------------------------------- */

/* Starts, ends, axes and steps: attributes before opset 10, inputs from it.
 * Absent axes mean 0..count-1, absent steps 1. */
typedef struct slice_args {
    const int64_t *starts, *ends, *axes, *steps;
    size_t count;
    int64_t buf[4][KP_MAX_DIMS];
} slice_args;

static kp_status slice_list(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, const char *name,
                            int64_t *buf, const int64_t **vals, size_t *count) {
    *vals = NULL;
    *count = 0;
    if (n->opset < 10) return kp__ox_attr_ints(n, name, vals, count);
    if (!kp__ox_in(g, n, i)) return KP_OK;
    KP_CHECK(kp__ox_const_ints(g, n, i, buf, KP_MAX_DIMS, vals, count));
    /* An empty list is still a list: present, unlike an omitted input. */
    if (!*vals) *vals = buf;
    return KP_OK;
}

static kp_status slice_args_read(kp__ox_graph *g, const kp__ox_gnode *n, slice_args *a) {
    static const char *const names[4] = {"starts", "ends", "axes", "steps"};
    const int64_t **lists[4] = {&a->starts, &a->ends, &a->axes, &a->steps};
    size_t counts[4];
    for (int k = 0; k < 4; k++)
        KP_CHECK(slice_list(g, n, (size_t)k + 1, names[k], a->buf[k], lists[k], &counts[k]));
    if (!a->starts || !a->ends)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "starts or ends is missing");
    a->count = counts[0];
    for (int k = 1; k < 4; k++)
        if (*lists[k] && counts[k] != a->count)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "%s has %zu entries, starts %zu",
                                     names[k], counts[k], a->count);
    return KP_OK;
}

/* One axis: the clamped start, and the output length, per the spec. */
static kp_status slice_axis(const kp__ox_gnode *n, int64_t dim, int64_t start, int64_t end,
                            int64_t step, int64_t *first, int64_t *len) {
    if (step == 0) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "a step is 0");
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    /* Both ends stay within [0, dim], or [-1, dim - 1] going backwards,
     * where an empty dim leaves start at -1 too. */
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? dim : dim - 1;
    start = start < 0 ? 0 : start;
    start = start > hi ? hi : start;
    end = end < lo ? lo : (end > hi ? hi : end);
    *first = start;
    if (step > 0)
        *len = end > start ? (int64_t)((uint64_t)(end - start - 1) / (uint64_t)step) + 1 : 0;
    else
        *len = start > end ? (int64_t)((uint64_t)(start - end - 1) / (0 - (uint64_t)step)) + 1 : 0;
    return KP_OK;
}

/* The output's shape, and the input's strides and offset that read it. */
static kp_status slice_plan(kp__ox_graph *g, const kp__ox_gnode *n, int64_t *shape,
                            int64_t *strides, int64_t *offset) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    if (!in) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input 0 is missing");
    slice_args a;
    KP_CHECK(slice_args_read(g, n, &a));
    if (a.count > (size_t)in->ndim)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "%zu axes for rank %d", a.count, in->ndim);
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    kp__ox_mv_strides(in->ndim, in->shape, strides);
    *offset = 0;
    bool seen[KP_MAX_DIMS] = {false};
    for (size_t j = 0; j < a.count; j++) {
        int axis;
        KP_CHECK(kp__ox_axis(n, a.axes ? a.axes[j] : (int64_t)j, in->ndim, &axis));
        if (seen[axis])
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axis %d is sliced twice", axis);
        seen[axis] = true;
        int64_t step = a.steps ? a.steps[j] : 1, first = 0, len = 0;
        KP_CHECK(slice_axis(n, in->shape[axis], a.starts[j], a.ends[j], step, &first, &len));
        shape[axis] = len;
        if (len == 0) continue;
        *offset += first * strides[axis];
        /* With two or more elements |step| < dim, so the product fits. */
        if (len > 1) strides[axis] *= step;
    }
    return KP_OK;
}

kp_status kp__ox_slice_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    int64_t shape[KP_MAX_DIMS], strides[KP_MAX_DIMS], offset;
    KP_CHECK(slice_plan(g, n, shape, strides, &offset));
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(kp__ox_set_out(g, n, 0, in->dtype, in->ndim, shape));
    kp__ox_out(g, n, 0)->is_bool = in->is_bool;
    return KP_OK;
}

kp_status kp__ox_slice_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    int64_t shape[KP_MAX_DIMS], strides[KP_MAX_DIMS], offset;
    kp__ox_nd nd;
    KP_CHECK(slice_plan(g, n, shape, strides, &offset));
    KP_CHECK(kp__ox_mv_nd(n, in->ndim, shape, strides, &nd));
    return kp__ox_mv_copy(x, in->data, offset, out->data, 0, (int)kp_dtype_size(in->dtype), false,
                          &nd);
}

bool kp__ox_slice_host_input(int i) { return i >= 1; }

/* --- Gather and GatherElements ----------------------------------------------------- */

static kp_status gather_inputs(kp__ox_graph *g, const kp__ox_gnode *n, kp__ox_value **data,
                               kp__ox_value **idx, int *axis) {
    *data = kp__ox_in(g, n, 0);
    *idx = kp__ox_in(g, n, 1);
    if (!*data || !*idx) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "an input is missing");
    if ((*idx)->dtype != KP_I64 && (*idx)->dtype != KP_I32)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "indices of %s (int64 and int32 are)",
                                 kp_dtype_name((*idx)->dtype));
    int64_t a;
    KP_CHECK(kp__ox_attr_int(n, "axis", 0, &a));
    return kp__ox_axis(n, a, (*data)->ndim, axis);
}

kp_status kp__ox_gather_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *data = NULL, *idx = NULL;
    int axis;
    KP_CHECK(gather_inputs(g, n, &data, &idx, &axis));
    int rank = data->ndim - 1 + idx->ndim;
    if (rank > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the output's rank %d is over %d", rank,
                                 KP_MAX_DIMS);
    int64_t shape[KP_MAX_DIMS];
    int m = 0;
    for (int k = 0; k < axis; k++) shape[m++] = data->shape[k];
    for (int k = 0; k < idx->ndim; k++) shape[m++] = idx->shape[k];
    for (int k = axis + 1; k < data->ndim; k++) shape[m++] = data->shape[k];
    KP_CHECK(kp__ox_set_out(g, n, 0, data->dtype, rank, shape));
    kp__ox_out(g, n, 0)->is_bool = data->is_bool;
    return KP_OK;
}

/* An index outside the axis reads as zero rather than outside the input:
 * the kernel has no way to report it. */
kp_status kp__ox_gather_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *data, *idx, *out = kp__ox_out(g, n, 0);
    int axis;
    KP_CHECK(gather_inputs(g, n, &data, &idx, &axis));
    int64_t inner = 1;
    for (int k = axis + 1; k < data->ndim; k++) inner *= data->shape[k];
    kp__ox_mv_index_params p = {
        .in = data->data,
        .out = out->data,
        .n = out->numel,
        .elem = (int32_t)kp_dtype_size(data->dtype),
        .kind = KP__OX_MV_GATHER,
        .u.g = {.idx = idx->data,
                .idx64 = idx->dtype == KP_I64,
                .count = idx->numel,
                .inner = inner,
                .axis_dim = data->shape[axis]},
    };
    return kp__ox_launch(x, &kp__ox_mv_index_kernel, (uint64_t)out->numel, &p);
}

kp_status kp__ox_gather_elements_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *data = NULL, *idx = NULL;
    int axis;
    KP_CHECK(gather_inputs(g, n, &data, &idx, &axis));
    if (idx->ndim != data->ndim)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "indices of rank %d for data of rank %d",
                                 idx->ndim, data->ndim);
    for (int k = 0; k < data->ndim; k++)
        if (k != axis && idx->shape[k] > data->shape[k])
            return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                     "indices have %lld in dim %d, data only %lld",
                                     (long long)idx->shape[k], k, (long long)data->shape[k]);
    KP_CHECK(kp__ox_set_out(g, n, 0, data->dtype, idx->ndim, idx->shape));
    kp__ox_out(g, n, 0)->is_bool = data->is_bool;
    return KP_OK;
}

kp_status kp__ox_gather_elements_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *data, *idx, *out = kp__ox_out(g, n, 0);
    int axis;
    KP_CHECK(gather_inputs(g, n, &data, &idx, &axis));
    kp__ox_mv_index_params p = {
        .in = data->data,
        .out = out->data,
        .n = out->numel,
        .elem = (int32_t)kp_dtype_size(data->dtype),
        .kind = KP__OX_MV_GATHER_ELEMENTS,
        .u.ge = {.idx = idx->data,
                 .idx64 = idx->dtype == KP_I64,
                 .axis = axis,
                 .axis_dim = data->shape[axis],
                 .nd = {.ndim = idx->ndim}},
    };
    memcpy(p.u.ge.nd.shape, idx->shape, sizeof p.u.ge.nd.shape);
    kp__ox_mv_strides(data->ndim, data->shape, p.u.ge.nd.strides);
    return kp__ox_launch(x, &kp__ox_mv_index_kernel, (uint64_t)out->numel, &p);
}

/* --- Pad ----------------------------------------------------------------------------- */

/* The attribute form's float value as an element of `dt`, in the low bytes. */
static kp_status pad_fill_bits(const kp__ox_gnode *n, kp_dtype dt, float v, uint64_t *bits) {
    *bits = 0;
    switch (dt) {
    case KP_F32: memcpy(bits, &v, sizeof v); return KP_OK;
    case KP_I64: *bits = (uint64_t)(int64_t)v; return KP_OK;
    case KP_U64: *bits = (uint64_t)v; return KP_OK;
    case KP_I32: *bits = (uint32_t)(int32_t)v; return KP_OK;
    case KP_I16: *bits = (uint16_t)(int16_t)v; return KP_OK;
    case KP_I8: *bits = (uint8_t)(int8_t)v; return KP_OK;
    case KP_U8: *bits = (uint8_t)v; return KP_OK;
    default:
        if (v == 0.0f) return KP_OK;
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "a nonzero value attribute for %s data",
                                 kp_dtype_name(dt));
    }
}

static kp_status pad_mode(const kp__ox_gnode *n, int32_t *mode) {
    const char *s;
    KP_CHECK(kp__ox_attr_str(n, "mode", "constant", &s));
    if (strcmp(s, "constant") == 0)
        *mode = KP__OX_MV_PAD_CONSTANT;
    else if (strcmp(s, "reflect") == 0)
        *mode = KP__OX_MV_PAD_REFLECT;
    else if (strcmp(s, "edge") == 0)
        *mode = KP__OX_MV_PAD_EDGE;
    else
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "mode '%s' (constant, reflect, edge are)",
                                 s);
    return KP_OK;
}

/* pads (begins of every padded axis, then ends) and the axes they are for:
 * the attribute before opset 11, inputs 1 and 3 from it. */
static kp_status pad_begin_end(kp__ox_graph *g, const kp__ox_gnode *n, int rank, int64_t *begin,
                               int64_t *end) {
    int64_t pbuf[2 * KP_MAX_DIMS], abuf[KP_MAX_DIMS];
    const int64_t *pads, *axes = NULL;
    size_t count, n_axes = (size_t)rank;
    if (n->opset < 11) {
        KP_CHECK(kp__ox_attr_ints(n, "pads", &pads, &count));
        if (!pads) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "attribute pads is missing");
    } else {
        KP_CHECK(kp__ox_const_ints(g, n, 1, pbuf, 2 * KP_MAX_DIMS, &pads, &count));
        if (kp__ox_in(g, n, 3))
            KP_CHECK(kp__ox_const_ints(g, n, 3, abuf, KP_MAX_DIMS, &axes, &n_axes));
    }
    if (count != 2 * n_axes)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "pads has %zu entries for %zu axes", count,
                                 n_axes);
    for (int k = 0; k < rank; k++) begin[k] = end[k] = 0;
    for (size_t j = 0; j < n_axes; j++) {
        int axis = (int)j;
        if (axes) KP_CHECK(kp__ox_axis(n, axes[j], rank, &axis));
        begin[axis] = pads[j];
        end[axis] = pads[j + n_axes];
    }
    return KP_OK;
}

static kp_status pad_plan(kp__ox_graph *g, const kp__ox_gnode *n, kp__ox_mv_pad *p) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    if (!in) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input 0 is missing");
    int64_t end[KP_MAX_DIMS];
    p->ndim = in->ndim;
    KP_CHECK(pad_mode(n, &p->mode));
    KP_CHECK(pad_begin_end(g, n, in->ndim, p->begin, end));
    for (int k = 0; k < in->ndim; k++) {
        int64_t d = in->shape[k], o;
        if (__builtin_add_overflow(d, p->begin[k], &o) || __builtin_add_overflow(o, end[k], &o) ||
            o < 0)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "pads make dim %d %s", k,
                                     "negative or too large");
        if (d == 0 && o > 0 && p->mode != KP__OX_MV_PAD_CONSTANT)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "dim %d is empty: nothing to %s", k,
                                     p->mode == KP__OX_MV_PAD_EDGE ? "repeat" : "reflect");
        p->in_shape[k] = d;
        p->out_shape[k] = o;
    }
    return KP_OK;
}

kp_status kp__ox_pad_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_mv_pad p;
    KP_CHECK(pad_plan(g, n, &p));
    kp__ox_value *in = kp__ox_in(g, n, 0), *cv = kp__ox_in(g, n, 2);
    if (n->opset >= 11 && cv && (cv->dtype != in->dtype || cv->numel != 1))
        return kp__ox_node_error(
            n, KP_ERR_MISMATCH, "constant_value is %s of %lld elements for %s data",
            kp_dtype_name(cv->dtype), (long long)cv->numel, kp_dtype_name(in->dtype));
    if (n->opset < 11) {
        uint64_t bits;
        float v;
        KP_CHECK(kp__ox_attr_float(n, "value", 0.0f, &v));
        KP_CHECK(pad_fill_bits(n, in->dtype, v, &bits));
    }
    KP_CHECK(kp__ox_set_out(g, n, 0, in->dtype, in->ndim, p.out_shape));
    kp__ox_out(g, n, 0)->is_bool = in->is_bool;
    return KP_OK;
}

kp_status kp__ox_pad_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = kp__ox_in(g, n, 0), *out = kp__ox_out(g, n, 0);
    kp__ox_value *cv = n->opset >= 11 ? kp__ox_in(g, n, 2) : NULL;
    kp__ox_mv_index_params p = {
        .in = in->data,
        .out = out->data,
        .n = out->numel,
        .fill_ptr = cv ? cv->data : NULL,
        .elem = (int32_t)kp_dtype_size(in->dtype),
        .kind = KP__OX_MV_PAD,
    };
    KP_CHECK(pad_plan(g, n, &p.u.pad));
    if (n->opset < 11) {
        float v;
        KP_CHECK(kp__ox_attr_float(n, "value", 0.0f, &v));
        KP_CHECK(pad_fill_bits(n, in->dtype, v, &p.fill));
    }
    return kp__ox_launch(x, &kp__ox_mv_index_kernel, (uint64_t)out->numel, &p);
}

bool kp__ox_pad_host_input(int i) { return i == 1 || i == 3; }
