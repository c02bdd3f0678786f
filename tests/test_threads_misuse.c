/* Two threads on one object that is used by one thread at a time (a
 * pipeline, a graph cache, a task set, a batch resizer): while the first is
 * inside a call, the second is refused with KP_ERR_STATE naming the call in
 * progress, the first completes with the right results, and afterwards the
 * object serves calls in turn from either thread. A call re-entered from a
 * callback on the same object is refused the same way. Flows, which are
 * made for threads, are waited for by two threads at once, and started by
 * two at once.
 *
 * The overlap is forced, not hoped for: the first thread blocks inside its
 * call (in a module's io, a cache's work function, a task, or behind a host
 * function that holds the stream) until the second has tried. Runs under
 * ThreadSanitizer in the sanitizer build. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <cmocka.h>

#include "support/kp_test.h"

#define N 1024 /* floats per tensor */

static kp_device_t g_dev;

/* Returns a failing status from the enclosing function. */
#define CHECK(expr)                               \
    do {                                          \
        kp_status check_st_ = (expr);             \
        if (check_st_ != KP_OK) return check_st_; \
    } while (0)

/* --- the gate: where a first call waits for the second thread ----------------------- */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool armed, inside, open;
    void (*hook)(void); /* run by the blocked call's thread before it waits */
} gate;

static gate g_gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void gate_arm(void (*hook)(void)) {
    pthread_mutex_lock(&g_gate.mu);
    g_gate.armed = true;
    g_gate.inside = g_gate.open = false;
    g_gate.hook = hook;
    pthread_mutex_unlock(&g_gate.mu);
}

/* In a callback: when armed, runs the hook, says it is inside and waits
 * for gate_open. Unarmed, it passes. */
static void gate_pass(void) {
    pthread_mutex_lock(&g_gate.mu);
    bool armed = g_gate.armed;
    void (*hook)(void) = g_gate.hook;
    g_gate.armed = false;
    pthread_mutex_unlock(&g_gate.mu);
    if (!armed) return;
    if (hook) hook();
    pthread_mutex_lock(&g_gate.mu);
    g_gate.inside = true;
    pthread_cond_broadcast(&g_gate.cv);
    while (!g_gate.open) pthread_cond_wait(&g_gate.cv, &g_gate.mu);
    pthread_mutex_unlock(&g_gate.mu);
}

static void gate_wait_inside(void) {
    pthread_mutex_lock(&g_gate.mu);
    while (!g_gate.inside) pthread_cond_wait(&g_gate.cv, &g_gate.mu);
    pthread_mutex_unlock(&g_gate.mu);
}

static void gate_open(void) {
    pthread_mutex_lock(&g_gate.mu);
    g_gate.open = true;
    pthread_cond_broadcast(&g_gate.cv);
    pthread_mutex_unlock(&g_gate.mu);
}

/* The refusal a second call gets: KP_ERR_STATE, its own name first, and
 * the call in progress named. */
static void expect_in_use(kp_status st, const char *fn, const char *inside) {
    const char *e = kp_last_error();
    if (st != KP_ERR_STATE || strncmp(e, fn, strlen(fn)) != 0 || !strstr(e, "is in use") ||
        !strstr(e, inside))
        fail_msg("%s gave %s: \"%s\"; expected KP_ERR_STATE naming %s", fn, kp_status_name(st), e,
                 inside);
}

static void fill(float *x, float base) {
    for (int i = 0; i < N; i++) x[i] = base + (float)i;
}

static void expect_values(const float *got, float base, const char *what) {
    for (int i = 0; i < N; i++)
        if (got[i] != base + (float)i)
            fail_msg("%s: element %d is %g, expected %g", what, i, (double)got[i],
                     (double)(base + (float)i));
}

/* --- a pipeline ----------------------------------------------------------------------- */
/* "gate_copy": y = x, through the module's own tensor; its io waits at the gate. */
typedef struct gate_copy {
    void *y;
    const void *x;
} gate_copy;

static kp_status gc_mem(void *self, kp_mem_req *r) {
    memset(r, 0, sizeof *r);
    r->device_bytes = N * sizeof(float);
    return KP_OK;
}

static kp_status gc_setup(void *self, const kp_mem_slice *s) {
    ((gate_copy *)self)->y = s->device;
    return KP_OK;
}

static kp_status gc_io(void *self, const kp_module_io *io) {
    gate_copy *m = self;
    int64_t n = N;
    m->x = io->inputs[0].data;
    io->outputs[0].data = m->y;
    CHECK(kp_desc_init(&io->outputs[0].desc, KP_F32, 1, &n, NULL));
    gate_pass();
    return KP_OK;
}

static kp_status gc_execute(void *self, kp_stream_t s) {
    gate_copy *m = self;
    return kp_memcpy_async(s, m->y, m->x, N * sizeof(float));
}

static const kp_module_i gc_iface = {.destroy = free,
                                     .io = gc_io,
                                     .execute = gc_execute,
                                     .memory_requirements = gc_mem,
                                     .setup_memory = gc_setup};

static kp_status gc_create(const kp_module_env *env, kp_module_def *def) {
    gate_copy *m = calloc(1, sizeof *m);
    if (!m) return kp_set_error(KP_ERR_OUT_OF_MEMORY, "gate_copy: no memory");
    def->iface = &gc_iface;
    def->self = m;
    CHECK(kp_port_decl_1d(&def->inputs[def->n_inputs++], "x", KP_F32, N));
    CHECK(kp_port_decl_1d(&def->outputs[def->n_outputs++], "y", KP_F32, N));
    return KP_OK;
}

static const char *k_gate_spec = "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": ["
                                 "{\"type\": \"gate_copy\", \"id\": \"g\"}],"
                                 "\"inputs\": {\"x\": \"g.x\"}, \"outputs\": {\"y\": \"g.y\"}}";

typedef struct ticker {
    kp_pipeline_t p;
    kp_stream_t s;
    float *in;    /* host memory on cpu: read in place */
    float out[N]; /* the tick's output, read back */
    kp_status st;
    char error[512];
} ticker;

static kp_status tick(ticker *t) {
    kp_port_info in = {"x", t->in, {0}}, out = {"y", NULL, {0}};
    int64_t n = N;
    CHECK(kp_desc_init(&in.desc, KP_F32, 1, &n, NULL));
    CHECK(kp_pipeline_configure_io(t->p, &in, 1, &out, 1, t->s));
    CHECK(kp_pipeline_execute_stream(t->p, t->s));
    CHECK(kp_stream_sync(t->s));
    return kp_memcpy_dtoh(g_dev, t->out, out.data, sizeof t->out);
}

static void *tick_thread(void *arg) {
    ticker *t = arg;
    t->st = tick(t);
    snprintf(t->error, sizeof t->error, "%s", kp_last_error());
    return NULL;
}

static kp_pipeline_t g_pipe;
static kp_status g_reentered;
static char g_reentered_error[512];

/* From inside the pipeline's own io: the same pipeline is refused. */
static void pipeline_reenter(void) {
    kp_pipeline_report r;
    g_reentered = kp_pipeline_report_get(g_pipe, &r);
    snprintf(g_reentered_error, sizeof g_reentered_error, "%s", kp_last_error());
}

static void pipeline_second_thread_refused(void **state) {
    ticker a = {0}, b = {0};
    KPT_OK(kp_pipeline_create_from_json(g_dev, k_gate_spec, &g_pipe));
    KPT_OK(kp_pipeline_setup(g_pipe));
    KPT_OK(kp_stream_create(g_dev, &a.s));
    KPT_OK(kp_stream_create(g_dev, &b.s));
    KPT_OK(kp_malloc(g_dev, N * sizeof(float), (void **)&a.in));
    KPT_OK(kp_malloc(g_dev, N * sizeof(float), (void **)&b.in));
    float h[N];
    fill(h, 1000.0f);
    KPT_OK(kp_memcpy_htod(g_dev, a.in, h, sizeof h));
    fill(h, -5000.0f);
    KPT_OK(kp_memcpy_htod(g_dev, b.in, h, sizeof h));
    a.p = b.p = g_pipe;

    { /* the first tick, with the warmup, from this thread */
        kp_port_info in = {"x", b.in, {0}}, out = {"y", NULL, {0}};
        int64_t n = N;
        KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, &n, NULL));
        KPT_OK(kp_pipeline_configure_io(g_pipe, &in, 1, &out, 1, b.s));
        KPT_OK(kp_pipeline_warmup(g_pipe, b.s));
    }
    KPT_OK(tick(&b));
    expect_values(b.out, -5000.0f, "the first tick");

    gate_arm(pipeline_reenter);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tick_thread, &a), 0);
    gate_wait_inside(); /* a is inside kp_pipeline_configure_io */
    kp_port_info in = {"x", b.in, {0}}, out = {"y", NULL, {0}};
    int64_t n = N;
    KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, &n, NULL));
    expect_in_use(kp_pipeline_configure_io(g_pipe, &in, 1, &out, 1, b.s),
                  "kp_pipeline_configure_io", "kp_pipeline_configure_io is running");
    assert_null(out.data); /* nothing was filled */
    expect_in_use(kp_pipeline_execute_stream(g_pipe, b.s), "kp_pipeline_execute_stream",
                  "kp_pipeline_configure_io");
    kp_pipeline_report r;
    expect_in_use(kp_pipeline_report_get(g_pipe, &r), "kp_pipeline_report_get",
                  "kp_pipeline_configure_io");
    expect_in_use(kp_pipeline_warmup(g_pipe, b.s), "kp_pipeline_warmup",
                  "kp_pipeline_configure_io");
    /* what creation planned may be read from any thread */
    kp_module_report m;
    KPT_OK(kp_pipeline_module_report(g_pipe, 0, &m));
    assert_string_equal(m.id, "g");
    gate_open();
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("the first thread's tick: %s", a.error);
    expect_values(a.out, 1000.0f, "the tick the second thread met");
    /* the callback's own call on the pipeline was refused, on its thread */
    if (g_reentered != KP_ERR_STATE || !strstr(g_reentered_error, "kp_pipeline_configure_io"))
        fail_msg("re-entered kp_pipeline_report_get gave %s: %s", kp_status_name(g_reentered),
                 g_reentered_error);

    /* in turn, from either thread, it goes on as before */
    KPT_OK(tick(&b));
    expect_values(b.out, -5000.0f, "a tick after the refusals");
    assert_int_equal(pthread_create(&th, NULL, tick_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("a tick on another thread, in turn: %s", a.error);
    expect_values(a.out, 1000.0f, "a tick on another thread, in turn");
    KPT_OK(kp_pipeline_report_get(g_pipe, &r));

    kp_pipeline_destroy(g_pipe);
    kp_free(g_dev, a.in);
    kp_free(g_dev, b.in);
    kp_stream_destroy(a.s);
    kp_stream_destroy(b.s);
}

/* --- a graph cache ------------------------------------------------------------------- */
static kp_graph_cache_t g_cache;

static kp_status copy_work(void *user, kp_stream_t s, const kp_graph_args *a) {
    gate_pass();
    return kp_memcpy_async(s, a->outputs[0].data, a->inputs[0].data,
                           (size_t)kp_desc_bytes_needed(&a->inputs[0].desc));
}

static void cache_reenter(void) {
    kp_graph_stats st;
    g_reentered = kp_graph_cache_stats(g_cache, &st);
    snprintf(g_reentered_error, sizeof g_reentered_error, "%s", kp_last_error());
}

typedef struct cache_caller {
    kp_stream_t s;
    float *in;
    int64_t n; /* elements this call copies (its own key) */
    float out[N];
    kp_status st;
    char error[512];
} cache_caller;

static kp_status cache_call(cache_caller *c) {
    kp_port_info in = {"x", c->in, {0}}, out = {"y", NULL, {0}};
    CHECK(kp_desc_init(&in.desc, KP_F32, 1, &c->n, NULL));
    out.desc = in.desc;
    kp_graph_call call = KP_GRAPH_CALL_INIT;
    call.enqueue = copy_work;
    call.inputs = &in;
    call.n_inputs = 1;
    call.outputs = &out;
    call.n_outputs = 1;
    CHECK(kp_graph_cache_run(g_cache, &call, c->s));
    CHECK(kp_stream_sync(c->s));
    return kp_memcpy_dtoh(g_dev, c->out, out.data, (size_t)c->n * sizeof(float));
}

static void *cache_thread(void *arg) {
    cache_caller *c = arg;
    c->st = cache_call(c);
    snprintf(c->error, sizeof c->error, "%s", kp_last_error());
    return NULL;
}

static void graph_cache_second_thread_refused(void **state) {
    cache_caller a = {.n = N}, b = {.n = N / 2};
    KPT_OK(kp_graph_cache_create(g_dev, NULL, &g_cache));
    KPT_OK(kp_stream_create(g_dev, &a.s));
    KPT_OK(kp_stream_create(g_dev, &b.s));
    KPT_OK(kp_malloc(g_dev, N * sizeof(float), (void **)&a.in));
    KPT_OK(kp_malloc(g_dev, N * sizeof(float), (void **)&b.in));
    float h[N];
    fill(h, 7.0f);
    KPT_OK(kp_memcpy_htod(g_dev, a.in, h, sizeof h));
    fill(h, 300000.0f);
    KPT_OK(kp_memcpy_htod(g_dev, b.in, h, sizeof h));

    gate_arm(cache_reenter);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cache_thread, &a), 0);
    gate_wait_inside(); /* a is capturing its miss, inside kp_graph_cache_run */
    kp_port_info in = {"x", b.in, {0}}, out = {"y", NULL, {0}};
    KPT_OK(kp_desc_init(&in.desc, KP_F32, 1, &b.n, NULL));
    out.desc = in.desc;
    kp_graph_call call = KP_GRAPH_CALL_INIT;
    call.enqueue = copy_work;
    call.inputs = &in;
    call.n_inputs = 1;
    call.outputs = &out;
    call.n_outputs = 1;
    expect_in_use(kp_graph_cache_run(g_cache, &call, b.s), "kp_graph_cache_run",
                  "kp_graph_cache_run is running");
    assert_null(out.data);
    expect_in_use(kp_graph_cache_prepare(g_cache, &call, 1, b.s), "kp_graph_cache_prepare",
                  "kp_graph_cache_run");
    kp_graph_stats gs;
    expect_in_use(kp_graph_cache_stats(g_cache, &gs), "kp_graph_cache_stats", "kp_graph_cache_run");
    char text[1024];
    kp_graph_cache_report(g_cache, text, sizeof text);
    if (!strstr(text, "kp_graph_cache_report: the graph cache is in use"))
        fail_msg("the report while in use: \"%s\"", text);
    kp_graph_cache_config cfg; /* the configuration is fixed: any thread */
    KPT_OK(kp_graph_cache_config_get(g_cache, &cfg));
    gate_open();
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("the first thread's call: %s", a.error);
    expect_values(a.out, 7.0f, "the call the second thread met");
    if (g_reentered != KP_ERR_STATE || !strstr(g_reentered_error, "kp_graph_cache_run"))
        fail_msg("re-entered kp_graph_cache_stats gave %s: %s", kp_status_name(g_reentered),
                 g_reentered_error);
    /* the refused calls counted nothing */
    KPT_OK(kp_graph_cache_stats(g_cache, &gs));
    assert_int_equal(gs.calls, 1);
    assert_int_equal(gs.graphs, 1);

    KPT_OK(cache_call(&b)); /* in turn, from this thread: a miss of its own key */
    for (int i = 0; i < N / 2; i++) assert_true(b.out[i] == 300000.0f + (float)i);
    assert_int_equal(pthread_create(&th, NULL, cache_thread, &a), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("a call on another thread, in turn: %s", a.error);
    expect_values(a.out, 7.0f, "a hit on another thread, in turn");
    KPT_OK(kp_graph_cache_stats(g_cache, &gs));
    assert_int_equal(gs.calls, 3);
    assert_int_equal(gs.hits, 1);

    kp_graph_cache_destroy(g_cache);
    kp_free(g_dev, a.in);
    kp_free(g_dev, b.in);
    kp_stream_destroy(a.s);
    kp_stream_destroy(b.s);
}

/* --- a task set ------------------------------------------------------------------------ */
static kp_tasks_t g_tasks;

/* A task writing x[i] = base + i on the host once the stream gets there. */
typedef struct fill_job {
    float *x;
    float base;
} fill_job;

static void fill_host(void *user) {
    fill_job *j = user;
    fill(j->x, j->base);
}

static kp_status fill_task(void *user, kp_stream_t s, const kp_task_view *v, size_t n) {
    gate_pass();
    fill_job *j = user;
    j->x = v[0].data;
    return kp_launch_host_func(s, fill_host, j);
}

static void tasks_reenter(void) {
    kp_tasks_stats st;
    g_reentered = kp_tasks_stats_get(g_tasks, &st);
    snprintf(g_reentered_error, sizeof g_reentered_error, "%s", kp_last_error());
}

typedef struct tasks_runner {
    kp_stream_t s;
    uint32_t buf;
    fill_job job;
    kp_status st;
    char error[512];
} tasks_runner;

static kp_status tasks_round(tasks_runner *r) {
    kp_task_arg arg = {.access = KP_TASK_OUT, .buffer = r->buf};
    int64_t n = N;
    CHECK(kp_desc_init(&arg.desc, KP_F32, 1, &n, NULL));
    const kp_task_kernel k = {"fill", fill_task, &r->job, NULL};
    CHECK(kp_tasks_submit(g_tasks, &k, &arg, 1, NULL));
    CHECK(kp_tasks_run(g_tasks, r->s));
    return kp_stream_sync(r->s);
}

static void *tasks_thread(void *arg) {
    tasks_runner *r = arg;
    r->st = tasks_round(r);
    snprintf(r->error, sizeof r->error, "%s", kp_last_error());
    return NULL;
}

static void tasks_second_thread_refused(void **state) {
    tasks_runner a = {.job = {NULL, 11.0f}}, b = {.job = {NULL, -11.0f}};
    KPT_OK(kp_tasks_create(g_dev, 2, &g_tasks));
    KPT_OK(kp_stream_create(g_dev, &a.s));
    KPT_OK(kp_stream_create(g_dev, &b.s));
    KPT_OK(kp_tasks_buffer(g_tasks, N * sizeof(float), &a.buf));
    KPT_OK(kp_tasks_buffer(g_tasks, N * sizeof(float), &b.buf));

    gate_arm(tasks_reenter);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, tasks_thread, &a), 0);
    gate_wait_inside(); /* a is inside kp_tasks_run, in its task */
    kp_task_arg arg = {.access = KP_TASK_OUT, .buffer = b.buf};
    int64_t n = N;
    KPT_OK(kp_desc_init(&arg.desc, KP_F32, 1, &n, NULL));
    const kp_task_kernel k = {"fill", fill_task, &b.job, NULL};
    expect_in_use(kp_tasks_submit(g_tasks, &k, &arg, 1, NULL), "kp_tasks_submit",
                  "kp_tasks_run is running");
    uint32_t id;
    expect_in_use(kp_tasks_buffer(g_tasks, 64, &id), "kp_tasks_buffer", "kp_tasks_run");
    kp_tasks_stats ts;
    expect_in_use(kp_tasks_stats_get(g_tasks, &ts), "kp_tasks_stats_get", "kp_tasks_run");
    expect_in_use(kp_tasks_run(g_tasks, b.s), "kp_tasks_run", "kp_tasks_run");
    gate_open();
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("the first thread's run: %s", a.error);
    void *p;
    KPT_OK(kp_tasks_buffer_data(g_tasks, a.buf, &p));
    float out[N];
    KPT_OK(kp_memcpy_dtoh(g_dev, out, p, sizeof out));
    expect_values(out, 11.0f, "the run the second thread met");
    if (g_reentered != KP_ERR_STATE || !strstr(g_reentered_error, "kp_tasks_run"))
        fail_msg("re-entered kp_tasks_stats_get gave %s: %s", kp_status_name(g_reentered),
                 g_reentered_error);
    KPT_OK(kp_tasks_stats_get(g_tasks, &ts));
    assert_int_equal(ts.runs, 1); /* the refused submit and run left nothing behind */

    KPT_OK(tasks_round(&b)); /* in turn, from this thread */
    KPT_OK(kp_tasks_buffer_data(g_tasks, b.buf, &p));
    KPT_OK(kp_memcpy_dtoh(g_dev, out, p, sizeof out));
    expect_values(out, -11.0f, "a run after the refusals");
    kp_tasks_destroy(g_tasks);
    kp_stream_destroy(a.s);
    kp_stream_destroy(b.s);
}

/* --- a batch resizer ------------------------------------------------------------------- */
/* It calls nothing back: the first thread blocks inside kp_resizer_nv12
 * waiting for a staging slot, held by a host function that waits at the
 * gate; the second thread probes with a call it would refuse anyway (no
 * pictures) until the answer is the guard's. */
#define PW 64
#define PH 32
#define DW 32
#define DH 16
#define SLOTS 4 /* the resizer's staging slots */

typedef struct resize_caller {
    kp_resizer_t r;
    kp_stream_t s;
    uint8_t *src, *dst; /* device memory */
    kp_status st;
    char error[512];
} resize_caller;

static void host_gate(void *user) { gate_pass(); }

static void *resize_thread(void *arg) {
    resize_caller *c = arg;
    kp_nv12_picture pic = {c->src, PW, PH, PW};
    c->st = kp_launch_host_func(c->s, host_gate, NULL);
    for (int i = 0; i <= SLOTS && c->st == KP_OK; i++) { /* the last waits for slot 0 */
        /* the other thread's probe may overlap a call here too: that call
         * is refused, and made again */
        do
            c->st = kp_resizer_nv12(c->r, c->s, &pic, 1, c->dst + (size_t)i * DW * DH * 3 / 2, DW,
                                    DH, DW);
        while (c->st == KP_ERR_STATE);
    }
    if (c->st == KP_OK) c->st = kp_stream_sync(c->s);
    snprintf(c->error, sizeof c->error, "%s", kp_last_error());
    return NULL;
}

static void resizer_second_thread_refused(void **state) {
    resize_caller a = {0};
    const size_t in_bytes = PW * PH * 3 / 2, out_bytes = DW * DH * 3 / 2;
    KPT_OK(kp_resizer_create(g_dev, 2, &a.r));
    KPT_OK(kp_stream_create(g_dev, &a.s));
    KPT_OK(kp_malloc(g_dev, in_bytes, (void **)&a.src));
    KPT_OK(kp_malloc(g_dev, (SLOTS + 1) * out_bytes, (void **)&a.dst));
    uint8_t h[PW * PH * 3 / 2];
    for (size_t i = 0; i < sizeof h; i++) h[i] = (uint8_t)(i * 7 + i / PW);
    KPT_OK(kp_memcpy_htod(g_dev, a.src, h, sizeof h));

    gate_arm(NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, resize_thread, &a), 0);
    gate_wait_inside(); /* the stream is held; the thread fills the slots, then waits */
    kp_nv12_picture pic = {a.src, PW, PH, PW};
    kp_status st = KP_ERR_INVALID_ARG;
    for (int tries = 0; st == KP_ERR_INVALID_ARG && tries < 100000; tries++) {
        st = kp_resizer_nv12(a.r, a.s, &pic, 0, a.dst, DW, DH, DW);
        if (st == KP_ERR_INVALID_ARG) nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    expect_in_use(st, "kp_resizer_nv12", "kp_resizer_nv12 is running");
    gate_open();
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.st != KP_OK) fail_msg("the first thread's resizes: %s", a.error);
    /* bit for bit what one direct call per picture gives */
    uint8_t *want;
    KPT_OK(kp_malloc(g_dev, out_bytes, (void **)&want));
    KPT_OK(kp_resize_nv12(a.s, a.src, PW, PH, PW, want, DW, DH, DW));
    KPT_OK(kp_stream_sync(a.s));
    uint8_t w[DW * DH * 3 / 2], got[DW * DH * 3 / 2];
    KPT_OK(kp_memcpy_dtoh(g_dev, w, want, sizeof w));
    for (int i = 0; i <= SLOTS; i++) {
        KPT_OK(kp_memcpy_dtoh(g_dev, got, a.dst + (size_t)i * out_bytes, sizeof got));
        assert_memory_equal(got, w, sizeof w);
    }
    /* in turn, from this thread */
    KPT_OK(kp_resizer_nv12(a.r, a.s, &pic, 1, a.dst, DW, DH, DW));
    KPT_OK(kp_stream_sync(a.s));
    KPT_OK(kp_memcpy_dtoh(g_dev, got, a.dst, sizeof got));
    assert_memory_equal(got, w, sizeof w);
    kp_free(g_dev, want);
    kp_resizer_destroy(a.r);
    kp_free(g_dev, a.src);
    kp_free(g_dev, a.dst);
    kp_stream_destroy(a.s);
}

/* --- a flow: waited for by two threads at once ----------------------------------------- */
#define FRAMES 64

typedef struct flow_count {
    atomic_uint_fast64_t done;
} flow_count;

static kp_status flow_source(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    if (f->seq == 0) gate_pass(); /* the flow runs only once both waiters wait */
    if (f->seq == FRAMES) *eos = true;
    return KP_OK;
}

static kp_status flow_sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    atomic_fetch_add(&((flow_count *)user)->done, 1);
    return KP_OK;
}

typedef struct waiter {
    kp_flow_t f;
    flow_count *count;
    atomic_bool ready;
    kp_status st;
    uint64_t seen; /* frames done when its wait returned */
} waiter;

static void *wait_thread(void *arg) {
    waiter *w = arg;
    atomic_store(&w->ready, true);
    w->st = kp_flow_wait(w->f);
    w->seen = atomic_load(&w->count->done);
    return NULL;
}

static void *start_thread(void *arg) {
    waiter *w = arg;
    w->st = kp_flow_start(w->f);
    return NULL;
}

static void flow_waited_by_two_threads(void **state) {
    flow_count count = {0};
    kp_flow_stage st[2] = {{.name = "source", .fn = flow_source},
                           {.name = "sink", .fn = flow_sink, .user = &count, .queue_capacity = 4}};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = g_dev;
    cfg.stages = st;
    cfg.n_stages = 2;
    kp_flow_t f;
    KPT_OK(kp_flow_create(&cfg, &f));
    gate_arm(NULL);
    /* two starts at once: one starts it, the other is told it was */
    waiter s1 = {.f = f}, s2 = {.f = f};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, start_thread, &s1), 0);
    assert_int_equal(pthread_create(&t2, NULL, start_thread, &s2), 0);
    assert_int_equal(pthread_join(t1, NULL), 0);
    assert_int_equal(pthread_join(t2, NULL), 0);
    assert_true((s1.st == KP_OK) != (s2.st == KP_OK));
    assert_int_equal(s1.st == KP_OK ? s2.st : s1.st, KP_ERR_STATE);
    gate_wait_inside(); /* the source holds the flow at its first frame */
    waiter w1 = {.f = f, .count = &count}, w2 = {.f = f, .count = &count};
    assert_int_equal(pthread_create(&t1, NULL, wait_thread, &w1), 0);
    assert_int_equal(pthread_create(&t2, NULL, wait_thread, &w2), 0);
    while (!atomic_load(&w1.ready) || !atomic_load(&w2.ready))
        nanosleep(&(struct timespec){0, 100000}, NULL);
    /* both are about to wait or waiting; neither may return before the end */
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    gate_open();
    assert_int_equal(pthread_join(t1, NULL), 0);
    assert_int_equal(pthread_join(t2, NULL), 0);
    assert_int_equal(w1.st, KP_OK);
    assert_int_equal(w2.st, KP_OK);
    assert_int_equal(w1.seen, FRAMES);
    assert_int_equal(w2.seen, FRAMES);
    KPT_OK(kp_flow_wait(f)); /* once more, the same outcome */
    kp_flow_destroy(f);
}

/* On the cpu backend: the guard is the same on every device, and the task
 * test writes its buffers from host functions. An argument runs only the
 * tests whose names match it (cmocka's filter: "flow*"). */
int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    if (kp_device_open("cpu", &g_dev) != KP_OK) return 1;
    if (kp_module_register("gate_copy", gc_create) != KP_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pipeline_second_thread_refused),
        cmocka_unit_test(graph_cache_second_thread_refused),
        cmocka_unit_test(tasks_second_thread_refused),
        cmocka_unit_test(resizer_second_thread_refused),
        cmocka_unit_test(flow_waited_by_two_threads),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    kp_device_close(g_dev);
    return failed ? 1 : 0;
}
