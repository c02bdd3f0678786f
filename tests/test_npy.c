/* .npy files: round trips for every dtype and shape kind, and malformed
 * files -- each refused with KP_ERR_PARSE and a detail, never read wrong,
 * never allocating what a header claims before the file size is known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"

static char g_dir[] = "/tmp/kpipe_npy_XXXXXX";

/* Bytes of a file with `header` (padded as NumPy pads it) and `data_bytes`
 * bytes of data; version 1 unless `v2`. */
static size_t make_npy(unsigned char *buf, size_t cap, const char *header, size_t data_bytes,
                       bool v2) {
    size_t pre = v2 ? 12 : 10, hl = strlen(header);
    size_t padded = (pre + hl + 1 + 63) / 64 * 64 - pre;
    assert_true(pre + padded + data_bytes <= cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = v2 ? 2 : 1;
    buf[7] = 0;
    buf[8] = (unsigned char)(padded & 0xff);
    buf[9] = (unsigned char)(padded >> 8);
    if (v2) buf[10] = buf[11] = 0;
    memcpy(buf + pre, header, hl);
    memset(buf + pre + hl, ' ', padded - hl - 1);
    buf[pre + padded - 1] = '\n';
    for (size_t i = 0; i < data_bytes; i++) buf[pre + padded + i] = (unsigned char)i;
    return pre + padded + data_bytes;
}

static const char *write_file(const char *name, const void *buf, size_t len) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
    return path;
}

/* Refused from memory and from a file, with a detail holding `needle`. */
static void refused(const void *buf, size_t len, const char *needle) {
    kp_tensor_desc d;
    size_t off;
    void *data = (void *)0x1;
    size_t bytes = 99;
    kp_clear_error();
    kp_status st = kp_npy_parse(buf, len, &d, &off);
    if (st != KP_ERR_PARSE || !strstr(kp_last_error(), needle)) {
        print_error("parse gave %s \"%s\", expected KP_ERR_PARSE with \"%s\"\n", kp_status_name(st),
                    kp_last_error(), needle);
        fail();
    }
    const char *path = write_file("bad.npy", buf, len);
    st = kp_npy_load(path, &d, &data, &bytes);
    if (st != KP_ERR_PARSE || !strstr(kp_last_error(), needle) || !strstr(kp_last_error(), path)) {
        print_error("load gave %s \"%s\", expected KP_ERR_PARSE with \"%s\" and the path\n",
                    kp_status_name(st), kp_last_error(), needle);
        fail();
    }
    assert_null(data);
    assert_int_equal(bytes, 0);
}

static void refused_header(const char *header, size_t data_bytes, const char *needle) {
    unsigned char buf[4096];
    refused(buf, make_npy(buf, sizeof buf, header, data_bytes, false), needle);
}

static void round_trips(void **state) {
    static const kp_dtype dts[] = {KP_F32, KP_F16, KP_I32, KP_I16, KP_I8, KP_U8, KP_I64, KP_U64};
    static const int64_t shapes[][3] = {{0, 0, 0}, {1, 0, 0}, {7, 0, 0}, {3, 5, 0}, {2, 0, 4}};
    static const int ndims[] = {0, 1, 1, 2, 3};
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++)
        for (size_t k = 0; k < 5; k++) {
            kp_tensor_desc d, back;
            KPT_OK(kp_desc_init(&d, dts[t], ndims[k], shapes[k], NULL));
            size_t bytes = (size_t)kp_desc_numel(&d) * kp_dtype_size(dts[t]), got;
            unsigned char src[512];
            for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)(i * 7 + t);
            const char *path = write_file("rt.npy", "", 0);
            KPT_OK(kp_npy_save(path, &d, src));
            void *data;
            KPT_OK(kp_npy_load(path, &back, &data, &got));
            assert_int_equal(got, bytes);
            assert_true(kp_desc_same_shape(&d, &back));
            assert_true(kp_desc_is_contiguous(&back));
            assert_memory_equal(data, src, bytes);
            kp_npy_free(data);
        }
    /* a NumPy-style header with spaces, double quotes and keys in another order */
    unsigned char buf[256];
    size_t len = make_npy(
        buf, sizeof buf, "{\"shape\" : ( 2 , 3 ) , 'fortran_order':False,'descr':'<i2'}", 12, true);
    kp_tensor_desc d;
    size_t off;
    KPT_OK(kp_npy_parse(buf, len, &d, &off));
    assert_int_equal(d.dtype, KP_I16);
    assert_int_equal(d.ndim, 2);
    assert_int_equal(d.shape[1], 3);
    assert_int_equal(off, 128);
    /* Fortran order is the same layout with at most one dimension above 1 */
    len = make_npy(buf, sizeof buf, "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 4), }",
                   16, false);
    KPT_OK(kp_npy_parse(buf, len, &d, &off));
}

static void malformed_headers(void **state) {
    /* descr found by the dict, not by a substring search */
    refused_header("{'fortran_order': False, 'shape': (4,), 'x': '<f4', 'descr': '>f4'}", 16,
                   "unknown key 'x'");
    refused_header("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", 16, "big-endian");
    refused_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", 32, "'<f8'");
    refused_header("{'descr': '|f4', 'fortran_order': False, 'shape': (4,), }", 16, "'|f4'");
    refused_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, "Fortran");
    refused_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 16,
                   "appears twice");
    refused_header("{'descr': '<f4', 'shape': (4,)}", 16, "missing key 'fortran_order'");
    refused_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (4,)}", 16, "True or False");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4)}", 16, "(n,)");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", 16, "non-negative");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4 4,)}", 16, "',' or ')'");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': ((4,),)}", 16, "integer");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4,
                   "more than 8 dimensions");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 4,
                   "64 bits");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)} x", 16, "after the");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)", 16, "',' or '}'");
    refused_header("['descr', '<f4']", 16, "'{'");
    refused_header("{'descr': '<f\\4', 'fortran_order': False, 'shape': (4,)}", 16, "escape");
    refused_header("{'descr: '<f4', 'fortran_order': False, 'shape': (4,)}", 16, "");
}

static void sizes_checked_against_the_file(void **state) {
    /* the shape's element count and byte size overflow */
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 0,
                   "overflows");
    refused_header("{'descr': '<i8', 'fortran_order': False, 'shape': (2305843009213693952,)}", 0,
                   "overflows");
    /* 4 TiB promised by a small file: refused before anything is allocated */
    refused_header("{'descr': '|u1', 'fortran_order': False, 'shape': (4398046511104,)}", 64,
                   "4398046511104 data bytes");
    /* too little data, and too much */
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 15, "15 data bytes");
    refused_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 17, "17 data bytes");
    /* prelude: magic, version, header length beyond the file */
    unsigned char buf[256];
    size_t len = make_npy(buf, sizeof buf,
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 16, false);
    buf[6] = 4;
    refused(buf, len, "version 4.0");
    buf[6] = 1;
    buf[8] = 0xff;
    buf[9] = 0xff;
    refused(buf, len, "header claims 65535 bytes");
    refused(buf, 9, "magic");
    refused("\x93NUMPY\x02\x00\x10", 9, "magic");
    refused("\x93NUMPY\x02\x00\x10\x00\x00", 11, "cut short");
    buf[1] = 'X';
    refused(buf, len, "magic");
    /* a NUL byte inside the header */
    len = make_npy(buf, sizeof buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", 16,
                   false);
    buf[20] = '\0';
    refused(buf, len, "NUL");
}

static void misuse(void **state) {
    kp_tensor_desc d;
    size_t off, bytes;
    void *data;
    KPT_FAILS(kp_npy_parse(NULL, 0, &d, &off), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_npy_load(NULL, &d, &data, &bytes), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_npy_load("/nonexistent/x.npy", &d, &data, &bytes), KP_ERR_IO);
    KPT_FAILS(kp_npy_load(g_dir, &d, &data, &bytes), KP_ERR_IO); /* a directory */
    int64_t n = 4, st[1] = {2};
    KPT_OK(kp_desc_init(&d, KP_F32, 1, &n, st));
    float x[8] = {0};
    KPT_FAILS(kp_npy_save("/tmp/never.npy", &d, x), KP_ERR_INVALID_ARG); /* strided */
    KPT_OK(kp_desc_init(&d, KP_BF16, 1, &n, NULL));
    KPT_FAILS(kp_npy_save("/tmp/never.npy", &d, x), KP_ERR_UNSUPPORTED);
    KPT_OK(kp_desc_init(&d, KP_F32, 1, &n, NULL));
    KPT_FAILS(kp_npy_save("/nonexistent/dir/x.npy", &d, x), KP_ERR_IO);
    d.ndim = 99;
    KPT_FAILS(kp_npy_save("/tmp/never.npy", &d, x), KP_ERR_INVALID_ARG);
    kp_npy_free(NULL);
}

int main(void) {
    if (!mkdtemp(g_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trips),
        cmocka_unit_test(malformed_headers),
        cmocka_unit_test(sizes_checked_against_the_file),
        cmocka_unit_test(misuse),
    };
    int failed = cmocka_run_group_tests_name("npy", tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) return 1;
    return failed ? 1 : 0;
}
