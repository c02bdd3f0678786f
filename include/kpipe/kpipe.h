/* kpipe: low-latency GPU processing pipelines. Includes every layer. */
#ifndef KPIPE_KPIPE_H
#define KPIPE_KPIPE_H

#include "kpipe/core.h"
#include "kpipe/tensor.h"
#include "kpipe/npy.h"
#include "kpipe/device.h"
#include "kpipe/memory.h"
#include "kpipe/module.h"
#include "kpipe/graph_cache.h"
#include "kpipe/pipeline.h"
#include "kpipe/onnx.h"
#include "kpipe/modules.h"
#include "kpipe/video.h"
#include "kpipe/flow.h"
#include "kpipe/tasks.h"

#endif
