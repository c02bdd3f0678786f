/* kpipe's ONNX engine: what it supports, for listings. Models run as the
 * `onnx` module (a pipeline spec, or `kpipe run MODEL.onnx`);
 * docs/models.md says how.
 *
 *   for (size_t i = 0; kp_onnx_op_name(i); i++) puts(kp_onnx_op_name(i));
 */
#ifndef KPIPE_ONNX_H
#define KPIPE_ONNX_H

#include "kpipe/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The i-th ONNX operator (domain ai.onnx) the engine runs; NULL past the end. */
const char *kp_onnx_op_name(size_t i);
/* Where the engine's convolutions run on cuda: "cuDNN 9.19.0 (/path/libcudnn.so.9)",
 * or why not ("not built with cuDNN", "cuDNN not found: ..."). Loads cuDNN
 * on first use. */
const char *kp_onnx_conv_library(void);

#ifdef __cplusplus
}
#endif
#endif
