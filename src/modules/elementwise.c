/* The elementwise built-ins: add and mul (inputs "a", "b"), scale
 * ("factor"), clamp ("lo", "hi") and cast ("from", "to"), over "size"
 * elements ("N" or {"max": N}) of "dtype" f32, f16, i32 or u8 (default
 * f32). They declare their work (kp_elementwise) and have no kernel of
 * their own: the pipeline runs them, fused with their elementwise
 * neighbours or alone.
 *
 * Arithmetic: f32 and f16 compute in float (f16 rounded to nearest even
 * when stored); i32 and u8 compute in int, wrapping (u8 stores modulo
 * 256). cast converts float to integer by truncating toward zero and
 * saturating to the target's range, NaN giving 0; integer to u8
 * saturates; integer to float rounds to nearest even. The host functions
 * below compute exactly what the CUDA bodies do. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/half-impl.h"
#include "modules-impl.h"

/* The parameter block both forms read. */
typedef struct kp__ew_block {
    float f[2];   /* factor, or lo and hi, for float dtypes */
    int32_t i[2]; /* the same for integer dtypes */
    int32_t dt;   /* the input's dtype */
    int32_t to;   /* the output's dtype */
} kp__ew_block;

typedef struct kp__ew {
    kp_elementwise ew;
    kp__ew_block p;
    char body[192];
} kp__ew;

static bool kp__is_float(int32_t dt) { return dt == KP_F32 || dt == KP_F16; }

static inline float kp__ldf(const void *a, int32_t dt, size_t i) {
    return dt == KP_F32 ? ((const float *)a)[i] : kp__f16_to_f32(((const uint16_t *)a)[i]);
}
static inline int32_t kp__ldi(const void *a, int32_t dt, size_t i) {
    return dt == KP_I32 ? ((const int32_t *)a)[i] : (int32_t)((const uint8_t *)a)[i];
}
static inline void kp__stf(void *o, int32_t dt, size_t i, float v) {
    if (dt == KP_F32)
        ((float *)o)[i] = v;
    else
        ((uint16_t *)o)[i] = kp__f32_to_f16(v);
}
static inline void kp__sti(void *o, int32_t dt, size_t i, int32_t v) {
    if (dt == KP_I32)
        ((int32_t *)o)[i] = v;
    else
        ((uint8_t *)o)[i] = (uint8_t)(uint32_t)v;
}
static inline int32_t kp__wrap(uint32_t v) { return (int32_t)v; }

static void kp__add_host(const void *pp, const void *const *in, void *out, size_t n) {
    const kp__ew_block *p = pp;
    for (size_t i = 0; i < n; i++)
        if (kp__is_float(p->dt))
            kp__stf(out, p->dt, i, kp__ldf(in[0], p->dt, i) + kp__ldf(in[1], p->dt, i));
        else
            kp__sti(
                out, p->dt, i,
                kp__wrap((uint32_t)kp__ldi(in[0], p->dt, i) + (uint32_t)kp__ldi(in[1], p->dt, i)));
}

static void kp__mul_host(const void *pp, const void *const *in, void *out, size_t n) {
    const kp__ew_block *p = pp;
    for (size_t i = 0; i < n; i++)
        if (kp__is_float(p->dt))
            kp__stf(out, p->dt, i, kp__ldf(in[0], p->dt, i) * kp__ldf(in[1], p->dt, i));
        else
            kp__sti(
                out, p->dt, i,
                kp__wrap((uint32_t)kp__ldi(in[0], p->dt, i) * (uint32_t)kp__ldi(in[1], p->dt, i)));
}

static void kp__scale_host(const void *pp, const void *const *in, void *out, size_t n) {
    const kp__ew_block *p = pp;
    for (size_t i = 0; i < n; i++)
        if (kp__is_float(p->dt))
            kp__stf(out, p->dt, i, kp__ldf(in[0], p->dt, i) * p->f[0]);
        else
            kp__sti(out, p->dt, i,
                    kp__wrap((uint32_t)kp__ldi(in[0], p->dt, i) * (uint32_t)p->i[0]));
}

static void kp__clamp_host(const void *pp, const void *const *in, void *out, size_t n) {
    const kp__ew_block *p = pp;
    for (size_t i = 0; i < n; i++)
        if (kp__is_float(p->dt)) {
            kp__stf(out, p->dt, i, fminf(fmaxf(kp__ldf(in[0], p->dt, i), p->f[0]), p->f[1]));
        } else {
            int32_t x = kp__ldi(in[0], p->dt, i);
            kp__sti(out, p->dt, i, x < p->i[0] ? p->i[0] : x > p->i[1] ? p->i[1] : x);
        }
}

/* float -> i32 as cvt.rzi.s32.f32: truncate, saturate, NaN -> 0. */
static int32_t kp__f2i(float x) {
    if (x != x) return 0;
    if (x >= 2147483648.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return (int32_t)x;
}

static void kp__cast_host(const void *pp, const void *const *in, void *out, size_t n) {
    const kp__ew_block *p = pp;
    for (size_t i = 0; i < n; i++) {
        if (kp__is_float(p->dt)) {
            float x = kp__ldf(in[0], p->dt, i);
            if (kp__is_float(p->to))
                kp__stf(out, p->to, i, x);
            else if (p->to == KP_I32)
                kp__sti(out, p->to, i, kp__f2i(x));
            else
                kp__sti(out, p->to, i, (int32_t)fminf(fmaxf(x, 0.0f), 255.0f));
        } else {
            int32_t x = kp__ldi(in[0], p->dt, i);
            if (kp__is_float(p->to))
                kp__stf(out, p->to, i, (float)x);
            else
                kp__sti(out, p->to, i, p->to == KP_I32 ? x : x < 0 ? 0 : x > 255 ? 255 : x);
        }
    }
}

static void kp__ew_destroy(void *self) { kp__free(self); }
static const kp_module_i kp__ew_iface = {.destroy = kp__ew_destroy};

/* "dtype" (or `key`): one of the dtypes elementwise code takes. */
static kp_status kp__ew_dtype(const kp_module_env *env, const char *key, const char *def,
                              kp_dtype *out) {
    const char *text;
    KP_CHECK(kp_param_str(env, key, def, &text));
    if (!text)
        return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\" is required (f32, f16, i32 or u8)",
                         key);
    kp_status st = kp_dtype_parse(text, out);
    if (st == KP_OK && *out != KP_F32 && *out != KP_F16 && *out != KP_I32 && *out != KP_U8)
        st = KP_ERR_INVALID_ARG;
    if (st != KP_OK)
        return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\": \"%s\" is not f32, f16, i32 or u8",
                         key, text);
    return KP_OK;
}

/* A number parameter: any finite value for float dtypes; an integer of
 * int32's range for integer ones. */
static kp_status kp__ew_number(const kp_module_env *env, const char *key, kp_dtype dt, bool def_ok,
                               double def, kp__ew_block *b, int slot) {
    if (kp__is_float(dt)) {
        double v;
        KP_CHECK(kp_param_double(env, key, def_ok, def, &v));
        if (fabs(v) > 3.4028234663852886e38)
            return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\": %g is outside f32's range", key,
                             v);
        b->f[slot] = (float)v;
        return KP_OK;
    }
    int64_t v;
    KP_CHECK(kp_param_int(env, key, def_ok, (int64_t)def, &v));
    if (v < INT32_MIN || v > INT32_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "parameter \"%s\": %lld is outside i32's range", key,
                         (long long)v);
    b->i[slot] = (int32_t)v;
    return KP_OK;
}

typedef enum { KP__ADD, KP__MUL, KP__SCALE, KP__CLAMP, KP__CAST } kp__ew_op;

static kp_status kp__ew_params(const kp_module_env *env, kp__ew_op op, kp__ew *m) {
    kp_dtype dt, to;
    KP_CHECK(kp__ew_dtype(env, op == KP__CAST ? "from" : "dtype", "f32", &dt));
    to = dt;
    if (op == KP__CAST) KP_CHECK(kp__ew_dtype(env, "to", NULL, &to));
    m->p.dt = (int32_t)dt;
    m->p.to = (int32_t)to;
    bool fl = kp__is_float(dt);
    kp_elementwise *ew = &m->ew;
    ew->params = &m->p;
    ew->params_bytes = sizeof m->p;
    kp_dtype pdt = fl ? KP_F32 : KP_I32;
    size_t off0 = fl ? offsetof(kp__ew_block, f) : offsetof(kp__ew_block, i);
    switch (op) {
    case KP__ADD:
    case KP__MUL:
        ew->host = op == KP__ADD ? kp__add_host : kp__mul_host;
        snprintf(m->body, sizeof m->body,
                 fl ? "output = a %s b;" : "output = (int)((unsigned)a %s (unsigned)b);",
                 op == KP__ADD ? "+" : "*");
        break;
    case KP__SCALE:
        KP_CHECK(kp__ew_number(env, "factor", dt, false, 0, &m->p, 0));
        ew->host = kp__scale_host;
        ew->n_params = 1;
        ew->param[0] = (kp_elementwise_param){"factor", pdt, off0};
        snprintf(m->body, sizeof m->body, "%s",
                 fl ? "output = input * factor;"
                    : "output = (int)((unsigned)input * (unsigned)factor);");
        break;
    case KP__CLAMP:
        KP_CHECK(kp__ew_number(env, "lo", dt, false, 0, &m->p, 0));
        KP_CHECK(kp__ew_number(env, "hi", dt, false, 0, &m->p, 1));
        if (fl ? m->p.f[0] > m->p.f[1] : m->p.i[0] > m->p.i[1])
            return kp__error(KP_ERR_INVALID_ARG, "clamp: lo is above hi");
        ew->host = kp__clamp_host;
        ew->n_params = 2;
        ew->param[0] = (kp_elementwise_param){"lo", pdt, off0};
        ew->param[1] = (kp_elementwise_param){"hi", pdt, off0 + 4};
        snprintf(m->body, sizeof m->body, "%s",
                 fl ? "output = fminf(fmaxf(input, lo), hi);"
                    : "output = input < lo ? lo : input > hi ? hi : input;");
        break;
    case KP__CAST: {
        bool tf = kp__is_float(to);
        ew->host = kp__cast_host;
        snprintf(m->body, sizeof m->body, "%s",
                 fl && tf             ? "output = input;"
                 : fl && to == KP_I32 ? "output = __float2int_rz(input);"
                 : fl                 ? "output = (int)fminf(fmaxf(input, 0.0f), 255.0f);"
                 : tf                 ? "output = (float)input;"
                 : to == KP_I32       ? "output = input;"
                                      : "output = input < 0 ? 0 : input > 255 ? 255 : input;");
        break;
    }
    }
    ew->cuda = m->body;
    return KP_OK;
}

static kp_status kp__ew_create(const kp_module_env *env, kp_module_def *def, kp__ew_op op) {
    int64_t n;
    bool dynamic;
    KP_CHECK(kp__param_size(env, &n, &dynamic));
    kp__ew *m = kp__calloc(1, sizeof *m);
    if (!m) return kp__error(KP_ERR_OUT_OF_MEMORY, "elementwise module: no memory");
    kp_status st = kp__ew_params(env, op, m);
    bool binary = op == KP__ADD || op == KP__MUL;
    def->n_inputs = binary ? 2 : 1;
    def->n_outputs = 1;
    for (size_t k = 0; k < def->n_inputs && st == KP_OK; k++)
        st = kp_port_decl_1d(&def->inputs[k], binary ? (k ? "b" : "a") : "input", (kp_dtype)m->p.dt,
                             n);
    if (st == KP_OK) st = kp_port_decl_1d(&def->outputs[0], "output", (kp_dtype)m->p.to, n);
    if (st != KP_OK) {
        kp__free(m);
        return st;
    }
    for (size_t k = 0; k < def->n_inputs; k++) def->inputs[k].dynamic = dynamic;
    def->outputs[0].dynamic = dynamic;
    def->iface = &kp__ew_iface;
    def->self = m;
    def->elementwise = &m->ew;
    return KP_OK;
}

static kp_status kp__add_create(const kp_module_env *e, kp_module_def *d) {
    return kp__ew_create(e, d, KP__ADD);
}
static kp_status kp__mul_create(const kp_module_env *e, kp_module_def *d) {
    return kp__ew_create(e, d, KP__MUL);
}
static kp_status kp__scale_create(const kp_module_env *e, kp_module_def *d) {
    return kp__ew_create(e, d, KP__SCALE);
}
static kp_status kp__clamp_create(const kp_module_env *e, kp_module_def *d) {
    return kp__ew_create(e, d, KP__CLAMP);
}
static kp_status kp__cast_create(const kp_module_env *e, kp_module_def *d) {
    return kp__ew_create(e, d, KP__CAST);
}

KP__BUILTIN_MODULE(add, kp__add_create, NULL)
KP__BUILTIN_MODULE(mul, kp__mul_create, NULL)
KP__BUILTIN_MODULE(scale, kp__scale_create, NULL)
KP__BUILTIN_MODULE(clamp, kp__clamp_create, NULL)
KP__BUILTIN_MODULE(cast, kp__cast_create, NULL)
