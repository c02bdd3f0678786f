/* cuDNN for the engine's convolutions, opened at run time: the build needs
 * only its headers, and a machine whose cuDNN lives in a Python
 * environment (PyTorch's wheel) needs neither a link step nor
 * LD_LIBRARY_PATH.
 *
 * Where it looks, in order: the loader's own search for libcudnn.so.9; the
 * folder KP_CUDNN_LIBRARY_DIR names; the nvidia/cudnn/lib folder of
 * $VIRTUAL_ENV's site-packages, of each $PYTHONPATH entry, of the
 * dist-packages and site-packages of /usr/local/lib/python3.N, of Debian's
 * /usr/lib/python3/dist-packages, and of the user's ~/.local. cuDNN 9's front library
 * opens its parts (libcudnn_graph, _ops, _cnn, ...) by bare name, which
 * fails when their folder is not on the search path, so in a folder the
 * parts are opened first by full path, globally, and the front library
 * then finds them loaded. Every function used is resolved into a table;
 * one missing means cuDNN is not used (logged once at INFO) and
 * convolutions take the cuBLAS path.
 *
 * Convolutions use the legacy descriptor API with FMA math: cuDNN's default
 * math lets fp32 convolutions run as TF32 on Ampere and later, which would
 * not match the host within the engine's tolerance. "precision": "tf32"
 * asks for exactly that: tensor-op algorithms are then allowed, and each
 * runs in the math type the heuristics gave it. */
#define _GNU_SOURCE /* dladdr: the path of the library the loader found */
#include <cudnn.h>
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/onnx.h"
#include "nn-impl.h"

#define KP__DNN_FUNCS(X)                                                                      \
    X(size_t, cudnnGetVersion, (void))                                                        \
    X(const char *, cudnnGetErrorString, (cudnnStatus_t))                                     \
    X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t *))                                          \
    X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t))                                           \
    X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t, cudaStream_t))                           \
    X(cudnnStatus_t, cudnnGetStream, (cudnnHandle_t, cudaStream_t *))                         \
    X(cudnnStatus_t, cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t *))                \
    X(cudnnStatus_t, cudnnSetTensorNdDescriptor,                                              \
      (cudnnTensorDescriptor_t, cudnnDataType_t, int, const int[], const int[]))              \
    X(cudnnStatus_t, cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t))                 \
    X(cudnnStatus_t, cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t *))                \
    X(cudnnStatus_t, cudnnSetFilterNdDescriptor,                                              \
      (cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, const int[]))      \
    X(cudnnStatus_t, cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t))                 \
    X(cudnnStatus_t, cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t *))      \
    X(cudnnStatus_t, cudnnSetConvolutionNdDescriptor,                                         \
      (cudnnConvolutionDescriptor_t, int, const int[], const int[], const int[],              \
       cudnnConvolutionMode_t, cudnnDataType_t))                                              \
    X(cudnnStatus_t, cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t, int))      \
    X(cudnnStatus_t, cudnnSetConvolutionMathType,                                             \
      (cudnnConvolutionDescriptor_t, cudnnMathType_t))                                        \
    X(cudnnStatus_t, cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t))       \
    X(cudnnStatus_t, cudnnGetConvolutionNdForwardOutputDim,                                   \
      (const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,                     \
       const cudnnFilterDescriptor_t, int, int[]))                                            \
    X(cudnnStatus_t, cudnnGetConvolutionForwardAlgorithm_v7,                                  \
      (cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *,   \
       cudnnConvolutionFwdAlgoPerf_t *))                                                      \
    X(cudnnStatus_t, cudnnFindConvolutionForwardAlgorithm,                                    \
      (cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *,   \
       cudnnConvolutionFwdAlgoPerf_t *))                                                      \
    X(cudnnStatus_t, cudnnFindConvolutionBackwardDataAlgorithm,                               \
      (cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *,   \
       cudnnConvolutionBwdDataAlgoPerf_t *))                                                  \
    X(cudnnStatus_t, cudnnConvolutionForward,                                                 \
      (cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,              \
       const cudnnFilterDescriptor_t, const void *, const cudnnConvolutionDescriptor_t,       \
       cudnnConvolutionFwdAlgo_t, void *, size_t, const void *, const cudnnTensorDescriptor_t, \
       void *))                                                                               \
    X(cudnnStatus_t, cudnnCreateActivationDescriptor, (cudnnActivationDescriptor_t *))        \
    X(cudnnStatus_t, cudnnSetActivationDescriptor,                                            \
      (cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, double))    \
    X(cudnnStatus_t, cudnnDestroyActivationDescriptor, (cudnnActivationDescriptor_t))         \
    X(cudnnStatus_t, cudnnConvolutionBiasActivationForward,                                   \
      (cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,              \
       const cudnnFilterDescriptor_t, const void *, const cudnnConvolutionDescriptor_t,       \
       cudnnConvolutionFwdAlgo_t, void *, size_t, const void *, const cudnnTensorDescriptor_t, \
       const void *, const cudnnTensorDescriptor_t, const void *,                             \
       const cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t, void *))             \
    X(cudnnStatus_t, cudnnGetConvolutionBackwardDataAlgorithm_v7,                             \
      (cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *,   \
       cudnnConvolutionBwdDataAlgoPerf_t *))                                                  \
    X(cudnnStatus_t, cudnnGetConvolutionForwardWorkspaceSize,                                 \
      (cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,                     \
       cudnnConvolutionFwdAlgo_t, size_t *))                                                  \
    X(cudnnStatus_t, cudnnGetConvolutionBackwardDataWorkspaceSize,                            \
      (cudnnHandle_t, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,           \
       const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,                     \
       cudnnConvolutionBwdDataAlgo_t, size_t *))                                              \
    X(cudnnStatus_t, cudnnConvolutionBackwardData,                                            \
      (cudnnHandle_t, const void *, const cudnnFilterDescriptor_t, const void *,              \
       const cudnnTensorDescriptor_t, const void *, const cudnnConvolutionDescriptor_t,       \
       cudnnConvolutionBwdDataAlgo_t, void *, size_t, const void *,                           \
       const cudnnTensorDescriptor_t, void *))

static struct {
    bool ok;
    char info[512];
#define KP__DNN_FIELD(ret, name, args) ret(*name) args;
    KP__DNN_FUNCS(KP__DNN_FIELD)
#undef KP__DNN_FIELD
} kp__dnn;

static pthread_once_t kp__dnn_once = PTHREAD_ONCE_INIT;

/* Opens libcudnn.so.9 from `dir`, its parts first. */
static void *kp__dnn_open_dir(const char *dir) {
    static const char *const parts[] = {"libcudnn_graph.so.9", "libcudnn_ops.so.9",
                                        "libcudnn_cnn.so.9"};
    char path[4096];
    snprintf(path, sizeof path, "%s/libcudnn.so.9", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, parts[i]);
        (void)dlopen(path, RTLD_NOW | RTLD_GLOBAL); /* a missing part shows below */
    }
    snprintf(path, sizeof path, "%s/libcudnn.so.9", dir);
    return dlopen(path, RTLD_NOW | RTLD_GLOBAL);
}

/* The first folder matching a glob pattern that holds a loadable cuDNN. */
static void *kp__dnn_open_glob(const char *pattern) {
    glob_t gl;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &gl) != 0) return NULL;
    for (size_t i = 0; i < gl.gl_pathc && !h; i++) h = kp__dnn_open_dir(gl.gl_pathv[i]);
    globfree(&gl);
    return h;
}

static void *kp__dnn_open_env(void) {
    char buf[4096];
    const char *v = getenv("KP_CUDNN_LIBRARY_DIR");
    void *h = v && *v ? kp__dnn_open_dir(v) : NULL;
    if (!h && (v = getenv("VIRTUAL_ENV")) && *v) {
        snprintf(buf, sizeof buf, "%s/lib/python3.*/site-packages/nvidia/cudnn/lib", v);
        h = kp__dnn_open_glob(buf);
    }
    if (!h && (v = getenv("PYTHONPATH")) && *v) {
        while (!h && *v) {
            size_t len = strcspn(v, ":");
            if (len > 0 && len < sizeof buf - 32) {
                snprintf(buf, sizeof buf, "%.*s/nvidia/cudnn/lib", (int)len, v);
                h = kp__dnn_open_dir(buf);
            }
            v += len + (v[len] == ':');
        }
    }
    if (!h) h = kp__dnn_open_glob("/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib");
    if (!h) h = kp__dnn_open_glob("/usr/local/lib/python3*/site-packages/nvidia/cudnn/lib");
    if (!h) h = kp__dnn_open_glob("/usr/lib/python3/dist-packages/nvidia/cudnn/lib");
    if (!h && (v = getenv("HOME")) && *v) {
        snprintf(buf, sizeof buf, "%s/.local/lib/python3.*/site-packages/nvidia/cudnn/lib", v);
        h = kp__dnn_open_glob(buf);
    }
    return h;
}

static void kp__dnn_load(void) {
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!h) h = kp__dnn_open_env();
    if (!h) {
        snprintf(kp__dnn.info, sizeof kp__dnn.info,
                 "cuDNN: libcudnn.so.9 not found (set KP_CUDNN_LIBRARY_DIR)");
        kp__log(KP_LOG_INFO, "%s; convolutions use cuBLAS", kp__dnn.info);
        return;
    }
    void *sym;
#define KP__DNN_RESOLVE(ret, name, args)                                                     \
    if (!(sym = dlsym(h, #name))) {                                                          \
        snprintf(kp__dnn.info, sizeof kp__dnn.info, "cuDNN: the library lacks %s", #name);  \
        kp__log(KP_LOG_INFO, "%s; convolutions use cuBLAS", kp__dnn.info);                   \
        return;                                                                              \
    }                                                                                        \
    memcpy(&kp__dnn.name, &sym, sizeof sym);
    KP__DNN_FUNCS(KP__DNN_RESOLVE)
#undef KP__DNN_RESOLVE
    size_t v = kp__dnn.cudnnGetVersion();
    char ver[32];
    Dl_info where;
    const char *path = "?";
    if (dladdr(sym, &where) && where.dli_fname) path = where.dli_fname;
    snprintf(ver, sizeof ver, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    snprintf(kp__dnn.info, sizeof kp__dnn.info, "cuDNN %s (%s)", ver, path);
    (void)kp_library_register("cuDNN", ver);
    kp__dnn.ok = true;
}

bool kp__ox_cudnn_available(void) {
    pthread_once(&kp__dnn_once, kp__dnn_load);
    return kp__dnn.ok;
}

const char *kp__ox_cudnn_info(void) {
    pthread_once(&kp__dnn_once, kp__dnn_load);
    return kp__dnn.info;
}

size_t kp__ox_cudnn_version(void) {
    return kp__ox_cudnn_available() ? kp__dnn.cudnnGetVersion() : 0;
}

static kp_status kp__dnn_fail(cudnnStatus_t s, const char *call) {
    return kp__error(KP_ERR_DEVICE, "%s failed: %s", call, kp__dnn.cudnnGetErrorString(s));
}

#define KP__DNN_CHECK(call)                                                  \
    do {                                                                     \
        cudnnStatus_t kp__s = kp__dnn.call;                                  \
        if (kp__s != CUDNN_STATUS_SUCCESS) return kp__dnn_fail(kp__s, #call); \
    } while (0)

kp_status kp__ox_dnn_create(kp_device_t dev, void **out) {
    cudnnHandle_t h;
    *out = NULL;
    if (!kp__ox_cudnn_available()) return kp__error(KP_ERR_UNSUPPORTED, "%s", kp__dnn.info);
    KP_CHECK(kp_device_bind_thread(dev));
    KP__DNN_CHECK(cudnnCreate(&h));
    *out = h;
    return KP_OK;
}

void kp__ox_dnn_destroy(void *h) {
    if (h) (void)kp__dnn.cudnnDestroy(h);
}

kp_status kp__ox_dnn_set_stream(void *h, void *stream) {
    KP__DNN_CHECK(cudnnSetStream(h, stream));
    return KP_OK;
}

/* --- convolutions ---------------------------------------------------------------------- */

struct kp__ox_dnn_conv {
    bool transposed;
    cudnnTensorDescriptor_t x, y; /* transposed: x is dy (its input), y is dx (its output) */
    cudnnTensorDescriptor_t bias; /* fused plans: [1, C, 1, 1(, 1)] */
    cudnnActivationDescriptor_t relu;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd;
    cudnnMathType_t math;
    bool tuned;                   /* chosen by measuring ("tune") */
    bool cached;                  /* taken from the algorithm cache */
    /* KP_CUDNN_REFUSE_FUSED was set when the plan was made: the fused call
     * answers as cuDNN does when it refuses, so tests reach the unfused
     * path on any cuDNN (read here, at setup, not per tick) */
    bool refuse_fused;
    bool half;                    /* fp16 NHWC tensors, fp32 accumulation */
    size_t ws;
};

void kp__ox_dnn_conv_describe(const kp__ox_dnn_conv *p, char *buf, size_t len) {
    static const char *const fwd[] = {"implicit GEMM", "implicit precomputed GEMM", "GEMM",
                                      "direct", "FFT", "FFT tiling", "Winograd",
                                      "Winograd non-fused"};
    int a = p->transposed ? (int)p->bwd : (int)p->fwd;
    const char *name = !p->transposed && a >= 0 && a < (int)(sizeof fwd / sizeof fwd[0])
                           ? fwd[a]
                           : "backward-data";
    snprintf(buf, len, "cuDNN %s (algorithm %d%s%s)%s%s, workspace %zu KiB", name, a,
             p->tuned ? ", measured" : "", p->cached ? ", from the cache" : "",
             p->math != CUDNN_TENSOR_OP_MATH ? ""
             : p->half                      ? ", fp16 tensor cores"
                                            : ", TF32 tensor cores",
             p->relu ? ", epilogue in the same call" : "", p->ws >> 10);
}

void kp__ox_dnn_conv_free(kp__ox_dnn_conv *p) {
    if (!p) return;
    if (p->x) (void)kp__dnn.cudnnDestroyTensorDescriptor(p->x);
    if (p->y) (void)kp__dnn.cudnnDestroyTensorDescriptor(p->y);
    if (p->bias) (void)kp__dnn.cudnnDestroyTensorDescriptor(p->bias);
    if (p->relu) (void)kp__dnn.cudnnDestroyActivationDescriptor(p->relu);
    if (p->w) (void)kp__dnn.cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) (void)kp__dnn.cudnnDestroyConvolutionDescriptor(p->conv);
    kp__free(p);
}

/* A packed NCDHW tensor descriptor; a 1-D convolution is a 2-D one of
 * height one, as cuDNN wants four dimensions at least. `half`: an f16
 * NHWC one (dims still in N, C, H, W order; four of them). */
static cudnnStatus_t kp__dnn_tensor(cudnnTensorDescriptor_t d, int nd, const int *dims, bool half) {
    int strides[5];
    if (half) {
        if (nd != 4) return CUDNN_STATUS_NOT_SUPPORTED;
        int st[4] = {dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
        return kp__dnn.cudnnSetTensorNdDescriptor(d, CUDNN_DATA_HALF, nd, dims, st);
    }
    strides[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
    return kp__dnn.cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, nd, dims, strides);
}

/* Dimension arrays of a shape as cuDNN sees it: nd = 4 or 5. */
static int kp__dnn_dims(const kp__ox_conv_shape *s, int *xd, int *yd, int *wd, int *pad,
                        int *stride, int *dil) {
    int nsp = s->nsp < 2 ? 2 : s->nsp, lead = nsp - s->nsp;
    /* The forward convolution maps xd to yd; a transposed one runs it backwards. */
    xd[0] = yd[0] = (int)s->batch;
    xd[1] = (int)(s->transposed ? s->cout : s->cin);
    yd[1] = (int)(s->transposed ? s->cin : s->cout);
    wd[0] = yd[1];
    wd[1] = (int)(xd[1] / s->group);
    for (int i = 0; i < nsp; i++) {
        int j = i - lead;
        xd[2 + i] = j < 0 ? 1 : (int)s->in[j];
        yd[2 + i] = j < 0 ? 1 : (int)s->out[j];
        wd[2 + i] = j < 0 ? 1 : (int)s->k[j];
        pad[i] = j < 0 ? 0 : (int)s->pad[j];
        stride[i] = j < 0 ? 1 : (int)s->stride[j];
        dil[i] = j < 0 ? 1 : (int)s->dil[j];
    }
    return nsp + 2;
}

static kp_status kp__dnn_describe(kp__ox_dnn_conv *p, const kp__ox_conv_shape *s) {
    int xd[5], yd[5], wd[5], pad[3], stride[3], dil[3], got[5];
    int nd = kp__dnn_dims(s, xd, yd, wd, pad, stride, dil);
    KP__DNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    KP__DNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    KP__DNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    KP__DNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    /* In the transposed case x describes the forward conv's output (dy). */
    if (s->half && (s->transposed || nd != 4)) return KP_ERR_UNSUPPORTED;
    KP__DNN_CHECK(cudnnSetFilterNdDescriptor(p->w, s->half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT,
                                             s->half ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, nd,
                                             wd));
    /* fp16 tensors accumulate in fp32 (the convolution's compute type) */
    KP__DNN_CHECK(cudnnSetConvolutionNdDescriptor(p->conv, nd - 2, pad, stride, dil,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    KP__DNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, (int)s->group));
    KP__DNN_CHECK(cudnnSetConvolutionMathType(p->conv, s->tf32 || s->half ? CUDNN_TENSOR_OP_MATH
                                                                          : CUDNN_FMA_MATH));
    cudnnTensorDescriptor_t fwd_in = s->transposed ? p->y : p->x;
    cudnnTensorDescriptor_t fwd_out = s->transposed ? p->x : p->y;
    if (kp__dnn_tensor(fwd_in, nd, xd, s->half) != CUDNN_STATUS_SUCCESS ||
        kp__dnn_tensor(fwd_out, nd, yd, s->half) != CUDNN_STATUS_SUCCESS ||
        kp__dnn.cudnnGetConvolutionNdForwardOutputDim(p->conv, fwd_in, p->w, nd, got) !=
            CUDNN_STATUS_SUCCESS)
        return KP_ERR_UNSUPPORTED;
    for (int i = 0; i < nd; i++)
        if (got[i] != yd[i]) return KP_ERR_UNSUPPORTED;
    if (s->fused && !s->transposed) {
        int bd[5] = {1, yd[1], 1, 1, 1};
        KP__DNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
        KP__DNN_CHECK(cudnnCreateActivationDescriptor(&p->relu));
        KP__DNN_CHECK(cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU,
                                                   CUDNN_PROPAGATE_NAN, 0.0));
        if (kp__dnn_tensor(p->bias, nd, bd, s->half) != CUDNN_STATUS_SUCCESS)
            return KP_ERR_UNSUPPORTED;
    }
    return KP_OK;
}

/* Whether an algorithm's math type is allowed: FMA (or the default, which
 * is FMA under an FMA descriptor) in fp32; any with tf32. */
static bool kp__dnn_math_ok(cudnnMathType_t m, bool tf32) {
    return tf32 || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

/* Measured ranking ("tune"): cuDNN runs every algorithm once, on memory
 * of its own, on the legacy default stream -- prepare runs outside any
 * capture -- and the tick's stream is given back after. */
static cudnnStatus_t kp__dnn_find(cudnnHandle_t h, kp__ox_dnn_conv *p, int *n, void *r) {
    cudaStream_t was = NULL;
    cudnnStatus_t s = kp__dnn.cudnnGetStream(h, &was);
    if (s == CUDNN_STATUS_SUCCESS) s = kp__dnn.cudnnSetStream(h, NULL);
    if (s == CUDNN_STATUS_SUCCESS && !p->transposed)
        s = kp__dnn.cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, n, r);
    else if (s == CUDNN_STATUS_SUCCESS)
        s = kp__dnn.cudnnFindConvolutionBackwardDataAlgorithm(
            h, p->w, p->x, p->conv, p->y, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, n, r);
    cudnnStatus_t back = kp__dnn.cudnnSetStream(h, was);
    return s != CUDNN_STATUS_SUCCESS ? s : back;
}

/* The first algorithm the heuristics rank (or, with tune, the fastest
 * measured) whose math is allowed, within the workspace cap; the
 * descriptor then takes that algorithm's math. */
static kp_status kp__dnn_pick(void *dnn, kp__ox_dnn_conv *p, bool tf32, bool tune) {
    cudnnHandle_t h = dnn;
    int n = 0;
    p->tuned = tune;
    if (!p->transposed) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        cudnnStatus_t s = tune ? kp__dnn_find(h, p, &n, r)
                               : kp__dnn.cudnnGetConvolutionForwardAlgorithm_v7(
                                     h, p->x, p->w, p->conv, p->y,
                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r);
        if (s != CUDNN_STATUS_SUCCESS) return KP_ERR_UNSUPPORTED;
        for (int i = 0; i < n; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= KP__OX_COLS_MAX &&
                kp__dnn_math_ok(r[i].mathType, tf32)) {
                p->fwd = r[i].algo;
                p->ws = r[i].memory;
                p->math = tf32 ? r[i].mathType : CUDNN_FMA_MATH;
                KP__DNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math));
                return KP_OK;
            }
        return KP_ERR_UNSUPPORTED;
    }
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnStatus_t s = tune ? kp__dnn_find(h, p, &n, r)
                           : kp__dnn.cudnnGetConvolutionBackwardDataAlgorithm_v7(
                                 h, p->w, p->x, p->conv, p->y,
                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r);
    if (s != CUDNN_STATUS_SUCCESS) return KP_ERR_UNSUPPORTED;
    for (int i = 0; i < n; i++)
        if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].memory <= KP__OX_COLS_MAX &&
            kp__dnn_math_ok(r[i].mathType, tf32)) {
            p->bwd = r[i].algo;
            p->ws = r[i].memory;
            p->math = tf32 ? r[i].mathType : CUDNN_FMA_MATH;
            KP__DNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math));
            return KP_OK;
        }
    return KP_ERR_UNSUPPORTED;
}

/* The algorithm cache's key of a shape: everything the choice depends on
 * besides the model and the device. */
static void kp__dnn_key(const kp__ox_conv_shape *s, char *buf, size_t len) {
    int xd[5], yd[5], wd[5], pad[3], stride[3], dil[3];
    int nd = kp__dnn_dims(s, xd, yd, wd, pad, stride, dil);
    size_t k = 0;
    int w = snprintf(buf, len, "%s %s %s %s n%d c%d k%d g%lld", s->transposed ? "bwd" : "fwd",
                     s->half ? "half" : s->tf32 ? "tf32" : "fp32", s->fused ? "fused" : "plain",
                     s->tune ? "tune" : "heur", xd[0], xd[1], yd[1], (long long)s->group);
    const int *v[6] = {xd + 2, yd + 2, wd + 2, stride, pad, dil};
    static const char tag[6] = {'i', 'o', 'r', 's', 'p', 'd'};
    for (int f = 0; f < 6 && w > 0 && (k += (size_t)w) < len; f++) {
        w = snprintf(buf + k, len - k, " %c", tag[f]);
        for (int i = 0; i < nd - 2 && w > 0 && (k += (size_t)w) < len; i++)
            w = snprintf(buf + k, len - k, "%s%d", i ? "x" : "", v[f][i]);
    }
}

/* An algorithm from the cache, where cuDNN still takes it for this shape
 * within the workspace cap. */
static bool kp__dnn_use(void *dnn, kp__ox_dnn_conv *p, const kp__ox_algo *a, bool tf32) {
    size_t ws = 0;
    cudnnMathType_t math = (cudnnMathType_t)a->math;
    if (!kp__dnn_math_ok(math, tf32) || a->algo < 0 ||
        a->algo >= (p->transposed ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                  : CUDNN_CONVOLUTION_FWD_ALGO_COUNT) ||
        kp__dnn.cudnnSetConvolutionMathType(p->conv, math) != CUDNN_STATUS_SUCCESS)
        return false;
    cudnnStatus_t st =
        p->transposed
            ? kp__dnn.cudnnGetConvolutionBackwardDataWorkspaceSize(
                  dnn, p->w, p->x, p->conv, p->y, (cudnnConvolutionBwdDataAlgo_t)a->algo, &ws)
            : kp__dnn.cudnnGetConvolutionForwardWorkspaceSize(
                  dnn, p->x, p->w, p->conv, p->y, (cudnnConvolutionFwdAlgo_t)a->algo, &ws);
    if (st != CUDNN_STATUS_SUCCESS || ws > KP__OX_COLS_MAX) {
        /* back to the describe's math for the choice made afresh */
        (void)kp__dnn.cudnnSetConvolutionMathType(p->conv, tf32 ? CUDNN_TENSOR_OP_MATH
                                                                : CUDNN_FMA_MATH);
        return false;
    }
    p->fwd = (cudnnConvolutionFwdAlgo_t)a->algo;
    p->bwd = (cudnnConvolutionBwdDataAlgo_t)a->algo;
    p->ws = ws;
    p->math = math;
    p->cached = true;
    return true;
}

kp_status kp__ox_dnn_conv_plan(void *dnn, const kp__ox_conv_shape *s, kp__ox_algo_cache *algos,
                               kp__ox_dnn_conv **out, size_t *workspace) {
    *out = NULL;
    if (!dnn || s->batch < 1 || s->cin < 1 || s->cout < 1 || s->nsp > 3)
        return KP_ERR_UNSUPPORTED;
    kp__ox_dnn_conv *p = kp__calloc(1, sizeof *p);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "cuDNN convolution: no memory");
    p->transposed = s->transposed;
    p->refuse_fused = getenv("KP_CUDNN_REFUSE_FUSED") != NULL;
    kp_status st = kp__dnn_describe(p, s);
    p->half = s->half;
    char key[KP__OX_ALGO_KEY];
    kp__ox_algo a;
    kp__dnn_key(s, key, sizeof key);
    bool tf32 = s->tf32 || s->half;
    if (st == KP_OK && kp__ox_algo_cache_get(algos, key, &a) && kp__dnn_use(dnn, p, &a, tf32)) {
        p->tuned = s->tune;
    } else if (st == KP_OK && (st = kp__dnn_pick(dnn, p, tf32, s->tune)) == KP_OK) {
        a = (kp__ox_algo){.algo = p->transposed ? (int)p->bwd : (int)p->fwd, .math = (int)p->math,
                          .ws = p->ws};
        st = kp__ox_algo_cache_put(algos, key, &a);
    }
    if (st != KP_OK) {
        kp__ox_dnn_conv_free(p);
        /* A shape cuDNN declines goes the cuBLAS way; so does a descriptor
         * it refuses, whatever status it gave. */
        return st == KP_ERR_OUT_OF_MEMORY || st == KP_ERR_INTERNAL ? st : KP_ERR_UNSUPPORTED;
    }
    *workspace = p->ws;
    *out = p;
    return KP_OK;
}

kp_status kp__ox_dnn_conv_run(const kp__ox_exec *x, void *dnn, const kp__ox_dnn_conv *p,
                              const void *in, const void *w, void *y) {
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = dnn;
    if (p->ws > x->workspace_bytes)
        return kp__error(KP_ERR_INVALID_ARG, "cuDNN convolution: workspace of %zu bytes, %zu needed",
                         x->workspace_bytes, p->ws);
    if (!p->transposed)
        KP__DNN_CHECK(cudnnConvolutionForward(h, &one, p->x, in, p->w, w, p->conv, p->fwd,
                                              x->workspace, p->ws, &zero, p->y, y));
    else
        KP__DNN_CHECK(cudnnConvolutionBackwardData(h, &one, p->w, w, p->x, in, p->conv, p->bwd,
                                                   x->workspace, p->ws, &zero, p->y, y));
    return KP_OK;
}

/* cuDNN reads z only where alpha2 is not zero; without a residual it is
 * given y, which has the right descriptor. */
kp_status kp__ox_dnn_conv_run_fused(const kp__ox_exec *x, void *dnn, const kp__ox_dnn_conv *p,
                                    const void *in, const void *w, const void *bias,
                                    const void *z, void *y) {
    const float one = 1.0f, zero = 0.0f;
    if (!p->relu || p->transposed)
        return kp__error(KP_ERR_INTERNAL, "cuDNN convolution: not planned for the fused call");
    if (p->ws > x->workspace_bytes)
        return kp__error(KP_ERR_INVALID_ARG, "cuDNN convolution: workspace of %zu bytes, %zu needed",
                         x->workspace_bytes, p->ws);
    cudnnStatus_t st =
        p->refuse_fused ? CUDNN_STATUS_NOT_SUPPORTED
               : kp__dnn.cudnnConvolutionBiasActivationForward(
                     dnn, &one, p->x, in, p->w, w, p->conv, p->fwd, x->workspace, p->ws,
                     z ? &one : &zero, p->y, z ? (const void *)z : (const void *)y, p->bias, bias,
                     p->relu, p->y, y);
    if (st >= CUDNN_STATUS_NOT_SUPPORTED && st < CUDNN_STATUS_NOT_SUPPORTED + 1000)
        return kp__error(KP_ERR_UNSUPPORTED, "cudnnConvolutionBiasActivationForward: %s",
                         kp__dnn.cudnnGetErrorString(st));
    if (st != CUDNN_STATUS_SUCCESS)
        return kp__dnn_fail(st, "cudnnConvolutionBiasActivationForward");
    return KP_OK;
}

const char *kp_onnx_conv_library(void) { return kp__ox_cudnn_info(); }
