/* Shared by the commands: error reporting, and option parsing ("--name value"
 * or "--name=value"). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "tool-impl.h"

bool kpt_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

static char kpt_detail[1024];

kp_status kpt_error(kp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kpt_detail, sizeof kpt_detail, fmt, ap);
    va_end(ap);
    return st;
}

kp_status kpt_keep_error(kp_status st) {
    if (st != KP_OK && !kpt_detail[0])
        snprintf(kpt_detail, sizeof kpt_detail, "%s", kp_last_error());
    return st;
}

bool kpt_verbose;

/* The length of a public function's name and its ": " at p ("kp_flow_wait:
 * "), else 0. */
static size_t kpt_fn_prefix(const char *p) {
    if (strncmp(p, "kp_", 3) != 0) return 0;
    size_t n = 3;
    while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_') n++;
    return n > 3 && p[n] == ':' && p[n + 1] == ' ' ? n + 2 : 0;
}

/* The library's detail is a chain of the public calls a failure passed
 * through, each adding its name ("kp_flow_create_from_file: f.json:
 * $.stages[0]: kp_video_reader_open: cannot open ..."): what kpipe's own
 * developers need, but it buries what the user must fix. The names are
 * left out where they open a part of the chain; the file, the JSON path,
 * the stage and the cause stay in their order. */
const char *kpt_user_detail(const char *detail, char *buf, size_t len) {
    if (kpt_verbose || !len) return detail;
    size_t o = 0;
    bool part = true; /* at the start of a part of the chain */
    for (const char *p = detail; *p && o + 1 < len;) {
        size_t skip = part ? kpt_fn_prefix(p) : 0;
        if (skip) {
            p += skip;
            continue;
        }
        part = p[0] == ' ' && o > 0 && buf[o - 1] == ':';
        buf[o++] = *p++;
    }
    buf[o] = '\0';
    return buf;
}

void kpt_print_error(const char *cmd, kp_status st, const char *detail) {
    char buf[2048];
    const char *d = kpt_user_detail(detail ? detail : "", buf, sizeof buf);
    if (kpt_verbose || !*d)
        fprintf(stderr, "kpipe %s: %s%s%s\n", cmd, kp_status_str(st), *d ? ": " : "", d);
    else
        fprintf(stderr, "kpipe %s: %s\n", cmd, d);
}

const char *kpt_take_detail(char *buf, size_t len) {
    snprintf(buf, len, "%s", kpt_detail[0] ? kpt_detail : kp_last_error());
    kpt_detail[0] = '\0';
    return buf;
}

int kpt_fail(const char *cmd, kp_status st) {
    char detail[sizeof kpt_detail];
    kpt_print_error(cmd, st, kpt_take_detail(detail, sizeof detail));
    return 1;
}

/* One of a model option's words (a NULL-ended list), into *dest. */
static int kpt_model_choice(int argc, char **argv, int *i, const char *cmd, const char *name,
                            const char *const *words, const char **dest) {
    const char *v;
    int r = kpt_opt_value(argc, argv, i, name, &v);
    if (r <= 0) return r;
    for (size_t k = 0; words[k]; k++)
        if (strcmp(v, words[k]) == 0) {
            *dest = v;
            return 1;
        }
    fprintf(stderr, "kpipe %s: %s takes %s", cmd, name, words[0]);
    for (size_t k = 1; words[k]; k++)
        fprintf(stderr, "%s%s", words[k + 1] ? ", " : " or ", words[k]);
    fprintf(stderr, ", not \"%s\"\n", v);
    return -1;
}

/* --max, --fuse, --tune, --algo-cache and --precision: the model options
 * run, bench and validate share (kpt_model_max and kin, read by
 * kpt_pipeline_open). */
int kpt_model_option(int argc, char **argv, int *i, const char *cmd) {
    const char *v;
    int r;
    if ((r = kpt_opt_value(argc, argv, i, "--max", &v)) != 0) {
        if (r > 0) kpt_model_max = v;
        return r;
    }
    if ((r = kpt_opt_value(argc, argv, i, "--algo-cache", &v)) != 0) {
        if (r > 0) kpt_model_algo_cache = v;
        return r;
    }
    static const char *const on_off[] = {"on", "off", NULL};
    static const char *const precisions[] = {"fp32", "tf32", "fp16", NULL};
    if ((r = kpt_model_choice(argc, argv, i, cmd, "--fuse", on_off, &kpt_model_fuse)) != 0)
        return r;
    if ((r = kpt_model_choice(argc, argv, i, cmd, "--tune", on_off, &kpt_model_tune)) != 0)
        return r;
    return kpt_model_choice(argc, argv, i, cmd, "--precision", precisions, &kpt_model_precision);
}

int kpt_opt_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

bool kpt_parse_count(const char *opt, const char *text, long min, long max, long *out) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "%s: \"%s\" is not a whole number from %ld to %ld\n", opt, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool kpt_parse_mode(const char *text, int *mode) {
    if (strcmp(text, "graph") == 0)
        *mode = KP_EXEC_GRAPH;
    else if (strcmp(text, "stream") == 0)
        *mode = KP_EXEC_STREAM;
    else {
        fprintf(stderr, "--mode: \"%s\" is not graph or stream\n", text);
        return false;
    }
    return true;
}

/* The first registered backend that runs device kernels and has a device;
 * the host otherwise. */
const char *kpt_default_device(void) {
    const char *name;
    for (size_t i = 0; (name = kp_backend_name(i)) != NULL; i++)
        if (strcmp(kp_backend_find(name)->kernel_form, "host") != 0 &&
            kp_device_count(name, NULL, 0) > 0)
            return name;
    return "cpu";
}
