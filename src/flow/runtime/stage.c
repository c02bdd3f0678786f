/* Flows' stage threads: the source's, a stage's and a micro-batching
 * stage's loops, each run timed on the host and (sampled) on the device;
 * carrying frames through stages; and the set-up of a stage's thread
 * state. Where a frame goes next, and failing the flow: route.c. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime-impl.h"

static void kp__record_sample(_Atomic uint32_t *ring, _Atomic uint64_t *n, double us) {
    uint64_t k = atomic_load_explicit(n, memory_order_relaxed);
    kp__bump(n, 1); /* one writer: the stage's thread (or the waiter, after it) */
    atomic_store_explicit(&ring[k % KP__LAT_SAMPLES], kp__tenths(us),
                          memory_order_relaxed); /* a statistic: read for health only */
}

/* Whether this run of s is timed on the host (KP__TIME_EVERY): every run
 * while the flow traces, else one after a random gap. */
static bool kp__time_this(kp__stage *s) {
    if (s->flow->trace) return true;
    if (s->time_gap) {
        s->time_gap--;
        return false;
    }
    uint32_t x = s->time_rng; /* xorshift32: the stage's thread alone moves it */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s->time_rng = x;
    s->time_gap = x % (2 * KP__TIME_EVERY - 1);
    return true;
}

bool kp__flow_gpu_harvest(kp__stage *s, struct kp__gpu_slot *g, bool force) {
    if (!g->pending) return true;
    bool done = force;
    if (!force && kp_event_query(g->end, &done) != KP_OK) {
        kp_clear_error();
        done = true; /* a failed query drops the sample; the stream reports the error */
    }
    if (!done) return false;
    float ms = 0;
    if (kp_event_elapsed_ms(g->start, g->end, &ms) == KP_OK)
        kp__record_sample(s->gpu_lat, &s->n_gpu_lat, (double)ms * 1e3);
    else
        kp_clear_error();
    g->pending = false;
    return true;
}

/* The slot to measure this frame's device time with, or NULL: every
 * KP__GPU_EVERY-th frame of a stage that enqueues work, when the slot's
 * last measurement has completed. */
static struct kp__gpu_slot *kp__gpu_begin(kp__stage *s) {
    if (!s->busy || s->frames_run++ % KP__GPU_EVERY) return NULL; /* host-only: no events */
    struct kp__gpu_slot *g = &s->gpu[s->gpu_next % KP__GPU_SLOTS];
    if (!kp__flow_gpu_harvest(s, g, false)) return NULL;
    if (kp_event_record(g->start, s->ctx.stream) != KP_OK) {
        kp_clear_error();
        return NULL;
    }
    s->gpu_next++;
    return g;
}

/* The moving average of the stage's host time per run, for carrying: an
 * eighth of each new run (the first run sets it). */
static void kp__cost_update(kp__stage *s, double us) {
    double ns = us * 1e3;
    uint32_t now = ns >= 4e9 ? 4000000000u : ns <= 0 ? 0 : (uint32_t)ns;
    uint32_t prev = atomic_load_explicit(&s->cost_ns, memory_order_relaxed);
    int64_t next = prev == UINT32_MAX ? now : (int64_t)prev + ((int64_t)now - (int64_t)prev) / 8;
    atomic_store_explicit(&s->cost_ns, (uint32_t)next, memory_order_relaxed);
}

/* Runs the stage function on n frames (1 unless micro-batching), timed on
 * the host, on the device (sampled), traced and named for NVTX; then tells
 * whether the stage's stream has work pending. */
static kp_status kp__timed_call(kp__stage *s, kp__fframe *const *frs, size_t n, bool *eos,
                                bool *idle) {
    struct kp__gpu_slot *g = kp__gpu_begin(s);
    const bool timed = kp__time_this(s);
    double t0 = timed ? kp__now_us() : 0;
    kp__flow_nvtx_push(s, frs[0]->f.seq, n);
    kp_status st;
    if (s->batch_fn) {
        for (size_t i = 0; i < n; i++) s->batch_frames[i] = &frs[i]->f;
        st = s->batch_fn(s->user, &s->ctx, s->batch_frames, n);
        atomic_fetch_add(&s->batches, 1);
    } else {
        st = s->fn(s->user, &s->ctx, &frs[0]->f, eos);
    }
    kp__flow_nvtx_pop(s);
    if (eos) frs[0]->made_us = 0; /* a source's frame: sampled below when timed */
    if (timed) {
        double t1 = kp__now_us();
        if (eos) frs[0]->made_us = t1;
        kp__record_sample(s->lat, &s->n_lat, t1 - t0);
        kp__cost_update(s, t1 - t0);
        for (size_t i = 0; i < n; i++) kp__flow_trace(s, frs[i]->f.seq, t0, t1);
    }
    /* A stage that left work on its stream last time most likely did
     * again: it records the frame's event without asking (an event on an
     * idle stream only costs the next stage a wait that returns at once),
     * and asks again every KP__REQUERY frames in case it went host-only. */
    if (st == KP_OK && s->busy && ++s->busy_runs % KP__REQUERY)
        *idle = false;
    else if (st == KP_OK)
        st = kp_stream_query(s->ctx.stream, idle);
    s->busy = !*idle;
    if (g) {
        kp_status gst = kp_event_record(g->end, s->ctx.stream);
        g->pending = gst == KP_OK;
        if (gst != KP_OK) kp_clear_error();
    }
    return st;
}

/* Frames through one stage: wait for their earlier work on the device,
 * bring them over from other devices, run the function, mark the frames'
 * new work. A stream with nothing pending has nothing to hand over: the
 * next user need not wait (host-only stages cost no event traffic). */
static kp_status kp__run_frames_watched(kp__stage *s, kp__fframe *const *frs, size_t n, bool *eos) {
    for (size_t i = 0; i < n; i++)
        if (frs[i]->ev_dev >= 0)
            KP_CHECK(kp_stream_wait_event(s->ctx.stream, frs[i]->ev[frs[i]->ev_dev]));
    struct kp__probe *p = &s->probe;
    int timed = -1; /* the probe's slot this run fills */
    for (size_t i = 0; i < n; i++) {
        if (frs[i]->loc == s->dev_i || !frs[i]->buf[0]) continue;
        int from = frs[i]->loc;
        if (n == 1 && p->start[0] && !p->decided && p->next < 2 * KP__PROBE_N &&
            s->how[from] == KP_HANDOFF_COPY && s->auto_how[from] &&
            (p->from < 0 || p->from == from)) {
            p->from = from;
            timed = (int)p->next++;
            s->how[from] = timed < KP__PROBE_N ? KP_HANDOFF_COPY : KP_HANDOFF_IN_PLACE;
            KP_CHECK(kp_event_record(p->start[timed], s->ctx.stream));
        }
        kp_status hst = kp__flow_handoff(s, frs[i]);
        if (timed >= 0) s->how[from] = KP_HANDOFF_COPY; /* until decided */
        KP_CHECK(hst);
    }
    bool idle = false;
    KP_CHECK(kp__timed_call(s, frs, n, eos, &idle));
    if (timed >= 0) KP_CHECK(kp_event_record(p->end[timed], s->ctx.stream));
    if (p->from >= 0 && !p->decided && p->next == 2 * KP__PROBE_N) kp__flow_probe_decide(s);
    kp__bump(&s->runs, 1);
    for (size_t i = 0; i < n; i++) {
        frs[i]->ev_dev = idle ? -1 : s->dev_i;
        if (!idle) KP_CHECK(kp_event_record(frs[i]->ev[s->dev_i], s->ctx.stream));
    }
    return KP_OK;
}

/* The same, counting the host<->device copies the stage makes (through
 * kp_copy_count_watch, where every copy passes): strict_no_host_copies
 * turns one after the first lap of frames into the flow's error. */
static kp_status kp__run_frames(kp__stage *s, kp__fframe *const *frs, size_t n, bool *eos) {
    kp_copy_counts c = {0, 0, 0, 0};
    kp_copy_counts *outer = kp_copy_count_watch(&c);
    kp_status st = kp__run_frames_watched(s, frs, n, eos);
    kp_copy_count_watch(outer);
    if (!c.htod && !c.dtoh) return st;
    atomic_fetch_add_explicit(&s->cp_htod, c.htod, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cp_dtoh, c.dtoh, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cp_htod_bytes, c.htod_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->cp_dtoh_bytes, c.dtoh_bytes, memory_order_relaxed);
    if (st == KP_OK && s->flow->strict_copies && frs[0]->f.seq >= s->flow->n_frames)
        st = kp__error(KP_ERR_STATE,
                       "stage \"%s\": frame %llu made %llu host-to-device and %llu "
                       "device-to-host copies (%llu bytes) under strict_no_host_copies",
                       s->name, (unsigned long long)frs[0]->f.seq, (unsigned long long)c.htod,
                       (unsigned long long)c.dtoh,
                       (unsigned long long)(c.htod_bytes + c.dtoh_bytes));
    return st;
}

/* --- carrying (runtime-impl.h, kp__stage) ------------------------------ */

/* Takes stage s for its own thread, waiting while a carrying thread runs it
 * (never long: one run of a short stage). Not cut short by a cancel: the
 * carrying thread lets go once its run returns. `held` is 0 while free, 1
 * while held, 2 while held and its own thread sleeps for it: only then
 * does letting go cost a wake. */
static void kp__hold(kp__stage *s) {
    for (;;) {
        size_t idle = 0;
        if (atomic_compare_exchange_strong_explicit(&s->held, &idle, 1, memory_order_acquire,
                                                    memory_order_relaxed))
            return;
        kp__flow_spin_while(s->flow, &s->held, 1);
        size_t one = 1;
        if (!atomic_compare_exchange_strong_explicit(&s->held, &one, 2, memory_order_relaxed,
                                                     memory_order_relaxed) &&
            one != 2)
            continue; /* let go meanwhile: take it */
        uint32_t key = kp__wake_prepare(&s->hold_free);
        if (atomic_load_explicit(&s->held, memory_order_relaxed) != 2)
            kp__wake_cancel(&s->hold_free);
        else
            kp__wake_wait(&s->hold_free, key, NULL);
    }
}

static void kp__unhold(kp__stage *s) {
    if (atomic_exchange_explicit(&s->held, 0, memory_order_release) == 2)
        kp__wake_all(&s->hold_free);
}

/* Whether stage t is worth carrying into by the thread of stage o (see
 * KP__CARRY_ALWAYS_NS): its runs are short enough for the state of its
 * thread and of o's queue. A thread asleep stays asleep while frames are
 * carried past it, so carrying into it must not make o's thread the flow's
 * bottleneck: o carries into a sleeping thread's stage only with nothing
 * queued for itself, and one such frame in KP__CARRY_PROBE goes to the
 * sleeping thread instead (a source cannot tell whether it is the
 * bottleneck: when it is, the woken thread then stays awake on the frames
 * that follow, and they are queued for it). */
static bool kp__carry_worth(const kp__stage *o, kp__stage *t) {
    struct kp_flow *f = t->flow;
    uint32_t cost = atomic_load_explicit(&t->cost_ns, memory_order_relaxed);
    if (cost <= KP__CARRY_ALWAYS_NS) return true;
    if (!kp__queue_consumer_asleep(&f->q[t->index])) return false;
    /* a frame waiting for o makes o the bottleneck: o's own queue, or a
     * source's next frame (kp__flow_source_backlog) */
    const bool waiting = f->ls[o->index].source ? o->backlog : !kp__queue_empty(&f->q[o->index]);
    if (waiting) return false;
    /* within KP__CARRY_WAKE_NS whatever carry_us, as flow.h says */
    if (cost > KP__CARRY_WAKE_NS && cost > f->carry_ns) return false;
    return ++t->carry_probe % KP__CARRY_PROBE != 0; /* o's thread alone counts */
}

/* Takes stage t to carry a frame into it, by the thread that feeds its
 * queue: only when nobody runs it and every frame queued for it has been
 * taken (and, taken under `held`, run and passed on), so the frame carried
 * is the next in order. */
static bool kp__carry_take(kp__stage *t) {
    size_t idle = 0;
    if (atomic_load_explicit(&t->held, memory_order_relaxed) ||
        !atomic_compare_exchange_strong_explicit(&t->held, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    if (kp__queue_empty(&t->flow->q[t->index])) return true;
    kp__unhold(t);
    return false;
}

/* Passes frame fr, done at s, on: carried through the stages downstream
 * while each can take it, then queued for the next (or finished at a
 * sink). The caller holds s where s may be carried into; each stage is let
 * go once the next is taken (hand over hand), so it can run its next frame
 * while this one goes on. */
static void kp__pass(kp__stage *s, kp__fframe *fr) {
    struct kp_flow *f = s->flow;
    const kp__stage *o = s;
    kp__stage *t;
    while ((t = s->carry_to) != NULL && !atomic_load_explicit(&f->cancel, memory_order_relaxed) &&
           kp__carry_worth(o, t) && kp__carry_take(t)) {
        kp__bump(&s->out, 1);
        kp__bump(&f->q[t->index].carried, 1); /* one writer: the holder of s */
        if (s->carry_in) kp__unhold(s);
        s = t;
        kp__bump(&s->in, 1);
        kp_status st = kp__run_frames(s, &fr, 1, NULL);
        if (st != KP_OK) {
            kp__frame_put(f, fr, false);
            kp__flow_fail(f, s, st);
            kp__unhold(s);
            return;
        }
    }
    if (f->ls[s->index].source) {
        kp__bump(&s->out, 1);
        kp__flow_pass_on(s, fr);
    } else {
        kp__flow_forward(s, fr);
    }
    if (s->carry_in) kp__unhold(s);
}

/* s->ctx is what the flow passes a stage's function: the stage is found
 * from it. Only the source's own thread reads and writes `backlog`. */
void kp__flow_source_backlog(const kp_stage_ctx *c, bool waiting) {
    kp__stage *s = (kp__stage *)((char *)c - offsetof(kp__stage, ctx));
    s->backlog = waiting;
}

static void kp__source_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    const uint32_t stream = f->ls[s->index].stream_base + (uint32_t)s->replica;
    for (uint64_t seq = 0;; seq++) {
        kp__fframe *fr = kp__frame_take(f);
        if (!fr) return;
        kp_status bst = kp__frame_buffer(f, fr);
        if (bst != KP_OK) {
            kp__frame_put(f, fr, false);
            kp__flow_fail(f, s, bst);
            return;
        }
        memset(&fr->f.desc, 0, sizeof fr->f.desc);
        memset(fr->f.user, 0, sizeof fr->f.user);
        memset(&fr->f.video, 0, sizeof fr->f.video);
        fr->f.video.pts = KP_VIDEO_NO_PTS;
        fr->f.seq = seq;
        fr->f.stream = stream;
        fr->f.discontinuity = false;
        fr->f.bytes = 0;
        fr->loc = s->dev_i;
        fr->f.data = kp__frame_data(fr, s->dev_i);
        bool eos = false;
        kp_status st = kp__run_frames(s, &fr, 1, &eos);
        if (st != KP_OK || eos) {
            kp__frame_put(f, fr, false);
            if (st != KP_OK) kp__flow_fail(f, s, st);
            return;
        }
        /* counted once it holds a frame: the call that found the end of
         * the stream made none, and a source's in then equals its out */
        kp__bump(&s->in, 1);
        kp__pass(s, fr);
    }
}

static void kp__stage_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    kp__fframe *fr;
    for (;;) {
        kp_status rst = kp__flow_replica_room(s);
        if (rst != KP_OK) {
            kp__flow_fail(f, s, rst);
            return;
        }
        /* one that may be carried into waits for a frame first, then takes
         * itself: a thread must not hold it while it sleeps */
        if (s->carry_in) {
            if (!kp__queue_wait_ready(f, &f->q[s->index])) return;
            kp__hold(s);
        }
        if (!(fr = kp__queue_pop(f, &f->q[s->index], s->replica))) {
            if (s->carry_in) kp__unhold(s);
            return;
        }
        kp__bump(&s->in, 1);
        kp_status st = kp__run_frames(s, &fr, 1, NULL);
        if (st == KP_OK) st = kp__flow_replica_issued(s);
        if (st != KP_OK) {
            kp__frame_put(f, fr, false);
            kp__flow_fail(f, s, st);
            if (s->carry_in) kp__unhold(s);
            return;
        }
        kp__pass(s, fr);
    }
}

/* Runs one batch: waits for each frame's earlier work, the batch function,
 * then marks each frame's new work (or none when the stream is idle). */
static void kp__batch_loop(kp__stage *s) {
    struct kp_flow *f = s->flow;
    kp__queue *q = &f->q[s->index];
    for (;;) {
        size_t n = 0;
        kp__fframe *fr = kp__queue_pop(f, q, 0);
        if (!fr) return;
        s->batch[n++] = fr;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += (long)s->deadline_us * 1000;
        dl.tv_sec += dl.tv_nsec / 1000000000;
        dl.tv_nsec %= 1000000000;
        while (n < s->max_batch && (fr = kp__queue_pop_until(f, q, &dl)) != NULL)
            s->batch[n++] = fr;
        kp__bump(&s->in, n);
        kp_status st = atomic_load(&f->cancel) ? KP_OK : kp__run_frames(s, s->batch, n, NULL);
        if (st != KP_OK || atomic_load(&f->cancel)) {
            for (size_t i = 0; i < n; i++) kp__frame_put(f, s->batch[i], false);
            if (st != KP_OK) kp__flow_fail(f, s, st);
            return;
        }
        for (size_t i = 0; i < n; i++) kp__flow_forward(s, s->batch[i]);
    }
}

/* The stage's end function, told why the stage stopped; its error at end
 * of stream fails the flow. */
static void kp__stage_end(kp__stage *s) {
    struct kp_flow *f = s->flow;
    if (!s->end_fn) return;
    pthread_mutex_lock(&f->mu);
    kp_status why = f->status;
    pthread_mutex_unlock(&f->mu);
    if (why == KP_OK && atomic_load(&f->cancel)) why = KP_ERR_STATE;
    kp_status st = s->end_fn(s->user, &s->ctx, why);
    if (st != KP_OK && why == KP_OK)
        kp__flow_fail(f, s, st);
    else if (st != KP_OK)
        kp_clear_error();
}

void *kp__flow_stage_main(void *arg) {
    kp__stage *s = arg;
    struct kp_flow *f = s->flow;
    kp_status st = kp_device_bind_thread(s->ctx.dev);
    if (st != KP_OK)
        kp__flow_fail(f, s, st);
    else if (f->ls[s->index].source)
        kp__source_loop(s);
    else if (s->batch_fn)
        kp__batch_loop(s);
    else
        kp__stage_loop(s);
    /* no frame is carried into a stage whose thread has stopped: it takes
     * the stage for good, once a run carried into it has returned */
    if (s->carry_in) kp__hold(s);
    kp__stage_end(s);
    /* end of stream (or cancel) flows downstream once every replica (or
     * stream) stopped: a queue closes when every stage feeding it has */
    const kp__lstage *ls = &f->ls[s->index];
    if (atomic_fetch_sub(&f->ls[s->index].live, 1) == 1)
        for (size_t k = 0; k < ls->n_out; k++)
            if (atomic_fetch_sub(&f->q[ls->out[k]].open_in, 1) == 1)
                kp__queue_close(&f->q[ls->out[k]]);
    atomic_fetch_sub(&f->running, 1);
    return NULL;
}

kp_status kp__flow_stage_init(struct kp_flow *f, kp__stage *s, const kp_flow_stage *cs, size_t i,
                              size_t r, kp_device_t dev) {
    s->flow = f;
    s->index = i;
    s->replica = r;
    s->probe.from = -1;
    atomic_store(&s->cost_ns, UINT32_MAX); /* unknown until its own thread runs it */
    s->time_gap = 0;                       /* its first run is timed */
    s->time_rng = 0x9e3779b9u ^ (uint32_t)(i * 64 + r + 1);
    KP_CHECK(kp__flow_device_index(f, dev, &s->dev_i));
    snprintf(s->name, sizeof s->name, "%s", cs->name);
    s->fn = cs->fn;
    s->batch_fn = cs->batch_fn;
    s->end_fn = cs->end_fn;
    s->max_batch = cs->batch_fn ? cs->max_batch : 1;
    s->deadline_us = cs->deadline_us;
    s->user = cs->replica_users && cs->replica_users[r] ? cs->replica_users[r]
              : cs->stream_users && cs->stream_users[r] ? cs->stream_users[r]
                                                        : cs->user;
    if (s->batch_fn && (!(s->batch = kp__calloc(s->max_batch, sizeof *s->batch)) ||
                        !(s->batch_frames = kp__calloc(s->max_batch, sizeof *s->batch_frames))))
        return kp__error(KP_ERR_OUT_OF_MEMORY, "flow: no memory for a batch");
    s->ctx.dev = dev;
    s->ctx.name = s->name;
    s->ctx.index = i;
    s->ctx.replica = r;
    s->ctx.flow = f;
    KP_CHECK(kp_stream_create(dev, &s->ctx.stream));
    for (size_t k = 0; cs->n_replicas > 1 && k < KP__REP_DEPTH; k++)
        KP_CHECK(kp_event_create_untimed(dev, &s->issued[k]));
    for (size_t k = 0; k < KP__GPU_SLOTS; k++) {
        KP_CHECK(kp_event_create(dev, &s->gpu[k].start));
        KP_CHECK(kp_event_create(dev, &s->gpu[k].end));
    }
#ifdef KP_HAVE_CUDA
    if (f->nvtx) s->nvtx_name = nvtxDomainRegisterStringA(f->nvtx, s->name);
#endif
    return KP_OK;
}
