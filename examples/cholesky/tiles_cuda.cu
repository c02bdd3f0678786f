// The tile operations on a cuda stream: cuSOLVER potrf, cuBLAS trsm, syrk
// and gemm, in place on tiles of the column-major matrix (leading
// dimension n). One handle of each serves every stream: the tasks are
// enqueued from one thread, and each call first sets the stream. cuBLAS
// runs with no workspace, so calls on different streams (and nodes of one
// graph that run at once) share nothing.
#include <cublas_v2.h>
#include <cusolverDn.h>

#include "tiles.h"

#define BLAS(call, what)                                                                    \
    do {                                                                                    \
        cublasStatus_t s_ = (call);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return kp_set_error(KP_ERR_DEVICE, "%s: %s", what, cublasGetStatusString(s_)); \
    } while (0)
#define SOLVER(call, what)                                                                 \
    do {                                                                                   \
        cusolverStatus_t s_ = (call);                                                      \
        if (s_ != CUSOLVER_STATUS_SUCCESS)                                                 \
            return kp_set_error(KP_ERR_DEVICE, "%s: cuSOLVER status %d", what, (int)s_); \
    } while (0)

static const float k_one = 1.0f, k_minus_one = -1.0f;

extern "C" kp_status chol_cuda_create(int64_t n, int64_t nb, void **blas, void **solver,
                                      size_t *work_bytes) {
    cublasHandle_t b = NULL;
    cusolverDnHandle_t s = NULL;
    int lwork = 0;
    cublasStatus_t bs = cublasCreate(&b);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return kp_set_error(KP_ERR_DEVICE, "cublasCreate: %s", cublasGetStatusString(bs));
    cusolverStatus_t ss = cusolverDnCreate(&s);
    if (ss == CUSOLVER_STATUS_SUCCESS)
        ss = cusolverDnSpotrf_bufferSize(s, CUBLAS_FILL_MODE_LOWER, (int)nb, NULL, (int)n, &lwork);
    if (ss != CUSOLVER_STATUS_SUCCESS) {
        if (s) cusolverDnDestroy(s);
        cublasDestroy(b);
        return kp_set_error(KP_ERR_DEVICE, "cuSOLVER setup: status %d", (int)ss);
    }
    *blas = b;
    *solver = s;
    *work_bytes = (size_t)(lwork > 1 ? lwork : 1) * sizeof(float);
    return KP_OK;
}

extern "C" void chol_cuda_destroy(void *blas, void *solver) {
    if (solver) cusolverDnDestroy((cusolverDnHandle_t)solver);
    if (blas) cublasDestroy((cublasHandle_t)blas);
}

static kp_status on_stream(cublasHandle_t h, void *stream) {
    BLAS(cublasSetStream(h, (cudaStream_t)stream), "cublasSetStream");
    BLAS(cublasSetWorkspace(h, NULL, 0), "cublasSetWorkspace");
    return KP_OK;
}

extern "C" kp_status chol_cuda_potrf(void *solver, void *stream, float *a, int64_t m, int64_t lda,
                                     float *work, size_t work_bytes, int *info) {
    cusolverDnHandle_t h = (cusolverDnHandle_t)solver;
    SOLVER(cusolverDnSetStream(h, (cudaStream_t)stream), "cusolverDnSetStream");
    SOLVER(cusolverDnSpotrf(h, CUBLAS_FILL_MODE_LOWER, (int)m, a, (int)lda, work,
                            (int)(work_bytes / sizeof(float)), info),
           "cusolverDnSpotrf");
    return KP_OK;
}

extern "C" kp_status chol_cuda_trsm(void *blas, void *stream, const float *l, int64_t ldl,
                                    float *b, int64_t m, int64_t n, int64_t ldb) {
    cublasHandle_t h = (cublasHandle_t)blas;
    kp_status st = on_stream(h, stream);
    if (st != KP_OK) return st;
    BLAS(cublasStrsm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT,
                     (int)m, (int)n, &k_one, l, (int)ldl, b, (int)ldb),
         "cublasStrsm");
    return KP_OK;
}

extern "C" kp_status chol_cuda_syrk(void *blas, void *stream, const float *a, int64_t lda,
                                    float *c, int64_t n, int64_t k, int64_t ldc) {
    cublasHandle_t h = (cublasHandle_t)blas;
    kp_status st = on_stream(h, stream);
    if (st != KP_OK) return st;
    BLAS(cublasSsyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, (int)n, (int)k, &k_minus_one, a,
                     (int)lda, &k_one, c, (int)ldc),
         "cublasSsyrk");
    return KP_OK;
}

extern "C" kp_status chol_cuda_gemm(void *blas, void *stream, const float *a, int64_t lda,
                                    const float *b, int64_t ldb, float *c, int64_t m, int64_t n,
                                    int64_t k, int64_t ldc) {
    cublasHandle_t h = (cublasHandle_t)blas;
    kp_status st = on_stream(h, stream);
    if (st != KP_OK) return st;
    BLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)m, (int)n, (int)k, &k_minus_one, a,
                     (int)lda, b, (int)ldb, &k_one, c, (int)ldc),
         "cublasSgemm");
    return KP_OK;
}

// The baseline: one call over the whole matrix, its handle, workspace and
// info kept in `state` across calls.
struct whole {
    cusolverDnHandle_t h;
    float *work;
    int lwork;
    int *info;
    int64_t n;
};

extern "C" kp_status chol_cuda_potrf_whole(void *stream, float *a, int64_t n, void **state) {
    whole *w = (whole *)*state;
    if (!w) {
        w = (whole *)calloc(1, sizeof *w);
        if (!w) return kp_set_error(KP_ERR_OUT_OF_MEMORY, "potrf baseline: no memory");
        *state = w;
        w->n = n;
        SOLVER(cusolverDnCreate(&w->h), "cusolverDnCreate");
        SOLVER(cusolverDnSpotrf_bufferSize(w->h, CUBLAS_FILL_MODE_LOWER, (int)n, a, (int)n,
                                           &w->lwork),
               "cusolverDnSpotrf_bufferSize");
        if (cudaMalloc(&w->work, (size_t)w->lwork * sizeof(float) + 16) != cudaSuccess ||
            cudaMalloc(&w->info, sizeof(int)) != cudaSuccess)
            return kp_set_error(KP_ERR_OUT_OF_MEMORY, "potrf baseline: no device memory");
    }
    if (w->n != n) return kp_set_error(KP_ERR_INVALID_ARG, "potrf baseline: n changed");
    SOLVER(cusolverDnSetStream(w->h, (cudaStream_t)stream), "cusolverDnSetStream");
    SOLVER(cusolverDnSpotrf(w->h, CUBLAS_FILL_MODE_LOWER, (int)n, a, (int)n, w->work, w->lwork,
                            w->info),
           "cusolverDnSpotrf");
    return KP_OK;
}

extern "C" void chol_cuda_potrf_whole_free(void *state) {
    whole *w = (whole *)state;
    if (!w) return;
    if (w->h) cusolverDnDestroy(w->h);
    cudaFree(w->work);
    cudaFree(w->info);
    free(w);
}
