/* The graph cache's static buffers: one per port, grown when a larger
 * shape arrives (the graphs on a moved buffer go stale, and the bounds are
 * enforced here, on every path that grows them), the inputs copied in
 * laid out for the padded shape, the outputs handed back as views. */
#include <string.h>

#include "cache-impl.h"

kp_status kp__gc_grow(kp_graph_cache_t c, const size_t *need, size_t n_ports,
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
    kp__gc_enforce_bounds(c, keep);
    return KP_OK;
}

void kp__gc_args(kp_graph_cache_t c, kp__gcall *g, kp_graph_args *a, bool exact) {
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
    *a = (kp_graph_args){.inputs = g->args_in,
                         .n_inputs = k->n_inputs,
                         .outputs = g->args_out,
                         .n_outputs = k->n_outputs,
                         .literals = k->literals,
                         .n_literals = k->n_literals};
}

kp_status kp__gc_copy_in(kp_graph_cache_t c, const kp__gcall *g, size_t p, kp_stream_t s) {
    const kp_port_info *in = &g->c.inputs[p];
    const kp_tensor_desc *a = &in->desc, *pd = &g->padded[p];
    size_t es = kp_dtype_size(a->dtype);
    kp__copy_plan plan;
    if (kp__gc_plan_copy(a, pd, &plan) == 0) return KP_OK;
    const char *src = (const char *)in->data + a->offset * (int64_t)es;
    const size_t run = (size_t)plan.run_elems * es;
    if (plan.inner <= 0) return kp_memcpy_async(s, c->buf[p], src, run); /* one run */
    /* the runs along the dimension just outside the padded one are one 2-D
     * copy (rows of `run` bytes, the padded layout's pitch); one such copy
     * for each index of the dimensions further out */
    const int o = plan.inner - 1;
    const int64_t rows = a->shape[o];
    const size_t dpitch = rows > 1 ? (size_t)pd->strides[o] * es : run; /* one row: any */
    for (int64_t r = 0; r < plan.runs; r += rows) {
        int64_t dst_off = 0, rem = r / rows;
        for (int k = o - 1; k >= 0; k--) {
            dst_off += (rem % a->shape[k]) * pd->strides[k];
            rem /= a->shape[k];
        }
        KP_CHECK(kp_memcpy2d_async(s, (char *)c->buf[p] + dst_off * (int64_t)es, dpitch,
                                   src + r * (int64_t)run, run, run, (size_t)rows));
    }
    return KP_OK;
}

void kp__gc_outputs(kp_graph_cache_t c, kp__gcall *g, kp_graph_call *call, bool exact) {
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
