/* The graph cache's keys: a call checked at the boundary, its shapes
 * padded to the capture sizes, and its key written as 64-bit words (the
 * id, every port's dtype, mask and padded shape, the literals, and an
 * in-place call's input addresses), hashed, and named for people. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cache-impl.h"

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

int64_t kp__gc_plan_copy(const kp_tensor_desc *a, const kp_tensor_desc *pd, kp__copy_plan *out) {
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
        if (input && kp__gc_plan_copy(d, pd, &plan) > KP_GRAPH_MAX_COPY_RUNS)
            return kp__error(KP_ERR_UNSUPPORTED,
                             "input %zu: padding dimension %d of %s takes %" PRId64
                             " copies (at most %d); pad an outer dimension instead",
                             idx, plan.inner, kp_desc_str(d, (char[96]){0}, 96), plan.runs,
                             KP_GRAPH_MAX_COPY_RUNS);
    }
    if (mask >> d->ndim)
        return kp__error(KP_ERR_INVALID_ARG,
                         "%s %zu: dynamic mask 0x%x names a dimension past its %d dimensions", side,
                         idx, mask, d->ndim);
    return KP_OK;
invalid: /* the failing call recorded why */
    return kp__error_prefix(KP_ERR_INVALID_ARG, "%s %zu", side, idx);
}

kp_status kp__gc_resolve(kp_graph_cache_t c, const kp_graph_call *call, bool prepare, kp__gcall *g,
                         uint64_t *key) {
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

const char *kp__gc_key_str(const uint64_t *key, size_t words, char *buf, size_t len) {
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
