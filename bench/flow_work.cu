// The GPU flow benchmark's stage work (flow_work.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "flow_work.h"

#define FW_PTR_RING 64
#define FW_MAX_BATCH 64

struct fw_ctx {
    int k, ring;
    size_t bytes;
    float *w;        // device weights, k x k
    float *in, *out; // pinned, ring x k x k
    cublasHandle_t blas;
    const float **ptr_host; // pinned: FW_PTR_RING x 3 x FW_MAX_BATCH
    const float **ptr_dev;
    unsigned ptr_next;
};

#define FW_CUDA(x)                        \
    do {                                  \
        if ((x) != cudaSuccess) return 1; \
    } while (0)
#define FW_BLAS(x)                                  \
    do {                                            \
        if ((x) != CUBLAS_STATUS_SUCCESS) return 2; \
    } while (0)

__global__ void fw_pre_kernel(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = 0.5f * x[i] + 0.25f;
}

extern "C" double fw_now_us(void) {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

extern "C" int fw_create(int k, int ring, fw_ctx **out) {
    fw_ctx *c = static_cast<fw_ctx *>(calloc(1, sizeof *c));
    if (!c) return 1;
    c->k = k;
    c->ring = ring;
    c->bytes = (size_t)k * k * sizeof(float);
    *out = c;
    FW_CUDA(cudaMalloc(&c->w, c->bytes));
    FW_CUDA(cudaMallocHost(&c->in, c->bytes * ring));
    FW_CUDA(cudaMallocHost(&c->out, c->bytes * ring));
    FW_CUDA(cudaMallocHost(&c->ptr_host, sizeof(float *) * 3 * FW_MAX_BATCH * FW_PTR_RING));
    FW_CUDA(cudaMalloc(&c->ptr_dev, sizeof(float *) * 3 * FW_MAX_BATCH * FW_PTR_RING));
    float *hw = static_cast<float *>(malloc(c->bytes));
    if (!hw) return 1;
    for (size_t i = 0; i < (size_t)k * k; i++) hw[i] = (float)((i * 7) % 13) / 13.0f;
    for (size_t s = 0; s < (size_t)ring; s++)
        for (size_t i = 0; i < (size_t)k * k; i++)
            c->in[s * k * k + i] = (float)((i + s) % 5) * 0.5f;
    int rc = cudaMemcpy(c->w, hw, c->bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : 1;
    free(hw);
    FW_BLAS(cublasCreate(&c->blas));
    return rc;
}

extern "C" void fw_destroy(fw_ctx *c) {
    if (!c) return;
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->w);
    cudaFreeHost(c->in);
    cudaFreeHost(c->out);
    cudaFreeHost(c->ptr_host);
    cudaFree(c->ptr_dev);
    free(c);
}

extern "C" size_t fw_matrix_bytes(const fw_ctx *c) { return c->bytes; }

extern "C" int fw_h2d(fw_ctx *c, void *s, float *x, int slot) {
    FW_CUDA(cudaMemcpyAsync(x, c->in + (size_t)slot * c->k * c->k, c->bytes, cudaMemcpyHostToDevice,
                            (cudaStream_t)s));
    return 0;
}

extern "C" int fw_preprocess(fw_ctx *c, void *s, float *x) {
    size_t n = (size_t)c->k * c->k;
    unsigned blocks = (unsigned)((n + 1023) / 1024);
    const unsigned grid = blocks < 1024 ? blocks : 1024;
    fw_pre_kernel<<<grid, 256, 0, (cudaStream_t)s>>>(x, n);
    FW_CUDA(cudaGetLastError());
    return 0;
}

extern "C" int fw_gemm(fw_ctx *c, void *s, const float *x, float *y) {
    const float one = 1.0f, zero = 0.0f;
    FW_BLAS(cublasSetStream(c->blas, (cudaStream_t)s));
    FW_BLAS(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, c->k, c->k, c->k, &one, c->w, c->k, x,
                        c->k, &zero, y, c->k));
    return 0;
}

extern "C" int fw_gemm_batched(fw_ctx *c, void *s, const float *const *x, float *const *y, int n) {
    if (n < 1 || n > FW_MAX_BATCH) return 3;
    size_t slot = (size_t)(c->ptr_next++ % FW_PTR_RING) * 3 * FW_MAX_BATCH;
    const float **h = c->ptr_host + slot, **d = c->ptr_dev + slot;
    for (int i = 0; i < n; i++) {
        h[i] = c->w;
        h[FW_MAX_BATCH + i] = x[i];
        h[2 * FW_MAX_BATCH + i] = y[i];
    }
    FW_CUDA(cudaMemcpyAsync(d, h, sizeof(float *) * 3 * FW_MAX_BATCH, cudaMemcpyHostToDevice,
                            (cudaStream_t)s));
    const float one = 1.0f, zero = 0.0f;
    FW_BLAS(cublasSetStream(c->blas, (cudaStream_t)s));
    FW_BLAS(cublasSgemmBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, c->k, c->k, c->k, &one, d, c->k,
                               d + FW_MAX_BATCH, c->k, &zero,
                               (float *const *)(d + 2 * FW_MAX_BATCH), c->k, n));
    return 0;
}

extern "C" int fw_d2h(fw_ctx *c, void *s, const float *y, int slot) {
    FW_CUDA(cudaMemcpyAsync(c->out + (size_t)slot * c->k * c->k, y, c->bytes,
                            cudaMemcpyDeviceToHost, (cudaStream_t)s));
    return 0;
}

extern "C" int fw_sync(void *s) {
    FW_CUDA(cudaStreamSynchronize((cudaStream_t)s));
    return 0;
}

extern "C" int fw_alone(fw_ctx *c, int reps, double us[4]) {
    cudaStream_t s;
    float *x, *y;
    FW_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    FW_CUDA(cudaMalloc(&x, c->bytes));
    FW_CUDA(cudaMalloc(&y, c->bytes));
    for (int op = 0; op < 4; op++) {
        for (int pass = 0; pass < 2; pass++) { // a warm-up pass, then the timed one
            int n = pass ? reps : 10, rc = 0;
            double t0 = fw_now_us();
            for (int i = 0; i < n && !rc; i++)
                rc = op == 0   ? fw_h2d(c, s, x, i % c->ring)
                     : op == 1 ? fw_preprocess(c, s, x)
                     : op == 2 ? fw_gemm(c, s, x, y)
                               : fw_d2h(c, s, y, i % c->ring);
            if (rc || fw_sync(s)) return 1;
            us[op] = (fw_now_us() - t0) / n;
        }
    }
    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(s);
    return 0;
}

// Output = w (0.5 in + 0.25): the first element from column 0 of the input.
extern "C" int fw_check(fw_ctx *c, int slot, double *got, double *want) {
    float *hw = static_cast<float *>(malloc(c->bytes));
    if (!hw) return 1;
    FW_CUDA(cudaMemcpy(hw, c->w, c->bytes, cudaMemcpyDeviceToHost));
    const float *in = c->in + (size_t)slot * c->k * c->k;
    double acc = 0;
    for (int j = 0; j < c->k; j++) acc += (double)hw[(size_t)j * c->k] * (0.5 * in[j] + 0.25);
    free(hw);
    *want = acc;
    *got = c->out[(size_t)slot * c->k * c->k];
    return 0;
}
