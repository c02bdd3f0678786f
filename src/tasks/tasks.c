/* Tasks: the set's life (create, destroy, the live handles that refuse
 * calls on a destroyed set), its buffers, the checks every submitted
 * argument passes, and inspection (edges, stats, the DOT file). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks-impl.h"

/* The live sets: calls on a destroyed set are refused, not undefined. */
static pthread_mutex_t kp__live_mu = PTHREAD_MUTEX_INITIALIZER;
static kp_tasks_t *kp__live;
static size_t kp__n_live, kp__cap_live;

static void kp__tasks_free(kp_tasks_t t);

static bool kp__tasks_live_add(kp_tasks_t t) {
    pthread_mutex_lock(&kp__live_mu);
    bool ok = true;
    if (kp__n_live == kp__cap_live) {
        size_t cap = kp__cap_live ? 2 * kp__cap_live : 16;
        kp_tasks_t *n = kp__malloc(cap * sizeof *n);
        if (n) {
            if (kp__n_live) memcpy(n, kp__live, kp__n_live * sizeof *n);
            kp__free(kp__live);
            kp__live = n;
            kp__cap_live = cap;
        }
        ok = n != NULL;
    }
    if (ok) kp__live[kp__n_live++] = t;
    pthread_mutex_unlock(&kp__live_mu);
    return ok;
}

bool kp__tasks_live(kp_tasks_t t, bool remove) {
    pthread_mutex_lock(&kp__live_mu);
    bool found = false;
    for (size_t i = 0; i < kp__n_live && !found; i++)
        if (kp__live[i] == t) {
            found = true;
            if (remove) kp__live[i] = kp__live[--kp__n_live];
        }
    if (remove && !kp__n_live) { /* the last one out frees the list */
        kp__free(kp__live);
        kp__live = NULL;
        kp__cap_live = 0;
    }
    pthread_mutex_unlock(&kp__live_mu);
    return found;
}

/* Room for one more of `size` bytes in *arr (count n, capacity *cap). */
bool kp__tasks_grow(void **arr, size_t n, size_t *cap, size_t size, size_t want) {
    if (n + want <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < n + want) c *= 2;
    void *p = kp__malloc(c * size);
    if (!p) return false;
    if (n && *arr) memcpy(p, *arr, n * size);
    kp__free(*arr);
    *arr = p;
    *cap = c;
    return true;
}

kp_status kp_tasks_create(kp_device_t dev, size_t n_streams, kp_tasks_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(dev);
    if (n_streams < 1 || n_streams > KP_TASKS_MAX_STREAMS)
        return kp__error(KP_ERR_INVALID_ARG, "n_streams is %zu (1 .. %d)", n_streams,
                         KP_TASKS_MAX_STREAMS);
    kp_tasks_t t = kp__calloc(1, sizeof *t);
    if (!t) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    t->dev = dev;
    kp_status st = kp_device_allocator(dev, KP_ALLOCATOR_DEVICE, &t->alloc);
    if (st == KP_OK) st = kp_event_create_untimed(dev, &t->start_ev);
    for (size_t i = 0; i < n_streams && st == KP_OK; i++) {
        st = kp_stream_create(dev, &t->streams[i]);
        if (st == KP_OK) t->n_streams++;
        if (st == KP_OK) st = kp_event_create_untimed(dev, &t->stream_ev[i]);
    }
    if (st == KP_OK && !kp__tasks_live_add(t))
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    if (st != KP_OK) {
        kp__tasks_free(t);
        return st;
    }
    *out = t;
    return KP_OK;
}

static void kp__tasks_free(kp_tasks_t t) {
    for (size_t i = 0; i < t->n_streams; i++) {
        if (kp_stream_sync(t->streams[i]) != KP_OK) kp_clear_error();
        kp_stream_destroy(t->streams[i]);
        kp_event_destroy(t->stream_ev[i]);
    }
    kp_event_destroy(t->start_ev);
    if (t->exec && kp_device_sync(t->dev) != KP_OK) /* a launch may still use the buffers */
        kp_clear_error();
    kp_graph_exec_destroy(t->exec);
    kp_stream_destroy(t->cap_stream);
    for (size_t i = 0; i < t->n_task_ev; i++) kp_event_destroy(t->task_ev[i]);
    for (size_t i = 0; i < t->n_bufs; i++) {
        if (t->bufs[i].owned && t->bufs[i].data &&
            kp_allocator_free(t->alloc, t->bufs[i].data) != KP_OK)
            kp_clear_error();
    }
    kp__free(t->pool);
    kp__tasks_index_free(t);
    kp__free(t->drop);
    kp__free(t->bufs);
    kp__free(t->tasks);
    kp__free(t->args);
    kp__free(t->edges);
    kp__free(t->scalars);
    kp__free(t->task_ev);
    kp__free(t->nodes);
    kp__free(t);
}

void kp_tasks_destroy(kp_tasks_t t) {
    if (t && kp__tasks_live(t, true)) kp__tasks_free(t); /* a second destroy does nothing */
}

static kp_status kp__new_buffer(kp_tasks_t t, void *data, size_t bytes, uint32_t *id) {
    if (bytes < 1 || bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "bytes is %zu (1 .. 2^48)", bytes);
    if (t->n_bufs >= KP__MAX_TASK_BUFFERS)
        return kp__error(KP_ERR_INVALID_ARG, "the set has %u buffers already",
                         KP__MAX_TASK_BUFFERS);
    if (!KP__GROW(t, bufs, 1)) return kp__error(KP_ERR_OUT_OF_MEMORY, "tasks: no memory");
    kp__tbuf *b = &t->bufs[t->n_bufs++];
    memset(b, 0, sizeof *b);
    b->bytes = bytes;
    b->data = data;
    *id = (uint32_t)t->n_bufs;
    return KP_OK;
}

kp_status kp_tasks_buffer(kp_tasks_t t, size_t bytes, uint32_t *id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(id);
    return kp__new_buffer(t, NULL, bytes, id);
}

kp_status kp_tasks_buffer_wrap(kp_tasks_t t, void *data, size_t bytes, uint32_t *id) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(id && data);
    return kp__new_buffer(t, data, bytes, id);
}

kp__tbuf *kp__tasks_buf(kp_tasks_t t, uint32_t id) {
    return id >= 1 && id <= t->n_bufs ? &t->bufs[id - 1] : NULL;
}

kp_status kp_tasks_buffer_data(kp_tasks_t t, uint32_t id, void **out) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(out);
    kp__tbuf *b = kp__tasks_buf(t, id);
    if (!b) return kp__error(KP_ERR_NOT_FOUND, "no buffer %u (the set has %zu)", id, t->n_bufs);
    *out = b->data;
    return KP_OK;
}

kp_status kp__tasks_check_arg(kp_tasks_t t, const kp_task_arg *a, size_t i) {
    if (a->access == KP_TASK_SCALAR) {
        if (a->buffer)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: a SCALAR names buffer %u (a tensor is IN, OUT or "
                             "INOUT)",
                             i, a->buffer);
        if (!a->scalar || a->scalar_bytes < 1 || a->scalar_bytes > KP_TASK_MAX_SCALAR)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: a scalar needs its value and 1 to %d bytes (%zu)", i,
                             KP_TASK_MAX_SCALAR, a->scalar_bytes);
        return KP_OK;
    }
    if (a->access != KP_TASK_IN && a->access != KP_TASK_OUT && a->access != KP_TASK_INOUT)
        return kp__error(KP_ERR_INVALID_ARG, "argument %zu: unknown access %d", i, (int)a->access);
    if (a->scalar || a->scalar_bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "argument %zu: a tensor argument carries a scalar (a scalar is "
                         "KP_TASK_SCALAR)",
                         i);
    kp__tbuf *b = kp__tasks_buf(t, a->buffer);
    if (!b)
        return kp__error(KP_ERR_NOT_FOUND, "argument %zu: no buffer %u (the set has %zu)", i,
                         a->buffer, t->n_bufs);
    if (kp_desc_validate(&a->desc) != KP_OK)
        return kp__error_prefix(KP_ERR_INVALID_ARG, "argument %zu (buffer %u)", i, a->buffer);
    int64_t need = kp_desc_bytes_needed(&a->desc);
    char d[96];
    if (need < 0 || (uint64_t)need > b->bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "argument %zu: region %s at offset %lld reaches byte %lld of buffer %u, "
                         "which has %zu",
                         i, kp_desc_str(&a->desc, d, sizeof d), (long long)a->desc.offset,
                         (long long)need, a->buffer, b->bytes);
    return KP_OK;
}

kp_status kp__tasks_check_first(kp_tasks_t t, const kp_task_arg *args, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const kp_task_arg *a = &args[i];
        if (a->access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__tasks_buf(t, a->buffer);
        if (b->data) continue;
        bool reads = false, whole = false;
        for (size_t j = 0; j < n; j++) /* every argument of this task on the buffer */
            if (args[j].access != KP_TASK_SCALAR && args[j].buffer == a->buffer) {
                reads |= args[j].access != KP_TASK_OUT;
                whole |= args[j].access == KP_TASK_OUT && kp_desc_is_contiguous(&args[j].desc) &&
                         kp_desc_bytes_needed(&args[j].desc) == (int64_t)b->bytes &&
                         args[j].desc.offset == 0;
            }
        if (reads)
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: buffer %u is read before any task wrote it", i,
                             a->buffer);
        if (!whole) {
            char d[96];
            return kp__error(KP_ERR_INVALID_ARG,
                             "argument %zu: buffer %u is allocated by its first writer, whose "
                             "region must cover its %zu bytes contiguously from 0 (%s at offset "
                             "%lld does not)",
                             i, a->buffer, b->bytes, kp_desc_str(&a->desc, d, sizeof d),
                             (long long)a->desc.offset);
        }
    }
    return KP_OK;
}

kp_status kp__tasks_allocate_first(kp_tasks_t t, const kp_task_arg *args, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (args[i].access == KP_TASK_SCALAR) continue;
        kp__tbuf *b = kp__tasks_buf(t, args[i].buffer);
        if (b->data) continue;
        kp_status st = kp_allocator_alloc(t->alloc, b->bytes, NULL, &b->data);
        if (st != KP_OK) {
            for (size_t j = 0; j < i; j++) { /* undo this task's allocations */
                kp__tbuf *o =
                    args[j].access == KP_TASK_SCALAR ? NULL : kp__tasks_buf(t, args[j].buffer);
                if (o && o->owned && o->version == 0 && o->data) {
                    if (kp_allocator_free(t->alloc, o->data) != KP_OK) kp_clear_error();
                    o->data = NULL;
                    o->owned = false;
                }
            }
            return kp__error_prefix(st, "buffer %u (first written by argument %zu)", args[i].buffer,
                                    i);
        }
        b->owned = true;
    }
    return KP_OK;
}

kp_status kp_tasks_edges(kp_tasks_t t, kp_task_edge *out, size_t cap, size_t *n) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(n && (out || !cap));
    *n = t->n_edges;
    size_t k = cap < t->n_edges ? cap : t->n_edges;
    if (k) memcpy(out, t->edges, k * sizeof *out);
    return KP_OK;
}

kp_status kp_tasks_stats_get(kp_tasks_t t, kp_tasks_stats *out) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(out);
    *out = t->stats;
    for (size_t i = 0; i < t->n_bufs; i++) out->regions_live += t->bufs[i].n_acc;
    return KP_OK;
}

static const char *kp__hazard_str(kp_hazard h) {
    return h == KP_HAZARD_RAW ? "RAW" : h == KP_HAZARD_WAR ? "WAR" : "WAW";
}

kp_status kp_tasks_write_dot(kp_tasks_t t, const char *path) {
    KP_API_ENTRY();
    KP__TASKS(t);
    KP_ARG_CHECK(path);
    FILE *f = fopen(path, "w");
    if (!f) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "digraph tasks {\n  node [shape=box, fontname=monospace];\n");
    for (size_t i = 0; i < t->n_tasks; i++) {
        const kp__task *k = &t->tasks[i];
        fprintf(f, "  t%zu [label=\"%zu: ", i, i);
        for (const char *c = k->k.name ? k->k.name : "task"; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) fputc(*c, f);
        for (size_t a = 0; a < k->n_args; a++) {
            const kp__targ *g = &t->args[k->first_arg + a];
            char d[96];
            static const char *const acc[] = {"", "in", "out", "inout", "scalar"};
            if (g->v.access == KP_TASK_SCALAR)
                fprintf(f, "\\n%s %zu B", acc[g->v.access], g->v.scalar_bytes);
            else
                fprintf(f, "\\n%s b%u v%llu %s @%lld", acc[g->v.access], g->buffer,
                        (unsigned long long)g->version, kp_desc_str(&g->v.desc, d, sizeof d),
                        (long long)g->v.desc.offset);
        }
        fprintf(f, "\"];\n");
    }
    for (size_t e = 0; e < t->n_edges; e++)
        fprintf(f, "  t%llu -> t%llu [label=\"%s b%u\"];\n", (unsigned long long)t->edges[e].from,
                (unsigned long long)t->edges[e].to, kp__hazard_str(t->edges[e].hazard),
                t->edges[e].buffer);
    fprintf(f, "}\n");
    if (fclose(f) != 0) return kp__error(KP_ERR_IO, "%s: writing failed", path);
    return KP_OK;
}
