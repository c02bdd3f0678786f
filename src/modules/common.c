/* Helpers shared by the built-in modules. */
#include "modules-impl.h"

kp_status kp__param_size(const kp_module_env *env, int64_t *n) {
    KP_CHECK(kp_param_int(env, "size", false, 0, n));
    if (*n < 1 || *n > KP__MAX_ELEMENTS)
        return kp__error(KP_ERR_INVALID_ARG,
                         "parameter \"size\" = %lld is out of range (1 .. %lld)", (long long)*n,
                         (long long)KP__MAX_ELEMENTS);
    return KP_OK;
}
