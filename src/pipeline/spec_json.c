/* The JSON form of a pipeline spec, read with jansson:
 *
 *   {"kpipe_spec": 1, "name": "sample", "execution": "graph",
 *    "modules": [{"type": "engine", "id": "module_a", "params": {"size": 16384}}, ...],
 *    "connections": ["module_a.result0 -> module_b.input",
 *                    {"from": "...", "to": "..."}],
 *    "inputs": {"input0": "module_a.arg0", ...},
 *    "outputs": {"output": "module_b.output"},
 *    "input_binding": "copy",                  // or "rebind" (zero-copy graph mode)
 *    "graph_cache": {"miss": "capture", "max_graphs": 16, "max_bytes": 0, "max_variants": 4},
 *    "fuse": true}                              // false: no elementwise fusion
 *
 * A module object may say "fuse": false too: that module fuses with none of
 * its neighbours.
 *
 * A module's size parameter may be dynamic: "size": {"max": 16384}.
 *
 * Syntax errors name line and column; every other error names the JSON path. */
#include <stdio.h>
#include <string.h>

#include "pipeline-impl.h"
#include "../core/json-impl.h"

/* Storage for one conversion: the spec arrays and the text of params. */
typedef struct kp__json_spec {
    kp_pipeline_spec spec;
    kp_module_spec *modules;
    kp_param *params;
    char (*values)[64];
    kp_connection_spec *conns;
    char (*conn_text)[2][2 * KP_NAME_MAX + 2];
    kp_external_spec *ins, *outs;
    char **owned; /* texts of object params ("batch=8,height=1080"), n_owned of them */
    size_t n_owned;
} kp__json_spec;

static void kp__json_spec_free(kp__json_spec *s) {
    kp__free(s->modules);
    kp__free(s->params);
    kp__free(s->values);
    kp__free(s->conns);
    kp__free(s->conn_text);
    kp__free(s->ins);
    kp__free(s->outs);
    for (size_t i = 0; i < s->n_owned; i++) kp__free(s->owned[i]);
    kp__free(s->owned);
}

/* A JSON number with a point or exponent stays recognisably non-integer
 * ("16384.0", not "16384"), so an integer parameter refuses it. */
static void kp__real_text(double x, char out[64]) {
    snprintf(out, 64, "%.17g", x);
    if (!strpbrk(out, ".eEn")) strcat(out, ".0");
}

/* {"max": N} -> "max:N", the text form kp_param_dim reads. */
static kp_status kp__json_dim(json_t *v, const char *path, const char *key, char out[64]) {
    json_t *max = json_object_get(v, "max");
    if (json_object_size(v) != 1 || !json_is_integer(max))
        return KP__PERR("%s.%s: a dynamic size is {\"max\": N} with an integer N", path, key);
    snprintf(out, 64, "max:%" JSON_INTEGER_FORMAT, json_integer_value(max));
    return KP_OK;
}

/* An object of integers by name ({"batch": 8, "height": 1080}, the onnx
 * module's "max") as the text "batch=8,height=1080", kept in `s`. */
static kp_status kp__json_named_ints(json_t *v, const char *path, const char *key,
                                     kp__json_spec *s, const char **out) {
    size_t cap = 1;
    const char *name;
    json_t *x;
    json_object_foreach(v, name, x) {
        if (!json_is_integer(x))
            return KP__PERR("%s.%s.%s: expected an integer, got %s", path, key, name,
                            kp__json_type(x));
        cap += strlen(name) + 24;
    }
    char **owned = kp__malloc((s->n_owned + 1) * sizeof *owned);
    char *text = kp__malloc(cap);
    if (!owned || !text) {
        kp__free(owned);
        kp__free(text);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "spec: no memory");
    }
    if (s->n_owned) memcpy(owned, s->owned, s->n_owned * sizeof *owned);
    kp__free(s->owned);
    s->owned = owned;
    s->owned[s->n_owned++] = text;
    size_t k = 0;
    text[0] = 0;
    json_object_foreach(v, name, x) k += (size_t)snprintf(text + k, cap - k, "%s%s=%" JSON_INTEGER_FORMAT,
                                                           k ? "," : "", name, json_integer_value(x));
    *out = text;
    return KP_OK;
}

static kp_status kp__json_params(json_t *obj, const char *path, kp_param *p, char (*val)[64],
                                 kp__json_spec *s) {
    const char *key;
    json_t *v;
    size_t k = 0;
    json_object_foreach(obj, key, v) {
        p[k].key = key;
        p[k].value = val[k];
        if (json_is_integer(v))
            snprintf(val[k], 64, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v))
            kp__real_text(json_real_value(v), val[k]);
        else if (json_is_boolean(v))
            snprintf(val[k], 64, "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_string(v))
            p[k].value = json_string_value(v);
        else if (json_is_object(v) && json_object_size(v) == 1 && json_object_get(v, "max"))
            KP_CHECK(kp__json_dim(v, path, key, val[k])); /* a dynamic size: {"max": N} */
        else if (json_is_object(v))
            KP_CHECK(kp__json_named_ints(v, path, key, s, &p[k].value));
        else
            return KP__PERR("%s.%s: expected a number, string, boolean or {\"max\": N}, got %s",
                            path, key, kp__json_type(v));
        k++;
    }
    return KP_OK;
}

static kp_status kp__json_modules(json_t *arr, kp__json_spec *s) {
    static const char *const keys[] = {"type", "id", "params", "fuse", NULL};
    size_t n = json_array_size(arr), n_params = 0, idx;
    json_t *m;
    if (!json_is_array(arr) || n == 0) return KP__PERR("$.modules: expected a non-empty array");
    json_array_foreach(arr, idx, m) {
        json_t *params = json_is_object(m) ? json_object_get(m, "params") : NULL;
        if (params) n_params += json_object_size(params);
    }
    s->modules = kp__calloc(n, sizeof *s->modules);
    s->params = kp__calloc(n_params + 1, sizeof *s->params);
    s->values = kp__calloc(n_params + 1, sizeof *s->values);
    if (!s->modules || !s->params || !s->values)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "spec: no memory");
    size_t used = 0;
    json_array_foreach(arr, idx, m) {
        char path[64];
        snprintf(path, sizeof path, "$.modules[%zu]", idx);
        if (!json_is_object(m)) return KP__PERR("%s: expected an object", path);
        KP_CHECK(kp__json_only_keys(m, path, keys));
        char sub[96];
        snprintf(sub, sizeof sub, "%s.type", path);
        KP_CHECK(kp__json_string(json_object_get(m, "type"), sub, &s->modules[idx].type));
        snprintf(sub, sizeof sub, "%s.id", path);
        KP_CHECK(kp__json_string(json_object_get(m, "id"), sub, &s->modules[idx].id));
        bool fuse = true;
        KP_CHECK(kp__json_opt_bool(m, path, "fuse", &fuse));
        s->modules[idx].no_fuse = !fuse;
        json_t *params = json_object_get(m, "params");
        if (!params) continue;
        snprintf(sub, sizeof sub, "%s.params", path);
        if (!json_is_object(params)) return KP__PERR("%s: expected an object", sub);
        s->modules[idx].params = s->params + used;
        s->modules[idx].n_params = json_object_size(params);
        KP_CHECK(kp__json_params(params, sub, s->params + used, s->values + used, s));
        used += json_object_size(params);
    }
    s->spec.modules = s->modules;
    s->spec.n_modules = n;
    return KP_OK;
}

/* "a.b -> c.d" into two strings. */
static kp_status kp__split_arrow(const char *text, const char *path, char from[], char to[],
                                 size_t cap) {
    const char *arrow = strstr(text, "->");
    if (!arrow)
        return KP__PERR("%s: \"%s\" is not of the form \"module.port -> module.port\"", path, text);
    const char *a = text, *ae = arrow, *b = arrow + 2, *be = text + strlen(text);
    while (a < ae && (*a == ' ' || *a == '\t')) a++;
    while (ae > a && (ae[-1] == ' ' || ae[-1] == '\t')) ae--;
    while (b < be && (*b == ' ' || *b == '\t')) b++;
    while (be > b && (be[-1] == ' ' || be[-1] == '\t')) be--;
    if (ae == a || be == b || (size_t)(ae - a) >= cap || (size_t)(be - b) >= cap)
        return KP__PERR("%s: \"%s\" is not of the form \"module.port -> module.port\"", path, text);
    snprintf(from, cap, "%.*s", (int)(ae - a), a);
    snprintf(to, cap, "%.*s", (int)(be - b), b);
    return KP_OK;
}

static kp_status kp__json_connections(json_t *arr, kp__json_spec *s) {
    static const char *const keys[] = {"from", "to", NULL};
    size_t n = json_array_size(arr), idx;
    json_t *c;
    if (!json_is_array(arr)) return KP__PERR("$.connections: expected an array");
    s->conns = kp__calloc(n + 1, sizeof *s->conns);
    s->conn_text = kp__calloc(n + 1, sizeof *s->conn_text);
    if (!s->conns || !s->conn_text) return kp__error(KP_ERR_OUT_OF_MEMORY, "spec: no memory");
    json_array_foreach(arr, idx, c) {
        char path[64], sub[80];
        snprintf(path, sizeof path, "$.connections[%zu]", idx);
        if (json_is_string(c)) {
            KP_CHECK(kp__split_arrow(json_string_value(c), path, s->conn_text[idx][0],
                                     s->conn_text[idx][1], sizeof s->conn_text[idx][0]));
            s->conns[idx].from = s->conn_text[idx][0];
            s->conns[idx].to = s->conn_text[idx][1];
            continue;
        }
        if (!json_is_object(c)) return KP__PERR("%s: expected a string or an object", path);
        KP_CHECK(kp__json_only_keys(c, path, keys));
        snprintf(sub, sizeof sub, "%s.from", path);
        KP_CHECK(kp__json_string(json_object_get(c, "from"), sub, &s->conns[idx].from));
        snprintf(sub, sizeof sub, "%s.to", path);
        KP_CHECK(kp__json_string(json_object_get(c, "to"), sub, &s->conns[idx].to));
    }
    s->spec.connections = s->conns;
    s->spec.n_connections = n;
    return KP_OK;
}

/* {"name": "module.port", ...} */
static kp_status kp__json_externals(json_t *obj, const char *path, kp_external_spec **out,
                                    size_t *n_out) {
    if (!json_is_object(obj))
        return KP__PERR("%s: expected an object of name: \"module.port\"", path);
    size_t n = json_object_size(obj), k = 0;
    kp_external_spec *e = kp__calloc(n + 1, sizeof *e);
    if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "spec: no memory");
    *out = e;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char sub[160];
        snprintf(sub, sizeof sub, "%s.%s", path, key);
        e[k].name = key;
        KP_CHECK(kp__json_string(v, sub, &e[k].port));
        k++;
    }
    *n_out = n;
    return KP_OK;
}

/* "graph_cache": {"miss": "capture", "max_graphs": 16, "max_bytes": N, "max_variants": 4} */
static kp_status kp__json_graph_cache(json_t *gc, kp_graph_cache_config *cfg) {
    static const char *const keys[] = {"miss", "max_graphs", "max_bytes", "max_variants", NULL};
    if (!json_is_object(gc)) return KP__PERR("$.graph_cache: expected an object");
    KP_CHECK(kp__json_only_keys(gc, "$.graph_cache", keys));
    json_t *v;
    if ((v = json_object_get(gc, "miss"))) {
        const char *m = NULL;
        KP_CHECK(kp__json_string(v, "$.graph_cache.miss", &m));
        if (kp_graph_miss_parse(m, &cfg->miss) != KP_OK)
            return KP__PERR("$.graph_cache.miss: \"%s\" is not capture, fallback or strict", m);
    }
    if ((v = json_object_get(gc, "max_graphs")))
        KP_CHECK(kp__json_count(v, "$.graph_cache.max_graphs", (size_t)1 << 20, &cfg->max_graphs));
    if ((v = json_object_get(gc, "max_bytes")))
        KP_CHECK(kp__json_count(v, "$.graph_cache.max_bytes", KP__MAX_ALLOC_BYTES, &cfg->max_bytes));
    if ((v = json_object_get(gc, "max_variants")))
        KP_CHECK(kp__json_count(v, "$.graph_cache.max_variants", (size_t)1 << 20,
                                &cfg->max_variants));
    return KP_OK;
}

static kp_status kp__json_header(json_t *root, kp__json_spec *s) {
    static const char *const keys[] = {"kpipe_spec", "name",    "execution",     "modules",
                                       "connections", "inputs", "outputs", "input_binding",
                                       "graph_cache", "fuse", NULL};
    if (!json_is_object(root))
        return KP__PERR("$: expected an object, got %s", kp__json_type(root));
    json_t *ver = json_object_get(root, "kpipe_spec");
    if (!ver) return KP__PERR("$.kpipe_spec: missing (this kpipe reads version 1)");
    if (!json_is_integer(ver))
        return KP__PERR("$.kpipe_spec: expected the integer 1, got %s", kp__json_type(ver));
    if (json_integer_value(ver) != 1)
        return KP__PERR("$.kpipe_spec: unsupported version %" JSON_INTEGER_FORMAT
                        " (this kpipe reads version 1)",
                        json_integer_value(ver));
    KP_CHECK(kp__json_only_keys(root, "$", keys));
    json_t *name = json_object_get(root, "name"), *mode = json_object_get(root, "execution");
    if (name) KP_CHECK(kp__json_string(name, "$.name", &s->spec.name));
    if (mode) {
        const char *m = NULL;
        KP_CHECK(kp__json_string(mode, "$.execution", &m));
        if (strcmp(m, "graph") == 0)
            s->spec.mode = KP_EXEC_GRAPH;
        else if (strcmp(m, "stream") == 0)
            s->spec.mode = KP_EXEC_STREAM;
        else
            return KP__PERR("$.execution: \"%s\" is not \"graph\" or \"stream\"", m);
    }
    json_t *bind = json_object_get(root, "input_binding");
    if (bind) {
        const char *b = NULL;
        KP_CHECK(kp__json_string(bind, "$.input_binding", &b));
        if (strcmp(b, "copy") == 0)
            s->spec.binding = KP_INPUTS_COPY;
        else if (strcmp(b, "rebind") == 0)
            s->spec.binding = KP_INPUTS_REBIND;
        else
            return KP__PERR("$.input_binding: \"%s\" is not \"copy\" or \"rebind\"", b);
    }
    bool fuse = true;
    KP_CHECK(kp__json_opt_bool(root, "$", "fuse", &fuse));
    s->spec.no_fuse = !fuse;
    json_t *gc = json_object_get(root, "graph_cache");
    if (gc) KP_CHECK(kp__json_graph_cache(gc, &s->spec.graph_cache));
    return KP_OK;
}

static kp_status kp__json_convert(json_t *root, kp__json_spec *s) {
    KP_CHECK(kp__json_header(root, s));
    KP_CHECK(kp__json_modules(json_object_get(root, "modules"), s));
    json_t *c = json_object_get(root, "connections"), *in = json_object_get(root, "inputs"),
           *out = json_object_get(root, "outputs");
    if (c) KP_CHECK(kp__json_connections(c, s));
    if (in) KP_CHECK(kp__json_externals(in, "$.inputs", &s->ins, &s->spec.n_inputs));
    if (out) KP_CHECK(kp__json_externals(out, "$.outputs", &s->outs, &s->spec.n_outputs));
    s->spec.inputs = s->ins;
    s->spec.outputs = s->outs;
    return KP_OK;
}

/* The spec in `size` bytes of `text` (from a file, or a string: its
 * length), its files relative to base_dir. */
static kp_status kp__from_json(kp_device_t dev, const char *text, size_t size,
                               const kp_pipeline_options *opts, const char *base_dir,
                               kp_pipeline_t *out) {
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    if (opts)
        KP_CHECK(kp__config_read(&o, sizeof o, opts, KP__SIZE_THROUGH(kp_pipeline_options, mode),
                                 "options", "KP_PIPELINE_OPTIONS_INIT"));
    json_t *root = NULL;
    KP_CHECK(kp__json_parse(text, size, &root));
    kp__json_spec s;
    memset(&s, 0, sizeof s);
    s.spec = (kp_pipeline_spec)KP_PIPELINE_SPEC_INIT;
    kp_status st = kp__json_convert(root, &s);
    s.spec.base_dir = base_dir;
    if (st == KP_OK && o.mode != KP_EXEC_FROM_SPEC) s.spec.mode = (kp_exec_mode)o.mode;
    if (st == KP_OK && o.binding != KP_INPUTS_FROM_SPEC)
        s.spec.binding = (kp_input_binding)o.binding;
    if (st == KP_OK && o.fuse != KP_FUSE_FROM_SPEC && o.fuse != 0 && o.fuse != 1)
        st = kp__error(KP_ERR_INVALID_ARG, "options.fuse: %d is not -1, 0 or 1", o.fuse);
    if (st == KP_OK && o.fuse != KP_FUSE_FROM_SPEC) s.spec.no_fuse = !o.fuse;
    if (st == KP_OK && o.graph_cache)
        st = kp__config_read(&s.spec.graph_cache, sizeof s.spec.graph_cache, o.graph_cache,
                             KP__SIZE_THROUGH(kp_graph_cache_config, max_variants),
                             "options.graph_cache", "KP_GRAPH_CACHE_CONFIG_INIT");
    if (st == KP_OK) st = kp__pipeline_create(dev, &s.spec, out, "$.modules");
    kp__json_spec_free(&s);
    json_decref(root);
    return st;
}

static kp_status kp__from_text(kp_device_t dev, const char *text, const kp_pipeline_options *opts,
                               kp_pipeline_t *out) {
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev || !text) return kp__error(KP_ERR_INVALID_ARG, "device and text are required");
    return kp__from_json(dev, text, strlen(text), opts, NULL, out);
}

/* The folder of a file's path ("." for a bare name), as a new string. */
static kp_status kp__dir_of(const char *path, char **out) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 1;
    if (slash == path) n = 1;
    *out = kp__malloc(n + 1);
    if (!*out) return kp__error(KP_ERR_OUT_OF_MEMORY, "spec: no memory");
    memcpy(*out, slash ? path : ".", n);
    (*out)[n] = 0;
    return KP_OK;
}

static kp_status kp__from_file(kp_device_t dev, const char *path, const kp_pipeline_options *opts,
                               kp_pipeline_t *out) {
    if (!out || !path) return kp__error(KP_ERR_INVALID_ARG, "path and out are required");
    *out = NULL;
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "a device is required");
    char *text = NULL, *dir = NULL;
    size_t size = 0;
    KP_CHECK(kp__json_read_file(path, &text, &size));
    kp_status st = kp__dir_of(path, &dir);
    if (st == KP_OK) st = kp__from_json(dev, text, size, opts, dir, out);
    kp__free(dir);
    kp__free(text);
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
}

kp_status kp_pipeline_create_from_json(kp_device_t dev, const char *text, kp_pipeline_t *out) {
    KP_API_ENTRY();
    return kp__from_text(dev, text, NULL, out);
}

kp_status kp_pipeline_create_from_json_opts(kp_device_t dev, const char *text,
                                            const kp_pipeline_options *opts, kp_pipeline_t *out) {
    KP_API_ENTRY();
    return kp__from_text(dev, text, opts, out);
}

kp_status kp_pipeline_create_from_file(kp_device_t dev, const char *path, kp_pipeline_t *out) {
    KP_API_ENTRY();
    return kp__from_file(dev, path, NULL, out);
}

kp_status kp_pipeline_create_from_file_opts(kp_device_t dev, const char *path,
                                            const kp_pipeline_options *opts, kp_pipeline_t *out) {
    KP_API_ENTRY();
    return kp__from_file(dev, path, opts, out);
}

/* jansson (the spec reader's), each backend's, and what modules noted. */
const char *kp_library_versions(char *buf, size_t len) {
    if (!buf || len == 0) return "";
    size_t used = (size_t)snprintf(buf, len, "jansson %s", JANSSON_VERSION);
    const char *name;
    for (size_t i = 0; (name = kp_backend_name(i)) != NULL && used < len; i++) {
        const kp_backend_reg *r = kp_backend_find(name);
        char v[128] = "";
        if (r->versions) r->versions(r, v, sizeof v);
        if (v[0]) used += (size_t)snprintf(buf + used, len - used, ", %s", v);
    }
    for (size_t i = 0; (name = kp_library_name(i)) != NULL && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, ", %s", name);
    return buf;
}
