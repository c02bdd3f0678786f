/* libFuzzer harness for the flow JSON reader. Every input is read as a flow
 * on the cpu backend; a refused one must come with a non-empty
 * kp_last_error() and no flow; an accepted one is inspected and destroyed
 * without running (a source may run for ever).
 *   build-clang/tests/fuzz_flow -dict=tests/fuzz/flow.dict CORPUS_DIR tests/fuzz/seeds/flow */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kpipe/kpipe.h"

static kp_device_t g_dev;
static kp_allocator_t g_alloc;

static void quiet(kp_log_level level, const char *msg, void *user) {}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    if (kp_device_open("cpu", &g_dev) != KP_OK) abort();
    /* Creating a flow sets up its pipelines, whose arenas a spec may size
     * at gigabytes; a budget on the device allocator turns those into the
     * library's own out-of-memory errors instead of the fuzzer's limit. */
    kp_allocator_config cfg = KP_ALLOCATOR_CONFIG_INIT;
    cfg.budget_bytes = (size_t)512 << 20;
    if (kp_allocator_create(g_dev, KP_ALLOCATOR_DEVICE, &cfg, &g_alloc) != KP_OK ||
        kp_device_set_allocator(g_dev, KP_ALLOCATOR_DEVICE, g_alloc) != KP_OK)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    kp_flow_t f = (kp_flow_t)0x1;
    kp_clear_error();
    kp_status st = kp_flow_create_from_json(g_dev, text, &f);
    if (st != KP_OK && (kp_last_error()[0] == '\0' || f)) {
        fprintf(stderr, "refused with %s, detail \"%s\", flow %p\n", kp_status_name(st),
                kp_last_error(), (void *)f);
        abort();
    }
    if (st == KP_OK) {
        kp_flow_snapshot h;
        if (kp_flow_health(f, &h) != KP_OK || h.n_stages < 2 || h.running) abort();
        kp_flow_destroy(f);
    }
    free(text);
    return 0;
}
