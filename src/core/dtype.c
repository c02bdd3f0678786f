/* Dtype table. */
#include <string.h>
#include <strings.h>

#include "core-impl.h"
#include "kpipe/tensor.h"

size_t kp_dtype_size(kp_dtype dt) {
    switch (dt) {
#define KP__DT_SIZE(name, up, bytes) \
    case KP_##up: return bytes;
        KP_DTYPE_MAP(KP__DT_SIZE)
#undef KP__DT_SIZE
    default: return 0;
    }
}

const char *kp_dtype_name(kp_dtype dt) {
    switch (dt) {
#define KP__DT_NAME(name, up, bytes) \
    case KP_##up: return #name;
        KP_DTYPE_MAP(KP__DT_NAME)
#undef KP__DT_NAME
    default: return "invalid";
    }
}

/* Long spellings users write in specs and NumPy headers. */
static const struct {
    const char *alias;
    kp_dtype dt;
} kp__dtype_aliases[] = {
    {"float32", KP_F32},   {"float", KP_F32}, {"float16", KP_F16}, {"half", KP_F16},
    {"bfloat16", KP_BF16}, {"int32", KP_I32}, {"int16", KP_I16},   {"int8", KP_I8},
    {"uint8", KP_U8},      {"int64", KP_I64}, {"uint64", KP_U64}, {"uint16", KP_U16},
};

kp_status kp_dtype_parse(const char *text, kp_dtype *out) {
    KP_API_ENTRY();
    if (!text || !out) return kp__error(KP_ERR_INVALID_ARG, "kp_dtype_parse: NULL argument");
    for (int i = 0; i < KP_DTYPE_COUNT; i++) {
        if (strcasecmp(text, kp_dtype_name((kp_dtype)i)) == 0) {
            *out = (kp_dtype)i;
            return KP_OK;
        }
    }
    for (size_t i = 0; i < sizeof kp__dtype_aliases / sizeof kp__dtype_aliases[0]; i++) {
        if (strcasecmp(text, kp__dtype_aliases[i].alias) == 0) {
            *out = kp__dtype_aliases[i].dt;
            return KP_OK;
        }
    }
    return kp__error(KP_ERR_PARSE,
                     "unknown dtype \"%s\" (expected one of f32 f16 bf16 i32 i16 i8 u8 i64 u64 u16)",
                     text);
}
