// A kpipe flow against oneTBB's parallel_pipeline over the same four GPU
// stages (flow_work.h: pinned H2D copy, preprocess kernel, cuBLAS GEMM, D2H
// copy) and a consumer that waits for each result on the host, in one run,
// for k x k float frames:
//   (a) saturated frames/s, kpipe / TBB;
//   (c) p50 and p99 frame latency (source to host result) at 50% load,
//       from a source paced at half the lower saturated rate of the two;
//   (d) saturated frames/s against the slowest stage run alone;
//   (e) micro-batching of the GEMM stage (up to 8 frames, 100 us deadline,
//       one batched GEMM) against batch 1: frames/s and p99 latency;
//   the flow with carrying off (carry_us -1) against the default, saturated
//   and at 50% load; the device chain's latency alone, on one stream and on
//   a stream per stage with events between (what the flow's hops cost);
//   and the driver allocations after warm-up (kpipe's pool counters).
// TBB runs one token per frame in flight with a CUDA stream per token; the
// flow has a thread and a stream per stage, queues of capacity 4 (21 frames
// in flight at most; TBB gets 21 tokens). In both the D2H copy is enqueued
// by one stage and waited for by the next, so the copy engine is never idle
// while a host thread wakes up.
//   bench_flow_gpu [FRAMES] [K...]
#include <oneapi/tbb/parallel_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include <cuda_runtime.h>

#include "flow_work.h"
#include "kpipe/kpipe.h"

namespace {

constexpr int kRing = 64;   // host matrices; more than the frames in flight
constexpr int kTokens = 21; // TBB tokens = the flow's frame limit (5 stages + 4 x 4)

struct Run {
    double fps = 0, p50 = 0, p99 = 0;
};

struct Bench {
    fw_ctx *w = nullptr;
    long frames = 0;
    double period_us = 0; // pacing; 0: as fast as possible
    double t0 = 0;
    std::vector<double> start, lat;
};

void pace(Bench *b, long seq) {
    if (b->period_us <= 0) return;
    double due = b->t0 + (double)seq * b->period_us;
    for (double now = fw_now_us(); now < due; now = fw_now_us())
        if (due - now > 200) {
            timespec ts = {0, (long)((due - now - 100) * 1e3)};
            nanosleep(&ts, nullptr);
        }
}

Run summarize(Bench *b, double secs) {
    Run r;
    r.fps = (double)b->frames / secs;
    std::vector<double> v(b->lat.begin() + b->frames / 10, b->lat.end()); // past warm-up
    std::sort(v.begin(), v.end());
    r.p50 = v[(v.size() - 1) / 2];
    r.p99 = v[(size_t)((double)(v.size() - 1) * 0.99)];
    return r;
}

kp_status fw_status(int rc, const char *what) {
    return rc ? kp_set_error(KP_ERR_DEVICE, "%s failed (%d)", what, rc) : KP_OK;
}

cudaStream_t native(const kp_stage_ctx *c) {
    return static_cast<cudaStream_t>(kp_stream_native(c->stream));
}

// --- the kpipe flow ----------------------------------------------------------------
kp_status kp_h2d(void *u, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    Bench *b = static_cast<Bench *>(u);
    if (f->seq == (uint64_t)b->frames) {
        *eos = true;
        return KP_OK;
    }
    pace(b, (long)f->seq);
    b->start[f->seq] = fw_now_us();
    f->bytes = 2 * fw_matrix_bytes(b->w);
    return fw_status(fw_h2d(b->w, native(c), static_cast<float *>(f->data), (int)(f->seq % kRing)),
                     "h2d");
}

kp_status kp_pre(void *u, const kp_stage_ctx *c, kp_frame *f, bool *) {
    Bench *b = static_cast<Bench *>(u);
    return fw_status(fw_preprocess(b->w, native(c), static_cast<float *>(f->data)), "preprocess");
}

float *second_half(Bench *b, kp_frame *f) {
    return reinterpret_cast<float *>(static_cast<char *>(f->data) + fw_matrix_bytes(b->w));
}

kp_status kp_gemm(void *u, const kp_stage_ctx *c, kp_frame *f, bool *) {
    Bench *b = static_cast<Bench *>(u);
    return fw_status(fw_gemm(b->w, native(c), static_cast<float *>(f->data), second_half(b, f)),
                     "gemm");
}

kp_status kp_gemm_batch(void *u, const kp_stage_ctx *c, kp_frame *const *f, size_t n) {
    Bench *b = static_cast<Bench *>(u);
    const float *x[64];
    float *y[64];
    for (size_t i = 0; i < n; i++) {
        x[i] = static_cast<const float *>(f[i]->data);
        y[i] = second_half(b, f[i]);
    }
    return fw_status(fw_gemm_batched(b->w, native(c), x, y, (int)n), "batched gemm");
}

kp_status kp_d2h(void *u, const kp_stage_ctx *c, kp_frame *f, bool *) {
    Bench *b = static_cast<Bench *>(u);
    return fw_status(fw_d2h(b->w, native(c), second_half(b, f), (int)(f->seq % kRing)), "d2h");
}

// The consumer: its stream waits for the frame's D2H (the flow's hand-over
// event); the host waits for that.
kp_status kp_done(void *u, const kp_stage_ctx *c, kp_frame *f, bool *) {
    Bench *b = static_cast<Bench *>(u);
    int rc = fw_sync(native(c));
    b->lat[f->seq] = fw_now_us() - b->start[f->seq];
    return fw_status(rc, "wait");
}

uint64_t driver_allocs(kp_device_t dev) {
    kp_allocator_t a;
    kp_alloc_stats st{};
    if (kp_device_allocator(dev, KP_ALLOCATOR_DEVICE, &a) != KP_OK ||
        kp_allocator_stats(a, &st) != KP_OK)
        return ~0ull;
    return st.driver_allocs;
}

// Runs the flow once. Past the first 10% of frames: *late_misses, frame
// buffers taken from the pool for the first time (a frame slot first used
// late); *late_driver, device allocations that reached the driver.
Run run_kpipe(kp_device_t dev, Bench *b, size_t batch, uint64_t *late_misses,
              uint64_t *late_driver, int carry_us = 0) {
    kp_flow_stage st[5] = {{"h2d", kp_h2d, b, 0, KP_QUEUE_BLOCK, nullptr, 0, 0},
                           {"preprocess", kp_pre, b, 4, KP_QUEUE_BLOCK, nullptr, 0, 0},
                           {"gemm", kp_gemm, b, 4, KP_QUEUE_BLOCK, nullptr, 0, 0},
                           {"d2h", kp_d2h, b, 4, KP_QUEUE_BLOCK, nullptr, 0, 0},
                           {"wait", kp_done, b, 4, KP_QUEUE_BLOCK, nullptr, 0, 0}};
    if (batch > 1) {
        st[2].fn = nullptr;
        st[2].batch_fn = kp_gemm_batch;
        st[2].max_batch = batch;
        st[2].queue_capacity = batch;
        st[2].deadline_us = 100;
    }
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = dev;
    cfg.stages = st;
    cfg.n_stages = 5;
    cfg.frame_bytes = 2 * fw_matrix_bytes(b->w);
    cfg.carry_us = carry_us;
    kp_flow_t f;
    b->start.assign((size_t)b->frames, 0);
    b->lat.assign((size_t)b->frames, 0);
    if (kp_flow_create(&cfg, &f) != KP_OK) {
        std::fprintf(stderr, "flow: %s\n", kp_last_error());
        std::exit(1);
    }
    b->t0 = fw_now_us();
    kp_status s = kp_flow_start(f);
    kp_flow_snapshot h;
    uint64_t misses_warm = 0, driver_warm = 0;
    bool warm = false;
    while (s == KP_OK && kp_flow_health(f, &h) == KP_OK && h.running) {
        if (!warm && h.frames_done >= (uint64_t)b->frames / 10) {
            misses_warm = h.pool_misses;
            driver_warm = driver_allocs(dev);
            warm = true;
        }
        timespec ts = {0, 1000000};
        nanosleep(&ts, nullptr);
    }
    if (s == KP_OK) s = kp_flow_wait(f);
    double secs = (fw_now_us() - b->t0) * 1e-6;
    if (s != KP_OK) {
        std::fprintf(stderr, "flow: %s\n", kp_last_error());
        std::exit(1);
    }
    kp_flow_health(f, &h);
    if (b->period_us <= 0 && batch == 1 && !carry_us) { // where the saturated flow's time goes
        std::printf("    stages (host p50 / device p50 us):");
        for (size_t i = 0; i < h.n_stages; i++)
            std::printf(" %s %.1f/%.1f", h.stages[i].name, h.stages[i].host_p50_us,
                        h.stages[i].gpu_p50_us);
        std::printf("\n");
    }
    *late_misses = warm ? h.pool_misses - misses_warm : h.pool_misses;
    *late_driver = warm ? driver_allocs(dev) - driver_warm : driver_allocs(dev);
    kp_flow_destroy(f);
    return summarize(b, secs);
}

// --- the oneTBB pipeline -------------------------------------------------------------
struct Token {
    long seq;
    int slot;
};

Run run_tbb(Bench *b, std::vector<cudaStream_t> &streams, std::vector<float *> &bufs) {
    b->start.assign((size_t)b->frames, 0);
    b->lat.assign((size_t)b->frames, 0);
    long next = 0;
    using tbb::filter_mode;
    b->t0 = fw_now_us();
    tbb::parallel_pipeline(
        kTokens,
        tbb::make_filter<void,
                         Token>(filter_mode::serial_in_order, [&](tbb::flow_control &fc) -> Token {
            if (next == b->frames) {
                fc.stop();
                return {};
            }
            long seq = next++;
            int t = (int)(seq % kTokens);
            pace(b, seq);
            b->start[seq] = fw_now_us();
            fw_h2d(b->w, streams[t], bufs[t], (int)(seq % kRing));
            return {seq, t};
        }) & tbb::make_filter<Token, Token>(filter_mode::serial_in_order, [&](Token k) {
            fw_preprocess(b->w, streams[k.slot], bufs[k.slot]);
            return k;
        }) & tbb::make_filter<Token, Token>(filter_mode::serial_in_order, [&](Token k) {
            fw_gemm(b->w, streams[k.slot], bufs[k.slot],
                    bufs[k.slot] + fw_matrix_bytes(b->w) / sizeof(float));
            return k;
        }) & tbb::make_filter<Token, Token>(filter_mode::serial_in_order, [&](Token k) {
            fw_d2h(b->w, streams[k.slot], bufs[k.slot] + fw_matrix_bytes(b->w) / sizeof(float),
                   (int)(k.seq % kRing));
            return k;
        }) & tbb::make_filter<Token, void>(filter_mode::serial_in_order, [&](Token k) {
            fw_sync(streams[k.slot]);
            b->lat[k.seq] = fw_now_us() - b->start[k.seq];
        }));
    return summarize(b, (fw_now_us() - b->t0) * 1e-6);
}

// The device chain's latency alone, one frame at a time on an idle GPU
// (no host threads, no overlap): the four steps on one stream, as a oneTBB
// token runs them, against each on a stream of its own with an event
// between (and a fifth stream that waits for the last, as the flow's wait
// stage does). The difference is what the flow's stream hops cost a frame.
// p50 over n frames, into one[0..1] (one stream) and hops[0..1] (p50, p99).
int hop_floor(Bench *b, float *buf, int n, double one[2], double hops[2]) {
    cudaStream_t s[5];
    cudaEvent_t ev[4];
    for (int i = 0; i < 5; i++)
        if (cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking) != cudaSuccess) return 1;
    for (int i = 0; i < 4; i++)
        if (cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming) != cudaSuccess) return 1;
    float *y = buf + fw_matrix_bytes(b->w) / sizeof(float);
    std::vector<double> a, h;
    for (int way = 0; way < 2; way++)
        for (int i = 0; i < n; i++) {
            cudaStream_t q[5];
            for (int k = 0; k < 5; k++) q[k] = way ? s[k] : s[0];
            double t0 = fw_now_us();
            int rc = fw_h2d(b->w, q[0], buf, i % kRing);
            if (way) rc |= cudaEventRecord(ev[0], q[0]) | cudaStreamWaitEvent(q[1], ev[0], 0);
            rc |= fw_preprocess(b->w, q[1], buf);
            if (way) rc |= cudaEventRecord(ev[1], q[1]) | cudaStreamWaitEvent(q[2], ev[1], 0);
            rc |= fw_gemm(b->w, q[2], buf, y);
            if (way) rc |= cudaEventRecord(ev[2], q[2]) | cudaStreamWaitEvent(q[3], ev[2], 0);
            rc |= fw_d2h(b->w, q[3], y, i % kRing);
            if (way) rc |= cudaEventRecord(ev[3], q[3]) | cudaStreamWaitEvent(q[4], ev[3], 0);
            rc |= fw_sync(q[4]);
            if (rc) return 1;
            (way ? h : a).push_back(fw_now_us() - t0);
        }
    std::sort(a.begin(), a.end());
    std::sort(h.begin(), h.end());
    one[0] = a[a.size() / 2], one[1] = a[a.size() * 99 / 100];
    hops[0] = h[h.size() / 2], hops[1] = h[h.size() * 99 / 100];
    for (int i = 0; i < 4; i++) cudaEventDestroy(ev[i]);
    for (int i = 0; i < 5; i++) cudaStreamDestroy(s[i]);
    return 0;
}

void line(const char *what, int k, const Run &r) {
    std::printf("  %-34s k=%-5d %10.0f frames/s   p50 %8.1f us   p99 %8.1f us\n", what, k, r.fps,
                r.p50, r.p99);
}

} // namespace

int main(int argc, char **argv) {
    long frames = argc > 1 ? std::atol(argv[1]) : 20000;
    std::vector<int> ks;
    for (int i = 2; i < argc; i++) ks.push_back(std::atoi(argv[i]));
    if (ks.empty()) ks = {256, 1024};
    kp_device_t dev;
    if (kp_device_open("cuda", &dev) != KP_OK) {
        std::printf("SKIP: %s\n", kp_last_error());
        return 77;
    }
    std::printf("flow benchmark: %ld frames per run, stages H2D, preprocess, GEMM, D2H, wait\n",
                frames);
    for (int k : ks) {
        Bench b;
        b.frames = frames;
        if (fw_create(k, kRing, &b.w)) return 1;
        double alone[4];
        if (fw_alone(b.w, 2000, alone)) return 1;
        double slowest = *std::max_element(alone, alone + 4);
        std::printf("k=%d (%zu KiB frames): alone h2d %.1f us, preprocess %.1f, gemm %.1f, d2h "
                    "%.1f: slowest %.1f us (%.0f frames/s)\n",
                    k, fw_matrix_bytes(b.w) >> 10, alone[0], alone[1], alone[2], alone[3], slowest,
                    1e6 / slowest);
        std::vector<cudaStream_t> streams(kTokens);
        std::vector<float *> bufs(kTokens);
        for (int t = 0; t < kTokens; t++)
            if (cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking) != cudaSuccess ||
                cudaMalloc(&bufs[t], 2 * fw_matrix_bytes(b.w)) != cudaSuccess)
                return 1;
        uint64_t late = 0, late_b = 0, drv = 0, drv_b = 0;
        run_kpipe(dev, &b, 1, &late, &drv); // warm-up: pool, cuBLAS, TBB threads
        run_tbb(&b, streams, bufs);
        Run ks_ = run_kpipe(dev, &b, 1, &late, &drv), ts = run_tbb(&b, streams, bufs);
        Run kb = run_kpipe(dev, &b, 8, &late_b, &drv_b);
        uint64_t late_n = 0, drv_n = 0;
        Run kn = run_kpipe(dev, &b, 1, &late_n, &drv_n, -1);
        // 50% load: half the lower of the two saturated rates, for both
        b.period_us = 2e6 / std::min(ks_.fps, ts.fps);
        Run kp_ = run_kpipe(dev, &b, 1, &late, &drv), tp = run_tbb(&b, streams, bufs);
        Run kbp = run_kpipe(dev, &b, 8, &late_b, &drv_b);
        Run knp = run_kpipe(dev, &b, 1, &late_n, &drv_n, -1);
        double got, want;
        if (fw_check(b.w, (int)((frames - 1) % kRing), &got, &want)) return 1;
        line("kpipe flow, saturated", k, ks_);
        line("oneTBB parallel_pipeline, saturated", k, ts);
        line("kpipe flow, batch<=8 (100 us), sat.", k, kb);
        line("kpipe flow, 50% load", k, kp_);
        line("oneTBB parallel_pipeline, 50% load", k, tp);
        line("kpipe flow, batch<=8, 50% load", k, kbp);
        line("kpipe flow, never carried, sat.", k, kn);
        line("kpipe flow, never carried, 50% load", k, knp);
        std::printf("  (a) saturated frames/s kpipe / TBB: %.3f\n", ks_.fps / ts.fps);
        std::printf("  (c) 50%% load latency kpipe / TBB: p50 %.3f, p99 %.3f\n", kp_.p50 / tp.p50,
                    kp_.p99 / tp.p99);
        std::printf("  (d) saturated frames/s / slowest stage alone: kpipe %.3f, TBB %.3f\n",
                    ks_.fps * slowest * 1e-6, ts.fps * slowest * 1e-6);
        double one[2], hops[2];
        if (hop_floor(&b, bufs[0], 2000, one, hops)) return 1;
        std::printf("  device chain alone, one frame at a time: one stream p50 %.1f us (p99 %.1f); "
                    "a stream per stage with events p50 %.1f us (p99 %.1f): the hops %.1f us\n",
                    one[0], one[1], hops[0], hops[1], hops[0] - one[0]);
        std::printf("  carried / never carried (carry_us -1): saturated frames/s %.3f; 50%% load "
                    "p50 %.3f, p99 %.3f\n",
                    ks_.fps / kn.fps, kp_.p50 / knp.p50, kp_.p99 / knp.p99);
        std::printf("  (e) batch<=8 / batch 1: frames/s %.3f, p99 %.3f saturated; p99 %.3f at 50%% "
                    "load\n",
                    kb.fps / ks_.fps, kb.p99 / ks_.p99, kbp.p99 / kp_.p99);
        std::printf("  past 10%% of frames: driver allocations %llu (batched %llu); frame slots "
                    "first used %llu (batched %llu); output check %.6g (want %.6g): %s\n",
                    (unsigned long long)drv, (unsigned long long)drv_b, (unsigned long long)late,
                    (unsigned long long)late_b, got, want,
                    std::abs(got - want) <= 1e-3 * std::abs(want) + 1e-3 ? "ok" : "WRONG");
        for (int t = 0; t < kTokens; t++) {
            cudaStreamDestroy(streams[t]);
            cudaFree(bufs[t]);
        }
        fw_destroy(b.w);
    }
    kp_device_close(dev);
    return 0;
}
