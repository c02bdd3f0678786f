/* A tiled Cholesky factorization over kpipe tasks. The matrix is one buffer
 * (n x n floats, column-major, leading dimension n); tile (i, j) is the
 * region of rows i*nb .. and columns j*nb .. (the last tiles ragged), and
 * the tasks name only their tiles: the overlap test derives every
 * dependency. The tile operations are cuSOLVER potrf and cuBLAS trsm, syrk
 * and gemm on a cuda device, plain loops on the cpu. Lower triangle:
 *   for k:  potrf(A_kk)
 *           for i > k:  trsm(A_kk, A_ik)           A_ik = A_ik L_kk^-T
 *           for i > k:  syrk(A_ik, A_ii)           A_ii -= A_ik A_ik^T
 *                       gemm(A_ik, A_jk, A_ij)     A_ij -= A_ik A_jk^T, k < j < i */
#ifndef CHOL_TILES_H
#define CHOL_TILES_H

#include "kpipe/kpipe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct chol_lib chol_lib;

/* The tile operations for an n x n matrix in tiles of nb on `dev`: on cuda,
 * a cuBLAS and a cuSOLVER handle, made here (never during a capture). */
kp_status chol_lib_create(kp_device_t dev, int64_t n, int64_t nb, chol_lib **out);
void chol_lib_destroy(chol_lib *lib);
/* Bytes of the workspace buffer potrf tasks write (at least 4). */
size_t chol_lib_work_bytes(const chol_lib *lib);
/* Tiles per side: ceil(n / nb). */
int64_t chol_tiles(int64_t n, int64_t nb);
/* The region of tile (i, j). */
kp_tensor_desc chol_tile(int64_t n, int64_t nb, int64_t i, int64_t j);

/* Submits the factorization of the matrix in buffer `a` (n x n floats):
 * `work` is a buffer of chol_lib_work_bytes, `info` one of chol_tiles int32,
 * where potrf of diagonal tile k leaves 0, or the column (from 1) at which
 * the tile is not positive definite. *n_tasks (may be NULL) counts them. */
kp_status chol_submit(kp_tasks_t t, const chol_lib *lib, uint32_t a, uint32_t work, uint32_t info,
                      size_t *n_tasks);

/* check.c: a symmetric positive definite matrix (column-major), and the
 * residual ||A - L L^T||_F / ||A||_F of L (the lower triangle of `l`):
 * exact when probes <= 0 (n^3 work), else estimated from `probes` random
 * +-1 vectors (n^2 each). `scratch` holds 3 n doubles. */
void chol_make_spd(int64_t n, uint64_t seed, float *a);
double chol_residual(int64_t n, const float *a, const float *l, int probes, double *scratch);

#ifdef KP_HAVE_CUDA
/* tiles_cuda.cu: the cuda forms. Pointers are device memory; `stream` a cudaStream_t. */
kp_status chol_cuda_create(int64_t n, int64_t nb, void **blas, void **solver, size_t *work_bytes);
void chol_cuda_destroy(void *blas, void *solver);
kp_status chol_cuda_potrf(void *solver, void *stream, float *a, int64_t m, int64_t lda, float *work,
                          size_t work_bytes, int *info);
kp_status chol_cuda_trsm(void *blas, void *stream, const float *l, int64_t ldl, float *b, int64_t m,
                         int64_t n, int64_t ldb);
kp_status chol_cuda_syrk(void *blas, void *stream, const float *a, int64_t lda, float *c, int64_t n,
                         int64_t k, int64_t ldc);
kp_status chol_cuda_gemm(void *blas, void *stream, const float *a, int64_t lda, const float *b,
                         int64_t ldb, float *c, int64_t m, int64_t n, int64_t k, int64_t ldc);
/* The whole matrix in one cusolverDnSpotrf call (the baseline). */
kp_status chol_cuda_potrf_whole(void *stream, float *a, int64_t n, void **state);
void chol_cuda_potrf_whole_free(void *state);
#endif

#ifdef __cplusplus
}
#endif
#endif
