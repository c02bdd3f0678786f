/* Tasks as one graph. The kept edges are the graph's edges, so nodes are
 * added straight from them, in submission order; a `launch` task is a
 * kernel node, any other task a child graph captured from its function on
 * a stream kept for capture. A later instantiate first tries to update the
 * executable graph it made before (the backends compare the topology), and
 * builds a new one only when that is refused. */
#include <string.h>

#include "tasks-impl.h"

/* Task i as a node of g after `deps`: a kernel node for a `launch` task,
 * else a child graph captured from what kp__tasks_enqueue puts on a stream. */
static kp_status kp__task_node(kp_tasks_t t, size_t i, kp_graph_t g, const kp_graph_node_t *deps,
                               size_t n_deps, kp_graph_node_t *node) {
    const kp__task *k = &t->tasks[i];
    if (k->k.launch) {
        kp_task_view views[KP_TASK_MAX_ARGS];
        kp__tasks_views(t, k, views);
        _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
        kp_launch l;
        kp_status st = kp__tasks_launch_of(k, views, &l, params);
        if (st == KP_OK) st = kp_graph_add_kernel(g, deps, n_deps, &l, node);
        return st == KP_OK ? KP_OK : kp__error_prefix(st, "task %zu (%s)", i, kp__tasks_name(k));
    }
    kp_graph_t child = NULL;
    kp_status st = kp_stream_begin_capture(t->cap_stream);
    if (st == KP_OK) {
        st = kp__tasks_enqueue(t, i, t->cap_stream); /* names the task when it fails */
        kp_status end = kp_stream_end_capture(t->cap_stream, &child); /* always ended */
        if (st == KP_OK && end != KP_OK)
            st = kp__error_prefix(end, "task %zu (%s)", i, kp__tasks_name(k));
    } else {
        st = kp__error_prefix(st, "task %zu (%s)", i, kp__tasks_name(k));
    }
    if (st == KP_OK) { /* a task that enqueued nothing still orders its successors */
        st = kp_graph_node_count(child) ? kp_graph_add_child(g, deps, n_deps, child, node)
                                        : kp_graph_add_empty(g, deps, n_deps, node);
        if (st != KP_OK) st = kp__error_prefix(st, "task %zu (%s)", i, kp__tasks_name(k));
    }
    kp_graph_destroy(child);
    return st;
}

static kp_status kp__build(kp_tasks_t t, kp_graph_t g) {
    t->n_nodes = 0;
    if (!KP__GROW(t, nodes, t->n_tasks))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for graph nodes");
    if (!t->cap_stream) KP_CHECK(kp_stream_create(t->dev, &t->cap_stream));
    kp_graph_node_t deps[1024]; /* a task keeps at most as many predecessors as submit allows */
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        for (size_t p = 0; p < k->n_preds; p++)
            deps[p] = t->nodes[t->edges[k->first_pred + p].from];
        KP_CHECK(kp__task_node(t, i, g, deps, k->n_preds, &t->nodes[i]));
        t->n_nodes++;
    }
    return KP_OK;
}

static kp_status kp__instantiate(kp_tasks_t t) {
    kp_graph_t g;
    KP_CHECK(kp_graph_create(t->dev, &g));
    kp_status st = kp__build(t, g);
    bool build = st == KP_OK && !t->exec;
    if (st == KP_OK && t->exec) {
        st = kp_graph_exec_update(t->exec, g);
        if (st == KP_OK) t->stats.graph_updates++;
        if (st == KP_ERR_MISMATCH) { /* another shape: a new graph */
            kp_clear_error();
            st = KP_OK;
            build = true;
        }
    }
    if (build) {
        kp_graph_exec_t ge;
        st = kp_graph_instantiate(g, &ge);
        if (st == KP_OK) {
            if (t->exec && kp_device_sync(t->dev) != KP_OK) kp_clear_error(); /* may run still */
            kp_graph_exec_destroy(t->exec);
            t->exec = ge;
            t->stats.graph_builds++;
        }
    }
    kp_graph_destroy(g);
    return st;
}

kp_status kp_tasks_instantiate(kp_tasks_t t) {
    KP_API_ENTRY();
    KP__TASKS(t);
    kp_status st = kp__instantiate(t);
    kp__tasks_reset_set(t);
    return st;
}

kp_status kp_tasks_launch(kp_tasks_t t, kp_stream_t s) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(s);
    if (!t->exec)
        return kp__error(KP_ERR_STATE, "no graph to launch: call kp_tasks_instantiate first");
    return kp_graph_exec_launch(t->exec, s);
}
