/* libFuzzer harness for the JSON spec reader. Every input is read as a spec
 * on the cpu backend; a refused spec must come with a non-empty
 * kp_last_error() and no pipeline. An accepted one is inspected through every
 * report and, when its arena is small, run for two ticks in its own mode:
 * what the reader lets through must be safe to run.
 *   build-clang/tests/fuzz_spec -dict=tests/fuzz/spec.dict CORPUS_DIR tests/fuzz/seeds/spec */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/kpipe.h"

static kp_device_t g_dev;
static kp_stream_t g_s;

static void quiet(kp_log_level level, const char *msg, void *user) {}

static void check(kp_status st, const char *what) {
    if (st != KP_OK && kp_last_error()[0] == '\0') {
        fprintf(stderr, "%s failed with %s and no detail\n", what, kp_status_name(st));
        abort();
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    if (kp_device_open("cpu", &g_dev) != KP_OK || kp_stream_create(g_dev, &g_s) != KP_OK) abort();
    return 0;
}

static void inspect(kp_pipeline_t p, kp_pipeline_report *r) {
    kp_module_report m;
    kp_connection_report c;
    kp_port_info pi;
    check(kp_pipeline_report_get(p, r), "report");
    for (size_t i = 0; i <= r->n_modules; i++)
        check(kp_pipeline_module_report(p, i, &m), "module report");
    for (size_t i = 0; i <= r->n_connections; i++)
        check(kp_pipeline_connection_report(p, i, &c), "connection report");
    for (size_t i = 0; i <= r->n_inputs; i++)
        check(kp_pipeline_input_info(p, i, &pi), "input info");
    for (size_t i = 0; i <= r->n_outputs; i++)
        check(kp_pipeline_output_info(p, i, &pi), "output info");
}

/* Setup, two ticks on zeroed inputs, teardown. */
static void run(kp_pipeline_t p, const kp_pipeline_report *r) {
    kp_port_info in[16], out[16];
    size_t ni = r->n_inputs < 16 ? r->n_inputs : 16, no = r->n_outputs < 16 ? r->n_outputs : 16;
    memset(in, 0, sizeof in);
    kp_status st = kp_pipeline_setup(p);
    check(st, "setup");
    for (size_t i = 0; i < ni && st == KP_OK; i++) {
        st = kp_pipeline_input_info(p, i, &in[i]);
        int64_t bytes = kp_desc_bytes_needed(&in[i].desc);
        if (st == KP_OK) st = kp_malloc(g_dev, bytes > 0 ? (size_t)bytes : 1, &in[i].data);
        if (st == KP_OK) st = kp_memset_async(g_s, in[i].data, 0, bytes > 0 ? (size_t)bytes : 0);
    }
    for (size_t i = 0; i < no && st == KP_OK; i++) st = kp_pipeline_output_info(p, i, &out[i]);
    for (int t = 0; t < 3 && st == KP_OK; t++) {
        /* the third tick shrinks every dynamic dimension: a new graph key */
        for (size_t i = 0; i < ni && t == 2; i++) {
            uint32_t dyn = 0;
            int64_t shape[KP_MAX_DIMS];
            check(kp_pipeline_input_dynamic(p, i, &dyn), "input dynamic");
            for (int d = 0; d < in[i].desc.ndim; d++)
                shape[d] = dyn >> d & 1u ? in[i].desc.shape[d] / 2 + 1 : in[i].desc.shape[d];
            if (kp_desc_init(&in[i].desc, in[i].desc.dtype, in[i].desc.ndim, shape, NULL) != KP_OK)
                abort();
        }
        st = kp_pipeline_configure_io(p, in, ni, out, no, g_s);
        check(st, "configure_io");
        if (st == KP_OK && t == 0) {
            st = kp_pipeline_warmup(p, g_s);
            check(st, "warmup");
            if (st == KP_OK && kp_pipeline_mode(p) == KP_EXEC_GRAPH) {
                st = kp_pipeline_build_graph(p);
                check(st, "build_graph");
            }
        }
        if (st == KP_OK)
            st = kp_pipeline_mode(p) == KP_EXEC_GRAPH ? kp_pipeline_execute_graph(p, g_s)
                                                      : kp_pipeline_execute_stream(p, g_s);
        check(st, "execute");
    }
    if (kp_stream_sync(g_s) != KP_OK) abort();
    for (size_t i = 0; i < ni; i++) kp_free(g_dev, in[i].data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kp_pipeline_t p = (kp_pipeline_t)0x1;
    kp_clear_error();
    kp_status st = kp_pipeline_create_from_json(g_dev, text, &p);
    check(st, "create");
    if (st != KP_OK && p) abort(); /* a failure leaves *out NULL */
    if (st == KP_OK) {
        kp_pipeline_report r;
        inspect(p, &r);
        if (r.arena_bytes <= (1u << 20)) run(p, &r);
        kp_pipeline_destroy(p);
    }
    free(text);
    return 0;
}
