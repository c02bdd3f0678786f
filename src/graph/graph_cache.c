/* The graph cache's public calls: create, run (a hit launches; a miss
 * captures or builds, then updates a kept graph or instantiates, or falls
 * back, or fails, by policy), prepare, stats and the report. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cache-impl.h"

const char *kp_graph_miss_str(kp_graph_miss m) {
    switch (m) {
    case KP_GRAPH_MISS_CAPTURE: return "capture";
    case KP_GRAPH_MISS_FALLBACK: return "fallback";
    case KP_GRAPH_MISS_STRICT: return "strict";
    }
    return "invalid";
}

kp_status kp_graph_miss_parse(const char *text, kp_graph_miss *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    for (int m = KP_GRAPH_MISS_CAPTURE; m <= KP_GRAPH_MISS_STRICT; m++)
        if (text && strcmp(text, kp_graph_miss_str((kp_graph_miss)m)) == 0) {
            *out = (kp_graph_miss)m;
            return KP_OK;
        }
    return kp__error(KP_ERR_PARSE, "miss policy \"%s\": expected capture, fallback or strict",
                     text ? text : "(null)");
}

/* Makes the graph of the current call: built, or captured on the cache's stream. */
static kp_status kp__make_graph(kp_graph_cache_t c, kp__gcall *g, const kp_graph_args *a,
                                kp_graph_t *out, void **state) {
    *out = NULL;
    *state = NULL;
    if (g->c.state_bytes && !(*state = kp__calloc(1, g->c.state_bytes)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "graph state: no memory");
    kp_status st;
    if (g->c.build) {
        KP_CHECK_GOTO(kp_graph_create(c->dev, out), st, fail);
        KP_CHECK_GOTO(g->c.build(g->c.user, *out, a, *state), st, fail);
    } else {
        KP_CHECK_GOTO(kp_stream_begin_capture(c->capture), st, fail);
        st = g->c.enqueue(g->c.user, c->capture, a);
        kp_status end = kp_stream_end_capture(c->capture, out);
        if (st == KP_OK) st = end;
        if (st != KP_OK) goto fail;
    }
    c->st.captures++;
    return KP_OK;
fail:
    kp_graph_destroy(*out);
    kp__free(*state);
    *out = NULL;
    *state = NULL;
    return st;
}

/* Re-keys `e` for the current call after its graph was updated. */
static kp_status kp__rekey(kp_graph_cache_t c, kp__gentry *e, const kp__gcall *g) {
    if (e->key_words != g->key_words) {
        uint64_t *k = kp__malloc(g->key_words * sizeof *k);
        if (!k) return kp__error(KP_ERR_OUT_OF_MEMORY, "graph cache: no memory for a key");
        kp__free(e->key);
        e->key = k;
        e->key_words = g->key_words;
    }
    memcpy(e->key, c->key, g->key_words * sizeof *c->key);
    e->hash = g->hash;
    e->shape_hash = g->shape_hash;
    e->id = g->c.id;
    return KP_OK;
}

/* Points the entry at the buffers the current call bakes in. */
static void kp__entry_bufs(kp_graph_cache_t c, kp__gentry *e, const kp__gcall *g, size_t nodes) {
    memset(e->bufs, 0, sizeof e->bufs);
    for (size_t p = 0; p < g->n_ports; p++)
        if (g->need[p]) e->bufs[p] = c->buf[p];
    e->n_ports = g->n_ports;
    e->nodes = nodes;
    /* the buffers are counted once, as the allocator holds them */
    e->bytes = nodes * KP_GRAPH_NODE_BYTES;
    e->stale = false;
    e->copies_known = false; /* its exec's copy nodes are the graph's now */
}

/* Room for one more entry. */
static bool kp__reserve(kp_graph_cache_t c) {
    if (c->n < c->cap) return true;
    size_t cap = c->cap ? c->cap * 2 : 16;
    kp__gentry **ne = kp__malloc(cap * sizeof *ne);
    if (!ne) return false;
    if (c->n) memcpy(ne, c->e, c->n * sizeof *ne);
    kp__free(c->e);
    c->e = ne;
    c->cap = cap;
    return true;
}

/* Tries to update `e`'s executable graph from `graph`, which leads with
 * n_copies input copies: e's must match (a hit sets them where they change). */
static bool kp__try_update(kp_graph_cache_t c, kp__gentry *e, kp_graph_t graph, size_t n_copies) {
    if (!e || e->id != c->cur.c.id || e->state_bytes != c->cur.c.state_bytes ||
        e->n_copies != n_copies)
        return false;
    if (kp_graph_exec_update(e->exec, graph) != KP_OK) {
        kp_clear_error();
        c->st.failed_updates++;
        return false;
    }
    return true;
}

/* The entry to update for the current call, in order of preference: its own
 * key gone stale; past the variant bound, the least recent variant of its
 * shape; a stale graph of the same id; at a bound, the least recent graph. */
static kp__gentry *kp__update_target(kp_graph_cache_t c, kp__gentry *same, int attempt) {
    kp__gcall *g = &c->cur;
    if (attempt == 0) return same;
    if (attempt == 1 && g->in_place) {
        size_t variants = 0, max = c->cfg.max_variants ? c->cfg.max_variants : 4;
        for (size_t i = 0; i < c->n; i++) variants += c->e[i]->shape_hash == g->shape_hash;
        return variants >= max ? kp__gc_lru(c, same, &g->shape_hash) : NULL;
    }
    if (attempt == 2) {
        kp__gentry *best = NULL;
        for (size_t i = 0; i < c->n; i++) {
            kp__gentry *e = c->e[i];
            if (e != same && e->stale && e->id == g->c.id &&
                (!best || e->last_use < best->last_use))
                best = e;
        }
        return best;
    }
    if (attempt == 3) {
        bool full = c->cfg.max_graphs && c->n >= c->cfg.max_graphs;
        if (c->cfg.max_bytes) {
            kp__gc_account(c);
            full = full || c->st.bytes + KP_GRAPH_NODE_BYTES > c->cfg.max_bytes;
        }
        return full ? kp__gc_lru(c, same, NULL) : NULL;
    }
    return NULL;
}

/* A miss with a graph to make: build or capture it, update a kept graph
 * where one fits, else instantiate a new one. *out is the entry to launch. */
/* Entry e, updated or re-pointed for the current call, takes its key. */
static kp_status kp__took_over(kp_graph_cache_t c, kp__gentry *e, kp__gentry *same, size_t nodes,
                               kp__gentry **out) {
    kp__gcall *g = &c->cur;
    if (!e->stale && e != same) c->st.evictions++;
    kp_status st = kp__rekey(c, e, g);
    if (st != KP_OK) {
        kp__gc_remove(c, e);
        return st;
    }
    kp__entry_bufs(c, e, g, nodes);
    c->st.updates++;
    *out = e;
    kp__gc_enforce_bounds(c, e);
    return KP_OK;
}

/* A miss served by the call's retarget on a graph its build made: the
 * entries an update would pick, in the same order. */
static bool kp__retarget(kp_graph_cache_t c, kp__gentry *same, const kp_graph_args *a,
                         kp__gentry **e_out) {
    kp__gcall *g = &c->cur;
    kp__gentry *tried[4] = {NULL, NULL, NULL, NULL};
    for (int attempt = 0; attempt < 4; attempt++) {
        kp__gentry *e = kp__update_target(c, same, attempt);
        bool seen = false;
        for (int j = 0; j < attempt; j++) seen = seen || tried[j] == e;
        tried[attempt] = e;
        /* its copy nodes (set before a launch where they change) must be
         * this call's inputs' */
        if (!e || seen || !e->built || e->id != g->c.id || e->state_bytes != g->c.state_bytes ||
            e->n_copies != kp__gc_copies_wanted(c, g))
            continue;
        if (g->c.retarget(g->c.user, e->exec, a, e->state) != KP_OK) {
            kp_clear_error();
            c->st.failed_updates++;
            e->stale = true; /* half re-pointed: never launched under its old key */
            continue;
        }
        *e_out = e;
        return true;
    }
    return false;
}

static kp_status kp__miss(kp_graph_cache_t c, kp__gentry *same, const kp_graph_args *a,
                          kp__gentry **out) {
    kp__gcall *g = &c->cur;
    kp__gentry *e;
    if (g->c.build && g->c.retarget && kp__retarget(c, same, a, &e))
        return kp__took_over(c, e, same, e->nodes, out);
    kp_graph_t graph;
    void *state;
    KP_CHECK(kp__make_graph(c, g, a, &graph, &state));
    /* the input copies lead the graph: a hit sets them and launches once */
    kp_graph_node_t copies[KP_GRAPH_MAX_PORTS];
    bool copy_nodes;
    kp_status cst = kp__gc_copy_nodes(c, g, graph, copies, &copy_nodes);
    if (cst != KP_OK) {
        kp_graph_destroy(graph);
        kp__free(state);
        return cst;
    }
    const size_t n_copies = copy_nodes ? g->c.n_inputs : 0;
    size_t nodes = kp_graph_node_count(graph);
    kp__gentry *tried[4] = {NULL, NULL, NULL, NULL};
    for (int attempt = 0; attempt < 4; attempt++) {
        e = kp__update_target(c, same, attempt);
        bool seen = false;
        for (int j = 0; j < attempt; j++) seen = seen || tried[j] == e;
        tried[attempt] = e;
        if (!e || seen || !kp__try_update(c, e, graph, n_copies)) continue;
        /* the entry keeps the graph it was instantiated from (its nodes
         * address the exec) and that graph's state */
        kp_graph_destroy(graph);
        kp__free(state);
        return kp__took_over(c, e, same, nodes, out);
    }
    /* no graph to update: a new executable one */
    kp_status st;
    e = kp__calloc(1, sizeof *e);
    if (!e || !kp__reserve(c)) {
        kp__free(e);
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "graph cache: no memory for an entry");
        goto fail;
    }
    e->graph = graph;
    e->state = state;
    e->state_bytes = g->c.state_bytes;
    e->built = g->c.build != NULL;
    e->n_copies = n_copies;
    if (n_copies) {
        memcpy(e->copy, copies, n_copies * sizeof *copies);
        /* without it every launch sets the copies: slower, not wrong */
        e->copy_last = kp__calloc(n_copies, sizeof *e->copy_last);
    }
    graph = NULL;
    state = NULL;
    KP_CHECK_GOTO(kp__rekey(c, e, g), st, fail_entry);
    KP_CHECK_GOTO(kp_graph_instantiate(e->graph, &e->exec), st, fail_entry);
    c->st.instantiations++;
    if (same) {
        kp__gc_remove(c, same); /* its key now has a fresh graph */
        c->st.evictions++;
    }
    kp__entry_bufs(c, e, g, nodes);
    c->e[c->n++] = e;
    *out = e;
    kp__gc_enforce_bounds(c, e);
    return KP_OK;
fail_entry:
    kp__gc_entry_free(e);
fail:
    kp_graph_destroy(graph);
    kp__free(state);
    return st;
}

static kp_status kp__check_config(const kp_graph_cache_config *cfg) {
    if (cfg->miss != KP_GRAPH_MISS_CAPTURE && cfg->miss != KP_GRAPH_MISS_FALLBACK &&
        cfg->miss != KP_GRAPH_MISS_STRICT)
        return kp__error(KP_ERR_INVALID_ARG, "config.miss: unknown policy %d", (int)cfg->miss);
    if (cfg->n_capture_sizes > KP_GRAPH_MAX_CAPTURE_SIZES)
        return kp__error(KP_ERR_INVALID_ARG, "config.n_capture_sizes: %zu (at most %d)",
                         cfg->n_capture_sizes, KP_GRAPH_MAX_CAPTURE_SIZES);
    for (size_t i = 0; i < cfg->n_capture_sizes; i++)
        if (cfg->capture_sizes[i] < 1 || (i && cfg->capture_sizes[i] <= cfg->capture_sizes[i - 1]))
            return kp__error(KP_ERR_INVALID_ARG,
                             "config.capture_sizes[%zu] = %" PRId64
                             ": sizes must be positive and ascending",
                             i, cfg->capture_sizes[i]);
    if (cfg->max_bytes > KP__MAX_ALLOC_BYTES || cfg->max_variants > 1u << 20)
        return kp__error(KP_ERR_INVALID_ARG, "config: max_bytes or max_variants is too large");
    return KP_OK;
}

kp_status kp_graph_cache_create(kp_device_t dev, const kp_graph_cache_config *config,
                                kp_graph_cache_t *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(dev);
    kp_graph_cache_config cfg = KP_GRAPH_CACHE_CONFIG_INIT;
    if (config)
        KP_CHECK(kp__config_read(&cfg, sizeof cfg, config,
                                 KP__SIZE_THROUGH(kp_graph_cache_config, max_variants), "config",
                                 "KP_GRAPH_CACHE_CONFIG_INIT"));
    KP_CHECK(kp__check_config(&cfg));
    kp_graph_cache_t c = kp__calloc(1, sizeof *c);
    if (!c) return kp__error(KP_ERR_OUT_OF_MEMORY, "graph cache: no memory");
    c->dev = dev;
    c->cfg = cfg;
    kp_status st;
    KP_CHECK_GOTO(kp_allocator_create(dev, KP_ALLOCATOR_DEVICE, NULL, &c->alloc), st, fail);
    KP_CHECK_GOTO(kp_stream_create(dev, &c->capture), st, fail);
    *out = c;
    return KP_OK;
fail:
    kp_graph_cache_destroy(c);
    return st;
}

void kp_graph_cache_destroy(kp_graph_cache_t c) {
    if (!c) return;
    if (kp_device_sync(c->dev) != KP_OK) kp_clear_error();
    for (size_t i = 0; i < c->n; i++) kp__gc_entry_free(c->e[i]);
    kp__free(c->e);
    for (size_t p = 0; p < KP_GRAPH_MAX_PORTS; p++)
        if (c->buf[p]) (void)kp_allocator_free(c->alloc, c->buf[p]);
    kp_allocator_destroy(c->alloc);
    kp_stream_destroy(c->capture);
    kp__free(c);
}

static kp_status kp__check_stream(kp_graph_cache_t c, kp_stream_t s) {
    if (!s) return kp__error(KP_ERR_INVALID_ARG, "stream is NULL");
    kp_device_t d = kp_stream_device(s);
    if (d != c->dev)
        return kp__error_devices("graph cache", "stream", d, kp_device_name(d), "cache", c->dev,
                                 kp_device_name(c->dev));
    return KP_OK;
}

/* Runs the current call without a graph: inputs in place, outputs in the
 * static buffers at their exact shapes. */
static kp_status kp__fallback(kp_graph_cache_t c, kp_graph_call *call, kp_stream_t s) {
    kp__gcall *g = &c->cur;
    size_t need[KP_GRAPH_MAX_PORTS] = {0};
    for (size_t j = 0; j < g->c.n_outputs; j++) {
        const kp_tensor_desc *d = &g->c.outputs[j].desc;
        kp_tensor_desc e;
        (void)kp_desc_init(&e, d->dtype, d->ndim, d->shape, NULL);
        need[g->c.n_inputs + j] = (size_t)kp_desc_bytes_needed(&e);
    }
    KP_CHECK(kp__gc_grow(c, need, g->n_ports, NULL));
    kp_graph_args a;
    kp__gc_args(c, g, &a, true);
    c->st.fallbacks++;
    KP_CHECK(g->c.enqueue(g->c.user, s, &a));
    kp__gc_outputs(c, g, call, true);
    return KP_OK;
}

kp_status kp_graph_cache_run(kp_graph_cache_t c, kp_graph_call *call, kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(c ? &c->guard : NULL, "graph cache");
    KP_ARG_CHECK(c);
    KP_CHECK(kp__check_stream(c, s));
    kp__gcall *g = &c->cur;
    KP_CHECK(kp__gc_resolve(c, call, false, g, c->key));
    c->st.calls++;
    c->clock++;
    kp__gentry *e = kp__gc_find(c, g);
    bool hit = kp__gc_launchable(c, e);
    for (size_t p = 0; hit && p < g->n_ports; p++) hit = g->need[p] <= c->buf_bytes[p];
    bool fresh = false;
    if (!hit) {
        char key[256];
        c->st.misses++;
        if (c->cfg.miss == KP_GRAPH_MISS_STRICT)
            return kp__error(KP_ERR_NOT_FOUND,
                             "no graph for %s (policy strict: prepare the shapes first)",
                             kp__gc_key_str(c->key, g->key_words, key, sizeof key));
        if (c->cfg.miss == KP_GRAPH_MISS_FALLBACK) {
            if (!g->c.enqueue)
                return kp__error(KP_ERR_INVALID_ARG,
                                 "policy fallback needs the call's enqueue function");
            return kp__fallback(c, call, s);
        }
        KP_CHECK(kp__gc_grow(c, g->need, g->n_ports, e));
        if (e && !kp__gc_launchable(c, e)) e->stale = true; /* its buffers moved */
        kp_graph_args a;
        kp__gc_args(c, g, &a, false);
        kp_status st = kp__miss(c, e, &a, &e);
        if (st != KP_OK)
            return kp__error_prefix(st, "%s",
                                    kp__gc_key_str(c->key, g->key_words, key, sizeof key));
        fresh = true;
    } else {
        c->st.hits++;
        e->hits++;
    }
    e->last_use = c->clock;
    KP_CHECK(kp__gc_copy_inputs(c, g, e, s));
    if (g->c.bind) {
        kp_graph_args a;
        kp__gc_args(c, g, &a, false);
        KP_CHECK(g->c.bind(g->c.user, e->exec, &a, e->state, fresh));
    }
    KP_CHECK(kp_graph_exec_launch(e->exec, s));
    kp__gc_outputs(c, g, call, false);
    return KP_OK;
}

kp_status kp_graph_cache_prepare(kp_graph_cache_t c, kp_graph_call *calls, size_t n,
                                 kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(c ? &c->guard : NULL, "graph cache");
    KP_ARG_CHECK(c && (calls || n == 0));
    KP_CHECK(kp__check_stream(c, s));
    size_t need[KP_GRAPH_MAX_PORTS] = {0};
    for (size_t i = 0; i < n; i++) {
        kp_status st = kp__gc_resolve(c, &calls[i], true, &c->cur, c->key);
        if (st != KP_OK) return kp__error_prefix(st, "calls[%zu]", i);
        for (size_t p = 0; p < c->cur.n_ports; p++)
            if (c->cur.need[p] > need[p]) need[p] = c->cur.need[p];
    }
    KP_CHECK(kp__gc_grow(c, need, KP_GRAPH_MAX_PORTS, NULL));
    for (size_t i = 0; i < n; i++) {
        kp__gcall *g = &c->cur;
        KP_CHECK(kp__gc_resolve(c, &calls[i], true, g, c->key));
        kp__gentry *e = kp__gc_find(c, g);
        if (!kp__gc_launchable(c, e)) {
            kp_graph_args a;
            kp__gc_args(c, g, &a, false);
            char key[256];
            kp_status st = kp__miss(c, e, &a, &e);
            if (st != KP_OK)
                return kp__error_prefix(st, "calls[%zu] %s", i,
                                        kp__gc_key_str(c->key, g->key_words, key, sizeof key));
            e->last_use = ++c->clock;
            KP_CHECK(kp_graph_exec_upload(e->exec, s));
        }
        /* the outputs' views, as a run gives them: a caller can make its
         * own views of every size before the first run */
        kp__gc_outputs(c, g, &calls[i], false);
    }
    return KP_OK;
}

kp_status kp_graph_cache_stats(kp_graph_cache_t c, kp_graph_stats *out) {
    KP_API_ENTRY();
    KP_GUARD(c ? &c->guard : NULL, "graph cache");
    KP_ARG_CHECK(c && out);
    kp__gc_account(c);
    *out = c->st;
    return KP_OK;
}

kp_status kp_graph_cache_config_get(kp_graph_cache_t c, kp_graph_cache_config *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(c && out);
    *out = c->cfg;
    return KP_OK;
}

const char *kp_graph_cache_report(kp_graph_cache_t c, char *buf, size_t len) {
    if (!buf || !len) return "";
    buf[0] = '\0';
    if (!c) return buf;
    /* KP_GUARD without a status to return: the refusal becomes the text */
    kp__guard *held __attribute__((cleanup(kp__guard_leave))) = NULL;
    if (kp__guard_enter(&c->guard, __func__, "graph cache", &held) != KP_OK) {
        snprintf(buf, len, "%s: %s\n", __func__, kp_last_error());
        return buf;
    }
    kp__gc_account(c);
    const kp_graph_stats *s = &c->st;
    size_t used = (size_t)snprintf(
        buf, len,
        "graph cache (miss %s): %zu graphs (%zu stale), %zu bytes (buffers %zu, graphs %zu); "
        "calls %" PRIu64 ", hits %" PRIu64 ", misses %" PRIu64 ", captures %" PRIu64
        ", updates %" PRIu64 ", instantiations %" PRIu64 ", fallbacks %" PRIu64
        ", invalidations %" PRIu64 ", evictions %" PRIu64 "\n",
        kp_graph_miss_str(c->cfg.miss), s->graphs, s->stale, s->bytes, s->buffer_bytes,
        s->graph_bytes, s->calls, s->hits, s->misses, s->captures, s->updates, s->instantiations,
        s->fallbacks, s->invalidations, s->evictions);
    /* most recently used first: repeated selection, the cache is small */
    uint64_t below = UINT64_MAX;
    for (size_t k = 0; k < c->n && used < len; k++) {
        kp__gentry *best = NULL;
        for (size_t i = 0; i < c->n; i++)
            if (c->e[i]->last_use < below && (!best || c->e[i]->last_use > best->last_use))
                best = c->e[i];
        if (!best) break;
        below = best->last_use;
        char key[512];
        used += (size_t)snprintf(buf + used, len - used,
                                 "  %-5s %s  nodes %zu, bytes %zu, hits %" PRIu64 "\n",
                                 best->stale ? "stale" : "live",
                                 kp__gc_key_str(best->key, best->key_words, key, sizeof key),
                                 best->nodes, best->bytes, best->hits);
    }
    return buf;
}
