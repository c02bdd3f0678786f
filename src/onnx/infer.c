/* Shapes and folding: every value's dtype and shape for the graph inputs'
 * current shapes, node by node in run order. A node whose inputs are all
 * known at setup -- constants, or values of which it reads only the shape
 * (Shape) -- runs now, on the host, and its outputs become constants: this
 * is how shape arithmetic (Shape -> Gather -> Concat -> Reshape) and
 * constant subgraphs cost nothing per tick. */
#include <string.h>

#include "onnx-impl.h"

static bool kp__ox_known_input(const kp__ox_gnode *n, size_t i, const kp__ox_value *v) {
    return v->is_const || (n->op->host_input && n->op->host_input((int)i));
}

/* Whether a node folds: it has an output, and every present input is known. */
static bool kp__ox_foldable(kp__ox_graph *g, const kp__ox_gnode *n) {
    for (size_t i = 0; i < n->n_in; i++) {
        const kp__ox_value *v = kp__ox_in(g, n, i);
        if (v && !kp__ox_known_input(n, i, v)) return false;
    }
    return true;
}

/* Runs a folded node on the host: inputs read from their host copies,
 * outputs written into fresh host buffers that become their values. */
static kp_status kp__ox_fold(kp__ox_graph *g, kp__ox_gnode *n) {
    void *saved[64];
    size_t n_in = n->n_in < 64 ? n->n_in : 64;
    for (size_t i = 0; i < n_in; i++) {
        kp__ox_value *v = kp__ox_in(g, n, i);
        saved[i] = v ? v->data : NULL;
        if (v) v->data = v->is_const ? v->host : NULL;
    }
    kp_status st = KP_OK;
    for (size_t o = 0; o < n->n_out && st == KP_OK; o++) {
        kp__ox_value *v = kp__ox_out(g, n, o);
        if (!v) continue;
        kp__free(v->host);
        size_t bytes = (size_t)v->numel * kp_dtype_size(v->dtype);
        v->host = kp__calloc(1, bytes ? bytes : 1);
        if (!v->host) st = kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to fold '%s'", v->name);
        v->data = v->host;
        v->is_const = true;
    }
    if (st == KP_OK) {
        kp__ox_exec x = {.host = true, .fold = true};
        st = n->op->run(&x, g, n);
    }
    for (size_t i = 0; i < n_in; i++) {
        kp__ox_value *v = kp__ox_in(g, n, i);
        if (v) v->data = saved[i];
    }
    return st;
}

kp_status kp__ox_infer(kp__ox_graph *g) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        kp__ox_gnode *n = &g->nodes[i];
        for (size_t o = 0; o < n->n_out; o++) {
            kp__ox_value *v = kp__ox_out(g, n, o);
            if (v) v->is_const = false;
        }
        kp_status st = n->op->infer(g, n);
        if (st != KP_OK) return st;
        for (size_t o = 0; o < n->n_out; o++) {
            kp__ox_value *v = kp__ox_out(g, n, o);
            if (v && v->dtype >= KP_DTYPE_COUNT)
                return kp__ox_node_error(n, KP_ERR_INTERNAL, "output %zu has no dtype", o);
        }
        n->folded = kp__ox_foldable(g, n);
        if (n->folded) {
            /* a fold may set is_bool through the op's infer; keep it */
            KP_CHECK(kp__ox_fold(g, n));
        }
    }
    return KP_OK;
}
