/* Shape operators. Reshape, Flatten, Squeeze and Unsqueeze are views: the
 * engine gives their output the input's bytes, so they copy only when
 * folded. Shape, Size, Constant, ConstantOfShape and Range read shapes and
 * constants alone, so the engine folds them at setup; their runs still
 * work on a device, writing values the host knows with the fill and range
 * kernels (ops_movement.c). */
#include <math.h>
#include <string.h>

#include "movement-kernels.h"
#include "../../onnx-impl.h"

static bool sh_host_input_1(int i) { return i == 1; }
static bool sh_host_input_0(int i) { return i == 0; }
static bool sh_host_input_all(int i) { return i >= 0; }

static kp_status sh_input(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, kp__ox_value **v) {
    *v = kp__ox_in(g, n, i);
    if (!*v) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input %zu is missing", i);
    return KP_OK;
}

/* A view's output: input 0's dtype and boolean-ness, a new shape of the same
 * number of elements. */
static kp_status sh_view_out(kp__ox_graph *g, const kp__ox_gnode *n, int ndim,
                             const int64_t *shape) {
    kp__ox_value *in = kp__ox_in(g, n, 0);
    KP_CHECK(kp__ox_set_out(g, n, 0, in->dtype, ndim, shape));
    kp__ox_value *out = kp__ox_out(g, n, 0);
    if (out->numel != in->numel)
        return kp__ox_node_error(n, KP_ERR_INTERNAL, "the view has %lld elements, its input %lld",
                                 (long long)out->numel, (long long)in->numel);
    out->is_bool = in->is_bool;
    return KP_OK;
}

/* --- Reshape and Flatten -------------------------------------------------------- */

static kp_status reshape_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    int64_t buf[KP_MAX_DIMS], allowzero, shape[KP_MAX_DIMS], known = 1;
    const int64_t *want;
    size_t count;
    int free_dim = -1;
    KP_CHECK(kp__ox_const_ints(g, n, 1, buf, KP_MAX_DIMS, &want, &count));
    KP_CHECK(kp__ox_attr_int(n, "allowzero", 0, &allowzero));
    if (count > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the shape has %zu dims, more than %d",
                                 count, KP_MAX_DIMS);
    for (int k = 0; k < (int)count; k++) {
        int64_t v = want[k];
        if (v == 0 && !allowzero) {
            if (k >= in->ndim)
                return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                         "dim %d copies an input dim, but the input has rank %d", k,
                                         in->ndim);
            v = in->shape[k];
        } else if (v == -1 && free_dim < 0) {
            free_dim = k;
            continue;
        } else if (v < 0) {
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "shape[%d] is %lld", k, (long long)v);
        }
        shape[k] = v;
        if (__builtin_mul_overflow(known, v, &known))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the shape's size overflows");
    }
    if (free_dim >= 0) {
        if (known == 0 || in->numel % known)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                     "%lld elements do not fill a -1 dim next to %lld",
                                     (long long)in->numel, (long long)known);
        shape[free_dim] = in->numel / known;
        known = in->numel;
    }
    if (known != in->numel)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "%lld elements reshaped to %lld",
                                 (long long)in->numel, (long long)known);
    return sh_view_out(g, n, (int)count, shape);
}

static kp_status flatten_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    int64_t a, shape[2] = {1, 1};
    KP_CHECK(kp__ox_attr_int(n, "axis", 1, &a));
    if (a < 0) a += in->ndim;
    if (a < 0 || a > in->ndim)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axis is outside [-%d, %d]", in->ndim,
                                 in->ndim);
    for (int k = 0; k < in->ndim; k++) shape[k >= a] *= in->shape[k];
    return sh_view_out(g, n, 2, shape);
}

/* --- Squeeze and Unsqueeze ------------------------------------------------------- */

/* The axes: the attribute before opset 13, input 1 from it. */
static kp_status sh_axes(kp__ox_graph *g, const kp__ox_gnode *n, int64_t *buf, const int64_t **axes,
                         size_t *count) {
    *axes = NULL;
    *count = 0;
    if (n->opset < 13) return kp__ox_attr_ints(n, "axes", axes, count);
    if (!kp__ox_in(g, n, 1)) return KP_OK;
    KP_CHECK(kp__ox_const_ints(g, n, 1, buf, KP_MAX_DIMS, axes, count));
    if (*count > KP_MAX_DIMS) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "%zu axes", *count);
    return KP_OK;
}

static kp_status squeeze_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    int64_t buf[KP_MAX_DIMS], shape[KP_MAX_DIMS];
    const int64_t *axes;
    size_t count;
    bool drop[KP_MAX_DIMS] = {false};
    KP_CHECK(sh_axes(g, n, buf, &axes, &count));
    for (size_t j = 0; j < count; j++) {
        int axis;
        KP_CHECK(kp__ox_axis(n, axes[j], in->ndim, &axis));
        if (in->shape[axis] != 1)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "dim %d is %lld, not 1", axis,
                                     (long long)in->shape[axis]);
        drop[axis] = true;
    }
    int m = 0;
    for (int k = 0; k < in->ndim; k++)
        if (!(axes ? drop[k] : in->shape[k] == 1)) shape[m++] = in->shape[k];
    return sh_view_out(g, n, m, shape);
}

static kp_status unsqueeze_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    int64_t buf[KP_MAX_DIMS], shape[KP_MAX_DIMS];
    const int64_t *axes;
    size_t count;
    bool one[KP_MAX_DIMS] = {false};
    KP_CHECK(sh_axes(g, n, buf, &axes, &count));
    if (!axes) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axes are missing");
    if ((size_t)in->ndim + count > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the output's rank %zu is over %d",
                                 (size_t)in->ndim + count, KP_MAX_DIMS);
    int rank = in->ndim + (int)count, k = 0;
    for (size_t j = 0; j < count; j++) {
        int axis;
        KP_CHECK(kp__ox_axis(n, axes[j], rank, &axis));
        if (one[axis])
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axis %d is listed twice", axis);
        one[axis] = true;
    }
    for (int d = 0; d < rank; d++) shape[d] = one[d] ? 1 : in->shape[k++];
    return sh_view_out(g, n, rank, shape);
}

/* --- Shape and Size ----------------------------------------------------------------- */

/* Writes `count` int64 values the host knows into output 0, repeated over
 * its elements. */
static kp_status sh_fill(const kp__ox_exec *x, kp__ox_graph *g, const kp__ox_gnode *n,
                         const void *vals, int elem, int count) {
    kp__ox_value *out = kp__ox_out(g, n, 0);
    kp__ox_mv_fill_params p = {.out = out->data, .n = out->numel, .elem = elem, .count = count};
    /* Each value is held in the low bytes of its uint64. */
    for (int i = 0; i < count; i++) memcpy(&p.vals[i], (const char *)vals + i * elem, (size_t)elem);
    return kp__ox_launch(x, &kp__ox_mv_fill_kernel, (uint64_t)out->numel, &p);
}

/* Shape's [start, end) of the dims, clamped as opset 15 says. */
static kp_status shape_range(kp__ox_graph *g, const kp__ox_gnode *n, int64_t *start, int64_t *end) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    KP_CHECK(kp__ox_attr_int(n, "start", 0, start));
    KP_CHECK(kp__ox_attr_int(n, "end", in->ndim, end));
    int64_t *ends[2] = {start, end};
    for (int i = 0; i < 2; i++) {
        if (*ends[i] < 0) *ends[i] += in->ndim;
        *ends[i] = *ends[i] < 0 ? 0 : (*ends[i] > in->ndim ? in->ndim : *ends[i]);
    }
    if (*end < *start) *end = *start;
    return KP_OK;
}

static kp_status shape_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    int64_t start, end;
    KP_CHECK(shape_range(g, n, &start, &end));
    int64_t len = end - start;
    return kp__ox_set_out(g, n, 0, KP_I64, 1, &len);
}

static kp_status shape_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    int64_t start, end;
    KP_CHECK(shape_range(g, n, &start, &end));
    if (end == start) return KP_OK;
    return sh_fill(x, g, n, kp__ox_in(g, n, 0)->shape + start, 8, (int)(end - start));
}

static kp_status size_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    int64_t none = 1;
    return kp__ox_set_out(g, n, 0, KP_I64, 0, &none);
}

static kp_status size_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    return sh_fill(x, g, n, &kp__ox_in(g, n, 0)->numel, 8, 1);
}

/* --- Constant and ConstantOfShape -------------------------------------------------- */

typedef struct sh_const {
    kp_dtype dtype;
    bool is_bool;
    int ndim;
    int64_t shape[KP_MAX_DIMS];
    const void *bytes;
} sh_const;

static kp_status sh_tensor(const kp__ox_gnode *n, const kp__ox_attr *a, sh_const *c) {
    if (a->type != KP__OX_ATTR_TENSOR || !a->t)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "attribute %s is not a tensor", a->name);
    const kp__ox_tensor *t = a->t;
    if (!t->dtype_ok)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "attribute %s holds %s", a->name,
                                 kp__ox_type_name(t->onnx_type));
    c->dtype = t->dtype;
    c->is_bool = t->onnx_type == KP__OX_BOOL;
    c->ndim = t->ndim;
    memcpy(c->shape, t->shape, sizeof c->shape);
    c->bytes = t->data;
    return KP_OK;
}

/* Constant's one value attribute, whichever of its forms it is. */
static kp_status constant_value(const kp__ox_gnode *n, sh_const *c) {
    static const char *const refused[] = {"value_string", "value_strings", "sparse_value"};
    static const struct {
        const char *name;
        int type;
        kp_dtype dtype;
    } forms[] = {{"value_float", KP__OX_ATTR_FLOAT, KP_F32},
                 {"value_floats", KP__OX_ATTR_FLOATS, KP_F32},
                 {"value_int", KP__OX_ATTR_INT, KP_I64},
                 {"value_ints", KP__OX_ATTR_INTS, KP_I64}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (kp__ox_attr_find(n, refused[i]))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "attribute %s", refused[i]);
    memset(c, 0, sizeof *c);
    const kp__ox_attr *a = kp__ox_attr_find(n, "value");
    if (a) return sh_tensor(n, a, c);
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        if (!(a = kp__ox_attr_find(n, forms[i].name))) continue;
        if (a->type != forms[i].type)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "attribute %s has type %d", a->name,
                                     a->type);
        bool list = a->type == KP__OX_ATTR_FLOATS || a->type == KP__OX_ATTR_INTS;
        c->dtype = forms[i].dtype;
        c->ndim = list ? 1 : 0;
        c->shape[0] = list ? (int64_t)a->n : 1;
        if (c->dtype == KP_I64)
            c->bytes = list ? (const void *)a->ints : (const void *)&a->i;
        else
            c->bytes = list ? (const void *)a->floats : (const void *)&a->f;
        return KP_OK;
    }
    return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "no value attribute");
}

static kp_status constant_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    sh_const c;
    KP_CHECK(constant_value(n, &c));
    KP_CHECK(kp__ox_set_out(g, n, 0, c.dtype, c.ndim, c.shape));
    kp__ox_out(g, n, 0)->is_bool = c.is_bool;
    return KP_OK;
}

/* Folded, it copies on the host; on a device the model's bytes go up by
 * the stream. */
static kp_status constant_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    sh_const c;
    kp__ox_value *out = kp__ox_out(g, n, 0);
    KP_CHECK(constant_value(n, &c));
    size_t es = kp_dtype_size(c.dtype);
    if (out->numel == 0) return KP_OK;
    if (!x->host) return kp_memcpy_async(x->stream, out->data, c.bytes, (size_t)out->numel * es);
    kp__ox_nd nd = {.ndim = 1, .shape = {out->numel}, .strides = {1}};
    return kp__ox_mv_copy(x, c.bytes, 0, out->data, 0, (int)es, false, &nd);
}

/* ConstantOfShape's element: the value attribute (one element), or f32 0. */
static kp_status cos_value(const kp__ox_gnode *n, sh_const *c) {
    const kp__ox_attr *a = kp__ox_attr_find(n, "value");
    static const float zero = 0.0f;
    memset(c, 0, sizeof *c);
    if (!a) {
        c->dtype = KP_F32;
        c->bytes = &zero;
        return KP_OK;
    }
    KP_CHECK(sh_tensor(n, a, c));
    if (a->t->numel != 1)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "value has %lld elements, not 1",
                                 (long long)a->t->numel);
    return KP_OK;
}

static kp_status cos_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    sh_const c;
    int64_t buf[KP_MAX_DIMS];
    const int64_t *shape;
    size_t count;
    KP_CHECK(cos_value(n, &c));
    KP_CHECK(kp__ox_const_ints(g, n, 0, buf, KP_MAX_DIMS, &shape, &count));
    if (!shape) shape = buf; /* an empty shape: a scalar */
    if (count > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the shape has %zu dims, more than %d",
                                 count, KP_MAX_DIMS);
    for (size_t k = 0; k < count; k++)
        if (shape[k] < 0)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "shape[%zu] is %lld", k,
                                     (long long)shape[k]);
    KP_CHECK(kp__ox_set_out(g, n, 0, c.dtype, (int)count, shape));
    kp__ox_out(g, n, 0)->is_bool = c.is_bool;
    return KP_OK;
}

static kp_status cos_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    sh_const c;
    KP_CHECK(cos_value(n, &c));
    return sh_fill(x, g, n, c.bytes, (int)kp_dtype_size(c.dtype), 1);
}

/* --- Range ----------------------------------------------------------------------------- */

/* A scalar input's value; the inputs are constant (infer refuses otherwise). */
static kp_status range_scalar(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, kp_dtype dt,
                              double *f, int64_t *v) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, i, &in));
    if (in->dtype != dt || in->numel != 1)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input %zu is not one %s", i,
                                 kp_dtype_name(dt));
    if (!in->is_const || !in->host)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "input %zu ('%s') must be known at setup; here it depends on data",
                                 i, in->name);
    switch (dt) {
    case KP_F32: *f = *(const float *)in->host; break;
    case KP_I32: *v = *(const int32_t *)in->host; break;
    case KP_I16: *v = *(const int16_t *)in->host; break;
    default: *v = *(const int64_t *)in->host; break;
    }
    return KP_OK;
}

/* Outputs past this many are surely a mistake in the model. */
#define SH_RANGE_MAX ((int64_t)1 << 40)

static kp_status range_plan(kp__ox_graph *g, const kp__ox_gnode *n, kp__ox_mv_range_params *p) {
    kp__ox_value *in = NULL;
    KP_CHECK(sh_input(g, n, 0, &in));
    kp_dtype dt = in->dtype;
    double f[3] = {0, 0, 0};
    int64_t v[3] = {0, 0, 0};
    if (dt != KP_F32 && dt != KP_I32 && dt != KP_I64 && dt != KP_I16)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "%s inputs (f32, i64, i32, i16 are)",
                                 kp_dtype_name(dt));
    for (size_t i = 0; i < 3; i++) KP_CHECK(range_scalar(g, n, i, dt, &f[i], &v[i]));
    memset(p, 0, sizeof *p);
    if (dt == KP_F32) {
        /* The count as the spec's own expansion computes it, in f32. */
        float q = ceilf(((float)f[1] - (float)f[0]) / (float)f[2]);
        if (f[2] == 0 || !(q < (float)SH_RANGE_MAX))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the range has no sane length");
        p->type = KP__OX_MV_RANGE_F32;
        p->n = q > 0 ? (int64_t)q : 0;
        p->fstart = (float)f[0];
        p->fdelta = (float)f[2];
        return KP_OK;
    }
    int64_t diff;
    if (v[2] == 0 || __builtin_sub_overflow(v[1], v[0], &diff))
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the range has no sane length");
    bool ahead = diff != 0 && (diff > 0) == (v[2] > 0);
    p->n = ahead ? diff / v[2] + (diff % v[2] != 0) : 0;
    if (p->n > SH_RANGE_MAX)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the range has %lld elements",
                                 (long long)p->n);
    p->type = dt == KP_I32 ? KP__OX_MV_RANGE_I32
                           : (dt == KP_I16 ? KP__OX_MV_RANGE_I16 : KP__OX_MV_RANGE_I64);
    p->istart = v[0];
    p->idelta = v[2];
    return KP_OK;
}

static kp_status range_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_mv_range_params p;
    KP_CHECK(range_plan(g, n, &p));
    return kp__ox_set_out(g, n, 0, kp__ox_in(g, n, 0)->dtype, 1, &p.n);
}

static kp_status range_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_mv_range_params p;
    KP_CHECK(range_plan(g, n, &p));
    p.out = kp__ox_out(g, n, 0)->data;
    return kp__ox_launch(x, &kp__ox_mv_range_kernel, (uint64_t)p.n, &p);
}

/* --- the family's table --------------------------------------------------------- */

const kp__ox_op kp__ox_ops_shape[] = {
    {.name = "Reshape",
     .since = 5,
     .infer = reshape_infer,
     .run = kp__ox_mv_run_view,
     .host_input = sh_host_input_1,
     .view = true},
    {.name = "Flatten",
     .since = 1,
     .infer = flatten_infer,
     .run = kp__ox_mv_run_view,
     .view = true},
    {.name = "Squeeze",
     .since = 1,
     .infer = squeeze_infer,
     .run = kp__ox_mv_run_view,
     .host_input = sh_host_input_1,
     .view = true},
    {.name = "Unsqueeze",
     .since = 1,
     .infer = unsqueeze_infer,
     .run = kp__ox_mv_run_view,
     .host_input = sh_host_input_1,
     .view = true},
    {.name = "Shape",
     .since = 1,
     .infer = shape_infer,
     .run = shape_run,
     .host_input = sh_host_input_0},
    {.name = "Size",
     .since = 1,
     .infer = size_infer,
     .run = size_run,
     .host_input = sh_host_input_0},
    {.name = "Constant", .since = 1, .infer = constant_infer, .run = constant_run},
    {.name = "ConstantOfShape",
     .since = 9,
     .infer = cos_infer,
     .run = cos_run,
     .host_input = sh_host_input_0},
    {.name = "Range",
     .since = 11,
     .infer = range_infer,
     .run = range_run,
     .host_input = sh_host_input_all},
    {.name = NULL},
};
