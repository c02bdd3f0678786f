/* libFuzzer harness for the y4m reader. Every input is written to a file
 * and read to its end by a flow (y4m source, null sink) on the cpu backend;
 * a refused one must come with a non-empty kp_last_error(), and a run that
 * ends must have passed on whole frames only.
 *   build-clang/tests/fuzz_y4m -dict=tests/fuzz/y4m.dict CORPUS_DIR tests/fuzz/seeds/y4m */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kpipe/kpipe.h"

static kp_device_t g_dev;
static char g_path[64];
static char g_json[256];

static void quiet(kp_log_level level, const char *msg, void *user) {}

static void budget(kp_allocator_kind kind) {
    /* a header may ask for 16384 x 16384 frames: the budgets turn those
     * into the library's out-of-memory errors, not the fuzzer's limit */
    kp_allocator_t a;
    kp_allocator_config cfg = KP_ALLOCATOR_CONFIG_INIT;
    cfg.budget_bytes = (size_t)256 << 20;
    if (kp_allocator_create(g_dev, kind, &cfg, &a) != KP_OK ||
        kp_device_set_allocator(g_dev, kind, a) != KP_OK)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    if (kp_device_open("cpu", &g_dev) != KP_OK) abort();
    budget(KP_ALLOCATOR_DEVICE);
    budget(KP_ALLOCATOR_PINNED);
    snprintf(g_path, sizeof g_path, "/tmp/kp_fuzz_y4m_%ld.y4m", (long)getpid());
    snprintf(g_json, sizeof g_json,
             "{\"kpipe_flow\": 1, \"stages\": [{\"name\": \"in\", \"source\": \"y4m\", "
             "\"path\": \"%s\", \"frames\": 8},"
             "{\"name\": \"out\", \"sink\": \"null\", \"queue\": {\"capacity\": 2}}]}",
             g_path);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    kp_flow_t fl = NULL;
    kp_clear_error();
    kp_status st = kp_flow_create_from_json(g_dev, g_json, &fl);
    if (st == KP_OK) st = kp_flow_start(fl);
    if (st == KP_OK) {
        st = kp_flow_wait(fl);
        kp_flow_snapshot h;
        if (kp_flow_health(fl, &h) != KP_OK || !h.consistent || h.frames_done > 8) abort();
    }
    if (st != KP_OK && kp_last_error()[0] == '\0') {
        fprintf(stderr, "refused with %s and no detail\n", kp_status_name(st));
        abort();
    }
    kp_flow_destroy(fl);
    return 0;
}
