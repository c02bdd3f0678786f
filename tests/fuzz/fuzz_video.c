/* libFuzzer harness for video files: demux (any container FFmpeg reads)
 * and software decode, on the cpu backend. Every input is written to a file
 * and read to its end through kp_video_reader_t; a refused one must come
 * with a non-empty kp_last_error(), and frames must keep within the
 * reader's maximum size, at its pitch.
 *   build-clang/tests/fuzz_video CORPUS_DIR tests/fuzz/seeds/video */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kpipe/kpipe.h"

static kp_device_t g_dev;
static kp_stream_t g_stream;
static char g_path[64];

static void quiet(kp_log_level level, const char *msg, void *user) {}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    kp_log_set_callback(quiet, NULL, KP_LOG_OFF);
    if (kp_device_open("cpu", &g_dev) != KP_OK || kp_stream_create(g_dev, &g_stream) != KP_OK)
        abort();
    snprintf(g_path, sizeof g_path, "/tmp/kp_fuzz_video_%ld.bin", (long)getpid());
    return 0;
}

static void refused(kp_status st) {
    if (kp_last_error()[0] == '\0') {
        fprintf(stderr, "refused with %s and no detail\n", kp_status_name(st));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!kp_video_built()) return 0;
    FILE *f = fopen(g_path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    kp_clear_error();
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.decoder = KP_VIDEO_DECODE_SOFTWARE;
    cfg.threads = 1;
    /* the last byte's low bit: two sessions, through the key frame index,
     * the ranges and the NAL walk (src/video/range.c, parallel.c) */
    cfg.parallel = size && (data[size - 1] & 1) ? 2 : 0;
    /* its next bit: frames may change size up to 640x480 */
    if (size && (data[size - 1] & 2)) {
        cfg.max_width = 640;
        cfg.max_height = 480;
    }
    kp_video_reader_t r = NULL;
    kp_status st = kp_video_reader_open(g_dev, g_path, &cfg, &r);
    if (st != KP_OK) {
        refused(st);
        return 0;
    }
    kp_video_reader_info in;
    if (kp_video_reader_get_info(r, &in) != KP_OK) abort();
    /* a header may promise a huge picture: taken as far as 64 MiB */
    void *buf = NULL;
    if (in.frame_bytes <= ((size_t)64 << 20) && kp_malloc(g_dev, in.frame_bytes, &buf) == KP_OK) {
        for (int i = 0; i < 16; i++) {
            kp_video_frame vf;
            bool eos = false;
            st = kp_video_reader_next(r, g_stream, buf, in.frame_bytes, &vf, &eos);
            if (st != KP_OK) {
                refused(st);
                break;
            }
            if (eos) break;
            /* any even size within the reader's maximum (kpipe/video.h): a
             * file's header may announce a size its pictures do not have */
            if (vf.width < 2 || vf.height < 2 || vf.width % 2 || vf.height % 2 ||
                vf.width > in.max_width || vf.height > in.max_height || vf.pitch != in.pitch)
                abort();
        }
        if (kp_stream_sync(g_stream) != KP_OK) abort();
        kp_free(g_dev, buf);
    }
    kp_clear_error();
    kp_video_reader_close(r);
    return 0;
}
