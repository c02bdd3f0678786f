/* Helpers shared by the built-in modules. */
#include "modules-impl.h"

kp_status kp__param_size(const kp_module_env *env, int64_t *n, bool *dynamic) {
    return kp_param_dim(env, "size", 1, KP__MAX_ELEMENTS, n, dynamic);
}

kp_status kp__pictures_io(const kp_module_io *io, int64_t in_rows, int64_t out_rows, void *out,
                          const kp_tensor_desc *out_desc, int64_t *frames) {
    const int64_t rows = io->inputs[0].desc.shape[0];
    if (rows % in_rows || rows < in_rows)
        return kp__error(KP_ERR_MISMATCH,
                         "an input of %lld along dimension 0 is not whole pictures of %lld",
                         (long long)rows, (long long)in_rows);
    *frames = rows / in_rows;
    io->outputs[0].data = out;
    io->outputs[0].desc = *out_desc;
    io->outputs[0].desc.shape[0] = *frames * out_rows;
    return KP_OK;
}
