/* cpu graphs: recorded DAGs of host-function, copy and child nodes,
 * instantiated into a private copy and run by a stream worker. */
#include <string.h>

#include "cpu-impl.h"

static _Atomic uint64_t kp__cpu_graph_ids = 1;

/* The launch was checked at the public boundary: the kernel has a host form. */
void kp__cpu_kcall_set(kp__cpu_kcall *c, const kp_launch *l) {
    c->k = kp_kernel_find(l->kernel, KP__HOST_FORM);
    c->grid = l->grid;
    c->block = l->block;
    if (l->kernel->params_size) memcpy(c->params, l->params, l->kernel->params_size);
}

kp_status kp__cpu_graph_new(kp__cpu_graph **out) {
    kp__cpu_graph *g = kp__calloc(1, sizeof *g);
    if (!g) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph: no memory");
    g->id = atomic_fetch_add(&kp__cpu_graph_ids, 1);
    *out = g;
    return KP_OK;
}

static void kp__cpu_node_free(kp__cpu_node *n) {
    if (!n) return;
    if (n->w.kind == KP__WORK_CHILD) kp__cpu_graph_free(n->w.u.child);
    kp__free(n->deps);
    kp__free(n);
}

void kp__cpu_graph_free(kp__cpu_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) kp__cpu_node_free(g->nodes[i]);
    kp__free(g->nodes);
    kp__free(g);
}

static kp_status kp__cpu_graph_reserve(kp__cpu_graph *g) {
    if (g->n < g->cap) return KP_OK;
    size_t cap = g->cap ? g->cap * 2 : 8;
    kp__cpu_node **nodes = kp__malloc(cap * sizeof *nodes);
    if (!nodes) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph: no memory for %zu nodes", cap);
    if (g->n) memcpy(nodes, g->nodes, g->n * sizeof *nodes);
    kp__free(g->nodes);
    g->nodes = nodes;
    g->cap = cap;
    return KP_OK;
}

kp_status kp__cpu_graph_append(kp__cpu_graph *g, kp__cpu_work_kind kind,
                               const kp_graph_node_t *deps, size_t n, kp__cpu_node **out) {
    for (size_t i = 0; i < n; i++) {
        const kp__cpu_node *d = (const kp__cpu_node *)deps[i];
        if (d->graph_id != g->id || d->index >= g->n || g->nodes[d->index] != d)
            return kp__error(KP_ERR_INVALID_ARG,
                             "graph node: dependency %zu is not a node of "
                             "this graph",
                             i);
    }
    KP_CHECK(kp__cpu_graph_reserve(g));
    kp__cpu_node *node = kp__calloc(1, sizeof *node);
    uint32_t *dep_idx = n ? kp__malloc(n * sizeof *dep_idx) : NULL;
    if (!node || (n && !dep_idx)) {
        kp__free(node);
        kp__free(dep_idx);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "graph node: no memory");
    }
    for (size_t i = 0; i < n; i++) dep_idx[i] = ((const kp__cpu_node *)deps[i])->index;
    node->w.kind = kind;
    node->index = (uint32_t)g->n;
    node->graph_id = g->id;
    node->n_deps = (uint32_t)n;
    node->deps = dep_idx;
    g->nodes[g->n++] = node;
    *out = node;
    return KP_OK;
}

/* Deep copy that keeps the source's id, so node handles of the source
 * address the copy's nodes. */
static kp_status kp__cpu_graph_clone(const kp__cpu_graph *src, kp__cpu_graph **out) {
    kp__cpu_graph *g = kp__calloc(1, sizeof *g);
    kp_status st = KP_OK;
    if (!g) return kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph clone: no memory");
    g->id = src->id;
    g->nodes = kp__calloc(src->n ? src->n : 1, sizeof *g->nodes);
    if (!g->nodes) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph clone: no memory");
        goto fail;
    }
    g->cap = src->n ? src->n : 1;
    for (size_t i = 0; i < src->n; i++) {
        const kp__cpu_node *s = src->nodes[i];
        kp__cpu_node *d = kp__malloc(sizeof *d);
        if (!d) {
            st = kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph clone: no memory");
            goto fail;
        }
        *d = *s;
        d->deps = NULL;
        if (d->w.kind == KP__WORK_CHILD) d->w.u.child = NULL;
        g->nodes[g->n++] = d;
        if (s->n_deps) {
            d->deps = kp__malloc(s->n_deps * sizeof *d->deps);
            if (!d->deps) {
                st = kp__error(KP_ERR_OUT_OF_MEMORY, "cpu graph clone: no memory");
                goto fail;
            }
            memcpy(d->deps, s->deps, s->n_deps * sizeof *d->deps);
        }
        if (s->w.kind == KP__WORK_CHILD)
            KP_CHECK_GOTO(kp__cpu_graph_clone(s->w.u.child, &d->w.u.child), st, fail);
    }
    *out = g;
    return KP_OK;
fail:
    kp__cpu_graph_free(g);
    return st;
}

/* KP_OK when `a` and `b` have the same nodes, kinds and edges (recursively). */
static kp_status kp__cpu_same_topology(const kp__cpu_graph *a, const kp__cpu_graph *b,
                                       const char *where) {
    if (a->n != b->n)
        return kp__error(KP_ERR_MISMATCH, "%s: graph has %zu nodes, expected %zu", where, b->n,
                         a->n);
    for (size_t i = 0; i < a->n; i++) {
        const kp__cpu_node *x = a->nodes[i], *y = b->nodes[i];
        if (x->w.kind != y->w.kind || x->n_deps != y->n_deps ||
            (x->n_deps && memcmp(x->deps, y->deps, x->n_deps * sizeof *x->deps) != 0))
            return kp__error(KP_ERR_MISMATCH, "%s: node %zu differs in kind or dependencies", where,
                             i);
        if (x->w.kind == KP__WORK_CHILD)
            KP_CHECK(kp__cpu_same_topology(x->w.u.child, y->w.u.child, where));
    }
    return KP_OK;
}

/* Copies parameters of `src` into `dst` (same topology). */
static void kp__cpu_copy_params(kp__cpu_graph *dst, const kp__cpu_graph *src) {
    for (size_t i = 0; i < dst->n; i++) {
        kp__cpu_node *d = dst->nodes[i];
        const kp__cpu_node *s = src->nodes[i];
        if (d->w.kind == KP__WORK_CHILD)
            kp__cpu_copy_params(d->w.u.child, s->w.u.child);
        else
            d->w = s->w;
    }
}

/* --- vtable slots ---------------------------------------------------------------- */
kp_status kp__cpu_graph_create(void *ctx, void **out) {
    return kp__cpu_graph_new((kp__cpu_graph **)out);
}

void kp__cpu_graph_destroy(void *ctx, void *g) { kp__cpu_graph_free(g); }

kp_status kp__cpu_graph_add_kernel(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   const kp_launch *l, kp_graph_node_t *out) {
    kp__cpu_node *node = NULL;
    KP_CHECK(kp__cpu_graph_append(g, KP__WORK_KERNEL, deps, n, &node));
    kp__cpu_kcall_set(&node->w.u.kernel, l);
    *out = (kp_graph_node_t)node;
    return KP_OK;
}

kp_status kp__cpu_graph_add_memcpy(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                   void *dst, const void *src, size_t bytes, kp_graph_node_t *out) {
    kp__cpu_node *node = NULL;
    KP_CHECK(kp__cpu_graph_append(g, KP__WORK_COPY, deps, n, &node));
    node->w.u.copy.dst = dst;
    node->w.u.copy.src = src;
    node->w.u.copy.bytes = bytes;
    *out = (kp_graph_node_t)node;
    return KP_OK;
}

kp_status kp__cpu_graph_add_child(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  void *child, kp_graph_node_t *out) {
    kp__cpu_graph *copy;
    kp__cpu_node *node = NULL;
    KP_CHECK(kp__cpu_graph_clone(child, &copy));
    kp_status st = kp__cpu_graph_append(g, KP__WORK_CHILD, deps, n, &node);
    if (st != KP_OK) {
        kp__cpu_graph_free(copy);
        return st;
    }
    node->w.u.child = copy;
    *out = (kp_graph_node_t)node;
    return KP_OK;
}

kp_status kp__cpu_graph_add_empty(void *ctx, void *g, const kp_graph_node_t *deps, size_t n,
                                  kp_graph_node_t *out) {
    kp__cpu_node *node = NULL;
    KP_CHECK(kp__cpu_graph_append(g, KP__WORK_EMPTY, deps, n, &node));
    *out = (kp_graph_node_t)node;
    return KP_OK;
}

size_t kp__cpu_graph_node_count(void *ctx, void *g) { return ((kp__cpu_graph *)g)->n; }

kp_status kp__cpu_graph_instantiate(void *ctx, void *g, void **out) {
    kp__cpu_exec *e = kp__calloc(1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "graph instantiate: no memory");
    kp_status st = kp__cpu_graph_clone(g, &e->g);
    if (st != KP_OK) {
        kp__free(e);
        return st;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->idle, NULL);
    *out = e;
    return KP_OK;
}

/* Parameter updates apply to later launches only: wait until launches already
 * queued have run, then change the copy. Returns with e->mu held. */
static void kp__cpu_exec_quiesce(kp__cpu_exec *e) {
    pthread_mutex_lock(&e->mu);
    while (e->finished != e->launched) pthread_cond_wait(&e->idle, &e->mu);
}

void kp__cpu_exec_destroy(void *ctx, void *ge) {
    kp__cpu_exec *e = ge;
    kp__cpu_exec_quiesce(e);
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->idle);
    kp__cpu_graph_free(e->g);
    kp__free(e);
}

void kp__cpu_exec_launched(kp__cpu_exec *e) {
    pthread_mutex_lock(&e->mu);
    e->launched++;
    pthread_mutex_unlock(&e->mu);
}

void kp__cpu_exec_finished(kp__cpu_exec *e) {
    pthread_mutex_lock(&e->mu);
    if (++e->finished == e->launched) pthread_cond_broadcast(&e->idle);
    pthread_mutex_unlock(&e->mu);
}

void kp__cpu_work_run(kp__cpu_device *dev, const kp__cpu_work *w) {
    switch (w->kind) {
    case KP__WORK_KERNEL: kp__cpu_kcall_run(dev->pool, &w->u.kernel); break;
    case KP__WORK_COPY: memmove(w->u.copy.dst, w->u.copy.src, w->u.copy.bytes); break;
    case KP__WORK_SET: memset(w->u.set.dst, w->u.set.value, w->u.set.bytes); break;
    case KP__WORK_COPY2D:
        for (size_t i = 0; i < w->u.copy2d.height; i++)
            memmove((char *)w->u.copy2d.dst + i * w->u.copy2d.dpitch,
                    (const char *)w->u.copy2d.src + i * w->u.copy2d.spitch, w->u.copy2d.width);
        break;
    case KP__WORK_HOST: w->u.host.fn(w->u.host.user); break;
    case KP__WORK_EMPTY: break;
    case KP__WORK_CHILD:
        for (size_t i = 0; i < w->u.child->n; i++) kp__cpu_work_run(dev, &w->u.child->nodes[i]->w);
        break;
    }
}

void kp__cpu_exec_run(kp__cpu_device *dev, kp__cpu_exec *e) {
    for (size_t i = 0; i < e->g->n; i++) kp__cpu_work_run(dev, &e->g->nodes[i]->w);
}

/* The exec's node for a handle of its source graph, checked. */
static kp_status kp__cpu_exec_node(kp__cpu_exec *e, kp_graph_node_t handle, kp__cpu_work_kind kind,
                                   const char *what, kp__cpu_node **out) {
    const kp__cpu_node *src = (const kp__cpu_node *)handle;
    if (src->graph_id != e->g->id || src->index >= e->g->n)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s: node is not a top-level node of the graph this "
                         "exec was instantiated from",
                         what);
    kp__cpu_node *n = e->g->nodes[src->index];
    if (n->w.kind != kind)
        return kp__error(KP_ERR_INVALID_ARG, "%s: node %u is of another kind", what, src->index);
    *out = n;
    return KP_OK;
}

kp_status kp__cpu_exec_set_kernel(void *ctx, void *ge, kp_graph_node_t node, const kp_launch *l) {
    kp__cpu_exec *e = ge;
    kp__cpu_node *n = NULL;
    KP_CHECK(kp__cpu_exec_node(e, node, KP__WORK_KERNEL, "set kernel params", &n));
    kp__cpu_exec_quiesce(e);
    kp__cpu_kcall_set(&n->w.u.kernel, l);
    pthread_mutex_unlock(&e->mu);
    return KP_OK;
}

kp_status kp__cpu_exec_set_memcpy(void *ctx, void *ge, kp_graph_node_t node, void *dst,
                                  const void *src, size_t bytes) {
    kp__cpu_exec *e = ge;
    kp__cpu_node *n = NULL;
    KP_CHECK(kp__cpu_exec_node(e, node, KP__WORK_COPY, "set memcpy params", &n));
    kp__cpu_exec_quiesce(e);
    n->w.u.copy.dst = dst;
    n->w.u.copy.src = src;
    n->w.u.copy.bytes = bytes;
    pthread_mutex_unlock(&e->mu);
    return KP_OK;
}

kp_status kp__cpu_exec_set_child(void *ctx, void *ge, kp_graph_node_t node, void *child) {
    kp__cpu_exec *e = ge;
    kp__cpu_node *n = NULL;
    KP_CHECK(kp__cpu_exec_node(e, node, KP__WORK_CHILD, "set child graph", &n));
    KP_CHECK(kp__cpu_same_topology(n->w.u.child, child, "set child graph"));
    kp__cpu_exec_quiesce(e);
    kp__cpu_copy_params(n->w.u.child, child);
    pthread_mutex_unlock(&e->mu);
    return KP_OK;
}

kp_status kp__cpu_exec_update(void *ctx, void *ge, void *g) {
    kp__cpu_exec *e = ge;
    KP_CHECK(kp__cpu_same_topology(e->g, g, "graph exec update"));
    kp__cpu_exec_quiesce(e);
    kp__cpu_copy_params(e->g, g);
    pthread_mutex_unlock(&e->mu);
    return KP_OK;
}
