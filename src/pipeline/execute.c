/* Pipeline execution: the arena, descriptor uploads, and the lifecycle
 * setup -> configure_io -> warmup -> build_graph -> execute. */
#include <stdio.h>
#include <string.h>

#include "pipeline-impl.h"

#define KP__TENSOR_ALIGN 256
#define KP__DESC_ALIGN 64

static size_t kp__align(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* base + off, where base may be NULL when nothing was allocated (pointer
 * arithmetic on NULL is undefined even for off == 0). */
static void *kp__at(void *base, size_t off) { return base ? (char *)base + off : NULL; }

static const char *const kp__state_names[] = {"created", "set up", "configured", "warmed up",
                                              "built"};

/* The call needs the pipeline in `at_least`; `hint` says what comes first. */
static kp_status kp__require_state(kp_pipeline_t p, kp__state at_least, const char *call,
                                   const char *hint) {
    if (!p) return kp__error(KP_ERR_INVALID_ARG, "%s: pipeline is NULL", call);
    if (p->state < at_least)
        return kp__error(KP_ERR_STATE, "%s: pipeline \"%s\" is %s; %s first", call, p->name,
                         kp__state_names[p->state], hint);
    return KP_OK;
}

/* The stream of a call must exist and belong to the pipeline's device. */
static kp_status kp__check_stream(kp_pipeline_t p, kp_stream_t s, const char *fn) {
    if (!s) return kp__error(KP_ERR_INVALID_ARG, "%s: stream is NULL", fn);
    kp_device_t d = kp_stream_device(s);
    if (d != p->dev)
        return kp__error_devices(fn, "stream", d, kp_device_name(d), "pipeline", p->dev,
                                 kp_device_name(p->dev));
    return KP_OK;
}

/* --- the plan ----------------------------------------------------------------------- */
/* Places `bytes` at the next `align`-aligned offset of a region, with checked
 * arithmetic: modules state their sizes, and a sum must not wrap. */
static bool kp__place(size_t *end, size_t align, size_t bytes, size_t *at) {
    size_t a;
    if (*end > KP__MAX_ALLOC_BYTES || bytes > KP__MAX_ALLOC_BYTES) return false;
    a = kp__align(*end, align);
    *at = a;
    *end = a + bytes;
    return *end <= KP__MAX_ALLOC_BYTES;
}

/* One module's memory: its tensors, then the pipeline's copies of its inputs. */
static bool kp__plan_tensors(kp_pipeline_t p, kp__module *m, size_t *off) {
    if (!kp__place(off, KP__TENSOR_ALIGN, m->req.device_bytes, &m->tensor_off)) return false;
    p->tensor_bytes += m->req.device_bytes;
    for (size_t k = 0; k < m->def.n_inputs; k++) {
        kp__binding *b = &m->in[k];
        if (!b->copy) continue;
        b->copy_bytes = (size_t)kp_desc_bytes_needed(&m->def.inputs[k].desc);
        if (!kp__place(off, KP__TENSOR_ALIGN, b->copy_bytes, &b->copy_off)) return false;
        m->copy_bytes += b->copy_bytes;
        p->tensor_bytes += b->copy_bytes;
    }
    return true;
}

/* Lays out every module's tensors, the input copies, workspaces and
 * descriptors; allocates nothing, so a spec can be planned and reported
 * without running it. */
kp_status kp__plan(kp_pipeline_t p) {
    size_t off = 0, soff = 0, doff = 0;
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        memset(&m->req, 0, sizeof m->req);
        if (m->def.iface->memory_requirements) {
            kp_status st = m->def.iface->memory_requirements(m->def.self, &m->req);
            if (st != KP_OK)
                return kp__error_prefix(st, "module \"%s\" memory_requirements", m->id);
        }
        if (!kp__plan_tensors(p, m, &off)) goto too_big;
    }
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        if (!kp__place(&off, KP__TENSOR_ALIGN, m->req.workspace_bytes, &m->workspace_off) ||
            !kp__place(&soff, KP__DESC_ALIGN, m->req.static_desc_bytes, &m->static_desc_off) ||
            !kp__place(&doff, KP__DESC_ALIGN, m->req.dynamic_desc_bytes, &m->dynamic_desc_off))
            goto too_big;
        p->workspace_bytes += m->req.workspace_bytes;
    }
    p->static_desc_bytes = soff;
    p->dynamic_desc_bytes = doff;
    p->static_desc_at = kp__align(off, KP__TENSOR_ALIGN);
    p->dynamic_desc_at = kp__align(p->static_desc_at + soff, KP__DESC_ALIGN);
    p->arena_bytes = p->dynamic_desc_at + doff;
    p->staging_stride = kp__align(doff, KP__DESC_ALIGN);
    /* the static descriptors, the slots, then a shadow of the last upload */
    p->pinned_bytes = kp__align(soff, KP__DESC_ALIGN) + (KP__DYN_SLOTS + 1) * p->staging_stride;
    if (p->arena_bytes > KP__MAX_ALLOC_BYTES || p->pinned_bytes > KP__MAX_ALLOC_BYTES) goto too_big;
    return KP_OK;
too_big:
    return kp__error(KP_ERR_OUT_OF_MEMORY,
                     "pipeline \"%s\": its modules ask for more memory than "
                     "one allocation holds (%zu bytes)",
                     p->name, KP__MAX_ALLOC_BYTES);
}

/* --- setup ------------------------------------------------------------------------- */
/* The one device allocation and the one pinned staging allocation, from the
 * device's caching allocators, device-wide (no stream): the pipeline's ticks
 * may come on any stream, and freeing waits for the device. */
static kp_status kp__allocate(kp_pipeline_t p) {
    KP_CHECK(kp_device_allocator(p->dev, KP_ALLOCATOR_DEVICE, &p->arena_alloc));
    KP_CHECK(kp_device_allocator(p->dev, KP_ALLOCATOR_PINNED, &p->pinned_alloc));
    if (p->arena_bytes)
        KP_CHECK(kp_allocator_alloc(p->arena_alloc, p->arena_bytes, NULL, &p->arena));
    if (p->pinned_bytes) {
        KP_CHECK(kp_allocator_alloc(p->pinned_alloc, p->pinned_bytes, NULL, &p->pinned));
        memset(p->pinned, 0, p->pinned_bytes);
    }
    p->static_desc_dev = kp__at(p->arena, p->static_desc_at);
    p->dynamic_desc_dev = kp__at(p->arena, p->dynamic_desc_at);
    return KP_OK;
}

/* Dynamic staging slot k (KP__DYN_SLOTS: the shadow of the last upload). */
static void *kp__staging_slot(kp_pipeline_t p, unsigned k) {
    return kp__at(p->pinned,
                  kp__align(p->static_desc_bytes, KP__DESC_ALIGN) + k * p->staging_stride);
}

/* Frees what setup made; the pipeline goes back to "created" (still planned). */
static void kp__release(kp_pipeline_t p) {
    /* Uploads still in flight read the pinned slots: freeing the device-wide
     * arena waits for the device's pending work, so no stream (which the
     * caller may already have destroyed) is touched here. */
    p->last_stream = NULL;
    p->acquired = -1;
    p->uploaded = false;
    p->slot = 0;
    for (unsigned g = 0; g < KP__DYN_GROUPS; g++) {
        kp_event_destroy(p->group_done[g]);
        p->group_done[g] = NULL;
    }
    kp_event_destroy(p->handoff);
    p->handoff = NULL;
    kp_graph_cache_destroy(p->cache);
    kp_stream_destroy(p->build_stream);
    /* the arena first: its free waits for the device, so no upload still reads
     * the pinned slots when they go back */
    if (p->arena) (void)kp_allocator_free(p->arena_alloc, p->arena);
    if (p->pinned) (void)kp_allocator_free(p->pinned_alloc, p->pinned);
    p->build_stream = NULL;
    p->cache = NULL;
    p->graph_nodes = 0;
    p->arena = p->pinned = NULL;
    p->state = KP__CREATED;
}

static kp_status kp__setup_modules(kp_pipeline_t p) {
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        kp_mem_slice s = {
            .device = kp__at(p->arena, m->tensor_off),
            .device_bytes = m->req.device_bytes,
            .workspace = kp__at(p->arena, m->workspace_off),
            .workspace_bytes = m->req.workspace_bytes,
            .static_host = kp__at(p->pinned, m->static_desc_off),
            .static_dev = kp__at(p->static_desc_dev, m->static_desc_off),
            .static_bytes = m->req.static_desc_bytes,
            .dynamic_dev = kp__at(p->dynamic_desc_dev, m->dynamic_desc_off),
            .dynamic_bytes = m->req.dynamic_desc_bytes,
        };
        if (!m->def.iface->setup_memory) continue;
        kp_status st = m->def.iface->setup_memory(m->def.self, &s);
        if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" setup_memory", m->id);
    }
    return KP_OK;
}

kp_status kp_pipeline_setup(kp_pipeline_t p) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_CHECK(kp__require_state(p, KP__CREATED, __func__, ""));
    if (p->state != KP__CREATED)
        return kp__error(KP_ERR_STATE, "kp_pipeline_setup: pipeline \"%s\" is already set up",
                         p->name);
    kp_status st;
    KP_CHECK_GOTO(kp__allocate(p), st, fail);
    for (unsigned g = 0; g < KP__DYN_GROUPS; g++)
        KP_CHECK_GOTO(kp_event_create(p->dev, &p->group_done[g]), st, fail);
    KP_CHECK_GOTO(kp_event_create(p->dev, &p->handoff), st, fail);
    KP_CHECK_GOTO(kp_stream_create(p->dev, &p->build_stream), st, fail);
    if (p->mode == KP_EXEC_GRAPH)
        KP_CHECK_GOTO(kp_graph_cache_create(p->dev, &p->cache_cfg, &p->cache), st, fail);
    KP_CHECK_GOTO(kp__setup_modules(p), st, fail);
    p->state = KP__SETUP;
    return KP_OK;
fail:
    kp__release(p);
    return st;
}

/* --- a tick ------------------------------------------------------------------------- */
/* Does a tick's tensor fit a port's declaration: its dtype and rank, fixed
 * dimensions exactly, dynamic ones from 1 to the maximum? (The per-tick
 * check; kp__check_fits says why not.) */
static bool kp__fits(const kp_tensor_desc *t, const kp_port_decl *d) {
    if (t->dtype != d->desc.dtype || t->ndim != d->desc.ndim) return false;
    for (int k = 0; k < t->ndim; k++) {
        bool dyn = d->dynamic >> k & 1u;
        if (dyn ? t->shape[k] < 1 || t->shape[k] > d->desc.shape[k]
                : t->shape[k] != d->desc.shape[k])
            return false;
    }
    return true;
}

static kp_status kp__check_fits(const kp_tensor_desc *t, const kp_port_decl *d, const char *what,
                                const char *whose) {
    char a[96], b[96];
    if (t->dtype != d->desc.dtype || t->ndim != d->desc.ndim)
        return kp__error(KP_ERR_MISMATCH, "%s is %s, but %s takes %s", what,
                         kp_desc_str(t, a, sizeof a), whose, kp_desc_str(&d->desc, b, sizeof b));
    for (int k = 0; k < t->ndim; k++) {
        bool dyn = d->dynamic >> k & 1u;
        if (dyn && t->shape[k] > d->desc.shape[k])
            return kp__error(KP_ERR_MISMATCH,
                             "%s is %s: dimension %d is over its maximum %lld (%s)", what,
                             kp_desc_str(t, a, sizeof a), k, (long long)d->desc.shape[k], whose);
        if (dyn && t->shape[k] < 1)
            return kp__error(KP_ERR_MISMATCH,
                             "%s is %s: dynamic dimension %d takes 1 .. %lld (%s)", what,
                             kp_desc_str(t, a, sizeof a), k, (long long)d->desc.shape[k], whose);
        if (!dyn && t->shape[k] != d->desc.shape[k])
            return kp__error(KP_ERR_MISMATCH, "%s is %s, but %s takes %s", what,
                             kp_desc_str(t, a, sizeof a), whose,
                             kp_desc_str(&d->desc, b, sizeof b));
    }
    return KP_OK;
}

/* Binds the caller's tensors to the external inputs, by name, checked. */
static kp_status kp__bind_inputs(kp_pipeline_t p, const kp_port_info *in, size_t n) {
    if (n && !in) return kp__error(KP_ERR_INVALID_ARG, "inputs is NULL");
    for (size_t i = 0; i < p->n_inputs; i++) p->inputs[i].cur.data = NULL;
    for (size_t j = 0; j < n; j++) {
        size_t i = j < p->n_inputs && in[j].name && strcmp(p->inputs[j].name, in[j].name) == 0
                       ? j
                       : p->n_inputs;
        for (size_t k = 0; i == p->n_inputs && k < p->n_inputs; k++)
            if (in[j].name && strcmp(p->inputs[k].name, in[j].name) == 0) i = k;
        if (i == p->n_inputs)
            return kp__error(KP_ERR_NOT_FOUND, "pipeline \"%s\" has no input \"%s\"", p->name,
                             in[j].name ? in[j].name : "(null)");
        const kp__external *e = &p->inputs[i];
        const kp_port_decl *d = &p->mods[e->module].def.inputs[e->port];
        char what[96], whose[2 * KP_NAME_MAX + 2], a[96];
        if (p->inputs[i].cur.data)
            return kp__error(KP_ERR_INVALID_ARG, "input \"%s\" is given twice", e->name);
        if (kp_desc_validate(&in[j].desc) != KP_OK)
            return kp__error_prefix(KP_ERR_INVALID_ARG, "input \"%s\"", e->name);
        if (!kp__fits(&in[j].desc, d) || !kp_desc_is_contiguous(&in[j].desc)) {
            snprintf(what, sizeof what, "input \"%s\"", e->name);
            snprintf(whose, sizeof whose, "%s.%s", p->mods[e->module].id, d->name);
            KP_CHECK(kp__check_fits(&in[j].desc, d, what, whose));
            return kp__error(KP_ERR_MISMATCH,
                             "input \"%s\" is %s (strided), but %s takes it contiguous", e->name,
                             kp_desc_str(&in[j].desc, a, sizeof a), whose);
        }
        if (!in[j].data) return kp__error(KP_ERR_INVALID_ARG, "input \"%s\" has no data", e->name);
        p->inputs[i].cur = in[j];
        p->inputs[i].cur.name = e->name;
    }
    for (size_t i = 0; i < p->n_inputs; i++)
        if (!p->inputs[i].cur.data)
            return kp__error(KP_ERR_INVALID_ARG, "input \"%s\" was not given", p->inputs[i].name);
    return KP_OK;
}

static kp_status kp__fill_outputs(kp_pipeline_t p, kp_port_info *out, size_t n) {
    if (n && !out) return kp__error(KP_ERR_INVALID_ARG, "outputs is NULL");
    for (size_t j = 0; j < n; j++) {
        size_t i = p->n_outputs;
        for (size_t k = 0; k < p->n_outputs && i == p->n_outputs; k++)
            if (out[j].name && strcmp(p->outputs[k].name, out[j].name) == 0) i = k;
        if (i == p->n_outputs)
            return kp__error(KP_ERR_NOT_FOUND, "pipeline \"%s\" has no output \"%s\"", p->name,
                             out[j].name ? out[j].name : "(null)");
        const kp_port_info *src = &p->mods[p->outputs[i].module].out_info[p->outputs[i].port];
        out[j].data = src->data;
        out[j].desc = src->desc;
    }
    return KP_OK;
}

/* What feeds binding b of this tick: the upstream tensor as it is now. */
static const kp_port_info *kp__source(kp_pipeline_t p, const kp__binding *b) {
    return b->kind == KP__SRC_EXTERNAL ? &p->inputs[b->index].cur
                                       : &p->mods[b->index].out_info[b->port];
}

/* Bytes a copy binding moves this tick: its source's, contiguous. */
static size_t kp__copy_bytes(const kp__module *m, size_t k) {
    return (size_t)kp_desc_numel(&m->in_info[k].desc) * kp_dtype_size(m->in_info[k].desc.dtype);
}

/* One module's tick: its inputs (the pipeline's copy buffer where it copies,
 * else the upstream tensor), its io call, then its outputs checked against
 * their declarations. */
static kp_status kp__module_io(kp_pipeline_t p, kp__module *m, kp_stream_t s, void *slot) {
    for (size_t k = 0; k < m->def.n_inputs; k++) {
        const kp__binding *b = &m->in[k];
        const kp_port_info *src = kp__source(p, b);
        if (b->copy) {
            if (!kp_desc_is_contiguous(&src->desc))
                return kp__error(KP_ERR_UNSUPPORTED,
                                 "module \"%s\" input \"%s\": graph mode copies it, and its "
                                 "source is not contiguous this tick",
                                 m->id, m->def.inputs[k].name);
            m->in_info[k].data = kp__at(p->arena, b->copy_off);
            m->in_info[k].desc = src->desc;
            m->in_info[k].desc.offset = 0;
        } else {
            m->in_info[k] = *src;
        }
        m->in_info[k].name = m->def.inputs[k].name;
    }
    kp_module_io io = {.stream = s,
                       .inputs = m->in_info,
                       .n_inputs = m->def.n_inputs,
                       .outputs = m->out_info,
                       .n_outputs = m->def.n_outputs,
                       .dynamic_desc =
                           m->req.dynamic_desc_bytes ? kp__at(slot, m->dynamic_desc_off) : NULL};
    kp_status st = m->def.iface->io(m->def.self, &io);
    if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" io", m->id);
    for (size_t k = 0; k < m->def.n_outputs; k++) {
        const kp_tensor_desc *od = &m->out_info[k].desc;
        m->out_info[k].name = m->def.outputs[k].name;
        if (kp__fits(od, &m->def.outputs[k]) && kp__desc_ok(od)) continue;
        char what[2 * KP_NAME_MAX + 40];
        snprintf(what, sizeof what, "module \"%s\" io: its output \"%s\"", m->id,
                 m->def.outputs[k].name);
        if (kp_desc_validate(od) != KP_OK) return kp__error_prefix(KP_ERR_INTERNAL, "%s", what);
        return kp__check_fits(od, &m->def.outputs[k], what, "its declaration");
    }
    return KP_OK;
}

/* A pipeline has one arena: its ticks must run on the device in call order.
 * When a call comes on another stream than the last, the new stream waits
 * (on the device; the host does not block) for the work enqueued so far. */
static kp_status kp__order_after_last(kp_pipeline_t p, kp_stream_t s) {
    if (p->last_stream && p->last_stream != s) {
        KP_CHECK(kp_event_record(p->handoff, p->last_stream));
        KP_CHECK(kp_stream_wait_event(s, p->handoff));
    }
    p->last_stream = s;
    return KP_OK;
}

/* Makes staging slot k writable: entering a group waits for the group's
 * previous uploads, done long ago in steady state, so this does not block.
 * Ticks are ordered on the device (kp__order_after_last), so the event
 * recorded after a group's last upload covers all of the group's uploads. */
static kp_status kp__slot_acquire(kp_pipeline_t p, unsigned k) {
    if (!p->dynamic_desc_bytes) return KP_OK;
    if (k % KP__DYN_GROUP == 0 && p->acquired != (int)k)
        KP_CHECK(kp_event_sync(p->group_done[k / KP__DYN_GROUP]));
    p->acquired = (int)k;
    return KP_OK;
}

/* Uploads slot k unless it holds exactly what the last upload put on the
 * device: the device region then already reads right for the work that
 * follows, and the tick costs no copy at all. */
static kp_status kp__slot_upload(kp_pipeline_t p, unsigned k, kp_stream_t s) {
    if (!p->dynamic_desc_bytes) return KP_OK;
    void *slot = kp__staging_slot(p, k), *shadow = kp__staging_slot(p, KP__DYN_SLOTS);
    if (p->uploaded && memcmp(slot, shadow, p->dynamic_desc_bytes) == 0) return KP_OK;
    /* a few bytes of addresses and shapes, not data: not counted as a host
     * copy (kp_copy_count_watch), so a flow whose frames stay on the device
     * passes strict_no_host_copies though each new frame address is sent */
    kp_copy_counts *watch = kp_copy_count_watch(NULL);
    kp_status st = kp_memcpy_async(s, p->dynamic_desc_dev, slot, p->dynamic_desc_bytes);
    kp_copy_count_watch(watch);
    KP_CHECK(st);
    if (k % KP__DYN_GROUP == KP__DYN_GROUP - 1)
        KP_CHECK(kp_event_record(p->group_done[k / KP__DYN_GROUP], s));
    memcpy(shadow, slot, p->dynamic_desc_bytes);
    p->uploaded = true;
    p->acquired = -1;
    p->slot = (k + 1) % KP__DYN_SLOTS;
    return KP_OK;
}

static kp_status kp__configure(kp_pipeline_t p, const kp_port_info *inputs, size_t n_inputs,
                               kp_port_info *outputs, size_t n_outputs, kp_stream_t s) {
    KP_CHECK(kp__bind_inputs(p, inputs, n_inputs));
    KP_CHECK(kp__order_after_last(p, s));
    unsigned k = p->slot;
    void *slot = kp__staging_slot(p, k);
    KP_CHECK(kp__slot_acquire(p, k));
    for (size_t i = 0; i < p->n_modules; i++) KP_CHECK(kp__module_io(p, &p->mods[i], s, slot));
    KP_CHECK(kp__slot_upload(p, k, s));
    KP_CHECK(kp__fill_outputs(p, outputs, n_outputs));
    if (p->state == KP__SETUP) p->state = KP__CONFIGURED;
    return KP_OK;
}

kp_status kp_pipeline_configure_io(kp_pipeline_t p, const kp_port_info *inputs, size_t n_inputs,
                                   kp_port_info *outputs, size_t n_outputs, kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_CHECK(kp__require_state(p, KP__SETUP, __func__, "call kp_pipeline_setup"));
    KP_CHECK(kp__check_stream(p, s, __func__));
    return kp__configure(p, inputs, n_inputs, outputs, n_outputs, s);
}

static kp_status kp__warmup(kp_pipeline_t p, kp_stream_t s) {
    KP_CHECK(kp__order_after_last(p, s));
    if (p->static_desc_bytes)
        KP_CHECK(kp_memcpy_async(s, p->static_desc_dev, p->pinned, p->static_desc_bytes));
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        if (!m->def.iface->warmup) continue;
        kp_status st = m->def.iface->warmup(m->def.self, s);
        if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" warmup", m->id);
    }
    p->state = KP__WARM;
    return KP_OK;
}

kp_status kp_pipeline_warmup(kp_pipeline_t p, kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_CHECK(kp__require_state(p, KP__CONFIGURED, __func__, "call kp_pipeline_configure_io"));
    if (p->state >= KP__WARM)
        return kp__error(KP_ERR_STATE, "kp_pipeline_warmup: pipeline \"%s\" is already warmed up",
                         p->name);
    KP_CHECK(kp__check_stream(p, s, __func__));
    return kp__warmup(p, s);
}

/* --- the graph ---------------------------------------------------------------------- */
/* The default node of a module without add_node_to_graph: its execute(),
 * captured on the build stream into a child graph. */
static kp_status kp__capture_node(kp_pipeline_t p, kp__module *m, kp_graph_t g,
                                  const kp_graph_node_t *deps, size_t n, kp_graph_node_t *out) {
    kp_graph_t captured = NULL;
    KP_CHECK(kp_stream_begin_capture(p->build_stream));
    kp_status st = m->def.iface->execute(m->def.self, p->build_stream);
    kp_status end = kp_stream_end_capture(p->build_stream, &captured);
    if (st == KP_OK) st = end;
    if (st == KP_OK) st = kp_graph_add_child(g, deps, n, captured, out);
    kp_graph_destroy(captured);
    return st;
}

/* A module's node after its upstream modules' nodes, behind the memcpy
 * nodes that fill the pipeline's copies of its inputs. */
static kp_status kp__add_module_node(kp_pipeline_t p, kp__module *m, kp_graph_t g,
                                     kp__copy_state *cs) {
    kp_graph_node_t up[KP_MAX_PORTS], all[2 * KP_MAX_PORTS];
    size_t n_all = 0;
    for (size_t d = 0; d < m->n_deps; d++) all[n_all++] = up[d] = p->mods[m->deps[d]].node;
    for (size_t k = 0; k < m->def.n_inputs; k++) {
        kp__binding *b = &m->in[k];
        if (!b->copy) continue;
        kp__copy_state *c = &cs[b->copy_index];
        c->src = kp__source(p, b)->data;
        KP_CHECK(kp_graph_add_memcpy(g, up, m->n_deps, kp__at(p->arena, b->copy_off), c->src,
                                     kp__copy_bytes(m, k), &c->node));
        all[n_all++] = c->node;
    }
    if (!m->def.iface->add_node_to_graph) return kp__capture_node(p, m, g, all, n_all, &m->node);
    return m->def.iface->add_node_to_graph(m->def.self, g, all, n_all, &m->node);
}

/* The graph cache's build step: every module's nodes for this tick's shapes
 * and addresses; the copies' nodes go to the graph's state. */
static kp_status kp__cache_build(void *user, kp_graph_t g, const kp_graph_args *a, void *state) {
    kp_pipeline_t p = user;
    for (size_t i = 0; i < p->n_modules; i++) {
        kp_status st = kp__add_module_node(p, &p->mods[i], g, state);
        if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" graph node", p->mods[i].id);
    }
    p->graph_nodes = kp_graph_node_count(g);
    return KP_OK;
}

/* Before each launch: re-points the copies whose source moved. */
static kp_status kp__cache_bind(void *user, kp_graph_exec_t ge, const kp_graph_args *a,
                                void *state, bool fresh) {
    kp_pipeline_t p = user;
    kp__copy_state *cs = state;
    for (size_t i = 0; i < p->n_modules && p->n_copies; i++) {
        kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            const kp__binding *b = &m->in[k];
            if (!b->copy) continue;
            kp__copy_state *c = &cs[b->copy_index];
            const void *src = kp__source(p, b)->data;
            if (!fresh && src == c->src) continue;
            KP_CHECK(kp_graph_exec_set_memcpy(ge, c->node, kp__at(p->arena, b->copy_off), src,
                                              kp__copy_bytes(m, k)));
            c->src = src;
        }
    }
    return KP_OK;
}

/* Module by module on `s`, with the copies the graph would make: stream
 * mode, and graph mode's fallback on a miss. */
static kp_status kp__run_modules(kp_pipeline_t p, kp_stream_t s) {
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++)
            if (m->in[k].copy)
                KP_CHECK(kp_memcpy_async(s, kp__at(p->arena, m->in[k].copy_off),
                                         kp__source(p, &m->in[k])->data, kp__copy_bytes(m, k)));
        kp_status st = m->def.iface->execute(m->def.self, s);
        if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" execute", m->id);
    }
    return KP_OK;
}

static kp_status kp__cache_fallback(void *user, kp_stream_t s, const kp_graph_args *a) {
    return kp__run_modules(user, s);
}

/* This tick's key for the graph cache: the dynamic sizes graph nodes bake
 * in, and the external inputs read in place (their addresses). */
static kp_graph_call *kp__tick_call(kp_pipeline_t p) {
    size_t w = 0;
    for (size_t i = 0; i < p->n_modules; i++) {
        const kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            const kp_port_decl *d = &m->def.inputs[k];
            if (!d->dynamic || ((m->def.live_shapes >> k & 1u) && !m->in[k].copy)) continue;
            for (int j = 0; j < d->desc.ndim; j++)
                if (d->dynamic >> j & 1u) p->sig[w++] = m->in_info[k].desc.shape[j];
        }
    }
    for (size_t r = 0; r < p->n_rebind; r++) p->rebind_in[r] = p->inputs[p->rebind_ext[r]].cur;
    kp_graph_call *c = &p->call;
    *c = (kp_graph_call)KP_GRAPH_CALL_INIT;
    c->enqueue = kp__cache_fallback;
    c->build = kp__cache_build;
    c->bind = kp__cache_bind;
    c->user = p;
    c->state_bytes = p->n_copies * sizeof(kp__copy_state);
    c->inputs = p->rebind_in;
    c->n_inputs = p->n_rebind;
    c->literals = p->sig;
    c->n_literals = w;
    c->flags = KP_GRAPH_IN_PLACE;
    return c;
}

/* Graph mode: builds the graph of the last configure_io's key into the
 * cache (a no-op when it is there), instantiated and uploaded. */
static kp_status kp__build(kp_pipeline_t p) {
    KP_CHECK(kp_graph_cache_prepare(p->cache, kp__tick_call(p), 1, p->build_stream));
    return kp_stream_sync(p->build_stream);
}

kp_status kp_pipeline_build_graph(kp_pipeline_t p) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_CHECK(kp__require_state(p, KP__WARM, __func__, "call kp_pipeline_warmup"));
    if (p->mode != KP_EXEC_GRAPH)
        return kp__error(KP_ERR_STATE,
                         "kp_pipeline_build_graph: pipeline \"%s\" runs in stream "
                         "mode",
                         p->name);
    KP_CHECK(kp__build(p));
    p->state = KP__BUILT;
    return KP_OK;
}

kp_graph_cache_t kp_pipeline_graph_cache(kp_pipeline_t p) { return p ? p->cache : NULL; }

/* --- execution ------------------------------------------------------------------------ */

kp_status kp_pipeline_execute_stream(kp_pipeline_t p, kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_CHECK(kp__require_state(p, KP__WARM, __func__, "call kp_pipeline_warmup"));
    if (p->mode != KP_EXEC_STREAM)
        return kp__error(KP_ERR_STATE,
                         "kp_pipeline_execute_stream: pipeline \"%s\" runs in graph "
                         "mode; use kp_pipeline_execute_graph",
                         p->name);
    KP_CHECK(kp__check_stream(p, s, __func__));
    KP_CHECK(kp__order_after_last(p, s));
    return kp__run_modules(p, s);
}

kp_status kp_pipeline_execute_graph(kp_pipeline_t p, kp_stream_t s) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    if (p && p->mode != KP_EXEC_GRAPH)
        return kp__error(KP_ERR_STATE,
                         "kp_pipeline_execute_graph: pipeline \"%s\" runs in stream "
                         "mode; use kp_pipeline_execute_stream",
                         p->name);
    KP_CHECK(kp__require_state(p, KP__BUILT, __func__, "call kp_pipeline_build_graph"));
    KP_CHECK(kp__check_stream(p, s, __func__));
    KP_CHECK(kp__order_after_last(p, s));
    return kp_graph_cache_run(p->cache, kp__tick_call(p), s);
}

void kp_pipeline_destroy(kp_pipeline_t p) {
    if (!p) return;
    kp__release(p);
    if (p->mods)
        for (size_t i = 0; i < p->n_modules; i++)
            if (p->mods[i].def.iface) p->mods[i].def.iface->destroy(p->mods[i].def.self);
    kp__free(p->mods);
    kp__free(p->inputs);
    kp__free(p->outputs);
    kp__free(p->sig);
    kp__free(p->fuse_edges);
    kp__free(p);
}
