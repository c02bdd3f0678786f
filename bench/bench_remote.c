/* A remote queue over loopback against an in-process queue.
 *
 *   bench_remote DEVICE[,RX_DEVICE] [KIB] [FRAMES] [FPS] [CAPACITY]
 *
 * Without FPS the source sends as fast as the queues let it: frames/s is
 * the throughput, and a frame's latency includes its wait in the full
 * queues (about their depth times the frame period). With FPS the source
 * sends at that rate, below what either queue sustains: the latency is
 * the hand-over's own.
 *
 * RX_DEVICE, where given, is the receiving process's device (cuda:1: two
 * processes on two GPUs); the sender's is DEVICE, and the in-process run's.
 * CAPACITY (4 unless given; FPS 0 is as fast as they go) is the remote
 * source's: the frames in flight on the link, the credits. A link moves
 * at most CAPACITY frames per round trip, so over a slow hop it is
 * CAPACITY, not the transport, that sets the pace until CAPACITY frames
 * cover the bandwidth times the round trip (on loopback 4 already do:
 * bench/RESULTS.md, "Remote queues").
 *
 * Both runs send FRAMES frames of KIB KiB from a source to a sink that
 * only counts them, with a queue of 4 between them: in one process, then
 * through a remote queue to a second process (this program again, started
 * with --rx). Each frame carries the time it was made (CLOCK_MONOTONIC,
 * one clock for both processes); the sink takes its latency. Prints
 * frames/s, bytes/s and the p50 and p99 latency of both, and memcpy's
 * bandwidth on this host as the floor for the bytes; on a GPU, also what
 * the staged copies of one frame cost alone (device to pinned host and
 * back), the part of a frame's path that is not the wire. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-check.h"

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

typedef struct run {
    uint64_t period_ns, t0_ns; /* a paced source: frame s leaves at t0 + s * period */
    uint64_t frames, seen;
    size_t bytes;
    uint64_t first_ns, last_ns;
    uint64_t *lat_ns;
} run;

static kp_status source(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    run *r = user;
    if (f->seq == r->frames) {
        *eos = true;
        return KP_OK;
    }
    f->bytes = r->bytes;
    if (r->period_ns) {
        if (f->seq == 0) r->t0_ns = now_ns();
        uint64_t at = r->t0_ns + f->seq * r->period_ns;
        while (now_ns() < at) {
        }
    }
    f->user[1] = (int64_t)now_ns();
    return KP_OK;
}

static kp_status sink(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    run *r = user;
    KK(kp_stream_sync(c->stream)); /* the frame's bytes have landed */
    uint64_t t = now_ns();
    if (!r->seen) r->first_ns = t;
    r->last_ns = t;
    if (r->seen < r->frames) r->lat_ns[r->seen] = t - (uint64_t)f->user[1];
    r->seen++;
    return KP_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, run *r) {
    qsort(r->lat_ns, r->seen, sizeof *r->lat_ns, cmp_u64);
    double secs = (double)(r->last_ns - r->first_ns) * 1e-9;
    double fps = secs > 0 ? (double)(r->seen - 1) / secs : 0;
    printf("  %-22s %10.1f frames/s %9.2f GB/s   latency p50 %9.1f us  p99 %9.1f us\n", what, fps,
           fps * (double)r->bytes * 1e-9, r->lat_ns[(r->seen - 1) / 2] * 1e-3,
           r->lat_ns[(size_t)((double)(r->seen - 1) * 0.99)] * 1e-3);
}

static kp_flow_t make(kp_device_t dev, kp_flow_stage *st, size_t frame_bytes) {
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = dev;
    cfg.stages = st;
    cfg.n_stages = 2;
    cfg.frame_bytes = frame_bytes;
    kp_flow_t f;
    KK(kp_flow_create(&cfg, &f));
    return f;
}

/* Runs the flow; with `what`, prints each stage's host time per frame
 * (sampled, recent frames): a remote end's includes its waits, for credit
 * on the sending side, for the next frame on the receiving one, so it
 * tells which side the other waits for. */
static void run_flow(kp_flow_t f, const char *what, int remote_stage) {
    KK(kp_flow_start(f));
    KK(kp_flow_wait(f));
    kp_flow_remote_stats rs;
    const char *how = NULL;
    if (remote_stage >= 0 && kp_flow_remote(f, (size_t)remote_stage, &rs) == KP_OK)
        how = rs.zero_copy                      ? "zero copy"
              : strstr(rs.lane, "CUDA IPC") != NULL ? "device to device"
                                                    : "through pinned host slots";
    if (how) printf("  %-22s lane: %s\n", what, rs.lane);
    const double per = how && rs.frames ? 1e-3 / (double)rs.frames : 0;
    if (how && rs.receiver) /* the credit and wire figures are the sender's */
        printf("  %-22s link: %s; waited %.1f us a frame for the next, %.1f for the sender's "
               "copy\n",
               what, how, (double)rs.wait_ns * per, (double)rs.ipc_wait_ns * per);
    else if (how)
        printf("  %-22s link: %llu of %llu frames waited for credit, at most %llu in flight, "
               "%llu on the wire, %llu posted by its progress thread, %s; waited %.1f us a frame "
               "for a slot and credit\n",
               what, (unsigned long long)rs.credit_waits, (unsigned long long)rs.frames,
               (unsigned long long)rs.max_in_flight, (unsigned long long)rs.max_on_wire,
               (unsigned long long)rs.handed, how, (double)rs.wait_ns * per);
    kp_flow_snapshot h;
    if (what && kp_flow_health(f, &h) == KP_OK) {
        printf("  %-22s stage host us p50/p99:", what);
        for (size_t i = 0; i < h.n_stages; i++)
            printf(" %s %.1f/%.1f", h.stages[i].name, h.stages[i].host_p50_us,
                   h.stages[i].host_p99_us);
        printf("\n");
    }
    kp_flow_destroy(f);
}

/* The receiving process: a remote source on a free port (written to fd),
 * the timing sink; prints its line. */
static int receiver(kp_device_t dev, run *r, int fd, size_t capacity) {
    kp_flow_stage st[2];
    KK(kp_flow_remote_source(dev, "127.0.0.1:0", r->bytes, capacity, 30000, &st[0]));
    st[1] = (kp_flow_stage){.name = "sink", .fn = sink, .user = r, .queue_capacity = 4};
    kp_flow_t f = make(dev, st, r->bytes);
    kp_flow_remote_stats rs;
    KK(kp_flow_remote(f, 0, &rs));
    int port = atoi(strrchr(rs.address, ':') + 1);
    if (write(fd, &port, sizeof port) != sizeof port) return 1;
    close(fd);
    run_flow(f, "receiving process,", 0);
    report("remote queue, loopback", r);
    return 0;
}

#ifdef BENCH_PEER_FLOOR
#include <cuda_runtime_api.h>
/* The floor of device frames between two processes' GPUs: the same bytes
 * copied by cudaMemcpyPeerAsync within one process, back to back (then
 * synchronized), from the sending device to the receiving one, peer
 * access on. */
static void peer_floor(const char *tx, const char *rx, size_t bytes, uint64_t frames) {
    int a = strchr(tx, ':') ? atoi(strchr(tx, ':') + 1) : 0;
    int b = strchr(rx, ':') ? atoi(strchr(rx, ':') + 1) : 0;
    void *src = NULL, *dst = NULL;
    cudaStream_t s;
    if (cudaSetDevice(b) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) return;
    if (cudaSetDevice(a) != cudaSuccess || cudaMalloc(&src, bytes) != cudaSuccess) return;
    if (a != b) (void)cudaDeviceEnablePeerAccess(b, 0);
    (void)cudaGetLastError();
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return;
    uint64_t n = frames < 2000 ? frames : 2000;
    for (int k = 0; k < 10; k++) (void)cudaMemcpyPeerAsync(dst, b, src, a, bytes, s);
    (void)cudaStreamSynchronize(s);
    uint64_t t0 = now_ns();
    for (uint64_t k = 0; k < n; k++) (void)cudaMemcpyPeerAsync(dst, b, src, a, bytes, s);
    cudaError_t e = cudaStreamSynchronize(s);
    double gbs = (double)bytes * (double)n / ((double)(now_ns() - t0) * 1e-9) * 1e-9;
    if (e == cudaSuccess)
        printf("  %-22s %10s %19.2f GB/s (cuda:%d to cuda:%d, back to back)\n",
               "cudaMemcpyPeerAsync", "", gbs, a, b);
    cudaStreamDestroy(s);
    cudaFree(src);
    (void)cudaSetDevice(b);
    cudaFree(dst);
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_remote DEVICE[,RX_DEVICE] [KIB] [FRAMES] [FPS] [CAPACITY]\n");
        return 2;
    }
    char device[64], rx_device[64];
    snprintf(device, sizeof device, "%s", argv[1]);
    char *comma = strchr(device, ',');
    if (comma) *comma = '\0';
    snprintf(rx_device, sizeof rx_device, "%s", comma ? comma + 1 : device);
    size_t kib = argc > 2 ? (size_t)atol(argv[2]) : 64;
    uint64_t frames = argc > 3 ? (uint64_t)atol(argv[3]) : 2000;
    bool rx = argc == 7 && strcmp(argv[4], "--rx") == 0; /* DEVICE KIB FRAMES --rx FD CAPACITY */
    double fps_target = argc > 4 && !rx ? atof(argv[4]) : 0;
    long capacity = rx ? atol(argv[6]) : argc > 5 ? atol(argv[5]) : 4;
    if (capacity < 1 || capacity > 1024) {
        fprintf(stderr, "bench_remote: a capacity of 1 .. 1024\n");
        return 2;
    }
    size_t bytes = kib << 10;
    kp_device_t dev;
    KK(kp_device_open(device, &dev));
    run r = {.period_ns = fps_target > 0 ? (uint64_t)(1e9 / fps_target) : 0,
             .frames = frames,
             .bytes = bytes,
             .lat_ns = calloc(frames, sizeof(uint64_t))};
    if (rx) {
        int rc = receiver(dev, &r, atoi(argv[5]), (size_t)capacity);
        kp_device_close(dev);
        return rc;
    }
    printf("%llu frames of %zu KiB on %s (received on %s), a queue of 4, %ld on the link, %s:\n",
           (unsigned long long)frames, kib, device, rx_device, capacity,
           fps_target > 0 ? "paced" : "as fast as they go");
    if (fps_target > 0) printf("  (the source sends %.0f frames/s)\n", fps_target);
    /* the floor: memcpy of a frame on this host */
    char *a = malloc(bytes), *b = malloc(bytes);
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    uint64_t t0 = now_ns();
    for (uint64_t k = 0; k < frames; k++) {
        a[k % bytes]++;
        memcpy(b, a, bytes);
    }
    double mc = (double)bytes * (double)frames / ((double)(now_ns() - t0) * 1e-9) * 1e-9;
    printf("  %-22s %10s %19.2f GB/s (b[0] %d)\n", "memcpy, one frame", "", mc, b[0]);
    free(a);
    free(b);
    /* and through 16 frames' buffers in turn at each end, about what the
     * two flows of a link cycle through (the queue's, the link's, the
     * spare ones): past the host's last-level cache where frames are
     * large, where one buffer each way stays in it */
    enum { RING = 16 };
    char *ra[RING] = {0}, *rb[RING] = {0};
    bool ring_ok = true;
    for (int k = 0; k < RING; k++) {
        ra[k] = malloc(bytes);
        rb[k] = malloc(bytes);
        ring_ok = ring_ok && ra[k] && rb[k];
        if (ra[k]) memset(ra[k], 1, bytes);
        if (rb[k]) memset(rb[k], 2, bytes);
    }
    if (ring_ok) {
        t0 = now_ns();
        for (uint64_t k = 0; k < frames; k++) {
            ra[k % RING][k % bytes]++;
            memcpy(rb[k % RING], ra[k % RING], bytes);
        }
        mc = (double)bytes * (double)frames / ((double)(now_ns() - t0) * 1e-9) * 1e-9;
        printf("  %-22s %10s %19.2f GB/s (b[0] %d)\n", "memcpy, 16 frames in turn", "", mc,
               rb[0][0]);
    }
    for (int k = 0; k < RING; k++) {
        free(ra[k]);
        free(rb[k]);
    }
    /* the staged copies alone, where frames are not host memory: what a
     * remote end without direct device transfers pays per frame, device
     * to pinned host on the sending side and back on the receiving one,
     * each on its own stream in its own process, beside the wire */
    if (strcmp(kp_device_backend(dev), "cpu") != 0) {
        void *d = NULL, *h = NULL;
        kp_stream_t s;
        KK(kp_malloc(dev, bytes, &d));
        KK(kp_malloc_host(dev, bytes, &h));
        KK(kp_stream_create(dev, &s));
        uint64_t n = frames < 200 ? frames : 200;
        double gbs[2];
        for (int way = 0; way < 2; way++) {
            KK(kp_memcpy_async(s, way ? d : h, way ? h : d, bytes)); /* warm */
            KK(kp_stream_sync(s));
            uint64_t c0 = now_ns();
            for (uint64_t k = 0; k < n; k++) { /* one frame at a time, as a remote end copies */
                KK(kp_memcpy_async(s, way ? d : h, way ? h : d, bytes));
                KK(kp_stream_sync(s));
            }
            gbs[way] = (double)bytes * (double)n / ((double)(now_ns() - c0) * 1e-9) * 1e-9;
        }
        printf("  %-22s %10s %19.2f GB/s to pinned host, %.2f GB/s back (%.1f + %.1f us a frame)\n",
               "staged copy, one frame", "", gbs[0], gbs[1], (double)bytes / (gbs[0] * 1e3),
               (double)bytes / (gbs[1] * 1e3));
        kp_stream_destroy(s);
        kp_free_host(dev, h);
        kp_free(dev, d);
#ifdef BENCH_PEER_FLOOR
        if (strncmp(device, "cuda", 4) == 0 && strncmp(rx_device, "cuda", 4) == 0)
            peer_floor(device, rx_device, bytes, frames);
#endif
    }
    /* in one process */
    kp_flow_stage st[2] = {{.name = "source", .fn = source, .user = &r},
                           {.name = "sink", .fn = sink, .user = &r, .queue_capacity = 4}};
    run_flow(make(dev, st, bytes), NULL, -1);
    report("in-process queue", &r);
    r.seen = 0;
    /* across two: this program again as the receiver */
    int pp[2];
    if (pipe(pp) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pp[0]);
        char fd[16];
        char cap[16];
        snprintf(fd, sizeof fd, "%d", pp[1]);
        snprintf(cap, sizeof cap, "%ld", capacity);
        execl("/proc/self/exe", argv[0], rx_device, argc > 2 ? argv[2] : "64",
              argc > 3 ? argv[3] : "2000", "--rx", fd, cap, (char *)NULL);
        _exit(127);
    }
    close(pp[1]);
    int port = 0;
    if (read(pp[0], &port, sizeof port) != sizeof port) return 1;
    close(pp[0]);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    kp_flow_stage tx[2] = {{.name = "source", .fn = source, .user = &r}};
    KK(kp_flow_remote_sink(dev, addr, bytes, 30000, &tx[1]));
    fflush(stdout);
    run_flow(make(dev, tx, bytes), "sending process,", 1);
    int ws = 0;
    waitpid(pid, &ws, 0);
    kp_device_close(dev);
    free(r.lat_ns);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}
