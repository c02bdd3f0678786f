/* Exact overlap test between two descriptors, at byte granularity.
 *
 * A descriptor touches the bytes { base + sum(i_k * s_k) + u : 0 <= u < ext },
 * with byte strides s_k, element size ext. The test normalizes both layouts
 * (drops broadcast and size-1 dims, folds dims whose copies abut into the
 * extent, merges dims that compose), then:
 *   1. bounding intervals: disjoint spans cannot share a byte;
 *   2. the GCD test: every touched address is base + u modulo g, the gcd of
 *      all strides, so two layouts whose residues never meet are disjoint;
 *   3. an exact recursive search that splits the layout whose outermost stride
 *      is larger into its slabs, keeping only the slabs whose span meets the
 *      other layout's span. When both outermost strides are equal it works on
 *      the index difference i - j instead (the per-dimension test for nested
 *      layouts: O(1) candidates per level rather than one per slab).
 * The search counts steps; past the bound it answers KP_OVERLAP_ASSUMED, so
 * a "disjoint" answer is always exact. */
#include "core-impl.h"
#include "kpipe/tensor.h"

#define KP__OVERLAP_DEFAULT_STEPS (1 << 16)

typedef struct kp__dim {
    int64_t stride; /* bytes, > 0 */
    int64_t count;  /* >= 2 */
} kp__dim;

typedef struct kp__layout {
    int64_t base;
    int n; /* dims, ascending stride */
    kp__dim d[KP_MAX_DIMS];
    int64_t span[KP_MAX_DIMS + 1]; /* span[k]: bytes covered by dims [0, k) plus ext */
} kp__layout;

/* Returns false for an empty tensor. */
static bool kp__normalize(const kp_tensor_desc *t, kp__layout *L) {
    int64_t esz = (int64_t)kp_dtype_size(t->dtype), ext = esz;
    L->base = t->offset * esz;
    L->n = 0;
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] == 0) return false;
        if (t->shape[k] == 1 || t->strides[k] == 0) continue;
        kp__dim dim = {t->strides[k] * esz, t->shape[k]};
        int j = L->n++;
        while (j > 0 && L->d[j - 1].stride > dim.stride) {
            L->d[j] = L->d[j - 1];
            j--;
        }
        L->d[j] = dim;
    }
    /* Fold from the inside: copies of the extent that abut or overlap form one
     * contiguous run. Merge equal strides and dims that compose exactly. */
    int w = 0;
    for (int r = 0; r < L->n; r++) {
        kp__dim dim = L->d[r];
        if (w == 0 && dim.stride <= ext) {
            ext += (dim.count - 1) * dim.stride;
            continue;
        }
        if (w > 0 && L->d[w - 1].stride == dim.stride) {
            L->d[w - 1].count += dim.count - 1;
            continue;
        }
        if (w > 0 && L->d[w - 1].stride * L->d[w - 1].count == dim.stride) {
            L->d[w - 1].count *= dim.count;
            continue;
        }
        L->d[w++] = dim;
    }
    L->n = w;
    L->span[0] = ext;
    for (int k = 0; k < L->n; k++)
        L->span[k + 1] = L->span[k] + (L->d[k].count - 1) * L->d[k].stride;
    return true;
}

static int64_t kp__gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int64_t kp__floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t kp__max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t kp__min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* 1 overlap, 0 disjoint, -1 budget exhausted. Uses dims [0, na) of A at
 * `ab` and [0, nb) of B at `bb`. */
static int kp__search(const kp__layout *A, int na, int64_t ab, const kp__layout *B, int nb,
                      int64_t bb, int64_t *budget) {
    if (--*budget < 0) return -1;
    int64_t a_hi = ab + A->span[na], b_hi = bb + B->span[nb];
    if (a_hi <= bb || b_hi <= ab) return 0;
    if (na == 0 && nb == 0) return 1;
    if (nb > 0 && (na == 0 || B->d[nb - 1].stride > A->d[na - 1].stride))
        return kp__search(B, nb, bb, A, na, ab, budget);

    const kp__dim *outer = &A->d[na - 1];
    int64_t s = outer->stride, w = A->span[na - 1];
    int64_t lo, hi;
    if (nb > 0 && B->d[nb - 1].stride == s) {
        /* Equal outer strides: only the index difference k = i - j matters,
         * with k in [-(countB - 1), countA - 1]; slab A'+k*s must meet B'. */
        int64_t wb = B->span[nb - 1];
        lo = kp__max64(kp__floor_div(bb - ab - w, s) + 1, -(B->d[nb - 1].count - 1));
        hi = kp__min64(kp__floor_div(bb + wb - 1 - ab, s), outer->count - 1);
        for (int64_t k = lo; k <= hi; k++) {
            int r = kp__search(A, na - 1, ab + k * s, B, nb - 1, bb, budget);
            if (r != 0) return r;
        }
        return 0;
    }
    /* Slabs i of A whose span [ab + i*s, ab + i*s + w) meets B's span. */
    lo = kp__max64(kp__floor_div(bb - ab - w, s) + 1, 0);
    hi = kp__min64(kp__floor_div(b_hi - 1 - ab, s), outer->count - 1);
    for (int64_t i = lo; i <= hi; i++) {
        int r = kp__search(A, na - 1, ab + i * s, B, nb, bb, budget);
        if (r != 0) return r;
    }
    return 0;
}

kp_overlap kp_desc_overlap_bounded(const kp_tensor_desc *a, const kp_tensor_desc *b,
                                   int64_t max_steps) {
    kp__layout A, B;
    /* Byte arithmetic below relies on validated extents; for a descriptor
     * that is not valid the only safe answer is "assume they overlap". */
    if (!kp__desc_ok(a) || !kp__desc_ok(b)) return KP_OVERLAP_ASSUMED;
    if (!kp__normalize(a, &A) || !kp__normalize(b, &B)) return KP_OVERLAP_NONE;
    if (A.base + A.span[A.n] <= B.base || B.base + B.span[B.n] <= A.base) return KP_OVERLAP_NONE;

    int64_t g = 0;
    for (int k = 0; k < A.n; k++) g = kp__gcd(g, A.d[k].stride);
    for (int k = 0; k < B.n; k++) g = kp__gcd(g, B.d[k].stride);
    if (g > 0 && A.span[0] + B.span[0] - 1 < g) {
        /* Addresses are base + u (mod g), u < ext: the residues must meet. */
        int64_t r = ((B.base - A.base) % g + g) % g;
        if (r > A.span[0] - 1 && r < g - (B.span[0] - 1)) return KP_OVERLAP_NONE;
    }
    int64_t budget = max_steps;
    int res = kp__search(&A, A.n, A.base, &B, B.n, B.base, &budget);
    return res < 0 ? KP_OVERLAP_ASSUMED : res ? KP_OVERLAP_YES : KP_OVERLAP_NONE;
}

kp_overlap kp_desc_overlap(const kp_tensor_desc *a, const kp_tensor_desc *b) {
    return kp_desc_overlap_bounded(a, b, KP__OVERLAP_DEFAULT_STEPS);
}
