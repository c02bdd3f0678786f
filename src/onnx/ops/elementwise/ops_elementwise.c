/* Elementwise operators: the unary ones, Clip, Cast and CastLike, Identity
 * and Dropout here; the broadcasting ones (arithmetic, comparisons, logic,
 * Where, and the variadic Max, Min, Sum and Mean) in ops_binary.c. Every
 * one is a single pass over its output (elementwise-kernels.h holds the
 * per-element math for both forms); this file also holds the family's
 * table, whose entries reach the shared infer and run functions through
 * one small wrapper per operator, so a run never searches for its op. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "elementwise-kernels.h"
#include "../../onnx-impl.h"

#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__ox_unary_cuda; /* ops_elementwise.cu */
extern const kp_device_kernel kp__ox_clip_cuda;
extern const kp_device_kernel kp__ox_cast_cuda;
#define KP__OX_EW_CUDA(name) {"cuda", &kp__ox_##name##_cuda},
#else
#define KP__OX_EW_CUDA(name)
#endif

_Static_assert(sizeof(kp__ox_unary_params) <= KP_MAX_KERNEL_PARAMS, "unary params too large");
_Static_assert(sizeof(kp__ox_clip_params) <= KP_MAX_KERNEL_PARAMS, "clip params too large");
_Static_assert(sizeof(kp__ox_cast_params) <= KP_MAX_KERNEL_PARAMS, "cast params too large");

/* --- kernels: host forms ----------------------------------------------------- */

static void ew_unary_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                          uint64_t nb) {
    const kp__ox_unary_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    kp__ox_unary_span(p, (int64_t)lo, (int64_t)hi, 1);
}

static void ew_clip_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kp__ox_clip_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    kp__ox_clip_span(p, (int64_t)lo, (int64_t)hi, 1);
}

static void ew_cast_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const kp__ox_cast_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    kp__ox_cast_span(p, (int64_t)lo, (int64_t)hi, 1);
}

static const kp_kernel ew_unary_kernel = {
    "onnx_unary",
    sizeof(kp__ox_unary_params),
    {{"host", &(const kp_host_kernel){ew_unary_host}}, KP__OX_EW_CUDA(unary)}};
static const kp_kernel ew_clip_kernel = {
    "onnx_clip",
    sizeof(kp__ox_clip_params),
    {{"host", &(const kp_host_kernel){ew_clip_host}}, KP__OX_EW_CUDA(clip)}};
static const kp_kernel ew_cast_kernel = {
    "onnx_cast",
    sizeof(kp__ox_cast_params),
    {{"host", &(const kp_host_kernel){ew_cast_host}}, KP__OX_EW_CUDA(cast)}};

static bool ew_is_int(kp_dtype dt) {
    return dt == KP_I64 || dt == KP_I32 || dt == KP_I16 || dt == KP_I8 || dt == KP_U8 ||
           dt == KP_U64;
}

static const char *ew_dtype_name(const kp__ox_value *v) {
    return v->is_bool ? "bool" : kp_dtype_name(v->dtype);
}

static kp_status ew_unsupported_dtype(const kp__ox_gnode *n, const kp__ox_value *v) {
    return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                             "input '%s' has dtype %s, which this operator does not support",
                             v->name, ew_dtype_name(v));
}

static kp_status ew_input(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, kp__ox_value **out) {
    *out = kp__ox_in(g, n, i);
    if (!*out) return kp__ox_node_error(n, KP_ERR_PARSE, "input %zu is missing", i);
    return KP_OK;
}

kp_status kp__ox_ew_copy(const kp__ox_exec *x, const kp__ox_value *in, kp__ox_value *out) {
    kp__ox_unary_params p = {
        .x = in->data, .y = out->data, .n = out->numel, .op = KP__OX_U_COPY, .dtype = in->dtype};
    return kp__ox_launch(x, &ew_unary_kernel, (uint64_t)p.n, &p);
}

/* --- unary ------------------------------------------------------------------- */

/* The attributes into the kernel's alpha, beta, gamma (and Gelu's choice of
 * formula into its op); infer calls it to refuse bad ones early, run to
 * fill the launch. */
static kp_status ew_unary_attrs(const kp__ox_gnode *n, kp__ox_unary_params *p) {
    int64_t neg, pos;
    const char *approx;
    switch (p->op) {
    case KP__OX_U_HARDSIGMOID:
        KP_CHECK(kp__ox_attr_float(n, "alpha", 0.2f, &p->alpha));
        return kp__ox_attr_float(n, "beta", 0.5f, &p->beta);
    case KP__OX_U_HARDSWISH:
        p->alpha = 1.0f / 6.0f;
        p->beta = 0.5f;
        return KP_OK;
    case KP__OX_U_LEAKYRELU: return kp__ox_attr_float(n, "alpha", 0.01f, &p->alpha);
    case KP__OX_U_ELU:
    case KP__OX_U_CELU:
    case KP__OX_U_THRESHOLDEDRELU: return kp__ox_attr_float(n, "alpha", 1.0f, &p->alpha);
    case KP__OX_U_SELU:
        KP_CHECK(kp__ox_attr_float(n, "alpha", 1.67326319217681884765625f, &p->alpha));
        return kp__ox_attr_float(n, "gamma", 1.05070102214813232421875f, &p->gamma);
    case KP__OX_U_SHRINK:
        KP_CHECK(kp__ox_attr_float(n, "lambd", 0.5f, &p->alpha));
        return kp__ox_attr_float(n, "bias", 0.0f, &p->beta);
    case KP__OX_U_ISINF:
        KP_CHECK(kp__ox_attr_int(n, "detect_negative", 1, &neg));
        KP_CHECK(kp__ox_attr_int(n, "detect_positive", 1, &pos));
        p->alpha = neg != 0;
        p->beta = pos != 0;
        return KP_OK;
    case KP__OX_U_GELU:
        KP_CHECK(kp__ox_attr_str(n, "approximate", "none", &approx));
        if (strcmp(approx, "tanh") == 0)
            p->op = KP__OX_U_GELU_TANH;
        else if (strcmp(approx, "none") != 0)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                     "approximate '%s' is not supported (none, tanh)", approx);
        return KP_OK;
    default: return KP_OK;
    }
}

static kp_status ew_unary_infer(kp__ox_graph *g, kp__ox_gnode *n, int op) {
    kp__ox_value *x = NULL;
    KP_CHECK(ew_input(g, n, 0, &x));
    bool fl = kp__ox_is_float(x->dtype), ok, out_bool = false;
    switch (op) {
    case KP__OX_U_COPY: ok = true; break;
    case KP__OX_U_NOT: ok = out_bool = x->dtype == KP_U8; break;
    case KP__OX_U_ISNAN:
    case KP__OX_U_ISINF:
        ok = fl;
        out_bool = true;
        break;
    case KP__OX_U_ABS:
    case KP__OX_U_NEG:
    case KP__OX_U_SIGN:
    case KP__OX_U_RELU: ok = fl || (ew_is_int(x->dtype) && !x->is_bool); break;
    default: ok = fl; break;
    }
    if (!ok) return ew_unsupported_dtype(n, x);
    kp__ox_unary_params p = {.op = op};
    KP_CHECK(ew_unary_attrs(n, &p));
    KP_CHECK(kp__ox_set_out(g, n, 0, out_bool ? KP_U8 : x->dtype, x->ndim, x->shape));
    kp__ox_out(g, n, 0)->is_bool = out_bool || (op == KP__OX_U_COPY && x->is_bool);
    return KP_OK;
}

static kp_status ew_unary_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n, int op) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    kp__ox_value *out = kp__ox_out(g, n, 0);
    kp__ox_unary_params p = {
        .x = in->data, .y = out->data, .n = out->numel, .op = op, .dtype = in->dtype};
    KP_CHECK(ew_unary_attrs(n, &p));
    return kp__ox_launch(x, &ew_unary_kernel, (uint64_t)p.n, &p);
}

/* --- Clip ---------------------------------------------------------------------- */

/* Before opset 11 the bounds are attributes, defaulting to float's extremes. */
static kp_status ew_clip_attrs(const kp__ox_gnode *n, kp__ox_clip_params *p) {
    KP_CHECK(kp__ox_attr_float(n, "min", -FLT_MAX, &p->flo));
    return kp__ox_attr_float(n, "max", FLT_MAX, &p->fhi);
}

static kp_status ew_clip_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    KP_CHECK(ew_input(g, n, 0, &x));
    bool from_inputs = n->opset >= 11;
    if (!kp__ox_is_float(x->dtype) && !(from_inputs && ew_is_int(x->dtype) && !x->is_bool))
        return ew_unsupported_dtype(n, x);
    for (size_t i = 1; from_inputs && i <= 2; i++) {
        const kp__ox_value *b = kp__ox_in(g, n, i);
        if (!b) continue;
        if (b->dtype != x->dtype)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "bound '%s' has dtype %s, the input %s",
                                     b->name, ew_dtype_name(b), ew_dtype_name(x));
        if (b->numel != 1)
            return kp__ox_node_error(n, KP_ERR_MISMATCH,
                                     "bound '%s' has %lld elements; it must be a scalar", b->name,
                                     (long long)b->numel);
    }
    kp__ox_clip_params p;
    if (!from_inputs) KP_CHECK(ew_clip_attrs(n, &p));
    return kp__ox_set_out(g, n, 0, x->dtype, x->ndim, x->shape);
}

/* A bound given as an input: baked into the launch when it is a constant,
 * else read by the kernel from the device. */
static void ew_clip_bound(const kp__ox_value *b, kp__ox_clip_params *p, bool high) {
    if (!b) return;
    if (b->is_const && b->host) {
        float f = kp__ox_ld_f(b->host, b->dtype, 0);
        int64_t v = kp__ox_ld_i(b->host, b->dtype, 0);
        *(high ? &p->fhi : &p->flo) = f;
        *(high ? &p->ihi : &p->ilo) = v;
    } else {
        *(high ? &p->hi : &p->lo) = b->data;
    }
}

static kp_status ew_clip_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    kp__ox_value *out = kp__ox_out(g, n, 0);
    kp__ox_clip_params p = {.x = in->data,
                            .y = out->data,
                            .n = out->numel,
                            .dtype = in->dtype,
                            .flo = -INFINITY,
                            .fhi = INFINITY,
                            .ilo = INT64_MIN,
                            .ihi = INT64_MAX};
    if (in->dtype == KP_U64) {
        p.ilo = 0;
        p.ihi = -1; /* UINT64_MAX's bits */
    }
    if (n->opset >= 11) {
        ew_clip_bound(kp__ox_in(g, n, 1), &p, false);
        ew_clip_bound(kp__ox_in(g, n, 2), &p, true);
    } else {
        KP_CHECK(ew_clip_attrs(n, &p));
    }
    return kp__ox_launch(x, &ew_clip_kernel, (uint64_t)p.n, &p);
}

/* --- Cast, CastLike -------------------------------------------------------------- */

static kp_status ew_cast_target(const kp__ox_gnode *n, kp_dtype *dt, bool *is_bool) {
    if (!kp__ox_attr_find(n, "to"))
        return kp__ox_node_error(n, KP_ERR_PARSE, "attribute 'to' is missing");
    int64_t to;
    KP_CHECK(kp__ox_attr_int(n, "to", 0, &to));
    if (to < 0 || to > INT32_MAX || !kp__ox_dtype((int)to, dt))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "casting to %s is not supported",
                                 kp__ox_type_name(to < 0 || to > INT32_MAX ? -1 : (int)to));
    *is_bool = to == KP__OX_BOOL;
    return KP_OK;
}

static kp_status ew_cast_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    KP_CHECK(ew_input(g, n, 0, &x));
    kp_dtype dt = KP_F32;
    bool is_bool = false;
    if (strcmp(n->src->op_type, "CastLike") == 0) {
        kp__ox_value *like = NULL;
        KP_CHECK(ew_input(g, n, 1, &like));
        dt = like->dtype;
        is_bool = like->is_bool;
    } else {
        KP_CHECK(ew_cast_target(n, &dt, &is_bool));
    }
    KP_CHECK(kp__ox_set_out(g, n, 0, dt, x->ndim, x->shape));
    kp__ox_out(g, n, 0)->is_bool = is_bool;
    return KP_OK;
}

/* bfloat16 results are truncated before opset 19, as ONNX's reference did
 * then; from 19 they round to nearest even, as it does since. */
static kp_status ew_cast_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    const kp__ox_value *in = kp__ox_in(g, n, 0);
    kp__ox_value *out = kp__ox_out(g, n, 0);
    kp__ox_cast_params p = {.x = in->data,
                            .y = out->data,
                            .n = out->numel,
                            .from = in->dtype,
                            .to = out->dtype,
                            .to_bool = out->is_bool && !in->is_bool,
                            .bf16_trunc = n->opset < 19};
    return kp__ox_launch(x, &ew_cast_kernel, (uint64_t)p.n, &p);
}

/* CastLike reads only its second input's dtype. */
static bool ew_castlike_host_input(int i) { return i == 1; }

/* --- Identity, Dropout ------------------------------------------------------------ */

static kp_status ew_identity_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    return ew_unary_infer(g, n, KP__OX_U_COPY);
}

static kp_status ew_identity_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    return kp__ox_ew_copy(x, kp__ox_in(g, n, 0), kp__ox_out(g, n, 0));
}

/* Inference only: the output is the input, and the optional mask says
 * every element was kept (bool from opset 10, the input's dtype before).
 * A training_mode that is not a constant false is refused, since dropping
 * at random is training's business. Dropout is no view: the mask is work. */
static kp_status ew_dropout_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *x = NULL;
    KP_CHECK(ew_input(g, n, 0, &x));
    const kp__ox_value *t = n->opset >= 12 ? kp__ox_in(g, n, 2) : NULL;
    if (t) {
        if (!t->is_const || !t->host || t->numel != 1)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                     "training_mode '%s' is not a constant scalar; only "
                                     "inference is supported",
                                     t->name);
        if (kp__ox_ld_i(t->host, t->dtype, 0) != 0)
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                     "training_mode is true; only inference is supported");
    }
    KP_CHECK(kp__ox_set_out(g, n, 0, x->dtype, x->ndim, x->shape));
    kp__ox_out(g, n, 0)->is_bool = x->is_bool;
    if (!kp__ox_out(g, n, 1)) return KP_OK;
    bool mask_bool = n->opset >= 10;
    KP_CHECK(kp__ox_set_out(g, n, 1, mask_bool ? KP_U8 : x->dtype, x->ndim, x->shape));
    kp__ox_out(g, n, 1)->is_bool = mask_bool;
    return KP_OK;
}

/* Dropout reads its ratio and training_mode on the host, if at all. */
static bool ew_dropout_host_input(int i) { return i >= 1; }

static kp_status ew_dropout_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    KP_CHECK(kp__ox_ew_copy(x, kp__ox_in(g, n, 0), kp__ox_out(g, n, 0)));
    kp__ox_value *mask = kp__ox_out(g, n, 1);
    if (!mask) return KP_OK;
    kp__ox_unary_params p = {
        .y = mask->data, .n = mask->numel, .op = KP__OX_U_ONE, .dtype = mask->dtype};
    return kp__ox_launch(x, &ew_unary_kernel, (uint64_t)p.n, &p);
}

/* --- the table ------------------------------------------------------------------- */

/* clang-format off */
/* name, first opset, kernel op */
#define KP__OX_UNARY_TABLE(X)                                                              \
    X(Relu, 1, KP__OX_U_RELU) X(Sigmoid, 1, KP__OX_U_SIGMOID) X(Tanh, 1, KP__OX_U_TANH)    \
    X(Exp, 1, KP__OX_U_EXP) X(Log, 1, KP__OX_U_LOG) X(Sqrt, 1, KP__OX_U_SQRT)              \
    X(Abs, 1, KP__OX_U_ABS) X(Neg, 1, KP__OX_U_NEG) X(Reciprocal, 1, KP__OX_U_RECIPROCAL)  \
    X(Floor, 1, KP__OX_U_FLOOR) X(Ceil, 1, KP__OX_U_CEIL) X(Round, 11, KP__OX_U_ROUND)     \
    X(Erf, 9, KP__OX_U_ERF) X(Sin, 7, KP__OX_U_SIN) X(Cos, 7, KP__OX_U_COS)                \
    X(Tan, 7, KP__OX_U_TAN) X(Asin, 7, KP__OX_U_ASIN) X(Acos, 7, KP__OX_U_ACOS)            \
    X(Atan, 7, KP__OX_U_ATAN) X(Sinh, 9, KP__OX_U_SINH) X(Cosh, 9, KP__OX_U_COSH)          \
    X(Asinh, 9, KP__OX_U_ASINH) X(Acosh, 9, KP__OX_U_ACOSH) X(Atanh, 9, KP__OX_U_ATANH)    \
    X(Softplus, 1, KP__OX_U_SOFTPLUS) X(Softsign, 1, KP__OX_U_SOFTSIGN)                    \
    X(Sign, 9, KP__OX_U_SIGN) X(HardSigmoid, 1, KP__OX_U_HARDSIGMOID)                      \
    X(HardSwish, 14, KP__OX_U_HARDSWISH) X(LeakyRelu, 1, KP__OX_U_LEAKYRELU)               \
    X(Elu, 1, KP__OX_U_ELU) X(Selu, 1, KP__OX_U_SELU) X(Celu, 12, KP__OX_U_CELU)           \
    X(ThresholdedRelu, 10, KP__OX_U_THRESHOLDEDRELU) X(Gelu, 20, KP__OX_U_GELU)            \
    X(Mish, 18, KP__OX_U_MISH) X(Shrink, 9, KP__OX_U_SHRINK) X(IsNaN, 9, KP__OX_U_ISNAN)   \
    X(IsInf, 10, KP__OX_U_ISINF) X(Not, 1, KP__OX_U_NOT)

/* name, first opset, kernel op; Mod picks FMOD at run from its attribute */
#define KP__OX_BINARY_TABLE(X)                                                             \
    X(Add, 7, KP__OX_B_ADD) X(Sub, 7, KP__OX_B_SUB) X(Mul, 7, KP__OX_B_MUL)                \
    X(Div, 7, KP__OX_B_DIV) X(Pow, 7, KP__OX_B_POW) X(Mod, 10, KP__OX_B_MOD)               \
    X(PRelu, 7, KP__OX_B_PRELU) X(Equal, 7, KP__OX_B_EQUAL) X(Less, 7, KP__OX_B_LESS)      \
    X(Greater, 7, KP__OX_B_GREATER) X(LessOrEqual, 12, KP__OX_B_LESS_EQUAL)                \
    X(GreaterOrEqual, 12, KP__OX_B_GREATER_EQUAL) X(And, 7, KP__OX_B_AND)                  \
    X(Or, 7, KP__OX_B_OR) X(Xor, 7, KP__OX_B_XOR) X(Where, 9, KP__OX_B_WHERE)

/* name, first opset, kernel op of each step */
#define KP__OX_VARIADIC_TABLE(X)                                                           \
    X(Max, 6, KP__OX_B_MAX) X(Min, 6, KP__OX_B_MIN) X(Sum, 6, KP__OX_B_ADD)                \
    X(Mean, 6, KP__OX_B_ADD_DIV)
/* clang-format on */

#define KP__OX_WRAP(kind, name, since, op)                                                     \
    static kp_status ew_##name##_infer(kp__ox_graph *g, kp__ox_gnode *n) {                     \
        return kind##_infer(g, n, op);                                                         \
    }                                                                                          \
    static kp_status ew_##name##_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) { \
        return kind##_run(x, g, n, op);                                                        \
    }
#define KP__OX_WRAP_UNARY(name, since, op) KP__OX_WRAP(ew_unary, name, since, op)
#define KP__OX_WRAP_BINARY(name, since, op) KP__OX_WRAP(kp__ox_binary, name, since, op)
#define KP__OX_WRAP_VARIADIC(name, since, op) KP__OX_WRAP(kp__ox_variadic, name, since, op)
KP__OX_UNARY_TABLE(KP__OX_WRAP_UNARY)
KP__OX_BINARY_TABLE(KP__OX_WRAP_BINARY)
KP__OX_VARIADIC_TABLE(KP__OX_WRAP_VARIADIC)

#define KP__OX_ENTRY(op_name, first, op) \
    {.name = #op_name, .since = first, .infer = ew_##op_name##_infer, .run = ew_##op_name##_run},

/* clang-format off */
const kp__ox_op kp__ox_ops_elementwise[] = {
    KP__OX_UNARY_TABLE(KP__OX_ENTRY)
    KP__OX_BINARY_TABLE(KP__OX_ENTRY)
    KP__OX_VARIADIC_TABLE(KP__OX_ENTRY)
    {.name = "Clip", .since = 1, .infer = ew_clip_infer, .run = ew_clip_run},
    {.name = "Cast", .since = 6, .infer = ew_cast_infer, .run = ew_cast_run},
    {.name = "CastLike", .since = 15, .infer = ew_cast_infer, .run = ew_cast_run,
     .host_input = ew_castlike_host_input},
    {.name = "Identity", .since = 1, .infer = ew_identity_infer, .run = ew_identity_run,
     .view = true},
    {.name = "Dropout", .since = 1, .infer = ew_dropout_infer, .run = ew_dropout_run,
     .host_input = ew_dropout_host_input},
    {.name = NULL},
};
/* clang-format on */
