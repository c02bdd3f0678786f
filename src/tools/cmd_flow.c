/* kpipe flow: runs a flow file to end of stream, with its progress on
 * stderr (a live status line on a terminal, lines every few seconds with
 * --progress), and prints its health and the files it wrote at the end.
 * Ctrl-C cancels it. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "options.h"
#include "tool-impl.h"

static const char kpt_flow_usage[] =
    "usage: kpipe flow FLOW.json [--device D] [--json FILE] [--trace FILE] [--dot FILE]\n"
    "                  [--quiet | --progress[=SECONDS]]\n\n"
    "Runs the flow (\"kpipe_flow\": 1) to end of stream: stages on threads joined by\n"
    "bounded queues. At the end the health report is printed, and every file the\n"
    "run wrote (its sinks', --json, --trace, --dot) with its size. Ctrl-C cancels\n"
    "the flow (exit status 130). A stage's error exits 1 naming the stage.\n\n"
    "Progress, on stderr: frames made by the sources, frames/s, and where the sources\n"
    "know their length (synthetic and testsrc \"frames\", a y4m or video file's frame\n"
    "count) the total, percent done and time left; speed (times real time) where\n"
    "they know their frame rate. On a terminal a status line is redrawn 4 times a\n"
    "second; elsewhere (a pipe, a file) nothing is printed unless --progress asks.\n\n"
    "  --device D   cpu, cuda or cuda:N (default: cuda when present, else cpu)\n"
    "  --json FILE  also write the final health report as JSON\n"
    "  --trace FILE write a Chrome trace (chrome://tracing, Perfetto): one row per\n"
    "               stage, one slice per frame (the last 65536 stage runs)\n"
    "  --dot FILE   draw the flow's graph as Graphviz DOT before it runs\n"
    "  --progress[=SECONDS]\n"
    "               a progress line every SECONDS (default 5), a terminal or not,\n"
    "               and one at the end: for logs\n"
    "  --quiet      no progress at all\n\n"
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

/* --- how long the run is: what the sources will make ------------------------------- */
/* The flow's length as its sources know it, for percent, time left and
 * speed. The library does not say, so it is read from the flow file the
 * way the sources read it. */
typedef struct kpt_flow_length {
    uint64_t frames; /* every source's frames, every stream; 0: some source cannot say */
    double rate;     /* frames per second of real time, every stream; 0: some source has none */
} kpt_flow_length;

/* A y4m file's frames and frame rate: the header, then frames of a "FRAME"
 * line and 4:2:0 samples (what the y4m source reads). False where the file
 * is not so (FRAME lines with tags, say). */
static bool kpt_y4m_length(const char *path, uint64_t *frames, double *rate) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char line[256];
    bool ok = fgets(line, sizeof line, f) && strchr(line, '\n');
    struct stat st;
    ok = ok && fstat(fileno(f), &st) == 0;
    fclose(f);
    if (!ok || strncmp(line, "YUV4MPEG2 ", 10) != 0) return false;
    long long w = 0, h = 0, num = 0, den = 0,
              data = (long long)st.st_size - (long long)strlen(line);
    for (char *tok = strtok(line + 10, " \n"); tok; tok = strtok(NULL, " \n")) {
        if (tok[0] == 'W') w = atoll(tok + 1);
        if (tok[0] == 'H') h = atoll(tok + 1);
        if (tok[0] == 'F' && sscanf(tok + 1, "%lld:%lld", &num, &den) != 2) num = den = 0;
    }
    long long frame = 6 + w * h * 3 / 2;
    if (w <= 0 || h <= 0 || data < 0 || data % frame) return false;
    *frames = (uint64_t)(data / frame);
    *rate = num > 0 && den > 0 ? (double)num / (double)den : 0;
    return true;
}

/* A video file's frames and frame rate as its container says, read the
 * way the video source will (a reader on the host, decoding nothing). A
 * live input (a URL) has no length, and is not opened: that could wait. */
static bool kpt_video_length(kp_device_t *host, const char *path, uint64_t *frames, double *rate) {
    if (strstr(path, "://") || !kp_video_built()) return false;
    if (!*host && kp_device_open("cpu", host) != KP_OK) return false;
    kp_video_reader_config cfg = KP_VIDEO_READER_CONFIG_INIT;
    cfg.decoder = KP_VIDEO_DECODE_SOFTWARE;
    cfg.threads = 1;
    kp_video_reader_t r;
    kp_video_reader_info info;
    if (kp_video_reader_open(*host, path, &cfg, &r) != KP_OK) return false;
    kp_status st = kp_video_reader_get_info(r, &info);
    kp_video_reader_close(r);
    if (st != KP_OK || info.frames <= 0) return false;
    *frames = (uint64_t)info.frames;
    *rate = info.rate[0] > 0 && info.rate[1] > 0 ? (double)info.rate[0] / info.rate[1] : 0;
    return true;
}

/* One source stage's frames over all its streams, and their frame rate
 * together; false where it cannot say. "frames" caps each stream. */
static bool kpt_source_length(json_t *s, kp_device_t *host, uint64_t *frames, double *rate) {
    const char *kind = json_string_value(json_object_get(s, "source"));
    json_t *jf = json_object_get(s, "frames"), *js = json_object_get(s, "streams");
    uint64_t cap =
        json_is_integer(jf) && json_integer_value(jf) > 0 ? (uint64_t)json_integer_value(jf) : 0;
    uint64_t streams =
        json_is_integer(js) && json_integer_value(js) > 0 ? (uint64_t)json_integer_value(js) : 1;
    const char *path = json_string_value(json_object_get(s, "path"));
    json_t *paths = json_object_get(s, "paths");
    *frames = 0;
    *rate = 0;
    if (!kind) return false;
    if (!strcmp(kind, "synthetic") || !strcmp(kind, "testsrc")) {
        *frames = cap * streams;
        *rate = !strcmp(kind, "testsrc") ? 30.0 * (double)streams : 0; /* it stamps 30 frames/s */
        return cap > 0;
    }
    if (!strcmp(kind, "y4m")) {
        uint64_t n = 0;
        bool whole = path && kpt_y4m_length(path, &n, rate);
        if (json_is_true(json_object_get(s, "loop")) || !whole)
            *frames = cap; /* a loop runs for ever without "frames" */
        else
            *frames = cap && cap < n ? cap : n;
        return *frames > 0;
    }
    if (strcmp(kind, "video") != 0) return false; /* a remote queue: as long as its sender */
    size_t n_paths = json_is_array(paths) ? json_array_size(paths) : path ? (size_t)streams : 0;
    bool timed = true;
    for (size_t i = 0; i < n_paths; i++) {
        const char *p = json_is_array(paths) ? json_string_value(json_array_get(paths, i)) : path;
        uint64_t n;
        double r;
        if (!p || !kpt_video_length(host, p, &n, &r)) return false;
        *frames += cap && cap < n ? cap : n;
        *rate += r;
        timed = timed && r > 0;
    }
    if (!timed) *rate = 0;
    return n_paths > 0;
}

static kpt_flow_length kpt_flow_length_of(const char *file) {
    kpt_flow_length len = {0, 0};
    json_t *root = json_load_file(file, 0, NULL);
    json_t *stages = json_object_get(root, "stages"), *s;
    kp_device_t host = NULL;
    bool known = true, timed = true;
    size_t i;
    json_array_foreach(stages, i, s) {
        if (!json_object_get(s, "source")) continue;
        uint64_t n = 0;
        double r = 0;
        known = known && kpt_source_length(s, &host, &n, &r);
        timed = timed && r > 0;
        len.frames += n;
        len.rate += r;
    }
    kp_device_close(host);
    kp_clear_error(); /* a probe that failed is no error of the run */
    json_decref(root);
    if (!known) len.frames = 0;
    if (!timed) len.rate = 0;
    return len;
}

/* --- the progress line ------------------------------------------------------------- */
typedef struct kpt_progress {
    kpt_flow_length len;
    double period_us;  /* between lines; 0: a live line, redrawn in place */
    double t0, last_t; /* the run's start and the last line, host clock (us) */
    uint64_t last_made;
} kpt_progress;

/* The frames the sources have passed on so far. */
static uint64_t kpt_frames_made(const kp_flow_snapshot *h) {
    uint64_t n = 0;
    for (size_t i = 0; i < h->n_stages; i++)
        if (h->stages[i].source) n += h->stages[i].out;
    return n;
}

/* h:mm:ss of whole seconds (the caller rounds: time spent down, time left up). */
static const char *kpt_clock_str(double secs, char *buf, size_t len) {
    long long s = (long long)secs;
    snprintf(buf, len, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}

/* "frame=1240/2000 62% fps=512.3 speed=17.1x elapsed=0:00:02 eta=0:00:01
 * drops=0 queues=1/4,2/2 device=12.0MiB": key=value, as ffmpeg's, so that
 * a log can be read by eye and by grep. Frames are counted where the
 * sources pass them on, as the length is known there (a fan-out would count
 * a frame twice at the sinks). fps is over the last interval (the whole run
 * in the last line), time left at the run's average rate. */
static void kpt_progress_line(FILE *out, const kp_flow_snapshot *h, kpt_progress *p, double now,
                              bool last) {
    uint64_t made = kpt_frames_made(h);
    double secs = (now - p->t0) * 1e-6, dt = (now - p->last_t) * 1e-6;
    double fps = last ? (secs > 0 ? (double)made / secs : 0)
                      : (dt > 0 ? (double)(made - p->last_made) / dt : 0);
    char t[32];
    fprintf(out, "frame=%llu", (unsigned long long)made);
    if (p->len.frames) {
        uint64_t done = made < p->len.frames ? made : p->len.frames;
        fprintf(out, "/%llu %.0f%%", (unsigned long long)p->len.frames,
                floor(100.0 * (double)done / (double)p->len.frames));
    }
    fprintf(out, " fps=%.1f", fps);
    if (p->len.rate > 0 && secs > 0)
        fprintf(out, " speed=%.3gx", (double)made / p->len.rate / secs);
    fprintf(out, " elapsed=%s", kpt_clock_str(floor(secs), t, sizeof t));
    if (p->len.frames && made && !last && made < p->len.frames)
        fprintf(
            out, " eta=%s",
            kpt_clock_str(ceil((double)(p->len.frames - made) * secs / (double)made), t, sizeof t));
    fprintf(out, " drops=%llu queues=", (unsigned long long)h->frames_dropped);
    for (size_t i = 0, n = 0; i < h->n_stages; i++)
        if (!h->stages[i].source) /* a source has no queue in front */
            fprintf(out, "%s%zu/%zu", n++ ? "," : "", h->queues[i].depth, h->queues[i].capacity);
    fprintf(out, " device=%.1fMiB", (double)h->device_bytes / 1048576.0);
    p->last_t = now;
    p->last_made = made;
}

/* Called as the run is polled: the live line 4 times a second, or a line
 * each period. */
static void kpt_progress_tick(const kp_flow_snapshot *h, kpt_progress *p, double now) {
    if (!p->period_us) {
        if (now - p->last_t < 250e3) return;
        fputs("\r", stderr);
        kpt_progress_line(stderr, h, p, now, false);
        fputs("\033[K", stderr); /* clears what a longer line before left */
        fflush(stderr);
    } else if (now - p->last_t >= p->period_us) {
        kpt_progress_line(stderr, h, p, now, false);
        fputs("\n", stderr);
    }
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
        bool ipc = strstr(r.lane, "CUDA IPC") != NULL;
        const double per = r.frames ? 1e-3 / (double)r.frames : 0;
        printf(", waited %.1f us a frame %s", (double)r.wait_ns * per,
               r.receiver ? "for the next" : "for a slot and credit");
        if (r.receiver && ipc)
            printf(" and %.1f us for the sender's copy", (double)r.ipc_wait_ns * per);
        printf("%s%s%s\n", r.zero_copy ? (r.direct ? ", device memory, no copy" : ", no copy")
                           : ipc        ? ", device to device"
                           : r.direct   ? ", from device memory"
                                        : ", through pinned host memory",
               r.lane[0] ? ", over " : "", r.lane);
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

int kpt_fail_flow(const char *cmd, kp_status st, const char *file) {
    char detail[1024], named[1200];
    const char *d = kpt_take_detail(detail, sizeof detail), *at = strstr(d, "$.stages[");
    json_t *root = at ? json_load_file(file, 0, NULL) : NULL;
    char *end;
    unsigned long i = at ? strtoul(at + 9, &end, 10) : 0;
    json_t *stage = root ? json_array_get(json_object_get(root, "stages"), i) : NULL;
    const char *name = json_string_value(json_object_get(stage, "name"));
    if (name && *end == ']' && strncmp(end + 1, " (stage", 7) != 0) {
        snprintf(named, sizeof named, "%.*s (stage \"%s\")%s", (int)(end + 1 - d), d, name,
                 end + 1);
        d = named;
    }
    kpt_print_error(cmd, st, d);
    json_decref(root);
    return 1;
}

/* --- the files the run wrote -------------------------------------------------------- */
typedef struct kpt_written {
    char path[1024];
    char what[128]; /* who wrote it: "sink \"write\"", "--json" */
} kpt_written;

typedef struct kpt_files {
    kpt_written *v;
    size_t n, cap;
    struct timespec since; /* files not modified since the run began are not its */
} kpt_files;

/* Adds a file that the run may have written; one written by several sinks
 * (a "{stream}" path that a split shares out) names them all. */
static void kpt_files_add(kpt_files *f, const char *path, const char *what) {
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->v[i].path, path) == 0) {
            size_t used = strlen(f->v[i].what);
            if (!strstr(f->v[i].what, what))
                snprintf(f->v[i].what + used, sizeof f->v[i].what - used, ", %s", what);
            return;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        kpt_written *v = realloc(f->v, cap * sizeof *v);
        if (!v) return; /* the list is a courtesy: a short one beats a failed run */
        f->v = v;
        f->cap = cap;
    }
    snprintf(f->v[f->n].path, sizeof f->v[f->n].path, "%s", path);
    snprintf(f->v[f->n].what, sizeof f->v[f->n].what, "%s", what);
    f->n++;
}

/* The sinks' files, from the flow file: a video sink's "{stream}" stands
 * for each stream's number, as the sink writes them. */
static void kpt_files_of_sinks(kpt_files *f, const char *file, kp_flow_t flow) {
    json_t *root = json_load_file(file, 0, NULL), *s;
    size_t i, n_streams = 0;
    kp_flow_stream_stats *streams = NULL;
    if (kp_flow_streams(flow, NULL, 0, &n_streams) == KP_OK && n_streams &&
        (streams = calloc(n_streams, sizeof *streams)) != NULL &&
        kp_flow_streams(flow, streams, n_streams, &n_streams) != KP_OK)
        n_streams = 0;
    kp_clear_error();
    json_array_foreach(json_object_get(root, "stages"), i, s) {
        const char *kind = json_string_value(json_object_get(s, "sink"));
        const char *path = json_string_value(json_object_get(s, "path"));
        const char *name = json_string_value(json_object_get(s, "name"));
        char what[96], one[1024];
        if (!kind || !path) continue;
        snprintf(what, sizeof what, "sink \"%s\"", name ? name : "?");
        const char *key = strcmp(kind, "video") == 0 ? strstr(path, "{stream}") : NULL;
        if (!key) kpt_files_add(f, path, what);
        for (size_t k = 0; key && k < n_streams; k++) {
            snprintf(one, sizeof one, "%.*s%u%s", (int)(key - path), path, streams[k].stream,
                     key + strlen("{stream}"));
            kpt_files_add(f, one, what);
        }
    }
    free(streams);
    json_decref(root);
}

/* "files written:" with each file's size; files the run did not touch
 * (a sink that got no frame, a run that failed first) are left out. */
static void kpt_files_report(const kpt_files *f) {
    size_t shown = 0;
    for (size_t i = 0; i < f->n; i++) {
        struct stat st;
        if (stat(f->v[i].path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        /* file times come from a coarser clock than the run's start: a margin */
        double age = (double)(f->since.tv_sec - st.st_mtim.tv_sec) +
                     (double)(f->since.tv_nsec - st.st_mtim.tv_nsec) * 1e-9;
        if (age > 0.05) continue;
        if (!shown++) printf("files written:\n");
        printf("  %s: %lld bytes", f->v[i].path, (long long)st.st_size);
        if (st.st_size >= 10 << 20)
            printf(", %.1f MiB", (double)st.st_size / 1048576.0);
        else if (st.st_size >= 10 << 10)
            printf(", %.1f KiB", (double)st.st_size / 1024.0);
        printf(" (%s)\n", f->v[i].what);
    }
}

typedef struct kpt_flow_args {
    const char *file, *device, *json, *trace, *dot;
    bool quiet;
    double period_s; /* --progress: seconds between lines; 0: none asked for */
} kpt_flow_args;

/* 0 ok, -1 help printed, else the exit status. */
static int kpt_flow_parse(int argc, char **argv, kpt_flow_args *a) {
    const char *v;
    int r;
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        if (kpt_is_help(argv[i])) {
            fputs(kpt_flow_usage, stdout);
            return -1;
        }
        if (strcmp(argv[i], "--quiet") == 0) {
            a->quiet = true;
        } else if (strcmp(argv[i], "--progress") == 0) {
            a->period_s = 5;
        } else if (strncmp(argv[i], "--progress=", 11) == 0) {
            char *end;
            a->period_s = strtod(argv[i] + 11, &end);
            if (end == argv[i] + 11 || *end || !(a->period_s >= 0.1 && a->period_s <= 86400)) {
                fprintf(stderr,
                        "kpipe flow: --progress=SECONDS takes 0.1 to 86400 seconds, "
                        "not \"%s\"\n",
                        argv[i] + 11);
                return 2;
            }
        } else if ((r = kpt_opt_value(argc, argv, &i, "--device", &v)) != 0) {
            if (r < 0) return 2;
            a->device = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--json", &v)) != 0) {
            if (r < 0) return 2;
            a->json = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--trace", &v)) != 0) {
            if (r < 0) return 2;
            a->trace = v;
        } else if ((r = kpt_opt_value(argc, argv, &i, "--dot", &v)) != 0) {
            if (r < 0) return 2;
            a->dot = v;
        } else if (argv[i][0] == '-' || a->file) {
            fprintf(stderr, "kpipe flow: unexpected argument \"%s\"\n\n%s", argv[i],
                    kpt_flow_usage);
            return 2;
        } else {
            a->file = argv[i];
        }
    }
    if (a->quiet && a->period_s > 0) {
        fprintf(stderr, "kpipe flow: --quiet and --progress ask for opposite things: "
                        "give one\n");
        return 2;
    }
    if (!a->file) {
        fprintf(stderr, "kpipe flow: no flow file given\n\n%s", kpt_flow_usage);
        return 2;
    }
    if (!a->device) a->device = kpt_default_device();
    return 0;
}

/* Remote queues' receiving ends say where they listen before the run. */
static void kpt_say_receivers(kp_flow_t f) {
    for (size_t i = 0; i < KP_FLOW_MAX_STAGES; i++) {
        kp_flow_remote_stats rs;
        if (kp_flow_remote(f, i, &rs) == KP_OK && rs.receiver)
            fprintf(stderr, "kpipe flow: stage %zu receives on %s\n", i, rs.address);
        else
            kp_clear_error();
    }
}

/* Starts the flow and polls its counters until every stage has stopped,
 * showing progress when `show`; a Ctrl-C cancels it. */
static kp_status kpt_flow_run(kp_flow_t f, kpt_progress *p, bool show, kp_flow_snapshot *h) {
    kp_status st = kpt_keep_error(kp_flow_start(f));
    memset(h, 0, sizeof *h);
    while (st == KP_OK && kp_flow_health(f, h) == KP_OK && h->running) {
        struct timespec ts = {0, 5 * 1000 * 1000}; /* the run's time to 5 ms */
        nanosleep(&ts, NULL);
        if (kpt_interrupted) (void)kp_flow_cancel(f);
        if (show) kpt_progress_tick(h, p, kpt_now_us());
    }
    /* the detail is kept before the report makes other calls */
    kp_status w = kp_flow_wait(f);
    return st == KP_OK ? kpt_keep_error(w) : st;
}

/* The report on stdout: health, streams, remote ends, --json and --trace,
 * then the files written. 0, or 1 where --json or --trace failed. */
static int kpt_flow_report(kp_flow_t f, kp_device_t dev, const kpt_flow_args *a, double secs,
                           kpt_files *files) {
    kp_flow_snapshot h;
    int rc = 0;
    if (kp_flow_health(f, &h) != KP_OK) return 0;
    printf("%s on %s:\n", a->file, kp_device_name(dev));
    kpt_report(&h, secs);
    kpt_report_streams(f);
    kpt_report_remote(f, &h);
    if (a->json) rc = kpt_report_json(a->json, &h, secs);
    kp_status ts = a->trace ? kp_flow_write_trace(f, a->trace) : KP_OK;
    if (ts != KP_OK) { /* its own detail: a failed flow's is kept for later */
        kpt_print_error("flow --trace", ts, kp_last_error());
        rc = 1;
    }
    kpt_files_of_sinks(files, a->file, f);
    if (a->dot) kpt_files_add(files, a->dot, "--dot");
    if (a->json) kpt_files_add(files, a->json, "--json");
    if (a->trace) kpt_files_add(files, a->trace, "--trace");
    kpt_files_report(files);
    return rc;
}

int kpt_cmd_flow(int argc, char **argv) {
    kpt_flow_args a;
    int rc = kpt_flow_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    kp_device_t dev;
    kp_flow_t f = NULL;
    kpt_files files = {NULL, 0, 0, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &files.since);
    kp_status st = kp_device_open(a.device, &dev);
    if (st != KP_OK) return kpt_fail("flow", st);
    st = kpt_keep_error(kp_flow_create_from_file_traced(dev, a.file, a.trace ? 65536 : 0, &f));
    if (st == KP_OK && a.dot) st = kpt_keep_error(kp_flow_write_dot(f, a.dot));
    bool live = !a.quiet && !a.period_s && isatty(STDERR_FILENO), lines = a.period_s > 0;
    kpt_progress p = {.period_us = a.period_s * 1e6};
    if (st == KP_OK && (live || lines)) p.len = kpt_flow_length_of(a.file);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kpt_on_sigint;
    sigaction(SIGINT, &sa, &old);
    if (st == KP_OK) kpt_say_receivers(f);
    p.t0 = p.last_t = kpt_now_us();
    kp_flow_snapshot h;
    if (st == KP_OK) st = kpt_flow_run(f, &p, live || lines, &h);
    double now = kpt_now_us(), secs = (now - p.t0) * 1e-6;
    if (live) fputs("\r\033[K", stderr);
    if (lines && f && kp_flow_health(f, &h) == KP_OK) {
        kpt_progress_line(stderr, &h, &p, now, true); /* a log ends with the final count */
        fputs("\n", stderr);
    }
    sigaction(SIGINT, &old, NULL);
    if (f) rc = kpt_flow_report(f, dev, &a, secs, &files);
    if (st != KP_OK && kpt_interrupted) {
        fprintf(stderr, "kpipe flow: cancelled (Ctrl-C)\n");
        rc = 130;
    } else if (st != KP_OK) {
        rc = kpt_fail_flow("flow", st, a.file);
    }
    free(files.v);
    kp_flow_destroy(f);
    if (kp_video_built()) kp_video_pool_limit(0); /* idle NVDEC decoders go before the device */
    kp_device_close(dev);
    return rc;
}
