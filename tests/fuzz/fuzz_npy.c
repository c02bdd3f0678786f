/* libFuzzer harness for the .npy reader: every input is parsed from memory
 * and loaded from a file (a memfd), and the two must agree. A refused file
 * must come with a non-empty kp_last_error(); an accepted one must describe
 * exactly the bytes that follow its header.
 *   build-clang/tests/fuzz_npy CORPUS_DIR tests/fuzz/seeds/npy */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kpipe/kpipe.h"

static int g_fd = -1;
static char g_path[64];

static void quiet(kp_log_level level, const char *msg, void *user) {}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    g_fd = memfd_create("kpipe_fuzz_npy", 0);
    if (g_fd < 0) abort();
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    return 0;
}

static void fail(const char *why) {
    fprintf(stderr, "fuzz_npy: %s (%s)\n", why, kp_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kp_tensor_desc d, dl;
    size_t off = 0, bytes = 0;
    void *loaded = NULL;
    kp_clear_error();
    kp_status st = kp_npy_parse(data, size, &d, &off);
    if (st != KP_OK && kp_last_error()[0] == '\0') fail("parse refused without a detail");
    if (st == KP_OK) {
        int64_t need = kp_desc_bytes_needed(&d);
        if (kp_desc_validate(&d) != KP_OK || !kp_desc_is_contiguous(&d) || need < 0 || off > size ||
            (uint64_t)need != (uint64_t)(size - off))
            fail("parse accepted a header that does not describe the data");
    }
    if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    kp_clear_error();
    kp_status sl = kp_npy_load(g_path, &dl, &loaded, &bytes);
    if (sl != KP_OK && kp_last_error()[0] == '\0') fail("load refused without a detail");
    if ((sl == KP_OK) != (st == KP_OK)) fail("parse and load disagree");
    if (sl == KP_OK) {
        if (memcmp(&d, &dl, sizeof d) != 0 || bytes != size - off ||
            (bytes && memcmp(loaded, data + off, bytes) != 0))
            fail("load read other data than parse describes");
        kp_npy_free(loaded);
    } else if (loaded || bytes) {
        fail("a failed load left data behind");
    }
    return 0;
}
