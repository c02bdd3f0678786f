#include "onnx-impl.h"

const kp__ox_op kp__ox_ops_nn[] = {{.name = NULL}};
