/* The CUDA C++ of a fused group: one __device__ function computing every
 * member for one element, in execution order, with each intermediate held
 * in a register in its port's dtype (so an f16 intermediate is rounded as
 * the unfused kernel would store it); and one kernel that runs it over the
 * tick's elements, KP__FUSE_VEC at a time with vector loads and stores
 * when every array is aligned for them, then a scalar tail. The element
 * count comes from the dynamic descriptor and the grid covers the maximum,
 * so a new size needs no new code. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fuse-impl.h"

typedef struct kp__sb {
    char *buf;
    size_t len, cap;
    bool failed;
} kp__sb;

static void kp__sb_add(kp__sb *b, const char *fmt, ...) KP__PRINTF(2, 3);
static void kp__sb_add(kp__sb *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->buf && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
        char *nb = kp__malloc(cap);
        if (!nb || cap > KP_RTC_MAX_SOURCE) {
            kp__free(nb);
            b->failed = true;
            return;
        }
        if (b->buf) memcpy(nb, b->buf, b->len + 1);
        kp__free(b->buf);
        b->buf = nb;
        b->cap = cap;
    }
}

/* Storage, compute and 4-vector types of the dtypes fused code handles. */
static const char *kp__storage(kp_dtype dt) {
    return dt == KP_F16   ? "unsigned short"
           : dt == KP_I32 ? "int"
           : dt == KP_U8  ? "unsigned char"
                          : "float";
}
static const char *kp__compute(kp_dtype dt) {
    return dt == KP_I32 || dt == KP_U8 ? "int" : "float";
}
static const char *kp__vec4(kp_dtype dt) {
    return dt == KP_F16 ? "ushort4" : dt == KP_I32 ? "int4" : dt == KP_U8 ? "uchar4" : "float4";
}
static const char *kp__param_type(kp_dtype dt) {
    return dt == KP_I32   ? "int"
           : dt == KP_I64 ? "long long"
           : dt == KP_U8  ? "unsigned char"
                          : "float";
}

/* A stored value read as its compute type, and a computed one stored. */
static void kp__load(kp__sb *b, kp_dtype dt, const char *expr) {
    kp__sb_add(b, dt == KP_F16 ? "kp_h2f(%s)" : "%s", expr);
}
static void kp__store(kp__sb *b, kp_dtype dt, const char *expr) {
    if (dt == KP_F16)
        kp__sb_add(b, "kp_f2h(%s)", expr);
    else if (dt == KP_U8)
        kp__sb_add(b, "(unsigned char)(%s)", expr);
    else
        kp__sb_add(b, "%s", expr);
}

static void kp__gen_prelude(kp__sb *b, const kp__fused *f) {
    kp__sb_add(b, "// kpipe fused kernel:");
    for (size_t j = 0; j < f->n_members; j++)
        kp__sb_add(b, "%s %s (%s)", j ? " ->" : "", f->mem[j].id, f->mem[j].type);
    kp__sb_add(b, "\nstruct kp_st {\n  void *out[%d];\n  long long max_n;\n};\n", KP_MAX_PORTS);
    kp__sb_add(b, "struct kp_dyn {\n  const void *in[%d];\n  long long n;\n};\n", KP_MAX_PORTS);
    kp__sb_add(b, "struct kp_params {\n  const kp_st *st;\n  const kp_dyn *dyn;\n"
                  "  const void *host;\n};\n");
    kp__sb_add(b, "__device__ __forceinline__ float kp_h2f(unsigned short h) {\n"
                  "  float f;\n  asm(\"cvt.f32.f16 %%0, %%1;\" : \"=f\"(f) : \"h\"(h));\n"
                  "  return f;\n}\n");
    kp__sb_add(b,
               "__device__ __forceinline__ unsigned short kp_f2h(float f) {\n"
               "  unsigned short h;\n  asm(\"cvt.rn.f16.f32 %%0, %%1;\" : \"=h\"(h) : \"f\"(f));\n"
               "  return h;\n}\n");
    kp__sb_add(b, "struct kp_pv {\n");
    for (size_t j = 0; j < f->n_members; j++) {
        const kp_elementwise *ew = f->mem[j].def.elementwise;
        for (size_t q = 0; q < ew->n_params; q++)
            kp__sb_add(b, "  %s m%zu_%s;\n", kp__param_type(ew->param[q].dtype), j,
                       ew->param[q].name);
    }
    kp__sb_add(b, "  int unused;\n};\n");
}

/* kp_elem: the members for one element. */
static void kp__gen_elem(kp__sb *b, const kp__fused *f) {
    kp__sb_add(b, "__device__ __forceinline__ void kp_elem(const kp_pv &kp_pr");
    for (size_t k = 0; k < f->n_in; k++)
        kp__sb_add(b, ", const %s kp_i%zu", kp__storage(f->in_dt[k]), k);
    for (size_t k = 0; k < f->n_out; k++)
        kp__sb_add(b, ", %s &kp_o%zu", kp__storage(f->out_dt[k]), k);
    kp__sb_add(b, ") {\n");
    for (size_t j = 0; j < f->n_members; j++) {
        const kp__fused_member *m = &f->mem[j];
        const kp_elementwise *ew = m->def.elementwise;
        kp_dtype odt = m->def.outputs[0].desc.dtype;
        kp__sb_add(b, "  %s kp_v%zu;\n  { // %s (%s)\n", kp__storage(odt), j, m->id, m->type);
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            kp_dtype dt = m->def.inputs[k].desc.dtype;
            char src[32];
            if (m->src[k] >= 0)
                snprintf(src, sizeof src, "kp_i%d", m->src[k]);
            else
                snprintf(src, sizeof src, "kp_v%d", -1 - m->src[k]);
            kp__sb_add(b, "    const %s %s = ", kp__compute(dt), m->def.inputs[k].name);
            kp__load(b, dt, src);
            kp__sb_add(b, ";\n");
        }
        for (size_t q = 0; q < ew->n_params; q++)
            kp__sb_add(b, "    const %s %s = kp_pr.m%zu_%s;\n", kp__param_type(ew->param[q].dtype),
                       ew->param[q].name, j, ew->param[q].name);
        kp__sb_add(b, "    %s %s;\n    %s\n    kp_v%zu = ", kp__compute(odt),
                   m->def.outputs[0].name, ew->cuda, j);
        kp__store(b, odt, m->def.outputs[0].name);
        kp__sb_add(b, ";\n  }\n");
        if (m->out >= 0) kp__sb_add(b, "  kp_o%d = kp_v%zu;\n", m->out, j);
    }
    kp__sb_add(b, "}\n");
}

/* One call of kp_elem: element `lane` of the vectors, or index kp_j. */
static void kp__gen_call(kp__sb *b, const kp__fused *f, const char *lane) {
    kp__sb_add(b, "kp_elem(kp_pr");
    for (size_t k = 0; k < f->n_in + f->n_out; k++) {
        bool in = k < f->n_in;
        size_t i = in ? k : k - f->n_in;
        if (lane)
            kp__sb_add(b, ", kp_%c%zu.%s", in ? 'a' : 'b', i, lane);
        else
            kp__sb_add(b, ", kp_%s%zu[kp_j]", in ? "in" : "out", i);
    }
    kp__sb_add(b, ");\n");
}

static void kp__gen_kernel(kp__sb *b, const kp__fused *f) {
    kp__sb_add(b, "extern \"C\" __global__ void kp_fused(const kp_params kp_p) {\n"
                  "  const kp_st *kp_s = kp_p.st;\n  const long long kp_n = kp_p.dyn->n;\n");
    for (size_t k = 0; k < f->n_in; k++)
        kp__sb_add(b, "  const %s *kp_in%zu = static_cast<const %s *>(kp_p.dyn->in[%zu]);\n",
                   kp__storage(f->in_dt[k]), k, kp__storage(f->in_dt[k]), k);
    for (size_t k = 0; k < f->n_out; k++)
        kp__sb_add(b, "  %s *kp_out%zu = static_cast<%s *>(kp_s->out[%zu]);\n",
                   kp__storage(f->out_dt[k]), k, kp__storage(f->out_dt[k]), k);
    kp__sb_add(b, "  const unsigned char *kp_pb = reinterpret_cast<const unsigned char *>(kp_s) + "
                  "sizeof(kp_st);\n  kp_pv kp_pr;\n  kp_pr.unused = 0;\n");
    for (size_t j = 0; j < f->n_members; j++) {
        const kp_elementwise *ew = f->mem[j].def.elementwise;
        for (size_t q = 0; q < ew->n_params; q++)
            kp__sb_add(b, "  kp_pr.m%zu_%s = *reinterpret_cast<const %s *>(kp_pb + %zu);\n", j,
                       ew->param[q].name, kp__param_type(ew->param[q].dtype),
                       f->mem[j].param_off + ew->param[q].offset);
    }
    kp__sb_add(b, "  const long long kp_stride = (long long)gridDim.x * blockDim.x;\n"
                  "  const long long kp_t = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
                  "  long long kp_done = 0;\n  if (((0");
    for (size_t k = 0; k < f->n_in; k++)
        kp__sb_add(b, " | (reinterpret_cast<unsigned long long>(kp_in%zu) & %zu)", k,
                   KP__FUSE_VEC * kp_dtype_size(f->in_dt[k]) - 1);
    for (size_t k = 0; k < f->n_out; k++)
        kp__sb_add(b, " | (reinterpret_cast<unsigned long long>(kp_out%zu) & %zu)", k,
                   KP__FUSE_VEC * kp_dtype_size(f->out_dt[k]) - 1);
    kp__sb_add(b, ")) == 0) {\n    const long long kp_n4 = kp_n >> 2;\n"
                  "    for (long long kp_j = kp_t; kp_j < kp_n4; kp_j += kp_stride) {\n");
    for (size_t k = 0; k < f->n_in; k++)
        kp__sb_add(b, "      const %s kp_a%zu = reinterpret_cast<const %s *>(kp_in%zu)[kp_j];\n",
                   kp__vec4(f->in_dt[k]), k, kp__vec4(f->in_dt[k]), k);
    for (size_t k = 0; k < f->n_out; k++)
        kp__sb_add(b, "      %s kp_b%zu;\n", kp__vec4(f->out_dt[k]), k);
    static const char *const lanes[KP__FUSE_VEC] = {"x", "y", "z", "w"};
    for (int l = 0; l < KP__FUSE_VEC; l++) {
        kp__sb_add(b, "      ");
        kp__gen_call(b, f, lanes[l]);
    }
    for (size_t k = 0; k < f->n_out; k++)
        kp__sb_add(b, "      reinterpret_cast<%s *>(kp_out%zu)[kp_j] = kp_b%zu;\n",
                   kp__vec4(f->out_dt[k]), k, k);
    kp__sb_add(b, "    }\n    kp_done = kp_n4 << 2;\n  }\n"
                  "  for (long long kp_j = kp_done + kp_t; kp_j < kp_n; kp_j += kp_stride)\n    ");
    kp__gen_call(b, f, NULL);
    kp__sb_add(b, "}\n");
}

kp_status kp__fuse_source(const kp__fused *f, char **out) {
    kp__sb b = {0};
    kp__gen_prelude(&b, f);
    kp__gen_elem(&b, f);
    kp__gen_kernel(&b, f);
    if (b.failed || !b.buf) {
        kp__free(b.buf);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "fusion: no memory for the generated source");
    }
    *out = b.buf;
    return KP_OK;
}
