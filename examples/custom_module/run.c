/* Runs scale_clamp.json -- the built-in engine feeding the scale_clamp
 * module of this folder -- in graph and stream mode on a device, with new
 * input data every tick, and checks every output element on the host.
 *   custom_module SPEC.json [DEVICE [TICKS]]     (exit 77: no such device) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "scale_clamp.h"

#define CHECK(expr)                                                                      \
    do {                                                                                 \
        kp_status st_ = (expr);                                                          \
        if (st_ != KP_OK) {                                                              \
            fprintf(stderr, "%s: %s: %s\n", #expr, kp_status_str(st_), kp_last_error()); \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

/* Ticks of one mode; returns the number of wrong elements, or -1. */
static long run(kp_device_t dev, kp_stream_t s, const char *spec, kp_exec_mode mode, int ticks) {
    kp_pipeline_options o = KP_PIPELINE_OPTIONS_INIT;
    o.mode = mode;
    kp_pipeline_t p;
    kp_port_info in[2], out = {"y", NULL, {0}};
    if (kp_pipeline_create_from_file_opts(dev, spec, &o, &p) != KP_OK ||
        kp_pipeline_input_info(p, 0, &in[0]) != KP_OK ||
        kp_pipeline_input_info(p, 1, &in[1]) != KP_OK) {
        fprintf(stderr, "%s: %s\n", spec, kp_last_error());
        return -1;
    }
    size_t n = (size_t)kp_desc_numel(&in[0].desc), bytes = n * sizeof(float);
    float *h[2] = {malloc(bytes), malloc(bytes)}, *y = malloc(bytes);
    long wrong = 0;
    kp_status st = kp_pipeline_setup(p);
    for (int k = 0; k < 2 && st == KP_OK; k++) st = kp_malloc(dev, bytes, &in[k].data);
    for (int t = 0; t < ticks && st == KP_OK; t++) {
        for (size_t i = 0; i < n; i++) {
            h[0][i] = (float)((int)((i * 7 + (size_t)t * 13) % 41) - 20) / 16.0f;
            h[1][i] = (float)((int)((i * 3 + (size_t)t * 5) % 17) - 8) / 32.0f;
        }
        for (int k = 0; k < 2 && st == KP_OK; k++)
            st = kp_memcpy_htod(dev, in[k].data, h[k], bytes);
        if (st == KP_OK) st = kp_pipeline_configure_io(p, in, 2, &out, 1, s);
        if (st == KP_OK && t == 0) st = kp_pipeline_warmup(p, s);
        if (st == KP_OK && t == 0 && mode == KP_EXEC_GRAPH) st = kp_pipeline_build_graph(p);
        if (st == KP_OK)
            st = mode == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, s)
                                       : kp_pipeline_execute_stream(p, s);
        if (st == KP_OK) st = kp_stream_sync(s);
        if (st == KP_OK) st = kp_memcpy_dtoh(dev, y, out.data, bytes);
        for (size_t i = 0; i < n && st == KP_OK; i++)
            wrong += y[i] != fminf(fmaxf((h[0][i] + h[1][i]) * 0.5f, -0.25f), 0.75f);
    }
    if (st != KP_OK) {
        fprintf(stderr, "%s mode: %s\n", kp_exec_mode_str(mode), kp_last_error());
        wrong = -1;
    }
    kp_pipeline_destroy(p);
    for (int k = 0; k < 2; k++) {
        kp_free(dev, in[k].data);
        free(h[k]);
    }
    free(y);
    return wrong;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "scale_clamp.json", *name = argc > 2 ? argv[2] : "cpu";
    int ticks = argc > 3 ? atoi(argv[3]) : 20;
    kp_device_t dev;
    kp_stream_t s;
    CHECK(scale_clamp_register());
    kp_status st = kp_device_open(name, &dev);
    if (st == KP_ERR_NO_DEVICE) {
        printf("SKIP: %s\n", kp_last_error());
        return 77;
    }
    CHECK(st);
    CHECK(kp_stream_create(dev, &s));
    int rc = 0;
    for (int m = 0; m < 2; m++) {
        kp_exec_mode mode = m ? KP_EXEC_STREAM : KP_EXEC_GRAPH;
        long wrong = run(dev, s, spec, mode, ticks);
        printf("scale_clamp on %s, %s mode: %d ticks, %ld wrong elements\n", kp_device_name(dev),
               kp_exec_mode_str(mode), ticks, wrong);
        if (wrong != 0) rc = 1;
    }
    kp_stream_destroy(s);
    kp_device_close(dev);
    return rc;
}
