/* kpipe flow: runs a flow file to end of stream, with a live status line on
 * a terminal, and prints its health at the end. Ctrl-C cancels it. */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "options.h"
#include "tool-impl.h"

static const char kpt_flow_usage[] =
    "usage: kpipe flow FLOW.json [--device D] [--json FILE] [--trace FILE] [--dot FILE]\n"
    "                  [--quiet]\n\n"
    "Runs the flow (\"kpipe_flow\": 1) to end of stream: stages on threads joined by\n"
    "bounded queues. On a terminal a status line shows frames/s, queue depths, drops\n"
    "and device bytes; at the end the health report is printed. Ctrl-C cancels the\n"
    "flow (exit status 130). A stage's error exits 1 naming the stage.\n\n"
    "  --device D   cpu, cuda or cuda:N (default: cuda when present, else cpu)\n"
    "  --json FILE  also write the final health report as JSON\n"
    "  --trace FILE write a Chrome trace (chrome://tracing, Perfetto): one row per\n"
    "               stage, one slice per frame (the last 65536 stage runs)\n"
    "  --dot FILE   draw the flow's graph as Graphviz DOT before it runs\n"
    "  --quiet      no status line\n\n"
    "A flow with several source streams also gets a line per stream: frames,\n"
    "frames/s, drops, the source's time per frame and what it says (its decoder,\n"
    "reconnections).\n";

/* Each source stream's figures, where there are several. */
static void kpt_report_streams(kp_flow_t f) {
    size_t n = 0;
    if (kp_flow_streams(f, NULL, 0, &n) != KP_OK || n < 2) {
        kp_clear_error();
        return;
    }
    kp_flow_stream_stats *s = calloc(n, sizeof *s);
    if (!s || kp_flow_streams(f, s, n, &n) != KP_OK) {
        free(s);
        return;
    }
    printf("  streams: %zu\n", n);
    for (size_t i = 0; i < n; i++)
        printf("    %3u %-12s %8llu frames %8.1f/s  %llu drops  source p50 %.0f us p99 %.0f us  "
               "end to end p50 %.0f us p99 %.0f us  %s\n",
               s[i].stream, s[i].stage, (unsigned long long)s[i].frames, s[i].frames_per_s,
               (unsigned long long)s[i].drops, s[i].host_p50_us, s[i].host_p99_us,
               s[i].latency_p50_us, s[i].latency_p99_us, s[i].detail);
    free(s);
}

static volatile sig_atomic_t kpt_interrupted;
static void kpt_on_sigint(int sig) { kpt_interrupted = 1; }

static void kpt_status_line(const kp_flow_snapshot *h, double fps) {
    fprintf(stderr, "\r%8llu frames %9.1f frames/s  queues", (unsigned long long)h->frames_done,
            fps);
    for (size_t i = 1; i < h->n_stages; i++)
        fprintf(stderr, " %zu/%zu", h->queues[i].depth, h->queues[i].capacity);
    fprintf(stderr, "  drops %llu  device %zu MiB   ", (unsigned long long)h->frames_dropped,
            h->device_bytes >> 20);
}

/* Devices and the links between them, where a flow runs on several. */
static void kpt_report_devices(const kp_flow_snapshot *h) {
    if (h->n_devices < 2) return;
    printf("  devices:");
    for (size_t d = 0; d < h->n_devices; d++)
        printf("%s %s (%llu runs, %.1f MiB of frames)", d ? "," : "", h->devices[d].name,
               (unsigned long long)h->devices[d].runs, h->devices[d].frame_bytes / 1048576.0);
    printf("\n");
    for (size_t l = 0; l < h->n_links; l++) {
        const kp_flow_link_stats *k = &h->links[l];
        printf("  link %s -> %s, %s: %llu frames, %.1f MiB, %.2f GB/s\n", k->from, k->to,
               kp_handoff_str(k->handoff), (unsigned long long)k->frames, k->bytes / 1048576.0,
               k->bytes_per_s * 1e-9);
    }
    if (h->staged_frames)
        printf("  %llu frames went through host memory (no peer access)\n",
               (unsigned long long)h->staged_frames);
}

/* Remote queues' ends. */
static void kpt_report_remote(kp_flow_t f, const kp_flow_snapshot *h) {
    for (size_t i = 0; i < h->n_stages; i++) {
        kp_flow_remote_stats r;
        if (kp_flow_remote(f, i, &r) != KP_OK) {
            kp_clear_error();
            continue;
        }
        printf("  %s: remote %s %s, capacity %zu, %llu frames, %.1f MiB", h->stages[i].name,
               r.receiver ? "receiving on" : "sending to", r.address, r.capacity,
               (unsigned long long)r.frames, r.bytes / 1048576.0);
        if (!r.receiver)
            printf(", at most %llu in flight, %llu waits for credit",
                   (unsigned long long)r.max_in_flight, (unsigned long long)r.credit_waits);
        if (!r.receiver)
            printf(", at most %llu on the wire, %llu posted by its progress thread",
                   (unsigned long long)r.max_on_wire, (unsigned long long)r.handed);
        printf("%s\n", r.zero_copy ? (r.direct ? ", device memory, no copy" : ", no copy")
                       : r.direct  ? ", from device memory"
                                   : ", through pinned host memory");
    }
}

static void kpt_report(const kp_flow_snapshot *h, double secs) {
    printf("%llu frames in %.3f s (%.1f frames/s), %llu dropped; frames in flight at most %zu "
           "(limit %zu)\n",
           (unsigned long long)h->frames_done, secs, secs > 0 ? (double)h->frames_done / secs : 0,
           (unsigned long long)h->frames_dropped, h->max_frames_in_flight, h->frame_limit);
    printf("  %-16s %-10s %10s %10s %11s %11s %11s %11s %13s   %s\n", "stage", "device", "in",
           "out", "host p50 us", "host p99 us", "dev p50 us", "dev p99 us", "h2d/d2h copies",
           "queue in front (depth max/cap, policy, drops)");
    for (size_t i = 0; i < h->n_stages; i++) {
        const kp_flow_stage_stats *s = &h->stages[i];
        char where[32];
        if (s->replicas > 1)
            snprintf(where, sizeof where, "%zu %s", s->replicas, s->source ? "streams" : "devices");
        else
            snprintf(where, sizeof where, "%s", s->device ? s->device : "-");
        char copies[32];
        snprintf(copies, sizeof copies, "%llu/%llu", (unsigned long long)s->copies.htod,
                 (unsigned long long)s->copies.dtoh);
        printf("  %-16s %-10s %10llu %10llu %11.1f %11.1f %11.1f %11.1f %13s", s->name, where,
               (unsigned long long)s->in, (unsigned long long)s->out, s->host_p50_us,
               s->host_p99_us, s->gpu_p50_us, s->gpu_p99_us, copies);
        if (i)
            printf("   %zu/%zu, %s, %llu", h->queues[i].max_depth, h->queues[i].capacity,
                   kp_queue_policy_str(h->queues[i].policy),
                   (unsigned long long)h->queues[i].drops);
        printf("\n");
    }
    printf("  bytes in flight peak %zu (budget %zu); frame buffers: pool hits %llu, misses %llu, "
           "%zu bytes; steady state: %s; counters consistent: %s\n",
           h->peak_bytes_in_flight, h->budget_bytes, (unsigned long long)h->pool_hits,
           (unsigned long long)h->pool_misses, h->device_bytes, h->steady ? "yes" : "no",
           h->consistent ? "yes" : "no");
    kpt_report_devices(h);
}

/* The library's JSON of the snapshot, with the run's seconds added. */
static int kpt_report_json(const char *path, const kp_flow_snapshot *h, double secs) {
    size_t need = 0;
    (void)kp_flow_health_json(h, NULL, 0, &need);
    char *text = need ? malloc(need) : NULL;
    json_t *root = NULL;
    if (text && kp_flow_health_json(h, text, need, &need) == KP_OK)
        root = json_loads(text, 0, NULL);
    free(text);
    if (root) json_object_set_new(root, "seconds", json_real(secs));
    int rc = root ? json_dump_file(root, path, JSON_INDENT(2)) : -1;
    json_decref(root);
    if (rc != 0) fprintf(stderr, "kpipe flow: --json %s: cannot write it\n", path);
    return rc == 0 ? 0 : 1;
}

int kpt_cmd_flow(int argc, char **argv) {
    const char *file = NULL, *device = NULL, *json = NULL, *trace = NULL, *dot = NULL, *v;
    bool quiet = false;
    int r;
    for (int i = 1; i < argc; i++) {
        if (kpt_is_help(argv[i])) {
            fputs(kpt_flow_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0) return 2;
            device = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--json", &v)) != 0) {
            if (r < 0) return 2;
            json = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--trace", &v)) != 0) {
            if (r < 0) return 2;
            trace = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--dot", &v)) != 0) {
            if (r < 0) return 2;
            dot = v;
        } else if (argv[i][0] == '-' || file) {
            fprintf(stderr, "kpipe flow: unexpected argument \"%s\"\n\n%s", argv[i],
                    kpt_flow_usage);
            return 2;
        } else {
            file = argv[i];
        }
    }
    if (!file) {
        fprintf(stderr, "kpipe flow: no flow file given\n\n%s", kpt_flow_usage);
        return 2;
    }
    if (!device) device = kpt_default_device();
    kp_device_t dev;
    kp_flow_t f = NULL;
    kp_status st = kp_device_open(device, &dev);
    if (st != KP_OK) return kpt_fail("flow", st);
    st = kpt_keep_error(kp_flow_create_from_file_traced(dev, file, trace ? 65536 : 0, &f));
    if (st == KP_OK && dot) st = kpt_keep_error(kp_flow_write_dot(f, dot));
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kpt_on_sigint;
    sigaction(SIGINT, &sa, &old);
    double t0 = kpt_now_us(), last_t = t0;
    uint64_t last_n = 0;
    bool live = !quiet && isatty(STDERR_FILENO);
    for (size_t i = 0; st == KP_OK && i < KP_FLOW_MAX_STAGES; i++) {
        kp_flow_remote_stats rs;
        if (kp_flow_remote(f, i, &rs) == KP_OK && rs.receiver)
            fprintf(stderr, "kpipe flow: stage %zu receives on %s\n", i, rs.address);
        else
            kp_clear_error();
    }
    if (st == KP_OK) st = kpt_keep_error(kp_flow_start(f));
    kp_flow_snapshot h;
    memset(&h, 0, sizeof h);
    /* poll the counters until every stage has stopped */
    while (st == KP_OK && kp_flow_health(f, &h) == KP_OK && h.running) {
        struct timespec ts = {0, 5 * 1000 * 1000}; /* the run's time to 5 ms */
        nanosleep(&ts, NULL);
        if (kpt_interrupted) (void)kp_flow_cancel(f);
        double now = kpt_now_us();
        if (live && now - last_t >= 250e3) {
            kpt_status_line(&h, (double)(h.frames_done - last_n) / ((now - last_t) * 1e-6));
            last_t = now;
            last_n = h.frames_done;
        }
    }
    if (f) {
        /* the detail is kept before the report below makes other calls */
        kp_status w = kp_flow_wait(f);
        if (st == KP_OK) st = kpt_keep_error(w);
    }
    double secs = (kpt_now_us() - t0) * 1e-6;
    if (live) fprintf(stderr, "\r%*s\r", 100, "");
    sigaction(SIGINT, &old, NULL);
    int rc = 0;
    if (f && kp_flow_health(f, &h) == KP_OK) {
        printf("%s on %s:\n", file, kp_device_name(dev));
        kpt_report(&h, secs);
        kpt_report_streams(f);
        kpt_report_remote(f, &h);
        if (json) rc = kpt_report_json(json, &h, secs);
        kp_status ts = trace ? kp_flow_write_trace(f, trace) : KP_OK;
        if (ts != KP_OK) { /* its own detail: a failed flow's is kept for below */
            fprintf(stderr, "kpipe flow --trace: %s: %s\n", kp_status_str(ts), kp_last_error());
            rc = 1;
        }
    }
    if (st != KP_OK && kpt_interrupted) {
        fprintf(stderr, "kpipe flow: cancelled (Ctrl-C)\n");
        rc = 130;
    } else if (st != KP_OK) {
        rc = kpt_fail("flow", st);
    }
    kp_flow_destroy(f);
    if (kp_video_built()) kp_video_pool_limit(0); /* idle NVDEC decoders go before the device */
    kp_device_close(dev);
    return rc;
}
