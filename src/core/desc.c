/* Tensor descriptors: validation, sizes, contiguity. */
#include <stdio.h>
#include <string.h>

#include "core-impl.h"
#include "kpipe/tensor.h"

/* Why `d` is not a valid descriptor, written into why; NULL when it is. The
 * other functions here use it silently, kp_desc_validate reports it. */
static const char *kp__desc_problem(const kp_tensor_desc *d, char *why, size_t len) {
    if (!d) return "tensor descriptor is NULL";
    size_t esz = kp_dtype_size(d->dtype);
    if (esz == 0) {
        snprintf(why, len, "tensor descriptor has invalid dtype %d", (int)d->dtype);
        return why;
    }
    if (d->ndim < 0 || d->ndim > KP_MAX_DIMS) {
        snprintf(why, len, "tensor descriptor has %d dims (0..%d allowed)", d->ndim, KP_MAX_DIMS);
        return why;
    }
    if (d->offset < 0) {
        snprintf(why, len, "tensor descriptor has negative offset %lld", (long long)d->offset);
        return why;
    }
    int64_t last = d->offset, numel = 1;
    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] < 0 || d->strides[k] < 0) {
            snprintf(why, len,
                     "tensor dim %d has shape %lld stride %lld (negative values are not "
                     "allowed)",
                     k, (long long)d->shape[k], (long long)d->strides[k]);
            return why;
        }
        if (d->shape[k] == 0) numel = 0;
        int64_t step;
        if (d->shape[k] > 0 && (__builtin_mul_overflow(d->shape[k] - 1, d->strides[k], &step) ||
                                __builtin_add_overflow(last, step, &last))) {
            snprintf(why, len, "tensor dim %d: extent overflows", k);
            return why;
        }
        if (numel && __builtin_mul_overflow(numel, d->shape[k], &numel)) {
            snprintf(why, len, "tensor dim %d: element count overflows", k);
            return why;
        }
    }
    int64_t bytes;
    if (__builtin_add_overflow(last, 1, &bytes) ||
        __builtin_mul_overflow(bytes, (int64_t)esz, &bytes))
        return "tensor byte extent overflows";
    return NULL;
}

bool kp__desc_ok(const kp_tensor_desc *d) {
    char why[160];
    return kp__desc_problem(d, why, sizeof why) == NULL;
}

kp_status kp_desc_validate(const kp_tensor_desc *d) {
    KP_API_ENTRY();
    char why[160];
    const char *p = kp__desc_problem(d, why, sizeof why);
    return p ? kp__error(KP_ERR_INVALID_ARG, "%s", p) : KP_OK;
}

kp_status kp_desc_init(kp_tensor_desc *d, kp_dtype dt, int ndim, const int64_t *shape,
                       const int64_t *strides) {
    KP_API_ENTRY();
    if (!d || (ndim > 0 && !shape))
        return kp__error(KP_ERR_INVALID_ARG, "kp_desc_init: NULL argument");
    if (ndim < 0 || ndim > KP_MAX_DIMS)
        return kp__error(KP_ERR_INVALID_ARG, "kp_desc_init: %d dims (0..%d allowed)", ndim,
                         KP_MAX_DIMS);
    memset(d, 0, sizeof *d);
    d->dtype = dt;
    d->ndim = ndim;
    int64_t run = 1;
    for (int k = ndim - 1; k >= 0; k--) {
        d->shape[k] = shape[k];
        d->strides[k] = strides ? strides[k] : run;
        if (!strides && shape[k] > 1 && __builtin_mul_overflow(run, shape[k], &run))
            return kp__error(KP_ERR_INVALID_ARG, "kp_desc_init: element count overflows");
    }
    return kp_desc_validate(d);
}

int64_t kp_desc_numel(const kp_tensor_desc *d) {
    if (!kp__desc_ok(d)) return -1;
    int64_t n = 1;
    for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
    return n;
}

bool kp_desc_is_contiguous(const kp_tensor_desc *d) {
    if (!kp__desc_ok(d)) return false;
    int64_t run = 1;
    for (int k = d->ndim - 1; k >= 0; k--) {
        if (d->shape[k] == 0) return true;
        if (d->shape[k] == 1) continue;
        if (d->strides[k] != run) return false;
        run *= d->shape[k];
    }
    return true;
}

void kp_desc_byte_extent(const kp_tensor_desc *d, int64_t *lo, int64_t *hi) {
    int64_t lo_, hi_;
    if (!lo) lo = &lo_;
    if (!hi) hi = &hi_;
    if (!kp__desc_ok(d)) {
        *lo = *hi = 0;
        return;
    }
    int64_t esz = (int64_t)kp_dtype_size(d->dtype), last = d->offset;
    *lo = d->offset * esz;
    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] == 0) {
            *hi = *lo;
            return;
        }
        last += (d->shape[k] - 1) * d->strides[k];
    }
    *hi = (last + 1) * esz;
}

int64_t kp_desc_bytes_needed(const kp_tensor_desc *d) {
    int64_t lo, hi;
    if (!kp__desc_ok(d)) return -1;
    kp_desc_byte_extent(d, &lo, &hi);
    return hi;
}

bool kp_desc_same_shape(const kp_tensor_desc *a, const kp_tensor_desc *b) {
    if (!a || !b || a->ndim < 0 || a->ndim > KP_MAX_DIMS) return false;
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != b->shape[k]) return false;
    return true;
}

const char *kp_desc_str(const kp_tensor_desc *d, char *buf, size_t len) {
    if (!buf || len == 0) return "";
    if (!d || d->ndim < 0 || d->ndim > KP_MAX_DIMS) {
        snprintf(buf, len, "%s", d ? "invalid" : "(null)");
        return buf;
    }
    size_t used = (size_t)snprintf(buf, len, "%s[", kp_dtype_name(d->dtype));
    for (int k = 0; k < d->ndim && used < len; k++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", k ? "," : "",
                                 (long long)d->shape[k]);
    if (used < len) snprintf(buf + used, len - used, "]");
    return buf;
}
