/* The graph cache's entries: found by full key, freed, accounted, and
 * evicted least recently used first (stale ones before live ones) until
 * the count and byte bounds hold. */
#include <string.h>

#include "cache-impl.h"

kp__gentry *kp__gc_find(kp_graph_cache_t c, const kp__gcall *g) {
    for (size_t i = 0; i < c->n; i++) {
        kp__gentry *e = c->e[i];
        if (e->hash == g->hash && e->key_words == g->key_words &&
            memcmp(e->key, c->key, g->key_words * sizeof *c->key) == 0)
            return e;
    }
    return NULL;
}

bool kp__gc_launchable(kp_graph_cache_t c, const kp__gentry *e) {
    if (!e || e->stale) return false;
    for (size_t p = 0; p < e->n_ports; p++)
        if (e->bufs[p] && e->bufs[p] != c->buf[p]) return false;
    return true;
}

void kp__gc_entry_free(kp__gentry *e) {
    if (!e) return;
    kp_graph_exec_destroy(e->exec);
    kp_graph_destroy(e->graph);
    kp__free(e->state);
    kp__free(e->key);
    kp__free(e->copy_last);
    kp__free(e);
}

void kp__gc_account(kp_graph_cache_t c) {
    kp_alloc_stats as;
    size_t gb = 0, stale = 0;
    for (size_t i = 0; i < c->n; i++) {
        gb += c->e[i]->bytes;
        stale += c->e[i]->stale;
    }
    c->st.graphs = c->n;
    c->st.stale = stale;
    c->st.graph_bytes = gb;
    c->st.buffer_bytes = kp_allocator_stats(c->alloc, &as) == KP_OK ? as.allocated : 0;
    c->st.bytes = c->st.buffer_bytes + gb;
    if (c->st.bytes > c->st.peak_bytes) c->st.peak_bytes = c->st.bytes;
}

void kp__gc_remove(kp_graph_cache_t c, kp__gentry *e) {
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i] == e) {
            c->e[i] = c->e[--c->n];
            break;
        }
    kp__gc_entry_free(e);
}

kp__gentry *kp__gc_lru(kp_graph_cache_t c, const kp__gentry *skip, const uint64_t *same_shape) {
    kp__gentry *best = NULL;
    for (size_t i = 0; i < c->n; i++) {
        kp__gentry *e = c->e[i];
        if (e == skip || (same_shape && e->shape_hash != *same_shape)) continue;
        if (!best || (e->stale && !best->stale) ||
            (e->stale == best->stale && e->last_use < best->last_use))
            best = e;
    }
    return best;
}

void kp__gc_enforce_bounds(kp_graph_cache_t c, const kp__gentry *keep) {
    for (;;) {
        kp__gc_account(c);
        bool over = (c->cfg.max_graphs && c->n > c->cfg.max_graphs) ||
                    (c->cfg.max_bytes && c->st.bytes > c->cfg.max_bytes);
        kp__gentry *v = over ? kp__gc_lru(c, keep, NULL) : NULL;
        if (!v) return;
        kp__gc_remove(c, v);
        c->st.evictions++;
    }
}
