/* placeholder */
#include "onnx-impl.h"
