/* Flows' lock-free hand-overs under stress, host-only stages (no device
 * work: the rings and the free stack alone): a million frames through
 * single stages with random stalls on both sides of every ring, every
 * frame checked in order at the sink; drop-newest rings whose drops plus
 * deliveries equal what was made; a micro-batching stage behind a ring
 * (its timed waits); spinning on and off; cancellation at random points
 * of random frames, after which every frame is back on the free stack;
 * frames carried through short stages by the thread upstream.
 * Built for ThreadSanitizer as much as for itself.
 *   test_flow_ring [FRAMES] [CANCEL_RUNS]   (defaults 1000000, 300) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "support/kp_test.h"

static kp_device_t g_dev;
static uint64_t g_frames = 1000000;
static int g_cancel_runs = 300;

typedef struct ring_ctx {
    uint64_t frames;       /* the source ends after this many */
    unsigned stall_one_in; /* a stage stalls on one frame in this many (0: never) */
    uint64_t next;         /* the sink's next expected seq */
    uint64_t seen, gaps;
    bool ordered, payload_ok;
    _Atomic uint64_t made;
    uint64_t cancel_at; /* the middle stage cancels the flow at this seq (0: never) */
    double busy_us;     /* carrying: each stage keeps its core this long per frame */
    kp_flow_t flow;
} ring_ctx;

/* A short stall, spin or sleep, on a frame picked from its seq and the
 * stage, so that each side of a ring runs ahead of the other by turns. */
static void stall(const ring_ctx *t, uint64_t seq, size_t stage) {
    if (!t->stall_one_in) return;
    uint64_t h = (seq + 1) * 0x9E3779B97F4A7C15ull ^ (stage * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 29;
    if (h % t->stall_one_in) return;
    if (h & 1) {
        struct timespec d = {0, (long)(h >> 40) % 20000};
        nanosleep(&d, NULL);
    } else {
        for (volatile unsigned i = 0, n = (unsigned)(h >> 44) % 4000; i < n; i++) {
        }
    }
}

static kp_status src(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ring_ctx *t = user;
    if (f->seq == t->frames) {
        *eos = true;
        return KP_OK;
    }
    f->user[0] = (int64_t)(f->seq * 3 + 1);
    atomic_fetch_add(&t->made, 1);
    stall(t, f->seq, c->index);
    return KP_OK;
}

static kp_status mid(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ring_ctx *t = user;
    if (t->cancel_at && f->seq == t->cancel_at) kp_flow_cancel(t->flow);
    f->user[1] = f->user[0] + (int64_t)c->index; /* each middle stage adds its index */
    f->user[0] = f->user[1];
    stall(t, f->seq, c->index);
    return KP_OK;
}

static kp_status sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ring_ctx *t = user;
    stall(t, f->seq, c->index);
    int64_t want = (int64_t)(f->seq * 3 + 1) + (int64_t)((c->index - 1) * c->index / 2);
    if (f->user[0] != want) t->payload_ok = false;
    if (f->seq < t->next) t->ordered = false;
    t->gaps += f->seq - t->next;
    t->next = f->seq + 1;
    t->seen++;
    return KP_OK;
}

static kp_status batch_sink(void *user, const kp_stage_ctx *c, kp_frame *const *fs, size_t n) {
    for (size_t i = 0; i < n; i++) (void)sink(user, c, fs[i], NULL);
    return KP_OK;
}

/* source -> n_mid middle stages -> sink, every queue `cap` by `policy`. */
static kp_status run_chain(ring_ctx *t, size_t n_mid, size_t cap, kp_queue_policy policy,
                           int spin_us, bool batch, kp_flow_snapshot *snap) {
    kp_flow_stage st[8] = {{.name = "source", .fn = src, .user = t}};
    static const char *names[] = {"m1", "m2", "m3", "m4", "m5", "m6"};
    size_t n = 1;
    for (size_t i = 0; i < n_mid; i++)
        st[n++] = (kp_flow_stage){
            .name = names[i], .fn = mid, .user = t, .queue_capacity = cap, .policy = policy};
    st[n++] =
        batch ? (kp_flow_stage){.name = "sink",
                                .batch_fn = batch_sink,
                                .user = t,
                                .max_batch = 7,
                                .deadline_us = 50,
                                .queue_capacity = cap,
                                .policy = policy}
              : (kp_flow_stage){
                    .name = "sink", .fn = sink, .user = t, .queue_capacity = cap, .policy = policy};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev;
    cfg.stages = st;
    cfg.n_stages = n;
    cfg.spin_us = spin_us;
    t->ordered = t->payload_ok = true;
    kp_status s = kp_flow_create(&cfg, &t->flow);
    if (s != KP_OK) return s;
    s = kp_flow_start(t->flow);
    kp_status w = kp_flow_wait(t->flow);
    if (s == KP_OK) s = w;
    kp_status h = kp_flow_health(t->flow, snap);
    kp_flow_destroy(t->flow);
    return s != KP_OK ? s : h;
}

static void a_million_frames_in_order(void **state) {
    (void)state;
    static const int spins[] = {0, -1};
    for (size_t k = 0; k < 2; k++) {
        ring_ctx t = {.frames = g_frames, .stall_one_in = 997};
        kp_flow_snapshot snap;
        kp_status st = run_chain(&t, 3, 4, KP_QUEUE_BLOCK, spins[k], false, &snap);
        assert_int_equal(st, KP_OK);
        assert_int_equal(t.seen, g_frames);
        assert_int_equal(t.gaps, 0);
        assert_true(t.ordered);
        assert_true(t.payload_ok);
        assert_int_equal(snap.frames_done, g_frames);
        assert_int_equal(snap.frames_in_flight, 0);
        assert_true(snap.consistent);
        for (size_t i = 1; i < 5; i++) {
            assert_int_equal(snap.queues[i].pushed, g_frames);
            assert_int_equal(snap.queues[i].depth, 0);
            assert_true(snap.queues[i].max_depth <= 4);
            assert_true(snap.queues[i].max_depth >= 1);
        }
    }
}

/* A one-slot ring: every hand-over finds it full or empty. */
static void one_slot_rings(void **state) {
    (void)state;
    ring_ctx t = {.frames = g_frames / 10, .stall_one_in = 101};
    kp_flow_snapshot snap;
    assert_int_equal(run_chain(&t, 2, 1, KP_QUEUE_BLOCK, 0, false, &snap), KP_OK);
    assert_int_equal(t.seen, t.frames);
    assert_true(t.ordered && t.payload_ok);
    assert_int_equal(snap.frames_in_flight, 0);
}

static void drop_newest_accounts_for_every_frame(void **state) {
    (void)state;
    ring_ctx t = {.frames = g_frames / 4, .stall_one_in = 53};
    kp_flow_snapshot snap;
    assert_int_equal(run_chain(&t, 2, 2, KP_QUEUE_DROP_NEWEST, 0, false, &snap), KP_OK);
    uint64_t drops = 0;
    for (size_t i = 1; i < 4; i++) drops += snap.queues[i].drops;
    assert_true(t.ordered && t.payload_ok);
    assert_int_equal(t.seen + drops, t.frames);
    assert_int_equal(t.gaps + (t.frames - t.next), drops); /* before and after the last seen */
    assert_int_equal(snap.frames_dropped, drops);
    assert_int_equal(snap.frames_done, t.seen);
    assert_int_equal(snap.frames_in_flight, 0);
    print_message("drop-newest: %llu of %llu frames dropped\n", (unsigned long long)drops,
                  (unsigned long long)t.frames);
}

static void batches_behind_a_ring(void **state) {
    (void)state;
    for (int spin = 0; spin < 2; spin++) {
        ring_ctx t = {.frames = g_frames / 10, .stall_one_in = 211};
        kp_flow_snapshot snap;
        assert_int_equal(run_chain(&t, 1, 8, KP_QUEUE_BLOCK, spin ? 0 : -1, true, &snap), KP_OK);
        assert_int_equal(t.seen, t.frames);
        assert_true(t.ordered && t.payload_ok);
        assert_int_equal(snap.frames_in_flight, 0);
        assert_true(snap.stages[2].batches >= 1 && snap.stages[2].batches <= t.frames);
    }
}

/* Cancels at a random frame (from a stage) or a random moment (from here),
 * with stalls: the flow ends cancelled, nothing is lost, and what reached
 * the sink came in order. */
static void cancel_at_random_points(void **state) {
    (void)state;
    srand(12345);
    for (int run = 0; run < g_cancel_runs; run++) {
        ring_ctx t = {.frames = 1u << 30, .stall_one_in = 1 + (unsigned)(rand() % 64)};
        bool from_stage = run % 2;
        if (from_stage) t.cancel_at = 1 + (uint64_t)(rand() % 5000);
        kp_flow_stage st[4] = {{.name = "source", .fn = src, .user = &t},
                               {.name = "a", .fn = mid, .user = &t, .queue_capacity = 1 + run % 5},
                               {.name = "b",
                                .fn = mid,
                                .user = &t,
                                .queue_capacity = 1 + run % 3,
                                .policy = run % 3 == 2 ? KP_QUEUE_DROP_NEWEST : KP_QUEUE_BLOCK},
                               {.name = "sink", .fn = sink, .user = &t, .queue_capacity = 2}};
        kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
        cfg.dev = g_dev;
        cfg.stages = st;
        cfg.n_stages = 4;
        cfg.spin_us = run % 4 == 1 ? -1 : 0;
        t.ordered = t.payload_ok = true;
        assert_int_equal(kp_flow_create(&cfg, &t.flow), KP_OK);
        assert_int_equal(kp_flow_start(t.flow), KP_OK);
        if (!from_stage) {
            struct timespec d = {0, (long)(rand() % 3000) * 1000};
            nanosleep(&d, NULL);
            assert_int_equal(kp_flow_cancel(t.flow), KP_OK);
        }
        assert_int_equal(kp_flow_wait(t.flow), KP_ERR_STATE);
        kp_flow_snapshot snap;
        assert_int_equal(kp_flow_health(t.flow, &snap), KP_OK);
        assert_int_equal(snap.frames_in_flight, 0); /* every frame back on the stack */
        assert_true(snap.consistent);
        assert_true(t.ordered && t.payload_ok);
        assert_true(snap.frames_done == t.seen);
        assert_true(snap.frames_done + snap.frames_dropped <= atomic_load(&t.made));
        kp_flow_destroy(t.flow);
    }
}

/* Carrying: each stage counts the frames it ran on the source's thread,
 * checks that no two of its runs overlap and that none comes after its end
 * function, and the sink checks order and payload. */
typedef struct carry_ctx {
    ring_ctx *ring;
    _Atomic int inside;
    _Atomic bool ended, overlap, after_end;
    _Atomic uint64_t on_source;
} carry_ctx;

static carry_ctx g_carry[4];
static _Thread_local bool tl_source; /* this thread runs the source */

static kp_status carry_run(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    carry_ctx *k = user;
    if (atomic_fetch_add(&k->inside, 1) != 0) atomic_store(&k->overlap, true);
    if (atomic_load(&k->ended)) atomic_store(&k->after_end, true);
    kp_status st = KP_OK;
    if (k->ring->busy_us > 0) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do clock_gettime(CLOCK_MONOTONIC, &b);
        while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) * 1e-3 <
               k->ring->busy_us);
    }
    if (c->index == 0) {
        tl_source = true;
        st = src(k->ring, c, f, eos);
    } else {
        if (tl_source) atomic_fetch_add(&k->on_source, 1);
        st = c->index == 3 ? sink(k->ring, c, f, eos) : mid(k->ring, c, f, eos);
    }
    atomic_fetch_sub(&k->inside, 1);
    return st;
}

static kp_status carry_end(void *user, const kp_stage_ctx *c, kp_status why) {
    carry_ctx *k = user;
    atomic_store(&k->ended, true);
    return KP_OK;
}

/* source -> a -> b -> sink by carry_us and spin_us; stalls one frame in
 * stall_one_in (0: none). Returns the frames the sink ran on the source's
 * thread. */
static uint64_t run_carried(ring_ctx *t, int carry_us, int spin_us, kp_flow_snapshot *snap) {
    memset(g_carry, 0, sizeof g_carry);
    kp_flow_stage st[4];
    static const char *names[] = {"source", "a", "b", "sink"};
    for (size_t i = 0; i < 4; i++) {
        g_carry[i].ring = t;
        st[i] = (kp_flow_stage){.name = names[i],
                                .fn = carry_run,
                                .end_fn = carry_end,
                                .user = &g_carry[i],
                                .queue_capacity = i ? 4 : 0};
    }
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev;
    cfg.stages = st;
    cfg.n_stages = 4;
    cfg.spin_us = spin_us;
    cfg.carry_us = carry_us;
    t->ordered = t->payload_ok = true;
    assert_int_equal(kp_flow_create(&cfg, &t->flow), KP_OK);
    assert_int_equal(kp_flow_start(t->flow), KP_OK);
    assert_int_equal(kp_flow_wait(t->flow), KP_OK);
    assert_int_equal(kp_flow_health(t->flow, snap), KP_OK);
    kp_flow_destroy(t->flow);
    assert_int_equal(t->seen, t->frames);
    assert_true(t->ordered && t->payload_ok);
    assert_int_equal(snap->frames_in_flight, 0);
    for (size_t i = 0; i < 4; i++) {
        assert_false(atomic_load(&g_carry[i].overlap));
        assert_false(atomic_load(&g_carry[i].after_end));
        assert_true(atomic_load(&g_carry[i].ended));
        if (i) assert_int_equal(snap->queues[i].pushed, t->frames); /* carried or queued */
        if (i) assert_int_equal(snap->stages[i].in, t->frames);
    }
    return atomic_load(&g_carry[3].on_source);
}

/* Short stages are carried by the thread upstream: many frames reach the
 * sink on the source's thread, in order, none lost, no stage run twice at
 * once or after its end; with carry_us -1 none is. With random stalls
 * (which make a stage long for a while) frames go by turns carried and
 * queued, still in order. */
static void carried_frames(void **state) {
    (void)state;
    static const int spins[] = {0, -1};
    kp_flow_snapshot snap;
    for (size_t k = 0; k < 2; k++) {
        ring_ctx t = {.frames = g_frames / 10};
        uint64_t carried = run_carried(&t, 0, spins[k], &snap);
        print_message("spin_us %d: %llu of %llu frames carried to the sink\n", spins[k],
                      (unsigned long long)carried, (unsigned long long)t.frames);
        /* How many depends on the host's speed: a stage is carried into
         * while its thread is awake only when its runs take 0.2 us or less
         * (74-99 % of frames alone on 2 cores; 1 % under ThreadSanitizer,
         * which makes every run longer). Never spinning, the stages' threads
         * sleep between frames and short runs (3 us) are carried: some
         * frames must be. Under ThreadSanitizer a loaded CI run once
         * carried none (every run past the carry bound), so there the
         * figure prints only; order, counts and overlap are checked. */
#ifndef KPT_TSAN
        if (spins[k] < 0) assert_true(carried > 0);
#endif
        ring_ctx n = {.frames = g_frames / 100};
        assert_int_equal(run_carried(&n, -1, spins[k], &snap), 0);
        ring_ctx r = {.frames = g_frames / 10, .stall_one_in = 61};
        carried = run_carried(&r, 0, spins[k], &snap);
        print_message("spin_us %d, stalls: %llu of %llu frames carried to the sink\n", spins[k],
                      (unsigned long long)carried, (unsigned long long)r.frames);
    }
    /* A source kept busy, stages of 1 us (past the 0.2 us carried whatever
     * the thread's state): were every frame carried into a sleeping
     * thread's stage, its thread would never wake and the source would run
     * the whole flow. One such frame in 1024 goes to the stage's own thread
     * instead, so at least frames / 1024 run there, spinning or not. (On
     * 2 cores the threads' turns on the cores queue many frames anyway; on
     * a host with a core per thread only this rule does.) */
    for (size_t k = 0; k < 2; k++) {
        ring_ctx b = {.frames = 20480, .busy_us = 1.0};
        run_carried(&b, 0, spins[k], &snap);
        uint64_t own = b.frames - atomic_load(&g_carry[1].on_source);
        print_message("spin_us %d, busy 1 us: stage a ran %llu of %llu frames on its thread\n",
                      spins[k], (unsigned long long)own, (unsigned long long)b.frames);
        assert_true(own >= b.frames / 1024);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) g_frames = strtoull(argv[1], NULL, 10);
    if (argc > 2) g_cancel_runs = atoi(argv[2]);
    if (kp_device_open("cpu", &g_dev) != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_million_frames_in_order),
        cmocka_unit_test(one_slot_rings),
        cmocka_unit_test(drop_newest_accounts_for_every_frame),
        cmocka_unit_test(batches_behind_a_ring),
        cmocka_unit_test(cancel_at_random_points),
        cmocka_unit_test(carried_frames),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
