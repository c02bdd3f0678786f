/* Remote queues: two processes on loopback, a sending flow in one and a
 * receiving flow in the other. Order and every element at 1, odd and 1M
 * floats; backpressure across the link (never more than the capacity in
 * flight); end of stream; cancellation from either side; either peer
 * killed mid-stream (an error, no hang); refusals and timeouts; the JSON
 * form's errors; and, with both ends in this process, either end cancelled
 * at random moments early in the stream (connecting, saying hello,
 * sending): the other always stops promptly with KP_ERR_STATE. A
 * stranger peer, a raw UCX client in this process, says a wrong hello or
 * sends malformed frames: the receiving flow fails with the reason. Frames
 * through the copies (pinned host slots, a spare beside the credits) at 1,
 * odd and 1M floats: on cpu with each flow's other stage on a second
 * device, which makes the frames span two devices; on cuda always, where
 * UCX has no CUDA support.
 * A child process is this program again (fork, then exec at once: neither
 * CUDA nor UCX survives a fork alone), on the same backend.
 *   test_remote [DEVICE [FILTER]]   (cpu unless given; exit 77 where there
 *                                    is none; FILTER: the tests by name, a glob) */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "flow/remote/remote-impl.h" /* the wire, which a stranger peer speaks wrongly */
#include "support/kp_test.h"
#include "support/test_kernels.h"

static const char *g_device = "cpu";

static void sleep_us(long us) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define TRY(expr)                             \
    do {                                      \
        kp_status try_st_ = (expr);           \
        if (try_st_ != KP_OK) return try_st_; \
    } while (0)

/* One side's flow and what its stages saw. */
typedef struct side {
    int n;               /* floats per frame */
    uint64_t frames;     /* the sender's source ends after this many (0: never) */
    long sink_sleep_us;  /* a slow receiving sink */
    uint64_t cancel_at;  /* the receiving sink cancels its flow at this frame (0: never) */
    uint64_t seen, next; /* frames the receiving sink saw; the one it expects */
    bool ordered, data_ok;
    float *host;
    kp_device_t dev;
    bool copies;       /* frames through the link's copies (side_copies) */
    kp_device_t other; /* the other stage's device, where not dev (copies on cpu) */
    kp_flow_t flow;
} side;

static kp_status gen(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    side *t = user;
    if (t->frames && f->seq == t->frames) {
        *eos = true;
        return KP_OK;
    }
    f->bytes = (size_t)t->n * sizeof(float);
    f->user[0] = (int64_t)f->seq * 3;
    int64_t shape[1] = {t->n};
    TRY(kp_desc_init(&f->desc, KP_F32, 1, shape, NULL));
    TRY(kp_memset_async(c->stream, f->data, 0, f->bytes));
    kpt_affine_params p = {f->data, 1.0f, (float)(f->seq % 1000) + 0.5f, t->n};
    kp_launch l = kpt_launch_1d(&kpt_affine, &p, t->n);
    return kp_launch_kernel(c->stream, &l);
}

/* Every element, the order, the descriptor and the user words. */
static kp_status check(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    side *t = user;
    if (t->sink_sleep_us) sleep_us(t->sink_sleep_us);
    if (f->bytes != (size_t)t->n * sizeof(float) || f->desc.ndim != 1 || f->desc.shape[0] != t->n ||
        f->user[0] != (int64_t)f->seq * 3)
        t->data_ok = false;
    TRY(kp_memcpy_async(c->stream, t->host, f->data, (size_t)t->n * sizeof(float)));
    TRY(kp_stream_sync(c->stream));
    float want = (float)(f->seq % 1000) + 0.5f;
    for (int i = 0; i < t->n; i++)
        if (t->host[i] != want) t->data_ok = false;
    if (f->seq != t->next) t->ordered = false;
    t->next = f->seq + 1;
    __atomic_store_n(&t->seen, t->seen + 1, __ATOMIC_RELAXED); /* the main thread polls it */
    if (t->cancel_at && t->seen == t->cancel_at) kp_flow_cancel(t->flow);
    return KP_OK;
}

/* KPT_REMOTE_RX_DEVICE: the receiving processes' device, where it is not
 * the sender's (cuda:1 against cuda:0: CUDA IPC between two GPUs). */
static const char *rx_device(void) {
    const char *d = getenv("KPT_REMOTE_RX_DEVICE");
    return d && *d ? d : g_device;
}

static kp_status side_open_on(side *t, int n, const char *device) {
    t->n = n;
    t->ordered = t->data_ok = true;
    TRY(kp_device_open(device, &t->dev));
    t->host = malloc((size_t)n * sizeof(float));
    return t->host ? KP_OK : KP_ERR_OUT_OF_MEMORY;
}

static kp_status side_open(side *t, int n) { return side_open_on(t, n, g_device); }

/* The lane an end on this host took (kp_flow_remote_stats.lane): tcp where
 * KP_REMOTE_LANE=tcp, else UCX's shared memory, with CUDA IPC for device
 * frames unless KP_REMOTE_LANE=shm. */
static void expect_lane(const char *lane, bool copied_frames) {
    const char *want = getenv("KP_REMOTE_LANE");
    bool tcp = want && strcmp(want, "tcp") == 0, shm = want && strcmp(want, "shm") == 0;
    bool ipc = !tcp && !shm && strncmp(g_device, "cuda", 4) == 0 && copied_frames;
    if (tcp ? strcmp(lane, "tcp") != 0
            : strncmp(lane, "shared memory (", 15) != 0 || (strstr(lane, "CUDA IPC") != NULL) != ipc)
        print_error("lane \"%s\", expected %s\n", lane,
                    tcp ? "tcp" : ipc ? "shared memory and CUDA IPC" : "shared memory");
    assert_true(tcp ? strcmp(lane, "tcp") == 0 : strncmp(lane, "shared memory (", 15) == 0);
    assert_true(tcp || (strstr(lane, "CUDA IPC") != NULL) == ipc);
}
/* The credits a link of `asked` grants for frames of `bytes`: at most
 * two of 512 KiB and more on a shared-memory lane without CUDA IPC (the
 * receiver copies them one at a time there: KP__LANE_WINDOW). */
static uint64_t credits_for(const char *lane, size_t bytes, uint64_t asked) {
    bool one_host = strncmp(lane, "shared memory (", 15) == 0 && !strstr(lane, "CUDA IPC");
    return one_host && bytes >= (512u << 10) && asked > 2 ? 2 : asked;
}

/* Frames through the link's copies: on cpu, the flow's other stage on a
 * second device (the frames then span two, and cannot trade buffers with
 * the link); elsewhere the copies are there already. */
static kp_status side_copies(side *t) {
    return strcmp(g_device, "cpu") == 0 ? kp_device_open("cpu:1", &t->other) : KP_OK;
}

static void side_close(side *t) {
    kp_flow_destroy(t->flow);
    kp_device_close(t->other);
    kp_device_close(t->dev);
    free(t->host);
}

/* A flow of two stages, one of them a remote queue's end (made, set up
 * and owned as the JSON reader does). */
static kp_status two_stage_flow(side *t, kp__stage_made *m, bool receiver) {
    kp_flow_stage st[2] = {
        {.name = "gen", .fn = gen, .user = t},
        {.name = "tx", .fn = m->fn, .user = m->user, .end_fn = m->end_fn, .queue_capacity = 2}};
    if (receiver) {
        st[0] = (kp_flow_stage){.name = "rx", .fn = m->fn, .user = m->user, .end_fn = m->end_fn};
        st[1] = (kp_flow_stage){.name = "check", .fn = check, .user = t, .queue_capacity = 2};
    }
    st[receiver ? 1 : 0].dev = t->other;
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = t->dev;
    cfg.stages = st;
    cfg.n_stages = 2;
    cfg.frame_bytes = (size_t)t->n * sizeof(float);
    kp_status s = kp_flow_create(&cfg, &t->flow);
    if (s != KP_OK) {
        m->free_fn(m->user);
        return s;
    }
    TRY(kp__flow_own(t->flow, m->user, m->free_fn));
    return KP_OK;
}

/* What a receiving child reports to its parent. */
typedef struct report {
    kp_status st;
    uint64_t seen;
    bool ordered, data_ok;
    char error[400];
    char lane[64];
    bool direct;
} report;

typedef struct rx_opts {
    int n;
    size_t capacity, frame_bytes;
    long sink_sleep_us;
    uint64_t cancel_at;
    int timeout_ms;
    int copies; /* frames through the copies (side_copies) */
} rx_opts;

/* The receiving process (test_remote --rx ...): listens on a free port,
 * writes it to port_fd, runs its flow to the end and writes a report to
 * report_fd. */
static int run_receiver(const rx_opts *o, int port_fd, int report_fd) {
    side t = {0};
    report r = {0};
    kp__stage_made m;
    int p = -1;
    r.st = side_open_on(&t, o->n, rx_device());
    if (r.st == KP_OK && o->copies) r.st = side_copies(&t);
    t.sink_sleep_us = o->sink_sleep_us;
    t.cancel_at = o->cancel_at;
    if (r.st == KP_OK)
        r.st = kp__stage_remote_source(t.dev, "127.0.0.1:0", o->frame_bytes, o->capacity,
                                       o->timeout_ms, &m);
    if (r.st == KP_OK) r.st = two_stage_flow(&t, &m, true);
    kp_flow_remote_stats rs;
    if (r.st == KP_OK) r.st = kp_flow_remote(t.flow, 0, &rs);
    if (r.st == KP_OK) p = atoi(strrchr(rs.address, ':') + 1);
    if (write(port_fd, &p, sizeof p) != sizeof p) return 3;
    if (r.st == KP_OK) r.st = kp_flow_start(t.flow);
    if (r.st == KP_OK) r.st = kp_flow_wait(t.flow);
    snprintf(r.error, sizeof r.error, "%s", r.st == KP_OK ? "" : kp_last_error());
    if (t.flow && kp_flow_remote(t.flow, 0, &rs) == KP_OK) {
        snprintf(r.lane, sizeof r.lane, "%s", rs.lane);
        r.direct = rs.direct;
    }
    r.seen = t.seen;
    r.ordered = t.ordered;
    r.data_ok = t.data_ok;
    if (write(report_fd, &r, sizeof r) != sizeof r) return 3;
    side_close(&t);
    return 0;
}

static kp_status sender(side *t, int n, uint64_t frames, int port, size_t frame_bytes,
                        int timeout_ms);

/* The sending process (test_remote --tx ...): sends until killed. */
static int run_sender(int n, int port, size_t frame_bytes) {
    side t = {0};
    if (sender(&t, n, 0, port, frame_bytes, 20000) != KP_OK) return 2;
    if (kp_flow_start(t.flow) != KP_OK) return 2;
    kp_flow_wait(t.flow);
    return 1;
}

/* Runs this program again with args: UCX does not survive a fork, so
 * each process of a test starts afresh. */
static pid_t spawn(char *const *args) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a test that dies (its alarm, below) takes its peers with it: a
         * peer left running would keep ctest's pipe open, and ctest waiting */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv("/proc/self/exe", args);
        _exit(127);
    }
    return pid;
}

/* Starts a receiving process; *port gets its port, *rep the pipe its
 * report comes through. */
static pid_t fork_receiver(const rx_opts *o, int *port, int *rep) {
    int pp[2], rp[2];
    assert_int_equal(pipe(pp), 0);
    assert_int_equal(pipe(rp), 0);
    char a[9][32];
    snprintf(a[8], 32, "%d", o->copies);
    snprintf(a[0], 32, "%d", o->n);
    snprintf(a[1], 32, "%zu", o->capacity);
    snprintf(a[2], 32, "%zu", o->frame_bytes);
    snprintf(a[3], 32, "%ld", o->sink_sleep_us);
    snprintf(a[4], 32, "%llu", (unsigned long long)o->cancel_at);
    snprintf(a[5], 32, "%d", o->timeout_ms);
    snprintf(a[6], 32, "%d", pp[1]);
    snprintf(a[7], 32, "%d", rp[1]);
    char *args[] = {"test_remote", "--rx", a[0], a[1], a[2], a[3],
                    a[4],          a[5],   a[6], a[7], a[8], NULL};
    pid_t pid = spawn(args);
    close(pp[1]);
    close(rp[1]);
    assert_int_equal(read(pp[0], port, sizeof *port), sizeof *port);
    close(pp[0]);
    *rep = rp[0];
    return pid;
}

static report reap(pid_t pid, int rep) {
    report r = {0};
    if (read(rep, &r, sizeof r) != sizeof r) {
        r.st = KP_ERR_INTERNAL;
        snprintf(r.error, sizeof r.error, "the receiver wrote no report");
    }
    close(rep);
    int ws = 0;
    waitpid(pid, &ws, 0);
    return r;
}

/* The sending flow in this process, to 127.0.0.1:port. */
static kp_status sender(side *t, int n, uint64_t frames, int port, size_t frame_bytes,
                        int timeout_ms) {
    TRY(side_open(t, n));
    if (t->copies) TRY(side_copies(t));
    t->frames = frames;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    kp__stage_made m;
    TRY(kp__stage_remote_sink(t->dev, addr, frame_bytes, timeout_ms, &m));
    return two_stage_flow(t, &m, false);
}

static void order_and_every_element(void **state) {
    (void)state;
    const int sizes[] = {1, 4097, 1 << 20};
    for (size_t k = 0; k < 3; k++) {
        int n = sizes[k], port, rep;
        uint64_t frames = n >= (1 << 20) ? 40 : 300;
        rx_opts o = {n, 3, (size_t)n * sizeof(float), 0, 0, 20000, 0};
        pid_t pid = fork_receiver(&o, &port, &rep);
        side t = {0};
        KPT_OK(sender(&t, n, frames, port, (size_t)n * sizeof(float), 20000));
        KPT_OK(kp_flow_start(t.flow));
        KPT_OK(kp_flow_wait(t.flow));
        kp_flow_remote_stats rs;
        KPT_OK(kp_flow_remote(t.flow, 1, &rs));
        assert_int_equal(rs.frames, frames);
        assert_int_equal(rs.bytes, frames * (uint64_t)n * sizeof(float));
        assert_int_equal(rs.capacity, credits_for(rs.lane, (size_t)n * sizeof(float), 3));
        assert_true(rs.max_in_flight <= rs.capacity);
        assert_false(rs.receiver);
        expect_lane(rs.lane, !rs.direct);
        side_close(&t);
        report r = reap(pid, rep);
        if (r.st != KP_OK) print_error("receiver: %s\n", r.error);
        assert_int_equal(r.st, KP_OK);
        expect_lane(r.lane, !r.direct);
        assert_int_equal(r.seen, frames);
        assert_true(r.ordered);
        assert_true(r.data_ok);
    }
}

/* One stream of `frames` frames of n floats across a link of `capacity`
 * credits (through the copies where asked), a receiving sink that sleeps
 * sink_sleep_us a frame: every frame arrives, in order, every element
 * right, never more than the credits in flight or on the wire. The
 * sender's figures, for what each test checks besides. */
static kp_flow_remote_stats stream_across(int n, size_t capacity, uint64_t frames,
                                          long sink_sleep_us, bool copies) {
    int port, rep;
    size_t bytes = (size_t)n * sizeof(float);
    rx_opts o = {n, capacity, bytes, sink_sleep_us, 0, 20000, copies};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {.copies = copies};
    KPT_OK(sender(&t, n, frames, port, bytes, 20000));
    const double t0 = now_s();
    KPT_OK(kp_flow_start(t.flow));
    KPT_OK(kp_flow_wait(t.flow));
    const double took = now_s() - t0;
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(t.flow, 1, &rs));
    assert_int_equal(rs.frames, frames);
    assert_int_equal(rs.capacity, credits_for(rs.lane, bytes, capacity));
    assert_true(rs.max_in_flight <= rs.capacity);
    assert_true(rs.max_on_wire <= rs.capacity);
    assert_true(rs.handed <= rs.frames);
    /* one thread's waits, within the run */
    assert_true((double)rs.wait_ns * 1e-9 <= took);
    assert_int_equal(rs.ipc_wait_ns, 0); /* the receiver's figure */
    side_close(&t);
    report r = reap(pid, rep);
    if (r.st != KP_OK) print_error("receiver: %s\n", r.error);
    assert_int_equal(r.st, KP_OK);
    assert_int_equal(r.seen, frames);
    assert_true(r.ordered && r.data_ok);
    return rs;
}

/* The window filled to `credits` behind a slow receiving sink: that needs
 * a sender faster than the sink, which under compute-sanitizer (its
 * kernels slowed many times over) it is not; there the tool sets the pace
 * and the figure prints only. */
static void window_filled(const kp_flow_remote_stats *rs, uint64_t credits) {
    if (getenv("KP_TEST_NO_TIMING") && rs->max_in_flight != credits) {
        printf("at most %llu frames in flight of %llu credits (the tool sets the pace)\n",
               (unsigned long long)rs->max_in_flight, (unsigned long long)credits);
        assert_true(rs->max_in_flight >= 1 && rs->max_in_flight <= credits);
        return;
    }
    assert_int_equal(rs->max_in_flight, credits);
}

/* Frames in flight: 4 MiB frames, never more than the credits allow in
 * flight or on the wire, in order and every element right; on cpu nothing
 * is copied on either side (the frames trade buffers with the link). Then
 * a slow receiving sink, odd frames and 8 credits: the window fills to the
 * credits and no further, so frames are sent while the last are not yet
 * taken; with 512 KiB frames on one host's shared memory, to two credits.
 * (How many are on the wire at once where the receiver keeps up
 * depends on how fast the link is against the sending threads, under
 * ThreadSanitizer one: a bound only.) */
static void frames_in_flight(void **state) {
    (void)state;
    kp_flow_remote_stats rs = stream_across(1 << 20, 4, 60, 0, false);
    bool copied = strcmp(g_device, "cpu") != 0 && !rs.direct; /* cuda without UCX's CUDA */
    assert_true(rs.zero_copy == !copied);
    rs = stream_across(4097, 8, 400, 300, false);
    window_filled(&rs, 8);
    /* behind a sink that sleeps 300 us a frame the sender waits for a
     * credit most of that time, for all but the first 8 frames (half of
     * it at least, the sink's sleeps being the longer) */
    if (!getenv("KP_TEST_NO_TIMING"))
        assert_true(rs.wait_ns >= (400 - 8) * 150000ull);
    /* 512 KiB frames: on one host's shared memory the link grants two
     * credits, whatever was asked (stream_across checks the credits of
     * each lane), and behind a sink of 20 ms a frame the window fills to
     * them. (The receiving flow takes about four frames off the link
     * before it holds back, so the sender must first get that far ahead of
     * the sink: under ThreadSanitizer, on two busy cores, it writes a
     * 512 KiB frame in milliseconds, and did not get there against 300 us
     * or 5 ms. Eight credits on tcp at this size needed 12 frames ahead,
     * which it did not always reach there: the window filling to the
     * credits on every lane is the 4,097-float case's above.) */
    rs = stream_across(1 << 17, 8, 40, 20000, false);
    if (credits_for(rs.lane, 512u << 10, 8) == 2) window_filled(&rs, 2);
    /* just under: the credits asked */
    stream_across((1 << 17) - 1, 8, 24, 0, false);
}

/* Frames through the copies at both ends (pinned host slots, one more
 * than the credits): every element and the order at 1, odd and 1M floats;
 * a single credit; a slow sink fills the window to the credits and no
 * further, the spare slot notwithstanding. */
static void frames_through_copies(void **state) {
    (void)state;
    kp_flow_remote_stats rs = stream_across(1, 1, 200, 0, true);
    assert_true(rs.direct || !rs.zero_copy); /* direct: device frames trade after all */
    rs = stream_across(4097, 4, 300, 300, true);
    window_filled(&rs, 4);
    rs = stream_across(1 << 20, 4, 40, 0, true);
    assert_true(rs.direct || !rs.zero_copy);
    rs = stream_across(1 << 20, 1, 20, 0, true);
    assert_true(rs.direct || !rs.zero_copy);
}

/* A slow receiver holds the sender back: no more than its capacity in
 * flight, the sender waited for credits, and its 200 frames took as long
 * as the receiving sink's 2 ms each, less what the receiving flow holds
 * (the link's 2 and its queue's few). How many of its frames found no
 * credit depends on when the credits came in: they come while it waits
 * for a free slot too. */
static void backpressure_across_the_link(void **state) {
    (void)state;
    int port, rep;
    rx_opts o = {1000, 2, 4000, 2000, 0, 20000, 0};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {0};
    KPT_OK(sender(&t, 1000, 200, port, 4000, 20000));
    double t0 = now_s();
    KPT_OK(kp_flow_start(t.flow));
    KPT_OK(kp_flow_wait(t.flow));
    double took = now_s() - t0;
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(t.flow, 1, &rs));
    assert_int_equal(rs.frames, 200);
    assert_true(rs.max_in_flight <= 2);
    assert_true(rs.credit_waits > 0);
    if (took < 0.3) print_error("200 frames left in %.3f s\n", took);
    assert_true(took >= 0.3);
    side_close(&t);
    report r = reap(pid, rep);
    assert_int_equal(r.st, KP_OK);
    assert_int_equal(r.seen, 200);
    assert_true(r.ordered && r.data_ok);
}

/* The sender cancelled mid-stream: the receiver stops with the reason. */
static void cancel_from_the_sender(void **state) {
    (void)state;
    int port, rep;
    rx_opts o = {256, 4, 1024, 0, 0, 20000, 0};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {0};
    KPT_OK(sender(&t, 256, 0, port, 1024, 20000));
    KPT_OK(kp_flow_start(t.flow));
    kp_flow_remote_stats rs = {0};
    for (double until = now_s() + 20; rs.frames < 100 && now_s() < until; sleep_us(1000))
        KPT_OK(kp_flow_remote(t.flow, 1, &rs));
    KPT_OK(kp_flow_cancel(t.flow));
    KPT_FAILS(kp_flow_wait(t.flow), KP_ERR_STATE);
    side_close(&t);
    report r = reap(pid, rep);
    assert_int_equal(r.st, KP_ERR_STATE);
    assert_non_null(strstr(r.error, "the peer cancelled the stream"));
    assert_true(r.seen >= 90 && r.ordered && r.data_ok);
}

/* The receiver cancels its flow at frame 50: the sender stops with the
 * reason. */
static void cancel_from_the_receiver(void **state) {
    (void)state;
    int port, rep;
    rx_opts o = {256, 4, 1024, 0, 50, 20000, 0};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {0};
    KPT_OK(sender(&t, 256, 0, port, 1024, 20000));
    double t0 = now_s();
    KPT_OK(kp_flow_start(t.flow));
    KPT_FAILS(kp_flow_wait(t.flow), KP_ERR_STATE);
    assert_non_null(strstr(kp_last_error(), "the peer cancelled the stream"));
    assert_true(now_s() - t0 < 10);
    side_close(&t);
    report r = reap(pid, rep);
    assert_int_equal(r.st, KP_ERR_STATE); /* cancelled */
    assert_true(r.seen >= 50 && r.ordered && r.data_ok);
}

/* The receiving process killed mid-stream: the sender fails, naming the
 * lost peer, within seconds. */
static void receiver_killed(void **state) {
    (void)state;
    int port, rep;
    rx_opts o = {1 << 16, 4, 1 << 18, 0, 0, 20000, 0};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {0};
    KPT_OK(sender(&t, 1 << 16, 0, port, 1 << 18, 20000));
    KPT_OK(kp_flow_start(t.flow));
    kp_flow_remote_stats rs = {0};
    for (double until = now_s() + 20; rs.frames < 50 && now_s() < until; sleep_us(1000))
        KPT_OK(kp_flow_remote(t.flow, 1, &rs));
    double t0 = now_s();
    kill(pid, SIGKILL);
    KPT_FAILS(kp_flow_wait(t.flow), KP_ERR_IO);
    assert_non_null(strstr(kp_last_error(), "lost the peer"));
    double took = now_s() - t0;
    printf("sender saw the receiver gone after %.2f s\n", took);
    assert_true(took < 15);
    side_close(&t);
    close(rep);
    waitpid(pid, NULL, 0);
}

/* The sending process killed mid-stream: the receiver fails likewise. */
static void sender_killed(void **state) {
    (void)state;
    side r = {0};
    KPT_OK(side_open(&r, 1 << 16));
    kp__stage_made m;
    KPT_OK(kp__stage_remote_source(r.dev, "127.0.0.1:0", 1 << 18, 4, 20000, &m));
    KPT_OK(two_stage_flow(&r, &m, true));
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(r.flow, 0, &rs));
    assert_true(rs.receiver);
    int port = atoi(strrchr(rs.address, ':') + 1);
    assert_true(port > 0);
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    char *args[] = {"test_remote", "--tx", "65536", ports, "262144", NULL};
    pid_t pid = spawn(args);
    KPT_OK(kp_flow_start(r.flow));
    for (double until = now_s() + 20;
         __atomic_load_n(&r.seen, __ATOMIC_RELAXED) < 50 && now_s() < until; sleep_us(1000)) {
    }
    double t0 = now_s();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    KPT_FAILS(kp_flow_wait(r.flow), KP_ERR_IO);
    if (!strstr(kp_last_error(), "lost the peer")) print_error("%s\n", kp_last_error());
    assert_non_null(strstr(kp_last_error(), "lost the peer"));
    printf("receiver saw the sender gone after %.2f s\n", now_s() - t0);
    assert_true(now_s() - t0 < 15);
    assert_true(r.ordered && r.data_ok);
    side_close(&r);
}

/* Frames larger than the receiver takes are refused on both sides; nobody
 * listening, or nobody connecting, ends at the timeout. */
static void refusals_and_timeouts(void **state) {
    (void)state;
    int port, rep;
    rx_opts o = {256, 4, 1024, 0, 0, 20000, 0};
    pid_t pid = fork_receiver(&o, &port, &rep);
    side t = {0};
    KPT_OK(sender(&t, 512, 10, port, 2048, 20000));
    KPT_OK(kp_flow_start(t.flow));
    KPT_FAILS(kp_flow_wait(t.flow), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "the receiver takes frames of 1024 bytes"));
    side_close(&t);
    report r = reap(pid, rep);
    assert_int_equal(r.st, KP_ERR_INVALID_ARG);
    assert_non_null(strstr(r.error, "more than this source's frame_bytes"));

    /* no receiver: port 1 on loopback has no listener */
    side u = {0};
    KPT_OK(sender(&u, 16, 5, 1, 64, 300));
    double t0 = now_s();
    KPT_OK(kp_flow_start(u.flow));
    KPT_FAILS(kp_flow_wait(u.flow), KP_ERR_IO);
    assert_non_null(strstr(kp_last_error(), "no receiver within 300 ms"));
    assert_true(now_s() - t0 < 5);
    side_close(&u);

    side v = {0};
    KPT_OK(side_open(&v, 16));
    kp__stage_made m;
    KPT_OK(kp__stage_remote_source(v.dev, "127.0.0.1:0", 64, 2, 300, &m));
    KPT_OK(two_stage_flow(&v, &m, true));
    KPT_OK(kp_flow_start(v.flow));
    KPT_FAILS(kp_flow_wait(v.flow), KP_ERR_IO);
    assert_non_null(strstr(kp_last_error(), "no sender within 300 ms"));
    side_close(&v);
}

/* Both ends in this process, a receiving flow on a free port and a
 * sending flow that never ends; neither started. */
static void pair_open(side *rx, side *tx, int rx_timeout_ms) {
    KPT_OK(side_open(rx, 64));
    kp__stage_made m;
    KPT_OK(kp__stage_remote_source(rx->dev, "127.0.0.1:0", 256, 4, rx_timeout_ms, &m));
    KPT_OK(two_stage_flow(rx, &m, true));
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(rx->flow, 0, &rs));
    KPT_OK(sender(tx, 64, 0, atoi(strrchr(rs.address, ':') + 1), 256, 20000));
}

/* Polls until the flow has stopped or `secs` passed; whether it stopped. */
static bool stops_within(kp_flow_t f, double secs) {
    kp_flow_snapshot h;
    for (double until = now_s() + secs; now_s() < until; sleep_us(1000))
        if (kp_flow_health(f, &h) == KP_OK && !h.running) return true;
    return false;
}

/* The sender cancelled at random moments early in the stream, then waited
 * for but not destroyed: the receiver must stop promptly with the reason,
 * whatever the link was doing (connecting, saying hello, sending). A
 * sender cancelled before its sink ever ran has not met the receiver, which
 * is then still waiting for one; that round is counted, not judged. */
static void sender_cancelled_early_stress(void **state) {
    (void)state;
    uint64_t seed = 0x5eed;
    int judged = 0;
    for (int round = 0; round < 40; round++) {
        side rx = {0}, tx = {0};
        pair_open(&rx, &tx, 0);
        KPT_OK(kp_flow_start(rx.flow));
        KPT_OK(kp_flow_start(tx.flow));
        sleep_us((long)(kpt_rand(&seed) % 45000));
        kp_flow_snapshot h;
        KPT_OK(kp_flow_cancel(tx.flow));
        KPT_OK(kp_flow_health(tx.flow, &h));
        bool met = h.stages[1].in > 0; /* the sink ran: it has connected */
        KPT_FAILS(kp_flow_wait(tx.flow), KP_ERR_STATE);
        double t0 = now_s();
        bool stopped = stops_within(rx.flow, 10);
        if (met && !stopped) print_error("round %d: the receiver still waits\n", round);
        if (met) {
            judged++;
            assert_true(stopped);
            kp_status st = kp_flow_wait(rx.flow);
            if (st != KP_ERR_STATE || !strstr(kp_last_error(), "cancel"))
                print_error("round %d: %s: %s\n", round, kp_status_name(st), kp_last_error());
            assert_int_equal(st, KP_ERR_STATE);
            assert_non_null(strstr(kp_last_error(), "cancel"));
            assert_true(now_s() - t0 < 5);
        }
        assert_true(rx.ordered && rx.data_ok);
        side_close(&tx);
        side_close(&rx);
    }
    printf("sender cancelled early: %d of 40 rounds had met the receiver\n", judged);
    assert_true(judged >= 20);
}

/* The receiver cancelled within milliseconds of both starting: the sender
 * stops promptly with KP_ERR_STATE, not at its 20 s connect timeout. */
static void receiver_cancelled_early_stress(void **state) {
    (void)state;
    uint64_t seed = 0xcafe;
    for (int round = 0; round < 30; round++) {
        side rx = {0}, tx = {0};
        pair_open(&rx, &tx, 0);
        KPT_OK(kp_flow_start(tx.flow));
        KPT_OK(kp_flow_start(rx.flow));
        sleep_us((long)(kpt_rand(&seed) % 8000));
        KPT_OK(kp_flow_cancel(rx.flow));
        double t0 = now_s();
        KPT_FAILS(kp_flow_wait(rx.flow), KP_ERR_STATE);
        bool stopped = stops_within(tx.flow, 5);
        if (!stopped) print_error("round %d: the sender still waits\n", round);
        assert_true(stopped);
        kp_status st = kp_flow_wait(tx.flow);
        if (st != KP_ERR_STATE)
            print_error("round %d: %s: %s\n", round, kp_status_name(st), kp_last_error());
        assert_int_equal(st, KP_ERR_STATE);
        assert_non_null(strstr(kp_last_error(), "cancel"));
        assert_true(now_s() - t0 < 5);
        side_close(&tx);
        side_close(&rx);
    }
}

/* The C form: the two ends where they cannot go. */
static void c_form_misuse(void **state) {
    (void)state;
    side t = {0};
    KPT_OK(side_open(&t, 16));
    kp_flow_stage rx, tx;
    KPT_OK(kp_flow_remote_source(t.dev, "127.0.0.1:0", 64, 2, 200, &rx));
    KPT_OK(kp_flow_remote_sink(t.dev, "127.0.0.1:9", 64, 200, &tx));
    assert_non_null(rx.free_fn);
    assert_true(rx.dev == t.dev);
    /* a sink first, a source second: each fails its stage, by name */
    kp_flow_stage st[2] = {tx, rx};
    st[1].queue_capacity = 2;
    st[0].name = "sink_first";
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = t.dev;
    cfg.stages = st;
    cfg.n_stages = 2;
    cfg.frame_bytes = 64;
    kp_flow_t f;
    KPT_OK(kp_flow_create(&cfg, &f)); /* the flow owns both now */
    KPT_OK(kp_flow_start(f));
    KPT_FAILS(kp_flow_wait(f), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "cannot be a flow's first stage"));
    kp_flow_destroy(f);
    /* replicas of a remote end: refused, and its state freed */
    KPT_OK(kp_flow_remote_sink(t.dev, "127.0.0.1:9", 64, 200, &tx));
    kp_device_t two[2] = {t.dev, t.dev};
    kp_flow_stage gen_tx[2] = {{.name = "gen", .fn = gen, .user = &t}, tx};
    gen_tx[1].replicas = two;
    gen_tx[1].n_replicas = 2;
    cfg.stages = gen_tx;
    KPT_FAILS(kp_flow_create(&cfg, &f), KP_ERR_INVALID_ARG);
    assert_non_null(strstr(kp_last_error(), "no replicas"));
    assert_null(f);
    side_close(&t);
}

/* The JSON form: what is refused, by name. */
static void json_errors(void **state) {
    (void)state;
    kp_device_t dev;
    KPT_OK(kp_device_open(g_device, &dev));
    static const struct {
        const char *stage, *want;
    } bad[] = {
        {"\"source\": \"remote\", \"frame_bytes\": 64", "listen: expected \"HOST:PORT\""},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1\", \"frame_bytes\": 64", "HOST:PORT"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:99999\", \"frame_bytes\": 64",
         "0 to 65535"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:x\", \"frame_bytes\": 64",
         "not a number"},
        {"\"source\": \"remote\", \"listen\": \"no.such.host.invalid:0\", \"frame_bytes\": 64",
         "cannot resolve"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:0\"", "frame_bytes"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:0\", \"frame_bytes\": 64, "
         "\"capacity\": 0",
         "capacity"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:0\", \"frame_bytes\": 64, "
         "\"timeout_ms\": -1",
         "timeout_ms"},
        {"\"source\": \"remote\", \"listen\": \"127.0.0.1:0\", \"frame_bytes\": 64, "
         "\"frames\": 3",
         "takes no \"frames\""},
        {"\"source\": \"synthetic\", \"frames\": 3, \"shape\": [4], \"listen\": \"a:1\"",
         "takes no \"listen\""},
    };
    char json[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"rx\", %s},"
                 "{\"name\": \"out\", \"sink\": \"null\"}]}",
                 bad[i].stage);
        kp_flow_t f = (kp_flow_t)0x1;
        kp_status st = kp_flow_create_from_json(dev, json, &f);
        if (st == KP_OK || !strstr(kp_last_error(), bad[i].want))
            print_error("%s: %s (%s)\n", bad[i].stage, kp_status_name(st), kp_last_error());
        assert_int_not_equal(st, KP_OK);
        assert_non_null(strstr(kp_last_error(), bad[i].want));
        assert_null(f);
        kp_flow_destroy(f == (kp_flow_t)0x1 ? NULL : f);
    }
    const char *sinks[][2] = {
        {"\"sink\": \"remote\"", "connect: expected"},
        {"\"sink\": \"remote\", \"connect\": \"127.0.0.1:0\"", "connects to a port, not 0"},
        {"\"sink\": \"remote\", \"connect\": \"127.0.0.1:9\", \"path\": \"x\"",
         "takes no \"path\""},
        {"\"sink\": \"null\", \"connect\": \"127.0.0.1:9\"", "takes no \"connect\""},
    };
    for (size_t i = 0; i < sizeof sinks / sizeof sinks[0]; i++) {
        snprintf(json, sizeof json,
                 "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"src\", \"source\": "
                 "\"synthetic\", \"frames\": 3, \"shape\": [4]}, {\"name\": \"out\", %s}]}",
                 sinks[i][0]);
        kp_flow_t f;
        assert_int_not_equal(kp_flow_create_from_json(dev, json, &f), KP_OK);
        if (!strstr(kp_last_error(), sinks[i][1])) print_error("%s\n", kp_last_error());
        assert_non_null(strstr(kp_last_error(), sinks[i][1]));
    }
    /* a good one: the listener is up at creation, with the port it got */
    kp_flow_t f;
    KPT_OK(kp_flow_create_from_json(
        dev,
        "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"rx\", \"source\": \"remote\", "
        "\"listen\": \"127.0.0.1:0\", \"frame_bytes\": 64}, {\"name\": \"out\", \"sink\": "
        "\"null\"}]}",
        &f));
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(f, 0, &rs));
    assert_true(rs.receiver);
    assert_int_equal(rs.capacity, 4);
    assert_true(atoi(strrchr(rs.address, ':') + 1) > 0);
    KPT_FAILS(kp_flow_remote(f, 1, &rs), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_remote(f, 7, &rs), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_remote(NULL, 0, &rs), KP_ERR_INVALID_ARG);
    KPT_FAILS(kp_flow_remote(f, 0, NULL), KP_ERR_INVALID_ARG);
    kp_flow_destroy(f);
    kp_device_close(dev);
}

/* A stranger peer: a raw UCX client of its own, speaking the wire
 * (remote-impl.h) wrongly. It connects to a receiving flow, says hello
 * (hello: its bytes, as they go) and, where the receiver welcomes it,
 * sends one frame message: the tag's type and value and its bytes. */
typedef struct stranger {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h ep;
} stranger;

static void stranger_progress(stranger *x, void *req) {
    for (double until = now_s() + 5;
         req && ucp_request_check_status(req) == UCS_INPROGRESS && now_s() < until;)
        ucp_worker_progress(x->worker);
    if (req && !UCS_PTR_IS_ERR(req)) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(x->worker, req);
        ucp_request_free(req);
    }
}

static void stranger_lost(void *arg, ucp_ep_h ep, ucs_status_t status) {
    (void)arg, (void)ep, (void)status; /* the receiver closed on it: expected */
}

/* Takes in what the receiver said that the stranger did not ask for (its
 * cancel, credits), so that UCX has nothing left over at the end. */
static void stranger_drain(stranger *x) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    for (int i = 0; i < 1000; i++) ucp_worker_progress(x->worker);
    while ((msg = ucp_tag_probe_nb(x->worker, 0, 0, 1, &info))) {
        char *buf = malloc(info.length ? info.length : 1);
        ucp_request_param_t p = {0};
        stranger_progress(x, ucp_tag_msg_recv_nbx(x->worker, buf, info.length, msg, &p));
        free(buf);
    }
}

static void stranger_send(stranger *x, const void *buf, size_t len, ucp_tag_t tag) {
    ucp_request_param_t p = {0};
    stranger_progress(x, ucp_tag_send_nbx(x->ep, buf, len, tag, &p));
}

/* Runs a receiving flow of 64-float frames, capacity 4, and the stranger
 * against it; the flow's status and detail. */
static kp_status stranger_meets(const void *hello, size_t hello_len, int frame_type,
                                uint64_t frame_seq, const void *frame, size_t frame_len,
                                char *detail, size_t detail_len) {
    side rx = {0};
    kp__stage_made m;
    KPT_OK(side_open(&rx, 64));
    KPT_OK(kp__stage_remote_source(rx.dev, "127.0.0.1:0", 256, 4, 5000, &m));
    KPT_OK(two_stage_flow(&rx, &m, true));
    kp_flow_remote_stats rs;
    KPT_OK(kp_flow_remote(rx.flow, 0, &rs));
    KPT_OK(kp_flow_start(rx.flow));
    stranger x = {0};
    ucp_params_t up = {0};
    up.field_mask = UCP_PARAM_FIELD_FEATURES;
    up.features = UCP_FEATURE_TAG;
    assert_int_equal(ucp_init(&up, NULL, &x.ctx), UCS_OK);
    ucp_worker_params_t wp = {0};
    assert_int_equal(ucp_worker_create(x.ctx, &wp, &x.worker), UCS_OK);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(strrchr(rs.address, ':') + 1));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ucp_ep_params_t ep = {0};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = stranger_lost;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.sockaddr.addr = (const struct sockaddr *)&sa;
    ep.sockaddr.addrlen = sizeof sa;
    assert_int_equal(ucp_ep_create(x.worker, &ep, &x.ep), UCS_OK);
    struct {
        kp__welcome w;
        unsigned char addr[KP__ADDR_MAX]; /* the receiver's, where the hello gave one */
    } wm = {0};
    kp__welcome w = {0};
    ucp_request_param_t rp = {0};
    void *wreq = ucp_tag_recv_nbx(x.worker, &wm, sizeof wm, KP__TAG(KP__T_WELCOME, 0),
                                  KP__TYPE_MASK, &rp);
    stranger_send(&x, hello, hello_len, KP__TAG(KP__T_HELLO, 0));
    stranger_progress(&x, wreq); /* welcomed, refused, or nothing within 5 s */
    w = wm.w;
    if (frame && w.magic == KP__MAGIC && !w.refused)
        stranger_send(&x, frame, frame_len, KP__TAG(frame_type, frame_seq));
    bool stopped = false;
    for (double until = now_s() + 10; !stopped && now_s() < until;) {
        ucp_worker_progress(x.worker);
        kp_flow_snapshot h;
        stopped = kp_flow_health(rx.flow, &h) == KP_OK && !h.running;
    }
    assert_true(stopped);
    kp_status st = kp_flow_wait(rx.flow);
    snprintf(detail, detail_len, "%s", kp_last_error());
    ucp_request_param_t cp = {0};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    stranger_progress(&x, ucp_ep_close_nbx(x.ep, &cp));
    stranger_drain(&x);
    ucp_worker_destroy(x.worker);
    ucp_cleanup(x.ctx);
    side_close(&rx);
    return st;
}

/* A wrong hello (short, another magic, another wire version) and, after
 * a right one, malformed frames (frames of 64 floats pack: one message
 * of header and bytes): shorter than a header, a header with the wrong
 * sequence number, bytes that disagree with the header, more bytes than
 * the frame holds. Each fails the receiving flow with its reason; none
 * crashes it or hangs it. */
static void stranger_peers(void **state) {
    (void)state;
    char d[400];
    kp__hello good = {.magic = KP__MAGIC, .version = KP__VERSION, .frame_bytes = 256};
    kp__hello old = {.magic = KP__MAGIC, .version = KP__VERSION - 1, .frame_bytes = 256};
    kp__hello alien = {.magic = 0x12345678u, .version = KP__VERSION, .frame_bytes = 256};
    assert_int_equal(stranger_meets(&good, 3, 0, 0, NULL, 0, d, sizeof d), KP_ERR_PARSE);
    assert_non_null(strstr(d, "not a kpipe remote sink"));
    assert_int_equal(stranger_meets(&alien, sizeof alien, 0, 0, NULL, 0, d, sizeof d),
                     KP_ERR_PARSE);
    assert_non_null(strstr(d, "not a kpipe remote sink"));
    assert_int_equal(stranger_meets(&old, sizeof old, 0, 0, NULL, 0, d, sizeof d),
                     KP_ERR_UNSUPPORTED);
    assert_non_null(strstr(d, "version"));
    struct {
        kp__wire w;
        float x[65];
    } f = {0};
    f.w.bytes = 64 * sizeof(float);
    f.w.dtype = KP_F32;
    /* shorter than a header */
    assert_int_equal(stranger_meets(&good, sizeof good, KP__T_DATA, 0, &f, 10, d, sizeof d),
                     KP_ERR_PARSE);
    assert_non_null(strstr(d, "malformed header"));
    /* frame 0 saying it is frame 7 */
    f.w.seq = 7;
    assert_int_equal(
        stranger_meets(&good, sizeof good, KP__T_DATA, 0, &f, sizeof f.w + f.w.bytes, d, sizeof d),
        KP_ERR_PARSE);
    assert_non_null(strstr(d, "malformed header"));
    /* 256 bytes said, 100 sent */
    f.w.seq = 0;
    assert_int_equal(
        stranger_meets(&good, sizeof good, KP__T_DATA, 0, &f, sizeof f.w + 100, d, sizeof d),
        KP_ERR_PARSE);
    assert_non_null(strstr(d, "malformed header"));
    /* a hello from this host naming a worker address that is not there, or
     * is garbage in a file others may write, or behind a link: the receiver
     * reads none of it (UCX aborts on a malformed address), takes no lane
     * and goes on to the frame; a hello longer than a hello is refused */
    kp__hello here = good;
    kp__lane_host(here.host);
    here.lane_pid = 1; /* init's: never one of ours */
    /* this process's own names: ctest runs test_remote twice at once */
    const uint64_t nonce_file = 0x10000000000ULL + 2 * (uint64_t)getpid(),
                   nonce_link = nonce_file + 1;
    here.lane_nonce = nonce_file;
    char dir[160], path[224], link_path[224];
    const char *run = getenv("XDG_RUNTIME_DIR");
    if (run && *run)
        snprintf(dir, sizeof dir, "%s/kpipe", run);
    else
        snprintf(dir, sizeof dir, "/dev/shm/kpipe-%u", (unsigned)getuid());
    (void)mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/1-%016llx.addr", dir, (unsigned long long)nonce_file);
    snprintf(link_path, sizeof link_path, "%s/1-%016llx.addr", dir,
             (unsigned long long)nonce_link);
    unlink(link_path); /* an earlier run's, killed midway */
    f.w.seq = 7; /* a malformed frame: the flow got that far */
    f.w.bytes = 64 * sizeof(float);
    for (int k = 0; k < 3; k++) {
        if (k == 1) { /* garbage, but others may write it */
            FILE *g = fopen(path, "wb");
            assert_non_null(g);
            fputs("garbage, not a UCX worker address", g);
            fclose(g);
            assert_int_equal(chmod(path, 0666), 0);
        }
        if (k == 2) { /* a link to it, made private */
            assert_int_equal(chmod(path, 0600), 0);
            assert_int_equal(symlink(path, link_path), 0);
            here.lane_nonce = nonce_link;
        }
        assert_int_equal(stranger_meets(&here, sizeof here, KP__T_DATA, 0, &f,
                                        sizeof f.w + f.w.bytes, d, sizeof d),
                         KP_ERR_PARSE);
        assert_non_null(strstr(d, "malformed header"));
    }
    unlink(link_path);
    unlink(path);
    struct {
        kp__hello h;
        char more[10];
    } longer = {.h = good};
    assert_int_equal(stranger_meets(&longer, sizeof longer, 0, 0, NULL, 0, d, sizeof d),
                     KP_ERR_PARSE);
    assert_non_null(strstr(d, "a hello of"));
    f.w.seq = 0;
    /* more than the receiver's frames hold: UCX truncates it */
    f.w.bytes = sizeof f.x;
    assert_int_equal(stranger_meets(&good, sizeof good, KP__T_DATA, 0, &f, sizeof f, d, sizeof d),
                     KP_ERR_PARSE);
    assert_non_null(strstr(d, "larger than"));
}

/* The alarm: says so on stderr, then ends the process (its peers go with
 * it, PR_SET_PDEATHSIG). cmocka has said which test runs. */
static void hung(int sig) {
    (void)sig;
    static const char msg[] = "test_remote: a test hung for 300 s (the last [ RUN ] above)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

int main(int argc, char **argv) {
    /* a child runs on its parent's backend */
    const char *env = getenv("KPT_REMOTE_DEVICE");
    if (env) g_device = env;
    if (argc == 11 && strcmp(argv[1], "--rx") == 0) {
        rx_opts o = {atoi(argv[2]), (size_t)atol(argv[3]),    (size_t)atol(argv[4]),
                     atol(argv[5]), (uint64_t)atoll(argv[6]), atoi(argv[7]),
                     atoi(argv[10])};
        return run_receiver(&o, atoi(argv[8]), atoi(argv[9]));
    }
    if (argc == 5 && strcmp(argv[1], "--tx") == 0)
        return run_sender(atoi(argv[2]), atoi(argv[3]), (size_t)atol(argv[4]));
    if (argc > 1) g_device = argv[1];
    if (argc > 2) cmocka_set_test_filter(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0); /* a hang's last [ RUN ] is in the log */
    kp_device_t probe;
    kp_status ps = kp_device_open(g_device, &probe);
    if (ps == KP_ERR_NO_DEVICE) {
        printf("SKIP: remote queues on %s: %s\n", g_device, kp_last_error());
        return 77;
    }
    if (ps != KP_OK) return 1;
    kp_device_close(probe);
    setenv("KPT_REMOTE_DEVICE", g_device, 1);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGALRM, hung);
    alarm(300); /* a hang fails the test (in 25 s on an H200) rather than the run */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(order_and_every_element),
        cmocka_unit_test(frames_in_flight),
        cmocka_unit_test(frames_through_copies),
        cmocka_unit_test(backpressure_across_the_link),
        cmocka_unit_test(cancel_from_the_sender),
        cmocka_unit_test(cancel_from_the_receiver),
        cmocka_unit_test(receiver_killed),
        cmocka_unit_test(sender_killed),
        cmocka_unit_test(refusals_and_timeouts),
        cmocka_unit_test(json_errors),
        cmocka_unit_test(c_form_misuse),
        cmocka_unit_test(sender_cancelled_early_stress),
        cmocka_unit_test(receiver_cancelled_early_stress),
        cmocka_unit_test(stranger_peers),
    };
    return cmocka_run_group_tests_name(g_device, tests, NULL, NULL) ? 1 : 0;
}
