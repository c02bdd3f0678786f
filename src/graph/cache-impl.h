/* The graph cache: executable graphs keyed by full call signatures, static
 * buffers that grow, update before instantiate, LRU under a count and a
 * byte budget.
 *
 * A key is a string of 64-bit words (the call's id, flags, every port's
 * dtype, mask and padded shape, the literals, then the input addresses of an
 * in-place call). Entries sit in one array scanned by 64-bit hash, and a
 * hash match is confirmed by comparing the whole key, so two keys never
 * share a graph. A hit allocates nothing: the key is written into a buffer
 * the cache keeps. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kpipe/graph_cache.h"
#include "../core/core-impl.h"

#define KP__KEY_HEAD 5 /* id, flags, n_inputs, n_outputs, n_literals */
#define KP__KEY_PORT (3 + KP_MAX_DIMS)
#define KP__KEY_WORDS \
    (KP__KEY_HEAD + KP_GRAPH_MAX_PORTS * KP__KEY_PORT + KP_GRAPH_MAX_LITERALS + KP_GRAPH_MAX_PORTS)
/* The device allocator's rounding of a request: the budget check predicts
 * what its stats will then report. */
#define KP__ALLOC_ROUND 512


typedef struct kp__gentry {
    uint64_t hash;       /* of the whole key */
    uint64_t shape_hash; /* of the key without input addresses */
    uint64_t *key;
    size_t key_words;
    uint64_t id;
    kp_graph_t graph; /* the graph it was instantiated from: its nodes address the exec */
    kp_graph_exec_t exec;
    void *state;
    size_t state_bytes;
    void *bufs[KP_GRAPH_MAX_PORTS]; /* static buffers baked in (NULL: not used) */
    size_t n_ports;
    size_t nodes, bytes;
    uint64_t last_use, hits;
    bool stale;
} kp__gentry;

/* One call, resolved: padded descriptors, the key, what the buffers need. */
typedef struct kp__gcall {
    kp_graph_call c;
    bool in_place;
    size_t n_ports;
    kp_tensor_desc padded[KP_GRAPH_MAX_PORTS];
    kp_port_info args_in[KP_GRAPH_MAX_PORTS], args_out[KP_GRAPH_MAX_PORTS];
    size_t need[KP_GRAPH_MAX_PORTS]; /* static buffer bytes per port; 0: none */
    size_t key_words;
    uint64_t hash, shape_hash;
} kp__gcall;

struct kp_graph_cache {
    kp_device_t dev;
    kp_graph_cache_config cfg;
    kp_allocator_t alloc; /* the static buffers' own allocator, for exact stats */
    kp_stream_t capture;  /* graphs are captured here */
    void *buf[KP_GRAPH_MAX_PORTS];
    size_t buf_bytes[KP_GRAPH_MAX_PORTS];
    kp__gentry **e;
    size_t n, cap;
    uint64_t clock;
    kp_graph_stats st;
    uint64_t key[KP__KEY_WORDS]; /* the current call's key */
    kp__gcall cur;
};

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

/* --- keys --------------------------------------------------------------------------- */
static uint64_t kp__mix(uint64_t h, uint64_t w) {
    h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t kp__hash(const uint64_t *w, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = kp__mix(h, w[i]);
    return h ^ (h >> 33);
}

/* The smallest capture size that holds x; x itself past the largest. */
static int64_t kp__round_up(const kp_graph_cache_config *cfg, int64_t x) {
    for (size_t i = 0; i < cfg->n_capture_sizes; i++)
        if (cfg->capture_sizes[i] >= x) return cfg->capture_sizes[i];
    return x;
}

/* How an input reaches its padded static buffer: one copy per run of the
 * innermost padded dimension `inner` (-1: none padded, one copy). */
typedef struct kp__copy_plan {
    int inner;
    int64_t runs, run_elems;
} kp__copy_plan;

/* Plans the copy of `a` into the layout of `pd`; returns the copies. */
static int64_t kp__plan_copy(const kp_tensor_desc *a, const kp_tensor_desc *pd,
                             kp__copy_plan *out) {
    out->inner = -1;
    for (int k = 0; k < a->ndim; k++)
        if (a->shape[k] != pd->shape[k]) out->inner = k;
    out->runs = 1;
    out->run_elems = kp_desc_numel(a);
    if (out->inner < 0 || out->run_elems == 0) return out->run_elems ? 1 : 0;
    int i = out->inner;
    out->run_elems = a->shape[i] * (i + 1 < a->ndim ? pd->strides[i] : 1);
    for (int k = 0; k < i; k++) out->runs *= a->shape[k];
    return out->runs;
}

/* Checks one port of a call and fills its padded descriptor. The hit path
 * runs this per port: nothing is formatted unless it fails. */
static kp_status kp__port(kp_graph_cache_t c, kp__gcall *g, size_t p, const kp_port_info *pi,
                          bool input) {
    uint32_t mask = g->c.dynamic ? g->c.dynamic[p] : 0;
    const kp_tensor_desc *d = &pi->desc;
    size_t idx = input ? p : p - g->c.n_inputs;
    const char *side = input ? "input" : "output";
    kp_tensor_desc *pd = &g->padded[p];
    g->need[p] = 0;
    if (input && g->in_place) {
        if (kp_desc_validate(d) != KP_OK) goto invalid;
        *pd = *d; /* read where it is: exact, as given */
    } else {
        if (!input && (d->ndim < 0 || d->ndim > KP_MAX_DIMS))
            return kp__error(KP_ERR_INVALID_ARG, "output %zu: %d dimensions (0..%d allowed)", idx,
                             d->ndim, KP_MAX_DIMS);
        int64_t shape[KP_MAX_DIMS];
        for (int k = 0; k < d->ndim && k < KP_MAX_DIMS; k++)
            shape[k] = mask >> k & 1u ? kp__round_up(&c->cfg, d->shape[k]) : d->shape[k];
        if (input && (kp_desc_validate(d) != KP_OK || !kp_desc_is_contiguous(d))) {
            if (kp_desc_validate(d) != KP_OK) goto invalid;
            return kp__error(KP_ERR_INVALID_ARG,
                             "input %zu: the cache copies inputs, which must be contiguous (or "
                             "use KP_GRAPH_IN_PLACE)",
                             idx);
        }
        /* also validates an output's dtype and shape (its strides are ours) */
        if (kp_desc_init(pd, d->dtype, d->ndim, shape, NULL) != KP_OK) goto invalid;
        int64_t bytes = kp_desc_bytes_needed(pd);
        if (bytes < 0 || (uint64_t)bytes > KP__MAX_ALLOC_BYTES)
            return kp__error(KP_ERR_INVALID_ARG, "%s %zu: too large", side, idx);
        g->need[p] = (size_t)bytes;
        /* refused here, before the call changes anything, not at its copy */
        kp__copy_plan plan;
        if (input && kp__plan_copy(d, pd, &plan) > KP_GRAPH_MAX_COPY_RUNS)
            return kp__error(KP_ERR_UNSUPPORTED,
                             "input %zu: padding dimension %d of %s takes %" PRId64
                             " copies (at most %d); pad an outer dimension instead",
                             idx, plan.inner, kp_desc_str(d, (char[96]){0}, 96), plan.runs,
                             KP_GRAPH_MAX_COPY_RUNS);
    }
    if (mask >> d->ndim)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s %zu: dynamic mask 0x%x names a dimension past its %d dimensions",
                         side, idx, mask, d->ndim);
    return KP_OK;
invalid: /* the failing call recorded why */
    return kp__error_prefix(KP_ERR_INVALID_ARG, "%s %zu", side, idx);
}

/* Validates a call at the boundary, pads its shapes and writes its key. */
static kp_status kp__resolve(kp_graph_cache_t c, const kp_graph_call *call, bool prepare,
                             kp__gcall *g, uint64_t *key) {
    if (!call) return kp__error(KP_ERR_INVALID_ARG, "call is NULL");
    /* not a memset of all of *g: the hit path sets what it uses */
    g->c = (kp_graph_call)KP_GRAPH_CALL_INIT;
    KP_CHECK(kp__config_read(&g->c, sizeof g->c, call, KP__SIZE_THROUGH(kp_graph_call, flags),
                             "call", "KP_GRAPH_CALL_INIT"));
    const kp_graph_call *k = &g->c;
    if (!k->enqueue && !k->build)
        return kp__error(KP_ERR_INVALID_ARG, "call %" PRIu64 ": neither enqueue nor build is set",
                         k->id);
    if (k->flags & ~KP_GRAPH_IN_PLACE)
        return kp__error(KP_ERR_INVALID_ARG, "call %" PRIu64 ": unknown flags 0x%x", k->id,
                         k->flags);
    if (k->n_inputs > KP_GRAPH_MAX_PORTS || k->n_outputs > KP_GRAPH_MAX_PORTS - k->n_inputs)
        return kp__error(KP_ERR_INVALID_ARG,
                         "call %" PRIu64 ": %zu inputs and %zu outputs (at most %d ports)", k->id,
                         k->n_inputs, k->n_outputs, KP_GRAPH_MAX_PORTS);
    if (k->n_literals > KP_GRAPH_MAX_LITERALS)
        return kp__error(KP_ERR_INVALID_ARG, "call %" PRIu64 ": %zu literals (at most %d)", k->id,
                         k->n_literals, KP_GRAPH_MAX_LITERALS);
    if ((k->n_inputs && !k->inputs) || (k->n_outputs && !k->outputs) ||
        (k->n_literals && !k->literals))
        return kp__error(KP_ERR_INVALID_ARG,
                         "call %" PRIu64 ": a count is set but its array is NULL", k->id);
    if (k->state_bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "call %" PRIu64 ": state_bytes is too large", k->id);
    g->in_place = k->flags & KP_GRAPH_IN_PLACE;
    g->n_ports = k->n_inputs + k->n_outputs;
    size_t w = 0;
    key[w++] = k->id;
    key[w++] = k->flags;
    key[w++] = k->n_inputs;
    key[w++] = k->n_outputs;
    key[w++] = k->n_literals;
    for (size_t p = 0; p < g->n_ports; p++) {
        bool input = p < k->n_inputs;
        const kp_port_info *pi = input ? &k->inputs[p] : &k->outputs[p - k->n_inputs];
        KP_CHECK(kp__port(c, g, p, pi, input));
        if (input && !pi->data && (!prepare || g->in_place))
            return kp__error(KP_ERR_INVALID_ARG, "input %zu has no data", p);
        const kp_tensor_desc *d = &g->padded[p];
        key[w++] = (uint64_t)d->dtype;
        key[w++] = (uint64_t)d->ndim;
        key[w++] = k->dynamic ? k->dynamic[p] : 0;
        for (int j = 0; j < d->ndim; j++) key[w++] = (uint64_t)d->shape[j];
        if (input && g->in_place)
            for (int j = 0; j < d->ndim; j++) key[w++] = (uint64_t)d->strides[j];
    }
    for (size_t i = 0; i < k->n_literals; i++) key[w++] = (uint64_t)k->literals[i];
    g->shape_hash = kp__hash(key, w);
    for (size_t p = 0; g->in_place && p < k->n_inputs; p++) {
        key[w++] = (uint64_t)(uintptr_t)k->inputs[p].data;
        key[w++] = (uint64_t)k->inputs[p].desc.offset;
    }
    g->key_words = w;
    g->hash = kp__hash(key, w);
    return KP_OK;
}

/* "id=3 in0=f32[4,8]~1 out0=f32[4,8] lit=[2] @0x7f.." into buf. */
static const char *kp__key_str(const uint64_t *key, size_t words, char *buf, size_t len) {
    size_t used = 0, w = KP__KEY_HEAD;
    uint64_t n_in = key[2], n_out = key[3], n_lit = key[4];
    bool in_place = key[1] & KP_GRAPH_IN_PLACE;
#define KP__PUT(...)                                                                   \
    do {                                                                               \
        if (used < len) used += (size_t)snprintf(buf + used, len - used, __VA_ARGS__); \
    } while (0)
    KP__PUT("id=%" PRIu64, key[0]);
    for (uint64_t p = 0; p < n_in + n_out && w + 3 <= words; p++) {
        bool input = p < n_in;
        int ndim = (int)key[w + 1];
        uint64_t mask = key[w + 2];
        KP__PUT(" %s%" PRIu64 "=%s[", input ? "in" : "out", input ? p : p - n_in,
                kp_dtype_name((kp_dtype)key[w]));
        w += 3;
        for (int j = 0; j < ndim && w < words; j++, w++)
            KP__PUT("%s%" PRId64 "%s", j ? "," : "", (int64_t)key[w], mask >> j & 1u ? "~" : "");
        KP__PUT("]");
        if (input && in_place) w += (size_t)ndim;
    }
    if (n_lit) {
        KP__PUT(" lit=[");
        for (uint64_t i = 0; i < n_lit && w < words; i++, w++)
            KP__PUT("%s%" PRId64, i ? "," : "", (int64_t)key[w]);
        KP__PUT("]");
    }
    for (uint64_t p = 0; in_place && p < n_in && w + 1 < words; p++, w += 2)
        KP__PUT(" @%#" PRIx64 "+%" PRId64, key[w], (int64_t)key[w + 1]);
#undef KP__PUT
    if (len) buf[used < len ? used : len - 1] = '\0';
    return buf;
}

/* --- entries ------------------------------------------------------------------------ */
static kp__gentry *kp__find(kp_graph_cache_t c, const kp__gcall *g) {
    for (size_t i = 0; i < c->n; i++) {
        kp__gentry *e = c->e[i];
        if (e->hash == g->hash && e->key_words == g->key_words &&
            memcmp(e->key, c->key, g->key_words * sizeof *c->key) == 0)
            return e;
    }
    return NULL;
}

/* Does the entry's graph still use the static buffers as they are? */
static bool kp__entry_current(kp_graph_cache_t c, const kp__gentry *e) {
    for (size_t p = 0; p < e->n_ports; p++)
        if (e->bufs[p] && e->bufs[p] != c->buf[p]) return false;
    return true;
}

static void kp__entry_free(kp__gentry *e) {
    if (!e) return;
    kp_graph_exec_destroy(e->exec);
    kp_graph_destroy(e->graph);
    kp__free(e->state);
    kp__free(e->key);
    kp__free(e);
}

static void kp__account(kp_graph_cache_t c) {
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

static void kp__remove(kp_graph_cache_t c, kp__gentry *e) {
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i] == e) {
            c->e[i] = c->e[--c->n];
            break;
        }
    kp__entry_free(e);
}

/* The least recently used entry, stale ones first; `skip` is never picked;
 * `same_shape`: only variants of that shape. */
static kp__gentry *kp__lru(kp_graph_cache_t c, const kp__gentry *skip, const uint64_t *same_shape) {
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

/* Evicts least recently used entries (never `keep`) until the bounds hold. */
static void kp__enforce_bounds(kp_graph_cache_t c, const kp__gentry *keep) {
    for (;;) {
        kp__account(c);
        bool over = (c->cfg.max_graphs && c->n > c->cfg.max_graphs) ||
                    (c->cfg.max_bytes && c->st.bytes > c->cfg.max_bytes);
        kp__gentry *v = over ? kp__lru(c, keep, NULL) : NULL;
        if (!v) return;
        kp__remove(c, v);
        c->st.evictions++;
    }
}

/* --- static buffers ----------------------------------------------------------------- */
/* Grows the buffers to at least need[p] bytes; graphs on a moved buffer go
 * stale. Every path that grows them comes here, so the bounds are enforced
 * here: least recently used graphs (never `keep`) go until the cache's
 * bytes are within max_bytes again. */
static kp_status kp__grow(kp_graph_cache_t c, const size_t *need, size_t n_ports,
                          const kp__gentry *keep) {
    size_t total = 0;
    bool grow = false;
    for (size_t p = 0; p < KP_GRAPH_MAX_PORTS; p++) {
        size_t want = p < n_ports && need[p] > c->buf_bytes[p] ? need[p] : c->buf_bytes[p];
        grow = grow || want != c->buf_bytes[p];
        total += (want + KP__ALLOC_ROUND - 1) / KP__ALLOC_ROUND * KP__ALLOC_ROUND;
    }
    if (!grow) return KP_OK;
    if (c->cfg.max_bytes && total > c->cfg.max_bytes)
        return kp__error(KP_ERR_OUT_OF_MEMORY,
                         "static buffers would need %zu bytes, over the cache's byte budget (%zu)",
                         total, c->cfg.max_bytes);
    for (size_t p = 0; p < n_ports; p++) {
        if (need[p] <= c->buf_bytes[p]) continue;
        void *nb = NULL;
        KP_CHECK(kp_allocator_alloc(c->alloc, need[p], NULL, &nb));
        for (size_t i = 0; i < c->n; i++) {
            kp__gentry *e = c->e[i];
            if (!e->stale && p < e->n_ports && e->bufs[p] && e->bufs[p] == c->buf[p]) {
                e->stale = true;
                c->st.invalidations++;
            }
        }
        /* a device-wide block: its free waits for the device's work on it */
        if (c->buf[p]) (void)kp_allocator_free(c->alloc, c->buf[p]);
        c->buf[p] = nb;
        c->buf_bytes[p] = need[p];
        c->st.grows++;
    }
    /* the old blocks go back to the driver rather than wait in the cache */
    (void)kp_allocator_empty_cache(c->alloc);
    kp__enforce_bounds(c, keep);
    return KP_OK;
}

/* The work's view of the call: static buffers (or the inputs in place). */
static void kp__args(kp_graph_cache_t c, kp__gcall *g, kp_graph_args *a, bool exact) {
    const kp_graph_call *k = &g->c;
    for (size_t p = 0; p < g->n_ports; p++) {
        bool input = p < k->n_inputs;
        kp_port_info *pi = input ? &g->args_in[p] : &g->args_out[p - k->n_inputs];
        const kp_port_info *src = input ? &k->inputs[p] : &k->outputs[p - k->n_inputs];
        pi->name = src->name;
        if (input && (g->in_place || exact)) {
            *pi = *src;
            continue;
        }
        pi->data = c->buf[p];
        pi->desc = g->padded[p];
        if (exact)
            (void)kp_desc_init(&pi->desc, src->desc.dtype, src->desc.ndim, src->desc.shape, NULL);
    }
    *a = (kp_graph_args){g->args_in,   k->n_inputs, g->args_out,
                         k->n_outputs, k->literals, k->n_literals};
}

/* Copies input p into its static buffer, laid out for the padded shape:
 * one copy per run of the innermost padded dimension (kp__port bounded
 * their number before the call changed anything). */
static kp_status kp__copy_in(kp_graph_cache_t c, const kp__gcall *g, size_t p, kp_stream_t s) {
    const kp_port_info *in = &g->c.inputs[p];
    const kp_tensor_desc *a = &in->desc, *pd = &g->padded[p];
    size_t es = kp_dtype_size(a->dtype);
    kp__copy_plan plan;
    if (kp__plan_copy(a, pd, &plan) == 0) return KP_OK;
    const char *src = (const char *)in->data + a->offset * (int64_t)es;
    if (plan.inner < 0) return kp_memcpy_async(s, c->buf[p], src, (size_t)plan.run_elems * es);
    for (int64_t r = 0; r < plan.runs; r++) {
        int64_t dst_off = 0, rem = r;
        for (int k = plan.inner - 1; k >= 0; k--) {
            dst_off += (rem % a->shape[k]) * pd->strides[k];
            rem /= a->shape[k];
        }
        KP_CHECK(kp_memcpy_async(s, (char *)c->buf[p] + dst_off * (int64_t)es,
                                 src + r * plan.run_elems * (int64_t)es,
                                 (size_t)plan.run_elems * es));
    }
    return KP_OK;
}

/* The outputs as views of the static buffers sliced to the shape asked for. */
static void kp__outputs(kp_graph_cache_t c, kp__gcall *g, kp_graph_call *call, bool exact) {
    for (size_t j = 0; j < g->c.n_outputs; j++) {
        size_t p = g->c.n_inputs + j;
        kp_port_info *o = &call->outputs[j];
        kp_tensor_desc view = exact ? g->args_out[j].desc : g->padded[p];
        for (int k = 0; k < view.ndim; k++) view.shape[k] = o->desc.shape[k];
        view.offset = 0;
        o->data = c->buf[p];
        o->desc = view;
    }
}

/* --- the miss path ------------------------------------------------------------------ */
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

/* Tries to update `e`'s executable graph from `graph`. */
static bool kp__try_update(kp_graph_cache_t c, kp__gentry *e, kp_graph_t graph) {
    if (!e || e->id != c->cur.c.id || e->state_bytes != c->cur.c.state_bytes) return false;
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
        return variants >= max ? kp__lru(c, same, &g->shape_hash) : NULL;
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
            kp__account(c);
            full = full || c->st.bytes + KP_GRAPH_NODE_BYTES > c->cfg.max_bytes;
        }
        return full ? kp__lru(c, same, NULL) : NULL;
    }
    return NULL;
}

/* A miss with a graph to make: build or capture it, update a kept graph
 * where one fits, else instantiate a new one. *out is the entry to launch. */
static kp_status kp__miss(kp_graph_cache_t c, kp__gentry *same, const kp_graph_args *a,
                          kp__gentry **out) {
    kp__gcall *g = &c->cur;
    kp_graph_t graph;
    void *state;
    KP_CHECK(kp__make_graph(c, g, a, &graph, &state));
    size_t nodes = kp_graph_node_count(graph);
    kp__gentry *tried[4] = {NULL, NULL, NULL, NULL};
    for (int attempt = 0; attempt < 4; attempt++) {
        kp__gentry *e = kp__update_target(c, same, attempt);
        bool seen = false;
        for (int j = 0; j < attempt; j++) seen = seen || tried[j] == e;
        tried[attempt] = e;
        if (!e || seen || !kp__try_update(c, e, graph)) continue;
        /* the entry keeps the graph it was instantiated from (its nodes
         * address the exec) and that graph's state */
        kp_graph_destroy(graph);
        kp__free(state);
        if (!e->stale && e != same) c->st.evictions++;
        kp_status st = kp__rekey(c, e, g);
        if (st != KP_OK) {
            kp__remove(c, e);
            return st;
        }
        kp__entry_bufs(c, e, g, nodes);
        c->st.updates++;
        *out = e;
        kp__enforce_bounds(c, e);
        return KP_OK;
    }
    /* no graph to update: a new executable one */
    kp_status st;
    kp__gentry *e = kp__calloc(1, sizeof *e);
    if (!e || !kp__reserve(c)) {
        kp__free(e);
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "graph cache: no memory for an entry");
        goto fail;
    }
    e->graph = graph;
    e->state = state;
    e->state_bytes = g->c.state_bytes;
    graph = NULL;
    state = NULL;
    KP_CHECK_GOTO(kp__rekey(c, e, g), st, fail_entry);
    KP_CHECK_GOTO(kp_graph_instantiate(e->graph, &e->exec), st, fail_entry);
    c->st.instantiations++;
    if (same) {
        kp__remove(c, same); /* its key now has a fresh graph */
        c->st.evictions++;
    }
    kp__entry_bufs(c, e, g, nodes);
    c->e[c->n++] = e;
    *out = e;
    kp__enforce_bounds(c, e);
    return KP_OK;
fail_entry:
    kp__entry_free(e);
fail:
    kp_graph_destroy(graph);
    kp__free(state);
    return st;
}

/* --- public ------------------------------------------------------------------------- */
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
    for (size_t i = 0; i < c->n; i++) kp__entry_free(c->e[i]);
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
    KP_CHECK(kp__grow(c, need, g->n_ports, NULL));
    kp_graph_args a;
    kp__args(c, g, &a, true);
    c->st.fallbacks++;
    KP_CHECK(g->c.enqueue(g->c.user, s, &a));
    kp__outputs(c, g, call, true);
    return KP_OK;
}

kp_status kp_graph_cache_run(kp_graph_cache_t c, kp_graph_call *call, kp_stream_t s) {
    KP_API_ENTRY();
    KP_ARG_CHECK(c);
    KP_CHECK(kp__check_stream(c, s));
    kp__gcall *g = &c->cur;
    KP_CHECK(kp__resolve(c, call, false, g, c->key));
    c->st.calls++;
    c->clock++;
    kp__gentry *e = kp__find(c, g);
    bool hit = e && !e->stale && kp__entry_current(c, e);
    for (size_t p = 0; hit && p < g->n_ports; p++) hit = g->need[p] <= c->buf_bytes[p];
    bool fresh = false;
    if (!hit) {
        char key[256];
        c->st.misses++;
        if (c->cfg.miss == KP_GRAPH_MISS_STRICT)
            return kp__error(KP_ERR_NOT_FOUND,
                             "no graph for %s (policy strict: prepare the shapes first)",
                             kp__key_str(c->key, g->key_words, key, sizeof key));
        if (c->cfg.miss == KP_GRAPH_MISS_FALLBACK) {
            if (!g->c.enqueue)
                return kp__error(KP_ERR_INVALID_ARG,
                                 "policy fallback needs the call's enqueue function");
            return kp__fallback(c, call, s);
        }
        KP_CHECK(kp__grow(c, g->need, g->n_ports, e));
        if (e && !e->stale && !kp__entry_current(c, e)) e->stale = true;
        kp_graph_args a;
        kp__args(c, g, &a, false);
        kp_status st = kp__miss(c, e, &a, &e);
        if (st != KP_OK)
            return kp__error_prefix(st, "%s", kp__key_str(c->key, g->key_words, key, sizeof key));
        fresh = true;
    } else {
        c->st.hits++;
        e->hits++;
    }
    e->last_use = c->clock;
    for (size_t p = 0; !g->in_place && p < g->c.n_inputs; p++) KP_CHECK(kp__copy_in(c, g, p, s));
    if (g->c.bind) {
        kp_graph_args a;
        kp__args(c, g, &a, false);
        KP_CHECK(g->c.bind(g->c.user, e->exec, &a, e->state, fresh));
    }
    KP_CHECK(kp_graph_exec_launch(e->exec, s));
    kp__outputs(c, g, call, false);
    return KP_OK;
}

kp_status kp_graph_cache_prepare(kp_graph_cache_t c, kp_graph_call *calls, size_t n,
                                 kp_stream_t s) {
    KP_API_ENTRY();
    KP_ARG_CHECK(c && (calls || n == 0));
    KP_CHECK(kp__check_stream(c, s));
    size_t need[KP_GRAPH_MAX_PORTS] = {0};
    for (size_t i = 0; i < n; i++) {
        kp_status st = kp__resolve(c, &calls[i], true, &c->cur, c->key);
        if (st != KP_OK) return kp__error_prefix(st, "calls[%zu]", i);
        for (size_t p = 0; p < c->cur.n_ports; p++)
            if (c->cur.need[p] > need[p]) need[p] = c->cur.need[p];
    }
    KP_CHECK(kp__grow(c, need, KP_GRAPH_MAX_PORTS, NULL));
    for (size_t i = 0; i < n; i++) {
        kp__gcall *g = &c->cur;
        KP_CHECK(kp__resolve(c, &calls[i], true, g, c->key));
        kp__gentry *e = kp__find(c, g);
        if (e && !e->stale && kp__entry_current(c, e)) continue;
        kp_graph_args a;
        kp__args(c, g, &a, false);
        char key[256];
        kp_status st = kp__miss(c, e, &a, &e);
        if (st != KP_OK)
            return kp__error_prefix(st, "calls[%zu] %s", i,
                                    kp__key_str(c->key, g->key_words, key, sizeof key));
        e->last_use = ++c->clock;
        KP_CHECK(kp_graph_exec_upload(e->exec, s));
    }
    return KP_OK;
}

kp_status kp_graph_cache_stats(kp_graph_cache_t c, kp_graph_stats *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(c && out);
    kp__account(c);
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
    kp__account(c);
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
                                 kp__key_str(best->key, best->key_words, key, sizeof key),
                                 best->nodes, best->bytes, best->hits);
    }
    return buf;
}
