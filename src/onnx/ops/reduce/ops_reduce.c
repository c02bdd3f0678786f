/* The reduction and normalisation operators: ReduceSum and its nine
 * siblings, ArgMax and ArgMin, Softmax, LogSoftmax and Hardmax,
 * LayerNormalization, MeanVarianceNormalization, LpNormalization and
 * CumSum. Each sees its input as rows (reduce-kernels.h says how): infer
 * checks attributes and sets shapes, and run derives the same rows from
 * the current shapes and attributes and launches one kernel. Deriving them
 * again costs a few dozen integer operations, so run needs no state from
 * prepare and works the same when folding. */
#include <string.h>

#include "../../onnx-impl.h"
#include "reduce-kernels.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__ox_reduce_cuda; /* ops_reduce.cu */
extern const kp_device_kernel kp__ox_arg_cuda;
extern const kp_device_kernel kp__ox_softmax_cuda;
extern const kp_device_kernel kp__ox_norm_cuda;
extern const kp_device_kernel kp__ox_cumsum_cuda;
#define KP__OX_RED_CUDA(k) {"cuda", &k},
#else
#define KP__OX_RED_CUDA(k)
#endif

/* A host form: the rows that this launch's blocks own, one after another. */
#define KP__OX_ROWS_HOST(fn, type, row_fn)                                                    \
    static void fn(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t n) { \
        const type *p = pp;                                                                   \
        uint64_t lo, hi;                                                                      \
        (void)block;                                                                          \
        kp_host_block_span((uint64_t)p->rows.n_rows, grid, first, n, &lo, &hi);               \
        for (uint64_t i = lo; i < hi; i++) row_fn(p, (int64_t)i);                             \
    }

KP__OX_ROWS_HOST(reduce_host, kp__ox_reduce_params, kp__ox_reduce_row)
KP__OX_ROWS_HOST(arg_host, kp__ox_arg_params, kp__ox_arg_row)
KP__OX_ROWS_HOST(softmax_host, kp__ox_softmax_params, kp__ox_softmax_row)
KP__OX_ROWS_HOST(norm_host, kp__ox_norm_params, kp__ox_norm_row)
KP__OX_ROWS_HOST(cumsum_host, kp__ox_cumsum_params, kp__ox_cumsum_row)

_Static_assert(sizeof(kp__ox_reduce_params) <= KP_MAX_KERNEL_PARAMS, "reduce params too large");
_Static_assert(sizeof(kp__ox_arg_params) <= KP_MAX_KERNEL_PARAMS, "arg params too large");
_Static_assert(sizeof(kp__ox_softmax_params) <= KP_MAX_KERNEL_PARAMS, "softmax params too large");
_Static_assert(sizeof(kp__ox_norm_params) <= KP_MAX_KERNEL_PARAMS, "norm params too large");
_Static_assert(sizeof(kp__ox_cumsum_params) <= KP_MAX_KERNEL_PARAMS, "cumsum params too large");

static const kp_kernel reduce_kernel = {
    "onnx_reduce",
    sizeof(kp__ox_reduce_params),
    {{"host", &(const kp_host_kernel){reduce_host}}, KP__OX_RED_CUDA(kp__ox_reduce_cuda)}};
static const kp_kernel arg_kernel = {
    "onnx_arg",
    sizeof(kp__ox_arg_params),
    {{"host", &(const kp_host_kernel){arg_host}}, KP__OX_RED_CUDA(kp__ox_arg_cuda)}};
static const kp_kernel softmax_kernel = {
    "onnx_softmax",
    sizeof(kp__ox_softmax_params),
    {{"host", &(const kp_host_kernel){softmax_host}}, KP__OX_RED_CUDA(kp__ox_softmax_cuda)}};
static const kp_kernel norm_kernel = {
    "onnx_norm",
    sizeof(kp__ox_norm_params),
    {{"host", &(const kp_host_kernel){norm_host}}, KP__OX_RED_CUDA(kp__ox_norm_cuda)}};
static const kp_kernel cumsum_kernel = {
    "onnx_cumsum",
    sizeof(kp__ox_cumsum_params),
    {{"host", &(const kp_host_kernel){cumsum_host}}, KP__OX_RED_CUDA(kp__ox_cumsum_cuda)}};

/* --- rows ---------------------------------------------------------------------- */

/* The rows of a contiguous tensor whose dimensions in `mask` (bit k for
 * dimension k) are reduced. */
static void rows_make(int ndim, const int64_t *shape, uint32_t mask, kp__ox_rows *r) {
    int64_t strides[KP_MAX_DIMS], sz[KP_MAX_DIMS], st[KP_MAX_DIMS], s = 1;
    bool red[KP_MAX_DIMS] = {false};
    int m = 0;
    for (int k = ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= shape[k];
    }
    for (int k = 0; k < ndim; k++) {
        if (shape[k] == 1) continue;
        bool rd = (mask >> k) & 1u;
        if (m > 0 && red[m - 1] == rd) { /* contiguous neighbours of one kind: one entry */
            sz[m - 1] *= shape[k];
            st[m - 1] = strides[k];
            continue;
        }
        sz[m] = shape[k];
        st[m] = strides[k];
        red[m++] = rd;
    }
    memset(r, 0, sizeof *r);
    r->n_rows = r->n_red = 1;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < m; i++) {
            if (red[i] != (pass == 1)) continue;
            r->shape[r->n_dims] = sz[i];
            r->stride[r->n_dims++] = st[i];
            if (pass == 0)
                r->n_rows *= sz[i];
            else
                r->n_red *= sz[i];
        }
        if (pass == 0) r->n_keep = r->n_dims;
    }
    if (r->n_dims == r->n_keep) { /* nothing reduced: rows of one element */
        r->shape[r->n_dims] = 1;
        r->stride[r->n_dims++] = 0;
    }
}

/* Whether a cuda launch gives each row a thread block rather than a
 * thread: when rows are long and contiguous (a block's loads then
 * coalesce where a thread per row would stride through memory), or when
 * there are too few rows to fill the device one thread each. */
static bool rows_block(const kp__ox_exec *x, const kp__ox_rows *r) {
    if (x->host) return false;
    bool contiguous = r->stride[r->n_dims - 1] == 1;
    return (contiguous && r->n_red >= 64) || (r->n_rows < 1024 && r->n_red >= 1024);
}

/* Launches a row kernel: on the host, blocks of about KP__OX_HOST_ITEMS
 * elements' work (whole rows); on cuda, a block per row or a thread per
 * row, the grid striding over the rest. */
static kp_status rows_launch(const kp__ox_exec *x, const kp_kernel *k, const kp__ox_rows *r,
                             bool block_rows, const void *params) {
    uint64_t rows = (uint64_t)r->n_rows;
    if (rows == 0) return KP_OK;
    /* rows * n_red is the input's element count, which fits. */
    uint64_t work = rows * (uint64_t)(r->n_red > 1 ? r->n_red : 1);
    uint64_t host_blocks = work / KP__OX_HOST_ITEMS + 1;
    if (host_blocks > rows) host_blocks = rows;
    uint64_t blocks = block_rows ? rows : (rows + KP__OX_THREADS - 1) / KP__OX_THREADS;
    if (blocks > KP__OX_MAX_BLOCKS) blocks = KP__OX_MAX_BLOCKS;
    kp_dim3 grid = {(uint32_t)blocks, 1, 1}, block = {KP__OX_THREADS, 1, 1};
    return kp__ox_launch_geom(x, k, grid, block, 0, host_blocks, params);
}

static uint32_t mask_from(int first, int rank) {
    return (uint32_t)((1u << rank) - 1u) & ~(uint32_t)((1u << first) - 1u);
}

/* Input i, present and of one of the dtypes allowed (KP_DTYPE_COUNT ends the list). */
static kp_status need_input(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, const kp_dtype *ok,
                            const kp__ox_value **out) {
    const kp__ox_value *v = kp__ox_in(g, n, i);
    if (!v) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input %zu is missing", i);
    for (; *ok != KP_DTYPE_COUNT; ok++) {
        if (v->dtype == *ok && !v->is_bool) {
            *out = v;
            return KP_OK;
        }
    }
    return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %zu ('%s'): dtype %s is not supported",
                             i, v->name, v->is_bool ? "bool" : kp_dtype_name(v->dtype));
}

static const kp_dtype f32_only[] = {KP_F32, KP_DTYPE_COUNT};
static const kp_dtype f32_ints[] = {KP_F32, KP_I64, KP_I32, KP_DTYPE_COUNT};

static bool host_input_1(int i) { return i == 1; }

/* --- Reduce* --------------------------------------------------------------------- */

static const struct {
    const char *name;
    int op;
} reduce_names[] = {
    {"ReduceSum", KP__OX_R_SUM},       {"ReduceMean", KP__OX_R_MEAN},
    {"ReduceMax", KP__OX_R_MAX},       {"ReduceMin", KP__OX_R_MIN},
    {"ReduceProd", KP__OX_R_PROD},     {"ReduceL1", KP__OX_R_L1},
    {"ReduceL2", KP__OX_R_L2},         {"ReduceSumSquare", KP__OX_R_SUMSQ},
    {"ReduceLogSum", KP__OX_R_LOGSUM}, {"ReduceLogSumExp", KP__OX_R_LOGSUMEXP},
};

static int reduce_op(const kp__ox_gnode *n) {
    for (size_t i = 0; i < sizeof reduce_names / sizeof reduce_names[0]; i++)
        if (strcmp(n->src->op_type, reduce_names[i].name) == 0) return reduce_names[i].op;
    return KP__OX_R_SUM;
}

/* The reduced dimensions. The axes are an attribute until ReduceSum-13 and
 * the others' opset 18, and an optional constant input from then on, with
 * noop_with_empty_axes saying whether no axes means all or none (*noop). */
static kp_status reduce_mask(kp__ox_graph *g, const kp__ox_gnode *n, int rank, uint32_t *mask,
                             bool *noop) {
    const int64_t *axes = NULL;
    size_t count = 0;
    int64_t buf[2 * KP_MAX_DIMS], noop_attr = 0;
    int since = strcmp(n->src->op_type, "ReduceSum") == 0 ? 13 : 18;
    if (n->opset >= since) {
        KP_CHECK(kp__ox_attr_int(n, "noop_with_empty_axes", 0, &noop_attr));
        /* An empty axes input says "no axes" by its shape alone, so it
         * need not be known at setup. */
        const kp__ox_value *v = kp__ox_in(g, n, 1);
        if (v && v->numel > 0)
            KP_CHECK(kp__ox_const_ints(g, n, 1, buf, 2 * KP_MAX_DIMS, &axes, &count));
        if (kp__ox_attr_find(n, "axes"))
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG,
                                     "axes are an input from opset %d, not an attribute", since);
    } else {
        KP_CHECK(kp__ox_attr_ints(n, "axes", &axes, &count));
    }
    *noop = count == 0 && noop_attr != 0;
    *mask = count == 0 && !*noop ? mask_from(0, rank) : 0;
    for (size_t i = 0; i < count; i++) {
        int a;
        KP_CHECK(kp__ox_axis(n, axes[i], rank, &a));
        *mask |= 1u << a;
    }
    return KP_OK;
}

static kp_status reduce_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    int op = reduce_op(n);
    bool ints =
        op == KP__OX_R_SUM || op == KP__OX_R_MAX || op == KP__OX_R_MIN || op == KP__OX_R_PROD;
    KP_CHECK(need_input(g, n, 0, ints ? f32_ints : f32_only, &x));
    int64_t keep, shape[KP_MAX_DIMS];
    uint32_t mask;
    bool noop;
    KP_CHECK(kp__ox_attr_int(n, "keepdims", 1, &keep));
    KP_CHECK(reduce_mask(g, n, x->ndim, &mask, &noop));
    int nd = 0;
    for (int k = 0; k < x->ndim; k++) {
        if (!((mask >> k) & 1u))
            shape[nd++] = x->shape[k];
        else if (keep)
            shape[nd++] = 1;
    }
    return kp__ox_set_out(g, n, 0, x->dtype, nd, shape);
}

static kp_status reduce_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    uint32_t mask;
    bool noop;
    KP_CHECK(reduce_mask(g, n, in->ndim, &mask, &noop));
    /* A no-op reduction copies: a sum of one element is that element. */
    kp__ox_reduce_params p = {.in = in->data,
                              .out = kp__ox_out(g, n, 0)->data,
                              .op = noop ? KP__OX_R_SUM : reduce_op(n),
                              .dtype = (int)in->dtype};
    rows_make(in->ndim, in->shape, mask, &p.rows);
    p.block_rows = p.dtype == KP_F32 && rows_block(x, &p.rows);
    return rows_launch(x, &reduce_kernel, &p.rows, p.block_rows, &p);
}

/* --- ArgMax, ArgMin ---------------------------------------------------------------- */

static kp_status arg_attrs(const kp__ox_gnode *n, int rank, int *axis, int64_t *keep,
                           int64_t *last) {
    int64_t a;
    KP_CHECK(kp__ox_attr_int(n, "axis", 0, &a));
    KP_CHECK(kp__ox_attr_int(n, "keepdims", 1, keep));
    KP_CHECK(kp__ox_attr_int(n, "select_last_index", 0, last));
    return kp__ox_axis(n, a, rank, axis);
}

static kp_status arg_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    KP_CHECK(need_input(g, n, 0, f32_ints, &x));
    int axis;
    int64_t keep, last, shape[KP_MAX_DIMS];
    if (x->ndim == 0) return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "the input is a scalar");
    KP_CHECK(arg_attrs(n, x->ndim, &axis, &keep, &last));
    if (x->shape[axis] == 0) {
        int64_t rows = 1;
        for (int k = 0; k < x->ndim; k++) rows *= k == axis ? 1 : x->shape[k];
        if (rows > 0)
            return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axis %d has no elements", axis);
    }
    int nd = 0;
    for (int k = 0; k < x->ndim; k++) {
        if (k != axis)
            shape[nd++] = x->shape[k];
        else if (keep)
            shape[nd++] = 1;
    }
    return kp__ox_set_out(g, n, 0, KP_I64, nd, shape);
}

static kp_status arg_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    int axis;
    int64_t keep, last;
    KP_CHECK(arg_attrs(n, in->ndim, &axis, &keep, &last));
    kp__ox_arg_params p = {.in = in->data,
                           .out = kp__ox_out(g, n, 0)->data,
                           .dtype = (int)in->dtype,
                           .is_min = strcmp(n->src->op_type, "ArgMin") == 0,
                           .last = last != 0};
    rows_make(in->ndim, in->shape, 1u << axis, &p.rows);
    if (p.rows.n_red == 0) return KP_OK;
    return rows_launch(x, &arg_kernel, &p.rows, false, &p);
}

/* --- Softmax, LogSoftmax, Hardmax --------------------------------------------------- */

/* Before opset 13 these flatten the input to 2-D at `axis` (default 1) and
 * normalise each row of the result, that is over every dimension from
 * axis on; from 13 they normalise along `axis` alone (default -1). */
static kp_status softmax_mask(const kp__ox_gnode *n, int rank, uint32_t *mask) {
    bool flat = n->opset < 13;
    int64_t a;
    int axis;
    KP_CHECK(kp__ox_attr_int(n, "axis", flat ? 1 : -1, &a));
    if (flat && rank > 0 && a == rank) { /* a [N, 1] matrix: rows of one element */
        *mask = 0;
        return KP_OK;
    }
    KP_CHECK(kp__ox_axis(n, a, rank, &axis));
    *mask = flat ? mask_from(axis, rank) : 1u << axis;
    return KP_OK;
}

static kp_status softmax_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    uint32_t mask;
    KP_CHECK(need_input(g, n, 0, f32_only, &x));
    KP_CHECK(softmax_mask(n, x->ndim, &mask));
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape);
}

static kp_status softmax_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    const char *op = n->src->op_type;
    uint32_t mask;
    KP_CHECK(softmax_mask(n, in->ndim, &mask));
    kp__ox_softmax_params p = {.in = in->data,
                               .out = kp__ox_out(g, n, 0)->data,
                               .kind = strcmp(op, "Hardmax") == 0      ? KP__OX_HARDMAX
                                       : strcmp(op, "LogSoftmax") == 0 ? KP__OX_LOGSOFTMAX
                                                                       : KP__OX_SOFTMAX};
    rows_make(in->ndim, in->shape, mask, &p.rows);
    if (p.rows.n_red == 0) return KP_OK;
    p.block_rows = rows_block(x, &p.rows);
    return rows_launch(x, &softmax_kernel, &p.rows, p.block_rows, &p);
}

/* --- LayerNormalization, MeanVarianceNormalization, LpNormalization ----------------- */

static kp_status norm_launch(const kp__ox_exec *x, kp__ox_norm_params *p, const kp__ox_value *in,
                             uint32_t mask) {
    rows_make(in->ndim, in->shape, mask, &p->rows);
    if (p->rows.n_red == 0) return KP_OK;
    p->block_rows = rows_block(x, &p->rows);
    return rows_launch(x, &norm_kernel, &p->rows, p->block_rows, p);
}

/* Scale and B are flattened and broadcast against the normalised part of
 * X, as the operator's function body does: n elements, or one. */
static kp_status layer_param(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, int64_t len) {
    const kp__ox_value *v = NULL;
    KP_CHECK(need_input(g, n, i, f32_only, &v));
    if (v->numel != len && v->numel != 1)
        return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                 "input %zu ('%s') has %lld elements where the normalised shape "
                                 "has %lld",
                                 i, v->name, (long long)v->numel, (long long)len);
    return KP_OK;
}

static kp_status layer_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    int64_t a, stash, shape[KP_MAX_DIMS];
    int axis;
    float eps;
    KP_CHECK(need_input(g, n, 0, f32_only, &x));
    KP_CHECK(kp__ox_attr_int(n, "axis", -1, &a));
    KP_CHECK(kp__ox_attr_int(n, "stash_type", KP__OX_FLOAT, &stash));
    KP_CHECK(kp__ox_attr_float(n, "epsilon", 1e-5f, &eps));
    KP_CHECK(kp__ox_axis(n, a, x->ndim, &axis));
    if (stash != KP__OX_FLOAT)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "stash_type %lld (%s) is not supported",
                                 (long long)stash, kp__ox_type_name((int)stash));
    int64_t len = 1, rows = 1;
    for (int k = 0; k < x->ndim; k++) {
        if (k >= axis)
            len *= x->shape[k];
        else
            rows *= x->shape[k];
        shape[k] = k >= axis ? 1 : x->shape[k];
    }
    /* Mean and InvStdDev are written along with each row's elements, so
     * rows without elements would leave them unset. */
    if (len == 0 && rows > 0)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "the normalised shape is empty");
    KP_CHECK(layer_param(g, n, 1, len));
    if (kp__ox_in(g, n, 2)) KP_CHECK(layer_param(g, n, 2, len));
    KP_CHECK(kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape));
    for (size_t i = 1; i < 3; i++)
        if (kp__ox_out(g, n, i)) KP_CHECK(kp__ox_set_out(g, n, i, KP_F32, x->ndim, shape));
    return KP_OK;
}

static kp_status layer_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0), *scale = kp__ox_in(g, n, 1);
    const kp__ox_value *bias = kp__ox_in(g, n, 2);
    kp__ox_value *mean = kp__ox_out(g, n, 1), *inv = kp__ox_out(g, n, 2);
    int64_t a;
    int axis;
    float eps;
    KP_CHECK(kp__ox_attr_int(n, "axis", -1, &a));
    KP_CHECK(kp__ox_attr_float(n, "epsilon", 1e-5f, &eps));
    KP_CHECK(kp__ox_axis(n, a, in->ndim, &axis));
    kp__ox_norm_params p = {.in = in->data,
                            .out = kp__ox_out(g, n, 0)->data,
                            .scale = scale->data,
                            .bias = bias ? bias->data : NULL,
                            .mean = mean ? mean->data : NULL,
                            .inv_std = inv ? inv->data : NULL,
                            .eps = eps,
                            .kind = KP__OX_N_LAYER,
                            .scale_one = scale->numel == 1,
                            .bias_one = bias && bias->numel == 1};
    return norm_launch(x, &p, in, mask_from(axis, in->ndim));
}

/* MeanVarianceNormalization's axes: an attribute, [0, 2, 3] by default. */
static kp_status mvn_mask(const kp__ox_gnode *n, int rank, uint32_t *mask) {
    static const int64_t def[] = {0, 2, 3};
    const int64_t *axes;
    size_t count;
    KP_CHECK(kp__ox_attr_ints(n, "axes", &axes, &count));
    if (!kp__ox_attr_find(n, "axes")) {
        axes = def;
        count = 3;
    }
    *mask = 0;
    for (size_t i = 0; i < count; i++) {
        int a;
        KP_CHECK(kp__ox_axis(n, axes[i], rank, &a));
        *mask |= 1u << a;
    }
    return KP_OK;
}

/* LpNormalization: one axis (default -1), p of 1 or 2 (default 2). */
static kp_status lp_attrs(const kp__ox_gnode *n, int rank, uint32_t *mask, int *kind) {
    int64_t a, p;
    int axis;
    KP_CHECK(kp__ox_attr_int(n, "axis", -1, &a));
    KP_CHECK(kp__ox_attr_int(n, "p", 2, &p));
    if (p != 1 && p != 2)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "p = %lld (only 1 and 2 are defined)",
                                 (long long)p);
    KP_CHECK(kp__ox_axis(n, a, rank, &axis));
    *mask = 1u << axis;
    *kind = p == 1 ? KP__OX_N_LP1 : KP__OX_N_LP2;
    return KP_OK;
}

static kp_status norm_attrs(const kp__ox_gnode *n, int rank, uint32_t *mask, int *kind) {
    if (strcmp(n->src->op_type, "LpNormalization") == 0) return lp_attrs(n, rank, mask, kind);
    *kind = KP__OX_N_MVN;
    return mvn_mask(n, rank, mask);
}

static kp_status norm_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    uint32_t mask;
    int kind;
    KP_CHECK(need_input(g, n, 0, f32_only, &x));
    KP_CHECK(norm_attrs(n, x->ndim, &mask, &kind));
    return kp__ox_set_out(g, n, 0, KP_F32, x->ndim, x->shape);
}

static kp_status norm_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    uint32_t mask;
    kp__ox_norm_params p = {.in = in->data, .out = kp__ox_out(g, n, 0)->data};
    KP_CHECK(norm_attrs(n, in->ndim, &mask, &p.kind));
    return norm_launch(x, &p, in, mask);
}

/* --- CumSum ---------------------------------------------------------------------- */

static kp_status cumsum_attrs(kp__ox_graph *g, const kp__ox_gnode *n, int rank, int *axis,
                              int64_t *exclusive, int64_t *reverse) {
    int64_t buf[1];
    const int64_t *vals;
    size_t count;
    KP_CHECK(kp__ox_const_ints(g, n, 1, buf, 1, &vals, &count));
    if (count != 1)
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "axis has %zu values, not one", count);
    KP_CHECK(kp__ox_attr_int(n, "exclusive", 0, exclusive));
    KP_CHECK(kp__ox_attr_int(n, "reverse", 0, reverse));
    return kp__ox_axis(n, vals[0], rank, axis);
}

static kp_status cumsum_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *x = NULL;
    int axis;
    int64_t exclusive, reverse;
    KP_CHECK(need_input(g, n, 0, f32_ints, &x));
    if (!kp__ox_in(g, n, 1))
        return kp__ox_node_error(n, KP_ERR_INVALID_ARG, "input 1 (axis) is missing");
    KP_CHECK(cumsum_attrs(g, n, x->ndim, &axis, &exclusive, &reverse));
    return kp__ox_set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

static kp_status cumsum_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    int axis;
    int64_t exclusive, reverse;
    KP_CHECK(cumsum_attrs(g, n, in->ndim, &axis, &exclusive, &reverse));
    kp__ox_cumsum_params p = {.in = in->data,
                              .out = kp__ox_out(g, n, 0)->data,
                              .dtype = (int)in->dtype,
                              .exclusive = exclusive != 0,
                              .reverse = reverse != 0};
    rows_make(in->ndim, in->shape, 1u << axis, &p.rows);
    if (p.rows.n_red == 0) return KP_OK;
    return rows_launch(x, &cumsum_kernel, &p.rows, false, &p);
}

/* --- the table -------------------------------------------------------------------- */

#define KP__OX_REDUCE(op) \
    { .name = op, .since = 1, .infer = reduce_infer, .run = reduce_run, .host_input = host_input_1 }

const kp__ox_op kp__ox_ops_reduce[] = {
    KP__OX_REDUCE("ReduceSum"),
    KP__OX_REDUCE("ReduceMean"),
    KP__OX_REDUCE("ReduceMax"),
    KP__OX_REDUCE("ReduceMin"),
    KP__OX_REDUCE("ReduceProd"),
    KP__OX_REDUCE("ReduceL1"),
    KP__OX_REDUCE("ReduceL2"),
    KP__OX_REDUCE("ReduceSumSquare"),
    KP__OX_REDUCE("ReduceLogSum"),
    KP__OX_REDUCE("ReduceLogSumExp"),
    {.name = "ArgMax", .since = 1, .infer = arg_infer, .run = arg_run},
    {.name = "ArgMin", .since = 1, .infer = arg_infer, .run = arg_run},
    {.name = "Softmax", .since = 1, .infer = softmax_infer, .run = softmax_run},
    {.name = "LogSoftmax", .since = 1, .infer = softmax_infer, .run = softmax_run},
    {.name = "Hardmax", .since = 1, .infer = softmax_infer, .run = softmax_run},
    {.name = "LayerNormalization", .since = 17, .infer = layer_infer, .run = layer_run},
    {.name = "MeanVarianceNormalization", .since = 9, .infer = norm_infer, .run = norm_run},
    {.name = "LpNormalization", .since = 1, .infer = norm_infer, .run = norm_run},
    {.name = "CumSum",
     .since = 11,
     .infer = cumsum_infer,
     .run = cumsum_run,
     .host_input = host_input_1},
    {.name = NULL},
};
