/* A flow's health snapshot as JSON: one writer for the command line's
 * --json report and for bindings (the Python package reads it as a dict). */
#include <string.h>

#include <jansson.h>

#include "runtime-impl.h"

/* Bindings (python/kpipe/_lib.py) hold a snapshot in this many bytes. */
_Static_assert(sizeof(kp_flow_snapshot) <= (1u << 18), "a snapshot outgrew 256 KiB");

static json_t *kp__stage_json(const kp_flow_snapshot *h, size_t i) {
    const kp_flow_stage_stats *s = &h->stages[i];
    json_t *j =
        json_pack("{s:s,s:s,s:I,s:b,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:{s:I,s:I,s:I,s:I}}", "name",
                  s->name ? s->name : "", "device", s->device ? s->device : "", "replicas",
                  (json_int_t)s->replicas, "source", s->source, "in", (json_int_t)s->in, "out",
                  (json_int_t)s->out, "batches", (json_int_t)s->batches, "host_p50_us",
                  s->host_p50_us, "host_p99_us", s->host_p99_us, "gpu_p50_us", s->gpu_p50_us,
                  "gpu_p99_us", s->gpu_p99_us, "copies", "htod", (json_int_t)s->copies.htod, "dtoh",
                  (json_int_t)s->copies.dtoh, "htod_bytes", (json_int_t)s->copies.htod_bytes,
                  "dtoh_bytes", (json_int_t)s->copies.dtoh_bytes);
    const kp_flow_queue_stats *q = &h->queues[i];
    if (j && !s->source &&
        json_object_set_new(j, "queue",
                            json_pack("{s:I,s:I,s:I,s:I,s:I,s:s}", "depth", (json_int_t)q->depth,
                                      "capacity", (json_int_t)q->capacity, "max_depth",
                                      (json_int_t)q->max_depth, "pushed", (json_int_t)q->pushed,
                                      "drops", (json_int_t)q->drops, "policy",
                                      kp_queue_policy_str(q->policy))) != 0) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *kp__health_json(const kp_flow_snapshot *h) {
    json_t *stages = json_array(), *links = json_array(), *devices = json_array();
    for (size_t i = 0; stages && i < h->n_stages && i < KP_FLOW_MAX_STAGES; i++)
        if (json_array_append_new(stages, kp__stage_json(h, i)) != 0) goto fail;
    for (size_t l = 0; links && l < h->n_links && l < KP_FLOW_MAX_LINKS; l++) {
        const kp_flow_link_stats *k = &h->links[l];
        if (json_array_append_new(
                links, json_pack("{s:s,s:s,s:s,s:I,s:I,s:f}", "from", k->from ? k->from : "", "to",
                                 k->to ? k->to : "", "handoff", kp_handoff_str(k->handoff),
                                 "frames", (json_int_t)k->frames, "bytes", (json_int_t)k->bytes,
                                 "bytes_per_s", k->bytes_per_s)) != 0)
            goto fail;
    }
    for (size_t d = 0; devices && d < h->n_devices && d < KP_FLOW_MAX_DEVICES; d++) {
        const kp_flow_device_stats *v = &h->devices[d];
        if (json_array_append_new(
                devices, json_pack("{s:s,s:I,s:I}", "name", v->name ? v->name : "", "frame_bytes",
                                   (json_int_t)v->frame_bytes, "runs", (json_int_t)v->runs)) != 0)
            goto fail;
    }
    if (!stages || !links || !devices) goto fail;
    /* "o" steals the arrays, also when json_pack fails */
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:b,s:b,s:b,s:I,s:o,"
                     "s:o,s:o}",
                     "frames", (json_int_t)h->frames_done, "dropped", (json_int_t)h->frames_dropped,
                     "frames_in_flight", (json_int_t)h->frames_in_flight, "max_frames_in_flight",
                     (json_int_t)h->max_frames_in_flight, "frame_limit", (json_int_t)h->frame_limit,
                     "bytes_in_flight", (json_int_t)h->bytes_in_flight, "peak_bytes_in_flight",
                     (json_int_t)h->peak_bytes_in_flight, "budget_bytes",
                     (json_int_t)h->budget_bytes, "pool_hits", (json_int_t)h->pool_hits,
                     "pool_misses", (json_int_t)h->pool_misses, "pool_hit_rate", h->pool_hit_rate,
                     "device_bytes", (json_int_t)h->device_bytes, "device_peak_bytes",
                     (json_int_t)h->device_peak_bytes, "running", h->running, "steady", h->steady,
                     "consistent", h->consistent, "staged_frames", (json_int_t)h->staged_frames,
                     "stages", stages, "links", links, "devices", devices);
fail:
    json_decref(stages);
    json_decref(links);
    json_decref(devices);
    return NULL;
}

kp_status kp_flow_health_json(const kp_flow_snapshot *h, char *buf, size_t len, size_t *needed) {
    KP_API_ENTRY();
    if (!h || !needed)
        return kp__error(KP_ERR_INVALID_ARG, "kp_flow_health_json: %s is NULL",
                         h ? "needed" : "snapshot");
    if (len && !buf)
        return kp__error(KP_ERR_INVALID_ARG, "kp_flow_health_json: buf is NULL, len %zu", len);
    json_t *root = kp__health_json(h);
    if (!root) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_flow_health_json: no memory");
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) return kp__error(KP_ERR_OUT_OF_MEMORY, "kp_flow_health_json: no memory");
    size_t n = strlen(text) + 1;
    *needed = n;
    kp_status st = KP_OK;
    if (n > len)
        st = kp__error(KP_ERR_INVALID_ARG, "kp_flow_health_json: %zu bytes needed, buf has %zu", n,
                       len);
    else
        memcpy(buf, text, n);
    free(text);
    return st;
}
