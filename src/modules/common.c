/* Helpers shared by the built-in modules. */
#include "modules-impl.h"

kp_status kp__param_size(const kp_module_env *env, int64_t *n, bool *dynamic) {
    return kp_param_dim(env, "size", 1, KP__MAX_ELEMENTS, n, dynamic);
}
