/* The cuda handles an engine's operators share: cuBLAS always, cuDNN when
 * it loads (ops_cudnn.c). The engine binds them to the tick's stream and
 * its workspace before running nodes; bind touches the libraries only when
 * either changed, because cublasSetStream resets the handle's workspace to
 * cuBLAS's own pool, which allocates, and must not under stream capture.
 * cuBLAS gets the last KP__OX_BLAS_RESERVE bytes of the workspace (see
 * nn-impl.h); the operators keep to its start. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdio.h>

#include "nn-impl.h"

struct kp__ox_cuda {
    kp_device_t dev;
    cublasHandle_t blas;
    void *dnn;           /* cudnnHandle_t; NULL when cuDNN is not in use */
    bool tf32;           /* "precision": "tf32" */
    bool tune;           /* "tune": measured algorithm choice */
    kp__ox_algo_cache *algos; /* the engine's; NULL for none */
    bool bound;
    cudaStream_t stream; /* as last set on the handles */
    void *ws;            /* cuBLAS's workspace as last set */
    size_t ws_bytes;
};

static kp_status kp__blas_fail(cublasStatus_t s, const char *call) {
    (void)cudaGetLastError();
    return kp__error(s == CUBLAS_STATUS_ALLOC_FAILED ? KP_ERR_OUT_OF_MEMORY : KP_ERR_DEVICE,
                     "%s failed: %s (%s)", call, cublasGetStatusName(s), cublasGetStatusString(s));
}

#define KP__BLAS_CHECK(call)                                                     \
    do {                                                                         \
        cublasStatus_t kp__s = (call);                                           \
        if (kp__s != CUBLAS_STATUS_SUCCESS) return kp__blas_fail(kp__s, #call); \
    } while (0)

kp_status kp__ox_cuda_device_key(kp_device_t dev, char *buf, size_t len) {
#ifdef KP_HAVE_CUDNN
    struct cudaDeviceProp prop;
    int ord = 0;
    if (!kp__ox_cudnn_available())
        return kp__error(KP_ERR_UNSUPPORTED, "%s", kp__ox_cudnn_info());
    KP_CHECK(kp_device_bind_thread(dev));
    if (cudaGetDevice(&ord) != cudaSuccess || cudaGetDeviceProperties(&prop, ord) != cudaSuccess) {
        (void)cudaGetLastError();
        return kp__error(KP_ERR_DEVICE, "onnx: cannot read the GPU's properties");
    }
    /* one printable line: the name as the driver gives it, tabs and all
       control bytes made spaces */
    prop.name[sizeof prop.name - 1] = '\0';
    for (char *p = prop.name; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = ' ';
    snprintf(buf, len, "%s, sm_%d%d, cuDNN %zu", prop.name, prop.major, prop.minor,
             kp__ox_cudnn_version());
    return KP_OK;
#else
    (void)dev;
    (void)buf;
    (void)len;
    return kp__error(KP_ERR_UNSUPPORTED, "%s", kp__ox_cudnn_info());
#endif
}

kp_status kp__ox_cuda_create(kp_device_t dev, bool tf32, bool tune, kp__ox_algo_cache *algos,
                             kp__ox_cuda **out) {
    *out = NULL;
    KP_CHECK(kp_device_bind_thread(dev));
    kp__ox_cuda *c = kp__calloc(1, sizeof *c);
    if (!c) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for cuda handles");
    c->dev = dev;
    c->tf32 = tf32;
    c->tune = tune;
    c->algos = algos;
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (c->blas) (void)cublasDestroy(c->blas);
        kp__free(c);
        return kp__blas_fail(s, "cublasCreate");
    }
#ifdef KP_HAVE_CUDNN
    if (kp__ox_cudnn_available() && kp__ox_dnn_create(dev, &c->dnn) != KP_OK) {
        kp__log(KP_LOG_INFO, "onnx: no cuDNN handle (%s); convolutions use cuBLAS",
                kp_last_error());
        c->dnn = NULL;
    }
#endif
    *out = c;
    return KP_OK;
}

void kp__ox_cuda_destroy(kp__ox_cuda *c) {
    if (!c) return;
#ifdef KP_HAVE_CUDNN
    kp__ox_dnn_destroy(c->dnn);
#endif
    if (cublasDestroy(c->blas) != CUBLAS_STATUS_SUCCESS) (void)cudaGetLastError();
    kp__free(c);
}

kp_status kp__ox_cuda_bind(kp__ox_cuda *c, kp_stream_t s, void *workspace, size_t bytes) {
    cudaStream_t cs = s ? (cudaStream_t)kp_stream_native(s) : NULL;
    void *ws = NULL;
    size_t ws_bytes = 0;
    if (workspace && bytes >= KP__OX_BLAS_RESERVE) {
        /* cuBLAS wants its workspace 256-byte aligned. */
        uintptr_t end = (uintptr_t)workspace + bytes;
        uintptr_t start = (end - KP__OX_BLAS_RESERVE + 255) & ~(uintptr_t)255;
        ws = (void *)start;
        ws_bytes = end - start;
    }
    bool new_stream = !c->bound || cs != c->stream;
    if (!new_stream && ws == c->ws && ws_bytes == c->ws_bytes) return KP_OK;
    if (new_stream) {
        KP__BLAS_CHECK(cublasSetStream(c->blas, cs));
#ifdef KP_HAVE_CUDNN
        if (c->dnn) KP_CHECK(kp__ox_dnn_set_stream(c->dnn, cs));
#endif
    }
    KP__BLAS_CHECK(cublasSetWorkspace(c->blas, ws, ws_bytes));
    c->bound = true;
    c->stream = cs;
    c->ws = ws;
    c->ws_bytes = ws_bytes;
    return KP_OK;
}

void *kp__ox_cuda_dnn(const kp__ox_cuda *c) { return c ? c->dnn : NULL; }

bool kp__ox_cuda_tf32(const kp__ox_cuda *c) { return c && c->tf32; }

bool kp__ox_cuda_tune(const kp__ox_cuda *c) { return c && c->tune; }

kp__ox_algo_cache *kp__ox_cuda_algos(const kp__ox_cuda *c) { return c ? c->algos : NULL; }

static bool kp__int(int64_t v) { return v >= 0 && v <= INT_MAX; }

kp_status kp__ox_blas_gemm(const kp__ox_exec *x, const kp__ox_blas *b) {
    if (b->m == 0 || b->n == 0 || b->batch == 0) return KP_OK;
    if (!x->cuda) return kp__error(KP_ERR_INVALID_ARG, "onnx GEMM: no cuda handles");
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the
     * same buffers, operands swapped. Leading dimensions are at least one,
     * as cuBLAS checks them even for empty extents. */
    int64_t lda = b->lda > 0 ? b->lda : 1, ldb = b->ldb > 0 ? b->ldb : 1;
    int64_t ldc = b->ldc > 0 ? b->ldc : 1;
    if (!kp__int(b->m) || !kp__int(b->n) || !kp__int(b->k) || !kp__int(lda) || !kp__int(ldb) ||
        !kp__int(ldc) || !kp__int(b->batch))
        return kp__error(KP_ERR_UNSUPPORTED, "onnx GEMM: extents past cuBLAS's int range");
    cublasOperation_t opa = b->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = b->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (b->batch == 1)
        KP__BLAS_CHECK(cublasSgemm(x->cuda->blas, opb, opa, (int)b->n, (int)b->m, (int)b->k,
                                   &b->alpha, b->b, (int)ldb, b->a, (int)lda, &b->beta, b->c,
                                   (int)ldc));
    else
        KP__BLAS_CHECK(cublasSgemmStridedBatched(
            x->cuda->blas, opb, opa, (int)b->n, (int)b->m, (int)b->k, &b->alpha, b->b, (int)ldb,
            b->sb, b->a, (int)lda, b->sa, &b->beta, b->c, (int)ldc, b->sc, (int)b->batch));
    return KP_OK;
}
