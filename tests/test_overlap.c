/* The overlap test against brute-force enumeration of touched bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"

#define FUZZ_PAIRS 100000

/* Marks every byte the descriptor touches. */
static void touch(const kp_tensor_desc *d, unsigned char *mark) {
    int64_t n = kp_desc_numel(d), esz = (int64_t)kp_dtype_size(d->dtype);
    for (int64_t e = 0; e < n; e++) {
        int64_t rem = e, off = d->offset;
        for (int k = d->ndim - 1; k >= 0; k--) {
            off += (rem % d->shape[k]) * d->strides[k];
            rem /= d->shape[k];
        }
        for (int64_t b = 0; b < esz; b++) mark[off * esz + b] = 1;
    }
}

static bool brute_overlap(const kp_tensor_desc *a, const kp_tensor_desc *b) {
    int64_t na = kp_desc_bytes_needed(a), nb = kp_desc_bytes_needed(b);
    int64_t n = na > nb ? na : nb;
    unsigned char *ma = calloc((size_t)n + 1, 1), *mb = calloc((size_t)n + 1, 1);
    touch(a, ma);
    touch(b, mb);
    bool hit = false;
    for (int64_t i = 0; i < n && !hit; i++) hit = ma[i] && mb[i];
    free(ma);
    free(mb);
    return hit;
}

static const kp_dtype dtypes[] = {KP_U8, KP_I16, KP_F32, KP_I64, KP_BF16};

static void random_desc(kp_tensor_desc *d, uint64_t *s) {
    memset(d, 0, sizeof *d);
    d->dtype = dtypes[kpt_rand(s) % 5];
    d->ndim = (int)(kpt_rand(s) % 5);
    for (int k = 0; k < d->ndim; k++) {
        uint64_t r = kpt_rand(s) % 16;
        d->shape[k] = r == 0 ? 0 : r < 4 ? 1 : (int64_t)(kpt_rand(s) % 5) + 1;
        r = kpt_rand(s) % 8;
        d->strides[k] = r == 0 ? 0 : (int64_t)(kpt_rand(s) % 12) + 1;
    }
    d->offset = (int64_t)(kpt_rand(s) % 40);
}

/* Two views of one row-major base (slices with steps), often with
 * different dtypes: the layouts real programs make. */
static void random_views(kp_tensor_desc *a, kp_tensor_desc *b, uint64_t *s) {
    int nd = 1 + (int)(kpt_rand(s) % 3);
    int64_t base_shape[3];
    for (int k = 0; k < nd; k++) base_shape[k] = 2 + (int64_t)(kpt_rand(s) % 6);
    kp_tensor_desc *v[2] = {a, b};
    kp_dtype dt = dtypes[kpt_rand(s) % 5];
    for (int t = 0; t < 2; t++) {
        kp_tensor_desc base;
        kp_dtype mydt = (kpt_rand(s) % 4 == 0) ? dtypes[kpt_rand(s) % 5] : dt;
        kp_desc_init(&base, dt, nd, base_shape, NULL);
        *v[t] = base;
        int64_t scale = (int64_t)kp_dtype_size(dt);
        for (int k = 0; k < nd; k++) {
            int64_t start = (int64_t)(kpt_rand(s) % (uint64_t)base_shape[k]);
            int64_t step = 1 + (int64_t)(kpt_rand(s) % 3);
            int64_t count = (base_shape[k] - start + step - 1) / step;
            v[t]->offset += start * base.strides[k];
            v[t]->shape[k] = 1 + (int64_t)(kpt_rand(s) % (uint64_t)count);
            v[t]->strides[k] = base.strides[k] * step;
        }
        /* reinterpret in another dtype when the byte offsets divide evenly */
        int64_t nsz = (int64_t)kp_dtype_size(mydt);
        bool ok = (v[t]->offset * scale) % nsz == 0;
        for (int k = 0; k < nd; k++) ok = ok && (v[t]->strides[k] * scale) % nsz == 0;
        if (ok && mydt != dt) {
            v[t]->dtype = mydt;
            v[t]->offset = v[t]->offset * scale / nsz;
            for (int k = 0; k < nd; k++) v[t]->strides[k] = v[t]->strides[k] * scale / nsz;
        }
    }
}

static void fuzz_against_brute_force(void **state) {
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    long disagree_none = 0, disagree_yes = 0, assumed = 0, overlaps = 0;
    for (int i = 0; i < FUZZ_PAIRS; i++) {
        kp_tensor_desc a, b;
        if (i % 2) {
            random_desc(&a, &seed);
            random_desc(&b, &seed);
        } else {
            random_views(&a, &b, &seed);
        }
        KPT_OK(kp_desc_validate(&a));
        KPT_OK(kp_desc_validate(&b));
        kp_overlap got = kp_desc_overlap(&a, &b);
        bool truth = brute_overlap(&a, &b);
        overlaps += truth;
        if (got == KP_OVERLAP_NONE && truth) disagree_none++;
        if (got == KP_OVERLAP_YES && !truth) disagree_yes++;
        if (got == KP_OVERLAP_ASSUMED) assumed++;
        /* symmetric */
        assert_int_equal(kp_desc_overlap(&b, &a), got);
    }
    print_message("%d pairs: %ld overlapping, %ld disjoint answered wrongly, %ld overlap answered "
                  "wrongly, %ld assumed\n",
                  FUZZ_PAIRS, overlaps, disagree_none, disagree_yes, assumed);
    assert_int_equal(disagree_none, 0);
    assert_int_equal(disagree_yes, 0);
    assert_int_equal(assumed, 0);
    /* the generator must produce both answers in quantity */
    assert_true(overlaps > FUZZ_PAIRS / 10);
    assert_true(overlaps < FUZZ_PAIRS - FUZZ_PAIRS / 10);
}

static kp_tensor_desc mat(kp_dtype dt, int64_t r, int64_t c, int64_t ld, int64_t off) {
    kp_tensor_desc d;
    int64_t shape[2] = {r, c}, strides[2] = {ld, 1};
    kp_desc_init(&d, dt, 2, shape, strides);
    d.offset = off;
    return d;
}

static void large_nested_layouts_are_exact_and_fast(void **state) {
    /* Columns [0,8) and [8,16) of a 1M x 4096 matrix: 1M rows each. */
    kp_tensor_desc a = mat(KP_F32, 1 << 20, 8, 4096, 0), b = mat(KP_F32, 1 << 20, 8, 4096, 8);
    assert_int_equal(kp_desc_overlap(&a, &b), KP_OVERLAP_NONE);
    b = mat(KP_F32, 1 << 20, 8, 4096, 7);
    assert_int_equal(kp_desc_overlap(&a, &b), KP_OVERLAP_YES);
    /* The same bytes seen as bytes: column 8..15 as u8 is 32..63 */
    kp_tensor_desc c = mat(KP_U8, 1 << 20, 32, 4096 * 4, 32);
    assert_int_equal(kp_desc_overlap(&a, &c), KP_OVERLAP_NONE);
    c.offset = 31;
    assert_int_equal(kp_desc_overlap(&a, &c), KP_OVERLAP_YES);
    /* Even and odd elements of a long vector (GCD test). */
    int64_t n[1] = {1 << 24}, st[1] = {2};
    kp_tensor_desc even, odd;
    kp_desc_init(&even, KP_F32, 1, n, st);
    odd = even;
    odd.offset = 1;
    assert_int_equal(kp_desc_overlap(&even, &odd), KP_OVERLAP_NONE);
    /* Top and bottom halves of rows. */
    a = mat(KP_F16, 512, 1024, 1024, 0);
    b = mat(KP_F16, 512, 1024, 1024, 512 * 1024);
    assert_int_equal(kp_desc_overlap(&a, &b), KP_OVERLAP_NONE);
    b.offset -= 1;
    assert_int_equal(kp_desc_overlap(&a, &b), KP_OVERLAP_YES);
}

static void bound_answers_assumed_never_none(void **state) {
    /* Strides 3 and 5 elements over long runs: no nesting, many slabs. */
    int64_t sa[2] = {1000, 1000}, ta[2] = {3 * 1000 + 1, 3};
    int64_t sb[2] = {1000, 1000}, tb[2] = {5 * 1000 + 3, 5};
    kp_tensor_desc a, b;
    KPT_OK(kp_desc_init(&a, KP_I8, 2, sa, ta));
    KPT_OK(kp_desc_init(&b, KP_I8, 2, sb, tb));
    b.offset = 1;
    kp_overlap small = kp_desc_overlap_bounded(&a, &b, 4);
    assert_int_equal(small, KP_OVERLAP_ASSUMED);
    kp_overlap full = kp_desc_overlap_bounded(&a, &b, INT64_MAX);
    assert_int_not_equal(full, KP_OVERLAP_ASSUMED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fuzz_against_brute_force),
        cmocka_unit_test(large_nested_layouts_are_exact_and_fast),
        cmocka_unit_test(bound_answers_assumed_never_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
