/* The JSON form of a flow, read with jansson:
 *
 *   {"kpipe_flow": 1, "name": "demo", "budget_bytes": 0,
 *    "stages": [
 *      {"name": "src", "source": "synthetic", "frames": 1000, "shape": [16384]},
 *      {"name": "relu", "pipeline": "relu.json", "queue": {"capacity": 4, "policy": "block"}},
 *      {"name": "inline", "pipeline": {"kpipe_spec": 1, ...}},
 *      {"name": "out", "sink": "npy", "path": "out.npy", "queue": {"capacity": 2}}]}
 *
 * The sources and sinks, each kind with its own keys, are read in
 * flow_json_ends.c.
 *
 * The first stage is a source; each stage is a source, a pipeline (a spec
 * file, relative to the flow file, or a spec inline), a split or a sink.
 * A stage takes frames from the stage before it, or from the stages its
 * "from" names (a name or a list: flows as graphs); sinks end every path.
 * A queue defaults to capacity 4 (or one per source stream that reaches
 * it, where more do), policy block. Syntax errors name line and
 * column; every other error names the JSON path. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "flow_json-impl.h"

/* A queue's capacity and policy. Without a capacity it holds
 * KP__DEFAULT_CAPACITY frames, or one of each stream that reaches it where
 * more streams do (`streams`): streams that start together (cameras, files
 * opened at once) deliver their frames together, and a smaller queue would
 * drop or stall them at every such burst. */
static kp_status kp__queue(json_t *q, const char *path, size_t streams, kp_flow_stage *st) {
    static const char *const keys[] = {"capacity", "policy", NULL};
    st->queue_capacity = streams > KP__DEFAULT_CAPACITY ? streams : KP__DEFAULT_CAPACITY;
    if (st->queue_capacity > 1024) st->queue_capacity = 1024; /* the most a queue holds */
    st->policy = KP_QUEUE_BLOCK;
    if (!q) return KP_OK;
    char sub[96];
    if (!json_is_object(q)) return KP__PERR("%s: expected an object", path);
    KP_CHECK(kp__json_only_keys(q, path, keys));
    json_t *v = json_object_get(q, "capacity");
    if (v) {
        int64_t cap = 0;
        snprintf(sub, sizeof sub, "%s.capacity", path);
        KP_CHECK(kp__json_int(v, sub, 1, 1024, &cap));
        st->queue_capacity = (size_t)cap;
    }
    if ((v = json_object_get(q, "policy"))) {
        const char *p = json_string_value(v);
        int found = -1;
        for (int k = KP_QUEUE_BLOCK; k <= KP_QUEUE_DROP_NEWEST && p; k++)
            if (strcmp(p, kp_queue_policy_str((kp_queue_policy)k)) == 0) found = k;
        if (found < 0)
            return KP__PERR("%s.policy: expected \"block\", \"drop_oldest\" or \"drop_newest\"",
                            path);
        st->policy = (kp_queue_policy)found;
    }
    return KP_OK;
}

/* The module port ("module.port") that a spec's one external output is,
 * into buf: from the spec object, or from its file read again; "" where
 * the spec says no one port (a model file, several outputs). The stage
 * labels its frames with what that port's module says it makes. */
static void kp__spec_output(json_t *spec, const char *file, char *buf, size_t len) {
    json_t *root = file ? NULL : json_incref(spec);
    char *text = NULL;
    size_t size = 0;
    /* the spec was read once already; a file that fails now says nothing */
    if (file && kp__json_read_file(file, &text, &size) == KP_OK &&
        kp__json_parse(text, size, &root) != KP_OK)
        root = NULL;
    kp__free(text);
    if (file && !root) kp_clear_error();
    json_t *outs = json_object_get(root, "outputs"), *v;
    const char *key;
    buf[0] = '\0';
    if (json_object_size(outs) == 1) {
        json_object_foreach(outs, key, v) {
            if (json_is_string(v)) snprintf(buf, len, "%s", json_string_value(v));
        }
    }
    json_decref(root);
}

static kp_status kp__pipeline(kp__flow_build *b, kp_device_t dev, json_t *s, const char *path,
                              kp__stage_made *m, uint32_t *deadline_us) {
    json_t *spec = json_object_get(s, "pipeline");
    kp_pipeline_t p = NULL;
    kp_status st;
    char output[2 * KP_NAME_MAX + 2];
    KP_CHECK(kp__json_kind_keys(s, path, "pipeline", (const char *const[]){NULL}));
    if (json_is_string(spec)) {
        const char *file = json_string_value(spec);
        char full[2048];
        snprintf(full, sizeof full, "%s%s", file[0] == '/' ? "" : b->base_dir, file);
        st = kp_pipeline_create_from_file(dev, full, &p);
        if (st == KP_OK) kp__spec_output(NULL, full, output, sizeof output);
    } else if (json_is_object(spec)) {
        kp__spec_output(spec, NULL, output, sizeof output);
        char *text = json_dumps(spec, JSON_COMPACT);
        st = text ? kp_pipeline_create_from_json(dev, text, &p)
                  : kp__error(KP_ERR_OUT_OF_MEMORY, "no memory");
        free(text);
    } else {
        return KP__PERR("%s.pipeline: expected a spec file's path or an inline spec", path);
    }
    json_t *batch = json_object_get(s, "batch");
    int64_t max = 0, deadline = 1000;
    int32_t resize[2] = {0, 0};
    bool has_resize = false;
    if (st == KP_OK && batch) {
        static const char *const keys[] = {"max", "deadline_us", "resize", NULL};
        char sub[96];
        snprintf(sub, sizeof sub, "%s.batch", path);
        if (!json_is_object(batch)) st = KP__PERR("%s: expected an object", sub);
        if (st == KP_OK) st = kp__json_only_keys(batch, sub, keys);
        snprintf(sub, sizeof sub, "%s.batch.max", path);
        if (st == KP_OK) st = kp__json_int(json_object_get(batch, "max"), sub, 2, 1024, &max);
        snprintf(sub, sizeof sub, "%s.batch.deadline_us", path);
        json_t *dl = json_object_get(batch, "deadline_us");
        if (st == KP_OK && dl) st = kp__json_int(dl, sub, 0, 10000000, &deadline);
        json_t *rs = json_object_get(batch, "resize");
        snprintf(sub, sizeof sub, "%s.batch.resize", path);
        if (st == KP_OK && rs && (!json_is_array(rs) || json_array_size(rs) != 2))
            st = KP__PERR("%s: expected [width, height]", sub);
        for (size_t k = 0; st == KP_OK && rs && k < 2; k++) {
            int64_t side = 0;
            snprintf(sub, sizeof sub, "%s.batch.resize[%zu]", path, k);
            st = kp__json_int(json_array_get(rs, k), sub, 2, KP_VIDEO_MAX_SIDE, &side);
            resize[k] = (int32_t)side;
        }
        has_resize = rs != NULL;
        if (st != KP_OK) {
            kp_pipeline_destroy(p);
            return st;
        }
    }
    const char *out_port = output[0] ? output : NULL;
    if (st == KP_OK)
        st = batch ? kp__stage_pipeline_batch(dev, p, out_port, (size_t)max,
                                              has_resize ? resize : NULL, m)
                   : kp__stage_pipeline(p, out_port, m);
    *deadline_us = (uint32_t)deadline;
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s.pipeline", path);
}

/* A device the file names: the flow's own where the names agree ("cuda"
 * is "cuda:0"), else one opened here, once per name. */
static kp_status kp__named_device(kp__flow_build *b, const char *name, const char *path,
                                  kp_device_t *out) {
    char full[64];
    if (strlen(name) > 40) return KP__PERR("%s: \"%.40s...\" is not a device name", path, name);
    snprintf(full, sizeof full, strchr(name, ':') ? "%s" : "%s:0", name);
    if (strcmp(full, kp_device_name(b->dev)) == 0) {
        *out = b->dev;
        return KP_OK;
    }
    for (size_t k = 0; k < b->n_opened; k++)
        if (strcmp(full, kp_device_name(b->opened[k])) == 0) {
            *out = b->opened[k];
            return KP_OK;
        }
    if (b->n_opened + 1 == KP_FLOW_MAX_DEVICES)
        return KP__PERR("%s: a flow runs on at most %d devices", path, KP_FLOW_MAX_DEVICES);
    kp_status st = kp_device_open(full, out);
    if (st != KP_OK) return kp__error_prefix(st, "%s", path);
    if (!kp_device_same_backend(*out, b->dev)) {
        kp_device_close(*out);
        *out = NULL;
        return KP__PERR("%s: \"%s\" is not of the flow's backend (%s)", path, name,
                        kp_device_backend(b->dev));
    }
    b->opened[b->n_opened++] = *out;
    return KP_OK;
}

/* A device given as a name ("cuda:1") or as an ordinal of the flow's
 * backend (1: "cuda:1" for a flow on cuda, "cpu:1" on cpu). */
static kp_status kp__device_value(kp__flow_build *b, json_t *v, const char *path,
                                  kp_device_t *out) {
    char name[64];
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < 4096) {
        snprintf(name, sizeof name, "%s:%lld", kp_device_backend(b->dev),
                 (long long)json_integer_value(v));
        return kp__named_device(b, name, path, out);
    }
    if (!json_is_string(v))
        return KP__PERR("%s: expected a device name (\"cuda:1\") or ordinal (1)", path);
    return kp__named_device(b, json_string_value(v), path, out);
}

/* Where stage i runs: "device" (one), or "replicas" ("all", or a list of
 * devices: pipelines only) dealt by "deal"; "handoff" says how frames from
 * other devices reach it. */
static kp_status kp__placement(kp__flow_build *b, json_t *s, const char *path, size_t i,
                               bool pipeline, size_t *n_rep) {
    json_t *dv = json_object_get(s, "device"), *rp = json_object_get(s, "replicas");
    json_t *h = json_object_get(s, "handoff"), *dl = json_object_get(s, "deal");
    char sub[96];
    *n_rep = 1;
    b->rep_devs[i][0] = b->dev;
    if (dv && rp) return KP__PERR("%s: a stage takes \"device\" or \"replicas\", not both", path);
    if (dv) {
        snprintf(sub, sizeof sub, "%s.device", path);
        KP_CHECK(kp__device_value(b, dv, sub, &b->rep_devs[i][0]));
    }
    if (rp) {
        snprintf(sub, sizeof sub, "%s.replicas", path);
        if (!pipeline) return KP__PERR("%s: only a pipeline stage has replicas", sub);
        char name[64];
        if (json_is_string(rp) && strcmp(json_string_value(rp), "all") == 0) {
            const char *be = kp_device_backend(b->dev);
            int n = kp_device_count(be, NULL, 0);
            if (n < 1) return KP__PERR("%s: backend %s has no devices", sub, be);
            *n_rep = n > KP_FLOW_MAX_REPLICAS ? KP_FLOW_MAX_REPLICAS : (size_t)n;
            for (size_t r = 0; r < *n_rep; r++) {
                snprintf(name, sizeof name, "%s:%zu", be, r);
                KP_CHECK(kp__named_device(b, name, sub, &b->rep_devs[i][r]));
            }
        } else if (json_is_array(rp) && json_array_size(rp) >= 1 &&
                   json_array_size(rp) <= KP_FLOW_MAX_REPLICAS) {
            *n_rep = json_array_size(rp);
            for (size_t r = 0; r < *n_rep; r++) {
                json_t *e = json_array_get(rp, r);
                snprintf(sub, sizeof sub, "%s.replicas[%zu]", path, r);
                KP_CHECK(kp__device_value(b, e, sub, &b->rep_devs[i][r]));
            }
        } else {
            return KP__PERR("%s: expected \"all\" or a list of 1 to %d devices", sub,
                            KP_FLOW_MAX_REPLICAS);
        }
    }
    if (h) {
        const char *v = json_string_value(h);
        int found = -1;
        for (int k = KP_HANDOFF_AUTO; k <= KP_HANDOFF_STAGED && v; k++)
            if (strcmp(v, kp_handoff_str((kp_handoff)k)) == 0) found = k;
        if (found < 0)
            return KP__PERR("%s.handoff: expected \"auto\", \"copy\", \"in_place\" or \"staged\"",
                            path);
        b->st[i].handoff = (kp_handoff)found;
    }
    if (dl) {
        const char *v = json_string_value(dl);
        if (v && strcmp(v, "least_loaded") == 0)
            b->st[i].deal = KP_DEAL_LEAST_LOADED;
        else if (v && strcmp(v, "round_robin") == 0)
            b->st[i].deal = KP_DEAL_ROUND_ROBIN;
        else
            return KP__PERR("%s.deal: expected \"least_loaded\" or \"round_robin\"", path);
    }
    return KP_OK;
}

/* "from": the name of one stage or a list of them; stored as pointers into
 * the document, which outlives the flow's creation. */
static kp_status kp__from(kp__flow_build *b, json_t *v, const char *path, size_t i) {
    if (!v) return KP_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n < 1 || n > KP_FLOW_MAX_STAGES)
        return KP__PERR("%s.from: expected a stage's name or a list of 1 to %d names", path,
                        KP_FLOW_MAX_STAGES);
    for (size_t k = 0; k < n; k++) {
        json_t *e = json_is_array(v) ? json_array_get(v, k) : v;
        if (!json_is_string(e)) return KP__PERR("%s.from[%zu]: expected a stage's name", path, k);
        b->from[i][k] = json_string_value(e);
    }
    b->st[i].from = b->from[i];
    b->st[i].n_from = n;
    return KP_OK;
}

static kp_status kp__split_fn(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    return KP_OK; /* the routing is the flow's, by the stage's route */
}

/* "split": "stream", "user0" or "copy": a stage that only routes its
 * frames among the stages that take from it (or copies them to all). */
static kp_status kp__split(json_t *s, const char *path, kp__stage_made *m, kp_route *route) {
    KP_CHECK(kp__json_kind_keys(s, path, "split", (const char *const[]){NULL}));
    const char *by = json_string_value(json_object_get(s, "split"));
    if (by && strcmp(by, "stream") == 0)
        *route = KP_ROUTE_STREAM;
    else if (by && strcmp(by, "user0") == 0)
        *route = KP_ROUTE_USER0;
    else if (by && strcmp(by, "copy") == 0)
        *route = KP_ROUTE_COPY;
    else
        return KP__PERR("%s.split: expected \"stream\", \"user0\" or \"copy\"", path);
    *m = (kp__stage_made){.fn = kp__split_fn, .max_batch = 1};
    return KP_OK;
}

/* "callback": NAME: the caller's stage of that name (its function, state
 * and batching), in this place of the graph; "frame_bytes" raises the
 * flow's frames to what it writes. */
static kp_status kp__callback(kp__flow_build *b, json_t *s, const char *path, size_t i,
                              size_t n_rep) {
    KP_CHECK(kp__json_kind_keys(s, path, "callback", (const char *const[]){"frame_bytes", NULL}));
    const char *name = json_string_value(json_object_get(s, "callback"));
    if (!name) return KP__PERR("%s.callback: expected the name of one of the caller's stages", path);
    if (n_rep > 1) return KP__PERR("%s: a callback stage has no replicas", path);
    size_t k = 0;
    while (k < b->n_callbacks && strcmp(b->callbacks[k].name, name) != 0) k++;
    if (k == b->n_callbacks)
        return KP__PERR("%s.callback: \"%s\" is not one of the %zu stages given with the flow",
                        path, name, b->n_callbacks);
    if (b->used[k]) return KP__PERR("%s.callback: \"%s\" takes one place only", path, name);
    b->used[k] = true;
    json_t *fb = json_object_get(s, "frame_bytes");
    if (fb) {
        int64_t v = 0;
        char sub[96];
        snprintf(sub, sizeof sub, "%s.frame_bytes", path);
        KP_CHECK(kp__json_int(fb, sub, 1, (int64_t)KP__MAX_ALLOC_BYTES, &v));
        if ((size_t)v > b->frame_bytes) b->frame_bytes = (size_t)v;
    }
    const kp_flow_stage *c = &b->callbacks[k];
    kp_flow_stage *st = &b->st[i];
    st->name = b->names[i];
    st->fn = c->fn;
    st->user = c->user;
    st->batch_fn = c->batch_fn;
    st->max_batch = c->max_batch;
    st->deadline_us = c->deadline_us;
    st->end_fn = c->end_fn;
    st->dev = b->rep_devs[i][0];
    if (c->batch_fn && st->queue_capacity < c->max_batch) st->queue_capacity = c->max_batch;
    return KP_OK;
}

/* Stage i's function and state, once per replica, and its placement. */
static kp_status kp__stage_made_all(kp__flow_build *b, json_t *s, const char *path, size_t i,
                                    size_t n_rep, uint32_t *deadline_us) {
    bool src = json_object_get(s, "source"), snk = json_object_get(s, "sink");
    json_t *split = json_object_get(s, "split");
    for (size_t r = 0; r < n_rep; r++) {
        kp__stage_made *m = &b->made[i][r];
        kp_device_t dev = b->rep_devs[i][r];
        if (split)
            KP_CHECK(kp__split(s, path, m, &b->st[i].route));
        else if (src)
            KP_CHECK(kp__json_source(b, dev, s, path, m));
        else if (snk)
            KP_CHECK(kp__json_sink(b, dev, s, path, m));
        else
            KP_CHECK(kp__pipeline(b, dev, s, path, m, deadline_us));
        b->users[i][r] = m->user;
        if (!snk && m->frame_bytes > b->frame_bytes) b->frame_bytes = m->frame_bytes;
    }
    kp__stage_made *m = &b->made[i][0];
    kp_flow_stage *st = &b->st[i];
    st->name = b->names[i];
    st->fn = m->fn;
    st->batch_fn = m->batch_fn;
    st->end_fn = m->end_fn;
    st->max_batch = m->batch_fn ? m->max_batch : 0;
    st->deadline_us = *deadline_us;
    st->user = m->user;
    st->streams = m->streams;
    st->stream_users = m->stream_users;
    json_t *ns = json_object_get(s, "streams");
    if (src && ns && !m->streams) { /* copies of one stream: the sources that keep no state */
        int64_t k = 1;
        char sub[96];
        snprintf(sub, sizeof sub, "%s.streams", path);
        KP_CHECK(kp__json_int(ns, sub, 1, KP_FLOW_MAX_STREAMS, &k));
        st->streams = (size_t)k;
    }
    if (n_rep > 1) {
        if (m->batch_fn)
            return KP__PERR("%s: a stage with replicas does not micro-batch (yet)", path);
        st->replicas = b->rep_devs[i];
        st->n_replicas = n_rep;
        st->replica_users = b->users[i];
    } else {
        st->dev = b->rep_devs[i][0];
    }
    if (m->batch_fn && st->queue_capacity < m->max_batch)
        st->queue_capacity = m->max_batch; /* a batch fits its queue */
    return KP_OK;
}

/* The source streams that reach stage i (not a source): those of its
 * inputs, "from" or the stage before (a name not yet known counts none;
 * the check of the graph names it). */
static void kp__streams_in(kp__flow_build *b, size_t i) {
    size_t n = 0;
    if (!b->st[i].n_from) n = i ? b->streams_in[i - 1] : 0;
    for (size_t k = 0; k < b->st[i].n_from; k++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(b->names[j], b->st[i].from[k]) == 0) n += b->streams_in[j];
    b->streams_in[i] = n;
}

/* Each stage's role, queue and placement in order; sources and pipelines
 * made as they come, sinks after them all. */
static kp_status kp__stages(kp__flow_build *b, json_t *arr) {
    static const char *const keys[] = {
        "name",    "source",   "pipeline", "sink",      "queue",       "batch",    "frames",
        "shape",   "width",    "height",   "loop",      "path",        "device",   "replicas",
        "deal",    "handoff",  "listen",   "connect",   "frame_bytes", "capacity", "timeout_ms",
        "decoder", "pitch",    "codec",    "encoder",   "bitrate",     "crf",      "preset",
        "bframes", "gop",      "threads",  "format",    "from",        "split",    "streams",
        "paths",   "realtime", "parallel", "max_width", "max_height",  "options",  "open_gop",
        "callback", NULL};
    size_t n = json_array_size(arr);
    if (!json_is_array(arr) || n < 2 || n > KP_FLOW_MAX_STAGES)
        return KP__PERR("$.stages: expected an array of 2 to %d stages", KP_FLOW_MAX_STAGES);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_array_get(arr, i);
        char path[64];
        snprintf(path, sizeof path, "$.stages[%zu]", i);
        if (!json_is_object(s)) return KP__PERR("%s: expected an object", path);
        KP_CHECK(kp__json_only_keys(s, path, keys));
        const char *name = json_string_value(json_object_get(s, "name"));
        if (!name || !*name || strlen(name) >= 64)
            return KP__PERR("%s.name: a name of 1 to 63 characters", path);
        snprintf(b->names[i], sizeof b->names[i], "%s", name);
        bool src = json_object_get(s, "source"), pipe = json_object_get(s, "pipeline"),
             snk = json_object_get(s, "sink"), split = json_object_get(s, "split"),
             cb = json_object_get(s, "callback");
        if ((int)src + (int)pipe + (int)snk + (int)split + (int)cb != 1 || (i == 0 && !src && !cb))
            return KP__PERR("%s: a stage is one of a \"source\", a \"pipeline\", a \"split\", "
                            "a \"sink\" or a \"callback\"%s",
                            path, i == 0 ? ", and the first is a source or a callback" : "");
        src = src || (cb && i == 0); /* a callback first is the flow's source */
        b->st[i].source = src;
        b->callback[i] = cb;
        if (src && json_object_get(s, "queue"))
            return KP__PERR("%s.queue: a source has no queue in front of it", path);
        if (src && json_object_get(s, "from"))
            return KP__PERR("%s.from: a source takes no frames", path);
        KP_CHECK(kp__from(b, json_object_get(s, "from"), path, i));
        char qpath[80];
        snprintf(qpath, sizeof qpath, "%s.queue", path);
        if (!src) {
            kp__streams_in(b, i);
            KP_CHECK(kp__queue(json_object_get(s, "queue"), qpath, b->streams_in[i], &b->st[i]));
        }
        size_t n_rep = 1;
        uint32_t deadline_us = 0;
        KP_CHECK(kp__placement(b, s, path, i, pipe, &n_rep));
        b->sink[i] = snk;
        b->n = i + 1;
        b->n_rep[i] = n_rep;
        if (cb) KP_CHECK(kp__callback(b, s, path, i, n_rep));
        else if (!snk) KP_CHECK(kp__stage_made_all(b, s, path, i, n_rep, &deadline_us));
        if (src) b->streams_in[i] = b->st[i].streams > 1 ? b->st[i].streams : 1;
    }
    /* sinks last: they size what they keep by the largest frame any
     * source or pipeline makes */
    for (size_t i = 0; i < n; i++) {
        char path[64];
        uint32_t deadline_us = 0;
        snprintf(path, sizeof path, "$.stages[%zu]", i);
        if (b->sink[i])
            KP_CHECK(
                kp__stage_made_all(b, json_array_get(arr, i), path, i, b->n_rep[i], &deadline_us));
    }
    return KP_OK;
}

/* Sinks end the graph: nothing takes frames from a sink, and every other
 * stage passes its frames to some stage (names already checked). */
static kp_status kp__ends(const kp__flow_build *b, const kp_flow_config *cfg) {
    size_t down[KP_FLOW_MAX_STAGES];
    KP_CHECK(kp__flow_downstream(cfg, down));
    for (size_t i = 0; i < b->n; i++) {
        if (b->callback[i]) continue; /* a callback may end a path or pass frames on */
        if (b->sink[i] && down[i])
            return KP__PERR("$.stages[%zu] (%s): a sink passes no frames on, but %zu stage%s "
                            "take%s from it",
                            i, b->names[i], down[i], down[i] > 1 ? "s" : "",
                            down[i] > 1 ? "" : "s");
        if (!b->sink[i] && !down[i])
            return KP__PERR("$.stages[%zu] (%s): no stage takes its frames (a flow's paths end "
                            "in sinks)",
                            i, b->names[i]);
    }
    return KP_OK;
}

static kp_status kp__flow_from_root(kp__flow_build *b, json_t *root, kp_flow_t *out) {
    static const char *const keys[] = {"kpipe_flow",   "name",     "budget_bytes",
                                       "trace_events", "stages",   "strict_no_host_copies",
                                       "spin_us",      "carry_us", NULL};
    if (!json_is_object(root)) return KP__PERR("$: expected an object");
    json_t *ver = json_object_get(root, "kpipe_flow");
    if (!ver) return KP__PERR("$.kpipe_flow: missing (this kpipe reads version 1)");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        return KP__PERR("$.kpipe_flow: this kpipe reads version 1");
    KP_CHECK(kp__json_only_keys(root, "$", keys));
    json_t *v = json_object_get(root, "name");
    if (v && !json_is_string(v)) return KP__PERR("$.name: expected a string");
    if ((v = json_object_get(root, "budget_bytes"))) {
        int64_t budget = 0;
        KP_CHECK(kp__json_int(v, "$.budget_bytes", 0, (int64_t)KP__MAX_ALLOC_BYTES, &budget));
        b->budget = (size_t)budget;
    }
    if ((v = json_object_get(root, "trace_events")) && !b->trace) {
        int64_t n = 0;
        KP_CHECK(kp__json_int(v, "$.trace_events", 0, (int64_t)1 << 24, &n));
        b->trace = (size_t)n;
    }
    bool strict = false;
    KP_CHECK(kp__json_opt_bool(root, "$", "strict_no_host_copies", &strict));
    b->strict = strict;
    /* ints here; their ranges are the C form's, checked by the same code below */
    int64_t spin = 0, carry = 0;
    if ((v = json_object_get(root, "spin_us")))
        KP_CHECK(kp__json_int(v, "$.spin_us", INT_MIN, INT_MAX, &spin));
    if ((v = json_object_get(root, "carry_us")))
        KP_CHECK(kp__json_int(v, "$.carry_us", INT_MIN, INT_MAX, &carry));
    KP_CHECK(kp__stages(b, json_object_get(root, "stages")));
    for (size_t k = 0; k < b->n_callbacks; k++)
        if (!b->used[k])
            return KP__PERR("$.stages: no stage is the callback \"%s\" given with the flow",
                            b->callbacks[k].name);
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.strict_no_host_copies = strict;
    cfg.spin_us = (int)spin;
    cfg.carry_us = (int)carry;
    cfg.dev = b->dev;
    cfg.stages = b->st;
    cfg.n_stages = b->n;
    cfg.frame_bytes = b->frame_bytes;
    cfg.budget_bytes = b->budget;
    cfg.trace_events = b->trace;
    /* the rules the C form obeys, checked by the same code, named by path */
    if (kp__flow_check_config(&cfg) != KP_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", kp_last_error());
        return KP__PERR("$.%s", detail);
    }
    KP_CHECK(kp__ends(b, &cfg));
    kp_status st = kp_flow_create(&cfg, out);
    if (st != KP_OK) return st;
    for (size_t k = 0; k < b->n_opened && st == KP_OK; k++)
        st = kp__flow_own_device(*out, b->opened[k]);
    if (st == KP_OK) b->n_opened = 0;
    for (size_t i = 0; i < b->n && st == KP_OK; i++)
        for (size_t r = 0; r < KP_FLOW_MAX_REPLICAS && st == KP_OK; r++) {
            kp__stage_made *m = &b->made[i][r];
            st = kp__flow_own(*out, m->user, m->free_fn);
            m->free_fn = NULL; /* the flow has it (or freed it) */
        }
    if (st != KP_OK) {
        kp_flow_destroy(*out);
        *out = NULL;
    }
    return st;
}

/* The flow in `size` bytes of `text`, its files relative to base_dir. */
static kp_status kp__flow_from_text(kp_device_t dev, const char *text, size_t size,
                                    const char *base_dir, size_t trace,
                                    const kp_flow_stage *callbacks, size_t n_callbacks,
                                    kp_flow_t *out) {
    json_t *root = NULL;
    KP_CHECK(kp__json_parse(text, size, &root));
    kp__flow_build *b = kp__calloc(1, sizeof *b);
    kp_status st;
    if (!b) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory");
    } else {
        b->dev = dev;
        b->base_dir = base_dir;
        b->trace = trace;
        b->callbacks = callbacks;
        b->n_callbacks = n_callbacks;
        st = kp__flow_from_root(b, root, out);
        for (size_t i = 0; i < KP_FLOW_MAX_STAGES; i++)
            for (size_t r = 0; r < KP_FLOW_MAX_REPLICAS; r++)
                if (b->made[i][r].free_fn) b->made[i][r].free_fn(b->made[i][r].user);
        for (size_t k = 0; k < b->n_opened; k++) kp_device_close(b->opened[k]);
        kp__free(b);
    }
    json_decref(root);
    return st;
}

kp_status kp_flow_create_from_json(kp_device_t dev, const char *json_text, kp_flow_t *out) {
    KP_API_ENTRY();
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev || !json_text) return kp__error(KP_ERR_INVALID_ARG, "device and text are required");
    return kp__flow_from_text(dev, json_text, strlen(json_text), "", 0, NULL, 0, out);
}

kp_status kp_flow_create_from_json_with(kp_device_t dev, const char *json_text,
                                        const kp_flow_stage *callbacks, size_t n_callbacks,
                                        kp_flow_t *out) {
    KP_API_ENTRY();
    if (!out) return kp__error(KP_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!dev || !json_text) return kp__error(KP_ERR_INVALID_ARG, "device and text are required");
    if (n_callbacks && !callbacks)
        return kp__error(KP_ERR_INVALID_ARG, "callbacks is NULL with n_callbacks %zu", n_callbacks);
    if (n_callbacks > KP_FLOW_MAX_STAGES)
        return kp__error(KP_ERR_INVALID_ARG, "%zu callbacks; a flow has at most %d stages",
                         n_callbacks, KP_FLOW_MAX_STAGES);
    for (size_t k = 0; k < n_callbacks; k++) {
        const kp_flow_stage *c = &callbacks[k];
        if (!c->name || !*c->name || (!c->fn && !c->batch_fn))
            return kp__error(KP_ERR_INVALID_ARG, "callbacks[%zu]: a name and a function are "
                             "required", k);
        for (size_t j = 0; j < k; j++)
            if (strcmp(callbacks[j].name, c->name) == 0)
                return kp__error(KP_ERR_INVALID_ARG, "callbacks[%zu]: the name \"%s\" is given "
                                 "twice", k, c->name);
    }
    return kp__flow_from_text(dev, json_text, strlen(json_text), "", 0, callbacks, n_callbacks,
                              out);
}

static kp_status kp__flow_from_file(kp_device_t dev, const char *path, size_t trace,
                                    kp_flow_t *out) {
    if (!out || !path) return kp__error(KP_ERR_INVALID_ARG, "path and out are required");
    *out = NULL;
    if (!dev) return kp__error(KP_ERR_INVALID_ARG, "a device is required");
    char *text = NULL;
    size_t size = 0;
    KP_CHECK(kp__json_read_file(path, &text, &size));
    char dir[1024] = "";
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) + 2 < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s/", (int)(slash - path), path);
    kp_status st = kp__flow_from_text(dev, text, size, dir, trace, NULL, 0, out);
    kp__free(text);
    return st == KP_OK ? KP_OK : kp__error_prefix(st, "%s", path);
}

kp_status kp_flow_create_from_file(kp_device_t dev, const char *path, kp_flow_t *out) {
    KP_API_ENTRY();
    return kp__flow_from_file(dev, path, 0, out);
}

kp_status kp_flow_create_from_file_traced(kp_device_t dev, const char *path, size_t trace_events,
                                          kp_flow_t *out) {
    KP_API_ENTRY();
    if (trace_events > ((size_t)1 << 24))
        return kp__error(KP_ERR_INVALID_ARG, "trace_events is %zu (at most 2^24)", trace_events);
    return kp__flow_from_file(dev, path, trace_events, out);
}
