/* The engine's graph: the model's names resolved to value indices, nodes
 * put in run (topological) order, every node's operator found. Every
 * structural fault of a model is found here, before any shape or memory:
 * a name defined twice or never, a cycle, an opset out of range, and every
 * node whose operator kpipe lacks (all of them, in one message). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "onnx-impl.h"

/* ai.onnx opsets the operators are written against. */
#define KP__OX_OPSET_MIN 1
#define KP__OX_OPSET_MAX 22

/* --- a name -> value index table (open addressing) ------------------------- */
typedef struct kp__ox_names {
    size_t cap;
    const char **key;
    int *val;
} kp__ox_names;

static uint64_t kp__ox_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static kp_status kp__ox_names_init(kp__ox_names *t, size_t n) {
    t->cap = 16;
    while (t->cap < 2 * n + 1) t->cap *= 2;
    t->key = kp__calloc(t->cap, sizeof *t->key);
    t->val = kp__calloc(t->cap, sizeof *t->val);
    if (!t->key || !t->val) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for names");
    return KP_OK;
}

static void kp__ox_names_free(kp__ox_names *t) {
    kp__free(t->key);
    kp__free(t->val);
}

/* The slot of `name`: its own, or the empty one it would take. */
static size_t kp__ox_names_slot(const kp__ox_names *t, const char *name) {
    size_t i = (size_t)kp__ox_hash(name) & (t->cap - 1);
    while (t->key[i] && strcmp(t->key[i], name) != 0) i = (i + 1) & (t->cap - 1);
    return i;
}

static int kp__ox_names_get(const kp__ox_names *t, const char *name) {
    size_t i = kp__ox_names_slot(t, name);
    return t->key[i] ? t->val[i] : -1;
}

/* --- building ----------------------------------------------------------------- */
typedef struct kp__ox_build {
    kp__ox_model *m;
    kp__ox_graph *g;
    kp__ox_names names;
} kp__ox_build;

/* Who defines value v, for messages. */
static const char *kp__ox_definer(const kp__ox_build *b, int v, char *buf, size_t len) {
    const kp__ox_value *val = &b->g->values[v];
    if (val->kind == KP__OX_V_INIT && val->producer < 0) return "an initializer";
    if (val->kind == KP__OX_V_INPUT) return "a graph input";
    const kp__ox_node *n = &b->m->nodes[val->producer];
    snprintf(buf, len, "%s node '%s'", n->op_type, n->name);
    return buf;
}

static kp_status kp__ox_define(kp__ox_build *b, const char *name, kp__ox_value_kind kind,
                               int producer) {
    if (!name[0]) return KP_OK;
    size_t slot = kp__ox_names_slot(&b->names, name);
    kp__ox_graph *g = b->g;
    if (b->names.key[slot]) {
        char a[160], c[160];
        int first = b->names.val[slot];
        kp__ox_value tmp = {.kind = kind, .producer = producer};
        g->values[g->n_values] = tmp;
        const char *now = kp__ox_definer(b, (int)g->n_values, c, sizeof c);
        return kp__error(KP_ERR_PARSE, "the model defines value '%s' twice: by %s and by %s", name,
                         kp__ox_definer(b, first, a, sizeof a), now);
    }
    kp__ox_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->kind = kind;
    v->producer = producer;
    v->last_use = -1;
    b->names.key[slot] = name;
    b->names.val[slot] = (int)g->n_values++;
    return KP_OK;
}

static kp_status kp__ox_init_value(kp__ox_build *b, const kp__ox_tensor *t) {
    if (!t->dtype_ok)
        return kp__error(KP_ERR_UNSUPPORTED, "initializer '%s' has element type %s, which kpipe "
                         "does not hold", t->name, kp__ox_type_name(t->onnx_type));
    KP_CHECK(kp__ox_define(b, t->name, KP__OX_V_INIT, -1));
    kp__ox_value *v = &b->g->values[b->g->n_values - 1];
    v->is_const = true;
    v->is_bool = t->onnx_type == KP__OX_BOOL;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->shape, t->shape, sizeof v->shape);
    v->numel = t->numel;
    v->host = t->data;
    return KP_OK;
}

static kp_status kp__ox_input_value(kp__ox_build *b, const kp__ox_value_info *vi) {
    if (kp__ox_names_get(&b->names, vi->name) >= 0) return KP_OK; /* an initializer (IR < 4) */
    kp_dtype dt;
    if (vi->onnx_type == 0)
        return kp__error(KP_ERR_UNSUPPORTED, "graph input '%s' is not a tensor", vi->name);
    if (!kp__ox_dtype(vi->onnx_type, &dt))
        return kp__error(KP_ERR_UNSUPPORTED, "graph input '%s' has element type %s, which kpipe "
                         "does not hold", vi->name, kp__ox_type_name(vi->onnx_type));
    if (!vi->has_shape)
        return kp__error(KP_ERR_UNSUPPORTED, "graph input '%s' has no shape: its rank must be known",
                         vi->name);
    KP_CHECK(kp__ox_define(b, vi->name, KP__OX_V_INPUT, -1));
    kp__ox_value *v = &b->g->values[b->g->n_values - 1];
    v->dtype = dt;
    v->is_bool = vi->onnx_type == KP__OX_BOOL;
    v->ndim = vi->ndim;
    for (int d = 0; d < vi->ndim; d++) v->shape[d] = vi->dims[d].value;
    b->g->inputs[b->g->n_inputs++] = (int)b->g->n_values - 1;
    return KP_OK;
}

static kp_status kp__ox_check_opsets(const kp__ox_model *m) {
    int64_t v = kp__ox_model_opset(m, "");
    if (v == 0)
        return kp__error(KP_ERR_UNSUPPORTED, "the model imports no ai.onnx opset");
    if (v < KP__OX_OPSET_MIN || v > KP__OX_OPSET_MAX)
        return kp__error(KP_ERR_UNSUPPORTED, "the model uses ai.onnx opset %lld; kpipe supports "
                         "opsets %d to %d", (long long)v, KP__OX_OPSET_MIN, KP__OX_OPSET_MAX);
    return KP_OK;
}

static bool kp__ox_onnx_domain(const char *d) { return !d[0] || strcmp(d, "ai.onnx") == 0; }

/* Every node's operator; the ones kpipe lacks, all listed in one error. */
static kp_status kp__ox_find_ops(kp__ox_build *b) {
    char list[3000];
    size_t len = 0, missing = 0, shown = 0;
    list[0] = 0;
    for (size_t i = 0; i < b->g->n_nodes; i++) {
        const kp__ox_node *n = b->g->nodes[i].src; /* run order, after kp__ox_order */
        int64_t opset = kp__ox_model_opset(b->m, n->domain);
        const kp__ox_op *op = NULL;
        if (kp__ox_onnx_domain(n->domain)) op = kp__ox_op_find(n->op_type, (int)opset);
        b->g->nodes[i].op = op;
        b->g->nodes[i].opset = (int)opset;
        if (op) continue;
        missing++;
        if (len + 200 < sizeof list) {
            int w = snprintf(list + len, sizeof list - len, "%s%s '%s' (domain %s, opset %lld)",
                             shown ? "; " : "", n->op_type, n->name,
                             n->domain[0] ? n->domain : "ai.onnx", (long long)opset);
            if (w > 0) len += (size_t)w;
            shown++;
        }
    }
    if (!missing) return KP_OK;
    return kp__error(KP_ERR_UNSUPPORTED, "%zu node%s use%s operators kpipe lacks: %s%s", missing,
                     missing == 1 ? "" : "s", missing == 1 ? "s" : "", list,
                     shown < missing ? "; and more" : "");
}

/* Resolves node i's input and output names into indices. */
static kp_status kp__ox_wire_node(kp__ox_build *b, size_t i) {
    const kp__ox_node *n = &b->m->nodes[i];
    kp__ox_gnode *gn = &b->g->nodes[i];
    gn->src = n;
    gn->n_in = n->n_inputs;
    gn->n_out = n->n_outputs;
    gn->in = kp__calloc(n->n_inputs + n->n_outputs + 1, sizeof(int));
    if (!gn->in) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for nodes");
    gn->out = gn->in + n->n_inputs;
    for (size_t k = 0; k < n->n_inputs; k++) {
        const char *name = n->inputs[k];
        gn->in[k] = name[0] ? kp__ox_names_get(&b->names, name) : -1;
        if (name[0] && gn->in[k] < 0)
            return kp__error(KP_ERR_PARSE, "%s node '%s' reads '%s', which no node, input or "
                             "initializer defines", n->op_type, n->name, name);
    }
    for (size_t k = 0; k < n->n_outputs; k++)
        gn->out[k] = n->outputs[k][0] ? kp__ox_names_get(&b->names, n->outputs[k]) : -1;
    return KP_OK;
}

/* Kahn's order over the file's nodes; what is left over sits on a cycle. */
static kp_status kp__ox_order(kp__ox_build *b) {
    kp__ox_graph *g = b->g;
    size_t n = g->n_nodes, done = 0;
    int *waiting = kp__calloc(n + 1, sizeof *waiting), *order = kp__calloc(n + 1, sizeof *order);
    kp__ox_gnode *sorted = kp__calloc(n + 1, sizeof *sorted);
    kp_status st = KP_OK;
    if (!waiting || !order || !sorted) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the node order");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < g->nodes[i].n_in; k++) {
            int v = g->nodes[i].in[k];
            if (v >= 0 && g->values[v].producer >= 0) waiting[i]++;
        }
    size_t head = 0;
    for (size_t i = 0; i < n; i++)
        if (!waiting[i]) order[done++] = (int)i;
    for (; head < done; head++) {
        const kp__ox_gnode *gn = &g->nodes[order[head]];
        for (size_t o = 0; o < gn->n_out; o++) {
            if (gn->out[o] < 0) continue;
            for (size_t j = 0; j < n; j++)
                for (size_t k = 0; k < g->nodes[j].n_in; k++)
                    if (g->nodes[j].in[k] == gn->out[o] && --waiting[j] == 0) order[done++] = (int)j;
        }
    }
    if (done < n) {
        for (size_t i = 0; i < n; i++)
            if (waiting[i]) {
                st = kp__error(KP_ERR_PARSE, "the graph has a cycle through %s node '%s'",
                               g->nodes[i].src->op_type, g->nodes[i].src->name);
                goto out;
            }
    }
    for (size_t i = 0; i < n; i++) sorted[i] = g->nodes[order[i]];
    memcpy(g->nodes, sorted, n * sizeof *sorted);
    /* producers now name run-order indices */
    for (size_t i = 0; i < n; i++)
        for (size_t o = 0; o < g->nodes[i].n_out; o++)
            if (g->nodes[i].out[o] >= 0) g->values[g->nodes[i].out[o]].producer = (int)i;
out:
    kp__free(waiting);
    kp__free(order);
    kp__free(sorted);
    return st;
}

static kp_status kp__ox_outputs(kp__ox_build *b) {
    kp__ox_graph *g = b->g;
    for (size_t i = 0; i < b->m->n_outputs; i++) {
        int v = kp__ox_names_get(&b->names, b->m->outputs[i].name);
        if (v < 0)
            return kp__error(KP_ERR_PARSE, "graph output '%s' is not produced by any node, input "
                             "or initializer", b->m->outputs[i].name);
        g->values[v].is_output = true;
        g->outputs[g->n_outputs++] = v;
    }
    if (!g->n_outputs) return kp__error(KP_ERR_PARSE, "the graph has no outputs");
    return KP_OK;
}

static kp_status kp__ox_alloc_graph(kp__ox_build *b) {
    kp__ox_model *m = b->m;
    size_t n_vals = m->n_inits + m->n_inputs + 1;
    for (size_t i = 0; i < m->n_nodes; i++) n_vals += m->nodes[i].n_outputs;
    kp__ox_graph *g = kp__calloc(1, sizeof *g);
    if (!g) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the graph");
    b->g = g;
    g->model = m;
    g->values = kp__calloc(n_vals, sizeof *g->values);
    g->nodes = kp__calloc(m->n_nodes + 1, sizeof *g->nodes);
    g->inputs = kp__calloc(m->n_inputs + 1, sizeof *g->inputs);
    g->outputs = kp__calloc(m->n_outputs + 1, sizeof *g->outputs);
    g->n_nodes = m->n_nodes;
    if (!g->values || !g->nodes || !g->inputs || !g->outputs)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory for the graph");
    return kp__ox_names_init(&b->names, n_vals);
}

static kp_status kp__ox_build_steps(kp__ox_build *b) {
    kp__ox_model *m = b->m;
    KP_CHECK(kp__ox_check_opsets(m));
    KP_CHECK(kp__ox_alloc_graph(b));
    for (size_t i = 0; i < m->n_inits; i++) KP_CHECK(kp__ox_init_value(b, &m->inits[i]));
    for (size_t i = 0; i < m->n_inputs; i++) KP_CHECK(kp__ox_input_value(b, &m->inputs[i]));
    for (size_t i = 0; i < m->n_nodes; i++)
        for (size_t k = 0; k < m->nodes[i].n_outputs; k++)
            KP_CHECK(kp__ox_define(b, m->nodes[i].outputs[k], KP__OX_V_INNER, (int)i));
    for (size_t i = 0; i < m->n_nodes; i++) KP_CHECK(kp__ox_wire_node(b, i));
    KP_CHECK(kp__ox_outputs(b));
    KP_CHECK(kp__ox_order(b));
    return kp__ox_find_ops(b);
}

kp_status kp__ox_graph_build(kp__ox_model *m, kp__ox_graph **out) {
    kp__ox_build b = {.m = m};
    kp_status st = kp__ox_build_steps(&b);
    kp__ox_names_free(&b.names);
    if (st != KP_OK) {
        if (b.g) kp__ox_graph_free(b.g);
        else kp__ox_model_free(m);
        return st;
    }
    *out = b.g;
    return KP_OK;
}

void kp__ox_graph_free(kp__ox_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_nodes && g->nodes; i++) {
        if (g->nodes[i].state && g->nodes[i].op && g->nodes[i].op->release)
            g->nodes[i].op->release(&g->nodes[i]);
        kp__free(g->nodes[i].in);
    }
    for (size_t i = 0; i < g->n_values && g->values; i++)
        if (g->values[i].kind == KP__OX_V_INNER) kp__free(g->values[i].host);
    kp__free(g->values);
    kp__free(g->nodes);
    kp__free(g->inputs);
    kp__free(g->outputs);
    kp__ox_model_free(g->model);
    kp__free(g->algo_dir);
    kp__free(g);
}

/* --- helpers for operators ----------------------------------------------------- */
kp__ox_value *kp__ox_in(kp__ox_graph *g, const kp__ox_gnode *n, size_t i) {
    return i < n->n_in && n->in[i] >= 0 ? &g->values[n->in[i]] : NULL;
}

kp__ox_value *kp__ox_out(kp__ox_graph *g, const kp__ox_gnode *n, size_t i) {
    return i < n->n_out && n->out[i] >= 0 ? &g->values[n->out[i]] : NULL;
}

kp_status kp__ox_node_error(const kp__ox_gnode *n, kp_status st, const char *fmt, ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return kp__error(st, "%s node '%s': %s", n->src->op_type, n->src->name, detail);
}

kp_status kp__ox_set_out(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, kp_dtype dt, int ndim,
                         const int64_t *shape) {
    kp__ox_value *v = kp__ox_out(g, n, i);
    if (!v) return KP_OK;
    if (ndim < 0 || ndim > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "output %zu would have rank %d; kpipe "
                                 "holds at most %d dimensions", i, ndim, KP_MAX_DIMS);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "output %zu would have dimension %d of "
                                     "size %lld", i, d, (long long)shape[d]);
        if (shape[d] && numel > ((int64_t)1 << 46) / shape[d])
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "output %zu is too large", i);
        numel *= shape[d];
    }
    v->dtype = dt;
    v->ndim = ndim;
    for (int d = 0; d < KP_MAX_DIMS; d++) v->shape[d] = d < ndim ? shape[d] : 0;
    v->numel = numel;
    v->is_bool = false;
    return KP_OK;
}

const kp__ox_attr *kp__ox_attr_find(const kp__ox_gnode *n, const char *name) {
    for (size_t i = 0; i < n->src->n_attrs; i++)
        if (strcmp(n->src->attrs[i].name, name) == 0) return &n->src->attrs[i];
    return NULL;
}

static kp_status kp__ox_attr_typed(const kp__ox_gnode *n, const char *name, int type,
                                   const kp__ox_attr **out) {
    *out = kp__ox_attr_find(n, name);
    if (*out && (*out)->type != type)
        return kp__ox_node_error(n, KP_ERR_PARSE, "attribute '%s' has type %d, expected %d", name,
                                 (*out)->type, type);
    return KP_OK;
}

kp_status kp__ox_attr_int(const kp__ox_gnode *n, const char *name, int64_t def, int64_t *out) {
    const kp__ox_attr *a;
    KP_CHECK(kp__ox_attr_typed(n, name, KP__OX_ATTR_INT, &a));
    *out = a ? a->i : def;
    return KP_OK;
}

kp_status kp__ox_attr_float(const kp__ox_gnode *n, const char *name, float def, float *out) {
    const kp__ox_attr *a;
    KP_CHECK(kp__ox_attr_typed(n, name, KP__OX_ATTR_FLOAT, &a));
    *out = a ? a->f : def;
    return KP_OK;
}

kp_status kp__ox_attr_str(const kp__ox_gnode *n, const char *name, const char *def,
                          const char **out) {
    const kp__ox_attr *a;
    KP_CHECK(kp__ox_attr_typed(n, name, KP__OX_ATTR_STRING, &a));
    *out = a ? a->s : def;
    return KP_OK;
}

kp_status kp__ox_attr_ints(const kp__ox_gnode *n, const char *name, const int64_t **vals,
                           size_t *count) {
    const kp__ox_attr *a;
    KP_CHECK(kp__ox_attr_typed(n, name, KP__OX_ATTR_INTS, &a));
    *vals = a ? a->ints : NULL;
    *count = a ? a->n : 0;
    return KP_OK;
}

kp_status kp__ox_attr_floats(const kp__ox_gnode *n, const char *name, const float **vals,
                             size_t *count) {
    const kp__ox_attr *a;
    KP_CHECK(kp__ox_attr_typed(n, name, KP__OX_ATTR_FLOATS, &a));
    *vals = a ? a->floats : NULL;
    *count = a ? a->n : 0;
    return KP_OK;
}

kp_status kp__ox_const_ints(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, int64_t *buf,
                            size_t cap, const int64_t **vals, size_t *count) {
    const kp__ox_value *v = kp__ox_in(g, n, i);
    if (!v) {
        *vals = NULL;
        *count = 0;
        return KP_OK;
    }
    if (!v->is_const || (!v->host && v->numel))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %zu ('%s') must be known at setup "
                                 "(a constant or computed from shapes); here it depends on data",
                                 i, v->name);
    *count = (size_t)v->numel;
    if (v->dtype == KP_I64) {
        *vals = v->host;
        return KP_OK;
    }
    if (v->dtype != KP_I32)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %zu ('%s') must be int64 or int32, "
                                 "not %s", i, v->name, kp_dtype_name(v->dtype));
    if (*count > cap)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "input %zu ('%s') has %zu values; at most "
                                 "%zu", i, v->name, *count, cap);
    for (size_t k = 0; k < *count; k++) buf[k] = ((const int32_t *)v->host)[k];
    *vals = buf;
    return KP_OK;
}

kp_status kp__ox_axis(const kp__ox_gnode *n, int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= (rank ? rank : 1))
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "axis %lld is out of range for rank %d",
                                 (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KP_OK;
}

kp_status kp__ox_broadcast(const kp__ox_gnode *n, int na, const int64_t *a, int nb,
                           const int64_t *b, int *nout, int64_t *out) {
    int r = na > nb ? na : nb;
    for (int d = 0; d < r; d++) {
        int64_t x = d - (r - na) >= 0 ? a[d - (r - na)] : 1;
        int64_t y = d - (r - nb) >= 0 ? b[d - (r - nb)] : 1;
        if (x != y && x != 1 && y != 1)
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "shapes do not broadcast: dimension %d "
                                     "is %lld in one and %lld in the other", d, (long long)x,
                                     (long long)y);
        out[d] = x == 1 ? y : x;
    }
    *nout = r;
    return KP_OK;
}

bool kp__ox_graph_input_host_only(const kp__ox_graph *g, size_t i) {
    int v = g->inputs[i];
    bool read = false;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const kp__ox_gnode *n = &g->nodes[k];
        for (size_t j = 0; j < n->n_in; j++) {
            if (n->in[j] != v) continue;
            if (!n->op->host_input || !n->op->host_input((int)j)) return false;
            read = true;
        }
    }
    return read;
}

kp_status kp__ox_model_fix_input(kp__ox_model *m, const char *name, kp__ox_tensor *t) {
    size_t i = 0;
    while (i < m->n_inputs && strcmp(m->inputs[i].name, name) != 0) i++;
    if (i == m->n_inputs) return kp__error(KP_ERR_NOT_FOUND, "the model has no input '%s'", name);
    kp__ox_tensor *inits = kp__calloc(m->n_inits + 1, sizeof *inits);
    char *copy = kp__malloc(strlen(name) + 1);
    if (!inits || !copy) {
        kp__free(inits);
        kp__free(copy);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory");
    }
    if (m->n_inits) memcpy(inits, m->inits, m->n_inits * sizeof *inits);
    kp__free(m->inits);
    m->inits = inits;
    strcpy(copy, name);
    kp__free(t->name);
    t->name = copy;
    m->inits[m->n_inits++] = *t;
    memset(t, 0, sizeof *t);
    return KP_OK;
}
