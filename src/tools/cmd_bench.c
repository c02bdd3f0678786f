/* kpipe bench: tick latency (configure_io + execute + wait) per execution
 * mode as min / p50 / p90 / p99 / max, and throughput with ticks in flight. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options.h"
#include "tool-impl.h"

static const char kpt_bench_usage[] =
    "usage: kpipe bench SPEC.json|MODEL.onnx [options]\n\n"
    "Measures, for each execution mode, the latency of one tick (configure_io +\n"
    "execute + waiting for completion) over many ticks after a warm-up, and the\n"
    "throughput with ticks in flight (no host wait between ticks).\n\n"
    "  --device D   cpu, cuda or cuda:N (default: cuda when present, else cpu)\n"
    "  --mode M     graph or stream (default: both)\n"
    "  --max N=V,...  a model's symbolic dimensions' maxima, by name (MODEL.onnx)\n"
    "  --fuse F       on or off: a model's fused convolution epilogues (MODEL.onnx)\n"
    "  --precision P  fp32, tf32 or fp16: a model's cuda convolutions and GEMMs (MODEL.onnx)\n"
    "  --tune T       on or off: measure cuDNN's convolution algorithms at setup (MODEL.onnx)\n"
    "  --algo-cache D folder of the convolutions' algorithm cache, or off (MODEL.onnx)\n"
    "  --ticks N    measured ticks (default 10000)\n"
    "  --warmup N   ticks run before measuring (default 500)\n"
    "  --shapes L   cycle the pipeline's dynamic dimensions through the sizes of the\n"
    "               comma-separated list L, one per tick (e.g. 1024,4096,16384), and\n"
    "               print the graph cache's stats\n"
    "  --json FILE  also write the results as JSON\n\n"
    "A flow file (\"kpipe_flow\": 1) is run to its end of stream as by kpipe flow\n"
    "--quiet: frames/s and each stage's host and device time; it takes --device,\n"
    "--json and --trace FILE (a Chrome trace, one row per stage).\n";

typedef struct kpt_bench_result {
    int mode;
    kpt_stats lat_us;
    double flight_us_per_tick;
    kp_graph_stats cache; /* graph mode */
    double setup_ms;      /* from the file to the first tick's end: create, setup, warm-up */
} kpt_bench_result;

typedef struct kpt_shapes {
    int64_t v[KPT_MAX_SHAPES];
    size_t n;
} kpt_shapes;

/* "1024,4096,16384": positive sizes, at most KPT_MAX_SHAPES. */
static bool kpt_parse_shapes(const char *text, kpt_shapes *out) {
    const char *p = text;
    out->n = 0;
    for (;;) {
        char *end;
        long long v;
        if (*p < '0' || *p > '9' || out->n == KPT_MAX_SHAPES) break;
        errno = 0;
        v = strtoll(p, &end, 10);
        if (errno || v < 1) break;
        out->v[out->n++] = v;
        if (*end == '\0') return true;
        if (*end != ',') break;
        p = end + 1;
    }
    fprintf(stderr, "--shapes: expected up to %d positive sizes separated by commas, got \"%s\"\n",
            KPT_MAX_SHAPES, text);
    return false;
}

static void kpt_progress(long done, long total, const char *what) {
    static int last = -1;
    int pct = (int)(done * 100 / total);
    if (pct == last && done != total) return;
    last = pct;
    int bar = pct / 4;
    fprintf(stderr, "\r%-7s [%.*s%*s] %3d%%", what, bar, "#########################", 25 - bar, "",
            pct);
    if (done == total) {
        fprintf(stderr, "\r%*s\r", 48, "");
        last = -1;
    }
}

static const char *kpt_s(uint64_t n) { return n == 1 ? "" : "s"; }

/* The graph cache's counters as what happened. Graphs are made before the
 * first call too (the first shape's, by build_graph), and those are no
 * miss: a miss is a call that found no graph for its shape. Each graph
 * made is either instantiated or an update of a kept one, so what the
 * misses did not make was made ahead. */
static void kpt_print_cache(const kp_graph_stats *c) {
    uint64_t made = c->updates + c->instantiations;
    uint64_t on_miss = c->misses - c->fallbacks;
    printf("graph cache: %zu graph%s held, %zu bytes; %" PRIu64 " call%s: %" PRIu64
           " hit%s, %" PRIu64 " miss%s",
           c->graphs, kpt_s(c->graphs), c->bytes, c->calls, kpt_s(c->calls), c->hits,
           kpt_s(c->hits), c->misses, c->misses == 1 ? "" : "es");
    if (c->fallbacks) printf(" (%" PRIu64 " run without a graph: fallback)", c->fallbacks);
    printf("; %" PRIu64 " graph%s made", made, kpt_s(made));
    if (made && made >= on_miss) {
        uint64_t ahead = made - on_miss;
        if (!on_miss)
            printf(" before the first call (for its shape)");
        else if (!ahead)
            printf(" on misses (shapes without a graph yet)");
        else
            printf(": %" PRIu64 " before the first call (for its shape), %" PRIu64
                   " on misses (shapes without a graph yet)",
                   ahead, on_miss);
    }
    printf(", by %" PRIu64 " capture%s, %" PRIu64 " instantiation%s and %" PRIu64
           " update%s; %" PRIu64 " eviction%s\n",
           c->captures, kpt_s(c->captures), c->instantiations, kpt_s(c->instantiations), c->updates,
           kpt_s(c->updates), c->evictions, kpt_s(c->evictions));
}

static kp_status kpt_bench_mode(const char *device, const char *spec, int mode, long ticks,
                                long warmup, const kpt_shapes *shapes, kpt_bench_result *res) {
    kpt_runner r;
    memset(res, 0, sizeof *res);
    double t_setup = kpt_now_us();
    kp_status st = kpt_runner_open(&r, device, spec, mode);
    if (st == KP_OK && shapes->n) {
        bool any = false; /* a static spec would run its one shape every tick */
        for (size_t i = 0; i < r.n_in; i++) any = any || r.dynamic[i];
        if (!any)
            st = kpt_error(KP_ERR_INVALID_ARG,
                           "--shapes: %s has no dynamic dimension to cycle (its inputs are "
                           "static; declare a size as {\"max\": N} to make one dynamic)",
                           spec);
        memcpy(r.shapes, shapes->v, sizeof r.shapes);
        r.n_shapes = shapes->n;
    }
    double *lat = malloc((size_t)ticks * sizeof *lat);
    bool tty = isatty(STDERR_FILENO);
    const char *name = kp_exec_mode_str((kp_exec_mode)mode);
    if (!lat && st == KP_OK)
        st = kpt_error(KP_ERR_OUT_OF_MEMORY, "no memory for %ld samples", ticks);
    if (st == KP_OK) st = kpt_runner_inputs(&r, NULL, 0, 1);
    if (st == KP_OK) st = kpt_runner_prepare(&r);
    if (st == KP_OK) st = kpt_runner_tick(&r, true);
    res->setup_ms = (kpt_now_us() - t_setup) / 1e3;
    for (long t = 0; st == KP_OK && t < warmup; t++) st = kpt_runner_tick(&r, true);
    for (long t = 0; st == KP_OK && t < ticks; t++) {
        double t0 = kpt_now_us();
        st = kpt_runner_tick(&r, true);
        lat[t] = kpt_now_us() - t0;
        if (tty && ticks >= 1000) kpt_progress(t + 1, ticks, name);
    }
    if (st == KP_OK) {
        /* ticks in flight: the host only enqueues; the stream and the
         * descriptor staging ring apply the backpressure */
        double t0 = kpt_now_us();
        for (long t = 0; st == KP_OK && t < ticks; t++) st = kpt_runner_tick(&r, false);
        if (st == KP_OK) st = kp_stream_sync(r.s);
        res->flight_us_per_tick = (kpt_now_us() - t0) / (double)ticks;
    }
    if (st == KP_OK) {
        res->mode = mode;
        res->lat_us = kpt_stats_of(lat, (size_t)ticks);
        if (kp_pipeline_graph_cache(r.p))
            st = kp_graph_cache_stats(kp_pipeline_graph_cache(r.p), &res->cache);
    }
    free(lat);
    kpt_runner_close(&r);
    return st;
}

/* JSON strings must be UTF-8; a path need not be. Bytes of an invalid
 * sequence become '?' so the file still says which spec it measured. */
static json_t *kpt_json_text(const char *text) {
    json_t *j = json_string(text);
    if (j) return j;
    char *copy = strdup(text);
    if (!copy) return NULL;
    for (char *c = copy; *c; c++)
        if ((unsigned char)*c >= 0x80) *c = '?';
    j = json_string(copy);
    free(copy);
    return j;
}

/* Writes the results to `f`, opened before the runs so that a path that
 * cannot be written fails at once, not after the benchmark. */
static kp_status kpt_bench_json(FILE *f, const char *path, const char *spec, const char *device,
                                long ticks, long warmup, const kpt_bench_result *res, size_t n) {
    json_t *modes = json_object();
    for (size_t i = 0; i < n; i++) {
        const kpt_stats *s = &res[i].lat_us;
        const kp_graph_stats *c = &res[i].cache;
        json_t *m = json_pack("{s:{s:f,s:f,s:f,s:f,s:f,s:f},s:f,s:f,s:f}", "latency_us", "min",
                              s->min, "p50", s->p50, "p90", s->p90, "p99", s->p99, "max", s->max,
                              "mean", s->mean, "flight_us_per_tick", res[i].flight_us_per_tick,
                              "throughput_ticks_per_s", 1e6 / res[i].flight_us_per_tick,
                              "setup_ms", res[i].setup_ms);
        if (m && res[i].mode == KP_EXEC_GRAPH)
            json_object_set_new(
                m, "graph_cache",
                json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "graphs", (json_int_t)c->graphs,
                          "hits", (json_int_t)c->hits, "misses", (json_int_t)c->misses, "captures",
                          (json_int_t)c->captures, "updates", (json_int_t)c->updates,
                          "instantiations", (json_int_t)c->instantiations, "evictions",
                          (json_int_t)c->evictions, "bytes", (json_int_t)c->bytes));
        json_object_set_new(modes, kp_exec_mode_str((kp_exec_mode)res[i].mode), m);
    }
    json_t *root = json_pack("{s:o,s:o,s:I,s:I,s:o}", "spec", kpt_json_text(spec), "device",
                             kpt_json_text(device), "ticks", (json_int_t)ticks, "warmup",
                             (json_int_t)warmup, "modes", modes);
    int rc = root ? json_dumpf(root, f, JSON_INDENT(2)) : -1;
    json_decref(root);
    if (rc == 0 && fputc('\n', f) == EOF) rc = -1;
    if (fclose(f) != 0) rc = -1;
    return rc == 0 ? KP_OK : kpt_error(KP_ERR_IO, "--json %s: writing the results failed", path);
}

static int kpt_bench_parse(int argc, char **argv, const char **spec, const char **device, int *mode,
                           long *ticks, long *warmup, const char **json, kpt_shapes *shapes) {
    const char *v;
    int r;
    for (int i = 1; i < argc; i++) {
        if (kpt_is_help(argv[i])) {
            fputs(kpt_bench_usage, stdout);
            return -1;
        }
        if ((r = kpt_model_option(argc, argv, &i, "bench")) != 0) {
            if (r < 0) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0) return 2;
            *device = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--mode", &v)) != 0) {
            if (r < 0 || !kpt_parse_mode(v, mode)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--ticks", &v)) != 0) {
            if (r < 0 || !kpt_parse_count("--ticks", v, 1, 100000000, ticks)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--warmup", &v)) != 0) {
            if (r < 0 || !kpt_parse_count("--warmup", v, 0, 100000000, warmup)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--shapes", &v)) != 0) {
            if (r < 0 || !kpt_parse_shapes(v, shapes)) return 2;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--json", &v)) != 0) {
            if (r < 0) return 2;
            *json = v;
        } else if (argv[i][0] == '-' || *spec) {
            fprintf(stderr, "kpipe bench: unexpected argument \"%s\"\n\n%s", argv[i],
                    kpt_bench_usage);
            return 2;
        } else {
            *spec = argv[i];
        }
    }
    if (!*spec) {
        fprintf(stderr, "kpipe bench: no spec given\n\n%s", kpt_bench_usage);
        return 2;
    }
    return 0;
}

/* A flow file (a JSON object with "kpipe_flow") is benchmarked as a run to
 * its end of stream: kpipe flow --quiet, with --device, --json and
 * --trace; the tick options do not apply. Returns -1 for a spec. */
static int kpt_bench_flow(int argc, char **argv) {
    static const char *const with_value[] = {"--device", "--mode", "--ticks", "--warmup",
                                             "--shapes", "--json", "--trace", NULL};
    const char *file = NULL;
    for (int i = 1; i < argc && !file; i++) {
        bool takes = false;
        for (const char *const *o = with_value; *o && !takes; o++) takes = !strcmp(argv[i], *o);
        if (takes)
            i++;
        else if (argv[i][0] != '-')
            file = argv[i];
    }
    json_t *root = file ? json_load_file(file, 0, NULL) : NULL;
    bool flow = root && json_object_get(root, "kpipe_flow");
    json_decref(root);
    if (!flow) return -1;
    char *args[16] = {"flow", (char *)file, "--quiet"};
    int n = 3;
    for (int i = 1; i < argc; i++) {
        if (argv[i] == file) continue;
        bool pass = !strcmp(argv[i], "--device") || !strcmp(argv[i], "--json") ||
                    !strcmp(argv[i], "--trace");
        if (!pass || i + 1 == argc || n + 2 > 16) {
            fprintf(stderr,
                    "kpipe bench: %s is a flow, which runs to its end of stream: it takes "
                    "--device, --json and --trace (with a value), not \"%s\"\n",
                    file, argv[i]);
            return 2;
        }
        args[n++] = argv[i];
        args[n++] = argv[++i];
    }
    return kpt_cmd_flow(n, args);
}

int kpt_cmd_bench(int argc, char **argv) {
    int flow_rc = kpt_bench_flow(argc, argv);
    if (flow_rc >= 0) return flow_rc;
    const char *spec = NULL, *device = NULL, *json = NULL;
    int mode = KP_EXEC_FROM_SPEC;
    long ticks = 10000, warmup = 500;
    kpt_shapes shapes = {{0}, 0};
    int rc = kpt_bench_parse(argc, argv, &spec, &device, &mode, &ticks, &warmup, &json, &shapes);
    if (rc) return rc < 0 ? 0 : rc;
    if (!device) device = kpt_default_device();
    FILE *out = json ? fopen(json, "w") : NULL;
    if (json && !out)
        return kpt_fail("bench",
                        kpt_error(KP_ERR_IO, "--json %s: cannot write: %s", json, strerror(errno)));
    int modes[2] = {KP_EXEC_GRAPH, KP_EXEC_STREAM};
    size_t n_modes = mode == KP_EXEC_FROM_SPEC ? 2 : 1;
    if (n_modes == 1) modes[0] = mode;
    kpt_bench_result res[2];
    printf("kpipe bench %s on %s: %ld ticks after %ld warm-up ticks\n", spec, device, ticks,
           warmup);
    printf("%-7s %10s %10s %10s %10s %10s   %s\n", "mode", "min", "p50", "p90", "p99", "max",
           "in flight");
    for (size_t i = 0; i < n_modes; i++) {
        kp_status st = kpt_bench_mode(device, spec, modes[i], ticks, warmup, &shapes, &res[i]);
        if (st != KP_OK) {
            if (out) {
                fclose(out);
                unlink(json); /* no results: leave no empty file behind */
            }
            return kpt_fail("bench", st);
        }
        const kpt_stats *s = &res[i].lat_us;
        printf("%-7s %8.2fus %8.2fus %8.2fus %8.2fus %8.2fus   %.2fus/tick (%.0f ticks/s); "
               "setup %.1f ms\n",
               kp_exec_mode_str((kp_exec_mode)modes[i]), s->min, s->p50, s->p90, s->p99, s->max,
               res[i].flight_us_per_tick, 1e6 / res[i].flight_us_per_tick, res[i].setup_ms);
    }
    for (size_t i = 0; i < n_modes; i++)
        if (res[i].mode == KP_EXEC_GRAPH) kpt_print_cache(&res[i].cache);
    if (shapes.n) {
        printf("shapes cycled per tick:");
        for (size_t k = 0; k < shapes.n; k++)
            printf("%s%lld", k ? "," : " ", (long long)shapes.v[k]);
        printf("\n");
    }
    printf("latency: one tick = configure_io + execute + wait for completion (host clock)\n");
    if (out) {
        kp_status st = kpt_bench_json(out, json, spec, device, ticks, warmup, res, n_modes);
        if (st != KP_OK) return kpt_fail("bench", st);
    }
    return 0;
}
