/* Flows' health: the snapshot read from counters at any time, the trace
 * ring and its Chrome trace file, and the NVTX ranges of stage runs. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime-impl.h"

void kp__flow_trace(kp__stage *s, uint64_t seq, double t0, double t1) {
    struct kp_flow *f = s->flow;
    if (!f->trace) return;
    uint64_t k = atomic_fetch_add(&f->trace_n, 1) % f->trace_cap;
    atomic_store(&f->trace[k].seq, seq);
    atomic_store(&f->trace[k].stage, (uint32_t)(s - f->st)); /* the thread's row */
    atomic_store(&f->trace[k].t0_ns, (uint64_t)((t0 - f->t_start_us) * 1e3));
    atomic_store(&f->trace[k].t1_ns, (uint64_t)((t1 - f->t_start_us) * 1e3));
}

void kp__flow_nvtx_push(kp__stage *s, uint64_t seq, size_t n) {
#ifdef KP_HAVE_CUDA
    if (!s->flow->nvtx) return;
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.colorType = NVTX_COLOR_ARGB;
    a.color = 0xff000000u | (uint32_t)(0x3f7fbfu * (s->index + 1) & 0xffffffu);
    a.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    a.payload.ullValue = seq;
    a.category = (uint32_t)n;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = s->nvtx_name;
    nvtxDomainRangePushEx(s->flow->nvtx, &a);
#endif
}

void kp__flow_nvtx_pop(kp__stage *s) {
#ifdef KP_HAVE_CUDA
    if (s->flow->nvtx) nvtxDomainRangePop(s->flow->nvtx);
#endif
}

static int kp__cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* p50 and p99 of k samples in tenths of a microsecond (sorted here). */
static void kp__percentiles(uint32_t *v, size_t k, double *p50, double *p99) {
    *p50 = *p99 = 0;
    if (!k) return;
    qsort(v, k, sizeof *v, kp__cmp_u32);
    *p50 = v[(k - 1) / 2] / 10.0;
    *p99 = v[(size_t)((double)(k - 1) * 0.99)] / 10.0;
}

/* p50 and p99 of a stage's recent host (gpu false) or device times, over
 * its replicas. */
static void kp__latency(const struct kp_flow *f, const kp__lstage *ls, bool gpu, double *p50,
                        double *p99) {
    uint32_t v[KP__LAT_SAMPLES * KP_FLOW_MAX_REPLICAS];
    size_t k = 0;
    /* a source's many streams share the room: each thread gives as many */
    const size_t each = sizeof v / sizeof v[0] / ls->n_rep < KP__LAT_SAMPLES
                            ? sizeof v / sizeof v[0] / ls->n_rep
                            : KP__LAT_SAMPLES;
    for (size_t r = 0; r < ls->n_rep; r++) {
        kp__stage *s = &f->st[ls->first + r];
        _Atomic uint32_t *ring = gpu ? s->gpu_lat : s->lat;
        uint64_t n = atomic_load(gpu ? &s->n_gpu_lat : &s->n_lat);
        size_t m = n < each ? (size_t)n : each;
        for (size_t i = 0; i < m; i++) v[k++] = atomic_load(&ring[i]);
    }
    kp__percentiles(v, k, p50, p99);
}

/* Logical stage i's figures, and its queue's. Counters move while we
 * read: a stage's out is read after its in, so in >= out holds for what
 * we return. */
static void kp__stage_health(kp_flow_t f, size_t i, kp_flow_snapshot *out) {
    const kp__lstage *ls = &f->ls[i];
    kp_flow_stage_stats *o = &out->stages[i];
    o->name = f->st[ls->first].name;
    o->device = kp_device_name(f->st[ls->first].ctx.dev);
    o->replicas = ls->n_rep;
    o->source = ls->source;
    for (size_t r = 0; r < ls->n_rep; r++) o->in += atomic_load(&f->st[ls->first + r].in);
    for (size_t r = 0; r < ls->n_rep; r++) {
        o->out += atomic_load(&f->st[ls->first + r].out);
        o->batches += atomic_load(&f->st[ls->first + r].batches);
    }
    kp__latency(f, ls, false, &o->host_p50_us, &o->host_p99_us);
    kp__latency(f, ls, true, &o->gpu_p50_us, &o->gpu_p99_us);
    o->copies = (kp_copy_counts){0, 0, 0, 0};
    for (size_t r = 0; r < o->replicas; r++) {
        const kp__stage *rs = &f->st[ls->first + r];
        o->copies.htod += atomic_load_explicit(&rs->cp_htod, memory_order_relaxed);
        o->copies.dtoh += atomic_load_explicit(&rs->cp_dtoh, memory_order_relaxed);
        o->copies.htod_bytes += atomic_load_explicit(&rs->cp_htod_bytes, memory_order_relaxed);
        o->copies.dtoh_bytes += atomic_load_explicit(&rs->cp_dtoh_bytes, memory_order_relaxed);
    }
    if (o->in < o->out) out->consistent = false;
    if (ls->source) return;
    kp__queue *q = &f->q[i];
    kp_flow_queue_stats *qs = &out->queues[i];
    kp__queue_counts(q, &qs->depth, &qs->pushed);
    qs->max_depth = atomic_load(&q->max_depth);
    qs->capacity = q->cap;
    qs->drops = atomic_load(&q->drops);
    qs->policy = q->policy;
}

/* Each device's stage runs and frame buffers, and the pools' hits. */
static void kp__devices_health(kp_flow_t f, kp_flow_snapshot *out) {
    out->n_devices = f->n_devs;
    for (size_t d = 0; d < f->n_devs; d++) {
        kp_flow_device_stats *ds = &out->devices[d];
        kp_pool_stats ps = {0};
        ds->name = kp_device_name(f->devs[d]);
        ds->runs = 0;
        for (size_t i = 0; i < f->n_st; i++)
            if (f->st[i].dev_i == (int)d) ds->runs += atomic_load(&f->st[i].runs);
        if (kp_buffer_pool_stats(f->pools[d], &ps) != KP_OK) continue;
        ds->frame_bytes = ps.live_bytes + ps.cached_bytes;
        out->pool_hits += ps.hits;
        out->pool_misses += ps.misses;
        out->device_bytes += ds->frame_bytes;
    }
    out->pool_hit_rate = out->pool_hits + out->pool_misses
                             ? (double)out->pool_hits / (double)(out->pool_hits + out->pool_misses)
                             : 0.0;
    out->device_peak_bytes = f->n_frames * f->frame_bytes * f->n_devs;
}

/* The links between devices that carried frames. */
static void kp__links_health(kp_flow_t f, kp_flow_snapshot *out) {
    for (size_t a = 0; a < f->n_devs; a++)
        for (size_t b = 0; b < f->n_devs; b++) {
            const kp__link *l = &f->link[a][b];
            uint64_t frames = atomic_load(&l->frames);
            if (a == b || !frames) continue;
            kp_flow_link_stats *o = &out->links[out->n_links++];
            o->from = kp_device_name(f->devs[a]);
            o->to = kp_device_name(f->devs[b]);
            o->handoff = (kp_handoff)atomic_load(&l->kind);
            o->frames = frames;
            o->bytes = atomic_load(&l->bytes);
            uint64_t t0 = atomic_load(&l->t_first_ns), t1 = atomic_load(&l->t_last_ns);
            o->bytes_per_s = t1 > t0 ? (double)o->bytes * 1e9 / (double)(t1 - t0) : 0.0;
        }
    out->staged_frames = atomic_load(&f->staged);
}

kp_status kp_flow_health(kp_flow_t f, kp_flow_snapshot *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && out);
    memset(out, 0, sizeof *out);
    out->n_stages = f->n;
    out->consistent = true;
    for (size_t i = 0; i < f->n; i++) kp__stage_health(f, i, out);
    out->frames_in_flight = atomic_load(&f->in_flight);
    out->max_frames_in_flight = atomic_load(&f->max_in_flight);
    out->frame_limit = f->n_frames;
    out->bytes_in_flight = out->frames_in_flight * f->frame_bytes;
    out->peak_bytes_in_flight = out->max_frames_in_flight * f->frame_bytes;
    out->budget_bytes = f->budget;
    out->frames_done = atomic_load(&f->done);
    out->frames_dropped = atomic_load(&f->dropped);
    if (out->max_frames_in_flight > f->n_frames) out->consistent = false;
    kp__devices_health(f, out);
    kp__links_health(f, out);
    out->running = atomic_load(&f->started) && atomic_load(&f->running) > 0;
    /* a whole lap of frames finished since a frame last got a buffer */
    out->steady = out->frames_done >= atomic_load(&f->done_at_alloc) + f->n_frames;
    return KP_OK;
}

/* A JSON string's characters: quotes, backslashes and control bytes escaped. */
static void kp__json_escaped(FILE *out, const char *text) {
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
}

kp_status kp_flow_write_trace(kp_flow_t f, const char *path) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && path);
    if (!f->trace) return kp__error(KP_ERR_STATE, "the flow keeps no trace (trace_events is 0)");
    if (!atomic_load(&f->waited)) return kp__error(KP_ERR_STATE, "call kp_flow_wait first");
    FILE *out = fopen(path, "w");
    if (!out) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    uint64_t n = atomic_load(&f->trace_n), first = n > f->trace_cap ? n - f->trace_cap : 0;
    fprintf(out, "{\"traceEvents\": [\n");
    for (size_t i = 0; i < f->n_st; i++) { /* one named row per stage thread */
        const kp__stage *s = &f->st[i];
        fprintf(out,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %zu, "
                "\"args\": {\"name\": \"%zu ",
                i, s->index);
        kp__json_escaped(out, s->name);
        if (f->ls[s->index].n_rep > 1)
            fprintf(out, " [%zu] %s", s->replica, kp_device_name(s->ctx.dev));
        fprintf(out, "\"}},\n");
    }
    for (uint64_t k = first; k < n; k++) {
        struct kp__trace_ev *e = &f->trace[k % f->trace_cap];
        uint64_t t0 = atomic_load(&e->t0_ns), t1 = atomic_load(&e->t1_ns);
        fprintf(out,
                "{\"name\": \"frame %llu\", \"cat\": \"stage\", \"ph\": \"X\", \"pid\": 1, "
                "\"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"seq\": %llu}}%s\n",
                (unsigned long long)atomic_load(&e->seq), atomic_load(&e->stage), t0 / 1e3,
                (t1 - t0) / 1e3, (unsigned long long)atomic_load(&e->seq), k + 1 < n ? "," : "");
    }
    fprintf(out, "], \"displayTimeUnit\": \"ns\"}\n");
    if (fclose(out) != 0) return kp__error(KP_ERR_IO, "%s: writing failed", path);
    return KP_OK;
}

kp_status kp_flow_streams(kp_flow_t f, kp_flow_stream_stats *out, size_t cap, size_t *n) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && n && (out || !cap));
    *n = f->n_streams;
    const double secs = (kp__now_us() - f->t_start_us) * 1e-6;
    for (size_t i = 0; i < f->n; i++) {
        const kp__lstage *ls = &f->ls[i];
        for (size_t r = 0; ls->source && r < ls->n_rep; r++) {
            const size_t id = ls->stream_base + r;
            if (id >= cap) continue;
            kp__stage *s = &f->st[ls->first + r];
            kp_flow_stream_stats *o = &out[id];
            memset(o, 0, sizeof *o);
            o->stage = s->name;
            o->stream = (uint32_t)id;
            o->frames = atomic_load(&s->out);
            o->drops = atomic_load(&f->stream_drops[id]);
            o->frames_per_s = secs > 0 ? (double)o->frames / secs : 0;
            kp__lstage one = {.first = ls->first + r, .n_rep = 1};
            kp__latency(f, &one, false, &o->host_p50_us, &o->host_p99_us);
            uint32_t v[KP__STREAM_LAT];
            const uint64_t nl = atomic_load(&f->stream_nlat[id]);
            const size_t m = nl < KP__STREAM_LAT ? (size_t)nl : KP__STREAM_LAT;
            for (size_t j = 0; j < m; j++)
                v[j] = atomic_load_explicit(&f->stream_lat[id * KP__STREAM_LAT + j],
                                            memory_order_relaxed);
            kp__percentiles(v, m, &o->latency_p50_us, &o->latency_p99_us);
            const kp__stage_kind *k = kp__stage_kind_find(s->fn);
            if (k && k->stream_detail) k->stream_detail(s->user, o->detail, sizeof o->detail);
        }
    }
    return KP_OK;
}

/* A name as a DOT identifier: quoted, its quotes and backslashes escaped. */
static void kp__dot_name(FILE *fp, const char *name) {
    fputc('"', fp);
    for (const char *c = name; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', fp);
        fputc(*c, fp);
    }
    fputc('"', fp);
}

kp_status kp_flow_write_dot(kp_flow_t f, const char *path) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && path);
    FILE *fp = fopen(path, "w");
    if (!fp) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    fprintf(fp, "digraph flow {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n");
    for (size_t i = 0; i < f->n; i++) {
        const kp__lstage *ls = &f->ls[i];
        const kp__stage *s = &f->st[ls->first];
        fprintf(fp, "  ");
        kp__dot_name(fp, s->name);
        fprintf(fp, " [label=\"%s\\n%s on %s", s->name,
                ls->source  ? "source"
                : ls->n_out ? (s->batch_fn ? "batch" : "stage")
                            : "sink",
                kp_device_name(s->ctx.dev));
        if (ls->source && ls->n_rep > 1) fprintf(fp, "\\n%zu streams", ls->n_rep);
        if (!ls->source && ls->n_rep > 1) fprintf(fp, "\\n%zu replicas", ls->n_rep);
        if (s->batch_fn) fprintf(fp, "\\nbatch %zu, deadline %u us", s->max_batch, s->deadline_us);
        if (ls->n_out > 1)
            fprintf(fp, ls->route == KP_ROUTE_COPY ? "\\ncopies to all" : "\\nsplit by %s",
                    kp_route_str(ls->route));
        fprintf(fp, "\"%s];\n",
                ls->source   ? ", shape=invhouse"
                : !ls->n_out ? ", shape=house"
                             : "");
    }
    for (size_t i = 0; i < f->n; i++) {
        const kp__lstage *ls = &f->ls[i];
        for (size_t k = 0; k < ls->n_out; k++) {
            const kp__queue *q = &f->q[ls->out[k]];
            fprintf(fp, "  ");
            kp__dot_name(fp, f->st[ls->first].name);
            fprintf(fp, " -> ");
            kp__dot_name(fp, f->st[f->ls[ls->out[k]].first].name);
            fprintf(fp, " [label=\"%zu, %s", q->cap, kp_queue_policy_str(q->policy));
            if (ls->n_out > 1 && ls->route == KP_ROUTE_COPY)
                fprintf(fp, k ? "\\na copy" : "\\nthe frame");
            else if (ls->n_out > 1)
                fprintf(fp, "\\n%s %% %zu == %zu", kp_route_str(ls->route), ls->n_out, k);
            fprintf(fp, "\"];\n");
        }
    }
    fprintf(fp, "}\n");
    if (fclose(fp) != 0) return kp__error(KP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return KP_OK;
}
