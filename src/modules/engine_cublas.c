/* The engine's CUDA backend: cublasSgeam with alpha = beta = 1.
 *
 * The n floats are viewed as a column-major rows x cols matrix. geam walks
 * columns, so a 1 x n view (one element per column) runs about 20x under
 * copy bandwidth at n = 16M; a near-square view with many rows per column
 * runs near it. A workspace is set so that stream capture allocates nothing. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "modules-impl.h"

typedef struct kp__cublas_engine {
    cublasHandle_t h;
    int rows, cols;
    int64_t n;           /* the size rows x cols were chosen for */
    cudaStream_t stream; /* the handle's stream as last set */
    void *ws;
    size_t ws_bytes;
} kp__cublas_engine;

#define KP__WORKSPACE_BYTES ((size_t)4 << 20)

static kp_status kp__cublas_fail(cublasStatus_t s, const char *call) {
    (void)cudaGetLastError();
    return kp__error(s == CUBLAS_STATUS_ALLOC_FAILED ? KP_ERR_OUT_OF_MEMORY : KP_ERR_DEVICE,
                     "%s failed: %s (%s)", call, cublasGetStatusName(s), cublasGetStatusString(s));
}

#define KP_CUBLAS_CHECK(call)                                                     \
    do {                                                                          \
        cublasStatus_t kp__s = (call);                                            \
        if (kp__s != CUBLAS_STATUS_SUCCESS) return kp__cublas_fail(kp__s, #call); \
    } while (0)

/* rows: the largest divisor of n not above max(1024, sqrt(n)); a vector
 * whose only such divisors are tiny is one long column instead. */
static void kp__shape(int64_t n, int *rows, int *cols) {
    int64_t limit = 1024;
    while ((limit + 1) * (limit + 1) <= n) limit++;
    if (limit > n) limit = n;
    int64_t r = 1;
    for (int64_t d = limit; d >= 1; d--)
        if (n % d == 0) {
            r = d;
            break;
        }
    if (r < 32) r = n;
    *rows = (int)r;
    *cols = (int)(n / r);
}

static kp_status kp__cublas_create(kp_device_t dev, int64_t n, void **ctx, size_t *ws) {
    kp__cublas_engine *e = kp__calloc(1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "engine (cublas): no memory");
    cublasStatus_t s = cublasCreate(&e->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        kp__free(e);
        return kp__cublas_fail(s, "cublasCreate");
    }
    kp__shape(n, &e->rows, &e->cols);
    e->n = n;
    *ctx = e;
    *ws = KP__WORKSPACE_BYTES;
    return KP_OK;
}

static kp_status kp__cublas_set_workspace(void *ctx, void *ws, size_t bytes) {
    kp__cublas_engine *e = ctx;
    KP_CUBLAS_CHECK(cublasSetWorkspace(e->h, ws, bytes));
    e->ws = ws;
    e->ws_bytes = bytes;
    return KP_OK;
}

/* cublasSetStream resets the handle's workspace to cuBLAS's own pool, which
 * may allocate under capture: set the stream only when it changes, and hand
 * our workspace back right after. */
static kp_status kp__cublas_use_stream(kp__cublas_engine *e, cudaStream_t s) {
    if (s == e->stream) return KP_OK;
    KP_CUBLAS_CHECK(cublasSetStream(e->h, s));
    if (e->ws) KP_CUBLAS_CHECK(cublasSetWorkspace(e->h, e->ws, e->ws_bytes));
    e->stream = s;
    return KP_OK;
}

static kp_status kp__cublas_enqueue(void *ctx, kp_stream_t s, const float *a, const float *b,
                                    float *c, int64_t n) {
    kp__cublas_engine *e = ctx;
    const float one = 1.0f;
    if (n != e->n) { /* a dynamic size: the view is chosen once per new size */
        kp__shape(n, &e->rows, &e->cols);
        e->n = n;
    }
    KP_CHECK(kp__cublas_use_stream(e, (cudaStream_t)kp_stream_native(s)));
    KP_CUBLAS_CHECK(cublasSgeam(e->h, CUBLAS_OP_N, CUBLAS_OP_N, e->rows, e->cols, &one, a, e->rows,
                                &one, b, e->rows, c, e->rows));
    return KP_OK;
}

static void kp__cublas_destroy(void *ctx) {
    kp__cublas_engine *e = ctx;
    if (cublasDestroy(e->h) != CUBLAS_STATUS_SUCCESS) (void)cudaGetLastError();
    kp__free(e);
}

static void kp__cublas_note_library(void) {
    int major = 0, minor = 0, patch = 0;
    char v[32];
    if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
        cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
        return;
    snprintf(v, sizeof v, "%d.%d.%d", major, minor, patch);
    (void)kp_library_register("cuBLAS", v);
}

const kp__engine_backend_i kp__engine_cublas = {
    .create = kp__cublas_create,
    .set_workspace = kp__cublas_set_workspace,
    .enqueue = kp__cublas_enqueue,
    .destroy = kp__cublas_destroy,
    .note_library = kp__cublas_note_library,
};
