/* Every public function called wrongly: NULL handles and pointers, zero and
 * huge counts and sizes, out-of-range dims, kinds and indices, foreign
 * pointers. Each must return its error with a detail (or, for functions
 * without a status, the documented neutral answer), and never crash, hang
 * or leak. tests/api_coverage.sh checks that every function declared in
 * include/kpipe/ is called here.
 *   test_api_misuse [DEVICE]   (cpu by default; exit 77 without the device) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

static kp_device_t g_dev;
#define BAD KP_ERR_INVALID_ARG

/* KPT_FAILS, and the detail must start with the called function's name.
 * Every miss is printed and counted; main fails the run when any was. */
static int g_misses;

static void fails_named(kp_status got, kp_status want, const char *expr, int line) {
    char fn[64];
    size_t n = strcspn(expr, "(");
    snprintf(fn, sizeof fn, "%.*s", (int)n, expr);
    const char *e = kp_last_error();
    if (got != want || strncmp(e, fn, n) != 0 || e[n] != ':') {
        print_error("line %d: %s = %s (\"%s\"), expected %s with a detail starting \"%s:\"\n", line,
                    expr, kp_status_name(got), e, kp_status_name(want), fn);
        g_misses++;
    }
}
#undef KPT_FAILS
#define KPT_FAILS(expr, want) fails_named((expr), (want), #expr, __LINE__)
#define HUGE_BYTES ((size_t)-1)

static void hook_free_only(void *user, kp_mem_kind kind, void *ptr) { free(ptr); }

static void core_calls(void **state) {
    assert_string_equal(kp_status_str((kp_status)999), "unknown status");
    assert_string_equal(kp_status_name((kp_status)-1), "KP_UNKNOWN");
    kp_clear_error();
    assert_string_equal(kp_last_error(), "");
    assert_int_equal(kp_set_error(KP_ERR_IO, "disk %d", 3), KP_ERR_IO);
    assert_string_equal(kp_last_error(), "disk 3");
    assert_int_equal(kp_set_error(KP_ERR_IO, NULL), KP_ERR_IO);
    assert_true(kp_last_error()[0] != '\0');
    assert_string_equal(kp_log_level_str((kp_log_level)99), "?");
    kp_log_level lvl = kp_log_get_level();
    kp_log_set_callback(NULL, NULL, lvl);
    kp_alloc_hook h = KP_ALLOC_HOOK_INIT;
    h.struct_size = 3;
    KPT_FAILS(kp_set_alloc_hook(&h), BAD);
    h = (kp_alloc_hook)KP_ALLOC_HOOK_INIT;
    h.free = hook_free_only; /* free without alloc */
    KPT_FAILS(kp_set_alloc_hook(&h), BAD);
    KPT_OK(kp_set_alloc_hook(NULL));
    assert_true(kp_version_str()[0] != '\0');
    char long_text[100];
    memset(long_text, 'v', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = '\0';
    KPT_FAILS(kp_library_register(NULL, "1"), BAD);
    KPT_FAILS(kp_library_register("", "1"), BAD);
    KPT_FAILS(kp_library_register("misuse_lib", NULL), BAD);
    KPT_FAILS(kp_library_register("misuse_lib", long_text), BAD);
    KPT_OK(kp_library_register("misuse_lib", "1.2"));
    KPT_OK(kp_library_register("misuse_lib", "9.9")); /* the first version stays */
    bool found = false;
    for (size_t i = 0; kp_library_name(i); i++)
        found = found || strcmp(kp_library_name(i), "misuse_lib 1.2") == 0;
    assert_true(found);
    assert_null(kp_library_name(SIZE_MAX));
}

static void tensor_calls(void **state) {
    assert_int_equal(kp_dtype_size((kp_dtype)-1), 0);
    assert_int_equal(kp_dtype_size(KP_DTYPE_COUNT), 0);
    assert_string_equal(kp_dtype_name((kp_dtype)99), "invalid");
    kp_dtype dt;
    KPT_FAILS(kp_dtype_parse(NULL, &dt), BAD);
    KPT_FAILS(kp_dtype_parse("f32", NULL), BAD);
    KPT_FAILS(kp_dtype_parse("f33", &dt), KP_ERR_PARSE);

    kp_tensor_desc d;
    int64_t shape[KP_MAX_DIMS + 2] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    int64_t huge[2] = {INT64_MAX, 2}, neg[1] = {-1}, negst[1] = {-4};
    KPT_FAILS(kp_desc_init(NULL, KP_F32, 1, shape, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, KP_MAX_DIMS + 1, shape, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, -1, shape, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, 1, NULL, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, 2, huge, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, 1, neg, NULL), BAD);
    KPT_FAILS(kp_desc_init(&d, KP_F32, 1, shape, negst), BAD);
    KPT_FAILS(kp_desc_init(&d, (kp_dtype)77, 1, shape, NULL), BAD);
    KPT_FAILS(kp_desc_validate(NULL), BAD);
    /* a descriptor with garbage in it: every function answers without reading past it */
    kp_tensor_desc bad;
    memset(&bad, 0x7f, sizeof bad);
    bad.dtype = KP_F32;
    KPT_FAILS(kp_desc_validate(&bad), BAD);
    KPT_OK(kp_desc_init(&d, KP_F32, 2, shape, NULL));
    for (int nd = -5; nd <= 1 << 20; nd = nd < 20 ? nd + 5 : nd * 4) {
        bad = d;
        bad.ndim = nd;
        if (nd >= 0 && nd <= KP_MAX_DIMS) continue;
        char buf[64];
        int64_t lo = 1, hi = 1;
        assert_int_equal(kp_desc_numel(&bad), -1);
        assert_false(kp_desc_is_contiguous(&bad));
        kp_desc_byte_extent(&bad, &lo, &hi);
        assert_true(lo == 0 && hi == 0);
        assert_int_equal(kp_desc_bytes_needed(&bad), -1);
        assert_false(kp_desc_same_shape(&bad, &d));
        assert_string_equal(kp_desc_str(&bad, buf, sizeof buf), "invalid");
        assert_int_equal(kp_desc_overlap(&bad, &d), KP_OVERLAP_ASSUMED);
        assert_int_equal(kp_desc_overlap_bounded(&d, &bad, 100), KP_OVERLAP_ASSUMED);
    }
    bad = d;
    bad.strides[0] = INT64_MAX; /* extent overflows */
    assert_int_equal(kp_desc_numel(&bad), -1);
    assert_int_equal(kp_desc_bytes_needed(&bad), -1);
    assert_int_equal(kp_desc_overlap(&bad, &d), KP_OVERLAP_ASSUMED);
    assert_int_equal(kp_desc_numel(NULL), -1);
    assert_false(kp_desc_is_contiguous(NULL));
    kp_desc_byte_extent(NULL, NULL, NULL);
    assert_int_equal(kp_desc_bytes_needed(NULL), -1);
    assert_false(kp_desc_same_shape(NULL, &d));
    assert_false(kp_desc_same_shape(&d, NULL));
    assert_string_equal(kp_desc_str(&d, NULL, 0), "");
    char small[4];
    assert_string_equal(kp_desc_str(NULL, small, sizeof small), "(nu");
    assert_int_equal(kp_desc_overlap(NULL, NULL), KP_OVERLAP_ASSUMED);
    assert_int_equal(kp_desc_overlap_bounded(&d, &d, -1), KP_OVERLAP_ASSUMED);
    /* spans of items over blocks: no gap, no overlap, an empty grid owns nothing */
    uint64_t lo, hi, next = 0;
    kp_dim3 grid = {7, 1, 1}, none = {0, 1, 1};
    for (uint64_t b = 0; b < 7; b++) {
        kp_host_block_span(UINT64_MAX, grid, b, 1, &lo, &hi);
        assert_true(lo == next && hi >= lo);
        next = hi;
    }
    assert_true(next == UINT64_MAX);
    kp_host_block_span(5, none, 0, 3, &lo, &hi);
    assert_true(lo == 0 && hi == 0);
}

static void npy_calls(void **state) {
    kp_tensor_desc d;
    size_t off, bytes;
    void *data;
    KPT_FAILS(kp_npy_parse(NULL, 10, &d, &off), BAD);
    KPT_FAILS(kp_npy_parse("x", 1, NULL, &off), BAD);
    KPT_FAILS(kp_npy_parse("x", 1, &d, NULL), BAD);
    KPT_FAILS(kp_npy_parse("", 0, &d, &off), KP_ERR_PARSE);
    KPT_FAILS(kp_npy_load(NULL, &d, &data, &bytes), BAD);
    KPT_FAILS(kp_npy_load("/x", NULL, &data, &bytes), BAD);
    KPT_FAILS(kp_npy_save(NULL, &d, &d), BAD);
    KPT_FAILS(kp_npy_save("/tmp/x.npy", NULL, &d), BAD);
    kp_npy_free(NULL);
}

static void noop(void *u) { (void)u; }

static void device_calls(void **state) {
    kp_device_t d = (kp_device_t)0x1;
    char buf[64];
    int drv, rt;
    KPT_FAILS(kp_device_open(NULL, &d), BAD);
    KPT_FAILS(kp_device_open("cpu", NULL), BAD);
    KPT_FAILS(kp_device_open("", &d), KP_ERR_NO_DEVICE);
    KPT_FAILS(kp_device_open("tpu", &d), KP_ERR_NO_DEVICE);
    static const char *const odd[] = {"cuda:", "cuda:-1", "cuda:x", "cuda:99999999999", "cuda:1:2"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        kp_status st = kp_device_open(odd[i], &d);
        assert_true(st == BAD || st == KP_ERR_NO_DEVICE);
        assert_true(kp_last_error()[0] != '\0');
        assert_null(d);
    }
    kp_device_close(NULL);
    assert_string_equal(kp_device_backend(NULL), "(null)");
    assert_string_equal(kp_device_kernel_form(NULL), "(null)");
    assert_string_equal(kp_device_name(NULL), "(null)");
    KPT_FAILS(kp_device_describe(NULL, buf, sizeof buf), BAD);
    KPT_FAILS(kp_device_describe(g_dev, NULL, 0), BAD);
    KPT_FAILS(kp_device_versions(NULL, &drv, &rt), BAD);
    KPT_FAILS(kp_device_versions(g_dev, NULL, NULL), BAD);
    assert_int_equal(kp_device_count("tpu", buf, sizeof buf), 0);
    assert_non_null(strstr(buf, "no backend"));
    assert_int_equal(kp_device_count(NULL, NULL, 0), 0);
    assert_int_equal(kp_device_count("cpu", NULL, 0), 4);
    assert_true(kp_backend_count() >= 1);
    assert_null(kp_backend_name(1000));
    assert_null(kp_backend_find(NULL));
    assert_null(kp_backend_find("cpu:0"));
    kp_backend_reg reg = *kp_backend_find("cpu");
    KPT_FAILS(kp_backend_register(NULL), BAD);
    KPT_FAILS(kp_backend_register(&reg), BAD); /* the name is taken */
    reg.name = "a:b";
    KPT_FAILS(kp_backend_register(&reg), BAD);
    reg.name = "misuse_nokernels";
    reg.kernel_form = NULL;
    KPT_FAILS(kp_backend_register(&reg), BAD);
    reg = *kp_backend_find("cpu");
    reg.struct_size = 5;
    KPT_FAILS(kp_backend_register(&reg), BAD);
    /* bad options reach open, which refuses them */
    static const kp_host_options bad_opts = {sizeof(kp_host_options), 0, 4};
    reg = *kp_backend_find("cpu");
    reg.name = "misuse_zero_workers";
    reg.options = &bad_opts;
    KPT_OK(kp_backend_register(&reg));
    KPT_FAILS(kp_device_open("misuse_zero_workers", &d), BAD);
    assert_null(d);
    static const kp_host_options no_devices = {sizeof(kp_host_options), 1, 0};
    reg.name = "misuse_no_devices";
    reg.options = &no_devices;
    KPT_OK(kp_backend_register(&reg));
    assert_int_equal(kp_device_count("misuse_no_devices", NULL, 0), 0);
    KPT_FAILS(kp_device_open("misuse_no_devices", &d), KP_ERR_NO_DEVICE);
    assert_null(d);
    KPT_FAILS(kp_device_open("cpu:64", &d), KP_ERR_NO_DEVICE);
    /* peers: every cpu device reaches every other; other backends never */
    bool can = false;
    kp_device_t d1 = NULL;
    KPT_OK(kp_device_open("cpu:1", &d1));
    KPT_FAILS(kp_device_peer_access(NULL, d1, true, &can), BAD);
    KPT_FAILS(kp_device_peer_access(g_dev, NULL, true, &can), BAD);
    KPT_FAILS(kp_device_peer_access(g_dev, d1, true, NULL), BAD);
    KPT_OK(kp_device_peer_access(g_dev, g_dev, false, &can));
    assert_true(can);
    if (strcmp(kp_device_backend(g_dev), "cpu") == 0) {
        KPT_OK(kp_device_peer_access(g_dev, d1, true, &can));
        assert_true(can);
    } else {
        KPT_OK(kp_device_peer_access(g_dev, d1, true, &can));
        assert_false(can);
    }
    /* one backend: devices of it whatever their ordinals; never NULL */
    kp_device_t d2 = NULL;
    KPT_OK(kp_device_open(kp_device_name(g_dev), &d2));
    assert_true(kp_device_same_backend(g_dev, g_dev));
    assert_true(kp_device_same_backend(g_dev, d2)); /* a second handle of the same device */
    assert_true(kp_device_same_backend(d1, d1));
    assert_int_equal(kp_device_same_backend(g_dev, d1),
                     strcmp(kp_device_backend(g_dev), kp_device_backend(d1)) == 0);
    assert_false(kp_device_same_backend(NULL, d1));
    assert_false(kp_device_same_backend(g_dev, NULL));
    kp_device_close(d2);
    KPT_FAILS(kp_device_bind_thread(NULL), BAD);
    KPT_OK(kp_device_bind_thread(g_dev));
    kp_device_close(d1);
    assert_null(kp_kernel_find(NULL, "host"));
    assert_null(kp_kernel_find(&kpt_affine, NULL));
    assert_null(kp_kernel_find(&kpt_cpu_only, "cuda"));
    KPT_FAILS(kp_device_attach(NULL, &d, &d, noop), BAD);
    KPT_FAILS(kp_device_attach(g_dev, NULL, &d, noop), BAD);
    KPT_FAILS(kp_device_attach(g_dev, &d, &d, NULL), BAD);
    KPT_OK(kp_device_attach(g_dev, &d, &d, noop));
    KPT_FAILS(kp_device_attach(g_dev, &d, &d, noop), KP_ERR_STATE); /* the key is taken */
    assert_true(kp_device_attachment(g_dev, &d) == &d);
    assert_null(kp_device_attachment(NULL, &d));
    assert_null(kp_device_attachment(g_dev, NULL));
    KPT_FAILS(kp_device_sync(NULL), BAD);

    void *p = (void *)0x1;
    KPT_FAILS(kp_malloc(NULL, 4, &p), BAD);
    KPT_FAILS(kp_malloc(g_dev, 4, NULL), BAD);
    KPT_FAILS(kp_malloc(g_dev, HUGE_BYTES, &p), KP_ERR_OUT_OF_MEMORY);
    assert_null(p);
    KPT_FAILS(kp_malloc_host(NULL, 4, &p), BAD);
    KPT_FAILS(kp_malloc_host(g_dev, HUGE_BYTES, &p), KP_ERR_OUT_OF_MEMORY);
    kp_free(NULL, p);
    kp_free(g_dev, NULL);
    kp_free_host(NULL, p);
    kp_free_host(g_dev, NULL);
    float x[4], *dx;
    KPT_OK(kp_malloc(g_dev, sizeof x, (void **)&dx));
    KPT_FAILS(kp_memcpy_htod(NULL, dx, x, sizeof x), BAD);
    KPT_FAILS(kp_memcpy_htod(g_dev, NULL, x, sizeof x), BAD);
    KPT_FAILS(kp_memcpy_dtoh(g_dev, x, NULL, sizeof x), BAD);
    KPT_FAILS(kp_memcpy_dtod(g_dev, NULL, NULL, 4), BAD);
    KPT_OK(kp_memcpy_dtod(g_dev, NULL, NULL, 0)); /* nothing to copy */
    kp_free(g_dev, dx);
}

/* What a device says it can do matches what it does: native handles where
 * it claims native streams, copies needed where its memory is its own. */
static void device_caps(void **state) {
    kp_device_caps c = KP_DEVICE_CAPS_INIT;
    KPT_FAILS(kp_device_query_caps(NULL, &c), BAD);
    KPT_FAILS(kp_device_query_caps(g_dev, NULL), BAD);
    c.struct_size = 0;
    KPT_FAILS(kp_device_query_caps(g_dev, &c), BAD);
    c.struct_size = sizeof c + 1;
    KPT_FAILS(kp_device_query_caps(g_dev, &c), BAD);
    c = (kp_device_caps)KP_DEVICE_CAPS_INIT;
    KPT_OK(kp_device_query_caps(g_dev, &c));
    assert_int_equal(c.struct_size, sizeof c);
    kp_stream_t s, w = NULL;
    KPT_OK(kp_stream_create(g_dev, &s));
    assert_int_equal(c.native_streams, kp_stream_native(s) != NULL);
    if (c.native_streams) {
        KPT_OK(kp_stream_wrap(g_dev, kp_stream_native(s), &w));
        kp_stream_destroy(w);
    } else {
        KPT_FAILS(kp_stream_wrap(g_dev, NULL, &w), KP_ERR_UNSUPPORTED);
    }
    kp_stream_destroy(s);
    if (strcmp(kp_device_backend(g_dev), "cpu") == 0) {
        assert_false(c.device_memory);
        assert_false(c.pinned_staging);
        assert_false(c.native_graphs);
        assert_false(c.rtc);
        assert_false(c.video_decode);
        assert_false(c.video_encode);
        assert_null(c.native_api);
        assert_int_equal(c.native_ordinal, -1);
    } else if (strcmp(kp_device_backend(g_dev), "cuda") == 0) {
        assert_true(c.device_memory);
        assert_true(c.pinned_staging);
        assert_true(c.native_streams);
        assert_true(c.native_graphs);
        assert_true(c.rtc);
        assert_true(c.video_decode);
        assert_true(c.video_encode);
        assert_string_equal(c.native_api, "cuda");
        const char *colon = strchr(kp_device_name(g_dev), ':');
        assert_int_equal(c.native_ordinal, atoi(colon + 1));
    }
}

static void stream_and_event_calls(void **state) {
    kp_stream_t s;
    kp_event_t ev;
    bool b;
    float ms;
    KPT_FAILS(kp_stream_create(NULL, &s), BAD);
    KPT_FAILS(kp_stream_create(g_dev, NULL), BAD);
    KPT_OK(kp_stream_create(g_dev, &s));
    kp_stream_destroy(NULL);
    KPT_FAILS(kp_stream_sync(NULL), BAD);
    KPT_FAILS(kp_stream_query(NULL, &b), BAD);
    KPT_FAILS(kp_stream_query(s, NULL), BAD);
    assert_null(kp_stream_device(NULL));
    assert_null(kp_stream_native(NULL));
    kp_stream_t w = s;
    KPT_FAILS(kp_stream_wrap(NULL, NULL, &w), BAD);
    assert_ptr_equal(w, s); /* out untouched when the device is refused */
    KPT_FAILS(kp_stream_wrap(g_dev, NULL, NULL), BAD);
    kp_graph_node_t nn;
    KPT_FAILS(kp_graph_add_native(NULL, NULL, 0, &nn, &nn), BAD);
    float x[4];
    KPT_FAILS(kp_memcpy_async(NULL, x, x, 4), BAD);
    KPT_FAILS(kp_memcpy_async(s, NULL, x, 4), BAD);
    KPT_FAILS(kp_memset_async(NULL, x, 0, 4), BAD);
    KPT_FAILS(kp_memset_async(s, NULL, 0, 4), BAD);
    KPT_FAILS(kp_memcpy2d_async(NULL, x, 8, x, 8, 4, 2), BAD);
    KPT_FAILS(kp_memcpy2d_async(s, x, 8, NULL, 8, 4, 2), BAD);
    KPT_FAILS(kp_memcpy2d_async(s, x, 2, x, 8, 4, 2), BAD); /* pitch below the width */
    KPT_FAILS(kp_memcpy2d_async(s, x, SIZE_MAX, x, 8, 4, 3), BAD);
    kpt_affine_params ap = {NULL, 1, 1, 0};
    kp_launch l = kpt_launch_1d(&kpt_affine, &ap, 1);
    KPT_FAILS(kp_launch_kernel(NULL, &l), BAD);
    KPT_FAILS(kp_launch_kernel(s, NULL), BAD);
    kp_kernel big = kpt_affine;
    big.params_size = KP_MAX_KERNEL_PARAMS + 1;
    l.kernel = &big;
    KPT_FAILS(kp_launch_kernel(s, &l), BAD);
    kp_kernel noimpl = kpt_affine;
    memset(noimpl.impls, 0, sizeof noimpl.impls);
    l.kernel = &noimpl;
    KPT_FAILS(kp_launch_kernel(s, &l), KP_ERR_UNSUPPORTED);
    l = kpt_launch_1d(&kpt_affine, &ap, 1);
    l.grid.z = 0;
    KPT_FAILS(kp_launch_kernel(s, &l), BAD);
    KPT_FAILS(kp_launch_host_func(NULL, noop, NULL), BAD);
    KPT_FAILS(kp_launch_host_func(s, NULL, NULL), BAD);

    KPT_FAILS(kp_event_create(NULL, &ev), BAD);
    KPT_FAILS(kp_event_create(g_dev, NULL), BAD);
    KPT_OK(kp_event_create(g_dev, &ev));
    kp_event_destroy(NULL);
    KPT_FAILS(kp_event_record(NULL, s), BAD);
    KPT_FAILS(kp_event_record(ev, NULL), BAD);
    KPT_FAILS(kp_event_query(NULL, &b), BAD);
    KPT_FAILS(kp_event_query(ev, NULL), BAD);
    KPT_FAILS(kp_event_sync(NULL), BAD);
    KPT_FAILS(kp_stream_wait_event(NULL, ev), BAD);
    KPT_FAILS(kp_stream_wait_event(s, NULL), BAD);
    KPT_FAILS(kp_event_elapsed_ms(NULL, ev, &ms), BAD);
    KPT_FAILS(kp_event_elapsed_ms(ev, NULL, &ms), BAD);
    KPT_FAILS(kp_event_elapsed_ms(ev, ev, NULL), BAD);
    assert_int_not_equal(kp_event_elapsed_ms(ev, ev, &ms), KP_OK); /* never recorded */
    /* an untimed event orders work like any other, and has no timestamps */
    kp_event_t ue;
    KPT_FAILS(kp_event_create_untimed(NULL, &ue), BAD);
    KPT_FAILS(kp_event_create_untimed(g_dev, NULL), BAD);
    KPT_OK(kp_event_create_untimed(g_dev, &ue));
    KPT_OK(kp_event_record(ev, s));
    KPT_OK(kp_event_record(ue, s));
    KPT_OK(kp_stream_wait_event(s, ue));
    KPT_OK(kp_event_sync(ue));
    KPT_OK(kp_event_query(ue, &b));
    assert_true(b);
    KPT_FAILS(kp_event_elapsed_ms(ev, ue, &ms), BAD);
    assert_non_null(strstr(kp_last_error(), "end event was made by kp_event_create_untimed"));
    KPT_FAILS(kp_event_elapsed_ms(ue, ev, &ms), BAD);
    kp_event_destroy(ue);

    kp_graph_t g;
    KPT_FAILS(kp_stream_begin_capture(NULL), BAD);
    KPT_FAILS(kp_stream_end_capture(NULL, &g), BAD);
    KPT_FAILS(kp_stream_end_capture(s, NULL), BAD);
    KPT_FAILS(kp_stream_end_capture(s, &g), KP_ERR_STATE);
    assert_false(kp_stream_is_capturing(NULL));
    kp_event_destroy(ev);
    kp_stream_destroy(s);

    /* sharing with another process: arguments; cpu cannot share */
    kp_ipc_handle h;
    void *p = NULL, *mem = NULL;
    KPT_FAILS(kp_ipc_export(NULL, &b, &h), BAD);
    KPT_FAILS(kp_ipc_export(g_dev, NULL, &h), BAD);
    KPT_FAILS(kp_ipc_export(g_dev, &b, NULL), BAD);
    KPT_FAILS(kp_ipc_open(NULL, &h, &p), BAD);
    KPT_FAILS(kp_ipc_open(g_dev, NULL, &p), BAD);
    KPT_FAILS(kp_ipc_open(g_dev, &h, NULL), BAD);
    KPT_FAILS(kp_event_create_ipc(NULL, &ev, &h), BAD);
    KPT_FAILS(kp_event_create_ipc(g_dev, &ev, NULL), BAD);
    KPT_FAILS(kp_event_create_ipc(g_dev, NULL, &h), BAD);
    KPT_FAILS(kp_event_open_ipc(NULL, &h, &ev), BAD);
    KPT_FAILS(kp_event_open_ipc(g_dev, NULL, &ev), BAD);
    KPT_FAILS(kp_event_open_ipc(g_dev, &h, NULL), BAD);
    kp_ipc_close(NULL, NULL);
    KPT_OK(kp_malloc(g_dev, 256, &mem));
    if (strcmp(kp_device_backend(g_dev), "cpu") == 0) {
        KPT_FAILS(kp_ipc_export(g_dev, mem, &h), KP_ERR_UNSUPPORTED);
        assert_non_null(strstr(kp_last_error(), "cannot share memory or events"));
        KPT_FAILS(kp_event_create_ipc(g_dev, &ev, &h), KP_ERR_UNSUPPORTED);
        assert_null(ev);
    } else {
        KPT_OK(kp_ipc_export(g_dev, mem, &h)); /* opened in another process: test_remote */
        KPT_OK(kp_event_create_ipc(g_dev, &ev, &h));
        kp_event_destroy(ev);
    }
    kp_free(g_dev, mem);
}

static void graph_calls(void **state) {
    kp_graph_t g, g2;
    kp_graph_exec_t ge;
    kp_graph_node_t n, first, deps[2] = {NULL, NULL};
    kp_stream_t s;
    float *y;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_OK(kp_malloc(g_dev, 64, (void **)&y));
    kpt_affine_params ap = {y, 1, 1, 1}, ap5 = {y, 0, 5, 1};
    kp_launch l = kpt_launch_1d(&kpt_affine, &ap, 1), l5 = kpt_launch_1d(&kpt_affine, &ap5, 1);
    KPT_FAILS(kp_graph_create(NULL, &g), BAD);
    KPT_FAILS(kp_graph_create(g_dev, NULL), BAD);
    KPT_OK(kp_graph_create(g_dev, &g));
    KPT_OK(kp_graph_create(g_dev, &g2));
    kp_graph_destroy(NULL);
    KPT_FAILS(kp_graph_add_kernel(NULL, NULL, 0, &l, &n), BAD);
    KPT_FAILS(kp_graph_add_kernel(g, NULL, 2, &l, &n), BAD);
    KPT_FAILS(kp_graph_add_kernel(g, deps, 2, &l, &n), BAD);
    KPT_FAILS(kp_graph_add_kernel(g, NULL, 0, NULL, &n), BAD);
    KPT_FAILS(kp_graph_add_kernel(g, NULL, 0, &l, NULL), BAD);
    KPT_FAILS(kp_graph_add_memcpy(g, NULL, 0, y, y, 0, &n), BAD);
    KPT_FAILS(kp_graph_add_memcpy(g, NULL, 0, NULL, y, 4, &n), BAD);
    KPT_FAILS(kp_graph_add_memcpy(NULL, NULL, 0, y, y, 4, &n), BAD);
    KPT_FAILS(kp_graph_add_child(g, NULL, 0, NULL, &n), BAD);
    KPT_FAILS(kp_graph_add_child(g, NULL, 0, g, &n), BAD);
    KPT_FAILS(kp_graph_add_child(NULL, NULL, 0, g, &n), BAD);
    KPT_FAILS(kp_graph_add_empty(NULL, NULL, 0, &n), BAD);
    KPT_FAILS(kp_graph_add_empty(g, NULL, 0, NULL), BAD);
    assert_int_equal(kp_graph_node_count(NULL), 0);
    KPT_OK(kp_graph_add_kernel(g, NULL, 0, &l, &n));
    KPT_FAILS(kp_graph_add_kernel_first(NULL, &l, &first), BAD);
    KPT_FAILS(kp_graph_add_kernel_first(g, NULL, &first), BAD);
    KPT_FAILS(kp_graph_add_kernel_first(g, &l, NULL), BAD);
    assert_int_equal(kp_graph_node_count(g), 1); /* refusals changed nothing */
    if (strcmp(kp_device_backend(g_dev), "cpu") == 0) {
        KPT_FAILS(kp_graph_add_kernel_first(g, &l, &first), KP_ERR_UNSUPPORTED);
        assert_non_null(strstr(kp_last_error(), "in the order they were added"));
        assert_int_equal(kp_graph_node_count(g), 1);
    } else {
        /* y = 5 first, though added last; then y = y + 1 */
        KPT_OK(kp_graph_add_kernel_first(g, &l5, &first));
        assert_int_equal(kp_graph_node_count(g), 2);
    }
    KPT_FAILS(kp_graph_instantiate(NULL, &ge), BAD);
    KPT_FAILS(kp_graph_instantiate(g, NULL), BAD);
    KPT_OK(kp_graph_instantiate(g, &ge));
    kp_graph_exec_destroy(NULL);
    KPT_FAILS(kp_graph_exec_upload(NULL, s), BAD);
    KPT_FAILS(kp_graph_exec_upload(ge, NULL), BAD);
    KPT_FAILS(kp_graph_exec_launch(NULL, s), BAD);
    KPT_FAILS(kp_graph_exec_launch(ge, NULL), BAD);
    KPT_FAILS(kp_graph_exec_set_kernel(NULL, n, &l), BAD);
    KPT_FAILS(kp_graph_exec_set_kernel(ge, NULL, &l), BAD);
    KPT_FAILS(kp_graph_exec_set_kernel(ge, n, NULL), BAD);
    KPT_FAILS(kp_graph_exec_set_memcpy(ge, n, NULL, y, 4), BAD);
    KPT_FAILS(kp_graph_exec_set_memcpy(ge, n, y, y, 0), BAD);
    KPT_FAILS(kp_graph_exec_set_memcpy(NULL, n, y, y, 4), BAD);
    KPT_FAILS(kp_graph_exec_set_child(ge, n, NULL), BAD);
    KPT_FAILS(kp_graph_exec_set_child(NULL, n, g2), BAD);
    KPT_FAILS(kp_graph_exec_set_child(ge, NULL, g2), BAD);
    KPT_FAILS(kp_graph_exec_update(NULL, g), BAD);
    KPT_FAILS(kp_graph_exec_update(ge, NULL), BAD);
    KPT_FAILS(kp_graph_exec_update(ge, g2), KP_ERR_MISMATCH); /* other topology */
    KPT_OK(kp_graph_exec_launch(ge, s));
    KPT_OK(kp_stream_sync(s));
    if (strcmp(kp_device_backend(g_dev), "cpu") != 0) {
        float host = 0;
        KPT_OK(kp_memcpy_async(s, &host, y, sizeof host));
        KPT_OK(kp_stream_sync(s));
        assert_true(host == 6.0f);
    }
    kp_graph_exec_destroy(ge);
    kp_graph_destroy(g);
    kp_graph_destroy(g2);
    kp_free(g_dev, y);
    kp_stream_destroy(s);
}

/* Foreign pointers, double frees and sizes past any device, on each kind. */
static void allocator_calls(void **state) {
    kp_allocator_t a, mine;
    kp_stream_t s;
    kp_alloc_stats st;
    kp_block_info rows[4];
    size_t n;
    void *p = (void *)0x1;
    int on_stack;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_FAILS(kp_allocator_create(NULL, KP_ALLOCATOR_HOST, NULL, &a), BAD);
    KPT_FAILS(kp_allocator_create(g_dev, KP_ALLOCATOR_KINDS, NULL, &a), BAD);
    KPT_FAILS(kp_allocator_create(g_dev, (kp_allocator_kind)-1, NULL, &a), BAD);
    KPT_FAILS(kp_allocator_create(g_dev, KP_ALLOCATOR_HOST, NULL, NULL), BAD);
    kp_allocator_config cfg = KP_ALLOCATOR_CONFIG_INIT;
    cfg.struct_size = 1;
    KPT_FAILS(kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, &cfg, &a), BAD);
    kp_allocator_destroy(NULL);
    KPT_FAILS(kp_device_allocator(NULL, KP_ALLOCATOR_DEVICE, &a), BAD);
    KPT_FAILS(kp_device_allocator(g_dev, KP_ALLOCATOR_KINDS, &a), BAD);
    KPT_FAILS(kp_device_allocator(g_dev, KP_ALLOCATOR_DEVICE, NULL), BAD);
    KPT_FAILS(kp_device_set_allocator(NULL, KP_ALLOCATOR_DEVICE, NULL), BAD);
    KPT_FAILS(kp_device_set_allocator(g_dev, (kp_allocator_kind)7, NULL), BAD);
    KPT_OK(kp_allocator_create(g_dev, KP_ALLOCATOR_HOST, NULL, &mine));
    KPT_FAILS(kp_device_set_allocator(g_dev, KP_ALLOCATOR_PINNED, mine), BAD); /* wrong kind */
    kp_allocator_destroy(mine);
    assert_int_equal(kp_allocator_get_kind(NULL), KP_ALLOCATOR_KINDS);
    KPT_FAILS(kp_allocator_alloc(NULL, 4, s, &p), BAD);
    KPT_FAILS(kp_allocator_free(NULL, p), BAD);
    KPT_FAILS(kp_allocator_record_stream(NULL, p, s), BAD);
    KPT_FAILS(kp_allocator_empty_cache(NULL), BAD);
    KPT_FAILS(kp_allocator_stats(NULL, &st), BAD);
    KPT_FAILS(kp_allocator_snapshot(NULL, rows, 4, &n), BAD);
    for (int k = 0; k < KP_ALLOCATOR_KINDS; k++) {
        KPT_OK(kp_allocator_create(g_dev, (kp_allocator_kind)k, NULL, &a));
        assert_int_equal(kp_allocator_get_kind(a), k);
        KPT_FAILS(kp_allocator_alloc(a, 4, s, NULL), BAD);
        static const size_t sizes[] = {HUGE_BYTES, HUGE_BYTES - 511, HUGE_BYTES / 2 + 1,
                                       ((size_t)1 << 48) + 1};
        for (size_t i = 0; i < 4; i++) {
            p = (void *)0x1;
            KPT_FAILS(kp_allocator_alloc(a, sizes[i], s, &p), KP_ERR_OUT_OF_MEMORY);
            assert_null(p);
        }
        /* Small values must not match the pointer map's empty (0) and deleted
         * (1) markers: freeing many blocks leaves deleted slots all over the
         * map (46 of 64 here), which a probe for (void *)1 would find. */
        for (int round = 0; round < 20; round++) {
            void *q[46];
            for (int i = 0; i < 46; i++) KPT_OK(kp_allocator_alloc(a, 64, s, &q[i]));
            for (int i = 0; i < 46; i++) KPT_OK(kp_allocator_free(a, q[i]));
            KPT_FAILS(kp_allocator_record_stream(a, (void *)1, s), BAD);
            KPT_FAILS(kp_allocator_free(a, (void *)1), BAD);
        }
        /* pointers this allocator never handed out */
        void *foreign[] = {(void *)1, (void *)2, (void *)16, &on_stack};
        for (size_t i = 0; i < 4; i++) {
            KPT_FAILS(kp_allocator_free(a, foreign[i]), BAD);
            KPT_FAILS(kp_allocator_record_stream(a, foreign[i], s), BAD);
        }
        KPT_FAILS(kp_allocator_record_stream(a, NULL, s), BAD);
        /* ... and the allocator still works: no hang, no corruption */
        void *q;
        KPT_OK(kp_allocator_alloc(a, 1000, s, &q));
        KPT_OK(kp_allocator_record_stream(a, q, s));
        KPT_FAILS(kp_allocator_record_stream(a, q, NULL), BAD);
        KPT_OK(kp_allocator_free(a, q));
        KPT_FAILS(kp_allocator_free(a, q), BAD); /* double free */
        KPT_OK(kp_allocator_free(a, NULL));
        KPT_FAILS(kp_allocator_stats(a, NULL), BAD);
        KPT_FAILS(kp_allocator_snapshot(a, NULL, 4, &n), BAD);
        KPT_FAILS(kp_allocator_snapshot(a, rows, 4, NULL), BAD);
        KPT_OK(kp_allocator_snapshot(a, NULL, 0, &n));
        KPT_OK(kp_allocator_stats(a, &st));
        assert_int_equal(st.allocated, 0);
        KPT_OK(kp_allocator_empty_cache(a));
        kp_allocator_destroy(a);
    }
    kp_stream_destroy(s);
}

static void memory_and_tensor_calls(void **state) {
    kp_memory_t m;
    kp_tensor_t t, v;
    kp_stream_t s;
    int64_t shape[KP_MAX_DIMS + 1] = {4, 6, 1, 1, 1, 1, 1, 1, 1};
    int64_t overflow[2] = {(int64_t)1 << 40, (int64_t)1 << 40}, too_big[1] = {(int64_t)1 << 60};
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_FAILS(kp_memory_alloc(NULL, KP_ALLOCATOR_DEVICE, 4, NULL, &m), BAD);
    KPT_FAILS(kp_memory_alloc(g_dev, KP_ALLOCATOR_KINDS, 4, NULL, &m), BAD);
    KPT_FAILS(kp_memory_alloc(g_dev, KP_ALLOCATOR_DEVICE, 4, NULL, NULL), BAD);
    KPT_FAILS(kp_memory_alloc(g_dev, KP_ALLOCATOR_DEVICE, HUGE_BYTES, NULL, &m),
              KP_ERR_OUT_OF_MEMORY);
    assert_null(kp_memory_retain(NULL));
    kp_memory_release(NULL);
    assert_null(kp_memory_data(NULL));
    assert_int_equal(kp_memory_size(NULL), 0);
    assert_null(kp_memory_device(NULL));
    assert_false(kp_memory_is_pinned(NULL));
    assert_int_equal(kp_memory_refcount(NULL), 0);

    KPT_FAILS(kp_tensor_empty(NULL, KP_F32, 2, shape, &t), BAD);
    KPT_FAILS(kp_tensor_empty(g_dev, KP_F32, KP_MAX_DIMS + 1, shape, &t), BAD);
    KPT_FAILS(kp_tensor_empty(g_dev, (kp_dtype)99, 2, shape, &t), BAD);
    KPT_FAILS(kp_tensor_empty(g_dev, KP_F32, 1, NULL, &t), BAD);
    KPT_FAILS(kp_tensor_empty(g_dev, KP_F32, 2, overflow, &t), BAD);
    KPT_FAILS(kp_tensor_empty(g_dev, KP_U8, 1, too_big, &t), KP_ERR_OUT_OF_MEMORY);
    KPT_FAILS(kp_tensor_empty(g_dev, KP_F32, 2, shape, NULL), BAD);
    KPT_FAILS(kp_tensor_zeros(g_dev, KP_F32, 2, shape, NULL, &t), BAD);
    KPT_FAILS(kp_tensor_ones(g_dev, KP_F32, -3, shape, s, &t), BAD);
    KPT_OK(kp_tensor_zeros(g_dev, KP_F32, 2, shape, s, &t));
    KPT_OK(kp_memory_alloc(g_dev, KP_ALLOCATOR_HOST, 16, NULL, &m));
    kp_tensor_desc d = *kp_tensor_get_desc(t);
    KPT_FAILS(kp_tensor_from_memory(NULL, &d, &v), BAD);
    KPT_FAILS(kp_tensor_from_memory(m, NULL, &v), BAD);
    KPT_FAILS(kp_tensor_from_memory(m, &d, &v), BAD); /* 96 bytes over 16 */
    d.ndim = 40;
    KPT_FAILS(kp_tensor_from_memory(m, &d, &v), BAD);
    kp_memory_release(m);
    /* slices: bad dims and ranges, and steps whose products overflow */
    KPT_FAILS(kp_tensor_slice(NULL, 0, 0, 1, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, -1, 0, 1, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 2, 0, 1, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 0, 0, 1, 0, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 0, -1, 1, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 0, 0, 5, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 0, 3, 2, 1, &v), BAD);
    KPT_FAILS(kp_tensor_slice(t, 0, 0, 1, 1, NULL), BAD);
    /* huge steps: (stop - start + step - 1) / step would overflow */
    KPT_OK(kp_tensor_slice(t, 0, 1, 4, INT64_MAX, &v)); /* one element: the step is never used */
    assert_int_equal(kp_tensor_get_desc(v)->shape[0], 1);
    assert_int_equal(kp_tensor_get_desc(v)->offset, 6);
    kp_tensor_release(v);
    KPT_OK(kp_tensor_slice(t, 1, 6, 6, INT64_MAX - 1, &v)); /* empty */
    assert_int_equal(kp_tensor_get_desc(v)->shape[1], 0);
    kp_tensor_release(v);
    KPT_OK(kp_tensor_slice(t, 1, 0, 6, 5, &v)); /* elements 0 and 5 */
    assert_int_equal(kp_tensor_get_desc(v)->shape[1], 2);
    assert_int_equal(kp_tensor_get_desc(v)->strides[1], 5);
    kp_tensor_release(v);
    KPT_FAILS(kp_tensor_reshape(NULL, 1, shape, &v), BAD);
    KPT_FAILS(kp_tensor_reshape(t, KP_MAX_DIMS + 1, shape, &v), BAD);
    KPT_FAILS(kp_tensor_reshape(t, 1, shape, &v), BAD); /* 4 elements, not 24 */
    KPT_FAILS(kp_tensor_transpose(NULL, 0, 1, &v), BAD);
    KPT_FAILS(kp_tensor_transpose(t, 0, 2, &v), BAD);
    KPT_FAILS(kp_tensor_transpose(t, -1, 0, &v), BAD);
    assert_null(kp_tensor_retain(NULL));
    kp_tensor_release(NULL);
    assert_null(kp_tensor_data(NULL));
    assert_null(kp_tensor_get_desc(NULL));
    assert_null(kp_tensor_memory(NULL));
    assert_non_null(kp_tensor_memory(t));
    KPT_OK(kp_stream_sync(s));
    kp_tensor_release(t);
    kp_stream_destroy(s);
}

static void pool_calls(void **state) {
    kp_buffer_pool_t pool;
    kp_buffer_t b;
    kp_pool_stats st;
    kp_pool_config cfg = KP_POOL_CONFIG_INIT;
    KPT_FAILS(kp_buffer_pool_create(NULL, &cfg, &pool), BAD);
    KPT_FAILS(kp_buffer_pool_create(g_dev, NULL, &pool), BAD);
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, NULL), BAD);
    cfg.struct_size = 0;
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, &pool), BAD);
    cfg = (kp_pool_config)KP_POOL_CONFIG_INIT;
    cfg.min_bytes = 0;
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, &pool), BAD);
    cfg = (kp_pool_config)KP_POOL_CONFIG_INIT;
    cfg.max_bytes = 16;
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, &pool), BAD);
    cfg.max_bytes = HUGE_BYTES;
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, &pool), BAD);
    cfg = (kp_pool_config)KP_POOL_CONFIG_INIT;
    cfg.kind = (kp_allocator_kind)9;
    KPT_FAILS(kp_buffer_pool_create(g_dev, &cfg, &pool), BAD);
    kp_buffer_pool_destroy(NULL);
    cfg = (kp_pool_config)KP_POOL_CONFIG_INIT;
    cfg.kind = KP_ALLOCATOR_HOST;
    KPT_OK(kp_buffer_pool_create(g_dev, &cfg, &pool));
    KPT_FAILS(kp_buffer_acquire(NULL, 4, NULL, &b), BAD);
    KPT_FAILS(kp_buffer_acquire(pool, 4, NULL, NULL), BAD);
    KPT_FAILS(kp_buffer_acquire(pool, HUGE_BYTES, NULL, &b), KP_ERR_OUT_OF_MEMORY);
    KPT_FAILS(kp_buffer_acquire(pool, HUGE_BYTES / 2 + 3, NULL, &b), KP_ERR_OUT_OF_MEMORY);
    assert_null(kp_buffer_retain(NULL));
    kp_buffer_release(NULL);
    assert_null(kp_buffer_data(NULL));
    assert_int_equal(kp_buffer_size(NULL), 0);
    KPT_FAILS(kp_buffer_pool_stats(NULL, &st), BAD);
    KPT_FAILS(kp_buffer_pool_stats(pool, NULL), BAD);
    KPT_OK(kp_buffer_acquire(pool, 0, NULL, &b));
    kp_buffer_release(b);
    kp_buffer_pool_destroy(pool);
}

static kp_status dummy_create(const kp_module_env *env, kp_module_def *def) {
    return KP_ERR_UNSUPPORTED;
}

static void module_calls(void **state) {
    kp_port_info pi;
    kp_port_decl pd;
    char long_name[KP_NAME_MAX + 8];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    kp_port_from_tensor(NULL, "x", NULL);
    kp_port_from_tensor(&pi, "x", NULL);
    assert_null(pi.data);
    /* names for every format, and for a value outside the enum */
    assert_string_equal(kp_pixel_format_name(KP_PIXEL_P016), "P016");
    assert_string_equal(kp_pixel_format_name(KP_PIXEL_NONE), "none");
    assert_string_equal(kp_pixel_format_name((kp_pixel_format)77), "unknown");
    assert_int_equal(kp_pixel_format_sample_bytes(KP_PIXEL_P016), 2);
    assert_int_equal(kp_pixel_format_sample_bytes(KP_PIXEL_NV12), 1);
    assert_int_equal(kp_pixel_format_sample_bytes((kp_pixel_format)77), 1);
    KPT_FAILS(kp_port_decl_1d(NULL, "x", KP_F32, 4), BAD);
    KPT_FAILS(kp_port_decl_1d(&pd, NULL, KP_F32, 4), BAD);
    KPT_FAILS(kp_port_decl_1d(&pd, long_name, KP_F32, 4), BAD);
    KPT_FAILS(kp_port_decl_1d(&pd, "x", KP_F32, -4), BAD);
    KPT_FAILS(kp_port_decl_1d(&pd, "x", (kp_dtype)99, 4), BAD);
    KPT_FAILS(kp_module_register(NULL, dummy_create), BAD);
    KPT_FAILS(kp_module_register("", dummy_create), BAD);
    KPT_FAILS(kp_module_register("a.b", dummy_create), BAD);
    KPT_FAILS(kp_module_register(long_name, dummy_create), BAD);
    KPT_FAILS(kp_module_register("misuse_dummy", NULL), BAD);
    KPT_FAILS(kp_module_register("relu", dummy_create), BAD); /* taken */
    assert_true(kp_module_type_count() >= 2);
    assert_null(kp_module_type_name(1u << 30));
    int64_t v;
    const char *str;
    kp_module_env env = {.dev = g_dev, .mode = KP_EXEC_GRAPH, .id = "m"};
    KPT_FAILS(kp_param_int(NULL, "size", true, 1, &v), BAD);
    KPT_FAILS(kp_param_int(&env, NULL, true, 1, &v), BAD);
    KPT_FAILS(kp_param_int(&env, "size", true, 1, NULL), BAD);
    KPT_FAILS(kp_param_int(&env, "size", false, 1, &v), BAD); /* required */
    double x;
    KPT_FAILS(kp_param_double(NULL, "k", true, 1, &x), BAD);
    KPT_FAILS(kp_param_double(&env, "k", true, 1, NULL), BAD);
    KPT_FAILS(kp_param_double(&env, "k", false, 1, &x), BAD); /* required */
    static const kp_param nums[] = {{"a", "0.5"},  {"b", "-2"},    {"c", "1e-3"}, {"d", ".25"},
                                    {"e", "nan"},  {"f", "inf"},   {"g", " 1"},   {"h", "+1"},
                                    {"i", "1.5x"}, {"j", "1e999"}, {"k", ""},     {"l", "-"}};
    kp_module_env nenv = {
        .dev = g_dev, .mode = KP_EXEC_GRAPH, .id = "m", .params = nums, .n_params = 12};
    static const double good[] = {0.5, -2, 1e-3, 0.25};
    for (int i = 0; i < 12; i++) {
        kp_status st = kp_param_double(&nenv, nums[i].key, false, 0, &x);
        if (i < 4) {
            KPT_OK(st);
            assert_true(x == good[i]);
        } else {
            assert_int_equal(st, BAD);
        }
    }
    KPT_FAILS(kp_param_str(NULL, "k", "d", &str), BAD);
    bool dyn;
    KPT_FAILS(kp_param_dim(NULL, "size", 1, 10, &v, &dyn), BAD);
    KPT_FAILS(kp_param_dim(&env, "size", 1, 10, NULL, &dyn), BAD);
    KPT_FAILS(kp_param_dim(&env, "size", 1, 10, &v, &dyn), BAD); /* required */
    static const kp_param dims[] = {{"a", "8"},      {"b", "max:8"}, {"c", "max:"}, {"d", "max:-1"},
                                    {"e", "max: 8"}, {"f", "8.0"},   {"g", "11"},   {"h", "min:8"},
                                    {"i", "max:8x"}, {"j", "0"}};
    kp_module_env denv = {
        .dev = g_dev, .mode = KP_EXEC_GRAPH, .id = "m", .params = dims, .n_params = 10};
    for (int i = 0; i < 10; i++) {
        kp_status st = kp_param_dim(&denv, dims[i].key, 1, 10, &v, &dyn);
        if (i < 2) {
            KPT_OK(st);
            assert_int_equal(v, 8);
            assert_int_equal(dyn, i == 1);
        } else {
            assert_int_equal(st, BAD);
            assert_non_null(strstr(kp_last_error(), "kp_param_dim"));
        }
    }
    KPT_FAILS(kp_param_str(&env, "k", "d", NULL), BAD);
    KPT_OK(kp_param_str(&env, "k", "d", &str));
    assert_string_equal(str, "d");
}

static const char relu_spec[] = "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": "
                                "[{\"type\": \"relu\", \"id\": \"r\", "
                                "\"params\": {\"size\": 4}}], \"inputs\": {\"x\": \"r.input\"}, "
                                "\"outputs\": {\"y\": \"r.output\"}}";

static kp_status gc_noop(void *user, kp_stream_t s, const kp_graph_args *a) { return KP_OK; }

static void graph_cache_calls(void **state) {
    (void)state;
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    kp_graph_cache_t c = NULL;
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    KPT_FAILS(kp_graph_cache_create(NULL, NULL, &c), BAD);
    KPT_FAILS(kp_graph_cache_create(g_dev, NULL, NULL), BAD);
    cfg.struct_size = 1;
    KPT_FAILS(kp_graph_cache_create(g_dev, &cfg, &c), BAD);
    cfg.struct_size = sizeof cfg;
    cfg.max_variants = SIZE_MAX;
    KPT_FAILS(kp_graph_cache_create(g_dev, &cfg, &c), BAD);
    assert_null(c);
    KPT_OK(kp_graph_cache_create(g_dev, NULL, &c));
    kp_graph_call call = KP_GRAPH_CALL_INIT;
    KPT_FAILS(kp_graph_cache_run(NULL, &call, s), BAD);
    KPT_FAILS(kp_graph_cache_run(c, NULL, s), BAD);
    KPT_FAILS(kp_graph_cache_run(c, &call, s), BAD); /* no work */
    call.enqueue = gc_noop;
    KPT_FAILS(kp_graph_cache_run(c, &call, NULL), BAD);
    call.n_literals = 3; /* without literals */
    KPT_FAILS(kp_graph_cache_run(c, &call, s), BAD);
    call.n_literals = 100000;
    KPT_FAILS(kp_graph_cache_run(c, &call, s), BAD);
    call.n_literals = 0;
    call.n_outputs = 1; /* without outputs */
    KPT_FAILS(kp_graph_cache_run(c, &call, s), BAD);
    call.n_outputs = 0;
    call.state_bytes = SIZE_MAX;
    KPT_FAILS(kp_graph_cache_run(c, &call, s), BAD);
    call.state_bytes = 0;
    KPT_OK(kp_graph_cache_run(c, &call, s)); /* an empty graph is a graph */
    KPT_FAILS(kp_graph_cache_prepare(NULL, &call, 1, s), BAD);
    KPT_FAILS(kp_graph_cache_prepare(c, NULL, 1, s), BAD);
    KPT_FAILS(kp_graph_cache_prepare(c, &call, 1, NULL), BAD);
    KPT_OK(kp_graph_cache_prepare(c, NULL, 0, s));
    kp_graph_stats st;
    KPT_FAILS(kp_graph_cache_stats(NULL, &st), BAD);
    KPT_FAILS(kp_graph_cache_stats(c, NULL), BAD);
    KPT_FAILS(kp_graph_cache_config_get(NULL, &cfg), BAD);
    KPT_FAILS(kp_graph_cache_config_get(c, NULL), BAD);
    KPT_OK(kp_graph_cache_config_get(c, &cfg));
    assert_int_equal(cfg.miss, KP_GRAPH_MISS_CAPTURE);
    kp_graph_miss m;
    KPT_FAILS(kp_graph_miss_parse(NULL, &m), KP_ERR_PARSE);
    KPT_FAILS(kp_graph_miss_parse("strict", NULL), BAD);
    assert_string_equal(kp_graph_miss_str(KP_GRAPH_MISS_STRICT), "strict");
    char buf[64];
    assert_string_equal(kp_graph_cache_report(c, NULL, 0), "");
    assert_true(kp_graph_cache_report(c, buf, sizeof buf) == buf);
    kp_graph_cache_destroy(c);
    kp_graph_cache_destroy(NULL);
    kp_stream_destroy(s);
}

static kp_status flow_noop(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    if (eos) *eos = true;
    return KP_OK;
}

/* Video files: every entry checks its arguments, built with FFmpeg or not. */
static void video_calls(void **state) {
    (void)state;
    kp_video_reader_t r = NULL;
    kp_video_writer_t w = NULL;
    kp_video_reader_info info;
    kp_video_frame vf = {.format = KP_PIXEL_I420,
                         .width = 64,
                         .height = 48,
                         .pitch = 64,
                         .time_base = {1, 30},
                         .rate = {30, 1}};
    kp_stream_t s = NULL;
    bool eos;
    char buf[16];
    (void)kp_video_built();
    KPT_FAILS(kp_video_reader_open(NULL, "x.mp4", NULL, &r), BAD);
    KPT_FAILS(kp_video_reader_open(g_dev, NULL, NULL, &r), BAD);
    KPT_FAILS(kp_video_reader_open(g_dev, "", NULL, &r), BAD);
    KPT_FAILS(kp_video_reader_open(g_dev, "x.mp4", NULL, NULL), BAD);
    kp_video_reader_config rc = KP_VIDEO_READER_CONFIG_INIT;
    rc.decoder = (kp_video_decoder)7;
    KPT_FAILS(kp_video_reader_open(g_dev, "x.mp4", &rc, &r), BAD);
    rc = (kp_video_reader_config)KP_VIDEO_READER_CONFIG_INIT;
    rc.pitch = -2;
    KPT_FAILS(kp_video_reader_open(g_dev, "x.mp4", &rc, &r), BAD);
    rc = (kp_video_reader_config)KP_VIDEO_READER_CONFIG_INIT;
    rc.parallel = KP_VIDEO_MAX_PARALLEL + 1;
    KPT_FAILS(kp_video_reader_open(g_dev, "x.mp4", &rc, &r), BAD);
    assert_non_null(strstr(kp_last_error(), "parallel 17"));
    assert_null(r);
    KPT_FAILS(kp_video_pool_limit(KP_VIDEO_POOL_MAX + 1), BAD);
    KPT_FAILS(kp_video_pool_stats_get(NULL), BAD);
    KPT_FAILS(kp_video_reader_get_info(NULL, &info), BAD);
    KPT_FAILS(kp_video_reader_next(NULL, s, buf, sizeof buf, &vf, &eos), BAD);
    int64_t nf = 0;
    KPT_FAILS(kp_video_reader_count(NULL, &nf), BAD);
    KPT_FAILS(kp_video_reader_seek(NULL, 0), BAD);
    KPT_FAILS(kp_video_reader_frame_at(NULL, 0.0, &nf), BAD);
    kp_video_reader_close(NULL);
    KPT_FAILS(kp_video_writer_open(NULL, "x.mp4", NULL, &w), BAD);
    KPT_FAILS(kp_video_writer_open(g_dev, NULL, NULL, &w), BAD);
    KPT_FAILS(kp_video_writer_open(g_dev, "x.mp4", NULL, NULL), BAD);
    kp_video_writer_config wc = KP_VIDEO_WRITER_CONFIG_INIT;
    wc.threads = -1;
    KPT_FAILS(kp_video_writer_open(g_dev, "x.mp4", &wc, &w), BAD);
    wc = (kp_video_writer_config)KP_VIDEO_WRITER_CONFIG_INIT;
    wc.preset = "warp";
    KPT_FAILS(kp_video_writer_open(g_dev, "x.mp4", &wc, &w), BAD);
    assert_null(w);
    KPT_FAILS(kp_video_writer_write(NULL, s, buf, sizeof buf, &vf), BAD);
    assert_string_equal(kp_video_writer_encoder(NULL), "");
    KPT_OK(kp_video_writer_close(NULL));
    /* copies are counted only while watched */
    kp_copy_counts c = {0, 0, 0, 0};
    void *dev = NULL;
    KPT_OK(kp_malloc(g_dev, 64, &dev));
    assert_null(kp_copy_count_watch(&c));
    KPT_OK(kp_memcpy_htod(g_dev, dev, buf, sizeof buf));
    KPT_OK(kp_memcpy_dtoh(g_dev, buf, dev, sizeof buf));
    KPT_OK(kp_memcpy_dtod(g_dev, (char *)dev + 32, dev, sizeof buf));
    assert_ptr_equal(kp_copy_count_watch(NULL), &c);
    KPT_OK(kp_memcpy_htod(g_dev, dev, buf, sizeof buf));
    assert_int_equal(c.htod, 1);
    assert_int_equal(c.dtoh, 1);
    assert_int_equal(c.htod_bytes, sizeof buf);
    kp_free(g_dev, dev);
}

static void flow_calls(void **state) {
    (void)state;
    kp_flow_t f = NULL;
    kp_flow_snapshot h;
    kp_flow_stage st[2] = {{.name = "a", .fn = flow_noop},
                           {.name = "b", .fn = flow_noop, .queue_capacity = 1}};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    KPT_FAILS(kp_flow_create(NULL, &f), BAD);
    KPT_FAILS(kp_flow_create(&cfg, &f), BAD);
    cfg.dev = g_dev;
    cfg.stages = st;
    cfg.n_stages = 2;
    cfg.frame_bytes = SIZE_MAX;
    KPT_FAILS(kp_flow_create(&cfg, &f), BAD);
    cfg.frame_bytes = 64;
    cfg.spin_us = -2;
    KPT_FAILS(kp_flow_create(&cfg, &f), BAD);
    cfg.spin_us = 1000001;
    KPT_FAILS(kp_flow_create(&cfg, &f), BAD);
    cfg.spin_us = 5; /* a spinning flow ends as any other */
    KPT_FAILS(kp_flow_start(NULL), BAD);
    KPT_FAILS(kp_flow_wait(NULL), BAD);
    KPT_FAILS(kp_flow_cancel(NULL), BAD);
    KPT_FAILS(kp_flow_health(NULL, &h), BAD);
    KPT_FAILS(kp_flow_create_from_json(NULL, "{}", &f), BAD);
    KPT_FAILS(kp_flow_create_from_json(g_dev, NULL, &f), BAD);
    KPT_FAILS(kp_flow_create_from_json(g_dev, "{}", NULL), BAD);
    KPT_FAILS(kp_flow_create_from_json_with(NULL, "{}", NULL, 0, &f), BAD);
    KPT_FAILS(kp_flow_create_from_json_with(g_dev, "{}", NULL, 1, &f), BAD);
    kp_flow_stage nameless = {0};
    KPT_FAILS(kp_flow_create_from_json_with(g_dev, "{}", &nameless, 1, &f), BAD);
    KPT_FAILS(kp_flow_create_from_json(g_dev, "[1]", &f), KP_ERR_PARSE);
    KPT_FAILS(kp_flow_create_from_file(g_dev, NULL, &f), BAD);
    KPT_FAILS(kp_flow_create_from_file(g_dev, "/nonexistent/f.json", &f), KP_ERR_IO);
    KPT_FAILS(kp_flow_create_from_file_traced(g_dev, "/nonexistent/f.json", 16, &f), KP_ERR_IO);
    KPT_FAILS(kp_flow_create_from_file_traced(g_dev, "x.json", SIZE_MAX, &f), BAD);
    KPT_FAILS(kp_flow_write_trace(NULL, "t.json"), BAD);
    assert_null(f);
    KPT_OK(kp_flow_create(&cfg, &f));
    KPT_FAILS(kp_flow_health(f, NULL), BAD);
    KPT_FAILS(kp_flow_wait(f), KP_ERR_STATE);
    KPT_OK(kp_flow_start(f));
    KPT_OK(kp_flow_wait(f));
    {
        size_t need = 0;
        char small[8] = "x";
        KPT_OK(kp_flow_health(f, &h));
        KPT_FAILS(kp_flow_health_json(NULL, small, sizeof small, &need), BAD);
        KPT_FAILS(kp_flow_health_json(&h, small, sizeof small, NULL), BAD);
        KPT_FAILS(kp_flow_health_json(&h, NULL, 8, &need), BAD);
        KPT_FAILS(kp_flow_health_json(&h, small, sizeof small, &need), BAD);
        assert_true(need > sizeof small);
        assert_string_equal(small, "x"); /* nothing written */
        char *text = malloc(need);
        KPT_OK(kp_flow_health_json(&h, text, need, &need));
        assert_non_null(strstr(text, "\"stages\":["));
        assert_int_equal(strlen(text) + 1, need);
        free(text);
    }
    KPT_OK(kp_flow_cancel(f));                                 /* after the end: no effect */
    KPT_FAILS(kp_flow_write_trace(f, "t.json"), KP_ERR_STATE); /* no trace kept */
    KPT_FAILS(kp_flow_write_trace(f, NULL), BAD);
    KPT_OK(kp_flow_wait(f));
    assert_string_equal(kp_queue_policy_str((kp_queue_policy)-1), "invalid");
    assert_string_equal(kp_handoff_str((kp_handoff)-1), "invalid");
    assert_string_equal(kp_route_str((kp_route)-1), "invalid");
    size_t n_streams = 7;
    kp_flow_stream_stats ss;
    KPT_FAILS(kp_flow_streams(NULL, &ss, 1, &n_streams), BAD);
    KPT_FAILS(kp_flow_streams(f, NULL, 1, &n_streams), BAD);
    KPT_FAILS(kp_flow_streams(f, &ss, 1, NULL), BAD);
    KPT_OK(kp_flow_streams(f, &ss, 1, &n_streams));
    assert_int_equal(n_streams, 1);
    KPT_FAILS(kp_flow_write_dot(NULL, "f.dot"), BAD);
    KPT_FAILS(kp_flow_write_dot(f, NULL), BAD);
    KPT_FAILS(kp_flow_write_dot(f, "/nonexistent/f.dot"), KP_ERR_IO);
    {
        kp_stream_t s = NULL;
        void *a = NULL, *b = NULL;
        KPT_OK(kp_stream_create(g_dev, &s));
        KPT_OK(kp_malloc(g_dev, 64 * 48 * 3, &a));
        KPT_OK(kp_malloc(g_dev, 64 * 48 * 3, &b));
        KPT_FAILS(kp_resize_nv12(NULL, a, 8, 8, 8, b, 4, 4, 4), BAD);
        KPT_FAILS(kp_resize_nv12(s, NULL, 8, 8, 8, b, 4, 4, 4), BAD);
        KPT_FAILS(kp_resize_nv12(s, a, 8, 8, 8, NULL, 4, 4, 4), BAD);
        KPT_FAILS(kp_resize_nv12(s, a, 7, 8, 8, b, 4, 4, 4), BAD); /* odd */
        KPT_FAILS(kp_resize_nv12(s, a, 8, 0, 8, b, 4, 4, 4), BAD);
        KPT_FAILS(kp_resize_nv12(s, a, 8, 8, 6, b, 4, 4, 4), BAD); /* pitch < width */
        KPT_FAILS(kp_resize_nv12(s, a, 8, 8, 8, b, 4, 4, 5), BAD); /* odd pitch */
        KPT_FAILS(kp_resize_nv12(s, a, 1 << 20, 8, 1 << 20, b, 4, 4, 4), BAD);
        assert_non_null(strstr(kp_last_error(), "kp_resize_nv12"));
        KPT_OK(kp_resize_nv12(s, a, 64, 48, 64, b, 32, 24, 32));
        KPT_OK(kp_stream_sync(s));
        kp_resizer_t r = (kp_resizer_t)1;
        KPT_FAILS(kp_resizer_create(NULL, 4, &r), BAD);
        assert_null(r);
        KPT_FAILS(kp_resizer_create(g_dev, 4, NULL), BAD);
        KPT_FAILS(kp_resizer_create(g_dev, 0, &r), BAD);
        KPT_FAILS(kp_resizer_create(g_dev, 1025, &r), BAD);
        KPT_OK(kp_resizer_create(g_dev, 2, &r));
        kp_nv12_picture pic[3] = {{a, 64, 48, 64}, {a, 8, 8, 8}, {a, 8, 8, 8}};
        KPT_FAILS(kp_resizer_nv12(NULL, s, pic, 1, b, 32, 24, 32), BAD);
        KPT_FAILS(kp_resizer_nv12(r, NULL, pic, 1, b, 32, 24, 32), BAD);
        KPT_FAILS(kp_resizer_nv12(r, s, NULL, 1, b, 32, 24, 32), BAD);
        KPT_FAILS(kp_resizer_nv12(r, s, pic, 1, NULL, 32, 24, 32), BAD);
        KPT_FAILS(kp_resizer_nv12(r, s, pic, 0, b, 32, 24, 32), BAD);
        KPT_FAILS(kp_resizer_nv12(r, s, pic, 3, b, 32, 24, 32), BAD); /* past its max */
        KPT_FAILS(kp_resizer_nv12(r, s, pic, 2, b, 33, 24, 34), BAD); /* odd width */
        pic[1].pitch = 4;
        KPT_FAILS(kp_resizer_nv12(r, s, pic, 2, b, 32, 24, 32), BAD);
        assert_non_null(strstr(kp_last_error(), "picture 1"));
        KPT_OK(kp_resizer_nv12(r, s, pic, 1, b, 32, 24, 32));
        KPT_OK(kp_stream_sync(s));
        kp_resizer_destroy(r);
        kp_resizer_destroy(NULL);
        kp_free(g_dev, a);
        kp_free(g_dev, b);
        kp_stream_destroy(s);
    }
    assert_false(kp_flow_cancelled(NULL));
    kp_flow_remote_stats rs;
    KPT_FAILS(kp_flow_remote(NULL, 0, &rs), BAD);
    KPT_FAILS(kp_flow_remote(f, 0, NULL), BAD);
    KPT_FAILS(kp_flow_remote(f, 0, &rs), BAD); /* not a remote queue's end */
    KPT_FAILS(kp_flow_remote(f, 99, &rs), BAD);
    kp_flow_stage rst;
    KPT_FAILS(kp_flow_remote_source(NULL, "127.0.0.1:0", 64, 4, 0, &rst), BAD);
    KPT_FAILS(kp_flow_remote_source(g_dev, NULL, 64, 4, 0, &rst), BAD);
    KPT_FAILS(kp_flow_remote_source(g_dev, "127.0.0.1:0", 64, 0, 0, &rst), BAD);
    KPT_FAILS(kp_flow_remote_source(g_dev, "127.0.0.1:0", 64, 4, -1, &rst), BAD);
    KPT_FAILS(kp_flow_remote_source(g_dev, "127.0.0.1:0", 64, 4, 0, NULL), BAD);
    KPT_FAILS(kp_flow_remote_sink(NULL, "127.0.0.1:9", 64, 0, &rst), BAD);
    KPT_FAILS(kp_flow_remote_sink(g_dev, NULL, 64, 0, &rst), BAD);
    KPT_FAILS(kp_flow_remote_sink(g_dev, "127.0.0.1:9", 64, -5, &rst), BAD);
    KPT_FAILS(kp_flow_remote_sink(g_dev, "127.0.0.1:9", 64, 0, NULL), BAD);
    KPT_FAILS(kp_flow_remote_sink(g_dev, "nonsense", 64, 0, &rst), KP_ERR_PARSE);
    /* the built-in sources and sinks (tests/test_flow.c has each one's checks) */
    const int64_t shape[1] = {4};
    const char *paths[1] = {"x.mp4"};
    kp_flow_source_info si;
    KPT_FAILS(kp_flow_synthetic_source(NULL, 1, 1, shape, &rst, &si), BAD);
    KPT_FAILS(kp_flow_synthetic_source(g_dev, 1, 1, shape, NULL, &si), BAD);
    KPT_FAILS(kp_flow_testsrc_source(NULL, 1, 64, 36, KP_PIXEL_NONE, 0, &rst, &si), BAD);
    KPT_FAILS(kp_flow_testsrc_source(g_dev, 1, 64, 36, KP_PIXEL_NONE, 0, NULL, &si), BAD);
    KPT_FAILS(kp_flow_y4m_source(g_dev, NULL, 0, false, &rst, &si), BAD);
    KPT_FAILS(kp_flow_y4m_source(g_dev, "x.y4m", 0, false, NULL, &si), BAD);
    KPT_FAILS(kp_flow_video_source(g_dev, NULL, 1, NULL, &rst, &si), BAD);
    KPT_FAILS(kp_flow_video_source(g_dev, paths, 1, NULL, NULL, &si), BAD);
    KPT_FAILS(kp_flow_null_sink(NULL), BAD);
    KPT_FAILS(kp_flow_npy_sink(g_dev, NULL, 64, &rst), BAD);
    KPT_FAILS(kp_flow_npy_sink(g_dev, "o.npy", 64, NULL), BAD);
    KPT_FAILS(kp_flow_y4m_sink(g_dev, NULL, 64, NULL, KP_PIXEL_NONE, &rst), BAD);
    KPT_FAILS(kp_flow_y4m_sink(g_dev, "o.y4m", 64, NULL, KP_PIXEL_NONE, NULL), BAD);
    KPT_FAILS(kp_flow_video_sink(g_dev, NULL, NULL, KP_PIXEL_NONE, &rst), BAD);
    KPT_FAILS(kp_flow_video_sink(g_dev, "o.mp4", NULL, KP_PIXEL_NONE, NULL), BAD);
    KPT_OK(kp_flow_synthetic_source(g_dev, 1, 1, shape, &rst, NULL)); /* info is optional */
    rst.free_fn(rst.user);
    /* well-formed ends: made where UCX is built, KP_ERR_UNSUPPORTED where not,
     * after the same checks */
#ifdef KP_HAVE_UCX
    KPT_OK(kp_flow_remote_sink(g_dev, "127.0.0.1:9", 64, 0, &rst));
    rst.free_fn(rst.user);
#else
    KPT_FAILS(kp_flow_remote_sink(g_dev, "127.0.0.1:9", 64, 0, &rst), KP_ERR_UNSUPPORTED);
    assert_non_null(strstr(kp_last_error(), "without UCX"));
    assert_null(rst.fn);
#endif
    kp_flow_destroy(f);
    kp_flow_destroy(NULL);
}

static kp_status task_noop(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    return KP_OK;
}

static void tasks_calls(void **state) {
    kp_tasks_t t = NULL;
    uint32_t id = 0;
    void *data = NULL;
    size_t n = 0;
    kp_tasks_stats st;
    kp_task_edge e;
    kp_task_kernel k = {"noop", task_noop, NULL, NULL};
    KPT_FAILS(kp_tasks_create(NULL, 1, &t), BAD);
    KPT_FAILS(kp_tasks_create(g_dev, 1, NULL), BAD);
    KPT_FAILS(kp_tasks_buffer(NULL, 8, &id), BAD);
    KPT_FAILS(kp_tasks_buffer_wrap(NULL, &id, 8, &id), BAD);
    KPT_FAILS(kp_tasks_buffer_data(NULL, 1, &data), BAD);
    KPT_FAILS(kp_tasks_submit(NULL, &k, NULL, 0, NULL), BAD);
    KPT_FAILS(kp_tasks_run(NULL, NULL), BAD);
    KPT_FAILS(kp_tasks_edges(NULL, &e, 1, &n), BAD);
    KPT_FAILS(kp_tasks_stats_get(NULL, &st), BAD);
    KPT_FAILS(kp_tasks_write_dot(NULL, "x.dot"), BAD);
    KPT_FAILS(kp_tasks_instantiate(NULL), BAD);
    KPT_FAILS(kp_tasks_launch(NULL, NULL), BAD);
    KPT_OK(kp_tasks_create(g_dev, 1, &t));
    KPT_FAILS(kp_tasks_launch(t, NULL), BAD);
    kp_stream_t s;
    KPT_OK(kp_stream_create(g_dev, &s));
    KPT_FAILS(kp_tasks_launch(t, s), KP_ERR_STATE); /* nothing instantiated */
    kp_task_kernel none = {"none", NULL, NULL, NULL};
    KPT_FAILS(kp_tasks_submit(t, &none, NULL, 0, NULL), BAD);
    KPT_FAILS(kp_tasks_buffer(t, 8, NULL), BAD);
    KPT_FAILS(kp_tasks_buffer(t, SIZE_MAX, &id), BAD);
    KPT_FAILS(kp_tasks_buffer_wrap(t, NULL, 8, &id), BAD);
    KPT_FAILS(kp_tasks_buffer_data(t, 1, &data), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_tasks_buffer_data(t, 0, NULL), BAD);
    KPT_FAILS(kp_tasks_run(t, NULL), BAD);
    KPT_FAILS(kp_tasks_edges(t, NULL, 1, &n), BAD);
    KPT_FAILS(kp_tasks_edges(t, &e, 1, NULL), BAD);
    KPT_FAILS(kp_tasks_stats_get(t, NULL), BAD);
    KPT_FAILS(kp_tasks_write_dot(t, NULL), BAD);
    KPT_FAILS(kp_tasks_write_dot(t, "/nonexistent/dir/x.dot"), KP_ERR_IO);
    KPT_OK(kp_tasks_submit(t, &k, NULL, 0, NULL)); /* a task with no arguments */
    KPT_OK(kp_tasks_edges(t, NULL, 0, &n));
    assert_int_equal(n, 0);
    KPT_OK(kp_tasks_instantiate(t));
    KPT_OK(kp_tasks_launch(t, s));
    KPT_OK(kp_tasks_instantiate(t)); /* an empty set: updates the graph of the last one */
    KPT_OK(kp_tasks_launch(t, s));
    KPT_OK(kp_stream_sync(s));
    kp_tasks_destroy(t);
    KPT_FAILS(kp_tasks_instantiate(t), BAD);
    KPT_FAILS(kp_tasks_launch(t, s), BAD);
    kp_stream_destroy(s);
    kp_tasks_destroy(NULL);
}

static void pipeline_calls(void **state) {
    kp_pipeline_t p = NULL;
    kp_stream_t s;
    kp_pipeline_report r;
    kp_module_report mr;
    kp_connection_report cr;
    kp_port_info pi;
    char buf[8];
    KPT_OK(kp_stream_create(g_dev, &s));
    kp_pipeline_spec spec = KP_PIPELINE_SPEC_INIT;
    kp_module_spec ms = {.type = "relu", .id = "r"};
    KPT_FAILS(kp_pipeline_create(NULL, &spec, &p), BAD);
    KPT_FAILS(kp_pipeline_create(g_dev, NULL, &p), BAD);
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, NULL), BAD);
    spec.modules = &ms;
    spec.n_modules = (size_t)1 << 40;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), BAD);
    spec.n_modules = 1;
    spec.mode = (kp_exec_mode)99;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), BAD);
    spec.mode = KP_EXEC_GRAPH;
    spec.n_inputs = 3;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), BAD);
    spec.n_inputs = 0;
    ms.n_params = (size_t)1 << 62;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), BAD);
    ms.n_params = 0;
    ms.type = NULL;
    KPT_FAILS(kp_pipeline_create(g_dev, &spec, &p), BAD);
    assert_null(p);

    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    KPT_FAILS(kp_pipeline_create_from_json(NULL, relu_spec, &p), BAD);
    KPT_FAILS(kp_pipeline_create_from_json(g_dev, NULL, &p), BAD);
    KPT_FAILS(kp_pipeline_create_from_json(g_dev, relu_spec, NULL), BAD);
    KPT_FAILS(kp_pipeline_create_from_json(g_dev, "", &p), KP_ERR_PARSE);
    o.struct_size = 2;
    KPT_FAILS(kp_pipeline_create_from_json_opts(g_dev, relu_spec, &o, &p), BAD);
    o = (kp_pipeline_options)KP_PIPELINE_OPTIONS_INIT;
    o.mode = 42;
    KPT_FAILS(kp_pipeline_create_from_json_opts(g_dev, relu_spec, &o, &p), BAD);
    KPT_FAILS(kp_pipeline_create_from_file(g_dev, NULL, &p), BAD);
    KPT_FAILS(kp_pipeline_create_from_file(g_dev, "/nonexistent.json", &p), KP_ERR_IO);
    KPT_FAILS(kp_pipeline_create_from_file_opts(g_dev, "/", NULL, &p), KP_ERR_IO);

    KPT_FAILS(kp_pipeline_setup(NULL), BAD);
    KPT_FAILS(kp_pipeline_warmup(NULL, s), BAD);
    KPT_FAILS(kp_pipeline_build_graph(NULL), BAD);
    KPT_FAILS(kp_pipeline_execute_stream(NULL, s), BAD);
    KPT_FAILS(kp_pipeline_execute_graph(NULL, s), BAD);
    KPT_FAILS(kp_pipeline_configure_io(NULL, NULL, 0, NULL, 0, s), BAD);
    kp_pipeline_destroy(NULL);
    assert_int_equal(kp_pipeline_mode(NULL), KP_EXEC_GRAPH);
    assert_string_equal(kp_pipeline_name(NULL), "(null)");
    assert_string_equal(kp_exec_mode_str((kp_exec_mode)7), "invalid");
    assert_string_equal(kp_library_versions(NULL, 0), "");
    assert_true(kp_library_versions(buf, sizeof buf) == buf);
    KPT_FAILS(kp_pipeline_report_get(NULL, &r), BAD);
    KPT_FAILS(kp_pipeline_module_report(NULL, 0, &mr), BAD);
    KPT_FAILS(kp_pipeline_connection_report(NULL, 0, &cr), BAD);
    KPT_FAILS(kp_pipeline_input_info(NULL, 0, &pi), BAD);
    KPT_FAILS(kp_pipeline_output_info(NULL, 0, &pi), BAD);
    uint32_t dmask;
    KPT_FAILS(kp_pipeline_input_dynamic(NULL, 0, &dmask), BAD);
    KPT_FAILS(kp_pipeline_output_dynamic(NULL, 0, &dmask), BAD);
    assert_null(kp_pipeline_graph_cache(NULL));
    assert_string_equal(kp_input_binding_str((kp_input_binding)5), "invalid");
    assert_string_equal(kp_input_binding_str(KP_INPUTS_REBIND), "rebind");

    KPT_OK(kp_pipeline_create_from_json(g_dev, relu_spec, &p));
    KPT_FAILS(kp_pipeline_report_get(p, NULL), BAD);
    KPT_FAILS(kp_pipeline_module_report(p, 1, &mr), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_pipeline_module_report(p, SIZE_MAX, &mr), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_pipeline_module_report(p, 0, NULL), BAD);
    {
        /* a module's own account: relu has none, so "" and 0 */
        char text[16] = "x";
        size_t need = 99;
        KPT_FAILS(kp_pipeline_module_describe(NULL, 0, text, sizeof text, &need), BAD);
        KPT_FAILS(kp_pipeline_module_describe(p, 0, NULL, 4, &need), BAD);
        KPT_FAILS(kp_pipeline_module_describe(p, 1, text, sizeof text, &need), KP_ERR_NOT_FOUND);
        KPT_OK(kp_pipeline_module_describe(p, 0, text, sizeof text, &need));
        assert_string_equal(text, "");
        assert_int_equal(need, 0);
        KPT_OK(kp_pipeline_module_describe(p, 0, NULL, 0, NULL));
        /* the engine's listings: a name for every index below the count, NULL past it */
        size_t n_ops = 0;
        while (kp_onnx_op_name(n_ops)) n_ops++;
        assert_true(n_ops > 50);
        assert_null(kp_onnx_op_name(SIZE_MAX));
        assert_non_null(kp_onnx_conv_library());
    }
    KPT_FAILS(kp_pipeline_connection_report(p, 1, &cr), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_pipeline_connection_report(p, 0, NULL), BAD);
    {
        /* fusion reports: a lone relu forms no group and fuses nothing */
        kp_fusion_report fr;
        kp_fusion_edge fe;
        KPT_FAILS(kp_pipeline_fusion_report(NULL, 0, &fr), BAD);
        KPT_FAILS(kp_pipeline_fusion_report(p, 0, NULL), BAD);
        KPT_FAILS(kp_pipeline_fusion_report(p, 0, &fr), KP_ERR_NOT_FOUND);
        KPT_FAILS(kp_pipeline_fusion_edge(NULL, 0, &fe), BAD);
        KPT_FAILS(kp_pipeline_fusion_edge(p, SIZE_MAX, &fe), KP_ERR_NOT_FOUND);
        KPT_FAILS(kp_pipeline_fusion_edge(p, 0, NULL), BAD);
        /* run-time compiles: bad arguments, and none on a device that runs host kernels */
        kp_device_kernel dk;
        kp_rtc_info ri;
        KPT_FAILS(kp_rtc_compile(NULL, "x", "k", &dk, &ri), BAD);
        KPT_FAILS(kp_rtc_compile(g_dev, NULL, "k", &dk, &ri), BAD);
        KPT_FAILS(kp_rtc_compile(g_dev, "x", NULL, &dk, &ri), BAD);
        KPT_FAILS(kp_rtc_compile(g_dev, "x", "k", NULL, &ri), BAD);
        KPT_FAILS(kp_rtc_check("sm_90", "", &ri), BAD);
        KPT_FAILS(kp_rtc_check("sm_90", NULL, NULL), BAD);
        if (strcmp(kp_device_kernel_form(g_dev), "host") == 0)
            KPT_FAILS(kp_rtc_compile(g_dev, "x", "k", &dk, &ri), KP_ERR_UNSUPPORTED);
        kp_status cs = kp_rtc_check("compute_90", "x", &ri);
        assert_true(cs == BAD || cs == KP_ERR_UNSUPPORTED);
    }
    KPT_FAILS(kp_pipeline_input_info(p, 1, &pi), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_pipeline_output_info(p, SIZE_MAX, &pi), KP_ERR_NOT_FOUND);
    KPT_FAILS(kp_pipeline_output_info(p, 0, NULL), BAD);
    KPT_FAILS(kp_pipeline_input_dynamic(p, 0, NULL), BAD);
    KPT_FAILS(kp_pipeline_output_dynamic(p, 3, &dmask), KP_ERR_NOT_FOUND);
    KPT_OK(kp_pipeline_input_dynamic(p, 0, &dmask));
    assert_int_equal(dmask, 0);
    assert_null(kp_pipeline_graph_cache(p)); /* not set up */
    KPT_OK(kp_pipeline_setup(p));
    float *x;
    int64_t n = 4;
    KPT_OK(kp_malloc(g_dev, 16, (void **)&x));
    kp_port_info in[2] = {{"x", x, {0}}, {"z", x, {0}}},
                 out[2] = {{"y", NULL, {0}}, {NULL, NULL, {0}}};
    KPT_OK(kp_desc_init(&in[0].desc, KP_F32, 1, &n, NULL));
    in[1].desc = in[0].desc;
    KPT_FAILS(kp_pipeline_configure_io(p, NULL, 1, out, 1, s), BAD);
    KPT_FAILS(kp_pipeline_configure_io(p, in, 1, NULL, 1, s), BAD);
    KPT_FAILS(kp_pipeline_configure_io(p, in, 2, out, 1, s),
              KP_ERR_NOT_FOUND); /* one input too many */
    KPT_FAILS(kp_pipeline_configure_io(p, in, 1, out, 2, s), KP_ERR_NOT_FOUND); /* unnamed output */
    KPT_FAILS(kp_pipeline_configure_io(p, in, 1, out, 1, NULL), BAD);
    KPT_FAILS(kp_pipeline_warmup(p, NULL), KP_ERR_STATE); /* not configured yet */
    KPT_OK(kp_pipeline_configure_io(p, in, 1, out, 1, s));
    KPT_FAILS(kp_pipeline_warmup(p, NULL), BAD);
    KPT_OK(kp_pipeline_warmup(p, s));
    KPT_FAILS(kp_pipeline_execute_stream(p, NULL), BAD);
    KPT_OK(kp_pipeline_execute_stream(p, s));
    KPT_OK(kp_stream_sync(s));
    kp_pipeline_destroy(p);
    kp_free(g_dev, x);
    kp_stream_destroy(s);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: misuse tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(core_calls),
        cmocka_unit_test(tensor_calls),
        cmocka_unit_test(npy_calls),
        cmocka_unit_test(device_calls),
        cmocka_unit_test(device_caps),
        cmocka_unit_test(stream_and_event_calls),
        cmocka_unit_test(graph_calls),
        cmocka_unit_test(allocator_calls),
        cmocka_unit_test(memory_and_tensor_calls),
        cmocka_unit_test(pool_calls),
        cmocka_unit_test(module_calls),
        cmocka_unit_test(pipeline_calls),
        cmocka_unit_test(graph_cache_calls),
        cmocka_unit_test(video_calls),
        cmocka_unit_test(flow_calls),
        cmocka_unit_test(tasks_calls),
    };
    int failed = cmocka_run_group_tests_name(name, tests, NULL, NULL);
    kp_device_close(g_dev);
    if (g_misses) printf("%d calls failed otherwise than expected (listed above)\n", g_misses);
    return failed || g_misses ? 1 : 0;
}
