/* kpipe tensors: dtypes, descriptors (shape, strides, offset) and the exact
 * overlap test between two descriptors on one allocation.
 *
 *   int64_t shape[2] = {4, 6};
 *   kp_tensor_desc a, col;
 *   kp_desc_init(&a, KP_F32, 2, shape, NULL);         // contiguous 4x6
 *   col = a; col.shape[1] = 1; col.offset = 2;        // column 2 as a 4x1 view
 *   kp_overlap ov = kp_desc_overlap(&a, &col);        // KP_OVERLAP_YES
 */
#ifndef KPIPE_TENSOR_H
#define KPIPE_TENSOR_H

#include "kpipe/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* name, enum suffix, bytes */
#define KP_DTYPE_MAP(X) \
    X(f32, F32, 4)      \
    X(f16, F16, 2)      \
    X(bf16, BF16, 2)    \
    X(i32, I32, 4)      \
    X(i16, I16, 2)      \
    X(i8, I8, 1)        \
    X(u8, U8, 1)        \
    X(i64, I64, 8)      \
    X(u64, U64, 8)      \
    X(u16, U16, 2) /* 16-bit samples: P016 video planes */

typedef enum kp_dtype {
#define KP__DTYPE_ENUM(name, up, bytes) KP_##up,
    KP_DTYPE_MAP(KP__DTYPE_ENUM)
#undef KP__DTYPE_ENUM
        KP_DTYPE_COUNT
} kp_dtype;

/* Bytes of one element; 0 for an invalid dtype. */
size_t kp_dtype_size(kp_dtype dt);
/* "f32"; "invalid" for an invalid dtype. */
const char *kp_dtype_name(kp_dtype dt);
/* Parses "f32", "float32", "F32" ...; KP_ERR_PARSE names the text on failure. */
kp_status kp_dtype_parse(const char *text, kp_dtype *out);

#define KP_MAX_DIMS 8

/* A view of elements in one allocation: element (i0..in) lives at element
 * offset + sum(i_k * strides[k]). Strides are in elements and non-negative;
 * stride 0 broadcasts. */
typedef struct kp_tensor_desc {
    kp_dtype dtype;
    int ndim; /* 0 .. KP_MAX_DIMS; 0 is a scalar */
    int64_t shape[KP_MAX_DIMS];
    int64_t strides[KP_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements, from the allocation's start */
} kp_tensor_desc;

/* Fills a descriptor; strides == NULL means contiguous row-major. Checks
 * shape and strides (negative values, overflow of the byte extent). */
kp_status kp_desc_init(kp_tensor_desc *d, kp_dtype dt, int ndim, const int64_t *shape,
                       const int64_t *strides);
/* Checks an existing descriptor as kp_desc_init does. */
kp_status kp_desc_validate(const kp_tensor_desc *d);
/* The functions below take any descriptor, valid or not; for one that
 * kp_desc_validate refuses they give the answer stated, never a crash. */
/* Number of elements (product of the shape; 1 for a scalar); -1 if invalid. */
int64_t kp_desc_numel(const kp_tensor_desc *d);
/* True when the elements are row-major and dense (size-1 dims ignored);
 * false if invalid. */
bool kp_desc_is_contiguous(const kp_tensor_desc *d);
/* Byte interval [*lo, *hi) spanned from the allocation start; empty tensors
 * give lo == hi, and so do invalid ones (0, 0). */
void kp_desc_byte_extent(const kp_tensor_desc *d, int64_t *lo, int64_t *hi);
/* Bytes from the allocation start to one past the last byte touched; -1 if
 * invalid. */
int64_t kp_desc_bytes_needed(const kp_tensor_desc *d);
/* True when shape and dtype agree (strides and offset may differ). */
bool kp_desc_same_shape(const kp_tensor_desc *a, const kp_tensor_desc *b);
/* Writes "f32[4,6]" into buf ("invalid" for a bad dim count); returns buf,
 * or "" when buf is NULL or len is 0. */
const char *kp_desc_str(const kp_tensor_desc *d, char *buf, size_t len);

typedef enum kp_overlap {
    KP_OVERLAP_NONE = 0,    /* exact: no byte is touched by both */
    KP_OVERLAP_YES = 1,     /* exact: at least one byte is touched by both */
    KP_OVERLAP_ASSUMED = 2, /* the exact search passed its bound; treat as overlap */
} kp_overlap;

/* Do two descriptors on the same allocation touch a common byte? Works across
 * dtypes (byte granularity). Never answers NONE wrongly; an invalid
 * descriptor gives ASSUMED. */
kp_overlap kp_desc_overlap(const kp_tensor_desc *a, const kp_tensor_desc *b);
/* As kp_desc_overlap with an explicit bound on search steps. */
kp_overlap kp_desc_overlap_bounded(const kp_tensor_desc *a, const kp_tensor_desc *b,
                                   int64_t max_steps);

#ifdef __cplusplus
}
#endif
#endif
