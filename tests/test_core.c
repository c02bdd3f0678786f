/* Status table, error detail, logging, dtypes and descriptors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "support/kp_test.h"

static void status_strings(void **state) {
    assert_string_equal(kp_status_str(KP_OK), "success");
    assert_string_equal(kp_status_name(KP_ERR_OUT_OF_MEMORY), "KP_ERR_OUT_OF_MEMORY");
    assert_string_equal(kp_status_str(KP_ERR_STATE), "call out of order");
    assert_string_equal(kp_status_str((kp_status)999), "unknown status");
    assert_int_equal(KP_OK, 0);
}

static void last_error_is_thread_local_detail(void **state) {
    kp_clear_error();
    assert_string_equal(kp_last_error(), "");
    kp_dtype dt;
    KPT_FAILS(kp_dtype_parse("float33", &dt), KP_ERR_PARSE);
    assert_non_null(strstr(kp_last_error(), "float33"));
    kp_device_t dev;
    KPT_FAILS(kp_device_open("tpu", &dev), KP_ERR_NO_DEVICE);
    assert_non_null(strstr(kp_last_error(), "tpu"));
    KPT_FAILS(kp_device_open("cuda:x", &dev), KP_ERR_INVALID_ARG);
    assert_null(dev);
}

typedef struct {
    int calls;
    kp_log_level last;
    char msg[256];
} log_sink;

static void sink(kp_log_level lvl, const char *msg, void *user) {
    log_sink *s = user;
    s->calls++;
    s->last = lvl;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

static void log_callback_and_level(void **state) {
    log_sink s = {0};
    kp_log_set_callback(sink, &s, KP_LOG_DEBUG);
    assert_int_equal(kp_log_get_level(), KP_LOG_DEBUG);
    kp_dtype dt;
    (void)kp_dtype_parse("nope", &dt); /* failures are logged at debug */
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.last, KP_LOG_DEBUG);
    assert_non_null(strstr(s.msg, "nope"));
    kp_log_set_callback(sink, &s, KP_LOG_ERROR);
    (void)kp_dtype_parse("nope", &dt);
    assert_int_equal(s.calls, 1);
    kp_log_set_callback(NULL, NULL, KP_LOG_WARN);
    assert_string_equal(kp_log_level_str(KP_LOG_INFO), "info");
}

static void dtypes(void **state) {
    static const struct {
        const char *name;
        size_t bytes;
    } want[] = {{"f32", 4}, {"f16", 2}, {"bf16", 2}, {"i32", 4}, {"i16", 2},
                {"i8", 1},  {"u8", 1},  {"i64", 8},  {"u64", 8}, {"u16", 2}};
    assert_int_equal(KP_DTYPE_COUNT, 10);
    for (int i = 0; i < KP_DTYPE_COUNT; i++) {
        kp_dtype dt;
        assert_string_equal(kp_dtype_name((kp_dtype)i), want[i].name);
        assert_int_equal(kp_dtype_size((kp_dtype)i), want[i].bytes);
        KPT_OK(kp_dtype_parse(want[i].name, &dt));
        assert_int_equal(dt, i);
    }
    kp_dtype dt;
    KPT_OK(kp_dtype_parse("float32", &dt));
    assert_int_equal(dt, KP_F32);
    KPT_OK(kp_dtype_parse("BF16", &dt));
    assert_int_equal(dt, KP_BF16);
    assert_int_equal(kp_dtype_size(KP_DTYPE_COUNT), 0);
}

static void descriptors(void **state) {
    kp_tensor_desc d;
    int64_t shape[3] = {2, 3, 4};
    KPT_OK(kp_desc_init(&d, KP_F32, 3, shape, NULL));
    assert_int_equal(d.strides[0], 12);
    assert_int_equal(d.strides[2], 1);
    assert_int_equal(kp_desc_numel(&d), 24);
    assert_true(kp_desc_is_contiguous(&d));
    int64_t lo, hi;
    kp_desc_byte_extent(&d, &lo, &hi);
    assert_int_equal(lo, 0);
    assert_int_equal(hi, 96);
    char buf[64];
    assert_string_equal(kp_desc_str(&d, buf, sizeof buf), "f32[2,3,4]");

    /* transpose by strides is not contiguous; size-1 dims are ignored */
    kp_tensor_desc t = d;
    t.shape[1] = 4;
    t.shape[2] = 3;
    t.strides[1] = 1;
    t.strides[2] = 4;
    assert_false(kp_desc_is_contiguous(&t));
    int64_t s1[3] = {1, 5, 1}, st1[3] = {99, 1, 7};
    KPT_OK(kp_desc_init(&t, KP_I8, 3, s1, st1));
    assert_true(kp_desc_is_contiguous(&t));

    /* offset and extent in bytes */
    d.offset = 10;
    kp_desc_byte_extent(&d, &lo, &hi);
    assert_int_equal(lo, 40);
    assert_int_equal(hi, 136);
    assert_int_equal(kp_desc_bytes_needed(&d), 136);

    /* empty tensors span nothing */
    int64_t z[2] = {3, 0};
    KPT_OK(kp_desc_init(&t, KP_F16, 2, z, NULL));
    assert_int_equal(kp_desc_numel(&t), 0);
    kp_desc_byte_extent(&t, &lo, &hi);
    assert_int_equal(lo, hi);

    /* bad input */
    int64_t neg[1] = {-1};
    KPT_FAILS(kp_desc_init(&t, KP_F32, 1, neg, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_desc_init(&t, KP_F32, 9, shape, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_desc_init(&t, (kp_dtype)42, 1, shape, NULL), KP_ERR_INVALID_ARG);
    int64_t huge[2] = {INT64_MAX / 2, 4};
    KPT_FAILS(kp_desc_init(&t, KP_I64, 2, huge, NULL), KP_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings),
        cmocka_unit_test(last_error_is_thread_local_detail),
        cmocka_unit_test(log_callback_and_level),
        cmocka_unit_test(dtypes),
        cmocka_unit_test(descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
