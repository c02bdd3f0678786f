/* The reduction and normalisation kernels' shared text (ops_reduce.c on the
 * host, ops_reduce.cu on CUDA): the parameter structs and the per-row
 * arithmetic, so both forms compute the same thing from one source.
 *
 * Every operator of the family sees its input as rows: the kept
 * dimensions enumerate rows (a reduction's output elements, a softmax's
 * independent vectors), the reduced dimensions enumerate the elements of
 * one row. A row is handled either by one thread (the functions below) or,
 * on CUDA when rows are long and contiguous, by one thread block that
 * shares the row's partial results (ops_reduce.cu). Accumulation is in
 * float on both sides so that the host and the device agree closely. */
#ifndef KPIPE_ONNX_REDUCE_KERNELS_H
#define KPIPE_ONNX_REDUCE_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "../kernels-impl.h"

/* A contiguous tensor as rows. The first n_keep entries of shape/stride are
 * the kept dimensions, in the input's order, so a row's index is its output
 * element's linear index; the entries from n_keep to n_dims are the reduced
 * dimensions, in the input's order, so an element's index within its row
 * (j) runs row-major over them. There is always at least one reduced entry
 * (a 1-sized one when nothing is reduced). Dimensions of size 1 are dropped
 * and neighbours of the same kind merged, so a row along the innermost axes
 * is a single entry of stride 1. */
typedef struct kp__ox_rows {
    int n_keep, n_dims;
    int64_t n_rows; /* product of the kept sizes */
    int64_t n_red;  /* product of the reduced sizes; may be 0 */
    int64_t shape[KP_MAX_DIMS];
    int64_t stride[KP_MAX_DIMS]; /* in elements, into the input */
} kp__ox_rows;

/* The input offset of a row's first element. */
static inline KP__HD int64_t kp__ox_rows_base(const kp__ox_rows *r, int64_t row) {
    int64_t off = 0;
    for (int k = r->n_keep - 1; k >= 0; k--) {
        int64_t q = row / r->shape[k];
        off += (row - q * r->shape[k]) * r->stride[k];
        row = q;
    }
    return off;
}

/* The offset of element j of a row from the row's base. The one-entry case
 * (by far the most common after merging) costs a multiply, not divisions. */
static inline KP__HD int64_t kp__ox_rows_elem(const kp__ox_rows *r, int64_t j) {
    if (r->n_dims == r->n_keep + 1) return j * r->stride[r->n_keep];
    int64_t off = 0;
    for (int k = r->n_dims - 1; k >= r->n_keep; k--) {
        int64_t q = j / r->shape[k];
        off += (j - q * r->shape[k]) * r->stride[k];
        j = q;
    }
    return off;
}

/* A compensated (Kahan) float sum. A plain float loop over a long row
 * loses the low bits of every small term added to a large total: a
 * softmax over 10^6 elements or the mean of a layer with an offset then
 * misses ONNX's tolerance by itself. Carrying the rounding error keeps
 * float accumulation (the same type on the host and the device) accurate
 * to a few units in the last place at any length. An infinite total stops
 * the compensation, which would otherwise turn it into NaN. */
typedef struct kp__ox_ksum {
    float s, c; /* the total and the error it carries (the true sum is s - c) */
} kp__ox_ksum;

static inline KP__HD void kp__ox_ksum_add(kp__ox_ksum *k, float x) {
    float y = x - k->c, t = k->s + y;
    k->c = t - t == 0.0f ? (t - k->s) - y : 0.0f;
    k->s = t;
}

static inline KP__HD float kp__ox_ksum_value(const kp__ox_ksum *k) { return k->s - k->c; }

/* --- reductions (ReduceSum ... ReduceLogSumExp) ------------------------------ */

enum {
    KP__OX_R_SUM = 0,
    KP__OX_R_MEAN,
    KP__OX_R_MAX,
    KP__OX_R_MIN,
    KP__OX_R_PROD,
    KP__OX_R_L1,
    KP__OX_R_L2,
    KP__OX_R_SUMSQ,
    KP__OX_R_LOGSUM,
    KP__OX_R_LOGSUMEXP,
};

/* How mapped elements combine: every reduction is one of these four. */
enum { KP__OX_C_SUM = 0, KP__OX_C_MAX, KP__OX_C_MIN, KP__OX_C_PROD };

typedef struct kp__ox_reduce_params {
    kp__ox_rows rows;
    const void *in;
    void *out;      /* one element per row */
    int op;         /* KP__OX_R_* */
    int dtype;      /* kp_dtype: f32; i64 and i32 for sum, max, min and product */
    int block_rows; /* cuda: one block per row */
} kp__ox_reduce_params;

static inline KP__HD int kp__ox_red_combiner(int op) {
    switch (op) {
    case KP__OX_R_MAX:
    case KP__OX_R_MIN:
    case KP__OX_R_PROD: return op - KP__OX_R_MAX + KP__OX_C_MAX;
    default: return KP__OX_C_SUM;
    }
}

static inline KP__HD float kp__ox_red_identity(int comb) {
    switch (comb) {
    case KP__OX_C_MAX: return -INFINITY;
    case KP__OX_C_MIN: return INFINITY;
    case KP__OX_C_PROD: return 1.0f;
    default: return 0.0f;
    }
}

/* Max and min let a NaN through, as numpy's reductions do. */
static inline KP__HD float kp__ox_red_combine(int comb, float a, float b) {
    switch (comb) {
    case KP__OX_C_MAX: return (b > a || b != b) ? b : a;
    case KP__OX_C_MIN: return (b < a || b != b) ? b : a;
    case KP__OX_C_PROD: return a * b;
    default: return a + b;
    }
}

/* The element's contribution; `shift` is the row's maximum for
 * LogSumExp, whose exponentials are taken relative to it so they cannot
 * overflow. */
static inline KP__HD float kp__ox_red_map(int op, float x, float shift) {
    switch (op) {
    case KP__OX_R_L1: return fabsf(x);
    case KP__OX_R_L2:
    case KP__OX_R_SUMSQ: return x * x;
    case KP__OX_R_LOGSUMEXP: return expf(x - shift);
    default: return x;
    }
}

static inline KP__HD float kp__ox_red_final(int op, float acc, int64_t n, float shift) {
    switch (op) {
    case KP__OX_R_MEAN: return acc / (float)n;
    case KP__OX_R_L2: return sqrtf(acc);
    case KP__OX_R_LOGSUM: return logf(acc);
    case KP__OX_R_LOGSUMEXP: return shift + logf(acc);
    default: return acc;
    }
}

/* LogSumExp's first pass: the row's maximum. An infinite or NaN maximum is
 * then the result itself (shift - shift is not 0 exactly for those). */
static inline KP__HD float kp__ox_red_row_max(const kp__ox_rows *r, const float *in) {
    float m = -INFINITY;
    for (int64_t j = 0; j < r->n_red; j++)
        m = kp__ox_red_combine(KP__OX_C_MAX, m, in[kp__ox_rows_elem(r, j)]);
    return m;
}

static inline KP__HD float kp__ox_reduce_row_f32(const kp__ox_reduce_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    const float *in = (const float *)p->in + kp__ox_rows_base(r, row);
    float shift = 0.0f;
    if (p->op == KP__OX_R_LOGSUMEXP) {
        shift = kp__ox_red_row_max(r, in);
        if (shift - shift != 0.0f) return shift;
    }
    int comb = kp__ox_red_combiner(p->op);
    float acc = kp__ox_red_identity(comb);
    if (comb == KP__OX_C_SUM) {
        kp__ox_ksum k = {0.0f, 0.0f};
        for (int64_t j = 0; j < r->n_red; j++)
            kp__ox_ksum_add(&k, kp__ox_red_map(p->op, in[kp__ox_rows_elem(r, j)], shift));
        acc = kp__ox_ksum_value(&k);
    } else {
        for (int64_t j = 0; j < r->n_red; j++)
            acc = kp__ox_red_combine(comb, acc, in[kp__ox_rows_elem(r, j)]);
    }
    return kp__ox_red_final(p->op, acc, r->n_red, shift);
}

/* An integer element as int64 (i32 or i64 data). */
static inline KP__HD int64_t kp__ox_load_int(int dtype, const void *base, int64_t off) {
    if (dtype == KP_I32) return ((const int32_t *)base)[off];
    return ((const int64_t *)base)[off];
}

/* Integer sums and products wrap (as two's complement hardware does)
 * instead of overflowing signed arithmetic; an empty max or min is the
 * type's lowest or highest value. */
static inline KP__HD int64_t kp__ox_reduce_row_int(const kp__ox_reduce_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    int64_t base = kp__ox_rows_base(r, row);
    bool narrow = p->dtype == KP_I32;
    int comb = kp__ox_red_combiner(p->op);
    uint64_t acc = comb == KP__OX_C_PROD ? 1u : 0u;
    int64_t best =
        comb == KP__OX_C_MAX ? (narrow ? INT32_MIN : INT64_MIN) : (narrow ? INT32_MAX : INT64_MAX);
    for (int64_t j = 0; j < r->n_red; j++) {
        int64_t v = kp__ox_load_int(p->dtype, p->in, base + kp__ox_rows_elem(r, j));
        switch (comb) {
        case KP__OX_C_MAX: best = v > best ? v : best; break;
        case KP__OX_C_MIN: best = v < best ? v : best; break;
        case KP__OX_C_PROD: acc *= (uint64_t)v; break;
        default: acc += (uint64_t)v; break;
        }
    }
    if (comb == KP__OX_C_MAX || comb == KP__OX_C_MIN) return best;
    return (int64_t)acc;
}

static inline KP__HD void kp__ox_reduce_row(const kp__ox_reduce_params *p, int64_t row) {
    if (p->dtype == KP_F32) {
        ((float *)p->out)[row] = kp__ox_reduce_row_f32(p, row);
        return;
    }
    int64_t v = kp__ox_reduce_row_int(p, row);
    if (p->dtype == KP_I32)
        ((int32_t *)p->out)[row] = (int32_t)v;
    else
        ((int64_t *)p->out)[row] = v;
}

/* --- ArgMax, ArgMin ---------------------------------------------------------- */

typedef struct kp__ox_arg_params {
    kp__ox_rows rows;
    const void *in;
    int64_t *out;
    int dtype; /* f32, i64, i32 */
    int is_min;
    int last; /* select_last_index: ties go to the last position */
} kp__ox_arg_params;

/* Whether v replaces best: strictly better, or equal when ties go last. */
#define KP__OX_ARG_BETTER(p, v, best)                         \
    ((p)->is_min ? ((p)->last ? (v) <= (best) : (v) < (best)) \
                 : ((p)->last ? (v) >= (best) : (v) > (best)))

static inline KP__HD void kp__ox_arg_row(const kp__ox_arg_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    int64_t base = kp__ox_rows_base(r, row), at = 0;
    if (p->dtype == KP_F32) {
        const float *in = (const float *)p->in + base;
        float best = in[0];
        for (int64_t j = 1; j < r->n_red; j++) {
            float v = in[kp__ox_rows_elem(r, j)];
            if (KP__OX_ARG_BETTER(p, v, best)) {
                best = v;
                at = j;
            }
        }
    } else {
        int64_t best = kp__ox_load_int(p->dtype, p->in, base);
        for (int64_t j = 1; j < r->n_red; j++) {
            int64_t v = kp__ox_load_int(p->dtype, p->in, base + kp__ox_rows_elem(r, j));
            if (KP__OX_ARG_BETTER(p, v, best)) {
                best = v;
                at = j;
            }
        }
    }
    p->out[row] = at;
}

/* --- Softmax, LogSoftmax, Hardmax -------------------------------------------- */

enum { KP__OX_SOFTMAX = 0, KP__OX_LOGSOFTMAX, KP__OX_HARDMAX };

typedef struct kp__ox_softmax_params {
    kp__ox_rows rows; /* the output has the input's layout */
    const float *in;
    float *out;
    int kind; /* KP__OX_SOFTMAX ... */
    int block_rows;
} kp__ox_softmax_params;

/* Writes the row's result given its maximum `m` and first position of the
 * maximum `at` (Hardmax), or the sum `s` of exp(x - m) (the others). */
static inline KP__HD void kp__ox_softmax_put(const kp__ox_softmax_params *p, int64_t base,
                                             int64_t j, float m, float s, int64_t at) {
    int64_t e = base + kp__ox_rows_elem(&p->rows, j);
    float y;
    if (p->kind == KP__OX_HARDMAX)
        y = j == at ? 1.0f : 0.0f;
    else if (p->kind == KP__OX_LOGSOFTMAX)
        y = p->in[e] - m - logf(s);
    else
        y = expf(p->in[e] - m) / s;
    p->out[e] = y;
}

static inline KP__HD void kp__ox_softmax_row(const kp__ox_softmax_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    int64_t base = kp__ox_rows_base(r, row), at = 0;
    float m = p->in[base];
    kp__ox_ksum s = {0.0f, 0.0f};
    for (int64_t j = 1; j < r->n_red; j++) {
        float v = p->in[base + kp__ox_rows_elem(r, j)];
        if (v > m) {
            m = v;
            at = j;
        }
    }
    if (p->kind != KP__OX_HARDMAX)
        for (int64_t j = 0; j < r->n_red; j++)
            kp__ox_ksum_add(&s, expf(p->in[base + kp__ox_rows_elem(r, j)] - m));
    float total = kp__ox_ksum_value(&s);
    for (int64_t j = 0; j < r->n_red; j++) kp__ox_softmax_put(p, base, j, m, total, at);
}

/* --- LayerNormalization, MeanVarianceNormalization, LpNormalization ---------- */

enum { KP__OX_N_LAYER = 0, KP__OX_N_MVN, KP__OX_N_LP1, KP__OX_N_LP2 };

typedef struct kp__ox_norm_params {
    kp__ox_rows rows; /* the output has the input's layout */
    const float *in;
    float *out;
    const float *scale; /* LayerNormalization: n_red elements, or 1 when scale_one */
    const float *bias;  /* optional; n_red elements, or 1 when bias_one */
    float *mean;        /* optional outputs, one element per row */
    float *inv_std;
    float eps;
    int kind; /* KP__OX_N_* */
    int scale_one, bias_one;
    int block_rows;
} kp__ox_norm_params;

/* The row's statistics: for LayerNormalization and MVN, `a` is the mean
 * and `b` the divisor (the standard deviation, with epsilon as each
 * operator adds it); for the Lp norms, a = 0 and b the norm. */
static inline KP__HD void kp__ox_norm_stats(const kp__ox_norm_params *p, float sum, float sq,
                                            float *a, float *b) {
    float n = (float)p->rows.n_red;
    if (p->kind == KP__OX_N_LP1 || p->kind == KP__OX_N_LP2) {
        *a = 0.0f;
        *b = p->kind == KP__OX_N_LP1 ? sum : sqrtf(sum);
        return;
    }
    *a = sum / n;
    *b = p->kind == KP__OX_N_LAYER ? sqrtf(sq / n + p->eps) : sqrtf(sq / n) + 1e-9f;
}

/* The first pass's term: x itself for the mean, |x| or x*x for the norms. */
static inline KP__HD float kp__ox_norm_term(int kind, float x) {
    if (kind == KP__OX_N_LP1) return fabsf(x);
    if (kind == KP__OX_N_LP2) return x * x;
    return x;
}

static inline KP__HD void kp__ox_norm_put(const kp__ox_norm_params *p, int64_t row, int64_t base,
                                          int64_t j, float a, float b) {
    int64_t e = base + kp__ox_rows_elem(&p->rows, j);
    float y = (p->in[e] - a) / b;
    if (p->kind == KP__OX_N_LAYER) {
        y *= p->scale[p->scale_one ? 0 : j];
        if (p->bias) y += p->bias[p->bias_one ? 0 : j];
    }
    p->out[e] = y;
    if (j == 0 && p->mean) p->mean[row] = a;
    if (j == 0 && p->inv_std) p->inv_std[row] = 1.0f / b;
}

static inline KP__HD void kp__ox_norm_row(const kp__ox_norm_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    int64_t base = kp__ox_rows_base(r, row);
    kp__ox_ksum sum = {0.0f, 0.0f}, sq = {0.0f, 0.0f};
    float a, b;
    for (int64_t j = 0; j < r->n_red; j++)
        kp__ox_ksum_add(&sum, kp__ox_norm_term(p->kind, p->in[base + kp__ox_rows_elem(r, j)]));
    /* The variance from the deviations, not E[x^2] - E[x]^2, which loses
     * everything to cancellation when the mean is large. */
    if (p->kind == KP__OX_N_LAYER || p->kind == KP__OX_N_MVN) {
        float mean = kp__ox_ksum_value(&sum) / (float)r->n_red;
        for (int64_t j = 0; j < r->n_red; j++) {
            float d = p->in[base + kp__ox_rows_elem(r, j)] - mean;
            kp__ox_ksum_add(&sq, d * d);
        }
    }
    kp__ox_norm_stats(p, kp__ox_ksum_value(&sum), kp__ox_ksum_value(&sq), &a, &b);
    for (int64_t j = 0; j < r->n_red; j++) kp__ox_norm_put(p, row, base, j, a, b);
}

/* --- CumSum ------------------------------------------------------------------ */

typedef struct kp__ox_cumsum_params {
    kp__ox_rows rows; /* the output has the input's layout */
    const void *in;
    void *out;
    int dtype; /* f32, i64, i32 */
    int exclusive, reverse;
} kp__ox_cumsum_params;

static inline KP__HD void kp__ox_cumsum_row(const kp__ox_cumsum_params *p, int64_t row) {
    const kp__ox_rows *r = &p->rows;
    int64_t base = kp__ox_rows_base(r, row), n = r->n_red;
    kp__ox_ksum acc = {0.0f, 0.0f};
    uint64_t iacc = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t e = base + kp__ox_rows_elem(r, p->reverse ? n - 1 - k : k);
        if (p->dtype == KP_F32) {
            float v = ((const float *)p->in)[e];
            if (!p->exclusive) kp__ox_ksum_add(&acc, v);
            ((float *)p->out)[e] = kp__ox_ksum_value(&acc);
            if (p->exclusive) kp__ox_ksum_add(&acc, v);
        } else {
            uint64_t v = (uint64_t)kp__ox_load_int(p->dtype, p->in, e);
            if (!p->exclusive) iacc += v;
            if (p->dtype == KP_I32)
                ((int32_t *)p->out)[e] = (int32_t)iacc;
            else
                ((int64_t *)p->out)[e] = (int64_t)iacc;
            if (p->exclusive) iacc += v;
        }
    }
}

#endif
