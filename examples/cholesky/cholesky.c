/* Tiled Cholesky with kpipe tasks: factors an n x n symmetric positive
 * definite matrix in tiles, in the stream form and as one graph replayed,
 * prints GFLOP/s (n^3 / 3 flops) and the residual ||A - L L^T|| / ||A||.
 *
 *   cholesky N [--nb NB] [--device cpu|cuda] [--reps R] [--streams S]
 *              [--compare] [--dot FILE]
 *
 * --compare also times cuSOLVER's one cusolverDnSpotrf call over the whole
 * matrix (cuda). Each timed factorization starts from a fresh copy of the
 * matrix, made on the device before the timing starts. Exits 1 when a
 * factorization fails or the residual is over 1e-4. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tiles.h"

#define CHECK(call)                                                                     \
    do {                                                                                \
        kp_status st_ = (call);                                                         \
        if (st_ != KP_OK) {                                                             \
            fprintf(stderr, "cholesky: %s: %s\n", kp_status_str(st_), kp_last_error()); \
            return 1;                                                                   \
        }                                                                               \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct run {
    kp_device_t dev;
    kp_stream_t s;
    kp_event_t e0, e1;
    float *mat, *pristine;
    int *info;
    int64_t n, nt;
    size_t bytes;
} run;

/* A fresh copy of the matrix on the device, then e0: the timing starts there. */
static kp_status restart(run *r) {
    kp_status st = kp_memcpy_async(r->s, r->mat, r->pristine, r->bytes);
    if (st == KP_OK) st = kp_event_record(r->e0, r->s);
    return st;
}

static kp_status stop(run *r, double *ms) {
    kp_status st = kp_event_record(r->e1, r->s);
    if (st == KP_OK) st = kp_stream_sync(r->s);
    float f = 0;
    if (st == KP_OK) st = kp_event_elapsed_ms(r->e0, r->e1, &f);
    *ms = f;
    return st;
}

/* Every diagonal tile factored; the residual of the result. */
static int verify(run *r, const float *a, const char *what) {
    int *info = malloc((size_t)r->nt * sizeof *info);
    float *l = malloc(r->bytes);
    double *scratch = malloc(3 * (size_t)r->n * sizeof *scratch);
    int bad = !info || !l || !scratch;
    if (!bad)
        bad = kp_memcpy_dtoh(r->dev, info, r->info, (size_t)r->nt * sizeof *info) != KP_OK ||
              kp_memcpy_dtoh(r->dev, l, r->mat, r->bytes) != KP_OK;
    for (int64_t k = 0; !bad && k < r->nt; k++)
        if (info[k]) {
            printf("%s: tile %lld is not positive definite at column %d\n", what, (long long)k,
                   info[k]);
            bad = 1;
        }
    if (!bad) {
        int probes = r->n <= 1024 ? 0 : 8;
        double res = chol_residual(r->n, a, l, probes, scratch);
        printf("  %s residual ||A - L L^T|| / ||A||: %.3g (%s)\n", what, res,
               probes ? "estimated from 8 random vectors" : "exact");
        bad = !(res <= 1e-4);
    }
    free(info);
    free(l);
    free(scratch);
    return bad;
}

int main(int argc, char **argv) {
    int64_t n = 0, nb = 0;
    int reps = 5, streams = 4, compare = 0;
    const char *device = "cuda", *dot = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--nb") && v)
            nb = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--reps") && v)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && v)
            streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dot") && v)
            dot = argv[++i];
        else if (!strcmp(argv[i], "--compare"))
            compare = 1;
        else if (argv[i][0] != '-' && !n)
            n = atoll(argv[i]);
        else {
            fprintf(stderr, "cholesky: unknown or incomplete option %s\n", argv[i]);
            return 2;
        }
    }
    if (n < 1 || n > 65536 || reps < 1 || reps > 1000 || streams < 1 || streams > 16) {
        fprintf(stderr, "usage: cholesky N (1 .. 65536) [--nb NB] [--device cpu|cuda] "
                        "[--reps 1..1000] [--streams 1..16] [--compare] [--dot FILE]\n");
        return 2;
    }
    if (nb < 1) nb = n >= 8192 ? 1024 : n >= 2048 ? 512 : 128;
    if (nb > n) nb = n;
    run r = {0};
    r.n = n;
    r.nt = chol_tiles(n, nb);
    r.bytes = (size_t)n * (size_t)n * sizeof(float);
    CHECK(kp_device_open(device, &r.dev));
    float *a = malloc(r.bytes);
    if (!a) {
        fprintf(stderr, "cholesky: no host memory for %lld x %lld\n", (long long)n, (long long)n);
        return 1;
    }
    chol_make_spd(n, 42, a);
    chol_lib *lib;
    kp_tasks_t t;
    CHECK(chol_lib_create(r.dev, n, nb, &lib));
    CHECK(kp_tasks_create(r.dev, (size_t)streams, &t));
    CHECK(kp_stream_create(r.dev, &r.s));
    CHECK(kp_event_create(r.dev, &r.e0));
    CHECK(kp_event_create(r.dev, &r.e1));
    void *work;
    CHECK(kp_malloc(r.dev, r.bytes, (void **)&r.mat));
    CHECK(kp_malloc(r.dev, r.bytes, (void **)&r.pristine));
    CHECK(kp_malloc(r.dev, (size_t)r.nt * sizeof(int), (void **)&r.info));
    CHECK(kp_malloc(r.dev, chol_lib_work_bytes(lib), &work));
    CHECK(kp_memcpy_htod(r.dev, r.pristine, a, r.bytes));
    uint32_t bm, bw, bi;
    CHECK(kp_tasks_buffer_wrap(t, r.mat, r.bytes, &bm));
    CHECK(kp_tasks_buffer_wrap(t, work, chol_lib_work_bytes(lib), &bw));
    CHECK(kp_tasks_buffer_wrap(t, r.info, (size_t)r.nt * sizeof(int), &bi));
    double flop = (double)n * n * n / 3, *ms = calloc((size_t)reps, sizeof *ms);
    size_t n_tasks = 0;
    int bad = 0;

    /* the stream form: submit (dependencies found) and run, per factorization */
    double submit_ms = 0;
    kp_tasks_stats ts;
    for (int i = 0; i < reps; i++) {
        CHECK(restart(&r));
        double h0 = now_ms();
        CHECK(chol_submit(t, lib, bm, bw, bi, &n_tasks));
        submit_ms += now_ms() - h0;
        CHECK(kp_tasks_stats_get(t, &ts));
        if (i == 0 && dot) CHECK(kp_tasks_write_dot(t, dot));
        CHECK(kp_tasks_run(t, r.s));
        CHECK(stop(&r, &ms[i]));
    }
    printf("cholesky on %s: n %lld, tiles of %lld (%lld x %lld), %zu tasks, %llu edges kept of "
           "%llu found, %d streams\n",
           device, (long long)n, (long long)nb, (long long)r.nt, (long long)r.nt, n_tasks,
           (unsigned long long)ts.edges, (unsigned long long)ts.edges_found, streams);
    double m = median(ms, reps);
    printf("  stream form:  %9.3f ms  %9.1f GFLOP/s  (submit and dependencies %.1f us/task)\n", m,
           flop / m * 1e-6, submit_ms / reps / (double)n_tasks * 1e3);
    bad |= verify(&r, a, "stream form");

    /* the graph form: submitted and instantiated once, then replayed */
    double b0 = now_ms();
    CHECK(chol_submit(t, lib, bm, bw, bi, NULL));
    CHECK(kp_tasks_instantiate(t));
    double build = now_ms() - b0;
    for (int i = 0; i < reps; i++) {
        CHECK(restart(&r));
        CHECK(kp_tasks_launch(t, r.s));
        CHECK(stop(&r, &ms[i]));
    }
    m = median(ms, reps);
    printf("  graph form:   %9.3f ms  %9.1f GFLOP/s  (built in %.2f ms, replayed)\n", m,
           flop / m * 1e-6, build);
    bad |= verify(&r, a, "graph form");

    if (compare) {
#ifdef KP_HAVE_CUDA
        void *state = NULL;
        if (!strncmp(device, "cuda", 4)) {
            for (int i = 0; i < reps + 1; i++) { /* the first call sets up */
                CHECK(restart(&r));
                CHECK(chol_cuda_potrf_whole(kp_stream_native(r.s), r.mat, n, &state));
                CHECK(stop(&r, &ms[i ? i - 1 : 0]));
            }
            double c = median(ms, reps);
            printf("  cuSOLVER potrf, one call: %9.3f ms  %9.1f GFLOP/s\n", c, flop / c * 1e-6);
            printf("  graph form / cuSOLVER: %.3f (GFLOP/s ratio)\n", c / m);
            chol_cuda_potrf_whole_free(state);
        } else
#endif
            printf("  --compare: cuSOLVER needs a cuda device\n");
    }
    kp_tasks_destroy(t);
    chol_lib_destroy(lib);
    kp_free(r.dev, r.mat);
    kp_free(r.dev, r.pristine);
    kp_free(r.dev, r.info);
    kp_free(r.dev, work);
    kp_event_destroy(r.e0);
    kp_event_destroy(r.e1);
    kp_stream_destroy(r.s);
    kp_device_close(r.dev);
    free(a);
    free(ms);
    return bad;
}
