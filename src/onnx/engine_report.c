/* What `kpipe validate` shows of a model: every node with its operator, how
 * it runs (per tick, folded at setup, or a view), its output shapes at the
 * maximum input shapes, and the memory plan. */
#include <stdio.h>
#include <string.h>

#include "onnx-impl.h"

static const char *kp__ox_how(const kp__ox_gnode *n) {
    if (n->folded) return "folded";
    if (n->op->view) return "view";
    return "runs";
}

static void kp__ox_shape_str(const kp__ox_value *v, char *buf, size_t len) {
    size_t k = 0;
    int w = snprintf(buf, len, "%s%s[", v->is_bool ? "bool" : kp_dtype_name(v->dtype),
                     v->is_bool ? "" : "");
    if (w > 0) k = (size_t)w;
    for (int d = 0; d < v->ndim && k < len; d++) {
        w = snprintf(buf + k, len - k, "%s%lld", d ? "," : "", (long long)v->shape[d]);
        if (w > 0) k += (size_t)w;
    }
    if (k < len) snprintf(buf + k, len - k, "]");
}

static void kp__ox_report_nodes(const kp__ox_graph *g, FILE *f) {
    fprintf(f, "  nodes (%zu, in run order):\n", g->n_nodes);
    fprintf(f, "    %-4s %-22s %-28s %-7s %s\n", "#", "op", "name", "how", "outputs");
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        char outs[256] = "";
        size_t k = 0;
        for (size_t o = 0; o < n->n_out && k + 2 < sizeof outs; o++) {
            if (n->out[o] < 0) continue;
            char s[96];
            kp__ox_shape_str(&g->values[n->out[o]], s, sizeof s);
            int w = snprintf(outs + k, sizeof outs - k, "%s%s", k ? " " : "", s);
            if (w > 0) k += (size_t)w;
        }
        fprintf(f, "    %-4zu %-22.22s %-28.28s %-7s %s\n", i, n->src->op_type,
                n->src->name[0] ? n->src->name : "-", kp__ox_how(n), outs);
    }
}

/* How the nodes with an account of their own run (the convolutions'
 * algorithms), at the maximum shapes. */
static void kp__ox_report_choices(const kp__ox_graph *g, FILE *f) {
    bool any = false;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        if (n->folded || !n->op->describe) continue;
        char text[160];
        n->op->describe(n, text, sizeof text);
        if (!any) fprintf(f, "  algorithms (at the maximum shapes):\n");
        any = true;
        fprintf(f, "    %-4zu %-22.22s %s\n", i, n->src->name[0] ? n->src->name : n->src->op_type,
                text);
    }
}

static void kp__ox_report_plan(const kp__ox_engine *e, const kp__ox_graph *g, FILE *f) {
    size_t region, consts, ws, inner = 0, n_inner = 0;
    char a[32], b[32], c[32], d[32];
    kp__ox_engine_memory(e, &region, &consts, &ws);
    for (size_t v = 0; v < g->n_values; v++) {
        const kp__ox_value *val = &g->values[v];
        if (val->planned && !val->is_const) {
            inner += val->max_bytes;
            n_inner++;
        }
    }
    fprintf(f, "  memory plan (at the maximum shapes):\n");
    fprintf(f, "    constants on the device  %s\n", kp__bytes_str(consts, a, sizeof a));
    fprintf(f, "    intermediates, shared    %s for %zu values (%s if each had its own)\n",
            kp__bytes_str(region - consts, b, sizeof b), n_inner, kp__bytes_str(inner, c, sizeof c));
    fprintf(f, "    workspace                %s\n", kp__bytes_str(ws, d, sizeof d));
    fprintf(f, "    peak                     %s\n", kp__bytes_str(region + ws, a, sizeof a));
}

void kp__ox_engine_report(const kp__ox_engine *e, void *file) {
    FILE *f = file;
    const kp__ox_graph *g = kp__ox_engine_graph(e);
    const kp__ox_model *m = g->model;
    size_t runs = 0, folded = 0, views = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].folded) folded++;
        else if (g->nodes[i].op->view) views++;
        else runs++;
    }
    fprintf(f, "model: graph '%s' from '%s', IR %lld, ai.onnx opset %lld\n", m->graph_name,
            m->producer, (long long)m->ir_version, (long long)kp__ox_model_opset(m, ""));
    fprintf(f, "  %zu nodes: %zu run per tick, %zu folded at setup, %zu views; every operator "
            "supported\n", g->n_nodes, runs, folded, views);
    for (size_t i = 0; i < g->n_inputs; i++) {
        char s[96];
        kp__ox_shape_str(&g->values[g->inputs[i]], s, sizeof s);
        fprintf(f, "  input  %-24s %s (maximum)\n", g->values[g->inputs[i]].name, s);
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        char s[96];
        kp__ox_shape_str(&g->values[g->outputs[i]], s, sizeof s);
        fprintf(f, "  output %-24s %s\n", g->values[g->outputs[i]].name, s);
    }
    kp__ox_report_nodes(g, f);
    kp__ox_report_choices(g, f);
    const char *path;
    size_t hits, misses;
    kp__ox_algo_cache_stats(kp__ox_engine_algos(e), &path, &hits, &misses);
    if (path)
        fprintf(f, "  algorithm cache: %s (%zu convolution shapes found there, %zu chosen "
                "afresh)\n", path, hits, misses);
    kp__ox_report_plan(e, g, f);
}
