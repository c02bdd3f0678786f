/* Per-frame overhead of a flow with empty stages, on the cpu backend: a
 * source and three stages that do nothing, frames with no buffer, queues of
 * capacity 4 (block). Prints microseconds per frame and per frame and stage,
 * for comparison with tbb_flow (oneTBB parallel_pipeline, the same shape),
 * with stages spinning before they sleep (spin_us 0: the default, 20 us),
 * never spinning (-1), spinning 20 us and up to 1 ms, each with frames
 * carried through the short stages (the default) and never carried
 * (carry_us -1); then saturated, 4 stages busy 1, 5 and 20 us, frames/s
 * against the slowest stage alone, carried and not. Then the floor of a
 * hand-over to a sleeping thread, which bounds the flow that never spins:
 * two threads passing a token through a futex, neither spinning.
 *   bench_flow [FRAMES] */
#define _DEFAULT_SOURCE /* syscall() */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kpipe/kpipe.h"
#include "tool-impl.h"

static long g_frames = 200000;

static kp_status empty(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    if (eos && f->seq == (uint64_t)g_frames) *eos = true;
    return KP_OK;
}

/* A stage that keeps its core busy for *user microseconds per frame. */
static kp_status busy(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    double until = kpt_now_us() + *(const double *)user;
    while (kpt_now_us() < until) {
    }
    return empty(user, c, f, eos);
}

/* Seconds for g_frames through the 4 stages of st by spin_us and carry_us. */
static double run_flow(kp_device_t dev, kp_flow_stage *st, int spin_us, int carry_us) {
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = dev;
    cfg.stages = st;
    cfg.n_stages = 4;
    cfg.spin_us = spin_us;
    cfg.carry_us = carry_us;
    kp_flow_t f;
    if (kp_flow_create(&cfg, &f) != KP_OK) exit(1);
    double t0 = kpt_now_us();
    if (kp_flow_start(f) != KP_OK || kp_flow_wait(f) != KP_OK) {
        fprintf(stderr, "%s\n", kp_last_error());
        exit(1);
    }
    double us = kpt_now_us() - t0;
    kp_flow_destroy(f);
    return us * 1e-6;
}

/* The token: whose turn it is (0 or 1), waited for on a futex. */
static _Atomic uint32_t g_turn;
static long g_rounds;

static void pass_to(uint32_t who) {
    atomic_store(&g_turn, who);
    syscall(SYS_futex, (uint32_t *)&g_turn, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void wait_for(uint32_t me) {
    uint32_t v;
    while ((v = atomic_load(&g_turn)) != me)
        syscall(SYS_futex, (uint32_t *)&g_turn, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void *pong(void *arg) {
    for (long i = 0; i < g_rounds; i++) {
        wait_for(1);
        pass_to(0);
    }
    return NULL;
}

static void wake_floor(long rounds) {
    for (int rep = 0; rep < 3; rep++) {
        g_rounds = rounds;
        atomic_store(&g_turn, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, pong, NULL) != 0) return;
        double t0 = kpt_now_us();
        for (long i = 0; i < rounds; i++) {
            pass_to(1);
            wait_for(0);
        }
        double us = kpt_now_us() - t0;
        pthread_join(t, NULL);
        printf("floor: a hand-over to a sleeping thread (futex, no spin), %ld round trips: %.3f us "
               "per hand-over\n",
               rounds, us / (2.0 * rounds));
    }
}

int main(int argc, char **argv) {
    if (argc > 1) g_frames = atol(argv[1]);
    kp_device_t dev;
    if (kp_device_open("cpu", &dev) != KP_OK) return 1;
    kp_flow_stage st[4] = {{.name = "source", .fn = empty},
                           {.name = "a", .fn = empty, .queue_capacity = 4},
                           {.name = "b", .fn = empty, .queue_capacity = 4},
                           {.name = "sink", .fn = empty, .queue_capacity = 4}};
    /* by default (frames carried through short stages), then never carried:
     * each stage on its own thread, the hand-overs through the rings */
    static const int spins[] = {0, 0, 0, -1, -1, -1, 20, 20, 20, 1000, 1000, 1000};
    for (int carry = 0; carry < 2; carry++)
        for (int rep = 0; rep < 12; rep++) {
            if (carry && spins[rep] > 0) continue;
            double us = run_flow(dev, st, spins[rep], carry ? -1 : 0) * 1e6;
            printf("kpipe flow, 4 empty stages, %ld frames, spin_us %4d, carry_us %2d: %.3f us per "
                   "frame, %.3f us per frame and stage\n",
                   g_frames, spins[rep], carry ? -1 : 0, us / (double)g_frames,
                   us / (double)g_frames / 4);
        }
    /* saturated: 4 stages busy w us each; the slowest stage alone makes a
     * frame every w us, so frames/s / (1 / w) is what the hand-overs keep
     * (with fewer cores than stages, the host, not the flow, bounds it) */
    static double work[] = {1, 5, 20};
    const long frames = g_frames;
    for (size_t k = 0; k < 3; k++) {
        kp_flow_stage bs[4];
        for (int i = 0; i < 4; i++) {
            bs[i] = st[i];
            bs[i].fn = busy;
            bs[i].user = &work[k];
        }
        long n = g_frames = (long)(2e5 / work[k]);
        for (int carry = 0; carry < 2; carry++) {
            double secs = run_flow(dev, bs, 0, carry ? -1 : 0);
            printf("kpipe flow, 4 stages busy %4.1f us, %ld frames, carry_us %2d: %.3f us per "
                   "frame, frames/s / slowest stage alone %.3f\n",
                   work[k], n, carry ? -1 : 0, secs * 1e6 / (double)n,
                   work[k] * 1e-6 * (double)n / secs);
        }
    }
    g_frames = frames;
    kp_device_close(dev);
    wake_floor(g_frames / 4);
    return 0;
}
