/* Flows over several devices: stages placed on devices, frames handed over
 * by copy, in place and through host memory, replicated stages dealt least
 * loaded and round robin and put back in order, the JSON form checked
 * against the same flow on one device (and, on cuda, on cpu), and errors.
 * Every element of every frame is checked, at 1, odd, 1M and (BIG) 16M
 * floats.
 *   test_flow_devices BACKEND [BIG]   (cpu or cuda; exit 77 with fewer than 2 devices) */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "support/kp_test.h"
#include "support/test_kernels.h"

#define TRY(expr)                             \
    do {                                      \
        kp_status try_st_ = (expr);           \
        if (try_st_ != KP_OK) return try_st_; \
    } while (0)

static const char *g_backend = "cpu";
static kp_device_t g_dev[2];
static bool g_big;

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Shared by one flow's stages. */
typedef struct ctx {
    int n;            /* floats per frame */
    uint64_t frames;  /* the source ends after this many */
    long slow_us[2];  /* replica r of the middle stage sleeps this long per frame */
    uint64_t fail_at; /* the middle stage fails at this seq (0: never) */
    uint64_t next, seen;
    bool ordered;
    uint64_t per_replica[2];
    float *host; /* n floats, pinned or pageable */
    kp_device_t host_dev;
    kp_flow_t flow;
} ctx;

static kp_status affine(kp_stream_t s, float *y, int n, float a, float b) {
    kpt_affine_params p = {y, a, b, n};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, n);
    return kp_launch_kernel(s, &l);
}

/* y = seq (mod 1000) */
static kp_status source(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ctx *t = user;
    if (f->seq == t->frames) {
        *eos = true;
        return KP_OK;
    }
    f->bytes = (size_t)t->n * sizeof(float);
    TRY(kp_memset_async(c->stream, f->data, 0, f->bytes));
    return affine(c->stream, f->data, t->n, 1.0f, (float)(f->seq % 1000));
}

/* y = 2y + 1, on whichever replica */
static kp_status middle(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ctx *t = user;
    if (t->fail_at && f->seq == t->fail_at)
        return kp_set_error(KP_ERR_IO, "frame %llu: the link went down",
                            (unsigned long long)f->seq);
    if (c->replica < 2) {
        if (t->slow_us[c->replica]) sleep_us(t->slow_us[c->replica]);
        __atomic_fetch_add(&t->per_replica[c->replica], 1, __ATOMIC_RELAXED);
    }
    return affine(c->stream, f->data, t->n, 2.0f, 1.0f);
}

/* Every element, and the order. */
static kp_status sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    ctx *t = user;
    TRY(kp_memcpy_async(c->stream, t->host, f->data, (size_t)t->n * sizeof(float)));
    TRY(kp_stream_sync(c->stream));
    float want = 2.0f * (float)(f->seq % 1000) + 1.0f;
    for (int i = 0; i < t->n; i++)
        if (t->host[i] != want)
            return kp_set_error(KP_ERR_MISMATCH, "frame %llu element %d: %g, want %g",
                                (unsigned long long)f->seq, i, (double)t->host[i], (double)want);
    if (f->seq != t->next) t->ordered = false;
    t->next = f->seq + 1;
    t->seen++;
    return KP_OK;
}

typedef struct place {
    kp_device_t src, sink;
    kp_device_t mid;         /* one device, or */
    const kp_device_t *reps; /* replicas */
    size_t n_reps;
    kp_handoff handoff;
    kp_deal deal;
} place;

static void ctx_init(ctx *t, int n, uint64_t frames, bool pinned) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->frames = frames;
    t->ordered = true;
    if (pinned) {
        t->host_dev = g_dev[0];
        KPT_OK(kp_malloc_host(g_dev[0], (size_t)n * sizeof(float), (void **)&t->host));
    } else {
        t->host = malloc((size_t)n * sizeof(float));
        assert_non_null(t->host);
    }
}

static void ctx_fini(ctx *t) {
    if (t->host_dev)
        kp_free_host(t->host_dev, t->host);
    else
        free(t->host);
}

static kp_status run_flow(ctx *t, const place *p, kp_flow_snapshot *h) {
    kp_flow_stage st[3] = {{.name = "source", .fn = source, .user = t, .dev = p->src},
                           {.name = "middle",
                            .fn = middle,
                            .user = t,
                            .queue_capacity = 3,
                            .dev = p->mid,
                            .handoff = p->handoff,
                            .replicas = p->reps,
                            .n_replicas = p->n_reps,
                            .deal = p->deal},
                           {.name = "sink",
                            .fn = sink,
                            .user = t,
                            .queue_capacity = 2,
                            .dev = p->sink,
                            .handoff = p->handoff}};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev[0];
    cfg.stages = st;
    cfg.n_stages = 3;
    cfg.frame_bytes = (size_t)t->n * sizeof(float);
    kp_flow_t f;
    TRY(kp_flow_create(&cfg, &f));
    t->flow = f;
    kp_status st_run = kp_flow_start(f);
    kp_status st_wait = kp_flow_wait(f);
    char detail[512];
    snprintf(detail, sizeof detail, "%s", kp_last_error());
    if (h) KPT_OK(kp_flow_health(f, h));
    kp_flow_destroy(f);
    if (st_run != KP_OK) return st_run;
    return st_wait == KP_OK ? KP_OK : kp_set_error(st_wait, "%s", detail);
}

/* Source on one device, the middle stage on the other, the sink back on
 * the first: two hand-overs per frame, by each kind, at each size. */
static void handoffs_at_every_size(void **state) {
    (void)state;
    const int sizes[] = {1, 4097, 1 << 20, 1 << 24};
    const kp_handoff kinds[] = {KP_HANDOFF_AUTO, KP_HANDOFF_COPY, KP_HANDOFF_STAGED,
                                KP_HANDOFF_IN_PLACE};
    /* every element is checked at the sink, whichever way a frame came */
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        if (sizes[si] == 1 << 24 && !g_big) continue;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            bool can = false;
            KPT_OK(kp_device_peer_access(g_dev[1], g_dev[0], false, &can));
            if (kinds[k] == KP_HANDOFF_IN_PLACE && !can) continue;
            ctx t;
            uint64_t frames = sizes[si] >= (1 << 20) ? 12 : 40;
            ctx_init(&t, sizes[si], frames, k % 2 == 1);
            place p = {g_dev[0], g_dev[0], g_dev[1], NULL, 0, kinds[k], KP_DEAL_LEAST_LOADED};
            kp_flow_snapshot h;
            kp_status st = run_flow(&t, &p, &h);
            if (st != KP_OK)
                print_error("%d floats, %s: %s\n", sizes[si], kp_handoff_str(kinds[k]),
                            kp_last_error());
            assert_int_equal(st, KP_OK);
            assert_int_equal(t.seen, frames);
            assert_true(t.ordered);
            assert_int_equal(h.n_devices, 2);
            assert_int_equal(h.devices[0].runs,
                             2 * frames + 1); /* source (with its end) and sink */
            assert_int_equal(h.devices[1].runs, frames);
            assert_string_equal(h.stages[1].device, kp_device_name(g_dev[1]));
            if (kinds[k] == KP_HANDOFF_IN_PLACE) {
                /* the frame stays where it was made: one in-place link, no copies */
                assert_int_equal(h.n_links, 1);
                assert_int_equal(h.links[0].handoff, KP_HANDOFF_IN_PLACE);
            } else if (kinds[k] == KP_HANDOFF_AUTO && can) {
                /* the first 2 x 8 frames from device 0 are timed by copy and
                 * in place, then the faster way stays: every frame crossed
                 * to device 1 one way or the other */
                assert_true(h.n_links >= 1 && h.n_links <= 2);
                assert_string_equal(h.links[0].from, kp_device_name(g_dev[0]));
                assert_int_equal(h.links[0].frames, frames);
                assert_true(h.links[0].handoff == KP_HANDOFF_COPY ||
                            h.links[0].handoff == KP_HANDOFF_IN_PLACE);
            } else {
                assert_int_equal(h.n_links, 2);
                for (size_t l = 0; l < 2; l++) {
                    assert_int_equal(h.links[l].frames, frames);
                    assert_int_equal(h.links[l].bytes, frames * (uint64_t)sizes[si] * 4);
                }
            }
            bool staged = kinds[k] == KP_HANDOFF_STAGED || (kinds[k] == KP_HANDOFF_AUTO && !can);
            assert_int_equal(h.staged_frames, staged ? 2 * frames : 0);
            ctx_fini(&t);
        }
    }
}

/* A replica per device; the first is slow, so frames finish out of order,
 * and leave the stage in order all the same. */
static void replicas_keep_order(void **state) {
    (void)state;
    const kp_deal deals[] = {KP_DEAL_LEAST_LOADED, KP_DEAL_ROUND_ROBIN};
    for (size_t d = 0; d < 2; d++) {
        ctx t;
        ctx_init(&t, 4097, 200, d == 1);
        t.slow_us[0] = 300;
        place p = {g_dev[0], g_dev[1], NULL, g_dev, 2, KP_HANDOFF_AUTO, deals[d]};
        kp_flow_snapshot h;
        KPT_OK(run_flow(&t, &p, &h));
        assert_int_equal(t.seen, 200);
        assert_true(t.ordered);
        assert_int_equal(h.stages[1].replicas, 2);
        assert_int_equal(h.stages[1].in, 200);
        assert_int_equal(h.stages[1].out, 200);
        assert_int_equal(t.per_replica[0] + t.per_replica[1], 200);
        if (deals[d] == KP_DEAL_ROUND_ROBIN) {
            assert_int_equal(t.per_replica[0], 100);
            assert_int_equal(t.per_replica[1], 100);
        } else {
            /* the fast replica takes frames; how many depends on the
             * devices' speed (a sanitizer slows them down), so no more is
             * asserted */
            printf("least loaded: %llu and %llu frames\n", (unsigned long long)t.per_replica[0],
                   (unsigned long long)t.per_replica[1]);
            assert_true(t.per_replica[1] > 0);
        }
        assert_true(h.consistent);
        ctx_fini(&t);
    }
}

/* A failing replica stops the flow with its error; cancelling a flow with
 * replicas mid-stream stops it. */
static void replicas_fail_and_cancel(void **state) {
    (void)state;
    ctx t;
    ctx_init(&t, 1000, 100, false);
    t.fail_at = 37;
    place p = {g_dev[0], g_dev[0], NULL, g_dev, 2, KP_HANDOFF_AUTO, KP_DEAL_ROUND_ROBIN};
    KPT_FAILS(run_flow(&t, &p, NULL), KP_ERR_IO);
    assert_non_null(strstr(kp_last_error(), "stage \"middle\": frame 37"));
    assert_true(t.ordered);
    assert_true(t.seen <= 37);
    ctx_fini(&t);

    for (int run = 0; run < 20; run++) {
        ctx_init(&t, 1000, 0, false);
        t.frames = UINT64_MAX;
        t.slow_us[0] = 50 * run;
        kp_flow_stage st[3] = {
            {.name = "source", .fn = source, .user = &t},
            {.name = "middle",
             .fn = middle,
             .user = &t,
             .queue_capacity = 2,
             .replicas = g_dev,
             .n_replicas = 2,
             .deal = (kp_deal)(run % 2)},
            {.name = "sink", .fn = sink, .user = &t, .queue_capacity = 2, .dev = g_dev[1]}};
        kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
        cfg.dev = g_dev[0];
        cfg.stages = st;
        cfg.n_stages = 3;
        cfg.frame_bytes = 4000;
        kp_flow_t f;
        KPT_OK(kp_flow_create(&cfg, &f));
        t.flow = f;
        KPT_OK(kp_flow_start(f));
        sleep_us(200 * run);
        KPT_OK(kp_flow_cancel(f));
        assert_true(kp_flow_cancelled(f));
        KPT_FAILS(kp_flow_wait(f), KP_ERR_STATE);
        kp_flow_snapshot h;
        KPT_OK(kp_flow_health(f, &h));
        assert_int_equal(h.frames_in_flight, 0); /* every frame back, none lost in the rings */
        assert_true(t.ordered);
        kp_flow_destroy(f);
        ctx_fini(&t);
    }
}

/* The JSON form with placement and replicas gives what the one-device form
 * gives, element for element. */
static const char *const g_relu =
    "{\"kpipe_spec\": 1, \"modules\": [{\"type\": \"relu\", \"id\": \"r\", "
    "\"params\": {\"size\": {\"max\": 1048576}}}], \"inputs\": {\"x\": \"r.input\"}, "
    "\"outputs\": {\"y\": \"r.output\"}}";

static float *json_run(kp_device_t dev, const char *placement_a, const char *placement_b, int n,
                       const char *out, kp_flow_snapshot *h) {
    char json[4096];
    snprintf(json, sizeof json,
             "{\"kpipe_flow\": 1, \"stages\": ["
             "{\"name\": \"src\", \"source\": \"synthetic\", \"frames\": 30, \"shape\": [%d]},"
             "{\"name\": \"a\", \"pipeline\": %s %s},"
             "{\"name\": \"b\", \"pipeline\": %s %s},"
             "{\"name\": \"out\", \"sink\": \"npy\", \"path\": \"%s\"}]}",
             n, g_relu, placement_a, g_relu, placement_b, out);
    kp_flow_t f;
    KPT_OK(kp_flow_create_from_json(dev, json, &f));
    KPT_OK(kp_flow_start(f));
    KPT_OK(kp_flow_wait(f));
    if (h) KPT_OK(kp_flow_health(f, h));
    kp_flow_destroy(f);
    kp_tensor_desc d;
    void *data;
    size_t bytes;
    KPT_OK(kp_npy_load(out, &d, &data, &bytes));
    remove(out);
    assert_int_equal(bytes, (size_t)n * sizeof(float));
    return data;
}

static void json_flows_agree(void **state) {
    (void)state;
    const int sizes[] = {1, 4097, 1 << 20};
    char a[128], b[128];
    for (size_t si = 0; si < 3; si++) {
        int n = sizes[si];
        float *one = json_run(g_dev[0], "", "", n, "tfd_one.npy", NULL);
        snprintf(a, sizeof a, ", \"device\": \"%s:1\", \"handoff\": \"copy\"", g_backend);
        snprintf(b, sizeof b, ", \"replicas\": \"all\", \"deal\": \"round_robin\"");
        kp_flow_snapshot h;
        float *two = json_run(g_dev[0], a, b, n, "tfd_two.npy", &h);
        assert_int_equal(h.stages[1].replicas, 1);
        assert_true(h.stages[2].replicas >= 2);
        assert_true(h.n_devices >= 2);
        assert_memory_equal(one, two, (size_t)n * sizeof(float));
        snprintf(b, sizeof b, ", \"replicas\": [1, \"%s:0\"]", g_backend);
        float *staged = json_run(g_dev[0], ", \"handoff\": \"staged\"", b, n, "tfd_st.npy", &h);
        assert_memory_equal(one, staged, (size_t)n * sizeof(float));
        if (strcmp(g_backend, "cpu") != 0) { /* the same flow on the cpu backend */
            kp_device_t cpu;
            KPT_OK(kp_device_open("cpu", &cpu));
            float *host = json_run(cpu, "", "", n, "tfd_cpu.npy", NULL);
            assert_memory_equal(one, host, (size_t)n * sizeof(float));
            kp_npy_free(host);
            kp_device_close(cpu);
        }
        kp_npy_free(one);
        kp_npy_free(two);
        kp_npy_free(staged);
    }
}

static void json_placement_errors(void **state) {
    (void)state;
    static const struct {
        const char *stage, *want;
    } bad[] = {
        {"\"device\": \"tpu:0\"", "unknown device"},
        {"\"device\": \"cpu:99\"", "device"},
        {"\"device\": true", "expected a device name"},
        {"\"device\": -1", "expected a device name"},
        {"\"device\": 99", "device"},
        {"\"device\": \"cpu:0\", \"replicas\": \"all\"", "not both"},
        {"\"replicas\": \"some\"", "expected \"all\" or a list"},
        {"\"replicas\": []", "expected \"all\" or a list"},
        {"\"replicas\": [0, 0]", "named twice"},
        {"\"replicas\": [1, \"cpu:1\", 0]", "replicas[1]"},
        {"\"replicas\": [0, {}]", "replicas[1]"},
        {"\"deal\": \"round_robin\"", "only a stage with replicas"},
        {"\"replicas\": \"all\", \"deal\": \"random\"", "least_loaded"},
        {"\"handoff\": \"teleport\"", "in_place"},
    };
    char json[2048];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": ["
                 "{\"name\": \"src\", \"source\": \"synthetic\", \"frames\": 3, \"shape\": [8]},"
                 "{\"name\": \"a\", \"pipeline\": %s, %s},"
                 "{\"name\": \"out\", \"sink\": \"null\"}]}",
                 g_relu, bad[i].stage);
        kp_flow_t f = (kp_flow_t)0x1;
        kp_status st = kp_flow_create_from_json(g_dev[0], json, &f);
        if (st == KP_OK || !strstr(kp_last_error(), bad[i].want))
            print_error("%s: %s (%s)\n", bad[i].stage, kp_status_name(st), kp_last_error());
        assert_int_not_equal(st, KP_OK);
        assert_non_null(strstr(kp_last_error(), bad[i].want));
        assert_null(f);
    }
    /* replicas on a source; a device of another backend */
    const char *src_reps = "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"src\", \"source\": "
                           "\"synthetic\", \"frames\": 3, \"shape\": [8], \"replicas\": \"all\"},"
                           "{\"name\": \"out\", \"sink\": \"null\"}]}";
    kp_flow_t f;
    KPT_FAILS(kp_flow_create_from_json(g_dev[0], src_reps, &f), KP_ERR_PARSE);
    assert_non_null(strstr(kp_last_error(), "only a pipeline stage has replicas"));
    if (strcmp(g_backend, "cpu") != 0) {
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"src\", \"source\": "
                 "\"synthetic\", \"frames\": 3, \"shape\": [8], \"device\": \"cpu:1\"},"
                 "{\"name\": \"out\", \"sink\": \"null\"}]}");
        KPT_FAILS(kp_flow_create_from_json(g_dev[0], json, &f), KP_ERR_PARSE);
        assert_non_null(strstr(kp_last_error(), "not of the flow's backend"));
    }
}

/* The C form's checks. */
static void config_errors(void **state) {
    (void)state;
    ctx t;
    ctx_init(&t, 8, 3, false);
    kp_device_t three[3] = {g_dev[0], g_dev[1], NULL};
    kp_flow_stage st[2] = {{.name = "source", .fn = source, .user = &t},
                           {.name = "sink", .fn = sink, .user = &t, .queue_capacity = 2}};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev[0];
    cfg.stages = st;
    cfg.n_stages = 2;
    cfg.frame_bytes = 32;
    kp_flow_t f;
    st[1].handoff = (kp_handoff)9;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "handoff"));
    st[1].handoff = KP_HANDOFF_AUTO;
    st[1].deal = (kp_deal)5;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
    st[1].deal = KP_DEAL_LEAST_LOADED;
    st[1].replicas = three;
    st[1].n_replicas = 3;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "replicas[2] is NULL"));
    st[1].n_replicas = KP_FLOW_MAX_REPLICAS + 1;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
    st[1].n_replicas = 0;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG); /* replicas without a count */
    st[1].replicas = NULL;
    st[0].replicas = three;
    st[0].n_replicas = 2;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG); /* the source */
    st[0].replicas = NULL;
    st[0].n_replicas = 0;
    if (strcmp(g_backend, "cpu") != 0) {
        kp_device_t cpu;
        KPT_OK(kp_device_open("cpu", &cpu));
        st[1].dev = cpu;
        KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
        assert_non_null(strstr(kp_last_error(), "not of the flow's backend"));
        kp_device_close(cpu);
        st[1].dev = NULL;
    }
    assert_string_equal(kp_handoff_str((kp_handoff)9), "invalid");
    assert_string_equal(kp_handoff_str(KP_HANDOFF_IN_PLACE), "in_place");
    assert_false(kp_flow_cancelled(NULL));
    ctx_fini(&t);
}

int main(int argc, char **argv) {
    g_backend = argc > 1 ? argv[1] : "cpu";
    g_big = argc > 2 && strcmp(argv[2], "BIG") == 0;
    char why[256] = "";
    int n = kp_device_count(g_backend, why, sizeof why);
    if (n < 2) {
        printf("SKIP: flows over devices on %s: %d device(s) %s\n", g_backend, n, why);
        return 77;
    }
    char name[64];
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s:%d", g_backend, i);
        if (kp_device_open(name, &g_dev[i]) != KP_OK) {
            printf("cannot open %s: %s\n", name, kp_last_error());
            return 1;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(handoffs_at_every_size),   cmocka_unit_test(replicas_keep_order),
        cmocka_unit_test(replicas_fail_and_cancel), cmocka_unit_test(json_flows_agree),
        cmocka_unit_test(json_placement_errors),    cmocka_unit_test(config_errors),
    };
    int failed = cmocka_run_group_tests_name(g_backend, tests, NULL, NULL);
    kp_device_close(g_dev[1]);
    kp_device_close(g_dev[0]);
    return failed ? 1 : 0;
}
