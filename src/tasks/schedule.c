/* Tasks on a pool of streams. Tasks go out in submission order (a
 * topological order). A task takes its latest predecessor's stream when
 * that predecessor was the last thing put on it, else the next stream in
 * turn; an event after each task lets tasks on other streams wait for it.
 * Streams are picked before anything is enqueued, so only a task that
 * another stream waits for records an event, and a stream waits once for
 * the latest task it needs from each other stream (a stream's events
 * complete in order). */
#include <string.h>

#include "tasks-impl.h"

void kp__tasks_reset_set(kp_tasks_t t) {
    t->n_tasks = t->n_args = t->n_edges = t->n_scalars = 0;
    for (size_t i = 0; i < t->n_bufs; i++) {
        t->bufs[i].n_acc = 0;
        t->bufs[i].root = t->bufs[i].depth = 0;
    }
    t->n_pool = t->pool_free = 0;
    t->n_bt = t->bt_free = t->bt_depth = 0; /* every index node free; the slabs stay */
    kp_tasks_stats keep = t->stats;
    memset(&t->stats, 0, sizeof t->stats);
    t->stats.runs = keep.runs;
    t->stats.graph_builds = keep.graph_builds;
    t->stats.graph_updates = keep.graph_updates;
}

static kp_status kp__run(kp_tasks_t t, kp_stream_t s);

kp_status kp_tasks_run(kp_tasks_t t, kp_stream_t s) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(s);
    kp_status st = kp__run(t, s);
    kp__tasks_reset_set(t); /* run or failed, the set is spent */
    return st;
}

void kp__tasks_views(const kp_tasks_t t, const kp__task *k, kp_task_view *views) {
    for (size_t a = 0; a < k->n_args; a++) {
        const kp__targ *g = &t->args[k->first_arg + a];
        views[a] = g->v;
        if (g->v.access == KP_TASK_SCALAR)
            views[a].scalar = t->scalars + g->scalar_off;
        else
            views[a].data = kp__tasks_buf(t, g->buffer)->data;
    }
}

const char *kp__tasks_name(const kp__task *k) { return k->k.name ? k->k.name : "unnamed"; }

kp_status kp__tasks_launch_of(const kp__task *k, const kp_task_view *views, kp_launch *l,
                              void *params) {
    memset(l, 0, sizeof *l);
    kp_status st = k->k.launch(k->k.user, views, k->n_args, l, params);
    if (st == KP_OK && !l->kernel)
        st = kp__error(KP_ERR_INVALID_ARG, "its launch function gave no kernel");
    return st;
}

kp_status kp__tasks_enqueue(kp_tasks_t t, size_t i, kp_stream_t s) {
    const kp__task *k = &t->tasks[i];
    kp_task_view views[KP_TASK_MAX_ARGS];
    kp__tasks_views(t, k, views);
    kp_status st;
    if (k->k.launch) {
        _Alignas(16) unsigned char params[KP_MAX_KERNEL_PARAMS];
        kp_launch l;
        st = kp__tasks_launch_of(k, views, &l, params);
        if (st == KP_OK) st = kp_launch_kernel(s, &l);
    } else {
        st = k->k.fn(k->k.user, s, views, k->n_args);
    }
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "task %zu (%s)", i, kp__tasks_name(k));
}

static kp_status kp__run(kp_tasks_t t, kp_stream_t s) {
    while (t->n_task_ev < t->n_tasks) { /* one event per task slot, kept for later runs */
        if (!KP__GROW(t, task_ev, 1))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory for events");
        KP_CHECK(kp_event_create_untimed(t->dev, &t->task_ev[t->n_task_ev]));
        t->n_task_ev++;
    }
    /* streams first: then only tasks that another stream waits for record an event */
    int64_t last[KP_TASKS_MAX_STREAMS]; /* the task last put on each stream; -1: none */
    bool used[KP_TASKS_MAX_STREAMS] = {false};
    for (size_t i = 0; i < t->n_streams; i++) last[i] = -1;
    size_t next = 0;
    for (size_t i = 0; i < t->n_tasks; i++) {
        kp__task *k = &t->tasks[i];
        int pick = -1;
        for (size_t p = k->n_preds; p-- > 0 && pick < 0;) {
            int ps = t->tasks[t->edges[k->first_pred + p].from].stream;
            if (last[ps] == (int64_t)t->edges[k->first_pred + p].from) pick = ps;
        }
        if (pick < 0) pick = (int)(next++ % t->n_streams);
        k->stream = pick;
        k->signals = false;
        last[pick] = (int64_t)i;
        for (size_t p = 0; p < k->n_preds; p++) {
            kp__task *from = &t->tasks[t->edges[k->first_pred + p].from];
            if (from->stream != pick) from->signals = true;
        }
    }
    /* waited[a][b]: the latest task of stream b that stream a waited for */
    int64_t waited[KP_TASKS_MAX_STREAMS][KP_TASKS_MAX_STREAMS];
    for (size_t a = 0; a < t->n_streams; a++)
        for (size_t b = 0; b < t->n_streams; b++) waited[a][b] = -1;
    if (t->n_tasks) KP_CHECK(kp_event_record(t->start_ev, s));
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        int pick = k->stream;
        kp_stream_t st = t->streams[pick];
        if (!used[pick]) {
            KP_CHECK(kp_stream_wait_event(st, t->start_ev));
            used[pick] = true;
        }
        int64_t want[KP_TASKS_MAX_STREAMS]; /* per other stream, its latest predecessor */
        for (size_t b = 0; b < t->n_streams; b++) want[b] = -1;
        for (size_t p = 0; p < k->n_preds; p++) {
            uint64_t from = t->edges[k->first_pred + p].from;
            int ps = t->tasks[from].stream;
            if (ps != pick && (int64_t)from > want[ps]) want[ps] = (int64_t)from;
        }
        for (size_t b = 0; b < t->n_streams; b++) /* a stream's events complete in order */
            if (want[b] > waited[pick][b]) {
                KP_CHECK(kp_stream_wait_event(st, t->task_ev[want[b]]));
                waited[pick][b] = want[b];
            }
        KP_CHECK(kp__tasks_enqueue(t, i, st));
        if (k->signals) KP_CHECK(kp_event_record(t->task_ev[i], st));
    }
    for (size_t i = 0; i < t->n_streams; i++)
        if (used[i]) {
            KP_CHECK(kp_event_record(t->stream_ev[i], t->streams[i]));
            KP_CHECK(kp_stream_wait_event(s, t->stream_ev[i]));
        }
    t->stats.runs++;
    return KP_OK;
}
