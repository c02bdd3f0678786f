/* The tiled Cholesky example's factorization on the device named on the
 * command line, in the stream form and the graph form (replayed, and
 * updated for a second matrix): the residual ||A - L L^T|| / ||A|| at
 * several sizes and tile sizes, ragged last tiles included, every diagonal
 * tile's info, and a matrix that is not positive definite named by its
 * column.
 *   test_cholesky DEVICE [BIG]   (cpu or cuda; BIG adds n = 2048 and 4100) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "tiles.h"

static kp_device_t g_dev;
static bool g_big;

typedef struct fact {
    chol_lib *lib;
    kp_tasks_t t;
    kp_stream_t s;
    float *mat;
    int *info;
    void *work;
    uint32_t bm, bw, bi;
    int64_t n, nt;
    size_t bytes;
} fact;

static void fact_open(fact *f, int64_t n, int64_t nb, size_t streams) {
    f->n = n;
    f->nt = chol_tiles(n, nb);
    f->bytes = (size_t)(n * n) * sizeof(float);
    KPT_OK(chol_lib_create(g_dev, n, nb, &f->lib));
    KPT_OK(kp_tasks_create(g_dev, streams, &f->t));
    KPT_OK(kp_stream_create(g_dev, &f->s));
    KPT_OK(kp_malloc(g_dev, f->bytes, (void **)&f->mat));
    KPT_OK(kp_malloc(g_dev, (size_t)f->nt * sizeof(int), (void **)&f->info));
    KPT_OK(kp_malloc(g_dev, chol_lib_work_bytes(f->lib), &f->work));
    KPT_OK(kp_tasks_buffer_wrap(f->t, f->mat, f->bytes, &f->bm));
    KPT_OK(kp_tasks_buffer_wrap(f->t, f->work, chol_lib_work_bytes(f->lib), &f->bw));
    KPT_OK(kp_tasks_buffer_wrap(f->t, f->info, (size_t)f->nt * sizeof(int), &f->bi));
}

static void fact_close(fact *f) {
    kp_tasks_destroy(f->t);
    chol_lib_destroy(f->lib);
    kp_stream_destroy(f->s);
    kp_free(g_dev, f->mat);
    kp_free(g_dev, f->info);
    kp_free(g_dev, f->work);
}

/* The factor of `a` in f->mat: info of every tile 0 and a small residual. */
static void check_factor(const fact *f, const float *a, const char *what, int64_t nb) {
    int *info = malloc((size_t)f->nt * sizeof *info);
    float *l = malloc(f->bytes);
    double *scratch = malloc(3 * (size_t)f->n * sizeof *scratch);
    KPT_OK(kp_memcpy_dtoh(g_dev, info, f->info, (size_t)f->nt * sizeof *info));
    KPT_OK(kp_memcpy_dtoh(g_dev, l, f->mat, f->bytes));
    for (int64_t k = 0; k < f->nt; k++)
        if (info[k])
            fail_msg("%s n %lld nb %lld: tile %lld info %d", what, (long long)f->n, (long long)nb,
                     (long long)k, info[k]);
    double res = chol_residual(f->n, a, l, f->n > 1100 ? 16 : 0, scratch);
    if (!(res < 2e-6))
        fail_msg("%s n %lld nb %lld: residual %g", what, (long long)f->n, (long long)nb, res);
    /* the strict upper triangle is left as it was */
    for (int64_t c = 0; c < f->n; c++)
        for (int64_t r = 0; r < c; r++)
            if (l[r + c * f->n] != a[r + c * f->n])
                fail_msg("%s n %lld: upper element (%lld, %lld) changed", what, (long long)f->n,
                         (long long)r, (long long)c);
    free(info);
    free(l);
    free(scratch);
}

static void factor_sizes(int64_t n, int64_t nb) {
    fact f = {0};
    fact_open(&f, n, nb, 4);
    float *a = malloc(f.bytes), *b = malloc(f.bytes);
    chol_make_spd(n, 1000 + (uint64_t)n, a);
    chol_make_spd(n, 2000 + (uint64_t)n, b);
    size_t n_tasks = 0;
    /* the stream form */
    KPT_OK(kp_memcpy_htod(g_dev, f.mat, a, f.bytes));
    KPT_OK(chol_submit(f.t, f.lib, f.bm, f.bw, f.bi, &n_tasks));
    int64_t nt = f.nt;
    assert_int_equal(n_tasks, nt + nt * (nt - 1) + nt * (nt - 1) * (nt - 2) / 6);
    KPT_OK(kp_tasks_run(f.t, f.s));
    KPT_OK(kp_stream_sync(f.s));
    check_factor(&f, a, "stream form", nb);
    /* the graph form, twice on a, then updated in place for b */
    KPT_OK(chol_submit(f.t, f.lib, f.bm, f.bw, f.bi, NULL));
    KPT_OK(kp_tasks_instantiate(f.t));
    for (int rep = 0; rep < 2; rep++) {
        KPT_OK(kp_memcpy_htod(g_dev, f.mat, a, f.bytes));
        KPT_OK(kp_tasks_launch(f.t, f.s));
        KPT_OK(kp_stream_sync(f.s));
        check_factor(&f, a, "graph form", nb);
    }
    KPT_OK(chol_submit(f.t, f.lib, f.bm, f.bw, f.bi, NULL));
    KPT_OK(kp_tasks_instantiate(f.t));
    kp_tasks_stats st;
    KPT_OK(kp_tasks_stats_get(f.t, &st));
    assert_int_equal(st.graph_builds, 1);
    assert_int_equal(st.graph_updates, 1);
    KPT_OK(kp_memcpy_htod(g_dev, f.mat, b, f.bytes));
    KPT_OK(kp_tasks_launch(f.t, f.s));
    KPT_OK(kp_stream_sync(f.s));
    check_factor(&f, b, "graph form, updated", nb);
    free(a);
    free(b);
    fact_close(&f);
}

static void residuals(void **state) {
    static const int64_t sizes[][2] = {{1, 1},    {2, 1},   {5, 2},    {33, 8},   {64, 16},
                                       {100, 32}, {97, 97}, {257, 64}, {300, 128}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        factor_sizes(sizes[i][0], sizes[i][1]);
    if (g_big) {
        factor_sizes(1000, 128);
        factor_sizes(2048, 512);
        factor_sizes(4100, 1024); /* a ragged last tile of 4 */
    }
}

/* A matrix whose leading 3x3 block is not positive definite: the first
 * tile's info names column 3, in both forms. */
static void not_positive_definite(void **state) {
    const int64_t n = 40, nb = 8;
    fact f = {0};
    fact_open(&f, n, nb, 2);
    float *a = malloc(f.bytes);
    chol_make_spd(n, 5, a);
    a[2 + 2 * n] = -1.0f;
    for (int form = 0; form < 2; form++) {
        KPT_OK(kp_memcpy_htod(g_dev, f.mat, a, f.bytes));
        KPT_OK(chol_submit(f.t, f.lib, f.bm, f.bw, f.bi, NULL));
        if (form) {
            KPT_OK(kp_tasks_instantiate(f.t));
            KPT_OK(kp_tasks_launch(f.t, f.s));
        } else {
            KPT_OK(kp_tasks_run(f.t, f.s));
        }
        KPT_OK(kp_stream_sync(f.s));
        int info = 0;
        KPT_OK(kp_memcpy_dtoh(g_dev, &info, f.info, sizeof info));
        assert_int_equal(info, 3);
    }
    free(a);
    fact_close(&f);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    g_big = argc > 2 && !strcmp(argv[2], "BIG");
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: cholesky tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(residuals),
        cmocka_unit_test(not_positive_definite),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
