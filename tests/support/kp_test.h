/* Helpers shared by the tests (include after cmocka's headers). */
#ifndef KP_TEST_H
#define KP_TEST_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kpipe/kpipe.h"

/* Fails the test with the status name and the library's detail. */
#define KPT_OK(expr)                                                                       \
    do {                                                                                   \
        kp_status kpt_st_ = (expr);                                                        \
        if (kpt_st_ != KP_OK) {                                                            \
            print_error("%s = %s: %s\n", #expr, kp_status_name(kpt_st_), kp_last_error()); \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

/* Expects a given failure status and a non-empty detail. */
#define KPT_FAILS(expr, want)                                                          \
    do {                                                                               \
        kp_status kpt_st_ = (expr);                                                    \
        if (kpt_st_ != (want)) {                                                       \
            print_error("%s = %s, expected %s (%s)\n", #expr, kp_status_name(kpt_st_), \
                        kp_status_name(want), kp_last_error());                        \
            fail();                                                                    \
        }                                                                              \
        assert_true(kp_last_error()[0] != '\0');                                       \
    } while (0)

/* Stores a failing status in `st` and jumps to `label`. */
#define KPT_TRY(expr, st, label)       \
    do {                               \
        (st) = (expr);                 \
        if ((st) != KP_OK) goto label; \
    } while (0)

/* The sample pipeline, ReLU(input0 + input1) over n floats, in `mode`:
 * inputs input0 and input1, output "output". */
static inline const char *kpt_sample_json(char *buf, size_t len, const char *mode, int64_t n) {
    snprintf(buf, len,
             "{\"kpipe_spec\": 1, \"execution\": \"%s\", \"modules\": ["
             "{\"type\": \"engine\", \"id\": \"a\", \"params\": {\"size\": %lld}},"
             "{\"type\": \"relu\", \"id\": \"b\", \"params\": {\"size\": %lld}}],"
             "\"connections\": [\"a.result0 -> b.input\"],"
             "\"inputs\": {\"input0\": \"a.arg0\", \"input1\": \"a.arg1\"},"
             "\"outputs\": {\"output\": \"b.output\"}}",
             mode, (long long)n, (long long)n);
    return buf;
}

static inline uint64_t kpt_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Uniform in [-1, 1). */
static inline float kpt_randf(uint64_t *s) {
    return (float)((double)(kpt_rand(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void kpt_fill(float *x, int n, uint64_t *s) {
    for (int i = 0; i < n; i++) x[i] = kpt_randf(s);
}

/* Largest |a - b| / max(1, |b|); prints the worst index when over tol. */
static inline int kpt_close(const float *a, const float *b, int n, double tol, const char *what) {
    double worst = 0;
    int at = -1;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / fmax(1.0, fabs((double)b[i]));
        if (!(d <= worst)) {
            worst = d;
            at = i;
        }
    }
    if (!(worst <= tol)) {
        fprintf(stderr, "%s: element %d differs: %.9g vs %.9g (rel %.3g > %.3g)\n", what, at,
                (double)a[at], (double)b[at], worst, tol);
        return 0;
    }
    return 1;
}

/* Every frame of a video file, decoded by `decoder` into `format`
 * (KP_PIXEL_NONE: the file's), copied to the host one after another in
 * data, with their pts; free(data) after. A failing open or read comes
 * back as its status, with the frames read until then. */
#define KPT_MAX_FRAMES 512
typedef struct kpt_frames {
    int n;
    size_t bytes; /* a frame's */
    uint8_t *data;
    int64_t pts[KPT_MAX_FRAMES];
    kp_video_reader_info info;
} kpt_frames;
kp_status kpt_read_frames(kp_device_t dev, const char *path, kp_video_decoder decoder,
                          kp_pixel_format format, kpt_frames *out);
/* The same through a reader with configuration `cfg`. */
kp_status kpt_read_frames_cfg(kp_device_t dev, const char *path, const kp_video_reader_config *cfg,
                              kpt_frames *out);

/* KPT_ASAN, KPT_TSAN: defined in a build under AddressSanitizer or
 * ThreadSanitizer (gcc's __SANITIZE_*__, clang's __has_feature), for the
 * figures such a build slows or holds. */
#if defined(__SANITIZE_ADDRESS__)
#define KPT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KPT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KPT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KPT_TSAN 1
#endif
#endif

#endif
