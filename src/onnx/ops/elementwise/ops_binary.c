/* The broadcasting elementwise operators: arithmetic (Add, Sub, Mul, Div,
 * Pow, Mod, PRelu), comparisons and logic (bool results), Where, and the
 * variadic Max, Min, Sum and Mean, which run as a chain of two-input steps
 * into their output. One kernel serves them all (elementwise-kernels.h);
 * each launch describes its inputs against the output's shape with a bit
 * per dimension (steps or broadcasts), after dropping the output's size-1
 * dimensions and merging neighbours that every input treats alike, so the
 * common cases (equal shapes, a scalar, a per-channel vector) index with
 * few multiplies. The family's table is in ops_elementwise.c. */
#include <string.h>

#include "binary-kernels.h"
#include "../../onnx-impl.h"

_Static_assert(sizeof(kp__ox_binary_params) <= KP_MAX_KERNEL_PARAMS, "binary params too large");

/* Three kernels, one host form: the cuda forms of float arithmetic and
 * comparisons come lean, for launches whose inputs are whole or single
 * elements (ndim <= 1: no index arithmetic at all) and for broadcasting
 * ones, so each keeps many threads resident; a third carries the rest
 * (integers, Pow, logic, Where). */
static void bin_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kp__ox_binary_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    kp__ox_binary_span(p, true, true, (int64_t)lo, (int64_t)hi, 1);
}

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__ox_binary_flat_cuda; /* ops_elementwise.cu */
extern const kp_device_kernel kp__ox_binary_nd_cuda;
extern const kp_device_kernel kp__ox_binary_other_cuda;
#define KP__OX_BINARY_CUDA(form) {"cuda", &kp__ox_binary_##form##_cuda},
#else
#define KP__OX_BINARY_CUDA(form)
#endif

#define KP__OX_BINARY_KERNEL(form)                 \
    static const kp_kernel bin_##form##_kernel = { \
        "onnx_binary_" #form,                      \
        sizeof(kp__ox_binary_params),              \
        {{"host", &(const kp_host_kernel){bin_host}}, KP__OX_BINARY_CUDA(form)}};
KP__OX_BINARY_KERNEL(flat)
KP__OX_BINARY_KERNEL(nd)
KP__OX_BINARY_KERNEL(other)

static const char *bin_dtype_name(const kp__ox_value *v) {
    return v->is_bool ? "bool" : kp_dtype_name(v->dtype);
}

static bool bin_bool_result(int op) { return op >= KP__OX_B_EQUAL && op <= KP__OX_B_XOR; }

/* Fills the launch's dimensions (innermost first), masks and, for
 * launches indexed in 32 bits, each input's strides and the dividers. */
static void bin_plan(const kp__ox_value *out, const kp__ox_value *const *in, int n_in,
                     kp__ox_binary_params *p) {
    int64_t shape[KP_MAX_DIMS];
    unsigned prev = 0;
    p->ndim = 0;
    memset(p->mask, 0, sizeof p->mask);
    for (int k = out->ndim - 1; k >= 0; k--) {
        if (out->shape[k] == 1) continue;
        unsigned bits = 0;
        for (int m = 0; m < n_in; m++) {
            int d = k - (out->ndim - in[m]->ndim);
            if (d >= 0 && in[m]->shape[d] != 1) bits |= 1u << m;
        }
        if (p->ndim > 0 && bits == prev) {
            shape[p->ndim - 1] *= out->shape[k];
            continue;
        }
        int j = p->ndim++;
        shape[j] = out->shape[k];
        for (int m = 0; m < n_in; m++)
            if (bits & (1u << m)) p->mask[m] |= (uint8_t)(1u << j);
        prev = bits;
    }
    if (p->n > INT32_MAX) {
        memcpy(p->ix.large, shape, sizeof(int64_t) * (size_t)p->ndim);
        return;
    }
    kp__ox_bcast_small *b = &p->ix.small;
    for (int m = 0; m < n_in; m++) {
        uint32_t st = 1;
        for (int k = 0; k < p->ndim; k++) {
            b->stride[m][k] = (p->mask[m] >> k) & 1u ? st : 0;
            if ((p->mask[m] >> k) & 1u) st *= (uint32_t)shape[k];
        }
    }
    for (int k = 0; k < p->ndim; k++) {
        b->shape[k] = (uint32_t)shape[k];
        kp__ox_divider(b->shape[k], &b->magic[k], &b->shift[k]);
    }
}

static kp_status bin_launch(const kp__ox_exec *x, const kp__ox_value *const *in, int n_in,
                            kp__ox_value *out, int op, float alpha) {
    if (out->numel == 0) return KP_OK; /* an empty output: nothing to plan or run */
    kp__ox_binary_params p = {.y = out->data, .n = out->numel, .op = op, .alpha = alpha};
    for (int m = 0; m < n_in; m++) p.in[m] = in[m]->data;
    p.dtype = in[op == KP__OX_B_WHERE ? 1 : 0]->dtype;
    p.dtype1 = in[1]->dtype;
    bin_plan(out, in, n_in, &p);
    const kp_kernel *k = &bin_other_kernel;
    if (kp__ox_binary_is_float(&p)) k = p.ndim > 1 ? &bin_nd_kernel : &bin_flat_kernel;
    return kp__ox_launch(x, k, (uint64_t)p.n, &p);
}

/* The dtypes an operator takes: KP_OK, or an error naming the input. */
static kp_status bin_check_dtypes(const kp__ox_gnode *n, int op, kp__ox_value *const *in) {
    const kp__ox_value *a = in[0], *b = in[1];
    switch (op) {
    case KP__OX_B_WHERE:
        if (a->dtype != KP_U8)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "condition '%s' has dtype %s, not bool",
                                     a->name, bin_dtype_name(a));
        a = in[1];
        b = in[2];
        break;
    case KP__OX_B_AND:
    case KP__OX_B_OR:
    case KP__OX_B_XOR:
        if (a->dtype != KP_U8) b = a; /* names the input at fault below */
        if (b->dtype != KP_U8)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "input '%s' has dtype %s, not bool",
                                     b->name, bin_dtype_name(b));
        return KP_OK;
    case KP__OX_B_POW:
        if (a->is_bool || b->is_bool)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "Pow of bools is not supported");
        return KP_OK;
    case KP__OX_B_MOD:
    case KP__OX_B_DIV:
    case KP__OX_B_SUB:
    case KP__OX_B_ADD:
    case KP__OX_B_MUL:
    case KP__OX_B_PRELU:
    case KP__OX_B_ADD_DIV:
        if (a->is_bool)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                     "arithmetic on bool input '%s' is not supported", a->name);
        break;
    default: break;
    }
    if (a->dtype != b->dtype)
        return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                 "inputs '%s' (%s) and '%s' (%s) differ in dtype", a->name,
                                 bin_dtype_name(a), b->name, bin_dtype_name(b));
    return KP_OK;
}

static kp_status bin_inputs(kp__ox_graph *g, const kp__ox_gnode *n, size_t count,
                            kp__ox_value **in) {
    for (size_t i = 0; i < count; i++) {
        in[i] = kp__ox_in(g, n, i);
        if (!in[i]) return kp__ox_node_error(n, KP_ERR_PARSE, "input %zu is missing", i);
    }
    return KP_OK;
}

/* The output shape of inputs broadcast together. */
static kp_status bin_shape(const kp__ox_gnode *n, kp__ox_value *const *in, size_t count, int *nd,
                           int64_t *shape) {
    *nd = in[0]->ndim;
    memcpy(shape, in[0]->shape, sizeof(int64_t) * KP_MAX_DIMS);
    for (size_t i = 1; i < count; i++) {
        int64_t tmp[KP_MAX_DIMS];
        memcpy(tmp, shape, sizeof tmp);
        KP_CHECK(kp__ox_broadcast(n, *nd, tmp, in[i]->ndim, in[i]->shape, nd, shape));
    }
    return KP_OK;
}

kp_status kp__ox_binary_infer(kp__ox_graph *g, kp__ox_gnode *n, int op) {
    kp__ox_value *in[3];
    size_t count = op == KP__OX_B_WHERE ? 3 : 2;
    KP_CHECK(bin_inputs(g, n, count, in));
    KP_CHECK(bin_check_dtypes(n, op, in));
    int nd;
    int64_t shape[KP_MAX_DIMS];
    KP_CHECK(bin_shape(n, in, count, &nd, shape));
    if (op == KP__OX_B_PRELU) {
        /* The slope broadcasts to X, never X to the slope. */
        bool same = nd == in[0]->ndim;
        for (int d = 0; same && d < nd; d++) same = shape[d] == in[0]->shape[d];
        if (!same)
            return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                     "slope '%s' does not broadcast to the shape of X '%s'",
                                     in[1]->name, in[0]->name);
    }
    if (op == KP__OX_B_MOD) {
        int64_t fmod;
        KP_CHECK(kp__ox_attr_int(n, "fmod", 0, &fmod));
    }
    const kp__ox_value *src = in[op == KP__OX_B_WHERE ? 1 : 0];
    bool to_bool = bin_bool_result(op);
    KP_CHECK(kp__ox_set_out(g, n, 0, to_bool ? KP_U8 : src->dtype, nd, shape));
    kp__ox_out(g, n, 0)->is_bool = to_bool || (op == KP__OX_B_WHERE && src->is_bool);
    return KP_OK;
}

kp_status kp__ox_binary_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n, int op) {
    const kp__ox_value *in[3] = {kp__ox_in(g, n, 0), kp__ox_in(g, n, 1), kp__ox_in(g, n, 2)};
    if (op == KP__OX_B_MOD) {
        int64_t fmod;
        KP_CHECK(kp__ox_attr_int(n, "fmod", 0, &fmod));
        if (fmod) op = KP__OX_B_FMOD;
    }
    return bin_launch(x, in, op == KP__OX_B_WHERE ? 3 : 2, kp__ox_out(g, n, 0), op, 1.0f);
}

/* --- Max, Min, Sum, Mean -------------------------------------------------------- */

kp_status kp__ox_variadic_infer(kp__ox_graph *g, kp__ox_gnode *n, int op) {
    size_t count = n->n_in;
    if (count == 0) return kp__ox_node_error(n, KP_ERR_PARSE, "no inputs");
    kp__ox_value *first = NULL;
    KP_CHECK(bin_inputs(g, n, 1, &first));
    if (first->is_bool || (op == KP__OX_B_ADD_DIV && !kp__ox_is_float(first->dtype)))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "input '%s' has dtype %s, which this operator does not support",
                                 first->name, bin_dtype_name(first));
    int nd = first->ndim;
    int64_t shape[KP_MAX_DIMS];
    memcpy(shape, first->shape, sizeof shape);
    for (size_t i = 1; i < count; i++) {
        kp__ox_value *v = kp__ox_in(g, n, i);
        if (!v) return kp__ox_node_error(n, KP_ERR_PARSE, "input %zu is missing", i);
        if (v->dtype != first->dtype || v->is_bool)
            return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                     "inputs '%s' (%s) and '%s' (%s) differ in dtype", first->name,
                                     bin_dtype_name(first), v->name, bin_dtype_name(v));
        int64_t tmp[KP_MAX_DIMS];
        memcpy(tmp, shape, sizeof tmp);
        KP_CHECK(kp__ox_broadcast(n, nd, tmp, v->ndim, v->shape, &nd, shape));
    }
    return kp__ox_set_out(g, n, 0, first->dtype, nd, shape);
}

/* Step k combines the output so far (the first two inputs at step 1) with
 * input k; elementwise steps read each output element before writing it,
 * so the output may be an input of its own step. Mean divides at the last. */
kp_status kp__ox_variadic_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n, int op) {
    kp__ox_value *out = kp__ox_out(g, n, 0);
    size_t count = n->n_in;
    if (count == 1) return kp__ox_ew_copy(x, kp__ox_in(g, n, 0), out);
    for (size_t k = 1; k < count; k++) {
        const kp__ox_value *in[2] = {k == 1 ? kp__ox_in(g, n, 0) : out, kp__ox_in(g, n, k)};
        int step = op;
        if (op == KP__OX_B_ADD_DIV && k + 1 < count) step = KP__OX_B_ADD;
        KP_CHECK(bin_launch(x, in, 2, out, step, (float)count));
    }
    return KP_OK;
}
