/* A program outside the tree, built against an installed kpipe: runs one
 * relu tick on the cpu backend and checks it, and that every built-in
 * module type is there. */
#include <stdio.h>
#include <string.h>
#include <kpipe/kpipe.h>

static const char spec[] = "{\"kpipe_spec\": 1, \"execution\": \"stream\", \"modules\": "
                           "[{\"type\": \"relu\", \"id\": \"r\", "
                           "\"params\": {\"size\": 4}}], \"inputs\": {\"x\": \"r.input\"}, "
                           "\"outputs\": {\"y\": \"r.output\"}}";

static int run(kp_device_t d, kp_stream_t s, kp_pipeline_t p, float *x) {
    const float h[4] = {-1.5f, 2.0f, -0.0f, 3.25f};
    float out[4];
    int64_t n = 4;
    kp_port_info in = {"x", x, {0}}, o = {"y", NULL, {0}};
    if (kp_desc_init(&in.desc, KP_F32, 1, &n, NULL) != KP_OK ||
        kp_memcpy_htod(d, x, h, sizeof h) != KP_OK || kp_pipeline_setup(p) != KP_OK ||
        kp_pipeline_configure_io(p, &in, 1, &o, 1, s) != KP_OK ||
        kp_pipeline_warmup(p, s) != KP_OK || kp_pipeline_execute_stream(p, s) != KP_OK ||
        kp_stream_sync(s) != KP_OK || kp_memcpy_dtoh(d, out, o.data, sizeof out) != KP_OK)
        return 1;
    for (int i = 0; i < 4; i++)
        if (out[i] != (h[i] > 0 ? h[i] : 0.0f)) return 1;
    return 0;
}

int main(void) {
    kp_device_t d;
    kp_stream_t s;
    kp_pipeline_t p;
    float *x;
    if (kp_device_open("cpu", &d) != KP_OK || kp_stream_create(d, &s) != KP_OK ||
        kp_malloc(d, 4 * sizeof(float), (void **)&x) != KP_OK ||
        kp_pipeline_create_from_json(d, spec, &p) != KP_OK) {
        fprintf(stderr, "setup failed: %s\n", kp_last_error());
        return 1;
    }
    int rc = run(d, s, p, x);
    /* every built-in module, also in a static link made by hand */
    static const char *const builtins[] = {"engine", "relu", "i420_rgb", "sharpen", "rgb_i420"};
    for (size_t k = 0; k < sizeof builtins / sizeof builtins[0]; k++) {
        int found = 0;
        for (size_t i = 0; i < kp_module_type_count(); i++)
            found |= strcmp(kp_module_type_name(i), builtins[k]) == 0;
        if (!found) {
            fprintf(stderr, "built-in module %s is missing\n", builtins[k]);
            rc = 1;
        }
    }
    printf("kpipe %s: relu tick %s%s%s\n", kp_version_str(), rc ? "FAILED: " : "ok",
           rc ? kp_last_error() : "", "");
    kp_pipeline_destroy(p);
    kp_free(d, x);
    kp_stream_destroy(s);
    kp_device_close(d);
    return rc;
}
