/* The tile operations as tasks: on a cuda stream the vendor libraries, on a
 * cpu stream host kernels whose blocks split the tile by rows or columns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tiles.h"

struct chol_lib {
    int64_t n, nb;
    bool cuda;
    void *blas, *solver;
    size_t work_bytes;
};

int64_t chol_tiles(int64_t n, int64_t nb) { return (n + nb - 1) / nb; }

kp_tensor_desc chol_tile(int64_t n, int64_t nb, int64_t i, int64_t j) {
    int64_t rows = n - i * nb < nb ? n - i * nb : nb, cols = n - j * nb < nb ? n - j * nb : nb;
    int64_t shape[2] = {cols, rows}, strides[2] = {n, 1};
    kp_tensor_desc d;
    kp_desc_init(&d, KP_F32, 2, shape, strides);
    d.offset = j * nb * n + i * nb;
    return d;
}

kp_status chol_lib_create(kp_device_t dev, int64_t n, int64_t nb, chol_lib **out) {
    *out = NULL;
    if (n < 1 || nb < 1 || n > (int64_t)1 << 20)
        return kp_set_error(KP_ERR_INVALID_ARG, "cholesky: n %lld and nb %lld (1 .. 2^20)",
                            (long long)n, (long long)nb);
    chol_lib *lib = calloc(1, sizeof *lib);
    if (!lib) return kp_set_error(KP_ERR_OUT_OF_MEMORY, "cholesky: no memory");
    lib->n = n;
    lib->nb = nb;
    lib->work_bytes = 4;
    lib->cuda = strncmp(kp_device_name(dev), "cuda", 4) == 0;
    if (lib->cuda) {
#ifdef KP_HAVE_CUDA
        kp_status st =
            chol_cuda_create(n, nb < n ? nb : n, &lib->blas, &lib->solver, &lib->work_bytes);
        if (st != KP_OK) {
            free(lib);
            return st;
        }
#else
        free(lib);
        return kp_set_error(KP_ERR_UNSUPPORTED, "cholesky: built without CUDA");
#endif
    }
    *out = lib;
    return KP_OK;
}

void chol_lib_destroy(chol_lib *lib) {
    if (!lib) return;
#ifdef KP_HAVE_CUDA
    if (lib->cuda) chol_cuda_destroy(lib->blas, lib->solver);
#endif
    free(lib);
}

size_t chol_lib_work_bytes(const chol_lib *lib) { return lib->work_bytes; }

/* --- host kernels: column-major tiles, element (r, c) at p[r + c * ld] -------- */
typedef struct tile_params {
    float *c;       /* the tile written */
    const float *a; /* read */
    const float *b; /* read (gemm) */
    int64_t m, n, k;
    int64_t ldc, lda, ldb;
    int *info;
} tile_params;

static void potrf_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const tile_params *p = pp;
    float *a = p->c;
    int64_t n = p->m, ld = p->ldc;
    *p->info = 0;
    for (int64_t j = 0; j < n; j++) {
        double d = a[j + j * ld];
        for (int64_t k = 0; k < j; k++) d -= (double)a[j + k * ld] * a[j + k * ld];
        if (!(d > 0)) {
            *p->info = (int)(j + 1);
            return;
        }
        float l = (float)sqrt(d);
        a[j + j * ld] = l;
        for (int64_t i = j + 1; i < n; i++) {
            double s = a[i + j * ld];
            for (int64_t k = 0; k < j; k++) s -= (double)a[i + k * ld] * a[j + k * ld];
            a[i + j * ld] = (float)(s / l);
        }
    }
}

/* B (m x n) = B L^-T, L (n x n) lower: each row of B on its own. */
static void trsm_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const tile_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->m, grid, first, nb, &lo, &hi);
    for (int64_t r = (int64_t)lo; r < (int64_t)hi; r++)
        for (int64_t j = 0; j < p->n; j++) {
            double s = p->c[r + j * p->ldc];
            for (int64_t k = 0; k < j; k++)
                s -= (double)p->c[r + k * p->ldc] * p->a[j + k * p->lda];
            p->c[r + j * p->ldc] = (float)(s / p->a[j + j * p->lda]);
        }
}

/* C (n x n, lower) -= A A^T, A (n x k): columns split among blocks. */
static void syrk_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const tile_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    for (int64_t c = (int64_t)lo; c < (int64_t)hi; c++)
        for (int64_t r = c; r < p->n; r++) {
            double s = 0;
            for (int64_t k = 0; k < p->k; k++)
                s += (double)p->a[r + k * p->lda] * p->a[c + k * p->lda];
            p->c[r + c * p->ldc] -= (float)s;
        }
}

/* C (m x n) -= A B^T, A (m x k), B (n x k): columns split among blocks. */
static void gemm_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first, uint64_t nb) {
    const tile_params *p = pp;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->n, grid, first, nb, &lo, &hi);
    for (int64_t c = (int64_t)lo; c < (int64_t)hi; c++)
        for (int64_t r = 0; r < p->m; r++) {
            double s = 0;
            for (int64_t k = 0; k < p->k; k++)
                s += (double)p->a[r + k * p->lda] * p->b[c + k * p->ldb];
            p->c[r + c * p->ldc] -= (float)s;
        }
}

#define HOST_KERNEL(op)                    \
    static const kp_kernel op##_kernel = { \
        #op, sizeof(tile_params), {{"host", &(const kp_host_kernel){op##_host}}}}
HOST_KERNEL(potrf);
HOST_KERNEL(trsm);
HOST_KERNEL(syrk);
HOST_KERNEL(gemm);

static kp_status host_launch(kp_stream_t s, const kp_kernel *k, const tile_params *p,
                             int64_t split) {
    uint32_t grid = split < 16 ? (uint32_t)split : 16;
    kp_launch l = {.kernel = k, .grid = {grid ? grid : 1, 1, 1}, .block = {1, 1, 1}, .params = p};
    return kp_launch_kernel(s, &l);
}

/* --- the tasks ----------------------------------------------------------------------- */
typedef struct tile {
    float *p;
    int64_t rows, cols, ld;
} tile;

static kp_status as_tile(const kp_task_view *v, const char *op, tile *t) {
    if (v->desc.dtype != KP_F32 || v->desc.ndim != 2 || v->desc.strides[1] != 1)
        return kp_set_error(KP_ERR_INVALID_ARG, "%s: a tile is a 2-D f32 region of unit row stride",
                            op);
    *t = (tile){(float *)v->data + v->desc.offset, v->desc.shape[1], v->desc.shape[0],
                v->desc.strides[0]};
    return KP_OK;
}

/* args: [0] INOUT A_kk, [1] OUT work, [2] OUT info[k] */
static kp_status potrf_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    const chol_lib *lib = user;
    (void)lib; /* read only where the CUDA backend is built */
    tile a = {0};
    kp_status st = as_tile(&v[0], "potrf", &a);
    if (st != KP_OK) return st;
    int *info = (int *)v[2].data + v[2].desc.offset;
#ifdef KP_HAVE_CUDA
    if (lib->cuda)
        return chol_cuda_potrf(lib->solver, kp_stream_native(s), a.p, a.rows, a.ld, v[1].data,
                               lib->work_bytes, info);
#endif
    tile_params p = {.c = a.p, .m = a.rows, .n = a.rows, .ldc = a.ld, .info = info};
    return host_launch(s, &potrf_kernel, &p, 1);
}

/* args: [0] IN A_kk, [1] INOUT A_ik */
static kp_status trsm_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    const chol_lib *lib = user;
    (void)lib; /* read only where the CUDA backend is built */
    tile l = {0}, b = {0};
    kp_status st = as_tile(&v[0], "trsm", &l);
    if (st == KP_OK) st = as_tile(&v[1], "trsm", &b);
    if (st != KP_OK) return st;
#ifdef KP_HAVE_CUDA
    if (lib->cuda)
        return chol_cuda_trsm(lib->blas, kp_stream_native(s), l.p, l.ld, b.p, b.rows, b.cols, b.ld);
#endif
    tile_params p = {.c = b.p, .a = l.p, .m = b.rows, .n = b.cols, .ldc = b.ld, .lda = l.ld};
    return host_launch(s, &trsm_kernel, &p, b.rows);
}

/* args: [0] IN A_ik, [1] INOUT A_ii */
static kp_status syrk_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    const chol_lib *lib = user;
    (void)lib; /* read only where the CUDA backend is built */
    tile a = {0}, c = {0};
    kp_status st = as_tile(&v[0], "syrk", &a);
    if (st == KP_OK) st = as_tile(&v[1], "syrk", &c);
    if (st != KP_OK) return st;
#ifdef KP_HAVE_CUDA
    if (lib->cuda)
        return chol_cuda_syrk(lib->blas, kp_stream_native(s), a.p, a.ld, c.p, c.rows, a.cols, c.ld);
#endif
    tile_params p = {
        .c = c.p, .a = a.p, .m = c.rows, .n = c.rows, .k = a.cols, .ldc = c.ld, .lda = a.ld};
    return host_launch(s, &syrk_kernel, &p, c.rows);
}

/* args: [0] IN A_ik, [1] IN A_jk, [2] INOUT A_ij */
static kp_status gemm_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    const chol_lib *lib = user;
    (void)lib; /* read only where the CUDA backend is built */
    tile a = {0}, b = {0}, c = {0};
    kp_status st = as_tile(&v[0], "gemm", &a);
    if (st == KP_OK) st = as_tile(&v[1], "gemm", &b);
    if (st == KP_OK) st = as_tile(&v[2], "gemm", &c);
    if (st != KP_OK) return st;
#ifdef KP_HAVE_CUDA
    if (lib->cuda)
        return chol_cuda_gemm(lib->blas, kp_stream_native(s), a.p, a.ld, b.p, b.ld, c.p, c.rows,
                              c.cols, a.cols, c.ld);
#endif
    tile_params p = {.c = c.p,
                     .a = a.p,
                     .b = b.p,
                     .m = c.rows,
                     .n = c.cols,
                     .k = a.cols,
                     .ldc = c.ld,
                     .lda = a.ld,
                     .ldb = b.ld};
    return host_launch(s, &gemm_kernel, &p, c.cols);
}

static kp_task_arg arg(kp_task_access acc, uint32_t buf, kp_tensor_desc d) {
    kp_task_arg a = {.access = acc, .buffer = buf, .desc = d};
    return a;
}

kp_status chol_submit(kp_tasks_t t, const chol_lib *lib, uint32_t a, uint32_t work, uint32_t info,
                      size_t *n_tasks) {
    const kp_task_kernel potrf = {"potrf", potrf_task, (void *)lib, NULL};
    const kp_task_kernel trsm = {"trsm", trsm_task, (void *)lib, NULL};
    const kp_task_kernel syrk = {"syrk", syrk_task, (void *)lib, NULL};
    const kp_task_kernel gemm = {"gemm", gemm_task, (void *)lib, NULL};
    int64_t n = lib->n, nb = lib->nb, nt = chol_tiles(n, nb);
    int64_t wn = (int64_t)(lib->work_bytes / 4), one = 1;
    kp_tensor_desc wd, id;
    kp_desc_init(&wd, KP_F32, 1, &wn, NULL);
    kp_desc_init(&id, KP_I32, 1, &one, NULL);
    size_t count = 0;
    kp_status st = KP_OK;
#define SUBMIT(kern, ...)                                                          \
    do {                                                                           \
        kp_task_arg args_[] = {__VA_ARGS__};                                       \
        st = kp_tasks_submit(t, &kern, args_, sizeof args_ / sizeof *args_, NULL); \
        if (st != KP_OK) goto out;                                                 \
        count++;                                                                   \
    } while (0)
    for (int64_t k = 0; k < nt; k++) {
        id.offset = k;
        SUBMIT(potrf, arg(KP_TASK_INOUT, a, chol_tile(n, nb, k, k)), arg(KP_TASK_OUT, work, wd),
               arg(KP_TASK_OUT, info, id));
        for (int64_t i = k + 1; i < nt; i++)
            SUBMIT(trsm, arg(KP_TASK_IN, a, chol_tile(n, nb, k, k)),
                   arg(KP_TASK_INOUT, a, chol_tile(n, nb, i, k)));
        for (int64_t i = k + 1; i < nt; i++) {
            SUBMIT(syrk, arg(KP_TASK_IN, a, chol_tile(n, nb, i, k)),
                   arg(KP_TASK_INOUT, a, chol_tile(n, nb, i, i)));
            for (int64_t j = k + 1; j < i; j++)
                SUBMIT(gemm, arg(KP_TASK_IN, a, chol_tile(n, nb, i, k)),
                       arg(KP_TASK_IN, a, chol_tile(n, nb, j, k)),
                       arg(KP_TASK_INOUT, a, chol_tile(n, nb, i, j)));
        }
    }
#undef SUBMIT
out:
    if (n_tasks) *n_tasks = count;
    return st;
}
