/* The neural-network operator family's private interface: the host GEMM
 * that Conv, ConvTranspose, Gemm and MatMul share (ops_gemm.c), the
 * sliding-window geometry of convolutions and pools (ops_conv.c), the
 * cuBLAS and cuDNN handles of cuda devices (ops_cuda.c, ops_cudnn.c), and
 * the operator slots the family's table (ops_nn.c) lists.
 *
 * On cuda devices the engine hands every node one workspace. The operators
 * of this family that call cuBLAS ask for KP__OX_BLAS_RESERVE bytes more
 * than they use themselves: kp__ox_cuda_bind gives cuBLAS the last
 * KP__OX_BLAS_RESERVE bytes of the workspace, and the operators keep to
 * its start, so a GEMM never reads a buffer cuBLAS scribbles on. */
#ifndef KPIPE_ONNX_NN_IMPL_H
#define KPIPE_ONNX_NN_IMPL_H

#include "nn-kernels.h"
#include "../../onnx-impl.h"

/* --- the host GEMM (ops_gemm.c) --------------------------------------------------- */

/* The micro-kernel's tile: rows of A by columns of B. */
#define KP__OX_GEMM_MR 4
#define KP__OX_GEMM_NR 24

/* C (m x n) = alpha * A (m x k) * B^T (n x k) [+ bias], or += with
 * `accumulate`, for every batch entry (b0, b1) of nb[0] x nb[1]. Operands
 * are addressed by strides in elements: A's element (i, p) at
 * a[i*a_rs + p*a_ks + b0*a_bs[0] + b1*a_bs[1]], B's (j, p) likewise, C's
 * (i, j) at c[i*c_rs + j*c_cs + ...]. A KP__OX_GEMM_WIN operand is instead
 * the im2col matrix of `win` over the image at its address (element
 * (r, p) = im2col row p, column r), so a convolution needs no column
 * buffer; a KP__OX_GEMM_PACKED one was packed by kp__ox_gemm_pack_side for
 * its side (its batch strides then count packed floats). The bias (per row, or per column with bias_cols) is added where
 * the product is stored, not with `accumulate`; bias_bs is its stride per
 * inner batch index (a group's channels). Extents fit 32 bits; the struct
 * is a kernel's parameter block (at most KP_MAX_KERNEL_PARAMS bytes). */
enum { KP__OX_GEMM_STRIDED = 0, KP__OX_GEMM_WIN = 1, KP__OX_GEMM_PACKED = 2 };

typedef struct kp__ox_gemm {
    int32_t m, n, k;
    int32_t nb[2];
    int32_t a_kind, b_kind; /* KP__OX_GEMM_*: how the operand is addressed */
    int32_t accumulate;
    int32_t bias_cols;
    float alpha;
    const float *a, *b, *bias;
    float *c;
    int64_t a_rs, a_ks, b_rs, b_ks, c_rs, c_cs;
    int64_t a_bs[2], b_bs[2], c_bs[2];
    int64_t bias_bs;
    kp__ox_win win;
} kp__ox_gemm;

/* Swaps the roles of A and B (computing C^T) when that pads the
 * micro-kernel's tiles less: a convolution with few output positions puts
 * them on the tile's short side. Call it before packing an operand; true
 * when it swapped. */
bool kp__ox_gemm_orient(kp__ox_gemm *g);
/* Constant operands (weights) packed once: the floats `rows` rows of K
 * take packed for the A side (rows of C) or the B side (columns of C), and
 * the packing itself. */
size_t kp__ox_gemm_packed_floats(int64_t rows, int64_t k, bool a_side);
void kp__ox_gemm_pack_side(const float *src, int64_t rs, int64_t ks, int64_t rows, int64_t k,
                           bool a_side, float *dst);
/* Blocks the work splits into: batch entries x row blocks x column blocks. */
uint64_t kp__ox_gemm_blocks(const kp__ox_gemm *g);
/* Runs blocks [first, first + count) on the calling thread. */
void kp__ox_gemm_run(const kp__ox_gemm *g, uint64_t first, uint64_t count);
/* Enqueues the whole product as one launch whose host blocks the cpu
 * backend's workers share; when folding, runs it now. */
kp_status kp__ox_gemm_host(const kp__ox_exec *x, const kp__ox_gemm *g);

/* --- sliding-window geometry (ops_conv.c) ------------------------------------------- */

/* kernel_shape, strides, pads, dilations and auto_pad resolved against an
 * input's spatial extent (the last nsp dimensions). */
typedef struct kp__ox_spatial {
    int nsp;
    int64_t in[3], out[3], k[3], stride[3], pad[3], pad_end[3], dil[3];
} kp__ox_spatial;

/* Reads a node's window attributes for a kernel of extent `k` over `in`
 * and computes the output extent (floor, or ceil with ceil_mode, whose
 * last window must start inside the input or its leading padding). Refuses
 * by name what is malformed or too large for the kernels' 32-bit fields. */
kp_status kp__ox_spatial_infer(const kp__ox_gnode *n, int nsp, const int64_t *in,
                               const int64_t *k, bool ceil_mode, kp__ox_spatial *out);
/* The kernels' three-axis window of `s` (leading axes of size one). */
void kp__ox_spatial_win(const kp__ox_spatial *s, int64_t channels, kp__ox_win *w);
/* Whether an extent fits the kernels' 32-bit fields. */
static inline bool kp__ox_fits32(int64_t v) { return v >= 0 && v <= INT32_MAX; }

/* How a convolution runs, for validate (ops_conv.c). */
void kp__ox_conv_describe(const kp__ox_gnode *n, char *buf, size_t len);

/* --- operator slots (the family's table in ops_nn.c lists them) --------------------- */

kp_status kp__ox_conv_infer(kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_conv_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                              size_t *workspace);
kp_status kp__ox_conv_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_convt_infer(kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_convt_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                               size_t *workspace);
kp_status kp__ox_convt_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n);
void kp__ox_conv_release(kp__ox_gnode *n);

kp_status kp__ox_gemm_infer(kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_gemm_op_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_matmul_infer(kp__ox_graph *g, kp__ox_gnode *n);
kp_status kp__ox_matmul_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n);
/* Gemm's and MatMul's prepare: on cuda, the workspace cuBLAS needs. */
kp_status kp__ox_blas_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                              size_t *workspace);

/* Element kernels of nn-kernels.h the other files launch (ops_nn.c):
 * kp__ox_launch over bias/fill's n, im2col's rows x ncols, col2im's
 * w.c x image positions. */
extern const kp_kernel kp__ox_k_bias, kp__ox_k_fill, kp__ox_k_im2col, kp__ox_k_col2im;
/* fp16 convolutions' kernels (ops_nn.c), and their launches with the
 * geometry each cuda form wants (ops_conv.c): f32 NCHW to f16 NHWC, and the
 * epilogue, each over the tensor's n elements. */
extern const kp_kernel kp__ox_k_to_half, kp__ox_k_epilogue16;
kp_status kp__ox_to_half(const kp__ox_exec *x, const kp__ox_to_half_params *p);
kp_status kp__ox_epilogue16(const kp__ox_exec *x, const kp__ox_epilogue16_params *p);

/* --- cuda libraries (ops_cuda.c, ops_cudnn.c) ---------------------------------------- */

/* cuBLAS's share of the workspace (see the top of this file). */
#define KP__OX_BLAS_RESERVE ((size_t)4 << 20)
/* The largest column buffer a convolution's fallback path uses. */
#define KP__OX_COLS_MAX ((size_t)64 << 20)

/* Whether cuDNN could be loaded (once; thread-safe), and a line saying
 * which library ("cuDNN 9.1.0 (/path/libcudnn.so.9)") or why not. Both
 * work in every build: without cuDNN support they say so. */
#ifdef KP_HAVE_CUDNN
bool kp__ox_cudnn_available(void);
const char *kp__ox_cudnn_info(void);
/* cudnnGetVersion() of the loaded library (91900 for 9.19.0); 0 without. */
size_t kp__ox_cudnn_version(void);
#else
static inline bool kp__ox_cudnn_available(void) { return false; }
static inline const char *kp__ox_cudnn_info(void) {
    return "kpipe's own kernels (im2col and cuBLAS): this build has no cuDNN";
}
#endif

#ifdef KP_HAVE_CUDA
/* Row-major batched GEMM on the device, through cuBLAS with fp32 compute:
 * C_i = alpha * op(A_i) * op(B_i) + beta * C_i for i < batch, where op(A)
 * is m x k (A stored k x m when ta), op(B) k x n, leading dimensions and
 * batch strides in elements (a stride 0 repeats an operand). */
typedef struct kp__ox_blas {
    bool ta, tb;
    int64_t m, n, k, batch;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int64_t lda, ldb, ldc, sa, sb, sc;
} kp__ox_blas;
kp_status kp__ox_blas_gemm(const kp__ox_exec *x, const kp__ox_blas *b);

/* The cuDNN handle of an engine's handles (cudnnHandle_t), NULL when cuDNN
 * is not in use. */
void *kp__ox_cuda_dnn(const kp__ox_cuda *c);
/* Whether the engine runs in "precision": "tf32", and with "tune". */
bool kp__ox_cuda_tf32(const kp__ox_cuda *c);
bool kp__ox_cuda_tune(const kp__ox_cuda *c);
/* The engine's algorithm cache (onnx-impl.h), NULL for none. */
kp__ox_algo_cache *kp__ox_cuda_algos(const kp__ox_cuda *c);

/* A convolution as cuDNN runs it (forward, or a transposed convolution as
 * backward data). */
typedef struct kp__ox_conv_shape {
    int nsp;
    bool transposed;
    bool fused;     /* forward with bias: planned for the fused call too
                       (cudnnConvolutionBiasActivationForward, ReLU); with
                       half, an f16 bias */
    bool tf32;      /* tensor-op (TF32) algorithms allowed */
    bool tune;      /* measure the algorithms (cudnnFind*) instead of asking */
    bool half;      /* fp16 tensors in NHWC, fp32 accumulation, tensor cores
                       (onnx/half.c); 2-D forward only */
    int64_t batch, cin, cout, group;
    int64_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
} kp__ox_conv_shape;
typedef struct kp__ox_dnn_conv kp__ox_dnn_conv;

#ifdef KP_HAVE_CUDNN
/* The algorithm a cuDNN plan chose and its workspace, as text. */
void kp__ox_dnn_conv_describe(const kp__ox_dnn_conv *p, char *buf, size_t len);
#endif

#ifdef KP_HAVE_CUDNN
/* Makes and frees cuDNN handles; sets a handle's stream. */
kp_status kp__ox_dnn_create(kp_device_t dev, void **out);
void kp__ox_dnn_destroy(void *h);
kp_status kp__ox_dnn_set_stream(void *h, void *stream);
/* Descriptors and the algorithm for a convolution; *workspace receives the
 * bytes its run needs. KP_ERR_UNSUPPORTED when cuDNN cannot run it (the
 * caller takes its own path). The algorithm comes from `algos` (may be
 * NULL) where it holds one for this shape that cuDNN still accepts; a new
 * choice goes into it. */
kp_status kp__ox_dnn_conv_plan(void *dnn, const kp__ox_conv_shape *s,
                               kp__ox_algo_cache *algos, kp__ox_dnn_conv **out,
                               size_t *workspace);
/* Enqueues it on cuDNN handle `dnn` (kp__ox_cuda_dnn): y = conv(x, w), no
 * bias; f32 NCHW tensors, or f16 NHWC ones for a plan made with `half`. */
kp_status kp__ox_dnn_conv_run(const kp__ox_exec *x, void *dnn, const kp__ox_dnn_conv *p,
                              const void *in, const void *w, void *y);
/* The fused form (a plan made with `fused`): y = relu(conv(x, w) + z +
 * bias), z NULL for none; with `half`, every tensor f16 (the bias too). */
kp_status kp__ox_dnn_conv_run_fused(const kp__ox_exec *x, void *dnn, const kp__ox_dnn_conv *p,
                                    const void *in, const void *w, const void *bias,
                                    const void *z, void *y);
void kp__ox_dnn_conv_free(kp__ox_dnn_conv *p);
#endif
#endif

#endif
