/* Fusion of elementwise modules. At creation, after the modules are put in
 * order, connected elementwise modules form groups; each group (and each
 * elementwise module that has no kernel of its own) is replaced by one
 * module of type "fused" that runs the whole group as one kernel. Every
 * later step -- zero-copy decisions, the arena, descriptors, graph nodes,
 * the graph cache -- sees an ordinary module.
 *
 * A connection a -> b joins a's group to b's when both are elementwise,
 * fusion is on for both, a's output feeds no other module (fan-out ends a
 * group: the value must be stored anyway), and the joined group stays
 * within KP_FUSE_MAX_MODULES modules and KP_MAX_PORTS inputs. Each
 * member's output then feeds at most one member, so a group is a tree
 * whose last member (the root) is the only one whose output other modules
 * read: a group never needs a value computed outside it from its own
 * members, and it runs at its root's place in the order. A member's output
 * that is also an external output is stored as well. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fuse-impl.h"

/* --- the declaration ------------------------------------------------------------- */
static bool kp__ew_dtype(kp_dtype dt) {
    return dt == KP_F32 || dt == KP_F16 || dt == KP_I32 || dt == KP_U8;
}

/* An identifier the generated code can use: [A-Za-z_][A-Za-z0-9_]*, not kp_... */
static bool kp__ew_name(const char *s) {
    if (!s || !*s || strncmp(s, "kp_", 3) == 0 || strlen(s) >= KP_NAME_MAX) return false;
    for (const char *c = s; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
        if (!alpha && !(c > s && *c >= '0' && *c <= '9')) return false;
    }
    return true;
}

static kp_status kp__ew_port(const kp_port_decl *p, const kp_port_decl *out) {
    char a[96], b[96];
    if (!kp__ew_name(p->name))
        return kp__error(KP_ERR_INVALID_ARG,
                         "elementwise port \"%s\" is not an identifier (letters, digits, '_'; "
                         "not starting with a digit or kp_)",
                         p->name);
    if (!kp__ew_dtype(p->desc.dtype))
        return kp__error(KP_ERR_INVALID_ARG,
                         "elementwise port \"%s\" is %s (fused code takes f32, "
                         "f16, i32 or u8)",
                         p->name, kp_dtype_name(p->desc.dtype));
    bool same = p->desc.ndim == out->desc.ndim && p->dynamic == out->dynamic;
    for (int d = 0; same && d < p->desc.ndim; d++) same = p->desc.shape[d] == out->desc.shape[d];
    if (!same || !kp_desc_is_contiguous(&p->desc))
        return kp__error(KP_ERR_INVALID_ARG,
                         "elementwise port \"%s\" is %s but \"%s\" is %s: every port of an "
                         "elementwise module has one contiguous shape",
                         p->name, kp_desc_str(&p->desc, a, sizeof a), out->name,
                         kp_desc_str(&out->desc, b, sizeof b));
    return KP_OK;
}

kp_status kp__elementwise_check(const kp_module_def *def) {
    const kp_elementwise *ew = def->elementwise;
    if (!ew->cuda || !*ew->cuda || strlen(ew->cuda) > 4096 || !ew->host)
        return kp__error(KP_ERR_INVALID_ARG, "elementwise: a CUDA body (1 .. 4096 bytes) and a "
                                             "host function are required");
    if (def->n_outputs != 1 || def->n_inputs < 1)
        return kp__error(KP_ERR_INVALID_ARG,
                         "elementwise: %zu inputs and %zu outputs (it takes 1 .. %d inputs and "
                         "one output)",
                         def->n_inputs, def->n_outputs, KP_MAX_PORTS);
    const kp_port_decl *out = &def->outputs[0];
    KP_CHECK(kp__ew_port(out, out));
    for (size_t k = 0; k < def->n_inputs; k++) {
        KP_CHECK(kp__ew_port(&def->inputs[k], out));
        bool taken = strcmp(def->inputs[k].name, out->name) == 0;
        for (size_t j = 0; j < k; j++)
            taken = taken || !strcmp(def->inputs[k].name, def->inputs[j].name);
        if (taken)
            return kp__error(KP_ERR_INVALID_ARG, "elementwise: port name \"%s\" is used twice",
                             def->inputs[k].name);
    }
    if (ew->n_params > KP_ELEMENTWISE_MAX_PARAMS || ew->params_bytes > 256 ||
        (ew->params_bytes && !ew->params))
        return kp__error(KP_ERR_INVALID_ARG,
                         "elementwise: %zu parameters in %zu bytes (at most %d "
                         "in 256 bytes, and the block given)",
                         ew->n_params, ew->params_bytes, KP_ELEMENTWISE_MAX_PARAMS);
    for (size_t q = 0; q < ew->n_params; q++) {
        const kp_elementwise_param *pq = &ew->param[q];
        size_t sz = kp_dtype_size(pq->dtype);
        if (!kp__ew_name(pq->name))
            return kp__error(KP_ERR_INVALID_ARG,
                             "elementwise parameter %zu: its name is not an "
                             "identifier",
                             q);
        bool taken = strcmp(pq->name, out->name) == 0;
        for (size_t k = 0; k < def->n_inputs; k++)
            taken = taken || !strcmp(pq->name, def->inputs[k].name);
        for (size_t j = 0; j < q; j++) taken = taken || !strcmp(pq->name, ew->param[j].name);
        if (taken)
            return kp__error(KP_ERR_INVALID_ARG, "elementwise parameter \"%s\": the name is taken",
                             pq->name);
        if (pq->dtype != KP_F32 && pq->dtype != KP_I32 && pq->dtype != KP_I64 && pq->dtype != KP_U8)
            return kp__error(KP_ERR_INVALID_ARG,
                             "elementwise parameter \"%s\" is %s (it takes f32, "
                             "i32, i64 or u8)",
                             pq->name, kp_dtype_name(pq->dtype));
        if (pq->offset % sz || pq->offset > ew->params_bytes || sz > ew->params_bytes - pq->offset)
            return kp__error(KP_ERR_INVALID_ARG,
                             "elementwise parameter \"%s\": offset %zu is not aligned or lies "
                             "outside the %zu-byte block",
                             pq->name, pq->offset, ew->params_bytes);
    }
    return KP_OK;
}

/* --- the fused module ------------------------------------------------------------- */
static size_t kp__align8(size_t x) { return (x + 7) & ~(size_t)7; }

static void kp__fused_free(kp__fused *f) {
    if (!f) return;
    for (size_t j = 0; f->owns && j < f->n_members; j++)
        if (f->mem[j].def.iface && f->mem[j].def.iface->destroy)
            f->mem[j].def.iface->destroy(f->mem[j].def.self);
    kp__free(f->source);
    kp__free(f);
}

static void kp__fused_destroy(void *self) { kp__fused_free(self); }

static kp_status kp__fused_mem(void *self, kp_mem_req *r) {
    kp__fused *f = self;
    memset(r, 0, sizeof *r);
    for (size_t k = 0; k < f->n_out; k++) {
        f->out_off[k] = r->device_bytes;
        r->device_bytes += ((size_t)f->max_n * kp_dtype_size(f->out_dt[k]) + 255) & ~(size_t)255;
    }
    r->static_desc_bytes = sizeof(kp__fused_static) + f->params_bytes;
    r->dynamic_desc_bytes = sizeof(kp__fused_dynamic);
    return KP_OK;
}

/* Hands out the slice; on a device that runs compiled kernels, compiles
 * (or finds in the caches) the group's kernel. */
static kp_status kp__fused_setup(void *self, const kp_mem_slice *s) {
    kp__fused *f = self;
    kp__fused_static *st = s->static_host;
    memset(st, 0, s->static_bytes);
    for (size_t k = 0; k < f->n_out; k++)
        st->out[k] = f->out[k] = (char *)s->device + f->out_off[k];
    st->max_n = f->max_n;
    for (size_t j = 0; j < f->n_members; j++) {
        const kp_elementwise *ew = f->mem[j].def.elementwise;
        if (ew->params_bytes)
            memcpy((char *)s->static_host + sizeof *st + f->mem[j].param_off, ew->params,
                   ew->params_bytes);
    }
    f->params = (kp__fused_params){s->static_dev, s->dynamic_dev, f};
    if (strcmp(kp_device_kernel_form(f->dev), "cuda") == 0)
        KP_CHECK(kp_rtc_compile(f->dev, f->source, "kp_fused", &f->cuda, &f->rtc));
    int64_t per_block = KP__FUSE_BLOCK * KP__FUSE_VEC;
    f->launch = (kp_launch){.kernel = &f->kernel,
                            .grid = {(uint32_t)((f->max_n + per_block - 1) / per_block), 1, 1},
                            .block = {KP__FUSE_BLOCK, 1, 1},
                            .params = &f->params};
    return KP_OK;
}

/* The tick's inputs (one element count for all), the outputs' shapes. */
static kp_status kp__fused_io(void *self, const kp_module_io *io) {
    kp__fused *f = self;
    kp__fused_dynamic *d = io->dynamic_desc;
    const kp_tensor_desc *d0 = &io->inputs[0].desc;
    int64_t n = kp_desc_numel(d0);
    for (size_t k = 0; k < f->n_in; k++) {
        const kp_tensor_desc *dk = &io->inputs[k].desc;
        bool same = dk->ndim == d0->ndim;
        for (int j = 0; same && j < dk->ndim; j++) same = dk->shape[j] == d0->shape[j];
        if (!kp_desc_is_contiguous(dk))
            return kp__error(KP_ERR_UNSUPPORTED, "elementwise input %s is strided this tick",
                             io->inputs[k].name);
        if (!same) {
            char a[96], b[96];
            return kp__error(KP_ERR_MISMATCH,
                             "elementwise inputs of different shapes this tick: %s is %s, %s is %s",
                             io->inputs[k].name, kp_desc_str(dk, a, sizeof a), io->inputs[0].name,
                             kp_desc_str(d0, b, sizeof b));
        }
        d->in[k] = (const char *)io->inputs[k].data + (size_t)dk->offset * kp_dtype_size(dk->dtype);
    }
    for (size_t k = f->n_in; k < KP_MAX_PORTS; k++) d->in[k] = NULL;
    d->n = n;
    for (size_t k = 0; k < f->n_out; k++) {
        io->outputs[k].data = f->out[k];
        KP_CHECK(kp_desc_init(&io->outputs[k].desc, f->out_dt[k], d0->ndim, d0->shape, NULL));
    }
    return KP_OK;
}

static kp_status kp__fused_execute(void *self, kp_stream_t s) {
    return kp_launch_kernel(s, &((kp__fused *)self)->launch);
}

static kp_status kp__fused_node(void *self, kp_graph_t g, const kp_graph_node_t *deps, size_t n,
                                kp_graph_node_t *out) {
    return kp_graph_add_kernel(g, deps, n, &((kp__fused *)self)->launch, out);
}

static const kp_module_i kp__fused_iface = {
    .destroy = kp__fused_destroy,
    .io = kp__fused_io,
    .execute = kp__fused_execute,
    .memory_requirements = kp__fused_mem,
    .setup_memory = kp__fused_setup,
    .add_node_to_graph = kp__fused_node,
};

/* The host form: the blocks' share of the elements, KP__FUSE_CHUNK at a
 * time, every member over the chunk in order; intermediates stay in
 * chunk-sized buffers on the stack (in cache), stored outputs go straight
 * to their tensors. */
static void kp__fused_host(const void *pp, kp_dim3 grid, kp_dim3 block, uint64_t first,
                           uint64_t n_blocks) {
    const kp__fused_params *p = pp;
    const kp__fused *f = p->host;
    uint64_t lo, hi;
    kp_host_block_span((uint64_t)p->dyn->n, grid, first, n_blocks, &lo, &hi);
    uint32_t scratch[KP_FUSE_MAX_MODULES][KP__FUSE_CHUNK];
    for (uint64_t c = lo; c < hi; c += KP__FUSE_CHUNK) {
        size_t len = (size_t)(hi - c < KP__FUSE_CHUNK ? hi - c : KP__FUSE_CHUNK);
        void *where[KP_FUSE_MAX_MODULES];
        for (size_t j = 0; j < f->n_members; j++) {
            const kp__fused_member *m = &f->mem[j];
            const void *in[KP_MAX_PORTS];
            for (size_t k = 0; k < m->def.n_inputs; k++) {
                size_t sz = kp_dtype_size(m->def.inputs[k].desc.dtype);
                in[k] = m->src[k] >= 0 ? (const char *)p->dyn->in[m->src[k]] + c * sz
                                       : where[-1 - m->src[k]];
            }
            where[j] = m->out >= 0 ? (char *)p->st->out[m->out] +
                                         c * kp_dtype_size(m->def.outputs[0].desc.dtype)
                                   : (void *)scratch[j];
            m->def.elementwise->host(m->def.elementwise->params, in, where[j], len);
        }
    }
}

/* --- finding groups --------------------------------------------------------------- */
typedef struct kp__src {
    kp__src_kind kind;
    size_t index, port;
} kp__src;

typedef struct kp__fuse_state {
    kp_pipeline_t p;
    size_t *parent; /* union-find over modules */
    size_t *size;
    size_t *consumers; /* modules reading each module's output 0 */
    bool *external_out;
} kp__fuse_state;

static size_t kp__root(kp__fuse_state *s, size_t i) {
    while (s->parent[i] != i) i = s->parent[i] = s->parent[s->parent[i]];
    return i;
}

static bool kp__is_ew(const kp__module *m) { return m->def.elementwise != NULL; }

/* The distinct inputs, from outside, of the union of the groups of a and b. */
static size_t kp__group_inputs(kp__fuse_state *s, size_t a, size_t b, kp__src *srcs, size_t cap) {
    size_t n = 0, ra = kp__root(s, a), rb = kp__root(s, b);
    for (size_t i = 0; i < s->p->n_modules; i++) {
        size_t r = kp__root(s, i);
        if (r != ra && r != rb) continue;
        const kp__module *m = &s->p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            const kp__binding *bd = &m->in[k];
            if (bd->kind == KP__SRC_MODULE) {
                size_t ru = kp__root(s, bd->index);
                if (ru == ra || ru == rb) continue;
            }
            bool seen = false;
            for (size_t q = 0; q < n && q < cap; q++)
                seen = seen || (srcs[q].kind == bd->kind && srcs[q].index == bd->index &&
                                srcs[q].port == bd->port);
            if (seen) continue;
            if (n < cap) srcs[n] = (kp__src){bd->kind, bd->index, bd->port};
            n++;
        }
    }
    return n;
}

static kp_status kp__edge(kp_pipeline_t p, const kp__module *u, const kp__module *v, size_t k,
                          bool fused, const char *fmt, ...) KP__PRINTF(6, 7);
static kp_status kp__edge(kp_pipeline_t p, const kp__module *u, const kp__module *v, size_t k,
                          bool fused, const char *fmt, ...) {
    kp__fuse_edge *e = &p->fuse_edges[p->n_fuse_edges++];
    snprintf(e->from, sizeof e->from, "%s.%s", u->id, u->def.outputs[v->in[k].port].name);
    snprintf(e->to, sizeof e->to, "%s.%s", v->id, v->def.inputs[k].name);
    e->fused = fused;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->why, sizeof e->why, fmt, ap);
    va_end(ap);
    return KP_OK;
}

/* Decides every connection into an elementwise module, in order. */
static void kp__join(kp__fuse_state *s, bool off) {
    kp_pipeline_t p = s->p;
    for (size_t vi = 0; vi < p->n_modules; vi++) {
        const kp__module *v = &p->mods[vi];
        for (size_t k = 0; k < v->def.n_inputs; k++) {
            if (v->in[k].kind != KP__SRC_MODULE) continue;
            size_t ui = v->in[k].index;
            const kp__module *u = &p->mods[ui];
            if (!kp__is_ew(u) && !kp__is_ew(v)) continue;
            kp__src srcs[KP_MAX_PORTS + 1];
            if (!kp__is_ew(u) || !kp__is_ew(v))
                kp__edge(p, u, v, k, false, "%s is not elementwise", kp__is_ew(u) ? v->id : u->id);
            else if (off)
                kp__edge(p, u, v, k, false, "fusion is off for the pipeline");
            else if (u->no_fuse || v->no_fuse)
                kp__edge(p, u, v, k, false, "fusion is off for %s", u->no_fuse ? u->id : v->id);
            else if (s->consumers[ui] > 1)
                kp__edge(p, u, v, k, false, "fan-out: %s.%s feeds %zu modules", u->id,
                         u->def.outputs[0].name, s->consumers[ui]);
            else if (kp__root(s, ui) == kp__root(s, vi))
                kp__edge(p, u, v, k, true, "fused");
            else if (s->size[kp__root(s, ui)] + s->size[kp__root(s, vi)] > KP_FUSE_MAX_MODULES)
                kp__edge(p, u, v, k, false, "the group would hold more than %d modules",
                         KP_FUSE_MAX_MODULES);
            else if (kp__group_inputs(s, ui, vi, srcs, KP_MAX_PORTS + 1) > KP_MAX_PORTS)
                kp__edge(p, u, v, k, false, "the group would read more than %d inputs",
                         KP_MAX_PORTS);
            else {
                size_t ru = kp__root(s, ui), rv = kp__root(s, vi);
                s->parent[ru] = rv;
                s->size[rv] += s->size[ru];
                kp__edge(p, u, v, k, true, "fused");
            }
        }
    }
}

/* The fused module of the group whose members are `ids` (execution order). */
static kp_status kp__make_group(kp_pipeline_t p, kp__fuse_state *s, const size_t *ids, size_t n,
                                kp__module *out, int *slot_of) {
    kp__fused *f = kp__calloc(1, sizeof *f);
    if (!f) return kp__error(KP_ERR_OUT_OF_MEMORY, "fusion: no memory");
    f->dev = p->dev;
    f->n_members = n;
    kp__src srcs[KP_MAX_PORTS];
    memset(out, 0, sizeof *out);
    size_t root = ids[n - 1];
    for (size_t j = 0; j < n; j++) {
        const kp__module *m = &p->mods[ids[j]];
        kp__fused_member *fm = &f->mem[j];
        snprintf(fm->id, KP_NAME_MAX, "%s", m->id);
        snprintf(fm->type, KP_NAME_MAX, "%s", m->type);
        fm->def = m->def;
        fm->param_off = f->params_bytes;
        f->params_bytes += kp__align8(m->def.elementwise->params_bytes);
        fm->out = -1;
        if (ids[j] == root || s->external_out[ids[j]]) {
            fm->out = (int)f->n_out;
            slot_of[ids[j]] = (int)f->n_out;
            f->out_dt[f->n_out] = m->def.outputs[0].desc.dtype;
            kp_port_decl *od = &out->def.outputs[f->n_out];
            *od = m->def.outputs[0];
            snprintf(od->name, KP_NAME_MAX, "%s", m->id);
            f->out_desc[f->n_out] = od->desc;
            f->n_out++;
        }
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            const kp__binding *b = &m->in[k];
            int member = -1;
            for (size_t q = 0; q < j && b->kind == KP__SRC_MODULE; q++)
                if (ids[q] == b->index) member = (int)q;
            if (member >= 0) {
                fm->src[k] = -1 - member;
                continue;
            }
            size_t q = 0;
            while (q < f->n_in && !(srcs[q].kind == b->kind && srcs[q].index == b->index &&
                                    srcs[q].port == b->port))
                q++;
            if (q == f->n_in) {
                KP_ASSERT(f->n_in < KP_MAX_PORTS);
                srcs[q] = (kp__src){b->kind, b->index, b->port};
                f->in_dt[q] = m->def.inputs[k].desc.dtype;
                out->def.inputs[q] = m->def.inputs[k];
                snprintf(out->def.inputs[q].name, KP_NAME_MAX, "in%zu", q);
                out->in[q] = *b;
                f->n_in++;
            }
            fm->src[k] = (int)q;
        }
    }
    f->max_n = kp_desc_numel(&f->out_desc[0]);
    size_t used = (size_t)snprintf(out->id, KP_NAME_MAX, "%s", p->mods[ids[0]].id);
    for (size_t j = 1; j < n && used < KP_NAME_MAX; j++)
        used += (size_t)snprintf(out->id + used, KP_NAME_MAX - used, "+%s", p->mods[ids[j]].id);
    if (used >= KP_NAME_MAX)
        snprintf(out->id, KP_NAME_MAX, "%.40s+%zu more", p->mods[ids[0]].id, n - 1);
    snprintf(out->type, KP_NAME_MAX, "fused");
    out->def.iface = &kp__fused_iface;
    out->def.self = f;
    out->def.n_inputs = f->n_in;
    out->def.n_outputs = f->n_out;
    out->def.live_inputs = out->def.live_shapes = (1u << f->n_in) - 1;
    out->fused = f;
    f->host.run = kp__fused_host;
    f->kernel =
        (kp_kernel){"fused", sizeof(kp__fused_params), {{"host", &f->host}, {"cuda", &f->cuda}}};
    kp_status st = kp__fuse_source(f, &f->source);
    if (st != KP_OK) {
        kp__fused_free(f);
        out->fused = NULL;
        out->def.self = NULL;
    }
    return st;
}

/* Builds the new module list: kept modules, and each group's module at its
 * root's place; renumbers every reference. */
static kp_status kp__rebuild(kp_pipeline_t p, kp__fuse_state *s) {
    size_t n = p->n_modules, n_new = 0;
    kp_status st = KP_OK;
    kp__module *nm = kp__calloc(n, sizeof *nm);
    size_t *pos = kp__calloc(n, sizeof *pos), *ids = kp__calloc(n, sizeof *ids);
    int *slot = kp__calloc(n, sizeof *slot);
    if (!nm || !pos || !ids || !slot) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "fusion: no memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) slot[i] = -1;
    for (size_t i = 0; i < n; i++) {
        const kp__module *m = &p->mods[i];
        size_t r = kp__root(s, i);
        bool alone = s->size[r] == 1 && (!kp__is_ew(m) || m->def.iface->execute);
        if (alone) {
            pos[i] = n_new;
            nm[n_new++] = *m;
            continue;
        }
        bool is_root = true; /* the group's last member in order */
        for (size_t j = i + 1; j < n && is_root; j++) is_root = kp__root(s, j) != r;
        if (!is_root) continue;
        size_t cnt = 0;
        for (size_t j = 0; j <= i; j++)
            if (kp__root(s, j) == r) ids[cnt++] = j;
        for (size_t q = 0; q < cnt; q++) pos[ids[q]] = n_new;
        KP_CHECK_GOTO(kp__make_group(p, s, ids, cnt, &nm[n_new], slot), st, out);
        n_new++;
    }
    /* references: bindings to module outputs, and the externals */
    for (size_t i = 0; i < n_new; i++)
        for (size_t k = 0; k < nm[i].def.n_inputs; k++) {
            kp__binding *b = &nm[i].in[k];
            if (b->kind != KP__SRC_MODULE) continue;
            if (nm[pos[b->index]].fused) {
                KP_ASSERT(slot[b->index] >= 0);
                b->port = (size_t)slot[b->index];
            }
            b->index = pos[b->index];
        }
    for (size_t e = 0; e < p->n_inputs; e++) {
        kp__external *x = &p->inputs[e];
        size_t fi = pos[x->module];
        if (nm[fi].fused)
            for (size_t k = 0; k < nm[fi].def.n_inputs; k++)
                if (nm[fi].in[k].kind == KP__SRC_EXTERNAL && nm[fi].in[k].index == e) x->port = k;
        x->module = fi;
    }
    for (size_t e = 0; e < p->n_outputs; e++) {
        kp__external *x = &p->outputs[e];
        if (nm[pos[x->module]].fused) {
            KP_ASSERT(slot[x->module] >= 0);
            x->port = (size_t)slot[x->module];
        }
        x->module = pos[x->module];
    }
    for (size_t i = 0; i < n_new; i++)
        if (nm[i].fused) nm[i].fused->owns = true;
    kp__free(p->mods);
    p->mods = nm;
    p->n_modules = n_new;
    nm = NULL;
out:
    for (size_t i = 0; nm && i < n; i++)
        if (nm[i].fused) kp__fused_free(nm[i].fused);
    kp__free(nm);
    kp__free(pos);
    kp__free(ids);
    kp__free(slot);
    return st;
}

kp_status kp__fuse(kp_pipeline_t p, bool off) {
    size_t n = p->n_modules, n_edges = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        any = any || kp__is_ew(&p->mods[i]);
        n_edges += p->mods[i].def.n_inputs;
    }
    if (!any) return KP_OK;
    kp__fuse_state s = {.p = p};
    s.parent = kp__calloc(n, sizeof *s.parent);
    s.size = kp__calloc(n, sizeof *s.size);
    s.consumers = kp__calloc(n, sizeof *s.consumers);
    s.external_out = kp__calloc(n, sizeof *s.external_out);
    p->fuse_edges = kp__calloc(n_edges + 1, sizeof *p->fuse_edges);
    kp_status st = KP_OK;
    if (!s.parent || !s.size || !s.consumers || !s.external_out || !p->fuse_edges) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "fusion: no memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        s.parent[i] = i;
        s.size[i] = 1;
        const kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++)
            if (m->in[k].kind == KP__SRC_MODULE) s.consumers[m->in[k].index]++;
    }
    for (size_t e = 0; e < p->n_outputs; e++) s.external_out[p->outputs[e].module] = true;
    kp__join(&s, off);
    st = kp__rebuild(p, &s);
out:
    kp__free(s.parent);
    kp__free(s.size);
    kp__free(s.consumers);
    kp__free(s.external_out);
    return st;
}

/* --- reports ----------------------------------------------------------------------- */
kp_status kp_pipeline_fusion_report(kp_pipeline_t p, size_t i, kp_fusion_report *r) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_ARG_CHECK(p && r);
    for (size_t m = 0; m < p->n_modules; m++) {
        const kp__fused *f = p->mods[m].fused;
        if (!f || i--) continue;
        memset(r, 0, sizeof *r);
        r->module = m;
        r->n_members = f->n_members;
        for (size_t j = 0; j < f->n_members; j++) {
            r->members[j] = f->mem[j].id;
            r->member_types[j] = f->mem[j].type;
        }
        r->source = f->source;
        r->compile_ms = f->rtc.compile_ms;
        r->cached = f->rtc.cached;
        return KP_OK;
    }
    return kp__error(KP_ERR_NOT_FOUND, "pipeline \"%s\": no fused group at that index", p->name);
}

kp_status kp_pipeline_fusion_edge(kp_pipeline_t p, size_t i, kp_fusion_edge *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(p && out);
    if (i >= p->n_fuse_edges)
        return kp__error(KP_ERR_NOT_FOUND,
                         "pipeline \"%s\" has %zu connections that touch an elementwise module",
                         p->name, p->n_fuse_edges);
    const kp__fuse_edge *e = &p->fuse_edges[i];
    *out = (kp_fusion_edge){e->from, e->to, e->fused, e->why};
    return KP_OK;
}
