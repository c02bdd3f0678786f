/* Flows: the public calls that make, start, wait for, cancel and free a
 * flow; the rules every configuration obeys (C and JSON alike); and the
 * kinds of stage by which the flow sees built-in sources and sinks.
 * What runs is in the files beside this one (runtime-impl.h says which). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime-impl.h"

kp_status kp__flow_own(kp_flow_t f, void *obj, void (*free_fn)(void *)) {
    if (!free_fn) return KP_OK;
    if (f->n_owned == sizeof f->owned / sizeof f->owned[0]) {
        free_fn(obj);
        return kp__error(KP_ERR_INTERNAL, "flow: too many owned objects");
    }
    f->owned[f->n_owned].obj = obj;
    f->owned[f->n_owned].device = false;
    f->owned[f->n_owned++].free_fn = free_fn;
    return KP_OK;
}

static void kp__close_device(void *dev) { kp_device_close(dev); }

kp_status kp__flow_own_device(kp_flow_t f, kp_device_t dev) {
    KP_CHECK(kp__flow_own(f, dev, kp__close_device));
    f->owned[f->n_owned - 1].device = true;
    return KP_OK;
}

bool kp_flow_cancelled(kp_flow_t f) { return f && atomic_load(&f->cancel); }

kp_status kp_flow_remote(kp_flow_t f, size_t stage, kp_flow_remote_stats *out) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f && out);
    memset(out, 0, sizeof *out);
    if (stage >= f->n)
        return kp__error(KP_ERR_INVALID_ARG, "stage %zu: the flow has %zu stages", stage, f->n);
    const kp__stage *s = &f->st[f->ls[stage].first];
    const kp__stage_kind *k = kp__stage_kind_find(s->fn);
    if (k && k->remote_stats) return k->remote_stats(s->user, out);
    return kp__error(KP_ERR_INVALID_ARG, "stage %zu (%s) is not a remote queue's end", stage,
                     s->name);
}

static bool kp__is_source(const kp_flow_config *c, size_t i) {
    return i == 0 || c->stages[i].source;
}

/* The stages stage i takes frames from, into up (KP_FLOW_MAX_STAGES):
 * those it names, each before it, or the one before it; none for a
 * source. KP_ERR_INVALID_ARG names a name that is not there. */
static kp_status kp__stage_inputs(const kp_flow_config *c, size_t i, uint16_t *up, size_t *n) {
    const kp_flow_stage *s = &c->stages[i];
    *n = 0;
    if (kp__is_source(c, i)) {
        if (s->n_from || s->from)
            return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).from: a source takes no frames",
                             i, s->name);
        return KP_OK;
    }
    if (!s->n_from) {
        if (s->from)
            return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s): from without n_from", i,
                             s->name);
        up[(*n)++] = (uint16_t)(i - 1);
        return KP_OK;
    }
    if (!s->from || s->n_from > i)
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s).from: %zu names for the %zu stages before it%s", i,
                         s->name, s->n_from, i, s->from ? "" : " (from is NULL)");
    for (size_t k = 0; k < s->n_from; k++) {
        const char *name = s->from[k];
        size_t j = 0;
        while (j < i && !(name && strcmp(c->stages[j].name, name) == 0)) j++;
        if (j == i) {
            bool later = false;
            for (size_t m = i; name && m < c->n_stages && !later; m++)
                later = c->stages[m].name && strcmp(c->stages[m].name, name) == 0;
            return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).from[%zu]: %s%s%s", i, s->name,
                             k, name ? "\"" : "NULL", name ? name : "",
                             !name   ? ""
                             : later ? "\" comes at or after it: a stage takes frames only from "
                                       "stages before it (no cycles)"
                                     : "\" is no stage");
        }
        for (size_t m = 0; m < *n; m++)
            if (up[m] == j)
                return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).from[%zu]: \"%s\" twice", i,
                                 s->name, k, name);
        up[(*n)++] = (uint16_t)j;
    }
    return KP_OK;
}

/* A stage's threads: its replicas, a source's streams, or one. */
static size_t kp__stage_threads(const kp_flow_stage *s) {
    return s->n_replicas > 1 ? s->n_replicas : s->streams > 1 ? s->streams : 1;
}

/* Whether stage i's queue has one thread feeding it and one taking from
 * it: then it is a lock-free ring. */
static bool kp__one_to_one(const kp_flow_config *c, size_t i) {
    uint16_t up[KP_FLOW_MAX_STAGES];
    size_t n = 0;
    if (kp__stage_threads(&c->stages[i]) != 1 || kp__stage_inputs(c, i, up, &n) != KP_OK)
        return false;
    return n == 1 && kp__stage_threads(&c->stages[up[0]]) == 1;
}

size_t kp__flow_copy_quota(const kp_flow_stage *s, size_t n_down) {
    if (s->route != KP_ROUTE_COPY || n_down < 2) return 0;
    return (n_down - 1) * kp__stage_threads(s) * KP__COPY_DEPTH;
}

kp_status kp__flow_downstream(const kp_flow_config *c, size_t *down) {
    memset(down, 0, c->n_stages * sizeof *down);
    for (size_t i = 0; i < c->n_stages; i++) {
        uint16_t up[KP_FLOW_MAX_STAGES];
        size_t n = 0;
        KP_CHECK(kp__stage_inputs(c, i, up, &n));
        for (size_t k = 0; k < n; k++) down[up[k]]++;
    }
    return KP_OK;
}

/* The graph as a whole: every source feeds some stage, and the sources'
 * streams stay within bounds. */
static kp_status kp__check_graph(const kp_flow_config *c) {
    size_t downstream[KP_FLOW_MAX_STAGES], streams = 0;
    KP_CHECK(kp__flow_downstream(c, downstream));
    for (size_t i = 0; i < c->n_stages; i++) {
        if (!kp__is_source(c, i)) continue;
        streams += kp__stage_threads(&c->stages[i]);
        if (!downstream[i])
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): a source no stage takes frames from", i,
                             c->stages[i].name);
    }
    if (streams > KP_FLOW_MAX_STREAMS)
        return kp__error(KP_ERR_INVALID_ARG, "the sources have %zu streams (at most %d)", streams,
                         KP_FLOW_MAX_STREAMS);
    return KP_OK;
}

/* The devices stage i runs on: its replicas, or its one device. */
static size_t kp__stage_devices(const kp_flow_config *c, size_t i, const kp_device_t **devs,
                                kp_device_t *one) {
    const kp_flow_stage *s = &c->stages[i];
    if (s->n_replicas > 1) {
        *devs = s->replicas;
        return s->n_replicas;
    }
    *one = s->dev ? s->dev : c->dev;
    *devs = one;
    return 1;
}

/* Where stage i runs: its devices exist, are of the flow's backend, and a
 * replicated stage names each device once. */
static kp_status kp__check_stage_devices(const kp_flow_config *c, size_t i) {
    const kp_flow_stage *s = &c->stages[i];
    if (s->handoff > KP_HANDOFF_STAGED)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).handoff: unknown hand-over %d", i,
                         s->name, (int)s->handoff);
    if (s->deal != KP_DEAL_LEAST_LOADED && s->deal != KP_DEAL_ROUND_ROBIN)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).deal: unknown deal %d", i, s->name,
                         (int)s->deal);
    if (s->n_replicas > 1) {
        if (kp__is_source(c, i) || s->batch_fn || s->n_replicas > KP_FLOW_MAX_REPLICAS ||
            !s->replicas)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): a replicated stage is not a source, does not "
                             "micro-batch, and has 2 to %d devices in replicas",
                             i, s->name, KP_FLOW_MAX_REPLICAS);
        const kp__stage_kind *k = kp__stage_kind_find(s->fn);
        if (k && k->one_link)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): a stage with one link (a remote queue's end) has "
                             "no replicas",
                             i, s->name);
    } else if (s->replicas || s->replica_users) {
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s): replicas or replica_users without n_replicas >= 2", i,
                         s->name);
    } else if (s->deal != KP_DEAL_LEAST_LOADED) {
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s).deal: only a stage with replicas deals frames", i,
                         s->name);
    }
    kp_device_t one;
    const kp_device_t *devs;
    size_t n = kp__stage_devices(c, i, &devs, &one);
    for (size_t r = 0; r < n; r++) {
        if (!devs[r])
            return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).replicas[%zu] is NULL", i,
                             s->name, r);
        if (!kp_device_same_backend(devs[r], c->dev))
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu] (%s): device %s is not of the flow's backend (%s)", i,
                             s->name, kp_device_name(devs[r]), kp_device_backend(c->dev));
        for (size_t q = 0; q < r; q++)
            if (devs[q] == devs[r] || strcmp(kp_device_name(devs[q]), kp_device_name(devs[r])) == 0)
                return kp__error(
                    KP_ERR_INVALID_ARG,
                    "stages[%zu] (%s).replicas[%zu]: %s is named twice (replicas[%zu])", i, s->name,
                    r, kp_device_name(devs[r]), q);
    }
    return KP_OK;
}

/* Stage i by itself and against the stages before it. */
static kp_status kp__check_stage(const kp_flow_config *c, size_t i) {
    const kp_flow_stage *s = &c->stages[i];
    if (!s->name || !*s->name || strlen(s->name) >= 64)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu].name: 1 to 63 characters", i);
    for (size_t j = 0; j < i; j++)
        if (strcmp(c->stages[j].name, s->name) == 0)
            return kp__error(KP_ERR_INVALID_ARG,
                             "stages[%zu].name: \"%s\" is used twice (stages[%zu] too)", i, s->name,
                             j);
    const bool src = kp__is_source(c, i);
    bool batching = s->batch_fn || s->max_batch > 1;
    if (batching &&
        (src || !s->batch_fn || s->fn || s->max_batch < 2 || s->max_batch > s->queue_capacity))
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s): a micro-batching stage (not a source) sets batch_fn "
                         "and not fn, and max_batch from 2 to its queue_capacity (%zu)",
                         i, s->name, s->queue_capacity);
    if (s->streams > KP_FLOW_MAX_STREAMS || (s->streams > 1 && !src) ||
        (s->stream_users && s->streams < 2))
        return kp__error(KP_ERR_INVALID_ARG,
                         "stages[%zu] (%s).streams is %zu: a source has 0 to %d streams, other "
                         "stages none, and stream_users come with streams >= 2",
                         i, s->name, s->streams, KP_FLOW_MAX_STREAMS);
    if (s->route != KP_ROUTE_STREAM && s->route != KP_ROUTE_USER0 && s->route != KP_ROUTE_COPY)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).route: unknown route %d", i, s->name,
                         (int)s->route);
    if (batching && s->deadline_us > KP_FLOW_MAX_DEADLINE_US)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).deadline_us is %u (at most %d)", i,
                         s->name, s->deadline_us, KP_FLOW_MAX_DEADLINE_US);
    if (!batching && !s->fn)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).fn is NULL", i, s->name);
    if (!src && (s->queue_capacity < 1 || s->queue_capacity > KP__MAX_QUEUE))
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).queue_capacity is %zu (1 .. %d)", i,
                         s->name, s->queue_capacity, KP__MAX_QUEUE);
    if (!src && s->policy != KP_QUEUE_BLOCK && s->policy != KP_QUEUE_DROP_OLDEST &&
        s->policy != KP_QUEUE_DROP_NEWEST)
        return kp__error(KP_ERR_INVALID_ARG, "stages[%zu] (%s).policy: unknown policy %d", i,
                         s->name, (int)s->policy);
    return kp__check_stage_devices(c, i);
}

/* A byte budget must let every micro-batching stage fill its batch: were
 * all the frames it admits held in partial batches, none could arrive
 * before each batch's deadline. With b frames admitted and batches of at
 * most m_k, that cannot happen when b > sum(m_k - 1). The frames set apart
 * for copies (KP__COPY_DEPTH) come on top. */
static kp_status kp__check_budget(const kp_flow_config *c) {
    if (!c->budget_bytes || !c->frame_bytes) return KP_OK;
    size_t down[KP_FLOW_MAX_STAGES];
    KP_CHECK(kp__flow_downstream(c, down));
    size_t admitted = c->budget_bytes / c->frame_bytes, need = 1, copies = 0;
    const char *last = NULL, *copier = NULL;
    for (size_t i = 0; i < c->n_stages; i++) {
        if (c->stages[i].batch_fn) {
            need += c->stages[i].max_batch - 1;
            last = c->stages[i].name;
        }
        size_t q = kp__flow_copy_quota(&c->stages[i], down[i]);
        if (q) copier = c->stages[i].name;
        copies += q;
    }
    if (admitted >= need + copies) return KP_OK;
    if (copies)
        return kp__error(KP_ERR_INVALID_ARG,
                         "budget_bytes (%zu) admits %zu frames of %zu bytes; the stages that "
                         "copy to several (\"%s\" and any before it) set %zu apart for copies, "
                         "and the rest of the flow needs %zu: raise budget_bytes to %zu",
                         c->budget_bytes, admitted, c->frame_bytes, copier, copies, need,
                         (need + copies) * c->frame_bytes);
    return kp__error(KP_ERR_INVALID_ARG,
                     "budget_bytes (%zu) admits %zu frames of %zu bytes; the micro-batching "
                     "stages (\"%s\" and any before it) need %zu, or frames would wait out each "
                     "batch's deadline: raise budget_bytes to %zu or lower max_batch",
                     c->budget_bytes, admitted, c->frame_bytes, last, need, need * c->frame_bytes);
}

kp_status kp__flow_check_config(const kp_flow_config *c) {
    if (!c->dev) return kp__error(KP_ERR_INVALID_ARG, "dev is NULL");
    if (c->n_stages < 2 || c->n_stages > KP_FLOW_MAX_STAGES)
        return kp__error(KP_ERR_INVALID_ARG, "n_stages is %zu (2 .. %d)", c->n_stages,
                         KP_FLOW_MAX_STAGES);
    if (!c->stages) return kp__error(KP_ERR_INVALID_ARG, "stages is NULL");
    if (c->frame_bytes > KP__MAX_ALLOC_BYTES || c->budget_bytes > KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_INVALID_ARG, "frame_bytes or budget_bytes is too large");
    if (c->budget_bytes && c->budget_bytes < c->frame_bytes)
        return kp__error(KP_ERR_INVALID_ARG,
                         "budget_bytes (%zu) is smaller than one frame (%zu bytes)",
                         c->budget_bytes, c->frame_bytes);
    if (c->spin_us > 1000000 || c->spin_us < -1)
        return kp__error(KP_ERR_INVALID_ARG, "spin_us is %d (-1 .. 1000000)", c->spin_us);
    if (c->carry_us > 1000000 || c->carry_us < -1)
        return kp__error(KP_ERR_INVALID_ARG, "carry_us is %d (-1 .. 1000000)", c->carry_us);
    if (c->trace_events > ((size_t)1 << 24))
        return kp__error(KP_ERR_INVALID_ARG, "trace_events is %zu (at most 2^24)", c->trace_events);
    for (size_t i = 0; i < c->n_stages; i++) KP_CHECK(kp__check_stage(c, i));
    KP_CHECK(kp__check_graph(c));
    return kp__check_budget(c);
}

/* Which stage may carry frames into which (runtime-impl.h, kp__stage):
 * single stages on one device joined by a lock-free ring, the one upstream
 * passing frames to no other stage and not micro-batching. */
static void kp__carry_links(struct kp_flow *f) {
    for (size_t i = 0; f->carry_ns && i < f->n; i++) {
        const kp__lstage *ls = &f->ls[i];
        if (ls->source || ls->n_rep != 1 || !f->q[i].spsc) continue;
        size_t u = 0;
        while (u < f->n && !(f->ls[u].n_out == 1 && f->ls[u].out[0] == i)) u++;
        if (u == f->n || f->ls[u].n_rep != 1) continue;
        kp__stage *s = &f->st[f->ls[u].first], *t = &f->st[ls->first];
        if (t->batch_fn || s->batch_fn || s->dev_i != t->dev_i) continue;
        s->carry_to = t;
        t->carry_in = true;
    }
}

/* The stages' threads, queues and reordering rings; then the frames. */
static kp_status kp__make_stages(struct kp_flow *f, const kp_flow_config *c) {
    f->n_devs = 1;
    f->devs[0] = c->dev;
    for (size_t i = 0; i < c->n_stages; i++) f->n_st += kp__stage_threads(&c->stages[i]);
    if (!(f->st = kp__calloc(f->n_st, sizeof *f->st)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for its stages");
    f->n_frames = 0; /* one in hand per thread, plus every queue slot */
    size_t k = 0;
    for (size_t i = 0; i < c->n_stages; i++) {
        const kp_flow_stage *cs = &c->stages[i];
        kp__lstage *ls = &f->ls[i];
        kp_device_t one;
        const kp_device_t *devs;
        ls->first = k;
        ls->source = kp__is_source(c, i);
        ls->route = cs->route;
        size_t n_dev = kp__stage_devices(c, i, &devs, &one);
        ls->n_rep = kp__stage_threads(cs);
        if (ls->source) {
            ls->stream_base = (uint32_t)f->n_streams;
            f->n_streams += ls->n_rep;
        }
        atomic_store(&ls->live, ls->n_rep);
        for (size_t r = 0; r < ls->n_rep; r++, k++)
            KP_CHECK(kp__flow_stage_init(f, &f->st[k], cs, i, r, devs[n_dev > 1 ? r : 0]));
        f->n_frames += ls->n_rep;
        if (!ls->source) {
            KP_CHECK(
                kp__queue_init(&f->q[i], cs->queue_capacity, cs->policy, kp__one_to_one(c, i)));
            if (ls->n_rep > 1 && cs->deal == KP_DEAL_ROUND_ROBIN) f->q[i].round_robin = ls->n_rep;
            f->n_frames += cs->queue_capacity;
        }
        uint16_t up[KP_FLOW_MAX_STAGES];
        size_t n_up = 0;
        KP_CHECK(kp__stage_inputs(c, i, up, &n_up));
        atomic_store(&f->q[i].open_in, n_up);
        for (size_t u = 0; u < n_up; u++) f->ls[up[u]].out[f->ls[up[u]].n_out++] = (uint16_t)i;
    }
    /* a last stage's stream for its latency samples (kp__stage.lat_pend) */
    for (size_t i = 0; i < c->n_stages; i++)
        for (size_t r = 0; !f->ls[i].n_out && r < f->ls[i].n_rep; r++) {
            kp__stage *s = &f->st[f->ls[i].first + r];
            KP_CHECK(kp_stream_create(s->ctx.dev, &s->lat_stream));
        }
    /* frames set apart for the copies of stages that copy to several */
    for (size_t i = 0; i < c->n_stages; i++) {
        f->ls[i].copy_quota = kp__flow_copy_quota(&c->stages[i], f->ls[i].n_out);
        f->copy_reserve += f->ls[i].copy_quota;
    }
    f->n_frames += f->copy_reserve;
    const size_t ns = f->n_streams ? f->n_streams : 1;
    f->stream_lat = kp__calloc(ns * KP__STREAM_LAT, sizeof *f->stream_lat);
    f->stream_nlat = kp__calloc(ns, sizeof *f->stream_nlat);
    if (!f->stream_lat || !f->stream_nlat ||
        !(f->stream_drops = kp__calloc(ns, sizeof *f->stream_drops)))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for its streams");
    for (size_t i = 0; i < c->n_stages; i++) {
        kp__lstage *ls = &f->ls[i];
        if (ls->n_rep < 2 || ls->source) continue;
        if (pthread_mutex_init(&ls->ro_mu, NULL) != 0)
            return kp__error(KP_ERR_INTERNAL, "flow: cannot initialise a lock");
        ls->ro_init = true;
        ls->ro_cap = f->n_frames;
        if (!(ls->ro = kp__calloc(ls->ro_cap, sizeof *ls->ro)))
            return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for reordering");
    }
    kp__carry_links(f);
    bool staging = false;
    for (size_t j = 0; j < f->n_st; j++)
        KP_CHECK(
            kp__flow_resolve_handoffs(f, &f->st[j], c->stages[f->st[j].index].handoff, &staging));
    if (f->frame_bytes && f->n_frames > KP__MAX_ALLOC_BYTES / f->frame_bytes / f->n_devs)
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: %zu frames of %zu bytes on %zu devices",
                         f->n_frames, f->frame_bytes, f->n_devs);
    return kp__flow_make_frames(f, staging);
}

static kp_status kp__flow_create(const kp_flow_config *config, kp_flow_t *out);

/* The flow takes the stages' users that come with a free_fn: freed at
 * kp_flow_destroy, or here when creation fails. */
kp_status kp_flow_create(const kp_flow_config *config, kp_flow_t *out) {
    KP_API_ENTRY();
    kp_status st = kp__flow_create(config, out);
    const kp_flow_stage *cs =
        config && config->stages && config->n_stages <= KP_FLOW_MAX_STAGES ? config->stages : NULL;
    for (size_t i = 0; cs && i < config->n_stages; i++) {
        if (!cs[i].free_fn) continue;
        if (st == KP_OK)
            st = kp__flow_own(*out, cs[i].user, cs[i].free_fn);
        else
            cs[i].free_fn(cs[i].user);
    }
    if (st != KP_OK && out && *out) {
        kp_flow_destroy(*out);
        *out = NULL;
    }
    return st;
}

static kp_status kp__flow_create(const kp_flow_config *config, kp_flow_t *out) {
    KP_ARG_CHECK(out);
    *out = NULL;
    KP_ARG_CHECK(config);
    kp_flow_config c = KP_FLOW_CONFIG_INIT;
    KP_CHECK(kp__config_read(&c, sizeof c, config, KP__SIZE_THROUGH(kp_flow_config, budget_bytes),
                             "config", "KP_FLOW_CONFIG_INIT"));
    if (kp__flow_check_config(&c) != KP_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", kp_last_error());
        return kp__error(KP_ERR_INVALID_ARG, "config.%s", detail);
    }
    struct kp_flow *f = kp__calloc(1, sizeof *f);
    if (!f) return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory");
    kp_status st = KP_OK;
    f->dev = c.dev;
    f->n = c.n_stages;
    f->frame_bytes = c.frame_bytes;
    f->budget = c.budget_bytes;
    f->trace_cap = c.trace_events;
    if (c.trace_events && !(f->trace = kp__calloc(c.trace_events, sizeof *f->trace))) {
        kp__free(f);
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for the trace");
    }
    f->t_start_us = kp__now_us();
    bool locks = pthread_mutex_init(&f->mu, NULL) == 0;
    if (locks && pthread_mutex_init(&f->wait_mu, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        locks = false;
    }
    if (!locks) {
        kp__free(f->trace);
        kp__free(f);
        return kp__error(KP_ERR_INTERNAL, "flow: cannot initialise its lock");
    }
#ifdef KP_HAVE_CUDA
    f->nvtx = nvtxDomainCreateA("kpipe flow"); /* NULL without a tool attached */
#endif
    f->carry_ns = c.carry_us < 0 ? 0 : (uint32_t)(c.carry_us ? c.carry_us : KP__CARRY_US) * 1000u;
    KP_CHECK_GOTO(kp__make_stages(f, &c), st, fail);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    f->spin_us = c.spin_us < 0 ? 0 : c.spin_us ? c.spin_us : KP__SPIN_US;
    f->spin_yield = cpus <= (long)f->n_st;
    f->strict_copies = c.strict_no_host_copies;
    *out = f;
    return KP_OK;
fail:
    kp_flow_destroy(f);
    return st;
}

kp_status kp_flow_start(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    if (atomic_exchange(&f->started, true))
        return kp__error(KP_ERR_STATE, "the flow was started already");
    atomic_store(&f->running, (int)f->n_st);
    kp_status st = KP_OK;
    pthread_mutex_lock(&f->wait_mu); /* a wait from another thread joins them all */
    for (size_t i = 0; i < f->n_st; i++) {
        if (pthread_create(&f->st[i].thread, NULL, kp__flow_stage_main, &f->st[i]) != 0) {
            /* the stages already running stop; the ones never started count as stopped */
            atomic_fetch_sub(&f->running, (int)(f->n_st - i));
            kp__flow_fail(f, &f->st[i], kp__error(KP_ERR_INTERNAL, "cannot start its thread"));
            st = KP_ERR_INTERNAL;
            break;
        }
        f->st[i].started = true;
    }
    pthread_mutex_unlock(&f->wait_mu);
    return st;
}

kp_status kp_flow_wait(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    if (!atomic_load(&f->started)) return kp__error(KP_ERR_STATE, "the flow was not started");
    /* From any thread: the first waiter joins the stages under the lock, a
     * second one blocks on it until then and reads the same outcome;
     * `waited` is set only once all has stopped (kp_flow_write_trace reads it). */
    pthread_mutex_lock(&f->wait_mu);
    if (!atomic_load(&f->waited)) {
        for (size_t i = 0; i < f->n_st; i++)
            if (f->st[i].started) pthread_join(f->st[i].thread, NULL);
        for (size_t i = 0; i < f->n; i++) kp__queue_drain(f, &f->q[i]);
        for (size_t i = 0; i < f->n; i++) kp__flow_ring_drain(f, &f->ls[i]);
        for (size_t i = 0; i < f->n_st; i++) {
            kp_status st = kp_stream_sync(f->st[i].ctx.stream);
            if (st != KP_OK && f->status == KP_OK) {
                f->status = st;
                snprintf(f->error, sizeof f->error, "stage \"%s\": %s", f->st[i].name,
                         kp_last_error());
            }
            for (size_t k = 0; st == KP_OK && k < KP__GPU_SLOTS; k++)
                kp__flow_gpu_harvest(&f->st[i], &f->st[i].gpu[k], true);
            /* the last samples stamped; an error here is the stage's stream's too */
            if (f->st[i].lat_stream && kp_stream_sync(f->st[i].lat_stream) != KP_OK)
                kp_clear_error();
        }
        atomic_store(&f->waited, true);
    }
    pthread_mutex_unlock(&f->wait_mu);
    if (f->status != KP_OK) return kp__error(f->status, "%s", f->error);
    if (atomic_load(&f->cancel)) return kp__error(KP_ERR_STATE, "the flow was cancelled");
    return KP_OK;
}

kp_status kp_flow_cancel(kp_flow_t f) {
    KP_API_ENTRY();
    KP_ARG_CHECK(f);
    /* a flow whose stages have all stopped (end of stream) stays finished */
    if (atomic_load(&f->started) && atomic_load(&f->running) == 0) return KP_OK;
    atomic_store(&f->cancel, true);
    kp__flow_wake_all(f);
    return KP_OK;
}

void kp_flow_destroy(kp_flow_t f) {
    if (!f) return;
    if (atomic_load(&f->started)) {
        (void)kp_flow_cancel(f);
        if (kp_flow_wait(f) != KP_OK) kp_clear_error();
    }
    for (size_t i = 0; f->st && i < f->n_st; i++) {
        for (size_t k = 0; k < KP__GPU_SLOTS; k++) {
            kp_event_destroy(f->st[i].gpu[k].start);
            kp_event_destroy(f->st[i].gpu[k].end);
        }
        for (size_t k = 0; k < KP__REP_DEPTH; k++) kp_event_destroy(f->st[i].issued[k]);
        for (int k = 0; k < 2 * KP__PROBE_N; k++) {
            kp_event_destroy(f->st[i].probe.start[k]);
            kp_event_destroy(f->st[i].probe.end[k]);
        }
        kp_stream_destroy(f->st[i].ctx.stream);
        kp_stream_destroy(f->st[i].lat_stream);
        kp__free(f->st[i].batch);
        kp__free(f->st[i].batch_frames);
    }
    for (size_t i = 0; i < f->n; i++) {
        kp__queue_fini(&f->q[i]);
        if (f->ls[i].ro_init) pthread_mutex_destroy(&f->ls[i].ro_mu);
        kp__free(f->ls[i].ro);
    }
    kp__free(f->st);
    kp__free((void *)f->stream_drops);
    kp__free((void *)f->stream_lat);
    kp__free((void *)f->stream_nlat);
    for (size_t i = 0; f->frames && i < f->n_frames; i++) {
        kp__fframe *fr = &f->frames[i];
        for (size_t d = 0; d < f->n_devs; d++) {
            kp_event_destroy(fr->ev[d]);
            if (fr->buf[d]) kp_buffer_release(fr->buf[d]);
        }
        kp_free_host(f->devs[0], fr->staging);
    }
    kp__free(f->frames);
    /* stages' own first (they may hold spare buffers of the pools), the
     * devices the pools live on last */
    for (size_t i = f->n_owned; i-- > 0;)
        if (!f->owned[i].device) f->owned[i].free_fn(f->owned[i].obj);
    for (size_t d = 0; d < f->n_devs; d++) kp_buffer_pool_destroy(f->pools[d]);
    for (size_t i = f->n_owned; i-- > 0;)
        if (f->owned[i].device) f->owned[i].free_fn(f->owned[i].obj);
    kp__free(f->trace);
#ifdef KP_HAVE_CUDA
    if (f->nvtx) nvtxDomainDestroy(f->nvtx);
#endif
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->wait_mu);
    kp__free(f);
}
