/* Pipeline creation: modules from factories, port wiring with checks,
 * topological order, zero-copy decisions; and the reports. */
#include <stdio.h>
#include <string.h>

#include "pipeline-impl.h"

#define KP__MAX_MODULES 256

static const char *const kp__reason_fixed_up =
    "zero-copy: the upstream address is fixed for the pipeline's life";
static const char *const kp__reason_reads_each_tick =
    "zero-copy: the downstream module takes the address anew each tick";
static const char *const kp__reason_stream =
    "zero-copy: stream mode enqueues work with the current addresses each tick";
static const char *const kp__reason_rebind =
    "zero-copy: read in place, with one graph per input address set (input binding rebind)";
static const char *const kp__reason_copy =
    "copy: the upstream address may change per tick and the downstream module's graph node "
    "bakes in its input addresses";

const char *kp_input_binding_str(kp_input_binding b) {
    return b == KP_INPUTS_COPY ? "copy" : b == KP_INPUTS_REBIND ? "rebind" : "invalid";
}

const char *kp_exec_mode_str(kp_exec_mode m) {
    return m == KP_EXEC_STREAM ? "stream" : m == KP_EXEC_GRAPH ? "graph" : "invalid";
}

static kp_status kp__check_name(const char *what, const char *name) {
    if (!name || !*name) return kp__error(KP_ERR_INVALID_ARG, "%s: name is missing or empty", what);
    if (strlen(name) >= KP_NAME_MAX)
        return kp__error(KP_ERR_INVALID_ARG, "%s \"%s\": longer than %d characters", what, name,
                         KP_NAME_MAX - 1);
    if (strchr(name, '.'))
        return kp__error(KP_ERR_INVALID_ARG, "%s \"%s\": names may not contain '.'", what, name);
    return KP_OK;
}

/* What a factory made: the required slots (io and execute may both be
 * left out by an elementwise module, which the pipeline then runs), the
 * port counts, and an elementwise declaration that fused code can use. */
static kp_status kp__check_def(const kp__module *m) {
    const kp_module_i *f = m->def.iface;
    bool ew = m->def.elementwise != NULL;
    if (!f || !f->destroy || (!f->io != !f->execute) || (!ew && !f->io))
        return kp__error(KP_ERR_INVALID_ARG,
                         "module \"%s\" (%s): its factory left a required "
                         "interface slot (destroy, io, execute) empty",
                         m->id, m->type);
    if (m->def.n_inputs > KP_MAX_PORTS || m->def.n_outputs > KP_MAX_PORTS)
        return kp__error(KP_ERR_INVALID_ARG, "module \"%s\": more than %d ports", m->id,
                         KP_MAX_PORTS);
    if (ew) {
        kp_status st = kp__elementwise_check(&m->def);
        if (st != KP_OK) return kp__error_prefix(st, "module \"%s\" (%s)", m->id, m->type);
    }
    return KP_OK;
}

static kp_status kp__create_module(kp_pipeline_t p, const kp_module_spec *ms, size_t i,
                                   kp__module *m) {
    KP_CHECK(kp__check_name("id", ms->id));
    for (size_t j = 0; j < i; j++)
        if (strcmp(p->mods[j].id, ms->id) == 0)
            return kp__error(KP_ERR_INVALID_ARG,
                             "duplicate module id \"%s\" (modules[%zu] and "
                             "modules[%zu])",
                             ms->id, j, i);
    KP_CHECK(kp__check_name("type", ms->type));
    kp_module_create_fn fn = kp__module_lookup(ms->type);
    if (!fn) {
        char list[256];
        kp__module_type_list(list, sizeof list);
        return kp__error(KP_ERR_NOT_FOUND, "module \"%s\": unknown type \"%s\" (known: %s)", ms->id,
                         ms->type, list);
    }
    snprintf(m->id, KP_NAME_MAX, "%s", ms->id);
    snprintf(m->type, KP_NAME_MAX, "%s", ms->type);
    m->no_fuse = ms->no_fuse;
    struct kp_param_use use;
    memset(&use, 0, sizeof use);
    kp_module_env env = {.dev = p->dev, .mode = p->mode, .id = m->id, .params = ms->params,
                         .n_params = ms->n_params, .use = &use, .base_dir = p->base_dir};
    kp_status st = fn(&env, &m->def);
    /* A parameter the factory never looked up is unknown; that is the error
     * to report even when the factory failed (a typo such as "sise" leaves
     * "size" missing). */
    for (size_t k = 0; k < ms->n_params; k++)
        if (!use.read[k]) {
            st = kp__error(KP_ERR_INVALID_ARG, "unknown parameter \"%s\" (it takes: %s)",
                           ms->params[k].key, use.asked[0] ? use.asked : "no parameters");
            break;
        }
    if (st != KP_OK) {
        if (m->def.iface) m->def.iface->destroy(m->def.self);
        memset(&m->def, 0, sizeof m->def);
        return kp__error_prefix(st, "module \"%s\" (%s)", m->id, m->type);
    }
    if (st == KP_OK) st = kp__check_def(m);
    if (st != KP_OK && m->def.iface && m->def.iface->destroy) {
        m->def.iface->destroy(m->def.self);
        memset(&m->def, 0, sizeof m->def);
    }
    return st;
}

/* Finds "module.port" among the modules (spec order); `output` picks the side. */
static kp_status kp__find_port(kp_pipeline_t p, const char *ref, bool output, const char *what,
                               size_t *mod, size_t *port) {
    const char *dot = ref ? strchr(ref, '.') : NULL;
    if (!dot || dot == ref || !dot[1])
        return kp__error(KP_ERR_INVALID_ARG, "%s: \"%s\" is not of the form module.port", what,
                         ref ? ref : "(null)");
    size_t idlen = (size_t)(dot - ref);
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        if (strlen(m->id) != idlen || strncmp(m->id, ref, idlen) != 0) continue;
        size_t n = output ? m->def.n_outputs : m->def.n_inputs;
        const kp_port_decl *d = output ? m->def.outputs : m->def.inputs;
        char names[256] = "";
        for (size_t k = 0, used = 0; k < n; k++) {
            if (strcmp(d[k].name, dot + 1) == 0) {
                *mod = i;
                *port = k;
                return KP_OK;
            }
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", k ? " " : "",
                                     d[k].name);
            if (used >= sizeof names) used = sizeof names - 1;
        }
        return kp__error(KP_ERR_NOT_FOUND, "%s: module \"%s\" (%s) has no %s port \"%s\" (%s: %s)",
                         what, m->id, m->type, output ? "output" : "input", dot + 1,
                         output ? "outputs" : "inputs", n ? names : "none");
    }
    return kp__error(KP_ERR_NOT_FOUND, "%s: no module with id \"%.*s\"", what, (int)idlen, ref);
}

/* Whether an upstream port fits a downstream one: the same dtype and rank,
 * each fixed dimension of the downstream the same size, each dynamic one
 * at least as large as the upstream's (its maximum, or its fixed size): a
 * module sized for larger frames takes smaller ones. */
static bool kp__port_fits(const kp_port_decl *up, const kp_port_decl *down) {
    if (up->desc.dtype != down->desc.dtype || up->desc.ndim != down->desc.ndim) return false;
    for (int d = 0; d < up->desc.ndim; d++) {
        const int64_t u = up->desc.shape[d], v = down->desc.shape[d];
        if (down->dynamic >> d & 1u ? u > v : u != v) return false;
    }
    return true;
}

static kp_status kp__check_same(const kp_port_decl *up, const kp_port_decl *down,
                                const char *what) {
    char a[96], b[96];
    if (!kp_desc_same_shape(&up->desc, &down->desc) && !kp__port_fits(up, down))
        return kp__error(KP_ERR_MISMATCH, "%s: %s of %s %s does not match %s expected by %s", what,
                         up->desc.dtype != down->desc.dtype ? "dtype" : "shape", up->name,
                         kp_desc_str(&up->desc, a, sizeof a), kp_desc_str(&down->desc, b, sizeof b),
                         down->name);
    uint32_t fixed_down = up->dynamic & ~down->dynamic;
    for (int d = 0; fixed_down && d < up->desc.ndim; d++)
        if (fixed_down >> d & 1u)
            return kp__error(KP_ERR_MISMATCH,
                             "%s: dimension %d of %s is dynamic (up to %lld) but %s takes it fixed",
                             what, d, up->name, (long long)up->desc.shape[d], down->name);
    return KP_OK;
}

static kp_status kp__bind(kp_pipeline_t p, size_t mod, size_t port, kp__binding b,
                          const char *what) {
    kp__module *m = &p->mods[mod];
    if (m->in[port].kind != KP__SRC_NONE)
        return kp__error(KP_ERR_INVALID_ARG, "%s: input %s.%s is fed twice", what, m->id,
                         m->def.inputs[port].name);
    m->in[port] = b;
    return KP_OK;
}

static kp_status kp__wire_connections(kp_pipeline_t p, const kp_pipeline_spec *spec) {
    for (size_t c = 0; c < spec->n_connections; c++) {
        const kp_connection_spec *cs = &spec->connections[c];
        char what[320];
        size_t fm, fp, tm, tp;
        snprintf(what, sizeof what, "connection %zu (%s -> %s)", c, cs->from ? cs->from : "?",
                 cs->to ? cs->to : "?");
        KP_CHECK(kp__find_port(p, cs->from, true, what, &fm, &fp));
        KP_CHECK(kp__find_port(p, cs->to, false, what, &tm, &tp));
        if (fm == tm)
            return kp__error(KP_ERR_INVALID_ARG, "%s: a module cannot feed itself (cycle)", what);
        KP_CHECK(kp__check_same(&p->mods[fm].def.outputs[fp], &p->mods[tm].def.inputs[tp], what));
        KP_CHECK(kp__bind(p, tm, tp, (kp__binding){.kind = KP__SRC_MODULE, .index = fm, .port = fp},
                          what));
    }
    return KP_OK;
}

static kp_status kp__wire_externals(kp_pipeline_t p, const kp_pipeline_spec *spec, bool outputs) {
    size_t n = outputs ? spec->n_outputs : spec->n_inputs;
    const kp_external_spec *es = outputs ? spec->outputs : spec->inputs;
    kp__external *ext = outputs ? p->outputs : p->inputs;
    for (size_t i = 0; i < n; i++) {
        char what[160];
        snprintf(what, sizeof what, "external %s %zu", outputs ? "output" : "input", i);
        KP_CHECK(kp__check_name(what, es[i].name));
        snprintf(what, sizeof what, "external %s \"%s\"", outputs ? "output" : "input", es[i].name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(ext[j].name, es[i].name) == 0)
                return kp__error(KP_ERR_INVALID_ARG, "%s is declared twice", what);
        snprintf(ext[i].name, KP_NAME_MAX, "%s", es[i].name);
        KP_CHECK(kp__find_port(p, es[i].port, outputs, what, &ext[i].module, &ext[i].port));
        if (!outputs)
            KP_CHECK(kp__bind(p, ext[i].module, ext[i].port,
                              (kp__binding){.kind = KP__SRC_EXTERNAL, .index = i}, what));
    }
    return KP_OK;
}

static kp_status kp__check_all_fed(kp_pipeline_t p) {
    for (size_t i = 0; i < p->n_modules; i++)
        for (size_t k = 0; k < p->mods[i].def.n_inputs; k++)
            if (p->mods[i].in[k].kind == KP__SRC_NONE)
                return kp__error(KP_ERR_INVALID_ARG, "input %s.%s is not connected to anything",
                                 p->mods[i].id, p->mods[i].def.inputs[k].name);
    return KP_OK;
}

static bool kp__ready(const kp__module *m, const bool *placed) {
    for (size_t k = 0; k < m->def.n_inputs; k++)
        if (m->in[k].kind == KP__SRC_MODULE && !placed[m->in[k].index]) return false;
    return true;
}

/* Puts the modules in a topological order (lowest spec index first among the
 * ready ones) and renumbers every reference. */
static kp_status kp__order(kp_pipeline_t p) {
    size_t n = p->n_modules;
    kp_status st = KP_OK;
    bool *placed = kp__calloc(n, sizeof *placed);
    size_t *pos = kp__calloc(n, sizeof *pos);
    kp__module *sorted = kp__calloc(n, sizeof *sorted);
    if (!placed || !pos || !sorted) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline: no memory to order modules");
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        size_t pick = n;
        for (size_t i = 0; i < n && pick == n; i++)
            if (!placed[i] && kp__ready(&p->mods[i], placed)) pick = i;
        if (pick == n) {
            char list[512];
            size_t used = 0;
            for (size_t i = 0; i < n; i++)
                if (!placed[i] && used < sizeof list)
                    used += (size_t)snprintf(list + used, sizeof list - used, " %s", p->mods[i].id);
            st = kp__error(KP_ERR_INVALID_ARG, "connections form a cycle through:%s", list);
            goto out;
        }
        placed[pick] = true;
        pos[pick] = k;
        sorted[k] = p->mods[pick];
    }
    for (size_t k = 0; k < n; k++)
        for (size_t j = 0; j < sorted[k].def.n_inputs; j++)
            if (sorted[k].in[j].kind == KP__SRC_MODULE)
                sorted[k].in[j].index = pos[sorted[k].in[j].index];
    for (size_t i = 0; i < p->n_inputs; i++) p->inputs[i].module = pos[p->inputs[i].module];
    for (size_t i = 0; i < p->n_outputs; i++) p->outputs[i].module = pos[p->outputs[i].module];
    memcpy(p->mods, sorted, n * sizeof *sorted);
out:
    kp__free(placed);
    kp__free(pos);
    kp__free(sorted);
    return st;
}

/* Graph dependencies: the distinct upstream modules of each module. */
static void kp__find_deps(kp_pipeline_t p) {
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            if (m->in[k].kind != KP__SRC_MODULE) continue;
            bool seen = false;
            for (size_t d = 0; d < m->n_deps; d++) seen = seen || m->deps[d] == m->in[k].index;
            if (!seen) m->deps[m->n_deps++] = m->in[k].index;
        }
    }
}

/* Zero-copy unless, in graph mode, the upstream address may change per tick
 * (external inputs and dynamic outputs) and the downstream module's node
 * bakes its input addresses in (the input is not live): then the pipeline
 * copies the input into a buffer of its own each tick, inside the graph. */
static void kp__decide_copies(kp_pipeline_t p) {
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            kp__binding *b = &m->in[k];
            bool dynamic = b->kind == KP__SRC_EXTERNAL ||
                           (p->mods[b->index].def.dynamic_outputs >> b->port & 1u);
            bool live = m->def.live_inputs >> k & 1u;
            bool baked = p->mode == KP_EXEC_GRAPH && dynamic && !live;
            b->rebind = baked && b->kind == KP__SRC_EXTERNAL && p->binding == KP_INPUTS_REBIND;
            b->copy = baked && !b->rebind;
            b->reason = b->copy                     ? kp__reason_copy
                        : b->rebind                 ? kp__reason_rebind
                        : !dynamic                  ? kp__reason_fixed_up
                        : p->mode == KP_EXEC_STREAM ? kp__reason_stream
                                                    : kp__reason_reads_each_tick;
            kp__log(KP_LOG_INFO, "pipeline %s: %s.%s: %s", p->name, m->id, m->def.inputs[k].name,
                    b->reason);
        }
    }
}

/* What graph mode's keys hold: the copies' slots in a graph's state, the
 * external inputs read in place (each once), and the dynamic dimensions
 * that graph nodes bake in (inputs whose shape the module does not read
 * per tick, and the copies' sizes). */
static kp_status kp__graph_keys(kp_pipeline_t p) {
    if (p->mode != KP_EXEC_GRAPH) return KP_OK;
    for (size_t i = 0; i < p->n_modules; i++) {
        kp__module *m = &p->mods[i];
        for (size_t k = 0; k < m->def.n_inputs; k++) {
            kp__binding *b = &m->in[k];
            const kp_port_decl *d = &m->def.inputs[k];
            if (b->copy) b->copy_index = p->n_copies++;
            bool seen = false;
            for (size_t r = 0; b->rebind && r < p->n_rebind; r++)
                seen = seen || p->rebind_ext[r] == b->index;
            if (b->rebind && !seen) {
                if (p->n_rebind == KP_GRAPH_MAX_PORTS)
                    return kp__error(KP_ERR_UNSUPPORTED,
                                     "binding rebind: more than %d external inputs feed modules "
                                     "that bake addresses in",
                                     KP_GRAPH_MAX_PORTS);
                p->rebind_ext[p->n_rebind++] = b->index;
            }
            if (!(m->def.live_shapes >> k & 1u) || b->copy)
                for (int j = 0; j < d->desc.ndim; j++) p->n_sig += d->dynamic >> j & 1u;
        }
    }
    if (p->n_sig > KP_GRAPH_MAX_LITERALS)
        return kp__error(KP_ERR_UNSUPPORTED,
                         "%zu dynamic dimensions feed graph nodes that bake shapes in (at most %d)",
                         p->n_sig, KP_GRAPH_MAX_LITERALS);
    if (p->n_sig && !(p->sig = kp__calloc(p->n_sig, sizeof *p->sig)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline: no memory");
    return KP_OK;
}

/* A module spec's own fields: counts match arrays, parameters are distinct
 * key/value pairs. */
static kp_status kp__check_module_spec(const kp_module_spec *ms, size_t i) {
    if (ms->n_params > KP__MAX_PARAMS)
        return kp__error(KP_ERR_INVALID_ARG, "modules[%zu]: %zu parameters (at most %d)", i,
                         ms->n_params, KP__MAX_PARAMS);
    if (ms->n_params && !ms->params)
        return kp__error(KP_ERR_INVALID_ARG, "modules[%zu]: n_params is %zu but params is NULL", i,
                         ms->n_params);
    for (size_t k = 0; k < ms->n_params; k++) {
        const kp_param *pk = &ms->params[k];
        if (!pk->key || !pk->value)
            return kp__error(KP_ERR_INVALID_ARG,
                             "modules[%zu].params[%zu]: key and value are "
                             "required",
                             i, k);
        for (size_t j = 0; j < k; j++)
            if (strcmp(ms->params[j].key, pk->key) == 0)
                return kp__error(KP_ERR_INVALID_ARG,
                                 "modules[%zu]: parameter \"%s\" is given "
                                 "twice",
                                 i, pk->key);
    }
    return KP_OK;
}

static kp_status kp__check_spec(kp_device_t dev, const kp_pipeline_spec *spec) {
    if (spec->n_modules == 0 || !spec->modules)
        return kp__error(KP_ERR_INVALID_ARG, "pipeline spec has no modules");
    if (spec->n_modules > KP__MAX_MODULES)
        return kp__error(KP_ERR_INVALID_ARG, "pipeline spec has %zu modules (at most %d)",
                         spec->n_modules, KP__MAX_MODULES);
    if ((spec->n_connections && !spec->connections) || (spec->n_inputs && !spec->inputs) ||
        (spec->n_outputs && !spec->outputs))
        return kp__error(KP_ERR_INVALID_ARG, "pipeline spec: a count is set but its array is NULL");
    if (spec->mode != KP_EXEC_GRAPH && spec->mode != KP_EXEC_STREAM)
        return kp__error(KP_ERR_INVALID_ARG, "pipeline spec: unknown execution mode %d",
                         (int)spec->mode);
    if (spec->binding != KP_INPUTS_COPY && spec->binding != KP_INPUTS_REBIND)
        return kp__error(KP_ERR_INVALID_ARG, "pipeline spec: unknown input binding %d",
                         (int)spec->binding);
    if (spec->graph_cache.n_capture_sizes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "pipeline spec: graph_cache.capture_sizes must be empty: a pipeline "
                         "keys its graphs by exact shapes (padding would read past the "
                         "caller's inputs)");
    for (size_t i = 0; i < spec->n_modules; i++)
        KP_CHECK(kp__check_module_spec(&spec->modules[i], i));
    return KP_OK;
}

kp_status kp_pipeline_create(kp_device_t dev, const kp_pipeline_spec *spec, kp_pipeline_t *out) {
    KP_API_ENTRY();
    return kp__pipeline_create(dev, spec, out, "modules");
}

/* A spec of one module that lists no connections, inputs or outputs (what
 * `kpipe run MODEL.onnx` makes) exposes every port of its module under the
 * port's own name. */
static kp_status kp__auto_externals(kp_pipeline_t p, kp_pipeline_spec *sp, kp_external_spec *ext,
                                    char (*ports)[2 * KP_NAME_MAX + 2]) {
    if (p->n_modules != 1 || sp->n_inputs || sp->n_outputs || sp->n_connections) return KP_OK;
    const kp__module *m = &p->mods[0];
    size_t k = 0;
    for (size_t i = 0; i < m->def.n_inputs + m->def.n_outputs; i++) {
        bool in = i < m->def.n_inputs;
        const kp_port_decl *d = in ? &m->def.inputs[i] : &m->def.outputs[i - m->def.n_inputs];
        snprintf(ports[k], sizeof ports[k], "%s.%s", m->id, d->name);
        ext[k].name = d->name;
        ext[k].port = ports[k];
        k++;
    }
    sp->inputs = ext;
    sp->n_inputs = m->def.n_inputs;
    sp->outputs = ext + m->def.n_inputs;
    sp->n_outputs = m->def.n_outputs;
    kp__free(p->inputs);
    kp__free(p->outputs);
    p->inputs = kp__calloc(sp->n_inputs + 1, sizeof *p->inputs);
    p->outputs = kp__calloc(sp->n_outputs + 1, sizeof *p->outputs);
    if (!p->inputs || !p->outputs) return kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline: no memory");
    return KP_OK;
}

kp_status kp__pipeline_create(kp_device_t dev, const kp_pipeline_spec *spec, kp_pipeline_t *out,
                              const char *modules_path) {
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev || !spec) return kp__error(KP_ERR_INVALID_ARG, "device and spec are required");
    kp_pipeline_spec sp = KP_PIPELINE_SPEC_INIT;
    KP_CHECK(kp__config_read(&sp, sizeof sp, spec, KP__SIZE_THROUGH(kp_pipeline_spec, mode), "spec",
                             "KP_PIPELINE_SPEC_INIT"));
    spec = &sp;
    KP_CHECK(kp__check_spec(dev, spec));
    kp_status st;
    kp_pipeline_t p = kp__calloc(1, sizeof *p);
    if (!p) return kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline: no memory");
    p->dev = dev;
    p->mode = spec->mode;
    p->binding = spec->binding;
    p->cache_cfg = spec->graph_cache;
    p->acquired = -1;
    snprintf(p->name, KP_NAME_MAX, "%s", spec->name ? spec->name : "pipeline");
    p->base_dir = spec->base_dir;
    p->mods = kp__calloc(spec->n_modules, sizeof *p->mods);
    p->inputs = kp__calloc(spec->n_inputs + 1, sizeof *p->inputs);
    p->outputs = kp__calloc(spec->n_outputs + 1, sizeof *p->outputs);
    if (!p->mods || !p->inputs || !p->outputs) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "pipeline: no memory");
        goto fail;
    }
    for (size_t i = 0; i < spec->n_modules; i++) {
        st = kp__create_module(p, &spec->modules[i], i, &p->mods[i]);
        if (st != KP_OK) {
            kp__error_prefix(st, "%s[%zu]", modules_path, i);
            goto fail;
        }
        p->n_modules++;
    }
    p->base_dir = NULL; /* the caller's string: only factories read it */
    kp_external_spec auto_ext[2 * KP_MAX_PORTS];
    char auto_ports[2 * KP_MAX_PORTS][2 * KP_NAME_MAX + 2];
    KP_CHECK_GOTO(kp__auto_externals(p, &sp, auto_ext, auto_ports), st, fail);
    p->n_inputs = spec->n_inputs;
    p->n_outputs = spec->n_outputs;
    KP_CHECK_GOTO(kp__wire_connections(p, spec), st, fail);
    KP_CHECK_GOTO(kp__wire_externals(p, spec, false), st, fail);
    KP_CHECK_GOTO(kp__wire_externals(p, spec, true), st, fail);
    KP_CHECK_GOTO(kp__check_all_fed(p), st, fail);
    KP_CHECK_GOTO(kp__order(p), st, fail);
    KP_CHECK_GOTO(kp__fuse(p, spec->no_fuse), st, fail);
    kp__find_deps(p);
    kp__decide_copies(p);
    KP_CHECK_GOTO(kp__graph_keys(p), st, fail);
    KP_CHECK_GOTO(kp__plan(p), st, fail);
    p->state = KP__CREATED;
    *out = p;
    return KP_OK;
fail:
    kp_pipeline_destroy(p);
    return kp__error_prefix(st, "pipeline \"%s\"", spec->name ? spec->name : "pipeline");
}

/* --- reports ----------------------------------------------------------------------- */
kp_exec_mode kp_pipeline_mode(kp_pipeline_t p) { return p ? p->mode : KP_EXEC_GRAPH; }
const char *kp_pipeline_name(kp_pipeline_t p) { return p ? p->name : "(null)"; }

kp_status kp_pipeline_report_get(kp_pipeline_t p, kp_pipeline_report *r) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_ARG_CHECK(p && r);
    memset(r, 0, sizeof *r);
    r->n_modules = p->n_modules;
    r->n_inputs = p->n_inputs;
    r->n_outputs = p->n_outputs;
    for (size_t i = 0; i < p->n_modules; i++) r->n_connections += p->mods[i].def.n_inputs;
    r->tensor_bytes = p->tensor_bytes;
    r->workspace_bytes = p->workspace_bytes;
    r->static_desc_bytes = p->static_desc_bytes;
    r->dynamic_desc_bytes = p->dynamic_desc_bytes;
    r->arena_bytes = p->arena_bytes;
    r->pinned_bytes = p->pinned_bytes;
    r->graph_nodes = p->graph_nodes;
    r->binding = p->binding;
    for (size_t i = 0; i < p->n_inputs; i++) {
        uint32_t dyn = p->mods[p->inputs[i].module].def.inputs[p->inputs[i].port].dynamic;
        for (; dyn; dyn &= dyn - 1) r->n_dynamic_dims++;
    }
    return KP_OK;
}

kp_status kp_pipeline_module_describe(kp_pipeline_t p, size_t i, char *buf, size_t len,
                                      size_t *needed) {
    KP_API_ENTRY();
    KP_GUARD(p ? &p->guard : NULL, "pipeline");
    KP_ARG_CHECK(p && (buf || !len));
    if (i >= p->n_modules)
        return kp__error(KP_ERR_NOT_FOUND, "module %zu: the pipeline has %zu modules", i,
                         p->n_modules);
    const kp__module *m = &p->mods[i];
    size_t n = 0;
    if (len) buf[0] = 0;
    if (m->def.iface->describe) n = m->def.iface->describe(m->def.self, buf, len);
    if (needed) *needed = n;
    return KP_OK;
}

kp_status kp_pipeline_module_report(kp_pipeline_t p, size_t i, kp_module_report *r) {
    KP_API_ENTRY();
    KP_ARG_CHECK(p && r);
    if (i >= p->n_modules)
        return kp__error(KP_ERR_NOT_FOUND, "module report %zu: the pipeline has %zu modules", i,
                         p->n_modules);
    const kp__module *m = &p->mods[i];
    memset(r, 0, sizeof *r);
    r->id = m->id;
    r->type = m->type;
    r->order = i;
    r->device_offset = m->tensor_off;
    r->workspace_offset = m->workspace_off;
    r->static_desc_offset = p->static_desc_at + m->static_desc_off;
    r->dynamic_desc_offset = p->dynamic_desc_at + m->dynamic_desc_off;
    r->req = m->req;
    r->copy_bytes = m->copy_bytes;
    for (size_t k = m->def.n_inputs; k-- > 0;)
        if (m->in[k].copy) r->copy_offset = m->in[k].copy_off;
    r->n_inputs = m->def.n_inputs;
    r->n_outputs = m->def.n_outputs;
    r->inputs = m->def.inputs;
    r->outputs = m->def.outputs;
    r->n_graph_deps = m->n_deps;
    for (size_t d = 0; d < m->n_deps; d++) r->graph_deps[d] = p->mods[m->deps[d]].id;
    return KP_OK;
}

kp_status kp_pipeline_connection_report(kp_pipeline_t p, size_t idx, kp_connection_report *r) {
    KP_API_ENTRY();
    KP_ARG_CHECK(p && r);
    for (size_t i = 0; i < p->n_modules; i++) {
        const kp__module *m = &p->mods[i];
        if (idx >= m->def.n_inputs) {
            idx -= m->def.n_inputs;
            continue;
        }
        const kp__binding *b = &m->in[idx];
        memset(r, 0, sizeof *r);
        r->external = b->kind == KP__SRC_EXTERNAL;
        if (r->external)
            snprintf(r->from, sizeof r->from, "%s", p->inputs[b->index].name);
        else
            snprintf(r->from, sizeof r->from, "%s.%s", p->mods[b->index].id,
                     p->mods[b->index].def.outputs[b->port].name);
        snprintf(r->to, sizeof r->to, "%s.%s", m->id, m->def.inputs[idx].name);
        r->zero_copy = !b->copy;
        r->reason = b->reason;
        return KP_OK;
    }
    return kp__error(KP_ERR_NOT_FOUND, "connection report: index out of range");
}

static kp_status kp__external_info(kp_pipeline_t p, size_t i, bool output, kp_port_info *out) {
    if (!p || !out) return kp__error(KP_ERR_INVALID_ARG, "pipeline and out are required");
    size_t n = output ? p->n_outputs : p->n_inputs;
    if (i >= n)
        return kp__error(KP_ERR_NOT_FOUND, "pipeline \"%s\" has %zu external %s", p->name, n,
                         output ? "outputs" : "inputs");
    const kp__external *e = output ? &p->outputs[i] : &p->inputs[i];
    const kp__module *m = &p->mods[e->module];
    out->name = e->name;
    out->data = NULL;
    out->desc = output ? m->def.outputs[e->port].desc : m->def.inputs[e->port].desc;
    return KP_OK;
}

static kp_status kp__external_dynamic(kp_pipeline_t p, size_t i, bool output, uint32_t *out) {
    kp_port_info info;
    KP_CHECK(kp__external_info(p, i, output, out ? &info : NULL));
    const kp__external *e = output ? &p->outputs[i] : &p->inputs[i];
    const kp__module *m = &p->mods[e->module];
    *out = output ? m->def.outputs[e->port].dynamic : m->def.inputs[e->port].dynamic;
    return KP_OK;
}

kp_status kp_pipeline_input_dynamic(kp_pipeline_t p, size_t i, uint32_t *out) {
    KP_API_ENTRY();
    return kp__external_dynamic(p, i, false, out);
}

kp_status kp_pipeline_output_dynamic(kp_pipeline_t p, size_t i, uint32_t *out) {
    KP_API_ENTRY();
    return kp__external_dynamic(p, i, true, out);
}

kp_status kp_pipeline_input_info(kp_pipeline_t p, size_t i, kp_port_info *out) {
    KP_API_ENTRY();
    return kp__external_info(p, i, false, out);
}

kp_status kp_pipeline_output_info(kp_pipeline_t p, size_t i, kp_port_info *out) {
    KP_API_ENTRY();
    return kp__external_info(p, i, true, out);
}
