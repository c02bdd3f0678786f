/* Module factories by type name, and parameter helpers for factories. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline-impl.h"

#define KP__MAX_TYPES 64

static struct {
    char type[KP_NAME_MAX];
    kp_module_create_fn create;
} kp__types[KP__MAX_TYPES];
static size_t kp__n_types;
static pthread_mutex_t kp__reg_mu = PTHREAD_MUTEX_INITIALIZER;

/* Registers the built-in modules once, through the same kp_module_register
 * a program uses, before anything reads or adds to the registry. */
static pthread_once_t kp__builtins_once = PTHREAD_ONCE_INIT;
static _Thread_local bool kp__in_builtins; /* their kp_module_register calls */
static void kp__register_builtins(void) {
    kp__in_builtins = true;
    for (size_t i = 0; kp__builtin_modules[i]; i++)
        if (kp__builtin_modules[i]() != KP_OK)
            kp__log(KP_LOG_ERROR, "built-in module: %s", kp_last_error());
    kp__in_builtins = false;
    kp_clear_error();
}
static void kp__builtins(void) {
    if (!kp__in_builtins) pthread_once(&kp__builtins_once, kp__register_builtins);
}

static kp_status kp__register_locked(const char *type, kp_module_create_fn fn) {
    for (size_t i = 0; i < kp__n_types; i++)
        if (strcmp(kp__types[i].type, type) == 0)
            return kp__error(KP_ERR_INVALID_ARG, "module type \"%s\" is already registered", type);
    if (kp__n_types == KP__MAX_TYPES)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "module registry is full (%d types)", KP__MAX_TYPES);
    snprintf(kp__types[kp__n_types].type, KP_NAME_MAX, "%s", type);
    kp__types[kp__n_types++].create = fn;
    return KP_OK;
}

kp_status kp_module_register(const char *type, kp_module_create_fn create) {
    KP_API_ENTRY();
    if (!type || !*type || !create)
        return kp__error(KP_ERR_INVALID_ARG, "kp_module_register: type and create are required");
    if (strlen(type) >= KP_NAME_MAX || strchr(type, '.'))
        return kp__error(KP_ERR_INVALID_ARG, "module type \"%s\": at most %d characters, no '.'",
                         type, KP_NAME_MAX - 1);
    kp__builtins(); /* the built-ins first, whoever comes first */
    pthread_mutex_lock(&kp__reg_mu);
    kp_status st = kp__register_locked(type, create);
    pthread_mutex_unlock(&kp__reg_mu);
    return st;
}

kp_module_create_fn kp__module_lookup(const char *type) {
    kp_module_create_fn fn = NULL;
    kp__builtins();
    pthread_mutex_lock(&kp__reg_mu);
    for (size_t i = 0; i < kp__n_types && !fn; i++)
        if (strcmp(kp__types[i].type, type) == 0) fn = kp__types[i].create;
    pthread_mutex_unlock(&kp__reg_mu);
    return fn;
}

size_t kp_module_type_count(void) {
    kp__builtins();
    pthread_mutex_lock(&kp__reg_mu);
    size_t n = kp__n_types;
    pthread_mutex_unlock(&kp__reg_mu);
    return n;
}

const char *kp_module_type_name(size_t i) {
    return i < kp_module_type_count() ? kp__types[i].type : NULL;
}

void kp__module_type_list(char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < kp_module_type_count() && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", kp__types[i].type);
}

/* --- parameters ------------------------------------------------------------------ */
/* True when `list` (space-separated) holds `word`. */
static bool kp__has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

/* The value of `key`, recording the lookup in env->use. */
static const char *kp__param_find(const kp_module_env *env, const char *key) {
    struct kp_param_use *u = env->use;
    if (u && !kp__has_word(u->asked, key)) {
        size_t used = strlen(u->asked);
        snprintf(u->asked + used, sizeof u->asked - used, "%s%s", used ? " " : "", key);
    }
    for (size_t i = 0; i < env->n_params; i++)
        if (env->params[i].key && strcmp(env->params[i].key, key) == 0) {
            if (u && i < KP__MAX_PARAMS) u->read[i] = true;
            return env->params[i].value;
        }
    return NULL;
}

/* Decimal digits with an optional leading '-', nothing else. */
static bool kp__is_integer_text(const char *v) {
    const char *p = v + (*v == '-');
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') p++;
    return *p == '\0';
}

kp_status kp_param_int(const kp_module_env *env, const char *key, bool def_ok, int64_t def,
                       int64_t *out) {
    KP_API_ENTRY();
    if (!env || !key || !out)
        return kp__error(KP_ERR_INVALID_ARG, "kp_param_int: env, key and out are required");
    const char *v = kp__param_find(env, key);
    if (!v) {
        if (!def_ok) return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\" is required", key);
        *out = def;
        return KP_OK;
    }
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!kp__is_integer_text(v) || errno || *end)
        return kp__error(KP_ERR_INVALID_ARG,
                         "parameter \"%s\" = \"%s\" is not an integer (decimal "
                         "digits, optionally after '-')",
                         key, v);
    *out = x;
    return KP_OK;
}

kp_status kp_param_double(const kp_module_env *env, const char *key, bool def_ok, double def,
                          double *out) {
    KP_API_ENTRY();
    if (!env || !key || !out)
        return kp__error(KP_ERR_INVALID_ARG, "kp_param_double: env, key and out are required");
    const char *v = kp__param_find(env, key);
    if (!v) {
        if (!def_ok) return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\" is required", key);
        *out = def;
        return KP_OK;
    }
    const char *p = v + (*v == '-');
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!((*p >= '0' && *p <= '9') || *p == '.') || *end || errno || !isfinite(x))
        return kp__error(KP_ERR_INVALID_ARG,
                         "parameter \"%s\" = \"%s\" is not a finite decimal "
                         "number",
                         key, v);
    *out = x;
    return KP_OK;
}

kp_status kp_param_str(const kp_module_env *env, const char *key, const char *def,
                       const char **out) {
    KP_API_ENTRY();
    if (!env || !key || !out)
        return kp__error(KP_ERR_INVALID_ARG, "kp_param_str: env, key and out are required");
    const char *v = kp__param_find(env, key);
    *out = v ? v : def;
    return KP_OK;
}

kp_status kp_param_dim(const kp_module_env *env, const char *key, int64_t lo, int64_t hi,
                       int64_t *size, bool *dynamic) {
    KP_API_ENTRY();
    if (!env || !key || !size || !dynamic)
        return kp__error(KP_ERR_INVALID_ARG, "kp_param_dim: env, key, size and dynamic are required");
    const char *v = kp__param_find(env, key);
    if (!v) return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\" is required", key);
    *dynamic = strncmp(v, "max:", 4) == 0;
    const char *num = *dynamic ? v + 4 : v;
    char *end;
    errno = 0;
    long long x = strtoll(num, &end, 10);
    if (!kp__is_integer_text(num) || errno || *end)
        return kp__error(KP_ERR_INVALID_ARG,
                         "parameter \"%s\" = \"%s\" is not a size (N, or max:N for a dynamic "
                         "one; {\"max\": N} in JSON)",
                         key, v);
    if (x < lo || x > hi)
        return kp__error(KP_ERR_INVALID_ARG,
                         "parameter \"%s\" = %s%lld is out of range (%lld .. %lld)", key,
                         *dynamic ? "max " : "", x, (long long)lo, (long long)hi);
    *size = x;
    return KP_OK;
}

kp_status kp_port_decl_1d(kp_port_decl *p, const char *name, kp_dtype dt, int64_t n) {
    KP_API_ENTRY();
    if (!p || !name)
        return kp__error(KP_ERR_INVALID_ARG, "kp_port_decl_1d: port and name are required");
    if (strlen(name) >= KP_NAME_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "port name \"%s\" is too long", name);
    snprintf(p->name, KP_NAME_MAX, "%s", name);
    p->dynamic = 0;
    return kp_desc_init(&p->desc, dt, 1, &n, NULL);
}

const char *kp_pixel_format_name(kp_pixel_format f) {
    switch (f) {
    case KP_PIXEL_NONE: return "none";
    case KP_PIXEL_I420: return "I420";
    case KP_PIXEL_NV12: return "NV12";
    case KP_PIXEL_P016: return "P016";
    }
    return "unknown";
}

int kp_pixel_format_sample_bytes(kp_pixel_format f) { return f == KP_PIXEL_P016 ? 2 : 1; }

void kp_port_from_tensor(kp_port_info *out, const char *name, kp_tensor_t t) {
    if (!out) return;
    if (!t) {
        memset(out, 0, sizeof *out);
        out->name = name;
        return;
    }
    out->name = name;
    out->data = kp_tensor_data(t);
    out->desc = *kp_tensor_get_desc(t);
    out->desc.offset = 0;
}
