/* Epilogue fusion: a convolution followed by a BatchNormalization, a
 * residual Add and an activation runs as one node.
 *
 *   Conv(X, W, B) -> y ; BatchNormalization(y) -> t ; Add(t, Z) -> s ; Act(s) -> out
 *     becomes  Conv(X, W', B', Z, S) -> out, with act set on the node
 *
 * and so does any shorter chain of them in that order. The activation is
 * Relu, LeakyRelu, PRelu (a constant slope per channel, input S, or one
 * for all), Clip (constant bounds), Sigmoid, HardSigmoid, HardSwish, or
 * SiLU written as Mul(s, Sigmoid(s)). The normalization
 * folds into the weights at setup: with k = scale / sqrt(var + epsilon)
 * per output channel, W' = W k and B' = (B - mean) k + bias, written over
 * the constants in place, which the convolution alone reads (without a B,
 * the normalization's bias becomes B'). The Add must
 * not broadcast (Z has y's shape at the maximum shapes, and the fused
 * node's infer refuses a later shape where it would), and each value the
 * fusion swallows must have that one reader and not be a graph output.
 * The fused node takes the place of the last node it swallowed in the run
 * order, so Z has been produced by then; X, W and B were already produced
 * before the convolution's own place. The swallowed values keep their
 * entries with no producer and no reader: the plan gives them no bytes.
 *
 * On cuda with cuDNN the fused node is one cudnnConvolutionBiasActivation-
 * Forward where the activation is ReLU; everywhere else the bias, the
 * residual and the activation are one pass after the product
 * (ops/nn/ops_conv.c).
 * It runs once, after the first shape inference and before the plan. */
#include <math.h>
#include <string.h>

#include "onnx-impl.h"

typedef struct kp__ox_fusing {
    kp__ox_graph *g;
    int *readers;   /* per value: per-tick nodes reading it; +2 for a graph output */
    int *reader;    /* per value: the last node reading it */
    int *place;     /* per node: where it runs in the new order (-1: swallowed) */
    int *moved;     /* per node: the fused node that takes this node's place, or -1 */
    bool *fused;    /* per node: a convolution that swallowed what follows it */
} kp__ox_fusing;

static bool kp__ox_is(const kp__ox_gnode *n, const char *op) {
    return !n->folded && n->op && strcmp(n->op->name, op) == 0 && n->src->domain[0] == '\0';
}

static void kp__ox_count_readers(kp__ox_fusing *f) {
    kp__ox_graph *g = f->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *n = &g->nodes[i];
        for (size_t k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            f->readers[n->in[k]]++;
            f->reader[n->in[k]] = (int)i;
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) f->readers[g->outputs[o]] += 2;
}

/* The one node reading v when it is of type `op` and v leaves nowhere else. */
static int kp__ox_sole_reader(const kp__ox_fusing *f, int v, const char *op) {
    if (v < 0 || f->readers[v] != 1) return -1;
    int r = f->reader[v];
    return kp__ox_is(&f->g->nodes[r], op) && f->place[r] >= 0 && f->g->nodes[r].n_out >= 1 &&
                   f->g->nodes[r].out[0] >= 0
               ? r
               : -1;
}

/* Z for Add(y, Z): the other input, when it has y's dtype and shape. */
static int kp__ox_residual(const kp__ox_graph *g, const kp__ox_gnode *add, int y) {
    if (add->n_in != 2 || add->in[0] < 0 || add->in[1] < 0 || add->in[0] == add->in[1])
        return -1;
    int z = add->in[0] == y ? add->in[1] : add->in[0];
    const kp__ox_value *vz = &g->values[z], *vy = &g->values[y];
    if (vz->dtype != vy->dtype || vz->ndim != vy->ndim) return -1;
    for (int d = 0; d < vy->ndim; d++)
        if (vz->shape[d] != vy->shape[d]) return -1;
    return z;
}

/* A constant f32 input read by nothing else, with `count` elements. */
static float *kp__ox_own_const(const kp__ox_fusing *f, const kp__ox_gnode *n, size_t i,
                               int64_t count) {
    if (i >= n->n_in || n->in[i] < 0) return NULL;
    kp__ox_value *v = &f->g->values[n->in[i]];
    if (!v->is_const || !v->host || v->dtype != KP_F32 || v->numel != count ||
        f->readers[n->in[i]] != 1)
        return NULL;
    return v->host;
}

/* Folds BatchNormalization node b into Conv n's constants; false (nothing
 * changed) when it cannot. */
static bool kp__ox_fold_bn(kp__ox_fusing *f, kp__ox_gnode *n, const kp__ox_gnode *b) {
    const kp__ox_value *w = kp__ox_in(f->g, n, 1);
    int64_t training = 0, spatial = 1;
    float eps = 1e-5f;
    if (!w || w->ndim < 3 || b->n_in != 5 || (b->n_out > 1 && b->out[1] >= 0) ||
        kp__ox_attr_int(b, "training_mode", 0, &training) != KP_OK || training != 0 ||
        kp__ox_attr_int(b, "spatial", 1, &spatial) != KP_OK || spatial != 1 ||
        kp__ox_attr_float(b, "epsilon", 1e-5f, &eps) != KP_OK)
        return false;
    int64_t cout = w->shape[0], per = w->numel / (cout ? cout : 1);
    float *wd = kp__ox_own_const(f, n, 1, w->numel), *bd = kp__ox_own_const(f, n, 2, cout);
    float *prm[4];
    for (size_t k = 0; k < 4; k++) {
        const kp__ox_value *v = kp__ox_in(f->g, b, k + 1);
        if (!v || !v->is_const || !v->host || v->dtype != KP_F32 || v->numel != cout) return false;
        prm[k] = v->host; /* scale, bias, mean, var */
    }
    float *bias_out = bd ? bd : kp__ox_own_const(f, b, 2, cout);
    if (!wd || (n->n_in > 2 && n->in[2] >= 0 && !bd) || !bias_out) return false;
    for (int64_t c = 0; c < cout; c++) {
        float k = prm[0][c] / sqrtf(prm[3][c] + eps);
        for (int64_t j = 0; j < per; j++) wd[c * per + j] *= k;
        bias_out[c] = ((bd ? bd[c] : 0.0f) - prm[2][c]) * k + prm[1][c];
    }
    if (!bd) n->in[2] = b->in[2]; /* the normalization's bias, rewritten, is B' */
    return true;
}

/* Whether a constant f32 slope holds one value per output channel of a
 * convolution output of rank `rank` (its shape right-aligned: 1 everywhere
 * but axis 1) or one value for all. */
static bool kp__ox_per_channel(const kp__ox_value *v, int rank, int64_t cout) {
    if (!v || !v->is_const || !v->host || v->dtype != KP_F32 || v->ndim > rank) return false;
    if (v->numel == 1) return true;
    for (int d = 0; d < v->ndim; d++) {
        int axis = rank - v->ndim + d;
        if (v->shape[d] != (axis == 1 ? cout : 1)) return false;
    }
    return v->numel == cout;
}

/* A constant scalar f32 input, or `def` when the input is omitted; false
 * when it is present and not a known scalar. */
static bool kp__ox_const_scalar(kp__ox_graph *g, const kp__ox_gnode *n, size_t i, float def,
                                float *out) {
    const kp__ox_value *v = kp__ox_in(g, n, i);
    *out = def;
    if (!v) return true;
    if (!v->is_const || !v->host || v->dtype != KP_F32 || v->numel != 1) return false;
    *out = *(const float *)v->host;
    return true;
}

/* The activation node r (reading the convolution's result y) as an
 * epilogue: kind and parameters into n, PRelu's slope into *slope. */
static bool kp__ox_act_node(kp__ox_fusing *f, kp__ox_gnode *n, const kp__ox_gnode *r, int y,
                            int *slope) {
    kp__ox_graph *g = f->g;
    const char *op = r->op->name;
    float a = 0.0f, b = 0.0f;
    int act = KP__OX_ACT_NONE;
    if (!strcmp(op, "Relu")) act = KP__OX_ACT_RELU;
    else if (!strcmp(op, "Sigmoid")) act = KP__OX_ACT_SIGMOID;
    else if (!strcmp(op, "LeakyRelu")) act = KP__OX_ACT_LEAKYRELU;
    else if (!strcmp(op, "HardSigmoid")) act = KP__OX_ACT_HARDSIGMOID;
    else if (!strcmp(op, "HardSwish")) act = KP__OX_ACT_HARDSWISH;
    else if (!strcmp(op, "Clip")) act = KP__OX_ACT_CLIP;
    else if (!strcmp(op, "PRelu")) act = KP__OX_ACT_PRELU;
    if (act == KP__OX_ACT_NONE || r->n_in < 1 || r->in[0] != y) return false;
    if ((act == KP__OX_ACT_LEAKYRELU && kp__ox_attr_float(r, "alpha", 0.01f, &a) != KP_OK) ||
        (act == KP__OX_ACT_HARDSIGMOID && (kp__ox_attr_float(r, "alpha", 0.2f, &a) != KP_OK ||
                                           kp__ox_attr_float(r, "beta", 0.5f, &b) != KP_OK)))
        return false;
    if (act == KP__OX_ACT_HARDSWISH) {
        a = 1.0f / 6.0f;
        b = 0.5f;
    }
    if (act == KP__OX_ACT_CLIP && r->opset < 11 &&
        (kp__ox_attr_float(r, "min", -3.4028234663852886e38f, &a) != KP_OK ||
         kp__ox_attr_float(r, "max", 3.4028234663852886e38f, &b) != KP_OK))
        return false;
    if (act == KP__OX_ACT_CLIP && r->opset >= 11 &&
        (!kp__ox_const_scalar(g, r, 1, -INFINITY, &a) ||
         !kp__ox_const_scalar(g, r, 2, INFINITY, &b)))
        return false;
    if (act == KP__OX_ACT_PRELU) {
        const kp__ox_value *s = kp__ox_in(g, r, 1), *w = kp__ox_in(g, n, 1);
        if (!w || !kp__ox_per_channel(s, g->values[y].ndim, w->shape[0])) return false;
        if (s->numel == 1) {
            act = KP__OX_ACT_LEAKYRELU; /* one slope for every channel */
            a = *(const float *)s->host;
        } else {
            *slope = r->in[1];
        }
    }
    n->act = act;
    n->act_a = a;
    n->act_b = b;
    return true;
}

/* y * Sigmoid(y) as Mul(y, Sigmoid(y)): y's two readers. The Mul, or -1. */
static int kp__ox_silu(kp__ox_fusing *f, int y, int *sig) {
    kp__ox_graph *g = f->g;
    int s = -1, m = -1;
    if (f->readers[y] != 2) return -1;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const kp__ox_gnode *r = &g->nodes[i];
        for (size_t k = 0; k < r->n_in; k++) {
            if (r->in[k] != y) continue;
            if (kp__ox_is(r, "Sigmoid") && f->place[i] >= 0) s = (int)i;
            else if (kp__ox_is(r, "Mul") && f->place[i] >= 0) m = (int)i;
            break;
        }
    }
    if (s < 0 || m < 0 || g->nodes[s].out[0] < 0 ||
        kp__ox_sole_reader(f, g->nodes[s].out[0], "Mul") != m)
        return -1;
    const kp__ox_gnode *mul = &g->nodes[m];
    if (mul->n_in != 2 || !((mul->in[0] == y && mul->in[1] == g->nodes[s].out[0]) ||
                            (mul->in[1] == y && mul->in[0] == g->nodes[s].out[0])))
        return -1;
    *sig = s;
    return m;
}

/* The activation that follows: the node whose output ends the chain, -1
 * when none fuses. Marks what it swallows. */
static int kp__ox_fuse_act(kp__ox_fusing *f, kp__ox_gnode *n, int out, int *slope) {
    int sig = -1, m = kp__ox_silu(f, out, &sig);
    if (m >= 0) {
        n->act = KP__OX_ACT_SILU;
        f->place[sig] = -1;
        f->place[m] = -1;
        return m;
    }
    if (out < 0 || f->readers[out] != 1) return -1;
    int r = f->reader[out];
    kp__ox_gnode *rn = &f->g->nodes[r];
    if (rn->folded || !rn->op || rn->src->domain[0] != '\0' || f->place[r] < 0 || rn->n_out < 1 ||
        rn->out[0] < 0 || !kp__ox_act_node(f, n, rn, out, slope))
        return -1;
    f->place[r] = -1;
    return r;
}

/* Conv i with what follows it; unchanged when nothing that follows fuses. */
static kp_status kp__ox_fuse_conv(kp__ox_fusing *f, int i) {
    kp__ox_graph *g = f->g;
    kp__ox_gnode *n = &g->nodes[i];
    if (n->n_in > 3 || n->n_out != 1 || n->out[0] < 0 || g->values[n->out[0]].dtype != KP_F32)
        return KP_OK;
    int y = n->out[0], last = -1, z = -1, out = y, slope = -1;
    /* inputs X, W, B, Z (the residual), S (PRelu's slope), then the output */
    int *io = kp__calloc(5 + 1, sizeof *io);
    if (!io) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to fuse '%s'", n->src->name);
    for (size_t k = 0; k < 3; k++) io[k] = k < n->n_in ? n->in[k] : -1;
    io[3] = io[4] = -1;
    io[5] = y;
    kp__free(n->in);
    n->in = io;
    n->out = io + 5;
    n->n_in = 3;
    int bn = kp__ox_sole_reader(f, out, "BatchNormalization");
    if (bn >= 0 && kp__ox_fold_bn(f, n, &g->nodes[bn])) {
        last = bn;
        out = g->nodes[bn].out[0];
        f->place[bn] = -1;
        n->fused_bn = true;
    }
    int a = kp__ox_sole_reader(f, out, "Add");
    if (a >= 0 && (z = kp__ox_residual(g, &g->nodes[a], out)) >= 0) {
        last = a;
        out = g->nodes[a].out[0];
        f->place[a] = -1;
        n->fused_add = true;
    }
    int r = kp__ox_fuse_act(f, n, out, &slope);
    if (r >= 0) {
        last = r;
        out = g->nodes[r].out[0];
    }
    if (last < 0) return KP_OK;
    io[3] = z;
    io[4] = slope;
    io[5] = out;
    n->n_in = slope >= 0 ? 5 : z >= 0 ? 4 : 3;
    f->moved[last] = i;
    f->fused[i] = true;
    f->place[i] = -1; /* runs at `last` instead */
    return KP_OK;
}

/* The new run order: each fused node where the last node it swallowed was. */
static kp_status kp__ox_reorder(kp__ox_fusing *f) {
    kp__ox_graph *g = f->g;
    kp__ox_gnode *nodes = kp__calloc(g->n_nodes + 1, sizeof *nodes);
    if (!nodes) return kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to fuse nodes");
    size_t k = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (f->moved[i] >= 0) {
            kp__free(g->nodes[i].in); /* swallowed: its place goes to the fused node */
            nodes[k++] = g->nodes[f->moved[i]];
        } else if (f->place[i] >= 0) {
            nodes[k++] = g->nodes[i];
        } else if (!f->fused[i]) {
            kp__free(g->nodes[i].in); /* swallowed, not last */
        }
    }
    for (size_t v = 0; v < g->n_values; v++)
        if (g->values[v].kind == KP__OX_V_INNER) g->values[v].producer = -1;
    for (size_t i = 0; i < k; i++)
        for (size_t o = 0; o < nodes[i].n_out; o++)
            if (nodes[i].out[o] >= 0) g->values[nodes[i].out[o]].producer = (int)i;
    kp__free(g->nodes);
    g->nodes = nodes;
    g->n_nodes = k;
    return KP_OK;
}

kp_status kp__ox_fuse(kp__ox_graph *g) {
    if (g->no_fusion || g->n_nodes == 0) return KP_OK;
    kp__ox_fusing f = {.g = g};
    size_t nv = g->n_values + 1, nn = g->n_nodes + 1;
    f.readers = kp__calloc(nv, sizeof *f.readers);
    f.reader = kp__calloc(nv, sizeof *f.reader);
    f.place = kp__calloc(nn, sizeof *f.place);
    f.moved = kp__calloc(nn, sizeof *f.moved);
    f.fused = kp__calloc(nn, sizeof *f.fused);
    kp_status st = KP_OK;
    if (!f.readers || !f.reader || !f.place || !f.moved || !f.fused)
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "onnx: no memory to fuse nodes");
    bool any = false;
    for (size_t i = 0; st == KP_OK && i < g->n_nodes; i++) {
        f.place[i] = (int)i;
        f.moved[i] = -1;
    }
    if (st == KP_OK) kp__ox_count_readers(&f);
    for (size_t i = 0; st == KP_OK && i < g->n_nodes; i++) {
        if (!kp__ox_is(&g->nodes[i], "Conv") || f.place[i] < 0) continue;
        st = kp__ox_fuse_conv(&f, (int)i);
        any = any || f.place[i] < 0;
    }
    if (st == KP_OK && any) st = kp__ox_reorder(&f);
    kp__free(f.readers);
    kp__free(f.reader);
    kp__free(f.place);
    kp__free(f.moved);
    kp__free(f.fused);
    return st;
}
