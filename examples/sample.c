/* Runs examples/sample.json, ReLU(input0 + input1), for a few ticks and
 * checks every output element on the host.
 *   sample [SPEC.json] [cpu|cuda|cuda:N]      (default: cuda if present, else cpu) */
#include <stdio.h>
#include <stdlib.h>

#include "kpipe/kpipe.h"

#define CHECK(x)                                                              \
    do {                                                                      \
        kp_status st_ = (x);                                                  \
        if (st_ != KP_OK) {                                                   \
            fprintf(stderr, "%s: %s\n", kp_status_str(st_), kp_last_error()); \
            return 1;                                                         \
        }                                                                     \
    } while (0)

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "examples/sample.json";
    const char *devname = argc > 2 ? argv[2] : kp_device_count("cuda", NULL, 0) ? "cuda" : "cpu";
    kp_device_t dev;
    kp_stream_t s;
    kp_pipeline_t p;
    CHECK(kp_device_open(devname, &dev));
    CHECK(kp_stream_create(dev, &s));
    CHECK(kp_pipeline_create_from_file(dev, spec, &p));
    CHECK(kp_pipeline_setup(p));

    /* The input tensors: shape from the module port the spec wires them to. */
    kp_module_report first;
    CHECK(kp_pipeline_module_report(p, 0, &first));
    kp_tensor_desc desc = first.inputs[0].desc;
    size_t n = (size_t)kp_desc_numel(&desc), bytes = n * sizeof(float);
    float *a, *b, *ha = malloc(bytes), *hb = malloc(bytes), *hout = malloc(bytes);
    CHECK(kp_malloc(dev, bytes, (void **)&a));
    CHECK(kp_malloc(dev, bytes, (void **)&b));
    kp_port_info in[2] = {{"input0", a, desc}, {"input1", b, desc}};
    kp_port_info out[1] = {{"output", NULL, {0}}};

    int bad = 0;
    for (int tick = 0; tick < 4; tick++) {
        for (size_t i = 0; i < n; i++) {
            ha[i] = (float)((int)((i * 7 + (size_t)tick * 13) % 2001) - 1000);
            hb[i] = (float)((int)((i * 3 + (size_t)tick) % 1001) - 500);
        }
        CHECK(kp_memcpy_htod(dev, a, ha, bytes));
        CHECK(kp_memcpy_htod(dev, b, hb, bytes));
        CHECK(kp_pipeline_configure_io(p, in, 2, out, 1, s));
        if (tick == 0) {
            CHECK(kp_pipeline_warmup(p, s));
            if (kp_pipeline_mode(p) == KP_EXEC_GRAPH) CHECK(kp_pipeline_build_graph(p));
        }
        if (kp_pipeline_mode(p) == KP_EXEC_GRAPH)
            CHECK(kp_pipeline_execute_graph(p, s));
        else
            CHECK(kp_pipeline_execute_stream(p, s));
        CHECK(kp_stream_sync(s));
        CHECK(kp_memcpy_dtoh(dev, hout, out[0].data, bytes));
        for (size_t i = 0; i < n; i++) {
            float want = ha[i] + hb[i] > 0 ? ha[i] + hb[i] : 0;
            bad += hout[i] != want;
        }
    }
    kp_pipeline_report r;
    CHECK(kp_pipeline_report_get(p, &r));
    printf("%s on %s, %s mode: 4 ticks of %zu elements, %d wrong; arena tensors %zu bytes\n",
           kp_pipeline_name(p), kp_device_name(dev), kp_exec_mode_str(kp_pipeline_mode(p)), n, bad,
           r.tensor_bytes);
    kp_pipeline_destroy(p);
    kp_free(dev, a);
    kp_free(dev, b);
    kp_stream_destroy(s);
    kp_device_close(dev);
    free(ha);
    free(hb);
    free(hout);
    return bad ? 1 : 0;
}
