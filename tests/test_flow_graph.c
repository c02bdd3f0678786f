/* Flows as graphs: several sources into one stage (fan-in), sources of
 * several streams, splits by stream and by a field, end of stream once
 * every input has ended, drops and end-to-end latency per stream, a micro-batch fed by
 * streams of which one stops, copies to every stage downstream,
 * cancellation at random moments, the DOT
 * file, and every rule of the graph refused by name, in C and in JSON,
 * before anything is made. Every frame's data is checked at its sink: the
 * value its source wrote for its stream and sequence number.
 *   test_flow_graph DEVICE   (cpu or cuda; exit 77 without the device) */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

static kp_device_t g_dev;

#define FLOATS 64
#define MAX_STREAMS 64

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static float value_of(uint32_t stream, uint64_t seq) {
    return (float)stream * 10000.0f + (float)(seq % 10000);
}

/* What the sources make and the sinks see, shared by a test's stages. */
typedef struct graph {
    uint64_t frames[MAX_STREAMS]; /* each stream ends after this many */
    long slow_us;                 /* a sink's sleep per frame */
    long source_us;               /* a source's sleep per frame */
    pthread_mutex_t mu;
    uint64_t seen[MAX_STREAMS]; /* per stream, at any sink */
    uint64_t next[MAX_STREAMS]; /* the next seq a stream's sink expects */
    uint64_t gaps[MAX_STREAMS]; /* seqs skipped (drops) */
    int sink_of[MAX_STREAMS];   /* which sink saw the stream; -1: none yet */
    bool ordered, data_ok, one_sink_each;
    uint64_t batches, batch_frames;
} graph;

typedef struct sink_user {
    graph *g;
    int id;
    float host[FLOATS];
} sink_user;

static void graph_init(graph *g, uint64_t frames) {
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    for (int i = 0; i < MAX_STREAMS; i++) {
        g->frames[i] = frames;
        g->sink_of[i] = -1;
    }
    g->ordered = g->data_ok = g->one_sink_each = true;
}

static kp_status source(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    graph *g = user;
    if (f->seq == g->frames[f->stream % MAX_STREAMS]) {
        *eos = true;
        return KP_OK;
    }
    if (g->source_us) sleep_us(g->source_us);
    f->bytes = FLOATS * sizeof(float);
    f->user[0] = (int64_t)(f->seq * 7 + f->stream); /* for routing by user0 */
    kp_status st = kp_memset_async(c->stream, f->data, 0, f->bytes);
    if (st != KP_OK) return st;
    kpt_affine_params p = {f->data, 1.0f, value_of(f->stream, f->seq), FLOATS};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, FLOATS);
    return kp_launch_kernel(c->stream, &l);
}

static kp_status pass(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) { return KP_OK; }

static kp_status sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    sink_user *u = user;
    graph *g = u->g;
    if (g->slow_us) sleep_us(g->slow_us);
    kp_status st = kp_memcpy_async(c->stream, u->host, f->data, sizeof u->host);
    if (st == KP_OK) st = kp_stream_sync(c->stream);
    if (st != KP_OK) return st;
    bool ok = true;
    for (int i = 0; i < FLOATS; i++) ok = ok && u->host[i] == value_of(f->stream, f->seq);
    pthread_mutex_lock(&g->mu);
    uint32_t s = f->stream % MAX_STREAMS;
    if (!ok) g->data_ok = false;
    if (f->seq < g->next[s]) g->ordered = false;
    if (f->seq > g->next[s]) g->gaps[s] += f->seq - g->next[s];
    g->next[s] = f->seq + 1;
    g->seen[s]++;
    if (g->sink_of[s] >= 0 && g->sink_of[s] != u->id) g->one_sink_each = false;
    g->sink_of[s] = u->id;
    pthread_mutex_unlock(&g->mu);
    return KP_OK;
}

static kp_status batch(void *user, const kp_stage_ctx *c, kp_frame *const *fr, size_t n) {
    graph *g = user;
    pthread_mutex_lock(&g->mu);
    g->batches++;
    g->batch_frames += n;
    pthread_mutex_unlock(&g->mu);
    return KP_OK;
}

static kp_flow_stage stage(const char *name, kp_flow_stage_fn fn, void *user) {
    kp_flow_stage s = {0};
    s.name = name;
    s.fn = fn;
    s.user = user;
    s.queue_capacity = 4;
    return s;
}

/* A flow of the stages, frames of FLOATS floats, a budget of that many
 * frames (0: none), tracing that many events (0: not traced). */
static kp_status make_with(kp_flow_stage *st, size_t n, size_t budget_frames, size_t trace,
                           kp_flow_t *f) {
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev;
    cfg.stages = st;
    cfg.n_stages = n;
    cfg.frame_bytes = FLOATS * sizeof(float);
    cfg.budget_bytes = budget_frames * cfg.frame_bytes;
    cfg.trace_events = trace;
    return kp_flow_create(&cfg, f);
}

static kp_flow_t make(kp_flow_stage *st, size_t n) {
    kp_flow_t f = NULL;
    KPT_OK(make_with(st, n, 0, 0, &f));
    return f;
}

static void run(kp_flow_t f) {
    KPT_OK(kp_flow_start(f));
    KPT_OK(kp_flow_wait(f));
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_true(h.consistent);
    assert_int_equal(h.frames_in_flight, 0);
}

/* Three sources of different lengths into one stage, then one sink: every
 * frame arrives once, in its stream's order, and the end of stream waits
 * for the longest. */
static void fan_in(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 0);
    g.frames[0] = 1;
    g.frames[1] = 333;
    g.frames[2] = 1000;
    sink_user su = {&g, 0, {0}};
    const char *const in[] = {"a", "b", "c"};
    kp_flow_stage st[5] = {stage("a", source, &g), stage("b", source, &g), stage("c", source, &g),
                           stage("merge", pass, NULL), stage("out", sink, &su)};
    st[1].source = st[2].source = true;
    st[3].from = in;
    st[3].n_from = 3;
    kp_flow_t f = make(st, 5);
    run(f);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(g.seen[s], g.frames[s]);
        assert_int_equal(g.gaps[s], 0);
    }
    assert_true(g.ordered && g.data_ok);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.frames_done, 1334);
    assert_int_equal(h.stages[3].in, 1334);
    assert_int_equal(h.queues[3].pushed, 1334);
    kp_flow_destroy(f);
}

/* One source on 16 threads (streams), split by stream over 3 sinks: each
 * stream goes to sink stream % 3 only, and kp_flow_streams counts each. */
static void streams_and_split(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 0);
    for (int s = 0; s < 16; s++) g.frames[s] = 50 + (uint64_t)s * 7;
    sink_user su[3] = {{&g, 0, {0}}, {&g, 1, {0}}, {&g, 2, {0}}};
    const char *const from_split[] = {"split"};
    kp_flow_stage st[5] = {stage("cams", source, &g), stage("split", pass, NULL),
                           stage("s0", sink, &su[0]), stage("s1", sink, &su[1]),
                           stage("s2", sink, &su[2])};
    st[0].streams = 16;
    for (int k = 2; k < 5; k++) {
        st[k].from = from_split;
        st[k].n_from = 1;
    }
    kp_flow_t f = make(st, 5);
    run(f);
    uint64_t total = 0;
    for (int s = 0; s < 16; s++) {
        assert_int_equal(g.seen[s], g.frames[s]);
        assert_int_equal(g.sink_of[s], s % 3);
        total += g.frames[s];
    }
    assert_true(g.ordered && g.data_ok && g.one_sink_each);
    kp_flow_stream_stats ss[20];
    size_t n = 0;
    KPT_OK(kp_flow_streams(f, ss, 20, &n));
    assert_int_equal(n, 16);
    for (int s = 0; s < 16; s++) {
        assert_int_equal(ss[s].stream, (uint32_t)s);
        assert_int_equal(ss[s].frames, g.frames[s]);
        assert_int_equal(ss[s].drops, 0);
        assert_string_equal(ss[s].stage, "cams");
    }
    KPT_OK(kp_flow_streams(f, NULL, 0, &n)); /* only the count */
    assert_int_equal(n, 16);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.frames_done, total);
    kp_flow_destroy(f);
}

/* Routing by user[0] (seq * 7 + stream) over 2 sinks: frames of one stream
 * alternate between them, and none is lost. */
static void split_by_user0(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 200);
    sink_user su[2] = {{&g, 0, {0}}, {&g, 1, {0}}};
    kp_flow_stage st[4] = {stage("src", source, &g), stage("route", pass, NULL),
                           stage("even", sink, &su[0]), stage("odd", sink, &su[1])};
    const char *const r[] = {"route"};
    st[1].route = KP_ROUTE_USER0;
    st[3].from = r;
    st[3].n_from = 1;
    kp_flow_t f = make(st, 4);
    run(f);
    assert_int_equal(g.seen[0], 200);
    assert_false(g.one_sink_each); /* both sinks saw stream 0 */
    assert_true(g.data_ok);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.stages[2].in, 100);
    assert_int_equal(h.stages[3].in, 100);
    kp_flow_destroy(f);
}

/* Four streams into a leaky queue before a slow sink: the drops the flow
 * counts equal the sum over the streams, and every frame is either seen
 * or dropped. */
static void drops_per_stream(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 300);
    g.slow_us = 200;
    sink_user su = {&g, 0, {0}};
    kp_flow_stage st[2] = {stage("cams", source, &g), stage("out", sink, &su)};
    st[0].streams = 4;
    st[1].queue_capacity = 2;
    st[1].policy = KP_QUEUE_DROP_OLDEST;
    kp_flow_t f = make(st, 2);
    run(f);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    kp_flow_stream_stats ss[4];
    size_t n = 0;
    KPT_OK(kp_flow_streams(f, ss, 4, &n));
    uint64_t drops = 0, seen = 0;
    for (int s = 0; s < 4; s++) {
        drops += ss[s].drops;
        seen += g.seen[s];
        assert_int_equal(g.seen[s] + ss[s].drops, 300);
        assert_true(g.gaps[s] <= ss[s].drops); /* a skipped seq was dropped */
    }
    assert_int_equal(drops, h.frames_dropped);
    assert_int_equal(drops, h.queues[1].drops);
    assert_int_equal(seen + drops, 1200);
    assert_true(drops > 0);
    assert_true(g.ordered && g.data_ok);
    kp_flow_destroy(f);
}

static kp_status hold_1ms(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    sleep_us(1000);
    return KP_OK;
}

static void sleep_2ms(void *user) { sleep_us(2000); }

/* The last stage leaves 2 ms of work on its stream and returns. */
static kp_status late_sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    return kp_launch_host_func(c->stream, sleep_2ms, NULL);
}

/* Each stream's end-to-end latency: 1 ms on a stage's host thread plus
 * 2 ms of work the sink leaves on its stream, so every sample is at least
 * 3 ms. The sources are paced (a frame each 10 ms) so that no frame waits
 * in a queue: only the sink's work done on its stream makes up the 3 ms.
 * Traced, every frame is a sample; untraced, some frames are. */
static void latency_per_stream(void **state) {
    (void)state;
    for (int traced = 1; traced >= 0; traced--) {
        graph g;
        graph_init(&g, 30);
        g.source_us = 10000;
        kp_flow_stage st[3] = {stage("cams", source, &g), stage("hold", hold_1ms, NULL),
                               stage("late", late_sink, NULL)};
        st[0].streams = 2;
        kp_flow_t f = NULL;
        KPT_OK(make_with(st, 3, 0, traced ? 1024 : 0, &f));
        run(f);
        kp_flow_stream_stats ss[2];
        size_t n = 0;
        KPT_OK(kp_flow_streams(f, ss, 2, &n));
        assert_int_equal(n, 2);
        for (int k = 0; k < 2; k++) {
            if (ss[k].latency_p50_us < 3000 || ss[k].latency_p99_us < ss[k].latency_p50_us)
                fprintf(stderr, "stream %d: latency p50 %.1f p99 %.1f us\n", k,
                        ss[k].latency_p50_us, ss[k].latency_p99_us);
            assert_true(ss[k].latency_p50_us >= 3000);
            assert_true(ss[k].latency_p99_us >= ss[k].latency_p50_us);
            assert_true(ss[k].latency_p99_us < 10e6);
        }
        kp_flow_destroy(f);
    }
}

/* A micro-batch fed by two streams, one of which stops after 3 frames:
 * the other's frames still leave within the deadline, all of them. */
static void batch_across_streams(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 0);
    g.frames[0] = 3;
    g.frames[1] = 400;
    sink_user su = {&g, 0, {0}};
    kp_flow_stage st[3] = {stage("cams", source, &g), stage("batch", NULL, &g),
                           stage("out", sink, &su)};
    st[0].streams = 2;
    st[1].batch_fn = batch;
    st[1].max_batch = 8;
    st[1].queue_capacity = 8;
    st[1].deadline_us = 2000;
    kp_flow_t f = make(st, 3);
    run(f);
    assert_int_equal(g.seen[0], 3);
    assert_int_equal(g.seen[1], 400);
    assert_int_equal(g.batch_frames, 403);
    assert_true(g.batches >= 403 / 8);
    assert_true(g.ordered && g.data_ok);
    kp_flow_destroy(f);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Cancel at random moments a graph of 3 sources (one of 8 streams) into
 * a split over 2 slow sinks, blocked everywhere: it always stops, and no
 * frame stays in flight. */
static void cancel_graphs(void **state) {
    (void)state;
    srand(7);
    int cancelled = 0;
    for (int run_i = 0; run_i < 150; run_i++) {
        graph g;
        graph_init(&g, 1u << 30);
        g.slow_us = rand() % 3 ? 0 : 50;
        sink_user su[2] = {{&g, 0, {0}}, {&g, 1, {0}}};
        const char *const in[] = {"a", "b", "c"}, *const sp[] = {"split"};
        kp_flow_stage st[6] = {stage("a", source, &g),    stage("b", source, &g),
                               stage("c", source, &g),    stage("split", pass, NULL),
                               stage("o0", sink, &su[0]), stage("o1", sink, &su[1])};
        st[1].source = st[2].source = true;
        st[2].streams = 8;
        st[3].from = in;
        st[3].n_from = 3;
        st[3].queue_capacity = 1 + (size_t)(rand() % 4);
        st[5].from = sp;
        st[5].n_from = 1;
        st[5].policy = rand() % 2 ? KP_QUEUE_BLOCK : KP_QUEUE_DROP_NEWEST;
        kp_flow_t f = make(st, 6);
        KPT_OK(kp_flow_start(f));
        sleep_us(rand() % 3000);
        KPT_OK(kp_flow_cancel(f));
        double t0 = now_s();
        kp_status wst = kp_flow_wait(f);
        assert_true(now_s() - t0 < 10.0);
        if (wst == KP_ERR_STATE) cancelled++;
        kp_flow_snapshot h;
        KPT_OK(kp_flow_health(f, &h));
        assert_int_equal(h.frames_in_flight, 0);
        assert_true(h.consistent);
        assert_true(g.ordered && g.data_ok);
        kp_flow_destroy(f);
        pthread_mutex_destroy(&g.mu);
    }
    assert_int_equal(cancelled, 150);
}

static int g_freed;
static void count_free(void *p) { g_freed++; }

/* Each rule of the graph, refused by name before anything is made: the
 * stages' owned users freed, *out NULL. */
static void graph_rules(void **state) {
    (void)state;
    graph g;
    graph_init(&g, 1);
    const char *const unknown[] = {"nope"}, *const later[] = {"c"}, *const twice[] = {"a", "a"},
                      *const self[] = {"b"}, *const null_name[] = {NULL};
    static const struct {
        int kind;
        const char *want;
    } cases[] = {
        {0, "stages[1] (b).from[0]: \"nope\" is no stage"},
        {1, "stages[1] (b).from[0]: \"c\" comes at or after it"},
        {2, "stages[2] (c).from[1]: \"a\" twice"},
        {3, "stages[1] (b).from[0]: \"b\" comes at or after it"},
        {4, "stages[1] (b).from[0]: NULL"},
        {5, "stages[1] (b).from: a source takes no frames"},
        {6, "stages[1] (b).streams is 4"},
        {7, "stages[0] (a).streams is 300"},
        {8, "stages[0] (a).streams is 0"},
        {9, "stages[0] (a): a source no stage takes frames from"},
        {10, "stages[2] (c).route: unknown route 9"},
        {11, "stages[1] (b).from: 2 names for the 1 stages before it"},
        {12, "stages[1] (b): from without n_from"},
    };
    void *users[4] = {&g, &g, &g, &g};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kp_flow_stage st[3] = {stage("a", source, &g), stage("b", pass, NULL),
                               stage("c", sink, NULL)};
        st[2].free_fn = count_free;
        switch (cases[i].kind) {
        case 0: st[1].from = unknown, st[1].n_from = 1; break;
        case 1: st[1].from = later, st[1].n_from = 1; break;
        case 2: st[2].from = twice, st[2].n_from = 2; break;
        case 3: st[1].from = self, st[1].n_from = 1; break;
        case 4: st[1].from = null_name, st[1].n_from = 1; break;
        case 5: st[1].source = true, st[1].from = unknown, st[1].n_from = 1; break;
        case 6: st[1].streams = 4; break;
        case 7: st[0].streams = 300; break;
        case 8: st[0].stream_users = users; break;
        case 9: st[1].source = true, st[1].fn = source, st[1].user = &g; break;
        case 10: st[2].route = (kp_route)9; break;
        case 11: st[1].from = twice, st[1].n_from = 2; break;
        case 12: st[1].from = unknown; break;
        }
        kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
        cfg.dev = g_dev;
        cfg.stages = st;
        cfg.n_stages = 3;
        kp_flow_t f = (kp_flow_t)&cfg;
        g_freed = 0;
        kp_status s = kp_flow_create(&cfg, &f);
        if (s == KP_OK || !strstr(kp_last_error(), cases[i].want))
            fprintf(stderr, "case %zu: %s (want \"%s\")\n", i, kp_last_error(), cases[i].want);
        assert_int_equal(s, KP_ERR_INVALID_ARG);
        assert_non_null(strstr(kp_last_error(), cases[i].want));
        assert_null(f);
        assert_int_equal(g_freed, 1);
    }
}

/* The JSON form: two sources of copies into a split over two sinks, its
 * DOT file, and its rules named by path. */
static void json_graphs(void **state) {
    (void)state;
    const char *ok = "{\"kpipe_flow\": 1, \"stages\": ["
                     "{\"name\": \"a\", \"source\": \"synthetic\", \"frames\": 20, \"shape\": [8],"
                     " \"streams\": 3},"
                     "{\"name\": \"b\", \"source\": \"synthetic\", \"frames\": 10, \"shape\": [8]},"
                     "{\"name\": \"split\", \"split\": \"stream\", \"from\": [\"a\", \"b\"],"
                     " \"queue\": {\"capacity\": 3, \"policy\": \"drop_newest\"}},"
                     "{\"name\": \"x\", \"sink\": \"null\"},"
                     "{\"name\": \"y\", \"sink\": \"null\", \"from\": \"split\"}]}";
    kp_flow_t f = NULL;
    KPT_OK(kp_flow_create_from_json(g_dev, ok, &f));
    char dot[] = "/tmp/kp_flow_graph_XXXXXX";
    int fd = mkstemp(dot);
    assert_true(fd >= 0);
    close(fd);
    KPT_OK(kp_flow_write_dot(f, dot));
    run(f);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.frames_done + h.frames_dropped, 70);
    assert_int_equal(h.stages[3].in + h.stages[4].in, h.frames_done);
    size_t n = 0;
    KPT_OK(kp_flow_streams(f, NULL, 0, &n));
    assert_int_equal(n, 4);
    kp_flow_destroy(f);
    FILE *fp = fopen(dot, "r");
    assert_non_null(fp);
    char text[4096] = "";
    size_t got = fread(text, 1, sizeof text - 1, fp);
    text[got] = '\0';
    fclose(fp);
    unlink(dot);
    assert_non_null(strstr(text, "digraph flow"));
    assert_non_null(strstr(text, "\"a\" -> \"split\" [label=\"3, drop_newest\"]"));
    assert_non_null(strstr(text, "\"b\" -> \"split\""));
    assert_non_null(strstr(text, "\"split\" -> \"y\" [label=\"4, block\\nstream % 2 == 1\"]"));
    assert_non_null(strstr(text, "3 streams"));
    assert_non_null(strstr(text, "split by stream"));
    /* a queue without a capacity holds one frame of each stream that reaches it */
    const char *many = "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": "
                       "\"synthetic\", \"frames\": 2, \"shape\": [8], \"streams\": 9},"
                       "{\"name\": \"b\", \"source\": \"synthetic\", \"frames\": 2, "
                       "\"shape\": [8]}, {\"name\": \"p\", \"split\": \"stream\", \"from\": "
                       "[\"a\", \"b\"]}, {\"name\": \"x\", \"sink\": \"null\"}, {\"name\": "
                       "\"y\", \"sink\": \"null\", \"from\": \"b\"}]}";
    KPT_OK(kp_flow_create_from_json(g_dev, many, &f));
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.queues[2].capacity, 10);
    assert_int_equal(h.queues[3].capacity, 10);
    assert_int_equal(h.queues[4].capacity, 4); /* one stream: the default */
    kp_flow_destroy(f);

    static const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"b\", \"sink\": \"null\"}, {\"name\": \"c\", "
         "\"sink\": \"null\"}]}",
         "$.stages[1] (b): a sink passes no frames on, but 1 stage takes from it"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"b\", \"split\": \"stream\"}, {\"name\": \"c\", "
         "\"sink\": \"null\", \"from\": \"a\"}]}",
         "$.stages[1] (b): no stage takes its frames"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"b\", \"sink\": \"null\", \"from\": [\"z\"]}]}",
         "$.stages[1] (b).from[0]: \"z\" is no stage"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"b\", \"sink\": \"null\", \"from\": 3}]}",
         "$.stages[1].from: expected a stage's name"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4], \"from\": \"a\"}, {\"name\": \"b\", \"sink\": \"null\"}]}",
         "$.stages[0].from: a source takes no frames"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4], \"streams\": 0}, {\"name\": \"b\", \"sink\": \"null\"}]}",
         "$.stages[0].streams: expected an integer from 1 to 256"},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"s\", \"split\": \"colour\"}, {\"name\": \"b\", "
         "\"sink\": \"null\"}]}",
         "$.stages[1].split: expected \"stream\", \"user0\" or \"copy\""},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"synthetic\", "
         "\"shape\": [4]}, {\"name\": \"b\", \"sink\": \"null\", \"streams\": 2}]}",
         "$.stages[1].streams: a null stage takes no \"streams\""},
        {"{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"a\", \"source\": \"y4m\", "
         "\"path\": \"x.y4m\", \"streams\": 2}, {\"name\": \"b\", \"sink\": \"null\"}]}",
         "$.stages[0].streams: a y4m stage takes no \"streams\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kp_flow_t b = (kp_flow_t)1;
        kp_status st = kp_flow_create_from_json(g_dev, bad[i].json, &b);
        if (st == KP_OK || !strstr(kp_last_error(), bad[i].want))
            fprintf(stderr, "json case %zu: %s (want \"%s\")\n", i, kp_last_error(), bad[i].want);
        assert_int_equal(st, KP_ERR_PARSE);
        assert_non_null(strstr(kp_last_error(), bad[i].want));
        assert_null(b);
    }
}

/* A sink that checks each frame against value_of + add, per stream in order. */
typedef struct tee_sink {
    float add, host[FLOATS];
    uint64_t next[4];
    bool ok;
} tee_sink;

static kp_status tee_check(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    tee_sink *u = user;
    kp_status st = kp_memcpy_async(c->stream, u->host, f->data, sizeof u->host);
    if (st == KP_OK) st = kp_stream_sync(c->stream);
    if (st != KP_OK) return st;
    for (int i = 0; i < FLOATS; i++)
        u->ok = u->ok && u->host[i] == value_of(f->stream, f->seq) + u->add;
    u->ok = u->ok && f->stream < 4 && f->seq == u->next[f->stream]++ && f->bytes == sizeof u->host;
    return KP_OK;
}

static kp_status bump(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    kpt_affine_params p = {f->data, 1.0f, 0.5f, FLOATS};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, FLOATS);
    return kp_launch_kernel(c->stream, &l);
}

/* KP_ROUTE_COPY: 3 streams to three stages; one of them adds 0.5 to its
 * frames on the device before its sink, which the other two must not see.
 * Every sink gets every frame of every stream, in order, every element
 * right; with a budget of fewer frames than the flow holds, too. */
static void copy_fan_out(void **state) {
    (void)state;
    for (int budget = 0; budget < 2; budget++) {
        graph g;
        graph_init(&g, 150);
        tee_sink t[3] = {{0.0f, {0}, {0}, true}, {0.5f, {0}, {0}, true}, {0.0f, {0}, {0}, true}};
        const char *const from_tee[] = {"tee"};
        kp_flow_stage st[6] = {stage("cams", source, &g),    stage("tee", pass, NULL),
                               stage("a", tee_check, &t[0]), stage("bump", bump, NULL),
                               stage("b", tee_check, &t[1]), stage("c", tee_check, &t[2])};
        st[0].streams = 3;
        st[1].route = KP_ROUTE_COPY;
        st[3].from = st[5].from = from_tee;
        st[3].n_from = st[5].n_from = 1;
        kp_flow_t f = NULL;
        KPT_OK(make_with(st, 6, budget ? 5 : 0, 0, &f));
        run(f);
        kp_flow_snapshot h;
        KPT_OK(kp_flow_health(f, &h));
        assert_int_equal(h.frames_done, 3 * 450);
        for (int k = 0; k < 3; k++) {
            if (!t[k].ok)
                fprintf(stderr, "budget %d sink %d: %llu %llu %llu\n", budget, k,
                        (unsigned long long)t[k].next[0], (unsigned long long)t[k].next[1],
                        (unsigned long long)t[k].next[2]);
            assert_true(t[k].ok);
            for (int s = 0; s < 3; s++) assert_int_equal(t[k].next[s], 150);
        }
        kp_flow_destroy(f);
    }
    assert_string_equal(kp_route_str(KP_ROUTE_COPY), "copy");
    /* a budget without room for the copies' frames is refused by name */
    graph g;
    graph_init(&g, 10);
    kp_flow_stage st[4] = {stage("src", source, &g), stage("tee", pass, NULL),
                           stage("x", pass, NULL), stage("y", pass, NULL)};
    const char *const from_tee[] = {"tee"};
    st[1].route = KP_ROUTE_COPY;
    st[3].from = from_tee;
    st[3].n_from = 1;
    kp_flow_t f = (kp_flow_t)1;
    KPT_FAILS(make_with(st, 4, 2, 0, &f), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "(\"tee\" and any before it) set 2 apart for copies"));
    assert_null(f);
    /* the JSON form: two null sinks each get all 3 x 20 frames */
    const char *json = "{\"kpipe_flow\": 1, \"stages\": ["
                       "{\"name\": \"a\", \"source\": \"synthetic\", \"frames\": 20, "
                       "\"shape\": [8], \"streams\": 3},"
                       "{\"name\": \"tee\", \"split\": \"copy\"},"
                       "{\"name\": \"x\", \"sink\": \"null\"},"
                       "{\"name\": \"y\", \"sink\": \"null\", \"from\": \"tee\"}]}";
    KPT_OK(kp_flow_create_from_json(g_dev, json, &f));
    run(f);
    kp_flow_snapshot h;
    KPT_OK(kp_flow_health(f, &h));
    assert_int_equal(h.stages[2].in, 60);
    assert_int_equal(h.stages[3].in, 60);
    kp_flow_destroy(f);
}

/* The new calls' misuse. */
static void misuse(void **state) {
    (void)state;
    size_t n = 0;
    kp_flow_stream_stats ss;
    KPT_FAILS(kp_flow_streams(NULL, &ss, 1, &n), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_write_dot(NULL, "/tmp/x.dot"), KP_ERR_INVALID_ARG);
    assert_string_equal(kp_route_str(KP_ROUTE_STREAM), "stream");
    assert_string_equal(kp_route_str(KP_ROUTE_USER0), "user0");
    assert_string_equal(kp_route_str((kp_route)5), "invalid");
    graph g;
    graph_init(&g, 1);
    sink_user su = {&g, 0, {0}};
    kp_flow_stage st[2] = {stage("a", source, &g), stage("b", sink, &su)};
    kp_flow_t f = make(st, 2);
    KPT_FAILS(kp_flow_streams(f, NULL, 1, &n), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_streams(f, &ss, 1, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_write_dot(f, NULL), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_write_dot(f, "/no/such/dir/x.dot"), KP_ERR_IO);
    assert_non_null(strstr(kp_last_error(), "/no/such/dir/x.dot"));
    kp_flow_destroy(f);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    kp_status st = kp_device_open(name, &g_dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: flow graph tests on %s: %s\n", name, kp_last_error());
        return 77;
    }
    if (st != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fan_in),
        cmocka_unit_test(streams_and_split),
        cmocka_unit_test(split_by_user0),
        cmocka_unit_test(drops_per_stream),
        cmocka_unit_test(latency_per_stream),
        cmocka_unit_test(copy_fan_out),
        cmocka_unit_test(batch_across_streams),
        cmocka_unit_test(cancel_graphs),
        cmocka_unit_test(graph_rules),
        cmocka_unit_test(json_graphs),
        cmocka_unit_test(misuse),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
