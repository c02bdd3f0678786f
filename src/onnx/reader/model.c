/* The model as the reader gives it: ONNX's element types against kpipe's,
 * the opset a model imports for a domain, and freeing what the reader
 * made. Both reader files and the graph use these; they call nothing back. */
#include <stdio.h>
#include <string.h>

#include "../onnx-impl.h"

bool kp__ox_dtype(int onnx_type, kp_dtype *out) {
    kp_dtype dt;
    switch (onnx_type) {
    case KP__OX_FLOAT: dt = KP_F32; break;
    case KP__OX_UINT8: dt = KP_U8; break;
    case KP__OX_INT8: dt = KP_I8; break;
    case KP__OX_INT16: dt = KP_I16; break;
    case KP__OX_INT32: dt = KP_I32; break;
    case KP__OX_INT64: dt = KP_I64; break;
    case KP__OX_BOOL: dt = KP_U8; break;
    case KP__OX_FLOAT16: dt = KP_F16; break;
    case KP__OX_BFLOAT16: dt = KP_BF16; break;
    case KP__OX_UINT64: dt = KP_U64; break;
    default: return false;
    }
    if (out) *out = dt;
    return true;
}

const char *kp__ox_type_name(int onnx_type) {
    static const char *const names[] = {
        "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
        "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
        "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
        "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4",     "FLOAT4E2M1"};
    static _Thread_local char other[24];
    if (onnx_type >= 0 && (size_t)onnx_type < sizeof names / sizeof names[0])
        return names[onnx_type];
    snprintf(other, sizeof other, "type %d", onnx_type);
    return other;
}

/* --- freeing ------------------------------------------------------------------- */

void kp__ox_tensor_clear(kp__ox_tensor *t) {
    if (!t) return;
    kp__free(t->name);
    kp__free(t->data);
    t->name = NULL;
    t->data = NULL;
    t->bytes = 0;
}

static void free_strings(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++) kp__free(s[i]);
    kp__free(s);
}

static void free_attr(kp__ox_attr *a) {
    kp__free(a->name);
    kp__free(a->s);
    kp__free(a->floats);
    kp__free(a->ints);
    free_strings(a->strings, a->n);
    if (a->t) kp__ox_tensor_clear(a->t);
    kp__free(a->t);
}

static void free_node(kp__ox_node *n) {
    kp__free(n->name);
    kp__free(n->op_type);
    kp__free(n->domain);
    free_strings(n->inputs, n->n_inputs);
    free_strings(n->outputs, n->n_outputs);
    for (size_t i = 0; n->attrs && i < n->n_attrs; i++) free_attr(&n->attrs[i]);
    kp__free(n->attrs);
}

static void free_value_infos(kp__ox_value_info *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) {
        kp__free(v[i].name);
        for (int d = 0; d < KP_MAX_DIMS; d++) kp__free(v[i].dims[d].param);
    }
    kp__free(v);
}

void kp__ox_model_free(kp__ox_model *m) {
    if (!m) return;
    kp__free(m->producer);
    kp__free(m->graph_name);
    for (size_t i = 0; m->opsets && i < m->n_opsets; i++) kp__free(m->opsets[i].domain);
    kp__free(m->opsets);
    for (size_t i = 0; m->nodes && i < m->n_nodes; i++) free_node(&m->nodes[i]);
    kp__free(m->nodes);
    for (size_t i = 0; m->inits && i < m->n_inits; i++) kp__ox_tensor_clear(&m->inits[i]);
    kp__free(m->inits);
    free_value_infos(m->inputs, m->n_inputs);
    free_value_infos(m->outputs, m->n_outputs);
    free_value_infos(m->value_info, m->n_value_info);
    kp__free(m);
}

int64_t kp__ox_model_opset(const kp__ox_model *m, const char *domain) {
    int64_t v = 0;
    bool onnx = !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; m && i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain ? m->opsets[i].domain : "";
        bool match = onnx ? (!d[0] || strcmp(d, "ai.onnx") == 0) : strcmp(d, domain) == 0;
        if (match && m->opsets[i].version > v) v = m->opsets[i].version;
    }
    return v;
}
