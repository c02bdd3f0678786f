/* The hand-written baseline of a remote queue's CUDA IPC lane: two
 * processes of one host, no framework. The receiver exports slots (one
 * device allocation of 2 x CAPACITY frames); the sender maps them, copies
 * each frame straight into its slot (cudaMemcpyAsync, peer to peer between
 * two GPUs), records an interprocess event of its own and writes the
 * frame's number down a pipe; the receiver waits for that event -- on the
 * host, querying it ("host"), or with its stream ("stream") -- copies the
 * frame out of the slot into one of four buffers of its own and gives a
 * credit back down a second pipe once that copy is done. The sender holds
 * at most CAPACITY frames the receiver has not given back.
 *
 * This is the structure of kpipe's lane (src/flow/remote/remote_rx.c,
 * remote_tx.c) less everything around it: the flow's stages and queues,
 * UCX's shared-memory header, the benchmark sink's per-frame wait. What
 * kpipe reaches beyond this is kpipe's; what this reaches below
 * cudaMemcpyPeerAsync back to back (bench_remote's peer floor, which
 * bench/remote_vs_perftest.sh sets beside it) is the lane's shape.
 *
 *   ipc_hand TX_DEVICE RX_DEVICE KIB FRAMES CAPACITY host|stream
 * e.g. ipc_hand 0 1 8192 2000 4 host. Prints GB/s (10^9 bytes a second). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "ipc_hand: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { MAX_SLOTS = 64, OUT_BUFS = 4 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void put(int fd, const void *p, size_t n) {
    for (const char *c = p; n;) {
        ssize_t k = write(fd, c, n);
        if (k <= 0) {
            perror("ipc_hand: write");
            exit(1);
        }
        c += k, n -= (size_t)k;
    }
}

static void get(int fd, void *p, size_t n) {
    for (char *c = p; n;) {
        ssize_t k = read(fd, c, n);
        if (k <= 0) {
            perror("ipc_hand: read");
            exit(1);
        }
        c += k, n -= (size_t)k;
    }
}

/* What the receiver tells the sender first, and the sender's answer. */
typedef struct {
    cudaIpcMemHandle_t slots;
} rx_hello;
typedef struct {
    cudaIpcEventHandle_t ev[MAX_SLOTS];
} tx_hello;

static void receiver(int dev, size_t bytes, long frames, int cap, int host_wait, int in, int out) {
    const int n_slots = 2 * cap;
    CK(cudaSetDevice(dev));
    char *slots, *dst[OUT_BUFS];
    CK(cudaMalloc((void **)&slots, bytes * (size_t)n_slots));
    for (int i = 0; i < OUT_BUFS; i++) CK(cudaMalloc((void **)&dst[i], bytes));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t done[OUT_BUFS];
    for (int i = 0; i < OUT_BUFS; i++)
        CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    rx_hello h;
    CK(cudaIpcGetMemHandle(&h.slots, slots));
    put(out, &h, sizeof h);
    tx_hello t;
    get(in, &t, sizeof t);
    cudaEvent_t ev[MAX_SLOTS];
    for (int i = 0; i < n_slots; i++) CK(cudaIpcOpenEventHandle(&ev[i], t.ev[i]));
    long credited = 0;
    double t0 = 0;
    for (long f = 0; f < frames; f++) {
        long seq;
        get(in, &seq, sizeof seq);
        if (f == 0) t0 = now_s();
        const int k = (int)(seq % n_slots);
        if (host_wait) {
            cudaError_t q;
            while ((q = cudaEventQuery(ev[k])) == cudaErrorNotReady) {
            }
            CK(q);
        } else {
            CK(cudaStreamWaitEvent(s, ev[k], 0));
        }
        /* a buffer of ours is reused once its last copy out is done, and
         * every frame up to that one (one stream, in order) is credited */
        if (f >= OUT_BUFS) {
            CK(cudaEventSynchronize(done[f % OUT_BUFS]));
            while (credited < f - OUT_BUFS + 1) {
                credited++;
                put(out, &credited, sizeof credited);
            }
        }
        CK(cudaMemcpyAsync(dst[f % OUT_BUFS], slots + bytes * (size_t)k, bytes,
                           cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(done[f % OUT_BUFS], s));
        /* credits for every later frame whose copy out is done: frames
         * f-3 .. f, each the last recorded on its buffer's event */
        while (credited <= f && cudaEventQuery(done[credited % OUT_BUFS]) == cudaSuccess) {
            credited++;
            put(out, &credited, sizeof credited);
        }
        /* the sender sends frame f+1 once f+2-cap are credited: those are
         * waited for before this end waits for it, or both would wait */
        while (credited < f + 2 - cap) {
            CK(cudaEventSynchronize(done[credited % OUT_BUFS]));
            credited++;
            put(out, &credited, sizeof credited);
        }
    }
    CK(cudaStreamSynchronize(s));
    const double secs = now_s() - t0;
    for (; credited < frames; credited++) {
        long c = credited + 1;
        put(out, &c, sizeof c);
    }
    printf("  hand IPC lane, %-6s wait %10.1f frames/s %9.2f GB/s\n", host_wait ? "host" : "stream",
           (double)(frames - 1) / secs, (double)(frames - 1) * (double)bytes / secs * 1e-9);
    fflush(stdout);
}

static void sender(int dev, size_t bytes, long frames, int cap, int in, int out) {
    const int n_slots = 2 * cap;
    CK(cudaSetDevice(dev));
    char *src;
    CK(cudaMalloc((void **)&src, bytes));
    CK(cudaMemset(src, 7, bytes));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    rx_hello h;
    get(in, &h, sizeof h);
    char *slots;
    CK(cudaIpcOpenMemHandle((void **)&slots, h.slots, cudaIpcMemLazyEnablePeerAccess));
    tx_hello t;
    memset(&t, 0, sizeof t);
    cudaEvent_t ev[MAX_SLOTS];
    for (int i = 0; i < n_slots; i++) {
        CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming | cudaEventInterprocess));
        CK(cudaIpcGetEventHandle(&t.ev[i], ev[i]));
    }
    CK(cudaDeviceSynchronize());
    put(out, &t, sizeof t);
    long consumed = 0;
    for (long f = 0; f < frames; f++) {
        while (f - consumed >= cap) get(in, &consumed, sizeof consumed);
        const int k = (int)(f % n_slots);
        CK(cudaMemcpyAsync(slots + bytes * (size_t)k, src, bytes, cudaMemcpyDefault, s));
        CK(cudaEventRecord(ev[k], s));
        put(out, &f, sizeof f);
    }
    while (consumed < frames) get(in, &consumed, sizeof consumed);
    CK(cudaStreamSynchronize(s));
    CK(cudaIpcCloseMemHandle(slots));
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: ipc_hand TX_DEVICE RX_DEVICE KIB FRAMES CAPACITY host|stream\n");
        return 2;
    }
    const int a = atoi(argv[1]), b = atoi(argv[2]), cap = atoi(argv[5]);
    const long frames = atol(argv[4]);
    const size_t bytes = (size_t)atol(argv[3]) * 1024;
    const int host_wait = strcmp(argv[6], "stream") != 0;
    /* frames: at most 8,000, so that the credits the sender has not read
     * yet always fit in the pipe (64 KiB) */
    if (cap < 1 || 2 * cap > MAX_SLOTS || frames < 2 || frames > 8000 || !bytes) {
        fprintf(stderr, "ipc_hand: capacity 1 .. %d, frames 2 .. 8000, KiB 1 or more\n",
                MAX_SLOTS / 2);
        return 2;
    }
    int to_rx[2], to_tx[2];
    if (pipe(to_rx) || pipe(to_tx)) {
        perror("ipc_hand: pipe");
        return 1;
    }
    printf("%ld frames of %zu KiB, cuda:%d to cuda:%d, capacity %d:\n", frames, bytes / 1024, a, b,
           cap);
    fflush(stdout);
    pid_t child = fork(); /* before CUDA is touched: each process its own */
    if (child < 0) {
        perror("ipc_hand: fork");
        return 1;
    }
    if (child == 0) {
        receiver(b, bytes, frames, cap, host_wait, to_rx[0], to_tx[1]);
        _exit(0);
    }
    sender(a, bytes, frames, cap, to_tx[0], to_rx[1]);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
