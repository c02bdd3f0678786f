/* The graph cache's static buffers: one per port, grown when a larger
 * shape arrives (the graphs on a moved buffer go stale, and the bounds are
 * enforced here, on every path that grows them), the inputs copied in
 * laid out for the padded shape, the outputs handed back as views. */
#include <string.h>

#include "cache-impl.h"
#include "copy-impl.h"

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

/* Copies input p into its static buffer on s, laid out for the padded
 * shape: one copy per run of the innermost padded dimension (kp__port
 * bounded their number before the call changed anything). For backends
 * whose graphs cannot start with the copies (kp__gc_copy_nodes). */
static kp_status kp__gc_copy_in(kp_graph_cache_t c, const kp__gcall *g, size_t p, kp_stream_t s) {
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

/* --- the copies as a graph's first nodes ------------------------------------ */
#ifdef KP_HAVE_CUDA
extern const kp_device_kernel kp__copy_in_cuda; /* copy_in.cu */
#define KP__COPY_IN_CUDA {"cuda", &kp__copy_in_cuda},
#else
#define KP__COPY_IN_CUDA
#endif

/* The byte offset of run r in the padded layout. */
static int64_t kp__run_offset(const kp__copy_in_params *p, uint64_t r) {
    int64_t off = 0;
    for (int k = p->outer - 1; k >= 0; k--) {
        off += (int64_t)(r % (uint64_t)p->shape[k]) * p->pitch[k];
        r /= (uint64_t)p->shape[k];
    }
    return off;
}

/* Block b of the grid: row b / grid.x copies its share of every run
 * grid.y apart, as the CUDA form's blocks do. */
static void kp__copy_in_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                             uint64_t n) {
    (void)block;
    const kp__copy_in_params *p = pp;
    for (uint64_t b = first; b < first + n; b++) {
        uint64_t lo, hi;
        kp_host_block_span(p->run_bytes, (kp_dim3){grid.x, 1, 1}, b % grid.x, 1, &lo, &hi);
        for (uint64_t r = b / grid.x; r < p->runs && hi > lo; r += grid.y)
            memcpy(p->dst + kp__run_offset(p, r) + lo, p->src + r * p->run_bytes + lo, hi - lo);
    }
}

/* The host form runs nowhere today (cpu graphs refuse kernels put first,
 * and cpu copies go on the stream); it is here because a launch is checked
 * for the device's form before the backend is asked, so that cpu's answer
 * is the refusal, KP_ERR_UNSUPPORTED, which kp__gc_copy_nodes expects. */
static const kp_kernel kp__copy_in_kernel = {
    "graph cache input copy",
    sizeof(kp__copy_in_params),
    {{"host", &(const kp_host_kernel){kp__copy_in_host}}, KP__COPY_IN_CUDA}};

/* Input p's copy as a launch of kp__copy_in_kernel (params in *prm): the
 * plan of kp__gc_copy_in, every run one row of blocks. */
static void kp__copy_launch(kp_graph_cache_t c, const kp__gcall *g, size_t p,
                            kp__copy_in_params *prm, kp_launch *l) {
    const kp_port_info *in = &g->c.inputs[p];
    const kp_tensor_desc *a = &in->desc, *pd = &g->padded[p];
    const size_t es = kp_dtype_size(a->dtype);
    kp__copy_plan plan;
    const int64_t runs = kp__gc_plan_copy(a, pd, &plan);
    memset(prm, 0, sizeof *prm);
    prm->dst = c->buf[p];
    prm->src = in->data ? (const char *)in->data + a->offset * (int64_t)es : NULL;
    prm->runs = (uint64_t)runs;
    prm->run_bytes = (uint64_t)plan.run_elems * es;
    prm->outer = plan.inner > 0 ? plan.inner : 0;
    uint64_t align = (uint64_t)(uintptr_t)prm->dst | (uint64_t)(uintptr_t)prm->src | prm->run_bytes;
    for (int k = 0; k < prm->outer; k++) {
        prm->shape[k] = a->shape[k];
        prm->pitch[k] = pd->strides[k] * (int64_t)es;
        align |= (uint64_t)prm->pitch[k];
    }
    prm->vec = align % 16 == 0 ? 16 : align % 4 == 0 ? 4 : 1;
    /* The grid: about 4096 blocks at most in all, a row for each run (at
     * most KP_GRAPH_MAX_COPY_RUNS) of the padded shape's plan, split at its
     * last dynamic dimension, so that every length inside one padded size
     * launches the same grid (the kernel's loops take any; the blocks
     * counted in 16-byte units, whatever the source's alignment). A hit whose
     * length changed then sets only the node's arguments: on an H200 that
     * cost 1.8 us with launch, against 3.3 when the grid changed too. */
    const uint32_t mask = g->c.dynamic ? g->c.dynamic[p] : 0;
    uint64_t rows = runs > 0 ? (uint64_t)runs : 1, run_bytes = prm->run_bytes;
    for (int i = pd->ndim - 1; mask && i >= 0; i--) {
        if (!(mask >> i & 1u)) continue;
        rows = 1;
        for (int k = 0; k < i; k++) rows *= (uint64_t)pd->shape[k];
        run_bytes = (uint64_t)pd->shape[i] * (uint64_t)(i + 1 < pd->ndim ? pd->strides[i] : 1) * es;
        break;
    }
    if (rows > KP_GRAPH_MAX_COPY_RUNS) rows = KP_GRAPH_MAX_COPY_RUNS;
    uint64_t per_row = (run_bytes / 16 + 255) / 256;
    const uint64_t cap = rows < 4096 ? 4096 / rows : 1;
    per_row = per_row < 1 ? 1 : per_row > cap ? cap : per_row;
    *l = (kp_launch){.kernel = &kp__copy_in_kernel,
                     .grid = {(uint32_t)per_row, (uint32_t)rows, 1},
                     .block = {256, 1, 1},
                     .params = prm};
}

size_t kp__gc_copies_wanted(kp_graph_cache_t c, const kp__gcall *g) {
    return g->in_place || c->no_copy_nodes ? 0 : g->c.n_inputs;
}

/* Each copy added goes before the graph's roots, the copies added before
 * it included: the copies run one after another, then the work. */
kp_status kp__gc_copy_nodes(kp_graph_cache_t c, const kp__gcall *g, kp_graph_t graph,
                            kp_graph_node_t *nodes, bool *added) {
    *added = false;
    if (!kp__gc_copies_wanted(c, g)) return KP_OK;
    for (size_t p = 0; p < g->c.n_inputs; p++) {
        kp__copy_in_params prm;
        kp_launch l;
        kp__copy_launch(c, g, p, &prm, &l);
        kp_status st = kp_graph_add_kernel_first(graph, &l, &nodes[p]);
        if (st == KP_ERR_UNSUPPORTED && p == 0) { /* cpu: the stream's copies, from now on */
            kp_clear_error();
            c->no_copy_nodes = true;
            return KP_OK;
        }
        KP_CHECK(st);
    }
    *added = true;
    return KP_OK;
}

/* Copy nodes are set only where they change (e->copy_last): setting one
 * costs the driver call and makes the launch carry the new parameters; on
 * an H200 a 30-kernel graph launched in 1.44 us, 1.82 with one node set. */
kp_status kp__gc_copy_inputs(kp_graph_cache_t c, const kp__gcall *g, kp__gentry *e, kp_stream_t s) {
    bool known = e->copies_known && e->copy_last;
    e->copies_known = false;
    for (size_t p = 0; !g->in_place && p < g->c.n_inputs; p++) {
        if (!e->n_copies) {
            KP_CHECK(kp__gc_copy_in(c, g, p, s));
            continue;
        }
        kp__copy_in_params prm;
        kp_launch l;
        kp__copy_launch(c, g, p, &prm, &l); /* prm zeroed first: compared bytewise */
        kp__copy_set *last = e->copy_last ? &e->copy_last[p] : NULL;
        const uint32_t grid[3] = {l.grid.x, l.grid.y, l.grid.z};
        if (known && !memcmp(&last->prm, &prm, sizeof prm) &&
            !memcmp(last->grid, grid, sizeof grid))
            continue;
        KP_CHECK(kp_graph_exec_set_kernel(e->exec, e->copy[p], &l));
        if (last) {
            last->prm = prm;
            memcpy(last->grid, grid, sizeof grid);
        }
    }
    e->copies_known = e->n_copies && e->copy_last;
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
