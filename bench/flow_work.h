/* The work of the GPU flow benchmark's four stages, shared by the kpipe
 * flow (bench_flow_gpu) and its oneTBB twin (tbb_flow_gpu) so both run
 * exactly the same device work per frame: a pinned host-to-device copy of
 * a k x k float matrix, a preprocess kernel (x = 0.5 x + 0.25), a cuBLAS
 * GEMM standing in for inference (y = w x), and a device-to-host copy. */
#ifndef KP_BENCH_FLOW_WORK_H
#define KP_BENCH_FLOW_WORK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fw_ctx fw_ctx; /* weights, host rings, one cuBLAS handle */

/* Makes the weights and `ring` pinned input and output matrices. */
int fw_create(int k, int ring, fw_ctx **out);
void fw_destroy(fw_ctx *c);
size_t fw_matrix_bytes(const fw_ctx *c);
/* The four stages on `stream` (a cudaStream_t); x and y are device
 * matrices, slot picks the host matrices. 0 or a CUDA/cuBLAS error. */
int fw_h2d(fw_ctx *c, void *stream, float *x, int slot);
int fw_preprocess(fw_ctx *c, void *stream, float *x);
int fw_gemm(fw_ctx *c, void *stream, const float *x, float *y);
/* n GEMMs in one batched call; the pointer arrays go up through a pinned
 * ring (batches in flight must stay under 64). */
int fw_gemm_batched(fw_ctx *c, void *stream, const float *const *x, float *const *y, int n);
int fw_d2h(fw_ctx *c, void *stream, const float *y, int slot);
int fw_sync(void *stream);
/* Each stage alone, back to back on one stream, `reps` times: microseconds
 * per frame for h2d, preprocess, gemm and d2h. */
int fw_alone(fw_ctx *c, int reps, double us[4]);
/* The first element of output slot `slot`, and what it must be. */
int fw_check(fw_ctx *c, int slot, double *got, double *want);
double fw_now_us(void);

#ifdef __cplusplus
}
#endif
#endif
