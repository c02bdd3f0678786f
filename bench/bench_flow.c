/* Per-frame overhead of a flow with empty stages, on the cpu backend: a
 * source and three stages that do nothing, frames with no buffer, queues of
 * capacity 4 (block). Prints microseconds per frame and per frame and stage,
 * for comparison with tbb_flow (oneTBB parallel_pipeline, the same shape),
 * with stages spinning before they sleep (spin_us 0: the default, 20 us),
 * never spinning (-1), spinning 20 us and up to 1 ms.
 *   bench_flow [FRAMES] */
#include <stdio.h>
#include <stdlib.h>

#include "kpipe/kpipe.h"
#include "tool-impl.h"

static long g_frames = 200000;

static kp_status empty(void *user, const kp_stage_ctx *c, kp_frame *f, bool *eos) {
    if (eos && f->seq == (uint64_t)g_frames) *eos = true;
    return KP_OK;
}

int main(int argc, char **argv) {
    if (argc > 1) g_frames = atol(argv[1]);
    kp_device_t dev;
    if (kp_device_open("cpu", &dev) != KP_OK) return 1;
    kp_flow_stage st[4] = {{.name = "source", .fn = empty},
                           {.name = "a", .fn = empty, .queue_capacity = 4},
                           {.name = "b", .fn = empty, .queue_capacity = 4},
                           {.name = "sink", .fn = empty, .queue_capacity = 4}};
    kp_flow_config cfg = KP_FLOW_CONFIG_INIT;
    cfg.dev = dev;
    cfg.stages = st;
    cfg.n_stages = 4;
    static const int spins[] = {0, 0, 0, -1, -1, -1, 20, 20, 20, 1000, 1000, 1000};
    for (int rep = 0; rep < 12; rep++) {
        cfg.spin_us = spins[rep];
        kp_flow_t f;
        if (kp_flow_create(&cfg, &f) != KP_OK) return 1;
        double t0 = kpt_now_us();
        if (kp_flow_start(f) != KP_OK || kp_flow_wait(f) != KP_OK) {
            fprintf(stderr, "%s\n", kp_last_error());
            return 1;
        }
        double us = kpt_now_us() - t0;
        printf("kpipe flow, 4 empty stages, %ld frames, spin_us %4d: %.3f us per frame, %.3f us "
               "per frame and stage\n",
               g_frames, cfg.spin_us, us / (double)g_frames, us / (double)g_frames / 4);
        kp_flow_destroy(f);
    }
    kp_device_close(dev);
    return 0;
}
